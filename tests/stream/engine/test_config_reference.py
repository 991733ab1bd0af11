"""Generated documentation cannot drift from the config schema."""

from ratiowatch.stream.engine.config_reference import ROOT, with_reference


def test_readme_config_reference_is_the_generated_one():
    readme = (ROOT / "README.md").read_text()
    assert readme == with_reference(readme), "README config reference is stale: run `python -m ratiowatch.stream.engine.config_reference`"


def test_readme_starts_with_the_two_newcomer_commands():
    head = "\n".join((ROOT / "README.md").read_text().splitlines()[:20])
    assert "make demo" in head and "make test" in head

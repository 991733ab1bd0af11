"""Generated documentation cannot drift from the config schema."""

from ratiowatch.stream.engine.config_reference import REFERENCE, ROOT, reference_text


def test_config_reference_is_the_generated_one():
    assert REFERENCE.read_text() == reference_text(), (
        "configs/REFERENCE.md is stale: run `python -m ratiowatch.stream.engine.config_reference`")


def test_readme_links_the_config_reference():
    assert "configs/REFERENCE.md" in (ROOT / "README.md").read_text()


def test_readme_starts_with_the_two_newcomer_commands():
    head = "\n".join((ROOT / "README.md").read_text().splitlines()[:20])
    assert "make demo" in head and "make test" in head

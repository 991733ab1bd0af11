"""The README tells the truth: each library example runs on its own and prints what it shows, and the
quoted demo output is what `ratiowatch demo` prints now."""

from __future__ import annotations

import doctest
import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def _python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_readme_has_library_examples():
    assert len(_python_blocks()) >= 4
    assert all(">>> " in block for block in _python_blocks())


@pytest.mark.parametrize("index", range(len(_python_blocks())))
def test_readme_example_runs_on_its_own(index):
    block = _python_blocks()[index]
    test = doctest.DocTestParser().get_doctest(block, {}, f"README example {index + 1}", str(README), 0)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    runner.run(test)
    assert runner.failures == 0, f"README example {index + 1} does not print what it shows"


def test_readme_quotes_the_demo_output_of_the_current_code():
    quoted = re.search(r"<!-- DEMO-OUTPUT:BEGIN.*?```\n(.*?)```", README.read_text(), flags=re.S).group(1)
    out = subprocess.run([sys.executable, "-m", "ratiowatch.stream.commands.cli", "demo", "--no-plot"],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    fresh = [line for line in out.stdout.splitlines() if line.startswith(("streaming", "[t="))]
    assert quoted.strip().splitlines() == fresh


def test_readme_names_every_daemon_metric():
    from ratiowatch.connectors.metrics import Metrics

    names = {m.name for m in Metrics().registry.collect()}
    text = README.read_text()
    # prometheus_client names a counter without its _total suffix
    missing = [n for n in names if f"`{n}`" not in text and f"`{n}_total" not in text and f"`{n}{{" not in text]
    assert len(names) >= 9 and not missing, missing

"""Installed, ratiowatch is one import namespace: nothing but ``ratiowatch`` at the wheel's top level,
and ``import ratiowatch`` works from a folder that holds packages of its own called ``core`` and
``stream``."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _declared_packages() -> set[str]:
    return set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])


def test_every_package_folder_is_declared():
    # the package-dir mapping hides subpackages from discovery: a folder left out of the list would
    # be missing from the wheel while every test run from the source tree still passed
    found = {"ratiowatch"}
    for top in ("core", "stream", "connectors"):
        for init in (REPO / top).rglob("__init__.py"):
            rel = init.parent.relative_to(REPO).as_posix().replace("/", ".")
            found.add("ratiowatch." + rel)
    assert found == _declared_packages()


def test_package_code_imports_only_through_the_ratiowatch_namespace():
    bad = []
    for top in ("ratiowatch", "core", "stream", "connectors"):
        for path in (REPO / top).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                names = []
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                bad += [f"{path.relative_to(REPO)}: {n}" for n in names
                        if n.split(".")[0] in {"core", "stream", "connectors"}]
    assert bad == []


@pytest.mark.slow
def test_wheel_installs_one_top_level_package_that_imports_beside_a_local_core(tmp_path):
    dist = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(REPO)],
                   check=True, cwd=tmp_path)
    (wheel,) = dist.glob("ratiowatch-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == {"ratiowatch"}
    assert "ratiowatch/py.typed" in names
    assert {p.replace(".", "/") + "/__init__.py" for p in _declared_packages()} <= set(names)

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    py = venv / "bin" / "python"
    site = Path(subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(site)  # a pure-Python wheel installs by unpacking; no network, no pip needed
    # the dependencies (numpy, numba, ...) from the test environment, appended after the venv's own
    # site-packages; a path listed in a .pth file is not scanned for .pth files itself, so the test
    # environment's editable install of ratiowatch stays out of this interpreter
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")

    user = tmp_path / "project"
    for clash in ("core", "stream", "connectors"):
        (user / clash).mkdir(parents=True)
        (user / clash / "__init__.py").write_text("raise ImportError('the user\\'s own package')\n")
    code = (
        "import json, numpy as np, ratiowatch\n"
        "from ratiowatch import ChangePointDetector, fit_ulsif\n"
        "x = np.r_[np.zeros(150), np.full(150, 4.0)] + np.random.default_rng(1).normal(size=300)\n"
        "print(json.dumps([ratiowatch.__file__, ratiowatch.__version__, ratiowatch.detect(x)]))\n"
    )
    out = subprocess.run([str(py), "-c", code], cwd=user, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    where, version, cps = json.loads(out.stdout)
    assert Path(where).is_relative_to(site)
    assert version == tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert len(cps) == 1 and abs(cps[0] - 150) <= 5
    # and the user's own `core` is still theirs
    clash = subprocess.run([str(py), "-c", "import core"], cwd=user, capture_output=True, text=True)
    assert "the user's own package" in clash.stderr


def test_an_export_whose_module_fails_to_import_says_why(monkeypatch):
    # an AttributeError raised while importing an export's module (a dependency too old for an
    # attribute the module uses) read as "cannot import name 'X' from 'ratiowatch'", its cause dropped
    import ratiowatch

    def fails(name):
        raise AttributeError("module 'river.base' has no attribute 'AnomalyDetector'")

    monkeypatch.setattr(ratiowatch.importlib, "import_module", fails)
    with pytest.raises(ImportError, match="ratiowatch.stream.detectors.changepoint .*AnomalyDetector"):
        ratiowatch.__getattr__("ChangePointDetector")

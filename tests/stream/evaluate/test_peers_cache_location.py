"""Where ``eval --peers`` caches claspy's results: ``.peers_cache/`` in a ratiowatch checkout, the
user's cache directory for an installed package (never the package's own folder, which may be
read-only), ``$RATIOWATCH_PEERS_CACHE`` above both; a cache that cannot be written skips the claspy
peers with a note naming ``RATIOWATCH_PEERS_CACHE`` instead of aborting the evaluation."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from ratiowatch.stream.evaluate import peers as P

ROOT = Path(__file__).resolve().parents[3]

FAKE_CLASPY = {
    "claspy/__init__.py": "",
    "claspy-0.2.8.dist-info/METADATA": "Metadata-Version: 2.1\nName: claspy\nVersion: 0.2.8\n",
    "claspy/segmentation.py": """
        class BinaryClaSPSegmentation:
            def __init__(self, n_jobs=-1):
                pass
            def fit_predict(self, x):
                return [len(x) // 2]
    """,
}


@pytest.fixture
def no_cache_env(monkeypatch, tmp_path):
    monkeypatch.delenv(P.CACHE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))


def _module_at(monkeypatch, folder: Path) -> None:
    """Make the module believe it lives in ``folder`` (``<folder>/stream/evaluate/peers.py``)."""
    here = folder / "stream" / "evaluate" / "peers.py"
    here.parent.mkdir(parents=True, exist_ok=True)
    monkeypatch.setattr(P, "__file__", str(here))


def test_a_checkout_caches_in_its_peers_cache_folder(no_cache_env):
    assert P.checkout_root() == ROOT
    assert P.cache_dir() == ROOT / ".peers_cache"


def test_an_installed_package_caches_under_xdg_cache_home(no_cache_env, monkeypatch, tmp_path):
    _module_at(monkeypatch, tmp_path / "venv" / "lib" / "python3.11" / "site-packages" / "ratiowatch")
    assert P.checkout_root() is None
    assert P.cache_dir() == tmp_path / "xdg" / "ratiowatch" / "peers"


def test_without_xdg_cache_home_the_installed_cache_is_under_dot_cache(monkeypatch, tmp_path):
    monkeypatch.delenv(P.CACHE_ENV, raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    _module_at(monkeypatch, tmp_path / "site-packages" / "ratiowatch")
    assert P.cache_dir() == tmp_path / "home" / ".cache" / "ratiowatch" / "peers"


def test_an_install_in_a_venv_inside_another_project_is_not_a_checkout(no_cache_env, monkeypatch, tmp_path):
    other = tmp_path / "other-project"
    other.mkdir()
    (other / "pyproject.toml").write_text('[project]\nname = "other"\n')
    _module_at(monkeypatch, other / ".venv" / "lib" / "python3.11" / "site-packages" / "ratiowatch")
    assert P.checkout_root() is None
    assert P.cache_dir() == tmp_path / "xdg" / "ratiowatch" / "peers"


def test_a_folder_whose_pyproject_is_ratiowatchs_is_a_checkout(no_cache_env, monkeypatch, tmp_path):
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "ratiowatch"\n')
    _module_at(monkeypatch, tmp_path)
    assert P.cache_dir() == tmp_path / ".peers_cache"


def test_the_environment_variable_wins_everywhere(monkeypatch, tmp_path):
    monkeypatch.setenv(P.CACHE_ENV, str(tmp_path / "mine"))
    assert P.cache_dir() == tmp_path / "mine"
    _module_at(monkeypatch, tmp_path / "site-packages" / "ratiowatch")
    assert P.cache_dir() == tmp_path / "mine"


def test_a_cache_that_cannot_be_written_skips_claspy_with_a_note_naming_the_variable(monkeypatch, tmp_path):
    for rel, src in FAKE_CLASPY.items():
        f = tmp_path / "fake" / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(textwrap.dedent(src))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "fake"))
    monkeypatch.setattr(P, "peers_python", lambda: Path(sys.executable))
    blocker = tmp_path / "a-file"
    blocker.write_text("")  # a folder under a file cannot be made, even by root
    monkeypatch.setenv(P.CACHE_ENV, str(blocker / "cache"))

    results, notes = P.run_peers({"a": np.arange(100.0)}, ["zero", "claspy"])
    assert results == {"zero": {"a": {"change_points": [], "seconds": 0.0, "error": None}}}
    assert len(notes) == 1 and notes[0].startswith(f"claspy peer failed: cannot write its result cache {blocker}")
    assert notes[0].endswith(f"set {P.CACHE_ENV} to a writable folder")

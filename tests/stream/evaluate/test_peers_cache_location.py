"""Where ``eval --peers`` caches claspy's results: ``.peers_cache/`` in a ratiowatch checkout, the
user's cache directory for an installed package (never the package's own folder, which may be
read-only), ``$RATIOWATCH_PEERS_CACHE`` above both (a cache that cannot be written: test_peers.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ratiowatch.stream.evaluate import peers as P

ROOT = Path(__file__).resolve().parents[3]


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

"""An explicit ``NUMBA_CACHE_DIR`` that cannot be used (cannot be created, not writable) is said once
on stderr and replaced by the cache directory chosen without it; ``cache_location()`` (what
``ratiowatch warmup`` prints) names the directory actually used."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ratiowatch import numba_cache
from ratiowatch.numba_cache import ENV, configure_cache

MODULE = Path(numba_cache.__file__).resolve()
KERNEL = "from numba import njit\n\n\n@njit(cache=True)\ndef f(x):\n    return x + 1\n"


def _unwritable(tmp_path: Path, name: str = "a-file") -> Path:
    """A directory that cannot be created, even by root: its parent is a file."""
    blocker = tmp_path / name
    blocker.write_text("")
    return blocker / "numba"


@pytest.fixture
def fresh_warning(monkeypatch):
    monkeypatch.setattr(numba_cache, "_warned", False)


def test_an_unusable_explicit_cache_dir_falls_back_to_the_user_cache_dir_with_one_warning(tmp_path, capsys,
                                                                                         fresh_warning):
    bad = _unwritable(tmp_path)
    env = {ENV: str(bad), "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    got = configure_cache(environ=env, package_dir=_unwritable(tmp_path, "pkg-file"))
    assert got == env[ENV] == str(tmp_path / "xdg" / "ratiowatch" / "numba")
    err = capsys.readouterr().err
    assert err == (f"ratiowatch: NUMBA_CACHE_DIR={bad} cannot be used (it cannot be created, or is not a "
                   f"writable directory); caching the numba kernels in {got} instead\n")
    env[ENV] = str(bad)
    configure_cache(environ=env, package_dir=_unwritable(tmp_path, "pkg-file"))
    assert capsys.readouterr().err == ""  # said once per process


def test_an_unusable_explicit_cache_dir_with_a_writable_package_leaves_numbas_default(tmp_path, capsys,
                                                                                     fresh_warning):
    env = {ENV: str(_unwritable(tmp_path)), "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    assert configure_cache(environ=env, package_dir=tmp_path / "pkg") is None
    assert ENV not in env
    assert "next to the installed package (__pycache__) instead" in capsys.readouterr().err


def test_a_usable_explicit_cache_dir_is_kept_without_being_created(tmp_path, capsys):
    mine = tmp_path / "not-yet" / "numba"  # numba creates it when it first writes there
    env = {ENV: str(mine)}
    assert configure_cache(environ=env, package_dir=_unwritable(tmp_path)) == str(mine)
    assert env == {ENV: str(mine)} and not mine.exists()
    assert capsys.readouterr().err == ""


def test_kernels_load_from_the_fallback_and_cache_location_names_it(tmp_path):
    """End to end, in a fresh process: a cached kernel whose sources' folder cannot hold a cache,
    no writable home, and a NUMBA_CACHE_DIR under a regular file."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "__pycache__").write_text("")  # a file: numba cannot cache next to the source
    (src / "kern.py").write_text(KERNEL)
    shutil.copy(MODULE, src / "rw_numba_cache.py")  # on its own: no package import runs it first
    bad = _unwritable(tmp_path)
    xdg = tmp_path / "xdg"
    code = ("import os, sys; sys.path.insert(0, sys.argv[1])\n"
            "import rw_numba_cache as m\n"
            "m.configure_cache(package_dir=sys.argv[1] + '/__pycache__/x')\n"
            "import kern; print(kern.f(1)); print(m.cache_location())\n")
    env = {k: v for k, v in os.environ.items() if k != ENV}
    env.update({ENV: str(bad), "HOME": str(_unwritable(tmp_path, "home-file")), "XDG_CACHE_HOME": str(xdg)})
    proc = subprocess.run([sys.executable, "-c", code, str(src)], capture_output=True, text=True, env=env,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr and "no locator available" not in proc.stderr
    assert f"NUMBA_CACHE_DIR={bad} cannot be used" in proc.stderr
    cache = xdg / "ratiowatch" / "numba"
    assert proc.stdout.splitlines() == ["2", str(cache)]
    assert list(cache.rglob("*.nbi")), "the kernel was not cached where cache_location() says"
    assert not bad.parent.is_dir()


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0 or shutil.which("setpriv") is None,
                    reason="runs the installed package as another user: needs root and setpriv")
def test_an_import_by_a_user_without_a_writable_install_or_cache_dir_reports_the_fallback(tmp_path):
    """The read-only install as an unprivileged user: ``import ratiowatch`` chooses the cache."""
    import tempfile

    if os.stat(MODULE.parent).st_mode & 0o002:
        pytest.skip("the installed package is writable by everyone")
    top = Path(tempfile.mkdtemp(prefix="rw-cache-test-"))  # pytest's tmp_path is private to root
    try:
        os.chmod(top, 0o755)
        xdg = top / "xdg"
        xdg.mkdir()
        os.chmod(xdg, 0o777)
        code = "from ratiowatch.numba_cache import cache_location; print(cache_location())"
        env = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "XDG_CACHE_HOME": str(xdg),
               ENV: str(_unwritable(tmp_path))}
        proc = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable,
                               "-c", code], capture_output=True, text=True, env=env, cwd="/", timeout=120)
        assert proc.returncode == 0, proc.stderr
        assert "Traceback" not in proc.stderr and f"NUMBA_CACHE_DIR={env[ENV]} cannot be used" in proc.stderr
        assert proc.stdout.strip() == str(xdg / "ratiowatch" / "numba")
    finally:
        shutil.rmtree(top)

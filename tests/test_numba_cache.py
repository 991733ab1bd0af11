"""Where the compiled kernels go, the one-line note while they compile, and ``ratiowatch warmup``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from cli_util import cli, jump_rows, write
from ratiowatch.numba_cache import ENV, configure_cache, user_cache_dir


def _unwritable(tmp_path: Path) -> Path:
    """A directory that cannot be created, even by root: its parent is a file."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    return blocker / "pkg"


def test_an_explicit_cache_dir_that_can_be_made_always_wins(tmp_path):
    where = str(tmp_path / "somewhere")  # not made yet: creatable is enough
    env = {ENV: where}
    assert configure_cache(environ=env, package_dir=_unwritable(tmp_path)) == where
    assert env == {ENV: where}


def test_a_writable_package_keeps_numbas_default(tmp_path):
    env = {"XDG_CACHE_HOME": str(tmp_path / "xdg")}
    assert configure_cache(environ=env, package_dir=tmp_path / "pkg") is None
    assert ENV not in env


def test_a_read_only_package_caches_under_the_user_cache_dir(tmp_path):
    env = {"XDG_CACHE_HOME": str(tmp_path / "xdg")}
    got = configure_cache(environ=env, package_dir=_unwritable(tmp_path))
    assert got == env[ENV] == str(tmp_path / "xdg" / "ratiowatch" / "numba")
    assert Path(got).is_dir()


def test_without_a_writable_home_the_cache_goes_to_the_temp_dir(tmp_path, monkeypatch):
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path / "tmp"))
    env = {"XDG_CACHE_HOME": str(_unwritable(tmp_path))}
    got = configure_cache(environ=env, package_dir=_unwritable(tmp_path))
    assert got == env[ENV] and Path(got).parent == tmp_path / "tmp" and Path(got).is_dir()


def test_user_cache_dir_defaults_to_dot_cache(monkeypatch):
    assert user_cache_dir({}) == Path(os.path.expanduser("~")) / ".cache" / "ratiowatch" / "numba"


def test_warmup_fills_the_cache_and_later_runs_compile_nothing(tmp_path):
    """The compile note appears once, in the run that compiles; a warmed cache serves detect."""
    cache = tmp_path / "numba"
    env = {ENV: str(cache)}
    first = cli("warmup", "--method", "rulsif", env=env)
    assert first.returncode == 0, first.stderr
    assert first.stderr.count("compiling the numba kernels") == 1, first.stderr
    assert str(cache) in first.stderr and "kernels ready" in first.stdout
    assert list(cache.rglob("*.nbi")), "no numba index file was written"
    again = cli("warmup", "--method", "rulsif", env=env)
    assert again.returncode == 0 and "compiling" not in again.stderr, again.stderr
    p = write(tmp_path / "x.csv", jump_rows())
    det = cli("detect", p, env=env)
    assert det.returncode == 0 and "compiling" not in det.stderr, det.stderr


def test_warmup_rejects_an_unknown_method():
    proc = cli("warmup", "--method", "nope")
    assert proc.returncode == 2 and "unknown method 'nope'" in proc.stderr and "rulsif" in proc.stderr


def test_importing_ratiowatch_does_not_import_numba():
    """configure_cache must run before numba is imported: ``import ratiowatch`` may not import it."""
    out = subprocess.run([sys.executable, "-c", "import sys, ratiowatch; print('numba' in sys.modules)"],
                         capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "False", out.stderr


def test_docstring_examples():
    import doctest

    import ratiowatch.numba_cache

    assert doctest.testmod(ratiowatch.numba_cache).failed == 0


KERNEL = "from numba import njit\n\n\n@njit(cache=True)\ndef f(x):\n    return x + 1\n"


def _run_kernel(tmp_path, configure: bool):
    """Import a cached kernel from a folder whose __pycache__ cannot be made, with no writable home."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "__pycache__").write_text("")  # a file: numba cannot cache next to the source
    (src / "kern.py").write_text(KERNEL)
    home = _unwritable(tmp_path)
    code = ("import os, sys; sys.path.insert(0, sys.argv[1])\n"
            + ("from ratiowatch.numba_cache import configure_cache\n"
               "configure_cache(environ=os.environ, package_dir=sys.argv[1] + '/__pycache__/x')\n"
               if configure else "")
            + "import kern; print(kern.f(1))\n")
    env = {k: v for k, v in os.environ.items() if k != ENV}
    env.update(HOME=str(home), XDG_CACHE_HOME=str(home))
    env_ok = dict(env, XDG_CACHE_HOME=str(tmp_path / "xdg")) if configure else env
    return subprocess.run([sys.executable, "-c", code, str(src)], capture_output=True, text=True,
                          env=env_ok, timeout=300)


def test_numba_cannot_load_cached_kernels_without_a_writable_place(tmp_path):
    proc = _run_kernel(tmp_path, configure=False)
    assert proc.returncode != 0 and "no locator available" in proc.stderr


def test_the_fallback_cache_dir_makes_them_load_and_is_used(tmp_path):
    proc = _run_kernel(tmp_path, configure=True)
    assert proc.returncode == 0 and proc.stdout.strip() == "2", proc.stderr
    assert list((tmp_path / "xdg" / "ratiowatch" / "numba").rglob("*.nbi"))


def test_the_compile_note_can_go_to_a_logger_once(tmp_path):
    """``run`` hands the note to the daemon's logger (JSON lines); it is said once per process."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "kern.py").write_text(KERNEL + "\n\n@njit(cache=True)\ndef g(x):\n    return x * 2\n")
    code = ("import sys; sys.path.insert(0, sys.argv[1])\n"
            "from ratiowatch.numba_cache import announce_compilation\n"
            "notes = []\n"
            "announce_compilation(say=notes.append)\n"
            "announce_compilation(say=notes.append)  # a second registration is a no-op\n"
            "import kern; kern.f(1); kern.g(2)\n"
            "print(len(notes), notes[0] if notes else '')\n")
    env = dict(os.environ, **{ENV: str(tmp_path / "cache")})
    first = subprocess.run([sys.executable, "-c", code, str(src)], capture_output=True, text=True, env=env,
                           timeout=300)
    assert first.stdout.startswith("1 compiling the numba kernels"), (first.stdout, first.stderr)
    again = subprocess.run([sys.executable, "-c", code, str(src)], capture_output=True, text=True, env=env,
                           timeout=300)
    assert again.stdout.strip() == "0", again.stdout  # both kernels from the cache: nothing to say

"""When no directory can hold the numba cache (a read-only install, no writable home, no usable
temporary directory), ``import ratiowatch``, ``--help`` and ``--version`` still work and the kernels
are compiled in memory in each process, with one note at the first compile asking for a writable
``NUMBA_CACHE_DIR``; no ``no locator available`` traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ratiowatch.numba_cache import ENV, configure_cache

KERNEL = "from numba import njit\n\n\n@njit(cache=True)\ndef f(x):\n    return x + 1\n"

# Run first in the child: every directory refuses a file, as on a read-only system (the tests run as
# root, whom permissions do not stop), and there is no usable temporary directory.
NOTHING_WRITABLE = (
    "import tempfile\n"
    "def _refuse(*args, **kwargs):\n"
    "    raise PermissionError(30, 'Read-only file system')\n"
    "def _no_temp():\n"
    "    raise FileNotFoundError(2, 'No usable temporary directory found')\n"
    "tempfile.TemporaryFile = _refuse\n"
    "tempfile.gettempdir = _no_temp\n"
)


def _unwritable(tmp_path: Path, name: str = "a-file") -> Path:
    """A directory that cannot be created, even by root: its parent is a file."""
    blocker = tmp_path / name
    blocker.write_text("")
    return blocker / "dir"


def _env(tmp_path: Path, **extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in (ENV, "TMPDIR")}
    home = _unwritable(tmp_path, "home-file")
    env.update(HOME=str(home), XDG_CACHE_HOME=str(home), **extra)
    return env


def _run(code: str, *args: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env,
                          timeout=300)


def test_no_usable_temporary_directory_is_skipped_not_raised(tmp_path, monkeypatch):
    def no_temp():
        raise FileNotFoundError(2, "No usable temporary directory found")

    monkeypatch.setattr("tempfile.gettempdir", no_temp)
    env = {"XDG_CACHE_HOME": str(_unwritable(tmp_path))}
    assert configure_cache(environ=env, package_dir=_unwritable(tmp_path, "pkg-file")) is None
    assert ENV not in env


def test_version_help_and_the_kernels_work_when_nothing_is_writable(tmp_path):
    cli = NOTHING_WRITABLE + ("import sys\n"
                              "from ratiowatch.stream.commands.cli import main\n"
                              "sys.exit(main(sys.argv[1:]))\n")
    version = _run(cli, "--version", env=_env(tmp_path))
    assert version.returncode == 0 and version.stdout.startswith("ratiowatch "), version.stderr
    assert version.stderr == ""
    helped = _run(cli, "--help", env=_env(tmp_path))
    assert helped.returncode == 0 and "usage: ratiowatch" in helped.stdout and helped.stderr == "", helped.stderr

    kernel = NOTHING_WRITABLE + (
        "import numpy as np\n"
        "from ratiowatch.numba_cache import announce_compilation, cache_location\n"
        "announce_compilation()\n"
        "from ratiowatch.core.kernels import sq_dist\n"
        "print(sq_dist(np.array([[0.0, 0.0]]), np.array([[3.0, 4.0]]))[0, 0])\n"
        "print(cache_location())\n")
    ran = _run(kernel, env=_env(tmp_path))
    assert ran.returncode == 0, ran.stderr
    assert "Traceback" not in ran.stderr and "no locator available" not in ran.stderr
    value, where = ran.stdout.splitlines()
    assert value == "25.0"
    assert where.startswith("nowhere") and f"set {ENV} to a writable directory" in where
    assert ran.stderr.splitlines() == [
        f"ratiowatch: compiling the numba kernels (about 20-30 s; cached {where})"]


@pytest.mark.skipif(not hasattr(os, "getuid"), reason="the temporary candidate is named by the user id")
def test_a_file_in_the_way_of_the_temporary_cache_dir_compiles_in_memory(tmp_path):
    """A usable temporary directory whose ``ratiowatch-numba-<uid>`` cannot be made."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "__pycache__").write_text("")  # a file: numba cannot cache next to the source
    (src / "kern.py").write_text(KERNEL)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    (tmp / f"ratiowatch-numba-{os.getuid()}").write_text("")
    code = ("import os, sys; sys.path.insert(0, sys.argv[1])\n"
            "from ratiowatch.numba_cache import announce_compilation, configure_cache\n"
            "configure_cache(environ=os.environ, package_dir=sys.argv[1] + '/__pycache__/x')\n"
            "announce_compilation()\n"
            "import kern; print(kern.f(1))\n")
    proc = _run(code, str(src), env=_env(tmp_path, TMPDIR=str(tmp)))
    assert proc.returncode == 0 and proc.stdout.strip() == "2", proc.stderr
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.splitlines()) == 1 and "compiled in memory on every start" in proc.stderr
    assert not list(tmp_path.rglob("*.nbi")), "nothing is cached"

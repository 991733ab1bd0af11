"""Running the ``ratiowatch`` command line as a subprocess in tests, and small input files for it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

CLI = [sys.executable, "-m", "ratiowatch.stream.commands.cli"]
ROOT = Path(__file__).resolve().parents[1]


def cli(*args, input=None, env=None, timeout=600):
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([*CLI, *map(str, args)], capture_output=True, text=True, input=input,
                          env=full_env, timeout=timeout)


def one_line_error(proc, code, *fragments):
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    for f in fragments:
        assert f in proc.stderr, (f, proc.stderr)


def jump_rows(t=300, at=150, seed=0):
    """(time, cpu, mem) rows; mem's mean jumps by 4 at ``at``."""
    rng = np.random.default_rng(seed)
    mem = rng.normal(0, 1, t) + 4.0 * (np.arange(t) >= at)
    cpu = rng.normal(0, 1, t)
    return [(i, round(float(c), 4), round(float(m), 4)) for i, (c, m) in enumerate(zip(cpu, mem))]


def write(path, rows, sep=",", header="time,cpu,mem"):
    text = (header.replace(",", sep) + "\n" if header else "") + "".join(
        sep.join(str(v) for v in r) + "\n" for r in rows)
    Path(path).write_text(text)
    return path


def near(cps, at, tol=8):
    return any(abs(c - at) <= tol for c in cps)


def cache_env() -> dict:
    """The environment with the repository's numba cache (subprocesses compile nothing afresh)."""
    return {**os.environ, "NUMBA_CACHE_DIR": str(ROOT / ".numba_cache")}


def last_line(stderr: str) -> str:
    """The last line of ``stderr`` that is not blank (where a command states why it stopped)."""
    lines = [x for x in stderr.splitlines() if x.strip()]
    return lines[-1] if lines else ""


def error_line(capsys) -> str:
    """A command's one line of error (and nothing on stdout), read from pytest's ``capsys``."""
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    return lines[0]

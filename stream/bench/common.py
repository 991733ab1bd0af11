"""Helpers shared by the ``ratiowatch bench ...`` commands: timing, memory, environment facts."""

from __future__ import annotations

import contextlib
import io
import os
import time
from typing import Callable

import numpy as np


def time_call(fn: Callable[[], object], repeat: int) -> float:
    """Median wall time of ``fn()`` in seconds over ``repeat`` calls (after one warm-up call)."""
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def quiet(fn: Callable[[], object]) -> Callable[[], object]:
    """Wrap a baseline that prints progress so its output does not pollute the JSON."""

    def run():
        with contextlib.redirect_stdout(io.StringIO()):
            return fn()

    return run


def rss_mb() -> float:
    """Resident set size of this process in MiB (Linux /proc; 0.0 elsewhere)."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return 0.0


def environment() -> dict:
    """Facts that make a benchmark number interpretable: what every evaluation result records
    (:func:`ratiowatch.stream.evaluate.environment.environment`: versions, the machine, the BLAS
    libraries with the kernel each picked, the BLAS variables set), the CPUs, the BLAS threads and
    the load."""
    from ratiowatch.stream.evaluate.environment import environment as run_environment

    return {
        **run_environment(),
        "cpus": os.cpu_count(),
        "blas_threads": os.environ.get("OPENBLAS_NUM_THREADS", "default"),
        "load_average_1m": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None,
    }


def option_problem(args, minimums: dict[str, int]) -> str | None:
    """The first option of ``args`` below its minimum, as ``"--name must be >= m; got v"`` (None: all
    fine). ``minimums`` maps an attribute (``"lof_points"``) to its least value; an option left at
    None (its default is chosen later) is not checked.

    Checked before any work, so a bad value does not end a run after minutes of timing, or give
    NaN ratios from zero repetitions.

    >>> import argparse
    >>> option_problem(argparse.Namespace(steps=0, seed=1), {"seed": 0, "steps": 1})
    '--steps must be >= 1; got 0'
    """
    for name, least in minimums.items():
        value = getattr(args, name, None)
        if value is not None and value < least:
            return f"--{name.replace('_', '-')} must be >= {least}; got {value}"
    return None


def refuse_options(args, command: str, minimums: dict[str, int]) -> bool:
    """Print :func:`option_problem`'s line for ``ratiowatch bench <command>`` on stderr; True if any."""
    import sys

    problem = option_problem(args, minimums)
    if problem:
        print(f"ratiowatch bench {command}: {problem}", file=sys.stderr)
    return problem is not None


#: the peer libraries each benchmark times ours against: import name -> the package to install
PEERS = {"densratio": "densratio", "sklearn": "scikit-learn"}


def refuse_missing_peers(command: str, modules: list[str]) -> bool:
    """Before any timing: print one line for ``ratiowatch bench <command>`` on stderr naming the peer
    libraries in ``modules`` that cannot be imported (they come with the optional ``test`` extra);
    True if any.

    >>> refuse_missing_peers("toy", ["json"])
    False
    """
    import importlib
    import sys

    missing = []
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(PEERS.get(name.split(".")[0], name.split(".")[0]))
    missing = list(dict.fromkeys(missing))
    if missing:
        print(f"ratiowatch bench {command}: needs {' and '.join(missing)}, the peer it is timed against, which "
              "is not installed; install it with pip install '.[test]'", file=sys.stderr)
    return bool(missing)

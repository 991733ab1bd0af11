"""``ratiowatch warmup``: compile the numba kernels into the on-disk cache now.

The first run after an install compiles every kernel it meets (20-30 s on an idle core, longer on a
busy machine); later processes load them from the cache (:mod:`ratiowatch.numba_cache`). Running
this once fills the cache ahead of time: a container image runs it at build time, as the user and
with the ``NUMBA_CACHE_DIR`` of its daemon, so that no container start pays the compile. It feeds a
short synthetic series through what the daemon, ``detect`` and ``demo`` run: the streaming
change-point detector (every method, univariate and multichannel) and the offline replay.

Examples
--------
>>> sorted(warm_steps(["rulsif"]))[:2]
['replay 1 channel', 'replay 3 channels']
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable

import numpy as np

T_STREAM = 400  # long enough for full windows, a calibration and a re-selection at the defaults' smallest n


def _stream(method: str, channels: int) -> Callable[[], None]:
    def run() -> None:
        from ratiowatch.stream.detectors.changepoint import ChangePointDetector

        x = np.random.default_rng(0).normal(size=(T_STREAM, channels))
        det = ChangePointDetector(method=method, n=20)
        for row in x:
            det.step(row if channels > 1 else float(row[0]))

    return run


def _replay(channels: int) -> Callable[[], None]:
    def run() -> None:
        from ratiowatch.stream.detectors.offline import replay

        replay(np.random.default_rng(0).normal(size=(T_STREAM, channels)))

    return run


def warm_steps(methods: list[str]) -> dict[str, Callable[[], None]]:
    """What is run, by name (each one compiles, or loads, the kernels on its path)."""
    steps = {"replay 1 channel": _replay(1), "replay 3 channels": _replay(3)}
    for m in methods:
        steps[f"{m} stream 1 channel"] = _stream(m, 1)
        steps[f"{m} stream 2 channels"] = _stream(m, 2)
    return steps


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--method", action="append", default=None, metavar="NAME",
                        help="detector method to compile (repeatable; default: every method)")


def run(args) -> int:
    from ratiowatch.numba_cache import cache_location
    from ratiowatch.stream.commands.progress import track
    from ratiowatch.stream.detectors.changepoint import METHODS

    methods = args.method or list(METHODS)
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        print(f"ratiowatch warmup: unknown method {unknown[0]!r}; choose from {', '.join(METHODS)}",
              file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    steps = warm_steps(methods)
    for name in track(steps, desc="warmup", total=len(steps), unit="step"):
        steps[name]()
    print(f"kernels ready in {time.perf_counter() - t0:.1f} s; cache: {cache_location()}")
    return 0

"""Where the development benchmark data lives (``../shared/bench`` next to the repository).

The data is never copied into the repository: code and tests read it in place. The location
can be overridden with the environment variable ``RATIOWATCH_BENCH``.

Examples
--------
>>> p = bench_dir()
>>> p is None or p.is_dir()
True
"""

from __future__ import annotations

import os
from pathlib import Path

ENV_VAR = "RATIOWATCH_BENCH"

# stream/evaluate/datasets.py -> parents[2] is the repository root.
_DEFAULT = Path(__file__).resolve().parents[2] / ".." / "shared" / "bench"


def bench_dir(sub: str | None = None) -> Path | None:
    """The benchmark folder (or its sub-folder ``sub``, e.g. ``"tcpd"``), or ``None`` when absent.

    ``RATIOWATCH_BENCH`` overrides the default ``<repo>/../shared/bench``.
    """
    env = os.environ.get(ENV_VAR)
    root = Path(env) if env else _DEFAULT
    path = root / sub if sub else root
    try:
        path = path.resolve()
    except OSError:
        return None
    return path if path.is_dir() else None


SKIP_REASON = (
    "benchmark data not found: expected <repo>/../shared/bench "
    f"(set {ENV_VAR} to point at a copy laid out like it)"
)

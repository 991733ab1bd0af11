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


def add_eval_arguments(parser, name: str) -> None:
    """CLI arguments shared by ``ratiowatch eval tcpd`` and ``eval tssb``."""
    parser.add_argument("dir", type=Path, nargs="?", default=None,
                        help=f"{name.upper()} folder (default: ../shared/bench/{name} or ${ENV_VAR}/{name})")
    parser.add_argument("--json", action="store_true", help="print the full result as JSON")
    parser.add_argument("--plot", type=Path, default=None, metavar="DIR", help="write one PNG per series")


def run_eval(args, name: str, evaluate, summary) -> int:
    """Locate the data, run ``evaluate(root, plot_dir=...)``, print JSON or ``summary(result)`` lines."""
    import json
    import sys

    root = args.dir or bench_dir(name)
    if root is None or not Path(root).is_dir():
        print(f"ratiowatch eval {name}: no {name.upper()} folder given and ../shared/bench/{name} not found",
              file=sys.stderr)
        return 2
    if args.plot is not None:
        args.plot.mkdir(parents=True, exist_ok=True)
    out = evaluate(Path(root), plot_dir=args.plot)
    print(json.dumps(out, indent=2) if args.json else "\n".join(summary(out)))
    return 0

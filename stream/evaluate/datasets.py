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


def default_dir(sub: str | None = None) -> Path:
    """The absolute folder :func:`bench_dir` looks in, whether it exists or not (for messages).

    Installed, the default sits next to the installed package rather than under the working
    directory, so messages name it in full: ``../shared/bench`` would point elsewhere.
    """
    env = os.environ.get(ENV_VAR)
    root = Path(env) if env else _DEFAULT
    path = root / sub if sub else root
    try:
        return path.resolve()
    except OSError:
        return Path(os.path.abspath(path))


SKIP_REASON = (
    "benchmark data not found: expected <repo>/../shared/bench "
    f"(set {ENV_VAR} to point at a copy laid out like it)"
)


def add_eval_arguments(parser, name: str) -> None:
    """CLI arguments shared by ``ratiowatch eval tcpd`` and ``eval tssb``."""
    parser.add_argument("dir", type=Path, nargs="?", default=None,
                        help=f"{name.upper()} folder (default: {default_dir(name)}, ${ENV_VAR}/{name} when set)")
    parser.add_argument("--json", action="store_true", help="print the full result as JSON")
    parser.add_argument("--plot", type=Path, default=None, metavar="DIR", help="write one PNG per series")
    parser.add_argument("--seeds", type=int, default=1, metavar="K",
                        help="also run detector seeds 1..K-1 (the nulls are Monte-Carlo) and report the spread "
                             "of the means, overall and per half, under 'seed_spread'; the rest stays seed 0")
    parser.add_argument("--half", choices=("tune", "check", "both"), default="both",
                        help="series sorted by name, even positions 'tune', odd 'check' (docs/evaluation.md); "
                             "default both: every series, reported per half and overall")
    parser.add_argument("--streaming", action="store_true",
                        help="also score the two-window streaming ChangePointDetector (the daemon's kind = "
                             "'window'), causal: change index and alarm index of each alarm")
    parser.add_argument("--split-profile", action="store_true",
                        help="also score the streaming SplitProfileDetector (a calibrated split profile over a "
                             "sliding window), causal, as --streaming")
    parser.add_argument("--auto", action="store_true",
                        help="also score the streaming PeriodRoutedDetector (the daemon's default kind = 'auto': the "
                             "ChangePointDetector, handed to the SplitProfileDetector once the data show a period), "
                             "causal, as --streaming")
    parser.add_argument("--cycle-permutation", action="store_true",
                        help="with --split-profile: turn on the SplitProfileDetector's null of a periodic window's "
                             "own cycles (SplitProfileDetector(cycle_permutation=True); off by default)")
    parser.add_argument("--level-view", action="store_true",
                        help="with --streaming or --auto: turn on the two-window detector's level view for "
                             "differenced windows (ChangePointDetector(level_view=True); off by default)")
    parser.add_argument("--robust-line", action="store_true",
                        help="with --streaming or --auto: fit the two-window detector's null line with gross "
                             "values clipped (ChangePointDetector(robust_line=True); off by default)")
    parser.add_argument("--with-history", action="store_true",
                        help="with --auto: also ask the period question at each change the two-window detector "
                             "reports, on the stream's newest samples across changes, and hand a periodic stream "
                             "over with them (PeriodRoutedDetector(with_history=True); off by default)")
    parser.add_argument("--smooth-steps", action="store_true",
                        help="the offline detector's harder search for level steps in smooth series "
                             "(detect(smooth_steps=True); off by default)")
    parser.add_argument("--peers", action="store_true",
                        help="also run ruptures PELT / BinSeg (RBF) and claspy BinaryClaSP / ClaSS (its own venv: "
                             "`make peers`) on the same series")


def eval_dir_problem(given, root, name: str) -> str | None:
    """Why the benchmark folder cannot be used (None: it can), naming the folder the user gave.

    Examples
    --------
    >>> eval_dir_problem(Path("/nonexistent"), Path("/nonexistent"), "tcpd")
    '/nonexistent does not exist; give a TCPD folder (laid out like ../shared/bench/tcpd)'
    """
    article = "an" if name.upper()[:1] in "AEIO" else "a"  # an ODDS folder, a TCPD folder
    layout = f"{article} {name.upper()} folder (laid out like ../shared/bench/{name})"
    if given is None:
        if root is None:
            return (f"no folder given and the default, {default_dir(name)}, was not found; pass {layout} as "
                    f"the folder argument, or set {ENV_VAR} to a folder holding {name}/")
        return None
    if not Path(given).exists():
        return f"{given} does not exist; give {layout}"
    if not Path(given).is_dir():
        return f"{given} is not a folder; give {layout}"
    return None


def os_error_line(exc: OSError) -> str:
    """``"<file>: <reason>"`` for a file that could not be read or written."""
    where = f"{exc.filename}: " if exc.filename else ""
    return f"{where}{exc.strerror or exc}"


def run_eval(args, name: str, evaluate, summary, series_names) -> int:
    """Locate the data, select the half, run ``evaluate``, print JSON or ``summary(result)`` lines.

    ``series_names(root)`` lists the benchmark's series (the halves are split over all of them);
    ``evaluate(root, names=..., plot_dir=..., streaming=..., peers=..., progress=..., **params)``.
    """
    import sys

    from ratiowatch.stream.evaluate.peers import ALL_PEERS
    from ratiowatch.stream.evaluate.protocol import seed_spread_by_half, select

    root = args.dir if args.dir is not None else bench_dir(name)
    problem = eval_dir_problem(args.dir, root, name)
    if problem:
        print(f"ratiowatch eval {name}: {problem}", file=sys.stderr)
        return 2
    if args.seeds < 1:
        print(f"ratiowatch eval {name}: --seeds must be >= 1; got {args.seeds}", file=sys.stderr)
        return 2
    split_profile = getattr(args, "split_profile", False)
    if getattr(args, "cycle_permutation", False):
        if not split_profile:
            print(f"ratiowatch eval {name}: --cycle-permutation is an option of the split-profile detector; "
                  "add --split-profile", file=sys.stderr)
            return 2
        split_profile = {"cycle_permutation": True}
    options = {flag: True for flag in ("level_view", "robust_line") if getattr(args, flag, False)}
    if options and not (args.streaming or getattr(args, "auto", False)):
        flag = next(iter(options)).replace("_", "-")
        print(f"ratiowatch eval {name}: --{flag} is an option of the two-window detector; "
              "add --streaming or --auto", file=sys.stderr)
        return 2
    window = {"window": options} if options else {}
    auto = getattr(args, "auto", False)
    if getattr(args, "with_history", False):
        if not auto:
            print(f"ratiowatch eval {name}: --with-history is an option of the routed detector; add --auto",
                  file=sys.stderr)
            return 2
        auto = {"with_history": True}
    offline = {"smooth_steps": True} if getattr(args, "smooth_steps", False) else {}
    if args.plot is not None:
        from ratiowatch.stream.commands.plot import plot_formats

        try:
            plot_formats()
            args.plot.mkdir(parents=True, exist_ok=True)
        except ImportError as exc:
            print(f"ratiowatch eval {name}: --plot needs matplotlib ({exc}); install it with: "
                  "pip install matplotlib", file=sys.stderr)
            return 2
        except OSError as exc:
            print(f"ratiowatch eval {name}: --plot {args.plot}: cannot create the folder "
                  f"({exc.strerror or exc})", file=sys.stderr)
            return 2

    def progress(msg: str) -> None:
        print(f"[{Path(root).name}] {msg}", file=sys.stderr, flush=True)

    if sys.stderr.isatty():  # a terminal shows the progress bar instead of a line per series
        progress = None  # noqa: F811

    from ratiowatch.stream.commands.interrupts import guarded

    with guarded():  # a Ctrl-C while numba compiles stops the run too
        try:
            names = select(series_names(Path(root)), args.half)
            if not names:  # an empty list would read as "every series" downstream
                raise ValueError(f"no series in the {args.half} half of {root}; choose another --half")
            out = evaluate(Path(root), plot_dir=args.plot, names=names, streaming=args.streaming,
                           peers=ALL_PEERS if args.peers else (), progress=progress, split_profile=split_profile,
                           auto=auto, **window, **offline)
        except ValueError as exc:  # not laid out like the benchmark: one line, not a traceback
            print(f"ratiowatch eval {name}: {exc}", file=sys.stderr)
            return 2
        except OSError as exc:  # a file that cannot be read: one line naming it
            print(f"ratiowatch eval {name}: {os_error_line(exc)}", file=sys.stderr)
            return 2
        out["half"] = args.half
        if isinstance(split_profile, dict):
            out["split_profile_options"] = split_profile
        if window:
            out["window_options"] = window["window"]
        if isinstance(auto, dict):
            out["auto_options"] = auto
        if args.seeds > 1:
            runs = [out] + [evaluate(Path(root), names=names, streaming=args.streaming, seed=s,
                                     split_profile=split_profile, auto=auto, **window,
                                     **offline)
                            for s in range(1, args.seeds)]
            out["seed_spread"] = seed_spread([r["mean"] for r in runs])
            methods = ["ours"] + (["ours_streaming"] if args.streaming else []) + (
                ["ours_streaming_profile"] if getattr(args, "split_profile", False) else []) + (
                ["ours_streaming_auto"] if getattr(args, "auto", False) else [])
            out["seed_spread"]["by_half"] = seed_spread_by_half([r["by_half"] for r in runs], methods)["by_half"]
    lines = summary(out)
    if "seed_spread" in out:
        lines += [f"over detector seeds 0..{args.seeds - 1}: " + ", ".join(
            f"{k} {v['mean']:.3f} +- {v['sd']:.3f}" for k, v in out["seed_spread"]["metrics"].items())]
        for half, per in out["seed_spread"]["by_half"].items():
            for method, stats in per.items():
                lines.append(f"  {half:5s} {method:15s} " + ", ".join(
                    f"{k} {v['mean']:.3f} +- {v['sd']:.3f}" for k, v in stats.items()))
    if out.get("points_per_s"):
        lines.append("points/s: " + ", ".join(f"{k} {v:.0f}" for k, v in out["points_per_s"].items() if v))
    lines += out.get("notes", [])
    if args.json:
        from ratiowatch.stream.evaluate.environment import environment

        out["environment"] = environment()
        for note in out.get("notes", []):  # what was left out is said where a reader looks, not only in the file
            print(note, file=sys.stderr)
    from ratiowatch.stream.evaluate.jsonout import dumps as strict_json

    print(strict_json(out, indent=2) if args.json else "\n".join(lines))
    return 0


def seed_spread(means: list[dict]) -> dict:
    """Mean and standard deviation over seeds of every (non-None) metric in ``means``.

    Examples
    --------
    >>> seed_spread([{"f1": 0.7, "cover": None}, {"f1": 0.8, "cover": None}])["metrics"]["f1"]["mean"]
    0.75
    """
    import numpy as np

    metrics = {}
    for key in means[0]:
        vals = [m[key] for m in means if m.get(key) is not None]
        if vals:
            metrics[key] = {"mean": round(float(np.mean(vals)), 4), "sd": round(float(np.std(vals)), 4),
                            "per_seed": [round(float(v), 4) for v in vals]}
    return {"seeds": len(means), "metrics": metrics}

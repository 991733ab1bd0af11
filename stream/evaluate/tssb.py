"""``ratiowatch eval tssb DIR``: segmentation covering (and F1) of the default detector on TSSB data.

DIR is laid out like ``../shared/bench/tssb``: ``desc.txt`` with lines ``name,window_size,cp1,...``
and ``datasets/<name>.txt`` with one value per line. The ``window_size`` column is read but not
given to the detector (it would be side information the benchmark's competitors estimate
themselves). F1 uses a margin of 1% of the series length.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from ratiowatch.stream.evaluate.datasets import add_eval_arguments, run_eval


def load_dir(root: Path) -> list[tuple[str, np.ndarray, list[int]]]:
    root = Path(root)
    desc = root / "desc.txt"
    if not desc.is_file():
        raise ValueError(f"{root} is not a TSSB folder: {desc} missing")
    out = []
    for line in desc.read_text().splitlines():
        parts = [p.strip() for p in line.split(",") if p.strip()]
        if not parts:
            continue
        name, cps = parts[0], [int(c) for c in parts[2:]]
        x = np.loadtxt(root / "datasets" / f"{name}.txt", dtype=np.float64, ndmin=1)
        out.append((name, x, cps))
    if not out:
        raise ValueError(f"no series listed in {desc}")
    return out


def _config(params: dict) -> dict:
    """The configuration actually used: the detect() defaults, the window and period rules, any overrides."""
    from ratiowatch.stream.detectors.offline import describe_config

    return describe_config(params)


def evaluate(root: Path, plot_dir: Path | None = None, names: list[str] | None = None, **params) -> dict:
    from ratiowatch.stream.detectors.offline import replay
    from ratiowatch.stream.evaluate.metrics import covering, tssb_f1

    results: dict[str, dict] = {}
    config = None
    from ratiowatch.stream.commands.progress import track

    series = load_dir(root)
    for name, x, truth in track(series, desc="tssb", unit="series"):
        if names and name not in names:
            continue
        t0 = time.perf_counter()
        try:
            rep = replay(x, **params)
            config = rep.config
            cps = rep.change_points
            res = {"cover": covering([truth], cps, len(x)), "f1": tssb_f1(truth, cps, len(x)),
                   "change_points": cps}
            if plot_dir is not None:
                from ratiowatch.stream.commands.plot import plot_detection

                plot_detection(Path(plot_dir) / f"{name}.png", x, rep.scores, rep.thresholds, cps, truth,
                               title=f"TSSB {name}")
        except Exception as exc:  # a failed run scores 0, with the reason
            res = {"cover": 0.0, "f1": 0.0, "error": f"{type(exc).__name__}: {exc}"}
        res["seconds"] = round(time.perf_counter() - t0, 3)
        results[name] = res
    mean = {"cover": float(np.mean([r["cover"] for r in results.values()])),
            "f1": float(np.mean([r["f1"] for r in results.values()]))}
    return {"benchmark": "tssb", "config": _config(params), "datasets": results, "mean": mean}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_eval_arguments(parser, "tssb")


def _summary(out: dict) -> list[str]:
    lines = [f"{name:28s} cover={r['cover']:.3f} f1={r['f1']:.3f} {r.get('change_points', r.get('error'))}"
             for name, r in out["datasets"].items()]
    m = out["mean"]
    return lines + [f"mean: cover={m['cover']:.3f} f1={m['f1']:.3f}"]


def run(args) -> int:
    return run_eval(args, "tssb", evaluate, _summary)

"""``ratiowatch eval tcpd DIR``: F1 and covering of the default detector on TCPD-style data.

DIR is laid out like ``../shared/bench/tcpd``: ``datasets/<name>.json`` (``series[*].raw``, ``null``
for missing) and ``annotations.json`` (``{name: {annotator: [cp, ...]}}``). The univariate mean
excludes ``quality_control_*`` and ``uk_coal_employ`` (as in the TCPD paper's default table); a
series on which the detector fails scores 0.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from ratiowatch.stream.evaluate.datasets import add_eval_arguments, run_eval

EXCLUDED_PREFIX = ("quality_control_",)
EXCLUDED = ("uk_coal_employ",)


def load_series(path: Path) -> tuple[str, np.ndarray]:
    """(name, T x d float array with NaN for missing) of one TCPD json file."""
    d = json.loads(Path(path).read_text())
    cols = [[np.nan if v is None else float(v) for v in s["raw"]] for s in d["series"]]
    if not cols:
        raise ValueError(f"{path}: no series")
    return d.get("name", Path(path).stem), np.array(cols, dtype=np.float64).T


def load_dir(root: Path) -> tuple[dict[str, np.ndarray], dict[str, dict]]:
    root = Path(root)
    ann_path = root / "annotations.json"
    if not ann_path.is_file():
        raise ValueError(f"{root} is not a TCPD folder: {ann_path} missing")
    ann = json.loads(ann_path.read_text())
    data = {}
    for f in sorted((root / "datasets").glob("*.json")):
        name, x = load_series(f)
        data[name] = x
    if not data:
        raise ValueError(f"no datasets/*.json under {root}")
    return data, ann


def is_univariate_default(name: str, x: np.ndarray) -> bool:
    return x.shape[1] == 1 and not name.startswith(EXCLUDED_PREFIX) and name not in EXCLUDED


def _config(params: dict) -> dict:
    """The configuration actually used: the detect() defaults, the window and period rules, any overrides."""
    from ratiowatch.stream.detectors.offline import describe_config

    return describe_config(params)


def evaluate(root: Path, plot_dir: Path | None = None, **params) -> dict:
    from ratiowatch.stream.detectors.offline import replay
    from ratiowatch.stream.evaluate.metrics import covering, f1_score

    data, ann = load_dir(root)
    results: dict[str, dict] = {}
    config = None
    from ratiowatch.stream.commands.progress import track

    for name, x in track(data.items(), desc="tcpd", total=len(data), unit="series"):
        t0 = time.perf_counter()
        try:
            rep = replay(x, **params)
            config = rep.config
            cps = rep.change_points
            res = {"f1": f1_score(ann[name], cps), "cover": covering(ann[name], cps, x.shape[0]),
                   "change_points": cps}
            if plot_dir is not None:
                from ratiowatch.stream.commands.plot import plot_detection

                truth = sorted({c for v in ann[name].values() for c in v})
                plot_detection(Path(plot_dir) / f"{name}.png", x, rep.scores, rep.thresholds, cps, truth,
                               title=f"TCPD {name}")
        except Exception as exc:  # a failed run scores 0 (benchmark rule), but says why
            res = {"f1": 0.0, "cover": 0.0, "error": f"{type(exc).__name__}: {exc}"}
        res["seconds"] = round(time.perf_counter() - t0, 3)
        results[name] = res
    uni = [r for n, r in results.items() if is_univariate_default(n, data[n])]
    multi = [r for n, r in results.items() if data[n].shape[1] > 1]
    mean = {"f1": float(np.mean([r["f1"] for r in uni])) if uni else None,
            "cover": float(np.mean([r["cover"] for r in uni])) if uni else None,
            "f1_multi": float(np.mean([r["f1"] for r in multi])) if multi else None,
            "cover_multi": float(np.mean([r["cover"] for r in multi])) if multi else None}
    return {"benchmark": "tcpd", "config": _config(params), "datasets": results, "mean": mean}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_eval_arguments(parser, "tcpd")


def _summary(out: dict) -> list[str]:
    lines = [f"{name:24s} f1={r['f1']:.3f} cover={r['cover']:.3f} {r.get('change_points', r.get('error'))}"
             for name, r in out["datasets"].items()]
    m = out["mean"]
    return lines + [f"univariate mean: f1={m['f1']:.3f} cover={m['cover']:.3f}"]


def run(args) -> int:
    return run_eval(args, "tcpd", evaluate, _summary)

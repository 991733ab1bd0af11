"""``ratiowatch eval tssb DIR``: segmentation covering (and F1) of the default detector on TSSB data.

DIR is laid out like ``../shared/bench/tssb``: ``desc.txt`` with lines ``name,window_size,cp1,...``
and ``datasets/<name>.txt`` with one value per line. The ``window_size`` column is read but not
given to the detector (it would be side information the benchmark's competitors estimate
themselves). F1 uses a margin of 1% of the series length. UTSA (``../shared/bench/utsa``) has the
same layout and is read the same way.

Every report is split by the protocol's halves (``--half``; see ``docs/evaluation.md``);
``--streaming`` adds the streaming detector, ``--peers`` ruptures and claspy on the same series.
When DIR holds ``streaming_results/<method>.csv`` (``dataset,true_cps,found_cps,alarm_index,
f1_margin_1pct,covering``: the stored per-series results of published streaming segmenters), their
means over the same series and halves are reported beside ours as ``stored:<method>``.
"""

from __future__ import annotations

import argparse
import csv
import json
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


def series_names(root: Path) -> list[str]:
    """Names of the series listed in ``root/desc.txt`` (the halves are split over all of them)."""
    desc = Path(root) / "desc.txt"
    if not desc.is_file():
        raise ValueError(f"{root} is not a TSSB folder: {desc} missing")
    return sorted({line.split(",")[0].strip() for line in desc.read_text().splitlines() if line.strip()})


def load_stored(root: Path, names=None) -> dict[str, dict[str, dict]]:
    """``{method: {name: {"cover", "f1", "change_points", "alarm_index", "delay_mean"}}}`` from
    ``root/streaming_results/*.csv`` (empty when the folder is absent); the stored scores as published."""
    out: dict[str, dict[str, dict]] = {}
    folder = Path(root) / "streaming_results"
    if not folder.is_dir():
        return out
    for f in sorted(folder.glob("*.csv")):
        per: dict[str, dict] = {}
        with f.open(newline="") as fh:
            for rec in csv.DictReader(fh):
                name = rec["dataset"]
                if names is not None and name not in names:
                    continue
                found = [int(c) for c in json.loads(rec["found_cps"] or "[]")]
                alarm = [int(c) for c in json.loads(rec["alarm_index"] or "[]")]
                delay = [a - c for a, c in zip(alarm, found)]
                per[name] = {"cover": float(rec["covering"]), "f1": float(rec["f1_margin_1pct"]),
                             "change_points": found, "alarm_index": alarm,
                             "delay_mean": round(float(np.mean(delay)), 2) if delay else None}
        out[f.stem] = per
    return out


def evaluate(root: Path, plot_dir: Path | None = None, names: list[str] | None = None, streaming: bool = False,
             peers=(), progress=None, split_profile: bool | dict = False, auto: bool | dict = False, **params) -> dict:
    """Score ours (offline, and streaming if asked), the ``peers`` and the stored streaming results
    on the series ``names`` (default all): ``mean`` (ours, offline) and ``by_half`` (every method)."""
    from ratiowatch.stream.evaluate.metrics import covering, tssb_f1
    from ratiowatch.stream.evaluate.protocol import half_means, methods_present, split_halves
    from ratiowatch.stream.evaluate.runner import evaluate_series, plotter, throughput

    series = load_dir(root)
    halves = split_halves(s[0] for s in series)
    truth = {name: cps for name, _, cps in series}
    data = {name: x for name, x, _ in series if not names or name in set(names)}

    def score(name, cps, t_len):
        return {"cover": covering([truth[name]], cps, t_len), "f1": tssb_f1(truth[name], cps, t_len)}

    notes: list[str] = []
    results = evaluate_series(data, score, halves, streaming=streaming, split_profile=split_profile, auto=auto,
                              peers=peers,
                              desc=Path(root).name, plot=plotter(plot_dir, lambda n: truth[n], root.name.upper()), progress=progress,
                              notes=notes, **params)
    for method, per in load_stored(root, set(data)).items():
        for name, r in per.items():
            results[name].setdefault("stored", {})[method] = r
    mean = {"cover": float(np.mean([r["cover"] for r in results.values()])),
            "f1": float(np.mean([r["f1"] for r in results.values()]))}
    by_half = half_means(results, methods_present(results), {"": ("cover", "f1", "delay_mean")}, se=True)
    return {"benchmark": Path(root).name, "config": _config(params), "datasets": results, "mean": mean,
            "by_half": by_half, "halves": {n: halves[n] for n in results}, "notes": notes,
            "points_per_s": throughput(results, {n: int(x.shape[0]) for n, x in data.items()})}


def add_arguments(parser: argparse.ArgumentParser, name: str = "tssb") -> None:
    add_eval_arguments(parser, name)


def _summary(out: dict) -> list[str]:
    from ratiowatch.stream.evaluate.protocol import format_halves

    lines = [f"{name:28s} {r['half']:5s} cover={r['cover']:.3f} f1={r['f1']:.3f} "
             f"{r.get('change_points', r.get('error'))}" for name, r in out["datasets"].items()]
    m = out["mean"]
    return lines + [f"mean: cover={m['cover']:.3f} f1={m['f1']:.3f}", "", "by half:"] + format_halves(
        out["by_half"], ("cover", "f1", "delay_mean"))


def run(args, name: str = "tssb") -> int:
    """``ratiowatch eval tssb``; ``name`` sets the default folder and the messages (``eval utsa``)."""
    return run_eval(args, name, evaluate, _summary, series_names)

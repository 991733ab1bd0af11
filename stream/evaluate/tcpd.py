"""``ratiowatch eval tcpd DIR``: F1 and covering of the default detector on TCPD-style data.

DIR is laid out like ``../shared/bench/tcpd``: ``datasets/<name>.json`` (``series[*].raw``, ``null``
for missing) and ``annotations.json`` (``{name: {annotator: [cp, ...]}}``). The univariate mean
excludes ``quality_control_*`` and ``uk_coal_employ`` (as in the TCPD paper's default table); a
series on which the detector fails scores 0.

Every report is split by the protocol's halves (``--half``; see ``docs/evaluation.md``);
``--streaming`` adds the streaming detector, ``--peers`` ruptures and claspy on the same series.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from ratiowatch.stream.evaluate.datasets import add_eval_arguments, run_eval
from ratiowatch.stream.evaluate.jsonout import read_json

EXCLUDED_PREFIX = ("quality_control_",)
EXCLUDED = ("uk_coal_employ",)


def load_series(path: Path) -> tuple[str, np.ndarray]:
    """(name, T x d float array with NaN for missing) of one TCPD json file.

    Every problem of the file is a ValueError naming it: a dataset holds ``series``, a list of
    ``{"raw": [finite number or null, ...]}`` of one length.
    """
    d = read_json(path)
    if not isinstance(d, dict) or not isinstance(d.get("series"), list):
        raise ValueError(f'{path}: no "series" list; a TCPD dataset holds "series": [{{"raw": [...]}}, ...]')
    cols = []
    for i, s in enumerate(d["series"]):
        raw = s.get("raw") if isinstance(s, dict) else None
        if not isinstance(raw, list):
            raise ValueError(f'{path}: series[{i}] has no "raw" list of values')
        cols.append([_value(v, path, i, j) for j, v in enumerate(raw)])
    if not cols:
        raise ValueError(f"{path}: no series")
    lengths = sorted({len(c) for c in cols})
    if len(lengths) > 1:
        raise ValueError(f"{path}: the series have different lengths {lengths}; every raw list needs the same length")
    if lengths[0] == 0:
        raise ValueError(f"{path}: the series are empty")
    name = d.get("name", Path(path).stem)
    if not isinstance(name, str):
        raise ValueError(f'{path}: "name" is {name!r}, not a string')
    return name, np.array(cols, dtype=np.float64).T


def _value(v, path: Path, i: int, j: int) -> float:
    """``series[i].raw[j]`` as a float: a JSON number, or NaN for ``null`` (missing; JSON's ``NaN``
    is read the same way). ValueError naming the file and the index on anything else: a boolean,
    a string (even one that reads as a number), an infinite or unrepresentable number."""
    if v is None:
        return np.nan
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ValueError(f"{path}: series[{i}].raw[{j}] is {v!r}, not a number or null")
    try:
        x = float(v)
    except OverflowError:
        x = np.inf
    if np.isinf(x):
        shown = repr(v) if len(repr(v)) <= 40 else f"{repr(v)[:20]}... ({len(repr(v))} digits)"
        raise ValueError(f"{path}: series[{i}].raw[{j}] is {shown}, not a finite number "
                         "(null marks a missing value)")
    return x


def load_dir(root: Path) -> tuple[dict[str, np.ndarray], dict[str, dict]]:
    """``({name: T x d array}, annotations)``; ValueError naming the file (and series) on bad data.

    Every dataset needs its annotations (``{annotator: [index, ...]}``, indices inside the series),
    and two files must not name the same series.
    """
    root = Path(root)
    ann_path = root / "annotations.json"
    if not ann_path.is_file():
        raise ValueError(f"{root} is not a TCPD folder: {ann_path} missing")
    ann = read_json(ann_path)
    if not isinstance(ann, dict):
        raise ValueError(f"{ann_path}: expected an object {{series name: {{annotator: [index, ...]}}}}")
    data, files = {}, {}
    for f in sorted((root / "datasets").glob("*.json")):
        name, x = load_series(f)
        if name in files:
            raise ValueError(f"{files[name]} and {f} both name the series {name}; series names must be unique")
        files[name] = f
        data[name] = x
    if not data:
        raise ValueError(f"no datasets/*.json under {root}")
    for name, x in data.items():
        _check_annotations(ann_path, ann, name, files[name], x.shape[0])
    return data, ann


def _check_annotations(ann_path: Path, ann: dict, name: str, f: Path, t_len: int) -> None:
    """ValueError naming annotations.json and the series unless its annotations are usable."""
    if name not in ann:
        raise ValueError(f"{ann_path}: no annotations for the series {name} ({f}); "
                         "add it (an annotator with no change is listed with [])")
    per = ann[name]
    if not isinstance(per, dict) or not all(isinstance(v, list) for v in per.values()):
        raise ValueError(f"{ann_path}: {name}: expected {{annotator: [index, ...]}}; got {per!r}"[:300])
    for annotator, cps in per.items():
        for c in cps:
            if not isinstance(c, int) or isinstance(c, bool):
                raise ValueError(f"{ann_path}: {name}: annotator {annotator}: change point {c!r} is not an integer index")
            if not 0 <= c < t_len:
                raise ValueError(f"{ann_path}: {name}: annotator {annotator}: change point {c} outside the series "
                                 f"({t_len} values, indices 0..{t_len - 1})")


def is_univariate_default(name: str, x: np.ndarray) -> bool:
    return x.shape[1] == 1 and not name.startswith(EXCLUDED_PREFIX) and name not in EXCLUDED


def _config(params: dict) -> dict:
    """The configuration actually used: the detect() defaults, the window and period rules, any overrides."""
    from ratiowatch.stream.detectors.offline import describe_config

    return describe_config(params)


def series_names(root: Path) -> list[str]:
    """Names of the series under ``root/datasets`` (the halves are split over all of them)."""
    return sorted(load_dir(root)[0])


def evaluate(root: Path, plot_dir: Path | None = None, names: list[str] | None = None, streaming: bool = False,
             peers=(), progress=None, split_profile: bool | dict = False, auto: bool | dict = False, **params) -> dict:
    """Score ours (offline, and streaming if asked) and the ``peers`` on the series ``names`` (default all).

    Means: ``mean`` over the selected series (univariate default set: ``f1``, ``cover``;
    multivariate: ``f1_multi``, ``cover_multi``), ``by_half`` per protocol half and method;
    ``univariate`` lists the series of the univariate default set (``ratiowatch eval compare``
    compares those).
    """
    from ratiowatch.stream.evaluate.metrics import covering, f1_score
    from ratiowatch.stream.evaluate.protocol import half_means, methods_present, split_halves
    from ratiowatch.stream.evaluate.runner import evaluate_series, plotter, throughput

    data, ann = load_dir(root)
    halves = split_halves(data)
    if names is not None:  # an empty selection is empty, not "all"
        data = {n: x for n, x in data.items() if n in set(names)}

    def score(name, cps, t_len):
        return {"f1": f1_score(ann[name], cps), "cover": covering(ann[name], cps, t_len)}

    def truth(name):
        return sorted({c for v in ann[name].values() for c in v})

    notes: list[str] = []
    results = evaluate_series(data, score, halves, streaming=streaming, split_profile=split_profile, auto=auto,
                              peers=peers,
                              desc="tcpd", plot=plotter(plot_dir, truth, "TCPD"), progress=progress, notes=notes, **params)
    uni = [r for n, r in results.items() if is_univariate_default(n, data[n])]
    multi = [r for n, r in results.items() if data[n].shape[1] > 1]
    mean = {"f1": float(np.mean([r["f1"] for r in uni])) if uni else None,
            "cover": float(np.mean([r["cover"] for r in uni])) if uni else None,
            "f1_multi": float(np.mean([r["f1"] for r in multi])) if multi else None,
            "cover_multi": float(np.mean([r["cover"] for r in multi])) if multi else None}
    metrics = ("f1", "cover", "delay_mean")
    by_half = half_means(results, methods_present(results), {"": metrics, "_multi": metrics},
                         {"": lambda n: is_univariate_default(n, data[n]), "_multi": lambda n: data[n].shape[1] > 1},
                         se=True)
    return {"benchmark": "tcpd", "config": _config(params), "datasets": results, "mean": mean,
            "univariate": sorted(n for n in results if is_univariate_default(n, data[n])),
            "by_half": by_half, "halves": {n: halves[n] for n in results}, "notes": notes,
            "points_per_s": throughput(results, {n: int(x.shape[0]) for n, x in data.items()})}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_eval_arguments(parser, "tcpd")


def _summary(out: dict) -> list[str]:
    from ratiowatch.stream.evaluate.protocol import format_halves

    lines = [f"{name:24s} {r['half']:5s} f1={r['f1']:.3f} cover={r['cover']:.3f} "
             f"{r.get('change_points', r.get('error'))}" for name, r in out["datasets"].items()]
    m = out["mean"]
    if m["f1"] is not None:
        lines.append(f"univariate mean: f1={m['f1']:.3f} cover={m['cover']:.3f}")
    lines += ["", "univariate (default set), by half:"] + format_halves(out["by_half"], ("f1", "cover", "delay_mean"))
    if m["f1_multi"] is not None:
        lines += ["", "multivariate, by half:"] + format_halves(
            out["by_half"], ("f1_multi", "cover_multi"), count="n_multi")
    return lines


def run(args) -> int:
    return run_eval(args, "tcpd", evaluate, _summary, series_names)

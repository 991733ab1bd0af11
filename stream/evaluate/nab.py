"""NAB evaluation: run the default anomaly detector on a NAB-style corpus and score it.

``ratiowatch eval nab DIR --json`` reads ``DIR/data/<category>/<file>.csv`` (``timestamp,value``),
``DIR/labels/combined_windows.json`` and ``DIR/config/profiles.json``, runs
:class:`ratiowatch.stream.detectors.anomaly.TimeSeriesAnomalyDetector` (default configuration, fixed in code)
causally over every file, optionally writes NAB-format result files (``timestamp,anomaly_score``),
and scores them with :func:`score_corpus`, a re-implementation of the NAB v1.1 scoring rules:

1. the first ``min(floor(0.15 n), 750)`` rows of a file are probationary and not scored;
2. a row ``i`` inside a window of width ``W`` (rows, inclusive) with right edge ``R`` sits at
   ``p = -(R - i + 1) / W``; a row after a window sits at ``p = |R - i| / (W - 1)``; a row before
   any window has unweighted score -1;
3. ``s(p) = 2 / (1 + exp(5 p)) - 1`` (and -1 for ``p > 3``);
4. a flagged row in a window earns ``tpWeight * s(p) / s(-1)`` (a window keeps its best row, or
   costs ``-fnWeight`` if none is flagged); a flagged row outside windows earns ``fpWeight * s(p)``;
5. the threshold is swept over every distinct score, per profile, on the whole corpus at once;
6. normalised = ``100 (raw - raw_null) / (perfect - raw_null)`` with ``perfect = tpWeight * #windows``
   (every labelled window) and ``raw_null = -fnWeight * #windows`` (those with a row after probation).

Examples
--------
>>> import numpy as np
>>> rows = prepare_rows(10, [(4, 6)], probation=2)
>>> rows.window.tolist()
[-2, -2, -1, -1, 0, 0, 0, -1, -1, -1]
>>> prof = {"standard": {"tpWeight": 1.0, "fnWeight": 1.0, "fpWeight": 0.11}}
>>> scores = np.zeros(10); scores[4] = 1.0
>>> score_corpus([(rows, scores)], prof)["standard"]["score"]  # flagged at the left edge
100.0
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import math
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ratiowatch.stream.evaluate.jsonout import read_json

PROBATION_PERCENT = 0.15
PROFILE_NAMES = ("standard", "reward_low_FP_rate", "reward_low_FN_rate")


# --------------------------------------------------------------------------------------------
# data loading
# --------------------------------------------------------------------------------------------
def default_bench_dir() -> Path | None:
    """``../shared/bench/nab`` next to the repository (``$RATIOWATCH_BENCH/nab`` when set), or None."""
    from ratiowatch.stream.evaluate.datasets import bench_dir

    return bench_dir("nab")


@dataclass
class NabFile:
    """One NAB data file: its name relative to ``data/`` and its rows."""

    name: str
    timestamps: np.ndarray  # datetime64[s]
    values: np.ndarray  # float64
    raw_timestamps: list[str]


def _parse_time(text: str) -> np.datetime64:
    return np.datetime64(text.strip().replace(" ", "T")[:19], "s")


def read_nab_csv(path: Path, name: str | None = None) -> NabFile:
    """Read ``timestamp,value`` rows; raises ``ValueError`` on a malformed file."""
    path = Path(path)
    stamps: list[str] = []
    values: list[float] = []
    with open(path, newline="") as fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if header is None or [h.strip() for h in header[:2]] != ["timestamp", "value"]:
            raise ValueError(f"{path}: expected a header 'timestamp,value'; got {header}")
        times = []
        lines = []
        for k, row in enumerate(reader, start=2):
            if not row:
                continue
            try:
                times.append(_parse_time(row[0]))
                stamps.append(row[0])
                values.append(float(row[1]))
                lines.append(k)
            except (IndexError, ValueError) as exc:
                raise ValueError(f"{path}:{k}: bad row {row!r} ({exc}); expected 'timestamp,value'") from None
    if not times:
        raise ValueError(f"{path}: no rows after the header; a NAB data file needs at least one 'timestamp,value' row")
    ts = np.array(times, dtype="datetime64[s]")
    back = _first_out_of_order(ts)
    if back is not None:
        raise ValueError(f"{path}:{lines[back]}: timestamp {stamps[back]!r} is before the previous row's "
                         f"{stamps[back - 1]!r}; NAB data files must be in time order")
    vals = np.asarray(values, dtype=np.float64)
    if not np.all(np.isfinite(vals)):
        raise ValueError(f"{path}: non-finite values; NAB files must hold numbers only")
    return NabFile(name or path.name, ts, vals, stamps)


def load_corpus(root: Path) -> list[NabFile]:
    """Every ``data/<category>/<file>.csv`` under ``root``, sorted by name."""
    data = Path(root) / "data"
    if not data.is_dir():
        raise ValueError(f"{root} has no data/ folder; pass a directory laid out like ../shared/bench/nab")
    files = sorted(p for p in data.glob("*/*.csv"))
    if not files:
        raise ValueError(f"{data} holds no <category>/<file>.csv files")
    return [read_nab_csv(p, f"{p.parent.name}/{p.name}") for p in files]


def _first_out_of_order(ts: np.ndarray) -> int | None:
    """Index of the first timestamp before the one before it (None: in time order; NAB's own data
    repeats a timestamp now and then, which is kept)."""
    bad = np.flatnonzero(np.diff(ts) < np.timedelta64(0, "s"))
    return int(bad[0]) + 1 if bad.size else None


def check_windows(where: str, windows: list[tuple[np.datetime64, np.datetime64]], shown: list | None = None) -> None:
    """ValueError naming ``where`` and the window when a window ends before it starts or two windows
    share a timestamp (a duplicate, a nested or an overlapping window): NAB's windows are disjoint,
    and scoring such labels would drop or double count a window. ``shown``: the windows as written."""
    shown = [f"[{a}, {b}]" for a, b in windows] if shown is None else shown
    for (a, b), text in zip(windows, shown):
        if b < a:
            raise ValueError(f"{where}: window {text} ends before it starts; write it as [start, end]")
    order = sorted(range(len(windows)), key=lambda i: (windows[i][0], windows[i][1]))
    for i, j in zip(order, order[1:]):
        if windows[j][0] <= windows[i][1]:
            raise ValueError(f"{where}: window {shown[j]} overlaps window {shown[i]}; NAB windows must be "
                             "disjoint (merge or remove one)")


def load_windows(root: Path) -> dict[str, list[tuple[np.datetime64, np.datetime64]]]:
    path = Path(root) / "labels" / "combined_windows.json"
    if not path.is_file():
        raise ValueError(f"{path} is missing; NAB scoring needs labels/combined_windows.json")
    raw = read_json(path)
    if not isinstance(raw, dict):
        raise ValueError(f'{path}: expected an object {{"<category>/<file>.csv": [[start, end], ...]}}')
    out = {}
    for k, v in raw.items():
        try:
            out[k] = [(_parse_time(a), _parse_time(b)) for a, b in v]
        except (TypeError, ValueError):
            raise ValueError(f"{path}: {k}: expected a list of [start, end] timestamps; got {v!r}"[:300]) from None
        check_windows(f"{path}: {k}", out[k], [f"[{a}, {b}]" for a, b in v])
    return out


def check_labelled(corpus: list[NabFile], windows: dict, root: Path) -> None:
    """ValueError naming the first data file without an entry in the labels: scoring it as
    anomaly-free would count its flagged rows as false positives without a word."""
    path = Path(root) / "labels" / "combined_windows.json"
    for f in corpus:
        if f.name not in windows:
            raise ValueError(f"data/{f.name} has no entry in {path}; list an anomaly-free file with [] "
                             "or remove the file from data/")


def load_profiles(root: Path) -> dict[str, dict[str, float]]:
    path = Path(root) / "config" / "profiles.json"
    if path.is_file():
        raw = read_json(path)
        if not isinstance(raw, dict) or not raw:
            raise ValueError(f'{path}: expected an object {{profile: {{"CostMatrix": {{...}}}}}}')
        out = {}
        for k, v in raw.items():
            cost = v.get("CostMatrix") if isinstance(v, dict) else None
            if not isinstance(cost, dict):
                raise ValueError(f'{path}: profile {k} has no "CostMatrix" object (tpWeight, fnWeight, fpWeight)')
            missing = [w for w in ("tpWeight", "fnWeight", "fpWeight") if w not in cost]
            if missing:
                raise ValueError(f"{path}: profile {k}: CostMatrix has no {', '.join(missing)}")
            try:
                out[k] = {w: float(x) for w, x in cost.items()}
            except (TypeError, ValueError):
                raise ValueError(f"{path}: profile {k}: the CostMatrix weights must be numbers") from None
        return out
    return {  # NAB v1.1 defaults
        "standard": {"tpWeight": 1.0, "fnWeight": 1.0, "fpWeight": 0.11},
        "reward_low_FP_rate": {"tpWeight": 1.0, "fnWeight": 1.0, "fpWeight": 0.22},
        "reward_low_FN_rate": {"tpWeight": 1.0, "fnWeight": 2.0, "fpWeight": 0.11},
    }


# --------------------------------------------------------------------------------------------
# scoring
# --------------------------------------------------------------------------------------------
def scaled_sigmoid(p: np.ndarray | float) -> np.ndarray:
    """NAB's ``s(p) = 2 / (1 + exp(5 p)) - 1``, with ``s = -1`` for ``p > 3`` (NAB's sweeper,
    ``scaledSigmoid``: at exactly ``p = 3`` the formula holds, ``2 / (1 + exp(15)) - 1``).

    >>> scaled_sigmoid(np.array([-1.0, 3.0, 3.5])).round(7).tolist()
    [0.9866143, -0.9999994, -1.0]
    """
    p = np.asarray(p, dtype=np.float64)
    out = 2.0 / (1.0 + np.exp(np.clip(5.0 * p, -700, 700))) - 1.0
    return np.where(p > 3.0, -1.0, out)


@dataclass
class ScoringRows:
    """Per-row scoring metadata of one file.

    ``window[i]`` is the index of the window holding row ``i`` (-1 outside windows, -2 probationary);
    ``unweighted[i]`` is ``s(p)`` (in a window) or the false-positive weight (outside).
    """

    window: np.ndarray
    unweighted: np.ndarray
    n_windows: int  # windows with at least one scorable row
    n_labelled: int = -1  # windows in the file's labels, probationary ones too (-1: n_windows)

    def __post_init__(self):
        if self.n_labelled < 0:
            self.n_labelled = self.n_windows


def probation_length(n: int) -> int:
    return int(min(math.floor(PROBATION_PERCENT * n), PROBATION_PERCENT * 5000))


def prepare_rows(n: int, windows_rows: list[tuple[int, int]], probation: int | None = None,
                 n_labelled: int | None = None) -> ScoringRows:
    """Scoring metadata for ``n`` rows with windows given as inclusive ``(left, right)`` row indices.

    ``n_labelled`` is the number of windows in the file's labels (default: ``len(windows_rows)``);
    NAB's perfect score counts every one of them, its null score only those with a scorable row.
    """
    if probation is None:
        probation = probation_length(n)
    window = np.full(n, -1, dtype=np.int64)
    unweighted = np.full(n, -1.0)
    idx = np.arange(n)
    prev_right, prev_width = None, None
    start = 0
    ordered = sorted(windows_rows)
    for w, (left, right) in enumerate(ordered):
        if not (0 <= left <= right < n):
            raise ValueError(f"window rows ({left}, {right}) outside a file of {n} rows")
        if prev_right is not None and left <= prev_right:
            raise ValueError(f"window rows ({left}, {right}) overlap window rows {tuple(ordered[w - 1])}; "
                             "NAB windows must be disjoint")
        width = float(right - left + 1)
        if prev_right is not None:  # rows between the previous window and this one
            seg = idx[start:left]
            unweighted[start:left] = scaled_sigmoid(np.abs(prev_right - seg) / max(prev_width - 1.0, 1.0))
        seg = idx[left : right + 1]
        unweighted[left : right + 1] = scaled_sigmoid(-(right - seg + 1) / width)
        window[left : right + 1] = w
        prev_right, prev_width, start = right, width, right + 1
    if prev_right is not None and start < n:
        seg = idx[start:]
        unweighted[start:] = scaled_sigmoid(np.abs(prev_right - seg) / max(prev_width - 1.0, 1.0))
    window[:probation] = -2
    counted = np.unique(window[window >= 0])
    # renumber the counted windows 0..k-1 so per-file ids are dense
    remap = {int(w): k for k, w in enumerate(counted)}
    window = np.array([remap.get(int(w), int(w)) if w >= 0 else int(w) for w in window], dtype=np.int64)
    labelled = len(windows_rows) if n_labelled is None else int(n_labelled)
    return ScoringRows(window, unweighted, len(counted), max(labelled, len(counted)))


def rows_for_file(f: NabFile, windows: list[tuple[np.datetime64, np.datetime64]]) -> ScoringRows:
    """Map a file's time windows to row indices (first row >= start, last row <= end).

    ValueError naming the file when its timestamps are out of time order or a window is reversed
    or overlaps another (:func:`check_windows`).
    """
    back = _first_out_of_order(f.timestamps)
    if back is not None:
        raise ValueError(f"data/{f.name}: row {back + 1} ({f.raw_timestamps[back]!r}) is before the row before it "
                         f"({f.raw_timestamps[back - 1]!r}); NAB data files must be in time order")
    check_windows(f"data/{f.name}", windows)
    pairs = []
    for a, b in windows:
        left = int(np.searchsorted(f.timestamps, a, side="left"))
        right = int(np.searchsorted(f.timestamps, b, side="right")) - 1
        if left <= right:
            pairs.append((left, right))
    return prepare_rows(len(f.values), pairs, n_labelled=len(windows))


def score_corpus(
    items: list[tuple[ScoringRows, np.ndarray]], profiles: dict[str, dict[str, float]]
) -> dict[str, dict[str, float]]:
    """Optimise the threshold per profile over the corpus; return score, raw, threshold and counts.

    ``items`` pairs each file's :class:`ScoringRows` with its anomaly scores (same length).
    """
    windows_all, unweighted_all, scores_all = [], [], []
    offset = 0
    total_windows = total_labelled = 0
    for rows, scores in items:
        scores = np.asarray(scores, dtype=np.float64)
        if scores.shape != rows.window.shape:
            raise ValueError(f"scores have {scores.shape[0]} rows but the file has {rows.window.shape[0]}")
        if not np.all(np.isfinite(scores)):
            raise ValueError("anomaly scores contain NaN or infinity; a detector must emit finite scores")
        keep = rows.window != -2
        w = rows.window[keep].copy()
        w[w >= 0] += offset
        offset += rows.n_windows
        total_windows += rows.n_windows
        total_labelled += rows.n_labelled
        windows_all.append(w)
        unweighted_all.append(rows.unweighted[keep])
        scores_all.append(scores[keep])
    win = np.concatenate(windows_all)
    unw = np.concatenate(unweighted_all)
    sc = np.concatenate(scores_all)
    order = np.argsort(-sc, kind="stable")
    win, unw, sc = win[order], unw[order], sc[order]
    max_tp = float(scaled_sigmoid(-1.0))
    out: dict[str, dict[str, float]] = {}
    for name, prof in profiles.items():
        tp_w, fn_w, fp_w = prof["tpWeight"], prof["fnWeight"], prof["fpWeight"]
        sweep = np.where(win >= 0, unw * tp_w / max_tp, unw * fp_w)
        best_tp = np.full(total_windows, -np.inf)
        fp_sum = 0.0
        window_sum = -fn_w * total_windows
        best = (window_sum, math.inf, 0, 0)  # raw, threshold, tp, fp (flag nothing)
        n_tp = n_fp = 0
        win_l, sweep_l, sc_l = win.tolist(), sweep.tolist(), sc.tolist()
        n = len(sc_l)
        for i in range(n):
            w = win_l[i]
            if w < 0:
                fp_sum += sweep_l[i]
                n_fp += 1
            else:
                s = sweep_l[i]
                if best_tp[w] == -np.inf:
                    window_sum += s + fn_w
                    best_tp[w] = s
                    n_tp += 1
                elif s > best_tp[w]:
                    window_sum += s - best_tp[w]
                    best_tp[w] = s
            # a threshold is only realisable at the end of a group of equal scores
            if i + 1 == n or sc_l[i + 1] != sc_l[i]:
                raw = window_sum + fp_sum
                if raw > best[0]:
                    best = (raw, sc_l[i], n_tp, n_fp)
        # NAB's normalisation: the perfect detector earns every labelled window, the null detector
        # misses the windows that can be scored (a window inside the probation period cannot)
        perfect = tp_w * total_labelled
        null = -fn_w * total_windows
        norm = 100.0 * (best[0] - null) / (perfect - null) if perfect != null else 0.0
        out[name] = {
            "score": norm,
            "raw": best[0],
            "threshold": best[1],
            "windows_detected": best[2],
            "windows": total_windows,
            "false_positive_rows": best[3],
        }
    return out


def score_at_threshold(
    items: list[tuple[ScoringRows, np.ndarray]], profile: dict[str, float], threshold: float
) -> dict[str, float]:
    """Raw and normalised score of ``items`` when rows with ``score >= threshold`` are flagged.

    The normalised score is NaN when the items hold no labelled window (perfect = null = 0), as
    :func:`score_corpus` normalises: perfect counts every labelled window, null the scorable ones.
    """
    tp_w, fn_w, fp_w = profile["tpWeight"], profile["fnWeight"], profile["fpWeight"]
    max_tp = float(scaled_sigmoid(-1.0))
    raw, n_win, n_lab, n_det, n_fp = 0.0, 0, 0, 0, 0
    for rows, scores in items:
        keep = rows.window != -2
        win, unw = rows.window[keep], rows.unweighted[keep]
        flag = np.asarray(scores, dtype=np.float64)[keep] >= threshold
        fp = flag & (win < 0)
        n_fp += int(fp.sum())
        raw += float((unw[fp] * fp_w).sum())
        for w in range(rows.n_windows):
            sel = flag & (win == w)
            if sel.any():  # a window counts its best (earliest) flagged row
                raw += float(unw[sel].max()) * tp_w / max_tp
                n_det += 1
            else:
                raw -= fn_w
        n_win += rows.n_windows
        n_lab += rows.n_labelled
    perfect, null = tp_w * n_lab, -fn_w * n_win
    norm = 100.0 * (raw - null) / (perfect - null) if perfect != null else math.nan
    return {"score": norm, "raw": raw, "windows_detected": n_det, "windows": n_win, "labelled_windows": n_lab,
            "false_positive_rows": n_fp}


def leave_one_category_out(
    names: list[str], items: list[tuple[ScoringRows, np.ndarray]], profiles: dict[str, dict[str, float]]
) -> dict:
    """NAB leave-one-category-out: the threshold is chosen on every other category, then applied.

    ``names`` are the files' ``<category>/<file>`` names, in the order of ``items``. Per profile and
    category: ``score`` (left out), ``threshold`` (chosen without the category), ``own_threshold_score``
    (the threshold optimised on the category itself, an upper bound) and the counts. ``mean`` is
    the mean of the left-out scores of the categories that hold windows (a category without any,
    such as ``artificialNoAnomaly``, has no normalised score: only its false positives count);
    ``pooled`` scores every file at its own fold's threshold, as one corpus, so those false
    positives count too.
    """
    cats = sorted({n.split("/")[0] for n in names})
    out: dict = {}
    for pname, prof in profiles.items():
        per_cat, pooled_raw, pooled_win, pooled_lab = {}, 0.0, 0, 0
        for c in cats:
            train = [it for n, it in zip(names, items) if n.split("/")[0] != c]
            test = [it for n, it in zip(names, items) if n.split("/")[0] == c]
            thr = score_corpus(train, {pname: prof})[pname]["threshold"]
            res = score_at_threshold(test, prof, thr)
            own = score_corpus(test, {pname: prof})[pname]["score"] if not math.isnan(res["score"]) else math.nan
            per_cat[c] = {**res, "threshold": thr, "own_threshold_score": own}
            pooled_raw += res["raw"]
            pooled_win += res["windows"]
            pooled_lab += res["labelled_windows"]
        scored = [v["score"] for v in per_cat.values() if not math.isnan(v["score"])]
        perfect, null = prof["tpWeight"] * pooled_lab, -prof["fnWeight"] * pooled_win
        out[pname] = {
            "categories": per_cat,
            "mean": float(np.mean(scored)) if scored else math.nan,
            "pooled": 100.0 * (pooled_raw - null) / (perfect - null) if perfect != null else math.nan,
            "full_corpus": score_corpus(items, {pname: prof})[pname]["score"],
        }
    return out


def alert_flags(scores: np.ndarray, threshold: float, debounce: int, events: bool) -> np.ndarray:
    """1.0 on the rows the daemon's ``kind = "anomaly"`` would alert on at ``threshold`` (``events``:
    only the first row of each event, as it does; else every row at or above it), 0.0 elsewhere.

    >>> alert_flags(np.array([0.6, 0.7, 0.0, 0.9]), 0.5, debounce=1, events=True).tolist()
    [1.0, 0.0, 0.0, 1.0]
    """
    from ratiowatch.stream.engine.pipeline import event_starts

    scores = np.asarray(scores, dtype=np.float64)
    if not events:
        return (scores >= threshold).astype(np.float64)
    out = np.zeros_like(scores)
    out[event_starts(scores, threshold, debounce)[0]] = 1.0
    return out


def flags_by_category(
    names: list[str], items: list[tuple[ScoringRows, np.ndarray]], profiles: dict[str, dict[str, float]],
) -> dict:
    """Every category scored on fixed 0/1 flags (such as :func:`alert_flags`): nothing is chosen on
    any file, so each category's score is a left-out score. Per profile, per category the score and
    counts, ``mean`` over the categories with windows and ``pooled`` over all files."""
    cats = sorted({n.split("/")[0] for n in names})
    out: dict = {}
    for pname, prof in profiles.items():
        per_cat, raw, n_win, n_lab = {}, 0.0, 0, 0
        for c in cats:
            res = score_at_threshold([it for n, it in zip(names, items) if n.split("/")[0] == c], prof, 0.5)
            per_cat[c] = res
            raw += res["raw"]
            n_win += res["windows"]
            n_lab += res["labelled_windows"]
        scored = [v["score"] for v in per_cat.values() if not math.isnan(v["score"])]
        # normalised as score_corpus: perfect earns every labelled window, null misses the scorable ones
        perfect, null = prof["tpWeight"] * n_lab, -prof["fnWeight"] * n_win
        out[pname] = {"categories": per_cat, "mean": float(np.mean(scored)) if scored else math.nan,
                      "pooled": 100.0 * (raw - null) / (perfect - null) if perfect != null else math.nan}
    return out


def stored_detectors(root: Path) -> list[str]:
    """Names of the detectors under ``root/results`` (the published NAB results shipped with the data)."""
    res = Path(root) / "results"
    return sorted(p.name for p in res.iterdir() if p.is_dir()) if res.is_dir() else []


def stored_items(root: Path, detector: str) -> tuple[list[str], list[tuple[ScoringRows, np.ndarray]]]:
    """(names, items) of the stored results of ``detector`` against ``root``'s labels."""
    corpus = load_corpus(root)
    windows = load_windows(root)
    check_labelled(corpus, windows, root)
    names, items = [], []
    for f in corpus:
        cat, base = f.name.split("/")
        path = Path(root) / "results" / detector / cat / f"{detector}_{base}"
        if not path.is_file():
            raise ValueError(f"missing result file {path}")
        names.append(f.name)
        items.append((rows_for_file(f, windows.get(f.name, [])), read_result_scores(path, len(f.values))))
    return names, items


def score_results_dir(root: Path, results: Path, detector: str) -> dict[str, dict[str, float]]:
    """Score stored NAB results ``results/<detector>/<category>/<detector>_<file>.csv`` against ``root``'s labels."""
    corpus = load_corpus(root)
    windows = load_windows(root)
    check_labelled(corpus, windows, root)
    items = []
    for f in corpus:
        cat, base = f.name.split("/")
        path = Path(results) / detector / cat / f"{detector}_{base}"
        if not path.is_file():
            raise ValueError(f"missing result file {path}")
        scores = read_result_scores(path, len(f.values))
        items.append((rows_for_file(f, windows.get(f.name, [])), scores))
    return score_corpus(items, load_profiles(root))


def read_result_scores(path: Path, n: int) -> np.ndarray:
    with open(path, newline="") as fh:
        reader = csv.DictReader(fh)
        if reader.fieldnames is None or "anomaly_score" not in reader.fieldnames:
            raise ValueError(f"{path}: no anomaly_score column")
        values = []
        for r in reader:
            try:
                values.append(float(r["anomaly_score"]))
            except (TypeError, ValueError):
                raise ValueError(f"{path}:{reader.line_num}: anomaly_score {r['anomaly_score']!r} is not a number") from None
            if not math.isfinite(values[-1]):
                raise ValueError(f"{path}:{reader.line_num}: anomaly_score {r['anomaly_score']!r} is not finite; "
                                 "stored scores must be finite numbers")
        scores = np.array(values, dtype=np.float64)
    if scores.shape[0] != n:
        raise ValueError(f"{path}: {scores.shape[0]} scores for a data file of {n} rows")
    return scores


@contextlib.contextmanager
def _results_folder(write_results: Path | None):
    """A temporary folder beside ``<write_results>/ratiowatch`` to write the result files into; it
    replaces ``ratiowatch`` only when the block ends without an error, so an interrupted or failed
    run leaves no partial result set behind (and any earlier one as it was)."""
    if write_results is None:
        yield None
        return
    parent = Path(write_results)
    created = not parent.exists()
    parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".ratiowatch.partial-", dir=parent))
    try:
        yield staging
        target = parent / "ratiowatch"
        old = None
        if target.exists():
            old = Path(tempfile.mkdtemp(prefix=".ratiowatch.old-", dir=parent))
            target.rename(old / "ratiowatch")
        staging.rename(target)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        if created:
            with contextlib.suppress(OSError):
                parent.rmdir()  # only if nothing else was put there meanwhile
        raise


def output_folder_problem(path: Path, option: str) -> str | None:
    """Why ``path`` cannot be used (or created) as the output folder of ``option``; None: it can.

    Checked before any work, so that a run does not end in an error after the detector ran.
    """
    path = Path(path)
    if path.exists():
        if not path.is_dir():
            return f"{option} {path}: not a folder; give a folder to write into"
        if not os.access(path, os.W_OK | os.X_OK):
            return f"{option} {path}: the folder is not writable; give a folder you can write to"
        return None
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        return f"{option} {path}: cannot create the folder ({parent} is not a folder)"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"{option} {path}: cannot create the folder ({parent} is not writable)"
    return None


def write_result(path: Path, f: NabFile, scores: np.ndarray) -> None:
    """NAB-format result file: ``timestamp,anomaly_score`` (plus value, as NAB writes it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["timestamp", "value", "anomaly_score"])
        for t, v, s in zip(f.raw_timestamps, f.values.tolist(), np.asarray(scores).tolist()):
            w.writerow([t, repr(v), f"{s:.6f}"])


# --------------------------------------------------------------------------------------------
# running the detector
# --------------------------------------------------------------------------------------------
def run_detector(values: np.ndarray, factory=None, params: dict | None = None) -> np.ndarray:
    """Causal pass of a fresh detector (default configuration, or ``params``) over one series."""
    if factory is None:
        from ratiowatch.stream.detectors.anomaly import TimeSeriesAnomalyDetector

        factory = TimeSeriesAnomalyDetector
    det = factory(**(params or {}))
    return np.asarray(det.score_series(values), dtype=np.float64)


def evaluate(root: Path, write_results: Path | None = None, plot_dir: Path | None = None, factory=None,
             params: dict | None = None, leave_one_out: bool = False, alerts: float | None = None) -> dict:
    """Run the detector on every file of ``root`` and score it; the JSON object of ``eval nab``.

    With ``leave_one_out`` the object also holds :func:`leave_one_category_out` for our detector
    and for every stored detector under ``root/results``. With ``alerts`` (a score threshold) it
    also holds the daemon's alerts at that fixed threshold, by category (:func:`alert_flags`,
    :func:`flags_by_category`): every row at or above it (``rows``) and the first row of
    each event only (``events``, what the daemon sends).
    """
    root = Path(root)
    corpus = load_corpus(root)
    if leave_one_out:  # checked before the detector runs on every file
        cats = sorted({f.name.split("/")[0] for f in corpus})
        if len(cats) < 2:
            raise ValueError(f"--leave-one-out needs at least two categories under data/; "
                             f"found {len(cats)} ({', '.join(cats)})")
    windows = load_windows(root)
    check_labelled(corpus, windows, root)
    profiles = load_profiles(root)
    items = []
    per_file_time = {}
    all_scores = {}
    from ratiowatch.stream.commands.progress import track

    with _results_folder(write_results) as staging:
        for f in track(corpus, desc="nab", unit="file"):
            t0 = time.perf_counter()
            scores = run_detector(f.values, factory, params)
            per_file_time[f.name] = time.perf_counter() - t0
            all_scores[f.name] = scores
            items.append((rows_for_file(f, windows.get(f.name, [])), scores))
            if staging is not None:
                cat, base = f.name.split("/")
                write_result(staging / cat / f"ratiowatch_{base}", f, scores)
        result = score_corpus(items, profiles)
    if plot_dir is not None:
        _plot(corpus, windows, all_scores, result, Path(plot_dir))
    order = [p for p in PROFILE_NAMES if p in result] + [p for p in result if p not in PROFILE_NAMES]
    obj = {
        "benchmark": "nab",
        "files": len(corpus),
        "params": params or {},
        "scores": {p: round(float(result[p]["score"]), 3) for p in order},
        "thresholds": {p: result[p]["threshold"] for p in order},
        "detail": {p: {k: v for k, v in result[p].items() if k not in ("score", "threshold")} for p in order},
        "seconds": round(sum(per_file_time.values()), 2),
    }
    notes = threshold_notes(obj["thresholds"])
    if notes:
        obj["notes"] = notes
    if leave_one_out:
        loo = {"ratiowatch": leave_one_category_out([f.name for f in corpus], items, profiles)}
        for det in stored_detectors(root):
            try:
                loo[det] = leave_one_category_out(*stored_items(root, det), profiles)
            except ValueError:  # an incomplete stored result folder is skipped, not fatal
                continue
        obj["leave_one_out"] = _rounded(loo)
    if alerts is not None:
        debounce = int((params or {}).get("debounce", _default_debounce()))
        names = [f.name for f in corpus]
        obj["alerts"] = _rounded({
            "threshold": alerts, "debounce": debounce,
            **{mode: flags_by_category(
                names, [(rows, alert_flags(sc, alerts, debounce, mode == "events")) for rows, sc in items],
                profiles) for mode in ("rows", "events")}})
    return obj


def threshold_notes(thresholds: dict[str, float]) -> list[str]:
    """A note for the profiles whose best threshold is to flag nothing (an infinite threshold,
    written ``null`` in JSON), e.g. on a corpus without any window."""
    none = [p for p, t in thresholds.items() if t is None or math.isinf(t)]
    if not none:
        return []
    return [f"{', '.join(none)}: no threshold scores better than flagging no row at all; "
            "threshold null (nothing flagged)"]


def _default_debounce() -> int:
    from ratiowatch.stream.detectors.anomaly import DEFAULTS

    return int(DEFAULTS["debounce"])


def _rounded(obj):
    if isinstance(obj, dict):
        return {k: _rounded(v) for k, v in obj.items()}
    if isinstance(obj, float):
        return None if math.isnan(obj) else round(obj, 3)
    return obj


def print_leave_one_out(loo: dict, file=None) -> None:
    """Per profile: one row per detector with each category's left-out score, the mean and pooled."""
    file = sys.stdout if file is None else file
    for pname in PROFILE_NAMES:
        dets = [d for d in loo if pname in loo[d]]
        if not dets:
            continue
        cats = list(loo[dets[0]][pname]["categories"])
        print(f"\n{pname}: left-out score per category (threshold chosen on the other categories)", file=file)
        head = "".join(f"{c[:22]:>24s}" for c in cats)
        print(f"{'detector':>18s}{head}{'mean':>9s}{'pooled':>9s}{'full':>9s}", file=file)
        for d in dets:
            r = loo[d][pname]
            cells = ""
            for c in cats:
                v = r["categories"][c]
                sc = "-" if v["score"] is None else f"{v['score']:.2f}"
                cells += f"{sc + ' (' + str(v['false_positive_rows']) + ' fp)':>24s}"
            fmt = lambda x: "-" if x is None else f"{x:.2f}"  # noqa: E731
            print(f"{d:>18s}{cells}{fmt(r['mean']):>9s}{fmt(r['pooled']):>9s}{fmt(r['full_corpus']):>9s}",
                  file=file)


def _plot(corpus, windows, all_scores, result, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ratiowatch.stream.evaluate.runner import plot_file_name

    out.mkdir(parents=True, exist_ok=True)
    thr = result.get("standard", next(iter(result.values())))["threshold"]
    for f in corpus:
        fig, (a1, a2) = plt.subplots(2, 1, figsize=(12, 5), sharex=True)
        x = np.arange(len(f.values))
        a1.plot(x, f.values, lw=0.6)
        rows = rows_for_file(f, windows.get(f.name, []))
        for w in range(rows.n_windows):
            sel = np.flatnonzero(rows.window == w)
            a1.axvspan(sel[0], sel[-1], color="orange", alpha=0.3)
        a1.axvline(probation_length(len(x)), color="grey", ls=":")
        s = all_scores[f.name]
        a2.plot(x, s, lw=0.6)
        a2.axhline(thr, color="red", ls="--", lw=0.6)
        flag = np.flatnonzero(s >= thr)
        a1.plot(flag, f.values[flag], "rv", ms=5)
        a1.set_title(f.name)
        fig.tight_layout()
        fig.savefig(out / plot_file_name(f.name.removesuffix(".csv")), dpi=90)
        plt.close(fig)


# --------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------
def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dir", nargs="?", type=Path, default=None,
                        help="NAB-style folder (data/, labels/, config/); default ../shared/bench/nab")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--write-results", type=Path, default=None, metavar="OUT",
                        help="write NAB-format result files under OUT/ratiowatch/<category>/ (OUT/ratiowatch is "
                             "replaced as a whole once the run succeeds; a failed run leaves it as it was)")
    parser.add_argument("--plot", type=Path, default=None, metavar="DIR", help="write one PNG per file")
    parser.add_argument("--score-stored", default=None, metavar="DETECTOR",
                        help="only score DIR/results/DETECTOR (checks the scorer against stored results)")
    parser.add_argument("--leave-one-out", action="store_true",
                        help="also score each category with the threshold chosen on the other categories, "
                             "for ours and every stored detector (the left-out mean is the number that counts)")
    parser.add_argument("--alerts", type=float, default=None, metavar="S",
                        help="also score the daemon's anomaly alerts at the fixed score threshold S (its default: "
                             "0.5), by category: no threshold is chosen on any file")
    parser.add_argument("--params", default=None, metavar="JSON",
                        help="detector parameters instead of the default, e.g. '{\"debounce\": 64}'")


def run(args) -> int:
    from ratiowatch.stream.evaluate.datasets import eval_dir_problem

    root = args.dir if args.dir is not None else default_bench_dir()
    problem = eval_dir_problem(args.dir, root, "nab")
    if problem:
        print(f"ratiowatch eval nab: {problem}", file=sys.stderr)
        return 2
    for option, path in (("--write-results", args.write_results), ("--plot", args.plot)):
        problem = output_folder_problem(path, option) if path is not None else None
        if problem:
            print(f"ratiowatch eval nab: {problem}", file=sys.stderr)
            return 2
    if args.plot is not None:
        try:
            import matplotlib  # noqa: F401
        except ImportError as exc:
            print(f"ratiowatch eval nab: --plot needs matplotlib ({exc}); install it with: pip install matplotlib",
                  file=sys.stderr)
            return 2
    from ratiowatch.stream.commands.interrupts import guarded

    with guarded():  # a Ctrl-C while numba compiles stops the run too
        try:
            if args.score_stored:
                res = score_results_dir(root, Path(root) / "results", args.score_stored)
                obj = {"benchmark": "nab", "detector": args.score_stored,
                       "scores": {p: round(v["score"], 3) for p, v in res.items()},
                       "thresholds": {p: v["threshold"] for p, v in res.items()}}
                if threshold_notes(obj["thresholds"]):
                    obj["notes"] = threshold_notes(obj["thresholds"])
            else:
                params = parse_params(args.params)
                if args.alerts is not None and not 0.0 < args.alerts <= 1.0:
                    raise ValueError(f"--alerts is a score threshold in (0, 1], e.g. 0.5; got {args.alerts}")
                obj = evaluate(root, args.write_results, args.plot, params=params, leave_one_out=args.leave_one_out,
                               alerts=args.alerts)
        except (ValueError, TypeError) as exc:
            print(f"ratiowatch eval nab: {exc}", file=sys.stderr)
            return 2
        except OSError as exc:  # a file that cannot be read or written: one line naming it
            from ratiowatch.stream.evaluate.datasets import os_error_line

            print(f"ratiowatch eval nab: {os_error_line(exc)}", file=sys.stderr)
            return 2
    if args.json:
        from ratiowatch.stream.evaluate.environment import environment
        from ratiowatch.stream.evaluate.jsonout import dumps as strict_json

        print(strict_json({**obj, "environment": environment()}, indent=2))
        for note in obj.get("notes", []):  # said on stderr too, where a reader of the terminal looks
            print(note, file=sys.stderr)
    else:
        for p, s in obj["scores"].items():
            thr = obj["thresholds"][p]
            print(f"{p:>20s}: {s:7.2f}  (threshold {'none: no row flagged' if math.isinf(thr) else thr})")
        if "leave_one_out" in obj:
            print_leave_one_out(obj["leave_one_out"])
        if "alerts" in obj:
            al = obj["alerts"]
            print(f"\nthe daemon's alerts at the fixed threshold {al['threshold']} (mean of categories / pooled):")
            for mode in ("rows", "events"):
                for pname in PROFILE_NAMES:
                    r = al[mode][pname]
                    cats = ", ".join(f"{c} {v['score'] if v['score'] is not None else '-'} ({v['false_positive_rows']} fp)"
                                     for c, v in r["categories"].items())
                    print(f"  {mode:>6s} {pname:>20s}: {r['mean']} / {r['pooled']}   {cats}")
        for note in obj.get("notes", []):
            print(note)
    return 0


def parse_params(text: str | None) -> dict | None:
    """The ``--params`` JSON object of TimeSeriesAnomalyDetector parameters (None when not given)."""
    if not text:
        return None
    try:
        params = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"--params is not valid JSON ({exc}); e.g. '{{\"debounce\": 64}}'") from None
    if not isinstance(params, dict):
        raise ValueError("--params must be a JSON object of detector parameters")
    if "views" in params:
        params["views"] = tuple(tuple(v) for v in params["views"])
    return params

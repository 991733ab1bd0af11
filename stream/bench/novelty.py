"""``ratiowatch bench novelty``: streaming outlier scoring vs river, measured in one run.

A d = 10 stream (Gaussian inliers with 1% shifted outliers) is replayed point by point through
``score_one`` then ``learn_one`` (river's dict API) for:

- ours: :class:`ratiowatch.stream.detectors.outlier_stream.StreamingOutlierDetector` with a reference buffer of 500
  (default configuration: 64 centres, rank-one kernel updates in numba, theta re-solved every 32
  points, centres and width refitted every 500 points);
- river's ``anomaly.HalfSpaceTrees`` and ``anomaly.LocalOutlierFactor`` on the same points.

Reported per detector: microseconds per point (score + learn), ROC-AUC on the stream, and for
ours also the numpy fast path (``process``) and the RSS before/after a long second pass (memory must
stay flat: the buffer is bounded). Ratios are ``baseline time / our time`` (> 1 = we are faster).
river's LOF keeps every point, so it runs on a shorter prefix (``--lof-points``).

``time_series`` does the same for a univariate stream (a noisy cycle of 96 rows with a spike of 6
noise sd every 500 rows): :class:`ratiowatch.stream.detectors.anomaly.TimeSeriesAnomalyDetector`
(the daemon's ``kind = "anomaly"``) by its batch form and by river's API, against river's
HalfSpaceTrees on the newest 8 values (a shingle, min-max scaled), with ROC-AUC of the spike rows
and our detector's memory and checkpoint size.

``batch`` times the scikit-learn-style :class:`ratiowatch.stream.detectors.outlier.DensityRatioOutlierDetector`
(default configuration: likelihood-CV width, 1,000 centres, ten held-out folds for its threshold)
on a reference of inliers (``fit``) and a new batch with 5 % outliers (``score_samples``), against
scikit-learn's LocalOutlierFactor (``novelty=True``), OneClassSVM and IsolationForest on the same
sets in the same run: seconds for each phase and ROC-AUC of the batch's outliers.
"""

from __future__ import annotations

import argparse
import gc
import time

import numpy as np

from .common import environment, rss_mb


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--quick", action="store_true", help="short streams (smoke test)")
    parser.add_argument("--points", type=int, default=None, help="stream length (default 20000, quick 3000)")
    parser.add_argument("--lof-points", type=int, default=None,
                        help="points for river's LOF, which stores every point (default 2000, quick 500)")
    parser.add_argument("--seed", type=int, default=0)


def make_stream(n: int, d: int = 10, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Inliers N(0, I); every 100th point (after the first 1000) shifted by 4 in every coordinate."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d))
    y = np.zeros(n, dtype=int)
    idx = np.arange(1000, n, 100) if n > 1000 else np.arange(n // 2, n, 100)
    x[idx] += 4.0
    y[idx] = 1
    return x, y


def _replay(model, dicts) -> tuple[float, list[float]]:
    scores = []
    t0 = time.perf_counter()
    for x in dicts:
        scores.append(model.score_one(x))
        model.learn_one(x)
    return time.perf_counter() - t0, scores


def _auc(y, s) -> float | None:
    from sklearn.metrics import roc_auc_score

    return round(float(roc_auc_score(y, s)), 4) if 0 < y.sum() < len(y) else None


def run_bench(n: int, n_lof: int, seed: int = 0) -> dict:
    from river import anomaly, compose, preprocessing

    from ratiowatch.stream.detectors.outlier_stream import StreamingOutlierDetector

    x, y = make_stream(n, seed=seed)
    dicts = [{f"x{j}": float(v) for j, v in enumerate(row)} for row in x]
    # warm the numba cache/compile outside the timed region
    warm = StreamingOutlierDetector(buffer_size=500)
    warm.process(x[:700])
    rss0 = rss_mb()
    ours = StreamingOutlierDetector(buffer_size=500, seed=seed)
    t_ours, s_ours = _replay(ours, dicts)
    gc.collect()
    rss1 = rss_mb()
    _replay(ours, dicts)  # a second pass of the same length: memory must not grow
    gc.collect()
    rss2 = rss_mb()
    fast = StreamingOutlierDetector(buffer_size=500, seed=seed)
    t0 = time.perf_counter()
    s_fast = fast.process(x)
    t_fast = time.perf_counter() - t0

    hst = compose.Pipeline(preprocessing.MinMaxScaler(), anomaly.HalfSpaceTrees(seed=seed))
    t_hst, s_hst = _replay(hst, dicts)
    lof = anomaly.LocalOutlierFactor()
    t_lof, s_lof = _replay(lof, dicts[:n_lof])
    t_ours_prefix, _ = _replay(StreamingOutlierDetector(buffer_size=500, seed=seed), dicts[:n_lof])

    us = lambda t, m: round(1e6 * t / m, 2)  # noqa: E731
    return {
        "benchmark": "novelty",
        "setup": {"points": n, "dim": x.shape[1], "outliers": int(y.sum()), "buffer_size": 500,
                  "lof_points": n_lof},
        "us_per_point": {
            "ours_river_api": us(t_ours, n),
            "ours_numpy_path": us(t_fast, n),
            "HalfSpaceTrees": us(t_hst, n),
            "LocalOutlierFactor": us(t_lof, n_lof),
            "ours_on_lof_prefix": us(t_ours_prefix, n_lof),
        },
        "speedup": {
            "vs_HalfSpaceTrees": round(t_hst / t_ours, 2),
            "vs_LocalOutlierFactor_same_prefix": round(t_lof / t_ours_prefix, 2),
        },
        "auc": {"ours": _auc(y, s_ours), "ours_numpy_path": _auc(y, s_fast), "HalfSpaceTrees": _auc(y, s_hst),
                "LocalOutlierFactor": _auc(y[:n_lof], s_lof)},
        "rss_mb": {"before": round(rss0, 1), "after_pass_1": round(rss1, 1), "after_pass_2": round(rss2, 1)},
        "environment": environment(),
    }


def make_series(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A cycle of 96 rows plus N(0, 0.1^2) noise; every 500th row from 1000 on is raised by 0.6."""
    rng = np.random.default_rng(seed)
    x = np.sin(2 * np.pi * np.arange(n) / 96) + 0.1 * rng.normal(size=n)
    y = np.zeros(n, dtype=int)
    idx = np.arange(1000, n, 500)
    x[idx] += 0.6
    y[idx] = 1
    return x, y


def run_time_series(n: int, seed: int = 0) -> dict:
    from river import anomaly, compose, preprocessing

    from ratiowatch.stream.detectors.anomaly import TimeSeriesAnomalyDetector
    from ratiowatch.stream.detectors.state_file import write_state

    x, y = make_series(n, seed)
    TimeSeriesAnomalyDetector().score_series(x[:600])  # compile outside the timed region
    batch = TimeSeriesAnomalyDetector(seed=seed)
    t0 = time.perf_counter()
    s_batch = batch.score_series(x)
    t_batch = time.perf_counter() - t0
    t_api, s_api = _replay(TimeSeriesAnomalyDetector(seed=seed), x.tolist())
    shingles = [{f"lag{j}": float(x[max(t - j, 0)]) for j in range(8)} for t in range(n)]
    hst = compose.Pipeline(preprocessing.MinMaxScaler(), anomaly.HalfSpaceTrees(seed=seed))
    t_hst, s_hst = _replay(hst, shingles)
    memory = sum(v.nbytes for det in (*batch._detectors, *batch._tails, batch._repeat_tail) if det is not None
                 for v in vars(det).values() if isinstance(v, np.ndarray))
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "state.npz"
        write_state(path, batch.to_state())
        checkpoint = path.stat().st_size
    us = lambda t: round(1e6 * t / n, 2)  # noqa: E731
    return {
        "points": n, "spikes": int(y.sum()),
        "us_per_row": {"ours_batch": us(t_batch), "ours_river_api": us(t_api), "HalfSpaceTrees_shingle8": us(t_hst)},
        "speedup_vs_HalfSpaceTrees": {"batch": round(t_hst / t_batch, 2), "river_api": round(t_hst / t_api, 2)},
        "auc": {"ours": _auc(y, np.asarray(s_batch)), "ours_river_api": _auc(y, np.asarray(s_api)),
                "HalfSpaceTrees_shingle8": _auc(y, np.asarray(s_hst))},
        "ours_state_bytes": {"memory": int(memory), "checkpoint": int(checkpoint)},
    }


def make_batch(n_ref: int, n_test: int, d: int = 10, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Reference inliers N(0, I) and a new batch whose every 20th row is shifted by 1 in every coordinate."""
    rng = np.random.default_rng(seed)
    ref = rng.normal(size=(n_ref, d))
    test = rng.normal(size=(n_test, d))
    y = np.zeros(n_test, dtype=int)
    y[::20] = 1
    test[y == 1] += 1.0
    return ref, test, y


def run_batch(n_ref: int, n_test: int, seed: int = 0) -> dict:
    from sklearn.ensemble import IsolationForest
    from sklearn.neighbors import LocalOutlierFactor
    from sklearn.svm import OneClassSVM

    from ratiowatch.stream.detectors.outlier import DensityRatioOutlierDetector

    ref, test, y = make_batch(n_ref, n_test, seed=seed)
    DensityRatioOutlierDetector(seed=seed).fit(ref[:200]).score_samples(test[:20])  # compile outside the timing
    models = {
        "ours": DensityRatioOutlierDetector(seed=seed),
        "LocalOutlierFactor": LocalOutlierFactor(novelty=True),
        "OneClassSVM": OneClassSVM(gamma="scale"),
        "IsolationForest": IsolationForest(random_state=seed),
    }
    fit_s, score_s, auc = {}, {}, {}
    for name, model in models.items():
        t0 = time.perf_counter()
        model.fit(ref)
        t1 = time.perf_counter()
        s = model.score_samples(test)
        t2 = time.perf_counter()
        fit_s[name], score_s[name] = round(t1 - t0, 4), round(t2 - t1, 4)
        auc[name] = _auc(y, -np.asarray(s))  # higher score_samples = more normal, for all four
    total = {k: fit_s[k] + score_s[k] for k in models}
    return {
        "reference_rows": n_ref, "batch_rows": n_test, "features": int(ref.shape[1]),
        "fit_seconds": fit_s, "score_seconds": score_s, "auc": auc,
        "speedup_fit_and_score": {f"vs_{k}": round(total[k] / total["ours"], 3) for k in models if k != "ours"},
    }


def run(args) -> int:
    from .common import refuse_missing_peers, refuse_options

    # None is "the default"; a given 0 is checked like any other value
    if refuse_options(args, "novelty", {"points": 1000, "lof_points": 100, "seed": 0}):
        return 2
    if refuse_missing_peers("novelty", ["sklearn.metrics", "sklearn.ensemble", "sklearn.neighbors", "sklearn.svm"]):
        return 2
    n = args.points if args.points is not None else (3000 if args.quick else 20000)
    n_lof = args.lof_points if args.lof_points is not None else (500 if args.quick else 2000)
    from ratiowatch.stream.commands.progress import stages

    n_ref, n_test = (500, 250) if args.quick else (2000, 1000)
    with stages("bench novelty", 3) as phase:  # one run: ours, HalfSpaceTrees, LOF in turn
        phase(f"{n} points")
        obj = run_bench(n, min(n_lof, n), args.seed)
        phase(f"time series, {n} rows")
        obj["time_series"] = run_time_series(n, args.seed)
        phase(f"batch: {n_ref} reference rows, {n_test} new rows")
        obj["batch"] = run_batch(n_ref, n_test, args.seed)
    if args.json:
        from ratiowatch.stream.evaluate.jsonout import dumps as strict_json

        print(strict_json(obj, indent=2))
    else:
        for k, v in obj["us_per_point"].items():
            print(f"{k:>22s}: {v:9.2f} us/point")
        print(f"speedup: {obj['speedup']}  auc: {obj['auc']}  rss: {obj['rss_mb']}")
        ts = obj["time_series"]
        for k, v in ts["us_per_row"].items():
            print(f"{k:>24s}: {v:9.2f} us/row (time series)")
        print(f"time series: speedup {ts['speedup_vs_HalfSpaceTrees']}  auc: {ts['auc']}  "
              f"state: {ts['ours_state_bytes']}")
        b = obj["batch"]
        for k in b["fit_seconds"]:
            print(f"{k:>24s}: fit {b['fit_seconds'][k]:8.3f} s  score {b['score_seconds'][k]:8.3f} s  "
                  f"auc {b['auc'][k]} (batch)")
        print(f"batch: speedup {b['speedup_fit_and_score']}")
    return 0

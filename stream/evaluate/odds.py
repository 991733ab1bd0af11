"""ODDS evaluation, inlier-based protocol: ROC-AUC of the density-ratio detector vs sklearn baselines.

``ratiowatch eval odds DIR --json`` reads every ``DIR/<name>.npz`` (``X``: n x d, ``y``: 1 = outlier)
and, per seed ``s`` in 0..9 (bench README):

1. ``train_test_split(X, y, test_size=0.4, stratify=y, random_state=s)``;
2. standardise with the mean and std of the *inliers* of the training part (a constant feature
   keeps std 1);
3. fit on those training inliers only; score the whole test part;
4. ROC-AUC with outliers as positives.

Our detector is :class:`ratiowatch.stream.detectors.outlier.DensityRatioOutlierDetector` with its default
configuration (fixed in code); the outlier score is ``-score_samples`` (a low ratio means an
outlier). The baselines run on the identical splits: ``OneClassSVM(gamma="scale", nu=0.1)``,
``IsolationForest(random_state=s)``, ``LocalOutlierFactor(n_neighbors=20, novelty=True)``, each
scored by ``-score_samples``.

Examples
--------
>>> rng = np.random.default_rng(0)
>>> X = np.vstack([rng.normal(size=(150, 2)), rng.normal(6.0, 1.0, size=(10, 2))])
>>> y = np.r_[np.zeros(150), np.ones(10)].astype(int)
>>> res = evaluate_dataset(X, y, seeds=[0], baselines=())
>>> res["auc"] > 0.95
True
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

BASELINES = ("OneClassSVM", "IsolationForest", "LocalOutlierFactor")


def split_standardise(X: np.ndarray, y: np.ndarray, seed: int):
    """One split of the protocol: (training inliers, test samples, test labels), standardised."""
    from sklearn.model_selection import train_test_split

    x_tr, x_te, y_tr, y_te = train_test_split(X, y, test_size=0.4, stratify=y, random_state=seed)
    ref = x_tr[y_tr == 0]
    mu = ref.mean(axis=0)
    sd = ref.std(axis=0)
    sd[sd == 0] = 1.0
    return (ref - mu) / sd, (x_te - mu) / sd, y_te


def _baseline(name: str, seed: int):
    from sklearn.ensemble import IsolationForest
    from sklearn.neighbors import LocalOutlierFactor
    from sklearn.svm import OneClassSVM

    if name == "OneClassSVM":
        return OneClassSVM(gamma="scale", nu=0.1)
    if name == "IsolationForest":
        return IsolationForest(random_state=seed)
    if name == "LocalOutlierFactor":
        return LocalOutlierFactor(n_neighbors=20, novelty=True)
    raise ValueError(f"unknown baseline {name!r}; choose from {BASELINES}")


#: configurations compared by ``--leave-one-out`` (the default first): the kernel-width rules
CANDIDATES = {
    "lcv": {},  # default: width by likelihood cross-validation of a kernel density on the reference
    "local": {"sigma": "local"},  # 0.35 x the median 10th-neighbour distance
    "cv": {"sigma": "cv"},  # the ratio estimator's own LOOCV over sigma and lambda
}

#: a set where ours is this far below its best baseline is a finding to explain
GAP = 0.03


def ours_scores(ref: np.ndarray, test: np.ndarray, seed: int, params: dict | None = None) -> np.ndarray:
    """Outlier scores (higher = more anomalous) of the density-ratio detector (default or ``params``)."""
    from ratiowatch.stream.detectors.outlier import DensityRatioOutlierDetector

    det = DensityRatioOutlierDetector(seed=seed, **(params or {})).fit(ref)
    return -det.score_samples(test)


def leave_one_set_out(candidates: dict[str, dict[str, float]], best_baseline: dict[str, float]) -> dict:
    """Choose a candidate on every set but one by mean AUC, check it on the one left out; rotate.

    ``candidates`` maps a configuration name to its AUC per set; ``best_baseline`` the best sklearn
    baseline's AUC per set. Returns per set the choice, its left-out AUC and its gap to the best
    baseline, the mean left-out AUC against the mean best baseline, and the sets more than
    :data:`GAP` below their best baseline.
    """
    sets = sorted(best_baseline)
    per = {}
    for held in sets:
        rest = [s for s in sets if s != held]
        chosen = max(candidates, key=lambda c: (float(np.mean([candidates[c][s] for s in rest])), -list(candidates).index(c)))
        auc = candidates[chosen][held]
        per[held] = {"chosen": chosen, "auc": auc, "best_baseline": best_baseline[held],
                     "gap": auc - best_baseline[held]}
    return {
        "sets": per,
        "mean": float(np.mean([v["auc"] for v in per.values()])),
        "mean_best_baseline": float(np.mean([best_baseline[s] for s in sets])),
        "below_best_baseline_by_more_than_gap": [s for s, v in per.items() if v["gap"] < -GAP],
    }


def check_xy(X, y) -> tuple[np.ndarray, np.ndarray]:
    """``(X as float64 (n, d), y as int (n,))``; ValueError unless they are a usable data set."""
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y).astype(int).ravel()
    if X.ndim != 2 or X.shape[0] != y.shape[0]:
        raise ValueError(f"X must be (n, d) with one label per row; got X {X.shape}, y {y.shape}")
    if not np.all(np.isfinite(X)):
        raise ValueError("X holds NaN or infinite values")
    if set(np.unique(y).tolist()) != {0, 1}:
        raise ValueError("y must hold both labels 0 (inlier) and 1 (outlier)")
    return X, y


def load_npz(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """``(X, y)`` of one ``<name>.npz``; every problem is a ValueError naming the file."""
    import zipfile

    path = Path(path)
    if not zipfile.is_zipfile(path):
        what = "an empty file" if path.stat().st_size == 0 else "not a zip archive"
        raise ValueError(f"{path}: not a .npz archive ({what}); write one with numpy.savez(path, X=X, y=y)")
    try:
        with np.load(path, allow_pickle=False) as d:
            if "X" not in d or "y" not in d:
                raise ValueError(f"{path} must hold arrays X and y")
            X, y = d["X"].astype(np.float64), d["y"]
    except (OSError, EOFError, zipfile.BadZipFile) as exc:
        raise ValueError(f"{path}: cannot read the archive ({exc})") from None
    except (TypeError, ValueError) as exc:
        if str(path) in str(exc):
            raise
        raise ValueError(f"{path}: {exc}") from None
    try:
        check_xy(X, y)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{path}: {exc}") from None
    return X, y


def evaluate_dataset(X, y, seeds=range(10), baselines=BASELINES, params: dict | None = None) -> dict:
    """Mean ROC-AUC over ``seeds`` of our detector and of each baseline, on identical splits."""
    from sklearn.metrics import roc_auc_score

    X, y = check_xy(X, y)
    ours, base = [], {b: [] for b in baselines}
    t_ours, t_base = 0.0, {b: 0.0 for b in baselines}
    for s in seeds:
        ref, test, y_te = split_standardise(X, y, int(s))
        t0 = time.perf_counter()
        ours.append(roc_auc_score(y_te, ours_scores(ref, test, int(s), params)))
        t_ours += time.perf_counter() - t0
        for b in baselines:
            t0 = time.perf_counter()
            model = _baseline(b, int(s)).fit(ref)
            base[b].append(roc_auc_score(y_te, -model.score_samples(test)))
            t_base[b] += time.perf_counter() - t0
    return {
        "auc": float(np.mean(ours)),
        "auc_std": float(np.std(ours)),
        "baselines": {b: float(np.mean(v)) for b, v in base.items()},
        "seconds": {"ours": round(t_ours, 2), **{b: round(t, 2) for b, t in t_base.items()}},
    }


def evaluate(root: Path, seeds=range(10), names=None, baselines=BASELINES, leave_one_out=None) -> dict:
    """Every ``<name>.npz`` of ``root`` (or only ``names``); the JSON object of ``eval odds``.

    ``leave_one_out``: a list of :data:`CANDIDATES` names; each is run on every set and
    :func:`leave_one_set_out` picks among them (needs the baselines and at least two sets).
    """
    root = Path(root)
    files = sorted(root.glob("*.npz"))
    if names:
        wanted = set(names)
        files = [f for f in files if f.stem in wanted]
        missing = wanted - {f.stem for f in files}
        if missing:
            raise ValueError(f"no {sorted(missing)} in {root}")
    if not files:
        raise ValueError(f"{root} holds no <name>.npz files (X, y with 1 = outlier)")
    if leave_one_out and (not baselines or len(files) < 2):  # before any fitting
        raise ValueError("--leave-one-out needs the baselines and at least two data sets")
    from ratiowatch.stream.commands.progress import track

    loaded = {f: load_npz(f) for f in files}  # every file checked before the first fit
    datasets = {}
    for f in track(files, desc="odds", unit="data set"):
        X, y = loaded[f]
        datasets[f.stem] = {k: (round(v, 4) if isinstance(v, float) else v)
                            for k, v in evaluate_dataset(X, y, seeds, baselines).items()}
        datasets[f.stem]["baselines"] = {b: round(v, 4) for b, v in datasets[f.stem]["baselines"].items()}
        for cand in leave_one_out or ():
            if cand == next(iter(CANDIDATES)):  # the default: already measured above
                auc = datasets[f.stem]["auc"]
            else:
                auc = round(evaluate_dataset(X, y, seeds, (), CANDIDATES[cand])["auc"], 4)
            datasets[f.stem].setdefault("candidates", {})[cand] = auc
    mean = {
        "auc": round(float(np.mean([d["auc"] for d in datasets.values()])), 4),
        "baselines": {b: round(float(np.mean([d["baselines"][b] for d in datasets.values()])), 4)
                      for b in baselines},
    }
    obj = {"benchmark": "odds", "seeds": len(list(seeds)), "datasets": datasets, "mean": mean}
    if leave_one_out:
        if not baselines or len(datasets) < 2:
            raise ValueError("--leave-one-out needs the baselines and at least two data sets")
        cands = {c: {n: d["candidates"][c] for n, d in datasets.items()} for c in leave_one_out}
        best = {n: max(d["baselines"].values()) for n, d in datasets.items()}
        loo = leave_one_set_out(cands, best)
        obj["leave_one_out"] = {**loo, "mean": round(loo["mean"], 4),
                                "mean_best_baseline": round(loo["mean_best_baseline"], 4),
                                "sets": {k: {**v, "gap": round(v["gap"], 4)} for k, v in loo["sets"].items()}}
    return obj


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dir", nargs="?", type=Path, default=None,
                        help="folder of <name>.npz files (X, y); default ../shared/bench/odds")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--seeds", type=int, default=10, help="number of seeds 0..N-1 (protocol: 10)")
    parser.add_argument("--only", default=None, help="comma-separated data set names")
    parser.add_argument("--no-baselines", action="store_true", help="skip the sklearn baselines")
    parser.add_argument("--leave-one-out", action="store_true",
                        help="run every candidate width rule, choose one on all sets but one, check it on "
                             "the one left out, rotate (reports the left-out mean vs the best baseline per set)")
    parser.add_argument("--candidates", default=",".join(CANDIDATES),
                        help=f"comma-separated candidates for --leave-one-out (default: {','.join(CANDIDATES)})")


def missing_sklearn(baselines=BASELINES) -> bool:
    """Before any data set is read: print one line on stderr when scikit-learn, which the protocol's
    splits and ROC-AUC need (and ``baselines``, when any), cannot be imported; True if so.

    >>> missing_sklearn(())
    False
    """
    import importlib

    modules = ["sklearn.model_selection", "sklearn.metrics"]
    if baselines:
        modules += ["sklearn.svm", "sklearn.ensemble", "sklearn.neighbors"]
    try:
        for name in modules:
            importlib.import_module(name)
    except ImportError:
        print("ratiowatch eval odds: needs scikit-learn (the protocol's splits and ROC-AUC, and its baselines), "
              "which is not installed; install it with pip install '.[test]'", file=sys.stderr)
        return True
    return False


def run(args) -> int:
    from ratiowatch.stream.evaluate.datasets import bench_dir, eval_dir_problem, os_error_line

    root = args.dir if args.dir is not None else bench_dir("odds")
    problem = eval_dir_problem(args.dir, root, "odds")
    if problem:
        print(f"ratiowatch eval odds: {problem}", file=sys.stderr)
        return 2
    if args.seeds < 1:
        print("ratiowatch eval odds: --seeds must be >= 1", file=sys.stderr)
        return 2
    loo = None
    if args.leave_one_out:
        loo = [c.strip() for c in args.candidates.split(",") if c.strip()]
        unknown = [c for c in loo if c not in CANDIDATES]
        if unknown or not loo:
            print(f"ratiowatch eval odds: unknown candidate(s) {unknown}; choose from {list(CANDIDATES)}",
                  file=sys.stderr)
            return 2
        loo = [next(iter(CANDIDATES))] + [c for c in loo if c != next(iter(CANDIDATES))]
    if missing_sklearn(() if args.no_baselines else BASELINES):
        return 2
    from ratiowatch.stream.commands.interrupts import guarded

    with guarded():  # a Ctrl-C while numba compiles stops the run too
        try:
            obj = evaluate(root, range(args.seeds), args.only.split(",") if args.only else None,
                           () if args.no_baselines else BASELINES, leave_one_out=loo)
        except ValueError as exc:
            print(f"ratiowatch eval odds: {exc}", file=sys.stderr)
            return 2
        except OSError as exc:  # a file that cannot be read: one line naming it
            print(f"ratiowatch eval odds: {os_error_line(exc)}", file=sys.stderr)
            return 2
    if args.json:
        from ratiowatch.stream.evaluate.environment import environment
        from ratiowatch.stream.evaluate.jsonout import dumps as strict_json

        print(strict_json({**obj, "environment": environment()}, indent=2))
    else:
        for name, d in obj["datasets"].items():
            base = "  ".join(f"{b} {v:.3f}" for b, v in d["baselines"].items())
            print(f"{name:>12s}: ours {d['auc']:.3f}  {base}")
        print(f"{'mean':>12s}: ours {obj['mean']['auc']:.3f}  "
              + "  ".join(f"{b} {v:.3f}" for b, v in obj["mean"]["baselines"].items()))
        if "leave_one_out" in obj:
            lo = obj["leave_one_out"]
            print("\nleave one set out (candidate chosen on the other sets):")
            for name, v in lo["sets"].items():
                flag = "  <-- more than 0.03 below" if v["gap"] < -GAP else ""
                print(f"{name:>12s}: {v['chosen']:>6s} {v['auc']:.3f}  best baseline {v['best_baseline']:.3f}"
                      f"  gap {v['gap']:+.3f}{flag}")
            print(f"{'mean':>12s}: {lo['mean']:.3f}  best baselines {lo['mean_best_baseline']:.3f}")
    return 0

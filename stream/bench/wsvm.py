"""``ratiowatch bench wsvm``: weighted-SVM path following against scikit-learn refits.

Two measurements, each taken in one run on the same data:

1. **Table 1 sweep** (Karasuyama et al. 2012, Sec. 4.1): the eq. (27) toy with gamma = 1 in the paper's
   ``gamma / p`` convention, C_2 = 10 and C_1 moved from 0 to 10. The path produces the exact
   solution at every breakpoint; the baseline is scikit-learn ``SVC(sample_weight=...)`` refitted
   at breakpoints of the same path (the paper re-ran SMO at every breakpoint). By default the
   refits are timed at ``--refits`` evenly spaced breakpoints and the baseline total is their mean
   times the number of breakpoints (``sklearn_total_s``, basis stated in the output);
   ``--all-breakpoints`` times every one instead.
2. **Stream**: an online weighted SVR forecaster over a window of ``--window`` points with Cao-Tay
   weights (a = 3); each step adds 5 points and drops 5. One path update per step against one
   scikit-learn ``SVR`` refit of the same window and weights.

Times are process CPU time (``time.process_time``), as in the paper's Table 1: both sides are
single-threaded, and CPU time is robust to other jobs on a shared machine. Stream times, ours and
scikit-learn's alike, are per-step medians of ``--repeats`` runs (compiled code warmed up first).
Ratios are baseline time / our time.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from ratiowatch.core.validation import make_rng
from ratiowatch.stream.bench.common import environment

# ratiowatch.core.wsvm (numba) and scikit-learn are imported inside the functions: `ratiowatch --help`
# imports every command module to build its parser and must stay fast.


_clock = time.process_time


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--quick", action="store_true", help="small sizes for a smoke test (seconds)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--refits", type=int, default=60, help="breakpoints timed for the sklearn toy baseline")
    parser.add_argument("--all-breakpoints", action="store_true", help="refit sklearn at every breakpoint")
    parser.add_argument("--window", type=int, default=1000, help="stream window length")
    parser.add_argument("--steps", type=int, default=20, help="stream steps (5 in, 5 out each)")
    parser.add_argument("--repeats", type=int, default=3, help="repeats of our timings (median)")


def toy_table1(n: int, rng: np.random.Generator):
    """Eq. (27): four Gaussian groups of n/4 points; D_1 marks the cost-1 points; [0, 1]^2 inputs."""
    q = n // 4
    X = np.vstack([
        rng.multivariate_normal([1, 0], np.diag([1.0, 0.5]), q),
        rng.multivariate_normal([0, 0], np.diag([0.5, 0.5]), q),
        rng.multivariate_normal([0, 1], np.diag([1.0, 0.5]), q),
        rng.multivariate_normal([1, 1], np.diag([0.5, 0.5]), q),
    ])
    y = np.r_[np.ones(2 * q), -np.ones(2 * q)]
    d1 = np.r_[np.ones(q, bool), np.zeros(q, bool), np.ones(q, bool), np.zeros(q, bool)]
    X = (X - X.min(0)) / (X.max(0) - X.min(0))
    return X, y, d1


def _toy(n: int, seed: int, n_refits: int, all_bp: bool, repeats: int) -> dict:
    from sklearn.svm import SVC

    from ratiowatch.core.wsvm import WeightedSVC

    X, y, d1 = toy_table1(n, make_rng(seed))
    C, gamma = 10.0, 0.5  # paper: exp(-(gamma/p) ||x - x'||^2), gamma = 1, p = 2
    sw_old, sw_new = np.where(d1, 0.0, 1.0), np.ones(n)
    times, stats = [], None
    for _ in range(max(1, repeats)):
        model = WeightedSVC(C=C, gamma=gamma).fit(X, y, sw_old)
        t0 = _clock()
        stats = model.path(sw_new)
        times.append(_clock() - t0)
    kkt = model.kkt_violation()
    # breakpoints of the same path (untimed run with a callback)
    thetas: list[float] = []
    probe = WeightedSVC(C=C, gamma=gamma).fit(X, y, sw_old)
    probe.path(sw_new, on_breakpoint=lambda _m, th: thetas.append(th))
    thetas_arr = np.array(thetas)
    pick = thetas_arr if all_bp or thetas_arr.size <= n_refits else thetas_arr[
        np.unique(np.linspace(0, thetas_arr.size - 1, n_refits).round().astype(int))]
    sk_times = []
    for th in pick:
        sw = sw_old + th * (sw_new - sw_old)
        t0 = _clock()
        SVC(C=C, gamma=gamma).fit(X, y, sample_weight=sw)
        sk_times.append(_clock() - t0)
    ours = float(np.median(times))
    per_refit = float(np.mean(sk_times)) if sk_times else float("nan")
    sk_total = per_refit * stats.events if not all_bp else float(np.sum(sk_times))
    return {
        "n": n,
        "events": stats.events,
        "events_per_point": stats.events / n,
        "mean_margin_size": stats.mean_margin,
        "path_s": ours,
        "path_us_per_event": 1e6 * ours / max(1, stats.events),
        "kkt_violation": kkt,
        "sklearn_refits_timed": len(sk_times),
        "sklearn_per_refit_s": per_refit,
        "sklearn_total_s": sk_total,
        "sklearn_total_basis": "sum over every breakpoint" if all_bp else
        "mean refit time over evenly spaced breakpoints x number of breakpoints",
        "ratio": sk_total / ours,
    }


def _series(n: int, rng: np.random.Generator) -> np.ndarray:
    t = np.arange(n)
    return np.sin(2 * np.pi * t / 50) + 0.5 * np.sin(2 * np.pi * t / 13) + 0.1 * rng.normal(size=n)


def _stream(window: int, steps: int, seed: int, repeats: int) -> dict:
    from sklearn.svm import SVR

    from ratiowatch.stream.learners.wsvm import OnlineWeightedSVR, cao_tay_weights

    k, batch = 5, 5
    rng = make_rng(seed)
    s = _series(window + k + batch * steps + 1, rng)
    X = np.lib.stride_tricks.sliding_window_view(s[:-1], k)  # lags -> next value
    y = s[k:]
    X = np.ascontiguousarray(X[: y.size])
    C, eps, gamma = 10.0, 0.05, 1.0 / k
    step_times, events = [], []
    kkt = 0.0
    for _ in range(max(1, repeats)):
        model = OnlineWeightedSVR(window=window, C=C, epsilon=eps, gamma=gamma)
        model.learn_batch(X[:window], y[:window])
        times = []
        for st in range(steps):
            lo = window + batch * st
            t0 = _clock()
            stats = model.learn_batch(X[lo:lo + batch], y[lo:lo + batch])
            times.append(_clock() - t0)
            events.append(stats.events)
        kkt = max(kkt, model.kkt_violation())
        step_times.append(times)
    ours = np.median(np.array(step_times), axis=0)  # per step, median over repeats
    sw = cao_tay_weights(window, window, 3.0)
    sk_times = []
    for _ in range(max(1, repeats)):  # the same statistic as ours: per step, median over repeats
        times = []
        for st in range(steps):
            hi = window + batch * (st + 1)
            t0 = _clock()
            SVR(C=C, epsilon=eps, gamma=gamma).fit(X[hi - window:hi], y[hi - window:hi], sample_weight=sw)
            times.append(_clock() - t0)
        sk_times.append(times)
    sk = np.median(np.array(sk_times), axis=0)
    return {
        "window": window,
        "steps": steps,
        "points_in_out_per_step": batch,
        "events_per_step_mean": float(np.mean(events)),
        "path_step_s_median": float(np.median(ours)),
        "path_total_s": float(np.sum(ours)),
        "kkt_violation": kkt,
        "sklearn_refit_s_median": float(np.median(sk)),
        "sklearn_total_s": float(np.sum(sk)),
        "ratio": float(np.sum(sk) / np.sum(ours)),
    }


def _warm_up() -> None:
    """Compile the numba kernels outside the timed region."""
    from ratiowatch.core.wsvm import WeightedSVC, WeightedSVR

    X, y, d1 = toy_table1(40, make_rng(123))
    WeightedSVC(C=10.0, gamma=0.5).fit(X, y, np.where(d1, 0.0, 1.0)).path(np.ones(40))
    m = WeightedSVR(C=1.0, epsilon=0.1, gamma=1.0)
    m.add_points(X, X[:, 0])
    m.path(np.ones(40))


def run(args) -> int:
    from .common import refuse_missing_peers, refuse_options

    if refuse_options(args, "wsvm", {"seed": 0, "refits": 1, "window": 2, "steps": 1, "repeats": 1}):
        return 2
    if refuse_missing_peers("wsvm", ["sklearn.svm"]):
        return 2
    quick = bool(args.quick)
    sizes = [200, 400] if quick else [400, 800, 1200, 1600]
    window = min(args.window, 200) if quick else args.window
    steps = min(args.steps, 5) if quick else args.steps
    refits = min(args.refits, 10) if quick else args.refits
    repeats = 1 if quick else args.repeats
    from ratiowatch.stream.commands.progress import stages

    with stages("bench wsvm", 2 + len(sizes)) as phase:
        phase("compile")
        _warm_up()
        toy = []
        for n in sizes:
            phase(f"toy n={n}")
            toy.append(_toy(n, args.seed + n, refits, args.all_breakpoints, repeats))
        phase("stream")
        stream = _stream(window, steps, args.seed, repeats)
    out = {
        "benchmark": "wsvm",
        "quick": quick,
        "toy": toy,
        "ratio_toy": toy[-1]["ratio"],
        "ratio_toy_n": toy[-1]["n"],
        "stream": stream,
        "ratio_stream": stream["ratio"],
        "targets": {"ratio_toy": 10.0, "ratio_stream": 20.0},
        "notes": "path solutions are exact (KKT to rounding); sklearn SVC/SVR use default tol=1e-3 "
                 "and sample_weight (per-sample bound C*sample_weight), fitted from scratch",
        "environment": environment(),
    }
    if args.json:
        from ratiowatch.stream.evaluate.jsonout import dumps as strict_json

        print(strict_json(out, indent=2))
    else:
        for r in toy:
            print(f"toy n={r['n']}: {r['events']} events, |M|={r['mean_margin_size']:.2f}, path {r['path_s']:.3f}s, "
                  f"sklearn {r['sklearn_total_s']:.2f}s, ratio {r['ratio']:.1f}")
        print(f"stream window={stream['window']}: path {1e3 * stream['path_step_s_median']:.2f} ms/step "
              f"({stream['events_per_step_mean']:.1f} events), sklearn {1e3 * stream['sklearn_refit_s_median']:.1f} "
              f"ms/refit, ratio {stream['ratio']:.1f}")
    return 0

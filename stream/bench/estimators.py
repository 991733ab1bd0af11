"""``ratiowatch bench estimators``: batch fits vs densratio, and the incremental step.

Setup of the issue: windows of n = 50 subsequences of length k = 10 (d = 10), b = 50 centres.
- ``ratio_vs_densratio_auto``: densratio's time for a fit with its automatic (sigma, lambda)
  selection divided by ours with our full selection (9 sigmas x 9 lambdas, exact clipped LOOCV);
  both single-threaded, same windows, same run. Reported for uLSIF and RuLSIF (alpha = 0.1).
- KLIEP (likelihood CV, densratio's KLIEP as baseline) and LSDD (5-fold CV, no baseline) rows.
- ``incremental_step_us``: one slide of :class:`ratiowatch.core.window.TwoWindowRuLSIF` plus the re-solve of
  both directions (the symmetric change score), median over a long stream, one Python call each
  (``push`` then ``scores``); ``push_only_us`` the slide alone.
- ``push_many_step_us``: the same work per sample through ``push_many`` (one compiled loop over a
  block of samples, both scores after every sample): per-sample time, median over blocks of 1000.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from ratiowatch.core.kliep import fit_kliep
from ratiowatch.core.kliep_window import TwoWindowKLIEP
from ratiowatch.core.lsdd import fit_lsdd
from ratiowatch.core.lsdd_window import TwoWindowLSDD
from ratiowatch.core.rulsif import fit_rulsif
from ratiowatch.core.window import TwoWindowRuLSIF

from .common import environment, quiet, time_call


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (smoke test)")
    parser.add_argument("--seed", type=int, default=0)


def _windows(rng: np.random.Generator, n: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Past/current windows of subsequences from an AR(1) series with a mean shift between them."""
    t = 2 * n + k - 1
    e = rng.normal(size=t)
    y = np.empty(t)
    y[0] = e[0]
    for i in range(1, t):
        y[i] = 0.6 * y[i - 1] + e[i]
    y[n + k // 2:] += 1.0
    subs = np.lib.stride_tricks.sliding_window_view(y, k)
    return np.ascontiguousarray(subs[:n]), np.ascontiguousarray(subs[n:2 * n])


def bench_batch(rng, n: int, k: int, repeat: int) -> dict:
    from densratio import densratio

    past, cur = _windows(rng, n, k)
    rows = {}
    for name, alpha in (("ulsif", 0.0), ("rulsif", 0.1)):
        ours = time_call(lambda: fit_rulsif(past, cur, alpha=alpha, n_centres=n, seed=0), repeat)
        method = "uLSIF" if alpha == 0.0 else "RuLSIF"
        kwargs = {"method": method, "kernel_num": n, "verbose": False}
        if alpha:
            kwargs["alpha"] = alpha
        theirs = time_call(quiet(lambda: densratio(past, cur, **kwargs)), max(3, repeat // 5))
        rows[name] = {"ours_ms": ours * 1e3, "densratio_auto_ms": theirs * 1e3, "ratio": theirs / ours}
    # KLIEP: likelihood CV over sigma on both sides (densratio's own grid and fold count)
    ours = time_call(lambda: fit_kliep(past, cur, n_centres=n, seed=0), max(3, repeat // 5))
    theirs = time_call(quiet(lambda: densratio(past, cur, method="KLIEP", kernel_num=n, verbose=False)),
                       max(3, repeat // 10))
    rows["kliep"] = {"ours_ms": ours * 1e3, "densratio_auto_ms": theirs * 1e3, "ratio": theirs / ours}
    # LSDD has no densratio counterpart: our time alone (5-fold CV over 9 sigmas x 9 lambdas)
    rows["lsdd"] = {"ours_ms": time_call(lambda: fit_lsdd(past, cur, seed=0), max(3, repeat // 5)) * 1e3}
    return rows


def _stream(rng, n: int, k: int, steps: int) -> np.ndarray:
    series = np.cumsum(rng.normal(size=steps + 2 * n + k)) * 0.1 + rng.normal(size=steps + 2 * n + k)
    return np.ascontiguousarray(np.lib.stride_tricks.sliding_window_view(series, k))


def bench_incremental(rng, n: int, k: int, steps: int) -> dict:
    subs = _stream(rng, n, k, steps)
    fit = fit_rulsif(subs[:n], subs[n:2 * n], alpha=0.1, n_centres=n)
    st = TwoWindowRuLSIF(k, n, fit.sigma, fit.lam, alpha=0.1)
    for y in subs[:2 * n]:
        st.push(y)
    st.scores()
    push_t = np.empty(steps)
    step_t = np.empty(steps)
    for i in range(steps):
        t0 = time.perf_counter()
        st.push(subs[2 * n + i])
        t1 = time.perf_counter()
        st.scores()
        t2 = time.perf_counter()
        push_t[i] = t1 - t0
        step_t[i] = t2 - t0
    # the same stream again through the batch entry point, on a fresh state
    many = TwoWindowRuLSIF(k, n, fit.sigma, fit.lam, alpha=0.1)
    many.push_many(subs[:2 * n])
    block = 1000
    per_block = []
    for i in range(0, steps - block + 1, block):
        rows = subs[2 * n + i: 2 * n + i + block]
        t0 = time.perf_counter()
        many.push_many(rows)
        per_block.append((time.perf_counter() - t0) / block)
    return {
        "incremental_step_us": float(np.median(step_t) * 1e6),
        "incremental_step_p99_us": float(np.percentile(step_t, 99) * 1e6),
        "push_only_us": float(np.median(push_t) * 1e6),
        "push_many_step_us": float(np.median(per_block) * 1e6),
        "steps": steps,
    }


def bench_other_windows(rng, n: int, k: int, steps: int) -> dict:
    """Median push + score time of the LSDD and KLIEP windows (same stream shape)."""
    subs = _stream(rng, n, k, steps)
    fit = fit_rulsif(subs[:n], subs[n:2 * n], alpha=0.1, n_centres=n)
    out = {}
    for name, st in (("lsdd", TwoWindowLSDD(k, n, fit.sigma, fit.lam)), ("kliep", TwoWindowKLIEP(k, n, fit.sigma))):
        for y in subs[:2 * n]:
            st.push(y)
        st.scores()
        times = np.empty(steps)
        for i in range(steps):
            t0 = time.perf_counter()
            st.push(subs[2 * n + i])
            st.scores()
            times[i] = time.perf_counter() - t0
        out[f"{name}_step_us"] = float(np.median(times) * 1e6)
    return out


def run(args) -> int:
    from .common import refuse_missing_peers, refuse_options

    if refuse_options(args, "estimators", {"seed": 0}):
        return 2
    if refuse_missing_peers("estimators", ["densratio"]):
        return 2
    rng = np.random.default_rng(args.seed)
    n, k = 50, 10
    repeat, steps = (5, 2_000) if args.quick else (30, 20_000)
    from ratiowatch.stream.commands.progress import stages

    with stages("bench estimators", 3) as phase:
        phase("batch fits")
        batch = bench_batch(rng, n, k, repeat)
        phase("incremental step")
        inc = bench_incremental(rng, n, k, steps)
        phase("other windows")
        inc["other_windows"] = bench_other_windows(rng, n, k, max(200, steps // 20))
    result = {
        "benchmark": "estimators",
        "setup": {"n_per_window": n, "k": k, "b": n, "sigma_grid": 9, "lambda_grid": 9},
        "ratio_vs_densratio_auto": batch["rulsif"]["ratio"],
        "ratio_vs_densratio_auto_ulsif": batch["ulsif"]["ratio"],
        "batch": batch,
        **inc,
        "environment": environment(),
    }
    if args.json:
        from ratiowatch.stream.evaluate.jsonout import dumps as strict_json

        print(strict_json(result, indent=2))
    else:
        for name, row in batch.items():
            if "ratio" in row:
                print(f"{name:7s} ours {row['ours_ms']:.2f} ms  densratio {row['densratio_auto_ms']:.2f} ms  "
                      f"ratio {row['ratio']:.1f}x")
            else:
                print(f"{name:7s} ours {row['ours_ms']:.2f} ms  (no densratio counterpart)")
        print(f"incremental step (push + both solves): {inc['incremental_step_us']:.1f} us "
              f"(p99 {inc['incremental_step_p99_us']:.1f} us); push only {inc['push_only_us']:.1f} us; "
              f"push_many {inc['push_many_step_us']:.1f} us per sample")
    return 0

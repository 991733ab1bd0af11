"""``ratiowatch bench cpd``: streaming change-point throughput, latency and memory, vs densratio.

Workload (fixed): a univariate stream of 100,000 points (AR(1) noise with a mean shift every
10,000 points), subsequences of k = 10, windows of n = 50, symmetric RuLSIF (alpha = 0.1), one
score per step. Measured in one run on the same data:

* ``incremental_state``: ``ratiowatch.core.window.TwoWindowRuLSIF`` push + scores per point (the O(n^2) update);
* ``detector``: :class:`~ratiowatch.stream.detectors.changepoint.ChangePointDetector` with its streaming
  defaults (AR-surrogate threshold recalibrated and sigma re-selected every n = 50 steps);
* ``detector_5_channels``: the same detector on the first 20,000 points of five such channels
  (independent noise, the same shifts): the kernel score of the 50-dimensional embedding, the
  correlation view and the channel view (``ratio_5_channels_vs_univariate``);
* ``young_noise`` and ``young_counts``: the detector with every default (windows growing from 6
  subsequences, as a daemon's new series) over the first 1,000 points of 20 fresh streams each,
  AR(1) noise and event counts that are 90 % zeros. Small windows of such counts draw their null up
  to its top at the first exceedance after a calibration (``NullCalibrator.raise_to_top``); its
  price is ``ratio_young_counts_vs_noise``;
* ``detector_methods``: the same detector with each estimator (``method=``: RuLSIF, uLSIF, KLIEP,
  LSDD) on the first 10,000 points, RuLSIF's own run included; ``ratio_<method>_vs_rulsif`` is each
  one's throughput over RuLSIF's;
* ``split_profile_detector``: :class:`~ratiowatch.stream.detectors.segmenter.SplitProfileDetector`
  with its defaults on the first 20,000 points (ClaSS's share), every update timed from the first;
* ``offline_detect``: the offline detector (:func:`ratiowatch.stream.detectors.offline.detect`: split
  profile, binary segmentation, AR-surrogate stop test) on a prefix, timed as one call (it sees the
  whole prefix at once, so it has no per-point latency);
* ``densratio_fixed``: a sliding-window loop refitting ``densratio`` (RuLSIF, the same fixed sigma and
  lambda, both directions) at every step, on a prefix. ``ratio_vs_densratio_fixed`` = detector
  points/s / densratio points/s.

* ``claspy_streaming``: claspy 0.2.8's ClaSS (``StreamingClaSPSegmentation``, Ermshaus, Schaefer and
  Leser 2024) on the first 20,000 points, when the peers environment exists (``make peers``; it runs
  as a subprocess, see :mod:`ratiowatch.stream.evaluate.peers`): points/s over all of them and over
  the 10,000 after its warm-up window. Otherwise the entry says how to build that environment.

``--memory`` also streams 1,000,000 points and reports the RSS growth between 100k and 1M points,
for the two-window detector (``memory``) and for the daemon's default ``kind = "auto"``
(:class:`~ratiowatch.stream.detectors.routed.PeriodRoutedDetector`, ``memory_auto``) on a cycle of
24 samples whose amplitude or level switches every 10,000 points, so that the stream is handed to
the split profile early and its window restarts at every change (about 9 minutes).
Latencies are per update (``time.perf_counter_ns``), p50 / p99 in microseconds.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import time

import numpy as np

K, N, ALPHA, LAM = 10, 50, 0.1, 0.1


def make_stream(length: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    e = rng.normal(size=length)
    y = np.empty(length)
    acc = 0.0
    for i in range(length):  # AR(1), phi = 0.5 (data generation only, not timed)
        acc = 0.5 * acc + e[i]
        y[i] = acc
    y += 2.0 * ((np.arange(length) // 10_000) % 2)
    return y


CHANNELS = 5


def make_channels(length: int, channels: int = CHANNELS, seed: int = 0) -> np.ndarray:
    """``channels`` columns like :func:`make_stream` (independent noise, the same mean shifts)."""
    return np.column_stack([make_stream(length, seed + c) for c in range(channels)])


def rss_mb() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def _summary(lat_ns: np.ndarray, seconds: float, points: int) -> dict:
    return {"points": points, "seconds": round(seconds, 3), "points_per_s": round(points / seconds, 1),
            "p50_us": round(float(np.percentile(lat_ns, 50)) / 1e3, 2),
            "p99_us": round(float(np.percentile(lat_ns, 99)) / 1e3, 2)}


def bench_state(y: np.ndarray, sigma: float) -> dict:
    from ratiowatch.core.window import TwoWindowRuLSIF
    from ratiowatch.stream.series.embedding import embed

    rows = embed(y, K)
    st = TwoWindowRuLSIF(K, N, sigma, LAM, alpha=ALPHA)
    for r in rows[: 2 * N]:
        st.push(r)
    st.scores()  # compile outside the timing
    lat = np.empty(rows.shape[0] - 2 * N, dtype=np.int64)
    t0 = time.perf_counter()
    for i, r in enumerate(rows[2 * N:]):
        a = time.perf_counter_ns()
        st.push(r)
        s1, s2 = st.scores()
        lat[i] = time.perf_counter_ns() - a
    return _summary(lat, time.perf_counter() - t0, lat.size)


def _detector(method: str = "rulsif"):
    from ratiowatch.stream.detectors.changepoint import ChangePointDetector

    # the streaming detector's defaults (calibration and re-selection every n steps, AR null)
    return ChangePointDetector(method=method, k=K, n=N, n_min=N, window_frac=0.0, alpha=ALPHA, symmetric=True)


def bench_offline(y: np.ndarray) -> dict:
    """Points per second of one offline ``detect`` call on ``y`` (compiled beforehand, not timed)."""
    from ratiowatch.stream.detectors.offline import detect

    detect(y[:200])
    t0 = time.perf_counter()
    cps = detect(y)
    sec = time.perf_counter() - t0
    return {"points_per_s": round(y.size / sec, 1), "seconds": round(sec, 3), "change_points": len(cps)}


def bench_detector(y: np.ndarray, method: str = "rulsif") -> tuple[dict, int]:
    det = _detector(method)
    for v in y[: 3 * N]:  # warm-up + compile, not timed
        det.step(v)
    rest = y[3 * N:]  # points (rows of a multichannel stream)
    lat = np.empty(len(rest), dtype=np.int64)
    alarms = 0
    t0 = time.perf_counter()
    for i, v in enumerate(rest):
        a = time.perf_counter_ns()
        alarm = det.step(v)
        lat[i] = time.perf_counter_ns() - a
        alarms += alarm is not None
    return _summary(lat, time.perf_counter() - t0, len(rest)), alarms


METHODS_POINTS = 10_000


def bench_methods(y: np.ndarray) -> dict:
    """The detector with each estimator (``method=``) on ``y``, RuLSIF's run on the same points
    included, so that each ratio is measured in one run."""
    from ratiowatch.stream.detectors.changepoint import METHODS

    out = {}
    for method in METHODS:
        out[method], out[method]["alarms"] = bench_detector(y, method)
    return out


YOUNG_STREAMS, YOUNG_POINTS = 20, 1_000


def make_young(kind: str, streams: int = YOUNG_STREAMS, length: int = YOUNG_POINTS) -> np.ndarray:
    """``streams`` rows of ``length`` points: AR(1) noise (``"noise"``) or event counts that are
    90 % zeros with Poisson(5) events (``"counts"``)."""
    if kind == "noise":
        return np.stack([make_stream(length, seed=100 + s) for s in range(streams)])
    if kind == "counts":
        rng = np.random.default_rng(200)
        return np.where(rng.random((streams, length)) < 0.1, rng.poisson(5.0, (streams, length)), 0).astype(float)
    raise ValueError(f"kind must be 'noise' or 'counts'; got {kind!r}")


def bench_young(streams: np.ndarray) -> dict:
    """A fresh default detector per stream, every update timed from the first point."""
    from ratiowatch.stream.detectors.changepoint import ChangePointDetector

    det = ChangePointDetector()
    for v in streams[0, :200]:  # compile, not timed
        det.step(v)
    lat = np.empty(streams.size, dtype=np.int64)
    alarms, i = 0, 0
    t0 = time.perf_counter()
    for row in streams:
        det = ChangePointDetector()
        for v in row:
            a = time.perf_counter_ns()
            alarm = det.step(v)
            lat[i] = time.perf_counter_ns() - a
            i += 1
            alarms += alarm is not None
    out = _summary(lat, time.perf_counter() - t0, streams.size)
    out["alarms"] = alarms
    return out


def bench_split_profile(y: np.ndarray) -> dict:
    """Per-update latency of the SplitProfileDetector (defaults) on ``y``, from the first sample."""
    from ratiowatch.stream.detectors.segmenter import SplitProfileDetector

    warm = SplitProfileDetector()
    for v in y[:200]:  # compile the kernels, not timed
        warm.step(v)
    det = SplitProfileDetector()
    lat = np.empty(y.size, dtype=np.int64)
    alarms = 0
    t0 = time.perf_counter()
    for i, v in enumerate(y.tolist()):
        a = time.perf_counter_ns()
        alarms += det.step(v) is not None
        lat[i] = time.perf_counter_ns() - a
    return {**_summary(lat, time.perf_counter() - t0, y.size), "alarms": alarms}


def bench_densratio(y: np.ndarray, sigma: float, steps: int) -> dict:
    from densratio import densratio

    from ratiowatch.stream.series.embedding import embed

    rows = embed(y[: 2 * N + K - 1 + steps], K)
    lat = np.empty(steps, dtype=np.int64)
    t0 = time.perf_counter()
    for i in range(steps):
        a = time.perf_counter_ns()
        past, cur = rows[i:i + N], rows[i + N:i + 2 * N]
        with contextlib.redirect_stdout(io.StringIO()):  # densratio prints its progress
            r1 = densratio(past, cur, alpha=ALPHA, sigma_range=[sigma], lambda_range=[LAM], kernel_num=N,
                           verbose=False)
            r2 = densratio(cur, past, alpha=ALPHA, sigma_range=[sigma], lambda_range=[LAM], kernel_num=N,
                           verbose=False)
        _ = r1.alpha_PE + r2.alpha_PE
        lat[i] = time.perf_counter_ns() - a
    return _summary(lat, time.perf_counter() - t0, steps)


def bench_memory(length: int) -> dict:
    det = _detector()
    rng = np.random.default_rng(1)
    marks = {}
    acc = 0.0
    for i in range(length):
        acc = 0.5 * acc + rng.normal()
        det.step(acc + 2.0 * ((i // 10_000) % 2))
        if i + 1 in (100_000, length):
            marks[i + 1] = rss_mb()
    return {"rss_mb_at_100k": round(marks[100_000], 2), f"rss_mb_at_{length}": round(marks[length], 2),
            "rss_growth_mb": round(marks[length] - marks[100_000], 2)}


def make_cycle_stream(length: int, seed: int = 1) -> np.ndarray:
    """A sine of period 24 under N(0, 0.2^2) noise whose amplitude (x 1.5) or level (+ 0.5) switches
    every 10,000 points, in turn (the workload of ``memory_auto``)."""
    rng = np.random.default_rng(seed)
    t = np.arange(length)
    regime = (t // 10_000) % 3
    return (np.sin(2 * np.pi * t / 24) * np.where(regime == 1, 1.5, 1.0) + 0.5 * (regime == 2)
            + 0.2 * rng.normal(size=length))


def bench_memory_auto(length: int, first: int = 100_000) -> dict:
    """RSS of the routed detector (``kind = "auto"``) after ``first`` and after ``length`` points of
    :func:`make_cycle_stream`, with the alarms it raised and the changes the stream holds."""
    from ratiowatch.stream.detectors.routed import PeriodRoutedDetector

    if not 0 < first < length:
        raise ValueError(f"need 0 < first < length; got {first}, {length}")
    det = PeriodRoutedDetector()
    y = make_cycle_stream(length)
    marks, alarms = {}, 0
    for i in range(length):
        alarms += det.step(float(y[i])) is not None
        if i + 1 in (first, length):
            marks[i + 1] = rss_mb()
    return {f"rss_mb_at_{first}": round(marks[first], 2), f"rss_mb_at_{length}": round(marks[length], 2),
            "rss_growth_mb": round(marks[length] - marks[first], 2), "kind": det.kind,
            "handed_over_at": det.handed_over_at, "alarms": alarms, "changes": (length - 1) // 10_000}


CLASPY_POINTS = 20_000


def bench_claspy(y: np.ndarray) -> dict:
    """ClaSS throughput on ``y`` in the peers environment, or a note when it is missing."""
    from ratiowatch.stream.evaluate.peers import claspy_streaming_rate, missing_venv_message, peers_python

    if peers_python() is None:
        return {"skipped": missing_venv_message()}
    try:
        return claspy_streaming_rate(y)
    except (RuntimeError, StopIteration) as exc:
        return {"skipped": f"claspy run failed: {exc}"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--quick", action="store_true", help="10,000 points and short prefixes (smoke run)")
    parser.add_argument("--memory", action="store_true", help="also stream 1,000,000 points for RSS growth")


def run(args) -> int:
    from ratiowatch.core.kernels import median_distance
    from ratiowatch.stream.bench.common import refuse_missing_peers
    from ratiowatch.stream.commands.progress import stages
    from ratiowatch.stream.series.embedding import embed

    if refuse_missing_peers("cpd", ["densratio"]):  # its ratios are to densratio's; claspy is optional
        return 2
    length = 10_000 if args.quick else 100_000
    y = make_stream(length)
    sigma = median_distance(embed(y[: 2 * N + K - 1], K))
    from ratiowatch.stream.bench.common import environment

    out = {"benchmark": "cpd", "config": {"points": length, "k": K, "n": N, "alpha": ALPHA, "lambda": LAM,
                                          "sigma": sigma, "symmetric": True, "cpu_count": os.cpu_count()},
           "environment": environment()}
    with stages("bench cpd", 9 + 2 * bool(args.memory)) as phase:
        phase("incremental state")
        out["incremental_state"] = bench_state(y, sigma)
        phase("streaming detector")
        out["detector"], out["detector"]["alarms"] = bench_detector(y)
        phase(f"streaming detector, {CHANNELS} channels")
        multi = make_channels(2_000 if args.quick else CLASPY_POINTS)
        out["detector_5_channels"], out["detector_5_channels"]["alarms"] = bench_detector(multi)
        phase("streaming detector, each estimator")
        out["detector_methods"] = bench_methods(y[: 2_000 if args.quick else METHODS_POINTS])
        phase("young streams")
        young = 4 if args.quick else YOUNG_STREAMS
        out["young_noise"] = bench_young(make_young("noise", young))
        out["young_counts"] = bench_young(make_young("counts", young))
        phase("split-profile detector")
        out["split_profile_detector"] = bench_split_profile(y[: 2_000 if args.quick else CLASPY_POINTS])
        prefix = 2_000 if args.quick else 10_000
        phase("offline detect")
        out["offline_detect"] = bench_offline(y[:prefix])
        phase("densratio")
        out["densratio_fixed"] = bench_densratio(y, sigma, 20 if args.quick else 400)
        phase("claspy streaming")
        out["claspy_streaming"] = bench_claspy(y[: 2_000 if args.quick else CLASPY_POINTS])
        if args.memory:
            phase("memory")
            out["memory"] = bench_memory(1_000_000)
            phase("memory, kind auto")
            out["memory_auto"] = bench_memory_auto(1_000_000)
    base = out["densratio_fixed"]["points_per_s"]
    out["ratio_vs_densratio_fixed"] = round(out["detector"]["points_per_s"] / base, 1)
    out["ratio_state_vs_densratio_fixed"] = round(out["incremental_state"]["points_per_s"] / base, 1)
    out["ratio_offline_vs_densratio_fixed"] = round(out["offline_detect"]["points_per_s"] / base, 1)
    out["ratio_5_channels_vs_univariate"] = round(out["detector_5_channels"]["points_per_s"]
                                                  / out["detector"]["points_per_s"], 2)
    out["ratio_young_counts_vs_noise"] = round(out["young_counts"]["points_per_s"]
                                               / out["young_noise"]["points_per_s"], 2)
    methods = out["detector_methods"]
    for method in methods:
        if method != "rulsif":
            out[f"ratio_{method}_vs_rulsif"] = round(methods[method]["points_per_s"]
                                                     / methods["rulsif"]["points_per_s"], 3)
    if "points_per_s" in out["claspy_streaming"]:
        c = out["claspy_streaming"]["points_per_s"]
        out["ratio_detector_vs_claspy"] = round(out["detector"]["points_per_s"] / c, 1)
        out["ratio_split_profile_vs_claspy"] = round(out["split_profile_detector"]["points_per_s"] / c, 2)
    if args.json:
        from ratiowatch.stream.evaluate.jsonout import dumps as strict_json

        print(strict_json(out, indent=2))
    else:
        for key in ("incremental_state", "detector", "detector_5_channels", "young_noise", "young_counts",
                    "split_profile_detector", "densratio_fixed"):
            r = out[key]
            print(f"{key:32s} {r['points_per_s']:>10.1f} points/s  p50 {r['p50_us']:.1f} us  p99 {r['p99_us']:.1f} us")
        for method, r in out["detector_methods"].items():
            print(f"{'detector, method=' + method:32s} {r['points_per_s']:>10.1f} points/s  p50 {r['p50_us']:.1f} us  "
                  f"p99 {r['p99_us']:.1f} us  (first {r['points'] + 3 * N:,} points)")
        r = out["offline_detect"]
        print(f"{'offline_detect':32s} {r['points_per_s']:>10.1f} points/s  ({r['seconds']} s for the prefix)")
        print(f"ratio_vs_densratio_fixed {out['ratio_vs_densratio_fixed']}")
        c = out["claspy_streaming"]
        if "points_per_s" in c:
            print(f"{'claspy_streaming (ClaSS)':32s} {c['points_per_s']:>10.1f} points/s  "
                  f"(after its warm-up: {c.get('stream_points_per_s', '-')} points/s)")
        else:
            print(f"claspy_streaming: {c['skipped']}")
        if "memory" in out:
            print("memory", out["memory"])
            print("memory, kind auto", out["memory_auto"])
    return 0

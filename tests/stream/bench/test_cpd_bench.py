"""``ratiowatch bench cpd``'s workloads: what each entry streams (speeds are not asserted)."""

import numpy as np

from ratiowatch.stream.bench import cpd


def test_the_multichannel_workload_has_independent_channels_with_the_same_shifts():
    x = cpd.make_channels(30_000)
    assert x.shape == (30_000, cpd.CHANNELS)
    np.testing.assert_array_equal(x[:, 0], cpd.make_stream(30_000))
    assert abs(np.corrcoef(x[:10_000].T)[0, 1]) < 0.05  # independent noise
    means = [x[10_000:20_000, c].mean() - x[:10_000, c].mean() for c in range(cpd.CHANNELS)]
    assert np.allclose(means, 2.0, atol=0.15)  # the same mean shift in every channel


def test_the_detector_entry_streams_multichannel_rows_and_reports_its_rate_and_latency():
    res, alarms = cpd.bench_detector(cpd.make_channels(1_000))
    assert res["points"] == 1_000 - 3 * cpd.N and res["points_per_s"] > 0 and res["p99_us"] >= res["p50_us"]
    assert alarms >= 0


def test_the_methods_entry_runs_the_detector_with_each_estimator_on_the_same_points():
    from ratiowatch.stream.detectors.changepoint import METHODS

    y = cpd.make_stream(400)
    res = cpd.bench_methods(y)
    assert tuple(res) == METHODS
    for method, r in res.items():
        assert r["points"] == 400 - 3 * cpd.N and r["points_per_s"] > 0 and r["alarms"] >= 0, method
    assert cpd._detector("lsdd").method == "lsdd"


def test_the_young_workloads_are_noise_and_counts_that_are_mostly_zero():
    noise, counts = cpd.make_young("noise", 3, 500), cpd.make_young("counts", 3, 500)
    assert noise.shape == counts.shape == (3, 500)
    np.testing.assert_array_equal(noise[1], cpd.make_stream(500, seed=101))
    assert 0.85 < (counts == 0).mean() < 0.95 and (counts >= 0).all()


def test_the_young_entry_times_every_point_of_fresh_detectors():
    res = cpd.bench_young(cpd.make_young("counts", 2, 300))
    assert res["points"] == 600 and res["points_per_s"] > 0 and res["p99_us"] >= res["p50_us"]
    assert res["alarms"] >= 0


def test_the_auto_memory_workload_is_a_cycle_whose_amplitude_or_level_switches():
    y = cpd.make_cycle_stream(30_000)
    a, b, c = y[:10_000], y[10_000:20_000], y[20_000:]
    assert b.std() > 1.3 * a.std() and abs(a.mean()) < 0.05 and c.mean() - a.mean() > 0.45
    # the cycle itself: period 24
    lag = [np.corrcoef(a[:-k], a[k:])[0, 1] for k in (12, 24)]
    assert lag[0] < -0.8 and lag[1] > 0.8


def test_the_auto_memory_entry_hands_the_cycle_over_and_reports_both_marks():
    res = cpd.bench_memory_auto(2_000, first=500)
    assert res["kind"] == "split_profile" and res["handed_over_at"] < 500
    assert {"rss_mb_at_500", "rss_mb_at_2000", "rss_growth_mb"} <= set(res) and res["rss_mb_at_500"] > 0
    assert res["changes"] == 0 and res["alarms"] >= 0


def test_a_benchmark_records_what_an_evaluation_records_and_the_load():
    from ratiowatch.stream.bench.common import environment
    from ratiowatch.stream.evaluate.environment import environment as run_environment

    env = environment()
    assert {k: env[k] for k in run_environment()} == run_environment()
    assert env["cpus"] >= 1 and "load_average_1m" in env and "blas_threads" in env

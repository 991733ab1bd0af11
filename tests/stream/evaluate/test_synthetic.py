"""The synthetic suites: generators (deterministic, as specified) and the scorers on hand-made answers."""

import json

import numpy as np
import pytest

from ratiowatch.stream.evaluate import synthetic as S


class FixedAlarms:
    """A river-style detector raising alarms at given sample indices, change index ``lag`` before."""

    def __init__(self, at=(), lag=0):
        self.at, self.lag, self.t = set(at), lag, -1
        self.drift_detected, self.last_alarm = False, None

    def update(self, x):
        self.t += 1
        self.drift_detected = self.t in self.at
        if self.drift_detected:
            self.last_alarm = type("Alarm", (), {"change_index": self.t - self.lag})()


def test_the_stress_suite_is_apart_from_the_null_suite():
    assert not set(S.STRESS_KINDS) & set(S.NULL_KINDS)


@pytest.mark.parametrize("kind", S.NULL_KINDS + S.STRESS_KINDS)
def test_null_series_deterministic_shape_and_seed_dependent(kind):
    a = S.null_series(kind, 600, seed=1)
    assert a.shape == (600,) and a.dtype == np.float64 and np.all(np.isfinite(a))
    assert np.array_equal(a, S.null_series(kind, 600, seed=1))
    assert not np.array_equal(a, S.null_series(kind, 600, seed=2))
    assert S.null_series(kind, 15, seed=0).shape == (15,)


def test_null_series_follow_their_specification():
    rng_free = [S.null_series("ar09", 10000, s) for s in range(3)]
    phi = np.mean([np.corrcoef(x[:-1], x[1:])[0, 1] for x in rng_free])
    assert phi == pytest.approx(0.9, abs=0.02)
    x = S.null_series("ar0", 10000, 0)
    assert abs(np.corrcoef(x[:-1], x[1:])[0, 1]) < 0.03 and np.std(x) == pytest.approx(1.0, abs=0.03)
    c = S.null_series("counts", 10000, 0)
    assert np.array_equal(c, np.round(c)) and c.min() >= 0 and c.mean() == pytest.approx(3.0, abs=0.1)
    q = S.null_series("quantized", 10000, 0)
    assert np.array_equal(q, np.round(q)) and len(np.unique(q)) < 15
    tr = S.null_series("trend", 10000, 0)
    assert np.polyfit(np.arange(10000), tr, 1)[0] == pytest.approx(0.01, rel=0.02)
    rw = S.null_series("random_walk", 5000, 0)
    assert np.std(np.diff(rw)) == pytest.approx(1.0, abs=0.05)
    # a jittered seasonal signal: the autocorrelation peaks near its period, not exactly on it
    for period in (12, 24, 50):
        s = S.null_series(f"seasonal{period}", 10000, 0)
        s = s - s.mean()
        ac = [np.dot(s[:-lag], s[lag:]) for lag in range(period // 2, 2 * period - period // 2)]
        assert abs(period // 2 + int(np.argmax(ac)) - period) <= 2
    # the clean kinds: an exact period of 12 with 1 % noise, and jittered cycles of 50 as smooth
    clean = S.null_series("sine12", 10000, 0)
    assert np.std(clean[12:] - clean[:-12]) == pytest.approx(0.01 * np.sqrt(2), rel=0.05)
    smooth = S.null_series("smooth50", 10000, 0)
    assert np.std(np.diff(smooth, 2)) < 0.05 < np.std(np.diff(S.null_series("seasonal50", 10000, 0), 2))
    with pytest.raises(ValueError, match="unknown null kind"):
        S.null_series("nope", 10)
    with pytest.raises(ValueError, match="length"):
        S.null_series("ar0", 0)


def test_stress_series_follow_their_specification():
    lag_corr = lambda y, lag: np.corrcoef(y[:-lag], y[lag:])[0, 1]  # noqa: E731
    out = S.null_series("outliers", 20000, 0)
    assert np.mean(np.abs(out) > 5.5) == pytest.approx(0.01, abs=0.003)
    zi = S.null_series("zero_inflated", 20000, 0)
    assert np.mean(zi == 0) == pytest.approx(0.9 + 0.1 * np.exp(-5.0), abs=0.01)
    assert zi[zi > 0].mean() == pytest.approx(5.0 / (1.0 - np.exp(-5.0)), rel=0.05)
    g = S.null_series("garch", 20000, 0)
    assert g.var() == pytest.approx(1.0, rel=0.2)  # omega / (1 - a - b)
    assert abs(lag_corr(g, 1)) < 0.03 < lag_corr(g * g, 1)  # uncorrelated, but its volatility clusters
    lm = S.null_series("long_memory", 20000, 0)
    assert lag_corr(lm, 100) > 0.1 > lag_corr(lm, 1) ** 100  # an AR(1) with its lag-1 correlation forgets
    assert lag_corr(S.null_series("ar099", 20000, 0), 1) == pytest.approx(0.99, abs=0.005)
    pulses = S.null_series("pulses40", 20000, 0)
    peaks = np.flatnonzero(pulses > 0.5)
    starts = peaks[np.r_[True, np.diff(peaks) > 5]]
    assert np.median(np.diff(starts)) == pytest.approx(40, abs=2)
    saw = S.null_series("sawtooth30", 20000, 0)
    assert -0.3 < saw.min() and saw.max() < 1.3
    seasons = S.null_series("two_seasons", 24 * 168, 0)
    assert lag_corr(seasons, 168) > 0.7 and lag_corr(seasons, 84) < 0.6
    # drifting cycles: a cycle's peak wanders (sd about 0.2 across cycles), and neighbouring cycles
    # are alike (a time constant of 10 cycles: correlation about exp(-1/10) one cycle apart)
    drift = S.null_series("drifting_cycles", 24 * 2000, 0)
    peak = drift.reshape(-1, 24).max(axis=1)
    assert 0.12 < peak.std() < 0.3 and 0.7 < lag_corr(peak, 1) < 0.97 and abs(lag_corr(peak, 100)) < 0.2
    # wandering cycles: the cycle's mean level wanders with sd about 1 and a time constant of 10
    # cycles, while the cycle itself (the series less its cycle means) keeps its amplitude
    wander = S.null_series("wandering_cycles", 24 * 2000, 0)
    level = wander.reshape(-1, 24).mean(axis=1)
    assert 0.7 < level.std() < 1.3 and 0.8 < lag_corr(level, 1) < 0.97 and abs(lag_corr(level, 100)) < 0.2
    assert (wander.reshape(-1, 24) - level[:, None]).std() == pytest.approx(np.sqrt(0.5), rel=0.1)
    # a daily on/off schedule: high 40 % of the time, switching up once per cycle of about 288 samples
    day = S.null_series("schedule288", 288 * 200, 0)
    on = day > 0.5
    ups = np.flatnonzero(on[1:] & ~on[:-1])
    assert on.mean() == pytest.approx(0.4, abs=0.02) and np.median(np.diff(ups)) == pytest.approx(288, abs=15)
    assert (day - on).std() == pytest.approx(0.05, rel=0.05)
    # a nightly spike: one narrow pulse of height 1 per cycle of about 288 samples, a few samples wide
    night = S.null_series("spikes288", 288 * 200, 0)
    high = night > 0.5
    starts = np.flatnonzero(high[1:] & ~high[:-1])
    assert len(starts) == pytest.approx(200, abs=3) and np.median(np.diff(starts)) == pytest.approx(288, abs=15)
    assert 3 <= high.sum() / len(starts) <= 7 and night.max() == pytest.approx(1.0, abs=0.25)
    assert np.median(night) == pytest.approx(0.0, abs=0.01)


def test_change_series_change_what_they_say_where_they_say():
    seg = S.SEGMENT
    m = S.change_series("mean", 0)
    assert m.change_points == [seg, 2 * seg] and m.window == S.WINDOW and m.x.shape == (3 * seg,)
    assert m.x[seg:2 * seg].mean() - m.x[:seg].mean() == pytest.approx(2.0, abs=0.2)
    v = S.change_series("variance", 0).x
    assert v[seg:2 * seg].std() / v[2 * seg:].std() == pytest.approx(3.0, rel=0.15)
    c = S.change_series("correlation", 0).x
    assert c.shape == (3 * seg, 2)
    assert np.corrcoef(c[seg:2 * seg].T)[0, 1] == pytest.approx(0.9, abs=0.05)
    assert abs(np.corrcoef(c[:seg].T)[0, 1]) < 0.15
    assert c[:, 1].std() == pytest.approx(1.0, abs=0.05)  # the margins do not change
    sh = S.change_series("shape", 0)
    assert sh.window == 3 * S.CHANGE_PERIOD
    # a square wave sits near +-1, a sine spreads out
    assert np.mean(np.abs(np.abs(sh.x[seg:2 * seg]) - 1) < 0.3) > 0.9 > np.mean(np.abs(np.abs(sh.x[:seg]) - 1) < 0.3)
    f = S.change_series("frequency", 0).x
    crossings = lambda y: int(np.sum(np.diff(np.sign(y)) != 0))  # noqa: E731
    assert crossings(f[seg:2 * seg]) > 1.6 * crossings(f[:seg])
    assert np.array_equal(S.change_series("mean_ar", 3).x, S.change_series("mean_ar", 3).x)
    clean = S.change_series("mean_clean", 0).x
    assert clean[seg:2 * seg].mean() - clean[:seg].mean() == pytest.approx(1.0, abs=0.01)
    assert clean[:seg].std() == pytest.approx(0.05, rel=0.1)  # a step of 20 noise sd
    ms = S.change_series("mean_seasonal", 0)
    assert ms.window == 3 * S.CHANGE_PERIOD
    # whole cycles average out: the level moves by the amplitude, and the cycle goes on
    assert ms.x[seg:2 * seg].mean() - ms.x[:seg].mean() == pytest.approx(1.0, abs=0.1)
    assert ms.x[seg:2 * seg].std() == pytest.approx(ms.x[:seg].std(), rel=0.1) == pytest.approx(np.sqrt(0.5), rel=0.1)
    alt = S.change_series("mean_alternating", 0)
    half = seg // 2
    assert alt.change_points == [half, 2 * half, 3 * half, 4 * half, 5 * half] and alt.window == S.WINDOW
    means = [alt.x[a:a + half].mean() for a in range(0, 3 * seg, half)]
    assert np.allclose(means, [0, 2, 0, 2, 0, 2], atol=0.2)
    stairs = S.change_series("mean_staircase", 0)
    tenth = 3 * seg // 10
    assert stairs.change_points == list(range(tenth, 3 * seg, tenth)) and stairs.window == S.WINDOW
    levels = np.array([stairs.x[a:a + tenth].mean() for a in range(0, 3 * seg, tenth)])
    assert levels[0] == pytest.approx(0.0, abs=0.3)
    # every change moves the level by 2, up or down, and each segment is flat (unit noise about it)
    assert np.allclose(np.abs(np.diff(levels)), 2.0, atol=0.35)
    assert all(stairs.x[a:a + tenth].std() == pytest.approx(1.0, rel=0.2) for a in range(0, 3 * seg, tenth))
    ups = [np.sign(np.diff(levels)) for levels in
           ([S.change_series("mean_staircase", s).x[a:a + tenth].mean() for a in range(0, 3 * seg, tenth)]
            for s in range(20))]
    assert 0.35 < np.mean(np.concatenate(ups) > 0) < 0.65  # either way, about as often
    young = S.change_series("mean_young", 0)
    yseg = S.YOUNG_SEGMENT
    assert young.x.shape == (3 * yseg,) and young.change_points == [yseg, 2 * yseg] and young.window == S.WINDOW
    assert [young.x[a:a + yseg].mean() for a in (0, yseg, 2 * yseg)] == pytest.approx([0, 8, 0], abs=0.3)
    # the levels' values hardly overlap: a complete separation
    assert young.x[yseg:2 * yseg].min() > young.x[np.r_[:yseg, 2 * yseg:3 * yseg]].max()


@pytest.mark.parametrize("segment", [4, 7, 333, 501])
def test_a_staircase_of_any_segment_has_ten_steps_the_last_one_holding_the_remainder(segment):
    # np.repeat of the ten levels over a tenth of the series did not fill it when 3 x segment is
    # not a multiple of 10
    stairs = S.change_series("mean_staircase", 0, segment=segment)
    length, tenth = 3 * segment, 3 * segment // 10
    assert stairs.x.shape == (length,) and np.isfinite(stairs.x).all()
    assert stairs.change_points == [i * tenth for i in range(1, 10)]


def test_a_staircase_too_short_for_ten_steps_is_refused_with_the_segment_it_needs():
    with pytest.raises(ValueError, match="mean_staircase needs segment >= 4"):
        S.change_series("mean_staircase", 0, segment=3)


@pytest.mark.parametrize("segment", [1, 3, 501])
def test_alternating_means_need_an_even_segment_so_that_six_halves_fill_the_series(segment):
    # an odd segment left a seventh, short segment of mean 0 after the sixth: a change the case
    # does not list (and segment 1 had halves of no sample)
    with pytest.raises(ValueError, match=f"mean_alternating needs an even segment >= 2.*got segment={segment}"):
        S.change_series("mean_alternating", 0, segment=segment)


@pytest.mark.parametrize("segment", [2, 10, 500])
def test_alternating_means_change_exactly_where_the_case_says(segment):
    case = S.change_series("mean_alternating", 0, segment=segment)
    half = segment // 2
    assert case.x.shape == (3 * segment,) and case.change_points == [half * i for i in range(1, 6)]
    level = 2.0 * ((np.arange(3 * segment) // half) % 2 == 1)
    assert set(np.flatnonzero(np.diff(level)) + 1) == set(case.change_points)


def test_the_evaluation_guide_lists_every_stress_kind():
    from pathlib import Path

    guide = (Path(__file__).resolve().parents[3] / "docs" / "evaluation.md").read_text()
    stress = guide[guide.index("**Stress suite**"):]
    stress = stress[:stress.index("\n\n")]
    assert [k for k in S.STRESS_KINDS if f"`{k}`" not in stress] == []


def test_offline_null_scorer_counts_series_with_any_change():
    # a fake detector that reports one change on series longer than 100 samples
    res = S.score_null_offline(lambda x: [len(x) // 2] if len(x) > 100 else [], seeds=3,
                               lengths=(50, 100, 200), kinds=("ar0", "counts"))
    assert res["by_length"]["50"]["rate"] == 0.0 and res["by_length"]["200"]["rate"] == 1.0
    assert res["cells"]["counts"]["100"] == {"series": 3, "with_change": 0, "rate": 0.0, "changes_per_series": 0.0,
                                             "errors": 0, "in_spec": True}
    assert res["by_kind"]["ar0"]["rate"] == pytest.approx(1 / 3, abs=1e-4) and not res["by_kind"]["ar0"]["in_spec"]
    assert res["overall"]["series"] == 18 and res["overall"]["with_change"] == 6
    lines = S.format_null(res)
    assert any(line.startswith("ar0") and line.rstrip().endswith("*") for line in lines)


def test_offline_null_scorer_reports_failures():
    def boom(x):
        raise RuntimeError("nope")

    res = S.score_null_offline(boom, seeds=1, lengths=(15,), kinds=("t3",))
    assert res["overall"]["errors"] == 1 and "RuntimeError" in res["errors"][0]["error"]


class FailsAfter(FixedAlarms):
    """A detector raising alarms at ``at`` that fails once it has seen ``rows`` samples."""

    def __init__(self, at=(), rows=0):
        super().__init__(at)
        self.rows = rows

    def update(self, x):
        if self.t + 1 >= self.rows:
            raise RuntimeError("detector failed")
        super().update(x)


def test_offline_null_series_that_fail_are_left_out_and_out_of_spec():
    def detect(x):
        if len(x) == 100:
            raise RuntimeError("detector failed")
        return [3] if len(x) == 50 else []

    res = S.score_null_offline(detect, seeds=2, lengths=(15, 50, 100), kinds=("ar0",))
    # a failure is no "no change": the failed series count in neither the rate nor its denominator
    assert res["cells"]["ar0"]["100"] == {"series": 0, "with_change": 0, "rate": None, "changes_per_series": None,
                                          "errors": 2, "in_spec": False}
    assert res["cells"]["ar0"]["15"]["in_spec"] and res["cells"]["ar0"]["15"]["errors"] == 0
    assert res["overall"] == {"series": 4, "with_change": 2, "rate": 0.5, "changes_per_series": 0.5,
                              "errors": 2, "in_spec": False}
    assert len(res["errors"]) == 2 and res["errors"][0]["error"] == "RuntimeError: detector failed"


def test_a_detector_that_fails_is_not_within_the_null_specification():
    def fails_on_long_series(x):
        if len(x) > 15:
            raise RuntimeError("detector failed")
        return []

    res = S.score_null_offline(fails_on_long_series, seeds=1, lengths=(15, 50), kinds=("ar0",))
    assert res["overall"]["rate"] == 0.0 and res["overall"]["errors"] == 1
    assert not res["overall"]["in_spec"] and not res["by_kind"]["ar0"]["in_spec"]
    assert not res["by_length"]["50"]["in_spec"] and res["by_length"]["15"]["in_spec"]


def test_streaming_null_series_that_fail_are_left_out_alarms_samples_and_all():
    res = S.score_null_streaming(lambda: FailsAfter(at=(10,), rows=500), seeds=2, lengths=(100, 1000),
                                 kinds=("ar0",))
    # T = 100 runs to the end (one alarm per series); T = 1000 fails at sample 500 and is left out
    # entirely, with the alarm it raised before failing
    assert res["overall"] == {"series": 2, "samples": 200, "alarms": 2, "per_10k": 100.0,
                              "series_with_alarm": 2, "errors": 2, "in_spec": False}
    assert res["cells"]["ar0"]["1000"] == {"series": 0, "samples": 0, "alarms": 0, "per_10k": None,
                                           "series_with_alarm": 0, "errors": 2, "in_spec": False}
    # quiet until it fails: no false alarm counted, and still out of spec
    quiet = S.score_null_streaming(lambda: FailsAfter(rows=500), seeds=1, lengths=(100, 1000), kinds=("ar0",))
    assert quiet["overall"]["per_10k"] == 0.0 and quiet["overall"]["errors"] == 1
    assert not quiet["overall"]["in_spec"] and not quiet["by_kind"]["ar0"]["in_spec"]
    assert [e["length"] for e in quiet["errors"]] == [1000]


@pytest.mark.parametrize("streaming", [False, True], ids=["offline", "streaming"])
def test_the_null_table_says_how_many_series_failed_and_the_first_reason(streaming):
    if streaming:
        res = S.score_null_streaming(lambda: FailsAfter(rows=30), seeds=2, lengths=(15, 50), kinds=("ar0",))
    else:
        res = S.score_null_offline(lambda x: [] if len(x) < 30 else 1 // 0, seeds=2, lengths=(15, 50),
                                   kinds=("ar0",))
    text = S.format_null(res)
    first = res["errors"][0]["error"]
    assert text[-1] == f"2 series failed, left out of the scores (ar0/50 seed 0: {first})"
    # the cell of failures alone shows no rate, and the kind is marked out of spec
    ar0 = next(line for line in text if line.startswith("ar0")).split()
    assert ar0[2] == "-" and ar0[-1] == "*"
    res["suite"] = "stress"
    assert "2 series failed" in S.format_null(res)[-1]
    clean = S.score_null_offline(lambda x: [], seeds=1, lengths=(15,), kinds=("ar0",))
    assert not any("failed" in line for line in S.format_null(clean))


def test_change_series_that_fail_are_reported_as_failed_not_as_misses():
    seg = S.SEGMENT

    def detect(x):
        if len(x) == 3 * S.YOUNG_SEGMENT:
            raise RuntimeError("detector failed")
        return [seg + 3, 2 * seg - 3]

    off = S.score_change_offline(detect, seeds=2, kinds=("mean", "mean_young"))
    assert off["overall"]["changes"] == 4 and off["overall"]["rate"] == 1.0
    assert off["by_kind"]["mean_young"] == {"changes": 0, "found": 0, "rate": None, "mean_error_abs": None,
                                            "max_error_abs": None, "unmatched_per_10k": None}
    assert [(e["kind"], e["error"]) for e in off["errors"]] == [("mean_young", "RuntimeError: detector failed")] * 2
    text = S.format_change(off)
    assert text[-1] == "2 series failed, left out of the scores (mean_young seed 0: RuntimeError: detector failed)"
    assert next(line for line in text if line.startswith("mean_young")).split()[1:] == ["0/0", "-", "-"]
    # streaming: a detector failing half-way counts none of its changes, found or missed
    st = S.score_change_streaming(lambda: FailsAfter(at=(seg + 40,), rows=seg + 100), seeds=1,
                                  kinds=("mean", "variance"))
    assert st["overall"]["changes"] == 0 and st["overall"]["rate"] is None and len(st["errors"]) == 2
    assert st["by_kind"]["variance"]["found_in_segment"] == 0
    assert S.format_change(st)[-1].startswith("2 series failed, left out of the scores (mean seed 0: RuntimeError")


def test_streaming_null_scorer_is_alarms_per_10k_samples():
    res = S.score_null_streaming(lambda: FixedAlarms(at=(10, 150)), seeds=2, lengths=(100, 1000),
                                 kinds=("ar05",))
    # T = 100: one alarm (at 10) per series; T = 1000: two
    assert res["cells"]["ar05"]["100"]["per_10k"] == pytest.approx(1e4 * 2 / 200)
    assert res["cells"]["ar05"]["1000"]["per_10k"] == pytest.approx(1e4 * 4 / 2000)
    assert res["overall"]["alarms"] == 6 and res["overall"]["samples"] == 2200
    assert res["overall"]["per_10k"] == pytest.approx(1e4 * 6 / 2200, abs=1e-3) and not res["overall"]["in_spec"]
    quiet = S.score_null_streaming(lambda: FixedAlarms(), seeds=1, lengths=(50,), kinds=("ar0",))
    assert quiet["overall"]["per_10k"] == 0.0 and quiet["overall"]["in_spec"]


def test_matching_rules():
    # offline: closest first, one prediction per change, within the tolerance
    assert S.match_offline([500, 1000], [505, 990, 1200], 100) == [505, 990]
    assert S.match_offline([500, 520], [510], 100) == [510, None]
    assert S.match_offline([500], [701], 200) == [None]
    # streaming: the first alarm raised in [c, c + tol] (both ends included) and before the next change
    assert S.match_streaming([500, 1000], [(490, 500)], 100, 1500) == [(490, 500), None]
    assert S.match_streaming([500, 1000], [(490, 600)], 100, 1500) == [(490, 600), None]
    assert S.match_streaming([500, 1000], [(490, 601)], 100, 1500) == [None, None]
    # and the docstring states that closed window
    assert "[c, min(c + tolerance, next change - 1)]" in S.match_streaming.__doc__
    alarms = [(480, 490), (500, 560), (990, 1080)]
    assert S.match_streaming([500, 1000], alarms, 100, 1500) == [(500, 560), (990, 1080)]
    assert S.match_streaming([500, 1000], alarms, 50, 1500) == [None, None]
    assert S.match_streaming([500, 550], [(540, 560)], 100, 1500) == [None, (540, 560)]


def test_change_scorers_on_oracle_and_late_answers():
    oracle = S.score_change_offline(lambda x: [S.SEGMENT + 3, 2 * S.SEGMENT - 3], seeds=2, kinds=("mean", "shape"))
    assert oracle["overall"]["rate"] == 1.0 and oracle["overall"]["mean_error_abs"] == 3.0
    assert oracle["overall"]["unmatched_per_10k"] == 0.0
    off = S.score_change_offline(lambda x: [S.SEGMENT + 2 * S.WINDOW + 1, 10], seeds=1, kinds=("mean",))
    assert off["overall"]["found"] == 0 and off["by_kind"]["mean"]["unmatched_per_10k"] == pytest.approx(
        1e4 * 2 / (3 * S.SEGMENT), abs=1e-3)
    # the periodic kinds allow 2 x 72 samples
    late = S.score_change_offline(lambda x: [S.SEGMENT + 120], seeds=1, kinds=("mean", "frequency"))
    assert late["by_kind"]["mean"]["found"] == 0 and late["by_kind"]["frequency"]["found"] == 1
    seg = S.SEGMENT
    st = S.score_change_streaming(lambda: FixedAlarms(at=(seg + 40, 2 * seg + 90, 1400), lag=30), seeds=2,
                                  kinds=("variance",))
    assert st["overall"]["rate"] == 1.0 and st["overall"]["mean_delay"] == 65.0 and st["overall"]["max_delay"] == 90
    assert st["by_kind"]["variance"]["unmatched_per_10k"] == pytest.approx(1e4 * 2 / (2 * 3 * seg), abs=1e-3)
    assert "variance" in "\n".join(S.format_change(st))


def test_eval_synthetic_command(monkeypatch, capsys):
    from ratiowatch.stream.commands.cli import main

    monkeypatch.setattr(S, "default_detect", lambda: (lambda x: [3] if len(x) == 50 else []))
    assert main(["eval", "synthetic", "--lengths", "15,50", "--seeds", "2", "--suite", "null", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["mode"] == "offline" and "change" not in out and "blas" in out["environment"]
    assert out["null"]["by_length"]["50"]["rate"] == 1.0 and out["null"]["by_length"]["15"]["rate"] == 0.0
    assert out["null"]["overall"]["series"] == 2 * 2 * len(S.NULL_KINDS)
    monkeypatch.setattr(S, "default_detector_factory", lambda seed=0: (lambda: FixedAlarms(at=(5,))))
    assert main(["eval", "synthetic", "--streaming", "--lengths", "15", "--seeds", "1"]) == 0
    text = capsys.readouterr().out
    assert "false alarms per 10,000 samples" in text and "streaming change suite" in text
    assert main(["eval", "synthetic", "--seeds", "0"]) == 2
    monkeypatch.setattr(S, "default_detect", lambda: (lambda x: [1] if x.max() > 5 else []))
    assert main(["eval", "synthetic", "--suite", "stress", "--lengths", "200", "--seeds", "1", "--json"]) == 0
    stress = json.loads(capsys.readouterr().out)["stress"]
    assert stress["suite"] == "stress" and set(stress["by_kind"]) == set(S.STRESS_KINDS)
    assert stress["by_kind"]["outliers"]["with_change"] == 1 and stress["by_kind"]["sawtooth30"]["with_change"] == 0
    assert main(["eval", "synthetic", "--suite", "stress", "--lengths", "200", "--seeds", "1"]) == 0
    assert "stress suite, outside the specification" in capsys.readouterr().out


def test_eval_synthetic_kinds_scores_only_the_kinds_asked_for(monkeypatch, capsys):
    from ratiowatch.stream.commands.cli import main

    monkeypatch.setattr(S, "default_detect", lambda: (lambda x: []))
    assert main(["eval", "synthetic", "--kinds", "ar05,mean", "--lengths", "50", "--seeds", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out["null"]["by_kind"]) == {"ar05"} and set(out["change"]["by_kind"]) == {"mean"}
    assert main(["eval", "synthetic", "--suite", "stress", "--kinds", "schedule288", "--lengths", "50",
                 "--seeds", "1", "--json"]) == 0
    assert set(json.loads(capsys.readouterr().out)["stress"]["by_kind"]) == {"schedule288"}
    assert main(["eval", "synthetic", "--suite", "stress", "--kinds", "ar05"]) == 2
    err = capsys.readouterr().err
    assert "['ar05'] not in --suite stress" in err and "schedule288" in err


def test_streaming_null_suite_runs_the_real_detector_on_short_series():
    res = S.score_null_streaming(seeds=1, lengths=(15, 100), kinds=("ar0",))
    assert res["overall"]["errors"] == 0 and res["overall"]["samples"] == 115


def test_eval_synthetic_runs_the_named_streaming_detector_over_processes(capsys):
    from ratiowatch.stream.commands.cli import main

    assert main(["eval", "synthetic", "--streaming", "--detector", "profile", "--suite", "null",
                 "--lengths", "100", "--seeds", "1", "--jobs", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["detector"] == "profile" and out["null"]["overall"]["series"] == len(S.NULL_KINDS)
    one = S.score_null_streaming(seeds=1, lengths=(100,), kinds=("ar05", "counts"), detector="profile")
    two = S.score_null_streaming(seeds=1, lengths=(100,), kinds=("ar05", "counts"), detector="profile", jobs=2)
    assert one["cells"] == two["cells"]
    assert main(["eval", "synthetic", "--streaming", "--jobs", "0"]) == 2
    assert main(["eval", "synthetic", "--detector", "profile"]) == 2
    assert "add --streaming" in capsys.readouterr().err
    with pytest.raises(ValueError, match="streaming detector"):
        S.named_factory("ruler")
    assert S.named_factory("profile_cycles")().cycle_permutation is True
    assert S.named_factory("profile")().cycle_permutation is False
    assert S.named_factory("window_levels")().level_view is True and S.named_factory("window")().level_view is False
    assert S.named_factory("auto_levels")().window_options == {"level_view": True}
    assert S.named_factory("auto_history")().with_history and not S.named_factory("auto")().with_history
    assert S.named_factory("auto")().window_options == {}
    assert S.named_factory("window_robust")().robust_line is True and S.named_factory("window")().robust_line is False
    assert S.named_factory("auto_robust")().window_options == {"robust_line": True}
    assert S.named_factory("window")().method == "rulsif"
    for method in ("ulsif", "kliep", "lsdd"):
        assert S.named_factory(f"window_{method}")().method == method


# ---------------------------------------------------------------- channels suite
@pytest.mark.parametrize("kind", S.CHANNEL_NULL_KINDS)
def test_channel_null_series_are_independent_channels_of_a_null_kind(kind):
    x = S.null_series(kind, 400, seed=2)
    assert x.shape == (400, S.CHANNELS) and np.array_equal(x, S.null_series(kind, 400, seed=2))
    base = kind[len("channels_"):]
    for c in range(S.CHANNELS):
        assert np.array_equal(x[:, c], S.null_series(base, 400, 2 + 10_000 * (c + 1)))
    assert len({x[:, c].tobytes() for c in range(S.CHANNELS)}) == S.CHANNELS


def test_channel_change_series_change_one_channel_or_one_pair():
    seg = S.SEGMENT
    m = S.change_series("channel_mean", 0).x
    assert m.shape == (3 * seg, S.CHANNELS)
    shift = m[seg:2 * seg].mean(axis=0) - m[:seg].mean(axis=0)
    assert shift[0] == pytest.approx(2.0, abs=0.2) and np.all(np.abs(shift[1:]) < 0.2)
    v = S.change_series("channel_variance", 0).x
    ratio = v[seg:2 * seg].std(axis=0) / v[2 * seg:].std(axis=0)
    assert ratio[0] == pytest.approx(3.0, rel=0.15) and np.all(np.abs(ratio[1:] - 1) < 0.15)
    c = S.change_series("channel_correlation", 0).x
    inside, outside = np.corrcoef(c[seg:2 * seg].T), np.corrcoef(c[2 * seg:].T)
    assert inside[0, 1] == pytest.approx(0.9, abs=0.05) and abs(outside[0, 1]) < 0.15
    assert np.all(np.abs(inside[np.triu_indices(S.CHANNELS, 1)][1:]) < 0.15)  # no other pair
    assert c[:, 1].std() == pytest.approx(1.0, abs=0.05)  # the margins do not change


def test_eval_synthetic_channels_suite(monkeypatch, capsys):
    from ratiowatch.stream.commands.cli import main

    # an oracle that reports exactly the true change points of the channel change series
    monkeypatch.setattr(S, "default_detect",
                        lambda: (lambda x: [S.SEGMENT, 2 * S.SEGMENT] if len(x) == 3 * S.SEGMENT else []))
    assert main(["eval", "synthetic", "--suite", "channels", "--lengths", "50", "--seeds", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out["null"]["by_kind"]) == set(S.CHANNEL_NULL_KINDS) and out["null"]["overall"]["with_change"] == 0
    assert set(out["change"]["by_kind"]) == set(S.CHANNEL_CHANGE_KINDS)
    assert out["change"]["overall"]["found"] == out["change"]["overall"]["changes"] == 2 * len(S.CHANNEL_CHANGE_KINDS)
    assert main(["eval", "synthetic", "--suite", "channels", "--lengths", "50", "--seeds", "1"]) == 0
    assert "channel_correlation" in capsys.readouterr().out


def test_eval_synthetic_smooth_steps_reaches_the_offline_detector(monkeypatch, capsys):
    from ratiowatch.stream.commands.cli import main

    calls = []
    monkeypatch.setattr(S, "default_detect", lambda: (lambda x, **kw: calls.append(kw) or []))
    assert main(["eval", "synthetic", "--lengths", "15", "--seeds", "1", "--suite", "null", "--smooth-steps",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["options"] == {"smooth_steps": True}
    assert calls and all(kw == {"smooth_steps": True} for kw in calls)
    calls.clear()
    assert main(["eval", "synthetic", "--lengths", "15", "--seeds", "1", "--suite", "null", "--json"]) == 0
    assert "options" not in json.loads(capsys.readouterr().out) and all(kw == {} for kw in calls)
    assert main(["eval", "synthetic", "--streaming", "--smooth-steps"]) == 2
    assert "option of the offline detector" in capsys.readouterr().err


def test_eval_synthetic_method_reaches_the_offline_detector(monkeypatch, capsys):
    from ratiowatch.stream.commands.cli import main

    calls = []
    monkeypatch.setattr(S, "default_detect", lambda: (lambda x, **kw: calls.append(kw) or []))
    assert main(["eval", "synthetic", "--lengths", "15", "--seeds", "1", "--suite", "null", "--method", "ulsif",
                 "--smooth-steps", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["options"] == {"smooth_steps": True, "method": "ulsif"}
    assert calls and all(kw == {"smooth_steps": True, "method": "ulsif"} for kw in calls)
    assert main(["eval", "synthetic", "--streaming", "--method", "ulsif"]) == 2
    assert "--detector window_ulsif" in capsys.readouterr().err


def test_eval_synthetic_offers_the_offline_detectors_methods():
    import argparse

    from ratiowatch.stream.detectors.offline import METHODS

    parser = argparse.ArgumentParser()
    S.add_arguments(parser)
    assert tuple(next(a for a in parser._actions if a.dest == "method").choices) == METHODS

"""PeriodRoutedDetector: the two-window detector, handed to the split profile once the stream's
current segment shows a period by the split profile's own width rule."""

import json
import math

import numpy as np
import pytest

from ratiowatch.connectors.checkpoint_format import decode_bytes, encode
from ratiowatch.stream.detectors.changepoint import ChangePointDetector
from ratiowatch.stream.detectors.routed import (PeriodRoutedDetector, period_checks, question_level,
                                               segment_period)
from ratiowatch.stream.detectors.segmenter import SplitProfileDetector
from ratiowatch.stream.evaluate.streaming import stream_alarms
from ratiowatch.stream.evaluate.synthetic import change_series, null_series
from ratiowatch.stream.series.width import significant_period


def feed(det, x):
    return [det.step(v) for v in (x.tolist() if np.ndim(x) == 1 else list(x))]


def same_state(a, b):
    """Two detectors' checkpoints hold the same entries, NaN equal to NaN."""
    return a.keys() == b.keys() and all(
        json.loads(a[k]) == json.loads(b[k]) if isinstance(a[k], str) else np.array_equal(a[k], b[k], equal_nan=True)
        for k in a)


def sine(n, period=24, noise=0.2, seed=0):
    rng = np.random.default_rng(seed)
    return np.sin(2 * np.pi * np.arange(n) / period) + rng.normal(0, noise, n)


class TestRouting:
    def test_a_stream_without_a_period_is_the_window_detector_exactly(self):
        rng = np.random.default_rng(5)
        x = np.r_[rng.normal(0, 1, 1500), rng.normal(2, 1, 1500)]
        det = PeriodRoutedDetector(seed=3)
        got = feed(det, x)
        assert det.kind == "window" and det.handed_over_at is None
        assert got == feed(ChangePointDetector(seed=3), x)
        assert any(a is not None and abs(a.change_index - 1500) <= 10 for a in got)

    def test_the_period_is_asked_at_doubling_segment_lengths(self):
        assert period_checks(30, 5000) == [60, 120, 240, 480, 960, 1920, 3840]
        assert period_checks(100, 300) == [200]
        x = sine(3000)
        first = next(n for n in period_checks(30, 5000) if significant_period(x[:n], band="zero_crossing") > 0)
        det = PeriodRoutedDetector(seed=0)
        feed(det, x[:first - 1])
        assert det.kind == "window"
        det.step(float(x[first - 1]))
        assert det.kind == "split_profile" and det.handed_over_at == first

    def test_after_the_hand_over_the_split_profile_holds_the_stream_from_its_segment_start(self):
        x = change_series("shape", 1).x
        det = PeriodRoutedDetector(seed=1)
        got = feed(det, x)
        at = det.handed_over_at
        assert at is not None and det.kind == "split_profile"
        # the same as a split-profile detector that took over the stream at the segment's start
        # (this segment starts at sample 0: the window detector reported no change before `at`)
        assert all(a is None for a in got[:at])
        ref = SplitProfileDetector(seed=1)
        expected = feed(ref, x)
        assert [a for a in got[at:] if a is not None] == [a for a in expected[at:] if a is not None]

    def test_shape_changes_the_window_detector_misses_are_found(self):
        found = {"window": 0, "auto": 0}
        for seed in range(3):
            case = change_series("shape", seed)
            for name, det in (("window", ChangePointDetector(seed=seed)), ("auto", PeriodRoutedDetector(seed=seed))):
                alarms = stream_alarms(det, case.x)
                for c in case.change_points:
                    found[name] += any(c <= a < c + 500 and abs(ci - c) <= 25 for ci, a in alarms)
        assert found["window"] == 0
        assert found["auto"] == 6

    def test_a_long_cycle_is_handed_over_within_five_cycles_and_a_level_step_inside_it_is_found(self):
        # a metric with a daily cycle of 96 samples (amplitude 5, noise sd 1) that steps up by 10:
        # the window detector works on differences here (lag-1 autocorrelation above 0.8), where
        # the step is one outlier, and misses it; with the band summed up to the peak's lag the
        # cycle was recognised at 1,920 samples only
        for seed in range(3):
            rng = np.random.default_rng(seed)
            t = np.arange(1800)
            x = 5 * np.sin(2 * np.pi * t / 96) + rng.normal(0, 1, 1800) + np.where(t >= 900, 10.0, 0.0)
            window = [a for a in feed(ChangePointDetector(seed=0), x) if a is not None]
            assert not any(abs(a.change_index - 900) <= 100 for a in window), window
            det = PeriodRoutedDetector(seed=0)
            alarms = [a for a in feed(det, x) if a is not None]
            assert det.handed_over_at <= 480, det.handed_over_at
            # one alarm, located within a quarter cycle (the split profile's width is 3 here: its
            # own width rule does not see the cycle yet)
            assert len(alarms) == 1 and abs(alarms[0].change_index - 900) <= 24, alarms

    def test_a_change_the_window_detector_reports_starts_a_segment_that_is_asked_again(self):
        rng = np.random.default_rng(2)
        x = np.r_[rng.normal(0, 1, 800), 6 + sine(2400, noise=0.3, seed=2)]
        det = PeriodRoutedDetector(seed=0)
        got = feed(det, x)
        first = next(a for a in got if a is not None)
        assert abs(first.change_index - 800) <= 5
        assert det.kind == "split_profile"
        # asked at the doubling lengths of the segment that starts at the change
        assert det.handed_over_at - first.change_index in period_checks(30, 5000)

    def test_several_channels_stay_with_the_window_detector_exactly(self):
        # the window detector's channel and rank-correlation views see changes between channels
        rng = np.random.default_rng(4)
        x = np.c_[rng.normal(size=1500), sine(1500, seed=4)]
        x[900:, 0] += 3.0
        det = PeriodRoutedDetector(seed=0)
        got = feed(det, x)
        assert det.kind == "window" and det.to_state()["ring"].size == 0
        assert got == feed(ChangePointDetector(seed=0), x)
        assert segment_period(x[:960]) == 24 and segment_period(x[:960, :1]) == 0

    def test_min_acf_keeps_a_cycle_that_does_not_dominate_the_series_on_the_window_detector(self):
        # a sine under noise of sd 0.8: the cycle is under half the variance, significant but weak
        x = sine(4000, noise=0.8, seed=1)
        assert segment_period(x[:480, None]) == 24 and segment_period(x[:480, None], min_acf=0.5) == 0
        for min_acf, kind in ((0.0, "split_profile"), (0.5, "window")):
            det = PeriodRoutedDetector(min_acf=min_acf, seed=0)
            feed(det, x)
            assert det.kind == kind

    def test_chance_autocorrelation_peaks_hand_some_aperiodic_streams_over_unless_min_acf(self):
        # noise whose level and spread change at random every 150-600 samples (no period), asked
        # at every check length from its start
        by_band = by_half_variance = 0
        for k in range(20):
            rng = np.random.default_rng(200 + k)
            lens = rng.integers(150, 600, size=40)
            seg = np.repeat(np.arange(40), lens)[:4000]
            v = (rng.normal(0, 3, 40)[seg] + np.exp(rng.normal(0, 0.7, 40))[seg] * rng.normal(size=seg.size))[:, None]
            by_band += any(segment_period(v[:n]) > 0 for n in period_checks(30, 5000))
            by_half_variance += any(segment_period(v[:n], min_acf=0.5) > 0 for n in period_checks(30, 5000))
        assert 1 <= by_band <= 10 and by_half_variance == 0

    def test_regimes_that_alternate_on_a_schedule_are_a_cycle(self):
        # the daemon benchmark's keys switch between two regimes every 250 samples: a square wave
        # of period 500 under noise, recognised once three cycles are in view
        from ratiowatch.stream.bench.daemon import _records

        rows = _records(8_000, 2, 0)
        v = np.array([r["value"] for r in rows if r["key"] == "key-0000"])[:, None]
        assert segment_period(v[:960]) == 0
        assert abs(segment_period(v[:3840]) - 500) <= 25

    def test_the_question_levels_of_a_streams_life_sum_to_the_period_level(self):
        levels = [question_level(0.05, q) for q in range(1, 10_001)]
        assert levels[:3] == pytest.approx([0.025, 0.05 / 6, 0.05 / 12])
        assert sum(levels) == pytest.approx(0.05 * (1 - 1 / 10_001))
        assert all(a > b for a, b in zip(levels, levels[1:]))
        with pytest.raises(ValueError, match="counted from 1"):
            question_level(0.05, 0)

    def test_every_question_is_counted_over_the_streams_life_and_asked_at_its_level(self, monkeypatch):
        import ratiowatch.stream.detectors.routed as routed

        asked = []

        def recording(rows, min_acf=0.0, level=0.05):
            asked.append((len(rows), level))
            return 0

        monkeypatch.setattr(routed, "segment_period", recording)
        rng = np.random.default_rng(3)
        x = np.concatenate([rng.normal(4.0 * (i % 2), 1, 700) for i in range(4)])  # three changes
        by_default = PeriodRoutedDetector(seed=0)
        feed(by_default, x)
        assert by_default.questions == len(asked) and {lv for _, lv in asked} == {0.05}
        asked.clear()
        det = PeriodRoutedDetector(period_level=0.02, seed=0)
        alarms = [a for a in feed(det, x) if a is not None]
        assert len(alarms) == 3 and det.questions == len(asked) == by_default.questions
        # a new segment is asked again, but at the levels its predecessors left
        assert [lv for _, lv in asked] == [question_level(0.02, q) for q in range(1, len(asked) + 1)]
        assert sum(n < 120 for n, _ in asked) >= 4  # each of the four segments was asked from the start
        restored = PeriodRoutedDetector.from_state(det.to_state())
        assert restored.questions == det.questions and restored.period_level == 0.02
        with pytest.raises(ValueError, match="period_level"):
            PeriodRoutedDetector(period_level=1.5)

    def test_an_aperiodic_stream_with_many_segments_is_rarely_handed_over(self):
        # noise whose level and spread change at random every 150-600 samples (no period): asked
        # at a fixed 5 %, a question passes now and then, and over many segments most such streams
        # were handed over; the lifetime level bounds the chance at 5 % per stream
        fixed = spent = 0
        for k in range(10):
            rng = np.random.default_rng(100 + k)
            lens = rng.integers(150, 600, size=60)
            seg = np.repeat(np.arange(60), lens)[:20_000]
            x = rng.normal(0, 3, 60)[seg] + np.exp(rng.normal(0, 0.7, 60))[seg] * rng.normal(size=seg.size)
            starts = np.r_[0, np.cumsum(lens)][:-1]
            q = 0
            passed_fixed = passed_spent = False
            for a, n_seg in zip(starts, lens):
                for n in (m for m in period_checks(30, 5000) if m <= n_seg and a + m <= x.size):
                    q += 1
                    passed_fixed |= segment_period(x[a:a + n, None]) > 0
                    passed_spent |= segment_period(x[a:a + n, None], level=question_level(0.05, q)) > 0
            fixed += passed_fixed
            spent += passed_spent
        assert spent <= 1 < fixed

    def test_missing_values_are_carried_for_the_period(self):
        x = sine(960)
        x[::7] = np.nan
        assert segment_period(x[:, None]) == 24
        assert segment_period(np.full((10, 1), np.nan)) == 0

    def test_missing_values_before_and_after_the_hand_over_are_carried(self):
        x = sine(3000, noise=0.1)
        x[:50] = np.nan  # nothing seen yet
        x[700:720] = np.nan  # a gap after the hand-over
        x[1000:] += 0.8  # a level shift inside the cycle
        det = PeriodRoutedDetector(seed=0)
        alarms = [a for a in feed(det, x) if a is not None]
        assert det.kind == "split_profile" and det.handed_over_at == 50 + 120  # 120 samples with a value
        assert [a.change_index for a in alarms] == [1000]

    @pytest.mark.parametrize("before, gap", [(0, 100), (0, 4000), (100, 3000)],
                             ids=["100-first-missing", "4000-first-missing", "3000-missing-after-100"])
    def test_missing_samples_do_not_count_toward_the_segment_length(self, before, gap):
        # a gap moves time on and nothing else: the period is asked after 120 samples with a value,
        # as without it (counted, 4000 missing first samples spent every question on nothing)
        y = sine(600)
        x = np.r_[y[:before], np.full(gap, np.nan), y[before:]]
        det = PeriodRoutedDetector(seed=0)
        feed(det, x[:gap + 120])
        assert det.kind == "split_profile" and det.handed_over_at == gap + 120 and det.questions == 2
        # the split profile holds what it would, fed the same samples, missing ones included
        fed = SplitProfileDetector(seed=0)
        feed(fed, x[:gap + 120])
        assert det.detector.n_seen == fed.n_seen == gap + 120
        assert same_state(det.detector.to_state(), fed.to_state())
        assert feed(det, x[gap + 120:]) == feed(fed, x[gap + 120:])

    def test_a_primed_hand_over_across_a_gap_holds_the_samples_with_their_indices(self):
        # with_history primes the split profile with the newest samples with a value, at their
        # input indices, as prime takes the same samples missing ones included
        x = null_series("schedule288", 6000, 0)
        x = np.r_[x[:1000], np.full(2500, np.nan), x[1000:]]
        det = PeriodRoutedDetector(with_history=True, seed=0)
        for v in x.tolist():
            det.step(v)
            if det.kind == "split_profile":
                break
        n = det.handed_over_at
        start = max(0, n - 5000)  # the split profile's max_window
        primed = SplitProfileDetector(seed=0)
        primed.prime(x[start:n], start)
        assert n > 3500 and det.detector.window_length == np.isfinite(x[start:n]).sum() > 1000
        assert same_state(det.detector.to_state(), primed.to_state())

    def test_change_free_series_stay_within_the_rate(self):
        # 200,000 samples over periodic and aperiodic kinds: at most 1 alarm per 10,000 expected
        alarms = 0
        for kind in ("ar05", "seasonal24", "sine12", "t3"):
            for seed in range(5):
                alarms += sum(a is not None for a in feed(PeriodRoutedDetector(seed=seed),
                                                           null_series(kind, 10_000, seed)))
        assert alarms <= 20


class TestWithHistory:
    """``with_history=True``: the period is also asked across changes, and the split profile takes
    the stream's newest samples as its window (module docstring)."""

    @pytest.mark.parametrize("seed", [0, 3])
    def test_a_daily_on_off_schedule_is_handed_over_and_its_switches_stop_alarming(self, seed):
        # every switch of a schedule of period 288 outlasts the two-window detector's windows: it
        # reports switch after switch (10 and 13 of the 41 at these seeds), and no segment grows
        # to the five cycles the question needs
        x = null_series("schedule288", 6000, seed)
        plain = PeriodRoutedDetector(seed=0)
        plain_alarms = stream_alarms(plain, x)
        det = PeriodRoutedDetector(with_history=True, seed=0)
        alarms = stream_alarms(det, x)
        assert plain.kind == "window" and len(plain_alarms) >= 10
        assert det.kind == "split_profile" and det.handed_over_at < 3000
        assert all(a < det.handed_over_at for _, a in alarms)  # none after the hand-over
        assert 2 * len(alarms) < len(plain_alarms)

    def test_a_reported_change_asks_the_streams_newest_samples(self, monkeypatch):
        import ratiowatch.stream.detectors.routed as routed

        asked = []
        monkeypatch.setattr(routed, "segment_period", lambda rows, *a, **k: asked.append(len(rows)) or 0)
        rng = np.random.default_rng(0)
        x = np.r_[rng.normal(0, 1, 1500), rng.normal(6, 1, 3000)]
        by_segment = stream_alarms(PeriodRoutedDetector(seed=0), x), list(asked)
        asked.clear()
        alarms = stream_alarms(PeriodRoutedDetector(with_history=True, seed=0), x)
        assert alarms == by_segment[0] and len(alarms) == 1 and abs(alarms[0][0] - 1500) <= 5
        seen = alarms[0][1] + 1  # samples seen when the change is reported
        # the segments' questions, and one more on every sample so far
        assert sorted(asked) == sorted(by_segment[1] + [seen]) and seen not in by_segment[1]

    @pytest.mark.parametrize("seed", [4, 6])
    def test_regimes_that_alternated_a_few_times_are_still_changes(self, seed):
        # a chance period on a short segment hands these streams over; their newest samples show
        # no period of their own, so the split profile is fed the segment, as by default, and
        # finds the shifts that follow (primed with those samples it took them as ordinary)
        c = change_series("mean_alternating", seed)
        plain = PeriodRoutedDetector(seed=0)
        expected = stream_alarms(plain, c.x)
        det = PeriodRoutedDetector(with_history=True, seed=0)
        assert plain.handed_over_at is not None and stream_alarms(det, c.x) == expected
        assert len(expected) >= 4

    def test_the_split_profile_is_primed_with_the_newest_samples_across_changes_untested(self):
        x = null_series("schedule288", 6000, 0)
        det = PeriodRoutedDetector(with_history=True, seed=0)
        for v in x.tolist():
            det.step(v)
            if det.kind == "split_profile":
                break
        prof, n = det.detector, det.handed_over_at
        assert n == det.n_seen and n > 2000
        assert prof.window_length == min(n, 3840) and prof.n_seen == n and np.isnan(prof.threshold)  # untested
        det.step(float(x[n]))
        assert prof.window_length == min(n, 3840) + 1 and np.isfinite(prof.threshold)

    def test_a_change_among_the_primed_samples_is_not_reported_again(self):
        from ratiowatch.stream.calibration.peaks import Alarm

        x = null_series("schedule288", 6000, 0)
        det = PeriodRoutedDetector(with_history=True, seed=0)
        reported = [a for a in (det.step(v) for v in x.tolist()[:2600]) if a is not None]
        assert det.kind == "split_profile" and reported
        last = max(a.change_index for a in reported)
        # the split profile finds changes in its window; those at or before the last one reported
        # (in the primed samples) are old news, a later one is passed on
        found = iter([Alarm(change_index=last, alarm_index=2600, score=9.0, threshold=1.0),
                      Alarm(change_index=last - 200, alarm_index=2601, score=9.0, threshold=1.0),
                      Alarm(change_index=2590, alarm_index=2602, score=9.0, threshold=1.0)])
        det.detector.step = lambda v: next(found)
        assert [det.step(0.0) for _ in range(2)] == [None, None] and not det.drift_detected
        new = det.step(0.0)
        assert new.change_index == 2590 and det.drift_detected
        state = det.to_state()  # the bound is checkpointed
        assert PeriodRoutedDetector.from_state(state)._primed_through == last

    def test_a_stream_periodic_from_its_start_is_handed_over_as_by_default(self):
        # no change reported before the hand-over: nothing beyond the segment to prime with
        x = change_series("shape", seed=0).x
        plain, det = PeriodRoutedDetector(seed=0), PeriodRoutedDetector(with_history=True, seed=0)
        assert stream_alarms(det, x) == stream_alarms(plain, x)
        assert det.handed_over_at == plain.handed_over_at is not None

    @pytest.mark.parametrize("cut", [500, 2300])
    def test_restored_detector_continues_exactly(self, cut):
        x = null_series("schedule288", 4000, 0)
        whole = PeriodRoutedDetector(with_history=True, seed=0)
        expected = feed(whole, x)
        first = PeriodRoutedDetector(with_history=True, seed=0)
        got = feed(first, x[:cut])
        arrays, _ = decode_bytes(encode(first.to_state(), {}, "k"), "test")
        again = PeriodRoutedDetector.from_state(arrays)
        assert again.with_history
        got += feed(again, x[cut:])
        assert got == expected


class TestHandOverAlarms:
    def test_alarms_found_on_the_segment_are_passed_on_one_per_step_at_the_steps_they_are_reported(self):
        # a level step of 2 inside a noisy cycle at 200, before the hand-over at 480: the window
        # detector, its windows a fraction of a cycle, does not report it; the split profile, fed
        # the segment, finds it at sample 228, and it is reported at the hand-over's step
        x = sine(3000, noise=1.0)
        x[200:] += 2.0
        det = PeriodRoutedDetector(seed=0)
        got = feed(det, x)
        at = det.handed_over_at
        ref = SplitProfileDetector(seed=0)
        replayed = [a for a in feed(ref, x[:at]) if a is not None]
        assert at == 480 and [a.change_index for a in replayed] == [198]
        passed = got[at - 1: at - 1 + len(replayed)]
        assert [(a.change_index, a.score, a.threshold) for a in passed] == [
            (a.change_index, a.score, a.threshold) for a in replayed]
        assert [a.alarm_index for a in passed] == list(range(at - 1, at - 1 + len(replayed)))
        assert all(a.alarm_index >= a.change_index for a in got if a is not None)


class TestInput:
    def test_bad_input_says_what_to_do(self):
        det = PeriodRoutedDetector()
        with pytest.raises(ValueError, match="not a dict"):
            det.step({"a": 1.0})
        with pytest.raises(ValueError, match="number or a 1-d array"):
            det.step("x")
        det.step([1.0, 2.0])
        with pytest.raises(ValueError):
            det.step([1.0, 2.0, 3.0])
        assert det.n_seen == 1  # a refused sample changes nothing

    @pytest.mark.parametrize("first", [None, math.nan, [math.nan] * 3], ids=["None", "nan", "all-nan"])
    def test_a_missing_first_sample_is_counted_and_leaves_the_channels_to_the_next(self, first):
        # None read as one missing value once fixed the stream to one channel for good
        det = PeriodRoutedDetector()
        assert det.step(first) is None and det.n_seen == 1
        det.step([1.0, 2.0])
        assert det.n_seen == 2 and det._inner._dim == 2
        # nor does it keep a univariate stream from being asked for its period
        one = PeriodRoutedDetector()
        for v in [first, *sine(600).tolist()]:
            one.step(v)
        assert one.n_seen == 601 and one.handed_over_at is not None

    @pytest.mark.parametrize("scale", [1e-7, 2.0 ** -40, 2.0 ** 40])
    def test_the_units_of_the_data_change_nothing(self, scale):
        # a cycle of amplitude 1e-7 was once no cycle to the router: its test for a constant
        # segment was absolute for values below 1, and the stream was never handed over
        x = sine(1500)
        x[900:] = np.sin(2 * np.pi * np.arange(900, 1500) / 12) + np.random.default_rng(1).normal(0, 0.2, 600)
        base, scaled = PeriodRoutedDetector(), PeriodRoutedDetector()
        expected = [a.change_index for a in feed(base, x) if a is not None]
        got = [a.change_index for a in feed(scaled, scale * x) if a is not None]
        assert base.handed_over_at is not None and scaled.handed_over_at == base.handed_over_at
        assert got == expected and any(abs(c - 900) <= 24 for c in got), (got, expected)

    def test_values_up_to_1e150_are_taken(self):
        det = PeriodRoutedDetector()
        feed(det, 1e149 * sine(600))  # the period question squared them once, and overflowed
        assert det.handed_over_at is not None and det.n_seen == 600

    def test_a_value_beyond_1e150_is_refused_before_and_after_the_hand_over(self):
        # the window detector refuses it; the split profile would winsorise it: one rule throughout
        det = PeriodRoutedDetector()
        with pytest.raises(ValueError, match="beyond 1e\\+150"):
            det.step(1e200)
        feed(det, sine(600))
        assert det.handed_over_at is not None
        for bad in (1e200, np.array([1e200]), float("inf")):
            with pytest.raises(ValueError, match="beyond 1e\\+150|infinite"):
                det.step(bad)
        assert det.n_seen == 600

    @pytest.mark.parametrize("kw, msg", [({"window": {"seed": 1}}, "PeriodRoutedDetector itself"),
                                         ({"profile": {"false_alarm_rate": 0.1}}, "PeriodRoutedDetector itself"),
                                         ({"profile": {"min_window": 3}}, "min_window"),
                                         ({"window": [1]}, "mapping"),
                                         ({"window": {"nope": 1}}, "nope"),
                                         ({"min_acf": 1.0}, "min_acf"),
                                         ({"period_level": 0.0}, "period_level")])
    def test_bad_parameters(self, kw, msg):
        with pytest.raises((ValueError, TypeError), match=msg):
            PeriodRoutedDetector(**kw)

    @pytest.mark.parametrize("seed, error, msg", [(None, TypeError, "seed must be an integer; got None"),
                                                  (-1, ValueError, "seed must be an integer >= 0; got -1"),
                                                  (1.5, TypeError, "seed must be an integer; got 1.5"),
                                                  ("0", TypeError, "seed must be an integer")])
    def test_a_seed_is_a_non_negative_integer_and_a_bad_one_is_named(self, seed, error, msg):
        with pytest.raises(error, match=msg):
            PeriodRoutedDetector(seed=seed)

    def test_numpy_integer_seeds_are_taken(self):
        assert PeriodRoutedDetector(seed=np.int64(3)).seed == 3


class TestCheckpoint:
    @pytest.mark.parametrize("cut", [10, 500, 959, 961, 1500, 2300])
    def test_restored_detector_continues_exactly(self, cut):
        rng = np.random.default_rng(0)
        x = sine(3000, noise=0.1)
        x[700:] += 0.8
        x[2000:] = rng.normal(0, 1, 1000)
        whole = PeriodRoutedDetector(seed=0)
        expected = feed(whole, x)
        first = PeriodRoutedDetector(seed=0)
        got = feed(first, x[:cut])
        state = first.to_state()
        json.loads(state["meta"])  # JSON and arrays only
        arrays, _ = decode_bytes(encode(state, {}, "k"), "test")  # the daemon's checkpoint bytes
        again = PeriodRoutedDetector.from_state(arrays)
        assert again.kind == first.kind
        got += feed(again, x[cut:])
        assert got == expected

    @pytest.mark.parametrize("cut", [50, 2000, 4110])
    def test_a_stream_with_a_long_gap_is_restored_exactly(self, cut):
        # at 4110 the samples kept for the period question span more input indices than the ring holds
        x = sine(1000)
        x = np.r_[x[:100], np.full(4000, np.nan), x[100:]]
        whole = PeriodRoutedDetector(seed=0)
        expected = feed(whole, x)
        first = PeriodRoutedDetector(seed=0)
        got = feed(first, x[:cut])
        arrays, _ = decode_bytes(encode(first.to_state(), {}, "k"), "test")
        assert ("ring_at" in arrays) == (cut == 4110)
        again = PeriodRoutedDetector.from_state(arrays)
        got += feed(again, x[cut:])
        assert got == expected and again.handed_over_at == whole.handed_over_at == 4120
        assert same_state(again.to_state(), whole.to_state())

    def test_a_restored_stream_of_several_channels_keeps_count_of_the_changes_it_reports(self):
        # the first sample after a restore is also the one that raises the alarm: its change
        # starts the segment as in the uncut run (it was skipped, seen_change stayed -1)
        rng = np.random.default_rng(0)
        x = rng.normal(size=(1200, 3))
        x[600:, 1] += 2
        whole = PeriodRoutedDetector(seed=0)
        alarms = [t for t, a in enumerate(feed(whole, x)) if a is not None]
        cut = alarms[0]
        first = PeriodRoutedDetector(seed=0)
        feed(first, x[:cut])
        again = PeriodRoutedDetector.from_state(first.to_state())
        feed(again, x[cut:])
        assert same_state(again.to_state(), whole.to_state()) and again._seen_change > 500

    @pytest.mark.parametrize("entry, value", [
        ("n_seen", -7), ("n_seen", 1.5), ("n_seen", True), ("seg_start", -7), ("seg_start", 10**9),
        ("next_check", -1), ("next_check", 99), ("questions", -1), ("questions", 1.5), ("questions", True),
        ("seen_change", -2), ("seen_change", 10**9), ("primed_through", -7), ("primed_through", 1.5),
        ("handed_over_at", -7), ("handed_over_at", True), ("handed_over_at", 10**9), ("kind", "x"),
        ("drift", "no"), ("drift", 1), ("pending", "x"), ("pending", [1]), ("last_alarm", "x"),
        ("last_alarm", {"change_index": 1.5, "alarm_index": 3, "score": 1.0, "threshold": 1.0})])
    def test_a_damaged_checkpoint_entry_is_refused_by_name(self, entry, value):
        # a count read as int() went negative or was truncated silently, and a bad alarm failed
        # with an AttributeError that named nothing
        det = PeriodRoutedDetector(seed=0)
        feed(det, sine(300))
        state = det.to_state()
        meta = json.loads(state["meta"])
        meta[entry] = value
        with pytest.raises(ValueError, match=f"not a PeriodRoutedDetector checkpoint, or a damaged one: '{entry}'"):
            PeriodRoutedDetector.from_state({**state, "meta": json.dumps(meta)})

    def test_a_window_detectors_checkpoint_continues_as_the_routed_detectors_window_detector(self):
        # a key checkpointed by kind = "window" (the daemon's default before "auto") keeps its state
        rng = np.random.default_rng(6)
        x = np.r_[rng.normal(0, 1, 1000), rng.normal(3, 1, 500), sine(2000, seed=6)]
        whole = ChangePointDetector(seed=4)
        expected = feed(whole, x[:1500])
        first = ChangePointDetector(seed=4)
        feed(first, x[:700])
        arrays, _ = decode_bytes(encode(first.to_state(), {}, "k"), "test")
        again = PeriodRoutedDetector.from_state(arrays)
        assert again.kind == "window" and again.n_seen == 700 and again.seed == 4
        assert feed(again, x[700:1500]) == expected[700:]
        assert any(a is not None and abs(a.change_index - 1000) <= 5 for a in expected[700:])
        feed(again, x[1500:])
        # the segments asked for a period start at the restore, then at each reported change
        assert again.kind == "split_profile"

    def test_a_checkpoint_of_version_1_continues_exactly(self):
        # version 1 kept neither the question count nor period_level (every question at 5 %)
        x = sine(1500, noise=0.1)
        whole = PeriodRoutedDetector(seed=0)
        expected = feed(whole, x)
        first = PeriodRoutedDetector(seed=0)
        got = feed(first, x[:300])
        state = first.to_state()
        meta = json.loads(state["meta"])
        meta["version"] = 1
        del meta["questions"], meta["params"]["period_level"]
        again = PeriodRoutedDetector.from_state({**state, "meta": json.dumps(meta)})
        assert again.period_level is None and again.questions == 0
        assert got + feed(again, x[300:]) == expected

    def test_unknown_state_version_is_refused(self):
        state = PeriodRoutedDetector().to_state()
        meta = json.loads(state["meta"])
        meta["version"] = 99
        with pytest.raises(ValueError, match="state version"):
            PeriodRoutedDetector.from_state({**state, "meta": json.dumps(meta)})

    @pytest.mark.parametrize("version", [0, 3, None, "2", True])
    def test_a_checkpoint_of_an_unknown_version_is_refused(self, version):
        state = PeriodRoutedDetector().to_state()
        meta = json.loads(state["meta"])
        meta["version"] = version
        with pytest.raises(ValueError, match="unsupported PeriodRoutedDetector state version"):
            PeriodRoutedDetector.from_state({**state, "meta": json.dumps(meta)})

    def test_a_checkpoint_without_a_version_is_refused(self):
        state = PeriodRoutedDetector().to_state()
        meta = json.loads(state["meta"])
        del meta["version"]
        with pytest.raises(ValueError, match="unsupported PeriodRoutedDetector state: it records no version"):
            PeriodRoutedDetector.from_state({**state, "meta": json.dumps(meta)})

    @pytest.mark.parametrize("periodic, drop", [(True, "meta"), (False, "ring"), (True, "inner.window"),
                                                (False, "inner.meta"), (False, "inner.shist")])
    def test_a_truncated_checkpoint_says_which_key_it_lacks(self, periodic, drop):
        det = PeriodRoutedDetector(seed=0)
        feed(det, sine(200) if periodic else np.random.default_rng(0).normal(size=200))
        assert det.kind == ("split_profile" if periodic else "window")  # whose state is under "inner."
        state = {k: v for k, v in det.to_state().items() if k != drop}
        with pytest.raises(ValueError, match=f"not a PeriodRoutedDetector checkpoint, or a truncated one: "
                                             f"missing key '{drop}'"):
            PeriodRoutedDetector.from_state(state)

    def test_a_checkpoint_whose_meta_lacks_an_entry_says_so(self):
        state = PeriodRoutedDetector().to_state()
        meta = json.loads(state["meta"])
        del meta["n_seen"]
        with pytest.raises(ValueError, match="missing key 'n_seen' in its meta"):
            PeriodRoutedDetector.from_state({**state, "meta": json.dumps(meta)})

    @pytest.mark.parametrize("state", [None, {"meta": "not json"}])
    def test_what_is_not_a_checkpoint_is_refused_as_such(self, state):
        with pytest.raises(ValueError, match="not a PeriodRoutedDetector checkpoint"):
            PeriodRoutedDetector.from_state(state)


class TestRiverDriftDetector:
    """A river drift detector: ``clone()`` and river's adaptive trees, which clone it per node."""

    def test_it_is_a_river_drift_detector_and_clone_is_fresh_with_equal_parameters(self):
        from river import base

        kw = dict(false_alarm_rate=1e-3, window={"n": 40}, profile={"min_window": 20, "max_window": 400},
                  min_acf=0.2, period_level=0.05, with_history=True, seed=4)
        det = PeriodRoutedDetector(**kw)
        assert isinstance(det, base.DriftDetector)
        for v in sine(300).tolist():
            det.update(v)
        assert det.kind == "split_profile"
        twin = det.clone()
        assert type(twin) is PeriodRoutedDetector and twin is not det
        assert twin._get_params() == det._get_params() == kw
        assert twin.window is not det.window and twin.profile is not det.profile  # copies, not shared
        # fresh: on the window detector, nothing seen
        assert (twin.kind, twin.n_seen, twin.questions, twin.drift_detected, twin.last_alarm) == (
            "window", 0, 0, False, None)
        assert twin.to_state()["meta"] == PeriodRoutedDetector(**kw).to_state()["meta"]
        assert PeriodRoutedDetector().clone()._get_params() == PeriodRoutedDetector()._get_params()

    def test_a_hoeffding_adaptive_tree_takes_it_as_its_drift_detector(self):
        from river_offline import learn_in_adaptive_tree

        model = learn_in_adaptive_tree(PeriodRoutedDetector(seed=0))  # the concept changes halfway
        assert model.predict_one({"a": 1.0, "b": 1.0}) in (True, False)


class TestBadSamplesWhoeverHoldsTheStream:
    BAD = [({"a": 1.0}, "not a dict"), (object(), "number or a 1-d array"), ("x", "number or a 1-d array"),
           ([1.0, "x"], "number or a 1-d array"), (10 ** 400, "beyond 1e\\+150")]

    @staticmethod
    def refusals(det):
        out = []
        for bad, msg in TestBadSamplesWhoeverHoldsTheStream.BAD:
            n = det.n_seen
            with pytest.raises(ValueError, match=msg) as info:
                det.step(bad)
            assert det.n_seen == n  # the sample was not taken
            out.append(str(info.value).split(" at 0x")[0])
        return out

    def test_the_same_value_error_before_and_after_the_hand_over_and_the_sample_is_not_taken(self):
        x = sine(600)
        det, clean = PeriodRoutedDetector(seed=0), PeriodRoutedDetector(seed=0)
        before = self.refusals(det)
        got = feed(det, x[:200])
        assert det.kind == "split_profile"
        after = self.refusals(det)
        assert after == before
        got += feed(det, x[200:])
        # refused samples changed nothing: the stream is the one without them
        assert got == feed(clean, x) and det.to_state()["meta"] == clean.to_state()["meta"]

    def test_several_channels_refuse_alike(self):
        det = PeriodRoutedDetector(seed=0)
        det.step([1.0, 2.0])
        assert det.kind == "window"
        with pytest.raises(ValueError, match="not a dict"):
            det.step({"a": 1.0, "b": 2.0})
        with pytest.raises(ValueError, match="a sample is a number or a 1-d array"):
            det.step(object())
        assert det.n_seen == 1


class TestParameterTypes:
    @pytest.mark.parametrize("kw, msg", [
        ({"false_alarm_rate": "x"}, "false_alarm_rate must be in \\(0, 1\\), e.g. 1e-4; got 'x'"),
        ({"false_alarm_rate": math.nan}, "false_alarm_rate must be in \\(0, 1\\)"),
        ({"false_alarm_rate": True}, "false_alarm_rate must be in \\(0, 1\\)"),
        ({"false_alarm_rate": 1.5}, "false_alarm_rate must be in \\(0, 1\\)"),
        ({"min_acf": "0.5"}, "min_acf must be in \\[0, 1\\), e.g. 0.5; got '0.5'"),
        ({"min_acf": math.nan}, "min_acf must be in \\[0, 1\\)"),
        ({"min_acf": None}, "min_acf must be in \\[0, 1\\)"),
        ({"period_level": "0.05"}, "period_level must be None or in \\(0, 1\\), e.g. 0.05; got '0.05'"),
        ({"period_level": math.inf}, "period_level must be None or in \\(0, 1\\)"),
        ({"period_level": False}, "period_level must be None or in \\(0, 1\\)"),
        ({"with_history": "false"}, "with_history must be True or False; got 'false'"),
        ({"with_history": 1}, "with_history must be True or False"),
        ({"with_history": None}, "with_history must be True or False"),
        ({"profile": {"min_window": 30.9}}, "min_window must be an integer >= 15; got 30.9"),
        ({"profile": {"cycle_permutation": "false"}}, "cycle_permutation must be True or False"),
    ])
    def test_a_parameter_of_the_wrong_type_is_a_value_error_that_names_it(self, kw, msg):
        with pytest.raises(ValueError, match=msg):
            PeriodRoutedDetector(**kw)

    def test_numpy_numbers_and_booleans_are_taken(self):
        det = PeriodRoutedDetector(false_alarm_rate=np.float64(1e-3), min_acf=np.float32(0.5), period_level=np.float64(0.05),
                                   with_history=np.bool_(True), seed=np.int64(2))
        assert (det.false_alarm_rate, det.min_acf, det.period_level, det.with_history) == (1e-3, 0.5, 0.05, True)
        assert type(det.min_acf) is float and type(det.with_history) is bool

    def test_numpy_numbers_in_the_window_and_profile_options_reach_a_checkpoint(self):
        # taken by the constructor, they failed at the first checkpoint (not JSON serializable)
        det = PeriodRoutedDetector(window={"n": np.int64(50)}, profile={"min_window": np.int64(30)}, seed=0)
        for v in np.random.default_rng(0).normal(size=300):
            det.update(float(v))
        arrays, _ = decode_bytes(encode(det.to_state(), {}, "k"), "test")
        back = PeriodRoutedDetector.from_state(arrays)
        assert back.window_options == {"n": 50} and back.profile_options == {"min_window": 30}
        assert type(back.window_options["n"]) is int

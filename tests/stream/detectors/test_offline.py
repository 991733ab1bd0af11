"""Offline detection (ratiowatch.stream.detectors.offline): binary segmentation of the split profile
with the AR-surrogate stop test."""

import numpy as np
import pytest

from ratiowatch.stream.detectors.offline import DEFAULTS, describe_config, detect, replay

from channel_series import five_cycles


def _wave(t, period, shape):
    phase = 2 * np.pi * t / period
    if shape == "sine":
        return np.sin(phase)
    if shape == "square":
        return np.sign(np.sin(phase))
    return 2 * ((t / period) % 1.0) - 1.0  # sawtooth


def periodic(shapes, seg_len=2000, period=50, noise=0.1, seed=0):
    """Concatenated segments of the same period and different shapes (TSSB-like)."""
    rng = np.random.default_rng(seed)
    t = np.arange(seg_len * len(shapes))
    x = np.concatenate([_wave(t[i * seg_len:(i + 1) * seg_len], period, s) for i, s in enumerate(shapes)])
    return x + rng.normal(0, noise, x.size)


def test_shape_changes_at_a_constant_period_are_found_at_the_split():
    """Sine -> square -> sawtooth, period 50, noise sd 0.3, seeds 0-2: both changes within one
    period, nothing else; the profile is the larger of a quarter-cycle and a whole-cycle one."""
    for seed in range(3):
        rep = replay(periodic(["sine", "square", "sawtooth"], seg_len=2000, noise=0.3, seed=seed))
        period = rep.config["period"]
        assert abs(period - 50) <= 1 and rep.config["widths"] == [round(period / 4), period]
        assert len(rep.change_points) == 2, rep.change_points
        assert all(abs(c - cp) <= 50 for c, cp in zip(rep.change_points, (2000, 4000))), rep.change_points


@pytest.mark.parametrize("period", [12, 24, 50])
def test_a_level_shift_inside_a_seasonal_cycle_is_found(period):
    """A sine with jittered cycles (5 % of a period, noise sd 0.2) moving up by its amplitude at
    900 of 1,500 samples, seeds 0-1: one change point, within a quarter cycle. The surrogates' AR
    model, fitted to the whole segment (dozens of cycles), holds the cycle closely enough that the
    step stands out (the streaming detector's, fitted to about two cycles, does not)."""
    from ratiowatch.stream.evaluate.synthetic import _jittered_phase

    for seed in range(2):
        rng = np.random.default_rng(seed)
        y = np.sin(2 * np.pi * _jittered_phase(rng, 1500, float(period))) + rng.normal(0, 0.2, 1500)
        y[900:] += 1.0
        cps = detect(y)
        assert len(cps) == 1 and abs(cps[0] - 900) <= max(5, period // 4), (seed, cps)


def test_a_seasonal_level_that_moves_up_and_back_is_found():
    """The change suite's ``mean_seasonal`` (a jittered sine of period 24, noise sd 0.1, level up
    by its amplitude at 500 and back at 1,000), seeds 0-9: at least 8 of the 20 changes within two
    windows (10 when this was written; 0 with the AR null alone, whose surrogates wander in
    amplitude), and no other change point. The cycles of the segment in random orders find it
    (:mod:`ratiowatch.stream.calibration.cycle_permutation`)."""
    from ratiowatch.stream.evaluate.synthetic import change_series

    found = found_ar = 0
    for seed in range(10):
        case = change_series("mean_seasonal", seed)
        cps = detect(case.x)
        assert all(min(abs(c - t) for t in case.change_points) <= 2 * case.window for c in cps), (seed, cps)
        found += sum(any(abs(c - t) <= 2 * case.window for c in cps) for t in case.change_points)
        found_ar += len(detect(case.x, cycle_permutation=False))
    assert found >= 8 and found_ar == 0, (found, found_ar)


def test_series_without_a_period_do_not_depend_on_the_cycle_null():
    """Its draws are made only where it applies, so the AR test's surrogates are the same."""
    rng = np.random.default_rng(2)
    for x in (np.r_[rng.normal(0, 1, 300), rng.normal(2, 1, 300)], rng.normal(size=(400, 2)).cumsum(axis=0)):
        assert detect(x) == detect(x, cycle_permutation=False)


@pytest.mark.parametrize("seed", range(3))
def test_a_stationary_periodic_series_gets_no_change_point(seed):
    assert detect(periodic(["sine"] * 4, seg_len=2000, seed=seed)) == []


@pytest.mark.parametrize("kind", ["mean", "variance", pytest.param("trend_then_flat", marks=pytest.mark.xfail(
    strict=True, reason="known limitation: a kink in a noisy trend looks like a random walk to the AR(<=5) "
                        "surrogate fitted around the least-squares line, whose maxima are then far larger"))])
def test_changes_in_short_series_are_located(kind):
    rng = np.random.default_rng(4)
    if kind == "mean":
        y = np.r_[rng.normal(0, 1, 60), rng.normal(2.5, 1, 60)]
    elif kind == "variance":
        y = np.r_[rng.normal(0, 1, 60), rng.normal(0, 4, 60)]
    else:
        y = np.r_[np.linspace(0, 6, 60), np.full(60, 6.0)] + rng.normal(0, 0.5, 120)
    cps = detect(y)
    assert len(cps) == 1 and abs(cps[0] - 60) <= 5, cps


@pytest.mark.parametrize("t_len", [300, 1500, 5000])
def test_the_cleaner_a_shift_the_surer_it_is_found(t_len):
    """A step of 1 at 0.6 T with noise sd 0.3, 0.1, 0.03, 0.01 and 0: found within 3 samples every
    time. Before the surrogates' model was fitted without the segment's significant shifts, steps
    with noise at or below 0.03 were never found (the fitted line took the step's slope and the AR
    model turned persistent; docs/experiments.md)."""
    k = int(0.6 * t_len)
    for noise in (0.3, 0.1, 0.03, 0.01, 0.0):
        y = np.r_[np.zeros(k), np.ones(t_len - k)] + noise * np.random.default_rng(1).normal(size=t_len)
        cps = detect(y)
        assert len(cps) == 1 and abs(cps[0] - k) <= 3, (noise, cps)


@pytest.mark.parametrize("seed", [0, 1])
def test_clean_steps_on_a_staircase_or_a_trend_are_found_and_a_ramp_is_not(seed):
    """Noise of sd 0.05: every step of a four-step staircase, a step on a rising line, and nothing
    on the line alone (no step was found before the null was fitted without significant level
    shifts). Random walks keep their rate: the null suite, and the split test's own tests."""
    rng = np.random.default_rng(seed)
    t = np.arange(1000)
    stairs = detect(np.floor(t / 200) + 0.05 * rng.normal(size=1000))
    assert all(any(abs(c - cp) <= 3 for c in stairs) for cp in (200, 400, 600, 800)), stairs
    assert len(stairs) <= 5, stairs
    on_trend = detect(0.002 * t + (t >= 600) + 0.05 * rng.normal(size=1000))
    assert len(on_trend) == 1 and abs(on_trend[0] - 600) <= 3, on_trend
    assert detect(0.002 * t + 0.05 * rng.normal(size=1000)) == []


@pytest.mark.parametrize("t_len", [15, 30, 60, 200])
def test_one_event_among_zeros_is_no_change(t_len):
    # at the very end, the line fitted to the zeros tilts towards the event and the null may be
    # fitted without a "shift" there; the test must still accept
    for at in (t_len // 2, t_len - 1):
        y = np.zeros(t_len)
        y[at] = 3.0
        assert detect(y) == [], at


def test_a_constant_series_with_one_jump():
    y = np.r_[np.full(700, 12.0), np.full(500, 13.0)]  # e.g. a configuration value or a replica count
    assert detect(y) in ([698], [699], [700], [701], [702])
    assert detect(np.full(1200, 12.0)) == []


def test_later_tests_spend_the_level():
    """0 -> 2 -> 0 mean shifts (500 samples each): both found with and without spending; spending
    only removes change points of the later tests."""
    rng = np.random.default_rng(11)
    y = np.concatenate([rng.normal(2.0 * (i % 2), 1, 500) for i in range(3)])
    strict, loose = detect(y), detect(y, spending=False)
    for cp in (500, 1000):
        assert any(abs(c - cp) <= 5 for c in strict), strict
    assert set(strict) <= set(loose)


def test_alternating_mean_shifts_are_found():
    rng = np.random.default_rng(11)
    y = np.concatenate([rng.normal(3.0 * (i % 2), 1, 300) for i in range(4)])
    cps = detect(y)
    assert all(any(abs(c - cp) <= 5 for c in cps) for cp in (300, 600, 900)), cps


@pytest.mark.xfail(strict=True, reason="a known miss by default: the null fitted across a smooth series' step wanders as far as "
                                        "the step (docs/experiments.md, configuration X)")
@pytest.mark.parametrize("seed", [1, 2, 4])
def test_level_steps_in_a_smooth_series_are_found(seed):
    """The change suite's ``mean_smooth`` (AR(1) at 0.9, a step of 4.4 marginal sd up at 500 and
    down at 1,000): found 34 of 80 times, never at these seeds. The first test, over the whole
    series, sees either only one step as a level shift (the other one's shift and outlier statistics
    are nearly equal under the persistent fit), or a line fitted beside both whose chance slope
    makes the surrogates ramp."""
    from ratiowatch.stream.evaluate.synthetic import change_series

    case = change_series("mean_smooth", seed=seed)
    cps = detect(case.x)
    assert all(any(abs(c - cp) <= 2 * case.window for c in cps) for cp in case.change_points), cps


@pytest.mark.parametrize("seed", [1, 2, 4])
def test_with_smooth_steps_level_steps_in_a_smooth_series_are_found(seed):
    """The same series with the opt-in ``smooth_steps=True``: both steps, each at its own row (the
    change suite: 69 of 80 found, 34 without)."""
    from ratiowatch.stream.evaluate.synthetic import change_series

    case = change_series("mean_smooth", seed=seed)
    assert detect(case.x, smooth_steps=True) == case.change_points


@pytest.mark.xfail(strict=True, reason="a known miss by default: a line fitted beside a staircase's first steps takes its "
                                        "drift and masks the others (docs/experiments.md, configuration X3)")
@pytest.mark.parametrize("seed", [1, 2])
def test_a_staircase_is_found(seed):
    """The change suite's ``mean_staircase`` (nine steps of 2 sd, 150 samples apart, each up or
    down): found 131 of 180 times by default; at these seeds 6 and 3 of the 9."""
    from ratiowatch.stream.evaluate.synthetic import change_series

    case = change_series("mean_staircase", seed=seed)
    cps = detect(case.x)
    assert all(any(abs(c - cp) <= 2 * case.window for c in cps) for cp in case.change_points), cps


@pytest.mark.parametrize("seed", [1, 3, 4])
def test_with_smooth_steps_a_staircase_is_found(seed):
    """The same series with the opt-in ``smooth_steps=True``, whose search drops the line once
    steps explain the drift: every step, and nothing else (the change suite: 169 of 180)."""
    from ratiowatch.stream.evaluate.synthetic import change_series

    case = change_series("mean_staircase", seed=seed)
    cps = detect(case.x, smooth_steps=True)
    assert len(cps) == len(case.change_points), cps
    assert all(any(abs(c - cp) <= 2 * case.window for c in cps) for cp in case.change_points), cps


def test_alarms_report_the_split_and_the_end_of_the_series():
    rng = np.random.default_rng(2)
    y = np.r_[rng.normal(0, 1, 300), rng.normal(0, 3, 300)]
    rep = replay(y)
    assert rep.change_points == [a.change_index for a in rep.alarms]
    for a in rep.alarms:
        assert a.alarm_index == y.size - 1  # offline: known once the whole series is seen
        assert a.score > a.threshold
    assert rep.scores.shape == rep.thresholds.shape == (y.size,)
    assert np.nanargmax(rep.scores) in range(280, 320)


def test_results_are_deterministic_given_the_seed_and_do_not_depend_on_units():
    rng = np.random.default_rng(3)
    y = np.r_[rng.normal(0, 1, 200), rng.normal(1.5, 1, 200)]
    assert detect(y) == detect(y) == detect(1e3 * y - 7.0)
    assert replay(y, seed=5).change_points == replay(y, seed=5).change_points


def test_multivariate_correlation_change_is_found():
    rng = np.random.default_rng(6)
    z = rng.normal(size=(600, 2))
    x = z.copy()
    x[300:, 1] = 0.95 * z[300:, 0] + np.sqrt(1 - 0.95**2) * z[300:, 1]
    cps = detect(x)
    assert any(abs(c - 300) <= 25 for c in cps), cps


@pytest.mark.parametrize("seed", range(3))
def test_independent_cycles_in_several_channels_get_no_change_point(seed):
    # the phases between the channels' cycles wander; scored jointly, every such series of 600
    # samples or more got change points (2,000 samples: 6-8 of them)
    assert detect(five_cycles(2000, seed)) == []
    assert replay(five_cycles(2000, seed)).config["period"] > 0


@pytest.mark.parametrize("change", ["level", "shape"])
def test_a_change_of_one_channel_among_several_cycles_is_found(change):
    for seed in range(2):
        cps = detect(five_cycles(2000, seed, change))
        assert len(cps) == 1 and abs(cps[0] - 1000) <= 10, cps


def test_a_row_with_a_missing_value_beside_an_observed_one_is_left_out():
    # as the daemon leaves out a record with a missing value; carried forward, a gap in one channel
    # was a flat run that got change points at its ends
    rng = np.random.default_rng(7)
    y = np.c_[np.r_[rng.normal(0, 1, 300), rng.normal(0, 4, 300)], rng.normal(size=600)]
    gappy = y.copy()
    missing = [0, 1, 50, 51, 400]
    gappy[missing, 0] = np.nan  # the other channel is observed in these rows
    observed = np.setdiff1d(np.arange(600), missing)
    assert detect(gappy) == [int(observed[c]) for c in detect(y[observed])] != []


def test_rows_missing_in_every_channel_are_left_out():
    """A gap carried forward is a run of one repeated value, unlike anything in the series: a gap
    of 100 rows in N(0, 1) got a change point at its start, and 50 missing rows at the start one at
    their end. Left out, the series is the observed rows, and a change across a gap is placed at
    the first row after it."""
    rng = np.random.default_rng(1)
    y = np.r_[rng.normal(0, 1, 300), rng.normal(2, 1, 200)]
    gappy = np.r_[y[:200], np.full(100, np.nan), y[200:]]  # the change at 300 of y is now at 400
    rows = np.flatnonzero(~np.isnan(gappy))
    assert detect(gappy) == [int(rows[c]) for c in detect(y)] == [400]
    assert detect(list(np.where(np.isnan(gappy), None, gappy).tolist())) == [400]
    quiet = rng.normal(size=400)
    assert detect(np.r_[quiet[:200], np.full(100, np.nan), quiet[200:]]) == detect(quiet) == []
    assert detect(np.r_[np.full(50, np.nan), quiet]) == [] and detect(np.r_[quiet, np.full(50, np.nan)]) == []
    rep = replay(gappy)
    assert rep.scores.shape == rep.thresholds.shape == (600,)
    assert np.isnan(rep.scores[200:300]).all() and np.isfinite(rep.scores[300:600]).any()
    assert rep.alarms[0].change_index == 400 and rep.alarms[0].alarm_index == 599


def two_harmonics(n: int, period: int, seed: int) -> np.ndarray:
    t = np.arange(n)
    noise = np.random.default_rng(seed).normal(0, 0.2, n)
    return np.sin(2 * np.pi * t / period) + 0.3 * np.sin(4 * np.pi * t / period + 1) + noise


@pytest.mark.parametrize("seed", [0, 2])
def test_a_gap_in_a_periodic_series_keeps_the_cycle_in_phase(seed):
    # left out whole, a gap of 37 rows in a cycle of 24 jumped the phase by 13: a change of shape
    # at the gap (6 of 8 such series)
    x = two_harmonics(2000, 24, seed)
    gappy = x.copy()
    gappy[1250:1287] = np.nan
    assert detect(x) == detect(gappy) == []


def test_a_change_across_a_gap_in_a_periodic_series_is_placed_at_the_gap_end():
    # a change on a row given back to keep the phase is a change across the gap
    t = np.arange(2000)
    x = two_harmonics(2000, 24, 1)
    x[1287:] = np.sign(np.sin(2 * np.pi * t[1287:] / 24)) + np.random.default_rng(1).normal(0, 0.2, 713)
    x[1250:1287] = np.nan
    rep = replay(x)
    assert len(rep.change_points) == 1 and 1287 <= rep.change_points[0] <= 1290  # never inside the gap
    assert np.isnan(rep.scores[1250:1287]).all() and np.isnan(rep.thresholds[1250:1287]).all()


@pytest.mark.parametrize("t_len", [1, 2, 5, 15, 16, 21, 40, 100])
def test_every_length_gets_an_answer(t_len):
    rng = np.random.default_rng(t_len)
    y = np.r_[rng.normal(0, 1, t_len // 2), rng.normal(8, 1, t_len - t_len // 2)]
    cps = detect(y)
    assert isinstance(cps, list) and all(1 <= c < t_len for c in cps)


def test_ulsif_and_explicit_width():
    rng = np.random.default_rng(8)
    y = np.r_[rng.normal(0, 1, 300), rng.normal(0, 4, 300)]
    # uLSIF (alpha = 0) scores the direction whose denominator is the larger side; in both
    # directions its profile peaked near the margins (here one change point, at 589)
    cps = detect(y, method="ulsif")
    assert any(abs(c - 300) <= 10 for c in cps) and all(1 <= c < y.size for c in cps)
    rep = replay(y, width=5)
    assert rep.config["width"] == 5 and any(abs(c - 300) <= 10 for c in rep.change_points)


def test_bad_arguments_raise():
    with pytest.raises(TypeError, match="unknown"):
        detect(np.zeros(50), n=20)
    with pytest.raises(ValueError):
        detect(np.zeros(50), false_alarm_rate=0.0)
    # the exact test draws 2 / rate surrogates per split: 1e-4 (the streaming detectors' rate per
    # sample) took minutes on 600 rows, 1e-12 never finished
    with pytest.raises(ValueError, match=r"in \[0.001, 1\).*not a rate per sample"):
        detect(np.zeros(50), false_alarm_rate=1e-4)
    with pytest.raises(ValueError):
        detect(np.zeros(50), method="kliep")
    with pytest.raises(ValueError):
        detect(np.r_[1.0, np.inf, 2.0])
    with pytest.raises(ValueError):
        detect(np.zeros((3, 2, 2)))
    with pytest.raises(ValueError, match="widths must be one of"):
        detect(np.zeros(50), widths="all")
    for bad, name in (({"grid": 0}, "grid"), ({"n_centres": 0}, "n_centres"), ({"alpha": 1.0}, "alpha"),
                      ({"lam": 0.0}, "lam"), ({"sigma_factor": -0.5}, "sigma_factor"), ({"max_order": -1}, "max_order")):
        with pytest.raises(ValueError, match=name):
            detect(np.zeros(50), **bad)


@pytest.mark.parametrize("seed", [None, -1, 2.5, True, "1"])
def test_the_seed_must_be_a_non_negative_integer(seed):
    # None drew the surrogates from the OS's entropy (results differed run to run), the others
    # failed inside numpy or were read as 1
    with pytest.raises((TypeError, ValueError), match="seed must be an integer"):
        detect(np.zeros(50), seed=seed)


@pytest.mark.parametrize("name", ["spending", "cycle_permutation", "smooth_steps"])
@pytest.mark.parametrize("value", ["false", "no", 1, None])
def test_boolean_options_take_only_true_or_false(name, value):
    # read by truthiness, smooth_steps="false" turned smooth steps on
    with pytest.raises(TypeError, match=f"{name} must be True or False"):
        detect(np.zeros(50), **{name: value})


@pytest.mark.parametrize("width", [2.5, True, "7", float("nan"), float("inf"), 0, -3])
def test_width_must_be_an_integer_of_at_least_one_or_none(width):
    # 2.5 was read as 2, True as 1, "7" as 7; nan and inf failed in a bare int()
    with pytest.raises((TypeError, ValueError), match=r"width must be an integer.*or None"):
        detect(np.zeros(50), width=width)


def test_false_alarm_rate_must_be_a_number():
    with pytest.raises(TypeError, match="false_alarm_rate must be a real number"):
        detect(np.zeros(50), false_alarm_rate="0.05")


def test_ulsif_refuses_an_alpha_other_than_zero():
    # uLSIF is RuLSIF with alpha = 0: an explicit alpha was silently replaced by 0
    with pytest.raises(ValueError, match="method='ulsif' is RuLSIF with alpha = 0"):
        detect(np.zeros(50), method="ulsif", alpha=0.5)
    assert replay(np.zeros(50), method="ulsif", alpha=0.0).config["alpha"] == 0.0


def test_a_width_that_leaves_no_split_is_refused_and_says_what_fits():
    # on 400 samples a width of 65 or more leaves fewer than the subsequences a split needs on a
    # side: the series silently got no change point, even at a step of 10 sd
    rng = np.random.default_rng(0)
    y = np.r_[rng.normal(0, 1, 200), rng.normal(10, 1, 200)]
    for width in (65, 80, 1000):
        with pytest.raises(ValueError, match=rf"width={width} leaves no split to score in 400 rows.*"
                                             r"at most about 40 \(T // 10\), or None"):
            detect(y, width=width)
    # the rows counted are those analysed: with every other value of a second channel missing, 200
    gappy = np.c_[y, np.where(np.arange(400) % 2 == 0, np.nan, y)]
    with pytest.raises(ValueError, match=r"in the 200 rows \(of 400\) with a value in every channel.*about 20"):
        detect(gappy, width=35)
    with pytest.raises(ValueError, match="8 rows are too few for a split at any width"):
        detect(np.arange(8.0), width=1)
    assert replay(y, width=64).change_points == [200]  # the widest that leaves a split


def test_an_array_without_channels_is_refused():
    # it failed deep inside the surrogates
    with pytest.raises(ValueError, match=r"series has no channel \(shape \(100, 0\)\)"):
        detect(np.zeros((100, 0)))


def test_a_row_vector_or_transposed_array_is_refused_but_a_wide_series_is_not():
    from ratiowatch.core.split_profile import SplitProfile
    from ratiowatch.stream.detectors.offline import MIN_SPLIT_ROWS

    rng = np.random.default_rng(0)
    y = np.r_[rng.normal(0, 1, 200), rng.normal(4, 1, 200)]
    assert detect(y) == [200]
    # read as one sample of 400 channels (or five), they silently got no change point
    with pytest.raises(ValueError, match=r"1 row\(s\) of 400 channels.*series\.T.*series\.ravel\(\)"):
        detect(np.atleast_2d(y))
    with pytest.raises(ValueError, match=r"5 row\(s\) of 400 channels, fewer rows than any split needs.*series\.T"):
        detect(np.tile(y, (5, 1)))
    # replay reads the rows of a table (ratiowatch detect), whose samples they are however few
    assert replay(np.tile(y[:12], (5, 1))).change_points == []
    # no split at any width below that many rows, so nothing that had an answer is refused
    assert MIN_SPLIT_ROWS == SplitProfile(width=1).min_length()
    # fewer rows than channels but enough for a split: a wide series like any other
    wide = np.r_[rng.normal(0, 1, (20, 60)), rng.normal(3, 1, (20, 60))]
    assert detect(wide) == [20]
    assert detect(rng.normal(size=(10, 10))) == [] and detect(np.zeros((1, 5))) == []


def test_each_width_choice_of_a_periodic_series_is_honoured():
    x = periodic(["sine", "square"], seg_len=1000, noise=0.3, seed=1)
    got = {w: replay(x, widths=w).config["widths"] for w in ("both", "quarter", "period")}
    p = replay(x).config["period"]
    assert got == {"both": [round(p / 4), p], "quarter": [round(p / 4)], "period": [p]}
    assert replay(x, width=7).config["widths"] == [7]  # an explicit width is the only one


def test_config_is_described():
    cfg = describe_config()
    assert cfg["false_alarm_rate"] == DEFAULTS["false_alarm_rate"] == 0.05
    assert "width_rule" in cfg and "stop" in cfg
    assert cfg["smooth_steps"] is False and describe_config({"smooth_steps": True})["smooth_steps"] is True


def test_an_error_code_of_9_9e37_does_not_hide_the_changes():
    # centred by a mean of about 9.9e37 / T, every ordinary reading rounded to one number and none
    # of the three shifts was found; the value is winsorised at 1e8 robust sd first
    rng = np.random.default_rng(0)
    y = rng.normal(size=4000)
    y[300:] += 4.0
    y[1500:] += 4.0
    y[2500:] -= 8.0
    clean = detect(y)
    y[200] = 9.9e37
    assert [abs(a - b) <= 3 for a, b in zip(detect(y), clean)] == [True] * 3

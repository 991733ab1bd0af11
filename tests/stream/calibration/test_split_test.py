"""Stop test of the split profile (ratiowatch.stream.calibration.split_test)."""

import math

import numpy as np
import pytest

from ratiowatch.core.split_profile import SplitProfile
from ratiowatch.stream.calibration.split_test import (GROSS_LEVEL, _dynamic_t, _step_design,
                                                      _white_noise_segmentation, ar_surrogates, clip_gross,
                                                      intervention_t, max_split_test, n_surrogates, null_fit,
                                                      remove_level_shifts, shift_gate, slope_standard_error)
from ratiowatch.stream.calibration.surrogate import fit_ar_channels

import naive


def _ar1(t_len, phi, seed):
    rng = np.random.default_rng(seed)
    e = rng.normal(size=t_len)
    x = np.zeros(t_len)
    x[0] = e[0] / np.sqrt(1 - phi**2)
    for t in range(1, t_len):
        x[t] = phi * x[t - 1] + e[t]
    return x


def test_surrogates_keep_trend_marginal_and_serial_dependence():
    rng = np.random.default_rng(0)
    x = (_ar1(3000, 0.8, 1) + 0.002 * np.arange(3000))[:, None]
    sims = list(ar_surrogates(x, rng, 20))
    assert all(s.shape == x.shape for s in sims)
    slope = [np.polyfit(np.arange(3000), s[:, 0], 1)[0] for s in sims]
    assert np.allclose(slope, slope[0], atol=0.002)  # the fitted line is added back
    lag1 = [np.corrcoef(s[1:, 0], s[:-1, 0])[0, 1] for s in sims]
    assert abs(np.mean(lag1) - np.corrcoef(x[1:, 0], x[:-1, 0])[0, 1]) < 0.02
    ints = np.random.default_rng(2).poisson(2.0, size=(500, 1)).astype(float)
    s = next(ar_surrogates(ints, rng, 1))
    frac = (s - np.floor(s))[:, 0]
    assert np.unique(np.round(frac, 9)).size <= ints.size  # still on a lattice shifted by the line only


def test_multichannel_surrogates_keep_the_contemporaneous_correlation():
    rng = np.random.default_rng(3)
    z = rng.normal(size=(4000, 1))
    x = np.c_[z + 0.3 * rng.normal(size=(4000, 1)), z + 0.3 * rng.normal(size=(4000, 1))]
    s = next(ar_surrogates(x, rng, 1))
    assert np.corrcoef(s.T)[0, 1] > 0.8


def test_number_of_surrogates_follows_the_level():
    assert n_surrogates(0.05) == 39
    assert n_surrogates(0.01) == 199
    with pytest.raises(ValueError):
        n_surrogates(0.0)


def test_a_clear_change_is_rejected_and_noise_stops_early():
    prof = SplitProfile(width=3)
    rng = np.random.default_rng(0)
    x = np.r_[_ar1(300, 0.5, 1), _ar1(300, 0.5, 2) + 3.0]
    test = max_split_test(x, prof, prof.best(x)[0], 0.05, rng)
    assert test.reject and test.null.size == 39 and test.p_value <= 0.05
    y = _ar1(600, 0.5, 3)
    test = max_split_test(y, prof, prof.best(y)[0], 0.05, rng)
    assert not test.reject and test.null.size < 39


def test_a_nan_statistic_is_refused_not_reported_as_a_change():
    """No null maximum reaches NaN (every comparison with it is False): tested, it was rejected
    with p = 1 / 40, a change point made of a NaN."""
    from ratiowatch.stream.calibration.split_test import monte_carlo_test

    x = np.random.default_rng(0).normal(size=200)
    with pytest.raises(ValueError, match="NaN"):
        max_split_test(x, SplitProfile(width=3), float("nan"), 0.05, np.random.default_rng(1))
    with pytest.raises(ValueError, match="NaN"):
        monte_carlo_test(iter(np.zeros(39)), float("nan"), 0.05, 39)


@pytest.mark.parametrize("count", [0, -3])
def test_a_count_below_one_is_refused(count):
    """count = -3 gave the p-value (1 + 0) / (-3 + 1) = -0.5."""
    from ratiowatch.stream.calibration.split_test import monte_carlo_test

    x = np.random.default_rng(0).normal(size=200)
    prof = SplitProfile(width=3)
    with pytest.raises(ValueError, match="count"):
        max_split_test(x, prof, prof.best(x)[0], 0.05, np.random.default_rng(1), count=count)
    with pytest.raises(ValueError, match="count"):
        monte_carlo_test(iter([]), 1.0, 0.05, count)


@pytest.mark.parametrize("level", [0.0, 1.0, 1.5, -0.05, float("nan")])
def test_a_level_outside_zero_one_is_refused_with_a_count_as_without(level):
    """As :func:`n_surrogates` refuses it when no count is given; with one, level 1.5 rejected a
    change-free segment and NaN failed with numpy's "cannot convert float NaN to integer"."""
    from ratiowatch.stream.calibration.split_test import monte_carlo_test

    x = np.random.default_rng(0).normal(size=200)
    prof = SplitProfile(width=3)
    for count in (None, 10):
        with pytest.raises(ValueError, match=r"level must be in \(0, 1\)"):
            max_split_test(x, prof, prof.best(x)[0], level, np.random.default_rng(1), count=count)
    with pytest.raises(ValueError, match=r"level must be in \(0, 1\)"):
        monte_carlo_test(iter(np.zeros(10)), 1.0, level, 10)


def test_an_infinite_statistic_is_still_ordered_by_the_test():
    """+inf is reached by no null maximum (every draw made, rejected); -inf by every one."""
    from ratiowatch.stream.calibration.split_test import monte_carlo_test

    above = monte_carlo_test(iter(np.arange(9.0)), math.inf, 0.2, 9)
    assert above.reject and above.null.size == 9 and above.p_value == 0.1
    below = monte_carlo_test(iter(np.arange(9.0)), -math.inf, 0.2, 9)
    assert not below.reject and below.null.size == 2


def test_level_on_change_free_ar1_series():
    """60 AR(1) series (phi 0, 0.5, 0.9; T = 200; seeds 0-19): rejections at level 0.05
    (measured: 0 of 60)."""
    prof = SplitProfile(width=3)
    rejected = 0
    for phi in (0.0, 0.5, 0.9):
        for seed in range(20):
            x = _ar1(200, phi, 100 + seed)
            rejected += max_split_test(x, prof, prof.best(x)[0], 0.05, np.random.default_rng(seed)).reject
    assert rejected <= 6  # 10 %: binomial(60, 0.05) exceeds 6 with probability 0.04


def test_level_on_short_series_of_several_channels():
    """Five i.i.d. channels of 15 samples (seeds 0-199), width 1: with the innovations' rows drawn
    with replacement, a third of a surrogate's rows repeated, its points bunched and the test at
    5 % rejected 12 % (of 200); drawn in passes without replacement, 2 %."""
    from ratiowatch.stream.detectors.offline import _standardise

    prof = SplitProfile(width=1)
    rejected = 0
    for seed in range(200):
        x = _standardise(np.random.default_rng(seed).normal(size=(15, 5)))
        rejected += max_split_test(x, prof, prof.best(x)[0], 0.05, np.random.default_rng(1000 + seed)).reject
    assert rejected <= 10  # at most the level (measured: 3; with replacement: 16)


def test_gumbel_tail_p_value_matches_the_fitted_law():
    from ratiowatch.stream.calibration.split_test import SplitTest

    rng = np.random.default_rng(0)
    null = rng.gumbel(10.0, 2.0, size=4000)
    for obs in (10.0, 16.0, 25.0):
        p = SplitTest(True, 0.0, null, obs).tail_p_value
        exact = -np.expm1(-np.exp(-(obs - 10.0) / 2.0))
        # moment estimates from 4,000 draws: the scale is known to ~2 %, which moves a p-value
        # 7.5 scale units out in the tail by ~15 %
        assert p == pytest.approx(exact, rel=0.25)
    assert np.isnan(SplitTest(False, 1.0, null[:5], 12.0).tail_p_value)


# ------------------------------------------------------------------ level shifts (Chen and Liu 1993)
@pytest.mark.parametrize("phi", [0.0, 0.5, 0.9])
def test_shift_and_outlier_statistics_match_the_explicit_regressions(phi):
    y = (_ar1(200, phi, 4) + 1.5 * (np.arange(200) >= 120))[:, None]
    y = y - y.mean()
    (model,) = fit_ar_channels(y, max_order=3)
    shift, outlier = intervention_t(y, [model])
    for k in (model.order + 1, 50, 119, 120, 121, 197, 198, 199):
        assert shift[k, 0] == pytest.approx(naive.level_shift_t(y[:, 0], model.phi, model.mean, k), rel=1e-9)
        assert outlier[k, 0] == pytest.approx(naive.additive_outlier_t(y[:, 0], model.phi, model.mean, k), rel=1e-9)
    assert np.all(shift[: model.order + 1] == 0.0) and np.all(outlier[: model.order + 1] == 0.0)  # undefined
    assert int(np.argmax(shift[:, 0])) in range(118, 123)


def test_a_noise_free_shift_is_placed_at_its_own_row():
    y = np.r_[np.zeros(100), np.ones(60)][:, None] - 0.375
    t = intervention_t(y, fit_ar_channels(y))[0][:, 0]
    # every error is 0 but the jump's: sigma is their plain spread, and t is about sqrt(T)
    assert int(np.argmax(t)) == 100 and t[100] > shift_gate(160, 1, 0.05)


@pytest.mark.parametrize("events", [{10: 3.0, 37: 1.0}, {8: 6.0, 9: 6.0}, {30: 3.0}])
def test_rare_events_among_zeros_are_not_shifts(events):
    # intermittent counts: the MAD of the errors is 0, and each event or a pair of them is better
    # explained as an outlier than as a change of level
    y = np.zeros(60)
    y[list(events)] = list(events.values())
    assert remove_level_shifts(y[:, None], 5, 0.05)[3] == [[]]


def test_the_gate_is_a_bonferroni_normal_quantile():
    from scipy.stats import norm

    assert shift_gate(1000, 2, 0.05) == pytest.approx(norm.isf(0.05 / 4000))
    assert shift_gate(100, 1, 0.05) < shift_gate(10000, 1, 0.05)


def test_clean_shifts_are_removed_one_at_a_time():
    rng = np.random.default_rng(0)
    steps = np.r_[np.zeros(300), np.ones(300), np.full(300, 3.0)]
    x = np.c_[steps + 0.05 * rng.normal(size=900), rng.normal(size=900)]  # channel 1 has no shift
    mu, slope, resid, shifts = remove_level_shifts(x, 5, 0.05)
    assert sorted(shifts[0]) == [300, 600] and shifts[1] == []
    # the plain line would rise with the steps (slope ~1.4 over t in [-1, 1])
    assert abs(slope[0]) < 0.05 and resid[:, 0].std() < 0.06  # the steps are out of the residual
    assert np.allclose(resid[:, 1], x[:, 1] - mu[1] - np.linspace(-1, 1, 900) * slope[1], rtol=0, atol=1e-12)


def test_change_free_series_keep_their_null():
    """Random walks and AR(1) at 0.9 (T = 500, 20 seeds each): a significant shift at level 0.05
    is found in at most a few of them (measured: 0 of 40)."""
    found = 0
    for seed in range(20):
        rng = np.random.default_rng(seed)
        walk = rng.normal(size=(500, 1)).cumsum(axis=0)
        found += bool(remove_level_shifts(walk, 5, 0.05)[3][0])
        found += bool(remove_level_shifts(_ar1(500, 0.9, seed)[:, None], 5, 0.05)[3][0])
    assert found <= 4  # binomial(40, 0.05) exceeds 4 with probability 0.05


def _alternating(seed, level=3.0, seg=300, count=4):
    rng = np.random.default_rng(seed)
    return np.concatenate([rng.normal(level * (i % 2), 1, seg) for i in range(count)])


@pytest.mark.parametrize("seed", [11, 12, 13])
def test_shifts_masked_by_a_persistent_fit_are_unmasked(seed):
    # three 3-sd shifts: the AR(5) fitted across them sums to ~0.9 and explains each one, so the
    # one-at-a-time search finds none; fitted jointly with the steps, the lags lose that persistence
    x = _alternating(seed)[:, None]
    assert remove_level_shifts(x, 5, 0.05, unmask=False)[3] == [[]]
    shifts = sorted(remove_level_shifts(x, 5, 0.05)[3][0])
    assert len(shifts) == 3 and all(abs(k - c) <= 5 for k, c in zip(shifts, (300, 600, 900))), shifts


def test_unmasking_keeps_the_null_of_persistent_series():
    """Random walks, AR(1) at 0.9 and jittered cycles of period 24 (T = 500, 20 seeds each): the
    unmasking step adds a shift to at most a few (measured: 0 of 60)."""
    from ratiowatch.stream.evaluate.synthetic import null_series

    added = 0
    for seed in range(20):
        rng = np.random.default_rng(seed)
        for x in (rng.normal(size=500).cumsum(), _ar1(500, 0.9, seed), null_series("seasonal24", 500, seed)):
            x = x[:, None]
            added += len(remove_level_shifts(x, 5, 0.05)[3][0]) > len(remove_level_shifts(x, 5, 0.05, unmask=False)[3][0])
    assert added <= 6  # binomial(60, 0.05) exceeds 6 with probability 0.08


@pytest.mark.xfail(strict=True, reason="a known gap: in short persistent series the unmasking step takes wanders "
                                        "for sets of level shifts (docs/experiments.md, configuration X)")
@pytest.mark.parametrize("t_len", [100, 200])
def test_unmasking_keeps_the_null_of_short_persistent_series(t_len):
    """AR(1) at 0.9, 20 seeds: the unmasking step adds shifts to 7 (T = 100) and 10 (T = 200) of
    them, steps along a wander with t of 4-6 against a gate of about 3.6. The null suite does not
    show it as change points while the line's slope goes back into the surrogates. The opt-in
    ``smooth_steps=True`` checks the sets by Monte Carlo (the test below)."""
    added = sum(len(remove_level_shifts(_ar1(t_len, 0.9, s)[:, None], 5, 0.05)[3][0])
                > len(remove_level_shifts(_ar1(t_len, 0.9, s)[:, None], 5, 0.05, unmask=False)[3][0])
                for s in range(20))
    assert added <= 3  # binomial(20, 0.05) exceeds 3 with probability 0.016


# ---------------------------------------------------------------- smooth_steps (opt-in)
def _smooth_steps_series(seed):
    from ratiowatch.stream.evaluate.synthetic import change_series

    return change_series("mean_smooth", seed=seed).x[:, None]  # AR(0.9), steps up at 500, down at 1,000


@pytest.mark.parametrize("seed", [1, 6, 7])
def test_with_smooth_steps_a_second_step_is_taken_alone_beside_the_first(seed):
    # under the persistent fit one step reads as a spike; the unmasking step finds it (t ~ 9) but
    # by default takes no set of one
    x = _smooth_steps_series(seed)
    assert sorted(remove_level_shifts(x, 5, 0.05)[3][0]) == [1000]
    assert sorted(remove_level_shifts(x, 5, 0.05, smooth_steps=True)[3][0]) == [500, 1000]


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_with_smooth_steps_a_single_step_masked_by_the_line_is_found(seed):
    """One step of 3 sd in the middle of 300 samples: fitted across it, the line takes a slope of
    about 2 and the AR model of the rest turns persistent, so by default no shift passes the gate.
    With ``smooth_steps`` the unmasking step takes the one step alone, and the line beside it is
    no longer significant."""
    rng = np.random.default_rng(seed)
    x = np.r_[rng.normal(0, 1, 150), rng.normal(3, 1, 150)][:, None]
    _, slope, _, shifts = remove_level_shifts(x, 5, 0.025)
    assert shifts == [[]] and slope[0] > 1.5
    _, slope, _, shifts = remove_level_shifts(x, 5, 0.025, smooth_steps=True)
    assert shifts == [[150]] and slope[0] == 0.0


def _clean_staircase(seed):
    """Ten flat segments of 150 samples, the level stepping up or down by 1 at each of nine
    changes, in noise of sd 0.05 (each step 20 noise sd, as the change suite's ``mean_clean``)."""
    rng = np.random.default_rng([seed, 77])
    levels = np.r_[0.0, np.cumsum(rng.choice([-1.0, 1.0], 9))]
    return np.repeat(levels, 150) + 0.05 * rng.normal(size=1500), list(range(150, 1500, 150))


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_with_smooth_steps_a_staircase_loses_its_line(seed):
    """Once steps explain a staircase's drift, the line leaves the search and every step is found
    within a few samples. While the line stayed (before part 4 of ``smooth_steps``), it took the
    net drift at seeds 0 and 3 (slopes -4.5 and -3.0), the residual ramped inside every flat
    segment, and 4 and 3 of the 9 steps were found; ``detect`` then reported none."""
    y, steps = _clean_staircase(seed)
    _, slope, _, shifts = remove_level_shifts(y[:, None], 5, 0.05, smooth_steps=True)
    assert slope[0] == 0.0 and len(shifts[0]) == len(steps)
    assert all(any(abs(k - cp) <= 3 for k in shifts[0]) for cp in steps), sorted(shifts[0])


def test_with_smooth_steps_a_trend_keeps_its_line():
    """A line of 0.01 per sample in unit noise (the null suite's ``trend``) and a step beside it:
    the line stays in the regression and the surrogates, with and without the step."""
    t = np.arange(800)
    rng = np.random.default_rng(4)
    trend = 0.01 * t + rng.normal(size=800)
    _, slope, _, shifts = remove_level_shifts(trend[:, None], 5, 0.05, smooth_steps=True)
    assert shifts == [[]] and slope[0] == pytest.approx(4.0, abs=0.3)  # over t in [-1, 1]
    _, slope, _, shifts = remove_level_shifts((trend + 3.0 * (t >= 500))[:, None], 5, 0.05, smooth_steps=True)
    assert shifts == [[500]] and slope[0] == pytest.approx(4.0, abs=0.3)


@pytest.mark.parametrize("t_len", [100, 200])
def test_with_smooth_steps_unmasked_sets_must_beat_their_own_surrogates(t_len):
    """The same AR(0.9) series as the strict expected failure above: with the Monte-Carlo check
    the unmasking step adds shifts to 1 of 20 at each length (7 and 10 without it)."""
    added = sum(len(remove_level_shifts(_ar1(t_len, 0.9, s)[:, None], 5, 0.05, smooth_steps=True)[3][0])
                > len(remove_level_shifts(_ar1(t_len, 0.9, s)[:, None], 5, 0.05, unmask=False)[3][0])
                for s in range(20))
    assert added <= 3  # binomial(20, 0.05) exceeds 3 with probability 0.016


def test_slope_standard_error_matches_the_spread_of_fitted_slopes():
    """400 AR(0.5) series of 600 samples, the line fitted beside steps at 200 and 400: the
    standard deviation of the fitted slopes against the mean of the formula's standard errors."""
    design = _step_design(np.linspace(-1.0, 1.0, 600), [200, 400])
    slopes, ses = [], []
    for s in range(400):
        r = _ar1(600, 0.5, 1000 + s)
        coef = np.linalg.lstsq(design, r, rcond=None)[0]
        slopes.append(coef[1])
        ses.append(slope_standard_error(r - design @ coef, [200, 400], 5))
    assert np.mean(ses) == pytest.approx(np.std(slopes), rel=0.12)  # measured: 0.409 against 0.422


def test_with_smooth_steps_a_chance_slope_beside_steps_stays_out_of_the_surrogates():
    x = _smooth_steps_series(2)
    mu, slope, _, shifts = remove_level_shifts(x, 5, 0.05)
    assert sorted(shifts[0]) == [500, 1000] and abs(slope[0]) > 0.5  # a chance slope of ~2.4 se
    assert remove_level_shifts(x, 5, 0.05, smooth_steps=True)[1][0] == 0.0
    prof = SplitProfile(width=3)
    stat = prof.best(x)[0]
    assert not max_split_test(x, prof, stat, 0.05, np.random.default_rng(0)).reject
    assert max_split_test(x, prof, stat, 0.05, np.random.default_rng(0), smooth_steps=True).reject
    # a real trend beside a step keeps its slope (1.5 over t in [-1, 1])
    t = np.arange(1200)
    y = 3.0 * t / 1200 + 2.0 * (t >= 700) + 0.1 * _ar1(1200, 0.5, 5)
    _, slope, _, shifts = remove_level_shifts(y[:, None], 5, 0.05, smooth_steps=True)
    assert shifts == [[700]] and slope[0] == pytest.approx(1.5, abs=0.05)


def test_the_dynamic_regression_t_matches_explicit_normal_equations():
    rng = np.random.default_rng(3)
    x = _ar1(120, 0.6, 3) + 2.0 * (np.arange(120) >= 70)
    design = _step_design(np.linspace(-1.0, 1.0, 120), [40, 70])
    got = _dynamic_t(x, design, 2)
    assert got == pytest.approx(naive.dynamic_regression_t(x, design, 2), rel=1e-8)
    assert got[3] > 3 > got[2]  # the real step stands out, the other does not


def test_white_noise_segmentation_splits_at_the_largest_mean_difference_first():
    rng = np.random.default_rng(0)
    y = np.r_[np.zeros(100), np.full(100, 1.0), np.full(100, -1.0)] + 0.1 * rng.normal(size=300)
    y = y - y.mean()
    found = _white_noise_segmentation(y, 4.0, 3, 1, exclude=[])
    sigma = 0.1  # the first differences' MAD estimates the noise, not the steps
    stats = [naive.white_noise_shift_stat(y, k) / sigma for k in range(3, 298)]
    assert found == [3 + int(np.argmax(stats))] == [200]
    assert _white_noise_segmentation(y, 4.0, 3, 5, exclude=[]) == [100, 200]
    assert _white_noise_segmentation(rng.normal(size=300), 4.0, 3, 5, exclude=[]) == []


def test_a_clean_shift_is_not_reproduced_by_its_own_surrogates():
    # fitted across the step, the line takes its slope and the AR model turns persistent: the
    # surrogates made ramps and wanders that scored as high as the step (it was never found)
    rng = np.random.default_rng(1)
    x = np.r_[np.zeros(900), np.ones(600)] + 0.03 * rng.normal(size=1500)
    prof = SplitProfile(width=3)
    stat = prof.best(x)[0]
    plain = max_split_test(x, prof, stat, 0.05, np.random.default_rng(2), level_shifts=False)
    cleaned = max_split_test(x, prof, stat, 0.05, np.random.default_rng(2))
    assert not plain.reject and cleaned.reject
    assert cleaned.null.max() < 0.2 * stat
    sims = list(ar_surrogates(x[:, None], np.random.default_rng(3), 5, shift_level=0.05))
    assert all(abs(np.polyfit(np.arange(1500), s[:, 0], 1)[0]) < 1e-5 for s in sims)  # no ramp


def test_gross_values_are_clipped_where_gaussian_values_rarely_reach():
    from scipy.stats import norm

    rng = np.random.default_rng(4)
    x = rng.normal(size=(1000, 2))
    x[10, 0], x[20, 1] = 1e6, -50.0
    c = clip_gross(x)
    changed = np.argwhere(c != x).tolist()
    assert changed == [[10, 0], [20, 1]]
    med = np.median(x, axis=0)
    bound = norm.isf(GROSS_LEVEL / 2000) * 1.4826 * np.median(np.abs(x - med), axis=0)
    assert c[10, 0] == pytest.approx(med[0] + bound[0]) and c[20, 1] == pytest.approx(med[1] - bound[1])
    # over change-free Gaussian segments, about GROSS_LEVEL of them have a value clipped
    segments = (rng.normal(size=(300, 1)) for _ in range(2000))
    hits = sum(bool(np.any(clip_gross(z) != z)) for z in segments)
    assert 0.002 < hits / 2000 < 0.03
    # more than half the values one value (counts among zeros): left as they are
    events = np.zeros((500, 1))
    events[::50] = 7.0
    assert np.array_equal(clip_gross(events), events)


def test_a_gross_value_does_not_tilt_the_robust_line():
    rng = np.random.default_rng(5)
    x = rng.normal(size=(3000, 1))
    x[300, 0] = 1e6
    plain = null_fit(x)
    robust = null_fit(x, robust_line=True)
    assert abs(plain[1][0]) > 100  # a ramp of hundreds of noise sd over the segment
    assert abs(robust[1][0]) < 0.1
    assert robust[2][300, 0] > 9e5  # the residual keeps the value: the surrogates' values are the data's
    clean = rng.normal(size=(3000, 1)) + np.linspace(0, 3, 3000)[:, None]
    assert all(np.array_equal(a, b) for a, b in zip(null_fit(clean)[:3], null_fit(clean, robust_line=True)[:3]))


@pytest.mark.parametrize("level", [0.0, 1.0, -0.1, 1.5])
def test_a_gumbel_threshold_asks_for_a_level_strictly_between_0_and_1(level):
    # 0 and 1 were a bare "math domain error"
    from ratiowatch.stream.calibration.split_test import gumbel_threshold

    with pytest.raises(ValueError, match="level must be in"):
        gumbel_threshold(np.random.default_rng(0).gumbel(size=50), level)

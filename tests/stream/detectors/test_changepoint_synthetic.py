"""Known-truth synthetic streams (AR(2) as in Liu et al. 2013): mean, variance and correlation changes.

Specification: with the default configuration each mean shift and variance increase is found
within 2n samples (the alarm is raised at most 2n samples after the change and its change index
lies within n of it), a variance decrease on most streams, and stationary streams raise at most
one false alarm per 10,000 samples (per univariate stream; pooled over the bivariate ones).
"""

import math

import numpy as np
import pytest

from ratiowatch.stream.detectors.changepoint import ChangePointDetector

SEG = 1000


def ar2(noise: np.ndarray) -> np.ndarray:
    """y(t) = 0.6 y(t-1) - 0.5 y(t-2) + e(t) (Liu et al. 2013, section 4.1)."""
    y = np.zeros_like(noise)
    for t in range(2, len(noise)):
        y[t] = 0.6 * y[t - 1] - 0.5 * y[t - 2] + noise[t]
    return y


def run(series):
    det = ChangePointDetector()
    alarms = []
    for row in series:
        a = det.step(row)
        if a is not None:
            alarms.append(a)
    return det, alarms


def found_within_2n(alarms, c, n):
    """Whether an alarm is raised at most 2n after change ``c`` with its change index within n of it."""
    return any(0 <= a.alarm_index - c <= 2 * n and abs(a.change_index - c) <= n for a in alarms)


def assert_found(alarms, changes, n):
    for c in changes:
        assert found_within_2n(alarms, c, n), f"change at {c} not found within 2n={2 * n}; alarms: {alarms}"


def jumping_mean(seed):
    rng = np.random.default_rng(seed)
    return ar2(rng.normal(np.repeat([0.0, 4.0, -1.0], SEG), 1.0))


def scaling_variance(seed):
    rng = np.random.default_rng(seed)
    return ar2(rng.normal(0.0, np.repeat([1.0, 3.0, 1.0], SEG)))


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5, 6, 7, 8])
@pytest.mark.parametrize("make", [jumping_mean, scaling_variance], ids=lambda f: f.__name__)
def test_each_change_found_within_2n(make, seed):
    # both mean shifts, and the variance increase (sd 1 -> 3); the decrease back is below
    det, alarms = run(make(seed))
    assert_found(alarms, [SEG, 2 * SEG] if make is jumping_mean else [SEG], det.n)


def test_variance_decrease_is_found_within_2n_on_most_streams():
    # sd 3 -> 1 in AR(2) noise is the weakest change of the specification: the past window's
    # large values dominate both the score and the surrogates' AR fit. Measured over seeds 1-30:
    # 18 found within 2n (22 before the AR fit was debiased and the tail made predictive, which
    # brought the suite's false alarms within 1 per 10,000 samples; docs/experiments.md)
    found = 0
    for seed in range(1, 31):
        det, alarms = run(scaling_variance(seed))
        found += found_within_2n(alarms, 2 * SEG, det.n)
    assert found >= 15, found


def test_a_return_to_the_old_level_soon_after_a_shift_is_found():
    # an incident: the level steps up and back 250 samples later, then up and back again, in
    # white noise (the change suite's alternating shifts, from 1,000 on, where the window is at
    # its full n). While a shift is behind the windows but inside the stretch the null's trend
    # line is fitted to, a line alone took it for a steep slope and the null held the shift: over
    # seeds 0-19 the three shifts after the first were found 5, 6 and 5 times, and 20, 19 and 18
    # times with the step in the line's fit (the first 20 times either way)
    found = 0
    for seed in range(10):
        rng = np.random.default_rng(seed)
        x = rng.normal(size=2250) + 2.0 * np.repeat([0.0, 1.0, 0.0, 1.0, 0.0], [1000, 250, 250, 250, 500])
        det, alarms = run(x)
        found += sum(found_within_2n(alarms, c, det.n) for c in (1250, 1500, 1750))
    assert found >= 27, found


def test_at_most_one_extra_alarm_per_series():
    extra = {}
    for make in (jumping_mean, scaling_variance):
        for seed in (1, 2, 3, 4):
            _, alarms = run(make(seed))
            extra[(make.__name__, seed)] = len(alarms) - 2
    assert max(extra.values()) <= 1, extra


@pytest.mark.parametrize("seed", [3, 4, 5, 6, 7, 8])
def test_correlation_change_bivariate(seed):
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(3 * SEG, 2))
    rho = np.repeat([0.0, 0.95, 0.0], SEG)
    e2 = rho * z[:, 0] + np.sqrt(1 - rho**2) * z[:, 1]
    y = np.column_stack([ar2(z[:, 0]), ar2(e2)])
    det, alarms = run(y)
    assert_found(alarms, [SEG, 2 * SEG], det.n)
    assert len(alarms) <= 3


@pytest.mark.parametrize("seed", [4, 5, 6, 7, 8, 9])
def test_stationary_false_alarm_rate(seed):
    rng = np.random.default_rng(seed)
    y = ar2(rng.normal(size=10_000))
    _, alarms = run(y)
    assert len(alarms) <= 1, f"{len(alarms)} false alarms in 10,000 stationary samples: {alarms}"


@pytest.mark.parametrize("rho", [0.0, 0.95])
def test_stationary_false_alarm_rate_bivariate(rho):
    # two AR(2) channels with correlated innovations: the kernel score and the correlation view
    # together stay within the budget of 1 false alarm per 10,000 samples, pooled over six streams
    # (measured, seeds 4-9: 0, 1, 0, 0, 0, 1 at rho 0; 0, 1, 0, 0, 2, 1 at 0.95; over seeds 10-39,
    # 7 and 7 alarms, against 10 and 13 before the AR fit was debiased and the tail made predictive)
    counts = []
    for seed in (4, 5, 6, 7, 8, 9):
        rng = np.random.default_rng(seed)
        z = rng.normal(size=(10_000, 2))
        y = np.column_stack([ar2(z[:, 0]), ar2(rho * z[:, 0] + np.sqrt(1 - rho**2) * z[:, 1])])
        counts.append(len(run(y)[1]))
    assert sum(counts) <= 6 and max(counts) <= 2, counts


def _other_noise(kind: str, seed: int, t_len: int = 10_000) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if kind == "student_t3":
        return rng.standard_t(3, size=t_len)
    if kind == "random_walk":
        return rng.normal(size=t_len).cumsum()
    if kind == "sine_period_24":
        return 2.0 * np.sin(2 * np.pi * np.arange(t_len) / 24) + 0.5 * rng.normal(size=t_len)
    if kind == "poisson_counts":
        return rng.poisson(3.0, size=t_len).astype(float)
    # AR(1) 0.5 driven by heavy-tailed t(3) innovations
    e = rng.standard_t(3, size=t_len)
    y = np.zeros(t_len)
    for t in range(1, t_len):
        y[t] = 0.5 * y[t - 1] + e[t]
    return y


@pytest.mark.parametrize("kind", ["student_t3", "random_walk", "sine_period_24", "poisson_counts", "t3_ar1"])
def test_other_stationary_noise_raises_at_most_one_false_alarm_per_10k_on_average(kind):
    # beyond the AR(2) of the specification: five 10,000-sample series per kind (seeds 0-4);
    # t3_ar1 had 1, 2, 1, 2, 1 before the surrogates were fitted around a trend line, 0, 2, 0, 0, 0 after
    alarms = [len(run(_other_noise(kind, seed))[1]) for seed in range(5)]
    assert np.mean(alarms) <= 1.0, alarms


@pytest.mark.parametrize("noise", [0.0, 0.001, 0.01])
def test_a_clean_periodic_signal_is_no_change(noise):
    # a sine with little or no noise fits an AR model with a root within 1e-4 of the unit circle;
    # surrogates started from zero kept 2-50 % of its variance and raised 5 / 20 / 10 alarms on
    # these 5,000-sample sines of periods 7 / 20 / 50 without noise, 2 / 0 / 2 with noise 0.001 and
    # 5 / 0 / 0 with 0.01; started from the data, none
    alarms = []
    for period in (7, 20, 50):
        rng = np.random.default_rng(period)
        y = np.sin(2 * np.pi * np.arange(5_000) / period + 0.3) + noise * rng.normal(size=5_000)
        alarms.append(len(run(y)[1]))
    assert alarms == [0, 0, 0]


def test_a_linear_trend_is_no_change():
    # 0.01 t + N(0, 1): half a noise sd between the windows' centres at n = 50. Surrogates without
    # the trend's own shift raised 23, 10, 21, 20, 17 alarms on these series; with it 1, 0, 0, 1, 1
    alarms = [len(run(0.01 * np.arange(10_000) + np.random.default_rng(s).normal(size=10_000))[1])
              for s in range(5)]
    assert np.mean(alarms) <= 1.0, alarms


@pytest.mark.parametrize("rate", [0.002, 0.01])
def test_isolated_events_of_a_sparse_count_are_not_changes(rate):
    # 50 zeros behind the windows give a constant AR null under which one event is a change: 54 and
    # 13 alarms in these 60,000 samples before the detector re-decided from the windows'
    # permutations, 1 and 3 after
    alarms = [len(run(np.random.default_rng(100 + s).poisson(rate, 20_000).astype(float))[1]) for s in range(3)]
    assert sum(alarms) <= 6, alarms  # at most one per 10,000 samples


def _mostly_zero_counts(rng, t_len):
    """Event counts, 90 % zeros: Poisson(5) events at 10 % of the samples."""
    return np.where(rng.random(t_len) < 0.1, rng.poisson(5.0, t_len), 0).astype(float)


def test_counts_that_are_mostly_zero_stay_within_the_rate_once_the_windows_are_grown():
    # the AR surrogates hold the atom at 0 poorly: a few events in the current window were far
    # out in their tail. 9 alarms after the 1,000th sample of these streams (54,000 samples) before
    # the windows' own re-splits had to confirm them, 5 after
    late = []
    for s in range(6):
        det, alarms = run(_mostly_zero_counts(np.random.default_rng(300 + s), 10_000))
        late.append(sum(a.alarm_index >= 1000 for a in alarms))
    assert sum(late) <= 5.4, late  # at most one per 10,000 samples


@pytest.mark.parametrize("at", [300, 1500])
def test_a_burst_in_counts_that_are_mostly_zero_is_found(at):
    # the re-splits must not veto a real change: at 300 the windows are too small for them to
    # resolve the rate (the split must beat every drawn re-split); at 1,500 they resolve it
    for s in range(3):
        rng = np.random.default_rng(400 + s)
        x = _mostly_zero_counts(rng, at + 200)
        x[at:] = rng.poisson(50.0, 200)
        det, alarms = run(x)
        assert any(abs(a.change_index - at) <= 2 and a.alarm_index - at <= 100 for a in alarms), alarms


def test_young_windows_on_counts_that_are_mostly_zero_must_beat_their_own_re_splits():
    # too few distinct re-splits to certify the rate, but an alarm must still beat every one
    # drawn: 21 alarms in these 20,000 samples with the AR null alone, 9 with it
    alarms = [len(run(_mostly_zero_counts(np.random.default_rng(500 + s), 1000))[1]) for s in range(20)]
    assert sum(alarms) <= 10, alarms


def test_young_windows_on_counts_that_are_mostly_zero_draw_their_null_up_to_its_top():
    # windows of 6-12 subsequences: the score of such counts is discrete and bounded, and its top
    # (the events on one side) comes far more often than the rate. 18 alarms in these 12,000
    # samples while the threshold was the exponential tail of 160 draws, 3 with the top draws
    alarms = [len(run(_mostly_zero_counts(np.random.default_rng(700 + s), 300))[1]) for s in range(40)]
    assert sum(alarms) <= 6, alarms


def test_a_burst_in_young_counts_that_are_mostly_zero_is_still_found():
    # the top draws veto what the windows' own null reaches, not a burst: found at sample 150
    # (windows of 6-8 subsequences) in 8 of these 10 streams. 3-5 while a tie with the largest
    # drawn re-split (the windows' own split is among the draws) passed or not by rounding
    found = 0
    for s in range(10):
        rng = np.random.default_rng(400 + s)
        x = _mostly_zero_counts(rng, 350)
        x[150:] = rng.poisson(50.0, 200)
        found += any(abs(a.change_index - 150) <= 2 and a.alarm_index - 150 <= 100 for a in run(x)[1])
    assert found >= 7


def test_the_null_draws_up_to_its_top_only_for_young_windows_on_mostly_one_value(monkeypatch):
    import math

    from ratiowatch.stream.calibration.null import NULL_POOL, NullCalibrator

    asked, calibrations = [], []
    raise_to_top, calibrate = NullCalibrator.raise_to_top, NullCalibrator.calibrate_ar
    monkeypatch.setattr(NullCalibrator, "raise_to_top",
                        lambda self, values, n, sigma, lam, rng, count, **kw:
                        asked.append((len(calibrations), n, count))
                        or raise_to_top(self, values, n, sigma, lam, rng, count, **kw))
    monkeypatch.setattr(NullCalibrator, "calibrate_ar",
                        lambda self, *a, **kw: calibrations.append(1) or calibrate(self, *a, **kw))
    for s in range(10):
        run(_mostly_zero_counts(np.random.default_rng(700 + s), 300))
    pool = NULL_POOL * 10
    # as many draws in all as the largest windows' pool costs, (50 / n)^2 pools, and only while
    # the windows' re-splits cannot resolve the rate (n < 34)
    assert all(n < 34 and count == min(math.ceil(pool * (50 / n) ** 2), 10_000) - pool for _, n, count in asked), asked
    assert {n for _, n, _ in asked} >= {6, 8}
    # at most once per calibration, and far from at every one
    since = [c for c, _, _ in asked]
    assert len(since) == len(set(since)) and len(asked) < len(calibrations) / 2
    asked.clear()
    run(np.random.default_rng(303).normal(size=2000))
    assert asked == []  # continuous values: the pool alone


def test_the_floor_is_the_rates_quantile_only_where_the_windows_resolve_it(monkeypatch):
    from ratiowatch.stream.calibration.null import NullCalibrator

    asked = []
    confirm = NullCalibrator.confirm_with_floor
    monkeypatch.setattr(NullCalibrator, "confirm_with_floor",
                        lambda self, win, n, *a, resolves=True, **kw:
                        asked.append((n, resolves)) or confirm(self, win, n, *a, resolves=resolves, **kw))
    for s in (303, 305, 307):
        run(_mostly_zero_counts(np.random.default_rng(s), 4000))
    # C(2n / 3, n / 3) distinct re-splits against 1 / rate = 40,000: n = 34 has enough, 24 not
    assert all(resolves == (n >= 34) for n, resolves in asked), asked
    assert {resolves for _, resolves in asked} == {True, False}
    asked.clear()
    run(np.random.default_rng(303).normal(size=4000))
    assert asked == []  # continuous values: the AR null alone


def test_a_stuck_sensor_raises_no_alarm_and_a_jump_after_it_is_found():
    det, alarms = run(np.ones(1500))
    assert alarms == []
    det, alarms = run(np.r_[np.ones(2000), np.full(1000, 5.0)])
    assert [abs(a.change_index - 2000) <= 5 for a in alarms] == [True], alarms

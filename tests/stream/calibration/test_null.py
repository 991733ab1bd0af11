"""Specification of the change detector's null calibration (ratiowatch.stream.calibration.null)."""

import math

import numpy as np
import pytest

from ratiowatch.core.window import TwoWindowRuLSIF
from ratiowatch.stream.calibration.permutation import permutation_null_rulsif
from ratiowatch.stream.calibration.thresholds import exceeds, exp_tail_threshold, gamma_threshold, top_draws_floor
from ratiowatch.stream.calibration.null import AR_MIN_VALUES, NULL_POOL, NullCalibrator
from ratiowatch.stream.series.embedding import embed
from naive import rulsif_window_score


def _ar_values(t_len: int, seed: int = 0, channels: int = 1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    e = rng.normal(size=(t_len, channels))
    x = np.zeros((t_len, channels))
    for t in range(2, t_len):
        x[t] = 0.6 * x[t - 1] - 0.3 * x[t - 2] + e[t]
    return x


def _calibrator(null: str = "ar", **kw) -> NullCalibrator:
    args = {"method": "rulsif", "alpha": 0.1, "symmetric": True, "n_perm": 10, "false_alarm_rate": 1e-4, "k": 3}
    return NullCalibrator(null, **{**args, **kw})


def test_first_ar_calibration_fills_the_whole_pool_and_later_ones_renew_one_row():
    cal = _calibrator()
    vals = _ar_values(60)
    cal.calibrate_ar(vals, 20, 1.0, 0.1, np.random.default_rng(1))
    assert cal.pool_count == NULL_POOL and np.isfinite(cal.pool).all()
    first = cal.pool.copy()
    cal.calibrate_ar(vals, 20, 1.0, 0.1, np.random.default_rng(2))
    changed = [i for i in range(NULL_POOL) if not np.array_equal(first[i], cal.pool[i])]
    assert changed == [0]  # the oldest row (pool_count % NULL_POOL), and only it
    # each direction at half the rate, on the pool of both directions
    assert cal.threshold == exp_tail_threshold(cal.pool.ravel(), 1e-4 / 2)


def test_the_ar_threshold_is_never_below_what_its_own_draws_allow():
    cal = _calibrator()
    cal.calibrate_ar(_ar_values(60), 20, 1.0, 0.1, np.random.default_rng(1))
    pool = cal.pool.ravel()
    assert cal.ar_threshold == max(exp_tail_threshold(pool, 1e-4 / 2), top_draws_floor(pool, 1e-4 / 2))
    assert cal.ar_threshold >= pool.max()  # 160 draws at 5e-5: none may lie above it


def _mostly_zero_counts(rng, t_len):
    """Event counts, 90 % zeros: Poisson(5) events at 10 % of the samples."""
    return np.where(rng.random(t_len) < 0.1, rng.poisson(5.0, t_len), 0).astype(float)


def test_ulsif_fits_its_tail_in_logs_and_the_bounded_ratios_do_not():
    def cal(method, alpha=0.1):
        return NullCalibrator("ar", method=method, alpha=alpha, symmetric=True, n_perm=10, false_alarm_rate=1e-4, k=3)

    assert cal("ulsif").log_tail and cal("rulsif", alpha=0.0).log_tail
    assert not (cal("rulsif").log_tail or cal("kliep").log_tail or cal("lsdd").log_tail)


def test_a_tail_fitted_in_logs_holds_the_rate_of_a_pareto_tail():
    """Lomax draws, P(X > x) = (1 + x)^-3: the pool's 160 draws at 5e-5. An exponential tail of the
    draws is exceeded about 50 times too often; one of their logarithms (exactly exponential here)
    holds the rate."""
    from ratiowatch.stream.calibration.null import _ar_threshold

    rng = np.random.default_rng(0)
    rate = 5e-5
    plain, logs = [], []
    for _ in range(500):
        x = rng.pareto(3.0, 160)
        plain.append((1.0 + _ar_threshold(x, rate)) ** -3)
        logs.append((1.0 + _ar_threshold(x, rate, log_tail=True)) ** -3)
    assert np.mean(plain) > 10 * rate
    assert 0.5 * rate < np.mean(logs) < 2 * rate


def test_ulsif_streams_stay_near_their_rate_on_change_free_series():
    """uLSIF's scores have the heavy tail of an unbounded ratio: with its tail fitted to the scores
    themselves, AR(0.5) noise, counts, quantized values and a trend (T = 600, seeds 0-9) raised 48
    false alarms in 24,000 samples; in logs the streaming null suite is within its specification."""
    from ratiowatch.stream.detectors.changepoint import ChangePointDetector
    from ratiowatch.stream.evaluate.synthetic import null_series

    alarms = 0
    for kind in ("ar05", "counts", "quantized", "trend"):
        for seed in range(10):
            det = ChangePointDetector(method="ulsif", seed=0)
            alarms += sum(det.step(v) is not None for v in null_series(kind, 600, seed))
    assert alarms <= 4


def test_top_draws_put_the_threshold_of_a_discrete_null_at_its_top():
    # six-subsequence windows of counts that are mostly 0: the score is bounded and reaches its top
    # when the events fall on one side, far more often than the rate. The exponential tail of the
    # pool's 160 draws sits below that top; with the top draws the threshold is the top itself.
    n, k, sigma, lam, alpha = 6, 3, 0.5, 0.1, 0.1
    counts = _mostly_zero_counts(np.random.default_rng(0), 50)
    scale = counts.std()
    vals = (counts / scale)[:, None]
    cal = _calibrator()
    cal.calibrate_ar(vals, n, sigma, lam, np.random.default_rng(1))
    pool, pool_thr = cal.pool.copy(), cal.threshold
    thr = cal.raise_to_top(vals, n, sigma, lam, np.random.default_rng(3), 5475)
    # an independent sample of the true null: fresh windows of the same process, scored by the
    # brute-force definition, each step's larger direction
    fresh, a, b = np.random.default_rng(2), np.arange(n), np.arange(n, 2 * n)
    scores = []
    for _ in range(2000):
        rows = embed(_mostly_zero_counts(fresh, 2 * n + k - 1) / scale, k)
        gram = np.exp(-((rows[:, None, :] - rows[None, :, :]) ** 2).sum(-1) / (2 * sigma * sigma))
        scores.append(max(rulsif_window_score(gram, a, b, alpha, lam, False),
                          rulsif_window_score(gram, b, a, alpha, lam, False)))
    scores = np.array(scores)
    tail_alone = exp_tail_threshold(pool.ravel(), 1e-4 / 2)  # the threshold before the top draws
    assert (scores > tail_alone).mean() > 0.005  # about 1.5 % of the steps, against a rate of 1e-4
    assert (scores > pool_thr * (1 + 1e-9)).mean() > 0.005  # the pool's own largest draw: still below
    assert thr == cal.threshold == cal.ar_threshold
    assert (scores > thr * (1 + 1e-9)).mean() <= 0.001
    assert np.array_equal(cal.pool, pool) and cal.pool_count == NULL_POOL  # the top draws are not pooled


def test_raising_to_the_top_needs_an_ar_threshold_and_a_gram_method():
    vals = _mostly_zero_counts(np.random.default_rng(0), 50)[:, None]
    cal = _calibrator()
    assert math.isnan(cal.raise_to_top(vals, 6, 0.5, 0.1, np.random.default_rng(3), 100))  # not calibrated
    lsdd = _calibrator(method="lsdd")
    lsdd.ar_threshold = lsdd.threshold = 1.0
    assert lsdd.raise_to_top(vals, 6, 0.5, 0.1, np.random.default_rng(3), 100) == 1.0


def test_restart_makes_the_next_calibration_refill_the_pool():
    cal = _calibrator()
    vals = _ar_values(60)
    cal.calibrate_ar(vals, 20, 1.0, 0.1, np.random.default_rng(1))
    cal.calibrate_ar(vals, 20, 1.0, 0.1, np.random.default_rng(2))
    cal.restart()
    before = cal.pool.copy()
    cal.calibrate_ar(vals, 20, 1.0, 0.1, np.random.default_rng(3))
    assert cal.pool_count == NULL_POOL
    assert all(not np.array_equal(before[i], cal.pool[i]) for i in range(NULL_POOL))


def test_too_few_values_for_an_ar_fit_give_no_threshold_and_leave_the_pool_empty():
    cal = _calibrator()
    cal.calibrate_ar(_ar_values(AR_MIN_VALUES - 1), 20, 1.0, 0.1, np.random.default_rng(1))
    assert math.isnan(cal.threshold) and cal.pool_count == 0 and cal.corr_thresholds is None


def test_correlation_view_takes_half_the_rate_only_on_large_enough_windows():
    vals = _ar_values(80, channels=3)
    small, large = _calibrator(), _calibrator()
    small.calibrate_ar(vals, 12, 1.0, 0.1, np.random.default_rng(1), corr_view=True)
    large.calibrate_ar(vals, 24, 1.0, 0.1, np.random.default_rng(1), corr_view=True)
    assert small.corr_thresholds is None
    assert small.threshold == exp_tail_threshold(small.pool.ravel(), 1e-4 / 2)
    assert large.corr_pool.shape == (NULL_POOL, 10, 3) and large.corr_thresholds.shape == (3,)
    assert large.threshold == exp_tail_threshold(large.pool.ravel(), 1e-4 / 4)


def test_channel_view_is_calibrated_on_the_kernel_surrogates_without_moving_them():
    from ratiowatch.stream.calibration.channels import surrogate_rank_diffs
    from ratiowatch.stream.calibration.surrogate import surrogate_null_rulsif

    vals = _ar_values(80, channels=3)
    plain, both = _calibrator(), _calibrator()
    plain.calibrate_ar(vals, 24, 1.0, 0.1, np.random.default_rng(1), corr_view=True)
    both.calibrate_ar(vals, 24, 1.0, 0.1, np.random.default_rng(1), corr_view=True, channel_view=True)
    # the kernel pool, its threshold and the correlation pool are the draws they were without it
    np.testing.assert_array_equal(both.pool, plain.pool)
    np.testing.assert_array_equal(both.corr_pool, plain.corr_pool)
    assert both.threshold == plain.threshold
    # the channel pool holds the rank statistics of exactly those surrogates
    _, sims = surrogate_null_rulsif(vals, 24, 3, 1.0, 0.1, 0.1, True, NULL_POOL * 10, np.random.default_rng(1),
                                    debias=True, start_from_data=True, return_sims=True)
    want = surrogate_rank_diffs(sims, 2, 24)
    np.testing.assert_array_equal(both.channel_pool.reshape(-1, 6), want)
    # 3 pairs and 6 channel statistics share half the rate: the pairs' thresholds go up
    assert both.channel_thresholds.shape == (6,) and np.isfinite(both.channel_thresholds).all()
    assert (both.corr_thresholds > plain.corr_thresholds).all()


def test_channel_pool_started_from_one_calibration_fills_row_by_row():
    vals = _ar_values(80, channels=2)
    cal = _calibrator()
    cal.calibrate_ar(vals, 24, 1.0, 0.1, np.random.default_rng(1))  # as a checkpoint from before the view
    cal.calibrate_ar(vals, 24, 1.0, 0.1, np.random.default_rng(2), channel_view=True)
    assert cal.channel_count == 1 and np.isfinite(cal.channel_thresholds).all()
    assert not cal.channel_pool[1:].any()
    cal.calibrate_ar(vals, 24, 1.0, 0.1, np.random.default_rng(3), channel_view=True)
    assert cal.channel_count == 2 and cal.channel_pool[1].any() and not cal.channel_pool[2:].any()


def test_level_view_is_calibrated_on_the_kernel_surrogates_where_a_unit_root_stands():
    """A random walk's levels: the level view's draws are D of the kernel score's own surrogates of
    the differences, the kernel keeps half the rate, and the threshold is the draws' RMS (about 0,
    or the statistic's own over the levels where that is larger) times the t quantile of the other
    half."""
    from scipy.special import stdtrit

    from ratiowatch.stream.calibration.levels import surrogate_level_diffs
    from ratiowatch.stream.calibration.surrogate import surrogate_null_rulsif

    rng = np.random.default_rng(5)
    levels = rng.normal(size=(300, 1)).cumsum(axis=0)
    diffs = np.diff(levels, axis=0)[-60:]
    plain, lv = _calibrator(), _calibrator()
    plain.calibrate_ar(diffs, 24, 1.0, 0.1, np.random.default_rng(1))
    lv.calibrate_ar(diffs, 24, 1.0, 0.1, np.random.default_rng(1), level_view=True, level_values=levels)
    np.testing.assert_array_equal(lv.pool, plain.pool)
    assert lv.kernel_rate == plain.kernel_rate / 2 and plain.level_thresholds is None
    _, sims = surrogate_null_rulsif(diffs, 24, 3, 1.0, 0.1, 0.1, True, NULL_POOL * 10, np.random.default_rng(1),
                                    debias=True, start_from_data=True, return_sims=True)
    draws = surrogate_level_diffs(sims, 2, 24)
    np.testing.assert_array_equal(lv.level_pool.reshape(-1, 1), draws)
    rms = np.sqrt((draws * draws).mean(axis=0))
    own = np.array([levels[j + 24:j + 48].mean() - levels[j:j + 24].mean() for j in range(300 - 47)])
    spread = max(rms[0], np.sqrt((own * own).mean()))
    np.testing.assert_allclose(lv.level_thresholds, spread * -stdtrit(draws.shape[0], 1e-4 / 2 / 2), rtol=1e-12)


def test_level_view_draws_from_the_levels_where_they_are_stationary():
    """AR(1) levels with phi = 0.9: the differences' surrogates spread D far wider than the levels'
    own surrogates, which match the spread of D over the series itself."""
    rng = np.random.default_rng(6)
    e = rng.normal(size=20000)
    x = np.zeros(20000)
    for t in range(1, 20000):
        x[t] = 0.9 * x[t - 1] + e[t]
    n = 24
    levels, diffs = x[:400, None], np.diff(x[:400])[-60:, None]
    on_diffs, on_levels = _calibrator(), _calibrator()
    on_diffs.calibrate_ar(diffs, n, 1.0, 0.1, np.random.default_rng(1), level_view=True)
    on_levels.calibrate_ar(diffs, n, 1.0, 0.1, np.random.default_rng(1), level_view=True, level_values=levels)
    spread = lambda cal: np.sqrt((cal.level_pool ** 2).mean())
    windows = np.lib.stride_tricks.sliding_window_view(x, 2 * n)[::2 * n]
    actual = (windows[:, n:].mean(axis=1) - windows[:, :n].mean(axis=1)).std()
    assert spread(on_diffs) > 1.5 * spread(on_levels)
    assert spread(on_levels) == pytest.approx(actual, rel=0.35)


def test_permutation_threshold_uses_only_the_calibrations_made_so_far():
    rng = np.random.default_rng(0)
    win = TwoWindowRuLSIF(3, 15, 1.0, 0.1, alpha=0.1)
    for row in rng.normal(size=(30, 3)):
        win.push(row)
    cal = _calibrator("permutation")
    for i in range(3):
        cal.calibrate_permutation(win, 15, 1, np.random.default_rng(i), make_state=None)
    assert cal.pool_count == 3
    assert cal.threshold == gamma_threshold(cal.pool[:3].ravel(), 1e-4)


def _sparse_windows(n: int = 20, k: int = 3) -> TwoWindowRuLSIF:
    """Windows over an event count: zeros, and one event in the current window."""
    counts = np.zeros(2 * n + k - 1)
    counts[n + k + 5] = 1.0
    win = TwoWindowRuLSIF(k, n, 0.5, 0.1, alpha=0.1)
    for row in embed(counts[:, None], k):
        win.push(row)
    return win


def test_a_null_drawn_from_constant_values_is_flagged_degenerate():
    cal = _calibrator()
    cal.calibrate_ar(np.zeros((60, 1)), 20, 0.5, 0.1, np.random.default_rng(1))
    assert cal.degenerate
    cal.calibrate_ar(_ar_values(60), 20, 0.5, 0.1, np.random.default_rng(1))
    assert not cal.degenerate  # one row of the pool is no longer constant


def test_the_permutation_floor_decides_when_the_values_behind_the_windows_are_constant():
    win = _sparse_windows()
    score = max(win.scores())
    bare, floored = _calibrator(), _calibrator()
    bare.calibrate_ar(np.zeros((60, 1)), 20, 0.5, 0.1, np.random.default_rng(1))
    floored.calibrate_ar(np.zeros((60, 1)), 20, 0.5, 0.1, np.random.default_rng(1), win=win, block=3)
    assert score > bare.threshold + 1e-3  # the constant surrogates: one event looks like a change
    assert floored.threshold == floored.floor_threshold == exp_tail_threshold(floored.floor_pool.ravel(), 1e-4 / 2)
    assert floored.threshold > score and not floored.degenerate  # re-splits hold the event either side
    assert floored.floor_count == NULL_POOL and floored.ar_threshold == bare.threshold


def test_confirming_with_the_floor_raises_the_threshold_to_the_windows_own_re_splits():
    win = _sparse_windows()
    cal = _calibrator()
    cal.calibrate_ar(_ar_values(60), 20, 0.5, 0.1, np.random.default_rng(1))
    ar_thr, pool_count = cal.ar_threshold, cal.pool_count
    thr = cal.confirm_with_floor(win, 20, 3, np.random.default_rng(7))
    # an independent computation: the same draws of block re-splits of these windows, at the
    # kernel score's rate (each direction at half of it)
    draws = permutation_null_rulsif(None, 20, win.sigma, win.lam, 0.1, True, 10 * NULL_POOL,
                                    np.random.default_rng(7), block=3, gram=win.gram(), directions=True)
    floor = exp_tail_threshold(draws.ravel(), 1e-4 / 2)
    assert cal.floor_threshold == pytest.approx(floor, rel=1e-12)
    assert thr == cal.threshold == max(ar_thr, cal.floor_threshold)
    assert cal.ar_threshold == ar_thr and cal.pool_count == pool_count  # the AR null is untouched
    assert cal.floor_count == NULL_POOL  # a fresh pool: these windows' re-splits only


def _floor_below_the_resolvable_size(win):
    """A calibrator confirmed with the floor of ``win`` (n = 20, blocks of 3) below the resolvable
    size, and an independent computation of the same draws."""
    cal = _calibrator()
    cal.calibrate_ar(_ar_values(60), 20, 0.5, 0.1, np.random.default_rng(1))
    cal.confirm_with_floor(win, 20, 3, np.random.default_rng(7), resolves=False)
    draws = permutation_null_rulsif(None, 20, win.sigma, win.lam, 0.1, True, 10 * NULL_POOL,
                                    np.random.default_rng(7), block=3, gram=win.gram(), directions=True)
    return cal, draws


def test_below_the_resolvable_size_the_floor_is_the_largest_drawn_re_split():
    win = _sparse_windows()
    cal, draws = _floor_below_the_resolvable_size(win)
    assert cal.floor_threshold == draws.max()
    assert cal.floor_threshold < exp_tail_threshold(draws.ravel(), 1e-4 / 2)


def test_a_tie_with_the_top_passes_where_only_the_own_split_and_its_mirror_reach_it():
    # continuous windows: one re-split at the top, the windows' own (or its mirror) when drawn
    values = np.random.default_rng(3).normal(size=(42, 1))
    win = TwoWindowRuLSIF(3, 20, 0.5, 0.1, alpha=0.1)
    for row in embed(values, 3):
        win.push(row)
    cal, draws = _floor_below_the_resolvable_size(win)
    assert (draws.max(axis=1) >= draws.max() * (1 - 1e-6)).sum() == 1
    assert cal.floor_threshold == pytest.approx(draws.max(), rel=1e-8)
    assert exceeds(draws.max(), cal.floor_threshold)  # a tie passes, on every machine
    assert not exceeds(draws.max() * (1 - 1e-7), cal.floor_threshold)


def test_a_tie_with_the_top_does_not_pass_where_many_re_splits_reach_it():
    # one event among zeros: every re-split with the event's rows in the current window scores
    # as the windows' own split does, about half of them; the split is not extreme among them
    win = _sparse_windows()
    cal, draws = _floor_below_the_resolvable_size(win)
    assert (draws.max(axis=1) >= draws.max() * (1 - 1e-6)).sum() > 10
    assert not exceeds(draws.max(), cal.floor_threshold)


def test_confirming_before_any_ar_threshold_leaves_the_threshold_as_it_is():
    cal = _calibrator()
    assert math.isnan(cal.confirm_with_floor(_sparse_windows(), 20, 3, np.random.default_rng(7)))
    assert math.isnan(cal.floor_threshold)


def test_state_round_trip_keeps_the_ar_threshold_and_the_floor_in_force():
    cal = _calibrator()
    cal.calibrate_ar(_ar_values(60), 20, 0.5, 0.1, np.random.default_rng(1))
    cal.confirm_with_floor(_sparse_windows(), 20, 3, np.random.default_rng(7))
    meta, arrays = cal.to_state()
    back = _calibrator()
    back.load_state(meta, arrays)
    assert (back.threshold, back.ar_threshold, back.floor_threshold, back.kernel_rate) == (
        cal.threshold, cal.ar_threshold, cal.floor_threshold, cal.kernel_rate)
    old = {k: v for k, v in meta.items() if k not in ("ar_threshold", "floor_threshold", "kernel_rate")}
    back = _calibrator()
    back.load_state(old, arrays)  # a checkpoint from before: the threshold in force stands for the AR one
    assert back.ar_threshold == cal.threshold and back.kernel_rate == 1e-4 / 2


def test_state_round_trip_restores_pools_and_thresholds():
    cal = _calibrator()
    cal.calibrate_ar(_ar_values(80, channels=2), 24, 1.0, 0.1, np.random.default_rng(1), corr_view=True,
                     channel_view=True)
    meta, arrays = cal.to_state()
    back = _calibrator()
    back.load_state(meta, arrays)
    assert back.threshold == cal.threshold and back.pool_count == cal.pool_count
    np.testing.assert_array_equal(back.pool, cal.pool)
    np.testing.assert_array_equal(back.corr_pool, cal.corr_pool)
    np.testing.assert_array_equal(back.corr_thresholds, cal.corr_thresholds)
    np.testing.assert_array_equal(back.channel_pool, cal.channel_pool)
    np.testing.assert_array_equal(back.channel_thresholds, cal.channel_thresholds)
    assert back.channel_count == cal.channel_count


def test_state_round_trip_keeps_the_permutation_floor_and_the_degenerate_flag():
    cal = _calibrator()
    cal.calibrate_ar(np.zeros((60, 1)), 20, 0.5, 0.1, np.random.default_rng(1), win=_sparse_windows(), block=3)
    meta, arrays = cal.to_state()
    back = _calibrator()
    back.load_state(meta, arrays)
    np.testing.assert_array_equal(back.floor_pool, cal.floor_pool)
    assert back.floor_count == cal.floor_count and back.degenerate == cal.degenerate
    old = {k: v for k, v in arrays.items() if k != "fpool"}  # a checkpoint from before the floor
    back.load_state(meta, old)
    assert back.floor_count == 0


def test_unknown_null_is_rejected_with_the_choices():
    with pytest.raises(ValueError, match="'ar' or 'permutation'"):
        _calibrator("bootstrap")


def _stretch_with_a_gross_value(value, seed=0, length=103, at=20):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(length, 1))
    x[at, 0] += value
    return x


def test_a_robust_line_is_not_tilted_by_one_gross_value():
    from ratiowatch.stream.calibration.null import _around_trend

    x = 0.01 * np.arange(103)[:, None] + _stretch_with_a_gross_value(1e4)
    values = x[-53:]
    _, plain = _around_trend(values, x)
    _, robust = _around_trend(values, x, robust=True)
    assert abs(plain[0]) > 0.2  # over 20 noise sd across the stretch: every surrogate a ramp
    assert robust[0] == pytest.approx(0.01, abs=0.005)


def test_a_robust_line_is_the_plain_line_where_no_value_is_gross():
    from ratiowatch.stream.calibration.null import _around_trend

    x = 0.02 * np.arange(103)[:, None] + _stretch_with_a_gross_value(0.0, seed=3)
    fit_plain, plain = _around_trend(x[-53:], x)
    fit_robust, robust = _around_trend(x[-53:], x, robust=True)
    assert np.array_equal(plain, robust) and np.array_equal(fit_plain, fit_robust)


def test_the_calibrator_fits_the_robust_line_when_asked():
    x = _stretch_with_a_gross_value(1e4, seed=1)
    thresholds = {}
    for robust in (False, True):
        cal = NullCalibrator("ar", "rulsif", 0.1, True, 10, 1e-4, 3, robust_line=robust)
        cal.calibrate_ar(x[-53:], 20, 1.0, 0.1, np.random.default_rng(0), trend_values=x)
        thresholds[robust] = cal.threshold
    clean = _stretch_with_a_gross_value(0.0, seed=1)
    cal = NullCalibrator("ar", "rulsif", 0.1, True, 10, 1e-4, 3)
    cal.calibrate_ar(clean[-53:], 20, 1.0, 0.1, np.random.default_rng(0), trend_values=clean)
    assert thresholds[False] > 2 * cal.threshold
    assert thresholds[True] == pytest.approx(cal.threshold, rel=0.25)


def test_kliep_surrogate_windows_beyond_the_kernels_reach_score_as_windows_without_overlap():
    # AR surrogates fitted around one gross value can spread every pair of samples beyond the
    # kernel's reach; such a draw is a maximal change of the null, not an error of the stream
    from ratiowatch.core.kliep_window import KL_NO_OVERLAP, TwoWindowKLIEP

    values = np.random.default_rng(0).normal(size=(60, 1))
    values[30, 0] = 1e6
    cal = _calibrator(method="kliep")
    cal.calibrate_ar(values, 20, 1e-4, 0.1, np.random.default_rng(1),
                     make_state=lambda: TwoWindowKLIEP(3, 20, 1e-4))
    assert (cal.pool == KL_NO_OVERLAP).all() and cal.threshold == pytest.approx(KL_NO_OVERLAP)


def _views_state():
    cal = _calibrator()
    cal.calibrate_ar(_ar_values(80, channels=3), 24, 1.0, 0.1, np.random.default_rng(1), corr_view=True,
                     channel_view=True)
    return cal.to_state()


@pytest.mark.parametrize("key, bad", [("corr_thr", np.ones(1)), ("channel_thr", np.ones(5)),
                                      ("cpool", np.ones((NULL_POOL, 10, 2))), ("nullpool", np.ones(2))])
def test_restoring_pools_or_thresholds_of_the_wrong_shape_for_the_channels_is_refused_naming_them(key, bad):
    meta, arrays = _views_state()
    back = _calibrator()
    back.load_state(meta, arrays, dim=3)  # as written: 3 pairs, 6 channel statistics
    with pytest.raises(ValueError, match=f"damaged one: '{key}' has shape"):
        back.load_state(meta, {**arrays, key: bad}, dim=3)


@pytest.mark.parametrize("count", [-1, 1.5, "8", 10**9])
def test_restoring_a_pool_count_that_is_no_count_is_refused_naming_it(count):
    meta, arrays = _views_state()
    with pytest.raises(ValueError, match="'nullpool_i' in 'meta'"):
        _calibrator().load_state({**meta, "nullpool_i": count}, arrays, dim=3, seen=400)

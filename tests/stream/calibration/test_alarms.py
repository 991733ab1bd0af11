"""Alarm calibration, peak picking, embedding ring and preprocessing."""

import json

import math

import numpy as np
import pytest
from scipy import stats

from ratiowatch.stream.calibration.peaks import Alarm, PeakPicker
from ratiowatch.stream.calibration.permutation import block_permutation, block_permutations, permutation_null_rulsif
from ratiowatch.stream.calibration.thresholds import gamma_threshold
from naive import rulsif_window_score
from ratiowatch.stream.series.embedding import History, embed
from ratiowatch.stream.series.preprocess import Differencer, fill_missing, robust_scale


def test_gamma_threshold_matches_a_known_gamma_tail():
    rng = np.random.default_rng(0)
    null = rng.gamma(3.0, 0.5, size=20_000)
    thr = gamma_threshold(null, 1e-3)
    assert thr == pytest.approx(stats.gamma.isf(1e-3, 3.0, scale=0.5), rel=0.1)
    # and the realised exceedance rate on fresh null draws is near the target
    fresh = rng.gamma(3.0, 0.5, size=200_000)
    assert np.mean(fresh > thr) < 3e-3


def test_gamma_threshold_rejects_bad_input():
    with pytest.raises(ValueError):
        gamma_threshold([1.0, 2.0], 1e-3)
    with pytest.raises(ValueError):
        gamma_threshold(np.ones(10), 0.0)
    assert np.isfinite(gamma_threshold(np.ones(10), 1e-4))  # degenerate null: just above it


@pytest.mark.parametrize("alpha", [0.0, 0.1, 0.5])
@pytest.mark.parametrize("block", [1, 3])
def test_permutation_null_matches_direct_scores(alpha, block):
    rng = np.random.default_rng(1)
    pooled = rng.normal(size=(40, 3))
    from ratiowatch.core.kernels import gauss_kernel

    g = gauss_kernel(pooled, pooled, 1.3)
    null = permutation_null_rulsif(pooled, 20, 1.3, 0.1, alpha, True, 5, np.random.default_rng(7), block=block)
    given = permutation_null_rulsif(pooled, 20, 1.3, 0.1, alpha, True, 5, np.random.default_rng(7), block=block,
                                    gram=g)
    perms = block_permutations(40, block, 5, np.random.default_rng(7))  # the splits the null used
    direct = [rulsif_window_score(g, p[:20], p[20:], alpha, 0.1, True) for p in perms]
    np.testing.assert_allclose(null, direct, atol=1e-10)
    np.testing.assert_allclose(given, null, atol=1e-12)


def test_window_score_agrees_with_incremental_state():
    from ratiowatch.core.window import TwoWindowRuLSIF
    from ratiowatch.core.kernels import gauss_kernel

    rng = np.random.default_rng(2)
    x = rng.normal(size=(60, 2))
    st = TwoWindowRuLSIF(2, 30, 0.9, 0.1, alpha=0.1)
    for row in x:
        st.push(row)
    st.set_params(0.9, 0.1)
    g = gauss_kernel(x, x, 0.9)
    assert sum(st.scores()) == pytest.approx(
        rulsif_window_score(g, np.arange(30), np.arange(30, 60), 0.1, 0.1, True), abs=1e-9)


def test_block_permutation_is_a_permutation_of_blocks():
    p = block_permutation(11, 3, np.random.default_rng(0))
    assert sorted(p.tolist()) == list(range(11))
    starts = [i for i in range(len(p)) if p[i] % 3 == 0]
    for s in starts:  # each block stays contiguous and in order
        blk = p[s:s + 3]
        assert np.all(np.diff(blk) == 1) or len(blk) < 3 or blk[0] == 9


def test_peak_picker_reports_boundary_at_peak_and_alarm_time_separately():
    pk = PeakPicker(delay=3, min_spacing=5)
    scores = [0, 2, 5, 3, 2, 0, 0]
    out = [pk.update(t, s, 1.0, boundary=t - 10) for t, s in enumerate(scores)]
    alarms = [a for a in out if a]
    assert alarms == [Alarm(change_index=2 - 10, alarm_index=5, score=5.0, threshold=1.0)]
    assert alarms[0].delay == 13


def test_peak_picker_delay_bounds_the_alarm_time():
    pk = PeakPicker(delay=2, min_spacing=0)
    out = [pk.update(t, s, 1.0, boundary=t) for t, s in enumerate([3, 2, 2, 2, 2, 2, 2])]
    alarms = [a for a in out if a]
    assert len(alarms) == 1 and alarms[0].alarm_index == 2 and alarms[0].change_index == 0


def test_peak_picker_min_spacing_drops_close_alarms():
    pk = PeakPicker(delay=0, min_spacing=10)
    out = [pk.update(t, s, 1.0, boundary=t) for t, s in enumerate([2, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0])]
    assert [a.change_index for a in out if a] == [0, 12]


def _alarms(picker, scores, threshold=1.0):
    out = [picker.update(t, s, threshold, t) for t, s in enumerate(scores)]
    end = picker.flush(len(scores))
    return [a for a in out + [end] if a is not None]


def test_merge_gap_keeps_a_run_alive_across_a_short_dip_so_the_peak_is_reported():
    # a rising edge with a one-step dip below threshold, then the real peak at t = 6
    scores = [0.0, 1.2, 0.9, 1.5, 2.0, 2.5, 3.0, 2.0, 0.5, 0.5, 0.5, 0.5]
    first = _alarms(PeakPicker(delay=4, min_spacing=10), scores)
    merged = _alarms(PeakPicker(delay=4, min_spacing=10, merge_gap=3), scores)
    assert [a.change_index for a in first] == [1]  # the dip closed the run; spacing hid the peak
    assert [(a.change_index, a.alarm_index) for a in merged] == [(6, 10)]  # raised `delay` after the peak
    # a dip as long as merge_gap does end the run (at its last step)
    long_dip = [0.0, 1.2, 0.9, 0.9, 0.9, 3.0, 0.0, 0.0, 0.0]
    assert [(a.change_index, a.alarm_index) for a in _alarms(PeakPicker(4, 0, merge_gap=3), long_dip)] == \
        [(1, 4), (5, 8)]


def test_merge_gap_state_roundtrip_and_old_states():
    pk = PeakPicker(delay=5, min_spacing=3, merge_gap=4)
    pk.update(0, 2.0, 1.0, 0)
    pk.update(1, 0.0, 1.0, 1)  # inside the run's grace
    pk2 = PeakPicker.from_state(json.loads(json.dumps(pk.to_state())))
    assert pk2.merge_gap == 4 and [pk2.update(t, 0.0, 1.0, t) for t in range(2, 5)] == \
        [pk.update(t, 0.0, 1.0, t) for t in range(2, 5)]
    old = {k: v for k, v in PeakPicker(2, 2).to_state().items() if k not in ("merge_gap", "below")}
    assert PeakPicker.from_state(old).merge_gap == 1
    with pytest.raises(ValueError, match="merge_gap"):
        PeakPicker(1, 1, merge_gap=0)


def test_peak_picker_state_roundtrip():
    pk = PeakPicker(delay=5, min_spacing=3)
    pk.update(0, 2.0, 1.0, 0)
    pk2 = PeakPicker.from_state(pk.to_state())
    assert pk2.update(1, 0.0, 1.0, 1) == pk.update(1, 0.0, 1.0, 1)


def test_embedding_and_history_ring():
    x = np.arange(10.0)[:, None]
    assert embed(x, 3)[-1].tolist() == [7.0, 8.0, 9.0]
    h = History(capacity=4, dim=1)
    for v in range(10):
        h.push([float(v)])
    assert h.last(4).ravel().tolist() == [6.0, 7.0, 8.0, 9.0]
    assert len(h) == 4 and h.count == 10
    h2 = History.from_state(h.to_state())
    assert h2.subsequence(2).tolist() == [8.0, 9.0]
    with pytest.raises(ValueError):
        h.last(5)
    np.testing.assert_array_equal(h.last_view(3), h.last(3))


def test_univariate_fast_path_of_the_differencer_equals_the_general_path():
    rng = np.random.default_rng(1)
    v = rng.normal(size=300)
    v[rng.random(300) < 0.1] = np.nan
    v[:3] = np.nan  # held while never observed
    one, two = Differencer(dim=1, difference=False), Differencer(dim=2, difference=False)
    for x in v:
        a, b = one.step(np.array([x])), two.step(np.array([x, 0.0 if np.isnan(x) else x]))
        assert (a is None) == (b is None) and (a is None or a[0] == b[0])
    out = one.step(np.array([5.0]))
    out[0] = -1.0  # a fresh array each step: changing it must not touch the state
    assert one.step(np.array([np.nan]))[0] == 5.0
    with pytest.raises(ValueError, match="infinite"):
        one.step(np.array([-np.inf]))


def test_differencer_missing_value_policy():
    d = Differencer(dim=2)
    assert d.step(np.array([np.nan, 1.0])) is None  # channel 0 never seen: held
    assert d.step(np.array([1.0, 2.0])) is None  # first complete sample: no difference yet
    np.testing.assert_array_equal(d.step(np.array([3.0, np.nan])), [2.0, 0.0])  # carried forward
    with pytest.raises(ValueError, match="infinite"):
        d.step(np.array([np.inf, 1.0]))


def test_robust_scale_and_fill():
    x = np.r_[np.random.default_rng(0).normal(size=1000), 1e6][:, None]
    assert robust_scale(x)[0] == pytest.approx(1.0, abs=0.1)  # one outlier does not set the scale
    assert fill_missing([np.nan, 2.0, np.nan]).ravel().tolist() == [2.0, 2.0, 2.0]


def test_exp_tail_threshold_recovers_an_exponential_tail():
    from ratiowatch.stream.calibration.thresholds import exp_tail_threshold

    rng = np.random.default_rng(0)
    null = 0.3 + rng.exponential(0.5, size=20_000)
    # P(S > 0.3 + x) = exp(-x / 0.5): the 1e-4 quantile is 0.3 + 0.5 log(1e4)
    assert exp_tail_threshold(null, 1e-4) == pytest.approx(0.3 + 0.5 * np.log(1e4), rel=0.03)
    assert exp_tail_threshold(null, 0.7) == pytest.approx(np.quantile(null, 0.3))  # body: empirical


def test_exp_tail_threshold_handles_degenerate_and_bad_input():
    from ratiowatch.stream.calibration.thresholds import exp_tail_threshold

    thr = exp_tail_threshold(np.full(10, 2.0), 1e-4)
    assert 2.0 < thr < 2.0 + 1e-6  # constant null: anything measurably above it
    with pytest.raises(ValueError, match="at least 3"):
        exp_tail_threshold([1.0, np.nan], 1e-4)
    with pytest.raises(ValueError, match="false_alarm_rate"):
        exp_tail_threshold(np.arange(10.0), 1.0)


@pytest.mark.parametrize("symmetric", [True, False])
def test_permutation_null_equals_the_rulsif_definition_on_each_split(symmetric):
    # the definition: ratiowatch.core.rulsif's fit at the given sigma and lambda, every numerator sample a centre
    from ratiowatch.core.rulsif import fit_rulsif

    rng = np.random.default_rng(3)
    pooled = embed(rng.normal(size=109).cumsum() * 0.3, 10)  # the benchmark's shape: 2n = 100, k = 10
    n, sigma, lam, alpha = 50, 2.5, 0.1, 0.1
    null = permutation_null_rulsif(pooled, n, sigma, lam, alpha, symmetric, 3, np.random.default_rng(4), block=5)
    for s, p in zip(null, block_permutations(2 * n, 5, 3, np.random.default_rng(4))):
        a, b = pooled[p[:n]], pooled[p[n:]]
        want = fit_rulsif(a, b, alpha=alpha, sigma=sigma, lam=lam, n_centres=n).pe
        if symmetric:
            want += fit_rulsif(b, a, alpha=alpha, sigma=sigma, lam=lam, n_centres=n).pe
        assert s == pytest.approx(want, rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("rows", [1, 4, 7, 50])
def test_row_dot_products_are_summed_in_index_order(rows):
    # four rows at a time must not change any row's order of additions: equal to the plain loop to the bit
    from ratiowatch.core.gram_pe import rows_dot

    rng = np.random.default_rng(5)
    mat, x = rng.normal(size=(rows, 13)), rng.normal(size=13)
    out = rows_dot(mat, x, np.empty(rows))
    for i in range(rows):
        acc = 0.0
        for a in range(13):
            acc += mat[i, a] * x[a]
        assert out[i] == acc


def test_block_permutations_of_single_indices_are_plain_shuffles_of_the_same_draws():
    # block = 1 moves every index on its own: the permutation is the shuffle order of the draws
    perms = block_permutations(23, 1, 6, np.random.default_rng(8))
    np.testing.assert_array_equal(perms, np.argsort(np.random.default_rng(8).random((6, 23)), axis=1))
    assert all(sorted(p) == list(range(23)) for p in perms.tolist())


def test_exp_tail_threshold_holds_the_rate_on_average_over_its_own_noise():
    # pools of 160 Exp(1) scores, as the streaming detector's: the threshold's true exceedance,
    # exp(-threshold), averaged over pools is the asked rate (the plug-in log(0.5 / rate) multiplier
    # overshoots it, by 1.75x from the scale estimate's noise alone)
    from ratiowatch.stream.calibration.thresholds import exp_tail_threshold

    rng, rate = np.random.default_rng(7), 2.5e-5
    pools = rng.exponential(1.0, size=(4000, 160))
    predictive = np.mean([np.exp(-exp_tail_threshold(p, rate)) for p in pools]) / rate
    med = np.median(pools, axis=1, keepdims=True)
    scale = np.where(pools > med, pools - med, 0.0).sum(axis=1) / (pools > med).sum(axis=1)
    plug_in = np.mean(np.exp(-(med[:, 0] + scale * np.log(0.5 / rate)))) / rate
    assert 0.9 < predictive < 1.2
    assert plug_in > 1.5


def test_draws_above_allowed_is_the_binomial_quantile_of_chance_exceedances():
    from fractions import Fraction

    from ratiowatch.stream.calibration.thresholds import draws_above_allowed

    def exact(size, rate, confidence=Fraction(99, 100)):  # the smallest c with P(count <= c) >= confidence
        rate, total = Fraction(rate), Fraction(0)
        for c in range(size + 1):
            total += math.comb(size, c) * rate ** c * (1 - rate) ** (size - c)
            if total >= confidence:
                return c

    for size in (1, 3, 160, 1000, 3000):
        for rate in (5e-5, 1e-3, 0.1):
            assert draws_above_allowed(size, rate) == exact(size, rate), (size, rate)
    with pytest.raises(ValueError, match="size"):
        draws_above_allowed(0, 1e-4)


def test_top_draws_floor_is_the_draw_that_chance_allows_above_the_threshold():
    from ratiowatch.stream.calibration.thresholds import exp_tail_threshold, top_draws_floor

    # a bounded score with an atom at its top, 5 of 160 draws: the tail fitted to them puts the
    # rate's quantile below the top, the draws do not allow it
    null = np.r_[np.random.default_rng(0).exponential(0.1, 155), np.full(5, 4.0)]
    assert exp_tail_threshold(null, 5e-5) < 4.0 == top_draws_floor(null, 5e-5)
    # 11,110 draws at 5e-5: three may lie above the rate's quantile by chance, so the fourth largest
    big = np.random.default_rng(1).exponential(size=11_110)
    assert top_draws_floor(big, 5e-5) == np.sort(big)[-4]
    assert math.isnan(top_draws_floor(np.array([np.nan]), 5e-5))


def test_the_top_draws_floor_costs_an_exponential_tail_little():
    # pools of 160 Exp(1) scores at the detector's rate: the floor (their largest) lifts the
    # threshold only where a draw lies above it (0.15 % of these pools), and the mean exceedance
    # stays near the rate (1.07 times it, with the floor and without)
    from ratiowatch.stream.calibration.thresholds import exp_tail_threshold, top_draws_floor

    rng, rate = np.random.default_rng(7), 2.5e-5
    pools = rng.exponential(1.0, size=(4000, 160))
    thr = np.array([max(exp_tail_threshold(p, rate), top_draws_floor(p, rate)) for p in pools])
    lifted = np.mean([top_draws_floor(p, rate) > exp_tail_threshold(p, rate) for p in pools])
    assert lifted < 0.005
    assert 0.85 < np.mean(np.exp(-thr)) / rate < 1.2


def test_exp_tail_threshold_multiplier_is_the_predictive_one():
    from ratiowatch.stream.calibration.thresholds import exp_tail_threshold

    null = np.array([0.0, 1.0, 2.0, 3.0, 5.0, 9.0])  # median 2.5; excesses 0.5, 2.5, 6.5 (m = 3, mean 19/6)
    rate = 1e-3
    mult = 3 * ((0.5 / rate) ** (1 / 3) - 1)
    assert exp_tail_threshold(null, rate) == pytest.approx(2.5 + 19 / 6 * mult, rel=1e-12)

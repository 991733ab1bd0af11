"""The channel view's rank statistics: reference against counting, compiled forms against the reference."""

import numpy as np
import pytest

from ratiowatch.stream.calibration.channels import channel_ratio, rank_diffs, surrogate_rank_diffs
from tests.naive import rank_stats


def test_rank_diffs_equal_the_counted_ranks_with_ties():
    rng = np.random.default_rng(0)
    past, cur = rng.normal(size=(15, 3)), rng.normal(1.0, 2.0, size=(15, 3))
    past[:, 2], cur[:, 2] = np.round(past[:, 2]), np.round(cur[:, 2])  # many ties
    np.testing.assert_allclose(rank_diffs(past, cur), rank_stats(past, cur), rtol=0, atol=1e-15)


def test_rank_diffs_are_zero_for_a_constant_channel_and_bounded_by_one_half():
    rng = np.random.default_rng(1)
    past, cur = rng.normal(size=(20, 2)), rng.normal(size=(20, 2)) + 100.0
    past[:, 1] = cur[:, 1] = 3.0
    d = rank_diffs(past, cur)
    assert d[0] == -0.5  # every current value above every past one
    assert d[1] == 0.0 and d[3] == 0.0


def test_rank_diffs_null_law_does_not_depend_on_the_marginal():
    # exchangeable windows: any monotone map of the values leaves the location statistic as it is,
    # and a positive scale leaves the spread statistic as it is (4: exact in floating point)
    rng = np.random.default_rng(2)
    past, cur = rng.standard_t(3, size=(500, 25, 1)), rng.standard_t(3, size=(500, 25, 1))
    d = rank_diffs(past, cur)
    np.testing.assert_array_equal(rank_diffs(np.exp(past), np.exp(cur))[..., 0], d[..., 0])
    np.testing.assert_array_equal(rank_diffs(4.0 * past, 4.0 * cur), d)
    # centred, with the Wilcoxon-Mann-Whitney variance (N + 1) / (3 N^2) at N = 2n = 50
    assert abs(d[:, 0].mean()) < 0.01 and d[:, 0].std() == pytest.approx(np.sqrt(51 / 3 / 2500), rel=0.1)


def test_rank_diffs_see_a_location_shift_and_a_spread_change():
    rng = np.random.default_rng(3)
    past = rng.normal(size=(50, 2))
    cur = rng.normal(size=(50, 2)) * [1.0, 3.0] + [2.0, 0.0]
    loc0, loc1, spread0, spread1 = rank_diffs(past, cur)
    assert loc0 < -0.3 and abs(loc1) < 0.15 and spread1 < -0.2 and abs(spread0) < 0.15


def test_rank_diffs_rejects_bad_windows():
    with pytest.raises(ValueError, match="one shape"):
        rank_diffs(np.zeros((10, 2)), np.zeros((9, 2)))
    with pytest.raises(ValueError, match="at least 2"):
        rank_diffs(np.zeros((1, 2)), np.zeros((1, 2)))


@pytest.mark.parametrize("d", [False, True])
def test_compiled_channel_view_equals_rank_diffs(d):
    rng = np.random.default_rng(4)
    n, k = 20, 3
    lv = np.cumsum(rng.normal(size=(2 * n + k - 1 + d, 3)), axis=0)
    lv[:, 2] = np.round(lv[:, 2])
    x = np.diff(lv, axis=0) if d else lv
    newest = x[k - 1:]
    thr = np.array([0.05, 0.07, 0.1, 0.2, np.inf, 0.3])
    want = np.max(np.abs(rank_diffs(newest[:n], newest[n:])) / thr)
    assert channel_ratio(lv, k, n, d, thr) == pytest.approx(want, rel=1e-12)
    sims = rng.normal(size=(5, 2 * n + k - 1, 3))
    np.testing.assert_allclose(surrogate_rank_diffs(sims, k - 1, n),
                               rank_diffs(sims[:, k - 1:k - 1 + n], sims[:, k - 1 + n:]), rtol=0, atol=1e-15)

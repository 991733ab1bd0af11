"""The level view's statistic and its unit-root switch: compiled forms against the reference,
the Dickey-Fuller statistic against an independent computation, and the test's size and power."""

import numpy as np
import pytest

from ratiowatch.stream.calibration.levels import (adf_t_stat, level_diffs, level_ratio, surrogate_level_diffs,
                                                  unit_root_rejected)
from tests.naive import adf_t_stat as naive_adf_t_stat


def test_level_diff_is_the_current_minus_the_past_window_mean():
    past, cur = np.array([[1.0, 0.0], [3.0, 0.0]]), np.array([[5.0, 1.0], [7.0, -1.0]])
    np.testing.assert_array_equal(level_diffs(past, cur), [4.0, 0.0])
    with pytest.raises(ValueError, match="one shape"):
        level_diffs(np.zeros((3, 1)), np.zeros((2, 1)))


def test_triangular_filter_of_the_differences_equals_the_level_diff():
    """D written in the windows' 2n differences (the surrogates' form) is the mean-level difference
    of the levels they integrate to, whatever the level before them."""
    rng = np.random.default_rng(0)
    n, k, m = 17, 3, 2
    sims = rng.normal(size=(6, 2 * n + k - 1, m))
    levels = 5.0 + np.cumsum(sims[:, k - 1:], axis=1)
    np.testing.assert_allclose(surrogate_level_diffs(sims, k - 1, n), level_diffs(levels[:, :n], levels[:, n:]),
                               rtol=0, atol=1e-12)


def test_compiled_one_step_ratio_equals_the_reference():
    rng = np.random.default_rng(1)
    n = 20
    lv = np.cumsum(rng.normal(size=(2 * n, 3)), axis=0)
    scale, thr = np.array([0.5, 2.0, 1.0]), np.array([1.5, 0.7, np.inf])
    want = np.max(np.abs(level_diffs(lv[:n], lv[n:]) / scale) / thr)
    assert level_ratio(lv, n, scale, thr) == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("seed", range(3))
def test_dickey_fuller_statistic_equals_the_frisch_waugh_lovell_computation(seed):
    rng = np.random.default_rng(seed)
    for x in (rng.normal(size=150).cumsum(), rng.normal(size=60), np.arange(400) * 0.01 + rng.normal(size=400)):
        assert adf_t_stat(x) == pytest.approx(naive_adf_t_stat(x), rel=1e-9)


def test_unit_root_test_holds_its_size_on_random_walks_and_rejects_stationary_series():
    rng = np.random.default_rng(3)
    for t_len in (60, 400):
        size = np.mean([unit_root_rejected(rng.normal(size=t_len).cumsum()) for _ in range(500)])
        assert 0.015 <= size <= 0.08, (t_len, size)  # 5 %: 500 draws' standard error is 1 %
    power = np.mean([unit_root_rejected(rng.normal(size=400)) for _ in range(100)])
    assert power == 1.0


def test_unit_root_stands_where_the_test_is_undefined():
    assert not unit_root_rejected(np.ones(300))  # constant values
    assert not unit_root_rejected(np.arange(10.0))  # too few values
    assert np.isnan(adf_t_stat(np.ones(300)))


@pytest.mark.parametrize("t_len", range(0, 20))
def test_unit_root_stands_for_every_series_too_short_to_test(t_len):
    """Two values leave the regression no row (T - p - 1 = 0): the critical value divided by 0."""
    assert unit_root_rejected(np.arange(float(t_len))) is False


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_the_adf_statistic_of_values_that_are_not_finite_is_undefined(bad):
    # NaN was a LinAlgError, with LAPACK's complaint printed to stderr
    x = np.random.default_rng(0).normal(size=200)
    x[50] = bad
    assert np.isnan(adf_t_stat(x))

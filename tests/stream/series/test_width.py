"""Subsequence width from the data (ratiowatch.stream.series.width)."""

import numpy as np
import pytest

from ratiowatch.stream.series.width import CYCLE_PARTS, DEFAULT_WIDTH, significant_period, subsequence_width


def _jittered_sine(t_len, period, seed, noise=0.3):
    rng = np.random.default_rng(seed)
    steps = 2 * np.pi / (period * (1 + 0.05 * rng.normal(size=t_len)))
    return np.sin(np.cumsum(steps)) + rng.normal(0, noise, t_len)


@pytest.mark.parametrize("period", [7, 12, 24, 50])
def test_a_jittered_seasonal_series_gets_its_period_and_a_quarter_cycle_width(period):
    for seed in range(3):
        width, found = subsequence_width(_jittered_sine(3000, period, seed))
        assert abs(found - period) <= max(1, period // 10), (period, seed, found)
        assert width == max(DEFAULT_WIDTH, round(found / CYCLE_PARTS)), (period, seed, width)


@pytest.mark.parametrize("seed", range(5))
def test_series_without_a_cycle_get_the_default_width(seed):
    rng = np.random.default_rng(seed)
    e = rng.normal(size=2000)
    ar = np.zeros(2000)
    for t in range(1, 2000):
        ar[t] = 0.9 * ar[t - 1] + e[t]
    for x in (e, ar, e.cumsum(), 0.01 * np.arange(2000) + e):
        assert subsequence_width(x) == (DEFAULT_WIDTH, 0)


def test_short_series_keep_ten_subsequences():
    rng = np.random.default_rng(0)
    assert subsequence_width(rng.normal(size=15)) == (1, 0)
    assert subsequence_width(rng.normal(size=29)) == (2, 0)
    # a cycle must stand out of the autocorrelation's own noise: five clean cycles do not
    # (Bartlett's band at lag 20 of T = 100 is 1.2), twenty do
    t = np.arange(400)
    assert subsequence_width(np.sin(2 * np.pi * t[:100] / 20)) == (DEFAULT_WIDTH, 0)
    assert subsequence_width(np.sin(2 * np.pi * t / 20)) == (5, 20)


def test_multivariate_input_takes_the_longest_channel_period():
    t = np.arange(3000)
    x = np.c_[np.sin(2 * np.pi * t / 12), np.sin(2 * np.pi * t / 40)]
    assert subsequence_width(x) == (10, 40)


def test_a_quarter_cycle_rounds_to_the_nearest_sample_and_never_falls_below_the_default():
    t = np.arange(360)
    assert subsequence_width(np.sin(2 * np.pi * t / 30)) == (8, 30)
    assert subsequence_width(np.sin(2 * np.pi * np.arange(600) / 8)) == (DEFAULT_WIDTH, 8)


def test_constant_and_bad_inputs():
    assert significant_period(np.ones(100)) == 0
    assert subsequence_width(np.ones(100)) == (DEFAULT_WIDTH, 0)
    with pytest.raises(ValueError):
        subsequence_width(np.r_[1.0, np.nan, 2.0])
    with pytest.raises(ValueError):
        subsequence_width(np.zeros(100), default=0)

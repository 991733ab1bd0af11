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
    # (Bartlett's band at lag 20 of T = 100, summed up to the peak, is 1.2), twenty do
    t = np.arange(400)
    assert subsequence_width(np.sin(2 * np.pi * t[:100] / 20)) == (DEFAULT_WIDTH, 0)
    assert subsequence_width(np.sin(2 * np.pi * t / 20)) == (5, 20)


def test_with_the_band_up_to_the_first_zero_crossing_five_cycles_in_view_are_enough():
    """The router's question: a cycle's own autocorrelation between the first zero crossing and
    the peak does not widen the band. Summed up to the peak (the width rule), five clean cycles of
    20 (T = 100) and five noisy cycles of 96 (T = 480) are not periodic; three must always be in
    view (the lags searched end at T / 3)."""
    t = np.arange(480)
    assert significant_period(np.sin(2 * np.pi * t[:100] / 20), band="zero_crossing") == 20
    assert significant_period(np.sin(2 * np.pi * t[:50] / 20), band="zero_crossing") == 0
    for seed in range(5):
        x = _jittered_sine(480, 96, seed, noise=1.0)
        assert abs(significant_period(x, band="zero_crossing") - 96) <= 10, seed
        assert significant_period(x) == 0


def test_a_staircase_is_a_sawtooth_once_detrended_and_only_the_wider_band_keeps_it_aperiodic():
    """Why the width rule keeps the band up to the peak: four clean steps 200 apart, less their
    least-squares line, are a sawtooth of period 200. With the narrower band the offline detector
    took the staircase for periodic, scored a whole cycle of 200 as well, and lost three of its four
    steps (the segments between them are too short for that width)."""
    rng = np.random.default_rng(0)
    stairs = np.floor(np.arange(1000) / 200) + 0.05 * rng.normal(size=1000)
    assert significant_period(stairs) == 0
    assert significant_period(stairs, band="zero_crossing") == 200


@pytest.mark.parametrize("kind", ["t3", "outliers"])
def test_heavy_tails_and_gross_outliers_do_not_make_a_period(kind):
    """Winsorised at 3 robust sds before the autocorrelation: without the clip, with the band up
    to the first zero crossing, 17 % of t(3) series and 8 % of series with 1 % gross outliers of
    3,840 samples got a period (the level is 5 %)."""
    from ratiowatch.stream.evaluate.synthetic import null_series

    for band in ("peak", "zero_crossing"):
        found = sum(significant_period(null_series(kind, 3840, seed), band=band) > 0 for seed in range(40))
        assert found <= 2, (band, found)


def test_the_period_is_the_written_out_rule():
    from ratiowatch.stream.evaluate.synthetic import null_series

    from naive import significant_period as naive_period

    for kind in ("ar0", "ar09", "t3", "outliers", "seasonal24", "pulses40", "counts", "zero_inflated", "trend"):
        for t_len in (15, 60, 240, 960):
            for seed in range(3):
                x = null_series(kind, t_len, seed)
                for band in ("peak", "zero_crossing"):
                    assert significant_period(x, band=band) == naive_period(x, band=band), (kind, t_len, seed, band)


def test_multivariate_input_takes_the_longest_channel_period():
    t = np.arange(3000)
    x = np.c_[np.sin(2 * np.pi * t / 12), np.sin(2 * np.pi * t / 40)]
    assert subsequence_width(x) == (10, 40)


def test_a_quarter_cycle_rounds_to_the_nearest_sample_and_never_falls_below_the_default():
    t = np.arange(360)
    assert subsequence_width(np.sin(2 * np.pi * t / 30)) == (8, 30)
    assert subsequence_width(np.sin(2 * np.pi * np.arange(600) / 8)) == (DEFAULT_WIDTH, 8)


@pytest.mark.parametrize("band", ["peak", "zero_crossing"])
def test_the_period_does_not_depend_on_the_units(band):
    rng = np.random.default_rng(4)
    x = np.sin(2 * np.pi * np.arange(600) / 30) + rng.normal(0, 0.3, 600)
    expected = significant_period(x, band=band)
    assert expected == 30
    for scale in (1e-12, 1e-7, 1e7, 1e300, 2.0 ** -1000):
        assert significant_period(scale * x, band=band) == expected, scale


def test_a_line_at_a_large_level_leaves_rounding_noise_without_a_period():
    # detrended, a straight line is rounding noise of the line's magnitude, which can look cyclic
    t = np.arange(900.0)
    ulps = 1e6 + 2e-10 * np.sin(2 * np.pi * t / 25)  # a cycle of one or two units in the last place
    assert np.unique(ulps).size <= 5
    for line in (1e6 + 0.0 * t, 1e6 + 3.0 * t, 1e-7 * t, ulps):
        assert significant_period(line, band="zero_crossing") == 0
        assert significant_period(line) == 0


def test_constant_and_bad_inputs():
    assert significant_period(np.ones(100)) == 0
    with pytest.raises(ValueError, match="band"):
        significant_period(np.ones(100), band="lag")
    assert subsequence_width(np.ones(100)) == (DEFAULT_WIDTH, 0)
    with pytest.raises(ValueError):
        subsequence_width(np.r_[1.0, np.nan, 2.0])
    with pytest.raises(ValueError):
        subsequence_width(np.zeros(100), default=0)


def test_significant_period_counts_the_non_finite_values_it_was_given():
    # one NaN spread through the fitted line, and the message counted every value as non-finite
    x = np.r_[np.sin(np.arange(100.0)), np.nan]
    with pytest.raises(ValueError, match=r"got 101 values \(1 non-finite\)"):
        significant_period(x)

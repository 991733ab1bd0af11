"""Period estimation and block aggregation (ratiowatch.stream.series.period): what the offline period rule relies on."""

import numpy as np
import pytest

from ratiowatch.stream.series.period import aggregate_periods, autocorrelation, block_centre, block_edges, block_end, estimate_period


@pytest.mark.parametrize("period", [12, 25, 40, 97, 250])
def test_sine_period_recovered_within_one_sample(period):
    rng = np.random.default_rng(period)
    t = np.arange(max(1500, 6 * period))
    x = np.sin(2 * np.pi * t / period + 0.3) + rng.normal(0, 0.2, t.size)
    assert abs(estimate_period(x) - period) <= 1


@pytest.mark.parametrize("period", [16, 30, 64])
def test_sawtooth_period_recovered_exactly(period):
    x = np.tile(np.linspace(-1.0, 1.0, period, endpoint=False), 1200 // period + 1)
    assert estimate_period(x) == period


def test_period_of_a_non_sinusoidal_shape_is_the_repeat_length():
    rng = np.random.default_rng(3)
    shape = rng.normal(size=37).cumsum()  # an arbitrary repeated pattern
    x = np.tile(shape, 30) + rng.normal(0, 0.1, 37 * 30)
    assert estimate_period(x) == 37


@pytest.mark.parametrize("seed", range(8))
def test_no_period_on_white_noise(seed):
    for size in (64, 250, 2000):
        assert estimate_period(np.random.default_rng(seed).normal(size=size)) == 0


@pytest.mark.parametrize("seed", range(8))
def test_no_period_on_random_walk(seed):
    for size in (64, 250, 2000):
        assert estimate_period(np.random.default_rng(100 + seed).normal(size=size).cumsum()) == 0


def test_no_period_on_trend_constant_or_too_short_input():
    assert estimate_period(np.linspace(0.0, 5.0, 500)) == 0
    assert estimate_period(np.full(100, 3.0)) == 0
    assert estimate_period(np.array([1.0, -1.0, 1.0, -1.0, 1.0])) == 0  # max lag 2 < 3


def test_weak_periodicity_needs_min_acf():
    rng = np.random.default_rng(7)
    t = np.arange(2000)
    x = 0.5 * np.sin(2 * np.pi * t / 40) + rng.normal(0, 1.0, t.size)  # autocorrelation at 40 ~ 0.11
    assert estimate_period(x) == 0
    assert abs(estimate_period(x, min_acf=0.05) - 40) <= 1


def test_autocorrelation_matches_the_direct_formula():
    x = np.random.default_rng(0).normal(size=300)
    xc = x - x.mean()
    direct = np.array([xc[: 300 - h] @ xc[h:] for h in range(20)]) / (xc @ xc)
    np.testing.assert_allclose(autocorrelation(x, 20), direct, atol=1e-12)
    np.testing.assert_array_equal(autocorrelation(np.full(50, 2.0), 5), np.zeros(5))


@pytest.mark.parametrize("scale", [2.0 ** -40, 2.0 ** 40, 2.0 ** -1000, 2.0 ** 1000])
def test_autocorrelation_is_the_same_at_every_power_of_two_scale(scale):
    # a power of two scales every float exactly, so a scale-free statistic must come out bit-identical
    rng = np.random.default_rng(1)
    x = np.sin(2 * np.pi * np.arange(400) / 24) + rng.normal(0, 0.3, 400) + 5.0
    np.testing.assert_array_equal(autocorrelation(scale * x, 60), autocorrelation(x, 60))


def test_data_in_small_units_keep_their_cycle():
    # values near 1e-7 (a cycle of amplitude 1e-7 V, say) were once taken for a constant: the test
    # for a constant was absolute for data below 1
    x = np.sin(2 * np.pi * np.arange(600) / 25)
    assert estimate_period(1e-7 * x) == estimate_period(x) == 25
    # and a cycle a millionth of its level, as a large counter's daily swing
    assert estimate_period(3e9 + 1e3 * x) == 25


def test_rounding_noise_is_constant_relative_to_the_magnitude_it_came_from():
    assert not autocorrelation(np.full(50, 1e-300), 5).any()
    # a level of 1e6 less its mean: what is left is rounding, with the magnitude given
    rng = np.random.default_rng(2)
    noise = 1e-11 * rng.normal(size=200)
    assert not autocorrelation(noise, 5, magnitude=1e6).any()
    assert autocorrelation(noise, 5)[0] == 1.0  # on its own, the same values are a series


def test_values_near_the_float_limit_do_not_overflow():
    x = np.sin(2 * np.pi * np.arange(600) / 25)
    np.testing.assert_allclose(autocorrelation(1e300 * x, 40), autocorrelation(x, 40), atol=1e-12)
    assert estimate_period(1e300 * x) == 25


def test_bad_input_is_rejected_with_a_reason():
    with pytest.raises(ValueError, match="fill missing"):
        estimate_period(np.r_[np.ones(50), np.nan])
    with pytest.raises(ValueError, match="min_acf"):
        estimate_period(np.ones(50), min_acf=1.5)
    with pytest.raises(ValueError, match="period >= points"):
        block_edges(100, 4, 8)
    with pytest.raises(ValueError, match="shorter than one block"):
        aggregate_periods(np.ones(3), 40, 8)


@pytest.mark.parametrize("period", [16, 23, 50, 61, 120])
def test_blocks_are_phase_locked_to_the_period(period):
    edges = block_edges(20 * period + 7, period, 8)
    assert edges[0] == 0 and np.all(np.diff(edges) >= 1) and edges[-1] <= 20 * period + 7
    # every 8 consecutive blocks span exactly one period, whatever the period is
    np.testing.assert_array_equal(edges[8:] - edges[:-8], period)
    # block sizes differ by at most one sample
    assert np.ptp(np.diff(edges)) <= 1


@pytest.mark.parametrize("period", [16, 23, 50])
def test_aggregated_values_and_index_mapping_are_exact(period):
    x = np.random.default_rng(period).normal(size=10 * period + 3)
    values, edges = aggregate_periods(x, period, 8)
    assert values.size == edges.size - 1
    for j, v in enumerate(values):
        # the value of block j is the mean of exactly the samples from its start to its end
        assert v == pytest.approx(x[edges[j]: block_end(j, edges) + 1].mean(), rel=1e-12)
        assert edges[j] <= block_centre(j, edges) <= block_end(j, edges) == edges[j + 1] - 1
    assert block_end(values.size + 5, edges) == edges[-1] - 1  # clipped to the last block

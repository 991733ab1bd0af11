"""Period estimation and block aggregation (stream.period): what the offline period rule relies on."""

import numpy as np
import pytest

from stream.period import aggregate, autocorrelation, block_centre, block_end, estimate_period


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


def test_bad_input_is_rejected_with_a_reason():
    with pytest.raises(ValueError, match="fill missing"):
        estimate_period(np.r_[np.ones(50), np.nan])
    with pytest.raises(ValueError, match="min_acf"):
        estimate_period(np.ones(50), min_acf=1.5)
    with pytest.raises(ValueError, match="block size"):
        aggregate(np.ones(10), 0)
    with pytest.raises(ValueError, match="shorter than one block"):
        aggregate(np.ones(3), 4)


def test_aggregate_is_the_mean_of_complete_blocks():
    x = np.arange(23.0)
    a = aggregate(x, 5)
    np.testing.assert_array_equal(a, [2.0, 7.0, 12.0, 17.0])  # the partial block 20..22 is dropped
    np.testing.assert_array_equal(aggregate(x, 1), x)
    two = np.c_[x, -2 * x]
    np.testing.assert_array_equal(aggregate(two, 5), np.c_[a, -2 * a])


@pytest.mark.parametrize("s", [1, 2, 3, 8, 13])
def test_block_index_mapping_is_exact(s):
    idx = np.arange(10 * s)
    blocks = idx // s
    centre, end = block_centre(blocks, s), block_end(blocks, s)
    # every sample lies in its block: start <= i <= end, and the centre is inside the block
    assert np.all((blocks * s <= idx) & (idx <= end))
    assert np.all((blocks * s <= centre) & (centre <= end))
    assert np.all(end - blocks * s == s - 1)
    assert np.all(centre == blocks * s + s // 2)
    # the aggregated value of block j is the mean of exactly the samples mapped to it
    x = np.random.default_rng(s).normal(size=idx.size)
    for j, v in enumerate(aggregate(x, s)):
        assert v == pytest.approx(x[j * s: block_end(j, s) + 1].mean())
    assert block_centre(4, s) == int(block_centre(np.array([4]), s)[0])
    assert block_end(4, s) == int(block_end(np.array([4]), s)[0])

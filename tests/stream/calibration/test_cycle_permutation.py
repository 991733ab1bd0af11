"""The cycle permutation null of a periodic segment's split-profile maximum."""

import numpy as np
import pytest

from ratiowatch.core.split_profile import MultiWidthProfile, SplitProfile
from ratiowatch.stream.calibration.cycle_permutation import (BLOCK_CYCLES, MIN_BLOCKS, block_profile,
                                                             cycle_permutation_test, permutation_profile, row_blocks,
                                                             window_null_maxima)
from ratiowatch.stream.calibration.split_test import gumbel_threshold, max_split_test
from ratiowatch.stream.evaluate.synthetic import _jittered_phase
import naive


def _jittered_sine(seed, t_len, period, noise=0.1):
    rng = np.random.default_rng(seed)
    return np.sin(2 * np.pi * _jittered_phase(rng, t_len, float(period))) + rng.normal(0, noise, t_len)


def test_blocks_cover_every_row_once_in_order():
    for n, b in [(1, 1), (7, 3), (48, 48), (100, 24)]:
        blocks = row_blocks(n, b)
        assert np.array_equal(np.concatenate(blocks), np.arange(n))
        assert all(len(bl) == b for bl in blocks[:-1]) and 1 <= len(blocks[-1]) <= b


def test_null_maxima_are_the_profiles_of_the_segments_own_rows_rearranged():
    """Each null draw is the profile maximum of the segment's rows in an order of whole blocks of
    two cycles, as a from-scratch fit of every split computes it (tests/naive.py)."""
    period, t_len = 12, 12 * BLOCK_CYCLES * MIN_BLOCKS + 40
    x = _jittered_sine(3, t_len, period)
    prof = SplitProfile(width=3, grid=7)
    test = cycle_permutation_test(x, prof, np.inf, period, 0.2, np.random.default_rng(5))
    assert test is not None and test.null.size == 9  # 2 / 0.2 - 1 draws, none exceeding +inf
    rng = np.random.default_rng(5)
    blocks = row_blocks(t_len - 3 + 1, BLOCK_CYCLES * period)
    splits = prof.candidates(t_len)
    for v in test.null:
        order = np.concatenate([blocks[j] for j in rng.permutation(len(blocks))])
        want = naive.split_profile(x, splits, 3, 1, order=order).max()
        assert v == pytest.approx(want, rel=1e-8)


def test_change_free_jittered_cycles_are_rejected_at_about_the_level():
    """30 change-free jittered sines (periods 7, 12, 24; 1,000 samples; seeds 0-9) at level 0.1:
    at most 8 rejections (Binomial(30, 0.1) exceeds 8 with probability 0.001). The rows of a
    strided profile are refused: their offsets from the cycle drift over many cycles, and blocks
    that break that memory made the null too narrow (module docstring)."""
    rejected = 0
    for period in (7, 12, 24):
        for seed in range(10):
            x = _jittered_sine(seed, 1000, period, noise=0.3)
            prof = permutation_profile(SplitProfile(width=max(3, round(period / 4))), 1000, period)
            stat, _ = prof.best(x)
            rejected += cycle_permutation_test(x, prof, stat, period, 0.1, np.random.default_rng(seed)).reject
    assert rejected <= 8, rejected


def test_a_level_shift_inside_jittered_cycles_is_found_where_the_ar_null_misses_it():
    """A sine of period 24 (noise sd 0.1) whose level moves up by its amplitude at 500 and back at
    1,000, seeds 0-9: the AR surrogates wander in amplitude and swallow the shift (no rejection at
    0.025); the cycles in random orders reject on at least 4 of 10 (5 when this was written). The
    permutations also rearrange the shifted cycles, so the null is wide under this alternative."""
    perm = ar = 0
    for seed in range(10):
        rng = np.random.default_rng(seed)
        t = np.arange(1500)
        x = np.sin(2 * np.pi * _jittered_phase(rng, 1500, 24.0)) + 0.1 * rng.normal(size=1500)
        x = x + ((t >= 500) & (t < 1000))
        prof = SplitProfile(width=6)
        stat, _ = prof.best(x)
        perm += cycle_permutation_test(x, prof, stat, 24, 0.025, np.random.default_rng(0)).reject
        ar += max_split_test(x, prof, stat, 0.025, np.random.default_rng(0)).reject
    assert perm >= 4 and ar == 0, (perm, ar)


def test_it_applies_to_the_finest_profile_at_stride_one_and_enough_cycles():
    both = MultiWidthProfile((SplitProfile(width=12, stride=3), SplitProfile(width=47, stride=11)))
    prof = permutation_profile(both, 2000, 47)
    assert (prof.width, prof.stride) == (12, 1)
    assert permutation_profile(both, 47 * BLOCK_CYCLES * MIN_BLOCKS - 20, 47) is None  # fewer than 8 blocks
    assert permutation_profile(SplitProfile(width=3), 6000, 12) is None  # more rows than the bound
    assert permutation_profile(SplitProfile(width=3), 2000, 0) is None  # no period
    assert cycle_permutation_test(np.zeros(100), SplitProfile(width=3), 1.0, 12, 0.05, np.random.default_rng(0)) is None


def test_it_takes_one_channel():
    with pytest.raises(ValueError, match="one channel"):
        cycle_permutation_test(np.zeros((500, 2)), SplitProfile(width=3), 1.0, 12, 0.05, np.random.default_rng(0))


class TestWindowNull:
    """The streaming form: one set of draws per calibration, for windows of other lengths."""

    def test_draws_are_whole_blocks_in_a_random_order_cut_at_random_rows(self):
        """Each draw is the profile maximum of the window's whole blocks in a random order, less a
        random number of rows (under one block) at each end, computed from scratch (tests/naive.py)."""
        period, t_len = 12, 12 * BLOCK_CYCLES * MIN_BLOCKS + 40
        x = _jittered_sine(4, t_len, period)
        prof = block_profile(SplitProfile(width=3, grid=7), period)
        got = window_null_maxima(x, prof, period, 6, np.random.default_rng(2))
        rng = np.random.default_rng(2)
        size = BLOCK_CYCLES * period
        blocks = [b for b in row_blocks(t_len - 3 + 1, size) if b.size == size]
        assert len(blocks) == (t_len - 2) // size
        for v in got:
            order = np.concatenate([blocks[j] for j in rng.permutation(len(blocks))])
            head, tail = int(rng.integers(0, size)), int(rng.integers(0, size))
            rows = order[head:order.size - tail]
            splits = prof.candidates(rows.size + 2)
            assert v == pytest.approx(naive.split_profile(x, splits, 3, 1, order=rows).max(), rel=1e-8)

    def test_splits_leave_a_whole_block_on_each_side(self):
        prof = block_profile(SplitProfile(width=6), 24)
        assert prof.rows_min == BLOCK_CYCLES * 24
        s = prof.candidates(2000)
        assert s.min() >= 48 and s.max() <= 2000 - 6 + 1 - 48
        assert block_profile(SplitProfile(width=3, min_rows=100), 12).rows_min == 100

    @pytest.mark.parametrize("keep_kernel", [False, True])
    def test_a_clean_cycle_ending_at_any_phase_is_not_extreme(self, keep_kernel):
        """A clean sine (period 12, noise 1 %) ends at any phase, and the draws of a 1,200-sample
        window serve windows of 1,100 to 1,298 samples. Without the cuts every draw ended on a block
        boundary; on seed 1 the windows' maxima then passed the 0.01 threshold 86 times in 100, with
        the cuts 0 times (seeds 0-2 together: 1 of 300 with each window's own kernel, 3 with the
        1,200-sample window's kernel kept, as the streaming detector keeps it)."""
        exceed = 0
        for seed in range(3):
            prof = SplitProfile(width=3)
            rng = np.random.default_rng(seed)
            t = np.arange(1300)
            x = np.sin(2 * np.pi * (rng.uniform() + t / 12)) + 0.01 * rng.normal(size=1300)
            z = lambda v: (v - v.mean()) / v.std()  # noqa: E731  (the detector's window scaling)
            prof = prof.with_kernel_of(z(x[:1200])) if keep_kernel else prof
            threshold = gumbel_threshold(window_null_maxima(z(x[:1200]), prof, 12, 160,
                                                            np.random.default_rng(1)), 0.01)
            exceed += sum(prof.maximum(z(x[:n])) > threshold for n in range(1100, 1300, 2))
        assert exceed <= 3, exceed

    def test_it_applies_where_the_offline_test_does(self):
        x = _jittered_sine(0, 300, 24)
        assert window_null_maxima(x, SplitProfile(width=6), 24, 5, np.random.default_rng(0)) is None
        with pytest.raises(ValueError, match="one channel"):
            window_null_maxima(np.zeros((500, 2)), SplitProfile(width=3), 12, 5, np.random.default_rng(0))
        with pytest.raises(ValueError, match="count"):
            window_null_maxima(_jittered_sine(0, 1000, 12), SplitProfile(width=3), 12, 0, np.random.default_rng(0))

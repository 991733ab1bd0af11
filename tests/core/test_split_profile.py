"""Split profile (ratiowatch.core.split_profile) against a from-scratch fit of every split."""

import math

import numpy as np
import pytest

import naive
from ratiowatch.core.rulsif import _pe_hat, _solve_theta
from ratiowatch.core.split_profile import (Kernel, SplitProfile, fit_kernel, kernel_features, split_profile,
                                           split_rows, valid_splits)


@pytest.mark.parametrize("every", [1, 7, 23])  # rows between splits: rank-one updates and block products
@pytest.mark.parametrize("width,stride,channels", [(1, 1, 1), (2, 1, 1), (3, 1, 1), (7, 2, 1), (20, 5, 1),
                                                   (5, 1, 2), (40, 3, 1)])
def test_profile_matches_a_from_scratch_fit_of_every_split(width, stride, channels, every):
    rng = np.random.default_rng(width + 10 * stride + channels)
    x = rng.normal(size=(400, channels))
    x[200:] = x[200:] * 2.0 + 0.5
    splits = valid_splits(400, width, stride, 5)[::every]
    phi = kernel_features(x, width, stride)
    fast = split_profile(phi, splits, width, stride, alpha=0.1, lam=1e-3)
    slow = naive.split_profile(x, splits, width, stride, alpha=0.1, lam=1e-3)
    np.testing.assert_allclose(fast, slow, rtol=1e-8, atol=1e-8)


@pytest.mark.parametrize("width,stride", [(3, 1), (7, 2)])
def test_ulsif_profile_matches_a_from_scratch_fit_of_its_one_direction(width, stride):
    rng = np.random.default_rng(width)
    x = rng.normal(size=(300, 1))
    x[120:] *= 2.0
    splits = valid_splits(300, width, stride, 5)[::3]
    phi = kernel_features(x, width, stride)
    fast = split_profile(phi, splits, width, stride, alpha=0.0, lam=1e-3)
    slow = naive.split_profile(x, splits, width, stride, alpha=0.0, lam=1e-3)
    np.testing.assert_allclose(fast, slow, rtol=1e-8, atol=1e-8)


def test_ulsif_profile_of_change_free_series_is_not_pinned_to_the_margins():
    """uLSIF's H is the denominator side's mean of phi phi' alone: from a margin's few rows (fewer
    than the 64 kernel features) it is singular, and PE of that direction grows as 1 / lam. Scored
    in both directions, the maximum of every one of 20 change-free series lay within 13 samples of
    an edge (median maximum 1,619), so the stop test's null maxima were margins too and no
    variance change of the synthetic suite was found. In the one direction whose denominator is
    the larger side: 6 of 20 within 15 samples (median 61)."""
    near_edge = 0
    for seed in range(20):
        x = np.random.default_rng(seed).normal(size=600)
        splits = valid_splits(600, 3, 1, 6)
        prof = split_profile(kernel_features(x[:, None], 3, 1), splits, 3, 1, alpha=0.0, lam=1e-3)
        g = int(splits[np.argmax(prof)])
        near_edge += min(g, 600 - g) <= 15
    assert near_edge <= 8


def test_each_direction_is_the_core_rulsif_fit_on_the_same_features():
    rng = np.random.default_rng(3)
    x = np.r_[rng.normal(0, 1, (150, 1)), rng.normal(1, 1, (150, 1))]
    width, stride, alpha, lam = 4, 1, 0.2, 1e-2
    phi = kernel_features(x, width, stride)
    splits = np.array([60, 150, 240])
    got = split_profile(phi, splits, width, stride, alpha=alpha, lam=lam)
    n_left, first_right = split_rows(splits, width, stride)
    for g in range(splits.size):
        left, right = phi[: n_left[g]], phi[first_right[g]:]
        pe = 0.0
        for p, q in ((left, right), (right, left)):
            theta = _solve_theta(p, q, alpha, lam, False)
            pe += _pe_hat(p @ theta, q @ theta, alpha)
        assert got[g] == pytest.approx(pe * len(left) * len(right) / (len(left) + len(right)), rel=1e-9)


def test_subsequences_crossing_the_split_belong_to_neither_side():
    n_left, first_right = split_rows([10, 11, 12], width=4, stride=2)
    # rows start at 0, 2, 4, ...: a row starting at s covers s..s+3
    assert n_left.tolist() == [4, 4, 5]  # rows 0..3 end at or before 10 (row 3 covers 6..9)
    assert first_right.tolist() == [5, 6, 6]  # the first row starting at or after the split


@pytest.mark.parametrize("kind", ["mean", "variance", "shape"])
def test_the_best_split_sits_at_a_clear_change(kind):
    rng = np.random.default_rng(0)
    t = np.arange(1200)
    if kind == "mean":
        x, width = np.r_[rng.normal(0, 1, 600), rng.normal(1.5, 1, 600)], 3
    elif kind == "variance":
        x, width = np.r_[rng.normal(0, 1, 600), rng.normal(0, 3, 600)], 3
    else:
        x = np.where(t < 600, np.sin(2 * np.pi * t / 30), np.sign(np.sin(2 * np.pi * t / 30)))
        x, width = x + rng.normal(0, 0.2, t.size), 30
    stat, split = SplitProfile(width=width, stride=max(1, width // 4)).best(x)
    assert abs(split - 600) <= max(10, width), (kind, split)


@pytest.mark.parametrize("width,stride", [(3, 1), (12, 3)])
def test_the_split_is_the_best_of_every_split_between_the_best_grid_splits_neighbours(width, stride):
    rng = np.random.default_rng(width)
    x = np.r_[rng.normal(0, 1, 700), rng.normal(0.8, 1.5, 500)]
    prof = SplitProfile(width=width, stride=stride, grid=30)
    stat, split, (grid, scores) = prof.best(x, trace=True)
    g = int(np.argmax(scores))
    assert stat == scores[g] == prof.maximum(x)
    every = valid_splits(x.size, width, stride, prof.rows_min)
    fine = every[(every >= grid[max(0, g - 1)]) & (every <= grid[min(grid.size - 1, g + 1)])]
    brute = split_profile(kernel_features(x[:, None], width, stride), fine, width, stride)
    assert split == fine[int(np.argmax(brute))]


@pytest.mark.parametrize("seed", range(3))
def test_scaling_by_effective_size_keeps_the_margins_quiet(seed):
    # without the n_L n_R / (n_L + n_R) scaling the PE of noise is largest on the small side
    # (measured at the outer 5 grid splits: about 40 times the middle; scaled: 1-1.5 times)
    x = np.random.default_rng(seed).normal(size=(2000, 1))
    prof = SplitProfile(width=3)
    s = prof.candidates(2000)
    scaled = prof.profile(x, s)
    n_left, first_right = split_rows(s, 3, 1)
    n_right = (2000 - 3 + 1) - first_right
    raw = scaled * (n_left + n_right) / (n_left * n_right)
    mid = slice(len(s) // 2 - 5, len(s) // 2 + 5)
    assert raw[:5].mean() > 10 * raw[mid].mean()
    assert scaled[:5].mean() < 2 * scaled[mid].mean()


def test_too_short_series_have_no_split_and_bad_arguments_raise():
    prof = SplitProfile(width=3)
    assert prof.best(np.zeros(12)) == (-np.inf, -1)
    assert prof.maximum(np.zeros(12)) == -np.inf
    with pytest.raises(ValueError):
        kernel_features(np.zeros((5, 1)), 6, 1)
    phi = kernel_features(np.random.default_rng(0).normal(size=(50, 1)), 3, 1)
    with pytest.raises(ValueError):
        split_profile(phi, [30, 20], 3, 1)
    with pytest.raises(ValueError):
        split_profile(phi, [20], 3, 1, alpha=1.0)
    for bad, name in (({"width": 0}, "width"), ({"stride": 0}, "stride"), ({"grid": 0}, "grid"),
                      ({"n_centres": 0}, "n_centres"), ({"alpha": -0.1}, "alpha"), ({"lam": float("nan")}, "lam"),
                      ({"sigma_factor": 0.0}, "sigma_factor"), ({"min_rows": -1}, "min_rows")):
        with pytest.raises(ValueError, match=name):
            SplitProfile(**{"width": 3, **bad})


def test_constant_series_give_finite_scores():
    prof = SplitProfile(width=3)
    s = prof.candidates(100)
    assert np.isfinite(prof.profile(np.ones(100), s)).all()


def test_multi_width_profile_is_the_larger_of_its_profiles_and_skips_widths_that_do_not_fit():
    from ratiowatch.core.split_profile import MultiWidthProfile

    rng = np.random.default_rng(3)
    x = np.r_[rng.normal(0, 1, 150), rng.normal(0, 1, 150) + np.sin(np.arange(150))]
    narrow, wide = SplitProfile(width=3), SplitProfile(width=40, stride=10)
    both = MultiWidthProfile((narrow, wide))
    assert both.maximum(x) == max(narrow.maximum(x), wide.maximum(x))
    assert both.best(x)[0] == both.maximum(x)
    short = x[: wide.min_length() - 1]  # too short for the wide profile, long enough for the narrow one
    assert both.min_length() == narrow.min_length()
    assert both.maximum(short) == narrow.maximum(short) and both.best(short) == narrow.best(short)
    assert both.best(x[:5]) == (-math.inf, -1)


def test_channelwise_profile_is_the_largest_channel_profile_and_ignores_phases_between_channels():
    from ratiowatch.core.split_profile import ChannelwiseProfile, MultiWidthProfile

    rng = np.random.default_rng(4)
    t = np.arange(600)
    x = np.column_stack([np.sin(2 * np.pi * t / 24), np.sin(2 * np.pi * t / 24), rng.normal(size=600)])
    x[:, 1] = np.sin(2 * np.pi * (t / 24 + np.where(t < 300, 0.0, 0.25)))  # the second cycle's phase jumps
    x[:, :2] += 0.1 * rng.normal(size=(600, 2))
    inner = MultiWidthProfile((SplitProfile(width=6, stride=1), SplitProfile(width=24, stride=6)))
    each = ChannelwiseProfile(inner)
    by_channel = [inner.maximum(x[:, [c]]) for c in range(3)]
    assert each.maximum(x) == max(by_channel)
    assert each.best(x)[0] == max(by_channel)
    assert each.profiles == inner.profiles and each.min_length() == inner.min_length()
    # a phase jump of one cycle against the other is a change of the joint states only
    assert SplitProfile(width=6, stride=1).maximum(x[:, :2]) > 3 * ChannelwiseProfile(SplitProfile(width=6, stride=1)).maximum(x[:, :2])
    # a spread change in one channel is found at its split
    x[300:, 2] *= 4
    assert abs(each.best(x)[1] - 300) <= 10


class TestKernel:
    def test_a_kernel_kept_from_a_series_gives_that_series_its_own_features(self):
        x = np.random.default_rng(0).normal(size=(300, 1))
        prof = SplitProfile(width=5)
        kept = prof.with_kernel_of(x)
        np.testing.assert_array_equal(kept.features(x), prof.features(x))
        assert kept.maximum(x) == prof.maximum(x)

    def test_another_series_is_scored_on_the_kept_centres_and_widths(self):
        from scipy.spatial.distance import cdist

        rng = np.random.default_rng(1)
        x, y = rng.normal(size=(300, 1)), rng.normal(2.0, 3.0, size=(200, 1))
        kernel = fit_kernel(x, 4, 1)
        views = [np.stack([y[j:j + 4, 0] for j in range(197)])]  # PAA of width 4 at 16 dims: the values
        z = views[0]
        views.append((z - z.mean(axis=1, keepdims=True)) / z.std(axis=1, keepdims=True))
        expected = np.hstack([np.exp(-cdist(f, c, "sqeuclidean") / (2 * s ** 2))
                              for f, c, s in zip(views, kernel.centres, kernel.sigmas)])
        # values below exp(-230) ~ 1e-100 are flushed to zero (core.kernels.FLUSH_EXPONENT)
        np.testing.assert_allclose(kernel_features(y, 4, 1, kernel=kernel), expected, rtol=1e-12, atol=1e-99)
        assert not np.allclose(kernel_features(y, 4, 1), expected)  # y's own kernel differs

    def test_state_round_trip_and_bad_states(self):
        import json

        kernel = fit_kernel(np.random.default_rng(2).normal(size=(100, 2)), 6, 2)
        again = Kernel.from_state(json.loads(json.dumps(kernel.to_state())))
        assert again == kernel and hash(again) == hash(kernel)
        assert again != fit_kernel(np.random.default_rng(3).normal(size=(100, 2)), 6, 2)
        with pytest.raises(ValueError, match="positive width"):
            Kernel.from_state({"centres": kernel.to_state()["centres"], "sigmas": [1.0, 0.0]})

    def test_a_kernel_of_another_width_is_refused(self):
        kernel = fit_kernel(np.random.default_rng(2).normal(size=(100, 1)), 6, 1)
        with pytest.raises(ValueError, match="another width"):
            kernel_features(np.zeros((50, 1)), 4, 1, kernel=kernel)


def _two_spreads(scale):
    rng = np.random.default_rng(0)
    return np.r_[rng.normal(0, 1, 300), rng.normal(0, 3, 300)] * scale


@pytest.mark.parametrize("scale", [1e-160, 1e200])
def test_a_series_whose_kernel_width_squared_float64_cannot_hold_is_refused_not_scored_zero(scale):
    # sigma^2 underflowed (overflowed), every feature was NaN, every Cholesky solve failed and the
    # profile reported a score of 0.0 at the first split: "no change" for a clear one
    with pytest.raises(ValueError, match="kernel width of the raw subsequences.*standardise the series"):
        SplitProfile(width=5).best(_two_spreads(scale))
    with pytest.raises(ValueError, match="standardise"):
        kernel_features(_two_spreads(scale)[:, None], 5, 1)


@pytest.mark.parametrize("scale", [1e-100, 1e150])
def test_a_series_in_far_but_representable_units_is_still_scored(scale):
    score, split = SplitProfile(width=5).best(_two_spreads(scale))
    assert score > 100.0 and abs(split - 300) <= 10


def test_features_that_are_not_finite_are_refused():
    x = _two_spreads(1.0)[:, None]
    x[10] = np.nan  # a missing value not filled
    with pytest.raises(ValueError, match="not finite"):
        kernel_features(x, 5, 1)
    phi = kernel_features(_two_spreads(1.0)[:, None], 5, 1)
    phi[50, 3] = np.nan
    with pytest.raises(ValueError, match="phi .*NaN or infinity"):
        split_profile(phi, [100, 300, 500], 5, 1)


@pytest.mark.parametrize("bad, message", [
    ({"lam": float("nan")}, "lam must be finite"),  # scored every split 0
    ({"lam": float("inf")}, "lam must be finite"),  # scored every split NaN
    ({"lam": 0.0}, "lam must be a positive number"),
    ({"lam": "0.001"}, "lam must be a real number"),
    ({"alpha": float("nan")}, "alpha must be finite"),
    ({"alpha": 1.0}, r"alpha must be in \[0, 1\)"),
])
def test_split_profile_checks_alpha_and_lam_as_the_split_profile_class_does(bad, message):
    phi = kernel_features(_two_spreads(1.0)[:, None], 5, 1)
    with pytest.raises((ValueError, TypeError), match=message):
        split_profile(phi, [100, 300, 500], 5, 1, **bad)
    with pytest.raises((ValueError, TypeError), match=message):
        SplitProfile(width=5, **bad)

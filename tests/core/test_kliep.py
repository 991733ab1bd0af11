"""KLIEP (ratiowatch.core.kliep): projected gradient ascent, likelihood CV without centre leak, log-0 floor.

Direction: numerator samples carry the centres and the log-likelihood, denominator samples the
normalisation ``mean_de r = 1``; ``kl = mean_nu log r``.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from densratio.KLIEP import KLIEP as densratio_kliep
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ratiowatch.core.kernels import gauss_kernel
from ratiowatch.core.kliep import LOG_FLOOR_VALUE, fit_kliep, kliep_lcv_scores, kliep_solve, lcv_folds


@pytest.mark.parametrize("case", range(6))
def test_agrees_with_densratio_given_the_same_centres_and_sigma(case):
    rng = np.random.default_rng(case)
    d = (1, 2, 3)[case % 3]
    sigma = (0.3, 0.7, 1.5)[case % 3]
    x_nu = rng.normal(size=(50 + 10 * case, d))
    x_de = rng.normal(0.5, 1.3, size=(80, d))
    np.random.seed(case)  # drives densratio's centre choice only
    oracle = densratio_kliep(x_nu, x_de, sigma=sigma, kernel_num=1000, verbose=False)
    centres = oracle.kernel_info.centers  # kernel_num >= n_nu: every numerator sample, densratio's order
    ours = fit_kliep(x_nu, x_de, sigma=sigma, centres=centres)
    np.testing.assert_allclose(ours.theta, oracle.theta, rtol=0, atol=1e-8)
    z = np.concatenate([x_nu[:10], x_de[:10]])
    np.testing.assert_allclose(ours.ratio(z), oracle.compute_density_ratio(z), rtol=0, atol=1e-8)
    assert ours.kl == pytest.approx(np.mean(np.log(oracle.compute_density_ratio(x_nu))), abs=1e-8)


@pytest.mark.parametrize("kind", ["random", "blocks"])
@pytest.mark.parametrize("n, b, folds", [(100, 100, 5), (100, 30, 5), (7, 100, 5), (23, 10, 3)])
def test_lcv_never_uses_a_held_out_point_as_a_centre(n, b, folds, kind):
    x = np.random.default_rng(n).normal(size=(n, 2))
    labels, centres = lcv_folds(x, folds, b, seed=4, folds=kind)
    assert sorted(set(labels.tolist())) == list(range(min(folds, n)))
    if kind == "blocks":  # contiguous in the given (time) order
        assert np.all(np.diff(labels) >= 0)
    for r, idx in enumerate(centres):
        held_out = set(np.flatnonzero(labels == r).tolist())
        assert len(idx) == min(b, n - len(held_out))
        assert not held_out & set(idx.tolist())


def _leaky_lcv(x_nu, x_de, sigmas):
    """LCV with every numerator sample as a fixed centre: held-out points are centres (the leak)."""
    labels = np.arange(len(x_nu)) % 5
    out = []
    for s in sigmas:
        bvec = gauss_kernel(x_de, x_nu, s).mean(0)
        if not bvec @ bvec > 0:
            out.append(-np.inf)
            continue
        total = 0.0
        for r in range(5):
            alpha, _ = kliep_solve(gauss_kernel(x_nu[labels != r], x_nu, s), bvec)
            total += np.mean(np.log(np.maximum(gauss_kernel(x_nu[labels == r], x_nu, s) @ alpha, LOG_FLOOR_VALUE)))
        out.append(total / 5)
    return np.array(out)


def test_lcv_does_not_collapse_to_the_smallest_sigma():
    # Reference 003 section 9: with the held-out points among the centres, LCV is biased toward tiny
    # widths. Setting of 003 section 8.1 (2-d N(0, I) numerator, 10% N(5, 1) outliers in the
    # denominator, its absolute sigma grid).
    sigmas = np.array([0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 50.0])
    leaky_collapses = 0
    for seed in range(5):
        rng = np.random.default_rng(seed)
        x_nu = rng.normal(size=(100, 2))
        x_de = np.concatenate([rng.normal(size=(90, 2)), rng.normal(5.0, 1.0, size=(10, 2))])
        leaky_collapses += int(np.argmax(_leaky_lcv(x_nu, x_de, sigmas)) == 0)
        ours = kliep_lcv_scores(x_nu, x_de, sigmas, n_centres=100)
        assert sigmas[int(np.argmax(ours))] >= 0.5, ours
        fit = fit_kliep(x_nu, x_de, sigma=sigmas, n_centres=100)
        assert fit.sigma == sigmas[int(np.argmax(ours))]
        # the chosen model does the job: the injected outliers get the lowest ratios
        assert np.all(np.argsort(fit.ratio(x_de))[:10] >= 90)
    assert leaky_collapses >= 2  # the failure mode is real on this data


def test_log_floor_keeps_everything_finite():
    # numerator points no centre reaches: (A alpha)_j underflows to 0 for them
    x_nu = np.array([[0.0], [0.1], [50.0], [80.0]])
    x_de = np.array([[0.0], [0.05], [0.2]])
    fit = fit_kliep(x_nu, x_de, sigma=0.2, centres=x_nu[:2])
    assert np.all(np.isfinite(fit.theta)) and np.isfinite(fit.kl)
    assert fit.kl < np.log(LOG_FLOOR_VALUE) / 4  # the two unreachable points pay the floor, not -inf
    # a grid reaching down to tiny widths: no -inf or NaN leaks into the selection
    scores = kliep_lcv_scores(x_nu, x_de, [1e-3, 0.2, 5.0, 50.0])
    assert not np.any(np.isnan(scores))
    chosen = fit_kliep(x_nu, x_de, sigma=[1e-3, 0.2, 5.0, 50.0])
    assert np.isfinite(chosen.kl) and chosen.sigma > 1e-3


def test_sigma_that_reaches_no_denominator_sample_is_rejected():
    with pytest.raises(ValueError, match="too small"):
        fit_kliep([[0.0], [1.0]], [[1e6], [2e6]], sigma=0.1)


def test_normalisation_and_kl():
    rng = np.random.default_rng(1)
    x_nu, x_de = rng.normal(size=(120, 2)), rng.normal(0.3, 1.2, size=(150, 2))
    fit = fit_kliep(x_nu, x_de)
    assert np.mean(fit.ratio(x_de)) == pytest.approx(1.0, abs=1e-12)
    assert fit.kl == pytest.approx(np.mean(np.log(fit.ratio(x_nu))), abs=1e-12)
    assert np.all(fit.theta >= 0)
    far = fit_kliep(x_nu, rng.normal(2.0, 1.0, size=(150, 2)))
    assert far.kl > fit.kl > -0.05


def test_deterministic_given_seed_and_centres_from_the_numerator():
    rng = np.random.default_rng(2)
    x_nu, x_de = rng.normal(size=(300, 1)), rng.normal(3.0, 1.0, size=(100, 1))
    a, b = fit_kliep(x_nu, x_de, n_centres=40, seed=5), fit_kliep(x_nu, x_de, n_centres=40, seed=5)
    assert a.kl == b.kl and np.array_equal(a.centres, b.centres)
    assert len(a.centres) == 40
    assert all(any(np.array_equal(c, row) for row in x_nu) for c in a.centres)


@pytest.mark.parametrize(
    "x_nu, x_de, kwargs, match",
    [
        ([[0.0], [np.nan]], [[0.0], [1.0]], {}, "NaN or infinite"),
        ([[0.0], [1.0]], [[np.inf], [1.0]], {}, "NaN or infinite"),
        ([[0.0, 1.0], [1.0, 2.0]], [[0.0], [1.0]], {}, "features"),
        ([[0.0]], [[0.0], [1.0]], {}, "at least 2"),
        (np.zeros((0, 1)), [[0.0], [1.0]], {}, "at least 2"),
        ([0.0, 1.0], [0.0, 1.0], {"sigma": 0.0}, "positive"),
        ([0.0, 1.0], [0.0, 1.0], {"n_centres": 0}, "n_centres"),
        ([0.0, 1.0], [0.0, 1.0], {"eps_schedule": []}, "eps_schedule"),
        ([0.0, 1.0, 2.0], [0.0, 1.0], {"folds": "shuffled"}, "folds"),
    ],
)
def test_bad_input_is_rejected_with_a_clear_message(x_nu, x_de, kwargs, match):
    with pytest.raises(ValueError, match=match):
        fit_kliep(x_nu, x_de, **kwargs)


def test_constant_data_gives_finite_results():
    fit = fit_kliep(np.full((20, 2), 1.0), np.full((30, 2), 1.0))
    assert fit.kl == pytest.approx(0.0, abs=1e-12)
    assert np.all(np.isfinite(fit.ratio([[1.0, 1.0], [5.0, 5.0]])))


rows = st.lists(st.floats(-5, 5, allow_nan=False, width=32), min_size=2, max_size=2)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(x=st.lists(rows, min_size=2, max_size=14), y=st.lists(rows, min_size=2, max_size=14),
       seed=st.integers(0, 2**16))
def test_permutation_invariance(x, y, seed):
    x, y = np.array(x), np.array(y)
    perm = np.random.default_rng(seed)
    a = fit_kliep(x, y, seed=1)
    b = fit_kliep(x[perm.permutation(len(x))], y[perm.permutation(len(y))], seed=1)
    assert np.isfinite(a.kl)
    assert a.sigma == b.sigma and a.kl == b.kl  # rows are put in canonical order first: bit for bit


@pytest.mark.parametrize("scale", [2.0 ** -520, 2.0 ** -300, 2.0 ** 300, 2.0 ** 500])
def test_the_fit_does_not_depend_on_the_units(scale):
    # tiny differences square to subnormals (and sigma^2 with them), huge ones overflow: the fit
    # works in units of a power of two near the data's range, so every such rescaling (exact in
    # binary) gives one answer
    rng = np.random.default_rng(4)
    x_nu, x_de = rng.normal(size=(40, 1)), rng.normal(0.5, 1.0, size=(40, 1))
    ref = fit_kliep(x_nu, x_de)
    fit = fit_kliep(x_nu * scale, x_de * scale)
    assert fit.kl == pytest.approx(ref.kl, rel=1e-12)
    assert fit.sigma == pytest.approx(ref.sigma * scale, rel=1e-12)
    probe = np.array([[-1.0], [0.0], [2.0]])
    assert np.allclose(fit.ratio(probe * scale), ref.ratio(probe), rtol=1e-12, atol=0)


def test_ordinary_data_are_fitted_bit_for_bit_as_without_the_rescaling(monkeypatch):
    # a power of two divides exactly: the kernel values, and so the whole fit, are unchanged
    import ratiowatch.core.kliep as kliep

    rng = np.random.default_rng(5)
    x_nu, x_de = 3.0 * rng.normal(size=(30, 2)), 3.0 * rng.normal(size=(30, 2))
    fit = fit_kliep(x_nu, x_de)
    monkeypatch.setattr(kliep, "data_scale", lambda x: 1.0)
    plain = kliep.fit_kliep(x_nu, x_de)
    assert fit.scale != 1.0 and plain.scale == 1.0
    assert fit.sigma == plain.sigma and fit.kl == plain.kl and np.array_equal(fit.theta, plain.theta)
    assert np.array_equal(fit.centres, plain.centres) and np.array_equal(fit.ratio(x_de), plain.ratio(x_de))


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=st.floats(-1e3, 1e3, allow_nan=False), other=st.floats(-1e3, 1e3, allow_nan=False),
       n=st.integers(2, 12), n_dup=st.integers(1, 6))
def test_duplicated_or_constant_samples_never_give_nan(value, other, n, n_dup):
    x_nu = np.concatenate([np.full((n, 1), value), np.full((n_dup, 1), other)])
    x_de = np.full((n_dup + 1, 1), value)
    fit = fit_kliep(x_nu, x_de)
    assert np.isfinite(fit.kl)
    assert np.all(np.isfinite(fit.theta)) and np.all(fit.theta >= 0)
    assert np.all(np.isfinite(fit.ratio(np.array([[value], [other]]))))


@pytest.mark.parametrize("n_folds", [1, 0, -1, 2.5, True])
def test_fewer_than_two_folds_are_refused(n_folds):
    # one fold leaves nothing to score (a silent fit); none gave a misleading error about sigma
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="n_folds must be an integer >= 2"):
        fit_kliep(rng.normal(size=(30, 1)), rng.normal(size=(30, 1)), n_folds=n_folds)


def test_a_given_width_far_above_the_data_span_is_a_flat_kernel_not_an_overflow():
    # data spanning 2.2e-308 are fitted in units of 2^-1022, where a width of 50 overflowed to inf
    x_nu, x_de = np.zeros((12, 2)), np.full((15, 2), 2.2250738585072014e-308)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fit = fit_kliep(x_nu, x_de, sigma=50.0, n_centres=12)
        r = fit.ratio(x_de)
    assert fit.sigma == 50.0 and np.array_equal(fit.sigmas, [50.0]) and np.isfinite(fit.kl)
    # every kernel value 1: one ratio everywhere, and mean_de r = 1 makes it 1
    assert np.all(np.isfinite(r)) and np.allclose(r, 1.0, rtol=0.0, atol=1e-12)


def test_a_given_grid_reports_its_own_widths():
    rng = np.random.default_rng(3)
    x_nu, x_de = rng.normal(size=(60, 1)), rng.normal(0.5, 1.0, size=(80, 1))
    fit = fit_kliep(x_nu, x_de, sigma=[0.3, 1.0, 3.0])
    assert np.array_equal(fit.sigmas, [0.3, 1.0, 3.0]) and fit.sigma in (0.3, 1.0, 3.0)


@pytest.mark.parametrize("kwargs, match", [({"n_centres": 2.5}, "n_centres must be an integer; got 2.5"),
                                           ({"max_iter": 10.5}, "max_iter must be an integer; got 10.5")])
def test_integer_parameters_given_as_fractions_are_refused_not_truncated(kwargs, match):
    rng = np.random.default_rng(0)
    with pytest.raises(TypeError, match=match):
        fit_kliep(rng.normal(size=(20, 1)), rng.normal(size=(20, 1)), **kwargs)

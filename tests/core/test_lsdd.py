"""LSDD (ratiowatch.core.lsdd): density-difference fit, bias-corrected L2 estimate, T-fold CV.

Spec numbers from Sugiyama et al. 2013: on p = N(mu e1, (4 pi)^-1 I), p' = N(0, (4 pi)^-1 I) the true
L2-distance is 2 (1 - exp(-pi mu^2)); with n = n' = 200, d = 1 the mean over 20 runs is within 0.1.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from ratiowatch.core.kernels import MIN_SCALE, gauss_kernel
from ratiowatch.core.lsdd import (
    LSDD_SIGMA_FACTORS,
    cv_folds,
    fit_lsdd,
    h_matrix,
    h_vector,
    lsdd_cv_scores,
    ridge_solve,
    set_rng,
    split_centres,
)

SD = (4.0 * np.pi) ** -0.5


@pytest.fixture(autouse=True, scope="module")
def _single_threaded_blas():
    # The CV eigendecompositions (b = 200) go through OpenBLAS; with its threads competing with other
    # processes on a small machine they measured 10-50x slower than single-threaded. The process-wide
    # fix is OPENBLAS_NUM_THREADS=1 in the test environment; this keeps the module fast without it.
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - shipped with scikit-learn, a test dependency
        yield
        return
    with threadpool_limits(limits=1):
        yield


def _pair(mu: float, n: int, d: int, rng: np.random.Generator):
    x = rng.normal(0.0, SD, size=(n, d))
    x[:, 0] += mu
    return x, rng.normal(0.0, SD, size=(n, d))


def test_h_matrix_is_the_integral_of_kernel_products():
    sigma = 0.7
    c = np.array([[0.0, 0.0], [0.5, -0.3], [1.2, 0.4]])
    grid = np.linspace(-6.0, 7.0, 521)
    step = grid[1] - grid[0]
    gx, gy = np.meshgrid(grid, grid, indexing="ij")
    pts = np.column_stack([gx.ravel(), gy.ravel()])
    k = gauss_kernel(pts, c, sigma)
    numeric = k.T @ k * step * step
    np.testing.assert_allclose(h_matrix(c, sigma), numeric, rtol=1e-9, atol=1e-12)
    # d = 1 as well: (pi sigma^2)^(1/2) on the diagonal
    np.testing.assert_allclose(h_matrix(np.zeros((1, 1)), 0.3)[0, 0], np.sqrt(np.pi * 0.09), rtol=1e-14)


@pytest.mark.parametrize("mu", [0.0, 0.4, 0.8])
def test_l2_estimate_matches_the_gaussian_truth(mu):
    truth = 2.0 * (1.0 - np.exp(-np.pi * mu * mu))
    estimates = []
    for run in range(20):
        x, xp = _pair(mu, 200, 1, np.random.default_rng(1000 + run))
        estimates.append(fit_lsdd(x, xp, seed=run).l2)
    assert abs(np.mean(estimates) - truth) < 0.1, (mu, truth, np.mean(estimates))


def test_sigma_grid_floor_keeps_d5_honest():
    # Sugiyama et al. 2013, section 4.1: in d = 5 a grid reaching 0.1 x median lets CV pick
    # non-overlapping kernels (mean 0.74 at mu = 0). With the 10^-0.5 floor: near 0 at mu = 0 and
    # within 10% of the truth at mu = 0.8.
    means = {}
    for mu in (0.0, 0.8):
        runs = [fit_lsdd(*_pair(mu, 200, 5, np.random.default_rng(2000 + r)), seed=r).l2 for r in range(16)]
        means[mu] = np.mean(runs)
    assert means[0.0] < 0.1
    truth = 2.0 * (1.0 - np.exp(-np.pi * 0.64))
    assert abs(means[0.8] - truth) < 0.1 * truth, means


def test_identical_sets_give_exactly_zero():
    x = np.random.default_rng(0).normal(size=(60, 3))
    fit = fit_lsdd(x, x)
    assert fit.l2 == 0.0
    assert np.all(fit.theta == 0.0)


def test_symmetric_under_swapping_the_sets():
    rng = np.random.default_rng(1)
    x, xp = rng.normal(size=(70, 2)), rng.normal(0.5, 1.2, size=(90, 2))
    a, b = fit_lsdd(x, xp, seed=3), fit_lsdd(xp, x, seed=3)
    assert (a.sigma, a.lam) == (b.sigma, b.lam)
    assert a.l2 == pytest.approx(b.l2, rel=1e-10)
    z = rng.normal(size=(15, 2))
    np.testing.assert_allclose(a.difference(z), -b.difference(z), rtol=1e-8, atol=1e-12)


@pytest.mark.parametrize("lam", [1e-6, 1e-3, 1.0, 100.0])
def test_estimator_ordering_and_never_negative(lam):
    rng = np.random.default_rng(2)
    x, xp = _pair(0.3, 80, 2, rng)
    c = np.concatenate([x, xp])
    h_mat, h = h_matrix(c, 0.3), h_vector(x, xp, c, 0.3)
    theta, l2 = ridge_solve(h_mat, h, lam)
    lin, quad = h @ theta, theta @ h_mat @ theta
    assert l2 == pytest.approx(2 * lin - quad, rel=1e-8, abs=1e-14)
    assert l2 >= lin >= quad - 1e-15 >= -1e-15
    assert l2 >= 0.0


def test_numerically_indefinite_system_falls_back_and_stays_finite():
    # duplicated centres at a huge (pi sigma^2)^(d/2) scale with a tiny lambda: Cholesky breaks down
    h_mat = np.full((5, 5), 1e12)
    h = np.arange(1.0, 6.0) * 1e-3
    theta, l2 = ridge_solve(h_mat, h, 1e-6)
    assert np.all(np.isfinite(theta)) and np.isfinite(l2) and l2 >= 0.0


def test_difference_has_the_sign_of_p_minus_p_prime():
    rng = np.random.default_rng(3)
    fit = fit_lsdd(rng.normal(-1.0, 0.5, size=(150, 1)), rng.normal(1.0, 0.5, size=(150, 1)))
    left, right = fit.difference([[-1.0], [1.0]])
    assert left > 0 > right


def test_cv_eigen_path_equals_direct_solves():
    rng = np.random.default_rng(4)
    x, xp = rng.normal(size=(40, 2)), rng.normal(0.4, 1.0, size=(35, 2))
    sigmas, lams = np.array([0.5, 1.5]), np.array([1e-3, 0.1, 2.0])
    fast = lsdd_cv_scores(x, xp, sigmas, lams, n_centres=30, seed=7)
    # brute force: same folds and centres, one ridge solve per (fold, sigma, lambda)
    rx, rxp = set_rng(7, x, 1), set_rng(7, xp, 1)
    lab_x, lab_xp = cv_folds(x, 5, rx), cv_folds(xp, 5, rxp)
    slow = np.zeros_like(fast)
    for t in range(5):
        trx, trxp = np.flatnonzero(lab_x != t), np.flatnonzero(lab_xp != t)
        cx, cxp = split_centres(x, xp, 30, rx, rxp, trx, trxp)
        assert not set(cx) & set(np.flatnonzero(lab_x == t))    # no held-out point is a centre
        assert not set(cxp) & set(np.flatnonzero(lab_xp == t))
        c = np.concatenate([x[cx], xp[cxp]])
        for i, s in enumerate(sigmas):
            h_mat, h = h_matrix(c, s), h_vector(x[trx], xp[trxp], c, s)
            for j, lam in enumerate(lams):
                theta = np.linalg.solve(h_mat + lam * np.eye(len(c)), h)
                f_x = gauss_kernel(x[lab_x == t], c, s) @ theta
                f_xp = gauss_kernel(xp[lab_xp == t], c, s) @ theta
                slow[i, j] += (theta @ h_mat @ theta - 2 * f_x.mean() + 2 * f_xp.mean()) / 5
    np.testing.assert_allclose(fast, slow, rtol=1e-8, atol=1e-12)


def test_block_folds_follow_the_row_order():
    x = np.random.default_rng(8).normal(size=(23, 1))
    labels = cv_folds(x, 5, np.random.default_rng(0), "blocks")
    assert np.all(np.diff(labels) >= 0) and np.bincount(labels).tolist() == [5, 5, 4, 5, 4]
    # a time-ordered pair: block folds depend on the order, random folds do not
    t = np.linspace(0.0, 6.0, 60)
    x, xp = np.column_stack([np.sin(t), np.cos(t)]), np.column_stack([np.sin(t), np.cos(t)]) + 0.3
    fit = fit_lsdd(x, xp, folds="blocks")
    assert np.isfinite(fit.l2) and fit.cv_scores.shape == (9, 9)
    reordered = fit_lsdd(x[::-1], xp, folds="blocks")
    assert not np.array_equal(fit.cv_scores, reordered.cv_scores)


def test_selection_takes_the_cv_minimum_and_explicit_params_are_kept():
    rng = np.random.default_rng(5)
    x, xp = _pair(0.5, 60, 1, rng)
    fit = fit_lsdd(x, xp)
    i, j = np.unravel_index(np.argmin(fit.cv_scores), fit.cv_scores.shape)
    assert (fit.sigma, fit.lam) == (fit.sigmas[i], fit.lams[j])
    assert fit.cv_scores.shape == (len(LSDD_SIGMA_FACTORS), 9)
    fixed = fit_lsdd(x, xp, sigma=0.2, lam=0.05)
    assert (fixed.sigma, fixed.lam) == (0.2, 0.05) and np.isnan(fixed.cv)


def test_centres_come_from_both_sets_and_are_capped():
    rng = np.random.default_rng(6)
    x, xp = rng.normal(size=(300, 1)), rng.normal(5.0, 1.0, size=(100, 1))
    fit = fit_lsdd(x, xp, sigma=1.0, lam=0.1, n_centres=80)
    assert len(fit.centres) == 80
    assert np.sum(fit.centres[:, 0] > 2.5) == pytest.approx(20, abs=3)  # in proportion to the set sizes
    small = fit_lsdd(x[:30], xp[:20], sigma=1.0, lam=0.1)
    assert len(small.centres) == 50  # everything when n + n' <= b


def test_deterministic_given_seed():
    rng = np.random.default_rng(7)
    x, xp = rng.normal(size=(150, 2)), rng.normal(0.3, 1.0, size=(150, 2))
    a, b = fit_lsdd(x, xp, n_centres=60, seed=11), fit_lsdd(x, xp, n_centres=60, seed=11)
    assert a.l2 == b.l2 and np.array_equal(a.centres, b.centres)


@pytest.mark.parametrize(
    "x, xp, kwargs, match",
    [
        ([[0.0], [np.nan]], [[0.0], [1.0]], {}, "NaN or infinite"),
        ([[0.0], [1.0]], [[0.0], [np.inf]], {}, "NaN or infinite"),
        ([[0.0, 1.0], [1.0, 2.0]], [[0.0], [1.0]], {}, "features"),
        ([[0.0]], [[0.0], [1.0]], {}, "at least 2"),
        (np.zeros((0, 2)), np.zeros((3, 2)), {}, "at least 2"),
        (np.zeros((2, 2, 2)), np.zeros((3, 2)), {}, "shape"),
        ([0.0, 1.0], [0.0, 1.0], {"lam": 0.0}, "positive"),
        ([0.0, 1.0], [0.0, 1.0], {"sigma": -1.0}, "positive"),
        ([0.0, 1.0], [0.0, 1.0], {"n_centres": 1}, "n_centres"),
        ([[1e300], [-1e300]], [[0.0], [1.0]], {}, "rescale"),
        (np.eye(400) * 100.0, np.eye(400) * 100.0 + 1.0, {}, "rescale"),
        ([0.0, 1.0, 2.0], [0.0, 1.0], {"folds": "shuffled"}, "folds"),
    ],
)
def test_bad_input_is_rejected_with_a_clear_message(x, xp, kwargs, match):
    with pytest.raises(ValueError, match=match):
        fit_lsdd(x, xp, **kwargs)


def test_constant_data_gives_finite_results():
    same = fit_lsdd(np.full((20, 2), 3.0), np.full((25, 2), 3.0))
    assert same.l2 == pytest.approx(0.0, abs=1e-12)
    apart = fit_lsdd(np.full((20, 2), 3.0), np.full((25, 2), -1.0))
    assert np.isfinite(apart.l2) and apart.l2 > 0
    assert np.all(np.isfinite(apart.difference([[3.0, 3.0], [0.0, 0.0]])))


rows = st.lists(st.floats(-5, 5, allow_nan=False, width=32), min_size=2, max_size=2)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(x=st.lists(rows, min_size=2, max_size=14), xp=st.lists(rows, min_size=2, max_size=14),
       seed=st.integers(0, 2**16))
def test_permutation_invariance(x, xp, seed):
    x, xp = np.array(x), np.array(xp)
    perm = np.random.default_rng(seed)
    a = fit_lsdd(x, xp, seed=1)
    b = fit_lsdd(x[perm.permutation(len(x))], xp[perm.permutation(len(xp))], seed=1)
    assert np.isfinite(a.l2) and a.l2 >= 0.0
    assert (a.sigma, a.lam) == (b.sigma, b.lam)
    assert b.l2 == a.l2  # rows are put in canonical order first: bit for bit


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=st.floats(-1e3, 1e3, allow_nan=False), other=st.floats(-1e3, 1e3, allow_nan=False),
       n=st.integers(2, 12), n_dup=st.integers(1, 6))
@example(value=0.0, other=4.368047369487286e-162, n=2, n_dup=1)  # a width whose square underflowed
@example(value=1.0, other=1.0 + 2.0 ** -52, n=3, n_dup=2)  # one ulp apart: resolved (above MIN_SCALE)
def test_duplicated_or_constant_samples_never_give_nan(value, other, n, n_dup):
    x = np.full((n, 1), value)
    xp = np.concatenate([np.full((n_dup, 1), other), np.full((n_dup + 1, 1), value)])
    if 0.0 < abs(other - value) < MIN_SCALE:  # no kernel width resolves them: refused, not a silent 0
        with pytest.raises(ValueError, match="spread"):
            fit_lsdd(x, xp)
        return
    fit = fit_lsdd(x, xp)
    assert np.isfinite(fit.l2) and fit.l2 >= 0.0
    assert np.all(np.isfinite(fit.theta))
    assert np.all(np.isfinite(fit.difference(np.array([[value], [other]]))))


@pytest.mark.parametrize("n_folds", [1, 0, -1, 2.5, True])
def test_fewer_than_two_folds_are_refused(n_folds):
    # one fold leaves nothing to score: every cross-validation score was NaN and the first grid
    # point won silently
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="n_folds must be an integer >= 2"):
        fit_lsdd(rng.normal(size=(30, 1)), rng.normal(size=(30, 1)), n_folds=n_folds)


def _shifted_pair(scale):
    rng = np.random.default_rng(0)
    return rng.normal(size=(60, 1)) * scale, rng.normal(3.0, 1.0, size=(60, 1)) * scale


@pytest.mark.parametrize("scale", [1e-151, 1e-160, 1e-300])
def test_samples_spread_below_what_the_kernel_resolves_are_refused_not_scored_zero(scale):
    # every kernel value of the searched widths was 1: two clearly different sets had an L2 of exactly 0
    x, xp = _shifted_pair(scale)
    with pytest.raises(ValueError, match=r"spread .* below what the Gaussian kernel can resolve.*standardise"):
        fit_lsdd(x, xp)
    # in two dimensions the spread is the length of the per-feature ranges, not the largest one
    with pytest.raises(ValueError, match="spread"):
        fit_lsdd(np.c_[x, x], np.c_[xp, xp])


def test_samples_spread_just_above_min_scale_are_still_fitted_as_in_their_own_units():
    # L2 has units 1/length: l2 x scale is the same number at every scale the kernel resolves
    x, xp = _shifted_pair(1e-149)
    fit = fit_lsdd(x, xp)
    assert fit.l2 > 0.0
    assert fit.l2 * 1e-149 == pytest.approx(fit_lsdd(*_shifted_pair(1e-100)).l2 * 1e-100, rel=1e-6)


@pytest.mark.parametrize("n_centres", [2.9, 3.0, "3"])
def test_n_centres_must_be_an_integer_not_truncated(n_centres):
    x, xp = _shifted_pair(1.0)
    with pytest.raises(TypeError, match="n_centres must be an integer"):
        fit_lsdd(x, xp, n_centres=n_centres)
    assert fit_lsdd(x, xp, n_centres=np.int64(4)).centres.shape == (4, 1)  # numpy integers are integers

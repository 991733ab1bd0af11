"""uLSIF / RuLSIF: closed-form LOOCV, oracle agreement, divergence accuracy and input checks."""

import contextlib
import io

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra.numpy import arrays

from ratiowatch.core.kernels import gauss_kernel
from ratiowatch.core.rulsif import _solve_theta, fit_rulsif, fit_ulsif, loocv_scores, ratio_at_added


def brute_force_loocv(x_nu, x_de, centres, sigma, lam, alpha):
    """Refit without pair i, n times; score the held-out pair with the RuLSIF criterion."""
    m = min(len(x_nu), len(x_de))
    total = 0.0
    for i in range(m):
        k_nu = gauss_kernel(np.delete(x_nu, i, 0), centres, sigma)
        k_de = gauss_kernel(np.delete(x_de, i, 0), centres, sigma)
        theta = _solve_theta(k_nu, k_de, alpha, lam, True)
        r_nu = float((gauss_kernel(x_nu[i:i + 1], centres, sigma) @ theta)[0])
        r_de = float((gauss_kernel(x_de[i:i + 1], centres, sigma) @ theta)[0])
        total += alpha / 2 * r_nu**2 + (1 - alpha) / 2 * r_de**2 - r_nu
    return total / m


@pytest.mark.parametrize("alpha", [0.0, 0.1, 0.5])
def test_closed_form_loocv_equals_brute_force_leave_one_out(alpha):
    rng = np.random.default_rng(7)
    x_nu = rng.normal(size=(45, 2))
    x_de = rng.normal(0.4, 1.3, size=(60, 2))  # unequal sizes: surplus denominator rows never held out
    centres = x_nu[:25]
    lambdas = np.array([1e-3, 1e-2, 0.1, 1.0])
    for sigma in (0.3, 1.0, 3.0):
        fast = loocv_scores(x_nu, x_de, centres, sigma, lambdas, alpha)
        slow = np.array([brute_force_loocv(x_nu, x_de, centres, sigma, lam, alpha) for lam in lambdas])
        np.testing.assert_allclose(fast, slow, rtol=1e-8, atol=0)


def test_denominator_only_loo_formula_is_not_exact_for_alpha_positive():
    """The commonly copied LOO removes only the denominator sample; with alpha > 0 that is wrong."""
    rng = np.random.default_rng(3)
    x_nu, x_de = rng.normal(size=(30, 1)), rng.normal(1.0, 1.0, size=(30, 1))
    centres, sigma, lam, alpha = x_nu, 0.8, 0.05, 0.5
    exact = brute_force_loocv(x_nu, x_de, centres, sigma, lam, alpha)
    # denominator-only variant: the numerator sample stays in H
    total = 0.0
    for i in range(30):
        k_nu = gauss_kernel(x_nu, centres, sigma)
        k_nu_out = gauss_kernel(np.delete(x_nu, i, 0), centres, sigma)
        k_de = gauss_kernel(np.delete(x_de, i, 0), centres, sigma)
        h_mat = alpha * k_nu.T @ k_nu / 30 + (1 - alpha) * k_de.T @ k_de / 29 + lam * np.eye(30)
        theta = np.maximum(0, np.linalg.solve(h_mat, k_nu_out.mean(0)))
        r_nu = float((gauss_kernel(x_nu[i:i + 1], centres, sigma) @ theta)[0])
        r_de = float((gauss_kernel(x_de[i:i + 1], centres, sigma) @ theta)[0])
        total += alpha / 2 * r_nu**2 + (1 - alpha) / 2 * r_de**2 - r_nu
    ours = loocv_scores(x_nu, x_de, centres, sigma, [lam], alpha)[0]
    assert ours == pytest.approx(exact, rel=1e-10)
    assert abs(total / 30 - exact) > 1e-4


@pytest.mark.parametrize("alpha", [0.0, 0.1, 0.5])
def test_agrees_with_densratio_for_same_centres_sigma_lambda(alpha):
    densratio = pytest.importorskip("densratio").densratio
    rng = np.random.default_rng(11)
    x_nu = rng.normal(size=(60, 3))
    x_de = rng.normal(0.5, 1.0, size=(60, 3))
    np.random.seed(0)  # drives densratio's centre permutation only (the oracle, not our code)
    with contextlib.redirect_stdout(io.StringIO()):
        ref = densratio(x_nu, x_de, method="RuLSIF", alpha=alpha, sigma_range=[1.2], lambda_range=[0.05], kernel_num=60,
                        verbose=False)
    ours = fit_rulsif(x_nu, x_de, alpha=alpha, sigma=1.2, lam=0.05, n_centres=60)
    probe = np.vstack([x_nu, x_de, rng.normal(size=(20, 3))])
    np.testing.assert_allclose(ours.ratio(probe), ref.compute_density_ratio(probe), rtol=1e-8, atol=1e-10)
    assert ours.pe == pytest.approx(ref.alpha_PE, rel=1e-8, abs=1e-10)


def test_ulsif_is_rulsif_with_alpha_zero_and_clips():
    rng = np.random.default_rng(2)
    x_nu, x_de = rng.normal(size=(50, 2)), rng.normal(1, 1, size=(70, 2))
    a = fit_ulsif(x_nu, x_de, seed=4)
    b = fit_rulsif(x_nu, x_de, alpha=0.0, seed=4)
    np.testing.assert_array_equal(a.theta, b.theta)
    assert np.all(a.theta >= 0) and a.alpha == 0.0


# True alpha-PE(P || P') with P = N(0, 1), by numerical quadrature (the values Yamada et al. 2013 tabulate).
TOY = {
    "a": ((0.0, 1.0), {0.5: 0.0, 0.95: 0.0}),
    "b": ((0.0, 0.6), {0.5: 0.0147, 0.95: 0.0001}),
    "c": ((0.0, 2.0), {0.5: 0.0255, 0.95: 0.0006}),
    "d": ((0.5, 1.0), {0.5: 0.0295, 0.95: 0.0003}),
}


def _draw_denominator(rng, name, n):
    if name == "e":
        out = rng.normal(size=n)
        far = rng.random(n) < 0.05
        out[far] = rng.normal(3.0, 1.0, size=int(far.sum()))
        return out
    mean, var = TOY[name][0]
    return rng.normal(mean, np.sqrt(var), size=n)


@pytest.mark.parametrize("name,truth", [("a", 0.0), ("b", 0.0147), ("c", 0.0255), ("d", 0.0295), ("e", 0.0075)])
def test_alpha_pe_on_two_gaussian_toy_matches_true_values(name, truth):
    """alpha = 0.5, n = n' = 300, LOOCV model selection: mean of 10 runs near the true PE_0.5.

    The reference's own 5-fold CV implementation measured a small upward bias (at most +0.0075, on
    (d)); the tolerance allows that bias plus two standard errors of a 10-run mean.
    """
    rng = np.random.default_rng(100 + ord(name))
    est = [fit_rulsif(rng.normal(size=300), _draw_denominator(rng, name, 300), alpha=0.5, seed=r).pe
           for r in range(10)]
    assert np.mean(est) == pytest.approx(truth, abs=0.012)


def test_alpha_095_divergence_is_nearly_zero():
    rng = np.random.default_rng(5)
    est = [fit_rulsif(rng.normal(size=300), rng.normal(0.5, 1.0, size=300), alpha=0.95, seed=r).pe
           for r in range(5)]
    assert abs(np.mean(est) - 0.0003) < 0.002


def test_divergence_grows_with_the_shift():
    rng = np.random.default_rng(8)
    pes = [fit_rulsif(rng.normal(size=(150, 2)), rng.normal(mu, 1.0, size=(150, 2)), alpha=0.1).pe
           for mu in (0.0, 0.5, 1.0, 2.0)]
    assert pes == sorted(pes)


def test_deterministic_given_seed_and_independent_of_global_rng():
    rng = np.random.default_rng(9)
    x_nu, x_de = rng.normal(size=(300, 2)), rng.normal(size=(200, 2))
    np.random.seed(1)
    a = fit_rulsif(x_nu, x_de, seed=42)
    np.random.seed(2)
    b = fit_rulsif(x_nu, x_de, seed=42)
    np.testing.assert_array_equal(a.centres, b.centres)
    assert a.pe == b.pe and a.sigma == b.sigma and a.lam == b.lam


@pytest.mark.parametrize(
    "x_nu,x_de,kwargs,match",
    [
        ([[np.nan], [1.0], [2.0]], [[0.0], [1.0], [2.0]], {}, "NaN"),
        ([[0.0], [1.0], [np.inf]], [[0.0], [1.0], [2.0]], {}, "infinite"),
        ([[0.0]], [[0.0], [1.0]], {}, "at least 2"),
        ([], [[0.0], [1.0]], {}, "at least 2"),
        (np.zeros((3, 2)), np.zeros((3, 3)), {}, "features"),
        (np.zeros((2, 2, 2)), np.zeros((3, 2)), {}, "shape"),
        (np.zeros((4, 1)), np.zeros((4, 1)), {"alpha": 1.0}, "alpha"),
        (np.zeros((4, 1)), np.zeros((4, 1)), {"sigma": -1.0}, "sigma"),
        (np.zeros((4, 1)), np.zeros((4, 1)), {"lam": 0.0}, "lam"),
        (np.zeros((4, 1)), np.zeros((4, 1)), {"n_centres": 0}, "n_centres"),
    ],
)
def test_bad_input_raises_a_clear_value_error(x_nu, x_de, kwargs, match):
    with pytest.raises(ValueError, match=match):
        fit_rulsif(x_nu, x_de, **kwargs)


def test_constant_and_duplicated_samples_give_finite_results():
    fit = fit_rulsif(np.ones((20, 2)), np.ones((30, 2)))
    assert np.isfinite(fit.pe) and np.all(np.isfinite(fit.ratio(np.ones((3, 2)))))
    dup = np.repeat(np.arange(5.0)[:, None], 6, axis=0)
    fit = fit_rulsif(dup, dup[::-1] + 0.5, alpha=0.5)
    assert np.isfinite(fit.pe)


finite = st.floats(-1e3, 1e3, allow_nan=False, allow_infinity=False)


@settings(max_examples=40, deadline=None)
@given(arrays(np.float64, (12, 2), elements=finite), arrays(np.float64, (15, 2), elements=finite),
       st.randoms(use_true_random=False), st.sampled_from([0.0, 0.1, 0.5]))
def test_permuting_samples_does_not_change_the_fit(x_nu, x_de, rnd, alpha):
    """With every numerator sample a centre and fixed (sigma, lambda), order is irrelevant."""
    perm_nu = list(range(12))
    perm_de = list(range(15))
    rnd.shuffle(perm_nu)
    rnd.shuffle(perm_de)
    a = fit_rulsif(x_nu, x_de, alpha=alpha, sigma=50.0, lam=0.1, n_centres=12)
    b = fit_rulsif(x_nu[perm_nu], x_de[perm_de], alpha=alpha, sigma=50.0, lam=0.1, n_centres=12)
    assert np.isfinite(a.pe)
    assert a.pe == pytest.approx(b.pe, rel=1e-9, abs=1e-9)
    np.testing.assert_allclose(a.ratio(x_de), b.ratio(x_de), rtol=1e-7, atol=1e-9)


@settings(max_examples=40, deadline=None)
@given(st.floats(-1e6, 1e6, allow_nan=False), st.integers(2, 30), st.integers(2, 30), st.sampled_from([0.0, 0.5]))
def test_no_nan_for_constant_samples_with_model_selection(value, n_nu, n_de, alpha):
    fit = fit_rulsif(np.full((n_nu, 1), value), np.full((n_de, 1), value), alpha=alpha)
    assert np.isfinite(fit.pe) and np.isfinite(fit.sigma) and np.all(np.isfinite(fit.theta))


def brute_force_loocv_unclipped(x_nu, x_de, centres, sigma, lam, alpha):
    m = min(len(x_nu), len(x_de))
    total = 0.0
    for i in range(m):
        theta = _solve_theta(gauss_kernel(np.delete(x_nu, i, 0), centres, sigma),
                             gauss_kernel(np.delete(x_de, i, 0), centres, sigma), alpha, lam, False)
        r_nu = float((gauss_kernel(x_nu[i:i + 1], centres, sigma) @ theta)[0])
        r_de = float((gauss_kernel(x_de[i:i + 1], centres, sigma) @ theta)[0])
        total += alpha / 2 * r_nu**2 + (1 - alpha) / 2 * r_de**2 - r_nu
    return total / m


@pytest.mark.parametrize("alpha", [0.0, 0.5])
def test_closed_form_loocv_without_clipping_equals_brute_force(alpha):
    """The unclipped branch evaluates the held-out ratios in the reduced basis: check it separately."""
    rng = np.random.default_rng(8)
    x_nu = rng.normal(size=(30, 2))
    x_de = rng.normal(0.5, 1.2, size=(26, 2))  # fewer denominator rows: surplus numerator rows stay in
    centres = x_nu[:18]
    lambdas = np.array([1e-3, 0.05, 1.0])
    for sigma in (0.5, 2.0):
        fast = loocv_scores(x_nu, x_de, centres, sigma, lambdas, alpha, clip=False)
        slow = np.array([brute_force_loocv_unclipped(x_nu, x_de, centres, sigma, lam, alpha) for lam in lambdas])
        np.testing.assert_allclose(fast, slow, rtol=1e-8, atol=0)


def test_default_grid_reuses_squared_kernels_exactly():
    """The default sigma grid halves sigma^2 per step, so the grid path squares kernel matrices;
    every row must equal the direct computation at that sigma."""
    from ratiowatch.core.kernels import sq_dist
    from ratiowatch.core.rulsif import _loocv_grid
    from ratiowatch.core.selection import lambda_grid, sigma_grid

    rng = np.random.default_rng(12)
    x_nu, x_de = rng.normal(size=(40, 3)), rng.normal(0.3, 1.0, size=(40, 3))
    sigmas, lams = sigma_grid(x_nu, x_de), lambda_grid()
    grid = _loocv_grid(sq_dist(x_nu, x_nu), sq_dist(x_de, x_nu), sigmas, lams, 0.1, True)
    direct = np.array([loocv_scores(x_nu, x_de, x_nu, s, lams, 0.1) for s in sigmas])
    np.testing.assert_allclose(grid, direct, rtol=1e-9, atol=1e-13)


@pytest.mark.parametrize("scale", [2.0 ** -520, 2.0 ** -300, 2.0 ** 300, 2.0 ** 500])
@pytest.mark.parametrize("alpha", [0.0, 0.1])
def test_the_fit_does_not_depend_on_the_units(scale, alpha):
    # differences of 1e-160 square to zero and every kernel value was lost (the divergence of two
    # clearly different sets came out 0); values of 1e300 overflowed. The fit works in units of a
    # power of two near the data's range, so every such rescaling (exact in binary) gives one answer
    rng = np.random.default_rng(4)
    x_nu, x_de = rng.normal(size=(60, 2)), rng.normal(2.0, 1.0, size=(60, 2))
    ref = fit_rulsif(x_nu, x_de, alpha=alpha)
    fit = fit_rulsif(x_nu * scale, x_de * scale, alpha=alpha)
    assert fit.pe == pytest.approx(ref.pe, rel=1e-12) and ref.pe > 0.5
    assert fit.sigma == pytest.approx(ref.sigma * scale, rel=1e-12)
    assert np.allclose(fit.ratio(x_de[:5] * scale), ref.ratio(x_de[:5]), rtol=1e-12, atol=0)
    given = fit_rulsif(x_nu * scale, x_de * scale, alpha=alpha, sigma=ref.sigma * scale, lam=ref.lam)
    assert given.pe == pytest.approx(ref.pe, rel=1e-12)


def test_ordinary_data_are_fitted_bit_for_bit_as_without_the_rescaling(monkeypatch):
    # a power of two divides exactly: the kernel values, and so the whole fit, are unchanged
    import ratiowatch.core.rulsif as rulsif

    rng = np.random.default_rng(5)
    x_nu, x_de = 3.0 * rng.normal(size=(30, 2)), 3.0 * rng.normal(size=(30, 2))
    fit = fit_rulsif(x_nu, x_de)
    monkeypatch.setattr(rulsif, "data_scale", lambda x: 1.0)
    plain = rulsif.fit_rulsif(x_nu, x_de)
    assert fit.scale != 1.0 and plain.scale == 1.0
    assert fit.sigma == plain.sigma and fit.pe == plain.pe and np.array_equal(fit.theta, plain.theta)
    assert np.array_equal(fit.centres, plain.centres) and np.array_equal(fit.ratio(x_de), plain.ratio(x_de))


def test_a_given_width_far_above_the_data_span_is_a_flat_kernel_not_an_overflow():
    # data spanning 2.2e-308 are fitted in units of 2^-1022, where a width of 50 overflowed to inf
    x_nu, x_de = np.zeros((12, 2)), np.full((15, 2), 2.2250738585072014e-308)
    fit = fit_rulsif(x_nu, x_de, alpha=0.0, sigma=50.0, lam=0.1, n_centres=12)
    assert fit.sigma == 50.0 and np.isfinite(fit.pe)
    r = fit.ratio(x_de)
    assert np.all(np.isfinite(r)) and np.ptp(r) == 0.0  # every kernel value 1: one ratio everywhere


@pytest.mark.parametrize("seed", range(8))
def test_ratio_at_added_equals_the_plain_fit_with_the_numerator_in_the_denominator(seed):
    rng = np.random.default_rng(seed)
    n, m, d = int(rng.integers(2, 200)), int(rng.integers(1, 40)), int(rng.integers(1, 5))
    mag = 10.0 ** int(rng.integers(-120, 120))  # the fit's rescaling is the same too
    x_nu, x_add = rng.normal(size=(n, d)) * mag, (rng.normal(size=(m, d)) + 1.5) * mag
    alpha, sigma, lam, b = [0.0, 0.1, 0.5][seed % 3], mag * rng.uniform(0.2, 2.0), 10 ** rng.uniform(-4, 0), int(rng.integers(1, 120))
    plain = fit_rulsif(x_nu, np.vstack([x_nu, x_add]), alpha=alpha, sigma=sigma, lam=lam, n_centres=b, seed=seed)
    got = ratio_at_added(x_nu, x_add, alpha, sigma, lam, n_centres=b, seed=seed)
    np.testing.assert_allclose(got, plain.ratio(x_add), rtol=1e-9, atol=1e-12 * np.abs(plain.ratio(x_add)).max())


def test_ratio_at_added_checks_its_arguments():
    x = np.random.default_rng(0).normal(size=(20, 2))
    with pytest.raises(ValueError, match="x_add"):
        ratio_at_added(x, x[:, :1], 0.1, 1.0, 0.1)
    with pytest.raises(ValueError, match="lam"):
        ratio_at_added(x, x, 0.1, 1.0, 0.0)
    with pytest.raises(ValueError, match="alpha"):
        ratio_at_added(x, x, 1.0, 1.0, 0.1)
    with pytest.raises(ValueError, match="x_nu"):
        ratio_at_added(x[:1], x, 0.1, 1.0, 0.1)


def _loocv_inputs():
    rng = np.random.default_rng(0)
    x_nu, x_de = rng.normal(size=(30, 2)), rng.normal(size=(30, 2))
    return x_nu, x_de, x_nu


@pytest.mark.parametrize("change, exc, match", [
    ({"lambdas": [0.0]}, ValueError, "lambdas must hold strictly positive"),  # scored 2.6e10
    ({"lambdas": [0.1, -1.0]}, ValueError, "lambdas"),
    ({"alpha": 2.0}, ValueError, r"alpha must be in \[0, 1\)"),  # scored a number
    ({"alpha": "0.1"}, TypeError, "alpha must be a real number"),
    ({"sigma": 0.0}, ValueError, "sigma must be positive"),  # ZeroDivisionError
    ({"sigma": float("nan")}, ValueError, "sigma must be finite"),
    ({"sigma": 1e-160}, ValueError, "sigma must be positive and finite, and at least"),  # its square underflows
    ({"x_nu": np.r_[_loocv_inputs()[0], [[np.nan, 0.0]]]}, ValueError, "x_nu .* NaN"),  # scored a finite number
    ({"x_nu": _loocv_inputs()[0][:1]}, ValueError, "at least 2"),
    ({"x_de": _loocv_inputs()[1][:, :1]}, ValueError, "x_de .* features"),
    ({"centres": _loocv_inputs()[2][:, :1]}, ValueError, "centres has 1 features"),
])
def test_loocv_scores_validates_its_arguments(change, exc, match):
    x_nu, x_de, centres = _loocv_inputs()
    args = {"x_nu": x_nu, "x_de": x_de, "centres": centres, "sigma": 1.0, "lambdas": [0.1], "alpha": 0.1, **change}
    with pytest.raises(exc, match=match):
        loocv_scores(**args)


def test_loocv_scores_reads_lists_and_one_feature_samples_as_fit_rulsif_does():
    x_nu, x_de, _ = _loocv_inputs()
    col = loocv_scores(x_nu[:, :1], x_de[:, :1], x_nu[:, :1], 1.0, [0.1, 1.0], 0.1)
    assert np.array_equal(loocv_scores(x_nu[:, 0], x_de[:, 0], x_nu[:, 0], 1.0, [0.1, 1.0], 0.1), col)
    assert np.array_equal(loocv_scores(x_nu.tolist(), x_de.tolist(), x_nu.tolist(), 1.0, [0.1, 1.0], 0.1),
                          loocv_scores(x_nu, x_de, x_nu, 1.0, [0.1, 1.0], 0.1))


def test_loocv_scores_accepts_a_width_far_below_min_scale_whose_square_float64_holds():
    # a detector's width is a factor of its data's own scale: 1e-152 has a normal square, and the
    # scores of data in those units are the scores of the same data in units of one
    x_nu, x_de, _ = _loocv_inputs()
    tiny = loocv_scores(x_nu * 2.0 ** -505, x_de * 2.0 ** -505, x_nu * 2.0 ** -505, 2.0 ** -505, [0.1, 1.0], 0.1)
    np.testing.assert_allclose(tiny, loocv_scores(x_nu, x_de, x_nu, 1.0, [0.1, 1.0], 0.1), rtol=1e-12)


@pytest.mark.parametrize("kwargs, exc, match", [
    ({"alpha": "0.5"}, TypeError, "alpha must be a real number"),
    ({"alpha": True}, TypeError, "alpha must be a real number"),
    ({"n_centres": 2.5}, TypeError, "n_centres must be an integer; got 2.5"),  # used 2 centres
    ({"seed": -1}, ValueError, "seed must be a non-negative integer"),  # numpy's "expected non-negative integer"
])
def test_fit_rulsif_refuses_parameters_of_the_wrong_type_naming_them(kwargs, exc, match):
    x_nu, x_de, _ = _loocv_inputs()
    with pytest.raises(exc, match=match):
        fit_rulsif(x_nu, x_de, **{"n_centres": 5, **kwargs})

"""AR-surrogate null (stream.surrogate): the AR fit, the simulation, and the surrogate scores."""

import numpy as np
import pytest

from core.kernels import gauss_kernel
from stream.alarms import permutation_null_rulsif, rulsif_window_score
from stream.embedding import embed
from stream.surrogate import fit_ar, simulate_ar, surrogate_null_rulsif


def ar_series(phi, size, seed, scale=1.0):
    rng = np.random.default_rng(seed)
    e = rng.normal(0.0, scale, size + 200)
    y = np.zeros_like(e)
    for t in range(len(phi), len(e)):
        y[t] = sum(p * y[t - 1 - i] for i, p in enumerate(phi)) + e[t]
    return y[200:]


def test_fit_ar_recovers_a_known_ar2_process():
    model = fit_ar(ar_series([0.6, -0.5], 5000, seed=0, scale=2.0) + 3.0)
    assert 2 <= model.order <= 5  # AIC may add a lag or two, with negligible coefficients
    np.testing.assert_allclose(model.phi[:2], [0.6, -0.5], atol=0.04)
    assert np.all(np.abs(model.phi[2:]) < 0.05)
    assert model.mean == pytest.approx(3.0, abs=0.1)
    assert model.resid.std() == pytest.approx(2.0, rel=0.05)
    assert abs(model.resid.mean()) < 1e-12


def test_fit_ar_picks_order_zero_for_white_noise_and_handles_constants():
    assert fit_ar(np.random.default_rng(1).normal(size=3000)).order <= 1
    const = fit_ar(np.full(50, 2.5))
    assert const.order == 0 and const.mean == 2.5 and not const.resid.any()


def test_fit_ar_rejects_bad_input():
    with pytest.raises(ValueError, match="at least 3 finite"):
        fit_ar([1.0, 2.0])
    with pytest.raises(ValueError, match="non-finite"):
        fit_ar([1.0, np.nan, 2.0, 3.0])
    with pytest.raises(ValueError, match="max_order"):
        fit_ar(np.arange(10.0), max_order=-1)


def test_simulated_surrogates_keep_the_serial_dependence():
    model = fit_ar(ar_series([0.8], 4000, seed=2))
    sims = simulate_ar([model], 2000, 3, np.random.default_rng(3))
    assert sims.shape == (3, 2000, 1)
    for s in sims[:, :, 0]:
        s = s - s.mean()
        assert (s[1:] @ s[:-1]) / (s @ s) == pytest.approx(0.8, abs=0.05)


def test_surrogate_scores_equal_a_direct_computation():
    rng_data = np.random.default_rng(4)
    vals = np.column_stack([ar_series([0.6, -0.5], 120, seed=5), rng_data.normal(size=120)])
    n, k, sigma, lam, alpha = 20, 3, 1.7, 0.1, 0.1
    null = surrogate_null_rulsif(vals, n, k, sigma, lam, alpha, True, 4, np.random.default_rng(6))
    # the same draws, scored by the reference (scipy) implementation of the window score
    sims = simulate_ar([fit_ar(vals[:, j]) for j in range(2)], 2 * n + k - 1, 4, np.random.default_rng(6))
    past, cur = np.arange(n), np.arange(n, 2 * n)
    for i in range(4):
        rows = embed(sims[i], k)
        gram = gauss_kernel(rows, rows, sigma)
        assert null[i, 0] == pytest.approx(rulsif_window_score(gram, past, cur, alpha, lam, False), abs=1e-9)
        assert null[i, 1] == pytest.approx(rulsif_window_score(gram, cur, past, alpha, lam, False), abs=1e-9)
    one_sided = surrogate_null_rulsif(vals, n, k, sigma, lam, alpha, False, 4, np.random.default_rng(6))
    np.testing.assert_allclose(one_sided[:, 0], null[:, 0], atol=1e-12)


def _window_scores(y, n, k, sigma, count):
    """Symmetric scores of ``count`` disjoint stretches of ``y`` (the score's real null)."""
    out = []
    width = 2 * n + k - 1
    for i in range(count):
        rows = embed(y[i * width:(i + 1) * width, None], k)
        gram = gauss_kernel(rows, rows, sigma)
        out.append(rulsif_window_score(gram, np.arange(n), np.arange(n, 2 * n), 0.1, 0.1, True))
    return np.array(out)


def test_surrogate_null_matches_the_real_null_of_an_autocorrelated_series_where_permutation_does_not():
    # the reason for the AR null (issue 3): a re-split of one pooled window of AR(2) data does not
    # behave like the score of two fresh windows (it sits higher and is relatively narrower: at this
    # size median 0.43 vs 0.36, 10-90 % range 0.70 vs 0.73); surrogates of the pooled values do
    n, k, sigma = 25, 3, 1.0
    y = ar_series([0.6, -0.5], 400 * (2 * n + k - 1), seed=7)
    y = y / y.std()
    real = _window_scores(y, n, k, sigma, 400)
    sur, perm = [], []
    rng = np.random.default_rng(8)
    width = 2 * n + k - 1
    for i in range(20):  # 20 different pooled windows, 20 null draws each
        vals = y[i * width:(i + 1) * width]
        sur.append(surrogate_null_rulsif(vals, n, k, sigma, 0.1, 0.1, True, 20, rng).sum(axis=1))
        perm.append(permutation_null_rulsif(embed(vals[:, None], k), n, sigma, 0.1, 0.1, True, 20, rng, block=k))
    sur, perm = np.concatenate(sur), np.concatenate(perm)
    for q in (0.5, 0.9):
        assert np.quantile(sur, q) == pytest.approx(np.quantile(real, q), rel=0.1)
    assert np.median(perm) > 1.15 * np.median(real)


def test_compiled_fit_equals_yule_walker_and_the_prediction_errors():
    from scipy.linalg import solve_toeplitz
    from scipy.signal import lfilter

    x = ar_series([0.5, 0.2, -0.3], 400, seed=9) + 1.0
    model = fit_ar(x)
    p = model.order
    assert p >= 3
    xc = x - x.mean()
    acov = np.array([xc[: x.size - lag] @ xc[lag:] / x.size for lag in range(p + 1)])
    np.testing.assert_allclose(model.phi, solve_toeplitz(acov[:p], acov[1:]), rtol=1e-10, atol=1e-12)
    resid = lfilter(np.r_[1.0, -model.phi], [1.0], xc)[p:]
    np.testing.assert_allclose(model.resid, resid - resid.mean(), atol=1e-12)


def test_simulation_is_the_ar_recursion_driven_by_resampled_residuals():
    from scipy.signal import lfilter

    model = fit_ar(ar_series([0.6, -0.5], 300, seed=10))
    sims = simulate_ar([model], 40, 3, np.random.default_rng(11), burn_in=7)
    idx = np.random.default_rng(11).integers(0, model.resid.size, size=(3, 47))
    ref = lfilter([1.0], np.r_[1.0, -model.phi], model.resid[idx], axis=1)[:, 7:] + model.mean
    np.testing.assert_allclose(sims[:, :, 0], ref, atol=1e-12)

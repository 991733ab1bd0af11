"""AR-surrogate null (ratiowatch.stream.calibration.surrogate): the AR fit, the simulation, and the surrogate scores."""

import numpy as np
import pytest

from ratiowatch.core.kernels import gauss_kernel
from ratiowatch.stream.calibration.permutation import permutation_null_rulsif
from naive import rulsif_window_score
from ratiowatch.stream.series.embedding import embed
from ratiowatch.stream.calibration.surrogate import (fit_ar, fit_ar_channels, fit_ar_models, simulate_ar,
                                                     surrogate_null_rulsif)


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
    with pytest.raises(ValueError, match="method must be one of"):
        fit_ar(np.arange(10.0), method="ols")


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
    # the reason for the AR null: a re-split of one pooled window of AR(2) data does not
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
    model = fit_ar(x, method="yw")
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


def test_rows_drawn_without_replacement_come_in_passes_ending_at_the_last_sample():
    from scipy.signal import lfilter

    rng = np.random.default_rng(12)
    x = rng.normal(size=(40, 2))
    models = fit_ar_channels(x, max_order=0)
    rows = models[0].resid.size
    sims = simulate_ar(models, 25, 200, np.random.default_rng(5), replace=False)
    # order 0: each sample is its row's residual plus the mean; no row repeats in the last 25
    resid = np.stack([m.resid for m in models], axis=1)
    for sim in sims:
        drawn = [int(np.flatnonzero(np.all(np.isclose(resid + [m.mean for m in models], r), axis=1))[0]) for r in sim]
        assert len(set(drawn)) == 25
    assert np.unique(sims[:, -1, 0]).size > 20  # the last row is a fresh draw each time
    # and it is the AR recursion driven by those rows, as with replacement
    model = fit_ar(ar_series([0.6, -0.5], 300, seed=10))
    sims = simulate_ar([model], 40, 3, np.random.default_rng(11), burn_in=7, replace=False)
    m = model.resid.size
    order = np.argsort(np.random.default_rng(11).random((3, -(-47 // m), m)), axis=2)
    idx = order.reshape(3, -1)[:, ::-1][:, -47:]
    ref = lfilter([1.0], np.r_[1.0, -model.phi], model.resid[idx], axis=1)[:, 7:] + model.mean
    np.testing.assert_allclose(sims[:, :, 0], ref, atol=1e-12)
    assert rows == 40


def test_a_start_from_the_data_is_the_recursion_from_a_block_of_the_data():
    x = ar_series([0.6, -0.5], 300, seed=10)
    model = fit_ar(x)
    p = model.order
    sims = simulate_ar([model], 40, 3, np.random.default_rng(11), burn_in=7, start=x)
    idx = np.random.default_rng(11).integers(0, model.resid.size, size=(3, 47))
    first = idx[:, 0] % (x.size - p + 1)
    for i in range(3):  # the AR recursion written out, from p centred values of x
        y = list(x[first[i]:first[i] + p] - model.mean)
        for t in range(47):
            y.append(model.resid[idx[i, t]] + sum(model.phi[j] * y[-1 - j] for j in range(p)))
        np.testing.assert_allclose(sims[i, :, 0], np.array(y[p + 7:]) + model.mean, atol=1e-12)


def test_a_stationary_model_forgets_its_start_within_the_burn_in():
    x = ar_series([0.6, -0.5], 300, seed=12)
    model = fit_ar(x)
    zero = simulate_ar([model], 50, 4, np.random.default_rng(13))
    data = simulate_ar([model], 50, 4, np.random.default_rng(13), start=x)
    np.testing.assert_allclose(data, zero, atol=1e-12)  # same residual draws, the start decayed away
    rng_zero, rng_data = np.random.default_rng(13), np.random.default_rng(13)
    simulate_ar([model], 50, 4, rng_zero)
    simulate_ar([model], 50, 4, rng_data, start=x)
    assert rng_zero.integers(1 << 30) == rng_data.integers(1 << 30)  # and the random stream goes on alike


@pytest.mark.parametrize("period", [7, 50])
def test_a_near_unit_root_surrogate_started_from_the_data_keeps_the_data_spread(period):
    # a sine with 1 % noise, fitted and debiased as the streaming null does: its root lies within
    # 1e-4 of the unit circle, and 100 burn-in steps from zero leave the surrogates 2-3 % (period 7)
    # or 10-30 % (period 50) of the data's variance; started from the data, about all of it
    rng = np.random.default_rng(14)
    x = np.sin(2 * np.pi * np.arange(53) / period + 0.3) + 0.01 * rng.normal(size=53)
    x = ((x - x.mean()) / x.std())[:, None]
    models = fit_ar_models(x, rng=np.random.default_rng(1))
    zero = simulate_ar(models, 103, 40, np.random.default_rng(15))
    data = simulate_ar(models, 103, 40, np.random.default_rng(15), start=x)
    assert zero.var(axis=1).mean() < 0.4
    assert data.var(axis=1).mean() == pytest.approx(1.0, rel=0.35)


def test_a_start_must_hold_every_channel_and_an_order_of_values():
    x = ar_series([0.6, -0.5], 100, seed=16)
    model = fit_ar(x)
    with pytest.raises(ValueError, match="start must have shape"):
        simulate_ar([model], 10, 2, np.random.default_rng(0), start=np.c_[x, x])
    with pytest.raises(ValueError, match="start must have shape"):
        simulate_ar([model], 10, 2, np.random.default_rng(0), start=x[:1])


def burg_reference(x, order):
    """Textbook Burg (vectorised, order by order): the coefficients and error variance of orders 0..order."""
    xc = x - x.mean()
    f, b = xc[1:].copy(), xc[:-1].copy()  # forward errors at t = p..T-1, backward errors at t - 1
    a, s2 = np.zeros(0), xc @ xc / xc.size
    coefs, s2s = [a], [s2]
    for _ in range(order):
        refl = 2.0 * (f @ b) / (f @ f + b @ b)
        a = np.r_[a - refl * a[::-1], refl]
        s2 *= 1.0 - refl * refl
        f, b = (f - refl * b)[1:], (b - refl * f)[:-1]
        coefs.append(a)
        s2s.append(s2)
    return coefs, s2s


@pytest.mark.parametrize("seed", [12, 13, 14])
def test_compiled_burg_equals_the_textbook_recursion_with_the_aic_order(seed):
    from scipy.signal import lfilter

    x = ar_series([0.5, 0.2, -0.3], 120, seed=seed) + 1.0
    coefs, s2s = burg_reference(x, 5)
    aic = [x.size * np.log(v) + 2 * p for p, v in enumerate(s2s)]
    model = fit_ar(x)  # Burg is the default
    p = model.order
    assert p == int(np.argmin(aic)) and p >= 2
    np.testing.assert_allclose(model.phi, coefs[p], rtol=1e-10, atol=1e-12)
    xc = x - x.mean()
    resid = lfilter(np.r_[1.0, -model.phi], [1.0], xc)[p:]
    np.testing.assert_allclose(model.resid, resid - resid.mean(), atol=1e-12)
    # and it is not Yule-Walker's answer
    assert np.max(np.abs(fit_ar(x, p, method="yw").phi - model.phi)) > 1e-3


def _short_fits(phi, size, seeds):
    """Both estimators' coefficients (padded / cut to len(phi)) on the same short AR series, (seeds, 2, p)."""
    from scipy.signal import lfilter

    p = len(phi)
    e = np.random.default_rng(seeds).normal(size=(seeds, size + 300))
    y = lfilter([1.0], np.r_[1.0, -np.asarray(phi)], e, axis=1)[:, 300:]
    out = np.zeros((seeds, 2, p))
    for i, s in enumerate(y):
        for j, method in enumerate(("yw", "burg")):
            c = fit_ar(s, p, method=method).phi
            out[i, j, : c.size] = c
    return out


@pytest.mark.parametrize("phi, burg_share", [([0.9], 0.85), ([1.5, -0.75], 0.4)])
def test_burg_recovers_ar_coefficients_of_short_series_with_less_bias_than_yule_walker(phi, burg_share):
    # the detector fits ~53 values; there Yule-Walker's tapered autocovariances pull strongly
    # autocorrelated coefficients towards zero (AR(2) below: 1.37 / -0.65 for 1.5 / -0.75),
    # Burg's much less. 500 series of 53 values, the same series for both estimators.
    fits = _short_fits(phi, 53, 500)
    bias = np.abs(fits.mean(axis=0) - np.asarray(phi))  # (2, p): yw, burg
    rmse = np.sqrt(((fits - np.asarray(phi)) ** 2).mean(axis=0))
    assert np.all(bias[0] > 0.05), bias  # the effect is real at this size
    assert np.all(bias[1] < burg_share * bias[0]), bias
    assert np.all(rmse[1] < rmse[0]), rmse


@pytest.mark.parametrize("method", ["burg", "yw"])
def test_fit_is_stationary_on_near_unit_root_and_trending_input(method):
    rng = np.random.default_rng(15)
    t = np.arange(60.0)
    inputs = [np.cumsum(rng.normal(size=60)),            # a random walk
              ar_series([0.999], 60, seed=16),           # near unit root
              ar_series([1.95, -0.9999], 60, seed=17),   # a nearly undamped oscillation
              0.5 * t + rng.normal(0.0, 0.01, 60),       # a trend with little noise
              np.r_[np.zeros(30), np.full(30, 5.0)] + rng.normal(0.0, 0.01, 60)]  # a level shift
    for x in inputs:
        model = fit_ar(x, method=method)
        assert model.order >= 1
        companion = np.zeros((model.order, model.order))
        companion[0] = model.phi
        companion[1:, :-1] = np.eye(model.order - 1)
        assert np.max(np.abs(np.linalg.eigvals(companion))) < 1.0
        sims = simulate_ar([model], 5000, 2, np.random.default_rng(18))
        assert np.isfinite(sims).all() and np.abs(sims - model.mean).max() < 1e3 * (np.ptp(x) + 1e-9)


def test_channels_share_the_order_of_least_summed_aic_and_keep_their_own_coefficients():
    for seed in range(20, 30):
        v = np.column_stack([ar_series([0.6, -0.5], 53, seed=seed), ar_series([0.6, -0.5], 53, seed=seed + 100),
                             np.full(53, 1.5)])  # a constant channel: AR(0), no say in the order
        models = fit_ar_channels(v)
        p = models[0].order
        assert models[1].order == p and models[2].order == 0 and not models[2].resid.any()
        aic = [sum(53 * np.log(burg_reference(v[:, j], 5)[1][q]) for j in range(2)) + 4 * q for q in range(6)]
        assert p == int(np.argmin(aic))
        for j in range(2):  # each channel's coefficients are its own Burg fit of that order
            np.testing.assert_allclose(models[j].phi, burg_reference(v[:, j], 5)[0][p], rtol=1e-10, atol=1e-12)
    one = fit_ar_channels(v[:, :1])[0]  # a single channel: exactly fit_ar
    np.testing.assert_array_equal(one.phi, fit_ar(v[:, 0]).phi)
    np.testing.assert_array_equal(one.resid, fit_ar(v[:, 0]).resid)


def test_one_order_keeps_correlated_surrogates_as_wide_as_the_truth():
    # two channels of the same AR(2) with innovation correlation 0.95, 53 values fitted: separate
    # AIC orders differ about once in five and narrow the surrogates' Fisher-z null
    from scipy.signal import lfilter

    from ratiowatch.stream.calibration.correlation import fisher_z_diff

    n, length, rho = 50, 53, 0.95
    rng = np.random.default_rng(20)
    z = rng.normal(size=(3000, 2 * n + length + 200, 2))
    e = np.stack([z[..., 0], rho * z[..., 0] + np.sqrt(1 - rho**2) * z[..., 1]], axis=2)
    y = lfilter([1.0], [1.0, -0.6, 0.5], e, axis=1)[:, 200:]
    true_sd = fisher_z_diff(y[:, length:length + n], y[:, length + n:])[:, 0].std()
    sd = {"separate": [], "joint": []}
    for i in range(150):
        fits = {"separate": [fit_ar(y[i, :length, j]) for j in range(2)], "joint": fit_ar_channels(y[i, :length])}
        for key, models in fits.items():
            s = simulate_ar(models, 2 * n, 100, np.random.default_rng(i))
            sd[key].append(fisher_z_diff(s[:, :n], s[:, n:])[:, 0].std())
    sep, joint = np.mean(sd["separate"]) / true_sd, np.mean(sd["joint"]) / true_sd
    assert joint > sep + 0.005, (sep, joint)
    assert abs(joint - 1.0) < 0.03, joint


def test_fit_ar_channels_rejects_bad_input():
    with pytest.raises(ValueError, match="shape"):
        fit_ar_channels(np.zeros(10))
    with pytest.raises(ValueError, match="non-finite"):
        fit_ar_channels(np.array([[1.0, 2.0], [np.nan, 1.0], [2.0, 3.0], [1.0, 0.0]]))
    with pytest.raises(ValueError, match="method must be one of"):
        fit_ar_channels(np.zeros((10, 2)), method="ols")


def test_scores_do_not_depend_on_the_chunking_of_the_gram_matrices(monkeypatch):
    import ratiowatch.stream.calibration.surrogate as surrogate

    vals = ar_series([0.6, -0.5], 200, seed=12)
    args = (vals, 15, 3, 1.3, 0.1, 0.1, True, 7)
    whole = surrogate_null_rulsif(*args, np.random.default_rng(13))
    monkeypatch.setattr(surrogate, "_GRAM_CHUNK_ENTRIES", 3 * 30 * 31 // 2)  # three surrogates per chunk
    np.testing.assert_array_equal(surrogate_null_rulsif(*args, np.random.default_rng(13)), whole)


# ---------------------------------------------------------------- the compiled calibration kernels
# (stream speed: the packed-triangle Gram and the block-copy directions must compute what
# the definition says, to rounding)

def _upper(mat):
    return mat[np.triu_indices(mat.shape[0])]


@pytest.mark.parametrize("dim, k, sigma", [(1, 10, 3.0), (1, 1, 0.7), (3, 4, 2.0), (2, 3, 0.04)])
def test_packed_gram_equals_the_direct_gram_of_the_embedded_surrogates(dim, k, sigma):
    from ratiowatch.core.kernels import FLUSH_EXPONENT, sq_dist
    from ratiowatch.stream.calibration.surrogate import _packed_size, _surrogate_grams

    n, count = 12, 3
    sims = np.random.default_rng(20).normal(size=(count, 2 * n + k - 1, dim)).cumsum(axis=1) * 0.4
    packed = _surrogate_grams(sims, n, k, sigma)
    assert packed.shape == (count, _packed_size(2 * n))
    for s in range(count):
        rows = embed(sims[s], k)
        direct = _upper(gauss_kernel(rows, rows, sigma))
        np.testing.assert_allclose(packed[s], direct, rtol=1e-12, atol=0.0)
        # the diagonal is exactly 1 and flushed entries are exactly 0 (ratiowatch.core.kernels' rule)
        diag = np.cumsum(np.r_[0, np.arange(2 * n, 1, -1)])
        assert np.all(packed[s][diag] == 1.0)
        flushed = _upper(-sq_dist(rows, rows) / (2 * sigma * sigma)) <= FLUSH_EXPONENT - 1e-6
        assert np.all(packed[s][flushed] == 0.0)
        if sigma < 0.1:
            assert flushed.any()  # the case is exercised


@pytest.mark.parametrize("dim, n, k, sigma, lam, alpha, symmetric", [
    (1, 50, 10, 3.0, 0.1, 0.1, True),     # the detector's benchmark configuration
    (2, 20, 3, 1.7, 0.1, 0.1, True),
    (1, 15, 1, 0.3, 0.01, 0.0, False),    # uLSIF (alpha = 0), one direction
    (3, 30, 5, 50.0, 1e-3, 0.5, True),    # a near-constant Gram (large sigma, small lambda)
    (1, 40, 8, 0.05, 0.1, 0.1, True),     # most entries flushed to 0
])
def test_surrogate_null_equals_the_rulsif_definition_on_the_surrogate_halves(dim, n, k, sigma, lam, alpha,
                                                                               symmetric):
    # the definition: ratiowatch.core.rulsif's fit with the given sigma and lambda and every numerator sample a
    # centre, on the embedded past / current halves of the same surrogate draws
    from ratiowatch.core.rulsif import fit_rulsif

    rng = np.random.default_rng(21)
    vals = rng.normal(size=(90, dim)).cumsum(axis=0) * 0.3
    count = 4
    null = surrogate_null_rulsif(vals, n, k, sigma, lam, alpha, symmetric, count, np.random.default_rng(22))
    sims = simulate_ar([fit_ar(vals[:, j]) for j in range(dim)], 2 * n + k - 1, count, np.random.default_rng(22))
    for i in range(count):
        rows = embed(sims[i], k)
        past, cur = rows[:n], rows[n:]
        fwd = fit_rulsif(past, cur, alpha=alpha, sigma=sigma, lam=lam, n_centres=n).pe
        assert null[i, 0] == pytest.approx(fwd, rel=1e-9, abs=1e-12)
        if symmetric:
            bwd = fit_rulsif(cur, past, alpha=alpha, sigma=sigma, lam=lam, n_centres=n).pe
            assert null[i, 1] == pytest.approx(bwd, rel=1e-9, abs=1e-12)


def test_detrend_matches_polyfit_and_the_line_is_added_back():
    from ratiowatch.stream.calibration.surrogate import add_trend, detrend

    rng = np.random.default_rng(30)
    vals = rng.normal(size=(70, 2)) + np.arange(70.0)[:, None] * np.array([0.02, -0.3]) + 4.0
    resid, slopes = detrend(vals)
    for j in range(2):
        b, a = np.polyfit(np.arange(70.0), vals[:, j], 1)
        assert slopes[j] == pytest.approx(b, rel=1e-10)
        np.testing.assert_allclose(resid[:, j], vals[:, j] - (a + b * np.arange(70.0)), atol=1e-10)
    sims = np.zeros((3, 9, 2))
    add_trend(sims, slopes)
    np.testing.assert_allclose(sims[1, :, 1], slopes[1] * np.arange(9.0))


def test_shrink_slopes_drops_noise_slopes_and_keeps_a_clear_trend():
    from ratiowatch.stream.calibration.surrogate import detrend, shrink_slopes

    tt = np.arange(103.0)[:, None]
    kept, dropped = [], []
    for seed in range(200):
        e = ar_series([0.5], 103, seed=seed)[:, None]
        r, b = detrend(e)
        dropped.append(abs(shrink_slopes(r, b)[0]) / max(abs(b[0]), 1e-300))
        r, b = detrend(e + 0.05 * tt)  # 5 noise sd over the stretch
        kept.append(shrink_slopes(r, b)[0] / b[0])
    # about 1 - P(|z| > 1) of the noise slopes are dropped whole (z ~ N(0, 1) under no trend)
    assert 0.5 < np.mean(np.asarray(dropped) == 0.0) < 0.85
    assert np.min(kept) > 0.9


def _brute_step_t(x: np.ndarray, k: int) -> tuple[float, float, np.ndarray, float]:
    """(|t| of the step, slope, residual, slope's sum of squares) of the least-squares fit of
    [1, t, 1[t >= k]] to ``x``, each term computed directly (tests the vectorised search)."""
    tt = np.arange(x.size, dtype=np.float64)
    design = np.column_stack([np.ones(x.size), tt, (tt >= k).astype(np.float64)])
    coef, *_ = np.linalg.lstsq(design, x, rcond=None)
    resid = x - design @ coef
    cov = np.linalg.inv(design.T @ design)
    s2 = resid @ resid / (x.size - 3)
    r = min(max((resid[1:] @ resid[:-1]) / (resid @ resid), 0.0), 0.95)
    t = abs(coef[2]) / np.sqrt(s2 * (1 + r) / (1 - r) * cov[2, 2])
    return t, coef[1], resid, 1.0 / cov[1, 1]


def test_line_and_step_matches_a_direct_least_squares_search():
    from scipy.special import ndtri

    from ratiowatch.stream.calibration.surrogate import detrend, line_and_step

    rng = np.random.default_rng(31)
    tt = np.arange(103.0)
    cases = [np.r_[np.full(40, 1.5), np.zeros(63)] + rng.normal(size=103),  # a shift
             0.03 * tt + rng.normal(size=103),  # a trend
             ar_series([0.5], 103, seed=5),  # neither
             np.r_[np.zeros(70), np.full(33, -2.0)] + 0.01 * tt + 0.5 * rng.normal(size=103)]  # both
    resid, slopes, sxx, at, size = line_and_step(np.column_stack(cases))
    gate = -ndtri(0.05 / (2 * (103 - 2 * 5 + 1)))
    for j, x in enumerate(cases):
        stats = [(_brute_step_t(x, k)[0], k) for k in range(5, 103 - 5 + 1)]
        t_best, k_best = max(stats)
        if t_best > gate:
            assert at[j] == k_best
            _, b, r, s = _brute_step_t(x, k_best)
            assert slopes[j] == pytest.approx(b, rel=1e-8, abs=1e-12)
            np.testing.assert_allclose(resid[:, j], r, atol=1e-9)
            assert sxx[j] == pytest.approx(s, rel=1e-8)
        else:
            assert at[j] == -1 and size[j] == 0.0
            assert slopes[j] == pytest.approx(np.polyfit(tt, x, 1)[0], rel=1e-8)
    assert list(at >= 0) == [True, False, False, True]
    assert abs(at[0] - 40) <= 2 and abs(at[3] - 70) <= 2
    # a stretch too short for a step on either side is the plain line
    short = rng.normal(size=(9, 1)) + np.r_[np.zeros(4), np.ones(5)][:, None]
    r_short, b_short, _, at_short, _ = line_and_step(short)
    r_line, b_line = detrend(short)
    assert at_short[0] == -1 and b_short[0] == b_line[0]
    np.testing.assert_array_equal(r_short, r_line)


def test_a_level_shift_behind_the_windows_does_not_become_the_nulls_trend():
    """A shift in the stretch the line is fitted to would be read as a steep slope, and adding it
    back to every surrogate would put the shift into the null (4x the threshold after a shift had
    left the windows, and the return to the old level 250 samples later went unseen)."""
    from ratiowatch.stream.calibration.null import NullCalibrator

    rng = np.random.default_rng(32)
    n, k = 50, 3
    before = np.r_[np.full(53, 2.0), np.zeros(50)][:, None] + rng.normal(size=(103, 1))
    after = rng.normal(size=(103, 1))  # the same noise without the shift
    thresholds = []
    for vals in (before, after):
        cal = NullCalibrator("ar", "rulsif", 0.1, True, 10, 1e-4, k)
        cal.calibrate_ar(vals[-53:], n, 0.9, 0.1, np.random.default_rng(0), trend_values=vals)
        thresholds.append(cal.threshold)
    assert thresholds[0] < 1.5 * thresholds[1], thresholds


def test_a_step_never_steepens_the_nulls_trend(monkeypatch):
    """A step may explain a slope away, never make one: on a short stretch the step and the line
    are nearly collinear, and a rise, a drop and a rise (the line nearly flat) fit as a steep line
    with a step. The null then keeps the plain line's slope (the demo's host-c: a chance step in
    its first 53 values made a slope of 0.049 per sample out of 0.002, the threshold at sample 250
    was 5.5 against 2.4, and its change there went unseen)."""
    import ratiowatch.stream.calibration.null as null_module
    from ratiowatch.stream.calibration.null import NullCalibrator
    from ratiowatch.stream.calibration.surrogate import detrend, line_and_step, shrink_slopes

    rng = np.random.default_rng(33)
    tt = np.arange(53.0)
    vals = (0.05 * tt - 2.0 * (tt >= 26) + 0.3 * rng.normal(size=53))[:, None]
    resid, slopes, sxx, at, _ = line_and_step(vals)
    line_resid, line_slopes = detrend(vals)
    assert at[0] >= 0  # the premise: a step is found, and with it a steep slope where the line has none
    assert abs(shrink_slopes(resid, slopes, sxx)[0]) > 0.04 and shrink_slopes(line_resid, line_slopes)[0] == 0.0

    def threshold() -> float:
        cal = NullCalibrator("ar", "rulsif", 0.1, True, 10, 1e-4, 3)
        cal.calibrate_ar(vals[-50:], 20, 0.9, 0.1, np.random.default_rng(0), trend_values=vals)
        return cal.threshold

    with_step = threshold()
    no_step = (lambda v: (*detrend(v), np.full(v.shape[1], float(((tt - tt.mean()) ** 2).sum())),
                          np.full(v.shape[1], -1), np.zeros(v.shape[1])))
    monkeypatch.setattr(null_module, "line_and_step", no_step)
    assert with_step == threshold()


def test_surrogate_null_with_slopes_scores_the_surrogates_plus_the_line():
    from ratiowatch.core.rulsif import fit_rulsif
    from ratiowatch.stream.calibration.surrogate import add_trend

    rng = np.random.default_rng(31)
    vals = rng.normal(size=(60, 1))
    n, k, count, slopes = 20, 3, 3, np.array([0.07])
    null = surrogate_null_rulsif(vals, n, k, 0.8, 0.1, 0.1, True, count, np.random.default_rng(32), slopes=slopes)
    sims = add_trend(simulate_ar([fit_ar(vals[:, 0])], 2 * n + k - 1, count, np.random.default_rng(32)), slopes)
    plain = surrogate_null_rulsif(vals, n, k, 0.8, 0.1, 0.1, True, count, np.random.default_rng(32))
    for i in range(count):
        rows = embed(sims[i], k)
        fwd = fit_rulsif(rows[:n], rows[n:], alpha=0.1, sigma=0.8, lam=0.1, n_centres=n).pe
        assert null[i, 0] == pytest.approx(fwd, rel=1e-9, abs=1e-12)
    # the trend's shift between the windows raises the scores
    assert null.mean() > plain.mean()


def test_debias_ar_removes_most_of_the_small_sample_bias():
    # independent check: the Monte-Carlo mean of Burg's AR(1) estimate on 53 values sits below phi
    # (E phi-hat ~ phi - (1 + 3 phi) / T); the corrected estimates' mean is much closer
    from ratiowatch.stream.calibration.surrogate import debias_ar

    rng = np.random.default_rng(40)
    raw, fixed = [], []
    for s in range(300):
        x = ar_series([0.5], 53, seed=1000 + s)
        model = fit_ar(x, max_order=1)
        if model.order == 1:
            raw.append(model.phi[0])
            fixed.append(debias_ar(model, x, rng).phi[0])
    assert np.mean(raw) < 0.5 - 0.02
    assert abs(np.mean(fixed) - 0.5) < 0.5 * abs(np.mean(raw) - 0.5)


def test_debias_ar_keeps_the_model_stationary_and_leaves_ar0_alone():
    from ratiowatch.stream.calibration.surrogate import _stationary, debias_ar

    rng = np.random.default_rng(41)
    for s in range(20):  # near a unit root, the full correction would often cross it
        x = ar_series([0.97], 53, seed=2000 + s)
        model = debias_ar(fit_ar(x, max_order=3), x, rng)
        assert _stationary(model.phi)
        assert np.all(np.abs(np.roots(np.r_[1.0, -model.phi])) < 1.0)  # companion roots inside the circle
        assert model.resid.size == x.size - model.order
    white = fit_ar(np.random.default_rng(42).normal(size=53), max_order=0)
    state = rng.bit_generator.state
    assert debias_ar(white, np.zeros(53), rng) is white
    assert rng.bit_generator.state == state  # AR(0): no draws


def test_stationary_matches_the_roots_of_the_characteristic_polynomial():
    from ratiowatch.stream.calibration.surrogate import _stationary

    rng = np.random.default_rng(43)
    for _ in range(300):
        phi = rng.uniform(-1.5, 1.5, size=int(rng.integers(1, 6)))
        roots = np.roots(np.r_[1.0, -phi])  # z^p - phi_1 z^(p-1) - ... - phi_p
        assert _stationary(phi) == bool(np.all(np.abs(roots) < 1.0))


def test_debiased_surrogate_null_scores_the_debiased_models_surrogates():
    from ratiowatch.core.rulsif import fit_rulsif
    from ratiowatch.stream.calibration.surrogate import debias_ar

    vals = np.column_stack([ar_series([0.6], 80, seed=44), ar_series([0.3], 80, seed=45)])
    n, k, count = 15, 3, 3
    null = surrogate_null_rulsif(vals, n, k, 0.9, 0.1, 0.1, True, count, np.random.default_rng(46), debias=True)
    rng = np.random.default_rng(46)
    models = [debias_ar(fit_ar(vals[:, j]), vals[:, j], rng) for j in range(2)]
    sims = simulate_ar(models, 2 * n + k - 1, count, rng)
    for i in range(count):
        rows = embed(sims[i], k)
        assert null[i, 0] == pytest.approx(fit_rulsif(rows[:n], rows[n:], alpha=0.1, sigma=0.9, lam=0.1,
                                                      n_centres=n).pe, rel=1e-9, abs=1e-12)
        assert null[i, 1] == pytest.approx(fit_rulsif(rows[n:], rows[:n], alpha=0.1, sigma=0.9, lam=0.1,
                                                      n_centres=n).pe, rel=1e-9, abs=1e-12)

"""AR-surrogate null of the two-window change score (keeps the serial dependence a permutation destroys).

Why: a permutation null treats the pooled subsequences as exchangeable. On autocorrelated data the
real score is more variable than any re-split of the pool (each window holds a few long excursions,
a shuffled window averages over them), so a permutation threshold is too low and alarms fire on
stationary noise (about 3 false alarms per 10,000 stationary AR(2) samples).

The surrogate null instead fits an autoregressive model to the preprocessed values behind the
windows (Burg's method, order chosen by AIC up to ``max_order``; one model per channel,
residual *rows* resampled jointly so the contemporaneous cross-correlation survives), simulates
``count`` series of the same length driven by resampled residuals (a residual bootstrap), embeds them
exactly as the detector does, and scores each one's past / current split with the detector's
sigma and lambda. On a 100,000-sample stationary AR(2) run (n = 50) the surrogate scores
matched the detector's own score distribution at the 50 / 90 / 99 / 99.9 % quantiles within
0.02 / 0.02 / 0.04 / 0.09, where the block-permutation null was 0.04 / 0.03 / -0.03 / -0.16 off
(docs/experiments.md has the measurement; made with the Yule-Walker fit used before Burg's).

Why Burg rather than Yule-Walker: the detector fits ~53 values, and on so few Yule-Walker's
tapered autocovariances pull strongly autocorrelated coefficients towards zero (AR(2) 1.5 / -0.75:
mean estimates 1.37 / -0.65, Burg 1.47 / -0.74), so its surrogates were a little too smooth. On
stationary AR(2) streams (n = 50) the correlation view's surrogate spread was 2.2 % (uncorrelated
channels) and 4.8 % (innovation correlation 0.95) below the true one, with Burg 0.2 % and 3.4 %;
false alarms per 10,000 samples fell from 0.79 to 0.70 (univariate, seeds 4-103) and from 0.51 to
0.41 (bivariate, seeds 4-123 at correlation 0 and 0.95), at the same speed. What Burg does not fix:
the view's per-step exceedance (about 8e-5 against 5e-5 either way) comes mostly from the
threshold's own variability (the pooled surrogate RMS varies by 9 % between calibrations: every fit
sees only ~53 values), not from its bias. :func:`fit_ar_channels` (one AR order for all channels)
brings it to 4.8e-5 at correlation 0.95 and 5.4e-5 at 0 (seeds 4-123) when the correlation view's
surrogates use it (a change in the detector, not made here).

Examples
--------
>>> rng = np.random.default_rng(0)
>>> e = rng.normal(size=2000)
>>> x = np.zeros(2000)
>>> for t in range(2, 2000):
...     x[t] = 0.6 * x[t - 1] - 0.5 * x[t - 2] + e[t]
>>> model = fit_ar(x)
>>> model.order, bool(np.allclose(model.phi, [0.6, -0.5], atol=0.06))
(2, True)
>>> sims = simulate_ar([model], 30, 4, np.random.default_rng(1))
>>> sims.shape
(4, 30, 1)
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from numba import njit

from ratiowatch.core.kernels import FLUSH_EXPONENT
from ratiowatch.core.gram_pe import pe_direction_from_blocks

#: burn-in samples discarded at the start of every simulated series (forgets the zero start)
BURN_IN = 100


@dataclass(frozen=True)
class ARModel:
    """A fitted AR(p): ``x_t - mean = sum_i phi[i] (x_{t-1-i} - mean) + e_t``; ``resid`` are the e_t."""

    phi: np.ndarray
    mean: float
    resid: np.ndarray

    @property
    def order(self) -> int:
        return int(self.phi.size)


#: AR estimators :func:`fit_ar` offers ("burg": the default, see there; "yw": Yule-Walker)
AR_METHODS = ("burg", "yw")


def fit_ar(x: np.ndarray, max_order: int = 5, method: str = "burg") -> ARModel:
    """AR fit with the order chosen by AIC (``T log s2_p + 2 p``), 0..``max_order``.

    ``method="burg"`` (default): Burg's method, each reflection coefficient minimising the summed
    forward and backward prediction errors of the data itself. ``"yw"``: Yule-Walker (biased
    autocovariances, Levinson-Durbin). Both always yield a stationary model (every reflection
    coefficient is below 1 in magnitude), so simulated surrogates cannot explode. Why Burg: the
    detector fits ~53 values, and Yule-Walker's coefficients shrink towards zero on short,
    strongly autocorrelated series (the biased autocovariances taper the lags), which makes the
    surrogates a little too smooth and their null too narrow in the tail.
    Residuals are the one-step prediction errors from ``t = p`` on, centred.
    A constant series gives AR(0) with zero residuals.

    Examples
    --------
    >>> e = np.random.default_rng(0).normal(size=53)
    >>> x = np.zeros(53)
    >>> for t in range(1, 53):
    ...     x[t] = 0.9 * x[t - 1] + e[t]
    >>> burg, yw = fit_ar(x, max_order=1), fit_ar(x, max_order=1, method="yw")
    >>> burg.order, round(float(burg.phi[0]), 2), round(float(yw.phi[0]), 2)
    (1, 0.94, 0.92)
    """
    x = np.ascontiguousarray(np.asarray(x, dtype=np.float64).reshape(-1))
    _check_fit_args(x, max_order, method)
    mean, coefs, s2s = _ar_path(x, int(max_order), method == "burg")
    if not s2s.size:  # a constant series
        return ARModel(np.zeros(0), float(mean), np.zeros(x.size))
    aic = x.size * np.log(s2s) + 2.0 * np.arange(s2s.size)
    return _model(x, mean, coefs, int(np.argmin(aic)))


def _check_fit_args(x: np.ndarray, max_order: int, method: str) -> None:
    if x.size < 3 or not np.isfinite(x).all():
        raise ValueError(f"fit_ar needs at least 3 finite values; got {x.size} values "
                         f"({int((~np.isfinite(x)).sum())} non-finite)")
    if int(max_order) != max_order or max_order < 0:
        raise ValueError(f"max_order must be an integer >= 0; got {max_order!r}")
    if method not in AR_METHODS:
        raise ValueError(f"method must be one of {AR_METHODS}; got {method!r}")


def fit_ar_channels(values: np.ndarray, max_order: int = 5, method: str = "burg") -> list[ARModel]:
    """One AR model per column of ``values`` (T, channels), all of one order: the least summed AIC.

    Why one order: surrogates of correlated channels share their residual rows, and two channels
    of the same dynamics fitted to different orders (AIC picks them apart on ~53 values about
    once in five) get different filters, so the surrogates' correlation wanders and the Fisher-z
    null of the correlation view came out 3 % narrower than the truth at innovation correlation
    0.95 (1.6 % with one order; stationary AR(2), n = 50). Coefficients stay per channel; a
    constant channel gets AR(0) and no say in the order.

    Examples
    --------
    >>> v = np.random.default_rng(0).normal(size=(60, 2)).cumsum(axis=0)
    >>> [m.order for m in fit_ar_channels(v)]
    [1, 1]
    """
    values = np.asarray(values, dtype=np.float64)
    if values.ndim != 2 or values.shape[1] < 1:
        raise ValueError(f"values must have shape (T, channels); got {values.shape}")
    cols = [np.ascontiguousarray(values[:, j]) for j in range(values.shape[1])]
    for c in cols:
        _check_fit_args(c, max_order, method)
    paths = [_ar_path(c, int(max_order), method == "burg") for c in cols]
    live = [s2s for _, _, s2s in paths if s2s.size]
    order = 0
    if live:
        top = min(s2s.size for s2s in live)  # orders every live channel reached
        aic = sum(values.shape[0] * np.log(s2s[:top]) for s2s in live) + 2.0 * len(live) * np.arange(top)
        order = int(np.argmin(aic))
    return [_model(c, mean, coefs, min(order, s2s.size - 1)) if s2s.size
            else ARModel(np.zeros(0), float(mean), np.zeros(c.size))  # a constant channel
            for c, (mean, coefs, s2s) in zip(cols, paths)]


def _model(x: np.ndarray, mean: float, coefs: np.ndarray, p: int) -> ARModel:
    """The AR(p) of an order path (row p of ``coefs``) with its centred one-step prediction errors."""
    phi = coefs[p, :p].copy()
    return ARModel(phi, float(mean), _residuals(x, mean, phi))


@njit(cache=True)
def _residuals(x, mean, phi):
    """One-step prediction errors of the centred ``x`` from ``t = p`` on, centred."""
    p = phi.size
    resid = np.empty(x.size - p)
    for t in range(p, x.size):
        e = x[t] - mean
        for i in range(p):
            e -= phi[i] * (x[t - 1 - i] - mean)
        resid[t - p] = e
    return resid - resid.mean()


@njit(cache=True)
def _ar_path(x, max_order, burg):
    """Compiled body of :func:`fit_ar`: the mean, coefficients (row p = AR(p)) and error variances of orders 0..

    The path stops at ``min(max_order, T - 2)`` or before the first order whose reflection
    coefficient is not below 1 in magnitude (numerically singular: higher orders add nothing).
    A constant series gives an empty variance path (AR(0), zero residuals).
    """
    t_len = x.size
    mean = x.mean()
    xc = x - mean
    top = min(max_order, t_len - 2)
    acov = np.empty(top + 1)
    for lag in range(top + 1):
        s = 0.0
        for t in range(t_len - lag):
            s += xc[t] * xc[t + lag]
        acov[lag] = s / t_len
    coefs = np.zeros((top + 1, max(top, 1)))
    s2s = np.empty(top + 1)
    if not acov[0] > 1e-300:
        return mean, coefs, s2s[:0]
    s2s[0] = acov[0]
    f = xc.copy()  # Burg's forward / backward prediction errors
    b = xc.copy()
    for p in range(1, top + 1):
        if burg:
            # 2 sum f_t b_{t-1} / sum (f_t^2 + b_{t-1}^2) over t = p..T-1: below 1 by Cauchy-Schwarz
            num = 0.0
            den = 0.0
            for t in range(p, t_len):
                num += f[t] * b[t - 1]
                den += f[t] * f[t] + b[t - 1] * b[t - 1]
            refl = 2.0 * num / den if den > 1e-300 * t_len else 1.0
        else:  # Levinson-Durbin on the biased autocovariances (Yule-Walker)
            acc = acov[p]
            for i in range(p - 1):
                acc -= coefs[p - 1, i] * acov[p - 1 - i]
            refl = acc / s2s[p - 1]
        if not abs(refl) < 1.0:  # exactly predictable (or rounding): higher orders add nothing
            return mean, coefs[:p], s2s[:p]
        if burg:
            for t in range(t_len - 1, p - 1, -1):  # backwards: b[t - 1] is still order p - 1's
                ft = f[t]
                bt = b[t - 1]
                f[t] = ft - refl * bt
                b[t] = bt - refl * ft
        for i in range(p - 1):
            coefs[p, i] = coefs[p - 1, i] - refl * coefs[p - 1, p - 2 - i]
        coefs[p, p - 1] = refl
        s2s[p] = s2s[p - 1] * (1.0 - refl * refl)
    return mean, coefs, s2s


#: pseudo-series whose refits estimate an AR fit's small-sample bias (:func:`debias_ar`)
BIAS_REPS = 20
#: halvings of the bias correction tried before giving up on a stationary corrected model
BIAS_SHRINK_STEPS = 6


def debias_ar(model: ARModel, x: np.ndarray, rng: np.random.Generator, reps: int = BIAS_REPS) -> ARModel:
    """``model`` (fitted to ``x``) with its coefficients' small-sample bias removed by a bootstrap.

    A least-squares or Burg AR fit to a short series is biased towards zero (AR(1):
    ``E phi-hat ~ phi - (1 + 3 phi) / T``), so surrogates simulated from it are less dependent
    than the data, and their null is too narrow in the tail. The correction is the bootstrap's
    (Kilian 1998): simulate ``reps`` series of ``len(x)`` values from ``model`` (its resampled
    residuals), refit each with the same order, and take ``phi_bc = 2 phi - mean(phi*)``. When
    ``phi_bc`` is not stationary the correction is halved until it is (at most
    :data:`BIAS_SHRINK_STEPS` times; then ``model`` is returned). The residuals are recomputed for
    the corrected coefficients. AR(0) and constant series are returned unchanged. Draws from
    ``rng`` only when ``model.order > 0``.

    Why it matters: on stationary AR(1) with phi = 0.5 (the streaming detector fits ~53 values,
    n = 50), the surrogate null without it raised 1.3 false alarms per 10,000 samples and with it
    0.7; at phi = 0 (no bias) nothing changed (docs/experiments.md).

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> fits, fixed = [], []
    >>> for _ in range(200):
    ...     e = rng.normal(size=53)
    ...     x = np.zeros(53)
    ...     for t in range(1, 53):
    ...         x[t] = 0.5 * x[t - 1] + e[t]
    ...     m = fit_ar(x, max_order=1)
    ...     if m.order == 1:
    ...         fits.append(m.phi[0]); fixed.append(debias_ar(m, x, rng).phi[0])
    >>> bool(abs(np.mean(fixed) - 0.5) < abs(np.mean(fits) - 0.5))
    True
    """
    p = model.order
    if p == 0:
        return model
    x = np.ascontiguousarray(np.asarray(x, dtype=np.float64).reshape(-1))
    pseudo = simulate_ar([model], x.size, int(reps), rng)
    total = np.zeros(p)
    for i in range(int(reps)):
        _, coefs, s2s = _ar_path(np.ascontiguousarray(pseudo[i, :, 0]), p, True)
        if s2s.size <= p:  # a refit stopped below the order (numerically singular): no estimate
            return model
        total += coefs[p, :p]
    bias = total / int(reps) - model.phi
    step = 1.0
    for _ in range(BIAS_SHRINK_STEPS + 1):
        phi = model.phi - step * bias
        if _stationary(phi):
            return ARModel(phi, model.mean, _residuals(x, model.mean, phi))
        step *= 0.5
    return model


def fit_ar_models(values: np.ndarray, max_order: int = 5, rng: np.random.Generator | None = None) -> list[ARModel]:
    """One :func:`fit_ar` model per column of ``values`` (T, channels), each debiased
    (:func:`debias_ar`, channel by channel) when ``rng`` is given."""
    models = [fit_ar(values[:, j], max_order) for j in range(values.shape[1])]
    if rng is not None:
        models = [debias_ar(mod, values[:, j], rng) for j, mod in enumerate(models)]
    return models


@njit(cache=True)
def _stationary(phi):
    """Whether AR coefficients ``phi`` are stationary: every reflection coefficient of the
    step-down (inverse Levinson) recursion is below 1 in magnitude."""
    a = phi.copy()
    for m in range(a.size, 0, -1):
        refl = a[m - 1]
        if not abs(refl) < 1.0:
            return False
        denom = 1.0 - refl * refl
        b = np.empty(m - 1)
        for i in range(m - 1):
            b[i] = (a[i] + refl * a[m - 2 - i]) / denom
        a = b
    return True


def simulate_ar(models: list[ARModel], length: int, count: int, rng: np.random.Generator,
                burn_in: int = BURN_IN, start: np.ndarray | None = None, replace: bool = True) -> np.ndarray:
    """``count`` surrogate series of ``length`` samples, shape (count, length, channels).

    Channel ``j`` follows ``models[j]``; the innovations are residual rows drawn with replacement
    (one shared time index for all channels, aligned at the end of the residual series).

    ``start`` (None, or the (T, channels) values the models were fitted to): where the recursion
    starts, ``burn_in`` samples before the first one kept. None: from zero. Otherwise from ``p``
    consecutive rows of ``start`` (``p`` the largest order) at a position drawn uniformly among all
    but the newest (the position is read off the first residual draw, an index below ``T - p``,
    so the random stream is the same either way), one for all channels, centred on each model's
    mean.

    ``replace=False``: the residual rows are drawn in passes without replacement, the last pass
    ending at the last sample, so that no two of the last ``min(length, rows)`` samples share an
    innovation. Why: with several channels a repeated row is a near-duplicate point in every
    channel; in a short surrogate (at T = 15 about a third of the rows repeat) the split profile of
    such points is lower than the data's, and the test built on it was liberal (five i.i.d.
    channels at T = 15: 12 % at 5 %).

    Why a start from the data: a start from zero reaches the model's stationary spread only after
    about ``1 / (1 - r)`` steps, ``r`` the largest root modulus. A smooth periodic signal (a sine
    with noise 1 % of its amplitude) fits an AR model with ``r`` within 1e-4 of the unit circle and
    innovations a hundred times smaller than the signal; after 100 steps from zero its surrogates
    kept 2 to 50 % of the data's variance, the null was far too narrow and the streaming
    detector raised 24 false alarms per 10,000 samples of such a sine (170 at T = 100). Started
    from the data, such a surrogate carries the signal on; for every model whose roots are well
    inside the unit circle the start is forgotten within the burn-in (``r^100``, 3e-5 at
    ``r = 0.9``), so the surrogates are those of a start from zero, drawn from the same residuals.

    Examples
    --------
    >>> x = np.sin(np.arange(60) * 2 * np.pi / 12)[:, None]
    >>> mod = [fit_ar(x[:, 0])]
    >>> rng = np.random.default_rng(0)
    >>> zero = simulate_ar(mod, 60, 20, rng)
    >>> data = simulate_ar(mod, 60, 20, rng, start=x)
    >>> bool(data.var(axis=1).mean() > 0.4 > zero.var(axis=1).mean())
    True
    """
    m = min(mod.resid.size for mod in models)
    resid = np.stack([mod.resid[mod.resid.size - m:] for mod in models], axis=1)  # (m, channels)
    out = np.empty((count, length, len(models)))
    p = max(mod.order for mod in models)
    centred = start is None
    if centred:  # p zeros (centred) before the first sample
        start = np.zeros((p, len(models)))
    start = np.asarray(start, dtype=np.float64)
    if start.ndim == 1:
        start = start[:, None]
    if start.shape[1] != len(models) or start.shape[0] < p:
        raise ValueError(f"start must have shape (T >= {p}, {len(models)}); got {start.shape}")
    total = length + burn_in
    if replace:
        idx = rng.integers(0, m, size=(count, total))
    else:  # passes of a permutation each, the newest pass ending at the last sample
        passes = -(-total // m)
        idx = np.argsort(rng.random((count, passes, m)), axis=2).reshape(count, passes * m)[:, ::-1][:, -total:]
        idx = np.ascontiguousarray(idx)
    # the start's position is read off each series' first residual draw, not drawn anew: the random
    # stream stays the one of a start from zero, so wherever the start is forgotten within the
    # burn-in the surrogates (and every later draw of the caller) are the same as from zero
    first = idx[:, 0] % (start.shape[0] - p + 1)
    for j, mod in enumerate(models):
        init = np.ascontiguousarray(start[:, j] if centred else start[:, j] - mod.mean)
        _ar_filter(resid[:, j].copy(), idx, mod.phi, mod.mean, init, first, p, burn_in, out, j)
    return out


@njit(cache=True)
def _ar_filter(resid, idx, phi, mean, init, first, p0, burn_in, out, channel):
    """``out[:, :, channel]``: the AR(phi) recursion driven by ``resid[idx]``, series ``i`` started
    from ``init[first[i]:first[i] + p0]`` (centred values, ``p0 >= phi.size``; zeros: a start from
    zero); the recursion's first ``burn_in`` samples are dropped."""
    count, total = idx.shape
    p = phi.size
    y = np.empty(total + p0)
    for i in range(count):
        for t in range(p0):
            y[t] = init[first[i] + t]
        for t in range(total):
            v = resid[idx[i, t]]
            for j in range(p):
                v += phi[j] * y[p0 + t - 1 - j]
            y[p0 + t] = v
        for t in range(burn_in, total):
            out[i, t - burn_in, channel] = y[p0 + t] + mean


def _packed_size(rows: int) -> int:
    """Entries of the packed upper triangle (diagonal included) of a ``rows`` x ``rows`` matrix."""
    return rows * (rows + 1) // 2


@njit(cache=True)
def _row_offset(i, rows):
    """Where row ``i`` (its entries ``j = i .. rows - 1``) starts in the packed upper triangle."""
    return i * rows - (i * (i - 1)) // 2


@njit(cache=True)
def _embedded_exponents(sims, rows, k, scale, out):
    """Kernel exponents ``scale * d2`` of the first ``rows`` embedded subsequences of every surrogate.

    ``sims`` (count, T, channels); ``out`` (count, rows (rows + 1) / 2) receives the upper triangle
    (``j >= i``) of each (rows x rows) matrix, packed row by row (:func:`_row_offset`): the Gram
    matrix is symmetric, so half the exps suffice. Row ``r`` is ``series[r : r + k]`` flattened (the
    detector's embedding); ``scale = -1 / (2 sigma^2)``. Exponents at or below ``FLUSH_EXPONENT``
    become ``-inf`` (exp gives exactly 0, the rule of :mod:`ratiowatch.core.kernels`, with no masking pass).

    Why a recursion along rows: two rows ``L`` apart differ by ``e_L[t] = ||series[t] -
    series[t + L]||^2`` summed over ``t = i .. i + k - 1``, so ``d2[i, j] = d2[i - 1, j - 1] +
    (e[i + k - 1, j + k - 1] - e[i - 1, j - 1])``: O(rows^2) instead of O(rows^2 k). The sums run
    row by row, not diagonal by diagonal: walking a diagonal writes the matrix with a stride of
    rows + 1, which cost more than the arithmetic (n = 50, k = 10, 10 surrogates: 144 us for the
    full distance matrices by diagonals, 40 us for the packed exponents by rows), while row by row
    every read and write is contiguous. Each entry is the same floating-point operations in the
    same order either way. The running sums are kept unclipped; the stored distance is clipped at 0
    (a sliding sum may round to a hair below 0).
    """
    count, length, dim = sims.shape
    cols = np.empty((dim, length))  # one channel per row: the difference loops below run contiguously
    lagged = np.empty((length, length))  # lagged[t, u] = ||series[t] - series[u]||^2 for u > t
    prev = np.empty(rows)
    cur = np.empty(rows)
    for s in range(count):
        for t in range(length):
            for c in range(dim):
                cols[c, t] = sims[s, t, c]
        # (every inner loop runs over a view from index 0: a loop from a variable start keeps numba's
        # negative-index checks and does not vectorise)
        for t in range(length):
            lt = lagged[t, t + 1:]
            x0 = cols[0, t]
            col = cols[0, t + 1:]
            for u in range(lt.size):  # = 0.0 + diff * diff, exactly
                diff = x0 - col[u]
                lt[u] = diff * diff
            for c in range(1, dim):
                x0 = cols[c, t]
                col = cols[c, t + 1:]
                for u in range(lt.size):
                    diff = x0 - col[u]
                    lt[u] += diff * diff
        o = out[s]
        # row 0: plain sums of the first k lagged differences, t ascending
        acc0 = prev[1:]
        for j in range(acc0.size):
            acc0[j] = 0.0
        for t in range(k):
            lt = lagged[t, t + 1:t + rows]
            for j in range(acc0.size):
                acc0[j] += lt[j]
        o[0] = 0.0  # the diagonal: exp(0) = 1 exactly
        _store_exponents(acc0, scale, o[1:rows])
        for i in range(1, rows):
            start = _row_offset(i, rows)  # o[start] is entry (i, i)
            o[start] = 0.0
            width = rows - i - 1
            new_t = lagged[i + k - 1, i + k:i + k + width]  # entries (i, j), j = i + 1 ..
            old_t = lagged[i - 1, i:i + width]
            before = prev[i:i + width]
            acc = cur[:width]
            for j in range(width):
                acc[j] = before[j] + (new_t[j] - old_t[j])
            _store_exponents(acc, scale, o[start + 1:start + 1 + width])
            # acc[j] is entry (i, i + 1 + j); prev stays indexed by column for the next row
            after = prev[i + 1:i + 1 + width]
            for j in range(width):
                after[j] = acc[j]


@njit(cache=True, inline="always")
def _store_exponents(d2, scale, out):
    """``out = scale * max(d2, 0)``, flushed to ``-inf`` at or below ``FLUSH_EXPONENT``."""
    for j in range(d2.size):
        v = d2[j] if d2[j] > 0.0 else 0.0
        x = v * scale
        out[j] = x if x > FLUSH_EXPONENT else -np.inf


@njit(cache=True, inline="always")
def _fill_diagonal_block(p, rows, first, n, out):
    """``out`` (n x n) = the symmetric block of rows / columns ``first .. first + n - 1`` of the packed
    upper triangle ``p`` of a ``rows x rows`` matrix (row i of the block starts at its diagonal).

    (Loops run over views from index 0 so that numba drops its negative-index checks.)
    """
    for i in range(n):
        start = _row_offset(first + i, rows)
        upper = p[start:start + n - i]
        kr = out[i, i:]
        kc = out[i:, i]
        for a in range(upper.size):
            v = upper[a]
            kr[a] = v
            kc[a] = v


@njit(cache=True)
def _surrogate_scores_kernel(packed, n, alpha, lam, both):
    """Both directions' clipped PE-hat of each surrogate's past / current split.

    ``packed`` (count, 2n (2n + 1) / 2) holds each surrogate's Gram matrix as its packed upper
    triangle (:func:`_embedded_exponents` after exp). The past and current windows are the index
    ranges ``0..n-1`` and ``n..2n-1``, so the blocks each direction needs are copied out of the
    triangle directly (no index gathers): for ``PE(past || current)`` the (past, past) block and the
    (current, past) block (the transpose of the stored (past, current) one), for ``PE(current ||
    past)`` the (current, current) block and the stored (past, current) block.
    """
    count = packed.shape[0]
    rows = 2 * n
    g, k_nn, chol, theta = np.empty((rows, n)), np.empty((n, n)), np.zeros((n, n)), np.empty(n)
    out = np.empty((count, 2 if both else 1))
    for s in range(count):
        p = packed[s]
        # PE(past || current): numerator = past (rows 0..n-1), centres = past. Row i of the packed
        # triangle is entries (i, i..2n-1): (past, past) from the diagonal on, then (past, current).
        _fill_diagonal_block(p, rows, 0, n, k_nn)
        for i in range(n):
            start = _row_offset(i, rows) + n - i
            pc = p[start:start + n]
            gc = g[n:, i]  # (current j, past i) = (past i, current j)
            for j in range(n):
                gc[j] = pc[j]
        out[s, 0] = pe_direction_from_blocks(k_nn, g, alpha, lam, chol, theta)
        if both:
            # PE(current || past): numerator = current, centres = current
            _fill_diagonal_block(p, rows, n, n, k_nn)
            for i in range(n):
                start = _row_offset(i, rows) + n - i
                pc = p[start:start + n]
                gr = g[n + i]
                for a in range(n):  # (past i, current a)
                    gr[a] = pc[a]
            out[s, 1] = pe_direction_from_blocks(k_nn, g, alpha, lam, chol, theta)
    return out


#: packed Gram entries of the surrogates held at once (x 8 bytes)
_GRAM_CHUNK_ENTRIES = 250_000


def _surrogate_grams(sims: np.ndarray, n: int, k: int, sigma: float) -> np.ndarray:
    """Gaussian Gram matrices of the surrogates' 2n subsequences, packed upper triangles (count, n (2n + 1)).

    The exponents are compiled (:func:`_embedded_exponents`); the exps are one in-place numpy call
    over all surrogates (numpy's SIMD exp is ~5x faster than a compiled scalar loop). Flushed
    entries carry ``-inf`` and come out exactly 0.
    """
    packed = np.empty((sims.shape[0], _packed_size(2 * n)))
    _embedded_exponents(sims, 2 * n, k, -0.5 / (sigma * sigma), packed)
    np.exp(packed, out=packed)
    return packed


def detrend(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(residuals, slopes)``: ``values`` (T, channels) minus their least-squares lines, and the slopes.

    The slope of channel j is ``sum_t (t - tbar) (x_tj - xbar_j) / sum_t (t - tbar)^2`` (per sample).

    Examples
    --------
    >>> r, b = detrend(np.c_[np.arange(10.0) * 0.5 + 3.0])
    >>> bool(np.allclose(r, 0.0)), bool(np.allclose(b, [0.5]))
    (True, True)
    """
    values = np.asarray(values, dtype=np.float64)
    tt = np.arange(values.shape[0], dtype=np.float64)
    tt -= tt.mean()
    centred = values - values.mean(axis=0)
    slopes = (tt @ centred) / max(float(tt @ tt), 1e-300)
    return centred - tt[:, None] * slopes[None, :], slopes


def shrink_slopes(resid: np.ndarray, slopes: np.ndarray, sxx: np.ndarray | None = None) -> np.ndarray:
    """Positive-part James-Stein shrinkage of least-squares slopes: ``b (1 - 1 / z^2)_+``.

    ``z = b / se(b)`` with ``se(b)^2 = s^2 (1 + r) / ((1 - r) sum_t (t - tbar)^2)``: the residual
    variance ``s^2`` and lag-1 autocorrelation ``r`` (clipped to [0, 0.95]) of ``resid`` (T, channels),
    the AR(1) variance inflation of a mean of correlated values. ``sxx`` (channels,) replaces
    ``sum_t (t - tbar)^2`` where the line was fitted with a step (:func:`line_and_step`): the
    slope's own sum of squares is then that of ``t`` less its part explained by the step. A
    slope within its own noise (``|z| <= 1``) is dropped; a clear one is kept nearly whole. Why shrink: every surrogate of a
    calibration shares the slope, so its noise widens the null by a random shift between the
    windows (on change-free AR(1) noise a pure cost), while a real trend is estimated with
    ``|z| >> 1`` (``0.01 t + N(0, 1)`` over 103 values: z ~ 3).

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> tt = np.arange(100.0)[:, None]
    >>> noise = rng.normal(size=(100, 1))
    >>> r, b = detrend(noise)
    >>> bool(abs(shrink_slopes(r, b)[0]) < abs(b[0]))
    True
    >>> r, b = detrend(noise + 0.05 * tt)
    >>> bool(0.9 * b[0] < shrink_slopes(r, b)[0] <= b[0])
    True
    """
    resid = np.asarray(resid, dtype=np.float64)
    t_len = resid.shape[0]
    tt = np.arange(t_len, dtype=np.float64)
    if sxx is None:
        sxx = float(((tt - tt.mean()) ** 2).sum())
    s2 = (resid * resid).sum(axis=0) / max(t_len - 2, 1)
    lag = (resid[1:] * resid[:-1]).sum(axis=0) / np.where(s2 > 0, s2 * max(t_len - 2, 1), 1.0)
    r = np.clip(lag, 0.0, 0.95)
    var_b = s2 * (1.0 + r) / ((1.0 - r) * np.maximum(sxx, 1e-300))
    z2 = np.where(var_b > 0, slopes * slopes / np.where(var_b > 0, var_b, 1.0), np.inf)
    return slopes * np.clip(1.0 - 1.0 / np.maximum(z2, 1e-300), 0.0, 1.0)


#: level of the step test of :func:`line_and_step`, shared by its candidate rows (Bonferroni)
STEP_LEVEL = 0.05
#: fewest values on either side of a candidate step of :func:`line_and_step`
STEP_MIN_SIDE = 5


def line_and_step(values: np.ndarray, level: float = STEP_LEVEL,
                  min_side: int = STEP_MIN_SIDE) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Each channel's least-squares line, fitted jointly with one level step where a step is significant.

    Returns ``(residuals, slopes, sxx, step_at, step_size)``: ``values`` (T, channels) less each
    channel's fit, the slopes (per sample), the sum of squares behind each slope's standard error
    (``sum_t (t - tbar)^2``, less the part of ``t`` that the step explains when there is one; see
    :func:`shrink_slopes`), the row at which each channel's step starts (-1: none) and its size
    (the level from that row on minus the level before it).

    The step ``1[t >= k]`` is tried at every ``k`` with ``min_side`` values on either side. Its t
    statistic is the least-squares coefficient over its standard error, with the AR(1) variance
    inflation ``(1 + r) / (1 - r)`` of the joint residual (``r`` its lag-1 autocorrelation in
    [0, 0.95], as in :func:`shrink_slopes`); the best step is kept when its statistic passes the
    two-sided normal quantile at ``level`` shared by the candidates. Why: a level shift in a
    stretch fitted by a line alone becomes a steep slope, and a null that adds that slope back holds
    the shift. A line with a step estimates a pure trend's slope without bias (the step's
    coefficient is then near 0) and a pure shift's as near 0.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> shift = np.r_[np.full(50, 2.0), np.zeros(53)] + 0.5 * rng.normal(size=103)
    >>> _, slope, _, at, size = line_and_step(shift[:, None])
    >>> int(at[0]), bool(abs(size[0] + 2.0) < 0.5), bool(abs(slope[0]) < 0.01)
    (50, True, True)
    >>> _, slope, _, at, _ = line_and_step((0.05 * np.arange(103.0) + 0.5 * rng.normal(size=103))[:, None])
    >>> int(at[0]), bool(abs(slope[0] - 0.05) < 0.01)
    (-1, True)
    """
    values = np.asarray(values, dtype=np.float64)
    if values.ndim == 1:
        values = values[:, None]
    t_len, m = values.shape
    resid, slopes = detrend(values)
    design = _step_candidates(t_len, int(min_side), float(level))
    sxx = np.full(m, design.sxx0)
    step_at = np.full(m, -1, dtype=np.int64)
    step_size = np.zeros(m)
    if design.ks.size == 0:
        return resid, slopes, sxx, step_at, step_size
    s0, ss = design.s0, design.ss
    for j in range(m):
        x0 = resid[:, j]
        sx = s0.T @ x0
        coef = sx / ss
        # the joint residual x0 - coef s0 of every candidate, through its sums alone
        rss = float(x0 @ x0) - sx * coef
        lag = (float(x0[1:] @ x0[:-1]) - coef * (s0[1:].T @ x0[:-1] + s0[:-1].T @ x0[1:])
               + coef * coef * design.lag_ss)
        pos = rss > 1e-12 * max(float(x0 @ x0), 1e-300)
        r = np.clip(lag / np.where(pos, rss, 1.0), 0.0, 0.95)
        var_c = rss / max(t_len - 3, 1) * (1.0 + r) / ((1.0 - r) * ss)
        tstat = np.where(pos & (var_c > 0), np.abs(coef) / np.sqrt(np.where(var_c > 0, var_c, 1.0)), 0.0)
        best = int(np.argmax(tstat))
        if not tstat[best] > design.gate:
            continue
        step_at[j], step_size[j] = design.ks[best], coef[best]
        slopes[j] = slopes[j] - coef[best] * design.step_slope[best]
        resid[:, j] = x0 - coef[best] * s0[:, best]
        sxx[j] = design.sxx_joint[best]
    return resid, slopes, sxx, step_at, step_size


@dataclass(frozen=True)
class _StepDesign:
    """What :func:`line_and_step` needs of the candidate steps of a stretch of ``T`` values; it
    depends on ``T`` alone, so it is built once per length (the detector calibrates at few lengths)."""

    ks: np.ndarray  # candidate rows
    s0: np.ndarray  # (T, candidates): each step 1[t >= k] less its least-squares line
    ss: np.ndarray  # sum of squares of each column of s0
    lag_ss: np.ndarray  # lag-1 sum of products of each column of s0
    step_slope: np.ndarray  # slope of each step's line (what the step takes from the slope)
    sxx0: float  # sum_t (t - tbar)^2
    sxx_joint: np.ndarray  # the same of t less its fit on each step (the slope's, with the step)
    gate: float  # two-sided normal quantile at the level shared by the candidates


@lru_cache(maxsize=64)
def _step_candidates(t_len: int, min_side: int, level: float) -> _StepDesign:
    from scipy.special import ndtri

    tt = np.arange(t_len, dtype=np.float64)
    tt -= tt.mean()
    sxx0 = float(tt @ tt)
    ks = np.arange(min_side, t_len - min_side + 1) if t_len >= 4 else np.arange(0)
    steps = (np.arange(t_len)[:, None] >= ks[None, :]).astype(np.float64)
    centred = steps - steps.mean(axis=0)
    step_slope = (tt @ centred) / max(sxx0, 1e-300)
    s0 = centred - tt[:, None] * step_slope[None, :]
    cc = (centred * centred).sum(axis=0)
    sxx_joint = sxx0 - (tt @ centred) ** 2 / np.where(cc > 0, cc, 1.0)
    gate = float(-ndtri(level / (2.0 * max(ks.size, 1))))
    for a in (ks, s0, step_slope, sxx_joint):
        a.setflags(write=False)
    ss, lag_ss = (s0 * s0).sum(axis=0), (s0[1:] * s0[:-1]).sum(axis=0)
    ss.setflags(write=False)
    lag_ss.setflags(write=False)
    return _StepDesign(ks, s0, ss, lag_ss, step_slope, sxx0, sxx_joint, gate)


def add_trend(sims: np.ndarray, slopes: np.ndarray) -> np.ndarray:
    """``sims`` (count, T, channels) plus a line of slope ``slopes[j]`` per channel, in place."""
    tt = np.arange(sims.shape[1], dtype=np.float64)
    sims += tt[None, :, None] * np.asarray(slopes, dtype=np.float64)[None, None, :]
    return sims


def surrogate_null_rulsif(values: np.ndarray, n: int, k: int, sigma: float, lam: float, alpha: float,
                          symmetric: bool, count: int, rng: np.random.Generator,
                          max_order: int = 5, slopes: np.ndarray | None = None,
                          debias: bool = False, start_from_data: bool = False,
                          return_sims: bool = False) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """Directional scores of ``count`` AR surrogates of ``values`` with fixed sigma and lambda.

    ``debias``: remove each channel's AR fit's small-sample bias first (:func:`debias_ar`, drawing
    from ``rng`` before the surrogates are simulated); the streaming detector's null does.
    ``start_from_data``: start each surrogate from a block of ``values`` instead of a burn-in from
    zero (:func:`simulate_ar`'s ``start``); the streaming detector's null does.

    ``slopes`` (one per channel, or None): a line of that slope per sample is added to every
    surrogate (``values`` are then the residuals of that line, see :func:`detrend`), so the null
    holds a trend's own shift between the windows.
    ``values`` (shape (T, channels), or (T,), T >= 3) are the preprocessed, scaled samples the AR
    model is fitted to (the detector passes its retained history up to the current window, so a
    change entering the current window does not widen its own null). Each surrogate has ``2n + k - 1`` samples, is
    embedded and split as the detector's windows (first n subsequences = past) and scored by the
    clipped RuLSIF PE-hat, as the brute-force ``rulsif_window_score`` in tests/naive.py. Returns shape
    ``(count, 2)``: ``PE(past || current)``, ``PE(current || past)`` (``(count, 1)``, the first
    only, when not ``symmetric``); with ``return_sims`` also the surrogates themselves, shape
    ``(count, 2n + k - 1, channels)`` (the detector's channel view is calibrated on them).

    Examples
    --------
    >>> v = np.random.default_rng(0).normal(size=(60, 1))
    >>> null = surrogate_null_rulsif(v, 20, 3, 1.0, 0.1, 0.1, True, 5, np.random.default_rng(1))
    >>> null.shape, bool(np.isfinite(null).all())
    ((5, 2), True)
    """
    values = np.asarray(values, dtype=np.float64)
    if values.ndim == 1:
        values = values[:, None]
    n, k = int(n), int(k)
    if values.ndim != 2 or values.shape[0] < 3:
        raise ValueError(f"values must have shape (T, channels) with T >= 3; got {values.shape}")
    if n < 2 or k < 1 or int(count) < 1:
        raise ValueError(f"need n >= 2, k >= 1 and count >= 1; got n={n}, k={k}, count={count}")
    models = fit_ar_models(values, max_order, rng if debias else None)
    sims = np.ascontiguousarray(simulate_ar(models, 2 * n + k - 1, int(count), rng,
                                            start=values if start_from_data else None))
    if slopes is not None:
        add_trend(sims, slopes)
    # Gram matrices in chunks of at most ~_GRAM_CHUNK_ENTRIES entries: the transient memory of a
    # calibration stays a few MB whatever n and count are (80 surrogates at n = 200 would be 200 MB)
    step = max(1, _GRAM_CHUNK_ENTRIES // _packed_size(2 * n))
    scores = np.concatenate([
        _surrogate_scores_kernel(_surrogate_grams(sims[i:i + step], n, k, float(sigma)), n, float(alpha),
                                 float(lam), bool(symmetric))
        for i in range(0, sims.shape[0], step)])
    return (scores, sims) if return_sims else scores

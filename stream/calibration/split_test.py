"""Calibrated test of a split profile's maximum: autoregressive surrogates and a Monte-Carlo p-value.

The statistic is the largest score of a split profile (:mod:`ratiowatch.core.split_profile`) over
all candidate splits of a segment: a scan statistic, so the test accounts for the search over
splits by construction. Its null distribution is that of the same maximum on surrogate series
that share the segment's trend, short-range serial dependence and marginal distribution but hold
no change:

1. a least-squares line is removed (and added back to every surrogate): a trend is no change;
2. an AR(p) model is fitted to the residual (Burg's method, order by AIC up to ``max_order``;
   one order for all channels) and driven by resampled residual *rows* (contemporaneous
   cross-correlation kept), :mod:`ratiowatch.stream.calibration.surrogate`;
3. each simulated channel is mapped onto the residual's sorted values by rank (amplitude
   adjustment, as in the AAFT surrogates of Theiler et al. 1992), so counts stay counts and
   heavy tails stay heavy.

Why a short autoregression and not a Fourier (phase-randomised) surrogate: a level shift has the
low-frequency spectrum of a random walk; surrogates that keep the whole periodogram (or an AR of
high order) reproduce that power as slow wandering and their maxima swallow the change
(synthetic mean shifts 0 -> 2 -> 0 in N(0, 1): found 0 of 20 with IAAFT surrogates, 20 of 20 with
AR order <= 5). An AR of low order keeps serial dependence (AR(1) with phi = 0.9, random walks
through a root near one, jittered seasonal cycles through a complex pair) but cannot represent a
few sharp shifts.

The p-value is ``(1 + #{null >= observed}) / (1 + n)`` over ``n = 2 / level - 1`` surrogates,
with early acceptance (Besag and Clifford 1991): drawing stops as soon as more surrogates exceed
the observed maximum than a rejection allows, so a change-free segment costs a few surrogates.

Examples
--------
>>> from ratiowatch.core.split_profile import SplitProfile
>>> rng = np.random.default_rng(0)
>>> prof = SplitProfile(width=3)
>>> x = np.r_[rng.normal(0, 1, 200), rng.normal(3, 1, 200)]
>>> stat, split = prof.best(x)
>>> max_split_test(x, prof, stat, 0.05, np.random.default_rng(1)).reject
True
>>> y = rng.normal(0, 1, 400)
>>> max_split_test(y, prof, prof.best(y)[0], 0.05, np.random.default_rng(1)).reject
False
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from ratiowatch.stream.calibration.surrogate import fit_ar_channels, simulate_ar

#: largest AR order of the surrogates (see the module docstring for why it is small)
MAX_ORDER = 5


def _rows(x) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    return x[:, None] if x.ndim == 1 else x


#: median of a chi-square with one degree of freedom: median((x_{t+h} - x_t)^2) = 2 V(h) x this for Gaussian data
_CHI2_MEDIAN = 0.45493642311957283


def variogram_ar(y: np.ndarray, max_order: int, max_lag: int) -> tuple[np.ndarray, float]:
    """AR coefficients and innovation variance from a robust variogram of ``y`` (T,).

    ``V(h) = median((y_{t+h} - y_t)^2) / (2 x 0.455)`` (Cressie and Hawkins 1980 in spirit: a
    median, so the few differences that straddle a level shift do not count), the variance as the
    median of ``V`` over lags ``max_lag / 2 .. max_lag``, the autocovariances ``gamma(h) = gamma(0)
    - V(h)``, and Levinson-Durbin up to ``max_order`` (stopping before a reflection coefficient
    reaches 1). A random walk's variogram keeps growing, so its variance at ``max_lag`` makes the
    model nearly integrated; a few sharp shifts leave the median of the short-lag differences
    alone, so the model stays short-memory and the surrogates do not wander like the change.
    """
    t_len = y.size
    def vario(h):
        d = y[h:] - y[:-h]
        return float(np.median(d * d)) / (2.0 * _CHI2_MEDIAN)
    p = int(min(max_order, max(0, max_lag - 1)))
    short = np.array([vario(h) for h in range(1, p + 1)])
    far = np.unique(np.linspace(max(p + 1, max_lag // 2), max(p + 1, max_lag), 8).round().astype(int))
    far = far[far < t_len]
    gamma0 = float(np.median([vario(int(h)) for h in far])) if far.size else float(np.var(y))
    gamma0 = max(gamma0, float(short.max()) if short.size else 0.0, 1e-300)
    r = np.r_[1.0, 1.0 - short / gamma0]
    phi = np.zeros(0)
    s2 = gamma0
    for k in range(1, p + 1):  # Levinson-Durbin on the autocorrelations
        refl = (r[k] - float(phi @ r[k - 1:0:-1])) / (s2 / gamma0)
        if not abs(refl) < 0.999:
            break
        phi = np.r_[phi - refl * phi[::-1], refl]
        s2 *= 1.0 - refl * refl
    return phi, s2


def ar_surrogates(x, rng: np.random.Generator, count: int, max_order: int = MAX_ORDER,
                  remap: bool = True, fit: str = "burg") -> Iterator[np.ndarray]:
    """``count`` change-free surrogates of ``x`` (T, m), each of shape (T, m) (module docstring).

    Examples
    --------
    >>> c = np.random.default_rng(0).poisson(3.0, size=150).astype(float)
    >>> x = np.r_[c, c[::-1]][:, None]  # no trend: the surrogate is a rearrangement of x
    >>> s = next(ar_surrogates(x, np.random.default_rng(1), 1))
    >>> bool(np.allclose(np.sort(s, axis=0), np.sort(x, axis=0)))
    True
    """
    x = _rows(x)
    t_len = x.shape[0]
    if t_len < 3:
        raise ValueError(f"surrogates need at least 3 samples; got {t_len}")
    tt = np.linspace(-1.0, 1.0, t_len)
    mu = x.mean(axis=0)
    slope = (tt @ (x - mu)) / (tt @ tt)
    trend = mu[None, :] + tt[:, None] * slope[None, :]
    y = x - trend
    srt = np.sort(y, axis=0)
    if fit == "variogram":
        m = x.shape[1]
        fits = [variogram_ar(y[:, c], max_order, max(2 * max_order + 2, t_len // 10)) for c in range(m)]
        dif = np.diff(y, axis=0)
        corr = np.corrcoef(dif.T) if m > 1 and t_len > 3 else np.ones((1, 1))
        corr = np.nan_to_num(np.atleast_2d(corr)) + 1e-9 * np.eye(m)
        chol = np.linalg.cholesky(corr)
        burn = 100 + 10 * max_order
        for _ in range(count):
            e = rng.standard_normal((t_len + burn, m)) @ chol.T
            z = np.empty((t_len, m))
            for c, (phi, s2) in enumerate(fits):
                z[:, c] = _ar_run(phi, math.sqrt(s2) * e[:, c])[burn:]
            if remap:
                ranks = np.argsort(np.argsort(z, axis=0, kind="stable"), axis=0, kind="stable")
                z = np.take_along_axis(srt, ranks, axis=0)
            yield z + trend
        return
    models = fit_ar_channels(y, max_order=int(max(0, min(max_order, t_len // 4))))
    for _ in range(count):
        z = simulate_ar(models, t_len, 1, rng)[0]
        if remap:
            ranks = np.argsort(np.argsort(z, axis=0, kind="stable"), axis=0, kind="stable")
            z = np.take_along_axis(srt, ranks, axis=0)
        yield z + trend


def _ar_run(phi: np.ndarray, e: np.ndarray) -> np.ndarray:
    from scipy.signal import lfilter

    return lfilter([1.0], np.r_[1.0, -phi], e)


@dataclass(frozen=True)
class SplitTest:
    """Outcome of :func:`max_split_test`: decision, Monte-Carlo p-value and the null maxima drawn."""

    reject: bool
    p_value: float
    null: np.ndarray
    observed: float = math.nan

    @property
    def tail_p_value(self) -> float:
        """p-value from a Gumbel law fitted to the null maxima by moments (extreme-value tail of a
        maximum over splits); reaches below ``1 / (n + 1)``. NaN with fewer than 10 null draws."""
        if self.null.size < 10:
            return math.nan
        sd = float(np.std(self.null, ddof=1))
        if not sd > 0:
            return 0.0 if self.observed > self.null[0] else 1.0
        beta = sd * math.sqrt(6.0) / math.pi
        mu = float(np.mean(self.null)) - 0.5772156649015329 * beta
        return float(-math.expm1(-math.exp(-(self.observed - mu) / beta)))

    @property
    def critical(self) -> float:
        """Upper quantile of the null maxima drawn (the threshold to plot; NaN if none drawn)."""
        return float(np.max(self.null)) if self.null.size else math.nan


def n_surrogates(level: float) -> int:
    """Surrogates for a test at ``level``: 2 / level - 1 (39 at 0.05), so two may exceed."""
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), e.g. 0.05; got {level}")
    return max(1, int(round(2.0 / level)) - 1)


def max_split_test(x, profile, observed: float, level: float, rng: np.random.Generator,
                   count: int | None = None, max_order: int = MAX_ORDER, fit: str = "burg") -> SplitTest:
    """Monte-Carlo test of ``observed`` (the profile maximum of ``x``) against surrogate maxima.

    Parameters
    ----------
    x : array, shape (T,) or (T, m)
        The segment (finite values).
    profile : SplitProfile
        Scores each surrogate with :meth:`~ratiowatch.core.split_profile.SplitProfile.maximum`.
    observed : float
        The segment's own maximum on the same grid.
    level : float
        Test level: the chance that a change-free segment is rejected.
    rng : numpy Generator
        Drives the surrogates.
    count : int, optional
        Surrogates at most; default :func:`n_surrogates` (level).
    max_order : int
        Largest AR order of the surrogates.
    """
    count = n_surrogates(level) if count is None else int(count)
    allowed = int(math.floor(level * (count + 1))) - 1  # exceedances that still reject
    exceed = 0
    null = []
    for z in ar_surrogates(x, rng, count, max_order, fit=fit):
        v = profile.maximum(z)
        null.append(v)
        if v >= observed:
            exceed += 1
            if exceed > allowed:  # the p-value can no longer fall to the level
                return SplitTest(False, (1 + exceed) / (len(null) + 1), np.asarray(null), observed)
    return SplitTest(allowed >= 0, (1 + exceed) / (count + 1), np.asarray(null), observed)

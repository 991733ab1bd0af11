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
EULER_GAMMA = 0.5772156649015329


def gumbel_fit(maxima: np.ndarray) -> tuple[float, float]:
    """(location, scale) of a Gumbel law fitted by moments to ``maxima`` (at least 2 values):
    the extreme-value law of a maximum over many splits."""
    beta = float(np.std(maxima, ddof=1)) * math.sqrt(6.0) / math.pi
    return float(np.mean(maxima)) - EULER_GAMMA * beta, beta


#: relative margin above a degenerate null (maxima that do not vary) that a statistic must clear
DEGENERATE_MARGIN = 1e-6


def gumbel_threshold(maxima: np.ndarray, level: float) -> float:
    """Upper ``level`` quantile of a Gumbel law fitted by moments to the finite ``maxima``
    (infinite with fewer than two).

    Maxima that do not vary beyond rounding (the surrogates of a constant window are constant, and
    so are their maxima) carry no scale to fit: the threshold is then their largest value plus
    ``DEGENERATE_MARGIN x (1 + |value|)``, so that a statistic equal to them up to rounding is no
    alarm and any real departure (scores of order one) is.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> z = rng.gumbel(2.0, 0.5, 100_000)
    >>> round(gumbel_threshold(z, 0.01), 1), round(2.0 - 0.5 * math.log(-math.log(0.99)), 1)
    (4.3, 4.3)
    """
    maxima = np.asarray(maxima, dtype=np.float64)
    maxima = maxima[np.isfinite(maxima)]
    if maxima.size < 2:
        return math.inf
    top = float(maxima.max())
    if float(np.ptp(maxima)) <= 1e-9 * max(1.0, abs(top)):
        return top + DEGENERATE_MARGIN * (1.0 + abs(top))
    mu, beta = gumbel_fit(maxima)
    return mu - beta * math.log(-math.log1p(-level))


def _rows(x) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    return x[:, None] if x.ndim == 1 else x


def ar_surrogates(x, rng: np.random.Generator, count: int, max_order: int = MAX_ORDER,
                  remap: bool = True, length: int | None = None) -> Iterator[np.ndarray]:
    """``count`` change-free surrogates of ``x`` (T, m), each of shape (T, m) (module docstring).

    ``length`` (default T): surrogates of another length, for a null that must serve a window
    longer than the data it is fitted to. The line goes on with the same slope per sample, and the
    rank mapping reads the residual's sorted values at the same quantiles (linear interpolation).

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
    models = fit_ar_channels(y, max_order=int(max(0, min(max_order, t_len // 4))))
    out_len = t_len if length is None else int(length)
    if out_len != t_len:
        if out_len < 2:
            raise ValueError(f"length must be >= 2; got {length}")
        tt = -1.0 + 2.0 * np.arange(out_len) / (t_len - 1)
        trend = mu[None, :] + tt[:, None] * slope[None, :]
        at = np.arange(out_len) * (t_len - 1) / (out_len - 1)
        srt = np.stack([np.interp(at, np.arange(t_len), srt[:, j]) for j in range(srt.shape[1])], axis=1)
    for _ in range(count):
        z = simulate_ar(models, out_len, 1, rng)[0]
        if remap:
            ranks = np.argsort(np.argsort(z, axis=0, kind="stable"), axis=0, kind="stable")
            z = np.take_along_axis(srt, ranks, axis=0)
        yield z + trend


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
        mu, beta = gumbel_fit(self.null)
        if not beta > 0:
            return 0.0 if self.observed > self.null[0] else 1.0
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
                   count: int | None = None, max_order: int = MAX_ORDER) -> SplitTest:
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
    for z in ar_surrogates(x, rng, count, max_order):
        v = profile.maximum(z)
        null.append(v)
        if v >= observed:
            exceed += 1
            if exceed > allowed:  # the p-value can no longer fall to the level
                return SplitTest(False, (1 + exceed) / (len(null) + 1), np.asarray(null), observed)
    return SplitTest(allowed >= 0, (1 + exceed) / (count + 1), np.asarray(null), observed)

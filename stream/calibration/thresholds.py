"""Null-calibrated thresholds: from a score's null draws to the level an alarm must exceed.

Threshold
    A raw divergence (PE, L2, KL) has no universal scale: its null distribution depends on the
    window size, the kernel and the data. The threshold is therefore a quantile of the score's own
    null distribution, estimated by *permutation* (the least-squares two-sample test of Sugiyama et al. 2011):
    the pooled past + current subsequences are shuffled, split into two windows, and the score is
    recomputed with the same sigma and lambda. A gamma law is moment-matched to the permutation
    scores above their minimum, and the threshold is its upper ``false_alarm_rate`` quantile.
    Because every alarm needs at least one step above the threshold, the expected number of alarms
    per step is at most ``false_alarm_rate`` whenever the permutation null is right (it is exact
    for exchangeable windows; autocorrelated data widen the true null, see docs/experiments.md).
"""

from __future__ import annotations

import functools
import math

import numpy as np
from numba import njit
from scipy import special, stats

#: relative margin by which a score must exceed its threshold (see :func:`exceeds`)
ROUNDING_MARGIN = 1e-9


def rounding_margin(value: float) -> float:
    """How far two scores near ``value`` may differ by rounding alone: ``ROUNDING_MARGIN x max(1, |value|)``.

    >>> rounding_margin(0.5), rounding_margin(-4.0)
    (1e-09, 4e-09)
    """
    return ROUNDING_MARGIN * max(1.0, abs(value))


def exceeds(score: float, threshold: float) -> bool:
    """Whether ``score`` is above ``threshold`` by more than rounding (both finite).

    On a constant stream (a stuck sensor) the score and every null draw are one number up to a few
    ulps, so a plain ``score > threshold`` decided alarms by rounding noise: the streaming detector
    raised one at every re-selection, every n steps, forever. The margin, the threshold's
    :func:`rounding_margin`, is far above that noise (~1e-15) and far below any score difference
    that means something.

    >>> exceeds(1.0 + 1e-15, 1.0), exceeds(1.001, 1.0), exceeds(float("nan"), 1.0)
    (False, True, False)
    """
    return (math.isfinite(score) and math.isfinite(threshold)
            and score > threshold + rounding_margin(threshold))



def gamma_threshold(null_scores: np.ndarray, false_alarm_rate: float) -> float:
    """Upper ``false_alarm_rate`` quantile of a gamma law moment-matched to ``null_scores``.

    The law is fitted to ``null - min(null)`` (the location is the smallest null value), which keeps
    the right skew of divergence estimates; a normal quantile would under-state the tail.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> null = rng.gamma(2.0, 1.0, size=2000)
    >>> bool(abs(gamma_threshold(null, 0.01) - stats.gamma.ppf(0.99, 2.0)) < 0.5)
    True
    """
    if not (0.0 < false_alarm_rate < 1.0):
        raise ValueError(f"false_alarm_rate must be in (0, 1); got {false_alarm_rate}")
    null = np.asarray(null_scores, dtype=np.float64)
    null = null[np.isfinite(null)]
    if null.size < 3:
        raise ValueError(f"need at least 3 finite null scores to calibrate; got {null.size}")
    lo = float(null.min())
    shifted = null - lo
    mean, var = float(shifted.mean()), float(shifted.var())
    spread = max(abs(lo), float(np.abs(null).max()), 1e-12)
    if mean <= 1e-12 * spread or var <= 1e-24 * spread * spread:
        # degenerate null (constant windows): anything measurably above it is a change
        return lo + 1e-9 * spread
    shape, scale = mean * mean / var, var / mean
    # = stats.gamma.isf(q, shape, scale=scale), without the ~100 us of frozen-distribution overhead
    return lo + scale * float(special.gammainccinv(shape, false_alarm_rate))


def exp_tail_threshold(null_scores: np.ndarray, false_alarm_rate: float) -> float:
    """Upper ``false_alarm_rate`` quantile from an exponential tail fitted above the null's median.

    Peaks-over-threshold with the generalised Pareto shape fixed at 0: above ``u = median(null)``
    the excesses are taken as exponential with mean ``b``, so ``P(S > u + x) = 0.5 exp(-x / b)``.
    ``b`` is estimated by ``b-hat``, the mean of the ``m`` excesses, and the threshold is
    ``u + b-hat L`` with the *predictive* multiplier ``L = m ((0.5 / rate)^(1/m) - 1)``: since
    ``m b-hat / b`` is Gamma(m, 1), the exceedance probability averaged over the estimate is
    ``0.5 E exp(-L b-hat / b) = 0.5 (1 + L / m)^(-m)``, which this ``L`` sets to the rate. The
    plug-in ``L = log(0.5 / rate)`` (the limit as ``m`` grows) makes the rate an average of a
    convex function of a noisy threshold and overshoots it: by 1.75x at ``m = 80`` and rate
    2.5e-5 (the streaming detector's pool of 160 scores per direction pair). On the streaming
    synthetic null suite the predictive form lowered the false alarms of every kind (AR(1) with
    phi 0: 0.65 to 0.43 per 10,000 samples; docs/experiments.md).
    Why not a moment-matched gamma: a directional PE-hat is often negative (the clipped fit), so a
    gamma anchored at 0 has a huge variance-to-mean ratio and far too heavy a tail, and one anchored
    at the smallest score far too light a one; and a free GPD shape is too noisy to estimate from
    ~100 scores. On stationary AR(2) scores (n = 50) this estimate at 5e-5 from 160 AR-surrogate
    scores had median 1.04 (10-90 %: 0.91-1.20) against empirical quantiles of 0.9-1.3.
    Rates of 0.5 and above return the empirical quantile.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> null = rng.exponential(1.0, size=4000)
    >>> bool(abs(exp_tail_threshold(null, 1e-4) - np.log(1e4)) < 0.5)
    True
    """
    if not (0.0 < false_alarm_rate < 1.0):
        raise ValueError(f"false_alarm_rate must be in (0, 1); got {false_alarm_rate}")
    null = np.asarray(null_scores, dtype=np.float64).ravel()
    null = null[np.isfinite(null)]
    if null.size < 3:
        raise ValueError(f"need at least 3 finite null scores to calibrate; got {null.size}")
    if false_alarm_rate >= 0.5:
        return float(np.quantile(null, 1.0 - false_alarm_rate))
    u, mean_excess, count, spread = _median_excess(null)
    spread = max(spread, 1e-12)
    if not mean_excess > 1e-12 * spread:
        # degenerate null (constant windows): anything measurably above it is a change
        return float(null.max()) + 1e-9 * spread
    return u + mean_excess * count * math.expm1(math.log(0.5 / false_alarm_rate) / count)


def draws_above_allowed(size: int, rate: float, confidence: float = 0.99) -> int:
    """How many of ``size`` null draws may lie above the rate's quantile by chance.

    Under a correct threshold at ``rate`` the count of draws above it is Binomial(size, rate); this
    is that law's ``confidence`` quantile, the smallest ``c`` with ``P(count > c) <= 1 - confidence``.

    >>> draws_above_allowed(160, 5e-5), draws_above_allowed(11_110, 5e-5)
    (0, 3)
    """
    if size < 1 or not (0.0 < rate < 1.0):
        raise ValueError(f"need size >= 1 and rate in (0, 1); got {size}, {rate}")
    return _binom_quantile(int(size), float(rate), float(confidence))


@functools.lru_cache(maxsize=64)
def _binom_quantile(size: int, rate: float, confidence: float) -> int:
    # the detector asks for the same (pool size, rate) at every calibration; scipy's ppf costs ~30 us
    return int(stats.binom.ppf(confidence, size, rate))


def top_draws_floor(null_scores: np.ndarray, rate: float) -> float:
    """The least threshold the null's own draws allow at ``rate``: their ``(c + 1)``-th largest.

    ``c`` is :func:`draws_above_allowed` for the number of draws. A tail model fitted to the draws
    (:func:`exp_tail_threshold`) may put the rate's quantile below more of them than chance
    explains; the model is then wrong in the tail, and the draws themselves say where the quantile
    is not. That happens when the score is bounded and discrete: on event counts that are mostly 0,
    six-subsequence windows reach their largest score when the events fall on one side, with a
    probability of 1-2 %, while an exponential tail fitted to 160 draws put the 5e-5 quantile below
    that top. With 160 draws and rate 5e-5, ``c = 0``: no draw may exceed the threshold (a correct
    one is below the largest draw in 0.8 % of calibrations, a small price).

    >>> top_draws_floor(np.r_[np.zeros(150), np.full(10, 4.0)], 5e-5)
    4.0
    >>> null = np.random.default_rng(0).exponential(size=160)
    >>> bool(top_draws_floor(null, 5e-5) == null.max() < exp_tail_threshold(null, 5e-5))
    True
    """
    null = np.asarray(null_scores, dtype=np.float64).ravel()
    null = null[np.isfinite(null)]
    if null.size == 0:
        return math.nan
    c = min(draws_above_allowed(null.size, rate), null.size - 1)
    return float(np.partition(null, null.size - 1 - c)[null.size - 1 - c])


@njit(cache=True)
def _median_excess(x):
    """(median, mean excess over it (0 if none), number of excesses, max |x|) in one compiled pass
    (np.median costs ~20 us of call overhead, and the detector calibrates every n steps)."""
    u = np.median(x)
    total, count, spread = 0.0, 0, 0.0
    for v in x:
        if v > u:
            total += v - u
            count += 1
        if abs(v) > spread:
            spread = abs(v)
    return u, (total / count if count else 0.0), count, spread


@njit(cache=True)
def median_mad(x: np.ndarray) -> tuple[float, float]:
    """Median and median absolute deviation (unscaled) of a finite 1-d array, compiled.

    Examples
    --------
    >>> median_mad(np.array([1.0, 2.0, 4.0, 10.0]))
    (3.0, 1.5)
    """
    med = np.median(x)
    return med, np.median(np.abs(x - med))

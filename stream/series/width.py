"""Subsequence width from the series' own autocorrelation (no benchmark constant).

The width is a quarter of the series' period when it has one (at least ``default``); otherwise a
short ``default`` width (three samples: the fewest whose z-normalised view still has a shape beyond
a difference). Why a quarter cycle and not a whole one: the split profile
(:mod:`ratiowatch.core.split_profile`) compares the *distributions* of subsequences before and
after a split, and a change of shape or frequency changes the distribution of quarter-cycle
fragments (their slopes and curvatures) as well. A whole cycle per subsequence gives 4 rows per
cycle at the usual stride of width / 4, a quarter cycle 16: four times the sample of each
segment, in a quarter of the dimension. On the synthetic change suite (period 24, 10 seeds) a
whole cycle found 20 / 20 shape and 14 / 20 frequency changes, half a cycle 18 / 20 and 20 / 20,
a quarter 20 / 20 and 20 / 20, with no false change on the seasonal null series (periods 7-50,
T = 100-2,000, 20 seeds) for any of them.

The period is the lag of the highest autocorrelation peak after the first zero crossing of the
linearly detrended series (as ClaSP's width heuristics do), accepted when that peak is a local
maximum and exceeds the autocorrelation's own noise: Bartlett's standard error
``sqrt((1 + 2 sum_{j<p} r_j^2) / T)`` times the normal quantile at ``0.05 / max_lag`` (a Bonferroni
bound over the lags searched). The band grows with the autocorrelation at shorter lags, so an
AR(1) with phi = 0.9, whose sample autocorrelation wanders widely, does not pass for periodic,
and it needs no fixed minimum correlation. The width is capped at ``T // min_rows`` so that even a
15-sample series keeps enough subsequences to split.

Examples
--------
>>> t = np.arange(2000)
>>> rng = np.random.default_rng(0)
>>> width, period = subsequence_width(np.sin(2 * np.pi * t / 50) + rng.normal(0, 0.5, 2000))
>>> abs(period - 50) <= 1 and width == round(period / 4)
True
>>> subsequence_width(rng.normal(size=2000))
(3, 0)
>>> subsequence_width(rng.normal(size=15))
(1, 0)
"""

from __future__ import annotations

import math

import numpy as np
from scipy.stats import norm

from ratiowatch.stream.series.period import autocorrelation

#: width of a series without a period
DEFAULT_WIDTH = 3
#: subsequences a series of length T keeps at least: the width is at most T // MIN_ROWS
MIN_ROWS = 10
#: a periodic series' width is its period / CYCLE_PARTS (module docstring)
CYCLE_PARTS = 4
#: chance that a series without a period is taken for periodic by :func:`significant_period`
PERIOD_LEVEL = 0.05


def significant_period(x: np.ndarray, min_acf: float = 0.0, level: float = PERIOD_LEVEL) -> int:
    """The period of the detrended ``x`` (T,) in samples, or 0 (see the module docstring).

    ``level``: the chance that a series without a period passes (Bonferroni over the lags: each
    lag's peak is held to the normal quantile at ``level / max_lag``). ``min_acf`` > 0 also asks
    the autocorrelation at the period to reach it: 0.5 accepts only a
    cycle that carries at least half the series' variance (an option of
    :class:`~ratiowatch.stream.detectors.routed.PeriodRoutedDetector`'s hand-over).

    Examples
    --------
    >>> t = np.arange(600)
    >>> noisy = np.sin(2 * np.pi * t / 30) + np.random.default_rng(0).normal(0, 1.0, 600)
    >>> significant_period(noisy), significant_period(noisy, min_acf=0.5)  # the cycle: 1/3 of the variance
    (29, 0)
    """
    x = np.asarray(x, dtype=np.float64).reshape(-1)
    t_len = x.size
    max_lag = t_len // 3  # at least three cycles in view
    if max_lag < 4:
        return 0
    tt = np.arange(t_len, dtype=np.float64)
    y = x - np.polyval(np.polyfit(tt, x, 1), tt)
    r = autocorrelation(y, max_lag + 1)
    neg = np.flatnonzero(r <= 0.0)
    if neg.size == 0 or r[0] == 0.0:
        return 0
    z = int(neg[0])
    p = z + int(np.argmax(r[z:]))
    if p <= 0 or p >= max_lag or r[p] < r[p - 1] or r[p] < r[p + 1]:
        return 0
    se = math.sqrt((1.0 + 2.0 * float(np.sum(r[1:p] ** 2))) / t_len)
    return p if r[p] > norm.isf(level / max_lag) * se and r[p] >= min_acf else 0


def subsequence_width(x, default: int = DEFAULT_WIDTH, min_rows: int = MIN_ROWS) -> tuple[int, int]:
    """(width, period) for ``x`` of shape (T,) or (T, m); finite values.

    The width is ``max(default, round(period / CYCLE_PARTS))`` when the series has a period (the
    largest over the channels), else ``default``; at most ``T // min_rows``.
    """
    x = np.asarray(x, dtype=np.float64)
    x = x[:, None] if x.ndim == 1 else x
    if x.ndim != 2 or not np.isfinite(x).all():
        raise ValueError("subsequence_width needs finite values of shape (T,) or (T, m)")
    if default < 1 or min_rows < 1:
        raise ValueError(f"default and min_rows must be >= 1; got {default}, {min_rows}")
    period = max((significant_period(x[:, c]) for c in range(x.shape[1])), default=0)
    width = max(default, round(period / CYCLE_PARTS)) if period else default
    return int(max(1, min(width, x.shape[0] // min_rows))), int(period)

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
``sqrt((1 + 2 sum_{0<j<q} r_j^2) / T)`` times the normal quantile at ``0.05 / max_lag`` (a
Bonferroni bound over the lags searched). The band grows with the autocorrelation at shorter lags,
so an AR(1) with phi = 0.9, whose sample autocorrelation wanders widely, does not pass for
periodic, and no fixed minimum correlation is needed.

Two bands, by where the sum stops (``band``):

* ``"peak"`` (the width rule): up to the peak's lag, ``q = p``. The lags between the first zero
  crossing and the peak are where a cycle's own autocorrelation lives, so a cycle widens its own
  band, and 15-20 cycles must be in view (a sine of period 96 under noise: 1,920 samples). That is
  what keeps a staircase aperiodic: regular level steps less their least-squares line are a
  sawtooth, and with the narrower band the offline detector took four steps 200 apart for a cycle
  of 200 and lost three of them (docs/experiments.md, V).
* ``"zero_crossing"`` (the question of
  :class:`~ratiowatch.stream.detectors.routed.PeriodRoutedDetector`): up to the first zero
  crossing, ``q = z``, Bartlett's band under the null that the autocorrelation has died out there
  (a moving average of order ``z - 1``). About five cycles in view suffice (at least three always
  are needed: the lags searched end at ``T / 3``): a sine of period 96 under noise at 480 samples,
  a daily cycle of 288 at 1,920. The null suite's aperiodic kinds keep the rate (at most 3 % of
  100 series per kind and length, 60 to 3,840 samples, get a period). A false period there costs
  speed, not false alarms.

The detrended values are winsorised at ``CLIP_SD`` robust standard deviations (1.4826 x the
median absolute deviation) first. Bartlett's formula needs light tails: without the clip, t(3)
noise got a period in 10 % of series of 3,840 samples and the stress suite's gross outliers in 7 %
of series of 240 with the band up to the peak (17 % and 13 % up to the first zero crossing); with
it, at most 2 % with either band (the wider band's passes are a subset of the narrower's). A
cycle's values lie within about 3 robust sds of their median, so the clip leaves them as they are,
and narrow pulses are cut to the same height in every cycle, which keeps their period.

The width is capped at ``T // min_rows`` so that even a 15-sample series keeps enough
subsequences to split.

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

from ratiowatch.stream.series.period import autocorrelation, unit_scaled

#: width of a series without a period
DEFAULT_WIDTH = 3
#: subsequences a series of length T keeps at least: the width is at most T // MIN_ROWS
MIN_ROWS = 10
#: a periodic series' width is its period / CYCLE_PARTS (module docstring)
CYCLE_PARTS = 4
#: chance that a series without a period is taken for periodic by :func:`significant_period`
PERIOD_LEVEL = 0.05
#: detrended values are winsorised at this many robust standard deviations before the
#: autocorrelation is read (module docstring)
CLIP_SD = 3.0


def winsorised(y: np.ndarray, clip_sd: float = CLIP_SD) -> np.ndarray:
    """``y`` clipped to its median +- ``clip_sd`` robust standard deviations (1.4826 x MAD); as it
    is when the MAD is 0 (more than half the values are one value).

    Examples
    --------
    >>> winsorised(np.array([0.0, 1.0, -1.0, 2.0, -2.0, 50.0])).round(2).tolist()
    [0.0, 1.0, -1.0, 2.0, -2.0, 7.17]
    """
    y = np.asarray(y, dtype=np.float64)
    med = float(np.median(y))
    spread = 1.4826 * float(np.median(np.abs(y - med)))
    if not spread > 0.0:
        return y
    return np.clip(y, med - clip_sd * spread, med + clip_sd * spread)


def significant_period(x: np.ndarray, min_acf: float = 0.0, level: float = PERIOD_LEVEL,
                       band: str = "peak") -> int:
    """The period of the detrended ``x`` (T,) in samples, or 0 (see the module docstring).

    ``level``: the chance that a series without a period passes (Bonferroni over the lags: each
    lag's peak is held to the normal quantile at ``level / max_lag``). ``min_acf`` > 0 also asks
    the autocorrelation at the period to reach it: 0.5 accepts only a
    cycle that carries at least half the series' variance (an option of
    :class:`~ratiowatch.stream.detectors.routed.PeriodRoutedDetector`'s hand-over).
    ``band``: Bartlett's sum runs over the lags below the peak (``"peak"``, the width rule) or
    below the first zero crossing (``"zero_crossing"``, the router's question: about five cycles
    in view suffice instead of 15-20; module docstring).

    Examples
    --------
    >>> t = np.arange(600)
    >>> noisy = np.sin(2 * np.pi * t / 30) + np.random.default_rng(0).normal(0, 1.0, 600)
    >>> significant_period(noisy), significant_period(noisy, min_acf=0.5)  # the cycle: 1/3 of the variance
    (29, 0)
    """
    if band not in ("peak", "zero_crossing"):
        raise ValueError(f"band must be 'peak' or 'zero_crossing'; got {band!r}")
    x = np.asarray(x, dtype=np.float64).reshape(-1)
    t_len = x.size
    max_lag = t_len // 3  # at least three cycles in view
    if max_lag < 4:
        return 0
    bad = int((~np.isfinite(x)).sum())  # counted here: the line fitted below would spread one NaN to all
    if bad:
        raise ValueError(f"significant_period needs finite values; got {t_len} values ({bad} non-finite): "
                         "fill missing values first")
    x = unit_scaled(x)  # exact: the period of x, and no overflow near 1e300
    tt = np.arange(t_len, dtype=np.float64)
    y = winsorised(x - np.polyval(np.polyfit(tt, x, 1), tt))
    # what is left of a constant or a line is rounding noise of x's magnitude, not of y's
    r = autocorrelation(y, max_lag + 1, magnitude=float(np.abs(x).max(initial=0.0)))
    neg = np.flatnonzero(r <= 0.0)
    if neg.size == 0 or r[0] == 0.0:
        return 0
    z = int(neg[0])
    p = z + int(np.argmax(r[z:]))
    if p <= 0 or p >= max_lag or r[p] < r[p - 1] or r[p] < r[p + 1]:
        return 0
    q = z if band == "zero_crossing" else p  # Bartlett's band under a moving average of order q - 1
    se = math.sqrt((1.0 + 2.0 * float(np.sum(r[1:q] ** 2))) / t_len)
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

"""Period estimation and block aggregation (PAA) for scale-aware offline change detection.

Why: a two-window detector whose windows hold a fraction of one period scores the *phase* of a
periodic series, not its distribution, so it fires on every cycle or never. TSSB-style series
(periodic shapes, periods of ~10-300 points) need windows of several periods; the offline replay
(:mod:`stream.offline`) therefore estimates the period from a warm-up prefix and block-averages the
series so that one period is about ``points_per_period`` aggregated values.

The period is the lag of the highest autocorrelation peak after the autocorrelation's first zero
crossing (as ClaSP's window-size heuristics do), accepted only when that peak is a real local
maximum (not the edge of the searched lags) and at least ``min_acf``. White noise, random walks
and trends give no period (0).

Examples
--------
>>> t = np.arange(600)
>>> estimate_period(np.sin(2 * np.pi * t / 40))
40
>>> estimate_period(np.random.default_rng(0).normal(size=600))
0
>>> aggregate(np.arange(10.0), 3)
array([1., 4., 7.])
>>> block_centre(np.array([0, 1, 2]), 3)
array([1, 4, 7])
"""

from __future__ import annotations

import numpy as np

#: autocorrelation at the period below which a series does not count as periodic
MIN_ACF = 0.5


def autocorrelation(x: np.ndarray, max_lag: int) -> np.ndarray:
    """Biased sample autocorrelation at lags ``0 .. max_lag - 1`` (FFT, O(T log T)).

    Biased (divided by T, not T - lag) so that long lags, estimated from few pairs, are shrunk
    towards zero. A constant series gives all zeros.

    Examples
    --------
    >>> autocorrelation(np.array([1.0, -1.0, 1.0, -1.0]), 3)
    array([ 1.  , -0.75,  0.5 ])
    """
    x = np.asarray(x, dtype=np.float64).reshape(-1)
    if x.size < 2 or not np.isfinite(x).all():
        raise ValueError(f"autocorrelation needs at least 2 finite values; got {x.size} values "
                         f"({int((~np.isfinite(x)).sum())} non-finite): fill missing values first")
    max_lag = int(min(max_lag, x.size))
    if max_lag < 1:
        raise ValueError(f"max_lag must be >= 1; got {max_lag}")
    xc = x - x.mean()
    f = np.fft.rfft(xc, 2 * x.size)
    ac = np.fft.irfft(f * np.conj(f), 2 * x.size)[:max_lag]
    if not ac[0] > 1e-12 * max(1.0, float(np.abs(x).max()) ** 2) * x.size:
        return np.zeros(max_lag)
    return ac / ac[0]


def estimate_period(x: np.ndarray, min_acf: float = MIN_ACF, max_lag: int | None = None) -> int:
    """Dominant period of ``x`` in samples, or 0 when there is no clear one.

    Parameters
    ----------
    x : array, shape (T,)
        Finite values (fill missing values first), e.g. a warm-up prefix of a series.
    min_acf : float
        Smallest autocorrelation at the period for the series to count as periodic.
    max_lag : int, optional
        Largest lag searched; default ``T // 2`` (at least two periods must be seen).

    Returns
    -------
    int
        The lag of the highest autocorrelation peak after the first zero crossing when that peak
        is a local maximum inside the searched lags and is at least ``min_acf``; otherwise 0.

    Examples
    --------
    >>> saw = np.tile(np.linspace(0.0, 1.0, 25, endpoint=False), 20)
    >>> estimate_period(saw)
    25
    >>> estimate_period(np.cumsum(np.random.default_rng(1).normal(size=800)))
    0
    """
    if not (0.0 < float(min_acf) < 1.0):
        raise ValueError(f"min_acf must be in (0, 1), e.g. 0.5; got {min_acf}")
    x = np.asarray(x, dtype=np.float64).reshape(-1)
    max_lag = x.size // 2 if max_lag is None else int(max_lag)
    if max_lag < 3:
        return 0
    ac = autocorrelation(x, max_lag + 1)
    neg = np.flatnonzero(ac < 0.0)
    if neg.size == 0:  # never decorrelates within the lags: trend or random walk
        return 0
    z = int(neg[0])
    lag = z + int(np.argmax(ac[z:]))
    # the edge of the searched lags is no peak (the autocorrelation may still be rising there)
    if lag >= ac.size - 1 or ac[lag] < min_acf:
        return 0
    return lag


def aggregate(x: np.ndarray, s: int) -> np.ndarray:
    """Means of consecutive complete blocks of ``s`` samples (PAA); a partial last block is dropped.

    Causal: block ``j`` (samples ``j s .. j s + s - 1``) is available once its last sample is seen.
    Rows of a 2-d ``x`` are aggregated per column.

    Examples
    --------
    >>> aggregate(np.array([1.0, 3.0, 5.0, 7.0, 9.0]), 2)
    array([2., 6.])
    """
    s = int(s)
    if s < 1:
        raise ValueError(f"block size must be an integer >= 1; got {s}")
    x = np.asarray(x, dtype=np.float64)
    m = x.shape[0] // s
    if m == 0:
        raise ValueError(f"series of {x.shape[0]} samples is shorter than one block of {s}")
    return x[: m * s].reshape(m, s, *x.shape[1:]).mean(axis=1)


def block_centre(j: np.ndarray | int, s: int) -> np.ndarray | int:
    """Original index of the centre of aggregated block ``j`` (``j s + s // 2``)."""
    return np.asarray(j) * int(s) + int(s) // 2 if isinstance(j, np.ndarray) else int(j) * int(s) + int(s) // 2


def block_end(j: np.ndarray | int, s: int) -> np.ndarray | int:
    """Original index of the last sample of block ``j``: when that block becomes available."""
    return (np.asarray(j) + 1) * int(s) - 1 if isinstance(j, np.ndarray) else (int(j) + 1) * int(s) - 1

"""Period estimation and phase-locked block aggregation (PAA) for scale-aware offline change detection.

Why: a two-window detector whose windows hold a fraction of one period scores the *phase* of a
periodic series, not its distribution, so it fires on every cycle or never. TSSB-style series
(periodic shapes, periods of ~10-300 points) need windows of several periods; the offline replay
(:mod:`ratiowatch.stream.detectors.offline`) therefore estimates the period from a warm-up prefix and block-averages the
series into exactly ``points`` values per estimated period.

The period is the lag of the highest autocorrelation peak after the autocorrelation's first zero
crossing (as ClaSP's window-size heuristics do), accepted only when that peak is a real local
maximum (not the edge of the searched lags) and at least ``min_acf``. White noise, random walks
and trends give no period (0).

Blocks are *phase-locked*: block ``j`` covers samples ``round(j P / points)`` up to (not including)
``round((j + 1) P / points)``, so ``points`` consecutive blocks always span exactly one period
and a window of whole periods in blocks is a window of whole periods in samples. Blocks of one
fixed size ``s`` drift against the period when ``s`` does not divide it (P = 50, s = 6: eight blocks
are 48 samples), the windows then hold a phase that moves from cycle to cycle, and a null that
exchanges whole periods between the windows raised false alarms on a clean sine.

Examples
--------
>>> t = np.arange(600)
>>> estimate_period(np.sin(2 * np.pi * t / 40))
40
>>> estimate_period(np.random.default_rng(0).normal(size=600))
0
>>> values, edges = aggregate_periods(np.arange(12.0), period=5, points=2)
>>> edges.tolist(), values.tolist()
([0, 3, 5, 8, 10], [1.0, 3.5, 6.0, 8.5])
"""

from __future__ import annotations

import math

import numpy as np

#: autocorrelation at the period below which a series does not count as periodic
MIN_ACF = 0.5


#: a spread below this fraction of a series' magnitude is rounding noise: the series is constant
ROUNDING = 1e-10


def unit_scaled(x: np.ndarray, magnitude: float | None = None) -> np.ndarray:
    """``x`` times the power of two that brings ``magnitude`` (default ``max |x|``) into [0.5, 1).

    A power of two scales every float exactly, so whatever is scale-free (an autocorrelation, a
    period) comes out bit-identical, while squares of values near 1e300 no longer overflow and
    tiny ones no longer underflow.

    Examples
    --------
    >>> unit_scaled(np.array([6.0, -3.0])).tolist()  # divided by 8
    [0.75, -0.375]
    >>> unit_scaled(np.array([3e300])).tolist() == [3e300 / 2.0 ** 999]
    True
    """
    x = np.asarray(x, dtype=np.float64)
    m = float(np.abs(x).max(initial=0.0)) if magnitude is None else float(magnitude)
    if not (m > 0.0 and math.isfinite(m)):
        return x
    return np.ldexp(x, -math.frexp(m)[1])


def autocorrelation(x: np.ndarray, max_lag: int, magnitude: float | None = None) -> np.ndarray:
    """Biased sample autocorrelation at lags ``0 .. max_lag - 1`` (FFT, O(T log T)).

    Biased (divided by T, not T - lag) so that long lags, estimated from few pairs, are shrunk
    towards zero. A series whose standard deviation is at most :data:`ROUNDING` times
    ``magnitude`` (default: its own largest absolute value) is constant up to rounding and gives
    all zeros. The test is relative, never absolute, so data in small units keep their cycles
    (values near 1e-7 are no more constant than values near 1), and values near 1e300 do not
    overflow. A caller that removed a level or trend first passes the magnitude of the data
    before it: what is left of a constant or a straight line then is rounding noise of that
    magnitude.

    Examples
    --------
    >>> autocorrelation(np.array([1.0, -1.0, 1.0, -1.0]), 3)
    array([ 1.  , -0.75,  0.5 ])
    >>> autocorrelation(1e-9 * np.array([1.0, -1.0, 1.0, -1.0]), 3)
    array([ 1.  , -0.75,  0.5 ])
    >>> autocorrelation(np.array([1e-13, -1e-13, 1e-13, -1e-13]), 3, magnitude=1e6)  # rounding noise of 1e6
    array([0., 0., 0.])
    """
    x = np.asarray(x, dtype=np.float64).reshape(-1)
    if x.size < 2 or not np.isfinite(x).all():
        raise ValueError(f"autocorrelation needs at least 2 finite values; got {x.size} values "
                         f"({int((~np.isfinite(x)).sum())} non-finite): fill missing values first")
    max_lag = int(min(max_lag, x.size))
    if max_lag < 1:
        raise ValueError(f"max_lag must be >= 1; got {max_lag}")
    own = float(np.abs(x).max())
    ref = own if magnitude is None else max(float(magnitude), own)
    if not ref > 0.0:
        return np.zeros(max_lag)
    # scaled by the power of two that brings ref into [0.5, 1): exact, and no square overflows
    xs = unit_scaled(x, ref)
    mantissa = math.frexp(ref)[0]  # ref after the same scaling
    xc = xs - xs.mean()
    f = np.fft.rfft(xc, 2 * x.size)
    ac = np.fft.irfft(f * np.conj(f), 2 * x.size)[:max_lag]
    if not ac[0] > (ROUNDING * mantissa) ** 2 * x.size:
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


def block_edges(t_len: int, period: int, points: int) -> np.ndarray:
    """Phase-locked block boundaries: ``round(j period / points)`` for every complete block, from 0.

    Block ``j`` covers samples ``edges[j] .. edges[j + 1] - 1``; the last edge is at most ``t_len``
    (a partial last block is dropped). Needs ``period >= points`` so that no block is empty.

    Examples
    --------
    >>> block_edges(20, 16, 8).tolist()
    [0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20]
    """
    if int(points) < 1 or int(period) < int(points):
        raise ValueError(f"need period >= points >= 1 (blocks of at least one sample); got period={period}, "
                         f"points={points}")
    count = int(t_len) * int(points) // int(period) + 2
    edges = np.floor(np.arange(count) * (float(period) / int(points)) + 0.5).astype(np.int64)
    edges = edges[edges <= int(t_len)]
    if edges.size < 2:
        raise ValueError(f"series of {t_len} samples is shorter than one block of a period of {period}")
    return edges


def aggregate_periods(x: np.ndarray, period: int, points: int) -> tuple[np.ndarray, np.ndarray]:
    """Means of the phase-locked blocks of ``x`` (1-d) and their edges (see :func:`block_edges`).

    Causal: block ``j`` is available once its last sample ``edges[j + 1] - 1`` is seen.
    """
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 1:
        raise ValueError(f"aggregate_periods takes a 1-d series; got shape {x.shape}")
    edges = block_edges(x.shape[0], period, points)
    cum = np.concatenate([[0.0], np.cumsum(x[: edges[-1]])])
    return (cum[edges[1:]] - cum[edges[:-1]]) / np.diff(edges), edges


def block_centre(j: int, edges: np.ndarray) -> int:
    """Original index of the centre of block ``j`` (clipped to the blocks that exist)."""
    j = min(max(int(j), 0), edges.size - 2)
    return int((edges[j] + edges[j + 1] - 1) // 2)


def block_end(j: int, edges: np.ndarray) -> int:
    """Original index of the last sample of block ``j``: when that block becomes available."""
    j = min(max(int(j), 0), edges.size - 2)
    return int(edges[j + 1] - 1)

"""Gaussian kernel primitives, compiled with numba.

Convention everywhere: ``K(x, c) = exp(-||x - c||^2 / (2 sigma^2))`` (note the 2).
Kernel values below ``exp(-230)`` (about 1e-100) are flushed to exactly zero: they are far below
any ridge ``lambda`` and rounding level, and left alone their products become subnormal floats,
which make the matrix products of model selection tens of times slower.
"""

from __future__ import annotations

import numpy as np
from numba import njit

#: exponent below which a kernel value is flushed to zero (exp(-230) ~ 1e-100)
FLUSH_EXPONENT = -230.0


@njit(cache=True, inline="always")
def row_sq_dist(x: np.ndarray, i: int, c: np.ndarray, j: int) -> float:
    """``||x[i] - c[j]||^2``, summed over the columns in order (every kernel here sums this way, so
    a distance made again is bit for bit the same)."""
    s = 0.0
    for k in range(x.shape[1]):
        diff = x[i, k] - c[j, k]
        s += diff * diff
    return s


@njit(cache=True, fastmath=False)
def sq_dist(x: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Pairwise squared Euclidean distances, shape (len(x), len(c))."""
    n = x.shape[0]
    m = c.shape[0]
    out = np.empty((n, m))
    for i in range(n):
        for j in range(m):
            out[i, j] = row_sq_dist(x, i, c, j)
    return out


@njit(cache=True, inline="always")
def gauss_entry(exponent: float) -> float:
    """One kernel value ``exp(exponent)`` for ``exponent = -||x - c||^2 / (2 sigma^2)``, flushed to
    exactly 0 at or below :data:`FLUSH_EXPONENT` (the one place every kernel entry is made).

    >>> gauss_entry(-0.5), gauss_entry(FLUSH_EXPONENT)
    (0.6065306597126334, 0.0)
    """
    return np.exp(exponent) if exponent > FLUSH_EXPONENT else 0.0


def gauss_entries(exponents: np.ndarray) -> np.ndarray:
    """:func:`gauss_entry` of every element, in place (numpy's vectorised ``exp``: several times
    faster on a block than one scalar ``exp`` per entry in a compiled loop).

    >>> gauss_entries(np.array([-0.5, FLUSH_EXPONENT]))
    array([0.60653066, 0.        ])
    """
    flush = exponents <= FLUSH_EXPONENT
    np.exp(exponents, out=exponents)
    exponents[flush] = 0.0
    return exponents


@njit(cache=True)
def gauss_from_sq(d2: np.ndarray, sigma: float) -> np.ndarray:
    """Gaussian kernel values from squared distances."""
    g = -0.5 / (sigma * sigma)
    out = np.empty_like(d2)
    for i in range(d2.shape[0]):
        for j in range(d2.shape[1]):
            out[i, j] = gauss_entry(g * d2[i, j])
    return out


@njit(cache=True)
def gauss_kernel(x: np.ndarray, c: np.ndarray, sigma: float) -> np.ndarray:
    """Kernel matrix ``K[i, l] = exp(-||x_i - c_l||^2 / (2 sigma^2))``."""
    return gauss_from_sq(sq_dist(x, c), sigma)


@njit(cache=True)
def gauss_row(x: np.ndarray, c: np.ndarray, sigma: float, out: np.ndarray) -> None:
    """Kernel values of one sample ``x`` (shape (d,)) against centres ``c``, written into ``out``."""
    g = -0.5 / (sigma * sigma)
    for j in range(c.shape[0]):
        s = 0.0
        for k in range(c.shape[1]):
            diff = x[k] - c[j, k]
            s += diff * diff
        out[j] = gauss_entry(g * s)


@njit(cache=True)
def _pair_distances(x):
    """Condensed pairwise Euclidean distances (i < j) without forming the n x n matrix."""
    n, d = x.shape
    out = np.empty(n * (n - 1) // 2)
    t = 0
    for i in range(n):
        for j in range(i + 1, n):
            s = 0.0
            for k in range(d):
                diff = x[i, k] - x[j, k]
                s += diff * diff
            out[t] = np.sqrt(s)
            t += 1
    return out


@njit(cache=True)
def _median(x):
    return np.median(x)


#: the smallest scale :func:`median_distance` returns: 1e4 x the square root of the smallest normal
#: float (about 1.5e-150), so that a width of 1e-3 times it still has a normal square
MIN_SCALE = 1e4 * float(np.sqrt(np.finfo(np.float64).tiny))

#: the smallest width whose square is a normal float64 (about 1.5e-154): below it ``-0.5 / sigma^2``
#: overflows to -inf and a zero distance gives a NaN exponent
SQRT_TINY = float(np.sqrt(np.finfo(np.float64).tiny))

#: a column whose values spread over at most this fraction of its largest magnitude is constant up to
#: rounding (the relative floor of :func:`ratiowatch.stream.series.preprocess.robust_scale`)
ROUNDING_SPREAD = 1e-12


@njit(cache=True)
def constant_up_to_rounding(x):
    """Whether every column of ``x`` (2-d) is constant up to rounding: its spread (max - min) is at
    most :data:`ROUNDING_SPREAD` x its largest magnitude (0 for a constant column).

    The scale rules fall back from a zero median distance to the mean nonzero distance: on a
    constant series whose values differ in the last bit (1.0 and 1.0 + 2.2e-16, or 0.1 + 0.2 and
    0.3) that is a width of ulps, and a rounding difference would score as a far outlier or a
    maximal change. Callers give such data the width of constant data. Compiled, one pass per
    column that stops at the first column that varies: the detectors call it at every refit.

    Examples
    --------
    >>> bool(constant_up_to_rounding(np.array([[0.1 + 0.2], [0.3]])))
    True
    >>> bool(constant_up_to_rounding(np.array([[1.0], [1.0 + 1e-9]])))
    False
    """
    n, d = x.shape
    if n == 0:
        return False
    for j in range(d):
        lo = x[0, j]
        hi = lo
        for i in range(1, n):
            v = x[i, j]
            if v < lo:
                lo = v
            elif v > hi:
                hi = v
        if hi - lo > ROUNDING_SPREAD * max(abs(lo), abs(hi)):
            return False
    return True


def data_scale(x: np.ndarray) -> float:
    """The power of two nearest below the largest per-feature range of ``x`` (1.0 for constant data).

    Dividing by a power of two is exact, so for data of ordinary magnitude every kernel value is
    bit for bit what it would be unscaled; for data whose differences are tiny (1e-156) their
    squares and ``sigma^2`` would underflow and every kernel value would be lost.

    Examples
    --------
    >>> data_scale(np.array([[0.0], [3.0]])), data_scale(np.zeros((3, 2)))
    (2.0, 1.0)
    """
    spread = float(np.max(np.ptp(x, axis=0))) if x.size else 0.0
    if not (spread > 0.0 and np.isfinite(spread)):
        return 1.0
    return float(np.ldexp(1.0, int(np.frexp(spread)[1]) - 1))


#: the largest kernel width used in units of :func:`data_scale`: the scaled data span at most 2 per
#: feature, so any width beyond this gives kernel values of exactly 1 (and its square stays finite)
MAX_SCALED_WIDTH = 1e150


def scaled_width(sigma: float, scale: float) -> float:
    """``sigma / scale``, at most :data:`MAX_SCALED_WIDTH`: a width of 50 for data spanning 2.2e-308
    (scale 2^-1022) overflowed to inf, where every kernel value is 1 all the same.

    A width below :data:`MIN_SCALE` in those units is refused: its square underflows.

    >>> scaled_width(3.0, 2.0), scaled_width(50.0, 2.0 ** -1022)
    (1.5, 1e+150)
    """
    sigma, scale = float(sigma), float(scale)
    if sigma > MAX_SCALED_WIDTH * scale:
        return MAX_SCALED_WIDTH
    if not sigma / scale >= MIN_SCALE:
        raise ValueError(f"sigma={sigma:g} is below {MIN_SCALE:.1e} x the data's range (about {scale:g}): in the data's "
                         "units its square underflows float64 and no two distinct rows share kernel mass; "
                         "give a larger sigma")
    return sigma / scale


def check_width(sigma, name: str = "sigma", *, minimum: float = MIN_SCALE) -> float:
    """A Gaussian kernel width for data in their own units: finite and at least ``minimum``
    (:data:`MIN_SCALE`, or :data:`SQRT_TINY` for a width the caller made from the data's own scale).

    Below it ``sigma ** 2`` underflows float64 and ``exp(-d2 / (2 sigma^2))`` divides by zero.

    >>> check_width(0.5)
    0.5
    >>> check_width(1e-170)
    Traceback (most recent call last):
    ...
    ValueError: sigma must be positive and finite, and at least 1.5e-150 (its square underflows float64 below that); got 1e-170: rescale the data if its units are that small
    """
    value = float(sigma)
    if not (np.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be positive and finite; got {sigma}")
    if value < minimum:
        raise ValueError(f"{name} must be positive and finite, and at least {minimum:.1e} (its square underflows "
                         f"float64 below that); got {sigma}: rescale the data if its units are that small")
    return value


def median_distance(x: np.ndarray, max_points: int = 500, seed=0) -> float:
    """Median pairwise Euclidean distance (on at most ``max_points`` rows, chosen without replacement).

    Returns a positive scale even for constant or duplicated data: when the median is zero it
    falls back to the mean nonzero distance, then to 1.0, so sigma grids built on it stay valid.
    Distances below :data:`MIN_SCALE` count as zero: a kernel width that small has a square that
    underflows (or, times a grid factor, soon would), and rows that close are equal to any kernel.

    Examples
    --------
    >>> median_distance(np.array([[0.0], [4.4e-162], [0.0]]))
    1.0
    """
    x = np.asarray(x, dtype=np.float64)
    if x.shape[0] > max_points:
        idx = np.random.default_rng(seed).choice(x.shape[0], size=max_points, replace=False)
        x = x[np.sort(idx)]
    dist = _pair_distances(np.ascontiguousarray(x))
    if dist.size == 0:
        return 1.0
    med = float(_median(dist))  # compiled: np.median's call overhead is most of its cost here
    if med >= MIN_SCALE:
        return med
    nz = dist[dist >= MIN_SCALE]
    return float(nz.mean()) if nz.size else 1.0

"""Correlation view of the change detector: Fisher-z differences of the channels' correlations.

Why: the kernel score of a k x m embedding does not see a change of the channels' correlation
alone (bivariate AR(2), k = 3, n = 50: the PE-hat of a clean 0 -> 0.95 split has its median below
the stationary null's 99.9 % quantile for every sigma in 0.12-1 x the median distance and lambda in
0.01-1, while a Fisher-z test on the same splits rejects 99 % of them). The detector
(:class:`ratiowatch.stream.detectors.changepoint.ChangePointDetector`, ``corr_view``) therefore also compares
the windows' contemporaneous correlations and calibrates the differences on its AR surrogates.

:func:`fisher_z_diff` is the reference (numpy, any batch shape); :func:`corr_ratio` (one step) and
:func:`surrogate_zdiff` (a calibration's surrogates) are its compiled forms, held equal by tests.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ratiowatch.stream.calibration.ranked import (fisher_z_pairs, largest_z_ratio, sorted_windows,
                                                  window_scores_sorted)


def fisher_z_diff(past: np.ndarray, cur: np.ndarray, ranks: bool = False) -> np.ndarray:
    """Signed Fisher-z differences ``atanh r_past - atanh r_cur`` of every channel pair.

    ``ranks``: the Gaussian rank correlation (Pearson's of each window's normal scores
    ``Phi^-1(rank / (n + 1))``, averaged over ties; :func:`normal_scores`) instead of Pearson's;
    the detector's view uses it (see the module docstring).

    ``past`` and ``cur`` have shape ``(..., n, m)`` (n samples of m channels, any leading batch
    shape); the result has shape ``(..., m (m - 1) / 2)``, pairs in ``np.triu_indices(m, 1)`` order.
    Under no change and Gaussian data each difference is close to normal with variance
    ``2 / (n - 3)`` (more with serial dependence: the detector calibrates it on AR surrogates).
    A pair with a (numerically) constant channel in either window gives 0: no evidence.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> a = rng.normal(size=(200, 2))
    >>> b = a @ np.array([[1.0, 0.9], [0.0, 0.4]])  # correlation about 0.9
    >>> d = fisher_z_diff(a, b)
    >>> d.shape, bool(-1.8 < d[0] < -1.2)
    ((1,), True)
    """
    past, cur = np.asarray(past, dtype=np.float64), np.asarray(cur, dtype=np.float64)
    if past.ndim < 2 or past.shape[-1] < 2 or cur.shape[-1] != past.shape[-1]:
        raise ValueError("need windows of shape (..., n, m) with the same m >= 2 channels; "
                         f"got {past.shape}, {cur.shape}")
    if past.shape[-2] < 4 or cur.shape[-2] < 4:
        raise ValueError("need at least 4 samples per window for a correlation; "
                         f"got {past.shape[-2]}, {cur.shape[-2]}")
    iu, ju = np.triu_indices(past.shape[-1], 1)
    if ranks:
        past, cur = _normal_scored(past), _normal_scored(cur)

    def z(w):
        c = w - w.mean(axis=-2, keepdims=True)
        ss = (c * c).sum(axis=-2)  # (..., m)
        ok = ss > 1e-24 * np.maximum((w * w).sum(axis=-2), 1e-300)  # not constant up to rounding
        num = (c[..., :, iu] * c[..., :, ju]).sum(axis=-2)
        den = np.sqrt(ss[..., iu] * ss[..., ju])
        good = ok[..., iu] & ok[..., ju]
        r = np.where(good, num / np.where(good, den, 1.0), 0.0)
        return np.arctanh(np.clip(r, -1.0 + 1e-12, 1.0 - 1e-12)), good

    zp, gp = z(past)
    zc, gc = z(cur)
    return np.where(gp & gc, zp - zc, 0.0)


def normal_scores(n: int) -> np.ndarray:
    """The van der Waerden normal scores ``Phi^-1(r / (n + 1))``, r = 1..n, of a window of n.

    Examples
    --------
    >>> np.round(normal_scores(3), 4)
    array([-0.6745,  0.    ,  0.6745])
    """
    from scipy.special import ndtri

    return ndtri(np.arange(1, int(n) + 1) / (int(n) + 1.0))


def _normal_scored(w: np.ndarray) -> np.ndarray:
    """Each window's values (axis -2) replaced by their normal scores, tied values by the mean of
    their positions' scores (reference form of :func:`~ratiowatch.stream.calibration.ranked.window_scores_sorted`)."""
    from scipy.stats import rankdata

    n = w.shape[-2]
    cum = np.r_[0.0, np.cumsum(normal_scores(n))]
    lo = rankdata(w, method="min", axis=-2).astype(np.int64)
    hi = rankdata(w, method="max", axis=-2).astype(np.int64)
    return (cum[hi] - cum[lo - 1]) / (hi - lo + 1)


@njit(cache=True)
def _windows(lv, first, n, d, table):
    """The two windows (n, m) of samples ``first .. first + 2n - 1`` of the levels ``lv`` (their
    first differences when ``d``): the values (Pearson's), or their normal scores within each
    window when ``table`` holds them (the Gaussian rank correlation, read off one sort)."""
    m = lv.shape[1]
    vals = np.empty((2 * n, m))
    for i in range(2 * n):
        for c in range(m):
            vals[i, c] = lv[first + i + 1, c] - lv[first + i, c] if d else lv[first + i, c]
    if not table.size:
        return vals[:n], vals[n:]
    wp, wc = np.empty((n, m)), np.empty((n, m))
    sv, sa = sorted_windows(vals, 2 * n)
    window_scores_sorted(sv, sa, 2 * n, n, table, wp, wc)
    return wp, wc


@njit(cache=True)
def surrogate_zdiff(sims, n, table):
    """Signed Fisher-z differences of each surrogate's two halves: (count, 2n, m) -> (count, pairs);
    ``table``: the window's normal scores (Gaussian rank correlation) or empty (Pearson's)."""
    count, _, m = sims.shape
    pairs = m * (m - 1) // 2
    out = np.empty((count, pairs))
    zp, zc = np.empty(pairs), np.empty(pairs)
    gp, gc = np.empty(pairs, dtype=np.bool_), np.empty(pairs, dtype=np.bool_)
    for i in range(count):
        wp, wc = _windows(sims[i], 0, n, False, table)
        fisher_z_pairs(wp, zp, gp)
        fisher_z_pairs(wc, zc, gc)
        for p in range(pairs):
            out[i, p] = zp[p] - zc[p] if gp[p] and gc[p] else 0.0
    return out


@njit(cache=True)
def corr_ratio(lv, k, n, d, thr, table):
    """max over pairs of |Fisher-z difference| / ``thr`` between the windows' newest samples.

    ``lv``: the newest ``2n + k - 1 + d`` levels; ``table``: :func:`normal_scores` of n (the
    Gaussian rank correlation) or empty (Pearson's). The compiled one-off form of
    :func:`fisher_z_diff` (the tests hold the two equal; the detector reads its kept-sorted
    windows instead, :mod:`.ranked`).
    """
    pairs = thr.shape[0]
    zp, zc = np.empty(pairs), np.empty(pairs)
    gp, gc = np.empty(pairs, dtype=np.bool_), np.empty(pairs, dtype=np.bool_)
    wp, wc = _windows(lv, k - 1, n, d, table)
    fisher_z_pairs(wp, zp, gp)
    fisher_z_pairs(wc, zc, gc)
    return largest_z_ratio(zp, gp, zc, gc, thr)

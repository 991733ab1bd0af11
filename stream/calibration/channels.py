"""Channel view of the change detector: rank tests of each channel's location and spread.

Why: the kernel score of a k x m embedding spreads over all m channels, so a change of one channel
among many is diluted. With i.i.d. N(0, 1) channels and a 2-sd mean shift in one of them at
T = 1,000 of 2,000 (n = 50, seeds 0-9), the two-window detector found it in 10 / 8 / 2 of 10
streams with 2 / 5 / 10 channels, and a tripled standard deviation in 7 / 4 / 4. The detector
(:class:`ratiowatch.stream.detectors.changepoint.ChangePointDetector`, ``channel_view``) therefore
also compares each channel's two windows on their own, as the correlation view compares each pair.

Two statistics per channel, both on the windows' newest samples (the values the correlation view
reads):

* location: the difference of the past and the current window's mean ranks in the pooled 2n
  values, ``(mean rank past - mean rank current) / 2n`` (a Wilcoxon-Mann-Whitney statistic);
* spread: the same for the ranks of the absolute deviations from the pooled median (a rank test of
  scale in the spirit of Ansari and Bradley 1960, robust to a simultaneous shift of location).

Ranks make both statistics invariant to the channel's marginal law (heavy tails, skew, any
monotone transform), so AR surrogates with bootstrapped residuals calibrate them from their serial
dependence alone. Ties get average ranks; a constant channel scores 0 (no evidence).

:func:`rank_diffs` is the reference (numpy/scipy, any batch shape); :func:`channel_ratio` (one step)
and :func:`surrogate_rank_diffs` (a calibration's surrogates) are its compiled forms, held equal by
tests.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ratiowatch.stream.calibration.ranked import channel_stats_sorted, sorted_windows


def rank_diffs(past: np.ndarray, cur: np.ndarray) -> np.ndarray:
    """Location and spread rank statistics of every channel, past window against current.

    ``past`` and ``cur`` have shape ``(..., n, m)`` (n samples of m channels, any leading batch
    shape); the result has shape ``(..., 2 m)``: the m location statistics, then the m spread
    statistics (see the module docstring). Each lies in ``[-1/2, 1/2]``; under no change it is
    centred at 0.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> past = rng.normal(size=(100, 2))
    >>> cur = past * [1.0, 4.0] + [3.0, 0.0]  # channel 0 moves up, channel 1 spreads out
    >>> loc0, loc1, spread0, spread1 = rank_diffs(past, cur)
    >>> bool(loc0 < -0.4), bool(abs(loc1) < 0.1), bool(spread1 < -0.2)
    (True, True, True)
    """
    from scipy.stats import rankdata

    past, cur = np.asarray(past, dtype=np.float64), np.asarray(cur, dtype=np.float64)
    if past.ndim < 2 or past.shape != cur.shape:
        raise ValueError(f"need windows of one shape (..., n, m); got {past.shape}, {cur.shape}")
    n = past.shape[-2]
    if n < 2:
        raise ValueError(f"need at least 2 samples per window; got {n}")
    pooled = np.concatenate([past, cur], axis=-2)

    def diff(v):
        r = rankdata(v, method="average", axis=-2)
        return (r[..., :n, :].mean(axis=-2) - r[..., n:, :].mean(axis=-2)) / (2 * n)

    dev = np.abs(pooled - np.median(pooled, axis=-2, keepdims=True))
    return np.concatenate([diff(pooled), diff(dev)], axis=-1)


@njit(cache=True)
def _window_stats(lv, first, n, d, out):
    """Both statistics of every channel over samples ``first .. first + 2n - 1`` of the levels ``lv``
    (their first differences when ``d``) into ``out`` (2 m): one sort, read as the detector reads
    its kept-sorted windows (:func:`~ratiowatch.stream.calibration.ranked.channel_stats_sorted`)."""
    m = lv.shape[1]
    vals = np.empty((2 * n, m))
    for i in range(2 * n):
        for c in range(m):
            vals[i, c] = lv[first + i + 1, c] - lv[first + i, c] if d else lv[first + i, c]
    sv, sa = sorted_windows(vals, 2 * n)
    channel_stats_sorted(sv, sa, 2 * n, n, out)


@njit(cache=True)
def surrogate_rank_diffs(sims, first, n):
    """Both statistics of each surrogate's samples ``first .. first + 2n - 1``, split in halves:
    (count, T, m) -> (count, 2 m)."""
    count, _, m = sims.shape
    out = np.empty((count, 2 * m))
    for i in range(count):
        _window_stats(sims[i], first, n, False, out[i])
    return out


@njit(cache=True)
def channel_ratio(lv, k, n, d, thr):
    """max over channels and statistics of |statistic| / ``thr`` between the windows' newest samples.

    ``lv``: the newest ``2n + k - 1 + d`` levels (the newest sample of each of the 2n
    subsequences is level ``k - 1`` on); ``thr`` (2 m) the thresholds in :func:`rank_diffs` order.
    The compiled one-off form of :func:`rank_diffs` (the detector reads its kept-sorted windows
    instead, :mod:`.ranked`).
    """
    stats = np.empty(thr.size)
    _window_stats(lv, k - 1, n, d, stats)
    best = 0.0
    for p in range(thr.size):
        v = abs(stats[p]) / thr[p]
        if v > best:
            best = v
    return best

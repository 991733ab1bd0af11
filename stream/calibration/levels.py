"""Level view of the change detector: the windows' mean levels, where the windows hold differences.

Why: the two-window detector works on first differences when a stream is smooth (lag-1
autocorrelation above 0.8, ``difference="auto"``). A level step is then one large difference among
2n, not a change of the differences' distribution, and the kernel score hardly moves. On AR(1)
streams with phi = 0.9 and a step of 5 marginal sd at 1,000 of 2,000 samples, the detector found
none of 6 (seeds 0-5), where the offline detector, which compares levels, found every one.

The statistic of each channel is the difference of the current and the past window's mean level,
in the detector's scaled units. Written in the 2n differences ``d_1 .. d_2n`` that the windows
hold, it is a triangular filter:

    D = sum_j w_j d_j,   w_j = (j - 1) / n for j <= n,   w_j = (2n + 1 - j) / n for j > n,

whose weight is largest (1) at the first difference of the current window: a step there moves D
by its full size, one that left the windows by nothing. A single outlier moves only its window's
mean, by 1/n of its size.

The null is drawn per channel from AR surrogates; the threshold is their RMS about 0 times a
Student-t quantile, as for the channel view (:mod:`ratiowatch.stream.calibration.channels`). Why
about 0 and not about their mean: a trend in the levels is a constant in the differences, and D
carries it (``n`` times the slope), but the slope the surrogates carry is an estimate from the
stretch behind the windows. A random walk's is chance, and centred on it the view raised false
alarms on random walks and AR(1) series with phi = 0.9 at windows of 12-24 (the D of the windows
opposite to the chance slope). About 0, a trend counts as spread. ``D`` is a weighted sum of ``2n``
values, so the normal shape suits it where a rank statistic's bounded tail would not. Which
surrogates (:meth:`~ratiowatch.stream.calibration.null.NullCalibrator.calibrate_ar`):

* where an augmented Dickey-Fuller test (:func:`unit_root_rejected`) rejects a unit root in the
  levels held before the windows (at full windows ``NULL_POOL x n`` and more), AR surrogates of
  those levels around their trend line;
* otherwise the kernel score's own surrogates of the differences. An AR(<= 5) model of the first
  differences of a stationary smooth series cannot hold their spectral zero at frequency 0: its
  surrogates wander like a random walk, and their D spread 2-3 times as far as the data's (AR(1)
  with phi = 0.9, n = 24-48; the threshold stood above the step). For a random walk they are the
  right null, and surrogates of its levels far too narrow.

A test at 5 % takes a random walk for stationary in about 5 % of its calibrations; the pool of the
last ``NULL_POOL`` calibrations takes the RMS over all of them, so one narrow calibration among
wide ones barely moves the threshold, while at 1 % a stationary AR(1) with phi = 0.9 kept too
many wide ones (the test's power on 400 such values: 0.69 at 1 %). The threshold is also never
below the statistic's own RMS over the held levels: an AR model of a stretch that holds a cycle
or two cannot carry the cycle (see ``_calibrate_levels``). On the synthetic null suite
(``ratiowatch eval synthetic --streaming --seeds 10``) the two-window detector raised 45 false
alarms with the view as without it (0.25 per 10,000 samples; AR(1) with phi = 0.9: 2 -> 5,
random walks 4 -> 3).

:func:`level_diffs` is the reference (numpy, any batch shape); :func:`level_ratio` (one step) and
:func:`surrogate_level_diffs` (a calibration's surrogates) are its compiled forms, held equal by
tests.

Examples
--------
>>> levels = np.r_[np.zeros(10), np.ones(10)][:, None]  # a step of 1 between the two windows
>>> float(level_diffs(levels[:10], levels[10:])[0])
1.0
>>> d = np.diff(np.r_[0.0, levels[:, 0]])[:, None]  # the same windows as differences
>>> float(surrogate_level_diffs(d[None], 0, 10)[0, 0])
1.0
"""

from __future__ import annotations

import numpy as np
from numba import njit


def level_diffs(past: np.ndarray, cur: np.ndarray) -> np.ndarray:
    """Mean level of the current window minus that of the past window, per channel.

    ``past`` and ``cur`` have shape ``(..., n, m)`` (n levels of m channels, any leading batch
    shape); the result has shape ``(..., m)``.
    """
    past, cur = np.asarray(past, dtype=np.float64), np.asarray(cur, dtype=np.float64)
    if past.ndim < 2 or past.shape != cur.shape:
        raise ValueError(f"need windows of one shape (..., n, m); got {past.shape}, {cur.shape}")
    return cur.mean(axis=-2) - past.mean(axis=-2)


#: MacKinnon's (2010) response surface for the 5 % critical value of the Dickey-Fuller t statistic
#: with a constant and a trend: ``b0 + b1 / T + b2 / T^2``
ADF_CT_5PCT = (-3.41049, -4.3904, -9.036)


def adf_t_stat(x: np.ndarray) -> float:
    """The augmented Dickey-Fuller t statistic of ``x`` with a constant and a trend (NaN if undefined).

    The regression is ``dx_t = a + b t + (rho - 1) x_(t-1) + sum_i g_i dx_(t-i) + e_t`` with
    ``p = floor(4 (T / 100)^(1/4))`` lagged differences (Schwert's rule); the statistic is the
    t ratio of ``rho - 1``. NaN for fewer than 20 values, a value that is not finite or a degenerate
    regression (constant values).
    """
    x = np.asarray(x, dtype=np.float64).ravel()
    t_len = x.size
    if not np.isfinite(x).all():  # undefined (LAPACK would fail on it, and print to stderr)
        return float("nan")
    p = int(4 * (t_len / 100.0) ** 0.25)
    rows = t_len - p - 1
    if t_len < 20 or rows < p + 8:
        return float("nan")
    dx = np.diff(x)
    y = dx[p:]
    cols = [np.ones(rows), np.arange(rows, dtype=np.float64), x[p:-1]]
    cols += [dx[p - i:-i] for i in range(1, p + 1)]
    design = np.column_stack(cols)
    coef, _, rank, _ = np.linalg.lstsq(design, y, rcond=None)
    if rank < design.shape[1]:
        return float("nan")
    resid = y - design @ coef
    s2 = float(resid @ resid) / (rows - design.shape[1])
    if not s2 > 0.0:
        return float("nan")
    return float(coef[2] / np.sqrt(s2 * np.linalg.inv(design.T @ design)[2, 2]))


def unit_root_rejected(x: np.ndarray) -> bool:
    """Whether the augmented Dickey-Fuller test (:func:`adf_t_stat`) rejects a unit root in ``x`` at 5 %.

    The statistic is compared with MacKinnon's finite-sample critical value for the regression's
    ``T - p - 1`` rows. Where it is undefined (too few values, constant values) the unit root
    stands.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> unit_root_rejected(rng.normal(size=300).cumsum()), unit_root_rejected(rng.normal(size=300))
    (False, True)
    """
    stat = adf_t_stat(x)
    if not np.isfinite(stat):  # undefined: the critical value is not needed (and divides by 0 for T = 2)
        return False
    rows = np.asarray(x).size - int(4 * (np.asarray(x).size / 100.0) ** 0.25) - 1
    b0, b1, b2 = ADF_CT_5PCT
    return bool(stat < b0 + b1 / rows + b2 / rows ** 2)


@njit(cache=True)
def _weights(n):
    """The triangular filter ``w`` of the module docstring (2n weights)."""
    w = np.empty(2 * n)
    for j in range(1, 2 * n + 1):
        w[j - 1] = (j - 1) / n if j <= n else (2 * n + 1 - j) / n
    return w


@njit(cache=True)
def surrogate_level_diffs(sims, first, n):
    """D of each surrogate's differences ``first .. first + 2n - 1``: (count, T, m) -> (count, m)."""
    count, _, m = sims.shape
    w = _weights(n)
    out = np.zeros((count, m))
    for i in range(count):
        for j in range(2 * n):
            for c in range(m):
                out[i, c] += w[j] * sims[i, first + j, c]
    return out


@njit(cache=True)
def level_ratio(lv, n, scale, thr):
    """max over channels of ``|D| / thr``, D from the newest ``2n`` levels ``lv`` (2n, m)
    divided by ``scale`` (m): the compiled one-step form of :func:`level_diffs`."""
    m = lv.shape[1]
    best = 0.0
    for c in range(m):
        s = 0.0
        for i in range(n):
            s += lv[n + i, c] - lv[i, c]
        v = abs(s / (n * scale[c])) / thr[c]
        if v > best:
            best = v
    return best

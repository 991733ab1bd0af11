"""Causal preprocessing for change detection: missing values, differencing, robust scaling.

Why: on trending series the density ratio of raw levels saturates (every window differs from the
previous one), so the detector works on first differences by default; a level shift then shows as
a burst in the differences, a variance or correlation change as a change of their distribution.
Scaling is robust (median / MAD) so one outlier does not set the kernel scale.

Missing-value policy (documented for every detector built on this module):

* a value that is ``None`` or NaN is *missing*. The streaming detectors leave out a sample with
  every value missing, and one with some values missing for as long as their windows span: it
  counts as a time step but enters no window (carried forward, a gap is a run of one repeated
  value, which a kernel score takes for a change where it starts and where it ends). A value
  that reaches this module missing keeps its channel's last observed value, so its difference at
  that step is 0;
* until every channel has been observed once the sample is *held*: it produces no subsequence and
  no score, but it still counts as a time step (indices stay aligned with the input);
* infinite values are bad input (``ValueError``).

Gaps in time are not interpolated: the detector is indexed by samples. Insert NaN rows for missing
time steps when the time axis matters.

Examples
--------
>>> p = Differencer(dim=1)
>>> [p.step(np.array([v])) for v in [1.0, np.nan, 4.0]]
[None, array([0.]), array([3.])]
"""

from __future__ import annotations

import math

import numpy as np

from ratiowatch.core.kernels import constant_up_to_rounding


class Differencer:
    """Missing-value filling plus optional first differencing of an m-variate stream."""

    def __init__(self, dim: int, difference: bool = True):
        self.dim = int(dim)
        self.difference = bool(difference)
        self._last = np.full(self.dim, np.nan)  # last observed value per channel
        self._prev = np.full(self.dim, np.nan)  # last emitted level (for differencing)
        self._complete = False  # every channel observed at least once

    def step(self, v: np.ndarray) -> np.ndarray | None:
        """The preprocessed sample for input ``v`` (NaN = missing), or None while held."""
        if self.dim == 1 and not self.difference and self._complete and math.isfinite(v[0]):
            # the common streaming case (one observed value, levels): a numpy reduction and a
            # scalar isfinite cost ~2 us per sample, which is a tenth of the whole detector step
            self._last[0] = v[0]
            return self._last.copy()
        if np.isfinite(v.sum()):  # fast path: nothing missing (one reduction; an overflow takes the slow path)
            self._last[:] = v
            if not self._complete:
                self._complete = not np.isnan(self._last).any()
        else:
            if np.isinf(v).any():
                raise ValueError(f"infinite value in sample {v.tolist()}; pass NaN/None for missing values instead")
            obs = ~np.isnan(v)
            self._last[obs] = v[obs]
            self._complete = not np.isnan(self._last).any()
        if not self._complete:
            return None  # some channel never seen yet
        level = self._last.copy()
        if not self.difference:
            return level
        if np.any(np.isnan(self._prev)):
            self._prev = level
            return None  # the first complete sample has no difference
        out = level - self._prev
        self._prev = level
        return out

    @property
    def complete(self) -> bool:
        """Whether every channel has been observed at least once (no sample is held any more)."""
        return self._complete

    def to_state(self) -> dict:
        return {"dim": self.dim, "difference": self.difference, "last": self._last.copy(),
                "prev": self._prev.copy()}

    @classmethod
    def from_state(cls, state: dict) -> "Differencer":
        """Restore :meth:`to_state`'s dict; a ``ValueError`` naming the entry if ``dim`` is not an
        integer >= 1 or ``last`` / ``prev`` are not ``dim`` real numbers (NaN: never observed)."""
        dim = state["dim"]
        if isinstance(dim, (bool, np.bool_)) or not isinstance(dim, (int, np.integer)) or dim < 1:
            raise ValueError(f"Differencer state: 'dim' must be an integer >= 1; got {dim!r}")
        obj = cls(int(dim), bool(state["difference"]))
        for name in ("last", "prev"):
            arr = np.asarray(state[name])
            if arr.shape != (obj.dim,) or arr.dtype.kind not in "fiu" or np.isinf(arr).any():
                raise ValueError(f"Differencer state: {name!r} must hold {obj.dim} real numbers (NaN: not seen "
                                 f"yet); got shape {arr.shape}, dtype {arr.dtype}")
            setattr(obj, "_" + name, np.asarray(arr, dtype=np.float64).copy())
        obj._complete = not np.isnan(obj._last).any()
        return obj


def robust_scale(x: np.ndarray) -> np.ndarray:
    """Per-column scale: 1.4826 x MAD, falling back to the std, then to 1 for constant columns.

    "Constant" is relative to the column's level (a spread below 1e-12 x |median| is rounding
    noise), never absolute: data measured in small units (1e-13, say) keep their own scale.

    Examples
    --------
    >>> robust_scale(np.array([[0.0, 5.0], [1.0, 5.0], [2.0, 5.0]])).tolist()
    [1.4826, 1.0]
    >>> robust_scale(np.array([[0.0], [1e-13], [2e-13]])).tolist()
    [1.4826e-13]
    """
    x = np.asarray(x, dtype=np.float64)
    med = np.median(x, axis=0)
    floor = np.maximum(1e-12 * np.abs(med), np.finfo(np.float64).tiny)
    scale = 1.4826 * np.median(np.abs(x - med), axis=0)
    if not (scale > floor).all():  # the std only where the MAD is 0, computed without overflow near 1e300
        peak = np.abs(x - med).max(axis=0)
        unit = np.where(peak > 0, peak, 1.0)
        scale = np.where(scale > floor, scale, unit * ((x - med) / unit).std(axis=0))
    return np.where(scale > floor, scale, 1.0)


def fill_missing(x: np.ndarray) -> np.ndarray:
    """Offline counterpart of the policy above: carry the last value forward, back-fill the start.

    Examples
    --------
    >>> fill_missing(np.array([[np.nan], [1.0], [np.nan], [3.0]])).ravel().tolist()
    [1.0, 1.0, 1.0, 3.0]
    """
    x = np.array(x, dtype=np.float64)
    if x.ndim == 1:
        x = x[:, None]
    for j in range(x.shape[1]):
        col = x[:, j]
        ok = ~np.isnan(col)
        if not ok.any():
            col[:] = 0.0
            continue
        idx = np.where(ok, np.arange(len(col)), 0)
        np.maximum.accumulate(idx, out=idx)
        col[:] = col[idx]
        col[: np.argmax(ok)] = col[np.argmax(ok)]
    return x


def bridge_periodic_gaps(x: np.ndarray, rows: np.ndarray, period: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows to analyse across the gaps of a periodic series, so that its cycle keeps its phase.

    ``rows`` are the sorted indices of the rows of ``x`` (shape (T, m)) that are kept. Leaving a
    gap of ``g`` rows out shifts the cycle after it by ``g`` mod ``period`` samples, a jump of
    phase that the split profile takes for a change of shape (a sine of period 24 with 37 rows
    missing got a change point at the gap in 6 of 8 series). So each gap between two kept rows
    gives back its last ``g % period`` rows, each holding the row one period before it in the
    rows analysed (a seasonal carry forward): whole cycles are left out, the phase is kept. A gap
    with fewer than ``period`` rows analysed before it, and any gap when ``period`` is 0, is left
    out whole.

    Returns ``(indices, values, bridged)``: the input indices of the rows analysed (``rows`` and
    the rows given back, sorted), their values (the given-back ones filled) and a mask of the
    given-back rows.

    Examples
    --------
    >>> x = np.arange(10.0)[:, None] % 4
    >>> x[4:7] = np.nan  # a gap of 3 in a cycle of 4: the phase jumps by 3
    >>> idx, v, bridged = bridge_periodic_gaps(x, np.r_[0:4, 7:10], period=4)
    >>> idx.tolist(), v.ravel().tolist(), bridged.tolist()
    ([0, 1, 2, 3, 4, 5, 6, 7, 8, 9], [0.0, 1.0, 2.0, 3.0, 0.0, 1.0, 2.0, 3.0, 0.0, 1.0], [False, False, False, False, True, True, True, False, False, False])
    """
    rows = np.asarray(rows, dtype=np.int64)
    gap = np.diff(rows) - 1
    after = np.flatnonzero(gap > 0)  # the kept row each gap follows (position in rows)
    back = gap[after] % period if period > 0 else np.zeros(after.size, dtype=np.int64)
    # a gap needs a period of rows analysed before it; the kept rows alone decide it, since any
    # earlier gap that gives rows back has a period of kept rows before it already
    back = np.where(after + 1 >= period, back, 0)
    if not back.any():
        return rows, x[rows], np.zeros(rows.size, dtype=bool)
    given = np.concatenate([np.arange(rows[i + 1] - b, rows[i + 1]) for i, b in zip(after, back) if b])
    indices = np.concatenate((rows, given))
    order = np.argsort(indices, kind="stable")
    indices = indices[order]
    bridged = np.concatenate((np.zeros(rows.size, dtype=bool), np.ones(given.size, dtype=bool)))[order]
    values = x[indices].copy()
    # each run of given-back rows is shorter than a period: it copies rows before it, none of its own
    starts = np.flatnonzero(bridged & ~np.concatenate(([False], bridged[:-1])))
    for j, b in zip(starts, back[back > 0]):
        values[j:j + b] = values[j - period:j - period + b]
    return indices, values, bridged


#: robust standard deviations from the median beyond which a value is winsorised by
#: :func:`clip_unrepresentable`: the relative precision of float64 (2.2e-16) times this bound stays
#: far below one standard deviation, so centring a column by its mean keeps its ordinary values
UNREPRESENTABLE_SD = 1e8


def clip_unrepresentable(x: np.ndarray, far: float = UNREPRESENTABLE_SD) -> np.ndarray:
    """Each column of ``x`` (T, m) with values more than ``far`` robust standard deviations from
    its median winsorised at that distance; ``x`` itself when no value is that far.

    Why: one value such as 9.9e37 (an error code) among readings of order one sets a column's mean
    to about 9.9e37 / T, and centring by that mean rounds every ordinary reading to one number: the
    offline detector found none of three 4-sd level shifts after such a value, and the streaming
    split-profile detector none in the next 3,800 samples. Winsorised at 1e8 sd the value is as
    gross as ever (a value of 1e6 sd leaves every change found), and the ordinary readings keep
    their differences. The robust standard deviation is 1.4826 x MAD, or where more than half the
    values are equal, the median of the nonzero distances from the median.

    Examples
    --------
    >>> x = np.r_[np.zeros(5), 1.0, 1.0, 1.0, 9.9e37][:, None]
    >>> clip_unrepresentable(x).ravel().tolist()
    [0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 100000000.0]
    >>> y = np.arange(6.0)[:, None]
    >>> clip_unrepresentable(y) is y
    True
    """
    x = np.asarray(x)
    if x.ndim != 2:
        raise ValueError(f"x must have shape (T, m); got {x.shape} (pass a single series as x[:, None])")
    med = np.median(x, axis=0)
    dev = np.abs(x - med)
    peak = dev.max(axis=0)
    mad = np.median(dev, axis=0)
    # a cheap first look: nothing can be beyond the bound unless the largest deviation dwarfs the MAD
    if not np.any(peak > far * 1.4826 * mad):
        return x
    unit = 1.4826 * mad
    for j in np.flatnonzero(unit == 0):
        nonzero = dev[:, j][dev[:, j] > 0]
        unit[j] = np.median(nonzero) if nonzero.size else 0.0
    bound = far * unit
    if not np.any(peak > bound):
        return x
    return np.clip(x, med - bound, med + bound)


def standardise_columns(x: np.ndarray) -> np.ndarray:
    """Each column of ``x`` (T, m) centred and divided by its standard deviation; a column that is
    constant up to rounding (:func:`ratiowatch.core.kernels.constant_up_to_rounding`) becomes 0.

    Each column is divided by its largest magnitude first: the squares of values near 1e-300
    underflow and those near 1e300 overflow. A column whose values differ in the last bits only
    (0.1 + 0.2 and 0.3) would otherwise turn its rounding into a step of two standard deviations.
    An exactly constant column keeps one value in every row, as before the rounding rule.

    Examples
    --------
    >>> standardise_columns(np.array([[0.0, 0.1 + 0.2], [2.0, 0.3]])).tolist()
    [[-1.0, 0.0], [1.0, 0.0]]
    """
    x = np.asarray(x, dtype=np.float64)
    big = np.abs(x).max(axis=0)
    x = x / np.where(big > 0, big, 1.0)
    sd = x.std(axis=0)
    z = (x - x.mean(axis=0)) / np.where(sd > 0, sd, 1.0)
    flat = [j for j in np.flatnonzero(sd > 0) if constant_up_to_rounding(np.ascontiguousarray(x[:, j:j + 1]))]
    if flat:
        z[:, flat] = 0.0
    return z

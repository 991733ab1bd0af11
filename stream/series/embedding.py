"""Subsequence embedding over a fixed-size ring buffer.

The change detector compares sets of subsequences ``Y(t) = [y(t-k+1), ..., y(t)]`` (the *causal*
form of Liu et al.'s ``[y(t), ..., y(t+k-1)]``: the subsequence is indexed by its newest sample, so
it exists as soon as that sample arrives). :class:`History` keeps the last ``capacity`` samples of an
m-variate series in a preallocated ring, so memory does not grow with the stream, and hands out the
latest subsequence or the whole embedded history (to rebuild a window state).

Examples
--------
>>> h = History(capacity=5, dim=1)
>>> for v in [1.0, 2.0, 3.0]:
...     h.push([v])
>>> h.subsequence(2).tolist()
[2.0, 3.0]
>>> embed(np.arange(4.0)[:, None], 2).tolist()
[[0.0, 1.0], [1.0, 2.0], [2.0, 3.0]]
"""

from __future__ import annotations

import numpy as np


def embed(x: np.ndarray, k: int) -> np.ndarray:
    """Rows ``[x[j], ..., x[j+k-1]]`` flattened (time-major), shape ``(len(x) - k + 1, k * m)``."""
    x = np.asarray(x, dtype=np.float64)
    if x.ndim == 1:
        x = x[:, None]
    t, m = x.shape
    if k < 1:
        raise ValueError(f"k (the subsequence length) must be >= 1; got k={k}")
    if t < k:
        raise ValueError(f"need at least k={k} samples to embed subsequences; got {t}")
    win = np.lib.stride_tricks.sliding_window_view(x, (k, m))[:, 0]  # (t-k+1, k, m)
    return np.ascontiguousarray(win.reshape(t - k + 1, k * m))


class History:
    """Ring buffer of the last ``capacity`` samples (each of ``dim`` values), oldest first on read."""

    def __init__(self, capacity: int, dim: int):
        if int(capacity) < 1 or int(dim) < 1:
            raise ValueError(f"capacity and dim must be >= 1; got capacity={capacity}, dim={dim}")
        self.capacity, self.dim = int(capacity), int(dim)
        # every sample is written twice (slots i and i + capacity), so the newest m samples are
        # always one contiguous slice: no modulo index arithmetic on the per-sample path
        self._buf = np.zeros((2 * self.capacity, self.dim))
        self._head = 0  # next slot to write
        self._count = 0  # samples pushed in total

    def __len__(self) -> int:
        return min(self._count, self.capacity)

    @property
    def count(self) -> int:
        """Samples pushed since creation (not capped)."""
        return self._count

    def push(self, y) -> None:
        """Append one sample (overwrites the oldest one when full)."""
        self._buf[self._head] = y
        self._buf[self._head + self.capacity] = y
        self._head = (self._head + 1) % self.capacity
        self._count += 1

    def last(self, m: int) -> np.ndarray:
        """The newest ``m`` samples in time order, shape (m, dim) (a copy)."""
        if m > len(self):
            raise ValueError(f"only {len(self)} samples held; asked for {m}")
        end = self._head + self.capacity
        return self._buf[end - m:end].copy()

    def last_view(self, m: int) -> np.ndarray:
        """The newest ``m`` samples as a view into the ring (no copy; valid until the next push).

        For the per-sample path, where the caller derives a new array at once (the copy and
        the bounds check of :meth:`last` are a noticeable share of a ~20 us detector step).
        """
        end = self._head + self.capacity
        return self._buf[end - m:end]

    def subsequence(self, k: int) -> np.ndarray:
        """The newest subsequence of length ``k`` flattened to shape (k * dim,)."""
        return self.last(k).reshape(-1)

    def to_state(self) -> dict:
        """Arrays and ints only (checkpointable as ``.npz`` + JSON)."""
        return {"capacity": self.capacity, "dim": self.dim, "buf": self._buf[:self.capacity].copy(), "head": self._head,
                "count": self._count}

    @classmethod
    def from_state(cls, state: dict) -> "History":
        """Restore :meth:`to_state`'s dict; a ``ValueError`` naming the entry if a size, the
        buffer's shape, the write position (in ``[0, capacity)``) or the count (``>= 0``, and equal
        to the position modulo the capacity) is out of place, or a slot holding a sample (the first
        ``count`` ones, every one once the ring is full) holds NaN or infinity."""
        def integer(name, low):
            v = state[name]
            if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)) or v < low:
                raise ValueError(f"history state: {name!r} must be an integer >= {low}; got {v!r}")
            return int(v)

        obj = cls(integer("capacity", 1), integer("dim", 1))
        buf = np.asarray(state["buf"])
        if buf.shape != (obj.capacity, obj.dim) or buf.dtype.kind not in "fiu":
            raise ValueError(f"history buffer has shape {buf.shape} and dtype {buf.dtype}, expected real numbers "
                             f"of shape {(obj.capacity, obj.dim)}")
        buf = np.asarray(buf, dtype=np.float64)
        head, count = integer("head", 0), integer("count", 0)
        if head >= obj.capacity or head != count % obj.capacity:
            raise ValueError(f"history state: 'head' is {head}, but {count} samples pushed into a ring of "
                             f"{obj.capacity} put it at {count % obj.capacity}")
        # the slots written so far (all of them once the ring is full) hold samples, which are
        # finite; a NaN there would surface far later, as a failed fit on the windows it entered
        held = buf[:min(count, obj.capacity)]
        if not np.isfinite(held).all():
            slot = int(np.flatnonzero(~np.isfinite(held).all(axis=1))[0])
            raise ValueError(f"history state: 'buf' holds NaN or infinite values among its {held.shape[0]} "
                             f"samples (first in slot {slot}); every sample held is finite")
        obj._buf[:obj.capacity] = buf
        obj._buf[obj.capacity:] = buf
        obj._head, obj._count = head, count
        return obj

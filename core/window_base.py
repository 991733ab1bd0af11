"""The ring of ``2n`` samples behind every two-window estimator state.

The oldest ``n`` samples form the *past* window and the newest ``n`` the *current* one. Subclasses
(:class:`ratiowatch.core.window.TwoWindowRuLSIF`, :class:`ratiowatch.core.kliep_window.TwoWindowKLIEP`,
:class:`ratiowatch.core.lsdd_window.TwoWindowLSDD`) own ``_ring`` (shape (2n, dim)), ``_head`` (slot of the
oldest sample once full) and ``_count``, and maintain their estimator's sums incrementally; this
class holds what they share: sample validation, readiness and access to the windows in time order.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

from .params import check_int


def check_window_sizes(dim, n, refresh_every) -> tuple[int, int, int]:
    """``(dim, n, refresh_every)`` of a two-window state as ``int`` s: integers (a float such as
    ``n=2.7`` is refused, not truncated) with ``dim >= 1``, ``n >= 2`` and ``refresh_every >= 1``.

    >>> check_window_sizes(3, 50, 256)
    (3, 50, 256)
    """
    dim, n = check_int(dim, "dim"), check_int(n, "n (samples per window)")
    refresh_every = check_int(refresh_every, "refresh_every")
    if dim < 1:
        raise ValueError(f"dim must be >= 1; got {dim}")
    if n < 2:
        raise ValueError(f"n (samples per window) must be >= 2; got {n}")
    if refresh_every < 1:
        raise ValueError(f"refresh_every must be >= 1; got {refresh_every}")
    return dim, n, refresh_every


@runtime_checkable
class TwoWindowState(Protocol):
    """The interface every two-window state meets (RuLSIF/uLSIF, KLIEP, LSDD): what the change-point
    detector and its calibrator use, so that neither needs to know which estimator it drives.

    ``scores()`` returns the divergence of the current window from the past one and the reverse
    direction; ``lam`` is the ridge (0.0 for KLIEP, which has none).
    """

    dim: int
    n: int
    sigma: float
    lam: float

    @property
    def ready(self) -> bool: ...

    def push(self, y) -> None: ...

    def push_many(self, rows) -> np.ndarray | None: ...

    def scores(self) -> tuple[float, float]: ...

    def past(self) -> np.ndarray: ...

    def current(self) -> np.ndarray: ...

    def set_params(self, sigma: float, lam: float) -> None: ...

    def to_state(self) -> dict: ...


class SlidingWindowPair:
    """Shared plumbing of the two-window states (see the module docstring)."""

    dim: int
    n: int
    refresh_every: int
    _ring: np.ndarray
    _head: int
    _count: int
    _since_refresh: int

    @property
    def ready(self) -> bool:
        """True once both windows are full (2n pushes)."""
        return self._count >= 2 * self.n

    @property
    def count(self) -> int:
        """Number of samples pushed so far."""
        return self._count

    def _as_sample(self, y) -> np.ndarray:
        """``y`` as a finite float64 vector of length ``dim``, or a ``ValueError`` (state untouched)."""
        if not (isinstance(y, np.ndarray) and y.dtype == np.float64 and y.ndim == 1):
            y = np.asarray(y, dtype=np.float64).reshape(-1)
        if y.shape[0] != self.dim:
            raise ValueError(f"sample has {y.shape[0]} values but the windows hold dim={self.dim}")
        # one reduction instead of a boolean array per sample; a sum of finite values can still
        # overflow (1e308 + 1e308), so only an element-wise look decides a refusal
        if not np.isfinite(y.sum()) and not np.isfinite(y).all():
            raise ValueError("sample contains NaN or infinity; the detector's missing-value policy must handle it")
        return y

    def _as_rows(self, rows) -> np.ndarray:
        """``rows`` as a float64 array of shape (m, dim) with finite values, or a ``ValueError``
        naming the first bad row (for :meth:`push_many`, which then pushes nothing)."""
        rows = np.asarray(rows, dtype=np.float64)
        if rows.ndim == 1 and self.dim == 1:
            rows = rows[:, None]
        if rows.ndim != 2 or rows.shape[1] != self.dim:
            raise ValueError(f"rows must have shape (m, {self.dim}); got {rows.shape}")
        finite = np.isfinite(rows).all(axis=1)
        if not finite.all():
            raise ValueError(f"row {int(np.argmin(finite))} contains NaN or infinity; nothing was pushed")
        return rows

    def _require_ready(self) -> None:
        if not self.ready:
            raise ValueError(f"windows not full yet: {self._count} of {2 * self.n} samples pushed")

    def _order(self) -> np.ndarray:
        """Slots in time order: the past window (oldest first), then the current one."""
        return (self._head + np.arange(2 * self.n)) % (2 * self.n)

    def _slots(self) -> tuple[np.ndarray, np.ndarray]:
        order = self._order()
        return order[: self.n], order[self.n:]

    def past(self) -> np.ndarray:
        """The past window, oldest first, shape (n, dim)."""
        self._require_ready()
        return self._ring[self._slots()[0]].copy()

    def current(self) -> np.ndarray:
        """The current window, oldest first, shape (n, dim)."""
        self._require_ready()
        return self._ring[self._slots()[1]].copy()

    def push_many(self, rows) -> np.ndarray | None:
        """Push every row of ``rows`` (shape (m, dim)) in order, as :meth:`push` one row at a time.

        Rows are validated first; on a bad row nothing is pushed. The rows that fill the windows
        are stored at once and the state is built once, when both are full (a fresh state given its
        2n rows costs one build, not 2n Python calls); the rest slide one at a time. States with a
        compiled loop override this (and return the scores after each push).
        """
        rows = self._as_rows(rows)
        size = 2 * self.n
        fill = min(max(size - self._count, 0), rows.shape[0])
        if fill:
            self._ring[self._count: self._count + fill] = rows[:fill]
            self._count += fill
            if self._count == size:
                self._rebuild()
        for row in rows[fill:]:
            self.push(row)
        return None

    def push_scores(self, y) -> tuple[float, float] | None:
        """:meth:`push` then :meth:`scores` (None while the windows are still filling)."""
        self.push(y)
        return self.scores() if self.ready else None

    def push(self, y) -> None:
        """Slide the windows by one sample ``y`` (shape (dim,), finite).

        Template for states that build everything once both windows are full: subclasses provide
        ``_rebuild()`` (full build from the ring), ``_slide(y)`` (one O(n^2) update, returns the new
        head) and ``_refresh_sums()`` (periodic recomputation that bounds rounding drift).
        """
        y = self._as_sample(y)
        size = 2 * self.n
        if self._count < size:
            # filling: store in order; the state is built once, when both windows are full
            self._ring[self._count] = y
            self._count += 1
            if self._count == size:
                self._rebuild()
            return
        self._head = self._slide(y)
        self._count += 1
        self._since_refresh += 1
        if self._since_refresh >= self.refresh_every:
            self._refresh_sums()
            self._since_refresh = 0

"""Incremental two-window KLIEP state for change-point scoring.

Same ring as :mod:`ratiowatch.core.lsdd_window`: the last ``2n`` samples in ``2n`` slots, the oldest ``n`` are
the *past* window, the newest ``n`` the *current* one, with the Gram matrix ``G`` over all slots and
the kernel sums ``p[a] = sum_{i in past} G[i, a]``, ``q[a] = sum_{j in current} G[j, a]`` maintained
per push in O(n d). Two KLIEP problems share them (centres follow the windows: the numerator window's
samples are the centres, as in the batch fit with ``b = n``)::

    KL(past || current):  A = G[past, past],       b = q[past] / n
    KL(current || past):  A = G[current, current], b = p[current] / n

:meth:`TwoWindowKLIEP.scores` runs the projected gradient ascent of :func:`ratiowatch.core.kliep.kliep_ascent`
warm-started from the previous coefficients (a slot that joined a problem since the last solve
starts at the mean of the others), with ``warm_iter`` steps per step size; the first solve after the
windows fill (and every solve after :meth:`set_params`, or every solve with ``warm_start=False``) is a
cold start with the batch settings, so it reproduces :func:`ratiowatch.core.kliep.fit_kliep` on the same windows.
Each score is ``mean log r`` over the numerator window (floored logs).

Windows out of kernel reach of each other (every kernel value between them underflows to 0) leave
``b = 0``: no ratio meets ``mean_de r = 1``, and KL(p || q) is infinite where q has no mass at p's
samples. That is the largest change the windows can show, not an error, and both scores are then
:data:`KL_NO_OVERLAP`, a finite ceiling (so thresholds, ``exceeds`` and score histories take it like
any other score). Only a sigma below every pairwise distance (no kernel mass between any two samples,
within a window or between them) is refused, with a :class:`NoKernelMassError` (a ``ValueError``).

The kernel sums are updated by additions and subtractions, which leave residues of ~1e-14 of either
sign where every term is 0; a rebuild gives exact zeros. Every push re-sums the sums within the
rounding bound of 0 (:func:`ratiowatch.core.gram_ring.resum_small`), so the "no overlap" decision and
tiny sums are the rebuild's, bit for bit, whatever the number of pushes since the last refresh.

The ascent stops short of the optimum (accept-if-improving steps on a fixed step schedule, as in the
reference code), so warm and cold solves differ by that optimisation error, not by rounding. Measured
on N(0, I) streams with a 0.7 mean shift, sigma = median distance, scores every step: warm minus cold
has mean ~0 and range [-0.031, 0.039] for n = 10, d = 2; [-0.005, 0.011] for n = 20, d = 5;
[-0.001, 0.0004] for n = 50, d = 10 (KL values ~0.1-1). Warm solves cost about 0.7x a cold one.
"""

from __future__ import annotations

import numpy as np

from numba import njit

from .gram_ring import fill_gram, pair_sq_dists, resum_small, slide_gram, sum_tolerance, window_sums
from .kernels import check_width
from .kliep import EPS_SCHEDULE, LOG_FLOOR_VALUE, MAX_ITER, kliep_ascent
from .params import check_int
from .window_base import SlidingWindowPair, check_window_sizes

_STATE_VERSION = 1

#: both scores of windows with no kernel mass between them: ``-log(LOG_FLOOR_VALUE)`` (~690.8), the
#: mirror of the log floor (a numerator point out of reach of every centre scores ``log(1e-300)``;
#: here every numerator point is out of reach of every denominator point, a ratio of "1e300").
#: Finite, so that ``exceeds``, ``_ratio``, the score history (median / MAD) and the threshold
#: pools of the detector take it (+inf fails ``exceeds``, so a maximal change would never alarm; NaN
#: would be dropped). Far above what windows that still overlap score: at most ~10 in the step
#: before the windows separate on a stream of N(0, I) with a shift (n = 50, d = 3, a 40-sd shift at sigma 1.5;
#: tests/core/test_kliep_window.py), and any nonzero kernel value is at least exp(-230) (the flush
#: level of :mod:`ratiowatch.core.kernels`).
KL_NO_OVERLAP = float(-np.log(LOG_FLOOR_VALUE))


class NoKernelMassError(ValueError):
    """Raised by :meth:`TwoWindowKLIEP.scores` when sigma is below every pairwise distance of the
    windows' samples (only the kernel's unit diagonal survives): no ratio can be fitted.

    A caller that scores draws of its own making rather than data (the detector's null, whose AR
    surrogates of values around one gross value can spread that far) may take such a draw as
    windows that share no kernel mass, :data:`KL_NO_OVERLAP` in both directions.
    """


@njit(cache=True)
def _solve_direction(gram, vec_den, idx, alpha_slots, fresh, n, eps_schedule, max_iter, floor):
    """KLIEP with numerator/centre slots ``idx``; updates ``alpha_slots`` there. Returns the score.

    Returns +inf when every denominator kernel sum is exactly 0 (no kernel mass between the windows;
    the caller decides what that means); the coefficients there are then reset to the cold start's 1
    and marked fresh.
    """
    a = np.empty((n, n))
    bvec = np.empty(n)
    alpha0 = np.empty(n)
    bb = 0.0
    total = 0.0
    kept = 0
    for r in range(n):
        ir = idx[r]
        bvec[r] = vec_den[ir] / n
        bb += bvec[r] * bvec[r]
        for c in range(n):
            a[r, c] = gram[ir, idx[c]]
        if not fresh[ir]:
            total += alpha_slots[ir]
            kept += 1
    if not (bb > 0.0):  # exact: the sums are re-summed near 0 (resum_small), so 0 means no term
        for r in range(n):
            alpha_slots[idx[r]] = 1.0
            fresh[idx[r]] = True
        return np.inf
    start = total / kept if kept > 0 else 1.0
    for r in range(n):
        ir = idx[r]
        alpha0[r] = alpha_slots[ir] if not fresh[ir] else start
    alpha, score = kliep_ascent(a, bvec, alpha0, eps_schedule, max_iter, floor)
    for r in range(n):
        alpha_slots[idx[r]] = alpha[r]
        fresh[idx[r]] = False
    return score


class TwoWindowKLIEP(SlidingWindowPair):
    """Past and current windows of ``n`` samples with warm-started KLIEP fits in both directions.

    Parameters
    ----------
    dim : int
        Dimension of each sample.
    n : int
        Samples per window (>= 2); the numerator window's samples are the centres.
    sigma : float
        Kernel width, fixed until :meth:`set_params`.
    warm_start : bool, default False
        False (default): every solve is a cold start with the batch settings, so the incremental
        state is the batch fit of its windows and the scores equal
        :func:`ratiowatch.core.kliep.fit_kliep` on the same windows. True: each solve continues from
        the previous coefficients with ``warm_iter`` steps per step size (about 1.2x cheaper; differs
        from the batch fit by the iteration's stopping error, below 0.001 in KL at n = 50, d = 10).
    warm_iter : int
        Steps per step size of a warm-started solve (the cold start uses the batch ``MAX_ITER``).
    refresh_every : int
        Rebuild the kernel sums from the Gram matrix after this many pushes.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> st = TwoWindowKLIEP(dim=1, n=20, sigma=0.5)
    >>> for v in rng.normal(size=40):
    ...     st.push(np.array([v]))
    >>> quiet = sum(st.scores())
    >>> for v in rng.normal(4.0, 1.0, size=20):
    ...     st.push(np.array([v]))
    >>> sum(st.scores()) > quiet
    True
    """

    def __init__(self, dim: int, n: int, sigma: float, *, warm_start: bool = False, warm_iter: int = 10,
                 refresh_every: int = 256, eps_schedule=EPS_SCHEDULE):
        dim, n, refresh_every = check_window_sizes(dim, n, refresh_every)
        if check_int(warm_iter, "warm_iter") < 1:
            raise ValueError(f"warm_iter must be >= 1; got {warm_iter}")
        self._check_sigma(sigma)
        eps = np.atleast_1d(np.asarray(eps_schedule, dtype=np.float64))
        if eps.ndim != 1 or eps.size == 0 or not np.all(np.isfinite(eps)) or np.any(eps <= 0):
            raise ValueError(f"eps_schedule must be a non-empty sequence of positive numbers; got {eps_schedule}")
        self.dim, self.n = int(dim), int(n)
        self.sigma = float(sigma)
        self.lam = 0.0  # KLIEP has no ridge; kept so every two-window state offers the same attributes
        self.warm_start = bool(warm_start)
        self.warm_iter, self.refresh_every = int(warm_iter), int(refresh_every)
        self.eps_schedule = eps
        size = 2 * self.n
        self._ring = np.zeros((size, self.dim))
        self._gram = np.zeros((size, size))
        self._vec_p = np.zeros(size)
        self._vec_q = np.zeros(size)
        self._d2_row = np.empty(size)  # scratch of slide_gram
        self._alpha_p = np.ones(size)   # coefficients of KL(past || current), valid on past slots
        self._alpha_c = np.ones(size)   # coefficients of KL(current || past), valid on current slots
        self._fresh_p = np.ones(size, dtype=np.bool_)
        self._fresh_c = np.ones(size, dtype=np.bool_)
        self._cold = True
        self._head = 0
        self._count = 0
        self._since_refresh = 0

    @staticmethod
    def _check_sigma(sigma):
        check_width(sigma)

    def _slide(self, y: np.ndarray) -> int:
        size = 2 * self.n
        slot, mid = self._head, (self._head + self.n) % size
        self._fresh_p[mid] = True   # joins the past problem
        self._fresh_c[slot] = True  # the new sample joins the current problem
        head = slide_gram(self._ring, self._gram, self._vec_p, self._vec_q, self._head, self.n, y, self.sigma,
                           self._d2_row)
        self._resum_small(head, self._since_refresh + 1)
        return head

    def _resum_small(self, head: int, pushes: int) -> None:
        """Sums within rounding of 0 re-summed exactly (see the module docstring)."""
        resum_small(self._gram, self._vec_p, self._vec_q, head, self.n, sum_tolerance(self.n, pushes))

    def _refresh_sums(self) -> None:
        window_sums(self._gram, self._vec_p, self._vec_q, self._head, self.n)

    def _rebuild(self) -> None:
        d2 = np.empty_like(self._gram)
        pair_sq_dists(self._ring, d2)
        fill_gram(d2, self.sigma, self._gram)
        window_sums(self._gram, self._vec_p, self._vec_q, self._head, self.n)
        self._since_refresh = 0

    def refresh(self) -> None:
        """Recompute the Gram matrix and kernel sums from the stored samples (keeps the warm start)."""
        if self.ready:
            self._rebuild()





    def scores(self) -> tuple[float, float]:
        """``(KL(past || current), KL(current || past))``: ``mean log r`` over the numerator window.

        Windows with no kernel mass between them score :data:`KL_NO_OVERLAP` in both directions (a
        maximal change; the incremental state and a rebuild agree on it exactly). Raises
        ``ValueError`` only when sigma is below every pairwise distance of the samples (every kernel
        value off the diagonal underflows, within the windows too).
        """
        self._require_ready()
        past, cur = self._slots()
        if self._cold or not self.warm_start:
            self._fresh_p[:] = True
            self._fresh_c[:] = True
            iters = MAX_ITER
        else:
            iters = self.warm_iter
        kl1 = _solve_direction(self._gram, self._vec_q, past, self._alpha_p, self._fresh_p, self.n,
                               self.eps_schedule, iters, LOG_FLOOR_VALUE)
        kl2 = _solve_direction(self._gram, self._vec_p, cur, self._alpha_c, self._fresh_c, self.n,
                               self.eps_schedule, iters, LOG_FLOOR_VALUE)
        if kl1 == np.inf or kl2 == np.inf:  # no kernel mass between the windows (exact, see _slide)
            if np.count_nonzero(self._gram) == 2 * self.n:  # only the unit diagonal survives
                raise NoKernelMassError(f"sigma={self.sigma:g} is too small for these windows: every kernel value "
                                 "between any two samples underflows to 0; use a larger sigma")
            self._cold = True  # no coefficients to warm-start from
            return (KL_NO_OVERLAP if kl1 == np.inf else float(kl1),
                    KL_NO_OVERLAP if kl2 == np.inf else float(kl2))
        if not (np.isfinite(kl1) and np.isfinite(kl2)):  # not expected: the ascent rejects NaN steps
            raise ValueError(f"the KLIEP solve gave a non-finite score ({kl1}, {kl2})")
        self._cold = False
        return float(kl1), float(kl2)

    def coefficients(self) -> tuple[np.ndarray, np.ndarray]:
        """Coefficients of the last solve for :meth:`past` and :meth:`current` centres (time order)."""
        past, cur = self._slots()
        return self._alpha_p[past].copy(), self._alpha_c[cur].copy()

    def set_params(self, sigma: float, lam: float | None = None) -> None:
        """Change sigma; rebuilds the state and cold-starts the next solve.

        ``lam`` is accepted (and ignored: KLIEP has no ridge) so that a detector can drive every
        two-window state through the same ``set_params(sigma, lam)`` call.
        """
        self._check_sigma(sigma)
        self.sigma = float(sigma)
        self._cold = True
        self.refresh()

    def to_state(self) -> dict:
        """Plain arrays and scalars (for ``.npz`` + JSON checkpoints; no pickle)."""
        return {
            "version": _STATE_VERSION, "dim": self.dim, "n": self.n, "sigma": self.sigma,
            "warm_start": int(self.warm_start), "warm_iter": self.warm_iter, "refresh_every": self.refresh_every,
            "eps_schedule": self.eps_schedule.copy(), "head": self._head, "count": self._count,
            "since_refresh": self._since_refresh, "cold": int(self._cold), "ring": self._ring.copy(),
            "gram": self._gram.copy(), "vec_p": self._vec_p.copy(), "vec_q": self._vec_q.copy(),
            "alpha_p": self._alpha_p.copy(), "alpha_c": self._alpha_c.copy(),
            "fresh_p": self._fresh_p.astype(np.int8), "fresh_c": self._fresh_c.astype(np.int8),
        }

    @classmethod
    def from_state(cls, state: dict) -> "TwoWindowKLIEP":
        """Restore an object saved by :meth:`to_state`; continues bit-for-bit where it stopped."""
        version = int(state["version"])
        if version != _STATE_VERSION:
            raise ValueError(f"unsupported TwoWindowKLIEP state version {version} (expected {_STATE_VERSION})")
        obj = cls(int(state["dim"]), int(state["n"]), float(state["sigma"]),
                  warm_start=bool(int(state["warm_start"])), warm_iter=int(state["warm_iter"]),
                  refresh_every=int(state["refresh_every"]), eps_schedule=np.asarray(state["eps_schedule"]))
        obj._head, obj._count = int(state["head"]), int(state["count"])
        obj._since_refresh, obj._cold = int(state["since_refresh"]), bool(int(state["cold"]))
        size = 2 * obj.n
        if not (0 <= obj._head < size) or obj._count < 0:
            raise ValueError(f"state has head={obj._head}, count={obj._count}: outside the ring of {size}")
        if not 0 <= obj._since_refresh < obj.refresh_every:
            raise ValueError(f"state has since_refresh={obj._since_refresh}; expected 0 <= since_refresh < "
                             f"refresh_every={obj.refresh_every}")
        for name, shape in (("ring", (size, obj.dim)), ("gram", (size, size)), ("vec_p", (size,)),
                            ("vec_q", (size,)), ("alpha_p", (size,)), ("alpha_c", (size,))):
            arr = np.asarray(state[name], dtype=np.float64)
            if arr.shape != shape:
                raise ValueError(f"state field {name!r} has shape {arr.shape}, expected {shape}")
            if not np.all(np.isfinite(arr)):
                raise ValueError(f"state field {name!r} holds NaN or infinity")
            setattr(obj, "_" + name, arr.copy())
        for name in ("fresh_p", "fresh_c"):
            arr = np.asarray(state[name])
            if arr.shape != (size,):
                raise ValueError(f"state field {name!r} has shape {arr.shape}, expected {(size,)}")
            setattr(obj, "_" + name, arr.astype(np.bool_))
        if obj.ready:  # a checkpoint from before the re-summing may hold residues; idempotent otherwise
            obj._resum_small(obj._head, obj._since_refresh)
        return obj

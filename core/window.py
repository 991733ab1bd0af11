"""Incremental two-window RuLSIF state for change-point scoring.

The last ``2n`` samples live in a ring of ``2n`` slots: the oldest ``n`` form the *past* window, the
newest ``n`` the *current* one. Every window sample is also a kernel centre (past samples for the
past-vs-current ratio, current samples for the reverse one, b = n as in Liu et al. 2013), so one
Gram matrix ``G`` over the ring serves both directions. Two accumulators over all slots::

    P[a, b] = sum_{i in past}    G[i, a] G[i, b]        Q[a, b] = sum_{j in current} G[j, a] G[j, b]
    p[a]    = sum_{i in past}    G[i, a]                q[a]    = sum_{j in current} G[j, a]

give every H and h needed: for past-vs-current ``H = a/n P[past, past] + (1-a)/n Q[past, past]`` and
``h = p[past]/n``; for current-vs-past the roles of (P, p) and (Q, q) swap on the current slots.

A push moves one sample out of the past, one from current to past and one new sample in: three
symmetric rank-one updates plus the recomputation of the overwritten slot's column, O(n^2), then one
Cholesky solve of size n per direction. The accumulators are rebuilt from ``G`` every
``refresh_every`` pushes so rounding drift stays bounded.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .kernels import FLUSH_EXPONENT, gauss_kernel
from .linalg import cholesky_solve
from .validation import check_alpha
from .window_base import SlidingWindowPair

_STATE_VERSION = 1


@njit(cache=True, fastmath=True)
def _rank1(acc, vec, sign):
    # full rows rather than one triangle: contiguous and vectorisable, and the matrix stays symmetric
    m = vec.shape[0]
    for a in range(m):
        va = sign * vec[a]
        if va != 0.0:
            row = acc[a]
            for b in range(m):
                row[b] += va * vec[b]


@njit(cache=True, fastmath=True)
def _push(ring, gram, acc_p, acc_q, vec_p, vec_q, head, count, n, y, sigma):
    """Insert ``y`` into the ring; ``head`` is the slot of the oldest sample. Returns the new head."""
    size = 2 * n
    g = -0.5 / (sigma * sigma)
    if count < size:
        slot = count  # filling phase: slots are used in order, nothing leaves
    else:
        slot = head
        # the oldest past sample leaves
        _rank1(acc_p, gram[slot], -1.0)
        vec_p -= gram[slot]
        # the oldest current sample (n slots after the head) becomes past
        mid = (head + n) % size
        _rank1(acc_q, gram[mid], -1.0)
        vec_q -= gram[mid]
        _rank1(acc_p, gram[mid], 1.0)
        vec_p += gram[mid]
    ring[slot] = y
    filled = min(count + 1, size)
    for s in range(size):
        if s == slot:
            gram[slot, slot] = 1.0
        elif s < filled or count >= size:
            d2 = 0.0
            for k in range(y.shape[0]):
                diff = ring[s, k] - y[k]
                d2 += diff * diff
            e = g * d2
            v = np.exp(e) if e > FLUSH_EXPONENT else 0.0
            gram[slot, s] = v
            gram[s, slot] = v
        else:
            gram[slot, s] = 0.0
            gram[s, slot] = 0.0
    # column ``slot`` of the accumulators changed for every member: recompute it from the members
    # other than the new sample (whose own rank-one term is added below)
    if count >= size:
        past0 = (slot + 1) % size  # after the overwrite the oldest sample sits right after ``slot``
        n_past = n
        n_cur = n - 1
        cur0 = (past0 + n) % size
        head = (slot + 1) % size
    else:
        # filling: slots 0..n-1 are the past, n..2n-1 the current window, used in order
        past0 = 0
        n_past = min(count, n)
        cur0 = n
        n_cur = max(count - n, 0)
    col_p = np.zeros(size)
    col_q = np.zeros(size)
    sp = 0.0
    sq = 0.0
    for t in range(n_past):
        i = (past0 + t) % size
        w = gram[i, slot]
        sp += w
        row = gram[i]
        for a in range(size):
            col_p[a] += w * row[a]
    for t in range(n_cur):
        j = (cur0 + t) % size
        w = gram[j, slot]
        sq += w
        row = gram[j]
        for a in range(size):
            col_q[a] += w * row[a]
    for a in range(size):
        acc_p[a, slot] = col_p[a]
        acc_p[slot, a] = col_p[a]
        acc_q[a, slot] = col_q[a]
        acc_q[slot, a] = col_q[a]
    vec_p[slot] = sp
    vec_q[slot] = sq
    # the new sample joins the current window (during filling, the first n samples are the past)
    if count >= size or count >= n:
        _rank1(acc_q, gram[slot], 1.0)
        vec_q += gram[slot]
    else:
        _rank1(acc_p, gram[slot], 1.0)
        vec_p += gram[slot]
    return head


@njit(cache=True, fastmath=True)
def _rebuild(gram, acc_p, acc_q, vec_p, vec_q, head, n):
    size = 2 * n
    acc_p[:, :] = 0.0
    acc_q[:, :] = 0.0
    vec_p[:] = 0.0
    vec_q[:] = 0.0
    for t in range(n):
        i = (head + t) % size
        j = (head + n + t) % size
        _rank1(acc_p, gram[i], 1.0)
        _rank1(acc_q, gram[j], 1.0)
        vec_p += gram[i]
        vec_q += gram[j]


@njit(cache=True, fastmath=True)
def _direction(acc_num, acc_den, vec_num, idx, n, alpha, lam, clip):
    """PE-hat_alpha with centres = numerator window slots ``idx``; returns (pe, theta)."""
    h_mat = np.empty((n, n))
    h = np.empty(n)
    for a in range(n):
        ia = idx[a]
        h[a] = vec_num[ia] / n
        for b in range(n):
            ib = idx[b]
            h_mat[a, b] = (alpha * acc_num[ia, ib] + (1.0 - alpha) * acc_den[ia, ib]) / n
        h_mat[a, a] += lam
    theta = cholesky_solve(h_mat, h)
    if clip:
        for a in range(n):
            if theta[a] < 0.0:
                theta[a] = 0.0
    # sum_i r(x_i)^2 = theta' S_num theta, sum_i r(x_i) = s_num' theta: no pass over the samples
    q_num = 0.0
    q_den = 0.0
    lin = 0.0
    for a in range(n):
        ta = theta[a]
        if ta == 0.0:
            continue
        ia = idx[a]
        lin += vec_num[ia] * ta
        for b in range(n):
            tb = theta[b]
            if tb != 0.0:
                ib = idx[b]
                q_num += acc_num[ia, ib] * ta * tb
                q_den += acc_den[ia, ib] * ta * tb
    pe = (-alpha * q_num / (2.0 * n) - (1.0 - alpha) * q_den / (2.0 * n) + lin / n - 0.5)
    return pe, theta


@njit(cache=True)
def _both_directions(acc_p, acc_q, vec_p, vec_q, head, n, alpha, lam, clip):
    size = 2 * n
    past = np.empty(n, dtype=np.int64)
    cur = np.empty(n, dtype=np.int64)
    for t in range(n):
        past[t] = (head + t) % size
        cur[t] = (head + n + t) % size
    pe1, _ = _direction(acc_p, acc_q, vec_p, past, n, alpha, lam, clip)
    pe2, _ = _direction(acc_q, acc_p, vec_q, cur, n, alpha, lam, clip)
    return pe1, pe2


class TwoWindowRuLSIF(SlidingWindowPair):
    """Past and current windows of ``n`` samples with an incrementally maintained RuLSIF fit.

    Parameters
    ----------
    dim : int
        Dimension of each sample (k * m for subsequences of length k of an m-variate series).
    n : int
        Samples per window (>= 2); also the number of kernel centres.
    sigma, lam : float
        Kernel width and ridge, fixed until :meth:`set_params`.
    alpha : float in [0, 1)
        Relative-ratio mixture weight.
    refresh_every : int
        Rebuild the accumulators from the Gram matrix after this many pushes.
    clip : bool
        Clip negative coefficients to zero (uLSIF's rule, as :func:`core.rulsif.fit_rulsif`).

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> st = TwoWindowRuLSIF(dim=1, n=20, sigma=1.0, lam=0.1, alpha=0.1)
    >>> for v in rng.normal(size=40):
    ...     st.push(np.array([v]))
    >>> quiet = sum(st.scores())
    >>> for v in rng.normal(5.0, 1.0, size=20):
    ...     st.push(np.array([v]))
    >>> sum(st.scores()) > quiet
    True
    """

    def __init__(self, dim: int, n: int, sigma: float, lam: float, *, alpha: float = 0.1,
                 refresh_every: int = 256, clip: bool = True):
        if int(dim) < 1:
            raise ValueError(f"dim must be >= 1; got {dim}")
        if int(n) < 2:
            raise ValueError(f"n (samples per window) must be >= 2; got {n}")
        if int(refresh_every) < 1:
            raise ValueError(f"refresh_every must be >= 1; got {refresh_every}")
        self.dim, self.n = int(dim), int(n)
        self.alpha = check_alpha(alpha)
        self.refresh_every = int(refresh_every)
        self.clip = bool(clip)
        self._check_params(sigma, lam)
        self.sigma, self.lam = float(sigma), float(lam)
        size = 2 * self.n
        self._ring = np.zeros((size, self.dim))
        self._gram = np.zeros((size, size))
        self._acc_p = np.zeros((size, size))
        self._acc_q = np.zeros((size, size))
        self._vec_p = np.zeros(size)
        self._vec_q = np.zeros(size)
        self._head = 0
        self._count = 0
        self._since_refresh = 0

    @staticmethod
    def _check_params(sigma, lam):
        if not (np.isfinite(sigma) and sigma > 0):
            raise ValueError(f"sigma must be positive and finite; got {sigma}")
        if not (np.isfinite(lam) and lam > 0):
            raise ValueError(f"lam must be positive and finite; got {lam}")

    def push(self, y) -> None:
        """Slide the windows by one sample ``y`` (shape (dim,), finite)."""
        y = self._as_sample(y)
        self._head = _push(self._ring, self._gram, self._acc_p, self._acc_q, self._vec_p, self._vec_q,
                           self._head, self._count, self.n, y, self.sigma)
        self._count += 1
        self._since_refresh += 1
        if self._since_refresh >= self.refresh_every and self.ready:
            self._refresh()

    def _refresh(self) -> None:
        _rebuild(self._gram, self._acc_p, self._acc_q, self._vec_p, self._vec_q, self._head, self.n)
        self._since_refresh = 0





    def scores(self) -> tuple[float, float]:
        """``(PE_alpha(past || current), PE_alpha(current || past))`` of the clipped RuLSIF fits."""
        self._require_ready()
        pe1, pe2 = _both_directions(self._acc_p, self._acc_q, self._vec_p, self._vec_q, self._head, self.n,
                                    self.alpha, self.lam, self.clip)
        return float(pe1), float(pe2)

    def set_params(self, sigma: float, lam: float) -> None:
        """Change sigma and lambda; rebuilds the Gram matrix from the stored samples."""
        self._check_params(sigma, lam)
        self.sigma, self.lam = float(sigma), float(lam)
        filled = min(self._count, 2 * self.n)
        self._gram[:] = 0.0
        if filled:
            self._gram[:filled, :filled] = gauss_kernel(self._ring[:filled], self._ring[:filled], self.sigma)
        if self.ready:
            self._refresh()
        else:
            self._rebuild_filling(filled)

    def _rebuild_filling(self, filled: int) -> None:
        self._acc_p[:] = 0.0
        self._acc_q[:] = 0.0
        self._vec_p[:] = 0.0
        self._vec_q[:] = 0.0
        for s in range(filled):
            target_acc, target_vec = (self._acc_p, self._vec_p) if s < self.n else (self._acc_q, self._vec_q)
            _rank1(target_acc, self._gram[s], 1.0)
            target_vec += self._gram[s]

    def to_state(self) -> dict:
        """Plain arrays and scalars (for ``.npz`` + JSON checkpoints; no pickle)."""
        return {
            "version": _STATE_VERSION, "dim": self.dim, "n": self.n, "sigma": self.sigma, "lam": self.lam,
            "alpha": self.alpha, "refresh_every": self.refresh_every, "clip": int(self.clip), "head": self._head,
            "count": self._count, "since_refresh": self._since_refresh, "ring": self._ring.copy(),
            "gram": self._gram.copy(), "acc_p": self._acc_p.copy(), "acc_q": self._acc_q.copy(),
            "vec_p": self._vec_p.copy(), "vec_q": self._vec_q.copy(),
        }

    @classmethod
    def from_state(cls, state: dict) -> "TwoWindowRuLSIF":
        """Restore an object saved by :meth:`to_state`; continues bit-for-bit where it stopped."""
        version = int(state["version"])
        if version != _STATE_VERSION:
            raise ValueError(f"unsupported TwoWindowRuLSIF state version {version} (expected {_STATE_VERSION})")
        obj = cls(int(state["dim"]), int(state["n"]), float(state["sigma"]), float(state["lam"]),
                  alpha=float(state["alpha"]), refresh_every=int(state["refresh_every"]),
                  clip=bool(int(state.get("clip", 1))))
        obj._head, obj._count = int(state["head"]), int(state["count"])
        obj._since_refresh = int(state["since_refresh"])
        size = 2 * obj.n
        for name, shape in (("ring", (size, obj.dim)), ("gram", (size, size)), ("acc_p", (size, size)),
                            ("acc_q", (size, size)), ("vec_p", (size,)), ("vec_q", (size,))):
            arr = np.asarray(state[name], dtype=np.float64)
            if arr.shape != shape:
                raise ValueError(f"state field {name!r} has shape {arr.shape}, expected {shape}")
            setattr(obj, "_" + name, arr.copy())
        return obj

"""Incremental two-window LSDD state for change-point scoring.

The last ``2n`` samples live in a ring of ``2n`` slots: the oldest ``n`` form the *past* window, the
newest ``n`` the *current* one, and all ``2n`` are the LSDD centres (they follow the windows, as in
reference 001, where every sample of both sets is a centre). Kept per slot pair::

    G[a, b] = exp(-||y_a - y_b||^2 / (2 sigma^2))                 (kernel values, for h)
    H[a, b] = (pi sigma^2)^(d/2) exp(-||y_a - y_b||^2 / (4 sigma^2))
    p[a] = sum_{i in past} G[i, a],   q[a] = sum_{j in current} G[j, a]

so ``h = (p - q) / n`` is the LSDD vector for ``f = p_past - p_current``. A push overwrites the
oldest slot: its row/column of ``G`` and ``H`` are recomputed (O(n d)), ``p`` and ``q`` change by
three row updates (the sample that leaves, the one that moves from current to past, the new one),
O(n). :meth:`TwoWindowLSDD.scores` solves ``(H + lam I) theta = h`` by Cholesky (O(n^3), only when
asked) and returns ``L2 = ||L^-1 h||^2 + lam ||theta||^2`` (the bias-corrected estimator written as
a sum of squares: never negative). ``p`` and ``q`` are rebuilt from ``G`` every ``refresh_every``
pushes so rounding drift stays bounded.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .lsdd import h_scale, lsdd_solve
from .window_base import SlidingWindowPair

_STATE_VERSION = 1


@njit(cache=True)
def _fill_matrices(ring, gram, hmat, sigma, hconst):
    size = ring.shape[0]
    g1 = -0.5 / (sigma * sigma)
    g2 = -0.25 / (sigma * sigma)
    for a in range(size):
        gram[a, a] = 1.0
        hmat[a, a] = hconst
        for b in range(a):
            d2 = 0.0
            for k in range(ring.shape[1]):
                diff = ring[a, k] - ring[b, k]
                d2 += diff * diff
            v = np.exp(g1 * d2)
            w = hconst * np.exp(g2 * d2)
            gram[a, b] = v
            gram[b, a] = v
            hmat[a, b] = w
            hmat[b, a] = w


@njit(cache=True)
def _sums(gram, vec_p, vec_q, head, n):
    size = 2 * n
    vec_p[:] = 0.0
    vec_q[:] = 0.0
    for t in range(n):
        i = (head + t) % size
        j = (head + n + t) % size
        for a in range(size):
            vec_p[a] += gram[i, a]
            vec_q[a] += gram[j, a]


@njit(cache=True)
def _slide(ring, gram, hmat, vec_p, vec_q, head, n, y, sigma, hconst):
    """Overwrite the oldest slot ``head`` with ``y`` (full windows). Returns the new head."""
    size = 2 * n
    slot = head
    mid = (head + n) % size  # oldest current sample: becomes past
    for a in range(size):
        vec_p[a] += gram[mid, a] - gram[slot, a]
        vec_q[a] -= gram[mid, a]
    ring[slot] = y
    g1 = -0.5 / (sigma * sigma)
    g2 = -0.25 / (sigma * sigma)
    for s in range(size):
        if s == slot:
            gram[s, s] = 1.0
            hmat[s, s] = hconst
            continue
        d2 = 0.0
        for k in range(y.shape[0]):
            diff = ring[s, k] - y[k]
            d2 += diff * diff
        v = np.exp(g1 * d2)
        w = hconst * np.exp(g2 * d2)
        gram[slot, s] = v
        gram[s, slot] = v
        hmat[slot, s] = w
        hmat[s, slot] = w
    for a in range(size):
        vec_q[a] += gram[slot, a]  # the new sample is current
    # column ``slot`` changed for every member: recompute its two sums
    new_head = (slot + 1) % size
    sp = 0.0
    sq = 0.0
    for t in range(n):
        sp += gram[(new_head + t) % size, slot]
        sq += gram[(new_head + n + t) % size, slot]
    vec_p[slot] = sp
    vec_q[slot] = sq
    return new_head


class TwoWindowLSDD(SlidingWindowPair):
    """Past and current windows of ``n`` samples with an incrementally maintained LSDD fit.

    Parameters
    ----------
    dim : int
        Dimension of each sample (k * m for subsequences of length k of an m-variate series).
    n : int
        Samples per window (>= 2); the 2n window samples are the centres.
    sigma, lam : float
        Kernel width and (absolute) ridge, fixed until :meth:`set_params`.
    refresh_every : int
        Rebuild the kernel sums from the Gram matrix after this many pushes.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> st = TwoWindowLSDD(dim=1, n=20, sigma=0.5, lam=0.01)
    >>> for v in rng.normal(size=40):
    ...     st.push(np.array([v]))
    >>> quiet = st.scores()[0]
    >>> for v in rng.normal(4.0, 1.0, size=20):
    ...     st.push(np.array([v]))
    >>> st.scores()[0] > quiet
    True
    """

    def __init__(self, dim: int, n: int, sigma: float, lam: float, *, refresh_every: int = 256):
        if int(dim) < 1:
            raise ValueError(f"dim must be >= 1; got {dim}")
        if int(n) < 2:
            raise ValueError(f"n (samples per window) must be >= 2; got {n}")
        if int(refresh_every) < 1:
            raise ValueError(f"refresh_every must be >= 1; got {refresh_every}")
        self.dim, self.n = int(dim), int(n)
        self._check_params(sigma, lam)
        self.sigma, self.lam = float(sigma), float(lam)
        self.refresh_every = int(refresh_every)
        size = 2 * self.n
        self._ring = np.zeros((size, self.dim))
        self._gram = np.zeros((size, size))
        self._hmat = np.zeros((size, size))
        self._vec_p = np.zeros(size)
        self._vec_q = np.zeros(size)
        self._head = 0
        self._count = 0
        self._since_refresh = 0

    def _check_params(self, sigma, lam):
        if not (np.isfinite(sigma) and sigma > 0):
            raise ValueError(f"sigma must be positive and finite; got {sigma}")
        if not (np.isfinite(lam) and lam > 0):
            raise ValueError(f"lam must be positive and finite (H is singular for duplicated samples); got {lam}")
        if not np.isfinite(h_scale(float(sigma), self.dim)):
            raise ValueError(f"(pi sigma^2)^(d/2) overflows for sigma={sigma:g}, d={self.dim}; "
                             "rescale the data so that sigma is of order one")

    @property
    def _hconst(self) -> float:
        return h_scale(self.sigma, self.dim)

    def _slide(self, y: np.ndarray) -> int:
        return _slide(self._ring, self._gram, self._hmat, self._vec_p, self._vec_q, self._head, self.n, y,
                      self.sigma, self._hconst)

    def _refresh_sums(self) -> None:
        _sums(self._gram, self._vec_p, self._vec_q, self._head, self.n)

    def _rebuild(self) -> None:
        _fill_matrices(self._ring, self._gram, self._hmat, self.sigma, self._hconst)
        _sums(self._gram, self._vec_p, self._vec_q, self._head, self.n)
        self._since_refresh = 0

    def refresh(self) -> None:
        """Recompute everything from the stored samples (bounds rounding drift)."""
        if self.ready:
            self._rebuild()





    def centres(self) -> np.ndarray:
        """The centres in the order of :meth:`theta`: past then current, oldest first."""
        self._require_ready()
        return self._ring[self._order()].copy()

    def _solve(self) -> tuple[np.ndarray, float]:
        self._require_ready()
        h = (self._vec_p - self._vec_q) / self.n
        theta, l2, ok = lsdd_solve(self._hmat, h, self.lam)
        if not ok:  # lam tiny next to ||H||: eigen-solve with clipped eigenvalues
            mu, u = np.linalg.eigh(self._hmat)
            mu = np.maximum(mu, 0.0)
            g = u.T @ h
            theta = u @ (g / (mu + self.lam))
            l2 = float(np.sum(g * g * (mu + 2.0 * self.lam) / (mu + self.lam) ** 2))
        return theta, float(l2)

    def theta(self) -> np.ndarray:
        """Coefficients of ``f = p_past - p_current`` for :meth:`centres`."""
        theta, _ = self._solve()
        return theta[self._order()]

    def scores(self) -> tuple[float, float]:
        """``(L2, L2)``: the LSDD L2-distance of the two windows (symmetric, so both entries agree)."""
        _, l2 = self._solve()
        return l2, l2

    def set_params(self, sigma: float, lam: float) -> None:
        """Change sigma and lambda; recomputes the state from the stored samples."""
        self._check_params(sigma, lam)
        self.sigma, self.lam = float(sigma), float(lam)
        self.refresh()

    def to_state(self) -> dict:
        """Plain arrays and scalars (for ``.npz`` + JSON checkpoints; no pickle)."""
        return {
            "version": _STATE_VERSION, "dim": self.dim, "n": self.n, "sigma": self.sigma, "lam": self.lam,
            "refresh_every": self.refresh_every, "head": self._head, "count": self._count,
            "since_refresh": self._since_refresh, "ring": self._ring.copy(), "gram": self._gram.copy(),
            "hmat": self._hmat.copy(), "vec_p": self._vec_p.copy(), "vec_q": self._vec_q.copy(),
        }

    @classmethod
    def from_state(cls, state: dict) -> "TwoWindowLSDD":
        """Restore an object saved by :meth:`to_state`; continues bit-for-bit where it stopped."""
        version = int(state["version"])
        if version != _STATE_VERSION:
            raise ValueError(f"unsupported TwoWindowLSDD state version {version} (expected {_STATE_VERSION})")
        obj = cls(int(state["dim"]), int(state["n"]), float(state["sigma"]), float(state["lam"]),
                  refresh_every=int(state["refresh_every"]))
        obj._head, obj._count = int(state["head"]), int(state["count"])
        obj._since_refresh = int(state["since_refresh"])
        if not (0 <= obj._head < 2 * obj.n) or obj._count < 0:
            raise ValueError(f"state has head={obj._head}, count={obj._count}: outside the ring of {2 * obj.n}")
        size = 2 * obj.n
        for name, shape in (("ring", (size, obj.dim)), ("gram", (size, size)), ("hmat", (size, size)),
                            ("vec_p", (size,)), ("vec_q", (size,))):
            arr = np.asarray(state[name], dtype=np.float64)
            if arr.shape != shape:
                raise ValueError(f"state field {name!r} has shape {arr.shape}, expected {shape}")
            if not np.all(np.isfinite(arr)):
                raise ValueError(f"state field {name!r} holds NaN or infinity")
            setattr(obj, "_" + name, arr.copy())
        return obj

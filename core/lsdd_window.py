"""Incremental two-window LSDD state for change-point scoring.

The last ``2n`` samples live in a ring of ``2n`` slots: the oldest ``n`` form the *past* window, the
newest ``n`` the *current* one, and all ``2n`` are the LSDD centres (they follow the windows, as in
Sugiyama et al. 2013, where every sample of both sets is a centre). Kept per slot pair::

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

``unitless=True`` drops the constant ``(pi sigma^2)^(d/2)`` from ``H``. The score is then
``c L2(lam c)`` with ``c = (pi sigma^2)^(d/2)``: the L2 distance of the fit whose ridge is ``lam``
in units of ``c``, measured in units of the kernel's volume. The plain L2 has units of
1 / volume: it scales as ``sigma^-d`` when the data and ``sigma`` are scaled together, the unitless
score does not change.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .gram_ring import fill_gram, pair_sq_dists, slide_gram, window_sums
from .kernels import check_width
from .lsdd import h_scale, lsdd_solve
from .window_base import SlidingWindowPair, check_window_sizes

_STATE_VERSION = 1


@njit(cache=True)
def _fill_hmat(d2, hmat, sigma, hconst):
    """``H = (pi sigma^2)^(d/2) exp(-d2 / (4 sigma^2))`` from the slots' squared distances."""
    g2 = -0.25 / (sigma * sigma)
    for a in range(d2.shape[0]):
        hmat[a, a] = hconst
        for b in range(a):
            w = hconst * np.exp(g2 * d2[a, b])
            hmat[a, b] = w
            hmat[b, a] = w


@njit(cache=True)
def _slide_hmat(hmat, d2_row, slot, sigma, hconst):
    """Row/column ``slot`` of ``H`` after a push, from the new sample's squared distances."""
    g2 = -0.25 / (sigma * sigma)
    for s in range(d2_row.shape[0]):
        w = hconst if s == slot else hconst * np.exp(g2 * d2_row[s])
        hmat[slot, s] = w
        hmat[s, slot] = w


class TwoWindowLSDD(SlidingWindowPair):
    """Past and current windows of ``n`` samples with an incrementally maintained LSDD fit.

    Parameters
    ----------
    dim : int
        Dimension of each sample (k * m for subsequences of length k of an m-variate series).
    n : int
        Samples per window (>= 2); the 2n window samples are the centres.
    sigma, lam : float
        Kernel width and ridge, fixed until :meth:`set_params`; the ridge is absolute, or with
        ``unitless`` in units of the kernel's volume ``(pi sigma^2)^(d/2)``.
    refresh_every : int
        Rebuild the kernel sums from the Gram matrix after this many pushes.
    unitless : bool, default False
        Score in units of the kernel's volume (see the module docstring): scores of windows at
        different widths, or of data at different scales, are then on one scale. The streaming
        change-point detector uses it, since its null pools scores over re-chosen widths.

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

    def __init__(self, dim: int, n: int, sigma: float, lam: float, *, refresh_every: int = 256,
                 unitless: bool = False):
        dim, n, refresh_every = check_window_sizes(dim, n, refresh_every)
        self.dim, self.n = int(dim), int(n)
        self.unitless = bool(unitless)
        self._check_params(sigma, lam)
        self.sigma, self.lam = float(sigma), float(lam)
        self.refresh_every = int(refresh_every)
        size = 2 * self.n
        self._ring = np.zeros((size, self.dim))
        self._gram = np.zeros((size, size))
        self._hmat = np.zeros((size, size))
        self._vec_p = np.zeros(size)
        self._vec_q = np.zeros(size)
        self._d2_row = np.empty(size)  # scratch of slide_gram
        self._head = 0
        self._count = 0
        self._since_refresh = 0

    def _check_params(self, sigma, lam):
        check_width(sigma)
        if not (np.isfinite(lam) and lam > 0):
            raise ValueError(f"lam must be positive and finite (H is singular for duplicated samples); got {lam}")
        if not self.unitless and not np.isfinite(h_scale(float(sigma), self.dim)):
            raise ValueError(f"(pi sigma^2)^(d/2) overflows for sigma={sigma:g}, d={self.dim}; "
                             "rescale the data so that sigma is of order one")

    @property
    def _hconst(self) -> float:
        return 1.0 if self.unitless else h_scale(self.sigma, self.dim)

    def _slide(self, y: np.ndarray) -> int:
        slot = self._head
        head = slide_gram(self._ring, self._gram, self._vec_p, self._vec_q, slot, self.n, y, self.sigma,
                          self._d2_row)
        _slide_hmat(self._hmat, self._d2_row, slot, self.sigma, self._hconst)
        return head

    def _refresh_sums(self) -> None:
        window_sums(self._gram, self._vec_p, self._vec_q, self._head, self.n)

    def _rebuild(self) -> None:
        d2 = np.empty_like(self._gram)
        pair_sq_dists(self._ring, d2)
        fill_gram(d2, self.sigma, self._gram)
        _fill_hmat(d2, self._hmat, self.sigma, self._hconst)
        window_sums(self._gram, self._vec_p, self._vec_q, self._head, self.n)
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
            "unitless": self.unitless,
        }

    @classmethod
    def from_state(cls, state: dict) -> "TwoWindowLSDD":
        """Restore an object saved by :meth:`to_state`; continues bit-for-bit where it stopped."""
        version = int(state["version"])
        if version != _STATE_VERSION:
            raise ValueError(f"unsupported TwoWindowLSDD state version {version} (expected {_STATE_VERSION})")
        # a state saved before ``unitless`` existed holds the plain L2
        obj = cls(int(state["dim"]), int(state["n"]), float(state["sigma"]), float(state["lam"]),
                  refresh_every=int(state["refresh_every"]), unitless=bool(state.get("unitless", False)))
        obj._head, obj._count = int(state["head"]), int(state["count"])
        obj._since_refresh = int(state["since_refresh"])
        if not (0 <= obj._head < 2 * obj.n) or obj._count < 0:
            raise ValueError(f"state has head={obj._head}, count={obj._count}: outside the ring of {2 * obj.n}")
        if not 0 <= obj._since_refresh < obj.refresh_every:
            raise ValueError(f"state has since_refresh={obj._since_refresh}; expected 0 <= since_refresh < "
                             f"refresh_every={obj.refresh_every}")
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

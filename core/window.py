"""Incremental two-window RuLSIF state for change-point scoring.

The last ``2n`` samples live in a ring of ``2n`` slots: the oldest ``n`` form the *past* window, the
newest ``n`` the *current* one. Every window sample is also a kernel centre (past samples for the
past-vs-current ratio, current samples for the reverse one, b = n as in Liu et al. 2013), and one
Gram matrix ``G`` over the ring (one row and column rewritten per push) serves both directions.

Centre *positions*. Slot ``s`` has position ``s mod n``: the past and the current window each hold
exactly one sample per position, and a slide only ever changes position ``p0 = head mod n`` of both
(the leaving past sample is replaced by the oldest current one, which is replaced by the new
sample). So both directions keep an ``n x n`` system indexed by position, and only what they need::

    M1 = a sum_{i in past} g_i g_i' + (1-a) sum_{j in cur} g_j g_j'   restricted to past centres
    M2 = a sum_{j in cur} g_j g_j' + (1-a) sum_{i in past} g_i g_i'   restricted to current centres
    h1 = sum_{i in past} g_i (past centres),     h2 = sum_{j in cur} g_j (current centres)

(``g_i`` = row ``i`` of ``G``). The fit past-vs-current solves ``(M1/n + lam I) theta = h1/n`` and
scores ``PE = -theta' M1 theta / (2n) + h1' theta / n - 1/2`` with the clipped ``theta``, which is
exactly ``fit_rulsif(past, current, ...).pe``; the reverse direction uses ``M2, h2``.

A push (leaving sample o, moving sample m, new sample y at the same position ``p0``) is one kernel
row of ``y`` (2n evaluations), a fused rank-3 update of each matrix on the positions that keep
their centre (``M1 += -a u_o u_o' + (2a-1) u_m u_m' + (1-a) u_y u_y'``, the mirror image for
``M2``), and the recomputation of row/column ``p0`` of each (2n x n each, from ``G``): O(n^2), no
allocation. The scores are two Cholesky solves of size ``n`` (``ratiowatch.core.linalg``), computed lazily and
cached until the next push. The matrices are rebuilt from ``G`` every ``refresh_every`` pushes so
rounding drift stays bounded. :meth:`TwoWindowRuLSIF.push_many` runs a whole batch of samples (and
the scores after each) in one compiled loop.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .kernels import check_width, gauss_entry
from .linalg import FASTMATH, cholesky_scaled_solve
from .validation import check_alpha
from .window_base import SlidingWindowPair, check_window_sizes

#: version 2: position-indexed systems M1/M2 (version 1 kept full 2n x 2n accumulators; such states
#: are still accepted and rebuilt from their Gram matrix)
_STATE_VERSION = 2

# rows of the float work array ``fw`` (shape (8, 2n)); the u/v rows use their first n entries
_UO, _UM, _UY, _VO, _VM, _VY, _KR, _CV = range(8)


@njit(cache=True, inline="always")
def _in_past(slot, head, n):
    """Whether ``slot`` holds a past-window sample when the oldest sample sits at ``head``."""
    d = slot - head  # no integer modulo: it costs tens of cycles, and this runs 2n times per push
    if d < 0:
        d += 2 * n
    return d < n


@njit(cache=True, fastmath=FASTMATH)
def _positions(head, n, iw):
    """Slot of each position in the past (``iw[0]``) and current (``iw[1]``) window."""
    for p in range(n):
        if _in_past(p, head, n):
            iw[0, p] = p
            iw[1, p] = p + n
        else:
            iw[0, p] = p + n
            iw[1, p] = p


@njit(cache=True, fastmath=FASTMATH)
def _fill_gram(ring, gram, sigma):
    size = ring.shape[0]
    g = -0.5 / (sigma * sigma)
    for a in range(size):
        gram[a, a] = 1.0
        ra = ring[a]
        for b in range(a):
            rb = ring[b]
            d2 = 0.0
            for k in range(ra.shape[0]):
                diff = ra[k] - rb[k]
                d2 += diff * diff
            v = gauss_entry(g * d2)
            gram[a, b] = v
            gram[b, a] = v


@njit(cache=True, fastmath=FASTMATH)
def _build(gram, macc, hacc, fw, iw, head, n, alpha):
    """M1, M2, h1, h2 from scratch (O(n^3)); also the periodic refresh.

    ``M1 = sum_i w1_i g_i g_i'`` over the 2n samples (``g_i`` their kernel row at the past centres,
    ``w1`` = alpha for past samples, 1 - alpha for current ones; M2 likewise at the current
    centres) as two matrix products of the weighted rows: ~5x faster than the 2n rank-one updates
    at n = 50 (this runs at every re-selection and every ``refresh_every`` pushes).
    """
    size = 2 * n
    _positions(head, n, iw)
    hacc[:, :] = 0.0
    ps = iw[0]
    cs = iw[1]
    sa = np.sqrt(alpha)
    sb = np.sqrt(1.0 - alpha)
    a = np.empty((size, n))
    b = np.empty((size, n))
    h1 = hacc[0]
    h2 = hacc[1]
    for i in range(size):
        row = gram[i]
        ar = a[i]
        br = b[i]
        if _in_past(i, head, n):
            for q in range(n):
                gp = row[ps[q]]
                ar[q] = sa * gp
                br[q] = sb * row[cs[q]]
                h1[q] += gp
        else:
            for q in range(n):
                gc = row[cs[q]]
                ar[q] = sb * row[ps[q]]
                br[q] = sa * gc
                h2[q] += gc
    macc[0] = a.T @ a
    macc[1] = b.T @ b


@njit(cache=True, fastmath=FASTMATH)
def _rank3(mat, c1, u1, c2, u2, c3, u3, n):
    for p in range(n):
        a1 = c1 * u1[p]
        a2 = c2 * u2[p]
        a3 = c3 * u3[p]
        row = mat[p]
        for q in range(n):
            row[q] += a1 * u1[q] + a2 * u2[q] + a3 * u3[q]


@njit(cache=True, fastmath=FASTMATH)
def _new_row(mat, gram, slots, cvec, p0, n):
    """Row/column ``p0`` of ``mat``: ``mat[p0, q] = G[slots[q], :] . cvec`` (G symmetric)."""
    size = 2 * n
    row0 = mat[p0]
    for q in range(n):
        g = gram[slots[q]]
        s = 0.0
        for i in range(size):
            s += g[i] * cvec[i]
        row0[q] = s
    for q in range(n):
        mat[q, p0] = row0[q]


@njit(cache=True, fastmath=FASTMATH)
def _slide(ring, gram, macc, hacc, fw, iw, y, head, n, alpha, sigma):
    """Full windows: the oldest sample (slot ``head``) leaves, ``y`` enters. Returns the new head."""
    size = 2 * n
    s0 = head
    p0 = s0 - n if s0 >= n else s0
    sm = s0 + n if s0 < n else s0 - n
    _positions(head, n, iw)
    ps = iw[0]
    cs = iw[1]
    # kernel row of the new sample against every slot (its own slot: itself)
    kr = fw[_KR]
    g = -0.5 / (sigma * sigma)
    for t in range(size):
        rt = ring[t]
        d2 = 0.0
        for k in range(y.shape[0]):
            diff = rt[k] - y[k]
            d2 += diff * diff
        kr[t] = gauss_entry(g * d2)
    kr[s0] = 1.0
    # rank-one vectors on the centres (entries at p0 are overwritten below, so not special-cased)
    uo = fw[_UO]
    um = fw[_UM]
    uy = fw[_UY]
    vo = fw[_VO]
    vm = fw[_VM]
    vy = fw[_VY]
    go = gram[s0]
    gm = gram[sm]
    for q in range(n):
        pq = ps[q]
        cq = cs[q]
        uo[q] = go[pq]
        um[q] = gm[pq]
        uy[q] = kr[pq]
        vo[q] = go[cq]
        vm[q] = gm[cq]
        vy[q] = kr[cq]
    # the new sample takes the oldest slot
    ring[s0, :] = y
    for t in range(size):
        gram[s0, t] = kr[t]
        gram[t, s0] = kr[t]
    # past loses o and gains m, current loses m and gains y
    _rank3(macc[0], -alpha, uo, 2.0 * alpha - 1.0, um, 1.0 - alpha, uy, n)
    _rank3(macc[1], alpha - 1.0, vo, 1.0 - 2.0 * alpha, vm, alpha, vy, n)
    h1 = hacc[0]
    h2 = hacc[1]
    for q in range(n):
        h1[q] += um[q] - uo[q]
        h2[q] += vy[q] - vm[q]
    new_head = s0 + 1 if s0 + 1 < size else 0
    ps[p0] = sm
    cs[p0] = s0
    # position p0 now holds m (past) and y (current): recompute its row of M1 and M2
    cv = fw[_CV]
    gm = gram[sm]
    s = 0.0
    for i in range(size):
        past = _in_past(i, new_head, n)
        cv[i] = (alpha if past else 1.0 - alpha) * gm[i]
        if past:
            s += gm[i]
    _new_row(macc[0], gram, ps, cv, p0, n)
    h1[p0] = s
    s = 0.0
    for i in range(size):
        past = _in_past(i, new_head, n)
        cv[i] = (1.0 - alpha if past else alpha) * kr[i]
        if not past:
            s += kr[i]
    _new_row(macc[1], gram, cs, cv, p0, n)
    h2[p0] = s
    return new_head


@njit(cache=True, fastmath=FASTMATH)
def _push_core(ring, gram, macc, hacc, fw, iw, y, ist, n, alpha, sigma, refresh_every):
    """One push; ``ist = [head, count, since_refresh]`` is updated in place.

    Returns -1 (state untouched) if ``y`` is not finite, else 1 when both windows are full, 0 while filling.
    """
    for k in range(y.shape[0]):
        if not np.isfinite(y[k]):
            return -1
    size = 2 * n
    count = ist[1]
    if count < size:
        # filling: slots in order; everything is built once, when both windows are full
        ring[count, :] = y
        ist[1] = count + 1
        if count + 1 == size:
            _fill_gram(ring, gram, sigma)
            ist[0] = 0
            ist[2] = 0
            _build(gram, macc, hacc, fw, iw, 0, n, alpha)
            return 1
        return 0
    head = _slide(ring, gram, macc, hacc, fw, iw, y, ist[0], n, alpha, sigma)
    ist[0] = head
    ist[1] = count + 1
    ist[2] += 1
    if ist[2] >= refresh_every:
        _build(gram, macc, hacc, fw, iw, head, n, alpha)
        ist[2] = 0
    return 1


@njit(cache=True, fastmath=FASTMATH)
def _direction(mat, h, chol, theta, tmp, n, lam, clip):
    """PE-hat_alpha of one direction from its position-indexed system (see module docstring)."""
    inv_n = 1.0 / n
    for p in range(n):
        theta[p] = h[p] * inv_n
    if not cholesky_scaled_solve(mat, inv_n, lam, chol, theta):
        # not numerically positive definite (cannot happen for lam > 0 short of overflow): LU
        full = mat * inv_n
        for p in range(n):
            full[p, p] += lam
        theta[:] = np.linalg.solve(full, h * inv_n)
    if clip:
        for p in range(n):
            if theta[p] < 0.0:
                theta[p] = 0.0
    # theta' M theta over the nonzero coefficients, M symmetric: accumulate rows
    tmp[:] = 0.0
    lin = 0.0
    for p in range(n):
        tp = theta[p]
        if tp != 0.0:
            lin += h[p] * tp
            row = mat[p]
            for q in range(n):
                tmp[q] += tp * row[q]
    quad = 0.0
    for q in range(n):
        quad += tmp[q] * theta[q]
    return -0.5 * quad * inv_n + lin * inv_n - 0.5


@njit(cache=True, fastmath=FASTMATH)
def _scores_core(macc, hacc, chol, sw, n, lam, clip):
    return (_direction(macc[0], hacc[0], chol, sw[0], sw[1], n, lam, clip),
            _direction(macc[1], hacc[1], chol, sw[0], sw[1], n, lam, clip))


@njit(cache=True, fastmath=FASTMATH)
def _push_many(ring, gram, macc, hacc, fw, iw, rows, ist, n, alpha, sigma, refresh_every, lam, clip,
               chol, sw, out):
    """Push every row (already validated); ``out[t]`` = scores after row t (NaN while filling)."""
    size = 2 * n
    for t in range(rows.shape[0]):
        _push_core(ring, gram, macc, hacc, fw, iw, rows[t], ist, n, alpha, sigma, refresh_every)
        if ist[1] >= size:
            out[t, 0], out[t, 1] = _scores_core(macc, hacc, chol, sw, n, lam, clip)
        else:
            out[t, 0] = np.nan
            out[t, 1] = np.nan


@njit(cache=True, inline="always")
def _views(buf, ibuf, n, dim):
    """The state and scratch arrays inside the two flat buffers (layout of ``_layout``)."""
    size = 2 * n
    o = 0
    ring = buf[o:o + size * dim].reshape((size, dim))
    o += size * dim
    gram = buf[o:o + size * size].reshape((size, size))
    o += size * size
    macc = buf[o:o + 2 * n * n].reshape((2, n, n))
    o += 2 * n * n
    hacc = buf[o:o + 2 * n].reshape((2, n))
    o += 2 * n
    fw = buf[o:o + 8 * size].reshape((8, size))
    o += 8 * size
    chol = buf[o:o + n * n].reshape((n, n))
    o += n * n
    sw = buf[o:o + 2 * n].reshape((2, n))
    ist = ibuf[:3]
    iw = ibuf[3:3 + 2 * n].reshape((2, n))
    return ring, gram, macc, hacc, fw, chol, sw, ist, iw


def _py_views(buf, ibuf, n, dim):
    return _views.py_func(buf, ibuf, n, dim)


def _layout(n: int, dim: int) -> tuple[int, int]:
    size = 2 * n
    return size * dim + size * size + 2 * n * n + 2 * n + 8 * size + n * n + 2 * n, 3 + 2 * n


@njit(cache=True)
def _push_packed(buf, ibuf, y, n, dim, alpha, sigma, refresh_every):
    # one dispatch with three arrays: numba's per-argument unboxing is ~50 ns per array
    ring, gram, macc, hacc, fw, chol, sw, ist, iw = _views(buf, ibuf, n, dim)
    return _push_core(ring, gram, macc, hacc, fw, iw, y, ist, n, alpha, sigma, refresh_every)


@njit(cache=True)
def _scores_packed(buf, ibuf, n, dim, lam, clip):
    ring, gram, macc, hacc, fw, chol, sw, ist, iw = _views(buf, ibuf, n, dim)
    return _scores_core(macc, hacc, chol, sw, n, lam, clip)


@njit(cache=True)
def _push_scores_packed(buf, ibuf, y, n, dim, alpha, sigma, refresh_every, lam, clip):
    # push and both scores in one dispatch (the detector needs both at every step)
    ring, gram, macc, hacc, fw, chol, sw, ist, iw = _views(buf, ibuf, n, dim)
    code = _push_core(ring, gram, macc, hacc, fw, iw, y, ist, n, alpha, sigma, refresh_every)
    if code != 1:
        return code, np.nan, np.nan
    s1, s2 = _scores_core(macc, hacc, chol, sw, n, lam, clip)
    return code, s1, s2


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
        Rebuild the accumulated systems from the Gram matrix after this many pushes.
    clip : bool
        Clip negative coefficients to zero (uLSIF's rule, as :func:`ratiowatch.core.rulsif.fit_rulsif`).

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
        dim, n, refresh_every = check_window_sizes(dim, n, refresh_every)
        self.dim, self.n = int(dim), int(n)
        self.alpha = check_alpha(alpha)
        self.refresh_every = int(refresh_every)
        self.clip = bool(clip)
        self._check_params(sigma, lam)
        self.sigma, self.lam = float(sigma), float(lam)
        n, dim = self.n, self.dim
        nf, ni = _layout(n, dim)
        # everything lives in two flat buffers (one dispatch argument each); the attributes are views
        self._buf = np.zeros(nf)
        self._ibuf = np.zeros(ni, dtype=np.int64)
        (self._ring, self._gram, self._macc, self._hacc, self._fw, self._chol, self._sw, self._ist,
         self._iw) = _py_views(self._buf, self._ibuf, n, dim)
        self._ready = False
        self._cached = None  # scores of the current windows once computed (reset by every change)

    _VIEWS = ("_ring", "_gram", "_macc", "_hacc", "_fw", "_chol", "_sw", "_ist", "_iw")

    def __getstate__(self) -> dict:
        # a copy (copy.deepcopy, which a detector's rollback uses) carries the two buffers and not
        # the views into them: copied one by one, each view became an array of its own, which the
        # Python side read and wrote while the compiled code went on with the buffers
        return {k: v for k, v in self.__dict__.items() if k not in self._VIEWS}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        (self._ring, self._gram, self._macc, self._hacc, self._fw, self._chol, self._sw, self._ist,
         self._iw) = _py_views(self._buf, self._ibuf, self.n, self.dim)

    # the ring bookkeeping lives in the int array shared with the compiled code
    @property
    def _head(self) -> int:
        return int(self._ist[0])

    @property
    def _count(self) -> int:
        return int(self._ist[1])

    @property
    def _since_refresh(self) -> int:
        return int(self._ist[2])

    @property
    def ready(self) -> bool:
        """True once both windows are full (2n pushes)."""
        return self._ready

    @staticmethod
    def _check_params(sigma, lam):
        check_width(sigma)
        if not (np.isfinite(lam) and lam > 0):
            raise ValueError(f"lam must be positive and finite; got {lam}")

    def push(self, y) -> None:
        """Slide the windows by one sample ``y`` (shape (dim,), finite); O(n^2), no allocation."""
        if not (type(y) is np.ndarray and y.dtype == np.float64 and y.ndim == 1 and y.shape[0] == self.dim):
            y = self._as_sample(y)
        code = _push_packed(self._buf, self._ibuf, y, self.n, self.dim, self.alpha, self.sigma, self.refresh_every)
        if code < 0:
            raise ValueError("sample contains NaN or infinity; the detector's missing-value policy must handle it")
        self._ready = code == 1
        self._cached = None

    def scores(self) -> tuple[float, float]:
        """``(PE_alpha(past || current), PE_alpha(current || past))`` of the clipped RuLSIF fits."""
        if self._cached is None:
            self._require_ready()
            self._cached = _scores_packed(self._buf, self._ibuf, self.n, self.dim, self.lam, self.clip)
        return self._cached

    def push_scores(self, y) -> tuple[float, float] | None:
        """:meth:`push` then :meth:`scores` in one compiled call; None while the windows are filling.

        Examples
        --------
        >>> st = TwoWindowRuLSIF(dim=1, n=2, sigma=1.0, lam=0.1)
        >>> [st.push_scores([v]) is None for v in (0.0, 1.0, 2.0)]
        [True, True, True]
        >>> st.push_scores([3.0]) == st.scores()
        True
        """
        if not (type(y) is np.ndarray and y.dtype == np.float64 and y.ndim == 1 and y.shape[0] == self.dim):
            y = self._as_sample(y)
        code, s1, s2 = _push_scores_packed(self._buf, self._ibuf, y, self.n, self.dim, self.alpha, self.sigma,
                                           self.refresh_every, self.lam, self.clip)
        if code < 0:
            raise ValueError("sample contains NaN or infinity; the detector's missing-value policy must handle it")
        self._ready = code == 1
        self._cached = (s1, s2) if self._ready else None
        return self._cached

    def push_many(self, rows) -> np.ndarray:
        """Push every row of ``rows`` (shape (m, dim)) in one compiled loop.

        Returns an (m, 2) array: row ``t`` holds :meth:`scores` right after pushing ``rows[t]``, and
        NaN for the pushes made while the windows were still filling (no score exists yet; compare
        :attr:`ready`). Equivalent to ``push`` + ``scores`` per row, without the per-row Python calls.
        Rows are validated first; on a bad row nothing is pushed.

        Examples
        --------
        >>> st = TwoWindowRuLSIF(dim=1, n=3, sigma=1.0, lam=0.1)
        >>> out = st.push_many(np.arange(8.0)[:, None])
        >>> out.shape, bool(np.isnan(out[:5]).all()), bool(np.isfinite(out[5:]).all())
        ((8, 2), True, True)
        """
        rows = np.ascontiguousarray(self._as_rows(rows))
        out = np.empty((rows.shape[0], 2))
        _push_many(self._ring, self._gram, self._macc, self._hacc, self._fw, self._iw, rows, self._ist, self.n,
                   self.alpha, self.sigma, self.refresh_every, self.lam, self.clip, self._chol, self._sw, out)
        self._ready = bool(self._ist[1] >= 2 * self.n)
        self._cached = (float(out[-1, 0]), float(out[-1, 1])) if rows.shape[0] and self._ready else None
        return out

    def _rebuild(self) -> None:
        """Recompute the Gram matrix (current sigma) and the systems from the stored samples."""
        if self.ready:
            _fill_gram(self._ring, self._gram, self.sigma)
            _build(self._gram, self._macc, self._hacc, self._fw, self._iw, self._head, self.n, self.alpha)
            self._ist[2] = 0
        self._cached = None

    def gram(self) -> np.ndarray:
        """Kernel matrix of the 2n windowed samples at the current sigma, rows in time order
        (the past window oldest first, then the current one); a copy of the maintained one.

        Examples
        --------
        >>> st = TwoWindowRuLSIF(dim=1, n=2, sigma=1.0, lam=0.1)
        >>> for v in (0.0, 1.0, 2.0, 3.0):
        ...     st.push([v])
        >>> bool(np.allclose(st.gram()[0], np.exp(-np.arange(4.0) ** 2 / 2)))
        True
        """
        self._require_ready()
        order = self._order()
        return self._gram[np.ix_(order, order)]

    def set_params(self, sigma: float, lam: float) -> None:
        """Change sigma and lambda; rebuilds the Gram matrix from the stored samples."""
        self._check_params(sigma, lam)
        self.sigma, self.lam = float(sigma), float(lam)
        self._rebuild()

    def to_state(self) -> dict:
        """Plain arrays and scalars (for ``.npz`` + JSON checkpoints; no pickle)."""
        return {
            "version": _STATE_VERSION, "dim": self.dim, "n": self.n, "sigma": self.sigma, "lam": self.lam,
            "alpha": self.alpha, "refresh_every": self.refresh_every, "clip": int(self.clip), "head": self._head,
            "count": self._count, "since_refresh": self._since_refresh, "ring": self._ring.copy(),
            "gram": self._gram.copy(), "macc": self._macc.copy(), "hacc": self._hacc.copy(),
        }

    @classmethod
    def from_state(cls, state: dict) -> "TwoWindowRuLSIF":
        """Restore an object saved by :meth:`to_state`; continues bit-for-bit where it stopped.

        Version-1 states (full ``2n x 2n`` accumulators) are accepted: their ring and Gram matrix
        are kept and the systems are rebuilt from them, equal to the saved fit up to rounding.
        """
        version = int(state["version"])
        if version not in (1, _STATE_VERSION):
            raise ValueError(f"unsupported TwoWindowRuLSIF state version {version} "
                             f"(this build reads versions 1 and {_STATE_VERSION})")
        obj = cls(int(state["dim"]), int(state["n"]), float(state["sigma"]), float(state["lam"]),
                  alpha=float(state["alpha"]), refresh_every=int(state["refresh_every"]),
                  clip=bool(int(state.get("clip", 1))))
        n, size = obj.n, 2 * obj.n
        head, count = int(state["head"]), int(state["count"])
        if not (0 <= head < size and count >= 0):
            raise ValueError(f"state has head={head}, count={count}; expected 0 <= head < {size}, count >= 0")
        fields = [("ring", (size, obj.dim)), ("gram", (size, size))]
        if version == _STATE_VERSION:
            fields += [("macc", (2, n, n)), ("hacc", (2, n))]
        since_refresh = int(state["since_refresh"])
        if version == _STATE_VERSION and not 0 <= since_refresh < obj.refresh_every:
            # (a version-1 state's is not used: its systems are rebuilt below)
            raise ValueError(f"state has since_refresh={since_refresh}; expected 0 <= since_refresh < "
                             f"refresh_every={obj.refresh_every}")
        for name, shape in fields:
            arr = np.asarray(state[name], dtype=np.float64)
            if arr.shape != shape:
                raise ValueError(f"state field {name!r} has shape {arr.shape}, expected {shape}")
            if not np.all(np.isfinite(arr)):  # the compiled updates would carry a NaN into every score
                raise ValueError(f"state field {name!r} holds NaN or infinity")
            getattr(obj, "_" + name)[...] = arr  # into the views of the packed buffer
        obj._ist[:] = (head, count, since_refresh)
        obj._ready = count >= size
        if version == 1:
            obj._ist[2] = 0
            if obj.ready:
                _build(obj._gram, obj._macc, obj._hacc, obj._fw, obj._iw, head, n, obj.alpha)
        return obj

"""Density-ratio split profile: the change score of every split of a window of subsequences.

For a series ``x`` (T x m) cut into subsequences of ``width`` samples taken every ``stride`` samples,
the score of a split at sample ``s`` compares the subsequences that end at or before ``s`` (left,
``n_L`` rows) with those that start at or after ``s`` (right, ``n_R`` rows); subsequences crossing
the split belong to neither side. The score is the symmetric alpha-relative Pearson divergence of
RuLSIF (Yamada et al. 2013) between the two sets, scaled by the effective sample size::

    score(s) = (PE_a(L || R) + PE_a(R || L)) * n_L n_R / (n_L + n_R)
    PE_a(P || Q) = h' theta - theta' H theta / 2 - 1/2,   theta = (H + lam I)^-1 h
    H = a mean_P phi phi' + (1 - a) mean_Q phi phi',      h = mean_P phi

Without the scaling, PE is largest at the margins, where one side holds few rows (its estimate is
biased upwards by about b / n); scaled, every split is a comparable two-sample statistic, as in the
size-weighted scan statistics of change-point analysis. The features ``phi`` are Gaussian kernels
(``exp(-||f - c||^2 / (2 sigma^2))``) on two views of each subsequence: its raw values (levels and
amplitudes) and its z-normalised values (shape), each reduced to at most ``max_dims`` piecewise
means (PAA), ``n_centres`` centres per view spread evenly over the series and sigma =
``sigma_factor`` x the median distance between subsequences (:class:`Kernel`). A sharp kernel
(0.5 x median) with a small ridge keeps the profile peaked at a change; with the full median width
and a large ridge it is nearly flat.

With ``alpha = 0`` (uLSIF) the score is twice the one direction whose denominator is the larger
side. uLSIF's ``H`` is the denominator's mean of ``phi phi'`` alone; from a margin's few rows
(fewer than the ``b`` features) it is singular, and PE of that direction grows as ``1 / lam``.
Scored in both directions, the maximum of change-free series sat at a margin (20 of 20 i.i.d.
series of 600 samples), and so did the stop test's null maxima: the offline synthetic suite found
165 of 460 changes (no variance change) and 6.2 % of change-free series got a change point. In one
direction: 278 changes and 3.3 % (RuLSIF: 422 and 3.5 %; docs/experiments.md).

Every split comes from running sums of ``phi phi'`` and ``phi``: one sweep over the rows stores
the left sums at the requested splits, the right sums are the total minus the left and the few
crossing rows, and each split costs one b x b Cholesky solve per direction (O(T b^2 + G b^3) for
G splits).

Examples
--------
>>> rng = np.random.default_rng(0)
>>> x = np.r_[rng.normal(0, 1, 300), rng.normal(0, 4, 300)]
>>> prof = SplitProfile(width=3, stride=1)
>>> score, split = prof.best(x)
>>> abs(split - 300) <= 10
True
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
from numba import njit

from .kernels import gauss_entries
from .linalg import FASTMATH, cholesky_factor_solve, cholesky_inplace
from .params import check_int, check_real
from .validation import check_alpha

#: piecewise means per subsequence and channel at most (a period of 16 steps keeps its shape)
MAX_DIMS = 16


@njit(cache=True)
def _paa_rows(x, width, stride, dims, znorm):
    """(n_rows, m * dims) piecewise means of the subsequences ``x[j stride : j stride + width]``."""
    t_len, m = x.shape
    n = (t_len - width) // stride + 1
    out = np.zeros((n, m * dims))
    for j in range(n):
        s0 = j * stride
        for c in range(m):
            mu = 0.0
            sd = 1.0
            if znorm:
                for i in range(width):
                    mu += x[s0 + i, c]
                mu /= width
                v = 0.0
                for i in range(width):
                    d = x[s0 + i, c] - mu
                    v += d * d
                sd = math.sqrt(v / width)
            for q in range(dims):
                a = (q * width) // dims
                b = ((q + 1) * width) // dims
                s = 0.0
                for i in range(a, b):
                    s += x[s0 + i, c]
                val = s / (b - a)
                if znorm:
                    # a flat subsequence has no shape: its z-normalised view is zero
                    val = (val - mu) / sd if sd > 1e-12 else 0.0
                out[j, c * dims + q] = val
    return out


@njit(cache=True)
def _gauss_exponents(f, centres, sigma):
    """``-||f_i - c_j||^2 / (2 sigma^2)`` for every row and centre."""
    g = -0.5 / (sigma * sigma)
    n, dim = f.shape
    out = np.empty((n, centres.shape[0]))
    for i in range(n):
        for j in range(centres.shape[0]):
            s = 0.0
            for k in range(dim):
                d = f[i, k] - centres[j, k]
                s += d * d
            out[i, j] = g * s
    return out


@njit(cache=True)
def _median_distance(f, idx):
    rows = f[idx]  # gathered once: contiguous rows for the inner loop
    m, dim = rows.shape
    out = np.empty(m * (m - 1) // 2)
    q = 0
    for a in range(m):
        ra = rows[a]
        for b in range(a + 1, m):
            rb = rows[b]
            s = 0.0
            for k in range(dim):
                d = ra[k] - rb[k]
                s += d * d
            if s > 0.0:
                out[q] = math.sqrt(s)
                q += 1
    if q == 0:  # every subsequence identical: any width will do
        return 1.0
    return np.median(out[:q])


def _even(n: int, count: int) -> np.ndarray:
    return np.unique(np.linspace(0, n - 1, min(n, count)).round().astype(np.int64))


#: the smallest normal float64: a kernel width whose square is below it divides -||f - c||^2 into -inf
_TINY = float(np.finfo(np.float64).tiny)

#: the subsequence views, in the order of :func:`_views`
_VIEW_NAMES = ("raw", "z-normalised")


def _views(x: np.ndarray, width: int, stride: int, max_dims: int) -> list[np.ndarray]:
    x = np.ascontiguousarray(x, dtype=np.float64)
    if x.ndim != 2 or x.shape[0] < width or width < 1 or stride < 1:
        raise ValueError(f"need x of shape (T, m) with T >= width >= 1 and stride >= 1; got {x.shape}, {width}, {stride}")
    dims = min(width, max_dims)
    views = [_paa_rows(x, width, stride, dims, False)]
    if width >= 3:  # two values have no shape beyond their difference
        views.append(_paa_rows(x, width, stride, dims, True))
    return views


@dataclass(frozen=True, eq=False)
class Kernel:
    """Gaussian kernel centres and width of each subsequence view (raw, then z-normalised), as
    :func:`fit_kernel` takes them from one series.

    A profile that keeps one kernel scores every series on the same features. A null drawn from the
    rows of one window and a test of a later window are then scored alike: with a kernel fitted
    afresh to each window the statistic would also move with the centres' and width's own variation.

    Parameters
    ----------
    centres : tuple of ndarray
        One (n_centres, dims) array per view.
    sigmas : tuple of float
        One width per view.
    """

    centres: tuple
    sigmas: tuple

    def __eq__(self, other) -> bool:
        return isinstance(other, Kernel) and self.sigmas == other.sigmas and len(self.centres) == len(other.centres) \
            and all(np.array_equal(a, b) for a, b in zip(self.centres, other.centres))

    def __hash__(self) -> int:
        return hash((self.sigmas, tuple(c.shape for c in self.centres)))

    def to_state(self) -> dict:
        """JSON-safe state (:meth:`from_state` restores it exactly)."""
        return {"centres": [c.tolist() for c in self.centres], "sigmas": [float(v) for v in self.sigmas]}

    @classmethod
    def from_state(cls, state) -> "Kernel":
        centres = tuple(np.asarray(c, dtype=np.float64).reshape(len(c), -1) for c in state["centres"])
        sigmas = tuple(float(v) for v in state["sigmas"])
        if len(centres) != len(sigmas) or not all(np.isfinite(c).all() for c in centres) or \
                not all(math.isfinite(v) and v > 0 for v in sigmas):
            raise ValueError("a kernel state needs one finite centre array and one positive width per view")
        return cls(centres, sigmas)


def fit_kernel(x: np.ndarray, width: int, stride: int, n_centres: int = 32, sigma_factor: float = 0.5,
               max_dims: int = MAX_DIMS) -> Kernel:
    """The :class:`Kernel` of ``x``'s subsequences: per view, ``n_centres`` evenly spaced rows are
    the centres, and the width is ``sigma_factor`` x the median distance between up to 200 evenly
    spaced rows.

    Examples
    --------
    >>> k = fit_kernel(np.arange(20.0)[:, None], 4, 2)
    >>> [c.shape for c in k.centres], len(k.sigmas)
    ([(9, 4), (9, 4)], 2)
    """
    return _kernel_of_views(_views(x, width, stride, max_dims), n_centres, sigma_factor)


def _kernel_of_views(views: list[np.ndarray], n_centres: int, sigma_factor: float) -> Kernel:
    n = views[0].shape[0]
    cidx = _even(n, n_centres)
    sidx = _even(n, 200)
    return Kernel(tuple(np.ascontiguousarray(f[cidx]) for f in views),
                  tuple(float(sigma_factor * _median_distance(f, sidx)) for f in views))


def kernel_features(x: np.ndarray, width: int, stride: int, n_centres: int = 32, sigma_factor: float = 0.5,
                    max_dims: int = MAX_DIMS, kernel: Kernel | None = None) -> np.ndarray:
    """Kernel features ``phi`` (n_rows, b) of the raw and (width >= 3) z-normalised subsequence views.

    Parameters
    ----------
    x : ndarray, shape (T, m)
        Finite values (missing values filled beforehand).
    width, stride : int
        Subsequence length and the step between subsequence starts.
    n_centres : int
        Centres per view (evenly spaced over the rows).
    sigma_factor : float
        Kernel width as a multiple of the median distance between (up to 200) subsequences.
    max_dims : int
        Piecewise means per subsequence and channel at most.
    kernel : Kernel, optional
        Centres and widths to use instead of those of ``x`` (:func:`fit_kernel`); ``n_centres`` and
        ``sigma_factor`` are then unused.

    Examples
    --------
    >>> kernel_features(np.arange(20.0)[:, None], 4, 2).shape
    (9, 18)
    """
    views = _views(x, width, stride, max_dims)
    if kernel is None:
        kernel = _kernel_of_views(views, n_centres, sigma_factor)
    if len(kernel.centres) != len(views) or any(c.shape[1] != f.shape[1] for c, f in zip(kernel.centres, views)):
        raise ValueError("the kernel was fitted to subsequences of another width or number of channels")
    n = views[0].shape[0]
    phi = np.zeros((n, sum(c.shape[0] for c in kernel.centres)))
    q = 0
    for view, f, c, sigma in zip(_VIEW_NAMES, views, kernel.centres, kernel.sigmas):
        width_sq = sigma * sigma
        if not (_TINY <= width_sq < math.inf):
            # values of 1e-160 (or 1e200) give a width whose square underflows (overflows): every
            # feature would be NaN and every split would score 0, "no change"
            raise ValueError(f"the kernel width of the {view} subsequences is {sigma:g}, whose square float64 cannot "
                             "hold: the series' values are too small or too large in their units; standardise "
                             "the series (subtract its mean, divide by its standard deviation) first")
        phi[:, q:q + c.shape[0]] = gauss_entries(_gauss_exponents(f, c, sigma))
        q += c.shape[0]
    if not np.isfinite(phi).all():
        raise ValueError("the kernel features of the series are not finite: the series holds NaN or infinity, "
                         "or values whose squared distances float64 cannot hold; fill missing values and "
                         "standardise the series first")
    return phi


@njit(cache=True)
def _accumulate(acc, accv, r):
    b = r.size
    for k in range(b):
        rk = r[k]
        if rk != 0.0:
            accv[k] += rk
            row = acc[k]
            for j in range(k + 1):
                row[j] += rk * r[j]


@njit(cache=True)
def _side_pe(ga, gb, va, na, nb, alpha, lam, work):
    """PE_alpha(A || B) from the (lower-triangular) sums of phi phi' (ga, gb) and phi (va) of A and B."""
    b = va.size
    ca = alpha / na
    cb = (1.0 - alpha) / nb
    for k in range(b):
        for j in range(k + 1):
            v = ca * ga[k, j] + cb * gb[k, j]
            work[k, j] = v
            work[j, k] = v
        work[k, k] += lam
    h = va / na
    if not cholesky_inplace(work):
        return 0.0
    theta = cholesky_factor_solve(work, h)
    s1 = 0.0
    s2 = 0.0
    for k in range(b):
        s1 += h[k] * theta[k]
        s2 += theta[k] * theta[k]
    # theta' H theta = h' theta - lam |theta|^2 since (H + lam I) theta = h
    return 0.5 * s1 + 0.5 * lam * s2 - 0.5


@njit(cache=True)
def _left_sums(phi, n_left, acc, accv, pos, to_end):
    """Sums of ``phi phi'`` (lower triangle) and ``phi`` over the rows before each ``n_left[g]``.

    Accumulation starts from ``acc`` / ``accv`` (updated in place), the sums of rows ``0..pos-1``;
    with ``to_end`` it runs on to the last row, leaving the totals in ``acc`` / ``accv``. Sums
    continued from a stored split equal those from row 0 up to rounding (the rows between splits
    are added four at a time, and the groups of four then fall differently).
    """
    n, b = phi.shape
    g_n = n_left.size
    left = np.empty((g_n, b, b))
    left_v = np.empty((g_n, b))
    for g in range(g_n):
        _add_rows(acc, accv, phi, pos, n_left[g])
        pos = max(pos, n_left[g])
        left[g] = acc
        left_v[g] = accv
    if to_end:
        _add_rows(acc, accv, phi, pos, n)
    return left, left_v


@njit(cache=True, fastmath=FASTMATH)
def _add_rows(acc, accv, phi, a, e):
    """Add rows ``a..e-1`` of ``phi`` to the sums, four rows per pass over the lower triangle (each
    load and store of the sums serves four rank-one terms; about three times the speed of one row
    per pass). A compiled loop, not a BLAS product: a BLAS call from compiled code can run Python's
    signal handlers, and a Ctrl-C there surfaced as a SystemError instead of KeyboardInterrupt."""
    b = phi.shape[1]
    i = a
    while i + 3 < e:
        r0 = phi[i]
        r1 = phi[i + 1]
        r2 = phi[i + 2]
        r3 = phi[i + 3]
        for k in range(b):
            a0 = r0[k]
            a1 = r1[k]
            a2 = r2[k]
            a3 = r3[k]
            accv[k] += (a0 + a1) + (a2 + a3)
            row = acc[k]
            for j in range(k + 1):
                row[j] += (a0 * r0[j] + a1 * r1[j]) + (a2 * r2[j] + a3 * r3[j])
        i += 4
    while i < e:
        _accumulate(acc, accv, phi[i])
        i += 1


@njit(cache=True)
def _scores(phi, left, left_v, acc, accv, n_left, first_right, alpha, lam):
    """The scaled symmetric PE at each split from its left sums and the totals ``acc`` / ``accv``."""
    n, b = phi.shape
    g_n = n_left.size
    out = np.empty(g_n)
    right = np.empty((b, b))
    right_v = np.empty(b)
    work = np.empty((b, b))
    for g in range(g_n):
        nl = n_left[g]
        nr = n - first_right[g]
        for k in range(b):
            for j in range(k + 1):
                right[k, j] = acc[k, j] - left[g, k, j]
            right_v[k] = accv[k] - left_v[g, k]
        for p in range(n_left[g], first_right[g]):  # rows crossing the split
            r = phi[p]
            for k in range(b):
                rk = r[k]
                right_v[k] -= rk
                for j in range(k + 1):
                    right[k, j] -= rk * r[j]
        if alpha > 0.0:
            pe = _side_pe(left[g], right, left_v[g], nl, nr, alpha, lam, work)
            pe += _side_pe(right, left[g], right_v, nr, nl, alpha, lam, work)
        elif nl <= nr:  # uLSIF: the one direction whose denominator is the larger side (see module docstring)
            pe = 2.0 * _side_pe(left[g], right, left_v[g], nl, nr, alpha, lam, work)
        else:
            pe = 2.0 * _side_pe(right, left[g], right_v, nr, nl, alpha, lam, work)
        out[g] = pe * nl * nr / (nl + nr)
    return out


class _Sums:
    """The grid's left sums and the totals of one feature matrix, kept to refine a split without
    a second pass over the rows."""

    def __init__(self, phi: np.ndarray, n_left: np.ndarray):
        b = phi.shape[1]
        self.acc, self.accv = np.zeros((b, b)), np.zeros(b)
        self.n_left = n_left
        self.left, self.left_v = _left_sums(phi, n_left, self.acc, self.accv, 0, True)

    def scores(self, phi, n_left, first_right, alpha, lam, base: int = -1) -> np.ndarray:
        """Scores at splits ``(n_left, first_right)``: the grid's own (``base`` < 0) or splits at or
        after grid split ``base``, whose left sums continue from that split's."""
        if base < 0:
            left, left_v = self.left, self.left_v
        else:
            left, left_v = _left_sums(phi, n_left, self.left[base].copy(), self.left_v[base].copy(),
                                      int(self.n_left[base]), False)
        return _scores(phi, left, left_v, self.acc, self.accv, n_left, first_right, alpha, lam)


def _profile(phi, n_left, first_right, alpha, lam):
    return _Sums(phi, n_left).scores(phi, n_left, first_right, alpha, lam)


def split_rows(splits, width: int, stride: int) -> tuple[np.ndarray, np.ndarray]:
    """(left row count, first right row) of each split: rows ending at or before it, starting at or after it."""
    s = np.asarray(splits, dtype=np.int64)
    return (s - width) // stride + 1, -((-s) // stride)


def split_profile(phi: np.ndarray, splits, width: int, stride: int, alpha: float = 0.1,
                  lam: float = 1e-3) -> np.ndarray:
    """Scaled symmetric PE (module docstring) at each of the increasing ``splits`` (sample indices).

    Examples
    --------
    >>> x = np.r_[np.zeros(40), np.ones(40)][:, None] + np.random.default_rng(0).normal(0, 0.1, (80, 1))
    >>> phi = kernel_features(x, 3, 1)
    >>> p = split_profile(phi, [20, 40, 60], 3, 1)
    >>> int(np.argmax(p))
    1
    """
    _check_alpha_lam(alpha, lam)
    phi = np.ascontiguousarray(phi, dtype=np.float64)
    if not np.isfinite(phi).all():  # a NaN feature fails every Cholesky solve, which scores 0
        raise ValueError("phi (the kernel features) holds NaN or infinity; make it with kernel_features from a "
                         "finite, standardised series")
    n_left, first_right = split_rows(splits, width, stride)
    n = phi.shape[0]
    if n_left.size and (np.any(np.diff(n_left) < 0) or n_left.min() < 1 or first_right.max() > n - 1):
        raise ValueError("splits must increase and leave at least one row on each side")
    return _profile(phi, n_left, first_right, float(alpha), float(lam))


def valid_splits(t_len: int, width: int, stride: int, min_rows: int) -> np.ndarray:
    """Every split (sample index) leaving at least ``min_rows`` subsequences on each side."""
    n = (t_len - width) // stride + 1
    s = np.arange(1, t_len)
    jl, jr = split_rows(s, width, stride)
    return s[(jl >= min_rows) & (n - jr >= min_rows)]


def _check_alpha_lam(alpha, lam) -> None:
    """alpha a real number in [0, 1) and lam a positive finite one; a ``ValueError`` (``TypeError``
    for a non-number) naming the parameter otherwise (a NaN ridge scored every split 0, an infinite
    one NaN)."""
    check_alpha(check_real(alpha, "alpha"))
    if not check_real(lam, "lam") > 0.0:
        raise ValueError(f"lam must be a positive number; got {lam!r}")


def check_profile_settings(alpha: float, lam: float, sigma_factor: float, n_centres: int, grid: int) -> None:
    """Raise naming the first of the split profile's settings that is out of range.

    The profile is fitted lazily (offline per segment, streaming at a window's first test), so the
    detectors call this when they are built: a bad setting is then an error at once, not at the
    first test, and never a silent one (``grid = 0`` scored no split and set an infinite threshold).

    >>> check_profile_settings(alpha=0.1, lam=1e-3, sigma_factor=0.5, n_centres=32, grid=200)
    >>> check_profile_settings(alpha=0.1, lam=1e-3, sigma_factor=0.5, n_centres=32, grid=0)
    Traceback (most recent call last):
    ...
    ValueError: grid must be an integer >= 1; got 0
    """
    _check_alpha_lam(alpha, lam)
    if not check_real(sigma_factor, "sigma_factor") > 0.0:
        raise ValueError(f"sigma_factor must be a positive number; got {sigma_factor!r}")
    check_int(n_centres, "n_centres", minimum=1)
    check_int(grid, "grid", minimum=1)


@dataclass(frozen=True)
class SplitProfile:
    """The split profile of one configuration (see the module docstring).

    Parameters
    ----------
    width, stride : int
        Subsequence length and step between subsequence starts (samples).
    alpha, lam : float
        RuLSIF mixture weight and ridge.
    n_centres : int
        Kernel centres per view (raw, z-normalised).
    sigma_factor : float
        Kernel width in units of the median distance between subsequences.
    grid : int
        Splits scored when the maximum is searched (evenly spaced over the valid ones); the best
        one is then refined at every split between its grid neighbours.
    min_rows : int
        Subsequences on each side of a split at least; 0 means max(5, 2 width / stride).
    kernel : Kernel, optional
        Centres and widths kept for every series (:meth:`with_kernel_of`); by default each series
        gets its own (:func:`fit_kernel`).

    Examples
    --------
    >>> SplitProfile(width=10, stride=2).rows_min
    10
    """

    width: int
    stride: int = 1
    alpha: float = 0.1
    lam: float = 1e-3
    n_centres: int = 32
    sigma_factor: float = 0.5
    grid: int = 200
    min_rows: int = 0
    kernel: Kernel | None = None

    def __post_init__(self):
        check_profile_settings(alpha=self.alpha, lam=self.lam, sigma_factor=self.sigma_factor,
                               n_centres=self.n_centres, grid=self.grid)
        check_int(self.width, "width", minimum=1)
        check_int(self.stride, "stride", minimum=1)
        check_int(self.min_rows, "min_rows", minimum=0)

    @property
    def rows_min(self) -> int:
        return self.min_rows or max(5, -(-2 * self.width // self.stride))

    def min_length(self) -> int:
        """Shortest series with at least one valid split."""
        return 2 * self.rows_min * self.stride + self.width

    def candidates(self, t_len: int) -> np.ndarray:
        s = valid_splits(t_len, self.width, self.stride, self.rows_min)
        if s.size > self.grid:
            s = s[_even(s.size, self.grid)]
        return s

    def features(self, x: np.ndarray) -> np.ndarray:
        """Kernel features (n_rows, b) of the subsequences of ``x`` (:func:`kernel_features`)."""
        return kernel_features(_rows(x), self.width, self.stride, self.n_centres, self.sigma_factor,
                               kernel=self.kernel)

    def with_kernel_of(self, x: np.ndarray) -> "SplitProfile":
        """This profile with the kernel of ``x`` kept for every later series (:class:`Kernel`)."""
        return replace(self, kernel=fit_kernel(_rows(x), self.width, self.stride, self.n_centres, self.sigma_factor))

    def profile(self, x: np.ndarray, splits) -> np.ndarray:
        return split_profile(self.features(x), splits, self.width, self.stride, self.alpha, self.lam)

    def maximum(self, x: np.ndarray) -> float:
        """Largest score over the grid of candidate splits (-inf when there is none)."""
        return self.maximum_of_rows(self.features(x), _rows(x).shape[0])

    def maximum_of_rows(self, phi: np.ndarray, t_len: int) -> float:
        """:meth:`maximum` of a series of ``t_len`` samples whose subsequence rows have the features
        ``phi``, in the order given: a null that rearranges the rows scores them here."""
        s = self.candidates(int(t_len))
        return float(np.max(split_profile(phi, s, self.width, self.stride, self.alpha, self.lam))) if s.size \
            else -math.inf

    def best(self, x: np.ndarray, trace: bool = False):
        """(grid maximum, refined split) of ``x``, and the grid profile ``(splits, scores)`` if ``trace``.

        The grid maximum is the test statistic (the surrogates are scored on the same grid); the
        split is the best one between the grid neighbours of the grid's best. ``(-inf, -1)`` when
        ``x`` is too short for any split.
        """
        x = _rows(x)
        s = self.candidates(x.shape[0])
        if s.size == 0:
            return (-math.inf, -1, (s, np.zeros(0))) if trace else (-math.inf, -1)
        phi = self.features(x)
        n_left, first_right = split_rows(s, self.width, self.stride)
        sums = _Sums(phi, n_left)
        p = sums.scores(phi, n_left, first_right, self.alpha, self.lam)
        g = int(np.argmax(p))
        split = int(s[g])
        every = valid_splits(x.shape[0], self.width, self.stride, self.rows_min)
        if every.size > s.size:
            g0 = max(0, g - 1)
            lo, hi = s[g0], s[min(s.size - 1, g + 1)]
            fine = every[(every >= lo) & (every <= hi)]
            fl, fr = split_rows(fine, self.width, self.stride)
            split = int(fine[int(np.argmax(sums.scores(phi, fl, fr, self.alpha, self.lam, base=g0)))])
        out = (float(p[g]), split)
        return (*out, (s, p)) if trace else out


def _rows(x) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    return x[:, None] if x.ndim == 1 else x


@dataclass(frozen=True)
class MultiWidthProfile:
    """The largest of several :class:`SplitProfile` s (one per subsequence width) at every use.

    A series whose period is long can change in its fine shape (seen by a short subsequence) or in
    its whole cycle (seen by a long one); the statistic is the larger of the profiles' maxima, on
    the same split grid rule, so a test that scores its surrogates with :meth:`maximum` accounts
    for the choice. Profiles whose width leaves no valid split of a series are skipped for it.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> x = np.r_[rng.normal(0, 1, 300), rng.normal(0, 4, 300)]
    >>> both = MultiWidthProfile((SplitProfile(width=3), SplitProfile(width=12, stride=3)))
    >>> score, split = both.best(x)
    >>> abs(split - 300) <= 10 and score == max(p.best(x)[0] for p in both.profiles)
    True
    """

    profiles: tuple

    def min_length(self) -> int:
        """Shortest series with at least one valid split (by the narrowest profile)."""
        return min(p.min_length() for p in self.profiles)

    def maximum(self, x: np.ndarray) -> float:
        t_len = _rows(x).shape[0]
        return max((p.maximum(x) for p in self.profiles if p.min_length() <= t_len), default=-math.inf)

    def best(self, x: np.ndarray, trace: bool = False):
        """(maximum, split) of the profile with the largest maximum (and its grid trace if ``trace``)."""
        t_len = _rows(x).shape[0]
        out = [p.best(x, trace=trace) for p in self.profiles if p.min_length() <= t_len]
        if not out:
            return (-math.inf, -1, (np.zeros(0, dtype=np.int64), np.zeros(0))) if trace else (-math.inf, -1)
        return max(out, key=lambda r: r[0])


@dataclass(frozen=True)
class ChannelwiseProfile:
    """The largest of one profile applied to each channel of a series on its own.

    The joint embedding of several channels compares their joint states before and after a split.
    When the channels have cycles, the phase of one cycle against another wanders, so the joint
    states of a long window differ between its ends although no channel changes, and a null that
    simulates each channel on its own (the AR surrogates) never wanders so: five independent
    jittered cycles of period 24 got a change point in every series of 600 samples or more. Scored
    channel by channel, a profile sees each channel's own changes and not the phases between them.
    The statistic is the largest channel maximum, and a test that scores its surrogates with
    :meth:`maximum` accounts for the choice among the channels.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> x = rng.normal(size=(600, 3))
    >>> x[300:, 1] *= 4  # one channel's spread changes
    >>> each = ChannelwiseProfile(SplitProfile(width=3))
    >>> score, split = each.best(x)
    >>> abs(split - 300) <= 10 and score == max(each.profile.best(x[:, [c]])[0] for c in range(3))
    True
    """

    profile: object  # a SplitProfile or a MultiWidthProfile

    @property
    def profiles(self) -> tuple:
        """The :class:`SplitProfile` s applied to each channel."""
        return getattr(self.profile, "profiles", (self.profile,))

    def min_length(self) -> int:
        """Shortest series with at least one valid split."""
        return self.profile.min_length()

    def maximum(self, x: np.ndarray) -> float:
        x = _rows(x)
        return max(self.profile.maximum(x[:, c:c + 1]) for c in range(x.shape[1]))

    def best(self, x: np.ndarray, trace: bool = False):
        """(maximum, split) of the channel with the largest maximum (and its grid trace if ``trace``)."""
        x = _rows(x)
        return max((self.profile.best(x[:, c:c + 1], trace=trace) for c in range(x.shape[1])), key=lambda r: r[0])

"""LSDD: least-squares density-difference estimation (Sugiyama et al. 2012; Neural Computation 2013).

The difference ``f(x) = p(x) - p'(x)`` is fitted directly with a Gaussian model
``g(x) = sum_l theta_l K(x, c_l)`` whose centres come from BOTH sample sets::

    H_ll' = (pi sigma^2)^(d/2) exp(-||c_l - c_l'||^2 / (4 sigma^2))     (exact integral of K_l K_l')
    h_l   = mean_i K(x_i, c_l) - mean_i' K(x'_i', c_l)
    theta = (H + lam I)^-1 h,     L2-hat = 2 h'theta - theta'H theta = h'theta + lam theta'theta

The last identity (from ``(H + lam I) theta = h``) is how the estimate is computed: with the Cholesky
factor ``L`` of ``H + lam I``, ``h'theta = ||L^-1 h||^2``, so the estimate is a sum of two squares and
can never come out negative, not even by rounding.

Model selection is T-fold cross-validation (T = 5): each set is split on its own, centres of a fold
fit come from its training samples only, and the hold-out score
``int f_t^2 - 2 mean_{X_t} f_t + 2 mean_{X'_t} f_t`` is minimised. ``H`` depends only on the centres
and sigma, so one eigendecomposition per (fold, sigma) serves the whole lambda path.

Choices not fixed by the paper (documented here; the paper leaves them open):

* ``n_centres = 200``: the paper uses all ``n + n'`` samples; change-detection windows (r = 50) have
  100, so they keep every sample, while the cap bounds the per-(fold, sigma) eigendecomposition at
  200^3 for large batches (the reference notes suggest a cap of 200-300). A larger set is subsampled
  per set in proportion to its size, deterministically from ``seed``.
* sigma grid ``median x logspace(-0.5, 1, 9)``: the lower end matters in d >= 5, where
  ``0.1 x median`` lets CV pick non-overlapping kernels and over-estimate L2 several-fold at mu = 0.
* lambda grid ``logspace(-3, 1, 9)`` (absolute, as in the paper).
* The rows of each set are put in lexicographic order first, and centre subsets and folds are drawn
  with a generator keyed by ``(seed, hash of the set)``: the fit is a function of the two sample
  *sets* (bit for bit, whatever the row order), and swapping the sets gives the same model with the
  sign of ``f`` flipped (up to rounding).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


import numpy as np
from numba import njit

from .kernels import MIN_SCALE, check_width, gauss_from_sq, gauss_kernel, sq_dist
from .linalg import cholesky_inplace
from .params import check_int
from .sampling import (canonical_order, check_folds, check_n_folds, cv_folds, int_seed, pick_rows,  # noqa: F401
                       set_rng)  # (re-exported)
from .selection import lambda_grid, sigma_grid
from .validation import as_samples, positive_grid

#: sigma = factor x median pairwise distance of the pooled samples (see module docstring).
LSDD_SIGMA_FACTORS = np.logspace(-0.5, 1.0, 9)
#: default cap on the number of Gaussian centres.
LSDD_N_CENTRES = 200
#: number of cross-validation folds (paper: T = 5).
LSDD_FOLDS = 5


@dataclass(frozen=True)
class DifferenceFit:
    """A fitted density difference ``f = p - p'``.

    Attributes
    ----------
    sigma, lam : float
        Kernel width and ridge strength of the final fit.
    centres : ndarray, shape (b, d)
        Gaussian centres (samples of both sets).
    theta : ndarray, shape (b,)
        Coefficients (either sign).
    l2 : float
        Bias-corrected L2-distance estimate ``2 h'theta - theta'H theta`` (>= 0).
    cv : float
        Cross-validation score of the chosen (sigma, lam); NaN when both were given.
    cv_scores : ndarray, shape (n_sigma, n_lambda)
        Mean hold-out score of every grid point (empty when both were given).
    sigmas, lams : ndarray
        The grids that were searched.
    """

    sigma: float
    lam: float
    centres: np.ndarray
    theta: np.ndarray
    l2: float
    cv: float = float("nan")
    cv_scores: np.ndarray = field(default_factory=lambda: np.empty((0, 0)))
    sigmas: np.ndarray = field(default_factory=lambda: np.empty(0))
    lams: np.ndarray = field(default_factory=lambda: np.empty(0))

    def difference(self, x) -> np.ndarray:
        """The fitted ``f(x) = p(x) - p'(x)`` at the rows of ``x``, shape (n,)."""
        x = as_samples(x, "x", dim=self.centres.shape[1])
        return gauss_kernel(x, self.centres, self.sigma) @ self.theta


# --------------------------------------------------------------------------- building blocks


def h_scale(sigma: float, d: int) -> float:
    """``(pi sigma^2)^(d/2)``, the integral of a squared kernel; inf (not an exception) on overflow."""
    with np.errstate(over="ignore"):
        return float(np.power(np.float64(np.pi * sigma * sigma), d / 2.0))


def h_matrix(centres: np.ndarray, sigma: float) -> np.ndarray:
    """``H_ll' = (pi sigma^2)^(d/2) exp(-||c_l - c_l'||^2 / (4 sigma^2))``, shape (b, b)."""
    # exp(-D/(4 s^2)) is the usual kernel with width sqrt(2) s
    return h_scale(sigma, centres.shape[1]) * gauss_from_sq(sq_dist(centres, centres), np.sqrt(2.0) * sigma)


def h_vector(x: np.ndarray, x_prime: np.ndarray, centres: np.ndarray, sigma: float) -> np.ndarray:
    """``h_l = mean_i K(x_i, c_l) - mean_i' K(x'_i', c_l)``, shape (b,)."""
    return gauss_kernel(x, centres, sigma).mean(axis=0) - gauss_kernel(x_prime, centres, sigma).mean(axis=0)


@njit(cache=True)
def lsdd_solve(hmat, h, lam):
    """``theta = (H + lam I)^-1 h`` and ``L2 = ||L^-1 h||^2 + lam ||theta||^2`` (Cholesky).

    Returns ``(theta, l2, ok)``; ``ok`` is False when ``H + lam I`` is not numerically positive
    definite (then theta and l2 are NaN and the caller must fall back).
    """
    b = h.shape[0]
    a = hmat.copy()
    for i in range(b):
        a[i, i] += lam
    theta = np.empty(b)
    if not cholesky_inplace(a):
        theta[:] = np.nan
        return theta, np.nan, False
    z = np.empty(b)
    for i in range(b):
        s = h[i]
        for k in range(i):
            s -= a[i, k] * z[k]
        z[i] = s / a[i, i]
    for i in range(b - 1, -1, -1):
        s = z[i]
        for k in range(i + 1, b):
            s -= a[k, i] * theta[k]
        theta[i] = s / a[i, i]
    zz = 0.0
    tt = 0.0
    for i in range(b):
        zz += z[i] * z[i]
        tt += theta[i] * theta[i]
    return theta, zz + lam * tt, True


def ridge_solve(h_mat: np.ndarray, h: np.ndarray, lam: float) -> tuple[np.ndarray, float]:
    """``theta = (H + lam I)^-1 h`` and ``L2 = h'theta + lam theta'theta`` (a sum of squares, >= 0).

    Cholesky first; when ``H + lam I`` is numerically indefinite (lam tiny next to ``||H||``) the
    eigendecomposition with eigenvalues clipped at zero is used instead.
    """
    h_mat = np.ascontiguousarray(h_mat, dtype=np.float64)
    h = np.ascontiguousarray(h, dtype=np.float64)
    theta, l2, ok = lsdd_solve(h_mat, h, float(lam))
    if not ok:
        mu, u = np.linalg.eigh(h_mat)
        mu = np.maximum(mu, 0.0)
        g = u.T @ h
        theta = u @ (g / (mu + lam))
        l2 = float(np.sum(g * g * (mu + 2.0 * lam) / (mu + lam) ** 2))
    return theta, float(l2)


def split_centres(x, x_prime, n_centres: int, rng_x, rng_xp, pool_x=None, pool_xp=None):
    """Indices of the centres among ``x`` and ``x_prime`` (each restricted to its pool).

    Each set contributes in proportion to its size, ``round(b n_i / (n + n'))``, so two equally
    large sets contribute equally and both always contribute.
    """
    pool_x = np.arange(x.shape[0]) if pool_x is None else pool_x
    pool_xp = np.arange(x_prime.shape[0]) if pool_xp is None else pool_xp
    total = pool_x.size + pool_xp.size
    if n_centres >= total:
        return np.sort(pool_x), np.sort(pool_xp)
    kx = min(pool_x.size, max(1, int(round(n_centres * pool_x.size / total))))
    kxp = min(pool_xp.size, max(1, int(round(n_centres * pool_xp.size / total))))
    return pick_rows(x, pool_x, kx, rng_x), pick_rows(x_prime, pool_xp, kxp, rng_xp)



def pooled_spread(x: np.ndarray, x_prime: np.ndarray) -> float:
    """Euclidean length of the per-feature ranges of the two sets pooled: no two rows are further
    apart (``math.hypot`` scales, so ranges of 1e-170 do not underflow to a spread of 0).

    >>> pooled_spread(np.array([[0.0, 0.0]]), np.array([[3.0, 4.0]]))
    5.0
    """
    with np.errstate(over="ignore"):
        ranges = np.maximum(x.max(axis=0), x_prime.max(axis=0)) - np.minimum(x.min(axis=0), x_prime.min(axis=0))
    return math.hypot(*ranges.tolist())


# --------------------------------------------------------------------------- cross-validation


def lsdd_cv_scores(x, x_prime, sigmas, lams, *, n_centres: int = LSDD_N_CENTRES, n_folds: int = LSDD_FOLDS,
                   seed=0, folds: str = "random") -> np.ndarray:
    """Mean T-fold hold-out score for every (sigma, lambda), shape (n_sigma, n_lambda); lower is better.

    Fold t fits on the other folds of each set, with centres drawn from those training samples only,
    and scores ``int f_t^2 - 2 mean_{X_t} f_t + 2 mean_{X'_t} f_t``. Per (fold, sigma) the matrix H is
    eigendecomposed once: with ``g = U'h`` and ``q = U'h_holdout`` the score of every lambda is
    ``sum_k mu_k g_k^2/(mu_k+lam)^2 - 2 q_k g_k/(mu_k+lam)``.
    """
    sigmas = positive_grid(sigmas, "sigmas")
    lams = positive_grid(lams, "lams")
    seed = int_seed(seed)
    n, d = x.shape
    n_p = x_prime.shape[0]
    n_folds = min(int(n_folds), n, n_p)
    rng_x, rng_xp = set_rng(seed, x, 1), set_rng(seed, x_prime, 1)
    lab_x = cv_folds(x, n_folds, rng_x, folds)
    lab_xp = cv_folds(x_prime, n_folds, rng_xp, folds)
    total = np.zeros((sigmas.size, lams.size))
    for t in range(n_folds):
        tr_x, ho_x = np.flatnonzero(lab_x != t), np.flatnonzero(lab_x == t)
        tr_xp, ho_xp = np.flatnonzero(lab_xp != t), np.flatnonzero(lab_xp == t)
        cx, cxp = split_centres(x, x_prime, n_centres, rng_x, rng_xp, tr_x, tr_xp)
        c = np.concatenate([x[cx], x_prime[cxp]])
        d_cc = sq_dist(c, c)
        d_trx, d_trxp = sq_dist(x[tr_x], c), sq_dist(x_prime[tr_xp], c)
        d_hox, d_hoxp = sq_dist(x[ho_x], c), sq_dist(x_prime[ho_xp], c)
        for si, s in enumerate(sigmas):
            scale = h_scale(s, d)
            if not np.isfinite(scale):
                total[si] = np.inf  # (pi s^2)^(d/2) overflows: no usable model at this width
                continue
            h_mat = scale * gauss_from_sq(d_cc, np.sqrt(2.0) * s)
            h = gauss_from_sq(d_trx, s).mean(axis=0) - gauss_from_sq(d_trxp, s).mean(axis=0)
            h_ho = gauss_from_sq(d_hox, s).mean(axis=0) - gauss_from_sq(d_hoxp, s).mean(axis=0)
            mu, u = np.linalg.eigh(h_mat)
            mu = np.maximum(mu, 0.0)  # H is PSD; negative eigenvalues are rounding
            g = u.T @ h
            q = u.T @ h_ho
            den = mu[:, None] + lams[None, :]
            score = np.sum(mu[:, None] * (g * g)[:, None] / den**2 - 2.0 * (q * g)[:, None] / den, axis=0)
            total[si] += score
    total /= n_folds
    return np.where(np.isfinite(total), total, np.inf)


# --------------------------------------------------------------------------- public fit


def fit_lsdd(
    x,
    x_prime,
    sigma=None,
    lam=None,
    *,
    n_centres: int = LSDD_N_CENTRES,
    centres=None,
    sigma_factors=None,
    lambdas=None,
    n_folds: int = LSDD_FOLDS,
    folds: str = "random",
    seed=0,
) -> DifferenceFit:
    """Fit the density difference ``f = p - p'`` of samples ``x ~ p`` and ``x_prime ~ p'``.

    Parameters
    ----------
    x, x_prime : array-like, shape (n, d) or (n,)
        The two sample sets (at least 2 rows each, finite, same number of features).
    sigma, lam : float or sequence, optional
        Kernel width and (absolute) ridge strength. None searches the default grid
        (``sigma_factors`` x pooled median distance; ``lambdas``); a sequence is searched as given;
        a float is used as is. The search is ``n_folds``-fold cross-validation.
    n_centres : int
        Cap b on the number of centres, drawn from both sets (all samples when n + n' <= b).
    centres : array-like, shape (b, d), optional
        Explicit centres for the final fit (cross-validation still draws its own from the folds).
    folds : {"random", "blocks"}
        Random folds (the fit then depends only on the two sample sets, not on the row order), or
        contiguous blocks in the given row order (time-ordered windows of overlapping subsequences).
    seed : int
        Drives the centre subsets and the folds.

    The L2 distance has the units of the data (1/length^d: it scales as ``s^-d`` when the data are
    multiplied by ``s``), and lambda's grid is absolute while ``H`` scales as ``s^d``: standardise the
    data first (in large units the fit is almost unregularised, in small ones over-regularised).
    Samples whose spread is below :data:`~ratiowatch.core.kernels.MIN_SCALE` (about 1e-150) are
    refused when sigma is searched: no kernel width of the grid resolves them.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> same = fit_lsdd(rng.normal(size=(100, 1)), rng.normal(size=(100, 1)))
    >>> apart = fit_lsdd(rng.normal(size=(100, 1)), rng.normal(1.5, 1.0, size=(100, 1)))
    >>> apart.l2 > same.l2 >= 0.0
    True
    """
    x = as_samples(x, "x (first sample set)", min_samples=2)
    x_prime = as_samples(x_prime, "x_prime (second sample set)", min_samples=2, dim=x.shape[1])
    n_centres = check_int(n_centres, "n_centres")
    if n_centres < 2:
        raise ValueError(f"n_centres must be an integer >= 2 (one centre per set at least); got {n_centres}")
    seed = int_seed(seed)
    if check_folds(folds) == "random":
        # work on the rows in canonical order: the result is then a function of the two sets, bit for bit
        x, x_prime = x[canonical_order(x)], x_prime[canonical_order(x_prime)]
    n_folds = check_n_folds(n_folds)
    if sigma is None:
        spread = pooled_spread(x, x_prime)
        if 0.0 < spread < MIN_SCALE:
            raise ValueError(f"the samples' spread ({spread:.3g}) is below what the Gaussian kernel can resolve in "
                             f"float64 ({MIN_SCALE:.1e}): squared distances that small underflow, every kernel value "
                             "is 1 and the L2 distance would be 0 whatever the two sets; rescale the samples "
                             "(standardise them) first")
        factors = LSDD_SIGMA_FACTORS if sigma_factors is None else sigma_factors
        sigmas = sigma_grid(x, x_prime, factors=factors, seed=0)
        if not np.all(np.isfinite(sigmas)):
            raise ValueError("pairwise distances of the data overflow float64 (values up to "
                             f"{max(np.abs(x).max(), np.abs(x_prime).max()):.3g}); "
                             "rescale the data (e.g. standardise it) first")
    else:
        sigmas = np.array([check_width(s) for s in positive_grid(sigma, "sigma")])
    lams = lambda_grid(lambdas) if lam is None else positive_grid(lam, "lam")

    cv_best, cv_scores = float("nan"), np.empty((0, 0))
    if sigmas.size > 1 or lams.size > 1:
        cv_scores = lsdd_cv_scores(x, x_prime, sigmas, lams, n_centres=n_centres, n_folds=n_folds, seed=seed,
                                   folds=folds)
        # first minimum in sigma-major order
        si, li = np.unravel_index(int(np.argmin(cv_scores)), cv_scores.shape)
        cv_best = float(cv_scores[si, li])
        sig, lam_ = float(sigmas[si]), float(lams[li])
    else:
        sig, lam_ = float(sigmas[0]), float(lams[0])

    if centres is None:
        cx, cxp = split_centres(x, x_prime, n_centres, set_rng(seed, x, 0), set_rng(seed, x_prime, 0))
        c = np.concatenate([x[cx], x_prime[cxp]])
    else:
        c = as_samples(centres, "centres", dim=x.shape[1])
    if not np.isfinite(h_scale(sig, x.shape[1])):
        raise ValueError(f"(pi sigma^2)^(d/2) overflows for sigma={sig:g}, d={x.shape[1]}; "
                         "rescale the data so that sigma is of order one")
    theta, l2 = ridge_solve(h_matrix(c, sig), h_vector(x, x_prime, c, sig), lam_)
    if not (np.isfinite(l2) and np.all(np.isfinite(theta))):
        raise ValueError(f"LSDD fit is not finite for sigma={sig:g}, lam={lam_:g}; "
                         "use a larger lam or rescale the data")
    return DifferenceFit(sigma=sig, lam=lam_, centres=c, theta=theta, l2=l2, cv=cv_best,
                         cv_scores=cv_scores, sigmas=sigmas, lams=lams)


def lsdd_l2(x, x_prime, **kwargs) -> float:
    """Shortcut: the L2-distance estimate of :func:`fit_lsdd`.

    Examples
    --------
    >>> x = np.linspace(0.0, 1.0, 20)
    >>> lsdd_l2(x, x)
    0.0
    """
    return fit_lsdd(x, x_prime, **kwargs).l2

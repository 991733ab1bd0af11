"""KLIEP: Kullback-Leibler importance estimation (Sugiyama et al.; references 000 section 5.4 and 003).

Ratio direction: ``r(x) = p_nu(x) / p_de(x)``. The numerator samples carry the Gaussian centres and the
log-likelihood, the denominator samples only the normalisation ``mean_de r = 1``::

    max_alpha  mean_j log (A alpha)_j       A_jl = K(x_nu_j, c_l)
    s.t.       b'alpha = 1,  alpha >= 0     b_l  = mean_i K(x_de_i, c_l)

solved by the paper's projected gradient ascent (003 Fig. 1): a step ``alpha + eps A'(1 / A alpha)``,
then projection onto ``b'alpha = 1``, clipping at zero and renormalisation. A step is kept only if
it raises the objective; ``eps`` runs through a decreasing schedule with at most ``max_iter`` steps
per value. With the defaults (init ``alpha = 1`` projected, ``eps = 10^3 .. 10^-3``, 100 steps)
this is exactly the iteration of the reference code and of ``densratio``.

Logs are floored: ``log max(v, LOG_FLOOR_VALUE)`` (and the gradient uses the same floor), so a
numerator point out of reach of every centre costs a large finite penalty instead of ``-inf``, and no
NaN can enter the iteration (non-finite or non-improving steps are rejected).

The KL estimate is the fitted objective, ``KL(p_nu || p_de) ~ mean_j log r(x_nu_j)``.

sigma is chosen by likelihood cross-validation over the numerator samples only (R = 5 folds; the
denominator is never split). The centres of a fold fit are drawn from that fold's training samples,
so no held-out point is ever a centre: with fixed centres held-out points score their own kernel and
LCV collapses to the smallest sigma (on the artificial data of Hido et al. 2011 it always picked the
grid minimum).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numba import njit

from .kernels import data_scale, gauss_kernel, median_distance, scaled_width
from .params import check_int
from .sampling import canonical_order, check_folds, check_n_folds, cv_folds, int_seed, pick_rows, set_rng
from .selection import SIGMA_FACTORS
from .validation import as_samples, check_pair, positive_grid

#: floor applied before every log (and in the gradient's 1/(A alpha)).
LOG_FLOOR_VALUE = 1e-300
#: step sizes of the projected gradient ascent, as in the reference code.
EPS_SCHEDULE = 10.0 ** np.arange(3, -4, -1)
#: maximum number of accepted steps per step size.
MAX_ITER = 100
#: number of likelihood cross-validation folds.
KLIEP_FOLDS = 5
#: default number of centres (drawn from the numerator samples).
KLIEP_N_CENTRES = 100


@dataclass(frozen=True)
class KLIEPFit:
    """A fitted KLIEP importance ``r = p_nu / p_de``.

    Attributes
    ----------
    sigma : float
        Kernel width of the final fit.
    centres : ndarray, shape (b, d)
        Gaussian centres (numerator samples).
    theta : ndarray, shape (b,)
        Non-negative coefficients (alpha in the papers), ``mean_de r = 1``.
    kl : float
        ``mean_nu log r`` (floored logs), the KL(p_nu || p_de) estimate.
    lcv : float
        Likelihood-CV score of the chosen sigma (NaN when sigma was given).
    lcv_scores, sigmas : ndarray
        Score of every candidate sigma, and the candidates.
    scale : float
        Power of two the data were divided by for the fit (:func:`data_scale`); ``ratio`` divides
        by it too, so tiny or huge values give the same ratio as their rescaled copies.
    """

    sigma: float
    centres: np.ndarray
    theta: np.ndarray
    kl: float
    lcv: float = float("nan")
    lcv_scores: np.ndarray = field(default_factory=lambda: np.empty(0))
    sigmas: np.ndarray = field(default_factory=lambda: np.empty(0))
    scale: float = 1.0

    def ratio(self, x) -> np.ndarray:
        """The fitted ratio at the rows of ``x``, shape (n,); small values mean "unlike the numerator"."""
        x = as_samples(x, "x", dim=self.centres.shape[1])
        s = self.scale
        return gauss_kernel(x / s, self.centres / s, scaled_width(self.sigma, s)) @ self.theta


# --------------------------------------------------------------------------- numba kernels


@njit(cache=True)
def _mean_log(a, alpha, floor, av):
    """``mean_j log max((A alpha)_j, floor)``; ``A alpha`` is written into ``av``."""
    n, b = a.shape
    total = 0.0
    for j in range(n):
        s = 0.0
        for l in range(b):
            s += a[j, l] * alpha[l]
        av[j] = s
        total += np.log(max(s, floor))
    return total / n


@njit(cache=True)
def _project(alpha, bvec, c):
    """Onto ``b'alpha = 1``, clip at 0, renormalise (in place). False if the result is unusable."""
    b = alpha.shape[0]
    s = 0.0
    for l in range(b):
        s += bvec[l] * alpha[l]
    shift = 1.0 - s
    for l in range(b):
        v = alpha[l] + shift * c[l]
        alpha[l] = v if v > 0.0 else 0.0
    s = 0.0
    for l in range(b):
        s += bvec[l] * alpha[l]
    if not (s > 0.0) or not np.isfinite(s):
        return False
    for l in range(b):
        alpha[l] = alpha[l] / s
    return True


@njit(cache=True)
def kliep_ascent(a, bvec, alpha0, eps_schedule, max_iter, floor):
    """Projected gradient ascent of ``mean log(A alpha)`` on ``{b'alpha = 1, alpha >= 0}``.

    ``alpha0`` is projected first (a warm start may come from anywhere). Returns ``(alpha, score)``.
    ``b'b`` must be positive (the caller checks).
    """
    n, b = a.shape
    bb = 0.0
    for l in range(b):
        bb += bvec[l] * bvec[l]
    c = bvec / bb
    alpha = alpha0.copy()
    _project(alpha, bvec, c)
    av = np.empty(n)
    score = _mean_log(a, alpha, floor, av)
    cand = np.empty(b)
    av_new = np.empty(n)
    for e in range(eps_schedule.shape[0]):
        eps = eps_schedule[e]
        for _ in range(max_iter):
            for l in range(b):
                cand[l] = 0.0
            for j in range(n):
                w = 1.0 / max(av[j], floor)
                for l in range(b):
                    cand[l] += a[j, l] * w
            for l in range(b):
                cand[l] = alpha[l] + eps * cand[l]
            if not _project(cand, bvec, c):
                break
            score_new = _mean_log(a, cand, floor, av_new)
            if not (score_new > score):  # also rejects NaN
                break
            alpha[:] = cand
            av[:] = av_new
            score = score_new
    return alpha, score


# --------------------------------------------------------------------------- solver front end


def _check_reach(bvec: np.ndarray, sigma: float) -> None:
    if not (float(bvec @ bvec) > 0.0):
        raise ValueError(
            f"sigma={sigma:g} is too small for these data: every kernel value at the denominator "
            "samples underflows to 0, so the constraint mean_de r = 1 cannot be met; use a larger sigma")


def kliep_solve(k_nu: np.ndarray, k_de_mean: np.ndarray, *, alpha0=None, eps_schedule=EPS_SCHEDULE,
                max_iter: int = MAX_ITER, floor: float = LOG_FLOOR_VALUE) -> tuple[np.ndarray, float]:
    """Run the KLIEP ascent on precomputed kernels: ``k_nu`` (n_nu, b), ``k_de_mean`` (b,).

    Returns the coefficients and ``mean log(k_nu alpha)`` (floored). ``alpha0`` defaults to ones.
    """
    k_nu = np.ascontiguousarray(k_nu, dtype=np.float64)
    bvec = np.ascontiguousarray(k_de_mean, dtype=np.float64)
    if not (float(bvec @ bvec) > 0.0):
        raise ValueError("the denominator kernel means are all 0 (kernel width too small for the data)")
    a0 = np.ones(k_nu.shape[1]) if alpha0 is None else np.array(alpha0, dtype=np.float64)
    alpha, score = kliep_ascent(k_nu, bvec, a0, np.asarray(eps_schedule, dtype=np.float64), int(max_iter),
                                float(floor))
    return alpha, float(score)


def lcv_folds(x_nu: np.ndarray, n_folds: int, n_centres: int, seed=0,
              folds: str = "random") -> tuple[np.ndarray, list[np.ndarray]]:
    """Fold label of every numerator row and, per fold, the row indices of its centres.

    Centres of fold r are drawn from the rows NOT in fold r (at most ``n_centres``), independently of
    the row order. ``folds="blocks"`` uses contiguous blocks of the given row order (time-ordered
    samples), ``"random"`` a random split.
    """
    seed = int_seed(seed)
    n = x_nu.shape[0]
    n_folds = min(int(n_folds), n)
    rng = set_rng(seed, x_nu, 11)
    labels = cv_folds(x_nu, n_folds, rng, folds)
    centres = [pick_rows(x_nu, np.flatnonzero(labels != r), int(n_centres), rng) for r in range(n_folds)]
    return labels, centres


def kliep_lcv_scores(x_nu, x_de, sigmas, *, n_centres: int = KLIEP_N_CENTRES, n_folds: int = KLIEP_FOLDS,
                     seed=0, folds: str = "random", eps_schedule=EPS_SCHEDULE,
                     max_iter: int = MAX_ITER) -> np.ndarray:
    """Mean held-out log-likelihood ``mean_{x in fold r} log r_r(x)`` per sigma (higher is better).

    A fold whose centres reach no denominator sample at this sigma (all kernel values underflow, so
    ``mean_de r = 1`` cannot be met) has no model: its held-out points score ``r = 0``, i.e. the log
    floor, a finite but prohibitive penalty.
    """
    x_nu, x_de = check_pair(x_nu, x_de, min_samples=2)
    sigmas = positive_grid(sigmas, "sigmas")
    labels, fold_centres = lcv_folds(x_nu, n_folds, n_centres, seed, folds)
    out = np.zeros(sigmas.size)
    for r, cidx in enumerate(fold_centres):
        tr, ho = np.flatnonzero(labels != r), np.flatnonzero(labels == r)
        c = x_nu[cidx]
        for si, s in enumerate(sigmas):
            bvec = gauss_kernel(x_de, c, s).mean(axis=0)
            if not (float(bvec @ bvec) > 0.0):
                out[si] += np.log(LOG_FLOOR_VALUE)
                continue
            alpha, _ = kliep_solve(gauss_kernel(x_nu[tr], c, s), bvec, eps_schedule=eps_schedule,
                                   max_iter=max_iter)
            w = gauss_kernel(x_nu[ho], c, s) @ alpha
            out[si] += float(np.mean(np.log(np.maximum(w, LOG_FLOOR_VALUE))))
    out /= len(fold_centres)
    return np.where(np.isnan(out), -np.inf, out)


def fit_kliep(
    x_nu,
    x_de,
    sigma=None,
    *,
    n_centres: int = KLIEP_N_CENTRES,
    centres=None,
    sigma_factors=None,
    n_folds: int = KLIEP_FOLDS,
    folds: str = "random",
    seed=0,
    eps_schedule=EPS_SCHEDULE,
    max_iter: int = MAX_ITER,
) -> KLIEPFit:
    """Fit the importance ``p_nu / p_de`` by KLIEP.

    Parameters
    ----------
    x_nu, x_de : array-like, shape (n, d) or (n,)
        Numerator and denominator samples (at least 2 each, finite, same number of features).
    sigma : float or sequence, optional
        Kernel width. None searches ``sigma_factors`` x the pooled median distance; a sequence is
        searched as given; a float is used as is. The search is likelihood CV (``n_folds`` folds of
        the numerator samples, centres from the training folds only).
    n_centres : int
        Number b of centres drawn from the numerator samples (all of them when n_nu <= b).
    centres : array-like, shape (b, d), optional
        Explicit centres for the final fit, in this order.
    folds : {"random", "blocks"}
        LCV folds: random (the fit then depends only on the two sample sets), or contiguous blocks of
        the given row order (time-ordered windows of overlapping subsequences).
    eps_schedule, max_iter
        Step sizes and steps per size of the ascent (defaults reproduce the reference code).
    seed : int
        Drives the centre subset and the folds (choices do not depend on the row order).

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> same = fit_kliep(rng.normal(size=(100, 1)), rng.normal(size=(100, 1)))
    >>> apart = fit_kliep(rng.normal(size=(100, 1)), rng.normal(1.5, 1.0, size=(100, 1)))
    >>> apart.kl > same.kl
    True
    """
    x_nu, x_de = check_pair(x_nu, x_de, min_samples=2)
    if check_int(n_centres, "n_centres") < 1:
        raise ValueError(f"n_centres must be a positive integer; got {n_centres}")
    if check_int(max_iter, "max_iter") < 0:
        raise ValueError(f"max_iter must be >= 0; got {max_iter}")
    eps_schedule = positive_grid(eps_schedule, "eps_schedule")
    seed = int_seed(seed)
    if check_folds(folds) == "random":
        # work on the rows in canonical order: the result is then a function of the two sets, bit for bit
        x_nu, x_de = x_nu[canonical_order(x_nu)], x_de[canonical_order(x_de)]
    n_folds = check_n_folds(n_folds)
    scale = data_scale(np.concatenate([x_nu, x_de]))  # fit in units where squares cannot underflow
    x_nu, x_de = x_nu / scale, x_de / scale
    given = None if sigma is None else positive_grid(sigma, "sigma")
    if given is not None:
        sigma = np.array([scaled_width(g, scale) for g in given])  # capped: a flat kernel, not an overflow
    if centres is not None:
        centres = as_samples(centres, "centres", dim=x_nu.shape[1]) / scale
    if sigma is None:
        pooled = np.concatenate([x_nu, x_de])
        factors = SIGMA_FACTORS if sigma_factors is None else positive_grid(sigma_factors, "sigma_factors")
        sigmas = median_distance(pooled, seed=0) * factors
        if not np.all(np.isfinite(sigmas)):
            raise ValueError("pairwise distances of the data overflow float64 (values up to "
                             f"{np.abs(pooled).max():.3g}); "
                             "rescale the data (e.g. standardise it) first")
    else:
        sigmas = sigma  # validated and rescaled above

    lcv, lcv_scores = float("nan"), np.empty(0)
    if sigmas.size > 1:
        lcv_scores = kliep_lcv_scores(x_nu, x_de, sigmas, n_centres=n_centres, n_folds=n_folds, seed=seed,
                                      folds=folds, eps_schedule=eps_schedule, max_iter=max_iter)
        best = int(np.argmax(lcv_scores))  # first maximum
        if not np.isfinite(lcv_scores[best]):
            raise ValueError(f"no candidate sigma in {(sigmas * scale).tolist()} reaches the denominator samples; "
                             "give larger sigma values")
        lcv, sig = float(lcv_scores[best]), float(sigmas[best])
    else:
        best, sig = 0, float(sigmas[0])

    if centres is None:
        c = x_nu[pick_rows(x_nu, np.arange(x_nu.shape[0]), int(n_centres), set_rng(seed, x_nu, 10))]
    else:
        c = centres  # validated and rescaled above
    k_nu = gauss_kernel(x_nu, c, sig)
    bvec = gauss_kernel(x_de, c, sig).mean(axis=0)
    _check_reach(bvec, sig * scale)
    theta, kl = kliep_solve(k_nu, bvec, eps_schedule=eps_schedule, max_iter=max_iter)
    if given is not None:  # report the widths as given: a capped one times the scale is not the same number
        return KLIEPFit(sigma=float(given[best]), centres=c * scale, theta=theta, kl=kl, lcv=lcv,
                        lcv_scores=lcv_scores, sigmas=given, scale=scale)
    return KLIEPFit(sigma=sig * scale, centres=c * scale, theta=theta, kl=kl, lcv=lcv, lcv_scores=lcv_scores,
                    sigmas=sigmas * scale, scale=scale)

"""Inlier-based outlier detection by the (relative) density ratio.

A clean *reference* sample is the numerator, the points to screen are (part of) the denominator,
and the fitted ratio ``r(x) = p_ref(x) / (alpha p_ref(x) + (1 - alpha) p_screen(x))`` is small where
the reference has no mass: a LOW ratio means an OUTLIER (Hido et al.; Kanamori et al. 2009 §6.3;
Yamada et al. 2013 §4.2). Getting the direction wrong turns an AUC into ``1 - AUC``.

Two detectors share this idea:

* :class:`DensityRatioOutlierDetector`: batch, a scikit-learn estimator (``BaseEstimator``,
  ``OutlierMixin``: ``get_params``, ``clone``, ``fit_predict``, ``GridSearchCV`` work). ``fit(X_reference)`` stores the
  clean reference; ``score_samples(X)`` fits the ratio with the reference as numerator and
  **reference + the batch being scored** as denominator (the batch's own mass makes the ratio dip
  where the batch has points the reference lacks; with the reference in the denominator the fit is
  defined even for a batch of one point), and returns the ratio at the rows of ``X``: higher = more
  normal. ``decision_function`` subtracts the threshold learned at fit time (the ``contamination``
  quantile of held-out reference scores, each fold of the reference scored as a new batch against
  the rest), ``predict`` returns +1 (inlier) / -1 (outlier).
* :class:`~ratiowatch.stream.detectors.outlier_stream.StreamingOutlierDetector` (its own module): the
  streaming counterpart, a river anomaly detector over a bounded, self-cleaning reference buffer.

Examples
--------
>>> rng = np.random.default_rng(0)
>>> det = DensityRatioOutlierDetector(seed=0).fit(rng.normal(size=(300, 2)))
>>> s = det.score_samples(np.array([[0.0, 0.0], [6.0, 6.0]]))
>>> bool(s[0] > s[1])
True
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from ratiowatch.core.kernels import median_distance, row_sq_dist, sq_dist
from ratiowatch.core.params import check_choice, check_int, check_real, check_seed
from ratiowatch.core.validation import check_alpha, make_rng

try:  # scikit-learn is optional: with it the detector is a full scikit-learn estimator
    from sklearn.base import BaseEstimator, OutlierMixin
    from sklearn.exceptions import NotFittedError
except ImportError:  # pragma: no cover - exercised only without scikit-learn
    from ratiowatch.stream.detectors._estimator_base import BaseEstimator, NotFittedError, OutlierMixin

METHODS = ("rulsif", "ulsif", "kliep")
SIGMA_RULES = ("lcv", "local", "cv")


# ============================================================================================
# batch detector
# ============================================================================================
@njit(cache=True)
def _kth_smallest_sq_dist(q, x, k):
    """Order statistic ``k`` (0-based) of each query row's squared distances to every row of ``x``.

    The same values as ``np.partition(sq_dist(q, x), k, axis=1)[:, k]`` (the distances are summed
    in the same order), without the (queries x rows) matrix: a sorted list of the ``k + 1``
    smallest so far, which a new distance rarely enters.
    """
    nq = q.shape[0]
    n = x.shape[0]
    out = np.empty(nq)
    best = np.empty(k + 1)
    for i in range(nq):
        filled = 0
        for j in range(n):
            s = row_sq_dist(q, i, x, j)
            if filled <= k:
                p = filled
                filled += 1
            elif s < best[k]:
                p = k
            else:
                continue
            while p > 0 and best[p - 1] > s:  # insertion into the sorted list
                best[p] = best[p - 1]
                p -= 1
            best[p] = s
        out[i] = best[k]
    return out


#: largest magnitude :class:`DensityRatioOutlierDetector` takes: the squared distances between
#: values beyond it overflow float64
MAX_MAGNITUDE = 1e150


def local_scale(x: np.ndarray, k: int = 10, max_query: int = 500, seed=0) -> float:
    """Median distance from a point of ``x`` to its ``k``-th nearest other point of ``x``.

    The kernel width of the outlier detectors is set relative to this *local* scale rather than the
    median pairwise distance: in more than a few dimensions the median pairwise distance is far
    above neighbour distances, a kernel that wide is nearly flat over the data, and the ratio then
    only sees global structure (on the ODDS data it misses the outliers LOF finds).

    Examples
    --------
    >>> local_scale(np.arange(100.0)[:, None], k=3)  # neighbours at 1, 1, 2, 2, ...: the 3rd is at 2
    2.0
    """
    x = np.asarray(x, dtype=np.float64)
    n = x.shape[0]
    if n < 2:
        return 1.0
    k = min(int(k), n - 1)
    rng = make_rng(seed)
    q = np.sort(rng.choice(n, size=min(n, int(max_query)), replace=False))
    # the query point itself is among x (distance 0): its k-th neighbour is order statistic k
    kth = np.sqrt(_kth_smallest_sq_dist(np.ascontiguousarray(x[q]), np.ascontiguousarray(x), k))
    med = float(np.median(kth))
    if med > 0:
        return med
    pos = kth[kth > 0]
    return float(pos.mean()) if pos.size else median_distance(x, seed=0)


#: kernel widths tried by :func:`lcv_width`, as multiples of the local scale (about sqrt(2) apart)
LCV_FACTORS = (0.05, 0.07, 0.1, 0.14, 0.2, 0.25, 0.35, 0.5, 0.7, 1.0, 1.4, 2.0, 2.8, 4.0, 5.6, 8.0, 11.0, 16.0)


def lcv_width(x: np.ndarray, n_centres: int = 1000, factors=LCV_FACTORS, seed=0) -> tuple[float, float]:
    """Kernel width by likelihood cross-validation of a Gaussian kernel density on ``x`` alone.

    ``min(n_centres, n // 2)`` random rows of ``x`` are the kernel centres, the other rows are held
    out, and the width ``f x local_scale(x)`` maximising the held-out log-likelihood

    ``mean_i log( (1/b) sum_l exp(-|x_i - c_l|^2 / (2 s^2)) ) - d log s``  (+ constants)

    is returned with its factor ``f``. Label-free and uses the clean reference only (Hido et al.
    2011 choose the width of their ratio model by likelihood cross-validation on the same side);
    no held-out row is a centre, so the criterion cannot reward a width that only fits the
    centres themselves.

    Examples
    --------
    >>> x = np.random.default_rng(0).normal(size=(400, 2))
    >>> s, f = lcv_width(x, n_centres=200)
    >>> 0.05 <= f <= 16.0 and s > 0
    True
    """
    from scipy.special import logsumexp

    x = np.asarray(x, dtype=np.float64)
    n, d = x.shape
    if n < 4:
        raise ValueError(f"lcv_width needs at least 4 samples; got {n}")
    perm = make_rng(seed).permutation(n)
    b = min(int(n_centres), n // 2)
    cen, held = x[perm[:b]], x[perm[b:]]
    d2 = sq_dist(np.ascontiguousarray(held), np.ascontiguousarray(cen))
    scale = local_scale(x, seed=seed)
    best_ll, best_f = -np.inf, float(factors[0])
    for f in factors:
        s = float(f) * scale
        ll = float(np.mean(logsumexp(-d2 / (2.0 * s * s), axis=1))) - d * math.log(s)
        if ll > best_ll:
            best_ll, best_f = ll, float(f)
    return best_f * scale, best_f


class DensityRatioOutlierDetector(OutlierMixin, BaseEstimator):
    """Batch inlier-based outlier detector, a scikit-learn estimator.

    ``score_samples(X) = r(X)``, the ratio ``p_ref / (alpha p_ref + (1 - alpha) p_mix)`` fitted
    with the reference as numerator and reference + ``X`` as denominator (higher = more normal);
    ``decision_function(X) = score_samples(X) - offset_``; ``predict`` gives +1 (inlier) or -1.

    Parameters
    ----------
    method : {"rulsif", "ulsif", "kliep"}
        Ratio estimator. RuLSIF (relative ratio, bounded by ``1/alpha``) is the default.
    alpha : float in [0, 1)
        RuLSIF mixture weight (ignored by uLSIF, which is alpha = 0, and KLIEP). Larger values give
        a smoother ratio, easier to estimate in high dimension (Yamada et al. 2013 use up to 0.95).
    sigma : "lcv", "local", "cv" or float
        Kernel width. ``"lcv"`` (default): the multiple of the local scale that maximises the
        held-out likelihood of a kernel density on the reference (:func:`lcv_width`; label-free).
        ``"local"``: ``sigma_factor`` x the median distance to the 10th nearest reference
        neighbour (:func:`local_scale`). ``"cv"``: the ratio estimator's own criterion (exact
        LOOCV of RuLSIF/uLSIF over sigma and lambda, likelihood CV of KLIEP) on at most
        ``n_select`` samples per side; it prefers wide, flat ratios and ranks outliers poorly
        (``docs/evaluation.md``, section 7). A float is used as is.
    sigma_factor : float
        Multiplier of the local scale for ``sigma="local"``.
    lam : float
        Ridge strength of RuLSIF/uLSIF (used unless ``sigma="cv"``).
    n_centres : int
        Gaussian centres drawn at random from the reference.
    n_select : int
        Subsample size per side for ``sigma="cv"``.
    contamination : float in (0, 0.5]
        Fraction of new inliers (and of the training samples) that ``predict`` flags:
        :attr:`offset_` is that quantile of the training samples' held-out scores
        (:attr:`train_scores_`), which are on the scale of new samples' scores.
    seed : int
        Drives the centre subset and the subsamples.

    Attributes
    ----------
    reference_ : ndarray of shape (n_samples, n_features)
        The training samples (the numerator of every fit).
    sigma_ : float or None
        Kernel width fixed at fit time (None with ``sigma="cv"``: chosen per ratio fit).
    train_scores_ : ndarray of shape (n_samples,)
        Held-out ratios of the training samples, ``N_FOLDS``-fold: the rows of fold ``k`` are
        scored as a new batch is, by the ratio with the other folds as numerator and the other
        folds + fold ``k`` as denominator (see Notes). ``score_samples`` returns them for training
        rows.
    offset_ : float
        Ratio below which a sample is an outlier: the ``contamination`` quantile of ``train_scores_``.
    n_features_in_ : int

    Notes
    -----
    Denominator = reference + the batch being scored (``score_samples(X)``). The batch's own mass
    makes the ratio dip where ``X`` has points the reference lacks, and with the reference in the
    denominator the fit is defined even for a batch of one point. A point's score therefore depends
    (weakly) on the batch it is scored with (the transductive protocol of Hido et al. 2011): score a
    whole batch at once.

    Threshold. A new batch ``X`` is scored by ``r = fit(num = R, den = R + X)`` at ``X``, with
    ``R`` the reference. :attr:`offset_` must be a quantile of scores made *the same way*, or it
    sits on another scale (with a narrow kernel the ratio of a row that is itself a centre is far
    above a new inlier's; a half split scored by a fit on the other half gave reference scores of
    2-3 where new 1-D inliers score about 1, and every new inlier was flagged). So the reference is
    cut into ``N_FOLDS`` random folds ``F_k`` and

    ``train_scores_[F_k] = fit(num = R \\ F_k, den = (R \\ F_k) + F_k)`` at ``F_k``,

    each fold a small batch (a tenth) that is not part of the fit, against a reference of 90 % of
    ``R``: the score of a new inlier with the reference one fold smaller.
    ``offset_ = quantile(train_scores_, contamination)``, so about ``contamination`` of new
    inliers are flagged, in any dimension and for a batch of 1 row as of 1000.

    Training rows. A batch made only of training rows (``-0.0`` and ``0.0`` alike; any order or
    subset) gets their held-out scores :attr:`train_scores_`: their ratio in a fit of which they
    are centres would be biased high, and ``fit_predict(X)`` would flag almost nothing; with the
    held-out scores it flags the ``contamination`` share of ``X`` and equals
    ``fit(X).predict(X)``. A batch that mixes training rows with new ones is scored as a whole,
    transductively, like any other batch. As held-out and new scores are made the same way, a
    training row and a point next to it score alike, except where the row itself is the
    reference's only support (a lone row in the tails), which a held-out score rightly calls
    unusual.

    Examples
    --------
    >>> rng = np.random.default_rng(1)
    >>> det = DensityRatioOutlierDetector(contamination=0.05, seed=0).fit(rng.normal(size=(200, 3)))
    >>> det.predict(np.array([[0.0, 0.0, 0.0], [8.0, 0.0, 0.0]])).tolist()
    [1, -1]
    """

    def __init__(
        self,
        method: str = "rulsif",
        alpha: float = 0.5,
        sigma: str | float = "lcv",
        sigma_factor: float = 0.35,
        lam: float = 1e-3,
        n_centres: int = 1000,
        n_select: int = 300,
        contamination: float = 0.05,
        seed: int = 0,
    ):
        self.method = method
        self.alpha = alpha
        self.sigma = sigma
        self.sigma_factor = sigma_factor
        self.lam = lam
        self.n_centres = n_centres
        self.n_select = n_select
        self.contamination = contamination
        self.seed = seed

    #: fewest training samples (the local scale looks at up to 10 neighbours)
    MIN_SAMPLES = 10
    #: folds of the held-out training scores (:attr:`train_scores_`): each a tenth of the reference
    N_FOLDS = 10

    # --- helpers -------------------------------------------------------------------------
    def _check_params(self) -> None:
        check_choice(self.method, "method", METHODS)
        check_alpha(check_real(self.alpha, "alpha"))
        if isinstance(self.sigma, str):
            if self.sigma not in SIGMA_RULES:
                raise ValueError(f"sigma must be one of {SIGMA_RULES} or a positive number; got {self.sigma!r}")
        elif not check_real(self.sigma, "sigma") > 0:
            raise ValueError(f"sigma must be one of {SIGMA_RULES} or a positive number; got {self.sigma!r}")
        if not (check_real(self.sigma_factor, "sigma_factor") > 0 and check_real(self.lam, "lam") > 0):
            raise ValueError(f"sigma_factor and lam must be positive; got {self.sigma_factor}, {self.lam}")
        if not (0.0 < check_real(self.contamination, "contamination") <= 0.5):
            raise ValueError(f"contamination must be in (0, 0.5]; got {self.contamination}")
        check_int(self.n_centres, "n_centres", minimum=1)
        check_int(self.n_select, "n_select", minimum=10)
        check_seed(self.seed)

    def _validate(self, X, reset: bool) -> np.ndarray:
        """X as float64 (n, d), with scikit-learn's messages and feature-name bookkeeping when available."""
        if _validate_data is not None:
            x = _validate_data(self, X, reset=reset, dtype=np.float64, order="C")
        else:  # pragma: no cover - without scikit-learn
            x = _plain_validate(self, X, reset)
        if reset and x.shape[0] < self.MIN_SAMPLES:
            raise ValueError(f"X needs at least {self.MIN_SAMPLES} samples to fit; got {x.shape[0]} sample(s)")
        big = float(np.abs(x).max(initial=0.0))
        if big > MAX_MAGNITUDE:
            raise ValueError(f"X holds values up to {big:.3g}: squared distances beyond {MAX_MAGNITUDE:.0e} overflow "
                             "float64; divide X by a constant first (e.g. sklearn.preprocessing.StandardScaler)")
        return np.ascontiguousarray(x, dtype=np.float64)

    def _width(self, ref: np.ndarray) -> float | None:
        if self.sigma == "lcv":
            return lcv_width(ref, n_centres=int(self.n_centres), seed=int(self.seed))[0]
        if self.sigma == "local":
            return float(self.sigma_factor) * local_scale(ref, seed=self.seed)
        if self.sigma == "cv":
            return None
        return float(self.sigma)

    def _fit_ratio(self, x_nu: np.ndarray, x_de: np.ndarray, sigma: float | None, seed: int):
        rng = make_rng(seed)
        b = int(self.n_centres)
        if self.method == "kliep":
            from ratiowatch.core.kliep import fit_kliep

            return fit_kliep(x_nu, x_de, sigma=sigma, n_centres=b, seed=seed)
        from ratiowatch.core.rulsif import fit_rulsif

        alpha = 0.0 if self.method == "ulsif" else float(self.alpha)
        lam = float(self.lam)
        if sigma is None:  # exact LOOCV on subsamples, then the final fit on everything
            m = int(self.n_select)
            sub_nu = x_nu[rng.permutation(x_nu.shape[0])[:m]]
            # LOOCV pairs the i-th numerator and denominator samples: random pairs, unrelated
            sub_de = x_de[rng.permutation(x_de.shape[0])[:m]]
            sel = fit_rulsif(sub_nu, sub_de, alpha=alpha, n_centres=min(b, 100), seed=seed)
            sigma, lam = sel.sigma, sel.lam
        return fit_rulsif(x_nu, x_de, alpha=alpha, sigma=sigma, lam=lam, n_centres=b, seed=seed)

    def _score_batch(self, ref: np.ndarray, x: np.ndarray) -> np.ndarray:
        """The ratio fitted with numerator ``ref`` and denominator ``ref + x``, at the rows of ``x``."""
        if self.method != "kliep" and self.sigma_ is not None:  # each kernel row made once (ratio_at_added)
            from ratiowatch.core.rulsif import ratio_at_added

            alpha = 0.0 if self.method == "ulsif" else float(self.alpha)
            return ratio_at_added(ref, x, alpha, self.sigma_, float(self.lam), n_centres=int(self.n_centres),
                                  seed=int(self.seed))
        fit = self._fit_ratio(ref, np.vstack([ref, x]), self.sigma_, int(self.seed))
        return np.asarray(fit.ratio(x), dtype=np.float64)

    def _ratio(self, x: np.ndarray) -> np.ndarray:
        r = self._score_batch(self.reference_, x)
        if not np.all(np.isfinite(r)):
            raise ValueError("the ratio fit produced non-finite values; try a larger lam or sigma")
        return r

    # --- public API ----------------------------------------------------------------------
    def fit(self, X, y=None) -> "DensityRatioOutlierDetector":
        """Store the clean reference set ``X``, fix the kernel width and place :attr:`offset_`.

        ``y`` is ignored (present for scikit-learn's API).
        """
        self._check_params()
        ref = self._validate(X, reset=True)
        self.reference_ = ref
        self.sigma_ = self._width(ref)
        self._rows = {key: i for i, key in enumerate(_row_keys(ref))}
        self.train_scores_ = self._held_out(ref)
        self.offset_ = float(np.quantile(self.train_scores_, float(self.contamination)))
        return self

    def _held_out(self, ref: np.ndarray) -> np.ndarray:
        """Held-out ratios of the reference rows, each fold scored as a new batch against the rest.

        ``out[F_k] = fit(num = R \\ F_k, den = (R \\ F_k) + F_k).ratio(F_k)``: :meth:`_ratio`'s
        protocol with ``R \\ F_k`` as reference and the fold as the batch (class Notes). A fit
        scoring its own numerator rows sees each of them at a centre, so their ratio is biased high
        (with a narrow kernel, far above any new inlier's); held-out scores are not.
        """
        n = ref.shape[0]
        folds = np.array_split(make_rng(int(self.seed)).permutation(n), min(int(self.N_FOLDS), n))
        out = np.empty(n)
        for fold in folds:  # N_FOLDS ratio fits, not a loop over samples
            fold = np.sort(fold)
            rest = np.ones(n, dtype=bool)
            rest[fold] = False
            out[fold] = self._score_batch(ref[rest], ref[fold])
        if not np.all(np.isfinite(out)):
            raise ValueError("the ratio fit produced non-finite values; try a larger lam or sigma")
        return out

    def _check_fitted(self) -> None:
        if not hasattr(self, "reference_"):
            raise NotFittedError(f"This {type(self).__name__} instance is not fitted yet; call "
                                 "fit(X_reference) with the clean reference samples first")

    def score_samples(self, X) -> np.ndarray:
        """Density ratio at the rows of ``X`` (higher = more normal, about 1 for typical inliers).

        Denominator = reference + ``X``: the batch is scored transductively, as in the papers.
        A batch made only of training rows (``-0.0`` and ``0.0`` alike) gets their held-out
        scores :attr:`train_scores_` (class Notes); any other batch is scored as a whole, the rows
        it shares with the reference included.
        """
        self._check_fitted()
        x = self._validate(X, reset=False)
        idx = np.array([self._rows.get(key, -1) for key in _row_keys(x)], dtype=np.int64)
        if (idx >= 0).all():  # training rows only: no fit needed
            return self.train_scores_[idx]
        return self._ratio(x)

    def decision_function(self, X) -> np.ndarray:
        """``score_samples(X) - offset_``: negative for outliers."""
        return self.score_samples(X) - self.offset_

    def predict(self, X) -> np.ndarray:
        """+1 for inliers, -1 for outliers (scikit-learn's convention)."""
        return np.where(self.decision_function(X) < 0.0, -1, 1)


def _row_keys(x: np.ndarray) -> list:
    """Hashable keys of the rows of ``x``, equal for equal rows (``x + 0.0`` maps -0.0 to 0.0)."""
    rows = np.ascontiguousarray(x + 0.0)
    return rows.view(np.dtype((np.void, rows.dtype.itemsize * rows.shape[1]))).ravel().tolist()


def _plain_validate(est, X, reset: bool) -> np.ndarray:  # pragma: no cover - without scikit-learn
    """Minimal stand-in for scikit-learn's ``validate_data`` (2-d, finite, real, feature count)."""
    arr = np.asarray(X)
    if np.iscomplexobj(arr):
        raise ValueError("Complex data not supported")
    arr = arr.astype(np.float64)
    if arr.ndim != 2:
        raise ValueError(f"Expected a 2-d array (n_samples, n_features); got shape {arr.shape}. "
                         "Reshape a single feature with X.reshape(-1, 1)")
    if arr.shape[0] < 1 or arr.shape[1] < 1:
        raise ValueError(f"X has shape {arr.shape}; at least one sample and one feature are required")
    if not np.all(np.isfinite(arr)):
        raise ValueError("Input X contains NaN or infinity; clean or impute it first")
    if reset:
        est.n_features_in_ = arr.shape[1]
    elif arr.shape[1] != est.n_features_in_:
        raise ValueError(f"X has {arr.shape[1]} features, but {type(est).__name__} is expecting "
                         f"{est.n_features_in_} features as input.")
    return arr


try:
    from sklearn.utils.validation import validate_data as _validate_data
except ImportError:  # scikit-learn < 1.6 (the method form) or no scikit-learn at all
    try:
        from sklearn.base import BaseEstimator as _B

        def _validate_data(est, X, **kw):
            return _B._validate_data(est, X, **kw)
    except ImportError:  # pragma: no cover
        _validate_data = None

"""Inlier-based outlier detection by the (relative) density ratio.

A clean *reference* sample is the numerator, the points to screen are (part of) the denominator,
and the fitted ratio ``r(x) = p_ref(x) / (alpha p_ref(x) + (1 - alpha) p_screen(x))`` is small where
the reference has no mass: a LOW ratio means an OUTLIER (Hido et al.; Kanamori et al. 2009 §6.3;
Yamada et al. 2013 §4.2). Getting the direction wrong turns an AUC into ``1 - AUC``.

Two detectors share this idea:

* :class:`DensityRatioOutlierDetector`: batch, scikit-learn idiom. ``fit(X_reference)`` stores the
  clean reference; ``score_samples(X)`` fits the ratio with the reference as numerator and
  **reference + the batch being scored** as denominator (the batch's own mass makes the ratio dip
  where the batch has points the reference lacks; with the reference in the denominator the fit is
  defined even for a batch of one point), and returns the ratio at the rows of ``X``: higher = more
  normal. ``decision_function`` subtracts the threshold learned at fit time (the ``contamination``
  quantile of cross-validated reference scores), ``predict`` returns +1 (inlier) / -1 (outlier).
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

from ratiowatch.core.kernels import median_distance, sq_dist
from ratiowatch.core.validation import as_samples, check_alpha, make_rng

METHODS = ("rulsif", "ulsif", "kliep")


# ============================================================================================
# batch detector
# ============================================================================================
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
    d2 = sq_dist(np.ascontiguousarray(x[q]), x)
    # column q[i] of row i is the point itself (distance 0): the k-th neighbour is order statistic k
    kth = np.sqrt(np.partition(d2, k, axis=1)[:, k])
    med = float(np.median(kth))
    if med > 0:
        return med
    pos = kth[kth > 0]
    return float(pos.mean()) if pos.size else median_distance(x, seed=0)


class DensityRatioOutlierDetector:
    """Batch inlier-based outlier detector (scikit-learn idiom).

    Parameters
    ----------
    method : {"rulsif", "ulsif", "kliep"}
        Ratio estimator. RuLSIF (relative ratio, bounded by ``1/alpha``) is the default.
    alpha : float in [0, 1)
        RuLSIF mixture weight (ignored by uLSIF, which is alpha = 0, and KLIEP). Larger values give
        a smoother ratio, easier to estimate in high dimension (Yamada et al. 2013 use up to 0.95).
    sigma : "local", "cv" or float
        Kernel width. ``"local"`` (default): ``sigma_factor`` x the median distance to the 10th
        nearest reference neighbour (:func:`local_scale`). ``"cv"``: the estimator's own criterion
        (exact LOOCV of RuLSIF/uLSIF over sigma and lambda, likelihood CV of KLIEP) on at most
        ``n_select`` samples per side. A float is used as is.
    sigma_factor : float
        Multiplier of the local scale (default 0.35, see the README for how it was chosen).
    lam : float
        Ridge strength of RuLSIF/uLSIF (used unless ``sigma="cv"``).
    n_centres : int
        Gaussian centres drawn at random from the reference.
    n_select : int
        Subsample size per side for ``sigma="cv"``.
    contamination : float in (0, 0.5)
        Expected outlier fraction, only used to place the ``decision_function`` threshold.
    seed : int
        Drives the centre subset and the subsamples.

    Notes
    -----
    Denominator = reference + the batch being scored (``score_samples(X)``). The batch's own mass
    makes the ratio dip where ``X`` has points the reference lacks, and with the reference in the
    denominator the fit is defined even for a batch of one point. A point's score therefore depends
    (weakly) on the batch it is scored with: score a whole batch at once for the transductive
    protocol of the papers.

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
        sigma: str | float = "local",
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

    # --- helpers -------------------------------------------------------------------------
    def _check_params(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}; got {self.method!r}")
        check_alpha(self.alpha)
        if isinstance(self.sigma, str):
            if self.sigma not in ("local", "cv"):
                raise ValueError(f"sigma must be 'local', 'cv' or a positive number; got {self.sigma!r}")
        elif not (float(self.sigma) > 0 and math.isfinite(float(self.sigma))):
            raise ValueError(f"sigma must be 'local', 'cv' or a positive number; got {self.sigma!r}")
        if not (self.sigma_factor > 0 and self.lam > 0):
            raise ValueError(f"sigma_factor and lam must be positive; got {self.sigma_factor}, {self.lam}")
        if not (0.0 < float(self.contamination) < 0.5):
            raise ValueError(f"contamination must be in (0, 0.5); got {self.contamination}")
        if int(self.n_centres) < 1 or int(self.n_select) < 10:
            raise ValueError("n_centres must be >= 1 and n_select >= 10")

    def _width(self, ref: np.ndarray) -> float | None:
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

    # --- public API ----------------------------------------------------------------------
    def fit(self, X_reference, y=None) -> "DensityRatioOutlierDetector":
        """Store the clean reference set and fix the kernel width.

        The decision threshold (:attr:`offset_`) is placed lazily, on first use of
        ``decision_function``/``predict``, so pure ranking (``score_samples``) does not pay for it.
        """
        self._check_params()
        ref = as_samples(X_reference, "X_reference (clean reference samples)", min_samples=10)
        self.reference_ = ref
        self.n_features_in_ = ref.shape[1]
        self.sigma_ = self._width(ref)
        self._offset = None
        return self

    @property
    def offset_(self) -> float:
        """Ratio below which a point is an outlier: the ``contamination`` quantile of reference scores.

        The reference scores come from 2-fold cross-fitting (each half scored by a ratio fitted on
        the other half), so they are not biased by scoring points the fit has seen.
        """
        self._check_fitted()
        if self._offset is None:
            ref = self.reference_
            perm = make_rng(self.seed).permutation(ref.shape[0])
            half = ref.shape[0] // 2
            a, b = ref[np.sort(perm[:half])], ref[np.sort(perm[half:])]
            held = np.concatenate([
                self._fit_ratio(a, np.vstack([a, b]), self.sigma_, self.seed).ratio(b),
                self._fit_ratio(b, np.vstack([b, a]), self.sigma_, self.seed + 1).ratio(a),
            ])
            self._offset = float(np.quantile(held, float(self.contamination)))
        return self._offset

    def _check_fitted(self) -> None:
        if not hasattr(self, "reference_"):
            raise ValueError("this DensityRatioOutlierDetector is not fitted; call fit(X_reference) first")

    def score_samples(self, X) -> np.ndarray:
        """Density ratio at the rows of ``X`` (higher = more normal, about 1 for typical inliers).

        Denominator = reference + ``X``: the batch is scored transductively, as in the papers.
        """
        self._check_fitted()
        x = as_samples(X, "X (samples to screen)", dim=self.n_features_in_)
        fit = self._fit_ratio(self.reference_, np.vstack([self.reference_, x]), self.sigma_, self.seed)
        self.ratio_fit_ = fit
        r = np.asarray(fit.ratio(x), dtype=np.float64)
        if not np.all(np.isfinite(r)):
            raise ValueError("the ratio fit produced non-finite values; try a larger lam or sigma")
        return r

    def decision_function(self, X) -> np.ndarray:
        """``score_samples(X) - offset_``: negative for outliers."""
        return self.score_samples(X) - self.offset_

    def predict(self, X) -> np.ndarray:
        """+1 for inliers, -1 for outliers (scikit-learn's convention)."""
        return np.where(self.decision_function(X) < 0.0, -1, 1)

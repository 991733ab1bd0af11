"""Instance-weighted C-SVM (classification) with exact weight-path following."""

from __future__ import annotations

import numpy as np

from .base import WeightedSVMBase


class WeightedSVC(WeightedSVMBase):
    """Weighted C-SVM: ``min 1/2||w||^2 + sum_i C_i xi_i``, ``C_i = C * sample_weight_i``.

    Labels must be -1 or +1. ``kernel`` is ``"rbf"`` (``exp(-gamma ||x - x'||^2)``) or
    ``"linear"``. ``ridge`` is added to the diagonal of the dual Hessian (Karasuyama et al. 2012: it keeps the margin systems
    invertible when kernel rows repeat).

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(40, 2)); y = np.where(X[:, 0] > 0, 1.0, -1.0)
    >>> svc = WeightedSVC(C=10.0, gamma=0.5).fit(X, y)
    >>> stats = svc.path(np.where(y > 0, 2.0, 1.0))      # up-weight the positive class
    >>> svc.kkt_violation() < 1e-8
    True
    """

    _copies = 1

    def _check_targets(self, y, n: int, partial: bool = False) -> np.ndarray:
        try:
            y = np.asarray(y, dtype=np.float64).ravel()
        except OverflowError:
            raise ValueError("y holds a number too large for a float64 (beyond about 1.8e308)") from None
        except (TypeError, ValueError):
            raise ValueError("y must hold numeric labels -1 or +1") from None
        if y.shape[0] != n:
            raise ValueError(f"y has {y.shape[0]} labels for {n} samples")
        if not np.all((y == 1.0) | (y == -1.0)):
            bad = np.unique(y[(y != 1.0) & (y != -1.0)])[:5]
            raise ValueError(f"labels must be -1 or +1; got {bad.tolist()} (map your classes first)")
        return y

    def _dual_terms(self, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        z = np.where(y < 0, -1.0, 1.0)
        return z, -np.ones_like(z)

    def _validate_weights(self, c: np.ndarray) -> None:
        z = self._pf.z if self._pf is not None and self._pf.z.shape == c.shape else None
        if z is None:
            return
        pos = np.any((c > 0) & (z > 0))
        neg = np.any((c > 0) & (z < 0))
        if (pos or neg) and not (pos and neg):
            raise ValueError("the points with positive weight must include both classes (-1 and +1)")

    def fit(self, X, y, sample_weight=None):
        y_arr = self._check_targets(y, np.asarray(y).shape[0] if np.ndim(y) else 1)
        sw = self._check_sw(sample_weight, y_arr.shape[0])
        if not (np.any((sw > 0) & (y_arr > 0)) and np.any((sw > 0) & (y_arr < 0))):
            raise ValueError("the points with positive weight must include both classes (-1 and +1)")
        return super().fit(X, y_arr, sw)

    def predict(self, X) -> np.ndarray:
        """Labels -1 / +1 (sign of the decision function, +1 at 0)."""
        return np.where(self.decision_function(X) >= 0, 1.0, -1.0)

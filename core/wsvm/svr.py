"""Instance-weighted epsilon-SVR with exact weight-path following.

Two dual variables per point (LIBSVM's form): ``z = +1, p = eps - y`` carries the part of the
coefficient for points above the tube, ``z = -1, p = eps + y`` the part below; the signed
coefficient is their difference. This is the corrected closed form of Karasuyama et al. 2012 (alpha_O
carries the sign of the residual) written so the classification path applies unchanged.
"""

from __future__ import annotations

import numpy as np

from .base import WeightedSVMBase, as_number


class WeightedSVR(WeightedSVMBase):
    """Weighted SVR: ``min 1/2||w||^2 + sum_i C_i (xi_i + xi*_i)`` with an ``epsilon`` tube.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(size=(50, 1)); y = np.sin(6 * X[:, 0])
    >>> svr = WeightedSVR(C=5.0, epsilon=0.05, gamma=10.0).fit(X, y)
    >>> _ = svr.path(np.linspace(0.1, 1.9, 50))           # older points count less
    >>> svr.kkt_violation() < 1e-8
    True
    """

    _copies = 2

    def __init__(self, C: float = 1.0, *, epsilon: float = 0.1, kernel: str = "rbf", gamma: float = 1.0,
                 ridge: float = 1e-8, refresh_every: int = 500):
        super().__init__(C, kernel=kernel, gamma=gamma, ridge=ridge, refresh_every=refresh_every)
        epsilon = as_number(epsilon, "epsilon")
        if not (np.isfinite(epsilon) and epsilon >= 0):
            raise ValueError(f"epsilon must be finite and >= 0; got {epsilon}")
        self.epsilon = epsilon

    def _check_targets(self, y, n: int, partial: bool = False) -> np.ndarray:
        try:
            y = np.asarray(y, dtype=np.float64).ravel()
        except OverflowError:
            raise ValueError("y holds a number too large for a float64 (beyond about 1.8e308)") from None
        except (TypeError, ValueError):
            raise ValueError("y must be numeric targets") from None
        if y.shape[0] != n:
            raise ValueError(f"y has {y.shape[0]} targets for {n} samples")
        if not np.all(np.isfinite(y)):
            raise ValueError("y contains NaN or infinite values; clean or impute them first")
        return y

    def _dual_terms(self, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        n = y.shape[0]
        z = np.concatenate([np.ones(n), -np.ones(n)])
        p = np.concatenate([self.epsilon - y, self.epsilon + y])
        return z, p

    def _params(self) -> dict:
        return {**super()._params(), "epsilon": self.epsilon}

    def predict(self, X) -> np.ndarray:
        """Regression estimate ``f(x)``."""
        return self.decision_function(X)

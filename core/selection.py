"""Hyperparameter grids shared by every estimator.

sigma is searched relative to the median pairwise distance of the pooled samples, so the same grid
works whatever the units of the data; lambda is searched on a fixed log grid (the uLSIF reference code
uses ``logspace(-3, 1, 9)``).
"""

from __future__ import annotations

import numpy as np

from .kernels import median_distance
from .validation import positive_grid

#: sigma = factor x median pairwise distance; geometric steps of sqrt(2) from 1/8 to 2.
SIGMA_FACTORS = 2.0 ** (np.arange(-6, 3) / 2.0)
#: ridge strengths, as in the uLSIF reference implementation.
LAMBDAS = np.logspace(-3, 1, 9)


def sigma_grid(*samples: np.ndarray, factors=None, seed=0) -> np.ndarray:
    """Candidate kernel widths: ``factors`` times the median distance of the pooled ``samples``.

    Examples
    --------
    >>> x = np.arange(10.0)[:, None]
    >>> g = sigma_grid(x)
    >>> bool(np.all(np.diff(g) > 0)) and len(g) == len(SIGMA_FACTORS)
    True
    """
    factors = SIGMA_FACTORS if factors is None else positive_grid(factors, "sigma factors")
    pooled = np.concatenate([np.asarray(s, dtype=np.float64) for s in samples], axis=0)
    return median_distance(pooled, seed=seed) * np.asarray(factors, dtype=np.float64)


def lambda_grid(lambdas=None) -> np.ndarray:
    """The ridge grid, validated (strictly positive: the analytic LOOCV needs lambda > 0)."""
    return LAMBDAS.copy() if lambdas is None else positive_grid(lambdas, "lambdas")


def choose_centres(n: int, b: int, rng: np.random.Generator) -> np.ndarray:
    """Indices of ``b`` kernel centres among ``n`` samples, without replacement.

    When every sample is a centre the natural order is kept, so the fit does not depend on the seed.
    """
    if b >= n:
        return np.arange(n)
    return np.sort(rng.choice(n, size=b, replace=False))

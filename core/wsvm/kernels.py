"""Kernels of the weighted SVMs, in scikit-learn's parametrisation.

The SVMs take ``gamma`` as scikit-learn does, ``K(x, x') = exp(-gamma ||x - x'||^2)`` for
``kernel="rbf"`` and ``K(x, x') = x . x'`` for ``kernel="linear"``, so a fitted model can be
checked against ``sklearn.svm.SVC/SVR`` with the same numbers. In the project's sigma convention
``gamma = 1 / (2 sigma^2)``; :func:`gamma_from_sigma` converts.
"""

from __future__ import annotations

import numpy as np

from numba import njit

from ratiowatch.core.kernels import check_width, gauss_kernel

KERNELS = ("rbf", "linear")


def check_kernel(kernel: str, gamma: float) -> tuple[str, float]:
    """Validate a kernel name and its ``gamma``; returns them normalised.

    Examples
    --------
    >>> check_kernel("rbf", 0.5)
    ('rbf', 0.5)
    """
    if kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {KERNELS}; got {kernel!r}")
    gamma = float(gamma)
    if kernel == "rbf" and not (np.isfinite(gamma) and gamma > 0):
        raise ValueError(f"gamma must be a positive finite number for the rbf kernel; got {gamma}")
    return kernel, gamma


def gamma_from_sigma(sigma: float) -> float:
    """``gamma = 1 / (2 sigma^2)``: the project's Gaussian width expressed as scikit-learn's gamma.

    >>> gamma_from_sigma(1.0)
    0.5
    """
    sigma = check_width(sigma)
    return 0.5 / (sigma * sigma)


@njit(cache=True)
def linear_kernel(x: np.ndarray, c: np.ndarray) -> np.ndarray:  # pragma: no cover - compiled
    """``K[i, j] = x_i . c_j``, each entry summed over the features in order.

    An entry is the same bits whichever block of rows or columns it is computed in (a BLAS
    product sums in an order that depends on the shapes): the kernel rows a stream installs one
    point at a time and the matrix a checkpoint rebuilds at once agree exactly, and so do
    ``K[i, j]`` and ``K[j, i]``.
    """
    n, m, dim = x.shape[0], c.shape[0], x.shape[1]
    out = np.empty((n, m))
    for i in range(n):
        for j in range(m):
            s = 0.0
            for k in range(dim):
                s += x[i, k] * c[j, k]
            out[i, j] = s
    return out


def kernel_matrix(x: np.ndarray, c: np.ndarray, kernel: str, gamma: float) -> np.ndarray:
    """Kernel values ``K[i, j] = k(x_i, c_j)`` (float64, C-contiguous), shape (len(x), len(c)).

    Examples
    --------
    >>> x = np.array([[0.0], [1.0]])
    >>> np.round(kernel_matrix(x, x, "rbf", 1.0), 4).tolist()
    [[1.0, 0.3679], [0.3679, 1.0]]
    """
    x = np.ascontiguousarray(x, dtype=np.float64)
    c = np.ascontiguousarray(c, dtype=np.float64)
    if kernel == "linear":
        return linear_kernel(x, c)
    # gauss_kernel uses exp(-d^2 / (2 sigma^2)); gamma = 1 / (2 sigma^2).
    sigma = np.sqrt(0.5 / gamma)
    return gauss_kernel(x, c, sigma)

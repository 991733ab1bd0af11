"""Small dense linear algebra kernels for the b x b systems of the estimators (b ~ 50-200).

LAPACK through ``np.linalg.solve`` would LU-factorise a matrix we already know is symmetric
positive definite; a Cholesky factorisation plus two triangular solves costs a third of that and
needs no pivoting.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, fastmath=True)
def cholesky_inplace(a: np.ndarray) -> bool:
    """Overwrite the lower triangle of SPD ``a`` with its Cholesky factor L (a = L L').

    Returns False (leaving ``a`` partly overwritten) when ``a`` is not numerically positive definite.
    """
    n = a.shape[0]
    for j in range(n):
        s = a[j, j]
        for k in range(j):
            s -= a[j, k] * a[j, k]
        if not s > 0.0:
            return False
        ljj = np.sqrt(s)
        a[j, j] = ljj
        for i in range(j + 1, n):
            s = a[i, j]
            ri = a[i]
            rj = a[j]
            for k in range(j):
                s -= ri[k] * rj[k]
            a[i, j] = s / ljj
    return True


@njit(cache=True, fastmath=True)
def cholesky_factor_solve(chol: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Solve ``L L' x = b`` given the lower-triangular factor ``L`` (upper triangle ignored)."""
    n = chol.shape[0]
    y = np.empty(n)
    for i in range(n):
        s = b[i]
        row = chol[i]
        for k in range(i):
            s -= row[k] * y[k]
        y[i] = s / row[i]
    x = np.empty(n)
    for i in range(n - 1, -1, -1):
        s = y[i]
        for k in range(i + 1, n):
            s -= chol[k, i] * x[k]
        x[i] = s / chol[i, i]
    return x


@njit(cache=True, fastmath=True)
def cholesky_solve(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Solve ``a x = b`` for symmetric positive definite ``a`` (``a`` is overwritten).

    Falls back to LAPACK's pivoted LU when ``a`` is not numerically positive definite, so a
    near-singular system still yields the least-bad answer instead of NaN.
    """
    work = a.copy()
    if cholesky_inplace(work):
        return cholesky_factor_solve(work, b)
    return np.linalg.solve(a, b)

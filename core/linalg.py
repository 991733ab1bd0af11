"""Small dense linear algebra kernels for the b x b systems of the estimators (b ~ 50-200).

LAPACK through ``np.linalg.solve`` would LU-factorise a matrix we already know is symmetric
positive definite; a Cholesky factorisation plus two triangular solves costs a third of that and
needs no pivoting. At these sizes the call and copy overhead of LAPACK dominates, so the kernels
are plain numba loops written to vectorise:

* inner loops always start at index 0 of a row view (a loop starting at a variable index keeps
  numba's negative-index wraparound check and does not vectorise);
* the factorisation is the column-oriented (left-looking) form, whose dot products for one column
  are independent of each other, computed four rows at a time so each load of the pivot row
  serves four accumulators;
* the back substitution runs as row updates (axpy) on the row-major lower factor instead of
  walking its columns.

The fastmath flags allow reassociation and FMA contraction only (vectorised reductions); NaN and
infinity semantics are kept, so a NaN pivot is still reported as "not positive definite".

Examples
--------
>>> a = np.array([[4.0, 2.0], [2.0, 3.0]])
>>> x = cholesky_solve(a, np.array([2.0, 1.0]))
>>> bool(np.allclose(a @ x, [2.0, 1.0]))
True
"""

from __future__ import annotations

import llvmlite.binding as _llvm
import numpy as np
from numba import njit, types
from numba.extending import get_cython_function_address

#: reassociation + contraction only: vectorised dot products, no assumptions about NaN/inf
FASTMATH = {"reassoc", "contract", "nsz"}


@njit(cache=True, fastmath=FASTMATH, inline="always")
def _column_below(src, scale, out, j, inv):
    """Column j of the factor below the diagonal: independent dot products with row j, four at a time."""
    n = src.shape[0]
    rj = out[j]
    i = j + 1
    while i + 3 < n:
        r0 = out[i]
        r1 = out[i + 1]
        r2 = out[i + 2]
        r3 = out[i + 3]
        s0 = src[i, j] * scale
        s1 = src[i + 1, j] * scale
        s2 = src[i + 2, j] * scale
        s3 = src[i + 3, j] * scale
        for k in range(j):
            v = rj[k]
            s0 -= r0[k] * v
            s1 -= r1[k] * v
            s2 -= r2[k] * v
            s3 -= r3[k] * v
        r0[j] = s0 * inv
        r1[j] = s1 * inv
        r2[j] = s2 * inv
        r3[j] = s3 * inv
        i += 4
    while i < n:
        r0 = out[i]
        s0 = src[i, j] * scale
        for k in range(j):
            s0 -= r0[k] * rj[k]
        r0[j] = s0 * inv
        i += 1


@njit(cache=True, fastmath=FASTMATH)
def cholesky_scaled_into(src: np.ndarray, scale: float, shift: float, out: np.ndarray) -> bool:
    """Lower Cholesky factor of ``scale * src + shift * I`` into the lower triangle of ``out``.

    Only the lower triangle of ``src`` is read, each entry once and before the same entry of ``out``
    is written, so ``out`` may be ``src``. Forming the shifted matrix on the fly saves a pass over it
    (the incremental window factors ``M / n + lam I`` twice per step). Returns False (``out`` partly
    written) when the matrix is not numerically positive definite.
    """
    n = src.shape[0]
    for j in range(n):
        rj = out[j]
        s = src[j, j] * scale + shift
        for k in range(j):
            s -= rj[k] * rj[k]
        if not s > 0.0:
            return False
        ljj = np.sqrt(s)
        rj[j] = ljj
        inv = 1.0 / ljj
        _column_below(src, scale, out, j, inv)
    return True


@njit(cache=True, fastmath=FASTMATH)
def cholesky_scaled_solve(src: np.ndarray, scale: float, shift: float, chol: np.ndarray, x: np.ndarray) -> bool:
    """Solve ``(scale * src + shift * I) x = b`` in place (``x`` holds b on entry), factor in ``chol``.

    The forward substitution runs inside the factorisation (``y_j`` as soon as row j of the factor is
    final), where its chain of dependent divisions overlaps the independent column work. Returns
    False (``x`` and ``chol`` partly overwritten) when the matrix is not numerically positive definite.
    """
    n = src.shape[0]
    for j in range(n):
        rj = chol[j]
        s = src[j, j] * scale + shift
        t = x[j]
        for k in range(j):
            v = rj[k]
            s -= v * v
            t -= v * x[k]
        if not s > 0.0:
            return False
        ljj = np.sqrt(s)
        rj[j] = ljj
        inv = 1.0 / ljj
        x[j] = t * inv
        _column_below(src, scale, chol, j, inv)
    # backward: L' x = y as row updates
    for i in range(n - 1, -1, -1):
        row = chol[i]
        xi = x[i] / row[i]
        x[i] = xi
        for k in range(i):
            x[k] -= xi * row[k]
    return True


@njit(cache=True)
def cholesky_inplace(a: np.ndarray) -> bool:
    """Overwrite the lower triangle of SPD ``a`` with its Cholesky factor L (a = L L').

    Only the lower triangle of ``a`` is read. Returns False (leaving ``a`` partly overwritten)
    when ``a`` is not numerically positive definite.
    """
    return cholesky_scaled_into(a, 1.0, 0.0, a)


@njit(cache=True, fastmath=FASTMATH)
def cholesky_factor_solve_into(chol: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    """Solve ``L L' x = b`` into ``out`` given the lower factor ``L`` (upper triangle ignored).

    ``out`` may be ``b`` itself; nothing is allocated.
    """
    n = chol.shape[0]
    for i in range(n):  # a no-op when out is b
        out[i] = b[i]
    # forward: L y = b, row dot products (contiguous)
    for i in range(n):
        row = chol[i]
        s = out[i]
        for k in range(i):
            s -= row[k] * out[k]
        out[i] = s / row[i]
    # backward: L' x = y as row updates: x_i is final once rows > i were subtracted
    for i in range(n - 1, -1, -1):
        row = chol[i]
        xi = out[i] / row[i]
        out[i] = xi
        for k in range(i):
            out[k] -= xi * row[k]


@njit(cache=True, fastmath=FASTMATH)
def cholesky_factor_solve(chol: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Solve ``L L' x = b`` given the lower-triangular factor ``L`` (upper triangle ignored)."""
    x = np.empty(chol.shape[0])
    cholesky_factor_solve_into(chol, b, x)
    return x


@njit(cache=True)
def cholesky_solve(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Solve ``a x = b`` for symmetric positive definite ``a`` (``a`` itself is left untouched).

    Falls back to LAPACK's pivoted LU when ``a`` is not numerically positive definite, so a
    near-singular system still yields the least-bad answer instead of NaN.
    """
    work = a.copy()
    if cholesky_inplace(work):
        return cholesky_factor_solve(work, b)
    return np.linalg.solve(a, b)


# LAPACK's symmetric tridiagonal reduction, called from compiled code. The addresses come from
# scipy's Cython LAPACK exports; registering them as named symbols (rather than calling ctypes
# function pointers) keeps the callers cacheable by numba.
for _name in ("dsytrd", "dorgtr"):
    _llvm.add_symbol(f"ratiowatch_{_name}", get_cython_function_address("scipy.linalg.cython_lapack", _name))
_dsytrd = types.ExternalFunction("ratiowatch_dsytrd", types.void(*([types.voidptr] * 10)))
_dorgtr = types.ExternalFunction("ratiowatch_dorgtr", types.void(*([types.voidptr] * 8)))


@njit(cache=True)
def sym_tridiagonal(a: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Householder reduction ``a = Q T Q'`` of symmetric ``a`` (LAPACK dsytrd + dorgtr).

    Returns ``(qt, d, e)``: ``qt`` = Q' (rows are the orthonormal basis vectors), ``d`` the diagonal
    (n,) and ``e`` the off-diagonal (n-1,) of the tridiagonal ``T``. About a third of the cost of a
    full eigendecomposition at n = 50, and enough to solve ``(a + lam I) x = r`` for any number of
    ``lam`` in O(n) per right-hand side (:func:`tridiagonal_solve_rows`). Raises if LAPACK fails.
    """
    n = a.shape[0]
    # column-major LAPACK sees the transpose of our row-major buffer: the same matrix, as ``a`` is
    # symmetric; Q comes back column-major, which read row-major is Q'
    qt = a.copy()
    d = np.empty(n)
    e = np.empty(max(n - 1, 1))
    tau = np.empty(max(n - 1, 1))
    work = np.empty(64 * max(n, 1))
    ints = np.array([n, n, work.shape[0], 0], dtype=np.int32)
    uplo = np.array([ord("L")], dtype=np.uint8)
    _dsytrd(uplo.ctypes, ints[0:1].ctypes, qt.ctypes, ints[1:2].ctypes, d.ctypes, e.ctypes, tau.ctypes,
            work.ctypes, ints[2:3].ctypes, ints[3:4].ctypes)
    if ints[3] != 0:
        raise ValueError("LAPACK dsytrd failed on the kernel matrix (non-finite entries?)")
    _dorgtr(uplo.ctypes, ints[0:1].ctypes, qt.ctypes, ints[1:2].ctypes, tau.ctypes, work.ctypes,
            ints[2:3].ctypes, ints[3:4].ctypes)
    if ints[3] != 0:
        raise ValueError("LAPACK dorgtr failed on the kernel matrix")
    return qt, d, e[: max(n - 1, 0)]


@njit(cache=True, fastmath=FASTMATH)
def tridiagonal_solve_rows(d: np.ndarray, e: np.ndarray, shift: float, rhs: np.ndarray, out: np.ndarray,
                           work: np.ndarray) -> None:
    """Solve ``(T + shift I) X = rhs`` for symmetric positive definite tridiagonal ``T``.

    ``T`` has diagonal ``d`` (n,) and off-diagonal ``e`` (n-1,); ``rhs`` and ``out`` are (n, k), one
    right-hand side per column, so every step is a contiguous row operation over all k of them.
    LDL' without pivoting (stable for SPD). ``work`` is (2, n) scratch.
    """
    n = d.shape[0]
    lfac = work[0]
    dfac = work[1]
    dfac[0] = d[0] + shift
    for k in range(1, n):
        lfac[k] = e[k - 1] / dfac[k - 1]
        dfac[k] = d[k] + shift - lfac[k] * e[k - 1]
    out[0, :] = rhs[0]
    for k in range(1, n):
        f = lfac[k]
        prev = out[k - 1]
        cur = out[k]
        src = rhs[k]
        for c in range(cur.shape[0]):
            cur[c] = src[c] - f * prev[c]
    last = out[n - 1]
    inv = 1.0 / dfac[n - 1]
    for c in range(last.shape[0]):
        last[c] *= inv
    for k in range(n - 2, -1, -1):
        f = lfac[k + 1]
        inv = 1.0 / dfac[k]
        nxt = out[k + 1]
        cur = out[k]
        for c in range(cur.shape[0]):
            cur[c] = cur[c] * inv - f * nxt[c]

"""ratiowatch.core.linalg: the hand-written Cholesky kernels agree with LAPACK and fail loudly, never with NaN."""

import numpy as np
import pytest

from ratiowatch.core.linalg import cholesky_factor_solve, cholesky_factor_solve_into, cholesky_inplace, cholesky_solve


def spd(n, seed, ridge=0.1):
    a = np.random.default_rng(seed).normal(size=(n, n + 3))
    return a @ a.T / (n + 3) + ridge * np.eye(n)


# sizes around the 4-row blocking of the factorisation (remainders 0..3) and the sizes in use
@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 7, 8, 9, 50, 53, 100])
def test_factor_equals_lapack_and_reads_only_the_lower_triangle(n):
    a = spd(n, n)
    work = a.copy()
    work[np.triu_indices(n, 1)] = 1e300  # garbage above the diagonal must not matter
    assert cholesky_inplace(work)
    np.testing.assert_allclose(np.tril(work), np.linalg.cholesky(a), rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("n", [1, 3, 6, 50])
def test_solves_match_numpy(n):
    a = spd(n, 100 + n, ridge=1e-3)
    b = np.random.default_rng(n).normal(size=n)
    expected = np.linalg.solve(a, b)
    np.testing.assert_allclose(cholesky_solve(a, b), expected, rtol=1e-9)
    chol = a.copy()
    assert cholesky_inplace(chol)
    np.testing.assert_allclose(cholesky_factor_solve(chol, b), expected, rtol=1e-9)
    out = b.copy()
    cholesky_factor_solve_into(chol, out, out)  # in place: out aliases b
    np.testing.assert_allclose(out, expected, rtol=1e-9)


def test_cholesky_solve_leaves_its_input_untouched():
    a = spd(6, 1)
    before = a.copy()
    cholesky_solve(a, np.ones(6))
    np.testing.assert_array_equal(a, before)


@pytest.mark.parametrize("bad", ["indefinite", "nan"])
def test_not_positive_definite_is_reported(bad):
    a = spd(6, 2)
    if bad == "indefinite":
        a[3, 3] = -1.0
    else:
        a[2, 2] = np.nan
    assert not cholesky_inplace(a.copy())


def test_indefinite_system_falls_back_to_lu_not_nan():
    a = np.array([[1.0, 2.0], [2.0, 1.0]])  # symmetric, eigenvalues 3 and -1
    x = cholesky_solve(a, np.array([1.0, 0.0]))
    np.testing.assert_allclose(a @ x, [1.0, 0.0], atol=1e-12)


@pytest.mark.parametrize("n", [1, 2, 5, 50])
def test_tridiagonal_reduction_reconstructs_the_matrix(n):
    from ratiowatch.core.linalg import sym_tridiagonal

    a = spd(n, 200 + n, ridge=0.0)
    qt, d, e = sym_tridiagonal(a)
    t = np.diag(d) + np.diag(e, 1) + np.diag(e, -1)
    np.testing.assert_allclose(qt @ qt.T, np.eye(n), atol=1e-13)
    np.testing.assert_allclose(qt.T @ t @ qt, a, atol=1e-12)


@pytest.mark.parametrize("shift", [1e-3, 0.1, 10.0])
def test_shifted_tridiagonal_solves_equal_dense_solves(shift):
    from ratiowatch.core.linalg import sym_tridiagonal, tridiagonal_solve_rows

    a = spd(30, 7, ridge=0.0)
    qt, d, e = sym_tridiagonal(a)
    rhs = np.random.default_rng(3).normal(size=(30, 11))
    out = np.empty_like(rhs)
    tridiagonal_solve_rows(d, e, shift, qt @ rhs, out, np.empty((2, 30)))
    np.testing.assert_allclose(qt.T @ out, np.linalg.solve(a + shift * np.eye(30), rhs), rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("n", [1, 4, 6, 50])
def test_fused_scaled_solve_equals_a_dense_solve(n):
    from ratiowatch.core.linalg import cholesky_scaled_into, cholesky_scaled_solve

    m = spd(n, 300 + n, ridge=0.0) * 7.0
    b = np.random.default_rng(n).normal(size=n)
    expected = np.linalg.solve(m / 7.0 + 0.01 * np.eye(n), b)
    x = b.copy()
    chol = np.empty((n, n))
    assert cholesky_scaled_solve(m, 1 / 7.0, 0.01, chol, x)
    np.testing.assert_allclose(x, expected, rtol=1e-9)
    other = np.empty((n, n))
    assert cholesky_scaled_into(m, 1 / 7.0, 0.01, other)
    np.testing.assert_array_equal(np.tril(other), np.tril(chol))
    bad = m.copy()
    bad[0, 0] = -1.0
    assert not cholesky_scaled_solve(bad, 1.0, 0.0, chol, b.copy())

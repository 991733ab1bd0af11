"""Kernel primitives (ratiowatch.core.kernels): the block form agrees with the scalar one."""

import numpy as np

from ratiowatch.core.kernels import FLUSH_EXPONENT, gauss_entries, gauss_entry


def test_block_entries_equal_the_scalar_entry_and_flush_the_same_values():
    e = np.r_[-np.random.default_rng(0).exponential(20.0, 5000), 0.0, -1e-300, FLUSH_EXPONENT,
              np.nextafter(FLUSH_EXPONENT, 0.0), FLUSH_EXPONENT - 1.0, -1e6]
    want = np.array([gauss_entry(v) for v in e])
    got = gauss_entries(e.copy())
    np.testing.assert_allclose(got, want, rtol=1e-14, atol=0.0)
    assert np.array_equal(got == 0.0, e <= FLUSH_EXPONENT)


def test_block_entries_are_computed_in_place():
    e = np.array([[-0.5, -2.0], [FLUSH_EXPONENT, 0.0]])
    out = gauss_entries(e)
    assert out is e and e[1, 0] == 0.0 and e[1, 1] == 1.0

"""Kernel primitives (ratiowatch.core.kernels): the block form agrees with the scalar one, and a
width whose square float64 cannot hold is refused by everything that takes one."""

import numpy as np
import pytest

from ratiowatch.core.kernels import FLUSH_EXPONENT, MIN_SCALE, check_width, constant_up_to_rounding, gauss_entries, gauss_entry, scaled_width


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


def test_a_width_whose_square_underflows_is_refused_and_the_smallest_allowed_is_usable():
    assert check_width(MIN_SCALE) == MIN_SCALE and (MIN_SCALE * MIN_SCALE) > 0.0
    for bad in (1e-170, 0.0, -1.0, np.nan, np.inf):
        with pytest.raises(ValueError, match="sigma must be positive and finite"):
            check_width(bad)
    assert scaled_width(1e-150, 2.0 ** -10) == 1e-150 * 2.0 ** 10  # tiny data: the width in their units
    with pytest.raises(ValueError, match="below 1.5e-150 x the data's range"):
        scaled_width(1e-170, 4.0)


def _width_consumers():
    from ratiowatch.core.kliep import fit_kliep
    from ratiowatch.core.kliep_window import TwoWindowKLIEP
    from ratiowatch.core.lsdd import fit_lsdd
    from ratiowatch.core.lsdd_window import TwoWindowLSDD
    from ratiowatch.core.rulsif import fit_rulsif, ratio_at_added
    from ratiowatch.core.window import TwoWindowRuLSIF
    from ratiowatch.core.wsvm.kernels import gamma_from_sigma

    a = np.random.default_rng(0).normal(size=(30, 1))
    return {
        "TwoWindowRuLSIF": lambda s: TwoWindowRuLSIF(1, 10, s, 0.1),
        "TwoWindowRuLSIF.set_params": lambda s: TwoWindowRuLSIF(1, 10, 1.0, 0.1).set_params(s, 0.1),
        "TwoWindowLSDD": lambda s: TwoWindowLSDD(1, 10, s, 0.1),
        "TwoWindowKLIEP": lambda s: TwoWindowKLIEP(1, 10, s),
        "TwoWindowKLIEP.set_params": lambda s: TwoWindowKLIEP(1, 10, 1.0).set_params(s),
        "fit_rulsif": lambda s: fit_rulsif(a, a + 1.0, sigma=s, lam=0.1),
        "ratio_at_added": lambda s: ratio_at_added(a, a + 1.0, 0.1, s, 0.1),
        "fit_kliep": lambda s: fit_kliep(a, a + 1.0, sigma=s),
        "fit_lsdd": lambda s: fit_lsdd(a, a + 1.0, sigma=s, lam=0.1),
        "gamma_from_sigma": gamma_from_sigma,
    }


@pytest.mark.parametrize("name", sorted(_width_consumers()))
def test_every_estimator_refuses_a_width_whose_square_underflows(name):
    # was a ZeroDivisionError from -0.5 / sigma**2 deep in a compiled kernel
    with pytest.raises(ValueError, match="sigma"):
        _width_consumers()[name](1e-170)


class TestConstantUpToRounding:
    @pytest.mark.parametrize("values", [[0.1 + 0.2, 0.3], [1.0, np.nextafter(1.0, 2.0)], [5.0, 5.0], [0.0, 0.0]])
    def test_values_equal_but_for_their_last_bits_are_constant(self, values):
        assert constant_up_to_rounding(np.array(values)[:, None])

    @pytest.mark.parametrize("values", [[1.0, 1.0 + 1e-9], [0.0, 1e-300], [1e-13, 2e-13]])
    def test_any_difference_above_rounding_of_the_magnitude_varies(self, values):
        # relative to the values' own magnitude: data in small units keep their differences
        assert not constant_up_to_rounding(np.array(values)[:, None])

    def test_every_column_must_be_constant(self):
        x = np.array([[0.3, 1.0], [0.1 + 0.2, 2.0]])
        assert not constant_up_to_rounding(x) and constant_up_to_rounding(x[:, :1].copy())

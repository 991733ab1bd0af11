"""Preprocessing: the robust scale is relative to the data, so detection does not depend on units."""

import numpy as np
import pytest

from ratiowatch.stream.detectors.offline import detect
from ratiowatch.stream.series.preprocess import robust_scale


def test_small_units_keep_their_own_scale():
    x = np.random.default_rng(0).normal(size=(500, 1))
    assert robust_scale(x * 1e-13)[0] == pytest.approx(robust_scale(x)[0] * 1e-13, rel=1e-12)


def test_constant_columns_and_rounding_noise_around_a_level_get_unit_scale():
    x = np.c_[np.full(100, 7.0), 1e12 + np.random.default_rng(1).integers(0, 2, 100) * 1e-4]
    assert robust_scale(x).tolist() == [1.0, 1.0]


@pytest.mark.parametrize("factor", [1e-300, 1e-13, 1e150])
def test_change_points_do_not_depend_on_the_units(factor):
    rng = np.random.default_rng(2)
    x = np.r_[rng.normal(0, 1, 400), rng.normal(0, 4, 400)]
    cps = detect(x)
    assert any(abs(c - 400) <= 20 for c in cps), cps
    assert detect(x * factor) == cps

"""Input validation shared by every estimator (ratiowatch.core.validation)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ratiowatch.core.validation import as_plain, as_samples


@pytest.mark.parametrize("x", [[1.0, 10**400], [[1.0], [-10**400]], np.array([2.0, 10**309], dtype=object)])
def test_a_python_int_beyond_float64_is_a_value_error_naming_the_input(x):
    with pytest.raises(ValueError, match=r"^readings holds a value beyond the range of float64 .*rescale it"):
        as_samples(x, "readings")


def test_the_largest_float64_is_still_a_sample():
    assert as_samples([10**308, -1.0], "x")[0, 0] == 1e308


@pytest.mark.parametrize("value, plain", [
    (np.int64(1500), 1500), (np.uint8(7), 7), (np.int32(-3), -3), (np.float64(0.1), 0.1),
    (np.float32(0.5), 0.5), (np.True_, True), (np.False_, False), (np.str_("median"), "median"),
])
def test_numpy_scalars_become_the_python_scalars_they_equal(value, plain):
    out = as_plain(value)
    assert out == plain and type(out) is type(plain)
    json.dumps(out)


@pytest.mark.parametrize("value", [3, 0.25, True, "local", None, (1, 2), [np.int64(1)]])
def test_other_values_are_kept_as_they_are(value):
    assert as_plain(value) is value

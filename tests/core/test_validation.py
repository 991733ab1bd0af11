"""Input validation shared by every estimator (ratiowatch.core.validation)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ratiowatch.core.validation import as_plain, as_samples, check_alpha, make_rng


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


def test_a_masked_array_with_masked_entries_is_refused_naming_the_input():
    # the mask was ignored: the hidden value (here 99) became a sample
    masked = np.ma.masked_array([1.0, 99.0, 3.0], mask=[0, 1, 0])
    with pytest.raises(ValueError, match=r"^readings is a masked array with 1 masked value.*fill them"):
        as_samples(masked, "readings")


def test_a_masked_array_with_nothing_masked_is_read_as_its_data():
    data = np.array([[1.0, 2.0], [3.0, 4.0]])
    assert np.array_equal(as_samples(np.ma.masked_array(data), "x"), data)
    assert np.array_equal(as_samples(np.ma.masked_array(data, mask=False), "x"), data)


@pytest.mark.parametrize("alpha", ["0.5", True, None, np.array([0.5])])
def test_alpha_must_be_a_real_number_not_a_string_or_bool(alpha):
    with pytest.raises(TypeError, match="alpha must be a real number"):
        check_alpha(alpha)


@pytest.mark.parametrize("alpha", [0, 0.0, 0.5, np.float32(0.25), np.float64(0.1), np.int64(0)])
def test_alpha_in_range_is_returned_as_a_float(alpha):
    assert check_alpha(alpha) == float(alpha) and type(check_alpha(alpha)) is float


def test_a_negative_seed_is_refused_naming_the_seed():
    with pytest.raises(ValueError, match="seed must be a non-negative integer or a numpy Generator; got -1"):
        make_rng(-1)
    assert make_rng(np.int64(3)).integers(100) == np.random.default_rng(3).integers(100)

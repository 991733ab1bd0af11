"""Preprocessing: the robust scale is relative to the data, so detection does not depend on units."""

import numpy as np
import pytest

from ratiowatch.stream.detectors.offline import detect
from ratiowatch.stream.series.preprocess import (bridge_periodic_gaps, clip_unrepresentable, robust_scale,
                                                 standardise_columns)


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


class TestClipUnrepresentable:
    def test_ordinary_columns_are_returned_untouched(self):
        rng = np.random.default_rng(0)
        for x in (rng.normal(size=(500, 2)), rng.standard_t(1, size=(500, 1)), np.zeros((20, 1)),
                  np.r_[np.zeros(30), 1e6][:, None]):
            assert clip_unrepresentable(x) is x

    def test_an_error_code_is_winsorised_at_1e8_robust_sd(self):
        rng = np.random.default_rng(1)
        x = rng.normal(size=(400, 2))
        x[100, 0] = 9.9e37
        x[200, 1] = -1e300
        out = clip_unrepresentable(x)
        med, mad = np.median(x, axis=0), np.median(np.abs(x - np.median(x, axis=0)), axis=0)
        assert out[100, 0] == pytest.approx(med[0] + 1e8 * 1.4826 * mad[0], rel=1e-12)
        assert out[200, 1] == pytest.approx(med[1] - 1e8 * 1.4826 * mad[1], rel=1e-12)
        rest = np.ones(x.shape, dtype=bool)
        rest[100, 0] = rest[200, 1] = False
        assert np.array_equal(out[rest], x[rest])
        # centred by their mean, the ordinary values keep their differences
        centred = out[:, 0] - out[:, 0].mean()
        assert np.allclose(np.diff(centred[:50]), np.diff(x[:50, 0]), atol=1e-6)

    def test_a_mostly_constant_column_is_measured_by_its_other_values(self):
        x = np.r_[np.zeros(60), np.ones(20), 2.0 * np.ones(10), 9.9e37][:, None]  # MAD 0
        out = clip_unrepresentable(x)
        assert out[-1, 0] == 1e8 and np.array_equal(out[:-1], x[:-1])


def test_clip_unrepresentable_asks_for_columns():
    # a single series is refused alike whatever its values (it used to fail only where the MAD was 0)
    for x in (np.r_[np.zeros(5), 1.0, 1.0, 1.0, 9.9e37], np.arange(6.0)):
        with pytest.raises(ValueError, match=r"\(T, m\)"):
            clip_unrepresentable(x)


class TestStandardiseColumns:
    def test_columns_get_mean_zero_and_unit_sd(self):
        x = np.random.default_rng(0).normal(3.0, 7.0, size=(200, 2))
        z = standardise_columns(x)
        assert np.allclose(z.mean(axis=0), 0.0) and np.allclose(z.std(axis=0), 1.0)

    @pytest.mark.parametrize("level", [0.3, 1.0, 1e6, -2e-8])
    def test_a_column_constant_up_to_rounding_is_constant(self, level):
        # 0.1 + 0.2 and 0.3: divided by its sd, the rounding was a step of two sd
        flat = np.where(np.arange(100) < 50, level, level + np.spacing(level))[:, None]
        assert np.array_equal(standardise_columns(flat), np.zeros((100, 1)))

    def test_values_near_the_float_limits_neither_underflow_nor_overflow(self):
        for scale in (1e-300, 1e300):
            z = standardise_columns(scale * np.arange(4.0)[:, None])
            assert np.allclose(z.ravel(), (np.arange(4.0) - 1.5) / np.arange(4.0).std())


class TestBridgePeriodicGaps:
    def test_a_gap_gives_back_its_length_modulo_the_period_so_the_cycle_keeps_its_phase(self):
        # a cycle seen through gaps reads as the cycle itself, whole cycles left out
        cycle = np.array([0.0, 1.0, 5.0, 2.0, -3.0])
        x = np.tile(cycle, 12)[:, None]
        for a, b in [(7, 9), (20, 33), (41, 42)]:  # gaps of 2, 13 and 1 rows
            x[a:b] = np.nan
        rows = np.flatnonzero(~np.isnan(x[:, 0]))
        indices, values, bridged = bridge_periodic_gaps(x, rows, period=5)
        assert values.ravel().tolist() == np.tile(cycle, 12)[:values.shape[0]].tolist()
        assert indices[~bridged].tolist() == rows.tolist()
        assert indices[bridged].tolist() == [7, 8, 30, 31, 32, 41]  # each gap's last rows
        assert np.isnan(x[indices[bridged]]).all()

    def test_without_a_period_or_before_a_whole_one_a_gap_is_left_out_whole(self):
        x = np.arange(20.0)[:, None]
        x[3:5] = np.nan
        rows = np.flatnonzero(~np.isnan(x[:, 0]))
        for period in (0, 5):  # 0: no period; 5: only 3 rows before the gap
            indices, values, bridged = bridge_periodic_gaps(x, rows, period)
            assert indices.tolist() == rows.tolist() and not bridged.any()
            assert values.tolist() == x[rows].tolist()

    def test_gaps_at_the_ends_are_left_out_and_channels_are_copied_together(self):
        whole = np.c_[np.tile([1.0, 2.0, 3.0], 6), np.tile([10.0, 20.0, 30.0], 6)]
        x = whole.copy()
        x[:2] = x[10:12] = x[16:] = np.nan
        x[5, 1] = np.nan  # a row missing one channel is left out as the others
        rows = np.flatnonzero(~np.isnan(x).any(axis=1))
        indices, values, bridged = bridge_periodic_gaps(x, rows, period=3)
        assert indices.tolist() == list(range(2, 16))  # gaps of 1 and 2 rows give all back (mod 3)
        assert bridged.nonzero()[0].tolist() == [3, 8, 9]
        assert values.tolist() == whole[2:16].tolist()

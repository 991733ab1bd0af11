"""The offline replay's null: calibrated on serially dependent series (ratiowatch.stream.detectors.offline.DEFAULTS).

Permutations treat the pooled subsequences as exchangeable, which autocorrelated data are not; the
replay therefore switches to AR surrogates as soon as 50 values exist before its current window.
"""

import numpy as np
import pytest

from ratiowatch.stream.detectors.offline import DEFAULTS, detect


def _ar1(t_len: int, phi: float, seed: int) -> np.ndarray:
    e = np.random.default_rng(seed).normal(size=t_len)
    x = np.zeros(t_len)
    for t in range(1, t_len):
        x[t] = phi * x[t - 1] + e[t]
    return x


def _two_mean_shifts(seed: int, t_len: int = 1800, phi: float = 0.5) -> np.ndarray:
    x = _ar1(t_len, phi, seed)
    x[600:1200] += 3.0 / np.sqrt(1.0 - phi**2)  # three marginal standard deviations
    return x


def test_the_default_null_switches_from_permutations_to_ar_surrogates():
    assert DEFAULTS["null"] == "ar_or_permutation"


def test_stationary_ar1_series_raise_at_most_two_change_points_per_10k_samples():
    # 60,000 samples: T = 2000, phi in {0, 0.5, 0.9}, seeds 100-109 (measured: 7 change points;
    # permutations throughout found 141 on the same series)
    found = sum(len(detect(_ar1(2000, phi, 100 + s))) for phi in (0.0, 0.5, 0.9) for s in range(10))
    assert found <= 2 * 60_000 / 10_000, found


@pytest.mark.parametrize("seed", range(6))
def test_mean_shifts_in_an_ar1_series_are_located_without_a_cloud_of_spurious_points(seed):
    cps = detect(_two_mean_shifts(seed))
    for truth in (600, 1200):
        assert any(abs(c - truth) <= 10 for c in cps), cps
    assert len(cps) <= 3, cps  # at most one spurious point (seed 2 has one, at 237)


def test_permutations_throughout_would_scatter_spurious_points_on_the_same_series():
    cps = detect(_two_mean_shifts(0), null="permutation")
    assert len(cps) >= 5, cps  # measured: 8 points for 2 changes

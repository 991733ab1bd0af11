"""The offline detector's null: a change-free series gets any change point with probability
``false_alarm_rate`` (0.05), also when it is serially dependent, trending or few-valued."""

import numpy as np
import pytest

from ratiowatch.stream.detectors.offline import detect


def _ar1(t_len: int, phi: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    e = rng.normal(size=t_len)
    x = np.zeros(t_len)
    x[0] = e[0] / np.sqrt(1.0 - phi**2)
    for t in range(1, t_len):
        x[t] = phi * x[t - 1] + e[t]
    return x


def _two_mean_shifts(seed: int, t_len: int = 1800, phi: float = 0.5) -> np.ndarray:
    x = _ar1(t_len, phi, seed)
    x[600:1200] += 3.0 / np.sqrt(1.0 - phi**2)  # three marginal standard deviations
    return x


@pytest.mark.parametrize("t_len", [15, 100, 600])
def test_change_free_series_rarely_get_any_change_point(t_len):
    """AR(1) phi 0 / 0.5 / 0.9, random walks, linear trends and Poisson counts, seeds 0-9 each:
    60 series per length (measured: 5, 1 and 2 series with a change point at T = 15, 100, 600).
    Binomial(60, 0.05) exceeds 7 with probability 0.01."""
    rng_kinds = []
    for seed in range(10):
        rng = np.random.default_rng([seed, t_len])
        rng_kinds += [_ar1(t_len, 0.0, seed), _ar1(t_len, 0.5, seed), _ar1(t_len, 0.9, seed),
                      rng.normal(size=t_len).cumsum(), 0.01 * np.arange(t_len) + rng.normal(size=t_len),
                      rng.poisson(3.0, size=t_len).astype(float)]
    hits = sum(bool(detect(x, seed=i)) for i, x in enumerate(rng_kinds))
    assert hits <= 7, hits


@pytest.mark.parametrize("seed", range(6))
def test_mean_shifts_in_an_ar1_series_are_located_without_a_cloud_of_spurious_points(seed):
    cps = detect(_two_mean_shifts(seed))
    for truth in (600, 1200):
        assert any(abs(c - truth) <= 10 for c in cps), cps
    assert len(cps) <= 3, cps

"""Synthetic streams shared by tests of several detectors."""

from __future__ import annotations

import math

import numpy as np


def ar1(innovations: np.ndarray, phi: float) -> np.ndarray:
    """``x[0] = e[0]``, ``x[t] = phi x[t-1] + e[t]``: AR(1) driven by ``innovations``."""
    x = np.empty(innovations.shape[0])
    x[0] = innovations[0]
    for t in range(1, x.shape[0]):
        x[t] = phi * x[t - 1] + innovations[t]
    return x


def step_after_a_gross_value(value: float, seed: int = 2, at: int = 1268) -> np.ndarray:
    """AR(1) noise (phi = 0.5, 3,000 samples), a step of 2 marginal sd at 1,500 and one value of
    ``value`` marginal sd added at row ``at`` (a sensor's error code)."""
    x = ar1(np.random.default_rng([seed, 7]).normal(size=3000), 0.5)
    sd = 1 / math.sqrt(0.75)
    x[1500:] += 2 * sd
    x[at] += value * sd
    return x

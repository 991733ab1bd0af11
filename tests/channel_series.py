"""Series of several channels for the change-point tests."""

from __future__ import annotations

import numpy as np

from ratiowatch.stream.evaluate.synthetic import _jittered_phase, null_series


def five_cycles(t_len, seed, change=None):
    """Five independent jittered cycles of period 24 (the channels suite's channels_seasonal24); with
    ``change``, channel 2 moves up by one amplitude ("level") or turns square ("shape") at T / 2."""
    x = null_series("channels_seasonal24", t_len, seed)
    half = t_len // 2
    if change == "level":
        x[half:, 2] += 1.0
    elif change == "shape":
        rng = np.random.default_rng(1000 + seed)
        phase = _jittered_phase(rng, t_len - half, 24.0)
        x[half:, 2] = np.sign(np.sin(2 * np.pi * phase)) + rng.normal(0, 0.3, t_len - half)
    return x

"""The short-window sum of TailProbability (ratiowatch.stream.calibration.likelihood): a running sum
that a far-out raw score passes through keeps no trace of it once it has left the window."""

import numpy as np
import pytest

from ratiowatch.stream.calibration.likelihood import TailProbability

CALM = 0.1 + 0.01 * np.random.default_rng(0).random(3000)


@pytest.mark.parametrize("short", [1, 3, 10])
@pytest.mark.parametrize("spike", [1e17, 1e300])
def test_one_huge_raw_score_leaves_no_offset_once_it_has_left_the_short_window(short, spike):
    """Subtracting 1e17 from a running sum of 1e17 and scores near 0.1 cancelled every digit of
    the scores: the smoothed score stayed off by about 0.1 for good (0.002 where the raw scores
    were 0.103), and a later anomaly mapped to 0 instead of 1."""
    x = np.r_[CALM[:500], spike, CALM[500:]]
    tp = TailProbability(short=short, min_raw=0.15, clip_tail=1e-5)
    tp.transform(x)
    assert tp._st_f[2] / short == pytest.approx(x[-short:].mean(), rel=1e-12)  # the smoothed score held
    assert tp.peek(1.0) == tp.update(1.0) == 1.0


def test_a_short_window_sum_that_overflowed_is_finite_again_once_its_values_have_left():
    """Two raw scores of 1.5e308 overflow the sum of a window of two to infinity; infinity minus
    either of them stayed infinite, and every later score mapped to 1."""
    tp = TailProbability(short=2, clip_tail=1e-5)
    out = tp.transform(np.r_[CALM[:500], 1.5e308, 1.5e308, CALM[500:]])
    assert out[500] == 1.0
    assert np.isfinite(tp._st_f[2]) and tp._st_f[2] / 2 == pytest.approx(CALM[-2:].mean(), rel=1e-12)
    assert out[-1000:].max() < 0.5


@pytest.mark.parametrize("short", [1, 3])
def test_peek_equals_update_as_the_huge_raw_score_leaves_the_window(short):
    x = np.r_[CALM[:500], 1e17, CALM[500:500 + short - 1]]
    tp = TailProbability(short=short, min_raw=0.15, clip_tail=1e-5)
    tp.transform(x)
    assert tp.peek(CALM[600]) == tp.update(CALM[600])
    assert tp._st_f[2] / short == pytest.approx(np.r_[x, CALM[600]][-short:].mean(), rel=1e-12)


def test_scores_within_a_few_decades_of_each_other_keep_their_running_sum():
    """The sum is added up afresh only where a score leaving it dwarfs what remains: raw scores
    that hover near 0.1, even with spikes 10 times as large, map exactly as the running sum alone
    maps them (a mapper that never adds up afresh, written out here)."""
    rng = np.random.default_rng(1)
    raw = np.abs(rng.normal(0.1, 0.03, 3000)) * np.where(rng.random(3000) < 0.01, 10.0, 1.0)
    short = 4
    running, ring = 0.0, np.zeros(short)
    held = []
    for t, v in enumerate(raw):
        running += v
        if t >= short:
            running -= ring[t % short]
        ring[t % short] = v
        held.append(running)
    tp = TailProbability(short=short)
    for v, want in zip(raw, held):
        tp.update(v)
        assert tp._st_f[2] == want

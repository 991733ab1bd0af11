"""The stuck-sensor score: runs of exactly repeated values against a Markov chain of the history's repeats."""

import numpy as np
import pytest

from ratiowatch.stream.calibration.repeats import RepeatRunTail
from naive import repeat_run_score


def _with_runs(seed, length=1500):
    """Rounded AR(1) values (repeats come in runs of their own) with a stuck stretch of 25 rows."""
    rng = np.random.default_rng(seed)
    x = np.zeros(length)
    for t in range(1, length):
        x[t] = 0.8 * x[t - 1] + rng.normal()
    x = np.round(x)
    x[900:925] = x[899]
    return x


@pytest.mark.parametrize("seed", range(3))
def test_every_row_matches_the_written_out_chain(seed):
    x = _with_runs(seed)
    out = RepeatRunTail(history=300, min_history=50).transform(x)
    for t in range(x.size):
        assert out[t] == pytest.approx(repeat_run_score(x, t, history=300, min_history=50), abs=1e-12), t


def test_a_stuck_continuous_reading_is_found_within_a_few_rows():
    x = np.random.default_rng(0).normal(size=3000)
    x[2000:2030] = x[1999]
    out = RepeatRunTail().transform(x)
    assert out[:2000].max() == 0.0  # continuous noise never repeats
    assert out[2000] > 0.3  # a first repeat is already a 1-in-2,000 event
    assert np.all(np.diff(out[2000:2030]) >= 0) and out[2029] == 1.0
    assert out[2030] == 0.0  # the run ended


def test_repeats_that_belong_to_the_series_are_not_flagged():
    """Sparse counts repeat often and in runs; the chain learns both, so a score of 0.5 (a tail of
    1e-5) is reached about as rarely as it says on 30,000 rows of Poisson counts of mean 0.5."""
    counts = np.random.default_rng(1).poisson(0.5, size=30000).astype(float)
    out = RepeatRunTail().transform(counts)
    assert np.mean(out >= 0.5) * 1e4 < 1.0
    assert np.mean(out >= 0.3) * 1e4 < 40.0  # nominal 10
    counts[20000:20040] = 0.0  # but forty zeros in a row are not like them
    assert RepeatRunTail().transform(counts)[20039] == 1.0


def test_a_run_is_judged_by_the_history_before_it():
    """Re-estimated at every row, the run's own repeats would teach the chain that repeats follow
    repeats: the 20th repeat after 400 rows of white noise would score 0.27. Judged by the history
    before the run, it scores 0.83 (a tail of about 1e-8)."""
    x = np.random.default_rng(0).normal(size=600)
    x[400:420] = x[399]
    assert RepeatRunTail().transform(x)[419] > 0.8


def test_peek_is_pure_and_equals_transform_and_state_restores():
    x = _with_runs(4)
    tp = RepeatRunTail(history=200, min_history=20)
    for v in x[:1000]:
        p = tp.peek(v)
        assert tp.peek(v) == p
        assert tp.transform([v])[0] == p
    twin = RepeatRunTail(history=200, min_history=20)
    twin.set_state(tp.state())
    np.testing.assert_array_equal(twin.transform(x[1000:]), tp.transform(x[1000:]))


def test_errors():
    with pytest.raises(ValueError, match="history"):
        RepeatRunTail(history=1)
    with pytest.raises(ValueError, match="min_history"):
        RepeatRunTail(history=10, min_history=20)
    with pytest.raises(ValueError, match="NaN"):
        RepeatRunTail().transform([1.0, np.nan])
    with pytest.raises(ValueError, match="finite"):
        RepeatRunTail().peek(float("inf"))

import numpy as np
import pytest

from ratiowatch.stream.series.embedding import History, embed


@pytest.mark.parametrize("k", [0, -2])
def test_a_subsequence_length_below_one_is_refused_as_such(k):
    # "need at least k=0 samples" read as a shortage of samples
    with pytest.raises(ValueError, match=rf"k \(the subsequence length\) must be >= 1; got k={k}"):
        embed(np.arange(10.0), k)


def test_a_series_shorter_than_the_subsequence_length_is_refused_with_both_lengths():
    with pytest.raises(ValueError, match="need at least k=11 samples to embed subsequences; got 10"):
        embed(np.arange(10.0), 11)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
@pytest.mark.parametrize("pushed", [3, 8], ids=["ring-partly-filled", "ring-wrapped"])
def test_a_history_checkpoint_holding_a_non_finite_sample_is_refused_naming_the_buffer(pushed, bad):
    # restored, a NaN sample surfaced hundreds of steps later as a failed fit, far from the checkpoint
    h = History(capacity=5, dim=2)
    for i in range(pushed):
        h.push([i, -i])
    state = h.to_state()
    assert History.from_state(state).last(len(h)).tolist() == h.last(len(h)).tolist()  # unwritten slots are 0
    buf, slot = state["buf"].copy(), (pushed - 1) % 5  # the newest sample's slot
    buf[slot, 1] = bad
    with pytest.raises(ValueError, match=f"history state: 'buf' holds NaN or infinite values .*slot {slot}"):
        History.from_state({**state, "buf": buf})

import numpy as np
import pytest

from ratiowatch.stream.series.embedding import embed


@pytest.mark.parametrize("k", [0, -2])
def test_a_subsequence_length_below_one_is_refused_as_such(k):
    # "need at least k=0 samples" read as a shortage of samples
    with pytest.raises(ValueError, match=rf"k \(the subsequence length\) must be >= 1; got k={k}"):
        embed(np.arange(10.0), k)


def test_a_series_shorter_than_the_subsequence_length_is_refused_with_both_lengths():
    with pytest.raises(ValueError, match="need at least k=11 samples to embed subsequences; got 10"):
        embed(np.arange(10.0), 11)

"""Sorted windows of the rank views: moved one value a step, equal to sorting afresh."""

import numpy as np
import pytest

from ratiowatch.stream.calibration.channels import channel_ratio, rank_diffs
from ratiowatch.stream.calibration.correlation import corr_ratio, fisher_z_diff, normal_scores
from ratiowatch.stream.calibration.ranked import push_row, sorted_windows, views_sorted


def _stream(rows=300, m=3, seed=0):
    x = np.random.default_rng(seed).normal(size=(rows, m))
    x[:, -1] = np.round(x[:, -1])  # a channel with many ties
    return x


def test_sorted_windows_stay_sorted_and_hold_the_last_2n_values():
    n, x = 10, _stream()
    sv, sa = sorted_windows(np.ascontiguousarray(x[:2 * n]), 2 * n)
    for t in range(2 * n, len(x)):
        push_row(sv, sa, x[t], t)
        for c in range(x.shape[1]):
            assert np.all(np.diff(sv[c]) >= 0)
            assert sorted(sa[c]) == list(range(t + 1 - 2 * n, t + 1))
            np.testing.assert_array_equal(sv[c], np.sort(x[t + 1 - 2 * n:t + 1, c]))
            np.testing.assert_array_equal(x[sa[c], c], sv[c])  # each value with its sequence number


def test_views_read_off_the_sorted_windows_equal_the_references():
    n, x = 20, _stream()
    sv, sa = sorted_windows(np.ascontiguousarray(x[:2 * n]), 2 * n)
    cthr, hthr = np.array([0.3, 0.5, np.inf]), np.array([0.05, 0.1, 0.2, 0.3, np.inf, 0.5])
    for t in range(2 * n, len(x)):
        push_row(sv, sa, x[t], t)
        corr, chan = views_sorted(sv, sa, t + 1, n, cthr, normal_scores(n), hthr)
        w = x[t + 1 - 2 * n:t + 1]
        assert corr == pytest.approx(np.max(np.abs(fisher_z_diff(w[:n], w[n:], ranks=True)) / cthr), rel=1e-12)
        assert chan == pytest.approx(np.max(np.abs(rank_diffs(w[:n], w[n:])) / hthr), rel=1e-12)


@pytest.mark.parametrize("d", [False, True])
def test_views_read_off_the_sorted_windows_equal_the_sorting_forms(d):
    n, k = 15, 3
    lv = np.cumsum(_stream(seed=1), axis=0)
    vals = np.diff(lv, axis=0) if d else lv
    t = 200
    w = np.ascontiguousarray(vals[t + 1 - 2 * n:t + 1])
    sv, sa = sorted_windows(w, t + 1)
    cthr, hthr, table = np.array([0.3, 0.5, 0.7]), np.full(6, 0.2), normal_scores(n)
    corr, chan = views_sorted(sv, sa, t + 1, n, cthr, table, hthr)
    levels = lv[t + 1 + d - (2 * n + k - 1 + d):t + 1 + d]
    assert corr == pytest.approx(corr_ratio(levels, k, n, d, cthr, table), rel=1e-12)
    assert chan == pytest.approx(channel_ratio(levels, k, n, d, hthr), rel=1e-12)


def test_a_view_without_thresholds_is_undefined():
    n, x = 10, _stream()
    sv, sa = sorted_windows(np.ascontiguousarray(x[:2 * n]), 2 * n)
    corr, chan = views_sorted(sv, sa, 2 * n, n, np.empty(0), normal_scores(n), np.full(6, 0.2))
    assert np.isnan(corr) and np.isfinite(chan)
    corr, chan = views_sorted(sv, sa, 2 * n, n, np.full(3, 0.2), normal_scores(n), np.empty(0))
    assert np.isfinite(corr) and np.isnan(chan)

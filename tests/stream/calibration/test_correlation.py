"""Correlation view (ratiowatch.stream.calibration.correlation): Fisher-z differences, and their compiled forms equal to them."""

import numpy as np
import pytest

from ratiowatch.stream.calibration.correlation import corr_ratio, fisher_z_diff, normal_scores, surrogate_zdiff


def test_fisher_z_diff_is_the_difference_of_transformed_correlations():
    rng = np.random.default_rng(1)
    past, cur = rng.normal(size=(4, 40, 3)), rng.normal(size=(4, 40, 3)) @ [[1, 0.5, 0], [0, 1, 0.3], [0, 0, 1]]
    d = fisher_z_diff(past, cur)
    assert d.shape == (4, 3)
    iu = np.triu_indices(3, 1)
    for b in range(4):
        want = np.arctanh(np.corrcoef(past[b].T)[iu]) - np.arctanh(np.corrcoef(cur[b].T)[iu])
        np.testing.assert_allclose(d[b], want, rtol=1e-10, atol=1e-12)


def test_fisher_z_diff_gives_no_evidence_for_a_constant_channel():
    rng = np.random.default_rng(2)
    past, cur = rng.normal(size=(30, 3)), rng.normal(size=(30, 3))
    cur[:, 1] = 0.1  # constant (and its mean is not exact in floating point)
    d = fisher_z_diff(past, cur)
    assert np.isfinite(d).all() and d[0] == 0.0 and d[2] == 0.0 and d[1] != 0.0  # pairs (0,1), (1,2) silent


def test_fisher_z_diff_null_is_normal_with_variance_2_over_n_minus_3():
    n = 50
    rng = np.random.default_rng(3)
    d = fisher_z_diff(rng.normal(size=(4000, n, 2)), rng.normal(size=(4000, n, 2)))[:, 0]
    assert d.var() == pytest.approx(2 / (n - 3), rel=0.08)
    assert abs(d.mean()) < 0.02 and np.quantile(np.abs(d), 0.99) == pytest.approx(2.576 * np.sqrt(2 / (n - 3)), rel=0.1)


def test_fisher_z_diff_rejects_bad_windows():
    with pytest.raises(ValueError, match="m >= 2"):
        fisher_z_diff(np.zeros((10, 1)), np.zeros((10, 1)))
    with pytest.raises(ValueError, match="at least 4 samples"):
        fisher_z_diff(np.zeros((3, 2)), np.zeros((3, 2)))


@pytest.mark.parametrize("ranks", [False, True])
@pytest.mark.parametrize("d", [False, True])
def test_compiled_correlation_view_equals_fisher_z_diff(d, ranks):
    rng = np.random.default_rng(4)
    n, k = 20, 3
    lv = np.cumsum(rng.normal(size=(2 * n + k - 1 + d, 3)), axis=0)
    lv[:, 1] = np.round(lv[:, 1])  # ties
    x = np.diff(lv, axis=0) if d else lv
    newest = x[k - 1:]
    thr = np.array([0.5, 0.7, np.inf])
    table = normal_scores(n) if ranks else np.empty(0)
    want = np.max(np.abs(fisher_z_diff(newest[:n], newest[n:], ranks=ranks)) / thr)
    assert corr_ratio(lv, k, n, d, thr, table) == pytest.approx(want, rel=1e-12)
    sims = rng.normal(size=(5, 2 * n, 3))
    sims[:, :, 2] = np.round(sims[:, :, 2])
    np.testing.assert_allclose(surrogate_zdiff(sims, n, table),
                               fisher_z_diff(sims[:, :n], sims[:, n:], ranks=ranks), rtol=1e-12, atol=1e-14)


def _gaussian_rank_corr(w):
    """Pearson's correlation of the normal scores Phi^-1(rank / (n + 1)), a tie group sharing the
    mean of its positions' scores: counted value by value."""
    from scipy.special import ndtri

    n = len(w)
    table = ndtri(np.arange(1, n + 1) / (n + 1.0))
    cols = []
    for c in range(w.shape[1]):
        v = w[:, c]
        below = [int(np.sum(v < x)) for x in v]
        equal = [int(np.sum(v == x)) for x in v]
        cols.append([table[b:b + e].mean() for b, e in zip(below, equal)])
    return np.corrcoef(np.array(cols))[0, 1]


def test_rank_fisher_z_diff_is_the_difference_of_transformed_gaussian_rank_correlations():
    rng = np.random.default_rng(5)
    past = rng.standard_t(3, size=(30, 2))
    cur = past @ np.array([[1.0, 0.8], [0.0, 0.6]]) + rng.normal(size=(30, 2))
    cur[:, 0] = np.round(cur[:, 0])  # ties
    want = np.arctanh(_gaussian_rank_corr(past)) - np.arctanh(_gaussian_rank_corr(cur))
    assert fisher_z_diff(past, cur, ranks=True)[0] == pytest.approx(want, rel=1e-12)
    # without ties and for a monotone map of each channel it is the same number
    a = rng.normal(size=(40, 2))
    b = rng.normal(size=(40, 2))
    np.testing.assert_allclose(fisher_z_diff(np.exp(a), b ** 3, ranks=True), fisher_z_diff(a, b, ranks=True),
                               rtol=1e-12)


def test_rank_fisher_z_diff_is_not_moved_by_a_gross_outlier():
    # one wild value per window pulls Pearson's r far more than the rank correlation: the reason the
    # detector's view uses ranks (heavy-tailed channels raised false alarms through this view)
    rng = np.random.default_rng(6)
    past, cur = rng.normal(size=(50, 2)), rng.normal(size=(50, 2))
    clean = fisher_z_diff(past, cur), fisher_z_diff(past, cur, ranks=True)
    cur[7] = [40.0, 40.0]
    dirty = fisher_z_diff(past, cur), fisher_z_diff(past, cur, ranks=True)
    pearson, ranked = abs(dirty[0][0] - clean[0][0]), abs(dirty[1][0] - clean[1][0])
    assert pearson > 1.0 and ranked < pearson / 10  # a rank's score is bounded (here by 2.06)

"""Correlation view (ratiowatch.stream.calibration.correlation): Fisher-z differences, and their compiled forms equal to them."""

import numpy as np
import pytest

from ratiowatch.stream.calibration.correlation import corr_ratio, fisher_z_diff, surrogate_zdiff


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


@pytest.mark.parametrize("d", [False, True])
def test_compiled_correlation_view_equals_fisher_z_diff(d):
    rng = np.random.default_rng(4)
    n, k = 20, 3
    lv = np.cumsum(rng.normal(size=(2 * n + k - 1 + d, 3)), axis=0)
    x = np.diff(lv, axis=0) if d else lv
    newest = x[k - 1:]
    thr = np.array([0.5, 0.7, np.inf])
    want = np.max(np.abs(fisher_z_diff(newest[:n], newest[n:])) / thr)
    assert corr_ratio(lv, k, n, d, thr) == pytest.approx(want, rel=1e-12)
    sims = rng.normal(size=(5, 2 * n, 3))
    np.testing.assert_allclose(surrogate_zdiff(sims, n), fisher_z_diff(sims[:, :n], sims[:, n:]),
                               rtol=1e-12, atol=1e-14)

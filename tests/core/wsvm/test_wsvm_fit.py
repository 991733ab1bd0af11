"""Exact initial solve of the weighted SVMs: agreement with scikit-learn and input validation."""

import numpy as np
import pytest
from sklearn.svm import SVC, SVR

from ratiowatch.core.wsvm import WeightedSVC, WeightedSVR, gamma_from_sigma, kernel_matrix


def _clf_data(seed, n=120, d=2):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = np.where(X[:, 0] + 0.6 * rng.normal(size=n) > 0, 1.0, -1.0)
    return X, y, rng


@pytest.mark.parametrize("kernel", ["rbf", "linear"])
def test_svc_fit_matches_sklearn_with_sample_weight(kernel):
    X, y, rng = _clf_data(1)
    sw = rng.uniform(0.1, 2.0, size=y.size)
    ours = WeightedSVC(C=3.0, kernel=kernel, gamma=0.7).fit(X, y, sw)
    ref = SVC(C=3.0, kernel=kernel, gamma=0.7, tol=1e-10).fit(X, y, sample_weight=sw)
    Xt = rng.normal(size=(60, 2))
    assert ours.kkt_violation() < 1e-8
    np.testing.assert_allclose(ours.decision_function(Xt), ref.decision_function(Xt), atol=1e-4)
    np.testing.assert_array_equal(ours.predict(Xt), ref.predict(Xt))


@pytest.mark.parametrize("kernel", ["rbf", "linear"])
def test_svr_fit_matches_sklearn_with_sample_weight(kernel):
    rng = np.random.default_rng(2)
    X = rng.uniform(-1, 1, size=(100, 2))
    y = np.sin(2 * X[:, 0]) + 0.5 * X[:, 1] + 0.1 * rng.normal(size=100)
    sw = rng.uniform(0.1, 2.0, size=100)
    ours = WeightedSVR(C=2.0, epsilon=0.1, kernel=kernel, gamma=1.5).fit(X, y, sw)
    ref = SVR(C=2.0, epsilon=0.1, kernel=kernel, gamma=1.5, tol=1e-10).fit(X, y, sample_weight=sw)
    Xt = rng.uniform(-1, 1, size=(60, 2))
    assert ours.kkt_violation() < 1e-8
    np.testing.assert_allclose(ours.predict(Xt), ref.predict(Xt), atol=1e-4)


def test_zero_weight_points_have_zero_coefficient_and_no_influence():
    X, y, rng = _clf_data(3, n=80)
    sw = rng.uniform(0.5, 1.5, size=80)
    sw[:10] = 0.0
    full = WeightedSVC(C=5.0, gamma=0.5).fit(X, y, sw)
    part = WeightedSVC(C=5.0, gamma=0.5).fit(X[10:], y[10:], sw[10:])
    assert np.all(full.dual_coef()[:10] == 0.0)
    Xt = rng.normal(size=(30, 2))
    np.testing.assert_allclose(full.decision_function(Xt), part.decision_function(Xt), atol=1e-7)


def test_kernel_helpers_follow_sklearn_gamma_and_project_sigma():
    x = np.array([[0.0, 0.0], [1.0, 2.0]])
    K = kernel_matrix(x, x, "rbf", gamma_from_sigma(2.0))
    assert K[0, 1] == pytest.approx(np.exp(-5.0 / 8.0))
    assert kernel_matrix(x, x, "linear", 1.0)[1, 1] == pytest.approx(5.0)


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: WeightedSVC().fit([[0.0], [np.nan]], [1, -1]), "NaN"),
        (lambda: WeightedSVC().fit(np.zeros((2, 2, 2)), [1, -1]), "shape"),
        (lambda: WeightedSVC().fit([[0.0], [1.0]], [1, 0]), "-1 or \\+1"),
        (lambda: WeightedSVC().fit([[0.0], [1.0]], [1, -1], [1.0, -0.5]), ">= 0"),
        (lambda: WeightedSVC().fit([[0.0], [1.0]], [1, -1], [1.0, 0.0]), "both classes"),
        (lambda: WeightedSVC().fit([[0.0], [1.0]], [1, -1, 1]), "labels for 2 samples"),
        (lambda: WeightedSVC(C=-1.0), "C must be"),
        (lambda: WeightedSVC(kernel="poly"), "kernel must be"),
        (lambda: WeightedSVC(gamma=0.0), "gamma"),
        (lambda: WeightedSVR(epsilon=-0.1), "epsilon"),
        (lambda: WeightedSVR().fit([[0.0], [1.0]], [0.0, np.inf]), "NaN or infinite"),
        (lambda: WeightedSVC().decision_function([[0.0]]), "not fitted"),
    ],
)
def test_bad_input_raises_value_error_with_guidance(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_path_rejects_bad_weights():
    X, y, _ = _clf_data(4, n=30)
    m = WeightedSVC().fit(X, y)
    with pytest.raises(ValueError, match="length 30"):
        m.path(np.ones(29))
    with pytest.raises(ValueError, match=">= 0"):
        m.path(-np.ones(30))
    with pytest.raises(ValueError, match="NaN"):
        m.path(np.full(30, np.nan))
    with pytest.raises(ValueError, match="both classes"):
        m.path(np.where(y > 0, 1.0, 0.0))
    with pytest.raises(ValueError, match="features"):
        m.decision_function(np.zeros((3, 5)))

"""Covariate-shift adaptation: uLSIF importance weights followed by one weight-path update."""

import numpy as np
import pytest
from sklearn.svm import SVR

from ratiowatch.core.rulsif import fit_ulsif
from ratiowatch.core.wsvm import WeightedSVC, WeightedSVR
from ratiowatch.stream.learners.shift import adapt


def _shifted_problem(seed):
    """Shimodaira's setting: a misspecified (linear) model, training and test inputs shifted."""
    rng = np.random.default_rng(seed)
    x_tr = rng.normal(1.0, 0.5, size=(150, 1))
    x_te = rng.normal(2.0, 0.3, size=(150, 1))

    def f(x):
        return np.sinc(x[:, 0]) + 0.05 * rng.normal(size=x.shape[0])

    return x_tr, f(x_tr), x_te, f(x_te)


def test_adapt_equals_sklearn_refit_with_ulsif_weights_and_keeps_kkt():
    x_tr, y_tr, x_te, _ = _shifted_problem(0)
    model = WeightedSVR(C=1.0, epsilon=0.02, kernel="linear").fit(x_tr, y_tr)
    res = adapt(model, x_te, seed=0)
    w_direct = np.maximum(fit_ulsif(x_te, x_tr, seed=0).ratio(x_tr), 0.0)
    np.testing.assert_allclose(res.importance, w_direct)
    assert res.stats.events > 0
    assert model.kkt_violation() < 1e-6
    ref = SVR(C=1.0, epsilon=0.02, kernel="linear", tol=1e-10).fit(x_tr, y_tr, sample_weight=w_direct)
    np.testing.assert_allclose(model.predict(x_te), ref.predict(x_te), atol=1e-4)


def test_importance_weighting_lowers_error_on_the_new_inputs():
    gains = []
    for seed in range(3):
        x_tr, y_tr, x_te, y_te = _shifted_problem(seed)
        model = WeightedSVR(C=1.0, epsilon=0.02, kernel="linear").fit(x_tr, y_tr)
        before = np.mean((model.predict(x_te) - y_te) ** 2)
        adapt(model, x_te, seed=0)
        after = np.mean((model.predict(x_te) - y_te) ** 2)
        gains.append(before - after)
    assert min(gains) > 0.0


def test_flatten_reaches_the_intermediate_point_of_the_segment():
    x_tr, y_tr, x_te, _ = _shifted_problem(3)
    model = WeightedSVR(C=1.0, epsilon=0.02, kernel="rbf", gamma=1.0).fit(x_tr, y_tr)
    res = adapt(model, x_te, flatten=0.5, seed=0)
    np.testing.assert_allclose(res.sample_weight, 0.5 + 0.5 * res.importance)
    ref = SVR(C=1.0, epsilon=0.02, gamma=1.0, tol=1e-10).fit(x_tr, y_tr, sample_weight=res.sample_weight)
    np.testing.assert_allclose(model.predict(x_te), ref.predict(x_te), atol=1e-4)


def test_adapt_classifier_and_bad_input():
    rng = np.random.default_rng(4)
    x = rng.normal(size=(100, 2))
    y = np.where(x[:, 0] + x[:, 1] > 0, 1.0, -1.0)
    model = WeightedSVC(C=2.0, gamma=0.5).fit(x, y)
    res = adapt(model, rng.normal(0.5, 1.0, size=(80, 2)), seed=0)
    assert model.kkt_violation() < 1e-6 and res.stats.events > 0
    with pytest.raises(ValueError, match="flatten"):
        adapt(model, x, flatten=2.0)
    with pytest.raises(ValueError, match="features"):
        adapt(model, np.zeros((10, 3)))
    with pytest.raises(ValueError, match="WeightedSVC or WeightedSVR"):
        adapt(object(), x)

"""Weight paths at their edges: every weight to 0, weights that end at 0 inside the margin,
failures in the middle of a path, kernels of large scale, tiny targets and invalid inputs."""

import numpy as np
import pytest

from ratiowatch.core.wsvm import WeightedSVC, WeightedSVR
from ratiowatch.core.wsvm.solver import M_SET


def _classification(seed, n=None):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(4, 40)) if n is None else n
    X = rng.normal(size=(n, 2))
    y = np.where(X[:, 0] + 0.4 * rng.normal(size=n) > 0, 1.0, -1.0)
    y[:2] = [1.0, -1.0]
    return X, y


def test_path_to_all_zero_weights_ends_with_every_coefficient_at_zero():
    # Before: the last margin point left a rounding step short of theta = 1, the empty margin then
    # found no point to carry the bias and the path raised "no feasible bias", leaving the weights
    # at 1 with coefficients at 0 (and a later path(ones) silently wrong).
    X = np.array([[0.5], [0.1], [-2.0]])
    y = np.array([1.0, -1.0, -1.0])
    svc = WeightedSVC(C=1.0, gamma=1.0).fit(X, y)
    svc.path(np.zeros(3))
    assert svc.dual_coef().tolist() == [0.0, 0.0, 0.0]
    assert svc.sample_weight_.tolist() == [0.0, 0.0, 0.0]
    assert svc.kkt_violation() == 0.0
    svc.path(np.ones(3))  # and back: the same model as a fresh fit
    fresh = WeightedSVC(C=1.0, gamma=1.0).fit(X, y)
    np.testing.assert_allclose(svc.decision_function(X), fresh.decision_function(X), atol=1e-12)

    Xr = np.array([[0.3], [-0.5], [-1.3], [-1.9]])
    svr = WeightedSVR(C=1.0, gamma=1.0, epsilon=0.1).fit(Xr, np.array([0.0, -0.8, -0.9, -0.2]))
    svr.path(np.zeros(4))
    assert svr.dual_coef().tolist() == [0.0] * 4


@pytest.mark.parametrize("seed", range(12))
def test_path_to_all_zero_weights_never_fails_on_random_problems(seed):
    # before: about 40 % of such classification problems and 9 % of regression ones raised
    X, y = _classification(seed)
    n = len(y)
    for model in (WeightedSVC(C=1.0, gamma=0.7).fit(X, y),
                  WeightedSVR(C=1.0, gamma=0.7, epsilon=0.05).fit(X, np.sin(2 * X[:, 0]))):
        model.path(np.zeros(n))
        assert np.all(model.dual_coef() == 0.0)
        assert model.kkt_violation() == 0.0
        model.remove_points(model.ids_)  # nothing is left in the margin


def test_points_whose_weight_reaches_zero_in_the_margin_can_be_removed():
    # Before: a margin variable whose alpha and bound both reach 0 at the end of the segment tied
    # with the end, stayed in M with alpha 1.5e-16 and remove_points refused the point.
    rng = np.random.default_rng(134)
    n = int(rng.integers(6, 40))
    X = rng.normal(size=(n, 2))
    y = np.where(X[:, 0] + 0.4 * rng.normal(size=n) > 0, 1.0, -1.0)
    y[:2] = [1.0, -1.0]
    model = WeightedSVC(C=1.0, gamma=0.7).fit(X, y)
    frac = float(rng.choice([0.5, 0.8, 0.95]))
    sw = rng.uniform(0.5, 1.5, n)
    sw[rng.random(n) < frac] = 0.0
    if rng.random() < 0.5:
        sw[:2] = np.maximum(sw[:2], 0.5)
    if not np.any(sw[y > 0] > 0) or not np.any(sw[y < 0] > 0):
        sw[:2] = 1.0
    assert np.flatnonzero(sw).tolist() == [0, 1]  # only one point of each class keeps weight
    model.path(sw)
    pf = model._pf
    assert not np.any((pf.st == M_SET) & (pf.c == 0.0))
    assert model.kkt_violation() < 1e-12
    model.remove_points(model.ids_[2:])
    fresh = WeightedSVC(C=1.0, gamma=0.7).fit(X[:2], y[:2], sw[:2])
    # (both points end at their bound: the coefficients are unique, the bias is any point of an interval)
    np.testing.assert_allclose(model.dual_coef(), fresh.dual_coef(), atol=1e-12)


@pytest.mark.parametrize("error", [KeyboardInterrupt, ValueError])
def test_an_exception_inside_a_path_leaves_the_model_as_it_was(error):
    # Before: the model stayed half-way along the segment with the old weights, and the next
    # path() call returned a solution that violated the KKT conditions by 0.7.
    rng = np.random.default_rng(1)
    n = 60
    X = rng.normal(size=(n, 2))
    y = np.where(X[:, 0] + 0.4 * rng.normal(size=n) > 0, 1.0, -1.0)
    sw = rng.uniform(0.0, 3.0, n)
    model = WeightedSVC(C=2.0, gamma=0.7).fit(X, y)
    coef, bias, events = model.dual_coef(), model.intercept_, model.n_events_
    calls = []

    def stop_at_the_fifth_breakpoint(_model, _theta):
        calls.append(_theta)
        if len(calls) == 5:
            raise error("stop")

    with pytest.raises(error):
        model.path(sw, on_breakpoint=stop_at_the_fifth_breakpoint)
    assert np.array_equal(model.sample_weight_, np.ones(n))
    assert np.array_equal(model.dual_coef(), coef) and model.intercept_ == bias
    assert model.n_events_ == events
    assert model.kkt_violation() < 1e-12
    model.path(sw)
    fresh = WeightedSVC(C=2.0, gamma=0.7).fit(X, y, sw)
    assert model.kkt_violation() < 1e-8
    np.testing.assert_allclose(model.decision_function(X), fresh.decision_function(X), atol=1e-8)


def test_the_breakpoint_callback_reads_the_solution_and_weights_at_theta():
    # before: kkt_violation() and sample_weight_ reported the start-of-segment weights (a KKT
    # violation of order 1 at an exact breakpoint)
    rng = np.random.default_rng(1)
    X = rng.normal(size=(60, 2))
    y = np.where(X[:, 0] + 0.4 * rng.normal(size=60) > 0, 1.0, -1.0)
    target = rng.uniform(0.0, 3.0, 60)
    model = WeightedSVC(C=2.0, gamma=0.7).fit(X, y)
    seen = []

    def check(m, theta):
        seen.append(theta)
        assert m.kkt_violation() < 1e-10
        np.testing.assert_allclose(m.sample_weight_, 1.0 + theta * (target - 1.0), rtol=1e-14, atol=1e-14)

    model.path(target, on_breakpoint=check)
    assert len(seen) > 5
    np.testing.assert_array_equal(model.sample_weight_, target)


def test_linear_kernel_on_features_of_scale_1e6_follows_the_exact_path():
    # Before: the margin slopes (weight units) were filtered at a tolerance scaled by the kernel
    # (1e12 here), so no margin point ever left the margin: alpha reached 5.8 in the box [0, 1]
    # and three training points of separable data were misclassified.
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 2)) * 1e6
    y = np.where(X[:, 0] > 0, 1.0, -1.0)
    model = WeightedSVC(C=1.0, kernel="linear")
    model.add_points(X, y)
    model.path(np.ones(40))
    assert np.abs(model.dual_coef()).max() <= 1.0
    assert model.kkt_violation() < 1e-10
    assert np.array_equal(model.predict(X), y)


def test_linear_kernel_fit_on_features_of_scale_1e6():
    # before: the polish asked for KKT to 2e-9 where rounding alone leaves more in the gradient
    # (kernel entries of 1e12), and fit raised "polish did not settle the index sets"
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 2)) * 1e6
    y = np.where(X[:, 0] > 0, 1.0, -1.0)
    fit = WeightedSVC(C=1.0, kernel="linear").fit(X, y)
    pth = WeightedSVC(C=1.0, kernel="linear")
    pth.add_points(X, y)
    pth.path(np.ones(40))
    assert fit.kkt_violation() < 1e-10
    assert np.array_equal(fit.predict(X), y)
    np.testing.assert_allclose(fit.decision_function(X), pth.decision_function(X), atol=1e-6)


def test_svr_fit_is_exact_for_targets_of_scale_1e8():
    # Before: SMO and the polish stopped at absolute tolerances of 1e-10 and 1e-9, coarse for
    # targets and a tube of 1e-8: the fit was off by 2.4 % of the target scale.
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 2))
    y = np.sin(X[:, 0])
    s = 1e-8
    small = WeightedSVR(C=1.0, epsilon=0.1 * s, ridge=0.0).fit(X, y * s)
    # (y s, eps s, C) is the problem (y, eps, C / s) scaled by s
    same = WeightedSVR(C=1.0 / s, epsilon=0.1, ridge=0.0)
    same.add_points(X, y)
    same.path(np.ones(40))
    assert np.abs(small.predict(X) - s * same.predict(X)).max() / s < 1e-5


def test_invalid_parameters_and_states_are_refused_with_value_errors():
    # before: TypeError from float(None), KeyError / AttributeError from inside from_state
    with pytest.raises(ValueError, match="C must be a number"):
        WeightedSVC(C=None)
    with pytest.raises(ValueError, match="epsilon must be a number"):
        WeightedSVR(epsilon="wide")
    with pytest.raises(ValueError, match="gamma must be a number"):
        WeightedSVR(gamma=None)
    with pytest.raises(ValueError, match="missing key 'kernel'"):
        WeightedSVC.from_state({"version": 1, "class": "WeightedSVC"})
    with pytest.raises(ValueError, match="not a WeightedSVC state"):
        WeightedSVC.from_state(None)
    with pytest.raises(ValueError, match="not a WeightedSVR state"):
        WeightedSVR.from_state({"version": None, "class": "WeightedSVR"})
    X, y = _classification(3, n=12)
    state = WeightedSVC(C=1.0).fit(X, y).to_state()
    del state["M"]
    with pytest.raises(ValueError, match="missing key 'M'"):
        WeightedSVC.from_state(state)

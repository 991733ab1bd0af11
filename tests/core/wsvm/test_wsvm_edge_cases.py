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


def _repeated_inputs(seed, n=60):
    rng = np.random.default_rng(seed)
    X = rng.integers(0, 4, size=(n, 2)).astype(float)  # a 4 x 4 grid: every input repeats
    y = np.where(X[:, 0] + rng.normal(size=n) > 1.5, 1.0, -1.0)
    return X, y, rng


@pytest.mark.parametrize("seed", range(6))
def test_path_to_all_zero_weights_with_repeated_inputs_ends_at_zero_and_can_return(seed):
    # before: nearly every such problem raised "no feasible bias": the margin emptied a rounding
    # step short of theta = 1 while z'a kept a residue larger than what was left of the weights
    X, y, rng = _repeated_inputs(seed)
    sw = rng.uniform(0.5, 1.5, size=y.size)
    for cls, target in ((WeightedSVC, y), (WeightedSVR, X[:, 0] - X[:, 1])):
        model = cls(C=10.0, gamma=0.5, ridge=1e-6).fit(X, target)
        model.path(np.zeros(y.size))
        assert np.all(model.dual_coef() == 0.0)
        assert model.kkt_violation() == 0.0
        model.path(sw)  # and back up: the model of a fresh fit at those weights
        refit = cls(C=10.0, gamma=0.5, ridge=1e-6).fit(X, target, sw)
        assert model.kkt_violation() < 1e-6  # repeated inputs: margin systems of condition ~1e7
        np.testing.assert_allclose(model.decision_function(X), refit.decision_function(X), atol=1e-6)


def test_weights_whose_product_with_C_overflows_are_refused_by_fit():
    # before: C * sample_weight = inf was accepted and the "solution" had a KKT violation of 1
    X, y = _classification(4, n=20)
    model = WeightedSVC(C=10.0, kernel="linear").fit(X[:10], y[:10])
    before = model.decision_function(X)
    with pytest.raises(ValueError, match="C \\* sample_weight overflows"):
        model.fit(X, y, np.full(20, 1e308))
    np.testing.assert_array_equal(model.decision_function(X), before)  # a refused fit changes nothing
    assert model.ids_.tolist() == list(range(10))


@pytest.mark.parametrize("C", [1e12, 1e14, 1e16])
def test_very_large_C_on_separable_data_gives_the_hard_margin_solution(C):
    # before: C = 1e14 returned a = 0 (KKT violation 1.0, half the training points wrong): the
    # rounding floor eps * max K * sum(C) became the solver's tolerance
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 2))
    y = np.where(X[:, 0] + X[:, 1] > 0, 1.0, -1.0)
    model = WeightedSVC(C=C, kernel="linear").fit(X, y)
    hard = WeightedSVC(C=1e6, kernel="linear").fit(X, y)  # no coefficient reaches 1e6 here
    assert np.all(np.abs(hard.dual_coef()) < 1e6)
    assert model.kkt_violation() < 1e-8
    assert np.all(model.predict(X) == y)
    np.testing.assert_allclose(model.decision_function(X), hard.decision_function(X), rtol=1e-6, atol=1e-6)


def test_path_at_large_C_stays_as_exact_as_a_refit():
    # before: 60 events at C = 1e5 left a KKT violation of 5e-5 and the decision function 2e-3
    # away from a refit (the incrementally updated margin inverse drifts at that scale)
    rng = np.random.default_rng(1)
    X = rng.normal(size=(60, 2))
    y = np.sin(X[:, 0]) + 0.1 * rng.normal(size=60)
    Xt = rng.normal(size=(30, 2))
    sw = rng.uniform(0, 2, 60)
    sw[rng.random(60) < 0.2] = 0.0
    model = WeightedSVR(C=1e5, epsilon=0.05, gamma=0.7, ridge=1e-6).fit(X, y)
    model.path(sw)
    refit = WeightedSVR(C=1e5, epsilon=0.05, gamma=0.7, ridge=1e-6).fit(X, y, sw)
    assert model.kkt_violation() < 1e-8
    np.testing.assert_allclose(model.predict(Xt), refit.predict(Xt), atol=1e-7)


@pytest.mark.parametrize("call, name", [
    (lambda X, y: WeightedSVC().fit(X, [10**400, -1, 1, -1]), "y"),
    (lambda X, y: WeightedSVR().fit(X, [10**400, 0.0, 1.0, 2.0]), "y"),
    (lambda X, y: WeightedSVC().fit(X, y, [10**400, 1, 1, 1]), "sample_weight"),
    (lambda X, y: WeightedSVC().fit(X, y).path([10**400, 1, 1, 1]), "sample_weight_new"),
])
def test_numbers_beyond_the_float_range_are_refused_with_value_errors(call, name):
    # before: a bare OverflowError from the float conversion
    X = np.random.default_rng(0).normal(size=(4, 2))
    with pytest.raises(ValueError, match=f"^{name} holds a number too large"):
        call(X, np.array([1.0, -1.0, 1.0, -1.0]))


def test_a_point_that_overflows_the_kernel_is_refused_and_the_model_is_unchanged():
    rng = np.random.default_rng(2)
    X = rng.normal(size=(20, 2))
    model = WeightedSVR(C=1.0, kernel="linear").fit(X, X[:, 0])
    before = model.decision_function(X)
    with pytest.raises(ValueError, match="kernel overflows"):
        model.add_points(np.array([[1e160, 0.0]]), [1.0])
    assert model.ids_.tolist() == list(range(20))
    np.testing.assert_array_equal(model.decision_function(X), before)
    model.add_points(np.array([[1.0, 0.0]]), [1.0])  # the model goes on as before
    model.path(np.ones(21))
    assert model.kkt_violation() < 1e-10
    with pytest.raises(ValueError, match="kernel overflows"):
        WeightedSVR(C=1.0, kernel="linear").fit(np.array([[1e160, 0.0], [0.0, 1.0]]), [0.0, 1.0])


def test_kernel_scale_follows_the_points_down_when_a_large_one_is_removed():
    # before: the scale only grew, and tol * kscale of a point of norm 1e7 long gone filtered out
    # every event of the path (KKT violation 8, predictions 5 away from a refit)
    rng = np.random.default_rng(5)
    X = rng.normal(size=(30, 2))
    y = X[:, 0] - X[:, 1]
    model = WeightedSVR(C=1.0, epsilon=0.05, kernel="linear", ridge=1e-6).fit(X[:20], y[:20])
    model.reserve(32)  # as a stream's window: the slots are reused, never regrown
    (big,) = model.add_points(np.array([[1e7, 0.0]]), [0.0])
    model.path(np.r_[np.ones(20), 1.0])
    model.path(np.r_[np.ones(20), 0.0])
    model.remove_points([big])
    model.add_points(X[20:], y[20:])
    sw = np.r_[np.zeros(10), np.ones(20)]
    model.path(sw)
    refit = WeightedSVR(C=1.0, epsilon=0.05, kernel="linear", ridge=1e-6).fit(X, y, sw)
    assert model.kkt_violation() < 1e-10
    np.testing.assert_allclose(model.predict(X), refit.predict(X), atol=1e-9)

"""Weight-path following: KKT after every update, agreement with scikit-learn refits, the toy
problem of Table 1 (Karasuyama et al. 2012), degenerate starts, exact removal and duplicates."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.svm import SVC, SVR

from ratiowatch.core.wsvm import WeightedSVC, WeightedSVR
from ratiowatch.core.wsvm.solver import M_SET, solve


def toy_table1(n, rng):
    """Eq. (27) of the paper: four Gaussian groups, D_1 = cost-1 points, inputs scaled to [0, 1]^2."""
    q = n // 4
    parts = [
        rng.multivariate_normal([1, 0], np.diag([1.0, 0.5]), q),
        rng.multivariate_normal([0, 0], np.diag([0.5, 0.5]), q),
        rng.multivariate_normal([0, 1], np.diag([1.0, 0.5]), q),
        rng.multivariate_normal([1, 1], np.diag([0.5, 0.5]), q),
    ]
    X = np.vstack(parts)
    y = np.r_[np.ones(2 * q), -np.ones(2 * q)]
    d1 = np.r_[np.ones(q, bool), np.zeros(q, bool), np.ones(q, bool), np.zeros(q, bool)]
    X = (X - X.min(0)) / (X.max(0) - X.min(0))
    return X, y, d1


@pytest.mark.parametrize("kernel", ["rbf", "linear"])
def test_svc_path_kkt_and_sklearn_agreement_over_several_legs(kernel):
    rng = np.random.default_rng(10)
    n = 120
    X = rng.normal(size=(n, 2))
    y = np.where(X[:, 0] - 0.5 * X[:, 1] + 0.7 * rng.normal(size=n) > 0, 1.0, -1.0)
    Xt = rng.normal(size=(50, 2))
    model = WeightedSVC(C=4.0, kernel=kernel, gamma=0.8).fit(X, y, rng.uniform(0.2, 2.0, size=n))
    for leg in range(4):
        sw = rng.uniform(0.0, 3.0, size=n)
        sw[rng.random(n) < 0.1] = 0.0
        stats = model.path(sw)
        assert stats.events > 0
        assert model.kkt_violation() < 1e-6, leg
        ref = SVC(C=4.0, kernel=kernel, gamma=0.8, tol=1e-10).fit(X, y, sample_weight=sw)
        np.testing.assert_allclose(model.decision_function(Xt), ref.decision_function(Xt), atol=1e-4)


@pytest.mark.parametrize("kernel", ["rbf", "linear"])
def test_svr_path_kkt_and_sklearn_agreement_over_several_legs(kernel):
    rng = np.random.default_rng(11)
    n = 100
    X = rng.uniform(-1, 1, size=(n, 2))
    y = np.cos(2 * X[:, 0]) + X[:, 1] + 0.1 * rng.normal(size=n)
    Xt = rng.uniform(-1, 1, size=(40, 2))
    model = WeightedSVR(C=3.0, epsilon=0.08, kernel=kernel, gamma=1.0).fit(X, y)
    for leg in range(3):
        sw = rng.uniform(0.0, 3.0, size=n)
        model.path(sw)
        assert model.kkt_violation() < 1e-6, leg
        ref = SVR(C=3.0, epsilon=0.08, kernel=kernel, gamma=1.0, tol=1e-10).fit(X, y, sample_weight=sw)
        np.testing.assert_allclose(model.predict(Xt), ref.predict(Xt), atol=1e-4)


def test_table1_toy_event_count_and_checkpoints_match_resolved_solution():
    """C_1: 0 -> 10 on D_1 with C_2 = 10 (gamma = 1 in the paper's gamma/p convention, p = 2)."""
    n = 200
    X, y, d1 = toy_table1(n, np.random.default_rng(400))
    model = WeightedSVC(C=10.0, gamma=0.5).fit(X, y, np.where(d1, 0.0, 1.0))
    pf = model._pf
    worst_kkt, worst_alpha, checked = 0.0, 0.0, []

    def check(m, theta):
        nonlocal worst_kkt, worst_alpha
        worst_kkt = max(worst_kkt, m.kkt_violation())
        c_theta = pf.c0 + theta * pf.d
        a_ref = solve(pf.K, pf.pt, pf.z, pf.p, c_theta, ridge=pf.ridge)[0]
        a_now = pf.a.copy()
        a_now[pf.st == 2] = c_theta[pf.st == 2]
        worst_alpha = max(worst_alpha, float(np.max(np.abs(a_now - a_ref))))
        checked.append(theta)

    # the callback sees c(theta) through pf.c0/pf.d; kkt_violation uses pf.c, keep it in sync
    def on_bp(m, theta):
        pf.c[:] = pf.c0 + theta * pf.d
        check(m, theta)

    stats = model.path(np.ones(n), on_breakpoint=on_bp)
    assert 0.6 * n <= stats.events <= 1.1 * n  # paper: about 0.8-0.9 n
    assert 2.0 <= stats.mean_margin <= 4.5  # paper: 3.07-3.50
    assert len(checked) == stats.events
    assert worst_kkt < 1e-6
    assert worst_alpha < 1e-6
    assert model.kkt_violation() < 1e-8


def test_start_from_all_zero_weights_does_not_cycle():
    rng = np.random.default_rng(12)
    n = 90
    X = rng.normal(size=(n, 2))
    y = np.where(rng.random(n) < 0.25, 1.0, -1.0)  # unbalanced: a massive tie at c = 0
    X[y > 0] += 1.0
    model = WeightedSVC(C=2.0, gamma=1.0)
    ids = model.add_points(X, y)
    assert len(ids) == n
    sw = rng.uniform(0.5, 1.5, size=n)
    stats = model.path(sw)
    assert stats.events < 10 * n  # terminates without endless O <-> M churn
    assert model.kkt_violation() < 1e-6
    ref = SVC(C=2.0, gamma=1.0, tol=1e-10).fit(X, y, sample_weight=sw)
    Xt = rng.normal(size=(30, 2))
    np.testing.assert_allclose(model.decision_function(Xt), ref.decision_function(Xt), atol=1e-4)


def test_svr_start_from_zero_and_stream_like_legs():
    rng = np.random.default_rng(13)
    X = rng.uniform(size=(60, 1))
    y = np.sin(5 * X[:, 0]) + 0.05 * rng.normal(size=60)
    model = WeightedSVR(C=5.0, epsilon=0.05, gamma=5.0)
    model.add_points(X, y)
    model.path(np.ones(60))
    assert model.kkt_violation() < 1e-6
    ref = WeightedSVR(C=5.0, epsilon=0.05, gamma=5.0).fit(X, y)
    np.testing.assert_allclose(model.predict(X), ref.predict(X), atol=1e-7)


def test_weight_to_zero_removes_the_point_exactly():
    rng = np.random.default_rng(14)
    n = 70
    X = rng.normal(size=(n, 2))
    y = np.where(X[:, 1] > 0, 1.0, -1.0)
    y[:5] *= -1  # a few label-noise points: they sit at the bound before removal
    model = WeightedSVC(C=5.0, gamma=0.5).fit(X, y)
    before = model.dual_coef()[:5]
    assert np.all(before != 0.0)
    sw = np.ones(n)
    sw[:5] = 0.0
    model.path(sw)
    assert np.all(model.dual_coef()[:5] == 0.0)  # exactly zero, not 1e-17
    assert not np.any(model._pf.st[model._slots_of(model.ids_[:5])] == M_SET)
    model.remove_points(model.ids_[:5])
    assert model.ids_.tolist() == list(range(5, n))
    ref = WeightedSVC(C=5.0, gamma=0.5).fit(X[5:], y[5:])
    Xt = rng.normal(size=(20, 2))
    np.testing.assert_allclose(model.decision_function(Xt), ref.decision_function(Xt), atol=1e-7)
    assert model.kkt_violation() < 1e-8


def test_remove_points_refuses_points_with_weight():
    rng = np.random.default_rng(15)
    X = rng.normal(size=(20, 2))
    y = np.where(X[:, 0] > 0, 1.0, -1.0)
    model = WeightedSVC().fit(X, y)
    with pytest.raises(ValueError, match="weights at 0"):
        model.remove_points([0])
    with pytest.raises(ValueError, match="unknown point id"):
        model.remove_points([99])


def test_duplicate_points_keep_kkt():
    rng = np.random.default_rng(16)
    base = rng.normal(size=(30, 2))
    X = np.vstack([base, base[:15]])  # exact duplicates
    y = np.where(X[:, 0] + X[:, 1] > 0, 1.0, -1.0)
    model = WeightedSVC(C=10.0, gamma=1.0, ridge=1e-6).fit(X, y)
    for _ in range(3):
        model.path(rng.uniform(0.0, 2.0, size=45))
        assert model.kkt_violation() < 1e-6


def test_growing_capacity_keeps_the_solution():
    rng = np.random.default_rng(17)
    X = rng.normal(size=(40, 2))
    y = np.where(X[:, 0] > 0, 1.0, -1.0)
    model = WeightedSVC(C=1.0, gamma=0.5).fit(X[:20], y[:20])
    f_before = model.decision_function(X)
    model.add_points(X[20:], y[20:])  # forces the slot buffer to grow
    np.testing.assert_allclose(model.decision_function(X), f_before, atol=1e-12)
    model.path(np.ones(40))
    ref = WeightedSVC(C=1.0, gamma=0.5).fit(X, y)
    np.testing.assert_allclose(model.decision_function(X), ref.decision_function(X), atol=1e-7)
    assert model.kkt_violation() < 1e-8


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000), c0=st.sampled_from([0.5, 5.0, 50.0]))
def test_property_random_legs_keep_kkt(seed, c0):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(10, 40))
    X = rng.normal(size=(n, 2))
    y = np.where(rng.random(n) < 0.5, 1.0, -1.0)
    y[0], y[1] = 1.0, -1.0
    model = WeightedSVC(C=c0, gamma=1.0).fit(X, y)
    for _ in range(3):
        sw = rng.uniform(0.0, 2.0, size=n)
        sw[rng.random(n) < 0.2] = 0.0
        sw[0] = sw[1] = 1.0
        model.path(sw)
        assert model.kkt_violation() < 1e-6 * max(1.0, c0)


@pytest.mark.parametrize("cls, kw", [(WeightedSVC, {}), (WeightedSVR, {"epsilon": 0.1})])
def test_state_roundtrip_restores_the_solution_and_the_path_continues(cls, kw):
    rng = np.random.default_rng(18)
    X = rng.normal(size=(50, 2))
    y = np.where(X[:, 0] > 0, 1.0, -1.0) if cls is WeightedSVC else np.sin(X[:, 0])
    model = cls(C=3.0, gamma=0.7, **kw).fit(X[:30], y[:30])
    model.add_points(X[30:], y[30:])
    model.path(rng.uniform(0.5, 1.5, size=50))
    model.path(np.r_[np.zeros(5), rng.uniform(0.5, 1.5, size=45)])
    model.remove_points(model.ids_[:5])
    twin = cls.from_state(model.to_state())
    np.testing.assert_array_equal(twin.decision_function(X), model.decision_function(X))
    assert twin.ids_.tolist() == model.ids_.tolist()
    sw = rng.uniform(0.0, 2.0, size=45)
    model.path(sw)
    twin.path(sw)
    np.testing.assert_allclose(twin.decision_function(X), model.decision_function(X), atol=1e-10)
    assert twin.kkt_violation() < 1e-8
    assert cls.from_state(cls(C=1.0).to_state())._pf is None

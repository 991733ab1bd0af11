"""Compiled path engine: state seen between events, generic variable layouts, slot bookkeeping.

The engine defers two O(n) sweeps per event (the gradient step and alpha on the bound set) and
keeps the slots of the live points in a cached order; these tests pin down that nothing of that
shows: every breakpoint, layout and removal order gives the exact solution.
"""

import numpy as np
import pytest
from sklearn.svm import SVC, SVR

from ratiowatch.core.wsvm import PathFollower, WeightedSVC, WeightedSVR
from ratiowatch.core.wsvm.solver import I_SET, M_SET, gradient
from ratiowatch.stream.learners.wsvm import OnlineWeightedSVR, cao_tay_weights


def _stream_problem(n, rng):
    t = np.arange(n + 4)
    s = np.sin(2 * np.pi * t / 40) + 0.1 * rng.normal(size=t.size)
    X = np.lib.stride_tricks.sliding_window_view(s[:-1], 3)[:n]
    return np.ascontiguousarray(X), s[3:3 + n]


def test_state_at_every_breakpoint_is_exact_gradient_alpha_and_kkt():
    """G, alpha on the bound and KKT read from Python at a breakpoint equal a from-scratch solve."""
    rng = np.random.default_rng(30)
    X, y = _stream_problem(125, rng)
    model = WeightedSVR(C=10.0, epsilon=0.05, gamma=0.5, ridge=1e-6).fit(X[:120], y[:120],
                                                                         cao_tay_weights(120, 120, 3.0))
    model.add_points(X[120:], y[120:])
    pf = model._pf
    worst_g, worst_a, worst_kkt, seen = 0.0, 0.0, 0.0, []

    def on_bp(m, theta):
        nonlocal worst_g, worst_a, worst_kkt
        c_theta = pf.c0 + theta * pf.d
        bound = pf.st == I_SET
        worst_a = max(worst_a, float(np.max(np.abs(pf.a[bound] - c_theta[bound]), initial=0.0)))
        g = gradient(pf.K, pf.pt, pf.z, pf.p, pf.a, pf.b, pf.ridge)
        g[pf.st == M_SET] = 0.0
        live = np.tile(model._live, 2)  # free slots (capacity headroom) carry no variable
        worst_g = max(worst_g, float(np.max(np.abs(g - pf.G)[live])))
        pf.c[:] = c_theta  # kkt_violation reads the current weights from pf.c
        worst_kkt = max(worst_kkt, m.kkt_violation())
        seen.append(theta)

    # one step of a 5-in / 5-out window: the oldest five go to 0, the newest five rise from 0
    sw = np.r_[np.zeros(5), cao_tay_weights(120, 120, 3.0)]
    stats = model.path(sw, on_breakpoint=on_bp)
    assert stats.events == len(seen) > 20
    assert worst_a == 0.0
    assert worst_g < 1e-9
    assert worst_kkt < 1e-8
    assert model.kkt_violation() < 1e-8


def test_generic_variable_layout_gives_the_same_path_as_the_tiled_one():
    """PathFollower accepts any variable -> point map; a permuted layout must not change the path."""
    rng = np.random.default_rng(31)
    n = 60
    X = rng.normal(size=(n, 2))
    y = np.sin(X[:, 0]) + 0.1 * rng.normal(size=n)
    K = np.exp(-0.7 * ((X[:, None, :] - X[None, :, :]) ** 2).sum(-1))
    eps, C = 0.05, 4.0
    pt = np.tile(np.arange(n), 2)  # how WeightedSVR lays the two variables of each point out
    z = np.r_[np.ones(n), -np.ones(n)]
    p = np.r_[eps - y, eps + y]
    c0 = C * rng.uniform(0.5, 1.5, size=n)
    c1 = C * rng.uniform(0.0, 2.0, size=n)
    perm = rng.permutation(2 * n)  # a layout the compiled fast path does not assume
    tiled = PathFollower(K.copy(), pt, z, p, np.tile(c0, 2), ridge=1e-8)
    mixed = PathFollower(K.copy(), pt[perm], z[perm], p[perm], np.tile(c0, 2)[perm], ridge=1e-8)
    s1 = tiled.follow(np.tile(c1, 2))
    s2 = mixed.follow(np.tile(c1, 2)[perm])
    assert s1.events == s2.events > 0
    np.testing.assert_allclose(mixed.a, tiled.a[perm], atol=1e-9)
    assert abs(mixed.b - tiled.b) < 1e-9
    assert mixed.kkt_violation() < 1e-8 and tiled.kkt_violation() < 1e-8


def test_removing_points_out_of_order_keeps_weights_aligned_with_ids():
    rng = np.random.default_rng(32)
    n = 50
    X = rng.normal(size=(n, 2))
    y = np.where(X[:, 0] + 0.3 * rng.normal(size=n) > 0, 1.0, -1.0)
    model = WeightedSVC(C=2.0, gamma=0.8).fit(X[:40], y[:40])
    model.add_points(X[40:], y[40:])
    gone = [3, 17, 41, 0]  # neither the oldest first nor contiguous
    sw = rng.uniform(0.5, 1.5, size=n)
    sw[gone] = 0.0
    model.path(sw)
    with pytest.raises(ValueError, match="twice"):
        model.remove_points([3, 3])
    model.remove_points(gone)
    keep = np.setdiff1d(np.arange(n), gone)
    assert model.ids_.tolist() == keep.tolist()
    np.testing.assert_array_equal(model.sample_weight_, sw[keep])
    sw2 = rng.uniform(0.2, 2.0, size=keep.size)
    model.path(sw2)  # weights in ids_ order
    assert model.kkt_violation() < 1e-8
    ref = SVC(C=2.0, gamma=0.8, tol=1e-10).fit(X[keep], y[keep], sample_weight=sw2)
    Xt = rng.normal(size=(20, 2))
    np.testing.assert_allclose(model.decision_function(Xt), ref.decision_function(Xt), atol=1e-4)
    model.add_points(X[:2], y[:2])  # slots freed above are reused
    assert model.ids_.tolist() == keep.tolist() + [50, 51]


def test_bench_sized_window_steps_match_sklearn_refits():
    """Window of 300 with |M| in the tens, 5 in / 5 out per step, compared after every step."""
    rng = np.random.default_rng(33)
    window, steps, batch = 300, 6, 5
    X, y = _stream_problem(window + batch * steps, rng)
    model = OnlineWeightedSVR(window=window, C=10.0, epsilon=0.05, gamma=0.3)
    model.learn_batch(X[:window], y[:window])
    Xt = X[::7]
    sw = cao_tay_weights(window, window, 3.0)
    for step in range(steps):
        hi = window + batch * (step + 1)
        stats = model.learn_batch(X[hi - batch:hi], y[hi - batch:hi])
        assert stats.events > 0
        assert model.kkt_violation() < 1e-6
        ref = SVR(C=10.0, epsilon=0.05, gamma=0.3, tol=1e-10).fit(X[hi - window:hi], y[hi - window:hi],
                                                                   sample_weight=sw)
        np.testing.assert_allclose(model.predict_batch(Xt), ref.predict(Xt), atol=1e-4)
    assert model.last_stats_.mean_margin > 5

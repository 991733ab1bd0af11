"""Checkpoints of the weighted SVMs: what ``from_state`` accepts, refuses, and restores exactly."""

import numpy as np
import pytest

from ratiowatch.core.wsvm import WeightedSVC, WeightedSVR


def _svc():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(20, 2))
    y = np.where(X[:, 0] > 0, 1.0, -1.0)
    model = WeightedSVC(C=2.0, gamma=0.5).fit(X, y)
    model.path(rng.uniform(0.5, 1.5, size=20))
    return model, X


def _state(model):
    return {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in model.to_state().items()}


def _set(key, index, value):
    def damage(state):
        state[key][index] = value
    return damage


def _replace(key, make):
    def damage(state):
        state[key] = make(state[key])
    return damage


DAMAGES = {
    # before: a margin index out of range crashed the process at the next path() call
    "M out of range": (_set("M", 0, 10**9), "'M'"),
    # before: a short isc aborted the process at the next path() call
    "isc shortened": (_replace("isc", lambda v: v[:2]), "'isc'"),
    # before, these were accepted and gave wrong results
    "X with NaN": (_set("X", (0, 0), np.nan), "'X'"),
    "negative c": (_set("c", 0, -5.0), "'c'"),
    "live all zero": (_replace("live", np.zeros_like), "'ids'"),
    "ids truncated": (_replace("ids", lambda v: v[:-1]), "'ids'"),
    "duplicate slots": (_set("slots", 1, 0), "'slots'"),
    "z of 0": (_set("z", 3, 0.0), "'z'"),
    "set code 7": (_set("st", 2, 7), "'st'"),
    "R damaged": (_set("R", (0, 0), 1e9), "'R'"),
    "alpha moved": (_replace("a", lambda v: v + 0.3), "KKT"),
    "bias moved": (_set("fsc", 1, 5.0), "KKT"),
    "margin index not in the margin": (_replace("M", lambda v: (v + 1) % 20), "'M'"),
    "cap too large": (_replace("cap", lambda v: v + 1), "'X'"),
    "kscale NaN": (_replace("kscale", lambda v: float("nan")), "'kscale'"),
    "margin capacity too small": (_replace("mcap", lambda v: 0), "'mcap'"),
}


@pytest.mark.parametrize("name", sorted(DAMAGES))
def test_a_damaged_state_is_refused_with_a_value_error_naming_the_entry(name):
    model, _ = _svc()
    state = _state(model)
    assert model.from_state(_state(model)).kkt_violation() == model.kkt_violation()
    damage, entry = DAMAGES[name]
    damage(state)
    with pytest.raises(ValueError, match=entry):
        WeightedSVC.from_state(state)


@pytest.mark.parametrize("version", [1.5, "1", True, 2, None])
def test_a_version_that_is_not_exactly_the_integer_1_is_refused(version):
    model, _ = _svc()
    state = _state(model)
    state["version"] = version
    with pytest.raises(ValueError, match="not a WeightedSVC state of version 1"):
        WeightedSVC.from_state(state)


def test_a_state_read_back_from_npz_arrays_restores_the_same_model():
    model, X = _svc()
    state = {k: np.asarray(v) for k, v in model.to_state().items()}  # scalars as 0-d arrays
    twin = WeightedSVC.from_state(state)
    np.testing.assert_array_equal(twin.decision_function(X), model.decision_function(X))


@pytest.mark.parametrize("cls, kw", [(WeightedSVC, {}), (WeightedSVR, {"epsilon": 0.1})])
def test_a_state_without_kernel_scale_and_margin_capacity_still_loads(cls, kw):
    # states written before those two entries were saved
    rng = np.random.default_rng(3)
    X = rng.normal(size=(40, 2))
    y = np.where(X[:, 0] > 0, 1.0, -1.0) if cls is WeightedSVC else np.sin(X[:, 0])
    model = cls(C=3.0, gamma=0.7, **kw).fit(X, y)
    model.path(rng.uniform(0.5, 1.5, size=40))
    state = model.to_state()
    del state["kscale"], state["mcap"]
    twin = cls.from_state(state)
    np.testing.assert_array_equal(twin.decision_function(X), model.decision_function(X))
    sw = rng.uniform(0.0, 2.0, size=40)
    model.path(sw)
    twin.path(sw)
    np.testing.assert_allclose(twin.decision_function(X), model.decision_function(X), atol=1e-10)

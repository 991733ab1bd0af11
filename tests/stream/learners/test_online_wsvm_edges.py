"""Online weighted SVMs at their edges: windows that lose a class, points that leave the window
from the margin, updates that fail half-way, refused samples and batches, invalid queries."""

import numpy as np
import pytest

from ratiowatch.core.wsvm import WeightedSVC, WeightedSVR
from ratiowatch.stream.learners.wsvm import OnlineWeightedSVC, OnlineWeightedSVR, cao_tay_weights


def test_svc_window_turning_to_one_class_drives_every_weight_to_zero_and_predicts_it():
    # Before: the update that left a single class in the window raised "no feasible bias", every
    # later update raised too, and the window grew past its size (29 points in a window of 8).
    rng = np.random.default_rng(0)
    xs = rng.normal(size=(40, 2))
    model = OnlineWeightedSVC(window=8, C=1.0, gamma=1.0)
    for t in range(40):
        model.learn_one({"a": xs[t, 0], "b": xs[t, 1]}, t >= 12)
        assert model.n_points == min(t + 1, 8)
        assert model.kkt_violation() < 1e-8
    assert np.all(model._model.sample_weight_ == 0.0)
    assert model.predict_one({"a": 0.0, "b": 0.0}) is True
    model.learn_one({"a": 0.0, "b": 0.0}, False)  # two classes again: an SVM again
    assert np.any(model._model.sample_weight_ > 0.0)


@pytest.mark.parametrize("seed", range(6))
def test_svc_stream_of_alternating_label_runs_longer_than_the_window(seed):
    # before: every such stream raised within its first 20 samples
    rng = np.random.default_rng(seed)
    model = OnlineWeightedSVC(window=8, C=1.0, gamma=1.0)
    label = True
    for t in range(80):
        if t % 12 == 0:
            label = not label
        model.learn_one({"a": float(rng.normal()), "b": float(rng.normal())}, label)
        assert model.n_points == min(t + 1, 8)
    assert model.kkt_violation() < 1e-8


def test_svr_window_drops_points_whose_weight_reached_zero_inside_the_margin():
    # Before: with equal weights (decay 0) the leaving point's variable could end the path in the
    # margin set with weight 0, and removing the point raised at sample 44.
    rng = np.random.default_rng(38)
    for choices in ([3, 5, 10, 30], [0.0, 3.0], [1, 2, 7], [0.5, 5.0], [0.5, 5.0]):
        rng.choice(choices)
    X = rng.uniform(size=(300, 1))
    y = np.sin(3 * X[:, 0]) + 0.05 * rng.normal(size=300)
    model = OnlineWeightedSVR(window=3, C=0.5, epsilon=0.05, gamma=0.5, decay=0.0)
    for t in range(300):
        model.learn_one({"x": float(X[t, 0])}, float(y[t]))
        assert model.n_points == min(t + 1, 3)
    assert model._model.ids_.tolist() == [297, 298, 299]
    assert model.kkt_violation() < 1e-8


def _stream(n, seed=3):
    rng = np.random.default_rng(seed)
    X = rng.uniform(size=(n, 2))
    return X, np.sin(4 * X[:, 0]) + X[:, 1]


@pytest.mark.parametrize("where", ["path", "remove_points"])
def test_an_update_that_fails_half_way_leaves_the_learner_as_it_was(where, monkeypatch):
    # Before: the batch's ids were kept although the update failed, so the learner went on with
    # more points than its window and its ids no longer matched the model's.
    X, y = _stream(30)
    model = OnlineWeightedSVR(window=10, C=2.0, epsilon=0.05, gamma=2.0)
    twin = OnlineWeightedSVR(window=10, C=2.0, epsilon=0.05, gamma=2.0)
    for t in range(20):
        model.learn_one({"a": X[t, 0], "b": X[t, 1]}, y[t])
        twin.learn_one({"a": X[t, 0], "b": X[t, 1]}, y[t])
    svr = model._model
    before = (list(model._ids), svr.ids_.tolist(), svr.sample_weight_.copy(), svr.dual_coef().copy(),
              model.n_updates_)
    real = getattr(svr, where)
    calls = []

    def failing(*args, **kwargs):
        calls.append(args)
        if len(calls) > 1:  # only the update's own call fails
            return real(*args, **kwargs)
        if where == "path":  # interrupted at the first breakpoint of the update
            def stop(_m, _theta):
                raise KeyboardInterrupt
            return real(*args, on_breakpoint=stop)
        raise KeyboardInterrupt  # after the path step: the weights have moved already

    monkeypatch.setattr(svr, where, failing)
    with pytest.raises(KeyboardInterrupt):
        model.learn_one({"a": X[20, 0], "b": X[20, 1]}, y[20])
    monkeypatch.undo()
    assert model._ids == before[0] and svr.ids_.tolist() == before[1]
    np.testing.assert_allclose(svr.sample_weight_, before[2], atol=1e-12)
    np.testing.assert_allclose(svr.dual_coef(), before[3], atol=1e-9)
    assert model.n_updates_ == before[4] and model.n_points == 10
    assert model.kkt_violation() < 1e-8
    for t in range(20, 30):
        model.learn_one({"a": X[t, 0], "b": X[t, 1]}, y[t])
        twin.learn_one({"a": X[t, 0], "b": X[t, 1]}, y[t])
    Xt = np.random.default_rng(4).uniform(size=(10, 2))
    np.testing.assert_allclose(model.predict_batch(Xt), twin.predict_batch(Xt), atol=1e-8)


def test_a_refused_first_sample_fixes_no_features():
    # Before: the keys of a refused first sample became the feature set: {} refused every later
    # sample, and {"a": nan} hid feature "b" of the first valid sample for good.
    model = OnlineWeightedSVR(window=20, gamma=1.0)
    with pytest.raises(ValueError, match="no features"):
        model.learn_one({}, 1.0)
    model.learn_one({"a": 1.0}, 1.0)
    assert model._features == ["a"]

    model = OnlineWeightedSVR(window=20, gamma=1.0)
    with pytest.raises(ValueError, match="NaN"):
        model.learn_one({"a": float("nan")}, 1.0)
    with pytest.raises(ValueError, match="numbers"):
        model.learn_batch([{"a": 1.0, "b": 2.0}, {"a": None}], [1.0, 2.0])
    assert model._features is None and model._model is None and model.n_points == 0
    model.learn_one({"a": 0.5, "b": 1.0}, 1.0)
    assert model._features == ["a", "b"]


def test_a_refused_batch_records_no_label():
    # before: a batch refused for its third label recorded its second one, and that label's
    # legitimate successor was then refused as a third label
    model = OnlineWeightedSVC(window=10)
    model.learn_one({"a": 0.0}, "x")
    with pytest.raises(ValueError, match="third label"):
        model.learn_batch([{"a": 1.0}, {"a": 2.0}], ["y", "z"])
    assert model._labels == ["x"] and model.n_points == 1
    model.learn_one({"a": 3.0}, "z")
    assert model._labels == ["x", "z"] and model.n_points == 2


def test_invalid_queries_and_batches_are_refused_with_value_errors():
    # before: TypeError / AttributeError from a list comprehension, a numpy concatenate error
    svr = OnlineWeightedSVR(window=5)
    svr.learn_one({"a": 1.0}, 1.0)
    svc = OnlineWeightedSVC(window=5)
    svc.learn_one({"a": 1.0}, True)
    svc.learn_one({"a": 0.0}, False)
    for model in (svr, svc):
        with pytest.raises(ValueError, match="feature values must be numbers"):
            model.predict_one({"a": None})
        with pytest.raises(ValueError, match="must be a dict"):
            model.predict_one([1.0])
    with pytest.raises(ValueError, match="empty"):
        svr.learn_batch([], [])
    with pytest.raises(ValueError, match="y must be a finite number"):
        svr.learn_one({"a": 1.0}, None)
    assert svr.n_points == 1 and svc.n_points == 2


def test_svc_window_of_repeated_inputs_turning_to_one_class_keeps_learning():
    # before: with integer features every update raised "no feasible bias" while the window held
    # one class (the margin emptied near theta = 1 with a rounding residue left in z'a)
    rng = np.random.default_rng(0)
    model = OnlineWeightedSVC(window=60, C=10.0, gamma=0.5)
    points = rng.integers(0, 4, size=(400, 2)).astype(float)
    noise = rng.normal(size=400)
    for t in range(400):
        a, b = points[t]
        label = bool(a + b + 0.8 * noise[t] > 3) if t < 300 else True
        model.learn_one({"a": a, "b": b}, label)
    assert model.n_updates_ == 400 and model.n_points == 60
    assert np.all(model._model.sample_weight_ == 0.0)
    assert model.predict_one({"a": 0.0, "b": 0.0}) is True
    model.learn_one({"a": 0.0, "b": 0.0}, False)  # two classes again: the SVM of a refit
    window = points[341:]
    Xw = np.vstack([window, [[0.0, 0.0]]])
    yw = np.r_[np.ones(59), -1.0]
    refit = WeightedSVC(C=10.0, gamma=0.5, ridge=1e-6).fit(Xw, yw, cao_tay_weights(60, 60, 3.0))
    f = np.array([model.decision_one({"a": u[0], "b": u[1]}) for u in Xw])
    np.testing.assert_allclose(f, refit.decision_function(Xw), atol=1e-6)


def test_linear_learner_recovers_once_a_large_feature_value_has_left_the_window():
    # before: the kernel scale of the point (1e7, 0) stayed after it left the window, and with it a
    # tolerance that filtered out every event: KKT violation 8, predictions 5 away from a refit
    rng = np.random.default_rng(0)
    model = OnlineWeightedSVR(window=20, kernel="linear", C=1.0, epsilon=0.05)
    xs, ys = [], []

    def learn(x, y):
        model.learn_one({"a": x[0], "b": x[1]}, y)
        xs.append(x)
        ys.append(y)

    for _ in range(30):
        u = rng.normal(size=2)
        learn(u, float(u[0] - u[1]))
    learn(np.array([1e7, 0.0]), 0.0)
    for _ in range(100):
        u = rng.normal(size=2)
        learn(u, float(u[0] - u[1]))
    refit = WeightedSVR(C=1.0, epsilon=0.05, kernel="linear", ridge=1e-6).fit(
        np.array(xs[-20:]), np.array(ys[-20:]), cao_tay_weights(20, 20, 3.0))
    Xt = rng.normal(size=(5, 2))
    assert model.kkt_violation() < 1e-8
    np.testing.assert_allclose(model.predict_batch(Xt), refit.predict(Xt), atol=1e-8)


def test_a_sample_that_overflows_the_kernel_is_refused_and_the_learner_is_unchanged():
    rng = np.random.default_rng(0)
    model = OnlineWeightedSVR(window=20, kernel="linear", C=1.0)
    for u in rng.normal(size=(30, 2)):
        model.learn_one({"a": u[0], "b": u[1]}, float(u[0]))
    before = model.to_state()
    f = model.predict_one({"a": 1.0, "b": 0.0})
    with pytest.raises(ValueError, match="kernel overflows"):
        model.learn_one({"a": 1e160, "b": 0.0}, 1.0)
    assert model.predict_one({"a": 1.0, "b": 0.0}) == f
    assert model.to_state()["ids"].tolist() == before["ids"].tolist()
    model.learn_one({"a": 0.5, "b": 0.5}, 0.5)
    assert model.kkt_violation() < 1e-10


@pytest.mark.parametrize("call, name", [
    (lambda: OnlineWeightedSVR().learn_one({"a": 10**400}, 1.0), "a feature value of x"),
    (lambda: OnlineWeightedSVR().learn_one({"a": 1.0}, 10**400), "y"),
    (lambda: OnlineWeightedSVR().learn_batch([[1.0]], [10**400]), "y"),
    (lambda: OnlineWeightedSVR().learn_batch([[10**400]], [1.0]), "X"),
    (lambda: OnlineWeightedSVC().learn_one({"a": 10**400}, True), "a feature value of x"),
])
def test_numbers_beyond_the_float_range_are_refused_with_value_errors(call, name):
    # before: a bare OverflowError from the float conversion
    with pytest.raises(ValueError, match=f"^{name} (holds a number|is) too large"):
        call()


@pytest.mark.parametrize("damage, match", [
    (lambda s: s["model.M"].__setitem__(0, 10**9), "'M'"),
    (lambda s: s.__setitem__("ids", s["ids"][1:]), "'ids'"),
    (lambda s: s["sign_vals"].__setitem__(0, 0.5), "'sign_ids' and 'sign_vals'"),
])
def test_a_damaged_learner_state_is_refused(damage, match):
    rng = np.random.default_rng(2)
    model = OnlineWeightedSVC(window=20, C=2.0, gamma=0.5)
    for u in rng.normal(size=(30, 2)):
        model.learn_one({"a": u[0], "b": u[1]}, bool(u[0] > 0))
    state = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in model.to_state().items()}
    damage(state)
    with pytest.raises(ValueError, match=match):
        OnlineWeightedSVC.from_state(state)


def _npz_round_trip(tmp_path, model):
    from ratiowatch.stream.detectors.state_file import read_state, write_state

    write_state(tmp_path / "model.npz", model.to_state())
    return type(model).from_state(read_state(tmp_path / "model.npz"))


def _two_classes(n=40, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2))
    return X, X[:, 0] + 0.3 * rng.normal(size=n) > 0


@pytest.mark.parametrize("labels", [np.array([0, 1]), np.array([0.5, 1.5], dtype=np.float32)],
                         ids=["int64", "float32"])
def test_numpy_labels_are_checkpointed_and_restored_as_the_python_scalars_they_equal(tmp_path, labels):
    # labels taken from a numpy array are numpy scalars: np.int64 and np.float32 are no JSON, and
    # to_state raised json's bare TypeError
    X, side = _two_classes()
    model = OnlineWeightedSVC(window=20, C=2.0, gamma=0.5)
    for x, s in zip(X[:30], side[:30]):
        model.learn_one({"a": x[0], "b": x[1]}, labels[int(s)])
    twin = _npz_round_trip(tmp_path, model)
    assert twin._labels == model._labels and type(twin._labels[0]) is type(labels[0].item())
    for x, s in zip(X[30:], side[30:]):
        q = {"a": x[0], "b": x[1]}
        assert twin.predict_one(q) == model.predict_one(q)
        assert twin.predict_proba_one(q) == model.predict_proba_one(q)
        model.learn_one(q, labels[int(s)])
        twin.learn_one(q, labels[int(s)])
    assert twin.decision_one({"a": 0.3, "b": 0.0}) == model.decision_one({"a": 0.3, "b": 0.0})


def test_tuple_labels_come_back_from_a_checkpoint_as_tuples(tmp_path):
    # JSON writes a tuple as a list: restored as lists, the labels were unhashable, every
    # predict_one raised and the same tuple label was refused as a third label
    X, side = _two_classes(seed=1)
    up, down = ("up", 1), ("down", (0, True))
    model = OnlineWeightedSVC(window=20, C=2.0, gamma=0.5)
    for x, s in zip(X[:30], side[:30]):
        model.learn_one({"a": x[0], "b": x[1]}, up if s else down)
    twin = _npz_round_trip(tmp_path, model)
    assert set(twin._labels) == {up, down}
    for x, s in zip(X[30:], side[30:]):
        q = {"a": x[0], "b": x[1]}
        assert twin.predict_one(q) == model.predict_one(q) and isinstance(twin.predict_one(q), tuple)
        assert twin.predict_proba_one(q) == model.predict_proba_one(q)
        model.learn_one(q, up if s else down)
        twin.learn_one(q, up if s else down)


@pytest.mark.parametrize("label", [object(), frozenset({"a"}), b"a", ["a"], 1 + 2j, ("a", object()),
                                   ("a", float("nan"))],
                         ids=["object", "frozenset", "bytes", "list", "complex", "tuple-with-object", "tuple-with-nan"])
def test_a_label_a_checkpoint_cannot_restore_is_refused_when_learned(label):
    model = OnlineWeightedSVC(window=10)
    model.learn_one({"a": 0.0}, "x")
    with pytest.raises(ValueError, match="a class label must be a bool, None, a str, an int, a float or a tuple "
                                         "of these"):
        model.learn_one({"a": 1.0}, label)
    assert model._labels == ["x"] and model.n_points == 1
    model.to_state()  # what was learned can still be checkpointed


@pytest.mark.parametrize("cls", [OnlineWeightedSVR, OnlineWeightedSVC])
def test_tuple_feature_names_come_back_from_a_checkpoint_as_tuples(tmp_path, cls):
    # restored as JSON lists, the names matched no key of a sample: every later prediction and
    # update raised "feature values must be numbers"
    X, side = _two_classes(seed=2)
    names = [("sensor", 1), ("sensor", (2, "b"))]
    model = cls(window=20, C=2.0, gamma=0.5)

    def feed(m, x, s):
        m.learn_one(dict(zip(names, x)), bool(s) if cls is OnlineWeightedSVC else float(x[0]))

    for x, s in zip(X[:30], side[:30]):
        feed(model, x, s)
    twin = _npz_round_trip(tmp_path, model)
    assert twin._features == model._features
    for x, s in zip(X[30:], side[30:]):
        q = dict(zip(names, x))
        assert twin.predict_one(q) == model.predict_one(q)
        feed(model, x, s)
        feed(twin, x, s)


def test_numpy_integer_feature_names_are_the_ints_they_equal(tmp_path):
    # np.int64 keys (the columns of an array) were learned, but to_state refused them as "not str
    # or int"; a learner fed them now behaves, and checkpoints, as one fed the equal Python ints
    rng = np.random.default_rng(3)
    draws = rng.normal(size=(40, 2))
    numpy_keys, int_keys = OnlineWeightedSVR(window=20), OnlineWeightedSVR(window=20)
    for u in draws:
        numpy_keys.learn_one({np.int64(0): u[0], np.int64(1): u[1]}, float(u[0] - u[1]))
        int_keys.learn_one({0: u[0], 1: u[1]}, float(u[0] - u[1]))
    assert numpy_keys._features == [0, 1] and all(type(f) is int for f in numpy_keys._features)
    assert numpy_keys.to_state()["features"] == int_keys.to_state()["features"]
    twin = _npz_round_trip(tmp_path, numpy_keys)
    for u in rng.normal(size=(5, 2)):
        want = int_keys.predict_one({0: u[0], 1: u[1]})
        assert numpy_keys.predict_one({np.int64(0): u[0], np.int64(1): u[1]}) == want
        assert twin.predict_one({np.int64(0): u[0], np.int64(1): u[1]}) == want


@pytest.mark.parametrize("make, error, message", [
    (lambda: OnlineWeightedSVR(window=2.5), TypeError, "window must be an integer; got 2.5"),
    (lambda: OnlineWeightedSVR(window="10"), TypeError, "window must be an integer; got '10'"),
    (lambda: OnlineWeightedSVR(window=float("inf")), TypeError, "window must be an integer; got inf"),
    (lambda: OnlineWeightedSVC(window=None), TypeError, "window must be an integer; got None"),
    (lambda: OnlineWeightedSVR(decay=None), TypeError, "decay must be a real number; got None"),
    (lambda: OnlineWeightedSVC(decay="3"), TypeError, "decay must be a real number; got '3'"),
])
def test_a_window_or_decay_of_the_wrong_type_is_refused_by_name(make, error, message):
    # before: window=2.5 silently became a window of 2, window="10" was kept as a string (and
    # written to the checkpoint), window=inf raised a bare OverflowError of int()
    with pytest.raises(error, match=f"^{message}"):
        make()


@pytest.mark.parametrize("cls", [OnlineWeightedSVR, OnlineWeightedSVC])
def test_a_checkpoint_of_a_learner_built_with_a_whole_number_float_window_still_restores(cls):
    # window=30.0 was taken as 30 points before fractional windows were refused; its checkpoint
    # holds 30.0, and restores as the learner it was
    learner = cls(window=30)
    for i in range(40):
        learner.learn_one({"a": float(i % 7)}, (i % 7) / 7.0 if cls is OnlineWeightedSVR else i % 2 == 0)
    state = learner.to_state()
    state["window"] = 30.0
    restored = cls.from_state(state)
    assert restored.window == 30 and isinstance(restored.window, int)
    x = {"a": 3.0}
    assert restored.predict_one(x) == learner.predict_one(x)

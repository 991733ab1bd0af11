"""ForecastResidualDetector: a river anomaly detector scoring one-step SVR forecast residuals."""

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from ratiowatch.stream.learners.forecast import ForecastResidualDetector


def _series_with_spikes(n=500, seed=0):
    rng = np.random.default_rng(seed)
    t = np.arange(n)
    x = np.sin(2 * np.pi * t / 40) + 0.4 * np.sin(2 * np.pi * t / 9) + 0.05 * rng.normal(size=n)
    labels = np.zeros(n, dtype=int)
    spikes = rng.choice(np.arange(n // 3, n), size=8, replace=False)
    x[spikes] += rng.choice([-1.0, 1.0], size=8) * 1.0
    labels[spikes] = 1
    return x, labels


def test_spikes_rank_above_normal_points():
    x, labels = _series_with_spikes()
    det = ForecastResidualDetector(k=10, window=150, C=5.0, epsilon=0.05, warmup=60)
    scores = []
    for v in x:
        scores.append(det.score_one({"y": v}))
        det.learn_one({"y": v})
    scores = np.array(scores)
    live = np.arange(len(x)) >= 80  # after warm-up
    assert roc_auc_score(labels[live], scores[live]) > 0.95
    assert np.all(scores[:60] == 0.0)  # warm-up: no score yet
    assert det._svr.kkt_violation() < 1e-6


def test_score_one_is_pure_and_forecast_uses_original_units():
    x, _ = _series_with_spikes(n=200, seed=1)
    det = ForecastResidualDetector(k=5, window=80, warmup=40)
    for v in x[:150]:
        det.learn_one({"y": v})
    before = (det.forecast(), list(det._resid), list(det._lags), det._svr.n_points)
    s1 = det.score_one({"y": 3.0})
    s2 = det.score_one({"y": 3.0})
    after = (det.forecast(), list(det._resid), list(det._lags), det._svr.n_points)
    assert s1 == s2 and before == after
    assert det.forecast() == pytest.approx(det._svr.predict_one(det._lag_dict()) * det._sd + det._mu)
    # one-step forecasts track the clean signal between spikes
    errs = []
    for v, nxt in zip(x[150:199], x[151:200]):
        det.learn_one({"y": v})
        errs.append(abs(det.forecast() - nxt))
    assert np.median(errs) < 0.2


@pytest.mark.parametrize(
    "kwargs, x, match",
    [
        ({}, {"a": 1.0, "b": 2.0}, "key="),
        ({"key": "a"}, {"b": 2.0}, "no feature"),
        ({}, {"a": float("nan")}, "NaN"),
        ({}, {"a": "x"}, "number"),
        ({}, {"a": 10 ** 400}, "number"),  # an int beyond float64: OverflowError once
    ],
)
def test_bad_input_messages(kwargs, x, match):
    det = ForecastResidualDetector(**kwargs)
    with pytest.raises(ValueError, match=match):
        det.learn_one(x)


def test_bad_parameters():
    with pytest.raises(ValueError, match="warmup"):
        ForecastResidualDetector(k=8, warmup=5)
    with pytest.raises(ValueError, match="k must"):
        ForecastResidualDetector(k=0)


def test_river_check_estimator_runs_offline(monkeypatch):
    """Every check river yields, the data-set ones on a local stream (see river_offline); the two
    feature-dropping checks are skipped by the detector itself (_unit_test_skips, with the reason)."""
    from river_offline import check_estimator_offline

    def stream(scale):
        x, labels = _series_with_spikes(n=120 * scale, seed=2)
        return [({"y": float(v)}, int(lab)) for v, lab in zip(x, labels)]

    model = ForecastResidualDetector(k=3, window=40, warmup=20)
    assert check_estimator_offline(model, stream, monkeypatch) >= 10
    assert model._unit_test_skips() == {"check_emerging_features", "check_disappearing_features"}


def test_checkpoint_roundtrip_through_npz_and_json_continues_identically(tmp_path):
    import json

    x, _ = _series_with_spikes(n=260, seed=5)
    det = ForecastResidualDetector(k=6, window=80, warmup=40)
    for v in x[:200]:
        det.learn_one({"y": v})
    state = det.to_state()
    arrays = {k: v for k, v in state.items() if isinstance(v, np.ndarray)}
    scalars = {k: v for k, v in state.items() if not isinstance(v, np.ndarray)}
    np.savez(tmp_path / "s.npz", **arrays)
    (tmp_path / "s.json").write_text(json.dumps(scalars))
    with np.load(tmp_path / "s.npz", allow_pickle=False) as data:
        loaded = {**{k: data[k] for k in data.files}, **json.loads((tmp_path / "s.json").read_text())}
    twin = ForecastResidualDetector.from_state(loaded)
    for v in x[200:]:
        assert twin.score_one({"y": v}) == det.score_one({"y": v})
        det.learn_one({"y": v})
        twin.learn_one({"y": v})
    assert twin._svr.kkt_violation() < 1e-6


def _trained(n=80):
    x, _ = _series_with_spikes(n=n, seed=5)
    det = ForecastResidualDetector(k=4, window=40, warmup=20)
    for v in x:
        det.learn_one({"y": v})
    return det


@pytest.mark.parametrize("drop", ["raw", "resid", "mu", "svr.ids", "svr.model.X"])
def test_a_truncated_checkpoint_says_which_key_it_lacks(drop):
    state = _trained().to_state()
    assert drop in state
    del state[drop]
    with pytest.raises(ValueError, match=f"not a ForecastResidualDetector checkpoint, or a truncated one: "
                                         f"missing key '{drop}'"):
        ForecastResidualDetector.from_state(state)


@pytest.mark.parametrize("state, match", [(None, "not a ForecastResidualDetector checkpoint: expected a mapping"),
                                          ("det.npz", "not a ForecastResidualDetector checkpoint: expected a mapping")])
def test_what_is_not_a_checkpoint_is_refused_as_such(state, match):
    with pytest.raises(ValueError, match=match):
        ForecastResidualDetector.from_state(state)


def test_another_class_checkpoint_or_version_is_refused():
    state = _trained().to_state()
    with pytest.raises(ValueError, match="written by 'OnlineWeightedSVR'"):
        ForecastResidualDetector.from_state({**state, "class": "OnlineWeightedSVR"})
    for version in (0, 2, None):
        with pytest.raises(ValueError, match="unsupported ForecastResidualDetector state version"):
            ForecastResidualDetector.from_state({**state, "version": version})


@pytest.mark.parametrize("scale", [1e151, -1e300])
def test_values_whose_squares_overflow_are_refused_with_advice_to_rescale(scale):
    det = _trained()
    for call in (det.score_one, det.learn_one):
        with pytest.raises(ValueError, match="overflow float64.*rescale the series"):
            call({"y": scale})


def test_warm_up_values_of_a_tiny_spread_are_refused_before_they_are_kept():
    x, _ = _series_with_spikes(n=60, seed=2)
    det = ForecastResidualDetector(k=4, window=40, warmup=20)
    for v in x[:19] * 1e-300:
        det.learn_one({"y": v})
    with pytest.raises(ValueError, match="underflow float64.*rescale it"):
        det.learn_one({"y": x[19] * 1e-300})
    assert det.forecast() is None and len(det._raw) == 19
    constant = ForecastResidualDetector(k=4, window=40, warmup=20)  # no spread is no tiny spread
    for _ in range(30):
        constant.learn_one({"y": 1e-300})


@pytest.mark.parametrize("scale", [1e-100, 1e100])
def test_a_spike_is_found_at_any_scale_within_the_bounds(scale):
    y = np.sin(np.arange(400) * 2 * np.pi / 24) + 0.1 * np.random.default_rng(0).normal(size=400)
    y[350] += 5
    det, scores = ForecastResidualDetector(), []
    for v in y * scale:
        scores.append(det.score_one({"y": v}))
        det.learn_one({"y": v})
    assert int(np.argmax(scores)) == 350


@pytest.mark.parametrize("spike", [1e8, 9.9e37])
def test_one_huge_value_leaves_the_scores_once_it_leaves_the_residual_window(spike):
    # the residual window's mean and spread are taken afresh: sums kept by adding and subtracting
    # lost the ordinary residuals to rounding beside the spike, and every row after it scored ~1e11
    rng = np.random.default_rng(0)
    x = np.sin(2 * np.pi * np.arange(1400) / 40) + 0.1 * rng.normal(size=1400)
    clean, spiked = ForecastResidualDetector(), ForecastResidualDetector()
    late_clean, late_spiked = [], []
    for t, v in enumerate(x):
        w = spike if t == 300 else v
        if t >= 1000:  # the spike left the window of 200 residuals long before
            late_clean.append(clean.score_one({"y": v}))
            late_spiked.append(spiked.score_one({"y": w}))
        clean.learn_one({"y": v})
        spiked.learn_one({"y": w})
    assert np.median(late_spiked) < 3 * np.median(late_clean)


@pytest.mark.parametrize("key", [("sensor", 1), (("site", 2), 0.5, True), "v", 0, None])
def test_a_key_comes_back_from_a_checkpoint_file_as_it_was(tmp_path, key):
    from ratiowatch.stream.detectors.state_file import read_state, write_state

    x, _ = _series_with_spikes(n=120, seed=4)
    name = "v" if key is None else key
    det = ForecastResidualDetector(k=3, window=40, warmup=20, key=key)
    for v in x[:60]:
        det.learn_one({name: v} if key is None else {name: v, "other": 1.0})
    write_state(tmp_path / "det.npz", det.to_state())
    twin = ForecastResidualDetector.from_state(read_state(tmp_path / "det.npz"))
    assert twin.key == key and type(twin.key) is type(key)
    for v in x[60:]:
        row = {name: v} if key is None else {name: v, "other": 1.0}
        assert twin.score_one(row) == det.score_one(row)
        det.learn_one(row)
        twin.learn_one(row)


class _Key:
    def __hash__(self):
        return 1

    def __eq__(self, other):
        return isinstance(other, _Key)


@pytest.mark.parametrize("key", [_Key(), np.int64(0), b"v", frozenset({"v"}), float("nan"), ("sensor", _Key())],
                         ids=["object", "numpy-int", "bytes", "frozenset", "nan", "tuple-with-object"])
def test_a_key_a_checkpoint_cannot_restore_is_refused_when_the_detector_is_made(key):
    with pytest.raises(ValueError, match="key must be None, a str, an int, a finite float, a bool or a tuple of these"):
        ForecastResidualDetector(k=3, window=40, warmup=20, key=key)


def test_a_value_far_beyond_the_warm_up_spread_leaves_the_scores_finite_and_exact():
    # 1e150 is accepted, but on a series of sd 1e-6 it standardises to about 1e156: the square of its
    # residual overflowed, the residual spread came out infinite and every row while it sat in the
    # window scored exactly 0. The scores are |r - mean| / sd of the residual window, checked
    # here in exact rational arithmetic.
    import math
    import warnings
    from fractions import Fraction

    rng = np.random.default_rng(0)
    x = 1.0 + 1e-6 * rng.normal(size=320)
    x[100] = 1e150
    x[200] = 2.0
    det = ForecastResidualDetector(k=3, window=40, warmup=20)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for t, v in enumerate(x):
            before = [Fraction(r) for r in det._resid]
            score = det.score_one({"v": v})
            det.learn_one({"v": v})
            if 100 < t <= 300:
                mean = sum(before) / len(before)
                var = sum((r - mean) ** 2 for r in before) / len(before)
                sd = math.sqrt(float(var / Fraction(4) ** 600)) * 2.0 ** 600
                want = float(abs(Fraction(det._resid[-1]) - mean) / Fraction(sd))
                assert score == pytest.approx(want, rel=1e-12, abs=0.0), t
                assert score > 0.0


@pytest.mark.parametrize("kwargs, error, message", [
    ({"k": None}, TypeError, "k must be an integer; got None"),
    ({"k": 2.5}, TypeError, "k must be an integer; got 2.5"),
    ({"k": True}, TypeError, "k must be an integer; got True"),
    ({"warmup": float("nan")}, TypeError, "warmup must be an integer; got nan"),
    ({"warmup": "50"}, TypeError, "warmup must be an integer; got '50'"),
    ({"resid_window": None}, TypeError, "resid_window must be an integer; got None"),
    ({"resid_window": 1}, ValueError, "resid_window must be an integer >= 2; got 1"),
    ({"window": float("inf")}, TypeError, "window must be an integer; got inf"),
    ({"decay": None}, TypeError, "decay must be a real number; got None"),
])
def test_a_parameter_of_the_wrong_type_is_refused_by_name(kwargs, error, message):
    # before: bare TypeErrors of int(None) / float(None), "cannot convert float NaN to integer",
    # an OverflowError of int(inf), and k=2.5 silently became 2 lags
    with pytest.raises(error, match=f"^{message}"):
        ForecastResidualDetector(**kwargs)

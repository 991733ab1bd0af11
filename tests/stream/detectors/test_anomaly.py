"""TimeSeriesAnomalyDetector (NAB-style) and the tail-probability mapping."""

from __future__ import annotations

import numpy as np
import pytest

from ratiowatch.stream.detectors.anomaly import TimeSeriesAnomalyDetector, block_embed
from ratiowatch.stream.calibration.likelihood import TailProbability


def seasonal(n=3000, seed=0):
    rng = np.random.default_rng(seed)
    return 10 + np.sin(np.arange(n) * 2 * np.pi / 96) + 0.05 * rng.normal(size=n)


def test_scores_are_in_unit_interval_and_causal():
    y = seasonal(2000)
    full = TimeSeriesAnomalyDetector().score_series(y)
    y_future = y.copy()
    y_future[1500:] += 50.0  # changing the future must not change past scores
    other = TimeSeriesAnomalyDetector().score_series(y_future)
    assert np.all((full >= 0) & (full <= 1))
    np.testing.assert_array_equal(full[:1500], other[:1500])


def test_river_api_equals_batch_replay():
    y = seasonal(900)
    y[600:603] += 4.0
    batch = TimeSeriesAnomalyDetector().score_series(y)
    det = TimeSeriesAnomalyDetector()
    one = []
    for v in y[:450]:
        s = det.score_one(v)
        assert det.score_one(v) == s  # score_one is pure
        one.append(s)
        det.learn_one(v)
    rest = det.score_series(y[450:])  # the batch form continues from the same state
    np.testing.assert_allclose(np.r_[one, rest], batch, atol=1e-9)
    assert batch[600:610].max() > 0.5  # the comparison covers real alarms, not only zeros


def test_river_conventions_clone_and_dict_input():
    from river.base import AnomalyDetector

    det = TimeSeriesAnomalyDetector(debounce=10, seed=3)
    assert isinstance(det, AnomalyDetector)
    twin = det.clone()
    assert twin.debounce == 10 and twin.seed == 3 and twin is not det
    a, b = TimeSeriesAnomalyDetector(), TimeSeriesAnomalyDetector()
    for v in seasonal(400):
        assert a.score_one({"value": v}) == b.score_one(v)
        a.learn_one({"value": v})
        b.learn_one(v)
    with pytest.raises(ValueError, match="exactly one entry"):
        a.learn_one({"a": 1.0, "b": 2.0})
    with pytest.raises(TypeError, match="number"):
        a.score_one("abc")
    with pytest.raises(ValueError, match="finite"):
        a.learn_one(float("nan"))


@pytest.mark.parametrize("kind", ["spike", "level", "flat"])
def test_injected_anomaly_is_the_top_score(kind):
    y = seasonal(3000)
    if kind == "spike":
        y[2500:2503] += 4.0
    elif kind == "level":
        y[2500:] += 3.0
    else:
        y[2500:2700] = 10.5  # the seasonal pattern stops
    s = TimeSeriesAnomalyDetector().score_series(y)
    top = int(np.argmax(s[500:])) + 500
    assert 2495 <= top <= 2600, top


def test_quiet_series_stays_quiet():
    s = TimeSeriesAnomalyDetector().score_series(seasonal(3000, seed=4))
    assert np.sort(s[500:])[-3] < 0.6  # at most a couple of moderate blips, no alarms


def test_debounce_reports_one_event_once():
    y = seasonal(3000)
    y[2500:2540] += 4.0
    s = TimeSeriesAnomalyDetector().score_series(y)
    strong = np.flatnonzero(s[2490:2600] > 0.5)
    assert 1 <= strong.size <= 3


def test_block_embedding():
    hist = np.arange(5.0)
    out = block_embed(hist, np.array([5.0, 6.0]), k=2, w=3)
    np.testing.assert_allclose(out, [[1.0, 4.0], [2.0, 5.0]])  # means of [0,1,2],[3,4,5] / [1,2,3],[4,5,6]


def test_save_load_continues_identically(tmp_path):
    y = seasonal(1200)
    det = TimeSeriesAnomalyDetector()
    det.score_series(y[:700])
    det.save(tmp_path / "ckpt")
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt.npz"]
    restored = TimeSeriesAnomalyDetector.load(tmp_path / "ckpt")
    from_state = TimeSeriesAnomalyDetector.from_state(det.to_state())
    expected = det.score_series(y[700:])
    np.testing.assert_array_equal(expected, restored.score_series(y[700:]))
    np.testing.assert_array_equal(expected, from_state.score_series(y[700:]))


def test_parameter_errors():
    with pytest.raises(TypeError, match="kk"):
        TimeSeriesAnomalyDetector(kk=3)
    with pytest.raises(TypeError, match="debounce must be an integer"):
        TimeSeriesAnomalyDetector(debounce=7.5)
    with pytest.raises(TypeError, match="seed must be an integer"):
        TimeSeriesAnomalyDetector(seed="x")
    with pytest.raises(TypeError, match="buffer_size must be an integer"):
        TimeSeriesAnomalyDetector(buffer_size="1500")
    with pytest.raises(ValueError, match="view"):
        TimeSeriesAnomalyDetector(views=[(0, 1, "median", 1.0, 10)])
    with pytest.raises(ValueError, match="combine"):
        TimeSeriesAnomalyDetector(combine="median")
    with pytest.raises(ValueError, match="NaN"):
        TimeSeriesAnomalyDetector().score_series([1.0, float("nan")])


def test_tail_probability_is_monotone_and_calibrated():
    rng = np.random.default_rng(0)
    tp = TailProbability(min_history=100)
    out = tp.transform(rng.normal(size=5000))
    assert np.all(out[:100] == 0)
    # a standard normal score exceeds z = 3.09 (tail 1e-3, mapped 0.3) about 0.1% of the time
    assert 0.0003 < np.mean(out[100:] >= 0.3) < 0.003
    a, b = TailProbability(min_history=10), TailProbability(min_history=10)
    base = rng.normal(size=50)
    a.transform(base), b.transform(base)
    assert a.update(2.0) < b.update(4.0)


def test_tail_probability_peek_is_pure_and_equals_update():
    raw = np.random.default_rng(2).gamma(2.0, size=300)
    tp = TailProbability(short=3, history=100, min_history=20)
    for v in raw:
        p = tp.peek(v)
        assert tp.peek(v) == p
        assert tp.update(v) == p


def test_tail_probability_update_equals_transform():
    raw = np.random.default_rng(1).gamma(2.0, size=400)
    whole = TailProbability(history=100, min_history=20).transform(raw)
    tp = TailProbability(history=100, min_history=20)
    np.testing.assert_allclose(whole, [tp.update(v) for v in raw], atol=1e-12)


def test_tail_probability_errors():
    with pytest.raises(ValueError, match="min_history"):
        TailProbability(history=10, min_history=20)
    with pytest.raises(ValueError, match="finite"):
        TailProbability().update(float("inf"))


def test_warmup_placeholders_stay_out_of_the_likelihood_history():
    # before the ratio detectors' first fit their scores are placeholders; a run of them in the
    # score history would distort the tail probabilities of the next `history` real scores
    det = TimeSeriesAnomalyDetector()
    warm = det.params["warmup"]
    y = seasonal(700)
    s = np.r_[det.score_series(y[:150]), det.score_series(y[150:])]  # warm-up split over two calls
    assert all(int(t._st_i[2]) == 700 - warm for t in det._tails)
    assert np.all(s[: warm + det.params["min_history"]] == 0.0)


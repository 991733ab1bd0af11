"""TimeSeriesAnomalyDetector (NAB-style) and the tail-probability mapping."""

from __future__ import annotations

import json

import numpy as np
import pytest

import math
from statistics import NormalDist

from ratiowatch.stream.detectors.anomaly import MIN_SPREAD, TimeSeriesAnomalyDetector, block_embed
from ratiowatch.stream.calibration.likelihood import TailProbability
import naive
from naive import tail_score
from series_util import ar1
from state_util import written_before


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


OPT_IN = {"readmit_after": None, "min_spread": MIN_SPREAD, "normal_ratio": 1.0}


@pytest.mark.parametrize("params", [{}, OPT_IN], ids=["default", "opt-in calibration"])
def test_river_api_equals_batch_replay(params):
    y = seasonal(900)
    y[600:603] += 4.0
    batch = TimeSeriesAnomalyDetector(**params).score_series(y)
    det = TimeSeriesAnomalyDetector(**params)
    one = []
    for v in y[:450]:
        s = det.score_one(v)
        assert det.score_one(v) == s  # score_one is pure
        one.append(s)
        det.learn_one(v)
    rest = det.score_series(y[450:])  # the batch form continues from the same state
    np.testing.assert_allclose(np.r_[one, rest], batch, atol=1e-9)
    assert batch[600:610].max() > 0.5  # the comparison covers real alarms, not only zeros


def test_a_stuck_sensor_is_found_by_the_repeat_view_and_missed_without_it():
    """White noise stuck at its mean for thirty rows: the subsequence views do not see it (eight
    equal values at the mean sit at the mode of the noise's subsequence density); the repeat view
    does, within a few rows, and the river API replays the batch form with it on."""
    y = np.random.default_rng(8).normal(size=2500)
    y[1800:1830] = 0.0
    plain = TimeSeriesAnomalyDetector(repeats=False).score_series(y)
    batch = TimeSeriesAnomalyDetector().score_series(y)  # the repeat view is on by default
    assert plain[1800:1860].max() < 0.5 <= batch[1800:1810].max()
    np.testing.assert_array_equal(batch[:1801], plain[:1801])  # no repeat before: the same scores
    det = TimeSeriesAnomalyDetector()
    det.score_series(y[:1790])
    one = []
    for v in y[1790:1840]:
        one.append(det.score_one(v))
        det.learn_one(v)
    np.testing.assert_allclose(one, batch[1790:1840], atol=1e-9)
    twin = TimeSeriesAnomalyDetector.from_state(det.to_state())
    np.testing.assert_array_equal(twin.score_series(y[1840:]), det.score_series(y[1840:]))


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


@pytest.mark.parametrize("k, w", [(8, 1), (8, 8), (3, 5), (1, 1)])
@pytest.mark.parametrize("level", [0.0, 1e12])
def test_block_embedding_is_each_blocks_own_mean_at_any_level(k, w, level):
    rng = np.random.default_rng(k * 10 + w)
    hist, vals = level + rng.normal(size=k * w + 3), level + rng.normal(size=3000)
    out = block_embed(hist, vals, k, w)
    np.testing.assert_allclose(out, naive.block_embed(hist, vals, k, w), rtol=1e-15, atol=4 * np.spacing(level + 10))
    if w == 1:  # plain subsequences are the values themselves, bit for bit
        assert np.array_equal(out[:, -1], vals)


def test_values_whose_block_sums_overflow_are_refused_and_no_view_learns_them():
    y = seasonal(700)
    det, twin = TimeSeriesAnomalyDetector(), TimeSeriesAnomalyDetector()
    det.score_series(y[:500])
    twin.score_series(y[:500])
    with pytest.raises(ValueError, match="rescale the series"):
        det.score_series(np.r_[y[500:510], np.full(8, 1e308)])  # the plain views could embed these; the block view cannot
    assert np.array_equal(det.score_series(y[500:]), twin.score_series(y[500:]))


def test_a_series_far_from_zero_scores_the_same_in_one_batch_or_in_pieces():
    y = 1e12 + seasonal(1500)
    whole = TimeSeriesAnomalyDetector().score_series(y)
    det = TimeSeriesAnomalyDetector()
    pieces = np.concatenate([det.score_series(y[i:i + 7]) for i in range(0, y.shape[0], 7)])
    assert np.array_equal(whole, pieces)


def test_save_load_continues_identically(tmp_path):
    y = seasonal(1200)
    y[680:740] = y[679]  # a stuck stretch across the checkpoint: the repeat view's run goes on
    det = TimeSeriesAnomalyDetector()
    det.score_series(y[:700])
    det.save(tmp_path / "ckpt")
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt.npz"]
    restored = TimeSeriesAnomalyDetector.load(tmp_path / "ckpt")
    from_state = TimeSeriesAnomalyDetector.from_state(det.to_state())
    expected = det.score_series(y[700:])
    assert expected[:40].max() > 0.5  # the stuck stretch is found after the restore too
    np.testing.assert_array_equal(expected, restored.score_series(y[700:]))
    np.testing.assert_array_equal(expected, from_state.score_series(y[700:]))


def test_a_state_written_before_the_repeat_view_continues_without_it():
    """Such a state has no `repeats` parameter and no repeat arrays: it loads as it was written."""
    y = np.round(4 * seasonal(1200)) / 4  # repeats do occur
    old = TimeSeriesAnomalyDetector(repeats=False)
    old.score_series(y[:700])
    restored = TimeSeriesAnomalyDetector.from_state(written_before(old.to_state(), "repeats", "repeats_"))
    assert restored.repeats is False
    np.testing.assert_array_equal(restored.score_series(y[700:]), old.score_series(y[700:]))


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
    with pytest.raises(ValueError, match="readmit_after"):
        TimeSeriesAnomalyDetector(readmit_after=-1)
    with pytest.raises(ValueError, match="min_spread"):
        TimeSeriesAnomalyDetector(min_spread=-0.1)
    with pytest.raises(ValueError, match="normal_ratio"):
        TimeSeriesAnomalyDetector(normal_ratio=0.0)
    with pytest.raises(ValueError, match="repeats"):
        TimeSeriesAnomalyDetector(repeats="yes")
    with pytest.raises(ValueError, match="min_spread"):
        TailProbability(min_spread=-1.0)


def test_the_calibration_options_reach_the_views_and_tails():
    det = TimeSeriesAnomalyDetector(**OPT_IN)
    assert all(d.readmit_after == det.buffer_size for d in det._detectors)  # None: one buffer length
    assert all(t.min_spread == MIN_SPREAD and t.min_raw == 0.0 for t in det._tails)  # ratio 1: log 0
    plain = TimeSeriesAnomalyDetector()
    assert all(d.readmit_after == 0 for d in plain._detectors)
    assert all(t.min_spread == 0.0 and t.min_raw == -math.inf for t in plain._tails)
    assert plain._repeat_tail is not None and TimeSeriesAnomalyDetector(repeats=False)._repeat_tail is None


def test_save_load_with_readmission_continues_identically():
    rng = np.random.default_rng(3)
    y = np.where((np.arange(2500) % 100) < 40, 1.0, 0.0) + 0.05 * rng.normal(size=2500)  # on/off schedule
    y[1500] += 3.0
    det = TimeSeriesAnomalyDetector(readmit_after=300, min_spread=MIN_SPREAD, normal_ratio=1.0)
    det.score_series(y[:1600])
    assert any(int(d._held_state[0]) > 0 for d in det._detectors)  # some rows are waiting
    twin = TimeSeriesAnomalyDetector.from_state(det.to_state())
    np.testing.assert_array_equal(det.score_series(y[1600:]), twin.score_series(y[1600:]))


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


@pytest.mark.parametrize("min_spread, min_raw", [(0.0, -math.inf), (0.3, -math.inf), (0.3, 0.2), (0.0, 0.5)])
def test_tail_probability_floors_match_the_formula(min_spread, min_raw):
    hist = 0.1 + 0.02 * np.random.default_rng(4).normal(size=200)  # a narrow history
    for a in (0.05, 0.15, 0.3, 0.6, 1.2, 3.0):
        tp = TailProbability(history=500, min_history=50, min_spread=min_spread, min_raw=min_raw)
        tp.transform(hist)
        assert tp.peek(a) == pytest.approx(tail_score(hist, a, min_spread=min_spread, min_raw=min_raw),
                                           abs=1e-9)


def test_min_spread_gives_half_the_density_the_score_one_half():
    # MIN_SPREAD = ln 2 / z(1e-5): against a constant history, a log ratio ln 2 above it (half the
    # density) maps to exactly 0.5, and anything closer stays below
    assert MIN_SPREAD == pytest.approx(math.log(2.0) / NormalDist().inv_cdf(1 - 1e-5), abs=1e-4)
    tp = TailProbability(min_history=10, min_std=0.0, min_spread=math.log(2.0) / NormalDist().inv_cdf(1 - 1e-5))
    tp.transform(np.zeros(50))
    assert tp.peek(math.log(2.0)) == pytest.approx(0.5, abs=1e-6)
    assert tp.peek(0.9 * math.log(2.0)) < 0.5


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



def test_a_clipped_history_holds_a_far_out_score_at_its_quantile():
    # written out: with clip_tail, each score enters the history at most at the Gaussian upper
    # clip_tail quantile of the history before it; its own output is the unclipped score's
    rng = np.random.default_rng(6)
    raw = np.r_[rng.normal(size=150), 40.0, rng.normal(size=60), 40.0, rng.normal(size=30)]
    tp = TailProbability(history=120, min_history=50, clip_tail=1e-10)
    z = NormalDist().inv_cdf(1 - 1e-10)
    held = []
    for v in raw:
        window = np.array(held[-120:])
        expect = tail_score(window, v) if window.size >= 50 else 0.0
        assert tp.update(v) == pytest.approx(expect, abs=1e-9)
        if window.size >= 50:
            v = min(v, window.mean() + z * max(window.std(), 0.01 * (abs(window.mean()) + 1e-12)))
        held.append(v)
    assert max(held) < 10.0  # neither 40 entered as it was


def test_without_the_clip_a_far_out_score_masks_the_next_one():
    calm = 0.1 + 0.01 * (np.arange(200) % 3)
    x = np.r_[calm, 50.0, calm, 0.2]
    assert TailProbability().transform(x)[-1] < 0.1  # 0.2 is 10 spreads out, but the 50 is held
    assert TailProbability(clip_tail=1e-10).transform(x)[-1] == 1.0
    np.testing.assert_array_equal(TailProbability(clip_tail=0.0).transform(x), TailProbability().transform(x))


def test_tail_probability_clip_must_be_a_tail():
    for bad in (-1e-5, 0.5, 2.0):
        with pytest.raises(ValueError, match="clip_tail"):
            TailProbability(clip_tail=bad)
    with pytest.raises(ValueError, match="history_clip"):
        TimeSeriesAnomalyDetector(history_clip=0.7)


def _ar_with_an_error_code(seed, code):
    rng = np.random.default_rng([seed, 3])
    y = ar1(rng.normal(size=4000), 0.5)
    sd = y.std()
    y[int(rng.integers(1000, 2800))] = code
    y[3000:3005] += 5 * sd
    return y


@pytest.mark.parametrize("seed", [0, 2])
def test_with_a_clipped_history_an_error_code_does_not_hide_the_anomaly_after_it(seed):
    # by default the code's floor score (-log 1e-6) widens the history's spread sixfold for
    # 2,000 rows, and a 5-sd anomaly 200-2,000 rows later stays below 0.5
    y = _ar_with_an_error_code(seed, 1e6)
    assert TimeSeriesAnomalyDetector(history_clip=1e-10).score_series(y)[2995:3020].max() == 1.0
    assert TimeSeriesAnomalyDetector().score_series(y)[2995:3020].max() < 0.5


def test_a_state_written_before_the_clipped_history_continues_without_it():
    y = seasonal(1200)
    old = TimeSeriesAnomalyDetector(history_clip=None)
    old.score_series(y[:700])
    restored = TimeSeriesAnomalyDetector.from_state(written_before(old.to_state(), "history_clip", "no such array"))
    assert restored.history_clip is None
    np.testing.assert_array_equal(restored.score_series(y[700:]), old.score_series(y[700:]))


SMALL = {"warmup": 50, "buffer_size": 200, "min_history": 20, "history": 200}


def _small_state(n=300):
    det = TimeSeriesAnomalyDetector(**SMALL)
    det.score_series(seasonal(n))
    return det, det.to_state()


def _meta_changed(state, drop=(), **changes):
    meta = json.loads(str(state["meta"]))
    for k in drop:
        del meta[k]
    return {**state, "meta": json.dumps({**meta, **changes})}


def test_a_checkpoint_records_its_format_version():
    assert json.loads(_small_state(100)[1]["meta"])["version"] == 1


@pytest.mark.parametrize("version", [0, 2, None, "1"])
def test_a_checkpoint_of_an_unknown_version_is_refused(version):
    _, state = _small_state()
    with pytest.raises(ValueError, match="unsupported TimeSeriesAnomalyDetector state version"):
        TimeSeriesAnomalyDetector.from_state(_meta_changed(state, version=version))


def test_a_checkpoint_written_before_versions_were_recorded_still_loads():
    y = seasonal(500)
    det, state = _small_state(300)
    restored = TimeSeriesAnomalyDetector.from_state(_meta_changed(state, drop=("version",)))
    np.testing.assert_array_equal(restored.score_series(y[300:]), det.score_series(y[300:]))


@pytest.mark.parametrize("drop", ["meta", "deb_ring", "tail1_raw", "view1._ref_buf", "view2.meta"])
def test_a_truncated_checkpoint_says_which_key_it_lacks(drop):
    _, state = _small_state()
    del state[drop]
    with pytest.raises(ValueError, match=f"not a TimeSeriesAnomalyDetector checkpoint, or a truncated one: "
                                         f"missing key '{drop}'"):
        TimeSeriesAnomalyDetector.from_state(state)


def test_another_detectors_checkpoint_or_none_is_refused_as_such():
    from ratiowatch.stream.detectors.outlier_stream import StreamingOutlierDetector

    other = StreamingOutlierDetector(warmup=10, buffer_size=20)
    other.process(np.random.default_rng(0).normal(size=(30, 2)))
    with pytest.raises(ValueError, match="not a TimeSeriesAnomalyDetector checkpoint"):
        TimeSeriesAnomalyDetector.from_state(other.to_state())
    with pytest.raises(ValueError, match="not a TimeSeriesAnomalyDetector checkpoint"):
        TimeSeriesAnomalyDetector.from_state(None)


@pytest.mark.parametrize("scale", [1e151, 1e300])
def test_values_whose_squared_distances_overflow_are_refused_and_no_view_learns_them(scale):
    y = seasonal(400)
    det, twin = TimeSeriesAnomalyDetector(**SMALL), TimeSeriesAnomalyDetector(**SMALL)
    det.score_series(y[:300])
    twin.score_series(y[:300])
    with pytest.raises(ValueError, match="overflow float64.*rescale the series"):
        det.score_series(np.r_[y[300:310], y[310] * scale])
    for call in (det.score_one, det.learn_one):
        with pytest.raises(ValueError, match="rescale the series"):
            call(-y[310] * scale)
    assert np.array_equal(det.score_series(y[300:]), twin.score_series(y[300:]))


def test_a_series_of_a_tiny_spread_is_refused_with_advice_to_rescale():
    with pytest.raises(ValueError, match="underflow float64.*rescale the values"):
        TimeSeriesAnomalyDetector(**SMALL).score_series((seasonal(300) - 10) * 1e-300)


@pytest.mark.parametrize("scale", [1e-100, 1e100])
def test_an_anomaly_is_found_at_any_scale_within_the_bounds(scale):
    y = seasonal(1500)
    y[1200:1203] += 3.0
    s = TimeSeriesAnomalyDetector().score_series((y - 10) * scale)
    assert int(np.argmax(s)) in range(1198, 1206)


def _same_checkpoint(a, b):
    """Two detectors whose checkpoints are equal entry for entry (meta as parsed JSON)."""
    sa, sb = a.to_state(), b.to_state()
    assert sa.keys() == sb.keys()
    assert json.loads(sa["meta"]) == json.loads(sb["meta"])
    for k in sa:
        if not k.endswith("meta"):
            np.testing.assert_array_equal(sa[k], sb[k], err_msg=k)
        else:
            assert json.loads(str(sa[k])) == json.loads(str(sb[k])), k


def test_a_batch_refused_by_one_view_is_learned_by_none_and_changes_nothing():
    """The block-mean view refuses the warm-up (its spread underflows) after the plain views have
    fitted theirs: no view, tail or counter keeps any of it."""
    y = np.random.default_rng(0).normal(size=300)
    det, fresh = TimeSeriesAnomalyDetector(**SMALL), TimeSeriesAnomalyDetector(**SMALL)
    with pytest.raises(ValueError, match="underflow float64"):
        det.score_series(y[:100] * 5e-151)
    _same_checkpoint(det, fresh)
    assert [d._n_learned for d in det._detectors] == [0, 0, 0] and det.n_seen == 0
    np.testing.assert_array_equal(det.score_series(y), fresh.score_series(y))
    _same_checkpoint(det, fresh)


def test_an_error_in_the_last_view_rolls_back_every_view_tail_and_the_debouncing(monkeypatch):
    y = seasonal(900)
    det, twin = TimeSeriesAnomalyDetector(**SMALL), TimeSeriesAnomalyDetector(**SMALL)
    det.score_series(y[:260])
    twin.score_series(y[:260])

    def refuse():
        raise ValueError("refused")

    monkeypatch.setattr(det._detectors[-1], "_refit", refuse)  # the next refit falls in the batch below
    with pytest.raises(ValueError, match="refused"):
        det.score_series(y[260:400])
    monkeypatch.undo()
    _same_checkpoint(det, twin)
    np.testing.assert_array_equal(det.score_series(y[260:]), twin.score_series(y[260:]))


def test_numpy_scalar_parameters_are_kept_as_python_ones_and_checkpoints_save(tmp_path):
    y = seasonal(700)
    given = dict(views=[(np.int64(8), np.int32(1), np.str_("median"), np.float64(1.0), np.int64(100)),
                        (np.int64(4), np.int64(2), "local", np.float64(2.0), np.uint16(50))],
                 buffer_size=np.int64(200), warmup=np.int64(50), history=np.int64(200),
                 min_history=np.int32(20), alpha=np.float64(0.1), quiet=np.float64(0.0), debounce=np.int64(30),
                 readmit_after=np.int64(0), repeats=np.True_, seed=np.int64(3))
    plain = {k: (tuple(tuple(v.item() if isinstance(v, np.generic) else v for v in view) for view in vs)
                 if k == "views" else v.item()) for k, vs in given.items() for v in [vs]}
    det = TimeSeriesAnomalyDetector(**given)
    for k, v in plain.items():
        assert getattr(det, k) == v and type(getattr(det, k)) is type(v), k
    assert all(type(e) in (int, float, str) for view in det.views for e in view)
    expected = TimeSeriesAnomalyDetector(**plain).score_series(y)
    np.testing.assert_array_equal(det.score_series(y[:400]), expected[:400])
    det.save(tmp_path / "ckpt")
    restored = TimeSeriesAnomalyDetector.load(tmp_path / "ckpt")
    np.testing.assert_array_equal(restored.score_series(y[400:]), expected[400:])
    twin = det.clone()
    assert twin._get_params() == det._get_params() and twin.seed == 3


def test_a_python_int_beyond_float64_is_refused_as_a_value_too_large_and_nothing_is_learned():
    det = TimeSeriesAnomalyDetector(**SMALL)
    det.score_series(seasonal(100))
    for call in (lambda: det.learn_one(10**400), lambda: det.score_one({"v": -10**400}),
                 lambda: det.score_series([1.0, 10**400])):
        with pytest.raises(ValueError, match="beyond the range of float64.*rescale"):
            call()
    assert det.n_seen == 100


@pytest.mark.parametrize("drop", ["repeats_ring", "repeats_last", "repeats_st"])
def test_a_checkpoint_of_the_repeat_view_without_its_arrays_is_refused(drop):
    _, state = _small_state()
    del state[drop]
    with pytest.raises(ValueError, match=f"truncated one: missing key '{drop}'"):
        TimeSeriesAnomalyDetector.from_state(state)


def _damage(state, key, value):
    return {**state, key: value}


def _with_item(state, key, index, value):
    arr = np.array(state[key])
    arr[index] = value
    return {**state, key: arr}


def _view_meta(state, view, **changes):
    key = f"view{view}.meta"
    return {**state, key: json.dumps({**json.loads(str(state[key])), **changes})}


# (entry named in the error, how the state is damaged); SMALL: history 200, debounce 75,
# views' buffers of 200 and windows of 50, refit every 100
DAMAGED = {
    "last of the wrong length": ("'last' has shape", lambda s: _damage(s, "last", s["last"][:5])),
    "scalar tail ring": ("'tail0_ring' has shape", lambda s: _damage(s, "tail0_ring", np.float64(0.5))),
    "short debounce ring": ("'deb_ring' has shape", lambda s: _damage(s, "deb_ring", np.zeros(1))),
    "debounce position past the ring": ("'deb_st\\[1\\]", lambda s: _damage(s, "deb_st", np.array([5, 10**6]))),
    "negative debounce count": ("'deb_st\\[0\\]", lambda s: _with_item(s, "deb_st", 0, -1)),
    "fractional debounce state": ("'deb_st' must hold integers", lambda s: _damage(s, "deb_st", np.array([5.0, 3.0]))),
    "NaN in a tail": ("'tail1_f' holds NaN", lambda s: _with_item(s, "tail1_f", 0, np.nan)),
    "tail position past its ring": ("'tail1_i\\[1\\]", lambda s: _with_item(s, "tail1_i", 1, 200)),
    "tail count above its history": ("'tail0_i\\[0\\]", lambda s: _with_item(s, "tail0_i", 0, 201)),
    "repeat position past its ring": ("'repeats_st\\[1\\]", lambda s: _with_item(s, "repeats_st", 1, 200)),
    "repeat flag not 0 or 1": ("'repeats_ring' holds flags", lambda s: _with_item(s, "repeats_ring", 3, 7)),
    "repeat ring of the wrong length": ("'repeats_ring' has shape",
                                        lambda s: _damage(s, "repeats_ring", s["repeats_ring"][:-1])),
    "negative n_seen": ("'n_seen' in 'meta' is -1", lambda s: _meta_changed(s, n_seen=-1)),
    "view reference position past its buffer": ("'view0._ref_state\\[1\\]'",
                                                lambda s: _with_item(s, "view0._ref_state", 1, 200)),
    "view window position past its window": ("'view1._win_state\\[1\\]'",
                                             lambda s: _with_item(s, "view1._win_state", 1, 50)),
    "view held ring head past its ring": ("'view2._held_state\\[1\\]'",
                                          lambda s: _with_item(s, "view2._held_state", 1, 1)),
    "view buffer of the wrong shape": ("'view0._ref_buf' has shape",
                                       lambda s: _damage(s, "view0._ref_buf", s["view0._ref_buf"][:, :4])),
    "view steps since the refit past the interval": ("'since_refit' in 'view1.meta' is 100",
                                                     lambda s: _view_meta(s, 1, since_refit=100)),
}


@pytest.mark.parametrize("case", list(DAMAGED))
def test_a_damaged_checkpoint_is_refused_naming_the_entry(case):
    """Checked before anything is scored: a ring position out of range once made the compiled
    debouncing write outside its ring."""
    entry, damage = DAMAGED[case]
    _, state = _small_state()
    with pytest.raises(ValueError, match=f"TimeSeriesAnomalyDetector checkpoint, or a damaged one: {entry}"):
        TimeSeriesAnomalyDetector.from_state(damage(state))


def test_a_checkpoint_taken_before_any_value_restores_as_fresh():
    fresh = TimeSeriesAnomalyDetector(**SMALL)
    restored = TimeSeriesAnomalyDetector.from_state(fresh.to_state())
    y = seasonal(300)
    np.testing.assert_array_equal(restored.score_series(y), TimeSeriesAnomalyDetector(**SMALL).score_series(y))


def test_values_equal_but_for_rounding_score_as_a_constant_series():
    """1.0 and the next float, or 0.3 and 0.1 + 0.2: a kernel width of ulps made them maximal outliers."""
    one = np.r_[np.full(2000, 1.0), np.full(2000, np.nextafter(1.0, 2.0))]
    rng = np.random.default_rng(0)
    tenths = np.r_[np.full(2000, 0.3), np.where(rng.random(2000) < 0.5, 0.3, 0.1 + 0.2)]
    for y in (one, tenths):
        assert TimeSeriesAnomalyDetector().score_series(y).max() < 0.5


@pytest.mark.parametrize("missing", [None, {"value": None}], ids=["none", "dict-of-none"])
def test_none_is_refused_as_a_missing_value_as_nan_is(missing):
    # None used to get a TypeError about the input's type instead of the advice NaN gets
    det = TimeSeriesAnomalyDetector()
    for v in seasonal(200):
        det.learn_one(v)
    before = det.to_state()
    for call in (det.learn_one, det.score_one):
        with pytest.raises(ValueError, match="fill missing values"):
            call(missing)
        with pytest.raises(ValueError, match="fill missing values"):
            call(float("nan"))
    after = det.to_state()
    assert before.keys() == after.keys() and json.loads(before["meta"]) == json.loads(after["meta"])
    for k in before:
        if k != "meta":
            np.testing.assert_array_equal(before[k], after[k], err_msg=k)

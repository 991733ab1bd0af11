"""Pipeline: per-key routing, validation to dead letters, checkpoint/restore and replay skipping."""

from __future__ import annotations

import numpy as np
import pytest

from ratiowatch.stream.engine.checkpoint import CheckpointStore
from ratiowatch.stream.engine.pipeline import ChangePointFactory, Pipeline
from ratiowatch.connectors.records import BadRecord, Record
from toy_detector import MeanShiftFactory, step_series


def recs(key: str, values, start: int = 0, part: str = "p0", ts0: float = 0.0):
    return [Record(key, ts0 + start + i, np.array([float(v)]), (part, start + i)) for i, v in enumerate(values)]


def alerts_of(pipeline, records):
    """The alerts of ``records`` fed to ``pipeline`` one at a time."""
    out = []
    for r in records:
        out += pipeline.process([r])[0]
    return out


def interleave(*lists):
    out = []
    for group in zip(*lists):
        out.extend(group)
    return out


def test_routes_by_key_and_each_key_alarms_at_its_own_change():
    p = Pipeline(MeanShiftFactory())
    a = recs("a", step_series(60, 20), part="p0")
    b = recs("b", step_series(60, 40), part="p1")
    alerts, bad = p.process(interleave(a, b))
    assert bad == []
    got = sorted((x.key, x.change_index) for x in alerts)
    assert got == [("a", 20), ("b", 40)]
    assert p.positions == {"p0": 60, "p1": 60}
    assert len({x.alert_id for x in alerts}) == 2


def test_bad_input_goes_to_dead_letters_and_processing_continues():
    p = Pipeline(MeanShiftFactory())
    good = recs("a", [1.0, 2.0, 3.0])
    wrong_dim = Record("a", 10.0, np.array([1.0, 2.0]), ("p0", 3))
    backwards = Record("a", 0.5, np.array([1.0]), ("p0", 4))
    parse_fail = BadRecord("malformed_json", "x", "{", ("p0", 5))
    after = Record("a", 11.0, np.array([4.0]), ("p0", 6))
    alerts, bad = p.process(good + [wrong_dim, backwards, parse_fail, after])
    assert [b.reason for b in bad] == ["wrong_dimension", "timestamp_backwards", "malformed_json"]
    assert all(b.ref is not None for b in bad)
    assert p.keys["a"].count == 4  # the three good ones and `after`
    assert p.positions["p0"] == 7  # bad records are handled too: offsets move past them


def test_configured_dimension_is_enforced_from_the_first_record():
    p = Pipeline(MeanShiftFactory(), dim=2)
    _, bad = p.process(recs("a", [1.0]))
    assert [b.reason for b in bad] == ["wrong_dimension"]


def test_detector_exception_becomes_dead_letters_not_a_crash():
    class Boom(MeanShiftFactory):
        def create(self, key, dim):
            det = super().create(key, dim)
            det.update_batch = lambda values: (_ for _ in ()).throw(FloatingPointError("singular"))
            return det

    p = Pipeline(Boom())
    alerts, bad = p.process(recs("a", [1.0, 2.0]))
    assert alerts == [] and [b.reason for b in bad] == ["detector_error"] * 2
    assert "singular" in bad[0].detail


def test_restart_from_checkpoint_skips_replayed_records_and_matches_uninterrupted(tmp_path):
    series = recs("a", step_series(120, 70)) + recs("b", step_series(120, 30), part="p1")
    ref = Pipeline(MeanShiftFactory())
    ref_alerts, _ = ref.process(series)

    store = CheckpointStore(tmp_path)
    first = Pipeline(MeanShiftFactory(), store=store)
    head = [r for r in series if r.ref[1] < 50]
    a1, _ = first.process(head)
    first.checkpoint()
    a1b, _ = first.process([r for r in series if 50 <= r.ref[1] < 80])  # processed, never checkpointed
    # crash: the source replays from its last commit, offset 40 (< checkpointed 49)
    factory = MeanShiftFactory()
    second = Pipeline(factory, store=store)
    a2, bad = second.process([r for r in series if r.ref[1] >= 40])
    assert bad == [] and factory.restored == 2 and factory.created == 0
    assert second.skipped_replays == 2 * 10
    assert second.keys["a"].count == 120
    delivered = {x.alert_id: x for x in a1 + a1b + a2}
    assert sorted(delivered) == sorted(x.alert_id for x in ref_alerts)
    assert all(delivered[x.alert_id] == x for x in ref_alerts)


def test_evicted_key_is_restored_on_next_sight(tmp_path):
    store = CheckpointStore(tmp_path)
    p = Pipeline(MeanShiftFactory(), store=store)
    p.process(recs("a", step_series(30, 100)))
    assert p.idle_keys(0.0) == ["a"]
    assert p.evict(["a"]) == 1  # checkpoints written
    assert "a" not in p.keys and store.load("a")[1]["count"] == 30
    alerts, _ = p.process(recs("a", [10.0] * 10, start=30))
    assert p.keys["a"].count == 40
    assert [x.change_index for x in alerts] == [30]
    p.checkpoint()
    assert p.evict(["a"]) == 0  # unchanged since its last checkpoint: nothing to write


def test_evicting_some_keys_leaves_the_count_toward_the_next_commit(tmp_path):
    # the count and clock that schedule the next checkpoint-and-commit restarted at every eviction:
    # with more keys than max_keys, some are evicted in every loop, and no offset was ever committed
    p = Pipeline(MeanShiftFactory(), store=CheckpointStore(tmp_path))
    p.process(recs("a", step_series(30, 100)) + recs("b", step_series(30, 100)))
    since, items = p.last_checkpoint, p.items_since_checkpoint
    p.evict(["a"])
    assert (p.last_checkpoint, p.items_since_checkpoint) == (since, items) == (since, 60)
    p.checkpoint()
    assert p.items_since_checkpoint == 0 and p.last_checkpoint > since


def test_changepoint_detector_restored_from_checkpoint_scores_like_uninterrupted(tmp_path):
    """The real detector through adapter + checkpoint store: identical scores (1e-9) and alerts."""
    rng = np.random.default_rng(3)
    x = np.r_[rng.normal(0, 1, 300), rng.normal(0, 8, 300)]  # an unmistakable change
    kwargs = {"n": 25, "seed": 1, "false_alarm_rate": 0.01}  # loose: alerts to compare, whatever the tuning
    stream_ = recs("k", x)

    def scores_of(pipeline, records):
        out, alerts = [], []
        for r in records:
            a, _ = pipeline.process([r])
            alerts += a
            out.append(pipeline.keys["k"].detector.det.score)
        return np.array(out), alerts

    full_scores, full_alerts = scores_of(Pipeline(ChangePointFactory(kwargs)), stream_)
    store = CheckpointStore(tmp_path)
    p1 = Pipeline(ChangePointFactory(kwargs), store=store)
    s1, al1 = scores_of(p1, stream_[:330])  # cut just after the change: windows mid-shift
    p1.checkpoint()
    p2 = Pipeline(ChangePointFactory(kwargs), store=store)
    s2, al2 = scores_of(p2, stream_[330:])
    resumed = np.r_[s1, s2]
    finite = np.isfinite(full_scores)
    assert finite.sum() > 400
    np.testing.assert_array_equal(np.isfinite(resumed), finite)
    np.testing.assert_allclose(resumed[finite], full_scores[finite], rtol=0, atol=1e-9)
    assert [a.alert_id for a in al1 + al2] == [a.alert_id for a in full_alerts]
    assert full_alerts, "the comparison needs at least one alert"


def test_stale_owner_never_overwrites_a_newer_checkpoint(tmp_path):
    """A paused process whose keys moved to another owner must not clobber the newer state."""
    store = CheckpointStore(tmp_path)
    zombie = Pipeline(MeanShiftFactory(), store=store)
    zombie.process(recs("a", [1.0] * 10))
    zombie.checkpoint()
    owner = Pipeline(MeanShiftFactory(), store=store)
    owner.process(recs("a", [1.0] * 10, start=10))
    owner.checkpoint()
    zombie.process(recs("a", [2.0] * 5, start=10))  # the zombie wakes up with stale state
    assert zombie.checkpoint() == 0 and zombie.fenced_keys == 1 and "a" not in zombie.keys
    assert store.load("a")[1]["count"] == 20


def test_split_profile_detector_restored_from_checkpoint_alerts_like_uninterrupted(tmp_path):
    """kind = "split_profile" through the same adapter and store: the same alerts after a restart."""
    rng = np.random.default_rng(4)
    x = np.r_[rng.normal(0, 1, 300), rng.normal(0, 4, 300)]
    stream_ = recs("k", x)

    full = alerts_of(Pipeline(ChangePointFactory({"seed": 1}, "split_profile")), stream_)
    store = CheckpointStore(tmp_path)
    p1 = Pipeline(ChangePointFactory({"seed": 1}, "split_profile"), store=store)
    al1 = alerts_of(p1, stream_[:310])
    p1.checkpoint()
    p2 = Pipeline(ChangePointFactory({"seed": 1}, "split_profile"), store=store)
    al2 = alerts_of(p2, stream_[310:])
    assert [a.alert_id for a in al1 + al2] == [a.alert_id for a in full]
    assert [abs(a.change_index - 300) <= 10 for a in full] == [True]


def test_auto_kind_hands_a_periodic_key_to_the_split_profile_and_restores_exactly(tmp_path, caplog):
    """kind = "auto": a periodic key moves to the split profile, which finds the cycle's change of
    shape (the window detector alone does not), and a restart on either side of the hand-over alerts
    as without it."""
    from ratiowatch.stream.evaluate.synthetic import change_series

    x = change_series("shape", 0).x[:1400]  # sine <-> square wave, period 24, a change at 500
    stream_ = recs("k", x)

    full_pipe = Pipeline(ChangePointFactory({"seed": 0}, "auto"))
    with caplog.at_level("INFO", logger="ratiowatch.daemon"):
        full = alerts_of(full_pipe, stream_)
    assert full_pipe.factory.name == "changepoint/auto"
    said = [r for r in caplog.records if "handed to the split-profile detector" in r.getMessage()]
    assert [(r.key, r.record) for r in said] == [("k", 120)]  # once, when it happened
    assert [abs(a.change_index - 500) <= 25 for a in full][:1] == [True]
    assert alerts_of(Pipeline(ChangePointFactory({"seed": 0}, "window")), stream_) == []
    for cut in (100, 700):  # before and after the hand-over
        store = CheckpointStore(tmp_path / str(cut))
        p1 = Pipeline(ChangePointFactory({"seed": 0}, "auto"), store=store)
        al1 = alerts_of(p1, stream_[:cut])
        p1.checkpoint()
        p2 = Pipeline(ChangePointFactory({"seed": 0}, "auto"), store=store)
        al2 = alerts_of(p2, stream_[cut:])
        assert [a.alert_id for a in al1 + al2] == [a.alert_id for a in full]


def spiky_sine(n=3000, at=2500, seed=0):
    """A sine of period 100 with a little noise and one burst of +3 over 10 rows at ``at``."""
    rng = np.random.default_rng(seed)
    y = np.sin(np.arange(n) * 2 * np.pi / 100) + 0.05 * rng.normal(size=n)
    y[at:at + 10] += 3.0
    return y


def test_anomaly_kind_alerts_on_the_rows_the_library_detector_scores_above_the_threshold():
    """kind = "anomaly": the same scores as TimeSeriesAnomalyDetector.score_series; an alert of kind
    "anomaly" at each row that reaches the threshold with no such row in the debounce before it."""
    from ratiowatch.stream.detectors.anomaly import TimeSeriesAnomalyDetector
    from ratiowatch.stream.engine.pipeline import build_factory

    y = spiky_sine()
    p = Pipeline(build_factory("anomaly", {"seed": 2}, 0.3))
    alerts = []
    for i in range(0, len(y), 250):  # blocks of several rows per key, as the daemon hands them over
        a, bad = p.process(recs("k", y[i:i + 250], start=i))
        assert bad == []
        alerts += a
    lib = TimeSeriesAnomalyDetector(seed=2).score_series(y)
    hits = np.flatnonzero(lib >= 0.3)
    rows = hits[np.r_[True, np.diff(hits) > 75]]  # the first row of each event
    assert [a.change_index for a in alerts] == [a.alarm_index for a in alerts] == rows.tolist()
    assert [a.score for a in alerts] == lib[rows].tolist()
    assert {a.kind for a in alerts} == {"anomaly"} and {a.threshold for a in alerts} == {0.3}
    assert any(2495 <= a.change_index < 2515 for a in alerts)
    assert p.keys["k"].detector.latest_score == lib[-1]


def test_anomaly_kind_alerts_do_not_depend_on_how_polls_cut_a_large_valued_stream():
    """A metric far from zero (a level of 1e12): any cut of the stream into batches gives the scores
    of the whole series, bit for bit, so the alerts do not depend on the poll sizes."""
    from ratiowatch.stream.detectors.anomaly import TimeSeriesAnomalyDetector
    from ratiowatch.stream.engine.pipeline import build_factory

    y = 1e12 + spiky_sine(seed=3)
    lib = TimeSeriesAnomalyDetector().score_series(y)
    cuts = np.sort(np.random.default_rng(4).choice(np.arange(1, y.size), size=60, replace=False))
    p = Pipeline(build_factory("anomaly", {}, 0.3))
    alerts = []
    for lo, hi in zip(np.r_[0, cuts], np.r_[cuts, y.size]):
        a, bad = p.process(recs("k", y[lo:hi], start=int(lo)))
        assert bad == []
        alerts += a
    hits = np.flatnonzero(lib >= 0.3)
    rows = hits[np.r_[True, np.diff(hits) > 75]]
    assert [a.change_index for a in alerts] == rows.tolist() and rows.size > 0
    assert [a.score for a in alerts] == lib[rows].tolist()
    assert p.keys["k"].detector.latest_score == lib[-1]


def test_anomaly_kind_restored_from_a_checkpoint_alerts_like_uninterrupted(tmp_path):
    from ratiowatch.stream.engine.pipeline import build_factory

    y = spiky_sine(seed=1)
    y[2000:2048] = y[1999]  # a stuck stretch: its score rises row after row, one event
    stream_ = recs("k", y)
    full, _ = Pipeline(build_factory("anomaly", {})).process(stream_)
    stuck = [a.change_index for a in full if 2000 <= a.change_index < 2048]
    assert len(stuck) == 1 and any(2500 <= a.change_index < 2510 for a in full)
    store = CheckpointStore(tmp_path)
    p1 = Pipeline(build_factory("anomaly", {}), store=store)
    a1, _ = p1.process(stream_[:stuck[0] + 3])  # cut inside the event: its rows must not alert again
    p1.checkpoint()
    p2 = Pipeline(build_factory("anomaly", {}), store=store)
    a2, _ = p2.process(stream_[stuck[0] + 3:])
    assert [(a.alert_id, a.score) for a in a1 + a2] == [(a.alert_id, a.score) for a in full]


def test_anomaly_kind_dead_letters_records_with_several_values_and_keeps_going():
    from ratiowatch.stream.engine.pipeline import build_factory

    p = Pipeline(build_factory("anomaly", {}))
    two = [Record("wide", float(i), np.array([1.0, 2.0]), ("p0", i)) for i in range(3)]
    alerts, bad = p.process(two + recs("narrow", [1.0, 2.0], start=3))
    assert alerts == [] and [b.reason for b in bad] == ["processing_error"] * 3
    assert "one value per key" in bad[0].detail
    assert p.keys["narrow"].count == 2 and "wide" not in p.keys


def test_a_checkpoint_of_another_detector_kind_is_refused_with_what_to_do(tmp_path):
    from ratiowatch.stream.engine.pipeline import build_factory

    store = CheckpointStore(tmp_path)
    old = Pipeline(MeanShiftFactory(), store=store)
    old.process(recs("a", [1.0] * 10))
    old.checkpoint()
    p = Pipeline(build_factory("anomaly", {}), store=store)
    _, bad = p.process(recs("a", [1.0], start=10))
    assert [b.reason for b in bad] == ["processing_error"]
    assert "'meanshift'" in bad[0].detail and "'anomaly'" in bad[0].detail and "checkpoint.dir" in bad[0].detail


def test_anomaly_threshold_outside_the_score_range_is_refused():
    from ratiowatch.stream.engine.pipeline import build_factory

    with pytest.raises(ValueError, match=r"score_threshold must be in \(0, 1\]"):
        build_factory("anomaly", {}, 1.5)

"""The loop's background checkpoints: offsets are committed only once the checkpoint files of the
same point are durable, a failed write commits nothing, fencing still works between processes,
and a detector's batched ``step_many`` is used when it has one."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import numpy as np
import pytest

from ratiowatch.stream.engine.checkpoint import CheckpointStore
from ratiowatch.stream.engine.config import parse_config
from ratiowatch.stream.engine.daemon import Daemon
from ratiowatch.stream.engine.pipeline import ChangePointAdapter, Pipeline
from ratiowatch.connectors.records import Record
from fake_sinks import ListSink
from fake_sources import ListSource
from toy_detector import MeanShiftFactory, step_series


def records(n, keys=("a", "b")):
    out = []
    for t, v in enumerate(step_series(n, n // 2)):
        for k in keys:
            out.append(Record(k, float(t), np.array([v]), ("p0", len(out))))
    return out


def config(tmp_path, every=20):
    return parse_config({"source": {"type": "stdin", "max_poll_records": 10},
                         "checkpoint": {"dir": str(tmp_path / "state"), "every_records": every},
                         "metrics": {"enabled": False}})


class GatedStore(CheckpointStore):
    """write_many blocks until released, so the test sees the loop while a checkpoint is in flight."""

    def __init__(self, directory):
        super().__init__(directory)
        self.release = threading.Event()
        self.writing = threading.Event()
        self.fail = False

    def write_many(self, payloads):
        self.writing.set()
        assert self.release.wait(20)
        if self.fail:
            raise OSError("disk full")
        return super().write_many(payloads)


def test_offsets_are_committed_only_after_the_checkpoint_files_are_durable(tmp_path):
    recs = records(60)
    src = ListSource(recs)
    d = Daemon(config(tmp_path), factory=MeanShiftFactory(), source=src, sinks=[ListSink("null")], dead_letter=ListSink("null"))
    d._setup()
    store = GatedStore(tmp_path / "state")
    d.pipeline.store = store
    seen = {}

    def on_poll(i):
        # the first periodic checkpoint is due after 20 records; while its write is held back the
        # loop keeps polling, and nothing may be committed yet
        if d._inflight is not None and i >= 30 and "polled_while_writing" not in seen:
            assert store.writing.wait(10)  # the writer thread is inside write_many, held
            seen["polled_while_writing"] = i
            seen["commits_then"] = list(src.commits)
            seen["files_then"] = store.keys()
            store.release.set()

    src.on_poll = on_poll
    assert d.run() == 0
    assert seen["polled_while_writing"] >= 20  # processing went on during the write
    assert seen["commits_then"] == [] and seen["files_then"] == []
    assert src.commits[0] == {"p0": 20}  # the position of the snapshot, not of the loop at commit time
    assert src.commits[-1] == {"p0": len(recs)}
    assert all(a["p0"] <= b["p0"] for a, b in zip(src.commits, src.commits[1:]))
    assert store.load("a")[1]["count"] == 60 and store.load("b")[1]["count"] == 60


def test_a_failed_checkpoint_write_commits_nothing_and_stops_the_daemon(tmp_path):
    src = ListSource(records(30))
    d = Daemon(config(tmp_path), factory=MeanShiftFactory(), source=src, sinks=[ListSink("null")], dead_letter=ListSink("null"))
    d._setup()
    store = GatedStore(tmp_path / "state")
    store.fail = True
    store.release.set()
    d.pipeline.store = store
    with pytest.raises(OSError, match="disk full"):
        d.run()
    assert src.commits == []
    assert all(ks.dirty for ks in d.pipeline.keys.values())  # still to be written


class FailingCommits(ListSource):
    """Its periodic commits succeed; from ``fail_from`` on every commit fails (a broker gone away)."""

    def __init__(self, records, fail_from):
        super().__init__(records)
        self.fail_from = fail_from

    def commit(self, positions):
        if positions["p0"] >= self.fail_from:
            raise ConnectionError("broker gone")
        super().commit(positions)


def test_a_final_commit_that_fails_is_an_error_not_a_clean_stop(tmp_path):
    # a periodic commit that fails is committed by the next one; the stop's has no next one, and
    # the daemon said "stopped" with exit 0 while the next start would replay
    src = FailingCommits(records(30), fail_from=60)
    d = Daemon(config(tmp_path), factory=MeanShiftFactory(), source=src, sinks=[ListSink("null")],
               dead_letter=ListSink("null"))
    d._setup()
    with pytest.raises(RuntimeError, match="the final offset commit failed .*broker gone"):
        d.run()
    assert src.commits and src.commits[-1]["p0"] < 60 and d.stats["commit_failures"] >= 1


def test_fencing_between_two_stores_on_one_directory(tmp_path):
    """Two processes = two CheckpointStore objects: the stat-signature shortcut must not hide a
    newer checkpoint written by the other one."""
    zombie = Pipeline(MeanShiftFactory(), store=CheckpointStore(tmp_path))
    owner = Pipeline(MeanShiftFactory(), store=CheckpointStore(tmp_path))
    zombie.process(records(5, keys=("a",)))
    zombie.checkpoint()
    owner.process(records(5, keys=("a",)))   # restored from the zombie's checkpoint; all 5 are replays
    assert owner.skipped_replays == 5
    owner.process([Record("a", 10.0, np.array([1.0]), ("p0", 10))])
    owner.checkpoint()
    zombie.process([Record("a", 10.0, np.array([2.0]), ("p0", 10))])
    assert zombie.checkpoint() == 0 and zombie.fenced_keys == 1 and "a" not in zombie.keys
    assert CheckpointStore(tmp_path).load("a")[1]["count"] == owner.keys["a"].count


def test_store_seq_is_read_from_disk_when_another_writer_replaced_the_file(tmp_path):
    mine, other = CheckpointStore(tmp_path), CheckpointStore(tmp_path)
    mine.save("k", {"x": np.zeros(3)}, {"seq": 1})
    assert mine.seq("k") == 1
    other.save("k", {"x": np.zeros(3)}, {"seq": 5})  # same size, new inode
    assert mine.seq("k") == 5
    (tmp_path / mine.path("k").name).unlink()
    assert mine.seq("k") == 0


class Stepper:
    """A detector with ``step`` and, optionally, ``step_many`` (same alarms either way)."""

    class A:
        def __init__(self, t):
            self.change_index, self.alarm_index, self.score, self.threshold = t, t, 1.0, 0.5

    def __init__(self):
        self.t = 0
        self.score = 0.0
        self.calls = {"step": 0, "step_many": 0}

    def step(self, x):
        self.calls["step"] += 1
        self.t += 1
        self.score = float(x)
        return self.A(self.t) if float(x) > 5 else None


class ManyStepper(Stepper):
    def step_many(self, values):
        self.calls["step_many"] += 1
        out = []
        for x in np.asarray(values):
            out.append(Stepper.step(self, x))
        self.calls["step"] -= len(out)
        return out


def test_adapter_uses_step_many_when_the_detector_has_it():
    vals = np.array([[1.0], [9.0], [2.0], [7.0]])
    plain, many = ChangePointAdapter(Stepper()), ChangePointAdapter(ManyStepper())
    e1, e2 = plain.update_batch(vals), many.update_batch(vals)
    assert e1 == e2 and [e.row for e in e1] == [1, 3]
    assert plain.det.calls == {"step": 4, "step_many": 0}
    assert many.det.calls == {"step": 0, "step_many": 1}
    assert plain.latest_score == many.latest_score == 7.0


# --- eager restore -----------------------------------------------------------------------------------
def checkpointed_store(tmp_path):
    """Keys a, b on partition p0 and c on p1, checkpointed after 30 records each."""
    store = CheckpointStore(tmp_path / "state")
    p = Pipeline(MeanShiftFactory(), store=store)
    recs = []
    for t, v in enumerate(step_series(30, 100)):
        for k, part in (("a", "p0"), ("b", "p0"), ("c", "p1")):
            recs.append(Record(k, float(t), np.array([v]), (part, t)))
    p.process(recs)
    p.checkpoint()
    return store


def test_restore_partitions_loads_only_the_keys_of_those_partitions(tmp_path):
    store = checkpointed_store(tmp_path)
    factory = MeanShiftFactory()
    p = Pipeline(factory, store=store)
    assert p.restore_partitions({"p0"}) == 2
    assert sorted(p.keys) == ["a", "b"] and factory.restored == 2 and factory.created == 0
    assert p.keys_of_partitions({"p0"}) == ["a", "b"] or sorted(p.keys_of_partitions({"p0"})) == ["a", "b"]
    assert p.restore_partitions({"p0"}) == 0  # already in memory
    # replays of records already in the restored state are skipped, as after a lazy restore
    _, bad = p.process([Record("a", 29.0, np.array([0.0]), ("p0", 29)), Record("a", 30.0, np.array([0.0]), ("p0", 30))])
    assert bad == [] and p.skipped_replays == 1 and p.keys["a"].count == 31
    assert p.restore_partitions({"p1"}, limit=0) == 0 and "c" not in p.keys


def test_daemon_restores_keys_when_partitions_are_assigned_and_at_start(tmp_path):
    store = checkpointed_store(tmp_path)
    src = ListSource([])
    src.on_revoke = src.on_assign = None   # looks like a group consumer: the daemon installs its callbacks
    factory = MeanShiftFactory()
    d = Daemon(config(tmp_path), factory=factory, source=src, sinks=[ListSink("null")], dead_letter=ListSink("null"))
    d._setup()
    assert d.pipeline.keys == {}
    src.on_assign({"p1"})
    assert list(d.pipeline.keys) == ["c"] and factory.restored == 1
    d.close()

    src2 = ListSource([])
    src2.static_partitions = {"p0", "p1"}   # e.g. manual Kafka assignment or a file
    d2 = Daemon(config(tmp_path), factory=MeanShiftFactory(), source=src2, sinks=[ListSink("null")],
                dead_letter=ListSink("null"))
    d2._setup()
    assert sorted(d2.pipeline.keys) == ["a", "b", "c"]
    assert d2.pipeline.keys["c"].count == 30 and store.load("c")[1]["count"] == 30
    d2.close()


def keys_checkpointed_one_after_another(tmp_path, keys):
    """Each key checkpointed after 30 records of partition p0, the later ones written later."""
    import os

    store = CheckpointStore(tmp_path / "state")
    p = Pipeline(MeanShiftFactory(), store=store)
    for i, k in enumerate(keys):
        p.process([Record(k, float(t), np.array([v]), ("p0", 100 * i + t)) for t, v in enumerate(step_series(30, 100))])
        p.checkpoint()
        os.utime(store.path(k), ns=(10**18 + i * 10**9, 10**18 + i * 10**9))
    return store


def test_a_start_restores_no_more_keys_than_max_keys_the_most_recently_checkpointed_first(tmp_path):
    # every checkpointed key was loaded at start whatever max_keys said (359 keys and 600 MB more
    # with max_keys = 20), only for the first batches to evict most of them again
    keys = ["k0", "k1", "k2", "k3", "k4"]
    keys_checkpointed_one_after_another(tmp_path, keys)
    src = ListSource([Record("k0", 30.0, np.array([0.0]), ("p0", 500))])
    src.static_partitions = {"p0"}
    cfg = parse_config({"source": {"type": "stdin", "max_poll_records": 10},
                        "pipeline": {"max_keys": 2},
                        "checkpoint": {"dir": str(tmp_path / "state")}, "metrics": {"enabled": False}})
    factory = MeanShiftFactory()
    d = Daemon(cfg, factory=factory, source=src, sinks=[ListSink("null")], dead_letter=ListSink("null"))
    d._setup()
    assert sorted(d.pipeline.keys) == ["k3", "k4"] and factory.restored == 2
    d.step()  # a key left on disk comes back on its first record, its state intact
    assert d.pipeline.keys["k0"].count == 31 and factory.created == 0
    d.close()


def test_an_assignment_restores_only_into_the_room_max_keys_leaves(tmp_path):
    keys_checkpointed_one_after_another(tmp_path, ["k0", "k1", "k2"])
    src = ListSource([])
    src.on_revoke = src.on_assign = None
    cfg = parse_config({"source": {"type": "stdin"}, "pipeline": {"max_keys": 3},
                        "checkpoint": {"dir": str(tmp_path / "state")}, "metrics": {"enabled": False}})
    d = Daemon(cfg, factory=MeanShiftFactory(), source=src, sinks=[ListSink("null")], dead_letter=ListSink("null"))
    d._setup()
    d.pipeline.process([Record(k, 0.0, np.array([0.0]), ("p9", i)) for i, k in enumerate(["x", "y"])])
    src.on_assign({"p0"})
    assert sorted(d.pipeline.keys) == ["k2", "x", "y"]
    d.close()


def files_opened(monkeypatch):
    """The files numpy opens from now on (every checkpoint read goes through ``np.load``)."""
    opened = []
    load = np.load

    def counting(file, *args, **kwargs):
        opened.append(Path(file))
        return load(file, *args, **kwargs)

    monkeypatch.setattr(np, "load", counting)
    return opened


def test_a_restore_opens_only_the_checkpoints_of_the_keys_it_restores(tmp_path, monkeypatch):
    # the directory keeps one file per key ever checkpointed, and every start and assignment read
    # all of them (minutes after months of churn) to restore at most `limit` keys
    keys = [f"k{i}" for i in range(40)]
    store = keys_checkpointed_one_after_another(tmp_path, keys)
    opened = files_opened(monkeypatch)
    p = Pipeline(MeanShiftFactory(), store=store)
    assert p.restore_partitions({"p0"}, limit=3) == 3
    assert list(p.keys) == ["k39", "k38", "k37"]
    assert set(opened) == {store.path(k) for k in ("k39", "k38", "k37")}


def test_a_start_opens_no_more_checkpoints_than_the_max_keys_it_restores(tmp_path, monkeypatch):
    keys = [f"k{i}" for i in range(30)]
    store = keys_checkpointed_one_after_another(tmp_path, keys)
    src = ListSource([])
    src.static_partitions = {"p0"}
    cfg = parse_config({"source": {"type": "stdin"}, "pipeline": {"max_keys": 2},
                        "checkpoint": {"dir": str(tmp_path / "state")}, "metrics": {"enabled": False}})
    opened = files_opened(monkeypatch)
    d = Daemon(cfg, factory=MeanShiftFactory(), source=src, sinks=[ListSink("null")], dead_letter=ListSink("null"))
    d._setup()
    assert sorted(d.pipeline.keys) == ["k28", "k29"]
    assert {f for f in opened if f.name.endswith(".ckpt.npz")} == {store.path("k28"), store.path("k29")}
    d.close()


def test_a_damaged_checkpoint_is_skipped_by_a_restore_without_counting_and_reported_when_its_key_is_seen(
        tmp_path, monkeypatch):
    keys = [f"k{i}" for i in range(10)]
    store = keys_checkpointed_one_after_another(tmp_path, keys)
    newest = store.path("k9")
    written = newest.stat()
    newest.write_text("hello world\n")
    os.utime(newest, ns=(written.st_atime_ns, written.st_mtime_ns))  # still the most recent
    opened = files_opened(monkeypatch)
    p = Pipeline(MeanShiftFactory(), store=store)
    assert p.restore_partitions({"p0"}, limit=2) == 2
    assert list(p.keys) == ["k8", "k7"]
    assert set(opened) == {store.path(k) for k in ("k9", "k8", "k7")}
    _, bad = p.process([Record("k9", 30.0, np.array([0.0]), ("p0", 5000))])
    assert [(b.reason, b.key) for b in bad] == [("processing_error", "k9")]
    assert "not an .npz archive" in bad[0].detail and str(newest) in bad[0].detail


def test_checkpoints_of_one_modification_time_are_restored_in_the_directory_order(tmp_path):
    keys = [f"k{i}" for i in range(12)]
    store = keys_checkpointed_one_after_another(tmp_path, keys)
    for k in keys:
        os.utime(store.path(k), ns=(10**18, 10**18))
    listed = list((tmp_path / "state").glob("*.ckpt.npz"))
    key_of = {store.path(k): k for k in keys}
    assert [path for _, _, path in store.scan()] == listed
    p = Pipeline(MeanShiftFactory(), store=store)
    assert p.restore_partitions({"p0"}, limit=5) == 5
    assert list(p.keys) == [key_of[path] for path in listed[:5]]


class LaggingSource(ListSource):
    """Three batches, then idle polls: the lag it reports is what is left of its records."""

    def __init__(self, records, idle_polls):
        super().__init__(records)
        self.idle_polls = idle_polls

    def poll(self, max_records, timeout_s):
        out = self.records[self.i:self.i + min(self.batch, max_records)]
        self.i += len(out)
        if not out:
            self.idle_polls -= 1
        self.exhausted = self.idle_polls <= 0
        return out

    def lag(self):
        return {"t:0": len(self.records) - self.i}


def test_the_lag_metric_is_read_by_the_clock_also_while_the_daemon_is_caught_up(tmp_path, monkeypatch):
    # it was read every 20 batches; batches stop counting once caught up, so a lag read on the way
    # stood for ever (1,000 on a daemon with nothing left to read)
    import ratiowatch.stream.engine.daemon as daemon_module
    from ratiowatch.connectors.metrics import Metrics

    monkeypatch.setattr(daemon_module, "LAG_EVERY_S", 0.0)
    metrics = Metrics()
    src = LaggingSource(records(15), idle_polls=3)
    d = Daemon(config(tmp_path), factory=MeanShiftFactory(), source=src, sinks=[ListSink("null")],
               dead_letter=ListSink("null"), metrics=metrics)
    assert d.run() == 0
    assert 'ratiowatch_consumer_lag{partition="t:0"} 0.0' in metrics.exposition().decode()


def test_a_revoked_partition_leaves_the_lag_metric(tmp_path):
    # its last lag stood on the dashboard for as long as the daemon ran: the new owner reports it
    from ratiowatch.connectors.metrics import Metrics

    checkpointed_store(tmp_path)
    src = ListSource([])
    src.on_revoke = src.on_assign = None
    metrics = Metrics()
    d = Daemon(config(tmp_path), factory=MeanShiftFactory(), source=src, sinks=[ListSink("null")],
               dead_letter=ListSink("null"), metrics=metrics)
    d._setup()
    src.on_assign({"p0", "p1"})
    metrics.set_lag({"p0": 12, "p1": 3})
    src.on_revoke({"p1"})
    text = metrics.exposition().decode()
    assert 'ratiowatch_consumer_lag{partition="p0"} 12.0' in text and 'partition="p1"' not in text
    assert sorted(d.pipeline.keys) == ["a", "b"]
    d.close()

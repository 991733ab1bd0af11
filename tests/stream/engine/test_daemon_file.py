"""Daemon over the file source: bad input to the dead-letter sink, alerts, checkpoints, restart."""

from __future__ import annotations

import io
import json
import threading
import time

from ratiowatch.connectors.metrics import Metrics
from ratiowatch.connectors.sinks import JsonlFileSink
from ratiowatch.stream.engine.checkpoint import CheckpointStore
from ratiowatch.stream.engine.config import parse_config
from ratiowatch.stream.engine.daemon import Daemon
from ratiowatch.connectors.records import Alert
from toy_detector import MeanShiftFactory, step_series


def write_jsonl(path, rows):
    with open(path, "w") as fh:
        for r in rows:
            fh.write((r if isinstance(r, str) else json.dumps(r)) + "\n")


def make_cfg(tmp_path, data, **over):
    doc = {
        "source": {"type": "file", "path": str(data), "max_poll_records": 50},
        "fields": {"key": "host", "timestamp": "ts", "values": ["v"]},
        "pipeline": {"max_record_bytes": 200},
        "checkpoint": {"dir": str(tmp_path / "state"), "every_records": 40},
        "sinks": [{"type": "jsonl", "path": str(tmp_path / "alerts.jsonl")}],
        "dead_letter": {"type": "file", "path": str(tmp_path / "dead.jsonl")},
        "metrics": {"enabled": False},
    }
    for section, values in over.items():
        doc.setdefault(section, {}).update(values)
    return parse_config(doc)


def read_jsonl(path):
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def good_rows(n=100, change=60, keys=("a", "b")):
    rows = []
    for t, v in enumerate(step_series(n, change)):
        for k in keys:
            rows.append({"host": k, "ts": t, "v": v})
    return rows


def test_every_kind_of_bad_record_is_dead_lettered_and_the_stream_goes_on(tmp_path):
    rows = good_rows()
    bad = {
        3: '{"host": "a", "ts": 1, "v": ',                      # malformed JSON
        10: {"host": "a", "v": 1.0},                              # missing timestamp
        20: {"ts": 5, "v": 1.0},                                  # missing key
        30: '{"host": "a", "ts": 12, "v": NaN}',                  # NaN
        40: {"host": "a", "ts": 19, "v": [1.0, 2.0]},             # wrong dimension
        50: {"host": "b", "ts": 0, "v": 0.0},                     # timestamp going backwards
        60: {"host": "a", "ts": 29, "v": 1.0, "pad": "x" * 300},  # oversized
        70: {"host": "a", "ts": 34.5, "v": 1e308},                # finite, but no reading: an error code
    }
    for pos in sorted(bad, reverse=True):
        rows.insert(pos, bad[pos])
    data = tmp_path / "in.jsonl"
    write_jsonl(data, rows)
    metrics = Metrics(score_keys=["a"])
    d = Daemon(make_cfg(tmp_path, data), factory=MeanShiftFactory(), metrics=metrics)
    assert d.run() == 0
    text = metrics.exposition().decode()
    for line in ["ratiowatch_records_total 200.0", 'ratiowatch_alerts_total{kind="changepoint"} 2.0',
                 'ratiowatch_bad_records_total{reason="missing_field"} 2.0', "ratiowatch_active_keys 2.0",
                 'ratiowatch_bad_records_total{reason="oversized"} 1.0', 'ratiowatch_latest_score{key="a"} 0.0']:
        assert line in text, line
    dead = read_jsonl(tmp_path / "dead.jsonl")
    assert sorted(x["reason"] for x in dead) == sorted(
        ["malformed_json", "missing_field", "missing_field", "non_finite", "wrong_dimension",
         "timestamp_backwards", "oversized", "out_of_range"])
    assert all(x["detail"] and x["ref"][0] == "file:in.jsonl" for x in dead)
    alerts = [Alert(**a) for a in read_jsonl(tmp_path / "alerts.jsonl")]
    assert sorted((a.key, a.change_index) for a in alerts) == [("a", 60), ("b", 60)]
    assert d.stats["records"] == 200 and d.stats["bad"] == 8
    assert d.pipeline.keys["a"].count == 100


def test_restart_resumes_after_committed_offset_without_reprocessing(tmp_path):
    data = tmp_path / "in.jsonl"
    rows = good_rows(100, 60)
    write_jsonl(data, rows[:90])
    assert Daemon(make_cfg(tmp_path, data), factory=MeanShiftFactory()).run() == 0
    assert read_jsonl(tmp_path / "alerts.jsonl") == []
    write_jsonl(data, rows)  # more data arrived (same first 90 lines)
    factory = MeanShiftFactory()
    d2 = Daemon(make_cfg(tmp_path, data), factory=factory)
    assert d2.run() == 0
    assert factory.restored == 2 and factory.created == 0
    assert d2.stats["records"] == 110  # only the new lines were read
    alerts = read_jsonl(tmp_path / "alerts.jsonl")
    assert sorted((a["key"], a["change_index"]) for a in alerts) == [("a", 60), ("b", 60)]


def test_csv_follow_mode_and_sigterm_style_stop_flushes_and_checkpoints(tmp_path):
    data = tmp_path / "in.csv"
    data.write_text("host,ts,v\n")
    cfg = make_cfg(tmp_path, data, source={"follow": True, "poll_interval_s": 0.01},
                   checkpoint={"every_records": 100000, "every_s": 1000.0})
    d = Daemon(cfg, factory=MeanShiftFactory())
    th = threading.Thread(target=d.run)
    th.start()
    with open(data, "a") as fh:
        for t, v in enumerate(step_series(40, 20)):
            fh.write(f"a,{t},{v}\n")
            if t == 10:
                fh.write("a,11,")  # a line being written: must wait for its end
                fh.flush()
                time.sleep(0.05)
                fh.write("0.0\n")
        fh.flush()
    deadline = time.monotonic() + 10
    while d.stats["records"] < 41 and time.monotonic() < deadline:
        time.sleep(0.02)
    d.stop()  # what the SIGTERM handler does
    th.join(10)
    assert not th.is_alive()
    assert d.stats["records"] == 41 and d.stats["bad"] == 0
    alerts = read_jsonl(tmp_path / "alerts.jsonl")
    assert [(a["key"], a["change_index"]) for a in alerts] == [("a", 21)]  # the extra row shifts it by one
    store_meta = d.store.load("a")[1]
    assert store_meta["count"] == 41
    assert d.store.load_json("offsets-in.csv.json") == {"file:in.csv": 42}  # header + 41 rows


def test_jsonl_sink_cuts_a_torn_last_line_on_open(tmp_path):
    path = tmp_path / "alerts.jsonl"
    a = Alert.from_alarm(key="k", detector="d", change_index=1, alarm_index=2, timestamp=0, score=1, threshold=1)
    path.write_text(a.to_json() + "\n" + a.to_json()[:20])
    sink = JsonlFileSink(path)
    sink.deliver([a])
    sink.close()
    lines = path.read_text().splitlines()
    assert [Alert.from_json(x) for x in lines] == [a, a]


def test_idle_keys_are_checkpointed_and_evicted_then_restored(tmp_path):
    data = tmp_path / "in.jsonl"
    write_jsonl(data, [{"host": "a", "ts": t, "v": 0.0} for t in range(30)])
    cfg = make_cfg(tmp_path, data, source={"follow": True, "poll_interval_s": 0.01},
                   pipeline={"idle_evict_s": 0.3}, checkpoint={"every_records": 100000, "every_s": 1000.0})
    factory = MeanShiftFactory()
    d = Daemon(cfg, factory=factory)
    th = threading.Thread(target=d.run)
    th.start()
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not (d.stats["records"] == 30 and d.pipeline and not d.pipeline.keys):
            time.sleep(0.02)
        assert d.pipeline.keys == {} and d.store.load("a")[1]["count"] == 30  # evicted after a checkpoint
        with open(data, "a") as fh:  # the key comes back with its change
            for t in range(30, 40):
                fh.write(json.dumps({"host": "a", "ts": t, "v": 10.0}) + "\n")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and d.stats["records"] < 40:
            time.sleep(0.02)
    finally:
        d.stop()
        th.join(10)
    assert factory.created == 1 and factory.restored == 1
    alerts = read_jsonl(tmp_path / "alerts.jsonl")
    assert [(a["key"], a["change_index"]) for a in alerts] == [("a", 30)]


def test_a_poison_message_is_dead_lettered_and_the_run_goes_on_and_commits(tmp_path):
    """~3,000 nested lists under max_record_bytes once raised RecursionError out of the daemon,
    at every restart again (nothing was committed)."""
    data = tmp_path / "in.jsonl"
    deep = '{"host": "a", "ts": 50, "v": ' + "[" * 3000 + "]" * 3000 + "}"
    rows = good_rows(100, 60)
    write_jsonl(data, rows[:100] + [deep] + rows[100:])
    cfg = make_cfg(tmp_path, data, pipeline={"max_record_bytes": 10000})
    d = Daemon(cfg, factory=MeanShiftFactory())
    assert d.run() == 0
    assert d.stats["records"] == len(rows)
    dead = read_jsonl(tmp_path / "dead.jsonl")
    assert [(x["reason"], x["ref"]) for x in dead] == [("nested_too_deep", ["file:in.jsonl", 100])]
    assert d.store.load_json("offsets-in.jsonl.json") == {"file:in.jsonl": len(rows) + 1}
    alerts = read_jsonl(tmp_path / "alerts.jsonl")
    assert sorted((a["key"], a["change_index"]) for a in alerts) == [("a", 60), ("b", 60)]


def keys_joining_over_time(n=120, change=60):
    """Rows of six keys that join over time (2, then up to 6 at once); even keys step up at ``change``."""
    keys = [f"k{i}" for i in range(6)]
    rows = []
    for t, v in enumerate(step_series(n, change)):
        for i, k in enumerate(keys[: 2 + t // 20]):
            rows.append({"host": k, "ts": t, "v": v if i % 2 == 0 else 0.0})
    return keys, rows


def run_watching_keys(cfg, factory):
    """Run a daemon; the number of keys in memory before each batch (after the previous loop)."""
    d = Daemon(cfg, factory=factory)
    seen, step = [], d.step

    def watched_step():
        if d.pipeline is not None:
            seen.append(len(d.pipeline.keys))
        return step()

    d.step = watched_step
    assert d.run() == 0
    return d, seen


def test_max_keys_bounds_the_keys_in_memory_between_batches(tmp_path):
    """Eviction waits for nothing, so it is skipped while a checkpoint is being written or a sink
    holds alerts; here neither happens (no change, no periodic checkpoint), and the bound holds."""
    keys, rows = keys_joining_over_time(change=10_000)  # no change: no alert ever waits in a sink
    data = tmp_path / "in.jsonl"
    write_jsonl(data, rows)
    cfg = make_cfg(tmp_path, data, pipeline={"max_keys": 2}, checkpoint={"every_records": 10**6, "every_s": 1e6})
    d, seen = run_watching_keys(cfg, MeanShiftFactory())
    assert len(seen) > 5 and max(seen) <= 2, seen
    assert d.stats["evicted_over_max_keys"] > 0


def test_the_checkpoint_metric_counts_the_checkpoints_written_at_eviction(tmp_path, monkeypatch):
    # it counted only the periodic and final checkpoints: with max_keys, most were not seen
    from ratiowatch.stream.engine.checkpoint import CheckpointStore

    written = []
    write_many = CheckpointStore.write_many
    monkeypatch.setattr(CheckpointStore, "write_many",
                        lambda self, payloads: written.append(write_many(self, payloads)) or written[-1])
    keys, rows = keys_joining_over_time(change=10_000)
    data = tmp_path / "in.jsonl"
    write_jsonl(data, rows)
    metrics = Metrics()
    cfg = make_cfg(tmp_path, data, pipeline={"max_keys": 2}, checkpoint={"every_records": 10**6, "every_s": 1e6})
    d = Daemon(cfg, factory=MeanShiftFactory(), metrics=metrics)
    assert d.run() == 0
    assert d.stats["evicted_over_max_keys"] > 0 and sum(written) > len(keys)
    assert f"ratiowatch_checkpoints_total {float(sum(written))}" in metrics.exposition().decode()


def test_keys_evicted_over_max_keys_come_back_and_alert_as_in_an_unbounded_run(tmp_path):
    """Beyond the bound the least recently seen keys are checkpointed and leave memory; they come
    back from their checkpoints, so every key's alerts and record count are those of a run without
    the bound (the bound waits while a sink still holds alerts)."""
    keys, rows = keys_joining_over_time()
    data = tmp_path / "in.jsonl"
    write_jsonl(data, rows)
    free = tmp_path / "free"
    free.mkdir()
    assert Daemon(make_cfg(free, data), factory=MeanShiftFactory()).run() == 0
    bounded = tmp_path / "bounded"
    bounded.mkdir()
    factory = MeanShiftFactory()
    cfg = make_cfg(bounded, data, pipeline={"max_keys": 2}, checkpoint={"every_records": 10**6, "every_s": 1e6})
    d, _ = run_watching_keys(cfg, factory)
    assert d.stats["evicted_over_max_keys"] > 0 and factory.restored > 0
    got = sorted((a["key"], a["change_index"]) for a in read_jsonl(bounded / "alerts.jsonl"))
    want = sorted((a["key"], a["change_index"]) for a in read_jsonl(free / "alerts.jsonl"))
    assert got == want and ("k0", 60) in got
    from ratiowatch.stream.engine.checkpoint import CheckpointStore

    store = CheckpointStore(bounded / "state")
    assert {k: store.load(k)[1]["count"] for k in keys} == {k: sum(r["host"] == k for r in rows) for k in keys}


def test_a_restart_reads_a_file_that_replaced_the_committed_one_from_its_start(tmp_path):
    """The committed line offset belongs to the file it was read from: applied to the file that took
    its name, it skipped that many of its lines without a word."""
    data = tmp_path / "in.jsonl"
    rows = good_rows(100, 60)
    write_jsonl(data, rows[:90])
    assert Daemon(make_cfg(tmp_path, data), factory=MeanShiftFactory()).run() == 0
    later = [{**r, "ts": r["ts"] + 1000} for r in rows[:60]]  # a new file, of later records
    new = tmp_path / "in.jsonl.new"
    write_jsonl(new, later)
    new.replace(data)
    d2 = Daemon(make_cfg(tmp_path, data), factory=MeanShiftFactory())
    assert d2.run() == 0
    assert d2.stats["records"] == 60 and d2.stats["bad"] == 0  # none of its lines skipped
    assert d2.store.load_json("offsets-in.jsonl.json") == {"file:in.jsonl": 150}  # offsets only grow
    d3 = Daemon(make_cfg(tmp_path, data), factory=MeanShiftFactory())
    assert d3.run() == 0 and d3.stats["records"] == 0  # the same file again: nothing read twice


def test_file_lines_that_are_not_utf8_are_dead_lettered_as_not_utf8_not_folded_into_one_key(tmp_path):
    data = tmp_path / "in.jsonl"
    data.write_bytes(b'{"host": "h\xffx", "ts": 1, "v": 1}\n{"host": "h\xfex", "ts": 1, "v": 2}\n'
                     b'{"host": "a", "ts": 1, "v": 3.5\xff}\n{"host": "a", "ts": 2, "v": 4}\n')
    d = Daemon(make_cfg(tmp_path, data), factory=MeanShiftFactory())
    assert d.run() == 0
    dead = read_jsonl(tmp_path / "dead.jsonl")
    assert [(x["reason"], x["ref"][1]) for x in dead] == [("not_utf8", 0), ("not_utf8", 1), ("not_utf8", 2)]
    assert list(d.pipeline.keys) == ["a"] and d.stats["records"] == 1


def test_a_replay_after_a_far_future_timestamp_repeats_only_that_dead_letter(tmp_path):
    """A crash between a checkpoint's write and its commit makes the next start read the records
    again; the one with a far-future timestamp among them is dead-lettered again and must not end
    the replay check (the 69 records after it were all dead-lettered as timestamp_backwards)."""
    data = tmp_path / "in.jsonl"
    rows = good_rows(100, 60, keys=("a",))
    rows[30] = {"host": "a", "ts": 1e12, "v": 0.0}
    write_jsonl(data, rows)
    cfg = make_cfg(tmp_path, data, checkpoint={"every_records": 1000})
    assert Daemon(cfg, factory=MeanShiftFactory()).run() == 0
    dead = read_jsonl(tmp_path / "dead.jsonl")
    alerts = read_jsonl(tmp_path / "alerts.jsonl")
    assert [(x["reason"], x["ref"][1]) for x in dead] == [("timestamp_too_far_ahead", 30)] and len(alerts) == 1
    store = CheckpointStore(tmp_path / "state")
    store.save_json("offsets-in.jsonl.json", {"file:in.jsonl": 10})  # the commit that never happened
    d2 = Daemon(cfg, factory=MeanShiftFactory())
    assert d2.run() == 0
    assert d2.pipeline.skipped_replays == 89 and d2.stats["records"] == 0 and d2.stats["bad"] == 1
    again = read_jsonl(tmp_path / "dead.jsonl")
    assert [(x["reason"], x["ref"][1]) for x in again] == [("timestamp_too_far_ahead", 30)] * 2
    assert read_jsonl(tmp_path / "alerts.jsonl") == alerts


def test_a_first_record_in_milliseconds_costs_the_key_only_the_records_that_confirm_the_drop_back(tmp_path):
    """A key's first record sets its clock unchecked. One stamped in milliseconds among seconds made
    every later record of the key 'timestamp_backwards', and kept doing so after a restart (the clock
    is checkpointed); now the drop back is confirmed like a jump ahead and the key goes on."""
    t0 = 1_700_000_000
    rows = [{"host": "a", "ts": t0 * 1000, "v": 0.0}]
    rows += [{"host": "a", "ts": t0 + t, "v": v} for t, v in enumerate(step_series(300, 150))]
    data = tmp_path / "in.jsonl"
    write_jsonl(data, rows)
    cfg = make_cfg(tmp_path, data, pipeline={"timestamp_jump_confirm": 2})
    d = Daemon(cfg, factory=MeanShiftFactory())
    assert d.run() == 0
    dead = read_jsonl(tmp_path / "dead.jsonl")
    assert [(x["reason"], x["ref"][1]) for x in dead] == [("timestamp_backwards", 1)]
    assert d.pipeline.keys["a"].count == 300 and d.pipeline.keys["a"].last_ts == t0 + 299
    alerts = read_jsonl(tmp_path / "alerts.jsonl")
    assert len(alerts) == 1 and alerts[0]["timestamp"] >= t0 + 150

    # the same records in two runs: the second starts from the first's checkpoint and gives the same
    again = tmp_path / "again"
    again.mkdir()
    write_jsonl(again / "in.jsonl", rows[:100])
    cfg2 = make_cfg(again, again / "in.jsonl", pipeline={"timestamp_jump_confirm": 2})
    assert Daemon(cfg2, factory=MeanShiftFactory()).run() == 0
    write_jsonl(again / "in.jsonl", rows)
    factory = MeanShiftFactory()
    d2 = Daemon(cfg2, factory=factory)
    assert d2.run() == 0
    assert factory.restored == 1 and d2.stats["bad"] == 0
    assert read_jsonl(again / "dead.jsonl") == dead
    assert read_jsonl(again / "alerts.jsonl") == alerts


def test_a_second_stdin_run_with_arrival_order_goes_on_from_the_first(tmp_path, monkeypatch):
    """stdin's line numbers started at 0 again, and the restored key took every record of the second
    run for a replay of the first: all of them were dropped without a word."""
    def run(values):
        text = "".join(json.dumps({"host": "a", "v": v}) + "\n" for v in values)
        monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(text.encode())))
        cfg = parse_config({"source": {"type": "stdin", "max_poll_records": 30},
                            "fields": {"key": "host", "timestamp": "", "values": ["v"]},
                            "checkpoint": {"dir": str(tmp_path / "state"), "every_records": 40},
                            "sinks": [{"type": "jsonl", "path": str(tmp_path / "alerts.jsonl")}],
                            "dead_letter": {"type": "file", "path": str(tmp_path / "dead.jsonl")},
                            "metrics": {"enabled": False}})
        d = Daemon(cfg, factory=MeanShiftFactory())
        assert d.run() == 0
        return d

    series = step_series(200, 150)
    first = run(series[:100])
    second = run(series[100:])
    assert first.stats["records"] == second.stats["records"] == 100
    assert second.pipeline.skipped_replays == 0 and second.stats["bad"] == 0
    assert read_jsonl(tmp_path / "dead.jsonl") == []
    alerts = read_jsonl(tmp_path / "alerts.jsonl")
    assert [(a["key"], a["change_index"], a["timestamp"]) for a in alerts] == [("a", 150, 154.0)]


def test_a_file_line_of_megabytes_is_one_oversized_dead_letter_and_the_run_goes_on(tmp_path):
    data = tmp_path / "in.jsonl"
    rows = good_rows(100, 60)
    huge = json.dumps({"host": "a", "ts": 50, "v": 1.0, "pad": "x" * (4 << 20)})
    write_jsonl(data, rows[:100] + [huge] + rows[100:])
    d = Daemon(make_cfg(tmp_path, data), factory=MeanShiftFactory())
    assert d.run() == 0
    assert d.stats["records"] == len(rows)
    dead = read_jsonl(tmp_path / "dead.jsonl")
    assert [(x["reason"], x["ref"], x["detail"]) for x in dead] == [
        ("oversized", ["file:in.jsonl", 100], f"line has {len(huge)} bytes, more than max_record_bytes=200")]
    assert dead[0]["raw"].startswith('{"host": "a", "ts": 50') and len(dead[0]["raw"]) < 300
    alerts = read_jsonl(tmp_path / "alerts.jsonl")
    assert sorted((a["key"], a["change_index"]) for a in alerts) == [("a", 60), ("b", 60)]

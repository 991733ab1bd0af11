"""Daemon with a real broker (manual partition assignment): bad records to a dead-letter topic,
alerts to an alerts topic, offsets committed only after delivery, broker outages survived."""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from kafka import KafkaConsumer, TopicPartition

from kafka_util import produce, read_topic
from ratiowatch.stream.engine.config import parse_config
from ratiowatch.stream.engine.daemon import Daemon
from toy_detector import MeanShiftFactory, step_series

pytestmark = pytest.mark.broker


def cfg_for(bootstrap, tmp_path, topic, group, partitions=(0,), **source):
    manual = {"partitions": list(partitions)} if partitions is not None else {}
    return parse_config({
        "source": {"type": "kafka", "bootstrap_servers": [bootstrap], "topics": [topic], "group_id": group,
                   "max_poll_records": 100, **manual, **source},
        "fields": {"key": "key", "timestamp": "ts", "values": ["v"]},
        "pipeline": {"max_record_bytes": 300},
        "checkpoint": {"dir": str(tmp_path / "state"), "every_records": 50, "every_s": 0.5},
        "sinks": [{"type": "kafka", "topic": f"{topic}-alerts"}],
        "dead_letter": {"type": "kafka", "topic": f"{topic}-dlq"},
        "metrics": {"enabled": False},
    })


def run_in_thread(d: Daemon) -> threading.Thread:
    th = threading.Thread(target=d.run, daemon=True)
    th.start()
    return th


def wait_for(cond, timeout_s=30.0, step=0.05):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(step)
    return False


def committed(bootstrap, topic, group):
    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    try:
        return c.committed(TopicPartition(topic, 0))
    finally:
        c.close()


def rows_for(keys, n, change, t0=0):
    out = []
    for t, v in enumerate(step_series(n, change)):
        for k in keys:
            out.append({"key": k, "ts": t0 + t, "v": v})
    return out


def test_kafka_bad_records_go_to_dead_letter_topic_and_alerts_to_alerts_topic(kafka_broker, tmp_path):
    topic = f"in-{uuid.uuid4().hex[:8]}"
    for t in (topic, f"{topic}-alerts", f"{topic}-dlq"):
        kafka_broker.create_topic(t)
    rows = rows_for(["a", "b"], 80, 40)
    bad = ['{"key": "a", "ts": 3, "v": ', {"key": "a", "v": 1.0}, '{"key": "a", "ts": 5, "v": NaN}',
           {"key": "a", "ts": 6, "v": [1.0, 2.0]}, {"key": "b", "ts": 0, "v": 0.0},
           {"key": "a", "ts": 7, "v": 1.0, "pad": "x" * 400}]
    for i, b in enumerate(bad):
        rows.insert(15 + 3 * i, b)
    produce(kafka_broker.bootstrap, topic, rows)
    d = Daemon(cfg_for(kafka_broker.bootstrap, tmp_path, topic, "g-bad"), factory=MeanShiftFactory())
    th = run_in_thread(d)
    assert wait_for(lambda: d.stats["records"] + d.stats["bad"] >= len(rows))
    d.stop()
    th.join(30)
    assert not th.is_alive()
    dlq = read_topic(kafka_broker.bootstrap, f"{topic}-dlq", expect=6)
    assert sorted(x["reason"] for x in dlq) == sorted(["malformed_json", "missing_field", "non_finite",
                                                       "wrong_dimension", "timestamp_backwards", "oversized"])
    alerts = read_topic(kafka_broker.bootstrap, f"{topic}-alerts", expect=2)
    assert sorted((a["key"], a["change_index"]) for a in alerts) == [("a", 40), ("b", 40)]
    assert committed(kafka_broker.bootstrap, topic, "g-bad") == len(rows)


def test_broker_paused_longer_than_session_timeout_loses_no_record(broker_factory, tmp_path):
    broker = broker_factory()
    topic = "pause"
    for t in (topic, f"{topic}-alerts", f"{topic}-dlq"):
        broker.create_topic(t)
    rows = rows_for(["a", "b"], 100, 60)
    produce(broker.bootstrap, topic, rows[:80])
    # group membership (not manual assignment): the session timeout matters only to a group member
    factory = MeanShiftFactory()
    d = Daemon(cfg_for(broker.bootstrap, tmp_path, topic, "g-pause", partitions=None, session_timeout_ms=2000,
                       heartbeat_interval_ms=500, max_poll_interval_ms=5000), factory=factory)
    th = run_in_thread(d)
    assert wait_for(lambda: d.stats["records"] >= 80, timeout_s=90)
    broker.pause()
    time.sleep(4.0)  # > session timeout
    broker.resume()
    produce(broker.bootstrap, topic, rows[80:])
    assert wait_for(lambda: d.stats["records"] >= len(rows), timeout_s=60)
    d.stop()
    th.join(30)
    assert d.stats["records"] == len(rows) and d.stats["bad"] == 0
    assert factory.created == 2  # each key's detector was created once; any rebalance restored it
    alerts = read_topic(broker.bootstrap, f"{topic}-alerts", expect=2)
    assert sorted({(a["key"], a["change_index"]) for a in alerts}) == [("a", 60), ("b", 60)]
    assert committed(broker.bootstrap, topic, "g-pause") == len(rows)


def test_broker_killed_and_restarted_daemon_reconnects_by_itself(broker_factory, tmp_path):
    broker = broker_factory()
    topic = "restart"
    for t in (topic, f"{topic}-alerts", f"{topic}-dlq"):
        broker.create_topic(t)
    first = rows_for(["a"], 50, 1000)
    produce(broker.bootstrap, topic, first)
    d = Daemon(cfg_for(broker.bootstrap, tmp_path, topic, "g-restart"), factory=MeanShiftFactory())
    # the loop is driven from here (run_for) rather than a thread, so that it does not poll while the
    # replacement broker holds the topic but not yet its records: a fetch at position 50 of an empty
    # log is out of range, and the consumer would (correctly) restart from the earliest offset
    assert d.run_for(50, timeout_s=60) == 50
    port = broker.port
    broker.kill()
    # the daemon keeps looping on a dead broker: no exception, nothing read
    assert d.run_for(1, timeout_s=2.0) == 0
    broker2 = broker_factory(port=port)  # in-memory storage: a fresh, empty broker on the same port
    for t in (topic, f"{topic}-alerts", f"{topic}-dlq"):
        broker2.create_topic(t)
    # the log is re-created as it was, and the stream goes on (later timestamps), changing at t = 80;
    # the daemon keeps its position (50) and must not need a restart to pick the new records up
    produce(broker2.bootstrap, topic, first + rows_for(["a"], 60, 30, t0=50))
    assert d.run_for(60, timeout_s=90) == 60, d.stats
    d.checkpoint_and_commit()
    d.close()
    alerts = read_topic(broker2.bootstrap, f"{topic}-alerts", expect=1, timeout_s=30)
    assert d.stats["records"] == 110
    assert [(a["key"], a["change_index"]) for a in alerts] == [("a", 80)]


def test_a_key_that_is_not_valid_unicode_is_dead_lettered_to_kafka_and_the_daemon_goes_on(kafka_broker, tmp_path):
    """``{"key": "\\ud800", ...}`` is valid JSON; its key could not be encoded as UTF-8, which stopped
    the Kafka dead-letter sink's worker: the daemon exited at that offset on every restart."""
    topic = f"in-{uuid.uuid4().hex[:8]}"
    for t in (topic, f"{topic}-alerts", f"{topic}-dlq"):
        kafka_broker.create_topic(t)
    rows = rows_for(["a"], 80, 40)
    rows.insert(30, b'{"key": "\\ud800", "ts": 1, "v": 1}')
    rows.insert(31, b'{"key": NaN, "ts": 1, "v": 1}')
    produce(kafka_broker.bootstrap, topic, rows)
    d = Daemon(cfg_for(kafka_broker.bootstrap, tmp_path, topic, "g-key"), factory=MeanShiftFactory())
    code = []
    th = threading.Thread(target=lambda: code.append(d.run()), daemon=True)
    th.start()
    assert wait_for(lambda: d.stats["records"] + d.stats["bad"] >= len(rows))
    d.stop()
    th.join(30)
    assert code == [0]
    dlq = read_topic(kafka_broker.bootstrap, f"{topic}-dlq", expect=2)
    assert [(x["reason"], x["ref"][1]) for x in dlq] == [("bad_key", 30), ("bad_key", 31)]
    alerts = read_topic(kafka_broker.bootstrap, f"{topic}-alerts", expect=1)
    assert [(a["key"], a["change_index"]) for a in alerts] == [("a", 40)]
    assert committed(kafka_broker.bootstrap, topic, "g-key") == len(rows)

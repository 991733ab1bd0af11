"""A real rebalance: the partitions a daemon gives up are checkpointed and their offsets committed
before they move on (kafka-python 3 refuses a blocking commit inside its rebalance listener)."""

from __future__ import annotations

import threading
import time

import pytest
from kafka import KafkaConsumer, TopicPartition

from kafka_util import produce
from ratiowatch.stream.engine.checkpoint import CheckpointStore
from ratiowatch.stream.engine.config import parse_config
from ratiowatch.stream.engine.daemon import Daemon
from toy_detector import MeanShiftFactory

pytestmark = pytest.mark.broker

PARTS = 4
KEYS = [f"k{i}" for i in range(8)]
N = 50


def cfg(bootstrap, topic, tmp_path, name):
    return parse_config({
        "source": {"type": "kafka", "bootstrap_servers": [bootstrap], "topics": [topic], "group_id": "reb",
                   "session_timeout_ms": 6000, "heartbeat_interval_ms": 500, "max_poll_records": 100},
        # no periodic checkpoint: the only commits are the revocation's
        "checkpoint": {"dir": str(tmp_path / "state"), "every_records": 10**9, "every_s": 10**6},
        "sinks": [{"type": "jsonl", "path": str(tmp_path / f"alerts-{name}.jsonl")}],
        "dead_letter": {"type": "file", "path": str(tmp_path / f"dead-{name}.jsonl")},
        "metrics": {"enabled": False},
    })


def committed(bootstrap, topic):
    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id="reb", enable_auto_commit=False)
    try:
        return [c.committed(TopicPartition(topic, p)) for p in range(PARTS)]
    finally:
        c.close()


def wait_for(cond, timeout_s, what):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def test_revoked_partitions_are_checkpointed_and_committed_during_a_real_rebalance(kafka_broker, tmp_path):
    bs, topic = kafka_broker.bootstrap, "rebalance"
    kafka_broker.create_topic(topic, PARTS)
    rows = [{"key": k, "timestamp": t, "value": 0.0} for t in range(N) for k in KEYS]
    produce(bs, topic, rows, partition_of=lambda k: KEYS.index(k) % PARTS)
    a = Daemon(cfg(bs, topic, tmp_path, "a"), factory=MeanShiftFactory())
    ta = threading.Thread(target=a.run, daemon=True)
    ta.start()
    b = None
    try:
        wait_for(lambda: a.stats["records"] == len(rows), 90, "a to fold every record")
        assert committed(bs, topic) == [None] * PARTS
        b = Daemon(cfg(bs, topic, tmp_path, "b"), factory=MeanShiftFactory())
        tb = threading.Thread(target=b.run, daemon=True)
        tb.start()
        # the rebalance revokes a's partitions: a checkpoints their keys and commits their offsets
        wait_for(lambda: committed(bs, topic) == [N * 2] * PARTS, 90, "the revoked partitions' commit")
        assert a.source.revoke_commits >= 1 and a.source.revoke_commit_failures == 0
        wait_for(lambda: b.source is not None and len(b.source.consumer.assignment()) == PARTS // 2, 60,
                 "b to own half of the partitions")
    finally:
        a.stop()
        if b is not None:
            b.stop()
        ta.join(60)
        if b is not None:
            tb.join(60)
    store = CheckpointStore(tmp_path / "state")
    assert all(store.load(k)[1]["count"] == N for k in KEYS)
    assert b.stats["records"] == 0  # nothing replayed: the commit covered everything a had folded

"""Checkpoints in a Kafka changelog topic: created like the source topic, values are the checkpoint
files' bytes (no pickle), large states split and reassembled, the newest version wins."""

from __future__ import annotations

import numpy as np
import pytest
from kafka import KafkaConsumer, TopicPartition

from ratiowatch.connectors.changelog import ChangelogStore
from ratiowatch.stream.engine.checkpoint import CheckpointStore

pytestmark = pytest.mark.broker


def store(bs, topic, source, parts, **kw):
    return ChangelogStore([bs], topic, source, partition_of=parts.get, timeout_s=20.0, **kw)


def test_changelog_is_created_with_the_source_partition_count_and_round_trips_checkpoints(kafka_broker):
    bs = kafka_broker.bootstrap
    kafka_broker.create_topic("cl-src", 3)
    parts = {"a": "cl-src:0", "b": "cl-src:2", "big": "cl-src:2"}
    s = store(bs, "cl-src-checkpoints", "cl-src", parts, max_message_bytes=2048)
    assert s.partitions == 3
    rng = np.random.default_rng(0)
    big = rng.normal(size=3000)  # 24 kB: split into parts of 2 kB
    items = [("a", {"x": np.arange(3.0), "m": "rulsif"}, {"count": 1, "last_ref": ["cl-src:0", 0], "seq": 1}),
             ("b", {"x": np.arange(5.0)}, {"count": 2, "last_ref": ["cl-src:2", 4], "seq": 1}),
             ("big", {"x": big}, {"count": 3, "last_ref": ["cl-src:2", 9], "seq": 1})]
    assert s.write_many([(k, CheckpointStore.encode(k, st, m), m["seq"]) for k, st, m in items]) == 3
    # a newer version of b, then a stale one written late (a cut-off process): the newest seq wins
    newer = {"count": 5, "last_ref": ["cl-src:2", 7], "seq": 2}
    s.write_many([("b", CheckpointStore.encode("b", {"x": np.arange(6.0)}, newer), 2)])
    s.write_many([("b", CheckpointStore.encode("b", {"x": np.arange(5.0)}, {**newer, "count": 2, "seq": 1}), 1)])
    s.close()

    # each key sits in the changelog partition of its source partition
    c = KafkaConsumer(bootstrap_servers=bs, enable_auto_commit=False)
    tps = [TopicPartition("cl-src-checkpoints", p) for p in range(3)]
    end = c.end_offsets(tps)
    c.close()
    assert end[tps[0]] == 1 and end[tps[1]] == 0 and end[tps[2]] > 3

    other = store(bs, "cl-src-checkpoints", "cl-src", {})  # another machine: nothing local
    assert other.restore({"cl-src:2"}) == 2
    assert other.load("a") is None  # partition 0 was not restored
    state, meta = other.load("big")
    np.testing.assert_array_equal(state["x"], big)
    state, meta = other.load("b")
    assert meta["count"] == 5 and state["x"].tolist() == list(range(6)) and other.seq("b") == 2
    assert other.restore({"cl-src:0"}) == 1
    assert [k for k, _, _ in other.scan()] == ["a"]
    other.forget_partitions({"cl-src:0"})
    assert other.scan() == []
    other.close()


def test_changelog_needs_the_source_topic(kafka_broker):
    with pytest.raises(ValueError, match="source topic"):
        store(kafka_broker.bootstrap, "nothing-checkpoints", "no-such-topic", {})


def test_a_new_version_of_a_split_checkpoint_restores_and_deletes_the_parts_it_replaces(kafka_broker):
    bs = kafka_broker.bootstrap
    kafka_broker.create_topic("clv-src", 1)
    parts = {"big": "clv-src:0"}
    s = store(bs, "clv-src-checkpoints", "clv-src", parts, max_message_bytes=2048)
    rng = np.random.default_rng(1)
    v1 = CheckpointStore.encode("big", {"x": rng.normal(size=1000)}, {"count": 1, "seq": 1})
    v2 = CheckpointStore.encode("big", {"x": rng.normal(size=900)}, {"count": 2, "seq": 2})
    s.write_many([("big", v1, 1)])
    s.write_many([("big", v2, 2)])
    s.close()  # sends the tombstones still buffered

    c = KafkaConsumer(bootstrap_servers=bs, enable_auto_commit=False, auto_offset_reset="earliest",
                      consumer_timeout_ms=5000)
    tp = TopicPartition("clv-src-checkpoints", 0)
    c.assign([tp])
    records = [(m.key, m.value) for m in c]
    c.close()
    n1 = -(-len(v1) // 2048)
    assert sorted(k for k, v in records if v is None) == [b"big\x001\x00" + str(i).encode() for i in range(n1 - 1)]
    assert [k for k, v in records if v is not None][-1] == b"big"

    other = store(bs, "clv-src-checkpoints", "clv-src", {})
    assert other.restore({"clv-src:0"}) == 1
    assert other._restored["big"][1] == v2 and other.seq("big") == 2
    other.close()

"""The changelog's split checkpoints: a write that fails midway leaves the previous acknowledged
version restorable (the parts of a version never overwrite another version's, and the record under
the key is sent last), a completed write restores the new version, the part keys it replaces get
tombstones, and topics in the earlier layout (part 0 under the key) still restore. A fake producer
and consumer stand for the broker; a compacted topic is its log with only the latest record of each
key."""

from __future__ import annotations

import types

import kafka
import numpy as np
import pytest

from ratiowatch.connectors.changelog import ChangelogStore
from ratiowatch.stream.engine.checkpoint import CheckpointStore


class Future:
    def __init__(self, ok: bool):
        self.ok = ok

    def get(self, timeout=None):
        if not self.ok:
            raise kafka.errors.KafkaTimeoutError("broker went away")

    def add_errback(self, fn, *args):
        if not self.ok:
            fn(*args, kafka.errors.KafkaTimeoutError("broker went away"))
        return self


class Broker:
    """One changelog topic: ``log`` holds ``(partition, key, value, headers)`` in offset order."""

    def __init__(self):
        self.log: list[tuple[int, bytes, bytes | None, list]] = []
        self.fail_after: int | None = None  # records the broker takes before it fails
        self.refuse = b""  # a key prefix whose records fail while the others land (a lost batch)

    def producer(self, **kw):
        broker = self

        class Producer:
            def send(self, topic, key, value, partition=None, headers=None):
                ok = ((broker.fail_after is None or len(broker.log) < broker.fail_after)
                      and not (broker.refuse and key.startswith(broker.refuse)))
                if ok:
                    broker.log.append((partition, key, value, headers or []))
                return Future(ok)

            def flush(self, timeout=None):
                pass

            def close(self, timeout=None):
                pass

        return Producer()

    def consumer(self, **kw):
        broker = self

        class Consumer:
            def assign(self, tps):
                self.tps, self.pos = tps, {tp: 0 for tp in tps}

            def seek_to_beginning(self, *tps):
                self.pos = {tp: 0 for tp in tps}

            def end_offsets(self, tps):
                return {tp: len(broker.log) for tp in tps}

            def position(self, tp):
                return self.pos[tp]

            def poll(self, timeout_ms=0):
                out = {}
                for tp in self.tps:
                    out[tp] = [types.SimpleNamespace(key=k, value=v, headers=h, offset=i)
                               for i, (p, k, v, h) in enumerate(broker.log) if p == tp.partition]
                    self.pos[tp] = len(broker.log)
                return out

            def close(self):
                pass

        return Consumer()

    def compact(self) -> None:
        """What log compaction leaves: the latest record of each key, tombstones removed."""
        last = {(p, k): i for i, (p, k, _, _) in enumerate(self.log)}
        self.log = [r for i, r in enumerate(self.log) if last[(r[0], r[1])] == i and r[2] is not None]


@pytest.fixture
def broker(monkeypatch):
    b = Broker()
    monkeypatch.setattr(kafka, "KafkaProducer", b.producer)
    monkeypatch.setattr(kafka, "KafkaConsumer", b.consumer)
    monkeypatch.setattr(ChangelogStore, "ensure_topic", lambda self: 2)
    return b


def new_store(**kw):
    parts = {"big": "src:1", "small": "src:1", "other": "src:0"}
    return ChangelogStore(["127.0.0.1:9"], "cl", "src", partition_of=parts.get, max_message_bytes=2048, **kw)


def payload(key, n, count, seq, seed=0):
    x = np.random.default_rng(seed).normal(size=n)
    return CheckpointStore.encode(key, {"x": x, "m": "rulsif"}, {"count": count, "seq": seq})


def restored(store):
    return {k: p for k, (_, p) in store._restored.items()}


def test_a_write_that_fails_midway_restores_the_previous_acknowledged_version(broker):
    s = new_store()
    v1 = payload("big", 1000, 1000, 1, seed=1)  # ~8 kB: 5 parts of 2 kB
    small1 = payload("small", 3, 3, 1)
    assert s.write_many([("big", v1, 1), ("small", small1, 1)]) == 2
    acknowledged = len(broker.log)
    for taken in (1, 3, 4):  # the broker fails after 1, 3 or all 4 of seq 2's first parts
        broker.log = broker.log[:acknowledged]
        broker.fail_after = acknowledged + taken
        with pytest.raises(kafka.errors.KafkaTimeoutError):
            s.write_many([("big", payload("big", 1200, 2000, 2, seed=2), 2),
                          ("small", payload("small", 4, 4, 2), 2)])
        broker.fail_after = None
        for compacted in (False, True):
            if compacted:
                broker.compact()
            other = new_store()
            assert other.restore({"src:1"}) == 2
            assert restored(other) == {"big": v1, "small": small1}  # bit-identical
            assert other.seq("big") == 1 and other.seq("small") == 1
            state, meta = other.load("big")
            assert meta["count"] == 1000 and state["x"].shape == (1000,)
    # one part of seq 2 is lost while records sent after it land: the key's record must wait for it
    broker.log = broker.log[:acknowledged]
    broker.refuse = b"big\x002\x001"
    with pytest.raises(kafka.errors.KafkaTimeoutError):
        s.write_many([("big", payload("big", 1200, 2000, 2, seed=2), 2)])
    broker.refuse = b""
    broker.compact()
    other = new_store()
    assert other.restore({"src:1"}) == 2 and restored(other) == {"big": v1, "small": small1}


def test_a_completed_write_restores_the_new_version_and_deletes_the_parts_it_replaces(broker):
    s = new_store()
    v1, v2 = payload("big", 1000, 1000, 1, seed=1), payload("big", 900, 2000, 2, seed=2)
    s.write_many([("big", v1, 1)])
    n1, n2 = -(-len(v1) // 2048), -(-len(v2) // 2048)
    assert n1 == 5 and n2 == 4
    parts1 = [k for _, k, _, _ in broker.log if k != b"big"]
    assert parts1 == [b"big\x001\x00" + str(i).encode() for i in range(n1 - 1)]
    # the record under the key itself is the last one sent, and it names the version and its parts
    p, k, v, h = broker.log[-1]
    assert (p, k) == (1, b"big") and dict(h) == {"seq": b"1", "part": b"4", "parts": b"5"}
    start = len(broker.log)
    s.write_many([("big", v2, 2)])
    sent = broker.log[start:]
    assert [k for _, k, v, _ in sent if v is not None][-1] == b"big"
    assert sorted(k for _, k, v, _ in sent if v is None) == sorted(parts1)  # tombstones, after the write
    assert all(p == 1 for p, _, _, _ in sent)
    for compacted in (False, True):
        if compacted:
            broker.compact()
            assert len(broker.log) == n2 and not any(k.startswith(b"big\x001\x00") for _, k, _, _ in broker.log)
        other = new_store()
        assert other.restore({"src:1"}) == 1
        assert restored(other) == {"big": v2} and other.seq("big") == 2


def test_a_retried_version_replaces_the_parts_of_its_failed_attempt(broker):
    s = new_store()
    v1 = payload("big", 1000, 1000, 1, seed=1)
    s.write_many([("big", v1, 1)])
    broker.fail_after = len(broker.log) + 4  # seq 2 in 6 parts: 4 land, the write fails
    with pytest.raises(kafka.errors.KafkaTimeoutError):
        s.write_many([("big", payload("big", 1400, 2000, 2, seed=2), 2)])
    broker.fail_after = None
    restarted = new_store()
    assert restarted.restore({"src:1"}) == 1 and restarted.seq("big") == 1
    restarted.load("big")
    v2 = payload("big", 500, 1500, 2, seed=3)  # the restarted process writes its own seq 2: 3 parts
    restarted.write_many([("big", v2, 2)])
    broker.compact()
    assert sorted(k for _, k, _, _ in broker.log) == [b"big", b"big\x002\x000", b"big\x002\x001"]
    other = new_store()
    assert other.restore({"src:1"}) == 1
    assert restored(other) == {"big": v2}


def test_an_older_version_written_late_leaves_the_newer_versions_parts(broker):
    s = new_store()
    v2 = payload("big", 1000, 2000, 2, seed=2)
    s.write_many([("big", v2, 2)])
    s.write_many([("big", payload("big", 1000, 1000, 1, seed=1), 1)])  # a cut-off writer, late
    assert not any(v is None for _, _, v, _ in broker.log)
    other = new_store()
    assert other.restore({"src:1"}) == 1
    assert restored(other) == {"big": v2} and other.seq("big") == 2  # the newest version wins


def test_single_part_checkpoints_are_one_record_under_the_key(broker):
    s = new_store()
    small = payload("small", 5, 5, 7)
    s.write_many([("small", small, 7), ("other", payload("other", 2, 2, 1), 1)])
    assert [(p, k, v, dict(h)) for p, k, v, h in broker.log] == [
        (1, b"small", small, {"seq": b"7", "part": b"0", "parts": b"1"}),
        (0, b"other", broker.log[1][2], {"seq": b"1", "part": b"0", "parts": b"1"})]
    s.write_many([("small", payload("small", 6, 6, 8), 8)])
    assert len(broker.log) == 3 and broker.log[-1][2] is not None  # no tombstones
    assert s._parts == {}


def test_a_topic_in_the_earlier_layout_restores_and_its_parts_are_deleted_by_the_next_version(broker):
    """The layout before versioned part keys: part 0 under the key, part i under key NUL i."""
    def earlier(key, value, seq):
        pieces = [value[i:i + 2048] for i in range(0, len(value), 2048)]
        for i, piece in enumerate(pieces):
            k = key if i == 0 else key + b"\x00" + str(i).encode()
            broker.log.append((1, k, piece, [("seq", str(seq).encode()), ("part", str(i).encode()),
                                             ("parts", str(len(pieces)).encode())]))

    v1, v3 = payload("big", 1000, 1000, 1, seed=1), payload("big", 1100, 3000, 3, seed=3)
    small = payload("small", 3, 3, 4)
    earlier(b"big", v1, 1)
    earlier(b"big", payload("big", 1000, 2000, 2, seed=2), 2)
    earlier(b"big", v3, 3)
    earlier(b"small", small, 4)
    # the earlier layout's torn write (part 0 of 5 under the key, then nothing): in an uncompacted
    # log the previous version is still complete
    start = len(broker.log)
    broker.log.append((1, b"big", payload("big", 1000, 4000, 4, seed=4)[:2048],
                       [("seq", b"4"), ("part", b"0"), ("parts", b"5")]))
    s = new_store()
    assert s.restore({"src:1"}) == 2 and restored(s) == {"big": v3, "small": small} and s.seq("big") == 3
    del broker.log[start:]
    broker.compact()
    s = new_store()
    assert s.restore({"src:1"}) == 2 and restored(s) == {"big": v3, "small": small} and s.seq("big") == 3
    # the upgraded writer's next version deletes the earlier layout's part keys
    s = new_store()
    s.restore({"src:1"})
    v5 = payload("big", 800, 5000, 5, seed=5)
    s.write_many([("big", v5, 5)])
    assert sorted(k for _, k, v, _ in broker.log if v is None) == [b"big\x00" + str(i).encode() for i in range(1, 5)]
    broker.compact()
    assert not any(k.count(b"\x00") == 1 for _, k, _, _ in broker.log)
    other = new_store()
    assert other.restore({"src:1"}) == 2
    assert restored(other) == {"big": v5, "small": small}

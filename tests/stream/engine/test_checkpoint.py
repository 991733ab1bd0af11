"""Checkpoint files: exact round trip, no pickle, atomic replacement, versioning."""

from __future__ import annotations

import os

import numpy as np
import pytest

import ratiowatch.stream.engine.checkpoint as checkpoint
from ratiowatch.connectors.records import Record
from ratiowatch.stream.engine.checkpoint import CheckpointStore, atomic_write_bytes
from ratiowatch.stream.engine.pipeline import Pipeline
from toy_detector import MeanShiftFactory


def test_round_trip_is_exact_for_arrays_and_scalars(tmp_path):
    store = CheckpointStore(tmp_path)
    rng = np.random.default_rng(0)
    state = {"H": rng.normal(size=(4, 4)), "idx": np.arange(5), "sigma": 0.1 + 0.2, "n": 7, "flag": True,
             "method": "rulsif", "opt": None, "big": 1e308, "tiny": 5e-324}
    store.save("host/1 ü", state, {"count": 3})
    got, meta = store.load("host/1 ü")
    np.testing.assert_array_equal(got["H"], state["H"])
    assert got["idx"].dtype == np.int64
    for k in ("sigma", "n", "flag", "method", "opt", "big", "tiny"):
        assert got[k] == state[k] and type(got[k]) is type(state[k])
    assert meta["count"] == 3 and meta["seq"] == 1
    assert store.keys() == ["host/1 ü"]
    store.save("host/1 ü", state, {"count": 4})
    assert store.load("host/1 ü")[1]["seq"] == 2
    assert store.load("other") is None


def test_object_arrays_and_unknown_types_are_refused(tmp_path):
    store = CheckpointStore(tmp_path)
    with pytest.raises(ValueError, match="object array"):
        store.save("k", {"x": np.array([{"a": 1}], dtype=object)})
    with pytest.raises(ValueError, match="has type dict"):
        store.save("k", {"x": {"a": 1}})


def test_file_loads_without_pickle_and_rejects_unknown_version(tmp_path):
    store = CheckpointStore(tmp_path)
    path = store.save("k", {"x": np.ones(2)})
    with np.load(path, allow_pickle=False) as data:
        assert set(data.files) == {"x", "__json__"}
    import json
    with np.load(path, allow_pickle=False) as data:
        doc = json.loads(bytes(data["__json__"]).decode())
    doc["version"] = 99
    np.savez(path, x=np.ones(2), __json__=np.frombuffer(json.dumps(doc).encode(), dtype=np.uint8))
    with pytest.raises(ValueError, match="version 99 is not supported"):
        store.load("k")


def test_crash_mid_write_leaves_the_old_checkpoint_valid(tmp_path, monkeypatch):
    store = CheckpointStore(tmp_path)
    store.save("k", {"x": np.arange(3.0)}, {"count": 1})

    real_fsync = os.fsync
    calls = {"n": 0}

    def dying_fsync(fd):  # the process "dies" after the bytes are written, before the rename
        calls["n"] += 1
        raise KeyboardInterrupt("simulated crash")

    monkeypatch.setattr(os, "fsync", dying_fsync)
    with pytest.raises(KeyboardInterrupt):
        store.save("k", {"x": np.arange(100.0)}, {"count": 2})
    monkeypatch.setattr(os, "fsync", real_fsync)
    assert calls["n"] == 1
    state, meta = store.load("k")
    np.testing.assert_array_equal(state["x"], np.arange(3.0))
    assert meta["count"] == 1
    assert not list(tmp_path.glob(".tmp-*"))  # the temp file was cleaned up


def test_torn_file_is_reported_not_silently_loaded(tmp_path):
    store = CheckpointStore(tmp_path)
    path = store.save("k", {"x": np.arange(300.0)})
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])  # what a non-atomic writer would leave behind
    with pytest.raises(ValueError, match="unreadable checkpoint"):
        store.load("k")


def test_atomic_write_replaces_whole_file(tmp_path):
    target = tmp_path / "f.json"
    atomic_write_bytes(target, b"old")
    atomic_write_bytes(target, b"new-and-longer")
    assert target.read_bytes() == b"new-and-longer"


def test_save_many_crash_between_renames_leaves_every_file_valid(tmp_path, monkeypatch):
    store = CheckpointStore(tmp_path)
    store.save_many([(k, {"x": np.zeros(2)}, {"v": 0}) for k in "abc"])
    real_replace = os.replace
    done = []

    def replace_twice(src, dst):
        if len(done) == 2:
            raise KeyboardInterrupt("simulated crash")
        done.append(dst)
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace_twice)
    with pytest.raises(KeyboardInterrupt):
        store.save_many([(k, {"x": np.ones(2)}, {"v": 1}) for k in "abc"])
    monkeypatch.setattr(os, "replace", real_replace)
    versions = sorted(store.load(k)[1]["v"] for k in "abc")
    assert versions == [0, 1, 1]  # each key has its old or its new checkpoint, none is torn
    assert not list(tmp_path.glob(".tmp-*"))


def test_the_seq_cache_holds_the_keys_written_again_not_every_key_ever_written(tmp_path, monkeypatch):
    # it kept an entry per key ever checkpointed, up to 200,000 (about 90 MB) whatever max_keys
    # said; the keys written again are those in memory, and theirs are the entries the fencing
    # check finds
    monkeypatch.setattr(checkpoint, "_SEQ_CACHE_MIN", 16)
    store = CheckpointStore(tmp_path)
    p = Pipeline(MeanShiftFactory(), store=store)
    for t in range(50):  # one key stays in memory; 8 new keys a round are evicted for good
        new = [f"k{t}-{j}" for j in range(8)]
        p.process([Record(k, float(t), np.array([1.0]), ("p0", 9 * t + j)) for j, k in enumerate(["hot", *new])])
        p.evict(new)
        p.checkpoint()
    assert len(store._seq_cache) <= 4 * 8  # a few times the largest batch written (8 keys evicted together)
    assert str(store.path("hot")) in store._seq_cache
    assert store.seq("hot") == 50 and store.seq("k0-0") == 1


def test_a_key_without_a_seq_cache_entry_gets_its_seq_from_its_file_as_with_one(tmp_path, monkeypatch):
    monkeypatch.setattr(checkpoint, "_SEQ_CACHE_MIN", 4)
    store = CheckpointStore(tmp_path)
    for k in "abcdefgh":
        store.save(k, {"x": np.zeros(2)}, {"count": 1})
    store.save("a", {"x": np.ones(2)}, {"count": 2})
    assert str(store.path("a")) in store._seq_cache and str(store.path("b")) not in store._seq_cache
    assert store.seq("a") == 2 and store.seq("b") == 1
    other = CheckpointStore(tmp_path)  # another process of the group takes both keys over
    other.save("a", {"x": np.ones(2)}, {"count": 3, "seq": 7})
    other.save("b", {"x": np.ones(2)}, {"count": 3, "seq": 9})
    assert store.seq("a") == 7 and store.seq("b") == 9
    assert store.seq("nowhere") == 0

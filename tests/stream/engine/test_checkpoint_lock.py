"""The checkpoint directory's lock: one daemon per directory, except the processes of one Kafka
consumer group, which share theirs by design."""

from __future__ import annotations

import os

import pytest

from ratiowatch.stream.engine.checkpoint import CheckpointStore, DirectoryInUseError
from ratiowatch.stream.engine.config import parse_config
from ratiowatch.stream.engine.daemon import Daemon, StartupError
from fake_sinks import ListSink
from toy_detector import MeanShiftFactory


class IdleSource:
    def __init__(self):
        self.exhausted = False

    def poll(self, max_records, timeout_s):
        return []

    def commit(self, positions):
        pass

    def close(self):
        pass


def daemon(tmp_path, source_type: str) -> Daemon:
    src = {"type": source_type}
    if source_type == "kafka":
        src.update(bootstrap_servers=["127.0.0.1:9"], topics=["t"], group_id="g")
    if source_type == "file":
        src["path"] = str(tmp_path / "in.jsonl")
    cfg = parse_config({"source": src, "checkpoint": {"dir": str(tmp_path / "state")}, "metrics": {"enabled": False}})
    return Daemon(cfg, factory=MeanShiftFactory(), source=IdleSource(), sinks=[ListSink("null")],
                  dead_letter=ListSink("null"))


def test_an_exclusive_lock_refuses_any_other_holder_until_it_is_closed(tmp_path):
    first = CheckpointStore(tmp_path)
    first.lock(exclusive=True)
    for exclusive in (True, False):
        with pytest.raises(DirectoryInUseError, match=f"in use by another ratiowatch daemon \\(pid {os.getpid()}\\)"):
            CheckpointStore(tmp_path).lock(exclusive=exclusive)
    first.close()
    again = CheckpointStore(tmp_path)
    again.lock(exclusive=True)
    again.close()


def test_shared_locks_coexist_and_keep_an_exclusive_one_out(tmp_path):
    a, b = CheckpointStore(tmp_path), CheckpointStore(tmp_path)
    a.lock(exclusive=False)
    b.lock(exclusive=False)
    with pytest.raises(DirectoryInUseError):
        CheckpointStore(tmp_path).lock(exclusive=True)
    a.close()
    b.close()


def test_daemons_of_one_kafka_group_share_a_directory_but_a_file_daemon_is_refused_it(tmp_path):
    members = [daemon(tmp_path, "kafka"), daemon(tmp_path, "kafka")]
    for d in members:
        d._setup()
    other = daemon(tmp_path, "file")
    with pytest.raises(StartupError, match=f"{tmp_path / 'state'}: the checkpoint directory is in use"):
        other._setup()
    other.close()
    for d in members:
        d.close()
    alone = daemon(tmp_path, "stdin")
    alone._setup()
    with pytest.raises(StartupError, match="in use by another ratiowatch daemon"):
        daemon(tmp_path, "stdin")._setup()
    alone.close()


def leave_temp_files(directory, n, age_s=0.0):
    """What ``kill -9`` during a checkpoint write leaves: temp files that were never renamed."""
    import tempfile
    import time

    paths = []
    for _ in range(n):
        fd, path = tempfile.mkstemp(prefix=".tmp-", suffix=".part", dir=directory)
        os.write(fd, b"half a checkpoint")
        os.close(fd)
        if age_s:
            t = time.time() - age_s
            os.utime(path, (t, t))
        paths.append(path)
    return paths


def test_the_lock_holder_removes_the_temp_files_of_interrupted_writes_and_nothing_else(tmp_path, caplog):
    # every kill -9 during a checkpoint write left its temp files for good (97 files after five kills)
    store = CheckpointStore(tmp_path)
    store.save("k", {"x": 1.0}, {"count": 1})
    leave_temp_files(tmp_path, 3)
    others = [tmp_path / ".tmp-notes.txt", tmp_path / "tmp-abc.part", tmp_path / "mine.part"]
    for p in others:
        p.write_text("not a checkpoint temp file")
    (tmp_path / ".tmp-adir.part").mkdir()
    with caplog.at_level("INFO", logger="ratiowatch.checkpoint"):
        store.lock(exclusive=True)
    assert sorted(p.name for p in tmp_path.glob(".tmp-*.part")) == [".tmp-adir.part"]
    assert all(p.exists() for p in others) and store.load("k")[1]["count"] == 1
    said = [r for r in caplog.records if "interrupted checkpoint writes" in r.getMessage()]
    assert len(said) == 1 and said[0].files == 3
    store.close()


def test_a_store_that_does_not_hold_the_lock_removes_no_temp_files(tmp_path):
    holder = CheckpointStore(tmp_path)
    holder.lock(exclusive=True)
    left = leave_temp_files(tmp_path, 2)
    with pytest.raises(DirectoryInUseError):
        CheckpointStore(tmp_path).lock(exclusive=True)
    assert all(os.path.exists(p) for p in left)  # perhaps the holder's writes in progress
    holder.close()


def test_a_shared_lock_removes_only_temp_files_no_live_member_can_still_be_writing(tmp_path):
    # the processes of one consumer group share the directory: a fresh temp file may be another
    # member's write in progress, an old one is a dead member's leftover
    from ratiowatch.stream.engine.checkpoint import SHARED_TMP_MIN_AGE_S

    member = CheckpointStore(tmp_path)
    member.lock(exclusive=False)
    fresh = leave_temp_files(tmp_path, 2)
    stale = leave_temp_files(tmp_path, 2, age_s=SHARED_TMP_MIN_AGE_S + 60)
    joining = CheckpointStore(tmp_path)
    joining.lock(exclusive=False)
    assert all(os.path.exists(p) for p in fresh) and not any(os.path.exists(p) for p in stale)
    joining.close()
    member.close()

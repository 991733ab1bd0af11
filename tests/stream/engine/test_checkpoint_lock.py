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

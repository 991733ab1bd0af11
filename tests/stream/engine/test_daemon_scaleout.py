"""Scale-out: two `ratiowatch run` processes in one consumer group over a 4-partition topic share
the keys; one is killed (-9); the other takes over its partitions, restores those keys' detectors
from the checkpoint store, and the alerts equal those of one uninterrupted process. Two stores:
a checkpoint directory shared by both processes, and a Kafka changelog topic with a separate
directory for each process (no shared disk)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import tomllib
from pathlib import Path

import numpy as np
import pytest
from kafka import KafkaConsumer, TopicPartition

from kafka_util import produce
from ratiowatch.stream.engine.checkpoint import CheckpointStore
from ratiowatch.stream.engine.config import parse_config
from ratiowatch.stream.engine.daemon import Daemon

pytestmark = pytest.mark.broker

REPO = Path(__file__).resolve().parents[3]
KEYS = [f"k{i}" for i in range(8)]
N = 500
PARTS = 4


def stream_rows():
    rng = np.random.default_rng(5)
    series = {k: np.r_[rng.normal(0, 1, N // 2), rng.normal(0, 4, N - N // 2)] for k in KEYS}
    return [{"key": k, "timestamp": t, "value": round(float(series[k][t]), 6)} for t in range(N) for k in KEYS]


def partition_of(key: str) -> int:
    return KEYS.index(key) % PARTS


def config_text(bootstrap, topic, state, alerts, partitions=None, group="scale", store="directory") -> str:
    manual = f"partitions = {partitions}" if partitions is not None else ""
    changelog = f'store = "kafka"\ntopic = "{topic}-{group}-changelog"' if store == "kafka" else ""
    return f"""
[source]
type = "kafka"
bootstrap_servers = ["{bootstrap}"]
topics = ["{topic}"]
group_id = "{group}"
session_timeout_ms = 6000
heartbeat_interval_ms = 500
max_poll_interval_ms = 20000
max_poll_records = 100
{manual}

[detector]
n = 25
seed = 2
options = {{ false_alarm_rate = 0.01 }}

[checkpoint]
{changelog}
dir = "{state}"
every_records = 100
every_s = 1.0

[[sinks]]
type = "jsonl"
path = "{alerts}"

[dead_letter]
type = "file"
path = "{alerts}.dead"

[metrics]
enabled = false
"""


def committed_total(bootstrap, topic) -> int:
    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id="scale", enable_auto_commit=False)
    try:
        return sum(c.committed(TopicPartition(topic, p)) or 0 for p in range(PARTS))
    finally:
        c.close()


def assigned(log_path: Path) -> list[str] | None:
    last = None
    if log_path.exists():
        for line in log_path.read_text().splitlines():
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            if ev.get("msg") == "partitions assigned":
                last = ev["partitions"]
    return last


def read_alerts(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.exists() else []


def wait_for(cond, timeout_s, what):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.parametrize("store", ["directory", "kafka"])
def test_two_processes_share_keys_and_survivor_takes_over_from_checkpoints(kafka_broker, tmp_path, store):
    bs = kafka_broker.bootstrap
    topic = f"scaleout-{store}"
    kafka_broker.create_topic(topic, PARTS)
    rows = stream_rows()
    cut1, cut2 = len(rows) * 3 // 10, len(rows) * 65 // 100

    # reference: one uninterrupted process reading all partitions
    ref_cfg = tmp_path / "ref.toml"
    ref_cfg.write_text(config_text(bs, topic, tmp_path / "ref-state", tmp_path / "ref-alerts.jsonl",
                                   partitions=list(range(PARTS)), group="scale-reference"))
    produce(bs, topic, rows[:cut1], partition_of=partition_of)

    env = {**os.environ, "NUMBA_CACHE_DIR": str(REPO / ".numba_cache")}
    procs = {}
    for name in ("a", "b"):
        cfg = tmp_path / f"{name}.toml"
        # the changelog store gets a directory per process: nothing on disk is shared
        state = tmp_path / ("state" if store == "directory" else f"state-{name}")
        cfg.write_text(config_text(bs, topic, state, tmp_path / f"alerts-{name}.jsonl", store=store))
        err = open(tmp_path / f"{name}.log", "w")
        procs[name] = subprocess.Popen([sys.executable, "-m", "ratiowatch.stream.commands.cli", "run", str(cfg)], cwd=tmp_path,
                                       env=env, stderr=err)
    try:
        wait_for(lambda: all(len(assigned(tmp_path / f"{n}.log") or []) == PARTS // 2 for n in procs), 120,
                 "both processes to own two partitions each")
        produce(bs, topic, rows[cut1:cut2], partition_of=partition_of)
        wait_for(lambda: committed_total(bs, topic) == cut2, 120, "the first 65% to be committed")
        procs["b"].send_signal(signal.SIGKILL)
        assert procs["b"].wait(30) == -signal.SIGKILL
        produce(bs, topic, rows[cut2:], partition_of=partition_of)
        wait_for(lambda: committed_total(bs, topic) == len(rows), 180, "the survivor to commit everything")
        wait_for(lambda: len(assigned(tmp_path / "a.log") or []) == PARTS, 5, "a to own all partitions")
        procs["a"].send_signal(signal.SIGTERM)
        assert procs["a"].wait(60) == 0
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait(10)

    # the reference reads the whole topic and is stopped once it has folded every record
    ref = Daemon(parse_config(tomllib.loads(ref_cfg.read_text())))
    th = threading.Thread(target=ref.run, daemon=True)
    th.start()
    wait_for(lambda: ref.pipeline is not None and ref.stats["records"] >= len(rows), 120, "the reference run")
    ref.stop()
    th.join(60)
    reference = {a["alert_id"]: a for a in read_alerts(tmp_path / "ref-alerts.jsonl")}
    assert len(reference) >= 2  # the test needs alerts to compare

    delivered = read_alerts(tmp_path / "alerts-a.jsonl") + read_alerts(tmp_path / "alerts-b.jsonl")
    assert read_alerts(tmp_path / "alerts-b.jsonl"), "b raised no alert before it died; the test proves less"
    assert {a["alert_id"] for a in delivered} == set(reference)
    for a in delivered:
        assert a == reference[a["alert_id"]]
    if store == "directory":
        ckpt = CheckpointStore(tmp_path / "state")
    else:
        from ratiowatch.connectors.changelog import ChangelogStore

        ckpt = ChangelogStore([bs], f"{topic}-scale-changelog", topic)
        assert ckpt.partitions == PARTS
        assert ckpt.restore({f"{topic}:{p}" for p in range(PARTS)}) == len(KEYS)
        assert not [p for n in procs for p in (tmp_path / f"state-{n}").glob("*.ckpt.npz")]  # nothing on disk
    for k in KEYS:  # restored, not restarted: every key's detector saw all N records exactly once
        assert ckpt.load(k)[1]["count"] == N

"""kill -9 of `ratiowatch run` mid-stream, then a restart: every alert of an uninterrupted run is
delivered (repeats only with the same idempotency key) and no record is skipped or applied twice."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from ratiowatch.stream.engine.checkpoint import CheckpointStore
from ratiowatch.stream.engine.config import load_config
from ratiowatch.stream.engine.daemon import Daemon

REPO = Path(__file__).resolve().parents[3]
KEYS = ("a", "b", "c")
N = 700


#: rows per key of each detector kind's stream (the anomaly detector scores from row 300 on)
ROWS = {"window": N, "anomaly": 1200}
#: [detector] of each kind, loose: plenty of alerts to compare
DETECTOR = {"window": "n = 25\nseed = 3\noptions = { false_alarm_rate = 0.01 }",
            "anomaly": 'kind = "anomaly"\nscore_threshold = 0.3\nseed = 3'}


def write_stream(path: Path, kind: str = "window") -> None:
    rng = np.random.default_rng(11)
    n = ROWS[kind]
    if kind == "anomaly":  # noisy cycles with a few bursts per key
        series = {k: np.sin(2 * np.pi * np.arange(n) / 50) + 0.1 * rng.normal(size=n) for k in KEYS}
        for i, k in enumerate(KEYS):
            for at in (400 + 97 * i, 700 + 53 * i, 1000 + 31 * i):
                series[k][at:at + 3] += 1.5
    else:
        series = {k: np.r_[rng.normal(0, 1, n // 2), rng.normal(0, 1 + 3 * (i + 1) / len(KEYS), n - n // 2)]
                  for i, k in enumerate(KEYS)}
    with open(path, "w") as fh:
        for t in range(n):
            for k in KEYS:
                fh.write(json.dumps({"key": k, "timestamp": t, "value": round(float(series[k][t]), 6)}) + "\n")


def write_config(dirpath: Path, data: Path, kind: str = "window") -> Path:
    cfg = dirpath / "run.toml"
    cfg.write_text(f"""
[source]
type = "file"
path = "{data}"
max_poll_records = 25

[detector]
{DETECTOR[kind]}

[checkpoint]
dir = "state"
every_records = 150

[[sinks]]
type = "jsonl"
path = "alerts.jsonl"

[dead_letter]
type = "file"
path = "dead.jsonl"

[metrics]
enabled = false
""")
    return cfg


def alerts_of(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.exists() else []


@pytest.mark.parametrize("kind", ["window", "anomaly"])
def test_kill_9_then_restart_delivers_every_alert_of_an_uninterrupted_run(tmp_path, kind):
    data = tmp_path / "stream.jsonl"
    write_stream(data, kind)
    n = ROWS[kind]

    ref_dir = tmp_path / "ref"
    ref_dir.mkdir()
    assert Daemon(load_config(write_config(ref_dir, data, kind))).run() == 0
    reference = {a["alert_id"]: a for a in alerts_of(ref_dir / "alerts.jsonl")}
    assert len(reference) >= 2  # the test needs alerts to compare
    assert {a["kind"] for a in reference.values()} == {"anomaly" if kind == "anomaly" else "changepoint"}

    run_dir = tmp_path / "crash"
    run_dir.mkdir()
    cfg = write_config(run_dir, data, kind)
    env = {**os.environ, "NUMBA_CACHE_DIR": str(REPO / ".numba_cache")}
    cmd = [sys.executable, "-m", "ratiowatch.stream.commands.cli", "run", str(cfg)]
    proc = subprocess.Popen(cmd, cwd=run_dir, env=env, stderr=subprocess.DEVNULL)
    offsets = run_dir / "state" / "offsets-stream.jsonl.json"
    deadline = time.monotonic() + 120
    # kill once the daemon is well into the stream (a few commits done, end not reached)
    while time.monotonic() < deadline and proc.poll() is None:
        if offsets.exists():
            try:
                pos = json.loads(offsets.read_text())["file:stream.jsonl"]
            except (ValueError, KeyError):
                pos = 0
            if pos >= n * len(KEYS) // 2:
                break
        time.sleep(0.01)
    assert proc.poll() is None, "daemon finished before it could be killed; make the stream longer"
    time.sleep(0.1)  # land the kill between checkpoints, with uncommitted work in flight
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(30) == -signal.SIGKILL
    before = alerts_of(run_dir / "alerts.jsonl")

    restart = subprocess.run(cmd, cwd=run_dir, env=env, stderr=subprocess.PIPE, timeout=300)
    assert restart.returncode == 0, restart.stderr.decode()[-2000:]

    delivered = alerts_of(run_dir / "alerts.jsonl")
    assert len(delivered) >= len(before)
    ids = {a["alert_id"] for a in delivered}
    assert ids == set(reference), "an alert is missing or unexpected after the restart"
    for a in delivered:  # a repeat is the same alert with the same idempotency key
        assert a == reference[a["alert_id"]]
    store = CheckpointStore(run_dir / "state")
    for k in KEYS:  # every record of every key folded exactly once
        assert store.load(k)[1]["count"] == n
    assert alerts_of(run_dir / "dead.jsonl") == []

"""`ratiowatch run` operational errors end with one clear line and an exit code, not a traceback;
a stop signal during the start is a clean stop."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
CLI = [sys.executable, "-m", "ratiowatch.stream.commands.cli", "run"]


def env():
    return {**os.environ, "NUMBA_CACHE_DIR": str(REPO / ".numba_cache")}


def last_line(stderr: str) -> str:
    lines = [x for x in stderr.splitlines() if x.strip()]
    return lines[-1] if lines else ""


def test_no_broker_is_one_line_and_exit_code_4(tmp_path, free_port):
    cfg = tmp_path / "k.toml"
    cfg.write_text(f"""
[source]
type = "kafka"
bootstrap_servers = ["127.0.0.1:{free_port}"]
topics = ["t"]
connect_timeout_s = 1.0

[[sinks]]
type = "kafka"
topic = "alerts"

[dead_letter]
type = "stderr"

[metrics]
enabled = false
""")
    t0 = time.monotonic()
    r = subprocess.run(CLI + [str(cfg)], cwd=tmp_path, env=env(), capture_output=True, text=True, timeout=120)
    assert r.returncode == 4, r.stderr[-2000:]
    assert "Traceback" not in r.stderr
    line = last_line(r.stderr)
    assert line.startswith("ratiowatch run: cannot start:") and f"127.0.0.1:{free_port}" in line
    assert "broker" in line
    assert time.monotonic() - t0 < 60


def file_config(tmp_path: Path, more: str) -> Path:
    """A config reading one record from a file, with the TOML ``more`` after its source."""
    data = tmp_path / "in.jsonl"
    data.write_text(json.dumps({"key": "a", "timestamp": 0, "value": 1.0}) + "\n")
    cfg = tmp_path / "f.toml"
    cfg.write_text(f'[source]\ntype = "file"\npath = "{data}"\n\n{more}')
    return cfg


def test_metrics_port_in_use_is_one_line_and_exit_code_4(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        cfg = file_config(tmp_path, f"[metrics]\nport = {port}\n")
        r = subprocess.run(CLI + [str(cfg)], cwd=tmp_path, env=env(), capture_output=True, text=True, timeout=120)
    assert r.returncode == 4, r.stderr[-2000:]
    assert "Traceback" not in r.stderr and "OSError" not in r.stderr
    line = last_line(r.stderr)
    assert line.startswith("ratiowatch run: cannot start: metrics:") and f":{port}" in line
    assert "metrics.port" in line


def test_a_detector_option_the_detector_refuses_stops_the_start_with_exit_code_1(tmp_path):
    """Not a dead letter for every record: the daemon builds one detector before it reads any."""
    cfg = file_config(tmp_path, f"""[detector]
kind = "window"

[detector.options]
false_alarm_rate = 2.0

[dead_letter]
type = "file"
path = "{tmp_path / 'dead.jsonl'}"
""")
    r = subprocess.run(CLI + [str(cfg), "--no-metrics"], cwd=tmp_path, env=env(), capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 1, r.stderr[-2000:]
    assert "Traceback" not in r.stderr
    assert last_line(r.stderr) == f"{cfg}: detector: false_alarm_rate must be in (0, 1), e.g. 1e-4; got 2.0"
    assert not (tmp_path / "dead.jsonl").exists()


def test_sigterm_while_starting_is_a_clean_stop(tmp_path):
    data = tmp_path / "in.jsonl"
    data.write_text("".join(json.dumps({"key": "a", "timestamp": t, "value": 1.0}) + "\n" for t in range(10)))
    cfg = tmp_path / "f.toml"
    cfg.write_text(f"""
[source]
type = "file"
path = "{data}"
follow = true

[metrics]
enabled = false
""")
    proc = subprocess.Popen(CLI + [str(cfg)], cwd=tmp_path, env=env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    time.sleep(0.6)  # the interpreter is up; the command's imports and the daemon's set-up are not done
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-2000:]


def test_a_sink_that_cannot_open_its_file_is_one_line_not_a_traceback(tmp_path):
    # the handler that tells an unreachable broker from other failures asked kafka-python 3 for a
    # name it no longer has, and every failure to build a sink ended in that AttributeError
    (tmp_path / "alerts.jsonl").mkdir()
    cfg = file_config(tmp_path, f"""[[sinks]]
type = "jsonl"
path = "{tmp_path / 'alerts.jsonl'}"

[metrics]
enabled = false
""")
    r = subprocess.run(CLI + [str(cfg)], cwd=tmp_path, env=env(), capture_output=True, text=True, timeout=120)
    assert r.returncode != 0, r.stderr[-2000:]
    assert "Traceback" not in r.stderr and "AttributeError" not in r.stderr
    line = last_line(r.stderr)
    assert line.startswith("ratiowatch run:") and "Is a directory" in line and "alerts.jsonl" in line

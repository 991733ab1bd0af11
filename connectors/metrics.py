"""Prometheus metrics of the daemon, on its own ``CollectorRegistry``, plus /healthz and /readyz.

Label cardinality is bounded: alert kinds and bad-record reasons are small fixed sets, consumer lag
is per assigned partition, and latest scores are exported only for the keys in ``score_keys``.

Examples
--------
>>> m = Metrics(score_keys=["host-1"])
>>> m.records.inc(3)
>>> m.set_score("host-1", 0.5); m.set_score("host-2", 9.0)   # host-2 is not in the allow-list
>>> text = m.exposition().decode()
>>> "ratiowatch_records_total 3.0" in text, 'key="host-2"' in text
(True, False)
"""

from __future__ import annotations

import threading
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

#: seconds a metrics connection may stay silent (a request not sent, or sent only in part) before it is closed
IDLE_TIMEOUT_S = 10.0


class Metrics:
    """All daemon metrics; ``ready`` drives /readyz."""

    def __init__(self, score_keys: list[str] | None = None):
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.records = Counter("ratiowatch_records", "Records folded into detectors", registry=r)
        self.alerts = Counter("ratiowatch_alerts", "Alerts emitted", ["kind"], registry=r)
        self.bad_records = Counter("ratiowatch_bad_records", "Records sent to the dead-letter sink",
                                   ["reason"], registry=r)
        self.latency = Histogram("ratiowatch_batch_latency_seconds",
                                 "Time from a poll returning a batch to its alerts being acknowledged by every "
                                 "sink (to its hand-over to the sinks, for a batch without alerts)",
                                 buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
                                 registry=r)
        self.active_keys = Gauge("ratiowatch_active_keys", "Keys with a detector in memory", registry=r)
        self.consumer_lag = Gauge("ratiowatch_consumer_lag", "High watermark minus position",
                                  ["partition"], registry=r)
        self.checkpoint_age = Gauge("ratiowatch_checkpoint_age_seconds", "Seconds since the last checkpoint",
                                    registry=r)
        self.checkpoints = Counter("ratiowatch_checkpoints", "Key checkpoints written", registry=r)
        self.score = Gauge("ratiowatch_latest_score", "Latest change score (allow-listed keys only)", ["key"],
                           registry=r)
        self.score_keys = frozenset(score_keys or ())
        self.ready = False
        self._server: Any = None

    def set_score(self, key: str, value: float) -> None:
        if key in self.score_keys:
            self.score.labels(key=key).set(value)

    def set_lag(self, lags: dict[str, int]) -> None:
        for part, lag in lags.items():
            self.consumer_lag.labels(partition=part).set(lag)

    def forget_partitions(self, partitions: set[str]) -> None:
        """Drop the lag series of partitions this daemon no longer reads (revoked ones)."""
        for part in partitions:
            try:
                self.consumer_lag.remove(part)
            except KeyError:  # never reported
                pass

    def exposition(self) -> bytes:
        return generate_latest(self.registry)

    # --- HTTP server --------------------------------------------------------------------------
    def wsgi_app(self):
        """The WSGI application: ``/metrics`` is prometheus_client's own app (content negotiation,
        OpenMetrics, gzip), ``/healthz`` and ``/readyz`` are answered here."""
        from prometheus_client import make_wsgi_app

        prom = make_wsgi_app(self.registry)
        metrics = self

        def app(environ, start_response):
            path = environ.get("PATH_INFO", "/")
            if path == "/metrics":
                return prom(environ, start_response)
            if path == "/healthz":
                code, body = "200 OK", b"ok\n"
            elif path == "/readyz":
                code, body = ("200 OK", b"ready\n") if metrics.ready else ("503 Service Unavailable", b"not ready\n")
            else:
                code, body = "404 Not Found", b"not found; try /metrics, /healthz or /readyz\n"
            start_response(code, [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
            return [body]

        return app

    def serve(self, host: str = "127.0.0.1", port: int = 9108) -> int:
        """Start serving in a daemon thread; returns the bound port (``port=0`` picks a free one).
        Raises OSError when the address is in use.

        ``host`` may be an IPv6 address (``"::1"``): the socket's address family is the one
        ``getaddrinfo`` gives for it. A connection that sends nothing for :data:`IDLE_TIMEOUT_S`
        (a half-sent request, a client that never asks) is closed, so idle connections do not
        each hold a thread for good."""
        import socket
        from socketserver import ThreadingMixIn
        from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0][0]

        class Server(ThreadingMixIn, WSGIServer):
            daemon_threads = True
            address_family = family

        class QuietHandler(WSGIRequestHandler):
            timeout = IDLE_TIMEOUT_S  # on the connection's socket: each read and write

            def handle(self):
                try:
                    super().handle()
                except (TimeoutError, ConnectionError):  # idle or gone: close it, nothing worth a traceback
                    self.close_connection = True

            def log_message(self, fmt, *args):  # scrapes are not worth a log line each
                pass

        self._server = make_server(host, port, self.wsgi_app(), Server, handler_class=QuietHandler)
        threading.Thread(target=self._server.serve_forever, name="metrics-http", daemon=True).start()
        return self._server.server_address[1]

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

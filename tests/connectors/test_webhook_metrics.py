"""Webhook sink against a local HTTP server (up, failing, refusing) and the metrics endpoint."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest

from ratiowatch.connectors.metrics import Metrics
from ratiowatch.connectors.sinks import WebhookSink
from ratiowatch.connectors.records import Alert


def alert(i: int = 0) -> Alert:
    return Alert.from_alarm(key=f"k{i}", detector="d", change_index=i, alarm_index=i + 5, timestamp=float(i),
                            score=2.0, threshold=1.0)


def test_webhook_delivers_alert_json(http_server):
    sink = WebhookSink(http_server["url"], retries=2, backoff_s=0.0)
    assert sink.deliver([alert(1), alert(2)]) == []
    assert [Alert(**b) for b in http_server["bodies"]] == [alert(1), alert(2)]


def test_webhook_down_retries_a_bounded_number_of_times_with_backoff_then_gives_up(http_server):
    http_server["code"] = 503
    sleeps = []
    sink = WebhookSink(http_server["url"], retries=3, backoff_s=0.1, sleep=sleeps.append, seed=0)
    failed = sink.deliver([alert(1)])
    assert http_server["hits"] == 4
    # exponential backoff plus a jitter below backoff_s / 2
    assert len(sleeps) == 3 and all(b <= s < b + 0.05 for s, b in zip(sleeps, [0.1, 0.2, 0.4]))
    assert len(set(round(s - b, 9) for s, b in zip(sleeps, [0.1, 0.2, 0.4]))) == 3  # jittered, not fixed
    assert len(failed) == 1 and failed[0][0] == alert(1) and "HTTP 503 after 4 attempt(s)" in failed[0][1]


def test_webhook_honours_retry_after_up_to_its_cap():
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    hits = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            self.rfile.read(int(self.headers["Content-Length"]))
            hits.append(self.headers.get("Idempotency-Key"))
            code, extra = [(429, ("Retry-After", "7")), (503, ("Retry-After", "3600")), (200, None)][len(hits) - 1]
            self.send_response(code)
            if extra:
                self.send_header(*extra)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *a):
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        sleeps = []
        sink = WebhookSink(f"http://127.0.0.1:{srv.server_address[1]}/a", retries=3, backoff_s=0.1,
                           sleep=sleeps.append, max_wait_s=60.0)
        assert sink.deliver([alert(3)]) == []
    finally:
        srv.shutdown()
        srv.server_close()
    assert sleeps == [7.0, 60.0]  # the server's Retry-After, capped at max_wait_s
    assert hits == [alert(3).alert_id] * 3


def test_webhook_client_error_is_not_retried(http_server):
    http_server["code"] = 400
    sink = WebhookSink(http_server["url"], retries=3, backoff_s=0.0)
    assert len(sink.deliver([alert(1)])) == 1 and http_server["hits"] == 1


def test_webhook_connection_refused_gives_up_quickly(free_port):
    sink = WebhookSink(f"http://127.0.0.1:{free_port}/x", retries=2, backoff_s=0.0, timeout_s=1.0)
    failed = sink.deliver([alert(1)])
    assert len(failed) == 1 and "after 3 attempt(s)" in failed[0][1]


def test_metrics_server_exposes_series_health_and_readiness(free_port):
    m = Metrics(score_keys=["a"])
    port = m.serve("127.0.0.1", free_port)
    try:
        base = f"http://127.0.0.1:{port}"
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(base + "/readyz", timeout=5)
        assert err.value.code == 503
        m.ready = True
        m.records.inc(5)
        m.alerts.labels(kind="changepoint").inc()
        m.bad_records.labels(reason="non_finite").inc(2)
        m.latency.observe(0.003)
        m.active_keys.set(2)
        m.set_lag({"t:0": 7})
        m.checkpoint_age.set(1.5)
        m.set_score("a", 0.25)
        m.set_score("not-allowed", 1.0)
        assert urllib.request.urlopen(base + "/readyz", timeout=5).status == 200
        assert urllib.request.urlopen(base + "/healthz", timeout=5).read() == b"ok\n"
        text = urllib.request.urlopen(base + "/metrics", timeout=5).read().decode()
    finally:
        m.close()
    for line in ["ratiowatch_records_total 5.0",
                 'ratiowatch_alerts_total{kind="changepoint"} 1.0',
                 'ratiowatch_bad_records_total{reason="non_finite"} 2.0',
                 "ratiowatch_batch_latency_seconds_count 1.0",
                 "ratiowatch_active_keys 2.0",
                 'ratiowatch_consumer_lag{partition="t:0"} 7.0',
                 "ratiowatch_checkpoint_age_seconds 1.5",
                 'ratiowatch_latest_score{key="a"} 0.25']:
        assert line in text, line
    assert "not-allowed" not in text


def test_webhook_sends_the_alert_id_as_idempotency_key_on_every_attempt(free_port):
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    seen = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - http.server API
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen.append((self.headers.get("Idempotency-Key"), body["alert_id"], self.headers.get("X-Team")))
            self.send_response(503 if len(seen) == 1 else 200)  # first attempt fails: a retry follows
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *a):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", free_port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        sink = WebhookSink(f"http://127.0.0.1:{free_port}/hook", retries=2, backoff_s=0.0, headers={"X-Team": "ops"})
        assert sink.deliver([alert(1), alert(2)]) == []
    finally:
        server.shutdown()
        server.server_close()
    assert [k for k, _, _ in seen] == [alert(1).alert_id, alert(1).alert_id, alert(2).alert_id]
    assert all(k == body_id and team == "ops" for k, body_id, team in seen)


def test_metrics_endpoint_negotiates_openmetrics_and_gzip(free_port):
    import gzip

    m = Metrics()
    port = m.serve("127.0.0.1", free_port)
    try:
        m.records.inc(2)
        req = urllib.request.Request(f"http://127.0.0.1:{port}/metrics",
                                     headers={"Accept": "application/openmetrics-text; version=1.0.0",
                                              "Accept-Encoding": "gzip"})
        with urllib.request.urlopen(req, timeout=5) as resp:
            ctype, enc, body = resp.headers["Content-Type"], resp.headers.get("Content-Encoding"), resp.read()
        assert ctype.startswith("application/openmetrics-text") and enc == "gzip"
        text = gzip.decompress(body).decode()
        assert "ratiowatch_records_total 2.0" in text and text.rstrip().endswith("# EOF")
    finally:
        m.close()

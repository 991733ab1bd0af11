"""The webhook sink against servers that misbehave: slow or huge bodies, odd Retry-After values,
redirects; header values that cannot be sent; a URL holding a secret."""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from http.server import BaseHTTPRequestHandler

import pytest

from http_util import local_http_server

from ratiowatch.connectors.records import Alert
from ratiowatch.connectors.sinks import RESPONSE_BODY_LIMIT, WebhookSink


def alert(i: int = 0) -> Alert:
    return Alert.from_alarm(key=f"k{i}", detector="d", change_index=i, alarm_index=i + 5, timestamp=float(i),
                            score=2.0, threshold=1.0)


@pytest.fixture
def server():
    """A 127.0.0.1 server whose answer is ``state['answer'](handler)``; counts hits."""
    state = {"hits": 0, "done": threading.Event(), "sent": 0}

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self):  # noqa: N802
            self.rfile.read(int(self.headers["Content-Length"]))
            state["hits"] += 1
            state["seen_headers"] = dict(self.headers)
            try:
                state["answer"](self)
            except OSError:
                pass
            finally:
                state["done"].set()

        def log_message(self, *a):
            pass

    with local_http_server(Handler, "/hook") as url:
        state["url"] = url
        yield state


def status(code: int, *headers: tuple[str, str]):
    def answer(h):
        h.send_response(code)
        for k, v in headers:
            h.send_header(k, v)
        h.send_header("Content-Length", "0")
        h.end_headers()
    return answer


def test_timeout_s_bounds_an_attempt_whose_body_trickles_in(server):
    def trickle(h):
        h.send_response(200)
        h.send_header("Content-Length", "100")
        h.end_headers()
        for _ in range(100):  # 10 s for the whole body
            h.wfile.write(b"x")
            h.wfile.flush()
            time.sleep(0.1)

    server["answer"] = trickle
    sink = WebhookSink(server["url"], timeout_s=0.5, retries=0)
    t0 = time.monotonic()
    assert sink.deliver([alert()]) == []  # the status was 200: delivered
    assert time.monotonic() - t0 < 3.0
    ports = []

    def small(h):
        ports.append(h.client_address[1])
        h.send_response(200)
        h.send_header("Content-Length", "11")
        h.end_headers()
        h.wfile.write(b'{"ok":true}')

    server["answer"] = small
    # a fresh connection after the abandoned one, kept for the next alerts (a small body is read)
    assert sink.deliver([alert(1), alert(2), alert(3)]) == []
    assert len(ports) == 3 and len(set(ports)) == 1


def test_a_huge_response_body_is_not_read(server):
    size = 64 << 20

    def huge(h):
        h.send_response(200)
        h.send_header("Content-Length", str(size))
        h.end_headers()
        chunk = b"y" * (1 << 20)
        for _ in range(size >> 20):
            h.wfile.write(chunk)
            server["sent"] += len(chunk)

    server["answer"] = huge
    sink = WebhookSink(server["url"], timeout_s=5.0, retries=0)
    assert sink.deliver([alert()]) == []
    assert server["done"].wait(10)
    assert server["sent"] < size  # the client closed the connection after a bounded read
    assert RESPONSE_BODY_LIMIT <= 1 << 20


def test_a_malformed_retry_after_falls_back_to_the_backoff_schedule(server):
    server["answer"] = status(503, ("Retry-After", "soon"))
    sleeps = []
    sink = WebhookSink(server["url"], retries=2, backoff_s=0.1, jitter_s=0.0, sleep=sleeps.append)
    failed = sink.deliver([alert()])
    assert server["hits"] == 3 and sleeps == [0.1, 0.2]
    assert len(failed) == 1 and "HTTP 503 after 3 attempt(s)" in failed[0][1]


def test_retry_after_is_honoured_only_with_429_and_503(server):
    server["answer"] = status(500, ("Retry-After", "3"))
    sleeps = []
    sink = WebhookSink(server["url"], retries=2, backoff_s=0.1, jitter_s=0.0, sleep=sleeps.append)
    assert len(sink.deliver([alert()])) == 1
    assert sleeps == [0.1, 0.2]


def test_a_413_with_retry_after_is_a_permanent_failure(server):
    server["answer"] = status(413, ("Retry-After", "1"))
    sink = WebhookSink(server["url"], retries=2, backoff_s=0.0, sleep=lambda s: None)
    failed = sink.deliver([alert()])
    assert server["hits"] == 1 and "HTTP 413 after 1 attempt(s)" in failed[0][1]


def test_a_redirect_reason_names_its_location_without_secrets(server):
    server["answer"] = status(307, ("Location", "https://u:pw@elsewhere.example/new?sig=xyz"))
    sink = WebhookSink(server["url"], retries=2, backoff_s=0.0)
    failed = sink.deliver([alert()])
    assert server["hits"] == 1
    reason = failed[0][1]
    assert "HTTP 307 redirect to https://***@elsewhere.example/new?***" in reason
    assert "pw" not in reason and "sig=xyz" not in reason


def test_the_url_user_password_and_query_are_left_out_of_reasons_and_logs(free_port, caplog):
    sink = WebhookSink(f"http://user:s3cret@127.0.0.1:{free_port}/hook?token=abc", retries=1, backoff_s=0.0,
                       timeout_s=1.0)
    with caplog.at_level(logging.WARNING, logger="ratiowatch.sinks"):
        failed = sink.deliver([alert()])
    reason = failed[0][1]
    assert f"http://***@127.0.0.1:{free_port}/hook?***" in reason
    logged = " ".join(f"{r.getMessage()} {r.__dict__}" for r in caplog.records)
    for secret in ("s3cret", "token=abc", "user:"):
        assert secret not in reason and secret not in logged


@pytest.mark.parametrize("headers,problem", [
    ({"X-Token": "abc\r\nX-Evil: 1"}, "line break"),
    ({"X-Name": "caf\u00e9\u2603"}, "Latin-1"),
    ({"X-Ratio": 1.5}, "must be a string or an integer"),
    ({"Bad Name": "x"}, "not an HTTP token"),
])
def test_a_header_that_cannot_be_sent_is_refused_when_the_sink_is_made(headers, problem):
    with pytest.raises(ValueError, match=problem):
        WebhookSink("http://127.0.0.1:9/hook", headers=headers)


def test_an_integer_header_value_is_sent_as_its_digits(server):
    server["answer"] = status(200)
    assert WebhookSink(server["url"], retries=0, headers={"X-Count": 7}).deliver([alert(0)]) == []
    assert server["seen_headers"]["X-Count"] == "7"


def test_an_item_that_cannot_be_posted_fails_alone_with_its_reason(server):
    server["answer"] = status(200)
    odd = dataclasses.replace(alert(0), alert_id="x\r\ny")  # its Idempotency-Key cannot be a header
    failed = WebhookSink(server["url"], retries=0).deliver([odd, alert(1)])
    assert [it for it, _ in failed] == [odd] and "ValueError" in failed[0][1]
    assert server["hits"] == 1

"""Alert and dead-letter sinks: JSONL file / stdout / stderr, Kafka topic, webhook (HTTP POST).

A sink delivers items that have ``to_json()`` and ``key`` (``Alert`` or ``BadRecord``).
``deliver(items)`` returns the items it gave up on, as ``(item, reason)``; ``flush()`` blocks until
everything handed over is acknowledged (file fsynced, Kafka acks received) and returns late failures
the same way. The daemon commits source offsets only after every sink's ``flush()`` returned. Items
a sink with ``dead_letter_on_failure = True`` (webhook) gave up on go to the dead-letter sink; for the
other sinks a failure means the backend is down and the daemon waits and retries (backpressure).

Examples
--------
>>> import io
>>> from ratiowatch.connectors.records import Alert
>>> out = io.StringIO()
>>> sink = StreamSink(out)
>>> a = Alert.from_alarm(key="k", detector="d", change_index=1, alarm_index=2, timestamp=0.0,
...                      score=1.0, threshold=0.5)
>>> sink.deliver([a]), sink.flush()
([], [])
>>> Alert.from_json(out.getvalue()) == a
True
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any, Protocol, TextIO

log = logging.getLogger("ratiowatch.sinks")


class Deliverable(Protocol):
    key: Any

    def to_json(self) -> str: ...


Failure = tuple[Any, str]


class Sink(Protocol):
    name: str

    def deliver(self, items: list[Any]) -> list[Failure]: ...

    def flush(self) -> list[Failure]: ...

    def close(self) -> None: ...


class JsonlFileSink:
    """Appends one JSON document per line; ``flush()`` fsyncs.

    On open, a torn last line (a crash mid-write) is cut off: it was never acknowledged, so the
    replay after restart writes it again.
    """

    def __init__(self, path: str | Path, name: str = "jsonl"):
        self.path = Path(path)
        self.name = name
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._repair_torn_tail()
        self._fh = open(self.path, "a", encoding="utf-8")

    def _repair_torn_tail(self) -> None:
        if not self.path.exists() or self.path.stat().st_size == 0:
            return
        with open(self.path, "rb+") as fh:
            fh.seek(-1, os.SEEK_END)
            if fh.read(1) == b"\n":
                return
            data_end = fh.seek(0, os.SEEK_END)
            # scan back for the last newline (tail is short: one torn JSON line)
            pos = data_end
            step = 4096
            cut = 0
            while pos > 0:
                start = max(0, pos - step)
                fh.seek(start)
                chunk = fh.read(pos - start)
                i = chunk.rfind(b"\n")
                if i >= 0:
                    cut = start + i + 1
                    break
                pos = start
            fh.truncate(cut)
            log.warning("cut a torn last line from %s", self.path, extra={"path": str(self.path), "bytes": data_end - cut})

    def deliver(self, items: list[Any]) -> list[Failure]:
        if items:
            self._fh.write("".join(it.to_json() + "\n" for it in items))
            self._fh.flush()
        return []

    def flush(self) -> list[Failure]:
        self._fh.flush()
        os.fsync(self._fh.fileno())
        return []

    def close(self) -> None:
        if not self._fh.closed:
            self.flush()
            self._fh.close()


_fd_locks: dict[int, threading.Lock] = {}
_fd_locks_guard = threading.Lock()


def _fd_lock(fd: int) -> threading.Lock:
    with _fd_locks_guard:
        return _fd_locks.setdefault(fd, threading.Lock())


class StreamSink:
    """Writes JSON lines to a text stream (stdout / stderr).

    A stream with a file descriptor (the process's stdout or stderr) is written with ``os.write``,
    past the stream's buffer: a write into a pipe nobody reads blocks only the delivery thread,
    in the system call, holding no buffer of the interpreter's, so :meth:`close` and the
    interpreter's exit (which flushes ``sys.stdout``) have nothing to wait for and the daemon can
    stop without that sink's acknowledgement. Once ``deliver`` returns, the lines are in the
    kernel's hands, as after a flush. Other streams (``io.StringIO``) are written as streams.
    """

    def __init__(self, stream: TextIO | None = None, name: str = "stdout"):
        self.stream = stream if stream is not None else sys.stdout
        self.name = name
        self._fd: int | None = None
        try:
            fd = self.stream.fileno()
        except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is both
            fd = None
        if fd is not None:
            self.stream.flush()  # what was printed before goes out before our lines
            self._fd = fd
            self._encoding = getattr(self.stream, "encoding", None) or "utf-8"
            self._lock = _fd_lock(fd)  # two sinks on one descriptor: whole batches, not interleaved

    def deliver(self, items: list[Any]) -> list[Failure]:
        if not items:
            return []
        text = "".join(it.to_json() + "\n" for it in items)
        if self._fd is None:
            self.stream.write(text)
            return []
        data = memoryview(text.encode(self._encoding, "backslashreplace"))
        with self._lock:
            while data:
                data = data[os.write(self._fd, data):]
        return []

    def flush(self) -> list[Failure]:
        if self._fd is None:
            self.stream.flush()
        return []

    def close(self) -> None:
        # nothing of ours is buffered on the descriptor path; flushing the stream there could wait
        # forever on a reader that never reads
        if self._fd is None:
            self.stream.flush()


class KafkaSink:
    """Produces each item to a topic, keyed by the record key, with acks=all.

    ``deliver`` only hands messages to the producer; ``flush`` waits for the acknowledgements and
    returns the ones that failed.
    """

    def __init__(self, topic: str, bootstrap_servers: list[str], *, timeout_s: float = 10.0,
                 options: dict[str, Any] | None = None, name: str = "kafka"):
        from kafka import KafkaProducer  # imported here: the daemon without Kafka does not need it

        self.topic = topic
        self.name = name
        self.timeout_s = timeout_s
        # max_block_ms bounds send() when the broker is unreachable (metadata wait); the daemon retries
        self._opts = {"bootstrap_servers": bootstrap_servers, "acks": "all", "linger_ms": 5, "retries": 5,
                      "request_timeout_ms": int(timeout_s * 1000), "max_block_ms": int(timeout_s * 1000)}
        self._opts.update(options or {})
        self._cls = KafkaProducer
        self._producer = KafkaProducer(**self._opts)
        self._pending: list[tuple[Any, Any]] = []
        self._broken = False

    def _reconnect(self) -> None:
        # After a failed flush the producer may hold state the broker no longer knows (a restarted
        # broker, an expired producer id): start a fresh one. Repeats carry the same alert ids.
        try:
            self._producer.close(timeout=0)
        except Exception:  # noqa: BLE001
            pass
        self._producer = self._cls(**self._opts)
        self._broken = False

    def deliver(self, items: list[Any]) -> list[Failure]:
        failures: list[Failure] = []
        if self._broken and items:
            try:
                self._reconnect()
            except Exception as exc:  # noqa: BLE001 - broker still unreachable
                return [(it, f"kafka producer reconnect failed: {type(exc).__name__}: {exc}") for it in items]
        for it in items:
            try:
                # a key that is not valid Unicode (a lone surrogate) is written escaped: one item's key
                # must not stop the worker that delivers every item (the dead-letter sink's above all)
                key = it.key.encode("utf-8", "backslashreplace") if isinstance(it.key, str) else None
                fut = self._producer.send(self.topic, key=key, value=it.to_json().encode())
            except Exception as exc:  # noqa: BLE001 - buffer full / serialisation: give up on this item
                failures.append((it, f"kafka send failed: {type(exc).__name__}: {exc}"))
                continue
            self._pending.append((it, fut))
        return failures

    def flush(self) -> list[Failure]:
        failures: list[Failure] = []
        try:
            self._producer.flush(timeout=self.timeout_s)
        except Exception as exc:  # noqa: BLE001 - timeouts are judged per future below
            log.warning("kafka sink flush: %s", exc)
        for it, fut in self._pending:
            try:
                fut.get(timeout=0.001 if fut.is_done else self.timeout_s)
            except Exception as exc:  # noqa: BLE001
                failures.append((it, f"kafka delivery failed: {type(exc).__name__}: {exc}"))
        self._pending.clear()
        if failures:
            self._broken = True
        return failures

    def close(self) -> None:
        self.flush()
        self._producer.close(timeout=self.timeout_s)


def _webhook_retry(retries: int, backoff_s: float, jitter_s: float, max_wait_s: float, sleep, seed: int | None):
    """urllib3's ``Retry`` with this sink's schedule: before retry ``k`` (1, 2, ...) wait
    ``backoff_s * 2**(k-1)`` plus a uniform jitter in ``[0, jitter_s)``, or what the server's
    ``Retry-After`` asks (429, 503); every wait capped at ``max_wait_s``."""
    import random

    from urllib3.util import Retry

    rng = random.Random(seed)  # a private generator: jitter only spreads retries of many daemons

    class WebhookRetry(Retry):
        def get_backoff_time(self) -> float:
            n = 0
            for h in reversed(self.history):
                if h.redirect_location is not None:
                    break
                n += 1
            if n == 0:
                return 0.0
            return min(max_wait_s, backoff_s * 2 ** (n - 1) + (rng.random() * jitter_s if jitter_s > 0 else 0.0))

        def sleep(self, response=None) -> None:
            wait = self.get_retry_after(response) if (self.respect_retry_after_header and response is not None) \
                else None
            sleep(min(max_wait_s, wait) if wait is not None else self.get_backoff_time())

    return WebhookRetry(total=retries, connect=retries, read=retries, status=retries, other=retries, redirect=0,
                        allowed_methods=None,  # POST too: each alert carries an Idempotency-Key
                        status_forcelist=frozenset({408, 429, *range(500, 600)}), raise_on_status=False,
                        raise_on_redirect=False, respect_retry_after_header=True)


class WebhookSink:
    """HTTP POST of each item as JSON (urllib3: pooled connections, retries by its ``Retry``).

    2xx is success; 4xx other than 408/429 is a permanent failure (no retry); anything else
    (connection refused, timeout, 5xx) is retried ``retries`` times: retry ``k`` waits
    ``backoff_s * 2**(k-1)`` plus a random jitter below ``jitter_s`` (default ``backoff_s / 2``,
    so that many daemons do not retry in step), or the ``Retry-After`` the server sent with a 429
    or 503; no wait is longer than ``max_wait_s``. An alert is posted with an ``Idempotency-Key``
    header equal to its ``alert_id``.
    """

    dead_letter_on_failure = True

    def __init__(self, url: str, *, timeout_s: float = 5.0, retries: int = 3, backoff_s: float = 0.5,
                 headers: dict[str, str] | None = None, name: str = "webhook", sleep=time.sleep,
                 jitter_s: float | None = None, max_wait_s: float = 60.0, seed: int | None = None):
        import urllib3

        if not url.startswith(("http://", "https://")):
            raise ValueError(f"webhook url must start with http:// or https://; got {url!r}")
        self.url = url
        self.name = name
        self.timeout_s = timeout_s
        self.retries = retries
        self.backoff_s = backoff_s
        self.headers = {"Content-Type": "application/json", **(headers or {})}
        self._retry = _webhook_retry(retries, backoff_s, backoff_s / 2 if jitter_s is None else jitter_s,
                                     max_wait_s, sleep, seed)
        self._http = urllib3.PoolManager(timeout=urllib3.Timeout(connect=timeout_s, read=timeout_s),
                                         retries=self._retry)

    def _post(self, body: bytes, headers: dict[str, str]) -> tuple[str | None, int]:
        """(None on success else the reason, attempts made); raises nothing."""
        from urllib3.exceptions import HTTPError, MaxRetryError

        try:
            resp = self._http.request("POST", self.url, body=body, headers=headers, preload_content=True)
        except MaxRetryError as exc:
            r = exc.reason
            return f"{type(r).__name__}: {r}", self.retries + 1
        except (HTTPError, OSError) as exc:
            return f"{type(exc).__name__}: {exc}", 1
        attempts = 1 + (len(resp.retries.history) if resp.retries is not None else 0)
        if 200 <= resp.status < 300:
            return None, attempts
        return f"HTTP {resp.status}", attempts

    def deliver(self, items: list[Any]) -> list[Failure]:
        failures: list[Failure] = []
        for it in items:
            body = it.to_json().encode()
            # an alert's id as the Idempotency-Key header: a receiver can drop the repeats that
            # retries and at-least-once replays produce (same alert -> same key)
            ident = getattr(it, "alert_id", None)
            headers = {**self.headers, "Idempotency-Key": ident} if isinstance(ident, str) else self.headers
            reason, tries = self._post(body, headers)
            if reason is not None:
                log.warning("webhook gave up", extra={"url": self.url, "reason": reason, "attempts": tries})
                failures.append((it, f"webhook {self.url}: {reason} after {tries} attempt(s)"))
        return failures

    def flush(self) -> list[Failure]:
        return []

    def close(self) -> None:
        self._http.clear()

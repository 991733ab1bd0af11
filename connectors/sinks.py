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

import errno
import json
import logging
import os
import re
import select
import stat
import sys
import threading
import time
from pathlib import Path
from typing import Any, Protocol, TextIO
from urllib.parse import urlsplit, urlunsplit

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


#: the longest unterminated last line that the repair on open cuts off: far above any line this sink
#: writes (an alert is about 250 bytes; a dead letter keeps at most 4,096 characters of a message,
#: 6 bytes each when escaped), far below a file that is not ours
MAX_TORN_TAIL = 1 << 20


class JsonlFileSink:
    """Appends one JSON document per line; ``flush()`` fsyncs.

    On open, an unterminated last line is repaired: one that is a whole JSON document (a file
    written by another tool without a final newline) is terminated with a newline; one that is
    not, up to :data:`MAX_TORN_TAIL` bytes, is a torn line (a crash mid-write) and is cut off (it was
    never acknowledged, so the replay after restart writes it again). A longer unterminated tail,
    or a file without any newline that does not start like a JSON line, is not what this sink
    writes: the open is refused (ValueError naming the file) rather than the file cut.

    A failed write or fsync (disk full, file too large, I/O error) cuts the file back to the end of
    the last acknowledged line, so no torn line is left mid-file, and returns the unacknowledged
    items as failures: the delivery thread retries them until the disk takes them again.
    A path that is not a regular file (``/dev/null``, a FIFO, a terminal) is written as is:
    no fsync, no repair, no cut.

    The sink has no size limit of its own; it follows the rotation of its file. Before each delivery
    it compares the file at its path with the one it has open: when the file was renamed away
    (logrotate's ``create`` mode) or removed, it fsyncs what it wrote to the old file, closes it and
    creates the file anew under the path; when the file was truncated in place (``copytruncate``),
    the end of the last acknowledged line moves back to the file's new size, so a later cut-back
    cannot extend the file with zero bytes.
    """

    def __init__(self, path: str | Path, name: str = "jsonl"):
        self.path = Path(path)
        self.name = name
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            regular = stat.S_ISREG(self.path.stat().st_mode)
        except FileNotFoundError:
            regular = True
        if regular:
            self._repair_torn_tail()
        self._fd: int | None = None
        self._acked = 0                # the file's size after the last acknowledged line
        self._pending: list[Any] = []  # written since the last acknowledged flush
        self._open()

    def _open(self) -> None:
        """Open the file for appending; on a regular file, cut what follows the last acknowledged line
        (a failed write may have left part of a line) when it is still the file written before."""
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o666)
        try:
            st = os.fstat(fd)
            self._regular = stat.S_ISREG(st.st_mode)
            if self._regular:
                same = getattr(self, "_ident", None) == (st.st_dev, st.st_ino)
                if same and st.st_size > self._acked:
                    os.ftruncate(fd, self._acked)
                elif not same:
                    self._acked = st.st_size
                self._ident = (st.st_dev, st.st_ino)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd

    def _follow_rotation(self) -> None:
        """Close the open file when the path no longer names it (renamed away or removed) so that the
        next :meth:`_open` creates it afresh; take a truncation in place into account. Raises OSError
        when what was written to the old file cannot be made durable (the caller cuts it back)."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            st = None
        except OSError:  # the path cannot be looked at now (no search permission): keep writing where we are
            return
        if st is not None and (st.st_dev, st.st_ino) == self._ident:
            if st.st_size < self._acked:
                # truncated in place (copytruncate): a cut-back to the old end would append zero bytes
                self._acked = st.st_size
            return
        if self._pending:
            # the lines written since the last flush stay in the old file: make them durable there,
            # so they are acknowledged and not written again to the new one
            assert self._fd is not None
            os.fsync(self._fd)
            self._pending = []
        self._close_fd()
        log.info("%s was rotated: writing to a new file under its name", self.path, extra={"path": str(self.path)})

    def _repair_torn_tail(self) -> None:
        if not self.path.exists() or self.path.stat().st_size == 0:
            return
        with open(self.path, "rb+") as fh:
            fh.seek(-1, os.SEEK_END)
            if fh.read(1) == b"\n":
                return
            data_end = fh.seek(0, os.SEEK_END)
            # scan back for the last newline, no further than a torn line can be long
            pos = data_end
            step = 4096
            cut = None
            while pos > 0 and data_end - pos <= MAX_TORN_TAIL:
                start = max(0, pos - step)
                fh.seek(start)
                chunk = fh.read(pos - start)
                i = chunk.rfind(b"\n")
                if i >= 0:
                    cut = start + i + 1
                    break
                pos = start
            if cut is None and pos == 0:
                cut = 0  # no newline at all, the whole file within the bound
            if cut is None or data_end - cut > MAX_TORN_TAIL:
                raise ValueError(
                    f"{self.path}: its last line is unterminated and longer than {MAX_TORN_TAIL} bytes: not a "
                    "line this JSONL sink writes, so it is not cut; check the sink's path, or move the file away "
                    "(or end it with a newline) to append to it")
            fh.seek(cut)
            tail = fh.read(data_end - cut)
            if _is_json(tail):  # a whole document without its newline: keep it, terminate it
                fh.seek(data_end)
                fh.write(b"\n")
                log.warning("terminated the last line of %s with a newline", self.path,
                            extra={"path": str(self.path), "bytes": 1})
                return
            if cut == 0 and not tail.lstrip().startswith(b"{"):
                raise ValueError(
                    f"{self.path}: has no newline and is not JSON ({data_end} bytes): not a file this JSONL sink "
                    "writes, so it is not cut; check the sink's path, or move the file away to start a new one")
            fh.truncate(cut)
            log.warning("cut a torn last line of %d bytes from %s", data_end - cut, self.path,
                        extra={"path": str(self.path), "bytes": data_end - cut})

    def _failed(self, items: list[Any], exc: OSError) -> list[Failure]:
        """A write or fsync failed: cut the file back to the last acknowledged line and give every
        unacknowledged item back as a failure (the delivery thread retries them)."""
        failed = self._pending + list(items)
        self._pending = []
        reason = f"writing {self.path} failed: {type(exc).__name__}: {exc.strerror or exc}"
        if self._fd is not None and self._regular:
            try:
                os.ftruncate(self._fd, self._acked)
            except OSError as exc2:  # reopened (and cut) at the next delivery
                log.warning("cannot cut back a failed write", extra={"path": str(self.path), "error": str(exc2)})
                self._close_fd()
        return [(it, reason) for it in failed]

    def _close_fd(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass

    def deliver(self, items: list[Any]) -> list[Failure]:
        if not items:
            return []
        data = memoryview("".join(it.to_json() + "\n" for it in items).encode("utf-8"))
        try:
            if self._fd is not None and self._regular:
                self._follow_rotation()
            if self._fd is None:
                self._open()
            assert self._fd is not None
            while data:
                data = data[os.write(self._fd, data):]
        except OSError as exc:
            return self._failed(items, exc)
        self._pending.extend(items)
        return []

    def flush(self) -> list[Failure]:
        if self._fd is None:
            return self._failed([], OSError(errno.EBADF, "not open after a failed write")) if self._pending else []
        if self._regular:
            try:
                os.fsync(self._fd)
                self._acked = os.fstat(self._fd).st_size
            except OSError as exc:
                return self._failed([], exc)
        self._pending = []
        return []

    def close(self) -> None:
        if self._fd is not None:
            failures = self.flush()
            if failures:
                log.warning("closing a file sink with unacknowledged items",
                            extra={"path": str(self.path), "items": len(failures), "reason": failures[0][1]})
            self._close_fd()


def _is_json(data: bytes) -> bool:
    """Is ``data`` one whole JSON document?"""
    try:
        json.loads(data)
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        return False
    return True


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
    A descriptor in non-blocking mode (a pipe shared with a parent that set ``O_NONBLOCK``) is
    waited on when full and written on from where the last write stopped: no line is torn.
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
                try:
                    data = data[os.write(self._fd, data):]
                except BlockingIOError:  # a non-blocking descriptor (shared with a parent) is full:
                    select.select([], [self._fd], [], 1.0)  # wait for room, then write the rest
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


#: response bodies are not used: at most this much of one is read (and dropped) so that its
#: connection can serve the next request; the rest of a longer body closes the connection
RESPONSE_BODY_LIMIT = 64 * 1024

_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+\Z")


def _header_text(value: Any) -> Any:
    """An integer header value as its decimal digits (TOML ``X-Count = 1``); any other value as it is."""
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


def header_problem(name: Any, value: Any) -> str | None:
    """Why ``name: value`` cannot be sent as an HTTP header, or None.

    >>> header_problem("X-Token", "abc"), header_problem("X-Token", "a\\r\\nX-Evil: 1")
    (None, 'value of header X-Token contains a line break (CR or LF)')
    """
    if not isinstance(name, str) or not _TOKEN.match(name):
        return f"header name {name!r} is not an HTTP token (letters, digits and !#$%&'*+-.^_`|~)"
    value = _header_text(value)
    if not isinstance(value, str):
        return f"value of header {name} must be a string or an integer; got {type(value).__name__} {value!r} (quote it)"
    if "\r" in value or "\n" in value:
        return f"value of header {name} contains a line break (CR or LF)"
    try:
        value.encode("latin-1")
    except UnicodeEncodeError:
        return (f"value of header {name} has characters beyond Latin-1 ({value!r}); HTTP header values are "
                "bytes: percent-encode or base64 it")
    return None


def redact_url(url: str) -> str:
    """``url`` without what can be a secret: the user and password, the query string, the fragment.

    >>> redact_url("https://user:pw@hooks.example.com/a/b?token=abc#x")
    'https://***@hooks.example.com/a/b?***'
    """
    try:
        p = urlsplit(url)
    except ValueError:
        return "(unparseable url)"
    netloc = p.netloc
    if "@" in netloc:
        netloc = "***@" + netloc.rpartition("@")[2]
    return urlunsplit((p.scheme, netloc, p.path, "***" if p.query else "", ""))


def _url_secrets(url: str) -> list[str]:
    """The parts of ``url`` that :func:`redact_url` hides, longest first (to scrub them from messages)."""
    try:
        p = urlsplit(url)
    except ValueError:
        return [url]
    parts = [p.query, p.fragment]
    if "@" in p.netloc:
        userinfo = p.netloc.rpartition("@")[0]
        password = userinfo.partition(":")[2]
        parts += [userinfo, *([password] if len(password) >= 4 else [])]  # shorter: scrubbed in the whole
    return sorted({s for s in parts if s}, key=len, reverse=True)


class _ScrubUrlSecrets(logging.Filter):
    """Hides the secrets of webhook URLs (:func:`_url_secrets`) in urllib3's own log lines (its
    retry warnings quote the request's path and query string)."""

    def __init__(self) -> None:
        super().__init__()
        self.secrets: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        if self.secrets:
            msg = record.getMessage()
            scrubbed = msg
            for s in sorted(self.secrets, key=len, reverse=True):
                scrubbed = scrubbed.replace(s, "***")
            if scrubbed != msg:
                record.msg, record.args = scrubbed, ()
        return True


_scrub_filter = _ScrubUrlSecrets()
logging.getLogger("urllib3.connectionpool").addFilter(_scrub_filter)


def _finish_response(resp: Any, deadline: float) -> None:
    """Read and drop what is left of a response's body, at most :data:`RESPONSE_BODY_LIMIT` bytes and
    not past ``deadline``, then hand its connection back to the pool; a longer or slower body closes
    the connection instead (the pool opens a new one). Raises nothing."""
    if getattr(resp, "_ratiowatch_finished", False):
        return
    resp._ratiowatch_finished = True
    sock = getattr(getattr(resp, "connection", None), "sock", None)
    try:
        before = sock.gettimeout() if sock is not None else None
        got = 0
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or got > RESPONSE_BODY_LIMIT:
                raise TimeoutError("response body too long or too slow")
            if sock is not None:
                sock.settimeout(left)
            chunk = resp.read1(16384, decode_content=False)
            if not chunk:
                break
            got += len(chunk)
        if sock is not None:
            sock.settimeout(before)
    except Exception:  # noqa: BLE001 - a timeout, a broken connection: not reused
        try:
            resp.close()
        except Exception:  # noqa: BLE001
            pass
    try:
        resp.release_conn()
    except Exception:  # noqa: BLE001
        pass


def _webhook_retry(retries: int, backoff_s: float, jitter_s: float, max_wait_s: float, sleep, seed: int | None,
                   timeout_s: float, started: list[float]):
    """urllib3's ``Retry`` with this sink's schedule: before retry ``k`` (1, 2, ...) wait
    ``backoff_s * 2**(k-1)`` plus a uniform jitter in ``[0, jitter_s)``, or what the server's
    ``Retry-After`` asks (429, 503; a value that is not a number of seconds or an HTTP date is
    ignored); every wait capped at ``max_wait_s``. ``started[0]`` is set to the start of each
    attempt; the body of a response that is retried is read only until ``timeout_s`` after it."""
    import random

    from urllib3.util import Retry

    rng = random.Random(seed)  # a private generator: jitter only spreads retries of many daemons

    class WebhookRetry(Retry):
        RETRY_AFTER_STATUS_CODES = frozenset({429, 503})  # urllib3 adds 413: a permanent failure here

        def get_backoff_time(self) -> float:
            n = 0
            for h in reversed(self.history):
                if h.redirect_location is not None:
                    break
                n += 1
            if n == 0:
                return 0.0
            return min(max_wait_s, backoff_s * 2 ** (n - 1) + (rng.random() * jitter_s if jitter_s > 0 else 0.0))

        def increment(self, *args, **kwargs):
            response = kwargs.get("response")
            if response is not None:  # urllib3 would read all of its body before the retry
                _finish_response(response, started[0] + timeout_s)
            return super().increment(*args, **kwargs)

        def sleep(self, response=None) -> None:
            wait = None
            if (self.respect_retry_after_header and response is not None
                    and response.status in self.RETRY_AFTER_STATUS_CODES):
                try:
                    wait = self.get_retry_after(response)
                except Exception:  # noqa: BLE001 - InvalidHeader ("Retry-After: soon"): the backoff schedule
                    wait = None
            sleep(min(max_wait_s, wait) if wait is not None else self.get_backoff_time())
            started[0] = time.monotonic()

    return WebhookRetry(total=retries, connect=retries, read=retries, status=retries, other=retries, redirect=0,
                        allowed_methods=None,  # POST too: each alert carries an Idempotency-Key
                        status_forcelist=frozenset({408, 429, *range(500, 600)}), raise_on_status=False,
                        raise_on_redirect=False, respect_retry_after_header=True)


class WebhookSink:
    """HTTP POST of each item as JSON (urllib3: pooled connections, retries by its ``Retry``).

    2xx is success; 4xx other than 408/429 is a permanent failure (no retry), and so is a redirect
    (3xx, not followed: its reason names the ``Location``); anything else (connection refused,
    timeout, 5xx) is retried ``retries`` times: retry ``k`` waits
    ``backoff_s * 2**(k-1)`` plus a random jitter below ``jitter_s`` (default ``backoff_s / 2``,
    so that many daemons do not retry in step), or the ``Retry-After`` the server sent with a 429
    or 503; no wait is longer than ``max_wait_s``. An alert is posted with an ``Idempotency-Key``
    header equal to its ``alert_id``.

    ``timeout_s`` bounds an attempt's connection and response headers together (urllib3's total
    timeout) and, again, the reading of the response's body, of which at most
    :data:`RESPONSE_BODY_LIMIT` bytes are read and dropped. Reasons and logs show the URL without
    its user, password and query string (:func:`redact_url`): they can hold a secret.
    """

    dead_letter_on_failure = True

    def __init__(self, url: str, *, timeout_s: float = 5.0, retries: int = 3, backoff_s: float = 0.5,
                 headers: dict[str, str] | None = None, name: str = "webhook", sleep=time.sleep,
                 jitter_s: float | None = None, max_wait_s: float = 60.0, seed: int | None = None):
        import urllib3

        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            shown = redact_url(url) if isinstance(url, str) else repr(url)
            raise ValueError(f"webhook url must start with http:// or https://; got {shown!r}")
        for k, v in (headers or {}).items():
            why = header_problem(k, v)
            if why:
                raise ValueError(f"webhook headers: {why}")
        self.url = url
        self.safe_url = redact_url(url)
        self._secrets = _url_secrets(url)
        _scrub_filter.secrets.update(self._secrets)
        self.name = name
        self.timeout_s = timeout_s
        self.retries = retries
        self.backoff_s = backoff_s
        self.headers = {"Content-Type": "application/json",
                        **{k: _header_text(v) for k, v in (headers or {}).items()}}
        self._started = [time.monotonic()]
        self._retry = _webhook_retry(retries, backoff_s, backoff_s / 2 if jitter_s is None else jitter_s,
                                     max_wait_s, sleep, seed, timeout_s, self._started)
        self._http = urllib3.PoolManager(
            timeout=urllib3.Timeout(total=timeout_s, connect=timeout_s, read=timeout_s), retries=self._retry)

    def _scrub(self, text: str) -> str:
        for s in self._secrets:
            text = text.replace(s, "***")
        return text

    def _post(self, body: bytes, headers: dict[str, str]) -> tuple[str | None, int]:
        """(None on success else the reason, attempts made); raises nothing."""
        from urllib3.exceptions import HTTPError, MaxRetryError

        self._started[0] = time.monotonic()
        try:
            resp = self._http.request("POST", self.url, body=body, headers=headers, preload_content=False)
        except MaxRetryError as exc:
            r = exc.reason
            return self._scrub(f"{type(r).__name__}: {r}"), self.retries + 1
        except (HTTPError, OSError) as exc:
            return self._scrub(f"{type(exc).__name__}: {exc}"), 1
        except Exception as exc:  # noqa: BLE001 - e.g. a header http.client refuses: this item fails, not the worker
            return self._scrub(f"{type(exc).__name__}: {exc}"), 1
        try:
            attempts = 1 + (len(resp.retries.history) if resp.retries is not None else 0)
            status = resp.status
            location = resp.headers.get("Location")
        finally:
            _finish_response(resp, self._started[0] + self.timeout_s)
        if 200 <= status < 300:
            return None, attempts
        if 300 <= status < 400:
            where = redact_url(location) if location else "no Location header"
            return f"HTTP {status} redirect to {where} (not followed; set the url to the final address)", attempts
        return f"HTTP {status}", attempts

    def deliver(self, items: list[Any]) -> list[Failure]:
        failures: list[Failure] = []
        for it in items:
            try:
                body = it.to_json().encode()
                # an alert's id as the Idempotency-Key header: a receiver can drop the repeats that
                # retries and at-least-once replays produce (same alert -> same key)
                ident = getattr(it, "alert_id", None)
                headers = {**self.headers, "Idempotency-Key": ident} if isinstance(ident, str) else self.headers
                reason, tries = self._post(body, headers)
            except Exception as exc:  # noqa: BLE001 - one item's problem goes to the dead letter, with its reason
                reason, tries = self._scrub(f"{type(exc).__name__}: {exc}"), 0
            if reason is not None:
                log.warning("webhook gave up", extra={"url": self.safe_url, "reason": reason, "attempts": tries})
                failures.append((it, f"webhook {self.safe_url}: {reason} after {tries} attempt(s)"))
        return failures

    def flush(self) -> list[Failure]:
        return []

    def close(self) -> None:
        self._http.clear()

"""Record sources: CSV/JSONL file (optionally following appends), stdin, Kafka.

A source's ``poll(max_records, timeout_s)`` returns a list of ``Record`` and ``BadRecord`` (a message
that could not be parsed, with the reason), each carrying ``ref = (partition, offset)``. ``exhausted``
turns True when a finite source has nothing more. ``commit(positions)`` makes ``partition -> next
offset`` durable; the daemon calls it only after the sinks have acknowledged everything up to there.

Sources are pulled by the daemon loop, so a slow detector or sink slows the reads instead of
growing memory (backpressure); the stdin reader thread feeds a bounded queue.
"""

from __future__ import annotations

import csv
import hashlib
import io
import logging
import os
import queue
import sys
import threading
import time
from pathlib import Path
from typing import Any, BinaryIO, Callable, TextIO

from ratiowatch.connectors.records import (PREFIX_BYTES, BadRecord, BatchParser, FieldSpec, Record, RecordBatch,
                                           RecordError, bad_record, decode_text, parse_record, record_from_mapping)

log = logging.getLogger("ratiowatch.sources")

Item = Record | BadRecord

#: bytes read at a time from the rest of a line longer than ``max_record_bytes`` (which is dropped:
#: only its first bytes go to the dead-letter sink), so that one huge line costs bounded memory
DISCARD_CHUNK = 1 << 16


def _line_limit(max_bytes: int) -> int:
    """The most a source reads of one line: ``max_record_bytes`` and a line end (``\\r\\n``). A line
    without its end within that many bytes is oversized."""
    return max_bytes + 2


def _nbytes(chunk: bytes | str) -> int:
    return len(chunk) if isinstance(chunk, bytes) else len(chunk.encode("utf-8", "surrogatepass"))


def _ending(chunk: bytes | str) -> int:
    """Length of the line end (``\\n``, ``\\r\\n``) at the end of ``chunk``."""
    return len(chunk) - len(chunk.rstrip(b"\r\n" if isinstance(chunk, bytes) else "\r\n"))


class _Oversized:
    """A line longer than ``max_record_bytes``, read in bounded chunks: its first bytes and its size."""

    __slots__ = ("prefix", "size")

    def __init__(self, prefix: bytes | str, size: int):
        self.prefix = prefix
        self.size = size


class _LineParser:
    """Turns lines (JSONL or CSV with a header row) into Records / BadRecords.

    Lines come as bytes from files (bytes that are not UTF-8 are the line's ``not_utf8``, as for a
    Kafka message) and as text from stdin."""

    def __init__(self, fmt: str, spec: FieldSpec, max_bytes: int):
        self.fmt = fmt
        self.spec = spec
        self.max_bytes = max_bytes
        self.header: list[str] | None = None

    def parse(self, line: bytes | str, ref: tuple[str, int]) -> Item | None:
        """None for a line that is not a record (blank line, CSV header)."""
        text = line.rstrip(b"\r\n") if isinstance(line, bytes) else line.rstrip("\r\n")
        if not text.strip():
            return None
        try:
            size = len(text) if isinstance(text, bytes) else len(text.encode())
            if size > self.max_bytes:
                raise RecordError("oversized", f"line has {size} bytes, more than max_record_bytes={self.max_bytes}")
            if self.fmt == "csv":
                return self._csv(text, ref)
            return parse_record(text, self.spec, ref=ref, max_bytes=self.max_bytes,
                                fallback_timestamp=float(ref[1]))
        except RecordError as err:
            return bad_record(text, err, ref)
        except Exception as exc:  # noqa: BLE001 - whatever one line does, it is that line's fault
            return bad_record(text, RecordError("unparseable", f"{type(exc).__name__}: {exc}"), ref)

    def oversized(self, line: _Oversized, ref: tuple[str, int]) -> BadRecord:
        """The dead letter of a line that was too long to be kept: built from its first bytes."""
        err = RecordError("oversized", f"line has {line.size} bytes, more than max_record_bytes={self.max_bytes}")
        return bad_record(line.prefix, err, ref, size=line.size)

    def _csv(self, text: bytes | str, ref: tuple[str, int]) -> Item | None:
        if self.header is None:
            try:
                decoded = decode_text(text)
            except RecordError as err:
                # the header is still this line: the next row taken for it would misread every row
                # after; columns named with the bad bytes read as missing fields
                loose = text.decode("utf-8", errors="replace") if isinstance(text, bytes) else text
                self.header = [h.strip() for h in next(csv.reader(io.StringIO(loose)))]
                return bad_record(text, err, ref)
            self.header = [h.strip() for h in next(csv.reader(io.StringIO(decoded)))]
            return None
        row = next(csv.reader(io.StringIO(decode_text(text))))
        if len(row) != len(self.header):
            raise RecordError("malformed_json", f"CSV row has {len(row)} fields, header has {len(self.header)}")
        # arrival order counts data records as JSON lines count theirs: the header line is not one
        # (the ref keeps the line's offset, which commits and restarts go by)
        return record_from_mapping(dict(zip(self.header, row)), self.spec, ref=ref,
                                   fallback_timestamp=float(ref[1] - 1), raw=text)


def _format_of(path: Path, fmt: str) -> str:
    if fmt != "auto":
        return fmt
    return "csv" if path.suffix.lower() == ".csv" else "jsonl"


#: bytes at the start of a file that identify it with its device and inode (an inode number is
#: reused once its file is deleted, so a rotated-in file can carry the number of the one it replaced)
_HEAD_BYTES = 1024


def _head_digest(head: bytes) -> int:
    # an integer, as every value of the file's side files: the daemon checks them as offsets files
    return int.from_bytes(hashlib.sha256(head).digest()[:8], "big")


class FileSource:
    """Reads a CSV (header row) or JSONL file; ``follow=True`` keeps reading appended lines.

    Offsets are line numbers. Committed offsets are stored through ``offsets`` (an object with
    ``save_json(name, obj)`` / ``load_json(name)``, e.g. the checkpoint store) so a restart resumes
    after the last committed line: ``offsets-<name>.json`` holds ``{partition: next line}`` and
    ``file-identity-<name>.json`` which file those lines were read from (device, inode, a digest of
    its first bytes, and ``base``, the offset of its first line). A committed offset is applied only
    to that same file; another file, or one shorter than the offset, is read from its start with a
    warning. Without the identity (offsets written by an older version) the offset is applied to
    the file that has the name, unless it is shorter.

    In follow mode a file replaced under its name (rotation) or cut below the read position
    (truncation) is read again from its start, as ``tail -F`` does. Offsets go on counting across
    files (the first line of the new file gets the offset after the last line read), so they only
    grow: the daemon's committed positions and replay checks rely on that.
    """

    def __init__(self, path: str | Path, spec: FieldSpec, *, fmt: str = "auto", follow: bool = False,
                 poll_interval_s: float = 0.2, max_bytes: int = 65536, offsets: Any = None):
        self.path = Path(path)
        if self.path.is_dir():
            raise ValueError(f"source file {str(self.path)!r} is a directory; set source.path to a CSV or "
                             "JSONL file in it")
        if not self.path.is_file() and (self.path.exists() or not follow):
            what = "is not a regular file" if self.path.exists() else "does not exist"
            raise ValueError(f"source file {str(self.path)!r} {what}; check source.path")
        self.partition = f"file:{self.path.name}"
        self.static_partitions = {self.partition}
        self.follow = follow
        self.poll_interval_s = poll_interval_s
        self.parser = _LineParser(_format_of(self.path, fmt), spec, max_bytes)
        self.offsets = offsets
        self.exhausted = False
        self._fh: BinaryIO | None = None
        self._line_no = 0   # offset of the next line to read
        self._buf = b""     # partial line while following (at most max_record_bytes + 2 bytes)
        self._over: _Oversized | None = None  # the line being dropped for its length (the rest not read yet)
        self._start = 0     # lines below this offset were committed by a previous run
        self._head = b""    # the first bytes read from the open file (up to _HEAD_BYTES)
        # files read since the last commit, as (offset of the first line, (device, inode), head):
        # a commit records the identity of the file its offset belongs to
        self._files: list[tuple[int, tuple[int, int], bytes]] = []
        self._written_identity: dict[str, Any] | None = None
        self._resume: tuple[int, dict[str, Any] | None] | None = None
        if offsets is not None:
            saved = offsets.load_json(self._offsets_name()) or {}
            ident = offsets.load_json(self._identity_name())
            self._written_identity = ident
            self._resume = (int(saved.get(self.partition, 0)), ident if isinstance(ident, dict) else None)

    def _offsets_name(self) -> str:
        return f"offsets-{self.path.name}.json"

    def _identity_name(self) -> str:
        # its own file, so the offsets file keeps the format older versions read and write
        return f"file-identity-{self.path.name}.json"

    def _open(self) -> bool:
        if self._fh is None:
            try:
                self._fh = open(self.path, "rb")
            except FileNotFoundError:
                return False
            if self._resume is not None:
                committed, ident = self._resume
                self._resume = None
                self._resume_at(committed, ident)
            self._new_file(self._line_no)
        return True

    def _file_id(self) -> tuple[int, int]:
        assert self._fh is not None
        st = os.fstat(self._fh.fileno())
        return st.st_dev, st.st_ino

    def _new_file(self, base: int) -> None:
        """Start counting the lines of the open file (read from its first byte) at ``base``."""
        self._line_no = base
        self._head = b""
        self._buf = b""
        self._over = None
        self.parser.header = None  # a CSV file starts with its own header
        self._files.append((base, self._file_id(), b""))

    def _resume_at(self, committed: int, ident: dict[str, Any] | None) -> None:
        """Where a restart resumes in the file just opened: after the committed line if it is the
        file the offset was committed for, else at its start (offsets going on from there)."""
        if ident is None:  # offsets of an older version: applied as they are (a short file is still caught)
            self._start = committed
            return
        assert self._fh is not None
        base = int(ident.get("base", 0))
        head_len = int(ident.get("head_len", 0))
        head = self._fh.read(head_len)
        self._fh.seek(0)
        same = (self._file_id() == (ident.get("dev"), ident.get("ino"))
                and len(head) == head_len and _head_digest(head) == ident.get("head_digest"))
        if same:
            # below base only when the process stopped between writing the identity and the offsets
            # of one commit: the committed lines were all in the file before this one
            self._line_no = base
            self._start = max(committed, base)
            return
        self._line_no = self._start = max(committed, base)
        log.warning("source file is not the file its committed offset was read from: reading it from "
                    "its start", extra={"path": str(self.path), "committed_offset": committed})

    def _changed(self) -> str | None:
        """In follow mode, before each poll and at the end of the open file: "rotated" if another file
        now has its name, "truncated" if it was cut below the read position (or its first bytes were
        written again), else None."""
        assert self._fh is not None
        st = os.fstat(self._fh.fileno())
        pos = self._fh.tell()
        rewritten = bool(self._head) and self._read_at_start(len(self._head)) != self._head
        try:
            now = os.stat(self.path)
            replaced = (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino)
        except FileNotFoundError:  # moved away, the new one not created yet: keep reading the old one
            replaced = False
        if st.st_size > pos and not rewritten:
            return None  # lines were added since the read: take them first, rotated or not
        if replaced:
            return "rotated"
        if st.st_size < pos or rewritten:
            return "truncated"
        return None

    def _read_at_start(self, n: int) -> bytes:
        assert self._fh is not None
        if hasattr(os, "pread"):  # leaves the reader's buffer alone
            return os.pread(self._fh.fileno(), n, 0)
        pos = self._fh.tell()
        self._fh.seek(0)
        head = self._fh.read(n)
        self._fh.seek(pos)
        return head

    def _switch(self, change: str, out: list[Item]) -> None:
        assert self._fh is not None
        if change == "rotated":
            if self._buf:  # the old file's last line, never finished: taken as it is, as at the end of a file
                line, self._buf = self._buf, b""
                self._take(line, out)
            if self._over is not None:
                self._take_oversized(out)
            log.info("source file was replaced (rotated): reading the new file from its start",
                     extra={"path": str(self.path), "offset": self._line_no})
            self._fh.close()
            self._fh = None
            self._start = self._line_no
            self._open()  # if the name is gone again, the next poll opens whatever has it then
            return
        # the bytes of a line being written are gone with the rest
        log.warning("source file was truncated: reading it again from its start",
                    extra={"path": str(self.path), "offset": self._line_no})
        self._fh.seek(0)
        self._start = self._line_no
        self._new_file(self._line_no)

    def _take_oversized(self, out: list[Item]) -> None:
        """The line being dropped for its length ends here: one ``oversized`` dead letter."""
        over, self._over = self._over, None
        assert over is not None
        no = self._line_no
        self._line_no += 1
        if no >= self._start:  # else already committed by a previous run
            out.append(self.parser.oversized(over, (self.partition, no)))

    def _take(self, line: bytes, out: list[Item]) -> None:
        no = self._line_no
        self._line_no += 1
        if no < self._start:  # already committed by a previous run; a CSV header is still needed
            if self.parser.fmt == "csv" and self.parser.header is None:
                self.parser.parse(line, (self.partition, no))
            return
        item = self.parser.parse(line, (self.partition, no))
        if item is not None:  # None: a header or blank line
            out.append(item)

    def poll(self, max_records: int = 1000, timeout_s: float = 0.5) -> list[Item]:
        out: list[Item] = []
        if self.exhausted or not self._open():
            if self.follow:
                time.sleep(min(timeout_s, self.poll_interval_s))
            return out
        if self.follow:
            # also before reading: a file cut and written again past the read position since the
            # last poll would otherwise give a line from the middle of the new content first
            change = self._changed()
            if change is not None:
                self._switch(change, out)
                if self._fh is None:  # the new file is not there yet
                    return out
        deadline = time.monotonic() + timeout_s
        limit = _line_limit(self.parser.max_bytes)
        while len(out) < max_records:
            assert self._fh is not None
            # never more than a line may hold: a line of gigabytes costs no more memory than a valid one
            line = self._fh.readline(DISCARD_CHUNK if self._over is not None else limit - len(self._buf))
            if not line:
                if self._line_no + bool(self._buf or self._over is not None) < self._start:
                    # the file ends before the committed offset: it is not the file that was committed
                    log.warning("source file is shorter than its committed offset: reading it from its start",
                                extra={"path": str(self.path), "committed_offset": self._start,
                                       "lines": self._line_no - self._files[-1][0]})
                    self._fh.seek(0)
                    self._files.pop()
                    self._new_file(self._start)
                    continue
                if not self.follow:
                    if self._over is not None:  # the file's last line, oversized, without a line end
                        self._take_oversized(out)
                    self.exhausted = True
                    break
                change = self._changed()
                if change is not None:
                    self._switch(change, out)
                    if self._fh is None:  # the new file is not there yet
                        break
                    continue
                if out or time.monotonic() >= deadline:
                    break
                time.sleep(self.poll_interval_s)
                continue
            if len(self._head) < _HEAD_BYTES:
                self._head += line[:_HEAD_BYTES - len(self._head)]
                base, fid, _ = self._files[-1]
                self._files[-1] = (base, fid, self._head)
            if self._over is not None:  # the rest of an oversized line: counted and dropped
                self._over.size += len(line)
                if line.endswith(b"\n"):
                    self._over.size -= _ending(line)
                    self._take_oversized(out)
                continue
            if self._buf:
                line, self._buf = self._buf + line, b""
            if not line.endswith(b"\n"):
                if len(line) >= limit:  # no line end within max_record_bytes: drop the rest as it comes
                    self._over = _Oversized(line[:PREFIX_BYTES], len(line))
                    continue
                if self.follow:
                    self._buf = line  # the writer has not finished this line yet
                    continue
            self._take(line, out)
        return out

    def commit(self, positions: dict[str, int]) -> None:
        if self.offsets is None or self.partition not in positions:
            return
        pos = positions[self.partition]
        files = self._files
        i = max((j for j, f in enumerate(files) if f[0] <= pos), default=None)
        if i is not None:
            base, (dev, ino), head = files[i]
            del files[:i]  # earlier files cannot be committed any more
            ident = {"dev": dev, "ino": ino, "base": base, "head_len": len(head), "head_digest": _head_digest(head)}
            if ident != self._written_identity:
                # the identity first: if the offsets then fail to be written, the older offset lies
                # below the new base, which a restart reads as "start of this file" (no line skipped)
                self.offsets.save_json(self._identity_name(), ident)
                self._written_identity = ident
        self.offsets.save_json(self._offsets_name(), {self.partition: pos})

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None


class StdinSource:
    """Reads JSONL/CSV lines from stdin through a reader thread and a bounded queue.

    Stdin cannot be read again: ``replayable`` is False, so the daemon never takes a record of it
    for a replay of one already in a checkpoint. Offsets (line numbers, also the timestamps of
    arrival order) go on from the previous run's last committed one when ``offsets`` (the
    checkpoint store) is given: ``offsets-stdin.json`` holds ``{"stdin": next line}``, so the keys
    restored from a previous run's checkpoints see later records, not earlier ones. A line longer
    than ``max_bytes`` is read in bounded chunks and dropped (its first bytes go to the dead-letter
    sink as ``oversized``).
    """

    replayable = False

    def __init__(self, spec: FieldSpec, *, fmt: str = "jsonl", max_bytes: int = 65536,
                 stream: TextIO | BinaryIO | None = None, queue_size: int = 10000, offsets: Any = None):
        # bytes, as files and Kafka messages are parsed: text decoding would turn a bad byte into a
        # surrogate (unparseable) or stop the reader thread, not a not_utf8 dead letter
        self.stream = stream if stream is not None else getattr(sys.stdin, "buffer", sys.stdin)
        self.partition = "stdin"
        self.parser = _LineParser("jsonl" if fmt == "auto" else fmt, spec, max_bytes)
        self.exhausted = False
        self._q: queue.Queue[str | bytes | _Oversized | None] = queue.Queue(maxsize=queue_size)
        self._eof = False
        self._no = 0
        self.offsets = offsets
        if offsets is not None:
            saved = offsets.load_json(self._offsets_name()) or {}
            self._no = int(saved.get(self.partition, 0))
        self._thread = threading.Thread(target=self._read, name="stdin-reader", daemon=True)
        self._thread.start()

    def _offsets_name(self) -> str:
        return f"offsets-{self.partition}.json"

    def _read(self) -> None:
        limit = _line_limit(self.parser.max_bytes)
        read = self.stream.readline
        try:
            while True:
                line = read(limit)  # bounded: a line without its end within the limit is oversized
                if not line:
                    break
                if len(line) >= limit and _ending(line) == 0:
                    over = _Oversized(line[:PREFIX_BYTES], _nbytes(line))
                    while True:  # the rest of the line, read and dropped in bounded chunks
                        chunk = read(DISCARD_CHUNK)
                        if not chunk:
                            break
                        over.size += _nbytes(chunk)
                        if _ending(chunk):
                            over.size -= _ending(chunk)
                            break
                    line = over
                self._q.put(line)  # blocks when the queue is full: backpressure on the writer
        except Exception as exc:  # noqa: BLE001 - the records read so far are still processed
            log.error("reading stdin failed; treating it as its end", extra={"error": f"{type(exc).__name__}: {exc}"})
        finally:
            self._q.put(None)

    def poll(self, max_records: int = 1000, timeout_s: float = 0.5) -> list[Item]:
        out: list[Item] = []
        deadline = time.monotonic() + timeout_s
        while len(out) < max_records and not self._eof:
            try:
                line = self._q.get(timeout=max(0.0, deadline - time.monotonic())) if not out else self._q.get_nowait()
            except queue.Empty:
                break
            if line is None:
                self._eof = True
                break
            no = self._no
            self._no += 1
            if isinstance(line, _Oversized):
                item: Item | None = self.parser.oversized(line, (self.partition, no))
            else:
                item = self.parser.parse(line, (self.partition, no))
            if item is not None:
                out.append(item)
        if self._eof and self._q.empty():
            self.exhausted = True
        return out

    def commit(self, positions: dict[str, int]) -> None:
        # stdin cannot be read again: only where the next run's line numbers go on from
        if self.offsets is not None and self.partition in positions:
            self.offsets.save_json(self._offsets_name(), {self.partition: positions[self.partition]})

    def close(self) -> None:
        pass


def _listener(source: "KafkaSource"):
    """kafka-python's asynchronous rebalance listener, calling the source's callbacks."""
    from kafka import AsyncConsumerRebalanceListener

    class Listener(AsyncConsumerRebalanceListener):
        async def on_partitions_revoked(self, revoked):
            names = {f"{tp.topic}:{tp.partition}" for tp in revoked}
            log.info("partitions revoked", extra={"partitions": sorted(names)})
            # on close the daemon has already checkpointed and committed everything
            if names and not source.closing:
                await source._commit_revoked(names)

        async def on_partitions_assigned(self, assigned):
            names = {f"{tp.topic}:{tp.partition}" for tp in assigned}
            log.info("partitions assigned", extra={"partitions": sorted(names)})
            if source.on_assign is not None:
                source.on_assign(names)

    return Listener()


class KafkaSource:
    """Kafka consumer (kafka-python) with manual offset commits.

    With ``partitions`` the given partitions of every topic are assigned manually (no group
    rebalancing); otherwise the consumer subscribes through ``group_id`` and ``on_revoke`` /
    ``on_assign`` callbacks (sets of partition names ``"topic:partition"``) let the daemon
    checkpoint and commit before partitions move, and restore state after.
    """

    def __init__(self, bootstrap_servers: list[str], topics: list[str], spec: FieldSpec, *,
                 group_id: str = "ratiowatch", partitions: list[int] | None = None,
                 auto_offset_reset: str = "earliest", session_timeout_ms: int = 10000,
                 heartbeat_interval_ms: int = 1000, max_poll_interval_ms: int = 60000,
                 max_bytes: int = 65536, options: dict[str, Any] | None = None,
                 on_revoke: Callable[[set[str]], None] | None = None,
                 on_assign: Callable[[set[str]], None] | None = None):
        from kafka import KafkaConsumer, TopicPartition

        self.spec = spec
        self.max_bytes = max_bytes
        self._parser = BatchParser(spec, max_bytes)
        self.exhausted = False
        self.on_revoke = on_revoke
        self.on_assign = on_assign
        self.closing = False
        self.revoke_commits = 0
        self.revoke_commit_failures = 0
        opts: dict[str, Any] = dict(
            bootstrap_servers=bootstrap_servers, group_id=group_id, enable_auto_commit=False,
            auto_offset_reset=auto_offset_reset, session_timeout_ms=session_timeout_ms,
            heartbeat_interval_ms=heartbeat_interval_ms, max_poll_interval_ms=max_poll_interval_ms,
            reconnect_backoff_ms=100, reconnect_backoff_max_ms=2000,
        )
        opts.update(options or {})
        self.consumer = KafkaConsumer(**opts)
        self._TopicPartition = TopicPartition
        self.static_partitions: set[str] | None = None
        if partitions is not None:
            self.consumer.assign([TopicPartition(t, p) for t in topics for p in partitions])
            self.static_partitions = {f"{t}:{p}" for t in topics for p in partitions}
        else:
            self.consumer.subscribe(topics, listener=_listener(self))

    def _poll_raw(self, max_records: int, timeout_s: float) -> dict:
        try:
            return self.consumer.poll(timeout_ms=int(timeout_s * 1000), max_records=max_records)
        except Exception as exc:  # noqa: BLE001 - broker trouble: log, back off, let kafka-python reconnect
            log.warning("kafka poll failed", extra={"error": f"{type(exc).__name__}: {exc}"})
            time.sleep(min(timeout_s, 1.0))
            return {}

    def poll_batch(self, max_records: int = 1000, timeout_s: float = 0.5) -> RecordBatch | list[Item]:
        """Like :meth:`poll`, in columns (:class:`~ratiowatch.connectors.records.RecordBatch`): the daemon's fast path.

        Rows of more than one dimension in one poll come back in the list form instead.
        """
        batches = self._poll_raw(max_records, timeout_s)
        parser = self._parser
        add = parser.add
        for tp, msgs in batches.items():
            part = f"{tp.topic}:{tp.partition}"
            for m in msgs:
                add(m.value, part, m.offset)
        return parser.finish()

    def poll(self, max_records: int = 1000, timeout_s: float = 0.5) -> list[Item]:
        batches = self._poll_raw(max_records, timeout_s)
        if not batches:
            return []
        out: list[Item] = []
        spec, max_bytes = self.spec, self.max_bytes
        for tp, msgs in batches.items():
            part = f"{tp.topic}:{tp.partition}"
            for m in msgs:
                ref = (part, m.offset)
                raw = m.value if m.value is not None else b""
                try:
                    out.append(parse_record(raw, spec, ref=ref, max_bytes=max_bytes, fallback_timestamp=float(m.offset)))
                except RecordError as err:  # parse_record turns any failure into a RecordError
                    out.append(bad_record(raw, err, ref))
        return out

    def _tp(self, name: str):
        topic, _, p = name.rpartition(":")
        return self._TopicPartition(topic, int(p))

    def _offsets(self, positions: dict[str, int]) -> dict:
        from kafka.structs import OffsetAndMetadata

        assigned = self.consumer.assignment()
        offsets = {}
        for name, off in positions.items():
            tp = self._tp(name)
            if tp in assigned:
                offsets[tp] = OffsetAndMetadata(off, "", -1)
        return offsets

    def commit(self, positions: dict[str, int]) -> None:
        offsets = self._offsets(positions)
        if offsets:
            self.consumer.commit(offsets)  # raises on failure: the caller logs and retries at the next checkpoint

    async def _commit_revoked(self, names: set[str]) -> None:
        """The rebalance listener's part: on_revoke checkpoints the partitions' keys and returns the
        positions to commit, committed here before the partitions move on. kafka-python 3 runs the
        listener on its network thread, which may await its asynchronous commit but not block."""
        positions = self.on_revoke(names) if self.on_revoke is not None else None
        offsets = self._offsets(positions or {})
        if not offsets:
            return
        try:
            await self.consumer.commit_async(offsets)
            self.revoke_commits += 1
            log.info("revoked partitions committed", extra={"partitions": sorted(names)})
        except Exception as exc:  # noqa: BLE001 - at-least-once still holds: the new owner replays more
            self.revoke_commit_failures += 1
            log.warning("commit of revoked partitions failed", extra={"error": f"{type(exc).__name__}: {exc}"})

    def lag(self) -> dict[str, int]:
        """partition -> (high watermark - position), for assigned partitions with a known watermark."""
        out = {}
        try:
            for tp in self.consumer.assignment():
                hw = self.consumer.highwater(tp)
                if hw is None:
                    continue
                pos = self.consumer.position(tp, timeout_ms=0) if hasattr(self.consumer, "position") else None
                if pos is not None:
                    out[f"{tp.topic}:{tp.partition}"] = max(0, hw - pos)
        except Exception:  # noqa: BLE001 - lag is best-effort telemetry
            pass
        return out

    def close(self) -> None:
        self.closing = True
        try:
            self.consumer.close(autocommit=False)
        except Exception:  # noqa: BLE001
            pass

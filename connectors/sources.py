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
import io
import logging
import queue
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, TextIO

from ratiowatch.connectors.records import (BadRecord, BatchParser, FieldSpec, Record, RecordBatch, RecordError, bad_record,
                            parse_record, record_from_mapping)

log = logging.getLogger("ratiowatch.sources")

Item = Record | BadRecord


class _LineParser:
    """Turns text lines (JSONL or CSV with a header row) into Records / BadRecords."""

    def __init__(self, fmt: str, spec: FieldSpec, max_bytes: int):
        self.fmt = fmt
        self.spec = spec
        self.max_bytes = max_bytes
        self.header: list[str] | None = None

    def parse(self, line: str, ref: tuple[str, int]) -> Item | None:
        """None for a line that is not a record (blank line, CSV header)."""
        text = line.rstrip("\r\n")
        if not text.strip():
            return None
        try:
            if len(text.encode()) > self.max_bytes:
                raise RecordError("oversized", f"line has {len(text.encode())} bytes, more than "
                                               f"max_record_bytes={self.max_bytes}")
            if self.fmt == "csv":
                row = next(csv.reader(io.StringIO(text)))
                if self.header is None:
                    self.header = [h.strip() for h in row]
                    return None
                if len(row) != len(self.header):
                    raise RecordError("malformed_json", f"CSV row has {len(row)} fields, header has "
                                                        f"{len(self.header)}")
                return record_from_mapping(dict(zip(self.header, row)), self.spec, ref=ref,
                                           fallback_timestamp=float(ref[1]), raw=text)
            return parse_record(text, self.spec, ref=ref, max_bytes=self.max_bytes,
                                fallback_timestamp=float(ref[1]))
        except RecordError as err:
            return bad_record(text, err, ref)
        except Exception as exc:  # noqa: BLE001 - whatever one line does, it is that line's fault
            return bad_record(text, RecordError("unparseable", f"{type(exc).__name__}: {exc}"), ref)


def _format_of(path: Path, fmt: str) -> str:
    if fmt != "auto":
        return fmt
    return "csv" if path.suffix.lower() == ".csv" else "jsonl"


class FileSource:
    """Reads a CSV (header row) or JSONL file; ``follow=True`` keeps reading appended lines.

    Offsets are line numbers. Committed offsets are stored through ``offsets`` (an object with
    ``save_json(name, obj)`` / ``load_json(name)``, e.g. the checkpoint store) so a restart resumes
    after the last committed line.
    """

    def __init__(self, path: str | Path, spec: FieldSpec, *, fmt: str = "auto", follow: bool = False,
                 poll_interval_s: float = 0.2, max_bytes: int = 65536, offsets: Any = None):
        self.path = Path(path)
        if not self.path.exists() and not follow:
            raise ValueError(f"source file {str(self.path)!r} does not exist; check source.path")
        self.partition = f"file:{self.path.name}"
        self.static_partitions = {self.partition}
        self.follow = follow
        self.poll_interval_s = poll_interval_s
        self.parser = _LineParser(_format_of(self.path, fmt), spec, max_bytes)
        self.offsets = offsets
        self.exhausted = False
        self._fh: TextIO | None = None
        self._line_no = 0   # next line number to read
        self._buf = ""      # partial line while following
        self._start = 0
        if offsets is not None:
            saved = offsets.load_json(self._offsets_name()) or {}
            self._start = int(saved.get(self.partition, 0))

    def _offsets_name(self) -> str:
        return f"offsets-{self.path.name}.json"

    def _open(self) -> bool:
        if self._fh is None:
            if not self.path.exists():
                return False
            self._fh = open(self.path, encoding="utf-8", errors="replace", newline="")
        return True

    def poll(self, max_records: int = 1000, timeout_s: float = 0.5) -> list[Item]:
        out: list[Item] = []
        if self.exhausted or not self._open():
            if self.follow:
                time.sleep(min(timeout_s, self.poll_interval_s))
            return out
        assert self._fh is not None
        deadline = time.monotonic() + timeout_s
        while len(out) < max_records:
            line = self._fh.readline()
            if not line:
                if not self.follow:
                    self.exhausted = True
                    break
                if out or time.monotonic() >= deadline:
                    break
                time.sleep(self.poll_interval_s)
                continue
            if self._buf:
                line, self._buf = self._buf + line, ""
            if self.follow and not line.endswith("\n"):
                self._buf = line  # the writer has not finished this line yet
                continue
            no = self._line_no
            self._line_no += 1
            item = self.parser.parse(line, (self.partition, no))
            if item is None or no < self._start:
                continue  # header/blank, or already committed by a previous run
            out.append(item)
        return out

    def commit(self, positions: dict[str, int]) -> None:
        if self.offsets is not None and self.partition in positions:
            self.offsets.save_json(self._offsets_name(), {self.partition: positions[self.partition]})

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None


class StdinSource:
    """Reads JSONL/CSV lines from stdin through a reader thread and a bounded queue."""

    def __init__(self, spec: FieldSpec, *, fmt: str = "jsonl", max_bytes: int = 65536,
                 stream: TextIO | None = None, queue_size: int = 10000):
        self.stream = stream if stream is not None else sys.stdin
        self.partition = "stdin"
        self.parser = _LineParser("jsonl" if fmt == "auto" else fmt, spec, max_bytes)
        self.exhausted = False
        self._q: queue.Queue[str | None] = queue.Queue(maxsize=queue_size)
        self._eof = False
        self._no = 0
        self._thread = threading.Thread(target=self._read, name="stdin-reader", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        for line in self.stream:
            self._q.put(line)  # blocks when the queue is full: backpressure on the writer
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
            item = self.parser.parse(line, (self.partition, no))
            if item is not None:
                out.append(item)
        if self._eof and self._q.empty():
            self.exhausted = True
        return out

    def commit(self, positions: dict[str, int]) -> None:
        pass  # stdin cannot be replayed

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

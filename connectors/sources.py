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
import json
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

class SourceUnavailableError(ValueError):
    """The source cannot be read at all (stdin closed, a file without read permission, a damaged
    side file). ``str()`` is one line: what is wrong and what to do (the daemon reports it as a
    start-up error)."""


class SourceReadError(OSError):
    """Reading the source failed part way (e.g. stdin's read raised): raised by ``poll`` once the
    records read before the failure were returned, so that the failure ends the run as an error,
    not as the end of the input."""


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


#: the most bytes of stdin lines the stdin source's queue holds (besides ``queue_size`` lines):
#: what a daemon slowed down by its sinks keeps of stdin, whatever the length of its lines
STDIN_QUEUE_BYTES = 32 << 20


class _Oversized:
    """A line longer than ``max_record_bytes``, read in bounded chunks: its first bytes and its size."""

    __slots__ = ("prefix", "size")

    def __init__(self, prefix: bytes | str, size: int):
        self.prefix = prefix
        self.size = size


def _csv_rows(text: str | Any) -> Any:
    """The csv module's reader of ``text`` (a string or an iterable of lines): fields separated by
    commas, a field quoted when it starts with a double quote (a doubled one inside is a quote),
    spaces after a comma skipped, as a header's names are stripped."""
    return csv.reader(io.StringIO(text) if isinstance(text, str) else text, skipinitialspace=True)


def _csv_opens_quote(line: bytes | str) -> bool:
    """Whether a CSV row starting with ``line`` ends it inside a quoted field: the row goes on on
    the next line (RFC 4180 allows line breaks in quoted fields). As the csv module reads it: it
    asks for another line."""
    if (b'"' if isinstance(line, bytes) else '"') not in line:
        return False
    more = False

    def lines():
        nonlocal more
        yield line.decode("utf-8", "replace") if isinstance(line, bytes) else line
        more = True

    try:
        next(_csv_rows(lines()), None)
    except csv.Error:
        pass
    return more


def _csv_still_quoted(line: bytes | str) -> bool:
    """Whether a CSV row that was inside a quoted field at the start of ``line`` still is at its end
    (read as :func:`_csv_rows` reads it; linear in the line, however many lines the row has)."""
    q, comma, space = (b'"', b",", b" ") if isinstance(line, bytes) else ('"', ",", " ")
    i = 0
    while True:  # inside a quoted field
        j = line.find(q, i)
        if j < 0:
            return True
        if line[j + 1:j + 2] == q:  # a doubled quote: a quote in the field
            i = j + 2
            continue
        while True:  # the rest of the field is unquoted; find the next field that starts with a quote
            j = line.find(comma, j + 1)
            if j < 0:
                return False
            i = j + 1
            while line[i:i + 1] == space:
                i += 1
            if line[i:i + 1] == q:
                i += 1
                break
            j = i - 1


class _LineParser:
    """Turns lines (JSONL or CSV with a header row) into Records / BadRecords.

    Lines come as bytes from files (bytes that are not UTF-8 are the line's ``not_utf8``, as for a
    Kafka message) and as text from stdin. :meth:`feed` takes each line (with its line end) and
    returns the rows: a CSV row whose quoted field holds a line break is the lines up to the one
    that closes the quote, with the offset of its first line (at most ``max_record_bytes``: a longer
    row is one ``oversized`` dead letter)."""

    def __init__(self, fmt: str, spec: FieldSpec, max_bytes: int):
        self.fmt = fmt
        self.spec = spec
        self.max_bytes = max_bytes
        self.header: list[str] | None = None
        self.header_error: str | None = None  # why the CSV header could not be read: every row's dead letter
        # a CSV row whose quoted field goes on on the next line: its lines (or, once longer than
        # max_record_bytes, an _Oversized of them) and the ref of its first line
        self._row: list[bytes | str] | _Oversized | None = None
        self._row_ref: tuple[str, int] = ("", 0)
        self._row_size = 0  # its bytes so far
        self._row_end = 0   # the length of the line end of its last line

    def reset(self) -> None:
        """A new file starts (with its own header); a row not finished is gone with the old one."""
        self.header = None
        self.header_error = None
        self._row = None

    def feed(self, line: bytes | str | _Oversized, ref: tuple[str, int]
             ) -> tuple[bytes | str | _Oversized, tuple[str, int]] | None:
        """The row that ``line`` ends, with the ref of the row's first line (see :meth:`item`);
        None while a CSV row goes on on the next line."""
        row = self._row
        if self.fmt != "csv" or (row is None and (isinstance(line, _Oversized) or not _csv_opens_quote(line))):
            return line, ref
        if row is None:
            self._row, self._row_ref, self._row_size, self._row_end = [line], ref, _nbytes(line), _ending(line)
            return None
        if isinstance(line, _Oversized):  # its bytes are not kept: the row ends with it, as a dead letter
            self._row = None
            return self._oversized_row(row, line.size), self._row_ref
        n = _nbytes(line)
        if isinstance(row, _Oversized):
            row.size += n
        elif self._row_size + n > _line_limit(self.max_bytes):
            row = self._row = self._oversized_row(row, n)
        else:
            row.append(line)
        self._row_size += n
        self._row_end = _ending(line)
        if _csv_still_quoted(line):
            return None
        return self.flush()

    def _oversized_row(self, lines: list[bytes | str] | _Oversized, more: int) -> _Oversized:
        if isinstance(lines, _Oversized):
            lines.size += more
            return lines
        joined = lines[0][:0].join(lines)
        return _Oversized(joined[:PREFIX_BYTES], _nbytes(joined) + more)

    def flush(self) -> tuple[bytes | str | _Oversized, tuple[str, int]] | None:
        """The row being read, as it is (at the end of the input, or when its file is replaced)."""
        row, self._row = self._row, None
        if row is None:
            return None
        if isinstance(row, _Oversized):
            row.size -= self._row_end  # counted as a line's bytes are: without its line end
            return row, self._row_ref
        return row[0][:0].join(row), self._row_ref

    def item(self, row: bytes | str | _Oversized, ref: tuple[str, int]) -> Item | None:
        """The Record / BadRecord of a row from :meth:`feed` or :meth:`flush`; None for a row that
        is not a record (blank line, CSV header)."""
        if isinstance(row, _Oversized):
            bad = self.oversized(row, ref)
            if self.fmt == "csv" and self.header is None:
                self._bad_header(bad.reason, bad.detail, ref)
            return bad
        return self.parse(row, ref)

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
            self._bad_header(err.reason, err.detail, ref)
            return bad_record(text, err, ref)
        except Exception as exc:  # noqa: BLE001 - whatever one line does, it is that line's fault
            err = RecordError("unparseable", f"{type(exc).__name__}: {exc}")
            self._bad_header(err.reason, err.detail, ref)
            return bad_record(text, err, ref)

    def _bad_header(self, reason: str, detail: str, ref: tuple[str, int]) -> None:
        """A CSV header that could not be read: no later row is taken for it (which would lose that
        row and misread every one after); each is a dead letter that says why."""
        if self.fmt == "csv" and self.header is None:
            self.header = []
            self.header_error = f"unusable CSV header (offset {ref[1]}: {reason}: {detail})"

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
                self.header = [h.strip() for h in next(_csv_rows(loose))]
                return bad_record(text, err, ref)
            self.header = [h.strip() for h in next(_csv_rows(decoded))]
            return None
        if self.header_error is not None:
            raise RecordError("malformed_csv", self.header_error)
        row = next(_csv_rows(decode_text(text)))
        if len(row) != len(self.header):
            raise RecordError("malformed_csv", f"CSV row has {len(row)} fields, header has {len(self.header)}")
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


#: the values of a file-identity side file (all non-negative integers)
_IDENTITY_KEYS = ("dev", "ino", "base", "head_len", "head_digest")


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
        if self.path.exists():
            try:
                open(self.path, "rb").close()
            except OSError as exc:  # no read permission, mostly: not a file to wait for
                raise SourceUnavailableError(f"source file {str(self.path)!r} cannot be read ({exc.strerror or exc}); "
                                             "give the daemon's user read permission on it, or check "
                                             "source.path") from None
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
        self._unreadable: str | None = None  # in follow mode, why the file under the name cannot be opened
        if offsets is not None:
            saved = offsets.load_json(self._offsets_name()) or {}
            ident = offsets.load_json(self._identity_name())
            if ident is not None:
                self._check_identity(ident)
            self._written_identity = ident
            self._resume = (int(saved.get(self.partition, 0)), ident)

    def _offsets_name(self) -> str:
        return f"offsets-{self.path.name}.json"

    def _check_identity(self, ident: Any) -> None:
        """A file-identity side file of another shape than :meth:`commit` writes stops the start, as
        a damaged offsets file does: :class:`SourceUnavailableError` naming it and what to do."""
        problem = None
        if not isinstance(ident, dict):
            problem = "is not a JSON object"
        else:
            for name in _IDENTITY_KEYS:
                v = ident.get(name)
                if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                    problem = f"has {name} = {json.dumps(v)}, not a non-negative integer"
                    break
            else:
                if ident["head_len"] > _HEAD_BYTES:
                    problem = f"has head_len = {ident['head_len']}, more than {_HEAD_BYTES}"
        if problem is not None:
            directory = getattr(self.offsets, "directory", None)
            where = str(Path(directory) / self._identity_name()) if directory is not None else self._identity_name()
            raise SourceUnavailableError(f"{where}: the source's file-identity side file {problem}; delete it (the "
                                         "committed offset then applies to the file under source.path as it is), "
                                         "or restore it")

    def _identity_name(self) -> str:
        # its own file, so the offsets file keeps the format older versions read and write
        return f"file-identity-{self.path.name}.json"

    def _open(self) -> bool:
        if self._fh is None:
            try:
                self._fh = open(self.path, "rb")
            except FileNotFoundError:
                return False
            except (PermissionError, IsADirectoryError) as exc:
                if not self.follow:
                    raise
                # as a missing file: e.g. rotated in with a mode the daemon's user cannot read, which
                # an operator can fix; tried again at each poll
                why = f"{type(exc).__name__}: {exc.strerror or exc}"
                if why != self._unreadable:
                    self._unreadable = why
                    log.warning("source file cannot be opened; trying again at each poll",
                                extra={"path": str(self.path), "error": why})
                return False
            if self._unreadable is not None:
                self._unreadable = None
                log.info("source file can be opened again", extra={"path": str(self.path)})
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
        self.parser.reset()  # a CSV file starts with its own header
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
            self._flush(out)  # a CSV row whose quoted field was never closed: taken as it is
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
        self._take(over, out)

    def _take(self, line: bytes | _Oversized, out: list[Item]) -> None:
        no = self._line_no
        self._line_no += 1
        row = self.parser.feed(line, (self.partition, no))
        if row is not None:  # None: a CSV row going on on the next line
            self._emit(*row, out)

    def _flush(self, out: list[Item]) -> None:
        row = self.parser.flush()
        if row is not None:
            self._emit(*row, out)

    def _emit(self, row: bytes | _Oversized, ref: tuple[str, int], out: list[Item]) -> None:
        # a row is the offset of its first line: a commit after it resumes at its second line, which
        # a restart reads again (to find where rows end) but as part of this committed row
        if ref[1] < self._start:  # already committed by a previous run; a CSV header is still needed
            if self.parser.fmt == "csv" and self.parser.header is None:
                self.parser.item(row, ref)
            return
        item = self.parser.item(row, ref)
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
                    self._flush(out)  # a CSV row whose quoted field was never closed: taken as it is
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
    sink as ``oversized``). The queue holds at most ``queue_size`` lines and ``queue_bytes`` bytes
    (:data:`STDIN_QUEUE_BYTES`; a line larger than that still goes in alone), so a daemon slowed
    by its sinks holds a bounded amount of stdin, however long its lines.
    """

    replayable = False

    def __init__(self, spec: FieldSpec, *, fmt: str = "jsonl", max_bytes: int = 65536,
                 stream: TextIO | BinaryIO | None = None, queue_size: int = 10000,
                 queue_bytes: int = 0, offsets: Any = None):
        # bytes, as files and Kafka messages are parsed: text decoding would turn a bad byte into a
        # surrogate (unparseable) or stop the reader thread, not a not_utf8 dead letter
        self.stream = stream if stream is not None else getattr(sys.stdin, "buffer", sys.stdin)
        if not _readable(self.stream):  # a reader thread would end at once: an idle daemon, forever
            raise SourceUnavailableError("stdin is closed (there is no standard input to read); pipe or "
                                         "redirect the records to the daemon's stdin, or set source.type "
                                         "to file or kafka")
        self.partition = "stdin"
        self.parser = _LineParser("jsonl" if fmt == "auto" else fmt, spec, max_bytes)
        self.exhausted = False
        self._q: queue.Queue[str | bytes | _Oversized | None] = queue.Queue(maxsize=queue_size)
        self._queue_bytes = queue_bytes or STDIN_QUEUE_BYTES
        self._queued = 0  # bytes of the lines in the queue
        self._room = threading.Condition()
        self._eof = False
        self._error: BaseException | None = None  # why the reader thread stopped before the end of stdin
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
        try:
            read = self.stream.readline
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
                self._put(line)  # blocks when the queue is full: backpressure on the writer
        except Exception as exc:  # noqa: BLE001 - the records read so far are still processed, then poll raises
            log.error("reading stdin failed", extra={"error": f"{type(exc).__name__}: {exc}"})
            self._error = exc
        finally:
            self._q.put(None)

    def _put(self, line: str | bytes | _Oversized) -> None:
        n = _queued_size(line)
        with self._room:
            while self._queued and self._queued + n > self._queue_bytes:
                self._room.wait()
            self._queued += n
        self._q.put(line)

    def _taken(self, line: str | bytes | _Oversized) -> None:
        with self._room:
            self._queued -= _queued_size(line)
            self._room.notify()

    def poll(self, max_records: int = 1000, timeout_s: float = 0.5) -> list[Item]:
        out: list[Item] = []
        if self._eof and self._q.empty():
            self._raise_read_error()
        deadline = time.monotonic() + timeout_s
        while len(out) < max_records and not self._eof:
            try:
                line = self._q.get(timeout=max(0.0, deadline - time.monotonic())) if not out else self._q.get_nowait()
            except queue.Empty:
                break
            if line is None:
                self._eof = True
                row = self.parser.flush()  # a CSV row whose quoted field was never closed: taken as it is
                if row is not None:
                    item = self.parser.item(*row)
                    if item is not None:
                        out.append(item)
                break
            self._taken(line)
            no = self._no
            self._no += 1
            row = self.parser.feed(line, (self.partition, no))
            item = None if row is None else self.parser.item(*row)
            if item is not None:
                out.append(item)
        if self._eof and self._q.empty():
            if out:  # the records read before a read failure first
                if self._error is None:
                    self.exhausted = True
                return out
            self._raise_read_error()
            self.exhausted = True
        return out

    def _raise_read_error(self) -> None:
        """A read failure is not the end of the input: once the lines read before it are taken, it
        stops the run."""
        exc = self._error
        if exc is not None:
            raise SourceReadError(f"reading stdin failed ({type(exc).__name__}: {exc}); the records read "
                                  "before the failure were processed") from exc

    def commit(self, positions: dict[str, int]) -> None:
        # stdin cannot be read again: only where the next run's line numbers go on from
        if self.offsets is not None and self.partition in positions:
            self.offsets.save_json(self._offsets_name(), {self.partition: positions[self.partition]})

    def close(self) -> None:
        pass


def _queued_size(line: str | bytes | _Oversized) -> int:
    # an oversized line is queued as its first bytes only
    return _nbytes(line.prefix if isinstance(line, _Oversized) else line)


def _readable(stream: Any) -> bool:
    """Whether ``stream`` can be read at all: not None (``sys.stdin`` of a process started with its
    stdin closed) and not a closed file."""
    if stream is None or not callable(getattr(stream, "readline", None)):
        return False
    try:
        return not getattr(stream, "closed", False)
    except (ValueError, OSError):
        return False


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

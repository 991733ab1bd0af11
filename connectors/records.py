"""Record, Alert and BadRecord: the only types the connectors know.

A ``Record`` is one observation of one key. An ``Alert`` is one alarm of one key's detector; its
``alert_id`` is derived from (key, change index, detector) so a replay after a crash produces the same
ids and downstream consumers can deduplicate. A ``BadRecord`` is an input that could not be turned
into a Record (or was rejected by the pipeline), with the reason; it goes to the dead-letter sink.

Examples
--------
>>> spec = FieldSpec(key="host", timestamp="ts", values=("cpu",))
>>> rec = parse_record(b'{"host": "a", "ts": 1.5, "cpu": 0.25}', spec)
>>> rec.key, rec.timestamp, rec.values.tolist()
('a', 1.5, [0.25])
>>> a = Alert.from_alarm(key="a", detector="rulsif", change_index=10, alarm_index=25,
...                      timestamp=1.5, score=2.0, threshold=1.0)
>>> Alert.from_json(a.to_json()) == a
True
"""

from __future__ import annotations

import base64
import hashlib
import json
import json.decoder
import json.scanner
import math
import re
import sys
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

# Reasons a record goes to the dead-letter sink (also the `reason` label of the bad-records metric).
REASONS = (
    "malformed_json",
    "missing_field",
    "not_numeric",
    "non_finite",
    "wrong_dimension",
    "timestamp_backwards",
    "oversized",
    "not_utf8",
    "nested_too_deep",
    "timestamp_too_far_ahead",
    "detector_error",
    "processing_error",
    "unparseable",
    "delivery_failed",
    "out_of_range",
    "bad_key",
    "malformed_csv",
)

#: largest magnitude of a value a record may carry (``out_of_range`` beyond). No reading is that large,
#: and the detectors square values: one 1e308 among a key's readings overflowed its AR fit, and the
#: daemon sent that key's whole batches to the dead-letter sink and never alerted on it again
MAX_VALUE = 1e150

# Deepest nesting of JSON arrays / objects a message may have. A record is a flat object of a few
# numbers and short lists; deeper input is an error (and Python's JSON decoder recurses, so a few
# thousand levels would raise RecursionError).
MAX_DEPTH = 32

ALERT_SCHEMA_VERSION = 1


@dataclass(frozen=True)
class FieldSpec:
    """Which JSON fields hold the key, the timestamp and the value(s).

    ``values`` is a tuple of field names; each field may hold a number or a list of numbers and the
    record's value vector is their concatenation. ``key=None`` puts every record under ``default_key``.
    ``timestamp=None`` numbers the records of each source in arrival order.
    """

    key: str | None = "key"
    timestamp: str | None = "timestamp"
    values: tuple[str, ...] = ("value",)
    default_key: str = "default"


@dataclass(frozen=True)
class Record:
    """One observation: ``values`` is a 1-d float64 array.

    ``ref`` is the source position ``(partition, offset)`` used for commits and replay
    deduplication; ``raw`` is the original message (what the dead-letter sink gets if the pipeline
    rejects the record). Neither takes part in equality.
    """

    key: str
    timestamp: float
    values: np.ndarray
    ref: tuple[str, int] | None = field(default=None, compare=False)
    raw: bytes | str | None = field(default=None, compare=False, repr=False)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Record):
            return NotImplemented
        return (self.key == other.key and self.timestamp == other.timestamp
                and np.array_equal(self.values, other.values))

    __hash__ = None  # type: ignore[assignment]

    def to_json(self) -> str:
        return json.dumps({"key": self.key, "timestamp": self.timestamp, "values": self.values.tolist()})

    def rejected(self, reason: str, detail: str) -> "BadRecord":
        """A BadRecord for this record, carrying the original message where it is known."""
        return bad_record(self.raw if self.raw is not None else self.to_json(), RecordError(reason, detail),
                          self.ref, self.key)


@dataclass(frozen=True)
class BadRecord:
    """An input that cannot be processed, with the reason (one of :data:`REASONS`) and a detail text."""

    reason: str
    detail: str
    raw: str
    ref: tuple[str, int] | None = None
    key: str | None = None
    # the original bytes, base64-encoded, when they are not UTF-8 (``raw`` then shows them with
    # replacement characters, which lose the bytes)
    raw_base64: str | None = None

    def to_json(self) -> str:
        return json.dumps({"reason": self.reason, "detail": self.detail, "raw": self.raw,
                           "ref": list(self.ref) if self.ref else None, "key": self.key,
                           **({"raw_base64": self.raw_base64} if self.raw_base64 is not None else {})})


def alert_id(key: str, change_index: int, detector: str) -> str:
    """Idempotency key of an alert: a stable hash of (key, change index, detector).

    >>> alert_id("a", 3, "rulsif") == alert_id("a", 3, "rulsif") != alert_id("a", 4, "rulsif")
    True
    """
    payload = json.dumps([key, int(change_index), detector], separators=(",", ":"))
    return hashlib.sha256(payload.encode()).hexdigest()[:32]


@dataclass(frozen=True)
class Alert:
    """A detector alarm for one key, ready for delivery."""

    alert_id: str
    key: str
    detector: str
    kind: str
    change_index: int
    alarm_index: int
    timestamp: float
    score: float
    threshold: float
    version: int = ALERT_SCHEMA_VERSION

    @classmethod
    def from_alarm(cls, *, key: str, detector: str, change_index: int, alarm_index: int,
                   timestamp: float, score: float, threshold: float, kind: str = "changepoint") -> "Alert":
        return cls(alert_id=alert_id(key, change_index, detector), key=key, detector=detector, kind=kind,
                   change_index=int(change_index), alarm_index=int(alarm_index), timestamp=float(timestamp),
                   score=float(score), threshold=float(threshold))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, text: str | bytes) -> "Alert":
        try:
            d = json.loads(text)
            return cls(**d)
        except (json.JSONDecodeError, TypeError) as exc:
            raise ValueError(f"not a ratiowatch alert JSON object ({exc}); expected the fields of Alert") from None


def _as_text(raw: bytes | str) -> str:
    if isinstance(raw, bytes):
        return raw.decode("utf-8", errors="replace")
    return raw


class RecordError(ValueError):
    """Raised by :func:`parse_record`; ``reason`` is one of :data:`REASONS`."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


def key_problem(key: str) -> str | None:
    """Why ``key`` cannot name a series, or None. A key is written as UTF-8 (checkpoint file names,
    Kafka message keys, changelog records), so a lone surrogate (``"\\ud800"``, valid JSON) cannot be
    one; a NUL character separates the parts of a changelog record's key, so two keys could collide.

    >>> key_problem("host-1") is None, key_problem("\\ud800"), key_problem("a\\x00b")
    (True, 'is not valid Unicode (a lone surrogate)', 'contains a NUL character')
    """
    if "\x00" in key:
        return "contains a NUL character"
    if not key.isascii():
        try:
            key.encode("utf-8")
        except UnicodeEncodeError:
            return "is not valid Unicode (a lone surrogate)"
    return None


def record_from_mapping(obj: Any, spec: FieldSpec, *, ref: tuple[str, int] | None = None,
                        fallback_timestamp: float = 0.0, raw: bytes | str | None = None) -> Record:
    """Build a Record from a decoded JSON object (or a CSV row dict); raises :class:`RecordError`."""
    if not isinstance(obj, dict):
        raise RecordError("malformed_json", f"expected a JSON object, got {type(obj).__name__}")
    if spec.key is None:
        key = spec.default_key
    else:
        if spec.key not in obj or obj[spec.key] in (None, ""):
            raise RecordError("missing_field", f"key field {spec.key!r} is missing")
        k = obj[spec.key]
        # a string or a number names a series; true, an object or a list is a producer's mistake,
        # and Python's spelling of it ("True", "{'a': 1}") would name a series silently
        if isinstance(k, bool) or not isinstance(k, (str, int, float)):
            raise RecordError("bad_key", f"key field {spec.key!r} is not a string or a number: {json.dumps(k)[:80]}")
        if isinstance(k, float) and not math.isfinite(k):  # NaN, Infinity, 1e400 would name the series "nan", "inf"
            raise RecordError("bad_key", f"key field {spec.key!r} is NaN, infinite or too large for a float ({k})")
        key = str(k)
        problem = key_problem(key)
        if problem is not None:
            raise RecordError("bad_key", f"key field {spec.key!r} {problem}: {json.dumps(key)[:80]}")
    if spec.timestamp is None:
        ts = float(fallback_timestamp)
    else:
        if spec.timestamp not in obj or obj[spec.timestamp] in (None, ""):
            raise RecordError("missing_field", f"timestamp field {spec.timestamp!r} is missing")
        if isinstance(obj[spec.timestamp], bool):
            raise RecordError("not_numeric", f"timestamp field {spec.timestamp!r} holds a boolean")
        try:
            ts = float(obj[spec.timestamp])
        except OverflowError:
            raise RecordError("non_finite", f"timestamp field {spec.timestamp!r} is too large for a float") from None
        except (TypeError, ValueError):
            raise RecordError("not_numeric", f"timestamp field {spec.timestamp!r} is not a number: "
                                             f"{obj[spec.timestamp]!r}") from None
        if not math.isfinite(ts):
            raise RecordError("non_finite", f"timestamp field {spec.timestamp!r} is {ts}")
    vals: list[float] = []
    for name in spec.values:
        v = obj.get(name)
        if v is None or v == "":
            raise RecordError("missing_field", f"value field {name!r} is missing")
        if type(v) is float or type(v) is int:  # the common case, checked without a loop
            try:
                vals.append(float(v))
            except OverflowError:
                raise RecordError("non_finite", f"value field {name!r} is too large for a float: {v}") from None
            continue
        if v == []:  # would give the record fewer values than fields, silently (and a new key its dimension)
            raise RecordError("missing_field", f"value field {name!r} is an empty list")
        items = v if isinstance(v, list) else [v]
        for item in items:
            if item is None:  # a missing value, as a null field is (the reason names it so)
                raise RecordError("missing_field", f"value field {name!r} holds a missing value (null)")
            if isinstance(item, bool):
                raise RecordError("not_numeric", f"value field {name!r} holds a boolean")
            try:
                vals.append(float(item))
            except OverflowError:
                raise RecordError("non_finite", f"value field {name!r} is too large for a float: {item}") from None
            except (TypeError, ValueError):
                raise RecordError("not_numeric", f"value field {name!r} is not numeric: {item!r}") from None
    if not vals:
        raise RecordError("missing_field", "no values in the record")
    for f in vals:
        if not math.isfinite(f):
            raise RecordError("non_finite", f"values contain NaN or infinity: {vals}")
    for f in vals:
        if abs(f) > MAX_VALUE:
            raise RecordError("out_of_range", f"value {f:g} is beyond +-{MAX_VALUE:g}: an error code rather than a "
                                              "reading? leave such readings out or rescale them")
    arr = np.array(vals, dtype=np.float64)
    return Record(key=key, timestamp=ts, values=arr, ref=ref, raw=raw)


def nesting_depth(text: str, stop: int | None = None) -> int:
    """Deepest nesting of arrays / objects in a JSON text (brackets inside strings do not count);
    counting stops once ``stop`` is exceeded.

    >>> nesting_depth('{"a": [[1], "]]]"], "b": {}}')
    3
    """
    depth = best = 0
    for m in _BRACKETS.finditer(text):
        c = m.group()
        if c in "[{":
            depth += 1
            if depth > best:
                best = depth
                if stop is not None and best > stop:
                    break
        elif c in "]}":
            depth -= 1
    return best


_BRACKETS = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]')


def _deep(text: str, limit: int) -> bool:
    # two C-speed counts settle the usual message; the token scan runs only for bracket-heavy ones
    return text.count("[") + text.count("{") > limit and nesting_depth(text, limit) > limit


def decode_text(raw: bytes | str) -> str:
    """The message as text: UTF-8 (a leading BOM is allowed); raises :class:`RecordError`
    ``not_utf8`` otherwise (JSON exchanged between systems is UTF-8, RFC 8259)."""
    if type(raw) is str:
        return raw
    try:
        return bytes(raw).decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise RecordError("not_utf8", f"message is not UTF-8 text (byte {raw[exc.start]:#04x} at position "
                                      f"{exc.start} is invalid); send JSON encoded as UTF-8") from None


def parse_record(raw: bytes | str, spec: FieldSpec, *, ref: tuple[str, int] | None = None,
                 max_bytes: int = 65536, fallback_timestamp: float = 0.0, max_depth: int = MAX_DEPTH) -> Record:
    """Decode one JSON message into a :class:`Record`; raises :class:`RecordError` with the reason.

    Any failure is the message's: NaN / Infinity literals (which Python's json accepts) are
    ``non_finite``, values beyond :data:`MAX_VALUE` ``out_of_range``, bytes that are not UTF-8
    ``not_utf8``, arrays or objects nested deeper than
    ``max_depth`` ``nested_too_deep``, and anything unexpected ``unparseable``.
    """
    if len(raw) > max_bytes:
        raise RecordError("oversized", f"message has {len(raw)} bytes, more than max_record_bytes={max_bytes}")
    try:
        text = decode_text(raw)
        if _deep(text, max_depth):
            raise RecordError("nested_too_deep", f"arrays or objects nested deeper than {max_depth} levels")
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as exc:
            raise RecordError("malformed_json", str(exc)) from None
        except ValueError as exc:  # an integer of more digits than Python converts (sys.get_int_max_str_digits)
            if "integer string conversion" not in str(exc):
                raise
            raise RecordError("out_of_range", f"an integer has more than {sys.get_int_max_str_digits():,} digits; "
                              f"values must lie within +-{MAX_VALUE:g}") from None
        return record_from_mapping(obj, spec, ref=ref, fallback_timestamp=fallback_timestamp, raw=raw)
    except RecordError:
        raise
    except Exception as exc:  # noqa: BLE001 - whatever one message does, it is that message's fault
        raise RecordError("unparseable", f"{type(exc).__name__}: {exc}") from None


#: bytes of an oversized line that a source keeps for its dead letter (the rest is read and dropped):
#: enough for the 4,096 characters a dead letter shows, at up to 4 bytes each
PREFIX_BYTES = 4 * 4096


def bad_record(raw: bytes | str, err: RecordError, ref: tuple[str, int] | None = None,
               key: str | None = None, limit: int = 4096, size: int | None = None) -> BadRecord:
    """A BadRecord for the dead-letter sink; the raw text is truncated to ``limit`` characters
    (bytes that are not UTF-8 are also kept, base64-encoded, up to ``limit`` bytes).

    ``size``: ``raw`` is only the first bytes (or characters) of a message of ``size`` bytes, an
    oversized line that the source did not keep whole; the mark then counts the bytes left out.

    >>> bad_record(b'{"k": "h\\xffx"}', RecordError("not_utf8", "...")).raw_base64
    'eyJrIjogImj/eCJ9'
    >>> bad_record(b"x" * 5000, RecordError("oversized", "..."), size=10**9).raw[-40:]
    'xxxx...[truncated 999995904 bytes]'
    """
    if size is not None:
        return _bad_prefix(raw, err, ref, key, limit, size)
    text = _as_text(raw)
    if len(text) > limit:
        text = text[:limit] + f"...[truncated {len(text) - limit} chars]"
    original = None
    if isinstance(raw, (bytes, bytearray, memoryview)):
        try:
            bytes(raw).decode("utf-8")
        except UnicodeDecodeError:
            original = base64.b64encode(bytes(raw)[:limit]).decode("ascii")
    return BadRecord(reason=err.reason, detail=err.detail, raw=text, ref=ref, key=key, raw_base64=original)


def _bad_prefix(raw: bytes | str, err: RecordError, ref: tuple[str, int] | None, key: str | None, limit: int,
                size: int) -> BadRecord:
    """:func:`bad_record` of the first bytes of a message of ``size`` bytes (never more than
    :data:`PREFIX_BYTES` of them are decoded)."""
    original = None
    if isinstance(raw, str):
        text = raw[:limit]
        shown = len(text.encode("utf-8", "surrogatepass"))
    else:
        head = bytes(raw[:PREFIX_BYTES])
        try:
            text = head.decode("utf-8")
        except UnicodeDecodeError as exc:
            if exc.reason == "unexpected end of data":  # a character cut at the end of the prefix
                head = head[:exc.start]
            try:
                text = head.decode("utf-8")
            except UnicodeDecodeError:
                text = head.decode("utf-8", errors="replace")
                original = base64.b64encode(head[:limit]).decode("ascii")
        text = text[:limit]
        shown = len(text.encode("utf-8", "surrogatepass")) if original is None else min(len(head), limit)
    if size > shown:
        text += f"...[truncated {size - shown} bytes]"
    return BadRecord(reason=err.reason, detail=err.detail, raw=text, ref=ref, key=key, raw_base64=original)


# --- columnar batches (the daemon's hot path) -------------------------------------------------------
class RecordBatch:
    """One poll's worth of records in columns, plus the messages that could not be parsed.

    Row ``i`` is the record ``Record(keys[i], timestamps[i], values[i], (partitions[i], offsets[i]))``;
    every row has the same dimension (``values`` has shape ``(n, dim)``). ``bad`` holds the
    BadRecords of the same poll and ``positions`` maps each partition to the offset after the last
    message of the poll (good or bad), i.e. what a commit may use once the batch is handled.
    Sources build it with :class:`BatchParser`; :meth:`items` gives the equivalent list form.

    Examples
    --------
    >>> p = BatchParser(FieldSpec(key="k", timestamp="t", values=("v",)))
    >>> for off, raw in enumerate([b'{"k": "a", "t": 1, "v": 2.5}', b'{"k": "a"', b'{"k": "b", "t": 2, "v": 3}']):
    ...     p.add(raw, "p0", off)
    >>> batch = p.finish()
    >>> batch.keys, batch.values[:, 0].tolist(), [b.reason for b in batch.bad], batch.positions
    (['a', 'b'], [2.5, 3.0], ['malformed_json'], {'p0': 3})
    """

    __slots__ = ("keys", "timestamps", "values", "partitions", "offsets", "bad", "positions", "raws")

    def __init__(self, keys: list[str], timestamps: list[float], values: np.ndarray, partitions: list[str],
                 offsets: list[int], bad: list[BadRecord], positions: dict[str, int],
                 raws: list[bytes | str] | None = None):
        self.keys = keys
        self.timestamps = timestamps
        self.values = values
        self.partitions = partitions
        self.offsets = offsets
        self.bad = bad
        self.positions = positions
        self.raws = raws  # the original messages (references, not copies), for dead-letter entries

    def __len__(self) -> int:
        return len(self.keys) + len(self.bad)

    def record(self, i: int) -> Record:
        return Record(self.keys[i], self.timestamps[i], self.values[i], (self.partitions[i], self.offsets[i]),
                      self.raws[i] if self.raws is not None else None)

    def items(self) -> list[Record | BadRecord]:
        """The list form (records then bad records), as the per-item sources return it."""
        return [self.record(i) for i in range(len(self.keys))] + list(self.bad)


class BatchParser:
    """Parses a poll's raw JSON messages straight into a :class:`RecordBatch`.

    Same results as :func:`parse_record` per message (the tests check this on good and bad input),
    at a fraction of the cost: one JSON scan per message without ``json.loads``' per-call set-up,
    the fields of the common shapes (string key, numeric timestamp, numeric or list-of-numbers
    values) read without building a :class:`Record`, and one float64 array for the whole batch.
    Anything unusual (bad JSON, missing fields, a BOM, non-UTF-8 bytes, ...) goes through
    :func:`parse_record` itself, so every reason and message is exactly the per-record one. If the
    good rows of a batch do not all have one dimension, :meth:`finish` returns the list form
    instead (the pipeline rejects the odd ones per key, as for any list).
    """

    _ws = staticmethod(json.decoder.WHITESPACE.match)

    def __init__(self, spec: FieldSpec, max_bytes: int = 65536, max_depth: int = MAX_DEPTH):
        self.spec = spec
        self.max_bytes = max_bytes
        self.max_depth = max_depth
        # json.loads minus its per-call set-up: the decoder's own scanner (C), one per parser
        self._scan = json.scanner.make_scanner(json.JSONDecoder())
        self._reset()

    def _reset(self) -> None:
        self._keys: list[str] = []
        self._ts: list[float] = []
        self._vals: list[float] = []
        self._parts: list[str] = []
        self._offs: list[int] = []
        self._raws: list[bytes | str] = []
        self._bad: list[BadRecord] = []
        self._pos: dict[str, int] = {}
        self._dim = -1
        self._mixed: list[Record | BadRecord] | None = None

    def _fast(self, raw: bytes | str, fallback_ts: float) -> tuple[str, float, list[float]] | None:
        """(key, timestamp, values) for a well-formed message of a common shape, else None."""
        try:
            s = raw.decode("utf-8") if type(raw) is bytes else raw
            ws = self._ws
            obj, end = self._scan(s, ws(s, 0).end())
            if ws(s, end).end() != len(s) or type(obj) is not dict:
                return None
        except Exception:  # noqa: BLE001 - StopIteration / JSONDecodeError / UnicodeDecodeError: slow path
            return None
        spec = self.spec
        if spec.key is None:
            key = spec.default_key
        else:
            key = obj.get(spec.key)
            if type(key) is not str or not key or "\x00" in key or (not key.isascii() and key_problem(key)):
                return None  # the slow path says why
        if spec.timestamp is None:
            ts = fallback_ts
        else:
            t = obj.get(spec.timestamp)
            if type(t) is float:
                ts = t
            elif type(t) is int and -(1 << 53) < t < (1 << 53):
                ts = float(t)
            else:
                return None
            if ts - ts != 0.0:  # inf or nan
                return None
        vals: list[float] = []
        for name in spec.values:
            v = obj.get(name)
            if type(v) is float or (type(v) is int and -(1 << 53) < v < (1 << 53)):
                vals.append(float(v))
            elif type(v) is list and v:
                for it in v:
                    if type(it) is float or (type(it) is int and -(1 << 53) < it < (1 << 53)):
                        vals.append(float(it))
                    else:
                        return None
            else:
                return None
        for f in vals:
            if f - f != 0.0 or not -MAX_VALUE <= f <= MAX_VALUE:  # inf, nan or out of range: the slow path says why
                return None
        return key, ts, vals

    def add(self, raw: bytes | str | None, partition: str, offset: int) -> None:
        """Parse one message at ``(partition, offset)``; ``None`` (a tombstone) counts as empty.

        Never raises for a bad message: whatever goes wrong is that message's BadRecord."""
        ref = (partition, offset)
        if raw is None:
            raw = b""
        if self._pos.get(partition, 0) < offset + 1:
            self._pos[partition] = offset + 1
        try:
            self._add(raw, partition, offset, ref)
        except Exception as exc:  # noqa: BLE001 - one message's failure is that message's, not the batch's
            self._bad.append(bad_record(raw, RecordError("unparseable", f"{type(exc).__name__}: {exc}"), ref))

    def _add(self, raw: bytes | str, partition: str, offset: int, ref: tuple[str, int]) -> None:
        md = self.max_depth
        # the bracket count first: the fast path's decoder recurses, and deep nesting is for parse_record
        ok = len(raw) <= self.max_bytes and raw.count(b"[" if type(raw) is bytes else "[") + \
            raw.count(b"{" if type(raw) is bytes else "{") <= md
        fast = self._fast(raw, float(offset)) if ok else None
        if fast is None:
            try:
                rec = parse_record(raw, self.spec, ref=ref, max_bytes=self.max_bytes,
                                   fallback_timestamp=float(offset), max_depth=md)
            except RecordError as err:
                self._bad.append(bad_record(raw, err, ref))
                return
            key, ts, vals = rec.key, rec.timestamp, rec.values.tolist()
        else:
            key, ts, vals = fast
        if self._mixed is not None:
            self._mixed.append(Record(key, ts, np.array(vals, dtype=np.float64), ref, raw))
            return
        if len(vals) != self._dim:
            if self._dim == -1:
                self._dim = len(vals)
            else:  # rows of two dimensions: keep the list form from here on
                self._mixed = self._rows()
                self._mixed.append(Record(key, ts, np.array(vals, dtype=np.float64), ref, raw))
                return
        self._keys.append(key)
        self._ts.append(ts)
        self._vals.extend(vals)
        self._parts.append(partition)
        self._offs.append(offset)
        self._raws.append(raw)

    def _rows(self) -> list[Record | BadRecord]:
        d = self._dim
        arr = np.array(self._vals, dtype=np.float64).reshape(-1, max(d, 1))
        return [Record(k, t, arr[i], (p, o), r) for i, (k, t, p, o, r) in
                enumerate(zip(self._keys, self._ts, self._parts, self._offs, self._raws))]

    def finish(self) -> RecordBatch | list[Record | BadRecord]:
        """The batch parsed since the last call (and start a new one)."""
        if self._mixed is not None:
            out: RecordBatch | list[Record | BadRecord] = self._mixed + self._bad
        else:
            d = max(self._dim, 1)
            values = np.array(self._vals, dtype=np.float64).reshape(-1, d)
            out = RecordBatch(self._keys, self._ts, values, self._parts, self._offs, self._bad, self._pos,
                              self._raws)
        self._reset()
        return out

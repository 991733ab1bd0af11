"""Per-key pipeline: route records by key to that key's detector, turn alarms into Alerts.

The pipeline is the pure, synchronous middle of the daemon: it knows neither Kafka nor files nor
HTTP. ``process(batch)`` takes Records (and BadRecords from the source), validates them per key
(dimension, timestamps going backwards), groups the batch by key so each detector gets one
contiguous block of rows (vectorised dispatch), and returns the Alerts plus the BadRecords for the
dead-letter sink. A columnar :class:`~ratiowatch.connectors.records.RecordBatch` (the Kafka source's fast path)
goes through the same checks without building per-record objects. State lives in a
:class:`~ratiowatch.stream.engine.checkpoint.CheckpointStore`: ``restore_partitions()`` restores the keys of newly
assigned partitions, a key seen for the first time is restored from its checkpoint if there is one,
``checkpoint()`` writes the keys changed since the last call (``checkpoint_begin``/``_end`` split it
so the file I/O can run on another thread), ``evict()`` checkpoints and forgets keys (idle keys,
revoked partitions).

Replays after a crash are detected per key: a restored key remembers the source position and
timestamp of the last record folded into its state; a record of that partition at or before that
position and not newer than that timestamp is already in the state and is skipped (its alerts were
delivered before the checkpoint was written), so a detector never sees a record twice. A key whose
clock moved back (a confirmed drop beyond ``max_timestamp_ahead``) also remembers the position of
the record it moved back to: the records of that partition up to there came before the drop, and
are skipped whatever their timestamps. A record at
or before the position but newer is judged on its own (a replayed far-future record is
dead-lettered again; a partition whose positions started again brings new records) and the check
goes on; the first record past the position ends it. Without timestamp checks
(``check_timestamps = False``) the position alone decides. A source that
cannot be read again (stdin, ``replayable = False``) replays nothing: :attr:`Pipeline.replay_gates`
is then False and no record is skipped. Checkpoints are fenced: a key
whose checkpoint on disk is newer than the one this pipeline holds (another process took it over
while this one was cut off) is dropped from memory instead of being overwritten.

Examples
--------
>>> import numpy as np
>>> from ratiowatch.connectors.records import Record
>>> class Threshold:                       # a tiny detector: alarm whenever a value exceeds 5
...     name = "threshold"
...     def __init__(self): self.n = 0; self.latest_score = 0.0
...     def update_batch(self, values):
...         out = []
...         for i, v in enumerate(values[:, 0]):
...             self.n += 1; self.latest_score = float(v)
...             if v > 5: out.append(AlarmEvent(i, self.n - 1, self.n - 1, float(v), 5.0))
...         return out
...     def to_state(self): return {"n": self.n, "latest_score": self.latest_score}
>>> class Factory:
...     name = "threshold"
...     def create(self, key, dim): return Threshold()
...     def restore(self, state): d = Threshold(); d.n = state["n"]; return d
>>> p = Pipeline(Factory())
>>> alerts, bad = p.process([Record("a", float(t), np.array([v]), ("p0", t)) for t, v in enumerate([1, 9, 2])])
>>> [(a.key, a.change_index, a.score) for a in alerts], bad
([('a', 1, 9.0)], [])
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

from ratiowatch.stream.engine.checkpoint import CheckpointStore
from ratiowatch.connectors.records import Alert, BadRecord, Record, RecordBatch

log = logging.getLogger("ratiowatch.daemon")


_UNSET = object()
#: the entries of a checkpoint's metadata that a restore reads (``seq`` may be absent)
_META_REQUIRED = ("dim", "count", "last_ts")


@dataclass(frozen=True)
class AlarmEvent:
    """An alarm raised while a detector consumed row ``row`` of the block it was given."""

    row: int
    change_index: int
    alarm_index: int
    score: float
    threshold: float
    kind: str = "changepoint"


@runtime_checkable
class Detector(Protocol):
    """What the pipeline needs from a per-key detector."""

    latest_score: float

    def update_batch(self, values: np.ndarray) -> list[AlarmEvent]:
        """Consume rows of ``values`` (shape (m, dim)) in order; return the alarms raised."""

    def to_state(self) -> dict[str, Any]:
        """Checkpointable state (arrays, floats, ints, strings)."""


class DetectorFactory(Protocol):
    """Creates a key's detector on first sight and restores one from a checkpoint state."""

    name: str

    def create(self, key: str, dim: int) -> Detector: ...

    def restore(self, state: dict[str, Any]) -> Detector: ...


@dataclass
class KeyState:
    detector: Detector
    dim: int
    count: int = 0                      # records folded into the detector
    last_ts: float = float("-inf")
    last_ref: tuple[str, int] | None = None
    # (partition, offset, timestamp) of the checkpoint, and the offset up to which that partition's
    # records precede the clock's latest move back (skipped whatever their timestamps; -inf: none)
    replay_gate: tuple[str, int, float, float] | None = None
    back_ref: tuple[str, int] | None = None  # the record the clock last moved back to (checkpointed)
    seq: int = 0
    dirty: bool = False
    last_seen: float = field(default_factory=time.monotonic)
    ahead_streak: int = 0               # records in a row rejected as too far ahead (not checkpointed)
    ahead_last: float = float("-inf")   # the latest of them
    name: str | None = None             # the detector's name when not the factory's (restored, config changed)


class Pipeline:
    """Per-key routing, validation and alarm-to-Alert conversion.

    Parameters
    ----------
    factory : DetectorFactory
        Builds detectors (``factory.name`` goes into each alert's idempotency key).
    store : CheckpointStore, optional
        Where per-key state is restored from and checkpointed to.
    dim : int, optional
        Required value dimension; ``None`` learns it from each key's first record.
    check_timestamps : bool
        Reject records whose timestamp is older than the key's previous one.
    max_timestamp_ahead : float or None
        With ``check_timestamps``: a record more than this far ahead of its key's latest accepted
        timestamp is rejected (``timestamp_too_far_ahead``) and does not move the key's clock, so a
        single far-future timestamp cannot make every later record of the key "go backwards".
        ``None``: no bound.
    ahead_confirm : int
        A real jump is accepted when this many records in a row are all too far ahead, each within
        ``max_timestamp_ahead`` after the one before: the last of them is admitted and becomes the
        key's clock; the ones before it are in the dead-letter sink.
    """

    def __init__(self, factory: DetectorFactory, *, store: CheckpointStore | None = None,
                 dim: int | None = None, check_timestamps: bool = True,
                 max_timestamp_ahead: float | None = None, ahead_confirm: int = 2):
        self.factory = factory
        self.store = store
        self.dim = dim
        self.check_timestamps = check_timestamps
        self.max_timestamp_ahead = max_timestamp_ahead
        self.ahead_confirm = max(1, int(ahead_confirm))
        self.keys: dict[str, KeyState] = {}
        self.positions: dict[str, int] = {}     # partition -> next offset to read (all earlier handled)
        self.key_partition: dict[str, str] = {}
        self.records_since_checkpoint = 0
        self.items_since_checkpoint = 0   # records + bad records: both move offsets that need a commit
        self.skipped_replays = 0
        #: restored keys skip the records at or before their checkpoint's position (replays); False
        #: for a source that cannot replay (stdin), whose positions start again at every run
        self.replay_gates = True
        self._unreadable_warned: set[str] = set()  # keys whose unreadable checkpoint was logged
        self._params_warned: set[str] = set()  # keys whose checkpoint's other detector parameters were logged
        self._config_ident: Any = _UNSET
        self.fenced_keys = 0
        self.detector_cpu_s = 0.0   # CPU time spent inside the detectors (what the daemon adds is the rest)
        self.last_checkpoint = time.monotonic()

    # --- key state --------------------------------------------------------------------------
    def _state_for(self, key: str, dim: int) -> KeyState:
        ks = self.keys.get(key)
        if ks is not None:
            return ks
        try:
            loaded = self.store.load(key) if self.store is not None else None
            if loaded is not None:
                ks = self._restored(*loaded, key)
        except Exception as exc:
            # every record of the key is a processing_error dead letter until the checkpoint is dealt
            # with: said once per key in the log, not once per record
            warned = self._unreadable_warned
            if key not in warned:
                if len(warned) >= 10000:  # bounded: a key may be said again after many others
                    warned.clear()
                warned.add(key)
                log.warning("checkpoint of a key cannot be restored: its records go to the dead-letter sink "
                            "(processing_error) until the checkpoint is repaired or deleted",
                            extra={"key": key, "error": f"{type(exc).__name__}: {exc}"})
            raise
        if loaded is None:
            ks = KeyState(detector=self.factory.create(key, self.dim or dim), dim=self.dim or dim)
        self.keys[key] = ks
        return ks

    def _restored(self, state: dict[str, Any], meta: dict[str, Any], key: str) -> KeyState:
        meta = self._checked_meta(meta, key)
        try:
            det = self.factory.restore(state)
        except Exception as exc:
            written = meta.get("detector")
            if written is not None and written != self.factory.name:
                raise ValueError(f"the checkpoint was written by the detector {written!r}, this daemon runs "
                                 f"{self.factory.name!r}: point checkpoint.dir (or checkpoint.topic) elsewhere "
                                 "for another detector, or delete the key's checkpoint to start it afresh") from exc
            raise
        ref = tuple(meta["last_ref"]) if meta.get("last_ref") else None
        back = tuple(meta["back_ref"]) if meta.get("back_ref") else None
        ks = KeyState(detector=det, dim=int(meta["dim"]), count=int(meta["count"]),
                      last_ts=float(meta["last_ts"]), last_ref=ref, seq=int(meta.get("seq", 0)),
                      back_ref=back, name=self._restored_name(key, det, meta))
        if ref is not None and self.replay_gates:
            # the records of the partition up to the clock's move back came before it: their timestamps
            # may be far newer than the state's, and they were handled all the same
            before = float(back[1]) if back is not None and back[0] == ref[0] and back[1] <= ref[1] else float("-inf")
            ks.replay_gate = (ref[0], int(ref[1]), ks.last_ts, before)
        return ks

    def _where(self, key: str) -> str:
        path = getattr(self.store, "path", None)
        return str(path(key)) if callable(path) else f"the checkpoint of key {key!r}"

    def _checked_meta(self, meta: Any, key: str) -> dict[str, Any]:
        """The pipeline's metadata of a checkpoint, refused (naming the entry and the file) when an
        entry is missing or not of its type: a damaged file or another program's."""
        todo = "a damaged checkpoint, or another program's; delete it to start the key from scratch"
        if not isinstance(meta, dict):
            raise ValueError(f"{self._where(key)}: the checkpoint's metadata is a {type(meta).__name__}, not an "
                             f"object ({todo})")
        missing = [name for name in _META_REQUIRED if name not in meta]
        if missing:
            raise ValueError(f"{self._where(key)}: the checkpoint's metadata lacks {', '.join(map(repr, missing))} "
                             f"({todo})")

        def integer(v: Any) -> bool:
            return isinstance(v, int) and not isinstance(v, bool)

        ref = meta.get("last_ref")
        back = meta.get("back_ref")
        problems = [name for name, ok in (
            ("dim", integer(meta["dim"]) and meta["dim"] >= 1),
            ("count", integer(meta["count"]) and meta["count"] >= 0),
            ("last_ts", isinstance(meta["last_ts"], (int, float)) and not isinstance(meta["last_ts"], bool)),
            ("last_ref", ref is None or (isinstance(ref, list) and len(ref) == 2 and integer(ref[1]))),
            ("back_ref", back is None or (isinstance(back, list) and len(back) == 2 and integer(back[1]))),
            ("seq", integer(meta.get("seq", 0)))) if not ok]
        if problems:
            raise ValueError(f"{self._where(key)}: the checkpoint's metadata holds a bad "
                             f"{', '.join(f'{n!r} ({meta.get(n)!r})' for n in problems)} ({todo})")
        return meta

    # A key restored from a checkpoint keeps the detector the checkpoint holds: a restore is exact.
    # When that detector's name or parameters differ from the config's (the config changed since),
    # the key's alerts name the detector that produced them, and that is said once per key.
    def _config_identity(self) -> tuple[str, dict[str, Any]] | None:
        if self._config_ident is _UNSET:
            identity = getattr(self.factory, "identity", None)
            self._config_ident = None if identity is None else identity(self.factory.create("config", self.dim or 1))
        return self._config_ident

    def _restored_name(self, key: str, det: Detector, meta: dict[str, Any]) -> str | None:
        """The name the key's alerts carry when it is not the factory's (None: the factory's)."""
        mine = self._config_identity()
        if mine is None:
            return None
        theirs = self.factory.identity(det)  # type: ignore[attr-defined]
        if theirs is None or theirs == mine:
            return None
        name = theirs[0] if theirs[0] != mine[0] else None
        warned = self._params_warned
        if key not in warned:
            if len(warned) >= 10000:  # bounded: a key may be said again after many others
                warned.clear()
            warned.add(key)
            changed = _differences(theirs[1], mine[1])
            if name is not None:
                changed.insert(0, f"detector: {theirs[0]!r} (checkpoint) vs {mine[0]!r} (config)")
            log.warning("the checkpoint of a key holds a detector with other parameters than the config's: the key "
                        "keeps its checkpoint's detector (its alerts name that detector); delete the key's "
                        "checkpoint to start it afresh with the config's parameters",
                        extra={"key": key, "checkpoint_detector": theirs[0], "config_detector": mine[0],
                               "differences": "; ".join(changed)})
        return name

    def restore_partitions(self, partitions: set[str], limit: int = 10000) -> int:
        """Restore now (not on first sight) the keys whose last checkpointed record came from one of
        ``partitions``, most recently checkpointed first, at most ``limit`` of them (more keys are
        still restored lazily on first sight). Keys already in memory are left alone. Returns the
        number restored; a checkpoint that cannot be read is skipped here and reported when its
        key is seen."""
        if self.store is None or not partitions or limit <= 0:
            return 0
        # one by one where the store can (a checkpoint directory holds a file per key ever seen):
        # the files after the last key restored are never opened
        entries = getattr(self.store, "iter_scan", None)
        n = 0
        for key, meta, path in (entries() if entries is not None else self.store.scan()):
            ref = meta.get("last_ref")
            if not ref or ref[0] not in partitions or key in self.keys:
                continue
            try:
                ks = self._restored(*self.store.load_entry(path), key)
            except Exception:  # noqa: BLE001 - the lazy path will raise it with the key's context
                continue
            self.keys[key] = ks
            self.key_partition[key] = ref[0]
            n += 1
            if n >= limit:
                break
        return n

    # --- processing ---------------------------------------------------------------------------
    def process(self, batch: list[Record | BadRecord] | RecordBatch) -> tuple[list[Alert], list[BadRecord]]:
        """Fold a batch (a list of items, or a columnar :class:`RecordBatch`) into the detectors;
        returns (alerts, bad records)."""
        if isinstance(batch, RecordBatch):
            return self._process_columns(batch)
        bad: list[BadRecord] = []
        groups: dict[str, tuple[KeyState, list[Record]]] = {}
        now = time.monotonic()
        self.items_since_checkpoint += len(batch)
        for item in batch:
            ref = item.ref
            if ref is not None:
                part, off = ref
                if off + 1 > self.positions.get(part, 0):
                    self.positions[part] = off + 1
            if isinstance(item, BadRecord):
                bad.append(item)
                continue
            try:
                ks = self._state_for(item.key, item.values.shape[0])
                ks.last_seen = now
                if ref is not None:
                    self.key_partition[item.key] = ref[0]
                if self._admit(ks, item, bad):
                    groups.setdefault(item.key, (ks, []))[1].append(item)
            except Exception as exc:  # noqa: BLE001 - a failure while handling one record is that record's fault
                self._reject_all([item], exc, bad)
        alerts: list[Alert] = []
        for key, (ks, recs) in groups.items():
            try:
                block = np.vstack([r.values for r in recs]) if len(recs) > 1 else recs[0].values[None, :]
                self._fold(key, ks, block, [r.timestamp for r in recs], lambda recs=recs: recs, alerts, bad)
            except Exception as exc:  # noqa: BLE001
                self._reject_all(recs, exc, bad)
        return alerts, bad

    def _admit(self, ks: KeyState, item: Record, bad: list[BadRecord]) -> bool:
        """Per-record checks (replay gate, dimension, timestamps); True if it goes to the detector."""
        ref = item.ref
        if ks.replay_gate is not None and ref is not None and ref[0] == ks.replay_gate[0]:
            if ref[1] > ks.replay_gate[1]:
                ks.replay_gate = None  # past the checkpoint's position: the replay is over
            elif item.timestamp <= ks.replay_gate[2] or not self.check_timestamps or ref[1] <= ks.replay_gate[3]:
                # folded into the restored state before the checkpoint (without timestamp checks the
                # timestamps promise no order, and the position alone decides; up to the record the
                # clock moved back to, the records came before the drop and may be newer than the state)
                self.skipped_replays += 1
                return False
            # else at or before the position but newer than the state: judged on its own below, and
            # the check goes on. A replayed record that was dead-lettered for a far-future timestamp
            # is dead-lettered again and must not end the check (the records after it would all be
            # 'timestamp_backwards'); records of a partition whose positions started again (a topic
            # made anew, a file replaced) are new and newer, and are taken.
        if item.values.shape[0] != ks.dim:
            bad.append(item.rejected("wrong_dimension", f"key {item.key!r} has dimension {ks.dim}, record has "
                                     f"{item.values.shape[0]}"))
            return False
        if self.check_timestamps:
            t = item.timestamp
            ahead = self.max_timestamp_ahead
            if t < ks.last_ts:
                # A record far behind the clock is dead-lettered, but the clock may be the wrong one: a
                # key's first record sets it unchecked, and one in milliseconds among seconds would send
                # every later record of the key here, across restarts. So a drop back is confirmed as a
                # jump ahead is (below, sharing its streak: a record far behind and one far ahead are
                # never within the bound of each other): once ahead_confirm records in a row are beyond
                # the bound, each within it after the one before, the last is taken and the clock moves
                # back to it. A step back within the bound is out-of-order input and stays rejected.
                if ahead is not None and ks.last_ts - t > ahead:
                    streak = ks.ahead_streak + 1 if 0.0 <= t - ks.ahead_last <= ahead else 1
                    if streak >= self.ahead_confirm:
                        ks.ahead_streak, ks.ahead_last = 0, float("-inf")
                        ks.last_ts = t
                        ks.last_ref = ks.back_ref = ref
                        return True
                    ks.ahead_streak, ks.ahead_last = streak, t
                bad.append(item.rejected("timestamp_backwards", f"timestamp {t} is older than the key's "
                                         f"previous {ks.last_ts}"))
                return False
            if ahead is not None and ks.last_ts != float("-inf") and t - ks.last_ts > ahead:
                # a jump is confirmed by records close to each other, not by two wild ones in a row
                streak = ks.ahead_streak + 1 if 0.0 <= t - ks.ahead_last <= ahead else 1
                if streak < self.ahead_confirm:
                    ks.ahead_streak, ks.ahead_last = streak, t
                    bad.append(item.rejected("timestamp_too_far_ahead", f"timestamp {t} is more than "
                                             f"max_timestamp_ahead={ahead} after the key's latest {ks.last_ts}"))
                    return False
            ks.ahead_streak, ks.ahead_last = 0, float("-inf")  # in range, or a jump confirmed
        ks.last_ts = item.timestamp
        ks.last_ref = ref
        if ks.back_ref is not None and ref is not None:
            self._forget_back_ref_of_restarted(ks, [ref])
        return True

    @staticmethod
    def _forget_back_ref_of_restarted(ks: KeyState, refs) -> None:
        """A record taken before the clock's move back, on its partition: the partition's positions
        started again, and the move back's position means nothing in the new numbering."""
        part, off = ks.back_ref
        if any(p == part and o < off for p, o in refs):
            ks.back_ref = None

    def _fold(self, key: str, ks: KeyState, block: np.ndarray, stamps: list[float], records,
              alerts: list[Alert], bad: list[BadRecord]) -> None:
        """Feed one key's admitted rows to its detector; ``records()`` gives them as Records (errors only)."""
        c0 = time.thread_time()
        held_by = getattr(ks.detector, "routed_kind", None)
        try:
            events = ks.detector.update_batch(block)
        except Exception as exc:  # noqa: BLE001 - a detector failure must not kill the daemon
            for r in records():
                bad.append(r.rejected("detector_error", f"{type(exc).__name__}: {exc}"))
            return
        finally:
            self.detector_cpu_s += time.thread_time() - c0
        m = len(stamps)
        ks.count += m
        ks.dirty = True
        self.records_since_checkpoint += m
        if held_by == "window" and ks.detector.routed_kind == "split_profile":
            # kind = "auto": said once per key, so an operator can tell which keys run the slower detector
            log.info("key handed to the split-profile detector: its data since the last change have a period",
                     extra={"key": key, "record": int(ks.detector.det.handed_over_at)})
        name = ks.name or self.factory.name
        for ev in events:
            alerts.append(Alert.from_alarm(key=key, detector=name, change_index=ev.change_index,
                                           alarm_index=ev.alarm_index, timestamp=stamps[ev.row],
                                           score=ev.score, threshold=ev.threshold, kind=ev.kind))

    def _process_columns(self, batch: RecordBatch) -> tuple[list[Alert], list[BadRecord]]:
        """The columnar path: same checks and results as the list path, without per-record objects.

        Rows are grouped by key with one dict pass; each key's rows are checked together (the
        timestamp check in one loop over floats) and handed to its detector as one block. A key
        that still has a replay gate (just restored) takes the per-record path for its rows.
        """
        bad: list[BadRecord] = list(batch.bad)
        now = time.monotonic()
        self.items_since_checkpoint += len(batch)
        pos = self.positions
        for part, nxt in batch.positions.items():
            if nxt > pos.get(part, 0):
                pos[part] = nxt
        keys, stamps, parts, offs = batch.keys, batch.timestamps, batch.partitions, batch.offsets
        values = batch.values
        dim = values.shape[1]
        groups: dict[str, list[int]] = {}
        for i, k in enumerate(keys):
            g = groups.get(k)
            if g is None:
                groups[k] = [i]
            else:
                g.append(i)
        alerts: list[Alert] = []
        check_ts = self.check_timestamps
        ahead = float("inf") if self.max_timestamp_ahead is None else self.max_timestamp_ahead
        for key, rows in groups.items():
            try:
                ks = self._state_for(key, dim)
                ks.last_seen = now
                last = rows[-1]
                self.key_partition[key] = parts[last]
                if ks.replay_gate is not None or dim != ks.dim or ks.ahead_streak:
                    admitted = [i for i in rows if self._admit(ks, batch.record(i), bad)]
                else:
                    ts_rows = [stamps[i] for i in rows]
                    prev = ks.last_ts
                    ok = True
                    if check_ts:
                        for t in ts_rows:
                            # (a key's first record, prev = -inf, takes the per-record path when bounded)
                            if t < prev or t - prev > ahead:
                                ok = False
                                break
                            prev = t
                    if ok:
                        admitted = rows
                        ks.last_ts = ts_rows[-1]
                        ks.last_ref = (parts[last], offs[last])
                        if ks.back_ref is not None:
                            self._forget_back_ref_of_restarted(ks, [(parts[i], offs[i]) for i in rows])
                    else:  # some go backwards or too far ahead: the per-record checks decide which
                        admitted = [i for i in rows if self._admit(ks, batch.record(i), bad)]
                if not admitted:
                    continue
                block = values[admitted] if len(admitted) < len(keys) else values
                self._fold(key, ks, block, [stamps[i] for i in admitted],
                           lambda admitted=admitted: [batch.record(i) for i in admitted], alerts, bad)
            except Exception as exc:  # noqa: BLE001 - a failure while handling one key is its records' fault
                self._reject_all([batch.record(i) for i in rows], exc, bad)
        return alerts, bad

    @staticmethod
    def _reject_all(records: list[Record], exc: BaseException, bad: list[BadRecord]) -> None:
        detail = f"{type(exc).__name__}: {exc}"
        bad.extend(r.rejected("processing_error", detail) for r in records)

    # --- checkpoints and eviction ------------------------------------------------------------
    def _meta(self, ks: KeyState) -> dict[str, Any]:
        meta = {"dim": ks.dim, "count": ks.count, "last_ts": ks.last_ts,
                "last_ref": list(ks.last_ref) if ks.last_ref else None, "seq": ks.seq + 1,
                "detector": ks.name or self.factory.name}
        if ks.back_ref is not None:  # only a key whose clock moved back
            meta["back_ref"] = list(ks.back_ref)
        return meta

    def checkpoint(self, keys: list[str] | None = None) -> int:
        """Write the checkpoints of changed keys (all changed keys when ``keys`` is None)."""
        job = self.checkpoint_begin(keys)
        job.run()
        return self.checkpoint_end(job)

    def checkpoint_begin(self, keys: list[str] | None = None) -> "CheckpointJob":
        """Snapshot the changed keys now (their states encoded on this thread); ``job.run()`` writes
        the files and may run on another thread while this pipeline goes on processing;
        :meth:`checkpoint_end` (back on this thread) applies the outcome. Jobs in flight together
        must hold disjoint keys (the daemon evicts no key of the job being written).

        Only a checkpoint of every key (``keys`` None, the one a commit follows) restarts the
        counts that schedule the next: a checkpoint of some keys (evicted or revoked ones) commits
        nothing else, and with more keys than ``max_keys`` some are evicted in every loop, so
        resetting there meant no offset was ever committed while the daemon ran."""
        if keys is None:
            self.last_checkpoint = time.monotonic()
            self.records_since_checkpoint = 0
            self.items_since_checkpoint = 0
        items: list[tuple[str, KeyState, int, bytes]] = []
        if self.store is not None:
            encode = self.store.encode
            for key in (list(self.keys) if keys is None else keys):
                ks = self.keys.get(key)
                if ks is None or not ks.dirty:
                    continue
                items.append((key, ks, ks.seq, encode(key, ks.detector.to_state(), self._meta(ks))))
                ks.seq += 1
                ks.dirty = False
        return CheckpointJob(self.store, items)

    def checkpoint_end(self, job: "CheckpointJob") -> int:
        """Apply a finished job: drop fenced keys; on a failed write the keys stay dirty and the
        error is raised. Returns the number of checkpoints written."""
        if job.error is not None:
            for _key, ks, held, _payload in job.items:
                ks.seq = held
                ks.dirty = True
            raise job.error
        for key, ks in job.fenced:
            if self.keys.get(key) is ks:
                self.keys.pop(key, None)
                self.key_partition.pop(key, None)
        self.fenced_keys += len(job.fenced)
        return job.written

    def evict(self, keys: list[str]) -> int:
        """Checkpoint then forget ``keys``; they are restored from the store when seen again.
        Returns the number of checkpoints written (keys unchanged since their last one need none)."""
        written = self.checkpoint(keys)
        for key in keys:
            self.keys.pop(key, None)
            self.key_partition.pop(key, None)
        return written

    def excess_keys(self, max_keys: int) -> list[str]:
        """The least recently seen keys beyond the first ``max_keys`` (none when ``max_keys`` is 0)."""
        if max_keys <= 0 or len(self.keys) <= max_keys:
            return []
        return self.keys_by_age()[: len(self.keys) - max_keys]

    def keys_by_age(self) -> list[str]:
        """The keys in memory, least recently seen first."""
        keys = self.keys
        return sorted(keys, key=lambda k: keys[k].last_seen)

    def idle_keys(self, idle_s: float, now: float | None = None) -> list[str]:
        now = time.monotonic() if now is None else now
        return [k for k, ks in self.keys.items() if now - ks.last_seen >= idle_s]

    def keys_of_partitions(self, partitions: set[str]) -> list[str]:
        return [k for k, p in self.key_partition.items() if p in partitions and k in self.keys]

    def latest_score(self, key: str) -> float | None:
        ks = self.keys.get(key)
        return None if ks is None else float(ks.detector.latest_score)


class CheckpointJob:
    """Encoded checkpoints waiting to be written; :meth:`run` does the file I/O (any thread).

    Fencing happens here, just before the write: a key whose checkpoint on disk is newer than the
    one this pipeline last wrote (another process took it over while this one was cut off) is not
    written; :meth:`Pipeline.checkpoint_end` then drops it from memory.
    """

    def __init__(self, store: CheckpointStore | None, items: list[tuple[str, KeyState, int, bytes]]):
        self.store = store
        self.items = items
        self.keys = frozenset(key for key, *_ in items)  # the keys it writes (no other writer of them meanwhile)
        self.fenced: list[tuple[str, KeyState]] = []
        self.written = 0
        self.error: BaseException | None = None

    def run(self) -> "CheckpointJob":
        if self.store is None or not self.items:
            return self
        try:
            todo = []
            for key, ks, held, payload in self.items:
                if self.store.seq(key) > held:
                    self.fenced.append((key, ks))
                else:
                    todo.append((key, payload, held + 1))
            self.written = self.store.write_many(todo)
        except Exception as exc:  # noqa: BLE001 - handed back to the loop's thread by checkpoint_end
            self.error = exc
        return self


# --- adapter for the real detector ---------------------------------------------------------------
class ChangePointAdapter:
    """Thin adapter: :class:`ratiowatch.stream.detectors.changepoint.ChangePointDetector` -> :class:`Detector`."""

    def __init__(self, det: Any):
        self.det = det
        self.latest_score = 0.0

    def update_batch(self, values: np.ndarray) -> list[AlarmEvent]:
        det = self.det
        events: list[AlarmEvent] = []
        one = values.shape[1] == 1
        many = getattr(det, "step_many", None)
        if many is not None:  # the detector's batched entry point: one call per key and poll
            results = many(values[:, 0] if one else values)
        else:
            step = det.step
            results = [step(row) for row in (values[:, 0].tolist() if one else values)]  # floats step fastest
        for i, a in enumerate(results):
            if a is not None:
                events.append(AlarmEvent(i, int(a.change_index), int(a.alarm_index), float(a.score),
                                         float(a.threshold)))
        s = _score_of(det)
        if s is not None:
            self.latest_score = s
        return events

    def to_state(self) -> dict[str, Any]:
        return self.det.to_state()

    @property
    def routed_kind(self) -> str | None:
        """``kind = "auto"``: which detector holds the key (``"window"`` or ``"split_profile"``)."""
        return getattr(self.det, "kind", None)


def _score_of(det: Any) -> float | None:
    for name in ("score", "last_score", "latest_score"):
        v = getattr(det, name, None)
        if isinstance(v, (int, float, np.floating)) and not isinstance(v, bool):
            return float(v) if np.isfinite(v) else None  # NaN during warm-up: keep the last real score
    return None


def _json_params(params: dict[str, Any]) -> dict[str, Any]:
    """Parameters as a checkpoint's JSON holds them (tuples are lists), for comparing."""
    return json.loads(json.dumps(params, default=str))


def _detector_params(det: Any) -> dict[str, Any] | None:
    """The constructor parameters a change-point or anomaly detector runs with (None: unknown)."""
    if callable(getattr(det, "_params", None)):  # ChangePointDetector, SplitProfileDetector, PeriodRoutedDetector
        params = dict(det._params())
    elif isinstance(getattr(det, "params", None), dict):  # TimeSeriesAnomalyDetector
        params = {**det.params, "seed": det.seed}
    else:
        return None
    return _json_params(params)


def _differences(theirs: dict[str, Any], mine: dict[str, Any], prefix: str = "") -> list[str]:
    """``"name: checkpoint value (checkpoint) vs config value (config)"`` for each parameter that differs."""
    out = []
    for name in sorted(set(theirs) | set(mine), key=str):
        a, b = theirs.get(name, "unset"), mine.get(name, "unset")
        if isinstance(a, dict) and isinstance(b, dict):
            out.extend(_differences(a, b, f"{prefix}{name}."))
        elif a != b:
            out.append(f"{prefix}{name}: {a!r} (checkpoint) vs {b!r} (config)")
    return out


class ChangePointFactory:
    """Builds ChangePointDetectors (or, with ``kind="split_profile"``, SplitProfileDetectors, and with
    ``kind="auto"``, PeriodRoutedDetectors) from config keyword arguments (one per key)."""

    def __init__(self, kwargs: dict[str, Any], kind: str = "window"):
        import importlib

        from ratiowatch.stream.engine.config import DETECTOR_KINDS

        if kind not in DETECTOR_KINDS:
            raise ValueError(f"detector kind must be one of {sorted(DETECTOR_KINDS)}; got {kind!r}")
        module, cls = DETECTOR_KINDS[kind]
        self._cls = getattr(importlib.import_module(module), cls)  # the numba-heavy import, only here
        self.kwargs = dict(kwargs)
        self.name = f"changepoint/{kind}" if kind in ("split_profile", "auto") else (
            f"changepoint/{self.kwargs.get('method', 'default')}")

    def create(self, key: str, dim: int) -> ChangePointAdapter:
        return ChangePointAdapter(self._cls(**self.kwargs))

    def restore(self, state: dict[str, Any]) -> ChangePointAdapter:
        return ChangePointAdapter(self._cls.from_state(state))

    def identity(self, detector: ChangePointAdapter) -> tuple[str, dict[str, Any]] | None:
        """``(name, parameters)`` of a detector (a restored one may have other parameters than the config's)."""
        det = detector.det
        params = _detector_params(det)
        if params is None:
            return None
        kind = {"PeriodRoutedDetector": "auto", "SplitProfileDetector": "split_profile"}.get(type(det).__name__)
        return (f"changepoint/{kind}" if kind else f"changepoint/{params.get('method', 'default')}"), params


def event_starts(scores: np.ndarray, threshold: float, debounce: int, start: int = 0,
                 last_hit: int = -(2 ** 62)) -> tuple[list[int], int]:
    """Positions in ``scores`` (rows ``start``, ``start + 1``, ...) that start an event, and the row of
    the latest score at or above ``threshold``: a row at or above it starts an event unless the
    previous such row, ``last_hit`` included, lies within ``max(debounce, 1)`` rows before it.

    Examples
    --------
    >>> event_starts(np.array([0.6, 0.7, 0.0, 0.0, 0.9]), 0.5, debounce=2)
    ([0, 4], 4)
    >>> event_starts(np.array([0.6, 0.0]), 0.5, debounce=2, start=10, last_hit=9)
    ([], 10)
    """
    gap = max(int(debounce), 1)
    first = []
    for i in np.flatnonzero(scores >= threshold).tolist():  # few rows: the rare ones
        if start + i - last_hit > gap:
            first.append(i)
        last_hit = start + i
    return first, last_hit


class AnomalyAdapter:
    """:class:`ratiowatch.stream.detectors.anomaly.TimeSeriesAnomalyDetector` -> :class:`Detector`:
    one alarm of kind ``"anomaly"`` per event. A row whose score reaches ``threshold`` raises an
    alarm (change and alarm index are the row's index in the key's stream) unless a row within the
    detector's ``debounce`` rows before it reached the threshold too: those rows belong to the same
    event (a stuck sensor's score rises with every repeated row, and each rise beats the last)."""

    def __init__(self, det: Any, threshold: float, last_hit: int = -(2 ** 62)):
        self.det = det
        self.threshold = float(threshold)
        self.last_hit = int(last_hit)  # index of the latest row at or above the threshold
        self.latest_score = 0.0

    def update_batch(self, values: np.ndarray) -> list[AlarmEvent]:
        if values.shape[1] != 1:
            raise ValueError(f"kind = 'anomaly' scores one value per key; this record has {values.shape[1]} "
                             "values (list one field in fields.values)")
        start = int(self.det.n_seen)
        scores = self.det.score_series(values[:, 0])
        self.latest_score = float(scores[-1])
        first, self.last_hit = event_starts(scores, self.threshold, int(self.det.debounce), start, self.last_hit)
        return [AlarmEvent(i, start + i, start + i, float(scores[i]), self.threshold, kind="anomaly") for i in first]

    def to_state(self) -> dict[str, Any]:
        return {**self.det.to_state(), "alert_last_hit": np.int64(self.last_hit)}


class AnomalyFactory:
    """Builds one TimeSeriesAnomalyDetector per key (config keyword arguments) behind an
    :class:`AnomalyAdapter` with the alert threshold ``score_threshold``."""

    name = "anomaly"

    def __init__(self, kwargs: dict[str, Any], score_threshold: float | None = None):
        from ratiowatch.stream.detectors.anomaly import TimeSeriesAnomalyDetector
        from ratiowatch.stream.engine.config import ANOMALY_THRESHOLD

        self._cls = TimeSeriesAnomalyDetector
        self.kwargs = dict(kwargs)  # TOML arrays of views are fine: the detector makes them tuples
        self.threshold = ANOMALY_THRESHOLD if score_threshold is None else float(score_threshold)
        if not 0.0 < self.threshold <= 1.0:
            raise ValueError(f"score_threshold must be in (0, 1] (anomaly scores lie in [0, 1]); got {self.threshold}")

    def create(self, key: str, dim: int) -> AnomalyAdapter:
        if dim != 1:
            raise ValueError(f"kind = 'anomaly' scores one value per key; key {key!r} has {dim} values per "
                             "record (list one field in fields.values)")
        return AnomalyAdapter(self._cls(**self.kwargs), self.threshold)

    def restore(self, state: dict[str, Any]) -> AnomalyAdapter:
        return AnomalyAdapter(self._cls.from_state(state), self.threshold, int(state["alert_last_hit"]))

    def identity(self, detector: AnomalyAdapter) -> tuple[str, dict[str, Any]] | None:
        """``(name, parameters)`` of a detector (a restored one may have other parameters than the config's)."""
        params = _detector_params(detector.det)
        return None if params is None else (self.name, params)


def build_factory(kind: str, kwargs: dict[str, Any], score_threshold: float | None = None) -> DetectorFactory:
    """The factory of the daemon's detector ``kind`` (``[detector] kind``) with its keyword arguments.

    Examples
    --------
    >>> build_factory("anomaly", {"seed": 1}).name, build_factory("window", {"method": "rulsif"}).name
    ('anomaly', 'changepoint/rulsif')
    """
    if kind == "anomaly":
        return AnomalyFactory(kwargs, score_threshold)
    return ChangePointFactory(kwargs, kind)


def check_detector(factory: DetectorFactory, dim: int | None) -> None:
    """Build one detector from ``factory`` (of ``dim`` values, 1 if unknown) and drop it: a value the
    detector refuses becomes ``ValueError("detector: ...")``, a config error at the start, not a dead
    letter for every record of every key (``ratiowatch run`` and ``ratiowatch validate``).

    >>> check_detector(build_factory("window", {"method": "rulsif"}), None)
    >>> check_detector(build_factory("window", {"false_alarm_rate": 2.0}), None)
    Traceback (most recent call last):
    ...
    ValueError: detector: false_alarm_rate must be in (0, 1), e.g. 1e-4; got 2.0
    """
    try:
        factory.create("config check", dim or 1)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"detector: {exc}") from None

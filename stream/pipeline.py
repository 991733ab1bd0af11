"""Per-key pipeline: route records by key to that key's detector, turn alarms into Alerts.

The pipeline is the pure, synchronous middle of the daemon: it knows neither Kafka nor files nor
HTTP. ``process(batch)`` takes Records (and BadRecords from the source), validates them per key
(dimension, timestamps going backwards), groups the batch by key so each detector gets one
contiguous block of rows (vectorised dispatch), and returns the Alerts plus the BadRecords for the
dead-letter sink. State lives in a :class:`~stream.checkpoint.CheckpointStore`: a key seen for the
first time is restored from its checkpoint if there is one, ``checkpoint()`` writes the keys changed
since the last call, ``evict()`` checkpoints and forgets keys (idle keys, revoked partitions).

Replays after a crash are detected per key: a restored key remembers the source position and
timestamp of the last record folded into its state; a record at or before that position and not
newer than that timestamp is already in the state and is skipped (its alerts were delivered before
the checkpoint was written), so a detector never sees a record twice. Checkpoints are fenced: a key
whose checkpoint on disk is newer than the one this pipeline holds (another process took it over
while this one was cut off) is dropped from memory instead of being overwritten.

Examples
--------
>>> import numpy as np
>>> from stream.records import Record
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

import time
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

from stream.checkpoint import CheckpointStore
from stream.records import Alert, BadRecord, Record


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
    replay_gate: tuple[str, int, float] | None = None  # (partition, offset, timestamp) of the checkpoint
    seq: int = 0
    dirty: bool = False
    last_seen: float = field(default_factory=time.monotonic)


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
    """

    def __init__(self, factory: DetectorFactory, *, store: CheckpointStore | None = None,
                 dim: int | None = None, check_timestamps: bool = True):
        self.factory = factory
        self.store = store
        self.dim = dim
        self.check_timestamps = check_timestamps
        self.keys: dict[str, KeyState] = {}
        self.positions: dict[str, int] = {}     # partition -> next offset to read (all earlier handled)
        self.key_partition: dict[str, str] = {}
        self.records_since_checkpoint = 0
        self.items_since_checkpoint = 0   # records + bad records: both move offsets that need a commit
        self.skipped_replays = 0
        self.fenced_keys = 0
        self.last_checkpoint = time.monotonic()

    # --- key state --------------------------------------------------------------------------
    def _state_for(self, key: str, dim: int) -> KeyState:
        ks = self.keys.get(key)
        if ks is not None:
            return ks
        loaded = self.store.load(key) if self.store is not None else None
        if loaded is not None:
            state, meta = loaded
            det = self.factory.restore(state)
            ref = tuple(meta["last_ref"]) if meta.get("last_ref") else None
            ks = KeyState(detector=det, dim=int(meta["dim"]), count=int(meta["count"]),
                          last_ts=float(meta["last_ts"]), last_ref=ref, seq=int(meta.get("seq", 0)))
            if ref is not None:
                ks.replay_gate = (ref[0], int(ref[1]), ks.last_ts)
        else:
            ks = KeyState(detector=self.factory.create(key, self.dim or dim), dim=self.dim or dim)
        self.keys[key] = ks
        return ks

    # --- processing ---------------------------------------------------------------------------
    def process(self, batch: list[Record | BadRecord]) -> tuple[list[Alert], list[BadRecord]]:
        """Fold a batch into the detectors; returns (alerts, bad records)."""
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
            ks = self._state_for(item.key, item.values.shape[0])
            ks.last_seen = now
            if ref is not None:
                self.key_partition[item.key] = ref[0]
            if ks.replay_gate is not None and ref is not None and ref[0] == ks.replay_gate[0]:
                if ref[1] <= ks.replay_gate[1] and item.timestamp <= ks.replay_gate[2]:
                    self.skipped_replays += 1  # already folded into the restored state
                    continue
                ks.replay_gate = None
            if item.values.shape[0] != ks.dim:
                bad.append(BadRecord("wrong_dimension", f"key {item.key!r} has dimension {ks.dim}, record has "
                                     f"{item.values.shape[0]}", item.to_json(), ref, item.key))
                continue
            if self.check_timestamps and item.timestamp < ks.last_ts:
                bad.append(BadRecord("timestamp_backwards", f"timestamp {item.timestamp} is older than the key's "
                                     f"previous {ks.last_ts}", item.to_json(), ref, item.key))
                continue
            ks.last_ts = item.timestamp
            ks.last_ref = ref
            groups.setdefault(item.key, (ks, []))[1].append(item)
        alerts: list[Alert] = []
        name = self.factory.name
        for key, (ks, recs) in groups.items():
            block = np.vstack([r.values for r in recs]) if len(recs) > 1 else recs[0].values[None, :]
            try:
                events = ks.detector.update_batch(block)
            except Exception as exc:  # noqa: BLE001 - a detector failure must not kill the daemon
                for r in recs:
                    bad.append(BadRecord("detector_error", f"{type(exc).__name__}: {exc}", r.to_json(), r.ref, key))
                continue
            ks.count += len(recs)
            ks.dirty = True
            self.records_since_checkpoint += len(recs)
            for ev in events:
                alerts.append(Alert.from_alarm(key=key, detector=name, change_index=ev.change_index,
                                               alarm_index=ev.alarm_index, timestamp=recs[ev.row].timestamp,
                                               score=ev.score, threshold=ev.threshold, kind=ev.kind))
        return alerts, bad

    # --- checkpoints and eviction ------------------------------------------------------------
    def _meta(self, ks: KeyState) -> dict[str, Any]:
        return {"dim": ks.dim, "count": ks.count, "last_ts": ks.last_ts,
                "last_ref": list(ks.last_ref) if ks.last_ref else None, "seq": ks.seq + 1,
                "detector": self.factory.name}

    def checkpoint(self, keys: list[str] | None = None) -> int:
        """Write the checkpoints of changed keys (all changed keys when ``keys`` is None)."""
        self.last_checkpoint = time.monotonic()
        self.records_since_checkpoint = 0
        self.items_since_checkpoint = 0
        if self.store is None:
            return 0
        todo = []
        fenced = []
        for key in (list(self.keys) if keys is None else keys):
            ks = self.keys.get(key)
            if ks is None or not ks.dirty:
                continue
            # Fencing: a newer checkpoint on disk means another process took this key over while
            # we were cut off (paused, partitioned). Our copy is stale: drop it, never overwrite.
            if self.store.seq(key) > ks.seq:
                fenced.append(key)
                continue
            todo.append((key, ks))
        for key in fenced:
            self.keys.pop(key, None)
            self.key_partition.pop(key, None)
        self.fenced_keys += len(fenced)
        self.store.save_many([(key, ks.detector.to_state(), self._meta(ks)) for key, ks in todo])
        for _, ks in todo:
            ks.seq += 1
            ks.dirty = False
        return len(todo)

    def evict(self, keys: list[str]) -> int:
        """Checkpoint then forget ``keys``; they are restored from the store when seen again."""
        self.checkpoint(keys)
        for key in keys:
            self.keys.pop(key, None)
            self.key_partition.pop(key, None)
        return len(keys)

    def idle_keys(self, idle_s: float, now: float | None = None) -> list[str]:
        now = time.monotonic() if now is None else now
        return [k for k, ks in self.keys.items() if now - ks.last_seen >= idle_s]

    def keys_of_partitions(self, partitions: set[str]) -> list[str]:
        return [k for k, p in self.key_partition.items() if p in partitions and k in self.keys]

    def latest_score(self, key: str) -> float | None:
        ks = self.keys.get(key)
        return None if ks is None else float(ks.detector.latest_score)


# --- adapter for the real detector ---------------------------------------------------------------
class ChangePointAdapter:
    """Thin adapter: :class:`stream.detectors.changepoint.ChangePointDetector` -> :class:`Detector`."""

    def __init__(self, det: Any):
        self.det = det
        self.latest_score = 0.0

    def update_batch(self, values: np.ndarray) -> list[AlarmEvent]:
        step = self.det.step
        events: list[AlarmEvent] = []
        rows = values[:, 0].tolist() if values.shape[1] == 1 else values  # floats step fastest
        for i, row in enumerate(rows):
            a = step(row)
            if a is not None:
                events.append(AlarmEvent(i, int(a.change_index), int(a.alarm_index), float(a.score),
                                         float(a.threshold)))
        s = _score_of(self.det)
        if s is not None:
            self.latest_score = s
        return events

    def to_state(self) -> dict[str, Any]:
        return self.det.to_state()


def _score_of(det: Any) -> float | None:
    for name in ("score", "last_score", "latest_score"):
        v = getattr(det, name, None)
        if isinstance(v, (int, float, np.floating)) and not isinstance(v, bool):
            return float(v) if np.isfinite(v) else None  # NaN during warm-up: keep the last real score
    return None


class ChangePointFactory:
    """Builds ChangePointDetectors from config keyword arguments (one per key)."""

    def __init__(self, kwargs: dict[str, Any]):
        from stream.detectors.changepoint import ChangePointDetector  # the numba-heavy import, only here

        self._cls = ChangePointDetector
        self.kwargs = dict(kwargs)
        self.name = f"changepoint/{self.kwargs.get('method', 'default')}"

    def create(self, key: str, dim: int) -> ChangePointAdapter:
        return ChangePointAdapter(self._cls(**self.kwargs))

    def restore(self, state: dict[str, Any]) -> ChangePointAdapter:
        return ChangePointAdapter(self._cls.from_state(state))

"""Checkpoints in a Kafka changelog topic: state that moves with its partition, no shared disk.

Each detector key's checkpoint is one record of a compacted topic, keyed by the detector key; its
value is exactly the checkpoint file's content (the ``.npz`` with arrays and one JSON member,
written by :meth:`ratiowatch.stream.engine.checkpoint.CheckpointStore.encode`, never pickled), and its headers
carry the checkpoint's version (``seq``). The changelog has as many partitions as the source topic,
and a key's checkpoint goes to the partition number of the source partition its records come from,
so the process that is assigned source partition ``p`` restores every key it needs by reading
changelog partition ``p`` from the beginning to its end (:meth:`ChangelogStore.restore`); with
compaction the broker keeps only the latest record per key, so that read stays short.

:meth:`ChangelogStore.write_many` sends the records with ``acks=all`` and returns only once the
broker acknowledged every one of them; the daemon commits source offsets only after that, as it
does after a directory store's fsync and rename.

A value larger than ``max_message_bytes`` is split into ``n`` parts, each with headers ``seq``,
``part`` and ``parts``: parts ``0 .. n-2`` under keys of their own version, ``key + "\\x00" + seq +
"\\x00" + i``, sent and acknowledged first; then the last part under the key itself, which is the
version's commit record (a single-part checkpoint is just that record). So a write that fails
midway leaves the key's record, and with it the previous complete version, untouched: a restore
takes, for each key, the highest ``seq`` whose parts are all there and ignores the rest. Once a
version is acknowledged, the part keys of the versions it replaces get tombstones, so compaction
reclaims them. Topics written with the earlier layout (part 0 under the key, part ``i`` under
``key + "\\x00" + i``) restore the same way.

The topic is created if it is missing, with ``cleanup.policy=compact`` where the broker accepts it
(a broker that refuses the setting gets a plain topic and a warning: correct, only longer to read
back).
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable

from .checkpoint_format import decode_bytes, encode as encode_checkpoint, meta_of_bytes


log = logging.getLogger("ratiowatch.changelog")

_SEP = b"\x00"
_HEADROOM = 4096  # record overhead (key, headers, batch framing) below the broker's message limit


def _pieces(head: tuple[int, int, int, bytes], seq: int,
            parts: dict[bytes, tuple[int, int, int, int, int, bytes]]) -> list[bytes] | None:
    """The pieces of version ``seq`` in order, ``head`` (its record under the key) and the latest
    matching record of each other part; None if one is missing."""
    _, at, n, value = head
    best: dict[int, tuple[int, bytes]] = {at: (-1, value)}
    for _, offset, s, part, count, v in parts.values():
        if s == seq and count == n and part != at and 0 <= part < n and offset > best.get(part, (-2, b""))[0]:
            best[part] = (offset, v)
    if len(best) != n or not 0 <= at < n:
        return None
    return [best[i][1] for i in range(n)]


class ChangelogStore:
    """Checkpoint store backed by a compacted Kafka topic (see the module docstring).

    Parameters
    ----------
    bootstrap_servers : list of str
    topic : str
        The changelog topic.
    source_topic : str
        The consumed topic; the changelog gets its partition count when it is created.
    partition_of : callable
        ``key -> "topic:partition"`` of the key's records (the pipeline's map), or None.
    max_message_bytes : int
        Largest record value sent in one piece; larger checkpoints are split.
    replication_factor : int
        For the topic's creation; -1 leaves it to the broker's default.
    timeout_s : float
        Bound on one write's acknowledgements and on one restore's read.
    options : dict
        Extra KafkaProducer / KafkaConsumer / admin settings (security, ...).
    """

    def __init__(self, bootstrap_servers: list[str], topic: str, source_topic: str, *,
                 partition_of: Callable[[str], str | None] | None = None, max_message_bytes: int = 1_000_000,
                 replication_factor: int = -1, timeout_s: float = 30.0, options: dict[str, Any] | None = None):
        from kafka import KafkaProducer

        self.bootstrap_servers = bootstrap_servers
        self.topic = topic
        self.source_topic = source_topic
        self.partition_of = partition_of
        self.max_message_bytes = max_message_bytes
        self.replication_factor = replication_factor
        self.timeout_s = timeout_s
        # the source's pass-through settings that every client takes (TLS, SASL); consumer-only
        # ones (fetch sizes, ...) would be refused by the producer and the admin client
        self.options = {k: v for k, v in (options or {}).items()
                        if k.startswith(("security_protocol", "ssl_", "sasl_")) or k in ("api_version", "client_id")}
        self._seqs: dict[str, int] = {}                 # key -> latest version seen or written
        self._restored: dict[str, tuple[str, bytes]] = {}  # key -> (source partition, payload): not yet taken
        # key -> (changelog partition, {part key: seq}): the split checkpoints' parts on the topic
        self._parts: dict[str, tuple[int, dict[bytes, int]]] = {}
        self.partitions = self.ensure_topic()
        self._producer = KafkaProducer(bootstrap_servers=bootstrap_servers, acks="all", linger_ms=2,
                                       max_request_size=max_message_bytes + _HEADROOM,
                                       request_timeout_ms=int(timeout_s * 1000),
                                       max_block_ms=int(timeout_s * 1000), **self.options)

    # --- topic --------------------------------------------------------------------------------
    def ensure_topic(self) -> int:
        """Create the changelog if missing (source topic's partition count); its partition count."""
        from kafka import KafkaAdminClient
        from kafka.errors import TopicAlreadyExistsError

        admin = KafkaAdminClient(bootstrap_servers=self.bootstrap_servers,
                                 request_timeout_ms=int(self.timeout_s * 1000), **self.options)
        try:
            existing = self._partition_count(admin, self.topic)
            if existing:
                return existing
            n = self._partition_count(admin, self.source_topic)
            if not n:
                raise ValueError(f"checkpoint.topic: the source topic {self.source_topic!r} does not exist, so "
                                 "the changelog's partition count is unknown; create the source topic first")
            spec = {"num_partitions": n, "replication_factor": self.replication_factor}
            try:
                try:
                    admin.create_topics({self.topic: {**spec, "configs": {"cleanup.policy": "compact"}}})
                except TopicAlreadyExistsError:
                    raise
                except Exception as exc:  # noqa: BLE001 - a broker without compaction: plain topic
                    log.warning("changelog topic created without compaction (the broker refused it); "
                                "restores read every version", extra={"topic": self.topic, "error": str(exc)})
                    admin.create_topics({self.topic: spec})
            except TopicAlreadyExistsError:  # another daemon of the group was first
                pass
            log.info("changelog topic created", extra={"topic": self.topic, "partitions": n})
            deadline = time.monotonic() + self.timeout_s
            while time.monotonic() < deadline:
                got = self._partition_count(admin, self.topic)
                if got:
                    return got
                time.sleep(0.1)
            raise RuntimeError(f"changelog topic {self.topic!r} did not appear within {self.timeout_s}s")
        finally:
            admin.close()

    @staticmethod
    def _partition_count(admin: Any, topic: str) -> int:
        for t in admin.describe_topics([topic]):
            if t.get("error_code", 0) == 0 and t.get("partitions"):
                return len(t["partitions"])
        return 0

    def _changelog_partition(self, source_partition: str | None) -> int:
        if source_partition is None:
            raise ValueError("a key without a source partition cannot be checkpointed to the changelog")
        return int(source_partition.rpartition(":")[2]) % self.partitions

    # --- the CheckpointStore interface the pipeline uses --------------------------------------
    @staticmethod
    def encode(key: str, state: dict[str, Any], meta: dict[str, Any]) -> bytes:
        return encode_checkpoint(state, meta, key)

    def seq(self, key: str) -> int:
        return self._seqs.get(key, 0)

    def write_many(self, payloads: list[tuple[str, bytes, int]]) -> int:
        """Send ``(key, payload, seq)`` records; returns once every one is acknowledged (raises
        otherwise: the caller commits nothing).

        The parts of split checkpoints go first, each under a key of its own version; only once
        all of them are acknowledged are the records under the keys themselves sent (the single-part
        checkpoints and the last part of each split one), so a failure at any point leaves the
        previous complete version of every key restorable. Part keys that the new versions replace
        get tombstones afterwards (not awaited: one that is lost leaves a part that the next
        restore finds and the next version of its key deletes)."""
        if not payloads:
            return 0
        chunk = self.max_message_bytes
        parts_first: list[tuple[int, bytes, bytes, list]] = []
        records: list[tuple[int, bytes, bytes, list]] = []  # under the keys themselves
        latest: dict[str, tuple[int, set[bytes]]] = {}    # key -> (seq, part keys) of its last write here
        for key, payload, seq in payloads:
            part = self._changelog_partition(self.partition_of(key) if self.partition_of else None)
            pieces = [payload[i:i + chunk] for i in range(0, len(payload), chunk)] or [b""]
            kb = key.encode("utf-8", "surrogatepass")  # any str has bytes (a valid key's are its UTF-8 ones)
            n = len(pieces)
            part_keys: set[bytes] = set()
            for i, piece in enumerate(pieces):
                headers = [("seq", str(seq).encode()), ("part", str(i).encode()), ("parts", str(n).encode())]
                if i == n - 1:
                    records.append((part, kb, piece, headers))
                else:
                    k = kb + _SEP + str(seq).encode() + _SEP + str(i).encode()
                    part_keys.add(k)
                    parts_first.append((part, k, piece, headers))
            latest[key] = (seq, part_keys)
            if part_keys:  # tracked from now on, so that a failed write's parts are deleted later too
                self._parts.setdefault(key, (part, {}))[1].update(dict.fromkeys(part_keys, seq))
        for batch in (parts_first, records):
            futures = [self._producer.send(self.topic, key=k, value=v, partition=part, headers=h)
                       for part, k, v, h in batch]
            if futures:
                self._producer.flush(self.timeout_s)
                for f in futures:
                    f.get(timeout=self.timeout_s)  # raises the delivery error
        for key, _, seq in payloads:
            self._seqs[key] = max(self._seqs.get(key, 0), seq)
        # tombstones for the part keys of the versions up to the one just written that it does not
        # use (a newer version's parts stay: its record may still be the one to restore)
        for key, (seq, keep) in latest.items():
            if key not in self._parts:
                continue
            num, known = self._parts[key]
            for k in sorted(k for k, s in known.items() if s <= seq and k not in keep):
                try:
                    self._producer.send(self.topic, key=k, value=None, partition=num
                                        ).add_errback(self._tombstone_failed, key, k)
                except Exception as exc:  # noqa: BLE001 - the checkpoint is written: a part stays for a while
                    self._tombstone_failed(key, k, exc)
                    continue
                del known[k]
            if not known:
                del self._parts[key]
        return len(payloads)

    def _tombstone_failed(self, key: str, part_key: bytes, exc: BaseException) -> None:
        log.warning("changelog: tombstone of a replaced checkpoint part not delivered (deleted after the next "
                    "restore)", extra={"key": key, "part_key": part_key.decode("utf-8", "replace"), "error": str(exc)})

    def restore(self, partitions: set[str]) -> int:
        """Read the changelog partitions of the source partitions ``partitions`` ("topic:p") to
        their end; their latest complete checkpoints become available to :meth:`scan` and
        :meth:`load`. Returns the number of keys found."""
        from kafka import KafkaConsumer, TopicPartition

        nums = sorted({self._changelog_partition(p) for p in partitions})
        if not nums:
            return 0
        tps = [TopicPartition(self.topic, n) for n in nums]
        c = KafkaConsumer(bootstrap_servers=self.bootstrap_servers, enable_auto_commit=False, group_id=None,
                          auto_offset_reset="earliest",
                          max_partition_fetch_bytes=max(1048576, self.max_message_bytes + _HEADROOM),
                          **self.options)
        # records under the keys themselves: key -> {seq: (changelog partition, part, parts, bytes)},
        # the latest record of each seq; the other parts: key -> {record key: (changelog partition,
        # offset, seq, part, parts, bytes)}, the latest record of each record key (a tombstone deletes it)
        heads: dict[str, dict[int, tuple[int, int, int, bytes]]] = {}
        parts: dict[str, dict[bytes, tuple[int, int, int, int, int, bytes]]] = {}
        try:
            c.assign(tps)
            c.seek_to_beginning(*tps)
            end = c.end_offsets(tps)
            deadline = time.monotonic() + self.timeout_s
            while any(c.position(tp) < end[tp] for tp in tps):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"changelog {self.topic}: could not read partitions {nums} to their end "
                                       f"within {self.timeout_s:g} s")
                for tp, msgs in c.poll(timeout_ms=500).items():
                    for m in msgs:
                        if m.key is None:
                            continue
                        base, sep, _ = m.key.partition(_SEP)
                        try:
                            key = base.decode("utf-8", "surrogatepass")
                        except UnicodeDecodeError:  # not a key this store wrote: one record must not stop a restore
                            log.warning("changelog: record with a key that is not UTF-8 skipped",
                                        extra={"partition": tp.partition, "offset": m.offset})
                            continue
                        if m.value is None:  # a tombstone: the key's checkpoint, or one part key, was deleted
                            if sep:
                                parts.get(key, {}).pop(m.key, None)
                            else:
                                heads.pop(key, None)
                            continue
                        h = dict(m.headers or [])
                        seq, part, n = int(h.get("seq", b"0")), int(h.get("part", b"0")), int(h.get("parts", b"1"))
                        if sep:
                            parts.setdefault(key, {})[m.key] = (tp.partition, m.offset, seq, part, n, m.value)
                            continue
                        versions = heads.setdefault(key, {})
                        versions[seq] = (tp.partition, part, n, m.value)
                        # only the versions from the newest complete one on can be restored (an
                        # uncompacted topic holds every version; a complete one stays complete, as
                        # its parts get tombstones only once a newer version is complete)
                        done = [s for s, v in versions.items() if _pieces(v, s, parts.get(key, {})) is not None]
                        for s in [s for s in versions if done and s < max(done)]:
                            del versions[s]
        finally:
            c.close()
        found = 0
        for key, versions in heads.items():
            for seq in sorted(versions, reverse=True):
                pieces = _pieces(versions[seq], seq, parts.get(key, {}))
                if pieces is not None:
                    self._restored[key] = (versions[seq][0], b"".join(pieces))
                    self._seqs[key] = max(self._seqs.get(key, 0), seq)
                    found += 1
                    break
                log.warning("changelog: incomplete checkpoint skipped", extra={"key": key, "seq": seq})
        for key, recs in parts.items():  # the part keys on the topic: the key's next version deletes the others
            if recs:
                self._parts[key] = (next(iter(recs.values()))[0], {k: r[2] for k, r in recs.items()})
        return found

    def scan(self) -> list[tuple[str, dict[str, Any], Any]]:
        """``(key, meta, entry)`` of the restored checkpoints not yet taken."""
        return [(key, meta_of_bytes(payload), key) for key, (_, payload) in self._restored.items()]

    def load_entry(self, key: str) -> tuple[dict[str, Any], dict[str, Any]]:
        num, payload = self._restored.pop(key)
        return decode_bytes(payload, f"changelog {self.topic}[{num}] key {key!r}")

    def load(self, key: str) -> tuple[dict[str, Any], dict[str, Any]] | None:
        """A restored checkpoint of ``key`` (first sight of a key), or None."""
        return self.load_entry(key) if key in self._restored else None

    def forget_partitions(self, partitions: set[str]) -> None:
        """Drop the restored, not yet taken checkpoints of revoked source partitions."""
        nums = {self._changelog_partition(p) for p in partitions}
        for key in [k for k, (num, _) in self._restored.items() if num in nums]:
            del self._restored[key]
        for key in [k for k, (num, _) in self._parts.items() if num in nums]:
            del self._parts[key]

    def close(self) -> None:
        try:
            self._producer.close(timeout=self.timeout_s)
        except Exception:  # noqa: BLE001
            pass

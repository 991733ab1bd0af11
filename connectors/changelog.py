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

A value larger than ``max_message_bytes`` is split into parts: part 0 under the key itself, part
``i`` under ``key + "\\x00" + i``, each with headers ``seq``, ``part`` and ``parts``. A restore
assembles the parts of one ``seq`` and ignores incomplete or stale sets (a compacted topic keeps
the latest record of each part key, so a complete set of the newest version is always there once
its write was acknowledged).

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
        otherwise: the caller commits nothing)."""
        if not payloads:
            return 0
        futures = []
        chunk = self.max_message_bytes
        for key, payload, seq in payloads:
            part = self._changelog_partition(self.partition_of(key) if self.partition_of else None)
            pieces = [payload[i:i + chunk] for i in range(0, len(payload), chunk)] or [b""]
            kb = key.encode("utf-8", "surrogatepass")  # any str has bytes (a valid key's are its UTF-8 ones)
            for i, piece in enumerate(pieces):
                headers = [("seq", str(seq).encode()), ("part", str(i).encode()), ("parts", str(len(pieces)).encode())]
                k = kb if i == 0 else kb + _SEP + str(i).encode()
                futures.append(self._producer.send(self.topic, key=k, value=piece, partition=part, headers=headers))
        self._producer.flush(self.timeout_s)
        for f in futures:
            f.get(timeout=self.timeout_s)  # raises the delivery error
        for key, _, seq in payloads:
            self._seqs[key] = max(self._seqs.get(key, 0), seq)
        return len(payloads)

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
        # key -> (changelog partition, seq, parts, {part: bytes}); the highest seq wins, and within
        # one seq the latest record of each part
        found: dict[str, tuple[int, int, int, dict[int, bytes]]] = {}
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
                        base, _, _ = m.key.partition(_SEP)
                        try:
                            key = base.decode("utf-8", "surrogatepass")
                        except UnicodeDecodeError:  # not a key this store wrote: one record must not stop a restore
                            log.warning("changelog: record with a key that is not UTF-8 skipped",
                                        extra={"partition": tp.partition, "offset": m.offset})
                            continue
                        if m.value is None:  # a tombstone: the key's checkpoint was deleted
                            found.pop(key, None)
                            continue
                        h = dict(m.headers or [])
                        seq, part, parts = (int(h.get("seq", b"0")), int(h.get("part", b"0")),
                                            int(h.get("parts", b"1")))
                        cur = found.get(key)
                        if cur is None or seq > cur[1]:
                            cur = found[key] = (tp.partition, seq, parts, {})
                        if seq == cur[1]:
                            cur[3][part] = m.value
        finally:
            c.close()
        n = 0
        for key, (num, seq, parts, pieces) in found.items():
            if len(pieces) != parts:
                log.warning("changelog: incomplete checkpoint skipped", extra={"key": key, "seq": seq})
                continue
            self._restored[key] = (num, b"".join(pieces[i] for i in range(parts)))
            self._seqs[key] = max(self._seqs.get(key, 0), seq)
            n += 1
        return n

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

    def close(self) -> None:
        try:
            self._producer.close(timeout=self.timeout_s)
        except Exception:  # noqa: BLE001
            pass

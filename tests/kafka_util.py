"""Helpers for broker tests: produce JSON rows, read a whole topic."""

from __future__ import annotations

import json
import time

from kafka import KafkaConsumer, KafkaProducer, TopicPartition


def produce(bootstrap: str, topic: str, rows, key_field: str | None = "key", partition_of=None) -> None:
    p = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, acks="all")
    for r in rows:
        value = r if isinstance(r, bytes) else (r.encode() if isinstance(r, str) else json.dumps(r).encode())
        key = None
        part = None
        if isinstance(r, dict) and key_field and key_field in r:
            key = str(r[key_field]).encode()
            if partition_of is not None:
                part = partition_of(str(r[key_field]))
        p.send(topic, key=key, value=value, partition=part)
    p.flush(30)
    p.close()


def read_topic(bootstrap: str, topic: str, partitions: int = 1, timeout_s: float = 10.0,
               expect: int | None = None) -> list[dict]:
    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest",
                      consumer_timeout_ms=1000)
    c.assign([TopicPartition(topic, i) for i in range(partitions)])
    c.seek_to_beginning()
    out: list[dict] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        batch = c.poll(timeout_ms=300)
        for msgs in batch.values():
            out.extend(json.loads(m.value) for m in msgs)
        if not batch and (expect is None or len(out) >= expect):
            break
    c.close()
    return out

"""Keys that cannot name a series are ``bad_key`` dead letters, on both parse paths; whatever key an
item carries, a sink delivers it (escaped) instead of failing.

A JSON key with a lone surrogate (``"\\ud800"``, valid JSON) was accepted; its checkpoint file name
and the Kafka dead-letter sink's message key could not be encoded as UTF-8, the dead-letter worker
stopped, and the daemon exited at that offset on every restart. NaN, Infinity and 1e400 named the
series "nan" and "inf"; a NUL character collided with the changelog's part separator.
"""

from __future__ import annotations

import json
import uuid

import numpy as np
import pytest

from ratiowatch.connectors.records import BadRecord, BatchParser, FieldSpec, RecordBatch, RecordError, parse_record
from ratiowatch.stream.engine.checkpoint import CheckpointStore

SPEC = FieldSpec(key="k", timestamp="t", values=("v",))


def message(key_json: str) -> bytes:
    return ('{"k": ' + key_json + ', "t": 1, "v": 1.0}').encode()


BAD_KEYS = {
    "lone high surrogate": '"\\ud800"',
    "lone low surrogate inside": '"a\\udfffb"',
    "NaN": "NaN",
    "Infinity": "Infinity",
    "-Infinity": "-Infinity",
    "number beyond a float": "1e400",
    "NUL character": '"a\\u0000b"',
}


@pytest.mark.parametrize("key_json", BAD_KEYS.values(), ids=BAD_KEYS.keys())
def test_a_key_that_cannot_name_a_series_is_a_bad_key_on_both_parse_paths(key_json):
    raw = message(key_json)
    with pytest.raises(RecordError) as err:
        parse_record(raw, SPEC)
    assert err.value.reason == "bad_key" and "'k'" in err.value.detail
    p = BatchParser(SPEC)
    p.add(message('"a"'), "p0", 0)
    p.add(raw, "p0", 1)
    p.add(message('"b"'), "p0", 2)
    batch = p.finish()
    assert isinstance(batch, RecordBatch) and batch.keys == ["a", "b"]
    assert [(b.reason, b.ref, b.key) for b in batch.bad] == [("bad_key", ("p0", 1), None)]
    # the dead letter itself is valid UTF-8 JSON, whatever the key was
    entry = json.loads(batch.bad[0].to_json().encode("utf-8"))
    assert entry["reason"] == "bad_key" and entry["raw"] == raw.decode()


@pytest.mark.parametrize("key_json,key", [('"\\ud83d\\ude00"', "\U0001F600"), ('"h\\u00e9te"', "héte"),
                                          ("7", "7"), ("1.5", "1.5"), ("-0.0", "-0.0")])
def test_valid_unicode_and_finite_numeric_keys_still_name_series(key_json, key):
    assert parse_record(message(key_json), SPEC).key == key
    p = BatchParser(SPEC)
    p.add(message(key_json), "p0", 0)
    assert p.finish().keys == [key]


def test_a_checkpoint_store_writes_a_key_that_is_not_valid_unicode_instead_of_failing(tmp_path):
    """Keys come from parsing, which refuses such keys; the store does not fail on one all the same."""
    store = CheckpointStore(tmp_path)
    store.save("\ud800", {"x": np.arange(2.0)}, {"count": 1})
    store.save("a", {"x": np.arange(3.0)}, {"count": 2})
    assert store.load("\ud800")[1]["count"] == 1 and store.load("a")[1]["count"] == 2


@pytest.mark.broker
def test_a_kafka_sink_delivers_an_item_whose_key_is_not_valid_unicode_escaped_and_its_worker_goes_on(kafka_broker):
    from kafka import KafkaConsumer, TopicPartition

    from ratiowatch.connectors.delivery import SinkWorker
    from ratiowatch.connectors.sinks import KafkaSink

    topic = f"dlq-{uuid.uuid4().hex[:8]}"
    kafka_broker.create_topic(topic)
    w = SinkWorker(KafkaSink(topic, [kafka_broker.bootstrap]))
    first = w.put([BadRecord("processing_error", "x", "{}", ("p0", 1), "\ud800")])
    second = w.put([BadRecord("bad_key", "y", "{}", ("p0", 2), "b")])
    assert w.wait(second, timeout_s=30) and w.error is None and first < second
    assert w.close()
    c = KafkaConsumer(bootstrap_servers=kafka_broker.bootstrap, enable_auto_commit=False,
                      auto_offset_reset="earliest", consumer_timeout_ms=5000)
    c.assign([TopicPartition(topic, 0)])
    got = [(m.key, json.loads(m.value)["reason"]) for m in c]
    c.close()
    assert got == [(b"\\ud800", "processing_error"), (b"b", "bad_key")]

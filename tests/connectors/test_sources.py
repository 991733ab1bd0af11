"""Sources: file (JSONL, CSV, resume from committed offset), stdin (bounded queue), Kafka (manual
assignment, bad messages become BadRecords, commits)."""

from __future__ import annotations

import io
import json
import uuid

import pytest

from ratiowatch.connectors.sources import FileSource, KafkaSource, StdinSource
from ratiowatch.stream.engine.checkpoint import CheckpointStore
from ratiowatch.connectors.records import BadRecord, FieldSpec, Record

SPEC = FieldSpec(key="k", timestamp="t", values=("v",))


def drain(src, max_records=1000):
    out = []
    while not src.exhausted:
        out += src.poll(max_records, 0.05)
    return out


def test_jsonl_file_source_numbers_lines_and_keeps_bad_ones_as_bad_records(tmp_path):
    p = tmp_path / "x.jsonl"
    p.write_text('{"k": "a", "t": 1, "v": 1.5}\n\nnot json\n{"k": "b", "t": 2, "v": [1, 2]}')
    items = drain(FileSource(p, SPEC), max_records=2)
    assert [type(i).__name__ for i in items] == ["Record", "BadRecord", "Record"]
    assert [i.ref for i in items] == [("file:x.jsonl", 0), ("file:x.jsonl", 2), ("file:x.jsonl", 3)]
    assert items[1].reason == "malformed_json"
    assert items[2].values.tolist() == [1.0, 2.0]


def test_csv_file_source_reads_header_and_rejects_ragged_rows(tmp_path):
    p = tmp_path / "x.csv"
    p.write_text("k,t,v\na,1,0.5\nb,2\nc,3,nan\n")
    items = drain(FileSource(p, SPEC))
    assert isinstance(items[0], Record) and items[0].values.tolist() == [0.5]
    assert [i.reason for i in items[1:]] == ["malformed_json", "non_finite"]


def test_file_source_resumes_after_the_committed_offset(tmp_path):
    p = tmp_path / "x.jsonl"
    p.write_text("".join(json.dumps({"k": "a", "t": i, "v": i}) + "\n" for i in range(10)))
    store = CheckpointStore(tmp_path / "s")
    src = FileSource(p, SPEC, offsets=store)
    first = src.poll(4, 0.1)
    src.commit({"file:x.jsonl": first[-1].ref[1] + 1})
    again = drain(FileSource(p, SPEC, offsets=store))
    assert [r.timestamp for r in again] == [float(i) for i in range(4, 10)]


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        FileSource(tmp_path / "nope.jsonl", SPEC)


def test_stdin_source_reads_lines_through_a_bounded_queue():
    stream = io.StringIO("".join(json.dumps({"k": "a", "t": i, "v": i}) + "\n" for i in range(50)) + "{bad\n")
    src = StdinSource(SPEC, stream=stream, queue_size=4)
    items = drain(src, max_records=7)
    assert len(items) == 51 and isinstance(items[-1], BadRecord)
    assert [r.ref[1] for r in items] == list(range(51))


@pytest.mark.broker
def test_kafka_source_manual_assignment_parses_and_commits(kafka_broker):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    topic = f"src-{uuid.uuid4().hex[:8]}"
    kafka_broker.create_topic(topic)
    prod = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap)
    for i in range(5):
        prod.send(topic, json.dumps({"k": "a", "t": i, "v": i}).encode())
    prod.send(topic, b"\xff\xfe garbage")
    prod.send(topic, key=b"a", value=None)  # tombstone: no value at all
    prod.flush()
    prod.close()
    group = f"g-{uuid.uuid4().hex[:6]}"
    src = KafkaSource([kafka_broker.bootstrap], [topic], SPEC, group_id=group, partitions=[0])
    items = []
    for _ in range(40):
        items += src.poll(100, 0.25)
        if len(items) >= 7:
            break
    assert [type(i).__name__ for i in items] == ["Record"] * 5 + ["BadRecord"] * 2
    assert [i.ref for i in items] == [(f"{topic}:0", o) for o in range(7)]
    assert src.lag() == {f"{topic}:0": 0}  # everything fetched
    src.commit({f"{topic}:0": 7, "other:0": 3})  # partitions not assigned are ignored
    src.close()
    c = KafkaConsumer(bootstrap_servers=kafka_broker.bootstrap, group_id=group)
    assert c.committed(TopicPartition(topic, 0)) == 7
    c.close()

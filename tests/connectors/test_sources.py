"""Sources: file (JSONL, CSV, resume from committed offset), stdin (bounded queue), Kafka (manual
assignment, bad messages become BadRecords, commits)."""

from __future__ import annotations

import io
import json
import logging
import time
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

def following(tmp_path, n: int, offsets=None):
    """(path, source) of ``x.jsonl`` in follow mode, after the source read its ``n`` lines."""
    p = tmp_path / "x.jsonl"
    p.write_text(jsonl_lines(0, n))
    src = FileSource(p, SPEC, follow=True, poll_interval_s=0.01, offsets=offsets)
    assert [r.timestamp for r in poll_until(src, n)] == list(range(n))
    return p, src


def rotate(p, text: str) -> None:
    """What a log rotation does: another file, holding ``text``, takes the name ``p``."""
    new = p.with_name(p.name + ".1")
    new.write_text(text)
    new.replace(p)


def committed(tmp_path, text: str, upto: int):
    """(path, store) after a run read ``x.jsonl`` holding ``text`` and committed line ``upto``."""
    p = tmp_path / "x.jsonl"
    p.write_text(text)
    store = CheckpointStore(tmp_path / "s")
    src = FileSource(p, SPEC, offsets=store)
    drain(src)
    src.commit({"file:x.jsonl": upto})
    src.close()
    return p, store



def test_jsonl_file_source_numbers_lines_and_keeps_bad_ones_as_bad_records(tmp_path):
    p = tmp_path / "x.jsonl"
    p.write_text('{"k": "a", "t": 1, "v": 1.5}\n\nnot json\n{"k": "b", "t": 2, "v": [1, 2]}')
    items = drain(FileSource(p, SPEC), max_records=2)
    assert [type(i).__name__ for i in items] == ["Record", "BadRecord", "Record"]
    assert [i.ref for i in items] == [("file:x.jsonl", 0), ("file:x.jsonl", 2), ("file:x.jsonl", 3)]
    assert items[1].reason == "malformed_json"
    assert items[2].values.tolist() == [1.0, 2.0]


def test_csv_file_source_reads_header_and_rejects_ragged_rows_as_malformed_csv(tmp_path):
    p = tmp_path / "x.csv"
    p.write_text("k,t,v\na,1,0.5\nb,2\nc,3,nan\n")
    items = drain(FileSource(p, SPEC))
    assert isinstance(items[0], Record) and items[0].values.tolist() == [0.5]
    assert [i.reason for i in items[1:]] == ["malformed_csv", "non_finite"]


def test_file_source_resumes_after_the_committed_offset(tmp_path):
    p = tmp_path / "x.jsonl"
    p.write_text("".join(json.dumps({"k": "a", "t": i, "v": i}) + "\n" for i in range(10)))
    store = CheckpointStore(tmp_path / "s")
    src = FileSource(p, SPEC, offsets=store)
    first = src.poll(4, 0.1)
    src.commit({"file:x.jsonl": first[-1].ref[1] + 1})
    again = drain(FileSource(p, SPEC, offsets=store))
    assert [r.timestamp for r in again] == [float(i) for i in range(4, 10)]


def jsonl_lines(start, n):
    return "".join(json.dumps({"k": "a", "t": start + i, "v": i}) + "\n" for i in range(n))


def poll_until(src, n, max_records=1000, timeout_s=5.0):
    """Poll a following source until it has returned ``n`` items (or the time is up)."""
    out = []
    deadline = time.monotonic() + timeout_s
    while len(out) < n and time.monotonic() < deadline:
        out += src.poll(min(max_records, n - len(out)), 0.05)
    return out


@pytest.fixture
def source_log():
    """The messages the sources log (the daemon's JSON logging does not propagate to the root logger)."""
    messages = []
    handler = logging.Handler()
    handler.emit = lambda record: messages.append((record.levelname, record.getMessage()))
    logger = logging.getLogger("ratiowatch.sources")
    old_level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    yield messages
    logger.removeHandler(handler)
    logger.setLevel(old_level)


def test_a_rotated_file_is_read_from_its_start_in_follow_mode(tmp_path, source_log):
    p, src = following(tmp_path, 5)
    rotate(p, jsonl_lines(100, 3))
    items = poll_until(src, 3)
    src.close()
    assert [r.timestamp for r in items] == [100, 101, 102]
    assert [r.ref for r in items] == [("file:x.jsonl", o) for o in (5, 6, 7)]  # offsets go on growing
    assert [m for _, m in source_log] == ["source file was replaced (rotated): reading the new file from its start"]


def test_a_truncated_file_is_read_again_from_its_start_in_follow_mode(tmp_path, source_log):
    p, src = following(tmp_path, 5)
    p.write_text(jsonl_lines(100, 2))  # cut in place (same inode) to fewer bytes than were read
    items = poll_until(src, 2)
    src.close()
    assert [(r.timestamp, r.ref[1]) for r in items] == [(100, 5), (101, 6)]
    assert source_log == [("WARNING", "source file was truncated: reading it again from its start")]


def test_a_file_rewritten_in_place_past_the_read_position_is_read_from_its_start_in_follow_mode(tmp_path, source_log):
    p, src = following(tmp_path, 3)
    p.write_text(jsonl_lines(100, 10))  # truncated and longer again before the next poll: its first bytes differ
    items = poll_until(src, 10)
    src.close()
    assert [r.timestamp for r in items] == [100 + i for i in range(10)]
    assert [m for _, m in source_log] == ["source file was truncated: reading it again from its start"]


def test_a_file_appended_to_in_follow_mode_is_not_taken_for_a_rotated_one(tmp_path, source_log):
    p, src = following(tmp_path, 3)
    assert src.poll(10, 0.05) == []
    with open(p, "a") as fh:
        fh.write(jsonl_lines(3, 2))
    items = poll_until(src, 2)
    src.close()
    assert [(r.timestamp, r.ref[1]) for r in items] == [(3, 3), (4, 4)] and source_log == []


def test_a_committed_offset_is_not_applied_to_another_file_that_took_the_name(tmp_path, source_log):
    p = tmp_path / "x.jsonl"
    p.write_text(jsonl_lines(0, 10))
    store = CheckpointStore(tmp_path / "s")
    src = FileSource(p, SPEC, offsets=store)
    assert len(drain(src)) == 10
    src.commit({"file:x.jsonl": 10})
    src.close()
    new = tmp_path / "x.jsonl.new"
    new.write_text(jsonl_lines(100, 4))
    new.replace(p)
    items = drain(FileSource(p, SPEC, offsets=store))
    assert [(r.timestamp, r.ref[1]) for r in items] == [(100, 10), (101, 11), (102, 12), (103, 13)]
    assert source_log == [("WARNING", "source file is not the file its committed offset was read from: "
                                      "reading it from its start")]


def test_a_file_rewritten_in_place_while_stopped_is_read_from_its_start(tmp_path, source_log):
    """Same device and inode (or a deleted file's inode reused), other first bytes: another file."""
    p, store = committed(tmp_path, jsonl_lines(0, 4), 4)
    p.write_text(jsonl_lines(100, 6))
    items = drain(FileSource(p, SPEC, offsets=store))
    assert [r.timestamp for r in items] == [100 + i for i in range(6)] and len(source_log) == 1


def test_a_restart_resumes_an_appended_file_after_its_committed_line(tmp_path, source_log):
    p, store = committed(tmp_path, jsonl_lines(0, 4), 3)
    with open(p, "a") as fh:
        fh.write(jsonl_lines(4, 2))
    items = drain(FileSource(p, SPEC, offsets=store))
    assert [(r.timestamp, r.ref[1]) for r in items] == [(3, 3), (4, 4), (5, 5)] and source_log == []


def test_a_restart_after_a_rotation_resumes_after_the_committed_line_of_the_new_file(tmp_path, source_log):
    store = CheckpointStore(tmp_path / "s")
    p, src = following(tmp_path, 5, offsets=store)
    rotate(p, jsonl_lines(100, 6))
    got = poll_until(src, 3, max_records=3)
    assert [r.ref[1] for r in got] == [5, 6, 7]
    src.commit({"file:x.jsonl": 8})
    src.close()
    items = drain(FileSource(p, SPEC, offsets=store))
    assert [(r.timestamp, r.ref[1]) for r in items] == [(103, 8), (104, 9), (105, 10)]
    assert [level for level, _ in source_log] == ["INFO"]  # the rotation; the restart resumes silently


def test_a_commit_still_in_the_previous_file_makes_a_restart_read_the_new_file_from_its_start(tmp_path):
    store = CheckpointStore(tmp_path / "s")
    p, src = following(tmp_path, 5, offsets=store)
    rotate(p, jsonl_lines(100, 4))
    assert len(poll_until(src, 4)) == 4
    src.commit({"file:x.jsonl": 3})  # the sinks acknowledged only part of the old file
    src.close()
    items = drain(FileSource(p, SPEC, offsets=store))
    assert [r.timestamp for r in items] == [100, 101, 102, 103]


def test_an_offsets_file_without_the_file_identity_is_still_applied(tmp_path, source_log):
    p = tmp_path / "x.jsonl"
    p.write_text(jsonl_lines(0, 10))
    store = CheckpointStore(tmp_path / "s")
    store.save_json("offsets-x.jsonl.json", {"file:x.jsonl": 4})  # as older versions wrote it
    items = drain(FileSource(p, SPEC, offsets=store))
    assert [r.ref[1] for r in items] == list(range(4, 10)) and source_log == []


def test_a_file_shorter_than_its_committed_offset_is_read_from_its_start(tmp_path, source_log):
    p = tmp_path / "x.jsonl"
    p.write_text(jsonl_lines(0, 10))
    store = CheckpointStore(tmp_path / "s")
    store.save_json("offsets-x.jsonl.json", {"file:x.jsonl": 601})
    items = drain(FileSource(p, SPEC, offsets=store))
    assert [(r.timestamp, r.ref[1]) for r in items] == [(i, 601 + i) for i in range(10)]
    assert source_log == [("WARNING", "source file is shorter than its committed offset: reading it from its start")]


def test_bytes_that_are_not_utf8_send_a_file_line_to_the_dead_letters_as_not_utf8(tmp_path):
    p = tmp_path / "x.jsonl"
    p.write_bytes(b'{"k": "h\xffx", "t": 1, "v": 1}\n'
                  b'{"k": "h\xfex", "t": 1, "v": 2}\n'   # not one key with the line above: not a key at all
                  b'{"k": "ok", "t": 1, "v": 3.5\xff}\n'  # outside a string: still not_utf8, not malformed_json
                  b'{"k": "ok", "t": 2, "v": 4}\r\n')
    items = drain(FileSource(p, SPEC))
    assert [getattr(i, "reason", "record") for i in items] == ["not_utf8", "not_utf8", "not_utf8", "record"]
    assert [i.ref[1] for i in items] == [0, 1, 2, 3]
    assert "0xfe at position 8" in items[1].detail
    assert items[3].key == "ok" and items[3].values.tolist() == [4.0]


def test_csv_rows_that_are_not_utf8_are_dead_lettered_and_crlf_and_a_last_line_without_newline_still_read(tmp_path):
    p = tmp_path / "x.csv"
    p.write_bytes(b"k,t,v\r\na,1,0.5\r\nb\xff,2,1\r\nc,3,2")
    items = drain(FileSource(p, SPEC))
    assert [getattr(i, "reason", i.key) for i in items] == ["a", "not_utf8", "c"]
    assert [i.ref[1] for i in items] == [1, 2, 3] and items[2].values.tolist() == [2.0]


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        FileSource(tmp_path / "nope.jsonl", SPEC)


def test_stdin_source_reads_lines_through_a_bounded_queue():
    stream = io.StringIO("".join(json.dumps({"k": "a", "t": i, "v": i}) + "\n" for i in range(50)) + "{bad\n")
    src = StdinSource(SPEC, stream=stream, queue_size=4)
    items = drain(src, max_records=7)
    assert len(items) == 51 and isinstance(items[-1], BadRecord)
    assert [r.ref[1] for r in items] == list(range(51))


def test_stdin_bytes_that_are_not_utf8_are_dead_lettered_as_not_utf8():
    # decoded as text, a bad byte became a surrogate and the line an unparseable dead letter (or a
    # strict decoder stopped the reader thread); as bytes it is what a file's line or a Kafka message is
    stream = io.BytesIO(b'{"k": "a", "t": 0, "v": 1}\n{"k": "h\xffx", "t": 1, "v": 2}\r\n{"k": "a", "t": 2, "v": 3}')
    items = drain(StdinSource(SPEC, stream=stream))
    assert [type(i).__name__ for i in items] == ["Record", "BadRecord", "Record"]
    assert items[1].reason == "not_utf8" and [r.values[0] for r in (items[0], items[2])] == [1.0, 3.0]


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


ARRIVAL = FieldSpec(key=None, timestamp=None, values=("v",))  # the config's key = "", timestamp = ""


def test_csv_arrival_order_counts_data_records_as_jsonl_does_and_a_restart_neither_replays_nor_skips(tmp_path):
    values = [0.5, 1.5, 2.5, 3.5, 4.5, 5.5]
    csv_path, jsonl_path = tmp_path / "x.csv", tmp_path / "x.jsonl"
    csv_path.write_text("v\n" + "".join(f"{v}\n" for v in values))
    jsonl_path.write_text("".join(json.dumps({"v": v}) + "\n" for v in values))
    as_jsonl = [r.timestamp for r in drain(FileSource(jsonl_path, ARRIVAL))]
    store = CheckpointStore(tmp_path / "s")
    src = FileSource(csv_path, ARRIVAL, offsets=store)
    first = src.poll(3, 0.1)
    assert [r.timestamp for r in first] == as_jsonl[:3] == [0.0, 1.0, 2.0]
    src.commit({src.partition: first[-1].ref[1] + 1})  # the offsets still count lines
    src.close()
    again = drain(FileSource(csv_path, ARRIVAL, offsets=store))
    assert [r.timestamp for r in again] == as_jsonl[3:] == [3.0, 4.0, 5.0]
    assert [r.values[0] for r in first + again] == values
    stdin = drain(StdinSource(ARRIVAL, fmt="csv", stream=io.StringIO("v\n" + "".join(f"{v}\n" for v in values))))
    assert [r.timestamp for r in stdin] == as_jsonl


def test_a_directory_or_a_pipe_as_the_source_file_is_a_clear_error(tmp_path):
    import os

    with pytest.raises(ValueError, match="is a directory"):
        FileSource(tmp_path, SPEC)
    with pytest.raises(ValueError, match="is a directory"):
        FileSource(tmp_path, SPEC, follow=True)
    os.mkfifo(tmp_path / "p.jsonl")
    with pytest.raises(ValueError, match="not a regular file"):
        FileSource(tmp_path / "p.jsonl", SPEC)

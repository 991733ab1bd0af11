"""Poison messages: whatever one message does while it is parsed is that message's fault.

A message nested a few thousand levels deep made Python's JSON decoder raise RecursionError, which
escaped the parser and stopped the daemon (and again after every restart); bytes that are not
UTF-8 were described as a UTF-16 decoding problem.
"""

from __future__ import annotations

import io
import json

import pytest

from ratiowatch.connectors import records
from ratiowatch.connectors.records import MAX_DEPTH, BatchParser, FieldSpec, RecordError, nesting_depth, parse_record
from ratiowatch.connectors.sources import FileSource, StdinSource

SPEC = FieldSpec(key="k", timestamp="t", values=("v",))
DEEP = b'{"k": "a", "t": 1, "v": ' + b"[" * 3000 + b"]" * 3000 + b"}"
GOOD = [json.dumps({"k": "a", "t": t, "v": float(t)}).encode() for t in range(3)]


def test_deeply_nested_message_is_a_bad_record_not_an_exception():
    with pytest.raises(RecordError) as err:
        parse_record(DEEP, SPEC)
    assert err.value.reason == "nested_too_deep"
    p = BatchParser(SPEC)
    for off, raw in enumerate([GOOD[0], DEEP, GOOD[1], GOOD[2]]):
        p.add(raw, "p0", off)
    batch = p.finish()
    assert batch.keys == ["a", "a", "a"] and batch.offsets == [0, 2, 3]
    assert [(b.reason, b.ref) for b in batch.bad] == [("nested_too_deep", ("p0", 1))]
    assert batch.positions == {"p0": 4}


def test_nesting_at_the_limit_is_parsed_and_brackets_in_strings_do_not_count():
    ok = b'{"k": "a", "t": 1, "v": 1.0, "x": ' + b"[" * (MAX_DEPTH - 1) + b"]" * (MAX_DEPTH - 1) + b"}"
    assert parse_record(ok, SPEC).values.tolist() == [1.0]
    text = '{"k": "[[[[", "t": 1, "v": 2.0, "s": "' + "[" * 5000 + '"}'
    assert nesting_depth(text) == 1
    assert parse_record(text.encode(), SPEC).key == "[[[["


def test_file_and_stdin_sources_turn_a_deep_message_into_a_bad_record(tmp_path):
    lines = [GOOD[0].decode(), DEEP.decode(), GOOD[1].decode()]
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(lines) + "\n")
    got = FileSource(path, SPEC).poll(10)
    assert [getattr(x, "reason", None) for x in got] == [None, "nested_too_deep", None]
    src = StdinSource(SPEC, stream=io.StringIO("\n".join(lines) + "\n"))
    items = []
    while not src.exhausted:
        items += src.poll(10, 0.5)
    assert [getattr(x, "reason", None) for x in items] == [None, "nested_too_deep", None]


def test_bytes_that_are_not_utf8_say_so():
    for raw in (b'\xff\xfe{"k": "a"}', '{"k": "a", "t": 1, "v": 1}'.encode("utf-16")):
        with pytest.raises(RecordError) as err:
            parse_record(raw, SPEC)
        assert err.value.reason == "not_utf8"
        assert "not UTF-8" in err.value.detail and "utf-16" not in err.value.detail.lower()
    p = BatchParser(SPEC)
    p.add(b'\xff\xfe{"k": "a"}', "p0", 0)
    assert [b.reason for b in p.finish().bad] == ["not_utf8"]
    # a UTF-8 byte-order mark is still fine
    assert parse_record(b'\xef\xbb\xbf{"k": "a", "t": 1, "v": 1}', SPEC).key == "a"


def test_an_unexpected_exception_while_parsing_is_that_messages_fault(monkeypatch):
    def broken(*_a, **_k):
        raise ZeroDivisionError("boom")

    monkeypatch.setattr(records, "record_from_mapping", broken)
    with pytest.raises(RecordError) as err:
        parse_record(b'{"k": "a", "t": 1, "v": "1"}', SPEC)
    assert err.value.reason == "unparseable" and "ZeroDivisionError" in err.value.detail
    p = BatchParser(SPEC)
    monkeypatch.setattr(p, "_fast", broken)
    p.add(GOOD[0], "p0", 0)
    batch = p.finish()
    assert [b.reason for b in batch.bad] == ["unparseable"] and batch.positions == {"p0": 1}


def test_dead_letter_entries_of_pipeline_rejections_keep_the_original_message():
    from ratiowatch.stream.engine.pipeline import Pipeline
    from toy_detector import MeanShiftFactory

    p = BatchParser(SPEC)
    raws = [b'{"k": "a", "t": 5, "v": 1.0}', b'{"t": 4,   "k": "a", "v": 2.0, "note": "late"}']
    for off, raw in enumerate(raws):
        p.add(raw, "p0", off)
    _, bad = Pipeline(MeanShiftFactory()).process(p.finish())
    assert [(b.reason, b.raw) for b in bad] == [("timestamp_backwards", raws[1].decode())]


def test_an_empty_list_in_a_value_field_is_a_missing_value_not_a_record_with_fewer_values():
    """With several value fields, ``[]`` in one gave a record with fewer values than fields: as a
    key's first record it would fix the key's dimension wrong for good."""
    spec = FieldSpec(key="k", timestamp="t", values=("x", "y"))
    raw = json.dumps({"k": "a", "t": 0, "x": 1.0, "y": []}).encode()
    with pytest.raises(RecordError) as err:
        parse_record(raw, spec)
    assert err.value.reason == "missing_field" and err.value.detail == "value field 'y' is an empty list"
    parser = BatchParser(spec)
    parser.add(raw, "p0", 0)
    parser.add(json.dumps({"k": "a", "t": 1, "x": 1.0, "y": [2.0]}).encode(), "p0", 1)
    batch = parser.finish()
    assert [(b.reason, b.ref) for b in batch.bad] == [("missing_field", ("p0", 0))]
    assert batch.values.tolist() == [[1.0, 2.0]]

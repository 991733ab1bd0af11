"""Sources facing input they cannot read as expected: a closed or failing stdin, long stdin lines
while nobody polls, unreadable files, damaged side files, CSV rows and headers the line reader used
to misread."""

from __future__ import annotations

import io
import json
import time

import pytest

from ratiowatch.connectors.records import BatchParser, FieldSpec, Record, RecordError, parse_record
from ratiowatch.connectors.sources import FileSource, SourceReadError, SourceUnavailableError, StdinSource
from ratiowatch.stream.engine.checkpoint import CheckpointStore

SPEC = FieldSpec(key="k", timestamp="t", values=("v",))


def jsonl(ts) -> bytes:
    return b"".join(json.dumps({"k": "a", "t": t, "v": t}).encode() + b"\n" for t in ts)


def drain(src, max_records=1000, polls=200):
    out = []
    for _ in range(polls):
        if src.exhausted:
            break
        out += src.poll(max_records, 0.05)
    return out


# --- stdin -------------------------------------------------------------------------------------
@pytest.mark.parametrize("closed", ["none", "closed_file"])
def test_a_closed_stdin_is_refused_when_the_source_is_built_instead_of_an_idle_reader(monkeypatch, closed):
    if closed == "none":  # a process started with `0<&-`
        monkeypatch.setattr("sys.stdin", None)
        kwargs = {}
    else:
        f = io.BytesIO(b"")
        f.close()
        kwargs = {"stream": f}
    with pytest.raises(SourceUnavailableError, match="stdin is closed"):
        StdinSource(SPEC, **kwargs)


class FailingStream(io.RawIOBase):
    """Gives ``good`` lines, then its read fails as a broken stdin's does."""

    def __init__(self, good: int):
        self.lines = [jsonl([t]) for t in range(good)]

    def readline(self, limit=-1):
        if self.lines:
            return self.lines.pop(0)
        raise OSError(5, "Input/output error")


def test_a_stdin_read_error_is_raised_by_poll_after_the_lines_read_before_it_not_taken_for_the_end():
    src = StdinSource(SPEC, stream=FailingStream(3))
    items = []
    with pytest.raises(SourceReadError, match=r"reading stdin failed \(OSError: \[Errno 5\] Input/output error\)"):
        for _ in range(100):
            items += src.poll(1000, 0.05)
    assert [r.timestamp for r in items] == [0, 1, 2]
    assert not src.exhausted


def test_the_stdin_reader_stops_reading_once_the_queued_lines_hold_queue_bytes():
    line = json.dumps({"k": "a", "t": 0, "v": 0, "pad": "x" * 950}).encode() + b"\n"
    stream = io.BytesIO(line * 200)
    src = StdinSource(SPEC, stream=stream, queue_bytes=10 * len(line))
    last, since = -1, time.monotonic()
    while time.monotonic() - since < 0.3:  # until the reader stopped (blocked on the full queue)
        if stream.tell() != last:
            last, since = stream.tell(), time.monotonic()
        time.sleep(0.01)
    # the queue's 10 lines and the one the reader holds; a queue bounded in lines only read all 200
    assert stream.tell() <= 11 * len(line)
    items = drain(src, max_records=7)
    assert len(items) == 200 and all(isinstance(r, Record) for r in items) and src.exhausted


# --- CSV rows and headers ----------------------------------------------------------------------
CSV_SPEC = FieldSpec(key="host", timestamp="ts", values=("cpu",))


def rows(items):
    return [(type(i).__name__, i.ref[1], getattr(i, "key", None), getattr(i, "reason", None)) for i in items]


def test_a_quoted_csv_field_holding_a_line_break_is_one_row_with_the_offset_of_its_first_line(tmp_path):
    p = tmp_path / "x.csv"
    p.write_bytes(b'host,note,ts,cpu\n"rack1\nhost-a","disk\r\nfull, ""really""",1,0.5\nhost-b,ok,2,0.7\n')
    items = drain(FileSource(p, CSV_SPEC))
    assert rows(items) == [("Record", 1, "rack1\nhost-a", None), ("Record", 4, "host-b", None)]  # 3 lines
    assert items[0].values.tolist() == [0.5] and items[0].timestamp == 1.0
    stdin = drain(StdinSource(CSV_SPEC, fmt="csv", stream=io.BytesIO(p.read_bytes())))
    assert rows(stdin) == rows(items)


def test_a_restart_after_a_committed_multi_line_csv_row_neither_replays_it_nor_reads_its_rest_as_a_row(tmp_path):
    p = tmp_path / "x.csv"
    p.write_text('host,ts,cpu\n"rack1\nhost-a",1,0.5\n"rack2\nhost-b",2,0.7\nhost-c,3,0.9\n')
    store = CheckpointStore(tmp_path / "s")
    src = FileSource(p, CSV_SPEC, offsets=store)
    first = src.poll(1, 0.1)
    assert rows(first) == [("Record", 1, "rack1\nhost-a", None)]
    src.commit({src.partition: first[-1].ref[1] + 1})  # as the daemon does: after the row's first line
    src.close()
    again = drain(FileSource(p, CSV_SPEC, offsets=store))
    assert rows(again) == [("Record", 3, "rack2\nhost-b", None), ("Record", 5, "host-c", None)]


def test_a_multi_line_csv_row_written_in_parts_is_read_whole_once_finished_and_a_restart_reads_it_whole(tmp_path):
    p = tmp_path / "x.csv"
    p.write_text('host,ts,cpu\nhost-a,1,0.5\n"rack1\n')
    store = CheckpointStore(tmp_path / "s")
    src = FileSource(p, CSV_SPEC, follow=True, poll_interval_s=0.01, offsets=store)
    got = src.poll(100, 0.2)
    assert rows(got) == [("Record", 1, "host-a", None)]  # the row goes on: not taken yet
    src.commit({src.partition: got[-1].ref[1] + 1})
    src.close()
    with p.open("a") as f:
        f.write('host-b",2,0.7\n')
    src = FileSource(p, CSV_SPEC, follow=True, poll_interval_s=0.01, offsets=store)
    got = src.poll(100, 0.2)
    src.close()
    assert rows(got) == [("Record", 2, "rack1\nhost-b", None)]


def test_a_csv_row_whose_quoted_field_goes_on_past_max_record_bytes_is_one_oversized_dead_letter(tmp_path):
    row = '"rack1\n' + "filler line\n" * 50 + 'host-a",1,0.5'
    p = tmp_path / "x.csv"
    p.write_text("host,ts,cpu\n" + row + "\nhost-b,2,0.7\n")
    items = drain(FileSource(p, CSV_SPEC, max_bytes=200))
    assert rows(items) == [("BadRecord", 1, None, "oversized"), ("Record", 53, "host-b", None)]
    assert items[0].detail == f"line has {len(row)} bytes, more than max_record_bytes=200"
    assert items[0].raw.startswith('"rack1\nfiller line\n')


def test_a_csv_row_with_a_quote_never_closed_is_read_as_it_is_at_the_end_of_the_file(tmp_path):
    p = tmp_path / "x.csv"
    p.write_text('host,ts,cpu\nhost-a,1,0.5\n"rack1\nhost-b,2,0.7\n')
    items = drain(FileSource(p, CSV_SPEC))
    assert rows(items) == [("Record", 1, "host-a", None), ("BadRecord", 2, None, "malformed_csv")]


@pytest.mark.parametrize("header,why", [
    (b"host,ts,cpu," + b",".join(b"extra%d" % i for i in range(40)) + b"\n", "oversized"),
    (b"host,ts\r,cpu\n", "unparseable"),  # a carriage return inside a field: the csv module refuses the line
])
def test_a_csv_header_that_cannot_be_read_makes_every_row_a_dead_letter_that_says_so(tmp_path, header, why):
    p = tmp_path / "x.csv"
    p.write_bytes(header + b"".join(b"host-a,%d,0.5\n" % i for i in range(3)))
    items = drain(FileSource(p, CSV_SPEC, max_bytes=200))
    assert rows(items) == [("BadRecord", 0, None, why)] + [("BadRecord", i, None, "malformed_csv") for i in (1, 2, 3)]
    assert all(i.detail.startswith(f"unusable CSV header (offset 0: {why}: ") for i in items[1:])


def test_spaces_after_the_commas_of_csv_rows_are_skipped_as_in_the_header(tmp_path):
    p = tmp_path / "x.csv"
    p.write_text('ts, host, cpu\n1, a, 0.5\n2, "b, c", 0.7\n')
    items = drain(FileSource(p, CSV_SPEC))
    assert rows(items) == [("Record", 1, "a", None), ("Record", 2, "b, c", None)]


# --- record values -----------------------------------------------------------------------------
def test_an_integer_of_more_digits_than_python_converts_is_out_of_range_on_both_parse_paths():
    raw = b'{"k": "a", "t": 1, "v": ' + b"9" * 5000 + b"}"
    with pytest.raises(RecordError) as err:
        parse_record(raw, SPEC)
    assert err.value.reason == "out_of_range" and "sys." not in err.value.detail
    assert "4,300 digits" in err.value.detail
    parser = BatchParser(SPEC, 65536)
    parser.add(raw, "p0", 0)
    out = parser.finish()
    bad = out.bad if hasattr(out, "bad") else out
    assert [(b.reason, b.detail) for b in bad] == [("out_of_range", err.value.detail)]


# --- unreadable files --------------------------------------------------------------------------
def refuse_opening(monkeypatch, path, exc):
    """``open`` of ``path`` in the sources module raises ``exc`` (root reads any file whatever its mode)."""
    import builtins

    import ratiowatch.connectors.sources as sources

    def fake_open(file, *args, **kwargs):
        if str(file) == str(path):
            raise exc
        return builtins.open(file, *args, **kwargs)

    monkeypatch.setattr(sources, "open", fake_open, raising=False)


def test_a_source_file_that_cannot_be_read_is_refused_when_the_source_is_built(tmp_path, monkeypatch):
    p = tmp_path / "x.jsonl"
    p.write_bytes(jsonl([0]))
    refuse_opening(monkeypatch, p, PermissionError(13, "Permission denied"))
    for follow in (False, True):
        with pytest.raises(SourceUnavailableError,
                           match=r"cannot be read \(Permission denied\); give the daemon's user"):
            FileSource(p, SPEC, follow=follow)


@pytest.mark.parametrize("exc", [PermissionError(13, "Permission denied"), IsADirectoryError(21, "Is a directory")])
def test_a_followed_file_rotated_into_one_that_cannot_be_opened_is_waited_for_as_a_missing_one(tmp_path, monkeypatch,
                                                                                                 caplog, exc):
    p = tmp_path / "x.jsonl"
    p.write_bytes(jsonl([0, 1]))
    src = FileSource(p, SPEC, follow=True, poll_interval_s=0.01)
    assert [r.timestamp for r in src.poll(100, 0.1)] == [0, 1]
    new = tmp_path / "x.jsonl.1"
    new.write_bytes(jsonl([2, 3]))
    new.replace(p)
    with monkeypatch.context() as m:
        refuse_opening(m, p, exc)
        with caplog.at_level("WARNING", logger="ratiowatch.sources"):
            for _ in range(3):
                assert src.poll(100, 0.05) == []
        assert [r.getMessage() for r in caplog.records if r.levelname == "WARNING"].count(
            "source file cannot be opened; trying again at each poll") == 1
    got = []
    for _ in range(20):
        got += src.poll(100, 0.05)
        if len(got) >= 2:
            break
    assert [r.timestamp for r in got] == [2, 3] and [r.ref[1] for r in got] == [2, 3]
    src.close()


# --- side files --------------------------------------------------------------------------------
@pytest.mark.parametrize("ident,problem", [
    ({"dev": 1, "ino": 2, "base": None, "head_len": 0, "head_digest": 0},
     "has base = null, not a non-negative integer"),
    ({"dev": 1, "ino": 2, "base": 0, "head_len": 10**12, "head_digest": 0}, "has head_len = 1000000000000, more than"),
    ({"dev": 1, "ino": 2, "base": 0, "head_len": 0}, "has head_digest = null"),
    ([1, 2], "is not a JSON object"),
])
def test_a_file_identity_side_file_of_another_shape_stops_the_start_naming_it(tmp_path, ident, problem):
    p = tmp_path / "x.jsonl"
    p.write_bytes(jsonl([0]))
    store = CheckpointStore(tmp_path / "s")
    store.save_json("offsets-x.jsonl.json", {"file:x.jsonl": 1})
    store.save_json("file-identity-x.jsonl.json", ident)
    with pytest.raises(SourceUnavailableError) as err:
        FileSource(p, SPEC, offsets=store)
    assert str(err.value).startswith(f"{tmp_path / 's' / 'file-identity-x.jsonl.json'}: the source's file-identity "
                                     f"side file {problem}")
    assert str(err.value).endswith("or restore it")


def test_a_file_identity_side_file_written_by_a_commit_passes_the_check(tmp_path):
    p = tmp_path / "x.jsonl"
    p.write_bytes(jsonl(range(3)))
    store = CheckpointStore(tmp_path / "s")
    src = FileSource(p, SPEC, offsets=store)
    drain(src)
    src.commit({"file:x.jsonl": 2})
    src.close()
    assert [r.timestamp for r in drain(FileSource(p, SPEC, offsets=store))] == [2]

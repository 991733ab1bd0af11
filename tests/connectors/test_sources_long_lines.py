"""A line longer than max_record_bytes costs bounded memory: the file and stdin sources read at most
``max_record_bytes + 2`` bytes of a line, drop the rest in bounded chunks, and send one ``oversized``
dead letter built from the line's first bytes; the records after it are read as usual.

One line of 400 MB used to be read whole (and copied twice more), about 3.4 times its size, and
under a memory limit the daemon died with MemoryError at that line on every restart.
"""

from __future__ import annotations

import io
import json
import tracemalloc

import pytest

from ratiowatch.connectors.records import BadRecord, FieldSpec, RecordError, bad_record
from ratiowatch.connectors.sources import FileSource, StdinSource

SPEC = FieldSpec(key="k", timestamp="t", values=("v",))
MAX = 1024
HUGE = 8 << 20  # bytes of the long line
BOUND = 1 << 20  # what reading it may cost at most (a few chunks of 64 kB and the parser's buffers)


def good(t: int) -> bytes:
    return json.dumps({"k": "a", "t": t, "v": float(t)}).encode()


def long_line(n: int = HUGE) -> bytes:
    head = b'{"k": "a", "t": 1, "v": 1.0, "pad": "'
    return head + b"x" * (n - len(head) - 2) + b'"}'


def drain(src, max_records=100):
    items = []
    for _ in range(1000):
        got = src.poll(max_records, 0.05)
        items += got
        if src.exhausted or (not got and getattr(src, "follow", False)):
            break
    return items


def peak_while(fn):
    tracemalloc.start()
    try:
        out = fn()
        return out, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def check_items(items, oversized_at, n):
    reasons = [(getattr(i, "reason", None), i.ref[1]) for i in items]
    assert reasons == [("oversized" if no in oversized_at else None, no) for no in range(n)]
    for i in items:
        if isinstance(i, BadRecord):
            assert i.detail == f"line has {HUGE} bytes, more than max_record_bytes={MAX}"
            assert i.raw.startswith('{"k": "a", "t": 1, "v": 1.0, "pad": "xxx')
            assert i.raw.endswith(f"...[truncated {HUGE - (MAX + 2)} bytes]") and i.raw_base64 is None


@pytest.mark.parametrize("ending", [b"\n", b"\r\n"])
def test_a_file_line_longer_than_max_record_bytes_costs_bounded_memory_and_the_records_after_it_are_read(
        tmp_path, ending):
    path = tmp_path / "in.jsonl"
    path.write_bytes(good(0) + b"\n" + long_line() + ending + good(2) + b"\n" + long_line() + ending + good(4)
                     + b"\n" + long_line())  # the last line without its end
    src = FileSource(path, SPEC, max_bytes=MAX)
    items, peak = peak_while(lambda: drain(src))
    assert peak < BOUND, peak
    check_items(items, {1, 3, 5}, 6)
    assert [i.values[0] for i in items if not isinstance(i, BadRecord)] == [0.0, 2.0, 4.0]


def test_a_long_line_being_written_in_follow_mode_is_not_buffered_beyond_max_record_bytes(tmp_path):
    path = tmp_path / "in.jsonl"
    line = long_line()
    path.write_bytes(good(0) + b"\n" + line[: HUGE // 2])  # the writer is half-way through the line
    src = FileSource(path, SPEC, max_bytes=MAX, follow=True, poll_interval_s=0.01)
    first, peak = peak_while(lambda: drain(src))
    assert peak < BOUND, peak
    assert [getattr(i, "reason", None) for i in first] == [None] and len(src._buf) <= MAX + 2
    with open(path, "ab") as fh:
        fh.write(line[HUGE // 2:] + b"\n" + good(2) + b"\n")
    rest, peak = peak_while(lambda: drain(src))
    assert peak < BOUND, peak
    check_items(first + rest, {1}, 3)


def test_a_restart_after_a_long_line_neither_repeats_nor_skips_a_line(tmp_path):
    class Offsets(dict):
        def save_json(self, name, obj):
            self[name] = obj

        def load_json(self, name):
            return self.get(name)

    path = tmp_path / "in.jsonl"
    path.write_bytes(good(0) + b"\n" + long_line() + b"\n" + good(2) + b"\n")
    offsets = Offsets()
    src = FileSource(path, SPEC, max_bytes=MAX, offsets=offsets)
    check_items(drain(src), {1}, 3)
    src.commit({src.partition: 2})  # the long line's dead letter and the record before it were handled
    src.close()
    again = drain(FileSource(path, SPEC, max_bytes=MAX, offsets=offsets))
    assert [(type(i).__name__, i.ref[1]) for i in again] == [("Record", 2)]


@pytest.mark.parametrize("as_text", [False, True], ids=["bytes", "text"])
def test_a_stdin_line_longer_than_max_record_bytes_costs_bounded_memory_and_the_records_after_it_are_read(as_text):
    data = good(0) + b"\n" + long_line() + b"\n" + good(2) + b"\n" + long_line() + b"\r\n" + good(4) + b"\n" + \
        long_line()
    stream = io.StringIO(data.decode()) if as_text else io.BytesIO(data)
    items, peak = peak_while(lambda: drain(StdinSource(SPEC, stream=stream, max_bytes=MAX, queue_size=4)))
    assert peak < BOUND, peak
    check_items(items, {1, 3, 5}, 6)


def test_the_dead_letter_of_a_long_line_cut_inside_a_character_keeps_valid_text_and_no_base64():
    prefix = ('{"k": "' + "é" * 3000).encode()[:4002]  # the prefix ends in the middle of an "é"
    assert len(prefix.decode("utf-8", errors="ignore").encode()) == 4001
    bad = bad_record(prefix, RecordError("oversized", "..."), ("p0", 3), size=10**9)
    assert bad.raw_base64 is None and "\ufffd" not in bad.raw
    assert bad.raw.startswith('{"k": "éé') and bad.raw.endswith(f"...[truncated {10**9 - 4001} bytes]")

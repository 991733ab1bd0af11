"""The stdout / stderr sink: a reader that never reads blocks its deliveries, never its close."""

from __future__ import annotations

import json
import os
import threading
import time

from ratiowatch.connectors.records import BadRecord
from ratiowatch.connectors.sinks import StreamSink


def bad(i: int) -> BadRecord:
    return BadRecord("malformed_json", "not JSON", f"line {i} " + "x" * 200, ("p", i), None)


def test_close_returns_while_a_delivery_is_blocked_on_a_pipe_nobody_reads():
    r, w = os.pipe()
    stream = os.fdopen(w, "w")
    sink = StreamSink(stream, name="stdout")
    outcome = []

    def deliver():
        try:
            sink.deliver([bad(i) for i in range(2000)])
        except BrokenPipeError as exc:
            outcome.append(exc)

    delivering = threading.Thread(target=deliver, daemon=True)
    delivering.start()
    time.sleep(0.3)
    assert delivering.is_alive()  # blocked: the pipe is full
    closing = threading.Thread(target=sink.close, daemon=True)
    t0 = time.monotonic()
    closing.start()
    closing.join(5)
    try:
        assert not closing.is_alive(), "close() waited for the reader"
        assert time.monotonic() - t0 < 2
    finally:
        # the reader goes away: the blocked write fails (broken pipe) and its thread ends
        os.close(r)
        delivering.join(10)
        assert outcome and not delivering.is_alive()
        try:
            stream.close()
        except OSError:
            pass


def test_lines_written_through_the_descriptor_arrive_whole_and_in_order(tmp_path):
    path = tmp_path / "out.jsonl"
    with open(path, "w") as stream:
        stream.write("before\n")  # printed before the sink existed: still first
        sink = StreamSink(stream)
        assert sink.deliver([bad(i) for i in range(3)]) == [] and sink.flush() == []
        sink.deliver([bad(3)])
        sink.close()
    lines = path.read_text().splitlines()
    assert lines[0] == "before"
    assert [json.loads(x)["ref"][1] for x in lines[1:]] == [0, 1, 2, 3]


def test_a_non_blocking_descriptor_that_fills_up_is_waited_on_and_no_line_is_torn():
    r, w = os.pipe()
    os.set_blocking(w, False)  # as a parent process may leave a shared pipe
    stream = os.fdopen(w, "w")
    sink = StreamSink(stream, name="stdout")
    items = [bad(i) for i in range(2000)]  # far more than the pipe holds
    received = bytearray()

    def read_slowly():
        time.sleep(0.2)  # the pipe is full by now
        while True:
            chunk = os.read(r, 1 << 16)
            if not chunk:
                return
            received.extend(chunk)

    reader = threading.Thread(target=read_slowly, daemon=True)
    reader.start()
    try:
        assert sink.deliver(items) == []
    finally:
        stream.close()
        reader.join(10)
        os.close(r)
    got = bytes(received).decode().splitlines()
    assert [json.loads(x)["ref"][1] for x in got] == list(range(2000))

"""The JSONL file sink: a failed write leaves no torn line and is retried; the repair on open keeps
what is not a torn line; special files (/dev/null) are written without fsync; a file rotated by
rename, removal or truncation in place is followed."""

from __future__ import annotations

import errno
import logging
import os
import resource
import signal
import time

import pytest

from ratiowatch.connectors import sinks as sinks_module
from ratiowatch.connectors.delivery import SinkWorker
from ratiowatch.connectors.records import Alert
from ratiowatch.connectors.sinks import JsonlFileSink


def alert(i: int) -> Alert:
    return Alert.from_alarm(key=f"k{i}", detector="d", change_index=i, alarm_index=i + 1, timestamp=float(i),
                            score=1.0, threshold=0.5)


def lines(path) -> list[Alert]:
    raw = path.read_bytes()
    assert raw == b"" or raw.endswith(b"\n"), "a torn last line"
    return [Alert.from_json(x) for x in raw.splitlines()]


@pytest.fixture
def file_size_limit():
    """Set RLIMIT_FSIZE for this process (a disk that fills up: writes beyond it fail with EFBIG)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    old_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)

    def limit(n: int | None) -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft if n is None else n, hard))

    yield limit
    resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    signal.signal(signal.SIGXFSZ, old_handler)


def test_a_write_that_fails_midway_cuts_the_file_back_and_returns_the_items_as_failures(tmp_path, file_size_limit):
    path = tmp_path / "alerts.jsonl"
    sink = JsonlFileSink(path)
    assert sink.deliver([alert(0)]) == [] and sink.flush() == []
    one = path.stat().st_size
    file_size_limit(int(2.5 * one))  # the disk fills up in the middle of the third line
    failed = sink.deliver([alert(1), alert(2), alert(3)]) + sink.flush()
    assert [it for it, _ in failed] == [alert(1), alert(2), alert(3)]
    assert "File too large" in failed[0][1] and str(path) in failed[0][1]
    assert lines(path) == [alert(0)]  # back to the last acknowledged line: nothing torn
    file_size_limit(None)  # space again
    assert sink.deliver([it for it, _ in failed]) == [] and sink.flush() == []
    sink.close()
    assert lines(path) == [alert(i) for i in range(4)]


def test_a_worker_on_a_full_disk_waits_and_retries_until_the_space_comes_back(tmp_path, file_size_limit):
    path = tmp_path / "alerts.jsonl"
    file_size_limit(300)  # not even two lines fit
    w = SinkWorker(JsonlFileSink(path))
    ticket = w.put([alert(i) for i in range(4)])
    deadline = time.monotonic() + 5
    while w.failing is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert w.failing is not None and "File too large" in w.failing
    assert w.error is None and w.acked < ticket
    assert path.stat().st_size == 0  # no torn line left behind
    file_size_limit(None)
    assert w.wait(ticket, timeout_s=10)
    assert w.close()
    assert lines(path) == [alert(i) for i in range(4)]


def test_a_failed_fsync_gives_back_the_unacknowledged_items_and_cuts_them(tmp_path, monkeypatch):
    path = tmp_path / "alerts.jsonl"
    sink = JsonlFileSink(path)
    assert sink.deliver([alert(0)]) == [] and sink.flush() == []
    real_fsync = os.fsync

    def failing_fsync(fd):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(sinks_module.os, "fsync", failing_fsync)
    assert sink.deliver([alert(1)]) == []
    failed = sink.flush()
    assert [it for it, _ in failed] == [alert(1)] and "Input/output error" in failed[0][1]
    assert lines(path) == [alert(0)]
    monkeypatch.setattr(sinks_module.os, "fsync", real_fsync)
    assert sink.deliver([alert(1)]) == [] and sink.flush() == []
    sink.close()
    assert lines(path) == [alert(0), alert(1)]


def test_a_file_renamed_away_is_created_anew_at_the_next_delivery(tmp_path):
    path = tmp_path / "alerts.jsonl"
    sink = JsonlFileSink(path)
    assert sink.deliver([alert(0)]) == [] and sink.flush() == []
    path.rename(tmp_path / "alerts.jsonl.1")  # logrotate's default (create) mode
    assert sink.deliver([alert(1), alert(2)]) == [] and sink.flush() == []
    sink.close()
    assert lines(tmp_path / "alerts.jsonl.1") == [alert(0)]
    assert lines(path) == [alert(1), alert(2)]


def test_lines_not_yet_flushed_when_the_file_is_renamed_stay_in_it_and_are_acknowledged(tmp_path, monkeypatch):
    path = tmp_path / "alerts.jsonl"
    sink = JsonlFileSink(path)
    assert sink.deliver([alert(0)]) == []
    path.rename(tmp_path / "alerts.jsonl.1")
    assert sink.deliver([alert(1)]) == []  # made alert(0) durable in the old file before letting it go

    def failing_fsync(fd):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(sinks_module.os, "fsync", failing_fsync)
    failed = sink.flush()
    assert [it for it, _ in failed] == [alert(1)]  # alert(0) is not given back: it is not written twice
    monkeypatch.undo()
    assert sink.deliver([alert(1)]) == [] and sink.flush() == []
    sink.close()
    assert lines(tmp_path / "alerts.jsonl.1") == [alert(0)]
    assert lines(path) == [alert(1)]


def test_lines_that_cannot_be_made_durable_in_the_renamed_file_are_cut_from_it_and_given_back(tmp_path, monkeypatch):
    path = tmp_path / "alerts.jsonl"
    sink = JsonlFileSink(path)
    assert sink.deliver([alert(0)]) == []
    path.rename(tmp_path / "alerts.jsonl.1")

    def failing_fsync(fd):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(sinks_module.os, "fsync", failing_fsync)
    failed = sink.deliver([alert(1)])
    assert [it for it, _ in failed] == [alert(0), alert(1)] and "Input/output error" in failed[0][1]
    assert lines(tmp_path / "alerts.jsonl.1") == []
    monkeypatch.undo()
    assert sink.deliver([it for it, _ in failed]) == [] and sink.flush() == []
    sink.close()
    assert lines(path) == [alert(0), alert(1)]


def test_a_removed_file_is_created_anew_at_the_next_delivery(tmp_path):
    path = tmp_path / "dead.jsonl"
    sink = JsonlFileSink(path)
    assert sink.deliver([alert(0)]) == [] and sink.flush() == []
    path.unlink()
    assert sink.deliver([alert(1)]) == [] and sink.flush() == []
    sink.close()
    assert lines(path) == [alert(1)]


def test_a_file_truncated_in_place_is_never_cut_back_to_beyond_its_new_end(tmp_path, monkeypatch):
    path = tmp_path / "alerts.jsonl"
    sink = JsonlFileSink(path)
    assert sink.deliver([alert(i) for i in range(5)]) == [] and sink.flush() == []
    os.truncate(path, 0)  # logrotate's copytruncate: the same file, emptied

    def failing_fsync(fd):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(sinks_module.os, "fsync", failing_fsync)
    assert sink.deliver([alert(5)]) == []
    assert [it for it, _ in sink.flush()] == [alert(5)]  # the failure cuts the file back...
    assert path.read_bytes() == b""  # ...to its new end, not to the old one with zero bytes
    monkeypatch.undo()
    assert sink.deliver([alert(5)]) == [] and sink.flush() == []
    sink.close()
    assert b"\0" not in path.read_bytes()
    assert lines(path) == [alert(5)]


def test_a_full_device_is_a_failure_to_retry_not_the_end_of_the_worker():
    w = SinkWorker(JsonlFileSink("/dev/full"))  # every write: ENOSPC
    w.put([alert(0)])
    deadline = time.monotonic() + 5
    while w.failing is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert w.failing is not None and "No space left" in w.failing
    assert w.error is None and w._thread.is_alive()
    assert not w.close(timeout_s=0.5)  # not acknowledged, and stopped cleanly


def test_dev_null_is_written_without_fsync_and_acknowledged():
    sink = JsonlFileSink("/dev/null")
    assert sink.deliver([alert(0)]) == [] and sink.flush() == []
    sink.close()
    w = SinkWorker(JsonlFileSink("/dev/null"))
    assert w.wait(w.put([alert(1)]), timeout_s=10)
    assert w.close() and w.error is None


def test_a_fifo_is_opened_without_a_repair_and_written_without_fsync(tmp_path):
    path = tmp_path / "pipe"
    os.mkfifo(path)
    r = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        sink = JsonlFileSink(path)
        assert sink.deliver([alert(0)]) == [] and sink.flush() == []
        assert Alert.from_json(os.read(r, 1 << 16)) == alert(0)
        sink.close()
    finally:
        os.close(r)


def test_a_last_line_that_is_whole_json_without_a_newline_is_terminated_not_cut(tmp_path):
    path = tmp_path / "alerts.jsonl"
    path.write_bytes((alert(0).to_json() + "\n" + alert(1).to_json()).encode())
    sink = JsonlFileSink(path)
    sink.deliver([alert(2)])
    sink.close()
    assert lines(path) == [alert(0), alert(1), alert(2)]


def test_a_file_of_one_json_document_without_a_newline_is_kept(tmp_path):
    path = tmp_path / "alerts.jsonl"
    path.write_text(alert(0).to_json())
    JsonlFileSink(path).close()
    assert lines(path) == [alert(0)]


def test_a_torn_last_line_is_cut_and_the_warning_says_how_many_bytes(tmp_path, caplog):
    path = tmp_path / "alerts.jsonl"
    path.write_text(alert(0).to_json() + "\n" + alert(1).to_json()[:20])
    with caplog.at_level(logging.WARNING, logger="ratiowatch.sinks"):
        JsonlFileSink(path).close()
    assert lines(path) == [alert(0)]
    assert any("20 bytes" in r.getMessage() for r in caplog.records)


def test_a_file_without_newline_that_is_not_json_is_refused_and_left_alone(tmp_path):
    path = tmp_path / "notes.jsonl"
    data = b"operator notes: do not delete this file " * 100
    path.write_bytes(data)
    with pytest.raises(ValueError, match="notes.jsonl.*no newline.*move the file away"):
        JsonlFileSink(path)
    assert path.read_bytes() == data
    torn = tmp_path / "alerts.jsonl"  # but a torn first line (a crash in the first write) is cut
    torn.write_text(alert(0).to_json()[:30])
    JsonlFileSink(torn).close()
    assert torn.read_bytes() == b""


def test_an_unterminated_tail_longer_than_any_line_is_refused_and_left_alone(tmp_path):
    path = tmp_path / "big.jsonl"
    data = alert(0).to_json().encode() + b"\n" + b"x" * (sinks_module.MAX_TORN_TAIL + 10)
    path.write_bytes(data)
    with pytest.raises(ValueError, match="big.jsonl.*longer than"):
        JsonlFileSink(path)
    assert path.read_bytes() == data


def test_a_large_file_without_any_newline_is_refused_not_wiped(tmp_path):
    path = tmp_path / "big.jsonl"
    with open(path, "wb") as fh:
        for _ in range(4):
            fh.write(b"{" * (1 << 20))
    with pytest.raises(ValueError, match="big.jsonl"):
        JsonlFileSink(path)
    assert path.stat().st_size == 4 << 20


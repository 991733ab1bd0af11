"""Progress bars: drawn on a terminal, absent from pipes and log files."""

import io

from ratiowatch.stream.commands.progress import progress_bar, stages, track


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_nothing_is_written_when_the_stream_is_not_a_terminal():
    log = io.StringIO()
    assert list(track(range(3), desc="x", stream=log)) == [0, 1, 2]
    with progress_bar(5, "x", stream=log) as bar:
        assert bar is None
    with stages("bench", 2, stream=log) as phase:
        phase("a")
        phase("b")
    assert log.getvalue() == ""


def test_a_terminal_gets_a_bar_with_counts_and_phase_names():
    term = Terminal()
    assert list(track(range(3), desc="series", stream=term)) == [0, 1, 2]
    with progress_bar(10, "detect", stream=term) as bar:
        bar.callback(5, 10)
        bar.callback(10, 10)
    with stages("bench x", 2, stream=term) as phase:
        phase("batch fits")
        phase("incremental step")
    out = term.getvalue()
    assert "series" in out and "0/3" in out and "detect" in out and "0/10" in out
    assert "bench x: 1/2 phases done, incremental step" in out


def test_a_closed_stream_counts_as_no_terminal():
    closed = Terminal()
    closed.close()
    assert list(track([1], desc="x", stream=closed)) == [1]

"""At the end of a finite source the daemon waits for its sinks while they make progress, but a sink
that keeps failing for longer than ``shutdown_timeout_s`` is given up as a stop gives up on one:
nothing past its acknowledgements is committed and ``run`` ends with exit code 3 and one line."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from cli_util import cache_env, last_line
from fake_sinks import ListSink
from fake_sources import ListSource
from toy_detector import MeanShiftFactory, step_series

from ratiowatch.connectors.records import Record
from ratiowatch.stream.engine.config import parse_config
from ratiowatch.stream.engine.daemon import Daemon


class FailingSink:
    """Every delivery fails (as a full disk does) until ``healed`` is set."""

    name = "broken"

    def __init__(self):
        self.healed = threading.Event()
        self.items: list = []

    def deliver(self, items):
        if not self.healed.is_set():
            return [(it, "OSError: [Errno 28] No space left on device") for it in items]
        self.items += items
        return []

    def flush(self):
        return []

    def close(self):
        pass


class SlowSink(ListSink):
    """Healthy, but each delivery takes ``delay_s``."""

    def __init__(self, delay_s: float):
        super().__init__("slow")
        self.delay_s = delay_s

    def deliver(self, items):
        time.sleep(self.delay_s)
        return super().deliver(items)


def finite_daemon(tmp_path, sink, shutdown_timeout_s: float = 0.5):
    recs = [Record("a", float(t), np.array([v]), ("p0", t)) for t, v in enumerate(step_series(60, 30))]
    src = ListSource(recs, batch=20)
    cfg = parse_config({"source": {"type": "file", "path": "unused.jsonl"},
                        "checkpoint": {"dir": str(tmp_path / "state")},
                        "metrics": {"enabled": False}})
    d = Daemon(cfg, factory=MeanShiftFactory(), source=src, sinks=[sink], dead_letter=ListSink("dead"))
    d.shutdown_timeout_s = shutdown_timeout_s
    return d, src


def test_a_sink_failing_past_shutdown_timeout_at_the_end_of_a_finite_source_is_given_up(tmp_path):
    sink = FailingSink()
    d, src = finite_daemon(tmp_path, sink)
    result: dict = {}

    def run():
        try:
            result["rc"] = d.run()
        except BaseException as exc:  # noqa: BLE001 - judged below
            result["error"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(30)
    if t.is_alive():
        sink.healed.set()  # let the thread end before failing the test
        t.join(30)
        pytest.fail("the daemon kept waiting for a sink that kept failing")
    err = result.get("error")
    assert isinstance(err, RuntimeError), result
    assert str(err).startswith("sink broken kept failing for more than shutdown_timeout_s = 0.5 s at the end "
                               "of the source (OSError: [Errno 28] No space left on device); it still held 1 "
                               "alerts"), err
    assert str(err).endswith("the next start reads them again")
    assert src.commits == [] and sink.items == []


def test_a_slow_but_healthy_sink_is_still_waited_for_at_the_end_of_a_finite_source(tmp_path):
    sink = SlowSink(delay_s=1.5)  # longer than shutdown_timeout_s: slowness alone is not given up on
    d, src = finite_daemon(tmp_path, sink)
    assert d.run() == 0
    assert len(sink.items) == 1 and src.commits[-1] == {"p0": 60}


def test_a_sink_that_recovers_before_the_timeout_is_delivered_and_committed(tmp_path):
    sink = FailingSink()
    d, src = finite_daemon(tmp_path, sink, shutdown_timeout_s=5.0)
    threading.Timer(1.0, sink.healed.set).start()
    assert d.run() == 0
    assert len(sink.items) == 1 and src.commits[-1] == {"p0": 60}


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_run_of_a_file_with_its_sink_on_a_full_device_ends_with_exit_code_3_and_one_line(tmp_path):
    data = tmp_path / "in.jsonl"
    data.write_text("".join(f"not json {i}\n" for i in range(5)))  # every record goes to the dead-letter sink
    cfg = tmp_path / "f.toml"
    cfg.write_text(f'[source]\ntype = "file"\npath = "{data}"\n\n[[sinks]]\ntype = "jsonl"\npath = "alerts.jsonl"\n\n'
                   '[dead_letter]\ntype = "stdout"\n\n[metrics]\nenabled = false\n')
    code = ("import sys; from ratiowatch.stream.engine.daemon import Daemon; Daemon.shutdown_timeout_s = 1.0; "
            "from ratiowatch.stream.commands.cli import main; sys.exit(main(['run', sys.argv[1]]))")
    with open("/dev/full", "w") as full:
        try:
            r = subprocess.run([sys.executable, "-c", code, str(cfg)], cwd=tmp_path, env=cache_env(), stdout=full,
                               stderr=subprocess.PIPE, text=True, timeout=90)
        except subprocess.TimeoutExpired:
            pytest.fail("run kept retrying a sink on a full device after the end of its file")
    assert r.returncode == 3, r.stderr[-2000:]
    assert "Traceback" not in r.stderr
    line = last_line(r.stderr)
    assert line.startswith("ratiowatch run: stopped without committing: sink dead_letter kept failing for more "
                           "than shutdown_timeout_s = 1 s at the end of the source (OSError: [Errno 28] No space "
                           "left on device); it still held 5 bad records"), line
    assert not (tmp_path / "state" / "offsets-in.jsonl.json").exists()

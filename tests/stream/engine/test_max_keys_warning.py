"""With pipeline.max_keys = 0 (no bound) and a kind whose key holds a large state from its first
record (anomaly, about 0.9 MB a key), a start says so once, with how to bound the keys; a bound, or a
change-point kind, starts without that warning."""

from __future__ import annotations

import json
import logging

import pytest

from ratiowatch.stream.engine.config import parse_config
from ratiowatch.stream.engine.daemon import Daemon


def run(tmp_path, kind: str, max_keys: int, caplog) -> list[logging.LogRecord]:
    data = tmp_path / "in.jsonl"
    data.write_text("".join(json.dumps({"host": "a", "ts": t, "v": float(t % 3)}) + "\n" for t in range(5)))
    doc = {"source": {"type": "file", "path": str(data)},
           "fields": {"key": "host", "timestamp": "ts", "values": ["v"]},
           "detector": {"kind": kind}, "pipeline": {"max_keys": max_keys},
           "checkpoint": {"dir": str(tmp_path / "state")},
           "sinks": [{"type": "jsonl", "path": str(tmp_path / "alerts.jsonl")}],
           "dead_letter": {"type": "file", "path": str(tmp_path / "dead.jsonl")},
           "metrics": {"enabled": False}}
    with caplog.at_level(logging.INFO, logger="ratiowatch.daemon"):
        assert Daemon(parse_config(doc)).run() == 0
    return [r for r in caplog.records if r.levelno == logging.WARNING and "pipeline.max_keys = 0" in r.getMessage()]


def test_an_unbounded_start_of_kind_anomaly_warns_once_with_the_per_key_memory_and_how_to_bound_it(tmp_path, caplog):
    [w] = run(tmp_path, "anomaly", 0, caplog)
    text = w.getMessage()
    assert "kind = 'anomaly' holds about 890 kB" in text and "set pipeline.max_keys" in text
    assert w.kind == "anomaly" and w.key_kb == 890


@pytest.mark.parametrize("kind, max_keys", [("anomaly", 1000), ("window", 0)])
def test_a_bounded_start_or_a_change_point_kind_does_not_warn_about_max_keys(tmp_path, caplog, kind, max_keys):
    assert run(tmp_path, kind, max_keys, caplog) == []

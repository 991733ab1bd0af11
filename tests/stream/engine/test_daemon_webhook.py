"""Webhook sink down: bounded retries, then the alert goes to the dead-letter sink; no crash."""

from __future__ import annotations

import json

from ratiowatch.stream.engine.config import parse_config
from ratiowatch.stream.engine.daemon import Daemon
from ratiowatch.connectors.records import Alert
from toy_detector import MeanShiftFactory, step_series


def test_daemon_sends_undeliverable_alerts_to_the_dead_letter_sink(http_server, tmp_path):
    http_server["code"] = 500
    data = tmp_path / "in.jsonl"
    data.write_text("".join(json.dumps({"key": "a", "timestamp": t, "value": v}) + "\n"
                            for t, v in enumerate(step_series(60, 30))))
    cfg = parse_config({
        "source": {"type": "file", "path": str(data)},
        "sinks": [{"type": "webhook", "url": http_server["url"], "retries": 2, "backoff_s": 0.001},
                  {"type": "jsonl", "path": str(tmp_path / "alerts.jsonl")}],
        "dead_letter": {"type": "file", "path": str(tmp_path / "dead.jsonl")},
        "checkpoint": {"dir": str(tmp_path / "state")},
        "metrics": {"enabled": False},
    })
    assert Daemon(cfg, factory=MeanShiftFactory()).run() == 0
    assert http_server["hits"] == 3
    dead = [json.loads(x) for x in (tmp_path / "dead.jsonl").read_text().splitlines()]
    assert [d["reason"] for d in dead] == ["delivery_failed"]
    assert Alert.from_json(dead[0]["raw"]).change_index == 30
    # the other sink still got it
    assert Alert.from_json((tmp_path / "alerts.jsonl").read_text()).change_index == 30

"""`ratiowatch validate` / `ratiowatch run`: shipped configs are valid, errors name the key, the demo
config runs with no server, and SIGTERM gives a clean exit 0 after a checkpoint."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ratiowatch.stream.commands.cli import main

REPO = Path(__file__).resolve().parents[3]
CONFIGS = sorted((REPO / "configs").glob("*.toml"))


@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_shipped_configs_validate(path, capsys):
    assert main(["validate", str(path)]) == 0
    assert capsys.readouterr().out.strip().endswith(": ok")


def test_shipped_configs_include_demo_kafka_multikey_anomalies():
    assert {p.name for p in CONFIGS} >= {"demo.toml", "kafka.toml", "multikey.toml", "anomalies.toml"}


def test_validate_reports_the_offending_key(tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text('[source]\ntype = "kafka"\ntopics = ["t"]\n')
    assert main(["validate", str(bad)]) == 1
    assert "source.bootstrap_servers: required" in capsys.readouterr().err


def test_validate_builds_the_detector_as_run_does_and_reports_its_errors(tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text('[source]\ntype = "stdin"\n[detector]\nkind = "anomaly"\noptions = { debounce = -1 }\n')
    assert main(["validate", "--schema-only", str(bad)]) == 0  # the schema alone does not know the ranges
    capsys.readouterr()
    for extra in ([], ["--check-detector"]):
        assert main(["validate", *extra, str(bad)]) == 1
        assert "detector: debounce must be an integer >= 0" in capsys.readouterr().err


def test_validate_reports_a_bad_setting_of_the_routed_detectors_split_profile(tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text('[source]\ntype = "stdin"\n[detector.options]\nprofile = { grid = 0 }\n')
    assert main(["validate", str(bad)]) == 1
    assert "detector: grid must be an integer >= 1" in capsys.readouterr().err


def test_validate_says_a_directory_is_not_a_toml_file(tmp_path, capsys):
    assert main(["validate", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "is a directory, not a TOML file" in err and "does not exist" not in err


@pytest.mark.parametrize("detector, says", [
    ('options = { with_history = "yes" }', "detector.options.with_history: must be true or false; got the string 'yes'"),
    ('options = { profile = { min_window = "a" } }',
     "detector.options.profile.min_window: must be an integer; got the string 'a'"),
    ('options = { window = { n = 2.5 } }', "detector.options.window.n: must be an integer; got the number 2.5"),
    ('kind = "window"\noptions = { lam = true }', "detector.options.lam: must be a number; got true"),
    ('kind = "window"\noptions = { difference = 1 }',
     "detector.options.difference: must be true or false, or a string; got the number 1"),
    ('kind = "anomaly"\noptions = { repeats = 1 }', "detector.options.repeats: must be true or false; got the number 1"),
])
def test_a_detector_option_of_the_wrong_type_names_the_key_what_was_given_and_what_is_expected(
        tmp_path, capsys, detector, says):
    bad = tmp_path / "bad.toml"
    bad.write_text(f'[source]\ntype = "stdin"\n[detector]\n{detector}\n')
    for extra in ([], ["--schema-only"]):  # a schema error: no detector needs building to find it
        assert main(["validate", *extra, str(bad)]) == 1
        assert capsys.readouterr().err.strip() == f"{bad}: {says}"


def test_detector_options_of_the_right_type_pass(tmp_path, capsys):
    good = tmp_path / "good.toml"
    # an integer where a number is expected, either type where an option takes both
    good.write_text('[source]\ntype = "stdin"\n[detector]\noptions = { with_history = true, '
                    'window = { alpha = 0, difference = "auto" }, profile = { min_window = 40 } }\n')
    assert main(["validate", str(good)]) == 0, capsys.readouterr().err
    good.write_text('[source]\ntype = "stdin"\n[detector]\nkind = "window"\noptions = { difference = false }\n')
    assert main(["validate", str(good)]) == 0, capsys.readouterr().err


def test_validate_reference_prints_markdown(capsys):
    assert main(["validate", "--reference"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# ratiowatch daemon configuration reference") and "[[sinks]]" in out


def test_demo_config_runs_without_any_server(tmp_path, capsys):
    shutil.copytree(REPO / "configs", tmp_path / "configs", ignore=shutil.ignore_patterns("*-out"))
    assert main(["run", str(tmp_path / "configs" / "demo.toml")]) == 0
    out_dir = tmp_path / "configs" / "demo-out"
    alerts = [json.loads(x) for x in (out_dir / "alerts.jsonl").read_text().splitlines()]
    # the demo's truth: host-a changes at 200, host-c at 250, host-b never
    by_key = {k: [a["change_index"] for a in alerts if a["key"] == k] for k in ("host-a", "host-b", "host-c")}
    assert {a["key"] for a in alerts} <= set(by_key)
    assert by_key["host-b"] == [], by_key
    assert any(abs(c - 200) <= 25 for c in by_key["host-a"]), by_key
    assert any(abs(c - 250) <= 25 for c in by_key["host-c"]), by_key
    dead = [json.loads(x) for x in (out_dir / "dead_letter.jsonl").read_text().splitlines()]
    assert sorted(d["reason"] for d in dead) == ["missing_field", "non_finite"]
    stdout_alerts = [json.loads(x) for x in capsys.readouterr().out.splitlines() if x.startswith("{")]
    assert stdout_alerts == alerts


def test_anomalies_config_alerts_once_per_known_anomaly(tmp_path, capsys):
    """configs/anomalies.toml (kind = "anomaly"): each sensor's anomaly raises one alert inside it;
    rows of one event do not raise a second alert."""
    shutil.copytree(REPO / "configs", tmp_path / "configs", ignore=shutil.ignore_patterns("*-out"))
    assert main(["run", str(tmp_path / "configs" / "anomalies.toml")]) == 0
    alerts = [json.loads(x) for x in (tmp_path / "configs" / "anomalies-out" / "alerts.jsonl").read_text().splitlines()]
    assert {a["kind"] for a in alerts} == {"anomaly"} and {a["detector"] for a in alerts} == {"anomaly"}
    rows = {k: sorted(a["change_index"] for a in alerts if a["key"] == k) for k in ("sensor-1", "sensor-2")}
    assert [r for r in rows["sensor-1"] if 1200 <= r < 1208] == [1200], rows  # the burst, at its first row
    assert len([r for r in rows["sensor-2"] if 1000 <= r < 1048]) == 1, rows  # the stuck stretch, once
    assert all(a["change_index"] == a["alarm_index"] for a in alerts)
    for r in rows.values():
        assert all(b - a > 75 for a, b in zip(r, r[1:])), rows  # one alert per event (the debounce)
    quoted = (REPO / "README.md").read_text().split("ratiowatch run configs/anomalies.toml 2>/dev/null")[1]
    quoted_ids = [line.split('"alert_id": "')[1][:32] for line in quoted.split("```")[0].splitlines()
                  if line.startswith("{")]
    assert quoted_ids == [a["alert_id"] for a in alerts], "the README quotes this run's alerts"


def test_sigterm_finishes_flushes_checkpoints_and_exits_0(tmp_path):
    data = tmp_path / "in.jsonl"
    data.write_text("".join(json.dumps({"key": "a", "timestamp": t, "value": float(t % 7)}) + "\n"
                            for t in range(300)))
    cfg = tmp_path / "c.toml"
    cfg.write_text(f"""
[source]
type = "file"
path = "{data}"
follow = true
poll_interval_s = 0.05
[detector]
n = 10
[checkpoint]
dir = "state"
every_records = 100000
every_s = 1000
[[sinks]]
type = "jsonl"
path = "alerts.jsonl"
[metrics]
enabled = false
""")
    env = {**os.environ, "NUMBA_CACHE_DIR": str(REPO / ".numba_cache")}
    proc = subprocess.Popen([sys.executable, "-m", "ratiowatch.stream.commands.cli", "run", str(cfg)], cwd=tmp_path, env=env,
                            stderr=subprocess.PIPE, text=True)
    offsets = tmp_path / "state" / "offsets-in.jsonl.json"
    log_lines: list[str] = []
    deadline = time.monotonic() + 120
    started = False
    while time.monotonic() < deadline and not started:
        line = proc.stderr.readline()
        log_lines.append(line)
        started = '"daemon started"' in line
    assert started, "".join(log_lines)
    time.sleep(3.0)  # follow mode: the file is read, the daemon waits for more
    assert not offsets.exists()  # nothing committed yet: checkpoints are far apart
    proc.send_signal(signal.SIGTERM)
    _, rest = proc.communicate(timeout=60)
    assert proc.returncode == 0, rest
    assert json.loads(offsets.read_text()) == {"file:in.jsonl": 300}
    stopped = [json.loads(x) for x in rest.splitlines() if '"daemon stopped"' in x]
    assert stopped and stopped[0]["records"] == 300
    assert len(list((tmp_path / "state").glob("*.ckpt.npz"))) == 1


def test_shipped_config_reference_is_up_to_date():
    from ratiowatch.stream.engine.config import config_reference_markdown

    shipped = (REPO / "configs" / "REFERENCE.md").read_text()
    assert shipped == config_reference_markdown() + "\n", \
        "regenerate: ratiowatch validate --reference > configs/REFERENCE.md"

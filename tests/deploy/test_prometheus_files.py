"""deploy/prometheus: the scrape config and alert rules, checked by promtool and against the daemon.

promtool comes with Debian's ``prometheus`` package (``.ci/run`` installs it); without it the
promtool tests skip and say so. The checks against the daemon's metric registry need no tool.
"""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from deploy_helpers import DEPLOY, exported_metric_names, load_yaml, promql_metric_names

PROM_DIR = DEPLOY / "prometheus"


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.skip("promtool not found (Debian/Ubuntu: apt-get install prometheus)")
    return path


def run_promtool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([promtool(), *args], cwd=PROM_DIR, capture_output=True, text=True, timeout=60)


def registry_names() -> set[str]:
    from ratiowatch.connectors.metrics import Metrics

    return exported_metric_names(Metrics().exposition().decode())


def test_promtool_accepts_the_scrape_config_and_the_rule_file_it_names():
    res = run_promtool("check", "config", "prometheus.yml")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "SUCCESS: 1 rule files found" in res.stdout + res.stderr


def test_promtool_accepts_the_alert_rules():
    res = run_promtool("check", "rules", "rules.yml")
    assert res.returncode == 0, res.stdout + res.stderr
    n_rules = sum(len(g["rules"]) for g in load_yaml(PROM_DIR / "rules.yml")["groups"])
    assert f"SUCCESS: {n_rules} rules found" in res.stdout + res.stderr


def test_alert_rule_unit_tests_pass_under_promtool():
    res = run_promtool("test", "rules", "rules_test.yml")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "SUCCESS" in res.stdout + res.stderr


def test_every_alert_has_a_unit_test_that_sees_it_fire():
    rules = load_yaml(PROM_DIR / "rules.yml")
    tests = load_yaml(PROM_DIR / "rules_test.yml")
    alerts = {r["alert"] for g in rules["groups"] for r in g["rules"]}
    fired = {case["alertname"] for t in tests["tests"] for case in t.get("alert_rule_test", [])
             if case.get("exp_alerts")}
    assert alerts == fired, f"alerts without a firing unit test: {sorted(alerts - fired)}"


def test_a_broken_expectation_makes_promtool_test_rules_fail(tmp_path):
    # The unit tests can fail: the same file with one expected value changed must be rejected.
    shutil.copy(PROM_DIR / "rules.yml", tmp_path / "rules.yml")
    text = (PROM_DIR / "rules_test.yml").read_text()
    assert "emits 20.0 alerts/min" in text
    (tmp_path / "rules_test.yml").write_text(text.replace("emits 20.0 alerts/min", "emits 19.0 alerts/min"))
    res = subprocess.run([promtool(), "test", "rules", "rules_test.yml"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=60)
    assert res.returncode != 0
    assert "RatiowatchAlertStorm" in res.stdout + res.stderr


def test_rules_cover_the_operational_failure_modes():
    rules = [r for g in load_yaml(PROM_DIR / "rules.yml")["groups"] for r in g["rules"]]
    by_metric: dict[str, list[str]] = {}
    for r in rules:
        for name in promql_metric_names(r["expr"]):
            by_metric.setdefault(name, []).append(r["alert"])
        assert r["labels"]["severity"] in ("warning", "critical"), r["alert"]
        assert r["annotations"]["summary"] and r["annotations"]["description"], r["alert"]
        assert re.fullmatch(r"\d+[smh]", r["for"]), f"{r['alert']}: every alert needs a `for` duration"
    # no data / alert storm / consumer lag / bad-record rate / checkpoint age (+ target down)
    assert "up" in by_metric
    assert "ratiowatch_records_total" in by_metric
    assert "ratiowatch_alerts_total" in by_metric
    assert "ratiowatch_consumer_lag" in by_metric
    assert "ratiowatch_bad_records_total" in by_metric
    assert "ratiowatch_checkpoint_age_seconds" in by_metric


def test_rules_only_use_metrics_the_daemon_exports():
    exported = registry_names() | {"up"}  # `up` is written by Prometheus itself
    for g in load_yaml(PROM_DIR / "rules.yml")["groups"]:
        for r in g["rules"]:
            unknown = promql_metric_names(r["expr"]) - exported
            assert not unknown, f"{r['alert']} uses metrics the daemon does not export: {sorted(unknown)}"
            assert 'job="ratiowatch"' in r["expr"], f"{r['alert']}: select job=\"ratiowatch\" like the scrape config"


def test_scrape_config_has_the_ratiowatch_job_on_the_default_metrics_port():
    cfg = load_yaml(PROM_DIR / "prometheus.yml")
    jobs = {j["job_name"]: j for j in cfg["scrape_configs"]}
    job = jobs["ratiowatch"]
    assert job.get("metrics_path", "/metrics") == "/metrics"
    targets = [t for sc in job["static_configs"] for t in sc["targets"]]
    assert targets == ["127.0.0.1:9108"]  # the daemon's default bind address and port
    assert cfg["rule_files"] == ["rules.yml"]


def test_promtool_lints_the_daemons_metric_exposition_clean():
    from ratiowatch.connectors.metrics import Metrics

    m = Metrics(score_keys=["host-a"])
    # every family with at least one sample, so the linter sees every name and label set
    m.records.inc(10)
    m.alerts.labels(kind="change").inc()
    m.bad_records.labels(reason="malformed_json").inc()
    m.latency.observe(0.02)
    m.active_keys.set(3)
    m.set_lag({"metrics-0": 5})
    m.checkpoint_age.set(1.5)
    m.checkpoints.inc()
    m.set_score("host-a", 0.3)
    res = subprocess.run([promtool(), "check", "metrics"], input=m.exposition(), capture_output=True, timeout=60)
    assert res.returncode == 0 and not res.stdout.strip() and not res.stderr.strip(), res.stdout + res.stderr

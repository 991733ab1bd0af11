"""A real Prometheus server scrapes a real daemon with the shipped scrape config and alert rules.

``ratiowatch run`` follows a JSONL file (metrics on a free loopback port); Prometheus runs with a
config derived from ``deploy/prometheus/prometheus.yml`` (same job, target rewritten to the
daemon's port, 1 s scrape/evaluation interval, the shipped ``rules.yml``) on its own free loopback
port and a TSDB in tmp_path. Everything is asserted through Prometheus' HTTP API: the daemon's
counters arrive with exact values, appended lines (and bad ones) show up, the alert rules load
and evaluate cleanly, and every Grafana query runs.

Skips only when the ``prometheus`` binary is missing (Debian: ``apt-get install prometheus``).
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from deploy_helpers import (DEPLOY, REPO, dashboard, dashboard_exprs, exported_metric_names, grafana_to_promql,
                            load_yaml, promql_metric_names)

KEYS = ("host-a", "host-b")
N_FIRST = 150   # records per key written before the daemon starts
N_MORE = 40     # records per key appended while it runs


def records(start: int, n: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    lines = []
    for t in range(start, start + n):
        for j, key in enumerate(KEYS):
            lines.append(json.dumps({"host": key, "ts": 1_700_000_000 + t, "cpu": round(float(rng.normal(j, 1.0)), 4)}))
    return lines


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url: str, timeout: float = 5.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def wait_for(pred, timeout_s: float, what: str, diag=lambda: ""):
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        try:
            last = pred()
        except (OSError, ValueError) as exc:  # not listening yet / not parseable yet
            last = exc
        else:
            if last:
                return last
        time.sleep(0.25)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}; last: {last!r}\n{diag()}")


def stop(proc: subprocess.Popen, timeout_s: float = 30.0) -> int | None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
            return None
    return proc.returncode


class PromAPI:
    def __init__(self, port: int):
        self.base = f"http://127.0.0.1:{port}"

    def get(self, path: str, **params) -> dict:
        url = f"{self.base}{path}?{urllib.parse.urlencode(params, doseq=True)}"
        code, body = http_get(url)
        out = json.loads(body)
        out["_http"] = code
        return out

    def query(self, expr: str) -> dict:
        return self.get("/api/v1/query", query=expr)

    def vector(self, expr: str) -> list[dict]:
        res = self.query(expr)
        assert res["status"] == "success", f"{expr}: {res}"
        return res["data"]["result"]

    def value(self, expr: str) -> float | None:
        v = self.vector(expr)
        return float(v[0]["value"][1]) if len(v) == 1 else None


def derived_prometheus_config(metrics_port: int) -> dict:
    """deploy/prometheus/prometheus.yml with the target moved to the test daemon, fast intervals."""
    shipped = load_yaml(DEPLOY / "prometheus" / "prometheus.yml")
    (job,) = [j for j in shipped["scrape_configs"] if j["job_name"] == "ratiowatch"]
    job = copy.deepcopy(job)
    job["scrape_interval"] = "1s"
    job["scrape_timeout"] = "1s"
    for sc in job["static_configs"]:
        sc["targets"] = [f"127.0.0.1:{metrics_port}"]
    return {
        "global": {**shipped.get("global", {}), "scrape_interval": "1s", "evaluation_interval": "1s"},
        # the shipped rules, by absolute path (relative paths resolve against the config's dir)
        "rule_files": [str((DEPLOY / "prometheus" / f).resolve()) for f in shipped["rule_files"]],
        # no alertmanager here: the shipped `alerting` section is left out
        "scrape_configs": [job],
    }


@pytest.fixture
def prometheus_bin() -> str:
    path = shutil.which("prometheus")
    if path is None:
        pytest.skip("prometheus server not found (Debian/Ubuntu: apt-get install prometheus)")
    return path


@pytest.fixture
def daemon(tmp_path):
    """`ratiowatch run` on a followed JSONL file; yields (proc, metrics port, data file, stderr path)."""
    data = tmp_path / "data.jsonl"
    data.write_text("\n".join(records(0, N_FIRST, seed=1)) + "\n")
    cfg = tmp_path / "ratiowatch.toml"
    cfg.write_text(f"""
[source]
type = "file"
path = "data.jsonl"
follow = true
poll_interval_s = 0.05

[fields]
key = "host"
timestamp = "ts"
values = ["cpu"]

[detector]
n = 20
seed = 0

[checkpoint]
dir = "state"
every_s = 1.0

[[sinks]]
type = "jsonl"
path = "alerts.jsonl"

[dead_letter]
type = "file"
path = "dead_letter.jsonl"

[metrics]
host = "127.0.0.1"
port = 0
score_keys = ["host-a"]
""")
    err = tmp_path / "daemon.stderr"
    script = Path(sys.executable).parent / "ratiowatch"
    cmd = [str(script)] if script.exists() else [sys.executable, "-m", "ratiowatch.stream.commands.cli"]
    env = {**os.environ, "NUMBA_CACHE_DIR": os.environ.get("NUMBA_CACHE_DIR", str(REPO / ".numba_cache"))}
    with open(err, "wb") as err_fh:
        proc = subprocess.Popen([*cmd, "run", str(cfg)], cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=err_fh,
                                env=env)
    try:
        def metrics_port():
            if proc.poll() is not None:
                raise AssertionError(f"daemon exited with {proc.returncode}:\n{err.read_text()}")
            for line in err.read_text().splitlines():
                if line.startswith("{") and json.loads(line).get("msg") == "metrics serving":
                    return json.loads(line)["port"]
            return None

        port = wait_for(metrics_port, 60, "the daemon's 'metrics serving' log line", err.read_text)
        yield proc, port, data, err
    finally:
        stop(proc)


def test_prometheus_scrapes_the_daemon_with_the_shipped_config_and_rules(daemon, prometheus_bin, tmp_path):
    proc, metrics_port, data, daemon_err = daemon
    metrics_url = f"http://127.0.0.1:{metrics_port}"
    assert http_get(f"{metrics_url}/healthz")[0] == 200
    wait_for(lambda: http_get(f"{metrics_url}/readyz")[0] == 200, 30, "/readyz == 200 (a running file source is ready)")

    prom_cfg = tmp_path / "prometheus.yml"
    prom_cfg.write_text(json.dumps(derived_prometheus_config(metrics_port), indent=2))  # JSON is YAML
    promtool = shutil.which("promtool")
    if promtool:
        check = subprocess.run([promtool, "check", "config", str(prom_cfg)], capture_output=True, text=True, timeout=60)
        assert check.returncode == 0, check.stdout + check.stderr

    prom_port = free_port()
    prom_log = tmp_path / "prometheus.log"
    with open(prom_log, "wb") as log_fh:
        prom = subprocess.Popen([prometheus_bin, f"--config.file={prom_cfg}",
                                 f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                                 f"--web.listen-address=127.0.0.1:{prom_port}"],
                                stdout=log_fh, stderr=subprocess.STDOUT, cwd=tmp_path)
    api = PromAPI(prom_port)

    def diag() -> str:
        return (f"--- prometheus log (tail) ---\n{prom_log.read_text()[-3000:]}\n"
                f"--- daemon stderr (tail) ---\n{daemon_err.read_text()[-2000:]}")

    try:
        wait_for(lambda: prom.poll() is None and http_get(f"{api.base}/-/ready")[0] == 200, 30,
                 "Prometheus to become ready", diag)

        # 1. the daemon's counter, scraped with the job and labels of the shipped config
        n_first = N_FIRST * len(KEYS)
        # 120 s: with a cold numba cache the first batch compiles the kernels (~30 s here)
        wait_for(lambda: api.value("ratiowatch_records_total") == n_first, 120,
                 f"ratiowatch_records_total == {n_first} in Prometheus", diag)
        (sample,) = api.vector("ratiowatch_records_total")
        assert sample["metric"] == {"__name__": "ratiowatch_records_total", "job": "ratiowatch",
                                    "instance": f"127.0.0.1:{metrics_port}", "service": "ratiowatch"}
        assert api.value('up{job="ratiowatch"}') == 1.0

        # 2. live: appended lines (two of them bad) reach the detectors and Prometheus
        with open(data, "a") as fh:
            fh.write("\n".join(records(N_FIRST, N_MORE, seed=2)) + "\n")
            fh.write('{"host": "host-a", "ts": 1700009999, "cpu": "high"}\n')   # not numeric
            fh.write("this is not json\n")
        n_all = n_first + N_MORE * len(KEYS)
        wait_for(lambda: api.value("ratiowatch_records_total") == n_all
                 and api.value("sum(ratiowatch_bad_records_total)") == 2, 60,
                 f"records_total == {n_all} and 2 bad records in Prometheus", diag)
        reasons = {s["metric"]["reason"] for s in api.vector("ratiowatch_bad_records_total")}
        assert reasons == {"not_numeric", "malformed_json"}
        assert api.value('ratiowatch_active_keys') == len(KEYS)
        assert {s["metric"]["key"] for s in api.vector("ratiowatch_latest_score")} == {"host-a"}  # allow-list only

        # 3. the shipped alert rules loaded and evaluate without errors against real data
        shipped = {r["alert"] for g in load_yaml(DEPLOY / "prometheus" / "rules.yml")["groups"] for r in g["rules"]}

        def evaluated_rules():
            groups = api.get("/api/v1/rules")["data"]["groups"]
            rules = [r for g in groups for r in g["rules"]]
            return rules if rules and all(r["lastEvaluation"][:4] != "0001" for r in rules) else None

        rules = wait_for(evaluated_rules, 30, "every alert rule to be evaluated", diag)
        assert {r["name"] for r in rules} == shipped
        bad_health = {r["name"]: r.get("lastError") for r in rules if r["health"] != "ok"}
        assert not bad_health, bad_health
        firing = api.vector('ALERTS{alertstate="firing"}')
        assert firing == [], f"a healthy daemon should not fire alerts: {firing}"

        # 4. every Grafana query is valid PromQL and returns data whenever its metrics have samples
        code, body = http_get(f"{metrics_url}/metrics")
        assert code == 200
        exposition = body.decode()
        if promtool:  # the live exposition passes Prometheus' own linter too
            lint = subprocess.run([promtool, "check", "metrics"], input=body, capture_output=True, timeout=60)
            assert lint.returncode == 0, lint.stdout + lint.stderr
        live_exported = exported_metric_names(exposition)  # families, with or without samples yet
        live_samples = exported_metric_names("\n".join(
            line for line in exposition.splitlines() if not line.startswith("#")))
        time.sleep(2)  # two more scrapes, so 1m rates have points on both sides of the appended data
        for title, expr in dashboard_exprs(dashboard()):
            unknown = promql_metric_names(expr) - live_exported
            assert not unknown, f"Grafana panel {title!r} queries metrics the daemon does not serve: {unknown}"
            res = api.query(grafana_to_promql(expr))
            assert res["status"] == "success", f"Grafana panel {title!r}: {res.get('error')} in {expr}"
            if promql_metric_names(expr) <= live_samples:
                assert res["data"]["result"], f"Grafana panel {title!r} shows nothing: {expr}"
        for var in dashboard()["templating"]["list"]:
            if var["type"] != "query":
                continue
            selector, label = var["definition"][len("label_values("):-1].rsplit(",", 1)
            values = api.get(f"/api/v1/label/{label.strip()}/values",
                             **{"match[]": grafana_to_promql(selector)})["data"]
            expected = {"instance": [f"127.0.0.1:{metrics_port}"], "key": ["host-a"]}[var["name"]]
            assert values == expected, f"Grafana variable {var['name']}: {values}"
    finally:
        stop(prom)

    # a clean SIGTERM shutdown after all this
    assert stop(proc) == 0, daemon_err.read_text()[-2000:]

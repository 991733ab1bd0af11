"""Alert delivery off the processing loop: one bounded queue and one thread per sink.

The loop hands each batch's alerts to every sink's :class:`SinkWorker` with :meth:`SinkWorker.put`,
which returns a ticket (1, 2, 3, ... per worker) and never waits, except when that worker's queue
is full: then it blocks until there is room (backpressure: the loop stops reading, nothing is
dropped). The worker thread delivers, flushes (fsync, broker acknowledgements) and only then
marks the tickets acknowledged. A checkpoint remembers each worker's last ticket when it is taken,
and its state is written and its offsets committed only once every worker has acknowledged up to
there (:meth:`SinkWorker.wait`): a record's offset is committed only after its alerts reached
every sink or the dead-letter sink.

Two failure policies, as before the queues:

- a sink with ``dead_letter_on_failure`` (webhook) gives up on an item after its own bounded
  retries; the item goes to the dead-letter worker, and the sink's ticket is acknowledged once the
  dead-letter sink has acknowledged it. A :class:`CircuitBreaker` stops calling an endpoint that
  keeps failing: after ``failures`` failed deliveries in a row it opens, items go straight to the
  dead-letter sink, and after ``reset_s`` one item is tried as a probe; its success closes the
  breaker, its failure keeps it open for another ``reset_s``;
- the other sinks (files, Kafka) and the dead-letter sink itself fail only when their backend is
  down: the worker retries with backoff until it is back. Its queue fills and the loop waits.
  An ``OSError`` such a sink raises from ``deliver`` or ``flush`` (a full disk, a lost
  connection) counts as the failure of the whole batch and is retried the same way, except a
  ``BrokenPipeError`` (the reader of a pipe is gone and cannot come back). Any other exception is
  a bug, which no retry mends: it ends the worker, and the loop stops without committing (the
  records are read again once it is fixed) rather than wait on a retry that cannot succeed.
  A ``dead_letter_on_failure`` sink that raises on an item dead-letters that item, with the
  exception as its reason.

Examples
--------
>>> import io
>>> from ratiowatch.connectors.records import Alert
>>> from ratiowatch.connectors.sinks import StreamSink
>>> out = io.StringIO()
>>> w = SinkWorker(StreamSink(out))
>>> a = Alert.from_alarm(key="k", detector="d", change_index=1, alarm_index=2, timestamp=0.0,
...                      score=1.0, threshold=0.5)
>>> ticket = w.put([a])
>>> w.wait(ticket, timeout_s=10), Alert.from_json(out.getvalue()) == a
(True, True)
>>> w.close()   # True: everything queued was acknowledged
True
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from typing import Any, Callable

from ratiowatch.connectors.records import BadRecord

log = logging.getLogger("ratiowatch.delivery")


class CircuitBreaker:
    """Closed -> open after ``failures`` consecutive failures -> one probe after ``reset_s``.

    Used by one worker thread only (no locking).

    >>> t = [0.0]
    >>> cb = CircuitBreaker(failures=2, reset_s=10.0, clock=lambda: t[0])
    >>> cb.allow(); cb.record(False); cb.allow(); cb.record(False)
    True
    True
    >>> cb.state, cb.allow()
    ('open', False)
    >>> t[0] = 10.0
    >>> cb.allow(), cb.state          # the probe
    (True, 'half_open')
    >>> cb.record(True); cb.state
    'closed'
    """

    def __init__(self, failures: int = 5, reset_s: float = 30.0, clock: Callable[[], float] = time.monotonic):
        if failures < 1:
            raise ValueError(f"failures must be >= 1; got {failures}")
        self.failures = failures
        self.reset_s = reset_s
        self._clock = clock
        self.state = "closed"
        self._streak = 0
        self._opened_at = 0.0
        self.opened = 0  # times the breaker opened (telemetry)

    def allow(self) -> bool:
        """May the next item be tried? (In the open state, True once per ``reset_s``: the probe.)"""
        if self.state == "closed":
            return True
        if self.state == "open" and self._clock() - self._opened_at >= self.reset_s:
            self.state = "half_open"
            return True
        return False

    def record(self, ok: bool) -> None:
        if ok:
            self.state = "closed"
            self._streak = 0
            return
        self._streak += 1
        if self.state == "half_open" or self._streak >= self.failures:
            if self.state != "open":
                self.opened += 1
            self.state = "open"
            self._opened_at = self._clock()


#: items a worker's queue holds before :meth:`SinkWorker.put` blocks (backpressure): dead letters
#: keep at most ~4 KB of their record each, so the bound keeps a stalled sink's queue within ~200 MB
MAX_QUEUED_ITEMS = 50_000


class SinkWorker:
    """A sink behind a bounded queue and its own thread.

    Parameters
    ----------
    sink : Sink
        ``deliver(items) -> failures``, ``flush() -> failures``, ``close()``, ``name``.
    dead_letter : SinkWorker, optional
        Where the items go that a ``dead_letter_on_failure`` sink gave up on.
    maxsize : int
        Batches the queue holds before :meth:`put` blocks.
    max_items : int
        Items the queue holds (those being delivered included) before :meth:`put` blocks: the
        bound on memory, whatever the batches' sizes (a batch larger than the bound is taken
        alone, when nothing else waits).
    breaker : CircuitBreaker, optional
        For ``dead_letter_on_failure`` sinks; a default one is made when omitted.
    on_dead_letter : callable, optional
        Called with the BadRecords this worker sends to the dead-letter sink (metrics).
    """

    def __init__(self, sink: Any, *, dead_letter: "SinkWorker | None" = None, maxsize: int = 1000,
                 max_items: int = MAX_QUEUED_ITEMS, breaker: CircuitBreaker | None = None,
                 on_dead_letter: Callable[[list[BadRecord]], None] | None = None):
        self.sink = sink
        self.name = getattr(sink, "name", type(sink).__name__)
        self.dead_letter = dead_letter
        self.dead_letter_on_failure = bool(getattr(sink, "dead_letter_on_failure", False))
        if self.dead_letter_on_failure and dead_letter is None:
            raise ValueError(f"sink {self.name} gives up on items and needs a dead-letter worker")
        self.breaker = breaker if breaker is not None else (CircuitBreaker() if self.dead_letter_on_failure else None)
        self.on_dead_letter = on_dead_letter
        self._q: queue.Queue[tuple[int, list[Any], Callable[[], None] | None] | None] = queue.Queue(maxsize=maxsize)
        self._lock = threading.Lock()
        self._cond = threading.Condition()
        self._issued = 0
        self.max_items = int(max_items)
        self._queued = 0                  # items put and not yet handled (under _cond)
        self.acked = 0
        self.failing: str | None = None   # the reason while the backend is failing (retries going on)
        self.error: BaseException | None = None
        self._stop = threading.Event()    # give up retrying (shutdown)
        self._thread = threading.Thread(target=self._run, name=f"sink-{self.name}", daemon=True)
        self._thread.start()

    # --- the loop's side --------------------------------------------------------------------
    @property
    def issued(self) -> int:
        """The last ticket handed out."""
        return self._issued

    def put(self, items: list[Any], should_stop: Callable[[], bool] | None = None,
            on_ack: Callable[[], None] | None = None) -> int:
        """Queue ``items`` for delivery; returns their ticket. Blocks while the queue is full.

        ``on_ack`` is called once, on the worker's thread, right after the ticket is acknowledged
        (the daemon's batch latency is observed there); never if the worker fails first.
        Raises RuntimeError if the worker has failed, or if ``should_stop()`` turns True while
        waiting for room (the caller then stops without committing).
        """
        with self._lock:  # tickets in queue order, whichever thread puts
            self._raise_if_failed()
            self._issued += 1
            ticket = self._issued
            while True:
                try:
                    self._wait_for_room(len(items))
                    with self._cond:  # counted before the worker can take them
                        self._queued += len(items)
                    try:
                        self._q.put((ticket, items, on_ack), timeout=0.2)
                    except queue.Full:
                        with self._cond:
                            self._queued -= len(items)
                        raise
                    return ticket
                except queue.Full:
                    stop = should_stop is not None and should_stop()
                    if stop or self.error is not None:
                        self._issued -= 1  # never queued (the lock kept other tickets out meanwhile)
                    self._raise_if_failed()
                    if stop:
                        raise RuntimeError(f"sink {self.name} is not keeping up ({self.failing or 'slow'}); "
                                           "stopping without committing") from None

    def _wait_for_room(self, n: int) -> None:
        """Wait (0.2 s at most; ``queue.Full`` after it) until ``n`` more items fit :attr:`max_items`."""
        with self._cond:
            if self._queued > 0 and self._queued + n > self.max_items:
                self._cond.wait(0.2)
                if self._queued > 0 and self._queued + n > self.max_items:
                    raise queue.Full

    def wait(self, ticket: int, timeout_s: float | None = None) -> bool:
        """Block until ``ticket`` is acknowledged (True) or ``timeout_s`` passed (False)."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._cond:
            while self.acked < ticket:
                self._raise_if_failed()
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cond.wait(0.2 if left is None else min(left, 0.2))
        return True

    def close(self, timeout_s: float = 30.0) -> bool:
        """Deliver what is queued (at most ``timeout_s``), stop the thread, close the sink; True if
        everything queued was acknowledged."""
        done = self.wait(self._issued, timeout_s) if self.error is None else False
        self._stop.set()
        try:
            self._q.put_nowait(None)
        except queue.Full:
            pass
        self._thread.join(timeout_s)
        try:
            self.sink.close()
        except Exception as exc:  # noqa: BLE001 - closing must not hide the real error
            log.warning("closing a sink failed", extra={"sink": self.name, "error": str(exc)})
        return done

    def _raise_if_failed(self) -> None:
        if self.error is not None:
            raise RuntimeError(f"sink {self.name} failed: {self.error}") from self.error

    # --- the worker thread ------------------------------------------------------------------
    def _run(self) -> None:
        try:
            while True:
                entry = self._q.get()
                if entry is None:
                    return
                last, items, on_ack = entry
                batch = list(items)
                acks = [on_ack] if on_ack is not None else []
                while len(batch) < 5000:  # what queued up meanwhile goes out with one flush
                    try:
                        nxt = self._q.get_nowait()
                    except queue.Empty:
                        break
                    if nxt is None:
                        self._q.put(None)
                        break
                    last = nxt[0]
                    batch.extend(nxt[1])
                    if nxt[2] is not None:
                        acks.append(nxt[2])
                self._handle(batch)
                with self._cond:
                    self.acked = last
                    self._queued -= len(batch)
                    self._cond.notify_all()
                for fn in acks:
                    try:
                        fn()
                    except Exception:  # noqa: BLE001 - a caller's bookkeeping must not stop the deliveries
                        log.exception("acknowledgement callback failed", extra={"sink": self.name})
        except BaseException as exc:  # noqa: BLE001 - handed to the loop by put / wait
            self.error = exc
            with self._cond:
                self._cond.notify_all()

    def _handle(self, items: list[Any]) -> None:
        if self.dead_letter_on_failure:
            self._deliver_or_dead_letter(items)
        else:
            self._deliver_until_done(items)

    def _attempt(self, items: list[Any]) -> list[tuple[Any, str]]:
        """Deliver and flush ``items``; an OSError the sink raised (its backend: a disk, a socket)
        fails the whole batch, to be retried like the failures the sink returns."""
        try:
            failures = self.sink.deliver(items) if items else []
            failures += self.sink.flush()
        except BrokenPipeError:  # the reader of a pipe is gone for good: no retry can deliver
            raise
        except OSError as exc:
            log.warning("sink raised", extra={"sink": self.name, "error": f"{type(exc).__name__}: {exc}"})
            return [(it, f"{type(exc).__name__}: {exc}") for it in items]
        return failures

    def _deliver_until_done(self, items: list[Any]) -> None:
        failures = self._attempt(items)
        delay = 0.2
        while failures:
            self.failing = failures[0][1]
            log.warning("sink failing; retrying", extra={"sink": self.name, "items": len(failures),
                                                          "reason": self.failing, "retry_in_s": delay})
            if self._stop.wait(delay):
                raise RuntimeError(f"sink {self.name} is failing ({self.failing}); stopped before it recovered")
            delay = min(2 * delay, 5.0)
            failures = self._attempt([it for it, _ in failures])
        self.failing = None

    def _deliver_or_dead_letter(self, items: list[Any]) -> None:
        assert self.breaker is not None and self.dead_letter is not None
        dead: list[BadRecord] = []
        breaker = self.breaker
        for it in items:
            if not breaker.allow():
                dead.append(_dead(it, f"sink {self.name}: circuit open after repeated failures; not tried"))
                continue
            try:
                failures = self.sink.deliver([it])
                failures += self.sink.flush()
            except Exception as exc:  # noqa: BLE001 - this item's failure: dead-lettered with the reason
                log.warning("sink raised", extra={"sink": self.name, "error": f"{type(exc).__name__}: {exc}"})
                failures = [(it, f"sink {self.name}: {type(exc).__name__}: {exc}")]
            breaker.record(not failures)
            if failures:
                if breaker.state == "open":
                    log.warning("sink circuit open", extra={"sink": self.name, "reason": failures[0][1],
                                                            "probe_in_s": breaker.reset_s})
                dead.append(_dead(it, failures[0][1]))
        if dead:
            if self.on_dead_letter is not None:
                self.on_dead_letter(dead)
            ticket = self.dead_letter.put(dead, self._stop.is_set)
            while not self.dead_letter.wait(ticket, 1.0):
                if self._stop.is_set():
                    raise RuntimeError(f"dead-letter sink did not acknowledge the items {self.name} gave up on")


def _dead(item: Any, reason: str) -> BadRecord:
    return BadRecord("delivery_failed", reason, item.to_json(), None, getattr(item, "key", None))

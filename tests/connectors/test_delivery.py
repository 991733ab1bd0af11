"""Sink delivery threads: bounded queues with backpressure, acknowledgement tickets, circuit breaker."""

from __future__ import annotations

import threading
import time

import pytest
from fake_sinks import ListSink

from ratiowatch.connectors.delivery import CircuitBreaker, SinkWorker
from ratiowatch.connectors.records import Alert
from ratiowatch.connectors.sinks import WebhookSink


def alert(i: int) -> Alert:
    return Alert.from_alarm(key=f"k{i}", detector="d", change_index=i, alarm_index=i + 5, timestamp=float(i),
                            score=2.0, threshold=1.0)


def test_tickets_are_acknowledged_after_delivery_and_flush():
    sink = ListSink()
    w = SinkWorker(sink)
    tickets = [w.put([alert(i)]) for i in range(5)]
    assert tickets == [1, 2, 3, 4, 5]
    assert w.wait(5, timeout_s=10) and w.acked == 5
    assert sink.items == [alert(i) for i in range(5)] and sink.flushes >= 1
    w.close()


def test_a_full_queue_blocks_the_producer_and_drops_nothing():
    gate = threading.Event()
    sink = ListSink(gate=gate)
    w = SinkWorker(sink, maxsize=1)
    w.put([alert(0)])            # taken by the thread, which waits at the gate
    time.sleep(0.2)
    w.put([alert(1)])            # fills the queue
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match="not keeping up"):
        w.put([alert(2)], should_stop=lambda: time.monotonic() - t0 > 0.5)  # blocked until given up
    assert time.monotonic() - t0 >= 0.5
    gate.set()
    assert w.wait(2, timeout_s=10)
    assert sink.items == [alert(0), alert(1)]
    w.close()


def test_the_queue_is_bounded_in_items_whatever_the_batch_sizes():
    # bounded in batches only, a stalled sink held 1,000 batches of up to 2,000 records each
    gate = threading.Event()
    sink = ListSink(gate=gate)
    w = SinkWorker(sink, maxsize=1000, max_items=10)
    w.put([alert(i) for i in range(6)])      # taken by the thread, which waits at the gate
    w.put([alert(i) for i in range(6, 10)])  # 10 items in hand: the bound
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match="not keeping up"):
        w.put([alert(10)], should_stop=lambda: time.monotonic() - t0 > 0.5)
    gate.set()
    assert w.wait(2, timeout_s=10)
    w.put([alert(i) for i in range(10, 30)])  # larger than the bound: taken alone once the rest is out
    assert w.wait(3, timeout_s=10) and sink.items == [alert(i) for i in range(30)]
    w.close()


def test_circuit_breaker_sends_alerts_to_the_dead_letter_sink_until_a_probe_succeeds(http_server):
    http_server["code"] = 500
    dead = ListSink("dead")
    dlw = SinkWorker(dead)
    w = SinkWorker(WebhookSink(http_server["url"], retries=0, backoff_s=0.0), dead_letter=dlw,
                   breaker=CircuitBreaker(failures=2, reset_s=0.5))
    t = w.put([alert(i) for i in range(5)])
    assert w.wait(t, timeout_s=20)
    assert http_server["hits"] == 2                     # the breaker opened after two failures
    assert [d.reason for d in dead.items] == ["delivery_failed"] * 5
    assert sum("circuit open" in d.detail for d in dead.items) == 3
    assert dlw.acked == dlw.issued                      # acknowledged only once dead-lettered
    http_server["code"] = 200
    time.sleep(0.6)
    t = w.put([alert(10), alert(11)])                   # the first is the probe; it succeeds
    assert w.wait(t, timeout_s=20)
    assert [b["change_index"] for b in http_server["bodies"]] == [10, 11] and w.breaker.state == "closed"
    w.close()
    dlw.close()


def test_a_failed_probe_keeps_the_circuit_open():
    t = [0.0]
    cb = CircuitBreaker(failures=1, reset_s=5.0, clock=lambda: t[0])
    cb.record(False)
    assert cb.state == "open" and not cb.allow()
    t[0] = 5.0
    assert cb.allow() and not cb.allow()   # one probe at a time
    cb.record(False)
    assert cb.state == "open" and not cb.allow()
    t[0] = 10.0
    assert cb.allow()


def test_on_ack_is_called_once_per_put_after_its_items_are_acknowledged():
    gate = threading.Event()
    sink = ListSink(gate=gate)
    w = SinkWorker(sink)
    calls = []
    tickets = [w.put([alert(i)], on_ack=lambda i=i: calls.append((i, w.acked, list(sink.items)))) for i in range(3)]
    w.put([alert(3)])  # no callback
    time.sleep(0.2)
    assert calls == []  # held at the gate: nothing acknowledged yet
    gate.set()
    assert w.wait(4, timeout_s=10)
    deadline = time.monotonic() + 10
    while len(calls) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert [i for i, _, _ in calls] == [0, 1, 2]
    for i, acked, delivered in calls:  # each after its ticket was acknowledged, so after its delivery
        assert acked >= tickets[i] and alert(i) in delivered
    w.close()
    assert len(calls) == 3


class RaisingSink(ListSink):
    """Raises ``exc`` from deliver ``times`` times, then delivers."""

    def __init__(self, exc: BaseException, times: int = 10**9, name: str = "raising"):
        super().__init__(name)
        self.exc = exc
        self.times = times
        self.calls = 0

    def deliver(self, items):
        self.calls += 1
        if self.calls <= self.times:
            raise self.exc
        return super().deliver(items)


def test_an_oserror_from_a_sink_is_a_failure_of_the_batch_retried_but_a_programming_error_stops_the_worker():
    sink = RaisingSink(OSError(28, "No space left on device"), times=2)
    w = SinkWorker(sink)
    t = w.put([alert(0), alert(1)])
    assert w.wait(t, timeout_s=10)   # retried after 0.2 s, 0.4 s
    assert sink.items == [alert(0), alert(1)] and sink.calls == 3 and w.error is None and w.failing is None
    assert w.close()
    # a bug, which no retry mends: the worker ends and the loop is told (it stops without committing)
    w = SinkWorker(RaisingSink(TypeError("a bug")))
    t = w.put([alert(0)])
    with pytest.raises(RuntimeError, match="sink raising failed: a bug"):
        w.wait(t, timeout_s=10)
    with pytest.raises(RuntimeError, match="a bug"):
        w.put([alert(1)])
    w.close(timeout_s=1)


def test_an_item_a_dead_lettering_sink_raises_on_goes_to_the_dead_letter_sink_with_the_reason():
    class Raising(RaisingSink):
        dead_letter_on_failure = True

    dead = ListSink("dead")
    dlw = SinkWorker(dead)
    sink = Raising(ValueError("Invalid header value"), times=1)
    w = SinkWorker(sink, dead_letter=dlw)
    t = w.put([alert(0), alert(1)])
    assert w.wait(t, timeout_s=10) and w.error is None
    assert sink.items == [alert(1)]
    assert [(d.reason, Alert.from_json(d.raw)) for d in dead.items] == [("delivery_failed", alert(0))]
    assert "ValueError: Invalid header value" in dead.items[0].detail
    w.close()
    dlw.close()

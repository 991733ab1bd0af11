"""A sink for tests: keeps what it is given, optionally waiting on a gate before each delivery."""

from __future__ import annotations

import threading


class ListSink:
    def __init__(self, name: str = "list", gate: threading.Event | None = None):
        self.name = name
        self.items: list = []
        self.gate = gate
        self.flushes = 0

    def deliver(self, items):
        if self.gate is not None:
            assert self.gate.wait(20)
        self.items += items
        return []

    def flush(self):
        self.flushes += 1
        return []

    def close(self):
        pass

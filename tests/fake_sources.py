"""Sources for tests: finite, in memory, recording the positions the daemon commits."""

from __future__ import annotations


class ListSource:
    """Hands out ``records`` ``batch`` at a time; ``on_poll(i)`` runs before each poll (``i``: the
    records handed out so far)."""

    def __init__(self, records, batch=10):
        self.records = records
        self.batch = batch
        self.i = 0
        self.exhausted = False
        self.commits: list[dict[str, int]] = []
        self.on_poll = None

    def poll(self, max_records, timeout_s):
        if self.on_poll is not None:
            self.on_poll(self.i)
        out = self.records[self.i:self.i + min(self.batch, max_records)]
        self.i += len(out)
        self.exhausted = self.i >= len(self.records)
        return out

    def commit(self, positions):
        self.commits.append(dict(positions))

    def close(self):
        pass


class BatchSource(ListSource):
    """Hands out the given batches one per poll; ``on_poll(i)`` runs before batch ``i`` is handed out."""

    def __init__(self, batches):
        super().__init__([])
        self.batches = batches

    def poll(self, max_records, timeout_s):
        if self.on_poll is not None:
            self.on_poll(self.i)
        out = self.batches[self.i] if self.i < len(self.batches) else []
        self.i += 1
        self.exhausted = self.i >= len(self.batches)
        return out

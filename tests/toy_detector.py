"""A tiny deterministic detector for pipeline/daemon tests (not the product's detector).

Alarm when the mean of the last ``w`` values differs from the mean of the ``w`` before by more than
``thr``; the change index is the first sample of the recent window; after an alarm the detector
waits ``2 w`` samples. State is arrays + scalars, so it checkpoints like the real one.
"""

from __future__ import annotations

import numpy as np

from ratiowatch.stream.engine.pipeline import AlarmEvent


class MeanShift:
    def __init__(self, w: int = 5, thr: float = 9.0):
        self.w, self.thr = w, thr
        self.buf = np.zeros(2 * w)
        self.n = 0
        self.cool = 0
        self.latest_score = 0.0

    def update_batch(self, values: np.ndarray) -> list[AlarmEvent]:
        out = []
        w = self.w
        for i, v in enumerate(values[:, 0]):
            self.buf = np.roll(self.buf, -1)
            self.buf[-1] = v
            self.n += 1
            if self.cool:
                self.cool -= 1
            if self.n < 2 * w:
                continue
            self.latest_score = float(abs(self.buf[w:].mean() - self.buf[:w].mean()))
            if self.latest_score > self.thr and not self.cool:
                out.append(AlarmEvent(i, self.n - w, self.n - 1, self.latest_score, self.thr))
                self.cool = 2 * w
        return out

    def to_state(self):
        return {"w": self.w, "thr": self.thr, "buf": self.buf.copy(), "n": self.n, "cool": self.cool,
                "latest_score": self.latest_score}

    @classmethod
    def from_state(cls, d):
        det = cls(int(d["w"]), float(d["thr"]))
        det.buf = np.array(d["buf"], dtype=float)
        det.n, det.cool, det.latest_score = int(d["n"]), int(d["cool"]), float(d["latest_score"])
        return det


class MeanShiftFactory:
    name = "meanshift"

    def __init__(self, w: int = 5, thr: float = 9.0):
        self.w, self.thr = w, thr
        self.created = 0
        self.restored = 0

    def create(self, key, dim):
        self.created += 1
        return MeanShift(self.w, self.thr)

    def restore(self, state):
        self.restored += 1
        return MeanShift.from_state(state)


def step_series(n: int, change_at: int, low: float = 0.0, high: float = 10.0) -> list[float]:
    return [low if t < change_at else high for t in range(n)]

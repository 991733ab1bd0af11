"""Causal peak picking: from (score, threshold) pairs to one :class:`Alarm` per run.

    A *run* is a maximal stretch of steps above the threshold. Its peak is the step with the largest
    score. The alarm is issued when the run ends or ``delay`` steps after the
    current peak, whichever comes first; later steps of the same run raise no second alarm. The
    alarm carries the estimated change index (the window boundary at the peak, not the alarm time),
    the alarm index and the delay between them. An alarm whose change index is less than
    ``min_spacing`` after the previous alarm's (or at or before it: a boundary that moved back
    when the windows grew) is dropped (one event, one alarm). "Above" means by
    more than rounding (:func:`exceeds`).

Examples
--------
>>> picker = PeakPicker(delay=2, min_spacing=5)
>>> out = [picker.update(t, s, 1.0, boundary=t - 3) for t, s in enumerate([0, 2, 3, 2, 0.5, 0])]
>>> [a for a in out if a is not None]
[Alarm(change_index=-1, alarm_index=4, score=3.0, threshold=1.0)]
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass


from .thresholds import exceeds


@dataclass(frozen=True)
class Alarm:
    """One detected change.

    ``change_index`` is the estimated first index of the new segment (window boundary at the peak
    score); ``alarm_index`` is the sample index at which the alarm was raised (causal);
    ``score`` and ``threshold`` are the peak score and the threshold in force at the peak.
    """

    change_index: int
    alarm_index: int
    score: float
    threshold: float

    @property
    def delay(self) -> int:
        """Samples between the estimated change and the alarm."""
        return self.alarm_index - self.change_index

    def to_dict(self) -> dict:
        d = asdict(self)
        d["delay"] = self.delay
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Alarm":
        """The alarm :meth:`to_dict` wrote (its derived ``delay`` is recomputed, not read)."""
        return cls(**{k: v for k, v in d.items() if k != "delay"})

class PeakPicker:
    """Causal run / peak logic turning (score, threshold) pairs into :class:`Alarm` s.

    Parameters
    ----------
    delay : int
        An alarm is raised at most ``delay`` steps after the peak of its run (earlier if the run
        ends first).
    min_spacing : int
        An alarm's change index must be at least this far after the previous alarm's (one
        whose index is not after it is dropped too).
    merge_gap : int
        A run continues across dips below the threshold shorter than this many steps (1, the
        default: the first step below ends it). For scores that fluctuate on a known time scale
        (the offline replay of a periodic series passes one period): a dip on the rising edge of a
        change would otherwise close the run early, raise a weak alarm at the wrong place, and the
        minimum spacing would then suppress the real peak.
    """

    def __init__(self, delay: int, min_spacing: int, merge_gap: int = 1):
        if int(delay) < 0 or int(min_spacing) < 0:
            raise ValueError(f"delay and min_spacing must be >= 0; got {delay}, {min_spacing}")
        if int(merge_gap) < 1:
            raise ValueError(f"merge_gap must be >= 1 (1 = a run ends at its first step below threshold); got {merge_gap}")
        self.delay, self.min_spacing, self.merge_gap = int(delay), int(min_spacing), int(merge_gap)
        self._below = 0  # consecutive steps below threshold inside the current run
        self._in_run = False
        self._spent = False  # this run already raised its alarm
        self._peak = (-math.inf, 0, 0.0, 0.0, 0)  # (ratio, t, score, threshold, boundary)
        self._last_change = None

    def update(self, t: int, score: float, threshold: float, boundary: int) -> Alarm | None:
        """Feed step ``t``; ``boundary`` is the change index this step's windows would imply."""
        above = exceeds(score, threshold)
        if above:
            self._below = 0
            # the peak is located on the score itself: the per-window threshold rises while a change
            # enters the windows, so score / threshold would peak early
            ratio = float(score)
            if not self._in_run:
                self._in_run, self._spent = True, False
                self._peak = (-math.inf, t, score, threshold, boundary)
            if ratio > self._peak[0] and not self._spent:
                self._peak = (ratio, t, float(score), float(threshold), int(boundary))
            if not self._spent and t - self._peak[1] >= self.delay:
                return self._emit(t)
            return None
        if self._in_run:
            self._below += 1
            if self._below >= self.merge_gap:
                self._in_run = False
                if not self._spent:
                    return self._emit(t)
            elif not self._spent and t - self._peak[1] >= self.delay:
                return self._emit(t)
        return None

    def flush(self, t: int) -> Alarm | None:
        """End of input: close an open run (used by offline replay)."""
        if self._in_run and not self._spent:
            self._in_run = False
            return self._emit(t)
        return None

    def _emit(self, t: int) -> Alarm | None:
        self._spent = True
        _, _, score, thr, boundary = self._peak
        if self._last_change is not None and boundary - self._last_change < self.min_spacing:
            return None
        self._last_change = boundary
        return Alarm(change_index=int(boundary), alarm_index=int(t), score=score, threshold=thr)

    def to_state(self) -> dict:
        return {"delay": self.delay, "min_spacing": self.min_spacing, "merge_gap": self.merge_gap,
                "below": self._below, "in_run": self._in_run,
                "spent": self._spent, "peak": [float(v) for v in self._peak],
                "last_change": -1 if self._last_change is None else int(self._last_change),
                "has_last": self._last_change is not None}

    @classmethod
    def from_state(cls, state: dict) -> "PeakPicker":
        # states written before merge_gap existed ended runs at the first step below threshold
        obj = cls(int(state["delay"]), int(state["min_spacing"]), int(state.get("merge_gap", 1)))
        obj._below = int(state.get("below", 0))
        obj._in_run, obj._spent = bool(state["in_run"]), bool(state["spent"])
        r, t, s, thr, b = (float(v) for v in state["peak"])
        obj._peak = (r, int(t), s, thr, int(b))
        obj._last_change = int(state["last_change"]) if bool(state["has_last"]) else None
        return obj

"""The streaming detector on a finite series: causal alarms, their change and alarm indices.

``ratiowatch eval ... --streaming`` scores the daemon's ``kind = "window"``, a
:class:`~ratiowatch.stream.detectors.changepoint.ChangePointDetector` with its defaults, and
``--auto`` its default ``kind = "auto"``, a
:class:`~ratiowatch.stream.detectors.routed.PeriodRoutedDetector`; each is fed one
sample at a time through the river drift-detector API (``update(x)`` then ``drift_detected``),
never told the series' length and never flushed at its end. Each alarm contributes its *change
index* (``last_alarm.change_index``: where the detector places the change) to the change points
that are scored, and its *alarm index* (the sample at which it was raised) to the delay
``alarm_index - change_index``.

Examples
--------
>>> class EveryHundred:  # a stand-in with the river API: alarms at 99, 199, ..., change 10 before
...     def __init__(self):
...         self.t, self.drift_detected, self.last_alarm = -1, False, None
...     def update(self, x):
...         self.t += 1
...         self.drift_detected = self.t % 100 == 99
...         if self.drift_detected:
...             self.last_alarm = type("A", (), {"change_index": self.t - 10})()
>>> stream_alarms(EveryHundred(), np.zeros(250))
[(89, 99), (189, 199)]
>>> streaming_result(EveryHundred(), np.zeros(250))["delay_mean"]
10.0
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


def default_factory(seed: int = 0, **options) -> Callable[[], object]:
    """A factory of the streaming ``ChangePointDetector``: its defaults (the daemon's ``kind = "window"``),
    or ``options`` (e.g. ``level_view=True``)."""
    from ratiowatch.stream.detectors.changepoint import ChangePointDetector

    return lambda: ChangePointDetector(seed=seed, **options)


def profile_factory(seed: int = 0, **options) -> Callable[[], object]:
    """A factory of the streaming ``SplitProfileDetector``: its defaults, or ``options`` (e.g.
    ``cycle_permutation=True``)."""
    from ratiowatch.stream.detectors.segmenter import SplitProfileDetector

    return lambda: SplitProfileDetector(seed=seed, **options)


def routed_factory(seed: int = 0, **options) -> Callable[[], object]:
    """A factory of the streaming ``PeriodRoutedDetector`` (the daemon's ``kind = "auto"``)."""
    from ratiowatch.stream.detectors.routed import PeriodRoutedDetector

    return lambda: PeriodRoutedDetector(seed=seed, **options)


def stream_alarms(detector, x) -> list[tuple[int, int]]:
    """Feed ``x`` (shape (T,) or (T, m); NaN = missing) one sample at a time; ``[(change, alarm), ...]``.

    The change index is ``detector.last_alarm.change_index`` when the detector provides one, else
    the alarm index itself.
    """
    x = np.asarray(x, dtype=np.float64)
    if x.ndim == 2 and x.shape[1] == 1:
        x = x[:, 0]
    rows = x.tolist() if x.ndim == 1 else list(x)  # floats are the detector's fastest input
    out = []
    for t, v in enumerate(rows):
        detector.update(v)
        if detector.drift_detected:
            ci = getattr(getattr(detector, "last_alarm", None), "change_index", None)
            out.append((int(t if ci is None else ci), t))
    return out


def streaming_result(detector, x) -> dict:
    """Alarms of ``detector`` on ``x`` as a result row: ``change_points`` (change indices clipped to
    ``[1, T - 1]``, distinct, sorted), ``alarms`` (``[change, alarm]`` pairs) and ``delay_mean``."""
    t_len = int(np.asarray(x).shape[0])
    alarms = stream_alarms(detector, x)
    cps = sorted({min(max(c, 1), t_len - 1) for c, _ in alarms}) if t_len > 1 else []
    delays = [a - c for c, a in alarms]
    return {"change_points": cps, "alarms": [list(a) for a in alarms],
            "delay_mean": round(float(np.mean(delays)), 2) if delays else None}

"""The streaming detector on a finite series, as `eval ... --streaming` scores it."""

import numpy as np

from ratiowatch.stream.evaluate.streaming import default_factory, stream_alarms, streaming_result


class Scripted:
    def __init__(self, alarms):
        self.alarms, self.t, self.drift_detected, self.last_alarm = dict(alarms), -1, False, None

    def update(self, x):
        self.t += 1
        self.drift_detected = self.t in self.alarms
        if self.drift_detected:
            ci = self.alarms[self.t]
            self.last_alarm = None if ci is None else type("A", (), {"change_index": ci})()


def test_change_and_alarm_indices_and_clipping():
    det = Scripted({3: -5, 40: 30, 45: None, 49: 60})
    assert stream_alarms(det, np.zeros((50, 1))) == [(-5, 3), (30, 40), (45, 45), (60, 49)]
    r = streaming_result(Scripted({3: -5, 40: 30, 45: None, 49: 60}), np.zeros(50))
    # change indices clipped to [1, T - 1]; the delay is the detector's own (alarm - change)
    assert r["change_points"] == [1, 30, 45, 49]
    assert r["delay_mean"] == np.mean([8, 10, 0, -11]) and len(r["alarms"]) == 4
    assert streaming_result(Scripted({}), np.zeros(10)) == {"change_points": [], "alarms": [], "delay_mean": None}


def test_multivariate_rows_reach_the_detector_as_vectors():
    seen = []

    class Spy(Scripted):
        def update(self, x):
            seen.append(np.asarray(x).shape)
            super().update(x)

    stream_alarms(Spy({}), np.zeros((5, 2)))
    stream_alarms(Spy({}), np.zeros(3))
    assert seen == [(2,)] * 5 + [()] * 3


def test_the_daemons_detector_finds_a_large_shift_causally():
    rng = np.random.default_rng(0)
    x = np.r_[rng.normal(0, 1, 600), rng.normal(6, 1, 600)]
    r = streaming_result(default_factory(0)(), x)
    hits = [(c, a) for c, a in r["alarms"] if abs(c - 600) <= 100]
    assert hits and all(a >= 600 for _, a in hits)  # raised after the change, never before

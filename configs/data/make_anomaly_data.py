"""Regenerate ``anomalies.jsonl``: two sensors with a daily cycle, one known anomaly each.

Run from anywhere: ``python configs/data/make_anomaly_data.py``. Deterministic (seed 0).
Both: a cycle of 96 readings (15-minute readings of a day) plus noise, 1,500 readings.
sensor-1: a burst of +3 over 8 readings at t = 1200; sensor-2: stuck at one value for 48
readings from t = 1000 (a frozen sensor repeats its last reading).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

N = 1500
PERIOD = 96


def main() -> None:
    rng = np.random.default_rng(0)
    t = np.arange(N)
    cycle = 20.0 + 2.0 * np.sin(2 * np.pi * t / PERIOD)
    one = np.round(cycle + 0.2 * rng.normal(size=N), 3)
    one[1200:1208] += 3.0
    two = np.round(cycle + 0.2 * rng.normal(size=N), 3)
    two[1000:1048] = two[999]
    out = Path(__file__).resolve().parent / "anomalies.jsonl"
    with open(out, "w") as fh:
        for i in range(N):
            for key, x in (("sensor-1", one), ("sensor-2", two)):
                fh.write(json.dumps({"sensor": key, "ts": 1_700_000_000 + 900 * i,
                                     "temp": round(float(x[i]), 3)}) + "\n")


if __name__ == "__main__":
    main()

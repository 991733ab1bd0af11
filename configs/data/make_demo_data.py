"""Regenerate ``demo.jsonl``: three hosts, one known change each (variance or level+variance).

Run from anywhere: ``python configs/data/make_demo_data.py``. Deterministic (seed 0).
host-a: std 1 -> 3 at t=200; host-b: no change; host-c: mean 0 -> 2, std 1 -> 2 at t=250.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

N = 400


def main() -> None:
    rng = np.random.default_rng(0)
    series = {
        "host-a": np.r_[rng.normal(0, 1, 200), rng.normal(0, 3, N - 200)],
        "host-b": rng.normal(5, 1, N),
        "host-c": np.r_[rng.normal(0, 1, 250), rng.normal(2, 2, N - 250)],
    }
    out = Path(__file__).resolve().parent / "demo.jsonl"
    with open(out, "w") as fh:
        for t in range(N):
            for key, x in series.items():
                fh.write(json.dumps({"host": key, "ts": 1_700_000_000 + t, "cpu": round(float(x[t]), 4)}) + "\n")
        # two bad records, to show the dead-letter sink
        fh.write('{"host": "host-a", "ts": 1700000400, "cpu": NaN}\n')
        fh.write('{"host": "host-b", "cpu": 1.0}\n')


if __name__ == "__main__":
    main()

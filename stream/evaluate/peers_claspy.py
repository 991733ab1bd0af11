"""claspy 0.2.8 change points, run inside its own virtual environment (``make peers``).

This file is executed by the peers environment's interpreter as a subprocess; it imports only
numpy and claspy (never the project, whose pins claspy's dependencies conflict with). It reads a
JSON request from stdin and writes one JSON line per series to stdout:

request ``{"method": "binseg" | "class", "series": [{"name": str, "path": "<file>.npy"}, ...],
"warmup": int (optional: first run the method on that many N(0, 1) values, untimed, so that claspy's
numba kernels are compiled)}``; each ``.npy`` holds a float64 array of shape (T,) (or (T, d) for ``binseg``) (read with
``allow_pickle=False``).

* ``binseg``: ``claspy.segmentation.BinaryClaSPSegmentation()`` with its defaults (offline, one core; the
  number of segments is learned), ``fit_predict(x)``;
* ``class``: ``claspy.streaming.segmentation.StreamingClaSPSegmentation`` (ClaSS, Ermshaus,
  Schaefer and Leser 2024) with its defaults except ``n_timepoints = min(T, 10000)`` (the sliding
  window cannot exceed the series) and ``log_cps=True``; every sample goes through ``update`` and
  the sample index at which each change point appeared is its alarm index.

Output line: ``{"name", "method", "change_points", "alarm_index" (class only), "seconds",
"error" (None or the exception text)}``, and for ``class`` once its warm-up is over
``stream_points``, ``stream_seconds`` and ``stream_points_per_s`` (the samples after the warm-up).
"""

from __future__ import annotations

import json
import sys
import time


def _binseg(x, rate=None):
    from claspy.segmentation import BinaryClaSPSegmentation

    cps = BinaryClaSPSegmentation(n_jobs=1).fit_predict(x)  # one core; results do not depend on it
    return sorted(int(c) for c in cps), None


def _class(x, rate=None):
    from claspy.streaming.segmentation import StreamingClaSPSegmentation

    seg = StreamingClaSPSegmentation(n_timepoints=min(len(x), 10_000), log_cps=True)
    alarms = []
    seen = 0
    t_warm = None
    for t, v in enumerate(x):
        seg.update(float(v))
        if t_warm is None and t + 1 >= seg.n_warmup:  # the warm-up ends here (it replays its buffer)
            t_warm = (t + 1, time.perf_counter())
        if len(seg.change_points) > seen:
            alarms += [t] * (len(seg.change_points) - seen)
            seen = len(seg.change_points)
    if rate is not None and t_warm is not None and len(x) > t_warm[0]:
        rate["stream_points"] = len(x) - t_warm[0]
        rate["stream_seconds"] = round(time.perf_counter() - t_warm[1], 3)
        rate["stream_points_per_s"] = round(rate["stream_points"] / max(rate["stream_seconds"], 1e-9), 1)
    return [int(c) for c in seg.change_points], alarms


def main() -> int:
    import numpy as np

    req = json.load(sys.stdin)
    method = req["method"]
    run = {"binseg": _binseg, "class": _class}[method]
    if req.get("warmup"):  # compile claspy's numba kernels outside any timing
        run(np.random.default_rng(0).normal(size=int(req["warmup"])))
    for item in req["series"]:
        x = np.load(item["path"], allow_pickle=False).astype(np.float64)
        rate: dict = {}
        t0 = time.perf_counter()
        try:
            cps, alarms = run(x, rate)
            err = None
        except Exception as exc:  # reported per series; the benchmark rule scores a failure 0
            cps, alarms, err = [], None, f"{type(exc).__name__}: {exc}"
        out = {"name": item["name"], "method": method, "change_points": cps, "alarm_index": alarms,
               "seconds": round(time.perf_counter() - t0, 3), "length": int(len(x)), "error": err, **rate}
        print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

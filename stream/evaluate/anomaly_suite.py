"""Synthetic suite for anomaly scores: how often a score threshold is crossed on anomaly-free series
of many kinds, and how often injected anomalies cross it.

The anomaly detector (:class:`~ratiowatch.stream.detectors.anomaly.TimeSeriesAnomalyDetector`) maps
its raw score to ``s = min(1, -log10(p) / 10)``, with ``p`` a tail probability against the series'
own score history. If ``p`` were calibrated, one threshold would mean the same on every series: a
score of at least ``s`` would occur at most ``10^(-10 s)`` of the time on anomaly-free data, and
the threshold that suits one corpus would suit the next. NAB's leave-one-category-out protocol
(docs/evaluation.md) measures exactly that transfer on real data; this suite measures it where the
truth is known.

Null part (no anomaly anywhere; every row at or above a threshold is a false flag): the change-point
null suite's kinds (:data:`~ratiowatch.stream.evaluate.synthetic.NULL_KINDS`) and ``switching100``,
a level that switches between 0 and 1 twice per jittered cycle of 100 rows (high for 40 % of each
cycle) plus N(0, 0.05^2) noise: an on/off schedule, such as business hours, whose switches are rare
and sharp (:data:`KINDS`; the stress kinds, ``kinds=STRESS_KINDS`` or ``--suite stress``, are
outside the target), at :data:`LENGTHS`. For each threshold of :data:`THRESHOLDS` it reports the
flags per 10,000 rows of the detector's output (what a user thresholds) beside the nominal rate
``10^4 x 10^(-10 s)`` of the map. Target (docs/evaluation.md): at most
:data:`TARGET_FLAGS` flag per 10,000 rows at the score :data:`TARGET_SCORE` (a nominal tail of
1e-5) on every kind, the change-point detector's false-alarm specification.

Anomaly part (:data:`ANOMALY_KINDS` injected into :data:`BASE_KINDS`: four bases without a cycle
and three with one, a noisy, a smooth and a switching cycle, where an anomaly sits in the context
of the cycle;
one anomaly per series of
:data:`ANOMALY_LENGTH` rows, at row :data:`ANOMALY_ROW`; the size is in units of the series' local
scale ``1.4826 MAD(diff x) / sqrt(2)``, the innovation sd of white noise):

* ``spike``: one value moved up by 6 local sd;
* ``glitch``: 10 values moved up by 4 local sd;
* ``flatline``: 30 values held at the value before them (a stuck sensor);
* ``burst``: 30 values with added N(0, (3 local sd)^2) noise.

An anomaly counts as found at a threshold when a row from its start to :data:`FOUND_WITHIN` rows
after its end scores at least that much. Read the counts per base (``by_base``): a change that
helps the bases without a cycle can hide a loss on the cycles in the total (docs/experiments.md,
N14).

Every series is a deterministic function of ``(kind, length, seed)`` (the change-point suites'
generators); nothing uses the global RNG.

Examples
--------
>>> case = anomaly_series("spike", "ar0", seed=0)
>>> case.start, case.end, case.x.shape
(2000, 2001, (3000,))
>>> base = anomaly_series("spike", "ar0", seed=0, size=0.0).x
>>> bool(case.x[2000] - base[2000] > 5.0) and bool(np.array_equal(np.delete(case.x, 2000), np.delete(base, 2000)))
True
>>> flags_per_10k(np.array([0.0, 0.6, 1.0, 0.2]), (0.5, 1.0))
[5000.0, 2500.0]
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from ratiowatch.stream.commands.interrupts import failure_reason
from ratiowatch.stream.evaluate.synthetic import (ANOMALY_ONLY_KINDS, NULL_KINDS, STRESS_KINDS, failures_line,
                                                  null_series, seeds_and_lengths)

#: score thresholds reported; nominal tail probabilities 1e-3, 1e-5, 1e-7 and <= 1e-10
THRESHOLDS: tuple[float, ...] = (0.3, 0.5, 0.7, 1.0)
#: the map's decades: a score s stands for a tail probability of 10^(-DECADES s)
DECADES = 10.0
LENGTHS: tuple[int, ...] = (2000, 10000)
TARGET_SCORE = 0.5
TARGET_FLAGS = 1.0
ANOMALY_KINDS: tuple[str, ...] = ("spike", "glitch", "flatline", "burst")
#: a kind of this suite beside the change-point null suite's: a level switching between two values
#: twice per cycle (module docstring; generated with the others by ``synthetic.null_series``)
SWITCHING = "switching100"
KINDS: tuple[str, ...] = NULL_KINDS + ANOMALY_ONLY_KINDS
BASE_KINDS: tuple[str, ...] = ("ar0", "ar05", "counts", "random_walk", "seasonal24", "smooth50", SWITCHING)
ANOMALY_LENGTH = 3000
ANOMALY_ROW = 2000
FOUND_WITHIN = 30
#: (rows, size in local sd) of each anomaly kind
_SHAPES = {"spike": (1, 6.0), "glitch": (10, 4.0), "flatline": (30, 0.0), "burst": (30, 3.0)}


def nominal_per_10k(score: float) -> float:
    """Rows per 10,000 at or above ``score`` if the map's tail probability were exact.

    Examples
    --------
    >>> nominal_per_10k(0.5)
    0.1
    """
    return round(1e4 * 10.0 ** (-DECADES * float(score)), 12)


def rows_at_or_above(scores: np.ndarray, thresholds: Sequence[float] = THRESHOLDS) -> list[int]:
    """Rows of ``scores`` at or above each threshold."""
    scores = np.asarray(scores, dtype=np.float64)
    return [int(np.count_nonzero(scores >= t)) for t in thresholds]


def flags_per_10k(scores: np.ndarray, thresholds: Sequence[float] = THRESHOLDS) -> list[float]:
    """Rows of ``scores`` at or above each threshold, per 10,000 rows."""
    scores = np.asarray(scores, dtype=np.float64)
    if scores.size == 0:
        raise ValueError("no scores to count")
    return [1e4 * c / scores.size for c in rows_at_or_above(scores, thresholds)]


#: an anomaly-free series of a kind of this suite (:data:`KINDS`, or a stress kind): the change-point
#: suites' own generator, which holds every kind
suite_series = null_series


def local_scale(x: np.ndarray) -> float:
    """``1.4826 MAD(diff x) / sqrt(2)``: the innovation sd of white noise, robust to the anomaly and
    to a trend or a random walk's level; 1 where the differences are mostly zero."""
    d = np.diff(np.asarray(x, dtype=np.float64))
    s = 1.4826 * float(np.median(np.abs(d - np.median(d)))) / np.sqrt(2.0)
    return s if s > 0 else 1.0


@dataclass(frozen=True)
class AnomalyCase:
    """A series with one injected anomaly on rows ``start`` to ``end - 1``."""

    kind: str
    base: str
    x: np.ndarray
    start: int
    end: int


def anomaly_series(kind: str, base: str, seed: int = 0, size: float | None = None) -> AnomalyCase:
    """The base kind's anomaly-free series of :data:`ANOMALY_LENGTH` rows with one anomaly of ``kind``
    at :data:`ANOMALY_ROW` (``size`` in local sd overrides the kind's; module docstring)."""
    if kind not in _SHAPES:
        raise ValueError(f"unknown anomaly kind {kind!r}; one of {ANOMALY_KINDS}")
    x = suite_series(base, ANOMALY_LENGTH, seed).copy()
    rows, default = _SHAPES[kind]
    amp = (default if size is None else float(size)) * local_scale(x)
    a, e = ANOMALY_ROW, ANOMALY_ROW + rows
    if kind in ("spike", "glitch"):
        x[a:e] += amp
    elif kind == "flatline":
        x[a:e] = x[a - 1]
    else:  # burst: its own generator, so the base series is the null suite's
        x[a:e] += amp * np.random.default_rng([int(seed), 7]).normal(size=rows)
    return AnomalyCase(kind, base, x, a, e)


def default_factory(seed: int = 0) -> Callable[[], object]:
    """A factory of the default :class:`~ratiowatch.stream.detectors.anomaly.TimeSeriesAnomalyDetector`."""
    from ratiowatch.stream.detectors.anomaly import TimeSeriesAnomalyDetector

    return lambda: TimeSeriesAnomalyDetector(seed=seed)


def params_factory(params: dict | None) -> Callable[[int], Callable[[], object]]:
    """``factory(seed)`` of :class:`~ratiowatch.stream.detectors.anomaly.TimeSeriesAnomalyDetector`
    with ``params`` (None: the default configuration); a bad parameter raises here, not per series."""
    from ratiowatch.stream.detectors.anomaly import TimeSeriesAnomalyDetector

    params = dict(params or {})
    TimeSeriesAnomalyDetector(**params)
    return lambda seed: (lambda: TimeSeriesAnomalyDetector(seed=seed, **params))


def _scores(factory: Callable[[int], Callable[[], object]], x: np.ndarray, seed: int) -> tuple[np.ndarray | None, str | None]:
    """A fresh detector's scores of ``x``, or None and the reason: a detector that fails, or returns
    anything but one finite score per row (NaN counts as no flag, so it would pass as a clean
    result), is reported in ``errors``."""
    try:
        sc = np.asarray(factory(seed)().score_series(x), dtype=np.float64)
    except Exception as exc:  # one failing series is reported, not hidden, and the suite goes on
        return None, failure_reason(exc)
    if sc.shape != (len(x),):
        got = f"{sc.shape[0]} scores" if sc.ndim == 1 else f"scores of shape {sc.shape}"
        return None, f"{got} for {len(x)} rows; a detector must return one score per row"
    bad = int(np.count_nonzero(~np.isfinite(sc)))
    if bad:
        return None, f"non-finite scores (NaN or infinity) on {bad} of {len(x)} rows"
    return sc, None


def score_anomaly_null(factory: Callable[[int], Callable[[], object]] = default_factory, seeds: int = 5,
                       lengths: Iterable[int] = LENGTHS, kinds: Iterable[str] = KINDS,
                       thresholds: Sequence[float] = THRESHOLDS) -> dict:
    """Flags per 10,000 rows at each threshold, per kind (all lengths pooled) and per kind and length.

    ``factory(seed)`` returns a detector factory; each series gets a fresh detector with the series'
    seed. ``within_target`` says whether every kind stays at or below :data:`TARGET_FLAGS` at
    :data:`TARGET_SCORE` (when that score is among ``thresholds``), and is False when any series
    failed: a failed series is left out of the rates (a kind of failures alone, of ``by_kind``) and
    listed in ``errors``, and a detector that fails is not within the target.
    """
    t0 = time.perf_counter()
    thresholds = tuple(float(t) for t in thresholds)
    counts: dict[str, dict[str, list[float]]] = {}
    errors = []
    for kind in kinds:
        for length in lengths:
            for s in range(int(seeds)):
                sc, err = _scores(factory, suite_series(kind, int(length), s), s)
                if err:
                    errors.append({"kind": kind, "length": int(length), "seed": s, "error": err})
                    continue
                cell = counts.setdefault(kind, {}).setdefault(str(int(length)), [0.0] * (len(thresholds) + 1))
                for i, c in enumerate(rows_at_or_above(sc, thresholds)):
                    cell[i] += c
                cell[-1] += sc.size

    def per_10k(c: list[float]) -> dict:
        return {str(t): round(1e4 * c[i] / c[-1], 3) for i, t in enumerate(thresholds)} | {"rows": int(c[-1])}

    by_kind = {k: per_10k([sum(v[i] for v in d.values()) for i in range(len(thresholds) + 1)])
               for k, d in counts.items()}
    worst = max((v.get(str(TARGET_SCORE), 0.0) for v in by_kind.values()), default=0.0)
    return {"suite": "anomaly_null", "seeds": int(seeds), "lengths": [int(v) for v in lengths],
            "thresholds": list(thresholds), "nominal_per_10k": {str(t): nominal_per_10k(t) for t in thresholds},
            "target": {"score": TARGET_SCORE, "flags_per_10k": TARGET_FLAGS},
            "cells": {k: {ln: per_10k(c) for ln, c in d.items()} for k, d in counts.items()},
            "by_kind": by_kind,
            "within_target": (worst <= TARGET_FLAGS and not errors) if TARGET_SCORE in thresholds else None,
            "seconds": round(time.perf_counter() - t0, 2), "errors": errors}


def score_anomaly_found(factory: Callable[[int], Callable[[], object]] = default_factory, seeds: int = 5,
                        kinds: Iterable[str] = ANOMALY_KINDS, bases: Iterable[str] = BASE_KINDS,
                        thresholds: Sequence[float] = THRESHOLDS) -> dict:
    """Share of injected anomalies found at each threshold, per anomaly kind x base kind."""
    t0 = time.perf_counter()
    thresholds = tuple(float(t) for t in thresholds)
    cells: dict[str, dict[str, dict]] = {}
    errors = []
    for kind in kinds:
        for base in bases:
            found = [0] * len(thresholds)
            peaks = []
            n = 0
            for s in range(int(seeds)):
                case = anomaly_series(kind, base, s)
                sc, err = _scores(factory, case.x, s)
                if err:
                    errors.append({"kind": kind, "base": base, "seed": s, "error": err})
                    continue
                peak = float(sc[case.start:case.end + FOUND_WITHIN].max())
                peaks.append(peak)
                found = [f + int(peak >= t) for f, t in zip(found, thresholds)]
                n += 1
            cells.setdefault(kind, {})[base] = {
                "series": n, "found": {str(t): f for t, f in zip(thresholds, found)},
                "median_peak": round(float(np.median(peaks)), 4) if peaks else None}
    bases = list(dict.fromkeys(b for d in cells.values() for b in d))
    by_base = {b: {"series": sum(d[b]["series"] for d in cells.values() if b in d)}
               | {str(t): sum(d[b]["found"][str(t)] for d in cells.values() if b in d) for t in thresholds}
               for b in bases}
    by_threshold = {str(t): sum(c[str(t)] for c in by_base.values()) for t in thresholds}
    total = sum(c["series"] for c in by_base.values())
    return {"suite": "anomaly_found", "seeds": int(seeds), "thresholds": list(thresholds),
            "within_rows": FOUND_WITHIN, "cells": cells, "by_base": by_base, "found": by_threshold, "anomalies": total,
            "seconds": round(time.perf_counter() - t0, 2), "errors": errors}


def format_null(res: dict) -> list[str]:
    """Kind x threshold table of flags per 10,000 rows, with the nominal rates, and a line on the series
    that failed (left out of the table)."""
    ths = res["thresholds"]
    above = TARGET_SCORE in ths and any(v[str(TARGET_SCORE)] > TARGET_FLAGS for v in res["by_kind"].values())
    mark = "  (* above the target)" if above else ""
    lines = [f"anomaly-free series ({res['seeds']} per kind and length, lengths {res['lengths']}): "
             f"rows at or above each score, per 10,000{mark}",
             f"{'kind':18s}" + "".join(f"{'>= ' + str(t):>10s}" for t in ths),
             f"{'nominal':18s}" + "".join(f"{res['nominal_per_10k'][str(t)]:>10.3g}" for t in ths)]
    for kind, v in res["by_kind"].items():
        star = "*" if TARGET_SCORE in ths and v[str(TARGET_SCORE)] > TARGET_FLAGS else " "
        lines.append(f"{kind:17s}{star}" + "".join(f"{v[str(t)]:>10.2f}" for t in ths))
    failed = failures_line(res.get("errors", []), lambda e: f"{e['kind']}/{e['length']} seed {e['seed']}")
    if failed and res["within_target"] is False:
        failed[0] += "; not within the target"
    return lines + failed


def format_found(res: dict) -> list[str]:
    """Anomaly kind x base kind table of anomalies found at each threshold, and a line on the series
    that failed (left out of the counts)."""
    ths = res["thresholds"]
    lines = [f"injected anomalies ({res['seeds']} series per cell): found within {res['within_rows']} rows "
             f"of their end, at scores " + " / ".join(f">= {t}" for t in ths)]
    for kind, d in res["cells"].items():
        for base, c in d.items():
            lines.append(f"{kind:9s} {base:12s}" + " / ".join(f"{c['found'][str(t)]:2d}" for t in ths)
                         + f"  of {c['series']} (median peak {c['median_peak']})")
    for base, c in res["by_base"].items():
        lines.append(f"{'all':9s} {base:12s}" + " / ".join(f"{c[str(t)]:2d}" for t in ths) + f"  of {c['series']}")
    lines.append("all: " + " / ".join(f"{res['found'][str(t)]}" for t in ths) + f" of {res['anomalies']}")
    return lines + failures_line(res.get("errors", []), lambda e: f"{e['kind']}/{e['base']} seed {e['seed']}")


def add_arguments(parser) -> None:
    parser.add_argument("--seeds", type=int, default=5, metavar="N",
                        help="series per kind and length (anomaly-free part) and per cell (anomaly part); default 5")
    parser.add_argument("--lengths", type=str, default=",".join(map(str, LENGTHS)),
                        help="comma-separated lengths of the anomaly-free series (default %(default)s)")
    parser.add_argument("--suite", choices=("null", "found", "both", "stress"), default="both",
                        help="anomaly-free series of the null suite's kinds, injected anomalies, both (default), "
                             "or anomaly-free series of the stress kinds (outside the target)")
    parser.add_argument("--params", default=None, metavar="JSON",
                        help="detector parameters instead of the default, e.g. '{\"readmit_after\": null}'")
    parser.add_argument("--json", action="store_true", help="print the full result as JSON")


def run(args) -> int:
    from ratiowatch.stream.evaluate.nab import parse_params

    lengths = seeds_and_lengths(args, "ratiowatch eval synthetic-anomaly")
    if lengths is None:
        return 2
    try:
        params = parse_params(getattr(args, "params", None))
        factory = params_factory(params)
    except (ValueError, TypeError) as exc:
        print(f"ratiowatch eval synthetic-anomaly: {exc}", file=sys.stderr)
        return 2
    out: dict = {"benchmark": "synthetic-anomaly", "detector": "TimeSeriesAnomalyDetector",
                 "params": params or {}}
    lines: list[str] = []
    if args.suite in ("null", "both", "stress"):
        kinds = STRESS_KINDS if args.suite == "stress" else KINDS
        out["null"] = score_anomaly_null(factory, seeds=args.seeds, lengths=lengths, kinds=kinds)
        if args.suite == "stress":
            out["null"]["suite"] = "anomaly_stress"
        lines += format_null(out["null"]) + [""]
    if args.suite in ("found", "both"):
        out["found"] = score_anomaly_found(factory, seeds=args.seeds)
        lines += format_found(out["found"])
    if args.json:
        from ratiowatch.stream.evaluate.environment import environment

        out["environment"] = environment()
    from ratiowatch.stream.evaluate.jsonout import dumps as strict_json

    print(strict_json(out, indent=2) if args.json else "\n".join(lines))
    return 0

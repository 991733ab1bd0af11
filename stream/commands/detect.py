"""``ratiowatch detect FILE.csv``: change points of a CSV file by causal replay, optional plot.

The CSV needs a header row. By default every numeric column is used (a multivariate series),
except columns named like a time axis or index (``time``, ``timestamp``, ``date``, ``index``...);
``--column NAME`` (repeatable) selects columns. Empty cells, ``NA``, ``NaN`` and ``null`` are missing
values (carried forward, see :mod:`ratiowatch.stream.series.preprocess`); a column with any other non-numeric text is
not numeric and is skipped (or an error when selected). A progress bar goes to stderr for long files.

Examples
--------
>>> import tempfile, os
>>> path = os.path.join(tempfile.mkdtemp(), "x.csv")
>>> _ = open(path, "w").write("u,v\\n" + "".join(f"{i},{i % 2}\\n" for i in range(4)))
>>> names, x = read_csv(path)
>>> names, x.shape
(['u', 'v'], (4, 2))
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

import numpy as np

_MISSING = {"", "na", "nan", "null", "none"}


def _parse(cell: str) -> float | None:
    c = cell.strip()
    if c.lower() in _MISSING:
        return np.nan
    try:
        return float(c)
    except ValueError:
        return None


#: header names read as a time axis or row index, not as a series, unless selected with --column
TIME_AXIS_NAMES = frozenset({"time", "timestamp", "date", "datetime", "ts", "t", "index", "idx", "epoch"})


def read_csv(path, columns: list[str] | None = None) -> tuple[list[str], np.ndarray]:
    """(column names, T x m float array with NaN for missing) of the numeric columns of ``path``.

    Without ``columns``, columns named like a time axis or an index (:data:`TIME_AXIS_NAMES`) are
    left out: a ramp is not a series to watch, and as one more channel it hides real changes.
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path}: no such file")
    with path.open(newline="") as fh:
        reader = csv.reader(fh)
        try:
            header = [h.strip() for h in next(reader)]
        except StopIteration:
            raise ValueError(f"{path} is empty; expected a header row and data rows") from None
        rows = [r for r in reader if any(c.strip() for c in r)]
    if not rows:
        raise ValueError(f"{path} has a header but no data rows")
    if columns:
        missing = [c for c in columns if c not in header]
        if missing:
            raise ValueError(f"column(s) {missing} not in the header {header}")
        wanted = [header.index(c) for c in columns]
    else:
        wanted = [j for j, h in enumerate(header) if h.lower() not in TIME_AXIS_NAMES]
        skipped = [h for h in header if h.lower() in TIME_AXIS_NAMES]
        if skipped:
            print(f"ratiowatch detect: not using {skipped} (time axis or index; select with --column)",
                  file=sys.stderr)
    names, cols = [], []
    for j in wanted:
        vals = [_parse(r[j]) if j < len(r) else np.nan for r in rows]
        if any(v is None for v in vals):
            if columns:
                bad = next(r[j] for r, v in zip(rows, vals) if v is None)
                raise ValueError(f"column {header[j]!r} is not numeric (found {bad!r})")
            continue
        if all(np.isnan(v) for v in vals):
            continue
        names.append(header[j])
        cols.append(vals)
    if not cols:
        raise ValueError(f"{path}: no numeric column found; choose one with --column")
    return names, np.array(cols, dtype=np.float64).T


class _Progress:
    def __init__(self, stream=sys.stderr, width: int = 40):
        self.stream, self.width = stream, width

    def __call__(self, done: int, total: int) -> None:
        filled = int(self.width * done / max(total, 1))
        self.stream.write(f"\r[{'#' * filled}{'.' * (self.width - filled)}] {done}/{total}")
        if done >= total:
            self.stream.write("\n")
        self.stream.flush()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", type=Path, help="CSV file with a header row")
    parser.add_argument("--column", action="append", default=None, metavar="NAME",
                        help="column to use (repeatable; default: every numeric column)")
    parser.add_argument("--plot", type=Path, default=None, metavar="OUT.png", help="write a PNG plot")
    parser.add_argument("--json", action="store_true", help="print change points and alarms as JSON")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    parser.add_argument("--false-alarm-rate", type=float, default=None, metavar="RATE",
                        help="sensitivity: chance that a change-free series gets any change point "
                             "(the stop test's level; default 0.05; larger finds more, smaller fewer)")


def run(args) -> int:
    from ratiowatch.stream.detectors.offline import replay

    try:
        names, x = read_csv(args.file, args.column)
    except ValueError as exc:
        print(f"ratiowatch detect: {exc}", file=sys.stderr)
        return 2
    params = {}
    if args.false_alarm_rate is not None:
        if not 0.0 < args.false_alarm_rate < 1.0:
            print(f"ratiowatch detect: --false-alarm-rate must be in (0, 1), e.g. 0.05; got {args.false_alarm_rate}",
                  file=sys.stderr)
            return 2
        params["false_alarm_rate"] = args.false_alarm_rate
    progress = None if (args.no_progress or len(x) < 5000) else _Progress()
    rep = replay(x, progress=progress, **params)
    if args.plot is not None:
        from ratiowatch.stream.commands.plot import plot_detection

        plot_detection(args.plot, x, rep.scores, rep.thresholds, rep.change_points, (),
                       title=f"{args.file.name}: {', '.join(names)}", columns=names)
    if args.json:
        print(json.dumps({"file": str(args.file), "columns": names, "n_samples": int(len(x)),
                          "change_points": rep.change_points, "alarms": [a.to_dict() for a in rep.alarms],
                          "config": rep.config}, indent=2))
    else:
        print(f"{args.file}: {len(x)} samples, columns {names}")
        print("change points:", " ".join(str(c) for c in rep.change_points) or "(none)")
        if args.plot is not None:
            print(f"plot written to {args.plot}")
    return 0

"""``ratiowatch detect FILE``: change points of a table, optional plot.

By default the offline detector (:func:`ratiowatch.detect`) segments the whole file: it may look
ahead, and ``--false-alarm-rate`` is the chance that a change-free file gets any change point.
``--streaming`` replays a streaming detector instead, the one the daemon runs, causally, one row at
a time: each alarm is reported with the row where the detector places the change, the row at which
it was raised and the delay between them, and ``--false-alarm-rate`` is then alarms per row on
change-free data. ``--detector auto`` (default, the daemon's default ``[detector] kind = "auto"``)
is the :class:`~ratiowatch.stream.detectors.routed.PeriodRoutedDetector`: the two-window
:class:`~ratiowatch.stream.detectors.changepoint.ChangePointDetector` (``--detector window``),
handed to the :class:`~ratiowatch.stream.detectors.segmenter.SplitProfileDetector`
(``--detector split_profile``) once the rows since its last change show a period.
``--detector anomaly`` replays the daemon's ``kind = "anomaly"`` instead: each column is scored on
its own by a :class:`~ratiowatch.stream.detectors.anomaly.TimeSeriesAnomalyDetector` (as the daemon
scores each key), and each event whose score reaches ``--score-threshold`` is reported once, at
its first row; missing cells are skipped, not carried forward (a held value would look stuck).

FILE is a CSV, TSV or semicolon-separated file (separator found from its first lines, or
``--delimiter``), a JSON-lines file (one object per line), or ``-`` for standard input; how it is read
(header, blank lines, missing and bad cells, the time axis) is :mod:`ratiowatch.stream.commands.table`. By
default every numeric column except the time axis is used (a multivariate series); ``--column NAME``
(repeatable) selects columns. A row with any missing value is left out, offline
(:mod:`ratiowatch.stream.detectors.offline`; change points stay rows of the file) and with
``--streaming`` (:func:`replay_streaming`), as the daemon leaves out a record it cannot read; the
output says how many rows that was and which columns were missing (``rows_left_out`` in
``--json``).

Change points are data-row indices counted from 0 (header and blank lines not counted); the output
also gives each one's line in the file and, when there is a time axis, its time. Alarm scores are in
units of their threshold (above 1 = alarm) for univariate and multichannel input alike. A progress
bar goes to stderr for long files when stderr is a terminal.

Examples
--------
>>> import tempfile, os
>>> path = os.path.join(tempfile.mkdtemp(), "x.csv")
>>> _ = open(path, "w").write("u,v\\n" + "".join(f"{i % 3},{i % 2}\\n" for i in range(4)))
>>> names, x = read_csv(path)
>>> names, x.shape
(['u', 'v'], (4, 2))
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

from ratiowatch.stream.commands.table import BAD_CELLS, TableError, read_table
from ratiowatch.stream.engine.config import DEFAULT_KIND, DETECTOR_KINDS, DETECTOR_METHODS

PROGRESS_MIN_SAMPLES = 5000
SCORE_UNITS = ("the split's score / the stop test's threshold (its critical value; above 1 = significant), for "
               "univariate and multichannel input alike")
STREAMING_KINDS = tuple(DETECTOR_KINDS)
STREAMING_SCORE_UNITS = ("the detector's score / its threshold when the alarm was raised (above 1 = alarm); "
                         "delay = alarm row - change row")
#: thresholds at which the anomaly replay also counts events, to help choose one
EVENT_THRESHOLDS = (0.3, 0.5, 0.7, 0.9, 1.0)
ANOMALY_SCORE_UNITS = ("the anomaly score in [0, 1] (-log10 of a tail probability under the column's own score "
                       "history, over 10 decades); an anomaly is the first row of an event whose score reaches "
                       "score_threshold (rows within the detector's debounce of the previous such row are the "
                       "same event)")
INDEX_CONVENTION = ("change points are data-row indices from 0 (header and blank lines not counted); "
                    "change_point_lines are 1-based lines of the file")


def read_csv(path, columns: list[str] | None = None) -> tuple[list[str], np.ndarray]:
    """(column names, T x m float array with NaN for missing) of ``path`` (see :func:`read_table`)."""
    table = read_table(path, columns)
    return table.names, table.values


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="CSV / TSV / JSON-lines file with one row per time step; - reads stdin")
    parser.add_argument("--column", action="append", default=None, metavar="NAME",
                        help="column to use (repeatable; default: every numeric column but the time axis)")
    parser.add_argument("--time-column", default=None, metavar="NAME",
                        help="the time axis (labels the change points, is not a series); 'none': no time "
                             "axis (default: a column named like time_ms or ts, or an equal-step index)")
    parser.add_argument("--delimiter", default=None, metavar="CHAR",
                        help="field separator, one character ('\\t' or tab for a tab; default: found from "
                             "the first lines among , ; tab |)")
    parser.add_argument("--header", choices=("auto", "yes", "no"), default="auto",
                        help="whether the first row of a delimited file names the columns (default auto: a "
                             "first row of numbers, or one of numbers and dates, without text, that look "
                             "like the rows below it, is data)")
    parser.add_argument("--bad-cells", choices=BAD_CELLS, default="error",
                        help="a non-numeric cell in a numeric column: stop with its line and column "
                             "(error, default) or read it as a missing value with a warning (missing)")
    parser.add_argument("--plot", type=Path, default=None, metavar="OUT.png",
                        help="write a plot; the extension sets the format (.png, .svg, .pdf, ...)")
    parser.add_argument("--json", action="store_true", help="print change points and alarms as JSON")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    parser.add_argument("--false-alarm-rate", type=float, default=None, metavar="RATE",
                        help="sensitivity: chance that a change-free series gets any change point "
                             "(the stop test's level; default 0.05); with --streaming, alarms per row on "
                             "change-free data (default 1e-4). Larger finds more, smaller fewer")
    parser.add_argument("--streaming", action="store_true",
                        help="replay the daemon's streaming detector causally, one row at a time, and "
                             "report each alarm's change row, alarm row and delay")
    parser.add_argument("--detector", choices=STREAMING_KINDS, default=None,
                        help="with --streaming: the two-window detector handed to the split-profile detector "
                             "once the data show a period (auto, the daemon's default), the two-window detector "
                             "alone (window: alarms within tens of rows, blind to changes of shape or frequency "
                             "inside a cycle), the split-profile detector alone (split_profile: sees them, alarms "
                             "later) or the anomaly detector (anomaly: rows that do not belong, each column on "
                             "its own)")
    parser.add_argument("--method", choices=DETECTOR_METHODS, default=None,
                        help="the divergence estimator: offline rulsif (the default) or ulsif; with --streaming "
                             "and --detector auto or window, the two-window detector's: rulsif (the default), "
                             "ulsif, kliep or lsdd (docs/results.md compares them on synthetic series)")
    parser.add_argument("--level-view", action="store_true",
                        help="with --streaming and --detector auto or window: also compare the windows' mean "
                             "levels where the two-window detector differences a smooth column (its opt-in "
                             "level_view; finds level steps in smooth series that it misses otherwise)")
    parser.add_argument("--robust-line", action="store_true",
                        help="with --streaming and --detector auto or window: fit the two-window detector's "
                             "null line with gross values clipped (its opt-in robust_line; one error code such "
                             "as 1e6 among the readings otherwise hides the changes of the next few hundred rows)")
    parser.add_argument("--with-history", action="store_true",
                        help="with --streaming and --detector auto (the default): also ask for a period at each "
                             "change the two-window detector reports, across changes, and hand a column that "
                             "follows a schedule longer than its windows (a daily on/off cycle) to the split "
                             "profile with its recent cycles (the routed detector's opt-in with_history)")
    parser.add_argument("--smooth-steps", action="store_true",
                        help="offline: look harder for level steps in smooth, persistent columns and in "
                             "staircases (detect's opt-in smooth_steps; more change points on series that "
                             "switch between levels as their ordinary behaviour)")
    parser.add_argument("--score-threshold", type=float, default=None, metavar="S",
                        help="with --detector anomaly: report rows whose anomaly score (in [0, 1]) reaches S "
                             "(default 0.5, a tail probability of 1e-5; larger reports fewer)")


def _fail(msg: str, code: int = 2) -> int:
    print(f"ratiowatch detect: {msg}", file=sys.stderr)
    return code


def _ratio(score: float, threshold: float) -> float | None:
    if not (math.isfinite(score) and math.isfinite(threshold)) or threshold <= 0:
        return None
    return float(score / threshold)


def run(args) -> int:
    streaming = getattr(args, "streaming", False)
    if args.false_alarm_rate is not None and not 0.0 < args.false_alarm_rate < 1.0:
        example = "1e-4" if streaming else "0.05"
        return _fail(f"--false-alarm-rate must be in (0, 1), e.g. {example}; got {args.false_alarm_rate}")
    if getattr(args, "detector", None) is not None and not streaming:
        return _fail("--detector chooses a streaming detector: add --streaming (without it the offline "
                     "detector segments the whole file)")
    two_window = streaming and (args.detector or DEFAULT_KIND) in ("auto", "window")
    for flag in ("level_view", "robust_line"):
        if getattr(args, flag, False) and not two_window:
            return _fail(f"--{flag.replace('_', '-')} is an option of the two-window detector: add --streaming "
                         "(with --detector auto, the default, or window)")
    method = getattr(args, "method", None)
    if method is not None and streaming and not two_window:
        return _fail("--method chooses the two-window detector's estimator: use it with --detector auto (the "
                     "default) or window")
    if method in ("kliep", "lsdd") and not streaming:
        return _fail(f"the offline detector's split profile is a RuLSIF fit: --method rulsif or ulsif ({method} "
                     "is the streaming two-window detector's: add --streaming)")
    if getattr(args, "with_history", False) and not (streaming and (args.detector or DEFAULT_KIND) == "auto"):
        return _fail("--with-history is an option of the routed detector: add --streaming (with --detector "
                     "auto, the default)")
    smooth_steps = getattr(args, "smooth_steps", False)
    if smooth_steps and streaming:
        return _fail("--smooth-steps is an option of the offline detector: drop --streaming (the streaming "
                     "two-window detector's option for smooth columns is --level-view)")
    threshold = getattr(args, "score_threshold", None)
    if threshold is not None and getattr(args, "detector", None) != "anomaly":
        return _fail("--score-threshold is the anomaly detector's: add --streaming --detector anomaly")
    if threshold is not None and not 0.0 < threshold <= 1.0:
        return _fail(f"--score-threshold must be in (0, 1] (anomaly scores lie in [0, 1]), e.g. 0.5; got {threshold}")
    if getattr(args, "detector", None) == "anomaly" and args.false_alarm_rate is not None:
        return _fail("--false-alarm-rate sets the change-point detectors' rate; the anomaly detector's "
                     "sensitivity is --score-threshold")
    if args.plot is not None:
        from ratiowatch.stream.commands.plot import plot_path_problem

        why = plot_path_problem(args.plot)
        if why:
            return _fail(f"--plot {why}")
    try:
        table = read_table(args.file, args.column, time_column=args.time_column,
                           delimiter=args.delimiter, bad_cells=args.bad_cells,
                           header={"auto": None, "yes": True, "no": False}[getattr(args, "header", "auto")])
    except TableError as exc:
        for note in exc.notes:  # what was noted before the error may explain it
            print(f"ratiowatch detect: {note}", file=sys.stderr)
        return _fail(str(exc))
    for note in table.notes:
        print(f"ratiowatch detect: {note}", file=sys.stderr)
    x, names = table.values, table.names
    if streaming:
        return _run_streaming(args, table)
    from ratiowatch.stream.commands.progress import progress_bar
    from ratiowatch.stream.detectors.offline import replay

    params = {} if args.false_alarm_rate is None else {"false_alarm_rate": args.false_alarm_rate}
    if smooth_steps:
        params["smooth_steps"] = True
    if getattr(args, "method", None) is not None:
        params["method"] = args.method
    show = not args.no_progress and len(x) >= PROGRESS_MIN_SAMPLES
    try:
        with progress_bar(total=len(x), desc="detect", unit="sample", enabled=show) as bar:
            rep = replay(x, progress=None if bar is None else bar.callback, **params)
    except ValueError as exc:  # what the detector refuses in the data, said as the detector says it
        return _fail(f"{table.source}: {exc}")
    cps = rep.change_points
    lines = [table.lines[c] for c in cps]
    times = [table.time_values[c] for c in cps] if table.time_values is not None else None
    too_short = not np.isfinite(rep.scores).any()
    # level steps in a smooth column are often missed by default (docs/experiments.md, X)
    smooth = {} if too_short or smooth_steps else smooth_columns(x, names, cps)
    hint = (", ".join(f"{n!r} is smooth (lag-1 autocorrelation {r:.2f})" for n, r in smooth.items())
            + ": the offline detector misses many level steps in such columns; --smooth-steps looks "
            "harder (and finds more change points where a column switches between levels as its "
            "ordinary behaviour)") if smooth else None
    gone = left_out(x, names)
    short_msg = (f"{_rows_analysed(len(x), gone)} too short for any detection: every split needs a few "
                 f"subsequences of width {rep.config['width']} on each side") if too_short else None
    if args.json:
        alarms = []
        for a in rep.alarms:
            c = min(max(a.change_index, 0), len(x) - 1)
            alarms.append({"change_index": a.change_index, "alarm_index": a.alarm_index, "delay": a.delay,
                           "score": _ratio(a.score, a.threshold), "line": table.lines[c],
                           **({"time": table.time_values[c]} if table.time_values is not None else {})})
        out = {"file": table.source, "columns": names, "time_column": table.time_name,
               "n_samples": int(len(x)), "change_points": cps, "change_point_lines": lines,
               **({"change_point_times": times} if times is not None else {}),
               "index": INDEX_CONVENTION, "alarms": alarms, "score_units": SCORE_UNITS,
               **({"too_short": short_msg} if too_short else {}),
               **({"smooth_columns": smooth} if smooth else {}),
               **({"rows_left_out": gone} if gone else {}), "config": rep.config}
        print(json.dumps(out, indent=2))
    else:
        print(_header(table))
        if too_short:
            print(f"change points: none found ({short_msg})")
        else:
            where = [f"{c} (line {ln}" + (f", {table.time_name} {t})" if times is not None else ")")
                     for c, ln, t in zip(cps, lines, times if times is not None else [None] * len(cps))]
            print("change points (data row from 0):", ", ".join(where) if where else "(none)")
    for note in (short_msg if too_short else None, left_out_note(gone, len(x)), hint):
        if note:
            print(f"ratiowatch detect: {note}", file=sys.stderr)
    return _plot(args, table, rep.scores, rep.thresholds, cps)


def _header(table, extra: str = "") -> str:
    axis = f", time axis {table.time_name!r}" if table.time_name else ""
    return f"{table.source}: {len(table.values)} samples, columns {table.names}{axis}{extra}"


def _plot(args, table, scores, thresholds, cps, title_extra: str = "", score_label: str = "change score") -> int:
    """Write ``--plot`` if asked (exit code 1 when it cannot be written: the result is printed already)."""
    if args.plot is None:
        return 0
    from ratiowatch.stream.commands.plot import plot_detection

    try:
        plot_detection(args.plot, table.values, scores, thresholds, cps, (),
                       title=f"{Path(table.source).name}: {', '.join(table.names)}{title_extra}",
                       columns=table.names, score_label=score_label)
    except OSError as exc:
        return _fail(f"could not write the plot {args.plot}: {exc.strerror or exc}", 1)
    if not args.json:
        print(f"plot written to {args.plot}")
    return 0


def replay_streaming(x: np.ndarray, kind: str = DEFAULT_KIND, false_alarm_rate: float | None = None,
                     progress=None, level_view: bool = False, with_history: bool = False,
                     robust_line: bool = False, method: str | None = None,
                     refused: list | None = None) -> tuple[list, np.ndarray]:
    """(alarms, score / threshold at every row) of a streaming detector fed ``x`` (T, m) row by row;
    the ratio is NaN at rows where the detector had no threshold yet (too few rows for a test).

    ``kind`` is ``"window"`` (:class:`~ratiowatch.stream.detectors.changepoint.ChangePointDetector`),
    ``"split_profile"`` (:class:`~ratiowatch.stream.detectors.segmenter.SplitProfileDetector`) or
    ``"auto"`` (:class:`~ratiowatch.stream.detectors.routed.PeriodRoutedDetector`, the default),
    each with its defaults (the daemon's), and ``false_alarm_rate`` if given; ``level_view`` turns
    on the two-window detector's level view and ``robust_line`` its null line fitted with gross
    values clipped, and ``method`` chooses its estimator (``window`` and ``auto`` only), ``with_history`` the
    routed detector's questions across changes (``auto`` only). A row with a missing value (NaN)
    is left out, as the daemon leaves out a record with a missing or non-finite value (its
    dead-letter sink): the detector never sees it, the alarms' rows are rows of ``x``, and the
    ratio is NaN there. Carried forward, a gap of 100 rows in N(0, 1) raised an alarm at each end.
    A row the detector refuses (a value beyond
    :data:`~ratiowatch.stream.detectors.changepoint.MAX_MAGNITUDE`, an error code rather than a
    reading: the detector takes nothing of it) is left out too, as the daemon dead-letters such a
    record; its index is appended to ``refused`` when a list is given.
    ``progress(done, total)`` is called now and then.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> x = np.r_[rng.normal(0, 1, 400), rng.normal(4, 1, 400)][:, None]
    >>> alarms, ratio = replay_streaming(x)
    >>> [(abs(a.change_index - 400) <= 10, a.alarm_index >= 400) for a in alarms], ratio.shape
    ([(True, True)], (800,))
    """
    if kind not in STREAMING_KINDS:
        raise ValueError(f"kind must be one of {STREAMING_KINDS}; got {kind!r}")
    import importlib

    module, cls = DETECTOR_KINDS[kind]  # the daemon's [detector] kind -> class
    params = {} if false_alarm_rate is None else {"false_alarm_rate": float(false_alarm_rate)}
    for name, on in (("level_view", level_view), ("robust_line", robust_line), ("method", method is not None)):
        if on and kind not in ("window", "auto"):
            raise ValueError(f"{name} is an option of the two-window detector (kind window or auto); got {kind!r}")
    window = {**({"level_view": True} if level_view else {}), **({"robust_line": True} if robust_line else {}),
              **({"method": method} if method is not None else {})}
    if window:
        params.update(window if kind == "window" else {"window": window})
    if with_history:
        if kind != "auto":
            raise ValueError(f"with_history is an option of the routed detector (kind auto); got {kind!r}")
        params["with_history"] = True
    from ratiowatch.stream.detectors.changepoint import MAX_MAGNITUDE

    det = getattr(importlib.import_module(module), cls)(**params)
    x = np.asarray(x, dtype=np.float64)
    x = x[:, None] if x.ndim == 1 else x
    read = ~np.isnan(x).any(axis=1)  # the rows the daemon would read
    rows: list[int] = []  # the rows the detector took, in order

    def at(i: int) -> int:  # the detector counts the rows it saw: back to a row of x
        return rows[min(max(i, 0), len(rows) - 1)]

    ratio = np.full(x.shape[0], np.nan)
    alarms = []
    every = max(1, x.shape[0] // 200)
    for t, row in enumerate(x):
        if read[t]:
            try:
                alarm = det.step(row[0] if row.size == 1 else row)
            except ValueError:
                if np.all(np.abs(row) <= MAX_MAGNITUDE):
                    raise  # not a value it refuses: the detector's own error
                if refused is not None:
                    refused.append(t)  # not taken, the detector unchanged: as the daemon dead-letters it
                continue
            rows.append(t)
            if alarm is not None:
                alarms.append(replace(alarm, change_index=at(alarm.change_index), alarm_index=at(alarm.alarm_index)))
            if math.isfinite(det.threshold):
                holder = det.detector if kind == "auto" else det  # auto: whichever detector holds the stream
                ratio[t] = (holder.score_one(row) if hasattr(holder, "score_one")
                            else _ratio(det.score, det.threshold))
        if progress is not None and (t + 1) % every == 0:
            progress(t + 1, x.shape[0])
    if progress is not None:
        progress(x.shape[0], x.shape[0])
    return alarms, ratio


def replay_anomalies(x: np.ndarray, score_threshold: float | None = None, progress=None
                     ) -> tuple[list[dict], np.ndarray]:
    """(anomalies, scores) of the daemon's ``kind = "anomaly"`` replayed on ``x`` (T, m): each column
    scored on its own by a default :class:`~ratiowatch.stream.detectors.anomaly.TimeSeriesAnomalyDetector`,
    in row order. An anomaly is ``{"row", "column", "score"}`` (column = its index), the first row of an
    event whose score reaches ``score_threshold`` (default 0.5), exactly as the daemon alerts. Missing
    values (NaN) are skipped: their scores are NaN and they do not count as rows of the column's stream.
    ``progress(done, total)`` is called after each column.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> y = np.sin(np.arange(3000) * 2 * np.pi / 100) + 0.05 * rng.normal(size=3000)
    >>> y[2500:2510] += 3.0
    >>> found, scores = replay_anomalies(y[:, None])
    >>> [(a["row"], a["column"], a["score"]) for a in found], scores.shape
    ([(2500, 0, 1.0)], (3000, 1))
    """
    from ratiowatch.stream.detectors.anomaly import TimeSeriesAnomalyDetector
    from ratiowatch.stream.engine.config import ANOMALY_THRESHOLD
    from ratiowatch.stream.engine.pipeline import event_starts

    x = np.asarray(x, dtype=np.float64)
    x = x[:, None] if x.ndim == 1 else x
    threshold = ANOMALY_THRESHOLD if score_threshold is None else float(score_threshold)
    scores = np.full(x.shape, np.nan)
    found: list[dict] = []
    for j in range(x.shape[1]):
        rows = np.flatnonzero(np.isfinite(x[:, j]))
        if rows.size:
            det = TimeSeriesAnomalyDetector()
            scores[rows, j] = det.score_series(x[rows, j])
            first, _ = event_starts(scores[rows, j], threshold, det.debounce)  # as the daemon alerts
            found += [{"row": int(rows[i]), "column": j, "score": float(scores[rows[i], j])} for i in first]
        if progress is not None:
            progress(j + 1, x.shape[1])
    found.sort(key=lambda a: (a["row"], a["column"]))
    return found, scores


def left_out(x: np.ndarray, names: list[str]) -> dict | None:
    """Rows of ``x`` that the detectors leave out (a value missing in some column): ``{"rows": count,
    "by_column": {name: missing values}}``, or None when every row is complete.

    Examples
    --------
    >>> left_out(np.array([[1.0, np.nan], [2.0, 3.0], [np.nan, np.nan]]), ["a", "b"])
    {'rows': 2, 'by_column': {'a': 1, 'b': 2}}
    """
    missing = np.isnan(x)
    rows = int(missing.any(axis=1).sum())
    if not rows:
        return None
    return {"rows": rows, "by_column": {n: int(c) for n, c in zip(names, missing.sum(axis=0)) if c}}


def _rows_analysed(total: int, gone: dict | None) -> str:
    """How many rows the offline detector analysed, said before "too short".

    >>> _rows_analysed(400, None), _rows_analysed(400, {"rows": 392})
    ('400 samples are', 'only 8 of 400 rows have a value in every column,')
    """
    if gone is None:
        return "1 sample is" if total == 1 else f"{total} samples are"
    kept = total - gone["rows"]
    if kept == 0:
        return f"none of the {total} rows has a value in every column,"
    return f"only {kept} of {total} rows {'has' if kept == 1 else 'have'} a value in every column,"


def left_out_note(gone: dict | None, total: int) -> str | None:
    """The note that says which rows were left out, and why."""
    if gone is None:
        return None
    cols = ", ".join(f"{n!r} in {c}" for n, c in gone["by_column"].items())
    return (f"{gone['rows']} of {total} rows were left out: a value was missing ({cols}); the detectors read "
            "rows with a value in every column, as the daemon does (select columns with --column, or fill "
            "the gaps, to keep more rows)")


def smooth_columns(x: np.ndarray, names: list[str], change_points=()) -> dict[str, float]:
    """Columns without a clear period whose lag-1 autocorrelation within the segments between
    ``change_points`` (each segment about its own mean) exceeds the streaming detector's
    differencing bound (:data:`~ratiowatch.stream.detectors.changepoint.AUTO_DIFF_ACF`, 0.8) ->
    that autocorrelation, rounded to 3 digits.

    About one mean, a found level step alone makes noise look smooth (N(0, 1) with a step of 4 sd
    in the middle: 0.82); about each segment's mean it is the noise's own, about 0.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> walk, noise = rng.normal(size=500).cumsum(), rng.normal(size=500)
    >>> smooth_columns(np.c_[walk, noise, np.sin(np.arange(500) / 4.0)], ["walk", "noise", "cycle"])
    {'walk': 0.991}
    >>> step = noise + 4.0 * (np.arange(500) >= 250)
    >>> smooth_columns(step[:, None], ["step"]), smooth_columns(step[:, None], ["step"], [250])
    ({'step': 0.817}, {})
    """
    from ratiowatch.stream.detectors.changepoint import AUTO_DIFF_ACF
    from ratiowatch.stream.series.period import autocorrelation

    segment = np.searchsorted(np.asarray(sorted(change_points), dtype=np.int64), np.arange(x.shape[0]),
                              side="right")
    out = {}
    for j, name in enumerate(names):
        seen = np.isfinite(x[:, j])
        v, seg = x[:, j][seen], segment[seen]
        if v.size and np.ptp(seg) > 0:
            means = np.bincount(seg, weights=v) / np.maximum(np.bincount(seg), 1)
            v = v - means[seg] + v.mean()  # each segment about its own mean (the overall mean kept)
        if v.size < 3 or not np.ptp(v) > 0:
            continue
        r = float(autocorrelation(v - v.mean(), 2, magnitude=float(np.abs(v).max()))[1])
        if r > AUTO_DIFF_ACF:
            out[name] = round(r, 3)
    # a period is looked for only in the smooth columns (a smooth cycle is not what the note is about)
    cols = [names.index(n) for n in out]
    periodic = periodic_columns(x[:, cols], list(out)) if out else {}
    return {n: r for n, r in out.items() if n not in periodic}


def periodic_columns(x: np.ndarray, names: list[str]) -> dict[str, int]:
    """Columns with a clear period (:func:`~ratiowatch.stream.series.period.estimate_period` on their
    present values) -> the period in rows.

    Examples
    --------
    >>> t = np.arange(400.0)
    >>> periodic_columns(np.c_[np.sin(2 * np.pi * t / 24), np.random.default_rng(0).normal(size=400)], ["a", "b"])
    {'a': 24}
    """
    from ratiowatch.stream.series.period import estimate_period

    out = {}
    for j, name in enumerate(names):
        v = x[:, j][np.isfinite(x[:, j])]
        p = estimate_period(v)
        if p:
            out[name] = p
    return out


def _run_streaming(args, table) -> int:
    from ratiowatch.stream.commands.progress import progress_bar
    from ratiowatch.stream.detectors.changepoint import MAX_MAGNITUDE

    x, names = table.values, table.names
    kind = args.detector or DEFAULT_KIND
    if kind == "anomaly":
        return _run_anomalies(args, table)
    show = not args.no_progress and len(x) >= PROGRESS_MIN_SAMPLES
    refused: list[int] = []
    try:
        with progress_bar(total=len(x), desc=f"detect --streaming ({kind})", unit="sample", enabled=show) as bar:
            alarms, ratio = replay_streaming(x, kind, args.false_alarm_rate,
                                             progress=None if bar is None else bar.callback,
                                             level_view=getattr(args, "level_view", False),
                                             robust_line=getattr(args, "robust_line", False),
                                             method=getattr(args, "method", None),
                                             with_history=getattr(args, "with_history", False),
                                             refused=refused)
    except ValueError as exc:
        return _fail(f"{table.source}: {exc}")
    cps = [a.change_index for a in alarms]
    tested = int(np.isfinite(ratio).sum())
    # the window detector compares short subsequences: a cycle's shape or frequency is beyond it
    periods = periodic_columns(x, names) if kind == "window" else {}
    hint = (", ".join(f"{n!r} repeats every {p} rows" for n, p in periods.items())
            + ": the window detector does not see a change of shape or frequency inside a cycle; "
            "--detector auto (the default, the daemon's kind = \"auto\") or split_profile does") if periods else None
    gone = left_out(x, names)
    read = len(x) - (gone["rows"] if gone else 0) - len(refused)
    short_msg = None if tested or alarms else (
        f"no row was tested: the {kind} detector calibrates its threshold on the first few dozen rows "
        f"and had none yet after {read}" + (f" (of {len(x)}; the others were left out)" if read < len(x) else ""))
    shown = ", ".join(str(table.lines[i]) for i in refused[:5]) + (", ..." if len(refused) > 5 else "")
    refused_note = (f"{table.source}: {len(refused)} row(s) left out (line {shown}): a value beyond "
                    f"{MAX_MAGNITUDE:.0e} in magnitude is an error code rather than a reading, and the {kind} "
                    "detector does not take it (the daemon sends such a record to its dead-letter sink); "
                    "fix or blank the cell to read the row") if refused else None

    def where(i: int) -> dict:
        c = min(max(i, 0), len(x) - 1)
        return {"line": table.lines[c], **({"time": table.time_values[c]} if table.time_values is not None else {})}

    if args.json:
        out = {"file": table.source, "columns": names, "time_column": table.time_name,
               "n_samples": int(len(x)), "mode": "streaming", "detector": kind,
               **({"method": getattr(args, "method", None) or "rulsif"} if kind in ("auto", "window") else {}),
               "false_alarm_rate": args.false_alarm_rate, "change_points": cps,
               "change_point_lines": [where(c)["line"] for c in cps],
               "alarms": [{"change_index": a.change_index, "alarm_index": a.alarm_index, "delay": a.delay,
                           "score": _ratio(a.score, a.threshold), **where(a.change_index),
                           "alarm": where(a.alarm_index)} for a in alarms],
               "index": INDEX_CONVENTION, "score_units": STREAMING_SCORE_UNITS,
               "rows_tested": tested, **({"too_short": short_msg} if short_msg else {}),
               **({"rows_left_out": gone} if gone else {}),
               **({"rows_refused": {"rows": len(refused), "lines": [table.lines[i] for i in refused]}}
                  if refused else {}),
               **({"periods": periods} if kind == "window" else {})}
        print(json.dumps(out, indent=2))
    else:
        method = getattr(args, "method", None)
        print(_header(table, f"; streaming replay ({kind} detector{f', {method}' if method else ''})"))
        if short_msg:
            print(f"alarms: none ({short_msg})")
        elif not alarms:
            print(f"alarms: (none; {tested} of {len(x)} rows had a threshold)")
        for a in alarms:
            c, r = where(a.change_index), where(a.alarm_index)
            at = (f", {table.time_name} {c['time']}" if "time" in c else "")
            print(f"alarm at row {a.alarm_index} (line {r['line']}): change at row {a.change_index} "
                  f"(line {c['line']}{at}), delay {a.delay}")
    for note in (short_msg, left_out_note(gone, len(x)), refused_note, hint):
        if note:
            print(f"ratiowatch detect: {note}", file=sys.stderr)
    return _plot(args, table, ratio, np.ones(len(x)), cps, f" (streaming, {kind})", "score / threshold")


def _run_anomalies(args, table) -> int:
    from ratiowatch.stream.commands.progress import progress_bar
    from ratiowatch.stream.detectors.anomaly import DEFAULTS as ANOMALY_DEFAULTS
    from ratiowatch.stream.engine.config import ANOMALY_THRESHOLD
    from ratiowatch.stream.engine.pipeline import event_starts

    x, names = table.values, table.names
    threshold = ANOMALY_THRESHOLD if args.score_threshold is None else args.score_threshold
    show = not args.no_progress and len(x) * x.shape[1] >= PROGRESS_MIN_SAMPLES
    try:
        with progress_bar(total=x.shape[1], desc="detect --streaming (anomaly)", unit="column", enabled=show) as bar:
            found, scores = replay_anomalies(x, threshold, progress=None if bar is None else bar.callback)
    except ValueError as exc:
        return _fail(f"{table.source}: {exc}")

    def where(i: int) -> dict:
        return {"line": table.lines[i], **({"time": table.time_values[i]} if table.time_values is not None else {})}

    # the views' scores start after their warm-up, the tails' after min_history real scores
    learn = int(ANOMALY_DEFAULTS["warmup"]) + int(ANOMALY_DEFAULTS["min_history"])
    valid = np.isfinite(x).sum(axis=0)
    scored = {n: max(0, int(v) - learn) for n, v in zip(names, valid)}
    short_msg = None if any(scored.values()) else (
        f"no row was scored: the anomaly detector learns from each column's first {learn} values, and the "
        f"longest column has {int(valid.max(initial=0))}")
    # what another threshold would report: events per column (the same event rule)
    by_threshold = {n: {str(t): len(event_starts(col[np.isfinite(col)], t, int(ANOMALY_DEFAULTS["debounce"]))[0])
                        for t in EVENT_THRESHOLDS} for n, col in zip(names, scores.T)}
    if args.json:
        out = {"file": table.source, "columns": names, "time_column": table.time_name,
               "n_samples": int(len(x)), "mode": "streaming", "detector": "anomaly",
               "score_threshold": threshold,
               "anomalies": [{"row": a["row"], "column": names[a["column"]], "score": a["score"], **where(a["row"])}
                             for a in found],
               "index": INDEX_CONVENTION.replace("change points are", "rows are"), "score_units": ANOMALY_SCORE_UNITS,
               "rows_scored": scored, "events_by_threshold": by_threshold,
               **({"too_short": short_msg} if short_msg else {})}
        print(json.dumps(out, indent=2))
    else:
        print(_header(table, f"; streaming replay (anomaly detector, score threshold {threshold})"))
        if short_msg:
            print(f"anomalies: none ({short_msg})")
        elif not found:
            print(f"anomalies: (none; rows scored per column: {scored})")
        for a in found:
            w = where(a["row"])
            at = f", {table.time_name} {w['time']}" if "time" in w else ""
            print(f"anomaly at row {a['row']} (line {w['line']}{at}) in {names[a['column']]!r}, score {a['score']:.3f}")
        if not short_msg:
            for n, counts in by_threshold.items():
                print(f"{n!r}: events at score thresholds " + ", ".join(f"{t}: {c}" for t, c in counts.items()))
    peak = np.where(np.isnan(scores), -np.inf, scores).max(axis=1)
    peak[~np.isfinite(peak)] = np.nan
    if short_msg:
        print(f"ratiowatch detect: {short_msg}", file=sys.stderr)
    return _plot(args, table, peak, np.full(len(x), threshold), sorted({a["row"] for a in found}),
                 " (streaming, anomaly)", "anomaly score" if x.shape[1] == 1 else "anomaly score (max over columns)")


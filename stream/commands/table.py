"""Reading a user's table for ``ratiowatch detect``: CSV / TSV / semicolon files, JSON lines, stdin.

The rules, in the order they apply (each one says what it did on stderr through :attr:`Table.notes`):

- **Format.** JSON lines when the name ends in ``.jsonl`` / ``.ndjson`` or the first non-blank
  character is ``{`` (one object per line; a field is a column). Otherwise delimited text whose
  separator (``,`` ``;`` tab ``|``) is found by :class:`csv.Sniffer` on the first lines, or given.
  ``-`` reads standard input.
- **Header.** A first row whose every cell is a number is data, not a header: the columns are then
  named ``col1``, ``col2``, ...
- **Blank lines** are skipped. Row indices (change points) count data rows from 0; the header and
  blank lines are not counted. :attr:`Table.lines` gives each data row's line in the file.
- **Cells.** Empty, ``NA``, ``NaN``, ``null`` and ``none`` are missing values. A column is numeric
  when at least one of its cells is a number; every other cell of a numeric column must then be a
  number or missing: otherwise an error names the file, line and column (``bad_cells="error"``,
  default), or with ``bad_cells="missing"`` such cells become missing values and a note counts them.
  A column with no number at all (host names, dates) is text and is not used; when its values
  repeat (a key such as a host name), a note says that the rows of every key are read as one series.
- **Time axis.** ``time_column`` names it (``"none"``: no time axis). Otherwise a column whose name
  is, or is made of, a time or index word (``time``, ``time_ms``, ``timestamp_s``, ``idx``...) is
  the time axis; without one, so is a numeric column that counts up in equal steps (an index)
  when another numeric column is left to watch. A time axis is not a series to watch (as a channel
  its ramp hides real changes); its values label the change points. Any other column that only
  ever increases is kept, with a note.

Examples
--------
>>> t = read_table_text("time_ms;cpu\\n0;1.5\\n1000;NA\\n\\n2000;2.5\\n", name="x.csv")
>>> t.names, t.values.shape, t.time_name, t.lines
(['cpu'], (3, 1), 'time_ms', [2, 3, 5])
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

MISSING = frozenset({"", "na", "nan", "null", "none"})

#: words that make a column name a time axis or row index (alone or as a part: time_ms, Time (s))
TIME_WORDS = frozenset({"time", "timestamp", "date", "datetime", "ts", "t", "index", "idx", "epoch"})

BAD_CELLS = ("error", "missing")
DELIMITERS = ",;\t|"


class TableError(ValueError):
    """The input cannot be read as a table of numbers; the message names the place and the fix."""


@dataclass
class Table:
    """Numeric channels of a table, with where each row came from."""

    source: str
    names: list[str]
    values: np.ndarray  # T x m float64, NaN = missing
    lines: list[int]  # line in the file of each data row (1-based)
    time_name: str | None = None
    time_values: list | None = None  # the time axis' value of each data row
    notes: list[str] = field(default_factory=list)


def _number(cell: str) -> float | None:
    """float of a cell, NaN for a missing marker, None for anything else."""
    c = cell.strip()
    if c.lower() in MISSING:
        return math.nan
    try:
        v = float(c)
    except ValueError:
        return None
    return v if math.isfinite(v) else None  # "inf" is not a measurement


def is_time_name(name: str) -> bool:
    """Whether a column name is, or is made of, a time or index word (``time_ms``, ``Time (s)``).

    Examples
    --------
    >>> [is_time_name(n) for n in ("time_ms", "timestamp", "Time (s)", "uptime", "cpu_t1")]
    [True, True, True, False, False]
    """
    n = name.strip().lower()
    if n in TIME_WORDS:
        return True
    parts = [p for p in re.split(r"[^a-z0-9]+", re.sub(r"([a-z])([A-Z])", r"\1_\2", name.strip()).lower()) if p]
    units = {"ms", "s", "sec", "secs", "seconds", "us", "ns", "min", "h", "utc", "unix", "iso"}
    return bool(parts) and parts[0] in TIME_WORDS and all(p in TIME_WORDS or p in units for p in parts[1:])


def _equal_steps(v: np.ndarray) -> bool:
    """A strictly increasing column with (to rounding) equal steps: a row index or a regular clock."""
    if v.size < 3 or not np.all(np.isfinite(v)):
        return False
    d = np.diff(v)
    return bool(d.min() > 0 and (d.max() - d.min()) <= 1e-9 * max(abs(d.max()), 1.0))


def _increasing(v: np.ndarray) -> bool:
    return bool(v.size >= 3 and np.all(np.isfinite(v)) and np.all(np.diff(v) > 0))


def _read_source(path) -> tuple[str, str]:
    """(display name, text) of a path or ``-`` (standard input)."""
    if str(path) == "-":
        return "<stdin>", sys.stdin.read()
    p = Path(path)
    if p.is_dir():
        raise TableError(f"{p} is a directory; give a CSV or JSON-lines file")
    if not p.is_file():
        raise TableError(f"{p}: no such file")
    try:
        return str(p), p.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise TableError(f"{p} is not UTF-8 text ({exc.reason} at byte {exc.start}); "
                         "give a CSV or JSON-lines file") from None


def read_table(path, columns: list[str] | None = None, time_column: str | None = None,
               delimiter: str | None = None, bad_cells: str = "error") -> Table:
    """Read ``path`` (``-``: standard input) by the rules of the module docstring."""
    name, text = _read_source(path)
    return read_table_text(text, name=name, columns=columns, time_column=time_column,
                           delimiter=delimiter, bad_cells=bad_cells)


def read_table_text(text: str, name: str = "<text>", columns: list[str] | None = None,
                    time_column: str | None = None, delimiter: str | None = None,
                    bad_cells: str = "error") -> Table:
    """:func:`read_table` of a text already in memory (``name`` is used in messages)."""
    if bad_cells not in BAD_CELLS:
        raise ValueError(f"bad_cells must be one of {BAD_CELLS}; got {bad_cells!r}")
    if not text.strip():
        raise TableError(f"{name} is empty; expected a header row and data rows")
    first = text.lstrip()[:1]
    if delimiter is None and (name.endswith((".jsonl", ".ndjson")) or first == "{"):
        header, rows, lines, notes = _jsonl_rows(text, name)
    else:
        header, rows, lines, notes = _delimited_rows(text, name, delimiter)
    return _columns(name, header, rows, lines, notes, columns, time_column, bad_cells)


def _delimited_rows(text: str, name: str, delimiter: str | None):
    notes: list[str] = []
    if delimiter is None:
        sample = "\n".join(text.splitlines()[:50])
        try:
            delimiter = csv.Sniffer().sniff(sample, delimiters=DELIMITERS).delimiter
        except csv.Error:
            delimiter = ","  # one column, or nothing the sniffer could tell apart
    records = []
    blank = []
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
    for row in reader:
        if any(c.strip() for c in row):
            records.append((reader.line_num, row))
        else:
            blank.append(reader.line_num)
    if not records:
        raise TableError(f"{name} is empty; expected a header row and data rows")
    first_line, first = records[0]
    if all(_number(c) is not None and c.strip().lower() not in MISSING for c in first):
        header = [f"col{j + 1}" for j in range(max(len(r) for _, r in records))]
        notes.append(f"{name}: no header row (the first row is all numbers); columns named "
                     f"{', '.join(header[:3])}{', ...' if len(header) > 3 else ''}")
        data = records
    else:
        header = [h.strip() for h in first]
        data = records[1:]
        blank = [b for b in blank if b > first_line]
    if not data:
        raise TableError(f"{name} has a header but no data rows")
    if blank:
        shown = ", ".join(str(b) for b in blank[:5]) + (", ..." if len(blank) > 5 else "")
        notes.append(f"{name}: skipped {len(blank)} blank line(s) (line {shown}); indices count data rows "
                     "from 0, header and blank lines not counted")
    return header, [r for _, r in data], [ln for ln, _ in data], notes


def _jsonl_rows(text: str, name: str):
    header: list[str] = []
    seen: dict[str, int] = {}
    objs, lines, blank = [], [], 0
    for i, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            blank += 1
            continue
        try:
            obj = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise TableError(f"{name} line {i}: not JSON ({exc.msg}); JSON lines need one object per line") from None
        if not isinstance(obj, dict):
            raise TableError(f"{name} line {i}: expected a JSON object per line; got {type(obj).__name__}")
        for k in obj:
            if k not in seen:
                seen[k] = len(header)
                header.append(k)
        objs.append(obj)
        lines.append(i)
    notes = []
    if blank:
        notes.append(f"{name}: skipped {blank} blank line(s); indices count records from 0")
    rows = []
    for obj in objs:
        row = [""] * len(header)
        for k, v in obj.items():
            if isinstance(v, (dict, list)):
                raise TableError(f"{name} line {lines[len(rows)]}, field {k!r}: nested values are not read; "
                                 "give one number per field")
            row[seen[k]] = "" if v is None else (str(v).lower() if isinstance(v, bool) else str(v))
        rows.append(row)
    return header, rows, lines, notes


def _columns(name, header, rows, lines, notes, columns, time_column, bad_cells) -> Table:
    if len(set(header)) != len(header):
        dup = sorted({h for h in header if header.count(h) > 1})
        raise TableError(f"{name}: duplicate column name(s) {dup} in the header")
    selected = list(columns or [])
    asked = selected + ([time_column] if time_column not in (None, "none") else [])
    for c in asked:
        if c not in header:
            flag = "--column" if c in selected else "--time-column"
            raise TableError(f"{flag} {c!r} is not a column of {name}; columns: {header}")
    cells = {h: [r[j] if j < len(r) else "" for r in rows] for j, h in enumerate(header)}
    parsed: dict[str, np.ndarray] = {}
    text_cols: list[str] = []
    for h in header:
        vals = [_number(c) for c in cells[h]]
        if not any(v is not None and not math.isnan(v) for v in vals):
            text_cols.append(h)  # not one number: a text column (names, dates) or an empty one
            continue
        bad = [i for i, v in enumerate(vals) if v is None]
        if bad and h != time_column:
            if bad_cells == "error":
                i = bad[0]
                hint = " (decimal commas are not read: use a dot)" if re.fullmatch(
                    r"\s*-?\d+,\d+\s*", cells[h][i]) else ""
                more = f"; {len(bad) - 1} more such cell(s) in this column" if len(bad) > 1 else ""
                raise TableError(
                    f"{name} line {lines[i]}, column {h!r}: {cells[h][i]!r} is not a number{hint}{more}. "
                    "Fix the cell, or pass --bad-cells missing to read such cells as missing values")
            notes.append(f"{name}: column {h!r}: {len(bad)} non-numeric cell(s) read as missing values "
                         f"(first at line {lines[bad[0]]}: {cells[h][bad[0]]!r})")
            vals = [math.nan if v is None else v for v in vals]
        parsed[h] = np.array([math.nan if v is None else v for v in vals], dtype=np.float64)
    # the time axis: given, or found by name, or by equal steps
    time_name, also_time = None, []
    if time_column not in (None, "none"):
        time_name = time_column
    elif time_column is None:
        named = [h for h in header if is_time_name(h) and h not in selected]
        ramps = [h for h in parsed if h not in named and h not in selected and _equal_steps(parsed[h])]
        free = [h for h in parsed if h not in selected]
        # an equal-step column is an index only when another numeric column is left to watch
        cands = named or (ramps[:1] if len(free) > 1 else [])
        if cands:
            time_name, also_time = cands[0], cands[1:]
            why = "its name" if is_time_name(time_name) else "it counts up in equal steps"
            notes.append(f"{name}: column {time_name!r} read as the time axis ({why}), not as a series; "
                         "choose another with --time-column NAME, or --time-column none")
    if selected:
        empty = [c for c in selected if c in text_cols]
        if empty:
            raise TableError(f"{name}: column {empty[0]!r} is not numeric (no cell holds a number)")
        use = selected
    else:
        use = [h for h in parsed if h != time_name and h not in also_time]
        unused_text = [h for h in text_cols if h != time_name]
        if unused_text:
            notes.append(f"{name}: column(s) {unused_text} hold no number and are not used")
        for h in unused_text:
            # a key column (host, sensor) whose values repeat: rows of several series are interleaved
            distinct = {c.strip() for c in cells[h]} - {""}
            if 1 < len(distinct) <= len(rows) // 2:
                shown = ", ".join(sorted(distinct)[:3]) + (", ..." if len(distinct) > 3 else "")
                notes.append(f"{name}: column {h!r} takes {len(distinct)} values ({shown}); rows of all of them "
                             "are read as one series: if each value is its own series, split the file by it")
        numeric_time = [h for h in also_time if h in parsed]
        if numeric_time:
            notes.append(f"{name}: column(s) {numeric_time} not used (they also look like a time axis or "
                         "index; select them with --column)")
        for h in use:
            if _increasing(parsed[h]):
                notes.append(f"{name}: column {h!r} only ever increases; if it is a time axis or index, "
                             f"pass --time-column {h}")
    if not use and time_name is not None and time_name in parsed:
        raise TableError(f"{name}: the only numeric column, {time_name!r}, reads as the time axis; to watch it, "
                         f"pass --column {time_name} (or --time-column none)")
    if not use:
        raise TableError(f"{name}: no numeric column found (columns: {header}); choose one with --column")
    values = np.column_stack([parsed[h] for h in use])
    time_values = None
    if time_name is not None:
        tv = parsed.get(time_name)
        if tv is not None and not np.any(np.isnan(tv)):
            time_values = [int(v) if float(v).is_integer() else float(v) for v in tv]
        else:
            time_values = [c.strip() for c in cells[time_name]]
    return Table(name, use, values, list(lines), time_name, time_values, notes)

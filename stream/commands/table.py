"""Reading a user's table for ``ratiowatch detect``: CSV / TSV / semicolon files, JSON lines, stdin.

The rules, in the order they apply (each one says what it did on stderr through :attr:`Table.notes`):

- **Format.** JSON lines when the name ends in ``.jsonl`` / ``.ndjson`` or the first non-blank
  character is ``{`` (one object per line; a field is a column). A JSON array (``[{...}, ...]``) is
  not read: an error says to write JSON lines or CSV. Otherwise delimited text whose separator
  (``,`` ``;`` tab ``|``) is found by :class:`csv.Sniffer` on the first lines, or given (one
  character; ``\\t`` or ``tab`` for a tab). ``-`` reads standard input. A UTF-8 byte order mark is
  dropped, from a file and from standard input alike; text that is not UTF-8 is an error that says
  how to convert it (and names UTF-16 or UTF-32 by its byte order mark: Excel's "Unicode text").
- **Header.** A first row is data, not a header, when every cell of it is a number, or when it holds
  a number or a date/time, no text, and each of its cells is of the kind (number or date/time) of
  its column in the rows below (an empty or missing cell fits any column), unless its first cell
  is empty and the others are numbers (``,0,1``: the header pandas writes above an unnamed index).
  A row with a text cell is a header (``region,2022,2023`` names yearly columns).
  The columns are then named ``col1``, ``col2``, ... and a note shows the first row. A header made
  only of numbers (sensor IDs) cannot be told from data: it is read as a data row, and the note
  says so (``header=True`` / ``False`` decides instead of these rules). A first row read as the header
  although it holds a number of its column's kind (an integer above integers, a decimal above
  decimals: ``0.3456,#N/A``) gets a note saying so. Names must differ; several unnamed columns with
  nothing in them (a spreadsheet's ``time;value;;``) are dropped.
- **Row length.** A row with more cells than the header (or, without a header, than the first row)
  is an error naming its line and both counts: cutting it to fit would shift or split its numbers
  (a decimal comma or an unquoted thousands separator in a comma-separated file splits a number in
  two). Extra cells that are all empty (a trailing separator) are ignored. A row with fewer cells
  reads its missing trailing cells as missing values.
- **Separator.** A separator found, not given, must not split numbers. A comma-separated file whose
  every data row is, split at ``;`` (or a tab, ``|``) instead, numbers some of which hold a comma
  (``0,346;-0,346``) is an error that names that separator. So is a file without a header in which
  an integer column is followed by digits that can only be the decimals of numbers written with a
  decimal comma (an integer part ``-0``; digits with a leading zero in two lengths, ``035`` and
  ``0822``), or a number split at a thousands separator (``1,034.6``) beside rows of smaller numbers
  one cell shorter (``999.1``). Digits with a leading zero all of one length (``0,346``, or
  ``2,034.6`` in a file of numbers above 1000) get a note: they may as well be zero-padded IDs. A
  limit: one column of decimal-comma numbers without a header and with none of these signs
  (``1,5`` / ``2,7``) cannot be told from two columns of integers, and is read as two (the note on
  the first row shows its cells); write decimal dots, or pass ``--delimiter ';'`` to read each line
  as one cell (a decimal comma then stops with a hint).
- **Blank lines.** A line with nothing but whitespace is blank and skipped (in a TSV, a line of tabs
  below the header is a row of missing values, as a line of commas is in a CSV). Row indices (change
  points) count data rows from 0; the header and blank lines are not counted. :attr:`Table.lines`
  gives each data row's line in the file. A line of separators or empty quoted cells (``,`` or
  ``""``, as csv writers write a row of missing values) is not blank: it is a row of missing values,
  and counts.
- **Cells.** Empty, ``NA``, ``NaN``, ``null`` and ``none`` are missing values. A column is numeric
  when at least one of its cells is a number; every other cell of a numeric column must then be a
  number or missing: otherwise an error names the file, line and column (``bad_cells="error"``,
  default), or with ``bad_cells="missing"`` such cells become missing values and a note counts them.
  A column whose cells are numbers written with a comma (``10,19``, ``1,234.5``) is an error with a
  hint (with ``bad_cells="missing"``: it is not used, and a note says why).
  A column with no number at all (host names, dates) is text and is not used; when its values
  repeat (a key such as a host name), a note says that the rows of every key are read as one series.
- **Time axis.** ``time_column`` names it (``"none"``: no time axis). Otherwise a column whose name
  is, or is made of, a time or index word (``time``, ``time_ms``, ``timestamp_s``, ``idx``...) is
  the time axis; without one, so is a numeric column that counts up in equal steps (an index)
  when another numeric column is left to watch. A time axis is not a series to watch (as a channel
  its ramp hides real changes); its values label the change points (an integer label is the
  cell's own: epoch nanoseconds stay exact). Any other column that only ever increases is kept,
  with a note.

Examples
--------
>>> t = read_table_text("time_ms;cpu\\n0;1.5\\n1000;NA\\n\\n2000;2.5\\n", name="x.csv")
>>> t.names, t.values.shape, t.time_name, t.lines
(['cpu'], (3, 1), 'time_ms', [2, 3, 5])
"""

from __future__ import annotations

import csv
import json
import math
import re
import shlex
import sys
from array import array
from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path

import numpy as np

MISSING = frozenset({"", "na", "nan", "null", "none"})

#: words that make a column name a time axis or row index (alone or as a part: time_ms, Time (s))
TIME_WORDS = frozenset({"time", "timestamp", "date", "datetime", "ts", "t", "index", "idx", "epoch"})

BAD_CELLS = ("error", "missing")
DELIMITERS = ",;\t|"
#: how a tab may be typed on a command line, where a literal tab is awkward
TAB_NAMES = frozenset({"\\t", "tab", "\t"})

#: month names and their abbreviations, as dates spell them (02-Jan-2024, Jan 2, 2024, 2 January 2024)
_MONTH = (r"(?:jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?|sept?(?:ember)?"
          r"|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)\.?")
_CLOCK = r"[0-9]{1,2}:[0-9]{2}(?::[0-9]{2}(?:[.,][0-9]+)?)?(?:\s*[ap]\.?m\.?)?"
#: dates and times as loggers write them: 2024-01-01, 2024-01-01T00:00:00Z, 01/02/2024 10:00,
#: 1/2/2024 09:00:00 AM, 02-Jan-2024, Jan 2, 2024 9:00 PM, 10:00:05
_DATE_TIME = re.compile(
    r"(?:[0-9]{4}-[0-9]{1,2}-[0-9]{1,2}|[0-9]{1,2}[./][0-9]{1,2}[./][0-9]{2,4}|[0-9]{4}/[0-9]{1,2}/[0-9]{1,2}"
    rf"|[0-9]{{1,2}}[-/ ]{_MONTH}[-/ ][0-9]{{2,4}}|{_MONTH} [0-9]{{1,2}},? [0-9]{{2,4}}|[0-9]{{4}}-{_MONTH}-[0-9]{{1,2}})"
    rf"(?:(?:,?\s+|T){_CLOCK})?\s*(?:Z|[+-][0-9]{{2}}:?[0-9]{{2}}|UTC)?"
    rf"|{_CLOCK}", re.IGNORECASE | re.ASCII)
#: a number as the table reads it: ASCII digits, decimal or scientific (not 1_5, not other scripts' digits)
_NUMBER = re.compile(r"[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?")
#: a number whose comma is a decimal comma (10,19) or a thousands separator (1,234.5)
_DECIMAL_COMMA = re.compile(r"[-+]?[0-9]+,[0-9]+")
_THOUSANDS = re.compile(r"[-+]?[0-9]{1,3}(,[0-9]{3})+(\.[0-9]+)?")


class TableError(ValueError):
    """The input cannot be read as a table of numbers; the message names the place and the fix.

    ``notes`` are the notes gathered up to the error (they may explain it: a column taken for the
    time axis, a first row taken for data)."""

    def __init__(self, message: str, notes: list[str] | None = None):
        super().__init__(message)
        self.notes = list(notes or [])


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
    if not _NUMBER.fullmatch(c):  # float() would also take 1_5, "inf" and digits of other scripts
        return None
    v = float(c)
    return v if math.isfinite(v) else None  # 1e400 is not a measurement


def _kind(cell: str) -> str | None:
    """"number", "date" or "text" of a cell; None for an empty or missing cell (it fits any column)."""
    c = cell.strip()
    if c.lower() in MISSING:
        return None
    if _number(c) is not None:
        return "number"
    return "date" if _DATE_TIME.fullmatch(c) else "text"


def _comma_hint(cell: str) -> str:
    """What to do about a number written with a comma; empty when the cell is not one."""
    c = cell.strip()
    if _THOUSANDS.fullmatch(c) and "." in c:
        return "thousands separators are not read: remove them"
    if _THOUSANDS.fullmatch(c):
        return "decimal commas and thousands separators are not read: use a dot, or remove the separators"
    if _DECIMAL_COMMA.fullmatch(c):
        return "decimal commas are not read: use a dot"
    return ""


def _split_number_hint(row: list[str]) -> str:
    """Why a comma-separated row may have too many cells: a number split at its comma."""
    cells = [c.strip() for c in row]
    pairs = list(zip(cells, cells[1:]))
    # a thousands separator leaves a cell of exactly three digits after a cell of one to three
    thousands = any(re.fullmatch(r"[-+]?\d{1,3}", a) and re.fullmatch(r"\d{3}(\.\d*)?", b) for a, b in pairs)
    # a decimal comma leaves a cell of digits only after a cell of digits only
    decimal = any(re.fullmatch(r"[-+]?\d+", a) and re.fullmatch(r"\d+", b) for a, b in pairs)
    hints = []
    if decimal:
        hints.append("if the file writes decimal commas (10,19), convert them to dots, or if its cells are "
                     "separated by ';', pass --delimiter ';'")
    if thousands:
        hints.append("if it writes thousands separators (10,189.1), quote such numbers or remove the separators")
    if not hints:
        hints.append("name every column in the header, or quote cells that hold a ','")
    return "; ".join(hints)


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


def _monotonic(v: np.ndarray) -> bool:
    """Whether the present values of a column never go down, or never go up."""
    d = np.diff(v[~np.isnan(v)])
    return bool(np.all(d >= 0) or np.all(d <= 0))


def _increasing(v: np.ndarray) -> bool:
    return bool(v.size >= 3 and np.all(np.isfinite(v)) and np.all(np.diff(v) > 0))


#: byte order marks of the Unicode encodings other than UTF-8 (longest first: UTF-32 LE starts as UTF-16 LE)
_BOMS = ((b"\xff\xfe\x00\x00", "UTF-32"), (b"\x00\x00\xfe\xff", "UTF-32"), (b"\xff\xfe", "UTF-16"),
         (b"\xfe\xff", "UTF-16"))


def _not_utf8(name: str, start: bytes, exc: UnicodeDecodeError) -> str:
    """The message for a text that is not UTF-8: which encoding a byte order mark names, and how to convert.

    ``start``: the first bytes of the text."""
    shown = "FILE" if name == "<stdin>" else shlex.quote(name)
    for bom, encoding in _BOMS:
        if start.startswith(bom):
            # what spreadsheets save as "Unicode text"
            return (f"{name} is {encoding} text (it starts with a {encoding} byte order mark), not UTF-8; save it as "
                    f"UTF-8 (CSV UTF-8), or convert it: iconv -f {encoding.lower()} -t utf-8 {shown} > utf8.csv")
    return (f"{name} is not UTF-8 text ({exc.reason} at byte {exc.start}); save it as UTF-8 (CSV UTF-8), or "
            f"convert it, e.g. from Windows-1252: iconv -f cp1252 -t utf-8 {shown} > utf8.csv")


def _read_source(path) -> tuple[str, str]:
    """(display name, text) of a path or ``-`` (standard input)."""
    if str(path) == "-":
        buffer = getattr(sys.stdin, "buffer", None)
        if buffer is None:  # a text stream without bytes beneath (a test's StringIO)
            return "<stdin>", sys.stdin.read()
        data = buffer.read()
        try:
            # decoded here, as files are, so that a byte order mark is dropped and bad bytes get a message
            return "<stdin>", data.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise TableError(_not_utf8("<stdin>", data[:4], exc)) from None
    p = Path(path)
    if p.is_dir():
        raise TableError(f"{p} is a directory; give a CSV or JSON-lines file")
    if not p.exists():  # a pipe (<(cmd), /dev/stdin) is read as a file is
        raise TableError(f"{p}: no such file")
    try:
        return str(p), p.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        try:
            with p.open("rb") as fh:
                start = fh.read(4)
        except OSError:
            start = b""
        raise TableError(_not_utf8(str(p), start, exc)) from None
    except OSError as exc:
        raise TableError(f"{p} cannot be read ({exc.strerror or exc}); give a readable CSV or JSON-lines "
                         "file") from None


def read_table(path, columns: list[str] | None = None, time_column: str | None = None,
               delimiter: str | None = None, bad_cells: str = "error", header: bool | None = None) -> Table:
    """Read ``path`` (``-``: standard input) by the rules of the module docstring.

    ``header`` (delimited text): True, the first row is the header; False, it is data; None (the
    default), decided by the rules.
    """
    name, text = _read_source(path)
    return read_table_text(text, name=name, columns=columns, time_column=time_column,
                           delimiter=delimiter, bad_cells=bad_cells, header=header)


def read_table_text(text: str, name: str = "<text>", columns: list[str] | None = None,
                    time_column: str | None = None, delimiter: str | None = None,
                    bad_cells: str = "error", header: bool | None = None) -> Table:
    """:func:`read_table` of a text already in memory (``name`` is used in messages)."""
    if bad_cells not in BAD_CELLS:
        raise ValueError(f"bad_cells must be one of {BAD_CELLS}; got {bad_cells!r}")
    delimiter = _delimiter(delimiter)
    text = text.removeprefix("\ufeff")
    if not text or text.isspace():  # as text.strip() would tell, without a copy of the text
        raise TableError(f"{name} is empty; expected a header row and data rows")
    first = next(c for c in text if not c.isspace())
    if delimiter is None and first == "[" and _json_array(text, name):
        raise TableError(f"{name} is a JSON array, which is not read; write JSON lines (one object per line, "
                         "a field per column) or CSV")
    keep = _may_be_time(columns, time_column)
    if delimiter is None and (name.endswith((".jsonl", ".ndjson")) or first == "{"):
        names, cols, lines, notes = _jsonl_rows(text, name, keep)
    else:
        names, cols, lines, notes = _delimited_rows(text, name, delimiter, header, keep)
    try:
        return _columns(name, names, cols, lines, notes, columns, time_column, bad_cells)
    except TableError as exc:
        if not exc.notes:
            exc.notes = list(notes)  # what was noted up to the error may explain it
        raise


def _delimiter(delimiter: str | None) -> str | None:
    """The one-character separator a user gave (``\\t`` or ``tab``: a tab), checked."""
    if delimiter is None:
        return None
    if delimiter.lower() in TAB_NAMES:
        return "\t"
    if len(delimiter) != 1 or delimiter in "\"\r\n":
        raise TableError(f"--delimiter {delimiter!r} is not a separator; give one character such as ',' ';' '|', "
                         "or '\\t' (or tab) for a tab")
    return delimiter


def _json_array(text: str, name: str) -> bool:
    """Whether a text that starts with ``[`` is a JSON array rather than a header such as ``[ms],cpu``."""
    end = text.find("\n")
    if name.lower().endswith(".json") or re.match(r"\s*\[\s*([{\[]|$)", text[:end] if end >= 0 else text):
        return True
    try:
        return isinstance(json.loads(text), list)
    except ValueError:
        return False


def _integer(cell: str) -> bool:
    return bool(re.fullmatch(r"[-+]?[0-9]+", cell.strip()))


def _index_header(first: list[str], below: list[list[str]]) -> bool | None:
    """For a first row whose first cell is empty and whose other cells are numbers: True when it is the
    header pandas writes above an unnamed index (``,0,1`` above rows ``0,...``, ``1,...``), False when it
    is a row of data missing its first value, None when those numbers are not of the columns' kind
    (integers above decimals: column labels, most likely)."""
    labels = [c.strip() for c in first[1:]]
    index = [r[0].strip() for r in below if r and r[0].strip()]
    if labels == [str(j) for j in range(len(labels))] and index and all(_integer(c) for c in index) \
            and [int(c) for c in index] == list(range(int(index[0]), int(index[0]) + len(index))):
        return True  # labels 0, 1, ... above an integer index that counts up: what pandas writes
    for j, c in enumerate(first[1:], start=1):
        seen = [_integer(r[j]) for r in below if j < len(r) and _kind(r[j]) == "number"]
        usual = max(set(seen), key=seen.count) if seen else None
        if usual is not None and _integer(c) != usual:
            return None
    return False


def _numbers_like_data(first: list[str], below: list[list[str]]) -> str:
    """For a first row read as the header: what to say when it holds a number of its column's kind
    (an integer above integers, a decimal above decimals), as a data row would; empty otherwise.

    ``0.3456,#N/A`` above ``0.8216,-0.8216`` is data whose second cell Excel could not compute;
    ``region,2022,2023`` above ``north,1.5,1.7`` names yearly columns (integers above decimals)."""
    like = []
    for j, c in enumerate(first):
        if _kind(c) != "number":
            continue
        seen = [_integer(r[j]) for r in below if j < len(r) and _kind(r[j]) == "number"]
        if seen and _integer(c) == max(set(seen), key=seen.count):
            like.append(c.strip())
    if not like:
        return ""
    return (f"it holds {'a number' if len(like) == 1 else 'numbers'} ({', '.join(like[:3])}"
            f"{', ...' if len(like) > 3 else ''}) like the rows below it; if the line is data, pass --header no")


def _is_data_row(first: list[str], below: list[list[str]]) -> tuple[bool, str]:
    """Whether the first row of a delimited file is data rather than a header (module docstring), and
    what to say when that is a guess."""
    kinds = [_kind(c) for c in first]
    if all(k == "number" for k in kinds):
        return True, ""
    if len(first) > 1 and not first[0].strip() and all(k == "number" for k in kinds[1:]):
        pandas = _index_header(first, below)
        if pandas is False:
            return True, ("its first cell is empty and its other cells are numbers like the rows below: if it is a "
                          "header above an unnamed index, pass --header yes")
        if pandas is None:
            return False, ("its first cell is empty and its numbers are not of their columns' kind (integers "
                           "above decimals, or the reverse): read as the header above an unnamed index; if it is "
                           "data, pass --header no")
        return False, ""  # the header pandas writes above an unnamed index: ",0,1"
    if not below or not any(k in ("number", "date") for k in kinds):
        return False, ""
    if "text" in kinds:  # "region,2022,2023" names yearly columns above "north,1.5,1.7": a header
        return False, _numbers_like_data(first, below)
    for j, k in enumerate(kinds):
        seen = [_kind(r[j]) for r in below if j < len(r)]
        seen = [s for s in seen if s is not None]
        # a column's usual kind, so that one bad cell below does not make a header name fit
        usual = max(set(seen), key=seen.count) if seen else None
        if k is not None and usual is not None and k != usual:
            return False, _numbers_like_data(first, below)
    return True, ""


#: a line as ``io.StringIO(text, newline="")`` yields it (ending at \n, \r\n or \r, the ending kept), found
#: in the text itself rather than in a copy of it
_LINE = re.compile(r"[^\r\n]*(?:\r\n?|\n)|[^\r\n]+")

#: float64 holds every integer below 2**53 exactly; above, an integer cell's own digits are kept
_EXACT = float(2 ** 53)


def _may_be_time(columns: list[str] | None, time_column: str | None):
    """Whether a column, by its name, may become the time axis (whose labels need the cells' text)."""
    selected = list(columns or [])
    if time_column == "none":
        return lambda h: False
    if time_column is not None:
        return lambda h: h == time_column
    return lambda h: h not in selected and is_time_name(h)


class _Column:
    """A column read cell by cell: its values as float64 (NaN for a missing value or a cell that is not a
    number), with only what the messages, notes and time axis need of the cells' text; a file's
    strings are not all kept until its last row is read.

    ``keep``: the column may become the time axis, whose labels are the cells' text when no cell is a
    number (dates), and a bad cell's text when some are."""

    __slots__ = ("values", "numeric", "bad", "first_bad", "commas", "filled", "keep", "texts", "distinct",
                 "odd", "exact")

    def __init__(self, keep: bool):
        self.values = array("d")
        self.numeric = False  # a cell holds a number
        self.bad = 0  # cells that are neither a number nor missing
        self.first_bad: tuple[int, str] | None = None  # (row, cell) of the first of them
        self.commas = True  # each of them, while no cell is a number, is a number written with a comma
        self.filled = False  # a cell holds more than whitespace
        self.keep = keep
        self.texts: list[str] | None = [] if keep else None  # every cell, while no cell is a number
        # the different values (stripped, not empty) of a column without a number: a key's note
        self.distinct: set[str] | None = None if keep else set()
        self.odd: dict[int, str] = {}  # row -> cell that is not a number, in a numeric column kept
        # row -> cell of an integer whose own digits label the time axis where float64 may differ
        # (beyond 2**53) or int() may read the cell differently (whitespace other than spaces and tabs)
        self.exact: dict[int, str] = {}

    def add(self, cell: str) -> None:
        c = cell.strip()
        if c.lower() in MISSING:
            self.values.append(math.nan)
            if c:
                self.filled = True
            if self.texts is not None:
                self.texts.append(cell)
            elif self.distinct is not None and c:
                self.distinct.add(c)
            return
        self.filled = True
        if _NUMBER.fullmatch(c):  # as _number() reads a cell
            v = float(c)
            if math.isfinite(v):
                i = len(self.values)
                self.values.append(v)
                if not self.numeric:
                    self._numeric()
                if (v >= _EXACT or v <= -_EXACT or (cell is not c and cell.strip(" \t") != c)) and _INT.fullmatch(c):
                    self.exact[i] = cell
                return
        i = len(self.values)
        self.values.append(math.nan)
        self.bad += 1
        if self.first_bad is None:
            self.first_bad = (i, cell)
        if self.numeric:
            if self.keep:
                self.odd[i] = cell
            return
        if self.commas and not _comma_hint(cell):
            self.commas = False
        if self.texts is not None:
            self.texts.append(cell)
        elif self.distinct is not None:
            self.distinct.add(c)

    def _numeric(self) -> None:
        """The first number: the column is numeric, its text cells before it are bad cells."""
        self.numeric = True
        if self.texts is not None:
            self.odd = {i: c for i, c in enumerate(self.texts) if c.strip().lower() not in MISSING}
        self.texts = self.distinct = None

    def array(self) -> np.ndarray:
        return np.frombuffer(self.values, dtype=np.float64) if self.values else np.zeros(0)

    def distinct_values(self) -> set[str]:
        if self.texts is not None:
            return {c.strip() for c in self.texts} - {""}
        return self.distinct or set()


def _records(text: str, delimiter: str, name: str):
    """(line, cells) of each record of a delimited text in turn, and (line, None) of each blank line."""
    # the raw lines of each record: csv.reader gives [''] for both a blank line and a line '""'
    consumed: list[str] = []

    def lines_of():
        for m in _LINE.finditer(text):
            raw = m.group()
            consumed.append(raw)
            yield raw

    reader = csv.reader(lines_of(), delimiter=delimiter)
    # a line of tabs is whitespace to str.strip(), but in a TSV it is a row of missing values (before
    # the header, it is skipped as a blank line is; with a space for the separator, a line of spaces
    # stays blank)
    tabs = delimiter == "\t"
    seen = False
    while True:
        try:
            row = next(reader, None)
        except csv.Error as exc:
            raise TableError(f"{name} line {reader.line_num}: not readable as delimited text ({exc}); "
                             "give a CSV, TSV or JSON-lines file") from None
        if row is None:
            return
        raw = consumed[0] if len(consumed) == 1 else "".join(consumed)
        consumed.clear()
        if raw.strip() or (tabs and seen and "\t" in raw):
            seen = True
            yield reader.line_num, row
        else:
            yield reader.line_num, None


class _DataRows:
    """The data rows of a delimited text as (line, cells), read again from the text at each pass rather
    than kept (a check that follows every row is rare; most stop at the first row)."""

    def __init__(self, text: str, delimiter: str, name: str, header: bool, drop: set[int]):
        self.text, self.delimiter, self.name, self.header, self.drop = text, delimiter, name, header, drop

    def __iter__(self):
        records = ((ln, r) for ln, r in _records(self.text, self.delimiter, self.name) if r is not None)
        if self.header:
            next(records, None)
        for ln, r in records:
            yield ln, ([c for j, c in enumerate(r) if j not in self.drop] if self.drop else r)


def _first_lines(text: str, n: int) -> list[str]:
    """``text.splitlines()[:n]``, from as much of the start of the text as holds them."""
    size = 1 << 16
    while True:
        lines = text[:size].splitlines()
        # more than n pieces: the first n end within the part read, as in the whole text
        if len(lines) > n or size >= len(text):
            return lines[:n]
        size *= 4


def _delimited_rows(text: str, name: str, delimiter: str | None, has_header: bool | None, keep):
    notes: list[str] = []
    sniffed = delimiter is None
    if delimiter is None:
        sample = "\n".join(_first_lines(text, 50))
        try:
            delimiter = csv.Sniffer().sniff(sample, delimiters=DELIMITERS).delimiter
        except csv.Error:
            delimiter = ","  # one column, or nothing the sniffer could tell apart
    scan = _records(text, delimiter, name)
    # blank lines before the first record, and after it: (count, the first five)
    blank = [[0, []], [0, []]]
    # the first records decide the header; only they are kept as text
    head: list[tuple[int, list[str]]] = []
    for ln, row in scan:
        if row is None:
            b = blank[bool(head)]
            b[0] += 1
            if len(b[1]) < 5:
                b[1].append(ln)
            continue
        head.append((ln, row))
        if len(head) > 50:
            break
    if not head:
        raise TableError(f"{name} is empty; expected a header row and data rows")
    first_line, first = head[0]
    guess = ""
    if has_header is not None:
        no_header = not has_header
    else:
        no_header, guess = _is_data_row(first, [r for _, r in head[1:51]])
    if guess and not no_header:
        shown = ", ".join(c.strip() for c in first[:5]) + (", ..." if len(first) > 5 else "")
        notes.append(f"{name}: line {first_line} ({shown}) read as the header: {guess}")
    if no_header:
        header = [f"col{j + 1}" for j in range(len(first))]
        shown = ", ".join(c.strip() for c in first[:5]) + (", ..." if len(first) > 5 else "")
        numbers = has_header is None and all(_kind(c) == "number" for c in first)
        why = "" if has_header is not None or numbers else " like the rows below it"
        notes.append(f"{name}: no header row (line {first_line}: {shown} reads as data{why}); columns named "
                     f"{', '.join(header[:3])}{', ...' if len(header) > 3 else ''}"
                     # the one case the reader cannot tell apart: say how to make the names count
                     + ("; if that line is a header of numbers (sensor IDs), pass --header yes or give "
                        "its names a letter (s101)" if numbers else "")
                     + (f"; a guess: {guess}" if guess else ""))
        data = head
    else:
        header = [h.strip() for h in first]
        data = head[1:]
    # each data row's cells go to their columns as they are read
    width = len(header)
    cols = [_Column(keep(h)) for h in header]
    lines = array("q")  # the line of each data row
    longest = 0
    long, first_long = 0, None
    for ln, r in chain(data, scan):
        if r is None:
            b = blank[1]
            b[0] += 1
            if len(b[1]) < 5:
                b[1].append(ln)
            continue
        lines.append(ln)
        n = len(r)
        if n > longest:
            longest = n
        if n == width:
            for col, c in zip(cols, r):
                col.add(c)
            continue
        if n > width and any(c.strip() for c in r[width:]):
            long += 1
            if first_long is None:
                first_long = (ln, r)
        for j, col in enumerate(cols):
            col.add(r[j] if j < n else "")
    del head, data
    drop: set[int] = set()
    if not no_header and header.count("") > 1:
        # blank columns a spreadsheet exports at the end of its used range ("time;value;;"): unnamed
        # columns whose cells are all empty are dropped, as extra empty cells of a row are
        # (one such column is read, and noted, as a column without numbers)
        drop = {j for j, h in enumerate(header) if not h and not cols[j].filled}
        if drop:
            header = [h for j, h in enumerate(header) if j not in drop]
            cols = [col for j, col in enumerate(cols) if j not in drop]
    if not lines:
        raise TableError(f"{name} has a header but no data rows")
    if first_long is not None:
        # a row is long with the dropped columns as without them: they hold nothing in any row
        ln, r = first_long
        if drop:
            r = [c for j, c in enumerate(r) if j not in drop]
        what = "the header" if not no_header else "the first row (no header)"
        if first[0].lstrip().startswith("#"):
            hint = "lines starting with '#' are not skipped as comments: remove them"
        elif delimiter == ",":
            hint = _split_number_hint(r)
        else:
            hint = "name every column in the header, or fix the row"
        more = f"; {long - 1} more such row(s)" if long > 1 else ""
        raise TableError(f"{name} line {ln} has {len(r)} cells, {what} {len(header)}{more}: {hint}")
    if sniffed:
        _check_sniffed_separator(name, delimiter, _DataRows(text, delimiter, name, not no_header, drop),
                                 no_header, notes, longest)
    count, shown_lines = blank[1] if not no_header else (blank[0][0] + blank[1][0], blank[0][1] + blank[1][1])
    if count:
        shown = ", ".join(str(b) for b in shown_lines[:5]) + (", ..." if count > 5 else "")
        notes.append(f"{name}: skipped {count} blank line(s) (line {shown}); indices count data rows "
                     "from 0, header and blank lines not counted")
    return header, cols, lines, notes


def _comma_number(cell: str) -> bool:
    """Whether a cell is a number written with a decimal comma or thousands separators (``0,346``)."""
    c = cell.strip()
    return bool(_DECIMAL_COMMA.fullmatch(c) or _THOUSANDS.fullmatch(c))


_INT = re.compile(r"[-+]?[0-9]+")
_DIGITS = re.compile(r"[0-9]+")
_UP_TO_THOUSAND = re.compile(r"[-+]?[0-9]{1,3}")
_GROUP_WITH_FRACTION = re.compile(r"[0-9]{3}\.[0-9]+")
_DECIMAL_UP_TO_THOUSAND = re.compile(r"[-+]?[0-9]{1,3}\.[0-9]+")


def _check_sniffed_separator(name: str, delimiter: str, data, no_header: bool, notes: list[str], width: int):
    """Stop when the separator found by the sniffer splits the file's numbers, rather than read other
    numbers silently. Only a separator the user did not give is checked (``--delimiter`` decides).

    - A comma-separated file whose every data row, split at another separator (``;``, tab, ``|``)
      instead, is numbers, some with decimal commas (``0,346;-0,346``): it is separated by that one.
    - A comma-separated file without a header, in which an integer column is followed by a column
      of unsigned digits that can only be the digits after a decimal comma: an integer part ``-0``
      (no integer is written so), or digits with a leading zero in two lengths or more (``035`` and
      ``0822``: zero-padded numbers all have one length). Integer tables (counts, IDs, zero-padded
      IDs) have neither. Fraction digits of one length (``0,346`` ``1,082``) of numbers never
      between -1 and 0 cannot be told from an integer column beside zero-padded ones (IDs, HHMM
      times): when some of them have a leading zero, a note says what they may be.
    - The same with a thousands separator: an integer of one to three digits followed by a cell of
      three digits and a fraction (``1,034.6``) in the rows of larger numbers, while other rows have
      one cell fewer and a decimal number where that integer stands (``999.1``). When every number
      is above 1000 no row is shorter; a fraction with a leading zero (``034.6``) gets a note.
    """
    if delimiter == ",":
        for other in DELIMITERS:
            if other == ",":
                continue
            # each row's line split at the other separator: pieces that hold a comma are numbers
            # written with one (a cell "3;4" of a comma-separated "a,3;4,b" leaves "a,3" and "4,b")
            # (row by row: an ordinary file stops at its first row)
            split = ((ln, ",".join(r).split(other)) for ln, r in data)
            if all(len(p) > 1 and all(_comma_number(c) for c in p if "," in c) for _, p in split):
                commas = ((ln, p) for ln, p in ((ln, ",".join(r).split(other)) for ln, r in data)
                          if any("," in c for c in p))
                first = next(commas, None)
                if first:
                    ln, pieces = first
                    flag, what = ("tab", "a tab") if other == "\t" else (repr(other), repr(other))
                    raise TableError(
                        f"{name} line {ln}: read with ',' as the separator, but {what} separates its numbers "
                        f"written with decimal commas ({', '.join(c.strip() for c in pieces[:3])}"
                        f"{', ...' if len(pieces) > 3 else ''}), as on every data row: if {what} separates the "
                        f"cells, pass --delimiter {flag} and write decimal dots; if not, pass --delimiter ','",
                        notes)
    if delimiter != "," or not no_header:
        return
    # every pair of neighbouring columns (j, j + 1), followed in one pass over the rows; a pair is let go
    # at its first misfit (a column of decimals stops at its first cell), and the pass when all are
    pairs = [_Pair() for _ in range(width - 1)]
    live = len(pairs)
    for ln, r in data:
        n = len(r)
        for j in range(min(n, len(pairs))):
            p = pairs[j]
            if p.done:
                continue
            a = r[j].strip()
            b = r[j + 1].strip() if n > j + 1 else ""
            if not b:
                # a row with one cell fewer here (or an empty one): a smaller number, once the pair
                # reads as thousands
                if p.thousands and p.short is None and _DECIMAL_UP_TO_THOUSAND.fullmatch(a):
                    p.short = (ln, a)
                continue
            p.count += 1
            if p.first is None:
                p.first = (ln, a, b)
            if not _INT.fullmatch(a):
                p.integers = False
            if p.digits and not _DIGITS.fullmatch(b):
                p.digits = False
            if p.thousands and not (_UP_TO_THOUSAND.fullmatch(a) and _GROUP_WITH_FRACTION.fullmatch(b)):
                p.thousands = False
            if not p.integers or not (p.digits or p.thousands):
                p.done = True
                live -= 1
                continue
            if p.digits:
                if a == "-0" and p.negative is None:
                    p.negative = (ln, a, b)
                if len(b) > 1 and b[0] == "0":
                    p.padded += 1
                    if p.first_padded is None:
                        p.first_padded = (ln, a, b)
                    if len(p.lengths) < 2:
                        p.lengths.add(len(b))
            if p.thousands and b[0] == "0" and p.first_zero is None:
                p.first_zero = (ln, a, b)
        if not live:
            break
    for j, p in enumerate(pairs):
        if p.first is None or not p.integers:
            continue
        if p.digits:
            if p.negative or len(p.lengths) > 1:
                ln, a, b = p.negative or p.first_padded
                raise TableError(
                    f"{name} line {ln}: {a},{b} reads as two integers in columns col{j + 1} and col{j + 2}, but it "
                    f"looks like one number written with a decimal comma ({a}.{b}): write decimal dots; if the "
                    "cells are separated by another character, pass --delimiter CHAR; if they are integers, "
                    "pass --delimiter ','", notes)
            if p.padded and p.padded < p.count:
                ln, a, b = p.first_padded
                notes.append(f"{name}: col{j + 2} holds digits with a leading zero after the integers of col{j + 1} "
                             f"(line {ln}: {a},{b}): if they are the decimals of numbers written with a decimal "
                             f"comma ({a}.{b}), write decimal dots (without a header, the file cannot tell)")
        elif p.thousands:
            if p.short:
                ln, a, b = p.first
                raise TableError(
                    f"{name} line {ln}: {a},{b} reads as two cells, but it looks like one number written with a "
                    f"thousands separator ({a}{b}): rows of smaller numbers have one cell fewer (line {p.short[0]}: "
                    f"{p.short[1]}); remove the separators or quote such numbers; if the cells are separate, "
                    "pass --delimiter ','", notes)
            if p.first_zero:
                ln, a, b = p.first_zero
                notes.append(f"{name}: col{j + 2} holds numbers with a leading zero after the integers of col{j + 1} "
                             f"(line {ln}: {a},{b}): if they are numbers written with a thousands separator "
                             f"({a}{b}), remove the separators (without a header, the file cannot tell)")


class _Pair:
    """What the separator check has seen of two neighbouring columns (cell j, cell j + 1 not empty)."""

    __slots__ = ("count", "first", "integers", "digits", "thousands", "done", "negative", "padded",
                 "first_padded", "lengths", "short", "first_zero")

    def __init__(self):
        self.count, self.first = 0, None  # such rows, and the first (line, cell j, cell j + 1)
        self.integers = True  # every cell j is an integer
        self.digits = True  # every cell j + 1 is unsigned digits
        self.thousands = True  # every pair is 1-3 digits and 3 digits with a fraction (1,034.6)
        self.done = False  # neither reading is possible any more
        self.negative = None  # the first pair -0,digits
        self.padded, self.first_padded, self.lengths = 0, None, set()  # digits with a leading zero
        self.short = None  # the first row of a smaller number (999.1) where the pair has one cell
        self.first_zero = None  # the first group with a leading zero (1,034.6)


def _json_lines(text: str):
    """``text.split("\\n")`` without its last piece when empty, one piece at a time."""
    start = 0
    while True:
        end = text.find("\n", start)
        if end < 0:
            if start < len(text):
                yield text[start:]
            return
        yield text[start:end]
        start = end + 1


def _jsonl_rows(text: str, name: str, keep):
    header: list[str] = []
    seen: dict[str, int] = {}
    cols: list[_Column] = []
    lines = array("q")  # the line of each data row
    blank = 0
    nested = None  # (line, field) of the first nested value, told once every line has been read
    # lines end at \n (or \r\n) only: U+2028 and the like are characters a JSON string may hold
    for i, raw in enumerate(_json_lines(text), start=1):
        raw = raw.removesuffix("\r")
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
                col = _Column(keep(k))
                for _ in lines:  # a field first seen here is missing from the records above
                    col.add("")
                cols.append(col)
        if nested is None:
            row = [""] * len(header)
            for k, v in obj.items():
                if isinstance(v, (dict, list)):
                    nested = (i, k)
                    break
                row[seen[k]] = "" if v is None else (str(v).lower() if isinstance(v, bool) else str(v))
            else:
                for col, c in zip(cols, row):
                    col.add(c)
        lines.append(i)
    notes = []
    if blank:
        notes.append(f"{name}: skipped {blank} blank line(s); indices count records from 0")
    if nested is not None:
        raise TableError(f"{name} line {nested[0]}, field {nested[1]!r}: nested values are not read; "
                         "give one number per field")
    return header, cols, lines, notes


def _columns(name, header, cols, lines, notes, columns, time_column, bad_cells) -> Table:
    if len(set(header)) != len(header):
        dup = sorted({h for h in header if header.count(h) > 1})
        raise TableError(f"{name}: duplicate column name(s) {dup} in the header; give each column its own "
                         "name, or pass --header no to read the first row as data (columns col1, col2, ...)")
    selected = list(columns or [])
    twice = sorted({c for c in selected if selected.count(c) > 1})
    if twice:  # one series fed twice would be two perfectly correlated channels
        raise TableError(f"--column {twice[0]!r} is given more than once; name each column once")
    if time_column in selected:
        raise TableError(f"{time_column!r} is given both as --column and as --time-column; a column is "
                         "either a series or the time axis")
    asked = selected + ([time_column] if time_column not in (None, "none") else [])
    for c in asked:
        if c not in header:
            flag = "--column" if c in selected else "--time-column"
            raise TableError(f"{flag} {c!r} is not a column of {name}; columns: {header}")
    column = dict(zip(header, cols))
    parsed: dict[str, np.ndarray] = {}
    text_cols: list[str] = []
    for h, col in column.items():
        if not col.numeric:
            text_cols.append(h)  # not one number: a text column (names, dates) or an empty one
            continue
        if col.bad and h != time_column:
            i, cell = col.first_bad
            if bad_cells == "error":
                hint = _comma_hint(cell)
                hint = f" ({hint})" if hint else ""
                more = f"; {col.bad - 1} more such cell(s) in this column" if col.bad > 1 else ""
                raise TableError(
                    f"{name} line {lines[i]}, column {h!r}: {cell!r} is not a number{hint}{more}. "
                    "Fix the cell, or pass --bad-cells missing to read such cells as missing values")
            notes.append(f"{name}: column {h!r}: {col.bad} non-numeric cell(s) read as missing values "
                         f"(first at line {lines[i]}: {cell!r})")
        parsed[h] = col.array()  # a bad cell is NaN already
    # the time axis: given, or found by name, or by equal steps
    time_name, also_time = None, []
    if time_column not in (None, "none"):
        time_name = time_column
    elif time_column is None:
        named = [h for h in header if is_time_name(h) and h not in selected]
        # a name alone does not make a time axis: its numbers must also be in order (either way: a
        # newest-first export gets its own note below); 'T' or 'index' may well be a measurement
        unordered = [h for h in named if h in parsed and not _monotonic(parsed[h])]
        named = [h for h in named if h not in unordered]
        for h in unordered:
            notes.append(f"{name}: column {h!r} is named like a time axis or index but its values are not in "
                         f"order: read as a series (pass --time-column {h} to make it the time axis)")
        ramps = [h for h in parsed if h not in named and h not in selected and _equal_steps(parsed[h])]
        free = [h for h in parsed if h not in selected]
        # an equal-step column is an index only when another numeric column is left to watch
        cands = named or (ramps[:1] if len(free) > 1 else [])
        if cands:
            time_name, also_time = cands[0], cands[1:]
            why = "its name" if is_time_name(time_name) else "it counts up in equal steps"
            notes.append(f"{name}: column {time_name!r} read as the time axis ({why}), not as a series; "
                         "choose another with --time-column NAME, or --time-column none")
    # a column of numbers written with commas holds no number float() reads, so it looks like text;
    # the row of its first such cell, to show
    # (in a column without a number, every cell that is not missing is a bad cell)
    comma_cols: dict[str, tuple[int, str]] = {}
    for h in text_cols:
        if column[h].first_bad is not None and column[h].commas:
            comma_cols[h] = column[h].first_bad

    def comma_error(h):
        i, cell = comma_cols[h]
        return TableError(f"{name} line {lines[i]}, column {h!r}: {cell!r} is not a number "
                          f"({_comma_hint(cell)}); no cell of the column is read as a number")

    if selected:
        empty = [c for c in selected if c in text_cols]
        if empty and empty[0] in comma_cols:
            raise comma_error(empty[0])
        if empty:
            raise TableError(f"{name}: column {empty[0]!r} is not numeric (no cell holds a number)")
        use = selected
    else:
        use = [h for h in parsed if h != time_name and h not in also_time]
        unused_text = [h for h in text_cols if h != time_name]
        commas = [h for h in unused_text if h in comma_cols]
        if commas and bad_cells == "error":
            raise comma_error(commas[0])
        for h in commas:
            i, cell = comma_cols[h]
            notes.append(f"{name}: column {h!r} is not used: {_comma_hint(cell)} (line {lines[i]}: {cell!r})")
        unused_text = [h for h in unused_text if h not in comma_cols]
        if unused_text:
            notes.append(f"{name}: column(s) {unused_text} hold no number and are not used")
        for h in unused_text:
            # a key column (host, sensor) whose values repeat: rows of several series are interleaved
            distinct = column[h].distinct_values()
            if 1 < len(distinct) <= len(lines) // 2:
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
        col = column[time_name]
        if tv is not None:  # numbers stay numbers; a missing time is None (null in JSON)
            # an integer is the cell's own (a float64 keeps 53 bits: epoch nanoseconds would change);
            # the column kept the text of such cells, and of the cells that are not numbers
            exact, odd = col.exact, col.odd
            time_values = [((int(exact[i]) if i in exact else int(v)) if v.is_integer() else v)
                           if v == v else (odd[i].strip() if i in odd else None)
                           for i, v in enumerate(col.values)]
        else:
            time_values = [c.strip() for c in col.texts]
        # ISO dates and times compare as text in time order; numbers as numbers
        known = [v for v in time_values if v is not None and v != ""]
        if len({type(v) is str for v in known}) > 1:
            known = []  # numbers and text: no order to speak of
        if len(known) >= 3 and all(a > b for a, b in zip(known, known[1:])):
            notes.append(f"{name}: the time axis {time_name!r} decreases (newest row first?); rows are read in "
                         "file order, so every change would be read backwards: sort the file by time first")
    return Table(name, use, values, list(lines), time_name, time_values, notes)

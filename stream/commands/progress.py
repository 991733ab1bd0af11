"""Progress bars on stderr (tqdm), shown only when stderr is a terminal.

A log file or a pipe gets no bar (no carriage returns in logs); a terminal gets one that tqdm keeps
on one line and removes when the work is done.

Examples
--------
>>> import io
>>> list(track([1, 2, 3], desc="x", stream=io.StringIO()))  # not a terminal: the iterable itself
[1, 2, 3]
>>> with progress_bar(10, "x", stream=io.StringIO()) as bar:
...     bar is None
True
>>> with stages("bench", 2, stream=io.StringIO()) as phase:
...     phase("first"); phase("second")
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager


def _is_terminal(stream) -> bool:
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except (OSError, ValueError):  # closed or detached stream
        return False


class _Bar:
    """A tqdm bar driven by ``callback(done, total)`` (the progress hook of the replay)."""

    def __init__(self, bar):
        self._bar = bar

    def callback(self, done: int, total: int) -> None:
        if total != self._bar.total:
            self._bar.total = total
        self._bar.update(done - self._bar.n)


@contextmanager
def progress_bar(total: int, desc: str, unit: str = "it", enabled: bool = True, stream=None) -> Iterator[_Bar | None]:
    """A bar with a ``callback(done, total)`` when ``enabled`` and ``stream`` (stderr) is a terminal, else None."""
    out = sys.stderr if stream is None else stream
    if not (enabled and _is_terminal(out)):
        yield None
        return
    from tqdm import tqdm

    with tqdm(total=total, desc=desc, unit=unit, file=out, leave=False, dynamic_ncols=True) as bar:
        yield _Bar(bar)


def track(iterable: Iterable, desc: str, total: int | None = None, unit: str = "it", stream=None) -> Iterable:
    """``iterable`` with a bar on ``stream`` (stderr) when it is a terminal; else ``iterable`` itself."""
    out = sys.stderr if stream is None else stream
    if not _is_terminal(out):
        return iterable
    from tqdm import tqdm

    return tqdm(iterable, desc=desc, total=total, unit=unit, file=out, leave=False, dynamic_ncols=True)


class _Stages:
    """``phase(name)``: the previous phase is done, ``name`` runs now (shown after the bar)."""

    def __init__(self, bar):
        self._bar, self._running = bar, False

    def __call__(self, name: str) -> None:
        if self._bar is None:
            return
        if self._running:
            self._bar.update(1)
        self._running = True
        self._bar.set_postfix_str(name)


@contextmanager
def stages(desc: str, total: int, stream=None) -> Iterator[_Stages]:
    """A bar over ``total`` named phases of a long run (benchmarks), when ``stream`` (stderr) is a terminal.

    Phases are marked between timed regions, never inside one: the bar costs the timings nothing.
    """
    out = sys.stderr if stream is None else stream
    if not _is_terminal(out):
        yield _Stages(None)
        return
    from tqdm import tqdm

    with tqdm(total=total, desc=desc, unit="phase", file=out, leave=False, dynamic_ncols=True,
              bar_format="{desc}: {n_fmt}/{total_fmt} phases done{postfix} [{elapsed}]") as bar:
        yield _Stages(bar)

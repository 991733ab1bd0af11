"""The reason a per-series run failed, and the one failure that is not a series' own: an interrupt.

Evaluation scores a failed series 0 and records why (the benchmark rule), then goes on with the
next series. A Ctrl-C must not be swallowed that way. It normally arrives as ``KeyboardInterrupt``,
which ``except Exception`` does not catch; but when the signal's handler runs while numba's
dispatcher is in Python code around a compiled call, CPython reports it as a ``SystemError``
("... returned a result with an exception set") whose ``__cause__`` is the ``KeyboardInterrupt``.

>>> failure_reason(ValueError("series is empty"))
'ValueError: series is empty'
>>> err = SystemError("CPUDispatcher(...) returned a result with an exception set")
>>> err.__cause__ = KeyboardInterrupt()
>>> interrupted(err), interrupted(ValueError("series is empty"))
(True, False)
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading

#: set by :func:`guarded`'s SIGINT handler; an interrupt raised where it is swallowed still counts
_pending = {"sigint": False}


def interrupted(exc: BaseException) -> bool:
    """True if ``exc`` is, or was caused by, a ``KeyboardInterrupt`` (following ``__cause__`` and
    ``__context__``; each exception is visited once)."""
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        if isinstance(e, KeyboardInterrupt):
            return True
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return False


def failure_reason(exc: BaseException) -> str:
    """``"Type: message"`` for a series' row; raises ``KeyboardInterrupt`` instead if ``exc`` came
    from one, so that the run stops as the user asked."""
    if interrupted(exc) or _pending["sigint"]:
        raise KeyboardInterrupt from exc
    return f"{type(exc).__name__}: {exc}"


def check_interrupt() -> None:
    """Raise ``KeyboardInterrupt`` if a Ctrl-C arrived under :func:`guarded` and was swallowed."""
    if _pending["sigint"]:
        raise KeyboardInterrupt


@contextlib.contextmanager
def guarded():
    """Make a Ctrl-C stop the block even where its ``KeyboardInterrupt`` is swallowed.

    While numba compiles, the interrupt is often raised inside one of llvmlite's ctypes callbacks,
    where ctypes reports it as "Exception ignored on calling ctypes callback function" and carries
    on: the run would finish and print its result as if nothing had happened. Here SIGINT is
    recorded before the ``KeyboardInterrupt`` is raised, the swallowed report is not printed, and the
    block (and :func:`failure_reason`, :func:`check_interrupt` within it) raise it again. Outside
    the main thread, or when SIGINT is not Python's default handler, nothing changes.
    """
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield
        return

    def on_sigint(signum, frame):
        _pending["sigint"] = True
        raise KeyboardInterrupt

    previous_hook = sys.unraisablehook

    def unraisable(report):
        if isinstance(report.exc_value, KeyboardInterrupt) and _pending["sigint"]:
            return  # raised again below, once control is back in the block
        previous_hook(report)

    _pending["sigint"] = False
    signal.signal(signal.SIGINT, on_sigint)
    sys.unraisablehook = unraisable
    try:
        yield
        check_interrupt()
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        if sys.unraisablehook is unraisable:
            sys.unraisablehook = previous_hook
        _pending["sigint"] = False

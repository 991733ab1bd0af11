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
    if interrupted(exc):
        raise KeyboardInterrupt from exc
    return f"{type(exc).__name__}: {exc}"

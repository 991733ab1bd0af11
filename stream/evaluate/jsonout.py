"""Strict JSON for the ``--json`` output of ``ratiowatch eval ...`` and ``ratiowatch bench ...``,
and the benchmarks' JSON files read with errors that name the file.

Python's ``json`` writes a non-finite float as ``NaN`` / ``Infinity``, which is not JSON (RFC 8259):
strict parsers (``jq``, browsers, most other languages) reject the whole document. A result's
non-finite numbers mean "no value" (a mean over nothing, a threshold that flags no row), so they
are written as ``null``.

Examples
--------
>>> dumps({"a": float("nan"), "b": [1.5, float("inf")], "c": (2, None)})
'{"a": null, "b": [1.5, null], "c": [2, null]}'
"""

from __future__ import annotations

import json
import math
from pathlib import Path


def finite(obj):
    """``obj`` with every non-finite float (in dicts, lists and tuples, at any depth) made None."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite(v) for v in obj]
    return obj


def dumps(obj, **kwargs) -> str:
    """``json.dumps`` of :func:`finite` ``(obj)``, refusing anything non-finite left over."""
    return json.dumps(finite(obj), allow_nan=False, **kwargs)


def read_json(path) -> object:
    """The parsed JSON of ``path``; ValueError naming the file when it is not JSON."""
    try:
        return json.loads(Path(path).read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not JSON (not UTF-8 text)") from None

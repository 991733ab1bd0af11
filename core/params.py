"""Constructor parameter checks: the right type, or an error that names the parameter.

A float where an integer is expected (``n_centres=2.5``) must not be truncated, a string
(``buffer_size='500'``) must not be converted silently, and a bad seed must fail at the
constructor, not deep inside numpy. ``bool`` is rejected where a number is expected (``True`` is
an ``int`` in Python, but never meant as one here).

Examples
--------
>>> check_int(5, "n_centres", minimum=1)
5
>>> check_int(2.5, "n_centres")
Traceback (most recent call last):
...
TypeError: n_centres must be an integer; got 2.5 (float)
"""

from __future__ import annotations

import math
import numbers

import numpy as np


def check_int(value, name: str, *, minimum: int | None = None) -> int:
    """``value`` as an ``int`` (numpy integers accepted); ``TypeError``/``ValueError`` naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer; got {value!r} ({type(value).__name__})")
    value = int(value)
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}; got {value}")
    return value


def check_real(value, name: str) -> float:
    """``value`` as a finite ``float`` (ints and numpy floats accepted); errors name ``name``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number; got {value!r} ({type(value).__name__})")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite; got {value}")
    return value


def check_bool(value, name: str) -> bool:
    """``value`` must be ``True`` or ``False`` (a string such as ``'no'`` is not)."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False; got {value!r} ({type(value).__name__})")
    return bool(value)


def check_seed(value, name: str = "seed") -> int:
    """A seed for ``np.random.default_rng``: a non-negative integer."""
    return check_int(value, name, minimum=0)


def check_choice(value, name: str, choices) -> str:
    """``value`` must be one of ``choices`` (strings)."""
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name} must be one of {tuple(choices)}; got {value!r}")
    return value

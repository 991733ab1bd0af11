"""Input validation shared by every estimator: clear ``ValueError`` messages, never silent NaN."""

from __future__ import annotations

import numbers

import numpy as np


def as_samples(x, name: str, *, min_samples: int = 1, dim: int | None = None) -> np.ndarray:
    """Return ``x`` as a C-contiguous float64 array of shape (n, d).

    A 1-d input is read as n scalar samples (d = 1). Raises ``ValueError`` naming ``name`` when
    the input is empty, has more than two dimensions, holds NaN or infinity or a number beyond
    float64 (a Python int such as ``10**400``), has fewer than ``min_samples`` rows, or does not
    have ``dim`` columns, or is a masked array with masked entries (their values are not data, and
    converting it would keep them).

    Examples
    --------
    >>> as_samples([1.0, 2.0, 3.0], "x").shape
    (3, 1)
    """
    if np.ma.isMaskedArray(x) and np.ma.getmaskarray(x).any():
        raise ValueError(f"{name} is a masked array with {int(np.ma.count_masked(x))} masked value(s); fill them "
                         "(x.filled(value)) or drop their rows (x.compressed() for 1-d samples) first")
    try:
        arr = np.asarray(x, dtype=np.float64)
    except OverflowError:  # a Python int beyond float64 (e.g. 10**400): an error code rather than a reading
        raise ValueError(f"{name} holds a value beyond the range of float64 (magnitude above "
                         f"{np.finfo(np.float64).max:.3g}); clean the data or rescale it (divide it by a constant, "
                         "e.g. change its units)") from None
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be numeric samples of shape (n, d); got {type(x).__name__}: {exc}") from None
    if arr.ndim == 1:
        arr = arr[:, None]
    elif arr.ndim != 2:
        raise ValueError(f"{name} must have shape (n, d) or (n,); got shape {arr.shape}")
    if arr.shape[0] < min_samples:
        raise ValueError(f"{name} needs at least {min_samples} samples; got {arr.shape[0]}")
    if arr.shape[1] == 0:
        raise ValueError(f"{name} has zero features; each sample needs at least one value")
    if dim is not None and arr.shape[1] != dim:
        raise ValueError(f"{name} has {arr.shape[1]} features but {dim} were expected")
    if not np.isfinite(arr).all():  # the method: a fraction of np.all's call cost on one row
        bad = int(np.count_nonzero(~np.isfinite(arr)))
        raise ValueError(f"{name} contains {bad} NaN or infinite value(s); clean or impute them first")
    return np.ascontiguousarray(arr)


def check_pair(x_nu, x_de, *, min_samples: int = 2) -> tuple[np.ndarray, np.ndarray]:
    """Validate a numerator/denominator sample pair with the same number of features."""
    x_nu = as_samples(x_nu, "x_nu (numerator samples)", min_samples=min_samples)
    x_de = as_samples(x_de, "x_de (denominator samples)", min_samples=min_samples, dim=x_nu.shape[1])
    return x_nu, x_de


def positive_grid(values, name: str) -> np.ndarray:
    """A non-empty 1-d grid of strictly positive finite floats."""
    arr = np.atleast_1d(np.asarray(values, dtype=np.float64))
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-d sequence of positive numbers")
    if not np.all(np.isfinite(arr)) or np.any(arr <= 0):
        raise ValueError(f"{name} must hold strictly positive finite numbers; got {arr.tolist()}")
    return arr


def check_alpha(alpha: float) -> float:
    """The relative-ratio mixture weight must be a real number (not a string or a bool) in [0, 1)."""
    if isinstance(alpha, (bool, np.bool_)) or not isinstance(alpha, numbers.Real):
        raise TypeError(f"alpha must be a real number; got {alpha!r} ({type(alpha).__name__})")
    alpha = float(alpha)
    if not (0.0 <= alpha < 1.0):
        raise ValueError(f"alpha must be in [0, 1); got {alpha}")
    return alpha


def as_plain(value):
    """A numpy scalar as the Python scalar it equals (``np.int64(3)`` -> ``3``, ``np.float32(0.5)``
    -> ``0.5``, ``np.True_`` -> ``True``, ``np.str_("a")`` -> ``"a"``); anything else as it is.

    Constructor parameters pass through it before they are kept: they end up in a checkpoint's
    JSON, which takes no numpy scalar, and they keep the type a caller of ``get_params`` expects.

    Examples
    --------
    >>> as_plain(np.int64(1500)), as_plain(np.True_), as_plain(0.1)
    (1500, True, 0.1)
    """
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    if isinstance(value, np.str_):
        return str(value)
    return value


def make_rng(seed) -> np.random.Generator:
    """A private generator: estimators never touch numpy's global RNG."""
    if isinstance(seed, np.random.Generator):
        return seed
    if isinstance(seed, numbers.Integral) and not isinstance(seed, (bool, np.bool_)) and seed < 0:
        raise ValueError(f"seed must be a non-negative integer or a numpy Generator; got {seed}")
    return np.random.default_rng(seed)


# --- checkpoint entries, checked before they reach the compiled loops -------------------------------
# A checkpoint is a mapping of names to arrays; a part of one (a view's state inside a detector's)
# may name its entries and its class by ``entry_name(key)`` and ``checkpoint_class`` (as
# ratiowatch.stream.detectors.state_file.CheckpointEntries does), so an error names the entry as
# the whole checkpoint has it.
def entry_name(state, key: str) -> str:
    """``key`` as the whole checkpoint names it (with the prefix of the part it was read from)."""
    name = getattr(state, "entry_name", None)
    return name(key) if callable(name) else key


def checkpoint_class(state, default: str) -> str:
    """The class the whole checkpoint is of, or ``default`` when ``state`` does not say."""
    return getattr(state, "checkpoint_class", None) or default


def damaged_state(what: str, name: str, problem: str, meta: str | None = None) -> ValueError:
    """The error for entry ``name`` of a checkpoint of class ``what`` (of its meta entry ``meta``).

    >>> damaged_state("Detector", "ring", "is 7, out of its range [0, 5)")
    ValueError("not a Detector checkpoint, or a damaged one: 'ring' is 7, out of its range [0, 5)")
    """
    where = f" in {meta!r}" if meta is not None else ""
    return ValueError(f"not a {what} checkpoint, or a damaged one: {name!r}{where} {problem}")


def state_array(state, key: str, shape: tuple, *, integer: bool = False, finite: bool = True) -> np.ndarray:
    """Entry ``key`` of a checkpoint as an array of exactly ``shape``: integers if ``integer``, else
    real numbers (finite if ``finite``). A ``ValueError`` that names the entry otherwise: the
    compiled loops index rings by such arrays, and a wrong shape would be broadcast or cut silently.

    >>> state_array({"ring": np.zeros(3)}, "ring", (4,))
    Traceback (most recent call last):
    ...
    ValueError: not a detector checkpoint, or a damaged one: 'ring' has shape (3,), where its parameters give (4,)
    """
    arr = np.asarray(state[key])
    name, what = entry_name(state, key), checkpoint_class(state, "detector")
    if arr.shape != tuple(shape):
        raise damaged_state(what, name, f"has shape {arr.shape}, where its parameters give {tuple(shape)}")
    if arr.dtype.kind not in ("iu" if integer else "fiu"):
        raise damaged_state(what, name, f"must hold {'integers' if integer else 'real numbers'}; got dtype {arr.dtype}")
    if not integer and finite and not np.isfinite(arr).all():
        raise damaged_state(what, name, "holds NaN or infinite values")
    return arr


def state_flag(value, name: str, what: str, meta: str | None = None) -> bool:
    """A flag read from a checkpoint (entry ``name``, of the JSON entry ``meta`` if given): true or
    false and nothing else (``bool("no")`` is True); a ``ValueError`` that names it otherwise.

    >>> state_flag("no", "drift", "Detector", "meta")
    Traceback (most recent call last):
    ...
    ValueError: not a Detector checkpoint, or a damaged one: 'drift' in 'meta' must be true or false; got 'no'
    """
    if not isinstance(value, bool):
        raise damaged_state(what, name, f"must be true or false; got {value!r}", meta)
    return value


def state_range(value, name: str, what: str, low: int, high: int | None = None, meta: str | None = None) -> int:
    """A count or ring position read from a checkpoint (entry ``name``, of the JSON entry ``meta``
    if given): an integer in ``[low, high)`` (no upper bound if ``high`` is None); a
    ``ValueError`` that names it otherwise."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise damaged_state(what, name, f"must be an integer; got {value!r}", meta)
    if value < low or (high is not None and value >= high):
        bound = f"[{low}, {high})" if high is not None else f">= {low}"
        raise damaged_state(what, name, f"is {int(value)}, out of its range {bound}", meta)
    return int(value)

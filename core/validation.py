"""Input validation shared by every estimator: clear ``ValueError`` messages, never silent NaN."""

from __future__ import annotations

import numpy as np


def as_samples(x, name: str, *, min_samples: int = 1, dim: int | None = None) -> np.ndarray:
    """Return ``x`` as a C-contiguous float64 array of shape (n, d).

    A 1-d input is read as n scalar samples (d = 1). Raises ``ValueError`` naming ``name`` when
    the input is empty, has more than two dimensions, holds NaN or infinity or a number beyond
    float64 (a Python int such as ``10**400``), has fewer than ``min_samples`` rows, or does not
    have ``dim`` columns.

    Examples
    --------
    >>> as_samples([1.0, 2.0, 3.0], "x").shape
    (3, 1)
    """
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
    """The relative-ratio mixture weight must lie in [0, 1)."""
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
    return np.random.default_rng(seed)

"""Seeds, row picks and cross-validation folds shared by the estimators (KLIEP, LSDD).

Every random choice is a function of the sample *set* (keyed by its content in a canonical row
order), so results do not depend on the order in which a caller passes the rows.
"""

from __future__ import annotations

import hashlib

import numpy as np


def canonical_order(x: np.ndarray) -> np.ndarray:
    """Row indices of ``x`` in lexicographic order: random choices made on this order do not
    depend on how the caller ordered the rows."""
    return np.lexsort(x.T[::-1])


def int_seed(seed) -> int:
    """An integer seed (a Generator is drawn from once, so one fit uses one seed throughout)."""
    if isinstance(seed, np.random.Generator):
        return int(seed.integers(2**63 - 1))
    if seed is None:
        return 0
    seed = int(seed)
    if seed < 0:
        raise ValueError(f"seed must be a non-negative integer or a numpy Generator; got {seed}")
    return seed


def set_rng(seed: int, x: np.ndarray, tag: int) -> np.random.Generator:
    """A generator keyed by (seed, the sample set's content, purpose).

    Keying by content (a hash of the rows in canonical order) makes every random choice a function of
    the *set*: it does not depend on the row order nor on which role (first/second set) the set
    plays, while two different sets still get independent draws. Independence matters: folds drawn
    with one shared permutation for both sets hold out rank-matched points of the two sets, which
    correlates training and hold-out differences and makes CV reward over-fitting.
    """
    rows = x[canonical_order(x)] + 0.0  # + 0.0 maps -0.0 to 0.0: equal values, equal bytes
    digest = hashlib.blake2b(np.ascontiguousarray(rows).tobytes(), digest_size=8).digest()
    return np.random.default_rng([seed, int.from_bytes(digest, "little"), int(tag)])


def pick_rows(x: np.ndarray, pool: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """``k`` indices from ``pool`` (indices of rows of ``x``), chosen independently of the row order."""
    if k >= pool.size:
        return np.sort(pool)
    ordered = pool[canonical_order(x[pool])]
    return np.sort(ordered[rng.choice(pool.size, size=k, replace=False)])


FOLD_KINDS = ("random", "blocks")


def check_folds(kind: str) -> str:
    """Validate a fold kind: ``"random"`` or ``"blocks"``."""
    if kind not in FOLD_KINDS:
        raise ValueError(f"folds must be one of {FOLD_KINDS}; got {kind!r}")
    return kind


def check_n_folds(n_folds) -> int:
    """Validate a number of cross-validation folds: an integer >= 2 (one fold to fit, one to score).

    Examples
    --------
    >>> check_n_folds(5)
    5
    """
    if isinstance(n_folds, bool) or not isinstance(n_folds, (int, np.integer)) or n_folds < 2:
        raise ValueError(f"n_folds must be an integer >= 2 (one fold to fit, one to score); got {n_folds!r}")
    return int(n_folds)


def cv_folds(x: np.ndarray, n_folds: int, rng: np.random.Generator, kind: str = "random") -> np.ndarray:
    """Fold label in ``0..n_folds-1`` of every row, balanced.

    ``"random"``: a random split, independent of the row order. ``"blocks"``: contiguous blocks in
    the given row order, for time-ordered samples such as overlapping subsequences, whose
    neighbours are near copies and leak across a random split (Sugiyama et al. 2013, on cross-validating LSDD with dependent samples).
    """
    n = x.shape[0]
    if check_folds(kind) == "blocks":
        return np.arange(n) * n_folds // n
    labels = np.empty(n, dtype=np.int64)
    labels[canonical_order(x)] = rng.permutation(n) % n_folds
    return labels

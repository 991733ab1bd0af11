"""Permutation nulls: the score of random re-splits of the pooled past and current windows.

The pooled subsequences are shuffled (singly or in contiguous blocks), split into two windows and
scored again with the same sigma and lambda: the two-sample test of Sugiyama et al. (2011). Exact
for exchangeable windows; autocorrelated data need :mod:`.surrogate`.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ...core.gram_pe import pe_direction_from_gram


def block_permutation(size: int, block: int, rng: np.random.Generator) -> np.ndarray:
    """A permutation of ``range(size)`` that shuffles contiguous blocks of ``block`` indices.

    Neighbouring subsequences share samples and autocorrelated series keep short-range dependence;
    moving them as blocks keeps that dependence inside each resampled window, so the null is not
    narrower than the real one (plain shuffling over-fires on smooth series).

    Examples
    --------
    >>> p = block_permutation(10, 3, np.random.default_rng(0))
    >>> sorted(p.tolist()) == list(range(10))
    True
    """
    return block_permutations(size, block, 1, rng)[0]


def block_permutations(size: int, block: int, count: int, rng: np.random.Generator) -> np.ndarray:
    """``count`` independent block permutations (rows of a (count, size) array), vectorised.

    Examples
    --------
    >>> p = block_permutations(7, 3, 4, np.random.default_rng(0))
    >>> p.shape, all(sorted(row) == list(range(7)) for row in p.tolist())
    ((4, 7), True)
    """
    block = max(1, int(block))
    n_blocks = (size + block - 1) // block
    order = np.argsort(rng.random((count, n_blocks)), axis=1)  # a uniform shuffle per row
    if block == 1:  # the shuffle is the permutation (the general path below returns the same)
        return order
    starts = order * block
    lengths = np.minimum(block, size - starts)  # the last block may be short
    offsets = np.cumsum(lengths, axis=1) - lengths  # where each moved block lands
    shift = np.repeat((offsets - starts).ravel(), lengths.ravel()).reshape(count, size)
    return np.arange(size) - shift


def permutation_null_rulsif(pooled: np.ndarray, n: int, sigma: float, lam: float, alpha: float,
                            symmetric: bool, n_perm: int, rng: np.random.Generator,
                            block: int = 1, gram: np.ndarray | None = None,
                            directions: bool = False) -> np.ndarray:
    """Scores of ``n_perm`` random re-splits of ``pooled`` (2n rows) with fixed sigma and lambda.

    One Gram matrix serves every permutation, so a calibration costs ``n_perm`` small solves
    (compiled: :func:`_perm_scores_kernel`). ``gram``, when given, is the kernel matrix of
    ``pooled`` at ``sigma`` (the window state keeps one), which saves recomputing it. Returns the
    score of each re-split, shape ``(n_perm,)`` (the sum of the two directions when ``symmetric``),
    or with ``directions=True`` each direction apart, shape ``(n_perm, 2)`` (``(n_perm, 1)`` when
    not ``symmetric``).
    """
    from ...core.kernels import gauss_kernel

    if gram is None:
        pooled = np.ascontiguousarray(pooled, dtype=np.float64)
        gram = gauss_kernel(pooled, pooled, float(sigma))
    perms = block_permutations(2 * int(n), block, n_perm, rng)
    both = _perm_scores_kernel(np.ascontiguousarray(gram), perms, int(n), float(alpha), float(lam),
                               bool(symmetric))
    if not symmetric:
        both = both[:, :1]
    if directions:
        return both
    return both[:, 0] + both[:, 1] if symmetric else both[:, 0]

@njit(cache=True)
def _perm_scores_kernel(gram, perms, n, alpha, lam, symmetric):
    """Both directions' scores of each re-split (the reverse one 0 unless ``symmetric``)."""
    out = np.zeros((perms.shape[0], 2))
    m = perms.shape[1] - n
    g, k_nn, chol, theta = np.empty((n + m, n)), np.empty((n, n)), np.zeros((n, n)), np.empty(n)
    g2, k_mm, chol2, theta2 = np.empty((n + m, m)), np.empty((m, m)), np.zeros((m, m)), np.empty(m)
    for i in range(perms.shape[0]):
        a = perms[i, :n].copy()
        b = perms[i, n:].copy()
        out[i, 0] = pe_direction_from_gram(gram, a, b, alpha, lam, g, k_nn, chol, theta)
        if symmetric:
            out[i, 1] = pe_direction_from_gram(gram, b, a, alpha, lam, g2, k_mm, chol2, theta2)
    return out


def permutation_null_generic(pooled: np.ndarray, n: int, make_state, symmetric: bool, n_perm: int,
                             rng: np.random.Generator, block: int = 1, directions: bool = False) -> np.ndarray:
    """Permutation null for any two-window state class: push each shuffled pool into a fresh state.

    Returns what :func:`permutation_null_rulsif` returns (``directions`` as there)."""
    out = np.empty((n_perm, 2))
    for i in range(n_perm):
        st = make_state()
        st.push_many(pooled[block_permutation(pooled.shape[0], block, rng)])
        out[i] = st.scores()
    if directions:
        return out if symmetric else out[:, :1]
    return out[:, 0] + out[:, 1] if symmetric else out[:, 0]

"""The Gram ring behind the KLIEP and LSDD two-window states.

Both states keep the ``2n`` window samples in a ring of slots (oldest ``n`` = past window, newest
``n`` = current window, see :mod:`ratiowatch.core.window_base`), the Gaussian Gram matrix ``G`` over the slots,
and each slot's kernel sums over the two windows::

    p[a] = sum_{i in past} G[i, a],   q[a] = sum_{j in current} G[j, a]

A push overwrites the oldest slot: the sample leaving the past, the one moving from current to past
and the new one change ``p`` and ``q`` by three row updates, and the new sample's row/column of
``G`` is recomputed: O(n d). The squared distances of that row are handed back, so a state that
keeps a second matrix of the same distances (LSDD's ``H``) updates it without recomputing them.

Examples
--------
>>> ring = np.array([[0.0], [1.0], [3.0], [4.0]])          # n = 2: past slots 0, 1; current 2, 3
>>> d2 = np.empty((4, 4)); pair_sq_dists(ring, d2)
>>> gram = np.empty((4, 4)); fill_gram(d2, 1.0, gram)
>>> p, q = np.empty(4), np.empty(4); window_sums(gram, p, q, 0, 2)
>>> bool(np.isclose(p[0], 1.0 + np.exp(-0.5)))             # slot 0 against the past window
True
>>> row = np.empty(4)
>>> slide_gram(ring, gram, p, q, 0, 2, np.array([5.0]), 1.0, row)   # slot 0 now holds 5.0
1
>>> full = np.empty((4, 4)); pair_sq_dists(ring, full); g2 = np.empty((4, 4)); fill_gram(full, 1.0, g2)
>>> p2, q2 = np.empty(4), np.empty(4); window_sums(g2, p2, q2, 1, 2)
>>> bool(np.allclose(gram, g2) and np.allclose(p, p2) and np.allclose(q, q2) and row[2] == 4.0)
True
"""

from __future__ import annotations

import numpy as np  # noqa: F401  (the module docstring example uses it)
from numba import njit

from .kernels import gauss_entry


@njit(cache=True)
def pair_sq_dists(ring, out):
    """``out[a, b] = ||ring[a] - ring[b]||^2`` for every pair of slots (zero diagonal)."""
    size = ring.shape[0]
    for a in range(size):
        out[a, a] = 0.0
        for b in range(a):
            d2 = 0.0
            for k in range(ring.shape[1]):
                diff = ring[a, k] - ring[b, k]
                d2 += diff * diff
            out[a, b] = d2
            out[b, a] = d2


@njit(cache=True)
def fill_gram(d2, sigma, gram):
    """``gram = exp(-d2 / (2 sigma^2))`` with an exact unit diagonal."""
    size = d2.shape[0]
    g1 = -0.5 / (sigma * sigma)
    for a in range(size):
        gram[a, a] = 1.0
        for b in range(a):
            v = gauss_entry(g1 * d2[a, b])
            gram[a, b] = v
            gram[b, a] = v


@njit(cache=True)
def window_sums(gram, vec_p, vec_q, head, n):
    """Each slot's kernel sums over the past (``vec_p``) and current (``vec_q``) window; oldest slot ``head``."""
    size = 2 * n
    vec_p[:] = 0.0
    vec_q[:] = 0.0
    for t in range(n):
        i = (head + t) % size
        j = (head + n + t) % size
        for a in range(size):
            vec_p[a] += gram[i, a]
            vec_q[a] += gram[j, a]


@njit(cache=True)
def slide_gram(ring, gram, vec_p, vec_q, head, n, y, sigma, d2_row):
    """Overwrite the oldest slot ``head`` with ``y`` (full windows); returns the new head.

    ``d2_row`` (2n) receives ``||ring[s] - y||^2`` for every slot ``s`` (0 at the new slot).
    """
    size = 2 * n
    slot = head
    mid = (head + n) % size  # oldest current sample: becomes past
    for a in range(size):
        vec_p[a] += gram[mid, a] - gram[slot, a]
        vec_q[a] -= gram[mid, a]
    ring[slot] = y
    g1 = -0.5 / (sigma * sigma)
    for s in range(size):
        if s == slot:
            d2_row[s] = 0.0
            gram[s, s] = 1.0
            continue
        d2 = 0.0
        for k in range(y.shape[0]):
            diff = ring[s, k] - y[k]
            d2 += diff * diff
        d2_row[s] = d2
        v = gauss_entry(g1 * d2)
        gram[slot, s] = v
        gram[s, slot] = v
    for a in range(size):
        vec_q[a] += gram[slot, a]  # the new sample is current
    # column ``slot`` changed for every member: recompute its two sums
    new_head = (slot + 1) % size
    sp = 0.0
    sq = 0.0
    for t in range(n):
        sp += gram[(new_head + t) % size, slot]
        sq += gram[(new_head + n + t) % size, slot]
    vec_p[slot] = sp
    vec_q[slot] = sq
    return new_head


#: unit of the rounding bound of the maintained sums (machine epsilon, twice the unit roundoff)
_EPS = 2.220446049250313e-16


def sum_tolerance(n: int, pushes: int) -> float:
    """Bound on the rounding error of a kernel sum maintained by :func:`slide_gram` over ``pushes``
    slides since it was last summed afresh (:func:`window_sums`), for windows of ``n``.

    Why this bound: every kernel value lies in [0, 1], so every partial result of a sum lies in
    [-1, n + 1]; each rounding then errs by at most ``u (n + 1)`` (``u = eps / 2``). The fresh sum
    makes ``n`` roundings, and a slide changes ``p`` and ``q`` by at most three more (a difference,
    an addition, a subtraction). ``eps (n + 1) (n + 3 pushes + 2)`` is twice that count times the
    per-rounding error, so a sum whose exact value (over the stored Gram entries) is 0 is stored
    within it. Values below it are not told apart from 0 by the stored number; :func:`resum_small`
    sums them afresh.
    """
    return _EPS * (n + 1.0) * (n + 3.0 * pushes + 2.0)


@njit(cache=True)
def resum_small(gram, vec_p, vec_q, head, n, tol):
    """Re-sum from the Gram matrix every kernel sum whose stored magnitude is at most ``tol``
    (:func:`sum_tolerance`); oldest slot ``head``. Returns the number of sums recomputed.

    Add/subtract updates leave rounding residues (~1e-14, of either sign) in a sum whose terms are
    all 0 (two windows out of kernel reach of each other), where a rebuild gives exactly 0, and a
    sum of a few tiny terms can be swamped by residues of large terms that left it. Those sums are
    the ones within ``tol`` of 0; each is recomputed in :func:`window_sums`' order, so it equals the
    rebuild's value bit for bit (0 exactly when every term is 0: a sum of non-negative numbers).
    Sums above ``tol`` keep their updated value (relative error at most the rounding bound over
    their size). O(size) to scan plus O(n) per recomputed sum.
    """
    size = 2 * n
    count = 0
    for a in range(size):
        if abs(vec_p[a]) <= tol:
            s = 0.0
            for t in range(n):
                s += gram[(head + t) % size, a]
            vec_p[a] = s
            count += 1
        if abs(vec_q[a]) <= tol:
            s = 0.0
            for t in range(n):
                s += gram[(head + n + t) % size, a]
            vec_q[a] = s
            count += 1
    return count

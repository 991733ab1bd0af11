"""Null of a periodic segment's split-profile maximum: its own subsequences, whole cycles at a time,
in a random order.

The AR surrogates of :mod:`ratiowatch.stream.calibration.split_test` are a valid but wide null for
a periodic segment. A low-order AR model reproduces a cycle as a complex root near the unit circle,
so its surrogates wander in amplitude and phase, and their profile maxima are several times those
of real change-free cycles. A level shift inside a jittered cycle, or a change of waveform among
several, then stays below them.

This null keeps the segment's own subsequences and destroys only their order. The rows of the
profile (one subsequence each) are cut into blocks of :data:`BLOCK_CYCLES` whole cycles, and the
blocks are put in a random order (a block permutation). The profile's maximum over
the same grid of splits is computed for each order. A change-free segment is a stationary
sequence of cycles, so any order of blocks longer than its dependence is as likely as the one
observed. A change is an order effect: the rows of one regime sit together. Permuting rows,
not samples, makes no junctions: every row is a subsequence the segment holds. Cutting the
series into cycles and joining them in a new order was tried first. Each junction then joined
different sub-sample phases, which the subsequences saw as glitches all over the surrogate
(docs/experiments.md).

Where it applies (why these limits):

* a univariate segment with a period and at least :data:`MIN_BLOCKS` blocks; otherwise the
  permutations are too few to scan the splits;
* the quarter-cycle profile, with rows starting at every sample (stride 1; at most
  :data:`MAX_ROWS` rows, a bound on the work). Rows at a stride of several samples share their
  start's offset from the cycle, and that offset drifts over many cycles of a jittered cycle. The
  blocks break this long memory, so the null becomes too narrow. Jittered sines of periods 12
  and 24, 600 and 2,000 samples, 20 series each, tested at 0.05 with blocks of one cycle: the
  whole-cycle profile (stride 3 or 6) was rejected 26 times in 80 (mean p-value 0.16-0.29), the
  quarter cycle (stride 1) 9 times (0.46-0.58);
* blocks of two cycles: on the same series the quarter cycle was then rejected 6 times in 80
  (one cycle: 9; four cycles: 3, but four-cycle blocks are too few to find a shift in 1,500
  samples). In the detector, the null suite stays within its specification at every length
  (docs/experiments.md, configuration P).

The test is used beside the AR test, each at half the level (Bonferroni): see
:func:`ratiowatch.stream.detectors.offline.replay`. The streaming
:class:`~ratiowatch.stream.detectors.segmenter.SplitProfileDetector` draws the same null once per
calibration (:func:`window_null_maxima`) and reads a threshold from it.

Examples
--------
>>> from ratiowatch.core.split_profile import SplitProfile
>>> rng = np.random.default_rng(0)
>>> t = np.arange(1500)
>>> x = np.sin(2 * np.pi * t / 24) + 0.1 * rng.normal(size=1500) + (t >= 750)
>>> prof = SplitProfile(width=6)
>>> stat, split = prof.best(x)
>>> cycle_permutation_test(x, prof, stat, 24, 0.025, np.random.default_rng(1)).reject
True
>>> y = np.sin(2 * np.pi * t / 24) + 0.1 * rng.normal(size=1500)
>>> cycle_permutation_test(y, prof, prof.best(y)[0], 24, 0.025, np.random.default_rng(1)).reject
False
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ratiowatch.stream.calibration.split_test import SplitTest, monte_carlo_test, n_surrogates

#: whole cycles per permuted block (module docstring)
BLOCK_CYCLES = 2
#: blocks at least, for the permutations to scan the splits
MIN_BLOCKS = 8
#: subsequence rows at most (the offline profile's own bound)
MAX_ROWS = 5000


def row_blocks(n_rows: int, rows_per_block: int) -> list[np.ndarray]:
    """Consecutive blocks of ``rows_per_block`` row indices (the last one may be shorter).

    Examples
    --------
    >>> [b.tolist() for b in row_blocks(7, 3)]
    [[0, 1, 2], [3, 4, 5], [6]]
    """
    if n_rows < 1 or rows_per_block < 1:
        raise ValueError(f"need n_rows >= 1 and rows_per_block >= 1; got {n_rows}, {rows_per_block}")
    return [np.arange(a, min(a + rows_per_block, n_rows)) for a in range(0, n_rows, rows_per_block)]


def applies(t_len: int, profile, period: int) -> bool:
    """Whether the test applies to a univariate segment of ``t_len`` samples (module docstring)."""
    if not period or profile.stride != 1 or profile.min_length() > t_len:
        return False
    n_rows = t_len - profile.width + 1
    return n_rows <= MAX_ROWS and n_rows // (BLOCK_CYCLES * int(period)) >= MIN_BLOCKS


def permutation_profile(profile, t_len: int, period: int):
    """The profile the test scores for a segment of ``t_len`` samples: the first (finest) of
    ``profile`` (a :class:`~ratiowatch.core.split_profile.SplitProfile` or a
    :class:`~ratiowatch.core.split_profile.MultiWidthProfile`) at stride 1, or None where the test
    does not apply.

    Examples
    --------
    >>> from ratiowatch.core.split_profile import SplitProfile
    >>> permutation_profile(SplitProfile(width=12, stride=3), 2000, 47).stride
    1
    >>> permutation_profile(SplitProfile(width=12, stride=3), 600, 47) is None  # 6 blocks of two cycles
    True
    """
    finest = getattr(profile, "profiles", (profile,))[0]
    finest = replace(finest, stride=1) if finest.stride != 1 else finest
    return finest if applies(int(t_len), finest, period) else None


def cycle_permutation_test(x, profile, observed: float, period: int, level: float, rng: np.random.Generator,
                           count: int | None = None) -> SplitTest | None:
    """Monte-Carlo test of ``observed`` (``profile``'s maximum on ``x``) against the maxima of its
    rows in random orders of blocks of :data:`BLOCK_CYCLES` cycles; None where it does not apply.

    Parameters
    ----------
    x : array, shape (T,) or (T, 1)
        The segment (finite values, one channel).
    profile : SplitProfile
        A profile of stride 1 (:func:`applies`).
    observed : float
        The segment's own maximum on the same grid.
    period : int
        The segment's period in samples.
    level : float
        Test level.
    rng : numpy Generator
        Drives the orders.
    count : int, optional
        Permutations at most; default :func:`~ratiowatch.stream.calibration.split_test.n_surrogates`
        (level). Drawing stops early as in
        :func:`~ratiowatch.stream.calibration.split_test.max_split_test`.
    """
    x = np.asarray(x, dtype=np.float64)
    x = x[:, None] if x.ndim == 1 else x
    if x.ndim != 2 or x.shape[1] != 1:
        raise ValueError(f"the cycle permutation test takes one channel; got shape {x.shape}")
    t_len = x.shape[0]
    if not applies(t_len, profile, period):
        return None
    phi = profile.features(x)
    blocks = row_blocks(phi.shape[0], BLOCK_CYCLES * int(period))
    count = n_surrogates(level) if count is None else int(count)

    def maxima():
        for _ in range(count):
            order = np.concatenate([blocks[j] for j in rng.permutation(len(blocks))])
            yield profile.maximum_of_rows(phi[order], t_len)

    return monte_carlo_test(maxima(), observed, level, count)


def block_profile(profile, period: int):
    """``profile`` (stride 1) restricted to splits that leave at least one whole block of
    :data:`BLOCK_CYCLES` cycles on each side: the null moves blocks as units, so a side shorter
    than a block is a piece of one whose rows it never separates.

    Examples
    --------
    >>> from ratiowatch.core.split_profile import SplitProfile
    >>> block_profile(SplitProfile(width=6), 24).rows_min
    48
    """
    return replace(profile, min_rows=max(profile.rows_min, BLOCK_CYCLES * int(period)))


def window_null_maxima(x, profile, period: int, count: int, rng: np.random.Generator) -> np.ndarray | None:
    """Profile maxima of ``count`` block permutations of the rows of a window ``x``, for a
    threshold that serves windows of other lengths; None where the test does not apply.

    Only whole blocks are permuted, and each draw is then cut at a random row within a block at
    both ends. A window ends at any phase of the cycle, but a sequence of whole blocks always ends
    on a block boundary. The splits next to the ends of the observed window would then see a
    partial cycle that no draw holds: on a clean sine (period 12, T = 10,000) that raised 2.6
    false alarms per 10,000 samples in the streaming detector (docs/experiments.md).

    Parameters
    ----------
    x : array, shape (T,) or (T, 1)
        The window (finite values, one channel).
    profile : SplitProfile
        A profile of stride 1 (see :func:`block_profile`).
    period : int
        The window's period in samples.
    count : int
        Permutations.
    rng : numpy Generator
        Drives the orders and the cuts.

    Examples
    --------
    >>> from ratiowatch.core.split_profile import SplitProfile
    >>> t = np.arange(800)
    >>> x = np.sin(2 * np.pi * t / 24) + 0.1 * np.random.default_rng(0).normal(size=800)
    >>> window_null_maxima(x, SplitProfile(width=6), 24, 5, np.random.default_rng(1)).shape
    (5,)
    >>> window_null_maxima(x[:300], SplitProfile(width=6), 24, 5, np.random.default_rng(1)) is None
    True
    """
    x = np.asarray(x, dtype=np.float64)
    x = x[:, None] if x.ndim == 1 else x
    if x.ndim != 2 or x.shape[1] != 1:
        raise ValueError(f"the cycle permutation null takes one channel; got shape {x.shape}")
    if count < 1:
        raise ValueError(f"count must be >= 1; got {count}")
    if not applies(x.shape[0], profile, period):
        return None
    phi = profile.features(x)
    size = BLOCK_CYCLES * int(period)
    blocks = [b for b in row_blocks(phi.shape[0], size) if b.size == size]
    out = np.empty(int(count))
    for i in range(int(count)):
        order = np.concatenate([blocks[j] for j in rng.permutation(len(blocks))])
        head, tail = int(rng.integers(0, size)), int(rng.integers(0, size))
        rows = order[head:order.size - tail]
        out[i] = profile.maximum_of_rows(phi[rows], rows.size + profile.width - 1)
    return out

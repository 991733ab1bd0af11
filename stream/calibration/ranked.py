"""Sorted windows for the rank views: each channel's last 2n values kept in order, one insertion and
one deletion per step.

The correlation and channel views (:mod:`.correlation`, :mod:`.channels`) rank the windows' newest
samples at every step. Sorting them afresh costs one ``argsort`` per channel and window (about 10 us
per channel at n = 50); the windows move by one sample per step, so the detector keeps each
channel's pooled 2n values sorted instead, with the sequence number of each value (which window it
is in follows from its age), and updates them by one deletion and one insertion (O(n) moves).
Both views' statistics are then read off the sorted order in O(n) per channel. The calibrations'
and the tests' one-off forms (:func:`.channels.channel_ratio`, :func:`.correlation.corr_ratio` and
their surrogate versions) sort a window once and read it the same way; :func:`.channels.rank_diffs`
and :func:`.correlation.fisher_z_diff` are the independent references.
"""

from __future__ import annotations

import numpy as np
from numba import njit



@njit(cache=True)
def sorted_windows(vals, seq_end):
    """Sort each column of ``vals`` (2n, m): values (m, 2n) ascending and their sequence numbers
    (row ``i`` of ``vals`` has sequence number ``seq_end - 2n + i``)."""
    size, m = vals.shape
    sv = np.empty((m, size))
    sa = np.empty((m, size), dtype=np.int64)
    for c in range(m):
        order = np.argsort(vals[:, c])
        for p in range(size):
            sv[c, p] = vals[order[p], c]
            sa[c, p] = seq_end - size + order[p]
    return sv, sa


@njit(cache=True)
def push_row(sv, sa, row, seq):
    """Drop each channel's oldest value (sequence number ``seq - 2n``) and insert ``row[c]`` with
    sequence number ``seq``, keeping the order."""
    m, size = sv.shape
    old = seq - size
    for c in range(m):
        p = 0
        while sa[c, p] != old:
            p += 1
        for i in range(p, size - 1):  # close the gap
            sv[c, i] = sv[c, i + 1]
            sa[c, i] = sa[c, i + 1]
        v = row[c]
        q = size - 1
        while q > 0 and sv[c, q - 1] > v:  # open a slot
            sv[c, q] = sv[c, q - 1]
            sa[c, q] = sa[c, q - 1]
            q -= 1
        sv[c, q] = v
        sa[c, q] = seq


@njit(cache=True)
def _group_end(x, i, size):
    j = i
    while j + 1 < size and x[j + 1] == x[i]:
        j += 1
    return j


@njit(cache=True)
def _signed_rank_sum(x, past):
    """Sum of the average ranks of the ascending values ``x`` in the past window minus those in the
    current one (``past[t]``: value ``t`` is in the past window)."""
    size = x.size
    total = 0.0
    i = 0
    while i < size:
        j = _group_end(x, i, size)
        r = 0.5 * (i + j) + 1.0
        for t in range(i, j + 1):
            total += r if past[t] else -r
        i = j + 1
    return total


@njit(cache=True)
def channel_stats_sorted(sv, sa, seq_end, n, out):
    """The channel view's statistics (:func:`.channels.rank_diffs` order: m location, m spread) of
    the windows held sorted in ``sv`` / ``sa``; the newest value has sequence number ``seq_end - 1``."""
    m, size = sv.shape
    split = seq_end - n  # sequence numbers below it are in the past window
    dev = np.empty(size)
    past = np.empty(size, dtype=np.bool_)
    for c in range(m):
        x = sv[c]
        for t in range(size):
            past[t] = sa[c, t] < split
        loc = _signed_rank_sum(x, past)
        med = 0.5 * (x[n - 1] + x[n])
        lo, hi = n - 1, n
        for pos in range(size):  # absolute deviations in ascending order: merge outwards
            dl = med - x[lo] if lo >= 0 else np.inf
            dr = x[hi] - med if hi < size else np.inf
            if dl <= dr:
                dev[pos], past[pos] = dl, sa[c, lo] < split
                lo -= 1
            else:
                dev[pos], past[pos] = dr, sa[c, hi] < split
                hi += 1
        spread = _signed_rank_sum(dev, past)
        out[c], out[m + c] = loc / (n * size), spread / (n * size)


@njit(cache=True)
def window_scores_sorted(sv, sa, seq_end, n, table, wp, wc):
    """Each window's normal scores (``table``, tied values sharing the mean of their positions'
    scores) read off the pooled sorted order, into ``wp`` / ``wc`` (n, m) by time within the window."""
    m, size = sv.shape
    first = seq_end - size
    split = seq_end - n
    for c in range(m):
        x = sv[c]
        kp = kc = 0  # values of each window placed so far
        i = 0
        while i < size:
            j = _group_end(x, i, size)
            np_ = nc = 0
            for t in range(i, j + 1):
                if sa[c, t] < split:
                    np_ += 1
                else:
                    nc += 1
            sp = sc = 0.0
            for t in range(kp, kp + np_):
                sp += table[t]
            for t in range(kc, kc + nc):
                sc += table[t]
            if np_:
                sp /= np_
            if nc:
                sc /= nc
            for t in range(i, j + 1):
                s = sa[c, t]
                if s < split:
                    wp[s - first, c] = sp
                else:
                    wc[s - split, c] = sc
            kp += np_
            kc += nc
            i = j + 1


@njit(cache=True)
def fisher_z_pairs(w, z, good):
    """Fisher z of the correlation of every column pair of ``w`` (n, m) into ``z`` / ``good`` (pairs
    in ``np.triu_indices`` order; a numerically constant column gives ``good`` False and z 0)."""
    n, m = w.shape
    mean = np.zeros(m)
    raw = np.zeros(m)
    for i in range(n):
        for c in range(m):
            mean[c] += w[i, c]
            raw[c] += w[i, c] * w[i, c]
    mean /= n
    cen = np.empty((n, m))
    for i in range(n):
        for c in range(m):
            cen[i, c] = w[i, c] - mean[c]
    ss = np.zeros(m)
    for i in range(n):
        for c in range(m):
            ss[c] += cen[i, c] * cen[i, c]
    p = 0
    for a in range(m):
        for b in range(a + 1, m):
            ok = ss[a] > 1e-24 * max(raw[a], 1e-300) and ss[b] > 1e-24 * max(raw[b], 1e-300)
            good[p] = ok
            if ok:
                num = 0.0
                for i in range(n):
                    num += cen[i, a] * cen[i, b]
                r = num / np.sqrt(ss[a] * ss[b])
                r = min(max(r, -1.0 + 1e-12), 1.0 - 1e-12)
                z[p] = np.arctanh(r)
            else:
                z[p] = 0.0
            p += 1


@njit(cache=True)
def largest_z_ratio(zp, gp, zc, gc, thr):
    """max over the pairs defined in both windows of |zp - zc| / thr (0 if none is)."""
    best = 0.0
    for p in range(thr.size):
        if gp[p] and gc[p]:
            v = abs(zp[p] - zc[p]) / thr[p]
            if v > best:
                best = v
    return best


@njit(cache=True)
def views_sorted(sv, sa, seq_end, n, corr_thr, table, chan_thr):
    """(correlation ratio, channel ratio) of the sorted windows: max |statistic| / threshold of each
    view, NaN for a view whose thresholds are empty (off or not calibrated)."""
    m = sv.shape[0]
    corr = np.nan
    if corr_thr.size:
        wp, wc = np.empty((n, m)), np.empty((n, m))
        window_scores_sorted(sv, sa, seq_end, n, table, wp, wc)
        pairs = corr_thr.size
        zp, zc = np.empty(pairs), np.empty(pairs)
        gp, gc = np.empty(pairs, dtype=np.bool_), np.empty(pairs, dtype=np.bool_)
        fisher_z_pairs(wp, zp, gp)
        fisher_z_pairs(wc, zc, gc)
        corr = largest_z_ratio(zp, gp, zc, gc, corr_thr)
    chan = np.nan
    if chan_thr.size:
        stats = np.empty(2 * m)
        channel_stats_sorted(sv, sa, seq_end, n, stats)
        chan = 0.0
        for p in range(2 * m):
            v = abs(stats[p]) / chan_thr[p]
            if v > chan:
                chan = v
    return corr, chan

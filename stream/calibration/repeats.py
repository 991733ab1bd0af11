"""Tail probability of a run of exactly repeated values: the stuck-sensor score.

A sensor that sticks repeats its last value. No density ratio of subsequences sees that: eight
equal values at the series' level sit at the mode of its subsequence density
(docs/experiments.md, N16). What is rare about a stuck value is the run itself, and its rarity
depends on the series: a continuous reading almost never repeats, a count or a rounded reading
often does, and its repeats come in runs (the zeros of a sparse count).

So the repeats are modelled, not assumed away. Each row after the first is a repeat (its value
equals the one before it, exactly) or not, and the repeats follow a two-state Markov chain whose
transition probabilities are estimated from the last ``history`` rows with a uniform prior
(Laplace's rule: a series that never repeated still has a small chance of doing so)::

    a = P(repeat | the row before was not one) = (n01 + 1) / (n0 + 2)
    b = P(repeat | the row before was one)     = (n11 + 1) / (n1 + 2)

A row that ends a run of ``L`` repeats has the tail probability ``a b^(L - 1)``: a run starts and
lasts at least ``L`` rows. It maps to ``[0, 1]`` as the other views do,
``min(1, -log10(tail) / decades)``; a row that is not a repeat scores 0. The map is causal, and
``a`` and ``b`` are those of the history before the run began: estimated afresh at every row, a
stuck run would teach the chain that repeats follow repeats, and the 20th repeat of a stuck
reading after 400 rows of white noise would score 0.27 instead of 0.83.

Examples
--------
>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> x = rng.normal(size=3000)
>>> x[2000:2030] = x[1999]  # stuck for 30 rows
>>> out = RepeatRunTail().transform(x)
>>> float(out[:2000].max()), round(float(out[2008]), 2), float(out[2029])
(0.0, 0.57, 1.0)
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit


@njit(cache=True, inline="always")
def _chain(counts):
    """(log10 a, log10 b) of the chain; counts = [flags held, pairs held, pairs starting with a
    repeat (n1), repeat after a non-repeat (n01), repeat after a repeat (n11)]."""
    n1 = counts[2]
    n0 = counts[1] - n1
    return math.log10((counts[3] + 1.0) / (n0 + 2.0)), math.log10((counts[4] + 1.0) / (n1 + 2.0))


@njit(cache=True, inline="always")
def _run_score(run, log_a, log_b, held, min_history, decades):
    """The mapped tail of a run of ``run`` repeats (0 when ``run`` is 0 or the history is short)."""
    if run <= 0 or held < min_history:
        return 0.0
    v = -(log_a + (run - 1) * log_b) / decades
    return 1.0 if v > 1.0 else v


@njit(cache=True)
def _run_map(values, min_history, decades, ring, last, st, out):
    """Causal pass over ``values``; state: last = [previous value, log10 a and log10 b when the
    current run began], st = [rows seen, ring position, current run, flags held, pairs held, n1,
    n01, n11, flags held when the current run began] (updated in place)."""
    size = ring.shape[0]
    for j in range(values.shape[0]):
        v = values[j]
        if st[0] == 0:  # the first row has no predecessor: no flag
            out[j] = 0.0
            last[0] = v
            st[0] = 1
            continue
        flag = 1 if v == last[0] else 0
        run = st[2] + 1 if flag else 0
        if run == 1:  # a run begins: it is judged by the history before it
            last[1], last[2] = _chain(st[3:])
            st[8] = st[3]
        out[j] = _run_score(run, last[1], last[2], st[8], min_history, decades)
        pos = st[1]
        held = st[3]
        if held == size:  # the oldest flag leaves, and with it its pair with the next one
            old, nxt = ring[pos], ring[(pos + 1) % size]
            st[4] -= 1
            st[5] -= old
            st[6] -= (1 - old) * nxt
            st[7] -= old * nxt
        else:
            st[3] = held + 1
        if held > 0:  # the newest flag before this one pairs with it
            prev = ring[(pos - 1) % size]
            st[4] += 1
            st[5] += prev
            st[6] += (1 - prev) * flag
            st[7] += prev * flag
        ring[pos] = flag
        st[1] = (pos + 1) % size
        st[2] = run
        last[0] = v
        st[0] += 1


class RepeatRunTail:
    """Streaming score in [0, 1] of runs of exactly repeated values (see the module docstring).

    Parameters
    ----------
    history : int
        Rows whose repeat flags the Markov chain is estimated from (bounded memory; at least 2).
    min_history : int
        Output 0 until this many flags were seen.
    decades : float
        Output = ``min(1, -log10(tail) / decades)``: a tail of ``10^-decades`` maps to 1.

    Examples
    --------
    >>> counts = np.random.default_rng(1).poisson(0.5, size=3000).astype(float)  # mostly 0 and 1
    >>> float(RepeatRunTail().transform(counts).max()) < 0.5  # their runs are as the chain says
    True
    """

    def __init__(self, history: int = 2000, min_history: int = 100, decades: float = 10.0):
        if int(history) < 2 or int(min_history) < 1:
            raise ValueError(f"history must be >= 2 and min_history >= 1; got {history}, {min_history}")
        if int(min_history) > int(history):
            raise ValueError(f"min_history ({min_history}) cannot exceed history ({history})")
        if not decades > 0:
            raise ValueError(f"decades must be positive; got {decades}")
        self.history, self.min_history, self.decades = int(history), int(min_history), float(decades)
        self.reset()

    def reset(self) -> None:
        """Forget the history."""
        self._ring = np.zeros(self.history, dtype=np.int64)
        self._last = np.zeros(3)
        self._st = np.zeros(9, dtype=np.int64)

    def transform(self, values) -> np.ndarray:
        """Score a sequence causally, continuing from the current state."""
        values = np.asarray(values, dtype=np.float64).ravel()
        if not np.isfinite(values).all():
            raise ValueError("values contain NaN or infinity; fill missing values first")
        out = np.empty(values.shape[0])
        _run_map(values, self.min_history, self.decades, self._ring, self._last, self._st, out)
        return out

    def peek(self, value: float) -> float:
        """What :meth:`transform` would give ``value`` next, without remembering it (pure)."""
        value = float(value)
        if not math.isfinite(value):
            raise ValueError(f"value must be finite; got {value}")
        if self._st[0] == 0 or value != self._last[0]:
            return 0.0
        run = int(self._st[2]) + 1
        if run == 1:
            log_a, log_b = _chain(self._st[3:])
            return float(_run_score(1, log_a, log_b, int(self._st[3]), self.min_history, self.decades))
        return float(_run_score(run, self._last[1], self._last[2], int(self._st[8]), self.min_history,
                                self.decades))

    def state(self) -> dict:
        """The state as arrays (flag ring, previous value and the current run's chain, counters)."""
        return {"ring": self._ring.copy(), "last": self._last.copy(), "st": self._st.copy()}

    def set_state(self, state: dict) -> None:
        """Continue from :meth:`state`."""
        for key, arr in (("ring", self._ring), ("last", self._last), ("st", self._st)):
            arr[...] = state[key]

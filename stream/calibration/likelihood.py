"""Map raw anomaly scores to tail probabilities against the score's own history.

A raw novelty score has no common scale across series (a ratio score of 0.3 is alarming on a quiet
series and routine on a noisy one), so one alarm threshold cannot serve many series. In the style of
the HTM anomaly likelihood (Ahmad et al. 2017), each new raw score is smoothed over the last
``short`` values and compared with the distribution of smoothed scores seen so far (a bounded
history): the output is the upper tail probability ``P(S >= s)`` under a Gaussian fitted to that
history, mapped monotonically to ``[0, 1]`` by ``-log10(tail) / decades``. Scores far in the tail
approach 1; typical scores stay near 0. The mapping is causal: the current score is compared with
the history *before* it, then added to it.

The Gaussian tail is too thin for a skewed score: on anomaly-free synthetic series the tail it
reports is reached 13 to 370 times more often than it says, and the factor depends on the kind of
series (docs/results.md, "Synthetic anomaly suite"). An empirical tail of the history is closer
to its word, but an earlier anomaly in the history then masks the next (docs/experiments.md).

Examples
--------
>>> tp = TailProbability(min_history=20)
>>> outs = [tp.update(0.1 + 0.01 * (i % 3)) for i in range(100)]
>>> tp.update(5.0) > 0.5 > outs[-1]
True
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
from numba import njit


@njit(cache=True, inline="always")
def _spread(mean, mean_sq, min_std, min_spread):
    """The history's standard deviation, at least ``min_std x |mean|`` and ``min_spread``."""
    var = mean_sq - mean * mean
    sd = math.sqrt(var) if var > 0.0 else 0.0
    floor = min_std * (abs(mean) + 1e-12)
    if floor < min_spread:
        floor = min_spread
    if sd < floor:
        sd = floor
    return sd


@njit(cache=True, inline="always")
def _tail_value(a, mean, sd, min_raw, decades):
    """``-log10`` of the Gaussian upper tail of ``a`` against the history's mean and spread
    (:func:`_spread`), over ``decades`` and clipped to [0, 1]; 0 below the mean or at or below
    ``min_raw``."""
    z = (a - mean) / sd
    if z <= 0.0 or a <= min_raw:
        return 0.0
    tail = 0.5 * math.erfc(z / math.sqrt(2.0))
    if tail < 1e-300:
        tail = 1e-300
    v = -math.log10(tail) / decades
    return 1.0 if v > 1.0 else v


#: The short-window sum is added up afresh from its ring when the raw score leaving the window
#: exceeds the sum that remains by more than this factor (or the sum is not finite). A running sum
#: keeps the rounding error of the largest value it held: after a raw score of 1e17 leaves, a sum
#: of scores near 0.1 is off by a multiple of 16 (the spacing of floats near 1e17) for good, and
#: every later smoothed score with it. Below the factor, the error a step leaves is at most about
#: 2^-20 of the sum. Ordinary scores stay far below it (the anomaly detector's raw scores on the
#: synthetic anomaly suite: at most 2.3e4, where a score comes near 0), so their running sum, and
#: every output, is what it always was.
SHORT_SUM_CANCEL = 2.0 ** 32


@njit(cache=True, inline="always")
def _short_sum(s, old, raw_ring, slot, new):
    """The short-window sum ``s`` after ``old`` left it for ``new`` (at ``raw_ring[slot]``), or the
    sum of the window's values added up afresh where subtracting ``old`` can have cancelled most of
    the digits of ``s``."""
    if abs(old) > SHORT_SUM_CANCEL * abs(s) or not math.isfinite(s):
        s = 0.0
        for i in range(raw_ring.shape[0]):
            s += new if i == slot else raw_ring[i]
    return s


@njit(cache=True)
def _tail_map(raw, short, min_history, min_std, min_spread, min_raw, decades, ring, raw_ring, st_f, st_i,
              out, clip_z=math.inf):
    """Causal pass: smoothed score vs mean/std of the previous smoothed scores held in ``ring``.

    Once ``min_history`` scores are held, a smoothed score enters the history at most ``clip_z``
    spreads above its mean (inf = as it is); its output is that of the score itself.

    State: st_f = [sum, sum of squares, short-window sum], st_i = [count, pos, t] (updated in place).
    """
    history = ring.shape[0]
    for j in range(raw.shape[0]):
        t = st_i[2]
        st_f[2] += raw[j]
        old = 0.0
        if t >= short:
            old = raw_ring[t % short]
            st_f[2] -= old
        raw_ring[t % short] = raw[j]
        st_f[2] = _short_sum(st_f[2], old, raw_ring, t % short, raw[j])
        m = short if t + 1 >= short else t + 1
        a = st_f[2] / m
        count = st_i[0]
        out[j] = 0.0
        if count >= min_history:
            mean = st_f[0] / count
            sd = _spread(mean, st_f[1] / count, min_std, min_spread)
            out[j] = _tail_value(a, mean, sd, min_raw, decades)
            if a > mean + clip_z * sd:  # never with clip_z = inf
                a = mean + clip_z * sd
        pos = st_i[1]
        if count == history:
            old = ring[pos]
            st_f[0] -= old
            st_f[1] -= old * old
        else:
            st_i[0] = count + 1
        ring[pos] = a
        st_f[0] += a
        st_f[1] += a * a
        pos = (pos + 1) % history
        st_i[1] = pos
        st_i[2] = t + 1
        if pos == 0:
            # periodic exact recompute bounds the rounding drift of the running sums
            s1 = 0.0
            s2 = 0.0
            for i in range(st_i[0]):
                s1 += ring[i]
                s2 += ring[i] * ring[i]
            st_f[0] = s1
            st_f[1] = s2


@njit(cache=True)
def _tail_peek(raw, short, min_history, min_std, min_spread, min_raw, decades, ring, raw_ring, st_f, st_i):
    """The output :func:`_tail_map` would give for ``raw`` next, without changing any state."""
    t = st_i[2]
    s = st_f[2] + raw
    old = 0.0
    if t >= short:
        old = raw_ring[t % short]
        s -= old
    s = _short_sum(s, old, raw_ring, t % short, raw)
    m = short if t + 1 >= short else t + 1
    a = s / m
    count = st_i[0]
    if count < min_history:
        return 0.0
    mean = st_f[0] / count
    return _tail_value(a, mean, _spread(mean, st_f[1] / count, min_std, min_spread), min_raw, decades)


class TailProbability:
    """Streaming raw-score -> [0, 1] mapping by Gaussian tail probability against the history.

    Parameters
    ----------
    short : int
        Raw scores are averaged over the last ``short`` values before comparison (1 = no smoothing).
    history : int
        Number of past smoothed scores the distribution is estimated from (bounded memory).
    min_history : int
        Output 0 until this many smoothed scores were seen.
    min_std : float
        Floor on the standard deviation, relative to ``|mean|``, so a perfectly constant history
        does not turn the first tiny wiggle into certainty.
    decades : float
        Output = ``min(1, -log10(tail) / decades)``: a tail probability of ``10^-decades`` maps to 1.
    min_spread : float
        Floor on the standard deviation in the raw score's own units (0 = none): a history that
        hardly varies does not make a small departure look extreme.
    min_raw : float
        Smoothed scores at or below this map to 0 whatever the history (-inf = none): a score
        that means "not anomalous" on its own scale stays so.
    clip_tail : float in [0, 0.5)
        A smoothed score beyond the history's upper ``clip_tail`` quantile (under its Gaussian fit)
        enters the history at that quantile; its own output is unchanged (0 = every score enters
        as it is). One far-out score would otherwise inflate the history's spread, and every
        score after it would look less extreme for as long as the history holds it.

    Examples
    --------
    >>> import numpy as np
    >>> out = TailProbability(min_history=10).transform(np.r_[0.1 + 0.01 * (np.arange(50) % 3), 3.0])
    >>> float(out[-1]) > 0.9
    True

    A far-out score masks the next one unless it enters the history clipped:

    >>> calm = 0.1 + 0.01 * (np.arange(200) % 3)
    >>> x = np.r_[calm, 50.0, calm, 0.2]
    >>> float(TailProbability().transform(x)[-1]) < 0.1 < 0.9 < float(TailProbability(clip_tail=1e-5).transform(x)[-1])
    True
    """

    def __init__(self, short: int = 1, history: int = 2000, min_history: int = 100,
                 min_std: float = 0.01, decades: float = 10.0, min_spread: float = 0.0,
                 min_raw: float = -math.inf, clip_tail: float = 0.0):
        for name, v in (("short", short), ("history", history), ("min_history", min_history)):
            if int(v) < 1:
                raise ValueError(f"{name} must be a positive integer; got {v}")
        if int(min_history) > int(history):
            raise ValueError(f"min_history ({min_history}) cannot exceed history ({history})")
        if not (min_std >= 0 and decades > 0):
            raise ValueError(f"min_std must be >= 0 and decades > 0; got {min_std}, {decades}")
        self.short, self.history, self.min_history = int(short), int(history), int(min_history)
        if not min_spread >= 0:
            raise ValueError(f"min_spread must be >= 0; got {min_spread}")
        self.min_std, self.decades, self.min_spread = float(min_std), float(decades), float(min_spread)
        self.min_raw = float(min_raw)
        if not 0.0 <= float(clip_tail) < 0.5:
            raise ValueError(f"clip_tail must be in [0, 0.5) (0 = no clipping), e.g. 1e-5; got {clip_tail}")
        self.clip_tail = float(clip_tail)
        self._clip_z = -NormalDist().inv_cdf(self.clip_tail) if self.clip_tail > 0.0 else math.inf
        self.reset()

    def _settings(self) -> tuple:
        return self.short, self.min_history, self.min_std, self.min_spread, self.min_raw, self.decades

    def reset(self) -> None:
        """Forget the history."""
        self._ring = np.zeros(self.history)
        self._raw_ring = np.zeros(self.short)
        self._st_f = np.zeros(3)
        self._st_i = np.zeros(3, dtype=np.int64)
        self._out1 = np.zeros(1)

    def transform(self, raw) -> np.ndarray:
        """Map a sequence causally, continuing from the current state (same as repeated :meth:`update`)."""
        raw = np.asarray(raw, dtype=np.float64).ravel()
        if not np.isfinite(raw).all():
            raise ValueError("raw scores contain NaN or infinity; a detector must emit finite scores")
        out = np.empty(raw.shape[0])
        _tail_map(raw, *self._settings(), self._ring, self._raw_ring, self._st_f, self._st_i, out, self._clip_z)
        return out

    def peek(self, raw: float) -> float:
        """What :meth:`update` would return for ``raw``, without remembering it (pure)."""
        raw = float(raw)
        if not math.isfinite(raw):
            raise ValueError(f"raw score must be finite; got {raw}")
        return float(_tail_peek(raw, *self._settings(), self._ring, self._raw_ring, self._st_f, self._st_i))

    def update(self, raw: float) -> float:
        """Map one new raw score (then remember it)."""
        raw = float(raw)
        if not math.isfinite(raw):
            raise ValueError(f"raw score must be finite; got {raw}")
        _tail_map(np.array([raw]), *self._settings(), self._ring, self._raw_ring, self._st_f, self._st_i,
                  self._out1, self._clip_z)
        return float(self._out1[0])

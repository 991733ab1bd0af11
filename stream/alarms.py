"""From change scores to alarms: null-calibrated thresholds and causal peak picking.

Threshold
    A raw divergence (PE, L2, KL) has no universal scale: its null distribution depends on the
    window size, the kernel and the data. The threshold is therefore a quantile of the score's own
    null distribution, estimated by *permutation* (the two-sample test LSTT of reference 004b):
    the pooled past + current subsequences are shuffled, split into two windows, and the score is
    recomputed with the same sigma and lambda. A gamma law is moment-matched to the permutation
    scores above their minimum, and the threshold is its upper ``false_alarm_rate`` quantile.
    Because every alarm needs at least one step above the threshold, the expected number of alarms
    per step is at most ``false_alarm_rate`` whenever the permutation null is right (it is exact
    for exchangeable windows; autocorrelated data widen the true null, see the README).

Peak picking (causal, documented delay)
    A *run* is a maximal stretch of steps above the threshold. Its peak is the step with the largest
    score. The alarm is issued when the run ends or ``delay`` steps after the
    current peak, whichever comes first; later steps of the same run raise no second alarm. The
    alarm carries the estimated change index (the window boundary at the peak, not the alarm time),
    the alarm index and the delay between them. Alarms whose change index is closer than
    ``min_spacing`` to the previous alarm's are dropped (one event, one alarm). "Above" means by
    more than rounding (:func:`exceeds`).

Examples
--------
>>> picker = PeakPicker(delay=2, min_spacing=5)
>>> out = [picker.update(t, s, 1.0, boundary=t - 3) for t, s in enumerate([0, 2, 3, 2, 0.5, 0])]
>>> [a for a in out if a is not None]
[Alarm(change_index=-1, alarm_index=4, score=3.0, threshold=1.0)]
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
import scipy.linalg
from numba import njit
from scipy import special, stats  # noqa: F401  (stats is used by the doctest)

from core.linalg import cholesky_scaled_solve, cholesky_solve

#: relative margin by which a score must exceed its threshold (see :func:`exceeds`)
ROUNDING_MARGIN = 1e-9


def exceeds(score: float, threshold: float) -> bool:
    """Whether ``score`` is above ``threshold`` by more than rounding (both finite).

    On a constant stream (a stuck sensor) the score and every null draw are one number up to a few
    ulps, so a plain ``score > threshold`` decided alarms by rounding noise: the streaming detector
    raised one at every re-selection, every n steps, forever. The margin, ``ROUNDING_MARGIN x
    max(1, |threshold|)``, is far above that noise (~1e-15) and far below any score difference that
    means something.

    >>> exceeds(1.0 + 1e-15, 1.0), exceeds(1.001, 1.0), exceeds(float("nan"), 1.0)
    (False, True, False)
    """
    return (math.isfinite(score) and math.isfinite(threshold)
            and score > threshold + ROUNDING_MARGIN * max(1.0, abs(threshold)))


@dataclass(frozen=True)
class Alarm:
    """One detected change.

    ``change_index`` is the estimated first index of the new segment (window boundary at the peak
    score); ``alarm_index`` is the sample index at which the alarm was raised (causal);
    ``score`` and ``threshold`` are the peak score and the threshold in force at the peak.
    """

    change_index: int
    alarm_index: int
    score: float
    threshold: float

    @property
    def delay(self) -> int:
        """Samples between the estimated change and the alarm."""
        return self.alarm_index - self.change_index

    def to_dict(self) -> dict:
        d = asdict(self)
        d["delay"] = self.delay
        return d


def gamma_threshold(null_scores: np.ndarray, false_alarm_rate: float) -> float:
    """Upper ``false_alarm_rate`` quantile of a gamma law moment-matched to ``null_scores``.

    The law is fitted to ``null - min(null)`` (the location is the smallest null value), which keeps
    the right skew of divergence estimates; a normal quantile would under-state the tail.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> null = rng.gamma(2.0, 1.0, size=2000)
    >>> bool(abs(gamma_threshold(null, 0.01) - stats.gamma.ppf(0.99, 2.0)) < 0.5)
    True
    """
    if not (0.0 < false_alarm_rate < 1.0):
        raise ValueError(f"false_alarm_rate must be in (0, 1); got {false_alarm_rate}")
    null = np.asarray(null_scores, dtype=np.float64)
    null = null[np.isfinite(null)]
    if null.size < 3:
        raise ValueError(f"need at least 3 finite null scores to calibrate; got {null.size}")
    lo = float(null.min())
    shifted = null - lo
    mean, var = float(shifted.mean()), float(shifted.var())
    spread = max(abs(lo), float(np.abs(null).max()), 1e-12)
    if mean <= 1e-12 * spread or var <= 1e-24 * spread * spread:
        # degenerate null (constant windows): anything measurably above it is a change
        return lo + 1e-9 * spread
    shape, scale = mean * mean / var, var / mean
    # = stats.gamma.isf(q, shape, scale=scale), without the ~100 us of frozen-distribution overhead
    return lo + scale * float(special.gammainccinv(shape, false_alarm_rate))


def exp_tail_threshold(null_scores: np.ndarray, false_alarm_rate: float) -> float:
    """Upper ``false_alarm_rate`` quantile from an exponential tail fitted above the null's median.

    Peaks-over-threshold with the generalised Pareto shape fixed at 0: above ``u = median(null)``
    the excesses are taken as exponential with mean ``b`` (their sample mean, the maximum-likelihood
    estimate), so ``P(S > u + x) = 0.5 exp(-x / b)`` and the threshold is ``u + b log(0.5 / rate)``.
    Why not a moment-matched gamma: a directional PE-hat is often negative (the clipped fit), so a
    gamma anchored at 0 has a huge variance-to-mean ratio and far too heavy a tail, and one anchored
    at the smallest score far too light a one; and a free GPD shape is too noisy to estimate from
    ~100 scores. On stationary AR(2) scores (n = 50) this estimate at 5e-5 from 160 AR-surrogate
    scores had median 1.04 (10-90 %: 0.91-1.20) against empirical quantiles of 0.9-1.3.
    Rates of 0.5 and above return the empirical quantile.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> null = rng.exponential(1.0, size=4000)
    >>> bool(abs(exp_tail_threshold(null, 1e-4) - np.log(1e4)) < 0.5)
    True
    """
    if not (0.0 < false_alarm_rate < 1.0):
        raise ValueError(f"false_alarm_rate must be in (0, 1); got {false_alarm_rate}")
    null = np.asarray(null_scores, dtype=np.float64).ravel()
    null = null[np.isfinite(null)]
    if null.size < 3:
        raise ValueError(f"need at least 3 finite null scores to calibrate; got {null.size}")
    if false_alarm_rate >= 0.5:
        return float(np.quantile(null, 1.0 - false_alarm_rate))
    u, mean_excess, spread = _median_excess(null)
    spread = max(spread, 1e-12)
    if not mean_excess > 1e-12 * spread:
        # degenerate null (constant windows): anything measurably above it is a change
        return float(null.max()) + 1e-9 * spread
    return u + mean_excess * math.log(0.5 / false_alarm_rate)


@njit(cache=True)
def _median_excess(x):
    """(median, mean excess over it (0 if none), max |x|) in one compiled pass (np.median costs ~20 us
    of call overhead, and the detector calibrates every n steps)."""
    u = np.median(x)
    total, count, spread = 0.0, 0, 0.0
    for v in x:
        if v > u:
            total += v - u
            count += 1
        if abs(v) > spread:
            spread = abs(v)
    return u, (total / count if count else 0.0), spread


@njit(cache=True)
def median_mad(x: np.ndarray) -> tuple[float, float]:
    """Median and median absolute deviation (unscaled) of a finite 1-d array, compiled.

    Examples
    --------
    >>> median_mad(np.array([1.0, 2.0, 4.0, 10.0]))
    (3.0, 1.5)
    """
    med = np.median(x)
    return med, np.median(np.abs(x - med))


def _direction_pe(g_num_num, g_den_num, alpha, lam):
    """Clipped RuLSIF PE-hat_alpha with centres = numerator samples (as core.window)."""
    n_num, n_den = g_num_num.shape[0], g_den_num.shape[0]
    h_mat = alpha / n_num * (g_num_num.T @ g_num_num) + (1 - alpha) / n_den * (g_den_num.T @ g_den_num)
    h_mat[np.diag_indices_from(h_mat)] += lam
    h = g_num_num.mean(axis=0)
    theta = scipy.linalg.cho_solve(scipy.linalg.cho_factor(h_mat, lower=True, check_finite=False), h,
                                   check_finite=False)
    np.maximum(theta, 0.0, out=theta)
    r_num, r_den = g_num_num @ theta, g_den_num @ theta
    return -alpha / 2 * np.mean(r_num**2) - (1 - alpha) / 2 * np.mean(r_den**2) + np.mean(r_num) - 0.5


def rulsif_window_score(gram: np.ndarray, a: np.ndarray, b: np.ndarray, alpha: float, lam: float,
                        symmetric: bool) -> float:
    """PE(a || b) (+ PE(b || a) when symmetric) from the Gram matrix of the pooled samples."""
    s = _direction_pe(gram[np.ix_(a, a)], gram[np.ix_(b, a)], alpha, lam)
    if symmetric:
        s += _direction_pe(gram[np.ix_(b, b)], gram[np.ix_(a, b)], alpha, lam)
    return float(s)


def block_permutation(size: int, block: int, rng: np.random.Generator) -> np.ndarray:
    """A permutation of ``range(size)`` that shuffles contiguous blocks of ``block`` indices.

    Neighbouring subsequences share samples and autocorrelated series keep short-range dependence;
    moving them as blocks keeps that dependence inside each resampled window, so the null is not
    narrower than the real one (plain shuffling over-fires on smooth series, lessons file point 2).

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
    from core.kernels import gauss_kernel

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
def _direction_from_gram(gram, num, den, alpha, lam, g, k_nn, chol, theta):
    """Clipped RuLSIF PE-hat_alpha(num || den), centres = numerator rows (as core.window).

    ``g`` (2n x n), ``k_nn`` (n x n), ``chol`` (n x n) and ``theta`` (n) are work arrays: the
    numerator's and the denominator's kernel rows at the centres are gathered into ``k_nn`` and the
    lower rows of ``g``, and :func:`_direction_from_blocks` does the rest.
    """
    n, m = num.shape[0], den.shape[0]
    for i in range(n):
        row = gram[num[i]]
        kr = k_nn[i]
        for a in range(n):
            kr[a] = row[num[a]]
    for j in range(m):
        row = gram[den[j]]
        gr = g[n + j]
        for a in range(n):
            gr[a] = row[num[a]]
    return _direction_from_blocks(k_nn, g, alpha, lam, chol, theta)


@njit(cache=True)
def _direction_from_blocks(k_nn, g, alpha, lam, chol, theta):
    """Clipped RuLSIF PE-hat_alpha(num || den) from the kernel blocks at the numerator centres.

    On entry ``k_nn`` (n x n) holds the numerator samples' kernel rows and ``g[n:]`` (m x n) the
    denominator's (unscaled); ``g[:n]`` is work space. The rows of ``g`` are scaled so that
    ``g' g`` is the weighted H: one product builds it, and the fused factorisation solves for theta
    without forming ``H + lam I`` (``k_nn`` keeps the unscaled numerator rows: alpha may be 0).
    ``chol`` (n x n) and ``theta`` (n) are work arrays. Callers with contiguous blocks (the AR
    surrogates' windows) fill the two blocks by plain copies; the permutation null gathers them.
    """
    n = k_nn.shape[0]
    m = g.shape[0] - n
    wn = np.sqrt(alpha / n)
    wd = np.sqrt((1.0 - alpha) / m)
    for a in range(n):
        theta[a] = 0.0
    for i in range(n):
        kr = k_nn[i]
        gr = g[i]
        for a in range(n):
            v = kr[a]
            gr[a] = wn * v
            theta[a] += v
    for j in range(m):
        gr = g[n + j]
        for a in range(n):
            gr[a] = wd * gr[a]
    for a in range(n):
        theta[a] /= n  # h = mean kernel row of the numerator samples
    h_mat = g.T @ g  # (BLAS dsyrk, the lower triangle only, was slower at n = 50: 10.8 vs 9.2 us)
    if not cholesky_scaled_solve(h_mat, 1.0, lam, chol, theta):  # (H + lam I) theta = h, in place
        # not numerically positive definite: LU fallback, never NaN
        for a in range(n):
            h_mat[a, a] += lam
        h = np.zeros(n)
        for i in range(n):
            for a in range(n):
                h[a] += k_nn[i, a] / n
        theta[:] = cholesky_solve(h_mat, h)
    for a in range(n):
        if theta[a] < 0.0:
            theta[a] = 0.0
    r_num = _rows_dot(k_nn, theta, np.empty(n))
    r_den = _rows_dot(g[n:], theta, np.empty(m))
    s_nn = 0.0
    s_n = 0.0
    for i in range(n):
        s_nn += r_num[i] * r_num[i]
        s_n += r_num[i]
    s_dd = 0.0
    for j in range(m):
        s_dd += r_den[j] * r_den[j]
    s_dd /= wd * wd  # the denominator rows of g carry the factor wd
    return -alpha / 2.0 * s_nn / n - (1.0 - alpha) / 2.0 * s_dd / m + s_n / n - 0.5


@njit(cache=True, inline="always")
def _rows_dot(mat, x, out):
    """``out[i] = sum_a mat[i, a] x[a]``, each sum in index order, four rows at a time.

    Why four at a time: one row's sum is a chain of dependent additions (latency bound); four
    independent chains overlap (100 x 50: 1.1 instead of 2.5 us), and each row's order of additions,
    so its value, is unchanged.
    """
    rows, cols = mat.shape
    i = 0
    while i + 3 < rows:
        m0 = mat[i]
        m1 = mat[i + 1]
        m2 = mat[i + 2]
        m3 = mat[i + 3]
        r0 = 0.0
        r1 = 0.0
        r2 = 0.0
        r3 = 0.0
        for a in range(cols):
            v = x[a]
            r0 += m0[a] * v
            r1 += m1[a] * v
            r2 += m2[a] * v
            r3 += m3[a] * v
        out[i] = r0
        out[i + 1] = r1
        out[i + 2] = r2
        out[i + 3] = r3
        i += 4
    while i < rows:
        m0 = mat[i]
        r0 = 0.0
        for a in range(cols):
            r0 += m0[a] * x[a]
        out[i] = r0
        i += 1
    return out


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
        out[i, 0] = _direction_from_gram(gram, a, b, alpha, lam, g, k_nn, chol, theta)
        if symmetric:
            out[i, 1] = _direction_from_gram(gram, b, a, alpha, lam, g2, k_mm, chol2, theta2)
    return out


def permutation_null_generic(pooled: np.ndarray, n: int, make_state, symmetric: bool, n_perm: int,
                             rng: np.random.Generator, block: int = 1, directions: bool = False) -> np.ndarray:
    """Permutation null for any two-window state class: push each shuffled pool into a fresh state.

    Returns what :func:`permutation_null_rulsif` returns (``directions`` as there)."""
    out = np.empty((n_perm, 2))
    for i in range(n_perm):
        st = make_state()
        for row in pooled[block_permutation(pooled.shape[0], block, rng)]:
            st.push(row)
        out[i] = st.scores()
    if directions:
        return out if symmetric else out[:, :1]
    return out[:, 0] + out[:, 1] if symmetric else out[:, 0]


class PeakPicker:
    """Causal run / peak logic turning (score, threshold) pairs into :class:`Alarm` s.

    Parameters
    ----------
    delay : int
        An alarm is raised at most ``delay`` steps after the peak of its run (earlier if the run
        ends first).
    min_spacing : int
        Minimum distance between the change indices of two alarms.
    merge_gap : int
        A run continues across dips below the threshold shorter than this many steps (1, the
        default: the first step below ends it). For scores that fluctuate on a known time scale
        (the offline replay of a periodic series passes one period): a dip on the rising edge of a
        change would otherwise close the run early, raise a weak alarm at the wrong place, and the
        minimum spacing would then suppress the real peak.
    """

    def __init__(self, delay: int, min_spacing: int, merge_gap: int = 1):
        if int(delay) < 0 or int(min_spacing) < 0:
            raise ValueError(f"delay and min_spacing must be >= 0; got {delay}, {min_spacing}")
        if int(merge_gap) < 1:
            raise ValueError(f"merge_gap must be >= 1 (1 = a run ends at its first step below threshold); got {merge_gap}")
        self.delay, self.min_spacing, self.merge_gap = int(delay), int(min_spacing), int(merge_gap)
        self._below = 0  # consecutive steps below threshold inside the current run
        self._in_run = False
        self._spent = False  # this run already raised its alarm
        self._peak = (-math.inf, 0, 0.0, 0.0, 0)  # (ratio, t, score, threshold, boundary)
        self._last_change = None

    def update(self, t: int, score: float, threshold: float, boundary: int) -> Alarm | None:
        """Feed step ``t``; ``boundary`` is the change index this step's windows would imply."""
        above = exceeds(score, threshold)
        if above:
            self._below = 0
            # the peak is located on the score itself: the per-window threshold rises while a change
            # enters the windows, so score / threshold would peak early
            ratio = float(score)
            if not self._in_run:
                self._in_run, self._spent = True, False
                self._peak = (-math.inf, t, score, threshold, boundary)
            if ratio > self._peak[0] and not self._spent:
                self._peak = (ratio, t, float(score), float(threshold), int(boundary))
            if not self._spent and t - self._peak[1] >= self.delay:
                return self._emit(t)
            return None
        if self._in_run:
            self._below += 1
            if self._below >= self.merge_gap:
                self._in_run = False
                if not self._spent:
                    return self._emit(t)
            elif not self._spent and t - self._peak[1] >= self.delay:
                return self._emit(t)
        return None

    def flush(self, t: int) -> Alarm | None:
        """End of input: close an open run (used by offline replay)."""
        if self._in_run and not self._spent:
            self._in_run = False
            return self._emit(t)
        return None

    def _emit(self, t: int) -> Alarm | None:
        self._spent = True
        _, _, score, thr, boundary = self._peak
        if self._last_change is not None and boundary - self._last_change < self.min_spacing:
            return None
        self._last_change = boundary
        return Alarm(change_index=int(boundary), alarm_index=int(t), score=score, threshold=thr)

    def to_state(self) -> dict:
        return {"delay": self.delay, "min_spacing": self.min_spacing, "merge_gap": self.merge_gap,
                "below": self._below, "in_run": self._in_run,
                "spent": self._spent, "peak": [float(v) for v in self._peak],
                "last_change": -1 if self._last_change is None else int(self._last_change),
                "has_last": self._last_change is not None}

    @classmethod
    def from_state(cls, state: dict) -> "PeakPicker":
        # states written before merge_gap existed ended runs at the first step below threshold
        obj = cls(int(state["delay"]), int(state["min_spacing"]), int(state.get("merge_gap", 1)))
        obj._below = int(state.get("below", 0))
        obj._in_run, obj._spent = bool(state["in_run"]), bool(state["spent"])
        r, t, s, thr, b = (float(v) for v in state["peak"])
        obj._peak = (r, int(t), s, thr, int(b))
        obj._last_change = int(state["last_change"]) if bool(state["has_last"]) else None
        return obj

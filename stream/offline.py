"""Offline change-point detection as a causal replay of the streaming detector.

``detect(series)`` feeds the series sample by sample into a :class:`ChangePointDetector` and
collects its alarms: the detector never sees a sample beyond the one it is scoring (its alarms
are raised at most ``delay`` steps after the peak, as documented in :mod:`stream.alarms`), and it
never sees annotations. At the end of the series an open run above threshold is closed (the only
offline step). The reported change points are the alarms' change indices (window boundaries),
clipped to ``[1, len(series) - 1]``.

Periodic series (period rule, :func:`period_plan`): a univariate series whose warm-up prefix (the
first quarter, at least 64 values) has a clear period P >= 16 samples (autocorrelation peak >= 0.5,
:func:`stream.period.estimate_period`) is block-averaged to about 8 values per period
(s = round(P / 8) samples per block) and replayed with windows of 4 periods (n = 4 round(P / s)
subsequences of k = 3 aggregated values), so both windows hold whole periods and the score follows
the distribution, not the phase. Its threshold comes from the score's own history, not from the
permutation null: on smooth periodic data a contiguous split of whole periods varies *less* than a
random re-split, so the permutation null is far too wide there (TSSB: alarms on 2 of 17 periodic
series; the AR-surrogate null: 1 of 17). The threshold is the upper quantile, at
``s x false_alarm_rate`` per aggregated step (the same rate per input sample), of an exponential
tail fitted above the median of the last 1,000 scores, once 2n exist; the scores of a run above it
are kept out of that history (see :func:`_history_alarms`). Change indices map back to the centre
of their aggregated block; alarms are raised when their block is complete, and not before the
prefix has been seen (the prefix is buffered: causal, with a delay, given the length T). Every
other series (no clear period, P < 16, multivariate, or ``k`` / ``n`` given explicitly) is replayed
exactly as before.

Examples
--------
>>> import numpy as np
>>> rng = np.random.default_rng(1)
>>> y = np.r_[rng.normal(0, 1, 200), rng.normal(0, 5, 200)]
>>> cps = detect(y)
>>> any(abs(c - 200) <= 20 for c in cps)
True
>>> t = np.arange(4000)
>>> wave = np.where(t < 2000, np.sin(2 * np.pi * t / 50), np.sign(np.sin(2 * np.pi * t / 50)))
>>> plan = period_plan(wave + rng.normal(0, 0.1, 4000))
>>> (plan.period, plan.block, plan.k, plan.n)
(50, 6, 3, 32)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from stream.alarms import Alarm, PeakPicker, exceeds, exp_tail_threshold
from stream.detectors.changepoint import ChangePointDetector
from stream.period import MIN_ACF, aggregate, block_centre, block_end, estimate_period
from stream.preprocess import fill_missing


@dataclass
class Replay:
    """Everything a replay produced: change points, alarms, and per-step score / threshold."""

    change_points: list[int]
    alarms: list[Alarm]
    scores: np.ndarray
    thresholds: np.ndarray
    config: dict = field(default_factory=dict)


def _as_rows(series) -> np.ndarray:
    if isinstance(series, (list, tuple)) and series and isinstance(series[0], dict):
        raise ValueError("pass dict samples to ChangePointDetector.step; detect() takes an array (T,) or (T, m)")
    arr = np.array([np.nan if v is None else v for v in series] if isinstance(series, list) and series
                   and not isinstance(series[0], (list, tuple, np.ndarray)) else series, dtype=np.float64)
    if arr.ndim == 1:
        arr = arr[:, None]
    if arr.ndim != 2:
        raise ValueError(f"series must have shape (T,) or (T, m); got {arr.shape}")
    if arr.shape[0] == 0:
        raise ValueError("series is empty")
    if np.any(np.isinf(arr)):
        raise ValueError("series holds infinite values; use NaN for missing values")
    return arr


#: The one default configuration (chosen on reasoning + the dev sample, see the README table):
#: windows of 5% of the series length (6 to 50 subsequences) as the lessons file found for TCPD,
#: subsequences of 3 first differences, sigma = 0.5 x median distance re-chosen every 10 steps,
#: lambda = 0.1, level or difference by the lag-1 autocorrelation at warm-up, and the
#: "ar_or_permutation" null: per-step permutations (unblocked: blocks of k subsequences would leave
#: a 6-subsequence window only 2 blocks) while fewer than 50 values exist before the current window,
#: AR surrogates (the streaming detector's calibrated null, recalibrated every n steps) once they
#: do. Why not permutations throughout: they are exact only for exchangeable subsequences, and on
#: stationary AR(1) series (T = 200-2000, phi = 0-0.9) the replay then found 37 spurious change
#: points per 10,000 samples (5.7 with the switch; README). It differs from the streaming detector's
#: defaults because offline series are short (15 to ~800 points) and windows small: per-step
#: calibration and re-selection while the windows are small, and a null for the first 50 values.
DEFAULTS = {"k": 3, "alpha": 0.1, "symmetric": True, "false_alarm_rate": 1e-4, "n_perm": 10,
            "calibrate_every": 1, "reselect_every": 10, "select": "median", "difference": "auto",
            "perm_block": 1, "null": "ar_or_permutation"}
WINDOW_FRAC, N_MIN, N_MAX = 0.05, 6, 50


def default_window(t_len: int) -> int:
    """Window size for a series of ``t_len`` samples: 5% of it, between 6 and 50."""
    return int(min(N_MAX, max(N_MIN, round(WINDOW_FRAC * t_len))))


#: The period rule (see the module docstring): prefix = first PREFIX_FRAC of the series, at least
#: PREFIX_MIN values; periodic when the period is >= PERIOD_MIN samples (two or more samples per
#: block at POINTS_PER_PERIOD blocks per period; shorter periods already fit several times in the
#: default window); windows of WINDOW_PERIODS periods (several periods so that each window's
#: distribution is stable, few enough that a segment of ~5 periods still fills the current window);
#: the history threshold needs HISTORY_WINDOWS x n scores (two windows' worth, 8 periods) and
#: uses at most HISTORY_MAX of them (as the streaming detector's history guard).
PREFIX_FRAC, PREFIX_MIN, PERIOD_MIN, POINTS_PER_PERIOD, WINDOW_PERIODS = 0.25, 64, 16, 8, 4
HISTORY_WINDOWS, HISTORY_MAX = 2, 1000


@dataclass(frozen=True)
class PeriodPlan:
    """How a periodic series is replayed: period and block size (samples), k and n (aggregated)."""

    period: int
    block: int
    k: int
    n: int
    prefix: int


def period_plan(series, min_acf: float = MIN_ACF) -> PeriodPlan | None:
    """The period rule for a univariate series (None: not periodic, replay it as is).

    Looks only at the warm-up prefix (the first quarter, at least 64 values; missing values carried
    forward); see the module docstring for the rule and its reasons.

    Examples
    --------
    >>> period_plan(np.random.default_rng(0).normal(size=1000)) is None
    True
    """
    x = _as_rows(series)
    if x.shape[1] != 1:
        return None
    t_len = x.shape[0]
    prefix = min(t_len, max(PREFIX_MIN, int(PREFIX_FRAC * t_len)))
    head = fill_missing(x[:prefix])[:, 0]
    p = estimate_period(head, min_acf=min_acf)
    if p < PERIOD_MIN:
        return None
    s = max(2, int(round(p / POINTS_PER_PERIOD)))
    per_agg = max(2, int(round(p / s)))
    return PeriodPlan(period=p, block=s, k=int(DEFAULTS["k"]), n=WINDOW_PERIODS * per_agg, prefix=prefix)


def _history_alarms(scores: np.ndarray, n: int, k: int, false_alarm_rate: float,
                    merge_gap: int = 1) -> tuple[list[Alarm], np.ndarray]:
    """Causal alarms from a score trace, thresholded by an exponential tail fitted to the past scores.

    The threshold at step t is the upper ``false_alarm_rate`` quantile of an exponential tail above
    the median of the scores before t (:func:`~stream.alarms.exp_tail_threshold`, the AR null's tail
    model; at most the last ``HISTORY_MAX`` scores, from ``HISTORY_WINDOWS * n`` on). Not
    median + z MAD: the score is skewed (a divergence near 0 with rare large values), and a
    normal tail put the threshold inside the noise of stationary periodic data (alarms every few
    periods on a clean sine wave). Scores of a run above the threshold are kept out of the history
    (a change must not raise its own threshold: with them in, the run of a change closed before its
    peak), unless the run outlasts the ``2n + k`` steps one change can keep the windows apart: then
    the raised level is the new normal and its scores join the history. Runs are picked as in the
    detector (peak, delay n, change indices at least n apart, change index = window boundary of the
    peak), except that a run survives dips below the threshold shorter than ``merge_gap`` steps.
    """
    picker = PeakPicker(n, n, merge_gap=merge_gap)
    thr = np.full(scores.shape[0], np.nan)
    alarms: list[Alarm] = []
    hist = np.empty(scores.shape[0])  # accepted past scores, in time order
    seen = 0
    held: list[float] = []  # scores of the current run above threshold
    for t, s in enumerate(scores):
        if not np.isfinite(s):
            continue
        if seen >= HISTORY_WINDOWS * n:
            thr[t] = exp_tail_threshold(hist[max(0, seen - HISTORY_MAX): seen], false_alarm_rate)
        if exceeds(s, thr[t]):
            held.append(float(s))
            if len(held) > 2 * n + k:  # a lasting level, not one change: absorb it
                hist[seen: seen + len(held)] = held
                seen += len(held)
                held = []
        else:
            held = []  # a closed run was a change: its scores stay out
            hist[seen] = s
            seen += 1
        a = picker.update(t, float(s), float(thr[t]), t - n + 1 - (k - 1) // 2)
        if a is not None:
            alarms.append(a)
    a = picker.flush(scores.shape[0] - 1)
    if a is not None:
        alarms.append(a)
    return alarms, thr


def _replay_periodic(x: np.ndarray, plan: PeriodPlan, progress, params: dict) -> Replay:
    """Replay of the block-averaged series with the history threshold, mapped back to the time axis."""
    t_len, s = x.shape[0], plan.block
    xa = aggregate(fill_missing(x)[:, 0], s)
    # the detector supplies the scores; its own (permutation) threshold is not used, so it is
    # calibrated rarely (once per window length) to save time
    cfg = {**DEFAULTS, **params, "k": plan.k, "n": plan.n, "n_min": plan.n, "window_frac": 0.0,
           "calibrate_every": plan.n, "null": "permutation"}  # the score: the sum of both directions
    det = ChangePointDetector(**cfg)
    m = xa.shape[0]
    sc = np.full(m, np.nan)
    for j in range(m):
        det.step(float(xa[j]))
        sc[j] = det.score
        if progress is not None and (j % 1000 == 0 or j == m - 1):
            progress(min(t_len, (j + 1) * s), t_len)
    # false_alarm_rate is per input sample; one aggregated step stands for s of them
    # the score of a periodic series wavers within a period: a dip shorter than one period does not
    # end a run (it split the rising edge of changes, with alarms up to 3 periods early)
    per_period = max(1, int(round(plan.period / s)))
    agg_alarms, thr_a = _history_alarms(sc, plan.n, plan.k, min(0.25, s * cfg["false_alarm_rate"]),
                                        merge_gap=per_period)
    alarms = [Alarm(change_index=int(block_centre(a.change_index, s)),
                    alarm_index=int(max(block_end(a.alarm_index, s), plan.prefix - 1)),
                    score=a.score, threshold=a.threshold) for a in agg_alarms]
    # traces on the original axis: a block's value holds from the sample completing it on
    scores, thr = np.full(t_len, np.nan), np.full(t_len, np.nan)
    for trace, src in ((scores, sc), (thr, thr_a)):
        held = np.repeat(src, s)
        trace[s - 1: s - 1 + held.size] = held[: t_len - s + 1]
    cps = sorted({min(max(a.change_index, 1), t_len - 1) for a in alarms})
    config = {**det._params(), "period": plan.period, "block": s, "prefix": plan.prefix,
              "threshold": "exponential tail of the score history"}
    return Replay(cps, alarms, scores, thr, config)


def describe_config(params: dict | None = None) -> dict:
    """The replay configuration as data (for benchmark reports): defaults, window and period rules.

    Examples
    --------
    >>> describe_config({"seed": 3})["seed"]
    3
    """
    cfg = {**DEFAULTS, "n": f"round({WINDOW_FRAC} x T) clipped to [{N_MIN}, {N_MAX}]",
           "period_rule": (f"P from the autocorrelation of the first {PREFIX_FRAC:g} of the series (at least "
                           f"{PREFIX_MIN} values, peak >= {MIN_ACF:g}); if P >= {PERIOD_MIN}: blocks of "
                           f"round(P/{POINTS_PER_PERIOD}), k = {DEFAULTS['k']}, n = {WINDOW_PERIODS} periods, "
                           "exponential-tail threshold on the score history at block x false_alarm_rate")}
    cfg.update(params or {})
    return cfg


def replay(series, progress: Callable[[int, int], None] | None = None, period: str | None = "auto",
           **params) -> Replay:
    """Causal replay returning alarms and the score trace (see :func:`detect` for ``params``).

    Offline the length T is known, so unless ``n`` is given the window is fixed at
    :func:`default_window` (T) (the streaming detector instead grows its window with the length seen).
    ``period="auto"`` (default) applies the period rule of the module docstring when neither ``k``
    nor ``n`` is given; ``period=None`` never does.
    """
    if period not in ("auto", None):
        raise ValueError(f"period must be 'auto' (the period rule) or None (never aggregate); got {period!r}")
    x = _as_rows(series)
    if period == "auto" and "k" not in params and "n" not in params:
        plan = period_plan(x)
        if plan is not None:
            return _replay_periodic(x, plan, progress, params)
    cfg = {**DEFAULTS, **params}
    if "n" not in params:
        n = default_window(x.shape[0])
        cfg.update(n=n, n_min=n, window_frac=0.0)
    det = ChangePointDetector(**cfg)
    t_len = x.shape[0]
    scores = np.full(t_len, np.nan)
    thr = np.full(t_len, np.nan)
    alarms: list[Alarm] = []
    for t in range(t_len):
        a = det.step(x[t])
        scores[t], thr[t] = det.score, det.threshold
        if a is not None:
            alarms.append(a)
        if progress is not None and (t % 1000 == 0 or t == t_len - 1):
            progress(t + 1, t_len)
    a = det.flush()
    if a is not None:
        alarms.append(a)
    cps = sorted({min(max(a.change_index, 1), t_len - 1) for a in alarms}) if t_len > 1 else []
    return Replay(cps, alarms, scores, thr, det._params())


def detect(series, **params) -> list[int]:
    """Change points of ``series`` (shape (T,) or (T, m); NaN/None = missing) by causal replay.

    ``params`` are :class:`~stream.detectors.changepoint.ChangePointDetector` arguments (and
    ``period``, see :func:`replay`); the defaults are the one configuration used for every
    benchmark series.
    """
    return replay(series, **params).change_points

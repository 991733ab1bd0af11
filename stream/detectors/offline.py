"""Offline change-point detection as a causal replay of the streaming detector.

``detect(series)`` feeds the series sample by sample into a :class:`ChangePointDetector` and
collects its alarms: the detector never sees a sample beyond the one it is scoring (its alarms
are raised at most ``delay`` steps after the peak, as documented in :mod:`ratiowatch.stream.calibration.peaks`), and it
never sees annotations. At the end of the series an open run above threshold is closed (the only
offline step). The reported change points are the alarms' change indices (window boundaries),
clipped to ``[1, len(series) - 1]``.

Periodic series (period rule, :func:`period_plan`): a univariate series whose warm-up prefix (the
first quarter, at least 64 values) has a clear period P >= 16 samples (autocorrelation peak >= 0.5,
:func:`ratiowatch.stream.series.period.estimate_period`) is averaged over phase-locked blocks, exactly 8 per estimated
period (:func:`ratiowatch.stream.series.period.aggregate_periods`; about P / 8 samples each), and replayed with windows
of 4 periods (n = 32 subsequences of k = 3 aggregated values), so both windows hold whole periods
and the score follows the distribution, not the phase. Its threshold comes from a *whole-period*
permutation null: the 8 periods of the pooled windows are re-split by exchanging whole periods
(``perm_block`` = 8 aggregated steps), so every random split is made of whole periods as the real one
is, recalibrated once per period from the current windows alone, at ``(P / 8) x false_alarm_rate``
per aggregated step (the same rate per input sample). Shuffling single subsequences instead mixes
phases and that null was far too wide (alarms on 2 of TSSB's 17 periodic series); a threshold
learned from the score's own history (the rule before) learned from the first 8 periods, which often
hold a change, and then stayed above later changes' peaks. Because this null is computed from
windows that already hold a change, it rises with the score, and the run above it covers only the
change's entry into the current window: the change index is therefore the peak of the score from
the run's peak to one window length (4 periods) after its alarm, where the change sits at the
window boundary, and the alarm is raised then. Change indices map back to the centre of their
block; alarms are not raised before the prefix has been seen (the prefix is buffered: causal, with
a delay, given the length T). Every other series (no clear period, P < 16, multivariate, or ``k`` /
``n`` given explicitly) is replayed exactly as before.

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
(50, 6.25, 3, 32)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ratiowatch.stream.calibration.peaks import Alarm, PeakPicker
from ratiowatch.stream.detectors.changepoint import ChangePointDetector
from ratiowatch.stream.series.period import MIN_ACF, aggregate_periods, block_centre, block_end, estimate_period
from ratiowatch.stream.series.preprocess import fill_missing


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
#: windows of 5% of the series length (6 to 50 subsequences) as a prototype on TCPD's development series suggested,
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
#: distribution is stable, few enough that a segment of ~5 periods still fills the current window).
PREFIX_FRAC, PREFIX_MIN, PERIOD_MIN, POINTS_PER_PERIOD, WINDOW_PERIODS = 0.25, 64, 16, 8, 4


@dataclass(frozen=True)
class PeriodPlan:
    """How a periodic series is replayed: period and mean block size (samples), k and n (aggregated)."""

    period: int
    block: float
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
    return PeriodPlan(period=p, block=p / POINTS_PER_PERIOD, k=int(DEFAULTS["k"]),
                      n=WINDOW_PERIODS * POINTS_PER_PERIOD, prefix=prefix)


def _replay_periodic(x: np.ndarray, plan: PeriodPlan, progress, params: dict) -> Replay:
    """Replay of the phase-locked block means with the whole-period permutation null, on the time axis."""
    t_len = x.shape[0]
    xa, edges = aggregate_periods(fill_missing(x)[:, 0], plan.period, POINTS_PER_PERIOD)
    n, per_period = plan.n, POINTS_PER_PERIOD
    cfg = {**DEFAULTS, **params}
    # false_alarm_rate is per input sample; one aggregated step stands for P / 8 of them
    cfg.update({"k": plan.k, "n": n, "n_min": n, "window_frac": 0.0, "null": "permutation",
                "perm_block": per_period, "calibrate_every": per_period,
                "false_alarm_rate": min(0.25, plan.block * cfg["false_alarm_rate"])})
    det = ChangePointDetector(**cfg)
    m = xa.shape[0]
    sc, thr_a = np.full(m, np.nan), np.full(m, np.nan)
    for j in range(m):
        det.step(float(xa[j]))
        sc[j], thr_a[j] = det.score, det.threshold
        if progress is not None and (j % 1000 == 0 or j == m - 1):
            progress(min(t_len, int(edges[j + 1])), t_len)
    shift = n - 1 + (plan.k - 1) // 2  # a peak at step j puts the change at block j - shift
    # the score of a periodic series wavers within a period: a dip shorter than one period does not
    # end a run (it split the rising edge of changes, with alarms up to 3 periods early)
    picker = PeakPicker(n, n, merge_gap=per_period)
    runs = [a for a in (picker.update(j, sc[j], thr_a[j], j - shift) for j in range(m)) if a is not None]
    last = picker.flush(m - 1)
    if last is not None:
        runs.append(last)
    agg_alarms: list[Alarm] = []
    for run in runs:
        # the null rose with the change: the score's own peak (change at the window boundary) comes
        # after the run; look for it up to one window after the run's alarm, and alarm then
        lo, hi = run.change_index + shift, min(m - 1, run.alarm_index + n)
        peak = lo + int(np.argmax(np.where(np.isfinite(sc[lo: hi + 1]), sc[lo: hi + 1], -np.inf)))
        if agg_alarms and peak - shift - agg_alarms[-1].change_index < n:
            continue  # one event, one alarm (the streaming detector's minimum spacing)
        agg_alarms.append(Alarm(change_index=peak - shift, alarm_index=hi, score=float(sc[peak]),
                                threshold=float(run.threshold)))
    alarms = [Alarm(change_index=block_centre(a.change_index, edges),
                    alarm_index=max(block_end(a.alarm_index, edges), plan.prefix - 1),
                    score=a.score, threshold=a.threshold) for a in agg_alarms]
    # traces on the original axis: a block's value holds from the sample completing it on
    scores, thr = np.full(t_len, np.nan), np.full(t_len, np.nan)
    for j in range(m):
        end = edges[j + 2] - 1 if j + 2 < edges.size else t_len
        scores[edges[j + 1] - 1: end], thr[edges[j + 1] - 1: end] = sc[j], thr_a[j]
    cps = sorted({min(max(a.change_index, 1), t_len - 1) for a in alarms})
    config = {**det._params(), "period": plan.period, "block": plan.block, "prefix": plan.prefix,
              "threshold": "permutation null exchanging whole periods between the windows"}
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
                           f"P/{POINTS_PER_PERIOD} samples (phase-locked), k = {DEFAULTS['k']}, n = {WINDOW_PERIODS} "
                           "periods, permutation null exchanging whole periods at block x false_alarm_rate, "
                           "change index at the score's peak up to one window after the run")}
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

    ``params`` are :class:`~ratiowatch.stream.detectors.changepoint.ChangePointDetector` arguments (and
    ``period``, see :func:`replay`); the defaults are the one configuration used for every
    benchmark series.
    """
    return replay(series, **params).change_points

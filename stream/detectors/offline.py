"""Offline change-point detection: binary segmentation of a density-ratio split profile with a
calibrated stop test.

``detect(series)`` may look at the whole series (it is not causal):

1. Rows with a missing value are left out (the change points are still rows of the input: a
   change across a gap is placed at the first row after it), as the daemon leaves such records
   out. A gap carried forward would be a run of one repeated value, a pattern unlike any the
   series has, and the profile found it: a gap of 100 rows in N(0, 1) noise got a change point
   at its start, 50 missing rows at the start one at their end, and a gap of 60 rows in one of
   two channels change points at both its ends. In a periodic series a gap keeps the cycle's
   phase: whole cycles are left out, and the gap's length modulo the period is given back as the
   cycle before it (:func:`~ratiowatch.stream.series.preprocess.bridge_periodic_gaps`; left out
   whole, a gap of 37 rows in a cycle of 24 got a change point in 6 of 8 series). A series in
   which no row has every channel is an error; a series with no value at all has no change point.
   Then each channel is standardised, and the subsequence width comes from the series' own
   autocorrelation (:func:`~ratiowatch.stream.series.width.subsequence_width`:
   a quarter of its period when it has a significant one, else 3 samples; at most T / 10).
2. The split profile (:mod:`ratiowatch.core.split_profile`) scores every candidate split of the
   segment: the symmetric RuLSIF divergence between the subsequences before and after it, scaled
   by the effective sample size, on raw and z-normalised subsequence views. A periodic series is
   scored at two widths, a quarter cycle and a whole one, and the larger profile counts
   (``widths="both"``, :class:`~ratiowatch.core.split_profile.MultiWidthProfile`): a quarter
   cycle sees changes of fine shape and frequency with four times the rows, a whole cycle sees
   changes that only the cycle as a whole shows. The surrogates are scored the same way, so the
   test accounts for the choice. A series of several channels is scored on their joint
   subsequences, or channel by channel when a channel has a period
   (:class:`~ratiowatch.core.split_profile.ChannelwiseProfile`, the largest channel's profile
   counts): the phases between independent jittered cycles wander, the joint subsequences of a
   long segment then differ between its ends, and the AR surrogates, one channel at a time, never
   do so (five such channels got change points in every series of 600 samples or more).
3. The segment's largest score is tested against the largest scores of change-free AR surrogates
   of the same segment (:mod:`ratiowatch.stream.calibration.split_test`), fitted around its line
   and without its significant level shifts. If it is significant, the best split is a change
   point (moved to such a level shift if one lies within a subsequence of it) and both halves
   are segmented again (breadth first); otherwise the segment has no change.
4. A univariate periodic segment of at least 16 cycles (and at most 5,000 subsequences at a
   stride of one sample) is also tested against its own quarter-cycle subsequences in random
   orders of two-cycle blocks
   (:mod:`ratiowatch.stream.calibration.cycle_permutation`, ``cycle_permutation``). The AR
   surrogates of a cycle wander in amplitude, so that null is valid but wide there; a level
   shift inside a jittered cycle stayed below it. Each of the two tests then takes half the
   level, and the segment is split when either rejects (at the split of the profile it tested).

Because a change-free series can only gain a change point through the first test, the chance that
it gets any change point at all is the level of that test, or of the pair by Bonferroni
(``false_alarm_rate``, 0.05 by default, an exact Monte-Carlo rank test), whatever its length; the
test is a scan over all splits, so it accounts for the search. The later tests spend the level
(``spending``): the k-th test rejects only if it passes the rank test and the Gumbel-tail p-value
of its maximum is at most ``false_alarm_rate / k``, so the expected number of false splits grows
like the harmonic sum of the tests made, not like their number. Each change point is the split itself (the first sample of
the new segment), never a detection time.

Examples
--------
>>> import numpy as np
>>> rng = np.random.default_rng(1)
>>> y = np.r_[rng.normal(0, 1, 200), rng.normal(0, 5, 200)]
>>> cps = detect(y)
>>> len(cps) == 1 and abs(cps[0] - 200) <= 10
True
>>> detect(rng.normal(size=300))
[]
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from ratiowatch.core.params import check_bool, check_choice, check_int, check_real, check_seed
from ratiowatch.core.split_profile import ChannelwiseProfile, MultiWidthProfile, SplitProfile, check_profile_settings
from ratiowatch.stream.calibration.peaks import Alarm
from ratiowatch.stream.calibration.cycle_permutation import cycle_permutation_test, permutation_profile
from ratiowatch.stream.calibration.split_test import MAX_ORDER, SplitTest, check_max_order, max_split_test
from ratiowatch.stream.series.preprocess import (bridge_periodic_gaps, clip_unrepresentable, fill_missing,
                                                 standardise_columns)
from ratiowatch.stream.series.width import CYCLE_PARTS, DEFAULT_WIDTH, MIN_ROWS, subsequence_width


@dataclass
class Replay:
    """Everything a run produced: change points, alarms, and the profile and threshold traces.

    ``scores[t]`` is the split profile at split ``t`` of the deepest segment tested around ``t``
    (held between the grid splits; NaN where no split was scored), ``thresholds[t]`` the largest
    AR-surrogate maximum drawn for that segment's test. Each alarm carries the statistic and the
    largest null maximum of the test that rejected: the AR test, or for a periodic segment that
    only the cycle permutation test rejected, that test's (module docstring, step 4).
    """

    change_points: list[int]
    alarms: list[Alarm]
    scores: np.ndarray
    thresholds: np.ndarray
    config: dict = field(default_factory=dict)


#: smallest ``false_alarm_rate``: the stop test's Monte-Carlo rank test draws ``2 / rate - 1``
#: surrogates per split (1,999 at 0.001: about 15 s for 400 samples; 1e-4 would take minutes)
MIN_FALSE_ALARM_RATE = 1e-3

#: The one default configuration. The constants follow from the method (see the modules):
#: alpha = 0.1 and a sharp kernel (0.5 x median distance) with a small ridge (1e-3) keep the
#: profile peaked; 32 centres per view; 200 grid splits then a refinement; AR surrogates of order
#: <= 5; subsequence starts every width / 4 samples (neighbours overlap by three quarters), and
#: at most MAX_ROWS subsequences per segment (a coarser stride on very long series); a periodic
#: series scored at a quarter and a whole cycle.
DEFAULTS = {"false_alarm_rate": 0.05, "alpha": 0.1, "lam": 1e-3, "sigma_factor": 0.5, "n_centres": 32,
            "grid": 200, "max_order": MAX_ORDER, "width": None, "seed": 0, "spending": True,
            "widths": "both", "cycle_permutation": True, "smooth_steps": False}
MAX_ROWS = 5000
METHODS = ("rulsif", "ulsif")
#: subsequence widths of a periodic series: both a quarter and a whole cycle, or only one of them
WIDTHS = ("both", "quarter", "period")
#: the shortest series with a split at any width (a width of 1 and 5 subsequences on each side)
MIN_SPLIT_ROWS = 11
#: the options read as True or False
BOOL_OPTIONS = ("spending", "cycle_permutation", "smooth_steps")


def _as_rows(series, width: int | None = None, orientation: bool = False) -> np.ndarray:
    """``series`` as float rows (T, m): samples are rows, channels columns.

    Refused rather than read as something else: an array without channels ((T, 0)); with a given
    ``width``, a series whose rows with a value in every channel leave no split of that width to
    score; and with ``orientation`` (:func:`detect`'s array, as its caller passed it), fewer rows
    than the shortest series with a split (:data:`MIN_SPLIT_ROWS`) beside at least that many
    columns, such as a (1, T) row vector or a transposed (channels, T) array, which would be read
    as a few samples of T channels and silently get no change point. A wide array with enough
    rows (40 samples of 60 channels) is a series like any other, and so is any array :func:`replay`
    reads: the rows of a table (``ratiowatch detect``) are its samples, however few.
    """
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
    if arr.shape[1] == 0:
        raise ValueError(f"series has no channel (shape {arr.shape}); pass an array (T,) or (T, m) with m >= 1")
    if np.any(np.isinf(arr)):
        raise ValueError("series holds infinite values; use NaN for missing values")
    rows, channels = arr.shape
    if orientation and rows < MIN_SPLIT_ROWS <= channels:
        raise ValueError(
            f"series has {rows} row(s) of {channels} channels, fewer rows than any split needs "
            f"({MIN_SPLIT_ROWS}); detect() reads rows as samples and columns as channels: pass "
            "series.T for an array (channels, T)"
            + (", or series.ravel() for one series as a row (1, T)" if rows == 1 else ""))
    if width is not None:
        complete = int((~np.isnan(arr).any(axis=1)).sum())  # the rows analysed
        prof = build_profile(complete, min(width, complete), 0, DEFAULTS)[0] if complete else None
        if prof is not None and (complete < prof.min_length() or prof.candidates(complete).size == 0):
            fits = (f"use a width of at most about {complete // MIN_ROWS} (T // {MIN_ROWS}), or None (from the data)"
                    if complete >= MIN_SPLIT_ROWS else f"{complete} rows are too few for a split at any width")
            raise ValueError(
                f"width={width} leaves no split to score in {'the ' if complete < rows else ''}{complete} rows"
                + (f" (of {rows}) with a value in every channel" if complete < rows else "")
                + f": a split needs {prof.rows_min} subsequences of the width on each side; {fits}")
    return arr


def _standardise(x: np.ndarray) -> np.ndarray:
    x = clip_unrepresentable(fill_missing(x))  # an error code such as 9.9e37 would round the rest away
    return standardise_columns(x)


def _config(params: dict) -> dict:
    unknown = set(params) - set(DEFAULTS) - {"method"}
    if unknown:
        raise TypeError(f"unknown detect() parameter(s) {sorted(unknown)}; known: {sorted(DEFAULTS)} and 'method'")
    cfg = {**DEFAULTS, **params}
    method = cfg.pop("method", "rulsif")
    if method not in METHODS:
        raise ValueError(f"offline detect supports method in {METHODS} (the split profile is a RuLSIF fit); got {method!r}")
    if method == "ulsif":
        if "alpha" in params and check_real(params["alpha"], "alpha") != 0.0:
            raise ValueError(f"method='ulsif' is RuLSIF with alpha = 0; got alpha={params['alpha']!r} (leave "
                             "alpha out, or use method='rulsif' with that alpha)")
        cfg["alpha"] = 0.0
    cfg["false_alarm_rate"] = check_real(cfg["false_alarm_rate"], "false_alarm_rate")
    if not MIN_FALSE_ALARM_RATE <= cfg["false_alarm_rate"] < 1.0:
        raise ValueError(f"false_alarm_rate must be in [{MIN_FALSE_ALARM_RATE}, 1), e.g. 0.05; got "
                         f"{cfg['false_alarm_rate']} (it is the chance that a change-free series gets any "
                         "change point, not a rate per sample; the exact test draws 2 / rate surrogates "
                         "per split, so a smaller rate takes minutes per series)")
    if cfg["width"] is not None:
        try:
            cfg["width"] = check_int(cfg["width"], "width", minimum=1)
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"{exc} (or None: from the data)") from None
    check_choice(cfg["widths"], "widths", WIDTHS)
    for name in BOOL_OPTIONS:
        cfg[name] = check_bool(cfg[name], name)
    # None would draw the surrogates from the OS's entropy: results that differ run to run
    cfg["seed"] = check_seed(cfg["seed"])
    check_profile_settings(alpha=cfg["alpha"], lam=cfg["lam"], sigma_factor=cfg["sigma_factor"],
                           n_centres=cfg["n_centres"], grid=cfg["grid"])
    check_max_order(cfg["max_order"])
    cfg["method"] = method  # recorded in the replay's config (the profile reads alpha)
    return cfg


def describe_config(params: dict | None = None) -> dict:
    """The configuration as data (for benchmark reports).

    Examples
    --------
    >>> describe_config({"seed": 3})["seed"]
    3
    """
    cfg = {**DEFAULTS, "width_rule": (f"significant autocorrelation period / {CYCLE_PARTS} (at least {DEFAULT_WIDTH}), "
                                      f"with widths='both' also the whole period; else {DEFAULT_WIDTH}; "
                                      f"at most T // {MIN_ROWS}"),
           "stride": f"max(1, width // 4, ceil(rows / {MAX_ROWS}))",
           "stop": ("breadth-first binary segmentation; max of the split profile vs AR-surrogate maxima, "
                    "test k at level false_alarm_rate / k (Gumbel tail) after the first; a univariate periodic "
                    "segment of >= 16 cycles also vs its quarter-cycle rows in random orders of two-cycle "
                    "blocks, each test at half the level")}
    cfg.update(params or {})
    return cfg


def build_profile(t_len: int, width: int, period: int, cfg: dict, channels: int = 1) -> tuple:
    """(profile, width) for a series of ``t_len`` samples: a :class:`SplitProfile` of ``width``
    or, for a periodic series with ``widths="both"``, a :class:`MultiWidthProfile` of a quarter
    and a whole cycle (``cfg`` holds the profile settings of :data:`DEFAULTS`). A series of
    several ``channels`` with a period is scored channel by channel
    (:class:`~ratiowatch.core.split_profile.ChannelwiseProfile`: the phases between cycles wander,
    and the joint embedding took that for change), one without a period jointly."""

    def profile_of(w: int) -> SplitProfile:
        return SplitProfile(width=w, stride=max(1, w // 4, math.ceil((t_len - w + 1) / MAX_ROWS)),
                            alpha=float(cfg["alpha"]), lam=float(cfg["lam"]), n_centres=int(cfg["n_centres"]),
                            sigma_factor=float(cfg["sigma_factor"]), grid=int(cfg["grid"]))

    if cfg["widths"] == "period" and period:
        width = min(period, t_len // MIN_ROWS)
    prof = profile_of(width)
    if cfg["widths"] == "both" and period and min(period, t_len // MIN_ROWS) > width:
        prof = MultiWidthProfile((prof, profile_of(min(period, t_len // MIN_ROWS))))
    if channels > 1 and period:
        prof = ChannelwiseProfile(prof)
    return prof, width


def at_level_shift(split: int, shifts, profile) -> int:
    """The split, or the nearest of ``shifts`` (rows of significant level shifts, see
    :func:`~ratiowatch.stream.calibration.split_test.remove_level_shifts`) within one subsequence
    of it (the width and stride of ``profile``'s finest part).

    The profile places a split to about a subsequence; a shift's own statistic finds its row. On
    a noise-free step the profile's plateau put the split one sample early, and the sample left
    behind became a second, spurious change (offline) or a glitch at the start of the restarted
    window that slowed the next alarm (streaming).

    Examples
    --------
    >>> from ratiowatch.core.split_profile import SplitProfile
    >>> prof = SplitProfile(width=3)
    >>> at_level_shift(498, [500, 900], prof), at_level_shift(480, [500], prof)
    (500, 480)
    """
    resolution = min(q.width + q.stride for q in getattr(profile, "profiles", (profile,)))
    near = [int(k) for k in shifts if abs(k - split) <= resolution]
    return min(near, key=lambda k: (abs(k - split), k)) if near else split


def replay(series, progress: Callable[[int, int], None] | None = None, **params) -> Replay:
    """Change points, alarms and traces of ``series`` (see :func:`detect` for ``params``)."""
    cfg = _config(params)
    raw = _as_rows(series, cfg["width"])
    t_len = raw.shape[0]
    rows = np.flatnonzero(~np.isnan(raw).any(axis=1))
    if rows.size == 0 and not np.isnan(raw).all():
        raise ValueError(f"no row has a value in every one of the {raw.shape[1]} channels; detect the "
                         "channels one at a time, or fill their gaps first (e.g. by interpolation)")
    if 0 < rows.size < t_len:  # rows with a missing value are left out (module docstring, step 1)
        return _on_rows(raw, rows, progress, params)
    x = _standardise(raw)
    m = x.shape[1]
    width, period = subsequence_width(x) if cfg["width"] is None else (min(int(cfg["width"]), t_len), 0)

    prof, width = build_profile(t_len, width, period, cfg, m)
    stride = getattr(prof, "profiles", (prof,))[0].stride
    rng = np.random.default_rng(cfg["seed"])
    level = float(cfg["false_alarm_rate"])
    scores = np.full(t_len, np.nan)
    thresholds = np.full(t_len, np.nan)
    alarms: list[Alarm] = []
    done = 0
    stack = [(0, t_len)]
    n_tests = 0
    while stack:
        a, e = stack.pop(0)
        seg = x[a:e]
        stat, split, (grid, prof_values) = prof.best(seg, trace=True) if e - a >= prof.min_length() else (
            -math.inf, -1, (np.zeros(0, dtype=np.int64), np.zeros(0)))
        if split < 0:
            done += e - a
            if progress is not None:
                progress(done, t_len)
            continue
        n_tests += 1
        # a periodic segment is also tested against its own cycles in random orders; each test
        # then takes half the level (Bonferroni), so the pair keeps it
        perm_prof = permutation_profile(prof, e - a, period) if cfg["cycle_permutation"] and m == 1 else None
        perm = None
        if perm_prof is not None:
            perm_stat, perm_split = perm_prof.best(seg)
            perm = cycle_permutation_test(seg, perm_prof, perm_stat, period, level / 2, rng)
        share = level if perm is None else level / 2
        test = max_split_test(seg, prof, stat, share, rng, max_order=int(cfg["max_order"]),
                              smooth_steps=bool(cfg["smooth_steps"]))
        reject = _passes(test, share, n_tests, cfg["spending"])
        alarm_score, alarm_threshold = stat, test.critical
        if not reject and perm is not None and _passes(perm, share, n_tests, cfg["spending"]):
            # the alarm carries the statistic and null of the test that rejected
            reject, split, alarm_score, alarm_threshold = True, perm_split, perm_stat, perm.critical
        # traces: the profile held from each grid split to the next, the threshold over the segment
        for g, s in enumerate(grid):
            stop = grid[g + 1] if g + 1 < grid.size else e - a
            scores[a + s: a + stop] = prof_values[g]
        thresholds[a:e] = test.critical
        if reject:
            split = at_level_shift(split, test.shifts, prof)
            alarms.append(Alarm(change_index=a + split, alarm_index=t_len - 1, score=alarm_score,
                                threshold=alarm_threshold))
            stack.extend([(a, a + split), (a + split, e)])
        else:
            done += e - a
            if progress is not None:
                progress(done, t_len)
    alarms.sort(key=lambda al: al.change_index)
    widths = [q.width for q in getattr(prof, "profiles", (prof,))]
    config = {**cfg, "width": width, "period": period, "stride": stride, "widths": widths}
    return Replay([al.change_index for al in alarms], alarms, scores, thresholds, config)


def _on_rows(raw: np.ndarray, rows: np.ndarray, progress: Callable[[int, int], None] | None,
             params: dict) -> Replay:
    """The replay of ``raw[rows]``, its change points, alarms and traces put back on ``raw``'s rows
    (traces NaN at the rows left out)."""
    t_len = raw.shape[0]
    inner = None if progress is None else (lambda done, total: progress(round(done * t_len / total), t_len))
    # a periodic series keeps its phase across a gap: whole cycles are left out, the rest of the
    # gap is given back as the cycle before it (bridge_periodic_gaps)
    period = subsequence_width(_standardise(raw[rows]))[1]
    analysed, values, bridged = bridge_periodic_gaps(raw, rows, period)
    rep = replay(values, progress=inner, **params)
    scores, thresholds = np.full(t_len, np.nan), np.full(t_len, np.nan)
    kept = ~bridged
    scores[rows], thresholds[rows] = rep.scores[kept], rep.thresholds[kept]
    # a change on a row given back is placed at the first kept row after it (the gap's end)
    real = np.flatnonzero(kept)
    to_row = analysed[real[np.searchsorted(real, np.arange(analysed.size))]]
    alarms = [replace(a, change_index=int(to_row[a.change_index]), alarm_index=t_len - 1) for a in rep.alarms]
    return Replay([a.change_index for a in alarms], alarms, scores, thresholds, rep.config)


def _passes(test: SplitTest, level: float, k: int, spending: bool) -> bool:
    """Whether the k-th test (breadth first) rejects at ``level``: its Monte-Carlo p-value, and
    with ``spending`` after the first also its Gumbel-tail p-value at ``level / k``."""
    return test.reject and (not spending or k == 1 or test.tail_p_value <= level / k)


def detect(series, **params) -> list[int]:
    """Change points of ``series`` (shape (T,) or (T, m); NaN/None = missing), sorted.

    Parameters (all optional; the defaults are the one configuration used for every series)
    ----------
    false_alarm_rate : float
        Chance that a change-free series gets any change point (the stop test's level); 0.05. At
        least 0.001: the test's cost grows as its inverse.
    width : int or None
        Subsequence width (an integer >= 1); None (default) chooses it from the data. A width that
        leaves no split to score (a split needs a few subsequences of the width on each side: at
        most about T // 10) is an error.
    widths : {"both", "quarter", "period"}
        For a periodic series (``width=None``): score a quarter cycle and a whole cycle and take the
        larger profile (default), or only one of them.
    alpha, lam, sigma_factor, n_centres, grid : float / int
        Split profile settings (:class:`~ratiowatch.core.split_profile.SplitProfile`).
    max_order : int
        Largest AR order of the surrogates.
    spending : bool
        Test k > 1 at level ``false_alarm_rate / k`` (module docstring); True by default.
    cycle_permutation : bool
        Also test a univariate periodic segment against its own cycles in random orders, each test
        at half the level (module docstring); True by default.
    smooth_steps : bool
        Look harder for level steps when fitting the stop test's null, in smooth, persistent series
        and in staircases (:func:`~ratiowatch.stream.calibration.split_test.remove_level_shifts`);
        False by default. On the change suite it finds 34 of 40 steps of 4.4 marginal sd in AR(1)
        noise at phi = 0.9 (20 without) and 169 of 180 steps of a staircase (131 without), with the
        synthetic null suite as before; on series that switch between levels as their ordinary
        behaviour (appliances, insect EPG) it adds change points (docs/experiments.md, X and X3).
    method : {"rulsif", "ulsif"}
        The divergence (uLSIF is RuLSIF with alpha = 0, scored in one direction: see
        :mod:`ratiowatch.core.split_profile`; so with "ulsif" an ``alpha`` other than 0 is an
        error). On the synthetic suites uLSIF keeps the false-change target but finds fewer
        changes than RuLSIF (278 against 422 of 460; docs/results.md).
    seed : int
        Drives the surrogates (results are deterministic given it): an integer >= 0, 0 by default
        (None, which would draw from the OS's entropy, is refused).

    ``spending``, ``cycle_permutation`` and ``smooth_steps`` take True or False only (a string
    such as "false" is refused, not read by its truthiness). The series is refused when it has no
    channel, or fewer rows than any split needs (11) beside at least as many columns: a (1, T) row
    vector or a transposed (channels, T) array (pass ``series.ravel()`` or ``series.T``).
    """
    rows = _as_rows(series, orientation=True)  # refused before it is misread; converted once
    return replay(rows, **params).change_points

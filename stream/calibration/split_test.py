"""Calibrated test of a split profile's maximum: autoregressive surrogates and a Monte-Carlo p-value.

The statistic is the largest score of a split profile (:mod:`ratiowatch.core.split_profile`) over
all candidate splits of a segment: a scan statistic, so the test accounts for the search over
splits by construction. Its null distribution is that of the same maximum on surrogate series
that share the segment's trend, short-range serial dependence and marginal distribution but hold
no change:

1. a least-squares line is removed (and added back to every surrogate): a trend is no change.
   With the segment's significant level shifts (:func:`remove_level_shifts`): fitted across a
   large, clean shift, the line would take its slope and the AR model turn persistent, and the
   surrogates' ramps and wanders would score as high as the shift. Shifts that such a persistent
   fit masks (several of them, each explained by the persistence the others lend the model) are
   then tested jointly with the AR lags;
2. an AR(p) model is fitted to the residual (Burg's method, order by AIC up to ``max_order``;
   one order for all channels) and driven by resampled residual *rows* (contemporaneous
   cross-correlation kept), :mod:`ratiowatch.stream.calibration.surrogate`;
3. each simulated channel is mapped onto the residual's sorted values by rank (amplitude
   adjustment, as in the AAFT surrogates of Theiler et al. 1992), so counts stay counts and
   heavy tails stay heavy.

Why a short autoregression and not a Fourier (phase-randomised) surrogate: a level shift has the
low-frequency spectrum of a random walk; surrogates that keep the whole periodogram (or an AR of
high order) reproduce that power as slow wandering and their maxima swallow the change
(synthetic mean shifts 0 -> 2 -> 0 in N(0, 1): found 0 of 20 with IAAFT surrogates, 20 of 20 with
AR order <= 5). An AR of low order keeps serial dependence (AR(1) with phi = 0.9, random walks
through a root near one, jittered seasonal cycles through a complex pair) but cannot represent a
few sharp shifts.

The p-value is ``(1 + #{null >= observed}) / (1 + n)`` over ``n = 2 / level - 1`` surrogates,
with early acceptance (Besag and Clifford 1991): drawing stops as soon as more surrogates exceed
the observed maximum than a rejection allows, so a change-free segment costs a few surrogates.

Examples
--------
>>> from ratiowatch.core.split_profile import SplitProfile
>>> rng = np.random.default_rng(0)
>>> prof = SplitProfile(width=3)
>>> x = np.r_[rng.normal(0, 1, 200), rng.normal(3, 1, 200)]
>>> stat, split = prof.best(x)
>>> max_split_test(x, prof, stat, 0.05, np.random.default_rng(1)).reject
True
>>> y = rng.normal(0, 1, 400)
>>> max_split_test(y, prof, prof.best(y)[0], 0.05, np.random.default_rng(1)).reject
False
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np

from ratiowatch.core.params import check_int
from ratiowatch.stream.calibration.surrogate import ARModel, fit_ar_channels, simulate_ar
from ratiowatch.stream.series.width import winsorised

#: largest AR order of the surrogates (see the module docstring for why it is small)
MAX_ORDER = 5


def check_max_order(max_order) -> None:
    """Raise unless ``max_order`` (the surrogates' largest AR order) is an integer >= 0.

    >>> check_max_order(5)
    >>> check_max_order(-1)
    Traceback (most recent call last):
    ...
    ValueError: max_order must be an integer >= 0; got -1
    """
    check_int(max_order, "max_order", minimum=0)


#: most level shifts removed per channel before the surrogates' model is fitted (a bound on the work)
MAX_SHIFTS = 16
EULER_GAMMA = 0.5772156649015329


def gumbel_fit(maxima: np.ndarray) -> tuple[float, float]:
    """(location, scale) of a Gumbel law fitted by moments to ``maxima`` (at least 2 values):
    the extreme-value law of a maximum over many splits."""
    beta = float(np.std(maxima, ddof=1)) * math.sqrt(6.0) / math.pi
    return float(np.mean(maxima)) - EULER_GAMMA * beta, beta


#: relative margin above a degenerate null (maxima that do not vary) that a statistic must clear
DEGENERATE_MARGIN = 1e-6


def gumbel_threshold(maxima: np.ndarray, level: float) -> float:
    """Upper ``level`` quantile of a Gumbel law fitted by moments to the finite ``maxima``
    (infinite with fewer than two).

    Maxima that do not vary beyond rounding (the surrogates of a constant window are constant, and
    so are their maxima) carry no scale to fit: the threshold is then their largest value plus
    ``DEGENERATE_MARGIN x (1 + |value|)``, so that a statistic equal to them up to rounding is no
    alarm and any real departure (scores of order one) is.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> z = rng.gumbel(2.0, 0.5, 100_000)
    >>> round(gumbel_threshold(z, 0.01), 1), round(2.0 - 0.5 * math.log(-math.log(0.99)), 1)
    (4.3, 4.3)
    """
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), e.g. 0.05; got {level}")
    maxima = np.asarray(maxima, dtype=np.float64)
    maxima = maxima[np.isfinite(maxima)]
    if maxima.size < 2:
        return math.inf
    top = float(maxima.max())
    if float(np.ptp(maxima)) <= 1e-9 * max(1.0, abs(top)):
        return top + DEGENERATE_MARGIN * (1.0 + abs(top))
    mu, beta = gumbel_fit(maxima)
    return mu - beta * math.log(-math.log1p(-level))


def _rows(x) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    return x[:, None] if x.ndim == 1 else x


#: chance that a change-free Gaussian segment has a value clipped by :func:`clip_gross`
GROSS_LEVEL = 0.01


def clip_gross(x: np.ndarray, level: float = GROSS_LEVEL) -> np.ndarray:
    """Each column of ``x`` (T, m) winsorised (:func:`~ratiowatch.stream.series.width.winsorised`)
    at its median +- ``z`` robust standard deviations (1.4826 x MAD), ``z`` the normal quantile
    that T Gaussian values all stay within with probability ``1 - level``; a column whose MAD is 0
    (more than half its values one value) is left as it is.

    A segment without such values comes back unchanged, value for value.

    Examples
    --------
    >>> x = np.r_[np.random.default_rng(0).normal(size=300), 1e4][:, None]
    >>> c = clip_gross(x)
    >>> bool(np.array_equal(c[:300], x[:300])), round(float(c[300, 0]), 1)  # 1e4 clipped to about 4 sd
    (True, 4.2)
    """
    from scipy.special import ndtri

    x = _rows(x)
    z = -float(ndtri(float(level) / (2.0 * x.shape[0])))
    return np.stack([winsorised(x[:, j], z) for j in range(x.shape[1])], axis=1)


def _line(x: np.ndarray, robust: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(level, slope, residual) of each column of ``x`` (T, m) about its least-squares line over
    t in [-1, 1]; ``robust``: the line of :func:`clip_gross` of ``x`` (the residual is still ``x``
    less the line)."""
    tt = np.linspace(-1.0, 1.0, x.shape[0])
    fit = clip_gross(x) if robust else x
    mu = fit.mean(axis=0)
    slope = (tt @ (fit - mu)) / (tt @ tt)
    return mu, slope, x - (mu[None, :] + tt[:, None] * slope[None, :])


def _robust_sigma(e: np.ndarray, data: np.ndarray) -> float:
    """Scale of the errors ``e``: 1.4826 times their MAD, but at least a quarter of their standard
    deviation and the float resolution of ``data`` (``1e-9`` of its largest magnitude); see
    :func:`intervention_t` for why each floor."""
    return max(1.4826 * float(np.median(np.abs(e - np.median(e)))), 0.25 * float(e.std()),
               1e-9 * (1.0 + float(np.abs(data).max())))


def intervention_t(y: np.ndarray, models: list[ARModel]) -> tuple[np.ndarray, np.ndarray]:
    """``(shift, outlier)``, each of shape (T, m): at every row ``k`` of every channel of ``y``, the t
    statistic of a level shift starting at ``k`` and of an additive outlier at ``k``, in the
    channel's AR one-step prediction errors (the LS and AO statistics of Chen and Liu 1993).

    An effect's regressor (``1[t >= k]`` for a shift, ``1[t == k]`` for an outlier) is filtered by
    the model, ``u_t = s_t - sum_i phi_i s_{t-i}``, and regressed on the errors ``e_t``:
    ``t = |sum e u| / (sqrt(sum u^2) sigma)``, with ``sigma`` 1.4826 times the errors' median
    absolute deviation (robust: under a persistent model a shift is itself one large error), but at
    least a quarter of their standard deviation (where most errors are equal, as in intermittent
    or quantized data, the MAD is about 0 and every rare event would be an effect of unbounded
    evidence) and the data's float resolution (``1e-9`` of its largest magnitude). A noise-free
    step therefore has a t of about 4 sqrt(T) at its own row. 0 where undefined (``k <= p``).

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> y = np.r_[np.zeros(300), np.ones(200)] + 0.03 * rng.normal(size=500)
    >>> y[100] += 1.0  # one outlier
    >>> y = (y - y.mean())[:, None]
    >>> shift, outlier = intervention_t(y, fit_ar_channels(y))
    >>> int(np.argmax(shift[:, 0]))
    300
    >>> bool(shift[300, 0] > outlier[300, 0]), bool(outlier[100, 0] > shift[100, 0])
    (True, True)
    """
    t_len = y.shape[0]
    shift = np.zeros((t_len, y.shape[1]))
    outlier = np.zeros((t_len, y.shape[1]))
    for j, mod in enumerate(models):
        p = mod.order
        if t_len - p < 3:
            continue
        v = y[:, j] - mod.mean
        e = v[p:].copy()
        for i in range(p):
            e -= mod.phi[i] * v[p - 1 - i: t_len - 1 - i]
        e -= e.mean()
        # robust, but never below a quarter of the plain spread: more than half the errors within
        # 0.17 sd of their median (mostly zeros, a few levels) makes the MAD meaningless, while for
        # Gaussian to t(3) errors it is 0.66-1 sd and the floor does not bind
        sigma = _robust_sigma(e, v)
        ee = np.zeros(t_len)
        ee[p:] = e
        k = np.arange(p + 1, t_len)
        # a shift at k, filtered: g[i] at t = k + i (i < p), then g_inf = 1 - sum(phi)
        g = 1.0 - np.r_[0.0, np.cumsum(mod.phi)]
        g_inf = g[-1]
        tail = np.cumsum(ee[::-1])[::-1]  # sum of e_t for t >= k
        num = g_inf * tail[k]
        uu = g_inf * g_inf * (t_len - k)
        # an outlier at k, filtered: 1 at t = k, then -phi_i at t = k + i
        num_o = ee[k].copy()
        uu_o = np.ones(k.size)
        for i in range(p):
            ok = k + i < t_len
            num[ok] += ee[k[ok] + i] * (g[i] - g_inf)
            uu[ok] += g[i] * g[i] - g_inf * g_inf
            ok = k + i + 1 < t_len
            num_o[ok] -= mod.phi[i] * ee[k[ok] + i + 1]
            uu_o[ok] += mod.phi[i] * mod.phi[i]
        good = uu > 0
        shift[p + 1:, j][good] = np.abs(num[good]) / (np.sqrt(uu[good]) * sigma)
        outlier[p + 1:, j] = np.abs(num_o) / (np.sqrt(uu_o) * sigma)
    return shift, outlier


def shift_gate(t_len: int, channels: int, level: float) -> float:
    """Critical value of the shift statistic of :func:`intervention_t` in a segment of ``t_len``
    samples: the two-sided normal quantile at ``level`` shared by every split and channel
    (Bonferroni), so that a change-free Gaussian segment shows a significant shift anywhere with
    probability at most ``level``."""
    from scipy.special import ndtri

    return float(-ndtri(level / (2.0 * max(1, t_len) * max(1, channels))))


def remove_level_shifts(x: np.ndarray, max_order: int, level: float, max_shifts: int = MAX_SHIFTS,
                        unmask: bool = True, smooth_steps: bool = False
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[list[int]]]:
    """(level, slope, residual, shifts) of ``x`` (T, m), or (T,) as one channel: each channel's line
    fitted jointly with its significant level shifts, found one at a time as in Chen and Liu (1993).

    Fit the AR model; take the largest shift statistic of :func:`intervention_t` among the rows
    where it exceeds the outlier statistic; while it passes :func:`shift_gate` at ``level``, add
    that step to the regression (a constant, a line over t in [-1, 1] and the steps) and refit. At
    most ``max_shifts`` per channel (a bound on the work). The residual (T, m) is ``x`` less the
    line and the steps; a channel without a significant shift keeps its plain least-squares line.

    ``unmask`` (default): when that search stops, the shifts a white-noise segmentation proposes
    are tested jointly under an AR model fitted without them (:func:`_unmasked_shifts`), and those
    that stay significant join the regression. Why: an AR model fitted across several shifts is
    persistent enough to explain each of them (masking; Chen and Liu's own caveat): shifts of
    3 sd at 300, 600 and 900 in unit noise had statistics of at most 3.0 against a gate of 4.1.

    ``smooth_steps`` (off by default; docs/experiments.md, configurations X and X3): for level steps in a
    smooth, persistent series, where an AR model fitted across a step takes it for a spike about as
    often as for a shift, and where a line fitted beside the steps rests only on the slopes within
    the segments:

    1. the unmasking step also takes a single new shift, beside shifts already found or alone: a
       line and an AR model fitted across one step mask it too (3 sd in the middle of 300
       samples of unit noise: shift t 3.5 against a gate of 3.9; the line took a slope of 2);
    2. it takes a set only if the same search on change-free AR surrogates of the residual
       (:func:`n_surrogates` at ``level``) finds no set whose smallest |t| is as large, a rank test
       at ``level``. Without the check, the unmasking step put shifts into 8-15 of 40 change-free
       AR(1) series at phi = 0.9 of 50-200 samples (with it: 2-3);
    3. beside shifts, the slope is kept only where its t against the residual's AR long-run
       variance (:func:`slope_standard_error`) passes the gate; otherwise it is 0. A chance slope
       made the surrogates ramp above a step's own score;
    4. the same test runs during the search: once a step has joined a channel's regression and the
       line is no longer significant beside the steps (:func:`_line_significant`), the rest of
       that channel's search runs without the line. In a staircase (a level stepping up or down by
       2 sd every 150 samples) a line fitted beside the first steps takes the staircase's net
       drift, and the residual about it ramps inside each flat segment, which both masks the other
       steps and proposes false ones. The line goes only once steps explain the drift, so a trend
       without steps keeps it (searched about a constant from the start, steps stood in for the
       ramps of trends and the wander of random walks: 11-14 % of such change-free series of
       50-600 samples got a change point).

    On the change suite (20 series per kind) it finds 34 of 40 steps of 4.4 marginal sd in AR(1)
    noise at phi = 0.9 (20 without) and 169 of 180 steps of a staircase (131 without), with the
    synthetic null suite as before, but gives more change points on series that switch between
    levels as their ordinary behaviour.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> x = np.r_[np.zeros(300), np.ones(300), np.zeros(300)] + 0.05 * rng.normal(size=900)
    >>> *_, shifts = remove_level_shifts(x[:, None], 5, 0.05)
    >>> sorted(shifts[0])
    [300, 600]
    >>> remove_level_shifts(rng.normal(size=(900, 1)).cumsum(axis=0), 5, 0.05)[3]  # a random walk
    [[]]
    """
    x = _rows(x)
    t_len, m = x.shape
    tt = np.linspace(-1.0, 1.0, t_len)
    mu, slope, y = _line(x)
    shifts: list[list[int]] = [[] for _ in range(m)]
    gate = shift_gate(t_len, m, level)
    # differences below the data's float resolution are not signal (the profile is scale-free)
    tol = 1e-9 * (1.0 + np.abs(x).max(axis=0))
    order = int(max(0, min(max_order, t_len // 4)))
    live = np.ones(m, dtype=bool)
    lined = np.ones(m, dtype=bool)  # whether the channel's regression still has the line
    for _ in range(max_shifts):
        shift_t, outlier_t = intervention_t(y, fit_ar_channels(y, max_order=order))
        # only where a shift explains the errors better than one outlier does (a spike, an event
        # among zeros, or the last sample, whose two regressors are one, is an outlier); the margin
        # is float rounding
        tstat = np.where(shift_t > outlier_t * (1.0 + 1e-9), shift_t, 0.0)
        best = tstat.argmax(axis=0)
        grew = False
        for j in np.flatnonzero(live):
            k, passes = int(best[j]), bool(tstat[best[j], j] > gate)
            new = [k] if passes and k not in shifts[j] else []
            if not new and unmask:
                new = _unmasked_shifts(x[:, j], y[:, j], tt, shifts[j], order, gate, max_shifts - len(shifts[j]),
                                       level if smooth_steps else None, bool(lined[j]))
            if not new:
                if passes:  # already in the regression: nothing more to remove
                    live[j] = False
                continue
            grew = True
            shifts[j].extend(new)
            if smooth_steps and lined[j] and not _line_significant(x[:, j], shifts[j], order, gate):
                lined[j] = False  # part 4: the steps explain the drift; the search goes on without the line
            design = _step_design(tt, shifts[j], bool(lined[j]))
            coef = np.linalg.lstsq(design, x[:, j], rcond=None)[0]
            mu[j], slope[j] = coef[0], (coef[1] if lined[j] else 0.0)
            r = x[:, j] - design @ coef
            r[np.abs(r) < tol[j]] = 0.0
            y[:, j] = r
            live[j] = len(shifts[j]) < max_shifts and bool(np.any(r))
        if not grew:
            break
    flat = np.abs(slope) < tol  # a line of float noise would read as a ramp
    slope[flat] = 0.0
    if smooth_steps:  # a slope beside steps only where it is significant (docstring, part 3)
        for j in range(m):
            if shifts[j]:
                se = slope_standard_error(y[:, j], shifts[j], order)
                if not (se > 0.0 and abs(slope[j]) > gate * se):
                    slope[j] = 0.0
    return mu, slope, y, shifts


def slope_standard_error(resid: np.ndarray, steps: list[int], order: int) -> float:
    """Standard error of the slope (over t in [-1, 1]) of a line fitted jointly with unit steps at
    the rows ``steps``, under AR errors: ``sqrt(lrv [(D'D)^-1]_11)`` with ``D`` the design of
    :func:`_step_design` and ``lrv = s2 / (1 - sum(phi))^2`` the long-run variance of the AR(<=
    ``order``) model fitted to the residual ``resid`` (T,), ``s2`` its innovation variance.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> se = slope_standard_error(rng.normal(size=1200), [400, 800], 5)
    >>> 0.13 < se < 0.17  # the steps leave the slopes within the thirds: sqrt(27 / 1200) = 0.15
    True
    """
    resid = np.asarray(resid, dtype=np.float64)
    design = _step_design(np.linspace(-1.0, 1.0, resid.size), steps)
    inv = np.linalg.pinv(design.T @ design)
    model = fit_ar_channels(resid[:, None], max_order=order)[0]
    s2 = float(np.mean(model.resid ** 2)) if model.resid.size else float(resid.var())
    lrv = s2 / max(1.0 - float(model.phi.sum()), 1e-6) ** 2
    return math.sqrt(max(lrv * float(inv[1, 1]), 0.0))


def _step_design(tt: np.ndarray, steps: list[int], line: bool = True) -> np.ndarray:
    """Regressors of a constant, the line ``tt`` (unless not ``line``) and a unit step at each row of
    ``steps``."""
    cols = (np.arange(tt.size)[:, None] >= np.asarray(steps, dtype=np.int64)[None, :]).astype(np.float64)
    return np.column_stack([np.ones(tt.size), tt, cols] if line else [np.ones(tt.size), cols])


def _line_significant(x: np.ndarray, steps: list[int], order: int, gate: float) -> bool:
    """Whether the slope of a line fitted to ``x`` (T,) jointly with unit steps at ``steps`` passes
    ``gate`` against :func:`slope_standard_error` of that fit's residual."""
    design = _step_design(np.linspace(-1.0, 1.0, x.size), steps)
    coef = np.linalg.lstsq(design, x, rcond=None)[0]
    se = slope_standard_error(x - design @ coef, steps, order)
    return se > 0.0 and abs(float(coef[1])) > gate * se


def _unmasked_shifts(x: np.ndarray, y: np.ndarray, tt: np.ndarray, steps: list[int], order: int, gate: float,
                     room: int, check_level: float | None = None, line: bool = True) -> list[int]:
    """Level shifts that an AR model fitted across them masks (see :func:`remove_level_shifts`).

    ``x`` (T,) is the channel, ``y`` (T,) its residual about the line (over ``tt``) and ``steps``; at most
    ``room`` new rows. Candidates come from a binary segmentation of ``y`` under white noise (the
    standardised mean difference of each interval against :func:`shift_gate`, sigma from the
    first differences, which a few shifts do not inflate). They are then pruned backwards in the
    dynamic regression of ``x_t`` on a constant, the line, the steps (``steps`` and the
    candidates) and ``x_{t-1} .. x_{t-order}`` (the innovational form of a level shift, as in
    Perron 1989): while the smallest t statistic of a candidate's step fails ``gate``, that
    candidate is dropped and the regression refitted. The gate is the Student t quantile of the
    same tail at the regression's residual degrees of freedom (a 15-sample segment leaves about 6;
    with the normal quantile short change-free series gained false change points). The lags and
    the steps are estimated jointly, so a shift no longer hides behind the persistence it lends the
    AR model; and in a random walk the lags keep their unit root, under which a step of the
    constant is a change of drift, which a wander is not. Only a set of two or more is returned:
    one shift alone is not masked, and the search of :func:`remove_level_shifts` has already tested
    it under the right model (single survivors were the false shifts of short cycles and walks).

    ``check_level`` (``remove_level_shifts(smooth_steps=True)``): a single survivor is also taken
    beside ``steps`` already found, and the set only if it passes the Monte-Carlo check at that
    level (see :func:`remove_level_shifts`).
    """
    single = check_level is not None
    cands, stat = _pruned_candidates(x, y, tt, steps, order, gate, room, single, line)
    if not cands or check_level is None:
        return cands
    # the same search on change-free AR surrogates of the residual, about the line and the steps
    # already found; the set's smallest |t| must beat theirs (a rank test at check_level)
    design = _step_design(tt, steps, line)
    base = design @ np.linalg.lstsq(design, x, rcond=None)[0]
    models = fit_ar_channels(y[:, None], max_order=order)
    count = n_surrogates(check_level)
    rng = np.random.default_rng([y.size, len(steps), room])  # deterministic: the data's own draws
    null = (_pruned_candidates(base + z, z, tt, steps, order, gate, room, single, line)[1]
            for z in (simulate_ar(models, y.size, 1, rng)[0, :, 0] for _ in range(count)))
    return cands if monte_carlo_test(null, stat, check_level, count).reject else []


def _pruned_candidates(x: np.ndarray, y: np.ndarray, tt: np.ndarray, steps: list[int], order: int, gate: float,
                       room: int, single: bool = False, line: bool = True) -> tuple[list[int], float]:
    """(candidates, their smallest |t|) that survive the pruning of :func:`_unmasked_shifts`, or
    ([], 0.0): a set of one is taken only with ``single``."""
    from scipy.special import ndtr, stdtrit

    cands = _white_noise_segmentation(y, gate, max(order + 2, 3), room, exclude=steps)
    tail = float(ndtr(-gate))  # the gate's own tail probability, for a Student t of the same tail
    while cands:
        design = _step_design(tt, [*steps, *cands], line)
        df = y.size - order - design.shape[1] - order
        if df < 1:  # more regressors than a short segment can carry: drop the latest candidate
            cands.pop()
            continue
        tstat = _dynamic_t(x, design, order)[-len(cands):]
        worst = int(np.argmin(tstat))
        if tstat[worst] > -float(stdtrit(df, tail)):
            enough = len(cands) > 1 or single
            return (cands, float(tstat[worst])) if enough else ([], 0.0)
        cands.pop(worst)
    return [], 0.0


def _dynamic_t(x: np.ndarray, design: np.ndarray, order: int) -> np.ndarray:
    """|t| of each column of ``design`` (T, d) in the least-squares regression of ``x_t`` on
    ``design_t`` and ``x_{t-1} .. x_{t-order}`` (rows ``t >= order``), with the robust sigma of
    :func:`intervention_t` (1.4826 MAD of the errors, at least a quarter of their sd)."""
    t_len = x.size
    lags = [x[order - 1 - i: t_len - 1 - i] for i in range(order)]
    z = np.column_stack([design[order:], *lags]) if lags else design
    target = x[order:]
    # normal equations: a (d x d) pseudo-inverse instead of an SVD of the (T x d) matrix, 50x
    # faster at T = 10,000; near-collinear steps (neighbouring rows) get a zero, not a blow-up
    inv = np.linalg.pinv(z.T @ z)
    coef = inv @ (z.T @ target)
    e = target - z @ coef
    sigma = _robust_sigma(e, x)
    se = np.sqrt(np.maximum(np.diag(inv), 0.0))[: design.shape[1]] * sigma
    return np.where(se > 0, np.abs(coef[: design.shape[1]]) / np.where(se > 0, se, 1.0), 0.0)


def _white_noise_segmentation(y: np.ndarray, gate: float, min_len: int, room: int, exclude: list[int]) -> list[int]:
    """Rows of binary segmentation of ``y`` by the standardised mean difference under white noise
    (sigma = 1.4826 MAD of the first differences / sqrt 2), while it passes ``gate``; at most
    ``room``, none within ``min_len`` of a segment end or in ``exclude``."""
    d = np.diff(y)
    sigma = 1.4826 * float(np.median(np.abs(d - np.median(d)))) / math.sqrt(2.0)
    if not sigma > 0:
        return []
    found: list[int] = []
    stack = [(0, y.size)]
    while stack and len(found) < room:
        a, b = stack.pop()
        n = b - a
        if n < 2 * min_len:
            continue
        k = np.arange(min_len, n - min_len + 1)
        s = np.cumsum(y[a:b] - y[a:b].mean())[k - 1]
        stat = np.abs(s) * np.sqrt(n / (k * (n - k))) / sigma
        stat[np.isin(a + k, exclude)] = 0.0
        j = int(np.argmax(stat))
        if stat[j] > gate:
            found.append(a + int(k[j]))
            stack.extend([(a, a + int(k[j])), (a + int(k[j]), b)])
    return sorted(found)


def null_fit(x: np.ndarray, max_order: int = MAX_ORDER, shift_level: float | None = None,
             smooth_steps: bool = False, robust_line: bool = False
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[list[int]]]:
    """(level, slope, residual, shifts) of ``x`` (T, m) that :func:`ar_surrogates` simulates from:
    each channel's least-squares line (``robust_line``: of :func:`clip_gross` of the channel), or
    with ``shift_level`` its line fitted jointly with its significant level shifts
    (:func:`remove_level_shifts`, with ``smooth_steps``).

    Why ``robust_line``: one gross value (1e4 times the noise, a sensor's error code) tilts the
    least-squares line of a few thousand samples by more than the noise, every surrogate is then a
    ramp, and the null's threshold rises twentyfold."""
    x = _rows(x)
    if shift_level is not None:
        return remove_level_shifts(x, max_order, float(shift_level), smooth_steps=smooth_steps)
    return (*_line(x, robust_line), [[] for _ in range(x.shape[1])])


def ar_surrogates(x, rng: np.random.Generator, count: int, max_order: int = MAX_ORDER,
                  remap: bool = True, length: int | None = None,
                  shift_level: float | None = None, fit: tuple | None = None) -> Iterator[np.ndarray]:
    """``count`` change-free surrogates of ``x`` (T, m), each of shape (T, m) (module docstring).

    ``length`` (default T): surrogates of another length, for a null that must serve a window
    longer than the data it is fitted to. The line goes on with the same slope per sample, and the
    rank mapping reads the residual's sorted values at the same quantiles (linear interpolation).

    ``shift_level`` (None: off): the line, the AR model and the values to map onto are fitted with
    the segment's significant level shifts removed (:func:`remove_level_shifts` at that level).
    Why: fitted across a large, clean shift, the line takes the shift's slope and the AR model
    turns persistent, so every surrogate makes a ramp or a wander that the bounded profile scores
    as high as the shift itself. The cleaner the shift, the surer it was missed: a step of 10 noise
    sd at 0.6 T went undetected at every T from 300 to 5,000 (the non-monotonic power of
    Vogelsang 1999). Change-free series keep their null: the gate is passed anywhere in a Gaussian
    segment with probability at most ``shift_level``, and a random walk's shifts are its single
    errors. ``fit``: the :func:`null_fit` of ``x``, if already made (``shift_level`` is then unused).

    With several channels, and surrogates no longer than ``x``, the innovations' rows are drawn
    in passes without replacement (:func:`~ratiowatch.stream.calibration.surrogate.simulate_ar`,
    ``replace=False``): a repeated row is a near-duplicate point in every channel, and short
    surrogates full of them had lower profiles than the data (five i.i.d. channels at T = 15: the
    test rejected 12 % at 5 %, now 2 %). One channel keeps the bootstrap with replacement, and so
    does a surrogate longer than ``x``: it must repeat rows, and in passes it repeats each one
    equally often, a narrower null than the data's own sampling (the streaming split profile,
    whose surrogates are up to 1.5 times longer, then raised false alarms after a level shift
    among five jittered cycles).

    Examples
    --------
    >>> c = np.random.default_rng(0).poisson(3.0, size=150).astype(float)
    >>> x = np.r_[c, c[::-1]][:, None]  # no trend: the surrogate is a rearrangement of x
    >>> s = next(ar_surrogates(x, np.random.default_rng(1), 1))
    >>> bool(np.allclose(np.sort(s, axis=0), np.sort(x, axis=0)))
    True
    """
    x = _rows(x)
    t_len = x.shape[0]
    if t_len < 3:
        raise ValueError(f"surrogates need at least 3 samples; got {t_len}")
    tt = np.linspace(-1.0, 1.0, t_len)
    mu, slope, y, _ = null_fit(x, max_order, shift_level) if fit is None else fit
    trend = mu[None, :] + tt[:, None] * slope[None, :]
    models = fit_ar_channels(y, max_order=int(max(0, min(max_order, t_len // 4))))
    srt = np.sort(y, axis=0)
    out_len = t_len if length is None else int(length)
    if out_len != t_len:
        if out_len < 2:
            raise ValueError(f"length must be >= 2; got {length}")
        tt = -1.0 + 2.0 * np.arange(out_len) / (t_len - 1)
        trend = mu[None, :] + tt[:, None] * slope[None, :]
        at = np.arange(out_len) * (t_len - 1) / (out_len - 1)
        srt = np.stack([np.interp(at, np.arange(t_len), srt[:, j]) for j in range(srt.shape[1])], axis=1)
    one_channel = x.shape[1] == 1
    for _ in range(count):
        z = simulate_ar(models, out_len, 1, rng, replace=one_channel or out_len > t_len)[0]
        if remap:
            ranks = np.argsort(np.argsort(z, axis=0, kind="stable"), axis=0, kind="stable")
            z = np.take_along_axis(srt, ranks, axis=0)
        yield z + trend


@dataclass(frozen=True)
class SplitTest:
    """Outcome of :func:`max_split_test`: decision, Monte-Carlo p-value and the null maxima drawn."""

    reject: bool
    p_value: float
    null: np.ndarray
    observed: float = math.nan
    shifts: tuple[int, ...] = ()  # rows of the significant level shifts the null was fitted without

    @property
    def tail_p_value(self) -> float:
        """p-value from a Gumbel law fitted to the null maxima by moments (extreme-value tail of a
        maximum over splits); reaches below ``1 / (n + 1)``. NaN with fewer than 10 null draws."""
        if self.null.size < 10:
            return math.nan
        mu, beta = gumbel_fit(self.null)
        if not beta > 0:
            return 0.0 if self.observed > self.null[0] else 1.0
        return float(-math.expm1(-math.exp(-(self.observed - mu) / beta)))

    @property
    def critical(self) -> float:
        """Upper quantile of the null maxima drawn (the threshold to plot; NaN if none drawn)."""
        return float(np.max(self.null)) if self.null.size else math.nan


def n_surrogates(level: float) -> int:
    """Surrogates for a test at ``level``: 2 / level - 1 (39 at 0.05). The test rejects when at
    most one of them reaches the observed value (p = 2 / 40 = 0.05 with one; 3 / 40 with two)."""
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), e.g. 0.05; got {level}")
    return max(1, int(round(2.0 / level)) - 1)


def _test_count(observed: float, level: float, count: int | None) -> int:
    """The surrogates of a rank test (``count``, or :func:`n_surrogates` (level) if None), once its
    arguments are checked: a NaN statistic would never be reached by a null maximum (every
    comparison with NaN is False), so it would be reported as a change; a count below 1 gives a
    p-value below 0 or above 1, and a level outside (0, 1) a test that always or never rejects.
    An infinite statistic is a limit the test still orders: +inf is reached by no null maximum,
    -inf (no split to score) by every one."""
    if math.isnan(observed):
        raise ValueError("the observed statistic is NaN; a profile maximum of finite values is a number")
    if count is None:
        return n_surrogates(level)
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), e.g. 0.05; got {level}")
    if int(count) < 1:
        raise ValueError(f"count (the surrogates at most) must be at least 1; got {count}")
    return int(count)


def max_split_test(x, profile, observed: float, level: float, rng: np.random.Generator,
                   count: int | None = None, max_order: int = MAX_ORDER,
                   level_shifts: bool = True, smooth_steps: bool = False) -> SplitTest:
    """Monte-Carlo test of ``observed`` (the profile maximum of ``x``) against surrogate maxima.

    Parameters
    ----------
    x : array, shape (T,) or (T, m)
        The segment (finite values).
    profile : SplitProfile
        Scores each surrogate with :meth:`~ratiowatch.core.split_profile.SplitProfile.maximum`.
    observed : float
        The segment's own maximum on the same grid.
    level : float
        Test level: the chance that a change-free segment is rejected.
    rng : numpy Generator
        Drives the surrogates.
    count : int, optional
        Surrogates at most; default :func:`n_surrogates` (level).
    max_order : int
        Largest AR order of the surrogates.
    level_shifts : bool
        Fit the surrogates' model with the segment's significant level shifts removed
        (``shift_level=level`` of :func:`ar_surrogates`); False: the plain line and AR fit.
    smooth_steps : bool
        With ``level_shifts``, the search for level steps in smooth series
        (:func:`remove_level_shifts`; off by default).
    """
    count = _test_count(observed, level, count)
    fit = null_fit(x, max_order, level if level_shifts else None, smooth_steps)
    shifts = tuple(sorted({k for ks in fit[3] for k in ks}))
    maxima = (profile.maximum(z) for z in ar_surrogates(x, rng, count, max_order, fit=fit))
    return monte_carlo_test(maxima, observed, level, count, shifts)


def monte_carlo_test(maxima: Iterable[float], observed: float, level: float, count: int,
                     shifts: tuple[int, ...] = ()) -> SplitTest:
    """The rank test of ``observed`` against ``count`` null ``maxima``, drawn lazily: drawing stops
    as soon as more of them reach ``observed`` than a rejection at ``level`` allows (Besag and
    Clifford 1991), and the p-value is then that of the draws made. A NaN ``observed``, a ``count``
    below 1 or a ``level`` outside (0, 1) raises ValueError.

    Examples
    --------
    >>> monte_carlo_test(iter([1.0, 2.0, 3.0]), 5.0, 0.5, 3).p_value
    0.25
    >>> t = monte_carlo_test(iter([9.0, 9.0, 1.0]), 5.0, 0.5, 3)
    >>> t.reject, t.null.size
    (False, 2)
    """
    count = _test_count(observed, level, count)
    allowed = int(math.floor(level * (count + 1))) - 1  # exceedances that still reject
    exceed = 0
    null = []
    for v in maxima:
        null.append(v)
        if v >= observed:
            exceed += 1
            if exceed > allowed:  # the p-value can no longer fall to the level
                return SplitTest(False, (1 + exceed) / (len(null) + 1), np.asarray(null), observed, shifts)
    return SplitTest(allowed >= 0, (1 + exceed) / (count + 1), np.asarray(null), observed, shifts)

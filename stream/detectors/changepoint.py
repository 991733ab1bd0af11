"""Streaming change-point detection by two-window density-ratio estimation (Liu et al. 2013).

Each new sample is preprocessed (missing values carried forward, first difference, robust scale),
embedded as the subsequence of its last ``k`` values, and pushed into an incremental two-window
state (``ratiowatch.core.window``): a *past* and a *current* window of ``n`` subsequences each. One push is one
O(n^2) update; the change score is ``PE_alpha(past || current)`` for RuLSIF / uLSIF, the L2 distance
in units of the kernel's volume for LSDD (unitless, so one null holds across re-chosen widths), KL
for KLIEP; when ``symmetric``, both directions count: their maximum under the AR null
(the streaming default), their sum under the permutation null (see ``null``).

Hyperparameters are chosen when the windows are built and every ``reselect_every`` steps (the
windows are then rebuilt from the history), never on every step. ``select="median"`` (default):
sigma = 0.5 x the median distance of the pooled windows, lambda = 0.1; ``select="loocv"`` uses the
estimator's own criterion (exact LOOCV of ``ratiowatch.core.rulsif.fit_rulsif`` on the current
windows), which located changes less well (docs/experiments.md).

Window sizes adapt to the length seen so far: the window holds ``n_eff`` subsequences with
``n_eff`` the largest rung of ``n_min * sqrt(2)^j`` (capped at ``n``) not above
``window_frac * samples seen``. A 20-point series is scored with 6-subsequence windows from its
14th point on; a long stream settles at ``n``. Set ``window_frac=0`` for a fixed ``n``.

Alarms: the threshold is the upper ``false_alarm_rate`` quantile of the score's null, re-estimated
every ``calibrate_every`` steps (the last 8 calibrations pooled), and at least a robust quantile of
the score's own history. The null is, by default, that of AR surrogates of the values behind the
windows (:mod:`ratiowatch.stream.calibration.surrogate`; the AR fit debiased, a predictive exponential tail, each
direction at half the rate), and with an
explicit ``perm_block`` that of block permutations of the pooled windows (:mod:`ratiowatch.stream.calibration.permutation`;
moment-matched gamma tail); the offline replay uses permutations only until the AR model can be
fitted (``null="ar_or_permutation"``). The calibration itself lives in
:mod:`ratiowatch.stream.calibration.null`; runs
above it become one :class:`~ratiowatch.stream.calibration.peaks.Alarm` each, raised at most ``delay`` steps after the
run's peak, with the change index at the window boundary of the peak (``t - n_eff + 1 -
(k - 1) // 2`` for a peak at step ``t``) and at least ``min_spacing`` between change indices.

Correlation view (``corr_view``, input with m >= 2 channels under the AR null): the kernel score
of the k x m embedding does not see a change of the channels' correlation alone (AR(2) pairs,
k = 3, n = 50: the PE-hat of a clean split 0 -> 0.95 has its median below the stationary null's
99.9 % quantile for every sigma in 0.12-1 x the median distance and lambda in 0.01-1), so each
step also compares the contemporaneous correlations of the two windows: the Fisher-z difference
``atanh r_past - atanh r_current`` of every channel pair's Gaussian rank correlation
(:func:`ratiowatch.stream.calibration.correlation.fisher_z_diff`), calibrated on AR surrogates.

Channel view (``channel_view``, the same inputs): the joint kernel also dilutes a change confined
to one channel (a 2-sd shift in one of 10 channels: 2 of 10 found), so each step also compares
each channel's windows by rank tests of location and spread
(:mod:`ratiowatch.stream.calibration.channels`), calibrated on the kernel score's own surrogates.

Level view (``level_view=True``, opt-in; windows of first differences under the AR null, any
number of channels): differencing a smooth stream turns a level step into one large difference
among 2n, which the kernel score hardly sees (AR(1) with phi = 0.9 and a step of 5 marginal sd: 0
of 6 found), so each step can also compare each channel's mean level in the two windows
(:mod:`ratiowatch.stream.calibration.levels`).

The views that are on share half the false-alarm rate (equal parts; the kernel score keeps the
other half), and alarms then carry the largest of the views' scores in units of their thresholds.

Dict samples: the first sample's keys are the channels. A key that appears later is ignored and a
key that is absent is a missing value, each said once by a :class:`KeysChangedWarning` (a change
carried by a new key must not go unseen in silence; make the warning an error to refuse such input).

Missing values and gaps: see :mod:`ratiowatch.stream.series.preprocess` (held until every channel was seen once;
then a sample with every value missing, or with some missing for at most the windows' span 2n + k samples in a
row, counts as a time step and nothing else; beyond that span missing values are carried forward). A sample holding an infinity or a value beyond :data:`MAX_MAGNITUDE` (1e150; an error code such
as 1.8e308) is refused with a ``ValueError`` and changes nothing, as the daemon dead-letters such a record.

Examples
--------
>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> x = np.r_[rng.normal(0, 1, 300), rng.normal(5, 1, 300)]
>>> det = ChangePointDetector(n=25)
>>> alarms = [a for a in (det.step(v) for v in x) if a is not None]
>>> any(abs(a.change_index - 300) <= 50 for a in alarms)
True
"""

from __future__ import annotations

import copy
import json
import math
import numbers
import warnings
from collections.abc import Mapping

import numpy as np
from river import base

from ratiowatch.core.kliep_window import TwoWindowKLIEP
from ratiowatch.core.params import check_seed
from ratiowatch.core.lsdd_window import TwoWindowLSDD
from ratiowatch.core.window import TwoWindowRuLSIF
from ratiowatch.stream.calibration.peaks import Alarm, PeakPicker
from ratiowatch.stream.calibration.thresholds import exceeds, median_mad
from ratiowatch.stream.calibration.correlation import normal_scores
from ratiowatch.stream.calibration.levels import level_ratio
from ratiowatch.stream.calibration.null import AR_MIN_VALUES, NULL_POOL, NullCalibrator
from ratiowatch.stream.calibration.ranked import push_row, sorted_windows, views_sorted
from ratiowatch.stream.series.embedding import History, embed
from ratiowatch.core.validation import damaged_state, state_array, state_flag, state_range
from ratiowatch.stream.detectors.state_file import checkpoint_params, open_checkpoint, state_version
from ratiowatch.stream.series.preprocess import Differencer, robust_scale

METHODS = ("rulsif", "ulsif", "kliep", "lsdd")
NULLS = ("auto", "ar", "permutation", "ar_or_permutation")
#: the kernel width as a multiple of the pooled windows' median distance, by method. Half of it for
#: the ratio estimators: at the full median the clipped PE-hat of two clearly different windows
#: can come out negative (the fitted ratio spills onto the denominator's samples) and hide the
#: largest changes. LSDD's L2 estimate is a sum of squares and cannot; it takes the median itself,
#: the usual width of kernel two-sample statistics. At half of it the streaming change suite found
#: 2 of 40 mean shifts of 2 sd, at the median 35 (docs/experiments.md, "the two-window detector's
#: estimators"). With the score in units of the kernel's volume the median finds 40, and of seeds
#: 0-4's ten shifts all ten against five at half of it.
SIGMA_FACTORS = {"rulsif": 0.5, "ulsif": 0.5, "kliep": 0.5, "lsdd": 1.0}
_STATE_VERSION = 1
_SCORE_HISTORY = 1000  # scores kept for the history guard
_NONE = np.empty(0)  # a view's thresholds while it is off or not calibrated
AUTO_DIFF_ACF = 0.8  # lag-1 autocorrelation above which difference="auto" differences
#: the largest magnitude a sample may hold: the windows' kernel sums squared differences of scaled
#: values, and the robust scale of a window with one value of 1e200 among ordinary ones stays
#: ordinary, so that value's squares overflow float64 (false alarms, then errors from the AR fit)
MAX_MAGNITUDE = 1e150
#: a column scale below which a later value of ordinary size could leave float64 once scaled
#: (see ChangePointDetector._scaled)
SMALL_SCALE = 1e-4


def check_magnitude(x) -> None:
    """Raise ``ValueError`` if the sample ``x`` (a number or array; NaN = missing) holds an
    infinite value or one beyond :data:`MAX_MAGNITUDE` in magnitude.

    >>> check_magnitude([1.0, float("nan")])
    >>> check_magnitude(1e200)
    Traceback (most recent call last):
    ...
    ValueError: sample [1e+200] holds a value beyond 1e+150 in magnitude (an error code rather than a reading); pass NaN/None for a missing value. The sample was not taken
    """
    try:
        v = np.asarray(x, dtype=np.float64).reshape(-1)
    except OverflowError:  # a Python int beyond float64
        raise ValueError(f"sample {x!r} holds a value beyond {MAX_MAGNITUDE:.0e} in magnitude (an error code rather "
                         "than a reading); pass NaN/None for a missing value. The sample was not taken") from None
    seen = np.abs(v[~np.isnan(v)])
    if seen.size and not seen.max() <= MAX_MAGNITUDE:
        what = ("an infinite value" if np.isinf(seen).any() else
                f"a value beyond {MAX_MAGNITUDE:.0e} in magnitude (an error code rather than a reading)")
        raise ValueError(f"sample {v.tolist()} holds {what}; pass NaN/None for a missing value. "
                         "The sample was not taken")


def _lag1_autocorr(x: np.ndarray) -> float:
    """Largest lag-1 autocorrelation over the channels (0 for constant channels)."""
    x = np.asarray(x, dtype=np.float64)
    if x.shape[0] < 3:
        return 0.0
    xc = x - x.mean(axis=0)
    peak = np.abs(xc).max(axis=0)
    xc = xc / np.where(peak > 0, peak, 1.0)  # scale-free, and no overflow for values near 1e300
    den = (xc * xc).sum(axis=0)
    num = (xc[1:] * xc[:-1]).sum(axis=0)
    r = np.where(den > 0, num / np.where(den > 0, den, 1.0), 0.0)
    return float(r.max())

# the incremental two-window state behind each method
_STATE_CLASSES = {"rulsif": TwoWindowRuLSIF, "ulsif": TwoWindowRuLSIF, "lsdd": TwoWindowLSDD, "kliep": TwoWindowKLIEP}


def _below_kernel_resolution(past: np.ndarray, cur: np.ndarray) -> bool:
    """Whether two windows differ, but by less than any Gaussian kernel width resolves in float64
    (:func:`~ratiowatch.core.lsdd.fit_lsdd` refuses to select a width for them)."""
    from ratiowatch.core.kernels import MIN_SCALE
    from ratiowatch.core.lsdd import pooled_spread

    return 0.0 < pooled_spread(past, cur) < MIN_SCALE


def _state_class(method: str):
    return _STATE_CLASSES[method]


def _rungs(n_min: int, n_max: int) -> list[int]:
    out, j = [], 0
    while True:
        r = min(n_max, int(round(n_min * math.sqrt(2.0) ** j)))
        if not out or r > out[-1]:
            out.append(r)
        if r >= n_max:
            return out
        j += 1


class KeysChangedWarning(UserWarning):
    """A dict sample's keys differ from the first sample's, which fixed the channels.

    A new key is ignored and a missing key is a missing value (carried forward); each key is
    warned about once per detector. To make it an error::

        warnings.simplefilter("error", KeysChangedWarning)
    """


#: the dict keys a checkpoint gives back as they were (JSON's strings and integers; tuples as lists)
CHANNEL_KEY_TYPES = "str, int (numpy integers included) or tuples of these"


def _channel_key(k):
    """A dict sample's key as the detector keeps it: numpy integers become ``int`` (equal, with
    the same hash, so later samples' keys match), tuples are checked element by element; any
    other type is refused, as a checkpoint could not give it back.

    >>> _channel_key(np.int64(3)), _channel_key(("a", 1))
    (3, ('a', 1))
    >>> _channel_key(1.5)
    Traceback (most recent call last):
    ...
    ValueError: the first sample has the key 1.5 of type float; channel names must be str, int (numpy integers included) or tuples of these (a checkpoint could not restore other keys): rename the channels, e.g. with str(key)
    """
    if isinstance(k, str):
        return str(k)
    if isinstance(k, (int, np.integer)) and not isinstance(k, (bool, np.bool_)):
        return int(k)
    if isinstance(k, tuple):
        return tuple(_channel_key(e) for e in k)
    raise ValueError(f"the first sample has the key {k!r} of type {type(k).__name__}; channel names must be "
                     f"{CHANNEL_KEY_TYPES} (a checkpoint could not restore other keys): rename the channels, "
                     "e.g. with str(key)")


def _encode_key(k):
    """A channel name as a checkpoint's JSON holds it (tuples as lists)."""
    return [_encode_key(e) for e in k] if isinstance(k, tuple) else k


def _decode_key(k):
    """A channel name read back from a checkpoint's JSON: lists (JSON's tuples) become tuples again."""
    return tuple(_decode_key(e) for e in k) if isinstance(k, list) else k


#: constructor parameters by type (lower bound of the integers); ranges are checked in __init__
_INT_PARAMS = {"k": 1, "n": 2, "reselect_every": 0, "n_perm": 3, "calibrate_every": 0, "n_min": 2, "delay": 0,
               "min_spacing": 0, "refresh_every": 1, "perm_block": 0, "seed": 0}
_REAL_PARAMS = ("alpha", "false_alarm_rate", "window_frac", "lam")
_BOOL_PARAMS = ("symmetric", "history_guard", "corr_view", "channel_view", "level_view", "robust_line")


def _check_param_types(params: Mapping) -> None:
    """Reject a constructor argument of the wrong type, naming it (no silent ``bool('no')``,
    ``int(1.5)`` or a conversion error without the parameter's name)."""
    for name, lo in _INT_PARAMS.items():
        v = params[name]
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Integral) or v < lo:
            raise ValueError(f"{name} must be an integer >= {lo}; got {v!r}")
    for name in _REAL_PARAMS:
        v = params[name]
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Real):
            raise ValueError(f"{name} must be a number; got {v!r}")
    v = params["sigma_factor"]
    if v is not None and (isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Real)):
        raise ValueError(f"sigma_factor must be a number or None (the method's default); got {v!r}")
    for name in _BOOL_PARAMS:
        if not isinstance(params[name], (bool, np.bool_)):
            raise ValueError(f"{name} must be True or False; got {params[name]!r}")
    if not (params["difference"] == "auto" if isinstance(params["difference"], str)
            else isinstance(params["difference"], (bool, np.bool_))):
        raise ValueError(f"difference must be 'auto', True or False; got {params['difference']!r}")


def _largest(*ratios: float) -> float:
    """The largest of the views' ratios, ignoring undefined (NaN) ones (NaN if all are)."""
    best = math.nan
    for r in ratios:
        if r == r and not best >= r:
            best = r
    return best


def _ratio(score: float, threshold: float) -> float:
    """``score`` in units of ``threshold`` (above 1 = above it); NaN while either is undefined."""
    if not (math.isfinite(score) and math.isfinite(threshold)):
        return math.nan
    if threshold > 0:
        return score / threshold
    return 1.0 + (score - threshold)  # a non-positive threshold (degenerate null): the excess over it


class ChangePointDetector(base.DriftDetector, base.AnomalyDetector):
    """Two-window density-ratio change-point detector (river drift detector and anomaly scorer).

    The change score compares a past and a current window of ``n`` subsequences of length ``k``
    (``PE_alpha`` for RuLSIF / uLSIF, the L2 distance in units of the kernel's volume for LSDD, KL
    for KLIEP); an alarm is raised when it exceeds the upper ``false_alarm_rate`` quantile of its
    calibrated null. Why each default is what it is, with the measurements behind it:
    ``docs/architecture.md``.

    Parameters
    ----------
    method : {"rulsif", "ulsif", "kliep", "lsdd"}
        Divergence estimator; RuLSIF (alpha-relative Pearson divergence) by default. On the
        synthetic suites (docs/results.md) each keeps the false-alarm specification at every
        length; RuLSIF, LSDD and KLIEP (about seventeen times slower) find the most changes, uLSIF
        fewer variance changes. LSDD's score is its L2 distance in units of the kernel's volume
        (``TwoWindowLSDD(unitless=True)``), so that one null holds across re-chosen widths.
    k : int
        Subsequence length.
    n : int
        Subsequences per window once enough data has been seen (the largest window).
    symmetric : bool
        Score both directions: their maximum under the AR null, their sum under the permutation null.
    alpha : float in [0, 1)
        RuLSIF mixture weight (uLSIF is alpha = 0; ignored by KLIEP and LSDD).
    reselect_every : int
        Steps between hyperparameter re-selections and window rebuilds; 0 means every ``n_eff``.
    false_alarm_rate : float
        Target probability that a step's score exceeds the threshold when nothing changed.
    n_perm : int
        Null draws (AR surrogates or permutations) per calibration.
    calibrate_every : int
        Steps between calibrations of the null; 0 means every ``n_eff``.
    difference : {"auto", True, False}
        Work on first differences; ``"auto"`` when the lag-1 autocorrelation of the levels
        before the windows exceeds 0.8 (decided whenever the windows grow).
    n_min, window_frac : int, float
        Adaptive window size: the largest rung of ``n_min * sqrt(2)^j`` not above ``window_frac``
        times the samples seen; ``window_frac=0`` fixes it at ``n``.
    delay, min_spacing : int
        Peak-picking delay and minimum spacing between change indices; 0 means ``n_eff``.
    select : {"loocv", "median"}
        ``"loocv"``: the estimator's own criterion; ``"median"``: ``sigma_factor`` x median distance.
    sigma_factor : float or None
        Kernel width as a multiple of the median distance, with ``select="median"``. None
        (default): 0.5 for RuLSIF, uLSIF and KLIEP, 1.0 (the median heuristic) for LSDD.
    lam : float
        Ridge strength, with ``select="median"`` (LSDD's in units of the kernel's volume).
    history_guard : bool
        Also keep the threshold at or above a robust upper quantile of the score's own history.
    perm_block : int
        Block length of the permutation null; 0 means k; setting it selects that null.
    refresh_every : int
        Pushes between full rebuilds of the window accumulators (bounds rounding drift).
    null : {"auto", "ar", "permutation", "ar_or_permutation"}
        Null of the score: AR surrogates of the values behind the windows (fitted around their
        least-squares line, whose shrunk slope is added back: a trend is no change), block
        permutations of the pooled windows, or permutations until an AR model can be fitted;
        ``"auto"``: AR unless ``perm_block`` is set. Under the AR null, values that are mostly
        one value (counts that are mostly 0) alarm only above the windows' own re-splits too,
        and small windows of them draw their null up to its top.
    corr_view : bool
        With two or more channels, also test the channels' correlations (Fisher z).
    channel_view : bool
        With two or more channels, also test each channel's location and spread on its own (ranks).
    level_view : bool
        Where the windows hold first differences (``difference``), also test each channel's mean
        level, current window against past: a level step is one difference among 2n, which the
        kernel score hardly sees. Off by default (configuration W, docs/experiments.md: it finds
        level steps in smooth streams, but cost one real benchmark's check half more than its
        rule allowed). The views that are on take half the rate (a quarter each when two are, a
        sixth when three), each shared over its statistics.
    robust_line : bool
        Fit the AR null's trend line with gross values clipped (beyond what the stretch's length
        of Gaussian values reaches with probability 1 %): one value of 1e4 times the noise tilted
        the plain line and raised the threshold up to 3.5-fold for 400-500 samples (AR(1) noise,
        phi = 0.5: a 2-sd step after such a value was found 13 of 20 times, 16 without the
        value, 16 with this line). The AR model and its residuals keep the data's values. Off by
        default (configuration Z2, docs/experiments.md: TCPD's check cover lost 0.021, one series,
        where its rule allowed 0.02); turn it on for streams that carry error codes.
    seed : int
        Seeds every random draw (a generator keyed by ``(seed, step)``), so replays are exact.
    """

    def __init__(self, method: str = "rulsif", k: int = 3, n: int = 50, symmetric: bool = True,
                 alpha: float = 0.1, reselect_every: int = 0, false_alarm_rate: float = 1e-4,
                 n_perm: int = 10, calibrate_every: int = 0, difference: bool | str = "auto",
                 n_min: int = 6, window_frac: float = 0.05, delay: int = 0, min_spacing: int = 0,
                 select: str = "median", sigma_factor: float | None = None, lam: float = 0.1,
                 history_guard: bool = True, perm_block: int = 0, refresh_every: int = 256,
                 null: str = "auto", corr_view: bool = True, channel_view: bool = True,
                 level_view: bool = False, robust_line: bool = False, seed: int = 0):
        super().__init__()
        _check_param_types(locals())
        if method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}; got {method!r}")
        for name, val, lo in (("k", k, 1), ("n", n, 2), ("reselect_every", reselect_every, 0),
                              ("n_perm", n_perm, 3), ("calibrate_every", calibrate_every, 0),
                              ("n_min", n_min, 2), ("delay", delay, 0), ("min_spacing", min_spacing, 0),
                              ("refresh_every", refresh_every, 1)):
            if int(val) != val or int(val) < lo:
                raise ValueError(f"{name} must be an integer >= {lo}; got {val!r}")
        if not (0.0 <= float(alpha) < 1.0):
            raise ValueError(f"alpha must be in [0, 1); got {alpha}")
        if not (0.0 < float(false_alarm_rate) < 1.0):
            raise ValueError(f"false_alarm_rate must be in (0, 1), e.g. 1e-4; got {false_alarm_rate}")
        if not (0.0 <= float(window_frac) <= 1.0):
            raise ValueError(f"window_frac must be in [0, 1] (0 = fixed window n); got {window_frac}")
        if select not in ("loocv", "median"):
            raise ValueError(f"select must be 'loocv' or 'median'; got {select!r}")
        if int(n_min) > int(n):
            raise ValueError(f"n_min ({n_min}) must not exceed n ({n})")
        self.method, self.k, self.n, self.symmetric = method, int(k), int(n), bool(symmetric)
        self.alpha = float(alpha)
        self.reselect_every, self.false_alarm_rate = int(reselect_every), float(false_alarm_rate)
        if difference not in ("auto", True, False):
            raise ValueError(f"difference must be 'auto', True or False; got {difference!r}")
        self.n_perm, self.calibrate_every, self.difference = int(n_perm), int(calibrate_every), difference
        self.n_min, self.window_frac = int(n_min), float(window_frac)
        self.delay, self.min_spacing, self.select = int(delay), int(min_spacing), select
        self.history_guard = bool(history_guard)
        if int(perm_block) != perm_block or int(perm_block) < 0:
            raise ValueError(f"perm_block must be an integer >= 0 (0 = k); got {perm_block!r}")
        self.perm_block = int(perm_block)
        if null not in NULLS:
            raise ValueError(f"null must be one of {NULLS} ('ar' = AR-surrogate null, 'auto' = 'ar' unless "
                             f"perm_block is set); got {null!r}")
        self.null = null
        # the null in force: an explicit permutation block asks for the permutation null
        self._null = null if null != "auto" else ("permutation" if self.perm_block > 0 else "ar")
        if not (np.isfinite(lam) and float(lam) > 0):
            raise ValueError(f"lam must be a positive ridge strength; got {lam}")
        self.lam = float(lam)
        if sigma_factor is None:
            sigma_factor = SIGMA_FACTORS[method]
        if not (np.isfinite(sigma_factor) and float(sigma_factor) > 0):
            raise ValueError(f"sigma_factor must be positive (sigma = factor x median distance); got {sigma_factor}")
        self.sigma_factor = float(sigma_factor)
        self.refresh_every, self.seed = int(refresh_every), check_seed(seed)
        if corr_view not in (True, False):
            raise ValueError(f"corr_view must be True or False; got {corr_view!r}")
        self.corr_view = bool(corr_view)
        self.channel_view = bool(channel_view)
        self.level_view = bool(level_view)
        self.robust_line = bool(robust_line)
        from scipy.special import ndtri

        self._z_quantile = float(-ndtri(self.false_alarm_rate))  # normal upper quantile (history guard)
        self._reset()

    # ------------------------------------------------------------------ state
    def _reset(self) -> None:
        super()._reset()
        self._keys: list | None = None  # dict inputs: channel names fixed at first sight
        self._keys_warned: set = set()  # keys already warned about (KeysChangedWarning)
        self._dim: int | None = None
        self._pre: Differencer | None = None
        self._diff_on = self.difference is True
        self._hist: History | None = None
        self._win = None
        # LSDD scores in units of the kernel's volume; a checkpoint from before that option keeps the
        # plain L2 for its windows to come, so its pooled null draws stay on the scale of its scores
        self._lsdd_unitless = True
        self._n_eff = 0
        self._scale: np.ndarray | None = None
        self._t = -1  # index of the last input sample
        # [first index, length] of the runs of samples with every value missing that the windows
        # may still reach (see _skip_step)
        self._gaps: list = []
        self._partial = 0  # samples in a row with some channels (not all) missing, see step
        self._since_reselect = 0
        self._since_calib = 0
        self._threshold = math.nan
        self._score = math.nan
        self._picker: PeakPicker | None = None
        self._last_alarm: Alarm | None = None
        # the null in force: "ar_or_permutation" starts with permutations (see _calibrate)
        self._null_mode = "permutation" if self._null == "ar_or_permutation" else self._null
        self._null_cal = self._new_calibrator()
        self._guard = math.nan
        self._guard_stale = True
        self._atom = False  # the values behind the windows are mostly one value (see _confirm_by_permutation)
        self._floor_checked = False  # the permutation floor was taken since the last calibration
        self._shist = np.full(_SCORE_HISTORY, np.nan)  # ring of past scores (history guard)
        self._shist_n = 0
        # correlation view (m >= 2 channels, AR null; its null lives in _null_cal): the latest
        # max |Fisher-z difference| / threshold over the channel pairs
        self._corr_on = False
        self._corr_ratio = math.nan
        self._corr_scores = np.empty(0)
        # channel view (m >= 2 channels, AR null): the latest max |rank statistic| / threshold
        self._channel_on = False
        self._channel_ratio = math.nan
        # both views' windows, sorted per channel: ((n, differenced, step), values, sequence numbers)
        self._ranked: tuple | None = None
        # level view (windows of first differences, AR null): the latest max |mean-level
        # difference| / threshold over the channels; on from the calibration that sees
        # the windows differenced
        self._level_on = False
        self._level_ratio = math.nan

    @property
    def _rung_list(self) -> list[int]:
        rungs = self.__dict__.get("_rungs_cache")
        if rungs is None:
            rungs = _rungs(self.n_min, self.n) if self.window_frac > 0 else [self.n]
            self._rungs_cache = rungs
        return rungs

    # ------------------------------------------------------------------ input
    def _as_vector(self, x, take: bool = True) -> np.ndarray:
        """``x`` as a vector of the channels' values (NaN = missing), or a ``ValueError``.

        The channels (a first dict's keys, a first sample's size) are fixed only by a sample that
        is taken: a refused first sample leaves the detector free to start with the next one.
        ``take=False``: only check ``x`` (nothing is fixed, no key warning is given).
        """
        if self._dim == 1 and type(x) in (float, np.float64) and -MAX_MAGNITUDE <= x <= MAX_MAGNITUDE:
            return np.array((x,))  # fast path of the common univariate case (NaN takes the slow one)
        keys = self._keys
        if isinstance(x, Mapping):
            if keys is None:
                if not x:
                    raise ValueError("the first sample is an empty dict; give at least one numeric field")
                keys = sorted((_channel_key(k) for k in x), key=str)
            # features that appear later are ignored; a field that disappears counts as missing
            vals = []
            for key in keys:
                v = x.get(key)
                vals.append(np.nan if v is None else v)
            x_vals = vals
        elif x is None:
            x_vals = [np.nan] * (self._dim or 1)
        else:
            x_vals = x
        try:
            a = np.asarray(x_vals, dtype=np.float64)
        except OverflowError:  # a Python int beyond float64: an error code rather than a reading
            raise ValueError(f"sample {x!r} holds a value beyond {MAX_MAGNITUDE:.0e} in magnitude (an error code "
                             "rather than a reading); pass NaN/None for a missing value. The sample was not "
                             "taken") from None
        except (TypeError, ValueError) as exc:
            raise ValueError(f"sample must be a number, a 1-d array or a dict of numbers; got {x!r} ({exc})") from None
        if sum(s > 1 for s in a.shape) > 1:  # a (1, m) row is one sample; a (2, 2) block is not
            raise ValueError(f"sample must be a number, a 1-d array or a dict of numbers; got an array of shape "
                             f"{a.shape} (feed a block of samples one row at a time)")
        v = a.reshape(-1)
        if self._dim is None and v.size == 0:
            raise ValueError("empty sample; give at least one value")
        if self._dim is not None and v.size != self._dim:
            raise ValueError(f"sample has {v.size} values but the detector was started with {self._dim}")
        if not np.abs(v).max() <= MAX_MAGNITUDE:  # NaN (missing), inf or too large: look closer
            check_magnitude(v)
        if not take:
            return v
        # taken: the first sample fixes the channels; later keys that differ are said once
        if self._keys is None and keys is not None:
            self._keys = keys
        elif isinstance(x, Mapping) and (len(x) != len(keys) or x.keys() != set(keys)):
            self._warn_keys(x)
        if self._dim is None:
            self._dim = v.size
        return v

    def _warn_keys(self, x: Mapping) -> None:
        """Say once per key that a dict sample's keys differ from the first sample's (the channels).

        The policy (see :class:`KeysChangedWarning`): a new key is ignored, a missing key is a
        missing value; both are said, so a change carried by a new key is not lost in silence.
        """
        warned = self._keys_warned
        known = set(self._keys)
        new = [k for k in x if k not in known and k not in warned]
        gone = [k for k in self._keys if k not in x and k not in warned]
        if new:
            warned.update(new)
            warnings.warn(f"ChangePointDetector: key(s) {new} not in the first sample are ignored (the "
                          f"channels are the first sample's keys {self._keys}); start a new detector "
                          "to watch them", KeysChangedWarning, stacklevel=4)
        if gone:
            warned.update(gone)
            warnings.warn(f"ChangePointDetector: key(s) {gone} missing from a sample are read as missing "
                          "values (last value carried forward)", KeysChangedWarning, stacklevel=4)

    # ------------------------------------------------------------------ main loop
    def step(self, x) -> Alarm | None:
        """Feed one sample (float, 1-d array or dict; NaN/None = missing). Returns the alarm raised now.

        All or nothing: a sample that is refused, or a step that builds, re-selects or
        calibrates and raises, leaves the detector as it was. A sample whose every value is
        missing (once the stream has started) counts as a time step and nothing else: the
        windows, their score and the threshold stay as they were (see
        :mod:`ratiowatch.stream.series.preprocess`). So does a sample of several channels with
        some values missing, for up to the windows' span (2n + k samples in a row): carried
        forward, one channel's gap of 100 samples raised an alarm where it began and one where it
        ended in 10 of 10 change-free streams of two N(0, 1) channels (20 of their 21 alarms).
        A channel missing for longer is carried forward from then on, so that the detector does
        not go blind to the other channels for good: the run of one value is then reported as a
        change where the gap began, and again where it ends.
        """
        if self._dim is None and not isinstance(x, Mapping) and np.isnan(self._as_vector(x, take=False)).all():
            # a missing first sample tells nothing of the channels (None reads as one value): it is
            # counted, and the first sample with a value fixes them
            self._t += 1
            self._drift_detected = False
            return None
        v = self._as_vector(x)
        if v[0] != v[0] and self._pre is not None and np.isnan(v).all():
            self._skip_step()
            return None
        partial = self._partial
        if self._dim > 1 and self._pre is not None and self._pre.complete:
            # some channels missing (not every one: that was a gap above)
            partial = partial + 1 if np.isnan(v).any() else 0
            if 0 < partial <= self._span:
                self._skip_step()
                self._partial = partial
                return None
        # the run's count moves only once the step has succeeded: a step that raises leaves it
        if self._pre is not None and self._may_rebuild():  # the costly steps, and the ones that can fail
            saved = copy.deepcopy(self.__dict__)
            try:
                out = self._advance(v)
            except BaseException:
                self.__dict__.clear()
                self.__dict__.update(saved)
                raise
        else:
            out = self._advance(v)
        self._partial = partial
        return out

    def _may_rebuild(self) -> bool:
        """Whether the next sample may build, re-select or calibrate: the steps that draw a null
        and fit windows afresh, whose computations can fail on valid input. ``step`` keeps a copy
        of the detector for them (a few percent of a calibration's cost). The per-step checks of
        a stream of mostly one value (a score confirmed by permutations, a null recalibrated from a
        constant one) are not covered: a copy at every step would cost three times the step."""
        if self._n_eff != self._rung_list[-1]:
            target = self._target_rung(self._hist.count + 1)
            if target is not None and target != self._n_eff:
                return True
        if self._win is None:
            return False
        return (self._since_reselect + 1 >= (self.reselect_every or self._n_eff)
                or self._since_calib + 1 >= self._calib_period())

    def _skip_step(self) -> None:
        """A sample with every value missing: time moves on, the windows do not (see :meth:`step`).

        Carried forward into the windows, a gap is a run of one repeated value, which the kernel
        score takes for a change where the gap starts and again where it ends. The gap is kept
        (while it lies within the windows' reach) so that change indices stay the input's."""
        self._t += 1
        self._drift_detected = False
        gaps = self._gaps
        if gaps and gaps[-1][0] + gaps[-1][1] == self._t:
            gaps[-1][1] += 1
        else:
            gaps.append([self._t, 1])
        reach = self._skip_gaps(self._t - self.n - self.k)  # no boundary goes further back
        while gaps and gaps[0][0] + gaps[0][1] - 1 < reach:
            gaps.pop(0)

    def _skip_gaps(self, b: int) -> int:
        """Input index of the held sample ``t - b`` samples before the newest (index ``t``): ``b``
        moved back by the gaps (samples with every value missing) between them."""
        for start, length in reversed(self._gaps):
            if start + length - 1 >= b:
                b -= length
        return b

    def _advance(self, v: np.ndarray) -> Alarm | None:
        """:meth:`step` for a sample ``v`` that was taken."""
        self._t += 1
        self._drift_detected = False
        if self._pre is None:
            self._pre = Differencer(self._dim, difference=False)  # fills missing values only
            # levels: the 2n + k the windows need (one extra for a difference) and, for the AR
            # null, AR_MIN_VALUES more to fit the surrogate model on
            self._hist = History(self._held, self._dim)
            self._corr_on = self.corr_view and self._null_mode == "ar" and self._dim > 1
            self._channel_on = self.channel_view and self._null_mode == "ar" and self._dim > 1
        d = self._pre.step(v)
        if d is None:
            return None
        self._hist.push(d)
        # once the largest window is in place only re-selection rebuilds it (no rung search per step)
        target = None if self._n_eff == self._rung_list[-1] else self._target_rung(self._hist.count)
        scores = None
        if target is not None and target != self._n_eff:
            self._build(target)
        elif self._win is not None:
            scores = self._win.push_scores(self._newest_row())  # one compiled call for both
            self._since_reselect += 1
            self._since_calib += 1
            if self._since_reselect >= (self.reselect_every or self._n_eff):
                self._reselect()
                scores = None  # new sigma / lambda: the windows' scores changed
            elif self._since_calib >= self._calib_period():
                self._calibrate()
        if self._win is None or not self._win.ready:
            self._score = math.nan
            return None
        s1, s2 = scores if scores is not None else self._win.scores()
        if not self.symmetric:
            self._score = s1
        elif self._null_mode == "ar":
            self._score = s1 if s1 >= s2 else s2  # max of the directions, see _calibrate
        else:
            self._score = s1 + s2
        if self._guard_stale:
            self._guard = self._history_guard()
            self._guard_stale = False
        null_thr = self._null_cal.threshold
        if self._null_cal.degenerate and exceeds(self._score, null_thr):
            null_thr = self._recalibrate_from_constant()
        elif self._atom and self._confirm_due(null_thr):
            null_thr = self._confirm_by_permutation()
        self._threshold = max(null_thr, self._guard) if math.isfinite(self._guard) else null_thr
        self._shist[self._shist_n % _SCORE_HISTORY] = self._score
        self._shist_n += 1
        if self._corr_on or self._channel_on or self._level_on:  # every view in units of its threshold
            if self._corr_on or self._channel_on:  # the level view alone needs no sorted windows
                self._corr_ratio, self._channel_ratio = self._views_step()
            self._level_ratio = self._level_step()
            ratio = _largest(_ratio(self._score, self._threshold), self._corr_ratio, self._channel_ratio,
                             self._level_ratio)
            alarm = self._picker.update(self._t, ratio, 1.0, self.boundary())
        else:
            alarm = self._picker.update(self._t, self._score, self._threshold, self.boundary())
        if alarm is not None:
            self._drift_detected = True
            self._last_alarm = alarm
        return alarm

    def flush(self) -> Alarm | None:
        """End of a finite series: close an open run above threshold (offline replay only)."""
        if self._picker is None:
            return None
        alarm = self._picker.flush(self._t)
        if alarm is not None:
            self._last_alarm = alarm
        return alarm

    def boundary(self) -> int:
        """Change index implied by the current windows (first index of the current window's span)."""
        b = self._t - self._n_eff + 1 - (self.k - 1) // 2
        return self._skip_gaps(b) if self._gaps else b

    def _views_step(self) -> tuple[float, float]:
        """(correlation, channel) views: each one's max |statistic| / threshold (NaN: off or not yet).

        Both read the newest sample of each of the 2n subsequences (the levels from k - 1 on,
        differenced when the windows are), held sorted per channel and moved by one value a step
        (:mod:`ratiowatch.stream.calibration.ranked`); they are rebuilt by a sort when the window
        size or the differencing changed, a step was skipped, or the detector was restored.
        """
        cal = self._null_cal
        cthr = cal.corr_thresholds if self._corr_on and cal.corr_thresholds is not None else _NONE
        hthr = cal.channel_thresholds if self._channel_on and cal.channel_thresholds is not None else _NONE
        if not (cthr.size or hthr.size):
            self._ranked = None
            return math.nan, math.nan
        n, d = self._n_eff, int(self._diff_on)
        if self._corr_scores.size != n:  # the Gaussian rank correlation's normal scores of a window of n
            self._corr_scores = normal_scores(n)
        if self._ranked is None or self._ranked[0] != (n, d, self._t - 1):
            lv = self._hist.last_view(2 * n + self.k - 1 + d)[self.k - 1:]
            vals = np.ascontiguousarray(lv[1:] - lv[:-1] if d else lv)
            sv, sa = sorted_windows(vals, self._t + 1)
        else:
            _, sv, sa = self._ranked
            lv = self._hist.last_view(1 + d)
            push_row(sv, sa, lv[1] - lv[0] if d else lv[0], self._t)
        self._ranked = ((n, d, self._t), sv, sa)
        corr, chan = views_sorted(sv, sa, self._t + 1, n, cthr, self._corr_scores, hthr)
        return float(corr), float(chan)

    def _level_step(self) -> float:
        """Level view: max |mean-level difference| / threshold over the channels (NaN:
        off or not yet calibrated); the windows' 2n newest levels, those whose differences they
        hold (:mod:`ratiowatch.stream.calibration.levels`)."""
        cal = self._null_cal
        if not self._level_on or cal.level_thresholds is None:
            return math.nan
        n = self._n_eff
        return float(level_ratio(self._hist.last_view(2 * n), n, self._scale, cal.level_thresholds))

    def _newest_row(self) -> np.ndarray:
        """The newest embedded subsequence (fast path of :meth:`_rows` for one row)."""
        if self._diff_on:
            vals = self._hist.last_view(self.k + 1)
            vals = vals[1:] - vals[:-1]
        else:
            vals = self._hist.last_view(self.k)  # a view: the division below makes the new array
        return self._scaled(vals).reshape(-1)

    def _rows(self, m: int) -> np.ndarray:
        """The newest ``m`` embedded (scaled) subsequences, oldest first, shape (m, k * dim)."""
        d = int(self._diff_on)
        vals = self._hist.last(m + self.k - 1 + d)
        if d:
            vals = np.diff(vals, axis=0)
        return embed(self._scaled(vals), self.k)

    def _scaled(self, vals: np.ndarray) -> np.ndarray:
        """``vals`` divided by the windows' scale. Where a scale is below :data:`SMALL_SCALE` (values
        of 1e-300 so far), a later value of ordinary size would be far beyond float64 once scaled
        (1e150 / 1e-300 overflows), and every later sample failed: such values are held at
        :data:`MAX_MAGNITUDE`, as gross a value as the detector takes unscaled."""
        if not self._scale_tiny:
            return vals / self._scale
        with np.errstate(over="ignore"):
            out = vals / self._scale
        return np.clip(out, -MAX_MAGNITUDE, MAX_MAGNITUDE, out=out)

    def _target_rung(self, seen: int) -> int | None:
        """Window size for ``seen`` preprocessed samples, or None while too few for the smallest one."""
        rungs = self._rung_list
        budget = max(self.n_min, self.window_frac * seen) if self.window_frac > 0 else self.n
        fits = [r for r in rungs if r <= budget and 2 * r + self.k <= seen]
        if not fits:
            return None
        return max(fits)

    def _calib_period(self) -> int:
        if self._null == "ar_or_permutation" and self._null_mode == "ar":
            return max(self.calibrate_every, self._n_eff, 1)  # surrogates are costly; n_eff as streaming
        return self.calibrate_every if self.calibrate_every > 0 else max(1, self._n_eff)

    def _new_calibrator(self) -> NullCalibrator:
        return NullCalibrator(self._null_mode, self.method, self.alpha, self.symmetric, self.n_perm,
                              self.false_alarm_rate, self.k, robust_line=self.robust_line)

    def _switch_to_ar(self) -> None:
        """``null="ar_or_permutation"``: the AR model can now be fitted; the AR null takes over.

        The score changes definition with the null (sum of the directions -> their maximum), so the
        score history restarts as it does for a new window size.
        """
        self._null_mode = "ar"
        self._null_cal = self._new_calibrator()
        self._shist_n = 0
        self._corr_on = self.corr_view and self._dim > 1
        self._corr_ratio = math.nan
        self._channel_on = self.channel_view and self._dim > 1
        self._channel_ratio = math.nan

    def _make_state(self, n: int, sigma: float, lam: float):
        cls = _state_class(self.method)
        dim = self.k * self._dim
        if self.method in ("rulsif", "ulsif"):
            alpha = self.alpha if self.method == "rulsif" else 0.0
            return cls(dim, n, sigma, lam, alpha=alpha, refresh_every=self.refresh_every)
        if self.method == "kliep":  # KLIEP has no ridge: its fit is a constrained likelihood ascent
            return cls(dim, n, sigma, refresh_every=self.refresh_every)
        # LSDD in units of the kernel's volume: the plain L2 scales as sigma^-d, and the null pools
        # draws over re-chosen widths and scores windows whose spread differs from its surrogates'
        return cls(dim, n, sigma, lam, refresh_every=self.refresh_every, unitless=self._lsdd_unitless)

    def _build(self, n: int) -> None:
        """(Re)build the windows of size ``n`` from the history: scale, embed, select, calibrate."""
        if self.difference == "auto" and n != self._n_eff:
            self._diff_on = _lag1_autocorr(self._reference_levels(n)) > AUTO_DIFF_ACF
        values = self._recent()
        if self._diff_on:
            values = np.diff(values, axis=0)
        self._scale = robust_scale(values)
        self._scale_tiny = bool((self._scale < SMALL_SCALE).any())  # see _scaled
        y = self._rows(2 * n)
        past, cur = y[:n], y[n:]
        sigma, lam = self._select_params(past, cur)
        self._win = self._make_state(n, sigma, lam)
        self._win.push_many(y)  # one compiled loop where the state has one (filling pushes solve nothing)
        # a full rebuild of the accumulators from the stored samples once the windows are filled
        # (cheap, and independent of how the state treats its filling phase)
        self._win.set_params(sigma, lam)
        if self._n_eff != n:
            self._picker_resize(n)
            self._null_cal.restart()  # a new window size has a new null ...
            self._shist_n = 0  # ... and scores on a new scale
        self._n_eff = n
        self._since_reselect = 0
        self._calibrate()

    @property
    def _span(self) -> int:
        return 2 * self.n + self.k

    @property
    def _held(self) -> int:
        """Levels held: the windows' span and ``AR_MIN_VALUES`` behind it for the kernel score's
        null; with the level view, ``NULL_POOL x n`` behind the windows (see :meth:`_levels_before`)."""
        kernel = self._span + AR_MIN_VALUES
        return max(kernel, (NULL_POOL + 2) * self.n + 1) if self.level_view else kernel

    def _recent(self) -> np.ndarray:
        """The newest 2n + k held levels: what the scale and the difference decision look at."""
        return self._hist.last(min(len(self._hist), self._span))

    def _reference_levels(self, n: int) -> np.ndarray:
        """What ``difference="auto"`` decides on for windows of size ``n``: the newest ``2 n_max + k``
        held levels before the ``2n + k`` the windows will hold, never the windows' own (the data
        under test must not choose its representation: a 10 sd step inside them lifted the lag-1
        autocorrelation above :data:`AUTO_DIFF_ACF`, the windows were differenced, and the step
        became one spike; a 10 sd step 10 samples before a window growth was found 5 times in 20).
        The newest levels, windows included, while fewer than ``2n + k`` precede them (the first
        build)."""
        w = 2 * n + self.k
        vals = self._hist.last(min(len(self._hist), self._span + w))
        before = vals[: vals.shape[0] - w]
        return before[-self._span:] if before.shape[0] >= w else self._recent()

    def _reselect(self) -> None:
        """Re-choose sigma/lambda: in place for univariate streams, by a rebuild otherwise.

        Re-scaling a univariate series by a new robust scale and re-choosing sigma on the re-scaled
        rows gives the same kernel as re-choosing sigma on the rows as stored (both rules are
        scale-equivariant), so the in-place update equals a rebuild without re-embedding the
        history. Multivariate rows are rebuilt: their channels' relative scales can change.
        """
        if self._dim != 1:
            self._build(self._n_eff)
            return
        sigma, lam = self._select_params(self._win.past(), self._win.current())
        self._win.set_params(sigma, lam)
        self._since_reselect = 0
        self._calibrate()

    def _picker_resize(self, n: int) -> None:
        delay = self.delay or n
        spacing = self.min_spacing or n
        if self._picker is None:
            self._picker = PeakPicker(delay, spacing)
        else:  # keep the run / last-alarm memory, adopt the new scale
            self._picker.delay, self._picker.min_spacing = delay, spacing

    def _select_params(self, past: np.ndarray, cur: np.ndarray) -> tuple[float, float]:
        from ratiowatch.core.kernels import MIN_SCALE, constant_up_to_rounding, median_distance

        pooled = np.vstack([past, cur])
        if constant_up_to_rounding(pooled) or (self.method == "lsdd" and self.select != "median"
                                               and _below_kernel_resolution(past, cur)):
            # values that differ in the last bits only (0.1 + 0.2 and 0.3) are chosen for as the
            # constant windows they are: their median distance would be a width of ulps, and the
            # rounding a maximal change. Exactly constant windows select as before. So are LSDD's
            # windows whose spread no kernel width resolves (fit_lsdd refuses them): every kernel
            # value is 1 either way, so the selection is the one it made of them before.
            pooled = np.repeat(pooled[:1], pooled.shape[0], axis=0)
            past, cur = pooled[: past.shape[0]], pooled[past.shape[0]:]
        if self.select == "median":
            # at least MIN_SCALE: a width whose square underflows is refused by every window (rows
            # of 1e-150 beside rows of 1, once scaled, have a median distance at that limit)
            return max(self.sigma_factor * median_distance(pooled), MIN_SCALE), self.lam
        if self.method in ("rulsif", "ulsif"):
            from ratiowatch.core.rulsif import fit_rulsif

            alpha = self.alpha if self.method == "rulsif" else 0.0
            fit = fit_rulsif(past, cur, alpha=alpha, n_centres=past.shape[0], seed=self.seed)
            return fit.sigma, fit.lam
        if self.method == "lsdd":
            from ratiowatch.core.lsdd import fit_lsdd, h_scale

            fit = fit_lsdd(past, cur, seed=self.seed)
            if self._lsdd_unitless:  # the state's ridge is in units of the kernel's volume
                return fit.sigma, fit.lam / h_scale(fit.sigma, past.shape[1])
            return fit.sigma, fit.lam
        from ratiowatch.core.kliep import fit_kliep

        fit = fit_kliep(past, cur, seed=self.seed)
        return fit.sigma, 0.1  # lambda unused by KLIEP

    def _calibrate(self, floor: bool = False) -> None:
        """Re-estimate the null of the score from the current windows (see :mod:`.calibration`).

        ``floor``: the AR null also takes the windows' permutation floor (see
        :meth:`_recalibrate_from_constant`)."""
        self._since_calib = 0
        if not self._win.ready:
            self._threshold = math.nan
            return
        rng = np.random.default_rng([self.seed, self._t])
        n = self._n_eff
        sigma, lam = self._win.sigma, self._win.lam
        uses_ar = self._null_mode == "ar" or self._null == "ar_or_permutation"
        before = self._values_before(n) if uses_ar else None
        ar_values = self._ar_values(before, n) if uses_ar else None  # once: it is also the switch's test
        self._atom = ar_values is not None and _mostly_one_value(ar_values)
        self._floor_checked = False
        if self._null_mode == "permutation" and ar_values is not None and ar_values.shape[0] >= AR_MIN_VALUES:
            self._switch_to_ar()  # null="ar_or_permutation": the AR model can be fitted now
        if self._null_mode == "ar":
            self._level_on = self.level_view and self._diff_on
            self._null_cal.calibrate_ar(ar_values, n, sigma, lam, rng,
                                        make_state=lambda: self._make_state(n, sigma, lam), corr_view=self._corr_on,
                                        channel_view=self._channel_on,
                                        win=self._win if floor else None, block=self._block(),
                                        trend_values=before, level_view=self._level_on,
                                        level_values=self._levels_before(n) if self._level_on else None)
        else:
            self._null_cal.calibrate_permutation(self._win, n, self._block(), rng,
                                                 make_state=lambda: self._make_state(n, sigma, lam))
        self._guard_stale = True

    def _confirm_due(self, null_thr: float) -> bool:
        """Whether the score needs the windows' own permutation floor before it may alarm.

        Under the AR null only (see :meth:`_confirm_by_permutation`): the first time since the
        last calibration that the score exceeds the threshold in force, and then at every step
        where it exceeds the AR threshold but not the floor taken before it: the windows have
        moved since, and a change that was ordinary among re-splits while a few of its values
        were in the window can be clear once more of them are.
        """
        if self._null_mode != "ar":
            return False
        g = self._guard if math.isfinite(self._guard) else -math.inf
        if not self._floor_checked:
            return exceeds(self._score, max(null_thr, g))
        return (exceeds(self._score, max(self._null_cal.ar_threshold, g))
                and not exceeds(self._score, max(null_thr, g)))

    def _floor_resolves(self) -> bool:
        """Whether the windows have enough distinct block re-splits to certify the kernel score's rate.

        ``2n / b`` blocks fall into two halves in ``C(2n / b, n / b)`` ways, and a permutation
        test over fewer splits than ``1 / rate`` cannot reach the rate: an exponential tail
        extrapolated from its draws stands above every change. At the default rate, n = 34 has
        enough (blocks of 3: C(22, 11) = 705,432 against 40,000) and n = 24 has not
        (C(16, 8) = 12,870).
        """
        blocks = 2 * self._n_eff // self._block()
        return math.comb(blocks, blocks // 2) * self._null_cal.kernel_rate >= 1.0

    def _top_draws(self, n: int) -> int:
        """Surrogates the AR null draws beyond its pool at the first confirmation after a
        calibration (see :meth:`_confirm_by_permutation` and
        :meth:`~ratiowatch.stream.calibration.null.NullCalibrator.raise_to_top`).

        0 unless most values behind the windows are one value and the windows are too small for
        their re-splits to certify the rate (:meth:`_floor_resolves`): the score is then discrete
        and bounded, and its top, reached far more often than the rate (1-2 % at n = 6 on counts
        that are 90 % zeros), must show among the draws. They are as many as the largest windows'
        pool costs (``NULL_POOL * n_perm * (self.n / n)^2`` in all, 5,555 at n = 6), and at most
        ``1 / (2 rate)``.
        """
        if not self._atom or self._floor_resolves():
            return 0
        pool = NULL_POOL * self.n_perm
        total = min(math.ceil(pool * (self.n / n) ** 2), math.ceil(0.5 / self._null_cal.kernel_rate))
        return max(0, total - pool)

    def _confirm_by_permutation(self) -> float:
        """Most values behind the windows are one value: test the windows by their own re-splits.

        The AR surrogates, a linear filter of resampled residuals of the ~50 values behind the
        windows, hold an atom poorly: the filter smears it, and those values hold only a handful
        of events. In event counts that are mostly 0 (90 % zeros), a few events falling into the
        current window were far out in the surrogates' tail. Re-splits of exchangeable windows
        are an exact null whatever the values, so there a score above the AR threshold alarms
        only when it is also above the windows' permutation floor
        (:meth:`~ratiowatch.stream.calibration.null.NullCalibrator.confirm_with_floor`): the
        rate's quantile of their re-splits where the windows can resolve the rate
        (:meth:`_floor_resolves`), and below that the largest score of a drawn re-split (the
        windows' own split must beat every one drawn; a tie passes where no more re-splits reach
        the top than the own split and its mirror explain). On the stress suite's zero-inflated
        counts (10 seeds, lengths 15-10,000): 53 false alarms -> 28; on its streams of 2,000 and
        10,000 samples 15 -> 7 once the windows are grown (n >= 34; 1.41 -> 0.66 per 10,000) and
        19 -> 7 before. A burst to Poisson(50) counts is still found (10 of 10 at sample 300 and
        1,500).

        Below the size where the re-splits resolve the rate, the first confirmation after each
        calibration also draws the AR null up to its top (:meth:`_top_draws`): the score of
        such windows is discrete and bounded, and the pool's tail put the rate's quantile below a
        top that comes in 1-2 % of steps.

        The test is an atom (more than half the values one value, a MAD of 0), not any repeated
        value: integer or rounded readings repeat without being far from Gaussian. Continuous
        data never take it: the floor taken on every series cost the change suite 8 of its 420
        changes (variance 29 -> 24, as a rise's first values are ordinary among re-splits).
        """
        first = not self._floor_checked
        self._floor_checked = True
        n, sigma, lam = self._n_eff, self._win.sigma, self._win.lam
        top = self._top_draws(n) if first else 0
        if top:  # once per calibration: the draws cost what the largest windows' pool does
            before = self._values_before(n)
            self._null_cal.raise_to_top(self._ar_values(before, n), n, sigma, lam,
                                        np.random.default_rng([self.seed, self._t, 2]), top, trend_values=before)
        rng = np.random.default_rng([self.seed, self._t, 1])
        return self._null_cal.confirm_with_floor(self._win, n, self._block(), rng,
                                                 make_state=lambda: self._make_state(n, sigma, lam),
                                                 resolves=self._floor_resolves())

    def _recalibrate_from_constant(self) -> float:
        """The null in force was drawn from constant values and the windows have just left them.

        Such a null says that any departure is a change: 50 zeros of an event count made every
        isolated event an alarm (9 per 10,000 samples of Poisson(0.002) counts, nearly one per
        event). Whether the departure is one is decided now, from fresh pools over the windows as
        they are (the AR null's permutation floor sees the current window; see
        :meth:`~ratiowatch.stream.calibration.null.NullCalibrator.calibrate_ar`).
        """
        self._null_cal.restart()
        self._calibrate(floor=True)
        return self._null_cal.threshold

    def _values_before(self, n: int) -> np.ndarray:
        """Every held preprocessed, scaled value *before* the current window (``n + k + 50`` at the largest
        windows are full): the surrogates' trend line is fitted to them (see
        :meth:`~ratiowatch.stream.calibration.null.NullCalibrator.calibrate_ar`)."""
        vals = self._hist.last(min(len(self._hist), self._span + AR_MIN_VALUES))
        if self._diff_on:
            vals = np.diff(vals, axis=0)
        return self._scaled(vals[: vals.shape[0] - n])

    def _levels_before(self, n: int) -> np.ndarray:
        """The level view's null is drawn from these: every held level before the current window,
        scaled (``NULL_POOL x n`` and more once the windows are full, every one seen before). Over
        ~50 values a random walk and a stationary AR(1) with phi = 0.9 cannot be told apart (see
        :mod:`ratiowatch.stream.calibration.levels`)."""
        vals = self._hist.last(len(self._hist))
        return self._scaled(vals[: vals.shape[0] - n])

    def _ar_values(self, before: np.ndarray, n: int) -> np.ndarray:
        """What the AR-surrogate model is fitted to: the newest ``max(n + k, AR_MIN_VALUES)`` of
        ``before`` (:meth:`_values_before`; as local as the windows themselves, never fewer than an
        AR(5) fit needs; a change entering the current window must not widen its own null). Fewer
        while the stream is young (then no threshold yet, hence no alarm)."""
        return before[max(0, before.shape[0] - max(n + self.k, AR_MIN_VALUES)):]

    def _block(self) -> int:
        """Permutation block length: ``perm_block``, or k when 0 (subsequences sharing samples stay together)."""
        b = self.perm_block if self.perm_block > 0 else self.k
        return max(1, min(b, self._n_eff))

    def _history_guard(self) -> float:
        """Robust upper quantile of the score's own history (NaN while the history is short).

        The threshold in force is max(permutation threshold, this guard); the guard is refreshed
        at every calibration (not every step: the median over the history is the costly part).

        The permutation null treats the subsequences as exchangeable; autocorrelated or
        heteroscedastic data make the real null wider. Once ``n_eff`` scores exist, the threshold is
        also at least ``median + z_q * 1.4826 * MAD`` of the past scores of the current window size
        (once max(10 n_eff, 100) exist), with ``z_q`` the normal quantile of ``false_alarm_rate``
        (a causal calibration on the score's own history).
        """
        m = min(self._shist_n, _SCORE_HISTORY)
        if not self.history_guard or m < max(10 * self._n_eff, 100):
            return math.nan
        med, mad = median_mad(self._shist[:m])
        return float(med) + self._z_quantile * float(mad) * 1.4826

    # ------------------------------------------------------------------ river API
    def update(self, x) -> None:
        """river drift-detector protocol: feed one value; read :attr:`drift_detected` afterwards."""
        self.step(x)

    def learn_one(self, x) -> None:
        """river anomaly-detector protocol: learn one sample (dict, float or 1-d array)."""
        self.step(x)

    def score_one(self, x) -> float:
        """Change score of the current windows (0.0 until they are full); does not change state.

        ``x`` is validated but does not enter the windows: a change score belongs to two windows,
        not to one point, so the score is the one after the last :meth:`learn_one`, in units of the
        current threshold (``score / threshold``; above 1 means an alarm-level change). With the
        correlation or the channel view on (m >= 2 channels), the largest of the views' ratios.
        """
        if isinstance(x, Mapping):
            for v in x.values():
                if v is not None and not isinstance(v, (int, float, np.number)):
                    raise ValueError(f"sample values must be numbers or None; got {v!r}")
        self._as_vector(x, take=False)  # the ValueError learn_one would raise
        s, thr = self._score, self._threshold
        if not (np.isfinite(s) and np.isfinite(thr)) or thr <= 0:
            r = 0.0
        else:
            r = float(s / thr)
        if self._corr_on and math.isfinite(self._corr_ratio):
            r = max(r, self._corr_ratio)
        if self._channel_on and math.isfinite(self._channel_ratio):
            r = max(r, self._channel_ratio)
        if self._level_on and math.isfinite(self._level_ratio):
            r = max(r, self._level_ratio)
        return r

    @property
    def score(self) -> float:
        """Raw change score after the last update (NaN during warm-up)."""
        return self._score

    @property
    def threshold(self) -> float:
        """Threshold in force (NaN during warm-up)."""
        return self._threshold

    @property
    def window(self) -> int:
        """Current window size n_eff (0 during warm-up)."""
        return self._n_eff

    @property
    def last_alarm(self) -> Alarm | None:
        return self._last_alarm

    @classmethod
    def _unit_test_params(cls):
        yield {"n": 8, "n_min": 4, "k": 2}

    # ------------------------------------------------------------------ checkpoints
    def _params(self) -> dict:
        return {"method": self.method, "k": self.k, "n": self.n, "symmetric": self.symmetric,
                "alpha": self.alpha, "reselect_every": self.reselect_every,
                "false_alarm_rate": self.false_alarm_rate, "n_perm": self.n_perm,
                "calibrate_every": self.calibrate_every, "difference": self.difference,
                "n_min": self.n_min, "window_frac": self.window_frac, "delay": self.delay,
                "min_spacing": self.min_spacing, "select": self.select, "sigma_factor": self.sigma_factor,
                "lam": self.lam,
                "history_guard": self.history_guard, "perm_block": self.perm_block,
                "refresh_every": self.refresh_every, "null": self.null, "corr_view": self.corr_view,
                "channel_view": self.channel_view, "level_view": self.level_view,
                "robust_line": self.robust_line, "seed": self.seed}

    def to_state(self) -> dict:
        """Flat dict of numpy arrays and JSON-able scalars (``.npz`` + JSON; no pickle)."""
        meta = {"version": _STATE_VERSION, "params": self._params(), "keys": self._keys, "dim": self._dim,
                "diff_on": bool(self._diff_on),
                "n_eff": self._n_eff, "t": self._t, "since_reselect": self._since_reselect,
                "since_calib": self._since_calib, "threshold": self._threshold, "score": self._score,
                "shist_n": self._shist_n, "guard": self._guard, "guard_stale": self._guard_stale,
                "drift": self._drift_detected, "corr_on": self._corr_on, "corr_ratio": self._corr_ratio,
                "channel_on": self._channel_on, "channel_ratio": self._channel_ratio,
                "level_on": self._level_on, "level_ratio": self._level_ratio,
                "null_mode": self._null_mode, "atom": self._atom, "floor_checked": self._floor_checked,
                "last_alarm": None if self._last_alarm is None else self._last_alarm.to_dict()}
        if self._keys is not None:  # as JSON holds them: strings and integers come back as they were
            meta["keys"] = [_encode_key(k) for k in self._keys]
        if self._gaps:
            meta["gaps"] = [list(g) for g in self._gaps]
        if self._partial:
            meta["partial"] = self._partial
        null_meta, null_arrays = self._null_cal.to_state()
        meta.update(null_meta)
        out: dict = {"meta": json.dumps(meta), "shist": self._shist.copy(), **null_arrays}
        if self._pre is not None:
            for name, part in (("pre", self._pre.to_state()), ("hist", self._hist.to_state())):
                for key, val in part.items():
                    out[f"{name}.{key}"] = val
        if self._win is not None:
            out["scale"] = self._scale.copy()
            for key, val in self._win.to_state().items():
                out[f"win.{key}"] = val
            out["picker"] = json.dumps(self._picker.to_state())
        return out

    @classmethod
    def from_state(cls, state: Mapping) -> "ChangePointDetector":
        """Restore a detector saved by :meth:`to_state`; it continues exactly where it stopped.

        Another class's checkpoint, or a damaged one (an entry missing, of the wrong type or
        shape, a count or position out of its range), is refused with a ``ValueError`` that names
        the entry: the compiled loops index the restored arrays without bounds checks.
        """
        state, meta = open_checkpoint(state, cls.__name__)
        state_version(meta, cls.__name__, readable=(_STATE_VERSION,))
        params = dict(checkpoint_params(meta, cls))
        # checkpoints written before the AR null existed ran (and pooled) the permutation null
        params.setdefault("null", "permutation")
        # ... and checkpoints written before the correlation view existed ran without it
        params.setdefault("corr_view", False)
        params.setdefault("channel_view", False)  # ... and so did those before the channel view
        params.setdefault("level_view", False)  # ... and the level view
        params.setdefault("robust_line", False)  # ... and those before the option fitted the plain line
        obj = cls(**params)
        try:
            obj._restore(state, meta)
        except (TypeError, KeyError, IndexError, AttributeError, ZeroDivisionError, OverflowError) as exc:
            raise ValueError(f"not a {cls.__name__} checkpoint, or a damaged one: {type(exc).__name__}: "
                             f"{exc}") from None
        return obj

    def _restore(self, state: Mapping, meta: Mapping) -> None:
        """The body of :meth:`from_state` on a fresh detector with the checkpoint's parameters."""
        what = type(self).__name__

        def count(name, low=0, high=None, default=None):
            value = meta[name] if default is None or name in meta else default
            return state_range(value, name, what, low, high, meta="meta")

        def real(name, default=None):
            value = meta[name] if default is None or name in meta else default
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise damaged_state(what, name, f"must be a number; got {value!r}", "meta")
            return float(value)

        def flag(name, default=None):
            return state_flag(meta[name] if default is None or name in meta else default, name, what, "meta")

        dim = meta["dim"]
        if dim is not None:
            dim = state_range(dim, "dim", what, 1, meta="meta")
        keys = meta["keys"]
        if keys is not None:
            if not isinstance(keys, list) or len(keys) != dim:
                raise damaged_state(what, "keys", f"must be a list of the {dim} channels' names; got {keys!r}", "meta")
            keys = [_decode_key(k) for k in keys]
            try:
                keys = [_channel_key(k) for k in keys]
            except ValueError:
                raise damaged_state(what, "keys", f"must hold names of the types {CHANNEL_KEY_TYPES}; got {keys!r}",
                               "meta") from None
        self._keys, self._dim = keys, dim
        self._t = count("t", -1)
        n_eff = count("n_eff")
        if n_eff and n_eff not in self._rung_list:
            raise damaged_state(what, "n_eff", f"is {n_eff}, not a window size of these parameters "
                           f"({self._rung_list})", "meta")
        self._n_eff = n_eff
        self._diff_on = flag("diff_on")
        self._since_reselect, self._since_calib = count("since_reselect"), count("since_calib")
        self._threshold = real("threshold")
        self._score = real("score")
        self._shist_n = count("shist_n")
        self._guard, self._guard_stale = real("guard"), flag("guard_stale")
        null_mode = meta.get("null_mode", self._null_mode)  # older checkpoints: the configured null
        if null_mode not in ("ar", "permutation"):
            raise damaged_state(what, "null_mode", f"must be 'ar' or 'permutation'; got {null_mode!r}", "meta")
        self._null_mode = null_mode
        self._atom = flag("atom", False)
        self._floor_checked = flag("floor_checked", False)
        self._null_cal = self._new_calibrator()
        self._null_cal.load_state(meta, state, dim=dim, seen=self._t + 1)
        self._shist = state_array(state, "shist", (_SCORE_HISTORY,), finite=False).astype(np.float64)
        self._drift_detected = flag("drift")
        self._corr_on = flag("corr_on", False)
        self._corr_ratio = real("corr_ratio", math.nan)
        self._channel_on = flag("channel_on", False)
        self._channel_ratio = real("channel_ratio", math.nan)
        self._level_on = flag("level_on", False)
        self._level_ratio = real("level_ratio", math.nan)
        if meta["last_alarm"] is not None:
            self._last_alarm = _alarm_from(meta["last_alarm"], what)
        gaps = meta.get("gaps", [])
        if not (isinstance(gaps, list) and all(
                isinstance(g, list) and len(g) == 2 and all(isinstance(e, int) and not isinstance(e, bool) for e in g)
                and 0 <= g[0] <= self._t and g[1] >= 1 for g in gaps)):
            raise damaged_state(what, "gaps", f"must be a list of [first index, length] pairs; got {gaps!r}", "meta")
        self._gaps = [list(g) for g in gaps]
        self._partial = count("partial", default=0)

        def part(prefix):
            return {k[len(prefix) + 1:]: (v.item() if isinstance(v, np.ndarray) and v.ndim == 0 else v)
                    for k, v in state.items() if k.startswith(prefix + ".")}

        if "pre.dim" in state:
            if dim is None:
                raise damaged_state(what, "dim", "is None, but the checkpoint holds a preprocessed history", "meta")
            self._pre = _part_from(Differencer, part, "pre", what)
            self._hist = _part_from(History, part, "hist", what)
            for name, got, want in (("pre.dim", self._pre.dim, dim), ("hist.dim", self._hist.dim, dim),
                                    ("hist.capacity", self._hist.capacity, self._held)):
                if got != want:
                    raise damaged_state(what, name, f"is {got}, where the checkpoint's parameters give {want}")
            if self._hist.count > self._t + 1:
                raise damaged_state(what, "hist.count", f"is {self._hist.count}, more than the {self._t + 1} samples "
                               "the checkpoint has seen")
        if ("win.ring" in state) != bool(n_eff) or (n_eff and self._pre is None):
            raise damaged_state(what, "n_eff", f"is {n_eff}, but the checkpoint holds "
                           f"{'no' if 'win.ring' not in state else 'a'} window state"
                           f"{'' if self._pre is not None else ' and no history'}", "meta")
        if n_eff:
            scale = state_array(state, "scale", (dim,)).astype(np.float64)
            if not (scale > 0).all():
                raise damaged_state(what, "scale", f"must hold positive scales; got {scale.tolist()}")
            self._scale = scale.copy()
            self._scale_tiny = bool((self._scale < SMALL_SCALE).any())
            self._win = _part_from(_state_class(self.method), part, "win", what)
            for name, got, want in (("win.n", self._win.n, n_eff), ("win.dim", self._win.dim, self.k * dim)):
                if got != want:
                    raise damaged_state(what, name, f"is {got}, where the checkpoint's parameters give {want}")
            self._lsdd_unitless = getattr(self._win, "unitless", True)
            try:
                self._picker = PeakPicker.from_state(json.loads(str(state["picker"])))
            except (TypeError, ValueError, KeyError, AttributeError) as exc:
                raise damaged_state(what, "picker", f"is not a peak picker's state ({type(exc).__name__}: "
                               f"{exc})") from None


def _part_from(cls, part, prefix: str, what: str):
    """``cls`` restored from the checkpoint's entries ``prefix.*``; its ``ValueError`` (a damaged
    entry) as the checkpoint's, with the part named."""
    try:
        return cls.from_state(part(prefix))
    except ValueError as exc:
        raise ValueError(f"not a {what} checkpoint, or a damaged one: its part {prefix + '.*'!r}: {exc}") from None


def _alarm_from(d, what: str, name: str = "last_alarm", low: int | None = None) -> Alarm:
    """An :class:`Alarm` read from entry ``name`` of a checkpoint's meta, or a ``ValueError`` that
    names it; ``low``: the least index it may hold."""
    fields = ("change_index", "alarm_index", "score", "threshold")
    if not (isinstance(d, Mapping) and all(f in d for f in fields)
            and all(isinstance(d[f], int) and not isinstance(d[f], bool) and (low is None or d[f] >= low)
                    for f in fields[:2])
            and all(isinstance(d[f], (int, float)) and not isinstance(d[f], bool) for f in fields[2:])):
        bound = "" if low is None else f" >= {low}"
        raise damaged_state(what, name, f"is not an alarm (integers change_index, alarm_index{bound} and numbers "
                       f"score, threshold); got {d!r}", "meta")
    try:
        return Alarm.from_dict(d)
    except TypeError as exc:
        raise damaged_state(what, name, f"is not an alarm ({exc})", "meta") from None


def _mostly_one_value(values: np.ndarray) -> bool:
    """Whether, in any channel of ``values`` (T, channels), more than half the values are one value.

    Then that value is the channel's median and its MAD is 0: an atom that the AR surrogates
    hold poorly (event counts that are mostly 0, a reading stuck at one level between moves).

    Examples
    --------
    >>> _mostly_one_value(np.c_[[0.0, 0.0, 0.0, 2.0, 1.0]]), _mostly_one_value(np.c_[[0.0, 0.0, 1.0, 2.0]])
    (True, False)
    """
    med = np.median(values, axis=0)
    return bool(((values == med).sum(axis=0) * 2 > values.shape[0]).any())

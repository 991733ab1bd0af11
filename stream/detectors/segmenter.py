"""Streaming change points from a split profile over a sliding window (the offline test, run causally).

:class:`SplitProfileDetector` holds the samples since the last change it reported (at most
``max_window`` of them) and, every few steps, scores every split of that window with the offline
detector's density-ratio split profile (:mod:`ratiowatch.core.split_profile`: the symmetric
RuLSIF divergence between the subsequences before and after each split, scaled by the effective
sample size). When the window's largest score passes a calibrated threshold, the best split is
reported as the change (its first sample, not the alarm time; moved to a significant level shift
within a subsequence of it, so that no sample of the old level starts the new window) and the
window restarts there. It is the density-ratio counterpart of ClaSS (Ermshaus, Schäfer and Leser
2024), which scores every split of a sliding window with a classifier.

Everything the offline detector learns from a whole series it learns here from the window:

- **Width**: at each calibration, from the window's own autocorrelation
  (:func:`~ratiowatch.stream.series.width.subsequence_width`), a periodic window scored at a
  quarter and a whole cycle (:func:`~ratiowatch.stream.detectors.offline.build_profile`), and a
  periodic window of several channels scored channel by channel (the phases between the
  channels' cycles wander: scored jointly, five independent jittered cycles raised 38 false
  alarms per 10,000 samples, channel by channel 0.5).
- **Null**: the largest score of ``n_null`` AR surrogates
  (:func:`~ratiowatch.stream.calibration.split_test.ar_surrogates`: a least-squares line, an
  AR(<= 5) fit, residual bootstrap, rank mapping onto the fitted values), drawn at the length
  the window will have at the next calibration, so the threshold never serves a longer window
  than it was drawn for. Calibrations follow the window's length on a ladder (x 1.5 from
  ``min_window``) and, once it slides at ``max_window``, every ``max_window / 2`` steps. The AR
  model is fitted to the part of the window that the tests have already seen (the window of the
  previous calibration), not to its newest samples: fitted across a fresh level shift it is nearly
  a random walk, and the threshold would climb with the shift's own evidence (6-sd shifts in the
  middle of 300-sample series: found 0 of 20 times with the whole window, 17 of 20 with the older
  part). The line is fitted with gross values clipped (``robust_line``): one value of 1e4 times
  the noise tilted the least-squares line, every surrogate became a ramp, and half the level steps
  after such a value went unseen while it was in the window.
- **A second null for a periodic window** (opt-in, ``cycle_permutation=True``): a univariate window with
  a period and at least 16 cycles is also scored at a quarter cycle with rows at stride 1, against
  :data:`CYCLE_DRAWS` orders of its own rows in blocks of two cycles
  (:func:`~ratiowatch.stream.calibration.cycle_permutation.window_null_maxima`, the offline
  detector's second null, configuration P). The AR null of a cycle is wide, and alone it finds a
  level, shape or frequency change inside the cycle hundreds of samples late. Each null then
  takes half the level, and a window passing either raises the alarm. The split is placed by the
  rows at stride 1 (the null's splits leave a whole block on each side and cannot reach the
  newest rows). This null is drawn from the whole window, not its older part: a permutation of a
  window with a fresh change mixes the regimes instead of turning into a random walk. It is off by
  default because it breaks the false-alarm specification on clean cycles: a sine of period 12 and
  a smooth jittered cycle of period 50, both with noise of 1 % of the amplitude, got 1.39 and 1.31
  false alarms per 10,000 samples. The kernel's width is the median distance between evenly
  spaced rows, and on an exact cycle those rows can all fall on a few phases: for some window
  lengths the width collapses to the noise (a sine of period 12 in a window of 4,779 samples:
  0.03 instead of 2.0), and the window's profile maximum jumps tenfold. The null's draws keep
  the calibration window's width, so the later tests score another feature map
  (docs/experiments.md, S10).
- **Held values**: a channel that held one value through the rows the null was fitted to (a
  stuck reading, event counts that were all zero so far) gives surrogates that never leave it, so
  one departure would pass any threshold drawn from them. A test sees departures from such a
  value only once they are more than a change-free stream gives: ``n`` samples without one bound
  their rate only by the rule of succession, ``1 / (n + 2)``, and fewer departures than the
  binomial tail allows at the test's level are put back to the held value
  (:func:`departures_plausible`). A spike in a stuck reading, or the first event of a sparse
  count, is then no change; a reading that comes back to life departs in most new samples and is
  found within a few dozen of them.
- **Threshold**: a Gumbel law fitted by moments to the surrogate maxima
  (:func:`~ratiowatch.stream.calibration.split_test.gumbel_threshold`, the law behind the offline
  test's tail p-value) (a maximum over splits has
  an extreme-value tail), read at the per-test level ``false_alarm_rate x test spacing``: with a
  test every ``s`` steps, at most ``false_alarm_rate`` alarms per step on change-free data by the
  union bound over the tests (the tests of overlapping windows are positively dependent, so the
  bound is conservative). A test runs every ``max(1, len(window) // tests_per_window)`` steps: a
  window of 2,000 samples is tested every 40 steps, and the delay grows with the window, as does
  the change that it can resolve.

There is no early phase with another null: nothing is reported before the first calibration, at
``min_window`` samples, and every test after it uses the same rule.

Cost: one grid profile per test (up to about 5 ms at 5,000 samples: 100 grid splits, two 64 x 64
solves each; the split is refined only on an alarm) and ``n_null`` per calibration, about 3,700
samples per second (``ratiowatch bench cpd``); the two-window
:class:`~ratiowatch.stream.detectors.changepoint.ChangePointDetector` is about eight times faster
and alarms within tens of samples, this one sees changes of shape and frequency inside a periodic
signal and reports them hundreds of samples later.

Examples
--------
>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> y = np.r_[rng.normal(0, 1, 600), rng.normal(2, 1, 600)]
>>> det = SplitProfileDetector(seed=0)
>>> alarms = [a for a in (det.step(v) for v in y) if a is not None]
>>> [(abs(a.change_index - 600) <= 10, a.alarm_index > 600) for a in alarms]
[(True, True)]
"""

from __future__ import annotations

import json
import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np
from river import base
from scipy.stats import binom

from ratiowatch.core.params import check_seed
from ratiowatch.core.validation import checkpoint_class, damaged_state, entry_name, state_flag, state_range
from ratiowatch.core.split_profile import Kernel, check_profile_settings
from ratiowatch.stream.calibration.peaks import Alarm
from ratiowatch.stream.calibration.cycle_permutation import (applies, block_profile, permutation_profile,
                                                             window_null_maxima)
from ratiowatch.stream.calibration.split_test import (MAX_ORDER, ar_surrogates, check_max_order, gumbel_threshold,
                                                      null_fit, remove_level_shifts)
from ratiowatch.stream.detectors.changepoint import _alarm_from, check_magnitude
from ratiowatch.stream.detectors.offline import DEFAULTS as OFFLINE_DEFAULTS
from ratiowatch.stream.detectors.offline import at_level_shift, build_profile
from ratiowatch.stream.detectors.state_file import checkpoint_params, open_checkpoint, state_version
from ratiowatch.stream.series.preprocess import clip_unrepresentable, fill_missing, standardise_columns
from ratiowatch.stream.series.width import subsequence_width

#: growth of the window between calibrations while it fills
LADDER = 1.5
#: checkpoint format of :meth:`SplitProfileDetector.to_state` (versions 1, before the cycle null,
#: 2, before its kept kernel, and 3, before held values were weighed, are still read)
STATE_VERSION = 4
#: block permutations per calibration for the cycle null. Its threshold is read far in the tail
#: (per-test levels of 0.001-0.005) from a Gumbel law fitted by moments; with 40 draws, as the AR
#: null takes, the jittered seasonal kinds of the null suite got up to 2 false alarms per 10,000
#: samples (seeds 0-4), with 160 at most 0.4 (seeds 0-9; docs/experiments.md, S10)
CYCLE_DRAWS = 160

#: constructor parameters by type, with what each must be; ranges are checked in __init__ (the seed
#: by :func:`~ratiowatch.core.params.check_seed`)
_INT_PARAMS = {"min_window": ">= 15", "max_window": ">= 2 * min_window", "tests_per_window": ">= 1",
               "n_null": ">= 10", "n_centres": ">= 1", "grid": ">= 1", "max_order": ">= 0"}
_REAL_PARAMS = {"false_alarm_rate": "in (0, 1), e.g. 1e-4", "alpha": "in [0, 1)", "lam": "positive",
                "sigma_factor": "positive"}
_BOOL_PARAMS = ("cycle_permutation", "robust_line")


def _check_param_types(params: Mapping) -> None:
    """Reject a constructor argument of the wrong type with a ``ValueError`` that names it (no
    silent ``int(30.9)`` or ``bool("false")``, no ``TypeError`` of a comparison or ``OverflowError``
    of ``int(inf)`` that does not say which parameter).

    >>> _check_param_types({**{k: 30 for k in _INT_PARAMS}, **{k: 0.1 for k in _REAL_PARAMS},
    ...                     **{k: True for k in _BOOL_PARAMS}, "min_window": 30.9})
    Traceback (most recent call last):
    ...
    ValueError: min_window must be an integer >= 15; got 30.9
    """
    for name, what in _INT_PARAMS.items():
        v = params[name]
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Integral):
            raise ValueError(f"{name} must be an integer {what}; got {v!r}")
    for name, what in _REAL_PARAMS.items():
        v = params[name]
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Real) or not math.isfinite(v):
            raise ValueError(f"{name} must be a finite number {what}; got {v!r}")
    for name in _BOOL_PARAMS:
        if not isinstance(params[name], (bool, np.bool_)):
            raise ValueError(f"{name} must be True or False; got {params[name]!r}")


@dataclass
class _Calibration:
    profile: object
    threshold: float
    serves_until: int  # window length up to which the threshold holds
    width: int
    period: int
    cycle: object = None  # the cycle null's profile (stride 1, whole blocks per side, the calibration
    # window's kernel), if it applies
    cycle_threshold: float = math.inf
    # channels that did not vary in the rows the null was fitted to: (channel, value) pairs, and
    # how many rows that was (the tests weigh a departure from such a value by the rule of succession)
    held: tuple = ()
    n_fit: int = 0
    fit_end: int = 0  # stream index of the first sample after those rows


def departures_plausible(departures: int, rows: int, n_fit: int, level: float) -> bool:
    """Whether ``departures`` of ``rows`` new samples leaving a value that ``n_fit`` earlier samples
    all held is what a change-free stream does, at ``level``.

    ``n_fit`` samples without a departure bound its rate under no change only by the rule of
    succession (Laplace): ``p = 1 / (n_fit + 2)``. The departures are plausible when
    ``P(Binomial(rows, p) >= departures) >= level``.

    Examples
    --------
    >>> departures_plausible(1, 300, 700, 0.002)  # one spike after 700 equal values
    True
    >>> departures_plausible(20, 300, 700, 0.002)  # a stuck reading comes back to life
    False
    """
    if departures <= 0:
        return True
    return float(binom.sf(departures - 1, rows, 1.0 / (n_fit + 2))) >= level


class SplitProfileDetector(base.DriftDetector):
    """Streaming change-point detector: a calibrated split profile over a sliding window.

    ``step(x)`` returns the :class:`~ratiowatch.stream.calibration.peaks.Alarm` a sample raised
    (or None). It is a river drift detector (``river.base.DriftDetector``): ``update(x)`` then
    ``drift_detected`` and ``last_alarm``, and ``clone()`` gives a fresh detector with the same
    parameters (river's adaptive trees clone the detector they are given for every new node).
    ``to_state`` / ``from_state`` checkpoint it exactly (arrays and JSON, no pickle).

    Parameters
    ----------
    false_alarm_rate : float
        Alarms per step allowed on change-free data (1e-4: one per 10,000 samples).
    min_window : int
        Samples in the window before the first calibration and test.
    max_window : int
        Samples the window holds at most (it slides beyond); several periods of a periodic signal.
    tests_per_window : int
        A test every ``len(window) // tests_per_window`` steps (at least every step).
    n_null : int
        AR surrogates per calibration.
    alpha, lam, sigma_factor, n_centres, grid : float / int
        Split profile settings, those of :func:`ratiowatch.detect` by default.
    max_order : int
        Largest AR order of the surrogates.
    cycle_permutation : bool
        Opt in to a second null: a univariate periodic window is also tested against its own rows
        in random orders of two-cycle blocks
        (:func:`~ratiowatch.stream.calibration.cycle_permutation.window_null_maxima`), each null at
        half the level. It finds level, shape and frequency changes inside a cycle within two
        windows, but on clean cycles (noise 1 % of the amplitude) it raises 1.3-1.4 false alarms
        per 10,000 samples, above ``false_alarm_rate``, and it cuts long physiological series
        into many more pieces (UTSA); off by default (module docstring).
    robust_line : bool
        The AR null's line is fitted with gross values clipped
        (:func:`~ratiowatch.stream.calibration.split_test.clip_gross`: beyond what the window's
        length of Gaussian values reaches with probability 1 %). With the plain least-squares
        line, one value of 1e4 times the noise (a sensor's error code) made every surrogate a
        ramp, and the detector missed half the level steps that came while that value was in its
        window (up to ``max_window`` samples). A window without such values gets the same line
        either way. False restores the plain line.
    seed : int
        Drives the surrogates (alarms are deterministic given it).

    Examples
    --------
    >>> det = SplitProfileDetector()
    >>> det.step(1.0) is None, det.n_seen
    (True, 1)
    """

    def __init__(self, false_alarm_rate: float = 1e-4, min_window: int = 30, max_window: int = 5000,
                 tests_per_window: int = 50, n_null: int = 40, alpha: float = OFFLINE_DEFAULTS["alpha"],
                 lam: float = OFFLINE_DEFAULTS["lam"], sigma_factor: float = OFFLINE_DEFAULTS["sigma_factor"],
                 n_centres: int = OFFLINE_DEFAULTS["n_centres"], grid: int = 100,
                 max_order: int = MAX_ORDER, cycle_permutation: bool = False, robust_line: bool = True,
                 seed: int = 0):
        super().__init__()
        _check_param_types(locals())
        if not 0.0 < false_alarm_rate < 1.0:
            raise ValueError(f"false_alarm_rate must be in (0, 1), e.g. 1e-4; got {false_alarm_rate}")
        if min_window < 15:
            raise ValueError(f"min_window must be >= 15 (the shortest series with a split); got {min_window}")
        if max_window < 2 * min_window:
            raise ValueError(f"max_window must be >= 2 * min_window = {2 * min_window}; got {max_window}")
        if tests_per_window < 1 or n_null < 10:
            raise ValueError(f"tests_per_window must be >= 1 and n_null >= 10; got {tests_per_window}, {n_null}")
        check_profile_settings(alpha=alpha, lam=lam, sigma_factor=sigma_factor, n_centres=n_centres, grid=grid)
        check_max_order(max_order)
        self.false_alarm_rate = float(false_alarm_rate)
        self.min_window = int(min_window)
        self.max_window = int(max_window)
        self.tests_per_window = int(tests_per_window)
        self.n_null = int(n_null)
        self.max_order = int(max_order)
        self.cycle_permutation = bool(cycle_permutation)
        self.robust_line = bool(robust_line)
        self.seed = check_seed(seed)
        # the split profile's settings, kept as the constructor took them (river's clone reads them)
        self.alpha, self.lam, self.sigma_factor = float(alpha), float(lam), float(sigma_factor)
        self.n_centres, self.grid = int(n_centres), int(grid)
        self._profile_cfg = {"alpha": self.alpha, "lam": self.lam, "sigma_factor": self.sigma_factor,
                             "n_centres": self.n_centres, "grid": self.grid, "widths": "both"}
        self._reset()

    def _reset(self) -> None:
        """Forget the stream: the state of a fresh detector with these parameters."""
        super()._reset()
        self._buf: np.ndarray | None = None  # (2 max_window, m): the window is _buf[_lo:_hi]
        # input index of each row of _buf: samples with every value missing are counted but not
        # taken, so the window's rows need not be consecutive in the stream
        self._pos: np.ndarray | None = None
        # rows given back from a gap of a periodic window, to keep its phase (see step)
        self._bridged: np.ndarray | None = None
        self._lo = self._hi = 0
        self._start = 0  # global index of the window's first sample
        self._last: np.ndarray | None = None  # last sample taken, complete (carried into gaps)
        self._partial = 0  # samples in a row with some channels (not all) missing, see step
        self._cal: _Calibration | None = None
        self._fresh = True  # no calibration since the window (re)started
        self._since_test = 0
        self._since_cal = 0
        self._n_cal = 0
        self.n_seen = 0
        self.last_alarm: Alarm | None = None
        self.score = math.nan
        self.threshold = math.nan

    # -- input -------------------------------------------------------------------------------
    def _row(self, x) -> np.ndarray | None:
        if isinstance(x, Mapping):
            raise ValueError("SplitProfileDetector takes a number or an array of channel values per sample, "
                             "not a dict; pass the values in a fixed order")
        try:
            # a copy: the row is kept as the value to carry forward, and a caller may refill its array
            v = np.array([x], dtype=np.float64) if isinstance(x, float) else np.array(x, dtype=np.float64)
        except OverflowError:  # a Python int beyond float64: refused as the other detectors refuse it
            check_magnitude(x)
            raise
        except (TypeError, ValueError):
            raise ValueError(f"a sample is a number or a 1-d array of channel values; got {x!r}") from None
        if self._buf is not None and np.ndim(x) == 0 and np.isnan(v).all():
            return None  # None or NaN for a sample of several channels: every value is missing
        if v.ndim == 2 and v.shape[0] == 1:
            v = v[0]
        v = v.reshape(-1) if v.ndim == 0 else v
        if v.ndim != 1 or v.size == 0:
            raise ValueError(f"a sample is a number or a 1-d array of channel values; got shape {v.shape} "
                             "(feed a block of samples one row at a time)")
        if self._buf is not None and v.size != self._buf.shape[1]:
            raise ValueError(f"expected {self._buf.shape[1]} channel value(s) per sample; got {v.size}")
        if np.isinf(v).any():
            raise ValueError("sample holds an infinite value; use NaN for missing values")
        return v  # missing values are step's to handle

    def skip_to(self, index: int) -> None:
        """Number the next sample ``index``: a fresh detector taking over a stream at that sample
        reports change and alarm indices in the stream's numbering.

        Examples
        --------
        >>> det = SplitProfileDetector()
        >>> det.skip_to(500)
        >>> det.step(1.0) is None, det.n_seen
        (True, 501)
        """
        if self.n_seen:
            raise ValueError(f"skip_to is for a fresh detector; this one has seen {self.n_seen} samples")
        if index < 0:
            raise ValueError(f"index must be >= 0; got {index}")
        self.n_seen = self._start = int(index)

    def prime(self, rows, start: int) -> None:
        """Take ``rows`` (T, m; NaN = missing, carried forward), the stream's samples ``start .. start
        + T - 1``, as the window of a fresh detector, without testing them: the next sample
        calibrates on the whole window and is tested as usual. For a stream handed over with its
        past several cycles, which a window restarted at a change would not hold
        (:class:`~ratiowatch.stream.detectors.routed.PeriodRoutedDetector` with ``with_history``).
        The window is the one :meth:`step` would hold after the same rows: rows before the first
        with a value in every channel, and rows with every value missing, are counted but not
        taken (no window if there is none).

        Examples
        --------
        >>> det = SplitProfileDetector()
        >>> det.prime(np.sin(np.arange(600.0) / 5)[:, None], start=1000)
        >>> det.n_seen, det.window_length
        (1600, 600)
        """
        if self.n_seen:
            raise ValueError(f"prime is for a fresh detector; this one has seen {self.n_seen} samples")
        if start < 0:
            raise ValueError(f"start must be >= 0; got {start}")
        try:
            x = np.asarray(rows, dtype=np.float64)
        except OverflowError:  # a Python int beyond float64, refused as step refuses it
            raise ValueError("rows hold a number beyond float64 (an error code rather than a reading); use NaN "
                             "for a missing value") from None
        x = x.reshape(-1, 1) if x.ndim < 2 else x
        if x.ndim != 2:
            raise ValueError(f"rows must be (T,) or (T, channels); got shape {x.shape}")
        if len(x) > self.max_window:
            raise ValueError(f"at most max_window = {self.max_window} rows; got {len(x)}")
        if np.isinf(x).any():
            raise ValueError("rows hold an infinite value; use NaN for missing values")
        self.n_seen = self._start = int(start) + len(x)
        # as step skips them: rows before the first with every channel present are dropped, and
        # gaps after it are carried forward (back-filling a channel that had not begun, or
        # zero-filling one that never reported, put a false step into the window)
        complete = ~np.isnan(x).any(axis=1)
        if not complete.any():
            return
        first = int(complete.argmax())
        # rows with every value missing after it are counted but not taken, as step skips them,
        # and so are rows with some values missing, as many in a row as step holds back
        keep = ~np.isnan(x).all(axis=1)
        keep[:first] = False
        rows = np.flatnonzero(keep)
        for run in np.split(rows, np.flatnonzero(complete[rows])[1:]):
            run = run[1:]  # a complete row, then the rows with some values missing up to the next one
            if len(run):
                keep[run[:max(self.min_window, int(keep[:run[0]].sum()))]] = False
        self._partial = len(run)  # the count step holds after the last complete row
        taken = np.flatnonzero(keep)
        x = fill_missing(x[taken])
        self._buf = np.empty((2 * self.max_window, x.shape[1]))
        self._buf[:len(x)] = x
        self._pos = np.empty(2 * self.max_window, dtype=np.int64)
        self._pos[:len(x)] = int(start) + taken
        self._bridged = np.zeros(2 * self.max_window, dtype=bool)
        self._lo, self._hi = 0, len(x)
        self._start = int(start) + first
        self._last = x[-1].copy()

    @property
    def window_length(self) -> int:
        """Samples in the window now."""
        return self._hi - self._lo

    def update(self, x) -> "SplitProfileDetector":
        """river drift-detector protocol: feed one sample; read :attr:`drift_detected` afterwards."""
        self.step(x)
        return self

    def step(self, x) -> Alarm | None:
        """Feed one sample (a number, or one value per channel; NaN = missing); the alarm it raised.

        A missing value is carried forward from the last sample taken. Until a sample with a value
        in every channel has come there is nothing to carry, and a sample with any value missing is
        skipped: it is counted (indices stay the stream's) but not taken into the window, as
        :func:`~ratiowatch.stream.detectors.offline.detect` leaves such rows out. (Filling the
        missing channel with 0.0 put a step into a channel that reads 1000 at its first sample.)
        A sample with every value missing is skipped alike at any time: carried forward, a gap is
        a run of one repeated value, which the split profile takes for a change where it starts
        and again where it ends (change-free N(0, 1) streams of 1,500 samples with 100 missing:
        10 alarms in 5 seeds, 1 without the gap). So is a sample with some channels missing, for
        as many samples in a row as the window holds rows (at least ``min_window``): carried
        forward, one channel's gap of 100 samples raised an alarm where it began in 10 of 10
        change-free streams of two N(0, 1) channels, and one where it ended in 8. A channel
        missing for longer is carried forward from then on, so that the detector does not go
        blind to the other channels for good; the run of one value is then reported as a change.
        Changes are still reported at the stream's indices. Once a calibration has found a period,
        the first sample after a gap gives back the gap's length modulo the period as the cycle
        before it, so the cycle keeps its phase (:meth:`_bridge_gap`); a change placed on such a
        sample is reported at the gap's end.

        Examples
        --------
        >>> det = SplitProfileDetector()
        >>> det.step([1.0, float("nan")]) is None, det.window_length
        (True, 0)
        >>> _ = det.step([1.0, 2.0]); _ = det.step([1.5, float("nan")])
        >>> det.window_length, det.n_seen
        (1, 3)
        """
        v = self._row(x)
        self.n_seen += 1
        self._drift_detected = False
        missing = v is None or np.isnan(v).any()
        if missing and (v is None or self._last is None or np.isnan(v).all()):
            if self._buf is None:  # no sample with every channel yet: the gap cannot be filled
                self._start = self.n_seen
            return None  # else every value is missing: counted, not taken
        if missing:  # some channels missing, after a row was taken: held back, then carried forward
            self._partial += 1
            if self._partial <= self._partial_span():
                return None  # held back: counted, not taken, as a gap of every channel
            v = np.where(np.isnan(v), self._last, v)
        else:
            self._partial = 0
        if self._buf is None:
            self._buf = np.empty((2 * self.max_window, v.size))
            self._pos = np.empty(2 * self.max_window, dtype=np.int64)
            self._bridged = np.zeros(2 * self.max_window, dtype=bool)
        self._last = v
        self._bridge_gap()
        self._append(v, self.n_seen - 1)
        size = self._hi - self._lo
        if size < self.min_window:
            return None
        if self._cal is None or size > self._cal.serves_until or (
                size == self.max_window and self._since_cal >= self.max_window // 2):
            self._calibrate()
        if self._since_test >= self._spacing(size):
            return self._test()
        return None

    def _partial_span(self) -> int:
        """How many samples in a row with some channels missing are held back (see :meth:`step`):
        as many as the window holds rows, and at least ``min_window``. A shorter gap of one channel
        leaves no run of one value in the window; a longer one cannot keep the detector from the
        other channels for more than a window's length."""
        return max(self.min_window, self._hi - self._lo)

    def _append(self, v: np.ndarray, pos: int, bridged: bool = False) -> None:
        """Take row ``v`` (input index ``pos``) into the window, which slides beyond ``max_window``."""
        if self._hi == self._buf.shape[0]:  # compact: the window moves to the front
            n = self._hi - self._lo
            self._buf[:n] = self._buf[self._lo:self._hi]
            self._pos[:n] = self._pos[self._lo:self._hi]
            self._bridged[:n] = self._bridged[self._lo:self._hi]
            self._lo, self._hi = 0, n
        self._buf[self._hi] = v
        self._pos[self._hi] = pos
        self._bridged[self._hi] = bridged
        self._hi += 1
        if self._hi - self._lo > self.max_window:
            self._lo += 1
            self._start = int(self._pos[self._lo])
        self._since_test += 1
        self._since_cal += 1

    def _bridge_gap(self) -> None:
        """Before the first sample after a gap of a periodic window, give back the gap's length
        modulo the period as the cycle before it, so the cycle keeps its phase
        (:func:`~ratiowatch.stream.series.preprocess.bridge_periodic_gaps`; a gap of 37 samples
        in a cycle of 24 raised an alarm at the gap in 8 of 8 streams). The period is the
        calibration's; a window without one, or with less than a period of rows, leaves the gap
        out whole. The rows given back take the gap's last input indices, and a change placed on
        one is reported at the sample after the gap."""
        cal = self._cal
        if cal is None or not cal.period or self._hi - self._lo < cal.period:
            return
        back = (self.n_seen - 2 - int(self._pos[self._hi - 1])) % cal.period
        for j in range(back):  # fewer than a period of rows, each copied from a period before
            self._append(self._buf[self._hi - cal.period].copy(), self.n_seen - 1 - back + j, bridged=True)

    def _spacing(self, size: int) -> int:
        return max(1, size // self.tests_per_window)

    # -- calibration and test ----------------------------------------------------------------
    def _window(self, w: np.ndarray | None = None) -> np.ndarray:
        """The window (or ``w``, rows of it) scaled and z-normalised per channel."""
        w = self._buf[self._lo:self._hi] if w is None else w
        return standardise_columns(clip_unrepresentable(w))  # an error code such as 9.9e37 would round the rest away

    def _calibrate(self) -> None:
        w = self._window()
        size = w.shape[0]
        serves = self.max_window if size >= self.max_window / LADDER else max(size + 1, int(size * LADDER))
        width, period = subsequence_width(w)
        prof, width = build_profile(serves, width, period, self._profile_cfg, w.shape[1])
        rng = np.random.default_rng([self.seed, self._n_cal])
        # the tests this threshold serves are spaced by at least the spacing at the current length
        level = min(0.5, self.false_alarm_rate * self._spacing(size))
        cycle, cycle_threshold = self._cycle_null(w, prof, period, serves, level / 2)
        if cycle is not None:  # two nulls, each at half the level (Bonferroni)
            level /= 2
        # the null is fitted to the part of the window that the tests have already seen (the window
        # at the previous calibration): a change among the newest samples would otherwise become
        # part of the null (an AR fit across a level shift is nearly a random walk) and the
        # threshold would grow with the change's own evidence
        fit = w if self._fresh else w[:max(self.min_window, math.ceil(size / LADDER))]
        model = null_fit(fit, self.max_order, robust_line=self.robust_line)
        maxima = np.array([prof.maximum(z) for z in ar_surrogates(fit, rng, self.n_null, self.max_order,
                                                                   length=serves, fit=model)])
        # a channel that held one value in those rows gives the null no noise to draw from: any
        # departure would pass its threshold, and the tests weigh departures themselves (_held_view)
        raw = self._buf[self._lo:self._lo + fit.shape[0]]
        held = tuple((int(c), float(raw[0, c])) for c in np.flatnonzero((raw == raw[0]).all(axis=0)))
        n_fit = fit.shape[0]
        fit_end = int(self._pos[self._lo + n_fit]) if n_fit < size else int(self._pos[self._hi - 1]) + 1
        self._cal = _Calibration(prof, gumbel_threshold(maxima, level), serves, width, period, cycle,
                                 cycle_threshold, held, n_fit, fit_end)
        self.threshold = self._cal.threshold
        self._n_cal += 1
        self._since_cal = 0
        self._fresh = False

    def _cycle_profile(self, prof, period: int, serves: int):
        """The cycle null's profile for windows up to ``serves`` samples, or None where it does not apply."""
        if not (self.cycle_permutation and period and self._buf.shape[1] == 1):
            return None
        finest = permutation_profile(prof, serves, period)
        return None if finest is None else block_profile(finest, period)

    def _cycle_null(self, w: np.ndarray, prof, period: int, serves: int, level: float):
        """(profile, threshold) of the cycle null at ``level``, or (None, inf) where it does not apply.

        Unlike the AR null it is drawn from the whole window: a permutation of a window whose newest
        samples hold a change mixes the two regimes rather than turning into a random walk, and the
        older part alone rarely holds the 16 cycles the test needs (change suite, seeds 0-3: level,
        frequency and shape changes inside a cycle found within two windows 2 / 4 / 4 of 8 times
        with the older part, 8 / 8 / 8 with the whole window; docs/experiments.md).
        """
        cycle = self._cycle_profile(prof, period, serves)
        if cycle is None or not applies(w.shape[0], cycle, period):
            return None, math.inf
        # the draws are rows of this window on its own kernel, and every test until the next
        # calibration keeps that kernel. With a kernel fitted afresh to each tested window, the
        # statistic also moved with the kernel: a clean sine's (period 12) width was 0.03 at 4,779
        # samples against 2.03 at 4,770, and such sines got 1.5 false alarms per 10,000 samples at
        # T = 10,000 (0.5 with the kept kernel; docs/experiments.md, S11)
        cycle = cycle.with_kernel_of(w)
        rng = np.random.default_rng([self.seed, self._n_cal, 1])  # the AR draws stay as without it
        maxima = window_null_maxima(w, cycle, period, CYCLE_DRAWS, rng)
        if maxima is None:
            return None, math.inf
        return cycle, gumbel_threshold(maxima, level)

    def _held_view(self, level: float) -> np.ndarray:
        """The window with plausible departures from a held value put back to that value.

        A channel that held one value through the rows its null was fitted to has surrogates that
        never leave it, so one departure (a spike in a stuck reading, the first event of a sparse
        count) would pass any threshold drawn from them. Such departures are weighed by the rule of
        succession instead (:func:`departures_plausible`); while they are as few as a change-free
        stream gives, the test does not see them. A reading that comes back to life departs in
        most new samples and is kept. On sparse event counts (Poisson rates 0.001-0.01, 5,000
        samples) the first event was reported as a change in 10 of 15 streams without this.
        """
        cal = self._cal
        raw = self._buf[self._lo:self._hi]
        if not cal.held:
            return raw
        # the window's rows from fit_end on (rows, not stream indices: a gap adds none), and the
        # samples between fit_end and the window's start if it slid past fit_end
        before = int(np.searchsorted(self._pos[self._lo:self._hi], cal.fit_end))
        rows = max(1, raw.shape[0] - before + max(0, self._start - cal.fit_end))
        out = raw
        for c, value in cal.held:
            away = raw[:, c] != value
            if away.any() and departures_plausible(int(away.sum()), rows, cal.n_fit, level):
                out = raw.copy() if out is raw else out
                out[away, c] = value
        return out

    def _test(self) -> Alarm | None:
        self._since_test = 0
        level = min(0.5, self.false_alarm_rate * self._spacing(self.window_length))
        w = self._window(self._held_view(level))
        # the statistic is the grid maximum; the split is refined only when it passes (best()
        # scores the grid again, the same numbers, then the splits around its best)
        cal = self._cal
        stat = cal.profile.maximum(w)
        self.score = stat
        prof, threshold = cal.profile, cal.threshold
        if not stat > threshold and cal.cycle is not None and cal.cycle.min_length() <= w.shape[0]:
            prof, threshold = cal.cycle, cal.cycle_threshold
            stat = prof.maximum(w)
        if not stat > threshold:
            return None
        if prof is cal.profile:
            stat, split = prof.best(w)
        else:  # the cycle null's splits leave a whole block on each side, so they cannot reach a
            # change among the newest rows, the one just seen: the same rows place it without that bound
            split = replace(prof, min_rows=0).best(w)[1]
        if split < 0:
            return None
        # a clean level shift near the split is the change's row (offline.at_level_shift): the
        # window restarts there, with no sample of the old level left at its start
        shifts = {k for ks in remove_level_shifts(w, self.max_order, level)[3] for k in ks}
        split = at_level_shift(split, sorted(shifts), self._cal.profile)
        row = self._lo + split
        while self._bridged[row]:  # a row given back from a gap: the change is the gap's end
            row += 1
        change = int(self._pos[row])  # the stream's index of the row, across gaps
        alarm = Alarm(change_index=int(change), alarm_index=self.n_seen - 1, score=float(stat),
                      threshold=float(threshold))
        self.last_alarm = alarm
        self._drift_detected = True
        # the window restarts at the change: what follows it is the new segment (rows given back
        # before it were copied from the cycle before the gap, the old segment's)
        self._lo = row
        self._start = change
        self._cal = None
        self._fresh = True
        return alarm

    # -- checkpoints -------------------------------------------------------------------------
    def _params(self) -> dict:
        return {"false_alarm_rate": self.false_alarm_rate, "min_window": self.min_window,
                "max_window": self.max_window, "tests_per_window": self.tests_per_window,
                "n_null": self.n_null, "max_order": self.max_order, "cycle_permutation": self.cycle_permutation,
                "robust_line": self.robust_line, "seed": self.seed,
                **{k: v for k, v in self._profile_cfg.items() if k != "widths"}}

    def to_state(self) -> dict:
        """The detector as ``{"meta": JSON, "window": array}`` (no pickle); :meth:`from_state` restores it."""
        cal = self._cal
        meta = {"version": STATE_VERSION, "params": self._params(), "start": self._start,
                "last": None if self._last is None else self._last.tolist(),
                "since_test": self._since_test, "since_cal": self._since_cal, "n_cal": self._n_cal,
                "fresh": self._fresh,
                "n_seen": self.n_seen, "drift": self.drift_detected, "score": self.score,
                "threshold": self.threshold,
                "last_alarm": None if self.last_alarm is None else self.last_alarm.to_dict(),
                "calibration": None if cal is None else {
                    "threshold": cal.threshold, "serves": cal.serves_until, "width": cal.width, "period": cal.period,
                    "cycle_threshold": None if cal.cycle is None else cal.cycle_threshold,
                    "cycle_kernel": None if cal.cycle is None else cal.cycle.kernel.to_state(),
                    "held": [list(h) for h in cal.held], "n_fit": cal.n_fit, "fit_end": cal.fit_end},
                "channels": None if self._buf is None else int(self._buf.shape[1])}
        if self._buf is not None:  # the stream's gaps between the window's rows (kept only if any)
            pos = self._pos[self._lo:self._hi]
            after = np.flatnonzero(np.diff(pos) > 1)
            if after.size:
                meta["gaps"] = [[int(pos[i]) + 1, int(pos[i + 1] - pos[i]) - 1] for i in after]
            bridged = self._bridged[self._lo:self._hi]
            if bridged.any():  # the rows given back from gaps, by input index
                meta["bridged"] = pos[bridged].tolist()
            if self._partial:  # samples with some values missing since the last complete one
                meta["partial"] = self._partial
        window = np.zeros((0, 0)) if self._buf is None else self._buf[self._lo:self._hi].copy()
        return {"meta": json.dumps(meta), "window": window}

    @classmethod
    def from_state(cls, state: Mapping) -> "SplitProfileDetector":
        """Restore a detector saved by :meth:`to_state`; it continues exactly where it stopped.

        Another class's checkpoint, or a damaged one (a count out of its range, a flag that is not
        true or false, a window or last sample holding NaN or infinity, gaps or given-back rows
        that are not the window's), is refused with a ``ValueError`` that names the entry.
        """
        state, meta = open_checkpoint(state, cls.__name__)
        version = state_version(meta, cls.__name__, readable=(1, 2, 3, STATE_VERSION))
        # another class's checkpoint (of a readable version) records parameters this one does not take
        params = checkpoint_params(meta, cls)
        # version 1 predates the cycle null: such a detector ran without it and continues so.
        # Version 2 did not keep the cycle null's kernel: it restores without the null until
        # its next calibration. A state saved before the robust line ran without it and continues so
        obj = cls(**{"cycle_permutation": version > 1, "robust_line": False, **params})
        what, where = checkpoint_class(state, cls.__name__), entry_name(state, "meta")

        def count(value, name, low=0, high=None):
            return state_range(value, name, what, low, high, meta=where)

        def real(value, name):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise damaged_state(what, name, f"must be a number; got {value!r}", where)
            return float(value)

        def flag(name):
            return state_flag(meta[name], name, what, where)

        def int_list(value, name, problem):
            if not (isinstance(value, list) and all(isinstance(e, int) and not isinstance(e, bool) for e in value)):
                raise damaged_state(what, name, f"must be {problem}; got {value!r}", where)
            return value

        n_seen = count(meta["n_seen"], "n_seen")
        # the window's first sample: the next one while none is taken (skipped samples, a primed
        # stream without a complete row), else a sample already seen
        start = count(meta["start"], "start", 0, n_seen + 1)
        channels = meta["channels"]
        if channels is not None:
            channels = count(channels, "channels", 1)
            name = entry_name(state, "window")
            window = np.asarray(state["window"])
            if window.dtype.kind not in "fiu" or window.size % channels or window.size > channels * obj.max_window:
                raise damaged_state(what, name,
                                    f"must hold at most max_window = {obj.max_window} rows of {channels} channel "
                                    f"value(s); got dtype {window.dtype}, shape {window.shape}")
            window = window.astype(np.float64).reshape(-1, channels)
            if not np.isfinite(window).all():  # missing values are carried forward or skipped before the window
                raise damaged_state(what, name, "holds NaN or infinite values")
            obj._buf = np.empty((2 * obj.max_window, window.shape[1]))
            obj._buf[:window.shape[0]] = window
            obj._lo, obj._hi = 0, window.shape[0]
            # rows follow one another in the stream but across the gaps recorded (none in a
            # checkpoint of a stream without one, or of a version that took gaps into the window)
            gaps = meta.get("gaps", [])
            problem = "a list of [first index, length] pairs of increasing gaps between the window's rows"
            if not isinstance(gaps, list) or not all(isinstance(g, list) and len(g) == 2 for g in gaps):
                raise damaged_state(what, "gaps", f"must be {problem}; got {gaps!r}", where)
            for g in gaps:
                int_list(g, "gaps", problem)
            pos = start + np.arange(window.shape[0], dtype=np.int64)
            for at, length in gaps:
                if not (start < at < n_seen and length >= 1):
                    raise damaged_state(what, "gaps", f"must be {problem}, within [start, n_seen) = "
                                        f"[{start}, {n_seen}); got {gaps!r}", where)
                pos[pos >= at] += length
            # each gap follows a row and is followed by one: they are those of the rows' indices
            after = np.flatnonzero(np.diff(pos) > 1)
            if [[int(pos[i]) + 1, int(pos[i + 1] - pos[i]) - 1] for i in after] != gaps:
                raise damaged_state(what, "gaps", f"must be {problem}; got {gaps!r}", where)
            if pos.size and pos[-1] >= n_seen:
                raise damaged_state(what, "n_seen", f"is {n_seen}, but the window's last row is sample "
                                    f"{int(pos[-1])}", where)
            obj._pos = np.empty(2 * obj.max_window, dtype=np.int64)
            obj._pos[:window.shape[0]] = pos
            bridged = int_list(meta.get("bridged", []), "bridged", "a list of the input indices of window rows")
            if not np.isin(np.asarray(bridged, dtype=np.int64), pos).all():
                raise damaged_state(what, "bridged", f"must be the input indices of window rows "
                                    f"(samples {start} to {int(pos[-1]) if pos.size else start}); got {bridged!r}",
                                    where)
            obj._bridged = np.zeros(2 * obj.max_window, dtype=bool)
            obj._bridged[:window.shape[0]] = np.isin(pos, np.asarray(bridged, dtype=np.int64))
            obj._partial = count(meta.get("partial", 0), "partial", 0, n_seen - start + 1)
        else:
            for name in ("gaps", "bridged", "partial"):
                if meta.get(name):
                    raise damaged_state(what, name, f"is {meta[name]!r}, but the checkpoint holds no window", where)
        obj._start, obj.n_seen = start, n_seen
        last = meta["last"]
        if last is not None:
            if channels is None or not isinstance(last, list) or len(last) != channels or not all(
                    isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in last):
                raise damaged_state(what, "last", f"must be the last sample taken: {channels or 0} finite "
                                    f"value(s); got {last!r}", where)
            obj._last = np.asarray(last, dtype=np.float64)
        obj._since_test, obj._since_cal = count(meta["since_test"], "since_test"), count(meta["since_cal"], "since_cal")
        obj._n_cal = count(meta["n_cal"], "n_cal")
        obj._fresh = flag("fresh")
        obj._drift_detected = flag("drift")
        obj.score, obj.threshold = real(meta["score"], "score"), real(meta["threshold"], "threshold")
        if meta["last_alarm"] is not None:
            obj.last_alarm = _alarm_from(meta["last_alarm"], what)
        c = meta["calibration"]
        if c is not None:  # the profile is a function of (length served, width, period, channels); a
            # periodic window of several channels saved before they were scored one by one keeps
            # its joint threshold until its next calibration
            if not isinstance(c, Mapping):
                raise damaged_state(what, "calibration", f"must be a mapping; got {c!r}", where)
            serves, period = count(c["serves"], "calibration.serves", 1), count(c["period"], "calibration.period")
            prof, width = build_profile(serves, count(c["width"], "calibration.width", 1), period, obj._profile_cfg,
                                        channels or 1)
            cycle_threshold, kernel = c.get("cycle_threshold"), c.get("cycle_kernel")
            cycle = None if cycle_threshold is None or kernel is None else obj._cycle_profile(prof, period, serves)
            if cycle is not None:
                cycle = replace(cycle, kernel=Kernel.from_state(kernel))
            # a state saved before held values were weighed has none until its next calibration
            held = c.get("held", [])
            if not (isinstance(held, list) and all(
                    isinstance(h, list) and len(h) == 2 and isinstance(h[0], int) and not isinstance(h[0], bool)
                    and 0 <= h[0] < (channels or 0) and isinstance(h[1], (int, float))
                    and not isinstance(h[1], bool) and math.isfinite(h[1]) for h in held)):
                raise damaged_state(what, "calibration.held", f"must be a list of [channel, value] pairs; got "
                                    f"{held!r}", where)
            held = tuple((int(ch), float(v)) for ch, v in held)
            obj._cal = _Calibration(prof, real(c["threshold"], "calibration.threshold"), serves, width, period, cycle,
                                    math.inf if cycle is None else real(cycle_threshold, "calibration.cycle_threshold"),
                                    held, count(c.get("n_fit", 0), "calibration.n_fit"),
                                    count(c.get("fit_end", 0), "calibration.fit_end"))
        return obj

"""The change detector's threshold: a pooled null of its score, re-estimated as the stream goes on.

:class:`NullCalibrator` owns everything a calibration keeps between calls: the pool of null scores
of the last :data:`NULL_POOL` calibrations (neighbouring windows share almost all their samples,
so pooling removes Monte-Carlo noise from the threshold for free), the threshold taken from it, and,
for multichannel streams under the AR null, the correlation view's pool and per-pair thresholds and
the channel view's pool and per-channel thresholds, and for windows of first differences the level
view's pool and thresholds.
:class:`~ratiowatch.stream.detectors.changepoint.ChangePointDetector` decides *when* to calibrate and what
data the null is drawn from; this module decides *how*.

Two nulls (the detector's ``null`` argument):

* ``"permutation"``: block permutations of the pooled windows, scored with the windows' sigma and
  lambda (:func:`ratiowatch.stream.calibration.permutation.permutation_null_rulsif`); threshold from a moment-matched gamma
  tail (:func:`ratiowatch.stream.calibration.thresholds.gamma_threshold`). The offline replay's null.
* ``"ar"``: AR surrogates of the values behind the windows (:mod:`ratiowatch.stream.calibration.surrogate`); threshold from
  an exponential tail above the median (:func:`ratiowatch.stream.calibration.thresholds.exp_tail_threshold`), each direction at
  half the rate. The streaming default (see :meth:`NullCalibrator.calibrate_ar` for why each piece).

Examples
--------
>>> import numpy as np
>>> cal = NullCalibrator("ar", method="rulsif", alpha=0.1, symmetric=True, n_perm=10,
...                      false_alarm_rate=1e-4, k=3)
>>> values = np.random.default_rng(0).normal(size=(60, 1))
>>> cal.calibrate_ar(values, n=20, sigma=1.0, lam=0.1, rng=np.random.default_rng(1))
>>> cal.pool.shape, bool(cal.threshold > 0)
((8, 20), True)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import numpy as np

from ratiowatch.stream.calibration.thresholds import (exp_tail_threshold, gamma_threshold, rounding_margin,
                                                     top_draws_floor)
from ratiowatch.stream.calibration.permutation import permutation_null_generic, permutation_null_rulsif
from ratiowatch.stream.calibration.channels import surrogate_rank_diffs
from ratiowatch.stream.calibration.correlation import normal_scores, surrogate_zdiff
from ratiowatch.stream.calibration.levels import surrogate_level_diffs, unit_root_rejected
from ratiowatch.stream.calibration.split_test import clip_gross
from ratiowatch.core.kliep_window import KL_NO_OVERLAP, NoKernelMassError
from ratiowatch.stream.series.embedding import embed
from ratiowatch.core.validation import checkpoint_class, damaged_state, state_array, state_flag, state_range
from ratiowatch.stream.calibration.surrogate import (add_trend, detrend, fit_ar_channels, fit_ar_models,
                                                     line_and_step, shrink_slopes, simulate_ar,
                                                     surrogate_null_rulsif)

#: calibrations pooled into one null sample
NULL_POOL = 8
#: values an AR-surrogate null is fitted to, at least (10 per coefficient of AR(5))
AR_MIN_VALUES = 50
#: share of the false-alarm rate given to the correlation and channel views when either is on: split
#: equally between the views that are on, and within a view over its statistics (one per channel
#: pair; two per channel)
VIEW_SHARE = 0.5
#: windows below this many subsequences leave the correlation view silent: Fisher z's tails are then
#: heavier than normal (i.i.d. pairs: the normal 1e-4 quantile is exceeded 4.8x as often at n = 6,
#: 2.3x at 12, 1.4x at 24, 1.1x at 50). The channel view has no such floor: a rank statistic of
#: exchangeable windows is bounded, with tails lighter than the normal's at every n, so the
#: normal-shaped threshold is conservative (at n = 6 no split can reach it).
CORR_MIN_N = 20


class NullCalibrator:
    """Pooled null of the two-window change score and the threshold it gives.

    Parameters
    ----------
    null : {"ar", "permutation"}
        Which null (see the module docstring).
    method : {"rulsif", "ulsif", "kliep", "lsdd"}
        The detector's estimator (RuLSIF / uLSIF null scores are computed from one Gram matrix;
        the other methods score each null draw with a fresh window state).
    alpha : float
        RuLSIF mixture weight (ignored unless ``method="rulsif"``).
    symmetric : bool
        Whether the detector scores both directions.
    n_perm : int
        Null draws per calibration. Under the AR null (and for its permutation floor) a new
        window size starts with ``NULL_POOL x n_perm`` of them; the permutation null fills its pool
        over its first ``NULL_POOL`` calibrations (filling it at once changed neither the false
        alarms on stationary AR(1) series nor TCPD beyond its seed spread).
    false_alarm_rate : float
        Target probability that a step's score exceeds the threshold under no change.
    k : int
        Subsequence length (the AR surrogates are embedded as the detector's windows).

    Attributes
    ----------
    threshold : float
        Threshold of the kernel score (NaN until a calibration could set one).
    corr_thresholds : ndarray or None
        Per-pair thresholds of the correlation view's |Fisher-z difference| (None while it is off).
    channel_thresholds : ndarray or None
        Thresholds of the channel view's |rank statistics| (m location, then m spread; None while
        it is off).
    level_thresholds : ndarray or None
        Per-channel thresholds of the level view's |mean-level difference| (None while it is off).
    pool, corr_pool, channel_pool, level_pool : ndarray
        The pooled null draws (kernel scores; signed Fisher-z differences, signed rank statistics
        and mean-level differences, or None).
    degenerate : bool
        Whether the threshold in force came from a constant null (every pooled draw the same
        number: the values it was drawn from were constant).
    ar_threshold, floor_threshold, floor_pool : float, float, ndarray
        Under the AR null: the surrogates' threshold, the permutation floor's (NaN unless the last
        calibration or :meth:`confirm_with_floor` took it) and the floor's pooled draws (see
        :meth:`calibrate_ar`).
    kernel_rate : float
        The per-direction exceedance rate the kernel score's threshold is set at (the AR null's
        share of ``false_alarm_rate``; see :meth:`calibrate_ar`).
    log_tail : bool
        Whether the AR null's tail is fitted to ``log(1 + score)`` (a Pareto tail of the score):
        for uLSIF (RuLSIF with ``alpha = 0``). RuLSIF's relative ratio is at most ``1 / alpha``, and
        its PE-hat is bounded; uLSIF's ratio is not, and with an exponential tail fitted to its
        scores the streaming null suite raised 2.6 false alarms per 10,000 samples (10-13 at lengths
        100-600), with the tail in logs 0.12 (docs/experiments.md, "the two-window detector's
        estimators").
    """

    def __init__(self, null: str, method: str, alpha: float, symmetric: bool, n_perm: int,
                 false_alarm_rate: float, k: int, robust_line: bool = False):
        if null not in ("ar", "permutation"):
            raise ValueError(f"null must be 'ar' or 'permutation'; got {null!r}")
        self.null, self.method, self.symmetric = null, method, bool(symmetric)
        self.robust_line = bool(robust_line)
        self.alpha = float(alpha) if method == "rulsif" else 0.0
        # uLSIF (alpha = 0): the ratio is unbounded, and so is the tail of its PE-hat
        self.log_tail = method in ("rulsif", "ulsif") and self.alpha == 0.0
        self.n_perm, self.false_alarm_rate, self.k = int(n_perm), float(false_alarm_rate), int(k)
        # the AR null pools both directions' scores of each surrogate (see calibrate_ar)
        width = self.n_perm * (2 if null == "ar" and self.symmetric else 1)
        self.pool = np.zeros((NULL_POOL, width))
        self.pool_count = 0
        self.threshold = math.nan
        # the AR null's permutation floor (see calibrate_ar): both directions of each re-split
        self.floor_pool = np.zeros((NULL_POOL, self.n_perm * (2 if self.symmetric else 1)))
        self.floor_count = 0
        self.ar_threshold = math.nan
        self.floor_threshold = math.nan
        self.kernel_rate = self.false_alarm_rate / 2 if self.symmetric and null == "ar" else self.false_alarm_rate
        self.degenerate = False  # every pooled null draw the same number (see the detector's step)
        self.corr_pool: np.ndarray | None = None
        self.corr_count = 0
        self.corr_thresholds: np.ndarray | None = None
        self.channel_pool: np.ndarray | None = None
        self.channel_count = 0
        self.channel_thresholds: np.ndarray | None = None
        self.level_pool: np.ndarray | None = None
        self.level_count = 0
        self.level_thresholds: np.ndarray | None = None

    def restart(self) -> None:
        """A new window size has a new null: the next calibration refills every pool."""
        self.pool_count = 0
        self.corr_count = 0
        self.channel_count = 0
        self.level_count = 0
        self.floor_count = 0

    def _add_to_pool(self, null: np.ndarray) -> None:
        self.pool_count = _pool_in(self.pool, self.pool_count, null)

    # ------------------------------------------------------------------ permutation null
    def calibrate_permutation(self, win, n: int, block: int, rng: np.random.Generator,
                              make_state: Callable[[], object]) -> None:
        """Threshold = upper ``false_alarm_rate`` quantile of the pooled permutation null of the score.

        ``win`` is the detector's window state (its Gram matrix is reused when it keeps one);
        ``make_state`` builds an empty state of the same kind (methods without a Gram shortcut).
        """
        if self.method in ("rulsif", "ulsif"):
            null = permutation_null_rulsif(None, n, win.sigma, win.lam, self.alpha, self.symmetric,
                                           self.n_perm, rng, block=block, gram=win.gram())
        else:
            pooled = np.vstack([win.past(), win.current()])
            null = permutation_null_generic(pooled, n, make_state, self.symmetric, self.n_perm, rng, block=block)
        self.pool[self.pool_count % NULL_POOL] = null
        self.pool_count += 1
        filled = self.pool[: min(self.pool_count, NULL_POOL)]
        self.threshold = gamma_threshold(filled.ravel(), self.false_alarm_rate)
        self.degenerate = _constant(filled)

    # ------------------------------------------------------------------ AR-surrogate null
    def calibrate_ar(self, values: np.ndarray, n: int, sigma: float, lam: float, rng: np.random.Generator,
                     make_state: Callable[[], object] | None = None, corr_view: bool = False,
                     channel_view: bool = False, win=None, block: int = 1,
                     trend_values: np.ndarray | None = None, level_view: bool = False,
                     level_values: np.ndarray | None = None) -> None:
        """Threshold from the AR-surrogate null of ``values``, one per direction.

        ``values`` (T, channels) are the preprocessed, scaled values the AR model is fitted to: the
        detector passes the newest ``max(n + k, AR_MIN_VALUES)`` values *before* its current window
        (a change entering the current window must not widen its own null: fitted on everything, a
        level shift looks like a unit root and a 5-sigma shift went unseen). With fewer than
        ``AR_MIN_VALUES`` there is no threshold (so no alarm) and the pools stay empty.

        Why each piece (measured on stationary AR(2), n = 50; docs/experiments.md, synthetic specifications):

        * surrogates, not permutations: a permutation destroys the serial dependence and its null
          is too narrow in the tail (99.9 % quantile 0.99 vs the score's own 1.14; surrogates 1.23);
        * the max of the two directions, not their sum: a variance decrease shows in
          ``PE(current || past)`` only, and the sum adds the other direction's noise;
        * each direction at ``false_alarm_rate / 2`` (union bound for the max), on one pool holding
          both directions' surrogate scores: a stationary linear process is time-reversible, so both
          directions share one null, and pooling doubles the sample of the tail estimate;
        * an exponential tail above the median, with the predictive multiplier that accounts for
          the noise of its scale estimate (:func:`~ratiowatch.stream.calibration.thresholds.exp_tail_threshold`);
        * AR coefficients with their small-sample bias removed
          (:func:`~ratiowatch.stream.calibration.surrogate.debias_ar`): fitted to ~53 values, the
          coefficients are biased towards zero, the surrogates are less dependent than the data
          and the null too narrow (AR(1), phi = 0.5: 1.3 false alarms per 10,000 samples without
          the correction, 0.7 with it);
        * with ``win`` (the detector's window state), a **permutation floor**: the threshold is the
          larger of the surrogates' and the same rule applied to re-splits of the current windows
          (``block``-permutations, both directions pooled: swapping the windows swaps them). The
          values behind the windows can hold less than the process does -- 50 zeros of an event
          count, where the surrogates are constant and every isolated event looked like a change
          (9 alarms per 10,000 samples of Poisson(0.002) counts, nearly one per event) -- while a
          permutation re-split is exact for exchangeable windows whatever they hold. The detector
          asks for it only then (:attr:`degenerate` null, score above it): taken at every
          calibration it left the false alarms of stationary AR(2) and of AR(1) with t(3)
          innovations where they were and cost ~10 % of the throughput.

        * with ``trend_values`` (every held value before the current window, ending where ``values``
          ends), a **local linear trend**: a least-squares line is fitted to ``trend_values``, its
          slope is shrunk towards 0 by its own noise
          (:func:`~ratiowatch.stream.calibration.surrogate.shrink_slopes`; 0 for a channel whose
          ``values`` are constant), the AR model is fitted to ``values`` minus a line of that slope,
          and the line is added back over each surrogate's span, so the null holds the shift that a trend puts
          between the two windows (the offline split test fits its surrogates around a line for
          the same reason; a slope shrunk to 0 leaves the null as it was). Without it, ``0.01 t +
          N(0, 1)`` (half a noise sd between the window centres at n = 50) raised 15.4 false alarms
          per 10,000 samples of the synthetic null suite (lengths 15-10,000, seeds 0-9); with it
          0.6. The line comes from the longer stretch because its slope's noise is the price:
          fitted to the ~53 values of the AR model, unshrunk, it widened every null and the
          streaming change suite lost half its AR(1) mean shifts and variance changes (seeds 0-9);
          from the ~103 values and shrunk, 41 and 48 of 60 were found against 43 and 49 without a
          line (seeds 0-29; mean shifts 60 and correlation changes 53 of 60 either way).
        * the line is fitted jointly with **one level step** where a step is significant
          (:func:`~ratiowatch.stream.calibration.surrogate.line_and_step`), and its slope is that
          fit's: a level shift that has left the windows but not yet the stretch behind them
          would otherwise become the line's slope, and every surrogate would carry it. Fitted by a
          line alone, a 2-sd shift in the middle of the ~103 values raised the threshold sevenfold,
          for the eight calibrations it stays pooled (400 samples at n = 50): alternating mean
          shifts 250 samples apart were found 64 of 100 times within two windows (the last shift 3
          of 20), and 81 with the step (20 of 20); every other kind of the change suite moved by
          at most one, and the null suite's 45 false alarms stayed in the same cells (seeds 0-19
          and 0-9).
          The AR model is still fitted to the values as they are: also lifting the values
          before the step to the newest level gave the same changes, but 6 false alarms on
          sawtooth cycles (0 without), whose drops it took one at a time for shifts. A step may
          explain a slope away but never make one: of the two shrunk slopes, the line's and the
          joint fit's, the smaller is kept. On a short stretch a chance step and the line are
          nearly collinear (the demo's host-c: 0.049 per sample with a step at its 21st value,
          0.002 without; at sample 250 the threshold was 5.5 against 2.4, and its change went
          unseen).
        * with ``robust_line`` (the detector's option), the line and its step are fitted to
          ``trend_values`` with **gross values clipped**
          (:func:`~ratiowatch.stream.calibration.split_test.clip_gross`); the AR model is still
          fitted to ``values`` less that line. One value of 1e4 times the noise tilted the plain
          line by tens of noise sd over the stretch, every surrogate became a ramp, and a 2-sd
          step in AR(1) noise after such a value was found 13 of 20 times (16 without the value,
          16 with the robust line). A stretch without such values gets the same line.

        * the threshold is never below what the draws themselves allow
          (:func:`~ratiowatch.stream.calibration.thresholds.top_draws_floor`; with the pool's 160
          draws at 5e-5: their largest). :meth:`raise_to_top` enlarges the sample where the pool
          cannot see the null's top.

        ``corr_view``, ``channel_view``: also calibrate the correlation view and the channel view
        (m >= 2 channels, and n >= CORR_MIN_N for the correlation view); ``level_view``: the level
        view (the detector passes it when its windows hold first differences). Together they take
        ``VIEW_SHARE`` of the rate, each view an equal part of it, split over its statistics (see
        :meth:`_calibrate_corr`, :meth:`_calibrate_channels` and :meth:`_calibrate_levels`). The
        channel view's null comes from the kernel score's own surrogates (no further draws); the
        level view's too, unless ``level_values`` (the held levels before the windows) look
        stationary (:meth:`_level_surrogates`).
        """
        if values.shape[0] < AR_MIN_VALUES:
            self.threshold = math.nan
            self.corr_thresholds = self.channel_thresholds = None
            self.level_thresholds = None
            return
        count = self.n_perm * (NULL_POOL if self.pool_count == 0 else 1)
        fit_to, slopes = _around_trend(values, trend_values, self.robust_line)
        if self.method in ("rulsif", "ulsif"):
            null, sims = surrogate_null_rulsif(fit_to, n, self.k, sigma, lam, self.alpha, self.symmetric, count, rng,
                                               slopes=slopes, debias=True, start_from_data=True, return_sims=True)
        else:
            sims = simulate_ar(fit_ar_models(fit_to, rng=rng), 2 * n + self.k - 1, count, rng, start=fit_to)
            if slopes is not None:
                add_trend(sims, slopes)
            null = np.empty((count, 2))
            for i in range(count):
                st = make_state()
                st.push_many(embed(sims[i], self.k))
                try:
                    null[i] = st.scores()
                except NoKernelMassError:
                    # a surrogate spread beyond the kernel's reach at every pair (AR fitted around
                    # one gross value): windows sharing no kernel mass, as KLIEP scores them
                    null[i] = KL_NO_OVERLAP
            if not self.symmetric:
                null = null[:, :1]
        self._add_to_pool(null)
        rate = self.false_alarm_rate / 2 if self.symmetric else self.false_alarm_rate
        multi = values.shape[1] > 1
        corr_view, channel_view = corr_view and multi and n >= CORR_MIN_N, channel_view and multi
        level_view = bool(level_view)
        m = values.shape[1]
        if corr_view or channel_view or level_view:
            rate *= 1.0 - VIEW_SHARE
            share = self.false_alarm_rate * VIEW_SHARE / (int(corr_view) + int(channel_view) + int(level_view))
        if corr_view:
            self._calibrate_corr(values, n, rng, share / (m * (m - 1) // 2))
        else:
            self.corr_thresholds = None
        if channel_view:
            self._calibrate_channels(sims, n, share / (2 * m))
        else:
            self.channel_thresholds = None
        if level_view:
            self._calibrate_levels(self._level_surrogates(sims, level_values, n, count, rng), n, share / m,
                                   held=level_values)
        else:
            self.level_thresholds = None
        self.kernel_rate = rate
        self.ar_threshold = _ar_threshold(self.pool.ravel(), rate, self.log_tail)
        self.floor_threshold = math.nan if win is None else self._permutation_floor(win, n, block, rng, make_state,
                                                                                     rate)
        self.threshold = max(self.ar_threshold, self.floor_threshold) if win is not None else self.ar_threshold
        self.degenerate = _constant(self.pool) and (win is None or _constant(self.floor_pool))

    def raise_to_top(self, values: np.ndarray, n: int, sigma: float, lam: float, rng: np.random.Generator,
                     count: int, trend_values: np.ndarray | None = None) -> float:
        """Re-set the AR threshold from the pool and ``count`` more surrogates of ``values``; return it.

        Where the score is discrete and bounded, its top can come far more often than the rate and
        still be missing from the pool's 160 draws: six-subsequence windows of event counts that are
        mostly 0 reach it when a pair's events fall on one side, in 1-2 % of steps, and the
        exponential tail of 160 draws put the 5e-5 quantile below it. A larger sample shows the
        top, and :func:`~ratiowatch.stream.calibration.thresholds.top_draws_floor` keeps the
        threshold from going below it. ``values`` and ``trend_values`` are as in
        :meth:`calibrate_ar` (the values behind the windows as they are now); the surrogates are
        not pooled. The detector asks for this at the first exceedance after a calibration, where
        most values are one value and the windows are too small for their re-splits to certify the
        rate. RuLSIF and uLSIF only; otherwise, and before any AR threshold, nothing changes.
        """
        values = np.asarray(values, dtype=np.float64)
        if (count < 1 or self.method not in ("rulsif", "ulsif") or not math.isfinite(self.ar_threshold)
                or values.shape[0] < AR_MIN_VALUES):
            return self.threshold
        fit_to, slopes = _around_trend(values, trend_values, self.robust_line)
        top = surrogate_null_rulsif(fit_to, n, self.k, sigma, lam, self.alpha, self.symmetric, int(count), rng,
                                    slopes=slopes, debias=True, start_from_data=True)
        draws = np.concatenate([self.pool.ravel(), top.ravel()])
        self.ar_threshold = _ar_threshold(draws, self.kernel_rate, self.log_tail)
        floor = self.floor_threshold
        self.threshold = self.ar_threshold if math.isnan(floor) else max(self.ar_threshold, floor)
        return self.threshold

    def confirm_with_floor(self, win, n: int, block: int, rng: np.random.Generator,
                           make_state: Callable[[], object] | None = None, resolves: bool = True) -> float:
        """Raise the threshold in force to the permutation floor of the windows as they are; return it.

        The AR null's surrogates are a linear filter of resampled residuals, fitted to the ~50
        values behind the windows. Values with an atom (event counts that are mostly 0) hold a
        handful of events there, which the filter smears, and a cluster of events in the current
        window is then far out in the surrogates' tail but ordinary among the windows' own
        re-splits. A re-split of exchangeable windows is an exact null whatever the values are,
        so the detector asks for this floor (fresh draws of these windows, at the kernel score's
        rate) where most values behind the windows are one value and the score is above the AR
        threshold but not above the floor in force (see the detector's
        ``_confirm_by_permutation``).
        ``resolves=False`` (windows with fewer distinct re-splits than ``1 / rate``): the floor is
        the largest drawn re-split's score instead of an extrapolated tail; the windows' own
        split, among the draws, passes at a tie unless more re-splits reach the top than it and
        its mirror explain (:meth:`_top_of_re_splits`). Without an AR threshold yet, the
        threshold is left as it is.
        """
        if not math.isfinite(self.ar_threshold):
            return self.threshold
        self.floor_count = 0  # these windows' own re-splits, not a pool of older ones
        self._draw_floor(win, n, block, rng, make_state)
        if resolves:
            self.floor_threshold = exp_tail_threshold(self.floor_pool.ravel(), self.kernel_rate)
        else:  # too few distinct splits for the rate: the split must beat every draw
            self.floor_threshold = self._top_of_re_splits(n, block)
        self.threshold = max(self.ar_threshold, self.floor_threshold)
        return self.threshold

    def _top_of_re_splits(self, n: int, block: int) -> float:
        """The floor of windows with too few distinct re-splits: their largest drawn score, which
        the windows' own split (drawn itself now and then) ties.

        A tie passes where no more re-splits reach the top than the own split and its mirror
        explain: ``2 / C(m, m / 2)`` of the draws for ``m`` blocks, with three standard deviations
        and one draw to spare. The floor then stands twice the rounding margin of
        :func:`~ratiowatch.stream.calibration.thresholds.exceeds` below the top (at 1 - 1e-9 of
        it, the two cancelled, and a tie passed or not by the last bit of the kernel sums, which
        differ between machines). Where more re-splits reach it, the windows' split is one of many
        that score alike (a step in windows of two values: half the re-splits put its rows on the
        same side), no more extreme than they are, and a tie does not pass.
        """
        width = 2 if self.symmetric else 1
        top = float(self.floor_pool.max())
        below = top - 2.0 * rounding_margin(top)
        at_top = int((self.floor_pool.reshape(-1, width).max(axis=1) >= below).sum())
        draws = self.floor_pool.size // width
        blocks = -(-2 * int(n) // max(1, int(block)))
        p = min(1.0, width / math.comb(blocks, blocks // 2))
        expected = draws * p
        return below if at_top <= expected + 3.0 * math.sqrt(expected * (1.0 - p)) + 1.0 else top

    def _permutation_floor(self, win, n: int, block: int, rng: np.random.Generator,
                           make_state: Callable[[], object] | None, rate: float) -> float:
        """The AR threshold's floor: the rate's quantile of the windows' pooled permutation null."""
        self._draw_floor(win, n, block, rng, make_state)
        return exp_tail_threshold(self.floor_pool.ravel(), rate)

    def _draw_floor(self, win, n: int, block: int, rng: np.random.Generator,
                    make_state: Callable[[], object] | None) -> None:
        """Pool block re-splits of the windows (both directions each) into ``floor_pool``."""
        count = self.n_perm * (NULL_POOL if self.floor_count == 0 else 1)
        if self.method in ("rulsif", "ulsif"):
            null = permutation_null_rulsif(None, n, win.sigma, win.lam, self.alpha, self.symmetric, count, rng,
                                           block=block, gram=win.gram(), directions=True)
        else:
            pooled = np.vstack([win.past(), win.current()])
            null = permutation_null_generic(pooled, n, make_state, self.symmetric, count, rng, block=block,
                                            directions=True)
        self.floor_count = _pool_in(self.floor_pool, self.floor_count, null)

    def _calibrate_corr(self, values: np.ndarray, n: int, rng: np.random.Generator, q: float) -> None:
        """Correlation view: per-pair thresholds from AR surrogates of ``values``.

        The AR models are fitted with one order for all channels
        (:func:`~ratiowatch.stream.calibration.surrogate.fit_ar_channels`: channels fitted to different orders get
        different filters and the surrogates' correlation wanders; over seeds 4-123 of stationary
        bivariate AR(2) this brought the view's per-step exceedance from 7.9e-5 / 8.8e-5 to
        5.4e-5 / 4.8e-5 at innovation correlation 0 / 0.95, against its 5e-5 budget); the
        surrogates have ``2 n`` samples each, split as the windows' newest samples; their signed
        Fisher-z differences are pooled over the last ``NULL_POOL`` calibrations like the kernel
        scores (a new window size starts with a full pool). The pair's threshold is
        ``s * t_N^{-1}(1 - q / 2)``, ``s`` the RMS of its ``N`` pooled differences (the null is
        centred at 0), at least ``sqrt(2 / (n - 3))``, and ``q`` the rate of each pair (see
        :meth:`calibrate_ar`). The statistic is the Gaussian rank correlation's (normal scores;
        :func:`~ratiowatch.stream.calibration.correlation.fisher_z_diff` with ``ranks=True``): with
        Pearson's, heavy-tailed channels (five t(3) channels) raised 3.3 false alarms per 10,000
        samples through this view, its surrogates' Gaussian-shaped threshold being too low.
        """
        pairs = values.shape[1] * (values.shape[1] - 1) // 2
        fresh = self.corr_count == 0 or self.corr_pool is None
        count = self.n_perm * (NULL_POOL if fresh else 1)
        sims = simulate_ar(fit_ar_channels(values), 2 * n, count, rng, start=values)
        # (count, pairs), = fisher_z_diff(..., ranks=True) of the halves: Gaussian rank correlations,
        # as the detector's view
        null = surrogate_zdiff(np.ascontiguousarray(sims), n, normal_scores(n))
        if fresh:
            self.corr_pool, self.corr_count = np.empty((NULL_POOL, self.n_perm, pairs)), 0
        self.corr_count = _pool_in(self.corr_pool, self.corr_count, null)
        draws = self.corr_pool.shape[0] * self.corr_pool.shape[1]
        # a pair whose surrogates never vary (a constant channel) cannot be calibrated: no alarm; the
        # RMS is at least Fisher z's for two independent windows of independent samples, sqrt(2 / (n - 3))
        # (the channel view's floor, see _calibrate_channels; in the demo stream, n = 40, one pair's
        # surrogates gave 0.145 against 0.232 and a false alarm followed)
        self.corr_thresholds = _rms_thresholds(self.corr_pool, draws, q, floor=math.sqrt(2.0 / (n - 3)))

    def _calibrate_channels(self, sims: np.ndarray, n: int, q: float) -> None:
        """Channel view: thresholds of each channel's location and spread rank statistics
        (:mod:`~ratiowatch.stream.calibration.channels`) from the kernel score's surrogates.

        Each surrogate has ``2n + k - 1`` samples with the trend line added back, as the windows'
        values; its samples ``k - 1`` on are the newest samples of the 2n subsequences, split in
        halves. The signed statistics are pooled over the last ``NULL_POOL`` calibrations (a pool
        that starts from fewer draws than a full one fills row by row); a statistic's threshold is
        ``s * t_N^{-1}(1 - q / 2)`` as for the correlation view, ``s`` the RMS of its ``N`` pooled
        draws, but never below the statistic's exact standard deviation for exchangeable windows
        without ties, ``sqrt((2n + 1) / 3) / 2n``. Why the floor: the AR model is fitted to ~53
        values, and on white noise a fitted negative coefficient makes surrogates whose window means
        vary less than the data's (two i.i.d. channels, n = 12: one channel's threshold came out
        0.34 against the other's 0.48, and a false alarm followed); dependence in the data only
        widens the null, which the surrogates still show. A channel whose surrogates never vary
        (constant values) cannot be calibrated and never alarms.
        """
        null = surrogate_rank_diffs(np.ascontiguousarray(sims), self.k - 1, n)  # (count, 2 m)
        self.channel_pool, self.channel_count = _pool_view(self.channel_pool, self.channel_count, null, self.n_perm)
        filled = self.channel_pool[: min(self.channel_count, NULL_POOL)]
        exchangeable = math.sqrt((2 * n + 1) / 3.0) / (2 * n)
        self.channel_thresholds = _rms_thresholds(filled, filled.shape[0] * filled.shape[1], q, floor=exchangeable)

    def _level_surrogates(self, sims: np.ndarray, levels: np.ndarray | None, n: int, count: int,
                          rng: np.random.Generator) -> np.ndarray:
        """Surrogate differences for the level view, shape (count, 2n + k - 1, m): per channel, the
        kernel score's own (AR surrogates of the differences) unless an augmented Dickey-Fuller test
        rejects a unit root in ``levels`` (the held levels before the windows), and then the
        differences of AR surrogates of the levels around their trend line.

        Why two: an AR(<= 5) model of the first differences of a stationary smooth series cannot
        hold their spectral zero at frequency 0, so its surrogates wander like a random walk and
        their window means spread 2-3 times as far as the data's (AR(1) with phi = 0.9, n = 24-48).
        Surrogates of the levels have the right spread where the levels are stationary, and far
        too little for a random walk: there the differences' own model is the right one.
        """
        out = sims
        if levels is None or levels.shape[0] < AR_MIN_VALUES:
            return out
        for c in range(levels.shape[1]):
            if not unit_root_rejected(levels[:, c]):
                continue
            if out is sims:
                out = sims.copy()
            fit_to, slopes = _around_trend(levels[:, c:c + 1], levels[:, c:c + 1], self.robust_line)
            lv = simulate_ar(fit_ar_models(fit_to, rng=rng), out.shape[1] + 1, count, rng, start=fit_to)
            if slopes is not None:
                add_trend(lv, slopes)
            out[:, :, c] = np.diff(lv[:, :, 0], axis=1)
        return out

    def _calibrate_levels(self, sims: np.ndarray, n: int, q: float, held: np.ndarray | None = None) -> None:
        """Level view: the threshold of each channel's mean-level difference
        (:mod:`~ratiowatch.stream.calibration.levels`) from surrogate differences ``sims``
        (:meth:`_level_surrogates`; their samples ``k - 1`` on are the windows' 2n differences).

        The draws are pooled over the last ``NULL_POOL`` calibrations like the channel view's; the
        threshold is ``s * t_N^{-1}(1 - q / 2)`` with ``s`` their RMS about 0 (see the module
        :mod:`~ratiowatch.stream.calibration.levels`), but at least the RMS of the statistic itself
        over ``held`` (the levels before the windows, every split of ``2n`` of them). Why the
        floor: an AR model of a stretch that holds a cycle or two cannot carry the cycle, whose
        phase moves window means far more than its surrogates do (a sine of period 96, amplitude 5
        and noise sd 1, at windows of 12-34: three false alarms in its first 700 samples without
        the floor, seed 0). A channel whose draws never vary never alarms.
        """
        null = surrogate_level_diffs(np.ascontiguousarray(sims), self.k - 1, n)  # (count, m)
        self.level_pool, self.level_count = _pool_view(self.level_pool, self.level_count, null, self.n_perm)
        filled = self.level_pool[: min(self.level_count, NULL_POOL)].reshape(-1, null.shape[1])
        floor = 0.0
        if held is not None and held.shape[0] >= 4 * n:
            cums = np.vstack([np.zeros((1, held.shape[1])), np.cumsum(held, axis=0)])
            sums = cums[n:] - cums[:-n]  # sums of every n consecutive levels
            own = (sums[n:] - sums[:-n]) / n  # the statistic at every split of 2n held levels
            floor = np.sqrt((own * own).mean(axis=0))
        self.level_thresholds = _rms_thresholds(filled, filled.shape[0], q, floor=floor)

    # ------------------------------------------------------------------ checkpoints
    def to_state(self) -> tuple[dict, dict]:
        """``(meta, arrays)``: JSON-able scalars and numpy arrays (the detector's checkpoint keys)."""
        meta = {"perm_threshold": self.threshold, "nullpool_i": self.pool_count, "cpool_i": self.corr_count,
                "fpool_i": self.floor_count, "degenerate": self.degenerate, "chpool_i": self.channel_count,
                "lvpool_i": self.level_count,
                "ar_threshold": self.ar_threshold, "floor_threshold": self.floor_threshold,
                "kernel_rate": self.kernel_rate}
        arrays = {"nullpool": self.pool.copy(), "fpool": self.floor_pool.copy()}
        if self.corr_pool is not None:
            arrays["cpool"] = self.corr_pool.copy()
        if self.corr_thresholds is not None:
            arrays["corr_thr"] = self.corr_thresholds.copy()
        if self.channel_pool is not None:
            arrays["chpool"] = self.channel_pool.copy()
        if self.channel_thresholds is not None:
            arrays["channel_thr"] = self.channel_thresholds.copy()
        if self.level_pool is not None:
            arrays["lvpool"] = self.level_pool.copy()
        if self.level_thresholds is not None:
            arrays["level_thr"] = self.level_thresholds.copy()
        return meta, arrays

    def load_state(self, meta: Mapping, arrays: Mapping, dim: int | None = None, seen: int | None = None) -> None:
        """Restore what :meth:`to_state` wrote (checkpoints from before the correlation and channel views included).

        Every pool and threshold array must have the shape this calibrator's parameters and the
        stream's ``dim`` channels give (``m (m - 1) / 2`` pairs for the correlation view, ``2 m``
        statistics for the channel view, ``m`` for the level view), and every count must be an
        integer >= 0; a ``ValueError`` naming the entry otherwise (the compiled views index them
        by those sizes). ``dim`` None: the views' arrays are read as they are. ``seen``: the
        samples the stream has seen; a pool takes at most one calibration per sample beyond the
        ``NULL_POOL`` rows a new window size starts with, so no count exceeds ``NULL_POOL + 2 seen``.
        """
        what = checkpoint_class(arrays, "NullCalibrator")

        def count(name, default=None):
            value = meta[name] if default is None or name in meta else default
            return state_range(value, name, what, 0, None if seen is None else NULL_POOL + 2 * seen + 1, meta="meta")

        def real(name, default=None):
            value = meta[name] if default is None or name in meta else default
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise damaged_state(what, name, f"must be a number; got {value!r}", "meta")
            return float(value)

        self.threshold = real("perm_threshold")
        # checkpoints from before these were kept: the threshold in force stands for the AR one
        self.ar_threshold = real("ar_threshold", self.threshold)
        self.floor_threshold = real("floor_threshold", math.nan)
        self.kernel_rate = real("kernel_rate", self.kernel_rate)
        self.pool_count = count("nullpool_i")
        self.corr_count = count("cpool_i", 0)
        self.pool = state_array(arrays, "nullpool", self.pool.shape, finite=False).astype(np.float64)
        if "fpool" in arrays and np.shape(arrays["fpool"]) == self.floor_pool.shape:
            self.floor_pool = state_array(arrays, "fpool", self.floor_pool.shape, finite=False).astype(np.float64)
            self.floor_count = count("fpool_i", 0)
        else:  # a checkpoint from before the floor: the next calibration fills its pool
            self.floor_count = 0
        # a threshold in force is a quantile of the pooled draws, never below the smallest of them
        # (a relative 1e-9 spares the rounding of a tail fitted in logs), or NaN before the first
        draws = self.pool[np.isfinite(self.pool)]
        for name in ("perm_threshold", "ar_threshold"):
            value = self.threshold if name == "perm_threshold" else self.ar_threshold
            if math.isnan(value):
                continue
            low = float(draws.min()) if draws.size else -math.inf
            if math.isinf(value) or value < low - 1e-9 * max(1.0, float(np.abs(draws).max(initial=0.0))):
                raise damaged_state(what, name, f"is {value!r}, where it must be NaN (no threshold yet) or a finite "
                                    f"number no smaller than the smallest pooled draw in 'nullpool' ({low!r})", "meta")
        # checkpoints from before the flag: recomputed from the kernel pool (the floor is newer still)
        degenerate = meta.get("degenerate", self.pool_count > 0 and _constant(
            self.pool[: min(self.pool_count, NULL_POOL)]))
        self.degenerate = state_flag(degenerate, "degenerate", what, "meta")
        m = 0 if dim is None else int(dim)
        sizes = {"corr": m * (m - 1) // 2, "channel": 2 * m, "level": m}
        for view, pool_key, thr_key, count_key in (("corr", "cpool", "corr_thr", "cpool_i"),
                                                   ("channel", "chpool", "channel_thr", "chpool_i"),
                                                   ("level", "lvpool", "level_thr", "lvpool_i")):
            if view != "corr":  # checkpoints from before the channel and level views: 0
                setattr(self, f"{view}_count", count(count_key, 0))
            for key, shape, attr in ((pool_key, (NULL_POOL, self.n_perm, sizes[view]), f"{view}_pool"),
                                     (thr_key, (sizes[view],), f"{view}_thresholds")):
                if key not in arrays:
                    continue
                if dim is None:  # shapes unknown here (the detector always passes its channels)
                    setattr(self, attr, np.asarray(arrays[key], dtype=np.float64).copy())
                    continue
                # thresholds are inf for statistics whose draws never vary
                setattr(self, attr, state_array(arrays, key, shape, finite=False).astype(np.float64))


def _ar_threshold(draws: np.ndarray, rate: float, log_tail: bool = False) -> float:
    """The AR null's threshold: the exponential tail's rate quantile, never below what the draws allow.

    ``log_tail``: the tail is fitted to ``log(1 + draws)`` and mapped back, an exponential tail
    there being a Pareto tail of the draws (see :attr:`NullCalibrator.log_tail`). On Lomax draws
    (``P(X > x) = (1 + x)^-3``; 160 draws, rate 5e-5) the plain fit is exceeded 49 times as often as
    the rate, the fit in logs 0.99 times.

    >>> rng = np.random.default_rng(0)
    >>> x = rng.pareto(3.0, 160)
    >>> bool(_ar_threshold(x, 5e-5, log_tail=True) > _ar_threshold(x, 5e-5))
    True
    """
    if log_tail:  # the tail is fitted above the median: the clip of rare scores below -1 only guards the log
        logs = np.log1p(np.maximum(np.asarray(draws, dtype=np.float64), -0.999))
        return float(np.expm1(max(exp_tail_threshold(logs, rate), top_draws_floor(logs, rate))))
    return max(exp_tail_threshold(draws, rate), top_draws_floor(draws, rate))


def _around_trend(values: np.ndarray, trend_values: np.ndarray | None,
                  robust: bool = False) -> tuple[np.ndarray, np.ndarray | None]:
    """``(values the AR model is fitted to, slopes added back to its surrogates or None)``: see
    :meth:`NullCalibrator.calibrate_ar`, local linear trend; ``robust``: the line (and its step)
    fitted to :func:`~ratiowatch.stream.calibration.split_test.clip_gross` of ``trend_values``
    (the AR model is still fitted to ``values`` less that line)."""
    fit_to, slopes = values, None
    if trend_values is not None:  # the line through the longer stretch, the AR model around it
        line_values = clip_gross(trend_values) if robust else trend_values
        resid, slopes, sxx, step_at, _ = line_and_step(line_values)  # a past level shift is no trend
        slopes = shrink_slopes(resid, slopes, sxx)
        if (step_at >= 0).any():  # without a step the joint fit is the plain line
            # a step may explain a slope away, never make one: on a short stretch a chance step
            # and the line are nearly collinear, and their joint slope can be many times the line's
            line_slopes = shrink_slopes(*detrend(line_values))
            slopes = np.where(np.abs(slopes) < np.abs(line_slopes), slopes, line_slopes)
        # a constant stretch behind the windows carries no trend (its null stays degenerate, see
        # the permutation floor): an older isolated event tilts the line through the longer one
        slopes = np.where(np.ptp(values, axis=0) > 0, slopes, 0.0)
        if slopes.any():
            fit_to = values - np.arange(values.shape[0], dtype=np.float64)[:, None] * slopes[None, :]
        else:
            slopes = None
    return fit_to, slopes


def _rms_thresholds(pool: np.ndarray, draws: int, q: float, floor: float = 0.0) -> np.ndarray:
    """Two-sided thresholds of centred statistics: each one's RMS over ``pool`` (..., stats), at
    least ``floor``, times the Student-t quantile of ``draws`` degrees of freedom at ``q / 2``;
    inf where the RMS is 0 (draws that never vary)."""
    from scipy.special import stdtrit

    rms = np.sqrt((pool * pool).reshape(-1, pool.shape[-1]).mean(axis=0))
    quant = -float(stdtrit(draws, q / 2))
    return np.where(rms > 1e-12, np.maximum(rms, floor) * quant, np.inf)


def _pool_in(pool: np.ndarray, count: int, null: np.ndarray) -> int:
    """Put one calibration's draws into ``pool`` (NULL_POOL rows), return the new count.

    An empty pool (count 0: a new window size) is filled whole from ``NULL_POOL`` rows' worth of
    draws; otherwise they replace the oldest row."""
    if count == 0:
        pool[:] = null.reshape(pool.shape)
        return NULL_POOL
    pool[count % NULL_POOL] = null.reshape(pool.shape[1:])
    return count + 1


def _pool_view(pool: np.ndarray | None, count: int, null: np.ndarray, n_perm: int) -> tuple[np.ndarray, int]:
    """Put one calibration's draws of a view, ``null`` (draws, statistics), into its pool; return
    ``(pool, count)``.

    An empty pool (count 0, none yet, or one of other statistics) starts anew and is filled whole
    from ``NULL_POOL`` rows' worth of draws; a pool that starts from fewer (one calibration's, as
    from a checkpoint written without the view) fills row by row."""
    if count == 0 or pool is None or pool.shape[2] != null.shape[1]:
        pool, count = np.zeros((NULL_POOL, n_perm, null.shape[1])), 0
    if count == 0 and null.shape[0] == NULL_POOL * n_perm:
        return pool, _pool_in(pool, 0, null)
    pool[count % NULL_POOL] = null[-n_perm:]
    return pool, count + 1


def _constant(null: np.ndarray) -> bool:
    """Whether pooled null draws are one number up to rounding (drawn from constant values)."""
    return bool(null.size) and float(np.ptp(null)) <= 1e-9 * max(1.0, float(np.abs(null).max()))

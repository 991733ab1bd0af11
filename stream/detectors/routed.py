"""Streaming change points by the detector that suits the stream: a period hands it to the split profile.

The two streaming detectors see different changes. The two-window
:class:`~ratiowatch.stream.detectors.changepoint.ChangePointDetector` compares two short windows
of subsequences: it alarms within tens of samples on a change of level, spread or correlation,
but its windows hold a fraction of a cycle of a periodic signal, and a change of shape or
frequency inside the cycle passes unseen (synthetic change suite: 0 of 20 shape changes found
within two windows). The :class:`~ratiowatch.stream.detectors.segmenter.SplitProfileDetector`
scores every split of a window of several cycles with subsequences a quarter cycle wide: it finds
those changes (20 of 20 shape changes before the next change), later and at about an eighth of
the speed.

:class:`PeriodRoutedDetector` starts every stream on the two-window detector and keeps the newest
samples of the current segment (those since its last reported change). When the segment reaches
``2 x min_window`` samples, and then each time it doubles up to the split profile's
``max_window``, it asks whether the segment has a period
(:func:`~ratiowatch.stream.series.width.significant_period` with ``band="zero_crossing"``: an
autocorrelation peak above Bartlett's band under the null that the autocorrelation has died out
by its first zero crossing, Bonferroni over the lags). The first time it has, the stream is
handed to a split-profile detector, which is first fed the segment's samples and then every later
one; the stream stays with it. Each sub-detector is calibrated on its own (``false_alarm_rate``
alarms per step on change-free data), and the decision reads the data, never the change scores,
so it moves no threshold. A segment without a period after ``max_window`` samples stays with the
two-window detector until that detector reports a change, when the new segment is asked again.
The band needs about five cycles in view: sines of period 24, 100, 200 and 300 under noise of
0.3 sd were handed over at 120, 480, 1,920 and 2,375 samples, one of period 500 not within 4,000.
The split profile's width rule sums the band up to the peak instead and needs 15-20 cycles (so
asked, the sine of period 100 was handed over at 1,920 and one of 250 not at all); it keeps that
band because a staircase, detrended, is a sawtooth (module docstring of
:mod:`~ratiowatch.stream.series.width`), while here a false period costs speed, not false alarms.
It matters beyond shape changes: a smooth stream (lag-1 autocorrelation above 0.8) is differenced
by the two-window detector, and a level step inside a cycle of 96 samples is then one outlier in
the differences, missed; handed over at 480, such steps were found 275-531 samples later
(docs/experiments.md, V2).

Only a univariate stream is asked: a stream of several channels stays with the two-window
detector, whose channel and rank-correlation views also see changes in the relations between
channels. The split profile scores periodic channels one by one (its joint embedding took the
wandering phases between independent cycles for change), so it would not.

What the hand-over costs is speed and delay, not false alarms. A stream is asked again at every
segment, for as long as it runs, so a test at a fixed level would, sooner or later, hand every
aperiodic stream over on a chance peak: at 5 % per question, 7 of 10 streams of noise whose level
and spread change at random every 150-600 samples were handed over within 20,000 samples (about 150
questions each). ``period_level=0.05`` spends one level over the stream's life instead: the q-th
question is asked at ``period_level / (q (q + 1))`` (:func:`question_level`), and the chance that a
stream without a period is ever handed over is at most ``period_level`` (none of the same 10
streams; 1 with the width rule's wider band). It is not the default, because it is paid for with
the weaker and the longer cycles: a stream that is periodic from its start is asked at 2.5 %,
0.8 %, 0.4 %, ..., sines of period 48 and 100 under noise were handed over at 921 and 960 samples
instead of 240 and 480, one of period 300 not within 4,000, and on real series with weak cycles
covering fell (measured with the wider band: TSSB's check half 0.707 -> 0.673, UTSA's 0.605 ->
0.565; docs/experiments.md, S19). ``min_acf=0.5``
(:data:`~ratiowatch.stream.series.period.MIN_ACF`) hands over only a cycle that carries at least
half the variance: none of the 100 keys of ``ratiowatch bench daemon`` (noise whose level and
spread switch every 250 samples) were handed over, against 22 with the band alone (the daemon then
ran at 2,046 records per second instead of 26,578; both measured with the wider band, before V2),
every seasonal kind of the null suite still was at the same length, but on real series it gave back
most of the gain, because weaker cycles hide shape changes from the two-window detector too (UTSA's
check half: 0.605 with the band alone, 0.572 with 0.5, 0.564 for the two-window detector;
docs/experiments.md, S17 and S18). So the band alone is the default, and ``min_acf`` is the knob for throughput.

Alarms the split profile raises while it is fed the segment's samples are changes the two-window
detector did not report; they are passed on one per step from the hand-over, each with the step
at which it is reported as its alarm index (an alarm is never dated before it was known).

**A cycle longer than the segments** (``with_history=True``, off by default). A daily on/off
schedule sampled every 5 minutes (a level that switches twice per cycle of 288 samples; the stress
kind ``schedule288``) holds each level for 115-175 samples, longer than the two-window detector's
windows: it reports switch after switch, each report restarts the segment, and no segment reaches
the five cycles the question needs. Handed over on a short segment, the split profile is caught
the same way: its window restarts at each switch it reports. With the option, a change the
two-window detector reports is also a question, on the stream's newest samples across changes (at
most the largest check length). Where those samples reach beyond the segment and show a period
:data:`CYCLES_SEEN` (5) times over, the hand-over gives the split profile them as its window,
untested (:meth:`~ratiowatch.stream.detectors.segmenter.SplitProfileDetector.prime`), so that its
calibration sees several cycles; changes up to the last one reported are not reported again. A
pattern seen fewer times (regimes that alternated twice) is still a change: the split profile is
then fed the segment, as without the option. On the stress suite the schedule's false alarms fell
from 16.0 to 6.6 per 10,000 samples (3.4 at 10,000 samples), with the null, change and other stress
kinds as without it; it is off by default because on real series it lost covering on UTSA's tune
half (docs/experiments.md, Y).

Examples
--------
>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> t = np.arange(3000)
>>> y = np.sin(2 * np.pi * t / 24) + rng.normal(0, 0.2, 3000)
>>> det = PeriodRoutedDetector(seed=0)
>>> for v in y[:600]:
...     _ = det.step(float(v))
>>> det.kind, det.handed_over_at
('split_profile', 120)
>>> det = PeriodRoutedDetector(seed=0)
>>> for v in rng.normal(size=500):
...     _ = det.step(float(v))
>>> det.kind, det.handed_over_at
('window', None)
"""

from __future__ import annotations

import json
import math
import numbers
from collections.abc import Mapping

import numpy as np
from river import base

from ratiowatch.core.params import check_seed
from ratiowatch.core.validation import as_plain, damaged_state, state_flag, state_range
from ratiowatch.stream.calibration.peaks import Alarm
from ratiowatch.stream.detectors.changepoint import MAX_MAGNITUDE, ChangePointDetector, _alarm_from, check_magnitude
from ratiowatch.stream.detectors.state_file import CheckpointEntries, open_checkpoint, state_version
from ratiowatch.stream.detectors.segmenter import SplitProfileDetector
from ratiowatch.stream.series.preprocess import fill_missing
from ratiowatch.stream.series.width import PERIOD_LEVEL, significant_period

#: cycles of its period that the stream's newest samples must hold before ``with_history`` hands
#: it over with them: the five cycles the period question needs in view (module docstring). A
#: pattern seen that often is the stream's ordinary behaviour; fewer repeats (regimes that have
#: alternated two or three times) are still changes, and the split profile is fed the segment
CYCLES_SEEN = 5
#: checkpoint format of :meth:`PeriodRoutedDetector.to_state` (version 1, before the questions were
#: counted, is still read)
STATE_VERSION = 2


def period_checks(min_window: int, max_window: int) -> list[int]:
    """Segment lengths at which the period is asked for: ``2 min_window``, doubling, up to ``max_window``.

    Twice the split profile's first window, because its width rule needs three cycles in view
    (periods up to ``2 min_window / 3`` are seen at the first check); doubling, so a segment of
    length L has been asked O(log L) times.

    Examples
    --------
    >>> period_checks(30, 5000)
    [60, 120, 240, 480, 960, 1920, 3840]
    """
    out, n = [], 2 * int(min_window)
    while n <= max_window:
        out.append(n)
        n *= 2
    return out


def question_level(level: float, question: int) -> float:
    """The level of a stream's ``question``-th period question (1, 2, ...): ``level / (q (q + 1))``.

    The levels of all the questions a stream is ever asked sum to ``level`` (the series telescopes),
    so the chance that a stream without a period is ever handed over is at most ``level``, however
    long it runs and however many segments it has (module docstring).

    Examples
    --------
    >>> [round(question_level(0.05, q), 4) for q in (1, 2, 3, 10)]
    [0.025, 0.0083, 0.0042, 0.0005]
    """
    if question < 1:
        raise ValueError(f"questions are counted from 1; got {question}")
    return float(level) / (question * (question + 1.0))


def _check_rate(value, name: str, what: str, lo_open: bool = True) -> float:
    """``value`` as a float in ``(0, 1)`` (``[0, 1)`` unless ``lo_open``), or a ``ValueError`` naming
    ``name`` and ``what`` it must be: a bool, a string, NaN or an infinity too, not a ``TypeError``
    of the comparison.

    >>> _check_rate("0.5", "min_acf", "in [0, 1), e.g. 0.5", lo_open=False)
    Traceback (most recent call last):
    ...
    ValueError: min_acf must be in [0, 1), e.g. 0.5; got '0.5'
    """
    if (isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real) or not math.isfinite(value)
            or not (0.0 < value < 1.0 if lo_open else 0.0 <= value < 1.0)):
        shown = repr(value) if isinstance(value, str) else value
        raise ValueError(f"{name} must be {what}; got {shown}")
    return float(value)


def segment_period(rows: np.ndarray, min_acf: float = 0.0, level: float = PERIOD_LEVEL) -> int:
    """The largest period any channel of ``rows`` (T, m; NaN = missing) has by the split profile's
    width rule at ``level`` whose autocorrelation at the period reaches ``min_acf``, or 0 (module
    docstring).

    Examples
    --------
    >>> t = np.arange(240.0)
    >>> segment_period(np.c_[np.random.default_rng(1).normal(size=240), np.sin(2 * np.pi * t / 12)])
    12
    """
    x = np.asarray(rows, dtype=np.float64).reshape(len(rows), -1)
    seen = ~np.isnan(x)
    if not seen.any(axis=0).all():  # a channel without any value yet
        return 0
    x = fill_missing(x)[int(seen.argmax(axis=0).max()):]  # carried forward, from the row all have begun at
    return max(significant_period(x[:, c], min_acf, level, band="zero_crossing") for c in range(x.shape[1]))


class PeriodRoutedDetector(base.DriftDetector):
    """Streaming change points: the two-window detector, handed to the split profile once the stream
    shows a period (module docstring).

    The same interface as the two detectors: ``step(x)`` returns the alarm reported at that sample
    (a :class:`~ratiowatch.stream.calibration.peaks.Alarm`, or None); it is a river drift detector
    (``river.base.DriftDetector``): ``update(x)`` sets ``drift_detected`` and ``last_alarm``, and
    ``clone()`` gives a fresh detector with the same parameters; ``to_state`` / ``from_state``
    restore it exactly.
    :attr:`kind` says which detector holds the stream, :attr:`handed_over_at` since when.

    Parameters
    ----------
    false_alarm_rate : float
        Alarms per step allowed on change-free data, for whichever detector holds the stream.
    window : mapping, optional
        Options of the :class:`~ratiowatch.stream.detectors.changepoint.ChangePointDetector`.
    profile : mapping, optional
        Options of the :class:`~ratiowatch.stream.detectors.segmenter.SplitProfileDetector`; its
        ``min_window`` and ``max_window`` also set when the period is asked for
        (:func:`period_checks`).
    min_acf : float
        Autocorrelation at the period that a hand-over also needs (0: the width rule's band alone;
        0.5: only a cycle that carries half the variance, fewer aperiodic streams on the slower
        detector; module docstring).
    period_level : float, optional
        None (default): every question at the width rule's 5 %. A float: the chance, over the
        stream's whole life, that a stream without a period is handed over; its q-th question is
        asked at ``period_level / (q (q + 1))`` (:func:`question_level`; module docstring).
    with_history : bool
        Also ask, at each change the two-window detector reports, whether the stream's newest
        samples (across changes, at most the largest check length) have a period, and where they
        hold it five times over hand the stream over with them as the split profile's window,
        untested (:meth:`~ratiowatch.stream.detectors.segmenter.SplitProfileDetector.prime`),
        instead of feeding it the segment since the last change: for schedules longer than the
        windows, such as a daily on/off cycle (module docstring). Off by default.
    seed : int
        Seed of both detectors (alarms are deterministic given it).

    Examples
    --------
    >>> det = PeriodRoutedDetector()
    >>> det.step(1.0) is None, det.kind, det.n_seen
    (True, 'window', 1)
    """

    def __init__(self, false_alarm_rate: float = 1e-4, window: Mapping | None = None,
                 profile: Mapping | None = None, min_acf: float = 0.0, period_level: float | None = None,
                 with_history: bool = False, seed: int = 0):
        super().__init__()
        for name, opts in (("window", window), ("profile", profile)):
            if opts is not None and not isinstance(opts, Mapping):
                raise ValueError(f"{name} must be a mapping of detector options; got {opts!r}")
            clash = sorted({"false_alarm_rate", "seed"} & set(opts or ()))
            if clash:
                raise ValueError(f"set {clash} on PeriodRoutedDetector itself, not in {name}=: both "
                                 "detectors share them")
        self.false_alarm_rate = _check_rate(false_alarm_rate, "false_alarm_rate", "in (0, 1), e.g. 1e-4")
        self.seed = check_seed(seed)  # a bad one named here, not as int()'s or numpy's error
        self.min_acf = _check_rate(min_acf, "min_acf", "in [0, 1), e.g. 0.5", lo_open=False)
        self.period_level = None if period_level is None else _check_rate(
            period_level, "period_level", "None or in (0, 1), e.g. 0.05")
        if not isinstance(with_history, (bool, np.bool_)):
            raise ValueError(f"with_history must be True or False; got {with_history!r}")
        self.with_history = bool(with_history)
        # numpy scalars as the Python ones they equal: the options go into a checkpoint's JSON
        self.window_options = {k: as_plain(v) for k, v in dict(window or {}).items()}
        self.profile_options = {k: as_plain(v) for k, v in dict(profile or {}).items()}
        # built now so that bad options fail here, not at the hand-over (the window detector in _reset)
        probe = SplitProfileDetector(false_alarm_rate=self.false_alarm_rate, seed=self.seed, **self.profile_options)
        self._windows = (probe.min_window, probe.max_window)
        self._reset()
        # the two detectors' parameters with the defaults the options leave filled in (shared ones apart)
        shared = ("false_alarm_rate", "seed")
        self._resolved = {"window": {k: v for k, v in self._inner._params().items() if k not in shared},
                          "profile": {k: v for k, v in probe._params().items() if k not in shared}}

    def _reset(self) -> None:
        """Forget the stream: the state of a fresh detector with these parameters."""
        super()._reset()
        self.questions = 0  # period questions asked over the stream's life
        self._inner = ChangePointDetector(false_alarm_rate=self.false_alarm_rate, seed=self.seed,
                                          **self.window_options)
        self._checks = period_checks(*self._windows)
        self._cap = self._checks[-1] if self._checks else 0
        self._ring: np.ndarray | None = None  # (cap, 1): the newest samples with a value, the k-th at k % cap
        self._at: np.ndarray | None = None  # (cap,): their input indices
        self._kept = 0  # samples with a value taken into the ring
        self._seg_rows = 0  # of them, those of the current segment (exact up to the ring's capacity)
        self._seg_start = 0  # global index of the current segment's first sample
        self._next_check = 0  # index into _checks of the next segment length to ask at
        self._pending: list[Alarm] = []  # alarms of the hand-over still to pass on
        self._seen_change = -1  # the latest change the two-window detector reported
        self._primed_through = -1  # after a primed hand-over: changes up to here are not reported again
        self.handed_over_at: int | None = None
        self.n_seen = 0
        self.last_alarm: Alarm | None = None

    # the options of the two detectors, as the constructor took them (river's clone reads them)
    @property
    def window(self) -> dict:
        """Options of the two-window detector (``window=``)."""
        return self.window_options

    @property
    def profile(self) -> dict:
        """Options of the split profile (``profile=``)."""
        return self.profile_options

    # -- the detector in charge ----------------------------------------------------------------
    @property
    def kind(self) -> str:
        """``"window"`` or ``"split_profile"``: the detector that holds the stream."""
        return "window" if self.handed_over_at is None else "split_profile"

    @property
    def detector(self):
        """The detector that holds the stream."""
        return self._inner

    @property
    def score(self) -> float:
        """The holding detector's latest change score (NaN before its first test)."""
        return float(self._inner.score)

    @property
    def threshold(self) -> float:
        """The holding detector's threshold in force (NaN before its first calibration)."""
        return float(self._inner.threshold)

    # -- input ---------------------------------------------------------------------------------
    def _row(self, x) -> np.ndarray:
        """The sample ``x`` as a 1-d float array, or the ``ValueError`` of a sample neither detector
        takes, whichever of them holds the stream."""
        if isinstance(x, Mapping):  # the split profile it may hand over to takes no dicts
            raise ValueError("PeriodRoutedDetector takes a number or an array of channel values per sample, "
                             "not a dict; pass the values in a fixed order")
        try:
            v = np.asarray(x, dtype=np.float64).reshape(-1)
        except OverflowError:  # a Python int beyond float64: refused as the window detector does
            check_magnitude(x)
            raise
        except (TypeError, ValueError):
            raise ValueError(f"a sample is a number or a 1-d array of channel values; got {x!r}") from None
        return v

    def update(self, x) -> "PeriodRoutedDetector":
        """river drift-detector protocol: feed one sample; read :attr:`drift_detected` afterwards."""
        self.step(x)
        return self

    def step(self, x) -> Alarm | None:
        """Feed one sample (a number, or one value per channel; NaN = missing); the alarm reported now."""
        t = self.n_seen
        # a float, the common sample, is taken as it is; anything else is read once here, before
        # either detector sees it, so that a bad one is refused alike before and after the hand-over
        v = x if type(x) is float else self._row(x)
        if self.handed_over_at is not None:
            if type(x) is not float or not -MAX_MAGNITUDE <= x <= MAX_MAGNITUDE:
                check_magnitude(v)  # the split profile would winsorise what the window detector refuses
            alarm = self._inner.step(x)
            self.n_seen += 1
            if alarm is not None and alarm.change_index <= self._primed_through:
                alarm = None  # a change among the primed samples: reported already, or older than one that was
            return self._report(alarm, t)
        alarm = self._inner.step(x)  # validates the sample first: a bad one changes nothing here
        self.n_seen += 1
        # a sample with every value missing moves time on and nothing else: it is not a sample of
        # the segment (its length counts samples with a value) and is not kept for the question
        if self._cap and (v == v if type(v) is float else not np.isnan(v).all()):
            if self._ring is None:  # the first sample with a value tells the channels
                if np.size(v) > 1:  # several channels stay with the window detector (module docstring)
                    self._cap, self._checks = 0, []
                else:
                    self._ring = np.full((self._cap, 1), np.nan)
                    self._at = np.zeros(self._cap, dtype=np.int64)
            if self._cap:
                self._ring[self._kept % self._cap] = v
                self._at[self._kept % self._cap] = t
                self._kept += 1
                self._seg_rows += 1
        if alarm is not None:
            self._seen_change = max(self._seen_change, int(alarm.change_index))
            if self.with_history and self._ring is not None and self._ask(*self._history(), across=True):
                return self._report(alarm, t)
            # a new segment starts at the change and is asked again
            self._seg_start = max(self._seg_start, min(int(alarm.change_index), t))
            self._next_check = 0
            self._seg_rows = self._rows_since(self._seg_start)
        seg, asked = self._seg_rows, self._next_check
        while self._next_check < len(self._checks) and seg >= self._checks[self._next_check]:
            self._next_check += 1
        if self._next_check > asked:  # the segment reached the next length to ask at
            self._ask(*self._segment())
        return self._report(alarm, t)

    def _ask(self, rows: np.ndarray, at: np.ndarray, across: bool = False) -> bool:
        """Ask whether ``rows`` (the segment's samples with a value, or ``across`` changes the
        stream's newest ones; ``at`` their input indices) have a period, hand the stream over if so,
        and say whether it was. With ``with_history``,
        where the newest samples reach beyond the segment, a period that they show,
        :data:`CYCLES_SEEN` times over, hands it over primed with them (a segment's period is asked
        of them too, at the same level: a confirmation, never an extra hand-over); a question across
        changes hands it over only then. Fewer rows than the first check length are not asked."""
        if len(rows) < self._checks[0]:
            return False
        self.questions += 1
        level = PERIOD_LEVEL if self.period_level is None else question_level(self.period_level, self.questions)
        period = segment_period(rows, self.min_acf, level)
        if period == 0:
            return False
        if self.with_history:
            history, history_at = (rows, at) if across else self._history()
            if across or len(history) > len(rows):  # samples beyond the segment
                if not across:  # they must show a period too
                    period = segment_period(history, self.min_acf, level)
                if period and len(history) >= CYCLES_SEEN * period:
                    self._hand_over(history, history_at, primed=True)
                    return True
                if across:
                    return False
        self._hand_over(rows, at)
        return True

    def _kept_slots(self) -> np.ndarray:
        """The ring's slots, oldest sample first."""
        n = min(self._kept, self._cap)
        return np.arange(self._kept - n, self._kept) % self._cap

    def _rows_since(self, since: int) -> int:
        """Samples with a value the ring holds from stream index ``since`` on."""
        if self._ring is None:
            return 0
        return int((self._at[:min(self._kept, self._cap)] >= since).sum())

    def _newest(self, since: int) -> tuple[np.ndarray, np.ndarray]:
        """The ring's samples from stream index ``since`` on (at most the ring's capacity), and
        their input indices."""
        idx = self._kept_slots()
        idx = idx[int(np.searchsorted(self._at[idx], since)):]
        return self._ring[idx], self._at[idx]

    def _segment(self) -> tuple[np.ndarray, np.ndarray]:
        return self._newest(self._seg_start)

    def _history(self) -> tuple[np.ndarray, np.ndarray]:
        """The stream's newest samples whatever segments they span: those of the last
        ``max_window`` samples, the most the split profile's window takes."""
        return self._newest(self.n_seen - self._windows[1])

    def _hand_over(self, rows: np.ndarray, at: np.ndarray, primed: bool = False) -> None:
        """The split profile takes the stream: fed the segment, its alarms queued to be passed on;
        or, ``primed``, given the stream's newest samples as its window without testing them
        (changes among them were the two-window detector's to report). ``rows`` are samples with a
        value, at input indices ``at``: the split profile is given the samples missing between
        them and up to now as well, so that it holds what it would have, fed the same samples."""
        prof = SplitProfileDetector(false_alarm_rate=self.false_alarm_rate, seed=self.seed, **self.profile_options)
        start = int(at[0])
        if primed:
            span = np.full((self.n_seen - start, rows.shape[1]), np.nan)
            span[at - start] = rows
            prof.prime(span, start)
            self._primed_through = self._seen_change
        else:
            prof.skip_to(start)  # its indices are the stream's
            for i, r in zip(at.tolist(), rows):
                while prof.n_seen < i:  # a sample with every value missing: counted, not taken
                    prof.step(math.nan)
                a = prof.step(float(r[0]))
                if a is not None:
                    self._pending.append(a)
            while prof.n_seen < self.n_seen:
                prof.step(math.nan)
        prof._drift_detected = False
        self._inner = prof
        self.handed_over_at = self.n_seen
        self._ring = self._at = None
        self._kept = self._seg_rows = 0

    def _report(self, alarm: Alarm | None, t: int) -> Alarm | None:
        if alarm is None and self._pending:
            alarm = self._pending.pop(0)
        elif alarm is not None and self._pending:  # keep order: the older change goes first
            self._pending.append(alarm)
            alarm = self._pending.pop(0)
        if alarm is not None and alarm.alarm_index != t:
            alarm = Alarm(change_index=alarm.change_index, alarm_index=t, score=alarm.score,
                          threshold=alarm.threshold)
        self._drift_detected = alarm is not None
        if alarm is not None:
            self.last_alarm = alarm
        return alarm

    # -- checkpoints ---------------------------------------------------------------------------
    def _params(self) -> dict:
        """The parameters the detector runs with: options and the defaults they leave, resolved, so
        that two detectors that behave alike compare equal however their options were spelled."""
        return {"false_alarm_rate": self.false_alarm_rate, "seed": self.seed, "min_acf": self.min_acf,
                "period_level": self.period_level, "with_history": self.with_history,
                "window": dict(self._resolved["window"]), "profile": dict(self._resolved["profile"])}

    def to_state(self) -> dict:
        """The detector as ``{"meta": JSON, "ring": array, "inner.*": the holding detector's state}``."""
        meta = {"version": STATE_VERSION,
                "params": {"false_alarm_rate": self.false_alarm_rate, "seed": self.seed, "min_acf": self.min_acf,
                           "period_level": self.period_level, "with_history": self.with_history,
                           "window": self.window_options,
                           "profile": self.profile_options},
                "questions": self.questions,
                "kind": self.kind, "handed_over_at": self.handed_over_at, "n_seen": self.n_seen,
                "seg_start": self._seg_start, "next_check": self._next_check, "drift": self.drift_detected,
                "pending": [a.to_dict() for a in self._pending],
                "seen_change": self._seen_change, "primed_through": self._primed_through,
                "last_alarm": None if self.last_alarm is None else self.last_alarm.to_dict()}
        out = {"meta": json.dumps(meta), **self._ring_state()}
        for key, val in self._inner.to_state().items():
            out[f"inner.{key}"] = val
        return out

    def _ring_state(self) -> dict:
        """The kept samples as ``ring`` (cap, 1): the sample at input index t in row t % cap, NaN
        where none was kept. Where they span more than cap input indices (the stream had gaps),
        they are in its first rows instead, oldest first, and ``ring_at`` holds their indices."""
        if self._ring is None:
            return {"ring": np.zeros((0, 0))}
        idx = self._kept_slots()
        rows, at = self._ring[idx], self._at[idx]
        ring = np.full_like(self._ring, np.nan)
        if at[0] >= self.n_seen - self._cap:
            ring[at % self._cap] = rows
            return {"ring": ring}
        ring[:len(rows)] = rows
        return {"ring": ring, "ring_at": at.copy()}

    def _restore_ring(self, state: Mapping, what: str) -> None:
        """The kept samples from the entries :meth:`_ring_state` wrote, or a ``ValueError`` that
        names the one that cannot be."""
        ring = np.asarray(state["ring"])
        if ring.size == 0:
            if "ring_at" in state:
                raise damaged_state(what, "ring_at", "is there, but 'ring' holds no samples")
            return
        if self.handed_over_at is not None:
            raise damaged_state(what, "ring", "holds samples, but the stream has been handed over")
        if ring.shape != (self._cap, 1) or ring.dtype.kind not in "fiu" or np.isinf(ring).any():
            raise damaged_state(what, "ring", f"must be ({self._cap}, 1) real numbers or NaN, as its parameters "
                                f"give; got shape {ring.shape} of {ring.dtype}")
        ring = ring.astype(np.float64)
        if "ring_at" in state:
            at = np.asarray(state["ring_at"])
            if (at.ndim != 1 or not 0 < len(at) <= self._cap or at.dtype.kind not in "iu" or at[0] < 0
                    or at[-1] >= self.n_seen or (np.diff(at) <= 0).any()):
                raise damaged_state(what, "ring_at", f"must be at most {self._cap} increasing input indices "
                                    f"below n_seen = {self.n_seen}; got {at!r}")
            rows = ring[:len(at)]
            if np.isnan(rows).any():
                raise damaged_state(what, "ring", f"must hold a value in each of its first {len(at)} rows")
            at = at.astype(np.int64)
        else:
            at = np.arange(max(0, self.n_seen - self._cap), self.n_seen)
            rows = ring[at % self._cap]
            kept = ~np.isnan(rows[:, 0])
            rows, at = rows[kept], at[kept]
        if not len(at):
            return
        self._ring = np.full((self._cap, 1), np.nan)
        self._at = np.zeros(self._cap, dtype=np.int64)
        self._kept = len(at)
        self._ring[:self._kept], self._at[:self._kept] = rows, at
        self._seg_rows = self._rows_since(self._seg_start)

    @classmethod
    def from_state(cls, state: Mapping) -> "PeriodRoutedDetector":
        """Restore a detector saved by :meth:`to_state`; it continues exactly where it stopped.

        A state of another format version, another class's or one with an entry missing is refused
        with a ``ValueError`` that says so (a ChangePointDetector's is read as documented in
        :meth:`_from_window_state`).
        """
        state, meta = open_checkpoint(state, cls.__name__)
        params = meta.get("params")
        if "kind" not in meta and isinstance(params, Mapping) and "method" in params:
            return cls._from_window_state(state, meta)
        state_version(meta, cls.__name__, readable=(1, STATE_VERSION))
        p = CheckpointEntries(meta["params"], cls.__name__, " in its meta's params")
        obj = cls(false_alarm_rate=p["false_alarm_rate"], window=p["window"], profile=p["profile"],
                  min_acf=p["min_acf"], period_level=p.get("period_level"),
                  with_history=p.get("with_history", False), seed=p["seed"])
        what = cls.__name__

        def count(name, low=0, high=None):  # an integer in [low, high), named if it is not
            return state_range(meta[name], name, what, low, high, meta="meta")

        kind = meta["kind"]
        if kind not in ("window", "split_profile"):
            raise damaged_state(what, "kind", f"must be 'window' or 'split_profile'; got {kind!r}", "meta")
        obj.n_seen = count("n_seen")
        # version 1 did not count the questions; no change seen yet and none primed are -1
        obj.questions = count("questions") if "questions" in meta else 0
        obj.handed_over_at = None if meta["handed_over_at"] is None else count("handed_over_at", 0, obj.n_seen + 1)
        if (obj.handed_over_at is None) != (kind == "window"):
            raise damaged_state(what, "handed_over_at", f"is {obj.handed_over_at}, but kind is {kind!r}", "meta")
        obj._seg_start = count("seg_start", 0, obj.n_seen + 1)
        obj._next_check = count("next_check", 0, len(obj._checks) + 1)
        obj._seen_change = count("seen_change", -1, obj.n_seen) if "seen_change" in meta else -1
        obj._primed_through = count("primed_through", -1, obj.n_seen) if "primed_through" in meta else -1
        obj._drift_detected = state_flag(meta["drift"], "drift", what, "meta")
        pending = meta["pending"]
        if not isinstance(pending, list):
            raise damaged_state(what, "pending", f"must be a list of alarms; got {pending!r}", "meta")
        obj._pending = [_alarm_from(d, what, "pending", low=0) for d in pending]
        obj.last_alarm = None if meta["last_alarm"] is None else _alarm_from(meta["last_alarm"], what, low=0)
        inner = state.part("inner.")
        holder = SplitProfileDetector if kind == "split_profile" else ChangePointDetector
        obj._inner = holder.from_state(inner)
        obj._restore_ring(state, what)
        return obj


    @classmethod
    def _from_window_state(cls, state: Mapping, meta: Mapping) -> "PeriodRoutedDetector":
        """A ChangePointDetector's checkpoint (a key of ``kind = "window"``, or of a version whose
        default that was) continues as the window detector of a routed one: its samples so far are
        not kept, so the segment asked for a period starts at the next sample."""
        inner = ChangePointDetector.from_state(state)
        params = dict(meta["params"])
        window = {k: v for k, v in params.items() if k not in ("false_alarm_rate", "seed")}
        obj = cls(false_alarm_rate=params["false_alarm_rate"], window=window, seed=params["seed"])
        obj._inner = inner
        obj.n_seen = obj._seg_start = int(meta["t"]) + 1
        obj._drift_detected = bool(meta["drift"])
        obj.last_alarm = inner.last_alarm
        obj._seen_change = -1 if inner.last_alarm is None else int(inner.last_alarm.change_index)
        return obj




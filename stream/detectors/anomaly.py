"""Univariate time-series anomaly detection, NAB-style: causal scores in [0, 1].

Pipeline, one value at a time (no access to future points or labels):

1. **subsequence embedding**: the newest ``k`` values ``[y(t-k+1), ..., y(t)]``;
2. **streaming density-ratio novelty** of that subsequence against a long, self-cleaning reference
   buffer of past subsequences (:class:`ratiowatch.stream.detectors.outlier_stream.StreamingOutlierDetector`),
   raw score ``-log r``; several *views* (embeddings and kernel widths) run side by side;
3. **likelihood mapping**: the raw score's Gaussian tail probability against the series' own score
   history (:class:`ratiowatch.stream.calibration.likelihood.TailProbability`), meant to let one
   threshold serve every series. It does not yet: on anomaly-free synthetic series a score of 0.5
   (a nominal tail of 1e-5) is reached 1.3 to 37 times per 10,000 rows, depending on the kind of
   series (``ratiowatch eval synthetic-anomaly``; docs/results.md). Choose a threshold on the
   series at hand;
   the views' mapped scores are combined by their maximum. The history holds only real scores:
   the placeholders of the ratio detectors' warm-up (before their first fit) never enter it: a run
   of zeros, above the typical real score (``r > 1`` where the reference is dense), would bias the
   mean and inflate the spread for the next ``history`` scores. The ratio floor is low
   (1e-6) so that a far-out point still outranks a merely unusual one instead of both saturating;
   a **repeat view** beside them scores runs of exactly repeated values (a stuck sensor), which no
   density ratio of subsequences sees, by the tail probability of the run under a Markov chain of
   the series' own repeats (:class:`ratiowatch.stream.calibration.repeats.RepeatRunTail`);
4. **debouncing**: a mapped score is reported only when it beats every mapped score of the last
   ``debounce`` steps (one event, one alarm); otherwise the output is scaled down by ``quiet``.

The daemon runs one per key with ``[detector] kind = "anomaly"``, and ``ratiowatch detect FILE
--streaming --detector anomaly`` one per column; both alert once per event, at its first row whose
score reaches a threshold (:func:`ratiowatch.stream.engine.pipeline.event_starts`).

Examples
--------
>>> rng = np.random.default_rng(0)
>>> y = np.sin(np.arange(3000) * 2 * np.pi / 100) + 0.05 * rng.normal(size=3000)
>>> y[2500:2510] += 3.0
>>> s = TimeSeriesAnomalyDetector().score_series(y)
>>> int(np.argmax(s)) in range(2495, 2515)
True

The same, one value at a time with river's API (``score_one`` is pure; ``learn_one`` scores the
value the same way, then learns it):

>>> det = TimeSeriesAnomalyDetector()
>>> scores = []
>>> for v in y[:300]:
...     scores.append(det.score_one(v))
...     det.learn_one(v)
>>> np.allclose(scores, TimeSeriesAnomalyDetector().score_series(y[:300]))
True
"""

from __future__ import annotations

import json
from pathlib import Path
from statistics import NormalDist

import numpy as np
from numba import njit

from river.base import AnomalyDetector

from ratiowatch.core.params import check_choice, check_int, check_real, check_seed
from ratiowatch.core.validation import as_plain, as_samples, state_array, state_range
from ratiowatch.stream.detectors.outlier import MAX_MAGNITUDE
from ratiowatch.stream.detectors.outlier_stream import StreamingOutlierDetector
from ratiowatch.stream.detectors.state_file import (checkpoint_params, open_checkpoint, read_state, state_version,
                                                     write_state)
from ratiowatch.stream.calibration.likelihood import TailProbability
from ratiowatch.stream.calibration.repeats import RepeatRunTail

#: One view = one embedding and one streaming ratio detector: (k blocks, block width w, kernel scale
#: rule, sigma factor, centres). Short raw subsequences catch spikes and level shifts; a local kernel
#: width catches new levels between known ones; block means over 8 x 8 steps give longer context.
DEFAULT_VIEWS = (
    (8, 1, "median", 1.0, 100),
    (8, 1, "local", 2.0, 200),
    (8, 8, "median", 1.0, 100),
)

#: A floor for the spread of a view's log-ratio history (opt-in, ``min_spread=MIN_SPREAD``): ln 2
#: over the Gaussian quantile of 1e-5, so a subsequence at least half as dense as the history's
#: mean one never reaches the score 0.5 (a tail of 1e-5). On a very regular series the history's
#: own spread is tiny, and without a floor a density ratio of 0.7 maps to 1.0 (docs/experiments.md).
MIN_SPREAD = round(float(np.log(2.0) / NormalDist().inv_cdf(1.0 - 1e-5)), 4)

#: checkpoint format of :meth:`TimeSeriesAnomalyDetector.to_state`; states written before the
#: version was recorded have none and are this format (read as version 1)
STATE_VERSION = 1

#: the default configuration, fixed in code (the tuning record is in docs/experiments.md)
DEFAULTS = dict(
    views=DEFAULT_VIEWS,
    buffer_size=1500,
    window_size=50,
    alpha=0.1,
    lam=1e-3,
    refit_every=100,
    solve_every=20,
    warmup=200,
    contamination=0.02,
    max_reject_rate=0.5,
    readmit_after=0,
    ratio_floor=1e-6,
    history=2000,
    min_spread=0.0,
    history_clip=None,
    normal_ratio=None,
    repeats=True,
    min_history=100,
    combine="max",
    debounce=75,
    quiet=0.0,
)


@njit(cache=True)
def _debounce(mapped, ring, st, quiet, out):
    """out[t] = mapped[t] if it beats the max of the previous len(ring) mapped values, else quiet x it."""
    d = ring.shape[0]
    for j in range(mapped.shape[0]):
        m = 0.0
        for i in range(min(st[0], d)):
            if ring[i] > m:
                m = ring[i]
        v = mapped[j]
        out[j] = v if v > m else quiet * v
        ring[st[1]] = v
        st[1] = (st[1] + 1) % d
        st[0] += 1


@njit(cache=True)
def _block_means(full, k, w, out):
    """Rows of :func:`block_embed` from ``full`` = the history's last ``k*w - 1`` values + the new
    ones. Each block's mean is summed from its own ``w`` values (w = 1: the value itself), not
    taken as a difference of running sums, whose rounding grows with the series' level and the
    batch's length (at a level of 1e12 that error exceeds a unit noise)."""
    pad = k * w - 1
    for t in range(out.shape[0]):
        for j in range(k):
            i = t + pad - (k - 1 - j) * w - (w - 1)  # the block full[i : i + w]
            if w == 1:
                out[t, j] = full[i]
            else:
                s = 0.0
                for u in range(w):
                    s += full[i + u]
                out[t, j] = s / w


def block_embed(history: np.ndarray, values: np.ndarray, k: int, w: int) -> np.ndarray:
    """Causal block-mean embedding of ``values`` given the preceding ``history`` (>= k*w - 1 values).

    Row t holds the means of the k consecutive blocks of width w ending at ``values[t]``
    (w = 1: the plain subsequence of the newest k values).

    Examples
    --------
    >>> block_embed(np.array([0.0, 1.0, 2.0]), np.array([3.0, 4.0]), k=2, w=2).tolist()
    [[0.5, 2.5], [1.5, 3.5]]
    """
    pad = k * w - 1
    full = np.concatenate([history[history.shape[0] - pad:] if pad else history[:0], values])
    out = np.empty((values.shape[0], k))
    _block_means(full, int(k), int(w), out)
    return out


def _magnitude_message(big: float | None) -> str:
    """Why values beyond :data:`MAX_MAGNITUDE` are refused; ``big`` = their largest magnitude, None
    for a number beyond float64 itself (a Python int such as ``10**400``)."""
    what = (f"values up to {big!r} in magnitude are beyond {MAX_MAGNITUDE:.0e}" if big is not None else
            f"x is beyond the range of float64 (magnitude above {np.finfo(np.float64).max:.3g}), far beyond "
            f"{MAX_MAGNITUDE:.0e}")
    return (f"{what}, where the squared distances "
            "between subsequences overflow float64 and every subsequence would score alike; rescale the "
            "series (divide it by a constant, e.g. change its units)")


class TimeSeriesAnomalyDetector(AnomalyDetector):
    """Causal anomaly scores in [0, 1] for a univariate stream (see the module docstring).

    A river anomaly detector: ``score_one(x)`` scores the next value without changing the state,
    ``learn_one(x)`` learns it; ``x`` is a number or a one-entry dict (``{"value": 3.2}``).
    :meth:`score_series` is the batch form (each value scored, then learned).

    Parameters
    ----------
    views : sequence of (k, w, scale, sigma_factor, n_centres)
        Embeddings scored by separate streaming detectors: ``k`` block means of width ``w``, kernel
        width ``sigma_factor`` x the buffer's ``scale`` ("median" pairwise or "local" 10-NN distance).
    buffer_size, window_size, alpha, lam, refit_every, solve_every, warmup, contamination,
    max_reject_rate
        Passed to every :class:`~ratiowatch.stream.detectors.outlier_stream.StreamingOutlierDetector`
        (the reference buffer should span several periods of the series).
    readmit_after : int or None
        Steps after which a subsequence kept out of a reference buffer joins it after all; None =
        ``buffer_size`` (held out for as long as the buffer remembers), 0 = never (the default).
        Without it a pattern that is rare but normal (the switch of an on/off schedule), once kept
        out, stays out and is flagged at every return.
    ratio_floor : float
        Raw score = ``-log(max(r, ratio_floor))``: the log stretches the small ratios that matter;
        a low floor keeps big and small departures apart (a spike of 10 sigma outranks one of 3).
    history, min_history, min_spread
        Passed to :class:`~ratiowatch.stream.calibration.likelihood.TailProbability` (one per view);
        ``min_spread`` floors the spread of the log-ratio history (0 = none; :data:`MIN_SPREAD`
        is the value derived above).
    history_clip : float or None
        A log-ratio score beyond its history's upper ``history_clip`` tail enters the history at
        that quantile (``clip_tail`` of the tail mapping; None, the default, = as it is); 1e-10 is
        the tail of the score 1.0. One error code (1e6 among values of order 1) leaves the floor's
        score in the history and its spread six times wider for ``history`` rows: half the 5-sd
        anomalies that followed in AR noise were missed, none with 1e-10. Not the default: on
        heavy-tailed series the clipped history is narrower than the scores, and t(3) noise got
        29 rows per 10,000 at 0.5 instead of 21 (docs/experiments.md, "an error code and the
        score history").
    normal_ratio : float or None
        A subsequence whose density ratio is at least this scores 0 (None = no such rule; 1.0: at
        least as dense in the reference as in the mixture of reference and recent window).
    repeats : bool
        Also score runs of exactly repeated values (a stuck sensor), which no density ratio of
        subsequences sees: the tail probability of the run under a Markov chain of the last
        ``history`` rows' repeats (:class:`~ratiowatch.stream.calibration.repeats.RepeatRunTail`),
        combined with the views' scores as one more view (the default; docs/experiments.md, N18).
        Gaps filled by holding the last value are stuck readings to it: fill them otherwise, or
        turn it off.
    combine : {"max", "mean"}
        How the views' mapped scores are combined.
    debounce : int
        Steps a reported score must dominate (0 = no debouncing).
    quiet : float in [0, 1)
        Factor applied to scores that do not beat the recent maximum.
    seed : int

    Examples
    --------
    >>> det = TimeSeriesAnomalyDetector()
    >>> out = []
    >>> for v in np.sin(np.arange(300) / 5.0):
    ...     out.append(det.score_one(v))
    ...     det.learn_one(v)
    >>> all(0.0 <= s <= 1.0 for s in out)
    True
    """

    def __init__(
        self,
        views=DEFAULT_VIEWS,
        buffer_size: int = DEFAULTS["buffer_size"],
        window_size: int = DEFAULTS["window_size"],
        alpha: float = DEFAULTS["alpha"],
        lam: float = DEFAULTS["lam"],
        refit_every: int = DEFAULTS["refit_every"],
        solve_every: int = DEFAULTS["solve_every"],
        warmup: int = DEFAULTS["warmup"],
        contamination: float = DEFAULTS["contamination"],
        max_reject_rate: float = DEFAULTS["max_reject_rate"],
        readmit_after: int | None = DEFAULTS["readmit_after"],
        ratio_floor: float = DEFAULTS["ratio_floor"],
        history: int = DEFAULTS["history"],
        min_history: int = DEFAULTS["min_history"],
        min_spread: float = DEFAULTS["min_spread"],
        history_clip: float | None = DEFAULTS["history_clip"],
        normal_ratio: float | None = DEFAULTS["normal_ratio"],
        repeats: bool = DEFAULTS["repeats"],
        combine: str = DEFAULTS["combine"],
        debounce: int = DEFAULTS["debounce"],
        quiet: float = DEFAULTS["quiet"],
        seed: int = 0,
    ):
        super().__init__()
        # numpy scalars are kept as the Python ones they equal: a checkpoint's JSON takes no other
        self.views = (tuple(tuple(as_plain(e) for e in v) for v in views) if not isinstance(views, (str, bytes))
                      else views)
        self.buffer_size = as_plain(buffer_size)
        self.window_size = as_plain(window_size)
        self.alpha = as_plain(alpha)
        self.lam = as_plain(lam)
        self.refit_every = as_plain(refit_every)
        self.solve_every = as_plain(solve_every)
        self.warmup = as_plain(warmup)
        self.contamination = as_plain(contamination)
        self.max_reject_rate = as_plain(max_reject_rate)
        self.readmit_after = as_plain(readmit_after)
        self.ratio_floor = as_plain(ratio_floor)
        self.history = as_plain(history)
        self.min_history = as_plain(min_history)
        self.min_spread = as_plain(min_spread)
        self.history_clip = as_plain(history_clip)
        self.normal_ratio = as_plain(normal_ratio)
        self.repeats = as_plain(repeats)
        self.combine = as_plain(combine)
        self.debounce = as_plain(debounce)
        self.quiet = as_plain(quiet)
        self.seed = as_plain(seed)
        self._check_params()
        self._build()

    @property
    def params(self) -> dict:
        """The configuration (every constructor argument but ``seed``) as a dict."""
        return {k: getattr(self, k) for k in DEFAULTS}

    @classmethod
    def _unit_test_params(cls):
        yield {"warmup": 50, "buffer_size": 200, "min_history": 20, "history": 200}

    def _check_params(self) -> None:
        if isinstance(self.views, (str, bytes)) or not self.views:
            raise ValueError("views must hold at least one (k, w, scale, sigma_factor, n_centres)")
        for v in self.views:
            if len(v) != 5:
                raise ValueError(f"a view is (k >= 1, w >= 1, scale, sigma_factor, n_centres); got {v}")
            check_int(v[0], "a view's k", minimum=1)
            check_int(v[1], "a view's w", minimum=1)
            check_choice(v[2], "a view's scale", ("median", "local"))
            if not check_real(v[3], "a view's sigma_factor") > 0:
                raise ValueError(f"a view's sigma_factor must be positive; got {v[3]}")
            check_int(v[4], "a view's n_centres", minimum=1)
        check_int(self.debounce, "debounce", minimum=0)
        if not (0.0 <= check_real(self.quiet, "quiet") < 1.0):
            raise ValueError(f"quiet must be in [0, 1); got {self.quiet}")
        check_choice(self.combine, "combine", ("max", "mean"))
        if not isinstance(self.repeats, bool):
            raise ValueError(f"repeats must be True or False; got {self.repeats!r}")
        if not (0.0 < check_real(self.ratio_floor, "ratio_floor") < 1.0):
            raise ValueError(f"ratio_floor must be in (0, 1); got {self.ratio_floor}")
        check_int(self.history, "history", minimum=1)
        if self.readmit_after is not None:
            check_int(self.readmit_after, "readmit_after", minimum=0)
        if not check_real(self.min_spread, "min_spread") >= 0:
            raise ValueError(f"min_spread must be >= 0; got {self.min_spread}")
        if self.history_clip is not None and not 0.0 < check_real(self.history_clip, "history_clip") < 0.5:
            raise ValueError(f"history_clip must be in (0, 0.5) or None; got {self.history_clip}")
        if self.normal_ratio is not None and not check_real(self.normal_ratio, "normal_ratio") > 0:
            raise ValueError(f"normal_ratio must be positive or None; got {self.normal_ratio}")
        check_int(self.min_history, "min_history", minimum=1)
        check_seed(self.seed)
        # the streaming detectors and the tail mappings check the rest when they are built

    def _readmit_after(self) -> int:
        return int(self.buffer_size) if self.readmit_after is None else int(self.readmit_after)

    def _build(self) -> None:
        self._detectors = [
            StreamingOutlierDetector(
                buffer_size=self.buffer_size, window_size=self.window_size, n_centres=nc,
                alpha=self.alpha, sigma_factor=sf, scale=sc, lam=self.lam, refit_every=self.refit_every,
                solve_every=self.solve_every, warmup=self.warmup, contamination=self.contamination,
                max_reject_rate=self.max_reject_rate, readmit_after=self._readmit_after(), seed=int(self.seed) + i)
            for i, (_, _, sc, sf, nc) in enumerate(self.views)
        ]
        min_raw = -np.inf if self.normal_ratio is None else -float(np.log(float(self.normal_ratio)))
        clip = 0.0 if self.history_clip is None else float(self.history_clip)
        self._tails = [TailProbability(history=int(self.history), min_history=int(self.min_history),
                                       min_spread=float(self.min_spread), min_raw=min_raw, clip_tail=clip)
                       for _ in self.views]
        self._repeat_tail = (RepeatRunTail(history=max(int(self.history), 2), min_history=int(self.min_history))
                             if self.repeats else None)
        self._span = max(int(k) * int(w) for k, w, *_ in self.views)
        self._last = np.zeros(0)  # the newest span-1 values
        self._deb_ring = np.zeros(max(int(self.debounce), 1))
        self._deb_st = np.zeros(2, dtype=np.int64)
        self.n_seen = 0

    # --- river API -------------------------------------------------------------------------
    @staticmethod
    def _value(x) -> float:
        if isinstance(x, dict):
            if len(x) != 1:
                raise ValueError(f"x must be one number or a dict with exactly one entry; got keys {list(x)}")
            x = next(iter(x.values()))
        if x is None:  # a missing value, refused as NaN is
            raise ValueError("x must be a number; got None: fill missing values before scoring")
        if isinstance(x, (bool, str, bytes)):
            raise TypeError(f"x must be a number; got {x!r}")
        try:
            v = float(x)
        except OverflowError:  # a Python int beyond float64 (10**400): as refused as 1e300
            raise ValueError(_magnitude_message(None)) from None
        except (TypeError, ValueError):
            raise TypeError(f"x must be a number or a one-entry dict; got {type(x).__name__}") from None
        if not abs(v) <= MAX_MAGNITUDE:  # one comparison: NaN, infinities and overflowing magnitudes
            if not np.isfinite(v):
                raise ValueError(f"x must be finite; got {v}: fill missing values before scoring")
            raise ValueError(_magnitude_message(abs(v)))
        return v

    def learn_one(self, x) -> None:
        """Learn the next value of the stream (a number or a one-entry dict).

        A missing value (NaN or None) is refused with a ``ValueError``: fill it in first.
        """
        self._step(np.array([self._value(x)]))

    def score_one(self, x) -> float:
        """Score of the next value in [0, 1], without learning it: equal to the score
        :meth:`learn_one` gives the same value internally (up to rounding)."""
        v = self._value(x)
        last = self._last if self._last.shape[0] else np.full(self._span, v)
        comb = 0.0
        if self.n_seen >= int(self.warmup):  # before that the ratio scores are placeholders
            floor = float(self.ratio_floor)
            mapped = []
            for (k, w, *_), det, tail in zip(self.views, self._detectors, self._tails):
                emb = block_embed(last, np.array([v]), int(k), int(w))[0]
                ratio = 1.0 - det.score_one(emb)
                mapped.append(tail.peek(-np.log(max(ratio, floor))))
            if self._repeat_tail is not None:
                mapped.append(self._repeat_tail.peek(v))
            comb = max(mapped) if self.combine == "max" else float(np.mean(mapped))
        if int(self.debounce) > 0:
            n = min(int(self._deb_st[0]), self._deb_ring.shape[0])
            recent = float(self._deb_ring[:n].max()) if n else 0.0
            comb = comb if comb > max(recent, 0.0) else float(self.quiet) * comb
        return float(min(max(comb, 0.0), 1.0))

    # --- batch -----------------------------------------------------------------------------
    def score_series(self, values) -> np.ndarray:
        """Score each value of ``values`` before learning it, in order; scores in [0, 1].

        Identical to ``score_one`` then ``learn_one`` per value, and it continues from the current
        state, so a series may be fed in pieces. All or nothing: a batch that is refused (a
        ``ValueError``, e.g. values whose spread float64 cannot resolve) leaves the detector exactly
        as it was, every view, score history and counter included.
        """
        return self._step(values)

    def _step(self, values) -> np.ndarray:
        values = as_samples(values, "values (univariate stream)", min_samples=1, dim=1)[:, 0]
        big = float(np.abs(values).max())
        if big > MAX_MAGNITUDE:  # before anything is learned: a batch that is refused changes no view
            raise ValueError(_magnitude_message(big))
        n = values.shape[0]
        # All or nothing: a view's refit may refuse its reference (e.g. a spread that underflows)
        # after the views before it have learned the batch. The refit is the only step that refuses,
        # so when one may run in this call, the whole state is copied first and put back on any error.
        saved = self._memento() if any(det.may_refit(n) for det in self._detectors) else None
        try:
            return self._learn(values)
        except BaseException:
            if saved is not None:
                self._roll_back(saved)
            raise

    def _memento(self) -> tuple:
        """A copy of everything :meth:`_learn` changes, for :meth:`_roll_back`."""
        tails = [(t._ring.copy(), t._raw_ring.copy(), t._st_f.copy(), t._st_i.copy()) for t in self._tails]
        repeats = self._repeat_tail.state() if self._repeat_tail is not None else None
        return ([det.memento() for det in self._detectors], tails, repeats, self._deb_ring.copy(),
                self._deb_st.copy(), self._last, self.n_seen)

    def _roll_back(self, saved: tuple) -> None:
        views, tails, repeats, deb_ring, deb_st, last, n_seen = saved
        for det, m in zip(self._detectors, views):
            det.roll_back(m)
        for t, (ring, raw_ring, st_f, st_i) in zip(self._tails, tails):
            t._ring[...], t._raw_ring[...], t._st_f[...], t._st_i[...] = ring, raw_ring, st_f, st_i
        if repeats is not None:
            self._repeat_tail.set_state(repeats)
        self._deb_ring[...], self._deb_st[...] = deb_ring, deb_st
        self._last, self.n_seen = last, n_seen

    def _learn(self, values: np.ndarray) -> np.ndarray:
        """:meth:`_step` on checked values (no roll-back)."""
        # before any value: pad the past with the first one
        last = self._last if self._last.shape[0] else np.full(self._span, values[0])
        mapped = np.zeros((len(self.views) + (self._repeat_tail is not None), values.shape[0]))
        floor = float(self.ratio_floor)
        # rows scored before the ratio detectors' first fit (their warm-up) are placeholders: they
        # get 0 and are kept out of the score history
        start = min(max(int(self.warmup) - self.n_seen, 0), values.shape[0])
        # values within MAX_MAGNITUDE have finite block means (their sums stay far below 1.8e308)
        embs = [block_embed(last, values, int(k), int(w)) for k, w, *_ in self.views]
        # every view learns the batch before any score is mapped: only a view can refuse it
        ratios = [1.0 - det.process(emb, learn=True) for emb, det in zip(embs, self._detectors)]
        for i, (ratio, tail) in enumerate(zip(ratios, self._tails)):
            if start < values.shape[0]:
                mapped[i, start:] = tail.transform(-np.log(np.maximum(ratio[start:], floor)))
        if self._repeat_tail is not None:  # repeats are exact from the first row; warm-up rows still get 0
            mapped[-1, start:] = self._repeat_tail.transform(values)[start:]
        full = np.concatenate([last, values])
        self._last = full[full.shape[0] - self._span:]
        comb = mapped.max(axis=0) if self.combine == "max" else mapped.mean(axis=0)
        out = np.empty_like(comb)
        if int(self.debounce) > 0:
            _debounce(comb, self._deb_ring, self._deb_st, float(self.quiet), out)
        else:
            out[:] = comb
        self.n_seen += values.shape[0]
        return np.clip(out, 0.0, 1.0)

    # --- persistence: to_state / from_state (numpy arrays + JSON), never pickle ---------------------------
    def to_state(self) -> dict:
        """Flat dict of numpy arrays and JSON strings (``.npz``-able, no pickle); each view's state
        under the prefix ``view<i>.``."""
        params = {k: (list(map(list, v)) if k == "views" else v) for k, v in self.params.items()}
        out: dict = {"meta": json.dumps({"version": STATE_VERSION, "seed": self.seed, "params": params,
                                         "n_seen": self.n_seen}),
                     "last": self._last.copy(), "deb_ring": self._deb_ring.copy(), "deb_st": self._deb_st.copy()}
        for i, t in enumerate(self._tails):
            out.update({f"tail{i}_ring": t._ring.copy(), f"tail{i}_raw": t._raw_ring.copy(),
                        f"tail{i}_f": t._st_f.copy(), f"tail{i}_i": t._st_i.copy()})
        for i, det in enumerate(self._detectors):
            out.update({f"view{i}.{k}": v for k, v in det.to_state().items()})
        if self._repeat_tail is not None:
            out.update({f"repeats_{k}": v for k, v in self._repeat_tail.state().items()})
        return out

    @classmethod
    def from_state(cls, state) -> "TimeSeriesAnomalyDetector":
        """Rebuild a detector from :meth:`to_state`; it continues exactly where it stopped.

        A state of another format version, another class's, one with an entry missing or a damaged
        one (an array whose shape does not fit the parameters, a ring position or a count out of
        its range) is refused with a ``ValueError`` that names the entry.
        """
        state, meta = open_checkpoint(state, cls.__name__)
        state_version(meta, cls.__name__, readable=(STATE_VERSION,), unversioned=1)
        given = checkpoint_params(meta, cls)
        params = dict(given)
        params.setdefault("repeats", False)  # states written before the repeat view continue without it
        params.setdefault("history_clip", None)  # ... and those before the clipped history without it
        params["views"] = tuple(tuple(v) for v in given["views"])
        det = cls(seed=meta["seed"], **params)
        what = cls.__name__
        # every array is checked against the parameters before it is read: the compiled loops
        # index their rings by these positions and counts, and a wrong shape would be broadcast
        det.n_seen = state_range(meta["n_seen"], "n_seen", what, 0, meta="meta")
        written = np.asarray(state["last"]).shape
        last = state_array(state, "last", (0,) if det.n_seen == 0 and written == (0,) else (det._span,))
        if last.size and not np.abs(last).max() <= MAX_MAGNITUDE:
            raise ValueError(f"not a {what} checkpoint, or a damaged one: 'last' holds values beyond "
                             f"{MAX_MAGNITUDE:.0e} in magnitude")
        det._last = np.array(last, dtype=np.float64)
        d = det._deb_ring.shape[0]
        det._deb_ring[...] = state_array(state, "deb_ring", (d,))
        det._deb_st[...] = state_array(state, "deb_st", (2,), integer=True)
        state_range(det._deb_st[0], "deb_st[0] (scores seen)", what, 0)
        state_range(det._deb_st[1], "deb_st[1] (ring position)", what, 0, d)
        for i, t in enumerate(det._tails):
            h = t._ring.shape[0]
            t._ring[...] = state_array(state, f"tail{i}_ring", (h,))
            t._raw_ring[...] = state_array(state, f"tail{i}_raw", t._raw_ring.shape)
            t._st_f[...] = state_array(state, f"tail{i}_f", (3,))
            t._st_i[...] = state_array(state, f"tail{i}_i", (3,), integer=True)
            for j, (role, high) in enumerate((("count", h + 1), ("ring position", h), ("scores seen", None))):
                state_range(t._st_i[j], f"tail{i}_i[{j}] ({role})", what, 0, high)
        det._detectors = [
            StreamingOutlierDetector.from_state(state.part(f"view{i}.")) for i in range(len(det.views))]
        if det._repeat_tail is not None:
            if "repeats" in given:  # recorded with the repeat view: its arrays are part of the state
                det._repeat_tail.set_state(cls._repeat_arrays(state, det._repeat_tail, what))
            # else written before the repeat view existed (and so without it): it stays off, as
            # params.setdefault above made it
        return det

    @staticmethod
    def _repeat_arrays(state, tail: RepeatRunTail, what: str) -> dict:
        """The repeat view's arrays of a checkpoint, checked against its history."""
        size = tail._ring.shape[0]
        out = {"ring": state_array(state, "repeats_ring", (size,), integer=True),
               "last": state_array(state, "repeats_last", (3,)),
               "st": state_array(state, "repeats_st", (9,), integer=True)}
        if not np.isin(out["ring"], (0, 1)).all():
            raise ValueError(f"not a {what} checkpoint, or a damaged one: 'repeats_ring' holds flags other "
                             "than 0 and 1")
        roles = ("rows seen", "ring position", "run", "flags held", "pairs held", "n1", "n01", "n11",
                 "flags held when the run began")
        for j, role in enumerate(roles):
            high = size if j == 1 else size + 1 if j in (3, 8) else None
            state_range(out["st"][j], f"repeats_st[{j}] ({role})", what, 0, high)
        return out

    def save(self, path) -> None:
        """Write :meth:`to_state` to ``<path>.npz`` (atomically: a crash leaves the old file)."""
        write_state(Path(path).with_suffix(".npz"), self.to_state())

    @classmethod
    def load(cls, path) -> "TimeSeriesAnomalyDetector":
        """Restore a detector written by :meth:`save`; it continues exactly where it stopped."""
        return cls.from_state(read_state(Path(path).with_suffix(".npz")))

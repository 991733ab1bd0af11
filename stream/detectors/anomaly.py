"""Univariate time-series anomaly detection, NAB-style: causal scores in [0, 1].

Pipeline, one value at a time (no access to future points or labels):

1. **subsequence embedding**: the newest ``k`` values ``[y(t-k+1), ..., y(t)]``;
2. **streaming density-ratio novelty** of that subsequence against a long, self-cleaning reference
   buffer of past subsequences (:class:`ratiowatch.stream.detectors.outlier_stream.StreamingOutlierDetector`),
   raw score ``-log r``; several *views* (embeddings and kernel widths) run side by side;
3. **likelihood mapping**: the raw score's Gaussian tail probability against the series' own score
   history (:class:`ratiowatch.stream.calibration.likelihood.TailProbability`), so one threshold serves every series;
   the views' mapped scores are combined by their maximum. The history holds only real scores:
   the placeholders of the ratio detectors' warm-up (before their first fit) never enter it: a run
   of zeros, above the typical real score (``r > 1`` where the reference is dense), would bias the
   mean and inflate the spread for the next ``history`` scores. The ratio floor is low
   (1e-6) so that a far-out point still outranks a merely unusual one instead of both saturating;
4. **debouncing**: a mapped score is reported only when it beats every mapped score of the last
   ``debounce`` steps (one event, one alarm); otherwise the output is scaled down by ``quiet``.

Examples
--------
>>> rng = np.random.default_rng(0)
>>> y = np.sin(np.arange(3000) * 2 * np.pi / 100) + 0.05 * rng.normal(size=3000)
>>> y[2500:2510] += 3.0
>>> s = TimeSeriesAnomalyDetector().score_series(y)
>>> int(np.argmax(s)) in range(2495, 2515)
True
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from numba import njit

from ratiowatch.core.validation import as_samples
from ratiowatch.stream.detectors.outlier_stream import StreamingOutlierDetector
from ratiowatch.stream.calibration.likelihood import TailProbability

#: One view = one embedding and one streaming ratio detector: (k blocks, block width w, kernel scale
#: rule, sigma factor, centres). Short raw subsequences catch spikes and level shifts; a local kernel
#: width catches new levels between known ones; block means over 8 x 8 steps give longer context.
DEFAULT_VIEWS = (
    (8, 1, "median", 1.0, 100),
    (8, 1, "local", 2.0, 200),
    (8, 8, "median", 1.0, 100),
)

#: the default configuration, fixed in code (see the README for the tuning record)
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
    ratio_floor=1e-6,
    history=2000,
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
    c = np.concatenate([[0.0], np.cumsum(full)])
    bm = (c[w:] - c[:-w]) / w  # bm[i] = mean of full[i : i + w]
    n = values.shape[0]
    idx = np.arange(n)[:, None] + pad - (k - 1 - np.arange(k))[None, :] * w - (w - 1)
    return np.ascontiguousarray(bm[idx])


class TimeSeriesAnomalyDetector:
    """Causal anomaly scores in [0, 1] for a univariate stream (see the module docstring).

    Parameters
    ----------
    views : sequence of (k, w, scale, sigma_factor, n_centres)
        Embeddings scored by separate streaming detectors: ``k`` block means of width ``w``, kernel
        width ``sigma_factor`` x the buffer's ``scale`` ("median" pairwise or "local" 10-NN distance).
    buffer_size, window_size, alpha, lam, refit_every, solve_every, warmup, contamination,
    max_reject_rate
        Passed to every :class:`~ratiowatch.stream.detectors.outlier_stream.StreamingOutlierDetector` (the reference
        buffer should span several periods of the series).
    ratio_floor : float
        Raw score = ``-log(max(r, ratio_floor))``: the log stretches the small ratios that matter;
        a low floor keeps big and small departures apart (a spike of 10 sigma outranks one of 3).
    history, min_history
        Passed to :class:`~ratiowatch.stream.calibration.likelihood.TailProbability` (one per view).
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
    >>> all(0.0 <= det.update(v) <= 1.0 for v in np.sin(np.arange(300) / 5.0))
    True
    """

    def __init__(self, seed: int = 0, **params):
        unknown = set(params) - set(DEFAULTS)
        if unknown:
            raise ValueError(f"unknown parameter(s) {sorted(unknown)}; known: {sorted(DEFAULTS)}")
        self.params = {**DEFAULTS, **params}
        self.seed = seed
        p = self.params
        views = tuple(tuple(v) for v in p["views"])
        if not views:
            raise ValueError("views must hold at least one (k, w, scale, sigma_factor, n_centres)")
        for v in views:
            if len(v) != 5 or int(v[0]) < 1 or int(v[1]) < 1:
                raise ValueError(f"a view is (k >= 1, w >= 1, scale, sigma_factor, n_centres); got {v}")
        if int(p["debounce"]) < 0 or not (0.0 <= float(p["quiet"]) < 1.0):
            raise ValueError("debounce must be >= 0 and quiet in [0, 1)")
        if p["combine"] not in ("max", "mean"):
            raise ValueError(f"combine must be 'max' or 'mean'; got {p['combine']!r}")
        if not (0.0 < float(p["ratio_floor"]) < 1.0):
            raise ValueError(f"ratio_floor must be in (0, 1); got {p['ratio_floor']}")
        self.views = views
        self._detectors = [
            StreamingOutlierDetector(
                buffer_size=int(p["buffer_size"]), window_size=int(p["window_size"]),
                n_centres=int(nc), alpha=float(p["alpha"]), sigma_factor=float(sf), scale=str(sc),
                lam=float(p["lam"]), refit_every=int(p["refit_every"]), solve_every=int(p["solve_every"]),
                warmup=int(p["warmup"]), contamination=float(p["contamination"]),
                max_reject_rate=float(p["max_reject_rate"]), seed=seed + i)
            for i, (_, _, sc, sf, nc) in enumerate(views)
        ]
        self._tails = [TailProbability(history=int(p["history"]), min_history=int(p["min_history"]))
                       for _ in views]
        self._span = max(int(k) * int(w) for k, w, *_ in views)
        self._last = np.zeros(0)  # the newest span-1 values
        d = max(int(p["debounce"]), 1)
        self._deb_ring = np.zeros(d)
        self._deb_st = np.zeros(2, dtype=np.int64)
        self.n_seen = 0

    def step(self, values) -> np.ndarray:
        """Score the next values of the stream (each before it is learned); returns scores in [0, 1]."""
        values = as_samples(values, "values (univariate stream)", min_samples=1, dim=1)[:, 0]
        if self._last.shape[0] == 0:  # before any value: pad the past with the first one
            self._last = np.full(self._span, values[0])
        mapped = np.zeros((len(self.views), values.shape[0]))
        floor = float(self.params["ratio_floor"])
        # rows scored before the ratio detectors' first fit (their warm-up) are placeholders: they
        # get 0 and are kept out of the score history
        start = min(max(int(self.params["warmup"]) - self.n_seen, 0), values.shape[0])
        for i, ((k, w, *_), det, tail) in enumerate(zip(self.views, self._detectors, self._tails)):
            emb = block_embed(self._last, values, int(k), int(w))
            ratio = 1.0 - det.process(emb, learn=True)
            if start < values.shape[0]:
                mapped[i, start:] = tail.transform(-np.log(np.maximum(ratio[start:], floor)))
        full = np.concatenate([self._last, values])
        self._last = full[full.shape[0] - self._span:]
        comb = mapped.max(axis=0) if self.params["combine"] == "max" else mapped.mean(axis=0)
        out = np.empty_like(comb)
        if int(self.params["debounce"]) > 0:
            _debounce(comb, self._deb_ring, self._deb_st, float(self.params["quiet"]), out)
        else:
            out[:] = comb
        self.n_seen += values.shape[0]
        return np.clip(out, 0.0, 1.0)

    def update(self, value: float) -> float:
        """Score one new value, then learn it."""
        return float(self.step(np.array([float(value)]))[0])

    def score_series(self, values) -> np.ndarray:
        """Scores of a whole series replayed causally (identical to calling :meth:`update` per value)."""
        return self.step(values)

    # --- persistence: numpy .npz + JSON in a folder, never pickle ---------------------------
    def save(self, folder) -> None:
        """Write the full state to ``folder`` (created): ``detector.json``, ``state.npz`` and one
        ``view<i>.npz/.json`` pair per view."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        params = {k: (list(map(list, v)) if k == "views" else v) for k, v in self.params.items()}
        (folder / "detector.json").write_text(json.dumps({"seed": self.seed, "params": params,
                                                          "n_seen": self.n_seen}))
        arrays = {"last": self._last, "deb_ring": self._deb_ring, "deb_st": self._deb_st}
        for i, t in enumerate(self._tails):
            arrays.update({f"tail{i}_ring": t._ring, f"tail{i}_raw": t._raw_ring,
                           f"tail{i}_f": t._st_f, f"tail{i}_i": t._st_i})
        np.savez(folder / "state.npz", **arrays)
        for i, det in enumerate(self._detectors):
            det.save(folder / f"view{i}")

    @classmethod
    def load(cls, folder) -> "TimeSeriesAnomalyDetector":
        """Restore a detector written by :meth:`save`; it continues exactly where it stopped."""
        folder = Path(folder)
        meta = json.loads((folder / "detector.json").read_text())
        params = dict(meta["params"])
        params["views"] = tuple(tuple(v) for v in params["views"])
        det = cls(seed=meta["seed"], **params)
        det.n_seen = int(meta["n_seen"])
        with np.load(folder / "state.npz") as st:
            det._last = st["last"].copy()
            det._deb_ring[...] = st["deb_ring"]
            det._deb_st[...] = st["deb_st"]
            for i, t in enumerate(det._tails):
                t._ring[...] = st[f"tail{i}_ring"]
                t._raw_ring[...] = st[f"tail{i}_raw"]
                t._st_f[...] = st[f"tail{i}_f"]
                t._st_i[...] = st[f"tail{i}_i"]
        det._detectors = [StreamingOutlierDetector.load(folder / f"view{i}") for i in range(len(det.views))]
        return det

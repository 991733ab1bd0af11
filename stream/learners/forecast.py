"""Forecast-residual anomaly detector on the online weighted SVR.

The detector forecasts the next value of a univariate stream from its last ``k`` values with
:class:`~ratiowatch.stream.learners.wsvm.OnlineWeightedSVR` (sliding window, Cao-Tay time-decay weights, one
path update per sample) and scores a new value by its standardised forecast residual
``|r - mean(r)| / std(r)``, the residual statistics coming from the last ``resid_window``
prequential residuals (each residual is taken before the model learns that value).

The kernel needs a fixed input scale (re-normalising would change every kernel
value and break the path), so the first ``warmup`` values fix a mean and a standard deviation
once; the model is then trained on the warm-up lags in one path update and kept up to date per
sample.
"""

from __future__ import annotations

import json
import math
from collections import deque

import numpy as np
from river.base import AnomalyDetector

from ratiowatch.core.params import check_int

from .wsvm import OnlineWeightedSVR, _as_key, check_state

#: the largest magnitude the detector takes: the warm-up's variance sums squares of deviations up
#: to twice it (4e300 each); squares beyond 1.8e308, of deviations beyond about 1.3e154, overflow
MAX_MAGNITUDE = 1e150
#: the smallest nonzero spread of the warm-up values it takes: squares of deviations below about
#: 1.5e-154 underflow (the smallest normal float64 is 2.2e-308) and the standard deviation comes
#: out 0, or off; a margin of 1e4 keeps them normal
MIN_SPREAD = 1e-150


def _checkpointable_key(key) -> bool:
    """Whether ``key`` comes back equal from a checkpoint (JSON, lists read back as tuples)."""
    if key is None or isinstance(key, (str, bool, int)):
        return True
    if isinstance(key, float):
        return math.isfinite(key)  # NaN is not equal to itself: no feature would ever match it
    if isinstance(key, tuple):
        return all(_checkpointable_key(k) for k in key)
    return False


def _scaled_mean_sd(resid: np.ndarray) -> tuple[float, float]:
    """Mean and standard deviation of ``resid`` computed on ``resid * 2**-e`` with ``2**e`` above its
    largest magnitude (a power of two only moves exponents), so that no square overflows."""
    e = math.frexp(float(np.abs(resid).max()))[1]
    scaled = np.ldexp(resid, -e)
    mean = math.ldexp(float(scaled.mean()), e)
    sd = math.ldexp(math.sqrt(float(scaled.var())), e)
    return mean, (sd if sd > 1e-12 else 1e-12)


class ForecastResidualDetector(AnomalyDetector):
    """Score = standardised residual of an online weighted-SVR one-step forecast.

    Parameters
    ----------
    k : int
        Number of lags the forecast uses.
    window : int
        Training window of the SVR (most recent lag/target pairs).
    C, epsilon, gamma : float
        SVR hyper-parameters on the standardised series (``gamma=None`` means ``1 / k``).
    decay : float
        Cao-Tay steepness of the time-decay weights.
    warmup : int
        Values used to fix the standardisation before learning starts (at least ``k + 2``).
    resid_window : int
        Residuals kept for the score's mean and standard deviation.
    key : None, str, int, float, bool or a tuple of these (nested tuples too), optional
        Feature holding the value; by default ``x`` must have exactly one feature. Other keys
        are refused with a ``ValueError``: a checkpoint stores the key as JSON, and only these
        come back equal to themselves.
    ridge : float
        Diagonal ridge of the SVR dual.

    Examples
    --------
    >>> det = ForecastResidualDetector(k=4, window=60, warmup=30)
    >>> scores = []
    >>> for t in range(150):
    ...     v = np.sin(t / 4) + (4.0 if t == 120 else 0.0)
    ...     scores.append(det.score_one({"v": v}))
    ...     det.learn_one({"v": v})
    >>> int(np.argmax(scores))
    120
    """

    def __init__(self, k: int = 8, window: int = 200, C: float = 1.0, epsilon: float = 0.1,
                 gamma: float | None = None, decay: float = 3.0, warmup: int = 50,
                 resid_window: int = 200, key=None, ridge: float = 1e-6):
        # counts are integers: no silent int(2.5), no bare TypeError of int(None) or ValueError of
        # int(nan) that does not say which parameter (window and decay are checked by the SVR)
        check_int(k, "k", minimum=1)
        if check_int(warmup, "warmup") < int(k) + 2:
            raise ValueError(f"warmup must be at least k + 2 = {int(k) + 2}; got {warmup}")
        check_int(resid_window, "resid_window", minimum=2)
        if not _checkpointable_key(key):
            raise ValueError(f"key must be None, a str, an int, a finite float, a bool or a tuple of these, which a "
                             f"checkpoint restores as it was; got {key!r} ({type(key).__name__})")
        self.k = k
        self.window = window
        self.C = C
        self.epsilon = epsilon
        self.gamma = gamma
        self.decay = decay
        self.warmup = warmup
        self.resid_window = resid_window
        self.key = key
        self.ridge = ridge
        self._svr = OnlineWeightedSVR(window=window, C=C, epsilon=epsilon,
                                      gamma=(1.0 / int(k)) if gamma is None else gamma,
                                      decay=decay, ridge=ridge)
        self._raw: list[float] = []
        self._mu: float | None = None
        self._sd: float = 1.0
        self._lags: deque = deque(maxlen=int(k))
        self._resid: deque = deque(maxlen=int(resid_window))

    # ------------------------------------------------------------------ helpers
    def _value(self, x: dict) -> float:
        if not isinstance(x, dict):
            raise ValueError(f"x must be a dict; got {type(x).__name__}")
        if self.key is not None:
            if self.key not in x:
                raise ValueError(f"x has no feature {self.key!r}")
            v = x[self.key]
        elif len(x) == 1:
            v = next(iter(x.values()))
        else:
            raise ValueError(f"x has {len(x)} features; pass key=... to say which one is the series")
        try:
            v = float(v)
        except (TypeError, ValueError, OverflowError):  # OverflowError: an int beyond float64
            raise ValueError(f"the series value must be a number; got {v!r}") from None
        if not abs(v) <= MAX_MAGNITUDE:  # one comparison: NaN, infinities and overflowing magnitudes
            if not math.isfinite(v):
                raise ValueError("the series value is NaN or infinite; impute it first")
            raise ValueError(f"the series value {v!r} is beyond {MAX_MAGNITUDE:.0e} in magnitude, where the "
                             "squares of the standardisation overflow float64 and every score would be 0; "
                             "rescale the series (divide it by a constant, e.g. change its units)")
        return v

    def _lag_dict(self) -> dict:
        return {i: v for i, v in enumerate(self._lags)}

    def _freeze_and_train(self) -> None:
        raw = np.asarray(self._raw)
        self._mu = float(raw.mean())
        sd = float(raw.std())
        self._sd = sd if sd > 0 else 1.0
        s = (raw - self._mu) / self._sd
        k = int(self.k)
        X = np.lib.stride_tricks.sliding_window_view(s[:-1], k)
        self._svr.learn_batch(np.ascontiguousarray(X), s[k:])
        self._lags.extend(s[-k:].tolist())
        self._raw = []

    def forecast(self) -> float | None:
        """Forecast of the next value in the original units (None during warm-up)."""
        if self._mu is None:
            return None
        return self._svr.predict_one(self._lag_dict()) * self._sd + self._mu

    # ------------------------------------------------------------------ river API
    def learn_one(self, x: dict) -> None:
        """Update the residual statistics and the forecaster with one value."""
        v = self._value(x)
        if self._mu is None:
            if len(self._raw) + 1 >= int(self.warmup):  # checked before the value is kept: a refusal changes nothing
                spread = max(max(self._raw, default=v), v) - min(min(self._raw, default=v), v)
                if 0.0 < spread < MIN_SPREAD:
                    raise ValueError(f"the warm-up values differ by at most {spread:.3g}: squares of deviations "
                                     f"below {MIN_SPREAD:.0e} underflow float64 and the series cannot be "
                                     "standardised; rescale it (multiply it by a constant, e.g. change its units)")
            self._raw.append(v)
            if len(self._raw) >= int(self.warmup):
                self._freeze_and_train()
            return
        s = (v - self._mu) / self._sd
        r = s - self._svr.predict_one(self._lag_dict())
        self._resid.append(r)
        self._svr.learn_one(self._lag_dict(), s)
        self._lags.append(s)

    def score_one(self, x: dict) -> float:
        """Standardised residual of ``x`` against the forecast; pure.

        0.0 during warm-up and until 10 residuals (or ``resid_window`` if smaller) are known.
        """
        v = self._value(x)
        if self._mu is None or len(self._resid) < min(10, int(self.resid_window)):
            return 0.0  # too few residuals for a stable scale
        s = (v - self._mu) / self._sd
        r = s - self._svr.predict_one(self._lag_dict())
        # mean and spread of the residual window afresh (two passes, in C): sums kept by adding the
        # newest residual and subtracting the one that leaves lost the ordinary residuals to rounding
        # beside one huge value (an error code of 9.9e37), and once it had left the sum of squares
        # went negative: every later row scored about 1e11
        resid = np.fromiter(self._resid, dtype=np.float64, count=len(self._resid))
        with np.errstate(over="ignore", invalid="ignore"):
            mean = float(resid.mean())
            var = float(resid.var())
        if not (math.isfinite(mean) and math.isfinite(var)):
            # a value far beyond the warm-up's spread (1e150 on a series of sd 1e-6 standardises to
            # 1e156) leaves a residual whose square overflows: the same statistics on the residuals
            # scaled by a power of two (exact, but for residuals some 1e-308 of the largest)
            mean, sd = _scaled_mean_sd(resid)
        else:
            sd = math.sqrt(var) if var > 1e-24 else 1e-12
        return abs(r - mean) / sd

    # ------------------------------------------------------------------ checkpoints
    def to_state(self) -> dict:
        """Flat dict of arrays, numbers and strings for ``.npz`` + JSON checkpoints (no pickle)."""
        params = self._get_params()
        params["gamma"] = -1.0 if self.gamma is None else float(self.gamma)
        params["key"] = json.dumps(self.key)  # a tuple is written as a JSON list (from_state restores it)
        state = {"version": 1, "class": type(self).__name__, **params,
                 "raw": np.array(self._raw, dtype=np.float64), "has_mu": int(self._mu is not None),
                 "mu": 0.0 if self._mu is None else float(self._mu), "sd": float(self._sd),
                 "lags": np.array(self._lags, dtype=np.float64), "resid": np.array(self._resid, dtype=np.float64)}
        state.update({"svr." + k: v for k, v in self._svr.to_state().items()})
        return state

    @classmethod
    def from_state(cls, state: dict) -> "ForecastResidualDetector":
        """Restore a detector saved by :meth:`to_state`; scores continue identically (another class's
        state, another version's or one with an entry missing is refused with a ``ValueError`` that
        says so)."""
        state = check_state(state, cls)
        gamma = float(state["gamma"])
        obj = cls(k=int(state["k"]), window=int(state["window"]), C=float(state["C"]),
                  epsilon=float(state["epsilon"]), gamma=None if gamma < 0 else gamma,
                  decay=float(state["decay"]), warmup=int(state["warmup"]),
                  resid_window=int(state["resid_window"]), key=_as_key(json.loads(state["key"])),
                  ridge=float(state["ridge"]))
        obj._raw = np.asarray(state["raw"], dtype=np.float64).tolist()
        obj._mu = float(state["mu"]) if int(state["has_mu"]) else None
        obj._sd = float(state["sd"])
        obj._lags.extend(np.asarray(state["lags"], dtype=np.float64).tolist())
        obj._resid.extend(np.asarray(state["resid"], dtype=np.float64).tolist())
        obj._svr = OnlineWeightedSVR.from_state(state.part("svr."))
        return obj

    @classmethod
    def _unit_test_params(cls):
        yield {"k": 3, "window": 40, "warmup": 20}

    def _unit_test_skips(self):
        # river's feature checks drop three keys of each sample: a one-key sample becomes {}, which
        # a univariate detector rightly refuses (ValueError naming ``key``)
        return {"check_emerging_features", "check_disappearing_features"}

"""Synthetic suites for change-point detectors: a change-free null suite and a matching change suite.

Every series is a deterministic function of ``(kind, length, seed)``: the generator is
``np.random.default_rng([seed, crc32(kind), length])`` (never the global RNG), so adding a kind
never changes the series of another.

Null suite (no change anywhere; a reported change is a false one), lengths :data:`LENGTHS`:

* ``ar0``, ``ar05``, ``ar09``: Gaussian AR(1) noise with phi = 0, 0.5, 0.9 (stationary start);
* ``t3``: Student t noise with 3 degrees of freedom;
* ``trend``: ``0.01 t`` plus N(0, 1) noise (one noise sd per 100 samples);
* ``seasonal7``, ``seasonal12``, ``seasonal24``, ``seasonal50``: a sine whose cycle lengths are
  jittered (each cycle lasts ``P (1 + 0.05 z)`` samples, z ~ N(0, 1)), plus N(0, 0.3^2) noise;
* ``sine12``: a sine of period exactly 12 plus N(0, 0.01^2) noise (a clean, strictly periodic signal);
* ``smooth50``: a sine with jittered cycles of period 50 (as the seasonal kinds) plus N(0, 0.01^2)
  noise (a smooth, nearly noise-free cycle);
* ``random_walk``: cumulative sum of N(0, 1);
* ``counts``: Poisson(3) counts;
* ``quantized``: AR(1) (phi = 0.5, sd 1.5) rounded to integers (a handful of distinct values).

Stress suite (:data:`STRESS_KINDS`, ``--suite stress``): change-free series of kinds that real data
has and the null suite does not, scored like the null suite but outside the specification: it
shows where a detector's calibration ends rather than promising anything.

* ``outliers``: N(0, 1) with 1 % gross outliers of 6 to 12 sd (an isolated point is not a change);
* ``zero_inflated``: 0 with probability 0.9, else Poisson(5) (intermittent event counts);
* ``garch``: GARCH(1, 1) with omega 0.1, a 0.1, b 0.8 (stationary volatility clusters);
* ``long_memory``: the sum of AR(1) processes with phi = 1 - 2^-j, j = 1..8, over 3 (about 1/f);
* ``ar099``: AR(1) with phi = 0.99 (near a unit root);
* ``pulses40``: narrow pulses (a Gaussian of 0.04 cycle) on jittered cycles of period 40, plus
  N(0, 0.05^2) noise (a heartbeat sampled coarsely);
* ``two_seasons``: sines of periods 24 and 168 (amplitudes 1 and 0.5) plus N(0, 0.3^2);
* ``sawtooth30``: a sawtooth on jittered cycles of period 30 plus N(0, 0.05^2);
* ``drifting_cycles``: jittered cycles of period 24 whose amplitude (1 + a_t) and second harmonic
  (b_t) wander, a_t and b_t stationary AR(1) processes of sd 0.2 with a time constant of 10 cycles,
  plus N(0, 0.1^2) (a physiological cycle whose shape drifts slowly: breathing, fatigue);
* ``wandering_cycles``: a jittered sine of period 24 on a level that wanders, a stationary AR(1)
  of sd 1 (the cycle's amplitude) with a time constant of 10 cycles, plus N(0, 0.1^2) (a metric
  with a daily cycle whose baseline drifts, an ECG's baseline wander).
* ``schedule288``: a level that switches between 0 and 1 twice per jittered cycle of 288 samples
  (high for 40 % of each cycle), plus N(0, 0.05^2) noise: a daily on/off schedule sampled every 5
  minutes (business hours, a thermostat), whose switches are sharp and whose dwell times outlast a
  short window. It is ``switching100`` of the anomaly suite with a day's period.
* ``spikes288``: a narrow pulse (a Gaussian of 0.01 cycle, about 3 samples) once per jittered
  cycle of 288 samples, plus N(0, 0.05^2) noise: a nightly batch job's spike on a service metric
  sampled every 5 minutes. Unlike ``pulses40``, a window of a hundred samples holds one pulse or
  none.

Anomaly suite kind (:data:`ANOMALY_ONLY_KINDS`; :mod:`ratiowatch.stream.evaluate.anomaly_suite`
scores it, the change-point suites do not):

* ``switching100``: a level that switches between 0 and 1 twice per jittered cycle of 100
  samples (high for 40 % of each cycle), plus N(0, 0.05^2) noise (an on/off schedule, such as
  business hours, whose switches are rare and sharp).

Channels suite (``--suite channels``): streams of :data:`CHANNELS` channels, scored like the null
and change suites (and within the same specification):

* ``channels_<kind>`` (:data:`CHANNEL_NULL_KINDS`): five independent change-free channels of a null
  kind (channel ``c`` of seed ``s`` is ``null_series(kind, T, s + 10,000 (c + 1))``);
* ``channel_mean``, ``channel_variance``: five independent N(0, 1) channels; channel 0 alone
  changes, mean 0 -> 2 -> 0 or sd 1 -> 3 -> 1 (a change of one series among several);
* ``channel_correlation``: five independent N(0, 1) channels; channels 0 and 1 alone become
  correlated, 0 -> 0.9 -> 0.

Change suite (:data:`CHANGE_KINDS`): three segments of :data:`SEGMENT` samples each, changes at
``SEGMENT`` and ``2 SEGMENT`` (the third segment returns to the first regime):

* ``mean``: N(0, 1) -> N(2, 1) -> N(0, 1);
* ``mean_clean``: the same with noise of sd 0.05 and a shift of 1 (20 noise sd): a clean step,
  which a null fitted across the shift takes for a trend or a persistent wander;
* ``mean_ar``: AR(1) phi = 0.5 with unit innovations, mean 0 -> 2 -> 0;
* ``mean_smooth``: AR(1) phi = 0.9 with innovations of sd 0.2, mean 0 -> 2 -> 0: the same step in
  units of the long-run sd (2) as ``mean_ar``, in a smooth series (4.4 marginal sd; lag-1
  autocorrelation 0.9, which the two-window detector differences);
* ``variance``: sd 1 -> 3 -> 1;
* ``correlation``: bivariate standard normal, correlation 0 -> 0.9 -> 0 (margins unchanged);
* ``shape``: jittered sine of period 24 -> square wave of the same period and amplitude -> sine;
* ``frequency``: jittered sine of period 24 -> period 12 -> period 24;
* ``mean_seasonal``: jittered sine of period 24, level 0 -> 1 -> 0 (a shift of the amplitude: a
  service metric with a daily cycle moving up, and back);
* ``mean_alternating``: N(0, 1) whose mean alternates 0, 2, 0, 2, 0, 2 over six segments of half
  the usual length (five changes): a service switching between two states, where an AR model
  fitted across the shifts takes them for persistence (masking).
* ``mean_staircase``: N(0, 1) whose mean steps up or down by 2 (either way with probability 1/2) at
  each of nine changes, ten segments of a tenth of the series (150 samples): a setpoint or a KPI
  that moves in steps, whose level wanders like a random walk's while each segment is flat.
* ``mean_young``: N(0, 1) whose mean moves 0 -> 8 -> 0 over three segments of :data:`YOUNG_SEGMENT`
  (120) samples: a gross step while a stream is young, whose windows are still small. The two
  levels' values hardly overlap (a value 4 sd out of its own level, about 1 in 30,000), so
  windows of any size hold a complete separation.

Each change case carries a *window* ``W``: 50 samples, or three periods for the periodic kinds
(72). A change counts as found when a reported change lies within ``2 W`` of it (offline), or
when an alarm is raised within ``2 W`` after it (streaming; its delay is ``alarm - change``).

Scores:

* offline null: the fraction of change-free series with *any* change point, per kind and length
  (target <= 5 %);
* streaming null: false alarms per 10,000 samples, per kind and length, counting every alarm from
  the first sample on (target <= 1);
* change suite: the fraction of changes found within two windows, the mean location error
  (offline) or delay (streaming), and the changes reported that match none (per 10,000 samples).

Examples
--------
>>> x = null_series("ar05", 200, seed=3)
>>> x.shape, bool(np.array_equal(x, null_series("ar05", 200, seed=3)))
((200,), True)
>>> x = null_series("switching100", 1000, seed=0)
>>> bool(0.3 < np.mean(x > 0.5) < 0.5), int(np.sum(np.abs(np.diff(x)) > 0.5))
(True, 20)
>>> case = change_series("correlation", seed=0)
>>> case.x.shape, case.change_points, case.window
((1500, 2), [500, 1000], 50)
>>> r = score_null_offline(lambda x: [], seeds=2, lengths=(15, 50), kinds=("ar0",))
>>> r["by_length"]["15"]["rate"], r["overall"]["series"]
(0.0, 4)
"""

from __future__ import annotations

import functools
import time
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from ratiowatch.stream.commands.interrupts import failure_reason

LENGTHS: tuple[int, ...] = (15, 50, 100, 200, 600, 2000, 10000)
NULL_KINDS: tuple[str, ...] = ("ar0", "ar05", "ar09", "t3", "trend", "seasonal7", "seasonal12", "seasonal24",
                               "seasonal50", "sine12", "smooth50", "random_walk", "counts", "quantized")
STRESS_KINDS: tuple[str, ...] = ("outliers", "zero_inflated", "garch", "long_memory", "ar099", "pulses40",
                                 "two_seasons", "sawtooth30", "drifting_cycles", "wandering_cycles",
                                 "schedule288", "spikes288")
#: kinds that only the anomaly suite scores (module docstring)
ANOMALY_ONLY_KINDS: tuple[str, ...] = ("switching100",)
CHANGE_KINDS: tuple[str, ...] = ("mean", "mean_clean", "mean_ar", "mean_smooth", "variance", "correlation",
                                 "shape", "frequency", "mean_seasonal", "mean_alternating",
                                 "mean_staircase", "mean_young")
#: channels of the channels suite, and its kinds
CHANNELS = 5
CHANNEL_NULL_KINDS: tuple[str, ...] = ("channels_ar05", "channels_t3", "channels_trend", "channels_seasonal24",
                                       "channels_counts")
CHANNEL_CHANGE_KINDS: tuple[str, ...] = ("channel_mean", "channel_variance", "channel_correlation")
SEGMENT = 500
YOUNG_SEGMENT = 120
WINDOW = 50
CHANGE_PERIOD = 24
#: targets of the protocol (docs/evaluation.md)
TARGET_NULL_OFFLINE = 0.05
TARGET_NULL_STREAMING = 1.0


def _rng(kind: str, length: int, seed: int) -> np.random.Generator:
    return np.random.default_rng([int(seed), zlib.crc32(kind.encode()), int(length)])


def _ar1(rng: np.random.Generator, length: int, phi: float, sd: float = 1.0) -> np.ndarray:
    """Stationary Gaussian AR(1) with marginal sd ``sd`` (scipy's lfilter: no Python loop)."""
    from scipy.signal import lfilter

    e = rng.normal(0.0, sd * np.sqrt(1.0 - phi * phi), size=length)
    x0 = rng.normal(0.0, sd)
    y = lfilter([1.0], [1.0, -phi], e, zi=[phi * x0])[0]
    return y


def _jittered_phase(rng: np.random.Generator, length: int, period: float, jitter: float = 0.05) -> np.ndarray:
    """Phase (in cycles) of a signal whose successive cycles last ``period (1 + jitter z)`` samples."""
    n_cycles = int(np.ceil(length / (period * 0.5))) + 2
    lens = period * np.clip(1.0 + jitter * rng.normal(size=n_cycles), 0.5, 1.5)
    ends = np.cumsum(lens)
    start = rng.uniform(0.0, 1.0)  # random phase at t = 0
    t = np.arange(length, dtype=np.float64) + start * lens[0]
    idx = np.searchsorted(ends, t, side="right")
    prev = np.where(idx > 0, ends[np.maximum(idx - 1, 0)], 0.0)
    return idx + (t - prev) / lens[idx]


def _garch(rng: np.random.Generator, length: int, omega: float = 0.1, a: float = 0.1, b: float = 0.8) -> np.ndarray:
    """GARCH(1, 1) returns, started from the stationary variance omega / (1 - a - b)."""
    e = rng.normal(size=length)
    x = np.empty(length)
    s2 = omega / (1.0 - a - b)
    for t in range(length):  # a generator of test series, not a hot path
        x[t] = np.sqrt(s2) * e[t]
        s2 = omega + a * x[t] * x[t] + b * s2
    return x


def _schedule(rng: np.random.Generator, length: int, period: float) -> np.ndarray:
    """An on/off schedule: 1 for the first 40 % of each jittered cycle, else 0, plus N(0, 0.05^2)."""
    return (_jittered_phase(rng, length, period) % 1.0 < 0.4).astype(np.float64) + rng.normal(0.0, 0.05, size=length)


#: AR(1) coefficient of the stress suite's slow drifts: a time constant of 10 cycles of period 24
_TEN_CYCLES = float(np.exp(-1.0 / (10 * 24.0)))


def _stress_series(kind: str, rng: np.random.Generator, length: int) -> np.ndarray:
    if kind == "outliers":
        x = rng.normal(size=length)
        hit = rng.random(length) < 0.01
        x[hit] += rng.choice([-1.0, 1.0], hit.sum()) * rng.uniform(6.0, 12.0, hit.sum())
        return x
    if kind == "zero_inflated":
        return np.where(rng.random(length) < 0.1, rng.poisson(5.0, length), 0).astype(np.float64)
    if kind == "garch":
        return _garch(rng, length)
    if kind == "long_memory":
        return sum(_ar1(rng, length, 1.0 - 2.0 ** -j) for j in range(1, 9)) / 3.0
    if kind == "ar099":
        return _ar1(rng, length, 0.99)
    if kind == "pulses40":
        phase = _jittered_phase(rng, length, 40.0) % 1.0
        return np.exp(-((phase - 0.5) / 0.04) ** 2) + rng.normal(0.0, 0.05, size=length)
    if kind == "two_seasons":
        t = np.arange(length) + rng.uniform(0.0, 168.0)
        return np.sin(2 * np.pi * t / 24) + 0.5 * np.sin(2 * np.pi * t / 168) + rng.normal(0.0, 0.3, size=length)
    if kind == "sawtooth30":
        return _jittered_phase(rng, length, 30.0) % 1.0 + rng.normal(0.0, 0.05, size=length)
    if kind == "drifting_cycles":
        phase = 2 * np.pi * _jittered_phase(rng, length, 24.0)
        a, b = _ar1(rng, length, _TEN_CYCLES, sd=0.2), _ar1(rng, length, _TEN_CYCLES, sd=0.2)
        return (1.0 + a) * np.sin(phase) + b * np.sin(2 * phase) + rng.normal(0.0, 0.1, size=length)
    if kind == "wandering_cycles":
        phase = 2 * np.pi * _jittered_phase(rng, length, 24.0)
        level = _ar1(rng, length, _TEN_CYCLES, sd=1.0)
        return np.sin(phase) + level + rng.normal(0.0, 0.1, size=length)
    if kind == "schedule288":
        return _schedule(rng, length, 288.0)
    if kind == "spikes288":
        phase = _jittered_phase(rng, length, 288.0) % 1.0
        return np.exp(-((phase - 0.5) / 0.01) ** 2) + rng.normal(0.0, 0.05, size=length)
    raise ValueError(f"unknown null kind {kind!r}; one of {NULL_KINDS + STRESS_KINDS}")


def null_series(kind: str, length: int, seed: int = 0) -> np.ndarray:
    """One change-free series of ``kind`` (the null, the stress or the channels suite's, see the
    module docstring) and ``length``, shape (T,) (channels suite: (T, :data:`CHANNELS`))."""
    length = int(length)
    if length < 1:
        raise ValueError(f"length must be >= 1; got {length}")
    if kind in CHANNEL_NULL_KINDS:
        base = kind[len("channels_"):]
        return np.column_stack([null_series(base, length, seed + 10_000 * (c + 1)) for c in range(CHANNELS)])
    rng = _rng(kind, length, seed)
    if kind in STRESS_KINDS:
        return _stress_series(kind, rng, length)
    if kind in ("ar0", "ar05", "ar09"):
        return _ar1(rng, length, {"ar0": 0.0, "ar05": 0.5, "ar09": 0.9}[kind])
    if kind == "t3":
        return rng.standard_t(3, size=length)
    if kind == "trend":
        return 0.01 * np.arange(length) + rng.normal(size=length)
    if kind.startswith("seasonal") and kind[8:].isdigit():
        phase = _jittered_phase(rng, length, float(kind[8:]))
        return np.sin(2 * np.pi * phase) + rng.normal(0.0, 0.3, size=length)
    if kind == "sine12":
        phase = rng.uniform(0.0, 1.0) + np.arange(length) / 12.0
        return np.sin(2 * np.pi * phase) + rng.normal(0.0, 0.01, size=length)
    if kind == "smooth50":
        return np.sin(2 * np.pi * _jittered_phase(rng, length, 50.0)) + rng.normal(0.0, 0.01, size=length)
    if kind == "random_walk":
        return np.cumsum(rng.normal(size=length))
    if kind == "counts":
        return rng.poisson(3.0, size=length).astype(np.float64)
    if kind == "quantized":
        return np.round(_ar1(rng, length, 0.5, sd=1.5))
    if kind == "switching100":
        return _schedule(rng, length, 100.0)
    raise ValueError(f"unknown null kind {kind!r}; one of "
                     f"{NULL_KINDS + STRESS_KINDS + CHANNEL_NULL_KINDS + ANOMALY_ONLY_KINDS}")


@dataclass(frozen=True)
class ChangeCase:
    """A series with known change points (first index of each new segment) and its window W."""

    kind: str
    x: np.ndarray
    change_points: list[int]
    window: int


def change_series(kind: str, seed: int = 0, segment: int = SEGMENT) -> ChangeCase:
    """One series of the change suite: three segments of ``segment`` samples, or six of half as many
    for ``mean_alternating``, ten of a tenth of the series for ``mean_staircase`` and three of
    :data:`YOUNG_SEGMENT` for ``mean_young`` (module docstring)."""
    seg = YOUNG_SEGMENT if kind == "mean_young" else int(segment)
    length = 3 * seg
    rng = _rng(kind, length, seed)
    cps = [seg, 2 * seg]
    mid = np.zeros(length, dtype=bool)
    mid[seg:2 * seg] = True
    window = WINDOW
    if kind == "mean":
        x = rng.normal(size=length) + 2.0 * mid
    elif kind == "mean_young":
        x = rng.normal(size=length) + 8.0 * mid
    elif kind == "mean_clean":
        x = 0.05 * rng.normal(size=length) + 1.0 * mid
    elif kind == "mean_alternating":
        if seg < 2 or seg % 2:  # six segments of seg / 2 must fill the 3 x seg samples exactly
            raise ValueError(f"mean_alternating needs an even segment >= 2 (six segments of segment / 2 "
                             f"samples fill 3 x segment); got segment={seg}")
        half = seg // 2
        cps = list(range(half, length, half))[:5]
        x = rng.normal(size=length) + 2.0 * ((np.arange(length) // half) % 2 == 1)
    elif kind == "mean_staircase":
        step = length // 10  # ten segments; the last one also holds the remainder of length / 10
        if step < 1:
            raise ValueError(f"mean_staircase needs segment >= 4 (ten segments of a tenth of 3 x segment "
                             f"samples); got segment={seg}")
        cps = [i * step for i in range(1, 10)]
        levels = np.r_[0.0, np.cumsum(2.0 * rng.choice([-1.0, 1.0], size=len(cps)))]
        x = rng.normal(size=length) + levels[np.minimum(np.arange(length) // step, 9)]
    elif kind == "mean_ar":
        x = _ar1(rng, length, 0.5, sd=1.0 / np.sqrt(0.75)) + 2.0 * mid
    elif kind == "mean_smooth":
        x = _ar1(rng, length, 0.9, sd=0.2 / np.sqrt(1.0 - 0.81)) + 2.0 * mid
    elif kind == "variance":
        x = rng.normal(size=length) * np.where(mid, 3.0, 1.0)
    elif kind == "correlation":
        z = rng.normal(size=(length, 2))
        rho = np.where(mid, 0.9, 0.0)
        x = np.column_stack([z[:, 0], rho * z[:, 0] + np.sqrt(1.0 - rho * rho) * z[:, 1]])
    elif kind in CHANNEL_CHANGE_KINDS:
        x = rng.normal(size=(length, CHANNELS))
        if kind == "channel_mean":
            x[:, 0] += 2.0 * mid
        elif kind == "channel_variance":
            x[:, 0] *= np.where(mid, 3.0, 1.0)
        else:
            x[:, 1] = np.where(mid, 0.9 * x[:, 0] + np.sqrt(1.0 - 0.81) * x[:, 1], x[:, 1])
    elif kind in ("shape", "frequency", "mean_seasonal"):
        window = 3 * CHANGE_PERIOD
        if kind == "mean_seasonal":
            x = np.sin(2 * np.pi * _jittered_phase(rng, length, CHANGE_PERIOD)) + 1.0 * mid
        elif kind == "shape":
            phase = _jittered_phase(rng, length, CHANGE_PERIOD)
            s = np.sin(2 * np.pi * phase)
            x = np.where(mid, np.sign(s), s)
        else:
            slow = _jittered_phase(rng, length, CHANGE_PERIOD)
            fast = _jittered_phase(rng, length, CHANGE_PERIOD / 2)
            x = np.where(mid, np.sin(2 * np.pi * fast), np.sin(2 * np.pi * slow))
        x = x + rng.normal(0.0, 0.1, size=length)
    else:
        raise ValueError(f"unknown change kind {kind!r}; one of {CHANGE_KINDS + CHANNEL_CHANGE_KINDS}")
    return ChangeCase(kind, np.asarray(x, dtype=np.float64), cps, window)


# ---------------------------------------------------------------------------------------------- runners
def default_detect() -> Callable[[np.ndarray], list[int]]:
    """The project's offline ``detect``."""
    from ratiowatch.stream.detectors.offline import detect

    return detect


def default_detector_factory(seed: int = 0) -> Callable[[], object]:
    """A factory of the streaming ``ChangePointDetector`` with its defaults (the daemon's ``kind = "window"``)."""
    from ratiowatch.stream.evaluate.streaming import default_factory

    return default_factory(seed)


#: streaming detectors the suites can run by name (their defaults): the two-window
#: ``ChangePointDetector``, the ``SplitProfileDetector``, the latter with its opt-in null of a
#: periodic window's own cycles (``cycle_permutation=True``), the ``PeriodRoutedDetector`` (the
#: daemon's ``kind = "auto"``: the first, handed to the second once the stream shows a period), and
#: the first and the last with the two-window detector's opt-in level view (``level_view=True``),
#: ``auto`` asking its period question across changes too (``with_history=True``), the first and
#: the last with the two-window detector's null line fitted with gross values clipped (``robust_line=True``),
#: and the two-window detector with each of its other estimators (``method=``)
STREAMING_DETECTORS = ("window", "profile", "profile_cycles", "auto", "window_levels", "auto_levels",
                       "auto_history", "window_robust", "auto_robust", "window_ulsif", "window_kliep",
                       "window_lsdd")


def named_factory(name: str, seed: int = 0) -> Callable[[], object]:
    """A factory of the streaming detector ``name`` (one of :data:`STREAMING_DETECTORS`)."""
    from ratiowatch.stream.evaluate.streaming import profile_factory

    if name not in STREAMING_DETECTORS:
        raise ValueError(f"streaming detector must be one of {STREAMING_DETECTORS}; got {name!r}")
    if name == "window":
        return default_detector_factory(seed)
    # the two-window detector's options, by the name's suffix (alone, or inside auto)
    window = {"levels": {"level_view": True}, "robust": {"robust_line": True}, "ulsif": {"method": "ulsif"},
              "kliep": {"method": "kliep"}, "lsdd": {"method": "lsdd"}}.get(name.partition("_")[2], {})
    if name.startswith("auto"):
        from ratiowatch.stream.evaluate.streaming import routed_factory

        return routed_factory(seed, **({"window": window} if window else {}),
                              **({"with_history": True} if name == "auto_history" else {}))
    if name.startswith("window"):
        from ratiowatch.stream.evaluate.streaming import default_factory

        return default_factory(seed, **window)
    return profile_factory(seed, cycle_permutation=name == "profile_cycles")


def _null_stream_row(factory: Callable[[], object], kind: str, length: int, s: int) -> dict:
    """One null-suite series through ``factory()``: its alarm count (a failure is reported, not hidden).

    A series whose detector fails records no alarm, not even those raised before the failure, and
    the scores leave it out (:func:`_scored`): a part of a run is not a measurement of the series."""
    x = null_series(kind, length, s)
    try:
        alarms = stream_alarms(factory(), x)
        err = None
    except Exception as exc:
        alarms, err = [], failure_reason(exc)
    return {"kind": kind, "length": length, "seed": s, "alarms": len(alarms),
            "first_alarm": alarms[0][1] if alarms else None, "error": err}


def _null_stream_cell(args: tuple) -> dict:
    """One null-suite series through a fresh detector ``name`` (a worker of ``jobs > 1``)."""
    name, kind, length, s = args
    return _null_stream_row(named_factory(name), kind, length, s)


def stream_alarms(detector, x: np.ndarray) -> list[tuple[int, int]]:
    """``[(change_index, alarm_index), ...]`` of ``detector`` fed ``x`` causally (see :mod:`.streaming`)."""
    from ratiowatch.stream.evaluate.streaming import stream_alarms as run

    return run(detector, x)


def _cells(kinds, lengths, seeds):
    for kind in kinds:
        for length in lengths:
            for s in range(seeds):
                yield kind, int(length), s


def _table(rows: list[dict], key: str, value: Callable[[list[dict]], dict]) -> dict:
    groups: dict[str, list[dict]] = {}
    for r in rows:
        groups.setdefault(str(r[key]), []).append(r)
    return {k: value(v) for k, v in groups.items()}


def _scored(rows: list[dict]) -> list[dict]:
    """The rows whose detector ran to the end: a failed series is left out of every rate (numerator and
    denominator alike; ``errors`` counts it), since its detector said nothing about it."""
    return [r for r in rows if r["error"] is None]


def _null_report(rows: list[dict], mode: str, seeds: int, target: float, summ: Callable, t0: float) -> dict:
    """The null suite's report: ``summ`` of every kind x length cell, per length, per kind, overall."""
    cells: dict = {}
    for r in rows:
        cells.setdefault(r["kind"], {}).setdefault(str(r["length"]), []).append(r)
    return {"suite": "null", "mode": mode, "seeds": int(seeds), "target": target,
            "cells": {k: {ln: summ(v) for ln, v in d.items()} for k, d in cells.items()},
            "by_length": _table(rows, "length", summ), "by_kind": _table(rows, "kind", summ),
            "overall": summ(rows), "seconds": round(time.perf_counter() - t0, 2),
            "errors": [r for r in rows if r["error"]]}


def score_null_offline(detect: Callable[[np.ndarray], Sequence[int]] | None = None, seeds: int = 5,
                       lengths: Iterable[int] = LENGTHS, kinds: Iterable[str] = NULL_KINDS,
                       progress: Callable[[str], None] | None = None) -> dict:
    """Fraction of change-free series with any change point, per kind x length, per length, per kind.

    ``rate`` = series with >= 1 change point / series; ``in_spec`` = rate <= 5 % and no series failed.
    A series whose ``detect`` raises is left out of ``series`` and the rates, counted in ``errors``
    (and listed in the report's ``errors``); a cell of failures alone has ``rate`` None.
    """
    detect = detect or default_detect()
    rows = []
    t0 = time.perf_counter()
    for kind, length, s in _cells(tuple(kinds), tuple(lengths), int(seeds)):
        x = null_series(kind, length, s)
        try:
            cps = [int(c) for c in detect(x)]
            err = None
        except Exception as exc:  # a failure is reported, not hidden
            cps, err = [], failure_reason(exc)
        rows.append({"kind": kind, "length": length, "seed": s, "n_changes": len(cps), "error": err})
        if progress is not None:
            progress(f"{kind} T={length} seed={s}: {len(cps)} change(s)")

    def summ(rs):
        ok = _scored(rs)
        errors = len(rs) - len(ok)
        hit = sum(r["n_changes"] > 0 for r in ok)
        rate = hit / len(ok) if ok else None
        return {"series": len(ok), "with_change": hit, "rate": None if rate is None else round(rate, 4),
                "changes_per_series": round(float(np.mean([r["n_changes"] for r in ok])), 4) if ok else None,
                "errors": errors, "in_spec": rate is not None and rate <= TARGET_NULL_OFFLINE and not errors}

    return _null_report(rows, "offline", seeds, TARGET_NULL_OFFLINE, summ, t0)


def score_null_streaming(factory: Callable[[], object] | None = None, seeds: int = 5,
                         lengths: Iterable[int] = LENGTHS, kinds: Iterable[str] = NULL_KINDS,
                         progress: Callable[[str], None] | None = None, detector: str = "window",
                         jobs: int = 1) -> dict:
    """False alarms per 10,000 samples of a fresh streaming detector per series (every sample counts).

    ``in_spec`` = rate <= 1 per 10,000 samples and no series failed; a series whose detector raises
    is left out of ``series``, ``samples`` and the rates, counted in ``errors`` (and listed in the
    report's ``errors``); a cell of failures alone has ``per_10k`` None. ``factory()`` builds one
    detector (river API);
    without it, the detector named ``detector`` (:data:`STREAMING_DETECTORS`) with its defaults,
    over ``jobs`` processes.
    """
    rows = []
    t0 = time.perf_counter()

    def record(r):
        rows.append(r)
        if progress is not None:
            progress(f"{r['kind']} T={r['length']} seed={r['seed']}: {r['alarms']} alarm(s)")

    cells = _cells(tuple(kinds), tuple(lengths), int(seeds))
    if factory is None and jobs > 1:
        from multiprocessing import get_context

        with get_context("spawn").Pool(int(jobs)) as pool:  # spawn: no forked numba or BLAS state
            for r in pool.imap(_null_stream_cell, [(detector, *c) for c in cells]):
                record(r)
    else:
        factory = factory or named_factory(detector)
        for c in cells:
            record(_null_stream_row(factory, *c))

    def summ(rs):
        ok = _scored(rs)
        errors = len(rs) - len(ok)
        samples = sum(r["length"] for r in ok)
        n_al = sum(r["alarms"] for r in ok)
        rate = 1e4 * n_al / samples if samples else None
        return {"series": len(ok), "samples": samples, "alarms": n_al,
                "per_10k": None if rate is None else round(rate, 3),
                "series_with_alarm": sum(r["alarms"] > 0 for r in ok),
                "errors": errors, "in_spec": rate is not None and rate <= TARGET_NULL_STREAMING and not errors}

    return _null_report(rows, "streaming", seeds, TARGET_NULL_STREAMING, summ, t0)


def match_offline(truth: Sequence[int], pred: Sequence[int], tolerance: int) -> list[int | None]:
    """For each true change, the distinct prediction within ``tolerance`` matched to it (closest first)."""
    left = sorted(set(int(p) for p in pred))
    pairs = sorted((abs(p - c), i, p) for i, c in enumerate(truth) for p in left if abs(p - c) <= tolerance)
    out: list[int | None] = [None] * len(truth)
    used = set()
    for _, i, p in pairs:
        if out[i] is None and p not in used:
            out[i] = p
            used.add(p)
    return out


def match_streaming(truth: Sequence[int], alarms: Sequence[tuple[int, int]], tolerance: int,
                    length: int) -> list[tuple[int, int] | None]:
    """For each true change c, the first alarm raised in ``[c, min(c + tolerance, next change - 1)]``:
    at most ``tolerance`` samples after c (inclusive, as the offline rule), and before the next change
    (or the end of the series)."""
    out: list[tuple[int, int] | None] = []
    bounds = list(truth) + [int(length)]
    for i, c in enumerate(truth):
        hi = min(c + tolerance, bounds[i + 1] - 1)
        hit = [a for a in alarms if c <= a[1] <= hi]
        out.append(min(hit, key=lambda a: a[1]) if hit else None)
    return out


def _change_summary(rows: list[dict], key: str) -> dict:
    """Changes found (``rate`` None when no series of the group ran to the end)."""
    found = [r["found"] for r in rows]
    errs = [r[key] for r in rows if r[key] is not None]
    out = {"changes": len(rows), "found": int(sum(found)), "rate": round(float(np.mean(found)), 4) if rows else None,
           f"mean_{key}": round(float(np.mean(errs)), 2) if errs else None,
           f"max_{key}": int(max(errs)) if errs else None}
    if key == "delay":  # the streaming suite's
        loc = [r["location_error"] for r in rows if r["location_error"] is not None]
        out["found_in_segment"] = int(sum(r["found_in_segment"] for r in rows))
        out["median_location_error"] = float(np.median(loc)) if loc else None
    return out


def _unmatched_per_10k(series: list[dict]) -> float | None:
    """Reported changes that match none, per 10,000 samples of ``series`` (None for no series)."""
    if not series:
        return None
    return round(1e4 * sum(s["unmatched"] for s in series) / max(1, sum(s["length"] for s in series)), 3)


def _change_scores(rows: list[dict], series: list[dict], key: str, mode: str, seeds: int, t0: float) -> dict:
    """The change suite's report. ``rows`` (one per change) hold only the series whose detector ran to
    the end: a failed series is left out of every count (a failure is not a miss) and listed in
    ``errors``; a kind of failures alone keeps its row, with no change and rates of None."""
    by_kind = {}
    for kind in dict.fromkeys(s["kind"] for s in series):
        rk = [r for r in rows if r["kind"] == kind]
        sk = [s for s in series if s["kind"] == kind and s["error"] is None]
        d = _change_summary(rk, key)
        d["unmatched_per_10k"] = _unmatched_per_10k(sk)
        by_kind[kind] = d
    overall = _change_summary(rows, key)
    scored = [s for s in series if s["error"] is None]
    overall["unmatched_per_10k"] = _unmatched_per_10k(scored) if series else 0.0
    return {"suite": "change", "mode": mode, "seeds": int(seeds), "tolerance": "2 x window",
            "by_kind": by_kind, "overall": overall, "seconds": round(time.perf_counter() - t0, 2),
            "errors": [s for s in series if s["error"]]}


def _change_cases(kinds: Iterable[str], seeds: int, run: Callable[[ChangeCase], list]):
    """(kind, seed, case, output, error) for every series of the change suite; a failure of ``run``
    is reported as its error with an empty output, not hidden."""
    for kind in kinds:
        for s in range(int(seeds)):
            case = change_series(kind, s)
            try:
                out, err = run(case), None
            except Exception as exc:
                out, err = [], failure_reason(exc)
            yield kind, s, case, out, err


def score_change_offline(detect: Callable[[np.ndarray], Sequence[int]] | None = None, seeds: int = 5,
                         kinds: Iterable[str] = CHANGE_KINDS) -> dict:
    """Offline change suite: fraction of changes with a change point within 2 W, location error."""
    detect = detect or default_detect()
    rows, series = [], []
    t0 = time.perf_counter()
    for kind, s, case, pred, err in _change_cases(kinds, seeds, lambda case: [int(c) for c in detect(case.x)]):
        m = match_offline(case.change_points, pred, 2 * case.window)
        for c, p in zip(case.change_points, m) if err is None else ():  # a failure is not a miss
            rows.append({"kind": kind, "seed": s, "length": len(case.x), "change": c, "found": p is not None,
                         "error_abs": None if p is None else abs(p - c)})
        series.append({"kind": kind, "seed": s, "length": len(case.x), "predicted": pred,
                       "unmatched": len(set(pred)) - sum(p is not None for p in m), "error": err})
    return _change_scores(rows, series, "error_abs", "offline", seeds, t0)


def score_change_streaming(factory: Callable[[], object] | None = None, seeds: int = 5,
                           kinds: Iterable[str] = CHANGE_KINDS, detector: str = "window") -> dict:
    """Streaming change suite: fraction of changes alarmed within 2 W after them, and the delay.

    Each change also records whether it was alarmed at all before the next one
    (``found_in_segment``: ``found`` is the specification, alarmed within two windows) and, for
    the first alarm after it, the distance of the alarm's change index from the true change.
    """
    factory = factory or named_factory(detector)
    rows, series = [], []
    t0 = time.perf_counter()
    for kind, s, case, alarms, err in _change_cases(kinds, seeds, lambda case: stream_alarms(factory(), case.x)):
        m = match_streaming(case.change_points, alarms, 2 * case.window, len(case.x))
        late = match_streaming(case.change_points, alarms, len(case.x), len(case.x))
        for c, a, a_late in zip(case.change_points, m, late) if err is None else ():  # a failure is not a miss
            rows.append({"kind": kind, "seed": s, "length": len(case.x), "change": c, "found": a is not None,
                         "delay": None if a is None else a[1] - c, "found_in_segment": a_late is not None,
                         "location_error": None if a_late is None else abs(a_late[0] - c)})
        series.append({"kind": kind, "seed": s, "length": len(case.x), "alarms": alarms,
                       "unmatched": len(alarms) - sum(a is not None for a in m), "error": err})
    return _change_scores(rows, series, "delay", "streaming", seeds, t0)


# ---------------------------------------------------------------------------------------------- report
def failures_line(errors: list[dict], where: Callable[[dict], str]) -> list[str]:
    """``["N series failed (where: first error)"]`` for a report's ``errors``, or ``[]`` for none: a
    failed series is left out of the scores, so the table alone would not show it."""
    if not errors:
        return []
    first = errors[0]
    return [f"{len(errors)} series failed, left out of the scores ({where(first)}: {first['error']})"]


def format_null(res: dict) -> list[str]:
    """Kind x length table of the null suite (offline: % of series with a change; streaming: per 10k);
    ``-`` where every series failed."""
    offline = res["mode"] == "offline"

    def val(d):
        v = d["rate" if offline else "per_10k"]
        if v is None:
            return "-"
        return f"{100 * v:.0f}%" if offline else f"{v:.1f}"

    lengths = list(next(iter(res["cells"].values())).keys())
    head = "offline: % of change-free series with any change" if offline else \
        "streaming: false alarms per 10,000 samples"
    stress = res.get("suite") == "stress"
    if stress:
        head = "stress suite, outside the specification; " + head
    w = max([14] + [len(k) + 2 for k in res["cells"]])
    lines = [f"{head} ({res['seeds']} series per cell; target <= "
             f"{'5%' if offline else '1'})", f"{'kind':{w}s}" + "".join(f"{ln:>8s}" for ln in lengths) + "     all"]
    for kind, d in res["cells"].items():
        mark = "" if res["by_kind"][kind]["in_spec"] else "  *"
        lines.append(f"{kind:{w}s}" + "".join(f"{val(d[ln]):>8s}" for ln in lengths)
                     + f"{val(res['by_kind'][kind]):>8s}{mark}")
    lines.append(f"{'all':{w}s}" + "".join(f"{val(res['by_length'][ln]):>8s}" for ln in lengths)
                 + f"{val(res['overall']):>8s}")
    failed = failures_line(res.get("errors", []), lambda e: f"{e['kind']}/{e['length']} seed {e['seed']}")
    if stress:
        lines.append("(* = above the null suite's target" + (", or a series failed)" if failed else ")"))
    else:
        lines.append("(* = out of spec" + (": above the target, or a series failed)" if failed else ")"))
    return lines + failed


def format_change(res: dict) -> list[str]:
    """Kind table of the change suite, and a line on the series that failed (left out of the counts:
    a failure is not a miss)."""
    key = "mean_error_abs" if res["mode"] == "offline" else "mean_delay"
    label = "mean |error|" if res["mode"] == "offline" else "mean delay"
    seg = "found_in_segment" in res["overall"]
    w = max([12] + [len(k) + 2 for k in res["by_kind"]])
    lines = [f"{res['mode']} change suite: changes found within 2 windows ({res['seeds']} series per kind)",
             f"{'kind':{w}s}{'found':>10s}{label:>14s}{'unmatched/10k':>15s}"
             + (f"{'in segment':>12s}{'median |cp error|':>19s}" if seg else "")]
    for kind, d in list(res["by_kind"].items()) + [("all", res["overall"])]:
        e = "-" if d[key] is None else f"{d[key]:.1f}"
        u = "-" if d["unmatched_per_10k"] is None else f"{d['unmatched_per_10k']:.2f}"
        line = f"{kind:{w}s}{d['found']:>5d}/{d['changes']:<4d}{e:>14s}{u:>15s}"
        if seg:
            loc = "-" if d["median_location_error"] is None else f"{d['median_location_error']:.1f}"
            line += f"{d['found_in_segment']:>12d}{loc:>19s}"
        lines.append(line)
    return lines + failures_line(res.get("errors", []), lambda e: f"{e['kind']} seed {e['seed']}")


def add_arguments(parser) -> None:
    parser.add_argument("--streaming", action="store_true",
                        help="score a streaming detector (false alarms per 10,000 samples; --detector) "
                             "instead of the offline detect()")
    parser.add_argument("--detector", choices=STREAMING_DETECTORS, default="window",
                        help="with --streaming: the two-window ChangePointDetector (default; the daemon's kind = "
                             "'window'), "
                             "the SplitProfileDetector, the SplitProfileDetector with its opt-in cycle null "
                             "(profile_cycles: cycle_permutation=True), or the PeriodRoutedDetector (auto: the "
                             "first, handed to the second once the stream shows a period); window_levels and "
                             "auto_levels: window and auto with the two-window detector's opt-in level view "
                             "(level_view=True); auto_history: auto asking for a period across changes too "
                             "(with_history=True); window_robust and auto_robust: window and auto with the "
                             "two-window detector's null line fitted with gross values clipped (robust_line=True); "
                             "window_ulsif, window_kliep and window_lsdd: the two-window detector with that "
                             "estimator (method=...) instead of RuLSIF")
    parser.add_argument("--smooth-steps", action="store_true",
                        help="offline: the detector's harder search for level steps in smooth series "
                             "(detect(smooth_steps=True); off by default)")
    # offline detect's METHODS, written out: importing the detector here costs every command ~0.8 s
    parser.add_argument("--method", choices=("rulsif", "ulsif"), default="rulsif",
                        help="offline: the split profile's divergence (detect(method=...)); rulsif by default "
                             "(with --streaming the estimator is chosen by --detector window_ulsif and its kin)")
    parser.add_argument("--jobs", type=int, default=1, metavar="J",
                        help="processes for the streaming null and stress suites (default 1)")
    parser.add_argument("--seeds", type=int, default=5, metavar="N",
                        help="series per kind and length (null suite) and per kind (change suite); default 5")
    parser.add_argument("--lengths", type=str, default=",".join(map(str, LENGTHS)),
                        help="comma-separated null-suite lengths (default: all of %(default)s)")
    parser.add_argument("--suite", choices=("null", "change", "both", "stress", "channels"), default="both",
                        help="null and change suites (default both); the stress suite: change-free kinds "
                             "outside the specification (outliers, intermittent counts, volatility clusters, "
                             "long memory, narrow pulses, ...); or the channels suite: five-channel streams, "
                             "change-free or with a change of one channel or one pair")
    parser.add_argument("--kinds", type=str, default=None, metavar="K1,K2",
                        help="comma-separated kinds: score only these kinds of the chosen suite(s) "
                             "(default: every kind)")
    parser.add_argument("--json", action="store_true", help="print the full result as JSON")


def chosen_kinds(suite: str, kinds: str | None) -> dict[str, tuple[str, ...]] | str:
    """The kinds each part of ``suite`` scores (``"null"``, ``"change"``, ``"stress"``), restricted to
    the comma-separated ``kinds`` if given; or a message saying which kinds the suite has.

    Examples
    --------
    >>> chosen_kinds("both", "ar05,mean")
    {'null': ('ar05',), 'change': ('mean',)}
    >>> chosen_kinds("stress", "ar05").split(";")[0]
    "--kinds: ['ar05'] not in --suite stress"
    """
    parts = {"null": {"null": NULL_KINDS}, "change": {"change": CHANGE_KINDS},
             "both": {"null": NULL_KINDS, "change": CHANGE_KINDS}, "stress": {"stress": STRESS_KINDS},
             "channels": {"null": CHANNEL_NULL_KINDS, "change": CHANNEL_CHANGE_KINDS}}[suite]
    if kinds is None:
        return parts
    wanted = [k.strip() for k in kinds.split(",") if k.strip()]
    every = [k for ks in parts.values() for k in ks]
    unknown = [k for k in wanted if k not in every]
    if not wanted or unknown:
        return f"--kinds: {unknown or wanted} not in --suite {suite}; its kinds: {', '.join(every)}"
    return {part: tuple(k for k in ks if k in wanted) for part, ks in parts.items()
            if any(k in wanted for k in ks)}


def seeds_and_lengths(args, prog: str) -> list[int] | None:
    """The lengths of ``args.lengths`` (comma-separated) once ``args.seeds`` and they are valid;
    otherwise None, after saying why on stderr (``prog`` names the command)."""
    import sys

    if args.seeds < 1:
        print(f"{prog}: --seeds must be >= 1; got {args.seeds}", file=sys.stderr)
        return None
    try:
        lengths = [int(v) for v in args.lengths.split(",") if v.strip()]
    except ValueError:
        print(f"{prog}: --lengths must be integers; got {args.lengths!r}", file=sys.stderr)
        return None
    if not lengths or min(lengths) < 1:
        print(f"{prog}: --lengths must be positive; got {args.lengths!r}", file=sys.stderr)
        return None
    return lengths


def run(args) -> int:
    import sys

    lengths = seeds_and_lengths(args, "ratiowatch eval synthetic")
    if lengths is None:
        return 2
    if args.jobs < 1:
        print(f"ratiowatch eval synthetic: --jobs must be >= 1; got {args.jobs}", file=sys.stderr)
        return 2
    if args.detector != "window" and not args.streaming:
        print(f"ratiowatch eval synthetic: --detector {args.detector} is a streaming detector; add --streaming",
              file=sys.stderr)
        return 2
    kinds = chosen_kinds(args.suite, getattr(args, "kinds", None))
    if isinstance(kinds, str):
        print(f"ratiowatch eval synthetic: {kinds}", file=sys.stderr)
        return 2
    smooth_steps = getattr(args, "smooth_steps", False)
    if smooth_steps and args.streaming:
        print("ratiowatch eval synthetic: --smooth-steps is an option of the offline detector; drop --streaming",
              file=sys.stderr)
        return 2
    method = getattr(args, "method", "rulsif")
    if method != "rulsif" and args.streaming:
        print(f"ratiowatch eval synthetic: --method is the offline detector's; with --streaming use --detector "
              f"window_{method}", file=sys.stderr)
        return 2
    out: dict = {"benchmark": "synthetic", "mode": "streaming" if args.streaming else "offline"}
    if args.streaming:
        out["detector"] = args.detector
    offline = default_detect()
    options: dict = {}
    if smooth_steps:
        options["smooth_steps"] = True
    if method != "rulsif":
        options["method"] = method
    if options:
        out["options"] = options
        offline = functools.partial(offline, **options)
    lines: list[str] = []

    def null_scores(kinds):
        if args.streaming:
            return score_null_streaming(seeds=args.seeds, lengths=lengths, kinds=kinds, detector=args.detector,
                                        jobs=args.jobs)
        return score_null_offline(offline, seeds=args.seeds, lengths=lengths, kinds=kinds)

    if "null" in kinds:
        out["null"] = null_scores(kinds["null"])
        lines += format_null(out["null"]) + [""]
    if "stress" in kinds:
        out["stress"] = null_scores(kinds["stress"])
        out["stress"]["suite"] = "stress"
        lines += format_null(out["stress"])
    if "change" in kinds:
        out["change"] = (score_change_streaming(seeds=args.seeds, kinds=kinds["change"], detector=args.detector)
                         if args.streaming else score_change_offline(offline, seeds=args.seeds, kinds=kinds["change"]))
        lines += format_change(out["change"])
    if args.json:
        from ratiowatch.stream.evaluate.environment import environment

        out["environment"] = environment()
    from ratiowatch.stream.evaluate.jsonout import dumps as strict_json

    print(strict_json(out, indent=2) if args.json else "\n".join(lines))
    return 0

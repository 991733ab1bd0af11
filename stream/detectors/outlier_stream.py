"""Streaming inlier-based outlier detection: :class:`StreamingOutlierDetector`.

A river anomaly detector (``learn_one`` / ``score_one``, higher = more anomalous, ``score_one``
pure), the streaming counterpart of :class:`ratiowatch.stream.detectors.outlier.DensityRatioOutlierDetector`
(same ratio, same direction: a LOW ratio means an OUTLIER). It keeps a bounded ring buffer of
recent normal points as numerator and the buffer plus a short window of the latest points as
denominator. The matrices ``H``, ``h`` of the buffered points' kernel rows against fixed centres
are updated by rank-one add/remove in numba (an evicted point's kernel row is made again rather than
kept: the buffer's kernel matrix would be most of the memory); ``theta`` is re-solved every
``solve_every`` points and the centres and kernel width are re-chosen every ``refit_every`` points. Points it flags are kept out of the reference,
unless most recent points are flagged (a lasting change), so a new regime is eventually absorbed.
The class docstring has a runnable example.
"""

from __future__ import annotations

import copy
import json
import math
import warnings
from pathlib import Path

import numpy as np
from numba import njit
from river.base import AnomalyDetector

from ratiowatch.core.kernels import MIN_SCALE, constant_up_to_rounding, gauss_row, median_distance, row_sq_dist
from ratiowatch.core.params import check_bool, check_choice, check_int, check_real, check_seed
from ratiowatch.core.validation import (as_plain, as_samples, check_alpha, checkpoint_class, damaged_state, entry_name,
                                        make_rng, state_array, state_flag, state_range)
from ratiowatch.stream.detectors.outlier import MAX_MAGNITUDE, local_scale
from ratiowatch.stream.detectors.state_file import (checkpoint_params, open_checkpoint, read_state,
                                                     state_version, write_state)

#: checkpoint format of :meth:`StreamingOutlierDetector.to_state`; states written before the
#: version was recorded have none and are this format (read as version 1)
STATE_VERSION = 1


# ============================================================================================
# numba kernels of the streaming state
# ============================================================================================
@njit(cache=True, inline="always")
def _rank_one(s_mat, s_vec, v, sign):
    """(S, s) += sign (v v^T, v) for sign = +1 (a row joins) or -1 (a row leaves)."""
    b = v.shape[0]
    for i in range(b):
        vi = sign * v[i]
        s_vec[i] += vi
        for j in range(b):
            s_mat[i, j] += vi * v[j]


@njit(cache=True, inline="always")
def _swap_rows(s_mat, s_vec, old, new):
    """(S, s) += (new new^T - old old^T, new - old) in one pass over S.

    Each entry loses the old row's term before it gains the new row's, as with
    ``_rank_one(old, -1)`` then ``_rank_one(new, +1)``, so the sums are bit for bit the same; one
    pass instead of two is about a third faster for 200 centres.
    """
    b = new.shape[0]
    for i in range(b):
        oi = -old[i]
        ni = new[i]
        s_vec[i] = (s_vec[i] + oi) + ni
        for j in range(b):
            s_mat[i, j] = (s_mat[i, j] + oi * old[j]) + ni * new[j]


@njit(cache=True)
def _ring_push(buf, phi_buf, count, pos, x, phi, s_mat, s_vec):
    """Write (x, phi) at ``pos`` of a ring, replacing the evicted row's rank-one term in (S, s)."""
    cap = buf.shape[0]
    if count == cap:
        _swap_rows(s_mat, s_vec, phi_buf[pos], phi)
    else:
        count += 1
        _rank_one(s_mat, s_vec, phi, 1.0)
    buf[pos, :] = x
    phi_buf[pos, :] = phi
    return count, (pos + 1) % cap


@njit(cache=True)
def _ref_push(buf, count, pos, x, phi, s_mat, s_vec, centres, sigma, old):
    """:func:`_ring_push` for the reference ring, which keeps no kernel rows: the evicted row's is
    made again into ``old`` by :func:`gauss_row` against the current centres and width, as every
    row of the ring was made (at the last refit or at its push), so it is bit for bit the row that
    was added. Keeping them would cost a (buffer x centres) matrix per detector (megabytes)."""
    cap = buf.shape[0]
    if count == cap:
        gauss_row(buf[pos], centres, sigma, old)
        _swap_rows(s_mat, s_vec, old, phi)
    else:
        count += 1
        _rank_one(s_mat, s_vec, phi, 1.0)
    buf[pos, :] = x
    return count, (pos + 1) % cap


@njit(cache=True)
def _chol_solve_inplace(a, y):
    """Solve ``a z = y`` for symmetric positive definite ``a`` (overwritten by its Cholesky factor).

    Plain loops: for b ~ 64 this beats a LAPACK call from numba, whose fixed overhead dominates.
    """
    n = a.shape[0]
    for j in range(n):
        s = a[j, j]
        for k in range(j):
            s -= a[j, k] * a[j, k]
        if s <= 0.0:
            s = 1e-300  # only reachable for lam -> 0; lam > 0 keeps the matrix definite
        d = math.sqrt(s)
        a[j, j] = d
        for i in range(j + 1, n):
            t = a[i, j]
            for k in range(j):
                t -= a[i, k] * a[j, k]
            a[i, j] = t / d
    for i in range(n):  # forward: L w = y
        t = y[i]
        for k in range(i):
            t -= a[i, k] * y[k]
        y[i] = t / a[i, i]
    for i in range(n - 1, -1, -1):  # backward: L' z = w
        t = y[i]
        for k in range(i + 1, n):
            t -= a[k, i] * y[k]
        y[i] = t / a[i, i]


@njit(cache=True)
def _solve_theta(s_ref, v_ref, n_ref, s_win, n_win, alpha, lam, theta):
    """theta = max(0, (H + lam I)^-1 h), numerator = reference, denominator = reference + window."""
    b = v_ref.shape[0]
    h_mat = np.empty((b, b))
    n_de = n_ref + n_win
    ca = alpha / n_ref
    cd = (1.0 - alpha) / n_de
    for i in range(b):
        for j in range(b):
            h_mat[i, j] = ca * s_ref[i, j] + cd * (s_ref[i, j] + s_win[i, j])
        h_mat[i, i] += lam
    y = v_ref / n_ref
    _chol_solve_inplace(h_mat, y)
    for i in range(b):
        theta[i] = y[i] if y[i] > 0.0 else 0.0


@njit(cache=True)
def _kernel_rows(buf, n, centres, sigma, phi_buf):
    """``phi_buf[i] = gauss_row(buf[i])`` for the first ``n`` rows: the one routine that makes every
    kernel row (refits and pushes alike), so a row made again is bit for bit the same."""
    for i in range(n):
        gauss_row(buf[i], centres, sigma, phi_buf[i])


@njit(cache=True)
def _readmit(held_buf, held_state, centres, sigma, phi, ref_buf, old, ref_state, s_ref, v_ref):
    """Move the oldest held point into the reference (its kernel row against the current centres)."""
    h = held_state[1]
    gauss_row(held_buf[h], centres, sigma, phi)
    c, p = _ref_push(ref_buf, ref_state[0], ref_state[1], held_buf[h], phi, s_ref, v_ref, centres, sigma, old)
    ref_state[0] = c
    ref_state[1] = p
    held_state[1] = (h + 1) % held_buf.shape[0]
    held_state[0] -= 1


@njit(cache=True)
def _run_chunk(xs, centres, sigma, theta, params, ref_buf, ref_state, s_ref, v_ref,
               win_buf, win_phi, win_state, s_win, v_win, held_buf, held_time, held_state, readmit_after,
               learn, out):
    """Score (then optionally learn) the rows of ``xs`` in order; scores written to ``out``.

    params = [alpha, lam, flag threshold, reject-rate decay, max reject rate, solve_every,
    reject rate (EWMA, updated in place)]; ref_state = [count, pos, steps since solve, learned];
    win_state = [count, pos]. A point scoring above the threshold is kept out of the reference
    unless the smoothed reject rate exceeds the maximum; every point joins the window. With
    ``readmit_after`` > 0 a point kept out waits in the ring ``held_buf`` (its learn step in
    ``held_time``; held_state = [count, head]) and joins the reference ``readmit_after`` steps later.
    """
    alpha = params[0]
    lam = params[1]
    thr = params[2]
    decay = params[3]
    max_rate = params[4]
    solve_every = int(params[5])
    b = centres.shape[0]
    phi = np.empty(b)
    old = np.empty(b)  # an evicted reference row's kernel row, made again (_ref_push)
    cap_held = held_buf.shape[0]
    for t in range(xs.shape[0]):
        x = xs[t]
        gauss_row(x, centres, sigma, phi)
        r = 0.0
        for i in range(b):
            r += phi[i] * theta[i]
        score = 1.0 - r
        out[t] = score
        if not learn:
            continue
        flagged = 1.0 if score > thr else 0.0
        params[6] = (1.0 - decay) * params[6] + decay * flagged  # reject rate (EWMA)
        admit = flagged == 0.0 or params[6] > max_rate
        if admit:
            c, p = _ref_push(ref_buf, ref_state[0], ref_state[1], x, phi, s_ref, v_ref, centres, sigma, old)
            ref_state[0] = c
            ref_state[1] = p
        c, p = _ring_push(win_buf, win_phi, win_state[0], win_state[1], x, phi, s_win, v_win)
        win_state[0] = c
        win_state[1] = p
        # from here on phi is free: the readmissions below use it for the held points' kernel rows
        if not admit and readmit_after > 0:
            if held_state[0] == cap_held:  # full: the oldest held point joins early (bounded memory)
                _readmit(held_buf, held_state, centres, sigma, phi, ref_buf, old, ref_state, s_ref, v_ref)
            k = (held_state[1] + held_state[0]) % cap_held
            for j in range(x.shape[0]):
                held_buf[k, j] = x[j]
            held_time[k] = ref_state[3]
            held_state[0] += 1
        while held_state[0] > 0 and ref_state[3] - held_time[held_state[1]] >= readmit_after:
            _readmit(held_buf, held_state, centres, sigma, phi, ref_buf, old, ref_state, s_ref, v_ref)
        ref_state[2] += 1
        ref_state[3] += 1
        if ref_state[2] >= solve_every:
            _solve_theta(s_ref, v_ref, float(ref_state[0]), s_win, float(win_state[0]), alpha, lam, theta)
            ref_state[2] = 0


@njit(cache=True)
def _farthest_point(x, b, start):
    """Greedy farthest-point (k-centre) subset of ``b`` rows, starting from row ``start``."""
    n = x.shape[0]
    idx = np.empty(b, dtype=np.int64)
    dmin = np.full(n, np.inf)
    cur = start
    for k in range(b):
        idx[k] = cur
        best = -1.0
        nxt = 0
        for i in range(n):
            s = row_sq_dist(x, i, x, cur)
            if s < dmin[i]:
                dmin[i] = s
            if dmin[i] > best:
                best = dmin[i]
                nxt = i
        cur = nxt
    return idx


# ============================================================================================
# streaming detector
# ============================================================================================
def _magnitude_message(what: str) -> str:
    return (f"{what}: squared distances between values beyond {MAX_MAGNITUDE:.0e} overflow float64 and "
            "every point would score alike; rescale the values first (divide them by a constant, or "
            "standardise them)")


def _beyond_float64_message() -> str:
    return _magnitude_message(f"x holds a value beyond the range of float64 (magnitude above "
                              f"{np.finfo(np.float64).max:.3g})")


def _check_magnitude(xs: np.ndarray) -> np.ndarray:
    big = float(np.abs(xs).max())
    if big > MAX_MAGNITUDE:
        raise ValueError(_magnitude_message(f"X holds values up to {big!r}"))
    return xs


def _check_spread(ref: np.ndarray) -> None:
    """Refuse reference points that differ, but by less than :data:`~ratiowatch.core.kernels.MIN_SCALE`
    (about 1e-150): squared distances below about 1e-300 underflow float64 (the smallest normal is
    2.2e-308), the kernel width falls back to 1 and every point scores alike. Equal points are no
    such case (a constant stream, scored as such)."""
    spread = float(np.ptp(ref, axis=0).max()) if ref.size else 0.0
    if 0.0 < spread < MIN_SCALE:
        raise ValueError(f"the reference points differ by at most {spread:.3g}: squared distances that small "
                         "underflow float64 and every point would score alike; rescale the values first "
                         "(multiply them by a constant, or standardise them)")




#: dict keys a :class:`StreamingOutlierDetector` takes as feature names: they are kept in its
#: checkpoints (JSON) and come back as keys that match the same dicts
KEY_TYPES = "str, int (numpy integers included) or tuples of these"


def _feature_key(k):
    """A dict key as the detector keeps it: numpy integers become ``int`` (equal, same hash, so the
    same dicts match), tuples are checked element by element; any other type is refused, as a
    checkpoint could not give it back."""
    if isinstance(k, str):
        return str(k)
    if isinstance(k, (int, np.integer)):
        return int(k)
    if isinstance(k, tuple):
        return tuple(_feature_key(e) for e in k)
    raise ValueError(f"x has the key {k!r} of type {type(k).__name__}; feature names must be {KEY_TYPES} "
                     "(a checkpoint could not restore other keys): rename the features, e.g. with str(key)")


def _decode_key(k):
    """A feature name read back from a checkpoint's JSON: lists (JSON's tuples) become tuples again."""
    return tuple(_decode_key(e) for e in k) if isinstance(k, list) else k


class FeatureSetWarning(UserWarning):
    """A dict sample's keys differ from the features the detector learned (see the input policy)."""


class StreamingOutlierDetector(AnomalyDetector):
    """Streaming density-ratio outlier detector with a bounded, self-cleaning reference buffer.

    ``score_one(x)`` returns ``1 - r(x)`` where ``r`` is the alpha-relative ratio of the reference
    buffer (numerator) against buffer + recent window (denominator): about 0 for typical points, up
    to 1 for points far from everything in the buffer (higher = more anomalous). Before the first
    fit (``warmup`` points) the score is 0.

    Parameters
    ----------
    buffer_size : int
        Capacity of the reference ring buffer (recent normal points).
    window_size : int
        Latest points (flagged or not) that join the denominator.
    n_centres : int
        Gaussian centres, re-chosen from the buffer at every refit.
    alpha : float in [0, 1)
        Relative-ratio weight; bounds the ratio by ``1/alpha``.
    sigma_factor : float
        Kernel width = ``sigma_factor`` x the buffer's scale (re-estimated at every refit).
        Ignored when ``select`` is True.
    scale : {"median", "local"}
        The scale: median pairwise distance, or median distance to the 10th nearest neighbour
        (:func:`local_scale`).
    lam : float
        Ridge strength. Ignored when ``select`` is True.
    select : bool
        Choose (sigma, lambda) by exact LOOCV (``ratiowatch.core.rulsif.loocv_scores``) on a subsample at
        every refit instead of the median rule.
    centres : {"farthest", "random"}
        Farthest-point centres cover the whole buffer (rare-but-normal modes keep a centre).
    refit_every, solve_every : int
        Points between refits of centres and width, and between re-solves of ``theta``.
    warmup : int
        Points learned before the first fit.
    contamination : float
        Points scoring above the (1 - contamination) quantile of the buffer's own scores are
        flagged and kept out of the buffer ...
    max_reject_rate : float
        ... unless the smoothed fraction of flagged points exceeds this rate (a lasting change):
        then points are admitted again, so the buffer follows the new regime.
    readmit_after : int
        Steps after which a point kept out joins the reference after all (0 = never). A pattern
        that is rare but normal is then locked out for at most this long, while a repeat of an
        anomaly within that time is still scored against a reference without it.
    seed : int
        Drives the random centre choice and subsamples.

    Notes
    -----
    Input: ``learn_one`` / ``score_one`` take a dict (feature -> number) or a 1-d array-like (list,
    tuple, ndarray); the first sample fixes which. A dict whose keys differ from the learned ones
    follows a documented policy, with a :class:`FeatureSetWarning`: a new key is left out (the
    fitted model has no dimension for it); a missing key is never filled in: ``score_one`` scores
    the sample on the features it has and ``learn_one`` skips it. A sample with none of the learned
    features has nothing to be scored on: ``score_one`` refuses it with a ``ValueError`` (a score
    would rank it as normal as can be) and ``learn_one`` skips it. ``process`` takes an (n, d)
    array whose columns follow the learned order (sorted keys, or positions). Dict keys must be
    str, int (numpy integers included) or tuples of these, so that a checkpoint gives back keys
    that match the same dicts; other keys are refused at the first sample with a ``ValueError``.
    A refused sample changes nothing: a first sample refused (NaN, say) fixes no features.

    Updates are all or nothing: when a refit refuses the reference (a ``ValueError``: e.g. points
    that differ by less than float64 can resolve), the call learns nothing and leaves the detector
    as it was, so it learns again once the data can be fitted.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> det = StreamingOutlierDetector(warmup=100, refit_every=100)
    >>> for v in rng.normal(size=(300, 2)):
    ...     det.learn_one({"a": v[0], "b": v[1]})
    >>> det.score_one({"a": 0.0, "b": 0.0}) < det.score_one({"a": 8.0, "b": 8.0})
    True
    """

    def __init__(
        self,
        buffer_size: int = 500,
        window_size: int = 50,
        n_centres: int = 64,
        alpha: float = 0.1,
        sigma_factor: float = 1.0,
        scale: str = "median",
        lam: float = 0.1,
        select: bool = False,
        centres: str = "farthest",
        refit_every: int = 500,
        solve_every: int = 32,
        warmup: int = 100,
        contamination: float = 0.02,
        max_reject_rate: float = 0.5,
        readmit_after: int = 0,
        seed: int = 0,
    ):
        super().__init__()
        # numpy scalars are kept as the Python ones they equal: a checkpoint's JSON takes no other
        self.buffer_size = as_plain(buffer_size)
        self.window_size = as_plain(window_size)
        self.n_centres = as_plain(n_centres)
        self.alpha = as_plain(alpha)
        self.sigma_factor = as_plain(sigma_factor)
        self.scale = as_plain(scale)
        self.lam = as_plain(lam)
        self.select = as_plain(select)
        self.centres = as_plain(centres)
        self.refit_every = as_plain(refit_every)
        self.solve_every = as_plain(solve_every)
        self.warmup = as_plain(warmup)
        self.contamination = as_plain(contamination)
        self.max_reject_rate = as_plain(max_reject_rate)
        self.readmit_after = as_plain(readmit_after)
        self.seed = as_plain(seed)
        self._check_params()
        self._features: list | None = None
        self._keyed = True
        self._dim = 0
        self._fitted = False
        self._n_learned = 0

    @property
    def _is_stochastic(self):
        return True

    @classmethod
    def _unit_test_params(cls):
        yield {"warmup": 50, "refit_every": 64, "buffer_size": 200, "n_centres": 32}

    # --- validation and allocation ------------------------------------------------------
    def _check_params(self) -> None:
        check_alpha(check_real(self.alpha, "alpha"))
        for name in ("buffer_size", "window_size", "n_centres", "refit_every", "solve_every", "warmup"):
            check_int(getattr(self, name), name, minimum=1)
        if int(self.warmup) < 10:
            raise ValueError(f"warmup must be >= 10 points; got {self.warmup}")
        if int(self.warmup) > int(self.buffer_size):
            raise ValueError(f"warmup ({self.warmup}) cannot exceed buffer_size ({self.buffer_size})")
        if not (check_real(self.sigma_factor, "sigma_factor") > 0 and check_real(self.lam, "lam") > 0):
            raise ValueError(f"sigma_factor and lam must be positive; got {self.sigma_factor}, {self.lam}")
        check_choice(self.scale, "scale", ("median", "local"))
        check_choice(self.centres, "centres", ("farthest", "random"))
        check_bool(self.select, "select")
        check_int(self.readmit_after, "readmit_after", minimum=0)
        check_seed(self.seed)
        if not (0.0 < check_real(self.contamination, "contamination") < 1.0) or not (
                0.0 < check_real(self.max_reject_rate, "max_reject_rate") <= 1.0):
            raise ValueError("contamination must be in (0, 1) and max_reject_rate in (0, 1]")

    def _allocate(self, dim: int) -> None:
        self._dim = dim
        cap, w, b = int(self.buffer_size), int(self.window_size), int(self.n_centres)
        self._ref_buf = np.zeros((cap, dim))
        self._ref_state = np.zeros(4, dtype=np.int64)  # count, pos, since_solve, learned
        self._s_ref = np.zeros((b, b))
        self._v_ref = np.zeros(b)
        self._win_buf = np.zeros((w, dim))
        self._win_phi = np.zeros((w, b))
        self._win_state = np.zeros(2, dtype=np.int64)
        self._s_win = np.zeros((b, b))
        self._v_win = np.zeros(b)
        self._centres = np.zeros((b, dim))
        self._theta = np.zeros(b)
        # points kept out of the reference, waiting to be readmitted (readmit_after > 0)
        self._held_buf = np.zeros((cap if int(self.readmit_after) > 0 else 1, dim))
        self._held_time = np.zeros(self._held_buf.shape[0], dtype=np.int64)
        self._held_state = np.zeros(2, dtype=np.int64)  # count, head
        self._sigma = 1.0
        self._lam = float(self.lam)
        # alpha, lam, threshold, reject decay, max reject rate, solve_every, reject rate
        self._params = np.array([float(self.alpha), float(self.lam), np.inf, 0.02,
                                 float(self.max_reject_rate), float(self.solve_every), 0.0])
        self._rng = make_rng(self.seed)
        self._out1 = np.zeros(1)
        self._phi1 = np.zeros(b)

    # --- input <-> vector ------------------------------------------------------------------
    # Policy: the first sample fixes the features (the ratio lives in a space of fixed dimension).
    # A dict's keys become the feature names (sorted); an array-like (list, tuple, ndarray) gives
    # features 0..d-1 by position and must keep its length. When a dict's keys change:
    # - a new key cannot enter the fitted model: it is left out, with a FeatureSetWarning naming it;
    # - a missing key is not filled in: score_one scores the sample on the features it has (a
    #   missing coordinate contributes no distance to any centre, so it adds no evidence either
    #   way), and learn_one does not learn the incomplete sample; both warn. A sample with no
    #   learned feature at all would be at distance 0 from every centre, the most normal score
    #   there is: score_one refuses it (ValueError), learn_one skips it as any incomplete sample.
    # The warning text names the keys, so each new key set is reported (Python shows a given
    # warning once per call site by default).
    def _init_features(self, x) -> None:
        if isinstance(x, dict):
            if not x:
                raise ValueError("x is an empty dict; a sample needs at least one feature")
            self._features = sorted((_feature_key(k) for k in x.keys()), key=str)
            self._keyed = True
        else:
            v = self._array(x)
            self._features = list(range(v.shape[0]))
            self._keyed = False
        self._allocate(len(self._features))

    def _array(self, x) -> np.ndarray:
        if isinstance(x, (str, bytes)) or not hasattr(x, "__len__"):
            raise TypeError(f"x must be a dict of feature -> number or a 1-d array-like of numbers "
                            f"(list, tuple, ndarray); got {type(x).__name__}")
        try:
            v = np.asarray(x, dtype=np.float64)
        except OverflowError:  # a Python int beyond float64
            raise ValueError(_beyond_float64_message()) from None
        except (TypeError, ValueError) as exc:
            raise ValueError(f"x must hold numbers only; got {x!r} ({exc})") from None
        if v.ndim != 1 or v.shape[0] == 0:
            raise ValueError(f"x must be one sample (a 1-d array-like of numbers); got shape {v.shape}")
        return v

    def _vector(self, x) -> tuple[np.ndarray, np.ndarray | None]:
        """The sample as a vector in the learned feature order, and the mask of observed features
        (None when every learned feature is present)."""
        if self._features is None:
            raise RuntimeError("no features yet")
        mask = None
        if isinstance(x, dict):
            if not self._keyed:
                raise TypeError(f"this detector learned array-like samples of {self._dim} features; "
                                "pass an array-like, not a dict")
            try:
                try:  # the usual case, kept fast: exactly the learned keys
                    out = np.array([x[f] for f in self._features], dtype=np.float64)
                    same = len(x) == self._dim
                except KeyError:
                    out = np.array([x[f] if f in x else 0.0 for f in self._features], dtype=np.float64)
                    same = False
            except OverflowError:  # a Python int beyond float64
                raise ValueError(_beyond_float64_message()) from None
            except (TypeError, ValueError) as exc:
                raise ValueError(f"x must map feature names to numbers; got {x!r} ({exc})") from None
            if not same:
                known = set(self._features)
                new = [k for k in x if k not in known]
                if new:
                    warnings.warn(f"x has keys {sorted(new, key=str)} this detector did not learn (it "
                                  f"learned {self._features}); they are left out", FeatureSetWarning,
                                  stacklevel=3)
                if len(x) - len(new) < self._dim:
                    mask = np.array([f in x for f in self._features])
        else:
            if self._keyed:
                raise TypeError(f"this detector learned dict samples with keys {self._features}; "
                                "pass a dict with those keys")
            out = self._array(x)
            if out.shape[0] != self._dim:
                raise ValueError(f"x has {out.shape[0]} values but this detector learned samples of "
                                 f"{self._dim} features")
        # one comparison (the cost of the finiteness check it replaces) refuses NaN, infinities and
        # magnitudes whose squared distances overflow
        if not np.abs(out).max() <= MAX_MAGNITUDE:
            if not np.isfinite(out).all():
                raise ValueError(f"x holds NaN or infinite values: {x!r}; clean or impute them first")
            raise ValueError(_magnitude_message(f"x holds values up to {float(np.abs(out).max())!r}"))
        return out, mask

    def _missing(self, mask: np.ndarray, action: str) -> None:
        missing = [f for f, m in zip(self._features, mask) if not m]
        warnings.warn(f"x lacks the learned feature(s) {missing}; {action}", FeatureSetWarning, stacklevel=3)

    # --- refit -----------------------------------------------------------------------------
    def _refit(self) -> None:
        n = int(self._ref_state[0])
        ref = np.ascontiguousarray(self._ref_buf[:n])
        _check_spread(ref)  # a reference that has shrunk below the bound since the first fit
        nw = int(self._win_state[0])
        win = np.ascontiguousarray(self._win_buf[:nw])
        b = int(self.n_centres)
        if n <= b:
            cidx = np.arange(n)
            cidx = np.concatenate([cidx, self._rng.choice(n, size=b - n, replace=True)]) if n < b else cidx
        elif self.centres == "farthest":
            cidx = _farthest_point(ref, b, int(self._rng.integers(n)))
        else:
            cidx = self._rng.choice(n, size=b, replace=False)
        self._centres = np.ascontiguousarray(ref[cidx])
        seed = int(self._rng.integers(2**31))
        if constant_up_to_rounding(ref):  # as if constant: a width of ulps would make rounding a maximal outlier
            med = 1.0
        elif self.scale == "local":
            med = local_scale(ref, max_query=300, seed=seed)
        else:
            med = median_distance(ref, max_points=300, seed=seed)
        sigma, lam = float(self.sigma_factor) * med, float(self.lam)
        if self.select:
            sigma, lam = self._select(ref, win, med)
        self._sigma, self._lam = sigma, lam
        self._params[1] = lam
        # full recompute of the kernel rows and sums bounds the rank-one drift
        ref_phi = np.empty((n, b))  # the reference's kernel rows, needed only here (see _ref_push)
        _kernel_rows(ref, n, self._centres, sigma, ref_phi)
        self._s_ref[:] = ref_phi.T @ ref_phi
        self._v_ref[:] = ref_phi.sum(axis=0)
        if nw:
            _kernel_rows(win, nw, self._centres, sigma, self._win_phi)
        self._s_win[:] = self._win_phi[:nw].T @ self._win_phi[:nw]
        self._v_win[:] = self._win_phi[:nw].sum(axis=0)
        _solve_theta(self._s_ref, self._v_ref, float(n), self._s_win, float(nw),
                     float(self.alpha), lam, self._theta)
        ref_scores = 1.0 - ref_phi @ self._theta
        self._params[2] = float(np.quantile(ref_scores, 1.0 - float(self.contamination)))
        self._ref_state[2] = 0
        self._fitted = True
        self._since_refit = 0

    def _select(self, ref: np.ndarray, win: np.ndarray, med: float) -> tuple[float, float]:
        from ratiowatch.core.rulsif import loocv_scores
        from ratiowatch.core.selection import LAMBDAS

        m = min(200, ref.shape[0])
        nu = ref[self._rng.choice(ref.shape[0], size=m, replace=False)]
        pool = np.vstack([ref, win]) if win.shape[0] else ref
        de = pool[self._rng.choice(pool.shape[0], size=m, replace=False)]
        best = (np.inf, float(self.sigma_factor) * med, float(self.lam))
        for f in (0.25, 0.5, 1.0, 2.0):
            sc = loocv_scores(nu, de, self._centres, f * med, LAMBDAS, float(self.alpha))
            j = int(np.argmin(sc))
            if sc[j] < best[0]:
                best = (float(sc[j]), f * med, float(LAMBDAS[j]))
        return best[1], best[2]

    # --- numpy fast path ---------------------------------------------------------------
    def process(self, X, learn: bool = True) -> np.ndarray:
        """Score every row of ``X`` in order (each before it is learned); learn it when ``learn``.

        Equivalent to ``score_one`` then ``learn_one`` per row, without the per-row dict cost.
        All or nothing: when a refit refuses the reference (a ``ValueError``, e.g. a spread too
        small for float64), no row of ``X`` is learned and the detector is left exactly as it was
        before the call, so it learns again as soon as it is given data it can fit.
        """
        fresh = self._dim == 0
        if fresh:
            x0 = _check_magnitude(as_samples(X, "X", min_samples=1))  # before the features are fixed
            features, keyed = self._features, self._keyed
            self._allocate(x0.shape[1])
            if self._features is None:
                self._features = list(range(x0.shape[1]))
                self._keyed = False
        try:
            xs = _check_magnitude(as_samples(X, "X", min_samples=1, dim=self._dim))
            # only a refit can refuse rows: keep a copy of the state when one may run in this call
            snap = self._snapshot() if learn and self.may_refit(xs.shape[0]) else None
        except BaseException:
            if fresh:
                self._dim, self._features, self._keyed = 0, features, keyed
            raise
        try:
            return self._process(xs, learn)
        except BaseException:
            if snap is not None:
                self._restore(snap)
            if fresh:  # the features this call fixed are unfixed again
                self._dim, self._features, self._keyed = 0, features, keyed
            raise

    def may_refit(self, n: int) -> bool:
        """Whether learning ``n`` more points may run a refit: the only step that can refuse points
        (a ``ValueError``), so the only one before which an update keeps a copy to roll back to."""
        if not self._dim:
            return int(n) >= int(self.warmup)
        if self._fitted:
            return self._since_refit + int(n) >= int(self.refit_every)
        return int(self._ref_state[0]) + int(n) >= int(self.warmup)

    def memento(self) -> tuple:
        """A copy of the whole learned state, also before the first sample, for :meth:`roll_back`:
        what lets a caller that updates several detectors undo the updates of all when one refuses."""
        if not self._dim:  # nothing allocated yet: the attributes are plain values
            return ("fresh", dict(self.__dict__))
        return ("allocated", self._snapshot())

    def roll_back(self, memento: tuple) -> None:
        """Return to the state :meth:`memento` copied (the features it had fixed included)."""
        kind, saved = memento
        if kind == "fresh":
            self.__dict__.clear()
            self.__dict__.update(saved)
        else:
            self._restore(saved)

    #: the mutable state of a detector with fixed features (arrays, then scalars); see _snapshot
    _STATE_SCALARS = ("_fitted", "_sigma", "_lam", "_n_learned", "_since_refit")

    def _snapshot(self) -> tuple:
        """Copies of everything :meth:`_process` may change, for :meth:`_restore`."""
        arrays = {k: getattr(self, k).copy() for k in self._ARRAYS + self._REBUILT}
        scalars = {k: getattr(self, k, 0) for k in self._STATE_SCALARS}
        return arrays, scalars, copy.deepcopy(self._rng.bit_generator.state)

    def _restore(self, snap: tuple) -> None:
        arrays, scalars, rng_state = snap
        for k, v in {**arrays, **scalars}.items():
            setattr(self, k, v)
        self._rng.bit_generator.state = rng_state

    def _process(self, xs: np.ndarray, learn: bool) -> np.ndarray:
        """:meth:`process` on validated rows (no rollback)."""
        out = np.zeros(xs.shape[0])
        t = 0
        while t < xs.shape[0]:
            if not self._fitted:
                # warm-up: admit everything, score 0
                take = min(xs.shape[0] - t, int(self.warmup) - int(self._ref_state[0]))
                if learn:
                    if int(self._ref_state[0]) + take >= int(self.warmup):  # these rows complete the warm-up:
                        # refuse them before they are learned rather than leave a detector that cannot fit
                        _check_spread(np.vstack([self._ref_buf[:int(self._ref_state[0])], xs[t : t + take]]))
                    for row in xs[t : t + take]:
                        self._push_raw(row)
                    t += take
                    if int(self._ref_state[0]) >= int(self.warmup):
                        self._refit()
                else:
                    t = xs.shape[0]
                continue
            take = xs.shape[0] - t
            if learn:
                take = min(take, int(self.refit_every) - self._since_refit)
            _run_chunk(xs[t : t + take], self._centres, self._sigma, self._theta, self._params,
                       self._ref_buf, self._ref_state, self._s_ref, self._v_ref,
                       self._win_buf, self._win_phi, self._win_state, self._s_win, self._v_win,
                       self._held_buf, self._held_time, self._held_state, int(self.readmit_after),
                       learn, out[t : t + take])
            t += take
            if learn:
                self._since_refit += take
                if self._since_refit >= int(self.refit_every):
                    self._refit()
        if learn:
            self._n_learned += xs.shape[0]
        return out

    def _push_raw(self, row: np.ndarray) -> None:
        # before the first fit there are no centres: store the point only
        for buf, state in ((self._ref_buf, self._ref_state), (self._win_buf, self._win_state)):
            cap = buf.shape[0]
            buf[state[1]] = row
            state[0] = min(state[0] + 1, cap)
            state[1] = (state[1] + 1) % cap

    # --- river API -----------------------------------------------------------------------
    def learn_one(self, x) -> None:
        """Learn one sample: a dict of feature -> number, or a 1-d array-like (list, ndarray)."""
        if self._features is None:
            fresh = self.memento()
            self._init_features(x)
            try:
                v, mask = self._vector(x)
            except BaseException:  # a refused first sample fixes no features
                self.roll_back(fresh)
                raise
        else:
            v, mask = self._vector(x)
        if mask is not None:
            self._missing(mask, "the sample is not learned (a missing value is never made up)")
            return
        v = v[None, :]
        if self._fitted and self._since_refit + 1 < int(self.refit_every):
            # hot path: one compiled call, no validation overhead (v is already clean)
            _run_chunk(v, self._centres, self._sigma, self._theta, self._params,
                       self._ref_buf, self._ref_state, self._s_ref, self._v_ref,
                       self._win_buf, self._win_phi, self._win_state, self._s_win, self._v_win,
                       self._held_buf, self._held_time, self._held_state, int(self.readmit_after),
                       True, self._out1)
            self._since_refit += 1
            self._n_learned += 1
        else:
            self.process(v, learn=True)

    def score_one(self, x) -> float:
        """``1 - r(x)`` (higher = more anomalous; 0 before the first fit); ``x`` as in :meth:`learn_one`.

        A dict with none of the learned features is refused with a ``ValueError``: there is nothing
        to score it on (see the input policy in the class notes).
        """
        if self._features is None or not self._fitted:
            if self._features is None and not isinstance(x, dict):
                self._array(x)  # still check what is passed in
            return 0.0
        v, mask = self._vector(x)
        if mask is None:
            gauss_row(v, self._centres, self._sigma, self._phi1)
        else:
            if not mask.any():
                raise ValueError(f"no feature of the sample is known: x has keys {sorted(x, key=str)} but this "
                                 f"detector learned {self._features}; pass at least one of them to score it")
            self._missing(mask, "it is scored on the features it has")
            d2 = ((v[mask][None, :] - self._centres[:, mask]) ** 2).sum(axis=1)
            self._phi1[:] = np.exp(-0.5 * d2 / (self._sigma * self._sigma))
        return float(1.0 - self._phi1 @ self._theta)

    @property
    def threshold(self) -> float:
        """Score above which a point is flagged (and kept out of the reference buffer)."""
        return float(self._params[2]) if self._fitted else math.inf

    # --- persistence: to_state / from_state (numpy arrays + JSON), never pickle --------------------------------------
    _ARRAYS = ("_ref_buf", "_ref_state", "_s_ref", "_v_ref", "_win_buf", "_win_state", "_s_win", "_v_win",
               "_centres", "_theta", "_params", "_held_buf", "_held_time", "_held_state")
    _HELD = ("_held_buf", "_held_time", "_held_state")
    #: sums of outer products, symmetric bit for bit (BLAS's symmetric product at a refit, then
    #: rank-one terms v_i v_j = v_j v_i): a state keeps their upper triangles, half their bytes
    _SYMMETRIC = ("_s_ref", "_s_win")
    #: the window's kernel rows: not saved, rebuilt from the window, the centres and the width by the
    #: routine that made them (:func:`_kernel_rows`); the reference keeps none (:func:`_ref_push`)
    _REBUILT = ("_win_phi",)

    def to_state(self) -> dict:
        """Flat dict of numpy arrays and one JSON string (``"meta"``): ``.npz``-able, no pickle.

        The same persistence as every detector: ``to_state`` / :meth:`from_state`, with
        :meth:`save` / :meth:`load` writing it to one ``.npz`` file.
        """
        meta = {"version": STATE_VERSION, "params": self._get_params(), "features": self._features,
                "keyed": self._keyed,
                "dim": self._dim,
                "fitted": self._fitted, "sigma": getattr(self, "_sigma", 1.0),
                "lam": getattr(self, "_lam", float(self.lam)), "n_learned": self._n_learned,
                "since_refit": getattr(self, "_since_refit", 0),
                "rng": self._rng.bit_generator.state if self._dim else None}
        out: dict = {"meta": json.dumps(meta)}
        if self._dim:
            out.update({k: getattr(self, k).copy() for k in self._ARRAYS})
            upper = np.triu_indices(int(self.n_centres))
            for k in self._SYMMETRIC:
                if np.array_equal(out[k], out[k].T):  # always, by construction; else kept whole
                    out[k + "_upper"] = out.pop(k)[upper]
        return out

    @classmethod
    def from_state(cls, state) -> "StreamingOutlierDetector":
        """Rebuild a detector from :meth:`to_state`; it continues exactly where it stopped.

        A state of another format version, another class's, one with an entry missing or a damaged
        one (an array whose shape does not fit the parameters, a ring position or a count out of
        its range) is refused with a ``ValueError`` that names the entry.
        """
        state, meta = open_checkpoint(state, cls.__name__)
        state_version(meta, cls.__name__, readable=(STATE_VERSION,), unversioned=1)
        det = cls(**checkpoint_params(meta, cls))
        what = checkpoint_class(state, cls.__name__)
        at = entry_name(state, "meta")
        dim = state_range(meta["dim"], "dim", what, 0, meta=at)
        # JSON writes a tuple key as a list, which cannot be a key: every list was a tuple
        det._features = None if meta["features"] is None else [_decode_key(f) for f in meta["features"]]
        if (det._features is not None) if not dim else not (isinstance(det._features, list)
                                                            and len(det._features) == dim):
            raise damaged_state(what, "features", f"do not match its dimension {dim}: {meta['features']!r}", at)
        det._keyed = bool(meta.get("keyed", True))
        fitted = state_flag(meta["fitted"], "fitted", what, at)
        sigma, lam = meta["sigma"], meta["lam"]
        for name, v in (("sigma", sigma), ("lam", lam)):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.0 < v < math.inf:
                raise damaged_state(what, name, f"must be a positive finite number; got {v!r}", at)
        n_learned = state_range(meta["n_learned"], "n_learned", what, 0, meta=at)
        since_refit = state_range(meta["since_refit"], "since_refit", what, 0, int(det.refit_every), meta=at)
        if dim:
            det._allocate(dim)
            for k in cls._ARRAYS:
                if k in cls._HELD and k not in state:
                    continue  # a state written before readmission existed: nothing is held
                m = getattr(det, k)
                if k in cls._SYMMETRIC and k + "_upper" in state:
                    i, j = np.triu_indices(m.shape[0])
                    upper = state_array(state, k + "_upper", i.shape)
                    m[i, j] = upper
                    m[j, i] = upper
                else:  # written whole (before the upper triangles were kept)
                    m[...] = state_array(state, k, m.shape, integer=m.dtype.kind == "i", finite=k != "_params")
            if np.isnan(det._params).any() or not np.isfinite(np.delete(det._params, 2)).all():  # [2]: inf unfitted
                raise damaged_state(what, entry_name(state, "_params"), "holds NaN or infinite values")
            # the compiled loops write at these ring positions and read as many rows as these counts
            cap, w, cap_held = det._ref_buf.shape[0], det._win_buf.shape[0], det._held_buf.shape[0]
            for arr, key, highs in ((det._ref_state, "_ref_state", (cap + 1, cap, None, None)),
                                    (det._win_state, "_win_state", (w + 1, w)),
                                    (det._held_state, "_held_state", (cap_held + 1, cap_held))):
                for i, high in enumerate(highs):
                    state_range(arr[i], f"{entry_name(state, key)}[{i}]", what, 0, high)
            if not fitted and det._ref_state[0] >= int(det.warmup):
                raise damaged_state(what, f"{entry_name(state, '_ref_state')}[0]",
                               f"is {int(det._ref_state[0])}: the warm-up of {det.warmup} points is over, yet "
                               "the detector records no fit")
            try:
                det._rng.bit_generator.state = meta["rng"]
            except (TypeError, ValueError, KeyError) as exc:
                raise damaged_state(what, "rng", f"is not a random generator's state ({exc})", at) from None
        det._fitted, det._sigma, det._lam = fitted, sigma, lam
        if dim and "_win_phi" in state:  # written when states held the kernel rows
            det._win_phi[...] = state_array(state, "_win_phi", det._win_phi.shape)
        elif dim and det._fitted:  # before the first fit the rows are zeros (no centres yet)
            _kernel_rows(det._win_buf, int(det._win_state[0]), det._centres, float(det._sigma), det._win_phi)
        det._n_learned, det._since_refit = n_learned, since_refit
        return det

    def save(self, path) -> None:
        """Write :meth:`to_state` to ``<path>.npz`` (atomically: a crash leaves the old file)."""
        write_state(Path(path).with_suffix(".npz"), self.to_state())

    @classmethod
    def load(cls, path) -> "StreamingOutlierDetector":
        """Restore a detector written by :meth:`save`."""
        return cls.from_state(read_state(Path(path).with_suffix(".npz")))

"""Online instance-weighted SVMs over a sliding window, updated by one exact path step each.

The window keeps the last ``window`` points. Their weights follow the sigmoid time profile of
Cao and Tay (2003), as in Karasuyama et al. (2012), eq. (28)::

    C_i = C * 2 / (1 + exp(decay - 2 decay i / window)),   i = window for the newest point,

so with ``decay = 3`` the oldest point weighs about 0.095 C and the newest about 1.905 C.
When points arrive, each retained point moves down by the number of arrivals, the arrivals
enter at the top (their weight rises from 0) and the points pushed out go to 0: a single
segment ``c_old -> c_new`` that :meth:`ratiowatch.core.wsvm.WeightedSVR.path` follows exactly instead of
refitting. Features are read from the dict keys seen in the first sample (missing keys read as
0, keys never seen before are ignored): the kernel needs a fixed input space, and the scale of
the inputs must be fixed too, so standardise upstream with frozen statistics (a kernel on re-scaled inputs is a different kernel).
"""

from __future__ import annotations

import contextlib
import json
import math
import numbers
from collections.abc import Mapping

import numpy as np
from river import base

from ratiowatch.core.params import check_int, check_real
from ratiowatch.core.validation import as_plain
from ratiowatch.core.wsvm import PathStats, WeightedSVC, WeightedSVR
from ratiowatch.stream.detectors.state_file import CheckpointEntries


def cao_tay_weights(n_points: int, window: int, decay: float) -> np.ndarray:
    """Sigmoid time-decay weights (relative to C) of the ``n_points`` newest points, oldest first.

    >>> np.round(cao_tay_weights(3, 3, 3.0), 3).tolist()
    [0.538, 1.462, 1.905]
    """
    i = np.arange(window - n_points + 1, window + 1, dtype=np.float64)
    return 2.0 / (1.0 + np.exp(decay - 2.0 * decay * i / window))


def _plain(obj):
    """``obj`` with numpy scalars, inside tuples too, as the Python scalars they equal (a
    checkpoint's JSON takes no numpy scalar; ``np.int64(3)`` and ``3`` are one key and one label)."""
    if isinstance(obj, tuple):
        return tuple(_plain(o) for o in obj)
    return as_plain(obj)


def _as_key(obj):
    """A key read back from JSON: lists (tuples when written) become tuples again, nested too."""
    if isinstance(obj, list):
        return tuple(_as_key(k) for k in obj)
    return obj


def _restorable_label(y) -> bool:
    """Whether the class label ``y`` comes back equal from a checkpoint (JSON; numpy scalars as the
    Python scalars they equal, lists read back as tuples): None, a str, a bool, an int, a float
    other than NaN (NaN equals nothing, not even itself), or a tuple of these."""
    y = as_plain(y)
    if y is None or isinstance(y, (str, bool, int)):
        return True
    if isinstance(y, float):
        return y == y
    if isinstance(y, tuple):
        return all(_restorable_label(v) for v in y)
    return False


def check_state(state, cls) -> CheckpointEntries:
    """``state`` as :class:`CheckpointEntries` of ``cls``, if it is a checkpoint of version 1 of that
    class (``to_state`` records both); else a ``ValueError`` that says what it is not.

    A state read back from an ``.npz`` file (``write_state`` / ``read_state``, or ``np.savez`` /
    ``np.load``) holds each scalar as a 0-d array: those are read as the scalars they hold.
    """
    if isinstance(state, Mapping) and not isinstance(state, CheckpointEntries):  # a part is read already
        state = {k: v.item() if isinstance(v, np.ndarray) and v.ndim == 0 else v for k, v in state.items()}
    state = CheckpointEntries(state, cls.__name__)
    version, name = state.get("version"), state.get("class")
    if name != cls.__name__:
        raise ValueError(f"not a {cls.__name__} checkpoint: the state was written by {name!r}" if name is not None
                         else f"not a {cls.__name__} checkpoint: the state records no class")
    if "version" not in state:
        raise ValueError(f"unsupported {cls.__name__} state: it records no version (this build reads version 1)")
    if isinstance(version, bool) or not isinstance(version, numbers.Integral) or version != 1:
        raise ValueError(f"unsupported {cls.__name__} state version {version!r}: this build reads version 1")
    return state


class _WindowedSVM:
    """Sliding window bookkeeping shared by the regressor and the classifier."""

    def _check_params(self) -> None:
        # no silent int(2.5) or int("10"): the window is a count of points, and a checkpoint keeps
        # the parameter as it was given
        check_int(self.window, "window", minimum=2)
        if not check_real(self.decay, "decay") >= 0:
            raise ValueError(f"decay must be finite and >= 0; got {self.decay}")

    def _values(self, x, features) -> np.ndarray:
        if not isinstance(x, dict):
            raise ValueError(f"x must be a dict of feature -> number; got {type(x).__name__}")
        try:
            return np.array([float(x.get(f, 0.0)) for f in features], dtype=np.float64)
        except OverflowError:
            raise ValueError("a feature value of x is too large for a float64 (beyond about 1.8e308)") from None
        except (TypeError, ValueError):
            raise ValueError("feature values must be numbers") from None

    def _query(self, x) -> np.ndarray:
        """``x`` over the learned features, for a prediction (records nothing)."""
        return self._values(x, self._features)

    def _vector(self, x) -> np.ndarray:
        """``x`` over the learned features. The first sample fixes them only once it is found
        valid: the keys of a refused one (``{}``, or a NaN value) would otherwise stay the input
        space for good."""
        if not isinstance(x, dict):
            raise ValueError(f"x must be a dict of feature -> number; got {type(x).__name__}")
        # a numpy integer key is kept as the int it equals (the same key of a dict), which a
        # checkpoint's JSON can write
        features = self._features if self._features is not None else [_plain(k) for k in sorted(x.keys(), key=str)]
        vec = self._values(x, features)
        if not features:
            raise ValueError("x has no features; the first sample fixes the input space and needs at least one")
        if not np.all(np.isfinite(vec)):
            raise ValueError("x contains NaN or infinite values; impute them before learning")
        self._features = features
        return vec

    def _matrix(self, X) -> np.ndarray:
        if isinstance(X, np.ndarray) or (isinstance(X, (list, tuple)) and X and not isinstance(X[0], dict)):
            try:
                X = np.asarray(X, dtype=np.float64)
            except OverflowError:
                raise ValueError("X holds a number too large for a float64 (beyond about 1.8e308)") from None
            except (TypeError, ValueError):
                raise ValueError("X must be an (n, d) array of numbers or a list of dicts") from None
            if X.ndim != 2:
                raise ValueError(f"X must be 2-d (n, d); got shape {X.shape}")
            if X.shape[0] == 0 or X.shape[1] == 0:
                raise ValueError(f"X has shape {X.shape}; pass at least one sample with at least one feature")
            if self._features is not None and X.shape[1] != len(self._features):
                raise ValueError(f"X has {X.shape[1]} columns but the model uses {len(self._features)} features")
            if not np.all(np.isfinite(X)):
                raise ValueError("X contains NaN or infinite values; impute them before learning")
            if self._features is None:
                self._features = list(range(X.shape[1]))
            return X
        if not isinstance(X, (list, tuple)):
            X = list(X)
        if not X:
            raise ValueError("the batch is empty; pass at least one sample")
        return np.vstack([self._vector(x) for x in X])

    def _bookkeeping(self) -> dict:
        """The attributes a learn call may change besides the window (see :meth:`_all_or_nothing`)."""
        return {"_features": self._features, "_model": self._model}

    @contextlib.contextmanager
    def _all_or_nothing(self):
        """A refused or interrupted learn call leaves the learner as it was (the window's model is
        restored by :meth:`_slide` itself)."""
        saved = self._bookkeeping()
        try:
            yield
        except BaseException:
            for name, value in saved.items():
                setattr(self, name, value)
            raise

    def _slide(self, X: np.ndarray, targets: np.ndarray) -> PathStats | None:
        """Add the batch, shift the weights down, drop what left the window: one path update.

        All or nothing: if the update fails, the batch is taken out again and the window is as it
        was (the learner used to keep the batch's ids and grow past its window for good).
        """
        model = self._model if self._model is not None else self._make_model()
        old_sw = model.sample_weight_ if model._pf is not None else np.zeros(0)
        new_ids = model.add_points(X, targets, capacity=max(int(self.window), X.shape[0]) + 16)
        ids = self._ids + new_ids.tolist()
        n_drop = max(0, len(ids) - int(self.window))
        drop, keep = ids[:n_drop], ids[n_drop:]
        try:
            sw = np.zeros(len(ids))
            sw[n_drop:] = self._target_weights(keep)
            stats = model.path(sw)  # a failed path leaves the weights as they were
            if drop:
                model.remove_points(drop)
        except BaseException:
            if model is self._model:
                self._take_back(model, old_sw, new_ids)
            raise
        self._model = model
        self._ids = keep
        self.last_stats_ = stats
        self.n_updates_ += 1
        return stats

    @staticmethod
    def _take_back(model, old_sw: np.ndarray, new_ids: np.ndarray) -> None:
        """Undo :meth:`_slide` on ``model``: old weights back (new points at 0), new points out."""
        back = np.concatenate((old_sw, np.zeros(new_ids.shape[0])))
        if len(model.ids_) == back.shape[0] and not np.array_equal(model.sample_weight_, back):
            model.path(back)
        model.remove_points(new_ids)

    def _target_weights(self, keep: list[int]) -> np.ndarray:
        prof = getattr(self, "_profile", None)
        if prof is None:  # the full-window profile never changes: compute it once
            prof = self._profile = cao_tay_weights(int(self.window), int(self.window), float(self.decay))
        return prof[prof.shape[0] - len(keep):]

    def kkt_violation(self) -> float:
        """KKT violation of the current window solution (0.0 before any learning)."""
        return 0.0 if self._model is None else self._model.kkt_violation()

    # ------------------------------------------------------------------ checkpoints
    def _extra_state(self) -> dict:
        return {}

    def _load_extra(self, state: dict) -> None:
        pass

    def to_state(self) -> dict:
        """Flat dict of arrays, numbers and strings for ``.npz`` + JSON checkpoints (no pickle)."""
        if self._features is not None:
            try:
                features = json.dumps(list(self._features))
            except TypeError:
                raise ValueError("feature names must be None, str, int, float, bool or tuples of these to be "
                                 "checkpointed") from None
        else:
            features = ""
        state = {"version": 1, "class": type(self).__name__, **self._get_params(), "features": features,
                 "ids": np.array(self._ids, dtype=np.int64), "n_updates": int(self.n_updates_),
                 "has_model": int(self._model is not None), **self._extra_state()}
        if self._model is not None:
            state.update({"model." + k: v for k, v in self._model.to_state().items()})
        return state

    @classmethod
    def from_state(cls, state: dict):
        """Restore a learner saved by :meth:`to_state` (another class's state, another version's or
        one with an entry missing is refused with a ``ValueError`` that says so)."""
        state = check_state(state, cls)
        import inspect

        names = [n for n in inspect.signature(cls.__init__).parameters if n != "self"]
        params = {n: state[n] for n in names}
        window = params.get("window")
        if isinstance(window, float) and window.is_integer():
            # written before fractional windows were refused, by a learner built with window=30.0
            # (its window was 30 points): read as the count it was
            params["window"] = int(window)
        obj = cls(**params)
        # tuple names were written as JSON lists: as lists they would match no key of a sample
        obj._features = [_as_key(f) for f in json.loads(state["features"])] if state["features"] else None
        ids = np.asarray(state["ids"])
        if ids.ndim != 1 or (ids.size and ids.dtype.kind not in "iu"):
            raise ValueError(f"damaged {cls.__name__} state: entry 'ids' must be a 1-d array of point ids")
        obj._ids = [int(i) for i in ids.tolist()]
        obj.n_updates_ = int(state["n_updates"])
        if int(state["has_model"]):
            # the model's own from_state checks its arrays and its solution
            obj._model = obj._make_model().from_state(state.part("model."))
            if obj._model._pf is None or obj._model.ids_.tolist() != obj._ids:
                raise ValueError(f"damaged {cls.__name__} state: entry 'ids' does not match the points of its model")
        elif obj._ids:
            raise ValueError(f"damaged {cls.__name__} state: entry 'ids' lists points but the state holds no model")
        obj._load_extra(state)
        return obj

    @property
    def n_points(self) -> int:
        """Points currently in the window."""
        return len(self._ids)


class OnlineWeightedSVR(_WindowedSVM, base.Regressor):
    """Sliding-window weighted epsilon-SVR with time-decay weights, updated by path following.

    Parameters
    ----------
    window : int
        Number of most recent points kept.
    C, epsilon, gamma, kernel : SVR hyper-parameters (scikit-learn's meaning; rbf kernel
        ``exp(-gamma ||x - x'||^2)``).
    decay : float
        Steepness ``a`` of the Cao-Tay profile (0 = equal weights).
    ridge : float
        Diagonal ridge of the dual (keeps the margin systems invertible). The default 1e-6 is the paper's: streams
        often repeat inputs, and exact duplicates on the margin make the margin system singular.

    Examples
    --------
    >>> model = OnlineWeightedSVR(window=50, C=5.0, epsilon=0.05, gamma=20.0)
    >>> rng = np.random.default_rng(0)
    >>> for u in rng.uniform(size=80):
    ...     model.learn_one({"u": u}, float(np.sin(6 * u)))
    >>> bool(abs(model.predict_one({"u": 0.25}) - np.sin(1.5)) < 0.1)
    True
    """

    def __init__(self, window: int = 200, C: float = 1.0, epsilon: float = 0.1, gamma: float = 1.0,
                 kernel: str = "rbf", decay: float = 3.0, ridge: float = 1e-6):
        self.window = window
        self.C = C
        self.epsilon = epsilon
        self.gamma = gamma
        self.kernel = kernel
        self.decay = decay
        self.ridge = ridge
        self._check_params()
        WeightedSVR(C, epsilon=epsilon, kernel=kernel, gamma=gamma, ridge=ridge)  # validates
        self._model: WeightedSVR | None = None
        self._features: list | None = None
        self._ids: list[int] = []
        self.last_stats_: PathStats | None = None
        self.n_updates_ = 0

    def _make_model(self) -> WeightedSVR:
        return WeightedSVR(self.C, epsilon=self.epsilon, kernel=self.kernel, gamma=self.gamma, ridge=self.ridge)

    def learn_one(self, x: dict, y: float) -> None:
        """Add one sample; the oldest leaves once the window is full (one path update)."""
        try:
            y = float(y)
        except OverflowError:
            raise ValueError("y is too large for a float64 (beyond about 1.8e308)") from None
        except (TypeError, ValueError):
            raise ValueError(f"y must be a finite number; got {type(y).__name__}") from None
        if not math.isfinite(y):
            raise ValueError("y must be a finite number")
        with self._all_or_nothing():
            self._slide(self._vector(x)[None, :], np.array([y]))

    def learn_batch(self, X, y) -> PathStats | None:
        """Add several samples (dicts or an (n, d) array) in one path update; returns its stats."""
        with self._all_or_nothing():
            X = self._matrix(X)
            try:
                y = np.asarray(y, dtype=np.float64).ravel()
            except OverflowError:
                raise ValueError("y holds a number too large for a float64 (beyond about 1.8e308)") from None
            except (TypeError, ValueError):
                raise ValueError("y must be numeric targets") from None
            if y.shape[0] != X.shape[0]:
                raise ValueError(f"y has {y.shape[0]} targets for {X.shape[0]} samples")
            if not np.all(np.isfinite(y)):
                raise ValueError("y contains NaN or infinite values")
            return self._slide(X, y)

    def predict_one(self, x: dict) -> float:
        """Estimate at ``x`` (0.0 before any learning)."""
        if self._model is None:
            return 0.0
        return float(self._model.decision_function(self._query(x)[None, :])[0])

    def predict_batch(self, X) -> np.ndarray:
        """Estimates at the rows of an (n, d) array."""
        if self._model is None:
            return np.zeros(len(X))
        return self._model.decision_function(self._matrix(X))

    @classmethod
    def _unit_test_params(cls):
        yield {"window": 30, "C": 1.0, "epsilon": 0.1, "gamma": 0.1}


class OnlineWeightedSVC(_WindowedSVM, base.Classifier):
    """Sliding-window weighted C-SVM (binary) with time-decay weights, updated by path following.

    Boolean labels map False to -1 and True to +1 (river's binary convention, both always
    reported); other labels map in order of appearance, and a third label raises ``ValueError``, as
    does a NaN label (it equals no label, not even itself). A label is a bool, None, a str, an int,
    a float or a tuple of these (a numpy scalar counts as the Python scalar it equals): the labels
    a checkpoint restores as they were. Any other raises ``ValueError``.
    While the window holds a single class, every weight is driven to 0 and that class is
    predicted. ``predict_proba_one`` is a logistic squashing of the margin (``1 / (1 + e^{-2f})``),
    not a calibrated probability.

    Examples
    --------
    >>> model = OnlineWeightedSVC(window=60, C=5.0, gamma=1.0)
    >>> rng = np.random.default_rng(0)
    >>> for _ in range(100):
    ...     u = rng.normal(size=2)
    ...     model.learn_one({"a": u[0], "b": u[1]}, bool(u[0] + u[1] > 0))
    >>> model.predict_one({"a": 1.5, "b": 1.0})
    True
    """

    def __init__(self, window: int = 200, C: float = 1.0, gamma: float = 1.0, kernel: str = "rbf",
                 decay: float = 3.0, ridge: float = 1e-6):
        self.window = window
        self.C = C
        self.gamma = gamma
        self.kernel = kernel
        self.decay = decay
        self.ridge = ridge
        self._check_params()
        WeightedSVC(C, kernel=kernel, gamma=gamma, ridge=ridge)  # validates
        self._model: WeightedSVC | None = None
        self._features: list | None = None
        self._ids: list[int] = []
        self._labels: list = []
        self._sign: dict[int, float] = {}
        self.last_stats_: PathStats | None = None
        self.n_updates_ = 0

    @property
    def _multiclass(self) -> bool:
        return False

    def _bookkeeping(self) -> dict:
        return {**super()._bookkeeping(), "_labels": list(self._labels), "_sign": dict(self._sign)}

    def _extra_state(self) -> dict:
        keys = sorted(self._sign)
        # numpy labels (the values of a label array) as the Python scalars they equal
        return {"labels": json.dumps([_plain(v) for v in self._labels]), "sign_ids": np.array(keys, dtype=np.int64),
                "sign_vals": np.array([self._sign[k] for k in keys], dtype=np.float64)}

    def _load_extra(self, state: dict) -> None:
        self._labels = [_as_key(v) for v in json.loads(state["labels"])]  # tuple labels come back as tuples
        self._sign = dict(zip(np.asarray(state["sign_ids"]).tolist(), np.asarray(state["sign_vals"]).tolist()))
        if sorted(self._sign) != sorted(self._ids) or not all(v in (-1.0, 1.0) for v in self._sign.values()):
            raise ValueError("damaged OnlineWeightedSVC state: entries 'sign_ids' and 'sign_vals' must give a "
                             "label -1 or +1 to each point of the window")

    def _make_model(self) -> WeightedSVC:
        return WeightedSVC(self.C, kernel=self.kernel, gamma=self.gamma, ridge=self.ridge)

    @staticmethod
    def _check_label(y) -> None:
        # NaN equals no label, not even itself: each NaN would count as a new class
        if isinstance(y, numbers.Number) and y != y:
            raise ValueError(f"y is {y!r}, which is no class label; the labels are two booleans or two values "
                             "that compare equal to themselves: drop unlabelled samples or impute their labels")
        # a label a checkpoint cannot restore as it was would make the restored learner refuse it
        if not _restorable_label(y):
            raise ValueError(f"y is {y!r} ({type(y).__name__}); a class label must be a bool, None, a str, an int, "
                             "a float or a tuple of these (numpy scalars of these too), which a checkpoint "
                             "restores as it was")

    def _code(self, y) -> float:
        if isinstance(y, (bool, np.bool_)):
            # river's binary convention: False -> -1, True -> +1, both always reported
            if self._labels and self._labels != [False, True]:
                raise ValueError(f"mixing boolean labels with {self._labels}; use one label type")
            self._labels = [False, True]
            return 1.0 if y else -1.0
        if y not in self._labels:
            if len(self._labels) == 2:
                raise ValueError(f"OnlineWeightedSVC is binary; got a third label {y!r} after {self._labels}")
            self._labels.append(y)
        return -1.0 if y == self._labels[0] else 1.0

    def _target_weights(self, keep: list[int]) -> np.ndarray:
        w = _WindowedSVM._target_weights(self, keep)
        signs = np.array([self._sign[i] for i in keep])
        if not (np.any(signs > 0) and np.any(signs < 0)):
            return np.zeros_like(w)  # one class only: no SVM exists; predict that class
        return w

    def learn_one(self, x: dict, y) -> None:
        """Add one labelled sample; the oldest leaves once the window is full (one path update)."""
        self.learn_batch([x], [y])

    def learn_batch(self, X, y) -> PathStats | None:
        """Add several labelled samples in one path update; returns its stats."""
        # all or nothing, labels included: a batch refused for its third label used to record
        # the batch's second one, so that a later, legitimate second label was refused
        with self._all_or_nothing():
            X = self._matrix(X)
            y = list(y)
            if len(y) != X.shape[0]:
                raise ValueError(f"y has {len(y)} labels for {X.shape[0]} samples")
            for v in y:
                self._check_label(v)
            codes = np.array([self._code(v) for v in y])
            model = self._model
            first = model._next_id if model is not None and model._pf is not None else 0
            for k, c in enumerate(codes):
                self._sign[first + k] = c
            stats = self._slide(X, codes)
            live = set(self._ids)
            self._sign = {k: v for k, v in self._sign.items() if k in live}
            return stats

    def _margin(self, vec: np.ndarray) -> float | None:
        if self._model is None or self._model._pf is None or not np.any(self._model._pf.c > 0):
            return None
        return float(self._model.decision_function(vec[None, :])[0])

    def predict_proba_one(self, x: dict) -> dict:
        """Pseudo-probabilities of the two labels ({False: 0.5, True: 0.5} before any learning)."""
        if not self._labels:
            return {False: 0.5, True: 0.5}
        f = self._margin(self._query(x))
        if f is None:  # single class so far: predict the window's majority
            votes = np.array([self._sign[i] for i in self._ids])
            pos = float(np.mean(votes > 0)) if votes.size else 0.0
        else:
            pos = 1.0 / (1.0 + math.exp(-2.0 * max(-350.0, min(350.0, f))))
        if len(self._labels) == 1:
            return {self._labels[0]: 1.0}
        return {self._labels[0]: 1.0 - pos, self._labels[1]: pos}

    def decision_one(self, x: dict) -> float:
        """Signed margin ``f(x)`` (positive means the second label); 0.0 when there is no SVM yet."""
        if self._model is None:
            return 0.0
        f = self._margin(self._query(x))
        return 0.0 if f is None else f

    @classmethod
    def _unit_test_params(cls):
        yield {"window": 30, "C": 1.0, "gamma": 0.1}

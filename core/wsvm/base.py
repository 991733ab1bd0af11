"""Shared machinery of :class:`~ratiowatch.core.wsvm.svc.WeightedSVC` and :class:`~ratiowatch.core.wsvm.svr.WeightedSVR`.

Points live in slots of a growing buffer; the kernel matrix over slots is kept, so adding a point
costs one kernel row and removing one is bookkeeping once its weight has been driven to 0 by the
path. Each point owns one dual variable (classification) or two (regression); variable ``v`` of
copy ``k`` sits at ``k * cap + slot``.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ratiowatch.core.validation import as_samples

from . import _engine as E
from .kernels import check_kernel, kernel_matrix
from .path import PathFollower, PathStats


_STATE_VERSION = 1


def as_number(value, name: str, kind=float):
    """``kind(value)``, or a ``ValueError`` that names the parameter (``None`` used to fail with a
    bare ``TypeError`` from ``float``)."""
    try:
        return kind(value)
    except (TypeError, ValueError, OverflowError):
        raise ValueError(f"{name} must be a number; got {value!r}") from None


class _StateEntries:
    """The entries of a :meth:`WeightedSVMBase.to_state` dict, read so that a missing one is a
    ``ValueError`` naming the class and the key instead of a bare ``KeyError``."""

    def __init__(self, state, what: str):
        if not isinstance(state, Mapping):
            raise ValueError(f"not a {what} state: expected the dict of arrays and numbers that to_state "
                             f"returns; got {type(state).__name__}")
        self._state, self._what = state, what

    def __getitem__(self, key):
        try:
            return self._state[key]
        except KeyError:
            raise ValueError(f"not a {self._what} state, or a truncated one: missing key {key!r}") from None

    def __contains__(self, key) -> bool:
        return key in self._state

    def get(self, key, default=None):
        return self._state.get(key, default)


def _restore_follower(K, pt, z, p, c, a, G, st, mlist, R, like) -> PathFollower:
    """A PathFollower from saved arrays (no solve): ``like`` gives ridge, counters and settings."""
    nv = z.shape[0]
    pf = PathFollower.__new__(PathFollower)
    pf.K, pf.pt, pf.z, pf.p = K, pt, z, p
    pf.ridge, pf.refresh_every, pf.max_zero_run = like.ridge, like.refresh_every, like.max_zero_run
    pf.c, pf.a, pf.G, pf.st = c, a, G, st
    pf.c0 = c.copy()
    pf.d, pf.h, pf.psi = np.zeros(nv), np.zeros(nv), np.zeros(nv)
    pf.act = np.zeros(nv, dtype=np.bool_)
    pf.fsc, pf.isc, pf.resolves = like.fsc.copy(), like.isc.copy(), like.resolves
    pf.Mlist = pf.R = pf.phi = None
    pf._alloc_margin(max(16, 2 * mlist.size + 8))
    pf.Mlist[: mlist.size] = mlist
    pf.R[: mlist.size + 1, : mlist.size + 1] = R
    pf.isc[0] = mlist.size
    return pf


class WeightedSVMBase:
    """Common state; subclasses define the per-point dual variables (``_dual_terms``)."""

    _copies = 1

    def __init__(self, C: float = 1.0, *, kernel: str = "rbf", gamma: float = 1.0, ridge: float = 1e-8,
                 refresh_every: int = 500):
        self.kernel, self.gamma = check_kernel(kernel, as_number(gamma, "gamma"))
        C = as_number(C, "C")
        if not (np.isfinite(C) and C > 0):
            raise ValueError(f"C must be a positive finite number; got {C}")
        ridge = as_number(ridge, "ridge")
        if not (np.isfinite(ridge) and ridge >= 0):
            raise ValueError(f"ridge must be finite and >= 0; got {ridge}")
        refresh_every = as_number(refresh_every, "refresh_every", int)
        if refresh_every < 1:
            raise ValueError(f"refresh_every must be a positive integer; got {refresh_every}")
        self.C = C
        self.ridge = ridge
        self.refresh_every = refresh_every
        self._pf: PathFollower | None = None

    # ------------------------------------------------------------------ validation
    def _check_targets(self, y, n: int) -> np.ndarray:  # pragma: no cover - overridden
        raise NotImplementedError

    def _dual_terms(self, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover
        raise NotImplementedError

    def _check_sw(self, sample_weight, n: int, name: str = "sample_weight") -> np.ndarray:
        if sample_weight is None:
            return np.ones(n)
        sw = np.asarray(sample_weight, dtype=np.float64)
        if sw.ndim != 1 or sw.shape[0] != n:
            raise ValueError(f"{name} must be a 1-d array of length {n}; got shape {sw.shape}")
        if not np.all(np.isfinite(sw)):
            raise ValueError(f"{name} contains NaN or infinite values")
        if np.any(sw < 0):
            raise ValueError(f"{name} must be >= 0 (clip importance weights at 0); min is {sw.min()}")
        return sw

    def _fitted(self) -> PathFollower:
        if self._pf is None:
            raise ValueError(f"this {type(self).__name__} is not fitted yet; call fit(X, y) or add_points first")
        return self._pf

    # ------------------------------------------------------------------ buffers
    def _alloc(self, cap: int, dim: int) -> None:
        self._cap = cap
        self._dim = dim
        self._X = np.zeros((cap, dim))
        self._y = np.zeros(cap)
        self._live = np.zeros(cap, dtype=np.bool_)
        self._pid = np.full(cap, -1, dtype=np.int64)
        self._slot: dict[int, int] = {}  # live point id -> slot, in id (= insertion) order
        self._order: np.ndarray | None = None  # cached slots of _slot in order (see _ordered_slots)
        self._next_id = 0

    def _grow(self, need: int) -> None:
        """Grow the slot capacity, keeping the solution (variables are re-indexed)."""
        old = self._cap
        cap = old + max(need, old // 8)  # streams need only window + batch slots
        X, y, live, pid = self._X, self._y, self._live, self._pid
        pf = self._pf
        self._X = np.zeros((cap, self._dim))
        self._X[:old] = X
        self._y = np.zeros(cap)
        self._y[:old] = y
        self._live = np.zeros(cap, dtype=np.bool_)
        self._live[:old] = live
        self._pid = np.full(cap, -1, dtype=np.int64)
        self._pid[:old] = pid
        self._cap = cap
        K = np.zeros((cap, cap))
        K[:old, :old] = pf.K
        nv = self._copies * cap
        remap = np.concatenate([np.arange(old) + k * cap for k in range(self._copies)])
        z = np.ones(nv)
        p = np.zeros(nv)
        z[remap] = pf.z
        p[remap] = pf.p
        pt = np.tile(np.arange(cap), self._copies)
        arrays = {}
        for name in ("c", "a", "G"):
            arr = np.zeros(nv)
            arr[remap] = getattr(pf, name)
            arrays[name] = arr
        st = np.zeros(nv, dtype=np.int8)
        st[remap] = pf.st
        nM = int(pf.isc[0])
        new = _restore_follower(K, pt, z, p, arrays["c"], arrays["a"], arrays["G"], st, remap[pf.Mlist[:nM]],
                                pf.R[: nM + 1, : nM + 1], pf)
        self._pf = new

    # ------------------------------------------------------------------ public API
    def fit(self, X, y, sample_weight=None):
        """Exact solve with per-instance bounds ``C * sample_weight`` (no external solver).

        Returns ``self``.
        """
        X = as_samples(X, "X")
        n = X.shape[0]
        y = self._check_targets(y, n)
        sw = self._check_sw(sample_weight, n)
        self._alloc(n, X.shape[1])
        self._X[:] = X
        self._y[:] = y
        self._live[:] = True
        self._pid[:] = np.arange(n)
        self._slot = {i: i for i in range(n)}
        self._order = None
        self._next_id = n
        K = np.ascontiguousarray(kernel_matrix(X, X, self.kernel, self.gamma))
        z, p = self._dual_terms(y)
        pt = np.tile(np.arange(n), self._copies)
        c = np.tile(self.C * sw, self._copies)
        self._validate_weights(c)
        self._pf = PathFollower(K, pt, z, p, c, ridge=self.ridge, refresh_every=self.refresh_every)
        return self

    def _validate_weights(self, c: np.ndarray) -> None:
        """Hook: classification checks that both classes carry weight."""

    @property
    def ids_(self) -> np.ndarray:
        """Ids of the live points, in the order :meth:`path` expects weights."""
        return np.fromiter(self._slot.keys(), dtype=np.int64, count=len(self._slot))

    def _slots_of(self, ids) -> np.ndarray:
        if not isinstance(ids, list):
            ids = np.atleast_1d(ids).tolist()
        try:
            return np.array([self._slot[int(i)] for i in ids], dtype=np.int64)
        except KeyError as exc:
            raise ValueError(f"unknown point id {exc.args[0]}; use ids_ for the live points") from None

    def _ordered_slots(self) -> np.ndarray:
        """Slots of the live points in id order (cached; read-only for callers)."""
        order = getattr(self, "_order", None)
        if order is None or order.shape[0] != len(self._slot):
            order = self._order = np.fromiter(self._slot.values(), dtype=np.int64, count=len(self._slot))
        return order

    @property
    def sample_weight_(self) -> np.ndarray:
        """Current per-point weights (``C_i / C``) in :attr:`ids_` order."""
        return self._fitted().c[self._ordered_slots()] / self.C

    def reserve(self, n_points: int) -> None:
        """Make room for ``n_points`` live points at once (avoids regrowing the kernel buffer)."""
        self._fitted()
        n_points = int(n_points)
        if n_points > self._cap:
            self._grow(n_points - self._cap)

    def add_points(self, X, y, *, capacity: int | None = None) -> np.ndarray:
        """Add points with weight 0 (no change to the solution); returns their ids.

        Their weight is raised by a later :meth:`path` call. ``capacity`` sizes the buffers of an
        empty model (e.g. window + batch for a stream).
        """
        X = as_samples(X, "X")
        n_new = X.shape[0]
        y = self._check_targets(y, n_new, partial=True)
        if self._pf is None:
            self._alloc(max(8, n_new, int(capacity or 0)), X.shape[1])
            cap = self._cap
            z, p = self._dual_terms(np.zeros(cap))
            self._pf = PathFollower(np.zeros((cap, cap)), np.tile(np.arange(cap), self._copies), z, p,
                                    np.zeros(self._copies * cap), ridge=self.ridge, start="zero",
                                    refresh_every=self.refresh_every)
        if X.shape[1] != self._dim:
            raise ValueError(f"X has {X.shape[1]} features but the model was built with {self._dim}")
        free = np.flatnonzero(~self._live)
        if free.size < n_new:
            self._grow(n_new - free.size)
            free = np.flatnonzero(~self._live)
        slots = free[:n_new]
        pf = self._pf
        order = self._ordered_slots()  # before the dict changes
        self._X[slots] = X
        self._y[slots] = y
        self._live[slots] = True
        ids = np.arange(self._next_id, self._next_id + n_new)
        self._pid[slots] = ids
        self._slot.update(zip(ids.tolist(), slots.tolist()))
        self._order = np.concatenate((order, slots))
        self._next_id += n_new
        rows = kernel_matrix(X, self._X, self.kernel, self.gamma)
        z, p = self._dual_terms(y)
        # kernel rows and columns, dual terms, G and the O/I label of the new variables: one call
        kmax = E.install(pf.K, rows, slots, self._live, pf.pt, pf.z, pf.p, pf.c, pf.a, pf.G, pf.st, pf.b, z, p)
        if kmax < 0:
            raise ValueError("only variables with zero weight and zero alpha can be (re)placed")
        pf.note_kernel_rows(kmax)
        return ids

    def remove_points(self, ids) -> None:
        """Forget points whose weight is already 0 (lower it with :meth:`path` first)."""
        pf = self._fitted()
        ids = [int(i) for i in (ids if isinstance(ids, list) else np.atleast_1d(ids).tolist())]
        if len(set(ids)) != len(ids):
            raise ValueError("remove_points got the same point id twice; pass each id once")
        slots = self._slots_of(ids)
        # the kernel rows of a dead slot are left as they are: its variables have a = C = 0 and are
        # inactive, so they enter no sum; add_points overwrites them when the slot is reused
        if not E.retire(slots, self._live, pf.c, pf.st, pf.a, pf.z, pf.p, pf.G):
            raise ValueError("remove_points needs the points' weights at 0: call path() with 0 for them first")
        self._pid[slots] = -1
        order = self._ordered_slots()  # before the dict changes
        for i in ids:
            del self._slot[i]
        k = slots.shape[0]
        if k <= order.shape[0] and (order[:k] == slots).all():  # a window dropping its oldest points
            self._order = order[k:]
        else:
            self._order = order[~np.isin(order, slots)]

    def path(self, sample_weight_new, *, on_breakpoint=None) -> PathStats:
        """Follow the exact solution path to new per-point weights (``C * sample_weight_new``).

        ``sample_weight_new`` is given in :attr:`ids_` order. Use 0 to remove a point's influence
        (then :meth:`remove_points`), and raise a weight from 0 to add one.

        ``on_breakpoint(model, theta)``, if given, is called after every event; during the call the
        model holds the exact solution at the breakpoint (:attr:`sample_weight_` are the weights at
        theta, :meth:`kkt_violation` checks that solution), and the callback must not change it.
        Whatever is raised inside the call (by the path or by the callback, ``KeyboardInterrupt``
        included) leaves the model as it was before the call.
        """
        pf = self._fitted()
        slots = self._ordered_slots()
        sw = np.asarray(sample_weight_new, dtype=np.float64)
        if sw.ndim != 1 or sw.shape[0] != slots.size:
            raise ValueError(f"sample_weight_new must be a 1-d array of length {slots.size}; got shape {sw.shape}")
        # finiteness and sign are checked by the compiled segment start (one pass)
        c = np.empty_like(pf.c)
        E.scatter_weights(c, slots, np.ascontiguousarray(sw), self.C, self._cap)
        self._validate_weights(c)
        cb = None
        if on_breakpoint is not None:
            def cb(_pf, theta):
                on_breakpoint(self, theta)
        return pf.follow(c, on_breakpoint=cb)

    def dual_coef(self) -> np.ndarray:
        """Signed coefficient per live point (``f(x) = sum_i coef_i K(x, x_i) + b``), ids_ order."""
        pf = self._fitted()
        beta = np.bincount(pf.pt, weights=pf.z * pf.a, minlength=self._cap)
        return beta[self._ordered_slots()]

    @property
    def intercept_(self) -> float:
        return self._fitted().b

    def decision_function(self, X) -> np.ndarray:
        """``f(x) = sum_i coef_i K(x, x_i) + b`` at the rows of ``X``."""
        pf = self._fitted()
        X = as_samples(X, "X", dim=self._dim)
        slots = self._ordered_slots()
        beta = np.bincount(pf.pt, weights=pf.z * pf.a, minlength=self._cap)
        nz = slots[beta[slots] != 0]
        if nz.size == 0:
            return np.full(X.shape[0], pf.b)
        return kernel_matrix(X, self._X[nz], self.kernel, self.gamma) @ beta[nz] + pf.b

    def kkt_violation(self) -> float:
        """Largest KKT violation of the current solution (recomputed from scratch)."""
        return self._fitted().kkt_violation()

    # ------------------------------------------------------------------ checkpoints
    def _params(self) -> dict:
        return {"C": self.C, "kernel": self.kernel, "gamma": self.gamma, "ridge": self.ridge,
                "refresh_every": self.refresh_every}

    def to_state(self) -> dict:
        """Plain arrays and scalars for ``.npz`` + JSON checkpoints (no pickle).

        The kernel matrix is not stored: :meth:`from_state` recomputes it from the points.
        """
        state = {"version": _STATE_VERSION, "class": type(self).__name__, **self._params()}
        pf = self._pf
        state["fitted"] = int(pf is not None)
        if pf is None:
            return state
        nM = int(pf.isc[0])
        state.update({
            "dim": self._dim, "cap": self._cap, "next_id": self._next_id, "X": self._X.copy(),
            "y": self._y.copy(), "live": self._live.astype(np.uint8), "pid": self._pid.copy(),
            "ids": self.ids_, "slots": self._ordered_slots(), "z": pf.z.copy(), "p": pf.p.copy(),
            "c": pf.c.copy(), "a": pf.a.copy(), "G": pf.G.copy(), "st": pf.st.copy(),
            "M": pf.Mlist[:nM].copy(), "R": pf.R[: nM + 1, : nM + 1].copy(), "fsc": pf.fsc.copy(),
            "isc": pf.isc.copy(), "resolves": int(pf.resolves), "max_zero_run": int(pf.max_zero_run),
        })
        return state

    @classmethod
    def from_state(cls, state: dict):
        """Restore a model saved by :meth:`to_state` (same solution, path continues from it).

        Anything else (another class's state, a truncated one, not a mapping) is refused with a
        ``ValueError`` that says so.
        """
        state = _StateEntries(state, cls.__name__)
        try:
            version = int(state.get("version", -1))
        except (TypeError, ValueError):
            version = None
        if version != _STATE_VERSION or state.get("class") != cls.__name__:
            raise ValueError(f"not a {cls.__name__} state of version {_STATE_VERSION}")
        kwargs = {k: state[k] for k in ("kernel", "gamma", "ridge", "refresh_every")}
        if "epsilon" in state:
            kwargs["epsilon"] = float(state["epsilon"])
        obj = cls(float(state["C"]), **kwargs)
        if not int(state["fitted"]):
            return obj
        cap, dim = int(state["cap"]), int(state["dim"])
        obj._alloc(cap, dim)
        obj._X[:] = np.asarray(state["X"], dtype=np.float64).reshape(cap, dim)
        obj._y[:] = state["y"]
        obj._live[:] = np.asarray(state["live"]).astype(bool)
        obj._pid[:] = state["pid"]
        obj._next_id = int(state["next_id"])
        obj._slot = dict(zip(np.asarray(state["ids"]).tolist(), np.asarray(state["slots"]).tolist()))
        live = obj._live
        K = np.zeros((cap, cap))
        if live.any():
            idx = np.flatnonzero(live)
            K[np.ix_(idx, idx)] = kernel_matrix(obj._X[idx], obj._X[idx], obj.kernel, obj.gamma)
        like = PathFollower.__new__(PathFollower)
        like.ridge, like.refresh_every = obj.ridge, obj.refresh_every
        like.max_zero_run = int(state["max_zero_run"])
        like.fsc = np.asarray(state["fsc"], dtype=np.float64)
        like.isc = np.asarray(state["isc"], dtype=np.int64)
        like.resolves = int(state["resolves"])
        pt = np.tile(np.arange(cap), obj._copies)
        f64 = lambda k: np.array(state[k], dtype=np.float64)  # noqa: E731
        obj._pf = _restore_follower(K, pt, f64("z"), f64("p"), f64("c"), f64("a"), f64("G"),
                                    np.array(state["st"], dtype=np.int8), np.array(state["M"], dtype=np.int64),
                                    np.array(state["R"], dtype=np.float64), like)
        return obj

    @property
    def n_events_(self) -> int:
        """Path events since the model was built."""
        return self._fitted().events

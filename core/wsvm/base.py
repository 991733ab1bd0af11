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


def _float_array(value, name: str) -> np.ndarray:
    """``np.asarray(value, float64)``, or a ``ValueError`` naming ``name`` (an int beyond the float
    range, such as ``10**400``, used to escape as an ``OverflowError``)."""
    try:
        return np.asarray(value, dtype=np.float64)
    except OverflowError:
        raise ValueError(f"{name} holds a number too large for a float64 (beyond about 1.8e308)") from None
    except (TypeError, ValueError):
        raise ValueError(f"{name} must hold numbers") from None


def _plain(value):
    """A 0-d array (how ``.npz`` files give back scalars) as its element; anything else as is."""
    if isinstance(value, np.ndarray) and value.ndim == 0:
        return value[()]
    return value


def _exact_int(value):
    """``value`` as an int if it is an integer (not a bool, a float or a string), else None."""
    value = _plain(value)
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        return None
    return int(value)


def _inverse_matches(pf: PathFollower, R: np.ndarray, mlist: np.ndarray) -> bool:
    """Whether ``R`` is, to rounding amplified by the conditioning, the inverse of the bordered
    margin matrix ``[[0, z_M'], [z_M, Q_M]]``."""
    nM = mlist.shape[0]
    if nM == 0:
        return True
    A = np.zeros((nM + 1, nM + 1))
    zm = pf.z[mlist]
    A[0, 1:] = zm
    A[1:, 0] = zm
    A[1:, 1:] = np.outer(zm, zm) * pf.K[np.ix_(pf.pt[mlist], pf.pt[mlist])] + pf.ridge * np.eye(nM)
    resid = float(np.abs(R @ A - np.eye(nM + 1)).max())
    scale = float(np.abs(R).max()) * float(np.abs(A).max()) * (nM + 1)
    return resid <= 1e-3 * max(1.0, scale)


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

    def bad(self, key: str, problem: str) -> str:
        return f"damaged {self._what} state: entry {key!r} {problem}"

    def integer(self, key: str, lo: int, hi: int | None = None) -> int:
        """Entry ``key`` as an int in ``[lo, hi]``."""
        value = _exact_int(self[key])
        if value is None or value < lo or (hi is not None and value > hi):
            where = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
            raise ValueError(self.bad(key, f"must be an integer {where}; got {_plain(self[key])!r}"))
        return value

    def array(self, key: str, shape: tuple, kind: str, what: str = "") -> np.ndarray:
        """Entry ``key`` as a fresh array of ``shape``: ``kind`` "f" (finite float64) or "i" (int64)."""
        value = np.asarray(self[key])
        if value.shape != shape:
            raise ValueError(self.bad(key, f"has shape {value.shape}; expected {shape}{' ' + what if what else ''}"))
        if kind == "f":
            if value.dtype.kind not in "fiu":
                raise ValueError(self.bad(key, f"must hold numbers; got dtype {value.dtype}"))
            value = np.array(value, dtype=np.float64)
            if not np.isfinite(value).all():
                raise ValueError(self.bad(key, "contains NaN or infinite values"))
            return value
        if value.dtype.kind not in "iub":
            raise ValueError(self.bad(key, f"must hold integers; got dtype {value.dtype}"))
        return np.array(value, dtype=np.int64)


def _restore_follower(K, pt, z, p, c, a, G, st, mlist, R, like, cap_m: int | None = None,
                      kscale: float | None = None) -> PathFollower:
    """A PathFollower from saved arrays (no solve): ``like`` gives ridge, counters and settings.

    ``cap_m`` is the capacity of the margin buffers (the original's, so that the path pauses to
    grow them at the same events) and ``kscale`` the cached kernel scale (the kernel diagonal of
    dead slots is stale, so it is not read off ``K``); both are derived when not given."""
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
    pf._alloc_margin(max(16, 2 * mlist.size + 8) if cap_m is None else cap_m)
    if kscale is not None:
        pf._kscale = kscale
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
        sw = _float_array(sample_weight, name)
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
                                pf.R[: nM + 1, : nM + 1], pf, cap_m=pf.Mlist.shape[0], kscale=pf.kscale)
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
        with np.errstate(over="ignore"):
            cw = self.C * sw
        if not np.isfinite(cw).all():
            raise ValueError(f"C * sample_weight overflows (C = {self.C:g}, largest weight {sw.max():g}); "
                             "lower C or rescale the weights")
        K = np.ascontiguousarray(kernel_matrix(X, X, self.kernel, self.gamma))
        if not np.isfinite(K).all():
            raise ValueError("X holds values so large that the kernel overflows (a kernel value is not finite); "
                             "rescale the features (standardise them)")
        z, p = self._dual_terms(y)
        pt = np.tile(np.arange(n), self._copies)
        c = np.tile(cw, self._copies)
        self._validate_weights(c)
        pf = PathFollower(K, pt, z, p, c, ridge=self.ridge, refresh_every=self.refresh_every)
        kkt, tol = pf.kkt_violation(), pf.kkt_tolerance()
        if not kkt <= tol:
            raise ValueError(f"the weighted SVM could not be solved to tolerance at C = {self.C:g} (KKT violation "
                             f"{kkt:.3g} > {tol:.3g}): rounding swamps the solution; lower C or rescale the features")
        # a refused fit leaves the model as it was: the buffers are replaced only now
        self._alloc(n, X.shape[1])
        self._X[:] = X
        self._y[:] = y
        self._live[:] = True
        self._pid[:] = np.arange(n)
        self._slot = {i: i for i in range(n)}
        self._order = None
        self._next_id = n
        self._pf = pf
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
        self._X[slots] = X  # free slots: nothing reads them until they are marked live
        rows = kernel_matrix(X, self._X, self.kernel, self.gamma)
        if not np.isfinite(rows).all():
            cols = self._live.copy()
            cols[slots] = True
            if not np.isfinite(rows[:, cols]).all():
                raise ValueError("X holds values so large that the kernel overflows (a kernel value is not "
                                 "finite); rescale the features (standardise them upstream)")
        order = self._ordered_slots()  # before the dict changes
        self._y[slots] = y
        self._live[slots] = True
        ids = np.arange(self._next_id, self._next_id + n_new)
        self._pid[slots] = ids
        self._slot.update(zip(ids.tolist(), slots.tolist()))
        self._order = np.concatenate((order, slots))
        self._next_id += n_new
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
        pf.set_kernel_scale(np.diagonal(pf.K)[self._live])
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
        sw = _float_array(sample_weight_new, "sample_weight_new")
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
            # optional (older states lack them): the cached kernel scale and the margin buffer
            # capacity, so that the restored path takes the same steps to the last bit
            "kscale": float(pf.kscale), "mcap": int(pf.Mlist.shape[0]),
        })
        return state

    @classmethod
    def from_state(cls, state: dict):
        """Restore a model saved by :meth:`to_state` (same solution, path continues from it).

        Anything else (another class's state, a truncated or damaged one, not a mapping) is
        refused with a ``ValueError`` that says so and names the entry: the arrays are checked
        for their shapes, ranges and consistency, and the restored solution for its KKT
        conditions, before the path can read them (a margin index out of range used to crash
        the process at the next :meth:`path`).
        """
        state = _StateEntries(state, cls.__name__)
        version = _exact_int(state.get("version"))
        if version != _STATE_VERSION or _plain(state.get("class")) != cls.__name__:
            raise ValueError(f"not a {cls.__name__} state of version {_STATE_VERSION}")
        kwargs = {k: _plain(state[k]) for k in ("kernel", "gamma", "ridge", "refresh_every")}
        if "epsilon" in state:
            kwargs["epsilon"] = _plain(state["epsilon"])
        obj = cls(_plain(state["C"]), **kwargs)
        if not state.integer("fitted", 0, 1):
            return obj
        cap, dim = state.integer("cap", 1), state.integer("dim", 1)
        nv = obj._copies * cap
        X = state.array("X", (cap, dim), "f")
        y = state.array("y", (cap,), "f")
        live = state.array("live", (cap,), "i")
        if not np.all((live == 0) | (live == 1)):
            raise ValueError(state.bad("live", "must hold 0 or 1 per slot"))
        live = live.astype(bool)
        n_live = int(live.sum())
        pid = state.array("pid", (cap,), "i")
        next_id = state.integer("next_id", 0)
        ids = state.array("ids", (n_live,), "i", what=f"one per live slot ({n_live})")
        slots = state.array("slots", (n_live,), "i", what=f"one per live slot ({n_live})")
        if n_live and (slots.min() < 0 or slots.max() >= cap or not live[slots].all()
                       or np.unique(slots).size != n_live):
            raise ValueError(state.bad("slots", "must list each live slot once"))
        if n_live and (ids[0] < 0 or ids[-1] >= next_id or np.any(np.diff(ids) <= 0)):
            raise ValueError(state.bad("ids", f"must be increasing point ids below next_id ({next_id})"))
        if np.any(pid[slots] != ids) or np.any(pid[~live] != -1):
            raise ValueError(state.bad("pid", "does not match ids and slots"))
        try:
            obj._check_targets(y[live], n_live)
        except ValueError as exc:
            raise ValueError(state.bad("y", str(exc))) from None
        z, p = state.array("z", (nv,), "f"), state.array("p", (nv,), "f")
        c, a, G = state.array("c", (nv,), "f"), state.array("a", (nv,), "f"), state.array("G", (nv,), "f")
        st = state.array("st", (nv,), "i")
        if not np.all(np.abs(z) == 1.0):
            raise ValueError(state.bad("z", "must hold signs -1 or +1"))
        z_ref, p_ref = obj._dual_terms(y)
        var_live = np.tile(live, obj._copies)
        if np.any(z[var_live] != z_ref[var_live]) or np.any(p[var_live] != p_ref[var_live]):
            raise ValueError(state.bad("z", "and 'p' do not match the targets y"))
        if np.any(c < 0):
            raise ValueError(state.bad("c", "must be >= 0"))
        if not np.all((st == E.O_SET) | (st == E.M_SET) | (st == E.I_SET)):
            raise ValueError(state.bad("st", f"must hold the set codes {E.O_SET}, {E.M_SET}, {E.I_SET}"))
        if np.any(c[~var_live] != 0) or np.any(a[~var_live] != 0) or np.any(st[~var_live] == E.M_SET):
            raise ValueError(state.bad("c", "'a' and 'st' must be 0 / not in the margin for free slots"))
        mlist = np.asarray(state["M"])
        if mlist.ndim != 1:
            raise ValueError(state.bad("M", f"must be 1-d; got shape {mlist.shape}"))
        nM = mlist.shape[0]
        mlist = state.array("M", (nM,), "i")
        if nM and (mlist.min() < 0 or mlist.max() >= nv or np.unique(mlist).size != nM
                   or np.any(st[mlist] != E.M_SET)):
            raise ValueError(state.bad("M", f"must list distinct margin variables below {nv}"))
        if int(np.count_nonzero(st == E.M_SET)) != nM:
            raise ValueError(state.bad("M", "does not list every variable that 'st' puts in the margin"))
        R = state.array("R", (nM + 1, nM + 1), "f")
        fsc = state.array("fsc", (4,), "f")
        isc = state.array("isc", (5,), "i")
        if isc[E.NM] != nM or np.any(isc < 0) or isc[E.ILLCOND] > 1:
            raise ValueError(state.bad("isc", f"must hold non-negative counters and the margin size {nM}"))
        cap_m = state.integer("mcap", nM + 1, max(16, 2 * nv + 8)) if "mcap" in state else None
        kscale = None
        if "kscale" in state:
            kscale = _plain(state["kscale"])
            if isinstance(kscale, (bool, np.bool_)) or not isinstance(kscale, (int, float, np.floating, np.integer)) \
                    or not (np.isfinite(kscale) and kscale >= 1.0):
                raise ValueError(state.bad("kscale", "must be a finite number >= 1"))
            kscale = float(kscale)
        obj._alloc(cap, dim)
        obj._X[:] = X
        obj._y[:] = y
        obj._live[:] = live
        obj._pid[:] = pid
        obj._next_id = next_id
        obj._slot = dict(zip(ids.tolist(), slots.tolist()))
        K = np.zeros((cap, cap))
        if n_live:
            idx = np.flatnonzero(live)
            K[np.ix_(idx, idx)] = kernel_matrix(X[idx], X[idx], obj.kernel, obj.gamma)
            if not np.isfinite(K).all():
                raise ValueError(state.bad("X", "makes the kernel overflow (a kernel value is not finite)"))
        like = PathFollower.__new__(PathFollower)
        like.ridge, like.refresh_every = obj.ridge, obj.refresh_every
        like.max_zero_run = state.integer("max_zero_run", 1)
        like.fsc, like.isc = fsc, isc
        like.resolves = state.integer("resolves", 0)
        pt = np.tile(np.arange(cap), obj._copies)
        pf = _restore_follower(K, pt, z, p, c, a, G, st.astype(np.int8), mlist, R, like, cap_m=cap_m, kscale=kscale)
        if not _inverse_matches(pf, R, mlist):
            raise ValueError(state.bad("R", "is not the inverse of the margin system of 'M'"))
        kkt, tol = pf.kkt_violation(), pf.kkt_tolerance()
        if not kkt <= tol:
            raise ValueError(f"damaged {cls.__name__} state: its solution violates the optimality (KKT) "
                             f"conditions by {kkt:.3g} (tolerance {tol:.3g}); check entries 'a', 'G', 'fsc', 'c'")
        obj._pf = pf
        return obj

    @property
    def n_events_(self) -> int:
        """Path events since the model was built."""
        return self._fitted().events

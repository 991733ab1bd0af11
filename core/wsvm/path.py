"""Multi-parametric solution path of the instance-weighted SVM dual (Karasuyama et al., ref. 002).

The dual (see :mod:`ratiowatch.core.wsvm.solver`) depends on the weights only through the box
``0 <= a_v <= C_v``, so along ``c(theta) = c_old + theta (c_new - c_old)`` the optimum is
piecewise affine in theta. Inside a region with margin set M::

    [db; da_M] / dtheta = phi = -[[0, z_M'], [z_M, Q_M]]^-1 [z_I' d_I; Q_MI d_I]
    dG / dtheta        = psi = z phi_0 + Q[:, M] phi_M + Q[:, I] d_I

and the step is the smallest of four sign-filtered ratio tests (a_M hits 0, a_M hits its moving
bound, an O point or an I point reaches the margin), or the end of the segment. The inverse of
the bordered matrix is updated per event in O(|M|^2); the whole loop is compiled
(:mod:`ratiowatch.core.wsvm._engine`). The empty-margin case follows section 2.6 of the reference (with the
max/min of eq. 23 corrected). Degenerate breakpoints (ties that make zero-length events repeat)
and numerically singular margin systems are resolved by jumping a little ahead with an exact
warm-started solve (:func:`ratiowatch.core.wsvm.solver.solve`) and continuing from there.

Adding a point is raising its weight from 0; removing is lowering it to 0. A variable whose
weight is 0 at the start of a segment is re-labelled O or I from its current margin (its old set is meaningless at weight 0);
one that stays at 0 along the segment is ignored by the event tests.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import _engine as E
from .solver import I_SET, M_SET, O_SET, gradient, solve


#: the share of :meth:`PathFollower.kkt_tolerance` the incremental solution may drift by before
#: the end of a segment refactors it
_DRIFT = 1e-2


def _kkt_tolerance(pmax: float, suma: float, kscale: float) -> float:
    """``1e-6`` times the margin scale (:func:`~ratiowatch.core.wsvm.solver.margin_scale` of
    targets up to ``pmax``), or a thousand times the rounding floor ``eps * kscale * sum |a|`` if
    that is larger."""
    return max(1e-6 * (min(1.0, pmax) + pmax), 1e3 * float(np.finfo(np.float64).eps) * kscale * suma)


@dataclass
class PathStats:
    """What one :meth:`PathFollower.follow` call did.

    Attributes
    ----------
    events : int
        Index moves between O, M and I (one event = one index moving).
    mean_margin : float
        Mean |M| over the events (NaN when there were none).
    resolves : int
        Degenerate breakpoints (or singular margin systems) jumped over by an exact solve.
    """

    events: int
    mean_margin: float
    resolves: int


class PathFollower:
    """Exact optimum of the generic weighted dual, movable along weight segments.

    Parameters
    ----------
    K : ndarray (cap, cap)
        Kernel matrix over point slots (owned; may be edited in place by the caller for slots
        whose variables all have weight 0).
    pt : int array (nv,)
        Point slot of each dual variable.
    z, p : float arrays (nv,)
        Signs and linear term of the dual.
    c : float array (nv,)
        Current weights (upper bounds of the variables), all >= 0.
    ridge : float
        Added to the diagonal of Q (keeps the margin systems invertible); the path and KKT checks use the ridged Q.
    start : {"solve", "zero"}
        ``"solve"``: exact solve at ``c``. ``"zero"``: ``c`` must be all zero; the optimum is
        ``a = 0`` with bias 0.

    Examples
    --------
    A two-point classification dual (``z = y``, ``p = -1``) whose second weight is raised:

    >>> K = np.array([[1.0, 0.2], [0.2, 1.0]])
    >>> pf = PathFollower(K, [0, 1], [1.0, -1.0], [-1.0, -1.0], [0.5, 0.5])
    >>> stats = pf.follow([0.5, 2.0])
    >>> pf.kkt_violation() < 1e-12, pf.a.tolist()
    (True, [0.5, 0.5])
    """

    def __init__(self, K, pt, z, p, c, *, ridge: float = 1e-8, start: str = "solve",
                 refresh_every: int = 500, max_zero_run: int = 25):
        self.K = K
        self.pt = np.ascontiguousarray(pt, dtype=np.int64)
        self.z = np.ascontiguousarray(z, dtype=np.float64)
        self.p = np.ascontiguousarray(p, dtype=np.float64)
        self.c = np.ascontiguousarray(c, dtype=np.float64).copy()
        self.ridge = float(ridge)
        self.refresh_every = int(refresh_every)
        self.max_zero_run = int(max_zero_run)
        nv = self.z.shape[0]
        self.c0 = self.c.copy()
        self.d = np.zeros(nv)
        self.a = np.zeros(nv)
        self.G = np.zeros(nv)
        self.st = np.zeros(nv, dtype=np.int8)
        self.h = np.zeros(nv)
        self.psi = np.zeros(nv)
        self.act = np.zeros(nv, dtype=np.bool_)
        self._alloc_margin(min(max(16, nv // 8), nv + 4))
        self.fsc = np.zeros(4)
        self.isc = np.zeros(5, dtype=np.int64)
        self.resolves = 0
        if start == "zero":
            if np.any(self.c != 0):
                raise ValueError("start='zero' needs all weights equal to 0")
            self._start_from_zero()
        elif start == "solve":
            try:
                sol = solve(self.K, self.pt, self.z, self.p, self.c, ridge=self.ridge)[:3]
            except RuntimeError:
                sol = None
            if sol is not None:
                self._set_solution(*sol, theta=0.0)
            else:
                # SMO slows down with C times the kernel's scale (a linear kernel on features of
                # scale 1e3 met its iteration cap) and the polish then cannot settle the sets;
                # the path from zero weights reaches the same optimum without that limit
                target = self.c.copy()
                self.c[:] = 0.0
                self._start_from_zero()
                self.follow(target)
        else:
            raise ValueError(f"start must be 'solve' or 'zero'; got {start!r}")

    # ------------------------------------------------------------------ state helpers
    def _start_from_zero(self) -> None:
        """The optimum at zero weights: a = 0, bias 0, labels read off G = p."""
        self.c0[:] = 0.0
        self.a[:] = 0.0
        self.G[:] = self.p
        self.st[:] = np.where(self.G >= 0, O_SET, I_SET)

    def _alloc_margin(self, cap_m: int) -> None:
        old_m = getattr(self, "Mlist", None)
        old_r = getattr(self, "R", None)
        self.Mlist = np.zeros(cap_m, dtype=np.int64)
        self.R = np.zeros((cap_m + 1, cap_m + 1))
        self.phi = np.zeros(cap_m + 1)
        if old_m is not None:
            self.Mlist[: old_m.shape[0]] = old_m
            self.R[: old_r.shape[0], : old_r.shape[1]] = old_r

    @property
    def kscale(self) -> float:
        """Largest kernel diagonal (scales the sign-filter tolerance); cached, O(n) to refresh."""
        ks = getattr(self, "_kscale", None)
        if ks is None:
            ks = self._kscale = float(np.max(np.abs(np.diag(self.K)), initial=1.0))
        return ks

    def note_kernel_rows(self, rows_diag) -> None:
        """Update the cached kernel scale after new kernel rows were written (their diagonal
        entries, or already their largest absolute value as a float)."""
        top = rows_diag if isinstance(rows_diag, float) else float(np.max(np.abs(rows_diag), initial=0.0))
        self._kscale = max(self.kscale, top)

    def set_kernel_scale(self, diag) -> None:
        """Reset the cached kernel scale to the largest of ``diag`` (the kernel diagonal of the
        points that remain, at least 1). Called when points leave: a scale that only grew kept
        the tolerance ``tol * kscale`` of a point of norm 1e7 long gone, which then filtered out
        every event of a linear kernel on features of scale 1."""
        self._kscale = float(np.max(np.abs(diag), initial=1.0))

    @property
    def b(self) -> float:
        """Current bias."""
        return float(self.fsc[E.BIAS])

    @property
    def events(self) -> int:
        """Events since construction."""
        return int(self.isc[E.EVENTS])

    @property
    def margin(self) -> np.ndarray:
        """Indices of the margin set M (path order)."""
        return self.Mlist[: self.isc[E.NM]].copy()

    def _set_solution(self, a, b, st, theta: float) -> None:
        self.a[:] = a
        self.st[:] = st
        self.fsc[E.BIAS] = b
        self.fsc[E.THETA] = theta
        m = np.flatnonzero(self.st == M_SET)
        if m.size + 4 > self.Mlist.shape[0]:
            self._alloc_margin(2 * m.size + 8)
        self.Mlist[: m.size] = m
        self.isc[E.NM] = m.size
        try:
            ok = E.rebuild(self.K, self.pt, self.z, self.p, self.c0, self.d, self.a, self.G, self.st,
                           self.Mlist, self.R, self.h, self.fsc, self.isc, self.ridge)
        except np.linalg.LinAlgError:
            ok = False
        if not ok:
            raise RuntimeError("weighted SVM: singular margin system after an exact solve; raise the ridge")

    def set_point_gradient(self, vars_: np.ndarray) -> None:
        """Recompute G (and the O/I label) of zero-weight variables whose kernel row just changed."""
        vars_ = np.ascontiguousarray(vars_, dtype=np.int64)
        if not E.place(self.K, self.pt, self.z, self.p, self.c, self.a, self.G, self.st, self.b, vars_):
            raise ValueError("only variables with zero weight and zero alpha can be (re)placed")

    # ------------------------------------------------------------------ path
    def follow(self, c_new, *, on_breakpoint=None) -> PathStats:
        """Move the optimum from the current weights to ``c_new`` along the straight segment.

        Parameters
        ----------
        c_new : array (nv,)
            Target weights, finite and >= 0.
        on_breakpoint : callable, optional
            Called as ``on_breakpoint(self, theta)`` after every event (slower: one compiled
            call per event). During the call the follower holds the exact solution at the
            breakpoint: ``c`` is the weights at theta (``c0 + theta d``), so
            :meth:`kkt_violation` checks that solution. It must not change the follower.

        Returns
        -------
        PathStats

        Raises
        ------
        ValueError, RuntimeError
            If the path cannot be followed. Whatever is raised inside the call (by the path or by
            ``on_breakpoint``, including ``KeyboardInterrupt``) leaves the follower as it was
            before the call.
        """
        c_new = np.ascontiguousarray(c_new, dtype=np.float64)
        if c_new.shape != self.c.shape:
            raise ValueError(f"weights must have shape {self.c.shape}; got {c_new.shape}")
        saved = self._snapshot()
        tol = E.begin(c_new, self.c, self.c0, self.d, self.act, self.st, self.a, self.G, self.K, self.pt,
                      self.z, self.h, self.ridge, self.fsc, self.isc)
        if tol < 0:  # nothing was changed
            raise ValueError("weights must be finite (no NaN or infinity) and >= 0; clip importance estimates at 0 first")
        ev0, summ0, res0 = int(self.isc[E.EVENTS]), float(self.fsc[E.SUMM]), self.resolves
        try:
            self._run(c_new, tol, on_breakpoint)
        except BaseException:
            # a half-followed segment is not a solution of any weights the caller can name (c is
            # only moved at the end): put the follower back where the call found it
            self._restore(saved)
            raise
        ev = int(self.isc[E.EVENTS]) - ev0
        mm = (float(self.fsc[E.SUMM]) - summ0) / ev if ev else float("nan")
        return PathStats(events=ev, mean_margin=mm, resolves=self.resolves - res0)

    def _run(self, c_new, tol, on_breakpoint) -> None:
        """The segment loop of :meth:`follow`, from :func:`_engine.begin` to :func:`_engine.finish`."""
        budget = 1 if on_breakpoint is not None else np.iinfo(np.int64).max
        while True:
            try:
                status = E.run(self.K, self.pt, self.z, self.p, self.c0, self.d, self.a, self.G, self.st,
                               self.act, self.Mlist, self.R, self.h, self.psi, self.phi, self.fsc, self.isc,
                               self.ridge, tol, self.kscale, budget, self.refresh_every, self.max_zero_run)
            except np.linalg.LinAlgError:  # periodic refactorisation met a singular margin system
                status = E.SINGULAR
            if status == E.DONE:
                break
            if status == E.PAUSE:
                self._breakpoint(on_breakpoint)
            elif status == E.FULL:
                self._alloc_margin(2 * self.Mlist.shape[0])
            elif status in (E.CYCLE, E.SINGULAR):
                self._jump()
                if on_breakpoint is not None:
                    self._breakpoint(on_breakpoint)
            else:
                # INFEASIBLE: the margin emptied while no O/I point can carry the bias. With
                # repeated inputs this happens near theta = 1 when every weight goes to 0: z'a
                # keeps an absolute rounding residue larger than what is left of the weights, so
                # the equality looks violated. An exact solve further along settles it; only if
                # that fails too is the segment infeasible.
                try:
                    self._jump()
                except RuntimeError:
                    raise ValueError(
                        "the weighted SVM has no feasible bias along this weight path: for classification, "
                        "the points with positive weight must include both classes; the model is unchanged"
                    ) from None
                if on_breakpoint is not None:
                    self._breakpoint(on_breakpoint)
        E.finish(c_new, self.c, self.c0, self.d, self.st, self.a, self.G, self.Mlist, self.R, self.isc, self.fsc)
        if self.isc[E.ILLCOND]:
            # a near-singular margin system was updated incrementally: re-solve the final region
            # exactly (backward-stable solve) so rounding is not amplified by the conditioning
            E.rebuild(self.K, self.pt, self.z, self.p, self.c0, self.d, self.a, self.G, self.st,
                      self.Mlist, self.R, self.h, self.fsc, self.isc, self.ridge)
        self._check_drift()

    def _check_drift(self) -> None:
        """End of a segment: recompute the margin equations from scratch (about one event's cost)
        and, if the incremental updates drifted beyond a hundredth of :meth:`kkt_tolerance`,
        refactor the final region exactly, or re-solve if that does not restore the KKT
        conditions. (At large C the updates of a badly conditioned margin inverse left KKT
        violations of 5e-5 after 60 events.) Ordinary paths stay far below that tolerance and are
        left as they are.
        """
        nM = int(self.isc[E.NM])
        res, eq, suma, pmax, cmax = E.margin_residual(self.K, self.pt, self.z, self.p, self.a, self.c, self.b,
                                                      self.ridge, self.Mlist, nM)
        tol = _DRIFT * _kkt_tolerance(pmax, suma, self.kscale)
        if res <= tol and eq <= tol * max(1.0, cmax):
            return
        self._refresh_region(tol)

    def _refresh_region(self, tol: float) -> None:
        try:
            ok = E.rebuild(self.K, self.pt, self.z, self.p, self.c0, self.d, self.a, self.G, self.st,
                           self.Mlist, self.R, self.h, self.fsc, self.isc, self.ridge)
        except np.linalg.LinAlgError:
            ok = False
        if ok and self._set_violation() <= tol:
            return
        try:
            a, b, st = solve(self.K, self.pt, self.z, self.p, self.c, ridge=self.ridge, a0=self.a)[:3]
        except RuntimeError:  # keep the refactored path solution, the best there is
            return
        self._set_solution(a, b, st, theta=0.0)
        self.resolves += 1

    def _set_violation(self) -> float:
        """Largest KKT violation read off the stored G and labels (valid right after a rebuild)."""
        c, a, G, st = self.c, self.a, self.G, self.st
        act = c > 0
        wrong_o = np.where(act & (st == O_SET), -G, 0.0)
        wrong_i = np.where(act & (st == I_SET), G, 0.0)
        m = st == M_SET
        box = np.where(m, np.maximum(-a, a - c), 0.0)
        return float(max(wrong_o.max(initial=0.0), wrong_i.max(initial=0.0),
                         box.max(initial=0.0) / max(1.0, float(c.max(initial=0.0)))))

    def _breakpoint(self, on_breakpoint) -> None:
        theta = float(self.fsc[E.THETA])
        # the weights at theta, so that what the callback reads (kkt_violation, the models'
        # sample_weight_) describes the breakpoint solution; the compiled loop reads c0 and d only
        np.add(self.c0, theta * self.d, out=self.c)
        on_breakpoint(self, theta)

    def _snapshot(self) -> tuple:
        nM = int(self.isc[E.NM])
        return (self.c.copy(), self.a.copy(), self.G.copy(), self.st.copy(), self.Mlist[:nM].copy(),
                self.R[: nM + 1, : nM + 1].copy(), self.fsc.copy(), self.isc.copy(), self.resolves)

    def _restore(self, saved: tuple) -> None:
        c, a, G, st, mlist, R, fsc, isc, resolves = saved
        self.c[:] = c
        self.c0[:] = c
        self.d[:] = 0.0
        self.a[:] = a
        self.G[:] = G
        self.st[:] = st
        self.Mlist[: mlist.size] = mlist
        self.R[:] = 0.0
        self.R[: mlist.size + 1, : mlist.size + 1] = R
        self.fsc[:] = fsc
        self.isc[:] = isc
        self.resolves = resolves

    def _jump(self) -> None:
        """Leave a degenerate breakpoint: exact warm-started solve a little further along."""
        theta = float(self.fsc[E.THETA])
        for eta in (1e-3, 1e-2, 1e-1, 1.0):
            th = min(1.0, theta + eta * (1.0 - theta))
            if 1.0 - th < 1e-9:
                th = 1.0
            c_t = self.c0 + th * self.d
            if th == 1.0:
                c_t = self.c0 + self.d
            try:
                a, b, st = solve(self.K, self.pt, self.z, self.p, c_t, ridge=self.ridge, a0=self.a)[:3]
                # continue the same segment from theta = th (c0 and d are unchanged)
                self._set_solution(a, b, st, theta=th)
            except RuntimeError:
                continue
            self.c[:] = c_t
            self.resolves += 1
            self.isc[E.ZRUN] = 0
            return
        raise RuntimeError("weighted SVM path: could not leave a degenerate breakpoint")

    # ------------------------------------------------------------------ checks
    def kkt_tolerance(self) -> float:
        """The largest :meth:`kkt_violation` that still counts as the solution: ``1e-6`` times
        :func:`~ratiowatch.core.wsvm.solver.margin_scale`, or, if larger, a thousand times what
        rounding alone leaves in ``G`` at the solution's scale (``eps * kscale * sum |a|``)."""
        return _kkt_tolerance(float(np.abs(self.p).max(initial=0.0)), float(np.abs(self.a).sum()), self.kscale)

    def kkt_violation(self) -> float:
        """Largest KKT violation of the current solution, recomputed from scratch.

        Covers, with ``G = Q a + p + z b``, ``G >= 0`` at ``a = 0``, ``G = 0`` strictly inside and
        ``G <= 0`` at ``a = C`` (margin units), and the box ``0 <= a <= C`` and the equality
        ``z'a = 0`` divided by ``max(1, max C)`` (weight units made relative).
        """
        c = self.c
        a = self.a
        G = gradient(self.K, self.pt, self.z, self.p, a, self.b, self.ridge)
        eps = 1e-12 * max(1.0, float(c.max(initial=0.0)))
        at0 = a <= eps
        atc = (~at0) & (a >= c - eps)
        free = ~(at0 | atc)
        viol = np.zeros_like(a)
        viol[at0] = np.maximum(0.0, -G[at0])
        viol[atc] = np.maximum(0.0, G[atc])
        viol[free] = np.abs(G[free])
        viol[at0 & (a >= c - eps)] = 0.0  # alpha = C (about 0): at both bounds, either sign of G is fine
        # box and equality are in units of the weights: relative to the largest weight, so a
        # rounding-level error on large C does not read as a margin violation
        wscale = max(1.0, float(c.max(initial=0.0)))
        box = float(np.max(np.maximum(0.0, np.maximum(-a, a - c)), initial=0.0)) / wscale
        return float(max(viol.max(initial=0.0), box, abs(float(self.z @ a)) / wscale))

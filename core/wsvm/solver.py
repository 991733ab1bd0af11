"""Exact solve of the weighted SVM dual at fixed weights: SMO, then an exact polish.

Every model here is the generic box-constrained dual (LIBSVM's form)::

    min_a  1/2 a' Q a + p' a     s.t.  z' a = 0,   0 <= a_v <= C_v,
    Q_uv = z_u z_v K(x_pt(u), x_pt(v)) + ridge [u == v]

with signs ``z_v`` in {-1, +1}. Classification: one variable per point, ``z = y``, ``p = -1``.
Regression: two variables per point (``z = +1, p = eps - y`` and ``z = -1, p = eps + y``).
The optimality conditions with ``G_v = (Q a)_v + p_v + z_v b`` are
``G_v >= 0`` if ``a_v = 0`` (set O), ``G_v = 0`` if ``0 < a_v < C_v`` (set M),
``G_v <= 0`` if ``a_v = C_v`` (set I).

:func:`smo` runs sequential minimal optimisation (second-order working-set selection of Fan,
Chen and Lin 2005) to a tight gap; :func:`polish` then reads the index sets off that solution
and solves the margin system exactly, correcting the sets until every KKT condition holds.
The result is exact to rounding, which the path follower needs as its starting point.
"""

from __future__ import annotations

import numpy as np
from numba import njit

O_SET, M_SET, I_SET = 0, 1, 2


@njit(cache=True, inline="always")
def midpoint_or(u, w, fallback):  # pragma: no cover - compiled
    """The bias inside a feasible interval with ends ``u`` and ``w`` (either may be infinite): its
    middle, its one finite end, or ``fallback`` when both are infinite."""
    if np.isfinite(u) and np.isfinite(w):
        return 0.5 * (u + w)
    if np.isfinite(u):
        return u
    if np.isfinite(w):
        return w
    return fallback


@njit(cache=True)
def smo(K, pt, z, p, C, a, g, ridge, eps, max_iter, floor_coef=0.0):  # pragma: no cover - compiled
    """SMO on the generic dual, in place on ``a`` and ``g = Q a + p``; returns (iterations, b).

    Stops at a gap below ``max(eps, floor_coef * sum(a))``: ``floor_coef * sum(a)`` is what
    rounding leaves in ``g`` at the current solution's scale (see :func:`rounding_floor`).
    """
    nv = a.shape[0]
    it = 0
    suma = 0.0
    for t in range(nv):
        suma += a[t]
    gmax = 0.0
    gmin = 0.0
    while it < max_iter:
        gmax = -np.inf
        i = -1
        for t in range(nv):
            if C[t] <= 0.0:
                continue
            if z[t] > 0.0:
                if a[t] < C[t]:
                    val = -g[t]
                    if val >= gmax:
                        gmax = val
                        i = t
            elif a[t] > 0.0:
                val = g[t]
                if val >= gmax:
                    gmax = val
                    i = t
        gmin = np.inf
        j = -1
        objmin = np.inf
        if i >= 0:
            pi = pt[i]
            for t in range(nv):
                if C[t] <= 0.0:
                    continue
                if z[t] > 0.0:
                    if not (a[t] > 0.0):
                        continue
                elif not (a[t] < C[t]):
                    continue
                val = -z[t] * g[t]
                if val < gmin:
                    gmin = val
                diff = gmax - val
                if diff > 0.0:
                    quad = K[pi, pi] + K[pt[t], pt[t]] - 2.0 * K[pi, pt[t]]
                    if t != i:
                        quad += 2.0 * ridge
                    if quad <= 1e-12:
                        quad = 1e-12
                    obj = -diff * diff / quad
                    if obj <= objmin:
                        objmin = obj
                        j = t
        if i < 0 or j < 0 or gmax - gmin < max(eps, floor_coef * suma):
            break
        # move a_i += z_i delta, a_j -= z_j delta (keeps z'a = 0), delta > 0 lowers the objective
        valj = -z[j] * g[j]
        quad = K[pt[i], pt[i]] + K[pt[j], pt[j]] - 2.0 * K[pt[i], pt[j]] + 2.0 * ridge
        if quad <= 1e-12:
            quad = 1e-12
        delta = (gmax - valj) / quad
        bi = C[i] - a[i] if z[i] > 0.0 else a[i]
        bj = a[j] if z[j] > 0.0 else C[j] - a[j]
        snap_i = False
        snap_j = False
        if bi <= delta:
            delta = bi
            snap_i = True
        if bj <= delta:
            delta = bj
            snap_j = True
            snap_i = bi <= delta
        ai_old = a[i]
        aj_old = a[j]
        a[i] += z[i] * delta
        a[j] -= z[j] * delta
        if snap_i:  # land exactly on the bound: no 1e-17 residues that look "free"
            a[i] = C[i] if z[i] > 0.0 else 0.0
        if snap_j:
            a[j] = 0.0 if z[j] > 0.0 else C[j]
        suma += (a[i] - ai_old) + (a[j] - aj_old)
        pi = pt[i]
        pj = pt[j]
        for t in range(nv):
            g[t] += z[t] * delta * (K[pt[t], pi] - K[pt[t], pj])
        g[i] += ridge * z[i] * delta
        g[j] -= ridge * z[j] * delta
        it += 1
    # bias: mean over free variables, else the middle of the feasible interval
    s = 0.0
    cnt = 0
    for t in range(nv):
        if C[t] > 0.0 and a[t] > 0.0 and a[t] < C[t]:
            s += -z[t] * g[t]
            cnt += 1
    b = s / cnt if cnt > 0 else midpoint_or(gmax, gmin, 0.0)
    return it, b


def gradient(K, pt, z, p, a, b, ridge) -> np.ndarray:
    """``G = Q a + p + z b`` computed from scratch (one kernel mat-vec over points)."""
    from ._engine import kmatvec

    w = np.bincount(pt, weights=z * a, minlength=K.shape[0])
    return z * kmatvec(K, w)[pt] + p + ridge * a + z * b


def feasible_start(z: np.ndarray, C: np.ndarray, a0: np.ndarray | None) -> np.ndarray:
    """Project a warm start into the box and repair ``z'a = 0`` (alpha seeding)."""
    a = np.zeros_like(C) if a0 is None else np.clip(np.asarray(a0, dtype=np.float64), 0.0, C)
    r = float(z @ a)
    if abs(r) > 0.0:
        # lower the variables on the side in excess, largest first
        side = np.flatnonzero((z * np.sign(r) > 0) & (a > 0))
        for v in side[np.argsort(-a[side])]:
            take = min(a[v], abs(r))
            a[v] -= take
            r -= np.sign(r) * take
            if abs(r) <= 0.0:
                break
    return a


def interval(G, z, b, st, act):
    """Feasible bias interval ``[lo, hi]`` implied by the O/I points when M is empty."""
    w = b - z * G  # the bias value that would put each point exactly on its margin
    low = act & (((st == O_SET) & (z > 0)) | ((st == I_SET) & (z < 0)))
    up = act & (((st == O_SET) & (z < 0)) | ((st == I_SET) & (z > 0)))
    lo = float(w[low].max()) if low.any() else -np.inf
    hi = float(w[up].min()) if up.any() else np.inf
    return lo, hi, w, low, up


def margin_scale(p) -> float:
    """The scale of the gradients ``G`` that an absolute KKT tolerance is relative to.

    ``1 + max|p|`` for ordinary targets; below 1 it shrinks with ``max|p|`` (as ``2 max|p|``) so
    that targets and tubes of scale 1e-8 are not solved to a tolerance of 1e-10 (a 1 % error).
    """
    pmax = float(np.abs(p).max(initial=0.0))
    return min(1.0, pmax) + pmax


def rounding_floor(K, pt, a) -> float:
    """What rounding alone leaves in ``G = Q a + p``: ``|Q a| <= max K_uu * sum a``, times the unit
    roundoff. A tolerance below it is never met (a linear kernel on features of scale 1e3 ran SMO
    to its iteration cap and then failed the polish). It is taken at the solution ``a``, not at
    the bounds: with ``sum C`` a very large C (1e14) made the tolerance larger than the gradients
    at ``a = 0``, and SMO returned that as the solution."""
    return _floor_coef(K, pt) * float(np.abs(a).sum())


def _floor_coef(K, pt) -> float:
    kmax = float(np.abs(np.diag(K)).max(initial=0.0)) if pt.shape[0] else 0.0
    return float(np.finfo(np.float64).eps) * kmax


def polish(K, pt, z, p, C, a, ridge, *, kkt_tol: float = 1e-9, max_rounds: int = 60, gfloor: float = 0.0):
    """Exact solution from an approximate one: sets from ``a``, margin system solved exactly.

    KKT violations up to ``kkt_tol`` times :func:`margin_scale`, or ``gfloor`` (the rounding
    floor) if larger, are accepted. Returns ``(a, b, status, G)``; raises ``RuntimeError`` if the
    sets do not settle.
    """
    nv = a.shape[0]
    act = C > 0
    scale = float(C.max()) if act.any() else 1.0
    tol_a = 1e-9 * scale
    st = np.full(nv, O_SET, dtype=np.int8)
    st[act & (a >= C - tol_a)] = I_SET
    st[act & (a > tol_a) & (a < C - tol_a)] = M_SET
    gtol = max(kkt_tol * margin_scale(p), gfloor)
    one_at_a_time = False
    for rnd in range(max_rounds):
        aa = np.zeros(nv)
        aa[st == I_SET] = C[st == I_SET]
        Mi = np.flatnonzero(st == M_SET)
        if Mi.size:
            Ii = np.flatnonzero(st == I_SET)
            KMM = K[np.ix_(pt[Mi], pt[Mi])]
            QMM = np.outer(z[Mi], z[Mi]) * KMM + ridge * np.eye(Mi.size)
            QMI_c = z[Mi] * (K[np.ix_(pt[Mi], pt[Ii])] @ (z[Ii] * C[Ii])) if Ii.size else np.zeros(Mi.size)
            A = np.zeros((Mi.size + 1, Mi.size + 1))
            A[0, 1:] = z[Mi]
            A[1:, 0] = z[Mi]
            A[1:, 1:] = QMM
            rhs = np.concatenate(([-(z[Ii] @ C[Ii])], -(p[Mi] + QMI_c)))
            try:
                sol = np.linalg.solve(A, rhs)
            except np.linalg.LinAlgError:
                sol = np.linalg.lstsq(A, rhs, rcond=None)[0]
            b = float(sol[0])
            aa[Mi] = sol[1:]
            G = gradient(K, pt, z, p, aa, b, ridge)
            G[Mi] = 0.0
            viol_m0 = Mi[aa[Mi] <= 0.0]
            viol_mc = Mi[aa[Mi] >= C[Mi]]
        else:
            G0 = gradient(K, pt, z, p, aa, 0.0, ridge)
            lo, hi, w, low, up = interval(G0, z, 0.0, st, act)
            eq = float(z @ aa)
            if lo > hi + gtol or abs(eq) > gtol * scale:
                # no bias fits or the equality fails: the extreme points must share a margin
                cand = [int(np.flatnonzero(low)[np.argmax(w[low])])] if low.any() else []
                cand += [int(np.flatnonzero(up)[np.argmin(w[up])])] if up.any() else []
                if not cand:
                    raise RuntimeError("weighted SVM: no point can carry the bias; is any weight positive?")
                st[cand] = M_SET
                continue
            b = 0.5 * (lo + hi) if np.isfinite(lo) and np.isfinite(hi) else (lo if np.isfinite(lo) else (hi if np.isfinite(hi) else 0.0))
            G = G0 + z * b
            viol_m0 = viol_mc = np.empty(0, dtype=np.int64)
        viol_o = np.flatnonzero(act & (st == O_SET) & (G < -gtol))
        viol_i = np.flatnonzero(act & (st == I_SET) & (G > gtol))
        if not (viol_m0.size or viol_mc.size or viol_o.size or viol_i.size):
            zero = ~act
            st[zero] = np.where(G[zero] >= 0, O_SET, I_SET)
            return aa, b, st, G
        if rnd >= 10:
            one_at_a_time = True
        if one_at_a_time:  # fix the worst violation only; full swaps can oscillate
            scores = [
                (float(-aa[viol_m0].min()) if viol_m0.size else -1, "m0"),
                (float((aa - C)[viol_mc].max()) if viol_mc.size else -1, "mc"),
                (float(-G[viol_o].min()) if viol_o.size else -1, "o"),
                (float(G[viol_i].max()) if viol_i.size else -1, "i"),
            ]
            kind = max(scores)[1]
            if kind == "m0":
                st[viol_m0[np.argmin(aa[viol_m0])]] = O_SET
            elif kind == "mc":
                st[viol_mc[np.argmax((aa - C)[viol_mc])]] = I_SET
            elif kind == "o":
                st[viol_o[np.argmin(G[viol_o])]] = M_SET
            else:
                st[viol_i[np.argmax(G[viol_i])]] = M_SET
        else:
            st[viol_m0] = O_SET
            st[viol_mc] = I_SET
            st[viol_o] = M_SET
            st[viol_i] = M_SET
    raise RuntimeError("weighted SVM polish did not settle the index sets; try a larger ridge")


def solve(K, pt, z, p, C, *, ridge: float, a0=None, eps: float = 1e-10, max_iter: int = 10_000_000):
    """Exact dual solution at weights ``C``: warm-started SMO, then :func:`polish`.

    Returns ``(a, b, status, G, smo_iterations)``.
    """
    a = feasible_start(z, C, a0)
    g = gradient(K, pt, z, p, a, 0.0, ridge)
    coef = _floor_coef(K, pt)
    iters, _ = smo(K, pt, z, p, C, a, g, float(ridge), eps * margin_scale(p), int(max_iter), coef)
    a, b, st, G = polish(K, pt, z, p, C, a, ridge, gfloor=rounding_floor(K, pt, a))
    return a, b, st, G, int(iters)

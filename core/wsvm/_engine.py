"""Compiled inner loops of the weight-path follower (see :mod:`ratiowatch.core.wsvm.path` for the maths).

State lives in flat arrays so one call can run many events without returning to Python:

- ``a, G, st``: dual variables, gradients ``G = Q a + p + z b``, set labels (0=O, 1=M, 2=I);
- ``c0, d``: weights at the segment start and their direction, ``c(theta) = c0 + theta d``;
- ``Mlist[:nM]`` and ``R[:nM+1, :nM+1]``: the margin set (fixed order) and the inverse of the
  bordered matrix ``[[0, z_M'], [z_M, Q_M]]`` (position 0 is the bias), updated per event in
  O(|M|^2) by the block-inverse formulas;
- ``h = Q[:, I] d_I`` and ``sigma = z_I' d_I``, updated in O(n) when an index enters/leaves I;
- ``fsc = [theta, b, sigma, sum_M]`` and ``isc = [nM, events, zero_run, since_refresh, ill_conditioned]``.

An event costs one pass over |M| kernel rows (``Q[:, M] phi_M``, the O(n|M|) part) and one pass
over the variables. To keep that second pass to one, the gradient step ``G += dt psi`` of an event
is applied inside the next event's sweep, and ``a_I = c_I(theta)`` is written only where it is read
(an I index entering M, a refactorisation) and when :func:`run` returns; Python therefore always
sees a consistent state. The sweep is branch-free and vectorised (an integer minimum over the
IEEE bits of the non-negative ratios finds the step), which matters because the ratio tests are
data-dependent branches that mispredict about half the time. Variables are usually tiled over the
point slots (variable ``k * cap + slot``, see :mod:`ratiowatch.core.wsvm.base`); any other layout takes a
gathering path.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .solver import midpoint_or

O_SET, M_SET, I_SET = 0, 1, 2
DONE, PAUSE, CYCLE, SINGULAR, FULL, INFEASIBLE = 0, 1, 2, 3, 4, 5
# what ends a step of the path with a non-empty margin: the end of the path, or a variable changing set
EV_END, EV_M_TO_O, EV_M_TO_I, EV_O_TO_M, EV_I_TO_M = 0, 1, 2, 3, 4
# outcome of tracing the bias interval with an empty margin (besides SINGULAR and CYCLE)
_CROSSED, _NO_CROSSING = -1, -2
# fsc / isc slots
THETA, BIAS, SIGMA, SUMM = 0, 1, 2, 3
NM, EVENTS, ZRUN, SINCE, ILLCOND = 0, 1, 2, 3, 4


@njit(cache=True, inline="always")
def _q(K, pt, z, ridge, u, v):  # pragma: no cover - compiled
    val = z[u] * z[v] * K[pt[u], pt[v]]
    if u == v:
        val += ridge
    return val


@njit(cache=True)
def kmatvec(K, w):  # pragma: no cover - compiled
    """``K @ w`` for symmetric K, skipping zero entries of w; no BLAS threads (the machine is shared
    and w is usually sparse: only bounded or support points carry weight)."""
    n = K.shape[0]
    out = np.zeros(n)
    for u in range(n):
        wu = w[u]
        if wu != 0.0:
            row = K[u]
            for v in range(n):
                out[v] += wu * row[v]
    return out


@njit(cache=True)
def compute_h(K, pt, z, d, st, h, ridge):  # pragma: no cover - compiled
    """``h = Q[:, I] d_I`` (one mat-vec over points) and returns ``sigma = z_I' d_I``."""
    w = np.zeros(K.shape[0])
    sigma = 0.0
    nv = z.shape[0]
    for v in range(nv):
        if st[v] == I_SET and d[v] != 0.0:
            w[pt[v]] += z[v] * d[v]
            sigma += z[v] * d[v]
    kw = kmatvec(K, w)
    for v in range(nv):
        h[v] = z[v] * kw[pt[v]]
        if st[v] == I_SET:
            h[v] += ridge * d[v]
    return sigma


@njit(cache=True)
def begin(c_new, c, c0, d, act, st, a, G, K, pt, z, h, ridge, fsc, isc):  # pragma: no cover
    """Start a segment c -> c_new: direction, active set, zero-weight relabelling, h, sigma.

    Returns the sign-filter tolerance in weight units (for ``sigma`` and the margin slopes
    ``phi_M``), or -1.0 when ``c_new`` holds NaN/inf or a negative value. The gradient slopes
    ``psi`` are in margin units: :func:`run` scales it by the kernel for those.
    """
    nv = c.shape[0]
    dmax = 0.0
    for v in range(nv):
        cv = c_new[v]
        if not (cv >= 0.0 and cv < np.inf):
            return -1.0
    for v in range(nv):
        c0[v] = c[v]
        dv = c_new[v] - c[v]
        d[v] = dv
        if abs(dv) > dmax:
            dmax = abs(dv)
        act[v] = c[v] > 0.0 or dv != 0.0
        if c[v] == 0.0 and st[v] != M_SET:
            # alpha = C = 0: the label is not maintained while the weight is 0; read it off G
            a[v] = 0.0
            st[v] = O_SET if G[v] >= 0.0 else I_SET
    fsc[THETA] = 0.0
    fsc[SIGMA] = compute_h(K, pt, z, d, st, h, ridge)
    isc[ZRUN] = 0
    return 1e-11 * max(1.0, dmax)


@njit(cache=True)
def finish(c_new, c, c0, d, st, a, G, Mlist, R, isc, fsc):  # pragma: no cover - compiled
    """Snap the end of a segment: c = c_new exactly, alpha_I = c_I, theta reset, and margin
    variables whose weight ended at 0 moved to O."""
    for v in range(c.shape[0]):
        c[v] = c_new[v]
        c0[v] = c_new[v]
        d[v] = 0.0
        if st[v] == I_SET:
            a[v] = c_new[v]
    # A margin variable whose bound and alpha both reach 0 at theta = 1 ties with the end of the
    # segment, and the end wins: it would stay in M with alpha at rounding level, so that
    # remove_points refused it and the next segment kept a zero-weight variable in the margin.
    # At weight 0 it is at both bounds (any sign of G is optimal); alpha = 0 and O with G = 0.
    for k in range(isc[NM] - 1, -1, -1):
        m = Mlist[k]
        if c_new[m] == 0.0:
            a[m] = 0.0
            G[m] = 0.0
            st[m] = O_SET
            _remove(R, Mlist, isc, k)
    fsc[THETA] = 0.0


@njit(cache=True)
def place(K, pt, z, p, c, a, G, st, b, vars_):  # pragma: no cover - compiled
    """G and O/I label of zero-weight variables whose kernel row was just (re)written."""
    for v in vars_:
        if c[v] != 0.0 or a[v] != 0.0 or st[v] == M_SET:
            return False
    w = np.zeros(K.shape[0])
    for v in range(z.shape[0]):
        if a[v] != 0.0:
            w[pt[v]] += z[v] * a[v]
    for v in vars_:
        row = K[pt[v]]
        s = 0.0
        for u in range(K.shape[0]):
            if w[u] != 0.0:
                s += row[u] * w[u]
        G[v] = z[v] * s + p[v] + z[v] * b
        st[v] = O_SET if G[v] >= 0.0 else I_SET
    return True


@njit(cache=True)
def install(K, rows, slots, live, pt, z, p, c, a, G, st, b, zn, pn):  # pragma: no cover - compiled
    """Install new points (weight 0) in free slots: kernel rows and columns, dual terms, G, label.

    ``rows[i]`` holds the kernel values of new point ``i`` against every slot (``live`` already
    marks the new slots; entries of dead slots are written as 0). ``zn``/``pn`` give signs and
    linear terms per variable, copy-major (variable ``k * cap + slot``). Returns the largest new
    kernel diagonal, or -1.0 if a target variable is still in use (non-zero weight or in M).
    """
    cap = K.shape[0]
    n_new = slots.shape[0]
    copies = z.shape[0] // cap
    vars_ = np.empty(copies * n_new, dtype=np.int64)
    for k in range(copies):
        for i in range(n_new):
            vars_[k * n_new + i] = k * cap + slots[i]
    for v in vars_:
        if c[v] != 0.0 or st[v] == M_SET:
            return -1.0
    kmax = 0.0
    for i in range(n_new):
        s = slots[i]
        r = rows[i]
        for u in range(cap):
            val = r[u] if live[u] else 0.0
            K[s, u] = val
            K[u, s] = val
        kmax = max(kmax, abs(r[s]))
    for t in range(vars_.shape[0]):
        v = vars_[t]
        z[v] = zn[t]
        p[v] = pn[t]
        c[v] = 0.0
        a[v] = 0.0
    if not place(K, pt, z, p, c, a, G, st, b, vars_):
        return -1.0
    return kmax


@njit(cache=True)
def retire(slots, live, c, st, a, z, p, G):  # pragma: no cover - compiled
    """Forget points whose weight is 0 (variables ``k * cap + slot``); False if one still counts."""
    cap = live.shape[0]
    copies = z.shape[0] // cap
    for k in range(copies):
        for s in slots:
            v = k * cap + s
            if c[v] != 0.0 or st[v] == M_SET:
                return False
    for s in slots:
        live[s] = False
        for k in range(copies):
            v = k * cap + s
            a[v] = 0.0
            z[v] = 1.0
            p[v] = 0.0
            G[v] = 0.0
            st[v] = O_SET
    return True


@njit(cache=True)
def scatter_weights(c, slots, sw, scale, cap):  # pragma: no cover - compiled
    """``c[k * cap + slots[i]] = scale * sw[i]`` for every copy ``k``; every other weight 0."""
    c[:] = 0.0
    for k in range(c.shape[0] // cap):
        for i in range(slots.shape[0]):
            c[k * cap + slots[i]] = scale * sw[i]


@njit(cache=True)
def compute_g(K, pt, z, p, a, b, ridge, G):  # pragma: no cover - compiled
    """``G = Q a + p + z b`` from scratch."""
    w = np.zeros(K.shape[0])
    nv = z.shape[0]
    for v in range(nv):
        if a[v] != 0.0:
            w[pt[v]] += z[v] * a[v]
    kw = kmatvec(K, w)
    for v in range(nv):
        G[v] = z[v] * kw[pt[v]] + p[v] + ridge * a[v] + z[v] * b


@njit(cache=True)
def margin_residual(K, pt, z, p, a, c, b, ridge, Mlist, nM):  # pragma: no cover - compiled
    """What the incremental updates left of the region equations, recomputed from scratch.

    Returns ``(worst, eq, suma, pmax, cmax)``: the largest ``|G_m|`` over the margin
    (``G = Q a + p + z b``, 0 in exact arithmetic), ``|z'a|``, and the scales a tolerance for them
    is made of (``sum |a|``, ``max |p|``, ``max c``). One pass over the variables and one kernel
    row per margin index: about the cost of one event.
    """
    w = np.zeros(K.shape[0])
    eq = 0.0
    suma = 0.0
    pmax = 0.0
    cmax = 0.0
    for v in range(z.shape[0]):
        av = a[v]
        if av != 0.0:
            w[pt[v]] += z[v] * av
            eq += z[v] * av
            suma += abs(av)
        pmax = max(pmax, abs(p[v]))
        cmax = max(cmax, c[v])
    worst = 0.0
    for k in range(nM):
        m = Mlist[k]
        row = K[pt[m]]
        s = 0.0
        for u in range(K.shape[0]):
            s += row[u] * w[u]
        g = abs(z[m] * s + p[m] + ridge * a[m] + z[m] * b)
        if g > worst:
            worst = g
    return worst, abs(eq), suma, pmax, cmax


@njit(cache=True)
def rebuild(K, pt, z, p, c0, d, a, G, st, Mlist, R, h, fsc, isc, ridge):  # pragma: no cover
    """Refactor from scratch: R = inverse bordered matrix, exact region solution (a_M, b), G, h.

    Returns False when the bordered matrix is singular.
    """
    nM = isc[NM]
    theta = fsc[THETA]
    nv = z.shape[0]
    for v in range(nv):
        if st[v] == I_SET:
            a[v] = c0[v] + theta * d[v]
        elif st[v] == O_SET:
            a[v] = 0.0
    if nM > 0:
        A = np.zeros((nM + 1, nM + 1))
        for k in range(nM):
            A[0, k + 1] = z[Mlist[k]]
            A[k + 1, 0] = z[Mlist[k]]
            for l in range(nM):
                A[k + 1, l + 1] = _q(K, pt, z, ridge, Mlist[k], Mlist[l])
        # exact region solution: Mmat [b; a_M] = [-z_I' c_I; -(p_M + Q_MI c_I)]
        w = np.zeros(K.shape[0])
        r0 = 0.0
        for v in range(nv):
            if st[v] == I_SET and a[v] != 0.0:
                w[pt[v]] += z[v] * a[v]
                r0 -= z[v] * a[v]
        rhs = np.empty(nM + 1)
        rhs[0] = r0
        for k in range(nM):
            m = Mlist[k]
            s = 0.0
            row = K[pt[m]]
            for u in range(K.shape[0]):
                if w[u] != 0.0:
                    s += row[u] * w[u]
            rhs[k + 1] = -(p[m] + z[m] * s)
        # (a determinant test would underflow to 0 for large, merely ill-conditioned margins)
        Rn = np.linalg.inv(A)  # raises LinAlgError when exactly singular
        for r in range(nM + 1):
            for s_ in range(nM + 1):
                if not np.isfinite(Rn[r, s_]):
                    return False
        for r in range(nM + 1):
            for s_ in range(nM + 1):
                R[r, s_] = Rn[r, s_]
        sol = np.linalg.solve(A, rhs)  # backward stable, unlike Rn @ rhs, when Q_M is near-singular
        # With (near-)duplicate points in M the system is ill-conditioned and a state that meets
        # the KKT conditions to 1e-8 can sit far from its exact region solution along the
        # near-null direction; the latter may then leave the box. Keep the incremental values
        # in that case (G below is recomputed from them, so nothing is hidden).
        ok = True
        for k in range(nM):
            m = Mlist[k]
            cm = c0[m] + theta * d[m]
            slack = 1e-9 * max(1.0, cm)
            if sol[k + 1] < -slack or sol[k + 1] > cm + slack:
                ok = False
        if ok:
            fsc[BIAS] = sol[0]
            for k in range(nM):
                a[Mlist[k]] = sol[k + 1]
    compute_g(K, pt, z, p, a, fsc[BIAS], ridge, G)
    for k in range(nM):
        G[Mlist[k]] = 0.0
    fsc[SIGMA] = compute_h(K, pt, z, d, st, h, ridge)
    isc[SINCE] = 0
    isc[ILLCOND] = 0
    return True


@njit(cache=True)
def _insert_first(K, pt, z, ridge, Mlist, R, isc, j):  # pragma: no cover - compiled
    # inverse of [[0, z_j], [z_j, Q_jj]] is [[-Q_jj, z_j], [z_j, 0]] (z_j^2 = 1)
    R[0, 0] = -_q(K, pt, z, ridge, j, j)
    R[0, 1] = z[j]
    R[1, 0] = z[j]
    R[1, 1] = 0.0
    Mlist[0] = j
    isc[NM] = 1


@njit(cache=True)
def _insert(K, pt, z, ridge, Mlist, R, isc, j, work):  # pragma: no cover - compiled
    """Append j to M: R_new = [[R, 0], [0, 0]] + [beta; 1][beta; 1]' / gamma. False if singular."""
    nM = isc[NM]
    if nM == 0:
        _insert_first(K, pt, z, ridge, Mlist, R, isc, j)
        return True
    n1 = nM + 1
    vv = work[0]
    beta = work[1]
    vv[0] = z[j]
    rowj = K[pt[j]]  # Q[M, j] read along row j (one row instead of |M| scattered ones)
    zj = z[j]
    for k in range(nM):
        m = Mlist[k]
        vv[k + 1] = z[m] * zj * rowj[pt[m]]
    _neg_matvec(R, vv, n1, beta)
    qjj = _q(K, pt, z, ridge, j, j)
    gam = qjj
    for r in range(n1):
        gam += vv[r] * beta[r]
    if gam <= 1e-13 * max(1.0, abs(qjj)):
        return False
    if gam <= 1e-6 * max(1.0, abs(qjj)):
        isc[ILLCOND] = 1  # near-duplicate in M: the caller re-solves the region exactly at the end
    inv = 1.0 / gam
    for r in range(n1):
        br = beta[r] * inv
        for c in range(n1):
            R[r, c] += br * beta[c]
        R[r, n1] = br
        R[n1, r] = br
    R[n1, n1] = inv
    Mlist[nM] = j
    isc[NM] = nM + 1
    return True


@njit(cache=True)
def _remove(R, Mlist, isc, pos):  # pragma: no cover - compiled
    """Delete M position ``pos``: swap it last, then R_new = R_-- - R_-l R_l- / R_ll."""
    nM = isc[NM]
    last = nM
    q = pos + 1
    if q != last:
        for c in range(nM + 1):
            tmp = R[q, c]
            R[q, c] = R[last, c]
            R[last, c] = tmp
        for r in range(nM + 1):
            tmp = R[r, q]
            R[r, q] = R[r, last]
            R[r, last] = tmp
        tmp2 = Mlist[pos]
        Mlist[pos] = Mlist[nM - 1]
        Mlist[nM - 1] = tmp2
    if nM == 1:
        R[0, 0] = 0.0
        R[0, 1] = 0.0
        R[1, 0] = 0.0
        R[1, 1] = 0.0
    else:
        piv = R[last, last]
        for r in range(last):
            f = R[r, last] / piv
            for c in range(last):
                R[r, c] -= f * R[last, c]
        for c in range(last + 1):
            R[last, c] = 0.0
            R[c, last] = 0.0
    isc[NM] = nM - 1


@njit(cache=True, fastmath={"contract"})
def _h_add(K, pt, z, d, h, ridge, j, sign, tiled):  # pragma: no cover - compiled
    """h += sign * Q[:, j] d_j (j enters (+1) or leaves (-1) the set I)."""
    dj = d[j]
    if dj == 0.0:
        return 0.0
    row = K[pt[j]]
    f = sign * z[j] * dj
    nv = z.shape[0]
    npt = row.shape[0]
    if tiled:
        # tiled variables (v -> point v % npt): contiguous, vectorised
        for off in range(0, nv, npt):
            hb = h[off:off + npt]
            zb = z[off:off + npt]
            for u in range(npt):
                hb[u] += f * zb[u] * row[u]
    else:
        for v in range(nv):
            h[v] += f * z[v] * row[pt[v]]
    h[j] += sign * ridge * dj
    return sign * z[j] * dj


@njit(cache=True, fastmath={"contract", "reassoc"})
def _neg_matvec(R, x, n1, out):  # pragma: no cover - compiled
    """``out[:n1] = -R[:n1, :n1] @ x[:n1]`` (contiguous rows, vectorised dot products)."""
    for r in range(n1):
        row = R[r]
        s = 0.0
        for c in range(n1):
            s += row[c] * x[c]
        out[r] = -s


@njit(cache=True, fastmath={"contract", "reassoc"})
def _margin_combination(K, pt, z, Mlist, nM, phi, spt):  # pragma: no cover - compiled
    """``spt[u] = phi_0 + sum_k z_mk phi_k K[pt_mk, u]`` over point slots u (the O(n|M|) part)."""
    npt = spt.shape[0]
    phi0 = phi[0]
    for u in range(npt):
        spt[u] = phi0
    k = 0
    while k + 3 < nM:
        w1 = z[Mlist[k]] * phi[k + 1]
        w2 = z[Mlist[k + 1]] * phi[k + 2]
        w3 = z[Mlist[k + 2]] * phi[k + 3]
        w4 = z[Mlist[k + 3]] * phi[k + 4]
        r1 = K[pt[Mlist[k]]]
        r2 = K[pt[Mlist[k + 1]]]
        r3 = K[pt[Mlist[k + 2]]]
        r4 = K[pt[Mlist[k + 3]]]
        for u in range(npt):
            spt[u] += (w1 * r1[u] + w2 * r2[u]) + (w3 * r3[u] + w4 * r4[u])
        k += 4
    while k < nM:
        w1 = z[Mlist[k]] * phi[k + 1]
        r1 = K[pt[Mlist[k]]]
        for u in range(npt):
            spt[u] += w1 * r1[u]
        k += 1



_FM = {"nnan", "ninf", "nsz", "contract"}
_BLOCK = 128


@njit(cache=True, fastmath=_FM, error_model="numpy")
def _sweep(G, psi, h, z, spv, sg, rb, pend, tol, rest):  # pragma: no cover - compiled
    """One pass over the variables, block by block so the body vectorises and stays branch-free.

    Variable ``v`` reads ``spv[v % L]`` (``L = len(spv)``: the point slots when the variables are
    tiled over them, else a per-variable gather). Applies the deferred step ``G += pend psi``,
    writes ``psi = h + z spv``, and returns the smallest sign-filtered O/I ratio ``-G / psi``
    (clipped at 0; ``sg`` is -1 on active O, +1 on active I, 0 elsewhere) with its first index,
    or ``(rest, -1)`` when none is smaller than ``rest``.
    """
    nv = G.shape[0]
    L = spv.shape[0]
    best = rest
    idx = -1
    # the ratios are >= 0, so their IEEE bit patterns order like the numbers: an integer minimum
    # vectorises where a floating-point one does not
    ri = rb.view(np.int64)
    for off in range(0, nv, L):
        for bo in range(0, L, _BLOCK):
            n = min(_BLOCK, L - bo)
            s0 = off + bo
            Gb = G[s0:s0 + n]
            pb = psi[s0:s0 + n]
            hb = h[s0:s0 + n]
            zb = z[s0:s0 + n]
            sb = sg[s0:s0 + n]
            xb = spv[bo:bo + n]
            for t in range(n):
                g = Gb[t] + pend * pb[t]
                Gb[t] = g
                ps = hb[t] + zb[t] * xb[t]
                pb[t] = ps
                s = sb[t]
                q = s * ps
                ok = q > tol
                r = (-s * g) / (q if ok else 1.0)
                r = r if r > 0.0 else 0.0
                rb[t] = r if ok else 2.0
            m = ri[0]
            for t in range(n):
                x = ri[t]
                m = x if x < m else m
            bmin = rb[0]
            for t in range(n):
                if ri[t] == m:
                    bmin = rb[t]
                    if bmin < best:
                        best = bmin
                        idx = s0 + t
                    break
    return best, idx


@njit(cache=True)
def _is_tiled(pt, npt):  # pragma: no cover - compiled
    """True when variable ``v`` sits on point slot ``v % npt`` (how the models lay them out)."""
    nv = pt.shape[0]
    if npt == 0 or nv % npt != 0:
        return False
    u = 0
    for v in range(nv):
        if pt[v] != u:
            return False
        u += 1
        if u == npt:
            u = 0
    return True


@njit(cache=True)
def _sync(G, psi, st, a, c0, d, theta, pend):  # pragma: no cover - compiled
    """Apply a deferred gradient step ``G += pend * psi`` and set ``a_I = c_I(theta)``."""
    for v in range(G.shape[0]):
        if pend != 0.0:
            G[v] += pend * psi[v]
        if st[v] == I_SET:
            a[v] = c0[v] + theta * d[v]


@njit(cache=True, inline="always")
def _caps_bias_above(s, zv):  # pragma: no cover - compiled
    """The O/I side test: a variable in O with z < 0 or in I with z > 0 bounds the bias from above
    (its KKT condition ``z G >= 0`` or ``<= 0`` becomes ``b <= b - z G``); the others from below."""
    return (s == O_SET and zv < 0.0) or (s == I_SET and zv > 0.0)


@njit(cache=True, inline="always")
def _caps_bias_below(s, zv):  # pragma: no cover - compiled
    """The mirror of :func:`_caps_bias_above`: O with z > 0 or I with z < 0."""
    return (s == O_SET and zv > 0.0) or (s == I_SET and zv < 0.0)


@njit(cache=True, inline="always")
def _enter_extreme_point(K, pt, z, d, G, st, act, sg, Mlist, R, h, fsc, isc, ridge, tiled):  # pragma: no cover
    """Empty margin, sigma != 0 (equation 24): no step is possible; the extreme point on the side
    that sigma's sign selects enters M and fixes the bias. False when there is none (infeasible)."""
    nv = z.shape[0]
    b = fsc[BIAS]
    sigma = fsc[SIGMA]
    j = -1
    best = 0.0
    for v in range(nv):
        if not act[v]:
            continue
        w = b - z[v] * G[v]
        if sigma > 0.0:
            if _caps_bias_above(st[v], z[v]):
                if j < 0 or w < best:
                    best = w
                    j = v
        else:
            if _caps_bias_below(st[v], z[v]):
                if j < 0 or w > best:
                    best = w
                    j = v
    if j < 0:
        return False
    for v in range(nv):
        G[v] += z[v] * (best - b)
    G[j] = 0.0
    fsc[BIAS] = best
    if st[j] == I_SET:
        fsc[SIGMA] += _h_add(K, pt, z, d, h, ridge, j, -1.0, tiled)
    st[j] = M_SET
    sg[j] = 0.0
    _insert_first(K, pt, z, ridge, Mlist, R, isc, j)
    return True


@njit(cache=True, inline="always")
def _cross_bias_interval(K, pt, z, c0, d, a, G, st, act, sg, Mlist, R, h, fsc, isc, ridge, tiled,
                         work, zstep, zmax):  # pragma: no cover - compiled
    """Empty margin, sigma = 0: the bias may lie anywhere in ``[l(t), u(t)]``; trace the interval
    until it closes. At the first crossing both extreme points enter M (two events, ``_CROSSED``);
    ``_NO_CROSSING`` when it stays open up to theta = 1; SINGULAR or CYCLE as :func:`run`."""
    nv = z.shape[0]
    theta = fsc[THETA]
    b = fsc[BIAS]
    t = 1.0 - theta
    cross = False
    iu = -1
    il = -1
    for _ in range(nv + 5):
        iu = -1
        il = -1
        wu = 0.0
        wl = 0.0
        for v in range(nv):
            if not act[v] or st[v] == M_SET:
                continue
            w = b - z[v] * G[v] - t * z[v] * h[v]
            if _caps_bias_above(st[v], z[v]):
                if iu < 0 or w < wu:
                    wu = w
                    iu = v
            else:
                if il < 0 or w > wl:
                    wl = w
                    il = v
        if iu < 0 or il < 0 or wu - wl >= 0.0:
            break
        A0 = (b - z[iu] * G[iu]) - (b - z[il] * G[il])
        Bs = z[iu] * h[iu] - z[il] * h[il]
        tn = A0 / Bs if Bs > 0.0 else 0.0
        if tn < 0.0:
            tn = 0.0
        if tn >= t:
            break
        t = tn
        cross = True
    if not (cross and iu >= 0 and il >= 0):
        return _NO_CROSSING
    theta = theta + t
    fsc[THETA] = theta
    for v in range(nv):
        G[v] += t * h[v]
        if st[v] == I_SET:
            a[v] = c0[v] + theta * d[v]
    bn = b - z[iu] * G[iu]
    for v in range(nv):
        G[v] += z[v] * (bn - b)
    fsc[BIAS] = bn
    G[iu] = 0.0
    G[il] = 0.0
    for j in (iu, il):
        if not _insert(K, pt, z, ridge, Mlist, R, isc, j, work):
            return SINGULAR
        if st[j] == I_SET:
            fsc[SIGMA] += _h_add(K, pt, z, d, h, ridge, j, -1.0, tiled)
        st[j] = M_SET
        sg[j] = 0.0
    isc[EVENTS] += 2
    isc[SINCE] += 2
    if t <= zstep:
        isc[ZRUN] += 1
        if isc[ZRUN] > zmax:
            return CYCLE
    else:
        isc[ZRUN] = 0
    return _CROSSED


@njit(cache=True, inline="always")
def _step_to_end_open_interval(z, c0, d, a, G, st, act, h, fsc):  # pragma: no cover - compiled
    """Empty margin, interval open up to theta = 1: step to the end and put the bias in the middle
    of the final interval (or on its one finite side)."""
    nv = z.shape[0]
    b = fsc[BIAS]
    rest = 1.0 - fsc[THETA]
    lo = -np.inf
    hi = np.inf
    for v in range(nv):
        G[v] += rest * h[v]
        if st[v] == I_SET:
            a[v] = c0[v] + d[v]
        if not act[v]:
            continue
        w = b - z[v] * G[v]
        if _caps_bias_above(st[v], z[v]):
            hi = min(hi, w)
        elif _caps_bias_below(st[v], z[v]):
            lo = max(lo, w)
    bn = midpoint_or(lo, hi, b)
    for v in range(nv):
        G[v] += z[v] * (bn - b)
    fsc[BIAS] = bn
    fsc[THETA] = 1.0


@njit(cache=True, inline="always")
def _next_margin_event(K, pt, z, c0, d, a, G, st, Mlist, R, h, psi, phi, fsc, isc, tiled, spt, spv,
                       sg, rb, rhs, pend, tol, ktol, theta, rest):  # pragma: no cover - compiled
    """Non-empty margin: the direction ``phi = -R [sigma; h_M]``, ``psi = dG / dtheta``, and the
    first event along it. Returns ``(kind, idx, dt, phi0)``: an ``EV_*`` kind, the variable (for
    O/I) or margin position (for M) it concerns, the step length and the bias slope. ``tol``
    filters the slopes of alpha_M (weight units), ``ktol`` those of G (margin units)."""
    nv = z.shape[0]
    nM = isc[NM]
    n1 = nM + 1
    rhs[0] = fsc[SIGMA]
    for k in range(nM):
        rhs[k + 1] = h[Mlist[k]]
    _neg_matvec(R, rhs, n1, phi)
    phi0 = phi[0]
    # Q[:, M] phi_M per point slot first (contiguous kernel rows, vectorised), then per variable
    _margin_combination(K, pt, z, Mlist, nM, phi, spt)
    # one sweep: deferred step of the last event, new psi, O/I ratio tests
    if not tiled:
        for v in range(nv):
            spv[v] = spt[pt[v]]
    best, idx = _sweep(G, psi, h, z, spv, sg, rb, pend, ktol, rest)
    kind = EV_END
    if idx >= 0:
        kind = EV_O_TO_M if sg[idx] < 0.0 else EV_I_TO_M
    # M ratio tests: alpha reaches 0, or its (moving) bound
    for k in range(nM):
        m = Mlist[k]
        psi[m] = 0.0  # G_M stays exactly 0 through the deferred step
        ph = phi[k + 1]
        if ph < -tol:
            tt = -a[m] / ph
            if tt < 0.0:
                tt = 0.0
            if tt < best:
                best = tt
                kind = EV_M_TO_O
                idx = k
        slope = ph - d[m]
        if slope > tol:
            tt = (c0[m] + theta * d[m] - a[m]) / slope
            if tt < 0.0:
                tt = 0.0
            if tt < best:
                best = tt
                kind = EV_M_TO_I
                idx = k
    return kind, idx, best, phi0


@njit(cache=True, inline="always")
def _apply_margin_event(K, pt, z, c0, d, a, G, st, act, sg, Mlist, R, h, psi, fsc, isc, ridge, tiled,
                        work, kind, idx, theta):  # pragma: no cover - compiled
    """Move the variable of event ``kind`` between the sets and update R, h and sigma.
    False when the bordered matrix turns singular on an insertion."""
    if kind == EV_M_TO_O:
        m = Mlist[idx]
        a[m] = 0.0
        st[m] = O_SET
        sg[m] = -1.0 if act[m] else 0.0
        _remove(R, Mlist, isc, idx)
    elif kind == EV_M_TO_I:
        m = Mlist[idx]
        a[m] = c0[m] + theta * d[m]
        st[m] = I_SET
        sg[m] = 1.0 if act[m] else 0.0
        _remove(R, Mlist, isc, idx)
        fsc[SIGMA] += _h_add(K, pt, z, d, h, ridge, m, 1.0, tiled)
    else:
        j = idx
        if not _insert(K, pt, z, ridge, Mlist, R, isc, j, work):
            return False
        if kind == EV_I_TO_M:
            a[j] = c0[j] + theta * d[j]
            fsc[SIGMA] += _h_add(K, pt, z, d, h, ridge, j, -1.0, tiled)
        G[j] = 0.0
        psi[j] = 0.0
        st[j] = M_SET
        sg[j] = 0.0
    return True


@njit(cache=True)
def run(K, pt, z, p, c0, d, a, G, st, act, Mlist, R, h, psi, phi, fsc, isc,
        ridge, tol, kscale, max_events, refresh_every, zmax):  # pragma: no cover - compiled
    """Follow the path from ``fsc[THETA]`` towards theta = 1.

    ``tol`` is the sign-filter tolerance of :func:`begin` (weight units: sigma and the margin
    slopes phi_M); the gradient slopes psi are in margin units, about ``kscale`` times larger, and
    are filtered at ``tol * max(1, kscale)``. (One tolerance in margin units for both let a
    linear kernel on features of scale 1e6 ignore every margin event: alpha left its box.)

    Returns a status: DONE (theta = 1), PAUSE (``max_events`` events taken), CYCLE (more than
    ``zmax`` zero-length events in a row), SINGULAR (bordered matrix singular on insertion),
    FULL (``Mlist`` capacity reached), INFEASIBLE (empty margin and no point can carry the bias).

    Four regimes, one helper each: an empty margin with sigma != 0 (:func:`_enter_extreme_point`),
    an empty margin with sigma = 0 (:func:`_cross_bias_interval`, else
    :func:`_step_to_end_open_interval`), and a non-empty margin (:func:`_next_margin_event`, then
    :func:`_apply_margin_event`).
    """
    nv = z.shape[0]
    capM = Mlist.shape[0]
    taken = 0
    work = np.empty((2, capM + 1))
    npt = K.shape[0]
    spt = np.empty(npt)
    tiled = _is_tiled(pt, npt)
    spv = spt if tiled else np.empty(nv)
    rb = np.empty(_BLOCK)
    rhs = np.empty(capM + 1)
    sg = np.empty(nv)
    for v in range(nv):
        sg[v] = 0.0 if not act[v] else (-1.0 if st[v] == O_SET else (1.0 if st[v] == I_SET else 0.0))
    zstep = 1e-14
    ktol = tol * max(1.0, kscale)
    # Two O(n) sweeps are deferred: the gradient step G += dt psi of an event is applied in the
    # next event's psi sweep (pend = dt), and a_I = c_I(theta) is only written when read
    # (I -> M, rebuild) and on return. Both are flushed by _sync before anything else reads G.
    pend = 0.0
    while True:
        theta = fsc[THETA]
        rest = 1.0 - theta
        if rest <= 0.0 or taken >= max_events or isc[NM] + 3 >= capM:
            _sync(G, psi, st, a, c0, d, theta, pend)
            if rest <= 0.0:
                return DONE
            if taken >= max_events:
                return PAUSE
            return FULL
        if isc[SINCE] >= refresh_every:
            _sync(G, psi, st, a, c0, d, theta, pend)
            pend = 0.0
            if not rebuild(K, pt, z, p, c0, d, a, G, st, Mlist, R, h, fsc, isc, ridge):
                return SINGULAR
        if isc[NM] == 0:
            _sync(G, psi, st, a, c0, d, theta, pend)
            pend = 0.0
            if abs(fsc[SIGMA]) > tol:
                if not _enter_extreme_point(K, pt, z, d, G, st, act, sg, Mlist, R, h, fsc, isc, ridge, tiled):
                    if rest * abs(fsc[SIGMA]) <= tol:
                        # The margin emptied a rounding step short of the end (an event at
                        # theta = 1 - 1e-16 where every weight goes to 0): sigma is then a ratio
                        # of rounding residues and the equality drifts by less than the tolerance
                        # over what is left, so the segment ends here as with an open interval.
                        _step_to_end_open_interval(z, c0, d, a, G, st, act, h, fsc)
                        return DONE
                    return INFEASIBLE
                isc[EVENTS] += 1
                isc[ZRUN] += 1
                isc[SINCE] += 1
                taken += 1
                if isc[ZRUN] > zmax:
                    return CYCLE
                continue
            crossed = _cross_bias_interval(K, pt, z, c0, d, a, G, st, act, sg, Mlist, R, h, fsc, isc, ridge,
                                           tiled, work, zstep, zmax)
            if crossed == _CROSSED:
                taken += 2
                continue
            if crossed != _NO_CROSSING:
                return crossed
            _step_to_end_open_interval(z, c0, d, a, G, st, act, h, fsc)
            return DONE

        nM = isc[NM]
        b = fsc[BIAS]
        kind, idx, dt, phi0 = _next_margin_event(K, pt, z, c0, d, a, G, st, Mlist, R, h, psi, phi, fsc, isc,
                                                 tiled, spt, spv, sg, rb, rhs, pend, tol, ktol, theta, rest)
        pend = 0.0
        # step (G is moved by the next sweep or _sync)
        fsc[BIAS] = b + dt * phi0
        for k in range(nM):
            a[Mlist[k]] += dt * phi[k + 1]
        if kind == EV_END:
            theta = 1.0
        else:
            theta = theta + dt
        fsc[THETA] = theta
        pend = dt
        if kind == EV_END:
            _sync(G, psi, st, a, c0, d, theta, pend)
            return DONE  # a truncated step is not an event
        fsc[SUMM] += nM
        isc[EVENTS] += 1
        isc[SINCE] += 1
        taken += 1
        if dt <= zstep:
            isc[ZRUN] += 1
        else:
            isc[ZRUN] = 0
        if not _apply_margin_event(K, pt, z, c0, d, a, G, st, act, sg, Mlist, R, h, psi, fsc, isc, ridge, tiled,
                                   work, kind, idx, theta):
            _sync(G, psi, st, a, c0, d, theta, pend)
            return SINGULAR
        if isc[ZRUN] > zmax:
            _sync(G, psi, st, a, c0, d, theta, pend)
            return CYCLE

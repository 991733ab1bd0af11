"""Reference implementations used only by tests: plain numpy / scipy, written for clarity, slow.

Each production kernel is checked against one of these (or against an independent package).
"""

from __future__ import annotations

import math

import numpy as np
import scipy.linalg


def direction_pe(g_num_num, g_den_num, alpha, lam):
    """Clipped RuLSIF PE-hat_alpha with centres = numerator samples (as core.window)."""
    n_num, n_den = g_num_num.shape[0], g_den_num.shape[0]
    h_mat = alpha / n_num * (g_num_num.T @ g_num_num) + (1 - alpha) / n_den * (g_den_num.T @ g_den_num)
    h_mat[np.diag_indices_from(h_mat)] += lam
    h = g_num_num.mean(axis=0)
    theta = scipy.linalg.cho_solve(scipy.linalg.cho_factor(h_mat, lower=True, check_finite=False), h,
                                   check_finite=False)
    np.maximum(theta, 0.0, out=theta)
    r_num, r_den = g_num_num @ theta, g_den_num @ theta
    return -alpha / 2 * np.mean(r_num**2) - (1 - alpha) / 2 * np.mean(r_den**2) + np.mean(r_num) - 0.5


def rulsif_window_score(gram: np.ndarray, a: np.ndarray, b: np.ndarray, alpha: float, lam: float,
                        symmetric: bool) -> float:
    """PE(a || b) (+ PE(b || a) when symmetric) from the Gram matrix of the pooled samples."""
    s = direction_pe(gram[np.ix_(a, a)], gram[np.ix_(b, a)], alpha, lam)
    if symmetric:
        s += direction_pe(gram[np.ix_(b, b)], gram[np.ix_(a, b)], alpha, lam)
    return float(s)



def kliep_direction(x_nu, x_de, sigma, eps_schedule=10.0 ** np.arange(3, -4, -1), max_iter=100, floor=1e-300):
    """KLIEP ``mean log r`` over ``x_nu`` with centres = ``x_nu`` (as core.kliep_window), by the
    projected gradient ascent of Sugiyama et al. (accept-if-improving steps on a fixed schedule), in
    plain numpy. Kernel values at exponents <= -230 are 0 (the package's flush convention). Returns
    +inf when every denominator kernel mean is 0 (no kernel mass between the samples: KL unbounded).
    """
    x_nu, x_de = np.asarray(x_nu, dtype=np.float64), np.asarray(x_de, dtype=np.float64)

    def kern(x, c):
        e = -((x[:, None, :] - c[None, :, :]) ** 2).sum(-1) / (2 * sigma * sigma)
        return np.where(e > -230.0, np.exp(e), 0.0)

    a_mat, b = kern(x_nu, x_nu), kern(x_de, x_nu).mean(axis=0)
    if not b @ b > 0:
        return math.inf
    c = b / (b @ b)

    def project(al):
        al = np.maximum(al + (1.0 - b @ al) * c, 0.0)
        s = b @ al
        return al / s if s > 0 and np.isfinite(s) else None

    def objective(al):
        return float(np.mean(np.log(np.maximum(a_mat @ al, floor))))

    alpha = project(np.ones(len(x_nu)))
    score = objective(alpha)
    for eps in eps_schedule:
        for _ in range(max_iter):
            cand = project(alpha + eps * a_mat.T @ (1.0 / np.maximum(a_mat @ alpha, floor)))
            if cand is None:
                break
            new = objective(cand)
            if not new > score:
                break
            alpha, score = cand, new
    return score


def split_profile(x, splits, width, stride, n_centres=32, sigma_factor=0.5, alpha=0.1, lam=1e-3, max_dims=16,
                  order=None):
    """Scaled symmetric RuLSIF PE at each split, every split fitted from scratch (core.split_profile).

    Subsequences ``x[j stride : j stride + width]`` reduced to ``min(width, max_dims)`` piecewise
    means per channel (raw view, and z-normalised view when width >= 3); Gaussian features on
    ``n_centres`` evenly spaced rows per view, sigma = sigma_factor x median pairwise distance of up
    to 200 evenly spaced rows. Left rows end at or before the split, right rows start at or after it.
    ``order``: the rows (features made from all of them, in their own order) rearranged before
    the profile is taken (the cycle permutation null).
    """
    from scipy.spatial.distance import cdist, pdist

    x = np.asarray(x, dtype=np.float64)
    x = x[:, None] if x.ndim == 1 else x
    t_len, m = x.shape
    dims = min(width, max_dims)
    starts = np.arange(0, t_len - width + 1, stride)
    subs = np.stack([x[s:s + width] for s in starts])  # (n, width, m)

    def paa(v):  # (n, width, m) -> (n, m * dims), channel-major
        cols = []
        for c in range(m):
            for q in range(dims):
                a, b = (q * width) // dims, ((q + 1) * width) // dims
                cols.append(v[:, a:b, c].mean(axis=1))
        return np.stack(cols, axis=1)

    views = [paa(subs)]
    if width >= 3:
        mu = subs.mean(axis=1, keepdims=True)
        sd = subs.std(axis=1, keepdims=True)
        z = np.where(sd > 1e-12, (subs - mu) / np.where(sd > 1e-12, sd, 1.0), 0.0)
        views.append(paa(z))
    n = subs.shape[0]
    cidx = np.unique(np.linspace(0, n - 1, min(n, n_centres)).round().astype(int))
    sidx = np.unique(np.linspace(0, n - 1, min(n, 200)).round().astype(int))
    feats = []
    for f in views:
        d = pdist(f[sidx])
        d = d[d > 0]
        sigma = sigma_factor * (np.median(d) if d.size else 1.0)
        feats.append(np.exp(-cdist(f, f[cidx], "sqeuclidean") / (2 * sigma**2)))
    phi = np.hstack(feats)
    return split_profile_of_rows(phi if order is None else phi[np.asarray(order)], splits, width, stride, alpha, lam)


def split_profile_of_rows(phi, splits, width, stride, alpha=0.1, lam=1e-3):
    """The scaled symmetric PE of :func:`split_profile` from the rows' features ``phi`` in the
    order given: the row at position j is taken to start at sample j stride. With ``alpha = 0``
    (uLSIF) twice the one direction whose denominator is the larger side."""
    starts = np.arange(phi.shape[0]) * stride

    def pe(p, q):
        h_mat = alpha * p.T @ p / len(p) + (1 - alpha) * q.T @ q / len(q)
        theta = np.linalg.solve(h_mat + lam * np.eye(h_mat.shape[0]), p.mean(axis=0))
        rp, rq = p @ theta, q @ theta
        return -alpha / 2 * np.mean(rp**2) - (1 - alpha) / 2 * np.mean(rq**2) + np.mean(rp) - 0.5

    out = []
    for s in splits:
        left = phi[starts + width <= s]
        right = phi[starts >= s]
        nl, nr = len(left), len(right)
        if alpha > 0:
            both = pe(left, right) + pe(right, left)
        else:  # uLSIF: twice the direction whose denominator is the larger side
            both = 2 * (pe(left, right) if nl <= nr else pe(right, left))
        out.append(both * nl * nr / (nl + nr))
    return np.array(out)


def rank_stats(past: np.ndarray, cur: np.ndarray) -> np.ndarray:
    """Location and spread rank statistics of each channel (2 m values), by counting.

    A value's average rank among the pooled ``2n`` is ``1 + #smaller + #equal others / 2``; the
    location statistic is ``(mean rank past - mean rank current) / 2n``, the spread statistic the
    same for the absolute deviations from the pooled median (the mean of its two middle values).
    """
    n, m = past.shape
    out = np.empty(2 * m)

    def diff(v):
        ranks = [1 + sum(w < x for w in v) + 0.5 * (sum(w == x for w in v) - 1) for x in v]
        return (sum(ranks[:n]) - sum(ranks[n:])) / n / (2 * n)

    for c in range(m):
        v = list(past[:, c]) + list(cur[:, c])
        s = sorted(v)
        med = 0.5 * (s[n - 1] + s[n])
        out[c] = diff(v)
        out[m + c] = diff([abs(x - med) for x in v])
    return out



def _effect_t(y, phi, mean, s):
    """t statistic of the regressor ``s`` (a list over the rows of the 1-d ``y``) in the AR(``phi``)
    one-step errors, both filtered explicitly (Chen and Liu 1993); sigma 1.4826 MAD of the errors,
    at least a quarter of their standard deviation."""
    p, t_len = len(phi), len(y)
    e = [(y[t] - mean) - sum(phi[i] * (y[t - 1 - i] - mean) for i in range(p)) for t in range(p, t_len)]
    ebar = sum(e) / len(e)
    e = [v - ebar for v in e]
    u = [s[t] - sum(phi[i] * s[t - 1 - i] for i in range(p)) for t in range(p, t_len)]
    med = float(np.median(e))
    sd = math.sqrt(sum(v * v for v in e) / len(e))
    sigma = max(1.4826 * float(np.median([abs(v - med) for v in e])), 0.25 * sd)
    uu = sum(v * v for v in u)
    return abs(sum(a * b for a, b in zip(e, u))) / (math.sqrt(uu) * sigma)


def level_shift_t(y, phi, mean, k):
    """t statistic of a level shift starting at row ``k`` (regressor 1[t >= k])."""
    return _effect_t(y, phi, mean, [1.0 if t >= k else 0.0 for t in range(len(y))])


def additive_outlier_t(y, phi, mean, k):
    """t statistic of an additive outlier at row ``k`` (regressor 1[t == k])."""
    return _effect_t(y, phi, mean, [1.0 if t == k else 0.0 for t in range(len(y))])


def dynamic_regression_t(x, design, order):
    """|t| of each column of ``design`` in the regression of ``x[t]`` on ``design[t]`` and
    ``x[t-1] .. x[t-order]`` (rows t >= order), by explicit normal equations; sigma 1.4826 MAD of
    the errors, at least a quarter of their standard deviation."""
    rows = [list(design[t]) + [x[t - 1 - i] for i in range(order)] for t in range(order, len(x))]
    z = np.array(rows, dtype=np.float64)
    target = np.array([x[t] for t in range(order, len(x))])
    gram = z.T @ z
    coef = np.linalg.solve(gram, z.T @ target)
    e = [float(a - b) for a, b in zip(target, z @ coef)]
    med = float(np.median(e))
    mean = sum(e) / len(e)
    sd = math.sqrt(sum((v - mean) ** 2 for v in e) / len(e))
    sigma = max(1.4826 * float(np.median([abs(v - med) for v in e])), 0.25 * sd)
    inv = np.linalg.inv(gram)
    return [abs(coef[j]) / (sigma * math.sqrt(inv[j, j])) for j in range(design.shape[1])]


def white_noise_shift_stat(y, k):
    """The standardised mean difference of ``y`` before and after row ``k``, sigma 1."""
    n = len(y)
    return abs(sum(y[k:]) / (n - k) - sum(y[:k]) / k) * math.sqrt(k * (n - k) / n)


def tail_score(history, a, min_std=0.01, min_spread=0.0, min_raw=-math.inf, decades=10.0):
    """TailProbability's map written out from its definition: -log10 of the Gaussian upper tail of
    ``a`` against a plain history's mean and spread (with both floors), over ``decades``."""
    mean, sd = float(np.mean(history)), float(np.std(history))
    sd = max(sd, min_std * (abs(mean) + 1e-12), min_spread)
    z = (a - mean) / sd
    if z <= 0 or a <= min_raw:
        return 0.0
    tail = max(0.5 * math.erfc(z / math.sqrt(2.0)), 1e-300)
    return min(1.0, -math.log10(tail) / decades)


def repeat_run_score(x, t, history=2000, min_history=100, decades=10.0):
    """RepeatRunTail's score of row ``t`` of ``x`` written out from its definition: 0 unless
    ``x[t]`` repeats ``x[t - 1]``; else the run of L repeats ending at ``t`` has the tail
    a b^(L - 1), with a = P(repeat | none before) and b = P(repeat | repeat before) counted with
    Laplace's rule over the last ``history`` repeat flags before the run began."""
    x = np.asarray(x, dtype=np.float64)
    if t < 1 or x[t] != x[t - 1]:
        return 0.0
    start = t
    while start > 1 and x[start - 1] == x[start - 2]:
        start -= 1
    run = t - start + 1
    flags = [int(x[i] == x[i - 1]) for i in range(1, start)]  # rows 1 .. start - 1
    held = flags[max(0, len(flags) - history):]
    if len(held) < min_history:
        return 0.0
    pairs = list(zip(held[:-1], held[1:]))
    n1 = sum(p for p, _ in pairs)
    n0 = len(pairs) - n1
    n01 = sum(q for p, q in pairs if p == 0)
    n11 = sum(q for p, q in pairs if p == 1)
    log_tail = math.log10((n01 + 1) / (n0 + 2)) + (run - 1) * math.log10((n11 + 1) / (n1 + 2))
    return min(1.0, -log_tail / decades)



def block_embed(history, values, k, w):
    """Block-mean embedding, one block at a time: row t holds the means of the k blocks of w
    values ending at ``values[t]``."""
    full = np.concatenate([history, values])
    h = history.shape[0]
    return np.array([[full[h + t - (k - 1 - j) * w - w + 1: h + t - (k - 1 - j) * w + 1].mean() for j in range(k)]
                     for t in range(values.shape[0])])


def significant_period(x, level=0.05, clip_sd=3.0, band="peak"):
    """The width rule's period, written out: detrend by least squares, winsorise at ``clip_sd``
    x 1.4826 x MAD around the median, biased autocorrelation by direct sums, the highest local
    peak after the first lag at or below zero, accepted above Bartlett's band of a moving average
    of order (the peak's lag - 1, or with ``band="zero_crossing"`` the first zero crossing's - 1)
    times the normal quantile at ``level / max_lag``."""
    from scipy.stats import norm

    x = np.asarray(x, dtype=np.float64)
    t_len = x.size
    max_lag = t_len // 3
    if max_lag < 4:
        return 0
    t = np.arange(t_len, dtype=np.float64)
    design = np.c_[np.ones(t_len), t]
    y = x - design @ np.linalg.lstsq(design, x, rcond=None)[0]
    med = float(np.median(y))
    spread = 1.4826 * float(np.median(np.abs(y - med)))
    if spread > 0:
        y = np.minimum(np.maximum(y, med - clip_sd * spread), med + clip_sd * spread)
    yc = y - y.mean()
    c0 = float(yc @ yc)
    if c0 <= 1e-12 * max(1.0, float(np.abs(y).max()) ** 2) * t_len:
        return 0
    r = [float(yc[: t_len - k] @ yc[k:]) / c0 for k in range(max_lag + 1)]
    z = next((k for k in range(max_lag + 1) if r[k] <= 0.0), None)
    if z is None:
        return 0
    p = max(range(z, max_lag + 1), key=lambda k: (r[k], -k))
    if p >= max_lag or r[p] < r[p - 1] or r[p] < r[p + 1]:
        return 0
    q = z if band == "zero_crossing" else p
    se = math.sqrt((1.0 + 2.0 * sum(r[j] ** 2 for j in range(1, q))) / t_len)
    return p if r[p] > norm.isf(level / max_lag) * se else 0


def adf_t_stat(x: np.ndarray) -> float:
    """Augmented Dickey-Fuller t statistic (constant, trend, ``floor(4 (T / 100)^(1/4))`` lagged
    differences) by the Frisch-Waugh-Lovell theorem: ``x_(t-1)`` and ``dx_t`` are each made
    orthogonal to the other regressors, and the coefficient and its standard error come from the
    one-regressor fit of the residuals (degrees of freedom of the full regression)."""
    x = np.asarray(x, dtype=float)
    p = int(4 * (x.size / 100.0) ** 0.25)
    dx = np.diff(x)
    y = dx[p:]
    rows = y.size
    others = np.column_stack([np.ones(rows), np.arange(rows)] + [dx[p - i:dx.size - i] for i in range(1, p + 1)])
    proj = others @ np.linalg.pinv(others)
    lag = x[p:x.size - 1]
    ry, rl = y - proj @ y, lag - proj @ lag
    beta = (rl @ ry) / (rl @ rl)
    resid = ry - beta * rl
    s2 = (resid @ resid) / (rows - others.shape[1] - 1)
    return float(beta / math.sqrt(s2 / (rl @ rl)))

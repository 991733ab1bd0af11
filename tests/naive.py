"""Reference implementations used only by tests: plain numpy / scipy, written for clarity, slow.

Each production kernel is checked against one of these (or against an independent package).
"""

from __future__ import annotations

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


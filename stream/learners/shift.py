"""Covariate-shift adaptation of a weighted SVM by importance weights and path following.

After the input distribution moves (for example after a detected change point), the training
points are re-weighted by the importance ``w(x) = p_new(x) / p_train(x)`` estimated directly by
uLSIF (``ratiowatch.core.rulsif.fit_ulsif(x_new, x_train).ratio(x_train)``, numerator = new inputs), and the
SVM follows the exact solution path from its current weights to ``base * w`` instead of being
refitted (Karasuyama et al. 2012, Sec. 4.3). ``flatten`` in [0, 1] picks a point on that segment,
``base * ((1 - flatten) + flatten * w)``: the linear flattening whose intermediate solutions the
path passes through anyway.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ratiowatch.core.rulsif import RatioFit, fit_ulsif
from ratiowatch.core.validation import as_samples
from ratiowatch.core.wsvm import PathStats
from ratiowatch.core.wsvm.base import WeightedSVMBase


@dataclass
class AdaptResult:
    """Outcome of :func:`adapt`.

    Attributes
    ----------
    stats : PathStats
        Events of the path update.
    importance : ndarray
        Estimated importance of each training point (clipped at 0), in ``model.ids_`` order.
    sample_weight : ndarray
        The new per-point weights (multiples of ``model.C``).
    ratio_fit : RatioFit
        The uLSIF fit (sigma and lambda chosen by its leave-one-out score unless given).
    """

    stats: PathStats
    importance: np.ndarray
    sample_weight: np.ndarray
    ratio_fit: RatioFit


def importance_weights(x_new, x_train, **ratio_kwargs) -> tuple[np.ndarray, RatioFit]:
    """uLSIF importance ``p_new / p_train`` at the training inputs, clipped at 0 (Karasuyama et al. 2012: negative weights would make the SVM non-convex)."""
    fit = fit_ulsif(x_new, x_train, **ratio_kwargs)
    return np.maximum(fit.ratio(x_train), 0.0), fit


def adapt(model: WeightedSVMBase, x_new, *, flatten: float = 1.0, **ratio_kwargs) -> AdaptResult:
    """Re-weight a fitted weighted SVM towards new inputs ``x_new`` by one path update.

    Parameters
    ----------
    model : WeightedSVC or WeightedSVR
        Fitted model; its live points are the training window.
    x_new : array-like (m, d)
        Inputs from the new regime (labels are not needed).
    flatten : float in [0, 1]
        0 keeps the weights, 1 applies the full importance.
    ratio_kwargs
        Passed to :func:`ratiowatch.core.rulsif.fit_ulsif` (``sigma``, ``lam``, ``n_centres``, ``seed``...).

    Examples
    --------
    >>> from ratiowatch.core.wsvm import WeightedSVR
    >>> rng = np.random.default_rng(0)
    >>> x = rng.normal(size=(80, 1)); y = np.sin(x[:, 0])
    >>> svr = WeightedSVR(C=1.0, epsilon=0.05, gamma=0.5).fit(x, y)
    >>> res = adapt(svr, rng.normal(1.0, 0.5, size=(60, 1)))
    >>> bool(res.sample_weight[x[:, 0] > 1].mean() > res.sample_weight[x[:, 0] < -1].mean())
    True
    """
    if not isinstance(model, WeightedSVMBase):
        raise ValueError(f"adapt needs a fitted WeightedSVC or WeightedSVR; got {type(model).__name__}")
    flatten = float(flatten)
    if not (0.0 <= flatten <= 1.0):
        raise ValueError(f"flatten must be in [0, 1]; got {flatten}")
    base = model.sample_weight_  # raises when not fitted
    x_train = model._X[model._ordered_slots()]
    x_new = as_samples(x_new, "x_new", min_samples=2, dim=x_train.shape[1])
    w, fit = importance_weights(x_new, x_train, **ratio_kwargs)
    target = base * ((1.0 - flatten) + flatten * w)
    stats = model.path(target)
    return AdaptResult(stats=stats, importance=w, sample_weight=target, ratio_fit=fit)

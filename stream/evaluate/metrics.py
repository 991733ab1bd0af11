"""Change-point metrics: TCPD F1 with a margin and segmentation covering (Arbelaez et al. 2010).

Both follow the rules of the Turing Change Point Dataset (van den Burg & Williams 2020), which
the TSSB covering shares:

* F1: index 0 is added to every annotator's set and to the prediction. A prediction matches an
  annotation when ``|t - x| <= margin``; each annotation and each prediction is matched at most
  once, the closest prediction first. Precision is measured against the union of all annotators,
  recall is the mean recall over annotators.
* Covering: for each annotator, ``sum_A |A| max_B |A n B| / |A u B| / T`` over its segments A and
  the predicted segments B, averaged over annotators.

Examples
--------
>>> round(f1_score({1: [], 2: [10], 3: [50]}, [10]), 7)
0.9090909
>>> covering({1: [50]}, [50], 100)
1.0
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np


def _clean(points: Iterable[int]) -> list[int]:
    out = []
    for p in points:
        ip = int(p)
        if ip != p:
            raise ValueError(f"change points must be integer indices; got {p!r}")
        out.append(ip)
    return sorted(set(out))


def true_positives(truth: Iterable[int], pred: Iterable[int], margin: int = 5) -> set[int]:
    """Annotations in ``truth`` matched by a distinct prediction within ``margin`` (closest first).

    The annotations are visited in increasing order. TCPDBench's ``true_positives`` visits them
    in the iteration order of a Python ``set``, which for integers is not always increasing
    (``list({0, 7, 9}) == [0, 9, 7]``), so the two can differ when two annotations compete for one
    prediction: ``{1: [7, 9]}`` against ``[3, 8]`` scores F1 0.667 here and 1.0 there. Neither order
    finds the largest matching in general.
    """
    if margin < 0:
        raise ValueError(f"margin must be >= 0; got {margin}")
    remaining = set(_clean(pred))
    hits: set[int] = set()
    for tau in _clean(truth):
        close = sorted((abs(tau - x), x) for x in remaining if abs(tau - x) <= margin)
        if not close:
            continue
        hits.add(tau)
        remaining.remove(close[0][1])
    return hits


def _annotator_sets(annotations) -> list[set[int]]:
    """One set of change points per annotator, from any of the forms the metrics accept:
    ``{annotator: [cp, ...]}``, a list of lists, or a flat list of change points (one annotator,
    as in TSSB; an empty list is one annotator who marked no change)."""
    if isinstance(annotations, Mapping):
        sets = [set(_clean(v)) for v in annotations.values()]
    else:
        annotations = list(annotations)
        if all(np.isscalar(a) for a in annotations):
            annotations = [annotations]
        sets = [set(_clean(v)) for v in annotations]
    if not sets:
        raise ValueError("annotations must hold at least one annotator (a list of change points each)")
    return sets


def precision_recall(annotations, predictions: Sequence[int], margin: int = 5) -> tuple[float, float]:
    """TCPD precision and recall (index 0 added everywhere); ``annotations`` as in :func:`f1_score`."""
    tks = _annotator_sets(annotations)
    for tk in tks:
        tk.add(0)
    x = set(_clean(predictions))
    x.add(0)
    union = set().union(*tks)
    precision = len(true_positives(union, x, margin)) / len(x)
    recall = float(np.mean([len(true_positives(tk, x, margin)) / len(tk) for tk in tks]))
    return precision, recall


def f1_score(annotations, predictions: Sequence[int], margin: int = 5) -> float:
    """TCPD F1 = 2PR / (P + R) with the margin rule (default 5 as in TCPD).

    ``annotations`` may be ``{annotator: [cp, ...]}``, a list of lists, or a flat list of change
    points (one annotator, as in TSSB; ``[]`` is one annotator who marked no change), as
    :func:`covering` accepts; change points are the first index of the new segment.

    >>> f1_score([10, 50], [10]) == f1_score([[10, 50]], [10]), f1_score([], [])
    (True, 1.0)
    """
    p, r = precision_recall(annotations, predictions, margin)
    return 0.0 if p + r == 0 else 2 * p * r / (p + r)


def _segments(cps: Iterable[int], n_obs: int) -> list[tuple[int, int]]:
    """Half-open segments [a, b) of 0..n_obs-1 cut at the change points strictly inside."""
    inner = [c for c in _clean(cps) if 0 < c < n_obs]
    bounds = [0, *inner, n_obs]
    return [(bounds[i], bounds[i + 1]) for i in range(len(bounds) - 1)]


def _cover_single(true_cps: Iterable[int], pred_cps: Iterable[int], n_obs: int) -> float:
    truth = _segments(true_cps, n_obs)
    pred = _segments(pred_cps, n_obs)
    total = 0.0
    for a0, a1 in truth:
        best = 0.0
        for b0, b1 in pred:
            inter = min(a1, b1) - max(a0, b0)
            if inter <= 0:
                continue
            union = max(a1, b1) - min(a0, b0)
            best = max(best, inter / union)
        total += (a1 - a0) * best
    return total / n_obs


def covering(annotations, predictions: Sequence[int], n_obs: int) -> float:
    """Segmentation covering of the predicted change points, averaged over annotators.

    ``annotations`` may be ``{annotator: [cp, ...]}``, a list of lists, or a flat list of change
    points (one annotator, as in TSSB; ``[]`` is one annotator who marked no change).
    """
    n_obs = int(n_obs)
    if n_obs < 1:
        raise ValueError(f"n_obs must be >= 1 (the series length); got {n_obs}")
    sets = _annotator_sets(annotations)
    return float(np.mean([_cover_single(tk, predictions, n_obs) for tk in sets]))


def tssb_f1(true_cps: Sequence[int], predictions: Sequence[int], n_obs: int, margin_frac: float = 0.01) -> float:
    """F1 for one annotator with a margin of ``int(n_obs * margin_frac)`` rows, index 0 added.

    The margin is truncated, as the ClaSP and ClaSS benchmark code computes its ``f1_margin_1pct``
    column (a series of 350 rows has a margin of 3; one of fewer than 100 rows, of 0).

    >>> tssb_f1([100], [103], 350), tssb_f1([100], [104], 350)
    (1.0, 0.5)
    """
    margin = int(n_obs * margin_frac)
    return f1_score([list(true_cps)], predictions, margin)

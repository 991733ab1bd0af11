"""river's ``check_estimator`` without a network: the data-set checks run on a local stream; and a
drift detector put to work inside one of river's adaptive trees.

For an anomaly detector, river's ``checks._yield_datasets`` yields ``datasets.CreditCard()``, a
remote data set downloaded on first use; offline, every data-set check (``check_learn_one``,
``check_pickling``, ``check_emerging_features``, ``check_roc_auc``, ... and
``check_bounded_memory_growth`` at ten times the length) fails on the download. This runs the
whole ``check_estimator`` -- every general and data-set check river yields for the model -- with
that one generator replaced by a local stream of the same kind ((dict, label) pairs).
"""

from __future__ import annotations

from collections.abc import Callable


def check_estimator_offline(model, stream: Callable[[int], list], monkeypatch) -> int:
    """Run ``river.checks.check_estimator(model)`` on ``stream(scale)``; return how many data sets it used."""
    from river import checks

    used = []

    def local_datasets(_model, scale: int = 1):
        used.append(scale)
        yield stream(scale)

    monkeypatch.setattr(checks, "_yield_datasets", local_datasets)
    checks.check_estimator(model)
    return len(used)


def learn_in_adaptive_tree(drift_detector, n: int = 400):
    """A ``HoeffdingAdaptiveTreeClassifier`` with ``drift_detector`` (which it clones for every new
    node) learns ``n`` samples whose concept changes halfway; returns the tree."""
    import numpy as np
    from river import tree

    model = tree.HoeffdingAdaptiveTreeClassifier(drift_detector=drift_detector, grace_period=50, seed=0)
    rng = np.random.default_rng(0)
    for i in range(n):
        x = {"a": float(rng.normal()), "b": float(rng.normal())}
        model.learn_one(x, (x["a"] > 0) if i < n // 2 else (x["b"] > 0))
    return model

"""river's ``check_estimator`` without a network: the data-set checks run on a local stream.

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

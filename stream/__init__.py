"""ratiowatch streaming engine: detectors, alarm calibration, evaluation, daemon and CLI.

Public names are imported lazily so ``import stream`` stays cheap (no numba compile, no kafka).

Examples
--------
>>> import stream
>>> callable(stream.detect)
True
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "ChangePointDetector": "stream.detectors.changepoint",
    "detect": "stream.offline",  # not stream/detect.py: a submodule would shadow the function
    "DensityRatioOutlierDetector": "stream.detectors.outlier",
    "StreamingOutlierDetector": "stream.detectors.outlier_stream",
    "TimeSeriesAnomalyDetector": "stream.detectors.anomaly",
    "OnlineWeightedSVR": "stream.learners.wsvm",
    "OnlineWeightedSVC": "stream.learners.wsvm",
    "ForecastResidualDetector": "stream.learners.forecast",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'stream' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)

"""ratiowatch: streaming change-point and outlier detection by direct density-ratio estimation.

The installed package has three parts, one folder each in the source tree:

- :mod:`ratiowatch.core` -- numerics only: kernels, the four estimators (uLSIF, RuLSIF, KLIEP,
  LSDD), incremental two-window states and the weighted-SVM solution path;
- :mod:`ratiowatch.stream` -- the engine: series preparation, calibration, detectors, learners,
  the daemon's engine, evaluation, benchmarks and the command line;
- :mod:`ratiowatch.connectors` -- the outside world: records, sources, sinks and metrics.

The public API is exported here and imported lazily, so ``import ratiowatch`` stays cheap (no
numba compile, no kafka).

Examples
--------
>>> import numpy as np
>>> import ratiowatch
>>> x = np.r_[np.zeros(200), np.full(200, 3.0)] + np.random.default_rng(0).normal(size=400)
>>> ratiowatch.detect(x)
[200]
"""

from __future__ import annotations

import importlib
from importlib.metadata import PackageNotFoundError, version

from ratiowatch.numba_cache import configure_cache

configure_cache()  # before numba is imported: a writable kernel cache even for a read-only install

try:
    __version__ = version("ratiowatch")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"

_EXPORTS = {
    "ChangePointDetector": "ratiowatch.stream.detectors.changepoint",
    "SplitProfileDetector": "ratiowatch.stream.detectors.segmenter",
    "PeriodRoutedDetector": "ratiowatch.stream.detectors.routed",
    "detect": "ratiowatch.stream.detectors.offline",
    "DensityRatioOutlierDetector": "ratiowatch.stream.detectors.outlier",
    "StreamingOutlierDetector": "ratiowatch.stream.detectors.outlier_stream",
    "TimeSeriesAnomalyDetector": "ratiowatch.stream.detectors.anomaly",
    "OnlineWeightedSVR": "ratiowatch.stream.learners.wsvm",
    "OnlineWeightedSVC": "ratiowatch.stream.learners.wsvm",
    "ForecastResidualDetector": "ratiowatch.stream.learners.forecast",
    "WeightedSVC": "ratiowatch.core.wsvm",
    "WeightedSVR": "ratiowatch.core.wsvm",
    "fit_ulsif": "ratiowatch.core.rulsif",
    "fit_rulsif": "ratiowatch.core.rulsif",
    "fit_kliep": "ratiowatch.core.kliep",
    "fit_lsdd": "ratiowatch.core.lsdd",
}

__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'ratiowatch' has no attribute {name!r}")
    try:
        imported = importlib.import_module(module)
    except AttributeError as exc:
        # raised from here, an AttributeError would read as "cannot import name" with its cause
        # dropped (a dependency too old for an attribute the module uses, say)
        raise ImportError(f"importing {module} for ratiowatch.{name} failed: {exc}") from exc
    return getattr(imported, name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))

"""Plotting helpers (matplotlib imported lazily, Agg backend: works without a display).

Examples
--------
>>> import numpy as np, tempfile, os
>>> x = np.r_[np.zeros(50), np.ones(50)]
>>> path = os.path.join(tempfile.mkdtemp(), "p.png")
>>> plot_detection(path, x, np.linspace(0, 1, 100), np.full(100, 0.5), [50], [50]) == path
True
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def _pyplot():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def plot_detection(path, series, scores, thresholds, detected: Sequence[int], truth: Sequence[int] = (),
                   title: str = "", columns: Sequence[str] | None = None, width: float = 10.0,
                   height: float = 5.0, dpi: int = 100, score_label: str = "change score") -> str:
    """Two panels: the series with true (dashed green) and detected (red) change points, and the
    change score with its threshold. Writes a PNG of ``width x height`` inches at ``dpi``."""
    plt = _pyplot()
    x = np.asarray(series, dtype=np.float64)
    if x.ndim == 1:
        x = x[:, None]
    t = np.arange(x.shape[0])
    fig, (ax1, ax2) = plt.subplots(2, 1, sharex=True, figsize=(width, height), dpi=dpi,
                                   gridspec_kw={"height_ratios": [2, 1]})
    for j in range(x.shape[1]):
        label = columns[j] if columns is not None and j < len(columns) else (f"x{j}" if x.shape[1] > 1 else None)
        ax1.plot(t, x[:, j], lw=0.8, label=label)
    for i, c in enumerate(truth):
        for ax in (ax1, ax2):
            ax.axvline(c, color="green", ls="--", lw=1.0, label="true change" if (i == 0 and ax is ax1) else None)
    for i, c in enumerate(detected):
        for ax in (ax1, ax2):
            ax.axvline(c, color="red", lw=1.2, alpha=0.8, label="detected" if (i == 0 and ax is ax1) else None)
    handles, _ = ax1.get_legend_handles_labels()
    if handles:
        ax1.legend(loc="upper left", fontsize=8)
    ax1.set_title(title or "change-point detection")
    ax2.plot(t, np.asarray(scores, dtype=np.float64), lw=0.8, color="black", label=score_label)
    ax2.plot(t, np.asarray(thresholds, dtype=np.float64), lw=0.8, color="orange", label="threshold")
    ax2.legend(loc="upper left", fontsize=8)
    ax2.set_xlabel("sample index")
    fig.tight_layout()
    path = str(path)
    fig.savefig(path, format="png", dpi=dpi)
    plt.close(fig)
    return path

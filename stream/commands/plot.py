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

import contextlib
import os
import stat
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np


def _pyplot():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def plot_formats() -> set[str]:
    """File extensions a plot can be written as (``png``, ``svg``, ``pdf``, ...: matplotlib's list).

    Raises ImportError when matplotlib is not installed.
    """
    plt = _pyplot()
    fig = plt.figure()
    try:
        return set(fig.canvas.get_supported_filetypes())
    finally:
        plt.close(fig)


class PlotWriteError(OSError):
    """A plot the backend could not write (e.g. ``.pgf`` without LaTeX). An ``OSError``, so a caller
    that reports a failed write of the file reports this the same way; the message says what to do."""


def _latex_problem(fmt: str) -> str | None:
    """Why matplotlib cannot write ``fmt`` on this machine for want of LaTeX (None: it can)."""
    if fmt != "pgf":
        return None
    import shutil

    import matplotlib

    tex = matplotlib.rcParams["pgf.texsystem"]
    if shutil.which(tex) is None:
        return (f"the .pgf format needs LaTeX ({tex}), which is not installed; install a TeX distribution "
                "or choose .pdf or .svg")
    return None


def plot_path_problem(path) -> str | None:
    """Why ``path`` cannot take a plot, in one line that says what to do (None: it can).

    Commands check this before computing anything: a wrong extension, a missing directory or a
    missing matplotlib must not cost the user the whole computation.
    """
    path = Path(path)
    try:
        formats = plot_formats()
    except ImportError as exc:
        return f"plotting needs matplotlib ({exc}); install it with: pip install matplotlib"
    ext = path.suffix.lower().lstrip(".")
    if ext not in formats:
        return (f"{path}: unknown image format {path.suffix or '(no extension)'}; "
                f"use one of {', '.join('.' + f for f in sorted(formats))}")
    parent = path.parent if str(path.parent) else Path(".")
    try:
        if not parent.is_dir():
            return f"{path}: directory {parent} does not exist; create it or choose another path"
        if not os.access(parent, os.W_OK):
            return f"{path}: directory {parent} is not writable; choose another path"
        if path.is_dir():
            return f"{path} is a directory; give a file name such as {path / 'plot.png'}"
    except OSError as exc:  # e.g. a name too long for the file system
        return f"{path}: {exc.strerror or exc}; choose another path"
    try:
        # os.access says yes to root everywhere, /proc included: only creating a file tells
        with tempfile.TemporaryFile(dir=parent):
            pass
    except OSError as exc:
        return f"{path}: cannot create a file in {parent} ({exc.strerror or exc}); choose another path"
    latex = _latex_problem(ext)
    if latex:
        return f"{path}: {latex}"
    return None


def _save(fig, path: str, fmt: str, dpi: int) -> None:
    """``fig.savefig`` to ``path``, which is replaced only by a complete file (see :func:`plot_detection`)."""
    target = os.path.realpath(path) if os.path.islink(path) else path  # a link keeps pointing at the plot
    try:
        mode = os.stat(target).st_mode
    except OSError:
        mode = None  # a new file
    if mode is not None and not stat.S_ISREG(mode):  # /dev/null, a pipe: nothing to replace
        _savefig(fig, target, fmt, dpi)
        return
    # drawn under the same name (the PostScript title is the file's name) in a directory beside the
    # target, on its file system: os.replace then swaps the complete file in at once
    tmpdir = tempfile.mkdtemp(prefix=".plot-", dir=os.path.dirname(target) or ".")
    tmp = os.path.join(tmpdir, os.path.basename(target))
    try:
        _savefig(fig, tmp, fmt, dpi)
        if mode is not None:
            os.chmod(tmp, stat.S_IMODE(mode))  # as writing over the file kept its permissions
        os.replace(tmp, target)
    finally:  # on any failure, Ctrl-C included; after os.replace only the empty directory is left
        with contextlib.suppress(OSError):
            os.remove(tmp)
        with contextlib.suppress(OSError):
            os.rmdir(tmpdir)


def _savefig(fig, path: str, fmt: str, dpi: int) -> None:
    try:
        fig.savefig(path, format=fmt, dpi=dpi)
    except RuntimeError as exc:  # a backend's own failure, e.g. pgf without LaTeX
        raise PlotWriteError(_latex_problem(fmt) or str(exc)) from exc


def plot_detection(path, series, scores, thresholds, detected: Sequence[int], truth: Sequence[int] = (),
                   title: str = "", columns: Sequence[str] | None = None, width: float = 10.0,
                   height: float = 5.0, dpi: int = 100, score_label: str = "change score") -> str:
    """Two panels: the series with true (dashed green) and detected (red) change points, and the
    change score with its threshold. Writes ``width x height`` inches at ``dpi`` in the format of
    the path's extension (``.png``, ``.svg``, ``.pdf``, ... see :func:`plot_formats`).

    A file that cannot be written raises ``OSError``: the system's own, or :class:`PlotWriteError`
    when the backend fails (e.g. ``.pgf`` without LaTeX), saying why. The plot is drawn into a new
    file beside ``path`` that then takes its place: a failed or interrupted write (Ctrl-C) leaves an
    existing plot as it was, and no partly written file behind."""
    fmt = Path(path).suffix.lower().lstrip(".")
    if fmt not in plot_formats():
        raise ValueError(f"{path}: unknown image format {Path(path).suffix or '(no extension)'}; "
                         f"use one of {', '.join('.' + f for f in sorted(plot_formats()))}")
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
    try:
        _save(fig, path, fmt, dpi)
    finally:
        plt.close(fig)
    return path

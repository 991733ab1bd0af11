"""``ratiowatch eval tssb DIR``: segmentation covering (and F1) of the default detector on TSSB data.

DIR is laid out like ``../shared/bench/tssb``: ``desc.txt`` with lines ``name,window_size,cp1,...``
and ``datasets/<name>.txt`` with one value per line. The ``window_size`` column is read but not
given to the detector (it would be side information the benchmark's competitors estimate
themselves). F1 uses a margin of 1% of the series length. UTSA (``../shared/bench/utsa``) has the
same layout and is read the same way.

Every report is split by the protocol's halves (``--half``; see ``docs/evaluation.md``);
``--streaming`` adds the streaming detector, ``--peers`` ruptures and claspy on the same series.
When DIR holds ``streaming_results/<method>.csv`` (``dataset,true_cps,found_cps,alarm_index,
f1_margin_1pct,covering``: the stored per-series results of published streaming segmenters), their
means over the same series and halves are reported beside ours as ``stored:<method>``.
"""

from __future__ import annotations

import argparse
import csv
import json
import warnings
from pathlib import Path

import numpy as np

from ratiowatch.stream.evaluate.datasets import add_eval_arguments, run_eval


def _read_text(path: Path) -> str:
    """The text of ``path``; ValueError naming it when it is not UTF-8."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def _desc_lines(root: Path) -> tuple[Path, list[tuple[int, str, list[str]]]]:
    """(desc.txt, ``[(line number, name, change point fields)]``) of the lines of ``root/desc.txt``
    that are not blank; ValueError naming desc.txt and the line on an empty name or window size (an
    empty field would shift the fields after it: the first change point read as the window size)."""
    desc = Path(root) / "desc.txt"
    if not desc.is_file():
        raise ValueError(f"{root} is not a TSSB folder: {desc} missing")
    out = []
    for k, line in enumerate(_read_text(desc).splitlines(), start=1):
        if not line.strip():
            continue
        parts = [p.strip() for p in line.split(",")]
        while len(parts) > 2 and not parts[-1]:  # trailing commas
            parts.pop()
        if not parts[0]:
            raise ValueError(f"{desc} line {k}: the series name is empty; lines are name,window_size,cp1,...")
        if len(parts) < 2 or not parts[1]:
            raise ValueError(f"{desc} line {k}: {parts[0]}: the window size is empty; "
                             "lines are name,window_size,cp1,...")
        out.append((k, parts[0], parts[2:]))
    return desc, out


def _read_values(path: Path) -> np.ndarray:
    """The values of a data file, one number per line; ValueError naming the file (and the line) when
    it is not UTF-8, holds a blank line before its last value (which would move every later value to
    an earlier index), a value that is not a number or not finite, or no value."""
    lines = _read_text(path).splitlines()
    filled = [i for i, line in enumerate(lines) if line.strip()]
    blank = next((i for i in range(filled[-1]) if not lines[i].strip()), None) if filled else None
    if blank is not None:
        raise ValueError(f"{path} line {blank + 1}: blank line inside the data; every line holds one value")
    try:
        with warnings.catch_warnings():  # an empty file is reported below, in one line
            warnings.filterwarnings("ignore", message="loadtxt: input contained no data")
            x = np.loadtxt(path, dtype=np.float64, ndmin=1)
    except ValueError as exc:
        raise ValueError(f"{path}: not one number per line ({exc})") from None
    if x.ndim != 1 or x.size == 0:
        raise ValueError(f"{path}: expected one number per line; got "
                         f"{'no values' if x.size == 0 else 'several columns'}")
    bad = np.flatnonzero(~np.isfinite(x))
    if bad.size:
        j = int(bad[0])
        where = f" line {filled[j] + 1}" if len(filled) == x.size else ""
        raise ValueError(f"{path}{where}: value {x[j]} at index {j} is not finite; "
                         "every value must be a finite number")
    return x


def load_dir(root: Path) -> list[tuple[str, np.ndarray, list[int]]]:
    """``[(name, values, change points)]`` in desc.txt's order; ValueError naming desc.txt (with its
    line) or the data file on bad data: an empty name or window size, a name listed twice, a change
    point that is not an index inside the series, a file that is not UTF-8, a data file that is
    missing, empty, not one finite number per line or has a blank line inside."""
    root = Path(root)
    desc, entries = _desc_lines(root)
    out = []
    lines: dict[str, int] = {}
    for k, name, fields in entries:
        if name in lines:
            raise ValueError(f"{desc} lists {name} twice (lines {lines[name]} and {k}); series names must be unique")
        lines[name] = k
        try:
            cps = [int(c) for c in fields]
        except ValueError:
            raise ValueError(f"{desc} line {k}: {name}: change points must be integers; got {', '.join(fields)}") from None
        path = root / "datasets" / f"{name}.txt"
        if not path.is_file():
            raise ValueError(f"{path} not found (listed in {desc} line {k})")
        x = _read_values(path)
        outside = [c for c in cps if not 0 <= c < x.size]
        if outside:
            raise ValueError(f"{desc} line {k}: {name}: change point {outside[0]} outside the series "
                             f"({x.size} values)")
        out.append((name, x, cps))
    if not out:
        raise ValueError(f"no series listed in {desc}")
    return out


def _config(params: dict) -> dict:
    """The configuration actually used: the detect() defaults, the window and period rules, any overrides."""
    from ratiowatch.stream.detectors.offline import describe_config

    return describe_config(params)


def series_names(root: Path) -> list[str]:
    """Names of the series listed in ``root/desc.txt`` (the halves are split over all of them)."""
    return sorted({name for _, name, _ in _desc_lines(root)[1]})


STORED_COLUMNS = ("dataset", "found_cps", "alarm_index", "f1_margin_1pct", "covering")


def load_stored(root: Path, names=None) -> dict[str, dict[str, dict]]:
    """``{method: {name: {"cover", "f1", "change_points", "alarm_index", "delay_mean"}}}`` from
    ``root/streaming_results/*.csv`` (empty when the folder is absent); the stored scores as published.

    ValueError naming the file (and its line) on a missing column, a cell that does not parse or a
    file that is not UTF-8.
    """
    out: dict[str, dict[str, dict]] = {}
    folder = Path(root) / "streaming_results"
    if not folder.is_dir():
        return out
    for f in sorted(folder.glob("*.csv")):
        try:
            per = _read_stored(f, names)
        except UnicodeDecodeError as exc:
            raise ValueError(f"{f}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
        out[f.stem] = per
    return out


def _read_stored(f: Path, names) -> dict[str, dict]:
    """``{name: scores}`` of one stored results file (:func:`load_stored`)."""
    per: dict[str, dict] = {}
    with f.open(newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        missing = [c for c in STORED_COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(f"{f}: missing column(s) {', '.join(missing)}; stored results have the columns "
                             "dataset,true_cps,found_cps,alarm_index,f1_margin_1pct,covering")
        for rec in reader:
            line = reader.line_num
            if rec.get(None):
                raise ValueError(f"{f} line {line}: more fields than the header (is a list of change "
                                 "points not quoted?)")
            name = rec["dataset"]
            if names is not None and name not in names:
                continue
            try:
                found = _indices(rec["found_cps"])
                alarm = _indices(rec["alarm_index"])
            except ValueError:
                raise ValueError(f"{f} line {line}: found_cps / alarm_index must be JSON lists of indices; "
                                 f"got {rec['found_cps']!r} / {rec['alarm_index']!r}") from None
            try:
                cover, f1 = float(rec["covering"]), float(rec["f1_margin_1pct"])
            except (TypeError, ValueError):
                raise ValueError(f"{f} line {line}: covering / f1_margin_1pct must be numbers; "
                                 f"got {rec['covering']!r} / {rec['f1_margin_1pct']!r}") from None
            delay = [a - c for a, c in zip(alarm, found)]
            per[name] = {"cover": cover, "f1": f1,
                         "change_points": found, "alarm_index": alarm,
                         "delay_mean": round(float(np.mean(delay)), 2) if delay else None}
    return per


def _indices(cell: str | None) -> list[int]:
    """The list of indices in a JSON cell (empty: none); ValueError if it is not one."""
    try:
        values = json.loads(cell or "[]")
    except json.JSONDecodeError:
        raise ValueError(cell) from None
    if not isinstance(values, list):
        raise ValueError(cell)
    try:
        return [int(c) for c in values]
    except (TypeError, ValueError):
        raise ValueError(cell) from None


def evaluate(root: Path, plot_dir: Path | None = None, names: list[str] | None = None, streaming: bool = False,
             peers=(), progress=None, split_profile: bool | dict = False, auto: bool | dict = False, **params) -> dict:
    """Score ours (offline, and streaming if asked), the ``peers`` and the stored streaming results
    on the series ``names`` (default all): ``mean`` (ours, offline) and ``by_half`` (every method)."""
    from ratiowatch.stream.evaluate.metrics import covering, tssb_f1
    from ratiowatch.stream.evaluate.protocol import half_means, methods_present, split_halves
    from ratiowatch.stream.evaluate.runner import evaluate_series, plotter, throughput

    series = load_dir(root)
    halves = split_halves(s[0] for s in series)
    truth = {name: cps for name, _, cps in series}
    data = {name: x for name, x, _ in series if names is None or name in set(names)}

    def score(name, cps, t_len):
        return {"cover": covering([truth[name]], cps, t_len), "f1": tssb_f1(truth[name], cps, t_len)}

    stored = load_stored(root, set(data))  # before the series run: a malformed file ends the run at once
    notes: list[str] = []
    results = evaluate_series(data, score, halves, streaming=streaming, split_profile=split_profile, auto=auto,
                              peers=peers,
                              desc=Path(root).name, plot=plotter(plot_dir, lambda n: truth[n], root.name.upper()), progress=progress,
                              notes=notes, **params)
    for method, per in stored.items():
        for name, r in per.items():
            results[name].setdefault("stored", {})[method] = r
    mean = {"cover": float(np.mean([r["cover"] for r in results.values()])),
            "f1": float(np.mean([r["f1"] for r in results.values()]))}
    by_half = half_means(results, methods_present(results), {"": ("cover", "f1", "delay_mean")}, se=True)
    return {"benchmark": Path(root).name, "config": _config(params), "datasets": results, "mean": mean,
            "by_half": by_half, "halves": {n: halves[n] for n in results}, "notes": notes,
            "points_per_s": throughput(results, {n: int(x.shape[0]) for n, x in data.items()})}


def add_arguments(parser: argparse.ArgumentParser, name: str = "tssb") -> None:
    add_eval_arguments(parser, name)


def _summary(out: dict) -> list[str]:
    from ratiowatch.stream.evaluate.protocol import format_halves

    lines = [f"{name:28s} {r['half']:5s} cover={r['cover']:.3f} f1={r['f1']:.3f} "
             f"{r.get('change_points', r.get('error'))}" for name, r in out["datasets"].items()]
    m = out["mean"]
    return lines + [f"mean: cover={m['cover']:.3f} f1={m['f1']:.3f}", "", "by half:"] + format_halves(
        out["by_half"], ("cover", "f1", "delay_mean"))


def run(args, name: str = "tssb") -> int:
    """``ratiowatch eval tssb``; ``name`` sets the default folder and the messages (``eval utsa``)."""
    return run_eval(args, name, evaluate, _summary, series_names)

"""Comparison of two results of one ``ratiowatch eval`` command: change-point runs series by series
(paired), synthetic suites kind by kind, other results number by number.

The protocol keeps a change only if the check half improves by more than its noise
(docs/evaluation.md). Two runs' half means differ by the change *and* by which series happen to
move, so the question is a paired one: on each series scored by both runs, ``d = new - base``;
the half's mean of ``d`` and its standard error ``sd(d) / sqrt(n)`` say how far the change moved
the half and how steadily, and the series that moved most say where to look.

``ratiowatch eval compare BASE.json NEW.json`` reads two files written by ``ratiowatch eval
tcpd|tssb|utsa --json`` on the same benchmark and prints, for each half (tune, check, all), each
method present in both runs (``ours``, ``ours_streaming``, ..., peers) and each metric: both means,
the paired difference with its standard error, and how many series rose and fell. The seed spread
of either run (``--seeds``) is shown beside it where present. TCPD runs compare the univariate
default set that their means use.

Two runs of a synthetic suite (``ratiowatch eval synthetic ... --json``, ``eval synthetic-anomaly
--json``) are compared kind by kind instead: every number of every table (``by_kind``,
``by_length``, ``overall``, ``cells`` with its rows named ``kind.length``, ...) in both runs, with
its change; by default only the rows that changed are printed. Any other result of ``ratiowatch
eval ... --json`` (``nab``, ``odds``) is compared number by number: every number both results
hold, by its path, that changed (timings left out).

Examples
--------
>>> base = {"benchmark": "tssb", "datasets": {
...     "a": {"half": "tune", "cover": 0.5}, "b": {"half": "check", "cover": 0.6},
...     "c": {"half": "check", "cover": 0.9}}}
>>> new = {"benchmark": "tssb", "datasets": {
...     "a": {"half": "tune", "cover": 0.5}, "b": {"half": "check", "cover": 0.8},
...     "c": {"half": "check", "cover": 0.9}}}
>>> cell = compare_runs(base, new)["halves"]["check"]["ours"]["cover"]
>>> cell["base"], cell["new"], cell["diff"], cell["up"], cell["down"]
(0.75, 0.85, 0.1, 1, 0)
>>> cell["moved"]
[['b', 0.6, 0.8]]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from ratiowatch.stream.evaluate.protocol import HALVES, method_entry, methods_present

#: metrics compared where a run has them (the change-point benchmarks' own)
METRICS = ("f1", "cover", "delay_mean")
#: a difference smaller than this is no move (some metrics are stored rounded to 4 places)
TIE = 1e-9
#: the synthetic suites' sections (``eval synthetic``: null, stress, change; ``eval synthetic-anomaly``:
#: null, found)
SUITES = ("null", "stress", "change", "found")
#: a suite's settings: runs that differ in them are compared, with a warning
SUITE_SETTINGS = ("mode", "seeds", "target", "tolerance", "thresholds", "lengths", "suite")
#: keys of timings, which differ from run to run and say nothing of the detector's answers
TIMING_KEYS = ("seconds", "points_per_s", "time")


# -- results of any kind: reading them, what they ran on -------------------------------------


def load_run(path) -> dict:
    """A result written by ``ratiowatch eval ... --json`` (ValueError if it is not one)."""
    try:
        run = json.loads(Path(path).read_text())
    except OSError as exc:
        raise ValueError(f"{path}: cannot read ({exc.strerror or exc})") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(run, dict) or "benchmark" not in run:
        raise ValueError(f"{path}: not an evaluation result; write one with "
                         "'ratiowatch eval tcpd|tssb|utsa|nab|odds|synthetic|synthetic-anomaly ... --json > FILE'")
    return run


def _check_same_benchmark(base: Mapping, new: Mapping, what: str) -> None:
    """ValueError("the <what>: ...") unless both results are of the same benchmark."""
    if base.get("benchmark") != new.get("benchmark"):
        raise ValueError(f"the {what}: {base.get('benchmark')!r} and {new.get('benchmark')!r}")


def is_change_point_run(result: Mapping) -> bool:
    """Whether ``result`` is a run of ``eval tcpd|tssb|utsa`` (series rows, each with its half)."""
    rows = result.get("datasets")
    return isinstance(rows, dict) and bool(rows) and all(isinstance(r, dict) and "half" in r for r in rows.values())


def _flat(obj, prefix: str = "") -> dict[str, object]:
    """``{path: value}`` of the leaves of nested dicts and lists (paths joined by ".")."""
    items = obj.items() if isinstance(obj, Mapping) else enumerate(obj) if isinstance(obj, list) else None
    if items is None:
        return {prefix[:-1]: obj}
    out: dict[str, object] = {}
    for key, v in items:
        out.update(_flat(v, f"{prefix}{key}."))
    return out


def _blas_sorted(env: Mapping) -> Mapping:
    """``env`` with its BLAS libraries sorted by file: the order they were loaded in (which import
    came first) says nothing about the kernels that ran, so it is no change."""
    blas = env.get("blas")
    if not isinstance(blas, list):
        return env
    return {**env, "blas": sorted(blas, key=lambda lib: json.dumps(
        [lib.get("file"), lib] if isinstance(lib, Mapping) else [None, lib], sort_keys=True, default=str))}


def environment_changes(base: Mapping, new: Mapping) -> dict[str, list] | None:
    """``{path: [base, new]}`` of what differs in the two results' ``environment`` (versions, BLAS
    kernels, BLAS variables; :mod:`.environment`), or None where either result does not record it."""
    if not isinstance(base.get("environment"), Mapping) or not isinstance(new.get("environment"), Mapping):
        return None
    a, b = _flat(_blas_sorted(base["environment"])), _flat(_blas_sorted(new["environment"]))
    return {k: [a.get(k), b.get(k)] for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)}


def _environment_line(changes: dict | None) -> str:
    if changes is None:
        return "environment: not recorded in one or both results (written before it was recorded)"
    if not changes:
        return "environment changes: none"
    return "environment changes: " + "; ".join(f"{k} {json.dumps(a)} -> {json.dumps(b)}"
                                               for k, (a, b) in changes.items())


def _num(v, signed: bool = False) -> str:
    if v is None:
        return "-"
    if isinstance(v, int) and not signed:
        return str(v)
    return f"{v:+.3f}" if signed else (f"{v:.3f}" if abs(v) < 10 else f"{v:.1f}")


# -- change-point runs (eval tcpd|tssb|utsa): series by series ---------------------------------
def _scored_names(base: Mapping, new: Mapping) -> tuple[list[str], str]:
    """(series scored by both runs, what the set is): the univariate default set for TCPD."""
    names = sorted(set(base["datasets"]) & set(new["datasets"]))
    listed = [run["univariate"] for run in (base, new) if "univariate" in run]
    if listed:
        keep = set.intersection(*(set(v) for v in listed))
        return [n for n in names if n in keep], "univariate default set"
    if base.get("benchmark") == "tcpd" or new.get("benchmark") == "tcpd":
        return names, "every series (this run does not list its univariate set)"
    return names, "every series"


def paired(base_rows: Mapping, new_rows: Mapping, names: Sequence[str], method: str, metric: str) -> dict | None:
    """Paired statistics of ``metric`` for ``method`` over the ``names`` both runs scored (None if none).

    ``diff`` is the mean of ``new - base``, ``diff_se`` its standard error (None below two
    series); ``moved`` lists ``[name, base, new]`` of every series that moved, largest move first.
    """
    pairs = []
    for name in names:
        b, n = method_entry(base_rows[name], method), method_entry(new_rows[name], method)
        if b is None or n is None or b.get(metric) is None or n.get(metric) is None:
            continue
        pairs.append((name, float(b[metric]), float(n[metric])))
    if not pairs:
        return None
    count = len(pairs)
    diffs = [n - b for _, b, n in pairs]
    mean_d = sum(diffs) / count
    se = (math.sqrt(sum((d - mean_d) ** 2 for d in diffs) / (count - 1) / count) if count >= 2 else None)
    moved = sorted((p for p in pairs if abs(p[2] - p[1]) > TIE), key=lambda p: (-abs(p[2] - p[1]), p[0]))
    return {"n": count,
            "base": round(sum(b for _, b, _ in pairs) / count, 4),
            "new": round(sum(n for _, _, n in pairs) / count, 4),
            "diff": round(mean_d, 4), "diff_se": None if se is None else round(se, 4),
            "up": sum(d > TIE for d in diffs), "down": sum(d < -TIE for d in diffs),
            "moved": [[name, round(b, 4), round(n, 4)] for name, b, n in moved]}


def _config_changes(base: Mapping, new: Mapping) -> dict[str, list]:
    """``{key: [base value, new value]}`` of every configuration entry that differs."""
    out = {}
    for section in ("config", "window_options", "split_profile_options", "auto_options"):
        a, b = base.get(section) or {}, new.get(section) or {}
        for key in sorted(set(a) | set(b)):
            if a.get(key) != b.get(key):
                label = key if section == "config" else f"{section}.{key}"
                out[label] = [a.get(key), b.get(key)]
    return out


def _seed_sd(run: Mapping, half: str, method: str, metric: str) -> float | None:
    stats = (((run.get("seed_spread") or {}).get("by_half") or {}).get(half) or {}).get(method) or {}
    return (stats.get(metric) or {}).get("sd")


def compare_runs(base: Mapping, new: Mapping, methods: Sequence[str] | None = None,
                 metrics: Sequence[str] = METRICS) -> dict:
    """The paired comparison of two runs (module docstring); ``methods`` default: every method
    present in both runs."""
    _check_same_benchmark(base, new, "runs are of different benchmarks")
    names, scored = _scored_names(base, new)
    halves_seen = {base["datasets"][n].get("half") for n in names}
    if methods is None:
        in_new = set(methods_present({n: new["datasets"][n] for n in names}))
        methods = [m for m in methods_present({n: base["datasets"][n] for n in names}) if m in in_new]
    out: dict = {"benchmark": base.get("benchmark"), "series": len(names), "scored": scored,
                 "only_in_base": sorted(set(base["datasets"]) - set(new["datasets"])),
                 "only_in_new": sorted(set(new["datasets"]) - set(base["datasets"])),
                 "config_changes": _config_changes(base, new),
                 "environment_changes": environment_changes(base, new), "halves": {}}
    for half in [h for h in HALVES if h in halves_seen] + ["all"]:
        chosen = [n for n in names if half == "all" or base["datasets"][n].get("half") == half]
        per_method = {}
        for method in methods:
            cells = {}
            for metric in metrics:
                cell = paired(base["datasets"], new["datasets"], chosen, method, metric)
                if cell is not None:
                    cell["seed_sd"] = [_seed_sd(base, half, method, metric), _seed_sd(new, half, method, metric)]
                    cells[metric] = cell
            if cells:
                per_method[method] = cells
        out["halves"][half] = per_method
    return out


def format_comparison(res: Mapping, top: int = 3) -> list[str]:
    """Text lines: one per half, method and metric, with the series that moved most."""
    lines = [f"benchmark {res['benchmark']}: {res['series']} series scored by both runs ({res['scored']})"]
    for key, label in (("only_in_base", "only in the base run"), ("only_in_new", "only in the new run")):
        if res[key]:
            lines.append(f"{label} (left out): {', '.join(res[key])}")
    if res["config_changes"]:
        lines.append("configuration changes: " + "; ".join(
            f"{k} {json.dumps(a)} -> {json.dumps(b)}" for k, (a, b) in res["config_changes"].items()))
    else:
        lines.append("configuration changes: none recorded")
    lines.append(_environment_line(res["environment_changes"]))
    lines.append(f"{'half':6s} {'method':28s} {'metric':10s} {'n':>3s} {'base':>7s} {'new':>7s} "
                 f"{'diff':>7s} {'se':>6s} {'up':>3s} {'down':>4s}  seed sd  moved most")
    for half, per_method in res["halves"].items():
        for method, cells in per_method.items():
            for metric, c in cells.items():
                sd = "/".join(_num(v) for v in c["seed_sd"]) if any(v is not None for v in c["seed_sd"]) else "-"
                moved = ", ".join(f"{name} {_num(b)}->{_num(n)}" for name, b, n in c["moved"][:top])
                lines.append(f"{half:6s} {method:28s} {metric:10s} {c['n']:3d} {_num(c['base']):>7s} "
                             f"{_num(c['new']):>7s} {_num(c['diff'], True):>7s} {_num(c['diff_se']):>6s} "
                             f"{c['up']:3d} {c['down']:4d}  {sd:7s}  {moved}")
    return lines


# -- synthetic suites: table by table ----------------------------------------------------------
def _suites(result: Mapping) -> list[str]:
    return [k for k in SUITES if isinstance(result.get(k), dict)]


def _numbers(row) -> dict[str, float]:
    """The numeric fields of a table row (booleans are flags, not numbers); a field that is itself a
    mapping gives its numbers as ``field.key`` (``found.3.0``)."""
    if not isinstance(row, Mapping):
        return {}
    out: dict[str, float] = {}
    for k, v in row.items():
        if isinstance(v, Mapping):
            out.update({f"{k}.{sub}": x for sub, x in _numbers(v).items()})
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            out[k] = v
    return out


def _rows(table: Mapping, prefix: str = "") -> dict[str, Mapping]:
    """``{row name: row}`` of a table; a row that only groups further rows (``cells``: kind, then
    length) is replaced by them, named ``kind.length``."""
    out: dict[str, Mapping] = {}
    for name, row in table.items():
        if isinstance(row, Mapping) and row and all(isinstance(v, Mapping) for v in row.values()):
            out.update(_rows(row, f"{prefix}{name}."))
        else:
            out[f"{prefix}{name}"] = row
    return out


def _row_change(a, b) -> dict[str, list]:
    """``{field: [base, new, new - base]}`` over the numeric fields of both rows."""
    na, nb = _numbers(a), _numbers(b)
    return {k: [na[k], nb[k], round(nb[k] - na[k], 6)] for k in na if k in nb}


def compare_suites(base: Mapping, new: Mapping) -> dict:
    """Two runs of a synthetic suite compared table by table (module docstring).

    Examples
    --------
    >>> a = {"benchmark": "synthetic", "null": {"seeds": 10, "overall": {"alarms": 45, "per_10k": 0.248},
    ...      "by_kind": {"ar0": {"alarms": 3, "in_spec": True}, "t3": {"alarms": 9}}}}
    >>> b = {"benchmark": "synthetic", "null": {"seeds": 10, "overall": {"alarms": 46, "per_10k": 0.253},
    ...      "by_kind": {"ar0": {"alarms": 3, "in_spec": True}, "t3": {"alarms": 10}}}}
    >>> res = compare_suites(a, b)["suites"]["null"]
    >>> res["tables"]["by_kind"]["t3"], res["tables"]["overall"]["all"]["alarms"]
    ({'alarms': [9, 10, 1]}, [45, 46, 1])
    """
    suites = [k for k in _suites(base) if k in _suites(new)]
    if not suites:
        raise ValueError("the two results share no synthetic suite (null, stress, change, found); "
                         "compare runs of the same suite")
    _check_same_benchmark(base, new, "results are of different evaluations")
    out: dict = {"benchmark": base.get("benchmark"),
                 "detector": [base.get("detector") or base.get("mode"), new.get("detector") or new.get("mode")],
                 "params": [base.get("params"), new.get("params")],
                 "environment_changes": environment_changes(base, new), "suites": {}}
    for suite in suites:
        a, b = base[suite], new[suite]
        settings = {k: [a.get(k), b.get(k)] for k in SUITE_SETTINGS if a.get(k) != b.get(k)}
        tables: dict[str, dict] = {}
        for key in a:
            if key not in b or not isinstance(a[key], Mapping):
                continue
            if all(isinstance(v, Mapping) for v in a[key].values()) and a[key]:  # a table: one row per name
                rows_a, rows_b = _rows(a[key]), _rows(b[key])
                rows = {name: _row_change(row, rows_b.get(name)) for name, row in rows_a.items() if name in rows_b}
                rows = {name: r for name, r in rows.items() if r}
                if rows:
                    tables[key] = rows
            elif _numbers(a[key]):  # one row (overall, found)
                row = _row_change(a[key], b[key])
                if row:
                    tables[key] = {"all": row}
        out["suites"][suite] = {"settings_differ": settings, "tables": tables}
    return out


def format_suite_comparison(res: Mapping, everything: bool = False) -> list[str]:
    """Text lines: per suite and table, the rows whose numbers changed (``everything``: all rows)."""
    head = f"{res['benchmark']}: {res['detector'][0]} -> {res['detector'][1]}"
    if res["params"][0] != res["params"][1]:
        head += f" (params {json.dumps(res['params'][0])} -> {json.dumps(res['params'][1])})"
    lines = [head, _environment_line(res["environment_changes"])]
    for suite, part in res["suites"].items():
        lines.append(f"[{suite}]")
        for key, (a, b) in part["settings_differ"].items():
            lines.append(f"  warning: the runs differ in {key}: {json.dumps(a)} -> {json.dumps(b)}")
        shown = 0
        for table, rows in part["tables"].items():
            for name, row in rows.items():
                moved = {k: v for k, v in row.items() if abs(v[2]) > TIE}
                if not (moved or everything):
                    continue
                shown_cells = row if everything else moved
                cells = ", ".join(f"{k} {_num(v[0])} -> {_num(v[1])}" for k, v in shown_cells.items())
                lines.append(f"  {table:10s} {name:22s} {cells}")
                shown += 1
        if not shown:
            lines.append(f"  no number changed ({sum(len(rows) for rows in part['tables'].values())} rows)")
    return lines


# -- any other result (eval nab, eval odds): number by number ----------------------------------
def _leaves(obj, prefix: str = "") -> dict[str, float]:
    """``{path: number}`` of every number in nested dicts (paths joined by "."), timings left out."""
    out: dict[str, float] = {}
    for key, v in obj.items():
        if any(t in str(key) for t in TIMING_KEYS) or (not prefix and key == "environment"):
            continue
        path = f"{prefix}{key}"
        if isinstance(v, Mapping):
            out.update(_leaves(v, path + "."))
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            out[path] = v
    return out


def compare_numbers(base: Mapping, new: Mapping) -> dict:
    """Two results of any ``eval`` compared number by number (module docstring).

    Examples
    --------
    >>> a = {"benchmark": "odds", "datasets": {"cardio": {"auc": 0.95, "seconds": {"ours": 1.0}}}}
    >>> b = {"benchmark": "odds", "datasets": {"cardio": {"auc": 0.96, "seconds": {"ours": 2.0}}}}
    >>> compare_numbers(a, b)["changed"]
    {'datasets.cardio.auc': [0.95, 0.96, 0.01]}
    """
    _check_same_benchmark(base, new, "results are of different evaluations")
    a, b = _leaves(base), _leaves(new)
    both = [k for k in a if k in b]
    return {"benchmark": base.get("benchmark"), "environment_changes": environment_changes(base, new),
            "changed": {k: [a[k], b[k], round(b[k] - a[k], 6)] for k in both if abs(b[k] - a[k]) > TIE},
            "unchanged": sum(abs(b[k] - a[k]) <= TIE for k in both),
            "only_in_base": [k for k in a if k not in b], "only_in_new": [k for k in b if k not in a]}


def format_number_comparison(res: Mapping) -> list[str]:
    """Text lines: every number that changed, by its path."""
    lines = [f"{res['benchmark']}: {len(res['changed'])} numbers changed, {res['unchanged']} unchanged",
             _environment_line(res["environment_changes"])]
    for key, label in (("only_in_base", "only in the base result"), ("only_in_new", "only in the new result")):
        if res[key]:
            lines.append(f"{label}: {len(res[key])} numbers (e.g. {', '.join(res[key][:3])})")
    lines += [f"  {path}: {a:.6g} -> {b:.6g} ({d:+.6g})" for path, (a, b, d) in res["changed"].items()]
    return lines


# -- the command -------------------------------------------------------------------------------
def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("base", type=Path, help="the result to compare against (ratiowatch eval tcpd|tssb|utsa|synthetic|"
                        "synthetic-anomaly|nab|odds ... --json)")
    parser.add_argument("new", type=Path, help="the result with the change, of the same command on the same data")
    parser.add_argument("--method", action="append", default=None, metavar="NAME",
                        help="compare only this method (repeatable): ours, ours_streaming, ours_streaming_auto, "
                             "ours_streaming_profile, peer:<name>, stored:<name>; default: all in both runs")
    parser.add_argument("--top", type=int, default=3, metavar="K", help="series that moved most, per line (3)")
    parser.add_argument("--all", action="store_true", dest="everything",
                        help="synthetic suites: print every row, not only the rows that changed")
    parser.add_argument("--json", action="store_true", help="print the full comparison as JSON")


def run(args) -> int:
    if args.top < 0:
        print(f"ratiowatch eval compare: --top must be >= 0; got {args.top}", file=sys.stderr)
        return 2
    try:
        base, new = load_run(args.base), load_run(args.new)
        if not (is_change_point_run(base) and is_change_point_run(new)):
            if args.method:
                raise ValueError("--method is for change-point runs (eval tcpd|tssb|utsa)")
            if _suites(base) or _suites(new):
                res = compare_suites(base, new)
                lines = format_suite_comparison(res, args.everything)
            else:
                res = compare_numbers(base, new)
                lines = format_number_comparison(res)
            from ratiowatch.stream.evaluate.jsonout import dumps as strict_json

            print(strict_json(res, indent=2) if args.json else "\n".join(lines))
            return 0
        res = compare_runs(base, new, methods=args.method)
    except ValueError as exc:
        print(f"ratiowatch eval compare: {exc}", file=sys.stderr)
        return 2
    absent = [m for m in args.method or () if not any(m in per for per in res["halves"].values())]
    if absent:
        print(f"ratiowatch eval compare: no series has results of {', '.join(absent)} in both runs",
              file=sys.stderr)
        return 2
    from ratiowatch.stream.evaluate.jsonout import dumps as strict_json

    print(strict_json(res, indent=2) if args.json else "\n".join(format_comparison(res, args.top)))
    return 0

"""The generalisation protocol's bookkeeping: tune / check halves, per-half means, seed spread.

Within a benchmark the series are sorted by name and alternate: even positions (0, 2, ...) are the
*tune* half, odd positions the *check* half. Designs and settings are chosen on the tune half only;
every report shows both halves and all series (see ``docs/evaluation.md``).

Each evaluated series is a row ``{"half", <our offline metrics>, "change_points", "streaming": {...},
"peers": {peer: {...}}, "stored": {method: {...}}}``; a *method* names where its metrics sit in
the row: ``"ours"`` (the row itself), ``"ours_streaming"``, ``"ours_streaming_profile"``,
``"ours_streaming_auto"``, ``"peer:<name>"``, ``"stored:<name>"``.

Examples
--------
>>> split_halves(["b", "a", "d", "c", "e"])
{'a': 'tune', 'b': 'check', 'c': 'tune', 'd': 'check', 'e': 'tune'}
>>> select(["b", "a", "c"], "check")
['b']
>>> rows = {"a": {"half": "tune", "f1": 1.0}, "b": {"half": "check", "f1": 0.5}}
>>> half_means(rows, ["ours"], {"": ("f1",)})["all"]["ours"]
{'f1': 0.75, 'n': 2}
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

import numpy as np

HALVES = ("tune", "check")
HALF_CHOICES = ("tune", "check", "both")


def split_halves(names: Iterable[str]) -> dict[str, str]:
    """``{name: "tune" | "check"}``: sorted by name, even positions tune, odd positions check."""
    return {name: HALVES[i % 2] for i, name in enumerate(sorted(set(names)))}


def select(names: Iterable[str], half: str) -> list[str]:
    """The names of ``half`` ("tune", "check" or "both"), sorted."""
    if half not in HALF_CHOICES:
        raise ValueError(f"half must be one of {HALF_CHOICES}; got {half!r}")
    halves = split_halves(names)
    return [n for n, h in halves.items() if half == "both" or h == half]


def method_entry(row: Mapping, method: str) -> Mapping | None:
    """Where ``method``'s metrics sit in a series row (None when that method did not run on it)."""
    if method == "ours":
        return row
    if method == "ours_streaming":
        return row.get("streaming")
    if method == "ours_streaming_profile":
        return row.get("streaming_profile")
    if method == "ours_streaming_auto":
        return row.get("streaming_auto")
    kind, _, name = method.partition(":")
    if kind == "peer":
        return (row.get("peers") or {}).get(name)
    if kind == "stored":
        return (row.get("stored") or {}).get(name)
    raise ValueError(f"unknown method {method!r}")


def methods_present(rows: Mapping[str, Mapping]) -> list[str]:
    """Every method with at least one result, ours first, then in-run peers, then stored results."""
    out = ["ours"]
    if any(r.get("streaming") for r in rows.values()):
        out.append("ours_streaming")
    if any(r.get("streaming_profile") for r in rows.values()):
        out.append("ours_streaming_profile")
    if any(r.get("streaming_auto") for r in rows.values()):
        out.append("ours_streaming_auto")
    for key, prefix in (("peers", "peer"), ("stored", "stored")):
        names = dict.fromkeys(n for r in rows.values() for n in (r.get(key) or {}))
        out += [f"{prefix}:{n}" for n in names]
    return out


def half_means(rows: Mapping[str, Mapping], methods: Sequence[str],
               groups: Mapping[str, tuple[str, ...]],
               include: Mapping[str, Callable[[str], bool]] | None = None, se: bool = False) -> dict[str, dict]:
    """Mean metrics per half ("tune", "check", "all") and method.

    ``groups`` maps a suffix to metric names: ``{"": ("f1", "cover"), "_multi": ("f1", "cover")}``
    reports ``f1``, ``cover`` over the series ``include[""]`` accepts and ``f1_multi``,
    ``cover_multi`` over those ``include["_multi"]`` accepts (default: every series), each with its
    count ``n`` / ``n_multi``. A method without a result on a series leaves it out of its mean.

    ``se``: also each mean's standard error over the series, ``<metric>_se`` = sd / sqrt(count)
    (None below two series). With a dozen series per half it is 0.05-0.1 covering: the sampling
    noise of *which* series a half holds, beside which the seed spread (the surrogates' noise) is small.
    """
    include = include or {}
    out: dict[str, dict] = {}
    present = [h for h in HALVES if any(r["half"] == h for r in rows.values())]
    for half in present + ["all"]:
        out[half] = {}
        for method in methods:
            res: dict = {}
            for suffix, metrics in groups.items():
                keep = include.get(suffix, lambda name: True)
                entries = [method_entry(r, method) for name, r in rows.items()
                           if (half == "all" or r["half"] == half) and keep(name)]
                entries = [e for e in entries if e is not None]
                for m in metrics:
                    vals = [e[m] for e in entries if e.get(m) is not None]
                    res[m + suffix] = round(float(np.mean(vals)), 4) if vals else None
                    if se:
                        res[m + suffix + "_se"] = (round(float(np.std(vals, ddof=1) / np.sqrt(len(vals))), 4)
                                                   if len(vals) >= 2 else None)
                res["n" + suffix] = len(entries)
            out[half][method] = res
    return out


def seed_spread_by_half(per_seed: Sequence[Mapping[str, dict]], methods: Sequence[str]) -> dict:
    """Mean, sd and values over seeds of each half's metrics (``per_seed``: ``half_means`` outputs)."""
    out: dict[str, dict] = {}
    for half in per_seed[0]:
        out[half] = {}
        for method in methods:
            if method not in per_seed[0][half]:
                continue
            stats = {}
            for key, v0 in per_seed[0][half][method].items():
                if key.startswith("n") or key.endswith("_se") or v0 is None:
                    continue
                vals = [s[half][method][key] for s in per_seed if s[half][method].get(key) is not None]
                stats[key] = {"mean": round(float(np.mean(vals)), 4), "sd": round(float(np.std(vals)), 4),
                              "per_seed": vals}
            out[half][method] = stats
    return {"seeds": len(per_seed), "by_half": out}


def _cell(v) -> str:
    if v is None:
        return f"{'-':>7s}"
    return f"{v:7.3f}" if abs(v) < 10 else f"{v:7.0f}"


def format_halves(by_half: Mapping[str, dict], metrics: Sequence[str], count: str = "n") -> list[str]:
    """A text table: one line per method, ``metrics`` for each half (tune, check, all), ``count`` series."""
    halves = list(by_half)
    methods = list(by_half[halves[0]])
    width = 7 * len(metrics) + 2
    labels = [m.replace("_multi", "").replace("_mean", "") for m in metrics]
    lines = [f"{'':24s}" + "".join(f"{h + ' (n=' + str(by_half[h][methods[0]].get(count, '?')) + ')':>{width}s}"
                                   for h in halves),
             f"{'method':24s}" + "".join(("  " + "".join(f"{m[:6]:>7s}" for m in labels)) for _ in halves)]
    for method in methods:
        cells = []
        for h in halves:
            r = by_half[h].get(method, {})
            cells.append("  " + "".join(_cell(r.get(m)) for m in metrics))
        lines.append(f"{method:24s}" + "".join(cells))
    return lines

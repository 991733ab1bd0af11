"""One evaluation run: our offline detector, our streaming detector and the peers on the same series.

:func:`evaluate_series` is shared by ``ratiowatch eval tcpd`` and ``eval tssb`` (which also reads
UTSA): it replays each series through :func:`~ratiowatch.stream.detectors.offline.replay` (the
offline detector), optionally through the streaming detector (:mod:`.streaming`) and the peers
(:mod:`.peers`), and scores every answer with the benchmark's ``score(name, change_points, T)``.
A run that fails scores 0 on every metric (the benchmarks' rule) and keeps its reason under
``error``. Each row also records its protocol half (:func:`.protocol.split_halves` over *all* the
benchmark's series, so a half's membership does not depend on which series were selected).

Examples
--------
>>> import numpy as np
>>> data = {"a": np.r_[np.zeros(100), np.ones(100) * 5] + np.random.default_rng(0).normal(size=200)}
>>> out = evaluate_series(data, lambda name, cps, t: {"n": float(len(cps))}, {"a": "tune"},
...                       detect=lambda x: [100])
>>> out["a"]["n"], out["a"]["change_points"], out["a"]["half"]
(1.0, [100], 'tune')
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from pathlib import Path

import numpy as np

from ratiowatch.stream.commands.interrupts import check_interrupt, failure_reason


def _zero(score: Callable, name: str, t_len: int) -> dict:
    """The benchmark's score of a failed run: every metric 0."""
    return {k: 0.0 for k in score(name, [], t_len)}


def plot_file_name(name: str, suffix: str = ".png") -> str:
    """The file name of a series' plot: its name with every path separator made ``__``, so that a
    name such as ``grp/step`` or ``../x`` stays one file inside the plot folder.

    >>> plot_file_name("realTraffic/speed_7578"), plot_file_name("../escaped")
    ('realTraffic__speed_7578.png', '..__escaped.png')
    """
    return name.replace("/", "__").replace("\\", "__").replace("\0", "") + suffix


def evaluate_series(data: Mapping[str, np.ndarray], score: Callable[[str, list[int], int], dict],
                    halves: Mapping[str, str], *, streaming: bool = False, split_profile: bool | Mapping = False,
                    auto: bool | Mapping = False, window: Mapping | None = None,
                    peers: Sequence[str] = (),
                    detect: Callable[[np.ndarray], list[int]] | None = None,
                    plot: Callable[[str, np.ndarray, object], None] | None = None,
                    progress: Callable[[str], None] | None = None, notes: list[str] | None = None,
                    desc: str = "series", **params) -> dict[str, dict]:
    """``{name: row}`` for every series in ``data`` (see the module docstring).

    ``params`` go to ``replay`` (e.g. ``seed``); the streaming detectors get ``seed`` only (the
    daemon runs its defaults): ``streaming`` adds the ``ChangePointDetector`` under the row's
    ``"streaming"``, ``split_profile`` the ``SplitProfileDetector`` under ``"streaming_profile"``
    (True: its defaults; a mapping: its options, e.g. ``{"cycle_permutation": True}``), ``auto`` the
    ``PeriodRoutedDetector`` (the daemon's ``kind = "auto"``) under ``"streaming_auto"`` (True: its
    defaults; a mapping: its options, e.g. ``{"with_history": True}``); ``window``:
    options of the two-window detector, on its own and inside ``auto`` (e.g. ``{"level_view": True}``).
    ``detect`` replaces the offline detector (tests). ``peers`` names peers of :mod:`.peers`; unavailable ones are skipped with a line in ``notes``. A terminal
    shows a progress bar labelled ``desc``; ``progress(line)`` receives one line per series.
    """
    from ratiowatch.stream.evaluate.streaming import default_factory, profile_factory, routed_factory, streaming_result

    from ratiowatch.stream.commands.progress import track

    options = dict(split_profile) if isinstance(split_profile, Mapping) else {}
    profile_options_factory = partial(profile_factory, **options)
    window = dict(window or {})
    window_factory = partial(default_factory, **window)
    routed_options = dict(auto) if isinstance(auto, Mapping) else {}
    routed_options_factory = partial(routed_factory, **routed_options, **({"window": window} if window else {}))
    rows: dict[str, dict] = {}
    for name, x in track(data.items(), desc=desc, total=len(data), unit="series"):
        t_len = int(x.shape[0])
        t0 = time.perf_counter()
        try:
            if detect is not None:
                cps, rep = [int(c) for c in detect(x)], None
            else:
                from ratiowatch.stream.detectors.offline import replay

                rep = replay(x, **params)
                cps = rep.change_points
            res = {**score(name, cps, t_len), "change_points": cps}
        except Exception as exc:  # a failed run scores 0 (benchmark rule), but says why
            res = {**_zero(score, name, t_len), "error": failure_reason(exc)}
            rep = None
        # outside the try above: a plot that cannot be written says so, and the scores do not
        # depend on --plot
        if plot is not None and rep is not None:
            try:
                plot(name, x, rep)
            except Exception as exc:
                if notes is not None:
                    notes.append(f"plot of {name} not written: {failure_reason(exc)}")
        res["seconds"] = round(time.perf_counter() - t0, 3)
        res["half"] = halves.get(name)
        for key, factory, wanted in (("streaming", window_factory, streaming),
                                     ("streaming_profile", profile_options_factory, split_profile),
                                     ("streaming_auto", routed_options_factory, auto)):
            if not wanted:
                continue
            t0 = time.perf_counter()
            try:
                s = streaming_result(factory(int(params.get("seed", 0)))(), x)
                s.update(score(name, s["change_points"], t_len))
            except Exception as exc:
                s = {**_zero(score, name, t_len), "error": failure_reason(exc)}
            s["seconds"] = round(time.perf_counter() - t0, 3)
            res[key] = s
        rows[name] = res
        check_interrupt()  # a Ctrl-C swallowed while numba compiled stops here, not at the end
        if progress is not None:
            progress(f"{name}: {res.get('change_points', res.get('error'))}")
    if peers:
        from ratiowatch.stream.evaluate.peers import run_peers

        found, peer_notes = run_peers(data, peers, progress=progress)
        if notes is not None:
            notes.extend(peer_notes)
        for peer, per_series in found.items():
            for name, r in per_series.items():
                t_len = int(data[name].shape[0])
                if r.get("error"):
                    entry = {**_zero(score, name, t_len), **r}
                else:
                    entry = {**score(name, r["change_points"], t_len), **r}
                alarms = r.get("alarm_index")
                if alarms and r.get("change_points") and len(alarms) == len(r["change_points"]):
                    entry["delay_mean"] = round(float(np.mean(np.subtract(alarms, r["change_points"]))), 2)
                rows[name].setdefault("peers", {})[peer] = entry
    return rows


def throughput(rows: Mapping[str, dict], lengths: Mapping[str, int]) -> dict[str, float | None]:
    """Points per second of each method over the series it ran on (sum of lengths / sum of seconds).

    Cached claspy results keep the seconds of the run that produced them.

    Examples
    --------
    >>> throughput({"a": {"seconds": 1.0, "peers": {"pelt": {"seconds": 0.5}}}}, {"a": 100})
    {'ours': 100.0, 'peer:pelt': 200.0}
    """
    from ratiowatch.stream.evaluate.protocol import method_entry, methods_present

    out: dict[str, float | None] = {}
    for method in methods_present(rows):
        pts = secs = 0.0
        for name, row in rows.items():
            e = method_entry(row, method)
            if e is not None and e.get("seconds") and not e.get("error"):
                pts += lengths[name]
                secs += float(e["seconds"])
        if method.startswith("stored:"):
            continue
        out[method] = round(pts / secs, 1) if secs > 0 else None
    return out


def plotter(plot_dir: Path | None, truth: Callable[[str], list[int]], title: str):
    """A ``plot(name, x, replay)`` callback writing ``<plot_dir>/<name>.png`` (None without a folder;
    the name made a file name by :func:`plot_file_name`)."""
    if plot_dir is None:
        return None

    def plot(name, x, rep):
        from ratiowatch.stream.commands.plot import plot_detection

        plot_detection(Path(plot_dir) / plot_file_name(name), x, rep.scores, rep.thresholds, rep.change_points,
                       truth(name), title=f"{title} {name}")

    return plot

"""``ratiowatch demo``: a synthetic 3-channel stream with known changes, alarms as they happen, a plot.

The stream has four segments of 400 samples: a quiet start, a jump in the mean of channel 0, a
tripled variance of channel 1 and a correlation change between channels 0 and 2. The streaming
:class:`~ratiowatch.stream.detectors.changepoint.ChangePointDetector` reads it one sample at a time; each
alarm is printed the moment it is raised with its estimated change index and delay. The plot
(series, score, threshold, true and detected change points) goes to ``ratiowatch_demo.png``
(``--out``; its extension sets the format).

Examples
--------
>>> x, truth = make_stream(seed=0)
>>> x.shape, truth
((1600, 3), [400, 800, 1200])
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

SEG = 400


def make_stream(seed: int = 0) -> tuple[np.ndarray, list[int]]:
    """The demo stream (4 x 400 samples, 3 channels) and its true change points."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(4 * SEG, 3))
    x[SEG:, 0] += 3.0  # mean jump of channel 0
    x[2 * SEG:, 1] *= 3.0  # variance of channel 1 triples
    z = rng.normal(size=SEG)
    x[3 * SEG:, 0] = 3.0 + z  # channels 0 and 2 become strongly correlated
    x[3 * SEG:, 2] = 0.95 * z + np.sqrt(1 - 0.95**2) * rng.normal(size=SEG)
    return x, [SEG, 2 * SEG, 3 * SEG]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, default=Path("ratiowatch_demo.png"),
                        help="plot to write (the extension sets the format: .png, .svg, .pdf, ...)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the synthetic stream")
    parser.add_argument("--no-plot", action="store_true", help="skip the plot")
    parser.add_argument("--json", action="store_true", help="print the alarms as JSON at the end")


def run(args) -> int:
    if args.seed < 0:  # numpy's generators take no negative seed
        print(f"ratiowatch demo: --seed must be an integer >= 0, e.g. 0; got {args.seed}", file=sys.stderr)
        return 2
    if not args.no_plot:
        from ratiowatch.stream.commands.plot import plot_path_problem

        why = plot_path_problem(args.out)
        if why:  # before streaming: say it now, not after the whole run
            print(f"ratiowatch demo: --out {why} (or run with --no-plot)", file=sys.stderr)
            return 2
    from ratiowatch.stream.detectors.changepoint import ChangePointDetector

    x, truth = make_stream(args.seed)
    det = ChangePointDetector(n=40)
    scores, thr, alarms = np.full(len(x), np.nan), np.full(len(x), np.nan), []
    t0 = time.perf_counter()
    quiet = args.json
    if not quiet:
        print(f"streaming {len(x)} samples of 3 channels; true changes at {truth}")
    for t, row in enumerate(x):
        alarm = det.step(row)
        # in units of the threshold: with 3 channels the alarms come from the largest of the kernel
        # score's, the correlation view's and the channel view's ratios (ChangePointDetector
        # corr_view, channel_view), so plot that
        scores[t], thr[t] = det.score_one(row), 1.0
        if alarm is not None:
            alarms.append(alarm)
            if not quiet:
                print(f"[t={alarm.alarm_index:5d}] ALARM: change at {alarm.change_index} "
                      f"(delay {alarm.delay}, score {alarm.score:.3f} > threshold {alarm.threshold:.3f})",
                      flush=True)
    elapsed = time.perf_counter() - t0
    detected = [a.change_index for a in alarms]
    plotted, failure = False, None
    if not args.no_plot:
        from ratiowatch.stream.commands.plot import plot_detection

        try:
            plot_detection(args.out, x, scores, thr, detected, truth, title="ratiowatch demo",
                           columns=["mean jump", "variance", "correlated"],
                           score_label="change score / threshold (kernel, correlation and channel views)")
            plotted = True
        except OSError as exc:  # the checks before the run cannot foresee every failure of the write itself
            failure = f"ratiowatch demo: could not write the plot {args.out}: {exc.strerror or exc}"
    if quiet:
        print(json.dumps({"true": truth, "alarms": [a.to_dict() for a in alarms], "seconds": elapsed,
                          "plot": str(args.out) if plotted else None}, indent=2))
    else:
        print(f"done in {elapsed:.1f}s: detected {detected}, true {truth}")
        if plotted:
            print(f"plot written to {args.out}")
    if failure:  # after the results: the run itself succeeded
        print(failure, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":  # pragma: no cover
    p = argparse.ArgumentParser()
    add_arguments(p)
    sys.exit(run(p.parse_args()))

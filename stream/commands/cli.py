"""Command line entry point: ``ratiowatch <command> ...``.

Each command lives in its own module and registers itself through :data:`COMMANDS`;
the module is imported only when its command runs, so ``ratiowatch --help`` stays fast and
a command's heavy imports (numba kernels, sklearn baselines, kafka) cost nothing elsewhere.

A command module provides ``add_arguments(parser)`` and ``run(args) -> int`` (exit code).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

# (command path, module, help). Two-word paths ("bench estimators") become nested subcommands.
COMMANDS: list[tuple[tuple[str, ...], str, str]] = [
    (("demo",), "ratiowatch.stream.commands.demo", "synthetic multivariate stream with known changes, alarms and a plot"),
    (("detect",), "ratiowatch.stream.commands.detect", "change points of a CSV file (causal replay), optional plot"),
    (("eval", "tcpd"), "ratiowatch.stream.evaluate.tcpd", "TCPD F1 / covering by half (--streaming, --peers)"),
    (("eval", "tssb"), "ratiowatch.stream.evaluate.tssb", "TSSB / UTSA covering by half (--streaming, --peers)"),
    (("eval", "synthetic"), "ratiowatch.stream.evaluate.synthetic",
     "synthetic null suite (false changes) and change suite (detection, delay)"),
    (("eval", "nab"), "ratiowatch.stream.evaluate.nab", "NAB score of the default anomaly detector"),
    (("eval", "odds"), "ratiowatch.stream.evaluate.odds", "ODDS ROC-AUC, inlier-based protocol, vs sklearn baselines"),
    (("bench", "estimators"), "ratiowatch.stream.bench.estimators", "batch fit vs densratio, incremental step time"),
    (("bench", "cpd"), "ratiowatch.stream.bench.cpd", "streaming change-point throughput and latency"),
    (("bench", "novelty"), "ratiowatch.stream.bench.novelty", "streaming outlier scoring vs river"),
    (("bench", "wsvm"), "ratiowatch.stream.bench.wsvm", "weighted-SVM path following vs scikit-learn refits"),
    (("bench", "daemon"), "ratiowatch.stream.bench.daemon", "end-to-end daemon throughput through a real broker"),
    (("validate",), "ratiowatch.stream.commands.validate", "validate a daemon TOML config"),
    (("run",), "ratiowatch.stream.commands.run", "run the daemon with a TOML config"),
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ratiowatch",
        description="Streaming change-point and outlier detection by direct density-ratio estimation.",
    )
    top = parser.add_subparsers(dest="command", metavar="COMMAND")
    groups: dict[str, argparse._SubParsersAction] = {}
    for path, module, help_text in COMMANDS:
        if len(path) == 1:
            sub = top.add_parser(path[0], help=help_text, description=help_text)
        else:
            if path[0] not in groups:
                group_parser = top.add_parser(path[0], help=f"{path[0]} commands")
                groups[path[0]] = group_parser.add_subparsers(dest="subcommand", metavar="WHAT")
            sub = groups[path[0]].add_parser(path[1], help=help_text, description=help_text)
        sub.set_defaults(_module=module)
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name and module.startswith(exc.name):
                sub.set_defaults(_missing=str(exc))
                continue
            raise
        mod.add_arguments(sub)
    return parser


def single_threaded_blas() -> None:
    """Default BLAS/LAPACK to one thread (must run before numpy is imported).

    The engine's matrices are small (b ~ 50-200); a multi-threaded BLAS spends more time waking its
    threads than computing, and one process per core is how the daemon scales out. An explicit
    setting in the environment wins.
    """
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, "1")


def main(argv: list[str] | None = None) -> int:
    if (sys.argv[1:] if argv is None else argv)[:1] == ["run"]:
        # the daemon's stop signals are caught from the very start (the imports below take time)
        from ratiowatch.stream.commands.run import early_signal_handlers

        early_signal_handlers()
    single_threaded_blas()
    parser = build_parser()
    args = parser.parse_args(argv)
    module = getattr(args, "_module", None)
    if module is None:
        parser.print_help()
        return 2
    if getattr(args, "_missing", None):
        print(f"ratiowatch: command not available in this build ({args._missing})", file=sys.stderr)
        return 2
    return int(importlib.import_module(module).run(args) or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

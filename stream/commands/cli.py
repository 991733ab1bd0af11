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
    (("demo",), "ratiowatch.stream.commands.demo",
     "synthetic 3-channel stream with three known changes: alarms as they happen, and a plot"),
    (("detect",), "ratiowatch.stream.commands.detect",
     "change points of a CSV / TSV / JSON-lines file or stdin (offline, or --streaming: the daemon's detector replayed causally), optional plot"),
    (("eval", "tcpd"), "ratiowatch.stream.evaluate.tcpd",
     "accuracy of the default change-point detector on TCPD: F1 and covering against the human "
     "annotations, mean over the univariate series, by tune / check half (--streaming, --peers)"),
    (("eval", "tssb"), "ratiowatch.stream.evaluate.tssb",
     "accuracy of the default change-point detector on TSSB or UTSA: covering of the true segmentation, "
     "by tune / check half (--streaming, --peers)"),
    (("eval", "utsa"), "ratiowatch.stream.evaluate.utsa",
     "the same as eval tssb, on the UTSA folder (../shared/bench/utsa by default)"),
    (("eval", "synthetic"), "ratiowatch.stream.evaluate.synthetic",
     "calibration of the default change-point detector on synthetic series: false changes on "
     "change-free series (null suite), detection and delay of known changes (change suite)"),
    (("eval", "synthetic-anomaly"), "ratiowatch.stream.evaluate.anomaly_suite",
     "calibration of the default anomaly detector on synthetic series: score-threshold crossings on "
     "anomaly-free series of many kinds, and injected anomalies found"),
    (("eval", "nab"), "ratiowatch.stream.evaluate.nab",
     "accuracy of the default anomaly detector on NAB: the NAB score under each cost profile"),
    (("eval", "odds"), "ratiowatch.stream.evaluate.odds",
     "accuracy of the outlier detector on ODDS: ROC-AUC (inlier-based protocol) next to "
     "scikit-learn baselines"),
    (("eval", "compare"), "ratiowatch.stream.evaluate.compare",
     "two results of one eval command compared: change-point runs (eval tcpd|tssb|utsa --json) series by "
     "series, per half the mean difference, its standard error and the series that moved most; synthetic "
     "suites (eval synthetic|synthetic-anomaly --json) every number that changed, by kind and length; "
     "eval nab|odds --json every number that changed, by its path"),
    (("bench", "estimators"), "ratiowatch.stream.bench.estimators",
     "speed of the batch estimators against densratio, and of one incremental window step"),
    (("bench", "cpd"), "ratiowatch.stream.bench.cpd",
     "speed of the streaming change-point detector: throughput and per-sample latency"),
    (("bench", "novelty"), "ratiowatch.stream.bench.novelty",
     "speed of streaming outlier scoring against river's detectors"),
    (("bench", "wsvm"), "ratiowatch.stream.bench.wsvm",
     "speed of weighted-SVM path following against scikit-learn refits"),
    (("bench", "daemon"), "ratiowatch.stream.bench.daemon",
     "end-to-end daemon throughput and latency through a real Kafka-compatible broker"),
    (("validate",), "ratiowatch.stream.commands.validate", "validate a daemon TOML config"),
    (("run",), "ratiowatch.stream.commands.run", "run the daemon with a TOML config"),
    (("warmup",), "ratiowatch.stream.commands.warmup",
     "compile the numba kernels into the cache now (once after an install; container builds)"),
]

GROUPS = {
    "eval": "accuracy of the default detectors on benchmark data sets (read in place, never copied)",
    "bench": "speed of the detectors and estimators, against peer libraries where one exists",
}

#: commands that run numba kernels: the first compile in a process is announced on stderr
COMPILING = {"demo", "detect", "eval", "bench", "warmup"}

#: exit code when standard output cannot be written (a full disk, ``> /dev/full``): sysexits' EX_IOERR
EXIT_STDOUT_UNWRITABLE = 74
#: exit code when the reader of standard output went away (``| head``): the shell's code for SIGPIPE
EXIT_STDOUT_CLOSED = 141

EXIT_CODES = (f"exit codes: 0 done; 1 or 2 an error the message explains (ratiowatch run: also 3, stopped "
              f"without committing, and 4, cannot start); 130 interrupted (Ctrl-C); {EXIT_STDOUT_CLOSED} standard "
              f"output closed by its reader (| head); {EXIT_STDOUT_UNWRITABLE} standard output could not be "
              "written (disk full, > /dev/full)")


def _version() -> str:
    from ratiowatch import __version__

    return __version__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ratiowatch",
        description="Streaming change-point and outlier detection by direct density-ratio estimation.",
        epilog=EXIT_CODES,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    top = parser.add_subparsers(dest="command", metavar="COMMAND")
    groups: dict[str, argparse._SubParsersAction] = {}
    for path, module, help_text in COMMANDS:
        if len(path) == 1:
            sub = top.add_parser(path[0], help=help_text, description=help_text, epilog=EXIT_CODES)
        else:
            if path[0] not in groups:
                text = GROUPS.get(path[0], f"{path[0]} commands")
                group_parser = top.add_parser(path[0], help=text, description=text)
                group_parser.set_defaults(_group_parser=group_parser)
                groups[path[0]] = group_parser.add_subparsers(dest="subcommand", metavar="WHAT")
            sub = groups[path[0]].add_parser(path[1], help=help_text, description=help_text, epilog=EXIT_CODES)
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
    stdout = sys.stdout
    sys.stdout = _GuardedStdout(stdout)
    try:
        try:
            code = _main(argv)
        except SystemExit as exc:  # --help, --version: argparse exits 0 after writing them, and
            # swallows an error of that write: it is ours to report (exit 74), not to end in silence
            if exc.code in (0, None):
                sys.stdout.flush()  # buffered, the write fails here
                failed = getattr(sys.stdout, "error", None)  # unbuffered, it failed in argparse's hands
                if failed is not None:
                    raise failed from None
            raise
        sys.stdout.flush()  # what is still buffered fails here, not as an ignored error at exit
        return code
    except KeyboardInterrupt:  # Ctrl-C: a clean stop, the shell's code for SIGINT
        print("ratiowatch: interrupted", file=sys.stderr)
        return 130
    except SystemError as exc:  # a Ctrl-C inside numba's dispatcher arrives in this form
        from ratiowatch.stream.commands.interrupts import interrupted

        if not interrupted(exc):
            raise
        print("ratiowatch: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (``| head``): nothing left to say
        _discard_stdout()
        return EXIT_STDOUT_CLOSED
    except StdoutError as exc:  # a full disk, ``> /dev/full``: the output is incomplete
        _discard_stdout()
        print(f"ratiowatch: cannot write to standard output ({exc.strerror or exc}); free space on its device "
              f"or redirect it elsewhere (exit code {EXIT_STDOUT_UNWRITABLE})", file=sys.stderr)
        return EXIT_STDOUT_UNWRITABLE
    finally:
        sys.stdout = stdout


class StdoutError(OSError):
    """Standard output could not be written (other than its reader going away: ``BrokenPipeError``)."""


class _GuardedStdout:
    """``sys.stdout`` while a command runs: its write errors are told apart from any other ``OSError``
    (a file the command reads or writes), so that only they end as :class:`StdoutError`."""

    def __init__(self, stream):
        self._stream = stream
        self.error: StdoutError | None = None  # the first write error (kept: argparse swallows it)

    def _guarded(self, call, *args):
        try:
            return call(*args)
        except BrokenPipeError:
            raise
        except OSError as exc:
            err = StdoutError(exc.errno, exc.strerror)
            if self.error is None:
                self.error = err
            raise err from exc

    def write(self, text):
        return self._guarded(self._stream.write, text)

    def writelines(self, lines):
        return self._guarded(self._stream.writelines, lines)

    def flush(self):
        return self._guarded(self._stream.flush)

    def __getattr__(self, name):  # everything else is the stream's own
        return getattr(self._stream, name)


def _discard_stdout() -> None:
    """Point standard output at the null device, so that the flush at exit cannot fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # no descriptor beneath (a test's StringIO)
        pass


def _main(argv: list[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    module = getattr(args, "_module", None)
    if module is None:
        group = getattr(args, "_group_parser", None)
        (group or parser).print_help()
        return 2
    if getattr(args, "_missing", None):
        print(f"ratiowatch: command not available in this build ({args._missing})", file=sys.stderr)
        return 2
    if args.command in COMPILING:
        from ratiowatch.numba_cache import announce_compilation

        announce_compilation()
    elif args.command == "run":  # the daemon logs JSON lines: the note becomes one of them
        import logging

        from ratiowatch.numba_cache import announce_compilation

        announce_compilation(say=logging.getLogger("ratiowatch.daemon").info)
    return int(importlib.import_module(module).run(args) or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

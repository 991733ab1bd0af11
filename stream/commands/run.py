"""``ratiowatch run CONFIG``: run the daemon (source -> detectors -> sinks) until EOF or SIGTERM.

Logs are JSON lines on stderr. Exit codes:

- 0 after a clean shutdown (SIGTERM/SIGINT: in-flight batch finished, sinks acknowledged,
  checkpoints written, offsets committed), or the end of a finite source;
- 1 on a config error (every problem listed, one line each);
- 3 when the daemon had to stop without committing (a sink kept failing, a checkpoint could not
  be written, a sink did not drain within 20 s of a stop); a restart replays
  from the last commit;
- 4 when it cannot start: the Kafka broker is unreachable (after ``source.connect_timeout_s``),
  the metrics port is in use, the checkpoint directory is used by another daemon or cannot be
  created, an offsets file is damaged, a sink's file cannot be opened. One line on stderr says
  what is wrong and what to do.

SIGTERM and SIGINT handlers are installed before anything else (the CLI does it before parsing
the command line), so a stop that arrives while the daemon is still starting is a clean stop too.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys

_early: dict[str, int | None] = {"signal": None}
_EXIT_STARTUP = 4


def early_signal_handlers() -> None:
    """Remember a SIGTERM / SIGINT that arrives before the daemon exists (it is then stopped at once)."""

    def remember(signum, _frame):
        _early["signal"] = signum

    signal.signal(signal.SIGTERM, remember)
    signal.signal(signal.SIGINT, remember)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", help="TOML config file (see `ratiowatch validate --reference`)")
    parser.add_argument("--metrics-port", type=_port, default=None, metavar="PORT",
                        help="override metrics.port (0 to 65535; 0: any free port)")
    parser.add_argument("--no-metrics", action="store_true", help="do not start the metrics server")


def _port(text: str) -> int:
    """``--metrics-port``'s value: a port number, 0 to 65535 (argparse reports anything else)."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 0 to 65535; got {port}")
    return port


def run(args: argparse.Namespace) -> int:
    if _early["signal"] is None:
        early_signal_handlers()
    from ratiowatch.stream.engine.config import load_config
    from ratiowatch.stream.engine.daemon import Daemon, StartupError
    from ratiowatch.stream.engine.logs import setup_logging

    try:
        cfg = load_config(args.config)
    except ValueError as exc:
        print(f"{args.config}: {exc}", file=sys.stderr)
        return 1
    if args.metrics_port is not None:
        cfg.metrics["port"] = args.metrics_port
    if args.no_metrics:
        cfg.metrics["enabled"] = False
    setup_logging(cfg.logging["level"])
    daemon = Daemon(cfg)
    daemon.install_signal_handlers()
    log = logging.getLogger("ratiowatch.daemon")
    if _early["signal"] is not None:
        log.info("stop requested while starting", extra={"signal": _early["signal"]})
        daemon.stop()
    try:
        return daemon.run()
    except StartupError as exc:
        log.error("cannot start", extra={"error": str(exc)})
        print(f"ratiowatch run: cannot start: {exc}", file=sys.stderr)
        return _EXIT_STARTUP
    except ValueError as exc:  # e.g. the source file does not exist: a setup problem, clear message
        log.error("cannot start", extra={"error": str(exc)})
        print(f"{args.config}: {exc}", file=sys.stderr)
        return 1
    except (RuntimeError, OSError) as exc:
        log.error("stopped without committing", extra={"error": f"{type(exc).__name__}: {exc}"})
        print(f"ratiowatch run: stopped without committing: {exc}", file=sys.stderr)
        return 3

"""``ratiowatch run CONFIG``: run the daemon (source -> detectors -> sinks) until EOF or SIGTERM.

Logs are JSON lines on stderr. Exit code 0 after a clean shutdown (SIGTERM/SIGINT: in-flight
batch finished, sinks flushed, checkpoints written, offsets committed), 1 on a config error,
3 when the daemon had to stop without committing (e.g. the dead-letter sink kept failing).
"""

from __future__ import annotations

import argparse
import logging
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", help="TOML config file (see `ratiowatch validate --reference`)")
    parser.add_argument("--metrics-port", type=int, default=None, help="override metrics.port (0: any free port)")
    parser.add_argument("--no-metrics", action="store_true", help="do not start the metrics server")


def run(args: argparse.Namespace) -> int:
    from ratiowatch.stream.engine.config import load_config
    from ratiowatch.stream.engine.daemon import Daemon
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
    try:
        return daemon.run()
    except ValueError as exc:  # e.g. the source file does not exist: a setup problem, clear message
        log.error("cannot start", extra={"error": str(exc)})
        print(f"{args.config}: {exc}", file=sys.stderr)
        return 1
    except RuntimeError as exc:
        log.error("stopped without committing", extra={"error": str(exc)})
        return 3

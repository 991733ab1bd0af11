"""``ratiowatch validate CONFIG``: check a daemon TOML config without running it.

Checks the schema, then builds one detector from ``[detector]``, as ``ratiowatch run`` does at its
start, so a value the detector refuses is reported here too (``--schema-only`` skips that and the
import of the numerics). Prints ``CONFIG: ok`` (or the normalised config with ``--json``) and exits
0; on an error prints the message, which names the offending key, and exits 1. ``--reference``
prints the Markdown config reference generated from the schema instead.
"""

from __future__ import annotations

import argparse
import json
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", nargs="?", help="TOML config file")
    parser.add_argument("--json", action="store_true", help="print the validated config (defaults filled in)")
    parser.add_argument("--reference", action="store_true", help="print the Markdown config reference")
    parser.add_argument("--schema-only", action="store_true",
                        help="check the schema only; by default one detector is also built from [detector], "
                             "as `ratiowatch run` does at its start (that imports the numerics)")
    # the detector check was opt-in before it became the default; scripts that ask for it still work
    parser.add_argument("--check-detector", action="store_true", help=argparse.SUPPRESS)


def _check_kafka_option_names(cfg) -> None:
    """Refuse a name in a pass-through Kafka ``options`` table that the kafka-python client does not
    take (``ratiowatch run`` would stop on it at its start): ValueError naming each one."""
    try:
        from kafka import KafkaConsumer, KafkaProducer
    except ImportError:  # without kafka-python the daemon cannot run a kafka part anyway
        return
    tables = []
    if cfg.source.get("type") == "kafka":
        tables.append(("source.options", "KafkaConsumer", KafkaConsumer.DEFAULT_CONFIG, cfg.source))
    tables += [(f"sinks[{i}].options", "KafkaProducer", KafkaProducer.DEFAULT_CONFIG, s)
               for i, s in enumerate(cfg.sinks) if s.get("type") == "kafka"]
    if cfg.dead_letter.get("type") == "kafka":
        tables.append(("dead_letter.options", "KafkaProducer", KafkaProducer.DEFAULT_CONFIG, cfg.dead_letter))
    errors = [f"{where}.{name}: unknown {client} setting; see kafka-python's {client} for the settings it takes"
              for where, client, known, section in tables for name in (section.get("options") or {})
              if name not in known]
    if errors:
        raise ValueError("\n".join(errors))


def run(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from ratiowatch.stream.engine.config import config_reference_markdown, load_config

    if args.reference:
        print(config_reference_markdown())
        return 0
    if not args.config:
        print("ratiowatch validate: give a CONFIG file (or --reference)", file=sys.stderr)
        return 2
    try:
        cfg = load_config(args.config)
        _check_kafka_option_names(cfg)
        if not args.schema_only:
            from ratiowatch.stream.engine.pipeline import build_factory, check_detector

            check_detector(build_factory(cfg.detector["kind"], cfg.detector_kwargs(), cfg.detector["score_threshold"]),
                           cfg.detector["dim"])
    except ValueError as exc:
        print(f"{args.config}: {exc}", file=sys.stderr)
        return 1
    if args.json:
        d = asdict(cfg)
        d["base_dir"] = str(d["base_dir"])
        print(json.dumps(d, indent=2))
    else:
        print(f"{args.config}: ok")
    return 0

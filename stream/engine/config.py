"""Daemon configuration: a TOML file checked against a declarative schema.

Every option is declared once in :data:`SCHEMA` (type, default, help, allowed values, when it is
required); :func:`load_config` validates a file against it and names the offending key in every
error, and :func:`config_reference_markdown` renders the same schema as a Markdown reference.

Examples
--------
>>> cfg = parse_config({"source": {"type": "stdin"}})
>>> cfg.source["type"], cfg.detector["method"], cfg.metrics["port"]
('stdin', 'rulsif', 9108)
>>> try:
...     parse_config({"source": {"type": "file"}})
... except ValueError as e:
...     print(e)
source.path: required when source.type = 'file' (file source: CSV or JSONL file (relative paths are relative to the config file))
"""

from __future__ import annotations

import datetime
import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Opt:
    """One option: ``type`` is one of str, int, float, bool, list[str], list[int], table."""

    name: str
    type: str
    default: Any = None
    help: str = ""
    choices: tuple[Any, ...] | None = None
    required_when: tuple[str, Any] | None = None  # (sibling option, value) -> this option is required
    required: bool = False
    minimum: float | None = None
    maximum: float | None = None


_SOURCE = [
    Opt("type", "str", None, "where records come from", ("file", "kafka", "stdin"), required=True),
    Opt("path", "str", None, "file source: CSV or JSONL file (relative paths are relative to the config file)",
        required_when=("type", "file")),
    Opt("format", "str", "auto", "file/stdin format; `auto` picks from the file extension (stdin: jsonl)",
        ("auto", "jsonl", "csv")),
    Opt("follow", "bool", False, "file source: keep reading appended lines (tail -f) instead of stopping at EOF"),
    Opt("poll_interval_s", "float", 0.2, "file source in follow mode: sleep between checks for new lines",
        minimum=0.001),
    Opt("bootstrap_servers", "list[str]", None, "kafka: broker addresses host:port",
        required_when=("type", "kafka")),
    Opt("topics", "list[str]", None, "kafka: topics to consume", required_when=("type", "kafka")),
    Opt("group_id", "str", "ratiowatch", "kafka: consumer group; offsets are committed manually"),
    Opt("partitions", "list[int]", None,
        "kafka: manual assignment of these partitions of every topic (no group rebalancing); "
        "omit to subscribe through the consumer group"),
    Opt("auto_offset_reset", "str", "earliest", "kafka: where to start with no committed offset",
        ("earliest", "latest")),
    Opt("session_timeout_ms", "int", 10000, "kafka: group session timeout", minimum=1000),
    Opt("heartbeat_interval_ms", "int", 1000, "kafka: heartbeat interval", minimum=100),
    Opt("max_poll_interval_ms", "int", 60000, "kafka: max time between polls before the group evicts us",
        minimum=1000),
    Opt("check_crcs", "bool", True, "kafka: verify record CRCs (fast with the `crc32c` package, a dependency "
                                    "of ratiowatch; kafka-python's pure-Python fallback is costly at high rates)"),
    Opt("connect_timeout_s", "float", 30.0, "kafka: at start, wait this long for the broker before giving up with "
                                            "an error (exit code 4)", minimum=0.0),
    Opt("max_poll_records", "int", 2000, "records per poll batch (also the file/stdin batch size)", minimum=1),
    Opt("options", "table", {}, "kafka: extra KafkaConsumer settings passed through unchanged "
                                "(security_protocol, sasl_mechanism, ssl_cafile, ...)"),
]

_FIELDS = [
    Opt("key", "str", "key", "JSON field / CSV column holding the stream key; empty string: one key `default`"),
    Opt("timestamp", "str", "timestamp", "field holding a numeric timestamp; empty string: arrival order"),
    Opt("values", "list[str]", ["value"], "fields holding the value(s); lists are concatenated"),
    Opt("default_key", "str", "default", "key used when `fields.key` is empty"),
]

#: detector kinds of the daemon: module and class of each
DETECTOR_KINDS = {"window": ("ratiowatch.stream.detectors.changepoint", "ChangePointDetector"),
                  "split_profile": ("ratiowatch.stream.detectors.segmenter", "SplitProfileDetector"),
                  "auto": ("ratiowatch.stream.detectors.routed", "PeriodRoutedDetector"),
                  "anomaly": ("ratiowatch.stream.detectors.anomaly", "TimeSeriesAnomalyDetector")}
#: the kind a config without ``[detector] kind`` runs: the two-window detector, handed to the split
#: profile once a key's segment shows a period (docs/experiments.md, S17)
DEFAULT_KIND = "auto"
#: the alert threshold of kind = "anomaly" when [detector] sets none: a score of 0.5 is a tail
#: probability of 1e-5 under the series' own score history (TimeSeriesAnomalyDetector's mapping)
ANOMALY_THRESHOLD = 0.5
#: the two-window detector's estimators (``ChangePointDetector.METHODS``, named here without importing it)
DETECTOR_METHODS = ("rulsif", "ulsif", "kliep", "lsdd")
#: options of [detector] that only the two-window ChangePointDetector takes
_WINDOW_ONLY = ("method", "k", "n", "symmetric", "alpha", "reselect_every")

_DETECTOR = [
    Opt("kind", "str", DEFAULT_KIND, "`auto` (the default): the PeriodRoutedDetector, each key on the window "
        "detector until its current segment shows a period, then on the split profile; keys with several values "
        "stay on the window detector (the window detector's "
        "options are set in [detector] as for kind = window, or in detector.options.window; the split profile's "
        "in detector.options.profile); `window`: the two-window ChangePointDetector (fast; it does not see a "
        "change of shape or frequency inside a cycle); "
        "`split_profile`: the SplitProfileDetector, a calibrated split profile over a sliding window (about "
        "eight times slower; also finds changes of shape and frequency inside a periodic signal); `anomaly`: "
        "the TimeSeriesAnomalyDetector, which flags single rows that do not belong (one value per key)",
        tuple(DETECTOR_KINDS)),
    Opt("score_threshold", "float", None, "kind = anomaly: alert on a row whose anomaly score (in [0, 1]) "
        f"reaches this; default {ANOMALY_THRESHOLD} (a tail probability of 1e-5 under the key's own score "
        "history). On anomaly-free synthetic series 0.5 is reached 1.3 to 37 times per 10,000 rows, by kind: raise "
        "it for fewer alerts", minimum=0.0),
    Opt("method", "str", "rulsif", "divergence estimator of ChangePointDetector: RuLSIF (default), uLSIF, KLIEP "
        "or LSDD; each one's false alarms and changes found on the synthetic suites are in docs/results.md",
        DETECTOR_METHODS),
    Opt("dim", "int", None, "expected value dimension; omit to learn it from each key's first record",
        minimum=1),
    Opt("k", "int", None, "subsequence length (detector default when omitted)", minimum=1),
    Opt("n", "int", None, "window size in subsequences (detector default when omitted)", minimum=2),
    Opt("symmetric", "bool", None, "symmetrised score (detector default when omitted)"),
    Opt("alpha", "float", None, "relative-ratio mixture weight in [0, 1) (detector default when omitted)",
        minimum=0.0),
    Opt("reselect_every", "int", None, "re-run model selection every this many samples", minimum=1),
    Opt("seed", "int", 0, "seed of the detector's private RNG"),
    Opt("options", "table", {}, "further keyword arguments of the detector `kind`, passed through"),
]

_DETECTOR_DEFAULTS = {o.name: o.default for o in _DETECTOR}

_PIPELINE = [
    Opt("max_record_bytes", "int", 65536, "larger messages go to the dead-letter sink as `oversized`",
        minimum=16),
    Opt("idle_evict_s", "float", 600.0, "keys idle this long (wall clock) are checkpointed and evicted",
        minimum=0.0),
    Opt("max_keys", "int", 0, "at most this many keys in memory (0: no bound). Beyond it the least recently "
        "seen keys are checkpointed and evicted between two batches (a key whose alerts a sink has not acknowledged "
        "yet, or that the checkpoint being written holds, stays until then; while a sink holds the alerts of more "
        "keys the bound is exceeded, logged once), and come back from "
        "their checkpoint on their next record. A key holds about its checkpoint's size (deploy/README.md, "
        "sizing); a bound below the keys of one poll batch evicts and restores keys at every batch", minimum=0),
    Opt("check_timestamps", "bool", True, "send records whose timestamp goes backwards (per key) to the dead "
                                          "letter sink"),
    Opt("max_timestamp_ahead", "float", 31536000.0,
        "with check_timestamps: a record more than this far (in the timestamps' own unit; the default is a "
        "year of seconds) ahead of its key's latest accepted timestamp goes to the dead-letter sink as "
        "`timestamp_too_far_ahead` and does not move the key's clock, so one far-future timestamp cannot "
        "make the key's later records `timestamp_backwards`; 0 disables the bound", minimum=0.0),
    Opt("timestamp_jump_confirm", "int", 2,
        "a jump beyond max_timestamp_ahead, ahead or back, is real once this many records of the key in a "
        "row are beyond it, each within max_timestamp_ahead after the one before: the last of them is "
        "accepted and moves the key's clock, the earlier ones stay in the dead-letter sink (a wrong clock "
        "set by a key's first record is mended this way too)", minimum=1),
]

_CHECKPOINT = [
    Opt("store", "str", "directory",
        "where per-key checkpoints live: `directory` (files in `dir`; several processes of a group need it "
        "shared) or `kafka` (a compacted changelog topic, restored by whichever process is assigned a "
        "partition: no shared disk)", ("directory", "kafka")),
    Opt("dir", "str", "state", "checkpoint directory (store = directory; also the file source's offsets)"),
    Opt("topic", "str", None, "store = kafka: changelog topic (created if missing, with the source topic's "
                              "partition count and cleanup.policy=compact); default `<group_id>-checkpoints`"),
    Opt("max_message_bytes", "int", 1000000, "store = kafka: a checkpoint larger than this is split into "
                                            "parts (keep it below the broker's message.max.bytes)", minimum=1024),
    Opt("replication_factor", "int", -1, "store = kafka: replication factor of a created changelog; -1: the "
                                         "broker's default", minimum=-1),
    Opt("timeout_s", "float", 30.0, "store = kafka: bound on one checkpoint write's acknowledgements and on "
                                    "one partition's restore", minimum=0.1),
    Opt("every_records", "int", 100000, "checkpoint changed keys and commit offsets every this many records "
        "(a crash replays at most this many; each checkpoint rewrites every changed key's state: "
        "about 150 kB for kind = window, 0.9 MB for anomaly; see deploy/README.md)",
        minimum=1),
    Opt("every_s", "float", 30.0, "... or at least this often (seconds)", minimum=0.01),
]

_SINK = [
    Opt("type", "str", None, "alert sink", ("jsonl", "stdout", "kafka", "webhook"), required=True),
    Opt("path", "str", None, "jsonl: output file (appended); each sink, the dead-letter sink and the file source "
                             "need their own file (a character device such as /dev/null may be shared)",
        required_when=("type", "jsonl")),
    Opt("topic", "str", None, "kafka: alerts topic", required_when=("type", "kafka")),
    Opt("bootstrap_servers", "list[str]", None, "kafka: brokers; default: the source's",),
    Opt("url", "str", None, "webhook: URL receiving an HTTP POST of each alert as JSON",
        required_when=("type", "webhook")),
    Opt("timeout_s", "float", 5.0, "webhook/kafka: timeout of one delivery attempt", minimum=0.001),
    Opt("retries", "int", 3, "webhook: retries after the first attempt before dead-lettering", minimum=0),
    Opt("backoff_s", "float", 0.5, "webhook: first retry delay, doubled each retry, plus a random jitter below "
                                    "backoff_s / 2; a 429 or 503 with Retry-After waits what the server asks "
                                    "(at most 60 s)", minimum=0.0),
    Opt("headers", "table", {}, "webhook: extra HTTP headers; names are HTTP tokens, values integers or "
                                "strings of Latin-1 characters without line breaks"),
    Opt("options", "table", {}, "kafka: extra KafkaProducer settings passed through"),
    Opt("queue_size", "int", 1000, "batches of alerts waiting for this sink's delivery thread; when full, the "
                                   "daemon stops reading until there is room (nothing is dropped)", minimum=1),
    Opt("circuit_failures", "int", 5, "webhook: failed deliveries in a row that open the circuit breaker "
                                      "(alerts then go straight to the dead-letter sink)", minimum=1),
    Opt("circuit_reset_s", "float", 30.0, "webhook: with the circuit open, try one alert (a probe) this often; "
                                          "its success closes the circuit", minimum=0.0),
]

_DEAD_LETTER = [
    Opt("type", "str", "file", "where bad records go", ("file", "kafka", "stdout", "stderr")),
    Opt("path", "str", "dead_letter.jsonl", "file: JSONL output (appended)"),
    Opt("topic", "str", None, "kafka: dead-letter topic", required_when=("type", "kafka")),
    Opt("bootstrap_servers", "list[str]", None, "kafka: brokers; default: the source's"),
    Opt("options", "table", {}, "kafka: extra KafkaProducer settings passed through"),
]

_METRICS = [
    Opt("enabled", "bool", True, "serve Prometheus metrics, /healthz and /readyz"),
    Opt("host", "str", "127.0.0.1", "bind address (loopback unless you mean it)"),
    Opt("port", "int", 9108, "port, 0 to 65535; 0 picks a free one", minimum=0, maximum=65535),
    Opt("score_keys", "list[str]", [], "keys whose latest score is exported (bounded label cardinality)"),
]

_LOGGING = [
    Opt("level", "str", "INFO", "log level", ("DEBUG", "INFO", "WARNING", "ERROR")),
]

# section -> (options, is an array of tables, help)
SCHEMA: dict[str, tuple[list[Opt], bool, str]] = {
    "source": (_SOURCE, False, "Where records come from (required)."),
    "fields": (_FIELDS, False, "How a message maps to Record(key, timestamp, values)."),
    "detector": (_DETECTOR, False, "Per-key detector (`kind`), created on first sight of a key."),
    "pipeline": (_PIPELINE, False, "Validation, eviction and buffering."),
    "checkpoint": (_CHECKPOINT, False, "Per-key state files (npz + JSON, atomic) and offset commits."),
    "sinks": (_SINK, True, "Alert sinks, `[[sinks]]` (array of tables); default: one stdout sink."),
    "dead_letter": (_DEAD_LETTER, False, "Sink for records that cannot be processed, with the reason."),
    "metrics": (_METRICS, False, "Prometheus endpoint."),
    "logging": (_LOGGING, False, "Structured JSON logs on stderr."),
}


@dataclass
class Config:
    """A validated config: one dict per section (defaults filled in), ``sinks`` a list of dicts."""

    source: dict[str, Any]
    fields: dict[str, Any]
    detector: dict[str, Any]
    pipeline: dict[str, Any]
    checkpoint: dict[str, Any]
    sinks: list[dict[str, Any]]
    dead_letter: dict[str, Any]
    metrics: dict[str, Any]
    logging: dict[str, Any]
    base_dir: Path = field(default_factory=Path.cwd)

    def resolve(self, path: str) -> Path:
        """A path from the config, relative to the config file's directory."""
        p = Path(path)
        return p if p.is_absolute() else (self.base_dir / p)

    def detector_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for the detector ``kind`` (unset options left to the detector's defaults)."""
        d = self.detector
        kind = d.get("kind", DEFAULT_KIND)
        names = (*_WINDOW_ONLY, "seed") if kind == "window" else ("seed",)
        kw = {name: d[name] for name in names if d.get(name) is not None}
        kw.update(d.get("options") or {})
        # [detector] n, k, ... configure kind = "auto"'s window detector (those left at their
        # defaults are the detector's own defaults too)
        window = {name: d[name] for name in _WINDOW_ONLY
                  if d.get(name) is not None and d[name] != _DETECTOR_DEFAULTS.get(name)}
        if kind == "auto" and window:
            kw["window"] = {**window, **(kw.get("window") or {})}
        return kw


class ConfigError(ValueError):
    """Every problem of a config at once: ``errors`` lists them, one ``"where: what"`` each."""

    def __init__(self, errors: list[str]):
        super().__init__("\n".join(errors))
        self.errors = list(errors)


def _dates_in(where: str, value: Any) -> list[tuple[str, Any]]:
    """The TOML dates and times (``datetime``, ``date``, ``time``) inside a table, with where each is."""
    if isinstance(value, (datetime.date, datetime.time)):  # datetime is a date
        return [(where, value)]
    if isinstance(value, dict):
        return [hit for k, v in value.items() for hit in _dates_in(f"{where}.{k}", v)]
    if isinstance(value, list):
        return [hit for i, v in enumerate(value) for hit in _dates_in(f"{where}[{i}]", v)]
    return []


def _check_type(where: str, opt: Opt, value: Any, errors: list[str]) -> Any:
    t = opt.type
    ok: bool
    if t == "str":
        ok = isinstance(value, str)
    elif t == "bool":
        ok = isinstance(value, bool)
    elif t == "int":
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif t == "float":
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        if ok:
            value = float(value)
    elif t == "table":
        ok = isinstance(value, dict)
    elif t == "list[str]":
        if isinstance(value, str):  # a single string is a one-element list (bootstrap_servers = "h:p")
            value = [value]
        ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
    elif t == "list[int]":
        ok = isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    else:  # pragma: no cover - schema bug
        raise AssertionError(t)
    if not ok:
        errors.append(f"{where}: expected {t}, got {type(value).__name__} {value!r}")
        return opt.default
    if t == "table":
        bad = _dates_in(where, value)
        if bad:  # no client setting or detector option takes one (and `validate --json` could not print it)
            errors.extend(f"{at}: a TOML date or time is not a valid setting; got {v.isoformat()}; give a number "
                          "or a string" for at, v in bad)
            return opt.default
    if t == "float" and not math.isfinite(value):
        # TOML has nan and inf; NaN passes every comparison with a bound, and inf overflows the
        # daemon's timers (sleep, milliseconds): no option means "never" by inf
        errors.append(f"{where}: must be a finite number; got {value!r}")
        return opt.default
    if opt.choices is not None and value not in opt.choices:
        errors.append(f"{where}: must be one of {list(opt.choices)}; got {value!r}")
    elif opt.maximum is not None and isinstance(value, (int, float)) and (
            value > opt.maximum or (opt.minimum is not None and value < opt.minimum)):
        low = f"between {opt.minimum} and" if opt.minimum is not None else "<="
        errors.append(f"{where}: must be {low} {opt.maximum}; got {value!r}")
    elif opt.minimum is not None and isinstance(value, (int, float)) and value < opt.minimum:
        errors.append(f"{where}: must be >= {opt.minimum}; got {value!r}")
    return value


def _validate_table(section: str, opts: list[Opt], table: Any, errors: list[str]) -> dict[str, Any]:
    if not isinstance(table, dict):
        errors.append(f"{section}: expected a table ([{section}]), got {type(table).__name__}")
        table = {}
    known = {o.name: o for o in opts}
    for name in table:
        if name not in known:
            errors.append(f"{section}.{name}: unknown option; known options of [{section}] are {sorted(known)}")
    out: dict[str, Any] = {}
    for o in opts:
        if o.name in table:
            out[o.name] = _check_type(f"{section}.{o.name}", o, table[o.name], errors)
        else:
            out[o.name] = o.default.copy() if isinstance(o.default, (dict, list)) else o.default
    for o in opts:
        if o.required and out[o.name] is None and o.name not in table:
            hint = f"; one of {list(o.choices)}" if o.choices else ""
            errors.append(f"{section}.{o.name}: required option is missing{hint}")
        if o.required_when is not None and out[o.name] is None:
            other, value = o.required_when
            if out.get(other) == value:
                errors.append(f"{section}.{o.name}: required when {section}.{other} = {value!r} ({o.help})")
    return out


def _init_args(kind: str) -> list:
    """The ``__init__`` arguments (``ast.arg``, self left out) of the detector ``kind``, read from its source."""
    import ast
    import importlib.util

    module, cls = DETECTOR_KINDS[kind]
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:  # pragma: no cover - broken install
        return []
    tree = ast.parse(Path(spec.origin).read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for f in node.body:
                if isinstance(f, ast.FunctionDef) and f.name == "__init__":
                    a = f.args
                    return [x for x in (*a.posonlyargs, *a.args, *a.kwonlyargs) if x.arg != "self"]
    return []  # pragma: no cover


def detector_parameters(kind: str = "window") -> tuple[str, ...]:
    """Keyword arguments the detector ``kind`` accepts, read from its source (no numerics imported)."""
    return tuple(x.arg for x in _init_args(kind))


#: annotations of detector arguments that a TOML value can be checked against, as said in an error
_TYPE_WORDS = {"int": "an integer", "float": "a number", "bool": "true or false", "str": "a string"}


def detector_parameter_types(kind: str = "window") -> dict[str, tuple[str, ...]]:
    """The scalar types (``int``, ``float``, ``bool``, ``str``) each keyword argument of the detector
    ``kind`` takes, from its annotation; arguments annotated otherwise (tables, unannotated) are left out.

    >>> detector_parameter_types("auto")["with_history"], detector_parameter_types("window")["difference"]
    (('bool',), ('bool', 'str'))
    """
    import ast

    out: dict[str, tuple[str, ...]] = {}
    for x in _init_args(kind):
        if x.annotation is None:
            continue
        parts = tuple(p.strip() for p in ast.unparse(x.annotation).split("|"))
        types = tuple(p for p in parts if p != "None")  # TOML has no null: None is never given
        if types and all(t in _TYPE_WORDS for t in types):
            out[x.arg] = types
    return out


def _describe(value: Any) -> str:
    """A TOML value as an error message quotes it, with its type."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f"the string {value!r}"
    if isinstance(value, (int, float)):
        return f"the number {value!r}"
    if isinstance(value, dict):
        return f"a table {_toml(value)}"
    if isinstance(value, list):
        return f"a list {_toml(value)}"
    return f"{type(value).__name__} {value}"  # TOML dates and times


def _option_type_problem(value: Any, types: tuple[str, ...]) -> str | None:
    """Why ``value`` is not of one of ``types`` (see :func:`detector_parameter_types`), or None.

    The detectors do not check types themselves: a string where a bool is expected is simply true,
    and a string where a number is expected fails deep inside with a message that names no key.
    """
    def fits(t: str) -> bool:
        if t == "bool":
            return isinstance(value, bool)
        if isinstance(value, bool):  # a bool is an int to Python, not to a config
            return False
        return isinstance(value, {"int": int, "float": (int, float), "str": str}[t])

    if any(fits(t) for t in types):
        return None
    return f"must be {', or '.join(_TYPE_WORDS[t] for t in types)}; got {_describe(value)}"


def _check_option_types(where: str, kind: str, options: dict[str, Any], errors: list[str]) -> None:
    types = detector_parameter_types(kind)
    for name, value in options.items():
        why = _option_type_problem(value, types[name]) if name in types else None
        if why:
            errors.append(f"{where}.{name}: {why}")


def _check_distinct_paths(out: dict[str, Any], base_dir: Path, errors: list[str]) -> None:
    """source.path, every sinks[].path and dead_letter.path must name different files.

    Two sinks appending to one file interleave their lines (and each cuts the other's unacknowledged
    lines after a failed write), and a sink writing the file a source follows reads its own output
    back, without end. Paths are compared after resolving symbolic links (and by inode for files
    that exist). A character device (``/dev/null``, a terminal) may be named by several entries.
    """
    import os
    import stat

    entries: list[tuple[str, str]] = []
    src = out["source"]
    if src["type"] == "file" and isinstance(src["path"], str) and src["path"].strip():
        entries.append(("source.path", src["path"]))
    for i, s in enumerate(out["sinks"]):
        if s["type"] == "jsonl" and isinstance(s["path"], str) and s["path"]:
            entries.append((f"sinks[{i}].path", s["path"]))
    dl = out["dead_letter"]
    if dl["type"] == "file" and isinstance(dl["path"], str) and dl["path"]:
        entries.append(("dead_letter.path", dl["path"]))
    seen: dict[Any, str] = {}
    for where, raw in entries:
        p = Path(raw)
        p = p if p.is_absolute() else base_dir / p
        try:
            st = os.stat(p)
        except (OSError, ValueError):
            st = None
        if st is not None and stat.S_ISCHR(st.st_mode):
            continue  # /dev/null, a terminal: shared without harm
        try:
            ident: Any = (st.st_dev, st.st_ino) if st is not None else str(p.resolve())
        except (OSError, RuntimeError):  # a symlink loop
            ident = str(p)
        if ident in seen:
            first = seen[ident]
            why = ("a sink writing the file the source reads reads its own output back" if first == "source.path"
                   else "two sinks appending to one file interleave their lines")
            errors.append(f"{where}: {raw!r} is the same file as {first}; {why}: give each of source.path, "
                          "sinks[].path and dead_letter.path its own file")
        else:
            seen[ident] = where


def parse_config(doc: dict[str, Any], base_dir: Path | None = None) -> Config:
    """Validate a decoded TOML document; raises :class:`ConfigError` (a ``ValueError``) listing every
    problem, one line each, each naming the offending key."""
    errors: list[str] = []
    for name in doc:
        if name not in SCHEMA:
            errors.append(f"{name}: unknown section; known sections are {sorted(SCHEMA)}")
    if "source" not in doc:
        errors.append("source: required section is missing; add [source] with type = 'file', 'kafka' or 'stdin'")
    out: dict[str, Any] = {}
    for section, (opts, is_array, _) in SCHEMA.items():
        raw = doc.get(section)
        if is_array:
            if raw is None:
                raw = [{"type": "stdout"}]
            if not isinstance(raw, list):
                errors.append(f"{section}: expected an array of tables ([[{section}]])")
                raw = []
            elif not raw:  # every alert would be dropped, and its offset committed all the same
                errors.append(f"{section}: empty list; list at least one sink ([[{section}]] with a type), or omit "
                              f"{section} for the default stdout sink")
            out[section] = [_validate_table(f"{section}[{i}]", opts, t, errors) for i, t in enumerate(raw)]
        else:
            out[section] = _validate_table(section, opts, raw if raw is not None else {}, errors)
    det = out["detector"]
    if isinstance(det["alpha"], float) and not (0.0 <= det["alpha"] < 1.0):
        errors.append(f"detector.alpha: must be in [0, 1); got {det['alpha']}")
    kind = det["kind"] if det.get("kind") in DETECTOR_KINDS else DEFAULT_KIND
    raw_det = doc.get("detector") if isinstance(doc.get("detector"), dict) else {}
    if kind == "auto":  # [detector] n, k, ... configure its window detector, once
        sub = det["options"].get("window") if isinstance(det["options"], dict) else None
        for name in _WINDOW_ONLY:
            if name in raw_det and isinstance(sub, dict) and name in sub:
                errors.append(f"detector.{name}: also set in detector.options.window; set it in one place")
    elif kind != "window":
        what = ("the split_profile detector chooses its subsequence width from the data" if kind == "split_profile"
                else "the anomaly detector has its own subsequence views")
        for name in _WINDOW_ONLY:
            if name in raw_det:
                errors.append(f"detector.{name}: an option of kind = 'window'; {what} (its options go in "
                              "detector.options)")
    if isinstance(det["options"], dict):  # detector_kwargs lets options win: one of the two would be ignored
        for name in (*_WINDOW_ONLY, "seed") if kind == "window" else ("seed",):
            if name in raw_det and name in det["options"]:
                errors.append(f"detector.{name}: also set in detector.options; set it in one place")
    if kind == "anomaly":
        thr = det["score_threshold"]
        if isinstance(thr, float) and not 0.0 < thr <= 1.0:
            errors.append(f"detector.score_threshold: anomaly scores lie in [0, 1]; give a threshold in (0, 1], "
                          f"e.g. {ANOMALY_THRESHOLD}; got {thr}")
        if isinstance(det["dim"], int) and det["dim"] != 1:
            errors.append(f"detector.dim: kind = 'anomaly' scores one value per key; got dim = {det['dim']} "
                          "(run one key per series, or use kind = 'window' for several channels)")
        if isinstance(out["fields"]["values"], list) and len(out["fields"]["values"]) > 1:
            errors.append(f"fields.values: kind = 'anomaly' scores one value per key; got "
                          f"{out['fields']['values']} (one field per daemon, or kind = 'window' for several "
                          "channels)")
    elif "score_threshold" in raw_det:
        errors.append(f"detector.score_threshold: an option of kind = 'anomaly'; kind = {kind!r} takes its "
                      "sensitivity from detector.options.false_alarm_rate")
    if kind == "auto" and isinstance(det["options"], dict):
        for part, sub in (("window", "window"), ("profile", "split_profile")):
            opts = det["options"].get(part)
            if opts is None:
                continue
            if not isinstance(opts, dict):
                errors.append(f"detector.options.{part}: a table of {DETECTOR_KINDS[sub][1]} options, e.g. "
                              f"{part} = {{ seed = 1 }}; got {opts!r}")
                continue
            known = set(detector_parameters(sub)) - {"false_alarm_rate", "seed"}
            for name in opts:
                if name not in known:
                    errors.append(f"detector.options.{part}.{name}: unknown option; {DETECTOR_KINDS[sub][1]} takes "
                                  f"{sorted(known)} (false_alarm_rate and seed are set once, for both detectors)")
            _check_option_types(f"detector.options.{part}", sub, opts, errors)
    if isinstance(det["options"], dict) and det["options"]:
        params = set(detector_parameters(kind))
        # options set directly in [detector], so not listed as options
        direct = {o.name for o in _DETECTOR} - {"options", "dim", "kind"} if kind == "window" else {"seed"}
        for name in det["options"]:
            if params and name not in params:
                errors.append(f"detector.options.{name}: unknown detector option; {DETECTOR_KINDS[kind][1]} takes "
                              f"{sorted(params - direct)}")
        _check_option_types("detector.options", kind, det["options"], errors)
    flds = out["fields"]
    if not flds["values"]:
        errors.append("fields.values: needs at least one value field name")
    src = out["source"]
    if src["type"] == "file" and isinstance(src["path"], str) and not src["path"].strip():
        errors.append("source.path: empty; give the path of the CSV or JSONL file to read")
    if src["type"] == "kafka" and src["topics"] is not None and not src["topics"]:
        errors.append("source.topics: needs at least one topic")
    for i, s in enumerate(out["sinks"]):
        if s["type"] == "jsonl" and isinstance(s["path"], str) and not s["path"].strip():
            errors.append(f"sinks[{i}].path: empty; give the path of the JSONL file to append alerts to")
    for i, s in enumerate(out["sinks"]):
        if s["type"] == "kafka" and not (s["bootstrap_servers"] or src.get("bootstrap_servers")):
            errors.append(f"sinks[{i}].bootstrap_servers: required for a kafka sink when the source is not kafka")
    for i, s in enumerate(out["sinks"]):
        if s["type"] == "webhook" and isinstance(s["headers"], dict):
            from ratiowatch.connectors.sinks import header_problem

            for name, value in s["headers"].items():
                why = header_problem(name, value)
                if why:
                    errors.append(f"sinks[{i}].headers: {why}")
    dl = out["dead_letter"]
    if dl["type"] == "file" and isinstance(dl["path"], str) and not dl["path"].strip():
        errors.append("dead_letter.path: empty; give the path of the JSONL file to append bad records to")
    _check_distinct_paths(out, base_dir or Path.cwd(), errors)
    if dl["type"] == "kafka" and not (dl["bootstrap_servers"] or src.get("bootstrap_servers")):
        errors.append("dead_letter.bootstrap_servers: required for a kafka dead-letter sink when the source "
                      "is not kafka")
    ck = out["checkpoint"]
    if ck["store"] == "directory" and isinstance(ck["dir"], str) and not ck["dir"].strip():
        # "" would resolve to the config file's own directory and fill it with checkpoint files
        errors.append("checkpoint.dir: empty; give the directory to keep the per-key checkpoints in")
    if ck["store"] == "kafka":
        if src["type"] != "kafka":
            errors.append("checkpoint.store: 'kafka' keeps checkpoints next to a kafka source; with a "
                          f"{src['type']!r} source use store = 'directory'")
        elif src["topics"] and len(src["topics"]) != 1:
            errors.append("checkpoint.store: 'kafka' needs exactly one source topic (the changelog's partitions "
                          "follow its partitions)")
        if src["type"] == "kafka" and not ck["topic"] and src["topics"]:
            ck["topic"] = f"{src['group_id']}-checkpoints"
    if errors:
        raise ConfigError(errors)
    return Config(**out, base_dir=base_dir or Path.cwd())


def load_config(path: str | Path) -> Config:
    """Read and validate a TOML config file.

    Every problem is a ValueError saying what is wrong and what to do, without the file's name (as
    :class:`ConfigError`'s lines; ``ratiowatch validate`` and ``ratiowatch run`` print the name first):
    a path that is a directory or does not exist, a file that cannot be read (permissions, I/O error),
    TOML that does not parse, and every schema problem at once.
    """
    path = Path(path)
    try:
        if path.is_dir():
            raise ValueError("is a directory, not a TOML file; pass the path of a TOML config file in it")
        if not path.is_file():
            raise ValueError("does not exist; pass the path of a TOML config")
        text = path.read_text()
    except OSError as exc:
        raise ValueError(f"cannot read it ({exc.strerror or exc}); make it readable by the user that runs "
                         "ratiowatch (ls -l shows its owner and mode)") from exc
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"not valid TOML ({exc})") from None
    return parse_config(doc, base_dir=path.resolve().parent)


def _toml(v: Any) -> str:
    """A default value as it would be written in TOML."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return f'"{v}"'
    if isinstance(v, list):
        return "[" + ", ".join(_toml(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{k} = {_toml(x)}" for k, x in v.items()) + " }" if v else "{}"
    return repr(v)


def config_reference_markdown() -> str:
    """The config reference, generated from :data:`SCHEMA`."""
    lines = ["# ratiowatch daemon configuration reference", "",
             "Generated from `stream/engine/config.py` (`config_reference_markdown()`). Unknown keys are errors.", ""]
    for section, (opts, is_array, help_text) in SCHEMA.items():
        header = f"[[{section}]]" if is_array else f"[{section}]"
        lines += [f"## `{header}`", "", help_text, "", "| option | type | default | description |",
                  "|---|---|---|---|"]
        for o in opts:
            default = "required" if o.required else ("—" if o.default is None else f"`{_toml(o.default)}`")
            desc = o.help
            if o.choices:
                desc += f"; one of {', '.join(_toml(c) for c in o.choices)}"
            if o.required_when:
                desc += f" (required when `{o.required_when[0]} = {_toml(o.required_when[1])}`)"
            lines.append(f"| `{o.name}` | {o.type} | {default} | {desc} |")
        lines.append("")
    return "\n".join(lines)

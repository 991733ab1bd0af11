"""Record parsing (every bad-input reason), alert ids, and config validation naming the offending key."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ratiowatch.stream.engine.config import SCHEMA, config_reference_markdown, load_config, parse_config
from ratiowatch.connectors.records import Alert, FieldSpec, RecordError, alert_id, parse_record

SPEC = FieldSpec(key="k", timestamp="t", values=("v",))


def test_parse_record_reads_key_timestamp_and_vector_values():
    spec = FieldSpec(key="k", timestamp="t", values=("a", "b"))
    rec = parse_record(json.dumps({"k": 7, "t": "3", "a": [1, 2], "b": 3.5}), spec, ref=("p", 4))
    assert rec.key == "7" and rec.timestamp == 3.0 and rec.ref == ("p", 4)
    np.testing.assert_array_equal(rec.values, [1.0, 2.0, 3.5])


@pytest.mark.parametrize("raw,reason", [
    (b'{"k": "a", "t": 1, "v": ', "malformed_json"),
    (b'[1, 2, 3]', "malformed_json"),
    (b'{"t": 1, "v": 1}', "missing_field"),
    (b'{"k": "a", "v": 1}', "missing_field"),
    (b'{"k": "a", "t": 1}', "missing_field"),
    (b'{"k": "a", "t": 1, "v": NaN}', "non_finite"),
    (b'{"k": "a", "t": 1, "v": [1, Infinity]}', "non_finite"),
    (b'{"k": "a", "t": 1, "v": [1, null]}', "missing_field"),  # a missing value, as "v": null is
    (b'{"k": "a", "t": 1, "v": "abc"}', "not_numeric"),
    (b'{"k": "a", "t": 1, "v": 1e308}', "out_of_range"),  # an error code: it overflowed the detectors
    (b'{"k": "a", "t": 1, "v": [0.5, -1e151]}', "out_of_range"),
    (b'{"k": true, "t": 1, "v": 1}', "bad_key"),  # would have been the series "True"
    (b'{"k": {"a": 1}, "t": 1, "v": 1}', "bad_key"),
    (b'{"k": "a", "t": false, "v": 1}', "not_numeric"),
    (b'{"k": "a", "t": 1, "v": true}', "not_numeric"),
    (b'{"k": "a", "t": 1, "v": 1, "pad": "' + b"x" * 200 + b'"}', "oversized"),
])
def test_parse_record_rejects_bad_input_with_its_reason(raw, reason):
    with pytest.raises(RecordError) as err:
        parse_record(raw, SPEC, max_bytes=128)
    assert err.value.reason == reason


def test_alert_id_is_stable_and_depends_on_key_change_index_and_detector():
    base = alert_id("a", 10, "d")
    assert base == alert_id("a", 10, "d")
    assert len({base, alert_id("b", 10, "d"), alert_id("a", 11, "d"), alert_id("a", 10, "e")}) == 4
    a = Alert.from_alarm(key="a", detector="d", change_index=10, alarm_index=30, timestamp=5.0, score=2.0,
                         threshold=1.0)
    assert a.alert_id == base
    assert Alert.from_json(a.to_json()) == a
    with pytest.raises(ValueError, match="alert"):
        Alert.from_json("{}")


def test_config_defaults_and_detector_kwargs():
    cfg = parse_config({"source": {"type": "stdin"}, "detector": {"n": 30, "options": {"false_alarm_rate": 0.01}}})
    assert cfg.sinks == [dict(cfg.sinks[0])] and cfg.sinks[0]["type"] == "stdout"
    assert cfg.metrics["host"] == "127.0.0.1" and cfg.metrics["port"] == 9108
    # kind = "auto" by default: [detector] n configures its window detector
    assert cfg.detector_kwargs() == {"seed": 0, "false_alarm_rate": 0.01, "window": {"n": 30}}
    cfg = parse_config({"source": {"type": "stdin"},
                        "detector": {"kind": "window", "n": 30, "options": {"false_alarm_rate": 0.01}}})
    assert cfg.detector_kwargs() == {"method": "rulsif", "n": 30, "seed": 0, "false_alarm_rate": 0.01}


@pytest.mark.parametrize("doc,where", [
    ({}, "source"),
    ({"source": {"type": "ftp"}}, "source.type"),
    ({"source": {"type": "file"}}, "source.path"),
    ({"source": {"type": "kafka", "topics": ["t"]}}, "source.bootstrap_servers"),
    ({"source": {"type": "stdin", "pth": "x"}}, "source.pth"),
    ({"source": {"type": "stdin"}, "detector": {"n": "30"}}, "detector.n"),
    ({"source": {"type": "stdin"}, "detector": {"alpha": 1.5}}, "detector.alpha"),
    ({"source": {"type": "stdin"}, "detector": {"method": "rulsiff"}}, "detector.method"),
    ({"source": {"type": "stdin"}, "checkpoint": {"every_records": 0}}, "checkpoint.every_records"),
    ({"source": {"type": "stdin"}, "sinks": [{"type": "webhook"}]}, "sinks[0].url"),
    ({"source": {"type": "stdin"}, "sinks": [{"type": "stdout"}, {"type": "kafka", "topic": "a"}]},
     "sinks[1].bootstrap_servers"),
    ({"source": {"type": "stdin"}, "metrics": {"port": True}}, "metrics.port"),
    ({"source": {"type": "stdin"}, "sourse": {}}, "sourse"),
])
def test_config_errors_name_the_offending_key(doc, where):
    with pytest.raises(ValueError) as err:
        parse_config(doc)
    assert str(err.value).startswith(where + ":"), str(err.value)


def test_the_method_choices_are_the_detectors_methods():
    from ratiowatch.stream.detectors.changepoint import METHODS
    from ratiowatch.stream.engine.config import SCHEMA

    assert {o.name: o for o in SCHEMA["detector"][0]}["method"].choices == METHODS


def test_load_config_reports_toml_syntax_and_missing_file(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[source\ntype = 'stdin'\n")
    with pytest.raises(ValueError, match="not valid TOML"):
        load_config(bad)
    with pytest.raises(ValueError, match="does not exist"):
        load_config(tmp_path / "nope.toml")


def test_config_reference_lists_every_option():
    md = config_reference_markdown()
    for section, (opts, is_array, _) in SCHEMA.items():
        assert (f"[[{section}]]" if is_array else f"[{section}]") in md
        for o in opts:
            assert f"| `{o.name}` |" in md


def test_config_reports_every_error_at_once_each_naming_its_key():
    with pytest.raises(ValueError) as err:
        parse_config({"source": {"type": "kafka", "topics": ["t"], "pth": 1},
                      "detector": {"n": "30", "options": {"window": 3}},
                      "metrics": {"port": -1}, "sourse": {}})
    lines = str(err.value).splitlines()
    assert [x.split(":")[0] for x in lines] == ["sourse", "source.pth", "source.bootstrap_servers", "detector.n",
                                                "metrics.port", "detector.options.window"]
    assert err.value.errors == lines


def test_unknown_detector_option_is_a_config_error_and_known_ones_pass():
    with pytest.raises(ValueError, match=r"detector.options.window: unknown detector option.*false_alarm_rate"):
        parse_config({"source": {"type": "stdin"}, "detector": {"kind": "window", "options": {"window": 3}}})
    with pytest.raises(ValueError, match=r"detector.options.windw: unknown detector option.*'profile'"):
        parse_config({"source": {"type": "stdin"}, "detector": {"options": {"windw": {}}}})
    with pytest.raises(ValueError, match=r"detector.options.window: a table of ChangePointDetector options"):
        parse_config({"source": {"type": "stdin"}, "detector": {"options": {"window": 3}}})
    from ratiowatch.stream.detectors.changepoint import ChangePointDetector
    import inspect

    params = [p for p in inspect.signature(ChangePointDetector).parameters if p not in ("self", "method", "n")]
    assert params  # read from the source without importing it, the same names
    from ratiowatch.stream.engine.config import detector_parameters

    assert set(params) <= set(detector_parameters())


def test_split_profile_kind_takes_its_own_options_and_refuses_the_window_ones():
    cfg = parse_config({"source": {"type": "stdin"},
                        "detector": {"kind": "split_profile", "seed": 3, "options": {"max_window": 2000}}})
    assert cfg.detector_kwargs() == {"seed": 3, "max_window": 2000}
    with pytest.raises(ValueError) as err:
        parse_config({"source": {"type": "stdin"},
                      "detector": {"kind": "split_profile", "k": 5, "options": {"n_perm": 10}}})
    assert [x.split(":")[0] for x in str(err.value).splitlines()] == ["detector.k", "detector.options.n_perm"]
    assert "max_window" in str(err.value)
    with pytest.raises(ValueError, match="detector.kind"):
        parse_config({"source": {"type": "stdin"}, "detector": {"kind": "ruler"}})
    from ratiowatch.stream.engine.config import detector_parameters
    from ratiowatch.stream.detectors.segmenter import SplitProfileDetector
    import inspect

    assert set(inspect.signature(SplitProfileDetector).parameters) == set(detector_parameters("split_profile"))


def test_auto_is_the_default_kind_and_passes_each_detector_its_own_options():
    cfg = parse_config({"source": {"type": "stdin"}})
    assert cfg.detector["kind"] == "auto" and cfg.detector_kwargs() == {"seed": 0}
    cfg = parse_config({"source": {"type": "stdin"},
                        "detector": {"seed": 2, "n": 30, "method": "ulsif", "options": {
                            "false_alarm_rate": 1e-5, "period_level": 0.05, "window": {"k": 4},
                            "profile": {"max_window": 2000}}}})
    assert cfg.detector["kind"] == "auto"
    # [detector] n, method, ... configure the window detector, as they do for kind = "window"
    assert cfg.detector_kwargs() == {"seed": 2, "false_alarm_rate": 1e-5, "period_level": 0.05,
                                     "window": {"method": "ulsif", "n": 30, "k": 4}, "profile": {"max_window": 2000}}
    with pytest.raises(ValueError) as err:
        parse_config({"source": {"type": "stdin"},
                      "detector": {"kind": "auto", "k": 5, "options": {
                          "window": {"k": 3, "max_window": 10}, "profile": {"seed": 1, "n": 3}, "grid": 5}}})
    assert [x.split(":")[0] for x in str(err.value).splitlines()] == [
        "detector.k", "detector.options.window.max_window", "detector.options.profile.seed",
        "detector.options.profile.n", "detector.options.grid"]
    assert "set it in one place" in str(err.value) and "set once, for both detectors" in str(err.value)
    from ratiowatch.stream.detectors.routed import PeriodRoutedDetector
    from ratiowatch.stream.engine.config import detector_parameters
    import inspect

    assert set(inspect.signature(PeriodRoutedDetector).parameters) == set(detector_parameters("auto"))


@pytest.mark.parametrize("kind,name", [("window", "n"), ("window", "method"), ("window", "seed"), ("auto", "seed"),
                                       ("split_profile", "seed"), ("anomaly", "seed")])
def test_a_detector_parameter_set_directly_and_in_options_is_refused_for_every_kind(kind, name):
    """detector_kwargs lets detector.options win, so the value set directly would be ignored."""
    value = {"n": 20, "method": "ulsif", "seed": 1}[name]
    other = {"n": 30, "method": "rulsif", "seed": 2}[name]
    with pytest.raises(ValueError) as err:
        parse_config({"source": {"type": "stdin"}, "detector": {"kind": kind, name: value, "options": {name: other}}})
    assert str(err.value) == f"detector.{name}: also set in detector.options; set it in one place"
    # in one place, either one, it is taken
    for det in ({name: value}, {"options": {name: value}}):
        cfg = parse_config({"source": {"type": "stdin"}, "detector": {"kind": kind, **det}})
        assert cfg.detector_kwargs()[name] == value


def test_kafka_checkpoint_store_needs_a_kafka_source_and_names_its_topic():
    with pytest.raises(ValueError, match="checkpoint.store"):
        parse_config({"source": {"type": "stdin"}, "checkpoint": {"store": "kafka"}})
    cfg = parse_config({"source": {"type": "kafka", "bootstrap_servers": ["h:1"], "topics": ["t"], "group_id": "g"},
                        "checkpoint": {"store": "kafka"}})
    assert cfg.checkpoint["topic"] == "g-checkpoints"


def test_anomaly_kind_takes_a_score_threshold_and_the_anomaly_detectors_options():
    cfg = parse_config({"source": {"type": "stdin"},
                        "detector": {"kind": "anomaly", "score_threshold": 0.7, "seed": 2,
                                     "options": {"debounce": 50, "views": [[8, 1, "median", 1.0, 100]]}}})
    assert cfg.detector["score_threshold"] == 0.7
    assert cfg.detector_kwargs() == {"seed": 2, "debounce": 50, "views": [[8, 1, "median", 1.0, 100]]}
    assert parse_config({"source": {"type": "stdin"}, "detector": {"kind": "anomaly"}}).detector["score_threshold"] \
        is None  # the factory's default, ANOMALY_THRESHOLD
    from ratiowatch.stream.engine.config import detector_parameters
    from ratiowatch.stream.detectors.anomaly import TimeSeriesAnomalyDetector
    import inspect

    assert set(inspect.signature(TimeSeriesAnomalyDetector).parameters) == set(detector_parameters("anomaly"))


@pytest.mark.parametrize("detector,fields,where,says", [
    ({"kind": "anomaly", "score_threshold": 1.5}, None, "detector.score_threshold", "in (0, 1]"),
    ({"kind": "anomaly", "score_threshold": 0.0}, None, "detector.score_threshold", "in (0, 1]"),
    ({"kind": "anomaly", "dim": 2}, None, "detector.dim", "one value per key"),
    ({"kind": "anomaly"}, {"values": ["a", "b"]}, "fields.values", "one value per key"),
    ({"kind": "anomaly", "n": 30}, None, "detector.n", "an option of kind = 'window'"),
    ({"kind": "anomaly", "options": {"false_alarm_rate": 0.01}}, None, "detector.options.false_alarm_rate",
     "debounce"),
    ({"score_threshold": 0.5}, None, "detector.score_threshold", "an option of kind = 'anomaly'"),
    ({"kind": "split_profile", "score_threshold": 0.5}, None, "detector.score_threshold", "false_alarm_rate"),
])
def test_anomaly_kind_config_errors_name_the_key_and_say_what_to_do(detector, fields, where, says):
    doc = {"source": {"type": "stdin"}, "detector": detector, **({"fields": fields} if fields else {})}
    with pytest.raises(ValueError) as err:
        parse_config(doc)
    lines = str(err.value).splitlines()
    assert [x.split(":")[0] for x in lines] == [where]
    assert says in lines[0]


def test_a_message_that_is_not_utf8_keeps_its_original_bytes_in_the_dead_letter():
    # "raw" shows it with replacement characters, which lose the bytes the README promises
    import base64

    from ratiowatch.connectors.records import bad_record

    raw = b'{"k": "h\xffx", "t": 1, "v": 1}'
    with pytest.raises(RecordError) as err:
        parse_record(raw, SPEC)
    bad = json.loads(bad_record(raw, err.value).to_json())
    assert bad["reason"] == "not_utf8" and base64.b64decode(bad["raw_base64"]) == raw
    assert "raw_base64" not in json.loads(bad_record(b'{"k": ', RecordError("malformed_json", "x")).to_json())


@pytest.mark.parametrize("doc,where,says", [
    ({"source": {"type": "stdin"}, "sinks": []}, "sinks", "omit sinks for the default stdout sink"),
    ({"source": {"type": "stdin"}, "metrics": {"port": 70000}}, "metrics.port", "between 0 and 65535"),
    ({"source": {"type": "stdin"}, "metrics": {"port": -5}}, "metrics.port", "between 0 and 65535"),
    ({"source": {"type": "file", "path": ""}}, "source.path", "give the path"),
    ({"source": {"type": "stdin"}, "sinks": [{"type": "jsonl", "path": ""}]}, "sinks[0].path", "give the path"),
    ({"source": {"type": "stdin"}, "dead_letter": {"type": "file", "path": " "}}, "dead_letter.path",
     "give the path"),
    # "" would put the checkpoints in the config file's own directory
    ({"source": {"type": "stdin"}, "checkpoint": {"dir": ""}}, "checkpoint.dir", "give the directory"),
])
def test_configs_that_would_fail_at_run_time_fail_validation(doc, where, says):
    with pytest.raises(ValueError) as err:
        parse_config(doc)
    assert str(err.value).startswith(where + ":") and says in str(err.value), str(err.value)


def test_the_port_range_ends_are_valid():
    for port in (0, 65535):
        assert parse_config({"source": {"type": "stdin"}, "metrics": {"port": port}}).metrics["port"] == port


@pytest.mark.parametrize("section,option", [
    ("source", "poll_interval_s"), ("source", "connect_timeout_s"), ("pipeline", "idle_evict_s"),
    ("pipeline", "max_timestamp_ahead"), ("checkpoint", "every_s"), ("checkpoint", "timeout_s"),
    ("detector", "alpha"), ("detector", "score_threshold"),
])
@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")], ids=["nan", "inf", "-inf"])
def test_nan_and_infinite_numbers_are_config_errors_naming_the_option(section, option, value):
    """TOML's nan and inf passed validation: NaN passes every comparison with a bound (every_s = nan
    never checkpointed by time, idle_evict_s = nan never evicted), and inf overflowed the daemon's
    timers at run time (time.sleep, int(1000 * inf))."""
    doc = {"source": {"type": "stdin"}, "detector": {"kind": "anomaly"} if option == "score_threshold" else {}}
    doc.setdefault(section, {})[option] = value
    with pytest.raises(ValueError) as err:
        parse_config(doc)
    assert str(err.value) == f"{section}.{option}: must be a finite number; got {value!r}"


def test_nan_and_inf_in_a_toml_file_fail_validation_naming_the_option(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('[source]\ntype = "stdin"\npoll_interval_s = nan\nconnect_timeout_s = inf\n'
                    '[checkpoint]\nevery_s = -inf\n')
    with pytest.raises(ValueError) as err:
        load_config(path)
    assert str(err.value).splitlines() == ["source.poll_interval_s: must be a finite number; got nan",
                                           "source.connect_timeout_s: must be a finite number; got inf",
                                           "checkpoint.every_s: must be a finite number; got -inf"]

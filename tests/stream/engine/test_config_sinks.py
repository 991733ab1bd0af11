"""Config validation of the sinks: distinct files for the source and every sink, webhook headers
that can be sent."""

from __future__ import annotations

import pytest

from ratiowatch.stream.engine.config import load_config, parse_config


def doc(tmp_path, *, sinks, dead_letter=None, source_path="in.jsonl"):
    d = {"source": {"type": "file", "path": source_path, "follow": True},
         "fields": {"key": "host", "timestamp": "ts", "values": ["v"]},
         "sinks": sinks, "metrics": {"enabled": False}}
    if dead_letter is not None:
        d["dead_letter"] = dead_letter
    return d


def errors(d, base_dir) -> list[str]:
    with pytest.raises(ValueError) as err:
        parse_config(d, base_dir=base_dir)
    return err.value.errors


def test_two_sinks_on_one_file_are_refused_naming_both_while_dev_null_may_be_shared(tmp_path):
    paths = ["out.jsonl", "/dev/null", str(tmp_path / "out.jsonl"), "/dev/null"]
    d = doc(tmp_path, sinks=[{"type": "jsonl", "path": p} for p in paths],
            dead_letter={"type": "file", "path": "/dev/null"})
    [e] = errors(d, tmp_path)  # /dev/null, a character device, is no conflict
    assert e.startswith("sinks[2].path:") and "same file as sinks[0].path" in e


def test_a_dead_letter_file_that_is_the_source_file_is_refused(tmp_path):
    (tmp_path / "in.jsonl").write_text("")
    (tmp_path / "link.jsonl").symlink_to(tmp_path / "in.jsonl")
    d = doc(tmp_path, sinks=[{"type": "stdout"}], dead_letter={"type": "file", "path": "link.jsonl"})
    [e] = errors(d, tmp_path)
    assert e.startswith("dead_letter.path:") and "same file as source.path" in e and "own output back" in e


def test_an_alert_file_that_is_the_source_file_is_refused_in_a_toml_file(tmp_path):
    (tmp_path / "c.toml").write_text('[source]\ntype = "file"\npath = "in.jsonl"\n'
                                     '[[sinks]]\ntype = "jsonl"\npath = "./sub/../in.jsonl"\n')
    with pytest.raises(ValueError, match=r"sinks\[0\].path: .*same file as source.path"):
        load_config(tmp_path / "c.toml")


def test_the_default_dead_letter_file_clashes_with_a_sink_of_that_name(tmp_path):
    d = doc(tmp_path, sinks=[{"type": "jsonl", "path": "dead_letter.jsonl"}])
    [e] = errors(d, tmp_path)
    assert e.startswith("dead_letter.path:") and "sinks[0].path" in e


@pytest.mark.parametrize("headers,says", [
    ({"X-Flag": True}, "value of header X-Flag must be a string or an integer"),
    ({"X-Token": "abc\r\nX-Evil: 1"}, "value of header X-Token contains a line break"),
    ({"X-Name": "caf\u00e9\u2603"}, "value of header X-Name has characters beyond Latin-1"),
    ({"X Name": "a"}, "header name 'X Name' is not an HTTP token"),
])
def test_webhook_headers_that_cannot_be_sent_are_config_errors(tmp_path, headers, says):
    fine = {"Authorization": "Bearer abc", "X-Place": "caf\u00e9", "X-Count": 1}
    d = doc(tmp_path, sinks=[{"type": "webhook", "url": "http://127.0.0.1:9/hook", "headers": {**fine, **headers}}])
    [e] = errors(d, tmp_path)  # the Latin-1 and ASCII ones are fine
    assert e.startswith("sinks[0].headers: ") and says in e


"""A TOML date or time inside a table option (pass-through ``options``, ``detector.options``,
``headers``) is refused when the config is loaded, naming where it is: no client setting or detector
option takes one, and ``validate --json`` printed a traceback on it (not JSON serialisable)."""

from __future__ import annotations

import json

import pytest

from ratiowatch.stream.commands.cli import main
from ratiowatch.stream.engine.config import load_config

KAFKA = '[source]\ntype = "kafka"\nbootstrap_servers = ["127.0.0.1:9"]\ntopics = ["t"]\n'


@pytest.mark.parametrize("toml, where, shown", [
    (KAFKA + "options = { request_timeout_ms = 1979-05-27T07:32:00Z }\n",
     "source.options.request_timeout_ms", "1979-05-27T07:32:00+00:00"),
    (KAFKA + '[[sinks]]\ntype = "kafka"\ntopic = "a"\noptions = { linger_ms = 1979-05-27 }\n',
     "sinks[0].options.linger_ms", "1979-05-27"),
    ('[source]\ntype = "stdin"\n[detector]\nkind = "auto"\noptions = { window = { alpha = 07:32:00 } }\n',
     "detector.options.window.alpha", "07:32:00"),
    (KAFKA + "options = { ssl_ciphers = [1979-05-27T07:32:00] }\n",
     "source.options.ssl_ciphers[0]", "1979-05-27T07:32:00"),
])
def test_a_toml_date_or_time_in_a_table_option_is_refused_where_it_is(tmp_path, toml, where, shown):
    cfg = tmp_path / "c.toml"
    cfg.write_text(toml + "[metrics]\nenabled = false\n")
    with pytest.raises(ValueError) as info:
        load_config(cfg)
    assert f"{where}: a TOML date or time is not a valid setting; got {shown}; give a number or a string" \
        in str(info.value).splitlines()


def test_validate_json_reports_a_date_in_options_in_one_line_with_exit_code_1(tmp_path, capsys):
    cfg = tmp_path / "c.toml"
    cfg.write_text(KAFKA + "options = { request_timeout_ms = 1979-05-27T07:32:00Z }\n[metrics]\nenabled = false\n")
    assert main(["validate", "--json", "--schema-only", str(cfg)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.strip().splitlines() == [
        f"{cfg}: source.options.request_timeout_ms: a TOML date or time is not a valid setting; got "
        "1979-05-27T07:32:00+00:00; give a number or a string"]


def test_validate_json_prints_options_tables_of_numbers_and_strings(tmp_path, capsys):
    cfg = tmp_path / "c.toml"
    cfg.write_text(KAFKA + 'options = { request_timeout_ms = 40000, client_id = "rw" }\n[metrics]\nenabled = false\n')
    assert main(["validate", "--json", "--schema-only", str(cfg)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["source"]["options"] == {"request_timeout_ms": 40000, "client_id": "rw"}

"""``ratiowatch validate`` and ``ratiowatch run`` on a config file they cannot use: a directory, a
missing file, a file the user may not read, TOML that does not parse. Each is exit 1 and one line
on stderr that names the file once and says what to do; no traceback."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest
from cli_util import CLI, cache_env

COMMANDS = [["validate"], ["run", "--no-metrics"]]
IDS = ["validate", "run"]


def _config_error(command, path, prefix=()):
    r = subprocess.run([*prefix, *CLI, *command, str(path)], capture_output=True, text=True, env=cache_env(),
                       timeout=300)
    assert r.returncode == 1, (r.returncode, r.stderr[-2000:])
    assert r.stdout == "" and "Traceback" not in r.stderr, r.stderr
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1, r.stderr
    return lines[0]


def _as_a_user_the_file_does_not_admit() -> list[str]:
    """A command prefix under which a file of mode 000 cannot be read: none for a user other than root;
    for root, setpriv dropping the capabilities that let root read any file."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    prefix = [setpriv, "--inh-caps=-dac_override,-dac_read_search",
              "--bounding-set=-dac_override,-dac_read_search"] if setpriv else []
    if not prefix or subprocess.run([*prefix, "true"], capture_output=True).returncode != 0:
        pytest.skip("running as root, which reads a file of mode 000, and setpriv cannot drop that here")
    return prefix


@pytest.mark.parametrize("command", COMMANDS, ids=IDS)
def test_a_directory_is_not_a_toml_file(tmp_path, command):
    line = _config_error(command, tmp_path)
    assert line == (f"{tmp_path}: is a directory, not a TOML file; pass the path of a TOML config file in it")


@pytest.mark.parametrize("command", COMMANDS, ids=IDS)
def test_a_missing_file_does_not_exist(tmp_path, command):
    missing = tmp_path / "nope.toml"
    assert _config_error(command, missing) == f"{missing}: does not exist; pass the path of a TOML config"


@pytest.mark.parametrize("command", COMMANDS, ids=IDS)
def test_a_file_the_user_may_not_read_says_so_and_what_to_do(tmp_path, command):
    cfg = tmp_path / "ratiowatch.toml"
    cfg.write_text('[source]\ntype = "stdin"\n')
    cfg.chmod(0)
    try:
        line = _config_error(command, cfg, _as_a_user_the_file_does_not_admit())
    finally:
        cfg.chmod(0o644)
    assert line == (f"{cfg}: cannot read it (Permission denied); make it readable by the user that runs "
                    "ratiowatch (ls -l shows its owner and mode)")


@pytest.mark.parametrize("command", COMMANDS, ids=IDS)
def test_a_toml_syntax_error_names_the_file_once(tmp_path, command):
    cfg = tmp_path / "bad.toml"
    cfg.write_text("[source]\ntype = \n")
    line = _config_error(command, cfg)
    assert line.startswith(f"{cfg}: not valid TOML (") and line.count(cfg.name) == 1, line

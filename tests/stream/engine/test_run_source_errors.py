"""`ratiowatch run` with a source it cannot read: one clear line and an exit code (4 when the start
cannot read the source at all, 3 when reading it fails part way), not an idle daemon or exit 0."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_util import cache_env as env, last_line

CLI = [sys.executable, "-m", "ratiowatch.stream.commands.cli", "run"]


def stdin_config(tmp_path: Path) -> Path:
    cfg = tmp_path / "s.toml"
    cfg.write_text(f'[source]\ntype = "stdin"\n\n[checkpoint]\ndir = "{tmp_path / "state"}"\n\n'
                   '[metrics]\nenabled = false\n')
    return cfg


def test_a_closed_stdin_stops_the_start_with_one_line_and_exit_code_4(tmp_path):
    r = subprocess.run(CLI + [str(stdin_config(tmp_path))], cwd=tmp_path, env=env(), capture_output=True,
                       text=True, timeout=120, stdin=subprocess.DEVNULL, preexec_fn=lambda: os.close(0))
    assert r.returncode == 4, r.stderr[-2000:]
    assert "Traceback" not in r.stderr
    assert last_line(r.stderr).startswith("ratiowatch run: cannot start: stdin is closed")


def test_a_stdin_whose_reads_fail_ends_the_run_with_exit_code_3_not_as_the_end_of_the_input(tmp_path):
    write_only = os.open(tmp_path / "wo.txt", os.O_WRONLY | os.O_CREAT)
    try:
        r = subprocess.run(CLI + [str(stdin_config(tmp_path))], cwd=tmp_path, env=env(), capture_output=True,
                           text=True, timeout=120, stdin=write_only)
    finally:
        os.close(write_only)
    assert r.returncode == 3, r.stderr[-2000:]
    assert "Traceback" not in r.stderr
    assert "reading stdin failed" in last_line(r.stderr) and "Bad file descriptor" in last_line(r.stderr)


def file_config(tmp_path: Path) -> Path:
    data = tmp_path / "in.jsonl"
    data.write_text(json.dumps({"key": "a", "timestamp": 0, "value": 1.0}) + "\n")
    cfg = tmp_path / "f.toml"
    cfg.write_text(f'[source]\ntype = "file"\npath = "{data}"\n\n[checkpoint]\ndir = "{tmp_path / "state"}"\n\n'
                   '[metrics]\nenabled = false\n')
    return cfg


def test_a_damaged_file_identity_side_file_stops_the_start_naming_it_with_exit_code_4(tmp_path):
    ident = tmp_path / "state" / "file-identity-in.jsonl.json"
    ident.parent.mkdir()
    ident.write_text('{"dev": 1, "ino": 2, "base": null, "head_len": 0, "head_digest": 0}')
    r = subprocess.run(CLI + [str(file_config(tmp_path))], cwd=tmp_path, env=env(), capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 4, r.stderr[-2000:]
    assert "Traceback" not in r.stderr
    assert last_line(r.stderr).startswith(f"ratiowatch run: cannot start: {ident}: the source's file-identity side "
                                          "file has base = null")


def test_a_source_file_the_daemon_cannot_read_stops_the_start_as_a_start_up_error(tmp_path, monkeypatch):
    import builtins

    import ratiowatch.connectors.sources as sources
    from ratiowatch.stream.engine.config import load_config
    from ratiowatch.stream.engine.daemon import Daemon, StartupError

    cfg = load_config(file_config(tmp_path))
    data = str(tmp_path / "in.jsonl")

    def fake_open(file, *args, **kwargs):  # root reads any file whatever its mode
        if str(file) == data:
            raise PermissionError(13, "Permission denied")
        return builtins.open(file, *args, **kwargs)

    monkeypatch.setattr(sources, "open", fake_open, raising=False)
    with pytest.raises(StartupError, match=r"cannot be read \(Permission denied\)"):  # `ratiowatch run`: exit 4
        Daemon(cfg).run()

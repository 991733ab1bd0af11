"""Operational errors of the command line, run as subprocesses: one line, the right exit code.

Benchmark folders that are missing or wrong, ``--version``, a command group without its
subcommand, Ctrl-C, a missing matplotlib, and progress bars only on a terminal.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import tomllib

import numpy as np
import pytest

from cli_util import CLI, ROOT, cli, jump_rows, one_line_error, write


# ------------------------------------------------------------------ eval: folder errors
@pytest.mark.parametrize("bench", ["tcpd", "tssb", "utsa", "nab", "odds"])
def test_eval_names_the_folder_it_was_given(tmp_path, bench):
    one_line_error(cli("eval", bench, "/nonexistent"), 2, "/nonexistent does not exist")
    proc = cli("eval", bench, tmp_path)  # a folder, but not laid out like the benchmark
    one_line_error(proc, 2, str(tmp_path))


def test_eval_tcpd_in_a_folder_that_is_not_tcpd(tmp_path):
    one_line_error(cli("eval", "tcpd", "."), 2, "is not a TCPD folder")


# ------------------------------------------------------------------ version, help
def test_version():
    import ratiowatch

    proc = cli("--version")
    assert proc.returncode == 0 and proc.stdout.strip() == f"ratiowatch {ratiowatch.__version__}"


@pytest.mark.parametrize("group, words", [("eval", ["accuracy", "tcpd", "F1", "ROC-AUC"]),
                                          ("bench", ["speed", "estimators", "throughput"])])
def test_a_group_alone_prints_its_own_help(group, words):
    proc = cli(group)
    assert proc.returncode == 2
    assert proc.stdout.startswith(f"usage: ratiowatch {group}")
    for w in words:
        assert w in proc.stdout


# ------------------------------------------------------------------ Ctrl-C
def _interrupt_after(args, wait_for: str | None, seconds: float, tmp_path):
    # a shell's background job starts with SIGINT ignored, and so would the command: restore it
    proc = subprocess.Popen([*CLI, *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        if wait_for is not None:  # a line the command prints once it is under way
            seen = ""
            while wait_for not in seen:
                line = proc.stderr.readline()
                assert line, f"no {wait_for!r} before the end: {seen}"
                seen += line
        time.sleep(seconds)
        assert proc.poll() is None, "finished before the interrupt"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, out, err


def test_ctrl_c_during_detect_stops_cleanly(tmp_path):
    # long enough that the detection is still running when the interrupt comes (one change-free
    # test of 100,000 samples takes about a second)
    p = write(tmp_path / "long.csv", jump_rows(t=600000, at=300000))
    code, _out, err = _interrupt_after(["detect", p], "read as the time axis", 2.0, tmp_path)
    assert code == 130 and "ratiowatch: interrupted" in err and "Traceback" not in err, err


def test_ctrl_c_during_eval_stops_cleanly(tmp_path):
    root = tmp_path / "tcpd"
    (root / "datasets").mkdir(parents=True)
    rng = np.random.default_rng(0)
    # series with many level shifts: each shift costs the stop test its full set of surrogates, so
    # the run is still going when the interrupt comes (a change-free series is accepted at once)
    steps = np.repeat(np.arange(10) % 2 * 3.0, 10000)
    for i in range(12):
        (root / "datasets" / f"s{i}.json").write_text(json.dumps(
            {"name": f"s{i}", "series": [{"raw": (steps + rng.normal(size=steps.size)).round(3).tolist()}]}))
    (root / "annotations.json").write_text(json.dumps({f"s{i}": {"1": [10]} for i in range(12)}))
    code, _out, err = _interrupt_after(["eval", "tcpd", root], None, 4.0, tmp_path)
    assert code == 130 and "ratiowatch: interrupted" in err and "Traceback" not in err, err


# ------------------------------------------------------------------ matplotlib
def test_matplotlib_is_a_regular_dependency():
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert any(d.startswith("matplotlib") for d in deps)


def _without_matplotlib(*args):
    code = ("import sys; sys.modules['matplotlib'] = None; "  # makes `import matplotlib` fail
            "from ratiowatch.stream.commands.cli import main; sys.exit(main(sys.argv[1:]))")
    return subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True,
                          timeout=600)


def test_without_matplotlib_the_plot_says_how_to_install_it(tmp_path):
    p = write(tmp_path / "x.csv", jump_rows())
    one_line_error(_without_matplotlib("demo", "--out", tmp_path / "d.png"), 2, "pip install matplotlib",
                   "--no-plot")
    one_line_error(_without_matplotlib("detect", p, "--plot", tmp_path / "d.png"), 2, "pip install matplotlib")


# ------------------------------------------------------------------ progress
def test_progress_only_on_a_terminal(tmp_path):
    import fcntl
    import pty
    import struct
    import termios

    root = tmp_path / "tcpd"
    (root / "datasets").mkdir(parents=True)
    rng = np.random.default_rng(0)
    for i in range(2):
        (root / "datasets" / f"s{i}.json").write_text(json.dumps(
            {"name": f"s{i}", "series": [{"raw": rng.normal(size=60).round(3).tolist()}]}))
    (root / "annotations.json").write_text(json.dumps({f"s{i}": {"1": [10]} for i in range(2)}))
    piped = cli("eval", "tcpd", root)
    assert piped.returncode == 0 and "\r" not in piped.stderr and "tcpd:" not in piped.stderr
    main_fd, child_fd = pty.openpty()
    # a terminal of 80 x 24 (a fresh pty has 0 x 0, on which tqdm draws nothing)
    fcntl.ioctl(child_fd, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    proc = subprocess.Popen([*CLI, "eval", "tcpd", str(root)], stdout=subprocess.PIPE, stderr=child_fd)
    os.close(child_fd)
    chunks = []
    while True:
        try:
            data = os.read(main_fd, 4096)
        except OSError:  # the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=600)
    os.close(main_fd)
    tty_err = b"".join(chunks).decode(errors="replace")
    assert proc.returncode == 0
    assert "tcpd:" in tty_err and "0/2 " in tty_err, tty_err


def test_a_reader_that_goes_away_ends_quietly(tmp_path):
    p = write(tmp_path / "x.csv", jump_rows())
    proc = subprocess.Popen([*CLI, "detect", str(p), "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    proc.stdout.close()  # as `| head -0` would: every write to stdout now fails
    err = proc.stderr.read()
    proc.wait(timeout=600)
    assert proc.returncode == 141, (proc.returncode, err)
    assert "Traceback" not in err and "BrokenPipe" not in err, err


@pytest.mark.parametrize("args", [["detect", "{csv}"], ["detect", "{csv}", "--json"], ["validate", "{toml}"],
                                  ["--help"], ["--version"], ["detect", "--help"]])
def test_an_unwritable_standard_output_is_one_line_and_its_own_exit_code(tmp_path, args):
    from ratiowatch.stream.commands.cli import EXIT_STDOUT_UNWRITABLE

    p = write(tmp_path / "x.csv", jump_rows())
    cfg = tmp_path / "c.toml"
    cfg.write_text('[source]\ntype = "stdin"\n')
    argv = [a.format(csv=p, toml=cfg) for a in args]
    for buffered in ("1", ""):  # unbuffered, each print fails; buffered, the flush at the end does
        with open("/dev/full", "w") as full:
            proc = subprocess.run([*CLI, *argv], stdout=full, stderr=subprocess.PIPE, text=True, timeout=600,
                                  env={**os.environ, "PYTHONUNBUFFERED": buffered})
        assert proc.returncode == EXIT_STDOUT_UNWRITABLE, proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert "Traceback" not in proc.stderr and lines[-1].startswith("ratiowatch: cannot write to standard output")


def test_the_help_lists_the_exit_codes():
    from ratiowatch.stream.commands.cli import EXIT_STDOUT_UNWRITABLE

    for argv in (["--help"], ["detect", "--help"]):
        out = " ".join(subprocess.run([*CLI, *argv], capture_output=True, text=True, timeout=600).stdout.split())
        assert "exit codes" in out and f"{EXIT_STDOUT_UNWRITABLE} standard output could not be written" in out

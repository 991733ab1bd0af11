"""Plot helper (valid PNG of the requested size), demo and detect commands."""

import json
import struct
from pathlib import Path

import numpy as np
import pytest

from ratiowatch.stream.commands.cli import main

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def png_size(path):
    data = open(path, "rb").read(32)
    assert data[:8] == PNG_SIGNATURE, "not a PNG file"
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_plot_detection_writes_png_of_expected_size(tmp_path):
    pytest.importorskip("matplotlib")
    from ratiowatch.stream.commands.plot import plot_detection

    x = np.r_[np.zeros(50), np.ones(50)]
    out = plot_detection(tmp_path / "p.png", x, np.linspace(0, 1, 100), np.full(100, 0.5), [50], [48],
                         width=8.0, height=4.0, dpi=50)
    assert png_size(out) == (400, 200)


def estimates(alarm, change):
    """Whether ``alarm`` places its change within 40 samples of ``change`` and was raised after it."""
    return abs(alarm["change_index"] - change) <= 40 and alarm["alarm_index"] >= change


def test_demo_runs_and_writes_plot(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    out = tmp_path / "demo.png"
    assert main(["demo", "--out", str(out), "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["true"] == [400, 800, 1200]
    assert res["alarms"], res
    assert all({"change_index", "alarm_index", "delay", "score", "threshold"} <= set(a) for a in res["alarms"])
    # every alarm estimates a true change within a window, and is raised after it happened
    for a in res["alarms"]:
        assert any(estimates(a, c) for c in res["true"]), (a, res)
    w, h = png_size(out)
    assert w > 100 and h > 100


def test_demo_stream_changes_are_found_across_seeds(capsys):
    # the demo's detector on ten of its streams: nothing but the three changes is ever reported;
    # the 3-sd mean jump (at 400, windows of 17 subsequences) and the correlation change are found
    # on nearly every stream, the tripled variance of one channel of three on fewer
    # (measured: 9, 4 and 10 of 10; docs/experiments.md)
    found = [0, 0, 0]
    for seed in range(10):
        assert main(["demo", "--no-plot", "--json", "--seed", str(seed)]) == 0
        res = json.loads(capsys.readouterr().out)
        for a in res["alarms"]:
            assert any(estimates(a, c) for c in res["true"]), (seed, a)
        for i, c in enumerate(res["true"]):
            found[i] += any(estimates(a, c) for a in res["alarms"])
    assert found[0] >= 8 and found[2] >= 8 and found[1] >= 3, found


def _write_csv(path, values, extra_text=True):
    with open(path, "w") as fh:
        fh.write("time,value,label\n")
        for i, v in enumerate(values):
            fh.write(f"{i},{'' if np.isnan(v) else v},{'x' if extra_text else i}\n")


def test_detect_command_on_csv(tmp_path, capsys):
    rng = np.random.default_rng(0)
    y = np.r_[rng.normal(0, 1, 300), rng.normal(4, 1, 300)]
    y[[10, 400]] = np.nan
    path = tmp_path / "s.csv"
    _write_csv(path, y)
    assert main(["detect", str(path), "--column", "value", "--json", "--plot", str(tmp_path / "d.png")]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["columns"] == ["value"] and res["n_samples"] == 600
    assert any(abs(c - 300) <= 5 for c in res["change_points"])
    png_size(tmp_path / "d.png")


def test_detect_default_uses_numeric_columns_and_reports_errors(tmp_path, capsys):
    path = tmp_path / "s.csv"
    _write_csv(path, np.arange(40.0))
    assert main(["detect", str(path), "--json"]) == 0
    captured = capsys.readouterr()
    # "label" is text; "time" is a time axis, left out by default and said so
    assert json.loads(captured.out)["columns"] == ["value"]
    assert "'time' read as the time axis" in captured.err and "--time-column" in captured.err
    assert main(["detect", str(path), "--column", "time", "--column", "value", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["columns"] == ["time", "value"]
    assert main(["detect", str(path), "--column", "label"]) == 2
    assert "not numeric" in capsys.readouterr().err
    assert main(["detect", str(tmp_path / "missing.csv")]) == 2


def test_detect_false_alarm_rate_sets_the_sensitivity(tmp_path, capsys):
    rng = np.random.default_rng(0)
    y = np.r_[rng.normal(0, 1, 300), rng.normal(4, 1, 300)]
    path = tmp_path / "s.csv"
    _write_csv(path, y)
    assert main(["detect", str(path), "--column", "value", "--json", "--false-alarm-rate", "1e-3"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["config"]["false_alarm_rate"] == 1e-3
    assert any(abs(c - 300) <= 5 for c in res["change_points"])
    assert main(["detect", str(path), "--false-alarm-rate", "2"]) == 2
    assert "--false-alarm-rate must be in (0, 1)" in capsys.readouterr().err


# ------------------------------------------------------------------ errors of demo and of writing plots
def one_line(err):
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


def test_a_negative_seed_is_refused_with_a_one_line_error(capsys):
    assert main(["demo", "--seed", "-1", "--no-plot"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "--seed must be an integer >= 0" in one_line(captured.err)


@pytest.mark.parametrize("where", ["missing directory", "a directory", "unknown extension", "/proc"])
def test_demo_refuses_a_plot_path_it_cannot_write_before_streaming(tmp_path, capsys, where):
    pytest.importorskip("matplotlib")
    if where == "/proc" and not Path("/proc").is_dir():
        pytest.skip("no /proc on this system")
    out = {"missing directory": tmp_path / "nope" / "d.png", "a directory": tmp_path / "d.png",
           "unknown extension": tmp_path / "d.xyz", "/proc": Path("/proc/d.png")}[where]
    if where == "a directory":
        out.mkdir()
    assert main(["demo", "--out", str(out)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""  # nothing streamed
    line = one_line(captured.err)
    assert line.startswith(f"ratiowatch demo: --out {out}") and "--no-plot" in line


def test_demo_prints_its_results_then_reports_a_plot_it_could_not_write(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    # passes the checks made before streaming (known format, writable folder), fails at writing:
    # the name is a link into a folder that does not exist
    out = tmp_path / "out.png"
    out.symlink_to("/nonexistent/dir/out.png")
    assert main(["demo", "--out", str(out), "--json"]) == 1
    captured = capsys.readouterr()
    res = json.loads(captured.out)
    assert res["alarms"] and res["plot"] is None
    assert f"could not write the plot {out}: No such file or directory" in one_line(captured.err)


@pytest.fixture
def no_latex(tmp_path, monkeypatch):
    """A PATH on which no LaTeX is found, whatever this machine has installed."""
    pytest.importorskip("matplotlib")
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))


def test_a_pgf_plot_without_latex_is_refused_before_computing(tmp_path, capsys, no_latex):
    path = tmp_path / "s.csv"
    _write_csv(path, np.arange(40.0))
    for command in (["demo", "--out"], ["detect", str(path), "--plot"]):
        assert main([*command, str(tmp_path / "p.pgf")]) == 2
        captured = capsys.readouterr()
        assert captured.out == ""
        assert "p.pgf: the .pgf format needs LaTeX" in one_line(captured.err)
        assert not (tmp_path / "p.pgf").exists()


def test_a_backend_failure_at_save_time_is_an_oserror_that_names_the_cause(tmp_path, no_latex):
    from ratiowatch.stream.commands.plot import PlotWriteError, plot_detection

    out = tmp_path / "p.pgf"
    with pytest.raises(PlotWriteError, match="the .pgf format needs LaTeX") as info:
        plot_detection(out, np.zeros(10), np.zeros(10), np.ones(10), [])
    assert isinstance(info.value, OSError)  # callers that handle a failed write handle this too
    assert not out.exists()  # no empty file left behind


def test_detect_prints_its_results_then_reports_a_backend_failure_of_its_plot(tmp_path, capsys, monkeypatch):
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure

    def broken_backend(self, *args, **kwargs):
        raise RuntimeError("the backend broke")

    monkeypatch.setattr(Figure, "savefig", broken_backend)
    path = tmp_path / "s.csv"
    _write_csv(path, np.random.default_rng(0).normal(size=200), extra_text=False)
    out = tmp_path / "d.png"
    assert main(["detect", str(path), "--column", "value", "--json", "--plot", str(out)]) == 1
    captured = capsys.readouterr()
    assert json.loads(captured.out)["columns"] == ["value"]
    assert "Traceback" not in captured.err  # detect's notes on the columns it read come first
    last = captured.err.strip().splitlines()[-1]
    assert last == f"ratiowatch detect: could not write the plot {out}: the backend broke"


def _plot(path):
    from ratiowatch.stream.commands.plot import plot_detection

    x = np.r_[np.zeros(50), np.ones(50)]
    return plot_detection(path, x, np.linspace(0, 1, 100), np.full(100, 0.5), [50], [48], dpi=50)


@pytest.mark.parametrize("failure", [KeyboardInterrupt(), OSError(28, "No space left on device")],
                         ids=["ctrl-c", "disk-full"])
def test_a_failed_plot_write_leaves_an_existing_plot_as_it_was_and_no_file_behind(tmp_path, monkeypatch, failure):
    pytest.importorskip("matplotlib")
    import matplotlib.figure

    existing = tmp_path / "plot.svg"
    _plot(existing)
    before = existing.read_bytes()

    def savefig(self, fname, **kwargs):  # the backend truncates its file, draws part of it, and stops
        with open(fname, "wb") as fh:
            fh.write(b"<svg")
        raise failure

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", savefig)
    with pytest.raises(type(failure)):
        _plot(existing)
    assert existing.read_bytes() == before
    with pytest.raises(type(failure)):
        _plot(tmp_path / "new.svg")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plot.svg"]


def test_a_plot_written_over_another_keeps_its_permissions_and_its_name_inside(tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "p.eps"
    _plot(out)
    out.chmod(0o640)
    _plot(out)
    assert out.stat().st_mode & 0o777 == 0o640
    assert b"%%Title: p.eps" in out.read_bytes()  # PostScript names the file it was written to
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.eps"]

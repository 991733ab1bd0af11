"""``ratiowatch detect`` run as a subprocess: it never answers wrongly in silence.

Everyday files (a typo in one cell, a ``time_ms`` column, no header, a blank line, semicolons, tabs,
JSON lines, stdin), plot formats and paths, too short a series, and what the alarm score means.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from cli_util import cli, jump_rows, near, one_line_error, write
from series_util import step_after_a_gross_value


# ------------------------------------------------------------------ detect: no silent wrong answers
def test_bad_cell_stops_with_file_line_and_column(tmp_path):
    rows = jump_rows()
    rows[299] = (299, rows[299][1], "abc")
    p = write(tmp_path / "typo.csv", rows)
    one_line_error(cli("detect", p), 2, "typo.csv line 301, column 'mem': 'abc' is not a number")


def test_bad_cells_as_missing_still_find_the_change(tmp_path):
    rows = jump_rows()
    rows[100] = (100, rows[100][1], "abc")
    p = write(tmp_path / "typo.csv", rows)
    proc = cli("detect", p, "--bad-cells", "missing", "--json")
    assert proc.returncode == 0, proc.stderr
    res = json.loads(proc.stdout)
    assert res["columns"] == ["cpu", "mem"] and near(res["change_points"], 150)
    assert "1 non-numeric cell(s) read as missing" in proc.stderr


@pytest.mark.parametrize("fmt", ["semicolon", "tab", "jsonl", "stdin"])
def test_input_formats_find_the_change(tmp_path, fmt):
    rows = jump_rows()
    stdin = None
    if fmt == "semicolon":
        p = write(tmp_path / "x.csv", rows, sep=";")
    elif fmt == "tab":
        p = write(tmp_path / "x.tsv", rows, sep="\t")
    elif fmt == "jsonl":
        p = tmp_path / "x.jsonl"
        p.write_text("".join(json.dumps({"time": t, "cpu": c, "mem": m}) + "\n" for t, c, m in rows))
    else:
        p, stdin = "-", write(tmp_path / "x.csv", rows).read_text()
    proc = cli("detect", p, "--json", input=stdin)
    assert proc.returncode == 0, proc.stderr
    res = json.loads(proc.stdout)
    assert res["columns"] == ["cpu", "mem"] and res["n_samples"] == 300
    assert near(res["change_points"], 150), res["change_points"]


def test_a_time_ms_column_is_the_time_axis_not_a_channel(tmp_path):
    rows = [(1000 * t, c, m) for t, c, m in jump_rows()]
    p = write(tmp_path / "t.csv", rows, header="time_ms,cpu,mem")
    proc = cli("detect", p, "--json")
    res = json.loads(proc.stdout)
    assert res["columns"] == ["cpu", "mem"] and res["time_column"] == "time_ms"
    assert near(res["change_points"], 150)
    assert res["change_point_times"] == [1000 * c for c in res["change_points"]]
    assert "'time_ms' read as the time axis" in proc.stderr and "--time-column" in proc.stderr


def test_headerless_file_keeps_every_row(tmp_path):
    p = write(tmp_path / "n.csv", jump_rows(), header=None)
    proc = cli("detect", p, "--json")
    res = json.loads(proc.stdout)
    assert res["n_samples"] == 300 and near(res["change_points"], 150)
    assert "no header row" in proc.stderr


def test_a_headerless_semicolon_file_with_decimal_commas_stops_instead_of_reading_other_numbers(tmp_path):
    rows = jump_rows()
    p = tmp_path / "dc.csv"
    p.write_text("".join(f"{c};{m}\n".replace(".", ",") for _, c, m in rows))
    proc = cli("detect", p, "--json")
    one_line_error(proc, 2, "--delimiter ';'", "write decimal dots")
    assert proc.stdout == ""


def test_blank_lines_do_not_shift_the_reported_lines(tmp_path):
    p = write(tmp_path / "b.csv", jump_rows())
    lines = p.read_text().splitlines(keepends=True)
    p.write_text("".join(lines[:51]) + "\n" + "".join(lines[51:]))  # blank line after data row 49
    proc = cli("detect", p, "--json")
    res = json.loads(proc.stdout)
    assert near(res["change_points"], 150)
    # data row i sits on file line i + 2 before the blank line and i + 3 after it
    assert res["change_point_lines"] == [c + 3 for c in res["change_points"]]
    assert "data-row indices from 0" in res["index"]
    assert "skipped 1 blank line" in proc.stderr
    text = cli("detect", p)
    assert "(data row from 0)" in text.stdout and f"(line {res['change_point_lines'][0]}" in text.stdout


def test_too_short_a_series_says_so(tmp_path):
    p = write(tmp_path / "s.csv", jump_rows()[:6])
    proc = cli("detect", p)
    assert proc.returncode == 0
    assert "too short for any detection" in proc.stdout and "too short" in proc.stderr


def test_too_short_counts_the_rows_analysed_not_every_row(tmp_path):
    # 400 rows, of which 8 have a value in every column: it said "400 samples are too short"
    rows = [(t, t % 5, t % 3 if t % 50 == 0 else "") for t in range(400)]
    p = write(tmp_path / "few.csv", rows)
    proc = cli("detect", p, "--json")
    assert proc.returncode == 0, proc.stderr
    msg = json.loads(proc.stdout)["too_short"]
    assert msg.startswith("only 8 of 400 rows have a value in every column, too short for any detection")
    assert "400 samples" not in proc.stderr and "392 of 400 rows were left out" in proc.stderr


def test_alarm_scores_are_ratios_to_the_threshold_for_any_input(tmp_path):
    from ratiowatch.stream.detectors.offline import replay

    rows = jump_rows()
    uni = write(tmp_path / "u.csv", [(t, m) for t, _c, m in rows], header="time,mem")
    multi = write(tmp_path / "m.csv", rows)
    for p, x in ((uni, np.array([[r[2]] for r in rows])), (multi, np.array([r[1:] for r in rows]))):
        res = json.loads(cli("detect", p, "--json").stdout)
        assert "threshold" in res["score_units"]
        expected = [a.score / a.threshold for a in replay(x).alarms]
        assert [a["score"] for a in res["alarms"]] == pytest.approx(expected)
        assert res["alarms"] and all(a["score"] >= 1.0 for a in res["alarms"])


# ------------------------------------------------------------------ detect --plot
def test_plot_extension_sets_the_format(tmp_path):
    p = write(tmp_path / "x.csv", jump_rows())
    for ext, magic in ((".svg", b"<?xml"), (".pdf", b"%PDF"), (".png", b"\x89PNG")):
        out = tmp_path / f"plot{ext}"
        proc = cli("detect", p, "--plot", out)
        assert proc.returncode == 0, proc.stderr
        assert out.read_bytes()[:5].startswith(magic[:5]), ext
    one_line_error(cli("detect", p, "--plot", tmp_path / "plot.xyz"), 2, "unknown image format .xyz", ".svg")


def test_plot_into_a_missing_directory_fails_before_computing(tmp_path):
    p = write(tmp_path / "x.csv", jump_rows())
    proc = cli("detect", p, "--plot", "/nonexistent/dir/out.png")
    one_line_error(proc, 2, "directory /nonexistent/dir does not exist")
    assert proc.stdout == ""


def test_a_plot_that_cannot_be_written_still_prints_the_result(tmp_path):
    p = write(tmp_path / "x.csv", jump_rows())
    # passes the checks made before computing (writable folder, known format), fails at writing:
    # the name is a link into a folder that does not exist
    out = tmp_path / "out.png"
    out.symlink_to("/nonexistent/dir/out.png")
    proc = cli("detect", p, "--json", "--plot", out)
    one_line_error(proc, 1, "could not write the plot")
    assert near(json.loads(proc.stdout)["change_points"], 150)
    long_name = cli("detect", p, "--plot", tmp_path / ("x" * 300 + ".png"))
    one_line_error(long_name, 2, "File name too long")


# ------------------------------------------------------------------ detect --streaming: the daemon's detector on a file
@pytest.mark.parametrize("detector", [None, "window", "split_profile", "auto"])
def test_streaming_replay_reports_change_row_alarm_row_and_delay(tmp_path, detector):
    # the two-window detector's windows grow with the rows seen (5 %): at row 600 they are full-size
    p = write(tmp_path / "x.csv", jump_rows(t=1200, at=600))
    proc = cli("detect", p, "--streaming", "--json", *(("--detector", detector) if detector else ()))
    assert proc.returncode == 0, proc.stderr
    res = json.loads(proc.stdout)
    assert res["mode"] == "streaming" and res["detector"] == (detector or "auto")
    assert near(res["change_points"], 600), res["alarms"]
    for a in res["alarms"]:
        # causal: raised at or after the row where it places the change, in the file's own lines and times
        assert a["alarm_index"] >= a["change_index"] and a["delay"] == a["alarm_index"] - a["change_index"]
        assert a["line"] == a["change_index"] + 2 and a["time"] == a["change_index"]
        assert a["alarm"] == {"line": a["alarm_index"] + 2, "time": a["alarm_index"]}
        assert a["score"] > 1.0


def test_streaming_replay_leaves_out_rows_with_a_missing_value_as_the_daemon_does():
    """The daemon sends a record with a missing or non-finite value to its dead-letter sink, so the
    replay leaves such rows out; carried forward, a gap of 100 rows in N(0, 1) raised an alarm at
    each end (17 alarms near the gap in 10 streams of 3,000 rows, against 1 alarm in all of them
    without the gap)."""
    from ratiowatch.stream.commands.detect import replay_streaming

    rng = np.random.default_rng(5)
    y = np.r_[rng.normal(0, 1, 1500), rng.normal(4, 1, 1400)]
    gappy = np.r_[y[:1500], np.full(100, np.nan), y[1500:]]  # the change is now at row 1600
    rows = np.flatnonzero(~np.isnan(gappy))
    alarms, ratio = replay_streaming(gappy[:, None], "window")
    cut, _ = replay_streaming(y[:, None], "window")
    assert [(a.change_index, a.alarm_index) for a in alarms] == [
        (rows[a.change_index], rows[a.alarm_index]) for a in cut]
    # the change is placed at the gap (its last row before or first row after: the detector's
    # rows meet there), and raised after it
    assert len(alarms) == 1 and 1490 <= alarms[0].change_index <= 1610 and alarms[0].alarm_index >= 1600
    assert np.isnan(ratio[1500:1600]).all() and np.isfinite(ratio[1600:]).all()
    two = np.c_[gappy, rng.normal(size=gappy.size)]
    two[1500:1600, 1] = 1.0  # one channel observed: the daemon still cannot read the record
    assert [(a.change_index, a.alarm_index) for a in replay_streaming(two, "window")[0]] == [
        (rows[a.change_index], rows[a.alarm_index]) for a in replay_streaming(two[rows], "window")[0]]


def test_streaming_replay_in_words_and_a_plot(tmp_path):
    p = write(tmp_path / "x.csv", jump_rows(t=1200, at=600))
    proc = cli("detect", p, "--streaming", "--plot", tmp_path / "s.png")
    assert proc.returncode == 0, proc.stderr
    assert "streaming replay (auto detector)" in proc.stdout
    assert "alarm at row" in proc.stdout and "delay" in proc.stdout
    assert (tmp_path / "s.png").stat().st_size > 0


def test_streaming_options_are_checked_before_reading(tmp_path):
    p = write(tmp_path / "x.csv", jump_rows())
    one_line_error(cli("detect", p, "--detector", "split_profile"), 2, "add --streaming")
    one_line_error(cli("detect", p, "--streaming", "--false-alarm-rate", "2"), 2, "e.g. 1e-4")
    one_line_error(cli("detect", p, "--level-view"), 2, "add --streaming")
    one_line_error(cli("detect", p, "--streaming", "--detector", "split_profile", "--level-view"), 2,
                   "option of the two-window detector")
    one_line_error(cli("detect", p, "--robust-line"), 2, "add --streaming")
    one_line_error(cli("detect", p, "--streaming", "--detector", "split_profile", "--robust-line"), 2,
                   "option of the two-window detector")
    one_line_error(cli("detect", p, "--with-history"), 2, "add --streaming")
    one_line_error(cli("detect", p, "--streaming", "--detector", "window", "--with-history"), 2,
                   "option of the routed detector")
    one_line_error(cli("detect", p, "--streaming", "--detector", "split_profile", "--method", "lsdd"), 2,
                   "two-window detector's estimator")
    one_line_error(cli("detect", p, "--method", "kliep"), 2, "RuLSIF fit")


def test_method_chooses_the_estimator(tmp_path):
    """Each of the two-window detector's estimators finds the jump at 600 as the daemon would
    (window and auto); offline, uLSIF's split profile finds it too."""
    p = write(tmp_path / "x.csv", jump_rows(t=1200, at=600))
    for method in ("ulsif", "kliep", "lsdd"):
        for detector in ("window", "auto"):
            proc = cli("detect", p, "--streaming", "--detector", detector, "--method", method, "--json")
            assert proc.returncode == 0, proc.stderr
            out = json.loads(proc.stdout)
            assert near(out["change_points"], 600) and out["method"] == method, (method, detector, proc.stdout)
    proc = cli("detect", p, "--method", "ulsif", "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert near(out["change_points"], 600) and out["config"]["method"] == "ulsif" and out["config"]["alpha"] == 0.0


def test_level_view_finds_a_level_step_in_a_smooth_column(tmp_path):
    """AR(1) with phi = 0.9 stepping up by 5 marginal sd at row 1,500: the two-window detector works
    on its differences and misses the step; with --level-view it is reported (window and auto)."""
    rng = np.random.default_rng([1, 11])
    e = rng.normal(0.0, np.sqrt(1.0 - 0.81), size=3000)
    x = np.empty(3000)
    x[0] = rng.normal()
    for t in range(1, 3000):
        x[t] = 0.9 * x[t - 1] + e[t]
    x[1500:] += 5.0
    p = write(tmp_path / "smooth.csv", [(i, round(float(v), 4)) for i, v in enumerate(x)], header="time,level")
    for detector in ("window", "auto"):
        plain = json.loads(cli("detect", p, "--streaming", "--detector", detector, "--json").stdout)
        proc = cli("detect", p, "--streaming", "--detector", detector, "--level-view", "--json")
        assert proc.returncode == 0, proc.stderr
        assert not near(plain["change_points"], 1500), plain["alarms"]
        assert near(json.loads(proc.stdout)["change_points"], 1500, tol=3), proc.stdout


def test_robust_line_finds_a_step_after_an_error_code(tmp_path):
    """AR(1) with phi = 0.5, a step of 2 marginal sd at row 1,500 and one value of 1e4 marginal sd at
    row 1,268: the line of the two-window detector's null follows the value and hides the step;
    with --robust-line it is reported."""
    x = step_after_a_gross_value(1e4)
    p = write(tmp_path / "code.csv", [(i, repr(float(v))) for i, v in enumerate(x)], header="time,reading")
    plain = json.loads(cli("detect", p, "--streaming", "--detector", "window", "--json").stdout)
    proc = cli("detect", p, "--streaming", "--detector", "window", "--robust-line", "--json")
    assert proc.returncode == 0, proc.stderr
    assert not near(plain["change_points"], 1500, tol=100), plain["alarms"]
    assert near(json.loads(proc.stdout)["change_points"], 1500, tol=100), proc.stdout


def test_with_history_quiets_a_daily_schedule(tmp_path):
    """The stress kind schedule288 (a level switching twice per cycle of 288 rows) at seed 0: the
    default reports switch after switch; with --with-history the stream is handed over with its
    recent cycles and nothing is reported after that."""
    from ratiowatch.stream.evaluate.synthetic import null_series

    x = null_series("schedule288", 6000, 0)
    p = write(tmp_path / "day.csv", [(i, round(float(v), 4)) for i, v in enumerate(x)], header="time,load")
    plain = json.loads(cli("detect", p, "--streaming", "--json").stdout)
    proc = cli("detect", p, "--streaming", "--with-history", "--json")
    assert proc.returncode == 0, proc.stderr
    quiet = json.loads(proc.stdout)
    assert len(plain["alarms"]) >= 10 and len(quiet["alarms"]) < len(plain["alarms"]) / 2


@pytest.mark.parametrize("streaming", [False, True])
def test_rows_left_out_for_a_missing_value_are_counted_by_column(tmp_path, streaming):
    # a column read every tenth row leaves out nine rows in ten: the output says so, and where
    rows = [(t, cpu, mem if t % 10 == 0 else "") for t, cpu, mem in jump_rows(600, 300)]
    p = write(tmp_path / "mixed.csv", rows)
    proc = cli("detect", p, "--json", *(["--streaming"] if streaming else []))
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["rows_left_out"] == {"rows": 540, "by_column": {"mem": 540}}
    assert "540 of 600 rows were left out: a value was missing ('mem' in 540)" in proc.stderr
    full = cli("detect", write(tmp_path / "full.csv", jump_rows(600, 300)), "--json")
    assert "rows_left_out" not in json.loads(full.stdout) and "left out" not in full.stderr


def test_noise_with_a_found_step_is_not_called_smooth(tmp_path):
    # about one mean the step alone gives a lag-1 autocorrelation of 0.9; about each segment's mean
    # it is the noise's own, and the note about missed level steps would mislead
    x = np.random.default_rng(2).normal(size=600) + np.where(np.arange(600) >= 300, 6.0, 0.0)
    p = write(tmp_path / "step.csv", [(i, repr(float(v))) for i, v in enumerate(x)], header="time,level")
    proc = cli("detect", p, "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert len(out["change_points"]) == 1 and abs(out["change_points"][0] - 300) <= 5
    assert "smooth_columns" not in out and "is smooth" not in proc.stderr


def test_smooth_steps_finds_both_steps_of_a_smooth_column_offline(tmp_path):
    """The change suite's mean_smooth at seed 1 (AR(1) at 0.9, steps at 500 and 1,000): the offline
    detector finds neither by default and both with --smooth-steps; not a streaming option."""
    from ratiowatch.stream.evaluate.synthetic import change_series

    x = change_series("mean_smooth", seed=1).x
    p = write(tmp_path / "smooth.csv", [(i, repr(float(v))) for i, v in enumerate(x)], header="time,level")
    plain = cli("detect", p, "--json")
    assert json.loads(plain.stdout)["change_points"] == []
    # the default run says why it may have missed something, and what to try
    assert json.loads(plain.stdout)["smooth_columns"] == {"level": 0.976}
    assert "'level' is smooth (lag-1 autocorrelation 0.98)" in plain.stderr and "--smooth-steps" in plain.stderr
    proc = cli("detect", p, "--smooth-steps", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["change_points"] == [500, 1000]
    assert "smooth_columns" not in json.loads(proc.stdout) and "is smooth" not in proc.stderr
    one_line_error(cli("detect", p, "--streaming", "--smooth-steps"), 2, "option of the offline detector")


def sensor_rows(t=1500, seed=0):
    """(time, a, b) rows: two noisy daily cycles of 96 rows; a has a burst of +3 at 1200-1207, b is
    stuck at its row-999 value over 1000-1047."""
    rng = np.random.default_rng(seed)
    cycle = 20.0 + 2.0 * np.sin(2 * np.pi * np.arange(t) / 96)
    a = np.round(cycle + 0.2 * rng.normal(size=t), 3)
    b = np.round(cycle + 0.2 * rng.normal(size=t), 3)
    a[1200:1208] += 3.0
    b[1000:1048] = b[999]
    return [(i, float(u), float(v)) for i, (u, v) in enumerate(zip(a, b))]


def test_streaming_anomaly_replay_reports_each_event_once_in_its_column(tmp_path):
    """--detector anomaly: each column scored on its own, as the daemon scores each key; the
    burst is reported at its first row, the stuck stretch once, in the file's lines and times."""
    rows = sensor_rows()
    p = write(tmp_path / "s.csv", rows, header="time,a,b")
    proc = cli("detect", p, "--streaming", "--detector", "anomaly", "--json")
    assert proc.returncode == 0, proc.stderr
    res = json.loads(proc.stdout)
    assert res["detector"] == "anomaly" and res["score_threshold"] == 0.5
    found = {c: [x["row"] for x in res["anomalies"] if x["column"] == c] for c in ("a", "b")}
    assert [r for r in found["a"] if 1200 <= r < 1208] == [1200], found
    assert len([r for r in found["b"] if 1000 <= r < 1048]) == 1, found
    for x in res["anomalies"]:
        assert x["line"] == x["row"] + 2 and x["time"] == x["row"] and 0.5 <= x["score"] <= 1.0
    # the daemon's kind = "anomaly" alerts on the same rows, key by key
    from ratiowatch.connectors.records import Record
    from ratiowatch.stream.engine.pipeline import Pipeline, build_factory

    pipe = Pipeline(build_factory("anomaly", {}))
    alerts, _ = pipe.process([Record(c, float(t), np.array([r[j]]), ("p0", 2 * t + j - 1))
                              for t, r in enumerate(rows) for j, c in ((1, "a"), (2, "b"))])
    assert {c: sorted(a.change_index for a in alerts if a.key == c) for c in ("a", "b")} == found
    stricter = json.loads(cli("detect", p, "--streaming", "--detector", "anomaly", "--json",
                              "--score-threshold", "0.9").stdout)
    assert 0 < len(stricter["anomalies"]) < len(res["anomalies"])
    assert all(x["score"] >= 0.9 for x in stricter["anomalies"])
    # the counts at other thresholds are what those thresholds report
    for run, t in ((res, "0.5"), (stricter, "0.9")):
        assert run["events_by_threshold"] == res["events_by_threshold"]
        assert {c: n[t] for c, n in run["events_by_threshold"].items()} == \
            {c: len([x for x in run["anomalies"] if x["column"] == c]) for c in ("a", "b")}


def test_streaming_anomaly_replay_skips_missing_cells_instead_of_holding_the_last_value(tmp_path):
    """Missing cells are left out of the column's stream, as the daemon leaves out records it cannot
    read: held at the last value they would be a stuck stretch."""
    from ratiowatch.stream.commands.detect import replay_anomalies

    full = sensor_rows()
    rows = [(t, "" if 700 <= t < 760 else a, b) for t, a, b in full]  # a gap of 60 rows in a
    p = write(tmp_path / "gap.csv", rows, header="time,a,b")
    proc = cli("detect", p, "--streaming", "--detector", "anomaly", "--json")
    assert proc.returncode == 0, proc.stderr
    rows_a = [x["row"] for x in json.loads(proc.stdout)["anomalies"] if x["column"] == "a"]
    assert not any(700 <= r < 760 for r in rows_a), rows_a
    assert 1200 in rows_a, rows_a  # the rows after the gap keep their own indices
    held = np.array([a for _, a, _ in full])
    held[700:760] = held[699]
    assert any(700 <= x["row"] < 760 for x in replay_anomalies(held[:, None])[0])


def test_streaming_anomaly_replay_in_words_and_a_plot(tmp_path):
    p = write(tmp_path / "s.csv", sensor_rows(), header="time,a,b")
    proc = cli("detect", p, "--streaming", "--detector", "anomaly", "--plot", tmp_path / "a.png")
    assert proc.returncode == 0, proc.stderr
    assert "streaming replay (anomaly detector, score threshold 0.5)" in proc.stdout
    assert "anomaly at row 1200 (line 1202, time 1200) in 'a', score 1.000" in proc.stdout
    assert "'a': events at score thresholds 0.3: " in proc.stdout
    assert (tmp_path / "a.png").stat().st_size > 0


def test_streaming_anomaly_replay_of_too_short_a_file_says_nothing_was_scored(tmp_path):
    p = write(tmp_path / "x.csv", jump_rows(t=250, at=200))
    proc = cli("detect", p, "--streaming", "--detector", "anomaly", "--json")
    assert proc.returncode == 0, proc.stderr
    res = json.loads(proc.stdout)
    assert res["anomalies"] == [] and res["rows_scored"] == {"cpu": 0, "mem": 0}
    assert "first 300 values" in res["too_short"] and "no row was scored" in proc.stderr
    longer = json.loads(cli("detect", write(tmp_path / "y.csv", jump_rows(t=400, at=200)), "--streaming",
                            "--detector", "anomaly", "--json").stdout)
    assert longer["rows_scored"] == {"cpu": 100, "mem": 100} and "too_short" not in longer


def test_anomaly_options_are_checked_before_reading(tmp_path):
    p = write(tmp_path / "x.csv", jump_rows())
    one_line_error(cli("detect", p, "--score-threshold", "0.5"), 2, "add --streaming --detector anomaly")
    one_line_error(cli("detect", p, "--streaming", "--score-threshold", "0.5"), 2, "--detector anomaly")
    one_line_error(cli("detect", p, "--streaming", "--detector", "anomaly", "--score-threshold", "2"), 2,
                   "in (0, 1]", "e.g. 0.5")
    one_line_error(cli("detect", p, "--streaming", "--detector", "anomaly", "--false-alarm-rate", "1e-4"), 2,
                   "--score-threshold")


def test_streaming_replay_of_too_short_a_file_says_nothing_was_tested(tmp_path):
    p = write(tmp_path / "x.csv", jump_rows(t=20, at=10))
    proc = cli("detect", p, "--streaming", "--json")
    assert proc.returncode == 0, proc.stderr
    res = json.loads(proc.stdout)
    assert res["alarms"] == [] and res["rows_tested"] == 0 and "no row was tested" in res["too_short"]
    assert "no row was tested" in proc.stderr


def test_streaming_replay_of_a_periodic_column_points_to_the_split_profile_detector(tmp_path):
    t = np.arange(1200)
    rng = np.random.default_rng(5)
    rows = [(i, round(float(np.sin(2 * np.pi * i / 48) + 0.1 * rng.normal()), 4),
             round(float(rng.normal()), 4)) for i in t]
    p = write(tmp_path / "x.csv", rows)
    proc = cli("detect", p, "--streaming", "--detector", "window", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["periods"] == {"cpu": 48}  # the noise column has none
    assert "'cpu' repeats every 48 rows" in proc.stderr and "--detector auto" in proc.stderr
    for detector in ("split_profile", "auto"):  # these detectors see changes inside a cycle
        quiet = cli("detect", p, "--streaming", "--detector", detector, "--json")
        assert quiet.returncode == 0 and "repeats every" not in quiet.stderr
    assert json.loads(cli("detect", p, "--streaming", "--json").stdout)["detector"] == "auto"


def test_a_header_of_numbers_is_read_as_names_when_told(tmp_path):
    # sensor IDs as column names read as a row of data by default, and every index was one late
    rows = [(round(float(a), 4), round(float(b), 4)) for a, b in zip(*(np.array(jump_rows(600, 300))[:, 1:].T))]
    p = write(tmp_path / "ids.csv", rows, header="101,102")
    auto = cli("detect", p, "--json")
    assert auto.returncode == 0 and json.loads(auto.stdout)["n_samples"] == 601
    assert "--header yes" in auto.stderr
    told = cli("detect", p, "--header", "yes", "--json")
    assert told.returncode == 0, told.stderr
    out = json.loads(told.stdout)
    assert out["columns"] == ["101", "102"] and out["n_samples"] == 600 and near(out["change_points"], 300)


def test_what_a_detector_refuses_in_the_data_is_a_one_line_error(tmp_path):
    # two columns that never share a row: the offline detector refuses them, and the command said so
    # in a traceback
    rows = [(i, "" if i % 2 else 1.0 + i % 3, 2.0 + i % 5 if i % 2 else "") for i in range(40)]
    p = write(tmp_path / "alternate.csv", rows, header="time,a,b")
    one_line_error(cli("detect", p), 2, "no row has a value in every one of the 2 channels")


# ------------------------------------------------------------------ detect: fixes
def test_streaming_leaves_out_a_row_with_a_value_the_detector_refuses_and_names_its_line(tmp_path):
    rows = jump_rows(t=1200, at=600)
    rows[100] = (100, rows[100][1], "1e300")  # data row 100 -> file line 102
    p = write(tmp_path / "x.csv", rows)
    proc = cli("detect", p, "--streaming", "--json")
    assert proc.returncode == 0, proc.stderr
    res = json.loads(proc.stdout)
    assert res["rows_refused"] == {"rows": 1, "lines": [102]} and near(res["change_points"], 600, tol=15)
    assert "1 row(s) left out (line 102)" in proc.stderr and "Traceback" not in proc.stderr


def test_streaming_replay_refuses_a_huge_value_without_changing_the_detector():
    from ratiowatch.stream.commands.detect import replay_streaming

    rng = np.random.default_rng(1)
    y = np.r_[rng.normal(0, 1, 600), rng.normal(4, 1, 600)]
    spiked = np.r_[y[:100], 1e300, y[100:]]
    refused: list = []
    alarms, ratio = replay_streaming(spiked[:, None], "window", refused=refused)
    plain, _ = replay_streaming(y[:, None], "window")
    assert refused == [100] and np.isnan(ratio[100])
    shift = lambda i: i + (i >= 100)  # noqa: E731 - rows of y -> rows of spiked
    assert [(a.change_index, a.alarm_index) for a in alarms] == [
        (shift(a.change_index), shift(a.alarm_index)) for a in plain]


def test_a_pipe_is_read_as_the_file(tmp_path):
    import subprocess
    import sys

    from cli_util import CLI

    p = write(tmp_path / "x.csv", jump_rows())
    with open(p) as fh:
        proc = subprocess.run([*CLI, "detect", "/dev/stdin", "--json"], stdin=fh, capture_output=True, text=True,
                              timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert near(json.loads(proc.stdout)["change_points"], 150)
    assert sys.platform != "win32"


def test_one_missing_time_keeps_the_change_point_times_numbers(tmp_path):
    rows = jump_rows()
    rows[10] = ("", rows[10][1], rows[10][2])
    p = write(tmp_path / "x.csv", [(1000 + 10 * r[0] if r[0] != "" else "", r[1], r[2]) for r in rows])
    res = json.loads(cli("detect", p, "--json").stdout)
    assert res["change_point_times"] and all(isinstance(t, int) for t in res["change_point_times"])


def test_a_note_that_explains_an_error_is_printed_with_it(tmp_path):
    p = write(tmp_path / "x.csv", [(i, 2 * i) for i in range(50)], header="time,idx")
    proc = cli("detect", p)
    one_line_error(proc, 2, "reads as the time axis", "also look like a time axis")


def test_a_value_column_named_index_beside_a_date_is_watched(tmp_path):
    rng = np.random.default_rng(0)
    rows = [(f"2024-{1 + i // 28:02d}-{1 + i % 28:02d}", round(100 + float(v) + 4 * (i >= 150), 3))
            for i, v in enumerate(rng.normal(size=300))]
    p = write(tmp_path / "s.csv", rows, header="date,index")
    proc = cli("detect", p, "--json")
    assert proc.returncode == 0, proc.stderr
    res = json.loads(proc.stdout)
    assert res["columns"] == ["index"] and res["time_column"] == "date" and near(res["change_points"], 150)

"""The eval commands on broken or unusual input: one-line errors naming the file, exit code 2,
and scores that do not depend on how the output is written."""

from __future__ import annotations

import json
import types

import numpy as np
import pytest
from cli_util import error_line

from ratiowatch.stream.commands.cli import main


def write_tcpd(root, series: dict, annotations: dict | None = None):
    """A TCPD-style folder: ``series`` maps a file stem to its JSON object (or raw text)."""
    (root / "datasets").mkdir(parents=True, exist_ok=True)
    for stem, obj in series.items():
        text = obj if isinstance(obj, str) else json.dumps(obj)
        (root / "datasets" / f"{stem}.json").write_text(text)
    if annotations is None:
        annotations = {stem: {"1": []} for stem in series}
    text = annotations if isinstance(annotations, str) else json.dumps(annotations)
    (root / "annotations.json").write_text(text)
    return root


def step(name="step"):
    return {"name": name, "series": [{"raw": [0.0] * 50 + [5.0] * 50}]}


# -- plots ---------------------------------------------------------------------------------------


def test_a_series_name_with_a_slash_is_plotted_inside_the_plot_folder_and_scores_the_same(tmp_path, capsys):
    # the name was used as a path: "grp/step.png" had no folder, and the failed plot scored the series 0
    pytest.importorskip("matplotlib")
    data = write_tcpd(tmp_path / "d", {"step": step("grp/step"), "esc": step("../escaped")},
                      {"grp/step": {"1": [50]}, "../escaped": {"1": [50]}})
    assert main(["eval", "tcpd", str(data), "--json"]) == 0
    plain = json.loads(capsys.readouterr().out)
    plots = tmp_path / "plots"
    assert main(["eval", "tcpd", str(data), "--json", "--plot", str(plots)]) == 0
    plotted = json.loads(capsys.readouterr().out)
    for name in ("grp/step", "../escaped"):
        assert plotted["datasets"][name]["f1"] == plain["datasets"][name]["f1"]
        assert plotted["datasets"][name]["cover"] == plain["datasets"][name]["cover"]
    assert sorted(p.name for p in plots.iterdir()) == ["..__escaped.png", "grp__step.png"]
    assert not (tmp_path / "escaped.png").exists()


def test_a_plot_that_cannot_be_written_is_a_note_and_not_a_failed_detection(monkeypatch):
    # the plot ran inside the detection's try, so its failure scored the series 0
    import ratiowatch.stream.detectors.offline as offline
    from ratiowatch.stream.evaluate.runner import evaluate_series

    monkeypatch.setattr(offline, "replay", lambda x, **kw: types.SimpleNamespace(change_points=[50]))

    def plot(name, x, rep):
        raise OSError(28, "No space left on device")

    notes: list[str] = []
    rows = evaluate_series({"a": np.zeros(100)}, lambda n, cps, t: {"n": float(len(cps))}, {"a": "tune"},
                           plot=plot, notes=notes)
    assert rows["a"]["n"] == 1.0 and "error" not in rows["a"]
    assert notes == ["plot of a not written: OSError: [Errno 28] No space left on device"]


# -- eval nab: result files and output folders ---------------------------------------------------


def nab_args(*argv):
    import argparse

    from ratiowatch.stream.evaluate import nab

    parser = argparse.ArgumentParser()
    nab.add_arguments(parser)
    return parser.parse_args([str(a) for a in argv])


def test_an_interrupted_nab_run_leaves_no_partial_result_folder(tmp_path, monkeypatch):
    # the result files were written one by one: a Ctrl-C left half a result set behind
    from ratiowatch.stream.evaluate import nab
    from test_nab_eval import write_corpus

    write_corpus(tmp_path)
    out = tmp_path / "results"
    calls = []

    def detector(values, factory=None, params=None):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return np.zeros(len(values))

    monkeypatch.setattr(nab, "run_detector", detector)
    with pytest.raises(KeyboardInterrupt):
        nab.run(nab_args(tmp_path, "--write-results", out))
    assert not out.exists()
    # an earlier result set stays as it was until a run succeeds, then is replaced whole
    (out / "ratiowatch" / "cat").mkdir(parents=True)
    (out / "ratiowatch" / "cat" / "ratiowatch_a.csv").write_text("earlier\n")
    calls.clear()
    with pytest.raises(KeyboardInterrupt):
        nab.run(nab_args(tmp_path, "--write-results", out))
    assert [p.name for p in out.iterdir()] == ["ratiowatch"]
    assert (out / "ratiowatch" / "cat" / "ratiowatch_a.csv").read_text() == "earlier\n"
    calls.extend([1, 1])  # no more interrupts
    assert nab.run(nab_args(tmp_path, "--write-results", out)) == 0
    assert [p.name for p in out.iterdir()] == ["ratiowatch"]
    assert sorted(p.name for p in (out / "ratiowatch" / "cat").iterdir()) == ["ratiowatch_a.csv", "ratiowatch_b.csv"]
    assert (out / "ratiowatch" / "cat" / "ratiowatch_a.csv").read_text().startswith("timestamp,value,anomaly_score")


@pytest.mark.parametrize("option", ["--write-results", "--plot"])
def test_an_unusable_nab_output_folder_is_refused_before_any_work(tmp_path, capsys, monkeypatch, option):
    # a file in the way gave a traceback, after the detector had run on every file
    from ratiowatch.stream.evaluate import nab
    from test_nab_eval import write_corpus

    write_corpus(tmp_path)
    (tmp_path / "a_file").write_text("")
    monkeypatch.setattr(nab, "run_detector", lambda *a, **k: pytest.fail("the detector ran"))
    for target, problem in ((tmp_path / "a_file", "not a folder"),
                            (tmp_path / "a_file" / "sub", "cannot create the folder")):
        capsys.readouterr()
        assert nab.run(nab_args(tmp_path, option, target)) == 2
        line = error_line(capsys)
        assert line.startswith(f"ratiowatch eval nab: {option} {target}: {problem}")


# -- halves ---------------------------------------------------------------------------------------


def write_tssb(root, desc: str, series: dict):
    """A TSSB-style folder: ``desc`` is desc.txt's text, ``series`` maps a name to its values (or text)."""
    (root / "datasets").mkdir(parents=True, exist_ok=True)
    (root / "desc.txt").write_text(desc)
    for name, values in series.items():
        text = values if isinstance(values, str) else "\n".join(str(float(v)) for v in values)
        (root / "datasets" / f"{name}.txt").write_text(text)
    return root


@pytest.mark.parametrize("benchmark", ["tcpd", "tssb"])
def test_an_empty_check_half_is_an_error_not_the_tune_series(tmp_path, capsys, benchmark):
    # the empty selection read as "every series": the tune series were reported under --half check
    if benchmark == "tcpd":
        root = write_tcpd(tmp_path / "d", {"only": step("only")}, {"only": {"1": [50]}})
    else:
        root = write_tssb(tmp_path / "d", "only,10,50\n", {"only": [0.0] * 50 + [5.0] * 50})
    assert main(["eval", benchmark, str(root), "--half", "check", "--json"]) == 2
    assert error_line(capsys) == (f"ratiowatch eval {benchmark}: no series in the check half of {root}; "
                                  "choose another --half")


# -- strict JSON ----------------------------------------------------------------------------------


def strict_load(text: str):
    def refuse(constant):
        raise ValueError(f"not JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


def test_eval_nab_json_is_strict_when_no_threshold_beats_flagging_nothing(tmp_path, capsys, monkeypatch):
    # the threshold "flag nothing" is infinite, and was printed as Infinity (not JSON)
    from ratiowatch.stream.evaluate import nab
    from test_nab_eval import write_corpus

    write_corpus(tmp_path)
    windows = tmp_path / "labels" / "combined_windows.json"
    windows.write_text(json.dumps({name: [] for name in json.loads(windows.read_text())}))
    monkeypatch.setattr(nab, "run_detector", lambda values, *a, **k: np.linspace(0.0, 1.0, len(values)))
    assert nab.run(nab_args(tmp_path, "--json")) == 0
    captured = capsys.readouterr()
    obj = strict_load(captured.out)
    assert obj["thresholds"] == {p: None for p in obj["scores"]}
    assert "no threshold scores better than flagging no row" in obj["notes"][0]
    assert obj["notes"][0] in captured.err
    assert nab.run(nab_args(tmp_path)) == 0
    assert "(threshold none: no row flagged)" in capsys.readouterr().out


def test_nab_leave_one_out_with_one_category_says_it_needs_two(tmp_path, capsys, monkeypatch):
    # numpy's "need at least one array to concatenate", after the detector ran on every file
    from ratiowatch.stream.evaluate import nab
    from test_nab_eval import write_corpus

    write_corpus(tmp_path)
    monkeypatch.setattr(nab, "run_detector", lambda *a, **k: pytest.fail("the detector ran"))
    assert nab.run(nab_args(tmp_path, "--leave-one-out")) == 2
    assert error_line(capsys) == ("ratiowatch eval nab: --leave-one-out needs at least two categories under "
                                  "data/; found 1 (cat)")


# -- malformed data: one line naming the file (and the series) -----------------------------------


GOOD = {"name": "good", "series": [{"raw": [float(i % 5) for i in range(40)]}]}


@pytest.mark.parametrize("bad, annotations, message", [
    # KeyError tracebacks
    ({"name": "bad", "n_obs": 3}, None, '{d}/datasets/bad.json: no "series" list'),
    ({"name": "bad", "series": [{"label": "V1"}]}, None, '{d}/datasets/bad.json: series[0] has no "raw" list'),
    ({"name": "bad", "series": [{"raw": [1.0, 2.0, 3.0]}]}, {"good": {"1": []}},
     "{d}/annotations.json: no annotations for the series bad ({d}/datasets/bad.json)"),
    # one-line errors that did not say which file
    ('{"name": "bad", "series": [{"raw": [1, 2,', None, "{d}/datasets/bad.json: not JSON"),
    ({"name": "bad", "series": [{"raw": [1, "x", 3]}]}, None,
     "{d}/datasets/bad.json: series[0].raw[1] is 'x', not a number or null"),
    ({"name": "bad", "series": [{"raw": [1, 2, 3, 4]}, {"raw": [1, 2]}]}, None,
     "{d}/datasets/bad.json: the series have different lengths [2, 4]"),
    ({"name": "bad", "series": [{"raw": []}]}, None, "{d}/datasets/bad.json: the series are empty"),
    ({"name": "bad", "series": [{"raw": [1.0, 2.0]}]}, '{"good": {"1": [20', "{d}/annotations.json: not JSON"),
    # accepted silently: covering ignored the point while F1 counted it as a missed change
    ({"name": "bad", "series": [{"raw": [1.0] * 54}]}, {"good": {"1": []}, "bad": {"1": [500]}},
     "{d}/annotations.json: bad: annotator 1: change point 500 outside the series (54 values"),
    ({"name": "bad", "series": [{"raw": [1.0] * 54}]}, {"good": {"1": []}, "bad": {"2": [-40]}},
     "{d}/annotations.json: bad: annotator 2: change point -40 outside the series"),
    # two files naming one series: one of them was dropped without a word
    ({"name": "good", "series": [{"raw": [1.0] * 30}]}, {"good": {"1": []}},
     "{d}/datasets/bad.json and {d}/datasets/good.json both name the series good"),
])
def test_malformed_tcpd_data_is_one_line_naming_the_file(tmp_path, capsys, bad, annotations, message):
    root = tmp_path / "d"
    if annotations is None:
        annotations = {"good": {"1": [20]}, "bad": {"1": []}}
    write_tcpd(root, {"good": GOOD, "bad": bad}, annotations)
    assert main(["eval", "tcpd", str(root)]) == 2
    assert error_line(capsys).startswith("ratiowatch eval tcpd: " + message.format(d=root))


@pytest.mark.parametrize("desc, files, message", [
    # FileNotFoundError traceback
    ("good,10,50\nghost,10,5\n", {}, "{d}/datasets/ghost.txt not found (listed in {d}/desc.txt line 2)"),
    # one-line errors that did not say which file
    ("good,10,50\nbad,10,5O\n", {"bad": "1\n2\n3\n"}, "{d}/desc.txt line 2: bad: change points must be integers"),
    ("good,10,50\nbad,10,2\n", {"bad": "1\n2\nfoo\n4\n"}, "{d}/datasets/bad.txt: not one number per line"),
    ("good,10,50\nbad,10\n", {"bad": ""}, "{d}/datasets/bad.txt: expected one number per line; got no values"),
    # accepted silently
    ("good,10,5000\n", {}, "{d}/desc.txt line 1: good: change point 5000 outside the series (100 values)"),
    ("good,10\ngood,10,50\n", {}, "{d}/desc.txt lists good twice (lines 1 and 2)"),
])
def test_malformed_tssb_data_is_one_line_naming_the_file(tmp_path, capsys, desc, files, message):
    root = write_tssb(tmp_path / "d", desc, {"good": [float(i % 5) for i in range(100)], **files})
    assert main(["eval", "tssb", str(root)]) == 2
    assert error_line(capsys).startswith("ratiowatch eval tssb: " + message.format(d=root))


@pytest.mark.parametrize("csv_text, message", [
    ("dataset,true_cps,found_cps,alarm_index,f1_margin_1pct\ngood,[50],[51],[60],1.0\n",
     "{f}: missing column(s) covering"),
    ("dataset,true_cps,found_cps,alarm_index,f1_margin_1pct,covering\ngood,[50],[51,,60],1.0,0.99\n",
     "{f} line 2: more fields than the header"),
    ('dataset,true_cps,found_cps,alarm_index,f1_margin_1pct,covering\ngood,[50],"[5x]",[60],1.0,0.99\n',
     "{f} line 2: found_cps / alarm_index must be JSON lists of indices"),
])
def test_a_malformed_stored_result_is_refused_before_the_series_run(tmp_path, capsys, monkeypatch, csv_text,
                                                                      message):
    # a KeyError traceback (or a JSONDecodeError), raised only after every series had run
    import ratiowatch.stream.evaluate.runner as runner

    root = write_tssb(tmp_path / "d", "good,10,50\n", {"good": [float(i % 5) for i in range(100)]})
    (root / "streaming_results").mkdir()
    (root / "streaming_results" / "Stored.csv").write_text(csv_text)
    monkeypatch.setattr(runner, "evaluate_series", lambda *a, **k: pytest.fail("the series ran"))
    assert main(["eval", "tssb", str(root)]) == 2
    f = root / "streaming_results" / "Stored.csv"
    assert error_line(capsys).startswith("ratiowatch eval tssb: " + message.format(f=f))


def test_malformed_nab_data_is_one_line_naming_the_file(tmp_path, capsys, monkeypatch):
    from ratiowatch.stream.evaluate import nab
    from test_nab_eval import write_corpus

    write_corpus(tmp_path)
    monkeypatch.setattr(nab, "run_detector", lambda *a, **k: pytest.fail("the detector ran"))
    labels = tmp_path / "labels" / "combined_windows.json"
    good_labels = labels.read_text()
    profiles = tmp_path / "config" / "profiles.json"
    profiles.parent.mkdir()
    cases = [
        # a KeyError traceback
        (lambda: profiles.write_text(json.dumps({"standard": {"tpWeight": 1.0, "fnWeight": 1.0, "fpWeight": 0.11}})),
         f'{profiles}: profile standard has no "CostMatrix" object'),
        # scored silently as anomaly-free
        (lambda: labels.write_text(json.dumps({"cat/a.csv": []})),
         f"data/cat/b.csv has no entry in {labels}"),
        # errors naming no file
        (lambda: labels.write_text('{"cat/a.csv": [["2020-01-01 00:00:00"'), f"{labels}: not JSON"),
        (lambda: (tmp_path / "data" / "cat" / "b.csv").write_text("timestamp,value\nyesterday,1.0\n"),
         f"{tmp_path / 'data' / 'cat' / 'b.csv'}:2: bad row ['yesterday', '1.0']"),
    ]
    for damage, message in cases:
        damage()
        assert nab.run(nab_args(tmp_path)) == 2
        assert error_line(capsys).startswith(f"ratiowatch eval nab: {message}")
        profiles.unlink(missing_ok=True)
        labels.write_text(good_labels)


def odds_set(path, nan=False):
    rng = np.random.default_rng(0)
    X = np.vstack([rng.normal(size=(200, 3)), rng.normal(5, 1, size=(20, 3))])
    if nan:
        X[3, 1] = np.nan
    np.savez(path, X=X, y=np.r_[np.zeros(200), np.ones(20)].astype(int))


@pytest.mark.parametrize("damage, message", [
    # an EOFError traceback
    (lambda p: p.write_bytes(b""), "not a .npz archive (an empty file)"),
    # numpy's message about pickled data, naming no file
    (lambda p: p.write_text("hello, not a zip\n"), "not a .npz archive (not a zip archive)"),
    (lambda p: odds_set(p, nan=True), "X holds NaN or infinite values"),
])
def test_a_malformed_odds_file_is_one_line_naming_it_before_any_fit(tmp_path, capsys, monkeypatch, damage, message):
    from ratiowatch.stream.evaluate import odds

    odds_set(tmp_path / "aaa.npz")
    damage(tmp_path / "bbb.npz")
    monkeypatch.setattr(odds, "evaluate_dataset", lambda *a, **k: pytest.fail("a detector was fitted"))
    assert main(["eval", "odds", str(tmp_path), "--seeds", "1", "--no-baselines"]) == 2
    assert error_line(capsys) == f"ratiowatch eval odds: {tmp_path / 'bbb.npz'}: {message}" + (
        "; write one with numpy.savez(path, X=X, y=y)" if "archive" in message else "")


@pytest.mark.parametrize("extra", [["--no-baselines"], []])
def test_odds_leave_one_out_without_what_it_needs_fails_before_any_fit(tmp_path, capsys, monkeypatch, extra):
    # the check came after every candidate had run on every set
    from ratiowatch.stream.evaluate import odds

    odds_set(tmp_path / "aaa.npz")
    if extra:
        odds_set(tmp_path / "bbb.npz")
    monkeypatch.setattr(odds, "evaluate_dataset", lambda *a, **k: pytest.fail("a detector was fitted"))
    assert main(["eval", "odds", str(tmp_path), "--leave-one-out", *extra]) == 2
    assert error_line(capsys) == "ratiowatch eval odds: --leave-one-out needs the baselines and at least two data sets"


# -- eval compare ---------------------------------------------------------------------------------


def test_blas_libraries_loaded_in_another_order_are_no_environment_change():
    # the two lists were compared position by position: a different import order read as new kernels
    from ratiowatch.stream.evaluate.compare import environment_changes

    numpy_blas = {"library": "openblas", "version": "0.3.27", "architecture": "Haswell", "file": "libopenblas64_.so"}
    scipy_blas = {"library": "openblas", "version": "0.3.27", "architecture": "Haswell", "file": "libscipy_openblas.so"}
    base = {"environment": {"numpy": "2.0", "blas": [numpy_blas, scipy_blas]}}
    new = {"environment": {"numpy": "2.0", "blas": [scipy_blas, numpy_blas]}}
    assert environment_changes(base, new) == {}
    changed = {"environment": {"numpy": "2.0", "blas": [{**scipy_blas, "architecture": "Zen"}, numpy_blas]}}
    assert environment_changes(base, changed) == {"blas.1.architecture": ["Haswell", "Zen"]}


# -- peers ----------------------------------------------------------------------------------------


def test_a_peers_environment_without_claspy_skips_its_peers_with_a_note_on_stderr(tmp_path, capsys, monkeypatch):
    # every series came back failed: claspy and ClaSS were averaged in as 0.000, with no note
    import sys
    from pathlib import Path

    from ratiowatch.stream.evaluate import peers

    venv = Path(sys.executable).parent.parent  # this environment: it has no claspy
    monkeypatch.setenv(peers.VENV_ENV, str(venv))
    monkeypatch.setenv(peers.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setitem(sys.modules, "ruptures", None)  # the ruptures peers are not what is tested
    if peers.claspy_problem(peers.peers_python()) is None:
        pytest.skip("this environment has claspy")
    root = write_tcpd(tmp_path / "d", {"step": step()}, {"step": {"1": [50]}})
    assert main(["eval", "tcpd", str(root), "--peers", "--json"]) == 0
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    assert set(out["datasets"]["step"]["peers"]) == {"zero"}
    note = next(n for n in out["notes"] if n.startswith("claspy peers skipped: claspy is not importable"))
    assert "make peers" in note and note in captured.err


# -- Ctrl-C ---------------------------------------------------------------------------------------


def test_a_ctrl_c_swallowed_by_a_ctypes_callback_still_stops_the_run(tmp_path, capsys, monkeypatch):
    # while numba compiles, the KeyboardInterrupt is raised inside one of llvmlite's ctypes callbacks,
    # where ctypes reports it as ignored: the run went on, printed its result and exited 0
    import ctypes
    import signal
    import types

    import ratiowatch.stream.detectors.offline as offline

    @ctypes.CFUNCTYPE(None)
    def callback():
        signal.raise_signal(signal.SIGINT)

    def replay(x, **kwargs):
        callback()  # the interrupt arrives here and is swallowed
        return types.SimpleNamespace(change_points=[50])

    monkeypatch.setattr(offline, "replay", replay)
    root = write_tssb(tmp_path / "d", "a,10,50\nb,10,50\n", {n: [0.0] * 50 + [5.0] * 50 for n in "ab"})
    # as in a fresh process: a test that ran `ratiowatch run` in this one left the daemon's handler
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        assert main(["eval", "tssb", str(root), "--json"]) == 130
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # put back as it was
    finally:
        signal.signal(signal.SIGINT, previous)
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.strip().splitlines()[-1] == "ratiowatch: interrupted"
    assert "Exception ignored" not in captured.err

"""``ratiowatch eval nab`` end to end on a small NAB-like folder written in a temp dir."""

from __future__ import annotations

import argparse
import json

import numpy as np
import pytest

from ratiowatch.stream.evaluate import nab


def write_corpus(root, n=1500):
    rng = np.random.default_rng(0)
    stamps = np.datetime64("2020-01-01T00:00") + np.arange(n) * np.timedelta64(5, "m")
    windows = {}
    for cat, name, spike in (("cat", "a.csv", 1100), ("cat", "b.csv", None)):
        y = 10 + np.sin(np.arange(n) * 2 * np.pi / 96) + 0.05 * rng.normal(size=n)
        if spike is not None:
            y[spike : spike + 3] += 5.0
        (root / "data" / cat).mkdir(parents=True, exist_ok=True)
        with open(root / "data" / cat / name, "w") as fh:
            fh.write("timestamp,value\n")
            for t, v in zip(stamps, y):
                fh.write(f"{str(t).replace('T', ' ')}:00,{v}\n")
        windows[f"{cat}/{name}"] = [] if spike is None else [
            [f"{str(stamps[spike - 40]).replace('T', ' ')}:00.000000",
             f"{str(stamps[spike + 40]).replace('T', ' ')}:00.000000"]]
    (root / "labels").mkdir()
    (root / "labels" / "combined_windows.json").write_text(json.dumps(windows))


def test_eval_nab_cli_scores_and_writes_results(tmp_path, capsys):
    write_corpus(tmp_path)
    parser = argparse.ArgumentParser()
    nab.add_arguments(parser)
    out = tmp_path / "results"
    args = parser.parse_args([str(tmp_path), "--json", "--write-results", str(out)])
    assert nab.run(args) == 0
    obj = json.loads(capsys.readouterr().out)
    assert obj["benchmark"] == "nab" and "blas" in obj["environment"]
    assert set(obj["scores"]) == {"standard", "reward_low_FP_rate", "reward_low_FN_rate"}
    assert set(obj["thresholds"]) == set(obj["scores"])
    assert obj["scores"]["standard"] > 50  # the one obvious spike is found, early in its window
    written = out / "ratiowatch" / "cat" / "ratiowatch_a.csv"
    assert written.read_text().splitlines()[0] == "timestamp,value,anomaly_score"
    # the written file scores the same through the stored-results path
    res = nab.score_results_dir(tmp_path, out, "ratiowatch")
    assert res["standard"]["score"] == pytest.approx(obj["scores"]["standard"], abs=1e-3)


def test_eval_nab_rejects_a_folder_without_data(tmp_path, capsys):
    parser = argparse.ArgumentParser()
    nab.add_arguments(parser)
    assert nab.run(parser.parse_args([str(tmp_path)])) == 2
    assert "data/" in capsys.readouterr().err


def test_default_detector_reaches_the_nab_targets_on_the_dev_files():
    # issue #4 targets with the one default configuration (randomCutForest: 68.76 / 61.52)
    root = nab.default_bench_dir()
    if root is None:
        pytest.skip("../shared/bench/nab not found (set RATIOWATCH_BENCH to run the NAB target test)")
    obj = nab.evaluate(root)
    assert obj["files"] == 24
    assert obj["scores"]["standard"] >= 65.0, obj["scores"]
    assert obj["scores"]["reward_low_FP_rate"] >= 55.0, obj["scores"]


def test_eval_nab_leave_one_out_and_params(tmp_path, capsys):
    write_corpus(tmp_path)
    # a second category, so that each one is scored at the other's threshold
    (tmp_path / "data" / "other").mkdir()
    for name in ("a.csv", "b.csv"):
        (tmp_path / "data" / "other" / name).write_text((tmp_path / "data" / "cat" / name).read_text())
    windows = json.loads((tmp_path / "labels" / "combined_windows.json").read_text())
    windows.update({f"other/{k.split('/')[1]}": v for k, v in windows.items()})
    (tmp_path / "labels" / "combined_windows.json").write_text(json.dumps(windows))
    parser = argparse.ArgumentParser()
    nab.add_arguments(parser)
    args = parser.parse_args([str(tmp_path), "--json", "--leave-one-out", "--params", '{"debounce": 64}'])
    assert nab.run(args) == 0
    obj = json.loads(capsys.readouterr().out)
    assert obj["params"] == {"debounce": 64}
    loo = obj["leave_one_out"]["ratiowatch"]["standard"]
    assert set(loo["categories"]) == {"cat", "other"}
    assert loo["full_corpus"] == pytest.approx(obj["scores"]["standard"], abs=1e-3)
    # the text form prints the same table
    args = parser.parse_args([str(tmp_path), "--leave-one-out"])
    assert nab.run(args) == 0
    text = capsys.readouterr().out
    assert "left-out score per category" in text and "ratiowatch" in text
    # bad parameters are one clear line, exit 2
    assert nab.run(parser.parse_args([str(tmp_path), "--params", "{bad"])) == 2
    assert "--params is not valid JSON" in capsys.readouterr().err
    assert nab.run(parser.parse_args([str(tmp_path), "--params", '{"debounce": 7.5}'])) == 2
    assert "debounce must be an integer" in capsys.readouterr().err


def test_eval_nab_alerts_scores_the_daemons_alerts_at_a_fixed_threshold(tmp_path, capsys):
    write_corpus(tmp_path)
    parser = argparse.ArgumentParser()
    nab.add_arguments(parser)
    assert nab.run(parser.parse_args([str(tmp_path), "--json", "--alerts", "0.5"])) == 0
    al = json.loads(capsys.readouterr().out)["alerts"]
    assert al["threshold"] == 0.5 and al["debounce"] == 75
    for mode in ("rows", "events"):
        cat = al[mode]["standard"]["categories"]["cat"]
        assert cat["windows"] == 1 and cat["windows_detected"] == 1  # the spike of a.csv
    # one event can hold several rows at or above the threshold, never the other way round
    rows, events = (al[m]["standard"]["categories"]["cat"]["false_positive_rows"] for m in ("rows", "events"))
    assert events <= rows
    assert nab.run(parser.parse_args([str(tmp_path), "--alerts", "0.5"])) == 0
    assert "the daemon's alerts at the fixed threshold 0.5" in capsys.readouterr().out
    assert nab.run(parser.parse_args([str(tmp_path), "--alerts", "1.5"])) == 2
    assert "--alerts is a score threshold in (0, 1]" in capsys.readouterr().err


# --- labels and files that would be scored wrongly without a word --------------------------------
def _stamp(t):
    return str(t).replace("T", " ")


def _labelled_file(rows=100):
    stamps = np.datetime64("2020-01-01T00:00:00") + np.arange(rows) * np.timedelta64(60, "s")
    return stamps, nab.NabFile("c/f.csv", stamps, np.zeros(rows), [_stamp(t) for t in stamps])


@pytest.mark.parametrize("pairs", [[(50, 60), (50, 60)], [(40, 70), (50, 60)], [(50, 60), (55, 70)], [(60, 50)]],
                         ids=["duplicate", "nested", "overlapping", "reversed"])
def test_labels_with_overlapping_or_reversed_windows_are_refused_naming_file_and_window(tmp_path, pairs):
    stamps, f = _labelled_file()
    windows = [[_stamp(stamps[a]), _stamp(stamps[b])] for a, b in pairs]
    (tmp_path / "labels").mkdir()
    (tmp_path / "labels" / "combined_windows.json").write_text(json.dumps({"c/f.csv": windows}))
    with pytest.raises(ValueError, match=r"c/f\.csv: window \[2020-01-01 0\d:\d\d:00, 2020-01-01 0\d:\d\d:00\]") as err:
        nab.load_windows(tmp_path)
    assert "combined_windows.json" in str(err.value)
    with pytest.raises(ValueError, match=r"data/c/f\.csv: window .*(overlaps|ends before it starts)"):
        nab.rows_for_file(f, [(stamps[a], stamps[b]) for a, b in pairs])


def test_disjoint_windows_still_map_to_their_rows():
    stamps, f = _labelled_file()
    rows = nab.rows_for_file(f, [(stamps[60], stamps[70]), (stamps[30], stamps[40])])
    assert (rows.n_windows, rows.n_labelled) == (2, 2)
    assert np.flatnonzero(rows.window == 0).tolist() == list(range(30, 41))
    assert np.flatnonzero(rows.window == 1).tolist() == list(range(60, 71))


def test_a_data_file_out_of_time_order_is_refused_naming_file_and_row(tmp_path):
    stamps, _ = _labelled_file()
    order = np.r_[0:55, 56, 55, 57:100]
    f = nab.NabFile("c/f.csv", stamps[order], np.zeros(100), [_stamp(t) for t in stamps[order]])
    with pytest.raises(ValueError, match=r"data/c/f\.csv: row 57 .*2020-01-01 00:55:00.*time order"):
        nab.rows_for_file(f, [(stamps[50], stamps[60])])
    path = tmp_path / "f.csv"
    path.write_text("timestamp,value\n" + "".join(f"{_stamp(t)},{i}\n" for i, t in enumerate(stamps[order])))
    with pytest.raises(ValueError, match=r"f\.csv:58: timestamp '2020-01-01 00:55:00' is before"):
        nab.read_nab_csv(path)


def test_a_repeated_timestamp_is_kept_as_nab_data_holds_some(tmp_path):
    stamps, _ = _labelled_file()
    stamps = stamps.copy()
    stamps[56] = stamps[55]
    path = tmp_path / "f.csv"
    path.write_text("timestamp,value\n" + "".join(f"{_stamp(t)},{i}\n" for i, t in enumerate(stamps)))
    f = nab.read_nab_csv(path, "c/f.csv")
    assert len(f.values) == 100
    assert nab.rows_for_file(f, [(stamps[50], stamps[60])]).n_windows == 1


def test_a_data_file_without_rows_is_refused_naming_it(tmp_path):
    write_corpus(tmp_path)
    (tmp_path / "data" / "cat" / "b.csv").write_text("timestamp,value\n")
    with pytest.raises(ValueError, match=r"b\.csv: no rows after the header"):
        nab.evaluate(tmp_path)


def test_a_non_finite_stored_score_is_refused_naming_file_and_row(tmp_path):
    write_corpus(tmp_path)
    for name in ("a.csv", "b.csv"):
        lines = (tmp_path / "data" / "cat" / name).read_text().splitlines()[1:]
        out = tmp_path / "results" / "det" / "cat" / f"det_{name}"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text("timestamp,value,anomaly_score\n" + "".join(
            f"{ln},{'nan' if (name, k) == ('b.csv', 7) else 0.1}\n" for k, ln in enumerate(lines)))
    with pytest.raises(ValueError, match=r"det_b\.csv:9: anomaly_score 'nan' is not finite"):
        nab.score_results_dir(tmp_path, tmp_path / "results", "det")

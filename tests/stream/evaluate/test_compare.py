"""Paired comparison of two evaluation runs: the statistics, the series set, the command line."""

import json

import numpy as np
import pytest

from ratiowatch.stream.commands.cli import main
from ratiowatch.stream.evaluate.compare import compare_runs, format_comparison, load_run, paired


def _run(covers, benchmark="tssb", streaming=None, **extra):
    names = sorted(covers)
    halves = {n: ("tune", "check")[i % 2] for i, n in enumerate(names)}
    rows = {n: {"half": halves[n], "cover": covers[n], "f1": covers[n] / 2} for n in names}
    for n, v in (streaming or {}).items():
        rows[n]["streaming"] = {"cover": v}
    return {"benchmark": benchmark, "datasets": rows, **extra}


def test_the_paired_difference_and_its_standard_error_match_numpy():
    rng = np.random.default_rng(0)
    base_v, new_v = rng.uniform(size=9), rng.uniform(size=9)
    names = [f"s{i}" for i in range(9)]
    base = {n: {"cover": float(v)} for n, v in zip(names, base_v)}
    new = {n: {"cover": float(v)} for n, v in zip(names, new_v)}
    cell = paired(base, new, names, "ours", "cover")
    d = new_v - base_v
    assert cell["n"] == 9
    assert cell["diff"] == pytest.approx(d.mean(), abs=1e-4)
    assert cell["diff_se"] == pytest.approx(d.std(ddof=1) / 3.0, abs=1e-4)
    assert cell["base"] == pytest.approx(base_v.mean(), abs=1e-4) and cell["new"] == pytest.approx(new_v.mean(), abs=1e-4)
    assert cell["up"] == int((d > 0).sum()) and cell["down"] == int((d < 0).sum())
    # every series moved; the largest move comes first
    assert [m[0] for m in cell["moved"]] == [names[i] for i in np.argsort(-np.abs(d), kind="stable")]


def test_unchanged_series_are_neither_up_nor_down_nor_moved():
    base = _run({"a": 0.5, "b": 0.6, "c": 0.7, "d": 0.8})
    new = _run({"a": 0.5, "b": 0.6, "c": 0.9, "d": 0.8})
    res = compare_runs(base, new)
    check = res["halves"]["check"]["ours"]["cover"]  # b and d
    assert (check["diff"], check["diff_se"], check["up"], check["down"], check["moved"]) == (0.0, 0.0, 0, 0, [])
    tune = res["halves"]["tune"]["ours"]["cover"]  # a and c
    assert tune["diff"] == pytest.approx(0.1) and tune["up"] == 1 and tune["moved"] == [["c", 0.7, 0.9]]
    assert res["halves"]["all"]["ours"]["cover"]["n"] == 4


def test_a_method_is_compared_only_where_both_runs_have_it():
    base = _run({"a": 0.5, "b": 0.6}, streaming={"a": 0.1, "b": 0.2})
    new = _run({"a": 0.5, "b": 0.6})  # no streaming row
    assert "ours_streaming" not in compare_runs(base, new)["halves"]["all"]
    new = _run({"a": 0.5, "b": 0.6}, streaming={"a": 0.4})
    cell = compare_runs(base, new)["halves"]["all"]["ours_streaming"]["cover"]
    assert cell["n"] == 1 and cell["diff"] == pytest.approx(0.3) and cell["diff_se"] is None


def test_tcpd_runs_compare_their_univariate_default_set():
    base = _run({"a": 0.5, "apple": 0.1, "b": 0.6}, benchmark="tcpd", univariate=["a", "b"])
    new = _run({"a": 0.5, "apple": 0.9, "b": 0.6}, benchmark="tcpd", univariate=["a", "b"])
    res = compare_runs(base, new)
    assert res["series"] == 2 and res["scored"] == "univariate default set"
    assert res["halves"]["all"]["ours"]["cover"]["diff"] == 0.0
    # one run that lists the set is enough; runs written before the list existed compare every
    # series, and the report says so
    old = _run({"a": 0.5, "apple": 0.1, "b": 0.6}, benchmark="tcpd")
    assert compare_runs(old, new)["series"] == 2
    res = compare_runs(old, {k: v for k, v in new.items() if k != "univariate"})
    assert res["series"] == 3 and "does not list" in res["scored"]


def test_series_in_one_run_only_are_left_out_and_named():
    res = compare_runs(_run({"a": 0.5, "b": 0.6, "c": 0.1}), _run({"a": 0.5, "b": 0.7, "d": 0.2}))
    assert res["only_in_base"] == ["c"] and res["only_in_new"] == ["d"] and res["series"] == 2
    lines = format_comparison(res)
    assert any("only in the base run" in line and "c" in line for line in lines)


def test_configuration_changes_are_listed():
    base = _run({"a": 0.5}, config={"seed": 0, "width": None})
    new = _run({"a": 0.5}, config={"seed": 1, "width": None}, window_options={"robust_line": True})
    changes = compare_runs(base, new)["config_changes"]
    assert changes == {"seed": [0, 1], "window_options.robust_line": [None, True]}


def test_runs_of_different_benchmarks_are_refused():
    with pytest.raises(ValueError, match="different benchmarks"):
        compare_runs(_run({"a": 0.5}), _run({"a": 0.5}, benchmark="utsa"))


def test_the_seed_spread_of_either_run_is_shown_beside_the_difference():
    spread = {"by_half": {"check": {"ours": {"cover": {"mean": 0.6, "sd": 0.012, "per_seed": [0.59, 0.61]}}}}}
    base = _run({"a": 0.5, "b": 0.6}, seed_spread=spread)
    cell = compare_runs(base, _run({"a": 0.5, "b": 0.7}))["halves"]["check"]["ours"]["cover"]
    assert cell["seed_sd"] == [0.012, None]


def test_command_line_prints_a_table_or_json(tmp_path, capsys):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(_run({"x": 0.5, "y": 0.6, "z": 0.2})))
    b.write_text(json.dumps(_run({"x": 0.5, "y": 0.8, "z": 0.2})))
    assert main(["eval", "compare", str(a), str(b)]) == 0
    text = capsys.readouterr().out
    line = next(row for row in text.splitlines() if row.startswith("check") and " cover " in row)
    assert "+0.200" in line and "y 0.600->0.800" in line
    assert main(["eval", "compare", str(a), str(b), "--json", "--method", "ours"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert list(res["halves"]["check"]) == ["ours"] and res["halves"]["check"]["ours"]["f1"]["diff"] == 0.1


def test_command_line_errors_say_what_to_do(tmp_path, capsys):
    good, bad, broken = tmp_path / "good.json", tmp_path / "bad.json", tmp_path / "broken.json"
    good.write_text(json.dumps(_run({"x": 0.5})))
    bad.write_text(json.dumps({"mean": {"f1": 0.5}}))
    broken.write_text("{")
    assert main(["eval", "compare", str(good), str(bad)]) == 2
    assert "not an evaluation result" in capsys.readouterr().err
    assert main(["eval", "compare", str(good), str(broken)]) == 2
    assert "not JSON" in capsys.readouterr().err
    assert main(["eval", "compare", str(good), str(tmp_path / "missing.json")]) == 2
    assert "cannot read" in capsys.readouterr().err
    assert main(["eval", "compare", str(good), str(good), "--method", "ours_streaming"]) == 2
    assert "no series has results of ours_streaming" in capsys.readouterr().err
    assert main(["eval", "compare", str(good), str(good), "--method", "nonsense"]) == 2
    assert "unknown method" in capsys.readouterr().err
    with pytest.raises(ValueError, match="eval tcpd"):
        load_run(bad)


def _suite(t3_alarms, seeds=10, found=38):
    return {"benchmark": "synthetic", "mode": "streaming", "detector": "window",
            "null": {"suite": "null", "seeds": seeds, "cells": [{"kind": "t3"}],
                     "by_kind": {"ar0": {"alarms": 3, "per_10k": 0.231, "in_spec": True},
                                 "t3": {"alarms": t3_alarms, "per_10k": t3_alarms / 13.0, "in_spec": True}},
                     "overall": {"alarms": 3 + t3_alarms, "in_spec": True}},
            "change": {"suite": "change", "seeds": seeds, "by_kind": {"mean": {"found": found, "rate": found / 40}},
                       "overall": {"found": found}}}


def test_synthetic_suites_are_compared_kind_by_kind():
    from ratiowatch.stream.evaluate.compare import compare_suites, format_suite_comparison

    res = compare_suites(_suite(3), _suite(5))
    null = res["suites"]["null"]
    assert null["tables"]["by_kind"]["t3"]["alarms"] == [3, 5, 2]
    assert null["tables"]["by_kind"]["ar0"]["alarms"] == [3, 3, 0]  # flags (in_spec) are not numbers
    assert "in_spec" not in null["tables"]["by_kind"]["ar0"] and null["tables"]["overall"]["all"]["alarms"] == [6, 8, 2]
    assert null["settings_differ"] == {} and "cells" not in null["tables"]
    lines = format_suite_comparison(res)
    assert any("t3" in line and "alarms 3 -> 5" in line for line in lines)
    assert not any("ar0" in line for line in lines)  # unchanged rows are left out ...
    assert any("ar0" in line for line in format_suite_comparison(res, everything=True))  # ... unless asked
    assert "  no number changed (2 rows)" in lines  # the change suite


def test_the_kind_by_length_cells_of_a_synthetic_suite_are_compared_row_by_row():
    # the cells table (kind, then length) held no number at its first level and was left out
    from ratiowatch.stream.evaluate.compare import compare_suites, format_suite_comparison

    def run(ar0_15, t3_50):
        cells = {"ar0": {"15": {"series": 2, "rate": ar0_15, "in_spec": True}, "50": {"series": 2, "rate": 0.0}},
                 "t3": {"15": {"series": 2, "rate": 0.0}, "50": {"series": 2, "rate": t3_50}}}
        return {"benchmark": "synthetic", "mode": "offline",
                "null": {"suite": "null", "seeds": 2, "cells": cells, "overall": {"series": 8, "rate": 0.125}}}

    res = compare_suites(run(0.5, 0.0), run(0.0, 0.5))
    cells = res["suites"]["null"]["tables"]["cells"]
    assert cells["ar0.15"] == {"series": [2, 2, 0], "rate": [0.5, 0.0, -0.5]}
    assert cells["t3.50"]["rate"] == [0.0, 0.5, 0.5] and cells["ar0.50"]["rate"] == [0.0, 0.0, 0.0]
    lines = format_suite_comparison(res)
    assert any("cells" in line and "ar0.15" in line and "rate 0.500 -> 0.000" in line for line in lines)
    assert not any("ar0.50" in line for line in lines)


def test_numbers_nested_in_a_row_are_compared_by_their_path():
    # the anomaly suite's cells hold {"series", "found": {threshold: count}, "median_peak"} per kind x base
    from ratiowatch.stream.evaluate.compare import compare_suites

    def run(found):
        return {"benchmark": "synthetic-anomaly",
                "found": {"suite": "anomaly_found", "seeds": 5,
                          "cells": {"spike": {"ar0": {"series": 5, "found": {"3.0": found}, "median_peak": 4.5}}}}}

    row = compare_suites(run(4), run(5))["suites"]["found"]["tables"]["cells"]["spike.ar0"]
    assert row == {"series": [5, 5, 0], "found.3.0": [4, 5, 1], "median_peak": [4.5, 4.5, 0.0]}


def test_synthetic_runs_with_other_settings_are_compared_with_a_warning():
    from ratiowatch.stream.evaluate.compare import compare_suites, format_suite_comparison

    res = compare_suites(_suite(3, seeds=10), _suite(3, seeds=20))
    assert res["suites"]["null"]["settings_differ"] == {"seeds": [10, 20]}
    assert any("warning: the runs differ in seeds: 10 -> 20" in line for line in format_suite_comparison(res))
    with pytest.raises(ValueError, match="share no synthetic suite"):
        compare_suites({"null": {}, "benchmark": "synthetic"}, {"change": {}, "benchmark": "synthetic"})


def test_command_line_compares_synthetic_suites(tmp_path, capsys):
    a, b, run = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "run.json"
    a.write_text(json.dumps(_suite(3)))
    b.write_text(json.dumps(_suite(3, found=36)))
    run.write_text(json.dumps(_run({"x": 0.5})))
    assert main(["eval", "compare", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "found 38 -> 36" in out and "[null]" in out
    assert main(["eval", "compare", str(a), str(b), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["suites"]["change"]["tables"]["overall"]["all"]["found"] == [38, 36, -2]
    assert main(["eval", "compare", str(a), str(b), "--method", "ours"]) == 2
    assert "--method is for change-point runs" in capsys.readouterr().err
    assert main(["eval", "compare", str(run), str(a)]) == 2  # a benchmark run against a suite
    assert "share no synthetic suite" in capsys.readouterr().err


def test_other_results_are_compared_number_by_number_without_timings():
    from ratiowatch.stream.evaluate.compare import compare_numbers, format_number_comparison

    def nab(left_out, full, seconds):
        return {"benchmark": "nab", "files": 58, "params": {}, "seconds": seconds,
                "scores": {"standard": full, "reward_low_FP_rate": 65.7},
                "leave_one_out": {"ratiowatch": {"standard": {"mean": left_out, "full_corpus": full,
                                                              "categories": {"realTraffic": {"score": 71.5}}}}}}

    res = compare_numbers(nab(68.46, 71.05, 100.0), nab(70.10, 71.05, 90.0))
    assert res["changed"] == {"leave_one_out.ratiowatch.standard.mean": [68.46, 70.1, 1.64]}
    assert res["unchanged"] == 5  # files, two scores, full_corpus, realTraffic; seconds left out
    lines = format_number_comparison(res)
    assert lines[0] == "nab: 1 numbers changed, 5 unchanged"
    assert lines[1].startswith("environment: not recorded")
    assert "leave_one_out.ratiowatch.standard.mean: 68.46 -> 70.1 (+1.64)" in lines[2]
    with pytest.raises(ValueError, match="different evaluations"):
        compare_numbers(nab(1.0, 1.0, 1.0), {"benchmark": "odds"})


def test_command_line_compares_an_odds_result_number_by_number(tmp_path, capsys):
    def odds(auc):
        return {"benchmark": "odds", "seeds": 10, "datasets": {"cardio": {"auc": auc, "baselines": {"LOF": 0.92}}},
                "mean": {"auc": auc}}

    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(odds(0.95)))
    b.write_text(json.dumps(odds(0.97)))
    assert main(["eval", "compare", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "datasets.cardio.auc: 0.95 -> 0.97 (+0.02)" in out and "mean.auc" in out and "LOF" not in out


def test_a_different_blas_kernel_is_named_beside_the_numbers_it_may_have_moved(tmp_path, capsys):
    def env(arch):
        return {"numpy": "2.4.0", "blas": [{"library": "openblas", "version": "0.3.31", "architecture": arch}],
                "variables": {}}

    base = _run({"a": 0.5, "b": 0.6}, environment=env("SkylakeX"))
    new = _run({"a": 0.7, "b": 0.6}, environment=env("Haswell"))
    res = compare_runs(base, new)
    assert res["environment_changes"] == {"blas.0.architecture": ["SkylakeX", "Haswell"]}
    assert 'environment changes: blas.0.architecture "SkylakeX" -> "Haswell"' in format_comparison(res)
    assert compare_runs(base, base)["environment_changes"] == {}
    assert compare_runs(base, _run({"a": 0.5, "b": 0.6}))["environment_changes"] is None  # an older result
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(dict(_suite(3), environment=env("SkylakeX"))))
    b.write_text(json.dumps(dict(_suite(3), environment=env("Zen"))))
    assert main(["eval", "compare", str(a), str(b)]) == 0
    assert 'blas.0.architecture "SkylakeX" -> "Zen"' in capsys.readouterr().out

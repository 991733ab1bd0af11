"""The command line: every command is registered, and the estimator benchmark prints its JSON."""

import json
import subprocess
import sys

import pytest

from ratiowatch.stream.commands.cli import COMMANDS, build_parser, main


def test_help_lists_every_top_level_command(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for path, _module, _help in COMMANDS:
        assert path[0] in out


def test_every_registered_command_module_exists():
    parser = build_parser()
    one_file = {("eval", "tcpd"), ("eval", "tssb"), ("eval", "utsa"), ("eval", "nab"), ("eval", "odds"),
                ("validate",), ("run",), ("detect",)}
    for path, module, _help in COMMANDS:
        positional = ["x"] if path in one_file else ["x", "y"] if path == ("eval", "compare") else []
        args = parser.parse_args(list(path) + positional)
        assert not getattr(args, "_missing", None), f"{' '.join(path)}: {args._missing}"


def test_no_command_prints_help_and_fails(capsys):
    assert main([]) == 2
    assert "COMMAND" in capsys.readouterr().out


def test_bench_estimators_quick_prints_the_issue_fields():
    out = subprocess.run([sys.executable, "-m", "ratiowatch.stream.commands.cli", "bench", "estimators", "--quick", "--json"],
                         capture_output=True, text=True, check=True, timeout=600).stdout
    result = json.loads(out)
    assert result["ratio_vs_densratio_auto"] > 0
    assert result["incremental_step_us"] > 0
    assert set(result["batch"]) == {"ulsif", "rulsif", "kliep", "lsdd"}


def test_bench_novelty_quick_measures_both_streams_in_one_run():
    out = subprocess.run([sys.executable, "-m", "ratiowatch.stream.commands.cli", "bench", "novelty", "--quick", "--json"],
                         capture_output=True, text=True, check=True, timeout=600).stdout
    result = json.loads(out)
    assert set(result["speedup"]) == {"vs_HalfSpaceTrees", "vs_LocalOutlierFactor_same_prefix"}
    ts = result["time_series"]
    assert set(ts["us_per_row"]) == {"ours_batch", "ours_river_api", "HalfSpaceTrees_shingle8"}
    assert ts["auc"]["ours"] == ts["auc"]["ours_river_api"]  # the two forms score alike
    assert ts["auc"]["ours"] > 0.5 and ts["spikes"] == 4
    assert 0 < ts["ours_state_bytes"]["checkpoint"] < 4 * 2 ** 20  # no kernel rows in a state
    batch = result["batch"]
    assert set(batch["auc"]) == {"ours", "LocalOutlierFactor", "OneClassSVM", "IsolationForest"}
    assert batch["auc"]["ours"] > 0.7  # a shift of 1 sd in each of ten coordinates: 3.2 sd away
    assert set(batch["speedup_fit_and_score"]) == {"vs_LocalOutlierFactor", "vs_OneClassSVM", "vs_IsolationForest"}


def test_ratiowatch_detect_stays_the_function_after_every_module_is_imported():
    """No submodule may shadow a public name of the lazy ``ratiowatch`` namespace."""
    import importlib
    import pkgutil

    import ratiowatch

    for info in pkgutil.walk_packages(ratiowatch.__path__, "ratiowatch."):
        importlib.import_module(info.name)
    for name in ratiowatch.__all__:
        assert not isinstance(getattr(ratiowatch, name), type(ratiowatch)), f"ratiowatch.{name} is shadowed"
    assert callable(ratiowatch.detect)

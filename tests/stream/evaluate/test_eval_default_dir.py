"""Without a folder argument, ``ratiowatch eval`` looks for the benchmark next to the repository
(or under ``$RATIOWATCH_BENCH``); for an installed package that is next to the installed files, not
``../shared/bench`` under the working directory, so the message and ``--help`` name the folder they
looked in by its absolute path and say to pass the folder."""

from __future__ import annotations

import argparse

from ratiowatch.stream.evaluate import datasets
from ratiowatch.stream.evaluate.datasets import ENV_VAR, add_eval_arguments, eval_dir_problem


def _installed(monkeypatch, tmp_path):
    """The default of a package installed in ``tmp_path/site-packages``."""
    monkeypatch.delenv(ENV_VAR, raising=False)
    monkeypatch.setattr(datasets, "_DEFAULT", tmp_path / "site-packages" / "ratiowatch" / ".." / "shared" / "bench")
    return (tmp_path / "site-packages" / "shared" / "bench").resolve()


def test_the_missing_default_folder_is_named_by_its_absolute_path(monkeypatch, tmp_path):
    where = _installed(monkeypatch, tmp_path) / "odds"
    problem = eval_dir_problem(None, None, "odds")
    assert problem.startswith(f"no folder given and the default, {where}, was not found; pass an ODDS folder")
    assert "as the folder argument" in problem and ENV_VAR in problem


def test_the_missing_default_under_the_environment_variable_is_named_in_full(monkeypatch, tmp_path):
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "bench"))
    problem = eval_dir_problem(None, None, "tcpd")
    assert f"the default, {(tmp_path / 'bench' / 'tcpd').resolve()}, was not found" in problem


def test_help_names_the_default_folder_in_full(monkeypatch, tmp_path):
    where = _installed(monkeypatch, tmp_path) / "tssb"
    wide = lambda prog: argparse.HelpFormatter(prog, width=10_000)  # noqa: E731 -- no wrapping inside the path
    parser = argparse.ArgumentParser(prog="ratiowatch eval tssb", formatter_class=wide)
    add_eval_arguments(parser, "tssb")
    text = parser.format_help()
    assert f"(default: {where}, ${ENV_VAR}/tssb when set)" in text
    assert "../shared/bench/tssb" not in text


def test_a_found_default_or_a_given_folder_is_not_a_problem(monkeypatch, tmp_path):
    assert eval_dir_problem(None, tmp_path, "tcpd") is None
    assert eval_dir_problem(tmp_path, tmp_path, "tcpd") is None

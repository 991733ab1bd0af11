"""A failed series is scored 0 with its reason and the run goes on; an interrupt stops the run,
also when numba's dispatcher reports it as a SystemError caused by the KeyboardInterrupt."""

from __future__ import annotations

import numpy as np
import pytest

from ratiowatch.stream.commands.interrupts import failure_reason, interrupted
from ratiowatch.stream.evaluate.runner import evaluate_series


def _dispatcher_interrupt() -> SystemError:
    """What CPython raises when a compiled call returns while a signal handler's exception is set."""
    try:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as ki:
            raise SystemError("CPUDispatcher(<function f>) returned a result with an exception set") from ki
    except SystemError as exc:
        return exc


def test_an_ordinary_failure_is_described_by_type_and_message():
    assert failure_reason(ValueError("series is empty")) == "ValueError: series is empty"
    assert not interrupted(ValueError("x"))


def test_an_interrupt_anywhere_in_the_chain_is_an_interrupt():
    assert interrupted(KeyboardInterrupt()) and interrupted(_dispatcher_interrupt())
    try:  # implicit chaining (__context__) counts too
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            raise RuntimeError("while handling")
    except RuntimeError as exc:
        assert interrupted(exc)
    with pytest.raises(KeyboardInterrupt):
        failure_reason(_dispatcher_interrupt())


def _score(name, cps, t):
    return {"n": float(len(cps))}


DATA = {"a": np.zeros(20), "b": np.ones(20), "c": np.zeros(20)}
HALVES = {"a": "tune", "b": "check", "c": "tune"}


def test_a_failing_series_scores_zero_and_the_run_goes_on():
    def detect(x):
        if x[0] == 1.0:
            raise ValueError("bad series")
        return [10]

    out = evaluate_series(DATA, _score, HALVES, detect=detect)
    assert out["b"] == {"n": 0.0, "error": "ValueError: bad series", "half": "check", "seconds": out["b"]["seconds"]}
    assert out["a"]["change_points"] == [10] and out["c"]["change_points"] == [10]


def test_an_interrupt_reported_as_a_system_error_stops_the_run():
    seen = []

    def detect(x):
        seen.append(float(x[0]))
        if x[0] == 1.0:
            raise _dispatcher_interrupt()
        return [10]

    with pytest.raises(KeyboardInterrupt):
        evaluate_series(DATA, _score, HALVES, detect=detect)
    assert seen == [0.0, 1.0]  # series c was never started


def test_the_command_line_reports_such_an_interrupt_as_one(monkeypatch, capsys):
    from ratiowatch.stream.commands import cli

    def interrupted_run(argv):
        raise _dispatcher_interrupt()

    monkeypatch.setattr(cli, "_main", interrupted_run)
    assert cli.main(["eval", "tcpd", "."]) == 130
    assert capsys.readouterr().err.strip() == "ratiowatch: interrupted"

    def broken(argv):
        raise SystemError("a real one")

    monkeypatch.setattr(cli, "_main", broken)
    with pytest.raises(SystemError, match="a real one"):
        cli.main(["eval", "tcpd", "."])

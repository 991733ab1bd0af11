"""``ratiowatch bench daemon`` refuses a bad option before it starts a broker or produces a record:
one line on stderr, exit code 2."""

from __future__ import annotations

import pytest

from ratiowatch.stream.bench import daemon as bench_daemon
from ratiowatch.stream.commands.cli import main


@pytest.mark.parametrize("argv, message", [
    # a ZeroDivisionError (keys, partitions) or kafka's ValueError (partitions < 0) after the broker started
    (["--keys", "0", "--records", "10"], "--keys must be >= 1; got 0"),
    (["--partitions", "0"], "--partitions must be >= 1; got 0"),
    (["--partitions", "-2"], "--partitions must be >= 1; got -2"),
    # numpy's "expected non-negative integer" traceback
    (["--seed", "-1"], "--seed must be >= 0; got -1"),
    (["--records", "0"], "--records must be >= 1; got 0"),
    (["--soak", "-5"], "--soak must be >= 0; got -5"),
    # the detector's ValueError traceback after the records were produced
    (["--n", "3"], "--n 3: detector: n_min (6) must not exceed n (3)"),
    (["--kind", "auto", "--n", "3"], "--n 3: detector:"),
    # the config's ConfigError traceback (exit code 1): a window needs n >= 2
    (["--n", "1"], "--n 1: detector.n: must be >= 2; got 1"),
    (["--n", "0"], "--n 0: detector.n: must be >= 2; got 0"),
    (["--kind", "auto", "--n", "1"], "--n 1: detector:"),
    # exit code 1 before, like an error of the benchmark itself
    (["--records", "5", "--keys", "10"], "--records must be at least --keys; got 5 < 10"),
    (["--repeat", "0"], "--repeat must be >= 1; got 0"),
    (["--warmup-per-key", "-1"], "--warmup-per-key must be >= 0; got -1"),
])
def test_a_bad_bench_daemon_option_is_refused_before_the_broker_starts(capsys, monkeypatch, argv, message):
    monkeypatch.setattr(bench_daemon, "_start_broker", lambda: pytest.fail("the broker was started"))
    monkeypatch.setattr(bench_daemon, "_produce", lambda *a, **k: pytest.fail("records were produced"))
    with pytest.raises(SystemExit) as info:
        main(["bench", "daemon", "--records", "200", "--keys", "2", "--json", *argv])
    assert info.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"ratiowatch bench daemon: {message}"), captured.err


def test_the_smallest_valid_bench_daemon_options_pass_the_check():
    import argparse

    parser = argparse.ArgumentParser()
    bench_daemon.add_arguments(parser)
    args = parser.parse_args(["--records", "1", "--keys", "1", "--partitions", "1", "--n", "6", "--seed", "0",
                              "--warmup-per-key", "0", "--repeat", "1"])
    assert bench_daemon._option_problem(args) is None

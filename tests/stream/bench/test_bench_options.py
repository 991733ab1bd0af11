"""``ratiowatch bench ...`` option checks: a bad value is refused before any work, in one line on
stderr, with exit code 2."""

from __future__ import annotations

import pytest

from ratiowatch.stream.commands.cli import main


@pytest.mark.parametrize("argv, message", [
    # zero repetitions gave NaN ratios with exit 0; negative sizes a traceback after the toy runs
    (["wsvm", "--steps", "0"], "ratiowatch bench wsvm: --steps must be >= 1; got 0"),
    (["wsvm", "--refits", "0"], "ratiowatch bench wsvm: --refits must be >= 1; got 0"),
    (["wsvm", "--refits", "-3"], "ratiowatch bench wsvm: --refits must be >= 1; got -3"),
    (["wsvm", "--window", "-5"], "ratiowatch bench wsvm: --window must be >= 2; got -5"),
    (["wsvm", "--repeats", "0"], "ratiowatch bench wsvm: --repeats must be >= 1; got 0"),
    # numpy's "expected non-negative integer" traceback
    (["estimators", "--seed", "-1"], "ratiowatch bench estimators: --seed must be >= 0; got -1"),
    # the message went to stdout (into the JSON file), and 0 silently meant "the default"
    (["novelty", "--points", "500"], "ratiowatch bench novelty: --points must be >= 1000; got 500"),
    (["novelty", "--points", "0"], "ratiowatch bench novelty: --points must be >= 1000; got 0"),
    (["novelty", "--lof-points", "0"], "ratiowatch bench novelty: --lof-points must be >= 100; got 0"),
])
def test_a_bad_bench_option_is_refused_up_front_on_stderr(capsys, monkeypatch, argv, message):
    import importlib

    # each command's own name for it too: a module first imported while only common's was patched
    # kept the patch for good (`from .common import environment`), and a later test's run failed
    modules = [importlib.import_module(f"ratiowatch.stream.bench.{name}")  # all imported before any patch
               for name in ("common", "cpd", "daemon", "estimators", "novelty", "wsvm")]
    for module in modules:
        if hasattr(module, "environment"):
            monkeypatch.setattr(module, "environment", lambda: pytest.fail("the benchmark started"))
    assert main(["bench", *argv, "--quick", "--json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.strip() == message


def test_bench_daemon_at_a_broker_that_does_not_answer_says_so_in_one_line(capsys, monkeypatch):
    # a KafkaTimeoutError traceback after half a minute
    pytest.importorskip("kafka")
    import kafka.admin
    from kafka.errors import KafkaTimeoutError

    def unreachable(**kwargs):
        raise KafkaTimeoutError("Failed to update metadata after 30.0 secs.")

    monkeypatch.setattr(kafka.admin, "KafkaAdminClient", unreachable)
    assert main(["bench", "daemon", "--bootstrap", "127.0.0.1:9", "--records", "100", "--keys", "10", "--json"]) == 4
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.strip() == ("bench daemon: no broker answers at 127.0.0.1:9 (--bootstrap; KafkaTimeoutError); "
                                    "is the broker running and the address right?")

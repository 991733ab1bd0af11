"""Smoke test of ``ratiowatch bench wsvm --quick --json`` (structure and exactness, never speed)."""

import json

from ratiowatch.stream.commands.cli import main


def test_bench_wsvm_quick_prints_one_json_object(capsys):
    assert main(["bench", "wsvm", "--quick", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["benchmark"] == "wsvm" and out["quick"] is True
    assert [r["n"] for r in out["toy"]] == [200, 400]
    for r in out["toy"]:
        assert 0.5 <= r["events_per_point"] <= 1.2  # Table 1: about 0.8-0.9 events per point
        assert r["kkt_violation"] < 1e-6
        assert r["sklearn_refits_timed"] >= 1
    assert out["stream"]["kkt_violation"] < 1e-6
    assert out["stream"]["events_per_step_mean"] > 0
    for key in ("ratio_toy", "ratio_stream"):
        assert out[key] > 0

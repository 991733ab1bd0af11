"""``ratiowatch bench daemon``: its data, and one tiny run through a real broker in which the daemon
must raise exactly the alarms the detectors raise alone on the same records (no speed asserted)."""

from __future__ import annotations

import argparse
import json

import numpy as np
import pytest

from ratiowatch.stream.bench import daemon as bench


def test_records_round_robin_keys_with_increasing_timestamps_and_regime_changes():
    rows = bench._records(4 * 600, 4, seed=3)
    assert [r["key"] for r in rows[:5]] == ["key-0000", "key-0001", "key-0002", "key-0003", "key-0000"]
    per_key = {}
    for r in rows:
        per_key.setdefault(r["key"], []).append((r["timestamp"], r["value"]))
    for series in per_key.values():
        ts = [t for t, _ in series]
        assert ts == list(range(600))
        v = np.array([x for _, x in series])
        seg = bench.SEGMENT
        quiet, loud = v[:seg], v[seg:2 * seg]   # regime 0, then regime 1 (x3, +2)
        assert loud.std() > 2 * quiet.std() and loud.mean() > quiet.mean() + 1
    more = bench._records(8, 4, seed=4, t0=600)  # a continuation keeps each key's clock going
    assert [r["timestamp"] for r in more] == [600] * 4 + [601] * 4
    assert bench._records(40, 4, seed=3) == bench._records(40, 4, seed=3)


def test_partition_of_a_key_is_stable_across_processes():
    assert [bench._partition(f"key-{k:04d}", 4) for k in range(6)] == [0, 1, 2, 3, 0, 1]


@pytest.mark.broker
def test_tiny_bench_run_daemon_alarms_equal_detector_alarms_and_soak_reports_rss(kafka_broker, capsys):
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    # 200 warm-up + 400 timed records per key: the timed part holds each key's first two regime
    # changes (bench.SEGMENT = 250), so both paths must raise the same, non-empty set of alarms. At
    # 250 the growing windows hold 12 subsequences, where a calibrated 1e-4 threshold sits near the
    # largest PE a window can reach (found on neither key); at 500 they hold 25 (found on both)
    args = parser.parse_args(["--records", "800", "--keys", "2", "--warmup-per-key", "200", "--repeat", "1",
                              "--n", "25", "--soak", "600", "--bootstrap", kafka_broker.bootstrap, "--json"])
    assert bench.run(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["records"] == 800 and out["warmup_records"] == 400
    assert out["alerts_end_to_end"] == out["alarms_detector_only"] > 0
    for k in ("end_to_end_msgs_per_s", "detector_msgs_per_s", "null_detector_msgs_per_s", "ratio_to_detector"):
        assert out[k] > 0
    share = out["cpu_time"]["ratio_to_detector_in_run"]
    assert len(share) == 1 and 0 < share[0] <= 1
    soak = out["soak"]
    assert soak["records"] == 600 and len(soak["rss_mb_samples"]) == 20
    assert soak["rss_mb_final"] > 0 and soak["duration_s"] > 0


def test_bench_rejects_bad_sizes():
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    with pytest.raises(SystemExit, match="at least --keys"):
        bench.run(parser.parse_args(["--records", "5", "--keys", "10"]))
    with pytest.raises(SystemExit, match="--repeat"):
        bench.run(parser.parse_args(["--repeat", "0"]))


def tiny_run(kind: str, records: int, broker, capsys) -> dict:
    """The JSON of a bench run of ``kind`` with 2 keys, 300 warm-up records per key and one repeat."""
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    args = parser.parse_args(["--kind", kind, "--records", str(records), "--keys", "2", "--warmup-per-key", "300",
                              "--repeat", "1", "--bootstrap", broker.bootstrap, "--json"])
    assert bench.run(args) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.broker
def test_tiny_bench_run_of_the_anomaly_kind_alerts_as_its_detectors_do_alone(kafka_broker, capsys, monkeypatch):
    plain = bench._records

    def with_spikes(n, keys, seed, t0=0):  # the regime changes are no anomalies once seen: add some
        rows = plain(n, keys, seed, t0)
        for r in rows:
            if r["timestamp"] in (420, 640):
                r["value"] += 40.0  # far out against both regimes (sd 1 and sd 3)
        return rows

    monkeypatch.setattr(bench, "_records", with_spikes)
    # 300 warm-up + 500 timed records per key: the detector's warm-up (200 rows) and its score
    # history's minimum (100 scores) are behind, and the spikes are timed
    out = tiny_run("anomaly", 1000, kafka_broker, capsys)
    assert out["kind"] == "anomaly" and out["detector_n"] is None
    assert out["alerts_end_to_end"] == out["alarms_detector_only"] > 0
    assert out["end_to_end_msgs_per_s"] > 0 and "end_to_end_msgs_per_s" not in out["targets"]


@pytest.mark.broker
def test_tiny_bench_run_of_the_auto_kind_alerts_as_its_detectors_do_alone(kafka_broker, capsys):
    out = tiny_run("auto", 2000, kafka_broker, capsys)
    assert out["kind"] == "auto" and out["detector_n"] == 25
    # the regime changes of these aperiodic keys are found by the window detector the keys stay on
    assert out["alerts_end_to_end"] == out["alarms_detector_only"] > 0

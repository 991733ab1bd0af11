"""Loaders and the eval commands on the development benchmark data (skipped when it is absent)."""

import json

import pytest

from ratiowatch.stream.evaluate.datasets import SKIP_REASON, bench_dir

TCPD = bench_dir("tcpd")
TSSB = bench_dir("tssb")


def test_bench_dir_env_override(tmp_path, monkeypatch):
    monkeypatch.setenv("RATIOWATCH_BENCH", str(tmp_path))
    assert bench_dir() == tmp_path.resolve()
    assert bench_dir("tcpd") is None


@pytest.mark.skipif(TCPD is None, reason=SKIP_REASON)
def test_tcpd_loader_reads_missing_values_and_dimensions():
    from ratiowatch.stream.evaluate.tcpd import load_dir

    data, ann = load_dir(TCPD)
    assert data["apple"].shape == (622, 2) and data["debt_ireland"].shape == (21, 1)
    assert set(data) <= set(ann)


@pytest.mark.skipif(TCPD is None, reason=SKIP_REASON)
def test_eval_tcpd_json_layout(tmp_path, capsys):
    # a two-series copy keeps the test fast; layout and averaging rules are what is checked
    from ratiowatch.stream.commands.cli import main

    src = json.loads((TCPD / "annotations.json").read_text())
    (tmp_path / "datasets").mkdir()
    for name in ("ozone", "quality_control_1"):
        (tmp_path / "datasets" / f"{name}.json").write_text((TCPD / "datasets" / f"{name}.json").read_text())
    (tmp_path / "annotations.json").write_text(json.dumps({k: src[k] for k in ("ozone", "quality_control_1")}))
    assert main(["eval", "tcpd", str(tmp_path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["benchmark"] == "tcpd" and set(out["datasets"]) == {"ozone", "quality_control_1"}
    # quality_control_* is excluded from the univariate mean
    assert out["mean"]["f1"] == pytest.approx(out["datasets"]["ozone"]["f1"])
    assert 0.0 <= out["mean"]["cover"] <= 1.0 and out["mean"]["f1_multi"] is None
    # --seeds adds the Monte-Carlo spread of the permutation null without changing seed 0's numbers
    assert main(["eval", "tcpd", str(tmp_path), "--json", "--seeds", "2"]) == 0
    two = json.loads(capsys.readouterr().out)
    assert two["mean"] == out["mean"] and two["seed_spread"]["seeds"] == 2
    f1 = two["seed_spread"]["metrics"]["f1"]
    assert f1["per_seed"][0] == pytest.approx(out["mean"]["f1"], abs=1e-4)
    assert f1["mean"] == pytest.approx(sum(f1["per_seed"]) / 2, abs=1e-4) and "f1_multi" not in two["seed_spread"]["metrics"]


@pytest.mark.skipif(TSSB is None, reason=SKIP_REASON)
def test_tssb_loader_and_eval_on_one_series(tmp_path):
    from ratiowatch.stream.evaluate.tssb import evaluate, load_dir

    series = load_dir(TSSB)
    names = [s[0] for s in series]
    assert len(series) == 25 and "Chinatown" in names
    out = evaluate(TSSB, names=["Chinatown"], plot_dir=tmp_path)
    r = out["datasets"]["Chinatown"]
    assert "error" not in r and 0.0 <= r["cover"] <= 1.0
    assert (tmp_path / "Chinatown.png").read_bytes()[:4] == b"\x89PNG"

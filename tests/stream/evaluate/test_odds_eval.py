"""ODDS inlier-based protocol: splits, standardisation, baselines reproducing the bench table, CLI."""

from __future__ import annotations

import argparse
import json

import numpy as np
import pytest

from ratiowatch.stream.evaluate import odds
from ratiowatch.stream.evaluate.datasets import SKIP_REASON, bench_dir

ODDS = bench_dir("odds")


def synthetic(seed=0):
    rng = np.random.default_rng(seed)
    X = np.vstack([rng.normal(size=(300, 4)) * [1, 10, 100, 0.1], rng.normal(4.0, 1.0, size=(20, 4)) * [1, 10, 100, 0.1]])
    y = np.r_[np.zeros(300), np.ones(20)].astype(int)
    return X, y


def test_split_is_stratified_and_standardised_on_training_inliers():
    X, y = synthetic()
    ref, test, y_te = odds.split_standardise(X, y, seed=3)
    assert ref.shape[0] == int(round(0.6 * 300))  # only inliers of the 60% part
    assert y_te.sum() == 8  # 40% of the 20 outliers
    np.testing.assert_allclose(ref.mean(axis=0), 0, atol=1e-12)
    np.testing.assert_allclose(ref.std(axis=0), 1, atol=1e-12)
    assert test.shape == (128, 4)


def test_evaluate_dataset_beats_chance_and_runs_baselines():
    X, y = synthetic(1)
    res = odds.evaluate_dataset(X, y, seeds=range(2))
    assert res["auc"] > 0.95
    assert set(res["baselines"]) == set(odds.BASELINES)


def test_bad_labels_are_rejected():
    X, y = synthetic()
    with pytest.raises(ValueError, match="both labels"):
        odds.evaluate_dataset(X, np.zeros_like(y))
    with pytest.raises(ValueError, match="one label per row"):
        odds.evaluate_dataset(X, y[:-1])


@pytest.mark.skipif(ODDS is None, reason=SKIP_REASON)
@pytest.mark.parametrize("name, expected", [("vowels", {"OneClassSVM": 0.858, "LocalOutlierFactor": 0.961}),
                                            ("cardio", {"OneClassSVM": 0.974, "LocalOutlierFactor": 0.920})])
def test_baselines_reproduce_the_bench_table(name, expected):
    with np.load(ODDS / f"{name}.npz") as d:
        X, y = d["X"].astype(float), d["y"]
    from sklearn.metrics import roc_auc_score

    for b, target in expected.items():
        aucs = []
        for s in range(10):
            ref, test, y_te = odds.split_standardise(X, y, s)
            model = odds._baseline(b, s).fit(ref)
            aucs.append(roc_auc_score(y_te, -model.score_samples(test)))
        assert np.mean(aucs) == pytest.approx(target, abs=0.0015)


@pytest.mark.skipif(ODDS is None, reason=SKIP_REASON)
def test_cli_json_shape_on_one_small_dataset(capsys):
    parser = argparse.ArgumentParser()
    odds.add_arguments(parser)
    args = parser.parse_args([str(ODDS), "--json", "--seeds", "2", "--only", "vowels"])
    assert odds.run(args) == 0
    obj = json.loads(capsys.readouterr().out)
    assert obj["benchmark"] == "odds"
    assert set(obj["datasets"]) == {"vowels"}
    assert obj["datasets"]["vowels"]["auc"] > 0.9  # full protocol: 0.992 (LOF 0.961)
    assert set(obj["mean"]["baselines"]) == set(odds.BASELINES)


def test_leave_one_set_out_chooses_on_the_other_sets():
    cands = {"a": {"s1": 0.9, "s2": 0.8, "s3": 0.70}, "b": {"s1": 0.7, "s2": 0.9, "s3": 0.95}}
    best = {"s1": 0.85, "s2": 0.85, "s3": 0.80}
    res = odds.leave_one_set_out(cands, best)
    # s1 held out: on s2, s3 b has mean 0.925 > a's 0.75 -> b, scored 0.7 on s1
    assert res["sets"]["s1"] == {"chosen": "b", "auc": 0.7, "best_baseline": 0.85, "gap": pytest.approx(-0.15)}
    # s2 held out: a 0.8 vs b 0.825 on s1, s3 -> b; s3 held out: a 0.85 vs b 0.8 on s1, s2 -> a
    assert res["sets"]["s2"]["chosen"] == "b" and res["sets"]["s3"]["chosen"] == "a"
    assert res["mean"] == pytest.approx((0.7 + 0.9 + 0.7) / 3)
    assert res["mean_best_baseline"] == pytest.approx(2.5 / 3)
    assert res["below_best_baseline_by_more_than_gap"] == ["s1", "s3"]


def test_cli_leave_one_out_on_synthetic_sets(tmp_path, capsys):
    for k in range(2):
        X, y = synthetic(k)
        np.savez(tmp_path / f"set{k}.npz", X=X, y=y)
    parser = argparse.ArgumentParser()
    odds.add_arguments(parser)
    args = parser.parse_args([str(tmp_path), "--json", "--seeds", "1", "--leave-one-out", "--candidates", "local"])
    assert odds.run(args) == 0
    obj = json.loads(capsys.readouterr().out)
    assert set(obj["datasets"]["set0"]["candidates"]) == {"lcv", "local"}  # the default always competes
    assert obj["environment"]["numpy"] == np.__version__  # what the result ran on
    lo = obj["leave_one_out"]
    assert set(lo["sets"]) == {"set0", "set1"}
    for name, v in lo["sets"].items():
        assert v["auc"] == obj["datasets"][name]["candidates"][v["chosen"]]
    assert odds.run(parser.parse_args([str(tmp_path), "--leave-one-out", "--candidates", "wide"])) == 2
    assert "unknown candidate" in capsys.readouterr().err

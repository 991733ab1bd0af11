"""The synthetic suite for anomaly scores: generators as specified, scorers on hand-made detectors."""

import json

import numpy as np
import pytest

from ratiowatch.stream.evaluate import anomaly_suite as A
from ratiowatch.stream.evaluate.synthetic import NULL_KINDS, null_series


class Fixed:
    """A detector whose scores are a function of the series (``rule(x) -> scores``)."""

    def __init__(self, rule):
        self.rule = rule

    def score_series(self, x):
        return self.rule(np.asarray(x))


def factory_of(rule):
    return lambda seed: (lambda: Fixed(rule))


def test_nominal_rate_is_the_maps_tail_probability():
    assert A.nominal_per_10k(0.3) == pytest.approx(10.0)
    assert A.nominal_per_10k(0.5) == pytest.approx(0.1)
    assert A.nominal_per_10k(1.0) == pytest.approx(1e-6)


def test_flags_are_counted_at_or_above_each_threshold():
    s = np.array([0.0, 0.3, 0.29, 0.5, 1.0, 0.7, 0.69, 1.0])
    brute = [1e4 * sum(v >= t for v in s) / len(s) for t in A.THRESHOLDS]
    assert A.flags_per_10k(s) == pytest.approx(brute)
    with pytest.raises(ValueError, match="no scores"):
        A.flags_per_10k(np.zeros(0))


def test_the_switching_kind_is_an_on_off_schedule():
    x = A.suite_series("switching100", 10000, seed=2)
    assert x.shape == (10000,) and np.array_equal(x, A.suite_series("switching100", 10000, seed=2))
    assert not np.array_equal(x, A.suite_series("switching100", 10000, seed=3))
    high = x > 0.5
    assert 0.37 < high.mean() < 0.43  # high for 40 % of each cycle
    assert 180 <= np.count_nonzero(np.diff(high.astype(int))) <= 220  # two switches per cycle of ~100 rows
    assert np.std(x[high] - 1.0) == pytest.approx(0.05, rel=0.1)
    assert np.array_equal(A.suite_series("ar05", 500, 1), null_series("ar05", 500, 1))
    with pytest.raises(ValueError, match="length"):
        A.suite_series("switching100", 0)


def test_local_scale_is_the_innovation_sd_and_ignores_level():
    rng = np.random.default_rng(0)
    assert A.local_scale(2.0 * rng.normal(size=20000)) == pytest.approx(2.0, rel=0.03)
    assert A.local_scale(np.cumsum(rng.normal(size=20000))) == pytest.approx(1.0 / np.sqrt(2.0), rel=0.03)
    assert A.local_scale(np.full(50, 3.0)) == 1.0


@pytest.mark.parametrize("kind", A.ANOMALY_KINDS)
@pytest.mark.parametrize("base", A.BASE_KINDS)
def test_an_anomaly_changes_only_its_rows_of_the_null_series(kind, base):
    case = A.anomaly_series(kind, base, seed=3)
    clean = A.suite_series(base, A.ANOMALY_LENGTH, 3)
    assert case.x.shape == (A.ANOMALY_LENGTH,) and case.start == A.ANOMALY_ROW
    outside = np.ones(A.ANOMALY_LENGTH, dtype=bool)
    outside[case.start:case.end] = False
    assert np.array_equal(case.x[outside], clean[outside])
    assert not np.array_equal(case.x[case.start:case.end], clean[case.start:case.end])
    assert np.array_equal(case.x, A.anomaly_series(kind, base, seed=3).x)


def test_anomalies_have_their_specified_shape_and_size():
    clean = null_series("ar0", A.ANOMALY_LENGTH, 0)
    sd = A.local_scale(clean)
    spike = A.anomaly_series("spike", "ar0", 0).x - clean
    assert spike[A.ANOMALY_ROW] == pytest.approx(6.0 * sd) and np.count_nonzero(spike) == 1
    glitch = A.anomaly_series("glitch", "ar0", 0).x - clean
    assert np.allclose(glitch[A.ANOMALY_ROW:A.ANOMALY_ROW + 10], 4.0 * sd) and np.count_nonzero(glitch) == 10
    flat = A.anomaly_series("flatline", "ar0", 0).x
    assert np.all(flat[A.ANOMALY_ROW:A.ANOMALY_ROW + 30] == clean[A.ANOMALY_ROW - 1])
    burst = A.anomaly_series("burst", "ar0", 0).x - clean
    assert 2.0 * sd < burst[A.ANOMALY_ROW:A.ANOMALY_ROW + 30].std() < 4.0 * sd
    with pytest.raises(ValueError, match="unknown anomaly kind"):
        A.anomaly_series("dip", "ar0")


def test_null_part_counts_every_row_of_a_detector_that_always_flags():
    res = A.score_anomaly_null(factory_of(lambda x: np.ones(x.shape[0])), seeds=2, lengths=(300, 500),
                               kinds=("ar0", "counts"))
    assert res["by_kind"]["ar0"] == {"0.3": 1e4, "0.5": 1e4, "0.7": 1e4, "1.0": 1e4, "rows": 1600}
    assert res["cells"]["counts"]["300"]["rows"] == 600 and res["within_target"] is False
    quiet = A.score_anomaly_null(factory_of(lambda x: np.zeros(x.shape[0])), seeds=1, lengths=(300,),
                                 kinds=("ar0",))
    assert quiet["by_kind"]["ar0"]["0.5"] == 0.0 and quiet["within_target"] is True


def test_null_part_pools_lengths_by_rows():
    # flags exactly the first row: 1 of 300 and 1 of 700 rows -> 2 per 1,000 pooled
    res = A.score_anomaly_null(factory_of(lambda x: np.r_[1.0, np.zeros(x.shape[0] - 1)]), seeds=1,
                               lengths=(300, 700), kinds=("ar0",))
    assert res["by_kind"]["ar0"]["1.0"] == pytest.approx(20.0)
    assert res["cells"]["ar0"]["300"]["1.0"] == pytest.approx(1e4 / 300, abs=1e-3)


def test_a_failing_series_is_reported_and_the_suite_goes_on():
    def rule(x):
        if x.shape[0] == 300:
            raise RuntimeError("boom")
        return np.zeros(x.shape[0])

    res = A.score_anomaly_null(factory_of(rule), seeds=1, lengths=(300, 400), kinds=("ar0",))
    assert len(res["errors"]) == 1 and "boom" in res["errors"][0]["error"]
    assert res["by_kind"]["ar0"]["rows"] == 400


def test_a_detector_that_fails_is_not_within_the_target_and_the_table_says_so():
    def rule(x):
        if x.shape[0] == 300:
            raise RuntimeError("boom")
        return np.zeros(x.shape[0])

    # the series of 300 rows fail; those of 400 score far below the target
    res = A.score_anomaly_null(factory_of(rule), seeds=2, lengths=(300, 400), kinds=("ar0", "t3"))
    assert res["by_kind"]["ar0"][str(A.TARGET_SCORE)] == 0.0 and len(res["errors"]) == 4
    assert res["within_target"] is False
    lines = A.format_null(res)
    assert lines[-1] == "4 series failed, left out of the scores (ar0/300 seed 0: RuntimeError: boom); " \
                        "not within the target"
    assert "* above the target" not in lines[0]  # no kind is above it: the failures are why
    # a kind whose series all fail leaves by_kind: it must not leave the verdict with it
    everywhere = A.score_anomaly_null(factory_of(rule), seeds=1, lengths=(300,), kinds=("ar0",))
    assert everywhere["by_kind"] == {} and everywhere["within_target"] is False
    clean = A.score_anomaly_null(factory_of(lambda x: np.zeros(x.shape[0])), seeds=1, lengths=(300,),
                                 kinds=("ar0",))
    assert clean["within_target"] is True and not any("failed" in line for line in A.format_null(clean))


def test_the_found_table_says_how_many_series_failed():
    def rule(x):
        if x[A.ANOMALY_ROW] > 3:  # only the spike on ar0 reaches 3
            raise RuntimeError("boom")
        return np.zeros(x.shape[0])

    res = A.score_anomaly_found(factory_of(rule), 1, ("spike", "flatline"), ("ar0",))
    assert A.format_found(res)[-1] == "1 series failed, left out of the scores (spike/ar0 seed 0: RuntimeError: boom)"


@pytest.mark.parametrize("rule, reason", [
    (lambda x: np.full(x.shape[0], np.nan), "non-finite scores (NaN or infinity) on 300 of 300 rows"),
    (lambda x: np.where(np.arange(x.shape[0]) % 2 == 0, np.nan, 1.0),
     "non-finite scores (NaN or infinity) on 150 of 300 rows"),
    (lambda x: np.r_[np.zeros(x.shape[0] - 1), np.inf], "non-finite scores (NaN or infinity) on 1 of 300 rows"),
    (lambda x: np.zeros(10), "10 scores for 300 rows"),
    (lambda x: np.zeros((x.shape[0], 2)), "scores of shape (300, 2) for 300 rows"),
], ids=["all-nan", "half-nan", "one-inf", "short", "two-columns"])
def test_scores_that_are_not_one_finite_value_per_row_are_reported_not_counted(rule, reason):
    res = A.score_anomaly_null(factory_of(rule), seeds=1, lengths=(300,), kinds=("ar0",))
    assert res["by_kind"] == {} and res["cells"] == {}
    assert len(res["errors"]) == 1 and res["errors"][0]["error"].startswith(reason)
    assert res["errors"][0] | {"error": None} == {"kind": "ar0", "length": 300, "seed": 0, "error": None}
    found = A.score_anomaly_found(factory_of(rule), 1, ("spike",), ("ar0",))
    assert found["cells"]["spike"]["ar0"]["series"] == 0 and len(found["errors"]) == 1


def test_nan_in_an_anomalys_window_is_reported_not_read_as_a_miss():
    def rule(x):
        s = np.zeros(x.shape[0])
        s[A.ANOMALY_ROW:A.ANOMALY_ROW + 40] = np.nan
        return s

    res = A.score_anomaly_found(factory_of(rule), 1, ("spike",), ("ar0",))
    assert res["cells"]["spike"]["ar0"] == {"series": 0, "found": {"0.3": 0, "0.5": 0, "0.7": 0, "1.0": 0},
                                            "median_peak": None}
    assert res["errors"] == [{"kind": "spike", "base": "ar0", "seed": 0,
                              "error": "non-finite scores (NaN or infinity) on 40 of 3000 rows"}]


def test_found_part_looks_from_the_anomaly_to_its_window_end():
    def at(row, value=1.0):
        return factory_of(lambda x: np.where(np.arange(x.shape[0]) == row, value, 0.0))

    kinds, bases = ("glitch",), ("ar0",)
    end = A.ANOMALY_ROW + 10
    assert A.score_anomaly_found(at(A.ANOMALY_ROW), 2, kinds, bases)["found"] == {t: 2 for t in ("0.3", "0.5", "0.7", "1.0")}
    assert A.score_anomaly_found(at(end + A.FOUND_WITHIN - 1), 1, kinds, bases)["found"]["1.0"] == 1
    assert A.score_anomaly_found(at(end + A.FOUND_WITHIN), 1, kinds, bases)["found"]["1.0"] == 0
    assert A.score_anomaly_found(at(A.ANOMALY_ROW - 1), 1, kinds, bases)["found"]["0.3"] == 0
    two = A.score_anomaly_found(at(A.ANOMALY_ROW), 2, ("glitch", "burst"), ("ar0", "seasonal24"))
    assert two["by_base"] == {b: {"series": 4, "0.3": 4, "0.5": 4, "0.7": 4, "1.0": 4} for b in ("ar0", "seasonal24")}
    half = A.score_anomaly_found(at(A.ANOMALY_ROW, 0.6), 1, kinds, bases)
    assert half["found"] == {"0.3": 1, "0.5": 1, "0.7": 0, "1.0": 0}
    assert half["cells"]["glitch"]["ar0"]["median_peak"] == 0.6 and "glitch" in "\n".join(A.format_found(half))


def test_the_default_detector_gives_a_ten_sd_spike_in_white_noise_the_top_score():
    for seed in range(3):
        case = A.anomaly_series("spike", "ar0", seed, size=10.0)
        scores = A.default_factory(seed)().score_series(case.x)
        assert scores[case.start] == 1.0 and scores[:case.start].max() < 1.0, seed


def test_eval_synthetic_anomaly_command(monkeypatch, capsys):
    from ratiowatch.stream.commands.cli import main

    asked = []
    fake = factory_of(lambda x: np.where(np.arange(x.shape[0]) == 5, 0.6, 0.0))
    monkeypatch.setattr(A, "params_factory", lambda params: asked.append(params) or fake)
    assert main(["eval", "synthetic-anomaly", "--lengths", "100", "--seeds", "1", "--suite", "null", "--json"]) == 0
    assert asked == [None]
    out = json.loads(capsys.readouterr().out)
    assert "found" not in out and set(out["null"]["by_kind"]) == set(NULL_KINDS) | {"switching100"}
    assert "blas" in out["environment"]
    assert out["null"]["by_kind"]["ar0"]["0.5"] == 100.0 and out["null"]["within_target"] is False
    assert main(["eval", "synthetic-anomaly", "--lengths", "100", "--seeds", "1", "--suite", "stress"]) == 0
    text = capsys.readouterr().out
    assert "zero_inflated" in text and "above the target" in text
    assert main(["eval", "synthetic-anomaly", "--seeds", "0"]) == 2
    assert main(["eval", "synthetic-anomaly", "--lengths", "a"]) == 2
    assert main(["eval", "synthetic-anomaly", "--lengths", "0"]) == 2
    assert main(["eval", "synthetic", "--lengths", "100,-5"]) == 2
    assert "--lengths must be positive" in capsys.readouterr().err
    assert main(["eval", "synthetic-anomaly", "--lengths", "100", "--seeds", "1", "--suite", "null",
                 "--params", '{"readmit_after": null}', "--json"]) == 0
    assert asked[-1] == {"readmit_after": None}
    assert json.loads(capsys.readouterr().out)["params"] == {"readmit_after": None}


def test_eval_synthetic_anomaly_refuses_bad_params(capsys):
    from ratiowatch.stream.commands.cli import main

    assert main(["eval", "synthetic-anomaly", "--params", '{"readmit_afterr": 5}']) == 2
    assert "readmit_afterr" in capsys.readouterr().err
    assert main(["eval", "synthetic-anomaly", "--params", "[1]"]) == 2
    assert "JSON object" in capsys.readouterr().err


def test_params_factory_builds_the_configured_detector():
    det = A.params_factory({"min_spread": 0.2})(3)()
    assert det.min_spread == 0.2 and det.seed == 3
    assert A.default_factory(1)().params == A.params_factory(None)(1)().params

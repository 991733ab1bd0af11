"""The NAB scorer re-implementation: hand-checked rules and the published stored-results table."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from ratiowatch.stream.evaluate.nab import prepare_rows, probation_length, scaled_sigmoid, score_corpus, score_results_dir

BENCH = Path(os.environ.get("RATIOWATCH_BENCH", Path(__file__).resolve().parents[3] / ".." / "shared" / "bench"))
NAB = BENCH / "nab"
STANDARD = {"standard": {"tpWeight": 1.0, "fnWeight": 1.0, "fpWeight": 0.11}}


def test_probation_is_15_percent_capped_at_750_rows():
    assert probation_length(1000) == 150
    assert probation_length(4032) == 604
    assert probation_length(10000) == 750


def test_scaled_sigmoid_values_and_cutoff():
    assert scaled_sigmoid(0.0) == pytest.approx(0.0)
    assert scaled_sigmoid(-1.0) == pytest.approx(2 / (1 + np.exp(-5)) - 1)
    assert scaled_sigmoid(3.5) == -1.0
    assert scaled_sigmoid(np.nextafter(3.0, 4.0)) == -1.0


def test_scaled_sigmoid_is_minus_one_only_beyond_p_3_as_nabs_sweeper():
    # NAB's sweeper.scaledSigmoid: -1.0 if p > 3.0, else 2 sigmoid(-5 p) - 1; at p = 3 the formula holds
    at_three = 2.0 / (1.0 + np.exp(15.0)) - 1.0
    assert float(scaled_sigmoid(3.0)) == at_three and at_three > -1.0


def test_a_row_exactly_three_window_widths_after_a_window_keeps_the_formula_weight():
    # a window of 3 rows ending at row 12: row 12 + 3 (W - 1) = 18 sits at p = |12 - 18| / 2 = 3
    rows = prepare_rows(22, [(10, 12)], probation=0)
    at_three = 2.0 / (1.0 + np.exp(15.0)) - 1.0
    assert rows.unweighted[18] == at_three and rows.unweighted[19] == -1.0
    scores = np.zeros(22)
    scores[[10, 18]] = 1.0
    raw = score_corpus([(rows, scores)], STANDARD)["standard"]["raw"]
    assert raw == pytest.approx(1.0 + 0.11 * at_three, abs=1e-15)


def test_early_detection_earns_more_than_late_detection():
    rows = prepare_rows(100, [(40, 59)], probation=10)
    early, late = np.zeros(100), np.zeros(100)
    early[40], late[58] = 1.0, 1.0
    s_early = score_corpus([(rows, early)], STANDARD)["standard"]
    s_late = score_corpus([(rows, late)], STANDARD)["standard"]
    assert s_early["score"] == pytest.approx(100.0)
    # row 58 of a 20-row window ending at 59: p = -2/20, reward s(-0.1)/s(-1)
    expected_raw = float(scaled_sigmoid(-0.1) / scaled_sigmoid(-1.0))
    assert s_late["raw"] == pytest.approx(expected_raw)
    assert s_late["score"] < s_early["score"]


def test_false_positive_before_any_window_costs_fp_weight_and_null_scores_zero():
    rows = prepare_rows(100, [(60, 69)], probation=10)
    scores = np.zeros(100)
    scores[20] = 1.0  # only a false positive: the optimiser prefers flagging nothing
    res = score_corpus([(rows, scores)], STANDARD)["standard"]
    assert res["score"] == pytest.approx(0.0)
    scores[60] = 0.5  # a detection at a lower threshold: threshold 0.5 flags both rows
    res = score_corpus([(rows, scores)], STANDARD)["standard"]
    assert res["raw"] == pytest.approx(1.0 - 0.11)
    assert res["threshold"] == 0.5


def test_rows_after_a_window_are_penalised_by_distance():
    rows = prepare_rows(100, [(40, 49)], probation=0)
    assert rows.unweighted[50] == pytest.approx(float(scaled_sigmoid(1 / 9)))  # just after: mild
    assert rows.unweighted[99] == -1.0  # p > 3: full penalty
    assert rows.unweighted[10] == -1.0  # before any window


def test_window_inside_probation_is_not_counted():
    rows = prepare_rows(100, [(2, 5), (50, 55)], probation=10)
    assert rows.n_windows == 1


def test_a_window_inside_probation_counts_for_the_perfect_score_not_for_the_null():
    # NAB's runner: perfect = tpWeight x every labelled window; the null detector's score is its
    # swept score, which misses only the windows that hold a scorable row
    rows = prepare_rows(100, [(2, 5), (50, 60)], probation=10)
    assert (rows.n_windows, rows.n_labelled) == (1, 2)
    scores = np.zeros(100)
    scores[50] = 1.0
    res = score_corpus([(rows, scores)], STANDARD)["standard"]
    assert res["raw"] == pytest.approx(1.0)
    assert res["score"] == pytest.approx(100.0 * (1.0 + 1.0) / (2.0 + 1.0))  # 66.7, not 100


def test_bad_scores_are_rejected():
    rows = prepare_rows(10, [], probation=0)
    with pytest.raises(ValueError, match="NaN"):
        score_corpus([(rows, np.full(10, np.nan))], STANDARD)
    with pytest.raises(ValueError, match="rows"):
        score_corpus([(rows, np.zeros(9))], STANDARD)


PUBLISHED = {  # bench README: official scorer on these 24 files
    "numenta": (77.37, 72.39, 80.99),
    "relativeEntropy": (56.39, 48.25, 61.12),
    "windowedGaussian": (51.31, 45.50, 59.31),
}


@pytest.mark.parametrize("detector", sorted(PUBLISHED))
def test_scorer_reproduces_published_table_from_stored_results(detector):
    if not (NAB / "results" / detector).is_dir():
        pytest.skip(f"NAB bench data not found at {NAB} (set RATIOWATCH_BENCH to ../shared/bench)")
    res = score_results_dir(NAB, NAB / "results", detector)
    got = (res["standard"]["score"], res["reward_low_FP_rate"]["score"], res["reward_low_FN_rate"]["score"])
    assert got == pytest.approx(PUBLISHED[detector], abs=0.05)
    assert res["standard"]["windows"] == 34


# --- fixed thresholds and leave-one-category-out ------------------------------------------------
def _random_items(seed, n_files=4):
    rng = np.random.default_rng(seed)
    items = []
    for _ in range(n_files):
        n = 400
        left = int(rng.integers(100, 300))
        rows = prepare_rows(n, [(left, left + 40)], probation=60)
        s = rng.random(n)
        s[left + int(rng.integers(0, 40))] += rng.random()  # a flag somewhere in the window, sometimes
        items.append((rows, s))
    return items


@pytest.mark.parametrize("seed", range(5))
def test_score_at_the_optimal_threshold_equals_the_sweep(seed):
    from ratiowatch.stream.evaluate.nab import score_at_threshold

    items = _random_items(seed)
    best = score_corpus(items, STANDARD)["standard"]
    at = score_at_threshold(items, STANDARD["standard"], best["threshold"])
    assert at["score"] == pytest.approx(best["score"], abs=1e-9)
    assert at["raw"] == pytest.approx(best["raw"], abs=1e-9)
    assert (at["windows_detected"], at["false_positive_rows"]) == (best["windows_detected"], best["false_positive_rows"])


def test_score_at_threshold_by_hand():
    from ratiowatch.stream.evaluate.nab import score_at_threshold

    rows = prepare_rows(10, [(4, 6)], probation=2)
    s = np.zeros(10)
    s[5], s[8] = 0.9, 0.5
    prof = STANDARD["standard"]
    # threshold 0.6: row 5 (p = -(6 - 5 + 1) / 3) is the one flag, in the window
    got = score_at_threshold([(rows, s)], prof, 0.6)
    tp = float(scaled_sigmoid(-2.0 / 3.0) / scaled_sigmoid(-1.0))
    assert got["raw"] == pytest.approx(tp)
    # threshold 0.4 adds a false positive at row 8, two rows after the window of width 3
    got = score_at_threshold([(rows, s)], prof, 0.4)
    assert got["raw"] == pytest.approx(tp + 0.11 * float(scaled_sigmoid(2.0 / 2.0)))
    assert got["false_positive_rows"] == 1
    # no window at all: the normalised score is undefined, the raw score still counts the flags
    empty = score_at_threshold([(prepare_rows(10, [], probation=2), s)], prof, 0.4)
    assert np.isnan(empty["score"]) and empty["raw"] == pytest.approx(-0.11 * 2)


def test_leave_one_category_out_uses_the_other_categories_threshold():
    from ratiowatch.stream.evaluate.nab import leave_one_category_out, score_at_threshold

    items = _random_items(7, n_files=6)
    names = ["a/1", "a/2", "b/1", "b/2", "c/1", "c/2"]
    res = leave_one_category_out(names, items, STANDARD)["standard"]
    for k, cat in enumerate("abc"):
        rest = [it for j, it in enumerate(items) if j // 2 != k]
        own = items[2 * k : 2 * k + 2]
        thr = score_corpus(rest, STANDARD)["standard"]["threshold"]
        want = score_at_threshold(own, STANDARD["standard"], thr)["score"]
        assert res["categories"][cat]["threshold"] == thr
        assert res["categories"][cat]["score"] == pytest.approx(want)
        # the threshold chosen on the category itself can only do better on it
        assert res["categories"][cat]["own_threshold_score"] >= want - 1e-9
    assert res["mean"] == pytest.approx(np.mean([res["categories"][c]["score"] for c in "abc"]))
    assert res["full_corpus"] == pytest.approx(score_corpus(items, STANDARD)["standard"]["score"])


def test_leave_one_out_of_the_stored_detectors_runs_on_the_bench():
    from ratiowatch.stream.evaluate.nab import leave_one_category_out, load_profiles, stored_items

    if not (NAB / "results" / "numenta").is_dir():
        pytest.skip(f"NAB bench data not found at {NAB} (set RATIOWATCH_BENCH to ../shared/bench)")
    res = leave_one_category_out(*stored_items(NAB, "numenta"), load_profiles(NAB))
    std = res["standard"]
    assert std["full_corpus"] == pytest.approx(PUBLISHED["numenta"][0], abs=0.05)
    assert np.isnan(std["categories"]["artificialNoAnomaly"]["score"])  # no window: no normalised score
    assert std["categories"]["artificialNoAnomaly"]["false_positive_rows"] >= 0
    for c in ("artificialWithAnomaly", "realAdExchange", "realTraffic"):
        v = std["categories"][c]
        assert v["score"] <= v["own_threshold_score"] + 1e-9


def test_alert_flags_are_the_daemons_alerts():
    """rows: every row at or above the threshold; events: the first of each run of such rows with
    gaps of at most `debounce` rows, as the daemon's kind = "anomaly" alerts."""
    from ratiowatch.stream.engine.pipeline import event_starts
    from ratiowatch.stream.evaluate.nab import alert_flags

    s = np.random.default_rng(3).random(500)
    rows = alert_flags(s, 0.9, debounce=5, events=False)
    np.testing.assert_array_equal(rows, (s >= 0.9).astype(float))
    events = alert_flags(s, 0.9, debounce=5, events=True)
    assert np.flatnonzero(events).tolist() == event_starts(s, 0.9, 5)[0]
    hits = np.flatnonzero(s >= 0.9)
    assert np.flatnonzero(events).tolist() == hits[np.r_[True, np.diff(hits) > 5]].tolist()


def test_flags_by_category_scores_each_category_on_its_own_flags():
    from ratiowatch.stream.evaluate.nab import flags_by_category, score_at_threshold

    items = [(rows, (s >= 0.8).astype(float)) for rows, s in _random_items(11, n_files=6)]
    names = ["a/1", "a/2", "b/1", "b/2", "c/1", "c/2"]
    res = flags_by_category(names, items, STANDARD)["standard"]
    for k, cat in enumerate("abc"):
        want = score_at_threshold(items[2 * k : 2 * k + 2], STANDARD["standard"], 0.5)
        assert res["categories"][cat] == want
    assert res["mean"] == pytest.approx(np.mean([res["categories"][c]["score"] for c in "abc"]))
    assert res["pooled"] == pytest.approx(score_at_threshold(items, STANDARD["standard"], 0.5)["score"])


# --- windows that NAB's labels never hold, and the normalisation of a fixed threshold ----------
@pytest.mark.parametrize("windows", [[(10, 30), (10, 30)], [(10, 30), (20, 25)], [(10, 30), (25, 40)],
                                     [(10, 30), (30, 40)]],
                         ids=["duplicate", "nested", "overlapping", "sharing-a-row"])
def test_overlapping_row_windows_are_refused(windows):
    with pytest.raises(ValueError, match="overlap"):
        prepare_rows(100, windows, probation=0)
    with pytest.raises(ValueError, match="overlap"):
        prepare_rows(100, windows[::-1], probation=0)


def test_adjacent_row_windows_are_kept():
    rows = prepare_rows(100, [(10, 30), (31, 40)], probation=0)
    assert rows.n_windows == 2 and rows.window[30] == 0 and rows.window[31] == 1


def test_score_at_threshold_normalises_a_probation_only_window_as_score_corpus():
    from ratiowatch.stream.evaluate.nab import score_at_threshold

    # the one labelled window lies in the probation period: perfect = 1, null = 0
    rows = prepare_rows(100, [(2, 5)])
    flags = np.zeros(100)
    flags[80] = 1.0
    got = score_at_threshold([(rows, flags)], STANDARD["standard"], 0.5)
    assert (got["windows"], got["labelled_windows"]) == (0, 1)
    assert got["score"] == pytest.approx(100.0 * got["raw"] / 1.0) and got["raw"] == pytest.approx(-0.11)
    # at the threshold the sweep chooses (flag nothing) both give the same number
    best = score_corpus([(rows, flags)], STANDARD)["standard"]
    assert score_at_threshold([(rows, flags)], STANDARD["standard"], best["threshold"])["score"] == best["score"] == 0.0


def test_flags_by_category_pools_with_every_labelled_window_as_its_categories():
    from ratiowatch.stream.evaluate.nab import flags_by_category, score_at_threshold

    flags = np.zeros(100)
    flags[50] = 1.0
    with_probation_window = prepare_rows(100, [(2, 5), (50, 60)])  # probation 15 rows
    items = [(with_probation_window, flags), (prepare_rows(100, [(50, 60)]), flags)]
    res = flags_by_category(["a/x.csv", "b/y.csv"], items, STANDARD)["standard"]
    assert res["categories"]["a"]["score"] == pytest.approx(200.0 / 3.0)
    assert res["categories"]["b"]["score"] == pytest.approx(100.0)
    # pooled: raw 2 of perfect 3 (three labelled windows) against null -2
    assert res["pooled"] == pytest.approx(100.0 * (2.0 + 2.0) / (3.0 + 2.0))
    assert res["pooled"] == pytest.approx(score_at_threshold(items, STANDARD["standard"], 0.5)["score"])

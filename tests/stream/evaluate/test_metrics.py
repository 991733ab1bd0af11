"""TCPD F1 (margin 5) and segmentation covering, as specified in the bench README."""

import pytest

from ratiowatch.stream.evaluate.metrics import covering, f1_score, precision_recall, true_positives, tssb_f1


def test_readme_example_f1():
    assert f1_score({1: [], 2: [10], 3: [50]}, [10]) == pytest.approx(0.9090909, abs=1e-7)


def test_no_prediction_scores_recall_of_index_zero_only():
    # only the added index 0 is predicted: precision 1, recall = mean(1/1, 1/2)
    p, r = precision_recall({"a": [], "b": [30]}, [])
    assert p == 1.0 and r == pytest.approx(0.75)


def test_margin_is_inclusive_and_each_prediction_matches_once():
    assert true_positives([10], [15], margin=5) == {10}
    assert true_positives([10], [16], margin=5) == set()
    # two annotations, one prediction between them: only the closest annotation is matched
    assert true_positives([10, 14], [13], margin=5) == {10} or true_positives([10, 14], [13], margin=5) == {14}
    assert len(true_positives([10, 14], [13], margin=5)) == 1


def test_false_alarms_lower_precision():
    p, _ = precision_recall({1: [50]}, [50, 100, 150])
    assert p == pytest.approx(2 / 4)  # {0, 50} matched out of {0, 50, 100, 150}


def test_covering_perfect_and_empty():
    assert covering({1: [50]}, [50], 100) == 1.0
    # no prediction: one segment [0,100) covers A1=[0,50) with 50/100 and A2 with 50/100
    assert covering({1: [50]}, [], 100) == pytest.approx(0.5)


def test_covering_averages_annotators_and_ignores_out_of_range():
    c = covering({1: [50], 2: []}, [50, 0, 100, 250], 100)
    assert c == pytest.approx((1.0 + 0.5) / 2)


def test_covering_flat_list_is_one_annotator():
    assert covering([30, 60], [30, 60], 90) == 1.0


@pytest.mark.parametrize("flat, nested", [([10, 50], [[10, 50]]), ((30,), [[30]]), ([], [[]])],
                         ids=["two-changes", "tuple", "no-change"])
def test_f1_and_covering_accept_the_same_annotation_forms(flat, nested):
    # a flat list of change points is one annotator (as in TSSB), for F1 as for covering
    for pred in ([], [10], [10, 50, 90]):
        assert f1_score(flat, pred) == f1_score(nested, pred) == f1_score({"a": nested[0]}, pred)
        assert precision_recall(flat, pred) == precision_recall(nested, pred)
        assert covering(flat, pred, 100) == covering(nested, pred, 100)
    assert f1_score([10, 50], [10]) == pytest.approx(2 * (2 / 2) * (2 / 3) / (1 + 2 / 3))
    # one annotator who marked no change: only the added index 0 is to be found
    assert f1_score([], []) == 1.0 and f1_score([], [40]) == pytest.approx(2 * 0.5 / 1.5)


def test_tssb_f1_margin_scales_with_length():
    assert tssb_f1([500], [509], 1000) == pytest.approx(1.0)  # margin 10
    assert tssb_f1([500], [520], 1000) < 1.0


def test_tssb_f1_margin_is_truncated_as_the_published_column_is():
    # ClaSP/ClaSS compute f1_margin_1pct with margin int(n * 0.01): 3 rows at n = 350, 0 below 100
    assert tssb_f1([100], [103], 350) == 1.0 and tssb_f1([100], [104], 350) == 0.5
    assert tssb_f1([30], [30], 60) == 1.0 and tssb_f1([30], [31], 60) == 0.5


def test_bad_input_raises():
    with pytest.raises(ValueError):
        covering({1: [5]}, [5], 0)
    with pytest.raises(ValueError):
        f1_score({}, [1])
    with pytest.raises(ValueError):
        f1_score({1: [2.5]}, [1])

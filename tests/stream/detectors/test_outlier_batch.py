"""Batch inlier-based outlier detection: direction, accuracy on the papers' toy, sklearn idiom, errors."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from ratiowatch.core.kernels import sq_dist
from ratiowatch.stream.detectors.outlier import DensityRatioOutlierDetector, _kth_smallest_sq_dist, local_scale


def toy(d: int, seed: int, n: int = 100):
    """Yamada et al. Table 3: reference N(0, I); evaluation 0.95 N(0, I) + 0.05 N(3/sqrt(d) 1, I)."""
    rng = np.random.default_rng(seed)
    ref = rng.normal(size=(n, d))
    n_out = int(round(0.05 * n))
    ev = np.vstack([rng.normal(size=(n - n_out, d)), rng.normal(3.0 / np.sqrt(d), 1.0, size=(n_out, d))])
    y = np.r_[np.zeros(n - n_out), np.ones(n_out)]
    return ref, ev, y


def test_low_ratio_means_outlier():
    rng = np.random.default_rng(0)
    det = DensityRatioOutlierDetector(seed=0).fit(rng.normal(size=(300, 2)))
    s = det.score_samples(np.array([[0.0, 0.0], [0.5, -0.5], [6.0, 6.0]]))
    assert s[2] < min(s[0], s[1])
    assert s[0] > 0.5  # about 1 at typical inliers


@pytest.mark.parametrize("d, floor", [(1, 0.91), (5, 0.87)])
def test_toy_auc_matches_paper_level(d, floor):
    # paper (1000 trials, sd ~0.1): d=1 0.926, d=5 0.891 at alpha=0.5; we average 20 trials
    aucs = []
    for s in range(20):
        ref, ev, y = toy(d, s)
        det = DensityRatioOutlierDetector(n_centres=100, seed=s).fit(ref)
        aucs.append(roc_auc_score(y, -det.score_samples(ev)))
    assert np.mean(aucs) > floor


@pytest.mark.parametrize("method", ["ulsif", "kliep"])
def test_other_estimators_rank_outliers_low(method):
    ref, ev, y = toy(2, 3, n=200)
    det = DensityRatioOutlierDetector(method=method, n_centres=100, seed=0).fit(ref)
    assert roc_auc_score(y, -det.score_samples(ev)) > 0.8


def test_cv_width_selection_runs_and_ranks():
    ref, ev, y = toy(2, 4, n=200)
    det = DensityRatioOutlierDetector(sigma="cv", n_centres=100, seed=0).fit(ref)
    assert roc_auc_score(y, -det.score_samples(ev)) > 0.8


def test_predict_follows_contamination_on_clean_data():
    rng = np.random.default_rng(2)
    det = DensityRatioOutlierDetector(contamination=0.1, n_centres=200, seed=0).fit(rng.normal(size=(400, 2)))
    flagged = np.mean(det.predict(rng.normal(size=(400, 2))) == -1)
    assert 0.02 < flagged < 0.25
    far = det.predict(np.full((3, 2), 7.0))
    assert far.tolist() == [-1, -1, -1]
    assert np.allclose(det.decision_function(np.zeros((1, 2))), det.score_samples(np.zeros((1, 2))) - det.offset_)


def test_deterministic_given_seed():
    ref, ev, _ = toy(3, 5)
    a = DensityRatioOutlierDetector(seed=7).fit(ref).score_samples(ev)
    b = DensityRatioOutlierDetector(seed=7).fit(ref).score_samples(ev)
    assert np.array_equal(a, b)


def test_local_scale_is_neighbour_distance():
    x = np.arange(200.0)[:, None]
    assert local_scale(x, k=3) == 2.0
    assert local_scale(np.zeros((5, 2))) > 0  # duplicates fall back to a positive scale


@pytest.mark.parametrize("k", [0, 1, 10, 39])
def test_kth_neighbour_distances_equal_a_full_partition(k):
    rng = np.random.default_rng(k)
    x = np.vstack([rng.normal(size=(30, 3)), np.round(rng.normal(size=(10, 3)))])  # ties among rounded rows
    q = x[rng.choice(40, size=12, replace=False)]
    full = np.partition(sq_dist(q, x), k, axis=1)[:, k]
    assert np.array_equal(_kth_smallest_sq_dist(q, x, k), full)


def test_bad_input_raises_clear_errors():
    det = DensityRatioOutlierDetector()
    with pytest.raises(ValueError, match="not fitted"):
        det.score_samples(np.zeros((2, 2)))
    with pytest.raises(ValueError, match="at least 10"):
        det.fit(np.zeros((3, 2)))
    with pytest.raises(ValueError, match="NaN"):
        det.fit(np.full((20, 2), np.nan))
    det.fit(np.random.default_rng(0).normal(size=(30, 2)))
    with pytest.raises(ValueError, match="features"):
        det.score_samples(np.zeros((2, 3)))
    with pytest.raises(ValueError, match="method"):
        DensityRatioOutlierDetector(method="lof").fit(np.zeros((20, 2)))
    with pytest.raises(ValueError, match="contamination"):
        DensityRatioOutlierDetector(contamination=0.7).fit(np.zeros((20, 2)))
    with pytest.raises(ValueError, match="sigma"):
        DensityRatioOutlierDetector(sigma="wide").fit(np.zeros((20, 2)))
    # values whose squared distances overflow float64: once "sigma must be positive and finite; got [inf]"
    huge = 1e200 * np.random.default_rng(1).normal(size=(30, 2))
    with pytest.raises(ValueError, match="divide X by a constant"):
        DensityRatioOutlierDetector().fit(huge)
    with pytest.raises(ValueError, match="divide X by a constant"):
        det.score_samples(huge)


# --- scikit-learn conventions -----------------------------------------------------------------
def test_is_a_scikit_learn_outlier_detector():
    from sklearn.base import BaseEstimator, OutlierMixin, clone

    det = DensityRatioOutlierDetector(sigma_factor=0.5, n_centres=50, seed=3)
    assert isinstance(det, BaseEstimator) and isinstance(det, OutlierMixin)
    assert det.get_params()["sigma_factor"] == 0.5
    twin = clone(det)
    assert twin.get_params() == det.get_params() and twin is not det
    X = np.random.default_rng(0).normal(size=(200, 2))
    labels = det.fit_predict(X)
    np.testing.assert_array_equal(labels, clone(det).fit(X).predict(X))
    # offset_ is the contamination quantile of the training scores: fit_predict flags that share
    assert np.mean(labels == -1) == pytest.approx(det.contamination, abs=1.0 / 200)


def test_unfitted_raises_not_fitted_error():
    from sklearn.exceptions import NotFittedError

    for method in ("score_samples", "decision_function", "predict"):
        with pytest.raises(NotFittedError, match="not fitted"):
            getattr(DensityRatioOutlierDetector(), method)(np.zeros((3, 2)))


def test_passes_scikit_learn_estimator_checks():
    from sklearn.utils.estimator_checks import check_estimator

    results = check_estimator(DensityRatioOutlierDetector(n_centres=30), on_fail=None)
    status = {r["check_name"]: r["status"] for r in results}
    assert [name for name, st in status.items() if st != "passed" and st != "skipped"] == []
    # only checks that need an optional package (pandas, array-api) may be skipped
    skipped = {name for name, st in status.items() if st == "skipped"}
    assert skipped <= {"check_array_api_input", "check_classifier_data_not_an_array",
                       "check_dataframe_column_names_consistency", "check_pandas_series"}, skipped
    assert len(status) > 40


def test_training_rows_get_cross_fitted_scores_and_new_inliers_are_not_flagged():
    rng = np.random.default_rng(1)
    ref = rng.normal(size=(200, 3))
    det = DensityRatioOutlierDetector(contamination=0.05, seed=0).fit(ref)
    perm = rng.permutation(200)[:50]
    np.testing.assert_array_equal(det.score_samples(ref[perm]), det.train_scores_[perm])
    # the threshold comes from held-out scores, so fresh inliers are flagged at about the same rate
    flagged = np.mean(det.predict(rng.normal(size=(400, 3))) == -1)
    assert flagged < 0.15
    assert det.predict(np.array([[0.0, 0.0, 0.0], [8.0, 0.0, 0.0]])).tolist() == [1, -1]


def test_usable_in_grid_search():
    from sklearn.model_selection import GridSearchCV

    rng = np.random.default_rng(5)
    # scattered outliers (a ring of radius 5-7): they add no density of their own to the reference
    angle, radius = rng.uniform(0, 2 * np.pi, 30), rng.uniform(5.0, 7.0, 30)
    X = np.vstack([rng.normal(size=(270, 2)), np.c_[radius * np.cos(angle), radius * np.sin(angle)]])
    y = np.r_[np.ones(270), -np.ones(30)]  # scikit-learn's labels: +1 inlier, -1 outlier
    perm = rng.permutation(300)
    grid = GridSearchCV(DensityRatioOutlierDetector(sigma="local", n_centres=50), {"sigma_factor": [0.2, 1.0]},
                        scoring="roc_auc", cv=3).fit(X[perm], y[perm])
    assert grid.best_params_["sigma_factor"] in (0.2, 1.0)
    assert grid.best_score_ > 0.9


@pytest.mark.parametrize("params, error, match", [
    ({"n_centres": 2.5}, TypeError, "n_centres must be an integer"),
    ({"n_centres": "100"}, TypeError, "n_centres must be an integer"),
    ({"seed": 1.5}, TypeError, "seed must be an integer"),
    ({"seed": "x"}, TypeError, "seed must be an integer"),
    ({"alpha": "0.1"}, TypeError, "alpha must be a real number"),
    ({"contamination": 0.7}, ValueError, "contamination"),
])
def test_parameters_are_checked_at_fit_with_their_name(params, error, match):
    with pytest.raises(error, match=match):
        DensityRatioOutlierDetector(**params).fit(np.random.default_rng(0).normal(size=(20, 2)))


def test_without_scikit_learn_the_stand_in_base_keeps_the_api():
    from ratiowatch.stream.detectors import _estimator_base as eb

    class Stand(eb.OutlierMixin, eb.BaseEstimator):
        def __init__(self, a=1, b="x"):
            self.a, self.b = a, b

        def fit(self, X, y=None):
            self.m_ = float(np.mean(X))
            return self

        def predict(self, X):
            return np.where(np.asarray(X)[:, 0] > self.m_, -1, 1)

    s = Stand(a=2)
    assert s.get_params() == {"a": 2, "b": "x"}
    assert s.set_params(b="y").b == "y"
    with pytest.raises(ValueError, match="invalid parameter"):
        s.set_params(c=1)
    assert s.fit_predict(np.array([[0.0], [2.0]])).tolist() == [1, -1]
    assert issubclass(eb.NotFittedError, ValueError) and issubclass(eb.NotFittedError, AttributeError)


def test_lcv_width_maximises_the_held_out_kernel_density_likelihood():
    from scipy.stats import gaussian_kde  # noqa: F401  (scipy is a runtime dependency anyway)

    from ratiowatch.stream.detectors.outlier import LCV_FACTORS, lcv_width

    rng = np.random.default_rng(4)
    x = rng.normal(size=(300, 2))
    sigma, f = lcv_width(x, n_centres=150, seed=1)
    # brute force: the same split, the log-likelihood summed point by point
    perm = np.random.default_rng(1).permutation(300)
    cen, held = x[perm[:150]], x[perm[150:]]
    scale = local_scale(x, seed=1)

    def loglik(s):
        tot = 0.0
        for p in held:
            k = np.exp(-((p - cen) ** 2).sum(axis=1) / (2 * s * s))
            tot += np.log(k.mean()) - 2 * np.log(s)
        return tot / len(held)

    lls = [loglik(g * scale) for g in LCV_FACTORS]
    assert f == LCV_FACTORS[int(np.argmax(lls))]
    assert sigma == pytest.approx(f * scale)
    assert 0.05 < f < 16.0  # an interior optimum for a smooth density


def test_lcv_is_the_default_width_and_the_others_remain():
    ref, ev, y = toy(2, 6, n=200)
    for sigma in ("lcv", "local", 0.5):
        det = DensityRatioOutlierDetector(sigma=sigma, n_centres=100, seed=0).fit(ref)
        assert roc_auc_score(y, -det.score_samples(ev)) > 0.75
    assert DensityRatioOutlierDetector().sigma == "lcv"


# --- the threshold is on the scale of new samples' scores ----------------------------------------
@pytest.mark.parametrize("d, n, seed", [(1, 100, 1), (1, 300, 2), (1, 1000, 0), (2, 300, 0), (3, 300, 1)])
def test_fresh_inliers_are_flagged_at_about_the_contamination_rate_in_any_batch(d, n, seed):
    # once offset_ (from half-split scores of 2-3) sat above every 1-D inlier's score (about 1):
    # 58-100 % of fresh inliers flagged one at a time, and predict([[0], [8]]) gave [-1, -1]
    rng = np.random.default_rng(seed)
    det = DensityRatioOutlierDetector(contamination=0.05, seed=0).fit(rng.normal(size=(n, d)))
    one_at_a_time = np.array([det.predict(rng.normal(size=(1, d)))[0] for _ in range(20)])
    assert np.mean(one_at_a_time == -1) <= 0.2
    tens = det.predict(rng.normal(size=(10, d)))
    assert np.mean(tens == -1) <= 0.3
    thousand = det.predict(rng.normal(size=(1000, d)))
    assert 0.003 <= np.mean(thousand == -1) <= 0.15
    far = np.zeros((2, d))
    far[1, 0] = 8.0
    assert det.predict(far).tolist() == [1, -1]


def test_held_out_training_scores_are_folds_scored_as_new_batches():
    from ratiowatch.core.validation import make_rng

    rng = np.random.default_rng(3)
    ref = rng.normal(size=(120, 2))
    det = DensityRatioOutlierDetector(n_centres=60, seed=4).fit(ref)
    folds = np.array_split(make_rng(4).permutation(120), det.N_FOLDS)
    for fold in folds:
        fold = np.sort(fold)
        rest = np.setdiff1d(np.arange(120), fold)
        # a detector whose reference is the other folds scores the fold as a new batch
        other = DensityRatioOutlierDetector(n_centres=60, seed=4).fit(ref[rest])
        other.sigma_ = det.sigma_
        np.testing.assert_allclose(det.train_scores_[fold], other.score_samples(ref[fold]), rtol=1e-12)
    assert det.offset_ == np.quantile(det.train_scores_, det.contamination)


def test_a_training_row_scores_the_same_whatever_its_bytes():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(100, 2))
    X[0] = [0.0, 0.5]
    det = DensityRatioOutlierDetector(seed=0).fit(X)
    own = det.score_samples([[0.0, 0.5]])[0]
    assert det.score_samples([[-0.0, 0.5]])[0] == own  # -0.0 is the same point
    moved = det.score_samples([[1e-12, 0.5]])[0]  # a new point next to it: scored as new, same scale
    assert 0.75 < moved / own < 1.33  # once 3.30 vs 1.08
    # a batch mixing training rows with a new row is scored as a whole, like any batch
    batch = np.vstack([X[:5], [[0.1, 0.1]]])
    np.testing.assert_array_equal(det.score_samples(batch), det._ratio(batch))

@pytest.mark.parametrize("method", ["rulsif", "ulsif"])
@pytest.mark.parametrize("sigma", ["lcv", "local", 0.7])
def test_a_batch_scores_as_the_plain_fit_with_the_reference_in_the_denominator(method, sigma):
    # the scores come from ratio_at_added; the oracle is the plain fit of numerator = reference,
    # denominator = reference + batch, evaluated at the batch (the papers' transductive protocol)
    from ratiowatch.core.rulsif import fit_rulsif

    rng = np.random.default_rng(11)
    ref, batch = rng.normal(size=(150, 3)), np.vstack([rng.normal(size=(20, 3)), rng.normal(4.0, 1.0, size=(3, 3))])
    det = DensityRatioOutlierDetector(method=method, sigma=sigma, n_centres=80, seed=2).fit(ref)
    alpha = 0.0 if method == "ulsif" else det.alpha
    plain = fit_rulsif(ref, np.vstack([ref, batch]), alpha=alpha, sigma=det.sigma_, lam=det.lam, n_centres=80, seed=2)
    np.testing.assert_allclose(det.score_samples(batch), plain.ratio(batch), rtol=1e-10)

"""Online learners built on the weighted-SVM path (ratiowatch.core.wsvm): river-style regressors,
classifiers and a forecast-residual anomaly detector, plus covariate-shift adaptation."""

"""Online learners built on the weighted-SVM path (core.wsvm): river-style regressors,
classifiers and a forecast-residual anomaly detector, plus covariate-shift adaptation."""

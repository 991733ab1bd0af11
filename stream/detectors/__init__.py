"""Streaming detectors: change points (two-window density ratio / difference) and outliers."""

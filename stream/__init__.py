"""The engine: series preparation, calibration, detectors, learners, the daemon's engine,
evaluation, benchmarks and the command line.

Subpackages (dependencies point down this list, never up):

- :mod:`.commands`, :mod:`.evaluate`, :mod:`.bench` -- what the ``ratiowatch`` command runs;
- :mod:`.engine` -- the daemon: config, per-key pipeline, checkpoints, wiring of connectors;
- :mod:`.detectors`, :mod:`.learners` -- the public detector and learner classes;
- :mod:`.calibration` -- from a score to a threshold to an alarm;
- :mod:`.series` -- from samples to the rows a detector compares.

The public API is exported by :mod:`ratiowatch` itself.
"""

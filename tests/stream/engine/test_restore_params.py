"""A key restored from its checkpoint keeps the detector the checkpoint holds, parameters and all,
when the config's [detector] parameters changed since: a restore is exact. Its alerts name the
detector that produced them, and the change is logged once per key with what differs and what to
do (delete the key's checkpoint to start it afresh with the config's parameters). A key without a
checkpoint runs the config's detector; an unchanged config restores without a word."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from ratiowatch.connectors.records import Record
from ratiowatch.stream.engine.checkpoint import CheckpointStore
from ratiowatch.stream.engine.pipeline import Pipeline, build_factory

OLD = {"method": "rulsif", "n": 25}
NEW = {"method": "ulsif", "n": 50}
SPLIT, END, SHIFT = 400, 800, 500


def records(key: str, start: int, stop: int) -> list[Record]:
    rng = np.random.default_rng(0)
    values = rng.normal(size=END) + np.where(np.arange(END) >= SHIFT, 5.0, 0.0)
    return [Record(key, float(t), np.array([values[t]]), ("p0", t)) for t in range(start, stop)]


def pipeline(kwargs: dict, store: CheckpointStore | None = None) -> Pipeline:
    return Pipeline(build_factory("window", kwargs), store=store)


def param_warnings(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno == logging.WARNING and "other parameters" in r.getMessage()]


@pytest.fixture
def old_checkpoint(tmp_path) -> CheckpointStore:
    store = CheckpointStore(tmp_path)
    first = pipeline(OLD, store)
    first.process(records("old", 0, SPLIT))
    first.checkpoint()
    return store


def test_a_restored_key_keeps_its_checkpoints_detector_and_gives_the_alerts_of_an_uninterrupted_run(old_checkpoint):
    whole, _ = pipeline(OLD).process(records("old", 0, END))
    assert any(a.change_index >= SPLIT for a in whole)
    second = pipeline(NEW, old_checkpoint)
    alerts, bad = second.process(records("old", SPLIT, END))
    det = second.keys["old"].detector.det
    assert (det.method, det.n) == ("rulsif", 25)
    assert bad == [] and alerts == [a for a in whole if a.alarm_index >= SPLIT]
    assert {a.detector for a in alerts} == {"changepoint/rulsif"}


def test_changed_parameters_of_a_restored_key_are_logged_once_naming_the_key_what_differs_and_what_to_do(
        old_checkpoint, caplog):
    second = pipeline(NEW, old_checkpoint)
    with caplog.at_level(logging.WARNING, logger="ratiowatch.daemon"):
        second.process(records("old", SPLIT, SPLIT + 50))
        second.evict(["old"])  # restored again on its next record: not said again
        second.process(records("old", SPLIT + 50, SPLIT + 100))
    warnings = param_warnings(caplog)
    assert len(warnings) == 1
    w = warnings[0]
    assert w.key == "old" and w.checkpoint_detector == "changepoint/rulsif" and w.config_detector == "changepoint/ulsif"
    assert "n: 25 (checkpoint) vs 50 (config)" in w.differences
    assert "method: 'rulsif' (checkpoint) vs 'ulsif' (config)" in w.differences
    assert "delete the key's checkpoint to start it afresh" in w.getMessage()


def test_a_restored_keys_next_checkpoint_still_names_the_detector_it_holds(old_checkpoint):
    second = pipeline(NEW, old_checkpoint)
    second.process(records("old", SPLIT, SPLIT + 10))
    second.checkpoint()
    _, meta = old_checkpoint.load("old")
    assert meta["detector"] == "changepoint/rulsif"


def test_a_key_without_a_checkpoint_runs_the_configs_detector_under_the_configs_name(old_checkpoint, caplog):
    second = pipeline(NEW, old_checkpoint)
    with caplog.at_level(logging.WARNING, logger="ratiowatch.daemon"):
        alerts, _ = second.process(records("fresh", 0, END))
    det = second.keys["fresh"].detector.det
    assert (det.method, det.n) == ("ulsif", 50) and param_warnings(caplog) == []
    assert alerts and {a.detector for a in alerts} == {"changepoint/ulsif"}


@pytest.mark.parametrize("kind, kwargs", [("window", OLD), ("auto", {}), ("split_profile", {}),
                                          ("anomaly", {})])
def test_an_unchanged_config_restores_without_a_warning_under_the_factorys_name(tmp_path, caplog, kind, kwargs):
    store = CheckpointStore(tmp_path)
    first = Pipeline(build_factory(kind, kwargs), store=store)
    first.process(records("k", 0, 200))
    first.checkpoint()
    second = Pipeline(build_factory(kind, kwargs), store=store)
    with caplog.at_level(logging.WARNING, logger="ratiowatch.daemon"):
        second.process(records("k", 200, 210))
    assert param_warnings(caplog) == [] and second.keys["k"].name is None


def test_a_changed_anomaly_parameter_is_logged_and_the_key_keeps_its_checkpoints_value(tmp_path, caplog):
    store = CheckpointStore(tmp_path)
    first = Pipeline(build_factory("anomaly", {"seed": 1}), store=store)
    first.process(records("k", 0, 50))
    first.checkpoint()
    second = Pipeline(build_factory("anomaly", {"seed": 2}), store=store)
    with caplog.at_level(logging.WARNING, logger="ratiowatch.daemon"):
        second.process(records("k", 50, 60))
    assert second.keys["k"].detector.det.seed == 1
    [w] = param_warnings(caplog)
    assert w.differences == "seed: 1 (checkpoint) vs 2 (config)"

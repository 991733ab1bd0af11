"""Damaged checkpoints are refused with a reason that names the file and what to do: metadata
missing an entry (named), a file that is no .npz archive (no advice to load it as a pickle), another
key's checkpoint under this key's file name (both keys named). The key's records go to the
dead-letter sink as processing_error with that reason, it is logged once per key, other keys go on."""

from __future__ import annotations

import logging
import shutil

import numpy as np
import pytest

from ratiowatch.connectors.checkpoint_format import encode
from ratiowatch.connectors.records import Record
from ratiowatch.stream.engine.checkpoint import CheckpointStore
from ratiowatch.stream.engine.pipeline import Pipeline
from toy_detector import MeanShiftFactory


def recs(keys, t: int) -> list[Record]:
    return [Record(k, float(t), np.array([1.0]), ("p0", 10 * t + i)) for i, k in enumerate(keys)]


@pytest.fixture
def store(tmp_path) -> CheckpointStore:
    store = CheckpointStore(tmp_path)
    first = Pipeline(MeanShiftFactory(), store=store)
    first.process(recs(["bad", "good"], 0))
    first.checkpoint()
    return store


def refused(store: CheckpointStore, caplog, batches: int = 2) -> tuple[list[str], list[logging.LogRecord], Pipeline]:
    second = Pipeline(MeanShiftFactory(), store=store)
    details = []
    with caplog.at_level(logging.WARNING, logger="ratiowatch.daemon"):
        for t in range(1, 1 + batches):
            _, bad = second.process(recs(["bad", "good"], t))
            assert [(b.reason, b.key) for b in bad] == [("processing_error", "bad")]
            details += [b.detail for b in bad]
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert [w.key for w in warnings] == ["bad"]  # once, however many records
    assert second.keys["good"].count == 1 + batches
    return details, warnings, second


@pytest.mark.parametrize("field", ["dim", "count", "last_ts"])
def test_a_checkpoint_whose_metadata_lacks_an_entry_is_refused_naming_the_entry_and_the_file(store, caplog, field):
    state, meta = store.load("bad")
    del meta[field]
    store.path("bad").write_bytes(encode(state, meta, "bad"))
    details, warnings, _ = refused(store, caplog)
    for text in (details[0], warnings[0].error):
        assert f"lacks {field!r}" in text and str(store.path("bad")) in text and "delete it" in text
        assert "KeyError" not in text


def test_a_checkpoint_whose_metadata_holds_a_bad_dimension_is_refused_naming_it(store, caplog):
    state, meta = store.load("bad")
    meta["dim"] = "one"
    store.path("bad").write_bytes(encode(state, meta, "bad"))
    details, _, _ = refused(store, caplog)
    assert "bad 'dim' ('one')" in details[0] and str(store.path("bad")) in details[0]


def test_a_text_file_in_place_of_a_checkpoint_is_refused_without_numpys_pickle_advice(store, caplog):
    store.path("bad").write_text("hello world\n")
    details, warnings, _ = refused(store, caplog)
    for text in (details[0], warnings[0].error):
        assert "pickle" not in text
        assert "not an .npz archive" in text and str(store.path("bad")) in text and "delete it" in text


def test_a_bare_npy_array_in_place_of_a_checkpoint_is_refused_as_unreadable(store, caplog):
    with open(store.path("bad"), "wb") as fh:
        np.save(fh, np.arange(3.0))
    details, _, _ = refused(store, caplog)
    assert "unreadable checkpoint" in details[0] and "not an .npz archive" in details[0]


def test_another_keys_checkpoint_under_this_keys_file_name_is_refused_naming_both_keys(store, caplog):
    shutil.copy(store.path("good"), store.path("bad"))
    details, _, second = refused(store, caplog)
    assert "holds the checkpoint of key 'good', not of 'bad'" in details[0]
    assert "bad" not in second.keys
    with pytest.raises(ValueError, match="not of 'bad'"):
        store.load("bad")

"""Pipeline faults: a far-future (or far-past) timestamp must not poison its key; a failure while
handling one key is that key's records' fault, not the batch's."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ratiowatch.connectors.records import BatchParser, FieldSpec, Record
from ratiowatch.stream.engine.pipeline import Pipeline
from toy_detector import MeanShiftFactory

SPEC = FieldSpec(key="k", timestamp="t", values=("v",))


def as_list(stamps, key="a", part="p0"):
    return [Record(key, float(t), np.array([1.0]), (part, i)) for i, t in enumerate(stamps)]


def as_batch(stamps, key="a"):
    p = BatchParser(SPEC)
    for i, t in enumerate(stamps):
        p.add(json.dumps({"k": key, "t": t, "v": 1.0}).encode(), "p0", i)
    return p.finish()


@pytest.mark.parametrize("form", [as_list, as_batch])
def test_one_far_future_timestamp_costs_only_its_own_record(form):
    stamps = list(range(50)) + [1e12] + list(range(50, 100))
    p = Pipeline(MeanShiftFactory(), max_timestamp_ahead=3600.0)
    _, bad = p.process(form(stamps))
    assert [(b.reason, b.ref) for b in bad] == [("timestamp_too_far_ahead", ("p0", 50))]
    assert p.keys["a"].count == 100 and p.keys["a"].last_ts == 99.0


def test_without_a_bound_the_far_future_timestamp_poisons_the_key():
    """What the bound prevents (the behaviour with max_timestamp_ahead=None)."""
    stamps = list(range(50)) + [1e12] + list(range(50, 100))
    _, bad = Pipeline(MeanShiftFactory(), max_timestamp_ahead=None).process(as_list(stamps))
    assert len(bad) == 50 and {b.reason for b in bad} == {"timestamp_backwards"}


@pytest.mark.parametrize("form", [as_list, as_batch])
def test_a_real_jump_is_accepted_once_confirmed(form):
    stamps = list(range(10)) + [1e6 + t for t in range(10)]
    p = Pipeline(MeanShiftFactory(), max_timestamp_ahead=1000.0, ahead_confirm=2)
    _, bad = p.process(form(stamps))
    assert [(b.reason, b.ref[1]) for b in bad] == [("timestamp_too_far_ahead", 10)]
    assert p.keys["a"].count == 19 and p.keys["a"].last_ts == 1e6 + 9


def test_two_wild_timestamps_in_a_row_do_not_confirm_a_jump():
    stamps = list(range(10)) + [1e12, 2e12] + list(range(10, 20))
    p = Pipeline(MeanShiftFactory(), max_timestamp_ahead=1000.0, ahead_confirm=2)
    _, bad = p.process(as_list(stamps))
    assert [b.reason for b in bad] == ["timestamp_too_far_ahead"] * 2
    assert p.keys["a"].count == 20 and p.keys["a"].last_ts == 19.0


@pytest.mark.parametrize("form", [as_list, as_batch])
def test_a_wrong_first_timestamp_costs_only_the_records_that_confirm_the_drop_back(form):
    """A key's first record sets its clock unchecked; one in milliseconds among seconds must not send
    the key's later records to the dead-letter sink: a drop back beyond the bound is confirmed as a
    jump ahead is, and the clock moves back to the record that confirms it."""
    stamps = [1.7e12] + [1.7e9 + t for t in range(20)]
    p = Pipeline(MeanShiftFactory(), max_timestamp_ahead=1000.0, ahead_confirm=3)
    _, bad = p.process(form(stamps))
    assert [(b.reason, b.ref[1]) for b in bad] == [("timestamp_backwards", 1), ("timestamp_backwards", 2)]
    assert p.keys["a"].count == 19 and p.keys["a"].last_ts == 1.7e9 + 19


@pytest.mark.parametrize("form", [as_list, as_batch])
def test_one_far_past_timestamp_costs_only_its_own_record(form):
    stamps = list(range(1000, 1050)) + [1.0] + list(range(1050, 1100))
    p = Pipeline(MeanShiftFactory(), max_timestamp_ahead=100.0, ahead_confirm=2)
    _, bad = p.process(form(stamps))
    assert [(b.reason, b.ref[1]) for b in bad] == [("timestamp_backwards", 50)]
    assert p.keys["a"].count == 100 and p.keys["a"].last_ts == 1099.0


def test_steps_back_within_the_bound_are_never_confirmed():
    stamps = list(range(100)) + [50, 51, 52, 53] + [100]
    p = Pipeline(MeanShiftFactory(), max_timestamp_ahead=1000.0, ahead_confirm=2)
    _, bad = p.process(as_list(stamps))
    assert [(b.reason, b.ref[1]) for b in bad] == [("timestamp_backwards", i) for i in range(100, 104)]
    assert p.keys["a"].count == 101 and p.keys["a"].last_ts == 100.0


def test_two_wild_past_timestamps_in_a_row_do_not_confirm_a_drop_back():
    stamps = [1e6 + t for t in range(10)] + [5.0, 1e5] + [1e6 + t for t in range(10, 20)]
    p = Pipeline(MeanShiftFactory(), max_timestamp_ahead=1000.0, ahead_confirm=2)
    _, bad = p.process(as_list(stamps))
    assert [b.reason for b in bad] == ["timestamp_backwards"] * 2
    assert p.keys["a"].count == 20 and p.keys["a"].last_ts == 1e6 + 19


def test_the_daemon_default_bounds_far_future_timestamps():
    from ratiowatch.stream.engine.config import parse_config

    cfg = parse_config({"source": {"type": "stdin"}})
    assert 0 < cfg.pipeline["max_timestamp_ahead"] < 1e12 and cfg.pipeline["timestamp_jump_confirm"] >= 2


@pytest.mark.parametrize("form", ["list", "batch"])
def test_a_failure_while_handling_one_key_dead_letters_its_records_only(form):
    class Picky(MeanShiftFactory):
        def create(self, key, dim):
            if key == "bad":
                raise MemoryError("no room for this key")  # not a ValueError: anything unexpected
            return super().create(key, dim)

    rows = [("good", t) for t in range(20)] + [("bad", t) for t in range(5)]
    p = Pipeline(Picky())
    if form == "list":
        items = [Record(k, float(t), np.array([1.0]), ("p0", i)) for i, (k, t) in enumerate(rows)]
    else:
        bp = BatchParser(SPEC)
        for i, (k, t) in enumerate(rows):
            bp.add(json.dumps({"k": k, "t": t, "v": 1.0}).encode(), "p0", i)
        items = bp.finish()
    _, bad = p.process(items)
    assert len(bad) == 5 and {b.reason for b in bad} == {"processing_error"}
    assert all("MemoryError" in b.detail and b.key == "bad" for b in bad)
    assert p.keys["good"].count == 20 and p.positions == {"p0": 25}

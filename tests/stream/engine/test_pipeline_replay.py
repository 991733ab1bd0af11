"""Replays after a restart: a restored key skips the records of its partition at or before its
checkpoint's position that are not newer than its state; a newer one there is judged on its own
and the check goes on until a record passes the position; a source that cannot replay (stdin) has
nothing skipped; an unreadable checkpoint is logged once per key.

One record with a far-future timestamp (dead-lettered as timestamp_too_far_ahead) used to end the
replay check: the already-processed records after it were dead-lettered as timestamp_backwards
(or, with check_timestamps = false, processed twice, with alerts of new ids).
"""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest

from ratiowatch.connectors.records import BatchParser, FieldSpec, Record
from ratiowatch.stream.engine.checkpoint import CheckpointStore
from ratiowatch.stream.engine.pipeline import Pipeline
from toy_detector import MeanShiftFactory, step_series

SPEC = FieldSpec(key="k", timestamp="t", values=("v",))
N, FAR, CHANGE = 120, 50, 90  # records, the offset of the far-future one, the change of the series


def series(check_timestamps: bool):
    values = step_series(N, CHANGE)
    return [(i, 1e12 if i == FAR else float(i), float(v)) for i, v in enumerate(values)]


def as_list(rows):
    return [Record("a", t, np.array([v]), ("p0", i)) for i, t, v in rows]


def as_batch(rows):
    p = BatchParser(SPEC)
    for i, t, v in rows:
        p.add(json.dumps({"k": "a", "t": t, "v": v}).encode(), "p0", i)
    return p.finish()


def pipeline(store=None, check_timestamps=True):
    return Pipeline(MeanShiftFactory(), store=store, check_timestamps=check_timestamps, max_timestamp_ahead=3600.0)


@pytest.mark.parametrize("check_timestamps", [True, False], ids=["checked", "unchecked"])
@pytest.mark.parametrize("form", [as_list, as_batch])
def test_a_replay_skips_every_record_up_to_the_checkpoint_even_after_a_far_future_timestamp(
        tmp_path, form, check_timestamps):
    rows = series(check_timestamps)
    ref = pipeline(check_timestamps=check_timestamps)
    ref_alerts, ref_bad = ref.process(form(rows))

    store = CheckpointStore(tmp_path)
    first = pipeline(store, check_timestamps)
    a1, bad1 = first.process(form(rows[:80]))
    first.checkpoint()
    # a crash after the checkpoint was written, before the offsets were committed: replay from 20
    second = pipeline(store, check_timestamps)
    a2, bad2 = second.process(form(rows[20:]))
    if check_timestamps:
        # offsets 20..79 but the far-future record, newer than the state: judged again, and
        # dead-lettered again, once; nothing timestamp_backwards
        assert second.skipped_replays == 59
        assert [(b.reason, b.ref) for b in bad2] == [("timestamp_too_far_ahead", ("p0", FAR))]
    else:  # timestamps promise no order: the position alone decides
        assert second.skipped_replays == 60 and bad2 == []
    assert second.keys["a"].count == ref.keys["a"].count  # no record folded twice
    assert [b.ref for b in bad1] == [b.ref for b in ref_bad]
    assert sorted(x.alert_id for x in a1 + a2) == sorted(x.alert_id for x in ref_alerts)
    assert len(ref_alerts) == 1


def test_the_first_record_past_the_checkpoint_ends_the_replay_check(tmp_path):
    store = CheckpointStore(tmp_path)
    first = pipeline(store)
    first.process(as_list(series(True)[:80]))
    first.checkpoint()
    second = pipeline(store)
    second.process(as_list(series(True)[79:81]))
    assert second.skipped_replays == 1 and second.keys["a"].replay_gate is None
    # a later record at an older offset (another run's numbering) is judged on its own again
    _, bad = second.process([Record("a", 500.0, np.array([1.0]), ("p0", 3))])
    assert bad == [] and second.skipped_replays == 1 and second.keys["a"].count == 81


def test_without_replay_gates_a_restored_key_takes_records_whose_offsets_start_again(tmp_path):
    """stdin: a second run's line numbers start at 0 again; its records are new, never replays."""
    store = CheckpointStore(tmp_path)
    first = pipeline(store)
    first.process([Record("a", float(i), np.array([1.0]), ("stdin", i)) for i in range(40)])
    first.checkpoint()
    second = pipeline(store)
    second.replay_gates = False
    _, bad = second.process([Record("a", 100.0 + i, np.array([1.0]), ("stdin", i)) for i in range(40)])
    assert bad == [] and second.skipped_replays == 0 and second.keys["a"].count == 80


def test_an_unreadable_checkpoint_is_logged_once_per_key_and_its_records_are_dead_lettered(tmp_path, caplog):
    store = CheckpointStore(tmp_path)
    first = pipeline(store)
    first.process([Record(k, 0.0, np.array([1.0]), ("p0", i)) for i, k in enumerate("ab")])
    first.checkpoint()
    store.path("a").write_bytes(b"not a checkpoint")
    second = pipeline(store)
    with caplog.at_level(logging.WARNING, logger="ratiowatch.daemon"):
        for batch in range(3):
            _, bad = second.process([Record(k, 1.0 + batch, np.array([1.0]), ("p0", 10 + batch)) for k in "ab"])
            assert [(b.reason, b.key) for b in bad] == [("processing_error", "a")]
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and warnings[0].key == "a" and "unreadable checkpoint" in warnings[0].error
    assert second.keys["b"].count == 4


def test_a_partition_whose_positions_started_again_brings_new_records_not_replays(tmp_path):
    """A topic made anew or a file replaced: its offsets start at 0 again, its records are newer."""
    store = CheckpointStore(tmp_path)
    first = pipeline(store)
    first.process([Record("a", float(i), np.array([1.0]), ("p0", i)) for i in range(40)])
    first.checkpoint()
    second = pipeline(store)
    _, bad = second.process([Record("a", 100.0 + i, np.array([1.0]), ("p0", i)) for i in range(30)])
    assert bad == [] and second.skipped_replays == 0 and second.keys["a"].count == 70

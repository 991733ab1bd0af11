"""Replays after a restart: a restored key skips the records of its partition at or before its
checkpoint's position that are not newer than its state; a newer one there is judged on its own
and the check goes on until a record passes the position; a source that cannot replay (stdin) has
nothing skipped; an unreadable checkpoint is logged once per key.

One record with a far-future timestamp (dead-lettered as timestamp_too_far_ahead) used to end the
replay check: the already-processed records after it were dead-lettered as timestamp_backwards
(or, with check_timestamps = false, processed twice, with alerts of new ids).

A key whose clock moved back (a confirmed drop beyond max_timestamp_ahead, e.g. milliseconds then
seconds) used to take its replayed records from before the drop for new ones (newer than the
state): they were folded twice, the clock was set to the wrong unit again, and the next new record
was dead-lettered as timestamp_backwards.
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


MS, SEC = 1.7e12, 1.7e9  # the same clock in milliseconds and in seconds
MOVED_BACK = [MS, MS + 1, SEC + 1, SEC + 2] + [SEC + 3 + i for i in range(6)]  # moves back at offset 3


def moved_back_pipeline(store):
    return Pipeline(MeanShiftFactory(), store=store, max_timestamp_ahead=1000.0, ahead_confirm=2)


def offsets(stamps, start=0):
    return [(start + i, t, float(i % 3)) for i, t in enumerate(stamps)]


@pytest.mark.parametrize("form", [as_list, as_batch])
def test_a_replay_skips_the_records_before_the_key_clock_moved_back_whatever_their_timestamps(tmp_path, form):
    # the records before the drop are newer than the state, yet were folded before the checkpoint
    store = CheckpointStore(tmp_path)
    first = moved_back_pipeline(store)
    _, bad1 = first.process(form(offsets(MOVED_BACK)))
    assert [(b.reason, b.ref[1]) for b in bad1] == [("timestamp_backwards", 2)]
    first.checkpoint()
    second = moved_back_pipeline(store)
    _, bad2 = second.process(form(offsets(MOVED_BACK)))
    ks = second.keys["a"]
    assert bad2 == [] and second.skipped_replays == 10
    assert ks.count == first.keys["a"].count == 9 and ks.detector.n == 9 and ks.last_ts == SEC + 8
    _, bad3 = second.process(form(offsets([SEC + 20 + i for i in range(3)], start=10)))
    assert bad3 == [] and ks.count == 12 and ks.replay_gate is None


def test_a_replay_skips_the_records_before_the_key_clock_last_moved_back(tmp_path):
    # the clock moves back, jumps ahead again and moves back again: the latest move back counts
    stamps = MOVED_BACK[:5] + [MS + 10, MS + 11, SEC + 10, SEC + 11, SEC + 12]
    store = CheckpointStore(tmp_path)
    first = moved_back_pipeline(store)
    first.process(as_list(offsets(stamps)))
    first.checkpoint()
    second = moved_back_pipeline(store)
    _, bad = second.process(as_list(offsets(stamps)))
    assert bad == [] and second.skipped_replays == 10
    assert second.keys["a"].count == first.keys["a"].count and second.keys["a"].last_ts == SEC + 12


def test_a_key_whose_clock_never_moved_back_checkpoints_the_same_metadata_as_before(tmp_path):
    # checkpoints of keys with an ordinary clock stay as they were
    store = CheckpointStore(tmp_path)
    first = pipeline(store)
    first.process(as_list(series(True)[:80]))
    first.checkpoint()
    assert set(store.load("a")[1]) == {"dim", "count", "last_ts", "last_ref", "seq", "detector"}


@pytest.mark.parametrize("form", [as_list, as_batch])
def test_a_partition_whose_positions_started_again_forgets_where_the_key_clock_moved_back(tmp_path, form):
    # the move back's offset belongs to the old numbering: it must not make new records replays
    store = CheckpointStore(tmp_path)
    first = moved_back_pipeline(store)
    first.process(form(offsets(MOVED_BACK)))
    first.process(form(offsets([SEC + 100 + i for i in range(6)])))  # offsets 0..5 again
    first.checkpoint()
    assert "back_ref" not in store.load("a")[1]
    second = moved_back_pipeline(store)
    _, bad = second.process(form(offsets([SEC + 200 + i for i in range(3)])))  # offsets 0..2 once more
    assert bad == [] and second.skipped_replays == 0 and second.keys["a"].count == 18


def test_where_the_key_clock_moved_back_skips_records_of_that_partition_only(tmp_path):
    # another partition numbers its records apart: a newer record there is judged on its own
    store = CheckpointStore(tmp_path)
    first = moved_back_pipeline(store)
    first.process(as_list(offsets(MOVED_BACK)))
    first.checkpoint()
    second = moved_back_pipeline(store)
    _, bad = second.process([Record("a", SEC + 9, np.array([1.0]), ("p1", 1))])
    assert bad == [] and second.skipped_replays == 0 and second.keys["a"].count == 10

"""Columnar batches: BatchParser gives exactly what parse_record gives per message (rows, reasons,
details), and the pipeline's columnar path gives exactly what its list path gives."""

from __future__ import annotations

import json

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ratiowatch.stream.engine.checkpoint import CheckpointStore
from ratiowatch.stream.engine.pipeline import Pipeline
from ratiowatch.connectors.records import BadRecord, BatchParser, FieldSpec, Record, RecordBatch, RecordError, parse_record
from toy_detector import MeanShiftFactory, step_series

SPEC = FieldSpec(key="k", timestamp="t", values=("v",))


def per_record(raws, spec=SPEC, max_bytes=200, part="p0"):
    out = []
    for off, raw in enumerate(raws):
        try:
            out.append(parse_record(raw if raw is not None else b"", spec, ref=(part, off), max_bytes=max_bytes,
                                    fallback_timestamp=float(off)))
        except RecordError as err:
            from ratiowatch.connectors.records import bad_record

            out.append(bad_record(raw if raw is not None else b"", err, (part, off)))
    return out


def batched(raws, spec=SPEC, max_bytes=200, part="p0"):
    p = BatchParser(spec, max_bytes)
    for off, raw in enumerate(raws):
        p.add(raw, part, off)
    return p.finish()


def as_items(batch):
    return batch.items() if isinstance(batch, RecordBatch) else batch


def same_items(a, b):
    key = lambda it: it.ref  # noqa: E731
    a, b = sorted(a, key=key), sorted(b, key=key)
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert type(x) is type(y), (x, y)
        if isinstance(x, Record):
            assert x == y and x.ref == y.ref and x.values.dtype == y.values.dtype == np.float64
        else:
            assert x == y


TRICKY = [
    b'{"k": "a", "t": 1, "v": 1.5}',
    b'  {"k": "a", "t": 2, "v": 2}  \n',                 # surrounding whitespace
    b'{"k": "a", "t": 3, "v": "2.5"}',                    # numeric string: accepted by the slow path
    b'{"k": 7, "t": 4, "v": 1}',                          # numeric key -> "7"
    b'{"k": "a", "t": 4, "v": [1, null]}',                # a missing value in a list: missing_field
    b'{"k": "", "t": 5, "v": 1}',                         # empty key
    b'{"k": "a", "v": 1}',                                # no timestamp
    b'{"k": "a", "t": "x", "v": 1}',                      # timestamp not numeric
    b'{"k": "a", "t": 6, "v": NaN}',                      # NaN literal
    b'{"k": "a", "t": Infinity, "v": 1}',
    b'{"k": "a", "t": 7, "v": true}',                     # boolean value
    b'{"k": "a", "t": 8, "v": [1, 2]}',                   # another dimension
    b'{"k": "a", "t": 9, "v": []}',
    b'{"k": "a", "t": 10, "v": 1e400}',                   # overflows to inf
    b'{"k": "a", "t": 11, "v": 123456789012345678901234567890}',
    b'{"k": "a", "t": 12, "v": 1}{"k": "b"}',             # extra data
    b'{"k": "a", "t": 13, "v": 1',                        # truncated
    b'[1, 2]',                                            # not an object
    b'\xef\xbb\xbf{"k": "a", "t": 14, "v": 1}',          # UTF-8 BOM: json.loads on bytes accepts it
    '{"k": "é", "t": 15, "v": 1}'.encode("utf-16"),      # UTF-16: json.loads detects it
    b'\xff\xfe garbage',
    b'',
    None,                                                 # Kafka tombstone
    b'{"k": "a", "t": 16, "v": 1, "pad": "' + b"x" * 300 + b'"}',  # oversized
    b'{"k": "b", "t": 17.5, "v": -0.0}',
    b'{"k": "a", "t": 18, "v": 1e308}',                   # finite, but out of range
    b'{"k": "a", "t": 19, "v": [1, -2e150]}',
    b'{"k": "a", "t": 20, "v": 1e150}',                   # the largest accepted
    b'{"k": true, "t": 21, "v": 1}',                      # keys that would be named "True", ...
    b'{"k": {"a": 1}, "t": 22, "v": 1}',
    b'{"k": ["x"], "t": 23, "v": 1}',
    b'{"k": "a", "t": true, "v": 1}',                     # a boolean timestamp (read as 1.0 before)
]


def test_batch_parser_equals_parse_record_on_tricky_messages():
    same_items(as_items(batched(TRICKY)), per_record(TRICKY))


def test_batch_parser_columns_for_one_dimension_and_list_form_for_mixed():
    good = [json.dumps({"k": f"k{i % 3}", "t": i, "v": [i, -i]}).encode() for i in range(9)]
    b = batched(good)
    assert isinstance(b, RecordBatch) and b.values.shape == (9, 2)
    assert b.positions == {"p0": 9} and b.bad == []
    assert b.values[4].tolist() == [4.0, -4.0] and b.keys[4] == "k1" and b.offsets[4] == 4
    mixed = good[:4] + [b'{"k": "k0", "t": 99, "v": 1}'] + good[4:]
    out = batched(mixed)
    assert isinstance(out, list)
    same_items(out, per_record(mixed))


def test_batch_parser_without_key_and_timestamp_fields_uses_default_key_and_offsets():
    spec = FieldSpec(key=None, timestamp=None, values=("a", "b"), default_key="dflt")
    raws = [b'{"a": 1, "b": 2}', b'{"a": 3}', b'{"a": 4, "b": [5, 6]}', b'{"a": 7, "b": 8}']
    same_items(as_items(batched(raws, spec)), per_record(raws, spec))


json_scalar = st.one_of(st.none(), st.booleans(), st.integers(-10**20, 10**20),
                        st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=4))
json_value = st.one_of(json_scalar, st.lists(st.one_of(st.integers(-5, 5), st.floats(-1e3, 1e3), st.booleans(),
                                                       st.text(max_size=2)), max_size=3))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(
    st.fixed_dictionaries({"k": st.one_of(st.sampled_from(["a", "b"]), json_scalar), "t": json_value,
                           "v": json_value}),
    st.fixed_dictionaries({"k": st.sampled_from(["a", "b"]), "t": st.integers(0, 100),
                           "v": st.floats(-1e6, 1e6)}),
    st.binary(max_size=12),
), max_size=12))
def test_batch_parser_equals_parse_record_on_generated_messages(objs):
    raws = [o if isinstance(o, bytes) else json.dumps(o).encode() for o in objs]
    same_items(as_items(batched(raws)), per_record(raws))


# --- pipeline: columnar path == list path -----------------------------------------------------------
def run_both(batches_raw, store_dir=None, dim=None):
    """Feed the same polls to two pipelines (list form vs columnar form); return both outcomes."""
    outs = []
    for columnar in (False, True):
        store = CheckpointStore(store_dir / ("c" if columnar else "l")) if store_dir is not None else None
        p = Pipeline(MeanShiftFactory(w=3, thr=4.0), store=store, dim=dim)
        alerts, bad = [], []
        for raws, part, first in batches_raw:
            parser = BatchParser(FieldSpec(key="k", timestamp="t", values=("v",)))
            for i, raw in enumerate(raws):
                parser.add(raw, part, first + i)
            batch = parser.finish()
            if not columnar:
                batch = as_items(batch)
            a, b = p.process(batch)
            alerts += a
            bad += b
        outs.append((p, alerts, bad))
    return outs


def check_equal(outs):
    (p1, a1, b1), (p2, a2, b2) = outs
    assert a1 == a2
    assert sorted(b1, key=lambda x: x.ref) == sorted(b2, key=lambda x: x.ref)
    assert p1.positions == p2.positions and p1.key_partition == p2.key_partition
    assert {k: (s.count, s.last_ts, s.last_ref, s.dim) for k, s in p1.keys.items()} == \
           {k: (s.count, s.last_ts, s.last_ref, s.dim) for k, s in p2.keys.items()}


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(-2, 3), st.sampled_from([0.0, 9.0]),
                          st.integers(0, 20)), min_size=1, max_size=60),
       st.integers(1, 25))
def test_columnar_pipeline_equals_list_pipeline(events, poll_size):
    """Random keys, timestamps that sometimes go backwards, level shifts, odd dimensions."""
    ts = {"a": 0, "b": 0, "c": 0}
    raws = []
    for key, dt, level, odd in events:
        ts[key] += dt
        v = [level, 1.0] if odd == 0 else level
        raws.append(json.dumps({"k": key, "t": ts[key], "v": v}).encode())
    polls = [(raws[i:i + poll_size], "p0", i) for i in range(0, len(raws), poll_size)]
    check_equal(run_both(polls))


def test_columnar_pipeline_equals_list_pipeline_across_a_restore(tmp_path):
    """After a checkpoint and a restart, replays are skipped the same way (replay gates)."""
    rows = [json.dumps({"k": k, "t": t, "v": v}).encode()
            for t, v in enumerate(step_series(60, 35)) for k in ("a", "b")]
    ref_alerts, _ = Pipeline(MeanShiftFactory(w=3, thr=4.0)).process(as_items(batched(rows)))
    assert len(ref_alerts) == 2
    for columnar in (False, True):
        store = CheckpointStore(tmp_path / str(columnar))
        first = Pipeline(MeanShiftFactory(w=3, thr=4.0), store=store)
        parser = BatchParser(SPEC)
        for i, raw in enumerate(rows[:50]):
            parser.add(raw, "p0", i)
        b = parser.finish()
        first.process(b if columnar else as_items(b))
        first.checkpoint()
        second = Pipeline(MeanShiftFactory(w=3, thr=4.0), store=store)
        parser = BatchParser(SPEC)
        for i, raw in enumerate(rows[40:], start=40):  # replay from an older commit
            parser.add(raw, "p0", i)
        b = parser.finish()
        alerts, bad = second.process(b if columnar else as_items(b))
        assert second.skipped_replays == 10 and bad == []
        assert alerts == ref_alerts
        assert second.keys["a"].count == 60 and second.keys["b"].count == 60


def test_columnar_pipeline_keeps_bad_records_of_the_source():
    raws = [b'{"k": "a", "t": 1, "v": 1}', b"not json", b'{"k": "a", "t": 0, "v": 1}', b'{"k": "a", "t": 2, "v": 1}']
    (p1, _, b1), (p2, _, b2) = run_both([(raws, "p0", 0)])
    assert sorted(b.reason for b in b2) == ["malformed_json", "timestamp_backwards"]
    assert p2.positions == {"p0": 4} and p2.keys["a"].count == 2
    assert isinstance(b2[0], BadRecord)

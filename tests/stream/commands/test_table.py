"""How ``ratiowatch detect`` reads a table: formats, header, blank lines, bad cells, the time axis."""

import io
import json

import numpy as np
import pytest

from ratiowatch.stream.commands.table import TableError, is_time_name, read_table, read_table_text


def _rows(n=20, seed=0):
    rng = np.random.default_rng(seed)
    return [(i, float(rng.normal()), float(rng.normal())) for i in range(n)]


def _csv(rows, sep=",", header="time,cpu,mem"):
    body = "".join(sep.join(str(v) for v in r) + "\n" for r in rows)
    return (header.replace(",", sep) + "\n" if header else "") + body


def test_a_bad_cell_names_file_line_and_column():
    rows = _rows()
    text = _csv(rows).replace(f"{rows[7][2]}\n", "abc\n", 1)  # data row 7 -> file line 9
    with pytest.raises(TableError) as exc:
        read_table_text(text, name="m.csv")
    msg = str(exc.value)
    assert "m.csv line 9" in msg and "'mem'" in msg and "'abc'" in msg and "--bad-cells missing" in msg


def test_bad_cells_read_as_missing_on_request_with_a_count():
    rows = _rows()
    text = _csv(rows).replace(f"{rows[7][2]}\n", "abc\n", 1).replace(f"{rows[9][2]}\n", "?\n", 1)
    t = read_table_text(text, name="m.csv", bad_cells="missing")
    assert t.names == ["cpu", "mem"]
    assert np.isnan(t.values[7, 1]) and np.isnan(t.values[9, 1]) and np.isfinite(t.values[8, 1])
    assert any("2 non-numeric cell(s)" in n and "'mem'" in n for n in t.notes)


def test_a_decimal_comma_gets_a_hint():
    with pytest.raises(TableError, match="decimal commas"):
        read_table_text("a;b\n1;2\n3;4,5\n", name="d.csv")


def test_a_repeating_key_column_is_pointed_out():
    text = "host,v\n" + "".join(f"{'ab'[i % 2]},{i % 5}\n" for i in range(20))
    t = read_table_text(text, name="k.csv")
    assert t.names == ["v"] and any("'host' takes 2 values (a, b)" in n and "split the file" in n for n in t.notes)
    dates = "when,v\n" + "".join(f"2024-01-{i + 1:02d},{i % 5}\n" for i in range(20))
    assert not any("takes" in n for n in read_table_text(dates, name="d.csv").notes)


def test_text_and_missing_markers():
    t = read_table_text("host,v\na,1\nb,NA\nc,\nd,null\ne,4\n", name="h.csv")
    assert t.names == ["v"] and np.isnan(t.values[1:4, 0]).all()
    assert any("'host'" in n and "not used" in n for n in t.notes)
    with pytest.raises(TableError, match="'host' is not numeric"):
        read_table_text("host,v\na,1\nb,2\n", name="h.csv", columns=["host"])


@pytest.mark.parametrize("name", ["time_ms", "timestamp_s", "Time (s)", "ts", "epoch_ms", "idx"])
def test_time_named_columns_are_the_time_axis(name):
    rows = _rows()
    t = read_table_text(_csv([(r[0] * 1000, r[1], r[2]) for r in rows], header=f"{name},cpu,mem"), name="x.csv")
    assert t.names == ["cpu", "mem"] and t.time_name == name
    assert t.time_values[:3] == [0, 1000, 2000]
    assert any(f"{name!r} read as the time axis" in n for n in t.notes)


def test_time_word_inside_another_word_is_a_series():
    assert not is_time_name("uptime") and not is_time_name("cpu_t1") and not is_time_name("timeout")


def test_equal_step_column_is_an_index_unless_it_is_the_only_series():
    rows = _rows()
    t = read_table_text(_csv([(5 * r[0] + 100, r[1], r[2]) for r in rows], header="n,cpu,mem"), name="x.csv")
    assert t.time_name == "n" and t.names == ["cpu", "mem"]
    only = read_table_text("v\n" + "".join(f"{i}\n" for i in range(10)), name="x.csv")
    assert only.names == ["v"] and only.time_name is None
    assert any("only ever increases" in n for n in only.notes)


def test_increasing_uneven_column_is_kept_with_a_warning():
    text = "counter,cpu\n" + "".join(f"{i * i},{(-1) ** i}\n" for i in range(1, 12))
    t = read_table_text(text, name="c.csv")
    assert t.names == ["counter", "cpu"] and t.time_name is None
    assert any("'counter' only ever increases" in n and "--time-column counter" in n for n in t.notes)


def test_time_column_option():
    rows = _rows()
    text = _csv(rows)
    assert read_table_text(text, time_column="none").names == ["time", "cpu", "mem"]
    t = read_table_text(text, time_column="cpu")
    assert t.time_name == "cpu" and t.names == ["time", "mem"]
    with pytest.raises(TableError, match="--time-column 'nope' is not a column"):
        read_table_text(text, time_column="nope")


def test_headerless_file_keeps_its_first_row():
    rows = _rows()
    t = read_table_text(_csv(rows, header=None), name="n.csv")
    assert t.values.shape == (20, 2) and t.values[0, 0] == rows[0][1]
    assert t.names == ["col2", "col3"] and t.time_name == "col1" and t.lines[0] == 1
    assert any("no header row" in n for n in t.notes)


def test_blank_lines_are_counted_out_and_reported():
    rows = _rows()
    lines = _csv(rows).splitlines(keepends=True)
    text = "".join(lines[:4]) + "\n" + "".join(lines[4:])  # a blank line after data row 2
    t = read_table_text(text, name="b.csv")
    assert t.values.shape[0] == 20 and t.values[3, 0] == rows[3][1]
    assert t.lines[:5] == [2, 3, 4, 6, 7]
    assert any("skipped 1 blank line" in n and "line 5" in n for n in t.notes)


@pytest.mark.parametrize("sep", [";", "\t", "|", ","])
def test_separators_are_found(sep):
    rows = _rows()
    t = read_table_text(_csv(rows, sep=sep), name="s.txt")
    assert t.names == ["cpu", "mem"] and np.allclose(t.values[:, 0], [r[1] for r in rows])


def test_json_lines():
    rows = _rows()
    text = "".join(json.dumps({"time": r[0], "cpu": r[1], "host": "a", "mem": None if r[0] == 4 else r[2]}) + "\n"
                   for r in rows)
    t = read_table_text(text, name="x.jsonl")
    assert t.names == ["cpu", "mem"] and t.time_name == "time" and np.isnan(t.values[4, 1])
    with pytest.raises(TableError, match="line 2: not JSON"):
        read_table_text('{"a": 1}\n{"a": \n', name="x.jsonl")
    with pytest.raises(TableError, match=r"line 2, column 'a': 'x' is not a number"):
        read_table_text('{"a": 1}\n{"a": "x"}\n{"a": 2}\n', name="x.jsonl")


def test_stdin(monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO(_csv(_rows())))
    t = read_table("-")
    assert t.source == "<stdin>" and t.values.shape == (20, 2)


def test_a_lone_time_named_column_says_how_to_watch_it():
    text = "ts\n" + "".join(f"{v}\n" for v in (3, 1, 4, 1, 5, 9, 2, 6))
    with pytest.raises(TableError, match="the only numeric column, 'ts', reads as the time axis.*--column ts"):
        read_table_text(text, name="t.csv")
    assert read_table_text(text, name="t.csv", columns=["ts"]).names == ["ts"]


def test_empty_and_header_only_inputs():
    with pytest.raises(TableError, match="empty"):
        read_table_text("\n\n", name="e.csv")
    with pytest.raises(TableError, match="no data rows"):
        read_table_text("a,b\n", name="e.csv")

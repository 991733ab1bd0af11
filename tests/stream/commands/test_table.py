"""How ``ratiowatch detect`` reads a table: formats, header, row length, blank lines, bad cells, the time axis."""

import csv
import io
import json

import numpy as np
import pytest

from ratiowatch.stream.commands.table import TableError, _Column, is_time_name, read_table, read_table_text


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
    # in order, as a time axis is (a time-named column out of order is a series: see below)
    text = "ts\n" + "".join(f"{v}\n" for v in (3, 4, 4, 5, 7, 9, 12, 16))
    with pytest.raises(TableError, match="the only numeric column, 'ts', reads as the time axis.*--column ts"):
        read_table_text(text, name="t.csv")
    assert read_table_text(text, name="t.csv", columns=["ts"]).names == ["ts"]


def test_empty_and_header_only_inputs():
    with pytest.raises(TableError, match="empty"):
        read_table_text("\n\n", name="e.csv")
    with pytest.raises(TableError, match="no data rows"):
        read_table_text("a,b\n", name="e.csv")


# --- rows with more cells than the header ------------------------------------------------------------


def test_a_row_with_more_cells_than_the_header_is_an_error_naming_its_line():
    text = "value,other\n0.5,1.5\n0.25,1.25,7.5\n0.75,1.75\n"
    with pytest.raises(TableError, match=r"r\.csv line 3 has 3 cells, the header 2") as exc:
        read_table_text(text, name="r.csv")
    assert "more such row" not in str(exc.value)


def test_a_header_with_fewer_names_than_the_rows_is_an_error():
    text = "value\n" + "".join(f"{i}.5,{-i}.25\n" for i in range(10))
    with pytest.raises(TableError, match=r"line 2 has 2 cells, the header 1; 9 more such row\(s\)") as exc:
        read_table_text(text, name="h.csv")
    assert "name every column in the header" in str(exc.value)


def test_decimal_commas_in_a_comma_separated_file_are_an_error_with_a_hint():
    text = "value\n" + "".join(f"{10 - i % 3},{19 + i}\n" for i in range(20))
    with pytest.raises(TableError, match="line 2 has 2 cells, the header 1") as exc:
        read_table_text(text, name="d.csv")
    msg = str(exc.value)
    assert "decimal commas" in msg and "--delimiter ';'" in msg


def test_unquoted_thousands_separators_are_an_error_with_a_hint():
    text = "value,other\n" + "".join(f"{10 + i % 2},{189 + i}.1,0.{646 + i}\n" for i in range(20))
    with pytest.raises(TableError, match="line 2 has 3 cells, the header 2") as exc:
        read_table_text(text, name="t.csv")
    assert "thousands separators" in str(exc.value) and "quote" in str(exc.value)


def test_comment_lines_above_the_header_are_pointed_out():
    text = "# exported from a dashboard\nvalue,other\n" + "".join(f"{i},{-i}\n" for i in range(10))
    with pytest.raises(TableError, match="lines starting with '#' are not skipped"):
        read_table_text(text, name="c.csv")


def test_a_row_longer_than_a_headerless_first_row_is_an_error():
    with pytest.raises(TableError, match=r"line 3 has 3 cells, the first row \(no header\) 2"):
        read_table_text("1.5,2.5\n3.5,4.5\n5.5,6.5,7.5\n", name="n.csv")


def test_a_trailing_separator_on_data_rows_is_not_an_error():
    t = read_table_text("a,b\n1,2,\n3,4,\n5,6,\n", name="t.csv", time_column="none")
    assert t.names == ["a", "b"] and t.values.tolist() == [[1, 2], [3, 4], [5, 6]]


def test_a_row_with_fewer_cells_than_the_header_reads_its_missing_cells_as_missing():
    t = read_table_text("a,b,c\n1,2,3\n4\n5,6,7\n", name="f.csv", time_column="none")
    assert t.values.shape == (3, 3) and t.values[1, 0] == 4 and np.isnan(t.values[1, 1:]).all()


# --- header or data --------------------------------------------------------------------------------


def test_a_headerless_file_whose_first_column_is_a_date_keeps_its_first_row():
    text = "".join(f"2024-01-01T00:{i:02d},{0.5 + i % 3}\n" for i in range(20))
    t = read_table_text(text, name="d.csv")
    assert t.values.shape == (20, 1) and t.values[0, 0] == 0.5 and t.lines[0] == 1
    assert t.names == ["col2"] and any("no header row" in n and "2024-01-01T00:00" in n for n in t.notes)


@pytest.mark.parametrize("first", ["1.0,,3.0", "1.0,NA,3.0"])
def test_a_headerless_first_row_with_a_missing_cell_is_data(first):
    text = first + "\n" + "".join(f"{i}.5,{-i}.25,{i % 2}\n" for i in range(10))
    t = read_table_text(text, name="m.csv", time_column="none")
    assert t.names == ["col1", "col2", "col3"] and t.values.shape == (11, 3)
    assert t.values[0, 0] == 1.0 and np.isnan(t.values[0, 1])


def test_a_header_of_numbers_is_read_as_data_and_the_note_says_how_to_name_it():
    text = "101,102\n" + "".join(f"{i % 3}.5,{-i}.25\n" for i in range(10))
    t = read_table_text(text, name="s.csv")
    assert t.names == ["col1", "col2"] and t.values.shape == (11, 2)
    assert any("line 1: 101, 102 reads as data" in n and "header of numbers" in n for n in t.notes)


@pytest.mark.parametrize("header,first", [("date,value", "2024-01-{:02d}"), ("when,value", "10:{:02d}"),
                                          ("host,value", "h{}"), (",value", "{}")])
def test_a_text_header_above_dates_and_numbers_stays_a_header(header, first):
    text = header + "\n" + "".join(f"{first.format(i + 1)},{i % 3}.5\n" for i in range(10))
    t = read_table_text(text, name="h.csv")
    assert t.names == ["value"] and t.values.shape == (10, 1) and t.values[0, 0] == 0.5


def test_a_header_that_names_yearly_columns_stays_a_header():
    # its numbers fit the columns below, but a row with a text cell is never a row of data
    text = "region,2022,2023\n" + "".join(f"r{i},{i % 3}.5,{-i}.25\n" for i in range(10))
    t = read_table_text(text, name="y.csv")
    assert t.names == ["2022", "2023"] and t.values.shape == (10, 2)


def test_the_header_pandas_writes_above_an_unnamed_index_stays_a_header():
    text = ",0,1\n" + "".join(f"{i},{i % 3}.5,{-i}.25\n" for i in range(10))
    t = read_table_text(text, name="p.csv")
    assert t.names == ["0", "1"] and t.time_name == "" and t.values.shape == (10, 2)


# --- blank lines and rows of missing values --------------------------------------------------------


@pytest.mark.parametrize("empty_row", [",", '"",""', ' , '])
def test_a_row_of_empty_cells_is_a_row_of_missing_values_not_a_blank_line(empty_row):
    rows = [f"{i}.5,{-i}.25" for i in range(10)]
    rows[4] = empty_row
    t = read_table_text("a,b\n" + "\n".join(rows) + "\n", name="m.csv", time_column="none")
    assert t.values.shape == (10, 2) and np.isnan(t.values[4]).all() and t.values[5, 0] == 5.5
    assert t.lines == list(range(2, 12)) and not any("blank" in n for n in t.notes)


def test_an_empty_quoted_cell_in_a_one_column_file_is_a_missing_value():
    # csv.writer writes a row holding one empty cell as "" so that it is not a blank line
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(["value"])
    for i in range(10):
        writer.writerow([""] if i in (3, 4) else [f"{i}.5"])
    buf.write("\n   \n")  # a blank line and a line of spaces at the end are still blank
    t = read_table_text(buf.getvalue(), name="w.csv")
    assert t.values.shape == (10, 1) and np.isnan(t.values[3:5, 0]).all() and t.values[5, 0] == 5.5
    assert any("skipped 2 blank line" in n for n in t.notes)


# --- byte order mark, JSON arrays, decimal-comma columns, separators --------------------------------


def test_stdin_drops_a_byte_order_mark(monkeypatch):
    data = "\ufeffvalue,other\n" + "".join(f"{i}.5,{-i}.25\n" for i in range(10))
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(data.encode("utf-8")), encoding="utf-8"))
    t = read_table("-", columns=["value"])
    assert t.names == ["value"] and t.values.shape == (10, 1)


def test_stdin_that_is_not_utf8_is_an_error(monkeypatch):
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"a,b\n1,2\n\xff,3\n"), encoding="utf-8"))
    with pytest.raises(TableError, match="<stdin> is not UTF-8 text"):
        read_table("-")


@pytest.mark.parametrize("name,indent", [("a.json", None), ("a.json", 1), ("<stdin>", 1), ("a.txt", None)])
def test_a_json_array_is_an_error_saying_what_is_read(name, indent):
    text = json.dumps([{"t": i, "value": i % 3 + 0.5} for i in range(10)], indent=indent) + "\n"
    with pytest.raises(TableError, match="is a JSON array, which is not read; write JSON lines .* or CSV"):
        read_table_text(text, name=name)


def test_a_header_that_starts_with_a_bracket_is_not_a_json_array():
    t = read_table_text("[ms],cpu\n" + "".join(f"{i * 10},{i % 3}.5\n" for i in range(10)), name="b.csv")
    assert "cpu" in t.names


def test_a_column_of_decimal_comma_numbers_is_an_error_with_a_hint():
    text = "time;value\n" + "".join(f"{i};{10 - i % 3},{19 + i}\n" for i in range(10))
    with pytest.raises(TableError, match=r"line 2, column 'value': '10,19' is not a number \(decimal commas"):
        read_table_text(text, name="d.csv")
    with pytest.raises(TableError, match="decimal commas"):
        read_table_text(text, name="d.csv", columns=["value"])


def test_a_column_of_decimal_comma_numbers_is_left_out_with_a_note_on_request():
    text = "cpu;mem\n" + "".join(f"{i % 3}.5;{10 - i % 3},{19 + i}\n" for i in range(10))
    t = read_table_text(text, name="d.csv", bad_cells="missing")
    assert t.names == ["cpu"] and any("'mem' is not used: decimal commas" in n for n in t.notes)


def test_a_column_of_quoted_thousands_separated_numbers_is_an_error_with_a_hint():
    text = "value,other\n" + "".join(f'"{i + 1},{100 + i}.5",{i % 3}\n' for i in range(10))
    with pytest.raises(TableError, match="'1,100.5' is not a number \\(thousands separators"):
        read_table_text(text, name="t.csv")


@pytest.mark.parametrize("given", ["\t", "\\t", "tab", "TAB"])
def test_a_tab_separator_may_be_given_as_backslash_t_or_tab(given):
    t = read_table_text(_csv(_rows(), sep="\t"), name="t.txt", delimiter=given)
    assert t.names == ["cpu", "mem"] and t.values.shape == (20, 2)


@pytest.mark.parametrize("given", ["ab", "", '"', "\n"])
def test_a_separator_that_is_not_one_character_is_an_error(given):
    with pytest.raises(TableError, match="--delimiter .* is not a separator; give one character"):
        read_table_text(_csv(_rows()), name="x.csv", delimiter=given)


def test_the_caller_may_say_whether_the_first_row_is_a_header():
    text = "101,102\n" + "".join(f"{i % 3}.5,{-i}.25\n" for i in range(10))
    t = read_table_text(text, name="s.csv", header=True)
    assert t.names == ["101", "102"] and t.values.shape == (10, 2)
    t = read_table_text("value,other\n" + text, name="s.csv", header=False, bad_cells="missing")
    assert t.names == ["col1", "col2"] and t.values.shape == (12, 2) and np.isnan(t.values[0]).all()


def test_a_column_given_twice_or_also_as_the_time_axis_is_an_error():
    text = "t,a,b\n" + "".join(f"{i},{i % 3}.5,{-i}.25\n" for i in range(10))
    with pytest.raises(TableError, match="'a' is given more than once"):
        read_table_text(text, columns=["a", "a"])
    with pytest.raises(TableError, match="given both as --column and as --time-column"):
        read_table_text(text, columns=["a", "t"], time_column="t")


@pytest.mark.parametrize("stamp", ["{}", "2024-01-{:02d}"])
def test_a_decreasing_time_axis_gets_a_note(stamp):
    # a newest-first export is replayed backwards without a word otherwise
    text = "time,a\n" + "".join(f"{stamp.format(20 - i)},{i % 3}.5\n" for i in range(10))
    t = read_table_text(text, name="d.csv")
    assert any("the time axis 'time' decreases" in n for n in t.notes)
    rising = read_table_text("time,a\n" + "".join(f"{stamp.format(i + 1)},{i % 3}.5\n" for i in range(10)))
    assert not any("decreases" in n for n in rising.notes)


# --- fixes: header of headerless files, strict numbers, line ends, pipes, time axes -----------------


@pytest.mark.parametrize("stamp", ["1/{}/2024 09:00:00 AM", "{:02d}-Jan-2024", '"Jan {}, 2024 9:00 PM"',
                                   "{} January 2024"])
def test_a_headerless_file_whose_first_column_is_a_date_with_am_pm_or_a_month_name_keeps_its_first_row(stamp):
    text = "".join(f"{stamp.format(i + 1)},{0.5 + i % 3}\n" for i in range(20))
    t = read_table_text(text, name="d.csv")
    assert t.values.shape == (20, 1) and t.values[0, 0] == 0.5 and t.lines[0] == 1
    assert any("no header row" in n for n in t.notes)


def test_a_headerless_first_row_missing_its_first_value_is_data_and_the_note_says_it_is_a_guess():
    text = ",0.1\n" + "".join(f"{i % 3}.25,{-i}.5\n" for i in range(10))
    t = read_table_text(text, name="m.csv", time_column="none")
    assert t.values.shape == (11, 2) and np.isnan(t.values[0, 0]) and t.values[0, 1] == 0.1
    assert any("a guess" in n and "--header yes" in n for n in t.notes)


def test_column_labels_above_an_index_that_does_not_count_from_zero_stay_a_header_with_a_note():
    text = ",2022,2023\n" + "".join(f"{i + 5},{i % 3}.5,{-i}.25\n" for i in range(10))
    t = read_table_text(text, name="p.csv")
    assert t.names == ["2022", "2023"] and t.values.shape == (10, 2)
    assert any("read as the header" in n and "--header no" in n for n in t.notes)


@pytest.mark.parametrize("cell", ["1_5", "\u0661\u0665", "\uff11\uff15", "inf", "0x1F"])
def test_only_plain_ascii_numbers_are_numbers(cell):
    text = "a\n" + "".join(f"{i % 3}.5\n" for i in range(5)) + f"{cell}\n"
    with pytest.raises(TableError, match=f"line 7, column 'a': {cell!r} is not a number"):
        read_table_text(text, name="n.csv")
    t = read_table_text(text, name="n.csv", bad_cells="missing")
    assert np.isnan(t.values[-1, 0]) and any("non-numeric" in n for n in t.notes)


def test_a_json_line_may_hold_a_line_separator_inside_a_string():
    text = "".join(json.dumps({"note": f"a\u2028b{i}", "v": i % 3}, ensure_ascii=False) + "\r\n" for i in range(6))
    t = read_table_text(text, name="u.jsonl")
    assert t.names == ["v"] and t.values.shape == (6, 1) and t.lines == [1, 2, 3, 4, 5, 6]


def test_a_pipe_is_read_as_a_file(tmp_path):
    import os
    import threading

    fifo = tmp_path / "p.csv"
    os.mkfifo(fifo)
    text = "v\n" + "".join(f"{i % 3}.5\n" for i in range(10))
    writer = threading.Thread(target=lambda: fifo.write_text(text), daemon=True)
    writer.start()
    t = read_table(fifo)
    writer.join(5)
    assert t.values.shape == (10, 1)
    with pytest.raises(TableError, match="is a directory"):
        read_table(tmp_path)
    with pytest.raises(TableError, match="no such file"):
        read_table(tmp_path / "nope.csv")


@pytest.mark.parametrize("name", ["T", "index", "t"])
def test_a_column_named_like_a_time_axis_whose_values_are_not_in_order_is_a_series(name):
    rng = np.random.default_rng(0)
    text = f"{name},P\n" + "".join(f"{a:.4f},{b:.4f}\n" for a, b in rng.normal(size=(20, 2)))
    t = read_table_text(text, name="t.csv")
    assert t.time_name is None and t.names == [name, "P"]
    assert any(f"column {name!r} is named like a time axis" in n for n in t.notes)


def test_a_date_column_and_an_index_of_prices_read_the_prices():
    text = "date,index\n" + "".join(f"2024-01-{i + 1:02d},{100 + (i * 7) % 5}.25\n" for i in range(20))
    t = read_table_text(text, name="s.csv")
    assert t.time_name == "date" and t.names == ["index"] and t.values.shape == (20, 1)


def test_notes_that_explain_an_error_come_with_it():
    text = "time,idx\n" + "".join(f"{i},{i * 2}\n" for i in range(20))
    with pytest.raises(TableError) as exc:
        read_table_text(text, name="x.csv")
    assert any("also look like a time axis" in n for n in exc.value.notes)


def test_a_missing_time_keeps_the_other_times_numbers():
    text = "time,v\n" + "".join(f"{'' if i == 3 else 1000 + 10 * i},{i % 3}.5\n" for i in range(10))
    t = read_table_text(text, name="g.csv")
    assert t.time_values[:5] == [1000, 1010, 1020, None, 1040]


# --- a found separator that splits numbers; headers that hold data; rows of tabs; exact times ------


def _wave(n=120):
    """A series that crosses zero, so that some of its values lie between -1 and 0."""
    return [round(float(v), 3) for v in 1.5 * np.sin(np.arange(n) / 7.0)]


@pytest.mark.parametrize("sep,flag", [(";", "--delimiter ';'"), ("\t", "--delimiter tab")])
def test_decimal_commas_between_another_separator_stop_without_a_header(sep, flag):
    # "0,346;-0,346": a comma is as regular a separator as the ';' in such a file
    text = "".join(f"{v:.3f}{sep}{-v:.3f}\n".replace(".", ",") for v in _wave())
    with pytest.raises(TableError, match=flag):
        read_table_text(text, name="dc.csv")
    # given, the separator is not questioned: the decimal commas themselves then stop it
    with pytest.raises(TableError, match="decimal commas"):
        read_table_text(text, name="dc.csv", delimiter=sep)


def test_a_cell_holding_a_semicolon_in_a_comma_separated_file_is_text():
    text = "host,tags,cpu\n" + "".join(f"h{i % 3},a;b,{i % 4}.5\n" for i in range(20))
    t = read_table_text(text, name="t.csv")
    assert t.names == ["cpu"] and t.values.shape == (20, 1)


@pytest.mark.parametrize("cells", [
    [f"{v:.3f}".replace(".", ",") for v in _wave()],  # -0,537: no integer is written -0
    ["1,5", "0,035", "2,0822", "1,25", "3,5"] * 10,  # 035, 0822: fraction digits, not zero-padded numbers
])
def test_one_column_of_decimal_commas_without_a_header_stops(cells):
    with pytest.raises(TableError, match="decimal comma") as exc:
        read_table_text("\n".join(cells) + "\n", name="one.csv")
    assert "write decimal dots" in str(exc.value) and "--delimiter ','" in str(exc.value)


def test_integer_tables_without_a_header_are_not_taken_for_decimal_commas():
    counts = "".join(f"{i % 9},{(7 * i) % 13}\n" for i in range(40))
    t = read_table_text(counts, name="c.csv", time_column="none")
    assert t.names == ["col1", "col2"] and t.values[3].tolist() == [3.0, 8.0]
    padded = "".join(f"{i % 5},{i + 1:04d}\n" for i in range(40))  # IDs 0001 ... 0040
    t = read_table_text(padded, name="p.csv", time_column="none")
    assert t.values[:2].tolist() == [[0.0, 1.0], [1.0, 2.0]] and not any("leading zero" in n for n in t.notes)


def test_digits_with_a_leading_zero_of_one_length_are_read_as_integers_with_a_note():
    # 0,346 0,035 ... or a count beside HHMM times: without a header the file cannot tell
    text = "".join(f"{i % 3},{c}\n" for i, c in enumerate(["346", "035", "822", "907", "061"] * 8))
    t = read_table_text(text, name="h.csv", time_column="none")
    assert t.values[1].tolist() == [1.0, 35.0]
    assert any("col2 holds digits with a leading zero" in n and "line 2: 1,035" in n and "decimal dots" in n
               for n in t.notes)


def test_one_column_of_decimal_commas_without_any_sign_is_read_as_two_integer_columns():
    # the documented limit: 1,5 and 2,7 are as well two integers
    t = read_table_text("1,5\n2,7\n3,1\n4,4\n", name="amb.csv", time_column="none")
    assert t.names == ["col1", "col2"] and t.values[0].tolist() == [1.0, 5.0]


def test_unquoted_thousands_separators_without_a_header_stop():
    values = [1034.6, 999.1, 1082.2, 870.0, 1250.5] * 10
    text = "".join(f"{v:,.1f}\n" for v in values)  # 999.1 has one cell, 1,034.6 two
    with pytest.raises(TableError, match="thousands separator") as exc:
        read_table_text(text, name="k.csv")
    assert "line 1: 1,034.6" in str(exc.value) and "line 2: 999.1" in str(exc.value)
    # one integer and one decimal per row, some rows missing the decimal, still read as such
    t = read_table_text("".join(f"{i % 7},{'' if i % 5 == 0 else f'{i}.5'}\n" for i in range(30)),
                        name="m.csv", time_column="none")
    assert t.values.shape == (30, 2) and np.isnan(t.values[5, 1]) and t.values[6].tolist() == [6.0, 6.5]


@pytest.mark.parametrize("first", ["#N/A", "-"])
def test_a_first_row_read_as_the_header_although_it_holds_numbers_gets_a_note(first):
    x = _wave(50)
    text = "".join(f"{v:.4f},{first if i == 0 else f'{-v:.4f}'}\n" for i, v in enumerate(x))
    t = read_table_text(text, name="f.csv")
    assert t.values.shape == (49, 2)  # what the header rules decide does not change
    assert any(n.startswith("f.csv: line 1 (0.0000") and "read as the header" in n and "--header no" in n
               for n in t.notes)
    assert read_table_text(text, name="f.csv", header=False, bad_cells="missing").values.shape == (50, 2)


def test_a_header_naming_yearly_columns_above_decimals_gets_no_note():
    t = read_table_text("region,2022,2023\nnorth,1.5,1.7\nsouth,2.5,2.1\neast,0.5,0.9\n", name="y.csv")
    assert t.names == ["2022", "2023"] and not any("--header no" in n for n in t.notes)


def test_a_line_of_tabs_in_a_tsv_is_a_row_of_missing_values():
    rows = [f"{i}.5\t{-i}.25" for i in range(10)]
    rows[4] = "\t"
    t = read_table_text("a\tb\n" + "\n".join(rows) + "\n", name="m.tsv", time_column="none")
    assert t.values.shape == (10, 2) and np.isnan(t.values[4]).all() and t.values[5, 0] == 5.5
    assert t.lines == list(range(2, 12)) and not any("blank" in n for n in t.notes)


def test_epoch_nanoseconds_label_the_rows_exactly():
    stamps = [1700000000123456789 + i * 1000000007 for i in range(10)]
    t = read_table_text("time_ns,value\n" + "".join(f"{s},{i % 5}\n" for i, s in enumerate(stamps)), name="ns.csv")
    assert t.time_name == "time_ns" and t.time_values == stamps
    assert read_table_text("t,v\n0,1\n1000,2\n2000,3\n", name="ms.csv").time_values == [0, 1000, 2000]


def test_blank_columns_at_the_end_of_a_spreadsheet_range_are_dropped():
    text = "time;value;;\n" + "".join(f"{i};{i % 7}.5;;\n" for i in range(20))
    t = read_table_text(text, name="export.csv")
    assert t.names == ["value"] and t.time_name == "time" and t.values[3, 0] == 3.5


def test_a_duplicate_column_name_says_what_to_do():
    with pytest.raises(TableError, match=r"duplicate column name\(s\) \['a'\]") as exc:
        read_table_text("a,b,a\n1,2,3\n4,5,6\n", name="d.csv")
    assert "give each column its own name" in str(exc.value) and "--header no" in str(exc.value)


@pytest.mark.parametrize("data,says", [
    ("time,city\n1,Zürich\n".encode("cp1252"), "iconv -f cp1252 -t utf-8"),
    ("time\tvalue\n1\t2\n".encode("utf-16"), "is UTF-16 text"),  # Excel's "Unicode text"
], ids=["cp1252", "utf-16"])
def test_a_file_that_is_not_utf8_says_how_to_convert_it(tmp_path, data, says):
    path = tmp_path / "export.csv"
    path.write_bytes(data)
    with pytest.raises(TableError) as exc:
        read_table(path)
    assert says in str(exc.value) and "save it as UTF-8" in str(exc.value)


def test_a_column_keeps_its_values_as_float64_and_only_the_text_its_messages_need():
    # a file of a million rows is not held as a string per cell until its last row is read
    col = _Column(keep=True)  # may be the time axis: a cell that is not a number labels its row
    for cell in ["NA", "x", "1", " 2 ", "", "y", "3"]:
        col.add(cell)
    assert col.values.typecode == "d" and col.texts is None and col.odd == {1: "x", 5: "y"}
    assert np.array_equal(col.array(), [np.nan, np.nan, 1, 2, np.nan, np.nan, 3], equal_nan=True)
    col = _Column(keep=False)
    for cell in ["1", "x", "2", "z"]:
        col.add(cell)
    assert col.odd == {} and col.bad == 2 and col.first_bad == (1, "x") and col.distinct is None


def test_what_needs_every_row_still_sees_rows_past_the_first_fifty():
    rows = [f"{i};{i % 7}.5;;" for i in range(200)]
    rows[180] += "x"  # the last unnamed column holds a cell: it is kept, the empty one dropped
    t = read_table_text("time;value;;\n" + "\n".join(rows) + "\n", name="export.csv")
    assert t.names == ["value"] and any("[''] hold no number" in n for n in t.notes)
    rows = [f"{i},{i % 7}.5" for i in range(200)]
    rows[150] += ",3"
    with pytest.raises(TableError, match=r"line 152 has 3 cells, the header 2"):
        read_table_text("time,value\n" + "\n".join(rows) + "\n", name="long.csv")

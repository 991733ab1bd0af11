"""The TSSB / UTSA and TCPD loaders on files that are almost well-formed: every field keeps its
place, every value is a finite number where the format has no missing values, and every refusal
names the file (and the line or index)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from cli_util import error_line

from ratiowatch.stream.commands.cli import main
from ratiowatch.stream.evaluate import tcpd, tssb

VALUES = [float(i % 7) for i in range(300)]


def write_tssb(root, desc, series: dict):
    """A TSSB-style folder: ``desc`` is desc.txt's text (or bytes), ``series`` maps a name to its
    values, its text or its bytes."""
    (root / "datasets").mkdir(parents=True, exist_ok=True)
    (root / "desc.txt").write_bytes(desc if isinstance(desc, bytes) else desc.encode())
    for name, values in series.items():
        if isinstance(values, list):
            values = "\n".join(str(v) for v in values) + "\n"
        (root / "datasets" / f"{name}.txt").write_bytes(values if isinstance(values, bytes) else values.encode())
    return root


def write_tcpd(root, raw_text: str):
    """A TCPD-style folder with one series ``a`` whose ``raw`` list is the JSON text ``raw_text``."""
    (root / "datasets").mkdir(parents=True, exist_ok=True)
    (root / "datasets" / "a.json").write_text('{"name": "a", "series": [{"raw": ' + raw_text + "}]}")
    (root / "annotations.json").write_text(json.dumps({"a": {"1": [1]}}))
    return root


# -- desc.txt: name,window_size,cp1,... ----------------------------------------------------------


def test_an_empty_window_size_is_refused_and_not_filled_by_the_first_change_point(tmp_path):
    # "A,,100,200" loaded as change points [200], 100 taken for the window size
    root = write_tssb(tmp_path, "A,,100,200\n", {"A": VALUES})
    with pytest.raises(ValueError, match=f"^{tmp_path}/desc.txt line 1: A: the window size is empty"):
        tssb.load_dir(root)


def test_an_empty_series_name_is_refused_by_the_half_split_and_by_the_loader_alike(tmp_path):
    # the half split listed the series "" while the loader loaded "A": A was in no half
    root = write_tssb(tmp_path, "B,10,50\n ,A,10,100\nC,10,50\n", {n: VALUES for n in "ABC"})
    for read in (tssb.series_names, tssb.load_dir):
        with pytest.raises(ValueError, match=f"^{tmp_path}/desc.txt line 2: the series name is empty"):
            read(root)


def test_blank_lines_and_trailing_commas_in_desc_txt_change_no_series(tmp_path):
    root = write_tssb(tmp_path, "B,10,50,\n\n  \n C , 10 , 50 , 120 \n", {"B": VALUES, "C": VALUES})
    assert tssb.series_names(root) == ["B", "C"]
    assert [(name, cps) for name, _, cps in tssb.load_dir(root)] == [("B", [50]), ("C", [50, 120])]


# -- datasets/<name>.txt: one finite number per line ---------------------------------------------


def test_a_blank_line_inside_the_data_is_refused_naming_its_line(tmp_path):
    # the blank line was skipped: every later value moved one index earlier, away from the change points
    root = write_tssb(tmp_path, "E,10,150\n", {"E": "\n".join(["0.0"] * 100 + [""] + ["5.0"] * 200)})
    with pytest.raises(ValueError, match=f"^{tmp_path}/datasets/E.txt line 101: blank line inside the data"):
        tssb.load_dir(root)


def test_blank_lines_after_the_last_value_move_nothing_and_are_accepted(tmp_path):
    root = write_tssb(tmp_path, "E,10,150\n", {"E": "\n".join(["0.0"] * 150 + ["5.0"] * 150) + "\n\n \n"})
    (_, x, cps), = tssb.load_dir(root)
    assert x.size == 300 and cps == [150] and x[149] == 0.0 and x[150] == 5.0


@pytest.mark.parametrize("value", ["inf", "-inf", "nan"])
def test_a_value_that_is_not_finite_is_refused_naming_its_line(tmp_path, value):
    root = write_tssb(tmp_path, "F,10,100\n", {"F": "\n".join(["1.0"] * 99 + [value] + ["2.0"] * 200)})
    message = f"^{tmp_path}/datasets/F.txt line 100: value {value} at index 99 is not finite"
    with pytest.raises(ValueError, match=message):
        tssb.load_dir(root)


# -- files that are not UTF-8 --------------------------------------------------------------------


@pytest.mark.parametrize("where", ["desc.txt", "streaming_results/Stored.csv"])
def test_a_file_that_is_not_utf8_is_one_error_line_naming_it(tmp_path, capsys, where):
    # a bare "'utf-8' codec can't decode byte 0xe9 in position 1" that named no file
    desc = b"G\xe9,10,100\n" if where == "desc.txt" else b"G,10,100\n"
    root = write_tssb(tmp_path / "d", desc, {"G": VALUES})
    if where != "desc.txt":
        (root / "streaming_results").mkdir()
        (root / where).write_bytes(b"dataset,true_cps,found_cps,alarm_index,f1_margin_1pct,covering\n"
                                   b"G\xe9,[100],[101],[110],1.0,0.99\n")
    assert main(["eval", "tssb", str(root)]) == 2
    assert error_line(capsys).startswith(f"ratiowatch eval tssb: {root / where}: not UTF-8 text")


# -- TCPD: raw values are numbers or null ----------------------------------------------------------


@pytest.mark.parametrize("raw, bad, shown", [
    ("[1, true, 3]", 1, "True, not a number or null"),
    ("[1, 2, false]", 2, "False, not a number or null"),
    ('[1, "2.5", 3]', 1, "'2.5', not a number or null"),
    ('[1, "NaN", 3]', 1, "'NaN', not a number or null"),
    ("[1, 2, Infinity]", 2, "inf, not a finite number"),
    ("[-Infinity, 2, 3]", 0, "-inf, not a finite number"),
    ("[1, 1e400, 3]", 1, "inf, not a finite number"),
])
def test_tcpd_values_other_than_finite_numbers_and_null_are_refused_naming_file_and_index(tmp_path, raw, bad, shown):
    # read as 1.0, 0.0, 2.5, nan and inf
    root = write_tcpd(tmp_path, raw)
    with pytest.raises(ValueError) as exc:
        tcpd.load_dir(root)
    assert str(exc.value) == (f"{tmp_path}/datasets/a.json: series[0].raw[{bad}] is {shown}"
                              + (" (null marks a missing value)" if "finite" in shown else ""))


def test_tcpd_missing_values_are_null_or_nan_and_read_as_nan(tmp_path):
    data, _ = tcpd.load_dir(write_tcpd(tmp_path, "[1, null, 2.5, NaN, -3]"))
    assert np.array_equal(data["a"][:, 0], [1.0, np.nan, 2.5, np.nan, -3.0], equal_nan=True)

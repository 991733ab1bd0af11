"""The generalisation protocol's halves, per-half means and seed spread, on hand-made rows."""

import pytest

from ratiowatch.stream.evaluate.protocol import (format_halves, half_means, methods_present, seed_spread_by_half,
                                                  select, split_halves)


def test_halves_sort_by_name_and_alternate():
    names = ["zeta", "alpha", "Beta", "gamma", "delta"]
    halves = split_halves(names)
    # sorted by name (Python's order: upper case first): Beta, alpha, delta, gamma, zeta
    assert halves == {"Beta": "tune", "alpha": "check", "delta": "tune", "gamma": "check", "zeta": "tune"}
    assert split_halves(reversed(names)) == halves  # the input order does not matter
    assert select(names, "tune") == ["Beta", "delta", "zeta"]
    assert select(names, "check") == ["alpha", "gamma"]
    assert select(names, "both") == sorted(names)
    assert split_halves([]) == {}
    with pytest.raises(ValueError, match="half must be one of"):
        select(names, "all")


def _rows():
    return {
        "a": {"half": "tune", "f1": 1.0, "cover": 0.5, "streaming": {"f1": 0.0, "cover": 0.2, "delay_mean": 10.0},
              "peers": {"pelt": {"f1": 0.5, "cover": 0.5}}, "stored": {"ClaSS": {"f1": 0.9, "cover": 0.9}}},
        "b": {"half": "check", "f1": 0.5, "cover": 1.0, "streaming": {"f1": 1.0, "cover": 0.4, "delay_mean": None}},
        "c": {"half": "tune", "f1": 0.0, "cover": 0.0, "streaming": {"f1": 0.5, "cover": 0.6, "delay_mean": 20.0},
              "peers": {"pelt": {"f1": 1.0, "cover": 0.0}}},
        "m": {"half": "check", "f1": 0.25, "cover": 0.75, "multi": True},
    }


def test_half_means_per_half_method_and_group():
    rows = _rows()
    methods = methods_present(rows)
    assert methods == ["ours", "ours_streaming", "peer:pelt", "stored:ClaSS"]
    out = half_means(rows, methods, {"": ("f1", "cover", "delay_mean"), "_multi": ("f1",)},
                     {"": lambda n: not rows[n].get("multi"), "_multi": lambda n: bool(rows[n].get("multi"))})
    assert list(out) == ["tune", "check", "all"]
    assert out["tune"]["ours"] == {"f1": 0.5, "cover": 0.25, "delay_mean": None, "n": 2, "f1_multi": None,
                                   "n_multi": 0}
    assert out["check"]["ours"]["f1"] == 0.5 and out["check"]["ours"]["f1_multi"] == 0.25
    assert out["all"]["ours"]["f1"] == pytest.approx(0.5) and out["all"]["ours"]["n"] == 3
    # streaming: a series without alarms has no delay; the mean is over the others
    assert out["tune"]["ours_streaming"]["delay_mean"] == 15.0 and out["check"]["ours_streaming"]["delay_mean"] is None
    # a method that did not run on a series leaves it out (and says how many it covers)
    assert out["all"]["peer:pelt"]["n"] == 2 and out["all"]["peer:pelt"]["f1"] == 0.75
    assert out["check"]["peer:pelt"]["n"] == 0 and out["check"]["peer:pelt"]["f1"] is None
    assert out["all"]["stored:ClaSS"]["cover"] == 0.9
    lines = format_halves(out, ("f1", "cover"))
    assert len(lines) == 2 + len(methods) and "tune (n=2)" in lines[0] and "check (n=1)" in lines[0]


def test_half_means_standard_errors_over_the_series():
    rows = {n: {"half": "tune", "cover": c} for n, c in zip("abcd", (0.2, 0.4, 0.6, 1.0))}
    rows["e"] = {"half": "check", "cover": 0.5}
    out = half_means(rows, ["ours"], {"": ("cover",)}, se=True)
    # sd (ddof 1) of 0.2, 0.4, 0.6, 1.0 is 0.3416; over sqrt(4)
    assert out["tune"]["ours"]["cover_se"] == pytest.approx(0.1708, abs=1e-4)
    assert out["check"]["ours"]["cover_se"] is None  # one series: no spread to measure
    assert "cover_se" not in half_means(rows, ["ours"], {"": ("cover",)})["tune"]["ours"]
    # the seed spread is of the means, not of their standard errors
    assert "cover_se" not in seed_spread_by_half([out, out], ["ours"])["by_half"]["tune"]["ours"]


def test_half_means_reports_only_the_halves_present():
    rows = {k: v for k, v in _rows().items() if v["half"] == "check"}
    out = half_means(rows, ["ours"], {"": ("f1",)})
    assert list(out) == ["check", "all"] and out["check"]["ours"]["f1"] == out["all"]["ours"]["f1"] == 0.375


def test_seed_spread_by_half():
    runs = [{"tune": {"ours": {"f1": f, "n": 2, "cover": None}}} for f in (0.5, 0.7, 0.6)]
    out = seed_spread_by_half(runs, ["ours", "ours_streaming"])
    f1 = out["by_half"]["tune"]["ours"]["f1"]
    assert out["seeds"] == 3 and f1["per_seed"] == [0.5, 0.7, 0.6]
    assert f1["mean"] == pytest.approx(0.6) and f1["sd"] == pytest.approx(0.0816, abs=1e-4)
    assert "cover" not in out["by_half"]["tune"]["ours"] and "ours_streaming" not in out["by_half"]["tune"]

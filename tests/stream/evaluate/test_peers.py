"""Peers in the same run: ruptures in-process, claspy through its own interpreter (JSON + .npy, no pickle)."""

import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from ratiowatch.stream.evaluate import peers as P

FAKE_CLASPY = {
    "claspy/__init__.py": "",
    "claspy-0.2.8.dist-info/METADATA": "Metadata-Version: 2.1\nName: claspy\nVersion: 0.2.8\n",
    "claspy/segmentation.py": """
        class BinaryClaSPSegmentation:
            def __init__(self, n_jobs=-1):
                self.n_jobs = n_jobs
            def fit_predict(self, x):
                if len(x) < 20:
                    raise ValueError("too short")
                return [len(x) // 2]
    """,
    "claspy/streaming/__init__.py": "",
    "claspy/streaming/segmentation.py": """
        class StreamingClaSPSegmentation:
            def __init__(self, n_timepoints=10000, log_cps=False):
                self.n_warmup, self.change_points, self.t = n_timepoints, [], -1
            def update(self, v):
                self.t += 1
                if self.t == 30:  # reports a change at 20, 10 samples late
                    self.change_points.append(20)
                return self
    """,
}


def _install_fake(tmp_path, monkeypatch, files):
    for rel, src in files.items():
        f = tmp_path / "fake" / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(textwrap.dedent(src))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "fake"))
    monkeypatch.setenv(P.CACHE_ENV, str(tmp_path / "cache"))
    return Path(sys.executable)


@pytest.fixture
def fake_claspy(tmp_path, monkeypatch):
    """A stand-in claspy on PYTHONPATH: the runner's protocol and the cache are tested without it."""
    return _install_fake(tmp_path, monkeypatch, FAKE_CLASPY)


def test_the_pinned_claspy_passes_the_check_and_another_version_is_skipped_with_a_note(tmp_path, monkeypatch):
    # the cache is keyed by the pinned version: another version's results were served as its own
    python = _install_fake(tmp_path, monkeypatch, FAKE_CLASPY)
    assert P.claspy_problem(python) is None
    (tmp_path / "fake" / "claspy-0.2.8.dist-info").rename(tmp_path / "fake" / "claspy-0.3.0.dist-info")
    (tmp_path / "fake" / "claspy-0.3.0.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: claspy\nVersion: 0.3.0\n")
    note = P.claspy_problem(python)
    assert note is not None and "claspy 0.3.0" in note and f"claspy=={P.CLASPY_VERSION}" in note


def test_lines_a_library_prints_on_the_runners_stdout_are_not_taken_for_its_records(tmp_path, monkeypatch):
    # one such line was a JSONDecodeError that threw the whole --peers run away
    chatty = {**FAKE_CLASPY, "claspy/segmentation.py": FAKE_CLASPY["claspy/segmentation.py"].replace(
        "return [len(x) // 2]", "print('some library chatter'); print('{not json'); return [len(x) // 2]")}
    python = _install_fake(tmp_path, monkeypatch, chatty)
    out = P.run_claspy({"long": np.arange(100.0)}, "claspy", python=python)
    assert out["long"]["change_points"] == [50] and out["long"]["error"] is None


def test_a_runner_that_dies_without_a_word_is_reported_with_its_exit_code(tmp_path, monkeypatch):
    dying = {**FAKE_CLASPY, "claspy/segmentation.py": FAKE_CLASPY["claspy/segmentation.py"].replace(
        "return [len(x) // 2]", "import os; os._exit(137)")}
    python = _install_fake(tmp_path, monkeypatch, dying)
    with pytest.raises(RuntimeError, match="exit code 137"):
        P.run_claspy({"long": np.arange(100.0)}, "claspy", python=python)


def test_fill_missing_peers():
    x = np.array([[np.nan, 1.0], [2.0, np.nan], [np.nan, np.nan], [4.0, 5.0]])
    assert np.array_equal(P.fill_missing_peers(x), [[2, 1], [2, 1], [2, 1], [4, 5]])
    assert np.array_equal(P.fill_missing_peers(np.full(3, np.nan)), np.zeros(3))


def test_claspy_runner_protocol_and_cache(fake_claspy, tmp_path):
    series = {"long": np.arange(100.0), "short": np.arange(10.0), "gappy": np.r_[np.nan, np.arange(60.0)],
              "two": np.zeros((50, 2))}
    out = P.run_claspy(series, "claspy", python=fake_claspy)
    assert out["long"]["change_points"] == [50] and out["long"]["error"] is None and not out["long"]["cached"]
    assert out["gappy"]["change_points"] == [30]  # the missing value was filled, not dropped
    assert "too short" in out["short"]["error"] and out["short"]["change_points"] == []
    assert out["two"]["change_points"] == [25]  # BinaryClaSPSegmentation takes (T, d)
    again = P.run_claspy(series, "claspy", python=fake_claspy)
    assert again["long"]["cached"] and again["long"]["change_points"] == [50]
    assert not again["short"]["cached"]  # failures are not cached
    cs = P.run_claspy({"long": np.arange(100.0), "two": np.zeros((50, 2))}, "class", python=fake_claspy)
    assert cs["long"]["change_points"] == [20] and cs["long"]["alarm_index"] == [30]
    assert "univariate" in cs["two"]["error"]
    assert len(list((tmp_path / "cache").glob("*.json"))) == 4  # long, gappy, two (claspy); long (class)


def test_claspy_streaming_rate(fake_claspy):
    r = P.claspy_streaming_rate(np.zeros(500), python=fake_claspy, warmup=10)
    assert r["points"] == 500 and r["error"] is None and r["points_per_s"] > 0
    assert "stream_points" not in r  # the stand-in's warm-up window is the whole series


def test_runner_failure_is_reported_and_other_peers_continue(tmp_path, monkeypatch):
    bad = tmp_path / "venv" / "bin" / "python"
    bad.parent.mkdir(parents=True)
    bad.write_text("#!/bin/sh\necho broken >&2\nexit 3\n")
    bad.chmod(0o755)
    monkeypatch.setenv(P.VENV_ENV, str(tmp_path / "venv"))
    monkeypatch.setenv(P.CACHE_ENV, str(tmp_path / "cache"))
    res, notes = P.run_peers({"a": np.arange(50.0)}, ["claspy"])
    assert "claspy" not in res and "broken" in notes[0]


def test_claspy_peers_without_their_environment_say_how_to_build_it(tmp_path, monkeypatch):
    monkeypatch.setenv(P.VENV_ENV, str(tmp_path / "absent"))
    assert P.peers_python() is None
    res, notes = P.run_peers({"a": np.arange(50.0)}, ["claspy", "class"])
    assert res == {} and len(notes) == 1 and "make peers" in notes[0]
    with pytest.raises(FileNotFoundError, match="make peers"):
        P.run_claspy({"a": np.arange(50.0)}, "class")


def test_ruptures_peers_skipped_cleanly_when_missing(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "ruptures", None)  # import ruptures -> ModuleNotFoundError
    monkeypatch.setenv(P.VENV_ENV, str(tmp_path / "absent"))
    res, notes = P.run_peers({"a": np.arange(50.0)}, P.ALL_PEERS)
    assert any("ruptures" in n for n in notes) and any("make peers" in n for n in notes)
    assert res == {"zero": {"a": {"change_points": [], "seconds": 0.0, "error": None}}}  # always there


def test_ruptures_pelt_and_binseg_find_a_clear_shift():
    pytest.importorskip("ruptures")
    rng = np.random.default_rng(0)
    x = np.r_[rng.normal(0, 1, 200), rng.normal(5, 1, 200)]
    for algo in ("pelt", "binseg"):
        cps = P.run_ruptures(x, algo)
        assert any(abs(c - 200) <= 5 for c in cps), (algo, cps)
    # longer than RUPTURES_MAX: block means, change points mapped back to block starts
    y = np.r_[rng.normal(0, 1, 6000), rng.normal(5, 1, 6000)]
    cps = P.run_ruptures(y, "binseg")
    assert any(abs(c - 6000) <= 3 for c in cps) and all(c % 3 == 0 for c in cps)
    assert P.run_ruptures(np.arange(3.0), "pelt") == []


@pytest.mark.slow
@pytest.mark.skipif(P.peers_python() is None, reason="no peers environment (make peers)")
def test_real_claspy_on_a_clear_shift(tmp_path, monkeypatch):
    monkeypatch.setenv(P.CACHE_ENV, str(tmp_path / "cache"))
    rng = np.random.default_rng(0)
    t = np.arange(3000)
    x = np.where(t < 1500, np.sin(2 * np.pi * t / 30), np.sign(np.sin(2 * np.pi * t / 30))) + rng.normal(0, .1, 3000)
    out = P.run_claspy({"x": x}, "claspy")["x"]
    assert out["error"] is None and any(abs(c - 1500) <= 100 for c in out["change_points"])


def test_a_cache_that_cannot_be_written_skips_claspy_with_a_note_naming_the_variable(monkeypatch, tmp_path):
    python = _install_fake(tmp_path, monkeypatch, FAKE_CLASPY)
    monkeypatch.setattr(P, "peers_python", lambda: python)
    blocker = tmp_path / "a-file"
    blocker.write_text("")  # a folder under a file cannot be made, even by root
    monkeypatch.setenv(P.CACHE_ENV, str(blocker / "cache"))

    results, notes = P.run_peers({"a": np.arange(100.0)}, ["zero", "claspy"])
    assert results == {"zero": {"a": {"change_points": [], "seconds": 0.0, "error": None}}}
    assert len(notes) == 1 and notes[0].startswith(f"claspy peer failed: cannot write its result cache {blocker}")
    assert notes[0].endswith(f"set {P.CACHE_ENV} to a writable folder")

"""Loaders and the eval commands on the development benchmark data (skipped when it is absent)."""

import json

import numpy as np

import pytest

from ratiowatch.stream.evaluate.datasets import SKIP_REASON, bench_dir

TCPD = bench_dir("tcpd")
TSSB = bench_dir("tssb")


def test_bench_dir_env_override(tmp_path, monkeypatch):
    monkeypatch.setenv("RATIOWATCH_BENCH", str(tmp_path))
    assert bench_dir() == tmp_path.resolve()
    assert bench_dir("tcpd") is None


@pytest.mark.skipif(TCPD is None, reason=SKIP_REASON)
def test_tcpd_loader_reads_missing_values_and_dimensions():
    from ratiowatch.stream.evaluate.tcpd import load_dir

    data, ann = load_dir(TCPD)
    assert data["apple"].shape == (622, 2) and data["debt_ireland"].shape == (21, 1)
    assert set(data) <= set(ann)


@pytest.mark.skipif(TCPD is None, reason=SKIP_REASON)
def test_eval_tcpd_json_layout(tmp_path, capsys):
    # a two-series copy keeps the test fast; layout and averaging rules are what is checked
    from ratiowatch.stream.commands.cli import main

    src = json.loads((TCPD / "annotations.json").read_text())
    (tmp_path / "datasets").mkdir()
    for name in ("ozone", "quality_control_1"):
        (tmp_path / "datasets" / f"{name}.json").write_text((TCPD / "datasets" / f"{name}.json").read_text())
    (tmp_path / "annotations.json").write_text(json.dumps({k: src[k] for k in ("ozone", "quality_control_1")}))
    assert main(["eval", "tcpd", str(tmp_path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["benchmark"] == "tcpd" and set(out["datasets"]) == {"ozone", "quality_control_1"}
    # quality_control_* is excluded from the univariate mean, and the run lists the set it averaged
    assert out["mean"]["f1"] == pytest.approx(out["datasets"]["ozone"]["f1"])
    assert out["univariate"] == ["ozone"] and "blas" in out["environment"]
    assert 0.0 <= out["mean"]["cover"] <= 1.0 and out["mean"]["f1_multi"] is None
    # --seeds adds the Monte-Carlo spread of the permutation null without changing seed 0's numbers
    assert main(["eval", "tcpd", str(tmp_path), "--json", "--seeds", "2"]) == 0
    two = json.loads(capsys.readouterr().out)
    assert two["mean"] == out["mean"] and two["seed_spread"]["seeds"] == 2
    f1 = two["seed_spread"]["metrics"]["f1"]
    assert f1["per_seed"][0] == pytest.approx(out["mean"]["f1"], abs=1e-4)
    assert f1["mean"] == pytest.approx(sum(f1["per_seed"]) / 2, abs=1e-4) and "f1_multi" not in two["seed_spread"]["metrics"]


@pytest.mark.skipif(TSSB is None, reason=SKIP_REASON)
def test_tssb_loader_and_eval_on_one_series(tmp_path):
    from ratiowatch.stream.evaluate.tssb import evaluate, load_dir

    series = load_dir(TSSB)
    names = [s[0] for s in series]
    assert len(series) == 25 and "Chinatown" in names
    out = evaluate(TSSB, names=["Chinatown"], plot_dir=tmp_path)
    r = out["datasets"]["Chinatown"]
    assert "error" not in r and 0.0 <= r["cover"] <= 1.0
    assert (tmp_path / "Chinatown.png").read_bytes()[:4] == b"\x89PNG"


def _tiny_tssb(root, streaming_results=True):
    """A TSSB-layout folder of four short series (mean shifts) and one stored streaming result."""
    rng = np.random.default_rng(0)
    (root / "datasets").mkdir(parents=True)
    lines = []
    for i, name in enumerate(["dd", "aa", "cc", "bb"]):
        x = np.r_[rng.normal(0, 1, 150), rng.normal(6, 1, 150)]
        np.savetxt(root / "datasets" / f"{name}.txt", x)
        lines.append(f"{name},10,150")
    (root / "desc.txt").write_text("\n".join(lines) + "\n")
    if streaming_results:
        (root / "streaming_results").mkdir()
        (root / "streaming_results" / "Peer.csv").write_text(
            "dataset,true_cps,found_cps,alarm_index,f1_margin_1pct,covering\n"
            "aa,[150],[148],[200],1.0,0.9\nbb,[150],[],[],0.5,0.5\ncc,[150],\"[100, 150]\",\"[120, 180]\",0.6,0.7\n")
    return root


def test_eval_tssb_halves_stored_results_and_streaming(tmp_path, capsys):
    from ratiowatch.stream.commands.cli import main

    root = _tiny_tssb(tmp_path / "tiny")
    assert main(["eval", "tssb", str(root), "--json", "--streaming"]) == 0
    out = json.loads(capsys.readouterr().out)
    # sorted by name and alternating, whatever the order of desc.txt
    assert out["halves"] == {"aa": "tune", "bb": "check", "cc": "tune", "dd": "check"}
    assert out["half"] == "both" and set(out["by_half"]) == {"tune", "check", "all"}
    tune = out["by_half"]["tune"]
    # the stored results, as published, averaged over the same half (dd has none: n counts it out)
    assert tune["stored:Peer"]["cover"] == pytest.approx(0.8) and tune["stored:Peer"]["n"] == 2
    assert tune["stored:Peer"]["delay_mean"] == pytest.approx((52 + 25) / 2)
    assert out["by_half"]["check"]["stored:Peer"]["n"] == 1
    assert tune["ours"]["cover"] == pytest.approx(np.mean([out["datasets"][n]["cover"] for n in ("aa", "cc")]), abs=1e-4)
    s = out["datasets"]["aa"]["streaming"]
    assert {"change_points", "alarms", "cover", "f1", "delay_mean"} <= set(s)
    assert all(a >= c for c, a in s["alarms"]) and all(1 <= c < 300 for c in s["change_points"])
    assert out["by_half"]["all"]["ours_streaming"]["n"] == 4
    assert out["points_per_s"]["ours"] > 0 and out["points_per_s"]["ours_streaming"] > 0
    assert "stored:Peer" not in out["points_per_s"]


def test_eval_split_profile_adds_its_own_streaming_row(tmp_path, capsys):
    from ratiowatch.stream.commands.cli import main

    root = _tiny_tssb(tmp_path / "tiny", streaming_results=False)
    assert main(["eval", "tssb", str(root), "--json", "--split-profile", "--half", "tune"]) == 0
    out = json.loads(capsys.readouterr().out)
    s = out["datasets"]["aa"]["streaming_profile"]
    assert "streaming" not in out["datasets"]["aa"]
    # a 6-sd shift: found at its split, after it happened
    assert [abs(c - 150) <= 5 for c in s["change_points"]] == [True] and s["alarms"][0][1] > 150
    assert out["by_half"]["tune"]["ours_streaming_profile"]["n"] == 2
    assert out["points_per_s"]["ours_streaming_profile"] > 0


def test_eval_auto_adds_the_routed_detectors_row_with_its_seed_spread(tmp_path, capsys):
    from ratiowatch.stream.commands.cli import main

    root = _tiny_tssb(tmp_path / "tiny", streaming_results=False)
    assert main(["eval", "tssb", str(root), "--json", "--auto", "--half", "tune", "--seeds", "2"]) == 0
    out = json.loads(capsys.readouterr().out)
    s = out["datasets"]["aa"]["streaming_auto"]
    assert "streaming" not in out["datasets"]["aa"] and "streaming_profile" not in out["datasets"]["aa"]
    # no period in 300 samples of noise: the window detector holds the stream and finds the shift
    assert [abs(c - 150) <= 5 for c in s["change_points"]] == [True] and s["alarms"][0][1] > 150
    assert out["by_half"]["tune"]["ours_streaming_auto"]["n"] == 2
    assert "ours_streaming_auto" in out["seed_spread"]["by_half"]["tune"]


def _record_builds(monkeypatch, factory_name: str) -> list:
    """The detectors that the evaluation's ``factory_name`` builds, in order, as they are built."""
    import ratiowatch.stream.evaluate.streaming as streaming

    built = []
    factory = getattr(streaming, factory_name)

    def recording(seed=0, **options):
        make = factory(seed, **options)
        return lambda: built.append(make()) or built[-1]

    monkeypatch.setattr(streaming, factory_name, recording)
    return built


@pytest.mark.parametrize("factory, base, flag, key, attr, hint", [
    ("profile_factory", "--split-profile", "--cycle-permutation", "split_profile_options", "cycle_permutation",
     "add --split-profile"),
    ("routed_factory", "--auto", "--with-history", "auto_options", "with_history", "add --auto"),
])
def test_eval_detector_options_reach_their_detector_only(tmp_path, capsys, monkeypatch, factory, base, flag, key,
                                                         attr, hint):
    from ratiowatch.stream.commands.cli import main

    built = _record_builds(monkeypatch, factory)
    root = _tiny_tssb(tmp_path / "tiny", streaming_results=False)
    assert main(["eval", "tssb", str(root), "--json", base, flag, "--half", "tune"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out[key] == {attr: True}
    assert len(built) == 2 and all(getattr(d, attr) for d in built)
    assert main(["eval", "tssb", str(root), "--json", base, "--half", "tune"]) == 0
    assert key not in json.loads(capsys.readouterr().out)
    assert len(built) == 4 and not any(getattr(d, attr) for d in built[2:])
    assert main(["eval", "tssb", str(root), flag]) == 2
    assert hint in capsys.readouterr().err


def test_eval_half_selects_series_and_seeds_spread_by_half(tmp_path, capsys):
    from ratiowatch.stream.commands.cli import main

    root = _tiny_tssb(tmp_path / "tiny", streaming_results=False)
    assert main(["eval", "tssb", str(root), "--json", "--half", "check", "--seeds", "2"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out["datasets"]) == {"bb", "dd"} and set(out["by_half"]) == {"check", "all"}
    spread = out["seed_spread"]["by_half"]["check"]["ours"]["cover"]
    assert len(spread["per_seed"]) == 2 and spread["per_seed"][0] == out["by_half"]["check"]["ours"]["cover"]
    assert main(["eval", "tssb", str(root), "--half", "tune"]) == 0
    text = capsys.readouterr().out
    assert "aa" in text and "bb " not in text and "tune (n=2)" in text
    with pytest.raises(SystemExit):
        main(["eval", "tssb", str(root), "--half", "odd"])


def test_eval_utsa_is_eval_tssb_on_the_utsa_folder(tmp_path, capsys, monkeypatch):
    from ratiowatch.stream.commands.cli import main

    root = _tiny_tssb(tmp_path / "bench" / "utsa", streaming_results=False)
    monkeypatch.setenv("RATIOWATCH_BENCH", str(tmp_path / "bench"))
    assert main(["eval", "utsa", "--json", "--half", "tune"]) == 0  # the default folder: <bench>/utsa
    by_default = json.loads(capsys.readouterr().out)
    assert main(["eval", "tssb", str(root), "--json", "--half", "tune"]) == 0
    as_tssb = json.loads(capsys.readouterr().out)
    assert by_default["benchmark"] == as_tssb["benchmark"] == "utsa"
    assert set(by_default["datasets"]) == set(as_tssb["datasets"]) == {"aa", "cc"}
    for name, r in by_default["datasets"].items():
        assert r["change_points"] == as_tssb["datasets"][name]["change_points"]
        assert r["cover"] == as_tssb["datasets"][name]["cover"]
    monkeypatch.setenv("RATIOWATCH_BENCH", str(tmp_path / "elsewhere"))
    assert main(["eval", "utsa"]) == 2
    assert f"the default, {(tmp_path / 'elsewhere' / 'utsa').resolve()}, was not found" in capsys.readouterr().err


def test_eval_peers_without_claspy_environment(tmp_path, capsys, monkeypatch):
    from ratiowatch.stream.commands.cli import main

    monkeypatch.setenv("RATIOWATCH_PEERS_VENV", str(tmp_path / "absent"))
    root = _tiny_tssb(tmp_path / "tiny", streaming_results=False)
    assert main(["eval", "tssb", str(root), "--json", "--peers", "--half", "tune"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert any("make peers" in n for n in out["notes"])
    try:
        import ruptures  # noqa: F401
    except ModuleNotFoundError:
        assert any("ruptures" in n for n in out["notes"])
    else:
        for peer in ("pelt", "binseg"):
            r = out["datasets"]["aa"]["peers"][peer]
            assert r["error"] is None and any(abs(c - 150) <= 5 for c in r["change_points"])
            assert out["by_half"]["tune"][f"peer:{peer}"]["n"] == 2


@pytest.mark.skipif(TCPD is None, reason=SKIP_REASON)
def test_tcpd_halves_cover_the_benchmark():
    from ratiowatch.stream.evaluate.protocol import split_halves
    from ratiowatch.stream.evaluate.tcpd import series_names

    names = series_names(TCPD)
    halves = split_halves(names)
    assert len(names) == 16 and list(halves.values()).count("tune") == 8
    assert halves[sorted(names)[0]] == "tune" and halves[sorted(names)[1]] == "check"


@pytest.mark.skipif(bench_dir("utsa") is None, reason=SKIP_REASON)
def test_utsa_reads_as_tssb_with_stored_streaming_results():
    from ratiowatch.stream.evaluate.tssb import load_stored, series_names

    utsa = bench_dir("utsa")
    names = series_names(utsa)
    stored = load_stored(utsa)
    assert len(names) == 32 and "ClaSS" in stored and set(stored["ClaSS"]) <= set(names)
    # the stored means are the published ones (README: ClaSS 0.824 on UTSA)
    assert np.mean([r["cover"] for r in stored["ClaSS"].values()]) == pytest.approx(0.824, abs=5e-4)


def test_eval_level_view_reaches_the_window_detector_alone_and_inside_auto(tmp_path, capsys, monkeypatch):
    import ratiowatch.stream.evaluate.streaming as streaming
    from ratiowatch.stream.commands.cli import main

    built = []
    window, routed = streaming.default_factory, streaming.routed_factory

    def recording(factory):
        def make_factory(seed=0, **options):
            make = factory(seed, **options)
            return lambda: built.append(make()) or built[-1]
        return make_factory

    monkeypatch.setattr(streaming, "default_factory", recording(window))
    monkeypatch.setattr(streaming, "routed_factory", recording(routed))
    root = _tiny_tssb(tmp_path / "tiny", streaming_results=False)
    assert main(["eval", "tssb", str(root), "--json", "--streaming", "--auto", "--level-view", "--half", "tune"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["window_options"] == {"level_view": True}
    windows = [d for d in built if hasattr(d, "level_view")]
    autos = [d for d in built if hasattr(d, "window_options")]
    assert len(windows) == 2 and all(d.level_view for d in windows)
    assert len(autos) == 2 and all(d.window_options == {"level_view": True} for d in autos)
    assert main(["eval", "tssb", str(root), "--json", "--streaming", "--half", "tune"]) == 0
    assert "window_options" not in json.loads(capsys.readouterr().out)
    assert not any(d.level_view for d in built[4:])
    assert main(["eval", "tssb", str(root), "--level-view"]) == 2
    assert "add --streaming or --auto" in capsys.readouterr().err
    # the robust line reaches the same detectors, beside the level view or alone
    del built[:]
    assert main(["eval", "tssb", str(root), "--json", "--streaming", "--auto", "--level-view", "--robust-line",
                 "--half", "tune"]) == 0
    assert json.loads(capsys.readouterr().out)["window_options"] == {"level_view": True, "robust_line": True}
    windows = [d for d in built if hasattr(d, "level_view")]
    assert len(windows) == 2 and all(d.robust_line and d.level_view for d in windows)
    assert main(["eval", "tssb", str(root), "--json", "--auto", "--robust-line", "--half", "tune"]) == 0
    assert json.loads(capsys.readouterr().out)["window_options"] == {"robust_line": True}
    assert main(["eval", "tssb", str(root), "--robust-line"]) == 2
    assert "add --streaming or --auto" in capsys.readouterr().err


def test_eval_smooth_steps_reaches_the_offline_detector(tmp_path, capsys, monkeypatch):
    import ratiowatch.stream.detectors.offline as offline
    from ratiowatch.stream.commands.cli import main

    seen = []
    replay = offline.replay
    monkeypatch.setattr(offline, "replay", lambda x, **kw: seen.append(kw) or replay(x, **kw))
    root = _tiny_tssb(tmp_path / "tiny", streaming_results=False)
    assert main(["eval", "tssb", str(root), "--json", "--smooth-steps", "--half", "tune", "--seeds", "2"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["config"]["smooth_steps"] is True
    assert seen and all(kw.get("smooth_steps") is True for kw in seen)  # every seed's run
    seen.clear()
    assert main(["eval", "tssb", str(root), "--json", "--half", "tune"]) == 0
    assert json.loads(capsys.readouterr().out)["config"]["smooth_steps"] is False
    assert seen and not any(kw.get("smooth_steps") for kw in seen)

"""StreamingOutlierDetector: river conventions, buffer policy, incremental state, persistence."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from ratiowatch.core.kernels import gauss_kernel
from ratiowatch.stream.detectors.outlier_stream import StreamingOutlierDetector
from state_util import written_before

SMALL = dict(buffer_size=200, warmup=50, refit_every=64, n_centres=32, window_size=20)


def stream(n=1500, d=3, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d))
    y = np.zeros(n, dtype=int)
    y[300::50] = 1
    x[y == 1] += 5.0
    return x, y


def as_dicts(x):
    return [{f"f{j}": float(v) for j, v in enumerate(row)} for row in x]


@pytest.mark.filterwarnings("ignore::ratiowatch.stream.detectors.outlier_stream.FeatureSetWarning")
def test_river_check_estimator_on_a_local_stream(monkeypatch):
    """river's own checks; its anomaly datasets are remote, so the check stream is a local one."""
    from river import checks

    rng = np.random.default_rng(3)
    x = rng.normal(size=(3000, 4))
    y = np.zeros(3000, dtype=int)
    y[100::25] = 1
    x[y == 1] += 5.0
    data = [(d, bool(t)) for d, t in zip(as_dicts(x), y)]

    def local_datasets(model, scale=1):
        yield data[: 300 * scale]

    monkeypatch.setattr(checks, "_yield_datasets", local_datasets)
    checks.check_estimator(StreamingOutlierDetector(**SMALL))


def test_prequential_auc_and_score_one_is_pure():
    x, y = stream()
    det = StreamingOutlierDetector(**SMALL)
    scores = []
    for d in as_dicts(x):
        s1 = det.score_one(d)
        assert det.score_one(d) == s1  # scoring twice changes nothing
        scores.append(s1)
        det.learn_one(d)
    assert roc_auc_score(y[300:], scores[300:]) > 0.95


def test_dict_path_equals_numpy_path():
    x, _ = stream(800)
    a = StreamingOutlierDetector(**SMALL)
    sa = []
    for d in as_dicts(x):
        sa.append(a.score_one(d))
        a.learn_one(d)
    b = StreamingOutlierDetector(**SMALL)
    sb = b.process(x)
    np.testing.assert_allclose(sa, sb, atol=1e-10)


def test_flagged_points_stay_out_of_the_reference_buffer():
    x, _ = stream(600)
    det = StreamingOutlierDetector(**SMALL)
    det.process(x[:500])
    far = np.full((1, 3), 9.0)
    before = det._ref_buf.copy()
    assert det.process(far)[0] > det.threshold
    assert not np.any(np.all(det._ref_buf == far[0], axis=1))  # not admitted
    assert np.any(np.all(det._win_buf == far[0], axis=1))  # but it is in the denominator window
    assert np.array_equal(det._ref_buf, before)


def in_reference(det, row):
    n = int(det._ref_state[0])
    return bool(np.any(np.all(det._ref_buf[:n] == row, axis=1)))


def is_held(det, row):
    count, head = (int(v) for v in det._held_state)
    idx = (head + np.arange(count)) % det._held_buf.shape[0]
    return bool(np.any(np.all(det._held_buf[idx] == row, axis=1)))


def test_a_point_kept_out_joins_the_reference_readmit_after_steps_later():
    x, _ = stream(900)
    det = StreamingOutlierDetector(**{**SMALL, "readmit_after": 40, "refit_every": 10_000})
    det.process(x[:500])
    far = np.full((1, 3), 9.0)
    assert det.process(far)[0] > det.threshold
    assert not in_reference(det, far[0]) and is_held(det, far[0])
    det.process(x[500:539])  # 39 steps after it: still held
    assert not in_reference(det, far[0]) and is_held(det, far[0])
    det.process(x[539:540])  # the 40th: readmitted
    assert in_reference(det, far[0]) and not is_held(det, far[0])
    # it entered by the same rank-one update as any point: the sums match a full recompute
    n = int(det._ref_state[0])
    phi = gauss_kernel(np.ascontiguousarray(det._ref_buf[:n]), det._centres, det._sigma)
    np.testing.assert_allclose(det._s_ref, phi.T @ phi, atol=1e-8)
    np.testing.assert_allclose(det._v_ref, phi.sum(axis=0), atol=1e-9)


def test_without_readmission_a_point_kept_out_stays_out():
    x, _ = stream(1200)
    det = StreamingOutlierDetector(**{**SMALL, "refit_every": 10_000})  # readmit_after=0: never
    det.process(x[:500])
    far = np.full((1, 3), 9.0)
    det.process(far)
    det.process(x[500:1200])
    assert not in_reference(det, far[0]) and int(det._held_state[0]) == 0 and det._held_buf.shape[0] == 1


def test_held_points_are_bounded_by_the_buffer_size():
    rng = np.random.default_rng(2)
    det = StreamingOutlierDetector(**{**SMALL, "readmit_after": 10**9, "max_reject_rate": 1.0,
                                      "refit_every": 10_000})
    det.process(rng.normal(size=(300, 2)))
    far = rng.normal(size=(3 * SMALL["buffer_size"], 2)) * 0.1 + np.array([30.0, 30.0])
    det.process(far)
    assert int(det._held_state[0]) <= SMALL["buffer_size"]
    assert det._held_buf.shape[0] == SMALL["buffer_size"]
    # a full ring readmits its oldest early: the far points reached the reference after all
    assert np.any(det._ref_buf[: int(det._ref_state[0]), 0] > 20.0)


def test_a_rare_but_normal_pattern_is_not_locked_out_for_ever():
    """Two rare shapes, kept out once, are flagged at every return unless they are readmitted."""
    rng = np.random.default_rng(5)
    rows = rng.normal(0.0, 0.05, size=(6000, 2))
    rows[::25] += np.array([1.0, -1.0])  # a rare but regular pattern: 4 % of the rows
    common = dict(SMALL, buffer_size=400, warmup=100, refit_every=100, contamination=0.05)
    never = StreamingOutlierDetector(**common).process(rows)
    after = StreamingOutlierDetector(**common, readmit_after=400).process(rows)
    late = slice(3000, None, 25)  # the pattern's returns, long after it first appeared
    assert np.median(never[late]) > 0.9  # locked out: as novel as on its first day
    assert np.median(after[late]) < 0.6  # back in the reference, about at the flag threshold


def test_lasting_change_is_absorbed():
    rng = np.random.default_rng(1)
    det = StreamingOutlierDetector(**SMALL)
    det.process(rng.normal(size=(400, 2)))
    shifted = rng.normal(6.0, 1.0, size=(600, 2))
    s = det.process(shifted)
    assert s[:20].mean() > 0.5  # the new regime is novel at first ...
    assert s[-100:].mean() < 0.3  # ... and normal once the buffer has followed it


def test_incremental_sums_match_a_full_recompute():
    """The reference's sums after 650 pushes (450 of them evictions, each evicted kernel row made
    again) equal the sums of its kernel matrix computed at once."""
    x, _ = stream(700)
    det = StreamingOutlierDetector(**{**SMALL, "refit_every": 10_000})  # no refit after warm-up
    det.process(x)
    n = int(det._ref_state[0])
    phi = gauss_kernel(np.ascontiguousarray(det._ref_buf[:n]), det._centres, det._sigma)
    np.testing.assert_allclose(det._s_ref, phi.T @ phi, atol=1e-8)
    np.testing.assert_allclose(det._v_ref, phi.sum(axis=0), atol=1e-9)


def test_memory_is_bounded():
    x, _ = stream(3000)
    det = StreamingOutlierDetector(**SMALL)
    det.process(x[:1000])
    shapes = {k: getattr(det, k).shape for k in StreamingOutlierDetector._ARRAYS}
    det.process(x[1000:])
    assert {k: getattr(det, k).shape for k in StreamingOutlierDetector._ARRAYS} == shapes
    assert int(det._ref_state[0]) <= SMALL["buffer_size"]


def test_save_load_roundtrip_continues_identically(tmp_path):
    x, _ = stream(900)
    det = StreamingOutlierDetector(**SMALL)
    det.process(x[:500])
    det.save(tmp_path / "state")
    assert [p.name for p in tmp_path.iterdir()] == ["state.npz"]  # one file, no temporary left over
    twin = StreamingOutlierDetector.load(tmp_path / "state")
    from_state = StreamingOutlierDetector.from_state(det.to_state())
    ref = copy.deepcopy(det)
    expected = ref.process(x[500:])
    np.testing.assert_array_equal(expected, twin.process(x[500:]))
    np.testing.assert_array_equal(expected, from_state.process(x[500:]))


def test_roundtrip_keeps_the_held_points(tmp_path):
    x, _ = stream(1200)
    det = StreamingOutlierDetector(**{**SMALL, "readmit_after": 150})
    det.process(x[:700])
    assert int(det._held_state[0]) > 0  # the planted outliers of the stream are waiting
    twin = StreamingOutlierDetector.from_state(det.to_state())
    np.testing.assert_array_equal(copy.deepcopy(det).process(x[700:]), twin.process(x[700:]))


def test_kernel_rows_are_made_again_not_kept_and_restores_continue_identically():
    """The reference keeps no kernel rows (they would be three quarters of the memory): an evicted
    row's is made again by the routine that made it (the sums stay those of the buffer's kernel
    matrix: test_incremental_sums_match_a_full_recompute); the window's rows are rebuilt on restore."""
    x, _ = stream(1300)
    det = StreamingOutlierDetector(**{**SMALL, "readmit_after": 150})
    assert not hasattr(det, "_ref_phi")
    done = 0
    for stop in (10, SMALL["warmup"], SMALL["warmup"] + 7, 333, 700, 1200):  # warm-up, refits, pushes, readmits
        det.process(x[done:stop])
        done = stop
        state = det.to_state()
        assert "_ref_phi" not in state and "_win_phi" not in state
        twin = StreamingOutlierDetector.from_state(state)
        np.testing.assert_array_equal(twin._win_phi, det._win_phi)
        np.testing.assert_array_equal(copy.deepcopy(det).process(x[stop:stop + 100]), twin.process(x[stop:stop + 100]))
    assert int(det._ref_state[0]) == SMALL["buffer_size"]  # the ring has wrapped


def test_a_state_written_with_the_kernel_rows_still_loads():
    x, _ = stream(900)
    det = StreamingOutlierDetector(**SMALL)
    det.process(x[:500])
    old = {**det.to_state(), "_ref_phi": np.zeros((SMALL["buffer_size"], SMALL["n_centres"])),
           "_win_phi": det._win_phi.copy()}
    twin = StreamingOutlierDetector.from_state(old)
    np.testing.assert_array_equal(copy.deepcopy(det).process(x[500:]), twin.process(x[500:]))


def test_a_state_keeps_the_upper_triangles_of_the_sums_which_stay_symmetric_bit_for_bit():
    x, _ = stream(1300)
    det = StreamingOutlierDetector(**{**SMALL, "readmit_after": 150})
    b = SMALL["n_centres"]
    done = 0
    for stop in (SMALL["warmup"] + 7, 333, 700, 1200):  # after refits, pushes, evictions, readmissions
        det.process(x[done:stop])
        done = stop
        for k in ("_s_ref", "_s_win"):
            m = getattr(det, k)
            assert np.array_equal(m, m.T)  # what storing one triangle relies on
        state = det.to_state()
        assert "_s_ref" not in state and state["_s_ref_upper"].shape == (b * (b + 1) // 2,)
        twin = StreamingOutlierDetector.from_state(state)
        np.testing.assert_array_equal(twin._s_ref, det._s_ref)
        np.testing.assert_array_equal(twin._s_win, det._s_win)


def test_a_state_written_with_whole_sums_still_loads():
    x, _ = stream(900)
    det = StreamingOutlierDetector(**SMALL)
    det.process(x[:500])
    old = {k: v for k, v in det.to_state().items() if not k.endswith("_upper")}
    old.update({"_s_ref": det._s_ref.copy(), "_s_win": det._s_win.copy()})
    twin = StreamingOutlierDetector.from_state(old)
    np.testing.assert_array_equal(copy.deepcopy(det).process(x[500:]), twin.process(x[500:]))


def test_a_state_written_before_readmission_existed_still_loads():
    x, _ = stream(900)
    det = StreamingOutlierDetector(**SMALL)
    det.process(x[:500])
    old = written_before(det.to_state(), "readmit_after", "_held")
    twin = StreamingOutlierDetector.from_state(old)
    np.testing.assert_array_equal(copy.deepcopy(det).process(x[500:]), twin.process(x[500:]))
    broken = {k: v for k, v in old.items() if k != "_ref_buf"}  # only the held arrays may be absent
    with pytest.raises(ValueError, match="missing key '_ref_buf'"):
        StreamingOutlierDetector.from_state(broken)


def test_select_by_loocv_runs():
    x, y = stream(800)
    det = StreamingOutlierDetector(**SMALL, select=True)
    s = det.process(x)
    assert roc_auc_score(y[300:], s[300:]) > 0.9


def test_bad_parameters_and_inputs():
    with pytest.raises(ValueError, match="alpha"):
        StreamingOutlierDetector(alpha=1.5)
    with pytest.raises(ValueError, match="warmup"):
        StreamingOutlierDetector(buffer_size=100, warmup=200)
    with pytest.raises(ValueError, match="centres"):
        StreamingOutlierDetector(centres="kmeans")
    det = StreamingOutlierDetector(**SMALL)
    det.learn_one({"a": 1.0, "b": 2.0})
    with pytest.raises(ValueError, match="NaN"):
        det.learn_one({"a": float("nan"), "b": 2.0})
    with pytest.raises(ValueError, match="features"):
        det.process(np.zeros((3, 5)))


@pytest.mark.parametrize("params, error, match", [
    ({"n_centres": 2.5}, TypeError, "n_centres must be an integer; got 2.5"),
    ({"buffer_size": "500"}, TypeError, "buffer_size must be an integer; got '500'"),
    ({"seed": 1.5}, TypeError, "seed must be an integer; got 1.5"),
    ({"seed": "x"}, TypeError, "seed must be an integer; got 'x'"),
    ({"seed": -1}, ValueError, "seed must be an integer >= 0"),
    ({"window_size": True}, TypeError, "window_size must be an integer"),
    ({"alpha": "0.1"}, TypeError, "alpha must be a real number"),
    ({"select": "no"}, TypeError, "select must be True or False"),
    ({"scale": "mad"}, ValueError, "scale must be one of"),
])
def test_constructor_types_are_checked_with_the_parameter_name(params, error, match):
    with pytest.raises(error, match=match):
        StreamingOutlierDetector(**params)


def test_numpy_integers_and_floats_are_accepted():
    det = StreamingOutlierDetector(n_centres=np.int64(16), alpha=np.float64(0.2), seed=np.int32(3), warmup=20,
                                   buffer_size=50)
    assert det.n_centres == 16


@pytest.mark.parametrize("kind", [list, tuple, np.array])
def test_array_likes_score_like_dicts(kind):
    x, _ = stream(400)
    by_dict = StreamingOutlierDetector(**SMALL)
    by_array = StreamingOutlierDetector(**SMALL)
    a, b = [], []
    for d, row in zip(as_dicts(x), x):
        a.append(by_dict.score_one(d))
        b.append(by_array.score_one(kind(row.tolist())))
        by_dict.learn_one(d)
        by_array.learn_one(kind(row.tolist()))
    # dict keys f0..f2 sort in the same order as the positions, so both see identical vectors
    np.testing.assert_allclose(a, b, atol=1e-12)
    assert max(b[300:]) > 0.5


def test_wrong_kinds_of_input_say_what_is_expected():
    det = StreamingOutlierDetector(**SMALL)
    with pytest.raises(TypeError, match="dict of feature -> number or a 1-d array-like"):
        det.learn_one(3.0)
    with pytest.raises(TypeError, match="dict of feature -> number or a 1-d array-like"):
        det.score_one("abc")
    det.learn_one([1.0, 2.0])
    with pytest.raises(TypeError, match="pass an array-like, not a dict"):
        det.learn_one({"a": 1.0, "b": 2.0})
    with pytest.raises(ValueError, match="has 3 values but this detector learned samples of 2"):
        det.learn_one([1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="one sample"):
        det.learn_one(np.zeros((2, 2)))
    keyed = StreamingOutlierDetector(**SMALL)
    keyed.learn_one({"a": 1.0})
    with pytest.raises(TypeError, match="pass a dict with those keys"):
        keyed.learn_one([1.0])


def test_changed_dict_keys_follow_the_documented_policy_with_a_warning():
    from ratiowatch.stream.detectors.outlier_stream import FeatureSetWarning

    x, _ = stream(300)
    det = StreamingOutlierDetector(**SMALL)
    for d in as_dicts(x):
        det.learn_one(d)
    n = det._n_learned
    centre = {"f0": 0.0, "f1": 0.0, "f2": 0.0}
    before = det.score_one(centre)
    # a new key is never dropped silently: it is named in a warning
    with pytest.warns(FeatureSetWarning, match=r"keys \['g'\] this detector did not learn"):
        assert det.score_one({**centre, "g": 9.0}) == before
    # a missing key is not filled in: the sample is scored on the features it has ...
    with pytest.warns(FeatureSetWarning, match=r"lacks the learned feature\(s\) \['f2'\]"):
        partial = det.score_one({"f0": 8.0, "f1": 0.0})
    ph = np.exp(-0.5 * ((np.array([8.0, 0.0]) - det._centres[:, :2]) ** 2).sum(axis=1) / det._sigma ** 2)
    assert partial == pytest.approx(1.0 - ph @ det._theta, abs=1e-12)
    assert partial > before  # the far-out value of f0 still counts
    # ... and is not learned
    with pytest.warns(FeatureSetWarning, match="not learned"):
        det.learn_one({"f0": 0.0, "f1": 0.0})
    assert det._n_learned == n
    assert det.score_one(centre) == before


_DROP = object()


def _with_meta(state, **changes):
    """``state`` with entries of its meta changed, or removed (``_DROP``)."""
    meta = json.loads(str(state["meta"]))
    for k, v in changes.items():
        if v is _DROP:
            meta.pop(k, None)
        else:
            meta[k] = v
    return {**state, "meta": json.dumps(meta)}


def test_a_checkpoint_records_its_format_version():
    x, _ = stream(200)
    det = StreamingOutlierDetector(**SMALL)
    det.process(x)
    assert json.loads(det.to_state()["meta"])["version"] == 1


@pytest.mark.parametrize("version", [0, 2, None, "1", True])
def test_a_checkpoint_of_an_unknown_version_is_refused(version):
    x, _ = stream(200)
    det = StreamingOutlierDetector(**SMALL)
    det.process(x)
    with pytest.raises(ValueError, match="unsupported StreamingOutlierDetector state version"):
        StreamingOutlierDetector.from_state(_with_meta(det.to_state(), version=version))


def test_a_checkpoint_written_before_versions_were_recorded_still_loads():
    x, _ = stream(600)
    det = StreamingOutlierDetector(**SMALL)
    det.process(x[:400])
    old = _with_meta(det.to_state(), version=_DROP)
    twin = StreamingOutlierDetector.from_state(old)
    np.testing.assert_array_equal(copy.deepcopy(det).process(x[400:]), twin.process(x[400:]))


@pytest.mark.parametrize("drop", ["meta", "_ref_buf", "_theta"])
def test_a_truncated_checkpoint_says_which_key_it_lacks(drop):
    x, _ = stream(200)
    det = StreamingOutlierDetector(**SMALL)
    det.process(x)
    state = {k: v for k, v in det.to_state().items() if k != drop}
    with pytest.raises(ValueError, match=f"not a StreamingOutlierDetector checkpoint, or a truncated one: "
                                         f"missing key '{drop}'"):
        StreamingOutlierDetector.from_state(state)


def test_a_checkpoint_whose_meta_lacks_an_entry_says_so():
    det = StreamingOutlierDetector(**SMALL)
    det.process(stream(200)[0])
    with pytest.raises(ValueError, match="missing key 'fitted' in its meta"):
        StreamingOutlierDetector.from_state(_with_meta(det.to_state(), fitted=_DROP))


@pytest.mark.parametrize("state", [None, [("meta", "{}")], "state.npz"])
def test_what_is_not_a_checkpoint_is_refused_as_such(state):
    with pytest.raises(ValueError, match="not a StreamingOutlierDetector checkpoint"):
        StreamingOutlierDetector.from_state(state)


@pytest.mark.parametrize("scale", [1e151, 1e300, -1e200])
def test_values_whose_squared_distances_overflow_are_refused_with_advice_to_rescale(scale):
    x, _ = stream(300)
    det = StreamingOutlierDetector(**SMALL)
    det.process(x[:100])
    twin = copy.deepcopy(det)
    for feed in (lambda: det.learn_one(list(x[100] * scale)), lambda: det.score_one(list(x[100] * scale)),
                 lambda: det.process(np.r_[x[100:110], x[110:111] * scale])):
        with pytest.raises(ValueError, match="overflow float64.*rescale the values"):
            feed()
    np.testing.assert_array_equal(det.process(x[100:]), twin.process(x[100:]))  # nothing was learned


def test_a_stream_of_a_tiny_spread_is_refused_before_the_first_fit():
    x, _ = stream(300)
    det = StreamingOutlierDetector(**SMALL)
    for row in x[: SMALL["warmup"] - 1] * 1e-300:
        det.learn_one(list(row))
    with pytest.raises(ValueError, match="differ by at most .*underflow float64.*rescale the values"):
        det.learn_one(list(x[SMALL["warmup"]] * 1e-300))
    assert not det._fitted and int(det._ref_state[0]) == SMALL["warmup"] - 1  # the refused row was not learned
    with pytest.raises(ValueError, match="underflow"):
        StreamingOutlierDetector(**SMALL).process(x * 1e-300)


@pytest.mark.parametrize("scale", [1e-100, 1e100])
def test_an_outlier_is_found_at_any_scale_within_the_bounds(scale):
    """Scores are those at scale 1: the kernel width follows the data's scale."""
    x, y = stream(800)
    plain = StreamingOutlierDetector(**SMALL).process(x)
    scaled = StreamingOutlierDetector(**SMALL).process(x * scale)
    np.testing.assert_allclose(scaled, plain, atol=1e-9)
    assert roc_auc_score(y[300:], scaled[300:]) > 0.95


def test_a_constant_stream_is_no_tiny_spread():
    det = StreamingOutlierDetector(**SMALL)
    scores = det.process(np.full((200, 2), 1e-300))
    assert np.all(np.isfinite(scores))


def _same_state(a, b):
    sa, sb = a.to_state(), b.to_state()
    assert sa.keys() == sb.keys()
    assert json.loads(sa["meta"]) == json.loads(sb["meta"])
    for k in sa:
        if k != "meta":
            np.testing.assert_array_equal(sa[k], sb[k], err_msg=k)


def test_a_refused_refit_changes_nothing_and_the_detector_learns_again_on_good_data():
    # once the refit raised after _since_refit was counted: every later learn_one re-ran the
    # failing refit and learned nothing (2000 of 2000 failed), and rows before it were learned
    rng = np.random.default_rng(0)
    det = StreamingOutlierDetector(**{**SMALL, "max_reject_rate": 0.01})
    det.process(rng.normal(size=(150, 2)))
    tiny = 1e-155 * rng.normal(size=(400, 2))
    refused = 0
    for row in tiny:
        before = copy.deepcopy(det)
        try:
            det.learn_one(list(row))
        except ValueError as exc:
            assert "rescale the values" in str(exc)
            refused += 1
            _same_state(det, before)  # all or nothing
    assert refused > 0
    # a block whose last rows make the refit fail: none of its rows is learned
    before = copy.deepcopy(det)
    with pytest.raises(ValueError, match="underflow"):
        det.process(np.vstack([rng.normal(size=(1, 2)) * 1e-155, tiny[:80]]))
    _same_state(det, before)
    # good data again: every sample is learned, refits included
    n = det._n_learned
    good = rng.normal(size=(300, 2))
    for row in good:
        det.learn_one(list(row))
    assert det._n_learned == n + 300 and det._since_refit < SMALL["refit_every"]
    assert det.score_one([8.0, 8.0]) > det.score_one([0.0, 0.0])


def test_numpy_integer_and_tuple_keys_survive_a_checkpoint(tmp_path):
    x, _ = stream(200, d=2)
    probe = [8.0, 0.5]
    for make in (lambda j: np.int64(j), lambda j: ("cpu", j), lambda j: ("a", (np.int32(j), "b"))):
        det = StreamingOutlierDetector(**SMALL)
        for row in x:
            det.learn_one({make(j): v for j, v in enumerate(row)})
        sample = {make(j): v for j, v in enumerate(probe)}
        det.save(tmp_path / "ckpt")  # np.int64 keys once raised TypeError (not JSON serializable)
        for twin in (StreamingOutlierDetector.load(tmp_path / "ckpt"),
                     StreamingOutlierDetector.from_state(det.to_state())):
            # tuple keys once came back as lists: the restored detector refused the same dicts
            assert twin.score_one(sample) == det.score_one(sample)
            twin.learn_one(sample)
            det2 = copy.deepcopy(det)
            det2.learn_one(sample)
            _same_state(twin, det2)


@pytest.mark.parametrize("key", [1.5, frozenset({1}), None, ("a", 2.5)])
def test_dict_keys_a_checkpoint_cannot_restore_are_refused_at_the_first_sample(key):
    det = StreamingOutlierDetector(**SMALL)
    with pytest.raises(ValueError, match=r"feature names must be str, int .* or tuples of these"):
        det.learn_one({key: 1.0, "b": 2.0})
    assert det._features is None  # nothing was fixed: the detector still takes a first sample


def test_numpy_scalar_parameters_are_kept_as_python_ones_and_checkpoints_save(tmp_path):
    given = dict(buffer_size=np.int64(200), warmup=np.int32(50), refit_every=np.int64(64), n_centres=np.int64(32),
                 window_size=np.uint8(20), alpha=np.float64(0.2), select=np.False_, scale=np.str_("local"),
                 readmit_after=np.int64(30), seed=np.int64(3))
    plain = {k: v.item() for k, v in given.items()}
    det = StreamingOutlierDetector(**given)
    for k, v in plain.items():
        assert getattr(det, k) == v and type(getattr(det, k)) is type(v), k
    x, _ = stream(400)
    expected = StreamingOutlierDetector(**plain).process(x)
    np.testing.assert_array_equal(det.process(x[:300]), expected[:300])
    det.save(tmp_path / "ckpt")
    np.testing.assert_array_equal(StreamingOutlierDetector.load(tmp_path / "ckpt").process(x[300:]), expected[300:])
    twin = det.clone()
    assert twin._get_params() == det._get_params() and twin.buffer_size == 200


def test_a_python_int_beyond_float64_is_refused_as_a_value_too_large():
    det = StreamingOutlierDetector(**SMALL)
    det.process(stream(100)[0][:, :2])
    for x in ([1.0, 10**400], np.array([1.0, -10**400], dtype=object)):
        for call in (det.learn_one, det.score_one, lambda v: det.process([v])):
            with pytest.raises(ValueError, match="beyond the range of float64"):
                call(x)
    keyed = StreamingOutlierDetector(**SMALL)
    keyed.learn_one({"a": 1.0})
    with pytest.raises(ValueError, match="beyond the range of float64"):
        keyed.learn_one({"a": 10**400})
    assert det._n_learned == 100 and keyed._n_learned == 1


def test_a_memento_taken_before_the_first_sample_brings_the_detector_back_to_fresh():
    x, _ = stream(300)
    det, fresh = StreamingOutlierDetector(**SMALL), StreamingOutlierDetector(**SMALL)
    memento = det.memento()
    det.process(x[:120])
    det.roll_back(memento)
    _same_state(det, fresh)
    np.testing.assert_array_equal(det.process(x), fresh.process(x))
    memento = det.memento()  # and after it, with the features fixed
    before = copy.deepcopy(det)
    det.process(x[:150])
    det.roll_back(memento)
    _same_state(det, before)


def _item(state, key, index, value):
    arr = np.array(state[key])
    arr[index] = value
    return {**state, key: arr}


# SMALL: buffer 200, window 20, 32 centres, refit every 64, warm-up 50; no readmission (a held ring of 1)
DAMAGED = {
    "reference count above the buffer": ("'_ref_state\\[0\\]' is 201", lambda s: _item(s, "_ref_state", 0, 201)),
    "reference position past the buffer": ("'_ref_state\\[1\\]' is 200", lambda s: _item(s, "_ref_state", 1, 200)),
    "negative steps since the solve": ("'_ref_state\\[2\\]' is -1", lambda s: _item(s, "_ref_state", 2, -1)),
    "window position past the window": ("'_win_state\\[1\\]' is 20", lambda s: _item(s, "_win_state", 1, 20)),
    "held head past the held ring": ("'_held_state\\[1\\]' is 1", lambda s: _item(s, "_held_state", 1, 1)),
    "a scalar for a vector": ("'_theta' has shape \\(\\)", lambda s: {**s, "_theta": np.float64(0.1)}),
    "centres of another dimension": ("'_centres' has shape", lambda s: {**s, "_centres": s["_centres"][:, :2]}),
    "sums of another size": ("'_s_ref_upper' has shape", lambda s: {**s, "_s_ref_upper": s["_s_ref_upper"][1:]}),
    "fractional ring state": ("'_win_state' must hold integers", lambda s: {**s, "_win_state": np.array([20.0, 3.0])}),
    "NaN in the weights": ("'_theta' holds NaN", lambda s: _item(s, "_theta", 0, np.nan)),
    "steps since the refit past the interval": ("'since_refit' in 'meta' is 64",
                                                lambda s: _with_meta(s, since_refit=64)),
    "negative points learned": ("'n_learned' in 'meta' is -3", lambda s: _with_meta(s, n_learned=-3)),
    "features of another dimension": ("'features' in 'meta'", lambda s: _with_meta(s, features=[0, 1])),
    "a kernel width of zero": ("'sigma' in 'meta' must be a positive", lambda s: _with_meta(s, sigma=0.0)),
    "a warm-up over but no fit": ("'_ref_state\\[0\\]' is 200: the warm-up", lambda s: _with_meta(s, fitted=False)),
}


@pytest.mark.parametrize("case", list(DAMAGED))
def test_a_damaged_checkpoint_is_refused_naming_the_entry(case):
    entry, damage = DAMAGED[case]
    det = StreamingOutlierDetector(**SMALL)
    det.process(stream(300)[0])
    with pytest.raises(ValueError, match=f"not a StreamingOutlierDetector checkpoint, or a damaged one: {entry}"):
        StreamingOutlierDetector.from_state(damage(det.to_state()))


def test_a_checkpoint_before_the_first_sample_or_the_first_fit_restores():
    x, _ = stream(300)
    for n in (0, 30):
        det = StreamingOutlierDetector(**SMALL)
        if n:
            det.process(x[:n])
        twin = StreamingOutlierDetector.from_state(det.to_state())
        np.testing.assert_array_equal(twin.process(x[n:]), det.process(x[n:]))


@pytest.mark.parametrize("level", [1.0, 0.3, -7e5])
def test_a_reference_equal_but_for_rounding_is_a_constant_one(level):
    """Values one ulp apart: the width fallback (mean nonzero distance) once made the kernel width
    an ulp, and the next point one ulp away a maximal outlier."""
    up = np.nextafter(level, np.inf)
    rng = np.random.default_rng(0)
    x = np.where(rng.random((600, 2)) < 0.5, level, up)
    x[:100] = level
    constant = StreamingOutlierDetector(**SMALL).process(np.full_like(x, level)).max()  # the ridge's small offset
    for scale in ("median", "local"):
        det = StreamingOutlierDetector(**{**SMALL, "scale": scale})
        assert det.process(x).max() <= constant + 1e-9
        assert det._sigma == 1.0  # the width of a constant reference


@pytest.mark.filterwarnings("ignore::ratiowatch.stream.detectors.outlier_stream.FeatureSetWarning")
@pytest.mark.parametrize("sample", [{}, {"zz": 5.0}], ids=["empty", "only-unknown-keys"])
def test_a_sample_with_none_of_the_learned_features_is_refused_by_score_one_and_skipped_by_learn_one(sample):
    # with no feature left to compare, the sample was at distance 0 from every centre: the most
    # normal score there is, below every real sample's
    x, _ = stream(300)
    det = StreamingOutlierDetector(**SMALL)
    for d in as_dicts(x):
        det.learn_one(d)
    before = copy.deepcopy(det)
    with pytest.raises(ValueError, match=r"no feature of the sample is known: .*pass at least one of them"):
        det.score_one(sample)
    det.learn_one(sample)  # skipped, as any sample missing a learned feature
    _same_state(det, before)


@pytest.mark.parametrize("refused, taken", [
    ([np.nan, 1.0], [[1.0, 2.0, 3.0]]),
    ({"a": None, "b": 1.0}, [{"x": 1.0}]),
    ({"a": "text", "b": 1.0}, [{"x": 1.0}]),
    ([1e200, 1.0], [[1.0]]),
], ids=["nan-in-array", "none-in-dict", "text-in-dict", "too-large"])
def test_a_refused_first_sample_fixes_no_features(refused, taken):
    # the features were fixed before the sample was checked, so a refused first sample decided
    # the dimension and keys of every later one although nothing was learned
    x, _ = stream(300)
    det, fresh = StreamingOutlierDetector(**SMALL), StreamingOutlierDetector(**SMALL)
    with pytest.raises(ValueError):
        det.learn_one(refused)
    _same_state(det, fresh)
    assert det._features is None
    for sample in taken:
        det.learn_one(sample)
        fresh.learn_one(sample)
    _same_state(det, fresh)
    # and a valid stream after a refused first sample gives the same scores and checkpoint
    det, fresh = StreamingOutlierDetector(**SMALL), StreamingOutlierDetector(**SMALL)
    with pytest.raises(ValueError):
        det.learn_one({"f0": np.nan, "f1": 0.0, "f2": 0.0})
    det.score_one({"g": 1.0})  # scoring fixes no features either
    assert det._features is None
    for d in as_dicts(x):
        assert det.score_one(d) == fresh.score_one(d)
        det.learn_one(d)
        fresh.learn_one(d)
    _same_state(det, fresh)

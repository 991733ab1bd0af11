"""StreamingOutlierDetector: river conventions, buffer policy, incremental state, persistence."""

from __future__ import annotations

import copy

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from ratiowatch.core.kernels import gauss_kernel
from ratiowatch.stream.detectors.outlier_stream import StreamingOutlierDetector

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


def test_lasting_change_is_absorbed():
    rng = np.random.default_rng(1)
    det = StreamingOutlierDetector(**SMALL)
    det.process(rng.normal(size=(400, 2)))
    shifted = rng.normal(6.0, 1.0, size=(600, 2))
    s = det.process(shifted)
    assert s[:20].mean() > 0.5  # the new regime is novel at first ...
    assert s[-100:].mean() < 0.3  # ... and normal once the buffer has followed it


def test_incremental_sums_match_a_full_recompute():
    x, _ = stream(700)
    det = StreamingOutlierDetector(**{**SMALL, "refit_every": 10_000})  # no refit after warm-up
    det.process(x)
    n = int(det._ref_state[0])
    phi = gauss_kernel(np.ascontiguousarray(det._ref_buf[:n]), det._centres, det._sigma)
    np.testing.assert_allclose(det._ref_phi[:n], phi, atol=1e-12)
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
    assert (tmp_path / "state.npz").exists() and (tmp_path / "state.json").exists()
    twin = StreamingOutlierDetector.load(tmp_path / "state")
    ref = copy.deepcopy(det)
    np.testing.assert_array_equal(ref.process(x[500:]), twin.process(x[500:]))


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

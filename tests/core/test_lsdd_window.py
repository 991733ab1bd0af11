"""Incremental two-window LSDD (ratiowatch.core.lsdd_window): equals a fresh batch fit on the final windows."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ratiowatch.core.lsdd import fit_lsdd
from ratiowatch.core.lsdd_window import TwoWindowLSDD


def _stream(rng, steps, dim):
    # regime switches so that the windows see both quiet and changing stretches
    scale = 1.0 + (np.arange(steps) // 700 % 3)[:, None]
    return rng.normal(size=(steps, dim)) * scale + (np.arange(steps) // 1100 % 2)[:, None]


@pytest.mark.parametrize("refresh_every", [256, 10**9])
def test_state_after_10000_slides_equals_a_fresh_batch_fit(refresh_every):
    rng = np.random.default_rng(0)
    n, dim, sigma, lam = 6, 2, 0.8, 0.05
    st = TwoWindowLSDD(dim, n, sigma, lam, refresh_every=refresh_every)
    for y in _stream(rng, 10_000 + 2 * n, dim):
        st.push(y)
    batch = fit_lsdd(st.past(), st.current(), sigma=sigma, lam=lam, centres=st.centres())
    l2, l2_again = st.scores()
    assert l2 == l2_again
    assert l2 == pytest.approx(batch.l2, rel=1e-8, abs=1e-12)
    np.testing.assert_allclose(st.theta(), batch.theta, rtol=1e-8, atol=1e-10)
    # the maintained sums equal their definition
    fresh = TwoWindowLSDD(dim, n, sigma, lam)
    for y in np.concatenate([st.past(), st.current()]):
        fresh.push(y)
    assert fresh.scores()[0] == pytest.approx(l2, rel=1e-8, abs=1e-12)


def test_scores_along_the_stream_equal_batch_fits():
    rng = np.random.default_rng(1)
    n, dim, sigma, lam = 10, 3, 1.5, 0.01
    st = TwoWindowLSDD(dim, n, sigma, lam, refresh_every=50)
    data = _stream(rng, 400, dim)
    for t, y in enumerate(data):
        st.push(y)
        if st.ready and t % 37 == 0:
            past, cur = data[t - 2 * n + 1: t - n + 1], data[t - n + 1: t + 1]
            np.testing.assert_array_equal(st.past(), past)
            np.testing.assert_array_equal(st.current(), cur)
            batch = fit_lsdd(past, cur, sigma=sigma, lam=lam, centres=np.concatenate([past, cur]))
            assert st.scores()[0] == pytest.approx(batch.l2, rel=1e-9, abs=1e-13)
            assert st.scores()[0] >= 0.0


def test_change_raises_the_score():
    rng = np.random.default_rng(2)
    st = TwoWindowLSDD(1, 30, 0.5, 0.01)
    quiet = []
    for y in rng.normal(size=(200, 1)):
        st.push(y)
        if st.ready:
            quiet.append(st.scores()[0])
    for y in rng.normal(3.0, 1.0, size=(30, 1)):
        st.push(y)
    assert st.scores()[0] > 2 * max(quiet)


def test_checkpoint_roundtrip_through_npz_and_json(tmp_path):
    rng = np.random.default_rng(3)
    st = TwoWindowLSDD(2, 8, 0.7, 0.1, refresh_every=20)
    data = rng.normal(size=(100, 2))
    for y in data[:57]:
        st.push(y)
    state = st.to_state()
    arrays = {k: v for k, v in state.items() if isinstance(v, np.ndarray)}
    scalars = {k: v for k, v in state.items() if not isinstance(v, np.ndarray)}
    np.savez(tmp_path / "s.npz", **arrays)
    (tmp_path / "s.json").write_text(json.dumps(scalars))
    with np.load(tmp_path / "s.npz", allow_pickle=False) as z:
        restored = TwoWindowLSDD.from_state({**json.loads((tmp_path / "s.json").read_text()), **dict(z)})
    for y in data[57:]:
        st.push(y)
        restored.push(y)
    assert restored.scores() == st.scores()  # bit for bit


def test_set_params_recomputes():
    rng = np.random.default_rng(4)
    st = TwoWindowLSDD(2, 7, 0.5, 0.1)
    for y in rng.normal(size=(40, 2)):
        st.push(y)
    st.set_params(1.3, 0.02)
    batch = fit_lsdd(st.past(), st.current(), sigma=1.3, lam=0.02, centres=st.centres())
    assert st.scores()[0] == pytest.approx(batch.l2, rel=1e-10)


def test_unitless_score_is_the_fit_with_its_ridge_in_kernel_volumes_scaled_by_the_volume():
    rng = np.random.default_rng(6)
    n, dim, sigma, lam = 9, 3, 1.2, 0.1
    st = TwoWindowLSDD(dim, n, sigma, lam, unitless=True)
    for y in _stream(rng, 300, dim):
        st.push(y)
    volume = (np.pi * sigma ** 2) ** (dim / 2)
    batch = fit_lsdd(st.past(), st.current(), sigma=sigma, lam=lam * volume, centres=st.centres())
    assert st.scores()[0] == pytest.approx(volume * batch.l2, rel=1e-9)


def test_unitless_score_stays_when_data_and_sigma_scale_together_and_the_plain_one_does_not():
    rng = np.random.default_rng(7)
    n, dim, sigma, lam, c = 8, 3, 0.9, 0.1, 3.0
    data = np.r_[rng.normal(size=(n, dim)), rng.normal(0.8, 1.0, size=(n, dim))]
    def score(x, s, unitless):
        st = TwoWindowLSDD(dim, n, s, lam, unitless=unitless)
        for y in x:
            st.push(y)
        return st.scores()[0]
    assert score(c * data, c * sigma, True) == pytest.approx(score(data, sigma, True), rel=1e-9)
    plain, plain_scaled = score(data, sigma, False), score(c * data, c * sigma, False)
    # the plain L2 has units of 1 / volume: about c^-d times as large (not exactly: its ridge is absolute)
    assert plain_scaled * c ** dim / plain == pytest.approx(1.0, abs=0.2)


def test_unitless_state_checkpoints_and_an_older_state_restores_plain():
    rng = np.random.default_rng(8)
    st = TwoWindowLSDD(2, 6, 0.7, 0.1, unitless=True)
    data = rng.normal(size=(60, 2))
    for y in data[:30]:
        st.push(y)
    restored = TwoWindowLSDD.from_state(json.loads(json.dumps({k: v.tolist() if isinstance(v, np.ndarray) else v
                                                               for k, v in st.to_state().items()})))
    assert restored.unitless
    for y in data[30:]:
        st.push(y)
        restored.push(y)
    assert restored.scores() == st.scores()
    plain = TwoWindowLSDD(2, 6, 0.7, 0.1)
    for y in data:
        plain.push(y)
    old = {k: v for k, v in plain.to_state().items() if k != "unitless"}
    assert not TwoWindowLSDD.from_state(old).unitless
    assert TwoWindowLSDD.from_state(old).scores() == plain.scores()


def test_constant_and_duplicated_streams_give_zero_not_nan():
    st = TwoWindowLSDD(3, 5, 1.0, 1e-3)
    for _ in range(30):
        st.push(np.full(3, 2.5))
    assert st.scores() == (0.0, 0.0)
    st.push(np.zeros(3))
    l2 = st.scores()[0]
    assert np.isfinite(l2) and l2 > 0


def test_bad_input_is_rejected():
    with pytest.raises(ValueError, match="n"):
        TwoWindowLSDD(1, 1, 1.0, 0.1)
    with pytest.raises(ValueError, match="dim"):
        TwoWindowLSDD(0, 5, 1.0, 0.1)
    with pytest.raises(ValueError, match="lam"):
        TwoWindowLSDD(1, 5, 1.0, 0.0)
    with pytest.raises(ValueError, match="sigma"):
        TwoWindowLSDD(1, 5, float("nan"), 0.1)
    with pytest.raises(ValueError, match="overflows"):
        TwoWindowLSDD(400, 5, 1e3, 0.1)
    st = TwoWindowLSDD(2, 3, 1.0, 0.1)
    with pytest.raises(ValueError, match="not full"):
        st.scores()
    with pytest.raises(ValueError, match="NaN"):
        st.push([0.0, np.nan])
    with pytest.raises(ValueError, match="dim=2"):
        st.push([0.0, 1.0, 2.0])
    bad = st.to_state()
    bad["ring"] = np.zeros((5, 2))
    with pytest.raises(ValueError, match="shape"):
        TwoWindowLSDD.from_state(bad)

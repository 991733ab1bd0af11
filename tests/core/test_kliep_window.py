"""Incremental two-window KLIEP (ratiowatch.core.kliep_window).

A cold solve on the maintained state equals a fresh batch fit on the final windows (centres = the
numerator window); a warm-started solve stays within the optimisation error of it.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from naive import kliep_direction
from ratiowatch.core.kernels import gauss_kernel
from ratiowatch.core.kliep import LOG_FLOOR_VALUE, fit_kliep
from ratiowatch.core.kliep_window import KL_NO_OVERLAP, TwoWindowKLIEP


def _stream(rng, steps, dim):
    scale = 1.0 + (np.arange(steps) // 700 % 3)[:, None]
    return rng.normal(size=(steps, dim)) * scale + (np.arange(steps) // 1100 % 2)[:, None]


def _batch(past, cur, sigma):
    return (fit_kliep(past, cur, sigma=sigma, centres=past).kl,
            fit_kliep(cur, past, sigma=sigma, centres=cur).kl)


@pytest.mark.parametrize("refresh_every", [256, 10**9])
def test_cold_solve_after_10000_slides_equals_a_fresh_batch_fit(refresh_every):
    rng = np.random.default_rng(0)
    n, dim, sigma = 6, 2, 0.8
    st = TwoWindowKLIEP(dim, n, sigma, warm_start=False, refresh_every=refresh_every)
    for y in _stream(rng, 10_000 + 2 * n, dim):
        st.push(y)
    kl = st.scores()
    expected = _batch(st.past(), st.current(), sigma)
    np.testing.assert_allclose(kl, expected, rtol=1e-8, atol=1e-10)
    a_past, a_cur = st.coefficients()
    np.testing.assert_allclose(a_past, fit_kliep(st.past(), st.current(), sigma=sigma, centres=st.past()).theta,
                               rtol=1e-8, atol=1e-10)
    assert np.all(a_cur >= 0)


def test_maintained_kernel_state_matches_its_definition_after_10000_slides():
    rng = np.random.default_rng(1)
    n, dim, sigma = 5, 3, 1.1
    st = TwoWindowKLIEP(dim, n, sigma, refresh_every=10**9)  # no refresh: measures the raw drift
    for y in _stream(rng, 10_000, dim):
        st.push(y)
    state = st.to_state()
    ring, head = state["ring"], state["head"]
    order = (head + np.arange(2 * n)) % (2 * n)
    past, cur = order[:n], order[n:]
    gram = gauss_kernel(ring, ring, sigma)
    np.testing.assert_allclose(state["gram"], gram, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(state["vec_p"], gram[past].sum(0), rtol=1e-8, atol=1e-12)
    np.testing.assert_allclose(state["vec_q"], gram[cur].sum(0), rtol=1e-8, atol=1e-12)


def test_first_solve_equals_batch_and_warm_solves_track_it():
    rng = np.random.default_rng(2)
    n, dim, sigma = 20, 5, 3.0
    data = rng.normal(size=(900, dim))
    data[450:] += 0.7  # one change in the middle
    st = TwoWindowKLIEP(dim, n, sigma, warm_start=True)
    for y in data[: 2 * n]:
        st.push(y)
    np.testing.assert_allclose(st.scores(), _batch(st.past(), st.current(), sigma), rtol=1e-10)
    gaps = []
    for t in range(2 * n, len(data)):
        st.push(data[t])
        kl = st.scores()
        if t % 50 == 0:
            gaps.append(np.subtract(kl, _batch(st.past(), st.current(), sigma)))
    gaps = np.abs(np.array(gaps))
    # the optimisation error of an early-stopped ascent, not rounding: measured max 0.011 for
    # n = 20, d = 5 (module docstring of ratiowatch.core.kliep_window)
    assert gaps.max() < 0.02, gaps.max()


def test_change_raises_the_scores():
    rng = np.random.default_rng(3)
    st = TwoWindowKLIEP(1, 30, 0.5)
    quiet = []
    for y in rng.normal(size=(200, 1)):
        st.push(y)
        if st.ready:
            quiet.append(sum(st.scores()))
    for y in rng.normal(3.0, 1.0, size=(30, 1)):
        st.push(y)
    assert sum(st.scores()) > 2 * max(quiet)


def test_checkpoint_roundtrip_through_npz_and_json(tmp_path):
    rng = np.random.default_rng(4)
    st = TwoWindowKLIEP(2, 8, 0.9, refresh_every=20)
    data = rng.normal(size=(100, 2))
    for i, y in enumerate(data[:57]):
        st.push(y)
        if st.ready and i % 5 == 0:
            st.scores()
    state = st.to_state()
    arrays = {k: v for k, v in state.items() if isinstance(v, np.ndarray)}
    scalars = {k: v for k, v in state.items() if not isinstance(v, np.ndarray)}
    np.savez(tmp_path / "s.npz", **arrays)
    (tmp_path / "s.json").write_text(json.dumps(scalars))
    with np.load(tmp_path / "s.npz", allow_pickle=False) as z:
        restored = TwoWindowKLIEP.from_state({**json.loads((tmp_path / "s.json").read_text()), **dict(z)})
    for y in data[57:]:
        st.push(y)
        restored.push(y)
        assert restored.scores() == st.scores()  # bit for bit, warm start included


def test_set_params_rebuilds_and_cold_starts():
    rng = np.random.default_rng(5)
    st = TwoWindowKLIEP(2, 7, 0.5)
    for y in rng.normal(size=(40, 2)):
        st.push(y)
    st.scores()
    st.set_params(1.3)
    np.testing.assert_allclose(st.scores(), _batch(st.past(), st.current(), 1.3), rtol=1e-10)


def test_constant_and_duplicated_streams_stay_finite():
    st = TwoWindowKLIEP(2, 5, 1.0)
    for _ in range(30):
        st.push(np.full(2, -4.0))
    assert st.scores() == pytest.approx((0.0, 0.0), abs=1e-12)
    st.push(np.zeros(2))
    assert np.all(np.isfinite(st.scores()))


def test_bad_input_is_rejected():
    with pytest.raises(ValueError, match="n"):
        TwoWindowKLIEP(1, 1, 1.0)
    with pytest.raises(ValueError, match="sigma"):
        TwoWindowKLIEP(1, 5, 0.0)
    with pytest.raises(ValueError, match="warm_iter"):
        TwoWindowKLIEP(1, 5, 1.0, warm_iter=0)
    st = TwoWindowKLIEP(1, 3, 1e-3)
    with pytest.raises(ValueError, match="not full"):
        st.scores()
    with pytest.raises(ValueError, match="NaN"):
        st.push([np.inf])
    for v in [0.0, 1.0, 2.0, 100.0, 200.0, 300.0]:
        st.push([v])
    with pytest.raises(ValueError, match="too small"):
        st.scores()  # no kernel value between the windows survives


def _separated_stream(seed, n, dim):
    """A separating stream: 300 draws of N(0, I), n shifted by +40, n of N(0, I) again. At sigma
    1.5 the shifted block has no kernel mass with the others (exponents below -350)."""
    rng = np.random.default_rng(seed)
    return np.r_[rng.normal(size=(300, dim)), rng.normal(size=(n, dim)) + 40.0, rng.normal(size=(n, dim))]


def _rebuilt(st):
    out = TwoWindowKLIEP.from_state(st.to_state())
    out.refresh()
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_incremental_state_and_a_rebuild_agree_across_a_separation(seed):
    # the add/subtract updates left +-1e-14 in sums that are exactly 0, which counted as overlap:
    # the incremental state scored (35.7, 35.9) where a rebuild of the same windows raised
    n, dim, sigma = 50, 3, 1.5
    st = TwoWindowKLIEP(dim, n, sigma)
    inc, reb = [], []
    for t, y in enumerate(_separated_stream(seed, n, dim)):
        st.push(y)
        if st.ready and (t % 7 == 0 or t >= 340):  # every step from 340: windows separate at 349 and 399
            inc.append(st.scores())
            reb.append(_rebuilt(st).scores())
    inc, reb = np.array(inc), np.array(reb)
    assert np.array_equal(inc == KL_NO_OVERLAP, reb == KL_NO_OVERLAP)
    assert (inc == KL_NO_OVERLAP).all(axis=1).sum() == 2  # steps 349 and 399
    np.testing.assert_allclose(inc, reb, rtol=1e-10, atol=1e-10)
    # the final windows (shifted block vs N(0, I)) share no kernel mass: exact zeros, both ways
    past, cur = st._slots()
    assert st._since_refresh > 0
    assert np.all(st._vec_q[past] == 0.0) and np.all(st._vec_p[cur] == 0.0)
    assert st.scores() == (KL_NO_OVERLAP, KL_NO_OVERLAP)


def test_windows_without_overlap_score_the_finite_ceiling_and_keep_a_valid_state():
    n, dim, sigma = 50, 3, 1.5
    for warm in (False, True):
        st = TwoWindowKLIEP(dim, n, sigma, warm_start=warm)
        for y in _separated_stream(0, n, dim):
            st.push(y)
        kl = st.scores()
        assert kl == (KL_NO_OVERLAP, KL_NO_OVERLAP)
        assert KL_NO_OVERLAP == pytest.approx(-np.log(LOG_FLOOR_VALUE)) and np.isfinite(KL_NO_OVERLAP)
        a_past, a_cur = st.coefficients()
        assert np.all(np.isfinite(a_past)) and np.all(np.isfinite(a_cur))
        restored = TwoWindowKLIEP.from_state(st.to_state())  # finite arrays: the checkpoint loads
        assert restored.scores() == kl
        # far above what overlapping windows score; the windows overlap again a push later
        rng = np.random.default_rng(9)
        for y in rng.normal(size=(n, dim)):
            st.push(y)
            assert max(st.scores()) < 50.0


def test_a_sigma_below_every_distance_still_raises_but_a_separation_does_not():
    st = TwoWindowKLIEP(1, 3, 1e-3)  # within-window distances of 1 underflow too
    for v in [0.0, 1.0, 2.0, 100.0, 200.0, 300.0]:
        st.push([v])
    with pytest.raises(ValueError, match="too small"):
        st.scores()
    st = TwoWindowKLIEP(1, 3, 0.5)  # the same windows at a sigma that reaches within each window
    for v in [0.0, 0.5, 1.0, 100.0, 100.5, 101.0]:
        st.push([v])
    assert st.scores() == (KL_NO_OVERLAP, KL_NO_OVERLAP)


def test_scores_equal_a_plain_numpy_kliep_through_a_separation():
    n, dim, sigma = 50, 3, 1.5
    st = TwoWindowKLIEP(dim, n, sigma)
    checked = 0
    for t, y in enumerate(_separated_stream(1, n, dim)):
        st.push(y)
        if st.ready and (t % 25 == 0 or t >= 390):
            p, c = st.past(), st.current()
            ref = [kliep_direction(p, c, sigma), kliep_direction(c, p, sigma)]
            ref = [KL_NO_OVERLAP if r == np.inf else r for r in ref]
            np.testing.assert_allclose(st.scores(), ref, rtol=1e-9, atol=1e-9)
            checked += 1
    assert checked > 10 and ref == [KL_NO_OVERLAP, KL_NO_OVERLAP]


def test_windows_without_kernel_mass_between_any_two_samples_raise_a_value_error_of_their_own():
    from ratiowatch.core.kliep_window import NoKernelMassError

    st = TwoWindowKLIEP(dim=1, n=4, sigma=1e-3)
    for v in range(8):
        st.push(np.array([float(v)]))
    with pytest.raises(NoKernelMassError, match="too small for these windows") as info:
        st.scores()
    assert isinstance(info.value, ValueError)


def test_warm_iter_given_as_a_fraction_is_refused_not_truncated():
    with pytest.raises(TypeError, match="warm_iter must be an integer; got 2.5"):
        TwoWindowKLIEP(1, 3, 1.0, warm_iter=2.5)

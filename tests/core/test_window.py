"""TwoWindowRuLSIF: the incremental state is the batch fit of its windows, at every step."""

import json

import numpy as np
import pytest

from ratiowatch.core.rulsif import fit_rulsif
from ratiowatch.core.window import TwoWindowRuLSIF


def batch_scores(st):
    past, cur = st.past(), st.current()
    kw = dict(alpha=st.alpha, sigma=st.sigma, lam=st.lam, n_centres=st.n, clip=st.clip)
    return fit_rulsif(past, cur, **kw).pe, fit_rulsif(cur, past, **kw).pe


@pytest.mark.parametrize("refresh_every", [10**9, 64])
def test_ten_thousand_random_slides_equal_a_fresh_batch_fit(refresh_every):
    rng = np.random.default_rng(0)
    st = TwoWindowRuLSIF(dim=3, n=12, sigma=1.1, lam=0.05, alpha=0.3, refresh_every=refresh_every)
    # regime changes keep the clipping active part of the time
    scale = np.repeat(rng.uniform(0.3, 3.0, size=21), 500)
    for t in range(10_000 + 24):
        st.push(rng.normal(size=3) * scale[t] + (t // 1000) % 3)
        if st.ready and t % 997 == 0:
            np.testing.assert_allclose(st.scores(), batch_scores(st), rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(st.scores(), batch_scores(st), rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("clip", [True, False])
def test_every_step_from_the_first_full_window_on_equals_the_batch_fit(clip):
    """No stale state from the filling phase: the first scores are already exact."""
    rng = np.random.default_rng(5)
    st = TwoWindowRuLSIF(dim=2, n=7, sigma=0.9, lam=0.05, alpha=0.2, refresh_every=10**9, clip=clip)
    for t in range(60):
        st.push(rng.normal(size=2) + (t > 20))
        if st.ready:
            np.testing.assert_allclose(st.scores(), batch_scores(st), rtol=1e-9, atol=1e-12)


def test_windows_hold_the_last_2n_samples_in_time_order():
    st = TwoWindowRuLSIF(dim=1, n=3, sigma=1.0, lam=0.1)
    for v in range(10):
        st.push([float(v)])
    np.testing.assert_array_equal(st.past().ravel(), [4, 5, 6])
    np.testing.assert_array_equal(st.current().ravel(), [7, 8, 9])


def test_not_ready_until_both_windows_are_full():
    st = TwoWindowRuLSIF(dim=2, n=4, sigma=1.0, lam=0.1)
    for i in range(7):
        st.push(np.ones(2) * i)
        assert not st.ready
        with pytest.raises(ValueError, match="not full"):
            st.scores()
    st.push(np.zeros(2))
    assert st.ready and all(np.isfinite(st.scores()))


def test_set_params_equals_a_state_built_with_those_params():
    rng = np.random.default_rng(1)
    data = rng.normal(size=(57, 2))
    a = TwoWindowRuLSIF(2, 10, sigma=0.5, lam=0.2)
    b = TwoWindowRuLSIF(2, 10, sigma=2.0, lam=0.01)
    for y in data:
        a.push(y)
        b.push(y)
    a.set_params(2.0, 0.01)
    np.testing.assert_allclose(a.scores(), b.scores(), rtol=1e-10)
    np.testing.assert_allclose(a.scores(), batch_scores(a), rtol=1e-8)


def test_set_params_during_filling_keeps_the_state_consistent():
    rng = np.random.default_rng(4)
    a = TwoWindowRuLSIF(1, 5, sigma=0.5, lam=0.1)
    for y in rng.normal(size=(7, 1)):
        a.push(y)
    a.set_params(1.5, 0.1)
    for y in rng.normal(size=(20, 1)):
        a.push(y)
    np.testing.assert_allclose(a.scores(), batch_scores(a), rtol=1e-8)


def test_state_round_trip_continues_exactly(tmp_path):
    rng = np.random.default_rng(2)
    data = rng.normal(size=(300, 4))
    a = TwoWindowRuLSIF(4, 20, sigma=1.5, lam=0.1, alpha=0.1, refresh_every=50)
    for y in data[:150]:
        a.push(y)
    state = a.to_state()
    arrays = {k: v for k, v in state.items() if isinstance(v, np.ndarray)}
    scalars = {k: v for k, v in state.items() if not isinstance(v, np.ndarray)}
    np.savez(tmp_path / "s.npz", **arrays)
    (tmp_path / "s.json").write_text(json.dumps(scalars))
    with np.load(tmp_path / "s.npz", allow_pickle=False) as z:
        restored = {**json.loads((tmp_path / "s.json").read_text()), **{k: z[k] for k in z.files}}
    b = TwoWindowRuLSIF.from_state(restored)
    for y in data[150:]:
        a.push(y)
        b.push(y)
        assert a.scores() == b.scores()


def test_a_deep_copy_goes_on_as_the_original():
    # the attributes are views into two buffers the compiled code updates: a copy that copied them
    # one by one read and rebuilt arrays the compiled code no longer saw
    import copy

    rng = np.random.default_rng(4)
    st = TwoWindowRuLSIF(dim=2, n=20, sigma=1.0, lam=0.1, refresh_every=7)
    for y in rng.normal(size=(50, 2)):
        st.push(y)
    twin = copy.deepcopy(st)
    assert np.shares_memory(twin._ring, twin._buf) and np.shares_memory(twin._ist, twin._ibuf)
    assert not np.shares_memory(twin._buf, st._buf)
    for step, y in enumerate(rng.normal(size=(60, 2))):
        st.push(y)
        twin.push(y)
        if step == 30:
            st.set_params(0.7, 0.05)
            twin.set_params(0.7, 0.05)
        assert st.scores() == twin.scores()
        assert np.array_equal(st.past(), twin.past()) and np.array_equal(st.current(), twin.current())
    a, b = st.to_state(), twin.to_state()
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def test_separation_grows_after_a_change():
    rng = np.random.default_rng(3)
    st = TwoWindowRuLSIF(dim=1, n=25, sigma=1.0, lam=0.1, alpha=0.1)
    for v in rng.normal(size=50):
        st.push([v])
    before = sum(st.scores())
    for v in rng.normal(3.0, 1.0, size=25):
        st.push([v])
    assert sum(st.scores()) > before + 0.2


@pytest.mark.parametrize(
    "kwargs,match",
    [({"dim": 0}, "dim"), ({"n": 1}, "n"), ({"sigma": 0.0}, "sigma"), ({"lam": -1.0}, "lam"),
     ({"alpha": 1.0}, "alpha"), ({"refresh_every": 0}, "refresh_every")],
)
def test_invalid_configuration_is_rejected(kwargs, match):
    base = {"dim": 1, "n": 5, "sigma": 1.0, "lam": 0.1}
    base.update(kwargs)
    with pytest.raises(ValueError, match=match):
        TwoWindowRuLSIF(**base)


def test_bad_samples_are_rejected_without_corrupting_the_state():
    st = TwoWindowRuLSIF(dim=2, n=3, sigma=1.0, lam=0.1)
    for _ in range(6):
        st.push([0.0, 1.0])
    before = st.scores()
    with pytest.raises(ValueError, match="NaN"):
        st.push([np.nan, 1.0])
    with pytest.raises(ValueError, match="dim=2"):
        st.push([1.0, 2.0, 3.0])
    assert st.scores() == before


def test_restoring_a_state_with_a_wrong_version_fails_clearly():
    st = TwoWindowRuLSIF(dim=1, n=3, sigma=1.0, lam=0.1)
    state = st.to_state()
    state["version"] = 99
    with pytest.raises(ValueError, match="version"):
        TwoWindowRuLSIF.from_state(state)


def _slides(seed, steps, dim):
    rng = np.random.default_rng(seed)
    scale = np.repeat(rng.uniform(0.3, 3.0, size=steps // 50 + 1), 50)[:steps]
    return rng.normal(size=(steps, dim)) * scale[:, None] + (np.arange(steps) // 120 % 2)[:, None]


@pytest.mark.parametrize("clip", [True, False])
def test_push_many_equals_push_then_scores_each_step(clip):
    """Filling, slides, and refreshes in the middle of the batch: same numbers as the per-sample API."""
    rows = _slides(6, 400, 3)
    one = TwoWindowRuLSIF(3, 9, sigma=1.2, lam=0.05, alpha=0.2, refresh_every=37, clip=clip)
    many = TwoWindowRuLSIF(3, 9, sigma=1.2, lam=0.05, alpha=0.2, refresh_every=37, clip=clip)
    expected = np.full((len(rows), 2), np.nan)
    for t, y in enumerate(rows):
        one.push(y)
        if one.ready:
            expected[t] = one.scores()
    got = np.vstack([many.push_many(rows[:5]), many.push_many(rows[5:30]), many.push_many(rows[30:])])
    assert np.isnan(got[:17]).all() and np.isfinite(got[17:]).all()  # scores exist from push 2n = 18 on
    np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-12)
    assert many.scores() == one.scores()
    np.testing.assert_array_equal(many.past(), one.past())
    np.testing.assert_array_equal(many.current(), one.current())


@pytest.mark.parametrize("make", ["rulsif", "kliep", "lsdd"])
def test_push_scores_equals_push_then_scores(make):
    from ratiowatch.core.kliep_window import TwoWindowKLIEP
    from ratiowatch.core.lsdd_window import TwoWindowLSDD

    build = {"rulsif": lambda: TwoWindowRuLSIF(3, 6, sigma=1.2, lam=0.05, alpha=0.2, refresh_every=11),
             "kliep": lambda: TwoWindowKLIEP(3, 6, sigma=1.2, refresh_every=11),
             "lsdd": lambda: TwoWindowLSDD(3, 6, sigma=1.2, lam=0.05, refresh_every=11)}[make]
    one, fused = build(), build()
    for y in _slides(9, 60, 3):
        one.push(y)
        got = fused.push_scores(y)
        assert got == (one.scores() if one.ready else None)
    with pytest.raises(ValueError, match="NaN or infinity"):
        fused.push_scores(np.array([0.0, np.nan, 1.0]))
    assert fused.scores() == one.scores()


def test_push_many_rejects_a_bad_row_without_pushing_anything():
    st = TwoWindowRuLSIF(dim=2, n=4, sigma=1.0, lam=0.1)
    st.push_many(_slides(7, 20, 2))
    before, count = st.scores(), st.count
    rows = _slides(8, 5, 2)
    rows[3, 1] = np.inf
    with pytest.raises(ValueError, match="row 3"):
        st.push_many(rows)
    with pytest.raises(ValueError, match=r"shape \(m, 2\)"):
        st.push_many(np.zeros((3, 5)))
    assert st.count == count and st.scores() == before


def test_scores_are_recomputed_after_every_change():
    """scores() is cached between pushes; a push or set_params must invalidate the cache."""
    st = TwoWindowRuLSIF(dim=1, n=5, sigma=1.0, lam=0.1)
    rows = _slides(9, 30, 1)
    st.push_many(rows[:12])
    first = st.scores()
    st.push(rows[12])
    np.testing.assert_allclose(st.scores(), batch_scores(st), rtol=1e-9)
    assert st.scores() != first
    st.set_params(0.4, 0.3)
    np.testing.assert_allclose(st.scores(), batch_scores(st), rtol=1e-9)


def _version1_state(st):
    """The layout written by the version-1 implementation (full 2n x 2n accumulators over slots)."""
    state = st.to_state()
    gram = state.pop("gram")
    del state["macc"], state["hacc"]
    size = 2 * st.n
    order = (st._head + np.arange(size)) % size
    past, cur = order[: st.n], order[st.n:]
    state.update(version=1, gram=gram, acc_p=gram[past].T @ gram[past], acc_q=gram[cur].T @ gram[cur],
                 vec_p=gram[past].sum(axis=0), vec_q=gram[cur].sum(axis=0))
    return state


def test_version_1_states_are_read_and_rebuilt():
    rows = _slides(10, 200, 2)
    st = TwoWindowRuLSIF(2, 8, sigma=0.8, lam=0.05, alpha=0.1)
    st.push_many(rows[:150])
    old = TwoWindowRuLSIF.from_state(_version1_state(st))
    np.testing.assert_allclose(old.scores(), st.scores(), rtol=1e-10)
    for y in rows[150:]:
        st.push(y)
        old.push(y)
        np.testing.assert_allclose(old.scores(), st.scores(), rtol=1e-9, atol=1e-12)
    filling = TwoWindowRuLSIF(2, 8, sigma=0.8, lam=0.05, alpha=0.1)
    filling.push_many(rows[:11])
    resumed = TwoWindowRuLSIF.from_state(_version1_state(filling))
    resumed.push_many(rows[11:40])
    filling.push_many(rows[11:40])
    assert resumed.scores() == filling.scores()


def test_corrupt_state_shapes_are_rejected():
    st = TwoWindowRuLSIF(dim=1, n=3, sigma=1.0, lam=0.1)
    st.push_many(np.arange(7.0)[:, None])
    state = st.to_state()
    state["macc"] = state["macc"][:1]
    with pytest.raises(ValueError, match="macc"):
        TwoWindowRuLSIF.from_state(state)


def test_duplicated_constant_and_strided_samples_still_equal_the_batch_fit():
    """Smallest windows, exact duplicates (rank-deficient kernel sums) and non-contiguous sample views."""
    st = TwoWindowRuLSIF(dim=2, n=2, sigma=0.7, lam=0.01, alpha=0.5)
    block = np.zeros((2, 12))  # samples are strided column views of this block
    block[:, 6:] = 1.0
    for t in range(12):
        st.push(block[:, t])
        if st.ready:
            np.testing.assert_allclose(st.scores(), batch_scores(st), rtol=1e-8, atol=1e-12)
            assert np.all(np.isfinite(st.scores()))


def test_gram_in_time_order_equals_the_kernel_of_the_windows():
    from ratiowatch.core.kernels import gauss_kernel

    rng = np.random.default_rng(3)
    st = TwoWindowRuLSIF(3, 15, 0.8, 0.1)
    for row in rng.normal(size=(137, 3)):  # not a multiple of 2n: the ring has wrapped mid-way
        st.push(row)
    pooled = np.vstack([st.past(), st.current()])
    np.testing.assert_allclose(st.gram(), gauss_kernel(pooled, pooled, 0.8), rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("field", ["ring", "gram", "macc", "hacc"])
@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_a_state_holding_nan_or_infinity_is_refused_like_the_other_window_states(field, bad):
    # the compiled updates carried the damaged value into every later score
    st = TwoWindowRuLSIF(dim=1, n=3, sigma=1.0, lam=0.1)
    st.push_many(np.arange(7.0)[:, None])
    state = st.to_state()
    state[field] = state[field].copy()
    state[field].flat[1] = bad
    with pytest.raises(ValueError, match=f"state field '{field}' holds NaN or infinity"):
        TwoWindowRuLSIF.from_state(state)


def test_alpha_given_as_a_string_is_refused():
    with pytest.raises(TypeError, match="alpha must be a real number"):
        TwoWindowRuLSIF(dim=1, n=3, sigma=1.0, lam=0.1, alpha="0.1")

"""Every two-window state meets one declared interface, and pushing many rows equals pushing them
one by one."""

import numpy as np
import pytest

from ratiowatch.core.kliep_window import TwoWindowKLIEP
from ratiowatch.core.lsdd_window import TwoWindowLSDD
from ratiowatch.core.window import TwoWindowRuLSIF
from ratiowatch.core.window_base import TwoWindowState

STATES = {
    "rulsif": lambda: TwoWindowRuLSIF(2, 6, sigma=1.0, lam=0.1),
    "kliep": lambda: TwoWindowKLIEP(2, 6, sigma=1.0),
    "lsdd": lambda: TwoWindowLSDD(2, 6, sigma=1.0, lam=0.1),
}


@pytest.mark.parametrize("method", sorted(STATES))
def test_each_state_meets_the_two_window_interface(method):
    st = STATES[method]()
    assert isinstance(st, TwoWindowState)
    assert isinstance(st.lam, float) and st.lam >= 0.0


@pytest.mark.parametrize("method", sorted(STATES))
@pytest.mark.parametrize("chunks", [(20,), (5, 15), (12, 8), (3, 4, 13)])
def test_push_many_equals_one_push_per_row(method, chunks):
    # filling at once, filling across calls, and sliding after the fill
    rows = np.random.default_rng(3).normal(size=(20, 2))
    one, many = STATES[method](), STATES[method]()
    for row in rows:
        one.push(row)
    for part in np.split(rows, np.cumsum(chunks)[:-1]):
        many.push_many(part)
    assert one.ready and many.ready and one.count == many.count == 20
    np.testing.assert_array_equal(one.past(), many.past())
    np.testing.assert_array_equal(one.current(), many.current())
    np.testing.assert_allclose(one.scores(), many.scores(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("method", sorted(STATES))
@pytest.mark.parametrize("pushed", [3, 14])
def test_push_many_pushes_nothing_when_a_row_is_bad(method, pushed):
    rng = np.random.default_rng(4)
    st = STATES[method]()
    st.push_many(rng.normal(size=(pushed, 2)))
    rows = rng.normal(size=(6, 2))
    rows[4, 1] = np.nan
    with pytest.raises(ValueError, match="row 4"):
        st.push_many(rows)
    with pytest.raises(ValueError, match="shape"):
        st.push_many(rng.normal(size=(6, 3)))
    assert st.count == pushed


def test_an_object_missing_part_of_the_interface_is_not_a_state():
    class Partial:
        dim, n, sigma, lam = 1, 2, 1.0, 0.1

        def push(self, y):
            pass

    assert not isinstance(Partial(), TwoWindowState)


@pytest.mark.parametrize("method", sorted(STATES))
def test_a_finite_sample_whose_sum_overflows_is_accepted_as_a_list_and_as_an_array(method):
    # 1e308 + 1e308 overflows: the sample was refused as "NaN or infinity" (the RuLSIF state took it
    # as an array and refused it as a list); far values have no kernel mass with the others
    rows = np.random.default_rng(5).normal(size=(14, 2))
    rows[3] = rows[12] = [1e308, 1e308]
    rows[9] = [-1e308, 1e308]
    as_list, as_array, many = STATES[method](), STATES[method](), STATES[method]()
    with np.errstate(over="ignore"):  # the quick check sums the sample: that sum overflows
        for row in rows:
            as_list.push(row.tolist())
            as_array.push(row)
        many.push_many(rows)
    assert as_list.count == as_array.count == 14
    assert as_list.scores() == as_array.scores() == many.scores()
    assert np.isfinite(as_list.scores()).all()


@pytest.mark.parametrize("method", sorted(STATES))
def test_a_sample_holding_nan_or_infinity_is_still_refused(method):
    st = STATES[method]()
    for bad in ([1e308, np.inf], [np.nan, 0.0], [-np.inf, 1.0]):
        with pytest.raises(ValueError, match="NaN or infinity"):
            st.push(bad)
    assert st.count == 0


@pytest.mark.parametrize("method", sorted(STATES))
@pytest.mark.parametrize("size, exc, match", [
    ({"n": 2.7}, TypeError, r"n \(samples per window\) must be an integer; got 2.7"),
    ({"n": 6.0}, TypeError, r"n \(samples per window\) must be an integer"),
    ({"n": True}, TypeError, r"n \(samples per window\) must be an integer"),
    ({"n": 1}, ValueError, r"n \(samples per window\) must be >= 2"),
    ({"dim": 1.9}, TypeError, "dim must be an integer; got 1.9"),
    ({"dim": 0}, ValueError, "dim must be >= 1"),
    ({"refresh_every": 0.5}, TypeError, "refresh_every must be an integer"),
    ({"refresh_every": 0}, ValueError, "refresh_every must be >= 1"),
])
def test_window_sizes_must_be_integers_not_truncated(method, size, exc, match):
    make = {"rulsif": TwoWindowRuLSIF, "kliep": TwoWindowKLIEP, "lsdd": TwoWindowLSDD}[method]
    args = {"dim": 2, "n": 6, "sigma": 1.0, **({"lam": 0.1} if method != "kliep" else {}), **size}
    with pytest.raises(exc, match=match):
        make(**args)
    st = make(**{**args, "dim": np.int64(2), "n": np.int64(6), "refresh_every": np.int64(9)})
    assert (st.dim, st.n, st.refresh_every) == (2, 6, 9) and type(st.n) is int


@pytest.mark.parametrize("method", sorted(STATES))
@pytest.mark.parametrize("since_refresh", [-1, 5, 10**6])
def test_a_state_whose_pushes_since_refresh_are_out_of_range_is_refused(method, since_refresh):
    st = {"rulsif": lambda: TwoWindowRuLSIF(1, 3, sigma=1.0, lam=0.1, refresh_every=5),
          "kliep": lambda: TwoWindowKLIEP(1, 3, sigma=1.0, refresh_every=5),
          "lsdd": lambda: TwoWindowLSDD(1, 3, sigma=1.0, lam=0.1, refresh_every=5)}[method]()
    for v in range(9):
        st.push([float(v)])
    state = st.to_state()
    assert 0 <= state["since_refresh"] < 5
    state["since_refresh"] = since_refresh
    expected = rf"since_refresh={since_refresh}; expected 0 <= since_refresh < refresh_every=5"
    with pytest.raises(ValueError, match=expected):
        type(st).from_state(state)

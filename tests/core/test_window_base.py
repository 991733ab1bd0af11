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

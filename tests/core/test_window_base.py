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
def test_push_many_equals_one_push_per_row(method):
    rows = np.random.default_rng(3).normal(size=(20, 2))
    one, many = STATES[method](), STATES[method]()
    for row in rows:
        one.push(row)
    many.push_many(rows)
    assert one.ready and many.ready
    np.testing.assert_array_equal(one.past(), many.past())
    np.testing.assert_array_equal(one.current(), many.current())
    np.testing.assert_allclose(one.scores(), many.scores(), rtol=1e-12, atol=1e-12)


def test_an_object_missing_part_of_the_interface_is_not_a_state():
    class Partial:
        dim, n, sigma, lam = 1, 2, 1.0, 0.1

        def push(self, y):
            pass

    assert not isinstance(Partial(), TwoWindowState)

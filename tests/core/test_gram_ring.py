"""The Gram ring shared by the KLIEP and LSDD window states: slides equal a rebuild from the ring."""

import numpy as np

from ratiowatch.core.gram_ring import fill_gram, pair_sq_dists, slide_gram, window_sums


def _rebuilt(ring, head, n, sigma):
    d2 = np.empty((2 * n, 2 * n))
    pair_sq_dists(ring, d2)
    gram = np.empty_like(d2)
    fill_gram(d2, sigma, gram)
    p, q = np.empty(2 * n), np.empty(2 * n)
    window_sums(gram, p, q, head, n)
    return d2, gram, p, q


def test_pair_distances_and_gram_match_brute_force():
    ring = np.random.default_rng(0).normal(size=(10, 3))
    d2, gram, _, _ = _rebuilt(ring, 0, 5, 0.7)
    brute = ((ring[:, None, :] - ring[None, :, :]) ** 2).sum(-1)
    np.testing.assert_allclose(d2, brute, rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(gram, np.exp(-brute / (2 * 0.7**2)), rtol=1e-13)
    assert np.all(np.diag(gram) == 1.0)


def test_window_sums_split_the_ring_at_the_oldest_slot():
    n = 4
    ring = np.random.default_rng(1).normal(size=(2 * n, 2))
    _, gram, p, q = _rebuilt(ring, 3, n, 1.0)
    past = [(3 + t) % (2 * n) for t in range(n)]
    cur = [(3 + n + t) % (2 * n) for t in range(n)]
    np.testing.assert_allclose(p, gram[past].sum(axis=0), rtol=1e-14)
    np.testing.assert_allclose(q, gram[cur].sum(axis=0), rtol=1e-14)


def test_thousand_slides_equal_a_rebuild_and_report_the_new_row_distances():
    rng = np.random.default_rng(2)
    n, dim, sigma = 6, 3, 0.9
    ring = rng.normal(size=(2 * n, dim))
    _, gram, p, q = _rebuilt(ring, 0, n, sigma)
    head, row = 0, np.empty(2 * n)
    for y in rng.normal(size=(1000, dim)):
        slot = head
        head = slide_gram(ring, gram, p, q, head, n, y, sigma, row)
        np.testing.assert_allclose(row, ((ring - y) ** 2).sum(axis=1), rtol=1e-13, atol=1e-15)
        assert head == (slot + 1) % (2 * n)
    d2, gram_ref, p_ref, q_ref = _rebuilt(ring, head, n, sigma)
    np.testing.assert_allclose(gram, gram_ref, rtol=1e-12)
    np.testing.assert_allclose(p, p_ref, rtol=1e-9)
    np.testing.assert_allclose(q, q_ref, rtol=1e-9)

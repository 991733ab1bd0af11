"""The Gram ring shared by the KLIEP and LSDD window states: slides equal a rebuild from the ring."""

import numpy as np

from ratiowatch.core.gram_ring import fill_gram, pair_sq_dists, resum_small, slide_gram, sum_tolerance, window_sums


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


def _blocks(rng, n, dim):
    """Overlapping data, then a block 40 away, then the first regime again (the windows separate)."""
    return np.r_[rng.normal(size=(300, dim)), rng.normal(size=(n, dim)) + 40.0, rng.normal(size=(n, dim))]


def test_sum_tolerance_bounds_the_drift_of_the_maintained_sums():
    rng = np.random.default_rng(3)
    n, dim, sigma = 6, 2, 0.7
    data = np.r_[rng.normal(size=(2000, dim)), rng.normal(size=(2000, dim)) * 3 + 2, _blocks(rng, n, dim)]
    ring = data[: 2 * n].copy()
    _, gram, p, q = _rebuilt(ring, 0, n, sigma)
    head, row, worst = 0, np.empty(2 * n), 0.0
    for m, y in enumerate(data[2 * n:], start=1):
        head = slide_gram(ring, gram, p, q, head, n, y, sigma, row)
        _, _, p_ref, q_ref = _rebuilt(ring, head, n, sigma)
        err = max(np.abs(p - p_ref).max(), np.abs(q - q_ref).max())
        assert err <= sum_tolerance(n, m), (m, err)
        worst = max(worst, err / sum_tolerance(n, m))
    assert worst > 0.0  # the updates do drift (the bound is not vacuous in what it is checked on)


def test_resum_small_gives_a_rebuild_s_sums_bit_for_bit_near_zero():
    n, dim, sigma = 50, 3, 1.5
    data = _blocks(np.random.default_rng(0), n, dim)
    ring = data[: 2 * n].copy()
    _, gram, p, q = _rebuilt(ring, 0, n, sigma)
    p_raw, q_raw, gram_raw, ring_raw = p.copy(), q.copy(), gram.copy(), ring.copy()
    head, row = 0, np.empty(2 * n)
    for m, y in enumerate(data[2 * n:], start=1):
        slide_gram(ring_raw, gram_raw, p_raw, q_raw, head, n, y, sigma, row)  # without the re-summing
        head = slide_gram(ring, gram, p, q, head, n, y, sigma, row)
        tol = sum_tolerance(n, m)
        resum_small(gram, p, q, head, n, tol)
        _, gram_ref, p_ref, q_ref = _rebuilt(ring, head, n, sigma)
        np.testing.assert_array_equal(gram, gram_ref)
        small = (p_ref <= tol, q_ref <= tol)
        np.testing.assert_array_equal(p[small[0]], p_ref[small[0]])
        np.testing.assert_array_equal(q[small[1]], q_ref[small[1]])
        np.testing.assert_allclose(p, p_ref, rtol=0, atol=tol)
        np.testing.assert_allclose(q, q_ref, rtol=0, atol=tol)
    # the last windows (the shifted block, then N(0, I)) share no kernel mass: exact zeros as rebuilt,
    # where the plain updates hold rounding residues of either sign
    past = (head + np.arange(n)) % (2 * n)
    cur = (head + n + np.arange(n)) % (2 * n)
    assert np.all(q[past] == 0.0) and np.all(p[cur] == 0.0)
    assert np.any(q_raw[past] != 0.0) or np.any(p_raw[cur] != 0.0)
    assert np.abs(np.r_[q_raw[past], p_raw[cur]]).max() <= sum_tolerance(n, len(data) - 2 * n)

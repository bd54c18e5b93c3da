"""Flat-batch kernels of the native runtime (kernels/batch.py) against plain references."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ddnumba.kernels import batch as kb

I64_MAX = np.iinfo(np.int64).max
I64_MIN = np.iinfo(np.int64).min


def ref_consolidate(data, times, diffs, since=None):
    acc = {}
    for row, t, d in zip(data.tolist(), times.tolist(), diffs.tolist()):
        if since is not None:
            t = [max(t[0], since), t[1]]
        key = (tuple(row), tuple(t))
        acc[key] = acc.get(key, 0) + d
    items = sorted((k, v) for k, v in acc.items() if v != 0)
    w = data.shape[1]
    od = np.array([list(k[0]) for k, _ in items], np.int64).reshape(len(items), w)
    ot = np.array([list(k[1]) for k, _ in items], np.int64).reshape(len(items), 2)
    of = np.array([v for _, v in items], np.int64)
    return od, ot, of


def assert_batch(got, want):
    for g, w in zip(got, want):
        assert g.dtype == np.int64 and g.flags.c_contiguous
        np.testing.assert_array_equal(g, w)


def updates(n, w, dom, tdom, seed, wide=False):
    rng = np.random.default_rng(seed)
    if wide:
        data = rng.integers(-2**62, 2**62, (n, w))
        data[:, 0] = rng.integers(0, dom, n)
    else:
        data = rng.integers(0, dom, (n, w))
    times = np.stack([rng.integers(0, tdom, n), rng.integers(0, 4, n)], axis=1)
    diffs = rng.choice(np.array([-2, -1, 1, 1, 2]), n)
    return (np.ascontiguousarray(data, dtype=np.int64),
            np.ascontiguousarray(times, dtype=np.int64), diffs.astype(np.int64))


@pytest.mark.parametrize("n", [0, 1, 5, 32, 33, 200, 5000])
@pytest.mark.parametrize("w", [0, 1, 3])
@pytest.mark.parametrize("wide", [False, True])
def test_sort_consolidate_matches_reference(n, w, wide):
    data, times, diffs = updates(n, w, 7, 9, n * 10 + w, wide=wide and w > 0)
    got = kb.sort_consolidate(data, times, diffs)
    assert_batch(got, ref_consolidate(data, times, diffs))
    assert kb.is_consolidated(*got)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(-3, 3), st.integers(0, 3), st.integers(0, 2),
                          st.integers(-2, 2)), max_size=80))
def test_sort_consolidate_hypothesis(rows):
    data = np.array([[r[0]] for r in rows], np.int64).reshape(len(rows), 1)
    times = np.array([[r[1], r[2]] for r in rows], np.int64).reshape(len(rows), 2)
    diffs = np.array([r[3] for r in rows], np.int64)
    assert_batch(kb.sort_consolidate(data, times, diffs),
                 ref_consolidate(data, times, diffs))


def test_sort_consolidate_extreme_values_and_overflow():
    data = np.array([[I64_MIN], [I64_MAX], [0]] * 20, np.int64)
    times = np.zeros((60, 2), np.int64)
    times[:, 0] = np.tile([I64_MAX, I64_MIN, 3], 20)
    diffs = np.ones(60, np.int64)
    assert_batch(kb.sort_consolidate(data, times, diffs), ref_consolidate(data, times, diffs))
    big = np.array([I64_MAX, 1], np.int64)
    with pytest.raises(OverflowError):
        kb.sort_consolidate(np.zeros((2, 1), np.int64), np.zeros((2, 2), np.int64), big)
    many = np.full(40, I64_MAX // 2, np.int64)
    with pytest.raises(OverflowError):
        kb.sort_consolidate(np.zeros((40, 1), np.int64), np.zeros((40, 2), np.int64), many)
    # A sum that leaves int64 and comes back is exact, not an error.
    back = np.array([I64_MAX, 1, -1] + [0] * 0, np.int64)
    got = kb.sort_consolidate(np.zeros((3, 1), np.int64), np.zeros((3, 2), np.int64), back)
    assert got[2].tolist() == [I64_MAX]


@pytest.mark.parametrize("since", [I64_MIN, 0, 3, 100])
@pytest.mark.parametrize("sizes", [(0, 0), (0, 7), (9, 0), (40, 25), (500, 300)])
def test_merge_matches_reference(since, sizes):
    na, nb = sizes
    a = kb.sort_consolidate(*updates(na, 2, 5, 8, na + 1))
    b = kb.sort_consolidate(*updates(nb, 2, 5, 8, nb + 1000))
    got = kb.merge(a, b, since)
    cat = [np.concatenate([x, y]) for x, y in zip(a, b)]
    want = ref_consolidate(*cat, since=None if since == I64_MIN else since)
    assert_batch(got, want)
    assert kb.is_consolidated(*got)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 4), st.integers(0, 3),
                          st.integers(-2, 2)), max_size=40),
       st.lists(st.tuples(st.integers(0, 3), st.integers(0, 4), st.integers(0, 3),
                          st.integers(-2, 2)), max_size=40),
       st.integers(0, 5))
def test_merge_hypothesis(ra, rb, since):
    def mk(rows):
        d = np.array([[r[0]] for r in rows], np.int64).reshape(len(rows), 1)
        t = np.array([[r[1], r[2]] for r in rows], np.int64).reshape(len(rows), 2)
        f = np.array([r[3] for r in rows], np.int64)
        return kb.sort_consolidate(d, t, f)
    a, b = mk(ra), mk(rb)
    cat = [np.concatenate([x, y]) for x, y in zip(a, b)]
    assert_batch(kb.merge(a, b, since), ref_consolidate(*cat, since=since))


def test_merge_sums_to_zero_and_overflow():
    a = (np.array([[1]], np.int64), np.array([[2, 0]], np.int64), np.array([1], np.int64))
    b = (np.array([[1]], np.int64), np.array([[2, 0]], np.int64), np.array([-1], np.int64))
    got = kb.merge(a, b, I64_MIN)
    assert len(got[2]) == 0
    big = (np.array([[1]], np.int64), np.array([[2, 0]], np.int64),
           np.array([I64_MAX], np.int64))
    with pytest.raises(OverflowError):
        kb.merge(big, big, I64_MIN)


@pytest.mark.parametrize("kw", [1, 2])
def test_seek_matches_searchsorted(kw):
    rng = np.random.default_rng(kw)
    data, times, diffs = kb.sort_consolidate(*updates(3000, 3, 40, 5, 7))
    queries = np.unique(rng.integers(-2, 45, (200, kw)), axis=0).astype(np.int64)
    keys = [tuple(r) for r in data[:, :kw].tolist()]
    import bisect
    pos = 0
    for qi in range(len(queries)):
        q = tuple(queries[qi].tolist())
        lo = kb.seek(data, pos, queries, qi, kw, False)
        hi = kb.seek(data, lo, queries, qi, kw, True)
        assert lo == bisect.bisect_left(keys, q)
        assert hi == bisect.bisect_right(keys, q)
        pos = hi


@pytest.mark.parametrize("n", [0, 10, 127, 128, 129, 5000, 70000])
@pytest.mark.parametrize("kw", [1, 2])
def test_seek_fenced_matches_seek(n, kw):
    rng = np.random.default_rng(n + kw)
    data, _, _ = kb.sort_consolidate(*updates(n, 3, 60, 5, n))
    fnc = kb.fence(data)
    nf = 0 if len(data) < kb.FENCE_MIN else -(-len(data) // kb.FENCE_STEP)
    assert kb.fence_rows(len(data), fnc) == nf
    ntop = -(-nf // kb.FENCE_STEP) if nf >= 64 * kb.FENCE_STEP else 0
    assert len(fnc) == nf + ntop
    if nf:
        np.testing.assert_array_equal(fnc[:nf], data[::kb.FENCE_STEP])
        np.testing.assert_array_equal(fnc[nf:], data[::kb.FENCE_STEP * kb.FENCE_STEP][:ntop])
    queries = np.unique(rng.integers(-2, 65, (300, kw)), axis=0).astype(np.int64)
    for strict in (False, True):
        pos = 0
        for qi in range(len(queries)):
            want = kb.seek(data, pos, queries, qi, kw, strict)
            got = kb.seek_fenced(data, fnc, pos, queries, qi, kw, strict)
            assert got == want
            pos = want


@pytest.mark.parametrize("n", [0, 10, 200, 5000, 40000, 300000])
@pytest.mark.parametrize("nq", [1, 2, 7, 8, 300])
def test_key_ranges_matches_bisect(n, nq):
    import bisect
    rng = np.random.default_rng(n + nq)
    data, _, _ = kb.sort_consolidate(*updates(n, 2, 400, 5, n + 3))
    fnc = kb.fence(data)
    q = np.unique(rng.integers(-2, 405, (nq, 2)), axis=0).astype(np.int64)
    q[:, 1] = 0
    q = np.unique(q, axis=0)
    rows = np.arange(len(q), dtype=np.int64)
    lo = np.empty(len(q), np.int64)
    hi = np.empty(len(q), np.int64)
    kb.key_ranges(data, fnc, q, rows, 1, lo, hi)
    if n == 300000:     # sparse queries in a batch whose fence has a second level
        assert len(fnc) > kb.fence_rows(len(data), fnc) and 16 * len(q) < len(fnc)
    keys = data[:, 0].tolist()
    for i in range(len(q)):
        assert lo[i] == bisect.bisect_left(keys, q[i, 0])
        assert hi[i] == bisect.bisect_right(keys, q[i, 0])

"""Flat-batch kernels of the native runtime (kernels/batch.py) against plain references."""
from __future__ import annotations

import bisect

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
    assert kb.is_flat(*got)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(-3, 3), st.integers(0, 3), st.integers(0, 2),
                          st.integers(-2, 2)), max_size=80))
def test_sort_consolidate_hypothesis(rows):
    data = np.array([[r[0]] for r in rows], np.int64).reshape(len(rows), 1)
    times = np.array([[r[1], r[2]] for r in rows], np.int64).reshape(len(rows), 2)
    diffs = np.array([r[3] for r in rows], np.int64)
    assert_batch(kb.sort_consolidate(data, times, diffs),
                 ref_consolidate(data, times, diffs))


@pytest.mark.parametrize("n", [3, 40, 3000])
def test_sort_consolidate_of_a_sorted_batch(n):
    """A batch already flat comes back as it is (its own memory, nothing copied); a
    sorted batch that is not quite flat -- two equal updates, a zero diff, a time out
    of order under equal data -- is still consolidated."""
    data, times, diffs = updates(n, 2, 50, 9, n)
    flat = kb.sort_consolidate(data, times, diffs)
    assert len(flat[2]) >= 3
    got = kb.sort_consolidate(*flat)
    assert_batch(got, flat)
    for g, f in zip(got, flat):
        assert np.shares_memory(g, f)
    m = len(flat[2])
    i = m // 2
    d, t, f = (a.copy() for a in flat)
    # two equal updates next to each other (sorted, not consolidated)
    d[i], t[i] = d[i - 1], t[i - 1]
    assert_batch(kb.sort_consolidate(d, t, f), ref_consolidate(d, t, f))
    # a zero diff
    d, t, f = (a.copy() for a in flat)
    f[i] = 0
    got = kb.sort_consolidate(d, t, f)
    assert_batch(got, ref_consolidate(d, t, f))
    assert len(got[2]) == m - 1
    # equal data, times descending
    d, t, f = (a.copy() for a in flat)
    d[i] = d[i - 1]
    t[i - 1], t[i] = [5, 1], [5, 0]
    assert_batch(kb.sort_consolidate(d, t, f), ref_consolidate(d, t, f))


def test_flat_batches_are_checked_for_shape():
    # One time column (a capture's updates) or mismatched row counts: a flat batch's
    # kernels read two time columns per row, so these must be refused, not read past.
    d = np.array([[1], [1], [2]], np.int64)
    t1 = np.array([[0], [0], [1]], np.int64)
    f = np.ones(3, np.int64)
    for data, times, diffs in [(d, t1, f), (d, np.zeros((2, 2), np.int64), f),
                               (d[:2], np.zeros((3, 2), np.int64), f)]:
        with pytest.raises(ValueError, match="two columns"):
            kb.sort_consolidate(data, times, diffs)
    assert "is_consolidated" not in kb.__all__ and kb.is_flat(
        d, np.zeros((3, 2), np.int64) + np.arange(3)[:, None], f)
    assert not kb.is_flat(d, np.zeros((3, 2), np.int64), f)


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
    assert kb.is_flat(*got)


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


@pytest.mark.parametrize("seed", range(6))
def test_merge_long_groups_advanced_to_the_frontier(seed):
    """A run's updates of one data row at many times and iterations: advancing them to
    the frontier makes long blocks of one outer time to re-sort by iteration, then
    times after the frontier follow, already sorted."""
    rng = np.random.default_rng(seed)

    def mk(n, t_hi):
        d = rng.integers(0, 3, (n, 1)).astype(np.int64)
        t = np.stack([rng.integers(0, t_hi, n), rng.integers(-5, 40, n)], 1)
        return kb.sort_consolidate(d, t.astype(np.int64), rng.integers(-2, 3, n))

    a, b = mk(int(rng.integers(0, 900)), 400), mk(int(rng.integers(0, 900)), 400)
    for since in (I64_MIN, 0, 150, 399, 1000):
        got = kb.merge(a, b, since)
        cat = [np.concatenate([x, y]) for x, y in zip(a, b)]
        assert_batch(got, ref_consolidate(*cat, since=None if since == I64_MIN else since))
        assert kb.is_flat(*got)
        got = kb.merge(a, kb.empty_batch(1), since)     # one batch alone (compaction)
        assert_batch(got, ref_consolidate(*a, since=None if since == I64_MIN else since))


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
    pos = 0
    for qi in range(len(queries)):
        q = tuple(queries[qi].tolist())
        lo = kb.seek(data, pos, queries, qi, kw, False)
        hi = kb.seek(data, lo, queries, qi, kw, True)
        assert lo == bisect.bisect_left(keys, q)
        assert hi == bisect.bisect_right(keys, q)
        pos = hi


def expected_index(data):
    """The key index a batch should get, computed directly in Python integers:
    ``(ncol, shift, lo, table, off)``, or None."""
    n, w = data.shape
    if n < kb.INDEX_MIN or w == 0:
        return None
    c0 = [int(x) for x in data[:, 0]]
    table = sorted(set(c0))
    d = len(table)
    if d * kb.INDEX_ROWS >= n:
        ncol, col, cap = 1, c0, n // kb.INDEX_BUCKET_ROWS
        lo = c0[0]
        span = c0[-1] - lo
    elif w >= 2 and d <= kb.INDEX_TABLE_MAX:
        ncol, col, cap = 2, [int(x) for x in data[:, 1]], n // (kb.INDEX_BUCKET_ROWS * d)
        lo = min(col)
        span = max(col) - lo
    else:
        return None
    shift = 0
    while span >> shift >= cap:
        shift += 1
    per = (span >> shift) + 1
    if ncol == 1:
        buckets = [(x - lo) >> shift for x in col]
        r, table = per, []
    else:
        rank = {x: i for i, x in enumerate(table)}
        buckets = [rank[x] * per + ((y - lo) >> shift) for x, y in zip(c0, col)]
        r = d * per
    assert r <= n // kb.INDEX_BUCKET_ROWS and buckets == sorted(buckets)
    off = np.searchsorted(np.array(buckets, dtype=np.int64), np.arange(r + 1), "left")
    return ncol, shift, lo, table, off


def check_fence_layout(data, fnc):
    """The fence's two parts, every FENCE_STEP-th row and the key index, against a
    direct computation. Returns the index's ``(ncol, shift)`` (None: no index)."""
    n, w = data.shape
    nf = 0 if n < kb.FENCE_MIN else -(-n // kb.FENCE_STEP)
    assert kb.fence_rows(n, fnc) == nf
    if nf:
        np.testing.assert_array_equal(fnc[:nf], data[::kb.FENCE_STEP])
    ncol, shift, lo, table, off = kb.key_index(n, fnc)
    want = expected_index(data)
    if want is None:
        assert len(fnc) == nf and len(off) == 0
        return None
    assert (ncol, shift, lo) == want[:3]
    assert table.tolist() == list(want[3])
    np.testing.assert_array_equal(off, want[4])
    assert len(fnc) == nf + -(-(5 + len(table) + len(off)) // w)
    return int(ncol), int(shift)


# Key layouts of the seek tests: (first-column values, spread). Few first-column values
# (more than INDEX_ROWS rows each in the large batches) give a two-column index, many
# a one-column one; spread (a large multiplier) makes buckets span several values.
LAYOUTS = [(60, 1), (60, 1000003), (10000, 1), (10000, 1000003)]


@pytest.mark.parametrize("n", [0, 10, 127, 128, 129, 5000, 70000])
@pytest.mark.parametrize("kw", [1, 2, 3])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_seek_fenced_matches_seek(n, kw, layout):
    """Against galloping: no fence, a fence, and (70000 rows) every kind of key index."""
    dom, spread = layout
    rng = np.random.default_rng(n + kw)
    d, t, f = updates(n, 3, dom, 5, n)
    d[:, 1] = rng.integers(0, 60, n)
    d[:, :2] *= spread
    data, _, _ = kb.sort_consolidate(d, t, f)
    fnc = kb.fence(data)
    info = check_fence_layout(data, fnc)
    assert (info is not None) == (n == 70000)
    if n == 70000:
        assert info[0] == (2 if dom == 60 else 1)
        assert (info[1] > 0) == (spread > 1)
    queries = rng.integers(-2, min(dom, 60) + 2, (150, kw)) * spread
    if len(data):   # and 150 keys that hit
        queries = np.concatenate([queries, data[rng.integers(0, len(data), 150), :kw]])
    queries = np.unique(queries, axis=0).astype(np.int64)
    for strict in (False, True):
        pos = 0
        for qi in range(len(queries)):
            want = kb.seek(data, pos, queries, qi, kw, strict)
            got = kb.seek_fenced(data, fnc, pos, queries, qi, kw, strict)
            assert got == want
            pos = want
        # from a start past the answer, seek returns the start
        for qi in range(0, len(queries), 17):
            start = min(len(data), kb.seek(data, 0, queries, qi, kw, True) + 3)
            assert kb.seek_fenced(data, fnc, start, queries, qi, kw, strict) == \
                kb.seek(data, start, queries, qi, kw, strict)


def check_ranges(data, fnc, q, kw):
    lo = np.empty(len(q), np.int64)
    hi = np.empty(len(q), np.int64)
    kb.key_ranges(data, fnc, q, np.arange(len(q), dtype=np.int64), kw, lo, hi)
    keys = [tuple(r) for r in data[:, :kw].tolist()]
    for i in range(len(q)):
        k = tuple(q[i, :kw].tolist())
        assert (lo[i], hi[i]) == (bisect.bisect_left(keys, k), bisect.bisect_right(keys, k))


def test_key_index_extreme_keys():
    """Spans at the ends of int64, and columns spanning all of it."""
    n = 30000
    rng = np.random.default_rng(3)
    buckets = n // kb.INDEX_BUCKET_ROWS     # at most
    cases = []
    for lo_key in (-2**63, -20000, 2**63 - 40000):
        keys = np.sort(rng.integers(0, buckets, n)).astype(np.int64) + np.int64(lo_key)
        cases.append((np.stack([keys, np.arange(n, dtype=np.int64)], axis=1), (1, 0)))
    wide = cases[1][0].copy()
    wide[0, 0] = -2**63
    wide[-1, 0] = 2**63 - 1
    top = buckets.bit_length() - 1      # 2**top <= buckets < 2**(top + 1)
    cases.append((wide, (1, 64 - top)))     # span 2**64 - 1: 2**top buckets
    two = np.stack([np.repeat(np.arange(3, dtype=np.int64), n // 3),
                    rng.integers(-2**63, 2**63 - 1, n, dtype=np.int64)], axis=1)
    two = two[np.lexsort((two[:, 1], two[:, 0]))]
    two[0, 1] = -2**63
    two[-1, 1] = 2**63 - 1
    top = (buckets // 3).bit_length() - 1
    cases.append((two, (2, 64 - top)))      # 3 values x 2**top buckets
    for batch, want in cases:
        fnc = kb.fence(batch)
        assert check_fence_layout(batch, fnc) == want
        q1 = np.unique(np.concatenate([batch[::7, 0], [2**63 - 1, -2**63]])).astype(
            np.int64).reshape(-1, 1)
        check_ranges(batch, fnc, q1, 1)
        q2 = np.unique(np.concatenate([batch[::5, :2], [[1, 0], [2**63 - 1, -2**63]]]),
                       axis=0).astype(np.int64)
        check_ranges(batch, fnc, q2, 2)


@pytest.mark.parametrize("n", [0, 10, 200, 5000, 40000, 300000])
@pytest.mark.parametrize("nq", [1, 2, 7, 8, 300])
@pytest.mark.parametrize("kw", [1, 2])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_key_ranges_matches_bisect(n, nq, kw, layout):
    """Against bisection, for keys of one and two columns: galloping and lock-step
    through the fence (smaller batches), every kind of key index (40000 and 300000
    rows)."""
    dom, spread = layout
    rng = np.random.default_rng(n + nq)
    d, t, f = updates(n, 2, dom, 5, n + 3)
    d[:, 1] = rng.integers(0, 400, n)
    d[:, :2] *= spread
    data, _, _ = kb.sort_consolidate(d, t, f)
    fnc = kb.fence(data)
    info = check_fence_layout(data, fnc)
    assert (info is not None) == (n >= 40000)
    assert info is None or info[0] == (2 if dom == 60 else 1)
    q = rng.integers(-2, min(dom, 400) + 2, (nq, 2)).astype(np.int64) * spread
    if len(data):   # half the queries hit a row
        q[::2] = data[rng.integers(0, len(data), len(q[::2])), :2]
    if kw == 1:     # queries are distinct keys
        q[:, 1] = 0
    check_ranges(data, fnc, np.unique(q, axis=0), kw)


@pytest.mark.parametrize("since", [2, 3, 5, 6])
def test_merge_advancing_one_outer_time_keeps_order_or_closes(since):
    """``merge`` skips re-sorting a data row's times when all its advanced times had
    one outer time; the cases where it may not skip: advanced times of two outer
    times, the same time in both inputs, a time left in place at ``since`` itself."""
    def mk(rows):
        d = np.array([[r[0]] for r in rows], np.int64)
        t = np.array([[r[1], r[2]] for r in rows], np.int64)
        f = np.array([r[3] for r in rows], np.int64)
        return kb.sort_consolidate(d, t, f)
    a = mk([(0, 2, 1, 1), (0, 2, 4, -1), (0, 2, 7, 2),       # one outer time
            (1, 2, 3, 1), (1, 4, 1, 1), (1, 6, 0, 1),         # two advanced outer times
            (2, 2, 5, 1), (2, 5, 2, 1), (2, 5, 9, -1),        # in place at 5
            (3, 1, 1, 1), (3, 1, 8, 1)])
    b = mk([(0, 2, 4, 1), (0, 2, 5, 1),                       # same time as a: cancels
            (1, 2, 3, -1), (1, 3, 0, 1),
            (2, 2, 2, -1), (2, 6, 1, 1),
            (3, 1, 8, 1), (3, 2, 0, -1)])
    cat = [np.concatenate([x, y]) for x, y in zip(a, b)]
    got = kb.merge(a, b, since)
    assert_batch(got, ref_consolidate(*cat, since=since))
    assert kb.is_flat(*got)
    for x in (a, b):
        alone = kb.merge(x, kb.empty_batch(1), since)
        assert_batch(alone, ref_consolidate(*x, since=since))
        assert kb.is_flat(*alone)


@pytest.mark.parametrize("seed", range(8))
def test_merge_rows_of_one_update_mixed_with_longer_rows(seed):
    """``merge`` copies a row of one input with a single update on a path of its own;
    consolidated traces are mostly such rows. Random interleavings of single-update
    rows (the first and last of each input among them), rows with several updates,
    rows in both inputs and rows whose sum cancels, at frontiers below, inside and
    past their times, against the reference."""
    rng = np.random.default_rng(seed)

    def mk(n, w):
        keys = np.sort(rng.integers(0, 4 * n + 1, n))
        reps = np.where(rng.random(n) < 0.2, rng.integers(2, 5, n), 1)
        reps[-1] = 1 + seed % 3       # the last row: one update, or several
        d = np.repeat(keys, reps)
        data = np.stack([d // 7, d % 7] + [d % 3] * (w - 2), 1)[:, :w] if w > 1 else d[:, None]
        t = np.stack([rng.integers(0, 20, d.size), rng.integers(0, 3, d.size)], 1)
        # the last updates at fixed distinct times, so that a last row with several
        # updates keeps them through consolidation
        t[-3:] = [[1, 0], [2, 1], [25, 0]][-min(3, d.size):]
        return kb.sort_consolidate(np.ascontiguousarray(data, dtype=np.int64),
                                   t.astype(np.int64), rng.choice([-1, 1, 2], d.size))

    w = int(rng.integers(1, 4))
    a, b = mk(int(rng.integers(1, 400)), w), mk(int(rng.integers(1, 400)), w)
    # rows of one update: most of them
    _, counts = np.unique(a[0], axis=0, return_counts=True)
    assert (counts == 1).mean() > 0.5
    for since in (I64_MIN, 0, 10, 19, 20, 50):
        ref_since = None if since == I64_MIN else since
        cat = [np.concatenate([x, y]) for x, y in zip(a, b)]
        for x, y in ((a, b), (b, a)):
            got = kb.merge(x, y, since)
            assert_batch(got, ref_consolidate(*cat, since=ref_since))
            assert kb.is_flat(*got)
        alone = kb.merge(a, kb.empty_batch(w), since)
        assert_batch(alone, ref_consolidate(*a, since=ref_since))


def _dead_inputs(n, seed, wide=False):
    data, times, diffs = updates(n, 2, 1000, 10, seed, wide=wide)
    return data, times, diffs, (data.copy(), times.copy(), diffs.copy())


def test_consolidate_dead_gives_back_its_inputs_and_matches_sort_consolidate():
    """A large batch with a one-word layout: the same flat batch as sort_consolidate,
    and the inputs' memory given back (their whole 2 MiB units read as zeros)."""
    n = kb.DEAD_MIN + 12_345
    data, times, diffs, (d0, t0, f0) = _dead_inputs(n, 1)
    got = kb.consolidate_dead(data, times, diffs)
    want = kb.sort_consolidate(d0, t0, f0)
    assert_batch(got, want)
    assert len(want[2]) < n          # some updates met and summed
    for a in (data, times, diffs):      # all but the partial 2 MiB units at the ends
        assert (a == 0).mean() >= 1 - 4 * 2**20 / a.nbytes
    assert (d0 != 0).mean() > 0.9    # (the copies were not touched)


@pytest.mark.parametrize("case", ["small", "wide", "flat"])
def test_consolidate_dead_keeps_inputs_it_cannot_give_back(case):
    """Fewer than DEAD_MIN updates, a layout of several words (the rows are gathered
    after the sort) or a batch already flat (returned as it is): the inputs stay."""
    n = 5_000 if case == "small" else kb.DEAD_MIN + 7
    data, times, diffs, (d0, t0, f0) = _dead_inputs(n, 2, wide=case == "wide")
    if case == "flat":
        data, times, diffs = kb.sort_consolidate(data, times, diffs)
        d0, t0, f0 = data.copy(), times.copy(), diffs.copy()
    got = kb.consolidate_dead(data, times, diffs)
    assert_batch(got, kb.sort_consolidate(d0, t0, f0))
    for a, b in ((data, d0), (times, t0), (diffs, f0)):
        np.testing.assert_array_equal(a, b)
    if case == "small":
        assert_batch(got, ref_consolidate(d0, t0, f0))


def test_consolidate_dead_overflow():
    n = kb.DEAD_MIN + 1
    data = np.zeros((n, 1), np.int64)
    times = np.zeros((n, 2), np.int64)
    diffs = np.full(n, 2**62, np.int64)
    with pytest.raises(OverflowError, match="consolidate"):
        kb.consolidate_dead(data, times, diffs)

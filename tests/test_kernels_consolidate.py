"""Tests for kernels/sort.py and kernels/consolidate.py against reference.py."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numba import njit

import reference as ref
from ddnumba.kernels import consolidate as C
from ddnumba.kernels import sort as S
from reference import I64_MAX, I64_MIN

SETTINGS = settings(max_examples=150, deadline=None)

# Value strategies per column: few distinct values (ties and runs), the int64 extremes
# (range and overflow edge cases), arbitrary int64 (wide packed keys).
EXTREMES = [I64_MIN, I64_MIN + 1, -1, 0, 1, I64_MAX - 1, I64_MAX]
COLUMN_VALUES = [
    st.integers(-2, 2),
    st.sampled_from(EXTREMES),
    st.integers(I64_MIN, I64_MAX),
    st.integers(0, 2**40),
]


@st.composite
def row_lists(draw, n, k):
    cols = [draw(st.sampled_from(COLUMN_VALUES)) for _ in range(k)]
    return draw(st.lists(st.tuples(*cols), min_size=n, max_size=n))


@st.composite
def matrices(draw, max_rows=40, max_cols=3):
    n = draw(st.integers(0, max_rows))
    k = draw(st.integers(0, max_cols))
    return ref.matrix(draw(row_lists(n, k)), k)


def _random_matrix(rng, n, k, mode):
    """Larger inputs for the bucket/LSD paths, from NumPy's generator (seeded)."""
    if mode == "dense":
        return rng.integers(0, 1000, (n, k))
    if mode == "full":
        return rng.integers(I64_MIN, I64_MAX, (n, k), dtype=np.int64, endpoint=True)
    if mode == "skewed":  # most rows equal, a few spread over the whole range
        a = np.zeros((n, k), np.int64)
        hit = rng.random(n) < 0.05
        a[hit] = rng.integers(I64_MIN, I64_MAX, (int(hit.sum()), k), dtype=np.int64)
        return a
    if mode == "mixed":  # 20/45/40-bit columns: one packed word, but not with the index
        widths = [20, 45, 40][:k]
        return np.stack([rng.integers(-(2**(w - 1)), 2**(w - 1), n) for w in widths], 1) \
            if k else np.zeros((n, 0), np.int64)
    raise AssertionError(mode)


# --- argsort_rows -------------------------------------------------------------------

@SETTINGS
@given(matrices())
def test_argsort_rows_matches_stable_reference(a):
    perm = S.argsort_rows(a)
    assert perm.dtype == np.int64 and perm.shape == (a.shape[0],)
    assert perm.tolist() == ref.argsort_rows(ref.rows_of(a))


@SETTINGS
@given(matrices(max_rows=60), st.sampled_from(["auto", "lsd"]), st.sampled_from([14, 2, 0]))
def test_every_sort_path_matches_reference(a, method, bucket_log):
    # bucket_log 0/2 forces many buckets (and the retry when a bucket is too big to
    # pack its positions) on small inputs; "lsd" forces the LSD fallback.
    b = np.zeros((a.shape[0], 0), np.int64)
    perm = S._argsort2(a, b, method=method, bucket_log=bucket_log)[0]
    assert perm.tolist() == ref.argsort_rows(ref.rows_of(a))


@SETTINGS
@given(matrices(max_cols=2), st.data())
def test_argsort_rows2_is_argsort_of_concatenation(a, data):
    n = a.shape[0]
    kb = data.draw(st.integers(0, 2))
    b = ref.matrix(data.draw(row_lists(n, kb)), kb)
    expected = ref.argsort_rows([x + y for x, y in zip(ref.rows_of(a), ref.rows_of(b))]) \
        if n else []
    assert S.argsort_rows2(a, b).tolist() == expected


@pytest.mark.parametrize("mode", ["dense", "full", "skewed", "mixed"])
@pytest.mark.parametrize("k", [1, 2, 3])
def test_argsort_rows_larger_inputs_against_lexsort(mode, k):
    # 40 000 rows use several buckets by default; np.lexsort is the (slow) reference.
    rng = np.random.default_rng(k * 7 + len(mode))
    a = np.ascontiguousarray(_random_matrix(rng, 40_000, k, mode))
    expected = np.lexsort(a.T[::-1])
    assert np.array_equal(S.argsort_rows(a), expected)
    assert np.array_equal(S._argsort2(a, np.zeros((len(a), 0), np.int64), method="lsd")[0],
                          expected)


def test_argsort_rows_edge_shapes():
    assert S.argsort_rows(np.zeros((0, 2), np.int64)).tolist() == []
    assert S.argsort_rows(np.zeros((5, 0), np.int64)).tolist() == [0, 1, 2, 3, 4]
    assert S.argsort_rows(np.full((4, 3), -7)).tolist() == [0, 1, 2, 3]  # all equal
    assert S.argsort_rows(np.array([[9, 9]])).tolist() == [0]
    assert S.argsort_rows(np.array([3, 1, 2, 1])).tolist() == [1, 3, 2, 0]  # 1-D: one column
    ext = np.array([[I64_MAX], [I64_MIN], [0], [I64_MIN], [-1]])
    assert S.argsort_rows(ext).tolist() == [1, 3, 4, 2, 0]


def test_sort_keys_direct_paths():
    """The word sorter itself, with a payload, on every path (auto, retry, LSD)."""
    rng = np.random.default_rng(5)
    for nbits, n in [(0, 10), (1, 100), (12, 5000), (64, 300), (64, 20_000), (33, 1)]:
        hi = 2**nbits - 1
        keys = rng.integers(0, hi, n, dtype=np.uint64, endpoint=True) if nbits else \
            np.zeros(n, np.uint64)
        keys[: n // 3] = keys[0]  # a heavy duplicate
        payload = rng.integers(-50, 50, n)
        order = np.argsort(keys, kind="stable")
        for method in ("auto", "lsd"):
            for bucket_log in (14, 1):
                sk, sp = S._sort_keys(keys, payload.copy(), nbits, method=method,
                                      bucket_log=bucket_log)
                assert np.array_equal(sk, keys[order])
                assert np.array_equal(sp, payload[order])


# --- is_sorted_rows and row_cmp -------------------------------------------------------

@SETTINGS
@given(matrices(), st.booleans())
def test_is_sorted_rows_matches_reference(a, strict):
    rows = ref.rows_of(a)
    assert S.is_sorted_rows(a, strict=strict) == ref.is_sorted_rows(rows, strict)
    srt = a[np.array(ref.argsort_rows(rows), dtype=np.int64)] if len(rows) else a
    assert S.is_sorted_rows(srt)


@njit
def _cmp_all(a, b):
    out = np.empty((a.shape[0], b.shape[0]), np.int64)
    for i in range(a.shape[0]):
        for j in range(b.shape[0]):
            out[i, j] = S.row_cmp(a, i, b, j)
    return out


def test_row_cmp_is_callable_from_other_kernels():
    a = np.array([[0, 1], [0, 2], [I64_MIN, I64_MAX]], dtype=np.int64)
    b = np.array([[0, 2], [I64_MIN, I64_MAX]], dtype=np.int64)
    rows_a, rows_b = ref.rows_of(a), ref.rows_of(b)
    expected = [[(x > y) - (x < y) for y in rows_b] for x in rows_a]
    assert _cmp_all(a, b).tolist() == expected


# --- consolidate ----------------------------------------------------------------------

@st.composite
def updates(draw, max_rows=40):
    n = draw(st.integers(0, max_rows))
    a = draw(st.integers(0, 3))
    d = draw(st.integers(1, 3))
    data = draw(row_lists(n, a))
    # Times share a small pool so equal (data, time) pairs are common.
    pool = draw(row_lists(draw(st.integers(1, 4)), d))
    times = [draw(st.sampled_from(pool)) for _ in range(n)]
    if a and n:  # repeat some data rows too
        data = [draw(st.sampled_from(data[: max(1, n // 3)])) for _ in range(n)]
    diffs = draw(st.lists(st.one_of(st.integers(-3, 3), st.integers(-(2**40), 2**40)),
                          min_size=n, max_size=n))
    return ref.matrix(data, a), ref.matrix(times, d), np.array(diffs, dtype=np.int64)


def _check_against_reference(out, data, times, diffs):
    od, ot, ox = out
    for arr, width in ((od, data.shape[1]), (ot, times.shape[1])):
        assert arr.dtype == np.int64 and arr.flags.c_contiguous and arr.shape[1] == width
    assert ox.dtype == np.int64 and ox.flags.c_contiguous
    assert len(od) == len(ot) == len(ox)
    # Invariant first, independently of the reference.
    assert ref.is_consolidated(ref.rows_of(od), ref.rows_of(ot), ox.tolist())
    assert C.is_consolidated(od, ot, ox)
    expected = ref.consolidate(ref.rows_of(data), ref.rows_of(times), diffs.tolist())
    assert list(zip(ref.rows_of(od), ref.rows_of(ot), ox.tolist())) == expected


@SETTINGS
@given(updates())
def test_consolidate_matches_reference(u):
    data, times, diffs = u
    keep = (data.copy(), times.copy(), diffs.copy())
    out = C.consolidate(data, times, diffs)
    _check_against_reference(out, data, times, diffs)
    for x, y in zip((data, times, diffs), keep):
        assert np.array_equal(x, y)  # inputs untouched
    # Idempotent, and shuffling the input does not change the result.
    again = C.consolidate(*out)
    assert all(np.array_equal(x, y) for x, y in zip(again, out))
    perm = np.random.default_rng(len(diffs)).permutation(len(diffs))
    shuffled = C.consolidate(data[perm], times[perm], diffs[perm])
    assert all(np.array_equal(x, y) for x, y in zip(shuffled, out))


@SETTINGS
@given(updates())
def test_consolidate_sorted_matches_reference(u):
    data, times, diffs = u
    order = np.array(ref.argsort_rows([x + y for x, y in zip(ref.rows_of(data),
                                                            ref.rows_of(times))]),
                     dtype=np.int64)
    data, times, diffs = data[order], times[order], diffs[order]
    _check_against_reference(C.consolidate_sorted(data, times, diffs), data, times, diffs)


def test_consolidate_sorted_rejects_unsorted_input():
    with pytest.raises(ValueError, match="not sorted"):
        C.consolidate_sorted(np.array([[2], [1]]), np.zeros((2, 1), np.int64), [1, 1])


@pytest.mark.parametrize("mode", ["dense", "full", "skewed", "mixed"])
def test_consolidate_larger_inputs(mode):
    # Both the one-word path (decode from sorted keys) and the several-word path
    # ("full": 2 x 64 + 64 bits) on enough rows to use several buckets.
    rng = np.random.default_rng(len(mode))
    n = 30_000
    data = np.ascontiguousarray(_random_matrix(rng, n, 2, mode))
    times = np.ascontiguousarray(_random_matrix(rng, n, 1, mode))
    if mode == "dense":  # many duplicate (data, time) pairs
        data //= 30
        times %= 7
    diffs = rng.choice(np.array([-2, -1, 1, 2]), n)
    _check_against_reference(C.consolidate(data, times, diffs), data, times, diffs)


def test_consolidate_edge_cases():
    # Empty, one row, all rows equal (cancel to nothing / sum), zero diffs dropped.
    out = C.consolidate(np.zeros((0, 2), np.int64), np.zeros((0, 1), np.int64), [])
    assert [x.shape for x in out] == [(0, 2), (0, 1), (0,)]
    out = C.consolidate([[5]], [[1, 2]], [3])
    assert [x.tolist() for x in out] == [[[5]], [[1, 2]], [3]]
    out = C.consolidate([[5]] * 4, [[1]] * 4, [1, -1, 2, -2])
    assert [x.shape for x in out] == [(0, 1), (0, 1), (0,)]
    out = C.consolidate([[5]] * 3, [[1]] * 3, [1, 1, 1])
    assert [x.tolist() for x in out] == [[[5]], [[1]], [3]]
    out = C.consolidate(np.zeros((3, 0), np.int64), [[2], [1], [2]], [1, 0, 1])
    assert [x.tolist() for x in out] == [[[]], [[2]], [2]]
    out = C.consolidate([[1], [2]], [[0], [0]], [0, 0])
    assert out[2].shape == (0,)


@pytest.mark.parametrize("wide", [False, True])
@pytest.mark.parametrize("presorted", [False, True])
def test_diff_overflow_raises_and_intermediate_overflow_does_not(wide, presorted):
    fn = C.consolidate_sorted if presorted else C.consolidate
    # wide=True takes the several-word path: the data spans 2 x 64 bits.
    data = np.array([[I64_MIN, I64_MIN], [I64_MIN, I64_MIN], [I64_MAX, I64_MAX]]) if wide \
        else np.array([[1, 1], [1, 1], [2, 2]])
    times = np.zeros((3, 1), np.int64)
    with pytest.raises(OverflowError):
        fn(data, times, [I64_MAX, 1, 5])
    with pytest.raises(OverflowError):
        fn(data, times, [I64_MIN, -1, 5])
    # The exact sum is in range: an overflowing partial sum must not raise.
    big = np.array([[1], [1], [1]])
    out = fn(big, np.zeros((3, 1), np.int64), [I64_MAX, 1, -1])
    assert out[2].tolist() == [I64_MAX]
    out = fn(big, np.zeros((3, 1), np.int64), [I64_MIN, -5, 5])
    assert out[2].tolist() == [I64_MIN]
    out = fn(data, times, [I64_MAX, I64_MIN, 5])
    assert out[2].tolist() == [-1, 5]


@SETTINGS
@given(updates())
def test_is_consolidated_matches_reference(u):
    data, times, diffs = u
    assert C.is_consolidated(data, times, diffs) == ref.is_consolidated(
        ref.rows_of(data), ref.rows_of(times), diffs.tolist())


@SETTINGS
@given(matrices(max_cols=3), st.data())
def test_consolidate_data_matches_reference(data, draw):
    n = data.shape[0]
    diffs = np.array(draw.draw(st.lists(st.integers(-2, 2), min_size=n, max_size=n)),
                     dtype=np.int64)
    od, ox = C.consolidate_data(data, diffs)
    rows = ref.rows_of(data) if data.shape[1] else [()] * n
    expected = ref.consolidate(rows, [()] * n, diffs.tolist())
    assert od.shape == (len(expected), data.shape[1])
    assert [(r, x) for r, x in zip(ref.rows_of(od) if data.shape[1] else [()] * len(od),
                                   ox.tolist())] == [(r, x) for r, _, x in expected]


def test_inputs_are_normalised_or_rejected():
    out = C.consolidate(np.array([[2], [1]], np.int32), np.array([[0], [0]], np.uint16),
                        np.array([1, 1], np.int8))
    assert [x.tolist() for x in out] == [[[1], [2]], [[0], [0]], [1, 1]]
    ro = np.array([[3], [3]], dtype=np.int64)
    ro.setflags(write=False)
    assert C.consolidate(ro, ro, np.array([1, 1]))[2].tolist() == [2]
    with pytest.raises(ValueError, match="diffs"):
        C.consolidate([[1]], [[0]], [1.5])
    with pytest.raises(ValueError, match="times"):
        C.consolidate([[1], [2]], [[0]], [1, 1])
    with pytest.raises(ValueError, match="diffs"):
        C.consolidate([[1], [2]], [[0], [0]], [1])
    with pytest.raises(ValueError, match="cols"):
        S.argsort_rows(np.array([[2**63]], dtype=np.uint64))
    with pytest.raises(ValueError, match="cols"):
        S.argsort_rows(np.zeros((2, 2, 2), np.int64))


def _accumulate_reference(data, times, diffs, t):
    """The collection at ``t``: per data row, the sum of its diffs at times <= t."""
    acc = {}
    for r, s, x in zip(ref.rows_of(data) if data.shape[1] else [()] * len(diffs),
                       ref.rows_of(times), diffs.tolist()):
        if all(a <= b for a, b in zip(s, t)):
            acc[r] = acc.get(r, 0) + x
    return sorted((r, x) for r, x in acc.items() if x)


@SETTINGS
@given(updates(), st.data())
def test_accumulate_consolidated_matches_reference(u, draw):
    data, times, diffs = C.consolidate(*u)
    d = times.shape[1]
    pool = ref.rows_of(times) + [tuple([0] * d), tuple([I64_MAX] * d),
                                 tuple([I64_MIN] * d)]
    t = np.array(draw.draw(st.sampled_from(pool)), np.int64)
    rows, counts = C.accumulate_consolidated(data, times, diffs, t)
    assert rows.dtype == counts.dtype == np.int64 and rows.flags.c_contiguous
    assert rows.shape == (len(counts), data.shape[1])
    got = list(zip(ref.rows_of(rows) if data.shape[1] else [()] * len(counts),
                   counts.tolist()))
    assert got == _accumulate_reference(data, times, diffs, t)


def test_accumulate_consolidated_larger_and_edges():
    rng = np.random.default_rng(3)
    n = 20_000
    data = rng.integers(0, 500, (n, 2))
    times = rng.integers(0, 50, (n, 2))
    diffs = rng.choice(np.array([-2, -1, 1, 2]), n)
    data, times, diffs = C.consolidate(data, times, diffs)
    for t in ([0, 0], [10, 40], [49, 49], [25, 3]):
        rows, counts = C.accumulate_consolidated(data, times, diffs, t)
        want = {}
        keep = (times <= np.array(t)).all(axis=1)
        for r, x in zip(map(tuple, data[keep].tolist()), diffs[keep].tolist()):
            want[r] = want.get(r, 0) + x
        assert dict(zip(map(tuple, rows.tolist()), counts.tolist())) == {
            r: x for r, x in want.items() if x}
        assert len(rows) == len({r for r, x in want.items() if x})
    empty = C.accumulate_consolidated(np.zeros((0, 3), np.int64),
                                      np.zeros((0, 1), np.int64), [], [5])
    assert [x.shape for x in empty] == [(0, 3), (0,)]
    with pytest.raises(ValueError, match="coordinate"):
        C.accumulate_consolidated([[1]], [[0, 0]], [1], [3])


def test_accumulate_consolidated_overflow():
    # one row at two times: its sum at a time after both overflows; at a time after
    # the first only it does not; a partial sum that wraps and comes back is fine
    data = np.array([[7], [7], [9]])
    times = np.array([[0], [1], [0]])
    with pytest.raises(OverflowError):
        C.accumulate_consolidated(data, times, [I64_MAX, 1, 1], [1])
    rows, counts = C.accumulate_consolidated(data, times, [I64_MAX, 1, 1], [0])
    assert rows.tolist() == [[7], [9]] and counts.tolist() == [I64_MAX, 1]
    data3 = np.array([[7], [7], [7]])
    times3 = np.array([[0], [1], [2]])
    rows, counts = C.accumulate_consolidated(data3, times3, [I64_MAX, 1, -1], [2])
    assert counts.tolist() == [I64_MAX]

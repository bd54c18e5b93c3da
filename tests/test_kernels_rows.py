"""Checked int64 arithmetic and row comparisons against Python's exact integers."""
import random

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from ddnumba.kernels.rows import (add_checked, leaf, move_rows, mul_checked, prefetch_row,
                                  row_cmp, row_eq, row_le)

LO, HI = -2**63, 2**63 - 1
EDGE = [0, 1, -1, 2, -2, 3, -3, LO, HI, LO + 1, HI - 1, 2**31, -2**31, 2**32, -2**32,
        3074457345618258602, -3074457345618258603, 3037000499, 3037000500, -3037000500]


def _check_pair(x, y):
    p, over = mul_checked(x, y)
    assert over == (not LO <= x * y <= HI), (x, y)
    if not over:
        assert p == x * y
    s, over = add_checked(x, y)
    assert over == (not LO <= x + y <= HI), (x, y)
    if not over:
        assert s == x + y


def test_checked_arithmetic_edge_values():
    rnd = random.Random(1)
    vals = EDGE + [rnd.randint(LO, HI) >> rnd.randint(0, 63) for _ in range(120)]
    for x in vals:
        for y in vals:
            _check_pair(x, y)


@settings(max_examples=300, deadline=None)
@given(st.integers(LO, HI), st.integers(LO, HI))
def test_checked_arithmetic_random(x, y):
    _check_pair(x, y)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(-3, 3), min_size=0, max_size=3), st.data())
def test_row_comparisons(a, data):
    b = data.draw(st.lists(st.integers(-3, 3), min_size=len(a), max_size=len(a)))
    A = np.array([a], np.int64).reshape(1, len(a))
    B = np.array([b], np.int64).reshape(1, len(b))
    assert row_cmp(A, 0, B, 0) == (a > b) - (a < b)
    assert row_eq(A, 0, B, 0) == (a == b)
    assert row_le(A, 0, B, 0) == all(x <= y for x, y in zip(a, b))


@leaf
def _sum_with_prefetch(a, idx, out):
    s = 0
    for i in range(idx.shape[0]):
        prefetch_row(a, idx[i] + 3)               # a row ahead (may be past the end)
        prefetch_row(a, np.int64(1) << 50)        # nowhere near the array: no fault
        s += a[idx[i], 1]
    out[0] = s


def test_prefetch_row_is_only_a_hint():
    """A prefetch changes no result, and addresses outside the array never fault (the
    address is computed, not read)."""
    rng = np.random.default_rng(0)
    a = rng.integers(-50, 50, (1000, 3))
    idx = rng.integers(0, 1000, 500)
    out = np.zeros(1, np.int64)
    _sum_with_prefetch(a, idx, out)
    assert out[0] == a[idx, 1].sum()


def test_list_item_borrows_in_a_leaf_and_takes_a_reference_elsewhere():
    """``rows.list_item`` reads a typed list's array: in a leaf (no reference
    counting) without taking a reference, in a regular kernel with one, which that
    kernel drops. Either way the item's reference count is what it was, after
    thousands of reads, and the data read is the item's."""
    from numba import njit
    from numba.typed import List
    from ddnumba.kernels.rows import list_item

    @njit(_nrt=False, no_cpython_wrapper=True)
    def leaf_sum(bufs, x):
        b = list_item(bufs, x)
        s = 0
        for i in range(b.shape[0]):
            s += b[i, 0]
        return s

    @njit
    def via_leaf(bufs, x):
        return leaf_sum(bufs, x)

    @njit
    def last(bufs, x):
        b = list_item(bufs, x)
        return b[b.shape[0] - 1, 0]

    @njit
    def get(bufs, x):
        return list_item(bufs, x)

    @njit
    def make():
        out = List()
        out.append(np.arange(15).reshape(5, 3) * 1)
        out.append(np.arange(12).reshape(4, 3) * 2)
        return out

    bufs = make()
    held = get(bufs, 1)                    # a reference of our own, to watch the count
    before = held.base.refcount
    assert before == 2                     # the list's and ours
    for _ in range(2000):
        assert via_leaf(bufs, 1) == 36     # 2 * (0 + 3 + 6 + 9)
        assert last(bufs, 1) == 18
    assert held.base.refcount == before
    assert via_leaf(bufs, 0) == 30 and last(bufs, 0) == 12
    np.testing.assert_array_equal(get(bufs, 1), np.arange(12).reshape(4, 3) * 2)


@leaf
def _move(a, dst, src, n):
    move_rows(a, dst, src, n)


@pytest.mark.parametrize("width", [1, 3, 5])
def test_move_rows_is_a_memmove_of_whole_rows(width):
    """Overlapping moves up and down, empty ones and whole-array ones give what NumPy's
    copy through a temporary gives; rows outside the destination are left alone."""
    rng = np.random.default_rng(width)
    for _ in range(200):
        a = rng.integers(-9, 9, (40, width))
        n = int(rng.integers(0, 41))
        src = int(rng.integers(0, 41 - n))
        dst = int(rng.integers(0, 41 - n))
        want = a.copy()
        want[dst:dst + n] = a[src:src + n].copy()
        _move(a, dst, src, n)
        assert np.array_equal(a, want), (n, src, dst)

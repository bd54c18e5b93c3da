"""Checked int64 arithmetic and row comparisons against Python's exact integers."""
import random

import numpy as np
from hypothesis import given, settings, strategies as st

from ddnumba.kernels.rows import (add_checked, leaf, mul_checked, prefetch_row, row_cmp,
                                  row_eq, row_le)

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

"""Tests for kernels/lattice.py against the plain-Python references in reference.py."""
import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from ddnumba.kernels import lattice as L
import reference as ref
from reference import I64_MAX, I64_MIN

SETTINGS = settings(max_examples=100, deadline=None)

dims = st.integers(1, 3)
# Small values make comparable pairs, ties and duplicates common; the wide strategy
# checks that nothing overflows at the ends of the int64 range.
small = st.integers(-3, 3)
wide = st.one_of(st.integers(-3, 3), st.sampled_from([I64_MIN, I64_MIN + 1, I64_MAX - 1, I64_MAX]),
                 st.integers(I64_MIN, I64_MAX))


@st.composite
def time_rows(draw, d, min_rows=0, max_rows=12):
    vals = draw(st.sampled_from([small, wide]))
    return draw(st.lists(st.tuples(*[vals] * d), min_size=min_rows, max_size=max_rows))


@st.composite
def times_and_frontier(draw, max_rows=12, max_frontier=4):
    d = draw(dims)
    ts = draw(time_rows(d, 0, max_rows))
    fr = draw(time_rows(d, 0, max_frontier))
    return d, ts, ref.antichain(fr)


def M(rows, d):
    return ref.matrix(rows, d)


# --- must-show: the roadmap's compaction examples ----------------------------------

ROADMAP_TIMES = [(0, 0), (0, 1), (1, 0), (1, 1)]


@pytest.mark.parametrize("frontier, expected", [
    ([(0, 3), (1, 2), (2, 0)], [(0, 0), (0, 1), (1, 0), (1, 1)]),
    ([(1, 2), (2, 0)], [(1, 0), (1, 1), (1, 0), (1, 1)]),
    ([(0, 3), (1, 1)], [(0, 1), (0, 1), (1, 1), (1, 1)]),
    ([(1, 1)], [(1, 1), (1, 1), (1, 1), (1, 1)]),
])
def test_roadmap_compaction_examples(frontier, expected):
    out = L.advance(M(ROADMAP_TIMES, 2), M(frontier, 2))
    assert out.dtype == np.int64 and out.shape == (4, 2)
    assert ref.rows_of(out) == expected


# --- rowwise order, join and meet ---------------------------------------------------

@SETTINGS
@given(st.data())
def test_less_equal_join_meet_rowwise(data):
    d = data.draw(dims)
    a = data.draw(time_rows(d))
    b = data.draw(time_rows(d, len(a), len(a)))
    A, B = M(a, d), M(b, d)
    assert L.less_equal(A, B).tolist() == [ref.le(s, t) for s, t in zip(a, b)]
    assert ref.rows_of(L.join(A, B)) == [ref.join(s, t) for s, t in zip(a, b)]
    assert ref.rows_of(L.meet(A, B)) == [ref.meet(s, t) for s, t in zip(a, b)]


@SETTINGS
@given(st.data())
def test_less_equal_join_meet_broadcast_one_time(data):
    d = data.draw(dims)
    a = data.draw(time_rows(d))
    t = data.draw(time_rows(d, 1, 1))[0]
    A = M(a, d)
    for b in (np.array(t, dtype=np.int64), M([t], d)):  # [d] and [1, d]
        assert L.less_equal(A, b).tolist() == [ref.le(s, t) for s in a]
        assert ref.rows_of(L.join(A, b)) == [ref.join(s, t) for s in a]
        assert ref.rows_of(L.meet(A, b)) == [ref.meet(s, t) for s in a]


def test_less_equal_is_a_partial_order_not_lexicographic():
    a = M([(0, 5), (1, 0), (2, 2)], 2)
    b = M([(1, 0), (0, 5), (2, 2)], 2)
    assert L.less_equal(a, b).tolist() == [False, False, True]
    assert L.less_equal(b, a).tolist() == [False, False, True]


# --- antichains -------------------------------------------------------------------

@SETTINGS
@given(st.data())
def test_antichain_matches_reference(data):
    d = data.draw(dims)
    ts = data.draw(time_rows(d, 0, data.draw(st.sampled_from([12, 60]))))
    out = L.antichain(M(ts, d))
    assert out.dtype == np.int64 and out.shape[1] == d and out.flags.c_contiguous
    rows = ref.rows_of(out)
    assert rows == ref.antichain(ts)
    # Canonical form: strictly sorted, pairwise incomparable, and every input is in its
    # future (checked independently of the reference's construction).
    assert ref.is_sorted_rows(rows, strict=True)
    assert not any(s != t and ref.le(s, t) for s in rows for t in rows)
    assert all(ref.in_future(t, rows) for t in ts)


def test_antichain_empty_all_equal_and_one_row():
    assert L.antichain(np.zeros((0, 3), np.int64)).shape == (0, 3)
    assert ref.rows_of(L.antichain(M([(2, 1)] * 5, 2))) == [(2, 1)]
    assert ref.rows_of(L.antichain(M([(7,)], 1))) == [(7,)]
    big = np.array([(i, 100 - i) for i in range(100)] * 2, dtype=np.int64)  # > small path
    assert ref.rows_of(L.antichain(big)) == [(i, 100 - i) for i in range(100)]


@SETTINGS
@given(st.data())
def test_frontier_meet_is_lower_envelope(data):
    d = data.draw(dims)
    f1 = ref.antichain(data.draw(time_rows(d, 0, 4)))
    f2 = ref.antichain(data.draw(time_rows(d, 0, 4)))
    probe = data.draw(time_rows(d, 0, 10))
    out = ref.rows_of(L.frontier_meet(M(f1, d), M(f2, d)))
    assert out == ref.antichain(f1 + f2)
    for t in probe + f1 + f2:
        assert ref.in_future(t, out) == (ref.in_future(t, f1) or ref.in_future(t, f2))


@SETTINGS
@given(st.data())
def test_frontier_less_equal_matches_reference(data):
    d = data.draw(dims)
    f1 = ref.antichain(data.draw(time_rows(d, 0, 4)))
    f2 = ref.antichain(data.draw(time_rows(d, 0, 4)))
    assert L.frontier_less_equal(M(f1, d), M(f2, d)) == ref.frontier_less_equal(f1, f2)
    assert L.frontier_less_equal(M(f1, d), M(f1, d))  # reflexive
    # Advancing a frontier (joining each element with something) never moves it back.
    up = data.draw(time_rows(d, 1, 1))[0]
    moved = ref.antichain([ref.join(f, up) for f in f1])
    assert L.frontier_less_equal(M(f1, d), M(moved, d))


def test_frontier_less_equal_empty_frontier_is_greatest():
    f = M([(0, 1), (1, 0)], 2)
    empty = np.zeros((0, 2), np.int64)
    assert L.frontier_less_equal(f, empty)
    assert not L.frontier_less_equal(empty, f)
    assert L.frontier_less_equal(empty, empty)
    assert L.frontier_less_equal(f, np.array([], dtype=np.int64))  # 1-D empty


# --- in_future and advance ----------------------------------------------------------

@SETTINGS
@given(times_and_frontier())
def test_in_future_matches_reference(case):
    d, ts, fr = case
    assert L.in_future(M(ts, d), M(fr, d)).tolist() == [ref.in_future(t, fr) for t in ts]


def test_in_future_empty_frontier_is_all_false():
    out = L.in_future(M([(0, 0), (5, 5)], 2), np.zeros((0, 2), np.int64))
    assert out.tolist() == [False, False]


@SETTINGS
@given(times_and_frontier())
def test_advance_matches_definition(case):
    d, ts, fr = case
    out = L.advance(M(ts, d), M(fr, d))
    assert out.dtype == np.int64 and out.shape == (len(ts), d)
    assert ref.rows_of(out) == [ref.advance(t, fr) for t in ts]


def test_advance_empty_frontier_returns_a_copy():
    t = M([(3, 1), (0, 2)], 2)
    out = L.advance(t, np.zeros((0, 2), np.int64))
    assert ref.rows_of(out) == [(3, 1), (0, 2)]
    out[0, 0] = 99
    assert t[0, 0] == 3


@st.composite
def advance_case(draw):
    d = draw(dims)
    vals = st.integers(-4, 4)
    fr = ref.antichain(draw(st.lists(st.tuples(*[vals] * d), min_size=1, max_size=4)))
    ts = draw(st.lists(st.tuples(*[vals] * d), min_size=1, max_size=6))
    # Times in the future of F: joins of frontier elements with random times.
    extra = draw(st.lists(st.tuples(st.integers(0, len(fr) - 1), st.tuples(*[vals] * d)),
                          min_size=1, max_size=12))
    gs = [ref.join(fr[i], u) for i, u in extra] + list(fr)
    return d, ts, fr, gs


@settings(max_examples=200, deadline=None)
@given(advance_case())
def test_advance_is_correct_on_the_future_of_the_frontier(case):
    """For every g in the future of F: t <= g iff advance(t, F) <= g."""
    d, ts, fr, gs = case
    adv = ref.rows_of(L.advance(M(ts, d), M(fr, d)))
    for t, a in zip(ts, adv):
        for g in gs:
            assert ref.in_future(g, fr)
            assert ref.le(t, g) == ref.le(a, g), (t, a, g, fr)


@settings(max_examples=200, deadline=None)
@given(advance_case())
def test_advance_properties(case):
    d, ts, fr, _ = case
    F = M(fr, d)
    adv = ref.rows_of(L.advance(M(ts, d), F))
    twice = ref.rows_of(L.advance(M(adv, d), F))
    assert twice == adv  # idempotent
    for t, a in zip(ts, adv):
        assert ref.le(t, a)  # advancing only moves times up...
        # ...and no further than any join(t, f): together with correctness this makes
        # it the greatest time that is indistinguishable from t in the future of F.
        assert all(ref.le(a, ref.join(t, f)) for f in fr)
        if ref.in_future(t, fr):
            assert a == t  # times already in the future of F are unchanged
    # Monotone: s <= t implies advance(s) <= advance(t).
    for s, a_s in zip(ts, adv):
        for t, a_t in zip(ts, adv):
            if ref.le(s, t):
                assert ref.le(a_s, a_t)


def test_advance_is_not_always_in_the_future_of_the_frontier():
    # A documented subtlety: (0, 0) advanced by {(0, 1), (1, 0)} stays (0, 0), which is
    # not in the future of the frontier (the meet of the joins is below both).
    out = L.advance(M([(0, 0)], 2), M([(0, 1), (1, 0)], 2))
    assert ref.rows_of(out) == [(0, 0)]
    assert not L.in_future(out, M([(0, 1), (1, 0)], 2))[0]


# --- meet_all -----------------------------------------------------------------------

@SETTINGS
@given(st.data())
def test_meet_all_matches_reference(data):
    d = data.draw(dims)
    ts = data.draw(time_rows(d, 1, 12))
    out = L.meet_all(M(ts, d))
    assert out.dtype == np.int64 and out.shape == (d,)
    assert tuple(int(x) for x in out) == ref.meet_all(ts)


def test_meet_all_empty_raises():
    with pytest.raises(ValueError, match="empty"):
        L.meet_all(np.zeros((0, 2), np.int64))


# --- input normalisation --------------------------------------------------------------

def test_inputs_are_normalised_or_rejected():
    a32 = np.array([[1, 2], [3, 4]], dtype=np.int32)
    assert L.join(a32, np.array([2, 2], dtype=np.uint8)).tolist() == [[2, 2], [3, 4]]
    ro = np.array([[1, 2], [3, 4]], dtype=np.int64)
    ro.setflags(write=False)
    assert L.less_equal(ro, ro).tolist() == [True, True]
    fortran = np.asfortranarray(np.array([[0, 5], [1, 0], [0, 5]], dtype=np.int64))
    assert ref.rows_of(L.antichain(fortran)) == [(0, 5), (1, 0)]
    with pytest.raises(ValueError, match="times"):
        L.antichain(np.array([[0.5, 1.0]]))
    with pytest.raises(ValueError, match="a"):
        L.less_equal(np.array([[2**63]], dtype=np.uint64), np.array([[0]]))
    with pytest.raises(ValueError, match="b"):
        L.join(np.zeros((3, 2), np.int64), np.zeros((2, 2), np.int64))
    with pytest.raises(ValueError, match="frontier"):
        L.in_future(np.zeros((3, 2), np.int64), np.zeros((1, 3), np.int64))
    with pytest.raises(ValueError, match="times"):
        L.advance(np.zeros((3, 0), np.int64), np.zeros((1, 0), np.int64))


def test_wrappers_do_not_modify_inputs():
    t = M([(5, 1), (0, 0), (5, 1), (2, 3)], 2)
    keep = t.copy()
    L.antichain(t)
    L.advance(t, M([(1, 1)], 2))
    L.join(t, t[::-1].copy())
    assert np.array_equal(t, keep)

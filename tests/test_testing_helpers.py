"""Tests of the public ``ddnumba.testing`` helpers and of the oracle (``oracle.py``)
that the operator tests rely on. None of this needs the runtime: if these fail, an
operator test failure means nothing.
"""
import itertools

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import oracle as O
from ddnumba.testing import (
    accumulate,
    assert_collection_equal,
    assert_updates_equal,
    collection_from_table,
    consolidate_updates,
    updates_from_table,
    updates_table,
)

FAST = settings(max_examples=40, deadline=None)


# ------------------------------------------------------------------------ accumulate


def test_accumulate_product_order():
    ups = [((1,), (0, 1), 1), ((1,), (1, 0), 1), ((2,), (1, 1), 5), ((3,), (0, 0), -2)]
    assert accumulate(ups, (0, 0)) == {(3,): -2}
    assert accumulate(ups, (0, 1)) == {(1,): 1, (3,): -2}
    assert accumulate(ups, (1, 0)) == {(1,): 1, (3,): -2}
    assert accumulate(ups, (1, 1)) == {(1,): 2, (2,): 5, (3,): -2}
    assert accumulate(ups, (0, 9)) == {(1,): 1, (3,): -2}


def test_accumulate_one_dimension_and_cancellation():
    ups = [((1, 2), 0, 1), ((1, 2), 3, -1), ((4, 5), 2, 2)]
    assert accumulate(ups, 0) == {(1, 2): 1}
    assert accumulate(ups, (2,)) == {(1, 2): 1, (4, 5): 2}
    assert accumulate(ups, 3) == {(4, 5): 2}
    assert accumulate([], 7) == {}
    assert accumulate([(7, 0, 1)], 0) == {(7,): 1}  # a bare int is a one-column row


def test_accumulate_reads_tables_and_rejects_mixed_dimensions():
    table = updates_table([((1, 2), (0, 1), 3), ((1, 2), (2, 0), 1)], ["a", "b"])
    assert accumulate(table, (2, 1)) == {(1, 2): 4}
    with pytest.raises(ValueError):
        accumulate([((1,), (0, 1), 1)], 3)
    with pytest.raises(ValueError):
        accumulate([((1,), (0, 1), 1), ((1,), 2, 1)], (2, 2))
    with pytest.raises(TypeError):
        accumulate([((1.5,), 0, 1)], 0)


@FAST
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 2), st.integers(0, 2),
                          st.integers(-3, 3)), max_size=30),
       st.tuples(st.integers(0, 2), st.integers(0, 2)))
def test_accumulate_matches_numpy(raw, t):
    ups = [((r,), (a, b), d) for r, a, b, d in raw]
    expected = {}
    if raw:
        arr = np.array(raw, dtype=np.int64)
        mask = (arr[:, 1:3] <= np.array(t)).all(axis=1)
        for r in np.unique(arr[mask, 0]):
            s = int(arr[mask & (arr[:, 0] == r), 3].sum())
            if s:
                expected[(int(r),)] = s
    assert accumulate(ups, t) == expected


# ------------------------------------------------------------------- consolidation


def test_consolidate_updates():
    ups = [((2,), 1, 3), ((1,), 0, 1), ((1,), 0, -1), ((2,), 1, -1), ((2,), 0, 4)]
    assert consolidate_updates(ups) == [((2,), (0,), 4), ((2,), (1,), 2)]
    assert consolidate_updates([]) == []
    assert consolidate_updates([(np.int64(3), np.int64(2), np.int64(1))]) == [((3,), (2,), 1)]


# ---------------------------------------------------------------------------- tables


def test_updates_table_round_trip_1d_and_2d():
    ups = [((1, 2), 0, 1), ((3, 4), 5, -2)]
    t = updates_table(ups, ["src", "dst"])
    assert t.column_names == ["src", "dst", "time", "diff"]
    assert all(ty == pa.int64() for ty in t.schema.types)
    assert updates_from_table(t) == [((1, 2), (0,), 1), ((3, 4), (5,), -2)]
    ups2 = [((7,), (1, 2, 3), 4)]
    t2 = updates_table(ups2, ["x"])
    assert t2.column_names == ["x", "time_0", "time_1", "time_2", "diff"]
    assert updates_from_table(t2) == ups2
    assert updates_from_table(t2.to_batches()[0]) == ups2
    empty = updates_table([], ["x", "y"], time_dims=2)
    assert empty.num_rows == 0 and empty.column_names == ["x", "y", "time_0", "time_1", "diff"]
    with pytest.raises(ValueError):
        updates_table([], ["x"])
    with pytest.raises(ValueError):
        updates_table([((1, 2), 0, 1)], ["x"])


def test_updates_from_table_data_columns_named_like_time_or_count():
    t = pa.table([pa.array([5]), pa.array([2]), pa.array([9]), pa.array([1])],
                 names=["k", "count", "time", "diff"])
    assert updates_from_table(t) == [((5, 2), (9,), 1)]
    t2 = pa.table([pa.array([5]), pa.array([0]), pa.array([1]), pa.array([-1])],
                  names=["time", "time_0", "time_1", "diff"])
    assert updates_from_table(t2) == [((5,), (0, 1), -1)]


def test_updates_from_table_rejects_bad_layouts():
    for names in (["a", "b", "c"], ["a", "time", "delta"], ["a", "time_1", "diff"],
                  ["time", "diff"]):
        t = pa.table([pa.array([1])] * len(names), names=names)
        with pytest.raises(ValueError):
            updates_from_table(t)


def test_collection_from_table():
    # The shape of Captured.at() for the output of count(): two columns named "count".
    t = pa.table([pa.array([1, 2, 1, 3]), pa.array([7, 7, 7, 7]), pa.array([1, 1, 2, -1])],
                 names=["k", "count", "count"])
    assert collection_from_table(t) == {(1, 7): 3, (2, 7): 1, (3, 7): -1}
    assert collection_from_table(pa.table({"x": [1], "count": [0]})) == {}
    # The runtime's at() suffixes the count column when a data column is "count".
    t2 = pa.table({"k": [1], "count": [7], "count_": [2]})
    assert collection_from_table(t2) == {(1, 7): 2}
    with pytest.raises(ValueError):
        collection_from_table(pa.table({"x": [1], "n": [1]}))


# ------------------------------------------------------------------------ assertions


def test_assert_collection_equal_passes():
    table = pa.table({"a": [1, 2, 2], "b": [5, 6, 6], "count": [1, 2, 1]})
    assert_collection_equal(table, {(1, 5): 1, (2, 6): 3, (9, 9): 0})
    assert_collection_equal({}, pa.table({"a": pa.array([], pa.int64()),
                                          "count": pa.array([], pa.int64())}))
    assert_collection_equal({1: 2}, {(1,): 2})
    assert_collection_equal(table, table)


def test_assert_collection_equal_fails_with_rows():
    with pytest.raises(AssertionError) as e:
        assert_collection_equal({(1, 5): 1, (2, 6): 3}, {(1, 5): 1, (2, 6): 2, (4, 4): 1})
    msg = str(e.value)
    assert "(2, 6)" in msg and "(4, 4)" in msg and "(1, 5)" not in msg
    with pytest.raises(AssertionError):
        assert_collection_equal({(1,): -1}, {})
    with pytest.raises(AssertionError) as e:
        assert_collection_equal({(i,): 1 for i in range(50)}, {})
    assert "more" in str(e.value)
    with pytest.raises(TypeError):
        assert_collection_equal([(1,)], {})


class _FakeCaptured:
    def __init__(self, table):
        self._table = table

    def updates(self):
        return self._table


def test_assert_updates_equal():
    ups = [((1, 2), (0, 1), 1), ((1, 2), (1, 0), 2), ((3, 3), (1, 1), -1)]
    table = updates_table(ups, ["a", "b"])
    assert_updates_equal(table, ups)
    assert_updates_equal(_FakeCaptured(table), list(reversed(ups)))
    # Compared after consolidation: split and cancelling updates are equivalent.
    assert_updates_equal(ups + [((5, 5), (0, 0), 1), ((5, 5), (0, 0), -1)],
                         [((1, 2), (0, 1), 1), ((1, 2), (1, 0), 1), ((1, 2), (1, 0), 1),
                          ((3, 3), (1, 1), -1)])
    assert_updates_equal([((1,), 3, 2)], [(1, (3,), 2)])
    with pytest.raises(AssertionError) as e:
        assert_updates_equal(table, ups[:2])
    assert "(3, 3)" in str(e.value) and "(1, 1)" in str(e.value)
    with pytest.raises(AssertionError):
        # Same total, wrong time: accumulations differ at (1, 0).
        assert_updates_equal(table, [((1, 2), (0, 1), 1), ((1, 2), (1, 1), 2),
                                     ((3, 3), (1, 1), -1)])
    with pytest.raises(AssertionError):
        assert_updates_equal([((1,), 0, 1)], [((1,), (0, 0), 1)])


# ---------------------------------------------------------------------------- oracle


def test_join_closure():
    assert O.join_closure({(0, 1), (1, 0)}) == {(0, 1), (1, 0), (1, 1)}
    assert O.join_closure({(0, 2, 0), (1, 0, 0), (0, 0, 3)}) == {
        (0, 2, 0), (1, 0, 0), (0, 0, 3), (1, 2, 0), (1, 0, 3), (0, 2, 3), (1, 2, 3)}
    assert O.join_closure({(3,), (1,)}) == {(1,), (3,)}
    assert O.join_closure(set()) == set()


def test_grid_is_join_closed():
    for d in (1, 2, 3):
        pts = O.points(d)
        assert O.join_closure(pts) == set(pts)
        assert pts == sorted(pts)


@FAST
@given(st.data())
def test_states_to_updates_inverts_accumulation(data):
    d = data.draw(st.sampled_from([1, 2, 3]))
    pts = O.points(d)
    rows = st.tuples(st.integers(0, 2))
    states = data.draw(st.dictionaries(
        st.sampled_from(pts), st.dictionaries(rows, st.integers(-2, 2).filter(bool), max_size=3)))
    ups = O.states_to_updates(states, d)
    assert all(t in set(pts) and diff != 0 for _, t, diff in ups)
    for p in pts:
        assert accumulate(ups, p) == states.get(p, {})


@FAST
@given(st.data())
def test_stream_strategy(data):
    d = data.draw(st.sampled_from([1, 2]))
    nonneg = data.draw(st.booleans())
    arity = data.draw(st.integers(1, 3))
    ups = data.draw(O.stream(arity, d, nonneg=nonneg))
    grid = set(O.points(d))
    for row, t, diff in ups:
        assert len(row) == arity and all(0 <= x < 5 for x in row)
        assert t in grid and diff != 0
    if nonneg:
        for p in grid:
            assert all(c > 0 for c in accumulate(ups, p).values())


def test_clamp_nonneg_and_random_stream():
    rng = np.random.default_rng(3)
    for d in (1, 2):
        ups = O.random_stream(rng, 2, d, n=40)
        clamped = O.clamp_nonneg(ups, d)
        for p in O.points(d):
            want = {r: c for r, c in accumulate(ups, p).items() if c > 0}
            assert accumulate(clamped, p) == want
        assert O.random_stream(np.random.default_rng(1), 3, d) == \
            O.random_stream(np.random.default_rng(1), 3, d)


# The references, on cases worked out by hand from the API contract.


def test_reference_linear():
    acc = {(1, 2): 3, (2, 1): -1, (0, 0): 2}
    assert O.ref_map(lambda k, v: k + v, 2)(acc) == {(3,): 2, (0,): 2}
    assert O.ref_map(lambda k, v: (v, k), 2)(acc) == {(2, 1): 3, (1, 2): -1, (0, 0): 2}
    assert O.ref_filter(lambda k, v: k > v, 2)(acc) == {(2, 1): -1}
    assert O.ref_filter(lambda k, v: k > v, 2)({}) == {}

    def dup(k, v):
        idx = np.repeat(np.arange(len(k)), k)
        return idx, v[idx]
    assert O.ref_flat_map(dup, 2)(acc) == {(2,): 3, (1,): -2}
    assert O.ref_concat(acc, acc, {(9, 9): 1}) == {(1, 2): 6, (2, 1): -2, (0, 0): 4, (9, 9): 1}
    assert O.ref_negate(acc) == {(1, 2): -3, (2, 1): 1, (0, 0): -2}


def test_reference_join_family():
    a = {(1, 10): 2, (2, 5): 1, (3, 3): -1}
    b = {(1, 7): 3, (1, 8): -1, (3, 0): 2}
    assert O.ref_join(a, b) == {(1, 10, 7): 6, (1, 10, 8): -2, (3, 3, 0): -2}
    keys = {(1,): 1, (3,): 2, (4,): 1}
    assert O.clean(O.ref_semijoin(a, keys)) == {(1, 10): 2, (3, 3): -2}
    assert O.clean(O.ref_antijoin(a, keys)) == {(2, 5): 1, (3, 3): 1}
    assert O.ref_join({(1, 2, 3): 1}, {(1, 2, 4, 5): 2, (1, 3, 4, 5): 1}, key=2) == {
        (1, 2, 3, 4, 5): 2}


def test_reference_reductions():
    acc = {(0, 5): 4, (0, 1): 2, (0, 2): -1, (1, 9): 1, (2, 3): 1, (2, 4): -1}
    assert O.ref_count(acc) == {(0, 5): 1, (1, 1): 1, (2, 0): 1}
    assert O.ref_sum(acc, 0) == {(0, 20): 1, (1, 9): 1, (2, -1): 1}
    assert O.ref_min(acc, 0) == {(0, 1): 1, (1, 9): 1, (2, 3): 1}
    assert O.ref_max(acc, 0) == {(0, 5): 1, (1, 9): 1, (2, 3): 1}
    assert O.ref_distinct(acc) == {(0, 5): 1, (0, 1): 1, (1, 9): 1, (2, 3): 1}
    assert O.ref_threshold(lambda c: np.where(c > 1, c, 0))(acc) == {(0, 5): 4, (0, 1): 2}
    assert O.ref_top_k(acc, 3) == {(0, 1): 2, (0, 5): 1, (1, 9): 1, (2, 3): 1}
    assert O.ref_top_k(acc, 1) == {(0, 1): 1, (1, 9): 1, (2, 3): 1}
    assert O.ref_min({(0, 1): -1}, 0) == {}
    assert O.ref_reduce(lambda g: [((len(g),), 2)], acc) == {(0, 3): 2, (1, 1): 2, (2, 2): 2}
    assert O.ref_count({(0, 1, 7): 2, (0, 1, 8): 1, (0, 2, 7): 1}, key=2) == {
        (0, 1, 3): 1, (0, 2, 1): 1}


def test_reference_multiset():
    a, b = {(1,): 2, (2,): 1}, {(1,): 1, (3,): 4}
    assert O.clean(O.ref_union(a, b)) == {(1,): 2, (2,): 1, (3,): 4}
    assert O.clean(O.ref_intersect(a, b)) == {(1,): 1}
    assert O.clean(O.ref_except(a, b)) == {(1,): 1, (2,): 1}
    assert O.clean(O.ref_except(b, a)) == {(3,): 4}


def _reference_diffs(updates, reference, d):
    """The output stream the definition implies, by Möbius inversion on the grid."""
    states = {p: O.clean(reference(O.accumulate_at(updates, p))) for p in O.points(d)}
    return O.states_to_updates(states, d)


def test_must_show_2015_example_follows_from_definition():
    ups = [((1,), (0, 0), 1), ((2,), (0, 0), 3), ((3,), (0, 0), 2),
           ((1,), (0, 1), -1), ((2,), (0, 1), -3),
           ((1,), (1, 0), -1), ((2,), (1, 0), -1),
           ((1,), (1, 1), 1), ((2,), (1, 1), 2)]

    def program(acc):
        lengths = O.ref_map(lambda code: (np.where(code == 3, 2, 1), code), 1)(acc)
        return O.ref_count(O.ref_distinct(O.clean(lengths)))

    assert_updates_equal(_reference_diffs(ups, program, 2), [
        ((1, 2), (0, 0), 1), ((2, 1), (0, 0), 1), ((1, 2), (0, 1), -1),
        ((1, 1), (1, 0), 1), ((1, 2), (1, 0), -1), ((1, 2), (1, 1), 1)])


def test_must_show_count_example_follows_from_definition():
    ups = [((0, 10), (0, 1), 1), ((0, 20), (1, 0), 1)]
    assert_updates_equal(_reference_diffs(ups, O.ref_count, 2), [
        ((0, 1), (0, 1), 1), ((0, 1), (1, 0), 1), ((0, 1), (1, 1), -2), ((0, 2), (1, 1), 1)])


def test_exact_join_and_union_cases_follow_from_definition():
    # The literal expectations in test_ops_join.py / test_ops_multiset.py.
    a = [((5, 1), (0, 1), 1), ((5, 2), (0, 0), 2), ((5, 2), (1, 1), -2)]
    b = [((5, 9), (0, 1), 3), ((5, 8), (1, 0), -1)]
    states = {p: O.clean(O.ref_join(O.accumulate_at(a, p), O.accumulate_at(b, p)))
              for p in O.points(2)}
    assert_updates_equal(O.states_to_updates(states, 2), [
        ((5, 1, 9), (0, 1), 3), ((5, 2, 9), (0, 1), 6),
        ((5, 1, 8), (1, 1), -1), ((5, 2, 8), (1, 0), -2),
        ((5, 2, 9), (1, 1), -6), ((5, 2, 8), (1, 1), 2)])
    x, y = [((1,), (0, 1), 2)], [((1,), (1, 0), 3)]
    states = {p: O.clean(O.ref_union(O.accumulate_at(x, p), O.accumulate_at(y, p)))
              for p in O.points(2)}
    assert_updates_equal(O.states_to_updates(states, 2), [
        ((1,), (0, 1), 2), ((1,), (1, 0), 3), ((1,), (1, 1), -2)])


def test_grid_points_decide_every_time():
    """Why checking the grid suffices: inputs on the grid accumulate, at any time t,
    to their value at the largest grid point below t (the grid is join-closed)."""
    rng = np.random.default_rng(0)
    ups = O.random_stream(rng, 1, 2, n=30)
    side = O.GRID_MAX[2]
    for t in itertools.product(range(side + 3), repeat=2):
        clipped = tuple(min(x, side) for x in t)
        assert O.accumulate_at(ups, t) == O.accumulate_at(ups, clipped)

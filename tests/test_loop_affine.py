"""Maps that add columns or constants (``lambda n, k, d: (d, k + 1)``), and filters
comparing such sums (``lambda n, d: d <= 3``), inside loops.

:meth:`MapNode.affine` and :meth:`FilterNode.affine` trace them on symbolic columns;
the native engine's sequential loops then run them in compiled code, as sums and
comparisons in the route they lie on (``kernels.seqloop._route_sums``), instead of
sending the loop round-wise with a Python callback per round. ``bfs`` and ``sssp`` are
such loops.

The oracle tests propagate values along the edges of a DAG (nodes ``0..N-1``, edges
from a smaller node to a larger one), adding to them on every hop, so the loops
converge whatever the counts; every time is checked against a brute-force fixed point
on both engines, and the native loop must have run sequentially."""
import numpy as np
import pytest

import ddnumba as dd
from ddnumba import algorithms as alg
from ddnumba.native import Unsupported, _compose, _identity
from ddnumba.operators import linear as L
from ddnumba.operators.linear import _wrap64, checked_sum

import oracle as O

ENGINES = ["native", "python"]
N = 6
BIG = 2**63 - 5            # added on a hop, it wraps (as NumPy's int64 arithmetic does)


def _map_terms(f, arity_in=3, arity=2):
    df = dd.Dataflow(engine="python")
    _, c = df.new_input([f"c{i}" for i in range(arity_in)])
    return c.map(f, arity=arity)._node.affine()


# ------------------------------------------------------------------------ tracing

@pytest.mark.parametrize("f, want", [
    (lambda a, b, x: (b, a), [((1,), 0, None), ((0,), 0, None)]),
    (lambda a, b, x: (b, a + 1), [((1,), 0, None), ((0,), 1, None)]),
    (lambda a, b, x: (1 + b, a - 5), [((1,), 1, None), ((0,), -5, None)]),
    (lambda a, b, x: (b + a + 2, x), [((1, 0), 2, None), ((2,), 0, None)]),
    (lambda a, b, x: (a, 7), [((0,), 0, None), ((), 7, None)]),
    (lambda a, b, x: (a + np.int64(3), b - np.int32(-4)),
     [((0,), 3, None), ((1,), 4, None)]),
    (lambda a, b, x: (a + BIG + BIG, b), [((0,), _wrap64(2 * BIG), None),
                                          ((1,), 0, None)]),
    (lambda a, b, x: (b, checked_sum(a, x, "too far")),
     [((1,), 0, None), ((0, 2), 0, "too far")]),
    (lambda a, b, x: (b, checked_sum(a, 9, "too far")),
     [((1,), 0, None), ((0,), 9, "too far")]),
])
def test_a_map_of_sums_is_traced(f, want):
    assert _map_terms(f) == want


@pytest.mark.parametrize("f", [
    lambda a, b, x: (a + b + x, a),             # three columns
    lambda a, b, x: (a * 2, b),
    lambda a, b, x: (5 - a, b),                 # a negated column
    lambda a, b, x: (a - b, b),
    lambda a, b, x: (np.add(a, 1), b),          # NumPy functions are not traced
    lambda a, b, x: (a + np.uint64(3), b),      # NumPy makes these float64
    lambda a, b, x: (a + 1.0, b),
    lambda a, b, x: (a + 2**63, b),             # a constant beyond int64
    lambda a, b, x: (a + True, b),
    lambda a, b, x: (a + np.arange(len(a)), b),
    lambda a, b, x: (a, b if a == 3 else x),
    lambda a, b, x: (checked_sum(a + 1, x, "m"), b),    # a checked sum of a sum
    lambda a, b, x: (checked_sum(a, x, "m") + 1, b),    # a sum of a checked sum
    # a function that tells symbolic columns from arrays: the random probe disagrees
    lambda a, b, x: (a + (1 if isinstance(a, np.ndarray) else 2), b),
])
def test_a_map_that_is_not_a_sum_is_not_traced(f):
    assert _map_terms(f) is None


def _filter_clauses(pred, arity_in=3):
    df = dd.Dataflow(engine="python")
    _, c = df.new_input([f"c{i}" for i in range(arity_in)])
    return c.filter(pred)._node.affine()


A, B, X = ((0,), 0, None), ((1,), 0, None), ((2,), 0, None)


C3 = ((), 3, None)


@pytest.mark.parametrize("pred, want", [
    (lambda a, b, x: a < 3, [[(A, L.CMP_LT, C3)]]),
    (lambda a, b, x: 3 < a, [[(A, L.CMP_GT, C3)]]),
    (lambda a, b, x: (a + 1 <= b) & (x != 2),
     [[(((0,), 1, None), L.CMP_LE, B), (X, L.CMP_NE, ((), 2, None))]]),
    (lambda a, b, x: (a >= x) & (b == 0) & (b + x > -5),
     [[(A, L.CMP_GE, X), (B, L.CMP_EQ, ((), 0, None)), (((1, 2), 0, None), L.CMP_GT,
                                                          ((), -5, None))]]),
    # | and ~, in disjunctive normal form
    (lambda a, b, x: (a < 3) | (b > x), [[(A, L.CMP_LT, C3)], [(B, L.CMP_GT, X)]]),
    (lambda a, b, x: ~(a < 3), [[(A, L.CMP_GE, C3)]]),
    (lambda a, b, x: ~((a <= 3) & (b != x)), [[(A, L.CMP_GT, C3)], [(B, L.CMP_EQ, X)]]),
    (lambda a, b, x: ~((a == 3) | (b >= x)), [[(A, L.CMP_NE, C3), (B, L.CMP_LT, X)]]),
    (lambda a, b, x: ((a < 3) | (b < 3)) & (x > 3),
     [[(A, L.CMP_LT, C3), (X, L.CMP_GT, C3)], [(B, L.CMP_LT, C3), (X, L.CMP_GT, C3)]]),
])
def test_a_filter_of_comparisons_is_traced(pred, want):
    assert _filter_clauses(pred) == want


def _or_of(k):
    """``(a == 0) | (b == 1) | ...``: ``k`` groups of one comparison each."""
    def pred(a, b, x):
        out = a == 0
        for i in range(1, k):
            out = out | (b == i)
        return out
    return pred


@pytest.mark.parametrize("pred", [
    lambda a, b, x: (a < 3) or (b > 1),         # truth of a comparison
    lambda a, b, x: (a < 3) and (b > 1),
    lambda a, b, x: not (a < 3),
    lambda a, b, x: np.logical_and(a < 3, b > 1),
    lambda a, b, x: (a < 3) ^ (b > 1),
    lambda a, b, x: a * 2 < 3,
    lambda a, b, x: a < 2**63,                  # a constant beyond int64
    lambda a, b, x: a,                          # not a mask
    lambda a, b, x: np.ones(len(a), bool),
    # tells symbolic columns from arrays: the random check disagrees
    lambda a, b, x: a < (3 if isinstance(a, np.ndarray) else 0),
    # more than MAX_GROUPS groups: 17 of them, or 5 x 4 once multiplied out
    _or_of(L.MAX_GROUPS + 1),
    lambda a, b, x: _or_of(5)(a, b, x) & _or_of(4)(b, a, x),
])
def test_a_filter_that_is_not_comparisons_is_not_traced(pred):
    assert _filter_clauses(pred) is None


def test_a_predicate_of_max_groups_is_traced():
    assert len(_filter_clauses(_or_of(L.MAX_GROUPS))) == L.MAX_GROUPS


def test_the_comparisons_agree_with_the_kernels():
    from ddnumba.kernels import seqloop as S
    assert [S.CMP_LT, S.CMP_LE, S.CMP_GT, S.CMP_GE, S.CMP_EQ, S.CMP_NE] == \
        [L.CMP_LT, L.CMP_LE, L.CMP_GT, L.CMP_GE, L.CMP_EQ, L.CMP_NE] == list(range(6))


def test_a_filter_after_maps_compares_their_sums():
    from ddnumba.native import _compose_filter
    hop = _compose(_identity(4), [((2,), 0, None), ((1, 3), -7, None)])   # (d, v + w - 7)
    assert _compose_filter(hop, [[(B, L.CMP_LE, ((), 5, None)),
                                  (A, L.CMP_NE, ((1,), 1, None))],
                                 [(A, L.CMP_EQ, ((), 2, None))]]) == [
        [(((1, 3), -7, None), L.CMP_LE, ((), 5, None)),
         (((2,), 0, None), L.CMP_NE, ((1, 3), -6, None))],
        [(((2,), 0, None), L.CMP_EQ, ((), 2, None))]]
    with pytest.raises(Unsupported):                  # v + w - 7 + d: three columns
        _compose_filter(hop, [[(((0, 1), 0, None), L.CMP_LT, ((), 0, None))]])


def test_composed_maps_stay_one_sum_or_are_refused():
    cols = _identity(3)
    hop = _compose(cols, [((2,), 0, None), ((0,), 1, None), ((0, 1), 5, None)])
    assert hop == [((2,), 0, None), ((0,), 1, None), ((0, 1), 5, None)]
    # a second map: a constant more, a projection, and a sum of sums of one column each
    again = _compose(hop, [((1,), -3, None), ((0,), 0, None), ((0, 1), 0, None)])
    assert again == [((0,), -2, None), ((2,), 0, None), ((2, 0), 1, None)]
    with pytest.raises(Unsupported):
        _compose(hop, [((1, 2), 0, None)])                 # three columns
    with pytest.raises(Unsupported):
        _compose(hop, [((1, 0), 0, "m")])                  # a checked sum of a sum
    chk = _compose(cols, [((0, 2), 0, "m"), ((1,), 0, None)])
    assert _compose(chk, [((1,), 0, None), ((0,), 0, None)]) == [((1,), 0, None),
                                                                  ((0, 2), 0, "m")]
    with pytest.raises(Unsupported):
        _compose(chk, [((0,), 1, None)])                   # a sum of a checked sum


# ---------------------------------------------------------------- the route, directly

def test_a_route_computes_its_sums_row_by_row():
    from ddnumba.kernels import seqloop as S
    src = np.array([[3, 2, 10, -4, 2**62],
                    [4, -1, -7, 9, 2**62]], np.int64)     # (iteration, diff, data...)
    words = [S.A_WRAP, 0, -1, 1,             # c0 + 1
             S.A_WRAP, 1, 0, BIG,            # c1 + c0 + BIG (wraps)
             S.A_WRAP, -1, -1, 7,            # 7
             S.A_CHECKED, 0, 1, 0,           # c0 + c1, checked
             S.A_CHECKED, 2, -1, -1,         # c2 - 1, checked
             0]                              # no filters
    proj = np.array([99] + words, np.int64)
    dst = np.zeros((3, 7), np.int64)
    cn = np.zeros(3, np.int64)
    best = S._route_sums(src, 2, dst, 1, proj, 1, 5, -1, 2, cn, 2)
    assert best == 5 and cn.tolist() == [0, 0, 3]
    w = [_wrap64(v) for v in (-4 + 10 + BIG, 9 - 7 + BIG)]
    assert dst[1:].tolist() == [[5, -2, 11, w[0], 7, 6, 2**62 - 1],
                                [6, 1, -6, w[1], 7, 2, 2**62 - 1]]
    assert dst[0].tolist() == [0] * 7
    # a checked sum that leaves int64
    over = np.array(proj)
    over[1 + 4 * 4 + 3] = 0
    over[1 + 4 * 4 + 2] = 2                  # c2 + c2 = 2**63
    assert S._route_sums(src, 2, dst, 0, over, 1, 5, 1, 0, cn, 0) == -2
    # a projection: one word a column
    proj1 = np.array([2, 0], np.int64)
    dst1 = np.zeros((2, 4), np.int64)
    assert S._route_copy(src, 2, dst1, 0, proj1, 0, 2, 1, 0) == 3
    assert dst1.tolist() == [[3, 2, 2**62, 10], [4, -1, 2**62, -7]]


@pytest.mark.parametrize("flagged", [True, False])
def test_a_filter_holding_a_checked_sum_computes_it_for_every_row_it_sees(flagged):
    # One filter, one group: c0 < 0 and c0 + c1 > 0 (checked). Its number of groups
    # negated (as ddnumba.native writes a filter holding a checked sum), the sum is
    # computed before the comparisons, so the last row overflows although c0 < 0
    # fails for it; unflagged, the group stops at its first failing comparison.
    from ddnumba.kernels import affine as AF
    from ddnumba.kernels import seqloop as S
    words = [S.A_WRAP, 0, -1, 0,                         # output: c0
             1, -1 if flagged else 1, 2,                 # 1 filter, 1 group, 2 comparisons
             S.A_WRAP, 0, -1, 0, S.CMP_LT, S.A_WRAP, -1, -1, 0,
             S.A_CHECKED, 0, 1, 0, S.CMP_GT, S.A_WRAP, -1, -1, 0]
    proj = np.array(words, np.int64)
    src = np.array([[0, 1, -5, 10], [0, 1, 3, 1], [0, 1, -5, 2], [0, 1, 2**62, 2**62]],
                   np.int64)
    dst = np.zeros((4, 3), np.int64)
    cn = np.zeros(1, np.int64)
    assert S._route_sums(src, 3, dst, 0, proj, 0, 1, 1, 0, cn, 0) == 0
    assert cn[0] == 1 and dst[0].tolist() == [0, 1, -5]
    got = S._route_sums(src, 4, dst, 0, proj, 0, 1, 1, 0, cn, 0)
    assert got == (-2 if flagged else 0) and (flagged or cn[0] == 1)
    data = np.ascontiguousarray(src[:, 2:])
    times = np.zeros((4, 2), np.int64)
    od, ot, of, ok = AF.affine_batch(proj, 0, 1, data, times, np.ones(4, np.int64))
    assert ok is not flagged
    if not flagged:
        assert od.tolist() == [[-5]] and of.tolist() == [1]
    od, ot, of, ok = AF.affine_batch(proj, 0, 1, data[:3], times[:3], np.ones(3, np.int64))
    assert ok and od.tolist() == [[-5]]
    # into a leave: the same
    buf = np.zeros((5, 4), np.int64)
    assert S._leave_sums(src, 4, buf, 0, proj, 0, 1, 1, 7) == (-2 if flagged else 1)


def test_a_route_into_a_leave_computes_filters_and_adds_up_equal_rows():
    # Rows (iteration, diff, c0, c1) leave as (0, diff, c0 + c1, c1 - 1, t) where c1
    # != 4 (the iteration dropped): the first adds to the row before o (data (10, 8)
    # at time t), the two giving (6, 2) add up (2 + 3), the pair giving (7, 2)
    # cancels, and the rows with c1 == 4 are filtered out.
    from ddnumba.kernels import seqloop as S
    t = 6
    src = np.array([[0, 1, 1, 9], [1, 2, 3, 3], [2, 3, 3, 3], [1, 5, 0, 4],
                    [3, 4, 4, 3], [0, -4, 4, 3], [4, 7, 1, 4], [1, 1, 10, 2]],
                   np.int64)
    words = [S.A_WRAP, 0, 1, 0, S.A_WRAP, 1, -1, -1,
             1, 1, 1, S.A_WRAP, 1, -1, 0, S.CMP_NE, S.A_WRAP, -1, -1, 4]
    proj = np.array(words, np.int64)
    dst = np.full((12, 5), -1, np.int64)
    dst[0] = [0, 6, 10, 8, t]                 # written by an earlier emit
    k = S._leave_sums(src, src.shape[0], dst, 1, proj, 0, 2, 1, t)
    assert dst[:k].tolist() == [[0, 7, 10, 8, t], [0, 5, 6, 2, t], [0, 1, 12, 1, t]]
    # the sign, and the overflows
    k = S._leave_sums(src[1:2], 1, dst, 0, proj, 0, 2, -1, t)
    assert k == 1 and dst[0].tolist() == [0, -2, 6, 2, t]
    neg = src[1:2].copy()
    neg[0, 1] = -2**63
    assert S._leave_sums(neg, 1, dst, 0, proj, 0, 2, -1, t) == -1
    over = np.array(words, np.int64)
    over[0] = S.A_CHECKED
    big = np.array([[0, 1, 2**62, 2**62]], np.int64)
    assert S._leave_sums(big, 1, dst, 0, over, 0, 2, 1, t) == -2


@pytest.mark.parametrize("op, keeps", [
    ("CMP_LT", [1]), ("CMP_LE", [0, 1]), ("CMP_GT", [2]), ("CMP_GE", [0, 2]),
    ("CMP_EQ", [0]), ("CMP_NE", [1, 2])])
def test_a_route_keeps_the_rows_its_comparisons_hold_for(op, keeps):
    # Rows (iteration, diff, c0, c1); c0 + 1 is compared with c1 + 3 (5 vs 5, 3 vs
    # 10, 9 vs 0, 6 vs 5), and c0 != 5 drops the last row whatever the first says.
    from ddnumba.kernels import seqloop as S
    src = np.array([[0, 1, 4, 2], [1, 1, 2, 7], [2, 1, 8, -3], [3, 1, 5, 2]], np.int64)
    words = [S.A_WRAP, 1, -1, 0,                        # the output: c1
             1, 1, 2,                                   # a filter: two comparisons
             S.A_WRAP, 0, -1, 1, getattr(S, op), S.A_WRAP, 1, -1, 3,
             S.A_WRAP, 0, -1, 0, S.CMP_NE, S.A_WRAP, -1, -1, 5]
    proj = np.array(words, np.int64)
    dst = np.full((7, 3), -1, np.int64)
    cn = np.zeros(1, np.int64)
    best = S._route_sums(src, 4, dst, 2, proj, 0, 1, 1, 0, cn, 0)
    assert cn[0] == 2 + len(keeps)
    assert best == min(keeps)
    assert dst[2:cn[0]].tolist() == [[k, 1, int(src[k, 3])] for k in keeps]
    assert (dst[cn[0]:] == -1).all() and (dst[:2] == -1).all()


def test_a_route_keeps_the_rows_some_group_of_every_filter_holds_for():
    # filter 1: (c0 == 5) | (c1 == 5); filter 2: (c0 < 3) & (c1 > 3) | (c0 > 3) & (c1
    # < 3). Rows 1, 2 and 3 pass the first, rows 1 and 2 the second.
    from ddnumba.kernels import seqloop as S

    def cmp(a, op, k):
        return [S.A_WRAP, a, -1, 0, op, S.A_WRAP, -1, -1, k]
    src = np.array([[0, 1, 0, 0], [1, 1, 1, 5], [2, 1, 5, 1], [3, 1, 5, 5],
                    [4, 1, 2, 2]], np.int64)
    words = ([S.A_WRAP, 0, -1, 0, 2,
              2, 1] + cmp(0, S.CMP_EQ, 5) + [1] + cmp(1, S.CMP_EQ, 5) +
             [2, 2] + cmp(0, S.CMP_LT, 3) + cmp(1, S.CMP_GT, 3) +
             [2] + cmp(0, S.CMP_GT, 3) + cmp(1, S.CMP_LT, 3))
    proj = np.array(words, np.int64)
    dst = np.full((5, 3), -1, np.int64)
    cn = np.zeros(1, np.int64)
    assert S._route_sums(src, 5, dst, 0, proj, 0, 1, 1, 0, cn, 0) == 1
    assert cn[0] == 2 and dst[:2].tolist() == [[1, 1, 1], [2, 1, 5]]
    # the first filter alone (kernels.affine.passes, as the statistics count)
    from ddnumba.kernels.affine import passes
    assert [passes(proj, 4, 1, src, r, 2) for r in range(5)] == \
        [False, True, True, True, False]


# -------------------------------------------------------------------------- oracle

def _wsum(*parts):
    """The wrapped sums of columns and ints, row by row in Python ints."""
    n = max(len(p) for p in parts if isinstance(p, np.ndarray))
    return np.array([_wrap64(sum(int(p[i]) if isinstance(p, np.ndarray) else p
                                 for p in parts)) for i in range(n)], np.int64)


def _hop(op):
    """The loop's hop map over ``join(x, edges)`` rows ``(n, v, d, w)`` (``x`` holds
    ``(node, v)``, ``edges`` ``(src, dst, w)``), and its reference (Python ints,
    wrapped to int64)."""
    if op == "plus1":
        return lambda n, v, d, w: (d, v + 1), lambda n, v, d, w: (d, _wsum(v, 1))
    if op == "weight":
        return lambda n, v, d, w: (d, v + w), lambda n, v, d, w: (d, _wsum(v, w))
    if op == "wrap":
        return lambda n, v, d, w: (d, v + BIG), lambda n, v, d, w: (d, _wsum(v, BIG))
    if op == "checked":
        return (lambda n, v, d, w: (d, checked_sum(v, w, "hop: leaves int64")),
                lambda n, v, d, w: (d, _wsum(v, w)))
    if op in _FILTERS or op in _TAILS:
        return lambda n, v, d, w: (d, v + w), lambda n, v, d, w: (d, _wsum(v, w))
    if op == "dropchecked":     # a checked sum that the next map drops (see _body)
        return (lambda n, v, d, w: (d, v + w, checked_sum(v, w, "hop: leaves int64")),
                lambda n, v, d, w: (d, _wsum(v, w)))
    # constants and a column, over two maps in a row (composed into one sum)
    return (lambda n, v, d, w: (d, v - 7 + w),
            lambda n, v, d, w: (d, _wsum(v, -7, w, 2)))


# Filters, and their references on Python ints: "bounded" keeps the hops' sums up to
# 5 (after the map), "either" those up to 2 and those into node 4 that are not 7
# (after), "prefilter" the join's rows with w != 3 and v + w < 80 (before).
_FILTERS = {
    "bounded": (lambda n, v: v <= 5, lambda row: row[1] <= 5),
    "either": (lambda n, v: (v <= 2) | ~((n != 4) | (v == 7)),
               lambda row: row[1] <= 2 or (row[0] == 4 and row[1] != 7)),
    "prefilter": (lambda n, v, d, w: (w != 3) & (v + w < 80),
                  lambda row: row[3] != 3 and row[1] + row[3] < 80),
}


def _tail_ref(acc, f):
    out = {}
    for r, c in acc.items():
        r = f(r)
        if r is not None:
            out[r] = out.get(r, 0) + c
    return O.clean(out)


# Operators after the loop's aggregate (so on the way out of the loop, into its leave,
# as well as back to its start), and their references on Python ints.
_TAILS = {
    "tailmap": (lambda c: c.map(lambda n, v: (n, v + 1), names=["n", "v"]),
                lambda acc: _tail_ref(acc, lambda r: (r[0], r[1] + 1))),
    "tailfilter": (lambda c: c.filter(lambda n, v: v <= 5),
                   lambda acc: _tail_ref(acc, lambda r: r if r[1] <= 5 else None)),
    "tailchecked": (lambda c: c.map(lambda n, v: (n, checked_sum(v, 1, "tail: too far")),
                                    names=["n", "v"]),
                    lambda acc: _tail_ref(acc, lambda r: (r[0], r[1] + 1))),
}


def _body(op, agg, edges, base):
    f, _ = _hop(op)

    def body(x):
        joined = x.join(edges)
        if op == "prefilter":
            joined = joined.filter(_FILTERS[op][0])
        if op == "dropchecked":
            hop = joined.map(f, names=["n", "v", "c"]).map(lambda n, v, c: (n, v),
                                                            names=["n", "v"])
        else:
            hop = joined.map(f, names=["n", "v"])
        if op in ("bounded", "either"):
            hop = hop.filter(_FILTERS[op][0])
        if op == "two":
            hop = hop.map(lambda n, v: (n, v + 2), names=["n", "v"])
        hop = hop.concat(base)
        out = hop.min("v", name="v") if agg == "min" else hop.distinct()
        return _TAILS[op][0](out) if op in _TAILS else out
    return body


def _ref_fixed_point(op, agg, edges, base):
    _, g = _hop(op)

    keep = _FILTERS[op][1] if op in _FILTERS else (lambda row: True)

    def step(x):
        joined = O.ref_join(x, edges)
        if op == "prefilter":
            joined = {r: c for r, c in joined.items() if keep(r)}
        hop = O.ref_map(g, 4)(joined)
        if op in ("bounded", "either"):
            hop = {r: c for r, c in hop.items() if keep(r)}
        cat = O.clean(O.ref_concat(hop, base))
        out = O.clean(O.ref_min(cat, 0)) if agg == "min" else O.clean(O.ref_distinct(cat))
        return _TAILS[op][1](out) if op in _TAILS else out
    return O.fixed_point(step, base, N + 3)    # (a DAG of N nodes settles in N + 1)


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("agg", ["min", "distinct"])
@pytest.mark.parametrize("op", ["plus1", "weight", "wrap", "checked", "two", "bounded",
                                "either", "prefilter", "tailmap", "tailfilter",
                                "tailchecked", "dropchecked"])
@pytest.mark.parametrize("engine", ENGINES)
def test_loops_adding_along_paths_match_the_fixed_point(engine, op, agg, seed):
    rng = np.random.default_rng(seed)
    df = dd.Dataflow(engine=engine, loops="sequential")
    eh, edges = df.new_input(["src", "dst", "w"])
    bh, base = df.new_input(["node", "v"])
    out = base.iterate(_body(op, agg, edges, base), max_iterations=50)
    cap = out.capture()
    erows, brows = [], []

    def add_edges(s, d, w, ts, diff):
        keep = s < d                                # a DAG: smaller to larger nodes
        s, d, w, ts, diff = s[keep], d[keep], w[keep], ts[keep], diff[keep]
        eh.update(s, d, w, time=ts, diff=diff)
        erows.extend(((int(a), int(b), int(c)), int(x), int(y))
                     for a, b, c, x, y in zip(s, d, w, ts, diff))

    def add_base(n, v, ts, diff):
        bh.update(n, v, time=ts, diff=diff)
        brows.extend(((int(a), int(b)), int(x), int(y)) for a, b, x, y in zip(n, v, ts, diff))

    m = 14
    add_edges(rng.integers(0, N, m), rng.integers(0, N, m), rng.integers(0, 9, m),
              np.zeros(m, np.int64), rng.choice(np.array([1, 1, 2, -1]), m))
    m = 10
    add_base(rng.integers(0, N, m), rng.integers(-50, 50, m), np.zeros(m, np.int64),
             np.ones(m, np.int64))
    t = 0
    for run in range(8):
        m = int(rng.integers(2, 6))          # retractions and negative counts among them
        add_base(rng.integers(0, N, m), rng.integers(-50, 50, m),
                 t + 1 + rng.integers(0, 3, m), rng.choice(np.array([-2, -1, 1, 1, 2]), m))
        live = [r for r, c in O.accumulate_at([(r, (s,), d) for r, s, d in brows],
                                              (t,)).items() if c > 0]
        if live and run % 2 == 0:
            g = np.array(live[:2], np.int64).reshape(-1, 2)
            add_base(g[:, 0], g[:, 1], np.full(len(g), t + 2), -np.ones(len(g), np.int64))
        if run % 3 == 1:
            m = 3
            add_edges(rng.integers(0, N, m), rng.integers(0, N, m), rng.integers(0, 9, m),
                      t + 1 + rng.integers(0, 3, m), rng.choice(np.array([-1, 1]), m))
        eh.advance_to(t + 4)
        bh.advance_to(t + 4)
        df.run()
        O.check_at_times(cap, 2, range(0 if run == 0 else t + 1, t + 4), [erows, brows],
                         lambda e, b: _ref_fixed_point(op, agg, e, b), f"{op}/{agg}")
        t += 3
    if engine == "native":
        assert df._native.sequential == [True], "the loop did not run sequentially"


# ------------------------------------------------------------ algorithms and errors

@pytest.mark.parametrize("algo", ["bfs", "sssp"])
def test_bfs_and_sssp_loops_run_sequentially(algo):
    df = dd.Dataflow(engine="native", loops="sequential")
    ri, roots = df.new_input(["node"])
    if algo == "bfs":
        ei, edges = df.new_input(["src", "dst"])
        cap = alg.bfs(roots, edges).capture()
        ei.insert([0, 1, 0, 2], [1, 2, 2, 3], time=0)
        want = {(0, 0), (1, 1), (2, 1), (3, 2)}
    else:
        ei, edges = df.new_input(["src", "dst", "w"])
        cap = alg.sssp(roots, edges).capture()
        ei.insert([0, 1, 0, 2], [1, 2, 2, 3], [1, 1, 5, 4], time=0)
        want = {(0, 0), (1, 1), (2, 2), (3, 6)}
    ri.insert([0], time=0)
    ri.advance_to(1)
    ei.advance_to(1)
    df.run()
    assert df._native.sequential == [True]
    assert {(r["node"], r["distance"]) for r in cap.at(0).to_pylist()} == want


MODES = [("native", "sequential"), ("native", "rounds"), ("python", None)]


def _overflow_case(engine, loops, hop, first, base1, want):
    """A min-loop over ``(node, v)`` whose step is ``hop(x, edges)``: the rows and
    edges ``first`` (``(nodes, vs, srcs, dsts)``) run at time 0 and give ``want``;
    then the base rows ``base1`` or the edges ``(None, None, srcs, dsts)`` at time 1
    make the run stop with the hop's message ("hop: beyond int64"). Checks which loop
    mode ran."""
    df = dd.Dataflow(engine=engine, loops=loops)
    bh, base = df.new_input(["node", "v"])
    eh, edges = df.new_input(["src", "dst"])
    cap = base.iterate(lambda x: hop(x, edges).concat(base).min("v", name="v")).capture()
    for at, (n, v, s, d) in enumerate([first, base1]):
        if n is not None:
            bh.insert(n, v, time=at)
        if s is not None:
            eh.insert(s, d, time=at)
        bh.advance_to(at + 1)
        eh.advance_to(at + 1)
        if at == 0:
            df.run()
            assert O.captured_at(cap, 0, 2) == want
            if engine == "native":
                assert df._native.sequential == [loops == "sequential"]
    with pytest.raises(OverflowError, match=r"^hop: beyond int64 \(in run\(\) number 2"):
        df.run()


def _hop_sum(v, k):
    return checked_sum(v, k, "hop: beyond int64")


@pytest.mark.parametrize("engine, loops", MODES)
def test_a_checked_sum_in_a_loop_raises_the_maps_message(engine, loops):
    # 2**62 added on every hop from node 0 (at -2**62): node 2 gets 2**62; an edge
    # 2 -> 3 would give node 3 2**63, beyond int64 (NumPy would wrap it), and the run
    # stops with the map's message. (sssp's message, for a checked sum of two
    # columns, is tested in test_algorithms.)
    _overflow_case(engine, loops, lambda x, e: x.join(e).map(
        lambda n, v, d: (d, _hop_sum(v, 2**62)), names=["n", "v"]),
        ([0], [-2**62], [0, 1], [1, 2]), (None, None, [2], [3]),
        {(0, -2**62): 1, (1, 0): 1, (2, 2**62): 1})       # (2**62 itself fits)


@pytest.mark.parametrize("engine, loops", MODES)
def test_a_checked_sum_that_a_later_map_drops_still_raises(engine, loops):
    # The map's checked sum overflows for the row from node 0 although the next map
    # drops that column: every engine stops with the map's message (the composed
    # sequential route computes it in a filter of its own before the second map).
    _overflow_case(engine, loops, lambda x, e: x.join(e).map(
        lambda n, v, d: (d, v, _hop_sum(v, 2**62)), names=["n", "v", "w"]).map(
        lambda n, v, w: (n, v), names=["n", "v"]),
        ([0], [2**61], [0], [1]), ([0], [2**62], None, None),
        {(0, 2**61): 1, (1, 2**61): 1})                   # (2**61 + 2**62 fits)


@pytest.mark.parametrize("where", ["after", "compared"])
@pytest.mark.parametrize("engine, loops", MODES)
def test_a_checked_sum_before_a_filter_overflows_for_the_rows_it_drops(engine, loops,
                                                                       where):
    # "after": the map's checked sum overflows for the row from node 5 (at 2**62),
    # which the filter after the map would drop (n != 6); "compared": a filter compares
    # a checked sum after a comparison that fails for that row (n != 6 first). Either
    # way every engine stops with the message of the sum: the map computes it over
    # every row that reaches it, and so does the predicate.
    if where == "after":
        def hop(x, e):
            return x.join(e).map(lambda n, v, d: (d, _hop_sum(v, 2**62)),
                                 names=["n", "v"]).filter(lambda n, v: n != 6)
        v1, v2 = 0, 2**62
    else:
        def hop(x, e):
            return x.join(e).filter(lambda n, v, d: (d != 6) & (_hop_sum(v, 2**62) > v)
                                    ).map(lambda n, v, d: (d, v + 1), names=["n", "v"])
        v1, v2 = -2**62 + 1, -2**62 + 2
    _overflow_case(engine, loops, hop, ([0], [-2**62], [0, 1, 5], [1, 2, 6]),
                   ([5], [2**62], None, None),
                   {(0, -2**62): 1, (1, v1): 1, (2, v2): 1})


@pytest.mark.parametrize("engine, loops", MODES)
def test_a_filter_before_a_checked_sum_drops_the_row_that_would_overflow(engine, loops):
    # The filter drops the row whose sum would overflow (from node 5, at 2**62) before
    # the map sees it: no error, in a sequential loop too.
    df = dd.Dataflow(engine=engine, loops=loops)
    bh, base = df.new_input(["node", "v"])
    eh, edges = df.new_input(["src", "dst"])
    cap = base.iterate(lambda x: x.join(edges).filter(lambda n, v, d: v < 2**62).map(
        lambda n, v, d: (d, _hop_sum(v, 2**62)), names=["n", "v"])
        .concat(base).min("v", name="v")).capture()
    bh.insert([0, 5], [-2**62, 2**62], time=0)
    eh.insert([0, 1, 5], [1, 2, 6], time=0)
    bh.advance_to(1)
    eh.advance_to(1)
    df.run()
    if engine == "native":
        assert df._native.sequential == [loops == "sequential"]
    assert O.captured_at(cap, 0, 2) == {(0, -2**62): 1, (1, 0): 1, (2, 2**62): 1,
                                        (5, 2**62): 1}


@pytest.mark.parametrize("tail", ["sum", "filter"])
@pytest.mark.parametrize("engine", ENGINES)
def test_a_sum_or_filter_leaving_a_loop(engine, tail):
    # A sum or a filter on the way out of a loop (to its leave): the sequential loop
    # computes it as the rows leave (seqloop._leave_sums).
    df = dd.Dataflow(engine=engine, loops="sequential")
    h, c = df.new_input(["n", "v"])
    # (x - x + c, inside the loop, plus one or filtered: converges at once)
    if tail == "sum":
        cap = c.iterate(lambda x: x.negate().concat(x, c)
                        .map(lambda n, v: (n, v + 1), names=["n", "v"])).capture()
        want0, want1 = {(1, 11): 1, (2, 21): 1}, {(2, 21): 1}
    else:
        cap = c.iterate(lambda x: x.negate().concat(x, c)
                        .filter(lambda n, v: v > 15)).capture()
        want0, want1 = {(2, 20): 1}, {(2, 20): 1, (3, 30): 1}
    h.insert([1, 2], [10, 20], time=0)
    h.remove([1], [10], time=1)
    h.insert([3], [30], time=1)
    h.advance_to(2)
    df.run()
    if engine == "native":
        assert df._native.sequential == [True]
    if tail == "sum":
        want1 = {(2, 21): 1, (3, 31): 1}
    assert O.captured_at(cap, 0, 2) == want0
    assert O.captured_at(cap, 1, 2) == want1


# ---------------------------------------------------------------------- statistics

def test_node_statistics_count_the_rows_each_filter_keeps():
    """``node_stats()`` of a sequential loop whose routes filter: a filter emits the
    rows it keeps, the nodes after it take only those, and a node that several routes
    share counts its rows once. The hop's rows are split by complementary filters
    (and split again after a map), then joined back by a concat, so each pair's
    outputs must add up to its (shared) input; the sink takes what the filters kept."""
    rng = np.random.default_rng(5)
    nodes = {}

    def body(x):
        j = x.join(edges).map(lambda n, v, d: (d, v + 1), names=["n", "v"])
        lo = j.filter(lambda n, v: v < 4)
        hi = j.filter(lambda n, v: v >= 4)
        up = lo.map(lambda n, v: (n, v + 10), names=["n", "v"])
        a = up.filter(lambda n, v: v != 12)
        b = up.filter(lambda n, v: v == 12)
        cat = a.concat(b, hi, hi, base)
        out = cat.min("v", name="v")
        nodes.update(j=j._node, lo=lo._node, hi=hi._node, up=up._node, a=a._node,
                     b=b._node, cat=cat._node, arr=out._node.arranged)
        return out

    df = dd.Dataflow(engine="native", loops="sequential")
    eh, edges = df.new_input(["src", "dst"])
    bh, base = df.new_input(["node", "v"])
    cap = base.iterate(body).capture()
    ref = dd.Dataflow(engine="python")
    reh, redges = ref.new_input(["src", "dst"])
    rbh, rbase = ref.new_input(["node", "v"])
    rcap = rbase.iterate(lambda x: x.join(redges).map(
        lambda n, v, d: (d, np.where(v + 1 < 4, v + 11, v + 1)), names=["n", "v"])
        .concat(rbase).min("v", name="v")).capture()
    n = 20
    for t in range(4):
        s, d = rng.integers(0, n, 40), rng.integers(0, n, 40)
        keep = s < d                                 # a DAG: the loop settles
        for h in (eh, reh):
            h.insert(s[keep], d[keep], time=t)
        m = 6
        nb, vb = rng.integers(0, n, m), rng.integers(0, 3, m)
        for h in (bh, rbh):
            h.insert(nb, vb, time=t)
            h.advance_to(t + 1)
        eh.advance_to(t + 1)
        reh.advance_to(t + 1)
        df.run()
        ref.run()
        assert O.captured_at(cap, t, 2) == O.captured_at(rcap, t, 2)
        st = {node: (steps, i, o) for node, steps, i, o in df._native.node_stats()}
        S = {k: st[v] for k, v in nodes.items()}
        _, j_in, j_out = S["j"]
        assert j_in == j_out > 0
        # the map's rows are counted once although four routes pass it
        src = [st[node] for node in st if type(node).__name__ == "JoinNode"]
        assert len(src) == 1 and src[0][2] == j_in
        for keep_, drop in (("lo", "hi"), ("a", "b")):
            assert S[keep_][1] == S[drop][1]
            assert S[keep_][2] + S[drop][2] == S[keep_][1]
        assert S["lo"][1] == j_out
        assert S["up"][1] == S["up"][2] == S["lo"][2]
        assert S["a"][1] == S["up"][2]
        # the concat reads hi twice; the sink takes what reaches it
        enter = [st[node][2] for node in st if type(node).__name__ == "EnterNode"
                 and any(c is nodes["cat"] for c, _ in node.consumers)]
        assert len(enter) == 1
        into = S["a"][2] + S["b"][2] + 2 * S["hi"][2] + enter[0]
        assert S["cat"][1] == S["cat"][2] == into
        assert S["arr"][1] == into
    assert df._native.sequential == [True]
    for keep_, drop in (("lo", "hi"), ("a", "b")):      # (neither filter is vacuous)
        assert 0 < S[keep_][2] < S[keep_][1], (keep_, S)

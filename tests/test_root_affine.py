"""Maps that add columns or constants and filters comparing such sums, outside
sequential loops: the native engine runs them in compiled code (``kernels.runtime``'s
``K_AFFINE``, ``kernels.affine``) instead of calling back into Python for every batch.
This holds in the root scope and in loops that run round-wise.

The oracle tests compare the output accumulated at every time with the operator
applied to the accumulated input (``oracle.check``, each feeding mode, the default
engine). Separate tests check that the native engine used no callback, and that a
checked sum that overflows raises its own map's message."""
import numpy as np
import pytest

import ddnumba as dd
from ddnumba.kernels import runtime as R
from ddnumba.operators.linear import checked_sum

import oracle as O

BIG = 2**63 - 5            # added to a column, it wraps (as NumPy's int64 arithmetic does)
KV = ["k", "v"]


def _wrap(x):
    return (x + 2**63) % 2**64 - 2**63


# Each: the map on NumPy columns, and its reference on Python ints (one row).
MAPS = {
    "plus1": (lambda k, v: (k, v + 1), lambda k, v: (k, v + 1)),
    "two": (lambda k, v: (k + v, v - 3), lambda k, v: (k + v, v - 3)),
    "wrap": (lambda k, v: (k, v + BIG), lambda k, v: (k, _wrap(v + BIG))),
    "const": (lambda k, v: (v, 7, k), lambda k, v: (v, 7, k)),
    "checked": (lambda k, v: (k, checked_sum(k, v, "m: beyond int64")),
                lambda k, v: (k, k + v)),
    "one": (lambda k, v: 2 + v + k, lambda k, v: (2 + v + k,)),
}
FILTERS = {
    "lt": (lambda k, v: k < v, lambda k, v: k < v),
    "sum": (lambda k, v: (k + v >= 3) & (v != 2), lambda k, v: k + v >= 3 and v != 2),
    "const": (lambda k, v: 1 >= v, lambda k, v: v <= 1),
    "eq": (lambda k, v: k == v - 1, lambda k, v: k == v - 1),
    "or": (lambda k, v: (k < 1) | (v == k + 2), lambda k, v: k < 1 or v == k + 2),
    "not": (lambda k, v: ~((k >= 2) & (v != 3)), lambda k, v: not (k >= 2 and v != 3)),
}


def _ref_map(g):
    def ref(acc):
        out = {}
        for (k, v), c in acc.items():
            row = g(k, v)
            out[row] = out.get(row, 0) + c
        return O.clean(out)
    return ref


def _ref_filter(keep):
    return lambda acc: O.clean({r: c for r, c in acc.items() if keep(*r)})


def _callbacks(df):
    """The operators the native engine calls back into Python for."""
    return sorted(type(n).__name__ for n in df._native.callbacks.values())


@pytest.mark.parametrize("op, name", [("map", m) for m in sorted(MAPS)] +
                         [("filter", f) for f in sorted(FILTERS)])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_map_of_sums_or_filter_of_comparisons_matches_the_reference(op, name, seed):
    if op == "map":
        f, g = MAPS[name]
        build, ref = (lambda c: c.map(f)), _ref_map(g)
    else:
        pred, keep = FILTERS[name]
        build, ref = (lambda c: c.filter(pred)), _ref_filter(keep)
    s = O.random_stream(np.random.default_rng(seed), 2, 1, n=16, domain=6)
    O.check(build, ref, [(KV, s)], 1)


@pytest.mark.parametrize("seed", [1, 2])
def test_a_pipeline_of_sums_and_filters_matches_the_reference(seed):
    # two inputs changing at the same times, a filter after a map and a map after a
    # filter, a negation and a concat, into a count
    rng = np.random.default_rng(seed)
    a = O.random_stream(rng, 2, 1, n=20, domain=6)
    b = O.random_stream(rng, 2, 1, n=20, domain=6)

    def build(x, y):
        left = x.map(lambda k, v: (k, v + k + 1), names=KV).filter(lambda k, v: v > 4)
        right = y.filter(lambda k, v: k != v).map(lambda k, v: (v, k - 2), names=KV)
        return left.concat(right.negate()).map(lambda k, v: k + 0, names=["k"]).count()

    def ref(x, y):
        left = {(k, v + k + 1): c for (k, v), c in x.items() if v + k + 1 > 4}
        right = {}
        for (k, v), c in y.items():
            if k != v:
                right[(v, k - 2)] = right.get((v, k - 2), 0) - c
        keys = {}
        for acc in (left, right):
            for (k, _), c in acc.items():
                keys[(k,)] = keys.get((k,), 0) + c
        return O.ref_count(O.clean(keys))
    O.check(build, ref, [(KV, a), (KV, b)], 1)


def _run_small(df, build, rows, at=0):
    h, c = df.new_input(KV)
    cap = build(c).capture()
    if rows:
        h.insert(*[np.array(col, np.int64) for col in zip(*rows)], time=at)
    h.advance_to(at + 1)
    df.run()
    return h, cap


def test_the_native_engine_calls_back_for_none_of_them():
    df = dd.Dataflow(engine="native")
    h, cap = _run_small(df, lambda c: c.map(lambda k, v: (k, v + 1), names=KV)
                        .filter(lambda k, v: (v < 4) & (k >= 0))
                        .map(lambda k, v: (v, checked_sum(k, v, "x")), names=KV),
                        [(0, 1), (1, 2), (2, 3), (-1, 0)])
    assert _callbacks(df) == []
    kinds = [int(k) for k in df._native.kind]
    assert kinds.count(R.K_AFFINE) == 3
    assert O.captured_at(cap, 0, 2) == {(2, 2): 1, (3, 4): 1}


def test_what_is_not_a_sum_keeps_its_callback():
    df = dd.Dataflow(engine="native")
    _run_small(df, lambda c: c.map(lambda k, v: (k, v * 2), names=KV)
               .filter(lambda k, v: (v % 2 == 0) | (k < 0)), [(0, 1)])
    assert _callbacks(df) == ["FilterNode", "MapNode"]
    assert R.K_AFFINE not in [int(k) for k in df._native.kind]


@pytest.mark.parametrize("loops", ["rounds", "sequential"])
def test_a_checked_sum_raises_its_own_maps_message(loops):
    # Two maps with checked sums, outside a loop; only the second overflows.
    df = dd.Dataflow(engine="native", loops=loops)
    h, c = df.new_input(KV)
    first = c.map(lambda k, v: (k, checked_sum(v, 1, "first: beyond int64")), names=KV)
    second = c.map(lambda k, v: (k, checked_sum(v, k, "second: beyond int64")), names=KV)
    cf, cs = first.capture(), second.capture()
    h.insert(np.array([1, 2]), np.array([5, 2**62]), time=0)
    h.advance_to(1)
    df.run()
    assert O.captured_at(cs, 0, 2) == {(1, 6): 1, (2, 2**62 + 2): 1}
    assert O.captured_at(cf, 0, 2) == {(1, 6): 1, (2, 2**62 + 1): 1}
    assert _callbacks(df) == []
    h.insert(np.array([2**62]), np.array([2**62]), time=1)
    h.advance_to(2)
    with pytest.raises(OverflowError, match=r"^second: beyond int64 \(in run\(\) number 2"):
        df.run()


@pytest.mark.parametrize("engine", ["native", "python"])
def test_a_filter_whose_comparison_overflows_raises_as_the_python_engine_does(engine):
    # The predicate computes its checked sum over every row, whatever the comparison
    # before it in the conjunction gives: the row (2**62, 2**62) fails k < 0 but its
    # sum still overflows. The native engine runs the filter compiled (K_AFFINE).
    df = dd.Dataflow(engine=engine)
    h, c = df.new_input(KV)
    cap = c.filter(lambda k, v: (k < 0) & (checked_sum(k, v, "pred: beyond int64") < 9)
                   ).capture()
    h.insert(np.array([-5, 2, -1]), np.array([3, 1, 30]), time=0)
    h.advance_to(1)
    df.run()
    assert O.captured_at(cap, 0, 2) == {(-5, 3): 1}
    if engine == "native":
        assert _callbacks(df) == []
        assert [int(k) for k in df._native.kind].count(R.K_AFFINE) == 1
    h.insert(np.array([2**62]), np.array([2**62]), time=1)
    h.advance_to(2)
    with pytest.raises(OverflowError, match=r"^pred: beyond int64"):
        df.run()


def test_round_wise_loops_run_their_sums_without_callbacks():
    # bfs with the loop forced round-wise: its hop map (k + 1) and the start (r, 0)
    from ddnumba import algorithms as alg
    df = dd.Dataflow(engine="native", loops="rounds")
    ri, roots = df.new_input(["node"])
    ei, edges = df.new_input(["src", "dst"])
    cap = alg.bfs(roots, edges).capture()
    ei.insert([0, 1, 0, 2], [1, 2, 2, 3], time=0)
    ri.insert([0], time=0)
    ri.advance_to(1)
    ei.advance_to(1)
    df.run()
    assert df._native.sequential == [False]
    assert _callbacks(df) == []
    assert O.captured_at(cap, 0, 2) == {(0, 0): 1, (1, 1): 1, (2, 1): 1, (3, 2): 1}

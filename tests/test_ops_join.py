"""Oracle tests for join, join_map, semijoin and antijoin, including shared arrangements.

The join's hard case is both inputs changing at the same (or comparable) times: every
pair of updates must be produced exactly once, at the join of the two times, with the
product of the diffs. Random streams on a shared time grid exercise it constantly; the
exact tests below pin it down on literal updates.
"""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import ddnumba as dd
import oracle as O
from ddnumba.testing import assert_updates_equal
from oracle import SETTINGS, check, stream

DIMS = [1, 2]


# ---------------------------------------------------------------------- plain join


@pytest.mark.parametrize("time_dims", [1, 2, 3])
@SETTINGS
@given(data=st.data())
def test_join_key1(time_dims, data):
    a = data.draw(stream(2, time_dims, domain=4), label="a")
    b = data.draw(stream(2, time_dims, domain=4), label="b")
    check(lambda x, y: x.join(y), O.ref_join, [(["k", "a"], a), (["k", "b"], b)], time_dims)


@pytest.mark.parametrize("time_dims", DIMS)
@SETTINGS
@given(data=st.data())
def test_join_key2_uneven_arity(time_dims, data):
    a = data.draw(stream(3, time_dims, domain=3), label="a")
    b = data.draw(stream(4, time_dims, domain=3), label="b")
    check(lambda x, y: x.join(y, key=2), lambda p, q: O.ref_join(p, q, key=2),
          [(["k1", "k2", "a"], a), (["k1", "k2", "b", "c"], b)], time_dims)


@pytest.mark.parametrize("time_dims", DIMS)
@SETTINGS
@given(data=st.data())
def test_join_against_key_only_side(time_dims, data):
    a = data.draw(stream(2, time_dims, domain=4), label="a")
    b = data.draw(stream(1, time_dims, domain=4), label="keys")
    check(lambda x, y: (x.join(y), y.join(x)),
          lambda p, q: (O.ref_join(p, q), O.ref_join(q, p)),
          [(["k", "a"], a), (["k"], b)], time_dims)


@pytest.mark.parametrize("time_dims", DIMS)
@SETTINGS
@given(data=st.data())
def test_self_join(time_dims, data):
    a = data.draw(stream(2, time_dims, domain=4), label="a")
    check(lambda x: x.join(x), lambda p: O.ref_join(p, p), [(["k", "v"], a)], time_dims)


@pytest.mark.parametrize("time_dims", DIMS)
@SETTINGS
@given(data=st.data())
def test_shared_arrangement_two_joins(time_dims, data):
    a1 = data.draw(stream(2, time_dims, domain=4), label="a1")
    a2 = data.draw(stream(2, time_dims, domain=4), label="a2")
    b = data.draw(stream(2, time_dims, domain=4), label="b")

    def build(x1, x2, y):
        arr = y.arrange_by_key()
        return x1.join(arr), x2.join(arr), x1.join(y)

    check(build, lambda p1, p2, q: (O.ref_join(p1, q), O.ref_join(p2, q), O.ref_join(p1, q)),
          [(["k", "a"], a1), (["k", "c"], a2), (["k", "b"], b)], time_dims)


@pytest.mark.parametrize("time_dims", DIMS)
@SETTINGS
@given(data=st.data())
def test_join_with_own_arrangement_and_by_names(time_dims, data):
    a = data.draw(stream(3, time_dims, domain=3), label="a")

    def build(x):
        by1 = x.arrange_by_key()
        by2 = x.arrange_by_key(key=["k1", "k2"])
        return x.join(by1), x.join(by2, key=2)

    check(build, lambda p: (O.ref_join(p, p), O.ref_join(p, p, key=2)),
          [(["k1", "k2", "v"], a)], time_dims)


def test_join_names():
    df = dd.Dataflow(time_dims=1)
    _, a = df.new_input(["k", "v"])
    _, b = df.new_input(["k", "w"])
    _, c = df.new_input(["k", "v"])
    _, d = df.new_input(["k1", "k2", "x"])
    _, e = df.new_input(["j1", "j2", "y", "z"])
    assert a.join(b).names == ["k", "v", "w"]
    assert a.join(c).names == ["k", "v", "v_right"]
    assert a.join(a).arity == 3
    assert d.join(e, key=2).names == ["k1", "k2", "x", "y", "z"]
    assert a.join(b.arrange_by_key()).names == ["k", "v", "w"]


# ------------------------------------------------------ exact: no double counting


@pytest.mark.parametrize("step", [False, True])
def test_join_same_time_counted_once_1d(step):
    df = dd.Dataflow(time_dims=1)
    ia, a = df.new_input(["k", "a"])
    ib, b = df.new_input(["k", "b"])
    cap = a.join(b).capture()
    ia.insert([1, 2], [10, 20], time=0)
    ib.insert([1], [100], time=0)
    if step:
        ia.advance_to(1)
        ib.advance_to(1)
        df.run()
        assert_updates_equal(cap, [((1, 10, 100), 0, 1)])
    ia.update([1], [10], time=1, diff=2)
    ib.update([1, 2], [100, 200], time=1, diff=[-1, 3])
    ia.advance_to(2)
    ib.advance_to(2)
    df.run()
    # At time 1: a = {(1,10): 3, (2,20): 1}, b = {(2,200): 3}.
    assert_updates_equal(cap, [((1, 10, 100), 0, 1), ((1, 10, 100), 1, -1),
                               ((2, 20, 200), 1, 3)])


@pytest.mark.parametrize("step", [False, True])
def test_join_incomparable_times_2d(step):
    """A change at (0,1) on one side meets a change at (1,0) on the other at (1,1)."""
    df = dd.Dataflow(time_dims=2)
    ia, a = df.new_input(["k", "a"])
    ib, b = df.new_input(["k", "b"])
    cap = a.join(b).capture()
    ia.update([5, 5], [1, 2], time=np.array([[0, 1], [0, 0]]), diff=[1, 2])
    ib.update([5], [9], time=np.array([[0, 1]]), diff=[3])
    if step:
        ia.advance_to((1, 0))
        ib.advance_to((1, 0))
        df.run()
    ib.update([5], [8], time=(1, 0), diff=-1)
    ia.update([5], [2], time=(1, 1), diff=-2)
    ia.advance_to((2, 0))
    ib.advance_to((2, 0))
    df.run()
    assert_updates_equal(cap, [
        ((5, 1, 9), (0, 1), 3), ((5, 2, 9), (0, 1), 6),
        ((5, 1, 8), (1, 1), -1), ((5, 2, 8), (1, 0), -2),
        ((5, 2, 9), (1, 1), -6), ((5, 2, 8), (1, 1), 2),
    ])


# ------------------------------------------------------------------------ join_map


def pick(k, a, b):
    return a * 10 + b, k


@pytest.mark.parametrize("time_dims", DIMS)
@SETTINGS
@given(data=st.data())
def test_join_map(time_dims, data):
    a = data.draw(stream(2, time_dims, domain=4), label="a")
    b = data.draw(stream(2, time_dims, domain=4), label="b")
    check(lambda x, y: x.join_map(y, pick, names=["ab", "k"]),
          lambda p, q: O.ref_map(pick, 3)(O.clean(O.ref_join(p, q))),
          [(["k", "a"], a), (["k", "b"], b)], time_dims)


def test_join_map_names():
    df = dd.Dataflow(time_dims=1)
    _, a = df.new_input(["k", "a"])
    _, b = df.new_input(["k", "b"])
    assert a.join_map(b, pick, names=["ab", "k"]).names == ["ab", "k"]
    assert a.join_map(b, lambda k, x, y: x + y).arity == 1


# ------------------------------------------------------------------------ semijoin


@pytest.mark.parametrize("time_dims", DIMS)
@SETTINGS
@given(data=st.data())
def test_semijoin(time_dims, data):
    a = data.draw(stream(2, time_dims, domain=4), label="a")
    keys = data.draw(stream(1, time_dims, domain=4), label="keys")
    check(lambda x, y: x.semijoin(y), O.ref_semijoin, [(["k", "v"], a), (["k"], keys)],
          time_dims)


@pytest.mark.parametrize("time_dims", DIMS)
@SETTINGS
@given(data=st.data())
def test_semijoin_key2(time_dims, data):
    a = data.draw(stream(3, time_dims, domain=3), label="a")
    keys = data.draw(stream(2, time_dims, domain=3), label="keys")
    check(lambda x, y: x.semijoin(y, key=2), lambda p, q: O.ref_semijoin(p, q, key=2),
          [(["k1", "k2", "v"], a), (["k1", "k2"], keys)], time_dims)


def test_semijoin_names():
    df = dd.Dataflow(time_dims=1)
    _, a = df.new_input(["k", "v"])
    _, ks = df.new_input(["key"])
    assert a.semijoin(ks).names == ["k", "v"]
    assert a.antijoin(ks).names == ["k", "v"]


# ------------------------------------------------------------------------ antijoin


@pytest.mark.parametrize("time_dims", DIMS)
@SETTINGS
@given(data=st.data())
def test_antijoin(time_dims, data):
    a = data.draw(stream(2, time_dims, domain=4), label="a")
    keys = data.draw(stream(1, time_dims, domain=4), label="keys")
    check(lambda x, y: x.antijoin(y), O.ref_antijoin, [(["k", "v"], a), (["k"], keys)],
          time_dims)


@pytest.mark.parametrize("time_dims", DIMS)
@SETTINGS
@given(data=st.data())
def test_antijoin_distinct_keys(time_dims, data):
    """The usual DD idiom: the key side is a set, so the result is a - (a with key)."""
    a = data.draw(stream(2, time_dims, domain=4), label="a")
    keys = data.draw(stream(2, time_dims, domain=4, nonneg=True), label="kv")

    def build(x, y):
        ks = y.map(lambda k, v: k, names=["k"]).distinct()
        return x.antijoin(ks), x.semijoin(ks)

    def ref(p, q):
        ks = O.ref_distinct(O.clean(O.ref_map(lambda k, v: k, 2)(q)))
        return O.ref_antijoin(p, ks), O.ref_semijoin(p, ks)

    check(build, ref, [(["k", "v"], a), (["k", "v"], keys)], time_dims)


# ------------------------------------------------------------------------ pipelines


@pytest.mark.parametrize("time_dims", DIMS)
@SETTINGS
@given(data=st.data())
def test_join_then_count(time_dims, data):
    a = data.draw(stream(2, time_dims, domain=4), label="a")
    b = data.draw(stream(2, time_dims, domain=4), label="b")

    def build(x, y):
        j = x.join(y)
        return j.count(), j.map(lambda k, p, q: (p, q), names=["p", "q"]).count()

    def ref(p, q):
        j = O.clean(O.ref_join(p, q))
        return O.ref_count(j), O.ref_count(O.clean(O.ref_map(lambda k, x, y: (x, y), 3)(j)))

    check(build, ref, [(["k", "a"], a), (["k", "b"], b)], time_dims)


@pytest.mark.parametrize("time_dims", DIMS)
@SETTINGS
@given(data=st.data())
def test_two_hop_join(time_dims, data):
    """Edges joined with themselves through a re-keying map: paths of length two."""
    e = data.draw(stream(2, time_dims, domain=4), label="edges")

    def build(edges):
        by_dst = edges.map(lambda s, d: (d, s), names=["mid", "src"])
        return by_dst.join(edges.arrange_by_key()).map(
            lambda m, s, d: (s, d), names=["src", "dst"]).distinct()

    def ref(p):
        by_dst = O.clean(O.ref_map(lambda s, d: (d, s), 2)(p))
        paths = O.clean(O.ref_map(lambda m, s, d: (s, d), 3)(O.clean(O.ref_join(by_dst, p))))
        return O.ref_distinct(paths)

    check(build, ref, [(["src", "dst"], e)], time_dims)


def test_arranged_join_key_must_be_the_arrangements():
    """``Arranged.join(key=)`` accepts only the arrangement's own key; another is
    refused before any operator is added (it used to arrange ``other`` first)."""
    df = dd.Dataflow()
    ai, a = df.new_input(["k", "x"])
    bi, b = df.new_input(["k", "y"])
    arr = a.arrange_by_key(key=1)
    before = len(list(df.root.all_nodes()))
    with pytest.raises(ValueError, match=r"keyed by 1 column\(s\) \['k'\]; key=2"):
        arr.join(b, key=2)
    assert len(list(df.root.all_nodes())) == before
    out = arr.join(b, key=["k"]).capture()
    ai.insert([1], [10], time=0)
    bi.insert([1], [20], time=0)
    ai.close(); bi.close()
    df.run()
    assert out.updates().to_pylist() == [{"k": 1, "x": 10, "y": 20, "time": 0, "diff": 1}]


def test_semijoin_other_must_be_a_collection_of_keys():
    df = dd.Dataflow()
    ai, a = df.new_input(["k", "x"])
    with pytest.raises(TypeError, match="semijoin: expected a Collection"):
        a.semijoin([1, 2])
    with pytest.raises(ValueError, match="exactly 1 key column"):
        a.semijoin(a)

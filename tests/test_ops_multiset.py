"""Oracle tests for the multiset operators on whole rows: union (max of counts),
intersect (min) and except_ (max(a - b, 0)).

Streams here keep every accumulation non-negative (``nonneg=True``), the domain on which
the three operators have their textbook meaning.
"""
import pytest
from hypothesis import given
from hypothesis import strategies as st

import ddnumba as dd
import oracle as O
from ddnumba.testing import assert_updates_equal
from oracle import SETTINGS, check, stream

DIMS = [1, 2]
KV = ["k", "v"]


@pytest.mark.parametrize("time_dims", DIMS)
@SETTINGS
@given(data=st.data())
def test_union_intersect_except(time_dims, data):
    a = data.draw(stream(2, time_dims, domain=3, nonneg=True), label="a")
    b = data.draw(stream(2, time_dims, domain=3, nonneg=True), label="b")
    check(lambda x, y: (x.union(y), x.intersect(y), x.except_(y), y.except_(x)),
          lambda p, q: (O.ref_union(p, q), O.ref_intersect(p, q), O.ref_except(p, q),
                        O.ref_except(q, p)),
          [(KV, a), (KV, b)], time_dims)


@pytest.mark.parametrize("time_dims", DIMS)
@SETTINGS
@given(data=st.data())
def test_with_itself(time_dims, data):
    a = data.draw(stream(1, time_dims, nonneg=True), label="a")
    check(lambda x: (x.union(x), x.intersect(x), x.except_(x), x.concat(x).except_(x)),
          lambda p: (p, p, {}, p), [(["x"], a)], time_dims)


@pytest.mark.parametrize("time_dims", DIMS)
@SETTINGS
@given(data=st.data())
def test_multiset_identities(time_dims, data):
    """union = a + b - intersect, and symmetric difference, through a small pipeline."""
    a = data.draw(stream(3, time_dims, domain=2, nonneg=True), label="a")
    b = data.draw(stream(3, time_dims, domain=2, nonneg=True), label="b")

    def build(x, y):
        sym = x.except_(y).concat(y.except_(x))
        via_sum = x.concat(y, x.intersect(y).negate())
        return sym, via_sum, x.union(y).except_(x.intersect(y))

    def ref(p, q):
        sym = O.ref_concat(O.ref_except(p, q), O.ref_except(q, p))
        return sym, O.ref_union(p, q), sym

    check(build, ref, [(["a", "b", "c"], a), (["a", "b", "c"], b)], time_dims)


@pytest.mark.parametrize("time_dims", DIMS)
@SETTINGS
@given(data=st.data())
def test_multiset_after_map(time_dims, data):
    """Inputs that are themselves derived (map merges rows) feed the multiset ops."""
    a = data.draw(stream(2, time_dims, nonneg=True), label="a")
    b = data.draw(stream(2, time_dims, nonneg=True), label="b")
    key = lambda k, v: k  # noqa: E731

    def build(x, y):
        kx, ky = x.map(key, names=["k"]), y.map(key, names=["k"])
        return kx.union(ky), kx.intersect(ky), kx.except_(ky)

    def ref(p, q):
        kp, kq = O.clean(O.ref_map(key, 2)(p)), O.clean(O.ref_map(key, 2)(q))
        return O.ref_union(kp, kq), O.ref_intersect(kp, kq), O.ref_except(kp, kq)

    check(build, ref, [(KV, a), (KV, b)], time_dims)


def test_union_exact_2d():
    df = dd.Dataflow(time_dims=2)
    ia, a = df.new_input(["x"])
    ib, b = df.new_input(["x"])
    cap = a.union(b).capture()
    ia.update([1], time=(0, 1), diff=2)
    ib.update([1], time=(1, 0), diff=3)
    ia.advance_to((2, 0))
    ib.advance_to((2, 0))
    df.run()
    # Counts of row 1: (0,1) -> max(2,0) = 2; (1,0) -> 3; (1,1) -> max(2,3) = 3.
    assert_updates_equal(cap, [((1,), (0, 1), 2), ((1,), (1, 0), 3), ((1,), (1, 1), -2)])


def test_multiset_names():
    df = dd.Dataflow(time_dims=1)
    _, a = df.new_input(["k", "v"])
    _, b = df.new_input(["k", "v"])
    assert a.union(b).names == ["k", "v"]
    assert a.intersect(b).names == ["k", "v"]
    assert a.except_(b).names == ["k", "v"]

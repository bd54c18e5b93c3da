"""Arrangements shared at the root scope.

At the root, joins and ``count`` / ``sum`` of one collection by one key width read one
arrangement (``Collection._shared_arrangement``); other reduces, and every use inside a
loop, arrange anew. The oracle tests put several readers on one arrangement (joins on
either side, a self-join, aggregates, different key widths) and compare every output at
every time with the reference, 1-D (native engine) and 2-D (Python engine), and with
two workers.
"""
import pytest
from hypothesis import given
from hypothesis import strategies as st

import ddnumba as dd
import oracle as O
from ddnumba.operators.arrange import ArrangeNode
from oracle import SETTINGS, check, stream


def _build(x, y):
    return (x.join(y), y.join(x), x.count(), x.sum("a"), x.join(y).count(),
            x.join(x), x.count(key=2), x.distinct())


def _reference(p, q):
    j = O.ref_join(p, q)
    return (j, O.ref_join(q, p), O.ref_count(p), O.ref_sum(p, 0), O.ref_count(j),
            O.ref_join(p, p), O.ref_count(p, key=2), O.ref_distinct(p))


@pytest.mark.parametrize("time_dims", [1, 2])
@SETTINGS
@given(data=st.data())
def test_readers_of_one_arrangement_match_the_oracle(time_dims, data):
    a = data.draw(stream(3, time_dims, domain=3), label="a")
    b = data.draw(stream(2, time_dims, domain=3), label="b")
    check(_build, _reference, [(["k", "a", "c"], a), (["k", "b"], b)], time_dims)


@SETTINGS
@given(data=st.data())
def test_shared_arrangements_with_two_workers(data):
    a = data.draw(stream(3, 1, domain=3), label="a")
    b = data.draw(stream(2, 1, domain=3), label="b")
    check(_build, _reference, [(["k", "a", "c"], a), (["k", "b"], b)], 1,
          modes=("step",), workers=2)


def _arrangements(scope):
    return [n for n in scope.nodes if isinstance(n, ArrangeNode)]


def test_one_arrangement_per_collection_and_key_width_at_the_root():
    df = dd.Dataflow()
    _, a = df.new_input(["k", "x", "y"])
    _, b = df.new_input(["k", "z"])
    a.join(b)
    b.join(a)
    a.count()
    a.sum("x")
    a.semijoin(b.map(lambda k, z: k, names=["k"]))
    by_a = [n for n in _arrangements(df.root) if n.inputs[0] is a._node]
    assert [n.kw for n in by_a] == [1]
    assert len(by_a[0].consumers) == 5          # two joins, count, sum, semijoin
    a.count(key=2)
    a.distinct()                                # keeps its own (input and output fused)
    a.min("x")
    by_a = [n for n in _arrangements(df.root) if n.inputs[0] is a._node]
    assert sorted(n.kw for n in by_a) == [1, 1, 2, 3]
    # an explicit arrangement stays the user's own
    arr = a.arrange_by_key()
    assert arr._node not in by_a


def test_no_sharing_inside_loops():
    df = dd.Dataflow()
    _, a = df.new_input(["k", "x"])
    seen = {}

    def body(r):
        out = r.join(r).map(lambda k, x, y: (k, y), names=["k", "x"]).concat(r)
        out.count()
        seen["scope"] = r.scope
        seen["var"] = r._node
        return out.distinct()

    a.iterate(body)
    inner = [n for n in _arrangements(seen["scope"]) if n.inputs[0] is seen["var"]]
    assert len(inner) == 2                      # the self-join's two sides


@pytest.mark.parametrize("engine", ["python", "native"])
def test_operators_cannot_be_added_after_a_run(engine):
    # An operator added after a run would see only later updates (the Python engine
    # used to allow it, and a count added late missed the collection as it was): both
    # engines refuse, link nothing, and the dataflow runs on unchanged.
    df = dd.Dataflow(engine=engine)
    ai, a = df.new_input(["k", "x"])
    cap = a.count().capture()
    ai.insert([1, 1], [2, 3], time=0)
    ai.advance_to(1)
    df.run()
    consumers = len(a._node.consumers)
    for late in (lambda: a.count(), lambda: a.capture(), lambda: a.map(lambda k, x: k)):
        with pytest.raises(RuntimeError, match="after the first run"):
            late()
    assert len(a._node.consumers) == consumers
    ai.insert([1], [4], time=1)
    ai.advance_to(2)
    df.run()
    assert cap.at(1).to_pylist() == [{"k": 1, "count": 3, "count_": 1}]

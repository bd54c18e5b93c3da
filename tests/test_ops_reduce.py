"""Oracle tests for the reduce family: count, sum, min, max, distinct, threshold, top_k
and reduce with a user Numba kernel.

With partially ordered times a reduction's output can change at the *join* of input
times, where no input changed (ALGORITHMS.md, "Reduce with partially ordered times");
the 2-D grid streams and the two exact cases from the design notes check exactly that.
Conventions (DESIGN.md section 5): a group sees its rows with non-zero accumulated count;
``count``/``sum`` emit a row for every non-empty group (even when the total is 0);
``distinct``/``min``/``max``/``top_k`` consider rows with positive count only.
"""
import numba
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import ddnumba as dd
import oracle as O
from ddnumba.testing import assert_collection_equal, assert_updates_equal
from oracle import SETTINGS, check, stream

DIMS = [1, 2]
KV = ["k", "v"]


# ------------------------------------------------------------------ exact must-shows


def _length_program(df):
    inp, words = df.new_input(["code"])
    # Strings encoded a=1, b=2, cc=3; length(a) = length(b) = 1, length(cc) = 2.
    lengths = words.map(lambda code: (np.where(code == 3, 2, 1), code),
                        names=["length", "code"])
    return inp, lengths.distinct().count().capture()


POST_2015_INPUT = {
    (0, 0): ([1, 2, 3], [1, 3, 2]),
    (0, 1): ([1, 2], [-1, -3]),
    (1, 0): ([1, 2], [-1, -1]),
    (1, 1): ([1, 2], [1, 2]),
}
POST_2015_OUTPUT = [
    ((1, 2), (0, 0), 1), ((2, 1), (0, 0), 1),
    ((1, 2), (0, 1), -1),
    ((1, 1), (1, 0), 1), ((1, 2), (1, 0), -1),
    ((1, 2), (1, 1), 1),
]


def test_2015_post_example_all_at_once():
    df = dd.Dataflow(time_dims=2)
    inp, cap = _length_program(df)
    for t, (codes, diffs) in POST_2015_INPUT.items():
        inp.update(codes, time=t, diff=diffs)
    inp.advance_to((2, 0))
    df.run()
    assert_updates_equal(cap, POST_2015_OUTPUT)
    assert_collection_equal(cap.at((1, 1)), {(1, 1): 1, (2, 1): 1})
    assert_collection_equal(cap.at((0, 1)), {(2, 1): 1})


def test_2015_post_example_step_by_step():
    df = dd.Dataflow(time_dims=2)
    inp, cap = _length_program(df)
    for t in [(0, 0), (0, 1)]:
        inp.update(POST_2015_INPUT[t][0], time=t, diff=POST_2015_INPUT[t][1])
    inp.advance_to((1, 0))
    df.run()
    assert_updates_equal(cap, [u for u in POST_2015_OUTPUT if u[1][0] == 0])
    for t in [(1, 1), (1, 0)]:  # any order at or after the frontier is allowed
        inp.update(POST_2015_INPUT[t][0], time=t, diff=POST_2015_INPUT[t][1])
    inp.close()
    df.run()
    assert_updates_equal(cap, POST_2015_OUTPUT)


@pytest.mark.parametrize("mode", ["all", "step", "close"])
def test_count_changes_at_join_of_input_times(mode):
    df = dd.Dataflow(time_dims=2)
    inp, c = df.new_input(["k", "v"])
    cap = c.count().capture()
    if mode == "step":
        inp.insert([0], [10], time=(0, 1))
        inp.advance_to((1, 0))
        df.run()
        assert_updates_equal(cap, [((0, 1), (0, 1), 1)])
        inp.insert([0], [20], time=(1, 0))
        inp.advance_to((2, 0))
    else:
        inp.insert([0, 0], [10, 20], time=np.array([[0, 1], [1, 0]]))
        inp.close() if mode == "close" else inp.advance_to((2, 0))
    df.run()
    assert_updates_equal(cap, [((0, 1), (0, 1), 1), ((0, 1), (1, 0), 1),
                               ((0, 1), (1, 1), -2), ((0, 2), (1, 1), 1)])


def test_count_of_group_that_sums_to_zero():
    """A non-empty group whose counts sum to zero still has a count row, (key, 0)."""
    df = dd.Dataflow(time_dims=1)
    inp, c = df.new_input(["k", "v"])
    cap = c.count().capture()
    inp.update([0, 0, 1], [1, 2, 1], time=0, diff=[1, -1, 2])
    inp.advance_to(1)
    df.run()
    assert_updates_equal(cap, [((0, 0), 0, 1), ((1, 2), 0, 1)])


# ------------------------------------------------------------------------- count


@pytest.mark.parametrize("time_dims", [1, 2, 3])
@SETTINGS
@given(data=st.data())
def test_count(time_dims, data):
    s = data.draw(stream(2, time_dims), label="input")
    check(lambda c: c.count(), O.ref_count, [(KV, s)], time_dims)


@pytest.mark.parametrize("time_dims", DIMS)
@SETTINGS
@given(data=st.data())
def test_count_whole_row_and_key2(time_dims, data):
    s = data.draw(stream(3, time_dims, domain=3), label="input")
    one = data.draw(stream(1, time_dims), label="keys")
    check(lambda c, k: (c.count(key=2), k.count(), c.count(key=3)),
          lambda p, q: (O.ref_count(p, 2), O.ref_count(q), O.ref_count(p, 3)),
          [(["a", "b", "c"], s), (["k"], one)], time_dims)


def _swap(k, v):
    return v, k


@pytest.mark.parametrize("time_dims", DIMS)
@SETTINGS
@given(data=st.data())
def test_count_over_collections_that_cannot_go_negative(time_dims, data):
    """Over a collection that never holds a negative count (distincts, and what map,
    concat and join make of them) count reads the key columns alone; against the
    oracle from inputs with negative counts and retractions, and next to a count of
    an input (which may go negative, so is counted by its rows)."""
    a = data.draw(stream(2, time_dims, domain=4), label="a")
    b = data.draw(stream(2, time_dims, domain=4), label="b")

    def build(x, y):
        d, e = x.distinct(), y.distinct()
        return (d.count(), d.map(_swap, names=["v", "k"]).count(),
                d.join(e).count(), d.concat(e).count(), x.count())

    def ref(x, y):
        d, e = O.ref_distinct(x), O.ref_distinct(y)
        return (O.ref_count(d), O.ref_count(O.clean(O.ref_map(_swap, 2)(d))),
                O.ref_count(O.clean(O.ref_join(d, e))),
                O.ref_count(O.clean(O.ref_concat(d, e))), O.ref_count(x))

    check(build, ref, [(KV, a), (KV, b)], time_dims)


def test_count_reads_keys_alone_only_where_counts_cannot_go_negative():
    df = dd.Dataflow()
    i, c = df.new_input(KV)
    d = c.distinct()

    def counted(coll):
        # the collection the count's arrangement reads
        return coll._node.inputs[0].inputs[0]

    assert counted(d.count()).kind == "map"                # keys alone
    assert counted(d.join(d).count()).kind == "map"
    loop = d.iterate(lambda x: x.map(_swap, names=KV).concat(d).distinct())
    assert counted(loop.count()).kind == "map"
    assert counted(c.count()) is c._node                   # an input: by its rows
    assert counted(d.negate().count()).kind == "negate"
    assert counted(d.concat(c).count()).kind == "concat"
    assert counted(d.count(key=2)).kind == "reduce"        # whole rows are the key


@pytest.mark.parametrize("time_dims", DIMS)
@SETTINGS
@given(data=st.data())
def test_count_of_counts(time_dims, data):
    s = data.draw(stream(2, time_dims, nonneg=True), label="input")
    check(lambda c: c.count().map(lambda k, n: n, names=["n"]).count(),
          lambda a: O.ref_count(O.clean(O.ref_map(lambda k, n: n, 2)(O.ref_count(a)))),
          [(KV, s)], time_dims)


# --------------------------------------------------------------------------- sum


@pytest.mark.parametrize("time_dims", DIMS)
@SETTINGS
@given(data=st.data())
def test_sum(time_dims, data):
    s = data.draw(stream(2, time_dims), label="input")
    check(lambda c: c.sum("v"), lambda a: O.ref_sum(a, 0), [(KV, s)], time_dims)


@pytest.mark.parametrize("time_dims", DIMS)
@SETTINGS
@given(data=st.data())
def test_sum_key2_second_value_column(time_dims, data):
    s = data.draw(stream(4, time_dims, domain=3), label="input")
    check(lambda c: (c.sum("y", key=2), c.sum("x", key=2)),
          lambda a: (O.ref_sum(a, 1, key=2), O.ref_sum(a, 0, key=2)),
          [(["k1", "k2", "x", "y"], s)], time_dims)


def test_sum_emitted_when_zero():
    df = dd.Dataflow(time_dims=1)
    inp, c = df.new_input(["k", "v"])
    cap = c.sum("v").capture()
    inp.update([7, 7, 8], [0, 3, 5], time=0, diff=[4, 1, 2])
    inp.update([7], [3], time=1, diff=-1)
    inp.advance_to(2)
    df.run()
    assert_updates_equal(cap, [((7, 3), 0, 1), ((8, 10), 0, 1),
                               ((7, 3), 1, -1), ((7, 0), 1, 1)])


# ---------------------------------------------------------------------- min / max


@pytest.mark.parametrize("time_dims", DIMS)
@SETTINGS
@given(data=st.data())
def test_min_max(time_dims, data):
    s = data.draw(stream(2, time_dims), label="input")
    check(lambda c: (c.min("v"), c.max("v")), lambda a: (O.ref_min(a, 0), O.ref_max(a, 0)),
          [(KV, s)], time_dims)


@pytest.mark.parametrize("time_dims", DIMS)
@SETTINGS
@given(data=st.data())
def test_min_max_nonneg_key2(time_dims, data):
    s = data.draw(stream(4, time_dims, domain=3, nonneg=True), label="input")
    check(lambda c: (c.min("y", key=2), c.max("x", key=2)),
          lambda a: (O.ref_min(a, 1, key=2), O.ref_max(a, 0, key=2)),
          [(["k1", "k2", "x", "y"], s)], time_dims)


# ----------------------------------------------------------------------- distinct


@pytest.mark.parametrize("time_dims", DIMS)
@SETTINGS
@given(data=st.data())
def test_distinct(time_dims, data):
    s1 = data.draw(stream(1, time_dims), label="one column")
    s2 = data.draw(stream(2, time_dims), label="two columns")
    s3 = data.draw(stream(3, time_dims, domain=2), label="three columns")
    check(lambda a, b, c: (a.distinct(), b.distinct(), c.distinct()),
          lambda p, q, r: (O.ref_distinct(p), O.ref_distinct(q), O.ref_distinct(r)),
          [(["a"], s1), (KV, s2), (["x", "y", "z"], s3)], time_dims)


@pytest.mark.parametrize("time_dims", DIMS)
@SETTINGS
@given(data=st.data())
def test_distinct_of_concat_with_self(time_dims, data):
    s = data.draw(stream(2, time_dims, nonneg=True), label="input")
    check(lambda c: c.concat(c).distinct(), O.ref_distinct, [(KV, s)], time_dims)


# ---------------------------------------------------------------------- threshold


def at_least_two(c):
    return np.where(c >= 2, c - 1, 0)


def mod_three(c):
    return c % 3


@pytest.mark.parametrize("time_dims", DIMS)
@SETTINGS
@given(data=st.data())
def test_threshold(time_dims, data):
    s = data.draw(stream(2, time_dims), label="input")
    check(lambda c: (c.threshold(at_least_two), c.threshold(mod_three)),
          lambda a: (O.ref_threshold(at_least_two)(a), O.ref_threshold(mod_three)(a)),
          [(KV, s)], time_dims)


# -------------------------------------------------------------------------- top_k


@pytest.mark.parametrize("time_dims", DIMS)
@SETTINGS
@given(data=st.data())
def test_top_k(time_dims, data):
    s = data.draw(stream(2, time_dims), label="input")
    check(lambda c: (c.top_k(1), c.top_k(2), c.top_k(3)),
          lambda a: (O.ref_top_k(a, 1), O.ref_top_k(a, 2), O.ref_top_k(a, 3)),
          [(KV, s)], time_dims)


@pytest.mark.parametrize("time_dims", DIMS)
@SETTINGS
@given(data=st.data())
def test_top_k_wide_values_and_key2(time_dims, data):
    s = data.draw(stream(3, time_dims, domain=3, nonneg=True), label="input")
    check(lambda c: (c.top_k(2), c.top_k(1, key=2)),
          lambda a: (O.ref_top_k(a, 2), O.ref_top_k(a, 1, key=2)),
          [(["k", "x", "y"], s)], time_dims)


def test_top_k_counts_multiplicity():
    df = dd.Dataflow(time_dims=1)
    inp, c = df.new_input(["k", "v"])
    cap = c.top_k(3).capture()
    inp.update([0, 0, 0, 1], [5, 1, 2, 9], time=0, diff=[4, 2, -1, 1])
    inp.advance_to(1)
    df.run()
    # Key 0: value 2 has a negative count and is ignored; 1 twice, then 5 once.
    assert_updates_equal(cap, [((0, 1), 0, 2), ((0, 5), 0, 1), ((1, 9), 0, 1)])


# -------------------------------------------------------------- reduce (user logic)


@numba.njit
def total_and_max(vals, counts):
    """Row (0, total count) once and row (1, largest first value) once per value row."""
    n = vals.shape[0]
    out = np.empty((2, 2), np.int64)
    oc = np.empty(2, np.int64)
    if n == 0:
        return out[:0], oc[:0]
    total = 0
    mx = vals[0, 0]
    for i in range(n):
        total += counts[i]
        mx = max(mx, vals[i, 0])
    out[0, 0], out[0, 1], oc[0] = 0, total, 1
    out[1, 0], out[1, 1], oc[1] = 1, mx, n
    return out, oc


def py_total_and_max(group):
    return [((0, sum(c for _, c in group)), 1), ((1, max(v[0] for v, _ in group)), len(group))]


@numba.njit
def mode_if_positive(vals, counts):
    """The value with the largest count (smallest on ties); nothing when total <= 0."""
    out = np.empty((1, 1), np.int64)
    oc = np.ones(1, np.int64)
    total = 0
    for i in range(vals.shape[0]):
        total += counts[i]
    if total <= 0:
        return out[:0], oc[:0]
    best = 0
    for i in range(1, vals.shape[0]):
        if counts[i] > counts[best] or (counts[i] == counts[best] and vals[i, 0] < vals[best, 0]):
            best = i
    out[0, 0] = vals[best, 0]
    return out, oc


def py_mode_if_positive(group):
    if sum(c for _, c in group) <= 0:
        return []
    v, _ = min(group, key=lambda vc: (-vc[1], vc[0]))
    return [((v[0],), 1)]


@numba.njit
def weighted_difference(vals, counts):
    """One row: sum of (x - y) * count over the group's rows, with count 2."""
    s = 0
    for i in range(vals.shape[0]):
        s += (vals[i, 0] - vals[i, 1]) * counts[i]
    out = np.empty((1, 1), np.int64)
    out[0, 0] = s
    return out, np.full(1, 2, np.int64)


def py_weighted_difference(group):
    return [((sum((v[0] - v[1]) * c for v, c in group),), 2)]


@pytest.mark.parametrize("time_dims", DIMS)
@SETTINGS
@given(data=st.data())
def test_reduce_user_logic(time_dims, data):
    s = data.draw(stream(2, time_dims), label="input")
    check(lambda c: (c.reduce(total_and_max, names=["k", "tag", "x"]),
                     c.reduce(mode_if_positive, names=["k", "mode"])),
          lambda a: (O.ref_reduce(py_total_and_max, a), O.ref_reduce(py_mode_if_positive, a)),
          [(KV, s)], time_dims)


@pytest.mark.parametrize("time_dims", DIMS)
@SETTINGS
@given(data=st.data())
def test_reduce_user_logic_wide(time_dims, data):
    s = data.draw(stream(4, time_dims, domain=3), label="input")
    check(lambda c: (c.reduce(weighted_difference, names=["k", "d"]),
                     c.reduce(total_and_max, key=2, names=["k1", "k2", "tag", "x"])),
          lambda a: (O.ref_reduce(py_weighted_difference, a),
                     O.ref_reduce(py_total_and_max, a, key=2)),
          [(["k1", "k2", "x", "y"], s)], time_dims)


def test_reduce_names():
    df = dd.Dataflow(time_dims=1)
    _, c = df.new_input(["k", "v"])
    assert c.reduce(total_and_max, names=["k", "tag", "x"]).names == ["k", "tag", "x"]
    assert c.reduce(mode_if_positive, names=["key", "m"]).arity == 2
    assert c.distinct().names == ["k", "v"]
    assert c.threshold(mod_three).names == ["k", "v"]
    assert c.top_k(2).names == ["k", "v"]
    assert c.count().arity == 2 and c.count().names[0] == "k"
    assert c.sum("v").arity == 2 and c.min("v").arity == 2 and c.max("v").arity == 2


# ------------------------------------------------------------------------ pipelines


def code_length(code):
    return np.where(code % 4 == 3, 2, 1), code


@pytest.mark.parametrize("time_dims", DIMS)
@SETTINGS
@given(data=st.data())
def test_2015_post_program_random(time_dims, data):
    s = data.draw(stream(1, time_dims, domain=8), label="codes")
    check(lambda c: c.map(code_length, names=["length", "code"]).distinct().count(),
          lambda a: O.ref_count(O.ref_distinct(O.clean(O.ref_map(code_length, 1)(a)))),
          [(["code"], s)], time_dims)


@pytest.mark.parametrize("time_dims", DIMS)
@SETTINGS
@given(data=st.data())
def test_reduce_chain(time_dims, data):
    """Max per key, then counted per maximum, then thresholded: three reduces deep."""
    s = data.draw(stream(2, time_dims), label="input")

    def build(c):
        return (c.max("v").map(lambda k, m: (m, k), names=["m", "k"]).count()
                 .threshold(at_least_two))

    def ref(a):
        m = O.clean(O.ref_map(lambda k, m: (m, k), 2)(O.ref_max(a, 0)))
        return O.ref_threshold(at_least_two)(O.ref_count(m))

    check(build, ref, [(KV, s)], time_dims)


@numba.njit
def _float_vals(vals, counts):
    out = np.empty((1, 1), np.float64)
    out[0, 0] = (vals[:, 0] * counts).sum() / counts.sum()
    return out, np.ones(1, np.int64)


@numba.njit
def _float_counts(vals, counts):
    return vals[:1].copy(), np.full(1, 0.5)


@numba.njit
def _only_raises(vals, counts):
    raise ValueError("never returns")


@numba.njit
def _int32_out(vals, counts):
    return vals[:1].astype(np.int32), np.ones(1, np.int32)


@pytest.mark.parametrize("engine", ["python", "native"])
def test_user_logic_must_return_integer_arrays(engine):
    # Floats (values or counts) would be truncated to int64 codes, and logic that
    # cannot return does not compile: refused when the reduce is built, naming the
    # function. Other integer dtypes are fine. (workers=1: test_workers reruns this
    # file with DDNUMBA_WORKERS, which the native engine refuses.)
    df = dd.Dataflow(engine=engine, workers=1)
    i, c = df.new_input(["k", "v"])
    for logic, what in [(_float_vals, "float64"), (_float_counts, "float64"),
                        (_only_raises, "none")]:
        with pytest.raises(TypeError, match=rf"logic '{logic.__name__}'.*{what}"):
            c.reduce(logic, names=["k", "o"])
    # A plain Python function: a TypeError saying to njit it (was a ValueError
    # naming an internal helper).
    with pytest.raises(TypeError, match=r"reduce: logic must be a numba @njit"):
        c.reduce(_int32_out.py_func, names=["k", "o"])
    with pytest.raises(ValueError, match=r"must include the 1 key column"):
        c.reduce(_int32_out, names=[])
    out = c.reduce(_int32_out, names=["k", "o"]).capture()
    i.insert([1, 1, 2], [5, 3, 7], time=0)
    i.advance_to(1)
    df.run()
    assert sorted(out.at(0).to_pylist(), key=lambda r: r["k"]) == [
        {"k": 1, "o": 3, "count": 1}, {"k": 2, "o": 7, "count": 1}]


def test_delay_must_return_integer_times_of_its_shape():
    # (workers=1: under test_workers' DDNUMBA_WORKERS the error would come as a
    # WorkerError carrying it)
    for f, err, msg in [(lambda t: t + 0.7, TypeError, "dtype float64"),
                        (lambda t: t[:, 0], TypeError, r"shape \(1,\)"),
                        (lambda t: np.full_like(t, 2**63 - 1), ValueError, "end of time")]:
        df = dd.Dataflow(engine="python", workers=1)
        i, c = df.new_input(["k"])
        c.delay(f).capture()
        i.insert([1], time=3)
        i.advance_to(10)
        with pytest.raises(err, match=msg):
            df.run()
    df = dd.Dataflow(engine="python", workers=1)
    i, c = df.new_input(["k"])
    out = c.delay(lambda t: (t + 2).astype(np.uint8)).capture()
    i.insert([1], time=3)
    i.advance_to(10)
    df.run()
    assert out.updates().to_pylist() == [{"k": 1, "time": 5, "diff": 1}]

"""Tests of kernels.trie and kernels.merge against the plain references in reference_trie."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from ddnumba.kernels.merge import MergeState, advance_trie, merge
from ddnumba.kernels.trie import Trie, build_trie, check_trie, empty_trie, flatten_trie
from reference_trie import (
    I64_MAX,
    add_update,
    advance_time,
    antichain,
    dict_to_flat,
    dict_to_trie,
    merge_ref,
    trie_to_dict,
)

FAST = settings(max_examples=60, deadline=None)


# ------------------------------------------------------------------------------------
# Strategies


@st.composite
def shapes(draw):
    return draw(st.integers(0, 2)), draw(st.integers(0, 2)), draw(st.integers(1, 3))


@st.composite
def collections(draw, kw, vw, d, max_size=30, coord=4, diff=3):
    """A dict collection with small coordinates so keys, vals and times collide."""
    n = draw(st.integers(0, max_size))
    coll = {}
    c = st.integers(-1, coord)
    for _ in range(n):
        key = tuple(draw(c) for _ in range(kw))
        val = tuple(draw(c) for _ in range(vw))
        time = tuple(draw(st.integers(0, coord)) for _ in range(d))
        x = draw(st.integers(-diff, diff).filter(lambda v: v != 0))
        add_update(coll, key, val, time, x)
    return coll


@st.composite
def frontiers(draw, d, coord=5):
    pts = draw(st.lists(st.tuples(*[st.integers(0, coord)] * d), min_size=1, max_size=4))
    return antichain(pts)


@st.composite
def merge_cases(draw, with_frontier):
    kw, vw, d = draw(shapes())
    a = draw(collections(kw, vw, d))
    b = draw(collections(kw, vw, d))
    f = draw(frontiers(d)) if with_frontier else None
    return kw, vw, d, a, b, f


def assert_trie_equal(x, y):
    for name, p, q in zip(Trie._fields, x, y):
        assert p.shape == q.shape, name
        np.testing.assert_array_equal(p, q, err_msg=name)


# ------------------------------------------------------------------------------------
# trie


@FAST
@given(st.data())
def test_build_matches_reference_and_flatten_roundtrips(data):
    kw, vw, d = data.draw(shapes())
    coll = data.draw(collections(kw, vw, d))
    flat = dict_to_flat(coll, kw, vw, d)
    t = build_trie(*flat, kw)
    check_trie(t)
    assert_trie_equal(t, dict_to_trie(coll, kw, vw, d))
    assert trie_to_dict(t) == coll
    back = flatten_trie(t)
    for p, q in zip(back, flat):
        np.testing.assert_array_equal(p, q)
        assert p.dtype == np.int64


def test_build_all_equal_data_and_single_row():
    data = np.array([[5, 5]] * 4)
    times = np.array([[0], [1], [2], [3]])
    t = build_trie(data, times, np.array([1, -1, 2, -7]), kw=1)
    assert t.keys.tolist() == [[5]] and t.vals.tolist() == [[5]]
    assert t.key_offs.tolist() == [0, 1] and t.val_offs.tolist() == [0, 4]
    one = build_trie(np.array([[1, 2, 3]]), np.array([[4, 5]]), np.array([-9]), kw=2)
    assert one.keys.tolist() == [[1, 2]] and one.vals.tolist() == [[3]]
    assert one.times.tolist() == [[4, 5]] and one.diffs.tolist() == [-9]
    e = build_trie(np.empty((0, 2), np.int64), np.empty((0, 1), np.int64), np.empty(0, np.int64), kw=1)
    assert_trie_equal(e, empty_trie(1, 1, 1))


def test_build_rejects_bad_input():
    data = np.array([[1, 1], [0, 1]])
    times = np.zeros((2, 1), np.int64)
    with pytest.raises(ValueError, match="not sorted"):
        build_trie(data, times, np.array([1, 1]), kw=1)
    with pytest.raises(ValueError, match="not sorted"):
        build_trie(np.array([[1, 1], [1, 1]]), np.array([[2], [1]]), np.array([1, 1]), kw=1)
    with pytest.raises(ValueError, match="not consolidated"):
        build_trie(np.array([[1, 1], [1, 1]]), np.array([[1], [1]]), np.array([1, 1]), kw=1)
    with pytest.raises(ValueError, match="zero"):
        build_trie(np.array([[1, 1]]), np.array([[1]]), np.array([0]), kw=1)
    with pytest.raises(ValueError, match="equal lengths"):
        build_trie(np.array([[1, 1]]), np.array([[1], [2]]), np.array([1]), kw=1)
    with pytest.raises(ValueError, match="kw"):
        build_trie(np.array([[1, 1]]), np.array([[1]]), np.array([1]), kw=3)


def test_input_normalisation():
    data = np.array([[1, 2], [3, 4]], dtype=np.int32)
    times = np.array([[0], [0]], dtype=np.uint8)
    diffs = np.array([1.0, -2.0])
    t = build_trie(data, times, diffs, kw=1)
    assert all(a.dtype == np.int64 for a in t)
    ro = np.array([[1, 2]])
    ro.setflags(write=False)
    t2 = build_trie(ro, np.array([[0]]), np.array([1]), kw=1)
    assert t2.vals.flags.writeable
    with pytest.raises(ValueError, match="diffs"):
        build_trie(np.array([[1, 2]]), np.array([[0]]), np.array([1.5]), kw=1)
    with pytest.raises(ValueError, match="data"):
        build_trie(np.array([[2**63, 0]], dtype=np.uint64), np.array([[0]]), np.array([1]), kw=1)
    with pytest.raises(ValueError, match="times"):
        build_trie(np.array([[1, 2]]), np.array(["a"]).reshape(1, 1), np.array([1]), kw=1)
    with pytest.raises(ValueError, match="2-D"):
        build_trie(np.array([1, 2]), np.array([[0]]), np.array([1]), kw=1)


def _valid_trie():
    # keys 1 (vals 10: t0,t1 ; 11: t0) and 2 (val 10: t5)
    return Trie(
        np.array([[1], [2]]), np.array([0, 2, 3]),
        np.array([[10], [11], [10]]), np.array([0, 2, 3, 4]),
        np.array([[0, 0], [0, 1], [0, 0], [5, 5]]), np.array([1, -1, 2, 3]),
    )


def _with(t, **changes):
    fields = {name: np.array(getattr(t, name)) for name in Trie._fields}
    fields.update({k: np.asarray(v, dtype=np.int64) for k, v in changes.items()})
    return Trie(**fields)


@pytest.mark.parametrize("changes, message", [
    (dict(key_offs=[0, 2]), "key_offs has length"),
    (dict(val_offs=[0, 2, 3]), "val_offs has length"),
    (dict(key_offs=[1, 2, 3]), "start at 0"),
    (dict(val_offs=[0, 2, 3, 3]), "end at nu"),
    (dict(key_offs=[0, 3, 3]), "key 1 owns no vals"),
    (dict(val_offs=[0, 2, 2, 4]), "val 1 owns no updates"),
    (dict(keys=[[2], [2]]), "keys are not strictly increasing at key 1"),
    (dict(keys=[[3], [2]]), "keys are not strictly increasing"),
    (dict(vals=[[10], [10], [10]]), "vals are not strictly increasing within their key at val 1"),
    (dict(vals=[[12], [11], [10]]), "vals are not strictly increasing"),
    (dict(times=[[0, 1], [0, 0], [0, 0], [5, 5]]), "times are not strictly increasing within their val at update 1"),
    (dict(times=[[0, 0], [0, 0], [0, 0], [5, 5]]), "times are not strictly increasing"),
    (dict(diffs=[1, -1, 0, 3]), "diff of update 2 is zero"),
    (dict(diffs=[1, -1, 2, 0]), "diff of update 3 is zero"),
    (dict(diffs=[1, -1, 2]), "times has 4 rows but diffs has 3"),
    (dict(times=np.empty((4, 0))), "at least one column"),
    (dict(keys=[1, 2]), "keys must be a 2-D"),
])
def test_check_trie_catches_each_invariant(changes, message):
    check_trie(_valid_trie())
    with pytest.raises(ValueError, match=message):
        check_trie(_with(_valid_trie(), **changes))


def test_check_trie_allows_repeats_across_keys_and_vals():
    # Equal vals under different keys and equal times under different vals are fine.
    check_trie(_valid_trie())
    t = _with(_valid_trie(), times=[[0, 0], [0, 1], [0, 0], [0, 0]])
    check_trie(t)


def test_check_trie_zero_widths():
    check_trie(empty_trie(0, 0, 1))
    one = Trie(np.empty((1, 0), np.int64), np.array([0, 1]), np.empty((1, 0), np.int64),
               np.array([0, 2]), np.array([[0], [1]]), np.array([1, 1]))
    check_trie(one)
    two_keys = Trie(np.empty((2, 0), np.int64), np.array([0, 1, 2]), np.empty((2, 0), np.int64),
                    np.array([0, 1, 2]), np.array([[0], [1]]), np.array([1, 1]))
    with pytest.raises(ValueError, match="keys are not strictly increasing"):
        check_trie(two_keys)


def test_empty_trie():
    t = empty_trie(2, 0, 3)
    check_trie(t)
    assert t.widths == (2, 0, 3) and t.n_keys == t.n_vals == t.n_updates == 0
    with pytest.raises(ValueError):
        empty_trie(1, 1, 0)


# ------------------------------------------------------------------------------------
# merge


def _run_merge(a, b, f, kw, vw, d, **kw_args):
    ta, tb = dict_to_trie(a, kw, vw, d), dict_to_trie(b, kw, vw, d)
    fr = None if f is None else np.array(f, dtype=np.int64).reshape(len(f), d)
    return ta, tb, fr, merge(ta, tb, fr, **kw_args)


@FAST
@given(merge_cases(with_frontier=False))
def test_merge_matches_reference(case):
    kw, vw, d, a, b, _ = case
    _, _, _, m = _run_merge(a, b, None, kw, vw, d)
    check_trie(m)
    assert trie_to_dict(m) == merge_ref(a, b)
    # independent construction of the expected trie, array for array
    assert_trie_equal(m, dict_to_trie(merge_ref(a, b), kw, vw, d))


@FAST
@given(merge_cases(with_frontier=True))
def test_merge_with_frontier_matches_reference(case):
    kw, vw, d, a, b, f = case
    _, _, _, m = _run_merge(a, b, f, kw, vw, d)
    check_trie(m)
    assert_trie_equal(m, dict_to_trie(merge_ref(a, b, f), kw, vw, d))


@FAST
@given(merge_cases(with_frontier=True), st.booleans(), st.lists(st.integers(0, 12), max_size=40))
def test_fuelled_steps_equal_one_shot(case, use_frontier, fuels):
    kw, vw, d, a, b, f = case
    f = f if use_frontier else None
    ta, tb, fr, one_shot = _run_merge(a, b, f, kw, vw, d)
    state = MergeState.begin(ta, tb, fr)
    total = ta.n_updates + tb.n_updates
    done = total == 0

    def consumed():
        ia, ib = int(state._pos[0]), int(state._pos[1])
        return int(ta.val_offs[ta.key_offs[ia]] + tb.val_offs[tb.key_offs[ib]])

    # the most one key can add beyond the fuel: its updates in both inputs
    sizes = {}
    for t in (ta, tb):
        per_key = t.val_offs[t.key_offs[1:]] - t.val_offs[t.key_offs[:-1]]
        for key, n in zip(map(tuple, t.keys.tolist()), per_key.tolist()):
            sizes[key] = sizes.get(key, 0) + int(n)
    biggest = max(sizes.values(), default=0)
    for fuel in fuels:
        if done:
            break
        before = consumed()
        done = state.step(fuel)
        used = consumed() - before
        assert done or used >= fuel
        assert used < fuel + biggest or (fuel == 0 and used == 0)
    assert state.done == done
    assert_trie_equal(state.finish(), one_shot)
    assert state.finish() is state.finish()


def test_step_consumes_whole_keys_and_at_least_fuel():
    coll = {((k,), (v,), (t,)): 1 for k in range(5) for v in range(2) for t in range(3)}
    ta = dict_to_trie(coll, 1, 1, 1)
    state = MergeState.begin(ta, empty_trie(1, 1, 1))
    assert not state.step(0)
    assert not state.step(1)  # one key = 6 updates
    assert state._pos[0] == 1
    assert not state.step(7)  # two more keys
    assert state._pos[0] == 3
    assert state.step(100)
    assert trie_to_dict(state.finish()) == coll
    # keys present in both inputs count the updates of both
    state = MergeState.begin(ta, ta)
    assert not state.step(1)
    assert state._pos[0] == 1 and state._pos[1] == 1
    assert not state.step(13)  # 12 per shared key
    assert state._pos[0] == 3 and state._pos[1] == 3
    assert state.step(24)
    assert trie_to_dict(state.finish()) == {k: 2 * x for k, x in coll.items()}


@FAST
@given(st.integers(1, 3), st.integers(25, 120), st.data())
def test_long_runs_resorted_after_advance(d, n, data):
    # One key and val with many times: advancing scrambles the run beyond the
    # insertion-sort length, exercising the heapsort path.
    coll = {}
    for _ in range(n):
        t = tuple(data.draw(st.integers(0, 60)) for _ in range(d))
        add_update(coll, (0,), (0,), t, data.draw(st.sampled_from([-2, -1, 1, 2])))
    f = data.draw(frontiers(d, coord=60))
    _, _, _, m = _run_merge(coll, {}, f, 1, 1, d)
    check_trie(m)
    assert_trie_equal(m, dict_to_trie(merge_ref(coll, {}, f), 1, 1, d))


def test_worked_examples_from_roadmap():
    times = [(0, 0), (0, 1), (1, 0), (1, 1)]
    # distinct vals so the advanced times stay visible per update
    coll = {((0,), (i,), t): 1 for i, t in enumerate(times)}
    ta = dict_to_trie(coll, 1, 1, 2)
    cases = [
        ([(0, 3), (1, 2), (2, 0)], [(0, 0), (0, 1), (1, 0), (1, 1)]),
        ([(1, 2), (2, 0)], [(1, 0), (1, 1), (1, 0), (1, 1)]),
        ([(0, 3), (1, 1)], [(0, 1), (0, 1), (1, 1), (1, 1)]),
        ([(1, 1)], [(1, 1)] * 4),
    ]
    for f, expected in cases:
        m = advance_trie(ta, np.array(f))
        assert [tuple(t) for t in m.times.tolist()] == expected
        assert [advance_time(t, f) for t in times] == expected


def test_advance_collapses_and_cancels():
    # Same key and val: +1 at (0,1) and -1 at (1,0) both advance to (1,1) under F={(1,1)}.
    coll = {((7,), (), (0, 1)): 1, ((7,), (), (1, 0)): -1, ((8,), (), (0, 0)): 2, ((8,), (), (2, 2)): 3}
    t = dict_to_trie(coll, 1, 0, 2)
    m = advance_trie(t, np.array([[1, 1]]))
    check_trie(m)
    assert trie_to_dict(m) == {((8,), (), (1, 1)): 2, ((8,), (), (2, 2)): 3}
    # cancelling everything leaves an empty trie of the right widths
    m2 = advance_trie(dict_to_trie({((7,), (), (0, 1)): 1, ((7,), (), (1, 0)): -1}, 1, 0, 2),
                      np.array([[5, 5]]))
    assert_trie_equal(m2, empty_trie(1, 0, 2))


@FAST
@given(st.data())
def test_advance_trie_matches_reference(data):
    kw, vw, d = data.draw(shapes())
    coll = data.draw(collections(kw, vw, d))
    f = data.draw(frontiers(d))
    m = advance_trie(dict_to_trie(coll, kw, vw, d), np.array(f).reshape(len(f), d))
    check_trie(m)
    assert trie_to_dict(m) == merge_ref(coll, {}, f)


def test_merge_empty_inputs():
    for kw, vw, d in [(0, 0, 1), (1, 2, 3), (2, 0, 2)]:
        e = empty_trie(kw, vw, d)
        m = merge(e, e)
        assert_trie_equal(m, e)
        m = merge(e, e, np.zeros((1, d), np.int64))
        assert_trie_equal(m, e)
        coll = {((1,) * kw, (2,) * vw, (3,) * d): -4}
        t = dict_to_trie(coll, kw, vw, d)
        assert_trie_equal(merge(t, e), t)
        assert_trie_equal(merge(e, t), t)


def test_merge_zero_widths_sum_into_one_key():
    a = {((), (), (0,)): 1, ((), (), (2,)): 1}
    b = {((), (), (0,)): -1, ((), (), (1,)): 5}
    ta, tb = dict_to_trie(a, 0, 0, 1), dict_to_trie(b, 0, 0, 1)
    m = merge(ta, tb)
    assert m.keys.shape == (1, 0) and m.vals.shape == (1, 0)
    assert m.times.ravel().tolist() == [1, 2] and m.diffs.tolist() == [5, 1]
    assert_trie_equal(merge(ta, dict_to_trie({((), (), (0,)): -1, ((), (), (2,)): -1}, 0, 0, 1)),
                      empty_trie(0, 0, 1))


def test_merge_overflow_raises():
    big = 2**62
    a = dict_to_trie({((1,), (1,), (0,)): big}, 1, 1, 1)
    b = dict_to_trie({((1,), (1,), (0,)): big}, 1, 1, 1)
    with pytest.raises(OverflowError, match="overflow"):
        merge(a, b)
    neg = dict_to_trie({((1,), (1,), (0,)): -big - 1}, 1, 1, 1)
    with pytest.raises(OverflowError):
        merge(dict_to_trie({((1,), (1,), (0,)): -big}, 1, 1, 1), neg)
    # large sums that fit are exact
    m = merge(a, dict_to_trie({((1,), (1,), (0,)): I64_MAX - big}, 1, 1, 1))
    assert m.diffs.tolist() == [I64_MAX]
    m = merge(a, dict_to_trie({((1,), (1,), (0,)): -big}, 1, 1, 1))
    assert m.n_keys == 0
    # overflow created by advancing: two times collapse inside one val
    c = dict_to_trie({((1,), (1,), (0,)): big, ((1,), (1,), (1,)): big}, 1, 1, 1)
    with pytest.raises(OverflowError):
        advance_trie(c, np.array([[3]]))
    # the failed state refuses to continue
    state = MergeState.begin(a, b)
    with pytest.raises(OverflowError):
        state.step(10)
    with pytest.raises(RuntimeError):
        state.finish()


def test_merge_into_reused_buffers():
    kw, vw, d = 1, 1, 2
    a = {((k,), (k % 3,), (k % 2, k % 5)): 1 + k % 3 for k in range(20)}
    b = {((k,), (k % 4,), (k % 3, 1)): -1 for k in range(0, 30, 2)}
    ta, tb = dict_to_trie(a, kw, vw, d), dict_to_trie(b, kw, vw, d)
    big = 100
    out = Trie(np.empty((big, kw), np.int64), np.empty(big + 1, np.int64),
               np.empty((big, vw), np.int64), np.empty(big + 1, np.int64),
               np.empty((big, d), np.int64), np.empty(big, np.int64))
    f = np.array([[1, 1]])
    m = merge(ta, tb, f, out=out)
    assert np.shares_memory(m.times, out.times)
    assert_trie_equal(m, dict_to_trie(merge_ref(a, b, [(1, 1)]), kw, vw, d))
    small = Trie(*(x[:3] for x in out))
    with pytest.raises(ValueError, match="need at least"):
        merge(ta, tb, out=small)
    with pytest.raises(ValueError, match="overlaps"):
        merge(m, tb, out=out)
    with pytest.raises(ValueError, match="int64"):
        merge(ta, tb, out=out._replace(diffs=out.diffs.astype(np.int32)))


def test_merge_argument_errors():
    a = empty_trie(1, 1, 2)
    with pytest.raises(ValueError, match="differ"):
        merge(a, empty_trie(1, 2, 2))
    with pytest.raises(ValueError, match="frontier"):
        merge(a, a, np.zeros((1, 3), np.int64))
    with pytest.raises(ValueError, match="frontier"):
        merge(a, a, np.zeros((0, 2), np.int64))
    with pytest.raises(ValueError):
        advance_trie(a, None)
    with pytest.raises(ValueError, match="key_offs"):
        merge(a._replace(key_offs=np.array([1])), a)


def test_merge_accepts_read_only_and_narrow_inputs():
    coll = {((1,), (2,), (3,)): 4}
    t = dict_to_trie(coll, 1, 1, 1)
    for x in t:
        x.setflags(write=False)
    narrow = Trie(*(x.astype(np.int32) for x in t))
    m = merge(t, narrow, [[0]])
    assert trie_to_dict(m) == {((1,), (2,), (3,)): 8}

"""Tests for kernels/reduce.py against the brute-force references in reference_reduce.py.

Two kinds of test: each kernel against its plain-Python reference on random inputs, and
the kernels driven together as the reduce operator would over several activations with
advancing frontiers, checked against the oracle (output accumulated at every grid time
== logic of the input accumulated there).
"""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from numba import njit

from ddnumba.kernels.reduce import (
    accumulate,
    corrections,
    interesting_times,
    logic_count,
    logic_distinct,
    logic_max,
    logic_min,
    logic_sum,
    logic_top_k,
    make_user_driver,
)
from reference_reduce import (
    accumulate_at,
    apply_logic,
    grid,
    in_future,
    join,
    oracle_mismatches,
    ref_count,
    ref_corrections,
    ref_distinct,
    ref_interesting_times,
    ref_max,
    ref_min,
    ref_sum,
    ref_top_k,
    ref_user,
)

I64_MAX = np.iinfo(np.int64).max
FAST = settings(max_examples=60, deadline=None,
                suppress_health_check=[HealthCheck.too_slow])
SIM = settings(max_examples=30, deadline=None,
               suppress_health_check=[HealthCheck.too_slow])


# ------------------------------------------------------------------------------------
# Helpers: CSR packing and unpacking.
# ------------------------------------------------------------------------------------


def csr(lists, width):
    """Pack per-key lists of row tuples into (offs, int64[n, width])."""
    offs = np.zeros(len(lists) + 1, np.int64)
    offs[1:] = np.cumsum([len(x) for x in lists])
    rows = [r for x in lists for r in x]
    return offs, np.array(rows, np.int64).reshape(len(rows), width)


def csr_updates(lists, vw, d):
    """Pack per-key lists of (val, time, diff) into (offs, vals, times, diffs)."""
    offs, vals = csr([[u[0] for u in x] for x in lists], vw)
    _, times = csr([[u[1] for u in x] for x in lists], d)
    diffs = np.array([u[2] for x in lists for u in x], np.int64)
    return offs, vals, times, diffs


def unpack(offs, rows):
    """Per-key lists of row tuples from (offs, rows)."""
    return [[tuple(int(v) for v in rows[i]) for i in range(offs[k], offs[k + 1])]
            for k in range(len(offs) - 1)]


def unpack_groups(offs, vals, counts):
    """Per-moment dicts {val: count}; also checks the rows are sorted and distinct."""
    out = []
    for m in range(len(offs) - 1):
        rows = [tuple(int(v) for v in vals[i]) for i in range(offs[m], offs[m + 1])]
        assert rows == sorted(set(rows)), "rows of a moment must be sorted and distinct"
        out.append({r: int(counts[i]) for r, i in zip(rows, range(offs[m], offs[m + 1]))})
    return out


def pack_groups(groups, width):
    """(offs, vals, counts) from a list of dicts {val: count} (rows in val order)."""
    lists = [sorted(g.items()) for g in groups]
    offs, vals = csr([[v for v, _ in x] for x in lists], width)
    counts = np.array([c for x in lists for _, c in x], np.int64)
    return offs, vals, counts


def antichain(points):
    """Minimal elements of a set of time tuples."""
    pts = set(points)
    return sorted(p for p in pts if not any(q != p and all(a <= b for a, b in zip(q, p))
                                            for q in pts))


# ------------------------------------------------------------------------------------
# Strategies.
# ------------------------------------------------------------------------------------


def times_st(d, hi=3):
    return st.tuples(*[st.integers(0, hi)] * d)


def vals_st(vw):
    # A small first column so vals collide; further columns add lexicographic ties.
    return st.tuples(st.integers(-2, 3), *[st.integers(0, 1)] * (vw - 1))


diffs_st = st.sampled_from([-2, -1, 1, 2, 3])


@st.composite
def groups_st(draw, vw, max_moments=6):
    """Moments of accumulated input: sorted distinct vals, non-zero (maybe negative) counts."""
    n = draw(st.integers(0, max_moments))
    return [draw(st.dictionaries(vals_st(vw), st.integers(-3, 4).filter(bool), max_size=6))
            for _ in range(n)]


# ------------------------------------------------------------------------------------
# 1. interesting_times
# ------------------------------------------------------------------------------------


@FAST
@given(data=st.data())
def test_interesting_times_matches_reference(data):
    d = data.draw(st.integers(1, 3), label="d")
    K = data.draw(st.integers(0, 3), label="K")
    upper = antichain(data.draw(st.lists(times_st(d, 4), max_size=2), label="upper"))
    seeds, hist = [], []
    for _ in range(K):
        s = data.draw(st.lists(times_st(d), max_size=4))
        seeds.append([t for t in s if not in_future(t, upper)])  # seeds are due
        hist.append(data.draw(st.lists(times_st(d), max_size=6)))
    so, stimes = csr(seeds, d)
    ho, htimes = csr(hist, d)
    up = np.array(upper, np.int64).reshape(len(upper), d)
    do, dt, po, pt = interesting_times(so, stimes, ho, htimes, up)
    assert do.shape == (K + 1,) and po.shape == (K + 1,)
    assert dt.shape[1] == d and pt.shape[1] == d
    due, pend = unpack(do, dt), unpack(po, pt)
    for k in range(K):
        want_due, want_pend = ref_interesting_times(seeds[k], hist[k], upper)
        assert due[k] == want_due
        assert pend[k] == want_pend


def test_interesting_times_empty():
    for d in (1, 2, 3):
        z = np.zeros((0, d), np.int64)
        do, dt, po, pt = interesting_times([0], z, [0], z, z)
        assert do.tolist() == [0] and po.tolist() == [0]
        assert dt.shape == (0, d) and pt.shape == (0, d)


def test_interesting_times_key_without_seeds_has_no_times():
    do, dt, po, pt = interesting_times([0, 0, 1], [[5]], [0, 2, 2], [[1], [9]], [])
    assert do.tolist() == [0, 0, 1] and dt.tolist() == [[5]]
    assert po.tolist() == [0, 0, 0]


@FAST
@given(seeds=st.lists(st.integers(0, 50), min_size=1, max_size=8),
       back=st.lists(st.integers(0, 50), max_size=8),
       upper=st.one_of(st.just([]), st.integers(51, 60).map(lambda u: [[u]])))
def test_interesting_times_1d_closure_is_seeds(seeds, back, upper):
    # History no later than the seeds (the 1-D streaming case): T is the seeds, nothing
    # pends.
    hist = [min(seeds) - b for b in back]
    do, dt, po, pt = interesting_times([0, len(seeds)], np.array(seeds).reshape(-1, 1),
                                       [0, len(hist)], np.array(hist).reshape(-1, 1),
                                       upper)
    assert dt[:, 0].tolist() == sorted(set(seeds))
    assert pt.shape == (0, 1)


def test_interesting_times_1d_later_history_is_revisited():
    # A history time later than a seed sees the seed's change, so it is interesting.
    do, dt, po, pt = interesting_times([0, 1], [[3]], [0, 3], [[1], [5], [7]], [])
    assert dt[:, 0].tolist() == [3, 5, 7]


def test_interesting_times_2d_join_and_pending():
    seeds = [[0, 1], [1, 0]]
    do, dt, po, pt = interesting_times([0, 2], seeds, [0, 1], [[0, 5]], [[1, 1]])
    # (1,1) and (1,5) are joins in the future of the frontier (1,1).
    assert dt.tolist() == [[0, 1], [0, 5], [1, 0]]
    assert pt.tolist() == [[1, 1], [1, 5]]


def test_interesting_times_rejects_future_seed():
    with pytest.raises(ValueError, match="seed_times"):
        interesting_times([0, 1], [[2, 2]], [0, 0], np.zeros((0, 2)), [[1, 1]])


def test_interesting_times_validation():
    with pytest.raises(ValueError, match="hist_times"):
        interesting_times([0, 1], [[1, 1]], [0, 1], [[1]], [])
    with pytest.raises(ValueError, match="seed_offs"):
        interesting_times([0, 2], [[1, 1]], [0, 0], np.zeros((0, 2)), [])
    with pytest.raises(ValueError, match="hist_offs"):
        interesting_times([0, 1], [[1, 1]], [0, 0, 0], np.zeros((0, 2)), [])
    with pytest.raises(ValueError, match="seed_times"):
        interesting_times([0, 1], [[1.5, 1]], [0, 0], np.zeros((0, 2)), [])


# ------------------------------------------------------------------------------------
# 2. accumulate
# ------------------------------------------------------------------------------------


@st.composite
def accumulate_case(draw, d=None):
    d = d if d is not None else draw(st.integers(1, 3))
    vw = draw(st.integers(1, 3))
    K = draw(st.integers(0, 3))
    due, upds = [], []
    for _ in range(K):
        due.append(sorted(set(draw(st.lists(times_st(d), max_size=6)))))
        u = draw(st.lists(st.tuples(vals_st(vw), times_st(d), diffs_st), max_size=12))
        if u and draw(st.booleans()):
            # Retract some updates later on so vals vanish (and maybe come back).
            v, t, df = u[0]
            u.append((v, join(t, draw(times_st(d))), -df))
        upds.append(sorted(u))
    return d, vw, due, upds


def check_accumulate(d, vw, due, upds):
    do, dt = csr(due, d)
    uo, uv, ut, ud = csr_updates(upds, vw, d)
    mo, av, ac = accumulate(do, dt, uo, uv, ut, ud)
    assert mo.shape == (len(dt) + 1,) and av.shape[1] == vw
    got = unpack_groups(mo, av, ac)
    want = [accumulate_at(upds[k], t) for k in range(len(due)) for t in due[k]]
    assert got == want


@FAST
@given(accumulate_case())
def test_accumulate_matches_reference(case):
    check_accumulate(*case)


@FAST
@given(accumulate_case(d=1))
def test_accumulate_1d_fast_path_matches_reference(case):
    check_accumulate(*case)


def test_accumulate_1d_many_moments():
    # Long 1-D histories exercise the incremental pointers across many moments.
    rng = np.random.default_rng(7)
    upds = [sorted(((int(rng.integers(0, 5)),), (int(rng.integers(0, 40)),),
                    int(rng.choice([-1, 1, 2]))) for _ in range(60)) for _ in range(3)]
    due = [sorted({(int(t),) for t in rng.integers(0, 45, 25)}) for _ in range(3)]
    check_accumulate(1, 1, due, upds)


def test_accumulate_empty_and_all_equal():
    z2 = np.zeros((0, 2), np.int64)
    mo, av, ac = accumulate([0], z2, [0], np.zeros((0, 3)), z2, [])
    assert mo.tolist() == [0] and av.shape == (0, 3) and ac.shape == (0,)
    # All rows equal: they sum; a key with moments but no updates has empty moments.
    mo, av, ac = accumulate([0, 1, 2], [[2, 2], [0, 0]], [0, 3, 3],
                            [[4], [4], [4]], [[1, 1]] * 3, [5, 5, -3])
    assert mo.tolist() == [0, 1, 1] and av.tolist() == [[4]] and ac.tolist() == [7]


@pytest.mark.parametrize("d", [1, 2])
def test_accumulate_overflow(d):
    t = [[0] * d, [1] * d]
    with pytest.raises(OverflowError):
        accumulate([0, 1], [[1] * d], [0, 2], [[0], [0]], t, [I64_MAX, 1])
    # Values near the limit that do not overflow are fine.
    mo, av, ac = accumulate([0, 1], [[1] * d], [0, 2], [[0], [0]], t, [I64_MAX, -1])
    assert ac.tolist() == [I64_MAX - 1]


def test_accumulate_validation():
    with pytest.raises(ValueError, match="sorted"):
        accumulate([0, 1], [[1]], [0, 2], [[1], [0]], [[0], [0]], [1, 1])
    with pytest.raises(ValueError, match="due_times"):
        accumulate([0, 2], [[2], [1]], [0, 0], np.zeros((0, 1)), np.zeros((0, 1)), [])
    with pytest.raises(ValueError, match="upd_times"):
        accumulate([0, 1], [[1]], [0, 1], [[1]], [[0, 0]], [1])
    with pytest.raises(ValueError, match="upd_diffs"):
        accumulate([0, 1], [[1]], [0, 1], [[1]], [[0]], [1.25])
    # Lossless conversions and read-only inputs are accepted.
    ro = np.array([[1]], np.int64)
    ro.setflags(write=False)
    mo, av, ac = accumulate(np.array([0, 1], np.int32), ro, [0, 1],
                            np.array([[3]], np.uint8), [[0.0]], [2.0])
    assert av.tolist() == [[3]] and ac.tolist() == [2]


# ------------------------------------------------------------------------------------
# 3. corrections
# ------------------------------------------------------------------------------------


@FAST
@given(data=st.data())
def test_corrections_matches_reference(data):
    d = data.draw(st.integers(1, 3), label="d")
    ow = data.draw(st.integers(1, 3), label="ow")
    K = data.draw(st.integers(0, 3), label="K")
    due, wants, olds = [], [], []
    for _ in range(K):
        ts = sorted(set(data.draw(st.lists(times_st(d), max_size=5))))
        due.append(ts)
        wants.extend(data.draw(st.dictionaries(vals_st(ow), st.integers(-2, 3).filter(bool),
                                               max_size=3)) for _ in ts)
        olds.append(sorted(data.draw(st.lists(st.tuples(vals_st(ow), times_st(d), diffs_st),
                                              max_size=8))))
    do, dt = csr(due, d)
    wo, wv, wc = pack_groups(wants, ow)
    oo, ov, ot, od = csr_updates(olds, ow, d)
    ck, cv, ct, cd = corrections(do, dt, wo, wv, wc, oo, ov, ot, od)
    assert cv.shape[1] == ow and ct.shape[1] == d
    got = [(int(k), tuple(map(int, v)), tuple(map(int, t)), int(x))
           for k, v, t, x in zip(ck, cv, ct, cd)]
    assert got == sorted(got), "sorted by (key, outval, time)"
    assert len({g[:3] for g in got}) == len(got) and all(g[3] for g in got)
    m = 0
    for k in range(K):
        moments = list(zip(due[k], wants[m:m + len(due[k])]))
        m += len(due[k])
        want = [(k,) + c for c in ref_corrections(moments, olds[k])]
        assert [g for g in got if g[0] == k] == want
        # Postcondition: old output + corrections accumulate to the wish at each moment.
        new_out = olds[k] + [g[1:] for g in got if g[0] == k]
        for t, w in moments:
            assert accumulate_at(new_out, t) == w


def test_corrections_empty():
    z = np.zeros((0, 2), np.int64)
    ck, cv, ct, cd = corrections([0], z, [0], np.zeros((0, 1)), [], [0],
                                 np.zeros((0, 1)), z, [])
    assert ck.shape == (0,) and cv.shape == (0, 1) and ct.shape == (0, 2)


def test_corrections_retract_old_output():
    # Old output [5]@0 +1; at time 1 the wish is empty -> retract it.
    ck, cv, ct, cd = corrections([0, 1], [[1]], [0, 0], np.zeros((0, 1)), [],
                                 [0, 1], [[5]], [[0]], [1])
    assert (ck.tolist(), cv.tolist(), ct.tolist(), cd.tolist()) == ([0], [[5]], [[1]], [-1])


def test_corrections_overflow():
    with pytest.raises(OverflowError):
        corrections([0, 1], [[1]], [0, 1], [[0]], [I64_MAX], [0, 1], [[0]], [[0]], [-1])


def test_corrections_validation():
    with pytest.raises(ValueError, match="want_vals"):
        corrections([0, 1], [[1]], [0, 1], [[0, 0]], [1], [0, 0], np.zeros((0, 1)),
                    np.zeros((0, 1)), [])
    with pytest.raises(ValueError, match="want_offs"):
        corrections([0, 1], [[1]], [0, 1, 1], [[0]], [1], [0, 0], np.zeros((0, 1)),
                    np.zeros((0, 1)), [])
    with pytest.raises(ValueError, match="sorted"):
        corrections([0, 1], [[1]], [0, 1], [[0]], [1], [0, 2], [[1], [0]],
                    [[0], [0]], [1, 1])


# ------------------------------------------------------------------------------------
# 4. Built-in logic and 5. user logic
# ------------------------------------------------------------------------------------


@njit
def user_logic(vals, counts):
    # Deliberately unsorted (reversed), with repeated outvals and zero counts, which the
    # driver must sort and consolidate.
    n = vals.shape[0]
    out = np.empty((n, 2), np.int64)
    oc = np.empty(n, np.int64)
    for i in range(n):
        j = n - 1 - i
        out[i, 0] = vals[j, 0] % 3
        out[i, 1] = 7
        oc[i] = counts[j] if counts[j] > 0 else 0
    return out, oc


@njit
def wrong_width_logic(vals, counts):
    return np.zeros((1, 3), np.int64), np.ones(1, np.int64)


@njit
def huge_logic(vals, counts):
    return np.zeros((2, 1), np.int64), np.full(2, 9223372036854775807, np.int64)


USER_DRIVER = make_user_driver(user_logic, 2)


def logic_cases(vw):
    """(kernel(mo, av, ac) -> want triple, reference logic) pairs for value width vw."""
    col = vw - 1
    return [
        (logic_count, ref_count),
        (lambda *a: logic_sum(*a, col), ref_sum(col)),
        (lambda *a: logic_min(*a, col), ref_min(col)),
        (lambda *a: logic_max(*a, col), ref_max(col)),
        (logic_distinct, ref_distinct),
        (lambda *a: logic_top_k(*a, 1), ref_top_k(1)),
        (lambda *a: logic_top_k(*a, 3), ref_top_k(3)),
        (lambda *a: logic_top_k(*a, 0), ref_top_k(0)),
        (USER_DRIVER, ref_user),
    ]


@FAST
@given(data=st.data())
def test_logic_kernels_match_reference(data):
    vw = data.draw(st.integers(1, 3), label="vw")
    groups = data.draw(groups_st(vw), label="groups")
    mo, av, ac = pack_groups(groups, vw)
    for kernel, ref in logic_cases(vw):
        wo, wv, wc = kernel(mo, av, ac)
        assert wo.shape == (len(groups) + 1,)
        got = unpack_groups(wo, wv, wc)
        assert got == [apply_logic(ref, g) for g in groups]


def test_logic_conventions():
    mo, av, ac = [0, 2, 2, 3], [[1, 5], [2, -5], [3, 9]], [2, -2, -1]
    # count: sum of counts even when 0 or negative; empty moment -> nothing.
    assert [x.tolist() for x in logic_count(mo, av, ac)] == [[0, 1, 1, 2], [[0], [-1]],
                                                             [1, 1]]
    # sum of col 1: 5*2 + (-5)*(-2) = 20; 9*-1 = -9.
    assert logic_sum(mo, av, ac, 1)[1].tolist() == [[20], [-9]]
    # min/max/distinct over positive counts only: the third moment has none.
    assert logic_min(mo, av, ac, 1)[0].tolist() == [0, 1, 1, 1]
    assert logic_max(mo, av, ac, 0)[1].tolist() == [[1]]
    assert logic_distinct(mo, av, ac)[1].tolist() == [[1, 5]]
    # top_k counts multiplicity.
    wo, wv, wc = logic_top_k([0, 2], [[1], [2]], [3, 5], 4)
    assert wv.tolist() == [[1], [2]] and wc.tolist() == [3, 1]


def test_logic_empty():
    for kernel, _ in logic_cases(2):
        wo, wv, wc = kernel([0], np.zeros((0, 2), np.int64), [])
        assert wo.tolist() == [0] and wv.shape[0] == 0 and wc.shape == (0,)


def test_logic_overflow_and_validation():
    with pytest.raises(OverflowError):
        logic_count([0, 2], [[0], [1]], [I64_MAX, 1])
    with pytest.raises(OverflowError):
        logic_sum([0, 1], [[I64_MAX]], [2], 0)
    with pytest.raises(OverflowError):
        logic_sum([0, 2], [[I64_MAX], [1]], [1, 1], 0)
    with pytest.raises(ValueError, match="col"):
        logic_min([0, 1], [[1]], [1], 1)
    with pytest.raises(ValueError, match="k must be"):
        logic_top_k([0, 1], [[1]], [1], -1)
    with pytest.raises(ValueError, match="mom_offs"):
        logic_count([0, 2], [[1]], [1])


def test_user_driver_errors():
    with pytest.raises(ValueError, match="out_width"):
        make_user_driver(wrong_width_logic, 2)([0, 1], [[1]], [1])
    with pytest.raises(OverflowError):
        make_user_driver(huge_logic, 1)([0, 1], [[1]], [1])
    with pytest.raises(ValueError, match="numba"):
        make_user_driver(lambda v, c: (v, c), 1)


# ------------------------------------------------------------------------------------
# The kernels driven as the reduce operator, against the oracle.
# ------------------------------------------------------------------------------------


class ReduceSim:
    """The reduce operator's bookkeeping in plain Python around the kernels."""

    def __init__(self, d, vw, ow, logic):
        self.d, self.vw, self.ow, self.logic = d, vw, ow, logic
        self.inp, self.out, self.pending = {}, {}, {}

    def activate(self, batch, upper):
        """Process ``batch`` (key, val, time, diff), all due, and the due pending times."""
        d, vw, ow = self.d, self.vw, self.ow
        new = {}
        for key, val, t, diff in batch:
            assert not in_future(t, upper)
            new.setdefault(key, []).append((val, t, diff))
        due_pend = {k: {p for p in ps if not in_future(p, upper)}
                    for k, ps in self.pending.items()}
        keys = sorted(set(new) | {k for k, ps in due_pend.items() if ps})
        seeds, hist, upds, olds = [], [], [], []
        for k in keys:
            self.pending[k] = self.pending.get(k, set()) - due_pend.get(k, set())
            seeds.append([u[1] for u in new.get(k, [])] + sorted(due_pend.get(k, set())))
            hist.append([u[1] for u in self.inp.get(k, [])])
            self.inp.setdefault(k, []).extend(new.get(k, []))
            upds.append(sorted(self.inp[k]))
            olds.append(sorted(self.out.get(k, [])))
        up = np.array(upper, np.int64).reshape(len(upper), d)
        so, stimes = csr(seeds, d)
        ho, htimes = csr(hist, d)
        do, dt, po, pt = interesting_times(so, stimes, ho, htimes, up)
        for k, ps in zip(keys, unpack(po, pt)):
            self.pending[k] |= set(ps)
        mo, av, ac = accumulate(do, dt, *csr_updates(upds, vw, d))
        wo, wv, wc = self.logic(mo, av, ac)
        ck, cv, ct, cd = corrections(do, dt, wo, wv, wc, *csr_updates(olds, ow, d))
        for k, v, t, x in zip(ck, cv, ct, cd):
            t = tuple(map(int, t))
            assert not in_future(t, upper), "corrections only at due times"
            self.out.setdefault(keys[k], []).append((tuple(map(int, v)), t, int(x)))
        return len(ck)


SIM_LOGICS = {
    "count": (lambda vw: logic_count, lambda vw: ref_count, lambda vw: 1),
    "sum": (lambda vw: lambda *a: logic_sum(*a, vw - 1), lambda vw: ref_sum(vw - 1),
            lambda vw: 1),
    "min": (lambda vw: lambda *a: logic_min(*a, 0), lambda vw: ref_min(0), lambda vw: 1),
    "max": (lambda vw: lambda *a: logic_max(*a, vw - 1), lambda vw: ref_max(vw - 1),
            lambda vw: 1),
    "distinct": (lambda vw: logic_distinct, lambda vw: ref_distinct, lambda vw: vw),
    "top_k": (lambda vw: lambda *a: logic_top_k(*a, 2), lambda vw: ref_top_k(2),
              lambda vw: vw),
    "user": (lambda vw: USER_DRIVER, lambda vw: ref_user, lambda vw: 2),
}

GRID = 4  # update times have coordinates in range(GRID)


@st.composite
def stream_case(draw):
    d = draw(st.integers(1, 3))
    vw = draw(st.integers(1, 3))
    upd = st.tuples(st.integers(0, 2), vals_st(vw), times_st(d, GRID - 1), diffs_st)
    updates = draw(st.lists(upd, max_size=24))
    # Rows that vanish (retraction at a later time) and sometimes return.
    for i in draw(st.lists(st.integers(0, 23), max_size=4)):
        if i < len(updates):
            k, v, t, df = updates[i]
            t2 = join(t, draw(times_st(d, GRID - 1)))
            updates.append((k, v, t2, -df))
            if draw(st.booleans()):
                updates.append((k, v, join(t2, draw(times_st(d, GRID - 1))), df))
    # Frontiers: each one dominates the previous; the last is empty (everything due).
    frontiers, f = [], [(0,) * d]
    for _ in range(draw(st.integers(0, 4))):
        pts = draw(st.lists(times_st(d, GRID), min_size=1, max_size=2))
        f = antichain(join(p, f[i % len(f)]) for i, p in enumerate(pts))
        frontiers.append(f)
    frontiers.append([])
    return d, vw, updates, frontiers


def simulate(logic_name, d, vw, updates, frontiers):
    kern, ref, width = SIM_LOGICS[logic_name]
    sim = ReduceSim(d, vw, width(vw), kern(vw))
    logic = ref(vw)
    todo = list(updates)
    times = grid(d, GRID + 1)
    for upper in frontiers:
        batch = [u for u in todo if not in_future(u[2], upper)]
        todo = [u for u in todo if in_future(u[2], upper)]
        sim.activate(batch, upper)
        due_times = [g for g in times if not in_future(g, upper)]
        bad = oracle_mismatches(sim.inp, sim.out, logic, due_times, range(3))
        assert not bad, f"{logic_name}: upper={upper}: {bad[:3]}"
    assert not todo
    assert all(not ps for ps in sim.pending.values()), "nothing pends after the end"
    return sim


@pytest.mark.parametrize("logic_name", sorted(SIM_LOGICS))
@SIM
@given(case=stream_case())
def test_operator_oracle(logic_name, case):
    simulate(logic_name, *case)


@pytest.mark.parametrize("logic_name", sorted(SIM_LOGICS))
def test_operator_oracle_many_steps(logic_name):
    # Longer deterministic streams in 2-D with frontiers advancing one coordinate at a
    # time, so pending times are carried over several activations.
    rng = np.random.default_rng(11)
    d, vw = 2, 2
    updates = [(int(rng.integers(0, 3)), (int(rng.integers(-2, 4)), int(rng.integers(0, 2))),
                (int(rng.integers(0, GRID)), int(rng.integers(0, GRID))),
                int(rng.choice([-1, 1, 2]))) for _ in range(40)]
    frontiers = [[(0, 1)], [(0, 2), (1, 1)], [(1, 2), (2, 0)], [(2, 3), (3, 1)],
                 [(4, 2)], []]
    simulate(logic_name, d, vw, updates, frontiers)


def test_algorithms_md_example():
    # count with (0,10)@(0,1)+1 and (0,20)@(1,0)+1, key 0 -> output row [count].
    sim = ReduceSim(2, 1, 1, logic_count)
    sim.activate([(0, (10,), (0, 1), 1), (0, (20,), (1, 0), 1)], [])
    assert sim.out[0] == [((1,), (0, 1), 1), ((1,), (1, 0), 1), ((1,), (1, 1), -2),
                          ((2,), (1, 1), 1)]


def test_algorithms_md_example_with_frontier():
    # Same input, but the frontier (1,1) holds the join back until a later activation.
    sim = ReduceSim(2, 1, 1, logic_count)
    sim.activate([(0, (10,), (0, 1), 1), (0, (20,), (1, 0), 1)], [(1, 1)])
    assert sim.out[0] == [((1,), (0, 1), 1), ((1,), (1, 0), 1)]
    assert sim.pending[0] == {(1, 1)}
    sim.activate([], [])
    assert sorted(sim.out[0]) == [((1,), (0, 1), 1), ((1,), (1, 0), 1), ((1,), (1, 1), -2),
                                  ((2,), (1, 1), 1)]
    assert sim.pending[0] == set()


def test_one_key_1d_stream():
    # 1-D: each activation's due times are just its update times.
    sim = ReduceSim(1, 1, 1, lambda *a: logic_sum(*a, 0))
    sim.activate([(0, (3,), (0,), 1), (0, (4,), (1,), 2)], [(2,)])
    sim.activate([(0, (3,), (2,), -1)], [(5,)])
    assert sorted(sim.out[0]) == sorted([((3,), (0,), 1), ((3,), (1,), -1), ((11,), (1,), 1),
                                         ((8,), (2,), 1), ((11,), (2,), -1)])

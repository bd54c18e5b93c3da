"""Runtime helper kernels: the natural merge sort of reduce key
histories (concatenated sorted runs), the per-key reduction of pending candidates, and
the join's summed pairs (against brute force after consolidation), and the hook that
returns free heap pages before large merges."""
import subprocess
import sys

import numpy as np
import pytest

from ddnumba.kernels.rootagg import _by_time
from ddnumba.kernels.runtime import _min_per_iteration, _sort_vt


def _runs(rng, n_runs, vw, max_len):
    """A concatenation of ``n_runs`` runs, each sorted by (vals, t)."""
    parts_v, parts_t = [], []
    for _ in range(n_runs):
        m = int(rng.integers(0, max_len + 1))
        v = rng.integers(0, 4, (m, vw))
        t = rng.integers(0, 50, m)
        order = np.lexsort((t,) + tuple(v[:, c] for c in range(vw - 1, -1, -1)))
        parts_v.append(v[order])
        parts_t.append(t[order])
    vals = np.concatenate(parts_v) if parts_v else np.zeros((0, vw), np.int64)
    ts = np.concatenate(parts_t) if parts_t else np.zeros(0, np.int64)
    if vw == 0:
        vals = np.zeros((ts.shape[0], 0))
    return vals.astype(np.int64), ts.astype(np.int64)


@pytest.mark.parametrize("vw", [0, 1, 2])
@pytest.mark.parametrize("seed", range(12))
def test_sort_vt_merges_runs_stably(vw, seed):
    rng = np.random.default_rng(seed)
    vals, ts = _runs(rng, int(rng.integers(1, 9)), vw, 40)
    pad = 3                                   # sort a sub-range: neighbours untouched
    n = ts.shape[0]
    V = np.full((n + 2 * pad, vw), -7, np.int64)
    T = np.full(n + 2 * pad, -7, np.int64)
    F = np.full(n + 2 * pad, -7, np.int64)
    V[pad:pad + n] = vals
    T[pad:pad + n] = ts
    F[pad:pad + n] = np.arange(n)             # diffs tag the original position
    width = max(vw, 2)                        # scratch may be wider than the values
    _sort_vt(V, T, F, pad, pad + n, np.empty(n + 1, np.int64),
             np.empty((n, width), np.int64), np.empty(n, np.int64), np.empty(n, np.int64))
    keys = (ts,) + tuple(vals[:, c] for c in range(vw - 1, -1, -1))
    expect = np.lexsort(keys)                 # stable: ties keep their input order
    np.testing.assert_array_equal(F[pad:pad + n], expect)
    np.testing.assert_array_equal(T[pad:pad + n], ts[expect])
    np.testing.assert_array_equal(V[pad:pad + n], vals[expect])
    assert (T[:pad] == -7).all() and (T[pad + n:] == -7).all()
    assert (V[:pad] == -7).all() and (V[pad + n:] == -7).all()


@pytest.mark.parametrize("seed", range(10))
def test_min_per_iteration_keeps_least_time_per_key_and_iteration(seed):
    rng = np.random.default_rng(seed)
    nk = int(rng.integers(1, 8))
    counts = rng.integers(0, 60, nk)
    offs = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    its = rng.integers(0, 6, offs[-1]).astype(np.int64)
    ts = rng.integers(0, 100, offs[-1]).astype(np.int64)
    c_it, c_t, c_end = its.copy(), ts.copy(), np.empty(nk, np.int64)
    total = _min_per_iteration(offs.copy(), c_it, c_t, c_end)
    got_total = 0
    for kk in range(nk):
        a, b = offs[kk], offs[kk + 1]
        expect = {}
        for i, t in zip(its[a:b], ts[a:b]):
            expect[int(i)] = min(expect.get(int(i), 1 << 62), int(t))
        got = list(zip(c_it[a:c_end[kk]].tolist(), c_t[a:c_end[kk]].tolist()))
        assert got == sorted(expect.items())
        got_total += len(got)
    assert total == got_total


def _sorted_side(rng, n, kw_val, w, single_it):
    """n updates of one key (0) with ``w - 1`` value columns, sorted by (row, t, i)."""
    d = np.zeros((n, w), np.int64)
    if w > 1:
        d[:, 1:] = rng.integers(0, kw_val, (n, w - 1))
    t = np.empty((n, 2), np.int64)
    t[:, 0] = rng.integers(0, 12, n)
    t[:, 1] = single_it if single_it is not None else rng.integers(0, 5, n)
    f = rng.integers(-2, 3, n)
    f[f == 0] = 1
    order = np.lexsort((t[:, 1], t[:, 0]) + tuple(d[:, c] for c in range(w - 1, -1, -1)))
    return d[order].copy(), t[order].copy(), f[order].copy()


def _consolidated(d, t, f):
    acc = {}
    for r in range(len(f)):
        k = (tuple(d[r].tolist()), int(t[r, 0]), int(t[r, 1]))
        acc[k] = acc.get(k, 0) + int(f[r])
    return {k: v for k, v in acc.items() if v != 0}


@pytest.mark.parametrize("case", ["left_single", "right_single", "both_single", "neither"])
@pytest.mark.parametrize("acc_right", [True, False])
@pytest.mark.parametrize("seed", range(8))
def test_join_pairs_equal_brute_force_after_consolidation(case, acc_right, seed):
    from ddnumba.kernels.runtime import NEED_GBUF, _pairs
    rng = np.random.default_rng(seed)
    lw, rw, kw = 2, 3, 1
    nl, nr = int(rng.integers(1, 25)), int(rng.integers(1, 25))
    l_it = 2 if case in ("left_single", "both_single") else None
    r_it = 1 if case in ("right_single", "both_single") else None
    ld, lt, lf = _sorted_side(rng, nl, 3, lw, l_it)
    rd, rt, rf = _sorted_side(rng, nr, 3, rw, r_it)
    cap = nl * nr
    od = np.zeros((cap, lw + rw - kw), np.int64)
    ot = np.zeros((cap, 2), np.int64)
    of = np.zeros(cap, np.int64)
    gbuf = np.zeros((4, int(rng.choice([0, 1, 64]))), np.int64)   # grown when small
    while True:
        o = _pairs(ld, lt, lf, 0, nl, rd, rt, rf, 0, nr, kw, od, ot, of, 0, acc_right,
                   gbuf)
        assert not gbuf[:3].any()             # scratch left zero for the next key
        if o != NEED_GBUF:
            break
        assert gbuf.shape[1] < 5              # only asked for when too small
        gbuf = np.zeros((4, 2 * gbuf.shape[1] + 1), np.int64)
    assert o <= cap
    bd, bt, bf = [], [], []
    for i in range(nl):
        for j in range(nr):
            bd.append(np.concatenate([ld[i], rd[j, kw:]]))
            bt.append([max(lt[i, 0], rt[j, 0]), max(lt[i, 1], rt[j, 1])])
            bf.append(lf[i] * rf[j])
    want = _consolidated(np.array(bd), np.array(bt), np.array(bf))
    assert _consolidated(od[:o], ot[:o], of[:o]) == want


@pytest.mark.parametrize("seed", range(4))
def test_join_cross_grows_its_scratch_for_keys_spanning_many_iterations(seed):
    """_cross redoes a key whose histories span more iterations than its pairing
    scratch holds (64 to start): the result equals the brute-force join."""
    from ddnumba.kernels.batch import fence
    from ddnumba.kernels.runtime import _cross
    rng = np.random.default_rng(seed)
    kw = 1
    sides = []
    for w, n, it_hi in [(2, 60, 1), (2, 300, 200)]:
        d = np.zeros((n, w), np.int64)
        d[:, 0] = rng.integers(0, 4, n)
        d[:, 1] = rng.integers(0, 3, n)
        t = np.stack([rng.integers(0, 30, n), rng.integers(0, it_hi, n)], 1)
        if it_hi == 1:
            t[:, 1] = 0          # the left side at one iteration: _pairs_groups
        f = rng.choice(np.array([-1, 1, 2]), n).astype(np.int64)
        order = np.lexsort((t[:, 1], t[:, 0], d[:, 1], d[:, 0]))
        sides.append((d[order].copy(), t[order].astype(np.int64).copy(), f[order].copy()))
    L, R = sides
    od = np.zeros((0, 3), np.int64)
    ot = np.zeros((0, 2), np.int64)
    of = np.zeros(0, np.int64)
    od, ot, of, o = _cross(L, R, kw, od, ot, of, 0, fence(L[0]), fence(R[0]))
    bd, bt, bf = [], [], []
    for i in range(len(L[2])):
        for j in range(len(R[2])):
            if L[0][i, 0] == R[0][j, 0]:
                bd.append(np.concatenate([L[0][i], R[0][j, kw:]]))
                bt.append([max(L[1][i, 0], R[1][j, 0]), max(L[1][i, 1], R[1][j, 1])])
                bf.append(L[2][i] * R[2][j])
    want = _consolidated(np.array(bd), np.array(bt), np.array(bf))
    assert max(k[2] for k in want) > 64       # some pair joins beyond the first scratch
    assert _consolidated(od[:o], ot[:o], of[:o]) == want


def _corrections_case(rng, K, max_vals, max_times):
    """Random input for _corrections_1d: per key, due times, desired (val, count) rows
    per due time, and an old output history sorted by (val, t)."""
    ow = 2
    due_offs, due_t, w_offs, w_vals, w_counts = [0], [], [0], [], []
    o_offs, o_vals, o_t, o_f = [0], [], [], []
    for _ in range(K):
        nv = int(rng.integers(1, max_vals + 1))
        vals = rng.integers(0, 8, (nv, ow))
        times = np.unique(rng.integers(0, 3 * max_times, int(rng.integers(0, max_times + 1))))
        for t in times:
            due_t.append(int(t))
            pick = np.unique(vals[rng.random(nv) < 0.5], axis=0)   # sorted, distinct
            for v in pick:
                w_vals.append(v)
                w_counts.append(int(rng.integers(1, 3)))
            w_offs.append(len(w_counts))
        due_offs.append(len(due_t))
        n_old = int(rng.integers(0, 2 * max_vals))
        old = [(tuple(vals[rng.integers(0, nv)]), int(rng.integers(0, 3 * max_times)),
                int(rng.choice([-1, 1, 2]))) for _ in range(n_old)]
        old.sort(key=lambda e: (e[0], e[1]))
        for v, t, f in old:
            o_vals.append(v)
            o_t.append(t)
            o_f.append(f)
        o_offs.append(len(o_f))
    a = lambda x: np.array(x, np.int64)
    return (a(due_offs), a(due_t).reshape(-1, 1), a(w_offs),
            a(w_vals).reshape(-1, ow), a(w_counts), a(o_offs), a(o_vals).reshape(-1, ow),
            a(o_t).reshape(-1, 1), a(o_f))


@pytest.mark.parametrize("shape", [(30, 3, 4), (6, 40, 25), (120, 5, 3)])
@pytest.mark.parametrize("seed", range(3))
def test_corrections_1d_equal_brute_force(shape, seed):
    """Desired minus current per key, due time and value, against a dictionary
    replay; the shapes need more than the kernel's first buffers (16 values, 16
    corrections a key, 64 results), so it stops, grows them and redoes a key."""
    from ddnumba.kernels.runtime import _corrections_1d
    rng = np.random.default_rng(seed)
    (due_offs, due_t, w_offs, w_vals, w_counts, o_offs, o_vals, o_t,
     o_f) = _corrections_case(rng, *shape)
    ck, cv, ct, cf = _corrections_1d(due_offs, due_t, w_offs, w_vals, w_counts, o_offs,
                                     o_vals, o_t, o_f)
    want = []
    for kk in range(len(due_offs) - 1):
        emitted = {}
        rows = []
        for ti in range(due_offs[kk], due_offs[kk + 1]):
            tau = int(due_t[ti, 0])
            cur = dict(emitted)
            for r in range(o_offs[kk], o_offs[kk + 1]):
                if o_t[r, 0] <= tau:
                    v = tuple(o_vals[r].tolist())
                    cur[v] = cur.get(v, 0) + int(o_f[r])
            des = {}
            for wi in range(w_offs[ti], w_offs[ti + 1]):
                v = tuple(w_vals[wi].tolist())
                des[v] = des.get(v, 0) + int(w_counts[wi])
            for v in set(cur) | set(des):
                d = des.get(v, 0) - cur.get(v, 0)
                if d:
                    rows.append((kk, v, tau, d))
                    emitted[v] = emitted.get(v, 0) + d
        want += sorted(rows, key=lambda e: (e[1], e[2]))
    got = [(int(ck[i]), tuple(cv[i].tolist()), int(ct[i]), int(cf[i])) for i in range(len(cf))]
    assert got == want
    if shape[0] > 64:
        assert len(want) > 64


def test_corrections_1d_reports_overflow():
    from ddnumba.kernels.runtime import _corrections_1d
    a = lambda x, *sh: np.array(x, np.int64).reshape(*sh) if sh else np.array(x, np.int64)
    # old output sums past int64 at the due time
    with pytest.raises(OverflowError, match="sum of output counts"):
        _corrections_1d(a([0, 1]), a([5], 1, 1), a([0, 0]), a([], 0, 1), a([]), a([0, 2]),
                        a([[1], [1]]), a([[0], [1]]), a([2 ** 62, 2 ** 62]))
    # desired minus current overflows
    with pytest.raises(OverflowError, match="correction overflows"):
        _corrections_1d(a([0, 1]), a([5], 1, 1), a([0, 1]), a([[1]]), a([2 ** 62]), a([0, 1]),
                        a([[1]]), a([[0]]), a([-(2 ** 62)]))


@pytest.mark.parametrize("case", ["left_single", "right_single", "both_single", "neither"])
@pytest.mark.parametrize("acc_right", [True, False])
def test_join_pairs_report_overflow(case, acc_right):
    """Every pairing path returns OV_PRODUCT / OV_SUM instead of wrapping."""
    from ddnumba.kernels.runtime import OV_PRODUCT, OV_SUM, _pairs
    big = 2 ** 62
    l_it = 2 if case in ("left_single", "both_single") else None
    r_it = 1 if case in ("right_single", "both_single") else None
    for n, diff, want in [(1, big, OV_PRODUCT), (3, big, (OV_PRODUCT, OV_SUM))]:
        # n updates of one (key, val) row per side at distinct times
        def side(w, it):
            d = np.zeros((n, w), np.int64)
            t = np.stack([np.arange(n), np.full(n, it if it is not None else 0)], 1)
            if it is None:
                t[:, 1] = np.arange(n) % 3
            return d, t.astype(np.int64), np.full(n, diff, np.int64)
        ld, lt, lf = side(2, l_it)
        rd, rt, rf = side(3, r_it)
        cap = n * n
        od = np.zeros((cap, 4), np.int64)
        ot = np.zeros((cap, 2), np.int64)
        of = np.zeros(cap, np.int64)
        gbuf = np.zeros((4, 64), np.int64)
        o = _pairs(ld, lt, lf, 0, n, rd, rt, rf, 0, n, 1, od, ot, of, 0, acc_right, gbuf)
        assert o in (want if isinstance(want, tuple) else (want,)), (case, n, o)
        assert not gbuf[:3].any()


def _spine_list(rng, sizes, w, n_keys, n_times):
    """A typed list of fenced flat batches of about the given sizes."""
    from numba.typed import List

    from ddnumba.kernels.batch import fence, sort_consolidate
    from ddnumba.kernels.runtime import SBATCH_TYPE, _fenced

    sp = List.empty_list(SBATCH_TYPE)
    raw = []
    for size in sizes:
        d = rng.integers(0, n_keys, (size, w)).astype(np.int64)
        t = np.stack([rng.integers(0, n_times, size), rng.integers(0, 3, size)], 1)
        f = rng.choice(np.array([-1, 1, 2]), size).astype(np.int64)
        b = sort_consolidate(d, t.astype(np.int64), f)
        raw.append(b)
        sp.append(_fenced(b))
        assert np.array_equal(sp[-1][3], fence(b[0]))
    return sp, raw


def _accumulated(batches, since):
    """Updates as a dict ``(data row, max(t, since), i) -> summed diff`` (zeros dropped)."""
    acc = {}
    for d, t, f in batches:
        for r in range(f.shape[0]):
            key = (tuple(d[r]), max(int(t[r, 0]), since), int(t[r, 1]))
            acc[key] = acc.get(key, 0) + int(f[r])
    return {k: v for k, v in acc.items() if v}


@pytest.mark.parametrize("ratio", [1, 2, 8])
@pytest.mark.parametrize("seed", range(24))
def test_settle_spine_keeps_updates_compacts_and_restores_shape(seed, ratio):
    from ddnumba.kernels.batch import fence
    from ddnumba.kernels.runtime import _settle_spine

    rng = np.random.default_rng(seed)
    # a geometric head (as spine inserts leave it) and a tail of recent batches; few
    # keys and times so the tail compacts a lot once times advance to `since`
    head = [int(x) for x in sorted(rng.integers(200, 3000, int(rng.integers(0, 3))),
                                   reverse=True)]
    tail = [int(x) for x in rng.integers(1, 400, int(rng.integers(0, 5)))]
    n_keys = int(rng.choice([3, 40, 1000]))
    sp, raw = _spine_list(rng, head + tail, 2, n_keys, 12)
    since = int(rng.integers(0, 14))
    # the batches written by the run that just ended (from `dirty` on; -1: none) and
    # the rows it added
    dirty = int(rng.integers(-1, len(sp))) if len(sp) else -1
    added = int(rng.integers(0, 800))
    before = _accumulated(raw, since)
    rows_before = [b[2].shape[0] for b in sp]
    heads = [b[0] for b in sp]
    info = np.zeros(8, np.int64)
    _settle_spine(sp, since, info, dirty, added, ratio)
    after = [(b[0], b[1], b[2]) for b in sp]
    assert _accumulated(after, since) == before           # nothing lost or changed
    sizes = [b[2].shape[0] for b in sp]
    assert all(s > 0 for s in sizes)
    for i in range(len(sizes) - 1):                         # strongly geometric
        assert sizes[i] > ratio * sum(sizes[i + 1:]), (rows_before, sizes)
    for d, t, f, fnc in sp:                                 # sorted, fenced
        assert np.array_equal(fnc, fence(d))
        if f.shape[0] > 1:
            order = np.lexsort((t[:, 1], t[:, 0]) + tuple(d[:, c] for c in range(1, -1, -1)))
            assert np.array_equal(order, np.arange(f.shape[0]))
    # the batches from `cut` on are rewritten: those the raw-size rule merges, and the
    # run's batches when rewriting them costs at most `ratio` times what it added
    cut = len(rows_before)
    for i in range(len(rows_before) - 1, 0, -1):
        if ratio * sum(rows_before[i:]) >= rows_before[i - 1]:
            cut = i - 1
    if 0 <= dirty < cut and sum(rows_before[dirty:]) <= ratio * added:
        cut = dirty
    for i in range(min(cut, len(rows_before))):             # the rest stay as they were
        assert np.shares_memory(sp[i][0], heads[i])
    merged = len(rows_before) - cut
    if merged >= 2 or (merged == 1 and 0 <= dirty <= cut):
        assert int(info[4]) == max(merged - 1, 1)
        assert len(sizes) <= cut + 1
        for d, t, f, fnc in sp[cut:]:                        # rewritten: compacted
            assert (t[:, 0] >= since).all()
    else:
        assert int(info[4]) == 0 and len(sizes) == len(rows_before)


def test_spine_insert_records_the_run_for_settle():
    """Inserts note the first batch they wrote and the rows they added (the settle's
    input); settling resets both."""
    from numba.typed import List

    from ddnumba.kernels.runtime import (INFO_SPINES, MERGE_RATIO, SBATCH_TYPE,
                                         SETTLE_RATIO, _settle, _spine_insert)

    rng = np.random.default_rng(3)
    sp, raw = _spine_list(rng, [3000, 300], 2, 1000, 12)
    info = np.zeros(INFO_SPINES + 4, np.int64)
    info[INFO_SPINES::2] = -1
    x = INFO_SPINES + 2          # spine 1
    added = 0
    for size in (30, 20, 200):
        d = rng.integers(0, 1000, (size, 2)).astype(np.int64)
        t = np.stack([rng.integers(0, 12, size), np.zeros(size, np.int64)], 1)
        b = sort_consolidate_py(d, t, np.ones(size, np.int64))
        raw.append(b)
        added += b[2].shape[0]
        _spine_insert(sp, b, np.int64(0), info, 1)
    # (MERGE_RATIO 1) 30 is appended (index 2), 20 too (index 3), 200 merges with the
    # 20 and then the 30, not the 300: the first batch written stays index 2
    assert MERGE_RATIO == 1
    assert [b[2].shape[0] for b in sp][:2] == [raw[0][2].shape[0], raw[1][2].shape[0]]
    assert len(sp) == 3
    assert int(info[x]) == 2 and int(info[x + 1]) == added
    assert int(info[INFO_SPINES]) == -1                     # spine 0 untouched
    assert _accumulated([(b[0], b[1], b[2]) for b in sp], 0) == _accumulated(raw, 0)
    # settle of spine 1 in a state tuple: only fields 1 (spines), 3 (since), 9 (info)
    sps = List([List.empty_list(SBATCH_TYPE), sp])
    st = (None, sps, None, np.array([0, 12], np.int64), None, None, None, None, None,
          info, None)
    _settle(st, 1, SETTLE_RATIO)
    assert int(info[x]) == -1 and int(info[x + 1]) == 0
    assert _accumulated([(b[0], b[1], b[2]) for b in sps[1]], 12) == _accumulated(raw, 12)



def _root_spine_shapes(df):
    """Batch sizes of every spine of a native dataflow (all root spines here)."""
    return [[b[2].shape[0] for b in sp] for sp in df._native.st[1]]


def test_root_pass_settles_root_spines_at_the_root_ratio():
    """After every root pass each root trace is strongly geometric at
    ROOT_SETTLE_RATIO (each batch larger than that many times all later ones), or at
    the ratio set in the state's info[6]; the answer at every time is NumPy's."""
    import ddnumba as dd
    from ddnumba.kernels.runtime import ROOT_SETTLE_RATIO

    rng = np.random.default_rng(5)
    df = dd.Dataflow(engine="native")
    a_in, a = df.new_input(["k", "v"])
    b_in, b = df.new_input(["k", "w"])
    cap = a.join(b).count().capture()
    ka, va = rng.integers(0, 300, 3000), rng.integers(0, 50, 3000)
    kb, wb = rng.integers(0, 300, 600), rng.integers(0, 50, 600)
    a_in.insert(ka, va, time=0)
    b_in.insert(kb, wb, time=0)
    rows = [(int(k), int(v)) for k, v in zip(ka, va)]   # `a` at the last time updated
    per_b = np.bincount(kb, minlength=300)
    geometric = {ROOT_SETTLE_RATIO: 0, 5: 0}
    looser = 0      # shapes of the first phase that a ratio of 5 would have merged
    for t in range(1, 121):
        ratio = ROOT_SETTLE_RATIO if t <= 60 else 5
        if t == 61:
            df._native.st[9][6] = 5
        a_in.advance_to(t)
        b_in.advance_to(t)
        df.run()
        # the join's count at t - 1 (complete; `rows` holds every update up to it)
        tab = cap.at(t - 1)
        got = dict(zip(tab.column(0).to_numpy().tolist(),
                       tab.column("count").to_numpy().tolist()))
        per_a = np.bincount(np.array([r[0] for r in rows]), minlength=300)
        want = {k: int(per_a[k] * per_b[k]) for k in range(300) if per_a[k] * per_b[k]}
        assert got == want, t
        for sizes in _root_spine_shapes(df):
            for i in range(len(sizes) - 1):
                assert sizes[i] > ratio * sum(sizes[i + 1:]), (t, ratio, sizes)
            geometric[ratio] += len(sizes) > 1
            if t <= 60:
                looser += any(sizes[i] <= 5 * sum(sizes[i + 1:])
                              for i in range(len(sizes) - 1))
        # next run: retract a few existing rows, add new ones
        out = rng.choice(len(rows), 8, replace=False)
        gone = [rows[i] for i in out]
        rows = [r for i, r in enumerate(rows) if i not in set(out.tolist())]
        new = [(int(k), int(v)) for k, v in zip(rng.integers(0, 300, 12),
                                                  rng.integers(0, 50, 12))]
        rows += new
        a_in.update(np.array([r[0] for r in gone + new]), np.array([r[1] for r in gone + new]),
                    time=t, diff=np.array([-1] * len(gone) + [1] * len(new)))
    # the shapes checked had more than one batch, under both ratios
    assert geometric[ROOT_SETTLE_RATIO] > 0 and geometric[5] > 0
    # ... and the root ratio is the one in force: not a stricter one (e.g. the loops')
    assert ROOT_SETTLE_RATIO < 5 and looser > 0

def sort_consolidate_py(d, t, f):
    from ddnumba.kernels.batch import sort_consolidate
    return sort_consolidate(d, t.astype(np.int64), f)


_TRIM_SCRIPT = r"""
import numpy as np
from numba import njit
from ddnumba.kernels.hooks import _MALLOC_TRIM, trim_heap

def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096

@njit
def call_trim():
    trim_heap()      # from compiled code, as the runtime calls it

assert _MALLOC_TRIM is not None, "glibc's malloc_trim was not found"
call_trim()
# Freeing a 16 MiB mapped block raises glibc's mmap threshold to 16 MiB, so the
# 1 MiB arrays below come from the heap; the last one stays and keeps the heap's top
# in use, so freeing the others does not shrink the heap by itself.
big = np.ones(16 << 20, np.uint8)
del big
parts = [np.ones(1 << 20, np.uint8) for _ in range(257)]
pin = parts.pop()
del parts
before = rss()
call_trim()
after = rss()
print(before - after)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc heap (Linux)")
def test_trim_heap_returns_freed_heap_pages():
    """trim_heap, called from compiled code, gives the free heap pages back: 256 MiB of
    heap arrays freed below a live block stay resident until it runs (checked in a
    fresh process, whose heap holds nothing else of that size)."""
    proc = subprocess.run([sys.executable, "-c", _TRIM_SCRIPT], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    released = int(proc.stdout.split()[-1])
    assert released >= 200 << 20, f"only {released} bytes released"


def test_large_spine_merges_trim_the_heap_first(monkeypatch):
    """Every spine merge is counted; one reading TRIM_ROWS rows or more first calls
    malloc_trim (counted through the hook's C function, replaced here)."""
    from ddnumba.kernels import hooks
    from ddnumba.kernels.runtime import TRIM_ROWS, _before_merge
    calls = []
    monkeypatch.setattr(hooks, "_MALLOC_TRIM", lambda pad: calls.append(pad) or 1)
    info = np.zeros(8, np.int64)
    _before_merge(info, TRIM_ROWS - 1)
    assert calls == [] and info[4] == 1 and info[5] == TRIM_ROWS - 1
    _before_merge(info, TRIM_ROWS)
    assert calls == [0] and info[4] == 2 and info[5] == 2 * TRIM_ROWS - 1


def test_push_and_take_batches_through_entry_points():
    # ddnumba.native pushes input batches and takes capture output through these two
    # (their compiled entry points, after a first call through the dispatcher): the
    # batches come back concatenated in push order, and the list is left empty.
    from numba.typed import List

    from ddnumba.kernels.runtime import BATCH_TYPE, push_batch, take_batches
    from ddnumba.native import _entry

    rng = np.random.default_rng(7)
    lst = List.empty_list(BATCH_TYPE)
    parts = []
    push = push_batch
    for k in range(5):
        n = int(rng.integers(0, 6))
        b = (rng.integers(-9, 9, (n, 3)), np.stack([rng.integers(0, 9, n),
                                                     np.zeros(n, np.int64)], axis=1),
             rng.integers(-3, 4, n))
        b = tuple(np.ascontiguousarray(a, dtype=np.int64) for a in b)
        parts.append(b)
        push(lst, *b)
        push = _entry(push_batch)
    assert len(lst) == 5
    take = take_batches
    d, t, f = take(lst, 3)
    assert len(lst) == 0
    np.testing.assert_array_equal(d, np.concatenate([p[0] for p in parts]))
    np.testing.assert_array_equal(t, np.concatenate([p[1] for p in parts]))
    np.testing.assert_array_equal(f, np.concatenate([p[2] for p in parts]))
    take = _entry(take_batches)
    d, t, f = take(lst, 3)      # empty: no rows, the given width
    assert d.shape == (0, 3) and t.shape[0] == 0 and f.shape == (0,)


@pytest.mark.parametrize("case", ["random", "sorted", "equal", "one_out_of_place", "empty"])
def test_time_order_is_a_stable_sort(case):
    # the count/sum reduce visits a key's events in this order: it must be the stable
    # argsort of the times, whether or not they come in order already, for short
    # groups (insertion sort) and long ones
    rng = np.random.default_rng(4)
    n = 200
    t = {"random": rng.integers(0, 20, n + 5),
         "sorted": np.sort(rng.integers(0, 20, n + 5)),
         "equal": np.zeros(n + 5, np.int64),
         "one_out_of_place": np.r_[np.arange(n - 1), [-1], [7, 7, 7, 7, 7]],
         "empty": np.zeros(5, np.int64)}[case].astype(np.int64)
    m = 0 if case == "empty" else n      # only t[:n] counts (the rest is scratch)
    ts = np.stack([t, np.zeros_like(t)], axis=1)
    for r, e in ((0, m), (min(3, m), min(23, m)), (min(40, m), min(72, m))):
        order = np.full(len(t), -1, np.int64)
        _by_time(ts, r, e, order)
        np.testing.assert_array_equal(order[:e - r], r + np.argsort(t[r:e], kind="stable"))

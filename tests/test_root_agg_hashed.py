"""Count and sum outside loops keep hashed current state (kernels.rootagg) instead of
traces, on the native engine and (with one time coordinate) on the Python engine:
checked against a brute-force oracle at every time on both engines, the engines'
update streams against each other, for bounded state, and for overflow."""
import numpy as np
import pytest

import ddnumba as dd
from ddnumba.testing import updates_from_table
from ddnumba.kernels import consolidate as C

from reference_reduce import count_and_sum_at


def _got(cap, x):
    tab = cap.at(x)
    return dict(zip(tab.column(0).to_pylist(), tab.column(1).to_pylist()))


def _program(df):
    """A count and a sum that only read their arrangement, and a count of ``a``
    whose arrangement a join also reads (so it keeps its trace)."""
    a_in, a = df.new_input(["k", "v"])
    b_in, b = df.new_input(["k", "w"])
    caps = (a.count().capture(), a.sum("v").capture(), b.count().capture(),
            b.join(a).count().capture())
    return a_in, b_in, caps


def _stream(rng, runs, keys, per_run, span):
    """Per run, updates of ``a`` and ``b`` at ``span`` distinct times (some beyond
    the run's frontier, due a later run), with negative diffs and values."""
    out = []
    t = 0
    for _ in range(runs):
        ups = []
        for _side in range(2):
            n = int(rng.integers(1, per_run))
            ks = rng.integers(0, keys, n)
            vs = rng.integers(-4, 5, n)
            ts = t + rng.integers(0, span + 3, n)       # up to 2 times ahead
            ds = rng.choice(np.array([-2, -1, 1, 1, 2, 3]), n)
            ups.append((ks, vs, ts, ds))
        t += span
        out.append((ups, t))
    return out


@pytest.mark.parametrize("engine", ["native", "python"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_root_count_and_sum_match_the_oracle_at_every_time(seed, engine):
    rng = np.random.default_rng(seed)
    stream = _stream(rng, runs=25, keys=9, per_run=40, span=4)
    df = dd.Dataflow(engine=engine)
    a_in, b_in, (ca, sa, cb, cj) = _program(df)
    rows_a, rows_b = [], []
    done = 0
    for (ua, ub), frontier in stream:
        a_in.update(*ua[:2], time=ua[2], diff=ua[3])
        b_in.update(*ub[:2], time=ub[2], diff=ub[3])
        rows_a += list(zip(*(x.tolist() for x in ua)))
        rows_b += list(zip(*(x.tolist() for x in ub)))
        a_in.advance_to(frontier)
        b_in.advance_to(frontier)
        df.run()
        for x in range(done, frontier):
            want_c, want_s = count_and_sum_at(rows_a, x)
            assert _got(ca, x) == want_c, x
            assert _got(sa, x) == want_s, x
            assert _got(cb, x) == count_and_sum_at(rows_b, x)[0], x
            # the join's rows: (k, w, v) with multiplicity ma * mb
            acc_a, acc_b = {}, {}
            for k, v, t, d in rows_a:
                if t <= x:
                    acc_a[(k, v)] = acc_a.get((k, v), 0) + d
            for k, w, t, d in rows_b:
                if t <= x:
                    acc_b[(k, w)] = acc_b.get((k, w), 0) + d
            want_j = {}
            for (k, w), mb in acc_b.items():
                for (k2, v), ma in acc_a.items():
                    if k2 == k and ma * mb:
                        want_j[k] = want_j.get(k, 0) + ma * mb
            assert _got(cj, x) == want_j, x
        done = frontier
    df.close()


@pytest.mark.parametrize("seed", [4, 5])
def test_root_count_and_sum_stream_equals_the_python_engines(seed):
    """Not only the accumulations: the output updates themselves (time by time,
    consolidated) are the Python engine's."""
    rng = np.random.default_rng(seed)
    stream = _stream(rng, runs=15, keys=6, per_run=30, span=3)
    got = {}
    for engine in ("native", "python"):
        df = dd.Dataflow(engine=engine)
        a_in, b_in, caps = _program(df)
        for (ua, ub), frontier in stream:
            a_in.update(*ua[:2], time=ua[2], diff=ua[3])
            b_in.update(*ub[:2], time=ub[2], diff=ub[3])
            a_in.advance_to(frontier)
            b_in.advance_to(frontier)
            df.run()
        got[engine] = [sorted(updates_from_table(c.updates())) for c in caps]
        df.close()
    assert all(got["native"]), "no output to compare"
    assert got["native"] == got["python"]


def _hashed(eng):
    """Entries held by the engine's hashed states (the root counts' and sums')."""
    return int(sum(eng.st[11][h][2][3] for h in range(len(eng.st[11]))))


def test_root_count_state_is_current_state_only():
    """The state holds each key's non-zero values and its output, nothing per time:
    many runs over the same values leave it as large as after the first; no count or
    sum keeps an output trace, an arrangement read only by counts and sums keeps no
    trace (one a join also reads keeps its batches); retracting everything empties
    the state."""
    from ddnumba.operators.join import JoinNode
    df = dd.Dataflow(engine="native")
    a_in, b_in, (ca, sa, cb, cj) = _program(df)
    ks, vs = np.arange(1000) % 200, np.arange(1000)
    a_in.insert(ks, vs, time=0)
    b_in.insert([7], [1], time=0)
    a_in.advance_to(1)
    b_in.advance_to(1)
    df.run()
    eng = df._native
    # `a`: 1,000 (key, value) counts in its count's and its sum's state; `b`: one,
    # the join: 5 (the rows of key 7)
    assert _hashed(eng) == 2 * 1000 + 1 + 5
    first = _hashed(eng)
    rng = np.random.default_rng(7)
    for t in range(1, 101):
        pick = rng.choice(1000, 5, replace=False)
        a_in.remove(ks[pick], vs[pick], time=t)
        a_in.insert(ks[pick], vs[pick], time=t + 1)
        a_in.advance_to(t + 1)
        b_in.advance_to(t + 1)
        df.run()
        assert _got(ca, t) == {k: 5 - int((ks[pick] == k).sum()) for k in range(200)
                               if 5 - int((ks[pick] == k).sum())}
    a_in.advance_to(102)
    b_in.advance_to(102)
    df.run()
    assert _got(ca, 101) == {k: 5 for k in range(200)}
    assert _hashed(eng) == first
    assert all(what == "arrange" for _, what in eng.spine_owner)
    traced = {}
    for s, (node, _) in enumerate(eng.spine_owner):
        joined = any(isinstance(c, JoinNode) for c, _ in node.consumers)
        traced.setdefault(joined, []).append(sum(b[2].shape[0] for b in eng.st[1][s]))
    # a's and b's arrangements (the join reads them) keep traces; the join output's
    # arrangement (read by a count only) keeps none
    assert len(traced[True]) == 2 and min(traced[True]) > 0
    assert traced[False] == [0]
    a_in.remove(ks, vs, time=102)
    b_in.remove([7], [1], time=102)
    a_in.advance_to(103)
    b_in.advance_to(103)
    df.run()
    assert _got(ca, 102) == {} and _got(sa, 102) == {} and _got(cj, 102) == {}
    assert _hashed(eng) == 0
    # ... and the tables shrank back: none keeps the slots of 1,000 values gone
    states = [eng.st[11][eng.prm[i, 1]] for i in eng.agg_nodes]
    assert len(states) == 4
    assert max(max(s[0].shape[0], s[1].shape[0]) for s in states) <= 16
    df.close()


def test_python_engine_root_count_reads_no_history():
    """On the Python engine, a count or sum with one time coordinate holds each key's
    non-zero values and its output in hash tables and nothing else (a distinct: its
    rows present): no output trace, no read of its arrangement's history (a change to
    a key of 1,000 values costs what it costs for a key of one), the same entries
    after 100 runs of churn, none once everything is retracted;
    ``bench.state_records`` counts them."""
    from ddnumba.bench import _all_nodes, state_records
    from ddnumba.operators.reduce import ReduceNode
    df = dd.Dataflow(engine="python")
    a_in, a = df.new_input(["k", "v"])
    ca = a.count().capture()
    sa = a.sum("v").capture()
    da = a.distinct().capture()
    ks, vs = np.arange(1000) % 200, np.arange(1000)
    ks[:600] = 0                       # key 0: 600 values
    a_in.insert(ks, vs, time=0)
    a_in.advance_to(1)
    df.run()
    reduces = [n for n in _all_nodes(df) if isinstance(n, ReduceNode)]
    assert len(reduces) == 3
    n_keys = len(set(ks.tolist()))
    want_held = sorted([1000 + n_keys] * 2 + [1000])
    assert sorted(r.hashed_records() for r in reduces) == want_held
    assert state_records(df) >= sum(want_held)

    def refuse(*_a, **_k):
        raise AssertionError("a hashed count read its arrangement's history")

    for r in reduces:
        r.arranged.spine.gather = refuse
    rng = np.random.default_rng(3)
    for t in range(1, 101):
        pick = rng.choice(1000, 3, replace=False)
        a_in.remove(ks[pick], vs[pick], time=t)
        a_in.insert(ks[pick], vs[pick], time=t + 1)
        a_in.advance_to(t + 1)
        df.run()
        want = {}
        wsum = {}
        for i in set(range(1000)) - set(pick.tolist()):
            want[int(ks[i])] = want.get(int(ks[i]), 0) + 1
            wsum[int(ks[i])] = wsum.get(int(ks[i]), 0) + int(vs[i])
        assert _got(ca, t) == want and _got(sa, t) == wsum, t
        assert da.at(t).num_rows == 997, t
    a_in.advance_to(102)
    df.run()
    assert sorted(r.hashed_records() for r in reduces) == want_held
    assert all(len(r.out) == 0 for r in reduces)
    a_in.remove(ks, vs, time=102)
    a_in.advance_to(103)
    df.run()
    assert _got(ca, 102) == {} and _got(sa, 102) == {} and da.at(102).num_rows == 0
    assert [r.hashed_records() for r in reduces] == [0, 0, 0]
    df.close()


@pytest.mark.parametrize("engine", ["native", "python"])
def test_root_count_a_total_of_zero_with_values_present(engine):
    """A key whose values' counts are non-zero but add up to zero has the output
    ``(key, 0)``; it goes when the values go."""
    df = dd.Dataflow(engine=engine)
    a_in, c = df.new_input(["k", "v"])
    cap = c.count().capture()
    a_in.update([1, 1], [10, 20], time=0, diff=[2, -2])
    a_in.update([1], [10], time=1, diff=[-2])
    a_in.update([1], [20], time=2, diff=[2])
    a_in.advance_to(3)
    df.run()
    assert _got(cap, 0) == {1: 0}
    assert _got(cap, 1) == {1: -2}
    assert _got(cap, 2) == {}
    df.close()


@pytest.mark.parametrize("engine", ["native", "python"])
@pytest.mark.parametrize("what", ["count", "sum"])
def test_root_count_and_sum_overflow_raise(what, engine):
    df = dd.Dataflow(engine=engine)
    a_in, c = df.new_input(["k", "v"])
    cap = (c.count() if what == "count" else c.sum("v")).capture()
    big = 2 ** 62
    a_in.update([1], [1], time=0, diff=[big])
    a_in.advance_to(1)
    df.run()
    assert _got(cap, 0) == {1: big}
    if what == "count":
        a_in.update([1], [4], time=1, diff=[big])      # the total overflows
    else:
        a_in.update([1], [big], time=1, diff=[2])      # value times count overflows
    a_in.advance_to(2)
    with pytest.raises(OverflowError, match="overflows int64"):
        df.run()
    df.close()


def _oracle_changes(before, after, t):
    """The output changes at ``t`` from the per-(key, vals) counts ``before`` to
    ``after`` (dicts), for a count (``vals`` ignored) and a sum of ``vals[0]``."""
    def outputs(acc, is_sum):
        out = {}
        for (k, *v), m in acc.items():
            if m:
                out[k] = out.get(k, 0) + (m * v[0] if is_sum else m)
        return out
    res = []
    for is_sum in (False, True):
        b, a = outputs(before, is_sum), outputs(after, is_sum)
        ch = {}
        for k, tot in b.items():
            ch[(k, tot)] = ch.get((k, tot), 0) - 1
        for k, tot in a.items():
            ch[(k, tot)] = ch.get((k, tot), 0) + 1
        res.append({(k, tot, t): d for (k, tot), d in ch.items() if d})
    return res


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_agg_step_against_brute_force(seed):
    """The kernel alone, batch after batch (several times each, values that come and
    go, tiny domains so that probe runs collide and deletions shift entries), for a
    count and a sum: its output changes are the brute-force changes of the totals at
    every time, and after every batch each live value is found where it is probed,
    with its count, each key with its number of values and total, and no other slot
    is used."""
    from ddnumba.kernels.hstate import new_meta
    from ddnumba.kernels.rootagg import M_KEYS, M_VALUES, _probe, agg_step
    rng = np.random.default_rng(seed)
    states = [[np.zeros((16, 7), np.int64), np.zeros((64, 3), np.int64), new_meta(1, 1)]
              for _ in range(2)]
    acc = {}
    t0 = 0
    for b in range(60):
        n = int(rng.integers(1, 30))
        nd = np.stack([rng.integers(0, 6, n), rng.integers(-3, 5, n)], axis=1)
        nt = np.zeros((n, 2), np.int64)
        nt[:, 0] = t0 + rng.integers(0, 4, n)
        nf = rng.choice(np.array([-2, -1, 1, 2]), n)
        if b % 5 == 4:
            # every value of two keys retracted (at times of their own): keys vanish
            gone = [(kv, m) for kv, m in acc.items() if m and kv[0] in
                    rng.choice(6, 2, replace=False)]
            if gone:
                nd = np.concatenate([nd, np.array([kv for kv, _ in gone])])
                nt = np.concatenate([nt, np.stack(
                    [t0 + rng.integers(0, 4, len(gone)), np.zeros(len(gone), int)], 1)])
                nf = np.concatenate([nf, [-m for _, m in gone]])
        o = np.lexsort((nt[:, 0], nd[:, 1], nd[:, 0]))
        nd, nt, nf = nd[o].astype(np.int64), nt[o], nf[o].astype(np.int64)
        want = [{}, {}]
        for t in range(t0, t0 + 4):
            before = dict(acc)
            for (k, v), tt, f in zip(nd.tolist(), nt[:, 0].tolist(), nf.tolist()):
                if tt == t:
                    acc[(k, v)] = acc.get((k, v), 0) + f
            for i, ch in enumerate(_oracle_changes(before, acc, t)):
                want[i].update(ch)
        for i, st in enumerate(states):
            tab, arena, d, tt, f = agg_step(st[0], st[1], st[2], nd, nt, nf, 1, 1, i == 1, 0)
            st[0], st[1] = tab, arena
            got = {(int(r[0]), int(r[1]), int(x)): int(y)
                   for r, x, y in zip(d, tt[:, 0], f)}
            assert got == want[i], (i, t0)
            # written sorted and consolidated, second time coordinate 0
            assert C.is_consolidated(d, tt, f) and not tt[:, 1].any()
            live = {kv: m for kv, m in acc.items() if m}
            assert st[2][M_VALUES] == len(live)
            assert int((tab[:, 2] != 0).sum()) == len(live)
            for (k, v), m in live.items():
                s = _probe(tab, np.array([[k, v]], np.int64), 0, 2)
                assert s >= 0 and tab[s, 2] == m, (k, v)
            # keys: (key, values present, total)
            keys = {}
            for (k, v), m in live.items():
                nz, tot = keys.get(k, (0, 0))
                keys[k] = (nz + 1, tot + (m * v if i == 1 else m))
            assert st[2][M_KEYS] == len(keys)
            assert int((arena[:, 1] != 0).sum()) == len(keys)
            for k, (nz, tot) in keys.items():
                s = _probe(arena, np.array([[k]], np.int64), 0, 1)
                assert s >= 0 and tuple(arena[s, 1:3]) == (nz, tot), k
        t0 += 4


def test_root_count_tables_fill_to_three_quarters():
    """The root scope's tables are sized for a batch at a load of at most 3/4 (rows of
    a few words, several to a cache line; the loops' tables, a line a row, stop at
    5/8): 1,000 values and 200 keys take 1,536 and 384 slots, the least on the
    grid of powers of two and three times them."""
    from ddnumba.kernels.hstate import grid_cap
    df = dd.Dataflow(engine="native")
    a_in, a = df.new_input(["k", "v"])
    a.count().capture()
    a_in.insert(np.arange(1000) % 200, np.arange(1000), time=0)
    a_in.advance_to(1)
    df.run()
    eng = df._native
    (i,) = eng.agg_nodes
    tab, keys, _ = eng.st[11][eng.prm[i, 1]]
    assert tab.shape[0] == grid_cap(1000, 3, 4) == 1536
    assert keys.shape[0] == grid_cap(200, 3, 4)
    df.close()


@pytest.mark.parametrize("is_sum", [False, True])
def test_agg_step_orders_many_corrections_of_one_key(is_sum):
    """A key whose total changes at many times of one batch (more corrections than
    the insertion sort takes: they are merge-sorted first) comes out sorted by
    total, then time, and consolidated, with the brute-force changes."""
    from ddnumba.kernels.hstate import new_meta
    from ddnumba.kernels.rootagg import _ISORT_MAX, agg_step
    rng = np.random.default_rng(7)
    n = 6 * _ISORT_MAX
    nd = np.stack([np.repeat([3, 5], n // 2), rng.integers(-4, 9, n)], axis=1)
    nt = np.zeros((n, 2), np.int64)
    nt[:, 0] = rng.integers(0, n, n)
    nf = rng.choice(np.array([-1, 1, 2]), n)
    o = np.lexsort((nt[:, 0], nd[:, 1], nd[:, 0]))
    nd, nt, nf = nd[o].astype(np.int64), nt[o], nf[o].astype(np.int64)
    empty = np.zeros((16, 3), np.int64)
    tab, arena, d, tt, f = agg_step(empty, empty.copy(), new_meta(1, 1), nd, nt, nf, 1, 1,
                                    is_sum, 0)
    assert C.is_consolidated(d, tt, f)
    assert (d[:, 0] == 3).sum() > _ISORT_MAX
    acc, want = {}, {}
    for t in range(n):
        before = dict(acc)
        for (k, v), x, y in zip(nd.tolist(), nt[:, 0].tolist(), nf.tolist()):
            if x == t:
                acc[(k, v)] = acc.get((k, v), 0) + y
        want.update(_oracle_changes(before, acc, t)[int(is_sum)])
    got = {(int(r[0]), int(r[1]), int(x)): int(y) for r, x, y in zip(d, tt[:, 0], f)}
    assert got == want


def test_root_count_tables_at_least_double_when_they_grow():
    """Batches that each add a few percent of values grow the value table rarely:
    every growth at least doubles it, and it stays at most 3/4 full."""
    df = dd.Dataflow(engine="native")
    a_in, a = df.new_input(["k", "v"])
    cap = a.count().capture()
    eng = None
    caps = []
    for b in range(60):
        v = np.arange(b * 100, (b + 1) * 100)
        a_in.insert(v % 37, v, time=b)
        a_in.advance_to(b + 1)
        df.run()
        eng = df._native
        (i,) = eng.agg_nodes
        tab = eng.st[11][eng.prm[i, 1]][0]
        caps.append(tab.shape[0])
        assert 4 * (b + 1) * 100 <= 3 * tab.shape[0]
    grew = [(x, y) for x, y in zip(caps, caps[1:]) if y != x]
    assert grew and all(y >= 2 * x for x, y in grew), caps
    assert len(grew) <= 7, caps       # log2(6000 / 100) + 1
    got = dict(zip(*(cap.at(59).column(c).to_pylist() for c in ("k", "count"))))
    assert got == {k: int((np.arange(6000) % 37 == k).sum()) for k in range(37)}
    df.close()

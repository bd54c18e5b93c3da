"""``distinct`` outside loops keeps the current count of each row in a hash table
(kernels.rootagg.distinct_step) instead of traces, on the native engine and (with one
time coordinate) on the Python engine: checked against a brute-force oracle at every
time on both engines, the engines' update streams against each other, for bounded
state, for negative counts and for overflow."""
from collections import Counter

import numpy as np
import pytest

import ddnumba as dd
from ddnumba.kernels import rootagg
from ddnumba.kernels.batch import sort_consolidate
from ddnumba.testing import updates_from_table


def _acc(rows, x, ncols):
    """The collection of ``rows`` (data..., time, diff) accumulated at time ``x``."""
    acc = Counter()
    for r in rows:
        if r[ncols] <= x:
            acc[tuple(r[:ncols])] += r[ncols + 1]
    return {k: v for k, v in acc.items() if v}


def _got(cap, x):
    """The captured collection at time ``x``: {row: multiplicity}."""
    cols = [c.to_pylist() for c in cap.at(x).columns]
    return {tuple(r[:-1]): r[-1] for r in zip(*cols)}


def _present(coll):
    return {r: 1 for r, m in coll.items() if m > 0}


def _program(df):
    """Distincts of an input, of a one-column input, of a join's output and of a
    map's, and a count of a distinct."""
    a_in, a = df.new_input(["k", "v"])
    b_in, b = df.new_input(["k"])
    caps = {
        "a": a.distinct().capture(),
        "b": b.distinct().capture(),
        "ab": a.join(b).distinct().capture(),
        "ka": a.map(lambda k, v: (k,), names=["k"]).distinct().capture(),
        "a_count": a.distinct().count().capture(),
    }
    return (a_in, b_in), caps


def _want(rows, x):
    a = _acc(rows[0], x, 2)
    b = _acc(rows[1], x, 1)
    ab = Counter()
    for (k, v), m in a.items():
        ab[(k, v)] += m * b.get((k,), 0)
    ka = Counter()
    for (k, _v), m in a.items():
        ka[(k,)] += m
    cnt = Counter()
    for (k, _v) in _present(a):
        cnt[k] += 1
    return {"a": _present(a), "b": _present(b), "ab": _present(ab), "ka": _present(ka),
            "a_count": {(k, c): 1 for k, c in cnt.items()}}


def _stream(rng, runs, keys, per_run, span):
    """Per run, updates of ``a`` (k, v) and ``b`` (k) at ``span`` distinct times (some
    beyond the run's frontier, due a later run), negative diffs, rows that come and
    go and go negative."""
    out = []
    t = 0
    for _ in range(runs):
        ups = []
        for ncols in (2, 1):
            n = int(rng.integers(0, per_run))
            cols = [rng.integers(0, keys, n)] + [rng.integers(-1, 2, n)
                                                 for _ in range(ncols - 1)]
            ts = t + rng.integers(0, span + 3, n)
            ds = rng.choice(np.array([-2, -1, -1, 1, 1, 2]), n)
            ups.append((cols, ts, ds))
        t += span
        out.append((ups, t))
    return out


def _feed(ins, ups, frontier, rows):
    for s, (cols, ts, ds) in enumerate(ups):
        if len(ds):
            ins[s].update(*cols, time=ts, diff=ds)
        rows[s] += [tuple(int(c[i]) for c in cols) + (int(ts[i]), int(ds[i]))
                    for i in range(len(ds))]
        ins[s].advance_to(frontier)


@pytest.mark.parametrize("engine", ["native", "python"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_root_distinct_matches_the_oracle_at_every_time(seed, engine):
    rng = np.random.default_rng(seed)
    stream = _stream(rng, runs=25, keys=5, per_run=16, span=4)
    df = dd.Dataflow(engine=engine)
    ins, caps = _program(df)
    rows = [[], []]
    done = 0
    for ups, frontier in stream:
        _feed(ins, ups, frontier, rows)
        df.run()
        for x in range(done, frontier):
            want = _want(rows, x)
            for name, cap in caps.items():
                assert _got(cap, x) == want[name], (name, x)
        done = frontier
    # the streams did exercise rows present and absent, and counts below zero
    assert any(_want(rows, x)["ab"] for x in range(done))
    assert any(m < 0 for x in range(done) for m in _acc(rows[0], x, 2).values())
    if engine == "native":
        assert len(df._native.agg_nodes) == 6        # five distincts and the count
    df.close()


@pytest.mark.parametrize("seed", [4, 5])
def test_root_distinct_stream_equals_the_python_engines(seed):
    """The output updates themselves, time by time, are the Python engine's."""
    rng = np.random.default_rng(seed)
    stream = _stream(rng, runs=15, keys=4, per_run=14, span=3)
    got = {}
    for engine in ("native", "python"):
        df = dd.Dataflow(engine=engine)
        ins, caps = _program(df)
        for ups, frontier in stream:
            _feed(ins, ups, frontier, [[], []])
            df.run()
        got[engine] = {name: sorted(updates_from_table(c.updates()))
                       for name, c in caps.items()}
        df.close()
    assert all(got["native"].values()), "no output to compare"
    assert got["native"] == got["python"]


@pytest.mark.parametrize("engine", ["native", "python"])
def test_a_row_crossing_zero_within_one_batch(engine):
    """Several changes of one row in one run, each at its own time: the output flips
    exactly where the count turns positive or stops being so."""
    df = dd.Dataflow(engine=engine)
    a_in, a = df.new_input(["k"])
    cap = a.distinct().capture()
    a_in.update([7, 7, 7, 7, 7], time=[0, 1, 2, 3, 4], diff=[-1, 2, 1, -2, -1])
    a_in.advance_to(5)
    df.run()
    # counts -1, 1, 2, 0, -1
    assert [bool(_got(cap, x)) for x in range(5)] == [False, True, True, False, False]
    assert sorted(updates_from_table(cap.updates())) == [((7,), (1,), 1), ((7,), (3,), -1)]
    df.close()


def test_root_distinct_state_is_current_state_only():
    """One table row per row present with a non-zero count, nothing per time: many
    runs over the same rows leave it as large as after the first; the distinct's
    arrangement keeps no trace; retracting everything empties the table and it
    shrinks back."""
    df = dd.Dataflow(engine="native")
    a_in, a = df.new_input(["k", "v"])
    cap = a.distinct().capture()
    vs = np.arange(3000) % 1000
    ks = vs % 300                 # 1,000 rows (k, v), each thrice
    a_in.insert(ks, vs, time=0)
    a_in.advance_to(1)
    df.run()
    eng = df._native
    (h,) = [eng.prm[i, 1] for i in eng.agg_nodes]

    def held():
        return int(eng.st[11][h][2][rootagg.M_VALUES])

    assert held() == 1000
    rng = np.random.default_rng(3)
    for t in range(1, 61):
        pick = rng.choice(3000, 20, replace=False)
        a_in.remove(ks[pick], vs[pick], time=t)
        a_in.insert(ks[pick], vs[pick], time=t + 1)
        a_in.advance_to(t + 1)
        df.run()
        gone = Counter(zip(ks[pick].tolist(), vs[pick].tolist()))
        want = {r: 1 for r in zip(ks.tolist(), vs.tolist()) if gone[r] < 3}
        assert _got(cap, t) == want, t
    a_in.advance_to(62)
    df.run()
    assert held() == 1000
    assert all(sum(b[2].shape[0] for b in eng.st[1][s]) == 0
               for s in range(len(eng.st[1])))
    a_in.remove(ks, vs, time=62)
    a_in.advance_to(63)
    df.run()
    assert _got(cap, 62) == {}
    assert held() == 0 and eng.st[11][h][0].shape[0] <= 16
    df.close()


@pytest.mark.parametrize("engine", ["native", "python"])
def test_root_distinct_overflow_raises(engine):
    df = dd.Dataflow(engine=engine)
    a_in, a = df.new_input(["k"])
    a.distinct().probe()
    a_in.update([1], time=0, diff=[2 ** 62])
    a_in.advance_to(1)
    df.run()
    a_in.update([1], time=1, diff=[2 ** 62])
    a_in.advance_to(2)
    # (the Python engine's arrangement keeps a trace, whose merge overflows first)
    with pytest.raises(OverflowError, match="distinct" if engine == "native" else
                       "overflow"):
        df.run()
    df.close()


def _table(tab, w):
    """The live rows of a distinct table: {row: count}, and the slots used."""
    W = max(w, 1)
    used = tab[:, W] != 0
    return {tuple(tab[s, :w].tolist()): int(tab[s, W]) for s in np.flatnonzero(used)}, \
        int(used.sum())


@pytest.mark.parametrize("seed", [21, 22, 23])
def test_kernel_distinct_step_against_brute_force(seed):
    """``distinct_step`` over random batches (many times each, rows of two columns,
    counts through zero and below): the changes at every time equal the brute
    force, and after every batch the table holds exactly the rows with a non-zero
    count, each found where a probe looks for it."""
    rng = np.random.default_rng(seed)
    meta = np.zeros(8, np.int64)
    tab = np.zeros((1, 1), np.int64)
    coll = Counter()
    for step in range(60):
        n = int(rng.integers(0, 40))
        d = np.stack([rng.integers(0, 6, n), rng.integers(0, 4, n)], 1).astype(np.int64)
        t = np.stack([step * 10 + rng.integers(0, 10, n), np.zeros(n, np.int64)], 1)
        f = rng.choice(np.array([-2, -1, 1, 1, 2]), n).astype(np.int64)
        if step % 15 == 14:         # retract everything
            rows = list(coll.items())
            d = np.array([r for r, _ in rows], np.int64).reshape(-1, 2)
            t = np.tile(np.array([[step * 10 + 9, 0]], np.int64), (len(rows), 1))
            f = np.array([-m for _, m in rows], np.int64)
        b = sort_consolidate(d, t, f)
        tab, od, ot, of = rootagg.distinct_step(tab, meta, *b)
        # brute force: presence before and after each time of the batch
        got = Counter()
        for i in range(of.shape[0]):
            got[(tuple(od[i].tolist()), int(ot[i, 0]))] += int(of[i])
        want = Counter()
        for tau in sorted(set(b[1][:, 0].tolist())):
            before = {r for r, m in coll.items() if m > 0}
            for i in range(b[2].shape[0]):
                if b[1][i, 0] == tau:
                    coll[tuple(b[0][i].tolist())] += int(b[2][i])
            after = {r for r, m in coll.items() if m > 0}
            for r in after - before:
                want[(r, tau)] += 1
            for r in before - after:
                want[(r, tau)] -= 1
        coll = Counter({r: m for r, m in coll.items() if m})
        assert got == want, step
        assert (ot[:, 1] == 0).all()
        # sorted by (row, time) and consolidated, as the engine expects
        keys = [tuple(od[i].tolist()) + (int(ot[i, 0]),) for i in range(of.shape[0])]
        assert keys == sorted(set(keys))
        live, used = _table(tab, 2)
        assert live == dict(coll) and used == len(coll) == meta[rootagg.M_VALUES]
        for r in coll:
            s = rootagg._probe(tab, np.array([r], np.int64), 0, 2)
            assert s >= 0 and tab[s, 2] == coll[r]


def test_kernel_distinct_step_overflow_raises():
    meta = np.zeros(8, np.int64)
    tab = np.zeros((1, 1), np.int64)
    d = np.array([[5]], np.int64)
    t = np.array([[0, 0]], np.int64)
    tab, *_ = rootagg.distinct_step(tab, meta, d, t, np.array([2 ** 62], np.int64))
    with pytest.raises(OverflowError, match="distinct"):
        rootagg.distinct_step(tab, meta, d, t + 1, np.array([2 ** 62], np.int64))


def test_kernels_with_tables_large_enough_to_prefetch():
    """Tables of ``PF_MIN_SLOTS`` slots or more take the prefetching path: a distinct
    and a count over 60,000 rows, then a batch retracting a third of them at distinct
    times, against NumPy."""
    rng = np.random.default_rng(31)
    n = 60_000
    d = np.stack([rng.integers(0, 20_000, n), rng.integers(0, 50, n)], 1).astype(np.int64)
    t = np.zeros((n, 2), np.int64)
    b = sort_consolidate(d, t, np.ones(n, np.int64))
    meta_d, meta_c = np.zeros(8, np.int64), np.zeros(8, np.int64)
    tab_d = np.zeros((1, 1), np.int64)
    tab_c, arena_c = np.zeros((1, 1), np.int64), np.zeros((1, 1), np.int64)
    tab_d, od, _, of = rootagg.distinct_step(tab_d, meta_d, *b)
    tab_c, arena_c, cd, _, cf = rootagg.agg_step(tab_c, arena_c, meta_c, *b, 1, 1, False, 0)
    assert tab_d.shape[0] >= rootagg.PF_MIN_SLOTS and arena_c.shape[0] >= rootagg.PF_MIN_SLOTS
    rows = np.unique(d, axis=0)
    assert np.array_equal(od, rows) and (of == 1).all()
    keys, counts = np.unique(d[:, 0], return_counts=True)
    assert np.array_equal(cd[:, 0], keys) and np.array_equal(cd[:, 1], counts)
    # retract every third row, each at its own time
    gone = d[::3]
    tg = np.stack([1 + np.arange(len(gone)), np.zeros(len(gone), np.int64)], 1)
    b2 = sort_consolidate(gone, tg, -np.ones(len(gone), np.int64))
    tab_d, od2, ot2, of2 = rootagg.distinct_step(tab_d, meta_d, *b2)
    tab_c, arena_c, cd2, ct2, cf2 = rootagg.agg_step(tab_c, arena_c, meta_c, *b2, 1, 1,
                                                     False, 0)
    left = np.concatenate([d, gone])
    left_f = np.concatenate([np.ones(n, np.int64), -np.ones(len(gone), np.int64)])
    live = Counter()
    for r, f in zip(map(tuple, left.tolist()), left_f.tolist()):
        live[r] += f
    now = {r for r, m in live.items() if m > 0}
    before = set(map(tuple, rows.tolist()))
    got = Counter()
    for r, f in zip(map(tuple, od2.tolist()), of2.tolist()):
        got[r] += f
    assert {r for r, f in got.items() if f} == before - now
    assert all(f == -1 for f in got.values())
    assert meta_d[rootagg.M_VALUES] == len(now)
    # the count's output accumulated over both batches against a recount
    acc = Counter()
    for dd_, ff in ((cd, cf), (cd2, cf2)):
        for (k, c), f in zip(dd_.tolist(), ff.tolist()):
            acc[(k, c)] += f
    ends = Counter()
    for r, m in live.items():
        if m:
            ends[r[0]] += m
    assert {kc: f for kc, f in acc.items() if f} == {(k, m): 1 for k, m in ends.items()}
    assert meta_c[rootagg.M_KEYS] == len(ends)

"""``min``/``max`` and ``top_k`` outside loops read their input trace in value order and
stop at the first positive rows instead of accumulating a key's whole group at every due
time: the native engine over its flat batches (``kernels.rootorder.ordered_want``), the
Python engine over its tries (``trie_want``). Both are checked against the brute-force
oracle at every time: streams of many runs (so the trace holds several batches, merged
and compacted), retractions of the current extremes, negative counts, ties on the first
column, updates ahead of the frontier, large groups, and several due times per key in
one run. A ``min``/``max`` of another value column moves it first (a selection) to read
that column in order."""
import numpy as np
import pytest

import ddnumba as dd

import oracle as O

ENGINES = ["native", "python"]


def _at(cap, t, width):
    tab = cap.at(t)
    cols = [tab.column(i).to_pylist() for i in range(width)]
    counts = tab.column(width).to_pylist()
    return {tuple(r): c for r, c in zip(zip(*cols), counts)}


def _program(df):
    h, c = df.new_input(["k", "v", "w"])
    outs = {
        "min": (c.min("v"), lambda a: O.ref_min(a, 0)),
        "max": (c.max("v"), lambda a: O.ref_max(a, 0)),
        "top1": (c.top_k(1), lambda a: O.ref_top_k(a, 1)),
        "top3": (c.top_k(3), lambda a: O.ref_top_k(a, 3)),
        "top2_key2": (c.top_k(2, key=2), lambda a: O.ref_top_k(a, 2, key=2)),
        "min_key2": (c.min("w", key=2), lambda a: O.ref_min(a, 0, key=2)),
        # a column other than the first: moved first by a selection
        "max_w": (c.max("w"), lambda a: O.ref_max(a, 1)),
        "min_w": (c.min("w", name="lo"), lambda a: O.ref_min(a, 1)),
    }
    return h, {n: (o.capture(), o.arity, ref) for n, (o, ref) in outs.items()}


def _extremes(c, k):
    """``min``, ``max`` and ``top_k(k)`` of a ``(k, v)`` collection, captured, with their
    references (for :func:`_check_run`)."""
    return {"min": (c.min().capture(), 2, lambda a: O.ref_min(a, 0)),
            "max": (c.max().capture(), 2, lambda a: O.ref_max(a, 0)),
            f"top{k}": (c.top_k(k).capture(), 2, lambda a: O.ref_top_k(a, k))}


def _acc(rows, t):
    """The input accumulated at ``t`` (rows hold plain int times)."""
    return O.accumulate_at([(r, (s,), d) for r, s, d in rows], (t,))


def _check_run(caps, rows, done, frontier):
    for t in range(done, frontier):
        acc = _acc(rows, t)
        for name, (cap, width, ref) in caps.items():
            got = _at(cap, t, width)
            want = O.clean(ref(acc))
            assert got == want, f"{name} at t={t}: {got} != {want}"


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
@pytest.mark.parametrize("engine", ENGINES)
def test_random_streams_match_the_oracle_at_every_time(seed, engine):
    """30 runs of updates over 4 keys at up to 5 distinct times each (some ahead of
    the run's frontier), negative diffs and counts, small value domains (ties on
    ``v`` with different ``w``)."""
    rng = np.random.default_rng(seed)
    df = dd.Dataflow(engine=engine)
    h, caps = _program(df)
    rows = []
    t = 0
    for _ in range(30):
        n = int(rng.integers(1, 30))
        k = rng.integers(0, 4, n)
        v = rng.integers(-3, 6, n)
        w = rng.integers(0, 3, n)
        ts = t + rng.integers(0, 7, n)          # up to 2 times ahead
        d = rng.choice(np.array([-2, -1, 1, 1, 1, 2, 3]), n)
        h.update(k, v, w, time=ts, diff=d)
        rows += [((int(a), int(b), int(c)), int(x), int(y))
                 for a, b, c, x, y in zip(k, v, w, ts, d)]
        h.advance_to(t + 5)
        df.run()
        _check_run(caps, rows, t, t + 5)
        t += 5


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("engine", ENGINES)
def test_big_keys_losing_their_extremes_match_the_oracle(seed, engine):
    """Two keys of ~150 rows ``(v, w)`` (big: read in place, past their skips), 25 runs
    that each take out every key's smallest and largest rows and add random updates
    (negative counts among them, some below the minimum, ties on ``v``), at up to 3
    times a run: every operator of :func:`_program`, at every time."""
    rng = np.random.default_rng(seed)
    df = dd.Dataflow(engine=engine)
    h, caps = _program(df)
    k = rng.integers(0, 2, 300)
    v = rng.integers(0, 60, 300)
    w = rng.integers(0, 4, 300)
    h.insert(k, v, w, time=0)
    rows = [((int(a), int(b), int(c)), 0, 1) for a, b, c in zip(k, v, w)]
    h.advance_to(1)
    df.run()
    _check_run(caps, rows, 0, 1)
    t = 1
    for _ in range(25):
        live = sorted(r for r, n in _acc(rows, t - 1).items() if n > 0)
        ups = []
        for key in (0, 1):
            mine = [r for r in live if r[0] == key]
            if mine:
                ups += [(mine[0], -1), (mine[-1], -1)]
        for _ in range(int(rng.integers(0, 6))):
            ups.append(((int(rng.integers(0, 2)), int(rng.integers(-5, 65)),
                         int(rng.integers(0, 4))), int(rng.choice([-2, -1, 1, 1, 2]))))
        for (r, d), s in zip(ups, (t + rng.integers(0, 3, len(ups))).tolist()):
            h.update([r[0]], [r[1]], [r[2]], time=s, diff=d)
            rows.append((r, s, d))
        h.advance_to(t + 3)
        df.run()
        _check_run(caps, rows, t, t + 3)
        t += 3


@pytest.mark.parametrize("engine", ENGINES)
def test_retracting_the_extremes_of_a_large_group(engine):
    """One key holding 3,000 values; each run retracts the current smallest and
    largest few (so the walk passes over retracted rows still in the trace) and adds
    new ones, every change at its own time."""
    rng = np.random.default_rng(7)
    df = dd.Dataflow(engine=engine)
    h, c = df.new_input(["k", "v"])
    caps = _extremes(c, 4)
    live = {}
    rows = []
    vals = rng.integers(0, 10**6, 3000)
    h.insert(np.zeros(3000, np.int64), vals, time=0)
    for x in vals.tolist():
        live[x] = live.get(x, 0) + 1
    rows += [((0, int(x)), 0, 1) for x in vals]
    h.advance_to(1)
    df.run()
    _check_run(caps, rows, 0, 1)
    t = 1
    for _ in range(12):
        present = sorted(live)
        gone = present[:3] + present[-2:]
        new = rng.integers(0, 10**6, 4).tolist()
        times = list(range(t, t + len(gone) + len(new)))
        for x, s in zip(gone, times):
            h.remove([0], [x], time=s)
            rows.append(((0, x), s, -1))
            live[x] -= 1
            if live[x] == 0:
                del live[x]
        for x, s in zip(new, times[len(gone):]):
            h.insert([0], [x], time=s)
            rows.append(((0, x), s, 1))
            live[x] = live.get(x, 0) + 1
        h.advance_to(times[-1] + 1)
        df.run()
        for s in times:
            acc = _acc(rows, s)
            for name, (cap, width, ref) in caps.items():
                assert _at(cap, s, width) == O.clean(ref(acc)), (name, s)
        t = times[-1] + 1


@pytest.mark.parametrize("engine", ENGINES)
def test_many_due_times_of_one_key_in_one_run(engine):
    """100 changes of one key in one run, each at its own time, inserting and
    retracting values below the minimum: the answer changes at most of them."""
    df = dd.Dataflow(engine=engine)
    h, c = df.new_input(["k", "v"])
    cap_min = c.min().capture()
    cap_top = c.top_k(2).capture()
    h.insert(np.zeros(50, np.int64), np.arange(100, 150), time=0)
    rows = [((0, x), 0, 1) for x in range(100, 150)]
    for s in range(1, 101):
        x = 100 - s // 2
        d = 1 if s % 2 else -1
        h.update([0], [x if d == 1 else x + 1], time=s, diff=d)
        rows.append(((0, x if d == 1 else x + 1), s, d))
    h.advance_to(101)
    df.run()
    for s in range(101):
        acc = _acc(rows, s)
        assert _at(cap_min, s, 2) == O.clean(O.ref_min(acc, 0)), s
        assert _at(cap_top, s, 2) == O.clean(O.ref_top_k(acc, 2)), s


@pytest.mark.parametrize("engine", ENGINES)
def test_a_count_it_reads_that_overflows_is_refused(engine):
    df = dd.Dataflow(engine=engine)
    h, c = df.new_input(["k", "v"])
    c.min().capture()
    h.update([0], [1], time=0, diff=2**62)
    h.advance_to(1)
    df.run()
    h.update([0], [1], time=1, diff=2**62)
    h.advance_to(2)
    # (the Python engine's trace refuses it first, when it merges the two batches)
    with pytest.raises(OverflowError, match="overflows int64" if engine == "native"
                       else "overflow"):
        df.run()


@pytest.mark.parametrize("engine", ENGINES)
def test_a_min_of_another_column_keeps_its_names_and_reads_that_column(engine):
    df = dd.Dataflow(engine=engine)
    h, c = df.new_input(["k", "v", "w"])
    lo, hi = c.min("w"), c.max(1, name="top")
    assert lo.names == ["k", "min_w"] and hi.names == ["k", "top"]
    cl, ch = lo.capture(), hi.capture()
    h.insert([0, 0, 0], [1, 2, 3], [30, 10, 20], time=0)
    h.advance_to(1)
    df.run()
    assert cl.at(0).to_pylist() == [{"k": 0, "min_w": 10, "count": 1}]
    assert ch.at(0).to_pylist() == [{"k": 0, "top": 30, "count": 1}]


def test_the_python_engine_reads_a_large_group_in_order(monkeypatch):
    """The Python engine's root min/max/top_k take the ordered path: a change to a key
    of 20,000 values never accumulates the key's history (the general path's
    ``accumulate``, whose cost grows with the group). (What it costs instead is
    measured, not tested: asv ``RootExtremes``.)"""
    from ddnumba.operators import reduce as R
    df = dd.Dataflow(engine="python")
    h, c = df.new_input(["k", "v"])
    outs = [c.min(), c.max(), c.top_k(3)]
    caps = [o.capture() for o in outs]
    assert all(o._node.ordered is not None for o in outs)
    rng = np.random.default_rng(5)
    vals = rng.permutation(100_000)[:20_000]
    h.insert(np.zeros(20_000, np.int64), vals, time=0)
    h.advance_to(1)
    df.run()

    def refuse(*a, **k):
        raise AssertionError("the general reduce path ran")
    monkeypatch.setattr(R._reduce, "accumulate", refuse)
    live = sorted(vals.tolist())
    for t in range(1, 6):
        # retract the smallest and the largest, add a new smallest
        h.update([0, 0, 0], [live[0], live[-1], -t], time=t, diff=[-1, -1, 1])
        live = sorted(live[1:-1] + [-t])
        h.advance_to(t + 1)
        df.run()
        assert caps[0].at(t).to_pylist() == [{"k": 0, "min_v": -t, "count": 1}]
        assert caps[1].at(t).to_pylist() == [{"k": 0, "max_v": live[-1], "count": 1}]
        assert [r["v"] for r in caps[2].at(t).to_pylist()] == live[:3]


@pytest.mark.parametrize("engine", ENGINES)
def test_taking_out_the_smallest_run_after_run(engine):
    """A priority-queue stream: one key of 400 values (a big key) loses its smallest
    and largest value every run, 60 runs, while the walk skips what the output says is
    gone. Some runs put back a value taken out earlier (below the minimum, among the
    skipped rows), take out one that was never there (a count of -1 below the minimum)
    and later put it back twice (0, then 1: the new minimum only the second time)."""
    rng = np.random.default_rng(11)
    df = dd.Dataflow(engine=engine)
    h, c = df.new_input(["k", "v"])
    caps = _extremes(c, 3)
    vals = rng.choice(np.arange(1000, 100_000), 400, replace=False)
    h.insert(np.zeros(400, np.int64), vals, time=0)
    rows = [((0, int(x)), 0, 1) for x in vals]
    live = {int(x): 1 for x in vals}
    h.advance_to(1)
    df.run()
    _check_run(caps, rows, 0, 1)
    gone = []
    t = 1
    for run in range(60):
        ups = []
        pos = sorted(x for x, n in live.items() if n > 0)
        ups += [(pos[0], -1), (pos[-1], -1)]
        gone.append(pos[0])
        if run % 7 == 3:
            ups.append((int(rng.choice(gone)), 1))       # back, among the skipped rows
        if run == 10:
            ups.append((500, -1))                        # never there: -1
        if run in (20, 30):
            ups.append((500, 1))                         # 0, then 1: the minimum
        if run == 40:
            ups.append((-5, 1))
            ups.append((-5, -1))                         # in and out at two times
        times = list(range(t, t + len(ups)))
        for (x, d), s in zip(ups, times):
            h.update([0], [x], time=s, diff=d)
            rows.append(((0, x), s, d))
            live[x] = live.get(x, 0) + d
        h.advance_to(times[-1] + 1)
        df.run()
        _check_run(caps, rows, t, times[-1] + 1)
        t = times[-1] + 1


def _flat_batch(ups, key=0):
    """A native engine trace batch of one key's input rows ``(val, t, diff)``: rows
    ``(key, tag 0, val)``, times ``(t, 0)``, sorted; and a fence (unused here)."""
    ups = sorted(ups)
    data = np.array([[key, 0, v] for v, _, _ in ups], np.int64).reshape(-1, 3)
    times = np.array([[t, 0] for _, t, _ in ups], np.int64).reshape(-1, 2)
    diffs = np.array([d for _, _, d in ups], np.int64)
    return data, times, diffs, np.zeros((1, 2), np.int64)


def _trie_batch(ups):
    """A Python engine trie batch of one key's updates ``(val, t, diff)``."""
    ups = sorted(ups)
    vals = sorted({v for v, _, _ in ups})
    offs = np.searchsorted([v for v, _, _ in ups], vals + [np.inf]).astype(np.int64)
    return (np.array(vals, np.int64).reshape(-1, 1), np.ascontiguousarray(offs),
            np.array([[t] for _, t, _ in ups], np.int64).reshape(-1, 1),
            np.array([d for _, _, d in ups], np.int64))


# Values 0..999 in at time 0; 0..499 out, one a time at 1..500, in another batch: the
# output then holds 500 alone (its history: each minimum in turn).
_OLD = [[(v, 0, 1) for v in range(1000)], [(v, v + 1, -1) for v in range(500)]]
_OUT = [(v, v, 1) for v in range(501)] + [(v, v + 1, -1) for v in range(500)]


@pytest.mark.parametrize("new, want", [
    ([(500, 600, -1)], 501),                     # the minimum goes: the next one
    ([(10, 600, 1)], 10),                        # one that went comes back
    ([(999, 600, -1), (1500, 600, 1)], 500),     # changes above the minimum only
])
@pytest.mark.parametrize("engine", ["native", "python"])
def test_the_walk_skips_what_the_output_says_is_gone(engine, new, want):
    """A key whose 500 smallest values were taken out in a batch not yet merged with
    the one that put them in: the walk starts at the output's minimum (it reads a row
    or two), not at the first row of the trace (501 rows). A new update among the
    skipped rows is read with its old entries."""
    from numba.typed import List
    import ddnumba.kernels.rootorder as ro
    old = [sorted(b) for b in _OLD]
    out = sorted(_OUT)
    o_offs = np.array([0, len(out)], np.int64)
    o_vals = np.array([[v] for v, _, _ in out], np.int64)
    o_t = np.array([[t] for _, t, _ in out], np.int64)
    o_f = np.array([d for _, _, d in out], np.int64)
    due_offs = np.array([0, 1], np.int64)
    due_t = np.array([[600]], np.int64)
    new = sorted(new)
    if engine == "native":
        spine = List()
        for b in old:
            spine.append(_flat_batch(b))
        lo = np.zeros((2, 1), np.int64)
        hi = np.array([[len(b)] for b in old], np.int64)
        h_offs = np.array([0, len(new)], np.int64)
        h_vals = np.array([[v] for v, _, _ in new], np.int64)
        h_t = np.array([[t] for _, t, _ in new], np.int64)
        h_f = np.array([d for _, _, d in new], np.int64)
        w_offs, w_vals, w_counts, n, walked = ro.ordered_want(
            spine, lo, hi, np.ones(1, np.bool_), 2, 1, due_offs, due_t, h_offs, h_vals,
            h_t, h_f, o_offs, o_vals, o_f, ro.O_MIN, 0)
    else:
        bats = [_trie_batch(b) for b in old + [new]]
        lst = ro.batch_list(*bats[0])
        for b in bats[1:]:
            ro.push_batch(lst, *b)
        lo = np.zeros((3, 1), np.int64)
        hi = np.array([[len(b[0])] for b in bats], np.int64)
        nd = np.array([[0, v] for v, _, _ in new], np.int64)
        w_offs, w_vals, w_counts, n, walked = ro.trie_want(
            lst, lo, hi, due_offs, due_t, 1, o_offs, o_vals, o_f, nd, 1, ro.O_MIN, 0)
    assert n == 1 and w_vals[:n, 0].tolist() == [want] and w_counts[:n].tolist() == [1]
    assert walked <= 2, walked


@pytest.mark.parametrize("engine", ["native", "python"])
def test_a_skipped_row_with_a_negative_count_stays_out(engine):
    """Value 7 was taken out once more than it was put in (count -1 over the trace):
    one new insertion makes it 0, not the minimum; the answer is read past it."""
    from numba.typed import List
    import ddnumba.kernels.rootorder as ro
    old = [[(v, 0, 1) for v in range(100, 200)], [(7, 1, -1)]]
    o_offs = np.array([0, 1], np.int64)
    o_vals = np.array([[100]], np.int64)
    o_f = np.array([1], np.int64)
    new = [(7, 5, 1)]
    due_offs = np.array([0, 1], np.int64)
    due_t = np.array([[5]], np.int64)
    if engine == "native":
        spine = List()
        for b in old:
            spine.append(_flat_batch(b))
        r = ro.ordered_want(
            spine, np.zeros((2, 1), np.int64), np.array([[100], [1]], np.int64),
            np.ones(1, np.bool_), 2, 1, due_offs, due_t, np.array([0, 1], np.int64),
            np.array([[7]], np.int64), np.array([[5]], np.int64), np.array([1], np.int64),
            o_offs, o_vals, o_f, ro.O_MIN, 0)
    else:
        bats = [_trie_batch(b) for b in old + [new]]
        lst = ro.batch_list(*bats[0])
        for b in bats[1:]:
            ro.push_batch(lst, *b)
        r = ro.trie_want(lst, np.zeros((3, 1), np.int64),
                         np.array([[100], [1], [1]], np.int64), due_offs, due_t, 1,
                         o_offs, o_vals, o_f, np.array([[0, 7]], np.int64), 1,
                         ro.O_MIN, 0)
    w_offs, w_vals, w_counts, n, walked = r
    assert w_vals[:n, 0].tolist() == [100] and w_counts[:n].tolist() == [1]


def test_the_skip_edge_matches_a_binary_search():
    """The skipped rows' edge in a batch, found by galloping from the walk's first
    row, against NumPy's ``searchsorted`` (all three states, both directions)."""
    import ddnumba.kernels.rootorder as ro
    rng = np.random.default_rng(0)
    for _ in range(3000):
        n = int(rng.integers(0, 40))
        bd = np.zeros((n, 3), np.int64)
        bd[:, 1] = np.sort(rng.integers(0, 20, n))
        a = int(rng.integers(0, n + 1))
        z = int(rng.integers(a, n + 1))
        b = int(rng.integers(-1, 22))
        seg = bd[a:z, 1]
        for desc in (False, True):
            for state in (ro.SK_ALL, ro.SK_BELOW, ro.SK_NONE):
                if state == ro.SK_NONE:
                    want = z if desc else a
                elif state == ro.SK_ALL:
                    want = a if desc else z
                else:
                    want = a + int(np.searchsorted(seg, b, "right" if desc else "left"))
                got = ro._skip_edge(bd, 1, a, z, b, state, desc)
                assert got == want, (seg.tolist(), b, desc, state, got, want)

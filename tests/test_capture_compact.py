"""``Captured.compact(t)``: a capture forgets how its output changed up to ``t``, keeps the
collection at ``t`` and every change after it, and still answers ``at(u)`` exactly for
every ``u >= t`` (brute-force oracle over random streams, 1-D and 2-D times)."""
import itertools

import numpy as np
import pytest

import ddnumba as dd
from ddnumba.kernels import consolidate as C
from capture_streams import build as _build
from capture_streams import count_at as _count_at
from capture_streams import feed as _feed
from capture_streams import leq as _leq
from capture_streams import stream as _stream


def _got(cap, t):
    tab = cap.at(t if len(t) > 1 else t[0])
    keys, counts = tab.column("k").to_pylist(), tab.column("count").to_pylist()
    assert set(tab.column(tab.num_columns - 1).to_pylist()) <= {1}
    return dict(zip(keys, counts))


@pytest.mark.parametrize("engine,workers", [("python", 1), ("native", 1), ("python", 2)])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_compact_1d_keeps_every_later_time(engine, workers, seed):
    rng = np.random.default_rng(seed)
    T = 40
    ups = _stream(rng, [(t,) for t in range(T)], 160)
    df = dd.Dataflow(engine=engine, workers=workers)
    try:
        inp, cap = _build(df)
        since = None
        compactions = 0
        for t in range(T):
            _feed(inp, ups, t)
            inp.advance_to(t + 1)
            df.run()
            if rng.random() < 0.25:
                lo = 0 if since is None else since
                c = int(rng.integers(lo, t + 1))
                cap.compact(c)
                since = c
                compactions += 1
                assert cap.since.tolist() == [c]
                # Compacted: the collection at c, stamped c, then only later changes.
                u = cap.raw()
                assert (u.times[:, 0] >= c).all()
                at_c = u.times[:, 0] == c
                assert len(np.unique(u.data[at_c, 0])) == at_c.sum() == len(_count_at(ups, (c,)))
                for x in range(0, c):
                    with pytest.raises(ValueError, match="compacted to"):
                        cap.at(x)
            for x in range(since or 0, t + 1):
                assert _got(cap, (x,)) == _count_at(ups, (x,)), (t, x, since)
        assert compactions >= 3
        # Compacting to the last complete time keeps exactly the final collection.
        cap.compact(T - 1)
        assert len(cap.raw()) == len(_count_at(ups, (T - 1,)))
        assert _got(cap, (T - 1,)) == _count_at(ups, (T - 1,))
    finally:
        df.close()


@pytest.mark.parametrize("seed", [4, 5, 6, 7])
def test_compact_2d_partial_order(seed):
    rng = np.random.default_rng(seed)
    side = 4
    grid = list(itertools.product(range(side), repeat=2))
    ups = _stream(rng, grid, 60)
    df = dd.Dataflow(time_dims=2)
    try:
        inp, cap = _build(df)
        since = None
        for a in range(side):
            _feed(inp, ups, a)
            inp.advance_to((a + 1, 0))
            df.run()
            complete = [p for p in grid if p[0] <= a]
            # compact to a random complete time not before the last one
            cands = [p for p in complete if since is None or _leq(since, p)]
            c = cands[int(rng.integers(0, len(cands)))]
            cap.compact(c)
            since = c
            u = cap.raw()
            # every kept time is at or after the compaction time
            assert all(_leq(c, tuple(s)) for s in u.times.tolist())
            for p in complete:
                if _leq(c, p):
                    assert _got(cap, p) == _count_at(ups, p), (a, c, p)
                else:
                    with pytest.raises(ValueError, match="compacted to"):
                        cap.at(p)
        # Past the grid: later times read exactly too.
        inp.advance_to((side + 6, 0))
        df.run()
        for p in [(side - 1, side - 1), (side + 3, side - 1), (side + 5, side + 5)]:
            if _leq(since, p):
                assert _got(cap, p) == _count_at(ups, p)
    finally:
        df.close()


@pytest.mark.parametrize("engine", ["python", "native"])
def test_compact_rejects_bad_times(engine):
    df = dd.Dataflow(engine=engine)
    try:
        inp, cap = _build(df)
        inp.insert(np.arange(6, dtype=np.int64), time=0)
        inp.advance_to(5)
        df.run()
        with pytest.raises(ValueError, match="not complete"):
            cap.compact(5)
        with pytest.raises(ValueError, match="coordinate"):
            cap.compact((1, 1))
        cap.compact(3)
        with pytest.raises(ValueError, match="cannot go back"):
            cap.compact(2)
        cap.compact(3)          # the same time again is allowed (and changes nothing)
        assert _got(cap, (4,)) == {0: 2, 1: 2, 2: 2}
        with pytest.raises(ValueError, match="compacted to 3"):
            cap.at(2)
        # Updates after the compaction are kept and read as before.
        inp.update(np.array([1, 2], np.int64), time=7, diff=np.array([-1, 1], np.int64))
        inp.advance_to(8)
        df.run()
        assert _got(cap, (6,)) == {0: 2, 1: 2, 2: 2}
        assert _got(cap, (7,)) == {0: 2, 1: 1, 2: 3}
    finally:
        df.close()



# ------------------------------------------------- the one-pass kernel for 1-D times
def _consolidated(rng, n, aw, tmax, diffs):
    return C.consolidate(rng.integers(0, 4, (n, aw)), rng.integers(0, tmax, (n, 1)),
                         rng.choice(np.array(diffs, np.int64), n))


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("aw", [0, 1, 2])
def test_merge_advanced_matches_advancing_and_consolidating_the_union(seed, aw):
    # What a 1-D capture's compaction keeps, in one pass over its consolidated head and
    # the parts added since: the union with every time t advanced to max(t, f).
    rng = np.random.default_rng(seed * 3 + aw)
    for na, nb in [(0, 0), (0, 6), (9, 0), (1, 1), (200, 4), (3, 200), (120, 150)]:
        a = _consolidated(rng, na, aw, 8, [-2, -1, 1, 3])
        b = _consolidated(rng, nb, aw, 8, [-2, -1, 1, 3])
        if len(a[2]) and nb and rng.random() < 0.5:
            # b retracts some of a at later times: those rows cancel once advanced
            k = min(len(a[2]), 6)
            idx = np.sort(rng.choice(len(a[2]), k, replace=False))
            later = a[1][idx] + rng.integers(0, 3, (k, 1))
            b = C.consolidate(np.concatenate([b[0], a[0][idx]]),
                              np.concatenate([b[1], later]),
                              np.concatenate([b[2], -a[2][idx]]))
        for f in (-1, 0, 3, 7, 20):
            d, t, df_, moved = C.merge_advanced(a, b, f)
            for x in (d, t, df_):
                assert x.flags.c_contiguous and x.dtype == np.int64
            union = [np.concatenate([x, y]) for x, y in zip(a, b)]
            want = C.consolidate(union[0], np.maximum(union[1], f), union[2])
            assert d.shape == want[0].shape
            np.testing.assert_array_equal(d, want[0])
            np.testing.assert_array_equal(t, want[1])
            np.testing.assert_array_equal(df_, want[2])
            assert moved == bool((union[1] < f).any())


def test_merge_advanced_sums_exactly_and_checks_shapes():
    big = np.iinfo(np.int64).max
    one = np.array([[1]])
    # three updates of one row collapse at f: a partial sum passes int64 and comes back
    a = (np.array([[1], [1]]), np.array([[0], [1]]), np.array([big, big]))
    b = (one, np.array([[2]]), np.array([-big]))
    d, t, f, moved = C.merge_advanced(a, b, 5)
    assert (d.tolist(), t.tolist(), f.tolist(), moved) == ([[1]], [[5]], [big], True)
    with pytest.raises(OverflowError, match="merge_advanced"):
        C.merge_advanced(a, (one, np.array([[1]]), np.array([1])), 5)
    # the same magnitudes kept apart by a time after f are not summed
    a1 = (one, np.array([[0]]), np.array([big]))
    got = C.merge_advanced(a1, (one, np.array([[6]]), np.array([1])), 5)
    assert (got[1].tolist(), got[2].tolist()) == ([[5], [6]], [big, 1])
    # nothing before f: nothing moved
    assert not C.merge_advanced(a1, (one, np.array([[6]]), np.array([1])), 0)[3]
    with pytest.raises(ValueError, match="time widths"):
        C.merge_advanced((one, np.array([[0, 0]]), np.array([1])), a, 0)
    with pytest.raises(ValueError, match="data widths"):
        C.merge_advanced((np.array([[1, 2]]), np.array([[0]]), np.array([1])), a, 0)


# --------------------------------- reading or compacting after several runs: the union
def _multiset_at(rows, t):
    """The oracle: the input accumulated at ``t`` (rows ``(a, b, time, diff)``)."""
    acc = {}
    for a, b, s, d in rows:
        if _leq(s, t):
            acc[(a, b)] = acc.get((a, b), 0) + d
    return {k: v for k, v in acc.items() if v}


@pytest.mark.parametrize("engine", ["python", "native"])
@pytest.mark.parametrize("merge_parts", [64, 3, 0])
@pytest.mark.parametrize("shape", ["consolidated", "raw", "doubled"])
@pytest.mark.parametrize("seed", [11, 12])
def test_parts_of_several_runs_read_and_compact_exactly(engine, merge_parts, shape, seed,
                                                          monkeypatch):
    # Each run's output is one part, consolidated after `consolidate()`; not when the
    # input is captured as fed, nor when a consolidated collection is concatenated
    # with itself (sorted, but each row twice). Reading the capture (or compacting
    # it) after several runs unites them: merged two at a time while there are at
    # most MERGE_PARTS and each is consolidated, else sorted together.
    raw = shape != "consolidated"
    from ddnumba.operators.output import CaptureNode
    monkeypatch.setattr(CaptureNode, "MERGE_PARTS", merge_parts)
    merges = []
    orig = C.merge_consolidated
    monkeypatch.setattr(C, "merge_consolidated",
                        lambda a, b: merges.append((len(a[2]), len(b[2]))) or orig(a, b))
    rng = np.random.default_rng(seed)
    df = dd.Dataflow(engine=engine)
    try:
        inp, c = df.new_input(["a", "b"])
        cc = c.consolidate()
        cap = {"consolidated": cc, "raw": c, "doubled": cc.concat(cc)}[shape].capture()
        rows = []
        t = 0
        for burst in range(6):
            runs = int(rng.integers(1, 9))
            merges.clear()
            for _ in range(runs):
                n = int(rng.integers(0, 40))
                a = rng.integers(0, 5, n)
                b = rng.integers(0, 4, n)
                ts = t + rng.integers(0, 3, n)
                d = rng.choice(np.array([-1, 1, 1, 2], np.int64), n)
                inp.update(a, b, time=ts, diff=d)
                rows += list(zip(a.tolist(), b.tolist(), [(x,) for x in ts.tolist()],
                                 d.tolist()))
                t += 3
                inp.advance_to(t)
                df.run()
            parts = [p for p in cap._node.parts if len(p)]
            head = cap._node._head
            new = len(parts) - (1 if head is not None and parts[0] is head else 0)
            merge = 2 <= new <= merge_parts and all(
                C.is_consolidated(p.data, p.times, p.diffs) for p in parts)
            assert merge or raw or not 2 <= new <= merge_parts
            if burst % 2:
                since = int(rng.integers(cap.since[0] if cap.since is not None else 0,
                                         t))
                cap.compact(since)
            else:
                since = int(cap.since[0]) if cap.since is not None else 0
            for x in range(since, t):
                got = cap.at(x)
                rows_at = zip(got.column("a").to_pylist(), got.column("b").to_pylist())
                want = {k: v * (2 if shape == "doubled" else 1)
                        for k, v in _multiset_at(rows, (x,)).items()}
                assert dict(zip(rows_at, got.column(got.num_columns - 1).to_pylist())) \
                    == want, (burst, x)
            whole = cap._node.consolidated()
            assert C.is_consolidated(whole.data, whole.times, whole.diffs)
            # how the parts were united: only merges of two, none when sorted
            if merge:
                assert len(merges) >= new - 1
            elif new >= 2:
                assert len(merges) <= 1     # the head merged with the sorted rest
    finally:
        df.close()


def test_union_sorts_when_a_part_is_not_consolidated():
    from ddnumba.updates import Updates
    rng = np.random.default_rng(3)
    parts = []
    for k in range(5):
        n = 30
        u = Updates(rng.integers(0, 3, (n, 2)), rng.integers(0, 4, (n, 1)),
                    rng.choice(np.array([-1, 1, 2], np.int64), n))
        parts.append(u if k == 2 else u.consolidated())
    assert not C.is_consolidated(parts[2].data, parts[2].times, parts[2].diffs)
    df = dd.Dataflow()
    node = df.new_input(["a", "b"])[1].capture()._node
    got = node._union(list(parts))
    want = Updates.concat(parts, 2, 1).consolidated()
    for g, w in zip((got.data, got.times, got.diffs), (want.data, want.times, want.diffs)):
        np.testing.assert_array_equal(g, w)
    # sorted, but a row twice at one time: not consolidated either
    parts[2] = Updates(np.array([[0, 0], [0, 0], [1, 0]], np.int64),
                       np.array([[0], [0], [1]], np.int64), np.array([1, 1, 1], np.int64))
    got = node._union(list(parts))
    want = Updates.concat(parts, 2, 1).consolidated()
    for g, w in zip((got.data, got.times, got.diffs), (want.data, want.times, want.diffs)):
        np.testing.assert_array_equal(g, w)
    # all consolidated: merged, same result as the sort
    parts[2] = parts[2].consolidated()
    got = node._union(list(parts))
    want = Updates.concat(parts, 2, 1).consolidated()
    for g, w in zip((got.data, got.times, got.diffs), (want.data, want.times, want.diffs)):
        np.testing.assert_array_equal(g, w)

"""``Captured.compact(t)``: a capture forgets how its output changed up to ``t``, keeps the
collection at ``t`` and every change after it, and still answers ``at(u)`` exactly for
every ``u >= t`` (brute-force oracle over random streams, 1-D and 2-D times)."""
import itertools

import numpy as np
import pytest

import ddnumba as dd
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


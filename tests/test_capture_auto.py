"""Self-compacting captures (``capture(auto_compact=True)``) and compaction to a
frontier (``Captured.compact`` of a ``[k, d]`` array), against the brute-force count
oracle of :mod:`capture_streams` at every time: what ``at`` answers, what
``new_updates`` streams out, and how large the capture stays."""
import itertools
import warnings

import numpy as np
import pytest

import ddnumba as dd
from capture_streams import build as _build
from capture_streams import count_at as _count_at
from capture_streams import feed as _feed
from capture_streams import leq as _leq
from capture_streams import stream as _stream
from ddnumba.operators.output import CaptureNode


def _got(cap, t):
    tab = cap.at(t if len(t) > 1 else t[0])
    assert set(tab.column(tab.num_columns - 1).to_pylist()) <= {1}
    return dict(zip(tab.column("k").to_pylist(), tab.column("count").to_pylist()))


def _acc(streamed, t):
    """The count collection at ``t`` from streamed update rows ``(k, count, time...,
    diff)``: ``{k: count}``, each (k, count) row having multiplicity 1."""
    acc = {}
    for r in streamed:
        if _leq(r[2:-1], t):
            acc[(r[0], r[1])] = acc.get((r[0], r[1]), 0) + r[-1]
    out = {}
    for (k, c), m in acc.items():
        if m:
            assert m == 1 and k not in out, (k, c, m)
            out[k] = c
    return out


def _rows(u):
    return [tuple(d) + tuple(t) + (f,) for d, t, f in
            zip(u.data.tolist(), u.times.tolist(), u.diffs.tolist())]


@pytest.mark.parametrize("engine,workers", [("python", 1), ("native", 1), ("python", 2)])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_auto_compact_1d(monkeypatch, engine, workers, seed):
    # COMPACT_MIN 0: the capture compacts once what it gained reaches twice what it
    # kept. Every run: at() of every time since the compaction is the oracle's; the
    # capture holds less than three times the collection it was compacted to (or
    # exactly the collection, just compacted); new_updates() streams every change once.
    monkeypatch.setattr(CaptureNode, "COMPACT_MIN", 0)
    rng = np.random.default_rng(seed)
    T = 50
    ups = _stream(rng, [(t,) for t in range(T)], 400, values=9)
    df = dd.Dataflow(engine=engine, workers=workers)
    try:
        inp, cap = _build(df, auto_compact=True)
        assert cap.auto_compact
        streamed = []
        compactions = 0
        for t in range(T):
            _feed(inp, ups, t)
            inp.advance_to(t + 1)
            before = cap.since
            df.run()
            streamed += _rows(cap.new_raw())
            s = cap.since
            if s is not None and (before is None or int(s[0]) != int(before[0])):
                compactions += 1
                assert int(s[0]) == t          # the last complete time
                assert len(cap.raw()) == len(_count_at(ups, (t,)))
                assert (cap.raw().times[:, 0] == t).all()
            elif s is not None:
                assert len(cap.raw()) < 3 * len(_count_at(ups, (int(s[0]),)))
            lo = 0 if s is None else int(s[0])
            for x in range(lo, t + 1):
                assert _got(cap, (x,)) == _count_at(ups, (x,)), (t, x)
            if lo > 0:
                with pytest.raises(ValueError, match=r"compacted to .*auto_compact=True"):
                    cap.at(lo - 1)
        assert compactions >= 5
        for x in range(T):
            assert _acc(streamed, (x,)) == _count_at(ups, (x,)), x
    finally:
        df.close()


@pytest.mark.parametrize("engine", ["python", "native"])
def test_auto_compact_waits_for_its_threshold(engine):
    # The default COMPACT_MIN (65,536): a small stream never compacts, and a capture
    # without auto_compact never does whatever COMPACT_MIN is.
    rng = np.random.default_rng(5)
    ups = _stream(rng, [(t,) for t in range(20)], 300)
    df = dd.Dataflow(engine=engine)
    inp, auto = _build(df, auto_compact=True)
    _, c = df.new_input(["w"])
    plain = c.count().capture()
    assert not plain.auto_compact
    for t in range(20):
        _feed(inp, ups, t)
        inp.advance_to(t + 1)
        df.run()
    assert auto.since is None and plain.since is None
    assert _got(auto, (0,)) == _count_at(ups, (0,))


def test_auto_compact_threshold_counts_what_was_kept(monkeypatch):
    # The rule: compact once the updates gained since the last compaction reach
    # 2 * kept + COMPACT_MIN.
    monkeypatch.setattr(CaptureNode, "COMPACT_MIN", 10)
    df = dd.Dataflow(engine="python")
    inp, c = df.new_input(["v"])
    cap = c.capture(auto_compact=True)
    node = cap._node
    inp.insert(np.arange(9, dtype=np.int64), time=0)
    inp.advance_to(1)
    df.run()
    assert cap.since is None                        # 9 < 10
    inp.insert(np.arange(9, 10, dtype=np.int64), time=1)
    inp.advance_to(2)
    df.run()
    assert cap.since.tolist() == [1] and node._kept_base == 10 and node._kept_new == 0
    inp.insert(np.arange(100, 129, dtype=np.int64), time=2)
    inp.advance_to(3)
    df.run()
    assert cap.since.tolist() == [1]                # 29 < 2 * 10 + 10
    inp.insert(np.arange(200, 201, dtype=np.int64), time=3)
    inp.advance_to(4)
    df.run()
    assert cap.since.tolist() == [3] and len(cap) == 40
    inp.close()
    df.run()
    assert cap.frontier.shape == (0, 1)
    assert cap.since.tolist() == [3]                # final: nothing more to compact


@pytest.mark.parametrize("seed", [4, 5, 6])
@pytest.mark.parametrize("workers", [1, 2])
def test_auto_compact_2d(monkeypatch, seed, workers):
    # (epoch, round) times: after epoch a the output frontier is (a + 1, 0) and the
    # capture compacts to (a, 0), so every time of epoch a (any round) stays readable,
    # and later epochs read exactly too. Streamed changes add up to the oracle.
    monkeypatch.setattr(CaptureNode, "COMPACT_MIN", 0)
    rng = np.random.default_rng(seed)
    side = 5
    grid = list(itertools.product(range(side), repeat=2))
    ups = _stream(rng, grid, 120)
    df = dd.Dataflow(time_dims=2, workers=workers)
    try:
        inp, cap = _build(df, auto_compact=True)
        streamed = []
        compactions = 0
        for a in range(side):
            _feed(inp, ups, a)
            inp.advance_to((a + 1, 0))
            before = cap.since
            df.run()
            streamed += _rows(cap.new_raw())
            s = cap.since.tolist()
            if before is None or s != before.tolist():
                compactions += 1
                assert s == [a, 0]
                assert all(_leq((a, 0), tuple(x)) for x in cap.raw().times.tolist())
            for p in itertools.product(range(a + 1), range(side + 2)):
                if _leq(s, p):
                    assert _got(cap, p) == _count_at(ups, p), (a, p)
                else:
                    with pytest.raises(ValueError, match="compacted to"):
                        cap.at(p)
            for r in range(side + 2):
                assert _got(cap, (a, r)) == _count_at(ups, (a, r)), (a, r)
        assert compactions >= 3
        for p in itertools.product(range(side + 1), repeat=2):
            assert _acc(streamed, p) == _count_at(ups, p), p
    finally:
        df.close()


def _feed_at(inp, ups, times):
    sel = [(v, t, d) for v, t, d in ups if t in times]
    if sel:
        inp.update(np.array([v for v, _, _ in sel], np.int64),
                   time=np.array([t for _, t, _ in sel], np.int64),
                   diff=np.array([d for _, _, d in sel], np.int64))


def _two_inputs(df):
    """Two inputs whose union is counted: advanced to (3, 0) and (0, 3), the output
    frontier is {(3, 0), (0, 3)}."""
    ia, a = df.new_input(["v"])
    ib, b = df.new_input(["v"])
    cap = a.concat(b).map(lambda v: (v % 3, v), names=["k", "v"]).count().capture()
    return ia, ib, cap


@pytest.mark.parametrize("seed", [7, 8, 9])
def test_compact_to_a_frontier_of_several_times(seed):
    # Output frontier {(3, 0), (0, 3)}: the times (x, y), x, y < 3, are complete; a
    # compaction to a frontier at or before it keeps every time in its future exact;
    # a second one keeps the times in the future of both. Input a holds the updates
    # at times (x, y) with x < 3, input b those with y < 3 and x >= 3.
    rng = np.random.default_rng(seed)
    grid = list(itertools.product(range(6), repeat=2))
    ups = _stream(rng, grid, 150)
    df = dd.Dataflow(time_dims=2)
    try:
        ia, ib, cap = _two_inputs(df)
        _feed_at(ia, ups, [p for p in grid if p[0] < 3])
        _feed_at(ib, ups, [p for p in grid if p[0] >= 3 and p[1] < 3])
        ia.advance_to((3, 0))
        ib.advance_to((0, 3))
        df.run()
        assert sorted(map(tuple, cap.frontier.tolist())) == [(0, 3), (3, 0)]
        cap.compact(np.array([[2, 0], [0, 2], [2, 2]]))     # (2, 2) is not minimal
        assert sorted(map(tuple, cap.since.tolist())) == [(0, 2), (2, 0)]
        # every kept time is advanced: the meet of its joins with (2, 0) and (0, 2)
        ts = cap.raw().times
        adv = np.minimum(np.maximum(ts, [2, 0]), np.maximum(ts, [0, 2]))
        assert (ts == adv).all()
        complete = [p for p in itertools.product(range(3), repeat=2)]
        for p in complete:
            if _leq((2, 0), p) or _leq((0, 2), p):
                assert _got(cap, p) == _count_at(ups, p), p
            else:
                with pytest.raises(ValueError, match="compacted to"):
                    cap.at(p)
        # a second frontier, then the rest of the grid: the capture answers for the
        # times in the future of both frontiers
        cap.compact(np.array([[3, 0], [0, 2]]))
        assert sorted(map(tuple, cap.since.tolist())) == [(0, 2), (3, 0)]
        _feed_at(ia, ups, [p for p in grid if p[0] >= 3 and p[1] >= 3])
        ia.advance_to((6, 6))
        ib.advance_to((6, 6))
        df.run()
        for p in itertools.product(range(8), repeat=2):
            if p[0] >= 6 and p[1] >= 6:
                continue
            if _leq((0, 2), p) or _leq((3, 0), p):
                assert _got(cap, p) == _count_at(ups, p), p
            else:
                with pytest.raises(ValueError, match="compacted to"):
                    cap.at(p)
    finally:
        df.close()


def test_compact_frontier_errors():
    df = dd.Dataflow(time_dims=2)
    ia, ib, cap = _two_inputs(df)
    ia.insert(np.arange(5, dtype=np.int64), time=(0, 0))
    ia.advance_to((3, 0))
    ib.advance_to((0, 3))
    df.run()
    with pytest.raises(ValueError, match="ahead of the output frontier"):
        cap.compact(np.array([[3, 0], [1, 3]]))
    with pytest.raises(ValueError, match="empty"):
        cap.compact(np.empty((0, 2), np.int64))
    with pytest.raises(ValueError, match="coordinate"):
        cap.compact(np.array([[1, 0, 0]]))
    with pytest.raises(TypeError, match="integers"):
        cap.compact(np.array([[1.5, 0.0]]))
    cap.compact(np.array([[1, 0], [0, 2]]))
    with pytest.raises(ValueError, match="cannot go back"):
        cap.compact(np.array([[0, 0]]))
    with pytest.raises(ValueError, match="cannot go back"):
        cap.compact((0, 1))                  # a time: complete, but before (0, 2)
    cap.compact(np.array([[3, 0], [0, 3]]))  # the output frontier itself: allowed
    assert sorted(map(tuple, cap.since.tolist())) == [(0, 3), (3, 0)]
    with pytest.raises(ValueError, match=r"compacted to \{"):
        cap.at((2, 2))
    # later, a complete time in the future of since: since is that time again
    ia.advance_to((5, 5))
    ib.advance_to((5, 5))
    df.run()
    cap.compact((4, 4))
    assert cap.since.tolist() == [4, 4]
    assert _got(cap, (4, 4)) == {0: 2, 1: 2, 2: 1}


def test_auto_compact_after_a_compaction_to_a_time(monkeypatch):
    # A compaction to the complete time (0, 2) distinguishes rounds from 2 on only;
    # the next automatic one, to the frontier stepped back (1, 0), keeps the times in
    # the future of both: since becomes (1, 2), and epoch 1 reads exactly from round 2.
    monkeypatch.setattr(CaptureNode, "COMPACT_MIN", 0)
    rng = np.random.default_rng(12)
    grid = list(itertools.product(range(3), range(5)))
    ups = _stream(rng, grid, 80)
    df = dd.Dataflow(time_dims=2)
    inp, cap = _build(df, auto_compact=True)
    _feed(inp, ups, 0)
    inp.advance_to((1, 0))
    df.run()
    assert cap.since.tolist() == [0, 0]
    cap.compact((0, 2))
    _feed(inp, ups, 1)
    inp.advance_to((2, 0))
    df.run()
    assert cap.since.tolist() == [1, 2]
    for r in range(6):
        if r < 2:
            with pytest.raises(ValueError, match=r"compacted to \(1, 2\)"):
                cap.at((1, r))
        else:
            assert _got(cap, (1, r)) == _count_at(ups, (1, r))


@pytest.mark.parametrize("engine,workers", [("python", 1), ("native", 1), ("python", 2)])
def test_pending_new_updates_warn_once_and_lose_nothing(monkeypatch, engine, workers):
    # A program that calls new_updates() once and then only runs: the updates wait
    # for it without bound. The capture warns exactly once, at the first run after
    # which they have waited PENDING_WARN_RUNS runs and outnumber
    # 4 * (kept + COMPACT_MIN); the next new_updates() still returns every one of
    # them (against the oracle at every time), and the warning is re-armed.
    monkeypatch.setattr(CaptureNode, "COMPACT_MIN", 4)
    monkeypatch.setattr(CaptureNode, "PENDING_WARN_RUNS", 10)
    rng = np.random.default_rng(7)
    T = 60
    ups = _stream(rng, [(t,) for t in range(T)], 600, values=9)
    df = dd.Dataflow(engine=engine, workers=workers)
    try:
        inp, cap = _build(df, auto_compact=True)
        node = cap._node
        streamed = _rows(cap.new_raw())             # nothing yet; starts the stream
        assert streamed == []
        warned_at = []      # runs that warned
        expected = []       # the first run of each arming with both conditions met
        armed = True
        runs = 0
        for t in range(T):
            _feed(inp, ups, t)
            inp.advance_to(t + 1)
            with warnings.catch_warnings(record=True) as w:
                warnings.simplefilter("always")
                df.run()
            runs += 1
            mine = [x for x in w if "wait for new_updates()" in str(x.message)]
            assert all(x.category is RuntimeWarning for x in mine)
            assert all(x.filename == __file__ for x in mine)  # points at df.run()
            warned_at += [t] * len(mine)
            if armed and runs >= CaptureNode.PENDING_WARN_RUNS and \
                    node._pending_rows > 4 * (node._kept_base + CaptureNode.COMPACT_MIN):
                expected.append(t)
                armed = False
            if t == 45:
                waiting = node._pending_rows
                got = _rows(cap.new_raw())          # re-arms the warning
                assert 0 < len(got) <= waiting      # counted before consolidating
                streamed += got
                assert node._pending_rows == 0
                runs = 0
                armed = True
        assert warned_at == expected and len(expected) == 2, (warned_at, expected)
        streamed += _rows(cap.new_raw())
        for x in range(T):
            assert _acc(streamed, (x,)) == _count_at(ups, (x,)), x
        assert node.since is not None               # it did compact meanwhile
    finally:
        df.close()


@pytest.mark.parametrize("mode", ["read every run", "never asked", "small"])
def test_pending_no_warning(monkeypatch, mode):
    # No warning over many runs when new_updates() is read after every run, when it
    # is never called (nothing is kept for it), or when what waits stays within
    # 4 * (kept + COMPACT_MIN) (asked once; the default COMPACT_MIN dwarfs this
    # stream).
    if mode != "small":
        monkeypatch.setattr(CaptureNode, "COMPACT_MIN", 4)
    monkeypatch.setattr(CaptureNode, "PENDING_WARN_RUNS", 5)
    rng = np.random.default_rng(8)
    T = 40
    ups = _stream(rng, [(t,) for t in range(T)], 400, values=9)
    df = dd.Dataflow(engine="native")
    inp, cap = _build(df, auto_compact=True)
    if mode == "small":
        cap.new_raw()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for t in range(T):
            _feed(inp, ups, t)
            inp.advance_to(t + 1)
            df.run()
            if mode == "read every run":
                cap.new_raw()
    node = cap._node
    if mode == "never asked":
        assert node.pending is None
    elif mode == "read every run":
        assert node._pending_rows == 0
    else:
        assert node._pending_runs == T and 0 < node._pending_rows
    assert _got(cap, (T - 1,)) == _count_at(ups, (T - 1,))
    df.close()


@pytest.mark.parametrize("engine,workers", [("python", 1), ("native", 1), ("python", 2)])
@pytest.mark.parametrize("armed", [True, False])
def test_first_run_that_compacts_streams_its_own_times(monkeypatch, engine, workers,
                                                        armed):
    # A first run over several times that compacts the capture at once (COMPACT_MIN
    # 0). Read once before it (armed), new_updates() hands out every update at its
    # own time: accumulated, the oracle at every time, and no warning. Read first
    # after it, the updates come compacted to the last complete time, and a
    # RuntimeWarning says so.
    monkeypatch.setattr(CaptureNode, "COMPACT_MIN", 0)
    rng = np.random.default_rng(17)
    T = 6
    ups = _stream(rng, [(t,) for t in range(T)], 200, values=9)
    df = dd.Dataflow(engine=engine, workers=workers)
    try:
        inp, cap = _build(df, auto_compact=True)
        if armed:
            assert cap.new_updates().num_rows == 0
        for t in range(T):
            _feed(inp, ups, t)
        inp.advance_to(T)
        df.run()
        assert cap.since is not None and int(cap.since[0]) == T - 1   # it compacted
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            streamed = _rows(cap.new_raw())
        lost = [x for x in w if "before the first" in str(x.message)
                and issubclass(x.category, RuntimeWarning)]
        if armed:
            assert not lost, [str(x.message) for x in w]
            for x in range(T):
                assert _acc(streamed, (x,)) == _count_at(ups, (x,)), x
        else:
            assert len(lost) == 1
            assert {r[2] for r in streamed} == {T - 1}
            assert _acc(streamed, (T - 1,)) == _count_at(ups, (T - 1,))
    finally:
        df.close()

"""Reading a capture run by run.

* ``merge_consolidated`` (the kernel that folds a run's output into a capture already
  consolidated) against consolidating the concatenation, on random inputs.
* ``Captured.updates()`` read after every run (each read merges the new parts into the
  consolidated head) against a brute-force oracle at every time.
* ``Captured.new_updates()``: what each run added, against the oracle's difference
  between consecutive times; with compactions, folds of small parts, workers and 2-D
  times.
* ``write_changes(..., new=True)``: the dataset written after every run holds each
  change once, and a failed write loses nothing.
"""
import itertools
import os
from collections import Counter

import numpy as np
import pyarrow.parquet as pq
import pytest
import reference as ref
from capture_streams import build as _build
from capture_streams import count_at as _count_at
from capture_streams import feed as _feed
from capture_streams import stream
from reference import is_consolidated

import ddnumba as dd
from ddnumba.io.parquet import write_changes
from ddnumba.kernels import consolidate as C
from ddnumba.operators.output import CaptureNode


# ------------------------------------------------------------------ the merge kernel

def _random_consolidated(rng, n, aw, dims, vals):
    data = rng.integers(0, vals, (n, aw))
    times = rng.integers(0, 3, (n, dims))
    diffs = rng.choice(np.array([-2, -1, 1, 3]), n)
    return C.consolidate(data, times, diffs)


def _reference(a, b):
    return C.consolidate(np.concatenate([a[0], b[0]]), np.concatenate([a[1], b[1]]),
                         np.concatenate([a[2], b[2]]))


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("aw,dims", [(0, 1), (1, 1), (2, 1), (3, 2), (1, 2)])
def test_merge_consolidated_matches_consolidating_the_union(seed, aw, dims):
    rng = np.random.default_rng(seed * 31 + aw * 7 + dims)
    # sizes: empty, one row, lopsided both ways, comparable; few values so that rows
    # meet (and cancel: diffs of opposite signs)
    for na, nb in [(0, 0), (0, 5), (7, 0), (1, 1), (300, 3), (2, 300), (150, 120)]:
        vals = 4 if aw else 1
        a = _random_consolidated(rng, na, aw, dims, vals)
        b = _random_consolidated(rng, nb, aw, dims, vals)
        if na and nb and rng.random() < 0.5:
            # b retracts some of a exactly: those rows must vanish
            k = min(len(a[2]), 5)
            idx = np.sort(rng.choice(len(a[2]), k, replace=False))
            b = _reference(b, (a[0][idx], a[1][idx], -a[2][idx]))
        got = C.merge_consolidated(a, b)
        for g in got:
            assert g.flags.c_contiguous and g.dtype == np.int64
        assert got[0].shape[1] == aw and got[1].shape[1] == dims
        want = ref.consolidate([tuple(r) for r in a[0].tolist() + b[0].tolist()],
                               [tuple(r) for r in a[1].tolist() + b[1].tolist()],
                               a[2].tolist() + b[2].tolist())
        assert list(zip(map(tuple, got[0].tolist()), map(tuple, got[1].tolist()),
                        got[2].tolist())) == want


def test_merge_consolidated_rows_all_cancel_and_all_equal():
    a = C.consolidate(np.arange(6).reshape(6, 1), np.zeros((6, 1), np.int64),
                      np.ones(6, np.int64))
    got = C.merge_consolidated(a, (a[0], a[1], -a[2]))
    assert [len(x) for x in got] == [0, 0, 0]
    got = C.merge_consolidated(a, a)
    np.testing.assert_array_equal(got[0], a[0])
    np.testing.assert_array_equal(got[2], 2 * a[2])


def test_merge_consolidated_overflow_and_shapes():
    big = np.iinfo(np.int64).max
    a = (np.array([[1], [2]]), np.array([[0], [0]]), np.array([5, big]))
    b = (np.array([[2]]), np.array([[0]]), np.array([1]))
    with pytest.raises(OverflowError, match="merge_consolidated"):
        C.merge_consolidated(a, b)
    # the same magnitudes at different times do not meet: no overflow
    b2 = (np.array([[2]]), np.array([[1]]), np.array([1]))
    assert C.merge_consolidated(a, b2)[2].tolist() == [5, big, 1]
    with pytest.raises(ValueError, match="widths differ"):
        C.merge_consolidated(a, (np.zeros((1, 2), np.int64), np.zeros((1, 1), np.int64),
                                    np.ones(1, np.int64)))
    with pytest.raises(ValueError, match="rows"):
        C.merge_consolidated(a, (np.zeros((2, 1), np.int64), np.zeros((1, 1), np.int64),
                                    np.ones(1, np.int64)))


# --------------------------------------------------------------- reading a stream

def _rows(d):
    """A collection {k: count} as a multiset of output rows (k, count)."""
    return Counter({(k, c): 1 for k, c in d.items()})


def _delta(new, old):
    """The updates taking collection ``old`` to ``new``: {(k, count): diff}."""
    out = Counter(_rows(new))
    out.subtract(_rows(old))
    return {r: n for r, n in out.items() if n}


def _as_updates(u):
    """Captured arrays as {(k, count, time...): diff}, checking they are consolidated."""
    assert is_consolidated(u.data.tolist(), u.times.tolist(), u.diffs.tolist())
    return {tuple(d) + tuple(t): f
            for d, t, f in zip(u.data.tolist(), u.times.tolist(), u.diffs.tolist())}


@pytest.mark.parametrize("engine,workers", [("native", 1), ("python", 1), ("python", 2)])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_new_updates_are_each_runs_changes(monkeypatch, engine, workers, seed):
    # small folds: new parts fold in both the capture and the pending list
    monkeypatch.setattr(CaptureNode, "FOLD_PARTS", 4)
    rng = np.random.default_rng(seed)
    T = 60
    ups = stream(rng, [(t,) for t in range(T)], 200, values=8)
    df = dd.Dataflow(engine=engine, workers=workers)
    try:
        inp, cap = _build(df)
        since = None
        taken = []
        skipped = []            # times whose run was not read right after it
        for t in range(T):
            _feed(inp, ups, t)
            inp.advance_to(t + 1)
            df.run()
            if rng.random() < 0.2:
                # not read now: the next read returns this run's changes too
                skipped.append(t)
            else:
                got = _as_updates(cap.new_raw())
                lo = skipped[0] if skipped else t
                want = {}
                for x in range(lo, t + 1):
                    for (k, c), n in _delta(_count_at(ups, (x,)),
                                            _count_at(ups, (x - 1,))).items():
                        want[(k, c, x)] = n
                assert got == want, (t, skipped)
                taken.append(got)
                skipped = []
                assert cap.new_raw().diffs.shape == (0,)        # nothing new since
            if rng.random() < 0.3:
                since = int(rng.integers(since or 0, t + 1))
                cap.compact(since)
            # the whole capture, read after every run: merged, not re-sorted
            for x in sorted({since or 0, t, ((since or 0) + t) // 2}):
                tab = cap.at(x)
                assert dict(zip(tab.column("k").to_pylist(),
                                tab.column("count").to_pylist())) == _count_at(ups, (x,))
        # every change taken once: their sum is the capture's history uncompacted
        total = Counter()
        for g in taken:
            total.update(g)
        assert {r: n for r, n in total.items() if n} == {
            (k, c, x): n for x in range(T)
            for (k, c), n in _delta(_count_at(ups, (x,)), _count_at(ups, (x - 1,))).items()
            if x not in skipped}
    finally:
        df.close()


def test_new_updates_first_read_takes_everything_and_tables_match():
    df = dd.Dataflow()
    inp, cap = _build(df)
    inp.insert([1, 4, 5], time=0)
    inp.advance_to(1)
    df.run()
    inp.remove([4], time=1)
    inp.advance_to(2)
    df.run()
    first = cap.new_updates()
    assert first.column_names == ["k", "count", "time", "diff"]
    assert first.to_pylist() == cap.updates().to_pylist()
    assert cap.new_updates().num_rows == 0
    inp.insert([7], time=2)
    inp.advance_to(3)
    df.run()
    assert cap.new_updates().to_pylist() == [
        {"k": 1, "count": 1, "time": 2, "diff": -1},
        {"k": 1, "count": 2, "time": 2, "diff": 1}]


@pytest.mark.parametrize("seed", [4, 5])
def test_new_updates_2d_times(seed):
    rng = np.random.default_rng(seed)
    side = 4
    grid = list(itertools.product(range(side), repeat=2))
    ups = stream(rng, grid, 50, values=8)
    df = dd.Dataflow(engine="python", time_dims=2)
    inp, cap = _build(df)
    got = Counter()
    for first in range(side):
        _feed(inp, ups, first)
        inp.advance_to((first + 1, 0))
        df.run()
        got.update(_as_updates(cap.new_raw()))
        if first == 1:
            cap.compact((1, 1))
    inp.close()
    df.run()
    got.update(_as_updates(cap.new_raw()))
    got = {r: n for r, n in got.items() if n}
    # the union of what was read accumulates to the oracle's collection everywhere
    for t in grid:
        acc = Counter()
        for (k, c, a, b), n in got.items():
            if a <= t[0] and b <= t[1]:
                acc[(k, c)] += n
        assert {r: n for r, n in acc.items() if n} == dict(_rows(_count_at(ups, t))), t


# ------------------------------------------------------------ writing a stream out

def test_write_changes_new_streams_each_change_once(tmp_path):
    rng = np.random.default_rng(9)
    T = 25
    ups = stream(rng, [(t,) for t in range(T)], 60, values=8)
    df = dd.Dataflow(engine="native")
    inp, cap = _build(df)
    out = tmp_path / "counts"
    written = 0
    for t in range(T):
        _feed(inp, ups, t)
        inp.advance_to(t + 1)
        df.run()
        path = write_changes(cap, out, new=True)
        if path is None:
            assert _delta(_count_at(ups, (t,)), _count_at(ups, (t - 1,))) == {}
        else:
            written += 1
            assert os.path.basename(path) == f"part-{written - 1:05d}.parquet"
    assert 0 < written < T
    table = pq.read_table(out)
    got = Counter()
    for r in table.to_pylist():
        got[(r["k"], r["count"], r["time"])] += r["diff"]
    assert {r: n for r, n in got.items() if n} == _as_updates(cap.raw())


def test_write_changes_new_loses_nothing_when_a_write_fails(tmp_path):
    df = dd.Dataflow()
    inp, cap = _build(df)
    inp.insert([1, 2], time=0)
    inp.advance_to(1)
    df.run()
    target = tmp_path / "one.parquet"
    target.write_bytes(b"taken")
    with pytest.raises(FileExistsError):
        write_changes(cap, target, new=True)
    # still pending: the next write has them
    path = write_changes(cap, tmp_path / "dir", new=True)
    assert pq.read_table(path).to_pylist() == cap.updates().to_pylist()
    assert write_changes(cap, tmp_path / "dir", new=True) is None
    with pytest.raises(TypeError, match="new=True"):
        write_changes(cap.updates(), tmp_path / "dir", new=True)


def test_feed_all_on_run_streams_the_outputs(tmp_path):
    import pyarrow as pa

    from ddnumba.io.parquet import feed_all
    src = tmp_path / "in"
    src.mkdir()
    for t in range(8):
        pq.write_table(pa.table({"v": [t % 5, (t + 2) % 5], "time": [t, t],
                                 "diff": [1, 1 if t % 3 else -1]}),
                       src / f"part-{t}.parquet")
    df = dd.Dataflow()
    inp, cap = _build(df)
    calls = []

    def on_run():
        calls.append(write_changes(cap, tmp_path / "out", new=True))

    fed = feed_all([(inp, src)], on_run=on_run)
    assert fed == 16 and len(calls) >= 8
    written = [p for p in calls if p is not None]
    assert len(written) == len(os.listdir(tmp_path / "out")) >= 2
    got = Counter()
    for r in pq.read_table(tmp_path / "out").to_pylist():
        got[(r["k"], r["count"], r["time"])] += r["diff"]
    assert {r: n for r, n in got.items() if n} == _as_updates(cap.raw())
    with pytest.raises(ValueError, match="on_run needs run=True"):
        feed_all([(inp, src)], run=False, on_run=on_run)


@pytest.mark.parametrize("engine", ["python", "native"])
def test_data_columns_named_time_and_diff_keep_their_values(engine):
    # A collection with columns "time" and "diff": updates() names its own time and
    # diff columns time_ and diff_, so no field is duplicated and no value is lost.
    df = dd.Dataflow(engine=engine)
    i, c = df.new_input(["time", "diff"])
    cap = c.capture()
    i.insert([7], [8], time=2)
    i.advance_to(3)
    df.run()
    tbl = cap.updates()
    assert tbl.column_names == ["time", "diff", "time_", "diff_"]
    assert tbl.to_pylist() == [{"time": 7, "diff": 8, "time_": 2, "diff_": 1}]
    assert cap.new_updates().to_pylist() == tbl.to_pylist()

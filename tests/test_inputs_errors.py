"""Input handles (the formats ``insert``/``remove``/``update`` accept, frontiers,
``advance_to``/``close``), captured output (``updates``/``at``/``frontier``), probes, and
the errors a user gets for bad input.

Every error test checks the exception type and that its message names the input (one of
its column names) or the offending value, so a user can tell what to fix.
"""
import numpy as np
import pyarrow as pa
import pytest

import ddnumba as dd
from ddnumba.testing import assert_collection_equal, assert_updates_equal, updates_table

NAMES = ["src_node", "dst_node"]


def make(time_dims=1, names=NAMES):
    df = dd.Dataflow(time_dims=time_dims)
    inp, coll = df.new_input(list(names))
    return df, inp, coll


def assert_mentions(excinfo, *needles):
    msg = str(excinfo.value)
    assert any(n in msg for n in needles), (
        f"the error message should name the input or the offending value (one of "
        f"{needles}); it was: {msg!r}")


# ------------------------------------------------------------------ accepted formats


def test_insert_columns_lists_and_arrays():
    df, inp, c = make()
    cap = c.capture()
    inp.insert([1, 2], np.array([3, 4], dtype=np.int32), time=0)
    inp.insert(np.array([5]), [6], time=np.array([2]))
    inp.remove([1], [3], time=1)
    inp.advance_to(3)
    df.run()
    assert_updates_equal(cap, [((1, 3), 0, 1), ((2, 4), 0, 1), ((5, 6), 2, 1),
                               ((1, 3), 1, -1)])
    assert cap.updates().column_names == NAMES + ["time", "diff"]
    assert all(t == pa.int64() for t in cap.updates().schema.types)


def test_insert_single_2d_array_and_update_diffs():
    df, inp, c = make(time_dims=2)
    cap = c.capture()
    inp.insert(np.array([[1, 2], [3, 4], [1, 2]]), time=(0, 1))
    inp.update(np.array([[7, 8]]), time=(1, 0), diff=-5)
    inp.update([9, 9], [0, 1], time=np.array([[0, 0], [2, 2]]), diff=np.array([3, 4]))
    inp.update([9], [5], time=(0, 0), diff=0)   # a zero diff changes nothing
    inp.advance_to((3, 0))
    df.run()
    assert_updates_equal(cap, [((1, 2), (0, 1), 2), ((3, 4), (0, 1), 1),
                               ((7, 8), (1, 0), -5), ((9, 0), (0, 0), 3),
                               ((9, 1), (2, 2), 4)])
    assert cap.updates().column_names == NAMES + ["time_0", "time_1", "diff"]


def test_insert_arrow_table_with_time_and_diff():
    df, inp, c = make(time_dims=2)
    cap = c.capture()
    ups = [((1, 2), (0, 3), 1), ((1, 2), (1, 0), -1), ((5, 6), (2, 2), 4)]
    inp.insert(updates_table(ups, NAMES))
    inp.advance_to((3, 0))
    df.run()
    assert_updates_equal(cap, ups)


@pytest.mark.parametrize("engine", ["python", "native"])
def test_table_time_columns_must_fit_time_dims(engine):
    # A data column named like a time column is data; time columns that do not fit
    # time_dims are refused when fed, and the dataflow still runs afterwards.
    df = dd.Dataflow(engine=engine)
    inp, c = df.new_input(["user", "time_ms"])
    cap = c.capture()
    inp.insert(pa.table({"user": [1, 2], "time_ms": [500, 700], "time": [0, 1]}))
    for bad in ({"user": [3], "time_ms": [1], "time_0": [0], "time_1": [0]},
                {"user": [3], "time_ms": [1], "time": [0], "time_1": [0]}):
        with pytest.raises(ValueError, match=r"time column\(s\) .* do not fit "
                                             r"time_dims=1"):
            inp.insert(pa.table(bad))
    inp.advance_to(2)
    df.run()
    assert cap.at(1).to_pylist() == [{"user": 1, "time_ms": 500, "count": 1},
                                     {"user": 2, "time_ms": 700, "count": 1}]
    assert cap.at(0).to_pylist() == [{"user": 1, "time_ms": 500, "count": 1}]
    df2, inp2, _ = make(time_dims=2)
    with pytest.raises(ValueError, match=r"expected \['time_0', 'time_1'\]"):
        inp2.insert(pa.table({"src_node": [1], "dst_node": [2], "time_0": [0]}))
    # eleven coordinates are taken in numeric order (time_10 last)
    df3 = dd.Dataflow(time_dims=11)
    inp3, c3 = df3.new_input(["k"])
    cols = {"k": [1]}
    cols.update({f"time_{i}": [i] for i in reversed(range(11))})
    inp3.insert(pa.table(cols))
    assert inp3._buffer[-1].times.tolist() == [list(range(11))]


def test_insert_arrow_record_batch_and_table_without_time():
    df, inp, c = make()
    cap = c.capture()
    inp.insert(pa.record_batch({"src_node": [1, 2], "dst_node": [3, 4]}), time=1)
    inp.insert(pa.table({"src_node": pa.array([5], pa.int32()), "dst_node": [6],
                         "time": [2], "diff": [3]}))
    inp.insert(pa.table({"src_node": [7], "dst_node": [8]}), time=np.array([0]))
    inp.advance_to(3)
    df.run()
    assert_updates_equal(cap, [((1, 3), 1, 1), ((2, 4), 1, 1), ((5, 6), 2, 3),
                               ((7, 8), 0, 1)])


def test_insert_arrow_table_columns_matched_by_name():
    df, inp, c = make()
    cap = c.capture()
    inp.insert(pa.table({"dst_node": [30], "time": [0], "src_node": [10], "diff": [2]}))
    inp.advance_to(1)
    df.run()
    assert_updates_equal(cap, [((10, 30), 0, 2)])


def test_insert_empty_and_run_without_work():
    df, inp, c = make()
    cap = c.map(lambda a, b: (b, a)).capture()
    inp.insert(np.array([], dtype=np.int64), np.array([], dtype=np.int64), time=0)
    df.run()
    df.run()
    inp.advance_to(1)
    df.run()
    assert cap.updates().num_rows == 0
    # (a swap keeps its columns' names, swapped)
    assert cap.updates().column_names == NAMES[::-1] + ["time", "diff"]
    assert_collection_equal(cap.at(0), {})


def test_updates_at_many_times_before_one_run():
    df, inp, c = make()
    cap = c.count().capture()
    n = 500
    times = np.arange(n)
    inp.insert(times % 3, times, time=times)
    inp.advance_to(n)
    df.run()
    table = cap.updates()
    # Each time adds one row to group t % 3: the count moves by one at every time.
    assert table.num_rows == 2 * n - 3
    assert_collection_equal(cap.at(n - 1), {(0, 167): 1, (1, 167): 1, (2, 166): 1})
    assert_collection_equal(cap.at(4), {(0, 2): 1, (1, 2): 1, (2, 1): 1})


@pytest.mark.parametrize("engine", ["python", "native"])
def test_int64_arrays_are_copied_on_update(engine):
    # int64 columns, times and diffs take a fast path; the input must still hold its
    # own copies: arrays the caller changes or reuses afterwards change nothing.
    df = dd.Dataflow(engine=engine)
    inp, c = df.new_input(list(NAMES))
    cap = c.capture()
    src = np.array([1, 2, 3], np.int64)
    dst = np.array([4, 5, 6], np.int64)
    times = np.array([0, 1, 1], np.int64)
    diffs = np.array([2, -1, 1], np.int64)
    inp.update(src, dst, time=times, diff=diffs)
    inp.update(src[::2], dst[::2], time=times[::2] + 2, diff=diffs[::2])  # strided
    for a in (src, dst, times, diffs):
        a[:] = 99
    inp.advance_to(5)
    df.run()
    assert_updates_equal(cap, [((1, 4), 0, 2), ((2, 5), 1, -1), ((3, 6), 1, 1),
                               ((1, 4), 2, 2), ((3, 6), 3, 1)])
    with pytest.raises(ValueError) as e:   # (the fast path checks lengths too)
        inp.update(src, dst, time=np.array([6, 6], np.int64))
    assert_mentions(e, *NAMES, "2 times for 3 rows")
    with pytest.raises(ValueError) as e:
        inp.update(src, dst, time=6, diff=np.array([1, 1], np.int64))
    assert_mentions(e, *NAMES, "diffs for 3 rows")


def test_advance_to_with_python_ints():
    df, inp, c = make()
    inp.advance_to(7)
    inp.advance_to(7)                 # not moving is fine
    assert np.asarray(inp.frontier).tolist() == [[7]]
    assert inp.frontier.dtype == np.int64
    with pytest.raises(ValueError) as e:
        inp.advance_to(6)
    assert_mentions(e, *NAMES, "6")
    with pytest.raises((TypeError, OverflowError, ValueError)) as e:
        inp.advance_to(2 ** 70)
    assert_mentions(e, *NAMES, str(2 ** 70))
    assert np.asarray(inp.frontier).tolist() == [[7]]


# ------------------------------------------------------------------------- frontiers


def test_frontier_moves_forward_and_empties_on_close():
    df, inp, c = make(time_dims=2)
    f0 = np.asarray(inp.frontier)
    assert f0.dtype == np.int64 and f0.tolist() == [[0, 0]]
    inp.advance_to((2, 1))
    assert np.asarray(inp.frontier).tolist() == [[2, 1]]
    inp.advance_to((2, 1))  # not moving is allowed
    inp.advance_to((3, 1))
    assert np.asarray(inp.frontier).tolist() == [[3, 1]]
    inp.close()
    assert np.asarray(inp.frontier).shape == (0, 2)


@pytest.mark.parametrize("seed", range(4))
def test_advance_to_an_antichain_2d(seed):
    """Partially ordered inputs advance to antichains: each run completes exactly the
    times not >= the new frontier, and ``at(t)`` there equals the brute-force
    accumulation (a join of two inputs on different antichains, and a count)."""
    rng = np.random.default_rng(seed)
    df = dd.Dataflow(time_dims=2)
    ai, a = df.new_input(["k", "x"])
    bi, b = df.new_input(["k", "y"])
    joined = a.join(b).capture()
    counts = a.count().capture()
    fed = {"a": [], "b": []}
    fronts = {"a": [(0, 0)], "b": [(0, 0)]}

    def at_or_after(t, front):
        return any(t[0] >= f[0] and t[1] >= f[1] for f in front)

    for step in range(1, 6):
        for name, h in (("a", ai), ("b", bi)):
            for _ in range(6):
                t = (int(rng.integers(0, 4 * step)), int(rng.integers(0, 4 * step)))
                if not at_or_after(t, fronts[name]):
                    continue
                row = (int(rng.integers(0, 3)), int(rng.integers(0, 3)))
                d = int(rng.choice([-1, 1, 2]))
                h.update([row[0]], [row[1]], time=t, diff=d)
                fed[name].append((row, t, d))
            c = 2 * step + int(rng.integers(0, 2))
            new = [(c, 0), (c, 1), (0, c + 1)]   # (c, 1) >= (c, 0) is not minimal: dropped
            h.advance_to(new)
            fronts[name] = [(c, 0), (0, c + 1)]
            assert sorted(map(tuple, h.frontier.tolist())) == sorted(fronts[name])
        df.run()
        for t in [(i, j) for i in range(4 * step) for j in range(4 * step)]:
            done = not (at_or_after(t, fronts["a"]) or at_or_after(t, fronts["b"]))
            if not done:
                with pytest.raises(ValueError):
                    joined.at(t)
                continue

            def acc(name):
                out = {}
                for row, tt, d in fed[name]:
                    if tt[0] <= t[0] and tt[1] <= t[1]:
                        out[row] = out.get(row, 0) + d
                return {r: n for r, n in out.items() if n}

            A, B = acc("a"), acc("b")
            want = {}
            for (k, x), n in A.items():
                for (k2, y), m in B.items():
                    if k == k2:
                        want[(k, x, y)] = want.get((k, x, y), 0) + n * m
            assert_collection_equal(joined.at(t), {r: n for r, n in want.items() if n})
            per_k = {}     # every key with a row present, its rows' total count
            for (k, x), n in A.items():
                per_k[k] = per_k.get(k, 0) + n
            assert_collection_equal(counts.at(t), {(k, n): 1 for k, n in per_k.items()})


def test_advance_to_antichain_errors():
    df, inp, c = make(time_dims=2)
    inp.advance_to([(0, 3), (3, 0)])
    for bad in ([(0, 0)], [(2, 0), (0, 2)], (2, 2)):
        with pytest.raises(ValueError) as e:
            inp.advance_to(bad)
        assert_mentions(e, "backward")
    with pytest.raises(ValueError) as e:
        inp.advance_to([(4, 0), (0,)])
    assert_mentions(e, *NAMES)
    with pytest.raises(ValueError) as e:
        inp.advance_to([[4, 4, 4]])
    assert_mentions(e, "time_dims=2")
    with pytest.raises(TypeError):
        inp.advance_to([(4.5, 0)])
    assert sorted(map(tuple, inp.frontier.tolist())) == [(0, 3), (3, 0)]
    inp.advance_to([(2**63 - 1, 0), (5, 5)])   # an end-of-time element admits nothing
    assert inp.frontier.tolist() == [[5, 5]]
    inp.advance_to([])                         # the empty antichain: closed
    assert inp.closed and inp.frontier.shape == (0, 2)


@pytest.mark.parametrize("engine", ["python", "native"])
def test_advance_to_the_end_of_time_closes_the_input(engine):
    """No update can be at 2**63 - 1, so advancing to it completes every time: the
    same on both engines (native used to, Python did not)."""
    M = 2**63 - 1
    df = dd.Dataflow(engine=engine)
    inp, c = df.new_input(["a"])
    cap = c.count().capture()
    inp.insert([1, 1, 2], time=[0, 3, 5])
    inp.advance_to(M)
    df.run()
    assert inp.closed and cap.frontier.shape == (0, 1)
    assert_collection_equal(cap.at(M), {(1, 2): 1, (2, 1): 1})
    assert_collection_equal(cap.at(4), {(1, 2): 1})
    with pytest.raises(RuntimeError) as e:
        inp.insert([1], time=7)
    assert_mentions(e, "closed")


def test_captured_at_frontier_and_probe():
    df, inp, c = make()
    m = c.map(lambda a, b: (a + b, b))
    cap = m.capture()
    probe = m.probe()
    inp.insert([1, 2], [10, 20], time=[0, 1])
    inp.advance_to(2)
    df.run()
    assert np.asarray(cap.frontier).tolist() == [[2]]
    assert probe.done(1) and not probe.done(2)
    assert_collection_equal(cap.at(0), {(11, 10): 1})
    assert_collection_equal(cap.at(1), {(11, 10): 1, (22, 20): 1})
    at1 = cap.at(1)
    assert at1.column_names[-1] == "count" and at1.num_rows == 2
    with pytest.raises(ValueError):
        cap.at(2)  # not complete yet
    inp.close()
    df.run()
    assert probe.done(10**9)
    assert np.asarray(cap.frontier).shape[0] == 0
    assert_collection_equal(cap.at(7), {(11, 10): 1, (22, 20): 1})


def test_captured_at_2d_incomplete_time():
    df, inp, c = make(time_dims=2)
    cap = c.capture()
    inp.insert([1], [2], time=(0, 5))
    inp.advance_to((1, 0))
    df.run()
    assert_collection_equal(cap.at((0, 9)), {(1, 2): 1})
    with pytest.raises(ValueError):
        cap.at((1, 0))


# ---------------------------------------------------------------------------- errors


def test_dataflow_options():
    with pytest.raises(ValueError):
        dd.Dataflow(time_dims=0)
    with pytest.raises(TypeError):
        dd.Dataflow(1)  # options are keyword-only


def test_wrong_column_count():
    df, inp, c = make()
    with pytest.raises(ValueError) as e:
        inp.insert([1], [2], [3], time=0)
    assert_mentions(e, *NAMES)
    with pytest.raises(ValueError) as e:
        inp.insert([1, 2], time=0)
    assert_mentions(e, *NAMES)
    with pytest.raises(ValueError) as e:
        inp.insert(np.zeros((2, 3), dtype=np.int64), time=0)
    assert_mentions(e, *NAMES)


def test_columns_of_different_lengths():
    df, inp, c = make()
    with pytest.raises(ValueError) as e:
        inp.insert([1, 2, 3], [4, 5], time=0)
    assert_mentions(e, *NAMES, "3", "2")


def test_wrong_column_names_in_table():
    df, inp, c = make()
    with pytest.raises(ValueError) as e:
        inp.insert(pa.table({"src_node": [1], "target": [2]}), time=0)
    assert_mentions(e, "dst_node", "target")


def test_non_integer_data():
    df, inp, c = make()
    with pytest.raises((TypeError, ValueError)) as e:
        inp.insert([1.5, 2.0], [3, 4], time=0)
    assert_mentions(e, "src_node", "1.5")
    with pytest.raises((TypeError, ValueError)) as e:
        inp.insert([1], np.array(["abc"]), time=0)
    assert_mentions(e, "dst_node", "abc", "str", "<U")
    with pytest.raises((TypeError, ValueError)) as e:
        inp.update([1], [2], time=0, diff=[0.5])
    assert_mentions(e, "diff", "0.5", *NAMES)


def test_time_with_wrong_dimensions():
    df, inp, c = make(time_dims=2)
    with pytest.raises(ValueError) as e:
        inp.insert([1], [2], time=3)
    assert_mentions(e, *NAMES, "time_dims", "dimension")
    with pytest.raises(ValueError) as e:
        inp.insert([1], [2], time=(1, 2, 3))
    assert_mentions(e, *NAMES, "(1, 2, 3)", "[1 2 3]", "[1, 2, 3]")
    with pytest.raises(ValueError) as e:
        inp.insert([1, 2], [3, 4], time=np.zeros((2, 3), dtype=np.int64))
    assert_mentions(e, *NAMES, "time_dims", "dimension", "3")
    df1, inp1, c1 = make(time_dims=1)
    with pytest.raises(ValueError) as e:
        inp1.insert([1], [2], time=(4, 5))
    assert_mentions(e, *NAMES, "(4, 5)", "[4 5]", "[4, 5]")
    with pytest.raises(ValueError) as e:
        inp1.advance_to((1, 1))
    assert_mentions(e, *NAMES, "(1, 1)", "[1 1]", "[1, 1]")


def test_time_not_beyond_frontier():
    df, inp, c = make()
    inp.advance_to(1000)
    with pytest.raises(ValueError) as e:
        inp.insert([1], [2], time=999)
    assert_mentions(e, *NAMES, "999")
    with pytest.raises(ValueError) as e:
        inp.insert([1, 1], [2, 2], time=np.array([1000, 998]))
    assert_mentions(e, *NAMES, "998")
    inp.insert([1], [2], time=1000)  # at the frontier is fine


def test_negative_time():
    df, inp, c = make()
    with pytest.raises(ValueError) as e:
        inp.insert([1], [2], time=-4)
    assert_mentions(e, *NAMES, "-4")


@pytest.mark.parametrize("engine", ["python", "native"])
def test_time_at_the_end_of_time_is_refused(engine):
    # 2**63 - 1 stands for "never" in frontiers: an update there is refused by both
    # engines (the native one used to drop it), in either coordinate; one below is kept.
    top = 2**63 - 1
    for dims, bad in [(1, top), (2, [3, top]), (2, [top, 0])]:
        df, inp, c = make(time_dims=dims)
        with pytest.raises(ValueError) as e:
            inp.update([1, 2], [2, 3], time=np.array([[0] * dims, bad]).reshape(2, dims)
                       if dims > 1 else np.array([0, bad]))
        assert_mentions(e, *NAMES, str(top), "end of time")
    df = dd.Dataflow(engine=engine)
    inp, c = df.new_input(NAMES)
    out = c.capture()
    inp.insert([1], [2], time=0)
    inp.insert([3], [4], time=top - 1)
    inp.close()
    df.run()
    assert sorted(out.updates().to_pylist(), key=lambda r: r["time"]) == [
        {"src_node": 1, "dst_node": 2, "time": 0, "diff": 1},
        {"src_node": 3, "dst_node": 4, "time": top - 1, "diff": 1}]


def test_time_not_beyond_frontier_2d():
    df, inp, c = make(time_dims=2)
    inp.advance_to((5, 3))
    with pytest.raises(ValueError) as e:
        inp.insert([1], [2], time=(4, 9))
    assert_mentions(e, *NAMES, "(4, 9)", "[4 9]", "[4, 9]")
    with pytest.raises(ValueError) as e:
        inp.insert([1], [2], time=(9, 2))
    assert_mentions(e, *NAMES, "(9, 2)", "[9 2]", "[9, 2]")
    inp.insert([1], [2], time=(5, 3))
    inp.insert([1], [2], time=(7, 4))


def test_advance_to_backwards():
    df, inp, c = make()
    inp.advance_to(50)
    with pytest.raises(ValueError) as e:
        inp.advance_to(49)
    assert_mentions(e, *NAMES, "49")
    df2, inp2, c2 = make(time_dims=2)
    inp2.advance_to((2, 0))
    with pytest.raises(ValueError) as e:
        inp2.advance_to((1, 7))
    assert_mentions(e, *NAMES, "(1, 7)", "[1 7]", "[1, 7]")
    with pytest.raises(ValueError):
        inp2.advance_to((0, 2))  # incomparable with (2, 0): not forward either
    assert np.asarray(inp2.frontier).tolist() == [[2, 0]]


def test_closed_input():
    df, inp, c = make()
    inp.close()
    for call in (lambda: inp.insert([1], [2], time=5),
                 lambda: inp.remove([1], [2], time=5),
                 lambda: inp.update([1], [2], time=5, diff=3),
                 lambda: inp.advance_to(6)):
        with pytest.raises((RuntimeError, ValueError)) as e:
            call()
        assert_mentions(e, *NAMES, "closed")


# -------------------------------------------------------------------------- overflow


def test_diff_overflow_when_consolidating():
    df, inp, c = make()
    cap = c.consolidate().capture()
    with pytest.raises(OverflowError):
        inp.update([1, 1], [2, 2], time=0, diff=[2**62, 2**62])
        inp.advance_to(1)
        df.run()
        cap.updates()


def test_diff_overflow_near_minimum():
    df, inp, c = make()
    cap = c.capture()
    lo = -(2**63)
    with pytest.raises(OverflowError):
        inp.update([1, 1], [2, 2], time=0, diff=np.array([lo, -1]))
        inp.advance_to(1)
        df.run()
        cap.updates()


def test_negate_overflow():
    df, inp, c = make()
    cap = c.negate().capture()
    with pytest.raises(OverflowError):
        inp.update([1], [2], time=0, diff=np.array([-(2**63)]))
        inp.advance_to(1)
        df.run()
        cap.updates()


def test_join_product_overflow():
    df, inp, c = make()
    cap = c.join(c).capture()
    with pytest.raises(OverflowError):
        inp.update([1], [2], time=0, diff=2**32)
        inp.advance_to(1)
        df.run()
        cap.updates()


def test_count_overflow():
    df, inp, c = make()
    cap = c.count().capture()
    with pytest.raises(OverflowError):
        inp.update([1, 1], [2, 3], time=0, diff=[2**62, 2**62])
        inp.advance_to(1)
        df.run()
        cap.updates()


def test_sum_overflow():
    df, inp, c = make()
    cap = c.sum("dst_node").capture()
    with pytest.raises(OverflowError):
        inp.update([1], [2**40], time=0, diff=2**30)
        inp.advance_to(1)
        df.run()
        cap.updates()


@pytest.mark.parametrize("engine", ["python", "native"])
def test_overflow_in_a_run_says_which_run_and_which_times(engine):
    """An overflow inside an operator names the run, what each input was fed for it,
    and the frontier the run completes, so a user can find the updates at fault."""
    df = dd.Dataflow(engine=engine)
    inp, c = df.new_input(NAMES)
    c.count().capture()
    inp.insert([5], [5], time=0)
    inp.advance_to(1)
    df.run()
    inp.update([1, 1], [2, 3], time=[3, 4], diff=[2**62, 2**62])
    inp.advance_to(7)
    with pytest.raises(OverflowError) as e:
        df.run()
    msg = str(e.value)
    assert "count/sum" in msg
    assert "run() number 2" in msg
    assert "input ['src_node', 'dst_node'] was fed times 3..4" in msg
    assert "before the frontier {7}" in msg


def test_overflow_context_for_2d_times_and_closed_inputs():
    df, inp, c = make(time_dims=2)
    other, d = df.new_input(["k"])
    c.join(c).capture()
    inp.update([1], [2], time=(2, 5), diff=2**32)
    inp.close()
    other.close()
    with pytest.raises(OverflowError) as e:
        df.run()
    msg = str(e.value)
    assert "was fed times with coordinates in 2..5" in msg
    assert "input ['k']" not in msg          # fed nothing: not named
    assert "the inputs are closed" in msg


def test_accumulation_overflow_in_at():
    """Two in-range diffs at different times whose sum at the later time overflows."""
    df, inp, c = make()
    cap = c.capture()
    # The engine may raise as soon as it sums the two (e.g. when compacting), or only
    # when asked for the accumulation; it must never hand back a wrapped count.
    with pytest.raises(OverflowError):
        inp.update([1, 1], [2, 2], time=[0, 1], diff=[2**62, 2**62])
        inp.advance_to(2)
        df.run()
        cap.updates()
        cap.at(1)


@pytest.mark.parametrize("engine", ["python", "native"])
@pytest.mark.parametrize("failure", ["overflow", "user function"])
def test_run_after_a_failed_run_is_refused(engine, failure):
    """A run that raises part-way leaves some operators with the updates and others
    without; every later run says the dataflow failed (and why) instead of going on
    from that state."""
    df = dd.Dataflow(engine=engine)
    inp, c = df.new_input(["a", "b"])

    def boom(a, b):
        if (a == 7).any():
            raise ValueError("no sevens")
        return a + 1, b            # (not a selection: the native engine calls it)

    cap = (c.count() if failure == "overflow" else c.map(boom, names=["a", "b"])).capture()
    inp.update([1], [2], time=0, diff=[1])
    inp.advance_to(1)
    df.run()
    if failure == "overflow":
        inp.update([1, 1], [2, 3], time=1, diff=[2**62, 2**62])
    else:
        inp.update([7], [2], time=1, diff=[1])
    inp.advance_to(2)
    with pytest.raises(OverflowError if failure == "overflow" else ValueError):
        df.run()
    inp.update([1], [2], time=2, diff=[-1])
    inp.advance_to(3)
    with pytest.raises(RuntimeError, match="failed in an earlier run.*(Overflow|sevens)"):
        df.run()
    with pytest.raises(RuntimeError, match="failed in an earlier run.*(Overflow|sevens)"):
        df.prepare()
    assert cap.at(0).num_rows == 1           # what the good run produced is still there


def test_interrupt_reported_by_numba_as_system_error_is_an_interrupt(monkeypatch):
    """Ctrl-C landing inside Numba's glue surfaces as ``SystemError`` caused by
    ``KeyboardInterrupt`` (seen on the Python engine, 1 run in 3): ``run()`` raises
    ``KeyboardInterrupt`` instead, so callers (and ``ddnumba run``'s exit 130) see
    an interrupt, and later runs are refused."""
    df = dd.Dataflow(engine="python")
    inp, c = df.new_input(["a"])
    c.count().capture()
    inp.insert([1], time=0)
    inp.advance_to(1)

    def interrupted(*a, **k):
        try:
            raise KeyboardInterrupt()
        except KeyboardInterrupt as e:
            raise SystemError("<function _numba_unpickle> returned a result with an "
                              "exception set") from e

    monkeypatch.setattr(df.root, "run_pass", interrupted)
    with pytest.raises(KeyboardInterrupt):
        df.run()
    monkeypatch.undo()
    with pytest.raises(RuntimeError, match="earlier run.*KeyboardInterrupt"):
        df.run()


@pytest.mark.parametrize("bad", [1.5, 2.0, np.float64(1.0), "1", None, [1.0], object()])
def test_captured_and_probe_times_must_be_integers(bad):
    # Reading a capture or a probe takes integer times only, as inputs do: a float is
    # not truncated (compact(1.5) compacted to 1), a string not parsed.
    df, inp, c = make()
    cap = c.capture()
    probe = c.probe()
    inp.insert([1, 2], [3, 4], time=[0, 1])
    inp.advance_to(3)
    df.run()
    for f in (cap.at, cap.accumulate, cap.done, cap.compact, probe.done):
        with pytest.raises(TypeError, match="is not integer"):
            f(bad)
    assert cap.since is None                      # nothing was compacted
    assert_collection_equal(cap.at(1), {(1, 3): 1, (2, 4): 1})
    assert_collection_equal(cap.at(np.int32(0)), {(1, 3): 1})
    assert cap.done(np.uint8(2)) and probe.done([2]) and not probe.done(3)


def test_captured_accumulate_refuses_times_before_its_compaction():
    # accumulate skips at()'s completeness check, not the compaction's: before the
    # time compacted to, the changes that told those times apart are gone.
    df, inp, c = make()
    cap = c.capture()
    inp.insert([1, 2], [3, 4], time=[0, 3])
    inp.advance_to(2)
    df.run()
    rows, counts = cap.accumulate(5)          # not complete: what is captured so far
    assert sorted(map(tuple, rows.tolist())) == [(1, 3), (2, 4)]
    cap.compact(1)
    with pytest.raises(ValueError, match=r"accumulate\(0\): the capture was compacted"):
        cap.accumulate(0)
    rows, counts = cap.accumulate(1)
    assert rows.tolist() == [[1, 3]] and counts.tolist() == [1]


def test_captured_time_beyond_int64():
    df, inp, c = make()
    cap = c.capture()
    inp.insert([1], [2], time=0)
    inp.close()
    df.run()
    with pytest.raises(OverflowError, match="does not fit in int64"):
        cap.at(np.uint64(2**63))
    assert_collection_equal(cap.at(np.uint64(2**63 - 1)), {(1, 2): 1})


def test_input_times_beyond_int64_are_refused_not_wrapped():
    # An unsigned time past int64 used to be cast to a negative one and refused as
    # "negative" or "backward"; it is an overflow, said so, and nothing changes.
    df, inp, c = make()
    cap = c.capture()
    with pytest.raises(OverflowError, match="does not fit in int64"):
        inp.insert([1], [2], time=np.array([2**63], np.uint64))
    with pytest.raises(OverflowError, match="does not fit in int64"):
        inp.advance_to(np.uint64(2**63))
    inp.insert([1], [2], time=np.array([3], np.uint64))
    inp.advance_to(np.uint64(4))
    df.run()
    assert_collection_equal(cap.at(3), {(1, 2): 1})
    assert not cap.done(4)


def test_empty_lists_big_ints_table_diffs_and_integer_options():
    df, inp, c = make()
    cap = c.capture()
    inp.insert([], [], time=0)                       # empty lists: nothing, no error
    inp.insert(np.array([]), np.array([]), time=0)
    with pytest.raises(OverflowError) as e:
        inp.insert([2**70], [1], time=0)
    assert_mentions(e, "src_node", str(2**70))
    tbl = pa.table({"src_node": [1, 2], "dst_node": [3, 4], "time": [0, 0],
                    "diff": [5, 2]})
    with pytest.raises(ValueError, match="has a diff column"):
        inp.remove(tbl)
    with pytest.raises(ValueError, match="has a diff column"):
        inp.update(tbl, diff=2)
    inp.insert(tbl)                                  # the table's diffs
    inp.update(tbl.drop_columns(["diff"]), diff=-1)
    inp.update(tbl.drop_columns(["diff"]))           # default 1
    inp.advance_to(1)
    df.run()
    assert cap.at(0).to_pylist() == [{"src_node": 1, "dst_node": 3, "count": 5},
                                     {"src_node": 2, "dst_node": 4, "count": 2}]
    for bad in (1.5, True, "2"):
        with pytest.raises(ValueError, match="must be an integer"):
            c.top_k(bad)
    with pytest.raises(ValueError, match="time_dims must be an integer"):
        dd.Dataflow(time_dims=1.5)


@pytest.mark.parametrize("engine", ["python", "native"])
def test_diffs_summing_outside_int64_at_one_time_are_refused(engine):
    # Two updates of 2**62 for one row at one time: each fits, their sum does not.
    # The second is refused when fed, naming the input (a capture used to keep them
    # and then fail on every read; later a run refused them and failed the dataflow);
    # the first is kept, and the dataflow goes on.
    df = dd.Dataflow(engine=engine)
    i, c = df.new_input(["k"])
    cap = c.capture()
    i.update([1], time=0, diff=2**62)
    with pytest.raises(OverflowError, match=r"input \['k'\]: .*one row at one time sum"):
        i.update([1, 2], time=0, diff=2**62)
    i.update([2], time=0, diff=3)
    i.advance_to(1)
    df.run()
    assert_collection_equal(cap.at(0), {(1,): 2**62, (2,): 3})
    i.update([1], time=1, diff=-(2**62))       # after the run: the same row, fine
    i.advance_to(2)
    df.run()
    assert_collection_equal(cap.at(1), {(2,): 3})
    # the same diffs at two times, or for two rows, are fine
    for times, rows in (([0, 1], [1, 1]), ([0, 0], [1, 2])):
        df = dd.Dataflow(engine=engine)
        i, c = df.new_input(["k"])
        cap = c.capture()
        i.update(rows, time=times, diff=2**62)
        i.update(rows, time=times, diff=2**61)
        i.advance_to(2)
        df.run()
        assert len(cap.updates()) == 2


@pytest.mark.parametrize("n", [2, 40])
def test_time_and_diff_checks_on_small_and_large_batches(n):
    # The checks take one path up to 16 rows and another beyond: both refuse.
    rows = np.arange(n, dtype=np.int64)
    for bad_time, needle in ((-4, "negative time -4"), (2**63 - 1, "end of time")):
        df, inp, c = make(names=["k"])
        times = np.zeros(n, np.int64)
        times[n // 2] = bad_time
        with pytest.raises(ValueError, match=needle):
            inp.insert(rows, time=times)
    df, inp, c = make(names=["k"])
    keys = np.zeros(n, np.int64)                     # every row the same key
    diffs = np.full(n, (2**63 - 1) // (n - 1), np.int64)
    with pytest.raises(OverflowError, match="sum outside int64"):
        inp.update(keys, time=0, diff=diffs)
    assert not inp._buffer

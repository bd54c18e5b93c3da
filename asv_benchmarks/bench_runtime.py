"""Runtime suites: per-record times at batch throughput.

100,000 updates carrying 100,000 distinct times go through ``count`` and through ``join``
in one ``run()``; the same updates at a single time are the baseline. The design target
is a ratio of at most 2 (``track_*_ratio``): every distinct time of a batch is handled in
one kernel pass, never one pass per time.
"""
import time

import numpy as np

import ddnumba as dd


N = 100_000


def _advance_and_time(bench, steps):
    """Advance ``bench.inp`` by ``steps`` times (``bench.t`` follows) and time one
    ``bench.df.run()``: its seconds."""
    bench.t += steps
    bench.inp.advance_to(bench.t)
    a = time.perf_counter()
    bench.df.run()
    return time.perf_counter() - a


class _RunOnce:
    """asv settings of the suites that time their runs themselves after one setup
    (asv would re-run ``setup`` between calls) and report the result: one call, no
    repeats, ten minutes at most."""
    timeout = 600
    number = 1
    repeat = 1


def _updates(n=N, keys=10_000, seed=1):
    rng = np.random.default_rng(seed)
    return rng.integers(0, keys, n), rng.integers(0, 1_000_000, n)


def _count_once(times, n=N):
    k, v = _updates(n)
    df = dd.Dataflow()
    inp, c = df.new_input(["k", "v"])
    c.count().probe()
    inp.insert(k, v, time=times)
    inp.advance_to(N)
    df.run()


def _join_once(times, n=N):
    k, v = _updates(n)
    k2, v2 = _updates(n, seed=2)
    df = dd.Dataflow()
    a_in, a = df.new_input(["k", "v"])
    b_in, b = df.new_input(["k", "w"])
    a.join(b).probe()
    a_in.insert(k, v, time=times)
    b_in.insert(k2, v2, time=times)
    a_in.advance_to(N)
    b_in.advance_to(N)
    df.run()


def _times(kind):
    return np.arange(N) if kind == "distinct" else 0


class DistinctTimes:
    params = [["single", "distinct"]]
    param_names = ["times"]
    timeout = 600

    def setup(self, kind):
        _count_once(np.arange(100) if kind == "distinct" else 0, 100)   # JIT warm-up

    def time_count(self, kind):
        _count_once(_times(kind))

    def time_join(self, kind):
        _join_once(_times(kind))


def _interleaved_ratio(f, reps):
    """median(distinct) / median(single), runs interleaved so machine noise hits both."""
    import time
    f(_times("distinct"))
    f(0)
    d, s = [], []
    for _ in range(reps):
        t = time.perf_counter()
        f(_times("distinct"))
        d.append(time.perf_counter() - t)
        t = time.perf_counter()
        f(0)
        s.append(time.perf_counter() - t)
    return float(np.median(d) / np.median(s))


class DistinctTimesRatio:
    """Distinct-times time / single-time time, measured in one process (target <= 2)."""

    timeout = 900

    def setup(self):
        _count_once(np.arange(100), 100)
        _join_once(np.arange(100), 100)

    def track_count_ratio(self):
        return _interleaved_ratio(_count_once, 21)

    def track_join_ratio(self):
        return _interleaved_ratio(_join_once, 7)


class CaptureRead:
    """A stream read run by run: a capture holding ``n`` updates gains 100 in a run,
    then is read whole (``updates``: the new parts merged into the consolidated rest),
    for what is new only (``new_updates``), or as the collection at the last complete
    time (``at``: the merge, then one pass accumulating the sorted updates). The run
    itself is in the timed region for all (~0.1 ms)."""

    params = [[100_000, 1_000_000], ["updates", "new_updates", "at"]]
    param_names = ["n", "read"]
    timeout = 600

    def setup(self, n, read):
        rng = np.random.default_rng(3)
        self.df = dd.Dataflow()
        self.inp, c = self.df.new_input(["k", "v"])
        self.cap = c.capture()
        self.inp.insert(rng.integers(0, 10**9, n), rng.integers(0, 100, n), time=0)
        self.t = 1
        self.inp.advance_to(self.t)
        self.df.run()
        self.rng = rng
        self._step(read)                # JIT warm-up; the first read consolidates all

    def _step(self, read):
        rng = self.rng
        self.inp.insert(rng.integers(0, 10**9, 100), rng.integers(0, 100, 100),
                        time=self.t)
        self.t += 1
        self.inp.advance_to(self.t)
        self.df.run()
        if read == "at":
            return self.cap.at(self.t - 1)
        return self.cap.updates() if read == "updates" else self.cap.new_updates()

    def time_run_and_read(self, n, read):
        self._step(read)


class CaptureCompact:
    """One compaction of a capture holding the count of 200,000 keys, kept, and ``n``
    updates added since by runs of 100,000 changes each (the output of a ``count``:
    one retraction and one insertion per changed key), to the last complete time. With
    one time coordinate it is one pass: the kept head merged with the new parts, every
    time advanced on the way (forty-second session, ``merge_advanced``; before, a
    merge, an advance, a sortedness check and a consolidation: a count ingest's
    compactions 3.4 -> 1.2-1.4 s)."""

    params = [200_000, 2_000_000]
    param_names = ["n"]
    timeout = 600

    def setup(self, n):
        rng = np.random.default_rng(4)
        self.df = dd.Dataflow()
        inp, c = self.df.new_input(["k", "v"])
        self.node = c.count().capture()._node
        inp.insert(np.arange(200_000), np.zeros(200_000, np.int64), time=0)
        inp.advance_to(1)
        self.df.run()
        self.node.compact(np.array([[0]]))
        t = 1
        while self.node._kept_new < n:
            k = rng.integers(0, 200_000, 100_000)
            inp.update(k, rng.integers(1, 100, 100_000), time=t)
            t += 1
            inp.advance_to(t)
            self.df.run()
        self.t = t - 1
        self.parts = list(self.node.parts)
        self.head = self.node._head

    def time_compact(self, n):
        # every repeat compacts the same parts (a compaction replaces them)
        node = self.node
        node.parts = list(self.parts)
        node._head = self.head
        node._consolidated = None
        node.since = None
        node.compact(np.array([[self.t]]))


class CountIngest(_RunOnce):
    """Ingest through a root ``count``: runs of 200,000 ``(user, item)`` rows spread
    over 1,000 times each (200,000 users, 100,000 items: nearly every row a new value
    of its key), counted per user into a self-compacting capture; the median of 8
    runs after 4 warm-up runs, and a check of the final counts. Forty-third session:
    the count's tables at least double when they grow, its output comes out sorted
    (no sort of a run's corrections), and a compaction merges the consolidated
    parts of the runs since the last one instead of sorting them together."""

    params = [200_000]
    param_names = ["rows"]

    def setup(self, rows):
        self.rng = np.random.default_rng(8)
        self.df = dd.Dataflow()
        self.inp, c = self.df.new_input(["user", "item"])
        self.cap = c.count().capture(auto_compact=True)
        self.counts = np.zeros(200_000, np.int64)
        self.t = 0
        for _ in range(4):
            self._run(rows)

    def _run(self, rows):
        rng = self.rng
        u = rng.integers(0, 200_000, rows)
        it = rng.integers(0, 100_000, rows)
        tt = np.sort(rng.integers(self.t, self.t + 1000, rows))
        self.inp.update(u, it, time=tt)
        self.counts += np.bincount(u, minlength=200_000)
        return _advance_and_time(self, 1000)

    def track_seconds_per_run(self, rows):
        lat = [self._run(rows) for _ in range(8)]
        got = self.cap.at(self.t - 1)
        keys = np.flatnonzero(self.counts)
        if not (np.array_equal(got["user"].to_numpy(), keys)
                and np.array_equal(got["count"].to_numpy(), self.counts[keys])):
            raise RuntimeError("count() differs from the NumPy recount")
        return float(np.median(lat))
    track_seconds_per_run.unit = "seconds"


class _RootRuns(_RunOnce):
    """Runs of B changes to input ``a`` (rows ``(k, x)``, ``NA`` of them over ``K``
    keys and ``X`` values), each change one row removed and one inserted at its own
    time; every input in ``self.inputs`` advances with the runs. A run's latency is
    timed here (asv would re-run ``setup`` between calls)."""

    params = [[10, 1000, 10000]]
    param_names = ["batch"]
    NA, K, X = 200_000, 50_000, 100

    def _load_a(self, rng):
        self.rng = rng
        self.ak = rng.integers(0, self.K, self.NA)
        self.ax = rng.integers(0, self.X, self.NA)
        self.ai.insert(self.ak, self.ax, time=0)

    def _start(self, b):
        """The load's run, then the warm-up runs (the state takes shape)."""
        self.t = 1
        for h in self.inputs:
            h.advance_to(1)
        self.df.run()
        for _ in range(max(5, 20_000 // b)):
            self._run(b)

    def _run(self, b):
        rng = self.rng
        i = rng.choice(self.NA, b, replace=False)
        tt = np.arange(self.t, self.t + b)
        self.ai.remove(self.ak[i], self.ax[i], time=tt)
        nk = rng.integers(0, self.K, b)
        nx = rng.integers(0, self.X, b)
        self.ai.insert(nk, nx, time=tt)
        self.ak[i] = nk
        self.ax[i] = nx
        self.t += b
        for h in self.inputs:
            h.advance_to(self.t)
        a = time.perf_counter()
        self.df.run()
        return time.perf_counter() - a

    def _latencies(self, b):
        return [self._run(b) for _ in range(max(5, 100_000 // b))]


class RootStream(_RootRuns):
    """Joins and aggregations kept up to date outside loops, the engine's other main
    use: ``a.join(b).count()``, ``a.count()`` and ``b.count()`` over 200,000 rows of
    ``a`` and 50,000 of ``b`` (50,000 keys), then runs of B changes to ``a``, each
    change (one row removed, one inserted) at its own time. ``a.count()`` (rows per
    key) is captured, self-compacting, and checked against NumPy after the timed
    runs. changes/s = B / median run latency."""

    NB = 50_000

    def setup(self, b):
        rng = np.random.default_rng(11)
        self.df = df = dd.Dataflow()
        self.ai, a = df.new_input(["k", "x"])
        self.bi, bb = df.new_input(["k", "y"])
        self.inputs = [self.ai, self.bi]
        a.join(bb).count().probe()
        self.cap = a.count().capture(auto_compact=True)
        bb.count().probe()
        self._load_a(rng)
        self.bi.insert(rng.integers(0, self.K, self.NB), rng.integers(0, 100, self.NB),
                       time=0)
        self._start(b)

    def track_changes_per_s(self, b):
        lat = self._latencies(b)
        got = self.cap.at(self.t - 1)
        keys, counts = np.unique(self.ak, return_counts=True)
        if not (np.array_equal(got["k"].to_numpy(), keys)
                and np.array_equal(got["count"].to_numpy(), counts)
                and (got[got.column_names[-1]].to_numpy() == 1).all()):
            raise RuntimeError("a.count() differs from the NumPy recount")
        return float(b / np.median(lat))
    track_changes_per_s.unit = "changes/s"


class RootDistinct(_RootRuns):
    """``distinct`` kept up to date outside loops: 200,000 rows ``(k, x)`` (50,000 keys,
    100 values, so ~4% of the rows are duplicates), then runs of B changes (one row
    removed, one inserted), each change at its own time. The distinct is captured,
    self-compacting, and checked against NumPy's unique rows after the timed runs.
    changes/s = B / median run latency."""

    def setup(self, b):
        rng = np.random.default_rng(12)
        self.df = df = dd.Dataflow()
        self.ai, a = df.new_input(["k", "x"])
        self.inputs = [self.ai]
        self.cap = a.distinct().capture(auto_compact=True)
        self._load_a(rng)
        self._start(b)

    def track_changes_per_s(self, b):
        lat = self._latencies(b)
        got = self.cap.at(self.t - 1)
        want = np.unique(self.ak * self.X + self.ax)
        have = got["k"].to_numpy() * self.X + got["x"].to_numpy()
        if not (np.array_equal(np.sort(have), want)
                and (got[got.column_names[-1]].to_numpy() == 1).all()):
            raise RuntimeError("a.distinct() differs from NumPy's unique rows")
        return float(b / np.median(lat))
    track_changes_per_s.unit = "changes/s"


class RootOrdered(_RootRuns):
    """``min`` and ``top_k(2)`` kept up to date outside loops over many small groups:
    200,000 rows ``(k, x)`` (50,000 keys, 100 values), then runs of B changes (one row
    removed, one inserted), each at its own time. Small groups are gathered whole, as
    by any reduce (kernels.rootorder): this should not move when large groups get
    faster. The ``min`` is captured, self-compacting, and checked against NumPy after
    the timed runs. changes/s = B / median run latency."""

    def setup(self, b):
        rng = np.random.default_rng(14)
        self.df = df = dd.Dataflow()
        self.ai, a = df.new_input(["k", "x"])
        self.inputs = [self.ai]
        self.cap = a.min().capture(auto_compact=True)
        a.top_k(2).probe()
        self._load_a(rng)
        self._start(b)

    def track_changes_per_s(self, b):
        lat = self._latencies(b)
        got = self.cap.at(self.t - 1)
        order = np.lexsort((self.ax, self.ak))
        k, x = self.ak[order], self.ax[order]
        first = np.r_[True, k[1:] != k[:-1]]
        if not (np.array_equal(got["k"].to_numpy(), k[first])
                and np.array_equal(got["min_x"].to_numpy(), x[first])):
            raise RuntimeError("a.min() differs from NumPy")
        return float(b / np.median(lat))
    track_changes_per_s.unit = "changes/s"


class RootExtremes(_RunOnce):
    """``min``, ``max`` and ``top_k(3)`` of one key holding G values, outside loops,
    then runs of B changes, each at its own time: the current smallest and largest
    values retracted, random ones inserted. A run reads only the first rows of the
    key's values in order (kernels.rootorder), so its latency should not grow with G
    (thirty-eighth session, G = 1e6, one operator at a time: min 62.6 -> 0.35 ms a
    change at B = 1, max 2,178 -> 0.32 ms a run at B = 100). The Python engine (what
    workers run) reads its tries the same way since the forty-fourth session
    (kernels.rootorder.trie_want). The answers are checked against NumPy after the
    timed runs. Reported: median run latency in ms."""

    params = [[1_000, 1_000_000], [1, 100], ["native", "python"]]
    param_names = ["group", "batch", "engine"]

    def setup(self, g, b, engine):
        self.rng = rng = np.random.default_rng(13)
        self.df = df = dd.Dataflow(engine=engine)
        self.inp, c = df.new_input(["k", "v"])
        self.caps = (c.min().capture(auto_compact=True),
                     c.max().capture(auto_compact=True),
                     c.top_k(3).capture(auto_compact=True))
        self.vals = np.sort(rng.integers(0, 10**9, g))
        self.inp.insert(np.zeros(g, np.int64), self.vals, time=0)
        self.inp.advance_to(1)
        self.t = 1
        df.run()
        for _ in range(5):
            self._run(b)

    def _run(self, b):
        lo = b // 2
        gone = np.concatenate([self.vals[:lo], self.vals[len(self.vals) - (b - lo):]])
        new = self.rng.integers(0, 10**9, b)
        tt = np.arange(self.t, self.t + b)
        z = np.zeros(b, np.int64)
        self.inp.remove(z, gone, time=tt)
        self.inp.insert(z, new, time=tt)
        self.vals = np.sort(np.concatenate([self.vals[lo:len(self.vals) - (b - lo)], new]))
        return _advance_and_time(self, b)

    def track_ms_per_run(self, g, b, engine):
        lat = [self._run(b) for _ in range(30)]
        v = self.vals
        got = [cap.at(self.t - 1) for cap in self.caps]
        top = got[2]
        top = np.repeat(top["v"].to_numpy(), top[top.column_names[-1]].to_numpy())
        if not (got[0]["min_v"].to_pylist() == [v[0]]
                and got[1]["max_v"].to_pylist() == [v[-1]]
                and np.array_equal(top, v[:3])):
            raise RuntimeError("min/max/top_k differ from NumPy")
        return float(np.median(lat) * 1e3)
    track_ms_per_run.unit = "ms"


class RootTakeMin(_RunOnce):
    """A priority queue: ``min`` and ``top_k(3)`` of one key holding 1e6 values, outside
    loops, after P runs that each took the current smallest value out (at its own
    time). The values taken out stay in the trace until a merge meets the batch that put
    them in; the walk starts where the key's output is, so a run should not cost more
    after many such runs (forty-fifth session; before it, min alone went from 0.2 to
    2.1 ms a run over 5,000 runs on the native engine). Reported: median run latency in
    ms over 200 more runs, checked against NumPy."""

    params = [[0, 5_000], ["native", "python"]]
    param_names = ["runs_before", "engine"]

    def setup(self, p, engine):
        rng = np.random.default_rng(17)
        self.df = df = dd.Dataflow(engine=engine)
        self.inp, c = df.new_input(["k", "v"])
        self.caps = (c.min().capture(auto_compact=True),
                     c.top_k(3).capture(auto_compact=True))
        self.vals = np.sort(rng.choice(10**9, 1_000_000, replace=False))
        self.inp.insert(np.zeros(len(self.vals), np.int64), self.vals, time=0)
        self.inp.advance_to(1)
        self.t = 1
        self.lo = 0
        df.run()
        for _ in range(p):
            self._run()

    def _run(self):
        self.inp.remove([0], [self.vals[self.lo]], time=self.t)
        self.lo += 1
        return _advance_and_time(self, 1)

    def track_ms_per_run(self, p, engine):
        lat = [self._run() for _ in range(200)]
        got = [cap.at(self.t - 1) for cap in self.caps]
        top = got[1]
        top = np.repeat(top["v"].to_numpy(), top[top.column_names[-1]].to_numpy())
        if not (got[0]["min_v"].to_pylist() == [self.vals[self.lo]]
                and np.array_equal(top, self.vals[self.lo:self.lo + 3])):
            raise RuntimeError("min/top_k differ from NumPy")
        return float(np.median(lat) * 1e3)
    track_ms_per_run.unit = "ms"


class RootCountGroup(_RunOnce):
    """``count`` and ``sum`` of one key holding G values, outside loops, on each
    engine, then runs of one change (a value retracted, another inserted, at its own
    time). Both engines keep hashed current state there (kernels.rootagg), so a run's
    latency should not grow with G (forty-first session, Python engine, G = 1e6: count
    116 -> 0.23 ms a run, sum 106 -> 0.43 ms, when it stopped reading the key's
    history). The answers are checked against NumPy after the timed runs. Reported:
    median run latency in ms."""

    params = [[1_000, 1_000_000], ["count", "sum"], ["python", "native"]]
    param_names = ["group", "op", "engine"]

    def setup(self, g, op, engine):
        self.rng = rng = np.random.default_rng(17)
        self.df = df = dd.Dataflow(engine=engine)
        self.inp, c = df.new_input(["k", "v"])
        self.cap = (c.count() if op == "count" else c.sum("v")).capture(auto_compact=True)
        self.vals = rng.permutation(4 * g)[:g]
        self.next = 4 * g
        self.inp.insert(np.zeros(g, np.int64), self.vals, time=0)
        self.inp.advance_to(1)
        self.t = 1
        df.run()
        for _ in range(5):
            self._run()

    def _run(self):
        i = int(self.rng.integers(0, len(self.vals)))
        z = np.zeros(1, np.int64)
        self.inp.remove(z, self.vals[i:i + 1], time=self.t)
        self.inp.insert(z, np.array([self.next]), time=self.t)
        self.vals[i] = self.next
        self.next += 1
        return _advance_and_time(self, 1)

    def track_ms_per_run(self, g, op, engine):
        lat = [self._run() for _ in range(30)]
        got = self.cap.at(self.t - 1)
        want = len(self.vals) if op == "count" else int(self.vals.sum())
        if got.column(1).to_pylist() != [want]:
            raise RuntimeError(f"{op} differs from NumPy")
        self.df.close()
        return float(np.median(lat) * 1e3)
    track_ms_per_run.unit = "ms"


class LoopHub(_RunOnce):
    """Connected components (a ``min`` inside a sequential loop) of a star: one hub
    joined to K leaves, then runs that each move one leaf edge to a new leaf (at its
    own time). The hub's ``min`` holds the K labels its leaves proposed; it reads
    them in order and stops at the least present one (``seqloop._walk_order``), and
    a change moves the hub's entries after it with one ``memmove`` (``hstate._shift``),
    so a run should cost little more at K = 1e5 than at 1e3 (forty-sixth session, run
    directly, native: 0.30-0.39 ms at K = 1e5, against 5.2-7.0 ms before, which grew
    linearly with K). The labels are checked after the timed runs. Reported: median
    run latency in ms."""

    params = [[1_000, 100_000], ["native", "python"]]
    param_names = ["leaves", "engine"]

    def setup(self, k, engine):
        from ddnumba.algorithms import connected_components
        self.rng = np.random.default_rng(5)
        self.df = df = dd.Dataflow(engine=engine)
        self.inp, e = df.new_input(["src", "dst"])
        self.cap = connected_components(e).capture(auto_compact=True)
        self.leaves = np.arange(1, k + 1)
        self.next = k + 1
        self.inp.insert(np.zeros(k, np.int64), self.leaves, time=0)
        self.inp.advance_to(1)
        self.t = 1
        df.run()

    def _run(self):
        i = self.rng.integers(0, len(self.leaves))
        self.inp.remove([0], [self.leaves[i]], time=self.t)
        self.inp.insert([0], [self.next], time=self.t)
        self.leaves[i] = self.next
        self.next += 1
        return _advance_and_time(self, 1)

    def track_ms_per_run(self, k, engine):
        lat = [self._run() for _ in range(100 if engine == "native" else 10)]
        got = self.cap.at(self.t - 1)
        want = sorted([0] + self.leaves.tolist())
        if sorted(got.column(0).to_pylist()) != want or \
                set(got.column(1).to_pylist()) != {0}:
            raise RuntimeError("components differ from the star's")
        self.df.close()
        return float(np.median(lat) * 1e3)
    track_ms_per_run.unit = "ms"


class LoopPaths(_RunOnce):
    """``bfs`` and ``sssp`` on a random graph (N = 10,000 nodes, 20,000 edges of
    weight 1-9, 10 roots), then runs that each slide the edge window by one (remove
    the oldest edge, add a random one, at its own time). Their loops' maps add (``k +
    1``, a checked ``k + w``); traced as sums (``MapNode.affine``), they run in the
    sequential loop's compiled routes, where before they were Python callbacks that
    sent the loop round-wise (``loops="rounds"`` is that path). The distances are
    checked against scipy after the timed runs. ``bounded`` is ``sssp`` written out
    with a bound after its checked sum (``filter(d <= 60)``): a checked sum before a
    filter, which ran round-wise until the forty-ninth session. Reported: median run
    latency in ms."""

    params = [["bfs", "sssp", "bounded"], ["sequential", "rounds"]]
    param_names = ["algorithm", "loops"]
    nodes = 10_000
    bound = 60

    def setup(self, algo, loops):
        from ddnumba import algorithms
        from ddnumba.operators.linear import checked_sum
        n, m = self.nodes, 2 * self.nodes
        self.rng = rng = np.random.default_rng(11)
        self.df = df = dd.Dataflow(engine="native", loops=loops)
        ri, roots = df.new_input(["node"])
        self.inp, e = df.new_input(["src", "dst"] if algo == "bfs" else
                                   ["src", "dst", "w"])
        if algo == "bounded":
            h = self.bound
            start = roots.map(lambda r: (r, 0), names=["node", "d"])
            out = start.iterate(lambda x: x.join(e).map(
                lambda n, d, k, w: (k, checked_sum(d, w, "bounded: beyond int64")),
                names=["node", "d"]).filter(lambda n, d: d <= h).concat(start)
                .min("d", name="d"))
        else:
            f = algorithms.sssp if algo == "sssp" else algorithms.bfs
            out = f(roots, e)
        self.cap = out.capture(auto_compact=True)
        self.roots = rng.choice(n, 10, replace=False)
        self.edges = np.stack([rng.integers(0, n, m), rng.integers(0, n, m),
                               np.ones(m, np.int64) if algo == "bfs" else
                               rng.integers(1, 10, m)], axis=1)
        self.first = 0
        ri.insert(self.roots, time=0)
        ri.close()
        self.inp.insert(*self._cols(self.edges), time=0)
        self.inp.advance_to(1)
        self.t = 1
        df.run()

    def _cols(self, rows):
        return [rows[:, c] for c in range(len(self.inp.names))]

    def _run(self):
        old = self.edges[self.first:self.first + 1]
        new = np.array([[self.rng.integers(0, self.nodes), self.rng.integers(0, self.nodes),
                         self.rng.integers(1, 10) if len(self.inp.names) == 3 else 1]])
        self.inp.remove(*self._cols(old), time=self.t)
        self.inp.insert(*self._cols(new), time=self.t)
        self.edges = np.concatenate([self.edges, new])
        self.first += 1
        return _advance_and_time(self, 1)

    def track_ms_per_run(self, algo, loops):
        from scipy.sparse import csr_matrix
        from scipy.sparse.csgraph import dijkstra
        lat = [self._run() for _ in range(50)]
        live = self.edges[self.first:]
        # parallel edges: the lightest wins (csr_matrix would add them up)
        live = live[np.lexsort((live[:, 2], live[:, 1], live[:, 0]))]
        keep = np.ones(len(live), bool)
        keep[1:] = (live[1:, 0] != live[:-1, 0]) | (live[1:, 1] != live[:-1, 1])
        live = live[keep]
        g = csr_matrix((live[:, 2].astype(float), (live[:, 0], live[:, 1])),
                       shape=(self.nodes, self.nodes))
        dist = dijkstra(g, indices=self.roots, min_only=True)
        limit = self.bound if algo == "bounded" else np.inf
        want = {(int(v), int(d)) for v, d in enumerate(dist)
                if np.isfinite(d) and d <= limit}
        got = self.cap.at(self.t - 1)
        if set(zip(got.column(0).to_pylist(), got.column(1).to_pylist())) != want:
            raise RuntimeError(f"{algo} distances differ from scipy's")
        self.df.close()
        return float(np.median(lat) * 1e3)
    track_ms_per_run.unit = "ms"


class RootAffine(_RunOnce):
    """A filter and a map outside loops, into a count: ``filter(v > 500_000)`` then
    ``map((k, v + k))``, over 100,000 rows, then runs of B changes (each a row removed
    and one added, at its own time). Traced (``MapNode.affine``,
    ``FilterNode.affine``), both run in compiled code (``kernels.affine``); the
    ``callback`` variant writes the same logic with NumPy functions (``np.greater``,
    ``np.add``), which the tracer refuses, so the engine calls back into Python for
    each batch. The counts are checked against NumPy after the timed runs. Reported:
    median run latency in ms."""

    params = [["traced", "callback"], [1, 1000]]
    param_names = ["functions", "batch"]
    rows = 100_000

    def setup(self, functions, batch):
        self.rng = rng = np.random.default_rng(3)
        self.df = df = dd.Dataflow(engine="native")
        self.inp, c = df.new_input(["k", "v"])
        if functions == "traced":
            kept = c.filter(lambda k, v: v > 500_000).map(lambda k, v: (k, v + k),
                                                           names=["k", "v"])
        else:
            kept = c.filter(lambda k, v: np.greater(v, 500_000)).map(
                lambda k, v: (k, np.add(v, k)), names=["k", "v"])
        self.cap = kept.map(lambda k, v: v, names=["v"]).count().capture(
            auto_compact=True)
        self.live = np.stack([rng.integers(0, 1000, self.rows),
                              rng.integers(0, 1_000_000, self.rows)], axis=1)
        self.inp.insert(self.live[:, 0], self.live[:, 1], time=0)
        self.inp.advance_to(1)
        self.t = 1
        df.run()

    def _run(self, batch):
        out = np.arange(batch)          # the oldest rows go, random rows come
        gone = self.live[out]
        new = np.stack([self.rng.integers(0, 1000, batch),
                        self.rng.integers(0, 1_000_000, batch)], axis=1)
        ts = self.t + np.arange(batch)
        self.inp.update(np.concatenate([gone[:, 0], new[:, 0]]),
                        np.concatenate([gone[:, 1], new[:, 1]]),
                        time=np.concatenate([ts, ts]),
                        diff=np.concatenate([-np.ones(batch, np.int64),
                                             np.ones(batch, np.int64)]))
        self.live = np.concatenate([self.live[batch:], new])
        return _advance_and_time(self, batch)

    def track_ms_per_run(self, functions, batch):
        lat = [self._run(batch) for _ in range(40)]
        keep = self.live[self.live[:, 1] > 500_000]
        vals, counts = np.unique(keep[:, 1] + keep[:, 0], return_counts=True)
        got = self.cap.at(self.t - 1)
        if dict(zip(got.column(0).to_pylist(), got.column(1).to_pylist())) != \
                dict(zip(vals.tolist(), counts.tolist())):
            raise RuntimeError("RootAffine: the counts differ from NumPy's")
        self.df.close()
        return float(np.median(lat) * 1e3)
    track_ms_per_run.unit = "ms"

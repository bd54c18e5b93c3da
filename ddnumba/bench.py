"""The roadmap's reachability benchmark, outside asv: ``python -m ddnumba.bench reach``.

Workload (fixed, so every comparison uses the same stream): R=10 roots, N nodes,
M = 2N random directed edges (a multiset: duplicates and self-loops allowed), then a
sliding window of U changes; change ``j`` removes edge ``j`` (the oldest live one) and
adds edge ``M + j``, each change at its own distinct time. ``B`` changes are fed per
``run()``. Reported: changes/s, per-run latency percentiles, the arrangement record
count (state must not grow with the number of changes), and, in the same process, the
time of a from-scratch recompute (scipy breadth-first search from every root per run)
for comparison.

:class:`ReachSession` loads the graph once and then feeds the window in segments of any
batch size (the asv suites measure several batch sizes after one load of the 1e6-node
graph); :func:`run_reach` is one load and one segment. ``engine`` selects the
:class:`~ddnumba.Dataflow` engine (``None``: the Dataflow default, ``"auto"`` unless
``DDNUMBA_ENGINE`` says otherwise); the figures name the engine that actually ran.
The ``merged_per_change`` column counts rows read by trace (spine) merges per change:
maintenance work that, unlike the timings, does not vary with the machine's load;
``updates_per_change`` counts the updates all operators received per change (native
engine), so ``ns_per_update`` (median run time over those updates) is the engine's
cost per unit of work whatever the workload's size.

``--resolution batch`` gives the ``B`` changes of a run one common time instead of a
time each: the same graph changes at the resolution of whole batches. Comparing the
two shows what per-change times cost (their outputs are required: the reachable sets
after every single change).

``python -m ddnumba.bench profile --nodes N --batch B`` runs the same workload under
Linux ``perf`` and prints where the time goes by kernel (see :mod:`ddnumba.profiling`);
with ``--callers`` it also splits reference counting by the kernel that calls it, and
with ``--annotate KERNEL[,KERNEL...]`` it places the samples of those kernels on their
instructions.

``python -m ddnumba.bench tail --nodes N --batch B`` lists the slowest runs with the
updates all operators received in each and the rows spine merges read: whether a slow
run did more work or paid for something else (:func:`run_tail`).

``python -m ddnumba.bench ab --base REV`` compares two versions of the code on this
workload in one sitting, in alternating fresh processes (see :mod:`ddnumba.benchab`);
``pair`` compares two settings in one process (:mod:`ddnumba.benchpair`). ``floor``
counts the least corrections the workload asks of any differential engine against the
native engine's, ``sharing`` the key lookups one pass per round over a batch's
times would share, and ``memory`` times random loads by working-set size (see
:mod:`ddnumba.benchfloor`). ``targets`` measures the performance targets in one sitting
and prints each as met or missed (:mod:`ddnumba.benchtargets`). ``walks`` times the
loop's two key walks alone, in nanoseconds a row (:mod:`ddnumba.benchwalks`).
"""
from __future__ import annotations

import argparse
import gc
import os
import time

import numpy as np

import ddnumba as dd

__all__ = ["workload", "build_reach", "state_records", "spine_work", "operator_updates",
           "profile_reach", "ReachSession", "run_reach", "run_tail",
           "run_reach_sweep", "main"]

SEED = 20240601
ENGINES = ("auto", "native", "python")


def workload(n, u, *, roots=10, seed=SEED):
    """The benchmark stream: ``(src, dst, roots, new_src, new_dst)`` as in the issue."""
    m = 2 * n
    rng = np.random.default_rng(seed)
    src = rng.integers(0, n, m)
    dst = rng.integers(0, n, m)
    root_ids = rng.choice(n, roots, replace=False)
    new_src = rng.integers(0, n, u)
    new_dst = rng.integers(0, n, u)
    return src, dst, root_ids, new_src, new_dst


def build_reach(workers=1, engine=None, loops=None):
    """The roadmap's reachability program: pairs (root, node)."""
    df = dd.Dataflow(workers=workers, engine=engine, loops=loops)
    roots_in, roots = df.new_input(["root"])
    edges_in, edges = df.new_input(["src", "dst"])
    start = roots.map(lambda r: (r, r), names=["root", "node"])
    reach = start.iterate(
        lambda r: r.map(lambda root, node: (node, root), names=["node", "root"])
                   .join(edges)
                   .map(lambda node, root, dst: (root, dst), names=["root", "node"])
                   .concat(start)
                   .distinct(),
        name="reach")
    probe = reach.probe()
    counts = reach.count().capture()      # (root, reached nodes): a small output
    return df, roots_in, edges_in, probe, counts


def _all_nodes(df):
    from ddnumba.operators.iterate import LoopNode
    stack = list(df.root.nodes)
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, LoopNode):
            stack.extend(node.child.nodes)


def operator_updates(df):
    """Updates received by all operators so far (native engine; None otherwise)."""
    if df._native:
        return sum(row[2] for row in df._native.node_stats())
    return None


def spine_work(df):
    """``(merges, rows read by them)`` of the native engine's traces so far; None for
    the Python engine."""
    if df._native:
        return df._native.spine_work()
    return None


def state_records(df):
    """Updates held by every trace of the dataflow (arrangements and reduce outputs);
    with workers, those of the driver's shard (worker 0)."""
    if df._native:
        return df._native.state_records()
    total = 0
    for node in _all_nodes(df):
        for attr in ("spine", "out"):
            sp = getattr(node, attr, None)
            if sp is not None and hasattr(sp, "batches"):
                total += len(sp)
        if hasattr(node, "hashed_records"):
            total += node.hashed_records()
    return total


def _scratch_bfs(n, src, dst, roots):
    """From-scratch reachability size per root with scipy (the recompute baseline)."""
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import breadth_first_order
    g = csr_matrix((np.ones(len(src), np.int8), (src, dst)), shape=(n, n))
    return [len(breadth_first_order(g, int(r), return_predecessors=False)) for r in roots]


def _latency_figures(lat, batch):
    """Percentiles of the runs' latencies ``lat`` (s), ``changes_per_s`` (``batch`` over
    the median run: the figure the targets read) and ``mean_changes_per_s`` (all the
    changes over all the runs' time). The cost of a change is skewed (a few move many
    depths), so at small ``batch`` the median run leaves the costly changes out while
    a run of 1,000 holds its share of them: compare batch sizes by
    ``mean_changes_per_s`` (HISTORY, fifty-sixth session)."""
    if not len(lat):
        nan = float("nan")
        return {"p50_ms": nan, "p99_ms": nan, "max_ms": nan, "changes_per_s": nan,
                "mean_changes_per_s": nan}
    return {"p50_ms": float(np.median(lat) * 1e3),
            "p99_ms": float(np.percentile(lat, 99) * 1e3),
            "max_ms": float(lat.max() * 1e3),
            "changes_per_s": float(batch / np.median(lat)),
            "mean_changes_per_s": float(batch * len(lat) / lat.sum())}


class ReachSession:
    """The reachability dataflow over the workload's graph: :meth:`load` it once, then
    :meth:`feed` the sliding window in segments (each with its own batch size).

    ``capacity`` is the number of window changes the session can feed in total. Every
    ``COMPACT_EVERY`` changes fed, the capture of the counts is compacted to the last
    complete time (outside the timed runs), so its memory stays bounded over a long
    stream.
    """

    COMPACT_EVERY = 10_000

    def __init__(self, n, capacity, *, workers=1, engine=None, loops=None):
        src, dst, roots, new_src, new_dst = workload(n, capacity)
        self.loops = loops      # the native engine's loop mode (None: its default)
        self.n, self.capacity, self.workers = n, capacity, workers
        self.requested = engine or "default"
        self.m = len(src)
        self.src, self.dst, self.roots = src, dst, roots
        self.all_src = np.concatenate([src, new_src])
        self.all_dst = np.concatenate([dst, new_dst])
        (self.df, self.roots_in, self.edges_in, self.probe,
         self.counts) = build_reach(workers, engine, loops)
        self.pos = 0        # window changes fed so far
        self.t = 1          # the next change's time
        self.load_s = None
        self.records_after_load = None

    @property
    def engine(self):
        """The engine that runs the dataflow (known after :meth:`load`)."""
        return "native" if self.df._native else "python"

    def load(self):
        """Insert the graph and the roots at time 0 and run to the first complete
        answer; returns the seconds that took. The native runtime is compiled (or
        loaded from Numba's cache) first, untimed: a machine's first use compiles it
        for minutes, which is not the load."""
        self.df.prepare()
        t0 = time.perf_counter()
        self.edges_in.insert(self.src, self.dst, time=0)
        self.roots_in.insert(self.roots, time=0)
        self.edges_in.advance_to(1)
        self.roots_in.advance_to(1)
        self.df.run()
        self.load_s = time.perf_counter() - t0
        self.records_after_load = state_records(self.df)
        return self.load_s

    def feed(self, batch, changes, *, progress=False, checkpoints=(), resolution="record",
             per_run=False, gate=None):
        """Feed the next ``changes`` window changes, ``batch`` per ``run()``, each at
        its own time (``resolution="batch"``: the changes of a run at one time;
        ``changes`` is rounded down to whole batches).

        Returns figures of this segment: ``latencies`` (s per run), percentiles,
        ``changes_per_s`` (batch / median latency), ``mean_changes_per_s`` (changes /
        the runs' total time), ``records_end``, and ``marks``:
        ``{changes done: (latencies of the last <= 1000 runs, state records)}`` at each
        of ``checkpoints`` (counted within this segment). ``per_run=True`` (native
        engine) adds ``per_run``: ``{"updates": ..., "merged_rows": ...}``, per run the
        updates all operators received and the rows spine merges read, counted after
        the run's timing. ``gate``: called with ``True`` right before each timed run
        and with ``False`` right after it (``bench profile`` records only between).
        """
        if resolution not in ("record", "batch"):
            raise ValueError(f"ReachSession.feed: resolution must be 'record' or 'batch', "
                             f"not {resolution!r}")
        steps = changes // batch
        if self.pos + steps * batch > self.capacity:
            raise ValueError(f"ReachSession.feed: {steps * batch} more changes exceed the "
                             f"session's capacity ({self.capacity}, {self.pos} fed)")
        m, all_src, all_dst = self.m, self.all_src, self.all_dst
        edges_in, roots_in, df = self.edges_in, self.roots_in, self.df
        checkpoints = set(checkpoints)
        lat = np.empty(steps)
        marks = {}
        t = self.t
        base = self.pos
        ones = np.ones(batch, np.int64)
        work0 = spine_work(df)
        upd0 = operator_updates(df)
        same = resolution == "batch"
        track = per_run and upd0 is not None
        if track:
            run_upd = np.zeros(steps, np.int64)
            run_merged = np.zeros(steps, np.int64)
            prev_upd, prev_merged = upd0, work0[1]
        steps_it = range(steps)
        if progress:
            try:
                from tqdm import tqdm
                steps_it = tqdm(steps_it, desc=f"N={self.n} B={batch} {self.engine}",
                                unit="run")
            except ImportError:  # pragma: no cover
                pass
        for s in steps_it:
            j = np.arange(base + s * batch, base + (s + 1) * batch)
            times = np.full(batch, t) if same else t + np.arange(batch)
            if gate is not None:
                gate(True)
            a = time.perf_counter()
            edges_in.update(np.concatenate([all_src[j], all_src[m + j]]),
                            np.concatenate([all_dst[j], all_dst[m + j]]),
                            time=np.concatenate([times, times]),
                            diff=np.concatenate([-ones, ones]))
            t += batch
            edges_in.advance_to(t)
            roots_in.advance_to(t)
            df.run()
            lat[s] = time.perf_counter() - a
            if gate is not None:
                gate(False)
            if track:
                u, w = operator_updates(df), spine_work(df)[1]
                run_upd[s], run_merged[s] = u - prev_upd, w - prev_merged
                prev_upd, prev_merged = u, w
            done = (s + 1) * batch
            if done in checkpoints:
                marks[done] = (lat[max(0, s + 1 - 1000): s + 1].copy(), state_records(df))
            if (base + done) // self.COMPACT_EVERY != (base + done - batch) // self.COMPACT_EVERY:
                # Outside the timed region, as a user's job on an endless stream would:
                # the count capture keeps the counts at t - 1 and nothing before.
                self.counts.compact(t - 1)
        self.t = t
        self.pos = base + steps * batch
        loops = "-"
        if df._native:
            loops = "sequential" if any(df._native.sequential) else "rounds"
        out = {"n": self.n, "batch": batch, "workers": self.workers,
               "requested": self.requested, "engine": self.engine, "loops": loops,
               "resolution": resolution,
               "changes": steps * batch, "load_s": self.load_s,
               "records_after_load": self.records_after_load,
               "records_end": state_records(df)}
        work1 = spine_work(df)
        # trace maintenance: rows read by spine merges per change (native engine)
        out["merged_per_change"] = (None if work0 is None or not steps else
                                    (work1[1] - work0[1]) / (steps * batch))
        out.update(_latency_figures(lat, batch))
        upd1 = operator_updates(df)
        out["updates_per_change"] = (None if upd0 is None or not steps else
                                     (upd1 - upd0) / (steps * batch))
        out["ns_per_update"] = (None if not out["updates_per_change"] else
                                out["p50_ms"] * 1e6 / (batch * out["updates_per_change"]))
        out["latencies"] = lat
        out["marks"] = marks
        if track:
            out["per_run"] = {"updates": run_upd, "merged_rows": run_merged}
        return out

    def recompute(self):
        """Median time of a from-scratch recompute of the current graph (scipy BFS from
        every root), and whether the dataflow's answer equals it."""
        live_src = self.all_src[self.pos: self.m + self.pos]
        live_dst = self.all_dst[self.pos: self.m + self.pos]
        samples = []
        for _ in range(3):
            a = time.perf_counter()
            sizes = _scratch_bfs(self.n, live_src, live_dst, self.roots)
            samples.append(time.perf_counter() - a)
        got = dict(zip(*[c.to_pylist() for c in self.counts.at(self.t - 1).columns[:2]]))
        check = all(got.get(int(r)) == sz for r, sz in zip(self.roots, sizes))
        return float(np.median(samples) * 1e3), check

    def close(self):
        # Operator nodes reference each other (consumers and inputs): free the whole
        # graph now, before the next configuration builds its own (at N=1e6 each holds
        # GBs).
        if self.df is not None:
            self.df.close()
        self.df = self.roots_in = self.edges_in = self.probe = self.counts = None
        gc.collect()


def run_reach(n, batch, changes, *, recompute=True, progress=False, checkpoints=(),
              workers=1, engine=None, resolution="record", loops=None):
    """Run the workload (one load, ``changes`` changes ``batch`` per run); returns a
    dict of figures (see module docstring and :meth:`ReachSession.feed`)."""
    session = ReachSession(n, changes, workers=workers, engine=engine, loops=loops)
    try:
        session.load()
        out = session.feed(batch, changes, progress=progress, checkpoints=checkpoints,
                           resolution=resolution)
        if recompute:
            out["recompute_ms"], out["check"] = session.recompute()
    finally:
        session.close()
    return out


def run_tail(n, batch, changes, *, warm=None, top=10, engine="native", loops=None):
    """Where a run's latency comes from: load the ``n``-node graph, feed ``warm``
    changes (default: ``changes``), then ``changes`` more, ``batch`` per run, counting
    per run the updates all operators received and the rows spine merges read (native
    engine). Returns a dict: ``p50_ms``, ``p99_ms``, ``max_ms``, ``median_updates``,
    ``ns_per_update`` (median over runs), ``corr`` (Pearson correlation of latency
    and updates over the runs), ``slowest``: the ``top`` slowest runs as ``(run,
    ms, updates, ns per update, merged rows)``, and ``check`` (the answer against a
    scipy BFS)."""
    warm = changes if warm is None else warm
    session = ReachSession(n, warm + changes, engine=engine, loops=loops)
    try:
        session.load()
        if not session.df._native:
            raise ValueError("tail: per-run counts need the native engine")
        if warm:
            session.feed(batch, warm)
        out = session.feed(batch, changes, per_run=True)
        _, check = session.recompute()
    finally:
        session.close()
    lat = out["latencies"]
    upd = out["per_run"]["updates"]
    merged = out["per_run"]["merged_rows"]
    ns = lat * 1e9 / np.maximum(upd, 1)
    order = np.argsort(-lat, kind="stable")[:top]
    corr = float(np.corrcoef(lat, upd)[0, 1]) if len(lat) > 1 and upd.std() > 0 else None
    return {"n": n, "batch": batch, "runs": len(lat),
            "p50_ms": float(np.median(lat) * 1e3),
            "p99_ms": float(np.percentile(lat, 99) * 1e3),
            "max_ms": float(lat.max() * 1e3),
            "median_updates": float(np.median(upd)),
            "ns_per_update": float(np.median(ns)), "corr": corr,
            "slowest": [(int(i), float(lat[i] * 1e3), int(upd[i]), float(ns[i]),
                         int(merged[i])) for i in order],
            "per_run": out["per_run"], "latencies": lat, "check": check}


def run_reach_sweep(n, segments, *, workers=1, engine=None, progress=False):
    """One load of the ``n``-node graph, then one segment per ``(batch, changes)`` of
    ``segments``, in order, continuing the same window. Returns one figures dict per
    segment (all carrying the single load's ``load_s``)."""
    segments = list(segments)
    session = ReachSession(n, sum(c - c % b for b, c in segments), workers=workers,
                           engine=engine)
    try:
        session.load()
        return [session.feed(b, c, progress=progress) for b, c in segments]
    finally:
        session.close()


class _PerfGate:
    """Enables and disables a ``perf record`` started with ``-D -1`` and
    ``--control=fifo:ctl,ack``: ``gate(True)`` / ``gate(False)`` send ``enable`` /
    ``disable`` and wait for perf's ``ack``. Raises SystemExit when perf exits or does
    not answer within ``timeout`` seconds (never hangs on a dead perf)."""

    def __init__(self, rec, ctl, ack, timeout=20.0):
        import select
        self._rec, self._timeout, self._select = rec, timeout, select.select
        end = time.monotonic() + timeout
        self._ack = os.open(ack, os.O_RDONLY | os.O_NONBLOCK)
        while True:             # a fifo opens for writing once perf has it open
            try:
                self._ctl = os.open(ctl, os.O_WRONLY | os.O_NONBLOCK)
                break
            except OSError:
                self._check(end)
                time.sleep(0.01)
        self._pending = b""

    def _check(self, end):
        if self._rec.poll() is not None:
            raise SystemExit("profile: perf record failed: "
                             f"{self._rec.stderr.read().decode()}")
        if time.monotonic() > end:
            raise SystemExit("profile: perf record did not answer on its control fifo")

    def __call__(self, on):
        os.write(self._ctl, b"enable\n" if on else b"disable\n")
        end = time.monotonic() + self._timeout
        while b"\n" not in self._pending:
            ready, _, _ = self._select([self._ack], [], [], 0.5)
            got = b""
            if ready:
                try:
                    got = os.read(self._ack, 64)
                except BlockingIOError:
                    pass
            if ready and not got:
                # end of file: perf has not opened the fifo yet (or has closed it);
                # select reports that at once, so wait a little instead of spinning
                time.sleep(0.001)
            self._pending += got
            self._check(end)
        self._pending = self._pending.split(b"\n", 1)[1]

    def close(self):
        for fd in (self._ctl, self._ack):
            os.close(fd)


def profile_reach(n, batch, changes, *, out="reach.perf.data", top=25, engine=None,
                  callers=False, loops=None, annotate=()):
    """Load the ``n``-node graph, then record ``changes`` changes (``batch`` per run)
    with Linux ``perf`` attached to this process, named through a perf map of the
    compiled kernels (:mod:`ddnumba.profiling`). Returns ``(figures, top symbols)``.

    ``callers``: also save each sample's top stack words (``--call-graph dwarf``) and
    attribute reference counting to its callers; ``figures["refcount"]`` is then
    ``(share of all samples, [(percent, samples, caller)])`` (see
    :func:`ddnumba.profiling.refcount_callers`).

    ``annotate``: names of compiled functions (e.g. ``"_reduce_keys"``, matched as in
    :func:`ddnumba.profiling.capture_code`; a name that matches nothing raises
    SystemExit before the recording) whose samples are placed on their instructions;
    ``figures["annotate"]`` is then ``[Annotation]`` (full listings written to
    ``<out>.<name>.annotated.txt``, see :func:`ddnumba.profiling.annotate`), or a
    message saying why the code cannot be disassembled here. Needs the functions
    compiled in this process (an empty ``NUMBA_CACHE_DIR``), as their names do."""
    import shutil
    import signal
    import subprocess
    import tempfile

    from .profiling import (annotate as annotate_code, capture_code, perf_top,
                            refcount_callers, write_perf_map)

    perf = shutil.which("perf")
    if perf is None:
        raise SystemExit("profile: the perf command is not installed")
    session = ReachSession(n, changes + batch, engine=engine, loops=loops)
    frozen = False
    try:
        session.load()
        session.feed(batch, batch)          # everything the runs use is compiled now
        map_path = write_perf_map()
        # the machine code lives in this process: copy it while it is alive
        codes = capture_code(map_path, annotate) if annotate else []
        # Compiling in this process leaves millions of Python objects behind, and the
        # cyclic collector's full passes over them landed in the recording (17% of
        # the samples of an N=1,000 run, in gc_collect_main): a process using cached
        # kernels never pays them. Collect once (after the names above are read: the
        # collection frees the compiler's records of them), then keep what is left
        # out of its passes.
        gc.collect()
        gc.freeze()
        frozen = True
        # (1 KiB of stack per sample holds the words refcount_callers scans)
        graph = ["--call-graph", "dwarf,1024"] if callers else []
        # Events start disabled and are enabled around each timed run only (through
        # perf's control fifo), so that the harness's Python between runs (making the
        # changes, compacting the count capture, the progress bar) is not recorded.
        fifo_dir = tempfile.mkdtemp(prefix="ddnumba-perf-")
        ctl, ack = os.path.join(fifo_dir, "ctl"), os.path.join(fifo_dir, "ack")
        os.mkfifo(ctl)
        os.mkfifo(ack)
        rec = subprocess.Popen([perf, "record", "-F", "999", *graph, "-D", "-1",
                                f"--control=fifo:{ctl},{ack}", "-p", str(os.getpid()),
                                "-o", out], stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE)
        gate = None
        try:
            gate = _PerfGate(rec, ctl, ack)
            figures = session.feed(batch, changes, progress=True, gate=gate)
        finally:
            if gate is not None:
                gate.close()
            rec.send_signal(signal.SIGINT)
            rec.wait()
            shutil.rmtree(fifo_dir, ignore_errors=True)
    finally:
        if frozen:
            gc.unfreeze()
        session.close()
    if callers:
        with subprocess.Popen([perf, "report", "-D", "-i", out], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True,
                              errors="replace") as rep:
            figures["refcount"] = refcount_callers(rep.stdout, map_path, top=top)
    if annotate:
        try:
            figures["annotate"] = annotate_code(out, codes, out_prefix=out,
                                                map_path=map_path)
        except RuntimeError as e:       # no objdump, or not x86-64: the rest stands
            figures["annotate"] = str(e)
    return figures, perf_top(out, top)


def _table(rows):
    cols = ["n", "batch", "resolution", "workers", "engine", "loops", "changes", "load_s",
            "changes_per_s", "mean_changes_per_s", "p50_ms", "p99_ms", "max_ms",
            "recompute_ms", "ratio", "records_after_load", "records_end",
            "merged_per_change", "updates_per_change", "ns_per_update", "check"]
    print(" ".join(f"{c:>14}" for c in cols))
    for r in rows:
        r = dict(r)
        if "recompute_ms" in r:
            # >1: the incremental update of one batch beats recomputing from scratch.
            r["ratio"] = r["recompute_ms"] / r["p50_ms"]
        r["engine"] = _ran(r)
        vals = []
        for c in cols:
            v = r.get(c, "")
            vals.append(f"{v:>14.3f}" if isinstance(v, float) else f"{v!s:>14}")
        print(" ".join(vals))


def _ran(r):
    """The engine label of a row: the one requested, and the one that ran if other."""
    if r["requested"] == r["engine"]:
        return r["engine"]
    return f"{r['requested']}:{r['engine']}"


def _ratio_lines(rows, engines, workers):
    """Throughput comparisons printed after the table."""
    if len(workers) > 1:
        for e in engines:
            base = {(r["n"], r["batch"]): r["changes_per_s"] for r in rows
                    if r["workers"] == 1 and r["requested"] == e}
            for r in rows:
                key = (r["n"], r["batch"])
                if r["workers"] > 1 and r["requested"] == e and key in base:
                    tag = f" engine={e}" if len(engines) > 1 else ""
                    print(f"N={r['n']} B={r['batch']}{tag}: W={r['workers']} speedup "
                          f"{r['changes_per_s'] / base[key]:.2f}x over "
                          f"W=1, {r['changes_per_s'] / r['workers']:.0f} changes/s per "
                          f"worker")
        if len(engines) > 1:
            # Workers run the Python engine: set each W > 1 against one process of
            # every other engine ("--workers 1 2 --engine native python": is it worth
            # using workers rather than one native process?).
            one = [r for r in rows if r["workers"] == 1]
            for r in rows:
                if r["workers"] == 1:
                    continue
                for r1 in one:
                    if (r1["n"], r1["batch"]) == (r["n"], r["batch"]) and \
                            r1["requested"] != r["requested"]:
                        print(f"N={r['n']} B={r['batch']}: W={r['workers']} {_ran(r)} "
                              f"{r['changes_per_s']:.0f} changes/s, W=1 {_ran(r1)} "
                              f"{r1['changes_per_s']:.0f} changes/s: ratio "
                              f"{r['changes_per_s'] / r1['changes_per_s']:.2f}x")
    if len(engines) > 1:
        # The first engine given is the reference: "--engine native python" prints
        # native/python changes/s (> 1: native is faster), per N, B and W.
        by = {(r["n"], r["batch"], r["workers"], r["requested"]): r for r in rows}
        e0 = engines[0]
        for r0 in rows:
            if r0["requested"] != e0:
                continue
            key = (r0["n"], r0["batch"], r0["workers"])
            for e in engines[1:]:
                r = by.get(key + (e,))
                if r is None:
                    continue
                print(f"N={key[0]} B={key[1]} W={key[2]}: {_ran(r0)} "
                      f"{r0['changes_per_s']:.0f} changes/s, {_ran(r)} "
                      f"{r['changes_per_s']:.0f} changes/s: ratio {e0}/{e} "
                      f"{r0['changes_per_s'] / r['changes_per_s']:.2f}x")


def _plot(rows, path, several_engines):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6, 4))
    for row in rows:
        lat = np.sort(row["latencies"]) * 1e3
        label = f"N={row['n']} B={row['batch']}"
        if row["workers"] > 1:
            label += f" W={row['workers']}"
        if several_engines:
            label += f" {row['engine']}"
        ax.plot(lat, np.arange(1, len(lat) + 1) / max(len(lat), 1), label=label)
    ax.set_xscale("log")
    ax.set_xlabel("latency per run (ms)")
    ax.set_ylabel("fraction of runs")
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print(f"wrote {path}")


def _check_args(p, args):
    """Refuse nonsense sizes with argparse's one-line error (exit status 2) before any
    work, rather than a NumPy traceback or a silent empty row part-way."""
    import math
    import os

    def ints(name):
        v = getattr(args, name, None)
        v = [] if v is None else (v if isinstance(v, list) else [v])
        return [x for x in v if isinstance(x, int)]     # (reach's --resolution: words)

    cmd = args.cmd
    if cmd in ("ab", "pair", "targets"):
        checked = ()            # (they check their own arguments)
    elif cmd == "sharing":
        checked = ("nodes", "changes")      # (its --batch is checked by it)
    elif cmd == "floor":
        checked = ("nodes", "changes")      # (and its --resolution)
    elif cmd == "walks":
        checked = ("nodes", "width", "rows", "repeat")
    else:
        checked = ("nodes", "batch", "workers", "top", "steps", "changes", "warm",
                   "mib", "plot")
    if "nodes" in checked:
        for n in ints("nodes"):
            if n < 10:
                p.error(f"{cmd}: --nodes must be at least 10 (the workload has 10 "
                        f"roots), got {n}")
    for name in ("batch", "workers", "top", "steps", "width", "rows", "repeat"):
        if name not in checked:
            continue
        for v in ints(name):
            if v < 1:
                p.error(f"{cmd}: --{name} must be at least 1, got {v}")
    for name in ("changes", "warm"):
        if name not in checked:
            continue
        for v in ints(name):
            if v < 0 or (v == 0 and name == "changes"):
                p.error(f"{cmd}: --{name} must be positive, got {v}")
    if cmd == "reach" and args.changes is not None:
        small = [b for b in args.batch if b > args.changes]
        if small:
            p.error(f"reach: --changes {args.changes} is less than one run of --batch "
                    f"{small[0]}")
    for v in getattr(args, "mib", None) or []:
        if not (math.isfinite(v) and v > 0):
            p.error(f"{cmd}: --mib must be a positive size, got {v}")
    touch = getattr(args, "touch", None) if cmd == "memory" else None
    if touch is not None and not (math.isfinite(touch) and touch >= 0):
        p.error(f"{cmd}: --touch must be a size in MiB (0: none), got {touch}")
    plot = getattr(args, "plot", None)
    if plot and not os.path.isdir(os.path.dirname(os.path.abspath(plot))):
        p.error(f"{cmd}: --plot {plot}: no such directory")


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m ddnumba.bench",
                                description="The roadmap reachability benchmark.")
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("reach", help="sliding-window reachability")
    r.add_argument("--nodes", type=int, nargs="+", default=[1000])
    r.add_argument("--batch", type=int, nargs="+", default=[1, 10, 100, 1000])
    r.add_argument("--changes", type=int, default=None,
                   help="changes per configuration (default: max(20 * B, 200))")
    r.add_argument("--workers", type=int, nargs="+", default=[1],
                   help="worker processes (several values: compared in one process)")
    r.add_argument("--engine", nargs="+", choices=ENGINES, default=None,
                   help="Dataflow engine (default: the Dataflow default, 'auto' unless "
                        "DDNUMBA_ENGINE is set); several values are compared in one "
                        "process, the first is the reference of the ratio lines")
    r.add_argument("--no-recompute", action="store_true")
    r.add_argument("--resolution", choices=("record", "batch"), default="record",
                   help="record (default): every change at its own time; batch: the "
                        "changes of a run at one time (what per-change times cost)")
    r.add_argument("--loops", nargs="+", choices=("rounds", "sequential"), default=None,
                   help="the native engine's loop mode (default: its default, 'sequential' "
                        "unless DDNUMBA_LOOPS is set); several values are compared in "
                        "one process")
    r.add_argument("--plot", default=None, help="write a latency CDF PNG here")
    pr = sub.add_parser("profile", help="where the time goes: the workload under perf")
    pr.add_argument("--nodes", type=int, default=1000)
    pr.add_argument("--batch", type=int, default=1000)
    pr.add_argument("--changes", type=int, default=None,
                    help="changes recorded (default: max(20 * B, 200))")
    pr.add_argument("--out", default="reach.perf.data", help="perf data file")
    pr.add_argument("--top", type=int, default=25)
    pr.add_argument("--callers", action="store_true",
                    help="also attribute reference counting (NRT_incref/NRT_decref) to "
                         "the kernels that call it (records stack words: larger data)")
    pr.add_argument("--loops", choices=("rounds", "sequential"), default=None,
                    help="the native engine's loop mode")
    pr.add_argument("--cached", action="store_true",
                    help="use Numba's on-disk cache (faster start, but helpers inside "
                         "cached kernels get no names, so their samples are counted "
                         "under a neighbouring symbol)")
    pr.add_argument("--annotate", metavar="KERNEL[,KERNEL...]", default=None,
                    help="also place the samples of these compiled functions on their "
                         "instructions (names match the end of a symbol, e.g. "
                         "_reduce_keys or seqloop._reduce_keys): prints the hottest "
                         "instructions with context and writes the full listing to "
                         "<out>.<KERNEL>.annotated.txt (needs objdump, x86-64)")
    tl = sub.add_parser("tail", help="the slowest runs and the work they did")
    tl.add_argument("--nodes", type=int, default=1000)
    tl.add_argument("--batch", type=int, default=1)
    tl.add_argument("--changes", type=int, default=3000)
    tl.add_argument("--warm", type=int, default=None,
                    help="changes fed before the recorded ones (default: --changes)")
    tl.add_argument("--top", type=int, default=10)
    tl.add_argument("--loops", choices=("rounds", "sequential"), default=None)
    from . import benchab, benchfloor, benchpair, benchtargets, benchwalks
    benchab.add_parser(sub)
    benchpair.add_parser(sub)
    benchfloor.add_parser(sub)
    benchtargets.add_parser(sub)
    benchwalks.add_parser(sub)
    args = p.parse_args(argv)
    _check_args(p, args)
    if args.cmd == "targets":
        benchtargets.main(args)
        return
    if args.cmd in ("floor", "sharing", "memory"):
        benchfloor.main(args)
        return
    if args.cmd == "walks":
        benchwalks.main(args)
        return
    if args.cmd == "ab":
        benchab.main(args)
        return
    if args.cmd == "pair":
        benchpair.main(args)
        return
    if args.cmd == "tail":
        if args.changes < args.batch:
            p.error("tail: --changes must be at least --batch")
        r = run_tail(args.nodes, args.batch, args.changes, warm=args.warm, top=args.top,
                     loops=args.loops)
        corr = "-" if r["corr"] is None else f"{r['corr']:.2f}"
        print(f"N={r['n']} B={r['batch']}: {r['runs']} runs, p50 {r['p50_ms']:.3f} ms, "
              f"p99 {r['p99_ms']:.3f} ms, max {r['max_ms']:.2f} ms; median run "
              f"{r['median_updates']:.0f} updates at {r['ns_per_update']:.0f} ns each; "
              f"latency/updates correlation {corr}; answer "
              f"{'matches' if r['check'] else 'DIFFERS FROM'} BFS")
        print(f"{'run':>6} {'ms':>9} {'updates':>10} {'ns/update':>10} {'merged rows':>12}")
        for i, ms, u, ns, mr in r["slowest"]:
            print(f"{i:6d} {ms:9.3f} {u:10d} {ns:10.0f} {mr:12d}")
        if not r["check"]:
            raise SystemExit(1)
        return
    annotate = []
    if args.cmd == "profile" and args.annotate is not None:
        annotate = [k.strip() for k in args.annotate.split(",") if k.strip()]
        if not annotate:
            p.error("profile: --annotate needs at least one function name")
        if args.cached:
            # code loaded from the cache names only its entry points: a helper cannot
            # be found, and an entry point's extent runs over its unnamed helpers
            p.error("profile: --annotate needs the kernels compiled afresh in the "
                    "process (their functions' names and extents); drop --cached")
    if args.cmd == "profile" and not args.cached and not os.environ.get("_DDNUMBA_FRESH"):
        # Named helpers need code compiled in this process: rerun with an empty cache
        # (the kernels compile afresh, a few minutes).
        import subprocess
        import sys
        import tempfile
        with tempfile.TemporaryDirectory(prefix="ddnumba-profile-") as tmp:
            # (no compile helper: code it compiles reaches this process via the cache)
            env = dict(os.environ, NUMBA_CACHE_DIR=tmp, _DDNUMBA_FRESH="1",
                       DDNUMBA_COMPILE_HELPER="0")
            print("profile: compiling the kernels afresh so that perf can name them "
                  "(a few minutes; --cached skips this)", flush=True)
            raise SystemExit(subprocess.call(
                [sys.executable, "-m", "ddnumba.bench"] + list(argv or sys.argv[1:]),
                env=env))
    if args.cmd == "profile":
        fig, rows = profile_reach(args.nodes, args.batch,
                                  args.changes or max(20 * args.batch, 200),
                                  out=args.out, top=args.top, callers=args.callers,
                                  loops=args.loops, annotate=annotate)
        print(f"N={args.nodes} B={args.batch}: {fig['changes_per_s']:.0f} changes/s, "
              f"p50 {fig['p50_ms']:.2f} ms (perf attached); perf data: {args.out}")
        print(f"{'share':>7} {'samples':>8}  symbol")
        for pct, cnt, name in rows:
            print(f"{pct:6.2f}% {cnt:8d}  {name}")
        if "refcount" in fig:
            share, callers = fig["refcount"]
            print(f"reference counting: {share:.2f}% of all samples, by caller:")
            for pct, cnt, name in callers:
                print(f"{pct:6.2f}% {cnt:8d}  {name}")
        ann = fig.get("annotate", [])
        if isinstance(ann, str):        # why the code cannot be disassembled here
            print(f"profile --annotate: {ann}")
            ann = []
        for a in ann:
            print()
            print(a.summary(top=15), end="")
        return
    engines = list(dict.fromkeys(args.engine)) if args.engine else [None]
    rows = []
    for n in args.nodes:
        for b in args.batch:
            changes = args.changes or max(20 * b, 200)
            for w in args.workers:
                for e in engines:
                    if w > 1 and e == "native":
                        print(f"N={n} B={b} W={w}: skipped engine=native (the native "
                              f"engine runs one worker)")
                        continue
                    for lm in args.loops or [None]:
                        rows.append(run_reach(n, b, changes,
                                              recompute=not args.no_recompute,
                                              progress=True, workers=w, engine=e,
                                              resolution=args.resolution, loops=lm))
    _table(rows)
    _ratio_lines(rows, [e or "default" for e in engines], args.workers)
    if args.loops and len(args.loops) > 1:
        by = {}
        for r in rows:
            by.setdefault((r["n"], r["batch"], r["workers"], r["requested"]),
                          {})[r["loops"]] = r
        for (n, b, _, _), d in by.items():
            if "rounds" in d and "sequential" in d:
                s_, r_ = d["sequential"], d["rounds"]
                print(f"N={n} B={b}: sequential loops {s_['changes_per_s']:.0f} changes/s "
                      f"(p50 {s_['p50_ms']:.3f} ms), round-wise "
                      f"{r_['changes_per_s']:.0f} (p50 {r_['p50_ms']:.3f} ms): ratio "
                      f"{s_['changes_per_s'] / r_['changes_per_s']:.2f}x")
    if args.plot:
        _plot(rows, args.plot, len(engines) > 1)


if __name__ == "__main__":
    main()

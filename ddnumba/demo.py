"""The end-to-end demo: Spark produces a changing graph, ddnumba keeps answers current.

The workload is the differential-dataflow roadmap's reachability benchmark, with Spark
as the upstream pipeline and the referee:

1. **Spark generates** a random directed graph (``N`` nodes, ``M`` edges, ``R`` roots)
   and a stream of ``C`` edge changes: a sliding window that, at time ``i``, removes the
   oldest edge and adds a random one. It exports the stream as Parquet change batches,
   one directory per batch of ``B`` times (``batch=0/`` holds the initial graph at time
   0), each row ``(src, dst, time, diff)``.
2. **ddnumba reads** the batches in time order and maintains two outputs: reachability
   ``(root, node)`` (an iterative computation) and out-degree ``(src, count)``. Each
   change keeps its own time; each batch of ``B`` changes is one ``run()``, whose wall
   time is that batch's latency. After every run, the changes it made to each output
   are appended to that output's Parquet dataset as one part file
   (``write_changes(out, dir, new=True)``), outside the timed run.
3. **Spark checks** the final answer computed from scratch: it accumulates the change
   stream into the final graph, computes out-degrees with ``groupBy`` and reachability
   by a breadth-first search (the final edge list is collected to the driver; the BFS is
   plain NumPy, independent of ddnumba), reads ddnumba's output back and compares.

It prints the sizes chosen, match or MISMATCH, a summary (updates, changes/s, latency
percentiles) and writes ``latency_cdf.png`` (latency CDF, as in the roadmap's figures)
and ``summary.json`` beside the Parquet data in the output directory::

    OUT/input/roots/, OUT/input/edges/batch=K/   the change batches Spark exported
    OUT/output/reachability/, OUT/output/out_degree/   ddnumba's output changes
    OUT/latency_cdf.png, OUT/summary.json
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import time as _time
from dataclasses import asdict, dataclass, field

import numpy as np

__all__ = ["DemoConfig", "run_demo", "bfs_reachable"]


@dataclass
class DemoConfig:
    """Sizes of the demo (defaults: 20-30 s on two cores once compiled, most of it Spark)."""

    nodes: int = 2_000
    edges: int | None = None          # default: 2 * nodes
    roots: int = 10
    changes: int = 2_000
    batch: int = 100
    out: str = "./ddnumba-demo-out"
    seed: int = 0
    progress: bool = True

    def resolved(self):
        c = DemoConfig(**asdict(self))
        if c.edges is None:
            c.edges = 2 * c.nodes
        for name in ("nodes", "edges", "roots", "batch"):
            if getattr(c, name) < 1:
                raise ValueError(f"demo: --{name} must be >= 1, got {getattr(c, name)}")
        if c.changes < 0:
            raise ValueError(f"demo: --changes must be >= 0, got {c.changes}")
        if c.roots > c.nodes:
            raise ValueError(f"demo: --roots ({c.roots}) exceeds --nodes ({c.nodes})")
        return c


@dataclass
class DemoResult:
    config: dict
    match: bool
    checks: dict = field(default_factory=dict)
    timings: dict = field(default_factory=dict)
    latencies: list = field(default_factory=list)
    stats: dict = field(default_factory=dict)


# --------------------------------------------------------------------------- reference
def bfs_reachable(src, dst, roots, n_nodes):
    """``(root, node)`` pairs reachable by directed paths, by level-synchronous BFS.

    A NumPy reference independent of the engine: per root, the frontier's out-edges are
    gathered from a CSR index each level. Returns two int64 arrays sorted by (root, node).
    """
    src = np.asarray(src, np.int64)
    dst = np.asarray(dst, np.int64)
    order = np.argsort(src, kind="stable")
    nbr = dst[order]
    start = np.searchsorted(src[order], np.arange(n_nodes + 1))
    out_r, out_n = [], []
    for r in np.unique(np.asarray(roots, np.int64)):
        seen = np.zeros(n_nodes, bool)
        seen[r] = True
        frontier = np.array([r], np.int64)
        while frontier.size:
            lo, hi = start[frontier], start[frontier + 1]
            counts = hi - lo
            if counts.sum() == 0:
                break
            # Positions of every out-edge of the frontier, without a Python loop per node.
            idx = np.repeat(lo - np.cumsum(counts) + counts, counts) + np.arange(counts.sum())
            nxt = np.unique(nbr[idx])
            nxt = nxt[~seen[nxt]]
            seen[nxt] = True
            frontier = nxt
        nodes = np.flatnonzero(seen)
        out_r.append(np.full(nodes.size, r, np.int64))
        out_n.append(nodes.astype(np.int64))
    if not out_r:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    return np.concatenate(out_r), np.concatenate(out_n)


def _percentiles(lat):
    if not len(lat):
        return {k: float("nan") for k in ("p50", "p90", "p99", "max")}
    a = np.asarray(lat)
    return {"p50": float(np.percentile(a, 50)), "p90": float(np.percentile(a, 90)),
            "p99": float(np.percentile(a, 99)), "max": float(a.max())}


# --------------------------------------------------------------------------- phases
def _export_with_spark(spark, cfg, in_dir):
    """Generate the graph and its change stream in Spark; write them as batches."""
    from pyspark.sql import functions as F

    from ddnumba.io.spark import as_changes, export_changes
    n, m, c, b = cfg.nodes, cfg.edges, cfg.changes, cfg.batch
    # Edge i (i < M is the initial graph, i >= M the i-M+1'th added edge): endpoints from
    # a hash of (seed, i), so the graph does not depend on Spark's partitioning.
    ids = spark.range(m + c)
    edges = ids.select(
        F.col("id"),
        F.pmod(F.xxhash64(F.lit(cfg.seed), F.lit("src"), F.col("id")), F.lit(n)).alias("src"),
        F.pmod(F.xxhash64(F.lit(cfg.seed), F.lit("dst"), F.col("id")), F.lit(n)).alias("dst"))
    initial = as_changes(edges.filter(F.col("id") < m), time=0, diff=1)
    # Sliding window: at time t = 1..C, remove edge t-1 (the oldest) and add edge M+t-1.
    removed = as_changes(edges.filter(F.col("id") < c), time=F.col("id") + 1, diff=-1)
    added = as_changes(edges.filter(F.col("id") >= m), time=F.col("id") - m + 1, diff=1)
    stream = initial.unionByName(removed).unionByName(added)
    stream = stream.withColumn(
        "batch", F.when(F.col("time") == 0, F.lit(0))
                  .otherwise(F.floor((F.col("time") - 1) / F.lit(b)) + 1).cast("long"))
    export_changes(stream.select("src", "dst", "time", "diff", "batch"),
                   os.path.join(in_dir, "edges"), partition_by="batch")
    rng = np.random.default_rng(cfg.seed)
    roots = sorted(int(r) for r in rng.choice(n, size=cfg.roots, replace=False))
    roots_df = spark.createDataFrame([(r,) for r in roots], "node long")
    # One time, one small file: no need for export_changes' sort (and its extra job).
    as_changes(roots_df, time=0).coalesce(1).write.mode("overwrite").parquet(
        os.path.join(in_dir, "roots"))
    return roots


def _build(df):
    """Reachability and out-degree over a roots input and an edges input."""
    roots_in, roots = df.new_input(["node"])
    edges_in, edges = df.new_input(["src", "dst"])
    try:
        from ddnumba.algorithms import reachability
        reach = reachability(roots, edges)
    except ImportError:  # pragma: no cover - the graph library ships with ddnumba
        start = roots.map(lambda r: (r, r), names=["root", "node"])
        reach = start.iterate(
            lambda r: r.map(lambda root, node: (node, root), names=["node", "root"])
            .join(edges).map(lambda node, root, dst: (root, dst), names=["root", "node"])
            .concat(start).distinct())
    degree = edges.count()
    return roots_in, edges_in, reach.capture(), degree.capture()


def _warm_up():
    """Run the demo's dataflow on a tiny graph, so that Numba compiles (or loads from
    its cache) every kernel before anything is timed. Returns the seconds it took."""
    import ddnumba as dd
    t = _time.perf_counter()
    df = dd.Dataflow()
    roots_in, edges_in, reach, degree = _build(df)
    roots_in.insert([0], time=0)
    roots_in.close()
    edges_in.insert([0, 1, 2], [1, 2, 0], time=0)
    edges_in.advance_to(1)
    df.run()
    edges_in.update([1, 2], [2, 3], time=[1, 2], diff=[-1, 1])
    edges_in.advance_to(3)
    df.run()
    edges_in.close()
    df.run()
    reach.at(2), degree.at(2)
    return _time.perf_counter() - t


def _stream_ddnumba(cfg, in_dir, out_dir, echo):
    """Feed the exported batches into ddnumba; returns timings and latencies."""
    import ddnumba as dd
    from ddnumba.io.encoding import encoder_for
    from ddnumba.io.parquet import _Progress, feed, read_changes, write_changes

    df = dd.Dataflow()
    roots_in, edges_in, reach, degree = _build(df)
    enc = encoder_for(df)
    feed(roots_in, os.path.join(in_dir, "roots"), run=False, close=True)
    reader = read_changes(os.path.join(in_dir, "edges"), ["src", "dst"], encoder=enc)
    batches = iter(reader)

    # Load: the time-0 batch (the initial graph), then the first run computes everything.
    t0 = _time.perf_counter()
    load_rows = 0
    first = None
    with _Progress(cfg.edges, "load  ", unit="edges", enabled=cfg.progress) as bar:
        for batch in batches:
            if batch.times[0, 0] > 0:
                first = batch
                break
            edges_in.update(*batch.columns, time=batch.times, diff=batch.diffs)
            load_rows += len(batch)
            bar.update(len(batch))
        edges_in.advance_to(1)
        df.run()
    load_s = _time.perf_counter() - t0
    load_pairs = len(reach.at(0))

    # Each run's output changes go out as the next part file of each output dataset.
    reach_dir = os.path.join(out_dir, "reachability")
    degree_dir = os.path.join(out_dir, "out_degree")
    parts = 0
    write_s = 0.0

    def write_new():
        nonlocal parts, write_s
        t = _time.perf_counter()
        for cap, d in ((reach, reach_dir), (degree, degree_dir)):
            if write_changes(cap, d, new=True) is not None:
                parts += 1
        write_s += _time.perf_counter() - t

    write_new()

    latencies, fed_changes = [], 0
    last_time = 0
    t_stream = _time.perf_counter()
    w_stream = write_s                  # (the stream's time excludes its writes)
    with _Progress(cfg.changes, "stream", unit="changes", enabled=cfg.progress) as bar:
        pending = first
        while pending is not None:
            batch = pending
            t = _time.perf_counter()
            edges_in.update(*batch.columns, time=batch.times, diff=batch.diffs)
            hi = int(batch.times[:, 0].max())
            # Times up to this batch's last are complete (each batch is one directory,
            # and the reader checked that later batches start later).
            edges_in.advance_to(hi + 1 if batch.frontier is None else
                                int(min(batch.frontier[0], hi + 1)))
            df.run()
            latencies.append(_time.perf_counter() - t)
            write_new()
            n_changes = hi - last_time
            last_time = hi
            fed_changes += n_changes
            bar.update(n_changes)
            pending = next(batches, None)
    stream_s = _time.perf_counter() - t_stream - (write_s - w_stream)
    edges_in.close()
    df.run()
    write_new()
    return {
        "load_s": load_s, "stream_s": stream_s, "write_s": write_s, "parts": parts,
        "load_rows": load_rows, "load_pairs": load_pairs, "changes": fed_changes,
        "runs": len(latencies), "final_time": last_time, "latencies": latencies,
        "reach_updates": len(reach), "degree_updates": len(degree),
    }


def _verify_with_spark(spark, cfg, roots, in_dir, out_dir, final_time):
    """Recompute the final answers from scratch in Spark and compare (three Spark
    actions: each costs a job's fixed overhead, which dominates at demo sizes)."""
    from pyspark.sql import functions as F

    from ddnumba.io.spark import accumulate, read_updates
    changes = spark.read.parquet(os.path.join(in_dir, "edges")).drop("batch")
    final_edges = accumulate(changes).filter(F.col("count") > 0)
    checks = {}

    # Out-degree: a groupBy over the final multiset of edges, full-outer-joined with
    # ddnumba's output accumulated at the final time; one aggregate counts the rows and
    # each kind of disagreement.
    expected = final_edges.groupBy("src").agg(F.sum("count").alias("expected"))
    got = (accumulate(read_updates(spark, os.path.join(out_dir, "out_degree")),
                      final_time)
           .select("src", F.col("count").alias("got"), F.col("count_").alias("mult")))
    joined = expected.join(got, "src", "full_outer")
    flag = lambda cond: F.sum(F.when(cond, 1).otherwise(0))  # noqa: E731
    row = joined.agg(
        flag(F.col("expected").isNotNull()).alias("rows"),
        flag(F.col("got").isNull()).alias("missing"),
        flag(F.col("expected").isNull()).alias("extra"),
        flag(F.col("expected").isNotNull() & F.col("got").isNotNull()
             & ((F.col("expected") != F.col("got")) | (F.col("mult") != 1)))
        .alias("wrong")).collect()[0]
    rows, missing, extra, wrong = (int(row[k] or 0) for k in
                                   ("rows", "missing", "extra", "wrong"))
    checks["out_degree"] = {"match": missing == 0 and extra == 0 and wrong == 0,
                            "rows": rows, "missing": missing, "extra": extra + wrong}

    # Reachability: collect the final edge list, BFS from every root on the driver.
    e = final_edges.select("src", "dst").toPandas()
    exp_r, exp_n = bfs_reachable(e["src"].to_numpy(), e["dst"].to_numpy(), roots,
                                 cfg.nodes)
    got = accumulate(read_updates(spark, os.path.join(out_dir, "reachability")),
                     final_time).toPandas()
    got_ok = bool((got["count"] == 1).all()) if len(got) else True
    exp_set = set(zip(exp_r.tolist(), exp_n.tolist()))
    got_set = set(zip(got["root"].tolist(), got["node"].tolist()))
    checks["reachability"] = {"match": got_ok and exp_set == got_set and len(got) == len(
        got_set), "rows": len(exp_set), "missing": len(exp_set - got_set),
        "extra": len(got_set - exp_set)}
    return checks


def _plot(latencies, cfg, path):
    """Latency CDF (log x), like the roadmap's figures. Returns False without
    matplotlib."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    lat_ms = np.sort(np.asarray(latencies, dtype=float)) * 1e3
    fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=110)
    if lat_ms.size:
        y = np.arange(1, lat_ms.size + 1) / lat_ms.size
        ax.step(lat_ms, y, where="post",
                label=f"{cfg.batch} changes/run, N={cfg.nodes:,}, M={cfg.edges:,}")
        ax.set_xscale("log")
        # Plain numbers on the log axis: latencies span less than a decade here, where
        # matplotlib would otherwise label minor ticks as 3x10^2.
        from matplotlib.ticker import FuncFormatter
        plain = FuncFormatter(lambda v, _: f"{v:g}")
        ax.xaxis.set_major_formatter(plain)
        if lat_ms[-1] < 20 * lat_ms[0]:
            ax.xaxis.set_minor_formatter(plain)
        for p_, ls in ((50, ":"), (99, "--")):
            v = float(np.percentile(lat_ms, p_))
            ax.axvline(v, color="gray", ls=ls, lw=1, label=f"p{p_} = {v:,.1f} ms")
    ax.set_xlabel("latency per run (ms)")
    ax.set_ylabel("fraction of runs")
    ax.set_ylim(0, 1.02)
    ax.grid(True, which="both", alpha=0.3)
    ax.set_title(f"ddnumba: reachability + out-degree, {cfg.changes:,} changes")
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True


# --------------------------------------------------------------------------- driver
def run_demo(config: DemoConfig | None = None, *, echo=print, spark=None) -> DemoResult:
    """Run the demo (see the module docstring). Returns a :class:`DemoResult`;
    ``result.match`` says whether ddnumba agreed with Spark."""
    cfg = (config or DemoConfig()).resolved()
    out = os.path.abspath(cfg.out)
    in_dir, out_dir = os.path.join(out, "input"), os.path.join(out, "output")
    echo(f"ddnumba demo: N={cfg.nodes:,} nodes, M={cfg.edges:,} edges, "
         f"R={cfg.roots} roots; {cfg.changes:,} changes (sliding window: remove the "
         f"oldest edge, add a random one), each at its own time, "
         f"{cfg.batch:,} per run ({-(-cfg.changes // cfg.batch):,} runs); seed "
         f"{cfg.seed}; output in {out}")
    for d in (in_dir, out_dir):
        shutil.rmtree(d, ignore_errors=True)
    os.makedirs(out, exist_ok=True)
    timings = {}

    # The Spark JVM boots in a background thread while this thread compiles (or loads
    # from Numba's cache) ddnumba's kernels: two CPU-bound start-ups overlap on 2 cores.
    t = _time.perf_counter()
    own_session = spark is None
    pool = None
    if spark is None:
        from concurrent.futures import ThreadPoolExecutor

        from pyspark import SparkContext

        from ddnumba.io.spark import local_session
        # Stop the session at the end only if this call started it.
        own_session = SparkContext._active_spark_context is None
        pool = ThreadPoolExecutor(max_workers=1)
        starting = pool.submit(local_session, "ddnumba-demo")
    timings["warmup_s"] = _warm_up()
    if pool is not None:
        spark = starting.result()
        pool.shutdown()
    timings["spark_start_s"] = _time.perf_counter() - t
    echo(f"[spark] local session ready in {timings['spark_start_s']:.1f} s (ddnumba's "
         f"kernels warmed up meanwhile: {timings['warmup_s']:.1f} s)")

    try:
        t = _time.perf_counter()
        roots = _export_with_spark(spark, cfg, in_dir)
        timings["export_s"] = _time.perf_counter() - t
        echo(f"[spark] generated the graph and {cfg.changes:,} changes, exported "
             f"{-(-cfg.changes // cfg.batch) + 1} Parquet batches in "
             f"{timings['export_s']:.1f} s")

        run = _stream_ddnumba(cfg, in_dir, out_dir, echo)
        timings.update(load_s=run["load_s"], stream_s=run["stream_s"],
                       write_s=run["write_s"])
        echo(f"[ddnumba] loaded {run['load_rows']:,} edges in {run['load_s']:.2f} s "
             f"({run['load_pairs']:,} reachable (root, node) pairs); streamed "
             f"{run['changes']:,} changes in {run['runs']} runs, {run['stream_s']:.2f} s; "
             f"wrote each run's output changes: {run['parts']} Parquet part files, "
             f"{run['write_s']:.2f} s")

        t = _time.perf_counter()
        checks = _verify_with_spark(spark, cfg, roots, in_dir, out_dir, run["final_time"])
        timings["verify_s"] = _time.perf_counter() - t
    finally:
        if own_session:
            spark.stop()

    match = all(c["match"] for c in checks.values())
    for name, c in checks.items():
        word = "match" if c["match"] else "MISMATCH"
        echo(f"[spark] {name}: {word} ({c['rows']:,} rows from scratch; "
             f"{c['missing']} missing, {c['extra']} extra in ddnumba's output)")
    lat = run["latencies"]
    pct = _percentiles(lat)
    ups = run["changes"] / run["stream_s"] if run["stream_s"] > 0 else float("nan")
    stats = {
        "changes": run["changes"], "row_updates": 2 * run["changes"],
        "runs": run["runs"], "changes_per_s": ups,
        "latency_ms": {k: v * 1e3 for k, v in pct.items()},
        "latency_per_change_ms_p50": pct["p50"] * 1e3 / cfg.batch,
        "reachability_updates": run["reach_updates"],
        "out_degree_updates": run["degree_updates"],
    }
    rows = [
        ("graph", f"N={cfg.nodes:,} nodes, M={cfg.edges:,} edges, R={cfg.roots} roots"),
        ("changes", f"{run['changes']:,} ({2 * run['changes']:,} row updates), "
                    f"{cfg.batch:,} per run, {run['runs']:,} runs"),
        ("load (time 0)", f"{run['load_s']:.2f} s"),
        ("stream", f"{run['stream_s']:.2f} s"),
        ("throughput", f"{ups:,.0f} changes/s"),
        ("latency p50", f"{pct['p50'] * 1e3:,.1f} ms per run"),
        ("latency p90", f"{pct['p90'] * 1e3:,.1f} ms per run"),
        ("latency p99", f"{pct['p99'] * 1e3:,.1f} ms per run"),
        ("latency max", f"{pct['max'] * 1e3:,.1f} ms per run"),
        ("output", f"{run['reach_updates']:,} reachability + "
                   f"{run['degree_updates']:,} out-degree updates"),
        ("result", "match" if match else "MISMATCH"),
    ]
    w = max(len(k) for k, _ in rows)
    echo("")
    echo("summary")
    echo(f"{'-' * w}  {'-' * 48}")
    for k, v in rows:
        echo(f"{k.ljust(w)}  {v}")
    echo("")

    png = os.path.join(out, "latency_cdf.png")
    if _plot(lat, cfg, png):
        echo(f"latency CDF: {png}")
    else:
        echo("latency CDF: skipped (matplotlib is not installed: pip install "
             "'ddnumba[plot]')")
    result = DemoResult(config=asdict(cfg), match=match, checks=checks, timings=timings,
                        latencies=[float(x) for x in lat], stats=stats)
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(asdict(result), f, indent=2)
    echo(f"result: {'match' if match else 'MISMATCH'}")
    sys.stdout.flush()
    return result

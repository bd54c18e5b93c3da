"""The roadmap's reachability benchmark, outside asv: ``python -m ddnumba.bench reach``.

Workload (fixed, so every comparison uses the same stream): R=10 roots, N nodes,
M = 2N random directed edges (a multiset: duplicates and self-loops allowed), then a
sliding window of U changes; change ``j`` removes edge ``j`` (the oldest live one) and
adds edge ``M + j``, each change at its own distinct time. ``B`` changes are fed per
``run()``. Reported: changes/s, per-run latency percentiles, the arrangement record
count (state must not grow with the number of changes), and, in the same process, the
time of a from-scratch recompute (scipy breadth-first search from every root per run)
for comparison.
"""
from __future__ import annotations

import argparse
import gc
import time

import numpy as np

import ddnumba as dd

__all__ = ["workload", "build_reach", "state_records", "run_reach", "main"]

SEED = 20240601


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


def build_reach(workers=1):
    """The roadmap's reachability program: pairs (root, node)."""
    df = dd.Dataflow(workers=workers)
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
    return total


def _scratch_bfs(n, src, dst, roots):
    """From-scratch reachability size per root with scipy (the recompute baseline)."""
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import breadth_first_order
    g = csr_matrix((np.ones(len(src), np.int8), (src, dst)), shape=(n, n))
    return [len(breadth_first_order(g, int(r), return_predecessors=False)) for r in roots]


def run_reach(n, batch, changes, *, recompute=True, progress=False, checkpoints=(),
              workers=1):
    """Run the workload; returns a dict of figures (see module docstring)."""
    src, dst, roots, new_src, new_dst = workload(n, changes)
    m = len(src)
    all_src = np.concatenate([src, new_src])
    all_dst = np.concatenate([dst, new_dst])
    df, roots_in, edges_in, probe, counts = build_reach(workers)
    t0 = time.perf_counter()
    edges_in.insert(src, dst, time=0)
    roots_in.insert(roots, time=0)
    edges_in.advance_to(1)
    roots_in.advance_to(1)
    df.run()
    load = time.perf_counter() - t0
    records_after_load = state_records(df)
    lat = []
    marks = {}
    t = 1
    steps = changes // batch
    ones = np.ones(batch, np.int64)
    it = range(steps)
    if progress:
        try:
            from tqdm import tqdm
            it = tqdm(it, desc=f"N={n} B={batch}", unit="run")
        except ImportError:  # pragma: no cover
            pass
    for s in it:
        j = np.arange(s * batch, (s + 1) * batch)
        times = t + np.arange(batch)
        a = time.perf_counter()
        edges_in.update(np.concatenate([all_src[j], all_src[m + j]]),
                        np.concatenate([all_dst[j], all_dst[m + j]]),
                        time=np.concatenate([times, times]),
                        diff=np.concatenate([-ones, ones]))
        t += batch
        edges_in.advance_to(t)
        roots_in.advance_to(t)
        df.run()
        lat.append(time.perf_counter() - a)
        done = (s + 1) * batch
        if done in checkpoints:
            marks[done] = (np.array(lat[-min(len(lat), 1000):]), state_records(df))
    lat = np.array(lat)
    out = {
        "n": n, "batch": batch, "workers": workers, "changes": steps * batch, "load_s": load,
        "records_after_load": records_after_load, "records_end": state_records(df),
        "p50_ms": float(np.median(lat) * 1e3) if len(lat) else float("nan"),
        "p99_ms": float(np.percentile(lat, 99) * 1e3) if len(lat) else float("nan"),
        "max_ms": float(lat.max() * 1e3) if len(lat) else float("nan"),
        "changes_per_s": float(batch / np.median(lat)) if len(lat) else float("nan"),
        "latencies": lat, "marks": marks,
    }
    if recompute:
        live_src = all_src[steps * batch: m + steps * batch]
        live_dst = all_dst[steps * batch: m + steps * batch]
        samples = []
        for _ in range(3):
            a = time.perf_counter()
            sizes = _scratch_bfs(n, live_src, live_dst, roots)
            samples.append(time.perf_counter() - a)
        out["recompute_ms"] = float(np.median(samples) * 1e3)
        # The engine's final answer must equal the recompute.
        got = dict(zip(*[c.to_pylist() for c in counts.at(t - 1).columns[:2]]))
        out["check"] = all(got.get(int(r)) == sz for r, sz in zip(roots, sizes))
    # Operator nodes reference each other (consumers and inputs): free the whole graph
    # now, before the next configuration builds its own (at N=1e6 each holds GBs).
    df.close()
    del df, roots_in, edges_in, probe, counts
    gc.collect()
    return out


def _table(rows):
    cols = ["n", "batch", "workers", "changes", "load_s", "changes_per_s", "p50_ms", "p99_ms",
            "max_ms", "recompute_ms", "ratio", "records_after_load", "records_end",
            "check"]
    print(" ".join(f"{c:>14}" for c in cols))
    for r in rows:
        r = dict(r)
        if "recompute_ms" in r:
            # >1: the incremental update of one batch beats recomputing from scratch.
            r["ratio"] = r["recompute_ms"] / r["p50_ms"]
        vals = []
        for c in cols:
            v = r.get(c, "")
            vals.append(f"{v:>14.3f}" if isinstance(v, float) else f"{v!s:>14}")
        print(" ".join(vals))


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
    r.add_argument("--no-recompute", action="store_true")
    r.add_argument("--plot", default=None, help="write a latency CDF PNG here")
    args = p.parse_args(argv)
    rows = []
    for n in args.nodes:
        for b in args.batch:
            changes = args.changes or max(20 * b, 200)
            for w in args.workers:
                rows.append(run_reach(n, b, changes, recompute=not args.no_recompute,
                                      progress=True, workers=w))
    _table(rows)
    if len(args.workers) > 1:
        base = {(r["n"], r["batch"]): r["changes_per_s"] for r in rows if r["workers"] == 1}
        for r in rows:
            if r["workers"] > 1 and (r["n"], r["batch"]) in base:
                print(f"N={r['n']} B={r['batch']}: W={r['workers']} speedup "
                      f"{r['changes_per_s'] / base[(r['n'], r['batch'])]:.2f}x over W=1, "
                      f"{r['changes_per_s'] / r['workers']:.0f} changes/s per worker")
    if args.plot:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(6, 4))
        for row in rows:
            lat = np.sort(row["latencies"]) * 1e3
            ax.plot(lat, np.arange(1, len(lat) + 1) / len(lat),
                    label=f"N={row['n']} B={row['batch']}")
        ax.set_xscale("log")
        ax.set_xlabel("latency per run (ms)")
        ax.set_ylabel("fraction of runs")
        ax.legend()
        fig.tight_layout()
        fig.savefig(args.plot, dpi=120)
        print(f"wrote {args.plot}")


if __name__ == "__main__":
    main()

"""How much work the reachability benchmark asks for, whatever the engine, and what a
random memory access costs here: ``python -m ddnumba.bench floor``, ``python -m
ddnumba.bench sharing`` and ``python -m ddnumba.bench memory``.

*The work floor.* The benchmark's loop (``distinct`` of the roots and of the edges'
step from the loop variable) holds the pair ``(root, node)`` from the iteration equal
to the node's breadth-first depth from that root onwards. So whenever a change of the
graph moves a reachable node to another depth, every differential implementation, at
the time of that change, must retract the pair at its old depth and add it at its new
one (one update when the node becomes reachable or unreachable): these corrections are
the unique consolidated differences of the loop's result, and the join and the
``distinct`` downstream of them must then be visited for each. :func:`min_corrections`
counts them with scipy's breadth-first search from every root, at the resolution of
single changes (every change at its own time, as the benchmark asks) or of whole
batches (``B`` changes at one time, where depth moves that undo each other within a
batch cancel). :func:`engine_corrections` reads what the native engine's loop did
over the same changes: the corrections it emitted (some are premature and cancel in
the queue they wait in) and the changes of its variable once consolidated, which
must equal the floor.

*Sharing.* :func:`batch_sharing` counts, from the same depths, the key lookups of the
loop's rounds with a pass per time and with one pass per round over a batch's times:
the most that batch-wide rounds could save in lookups.

*Memory.* :func:`memory_latency` times random loads over working sets of growing size
(:mod:`ddnumba.kernels.memlat`): one load depending on the previous one (a pointer
chase: the latency) and loads with addresses known in advance (what overlapping buys at
most), and a chase over a fixed 256 KiB of lines spread over the same size (``spread``:
the lines fit the L2 cache, so what grows with the size is the cost of translating
addresses, the TLB's reach and its page walks; this machine exposes no hardware counters
to say so directly). :func:`first_touch` times writing memory the process has never
touched (every page must be backed on its first write: by the kernel, and on a virtual
machine whose host backs guest memory lazily or takes back what the guest frees, by the
host too) against writing memory just given back and taken again (pages the kernel
recycles at once). On the benchmark machines the first costs ~3.5 s per GiB in some
sittings and the second ~0.1 s: a load that first-touches ~3 GiB spends ~10 s of system
time there.
"""
from __future__ import annotations

import time

import numpy as np

__all__ = ["min_corrections", "batch_sharing", "engine_corrections", "memory_latency",
           "first_touch", "SPREAD_LINES", "spread_cycle", "add_parser", "main"]


def _depths(n, src, dst, roots):
    """Breadth-first depth of every node from every root (``inf``: unreachable),
    shape ``(len(roots), n)``."""
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import shortest_path
    g = csr_matrix((np.ones(len(src), np.int8), (src, dst)), shape=(n, n))
    return shortest_path(g, indices=np.asarray(roots), unweighted=True, directed=True)


def _window_start(who, n, changes, roots, seed, stream):
    """The benchmark's edge window over ``changes`` changes (``stream`` or the
    workload): ``(all_src, all_dst, root_ids, m, depths of the first window)``; the
    window at time ``j`` is edges ``j .. j + m - 1``."""
    from .bench import SEED, workload
    if stream is None:
        stream = workload(n, changes, roots=roots, seed=SEED if seed is None else seed)
    src, dst, root_ids, new_src, new_dst = stream
    if len(new_src) < changes:
        raise ValueError(f"{who}: the stream holds {len(new_src)} changes, "
                         f"fewer than {changes}")
    m = len(src)
    all_src = np.concatenate([src, new_src])
    all_dst = np.concatenate([dst, new_dst])
    return all_src, all_dst, root_ids, m, _depths(n, all_src[:m], all_dst[:m], root_ids)


def min_corrections(n, changes, *, resolution=1, roots=10, seed=None, stream=None):
    """The least number of corrections of the loop's result over the benchmark's
    first ``changes`` window changes (after the load), with the changes seen at
    times of ``resolution`` changes each (1: a time per change).

    ``stream`` = ``(src, dst, roots, new_src, new_dst)`` replaces the benchmark's
    workload (for tests). Returns ``{"moved": pairs at another depth,
    "corrections": the least corrections, "appeared", "vanished", "times"}``, totals
    over all times.
    """
    if resolution < 1:
        raise ValueError(f"min_corrections: resolution must be >= 1, not {resolution}")
    if changes % resolution:
        raise ValueError(f"min_corrections: changes ({changes}) must be a multiple of "
                         f"the resolution ({resolution})")
    all_src, all_dst, root_ids, m, prev = _window_start(
        "min_corrections", n, changes, roots, seed, stream)
    out = {"moved": 0, "corrections": 0, "appeared": 0, "vanished": 0,
           "times": changes // resolution}
    for j in range(resolution, changes + 1, resolution):
        cur = _depths(n, all_src[j:j + m], all_dst[j:j + m], root_ids)
        fp, fc = np.isfinite(prev), np.isfinite(cur)
        moved = int(np.count_nonzero(fp & fc & (prev != cur)))
        appeared = int(np.count_nonzero(~fp & fc))
        vanished = int(np.count_nonzero(fp & ~fc))
        out["moved"] += moved
        out["appeared"] += appeared
        out["vanished"] += vanished
        out["corrections"] += 2 * moved + appeared + vanished
        prev = cur
    return out


def batch_sharing(n, changes, batch, *, roots=10, seed=None, stream=None):
    """Key lookups that one pass per round over all the times of a batch would share,
    against one pass per time, over the benchmark's first ``changes`` window changes
    (every change at its own time, ``batch`` changes a run).

    The loop variable's changes at time ``t`` are its least corrections there, pairs
    ``(root, node)`` at iterations ``i`` (see :func:`min_corrections`). A loop round
    ``i`` looks a node up in the join's arrangements once per node among them, and the
    ``distinct`` looks up each pair ``(root, dst)`` the join sends it at ``i + 1``, one
    per edge ``node -> dst`` present at ``t`` (left out: the pairs that a change's two
    edge updates make with the variable). Counted once per ``(key, iteration)`` per
    time (a pass per time, as the sequential loops run) and once per batch (a pass per
    round for the batch's times, which must still evaluate every time a key changes
    at, so this is what such a pass could save in lookups at most). Returns totals:
    ``{"times", "variable": changes of the variable, "node_time", "node_batch": node
    lookups, "pair_rows": rows sent to the distinct, "pair_time", "pair_batch": its
    key lookups}``."""
    if batch < 1 or changes % batch:
        raise ValueError(f"batch_sharing: changes ({changes}) must be a positive "
                         f"multiple of the batch ({batch})")
    all_src, all_dst, root_ids, m, prev = _window_start(
        "batch_sharing", n, changes, roots, seed, stream)
    out = dict.fromkeys(("variable", "node_time", "node_batch", "pair_rows",
                         "pair_time", "pair_batch"), 0)
    out["times"] = changes
    nodes, pairs = [], []
    for j in range(1, changes + 1):
        cur = _depths(n, all_src[j:j + m], all_dst[j:j + m], root_ids)
        r, v = np.nonzero(prev != cur)          # inf != inf is False: both unreached
        d = np.concatenate([prev[r, v], cur[r, v]])
        r, v = np.concatenate([r, r]), np.concatenate([v, v])
        ok = np.isfinite(d)
        r, v, it = r[ok], v[ok], d[ok].astype(np.int64)
        out["variable"] += len(it)
        node_keys = np.unique(v * (n + 1) + it)           # (node, iteration)
        # the variable's changes through the edges present at time j
        es, ed = all_src[j:j + m], all_dst[j:j + m]
        order = np.argsort(es, kind="stable")
        es, ed = es[order], ed[order]
        lo = np.searchsorted(es, v, "left")
        cnt = np.searchsorted(es, v, "right") - lo
        first = np.repeat(lo - (np.cumsum(cnt) - cnt), cnt)
        w = ed[first + np.arange(int(cnt.sum()))]
        pair_keys = np.unique((np.repeat(r, cnt) * n + w) * (n + 1)
                              + np.repeat(it, cnt) + 1)    # (root, dst, iteration + 1)
        out["pair_rows"] += len(w)
        out["node_time"] += len(node_keys)
        out["pair_time"] += len(pair_keys)
        nodes.append(node_keys)
        pairs.append(pair_keys)
        if j % batch == 0:
            out["node_batch"] += len(np.unique(np.concatenate(nodes)))
            out["pair_batch"] += len(np.unique(np.concatenate(pairs)))
            nodes, pairs = [], []
        prev = cur
    return out


def _variable_arrangement(feedback):
    """The arrangement that consolidates a loop variable's changes: the first one
    downstream of its feedback through concats and maps."""
    from .operators.arrange import ArrangeNode
    found, stack, seen = [], [feedback], set()
    while stack:
        node = stack.pop()
        for consumer, _ in node.consumers:
            if id(consumer) in seen:
                continue
            seen.add(id(consumer))
            if isinstance(consumer, ArrangeNode):
                found.append(consumer)
            elif consumer.kind in ("concat", "map"):
                stack.append(consumer)
    if len(found) != 1:
        raise RuntimeError(f"engine_corrections: {len(found)} arrangements of the loop "
                           f"variable, expected one")
    return found[0]


def engine_corrections(n, changes, *, batch=1, resolution="record"):
    """Run the benchmark on the native engine (sequential loops) for ``changes``
    window changes after the load, ``batch`` per run. Returns totals over the
    changes: ``"emitted"``, the loop's corrections as its feedback received them;
    ``"corrections"``, the loop variable's changes once consolidated (what its join
    works on, comparable with :func:`min_corrections`); ``"updates"``, rows all
    operators received; and ``"changes_per_s"``, the runs' median throughput."""
    from .bench import ReachSession
    from .operators.iterate import FeedbackNode
    s = ReachSession(n, changes, engine="native", loops="sequential")
    try:
        s.load()
        nat = s.df._native
        fb = [node for node, *_ in nat.node_stats() if isinstance(node, FeedbackNode)]
        if len(fb) != 1:
            raise RuntimeError(f"engine_corrections: {len(fb)} feedbacks, expected one")
        arr = _variable_arrangement(fb[0])

        def counts():
            st = nat.node_stats()
            return (sum(r[2] for r in st if r[0] is fb[0]),
                    sum(r[3] for r in st if r[0] is arr),
                    sum(r[2] for r in st))

        c0 = counts()
        fig = s.feed(batch, changes, resolution=resolution)
        c1 = counts()
    finally:
        s.close()
    return {"emitted": c1[0] - c0[0], "corrections": c1[1] - c0[1],
            "updates": c1[2] - c0[2], "changes_per_s": fig["changes_per_s"]}


SPREAD_LINES = 4096      # memory_latency's spread chase: 256 KiB of lines


def spread_cycle(a, rng):
    """Link :data:`SPREAD_LINES` lines of the int64 array ``a`` (all of its lines when
    it has fewer) into one cycle in random order, as
    :func:`ddnumba.kernels.memlat.cycle_links` does (each line's first word holds the
    word index of the next); other words are left as they are. The array's lines are
    cut into that many windows of ``lines // SPREAD_LINES`` lines, and one line at a
    random place in each is taken: at a fixed power-of-two stride the lines would
    share a few cache sets and miss the cache for that alone. Returns the cycle's
    word indices in chase order."""
    from .kernels.memlat import LINE_WORDS
    lines = a.shape[0] // LINE_WORDS
    k = min(lines, SPREAD_LINES)
    step = lines // k
    at = (rng.permutation(k).astype(np.int64) * step
          + rng.integers(0, step, k)) * LINE_WORDS
    a[at] = np.roll(at, -1)
    return at


def memory_latency(sizes_mib, *, steps=2_000_000, seed=1):
    """Random 8-byte loads, one per 64-byte line, over arrays of ``sizes_mib`` MiB:
    ``[{"mib", "dependent_ns", "independent_ns", "spread_ns"}]`` (nanoseconds per
    load; best of three timings each). ``spread_ns`` chases through the lines of
    :func:`spread_cycle` in the same array: data that stays in the L2 cache at
    addresses spread over the whole size, so its rise over the smallest size's figure
    is the cost of address translation."""
    from .kernels.memlat import LINE_WORDS, chase, cycle_links, gather_sum
    rng = np.random.default_rng(seed)
    rows = []
    for mib in sizes_mib:
        lines = max(2, int(mib * 2 ** 20) // (8 * LINE_WORDS))
        a = np.zeros(lines * LINE_WORDS, np.int64)
        cycle_links(a, rng.permutation(lines).astype(np.int64))
        idx = rng.integers(0, lines, steps) * LINE_WORDS
        chase(a, 0, 1000)                   # compiled, and the array touched
        gather_sum(a, idx[:1000])
        dep, ind = [], []
        for _ in range(3):
            t = time.perf_counter()
            chase(a, 0, steps)
            dep.append(time.perf_counter() - t)
            t = time.perf_counter()
            gather_sum(a, idx)
            ind.append(time.perf_counter() - t)
        at = spread_cycle(a, rng)           # (over the first cycle's links)
        chase(a, int(at[0]), 1000)
        spr = []
        for _ in range(3):
            t = time.perf_counter()
            chase(a, int(at[0]), steps)
            spr.append(time.perf_counter() - t)
        rows.append({"mib": mib, "dependent_ns": min(dep) / steps * 1e9,
                     "independent_ns": min(ind) / steps * 1e9,
                     "spread_ns": min(spr) / steps * 1e9})
        del a, idx
    return rows


def first_touch(mib=512.0):
    """Seconds per GiB to write one word in every 4 KiB page of ``mib`` MiB of fresh
    memory (``fresh``: a new mapping, every page faulted in and zeroed, and backed by
    the host on a virtual machine that backs memory lazily), and to do the same once
    that memory is freed and at once allocated again (``recycled``: pages the kernel
    has just taken back, already backed): ``{"mib", "fresh_s_per_gib",
    "recycled_s_per_gib"}``."""
    if not (mib > 0 and np.isfinite(mib)):
        raise ValueError(f"first_touch: the size must be positive, not {mib}")
    words = max(512, int(mib * 2 ** 20) // 8)
    gib = words * 8 / 2 ** 30
    out = {"mib": mib}
    for key in ("fresh_s_per_gib", "recycled_s_per_gib"):
        t = time.perf_counter()
        a = np.empty(words, np.int64)       # (large: a new mapping of its own)
        a[::512] = 1
        out[key] = (time.perf_counter() - t) / gib
        del a
    return out


def add_parser(sub):
    f = sub.add_parser("floor", help="the least corrections the benchmark needs, against "
                                     "the engine's")
    f.add_argument("--nodes", type=int, nargs="+", default=[1000])
    f.add_argument("--changes", type=int, default=10000)
    f.add_argument("--resolution", type=int, nargs="+", default=[1, 1000],
                   help="changes per time: 1 is every change at its own time (the "
                        "benchmark; the engine is fed 1,000 a run), R > 1 puts R "
                        "changes at one time (the engine is fed R a run)")
    f.add_argument("--no-engine", action="store_true",
                   help="only the floor (no engine run)")
    sh = sub.add_parser("sharing", help="key lookups one pass per round over a "
                                        "batch's times would share")
    sh.add_argument("--nodes", type=int, nargs="+", default=[1000])
    sh.add_argument("--changes", type=int, default=10000)
    sh.add_argument("--batch", type=int, nargs="+", default=[100, 1000, 10000],
                    help="changes a run, each at its own time")
    mem = sub.add_parser("memory", help="random-load latency by working-set size")
    mem.add_argument("--mib", type=float, nargs="+",
                     default=[0.25, 1, 2, 4, 8, 16, 64, 256, 1024])
    mem.add_argument("--steps", type=int, default=2_000_000)
    mem.add_argument("--touch", type=float, default=512.0,
                     help="MiB of fresh memory to time first writes over (0: none)")


def main(args):
    if args.cmd == "memory":
        print(f"{'MiB':>8} {'dependent ns':>13} {'independent ns':>15} "
              f"{'spread ns':>10}")
        for r in memory_latency(args.mib, steps=args.steps):
            print(f"{r['mib']:8g} {r['dependent_ns']:13.1f} {r['independent_ns']:15.1f} "
                  f"{r['spread_ns']:10.1f}")
        if args.touch > 0:
            ft = first_touch(args.touch)
            print(f"first writes over {args.touch:g} MiB: {ft['fresh_s_per_gib']:.2f} s per "
                  f"GiB of fresh memory, {ft['recycled_s_per_gib']:.2f} s per GiB freed "
                  f"and taken again at once")
        return
    if args.cmd == "sharing":
        print("per change: the loop variable's changes; node lookups by the join's "
              "arrangements and (root, dst) lookups by the distinct, with a pass per "
              "time and with a pass per round over the batch's times")
        print(f"{'N':>8} {'batch':>6} {'changes':>8} {'variable':>9} {'nodes/t':>8} "
              f"{'nodes/b':>8} {'ratio':>6} {'rows':>7} {'pairs/t':>8} {'pairs/b':>8} "
              f"{'ratio':>6}")
        for n in args.nodes:
            for b in args.batch:
                if b < 1:
                    raise SystemExit(f"sharing: --batch must be >= 1, not {b}")
                changes = args.changes - args.changes % b
                if changes <= 0:
                    print(f"N={n} batch {b}: fewer changes than one batch; skipped")
                    continue
                t0 = time.perf_counter()
                r = batch_sharing(n, changes, b)
                print(f"{n:8d} {b:6d} {changes:8d} {r['variable'] / changes:9.1f} "
                      f"{r['node_time'] / changes:8.1f} {r['node_batch'] / changes:8.1f} "
                      f"{r['node_time'] / max(r['node_batch'], 1):6.2f} "
                      f"{r['pair_rows'] / changes:7.1f} {r['pair_time'] / changes:8.1f} "
                      f"{r['pair_batch'] / changes:8.1f} "
                      f"{r['pair_time'] / max(r['pair_batch'], 1):6.2f}"
                      f"   ({time.perf_counter() - t0:.0f} s)", flush=True)
        return
    print("per change: pairs moved to another depth, the least corrections of the "
          "loop's result, the engine's (emitted / consolidated), its operators' updates")
    print(f"{'N':>8} {'per time':>8} {'changes':>8} {'moved':>7} {'least':>7} "
          f"{'emitted':>8} {'consol.':>8} {'updates':>8} {'changes/s':>10}")
    for n in args.nodes:
        for b in args.resolution:
            if b < 1:
                raise SystemExit(f"floor: --resolution must be >= 1, not {b}")
            # changes fed to the engine a run (a time per change: 1,000 a run)
            run = 1000 if b == 1 and not args.no_engine else b
            changes = args.changes - args.changes % run
            if changes <= 0:
                print(f"N={n} resolution {b}: fewer changes than one run; skipped")
                continue
            t0 = time.perf_counter()
            mc = min_corrections(n, changes, resolution=b)
            least = mc["corrections"] / changes
            emitted = consol = upd = cps = "-"
            if not args.no_engine:
                ec = engine_corrections(n, changes, batch=run,
                                        resolution="record" if b == 1 else "batch")
                emitted = f"{ec['emitted'] / changes:.1f}"
                consol = f"{ec['corrections'] / changes:.1f}"
                upd = f"{ec['updates'] / changes:.1f}"
                cps = f"{ec['changes_per_s']:.0f}"
            print(f"{n:8d} {b:8d} {changes:8d} {mc['moved'] / changes:7.1f} "
                  f"{least:7.1f} {emitted:>8} {consol:>8} {upd:>8} {cps:>10}"
                  f"   ({time.perf_counter() - t0:.0f} s)", flush=True)

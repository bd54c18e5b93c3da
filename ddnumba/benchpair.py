"""Paired runs in one process: ``python -m ddnumba.bench pair``.

``bench ab`` compares two versions of the code in alternating processes. On this
project's 2-core VM a process's speed wanders by up to 1.4x for seconds at a time, and
that noise falls on whole processes: at N=1e6, where each process loads its own
1.8 GB state, even the best of many runs did not settle to 5%.

This puts both sides in one process instead: two reachability sessions (A and B) load
the same graph, then are fed the same window batches alternately (ABBA), so each
batch is timed on both sides within a fraction of a second. The per-batch ratio
A/B (B's speed over A's) is paired on the batch, and its geometric mean gets a 95%
interval (Student's t on the logarithms). In an A/A run on this machine the log
ratios' standard deviation was 0.02-0.07 at N=1,000 and 0.08-0.10 at N=1e6, so 60-120
batches see about +-2% at either size.

Both sides run the same code, so what differs must be switched at run time: the file
given with ``--setup`` defines ``configure(side, session)``, called with ``side``
``"A"`` or ``"B"`` before that side's load and before each of its batches (a
:class:`ddnumba.bench.ReachSession`). It can set a module flag that Python code reads
(e.g. how state arrays are allocated) or a word of the session's compiled state.
Without ``--setup`` the sides are the same: an A/A run, which says how far the
comparison sees at that moment. Changes that cannot be switched at run time need
``bench ab``.

For a change inside the compiled kernels, ``--switch V`` needs no setup file: the
sequential loops' hashed states have a word nothing in the engine reads
(``kernels.hstate.M_SWITCH``, 0), which side B's get set to ``V`` before its warm-up
batch and each batch after (side A's stay 0; a load runs before the engine exists, so
both loads run with 0). An experiment tree's kernel then reads ``meta[M_SWITCH]`` to
choose between the old way and the new one.
"""
from __future__ import annotations

import gc
import os
import runpy
import time

import numpy as np

from . import benchab

__all__ = ["abba", "summarize_pairs", "compare_in_process", "load_configure",
           "switch_configure", "main"]


def abba(k):
    """The sides in the order batch ``k`` feeds them: A first for ``k % 4`` in
    (0, 3), B first otherwise (ABBA BAAB ...)."""
    return ("A", "B") if k % 4 in (0, 3) else ("B", "A")


def summarize_pairs(lat_a, lat_b, *, tolerance=0.02):
    """Figures of paired batch times (seconds, batch ``k`` of each side fed the same
    changes): ``speedup`` (B's speed over A's: geometric mean of ``lat_a / lat_b``),
    its 95% interval ``lo``..``hi``, the ``verdict`` for B (see
    :func:`ddnumba.benchab.verdict`), ``sum_ratio`` (A's total time over B's) and
    ``halves`` (the same over each half of the batches), ``sd_log`` (the log ratios'
    standard deviation) and each side's median batch time ``p50_ms_a`` /
    ``p50_ms_b``."""
    a = np.asarray(lat_a, dtype=np.float64)
    b = np.asarray(lat_b, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 1 or a.size < 2:
        raise ValueError("summarize_pairs: needs two equal-length series of at least "
                         "two batch times")
    if not (np.all(np.isfinite(a) & (a > 0)) and np.all(np.isfinite(b) & (b > 0))):
        raise ValueError("summarize_pairs: batch times must be positive and finite")
    g, lo, hi = benchab.pair_interval(a / b)
    h = a.size // 2
    return {"batches": int(a.size), "speedup": g, "lo": lo, "hi": hi,
            "verdict": benchab.verdict(lo, hi, tolerance),
            "sd_log": float(np.log(a / b).std(ddof=1)),
            "sum_ratio": float(a.sum() / b.sum()),
            "halves": [float(a[:h].sum() / b[:h].sum()),
                       float(a[h:].sum() / b[h:].sum())],
            "p50_ms_a": float(np.median(a) * 1e3), "p50_ms_b": float(np.median(b) * 1e3)}


def load_configure(path):
    """The ``configure(side, session)`` function a setup file defines."""
    ns = runpy.run_path(str(path), run_name="ddnumba_bench_pair_setup")
    fn = ns.get("configure")
    if not callable(fn):
        raise SystemExit(f"pair: {path} defines no function configure(side, session)")
    return fn


def switch_configure(value, then=None):
    """A ``configure(side, session)`` that sets the ``M_SWITCH`` word of the
    session's sequential loops' hashed states to ``value`` on side B and 0 on side A
    (nothing before the engine exists, i.e. before the load), after calling ``then``
    (another configure, e.g. a setup file's) if given. A loaded session with no such
    state (the Python engine, round-wise loops) stops the comparison: the switch
    would do nothing."""
    from .kernels.hstate import M_SWITCH

    def configure(side, session):
        if then is not None:
            then(side, session)
        if session.load_s is None:
            return
        nat = session.df._native
        if not nat or not any(nat.sequential):
            raise SystemExit("pair: --switch needs the native engine's sequential "
                             f"loops (side {side} runs {session.engine} with none)")
        # st[11] holds the loops' hashed states first (one per loop, by index), then
        # the root scope's aggregates', whose counters are laid out otherwise
        for li, seq in enumerate(nat.sequential):
            if seq:
                nat.st[11][li][2][M_SWITCH] = value if side == "B" else 0
    return configure


def compare_in_process(nodes, batch, batches, *, configure=None, tolerance=0.02,
                       engine="native", loops=None, out=print):
    """Load sessions A and B, feed each one warm-up batch, then ``batches`` batches of
    ``batch`` changes each to both (ABBA, see :func:`abba`), timing every one; check
    both final answers against scipy BFS. Returns the :func:`summarize_pairs`
    figures plus ``load_s`` (per side), ``check`` (both answers right) and
    ``lat`` (the batch times, per side)."""
    from .bench import ReachSession
    if batch < 1 or batches < 2:
        raise ValueError("compare_in_process: needs batch >= 1 and batches >= 2")
    configure = configure or (lambda side, session: None)
    sessions, loads = {}, {}
    for side in ("A", "B"):
        s = ReachSession(nodes, batch * (batches + 1), engine=engine, loops=loops)
        configure(side, s)
        loads[side] = s.load()
        out(f"pair: {side} loaded N={nodes} in {loads[side]:.2f} s ({s.engine} engine)")
        sessions[side] = s
    for side in ("A", "B"):
        configure(side, sessions[side])
        sessions[side].feed(batch, batch)
    lat = {"A": np.zeros(batches), "B": np.zeros(batches)}
    report = max(1, batches // 10)
    t0 = time.perf_counter()
    was = gc.isenabled()
    gc.disable()        # a collection would land on one side of a pair
    try:
        for k in range(batches):
            for side in abba(k):
                configure(side, sessions[side])
                lat[side][k] = sessions[side].feed(batch, batch)["latencies"][0]
            if (k + 1) % report == 0 or k + 1 == batches:
                out(f"pair: {k + 1}/{batches} batches, "
                    f"{time.perf_counter() - t0:.0f} s")
    finally:
        if was:
            gc.enable()
    check = all(sessions[side].recompute()[1] for side in ("A", "B"))
    s = summarize_pairs(lat["A"], lat["B"], tolerance=tolerance)
    s.update(load_s=loads, check=check, lat=lat)
    return s


def add_parser(sub):
    a = sub.add_parser("pair", help="compare two run-time settings in one process "
                                    "(paired batches)")
    a.add_argument("--nodes", type=int, default=1000)
    a.add_argument("--batch", type=int, default=1000)
    a.add_argument("--batches", type=int, default=60,
                   help="paired batches (default 60)")
    a.add_argument("--setup", default=None,
                   help="Python file defining configure(side, session), called with "
                        "side 'A' or 'B' before that side's load and each of its "
                        "batches (default: none, an A/A run)")
    a.add_argument("--switch", type=int, default=None, metavar="V",
                   help="set side B's loop states' switch word (hstate.M_SWITCH) to V "
                        "from its warm-up batch on, side A's to 0: for experiment "
                        "kernels that read it (with --setup, after its configure)")
    benchab.add_comparison_arguments(a)


def main(args):
    if args.batch < 1 or args.nodes < 1:
        raise SystemExit("pair: --nodes and --batch must be positive")
    if args.batches < 2:
        raise SystemExit("pair: --batches must be at least 2")
    benchab.check_tolerance("pair", args.tolerance)
    if args.setup and not os.path.isfile(args.setup):
        raise SystemExit(f"pair: --setup {args.setup}: no such file")
    configure = load_configure(args.setup) if args.setup else None
    what = []
    if args.setup:
        what.append("setup " + args.setup)
    if args.switch is not None:
        configure = switch_configure(args.switch, configure)
        what.append(f"B's switch word {args.switch}")
    print(f"pair: N={args.nodes} B={args.batch}, {args.batches} paired batches, "
          f"{', '.join(what) or 'A/A (no --setup or --switch)'}; two sessions "
          f"in this process (twice one session's memory)", flush=True)
    s = compare_in_process(args.nodes, args.batch, args.batches, configure=configure,
                           tolerance=args.tolerance, engine=args.engine,
                           loops=args.loops, out=lambda m: print(m, flush=True))
    words = {"faster": "B is faster", "slower": "B is slower",
             "same": f"no difference beyond {args.tolerance:.0%}",
             "undecided": "undecided (more --batches would narrow it)"}
    print(f"median batch: A {s['p50_ms_a']:.3f} ms, B {s['p50_ms_b']:.3f} ms")
    print(f"B's speed over A's, per batch: {s['speedup']:.4f}x, 95% interval "
          f"[{s['lo']:.4f}, {s['hi']:.4f}] over {s['batches']} batches (sd of log "
          f"ratios {s['sd_log']:.3f}): {words[s['verdict']]}")
    print(f"total time A/B: {s['sum_ratio']:.4f}x; halves "
          f"{s['halves'][0]:.4f}x and {s['halves'][1]:.4f}x; answers "
          f"{'both match BFS' if s['check'] else 'DO NOT both match BFS'}")
    if not s["check"]:
        raise SystemExit(1)

"""Graph algorithms (``ddnumba.algorithms``) against networkx, at every time.

Each test builds an algorithm over input collections, feeds a random stream of changes
(edge insertions, deletions that disconnect nodes, edges that come back, duplicate
edges; root/source changes), and compares the captured output accumulated at every time
with networkx run from scratch on the graph accumulated at that time. Graphs use edge
*presence*: an edge is in the graph when its accumulated count is positive.

Two feeding modes for one-dimensional times:

* ``step``: the changes of time ``t`` are inserted, the inputs advance to ``t + 1``, the
  dataflow runs, and ``at(t)`` is checked (one run per time);
* ``batch``: every change is inserted at its own time, the inputs advance past all of
  them, one run, then ``at(t)`` is checked for every ``t``.

Reachability is also checked with two-dimensional outer times on a small grid (product
order: a change at ``(1, 0)`` is not visible at ``(0, 3)``), and on the roadmap workload
at small scale (sliding window), where the arrangements' record counts must not grow
with the number of changes.
"""
from __future__ import annotations

import itertools
from collections import Counter

import networkx as nx
import numpy as np
import pytest

import ddnumba as dd
from ddnumba import algorithms as alg
from ddnumba.operators.iterate import LoopNode
from ddnumba.trace import Spine
from oracle import MODES as ORACLE_MODES

# every test here runs with the native engine's loops sequential and round-wise
pytestmark = pytest.mark.usefixtures("loop_mode")

# The oracle's modes (narrowed by DDNUMBA_ORACLE_MODES), in this module's order and
# names: the oracle's "all" is "batch" here.
MODES = tuple({"all": "batch"}.get(m, m) for m in ("step", "all") if m in ORACLE_MODES)


# ------------------------------------------------------------------ random streams
def edge_stream(rng, n_nodes, n_times, *, weights=None, init=None, per_time=(1, 3)):
    """Changes per time: ``changes[t]`` is a list of ``(row, diff)``.

    Time 0 loads ``init`` random edges; later times mix: insert a random edge (sometimes
    a duplicate of a present one), delete one copy of a present edge, re-insert an edge
    deleted earlier. Counts never go negative (1-D streams).
    """
    init = init if init is not None else n_nodes
    present = Counter()
    removed = []

    def rand_edge():
        s, d = (int(x) for x in rng.integers(0, n_nodes, 2))
        if weights is None:
            return (s, d)
        return (s, d, int(rng.integers(0, weights + 1)))

    changes = []
    first = [(rand_edge(), 1) for _ in range(init)]
    for e, _ in first:
        present[e] += 1
    changes.append(first)
    for _ in range(1, n_times):
        now = []
        for _ in range(int(rng.integers(per_time[0], per_time[1] + 1))):
            r = rng.random()
            live = [e for e, c in present.items() if c > 0]
            if r < 0.4 and live:
                e = live[int(rng.integers(len(live)))]
                removed.append(e)
                present[e] -= 1
                now.append((e, -1))
            elif r < 0.55 and removed:
                e = removed[int(rng.integers(len(removed)))]
                present[e] += 1
                now.append((e, 1))
            elif r < 0.65 and live:
                e = live[int(rng.integers(len(live)))]    # duplicate copy
                present[e] += 1
                now.append((e, 1))
            else:
                e = rand_edge()
                present[e] += 1
                now.append((e, 1))
        changes.append(now)
    return changes


def node_stream(rng, n_nodes, n_times, *, k=2):
    """Root changes: ``k`` roots at time 0, then occasionally a root comes or goes."""
    present = Counter()
    changes = [[]]
    for r in rng.choice(n_nodes, size=k, replace=False):
        present[int(r)] += 1
        changes[0].append(((int(r),), 1))
    for _ in range(1, n_times):
        now = []
        if rng.random() < 0.3:
            live = [r for r, c in present.items() if c > 0]
            if live and rng.random() < 0.5:
                r = live[int(rng.integers(len(live)))]
                present[r] -= 1
                now.append(((r,), -1))
            else:
                r = int(rng.integers(n_nodes))
                present[r] += 1
                now.append(((r,), 1))
        changes.append(now)
    return changes


def accumulated(changes, t):
    """Rows with positive accumulated count at 1-D time ``t``."""
    acc = Counter()
    for s in range(t + 1):
        for row, d in changes[s]:
            acc[row] += d
    return {row for row, c in acc.items() if c > 0}


# ---------------------------------------------------------------------- feeding
def feed(handle, changes_at, time):
    """Insert ``[(row, diff)]`` at ``time`` through ``handle.update``."""
    if not changes_at:
        return
    rows = np.array([r for r, _ in changes_at], dtype=np.int64)
    rows = rows.reshape(len(changes_at), -1)
    diffs = np.array([d for _, d in changes_at], dtype=np.int64)
    handle.update(*(rows[:, i] for i in range(rows.shape[1])), time=time, diff=diffs)


def result_set(cap, t):
    """The captured collection at ``t`` as a set of row tuples; every count must be 1."""
    tbl = cap.at(t)
    cols = [tbl.column(i).to_pylist() for i in range(tbl.num_columns)]
    rows = list(zip(*cols[:-1])) if len(cols) > 1 else []
    counts = cols[-1]
    bad = [(r, c) for r, c in zip(rows, counts) if c != 1]
    assert not bad, f"at {t}: rows with count != 1: {bad[:5]}"
    return set(rows)


def run_and_check(handles, streams, cap, oracle, mode, label):
    """Feed 1-D ``streams`` (one per handle) in ``mode`` and compare every time."""
    n_times = len(streams[0])

    def check(t):
        graphs = [accumulated(s, t) for s in streams]
        want = oracle(*graphs)
        got = result_set(cap, t)
        assert got == want, (f"{label} [{mode}] at t={t}: missing "
                             f"{sorted(want - got)[:8]}, extra {sorted(got - want)[:8]}")

    df = handles[0].df
    if mode == "step":
        for t in range(n_times):
            for h, s in zip(handles, streams):
                feed(h, s[t], t)
                h.advance_to(t + 1)
            df.run()
            check(t)
    else:
        for t in range(n_times):
            for h, s in zip(handles, streams):
                feed(h, s[t], t)
        for h in handles:
            h.advance_to(n_times)
        df.run()
        for t in range(n_times):
            check(t)


# ----------------------------------------------------------------------- oracles
def digraph(edges, extra_nodes=()):
    g = nx.DiGraph()
    g.add_nodes_from(extra_nodes)
    g.add_edges_from((e[0], e[1]) for e in edges)
    return g


def nx_reachability(roots, edges):
    g = digraph(edges, (r for (r,) in roots))
    return {(r, n) for (r,) in roots for n in nx.descendants(g, r) | {r}}


def nx_bfs(roots, edges):
    g = digraph(edges, (r for (r,) in roots))
    best = {}
    for (r,) in roots:
        for n, d in nx.single_source_shortest_path_length(g, r).items():
            best[n] = min(d, best.get(n, d))
    return set(best.items())


def nx_cc(edges, nodes=()):
    g = nx.Graph()
    g.add_nodes_from(n for (n,) in nodes)
    g.add_edges_from(edges)
    return {(n, min(comp)) for comp in nx.connected_components(g) for n in comp}


def nx_sssp(sources, wedges):
    g = nx.DiGraph()
    g.add_nodes_from(s for (s,) in sources)
    for s, d, w in sorted(wedges, key=lambda e: -e[2]):
        g.add_edge(s, d, weight=w)                # lightest parallel edge added last
    if not sources:
        return set()
    dist = nx.multi_source_dijkstra_path_length(g, {s for (s,) in sources})
    return set(dist.items())


def nx_scc(edges):
    g = digraph(edges)
    return {(n, min(comp)) for comp in nx.strongly_connected_components(g) for n in comp}


def nx_triangles(edges):
    g = nx.Graph()
    g.add_edges_from((a, b) for a, b in edges if a != b)
    out = set()
    for a, b in g.edges():
        for c in nx.common_neighbors(g, a, b):
            out.add(tuple(sorted((a, b, c))))
    return out


# --------------------------------------------------------------------- the tests
SEEDS = (0, 1, 2, 3)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("seed", SEEDS)
def test_reachability(seed, mode):
    rng = np.random.default_rng(100 + seed)
    n, T = int(rng.integers(8, 21)), 12
    df = dd.Dataflow()
    ri, roots = df.new_input(["node"])
    ei, edges = df.new_input(["src", "dst"])
    cap = alg.reachability(roots, edges).capture()
    assert cap.names == ["root", "node"]
    streams = [node_stream(rng, n, T), edge_stream(rng, n, T, init=int(1.6 * n))]
    run_and_check([ri, ei], streams, cap, nx_reachability, mode, "reachability")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("seed", SEEDS)
def test_bfs(seed, mode):
    rng = np.random.default_rng(200 + seed)
    n, T = int(rng.integers(8, 21)), 12
    df = dd.Dataflow()
    ri, roots = df.new_input(["node"])
    ei, edges = df.new_input(["src", "dst"])
    cap = alg.bfs(roots, edges).capture()
    assert cap.names == ["node", "distance"]
    streams = [node_stream(rng, n, T), edge_stream(rng, n, T, init=int(1.6 * n))]
    run_and_check([ri, ei], streams, cap, nx_bfs, mode, "bfs")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("seed", SEEDS)
def test_connected_components(seed, mode):
    rng = np.random.default_rng(300 + seed)
    n, T = int(rng.integers(8, 21)), 12
    df = dd.Dataflow()
    ei, edges = df.new_input(["src", "dst"])
    cap = alg.connected_components(edges).capture()
    assert cap.names == ["node", "label"]
    streams = [edge_stream(rng, n, T, init=n // 2)]
    run_and_check([ei], streams, cap, nx_cc, mode, "connected_components")


@pytest.mark.parametrize("mode", MODES)
def test_connected_components_with_nodes(mode):
    rng = np.random.default_rng(350)
    n, T = 14, 8
    df = dd.Dataflow()
    ei, edges = df.new_input(["src", "dst"])
    ni, nodes = df.new_input(["n"])
    cap = alg.connected_components(edges, nodes).capture()
    streams = [edge_stream(rng, n, T, init=5), node_stream(rng, n + 3, T, k=3)]
    run_and_check([ei, ni], streams, cap, nx_cc, mode, "connected_components(nodes)")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("seed", SEEDS)
def test_sssp(seed, mode):
    rng = np.random.default_rng(400 + seed)
    n, T = int(rng.integers(8, 21)), 12
    df = dd.Dataflow()
    si, sources = df.new_input(["node"])
    ei, edges = df.new_input(["src", "dst", "weight"])
    cap = alg.sssp(sources, edges).capture()
    assert cap.names == ["node", "distance"]
    streams = [node_stream(rng, n, T), edge_stream(rng, n, T, weights=4, init=2 * n)]
    run_and_check([si, ei], streams, cap, nx_sssp, mode, "sssp")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("seed", SEEDS)
def test_strongly_connected_components(seed, mode):
    rng = np.random.default_rng(500 + seed)
    n, T = int(rng.integers(8, 15)), 10
    df = dd.Dataflow()
    ei, edges = df.new_input(["src", "dst"])
    cap = alg.strongly_connected_components(edges).capture()
    assert cap.names == ["node", "label"]
    # Densities from mostly-singleton SCCs to one large SCC.
    streams = [edge_stream(rng, n, T, init=int((1.0 + 0.4 * seed) * n))]
    run_and_check([ei], streams, cap, nx_scc, mode, "strongly_connected_components")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("seed", SEEDS)
def test_triangles(seed, mode):
    rng = np.random.default_rng(600 + seed)
    n, T = int(rng.integers(8, 21)), 12
    df = dd.Dataflow()
    ei, edges = df.new_input(["src", "dst"])
    cap = alg.triangles(edges).capture()
    assert cap.names == ["a", "b", "c"]
    streams = [edge_stream(rng, n, T, init=3 * n, per_time=(2, 6))]
    run_and_check([ei], streams, cap, nx_triangles, mode, "triangles")


def with_absent_rows(rng, changes, make_row, k=2):
    """``changes`` plus, at some times, removals of rows (from ``make_row(rng)``) that
    may never have been inserted: counts that go negative, which mean "absent"."""
    out = [list(c) for c in changes]
    for t in range(len(out)):
        for _ in range(int(rng.integers(0, k + 1))):
            out[t].append((make_row(rng), -1))
    return out


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("seed", SEEDS)
def test_negative_counts_mean_absent(seed, mode):
    # Triangles over edges whose reversed copies get negative counts (they must not
    # cancel the edge), and connected components over extra nodes with negative
    # counts (they must not cancel an edge's endpoint), against networkx on the
    # present rows at every time.
    rng = np.random.default_rng(650 + seed)
    n, T = int(rng.integers(6, 12)), 10
    df = dd.Dataflow()
    ei, edges = df.new_input(["src", "dst"])
    ni, nodes = df.new_input(["n"])
    tri = alg.triangles(edges).capture()
    base = edge_stream(rng, n, T, init=2 * n, per_time=(1, 4))
    rev = [[((r[1], r[0]), -d) for r, d in c if d > 0 and rng.random() < 0.5]
           for c in base]
    es = [a + b for a, b in zip(base, rev)]
    ns = with_absent_rows(rng, node_stream(rng, n + 2, T, k=3),
                          lambda g: (int(g.integers(0, n + 2)),))
    run_and_check([ei, ni], [es, ns], tri, lambda e, _n: nx_triangles(e), mode,
                  "triangles (negative counts)")
    df2 = dd.Dataflow()
    ei2, edges2 = df2.new_input(["src", "dst"])
    ni2, nodes2 = df2.new_input(["n"])
    cc = alg.connected_components(edges2, nodes2).capture()
    run_and_check([ei2, ni2], [es, ns], cc, nx_cc, mode, "cc (negative counts)")
    # and the smallest cases: (3, 1) absent next to a present (1, 3); nodes 1 and 5
    # absent from `nodes` while edges hold them (5 has one neighbour, so a -1 would
    # cancel it; its label is still its own)
    df3 = dd.Dataflow()
    ei3, edges3 = df3.new_input(["src", "dst"])
    ni3, nodes3 = df3.new_input(["n"])
    tri3 = alg.triangles(edges3).capture()
    cc3 = alg.connected_components(edges3, nodes3).capture()
    ei3.insert([1, 2, 1, 5], [2, 3, 3, 6], time=0)
    ei3.remove([3], [1], time=0)
    ni3.remove([1, 5], time=0)
    ei3.advance_to(1)
    ni3.advance_to(1)
    df3.run()
    assert result_set(tri3, 0) == {(1, 2, 3)}
    assert result_set(cc3, 0) == {(1, 1), (2, 1), (3, 1), (5, 5), (6, 5)}


def test_sssp_refuses_a_distance_beyond_int64():
    # Two edges of weight 2**62: the second hop's distance would wrap to -2**63.
    df = dd.Dataflow()
    si, sources = df.new_input(["node"])
    ei, edges = df.new_input(["src", "dst", "weight"])
    cap = alg.sssp(sources, edges).capture()
    si.insert([0], time=0)
    ei.insert([0, 1], [1, 2], [2**62, 2**62 - 1], time=0)
    si.advance_to(1)
    ei.advance_to(1)
    df.run()                                     # 2**63 - 1 itself fits
    assert result_set(cap, 0) == {(0, 0), (1, 2**62), (2, 2**63 - 1)}
    ei.insert([2], [3], [1], time=1)
    si.advance_to(2)
    ei.advance_to(2)
    from ddnumba.workers import WorkerError
    with pytest.raises((OverflowError, WorkerError),
                       match="sssp: a distance leaves int64") as e:
        df.run()
    # (test_workers reruns this file with workers, where a worker may raise it)
    assert e.type is OverflowError or e.value.kind == "OverflowError"


def test_fixed_examples():
    """Small hand-checked graphs, including self-loops and reversed duplicates."""
    df = dd.Dataflow()
    ei, edges = df.new_input(["src", "dst"])
    ri, roots = df.new_input(["node"])
    reach = alg.reachability(roots, edges).capture()
    tri = alg.triangles(edges).capture()
    cc = alg.connected_components(edges).capture()
    src = [1, 2, 3, 3, 4, 5, 5, 2, 1]
    dst = [2, 3, 1, 4, 4, 6, 6, 1, 3]
    ei.insert(src, dst, time=0)
    ri.insert([3, 5], time=0)
    ei.remove([3], [4], time=1)
    for h in (ei, ri):
        h.close()
    df.run()
    assert result_set(reach, 0) == {(3, 3), (3, 1), (3, 2), (3, 4), (5, 5), (5, 6)}
    assert result_set(reach, 1) == {(3, 3), (3, 1), (3, 2), (5, 5), (5, 6)}
    assert result_set(tri, 0) == {(1, 2, 3)}
    assert result_set(cc, 0) == {(1, 1), (2, 1), (3, 1), (4, 1), (5, 5), (6, 5)}
    assert result_set(cc, 1) == {(1, 1), (2, 1), (3, 1), (4, 4), (5, 5), (6, 5)}


def test_scc_fixed_example():
    """Two cycles joined one way, a self-loop, a duplicate; then the bridge back."""
    df = dd.Dataflow()
    ei, edges = df.new_input(["src", "dst"])
    scc = alg.strongly_connected_components(edges).capture()
    ei.insert([1, 2, 3, 3, 4, 5, 5, 6, 7], [2, 3, 1, 4, 5, 4, 6, 6, 6], time=0)
    ei.insert([6], [3], time=1)           # closes 3 -> 4 -> 5 -> 6 -> 3
    ei.remove([2], [3], time=2)           # breaks 1 -> 2 -> 3 -> 1
    ei.close()
    df.run()
    assert result_set(scc, 0) == {(1, 1), (2, 1), (3, 1), (4, 4), (5, 4), (6, 6), (7, 7)}
    assert result_set(scc, 1) == {(1, 1), (2, 1), (3, 1), (4, 1), (5, 1), (6, 1), (7, 7)}
    assert result_set(scc, 2) == {(1, 1), (2, 2), (3, 3), (4, 3), (5, 3), (6, 3), (7, 7)}


def test_bfs_long_path():
    """Distances up to 9 on a path; a shortcut comes and goes; the path breaks."""
    df = dd.Dataflow()
    ri, roots = df.new_input(["node"])
    ei, edges = df.new_input(["src", "dst"])
    dist = alg.bfs(roots, edges).capture()
    sp = alg.sssp(roots, edges.map(lambda s, d: (s, d, 2 * s + 1))).capture()
    ri.insert([0], time=0)
    ei.insert(list(range(9)), list(range(1, 10)), time=0)
    ei.insert([0], [7], time=1)
    ei.remove([0], [7], time=2)
    ei.remove([4], [5], time=3)
    ri.close()
    ei.close()
    df.run()
    path = {(v, v) for v in range(10)}
    assert result_set(dist, 0) == path
    assert result_set(dist, 1) == {(v, v) for v in range(7)} | {(7, 1), (8, 2), (9, 3)}
    assert result_set(dist, 2) == path
    assert result_set(dist, 3) == {(v, v) for v in range(5)}
    # Weight of edge s -> s+1 is 2s+1, so distance(v) = v^2 along the path.
    assert result_set(sp, 0) == {(v, v * v) for v in range(10)}
    assert result_set(sp, 1) == ({(v, v * v) for v in range(7)}
                                 | {(7, 1), (8, 1 + 15), (9, 1 + 15 + 17)})
    assert result_set(sp, 3) == {(v, v * v) for v in range(5)}


def test_argument_checks():
    df = dd.Dataflow()
    _, e3 = df.new_input(["a", "b", "c"])
    _, r = df.new_input(["r"])
    _, e2 = df.new_input(["s", "d"])
    with pytest.raises(ValueError, match="edges"):
        alg.reachability(r, e3)
    with pytest.raises(ValueError, match="weighted_edges"):
        alg.sssp(r, r)
    with pytest.raises(TypeError, match="roots"):
        alg.bfs([1, 2], e2)


# --------------------------------------------------------- 2-D outer times (grid)
GRID = 3          # times (i, j) with 0 <= i, j <= GRID


def grid_points():
    return list(itertools.product(range(GRID + 1), repeat=2))


def grid_stream(rng, n_nodes, n_changes, *, arity=2, init=None):
    """``[(row, time, diff)]`` on the grid; removals may make product-order counts
    negative at some times (then the row is absent there)."""
    out = []
    for _ in range(init if init is not None else n_nodes):
        out.append((tuple(int(x) for x in rng.integers(0, n_nodes, arity)), (0, 0), 1))
    for _ in range(n_changes):
        t = tuple(int(x) for x in rng.integers(0, GRID + 1, 2))
        if rng.random() < 0.45:
            row = out[int(rng.integers(len(out)))][0]
            out.append((row, t, -1))
        else:
            out.append((tuple(int(x) for x in rng.integers(0, n_nodes, arity)), t, 1))
    return out


def grid_accumulated(stream, t):
    acc = Counter()
    for row, s, d in stream:
        if s[0] <= t[0] and s[1] <= t[1]:
            acc[row] += d
    return {row for row, c in acc.items() if c > 0}


def grid_feed(handle, stream, select=lambda t: True):
    part = [(r, t, d) for r, t, d in stream if select(t)]
    if not part:
        return
    rows = np.array([r for r, _, _ in part], dtype=np.int64).reshape(len(part), -1)
    handle.update(*(rows[:, i] for i in range(rows.shape[1])),
                  time=np.array([t for _, t, _ in part], dtype=np.int64),
                  diff=np.array([d for _, _, d in part], dtype=np.int64))


@pytest.mark.parametrize("mode", ["all", "rows"])
@pytest.mark.parametrize("seed", SEEDS)
def test_reachability_2d(seed, mode):
    rng = np.random.default_rng(700 + seed)
    n = int(rng.integers(8, 16))
    df = dd.Dataflow(time_dims=2)
    ri, roots = df.new_input(["node"])
    ei, edges = df.new_input(["src", "dst"])
    cap = alg.reachability(roots, edges).capture()
    rstream = grid_stream(rng, n, 3, arity=1, init=2)
    estream = grid_stream(rng, n, 14)

    def check(t):
        want = nx_reachability(grid_accumulated(rstream, t), grid_accumulated(estream, t))
        got = result_set(cap, t)
        assert got == want, (f"reachability 2-D [{mode}] at {t}: missing "
                             f"{sorted(want - got)[:8]}, extra {sorted(got - want)[:8]}")

    if mode == "all":
        grid_feed(ri, rstream)
        grid_feed(ei, estream)
        ri.close()
        ei.close()
        df.run()
        for t in grid_points():
            check(t)
    else:
        # One first coordinate at a time: (i, *) completes after advancing to (i+1, 0).
        for i in range(GRID + 1):
            grid_feed(ri, rstream, lambda t: t[0] == i)
            grid_feed(ei, estream, lambda t: t[0] == i)
            ri.advance_to((i + 1, 0))
            ei.advance_to((i + 1, 0))
            df.run()
            for t in grid_points():
                if t[0] <= i:
                    check(t)
                else:
                    assert not cap.done(t)


# name -> (build(inputs...), input column names, grid-stream kwargs per input, oracle)
ALGOS_2D = {
    "bfs": (alg.bfs, [["node"], ["src", "dst"]],
            [dict(arity=1, init=2, n_changes=3), dict(n_changes=14)], nx_bfs),
    "connected_components": (alg.connected_components, [["src", "dst"]],
                             [dict(init=6, n_changes=12)], nx_cc),
    "sssp": (alg.sssp, [["node"], ["src", "dst", "weight"]],
             [dict(arity=1, init=2, n_changes=3), dict(arity=3, n_changes=14)], nx_sssp),
    "strongly_connected_components": (alg.strongly_connected_components,
                                      [["src", "dst"]], [dict(n_changes=14)], nx_scc),
    "triangles": (alg.triangles, [["src", "dst"]], [dict(init=24, n_changes=16)],
                  nx_triangles),
}


@pytest.mark.parametrize("name", sorted(ALGOS_2D))
def test_algorithms_2d(name):
    """Every algorithm on a 2-D grid of times, all changes in one run."""
    build, cols, kws, oracle = ALGOS_2D[name]
    rng = np.random.default_rng(800 + sorted(ALGOS_2D).index(name))
    n = 10
    df = dd.Dataflow(time_dims=2)
    handles, colls = zip(*(df.new_input(c) for c in cols))
    cap = build(*colls).capture()
    streams = []
    for kw in kws:
        kw = dict(kw)
        arity = kw.pop("arity", 2)
        st = grid_stream(rng, n, kw.pop("n_changes"), arity=arity,
                         init=kw.pop("init", None))
        if arity == 3:                       # small weights in the last column
            st = [((r[0], r[1], r[2] % 4), t, d) for r, t, d in st]
        streams.append(st)
    for h, st in zip(handles, streams):
        grid_feed(h, st)
        h.close()
    df.run()
    for t in grid_points():
        want = oracle(*(grid_accumulated(st, t) for st in streams))
        got = result_set(cap, t)
        assert got == want, (f"{name} 2-D at {t}: missing {sorted(want - got)[:8]}, "
                             f"extra {sorted(got - want)[:8]}")


# ------------------------------------------------- roadmap workload (small scale)
def arrangement_records(df):
    """Records held by every trace (arrangements' spines and reduce output traces)."""
    total = 0

    def nodes(scope_nodes):
        for node in scope_nodes:
            yield node
            if isinstance(node, LoopNode):
                yield from node.child.all_nodes()

    for node in nodes(df.root.nodes):
        for value in vars(node).values():
            if isinstance(value, Spine):
                total += len(value)
    return total


def test_roadmap_reachability_sliding_window():
    R, N, M = 10, 1000, 2000
    rng = np.random.default_rng(2024)
    df = dd.Dataflow()
    ri, roots = df.new_input(["node"])
    ei, edges = df.new_input(["src", "dst"])
    cap = alg.reachability(roots, edges).capture()
    root_ids = [int(r) for r in rng.choice(N, size=R, replace=False)]
    window = [tuple(int(x) for x in rng.integers(0, N, 2)) for _ in range(M)]
    ri.insert(root_ids, time=0)
    ei.insert([s for s, _ in window], [d for _, d in window], time=0)
    ri.close()
    ei.advance_to(1)
    df.run()
    live = Counter(window)
    oldest = 0                      # window[oldest:] is the live window

    def expected():
        g = nx.DiGraph()
        g.add_nodes_from(root_ids)
        g.add_edges_from(e for e, c in live.items() if c > 0)
        return {(r, n) for r in root_ids for n in nx.descendants(g, r) | {r}}

    assert result_set(cap, 0) == expected()
    t = 0
    records = {}
    schedule = [1] * 30 + [100] * 4           # runs end at steps 30, 130, 230, 330, 430
    for b in schedule:
        for _ in range(b):
            t += 1
            old = window[oldest]
            oldest += 1
            new = tuple(int(x) for x in rng.integers(0, N, 2))
            window.append(new)
            live[old] -= 1
            live[new] += 1
            ei.update([old[0], new[0]], [old[1], new[1]], time=t, diff=[-1, 1])
        ei.advance_to(t + 1)
        df.run()
        got = result_set(cap, t)
        want = expected()
        assert got == want, (f"roadmap at step {t}: missing {sorted(want - got)[:5]}, "
                             f"extra {sorted(got - want)[:5]}")
        records[t] = arrangement_records(df)
    assert records[430] <= 1.5 * records[230], records

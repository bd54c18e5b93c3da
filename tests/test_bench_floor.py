"""The work floor of the reachability benchmark (``ddnumba.benchfloor``): the least
corrections any differential implementation must make, checked against networkx, and
the native engine's loop checked to make exactly those once consolidated."""
import networkx as nx
import numpy as np
import pytest

from ddnumba import benchfloor
from ddnumba.bench import workload

pytest.importorskip("scipy")


def _nx_floor(n, stream, changes, resolution):
    """Brute force: breadth-first depths with networkx at every time, and the
    corrections they force (2 for a pair at another depth, 1 for one that appears or
    vanishes)."""
    src, dst, roots, new_src, new_dst = stream
    m = len(src)
    s = np.concatenate([src, new_src])
    d = np.concatenate([dst, new_dst])

    def depths(j):
        g = nx.DiGraph()
        g.add_nodes_from(range(n))
        g.add_edges_from(zip(s[j:j + m].tolist(), d[j:j + m].tolist()))
        return {(r, v): k for r in roots.tolist()
                for v, k in nx.single_source_shortest_path_length(g, r).items()}

    prev = depths(0)
    total = {"moved": 0, "appeared": 0, "vanished": 0}
    for j in range(resolution, changes + 1, resolution):
        cur = depths(j)
        total["moved"] += sum(1 for p in cur if p in prev and prev[p] != cur[p])
        total["appeared"] += sum(1 for p in cur if p not in prev)
        total["vanished"] += sum(1 for p in prev if p not in cur)
        prev = cur
    total["corrections"] = 2 * total["moved"] + total["appeared"] + total["vanished"]
    return total


def test_floor_by_hand():
    # a chain 0 -> 1 -> 2 -> 3 from root 0; step 1 removes 0->1 and adds 0->2 (1
    # vanishes, 2 and 3 move up), step 2 removes 1->2 and adds 0->3 (3 moves up)
    stream = (np.array([0, 1, 2]), np.array([1, 2, 3]), np.array([0]),
              np.array([0, 0]), np.array([2, 3]))
    one = benchfloor.min_corrections(4, 2, stream=stream)
    assert one == {"moved": 3, "appeared": 0, "vanished": 1, "corrections": 7,
                   "times": 2}
    both = benchfloor.min_corrections(4, 2, resolution=2, stream=stream)
    assert both == {"moved": 2, "appeared": 0, "vanished": 1, "corrections": 5,
                    "times": 1}


@pytest.mark.parametrize("seed", [3, 11])
@pytest.mark.parametrize("resolution", [1, 5])
def test_floor_matches_networkx(seed, resolution):
    n, changes = 40, 60
    stream = workload(n, changes, roots=3, seed=seed)
    got = benchfloor.min_corrections(n, changes, resolution=resolution, stream=stream)
    want = _nx_floor(n, stream, changes, resolution)
    assert got["corrections"] > 0
    for k in ("moved", "appeared", "vanished", "corrections"):
        assert got[k] == want[k], k


def _nx_sharing(n, stream, changes, batch):
    """Brute force for ``batch_sharing``: depths by networkx at every time, the loop
    variable's changes ``(root, node, iteration)``, and the ``distinct``'s rows, one
    per change and edge ``node -> dst`` present (duplicate edges each count)."""
    src, dst, roots, new_src, new_dst = stream
    m = len(src)
    s = np.concatenate([src, new_src]).tolist()
    d = np.concatenate([dst, new_dst]).tolist()

    def depths(j):
        g = nx.DiGraph()
        g.add_nodes_from(range(n))
        g.add_edges_from(zip(s[j:j + m], d[j:j + m]))
        return {(r, v): k for r in roots.tolist()
                for v, k in nx.single_source_shortest_path_length(g, r).items()}

    total = dict.fromkeys(("variable", "node_time", "node_batch", "pair_rows",
                           "pair_time", "pair_batch"), 0)
    total["times"] = changes
    prev = depths(0)
    nodes, pairs = set(), set()
    for j in range(1, changes + 1):
        cur = depths(j)
        events = [(r, v, prev[r, v]) for (r, v) in prev if cur.get((r, v)) != prev[r, v]]
        events += [(r, v, cur[r, v]) for (r, v) in cur if prev.get((r, v)) != cur[r, v]]
        total["variable"] += len(events)
        node_keys = {(v, i) for _, v, i in events}
        rows = [(r, w, i + 1) for r, v, i in events
                for a, w in zip(s[j:j + m], d[j:j + m]) if a == v]
        total["pair_rows"] += len(rows)
        total["node_time"] += len(node_keys)
        total["pair_time"] += len(set(rows))
        nodes |= node_keys
        pairs |= set(rows)
        if j % batch == 0:
            total["node_batch"] += len(nodes)
            total["pair_batch"] += len(pairs)
            nodes, pairs = set(), set()
        prev = cur
    return total


def test_sharing_by_hand():
    # the chain of test_floor_by_hand. Time 1: 1 vanishes (at iteration 1), 2 and 3
    # move up (2 -> 1, 3 -> 2): five changes of five (node, iteration); the edges
    # 1 -> 2 and 2 -> 3 send three rows, (0, 2, 2), (0, 3, 3), (0, 3, 2). Time 2: 3
    # moves up again (2 -> 1), with no edge out of 3. One batch of both times shares
    # (3, 2).
    stream = (np.array([0, 1, 2]), np.array([1, 2, 3]), np.array([0]),
              np.array([0, 0]), np.array([2, 3]))
    one = benchfloor.batch_sharing(4, 2, 1, stream=stream)
    assert one == {"times": 2, "variable": 7, "node_time": 7, "node_batch": 7,
                   "pair_rows": 3, "pair_time": 3, "pair_batch": 3}
    both = benchfloor.batch_sharing(4, 2, 2, stream=stream)
    assert both == dict(one, node_batch=6)


@pytest.mark.parametrize("seed", [3, 11])
@pytest.mark.parametrize("batch", [1, 4, 30])
def test_sharing_matches_networkx(seed, batch):
    n, changes = 40, 60
    stream = workload(n, changes, roots=3, seed=seed)
    got = benchfloor.batch_sharing(n, changes, batch, stream=stream)
    want = _nx_sharing(n, stream, changes, batch)
    assert got["pair_batch"] > 0 and got["variable"] > 0
    if batch > 1:
        assert got["node_batch"] < got["node_time"]
    assert got == want
    # the variable's changes are the floor's corrections
    floor = benchfloor.min_corrections(n, changes, stream=stream)
    assert got["variable"] == floor["corrections"]


def test_sharing_rejects_bad_arguments_and_prints(capsys):
    with pytest.raises(ValueError, match="multiple"):
        benchfloor.batch_sharing(10, 10, 3)
    with pytest.raises(ValueError, match="multiple"):
        benchfloor.batch_sharing(10, 10, 0)
    with pytest.raises(ValueError, match="fewer than"):
        benchfloor.batch_sharing(10, 6, 1, stream=workload(10, 5))
    from ddnumba.bench import main
    main(["sharing", "--nodes", "40", "--changes", "30", "--batch", "1", "10", "50"])
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 5 and out[2].split()[:3] == ["40", "1", "30"]
    assert out[2].split()[6] == "1.00" and out[2].split()[10] == "1.00"
    assert out[3].split()[:3] == ["40", "10", "30"]
    assert "skipped" in out[4]
    with pytest.raises(SystemExit, match="--batch must be >= 1"):
        main(["sharing", "--nodes", "40", "--changes", "30", "--batch", "0"])


def test_floor_rejects_bad_arguments():
    with pytest.raises(ValueError, match="resolution"):
        benchfloor.min_corrections(10, 10, resolution=0)
    with pytest.raises(ValueError, match="multiple"):
        benchfloor.min_corrections(10, 10, resolution=3)
    stream = workload(10, 5)
    with pytest.raises(ValueError, match="fewer than"):
        benchfloor.min_corrections(10, 6, stream=stream)


@pytest.mark.parametrize("n,batch,resolution", [(200, 50, "record"), (200, 50, "batch"),
                                                (300, 1, "record"), (300, 7, "batch")])
def test_engine_does_the_least_work(n, batch, resolution):
    # The loop variable's consolidated changes are the unique differences of the
    # loop's result over (time, iteration): exactly the floor, if the engine's
    # iterations hold the breadth-first depths. The corrections it emits can only be
    # more (premature ones cancel in the queue they wait in, before any join sees them).
    changes = 350 - 350 % batch
    floor = benchfloor.min_corrections(
        n, changes, resolution=1 if resolution == "record" else batch)
    got = benchfloor.engine_corrections(n, changes, batch=batch, resolution=resolution)
    assert floor["corrections"] > 100
    assert got["corrections"] == floor["corrections"]
    assert floor["corrections"] <= got["emitted"] <= 1.5 * floor["corrections"]
    assert got["updates"] > got["emitted"]


def test_memlat_kernels():
    from ddnumba.kernels.memlat import LINE_WORDS, chase, cycle_links, gather_sum
    lines = 37
    a = np.zeros(lines * LINE_WORDS, np.int64)
    order = np.random.default_rng(5).permutation(lines).astype(np.int64)
    cycle_links(a, order)
    start = int(order[0]) * LINE_WORDS
    seen = [int(chase(a, start, k)) for k in range(lines)]
    assert seen == [int(x) * LINE_WORDS for x in order]     # the order, each line once
    assert chase(a, start, lines) == start                    # and back
    idx = np.random.default_rng(6).integers(0, lines, 500) * LINE_WORDS
    assert gather_sum(a, idx) == int(a[idx].sum())


@pytest.mark.parametrize("lines", [3, 4096, 4097, 50_000])
def test_spread_cycle_visits_its_lines_evenly_spaced_once_each(lines):
    from ddnumba.kernels.memlat import LINE_WORDS, chase
    a = np.full(lines * LINE_WORDS, -7, np.int64)
    at = benchfloor.spread_cycle(a, np.random.default_rng(3))
    k = min(lines, benchfloor.SPREAD_LINES)
    step = lines // k
    # the lines taken: k of them, the first word of a line, one in each window of
    # step lines
    assert (at % LINE_WORDS == 0).all()
    assert np.array_equal(np.sort(at) // LINE_WORDS // step, np.arange(k))
    # one cycle through all of them, in the returned order
    p, seen = int(at[0]), []
    for _ in range(k):
        seen.append(p)
        p = int(a[p])
    assert seen == at.tolist() and p == at[0]
    assert chase(a, int(at[0]), k) == at[0] and chase(a, int(at[0]), 1) == at[1 % k]
    # nothing else written
    rest = np.ones(a.shape[0], bool)
    rest[at] = False
    assert (a[rest] == -7).all()


def test_memory_latency_and_cli(capsys):
    rows = benchfloor.memory_latency([0.01, 0.05], steps=2000)
    assert [r["mib"] for r in rows] == [0.01, 0.05]
    assert all(r["dependent_ns"] > 0 and r["independent_ns"] > 0 and r["spread_ns"] > 0
               for r in rows)
    from ddnumba.bench import main
    main(["floor", "--nodes", "40", "--changes", "30", "--resolution", "1", "10",
          "--no-engine"])
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 4 and out[2].split()[:3] == ["40", "1", "30"]
    assert out[3].split()[:3] == ["40", "10", "30"]
    main(["memory", "--mib", "0.02", "--steps", "1000", "--touch", "0"])
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2 and out[1].split()[0] == "0.02" and len(out[1].split()) == 4
    assert out[0].split()[-2:] == ["spread", "ns"]
    main(["memory", "--mib", "0.02", "--steps", "1000", "--touch", "4"])
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 3 and out[2].startswith("first writes over 4 MiB: ")


def test_first_touch_times_fresh_and_recycled_memory():
    r = benchfloor.first_touch(8)
    assert r["mib"] == 8 and r["fresh_s_per_gib"] > 0 and r["recycled_s_per_gib"] > 0
    for bad in (0, -1, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="must be positive"):
            benchfloor.first_touch(bad)

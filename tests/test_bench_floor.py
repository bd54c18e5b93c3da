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


def test_memory_latency_and_cli(capsys):
    rows = benchfloor.memory_latency([0.01, 0.05], steps=2000)
    assert [r["mib"] for r in rows] == [0.01, 0.05]
    assert all(r["dependent_ns"] > 0 and r["independent_ns"] > 0 for r in rows)
    from ddnumba.bench import main
    main(["floor", "--nodes", "40", "--changes", "30", "--resolution", "1", "10",
          "--no-engine"])
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 4 and out[2].split()[:3] == ["40", "1", "30"]
    assert out[3].split()[:3] == ["40", "10", "30"]
    main(["memory", "--mib", "0.02", "--steps", "1000"])
    assert capsys.readouterr().out.splitlines()[1].split()[0] == "0.02"

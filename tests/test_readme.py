"""The README's Python examples run as written, and say what the README says they do:
the first builds reachability and cuts an edge, the second streams a directory of
Parquet change batches through it and writes the results back (checked against BFS
with networkx)."""
import os
import re
from collections import Counter

import networkx as nx
import pyarrow as pa
import pyarrow.parquet as pq

README = os.path.join(os.path.dirname(__file__), os.pardir, "README.md")


def _blocks():
    with open(README) as f:
        text = f.read()
    return re.findall(r"```python\n(.*?)```", text, re.S)


def _reachable(edges, roots):
    g = nx.DiGraph()
    g.add_nodes_from(roots)
    g.add_edges_from(edges)
    out = set()
    for r in roots:
        out |= {r} | nx.descendants(g, r)
    return out


def test_readme_examples(tmp_path, monkeypatch):
    blocks = _blocks()
    assert len(blocks) >= 2
    ns = {}
    exec(compile(blocks[0], "README.md[0]", "exec"), ns)
    out = ns["out"]
    assert sorted(out.at(0).column("node").to_pylist()) == sorted(
        _reachable([(1, 2), (2, 3), (3, 4)], [1]))
    assert sorted(out.at(1).column("node").to_pylist()) == sorted(
        _reachable([(1, 2), (3, 4)], [1]))
    ups = out.updates().to_pylist()
    assert {(r["node"], r["diff"]) for r in ups if r["time"] == 1} == {(3, -1), (4, -1)}

    # The second block, in a directory holding changes/edges/: edges added at time 2
    # (2 -> 3 again, 4 -> 5) and removed at time 3 (1 -> 2).
    monkeypatch.chdir(tmp_path)
    os.makedirs("changes/edges")
    pq.write_table(pa.table({"src": [2, 4], "dst": [3, 5], "time": [2, 2]}),
                   "changes/edges/part-0.parquet")
    pq.write_table(pa.table({"src": [1], "dst": [2], "time": [3], "diff": [-1]}),
                   "changes/edges/part-1.parquet")
    # (the block closes roots_in itself: left open at 2 it would hold times 2, 3 back)
    exec(compile(blocks[1], "README.md[1]", "exec"), ns)
    edges_at = {2: [(1, 2), (3, 4), (2, 3), (4, 5)], 3: [(3, 4), (2, 3), (4, 5)]}
    for name in ("results/reach", "results/stream"):
        rows = pq.read_table(name).to_pylist()
        for t, edges in edges_at.items():
            acc = Counter()
            for r in rows:
                if r["time"] <= t:
                    acc[r["node"]] += r["diff"]
            assert {k for k, v in acc.items() if v} == _reachable(edges, [1]), (name, t)
    assert len(os.listdir("results/stream")) >= 2

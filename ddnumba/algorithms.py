"""Graph algorithms written as incremental dataflow programs.

A *graph* here is a collection of edge rows ``(src, dst)`` (``(src, dst, weight)`` for
weighted graphs) that changes over time. Edges form a multiset, but every algorithm uses
only their *presence*: an edge is in the graph at time ``t`` when its accumulated count
at ``t`` is positive (duplicates count once; a negative count means absent). Node sets
(roots, sources) follow the same rule. Each function builds operators from public
:class:`~ddnumba.Collection` methods and returns a collection that the engine keeps
equal, at every time, to the algorithm run from scratch on the graph accumulated at that
time; after a change only the affected part of the answer is recomputed.

Iterative algorithms are fixed points of ``iterate``; each takes ``max_iterations`` to
turn a loop that cannot converge (e.g. ``sssp`` with a negative cycle) into an
:class:`~ddnumba.operators.iterate.IterationLimitError` rather than a hang.
"""
from __future__ import annotations

import numpy as np

from ddnumba.collection import Collection
from ddnumba.operators.linear import checked_sum

__all__ = ["reachability", "bfs", "connected_components", "sssp",
           "strongly_connected_components", "triangles"]


# ------------------------------------------------------------------------- helpers
def _check(c, arity, what, op):
    if not isinstance(c, Collection):
        raise TypeError(f"{op}: {what} must be a Collection, got {type(c).__name__}")
    if c.arity != arity:
        raise ValueError(f"{op}: {what} must have {arity} column(s), has {c.names}")


def _add_checked(a, b, op):
    """``a + b`` of int64 arrays, refusing a sum that leaves int64 (it would wrap)."""
    return checked_sum(a, b, f"{op}: a distance leaves int64 (a path's weights sum "
                             f"beyond 2**63 - 1)")


def _present_edges(edges, op):
    """``(src, dst)`` rows with positive count, once each."""
    _check(edges, 2, "edges", op)
    return edges.map(lambda s, d: (s, d), names=["src", "dst"]).distinct()


def _present_nodes(nodes, what, op):
    _check(nodes, 1, what, op)
    return nodes.map(lambda n: n, names=["node"]).distinct()


def _propagate_min(edges, labels0, *, max_iterations=None, name=None):
    """Least label reaching each node: ``labels0`` ``(node, label)`` pushed along
    ``edges`` ``(src, dst)``; a node's label is the minimum over the initial labels of
    the nodes that reach it (itself included). Nodes without an initial label and not
    reached by one get none."""
    def body(labels):
        hop = labels.join(edges).map(lambda n, lab, d: (d, lab), names=["node", "label"])
        # Re-adding the initial labels every round keeps each node's own label in the
        # minimum: labels_{i+1} = min(labels_0, hop(labels_i)), whose limit is the
        # least label over all nodes that reach it.
        return hop.concat(labels0).min(name="label")
    return labels0.iterate(body, max_iterations=max_iterations, name=name)


# ---------------------------------------------------------------------- algorithms
def reachability(roots, edges, *, max_iterations=None):
    """Every node reachable from each root.

    Parameters
    ----------
    roots : Collection
        One column: the root nodes (present when their count is positive).
    edges : Collection
        Two columns ``(src, dst)``: directed edges (present when their count is
        positive; duplicates count once).
    max_iterations : int, optional
        Raise :class:`~ddnumba.operators.iterate.IterationLimitError` if the loop runs
        more rounds (the loop needs about the longest shortest-path length).

    Returns
    -------
    Collection
        ``(root, node)`` with count 1 for every node reachable from a present root by a
        directed path of present edges; a root reaches itself.

    Examples
    --------
    >>> import ddnumba as dd
    >>> from ddnumba.algorithms import reachability
    >>> df = dd.Dataflow()
    >>> ri, roots = df.new_input(["node"]); ei, edges = df.new_input(["src", "dst"])
    >>> out = reachability(roots, edges).capture()
    >>> ri.insert([1], time=0); ei.insert([1, 2, 4], [2, 3, 1], time=0)
    >>> ri.advance_to(1); ei.advance_to(1); df.run()
    >>> [(r["root"], r["node"]) for r in out.at(0).to_pylist()]
    [(1, 1), (1, 2), (1, 3)]
    """
    op = "reachability"
    e = _present_edges(edges, op)
    # State is keyed by the node reached, so each round joins with the edges by src.
    start = _present_nodes(roots, "roots", op).map(lambda r: (r, r),
                                                    names=["node", "root"])

    def body(reach):
        hop = reach.join(e).map(lambda n, r, d: (d, r), names=["node", "root"])
        return hop.concat(start).distinct()

    reach = start.iterate(body, max_iterations=max_iterations, name=op)
    return reach.map(lambda n, r: (r, n), names=["root", "node"])


def bfs(roots, edges, *, max_iterations=None):
    """Shortest hop distance from the nearest root.

    Parameters
    ----------
    roots : Collection
        One column: the root nodes.
    edges : Collection
        Two columns ``(src, dst)``: directed edges (presence semantics).
    max_iterations : int, optional
        Bound on the loop's rounds (see :func:`reachability`).

    Returns
    -------
    Collection
        ``(node, distance)``, count 1, for every node reachable from some root:
        the least number of edges on a directed path from any root (0 for roots).

    Examples
    --------
    >>> import ddnumba as dd
    >>> from ddnumba.algorithms import bfs
    >>> df = dd.Dataflow()
    >>> ri, roots = df.new_input(["node"]); ei, edges = df.new_input(["src", "dst"])
    >>> out = bfs(roots, edges).capture()
    >>> ri.insert([0], time=0); ei.insert([0, 1, 0], [1, 2, 2], time=0)
    >>> ei.remove([0], [2], time=1); ri.close(); ei.close(); df.run()
    >>> [(r["node"], r["distance"]) for r in out.at(0).to_pylist()]
    [(0, 0), (1, 1), (2, 1)]
    >>> [(r["node"], r["distance"]) for r in out.at(1).to_pylist()]
    [(0, 0), (1, 1), (2, 2)]
    """
    op = "bfs"
    e = _present_edges(edges, op)
    start = _present_nodes(roots, "roots", op).map(lambda r: (r, 0),
                                                    names=["node", "distance"])

    def body(dist):
        hop = dist.join(e).map(lambda n, k, d: (d, k + 1), names=["node", "distance"])
        return hop.concat(start).min(name="distance")

    return start.iterate(body, max_iterations=max_iterations, name=op)


def connected_components(edges, nodes=None, *, max_iterations=None):
    """Connected components of the undirected graph, labelled by their smallest node.

    Parameters
    ----------
    edges : Collection
        Two columns ``(src, dst)``, read as undirected edges (presence semantics; ``(a,
        b)`` and ``(b, a)`` are the same edge).
    nodes : Collection, optional
        One column of extra nodes (isolated nodes get a component of their own).
    max_iterations : int, optional
        Bound on the loop's rounds (about the largest component diameter).

    Returns
    -------
    Collection
        ``(node, label)``, count 1, for every endpoint of a present edge and every
        present node of ``nodes``; ``label`` is the smallest node id of its component.
        Ids are compared as the int64 codes the engine holds: for integer ids their
        values; for string ids read from Parquet, their dictionary codes, given in
        order of first appearance (so the label is the first-seen node, not the
        alphabetically first).

    Examples
    --------
    >>> import ddnumba as dd
    >>> from ddnumba.algorithms import connected_components
    >>> df = dd.Dataflow()
    >>> ei, edges = df.new_input(["src", "dst"])
    >>> out = connected_components(edges).capture()
    >>> ei.insert([5, 3, 7], [3, 9, 8], time=0); ei.close(); df.run()
    >>> [(r["node"], r["label"]) for r in out.at(0).to_pylist()]
    [(3, 3), (5, 3), (7, 7), (8, 7), (9, 3)]
    """
    op = "connected_components"
    e = _present_edges(edges, op)
    sym = e.concat(e.map(lambda s, d: (d, s))).distinct()
    # Symmetric, so the sources are every endpoint.
    node_set = sym.map(lambda s, d: s, names=["node"])
    if nodes is not None:
        _check(nodes, 1, "nodes", op)
        # (present nodes only: a negative count must not cancel an edge's endpoint)
        node_set = node_set.concat(_present_nodes(nodes, "nodes", op))
    start = node_set.distinct().map(lambda n: (n, n), names=["node", "label"])
    return _propagate_min(sym, start, max_iterations=max_iterations, name=op)


def sssp(sources, weighted_edges, *, max_iterations=None):
    """Single-source (multi-source) shortest paths with non-negative integer weights.

    Parameters
    ----------
    sources : Collection
        One column: the source nodes (distance 0).
    weighted_edges : Collection
        Three columns ``(src, dst, weight)``; each distinct present row is an edge
        (parallel edges with different weights are all kept; the lightest wins).
        Weights must be non-negative: with a negative cycle there is no fixed point.
    max_iterations : int, optional
        Bound on the loop's rounds (about the most edges on a shortest path).

    Returns
    -------
    Collection
        ``(node, distance)``, count 1, for every node reachable from a source: the least
        total weight of a directed path from any source.

    Examples
    --------
    >>> import ddnumba as dd
    >>> from ddnumba.algorithms import sssp
    >>> df = dd.Dataflow()
    >>> si, src = df.new_input(["node"]); ei, edges = df.new_input(["src", "dst", "w"])
    >>> out = sssp(src, edges).capture()
    >>> si.insert([0], time=0); ei.insert([0, 1, 0], [1, 2, 2], [1, 1, 5], time=0)
    >>> si.close(); ei.close(); df.run()
    >>> [(r["node"], r["distance"]) for r in out.at(0).to_pylist()]
    [(0, 0), (1, 1), (2, 2)]
    """
    op = "sssp"
    _check(weighted_edges, 3, "weighted_edges", op)
    w = weighted_edges.map(lambda s, d, x: (s, d, x), names=["src", "dst", "weight"]) \
        .distinct()
    start = _present_nodes(sources, "sources", op).map(lambda s: (s, 0),
                                                       names=["node", "distance"])

    def body(dist):
        hop = dist.join(w).map(lambda n, k, d, x: (d, _add_checked(k, x, op)),
                               names=["node", "distance"])
        return hop.concat(start).min(name="distance")

    return start.iterate(body, max_iterations=max_iterations, name=op)


def _trim(cycle, edges, *, max_iterations=None):
    """Edges of ``edges`` whose endpoints get equal labels under least-label propagation
    along ``cycle``, returned *reversed* ``(dst, src)``.

    Every node that is the target of an edge starts with its own id as label. Two nodes
    of one strongly connected component of ``cycle`` are reached by the same nodes, so
    they get equal labels and every edge inside a component survives; an edge between
    components is eventually cut by this or the reverse pass.
    """
    # The inner loop must be opened in the scope of ``cycle`` (nested in the outer
    # loop), so its initial labels are entered there first.
    labels0 = edges.map(lambda s, d: (d, d), names=["node", "label"]).distinct() \
        .enter(cycle)
    edges = edges.enter(cycle)
    labels = _propagate_min(cycle, labels0, max_iterations=max_iterations,
                            name="scc_propagate")
    by_src = edges.join(labels).map(lambda s, d, ls: (d, s, ls),
                                    names=["dst", "src", "ls"])
    both = by_src.join(labels)                            # (dst, src, ls, ld)
    return both.filter(lambda d, s, ls, ld: ls == ld).map(lambda d, s, ls, ld: (d, s),
                                                          names=["src", "dst"])


def strongly_connected_components(edges, *, max_iterations=None):
    """Strongly connected components, labelled by their smallest node.

    The nodes are the endpoints of present edges. Two nodes are in one strongly connected
    component (SCC) when each reaches the other by a directed path; a node on no cycle
    through another node is alone in its SCC (a self-loop does not change that).

    The edges inside SCCs are found as a fixed point (differential dataflow's classic
    program): starting from all edges, repeatedly keep the edges whose endpoints get
    equal least labels when labels propagate forward along the current edges, then
    equal labels propagating backward. Each pass is an inner loop, so this is a nested
    iteration. The components are then labelled by least-label propagation along the
    surviving edges.

    Parameters
    ----------
    edges : Collection
        Two columns ``(src, dst)``: directed edges (presence semantics).
    max_iterations : int, optional
        Bound on the rounds of each loop.

    Returns
    -------
    Collection
        ``(node, label)``, count 1, for every endpoint of a present edge; ``label`` is
        the smallest node id in the node's SCC (the node itself when it is alone).

    Examples
    --------
    >>> import ddnumba as dd
    >>> from ddnumba.algorithms import strongly_connected_components
    >>> df = dd.Dataflow()
    >>> ei, edges = df.new_input(["src", "dst"])
    >>> out = strongly_connected_components(edges).capture()
    >>> ei.insert([1, 2, 3, 3], [2, 3, 1, 4], time=0); ei.close(); df.run()
    >>> [(r["node"], r["label"]) for r in out.at(0).to_pylist()]
    [(1, 1), (2, 1), (3, 1), (4, 4)]
    """
    op = "strongly_connected_components"
    e = _present_edges(edges, op)
    trans = e.map(lambda s, d: (d, s), names=["src", "dst"])

    def body(cycle):
        # Forward pass trims and reverses; the backward pass (over the reversed graph)
        # trims and reverses back, so the variable keeps the original orientation.
        forward = _trim(cycle, e, max_iterations=max_iterations)
        return _trim(forward, trans, max_iterations=max_iterations)

    inside = e.iterate(body, max_iterations=max_iterations, name=op)
    node_set = e.concat(trans).map(lambda s, d: s, names=["node"]).distinct()
    start = node_set.map(lambda n: (n, n), names=["node", "label"])
    # Within an SCC every node reaches every other along the surviving edges, and no
    # surviving edge leaves its SCC, so the least label reaching a node is its SCC's.
    return _propagate_min(inside, start, max_iterations=max_iterations,
                          name="scc_label")


def triangles(edges):
    """Triangles of the undirected simple graph.

    Parameters
    ----------
    edges : Collection
        Two columns ``(src, dst)`` read as undirected edges (presence semantics;
        ``(a, b)`` and ``(b, a)`` are one edge; self-loops are ignored).

    Returns
    -------
    Collection
        ``(a, b, c)`` with ``a < b < c``, count 1, for every triple of nodes joined
        pairwise by present edges. No iteration: two joins.

    Examples
    --------
    >>> import ddnumba as dd
    >>> from ddnumba.algorithms import triangles
    >>> df = dd.Dataflow()
    >>> ei, edges = df.new_input(["src", "dst"])
    >>> out = triangles(edges).capture()
    >>> ei.insert([1, 3, 3, 4], [2, 2, 1, 3], time=0); ei.close(); df.run()
    >>> [tuple(r.values())[:3] for r in out.at(0).to_pylist()]
    [(1, 2, 3)]
    """
    op = "triangles"
    _check(edges, 2, "edges", op)
    # Orient every edge from its smaller to its larger end, so each undirected edge is
    # one row and each triangle is found once, from its smallest node.
    # (present rows first: a negative count on (b, a) must not cancel (a, b))
    und = _present_edges(edges, op).filter(lambda s, d: s != d).map(
        lambda s, d: (np.minimum(s, d), np.maximum(s, d)), names=["lo", "hi"]).distinct()
    wedges = und.join(und).filter(lambda a, b, c: b < c)       # (a, b, c): a-b, a-c
    closed = wedges.map(lambda a, b, c: (b, c, a), names=["b", "c", "a"]) \
        .semijoin(und, key=2)                                  # b-c present (count 1)
    return closed.map(lambda b, c, a: (a, b, c), names=["a", "b", "c"])

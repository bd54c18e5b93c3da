"""The native engine against the Python engine (the reference), networkx, and its contract.

``Dataflow(engine="native")`` runs a whole ``run()`` (loops included) inside compiled code
(:mod:`ddnumba.native`, :mod:`ddnumba.kernels.runtime`); ``engine="python"`` steps the
same operators from Python. Both must give identical results, so the tests here

* build one program on both engines (:class:`Twin`), feed both the same random update
  streams and after *every* run compare the captured streams (``Captured.raw()``), the
  capture and probe frontiers, ``Captured.at(t)`` at the completed times, and what
  ``inspect`` callbacks saw. Streams come from hypothesis (inserts and retractions at
  several distinct times per run, several runs, times left open across runs, inputs
  sometimes closed, arrays or Arrow tables) and from seeded long runs (60 runs, ~100
  times: spines merge and compact, reduces keep pending times). The programs cover every
  operator (joins incl. self-joins and shared arrangements, the reduce family incl. user
  Numba logic, multiset operators, the linear ones incl. projections, ``delay`` and
  ``inspect``) and loops (reachability, connected components, shortest paths, transitive
  closure, a count in a loop body, ``Dataflow.iterative`` with several variables, two
  loops in a row, delays inside a body);
* check loops on the native engine against networkx over long edge-change sequences
  (one change per run, and batches with one distinct time per change);
* check the native engine's contract: ``max_iterations``, errors raised by user
  callbacks, overflow, a graph fixed at the first run, unsupported configurations,
  bounded state under a sliding window, and which engine ``"auto"`` picks;
* check that the comparison itself is not vacuous (programs made to differ between
  the engines fail it).

``DDNUMBA_NATIVE_EXAMPLES`` sets the hypothesis examples per test (default 15).
"""
from __future__ import annotations

import os

import networkx as nx
import numba
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ddnumba as dd
from ddnumba.native import NativeEngine
from ddnumba.testing import updates_table
from ddnumba.operators.iterate import IterationLimitError

from oracle import GRID_MAX, feed, loops_in, states_to_updates, stream

EXAMPLES = int(os.environ.get("DDNUMBA_NATIVE_EXAMPLES", "15"))

SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

#: times of the random streams are 0..T-1 (the oracle's 1-D grid).
T = GRID_MAX[1] + 1
#: a guard against a loop that fails to converge because of an engine bug (the loops
#: of the programs below converge within a few dozen rounds).
GUARD = 200

ENGINES = ("native", "python")


# ------------------------------------------------------------------------------ twins


def _updates(cap):
    """``[(row, time, diff)]`` of a capture, as Python ints (consolidated, sorted)."""
    u = cap.raw()
    return [(tuple(int(x) for x in u.data[i]), tuple(int(x) for x in u.times[i]),
             int(u.diffs[i])) for i in range(len(u))]


BIG = np.iinfo(np.int64).max


def _consolidate_rows(rows):
    """``{(data, time): diff}`` of ``(data, time, diff)`` rows, zeros dropped."""
    out = {}
    for data, time, diff in rows:
        out[data, time] = out.get((data, time), 0) + diff
    return {k: d for k, d in out.items() if d != 0}


def _table_rows(tables):
    """The updates of Arrow update tables (data columns, time column(s), diff) as a
    sorted list of ``(data, time, diff)`` tuples."""
    rows = []
    for tbl in tables:
        names = tbl.column_names
        tcols = [i for i, n in enumerate(names) if n == "time" or
                 (n.startswith("time_") and n[5:].isdigit())]
        assert names[-1] == "diff" and tcols, names
        cols = [tbl.column(i).to_pylist() for i in range(tbl.num_columns)]
        dcols = [c for i, c in enumerate(cols[:-1]) if i not in tcols]
        tc = [cols[i] for i in tcols]
        for j in range(tbl.num_rows):
            rows.append((tuple(c[j] for c in dcols), tuple(c[j] for c in tc),
                         cols[-1][j]))
    return sorted(rows)


class Side:
    def __init__(self, engine, program, input_names):
        self.engine = engine
        self.df = dd.Dataflow(engine=engine)
        self.handles, colls = [], []
        for names in input_names:
            h, c = self.df.new_input(names)
            self.handles.append(h)
            colls.append(c)
        self.seen = []          # what inspect callbacks saw: (label, table)
        outs = program(self.seen, *colls)
        outs = tuple(outs) if isinstance(outs, (tuple, list)) else (outs,)
        self.names = [list(o.names) for o in outs]
        self.caps = [o.capture() for o in outs]
        self.probes = [o.probe() for o in outs]


class Twin:
    """One program built on both engines, driven in lockstep and compared after each run.

    ``program(seen, *collections)`` returns the output collection(s); it may append
    ``(label, table)`` to ``seen`` from ``inspect`` callbacks.

    After every run the captured streams (``Captured.raw()``) must be identical, and so
    must the capture and probe frontiers, ``done(t)``, ``Captured.at(t)`` at every
    completed time, and what ``inspect`` callbacks saw (see :meth:`_compare_inspect`).

    ``strict=False`` compares each captured stream at the times its capture completed
    only. It is for programs that leave a loop *variable* itself (its source reaches the
    output through linear operators only): at times the inputs have not closed, the
    Python engine's settling pass forwards the source's queued updates through the
    loop while the native engine keeps them until they are due. Neither is final there,
    and once every time is complete the whole streams must be equal.
    """

    def __init__(self, program, input_names, *, strict=True):
        self.input_names = [list(n) for n in input_names]
        self.sides = [Side(e, program, self.input_names) for e in ENGINES]
        # Per output: its capture's frontier after the previous run.
        self.done_before = [0] * len(self.sides[0].caps)
        self.strict = strict
        self.inspected = ({}, {})
        self.runs = 0
        self.max_time = 0

    def update(self, i, updates, *, arrow=False):
        """Feed ``[(row, (t,), diff)]`` to input ``i`` of both engines (as one Arrow
        table, whose columns NumPy sees read-only, when ``arrow``)."""
        for s in self.sides:
            if arrow and updates:
                s.handles[i].update(updates_table(updates, self.input_names[i]))
            else:
                feed(s.handles[i], updates, len(self.input_names[i]), 1)
        if updates:
            self.max_time = max(self.max_time, max(t[0] for _, t, _ in updates))

    def advance_to(self, i, t):
        for s in self.sides:
            s.handles[i].advance_to(t)

    def close(self, i):
        for s in self.sides:
            s.handles[i].close()

    def run(self):
        for s in self.sides:
            s.df.run()
        native, python = self.sides
        assert isinstance(native.df._native, NativeEngine)
        assert python.df._native is False
        self.runs += 1
        self.compare()

    def open_from(self):
        """The least input frontier: times from here on are not complete yet."""
        hs = self.sides[1].handles
        return min([BIG if h.closed else int(h.frontier[0, 0]) for h in hs], default=BIG)

    def compare(self):
        """Compare the two engines' outputs (see the class docstring)."""
        native, python = self.sides
        where = f"after run {self.runs}"
        p = self.open_from()
        for k, (cn, cp) in enumerate(zip(native.caps, python.caps)):
            label = f"{where}, output {k} {native.names[k]}"
            np.testing.assert_array_equal(cn.frontier, cp.frontier,
                                          err_msg=f"{label}: capture frontier")
            np.testing.assert_array_equal(native.probes[k].frontier,
                                          python.probes[k].frontier,
                                          err_msg=f"{label}: probe frontier")
            f = cp.frontier
            done_below = BIG if len(f) == 0 else int(f[0, 0])
            assert done_below >= p, f"{label}: frontier {f} with all inputs past {p}"
            un, up = _updates(cn), _updates(cp)
            if not self.strict:
                un = [u for u in un if u[1][0] < done_below]
                up = [u for u in up if u[1][0] < done_below]
            if un != up:
                only_n = sorted(set(un) - set(up))
                only_p = sorted(set(up) - set(un))
                raise AssertionError(
                    f"{label}: captured updates differ\n  native only: {only_n}\n"
                    f"  python only: {only_p}\n  python: {up}")
            # Captured.at at the times completed since the last run. (The accumulation
            # changes only at update times: check those, the times just before them, and
            # the times around the frontiers.)
            since = self.done_before[k]
            times = {since - 1, since, p - 1, p, p + 1, done_below - 1, done_below}
            for _, (t,), _ in un + up:
                if t >= since:
                    times.update((t - 1, t))
            self.done_before[k] = done_below
            for t in sorted(x for x in times if 0 <= x < BIG):
                done = cp.done(t)
                assert cn.done(t) == done, f"{label}: done({t})"
                assert done or t >= p, f"{label}: not done({t}), all inputs past {p}"
                if done:
                    an, ap = cn.at(t).to_pylist(), cp.at(t).to_pylist()
                    assert an == ap, f"{label}: at({t})\n  native {an}\n  python {ap}"
        self._compare_inspect(where, p)

    def _compare_inspect(self, where, p):
        """What ``inspect`` callbacks saw. Labels starting with ``=`` (inspects right
        after an input or linear operators) must see exactly the same updates in every
        run; every label must have seen the same updates once consolidated (an engine
        may emit updates that cancel, e.g. ``dA·B + dA·dB`` pairs in a join), at all
        times for loop-free programs, else at completed times."""
        native, python = self.sides
        labels = sorted({lbl for lbl, _ in native.seen} | {lbl for lbl, _ in python.seen})
        for lbl in labels:
            rn = _table_rows([t for l_, t in native.seen if l_ == lbl])
            rp = _table_rows([t for l_, t in python.seen if l_ == lbl])
            if lbl.startswith("="):
                assert rn == rp, (f"{where}: inspect {lbl!r} saw different updates\n"
                                  f"  native {rn}\n  python {rp}")
            self.inspected[0].setdefault(lbl, []).extend(rn)
            self.inspected[1].setdefault(lbl, []).extend(rp)
        for s in self.sides:
            s.seen.clear()
        for lbl in set(self.inspected[0]) | set(self.inspected[1]):
            cn = _consolidate_rows(self.inspected[0].get(lbl, []))
            cp = _consolidate_rows(self.inspected[1].get(lbl, []))
            if not self.strict:
                cn = {r: d for r, d in cn.items() if r[1][0] < p}
                cp = {r: d for r, d in cp.items() if r[1][0] < p}
            assert cn == cp, (f"{where}: inspect {lbl!r} saw different updates "
                              f"(consolidated)\n  native {sorted(cn.items())}\n"
                              f"  python {sorted(cp.items())}")


def drive(twin, data, streams):
    """Feed ``streams`` (one ``[(row, (t,), diff)]`` per input) over several runs.

    Each run feeds a random part of every input's pending updates, then advances the
    input to a random frontier no later than its earliest pending update (so times fed
    but not closed stay open into later runs) or, once nothing is pending, sometimes
    closes it. The last run feeds everything and completes every time.
    """
    n_in = len(streams)
    pending = [list(s) for s in streams]
    frontier = [0] * n_in
    closed = [False] * n_in
    n_runs = data.draw(st.integers(1, 5), label="runs")
    for r in range(n_runs):
        last = r == n_runs - 1
        for i in range(n_in):
            if closed[i]:
                continue
            if last:
                take = [True] * len(pending[i])
            else:
                take = data.draw(st.lists(st.booleans(), min_size=len(pending[i]),
                                          max_size=len(pending[i])), label=f"feed{i}")
            now = [u for u, b in zip(pending[i], take) if b]
            pending[i] = [u for u, b in zip(pending[i], take) if not b]
            # Several update() calls per run, sometimes; arrays or Arrow tables.
            cut = data.draw(st.integers(0, len(now)), label="split") if now else 0
            arrow = data.draw(st.booleans(), label="arrow") if now else False
            twin.update(i, now[:cut])
            twin.update(i, now[cut:], arrow=arrow)
            hi = min([t[0] for _, t, _ in pending[i]], default=T + 1)
            if last:
                if data.draw(st.booleans(), label="close"):
                    twin.close(i)
                    closed[i] = True
                else:
                    frontier[i] = max(frontier[i], T)
                    twin.advance_to(i, frontier[i])
            elif not pending[i] and data.draw(st.integers(0, 3), label="close") == 0:
                twin.close(i)
                closed[i] = True
            else:
                f = data.draw(st.integers(frontier[i], max(frontier[i], hi)), label="adv")
                twin.advance_to(i, f)
                frontier[i] = f
        twin.run()


def check_twin(program, input_names, data, streams, *, strict=True):
    twin = Twin(program, input_names, strict=strict)
    drive(twin, data, streams)
    # The last run completed every time fed, so even a non-strict twin compared the
    # whole streams.
    assert twin.open_from() > twin.max_time
    return twin


# ----------------------------------------------------------------------- strategies

AB = (["k", "v"], ["k", "w"])


def streams_ab(**kw):
    return st.tuples(stream(2, 1, **kw), stream(2, 1, **kw))


@st.composite
def set_stream(draw, arity, domain, max_rows):
    """A stream whose accumulation at every time is a set (counts 0 or 1), with rows
    appearing and disappearing over the times 0..T-1."""
    row = st.tuples(*[st.integers(0, domain - 1) for _ in range(arity)])
    hist = draw(st.dictionaries(row, st.lists(st.integers(0, 1), min_size=T, max_size=T),
                                max_size=max_rows))
    states = {(p,): {r: 1 for r, cs in hist.items() if cs[p]} for p in range(T)}
    return states_to_updates(states, 1)


NODES = 6


def graph_streams():
    """(roots, edges) set streams over NODES nodes."""
    return st.tuples(set_stream(1, NODES, 3), set_stream(2, NODES, 14))


# --------------------------------------------------------------- user reduce logic


@numba.njit
def spread_logic(vals, counts):
    """(total count, max - min of the first value over positive-count rows), count 1."""
    out = np.empty((1, 2), np.int64)
    total = 0
    lo = np.iinfo(np.int64).max
    hi = np.iinfo(np.int64).min
    for i in range(vals.shape[0]):
        total += counts[i]
        if counts[i] > 0:
            lo = min(lo, vals[i, 0])
            hi = max(hi, vals[i, 0])
    out[0, 0] = total
    out[0, 1] = hi - lo if hi >= lo else -1
    return out, np.ones(1, np.int64)


@numba.njit
def odd_rows_logic(vals, counts):
    """Every row with an odd count, doubled in value, with count 2 (possibly none)."""
    n = 0
    for i in range(vals.shape[0]):
        if counts[i] % 2 != 0:
            n += 1
    out = np.empty((n, 1), np.int64)
    oc = np.full(n, 2, np.int64)
    j = 0
    for i in range(vals.shape[0]):
        if counts[i] % 2 != 0:
            out[j, 0] = 2 * vals[i, 0]
            j += 1
    return out, oc


@numba.njit
def messy_logic(vals, counts):
    """Unsorted rows, a repeated value and a zero count (the driver must sum and sort):
    (max v, 1), (min v, 0), (max v, count of the first row), (-1, 1)."""
    n = vals.shape[0]
    out = np.empty((4, 1), np.int64)
    oc = np.empty(4, np.int64)
    lo = vals[0, 0]
    hi = vals[0, 0]
    for i in range(n):
        lo = min(lo, vals[i, 0])
        hi = max(hi, vals[i, 0])
    out[0, 0], oc[0] = hi, 1
    out[1, 0], oc[1] = lo, 0
    out[2, 0], oc[2] = hi, counts[0]
    out[3, 0], oc[3] = -1, 1
    return out, oc


@numba.njit
def presence_logic(vals, counts):
    """No output columns: the key once, with the number of distinct value rows."""
    return np.empty((1, 0), np.int64), np.full(1, vals.shape[0], np.int64)


@numba.njit
def min_logic(vals, counts):
    """The smallest first value among positive-count rows (the built-in ``min``)."""
    best = np.iinfo(np.int64).max
    found = False
    for i in range(vals.shape[0]):
        if counts[i] > 0 and vals[i, 0] < best:
            best = vals[i, 0]
            found = True
    out = np.empty((1 if found else 0, 1), np.int64)
    if found:
        out[0, 0] = best
    return out, np.ones(out.shape[0], np.int64)


# ------------------------------------------------------------- programs (two inputs)


def _flat(k, v):
    """Each row (k, v) gives (k, v) and, when k != v, (v, k)."""
    m = k != v
    idx = np.concatenate([np.arange(len(k)), np.nonzero(m)[0]])
    return idx, np.concatenate([k, v[m]]), np.concatenate([v, k[m]])


def _shared_self_join(seen, a, b):
    arr = a.arrange_by_key()
    return arr.join(arr), arr.join(b), b.join(arr)


def _twice(*colls):
    """Each collection twice (two captures and two probes of one node)."""
    return [c for c in colls for _ in range(2)]


def _inspected(seen, a, b):
    x = a.inspect(lambda t: seen.append(("=a", t)))
    y = b.map(lambda k, w: (k, w + 1)).inspect(lambda t: seen.append(("=b+1", t)))
    j = x.join(y).inspect(lambda t: seen.append(("join", t)))
    c = j.count().inspect(lambda t: seen.append(("count", t)))
    return j, c


PROGRAMS_AB = {
    "join": lambda seen, a, b: a.join(b),
    "self_join": lambda seen, a, b: a.join(a),
    "join_both_ways": lambda seen, a, b: (a.join(b), b.join(a).map(lambda k, w, v: (v, w))),
    "shared_arrangement": _shared_self_join,
    "join_key2": lambda seen, a, b: a.join(b, key=2),
    "semijoin": lambda seen, a, b: (a.semijoin(b.map(lambda k, w: k, names=["k"])),
                                    a.semijoin(b.map(lambda k, w: w % 3, names=["k"]))),
    "antijoin": lambda seen, a, b: (a.antijoin(b.map(lambda k, w: k, names=["k"])),
                                    a.antijoin(b.distinct().map(lambda k, w: w,
                                                                names=["k"]))),
    "count_sum": lambda seen, a, b: (a.count(), a.sum("v"), a.count(key=2),
                                     a.concat(b).sum("v", key=0)),
    "min_max": lambda seen, a, b: (a.min("v"), a.max("v"), b.max(), a.min(key=0)),
    "distinct_threshold": lambda seen, a, b: (
        a.distinct(), a.threshold(lambda c: np.minimum(c, 2)),
        b.threshold(lambda c: c * c - 1)),
    "top_k": lambda seen, a, b: (a.top_k(1), a.top_k(2), b.top_k(3, key=0)),
    "reduce_user": lambda seen, a, b: (a.reduce(spread_logic, names=["k", "n", "spread"]),
                                       b.reduce(odd_rows_logic, names=["k", "x"]),
                                       a.reduce(messy_logic, names=["k", "x"]),
                                       b.reduce(presence_logic, names=["k"]),
                                       a.join(b).reduce(spread_logic, key=2,
                                                        names=["k", "v", "n", "s"]),
                                       a.concat(b).reduce(presence_logic, key=2,
                                                          names=["k", "v"])),
    "multiset": lambda seen, a, b: (a.union(b), a.intersect(b), a.except_(b),
                                    b.except_(a)),
    "linear": lambda seen, a, b: (
        a.concat(b).consolidate(), a.negate(), a.filter(lambda k, v: (k + v) % 2 == 0),
        a.flat_map(_flat, names=["x", "y"]), b.delay(lambda t: t + 1),
        a.flat_map(lambda k, v: (np.nonzero(v % 2 == 0)[0], k[v % 2 == 0]), names=["k"]),
        a.filter(lambda k, v: k >= 0), a.filter(lambda k, v: k < 0),
        b.delay(lambda t: (t // 2) * 2 + 1), a.concat(a.negate()).consolidate()),
    "maps": lambda seen, a, b: (
        a.map(lambda k, v: (v, k)), a.map(lambda k, v: (k, k, v), names=["x", "y", "z"]),
        a.map(lambda k, v: v, names=["v"]), a.map(lambda k, v: (k, v * 2)),
        b.map(lambda k, w: (k, np.zeros_like(k))), b.map(lambda k, w: (w, 7)),
        b.map(lambda k, w: np.stack([w, k, w - k], axis=1), names=["w", "k", "d"])),
    "inspect": _inspected,
    "arranged_api": lambda seen, a, b: (
        a.arrange_by_self().join(b.arrange_by_key(key=2)),
        a.join_map(b, lambda k, v, w: (v, w), names=["v", "w"]),
        a.arrange_by_key().join(b.arrange_by_key()).count(),
        b.arrange_by_key().as_collection().max("w")),
    "chains": lambda seen, a, b: (
        a.count().join(b).max("w"),
        a.join(b).map(lambda k, v, w: (v, w)).distinct().count(),
        a.distinct().join(b.min()).map(lambda k, v, m: (v, m)).top_k(1),
        a.sum("v").concat(b).negate().count()),
    "delays_then_state": lambda seen, a, b: (
        b.delay(lambda t: t + 2).count(), a.join(b.delay(lambda t: (t // 3) * 3 + 2)),
        a.delay(lambda t: t + 1).concat(a.negate()).distinct()),
    "same_output_twice": lambda seen, a, b: _twice(a.count(), b, a.join(b).join(a)),
}


@pytest.mark.parametrize("name", sorted(PROGRAMS_AB))
@SETTINGS
@given(data=st.data(), streams=streams_ab())
def test_twin_two_inputs(name, data, streams):
    check_twin(PROGRAMS_AB[name], AB, data, list(streams))


@pytest.mark.parametrize("name", ["multiset", "distinct_threshold", "top_k", "min_max"])
@SETTINGS
@given(data=st.data(), streams=streams_ab(nonneg=True))
def test_twin_two_inputs_nonneg(name, data, streams):
    """The same, on streams whose accumulations never go negative."""
    check_twin(PROGRAMS_AB[name], AB, data, list(streams))


# ---------------------------------------------------------------- iterative programs

RE = (["node"], ["src", "dst"])


def reach(roots, edges, **kw):
    return roots.iterate(lambda r: r.join(edges).map(lambda s, d: d, names=["node"])
                         .concat(roots).distinct(), max_iterations=GUARD, **kw)


def reach_union(roots, edges):
    return roots.iterate(lambda r: r.join(edges).map(lambda s, d: d, names=["node"])
                         .distinct().union(roots), max_iterations=GUARD)


def symmetric(edges):
    return edges.concat(edges.map(lambda s, d: (d, s))).distinct()


def components(edges, *, user=False):
    sym = symmetric(edges)
    labels = sym.map(lambda s, d: (s, s), names=["node", "label"]).distinct()

    def body(lab):
        cand = lab.join(sym).map(lambda n, label, d: (d, label), names=["node", "label"])
        cand = cand.concat(labels)
        if user:
            return cand.reduce(min_logic, names=["node", "label"])
        return cand.min("label", name="label")
    return labels.iterate(body, max_iterations=GUARD)


def shortest_paths(roots, edges):
    start = roots.map(lambda n: (n, np.zeros_like(n)), names=["node", "dist"])

    def body(d):
        return (d.join(edges)
                 .map(lambda n, dist, dst: (dst, dist + 1 + (n + dst) % 3),
                      names=["node", "dist"])
                 .concat(start).min("dist", name="dist"))
    return start.iterate(body, max_iterations=GUARD)


def two_predecessors(roots, edges):
    """Roots, and nodes with >= 2 in-edges from the set (a count in the loop body)."""
    def body(x):
        cnt = x.join(edges).map(lambda s, d: (d, s), names=["node", "src"]).count()
        return (cnt.filter(lambda n, c: c >= 2).map(lambda n, c: n, names=["node"])
                .concat(roots).distinct())
    return roots.iterate(body, max_iterations=GUARD)


def in_loop_counts(roots, edges):
    """A loop whose result holds count values: (node, number of reached in-neighbours),
    a second variable fed by the reachability variable (``Dataflow.iterative``)."""
    df = roots.dataflow

    def build(loop):
        r = loop.variable(roots)
        c = loop.variable(roots.map(lambda n: (n, np.zeros_like(n)), names=["node", "c"])
                          .filter(lambda n, c: c > 0))
        step = r.collection.join(edges).map(lambda s, d: (d, s), names=["node", "src"])
        r.set(step.map(lambda d, s: d, names=["node"]).concat(roots).distinct())
        c.set(step.count(name="c"))
        return r.collection, c.collection
    return df.iterative(build, max_iterations=GUARD, name="counts")


def parity(roots, edges):
    """Nodes reachable by a walk of even / odd length (two mutually recursive variables)."""
    df = roots.dataflow

    def build(loop):
        even = loop.variable(roots)
        odd = loop.variable(roots.filter(lambda n: np.zeros(len(n), dtype=bool)))
        step = lambda c: c.join(edges).map(lambda s, d: d, names=["node"])  # noqa: E731
        even.set(step(odd.collection).concat(roots).distinct())
        odd.set(step(even.collection).distinct())
        return even.collection, odd.collection
    return df.iterative(build, max_iterations=GUARD, name="parity")


def _loop_inspected(seen, roots, edges):
    def body(r):
        nxt = r.join(edges).map(lambda s, d: d, names=["node"])
        nxt = nxt.inspect(lambda t: seen.append(("in-loop", t)))
        return nxt.concat(roots).distinct()
    out = roots.iterate(body, max_iterations=GUARD)
    return out.inspect(lambda t: seen.append(("left", t)))


def _two_loops(seen, roots, edges):
    r = reach(roots, edges)
    # Edges among reached nodes, then components of that subgraph (a second loop fed by
    # the first), then a join after both loops.
    sub = edges.semijoin(r).map(lambda s, d: (d, s)).semijoin(r).map(lambda d, s: (s, d))
    cc = components(sub)
    return r, cc, cc.join(r.map(lambda n: (n, n * 10), names=["node", "x"]))


def transitive_closure(edges):
    """Pairs joined by a path of length >= 1: a join of the loop variable with itself
    (both sides change in the same rounds)."""
    def body(p):
        return (p.map(lambda s, d: (d, s), names=["mid", "src"]).join(p)
                 .map(lambda m, s, d: (s, d), names=["src", "dst"])
                 .concat(edges).distinct())
    return edges.iterate(body, max_iterations=GUARD)


def kitchen_sink(roots, edges):
    """Reachability, computed through most operators inside the loop body."""
    nodes = edges.map(lambda s, d: d, names=["node"]).concat(roots).distinct()

    def body(x):
        pairs = x.join(edges).map(lambda s, d: (d, s), names=["node", "src"])
        a = pairs.top_k(1).map(lambda n, s: n, names=["node"])
        b = pairs.sum("src").map(lambda n, t: n, names=["node"])
        c = pairs.max("src").map(lambda n, m: n + 0, names=["node"])
        d = pairs.count().filter(lambda n, k: k > 0).map(lambda n, k: n, names=["node"])
        both = a.intersect(b).concat(c.negate().negate(), d).consolidate()   # count 3
        fm = both.flat_map(lambda n: (np.arange(len(n)), n), names=["node"])
        t = fm.threshold(lambda k: np.minimum(k, 1)).filter(lambda n: n >= 0)
        return t.union(roots).intersect(nodes)
    return roots.iterate(body, max_iterations=GUARD)


def capped_walks(roots, edges):
    """Nodes with their walks from the roots counted up to 2 (the count of a row is
    the number of its walks, capped): a value-less ``top_k`` in the loop."""
    def body(x):
        return (x.join(edges).map(lambda s, d: d, names=["node"]).concat(roots)
                .top_k(2))
    return roots.iterate(body, max_iterations=GUARD)


def _delayed_reach(roots, edges, step):
    """Reachability along ``edges`` whose every hop is delayed by ``step`` (outer time,
    iteration) inside the loop body."""
    step = np.array(step, dtype=np.int64)

    def body(r):
        nxt = r.join(edges).map(lambda s, d: d, names=["node"])
        nxt = nxt.delay(lambda t: t + step)
        return nxt.concat(roots).distinct()
    return roots.iterate(body, max_iterations=GUARD)


def delayed_rounds(roots, edges):
    """Reachability whose newly reached nodes arrive one iteration late (a delay inside
    the loop advancing the iteration coordinate)."""
    return _delayed_reach(roots, edges, [0, 1])


def outer_delayed_hops(roots, edges):
    """Reachability over the edges ``s < d`` (a DAG, so walks are short) where every hop
    costs one unit of *outer* time: a delay inside the loop body that moves the outer
    coordinate (updates created in a round at times not yet complete)."""
    return _delayed_reach(roots, edges.filter(lambda s, d: s < d), [1, 0])


def left_intermediate(roots, edges):
    """An intermediate collection of a loop taken out with ``leave()`` after the loop
    is built, beside the loop's result; edges entered explicitly."""
    df = roots.dataflow
    keep = {}

    def build(loop):
        r = loop.variable(roots)
        e = loop.enter(edges)
        step = r.collection.join(e).map(lambda s, d: (d, s), names=["node", "src"])
        keep["step"] = step
        r.set(step.map(lambda d, s: d, names=["node"]).concat(roots).distinct())
        return r.collection.map(lambda n: n * 1, names=["node"])
    out = df.iterative(build, max_iterations=GUARD, name="leave")
    return out, keep["step"].leave(), keep["step"].leave().count()


def lagged_reach(roots, edges):
    """Reachability whose hops take two iterations: a second variable holds the first
    one iteration late, and the hops start from it. The first variable's rows feed
    only the second's feedback, so in a sequential loop its feedback stays a node of
    its own, while the second's is folded into the routes through it."""
    df = roots.dataflow

    def build(loop):
        r = loop.variable(roots)
        lag = loop.variable(roots.filter(lambda n: np.zeros(len(n), dtype=bool)))
        lag.set(r.collection)
        r.set(lag.collection.join(edges).map(lambda s, d: d, names=["node"])
              .concat(roots).distinct())
        return r.collection, lag.collection
    return df.iterative(build, max_iterations=GUARD, name="lagged")


PROGRAMS_GRAPH = {
    "reach": lambda seen, roots, edges: reach(roots, edges),
    "reach_union": lambda seen, roots, edges: reach_union(roots, edges),
    "components_min": lambda seen, roots, edges: components(edges),
    "components_user_reduce": lambda seen, roots, edges: components(edges, user=True),
    "shortest_paths": lambda seen, roots, edges: shortest_paths(roots, edges),
    "count_in_body": lambda seen, roots, edges: two_predecessors(roots, edges),
    "iterative_counts": lambda seen, roots, edges: in_loop_counts(roots, edges),
    "iterative_parity": lambda seen, roots, edges: parity(roots, edges),
    "loop_inspect": _loop_inspected,
    "two_loops": _two_loops,
    "kitchen_sink": lambda seen, roots, edges: kitchen_sink(roots, edges),
    "transitive_closure": lambda seen, roots, edges: transitive_closure(edges),
    "delay_in_loop": lambda seen, roots, edges: delayed_rounds(roots, edges),
    "outer_delay_in_loop": lambda seen, roots, edges: outer_delayed_hops(roots, edges),
    "leave_intermediate": lambda seen, roots, edges: left_intermediate(roots, edges),
    "capped_walks": lambda seen, roots, edges: capped_walks(roots, edges),
    "lagged_reach": lambda seen, roots, edges: lagged_reach(roots, edges),
}


#: programs that leave a loop variable itself (see Twin, strict=False)
LEAVE_VARIABLE = {"iterative_counts", "iterative_parity", "leave_intermediate",
                  "lagged_reach"}


@pytest.mark.parametrize("name", sorted(PROGRAMS_GRAPH))
@SETTINGS
@given(data=st.data(), streams=graph_streams())
def test_twin_loops(name, data, streams):
    """Loops run round-wise against the Python engine (test_twin_loops_sequential runs
    them sequentially, the default)."""
    with loops_in("rounds"):
        check_twin(PROGRAMS_GRAPH[name], RE, data, list(streams),
                   strict=name not in LEAVE_VARIABLE)


@pytest.mark.parametrize("name", ["reach", "components_min", "shortest_paths"])
@SETTINGS
@given(data=st.data())
def test_twin_loops_distinct_inputs_raw_streams(name, data):
    """Loops over ``distinct()`` of raw streams (multiplicities, negative counts)."""
    roots_s = data.draw(stream(1, 1, domain=NODES), label="roots")
    edges_s = data.draw(stream(2, 1, domain=NODES, max_size=16), label="edges")
    prog = PROGRAMS_GRAPH[name]
    check_twin(lambda seen, r, e: prog(seen, r.distinct(), e.distinct()), RE, data,
               [roots_s, edges_s])


@pytest.mark.parametrize("name", ["reach", "components_min", "shortest_paths",
                                  "count_in_body", "two_loops"])
@SETTINGS
@given(data=st.data(), streams=graph_streams())
def test_twin_loops_in_passes_of_two_times(name, data, streams):
    """Runs whose new updates span several times, executed as passes over two of them
    at a time, give what the Python engine gives in one pass."""
    old = NativeEngine.max_times_per_pass
    NativeEngine.max_times_per_pass = 2
    try:
        check_twin(PROGRAMS_GRAPH[name], RE, data, list(streams))
    finally:
        NativeEngine.max_times_per_pass = old


#: loops of PROGRAMS_GRAPH that run sequentially (kernels.seqloop) in loop mode
#: "sequential": native operators, maps and filters of sums and comparisons
#: (count_in_body's ``c >= 2``; shortest_paths' ``%`` is not one) and built-in reduce
#: logic only
SEQUENTIAL = {"capped_walks", "components_min", "count_in_body", "iterative_counts",
              "iterative_parity", "lagged_reach", "reach", "transitive_closure",
              "two_loops"}


def _small_graph_run(name, mode, monkeypatch):
    """PROGRAMS_GRAPH[name] in loop mode ``mode``, run once over one edge; the
    dataflow."""
    monkeypatch.setenv("DDNUMBA_LOOPS", mode)
    df = dd.Dataflow(engine="native")
    h1, r = df.new_input(["node"])
    h2, e = df.new_input(["src", "dst"])
    outs = PROGRAMS_GRAPH[name]([], r, e)
    for o in outs if isinstance(outs, (tuple, list)) else (outs,):
        o.capture()
    h1.insert([1], time=0)
    h2.insert([1], [2], time=0)
    df.run()
    return df


def _loop_modes(name, mode, monkeypatch):
    return _small_graph_run(name, mode, monkeypatch)._native.sequential


@pytest.mark.parametrize("name", sorted(PROGRAMS_GRAPH))
def test_loops_run_sequentially_when_they_can(name, monkeypatch):
    """Loop mode "sequential" runs a loop sequentially (one outer time after another
    over hashed state) when all its operators are native and its reduces built in; a
    callback (a map or filter that is not sums and comparisons, inspect, delay, user
    reduce) keeps it round-wise, and mode "rounds" keeps every loop round-wise."""
    seq = _loop_modes(name, "sequential", monkeypatch)
    assert all(seq) == (name in SEQUENTIAL)
    assert not any(_loop_modes(name, "rounds", monkeypatch))


def test_dataflow_loops_argument(monkeypatch):
    """``Dataflow(loops=)`` wins over ``DDNUMBA_LOOPS``; a bad value raises at once."""
    with pytest.raises(ValueError, match="loops must be one of"):
        dd.Dataflow(loops="fast")
    monkeypatch.setenv("DDNUMBA_LOOPS", "rounds")
    for loops in ("sequential", "rounds"):
        df = dd.Dataflow(engine="native", loops=loops)
        h, c = df.new_input(["x"])
        c.iterate(lambda x: x.distinct()).capture()
        h.insert([1, 2], time=0)
        df.run()
        assert df._native.sequential == [loops == "sequential"]


def _seq_reach(rng, n, m, n_roots, double=False, shared=False):
    """The benchmark's reachability (multiset edges, no distinct on the inputs) with
    sequential loops, loaded with a random graph at time 0 and run; returns
    ``(df, (roots input, edges input), check, src, dst)``, ``check(t, src, dst)``
    comparing the output at ``t`` with BFS over those edges (and returning how many
    pairs it has). ``double``: the loop variable is concatenated with itself first
    (the same answer). ``shared``: the loop variable is arranged once and joined with
    the edges twice (the same answer)."""
    from ddnumba.demo import bfs_reachable
    src, dst = rng.integers(0, n, m), rng.integers(0, n, m)
    roots = rng.choice(n, n_roots, replace=False)
    df = dd.Dataflow(engine="native", loops="sequential")
    ri, r = df.new_input(["node"])
    ei, e = df.new_input(["src", "dst"])
    start = r.map(lambda x: (x, x), names=["root", "node"])
    def body(v):
        x = (v.concat(v) if double else v).map(lambda root, node: (node, root),
                                               names=["node", "root"])
        if shared:
            a = x.arrange_by_key(key=1)
            hops = a.join(e).concat(a.join(e))
        else:
            hops = x.join(e)
        return hops.map(lambda node, root, d: (root, d), names=["root", "node"]) \
            .concat(start).distinct()

    reach = start.iterate(body)
    cap = reach.capture()
    ei.insert(src, dst, time=0)
    ri.insert(roots, time=0)
    ri.advance_to(1)
    ei.advance_to(1)
    df.run()
    assert df._native.sequential == [True]

    def check(t, s, d):
        rr, vv = bfs_reachable(s, d, roots, n)
        got = {(int(a), int(b)) for a, b in zip(*[c.to_numpy() for c in
                                                   cap.at(t).columns[:2]])}
        assert got == set(zip(rr.tolist(), vv.tolist())), f"t={t}"
        return len(got)

    return df, (ri, ei), check, src, dst


def _slide(rng, df, inputs, check, src, dst, batches, n):
    """Slide the window of edges ``src, dst`` by ``batches[k]`` changes (each at its own
    time) per run, checking every run's last time (``check(t, src, dst)``). The edges
    are the last of ``inputs``; all of them are advanced."""
    ei = inputs[-1]
    live = list(zip(src.tolist(), dst.tolist()))
    t = 1
    for batch in batches:
        for _ in range(batch):
            old = live.pop(0)
            new = tuple(int(x) for x in rng.integers(0, n, 2))
            live.append(new)
            ei.update([old[0], new[0]], [old[1], new[1]], time=t, diff=[-1, 1])
            t += 1
        for x in inputs:
            x.advance_to(t)
        df.run()
        w = np.array(live, np.int64)
        check(t - 1, w[:, 0].copy(), w[:, 1].copy())


def test_sequential_loop_after_a_large_load():
    """A load big enough that the loop's output is consolidated within its time (more
    than 4,096 leave rows) and its buffers outgrow 65,536 rows (released after the
    run), then single changes: reachability against BFS at the load and every time.
    The hashed state's table is large enough for its kernels to prefetch
    (hstate.PF_MIN_SLOTS)."""
    from ddnumba.kernels.hstate import PF_MIN_SLOTS
    rng = np.random.default_rng(11)
    n = 12000
    df, inputs, check, src, dst = _seq_reach(rng, n, 2 * n, 10)
    bufs = df._native.st[13][0]
    assert max(b.shape[0] for b in bufs) <= 65536, "large buffers kept after the run"
    assert df._native.st[11][0][0].shape[0] >= PF_MIN_SLOTS
    assert check(0, src, dst) > 4096
    _slide(rng, df, inputs, check, src, dst, [1] * 5, n)


def test_sequential_valued_loop_after_a_large_load():
    """Connected components (a ``min`` in the loop: the reduce's valued path) with
    sequential loops, loaded with a sparse graph whose hashed state is large enough
    for the kernels to prefetch (and reuse the rows they find while prefetching),
    then batches of edge changes: every run's last time against networkx."""
    from ddnumba.algorithms import connected_components
    from ddnumba.kernels.hstate import PF_MIN_SLOTS
    rng = np.random.default_rng(13)
    n = 50_000
    src, dst = rng.integers(0, n, n), rng.integers(0, n, n)
    df = dd.Dataflow(engine="native", loops="sequential", workers=1)
    ei, e = df.new_input(["src", "dst"])
    cap = connected_components(e).capture()
    ei.insert(src, dst, time=0)
    ei.advance_to(1)
    df.run()
    assert df._native.sequential == [True]
    assert df._native.st[11][0][0].shape[0] >= PF_MIN_SLOTS

    def check(t, s, d):
        g = nx.Graph()
        g.add_edges_from(zip(s.tolist(), d.tolist()))
        want = {}
        for comp in nx.connected_components(g):
            low = min(comp)
            want.update((v, low) for v in comp)
        got = cap.at(t)
        got = dict(zip(got.column("node").to_numpy().tolist(),
                       got.column("label").to_numpy().tolist()))
        assert got == want, f"t={t}"

    check(0, src, dst)
    _slide(rng, df, (ei,), check, src, dst, [1, 9, 120], n)


@pytest.mark.parametrize("big", [None, 1])
def test_sequential_loop_gives_back_idle_buffers(monkeypatch, big):
    """Buffers of nodes idle for a round, an enter's staged input and its taken
    updates are given back during a run once they reach seqloop.IDLE_BIG_WORDS (here 1
    word: every time, so every buffer is dropped and grown again round after round);
    the answers stay BFS's through a load and batches of changes."""
    from ddnumba.kernels import seqloop as S
    if big is not None:
        monkeypatch.setattr(S, "IDLE_BIG_WORDS", big)
    rng = np.random.default_rng(12)
    n, m = 2000, 4000
    df, inputs, check, src, dst = _seq_reach(rng, n, m, 4)
    lp, cn = df._native.st[12][0]
    nodes = S._nodes(lp)
    stage = [int(nodes[i, S.P_D]) for i in range(nodes.shape[0])
             if nodes[i, S.P_KIND] == S.S_ENTER]
    rows = [df._native.st[13][0][x].shape[0] for x in stage]
    if big is None:
        assert max(rows) >= m        # the edges' stage buffer kept (below the bound)
    else:
        assert rows == [16] * len(stage)
    check(0, src, dst)
    _slide(rng, df, inputs, check, src, dst, [1, 7, 40], n)
    _check_counters(df, S, S.IDLE_BIG_WORDS)


@pytest.mark.parametrize("big", [None, 1])
def test_sequential_routes_sharing_a_sink_get_room_for_all(monkeypatch, big):
    """Routes of one node that share a sink: the entered start goes to the join's
    arrangement at iteration 0 and, negated, at 1 (the variable's first value), and
    with ``v.concat(v)`` twice each, as does the distinct's output. A step checks the
    room of every route before it copies rows (a request for more restarts the emit),
    and a shared sink needs room for the rows of all its routes. ``big=1`` gives back
    every buffer every round, so that emits find their queues small. Reachability
    against BFS through a load and sliding changes."""
    from ddnumba.kernels import seqloop as S
    if big is not None:
        monkeypatch.setattr(S, "IDLE_BIG_WORDS", big)
    rng = np.random.default_rng(21)
    n = 1500
    df, inputs, check, src, dst = _seq_reach(rng, n, 2 * n, 6, double=True)
    lp, _ = df._native.st[12][0]
    sinks = S._routes(lp)[:, S.R_BUF]
    nodes = S._nodes(lp)
    shared = [ln for ln in range(nodes.shape[0]) if nodes[ln, S.P_RN] > len(set(
        sinks[nodes[ln, S.P_ROFF]:nodes[ln, S.P_ROFF] + nodes[ln, S.P_RN]].tolist()))]
    assert len(shared) >= 2, "no node with routes sharing a sink"
    assert check(0, src, dst) > 100
    _slide(rng, df, inputs, check, src, dst, [1, 9, 60], n)


def test_sequential_shared_arrangement_resumes_its_insert_at_the_round_end():
    """An arrangement with two readers (the loop variable's, read by two joins) goes
    into its trace when the round ends, after both have read it. The load makes that
    insert outgrow the table and the arena: the round returns a request from its last
    part and resumes after it, past the rows already in. Reachability against BFS
    through the load and sliding changes (a key inserted twice would keep nodes
    reachable after their last in-edge goes)."""
    from ddnumba.kernels import seqloop as S
    rng = np.random.default_rng(31)
    n = 3000
    df, inputs, check, src, dst = _seq_reach(rng, n, 2 * n, 8, shared=True)
    lp, _ = df._native.st[12][0]
    nodes = S._nodes(lp)
    late = [ln for ln in range(nodes.shape[0])
            if nodes[ln, S.P_KIND] == S.S_ARRANGE and nodes[ln, S.P_FUSED] == 0]
    assert late, "no arrangement inserted at the round's end"
    assert check(0, src, dst) > 1000
    _slide(rng, df, inputs, check, src, dst, [1, 9, 60, 200], n)


def _check_counters(df, S, big):
    """The sequential loop's counters know each buffer's size (the idle check reads
    them, not the buffers) and how many are big."""
    lp, cn = df._native.st[12][0]
    bufs = df._native.st[13][0]
    words = [b.shape[0] * b.shape[1] for b in bufs]
    assert [int(cn[S.C_BUF + 3 * x + 2]) for x in range(len(bufs))] == words
    assert int(cn[S.SC_NBIG]) == sum(w >= big for w in words)
    assert int(cn[S.SC_BIG]) == big


def _node_rows(df, cls):
    """Rows received by the native engine's nodes of class ``cls``."""
    stats = df._native.st[10]
    return [int(stats[i, 1]) for i, nd in enumerate(df._native.nodes)
            if isinstance(nd, cls)]


def _unsorted_reduces(df):
    """Per reduce of the dataflow's (first) sequential loop: whether its arrangement
    hands it the round's rows unsorted (``seqloop.FUSED_UNSORTED``)."""
    from ddnumba.kernels import seqloop as S
    nodes = S._nodes(df._native.st[12][0][0])
    return [int(nodes[nodes[i, S.P_ARR], S.P_FUSED]) == S.FUSED_UNSORTED
            for i in range(nodes.shape[0]) if nodes[i, S.P_KIND] == S.S_REDUCE]


@pytest.mark.parametrize("name, unsorted", [
    ("reach", [True]), ("capped_walks", [True]), ("transitive_closure", [True]),
    ("components_min", [False])])
def test_sequential_value_less_reduce_takes_its_delta_unsorted(name, unsorted,
                                                               monkeypatch):
    """A value-less ``distinct`` / ``top_k`` that alone reads its arrangement gets the
    round's rows as they were queued, neither sorted nor consolidated: it corrects a
    key once per row, each row against the history the rows before it left. A reduce
    with values (components' ``min``) gets a sorted delta. The answers of these
    programs are checked against the Python engine in test_twin_loops_sequential, and
    reachability's against BFS below."""
    df = _small_graph_run(name, "sequential", monkeypatch)
    assert df._native.sequential == [True]
    assert _unsorted_reduces(df) == unsorted
    if name == "reach":
        rng = np.random.default_rng(8)
        n = 400
        df, inputs, check, src, dst = _seq_reach(rng, n, 2 * n, 5)
        assert _unsorted_reduces(df) == [True]
        assert check(0, src, dst) > 100
        # runs of many changes: a round's delta holds a node reached along several
        # edges, some retracted and some added
        _slide(rng, df, inputs, check, src, dst, [1, 30, 200], n)


@pytest.mark.parametrize("body, cap, unsorted", [
    ("distinct", 1, [False]), ("top_k", 2, [False]),
    ("distinct_twice", 1, [True, False])])
def test_sequential_unsorted_delta_never_gets_its_own_corrections(body, cap, unsorted):
    """A reduce reading an unsorted delta may correct a key by a pair of rows that
    cancel (one per row of the key). Fed back unconsolidated into that arrangement,
    such a pair would come back round after round and the loop would never end; so
    an arrangement that such a reduce's corrections reach sorts its delta (in
    ``x -> x.distinct().distinct()`` the first reduce's arrangement stays unsorted:
    the second consolidates what the first emits). Per time, the loop's answer is the
    input accumulated there with every positive count capped (``distinct``: 1,
    ``top_k(2)`` of whole rows: 2), over random updates and retractions at many
    times."""
    f = {"distinct": lambda x: x.distinct(),
         "top_k": lambda x: x.top_k(2, key=2),
         "distinct_twice": lambda x: x.distinct().distinct()}[body]
    rng = np.random.default_rng(9)
    df = dd.Dataflow(engine="native", loops="sequential")
    h, c = df.new_input(["k", "v"])
    out = c.iterate(f, max_iterations=GUARD).capture()
    acc = {}
    for t in range(15):
        k, v = rng.integers(0, 4, 10), rng.integers(0, 3, 10)
        d = rng.choice([-2, -1, 1, 2, 3], 10)
        h.update(k, v, time=t, diff=d)
        h.advance_to(t + 1)
        df.run()
        for row in zip(k.tolist(), v.tolist(), d.tolist()):
            acc[row[:2]] = acc.get(row[:2], 0) + row[2]
        rows, counts = out.accumulate(t)
        have = {(int(a), int(b)): int(x) for (a, b), x in zip(rows.tolist(),
                                                               counts.tolist())}
        assert have == {r: min(x, cap) for r, x in acc.items() if x > 0}, f"t={t}"
    assert _unsorted_reduces(df) == unsorted


@pytest.mark.parametrize("name, kept", [("reach", 0), ("iterative_parity", 0),
                                         ("lagged_reach", 1)])
def test_sequential_feedbacks_folded_into_routes(name, kept):
    """A sequential loop folds a feedback into the routes through it (the iteration
    shift grows by one) unless its rows reach another feedback; the loop then has a
    node of its own only for the feedbacks kept. Each program's answer is checked
    against BFS (a lagged hop takes two iterations; parity: walks of even length)."""
    from ddnumba.kernels import seqloop as S
    rng = np.random.default_rng(4)
    n, m = 60, 120
    src, dst = rng.integers(0, n, m), rng.integers(0, n, m)
    roots = np.array([0, 1])
    df = dd.Dataflow(engine="native", loops="sequential", workers=1)
    ri, r = df.new_input(["node"])
    ei, e = df.new_input(["src", "dst"])
    outs = PROGRAMS_GRAPH[name]([], r, e)
    caps = [o.capture() for o in (outs if isinstance(outs, tuple) else (outs,))]
    ri.insert(roots, time=0)
    ei.insert(src, dst, time=0)
    ri.advance_to(1)
    ei.advance_to(1)
    df.run()
    assert df._native.sequential == [True]
    nodes = S._nodes(df._native.st[12][0][0])
    assert int((nodes[:, S.P_KIND] == S.S_FEEDBACK).sum()) == kept
    shifts = S._routes(df._native.st[12][0][0])[:, S.R_SHIFT]
    assert shifts.max() == 1, "no route carries the folded feedback's shift"
    g = nx.DiGraph()
    g.add_nodes_from(range(n))
    g.add_edges_from(zip(src.tolist(), dst.tolist()))
    reached = set(roots.tolist())
    for x in roots.tolist():
        reached |= nx.descendants(g, x)
    if name == "iterative_parity":
        h = nx.DiGraph()        # pairs of steps: even walks
        h.add_edges_from((a, c) for a, b in g.edges for c in g.successors(b))
        want = set(roots.tolist())
        for x in roots.tolist():
            want |= nx.descendants(h, x)
    else:
        want = reached
    got = {int(v) for v in caps[0].at(0).column(0).to_pylist()}
    assert got == want


def test_sequential_leave_sums_a_keys_rows():
    """A node reached at another depth leaves the reach loop's distinct as a -1 and a
    +1 at two iterations, one after the other; the leave drops iterations and sums
    such rows as they come (seqloop._leave_copy), so it receives fewer rows than the
    distinct emits. Forty changes at forty times in one run, every time against BFS."""
    from ddnumba.operators.iterate import LeaveNode
    from ddnumba.operators.reduce import ReduceNode
    rng = np.random.default_rng(21)
    n = 300
    df, (ri, ei), check, src, dst = _seq_reach(rng, n, 3 * n, 3)
    assert check(0, src, dst) > 600

    def emitted():
        stats = df._native.st[10]
        (e,) = [int(stats[i, 2]) for i, nd in enumerate(df._native.nodes)
                if isinstance(nd, ReduceNode)]
        return e

    (left0,), out0 = _node_rows(df, LeaveNode), emitted()
    live = list(zip(src.tolist(), dst.tolist()))
    windows = []
    for t in range(1, 41):
        old = live.pop(0)
        new = tuple(int(x) for x in rng.integers(0, n, 2))
        live.append(new)
        ei.update([old[0], new[0]], [old[1], new[1]], time=t, diff=[-1, 1])
        windows.append(np.array(live, np.int64))
    ri.advance_to(41)
    ei.advance_to(41)
    df.run()
    for t, w in enumerate(windows, 1):
        check(t, w[:, 0].copy(), w[:, 1].copy())
    (left,), out = _node_rows(df, LeaveNode), emitted()
    assert out - out0 > 100, "the changes moved too little to show anything"
    assert left - left0 < (out - out0) // 2


def _least_labels_loaded(n, s, d):
    """Least-label propagation (labels start as the node ids) over edges ``s -> d``,
    loaded at time 0 with sequential loops: ``(dataflow, capture)``."""
    from ddnumba.algorithms import _propagate_min
    df = dd.Dataflow(engine="native", loops="sequential")
    li, lab0 = df.new_input(["node", "label"])
    ei, edges = df.new_input(["src", "dst"])
    cap = _propagate_min(edges, lab0).capture()
    li.insert(np.arange(n), np.arange(n), time=0)
    ei.insert(s, d, time=0)
    li.advance_to(1)
    ei.advance_to(1)
    df.run()
    assert df._native.sequential == [True]
    return df, cap


def test_sequential_leave_rows_consolidated_at_the_root():
    """Least-label propagation improves labels over iterations, so within the load's
    one outer time the loop sends a node's early labels out and retracts them later.
    The leave drops the iterations (summing a row into the one before it when they are
    alike, which labels replacing each other are not) and the root consolidates the
    run's rows, so the capture receives exactly the final labels, which match
    networkx. The leave counts each row it keeps once."""
    from ddnumba.operators.iterate import LeaveNode
    from ddnumba.operators.output import CaptureNode
    rng = np.random.default_rng(5)
    n, m = 1000, 2500
    s, d = rng.integers(0, n, m), rng.integers(0, n, m)
    df, cap = _least_labels_loaded(n, s, d)
    g = nx.DiGraph()
    g.add_nodes_from(range(n))
    g.add_edges_from(zip(s.tolist(), d.tolist()))
    want = {(v, min(nx.ancestors(g, v) | {v})) for v in range(n)}
    t = cap.at(0)
    got = {(int(a), int(b)) for a, b in zip(t.column(0).to_pylist(),
                                            t.column(1).to_pylist())}
    assert got == want
    (left,) = _node_rows(df, LeaveNode)
    assert left > 2 * len(want), "no label was improved: the test shows nothing"
    assert _node_rows(df, CaptureNode) == [len(want)]
    # every row the min emitted went out once (to the leave; the feedback also gets
    # it): its rows replace a label by another, never alike, so the leave sums none
    from ddnumba.operators.reduce import ReduceNode
    stats = df._native.st[10]
    (emitted,) = [int(stats[i, 2]) for i, nd in enumerate(df._native.nodes)
                  if isinstance(nd, ReduceNode)]
    assert left == emitted


def test_sequential_leave_of_a_million_rows():
    """A load whose loop sends the root scope more than a million rows, among them
    labels retracted again within the time: they are consolidated where the loop hands
    them over, their memory given back as the sort proceeds
    (kernels.batch.consolidate_dead), and the capture holds exactly the final labels.
    Least labels along chains of 8 nodes, ids shuffled: a node's label is the least id
    before it on its chain."""
    from ddnumba.kernels.batch import DEAD_MIN
    from ddnumba.operators.iterate import LeaveNode
    rng = np.random.default_rng(17)
    n, chain = 600_000, 8
    pos = rng.permutation(n).reshape(-1, chain)     # the nodes of each chain in order
    s, d = pos[:, :-1].ravel(), pos[:, 1:].ravel()
    df, cap = _least_labels_loaded(n, s, d)
    (left,) = _node_rows(df, LeaveNode)
    assert left >= DEAD_MIN, "too few rows to reach the path under test"
    want = np.empty(n, np.int64)
    want[pos.ravel()] = np.minimum.accumulate(pos, axis=1).ravel()
    t = cap.at(0)
    node = t.column(0).to_numpy()
    label = t.column(1).to_numpy()
    assert len(node) == n and np.array_equal(np.sort(node), np.arange(n))
    np.testing.assert_array_equal(label[np.argsort(node)], want)


def test_sequential_leave_rows_that_cancel_queue_nothing():
    """Single edge changes that move nodes to other depths without changing what is
    reached: the loop's rows for them cancel once the iterations go, and the root scope
    must get no batch at all -- an empty one would stay queued at the leave (its step
    takes only non-empty input), one more with every such run. Every run against BFS;
    some runs must have sent the leave rows that cancelled."""
    from ddnumba.operators.iterate import LeaveNode
    rng = np.random.default_rng(3)
    n = 200
    df, (ri, ei), check, src, dst = _seq_reach(rng, n, 2 * n, 3)
    eng = df._native
    (leave,) = [i for i, nd in enumerate(eng.nodes) if isinstance(nd, LeaveNode)]
    stats = eng.st[10]
    live = list(zip(src.tolist(), dst.tolist()))
    cancelled = 0
    for t in range(1, 301):
        old = live.pop(0)
        new = tuple(int(x) for x in rng.integers(0, n, 2))
        live.append(new)
        ei.update([old[0], new[0]], [old[1], new[1]], time=t, diff=[-1, 1])
        ei.advance_to(t + 1)
        ri.advance_to(t + 1)
        rows, steps = int(stats[leave, 1]), int(stats[leave, 0])
        df.run()
        assert len(eng.st[0][int(eng.qbase[leave])]) == 0, f"run {t}"
        w = np.array(live, np.int64)
        check(t, w[:, 0].copy(), w[:, 1].copy())
        # rows that reached the leave are counted, and its step ran only if some
        # were left after consolidation
        cancelled += int(stats[leave, 1]) > rows and int(stats[leave, 0]) == steps
    assert cancelled >= 3, "no run's leave rows cancelled: the test shows nothing"


def test_unknown_loop_mode(monkeypatch):
    monkeypatch.setenv("DDNUMBA_LOOPS", "fast")
    df = dd.Dataflow(engine="native")
    h, c = df.new_input(["x"])
    c.iterate(lambda x: x.distinct()).capture()
    with pytest.raises(ValueError, match="DDNUMBA_LOOPS"):
        df.run()


@pytest.mark.parametrize("name", sorted(SEQUENTIAL))
@SETTINGS
@given(data=st.data(), streams=graph_streams())
def test_twin_loops_sequential(name, data, streams):
    """Loops run sequentially (the default) against the Python engine (test_twin_loops
    runs them round-wise)."""
    with loops_in("sequential"):
        check_twin(PROGRAMS_GRAPH[name], RE, data, list(streams),
                   strict=name not in LEAVE_VARIABLE)


# ------------------------------------------------------------ long seeded runs


class LongStream:
    """Random updates for one input over many runs (seeded).

    ``sets=False``: rows from ``0..domain-1`` with diffs in {-2, -1, 1, 1, 2, 3} at random
    times at or after the input's frontier (so earlier times than some already fed, and
    several distinct times per run). ``sets=True``: each update toggles a row of a set
    (inserts absent rows, removes present ones), at times increasing by 0..2 per update
    (the accumulation is a set at every time).
    """

    def __init__(self, rng, arity, domain, *, sets=False, start=6):
        self.rng, self.arity, self.domain, self.sets = rng, arity, domain, sets
        self.frontier = 0
        self.last = 0
        self.state = set()
        self.closed = False
        if sets:
            while len(self.state) < start:
                self.state.add(self._row())
            self.initial = [(r, (0,), 1) for r in sorted(self.state)]
        else:
            self.initial = [(self._row(), (0,), 1) for _ in range(start)]

    def _row(self):
        return tuple(int(x) for x in self.rng.integers(0, self.domain, self.arity))

    def batch(self, n):
        rng, out = self.rng, []
        for _ in range(n):
            if self.sets:
                self.last += int(rng.integers(0, 3))
                if self.state and rng.random() < 0.5:
                    r = sorted(self.state)[int(rng.integers(len(self.state)))]
                else:
                    r = self._row()
                d = -1 if r in self.state else 1
                self.state ^= {r}
                out.append((r, (self.last,), d))
            else:
                t = self.frontier + int(rng.integers(0, 5))
                self.last = max(self.last, t)
                d = int(rng.choice([-2, -1, 1, 1, 2, 3]))
                out.append((self._row(), (t,), d))
        return out

    def advance(self):
        """A new frontier: unchanged, part of the way, or past every time fed."""
        u = self.rng.random()
        if u < 0.25:
            return self.frontier
        if u < 0.6:
            f = int(self.rng.integers(self.frontier, self.last + 2))
        else:
            f = self.last + 1
        self.frontier = max(self.frontier, f)
        if self.sets:
            self.last = max(self.last, self.frontier)
        return self.frontier


def long_drive(twin, streams, rng, runs):
    for i, s in enumerate(streams):
        twin.update(i, s.initial)
    for r in range(runs):
        for i, s in enumerate(streams):
            if s.closed:
                continue
            n = int(rng.integers(0, 7)) if rng.random() < 0.8 else 0
            ups = s.batch(n)
            k = int(rng.integers(0, len(ups) + 1))
            twin.update(i, ups[:k], arrow=bool(rng.random() < 0.3))
            twin.update(i, ups[k:])
            if r > runs // 2 and rng.random() < 0.03:
                twin.close(i)
                s.closed = True
            else:
                twin.advance_to(i, s.advance())
        twin.run()
    for i, s in enumerate(streams):
        if not s.closed:
            twin.close(i)
    twin.run()
    assert twin.open_from() > twin.max_time


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("name", sorted(PROGRAMS_AB))
def test_twin_long_two_inputs(name, seed):
    rng = np.random.default_rng(1000 * seed + sorted(PROGRAMS_AB).index(name))
    twin = Twin(PROGRAMS_AB[name], AB)
    long_drive(twin, [LongStream(rng, 2, 6), LongStream(rng, 2, 6)], rng, runs=60)


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("name", sorted(PROGRAMS_GRAPH))
def test_twin_long_loops(name, seed):
    rng = np.random.default_rng(2000 * seed + sorted(PROGRAMS_GRAPH).index(name))
    twin = Twin(PROGRAMS_GRAPH[name], RE, strict=name not in LEAVE_VARIABLE)
    streams = [LongStream(rng, 1, 12, sets=True, start=2),
               LongStream(rng, 2, 12, sets=True, start=18)]
    long_drive(twin, streams, rng, runs=60)


@pytest.mark.parametrize("name", ["count_sum", "join", "reduce_user", "linear", "top_k",
                                  "reach", "shortest_paths", "iterative_parity"])
def test_twin_huge_times(name):
    """Times near 2**60 (far from the runtime's INF frontier sentinel)."""
    big = 2 ** 60
    if name in PROGRAMS_AB:
        twin = Twin(PROGRAMS_AB[name], AB)
        twin.update(0, [((1, 2), (big,), 1), ((1, 3), (big + 5,), 2)])
        twin.update(1, [((1, 7), (big + 2,), 1), ((1, 2), (0,), 1)])
        twin.advance_to(0, big + 3)
        twin.advance_to(1, big + 3)
        twin.run()
        twin.update(0, [((1, 2), (big + 4,), -1)])
    else:
        twin = Twin(PROGRAMS_GRAPH[name], RE, strict=name not in LEAVE_VARIABLE)
        twin.update(0, [((0,), (big,), 1)])
        twin.update(1, [((0, 1), (big + 1,), 1), ((1, 2), (big,), 1),
                        ((0, 2), (big + 3,), 1)])
        twin.advance_to(0, big + 2)
        twin.advance_to(1, big + 2)
        twin.run()
    twin.close(0)
    twin.close(1)
    twin.run()
    assert any(len(c.raw()) for c in twin.sides[0].caps)


# ------------------------------------------------------ the harness can fail


def _engine_skew(kind):
    """A program that deliberately differs between the engines, in one way."""
    def program(seen, a, b):
        native = a.dataflow.engine == "native"
        if kind == "value":          # one row differs (v == 4 only)
            return a.map(lambda k, v: (k, v + ((v == 4) & native)))
        if kind == "late_time":      # the native copy is delayed to a time never closed
            return a.delay(lambda t: t + (100 if native else 0))
        if kind == "frontier":       # the same data; the native capture waits on b
            if native:
                nothing = a.join(b.filter(lambda k, w: k < 0)).map(lambda k, v, w: (k, v))
                return nothing.concat(a)
            return a.concat(a.negate()).concat(a)
        if kind == "inspect":        # the native inspect sees one more row
            return a.inspect(lambda t: seen.append(
                ("=a", t if not native else t.slice(0, max(t.num_rows - 1, 0)))))
        raise ValueError(kind)
    return program


@pytest.mark.parametrize("kind, message", [("value", "captured updates differ"),
                                           ("late_time", "captured updates differ"),
                                           ("frontier", "capture frontier"),
                                           ("inspect", "inspect '=a' saw different")])
@pytest.mark.parametrize("strict", [True, False])
def test_twin_detects_a_difference(kind, message, strict):
    """The comparison is not vacuous: a program that differs between the engines in a
    single row, time, frontier or inspected update fails it."""
    twin = Twin(_engine_skew(kind), AB, strict=strict)
    twin.update(0, [((1, 2), (0,), 1), ((1, 4), (1,), 1), ((2, 4), (3,), -1)])
    twin.advance_to(0, 2)
    with pytest.raises(AssertionError, match=message):
        twin.run()
        twin.advance_to(0, 5)
        twin.advance_to(1, 5)
        twin.run()
        twin.close(0)
        twin.close(1)
        twin.run()


# ------------------------------------------------------------- against networkx


def _as_set(cap, t):
    tbl = cap.at(t)
    cols = [tbl.column(i).to_pylist() for i in range(tbl.num_columns - 1)]
    counts = tbl.column(tbl.num_columns - 1).to_pylist()
    rows = list(zip(*cols))
    assert all(c == 1 for c in counts), f"at({t}): counts other than 1: {counts}"
    return set(rows)


def nx_reach(roots, edges):
    g = nx.DiGraph(list(edges))
    out = set(roots)
    for r in roots:
        if r in g:
            out |= nx.descendants(g, r)
    return {(v,) for v in out}


def nx_components(edges):
    g = nx.Graph(list(edges))
    return {(v, min(comp)) for comp in nx.connected_components(g) for v in comp}


def nx_distances(roots, edges):
    g = nx.DiGraph()
    for s, d in edges:
        g.add_edge(s, d, weight=1 + (s + d) % 3)
    g.add_nodes_from(roots)
    if not roots:
        return set()
    dist = nx.multi_source_dijkstra_path_length(g, set(roots))
    return {(v, int(x)) for v, x in dist.items()}


def nx_closure(edges):
    return set(nx.transitive_closure(nx.DiGraph(list(edges)), reflexive=False).edges())


NX_PROGRAMS = {
    "closure": (lambda roots, edges: transitive_closure(edges),
                lambda roots, edges: nx_closure(edges)),
    "reach": (lambda roots, edges: reach(roots, edges), nx_reach),
    "components": (lambda roots, edges: components(edges),
                   lambda roots, edges: nx_components(edges)),
    "shortest_paths": (shortest_paths, nx_distances),
}
#: the NX_PROGRAMS whose loop runs sequentially in loop mode "sequential"
NX_SEQUENTIAL = {"closure", "reach", "components"}


def _check_loop_mode(df, prog, loops):
    assert all(df._native.sequential) == (loops == "sequential" and prog in NX_SEQUENTIAL)


class GraphChanges:
    """A random graph (a set of edges) and roots, changed one edge (or root) at a time:
    remove a random edge or add a random absent one, sometimes toggle a root."""

    def __init__(self, rng, n, m, n_roots):
        self.rng, self.n = rng, n
        self.edges = set()
        while len(self.edges) < m:
            self.edges.add(tuple(int(x) for x in rng.integers(0, n, 2)))
        self.roots = {int(x) for x in rng.choice(n, n_roots, replace=False)}

    def change(self):
        """One change: ``("edge" | "root", row, diff)``, applied to the state."""
        rng = self.rng
        if rng.random() < 0.1:
            r = int(rng.integers(self.n))
            d = -1 if r in self.roots else 1
            self.roots.symmetric_difference_update({r})
            return "root", (r,), d
        if self.edges and rng.random() < 0.5:
            e = sorted(self.edges)[int(rng.integers(len(self.edges)))]
            self.edges.remove(e)
            return "edge", e, -1
        e = tuple(int(x) for x in rng.integers(0, self.n, 2))
        if e in self.edges:
            self.edges.remove(e)
            return "edge", e, -1
        self.edges.add(e)
        return "edge", e, 1


def _native_graph_dataflow(build):
    df = dd.Dataflow()          # engine "auto": must pick the native engine
    ri, roots = df.new_input(["node"])
    ei, edges = df.new_input(["src", "dst"])
    cap = build(roots, edges).capture()
    return df, ri, ei, cap


def _insert_graph(ri, ei, g, t):
    ri.insert(np.array(sorted(g.roots), dtype=np.int64), time=t)
    es = np.array(sorted(g.edges), dtype=np.int64).reshape(-1, 2)
    ei.insert(es[:, 0].copy(), es[:, 1].copy(), time=t)


@pytest.mark.parametrize("loops", ["rounds", "sequential"])
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("prog", sorted(NX_PROGRAMS))
def test_networkx_single_change_runs(prog, seed, loops, monkeypatch):
    """One change per run, at its own time; the output at every time against networkx."""
    monkeypatch.delenv("DDNUMBA_LOOPS", raising=False)
    monkeypatch.setattr(NativeEngine, "loop_mode", loops)
    build, oracle = NX_PROGRAMS[prog]
    rng = np.random.default_rng(100 + seed)
    g = GraphChanges(rng, n=25, m=40, n_roots=3)
    df, ri, ei, cap = _native_graph_dataflow(build)
    _insert_graph(ri, ei, g, 0)
    ri.advance_to(1)
    ei.advance_to(1)
    df.run()
    assert isinstance(df._native, NativeEngine)
    _check_loop_mode(df, prog, loops)
    assert _as_set(cap, 0) == oracle(g.roots, g.edges), "t=0"
    for t in range(1, 151):
        what, row, d = g.change()
        (ri if what == "root" else ei).update(*[[x] for x in row], time=t, diff=d)
        ri.advance_to(t + 1)
        ei.advance_to(t + 1)
        df.run()
        assert _as_set(cap, t) == oracle(g.roots, g.edges), f"t={t} after {what} {row} {d}"


@pytest.mark.parametrize("loops", ["rounds", "sequential"])
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("prog", sorted(NX_PROGRAMS))
def test_networkx_batched_runs(prog, seed, loops, monkeypatch):
    """Batches of changes, one distinct time per change, one run per batch; the frontier
    sometimes stops short of the batch's last times, which complete in a later run."""
    monkeypatch.delenv("DDNUMBA_LOOPS", raising=False)
    monkeypatch.setattr(NativeEngine, "loop_mode", loops)
    build, oracle = NX_PROGRAMS[prog]
    rng = np.random.default_rng(200 + seed)
    g = GraphChanges(rng, n=25, m=40, n_roots=3)
    df, ri, ei, cap = _native_graph_dataflow(build)
    _insert_graph(ri, ei, g, 0)
    expected = {0: oracle(g.roots, g.edges)}
    t = 1
    checked = 0          # times < checked were compared
    for _ in range(25):
        size = int(rng.integers(1, 13))
        for _ in range(size):
            what, row, d = g.change()
            (ri if what == "root" else ei).update(*[[x] for x in row], time=t, diff=d)
            expected[t] = oracle(g.roots, g.edges)
            t += 1
        # Leave up to three of this batch's times open.
        f = t - int(rng.integers(0, min(size, 3) + 1))
        f = max(f, checked)
        ri.advance_to(f)
        ei.advance_to(f)
        df.run()
        assert isinstance(df._native, NativeEngine)
        _check_loop_mode(df, prog, loops)
        for s in range(checked, f):
            assert _as_set(cap, s) == expected[s], f"t={s}"
        assert not cap.done(f)
        checked = f
    ri.close()
    ei.close()
    df.run()
    for s in range(checked, t):
        assert _as_set(cap, s) == expected[s], f"t={s} (after closing)"


@pytest.mark.parametrize("per_pass", [1024, 7])
@pytest.mark.parametrize("prog", sorted(NX_PROGRAMS))
def test_networkx_many_times_in_one_run(prog, per_pass, monkeypatch):
    """300 changes at 300 distinct times: half of them in one run, the rest in a second
    run that closes the inputs; the output at every time against networkx. With
    ``per_pass=7`` each run is executed as passes over 7 new times at a time (see
    ``NativeEngine.max_times_per_pass``)."""
    monkeypatch.setattr(NativeEngine, "max_times_per_pass", per_pass)
    build, oracle = NX_PROGRAMS[prog]
    rng = np.random.default_rng(300)
    g = GraphChanges(rng, n=40, m=60, n_roots=3)
    df, ri, ei, cap = _native_graph_dataflow(build)
    _insert_graph(ri, ei, g, 0)
    expected = {0: oracle(g.roots, g.edges)}
    for t in range(1, 301):
        what, row, d = g.change()
        (ri if what == "root" else ei).update(*[[x] for x in row], time=t, diff=d)
        expected[t] = oracle(g.roots, g.edges)
    ri.advance_to(151)
    ei.advance_to(151)
    df.run()
    assert isinstance(df._native, NativeEngine)
    for s in range(151):
        assert _as_set(cap, s) == expected[s], f"t={s}"
    ri.close()
    ei.close()
    df.run()
    for s in range(151, 301):
        assert _as_set(cap, s) == expected[s], f"t={s} (after closing)"
    # 150 new times a run, far more updates than the state holds: passes of 7 or more
    # times with per_pass=7 (several a run), one pass a run otherwise
    if per_pass == 7:
        assert df._native.passes > 4
    else:
        assert df._native.passes == 2


# ------------------------------------------------------------------ bounded state


@pytest.mark.parametrize("loops", ["rounds", "sequential"])
def test_state_bounded_under_sliding_window(loops, monkeypatch):
    """Reachability over 300 nodes and 600 edges; 2000 runs each removing the oldest edge
    and adding a random one at a new time. Traces compact, so the state after the last
    run stays within 3x the state after the first 200 runs (history would grow ~10x).
    Sequential loops hold hashed state: its records, rows and arena stay bounded too."""
    monkeypatch.delenv("DDNUMBA_LOOPS", raising=False)
    monkeypatch.setattr(NativeEngine, "loop_mode", loops)
    rng = np.random.default_rng(7)
    n, m = 300, 600
    df, ri, ei, cap = _native_graph_dataflow(reach)
    window = [tuple(int(x) for x in rng.integers(0, n, 2)) for _ in range(m)]
    roots = set(range(10))
    w = np.array(window, dtype=np.int64)
    ei.insert(w[:, 0].copy(), w[:, 1].copy(), time=0)
    ri.insert(np.arange(10), time=0)
    ri.close()
    ei.advance_to(1)
    df.run()
    native = df._native
    assert isinstance(native, NativeEngine)
    first = None
    for t in range(1, 2001):
        old = window.pop(0)
        new = tuple(int(x) for x in rng.integers(0, n, 2))
        window.append(new)
        ei.update([old[0], new[0]], [old[1], new[1]], time=t, diff=[-1, 1])
        ei.advance_to(t + 1)
        df.run()
        if t == 200:
            first = native.state_records()
        if t % 500 == 0:
            assert _as_set(cap, t) == nx_reach(roots, window), f"t={t}"
    last = native.state_records()
    assert first > 0
    assert last < 3 * first, (f"state grew from {first} records (run 200) to {last} "
                              f"(run 2000)")
    assert native.sequential == [loops == "sequential"]
    if loops == "sequential":
        tab, arena, meta = native.st[11][0]
        assert meta[0] < 4 * 300 * 12 and tab.shape[0] <= 16384, "hashed rows grew"
        assert arena.shape[0] < 8 * last, "hashed arena grew"
    # The premise: the traces' whole history (every update that entered an arrangement
    # or left a reduce) is far beyond the bound, so compaction is what keeps state small.
    history = sum(u_in if type(node).__name__ == "ArrangeNode" else u_out
                  for node, _, u_in, u_out in native.node_stats()
                  if type(node).__name__ in ("ArrangeNode", "ReduceNode"))
    assert history > 9 * first, (history, first)


# ------------------------------------------------------------------ the contract


def _native_df(**kw):
    df = dd.Dataflow(engine="native", **kw)
    return df


@pytest.mark.parametrize("engine", ENGINES)
def test_max_iterations_in_a_later_run(engine):
    """A loop that converged within the limit raises once a later change needs more
    iterations than the limit (on both engines); a change that needs fewer does not."""
    df = dd.Dataflow(engine=engine)
    xi, x0 = df.new_input(["v"])
    out = x0.iterate(lambda x: x.map(lambda v: v + 1).filter(lambda v: v < 1000)
                     .concat(x0).distinct(), max_iterations=30, name="bounded")
    cap = out.capture()
    xi.insert([990], time=0)
    xi.advance_to(1)
    df.run()
    assert _as_set(cap, 0) == {(v,) for v in range(990, 1000)}
    xi.insert([975], time=1)
    xi.advance_to(2)
    df.run()
    assert _as_set(cap, 1) == {(v,) for v in range(975, 1000)}
    xi.insert([0], time=2)
    xi.advance_to(3)
    with pytest.raises(IterationLimitError, match="bounded"):
        df.run()


def _slow_loop(engine, n):
    """A dataflow whose loop ``slow`` (no ``max_iterations``) takes ``n`` iterations
    to its fixed point of ``n`` records, fed and ready to run; and its capture."""
    df = dd.Dataflow(engine=engine)
    xi, x0 = df.new_input(["v"])
    out = x0.iterate(lambda x: x.map(lambda v: v + 1).filter(lambda v: v < n)
                     .concat(x0).distinct(), name="slow")
    cap = out.capture()
    xi.insert([0], time=0)
    xi.advance_to(1)
    return df, cap


def test_long_loop_without_limit_warns_once():
    """A loop without ``max_iterations`` still changing at iteration 10000 warns once,
    naming the loop, and then runs to its fixed point."""
    df, cap = _slow_loop("native", 10050)
    with pytest.warns(RuntimeWarning, match="loop 'slow' is at iteration") as rec:
        df.run()
    assert len([w for w in rec if "slow" in str(w.message)]) == 1
    assert len(cap.at(0)) == 10050


@pytest.mark.parametrize("engine, sigint", [("native", "default"), ("native", "ignored"),
                                            ("python", "ignored")])
def test_long_loop_warning_says_whether_ctrl_c_can_stop_it(engine, sigint):
    """The warning at iteration 10000 promises Ctrl-C only where it works: a process
    started with SIGINT ignored (a background job, ``nohup``) is told to use kill.
    (The Python engine's default case is the hint's own test below: its loop takes
    ~8 s here.)"""
    import signal
    df, cap = _slow_loop(engine, 10003)
    before = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.SIG_IGN if sigint == "ignored"
                  else signal.default_int_handler)
    try:
        with pytest.warns(RuntimeWarning, match="loop 'slow' is at iteration") as rec:
            df.run()
        assert signal.getsignal(signal.SIGINT) is (
            signal.SIG_IGN if sigint == "ignored" else signal.default_int_handler)
    finally:
        signal.signal(signal.SIGINT, before)
    [msg] = [str(w.message) for w in rec if "slow" in str(w.message)]
    if sigint == "ignored":
        assert "SIGINT is ignored" in msg and "kill" in msg and "Ctrl-C interrupts" not in msg
    else:
        assert "Ctrl-C interrupts it" in msg and "ignored" not in msg
    assert len(cap.at(0)) == 10003


def test_ctrl_c_hint_follows_sigint_and_rank(monkeypatch):
    """The hint reads the SIGINT disposition when it is asked; a worker process, which
    ignores SIGINT because its driver handles Ctrl-C, is given the usual hint."""
    import signal
    from ddnumba import workers
    from ddnumba.operators.iterate import ctrl_c_hint
    before = signal.getsignal(signal.SIGINT)
    try:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        assert ctrl_c_hint() == "Ctrl-C interrupts it"
        signal.signal(signal.SIGINT, lambda *a: None)
        assert ctrl_c_hint() == "Ctrl-C interrupts it"
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        assert "SIGINT is ignored" in ctrl_c_hint()
        monkeypatch.setattr(workers, "_RANK", 1)
        assert ctrl_c_hint() == "Ctrl-C interrupts it"
    finally:
        signal.signal(signal.SIGINT, before)


# (Each script below takes SIGINT back first: a test run started as a background job
# of a shell without job control inherits SIGINT ignored, and so would the script.)
# A loop that never converges, started after the same loop with a limit, so that
# every kernel it uses is compiled (or loaded) before the signal: on a cold cache the
# first run() compiles some for this program, and a Ctrl-C there stops the compile,
# not the loop. Then "running", and ``df`` is the runaway dataflow.
_RUNAWAY_LOOP = """
import signal, sys, warnings
import ddnumba as dd
from ddnumba.operators.iterate import IterationLimitError
warnings.simplefilter("ignore")
for limit in (12000, None):
    df = dd.Dataflow(engine="native", loops=sys.argv[1])
    ci, c = df.new_input(["k"])
    cap = c.iterate(lambda v: v.concat(c), name="runaway", max_iterations=limit).capture()
    ci.insert([1, 2], time=0)
    ci.advance_to(1)
    if limit is not None:
        try:
            df.run()
        except IterationLimitError:
            pass
print("running", flush=True)
import faulthandler
faulthandler.dump_traceback_later(45)      # (where it is, should it not stop: stderr)
"""

_RUNAWAY = """
import signal
signal.signal(signal.SIGINT, signal.default_int_handler)
""" + _RUNAWAY_LOOP + """
try:
    df.run()
except KeyboardInterrupt:
    print("interrupted", flush=True)
try:
    df.run()
except RuntimeError as e:
    print("refused:", "KeyboardInterrupt" in str(e), flush=True)
"""

_RUNAWAY_OWN_HANDLER = """
import signal
calls = []


def mine(signum, frame):
    # what a SparkContext's handler does: its own work, then KeyboardInterrupt
    calls.append(signum)
    raise KeyboardInterrupt


signal.signal(signal.SIGINT, mine)
""" + _RUNAWAY_LOOP + """
try:
    df.run()
except KeyboardInterrupt:
    print("interrupted", calls == [signal.SIGINT], signal.getsignal(signal.SIGINT) is mine,
          flush=True)
"""


def _interrupt_runaway(tmp_path, script_text, loops):
    """Run a runaway script (see _RUNAWAY_LOOP), send it SIGINT 3 s after it says
    "running", and return ``(returncode, stdout, stderr)`` (fails the test when the
    script does not stop within 60 s)."""
    import signal
    import subprocess
    import sys
    import time
    script = tmp_path / "runaway.py"
    script.write_text(script_text)
    proc = subprocess.Popen([sys.executable, str(script), loops], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "running"
        time.sleep(3.0)
        assert proc.poll() is None          # still iterating
        proc.send_signal(signal.SIGINT)
        try:
            out, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            pytest.fail(f"no answer to SIGINT within 60 s; stdout {out!r}; stderr "
                        f"(the script's tracebacks at 45 s) {err[-4000:]}")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return proc.returncode, out, err


@pytest.mark.parametrize("loops", ["sequential", "rounds"])
def test_runaway_loop_stops_on_ctrl_c(tmp_path, loops):
    # A loop that never converges (no max_iterations) inside compiled code: Ctrl-C
    # (SIGINT) stops it within seconds, as KeyboardInterrupt out of run(), and the
    # dataflow then refuses to run. (Compiled code never lets Python see a signal;
    # the engine holds it, the loop calls back every 1,024 iterations past 10,000,
    # and the held interrupt is raised there. Before it was held, it could be raised
    # inside Numba's glue of another call back, release_rows, as a TypeError.)
    code, out, err = _interrupt_runaway(tmp_path, _RUNAWAY, loops)
    assert code == 0, err
    assert out.split() == ["interrupted", "refused:", "True"], (out, err)


@pytest.mark.parametrize("loops", ["sequential", "rounds"])
def test_runaway_loop_stops_on_ctrl_c_under_a_handler_of_the_programs(tmp_path, loops):
    # A program with a SIGINT handler of its own (as a SparkContext installs): the
    # engine holds the Ctrl-C and calls that handler at the loop's next check-in,
    # outside compiled code; its KeyboardInterrupt stops the run, and the handler is
    # the program's again afterwards.
    code, out, err = _interrupt_runaway(tmp_path, _RUNAWAY_OWN_HANDLER, loops)
    assert code == 0, err
    assert out.split() == ["interrupted", "True", "True"], (out, err)


_CTRL_C_IN_CALLBACKS = """
import json, os, signal, sys, threading, time, warnings
signal.signal(signal.SIGINT, signal.default_int_handler)
import numpy as np
import ddnumba as dd
from ddnumba.operators.iterate import IterationLimitError
warnings.simplefilter("ignore")
loops = sys.argv[1]
faulthandler = __import__("faulthandler")
faulthandler.dump_traceback_later(90)      # (where it is, should it hang: stderr)
out = {}
armed = [False]
MARK = 1234567           # (a key the map's build-time probes do not make up)


def slow(k):
    # a Python map (a call back from compiled code with arrays); once armed, it sends
    # this process SIGINT, then waits in Python: the interrupt must stop it there
    if armed[0] and isinstance(k, np.ndarray) and (np.abs(k) == MARK).any():
        armed[0] = False
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(600):
            time.sleep(0.1)
        out["slept"] = True
    return np.abs(k)


def runaway(limit, f=np.abs):
    df = dd.Dataflow(engine="native", loops=loops)
    ci, c = df.new_input(["k"])
    c.iterate(lambda v: v.map(f).concat(c), name="runaway", max_iterations=limit).capture()
    ci.insert([1, 2, MARK], time=0)
    ci.advance_to(1)
    return df


def outcome(df):
    try:
        df.run()
        r = "finished"
    except KeyboardInterrupt:
        r = "interrupted"
    except BaseException as e:
        r = f"{type(e).__name__}: {e}"
    try:
        df.run()
        return r, "ran again"
    except RuntimeError as e:
        return r, "refused" if "KeyboardInterrupt" in str(e) else str(e)
    except BaseException as e:
        return r, f"{type(e).__name__}: {e}"


try:                                  # compile or load everything first
    runaway(300).run()
except IterationLimitError:
    pass
# 1. SIGINT from outside at varied moments of a loop that calls back with arrays
main = threading.main_thread().ident
out["timed"] = []
for delay in (0.2, 0.45, 0.7, 0.95):
    df = runaway(None)
    threading.Timer(delay, signal.pthread_kill, (main, signal.SIGINT)).start()
    out["timed"].append(outcome(df))
# 2. SIGINT just after a call back inside the loop returned (as if it came while
# compiled code ran): held, and raised at the next call back
from ddnumba.native import compile_dataflow
df = runaway(None)
df._native = nat = compile_dataflow(df, "native")
calls = []


def batch_then_signal(*args):
    calls.append(1)
    res = nat._batch_cb(*args)
    if len(calls) == 3:
        os.kill(os.getpid(), signal.SIGINT)   # (handled here, after the call back)
    return res


nat._hooks = (batch_then_signal,) + nat._hooks[1:]
out["in_loop"] = outcome(df)
out["in_loop_calls"] = len(calls)
# 3. SIGINT during a slow user function: raised inside it, at once
df = runaway(None, slow)
armed[0] = True
t0 = time.monotonic()
out["in_user"] = outcome(df)
out["in_user_s"] = time.monotonic() - t0
# 4. SIGINT while compiled code runs after a run's last call back: the run completes,
# then raises, and the dataflow goes on
df = dd.Dataflow(engine="native", loops=loops)
ci, c = df.new_input(["k"])
cap = c.map(lambda k: np.abs(k)).capture()
ci.insert([-1, 2], time=0)
ci.advance_to(1)
df.run()
nat = df._native
real = nat._run_pass


def late(fr):
    status = real(fr)
    os.kill(os.getpid(), signal.SIGINT)   # (handled here, where compiled code returns)
    return status


nat._run_pass = late
ci.insert([-MARK], time=1)
ci.advance_to(2)
try:
    df.run()
    out["completed"] = "finished"
except KeyboardInterrupt as e:
    out["completed"] = str(e)
nat._run_pass = real
try:
    ci.insert([-4], time=2)
    ci.advance_to(3)
    df.run()
    rows, counts = cap.accumulate(2)
    out["after"] = [rows[:, 0].tolist(), counts.tolist()]
except BaseException as e:
    out["after"] = f"{type(e).__name__}: {e}"
out["handler_back"] = signal.getsignal(signal.SIGINT) is signal.default_int_handler
print(json.dumps(out), flush=True)
"""


@pytest.mark.parametrize("loops", ["sequential", "rounds"])
def test_ctrl_c_in_a_loop_that_calls_python_is_an_interrupt(tmp_path, loops):
    # Compiled code calling back into Python with arrays (a Python map in a loop):
    # Python handles a pending SIGINT at its next bytecode, often inside Numba's glue
    # for the call (boxing an array unpickles its type). The default handler raised
    # KeyboardInterrupt there, and the call went ahead without its arguments
    # ("TypeError: _cb_batch expected 4 arguments, got 3"; a double free in
    # round-wise loops). The engine holds the interrupt while compiled code runs and
    # raises it where a hook starts (ddnumba.native._HeldCtrlC).
    # - timed: SIGINT at four moments of a runaway loop: each run() raises
    #   KeyboardInterrupt, and the dataflow then refuses to run
    # - in_loop: SIGINT handled just after a call back returned: held, and raised at
    #   the next call back (the fourth)
    # - in_user: SIGINT during a slow user function: raised there at once
    # - completed: SIGINT handled after a run's last call back: the run completes,
    #   then raises; the dataflow goes on, with every update taken once
    import json
    import subprocess
    import sys
    script = tmp_path / "callbacks.py"
    script.write_text(_CTRL_C_IN_CALLBACKS)
    proc = subprocess.run([sys.executable, str(script), loops], capture_output=True,
                          text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["timed"] == [["interrupted", "refused"]] * 4, out
    assert out["in_loop"] == ["interrupted", "refused"], out
    assert out["in_loop_calls"] == 4, out
    assert out["in_user"] == ["interrupted", "refused"], out
    assert out["in_user_s"] < 20 and "slept" not in out, out
    assert out["completed"] == "Ctrl-C during run(); the run completed first", out
    assert out["after"] == [[1, 2, 4, 1234567], [1, 1, 1, 1]], out
    assert out["handler_back"] is True


def test_the_held_ctrl_c_handler_takes_over_python_handlers_only():
    # Inside a run the SIGINT handler is the engine's (it only records), and the one
    # it took over is back afterwards: Python's default, or a program's own (a
    # SparkContext installs one); SIG_IGN is left alone; a run in another thread
    # (where Python handles no signals) installs none. (The handler this process has
    # is set first: a Spark test run before in this process leaves Spark's.)
    import signal
    seen = []
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        _check_held_handlers(seen)
    finally:
        signal.signal(signal.SIGINT, before)


def _check_held_handlers(seen):
    import signal
    import threading

    def look(k):
        if isinstance(k, np.ndarray) and (np.abs(k) == 1234567).any():
            seen.append(signal.getsignal(signal.SIGINT))    # (a run's call, no probe)
        return np.abs(k)

    def run_one():
        df = dd.Dataflow(engine="native")
        ci, c = df.new_input(["k"])
        c.map(look).capture()
        ci.insert([-1, 2, 1234567], time=0)
        ci.close()
        seen.clear()
        df.run()
        return list(seen)

    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    inside = run_one()
    assert inside and all(getattr(h, "__self__", None).__class__.__name__ == "_HeldCtrlC"
                          for h in inside), inside
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        assert set(run_one()) == {signal.SIG_IGN}
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, old)

    def mine(signum, frame):
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGINT, mine)
    try:
        inside = run_one()
        assert inside and all(getattr(h, "__self__", None).__class__.__name__ ==
                              "_HeldCtrlC" for h in inside), inside
        assert signal.getsignal(signal.SIGINT) is mine
    finally:
        signal.signal(signal.SIGINT, old)
    res = []
    th = threading.Thread(target=lambda: res.append(run_one()))
    th.start()
    th.join()
    assert res and set(res[0]) == {signal.default_int_handler}


def _reach_interrupted_once(loops):
    """A reachability dataflow given two times of input, whose first run() raises
    KeyboardInterrupt (the caller arranges it): ``(df, roots, edges, capture)``."""
    df = _native_df(loops=loops)
    ri, roots = df.new_input(["node"])
    ei, edges = df.new_input(["src", "dst"])
    cap = reach(roots, edges).capture()
    ri.insert([0], time=0)
    ei.insert([0, 1, 2], [1, 2, 3], time=0)
    ei.remove([1], [2], time=1)
    ri.advance_to(2)
    ei.advance_to(2)
    with pytest.raises(KeyboardInterrupt):
        df.run()
    return df, ri, ei, cap


def _check_reach_goes_on(df, cap, ri, ei):
    """After the run that followed the interrupt: every update taken exactly once, and
    a later run right too."""
    assert _as_set(cap, 0) == {(0,), (1,), (2,), (3,)}
    assert _as_set(cap, 1) == {(0,), (1,)}
    ei.insert([1], [2], time=2)
    ri.advance_to(3)
    ei.advance_to(3)
    df.run()
    assert _as_set(cap, 2) == {(0,), (1,), (2,), (3,)}


@pytest.mark.parametrize("loops", ["sequential", "rounds"])
def test_an_interrupt_while_the_engine_is_built_loses_nothing(monkeypatch, loops):
    # Ctrl-C during the first run()'s build of the native engine (where a cold cache
    # compiles kernels for the program: runtime.add_seq_loop, new_state) stops it
    # before any input is drained: the next run() builds the engine again and takes
    # every update exactly once. (Inside the run proper an interrupt fails the
    # dataflow: test_runaway_loop_stops_on_ctrl_c.)
    from ddnumba.kernels import runtime as rt
    real = rt.new_state
    calls = []

    def interrupted(*args):
        calls.append(1)
        if len(calls) == 1:
            raise KeyboardInterrupt
        return real(*args)

    monkeypatch.setattr(rt, "new_state", interrupted)
    df, ri, ei, cap = _reach_interrupted_once(loops)
    assert df._native is None and len(calls) == 1
    df.run()
    assert isinstance(df._native, NativeEngine) and len(calls) == 2
    assert df._native.sequential == [loops == "sequential"]
    _check_reach_goes_on(df, cap, ri, ei)


@pytest.mark.parametrize("loops", ["sequential", "rounds"])
def test_an_interrupt_while_the_runtime_compiles_loses_nothing(monkeypatch, loops):
    # Ctrl-C while the first run() compiles (or loads) the runtime, minutes on a cold
    # cache where a user may think it hung, comes before the run takes any input: the
    # dataflow has not failed, and the next run() takes every update exactly once.
    # The compile also covers the calls that feed inputs and read captures, with the
    # types the runs then use (one signature each).
    import ddnumba.native as nat
    from ddnumba.kernels import runtime as rt
    real = nat.compile_runtime
    calls = []

    def interrupted(sig):
        calls.append(1)
        if len(calls) == 1:
            raise KeyboardInterrupt
        return real(sig)

    monkeypatch.setattr(nat, "compile_runtime", interrupted)
    monkeypatch.setattr(nat, "_cold", lambda dispatcher: True)   # (as in a new process)
    df, ri, ei, cap = _reach_interrupted_once(loops)
    assert df._failed is None and len(calls) == 1
    df.run()
    assert len(calls) == 2
    _check_reach_goes_on(df, cap, ri, ei)
    assert len(rt.push_batch.signatures) == 1 and len(rt.take_batches.signatures) == 1
    # ... and runs call their entry points, not the dispatchers (which resolve the
    # argument types on every call)
    eng = df._native
    assert eng._push_fn is not rt.push_batch and eng._take_fn is not rt.take_batches
    assert eng._run_fn is not rt.run


@pytest.mark.parametrize("engine", ["python", "native", "auto"])
def test_a_loop_whose_build_raised_leaves_nothing_behind(engine):
    # A loop body with a mistake (and one whose nested loop has it) raises while
    # being built; the program built afterwards runs on the engine it would have used
    # (auto: native, not a silent fall back to Python) and gives the right answer.
    df = dd.Dataflow(engine=engine)
    ri, roots = df.new_input(["node"])
    ei, edges = df.new_input(["src", "dst"])
    with pytest.raises(AttributeError, match="distnct"):
        roots.iterate(lambda r: r.join(edges).map(lambda s, d: d, names=["node"])
                      .concat(roots).distnct())
    with pytest.raises(ValueError, match="boom"):
        roots.iterate(lambda r: r.iterate(lambda q: q.concat(r).distinct())
                      .map(lambda v: (_ for _ in ()).throw(ValueError("boom"))))
    with pytest.raises(ValueError, match="never set"):
        df.iterative(lambda lp: (lp.variable(roots), lp.variable(roots))[0]
                     .collection.concat(lp.enter(edges).map(lambda s, d: d,
                                                            names=["node"])))
    cap = reach(roots, edges).capture()
    cnt = edges.count().capture()
    ri.insert([0], time=0)
    ei.insert([0, 1, 5], [1, 2, 6], time=0)
    ri.advance_to(1)
    ei.advance_to(1)
    df.run()
    assert bool(df._native) == (engine != "python")
    assert _as_set(cap, 0) == {(0,), (1,), (2,)}
    assert sorted(cnt.at(0).to_pylist(), key=lambda r: r["src"]) == [
        {"src": s, "count": 1, "count_": 1} for s in (0, 1, 5)]


def test_converging_loop_within_limit():
    df = _native_df()
    ri, roots = df.new_input(["node"])
    ei, edges = df.new_input(["src", "dst"])
    cap = reach(roots, edges).capture()
    ri.insert([0], time=0)
    ei.insert(list(range(10)), list(range(1, 11)), time=0)
    ri.close()
    ei.close()
    df.run()
    assert isinstance(df._native, NativeEngine)
    assert _as_set(cap, 0) == {(v,) for v in range(11)}
    assert df._native.rounds() >= 11


class Boom(Exception):
    pass


def _boom_if(col, value):
    if (np.asarray(col) == value).any():
        raise Boom(f"boom at {value}")


@numba.njit
def raising_logic(vals, counts):
    for i in range(counts.shape[0]):
        if counts[i] > 100:
            raise ValueError("logic boom: count over 100")
    return vals[:1].copy(), counts[:1].copy()


def _raise_in(where):
    def map_f(k, v):
        _boom_if(v, 3)
        return k, v + 0          # a new column: not a projection, so f is called

    def pred(k, v):
        _boom_if(v, 3)
        return k >= 0

    def threshold_f(c):
        _boom_if(c, 5)
        return c

    return {
        "map": lambda c: c.map(map_f),
        "filter": lambda c: c.filter(pred),
        "flat_map": lambda c: c.flat_map(lambda k, v: (_boom_if(v, 3),
                                                        np.arange(len(k)), k, v)[1:]),
        "inspect": lambda c: c.inspect(lambda t: _boom_if(t.column("v").to_numpy(), 3)),
        "delay": lambda c: c.delay(lambda t: (_boom_if(t, 4), t)[1]),
        "threshold": lambda c: c.threshold(threshold_f),
        "map_in_loop": lambda c: c.iterate(lambda x: x.map(map_f).concat(c).distinct(),
                                           max_iterations=GUARD),
        "map_after_join": lambda c: c.join(c).map(
            lambda k, v, w: (_boom_if(w, 3), k, v + w)[1:], names=["k", "v"]),
        "reduce_logic": lambda c: c.reduce(raising_logic, names=["k", "v"]),
    }[where]


@pytest.mark.parametrize("where", ["map", "filter", "flat_map", "inspect", "delay",
                                   "threshold", "map_in_loop", "map_after_join",
                                   "reduce_logic"])
def test_user_function_error_propagates(where):
    """An exception raised by a user function called back from the compiled code comes
    out of ``df.run()`` as itself, and not before the offending data arrives."""
    df = _native_df()
    inp, c = df.new_input(["k", "v"])
    _raise_in(where)(c).capture()
    inp.insert([1, 2], [1, 2], time=0)
    inp.advance_to(1)
    df.run()                 # nothing raises on harmless data
    assert isinstance(df._native, NativeEngine)
    if where == "threshold":
        inp.update([1], [1], time=1, diff=4)        # count 5
    elif where == "reduce_logic":
        inp.update([1], [1], time=1, diff=200)
    elif where == "delay":
        inp.insert([1], [9], time=4)
    else:
        inp.insert([1], [3], time=1)
    inp.advance_to(5)
    expected = ValueError if where == "reduce_logic" else Boom
    with pytest.raises(expected, match="boom"):
        df.run()


@pytest.mark.parametrize("engine", ["native", "auto"])
def test_graph_fixed_after_first_native_run(engine):
    df = dd.Dataflow(engine=engine)
    inp, c = df.new_input(["k", "v"])
    cap = c.count().capture()
    inp.insert([1], [2], time=0)
    inp.advance_to(1)
    df.run()
    assert isinstance(df._native, NativeEngine)
    for add in (lambda: c.map(lambda k, v: (v, k)), lambda: c.capture(),
                lambda: c.distinct(), lambda: df.new_input(["x"])):
        with pytest.raises(RuntimeError, match="after the first run"):
            add()
    inp.insert([1], [3], time=1)
    inp.advance_to(2)
    df.run()          # the dataflow still runs
    assert cap.at(1).to_pylist() == [{"k": 1, "count": 2, "count_": 1}]


def test_prepare_readies_the_runtime_before_any_input_and_fixes_the_graph():
    """``Dataflow.prepare()`` settles the engine and has the runtime compiled (or
    loaded) before any input, as a program that times its runs would call it; the
    graph is then fixed as after a first run, and the runs give what they give
    without it."""
    from ddnumba import native as N
    from ddnumba.kernels import runtime as _rt
    df = dd.Dataflow(engine="auto")
    inp, c = df.new_input(["k", "v"])
    cap = c.count().capture()
    assert df._native is None
    df.prepare()
    assert isinstance(df._native, NativeEngine) and df._native._prepared
    assert not N._cold(_rt.run) and df._native._run_fn is not _rt.run
    with pytest.raises(RuntimeError, match=r"after the first run\(\) \(or prepare\(\)\)"):
        c.distinct()
    df.prepare()        # again: nothing left to do
    inp.insert([1, 1], [2, 3], time=0)
    inp.advance_to(1)
    df.run()
    assert cap.at(0).to_pylist() == [{"k": 1, "count": 2, "count_": 1}]


def test_prepare_leaves_a_python_or_workers_graph_open():
    """On the Python engine ``prepare()`` only settles the engine (operators may be
    added until the first run, as without it); with workers it does nothing (their
    processes start at the first run)."""
    df = dd.Dataflow(engine="python")
    inp, c = df.new_input(["k"])
    df.prepare()
    assert df._native is False
    cap = c.count().capture()
    inp.insert([4], time=0)
    inp.advance_to(1)
    df.run()
    assert cap.at(0).to_pylist() == [{"k": 4, "count": 1, "count_": 1}]
    dw = dd.Dataflow(workers=2)
    dw.new_input(["k"])
    dw.prepare()
    assert dw._native is None and dw.cluster is None


def test_python_engine_refuses_operators_after_a_run_too():
    """The restriction holds on the Python engine as well (it used to accept a late
    operator, which then saw only later updates; see also
    test_shared_arrangements.test_operators_cannot_be_added_after_a_run)."""
    df = dd.Dataflow(engine="python")
    inp, c = df.new_input(["k", "v"])
    c.count().capture()
    inp.insert([1], [2], time=0)
    inp.advance_to(1)
    df.run()
    with pytest.raises(RuntimeError, match="after the first run"):
        c.distinct().capture()
    assert df._native is False


def test_native_rejects_time_dims_2():
    with pytest.raises(ValueError, match="time_dims=2"):
        df = dd.Dataflow(engine="native", time_dims=2)
        inp, c = df.new_input(["k"])
        c.count().capture()
        inp.insert([1], time=(0, 0))
        df.run()


def test_native_rejects_nested_loops():
    with pytest.raises(ValueError, match="nested loop"):
        df = dd.Dataflow(engine="native")
        inp, c = df.new_input(["k"])
        c.iterate(lambda x: x.iterate(lambda y: y.distinct()).distinct()).capture()
        inp.insert([1], time=0)
        df.run()


def test_native_rejects_workers():
    """``engine="native"`` requires the native engine (native.py): with workers=2 it
    must raise ValueError naming the reason, at construction or at the first run."""
    with pytest.raises(ValueError, match="workers"):
        df = dd.Dataflow(engine="native", workers=2)
        try:
            inp, c = df.new_input(["k"])
            c.count().capture()
            inp.insert([1], time=0)
            inp.close()
            df.run()
        finally:
            df.close()


@pytest.mark.parametrize("engine", ["bogus", "Native", ""])
def test_unknown_engine(engine, monkeypatch):
    monkeypatch.delenv("DDNUMBA_ENGINE", raising=False)
    if engine == "":
        # An empty engine falls back to the environment: make that one bogus.
        monkeypatch.setenv("DDNUMBA_ENGINE", "bogus")
    with pytest.raises(ValueError, match="engine must be one of"):
        dd.Dataflow(engine=engine or None)


# --------------------------------------------------------------------- overflow


def _overflow_case(name):
    """(program, feed) pairs whose exact result does not fit in int64."""
    big = 2 ** 62
    cases = {
        # The same row twice into a count (one run).
        "count": (lambda c: c.count(),
                  [lambda i: i.update([1, 1], [2, 3], time=0, diff=[big, big])]),
        # The incremental count across two runs.
        "count_two_runs": (lambda c: c.count(),
                           [lambda i: i.update([1], [2], time=0, diff=big),
                            lambda i: i.update([1], [3], time=1, diff=big)]),
        "count_in_loop": (lambda c: c.iterate(lambda x: c.count().map(
                              lambda k, n: (k, n * 0)).concat(c).distinct(),
                              max_iterations=GUARD),
                          [lambda i: i.update([1, 1], [2, 3], time=0, diff=[big, big])]),
        "sum": (lambda c: c.sum("v"),
                [lambda i: i.update([1], [2 ** 40], time=0, diff=2 ** 30)]),
        "sum_two_runs": (lambda c: c.sum("v"),
                         [lambda i: i.update([1], [2 ** 40], time=0, diff=2 ** 22),
                          lambda i: i.update([1], [2 ** 40], time=1, diff=2 ** 22)]),
        "join_product": (lambda c: c.join(c),
                         [lambda i: i.update([1], [2], time=0, diff=2 ** 32)]),
        "join_product_later": (lambda c: c.join(c),
                               [lambda i: i.update([1], [2], time=0, diff=2 ** 31),
                                lambda i: i.update([1], [3], time=1, diff=2 ** 33)]),
        "join_in_loop": (lambda c: c.iterate(lambda x: x.join(c).map(
                             lambda k, v, w: (k, w)).concat(c).distinct(),
                             max_iterations=GUARD),
                         [lambda i: i.update([1], [2], time=0, diff=2 ** 40)]),
        # A loop's distinct whose history sums past int64 across two runs (its rows
        # at times up to the due time are summed before the walk).
        "distinct_in_loop_two_runs": (
            lambda c: c.iterate(lambda x: x.distinct(), max_iterations=GUARD),
            [lambda i: i.update([1], [2], time=0, diff=big),
             lambda i: i.update([1], [2], time=1, diff=big)]),
        "distinct": (lambda c: c.distinct(),
                     [lambda i: i.update([1, 1], [2, 2], time=0, diff=[big, big])]),
        "consolidate": (lambda c: c.consolidate(),
                        [lambda i: i.update([1, 1], [2, 2], time=0, diff=[big, big])]),
        "negate": (lambda c: c.negate(),
                   [lambda i: i.update([1], [2], time=0, diff=np.array([-(2 ** 63)]))]),
    }
    return cases[name]


OVERFLOW_CASES = ["count", "count_two_runs", "count_in_loop", "sum", "sum_two_runs",
                  "join_product", "join_product_later", "join_in_loop", "distinct",
                  "distinct_in_loop_two_runs",
                  "consolidate", "negate"]


@pytest.mark.parametrize("name", OVERFLOW_CASES)
def test_diff_overflow_raises(name):
    """Overflow is an error, never a wrap: the run (or reading the capture) raises."""
    program, feeds = _overflow_case(name)
    df = _native_df()
    inp, c = df.new_input(["k", "v"])
    cap = program(c).capture()
    with pytest.raises(OverflowError):
        for t, f in enumerate(feeds):
            f(inp)
            inp.advance_to(t + 1)
            df.run()
            assert isinstance(df._native, NativeEngine)
            cap.updates()


@pytest.mark.parametrize("name", ["count_two_runs", "sum_two_runs", "join_product_later"])
def test_no_overflow_at_the_edge(name):
    """The two-run cases one step below the limit do not raise (the checks above are
    about overflow, not about large diffs)."""
    program, feeds = _overflow_case(name)
    df = _native_df()
    inp, c = df.new_input(["k", "v"])
    cap = program(c).capture()
    shrink = {"count_two_runs": [lambda i: i.update([1], [2], time=0, diff=2 ** 62),
                                 lambda i: i.update([1], [3], time=1, diff=2 ** 62 - 1)],
              "sum_two_runs": [lambda i: i.update([1], [2 ** 40], time=0, diff=2 ** 21),
                               lambda i: i.update([1], [2 ** 40], time=1, diff=2 ** 21)],
              "join_product_later": [lambda i: i.update([1], [2], time=0, diff=2 ** 31),
                                     lambda i: i.update([1], [3], time=1, diff=2 ** 30)]}
    for t, f in enumerate(shrink[name]):
        f(inp)
        inp.advance_to(t + 1)
        df.run()
    want = {"count_two_runs": [(1, 2 ** 63 - 1)], "sum_two_runs": [(1, 2 ** 62)],
            "join_product_later": None}[name]
    if want is not None:
        got = [(r["k"], r[cap.names[1]]) for r in cap.at(1).to_pylist()]
        assert got == want
    else:
        rows = {(r["k"], r["v"], r["v_right"]): r["count"] for r in cap.at(1).to_pylist()}
        assert rows == {(1, 2, 2): 2 ** 62, (1, 2, 3): 2 ** 61, (1, 3, 2): 2 ** 61,
                        (1, 3, 3): 2 ** 60}


# --------------------------------------------------------------- engine selection


def _small_program(df):
    ri, roots = df.new_input(["node"])
    ei, edges = df.new_input(["src", "dst"])
    cap = reach(roots, edges).capture()
    cnt = edges.count().capture()
    ri.insert([0], time=0)
    ei.insert([0, 1, 2], [1, 2, 0], time=0)
    ri.advance_to(1)
    ei.advance_to(1)
    return cap, cnt


def test_auto_picks_native_for_one_time_dimension(monkeypatch):
    monkeypatch.delenv("DDNUMBA_ENGINE", raising=False)
    for df in (dd.Dataflow(), dd.Dataflow(engine="auto")):
        assert df._native is None          # undecided until the first run
        cap, cnt = _small_program(df)
        df.run()
        assert isinstance(df._native, NativeEngine)
        assert _as_set(cap, 0) == {(0,), (1,), (2,)}
        assert df._native.rounds() > 0
        stats = {type(n).__name__: s for n, s, _, _ in df._native.node_stats()}
        assert stats["JoinNode"] > 0 and stats["ReduceNode"] > 0


def test_environment_selects_the_engine(monkeypatch):
    monkeypatch.setenv("DDNUMBA_ENGINE", "python")
    df = dd.Dataflow()
    cap, _ = _small_program(df)
    df.run()
    assert df._native is False
    assert _as_set(cap, 0) == {(0,), (1,), (2,)}
    monkeypatch.setenv("DDNUMBA_ENGINE", "native")
    df = dd.Dataflow()
    _small_program(df)
    df.run()
    assert isinstance(df._native, NativeEngine)


@pytest.mark.parametrize("engine", ["auto", "python"])
def test_two_time_dimensions_use_the_python_engine(engine, monkeypatch):
    monkeypatch.delenv("DDNUMBA_ENGINE", raising=False)
    df = dd.Dataflow(time_dims=2, engine=engine)
    ai, a = df.new_input(["k", "v"])
    bi, b = df.new_input(["k", "w"])
    cap = a.join(b).count().capture()
    ai.insert([1, 1], [2, 3], time=[(0, 1), (1, 0)])
    bi.insert([1], [5], time=(0, 0))
    ai.advance_to((2, 2))
    bi.advance_to((2, 2))
    df.run()
    assert df._native is False
    assert cap.at((0, 0)).to_pylist() == []
    assert cap.at((0, 1)).to_pylist() == [{"k": 1, "count": 1, "count_": 1}]
    assert cap.at((1, 1)).to_pylist() == [{"k": 1, "count": 2, "count_": 1}]


def test_auto_falls_back_for_nested_loops(monkeypatch):
    monkeypatch.delenv("DDNUMBA_ENGINE", raising=False)
    df = dd.Dataflow()
    ri, roots = df.new_input(["node"])
    ei, edges = df.new_input(["src", "dst"])
    # reach inside an outer loop that changes nothing (a nested loop)
    out = roots.iterate(lambda r: reach(r, edges.enter(r)).concat(r).distinct(),
                        max_iterations=GUARD)
    cap = out.capture()
    ri.insert([0], time=0)
    ei.insert([0, 1], [1, 2], time=0)
    ri.close()
    ei.close()
    df.run()
    assert df._native is False
    assert _as_set(cap, 0) == {(0,), (1,), (2,)}


# --------------------------------------------------- callbacks of several dataflows


def _mapped(offset):
    df = _native_df()
    inp, c = df.new_input(["k", "v"])
    cap = c.map(lambda k, v: (k, v + offset)).count(key=2).capture()
    return df, inp, cap


def test_interleaved_dataflows_call_their_own_functions():
    """Callbacks reach the engine whose run() is executing, runs interleaved, and a
    dataflow whose run raised leaves the next one working."""
    dfa, ia, capa = _mapped(100)
    dfb, ib, capb = _mapped(200)
    for t in range(4):
        ia.insert([t], [t], time=t)
        ia.advance_to(t + 1)
        dfa.run()
        ib.insert([t], [t], time=t)
        ib.advance_to(t + 1)
        dfb.run()
    assert [r["v"] for r in capa.at(3).to_pylist()] == [100, 101, 102, 103]
    assert [r["v"] for r in capb.at(3).to_pylist()] == [200, 201, 202, 203]
    dfc = _native_df()
    ic, c = dfc.new_input(["k", "v"])
    c.map(lambda k, v: (k, (_boom_if(v, 5), v + 1)[1])).capture()
    ic.insert([1], [5], time=0)
    ic.close()
    with pytest.raises(Boom):
        dfc.run()
    ia.insert([9], [9], time=4)
    ia.advance_to(5)
    dfa.run()
    assert [r["v"] for r in capa.at(4).to_pylist()] == [100, 101, 102, 103, 109]


def test_run_of_another_dataflow_inside_a_callback():
    """An inspect callback of one native dataflow runs another one (re-entrant hooks)."""
    dfb, ib, capb = _mapped(200)
    calls = []

    def inner(tbl):
        t = len(calls)
        calls.append(tbl.num_rows)
        ib.insert([t], [t], time=t)
        ib.advance_to(t + 1)
        dfb.run()

    dfa = _native_df()
    ia, a = dfa.new_input(["k", "v"])
    capa = a.inspect(inner).map(lambda k, v: (k, v + 100)).count(key=2).capture()
    for t in range(3):
        ia.insert([t], [t], time=t)
        ia.advance_to(t + 1)
        dfa.run()
    assert calls == [1, 1, 1]
    assert [r["v"] for r in capa.at(2).to_pylist()] == [100, 101, 102]
    assert [r["v"] for r in capb.at(2).to_pylist()] == [200, 201, 202]


def test_loop_distinct_reports_its_own_overflow():
    """The overflow of a loop's distinct is found where its history is summed (not
    wrapped, and before a trace merge would meet it)."""
    program, feeds = _overflow_case("distinct_in_loop_two_runs")
    df = _native_df()
    inp, c = df.new_input(["k", "v"])
    program(c).capture()
    feeds[0](inp)
    inp.advance_to(1)
    df.run()
    feeds[1](inp)
    inp.advance_to(2)
    with pytest.raises(OverflowError, match="distinct"):
        df.run()


def test_a_held_ctrl_c_goes_to_the_handler_taken_over(monkeypatch):
    # _HeldCtrlC records a Ctrl-C and hands it to the handler it took over: at a
    # check-in (check), at once inside a user function (in_user), or after the run
    # (deliver, which Dataflow.run calls: Python's default raises KeyboardInterrupt, a
    # program's own handler just runs, and run() returns if it does not raise).
    import signal
    from ddnumba.native import NativeEngine, _HeldCtrlC
    calls = []

    def mine(signum, frame):
        calls.append(signum)            # (does not raise: the program goes on)

    before = signal.signal(signal.SIGINT, mine)
    try:
        h = _HeldCtrlC()
        with h:
            assert signal.getsignal(signal.SIGINT) == h._handler
            h._handler(signal.SIGINT, None)
            assert calls == []                              # held
            h.check()
            assert calls == [signal.SIGINT]                 # handed over at a check-in
            h.check()
            assert calls == [signal.SIGINT]                 # once
            h.in_user = True
            h._handler(signal.SIGINT, None)
            assert calls == [signal.SIGINT] * 2             # at once in user code
            h._handler(signal.SIGINT, None)
        assert signal.getsignal(signal.SIGINT) is mine
        assert h.deliver() is mine and h.deliver() is None
        signal.signal(signal.SIGINT, signal.default_int_handler)
        with h:
            h._handler(signal.SIGINT, None)
            with pytest.raises(KeyboardInterrupt):
                h.check()
        # Dataflow.run with a held interrupt for each kind of handler
        df = dd.Dataflow(engine="native")
        ci, c = df.new_input(["k"])
        cap = c.map(lambda k: k + 1).capture()
        ci.insert([1], time=0)
        ci.advance_to(1)
        df.run()
        monkeypatch.setattr(NativeEngine, "run", lambda self: mine)
        df.run()
        assert calls == [signal.SIGINT] * 3
        monkeypatch.setattr(NativeEngine, "run", lambda self: signal.default_int_handler)
        with pytest.raises(KeyboardInterrupt, match="completed first"):
            df.run()
        monkeypatch.setattr(NativeEngine, "run", lambda self: None)
        df.run()                                            # the dataflow goes on
        assert calls == [signal.SIGINT] * 3
        assert cap.at(0).to_pylist() == [{"k": 2, "count": 1}]
    finally:
        signal.signal(signal.SIGINT, before)

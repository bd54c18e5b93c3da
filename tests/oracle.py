"""Brute-force oracle for ddnumba operators, and random update streams to feed it.

The definition every operator must meet (DESIGN.md section 2): for every time ``t``, the
operator's output accumulated at ``t`` (the sum of its output updates with time ``<= t``
in the product order) equals the operator's logic applied *from scratch* to its inputs
accumulated at ``t``. This module checks exactly that, and nothing about how the engine
gets there:

* random streams live on a small *time grid*: ``0..T1`` for one time dimension,
  ``0..G2`` squared for two (``0..G3`` cubed for three). The grid is closed under join, so
  every time at which an output may change lies on it; checking every grid point, plus
  that every output time lies on the grid, decides correctness at *all* times;
* references are plain Python over ``dict {row: count}`` collections (``ref_*`` below),
  written from the API contract, never calling the engine;
* :func:`check` builds the program in a fresh ``Dataflow``, feeds the streams in several
  *modes* (all updates at once then one ``run``; one first-coordinate step at a time with
  a ``run`` per step), and after every ``run`` compares each completed grid point. It
  also checks the captured stream's canonical form (consolidated, sorted by row then
  time).

Streams come from hypothesis strategies (so failures shrink to small cases) over tiny
value domains (``0..4``), with negative diffs, retractions, and rows that vanish and
return; ``nonneg=True`` streams keep every accumulation ``>= 0`` (for ``union`` & co.).
"""
from __future__ import annotations

import itertools
import os
from contextlib import contextmanager

import numpy as np
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from ddnumba.testing import collection_from_table, updates_from_table

#: examples per hypothesis test; raise it locally for a deeper search.
EXAMPLES = int(os.environ.get("DDNUMBA_ORACLE_EXAMPLES", "25"))

#: the time grid's largest coordinate, per number of time dimensions.
GRID_MAX = {1: 5, 2: 3, 3: 2}

SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

#: how :func:`check` feeds each stream ("all": one run; "step": a run per first time
#: coordinate); ``DDNUMBA_ORACLE_MODES`` (comma-separated) narrows them, as the
#: multi-worker reruns of the oracle modules do (tests/test_workers.py).
MODES = tuple(os.environ.get("DDNUMBA_ORACLE_MODES", "all,step").split(","))
if not MODES or set(MODES) - {"all", "step"}:
    raise ValueError(f"DDNUMBA_ORACLE_MODES: expected 'all', 'step' or 'all,step', "
                     f"got {os.environ.get('DDNUMBA_ORACLE_MODES')!r}")


# ------------------------------------------------------------------------------ times


def points(time_dims):
    """Every time of the grid for ``time_dims`` dimensions, in lexicographic order."""
    side = GRID_MAX[time_dims]
    return list(itertools.product(range(side + 1), repeat=time_dims))


def leq(s, t):
    """Product partial order."""
    return all(a <= b for a, b in zip(s, t))


def time_join(s, t):
    return tuple(max(a, b) for a, b in zip(s, t))


def join_closure(times):
    """The smallest set holding ``times`` and the join of any two of its members."""
    closed = set(times)
    frontier = set(closed)
    while frontier:
        new = {time_join(s, t) for s in frontier for t in closed} - closed
        closed |= new
        frontier = new
    return closed


def as_time(t, time_dims):
    """An int (one dimension) or a sequence as a tuple of ints."""
    if isinstance(t, (tuple, list, np.ndarray)):
        t = tuple(int(x) for x in t)
    else:
        t = (int(t),)
    assert len(t) == time_dims, (t, time_dims)
    return t


def time_arg(t):
    """How the API takes a single time: a scalar for one dimension, else a tuple."""
    return t[0] if len(t) == 1 else tuple(t)


# ------------------------------------------------------------------------ collections


def clean(acc):
    """A collection with Python-int rows and counts and no zero counts."""
    out = {}
    for row, c in acc.items():
        r = tuple(int(x) for x in row)
        out[r] = out.get(r, 0) + int(c)
    return {r: c for r, c in out.items() if c != 0}


def accumulate_at(updates, t):
    acc = {}
    for row, s, d in updates:
        if leq(s, t):
            acc[row] = acc.get(row, 0) + d
    return {r: c for r, c in acc.items() if c != 0}


def states_to_updates(states, time_dims):
    """Updates whose accumulation at every grid point ``p`` is ``states[p]``.

    Möbius inversion on the grid: the diff at ``p`` is the inclusion-exclusion sum of the
    states at ``p - e_S`` over subsets ``S`` of coordinates (``e_S`` the 0/1 vector of
    ``S``), skipping points that fall off the grid (their state is empty).
    """
    ups = []
    for p in points(time_dims):
        diff = {}
        for mask in itertools.product((0, 1), repeat=time_dims):
            q = tuple(a - m for a, m in zip(p, mask))
            if min(q) < 0:
                continue
            sign = -1 if sum(mask) % 2 else 1
            for row, c in states.get(q, {}).items():
                diff[row] = diff.get(row, 0) + sign * c
        ups.extend((row, p, d) for row, d in sorted(diff.items()) if d != 0)
    return ups


def clamp_nonneg(updates, time_dims):
    """The stream whose accumulation at each grid point is ``max(original, 0)``."""
    states = {}
    for p in points(time_dims):
        states[p] = {r: c for r, c in accumulate_at(updates, p).items() if c > 0}
    return states_to_updates(states, time_dims)


# -------------------------------------------------------------------------- streams


@st.composite
def stream(draw, arity, time_dims, *, domain=5, max_size=12, nonneg=False):
    """A random update stream ``[(row, time, diff), ...]`` on the time grid.

    Two shapes, both shrinking towards few updates: a list of raw updates with small
    signed diffs (clamped to non-negative accumulations when ``nonneg``), or per-row
    count histories over the grid (so rows appear, vanish and return) turned into diffs
    by Möbius inversion. Values are drawn from ``0..dom-1`` where ``dom`` is ``domain``,
    3 or 1 (all rows equal).
    """
    pts = points(time_dims)
    dom = draw(st.sampled_from([domain, 3, 1]))
    row = st.tuples(*[st.integers(0, dom - 1) for _ in range(arity)])
    if draw(st.booleans()):
        diffs = st.sampled_from([1, 1, 2, -1, 3, -2])
        ups = draw(st.lists(st.tuples(row, st.sampled_from(pts), diffs), max_size=max_size))
        return clamp_nonneg(ups, time_dims) if nonneg else ups
    counts = st.integers(0 if nonneg else -1, 2)
    hist = draw(st.dictionaries(row, st.lists(counts, min_size=len(pts), max_size=len(pts)),
                                max_size=4))
    states = {p: {} for p in pts}
    for r, cs in hist.items():
        for p, c in zip(pts, cs):
            if c:
                states[p][r] = c
    return states_to_updates(states, time_dims)


def random_stream(rng, arity, time_dims, *, n=12, domain=5, nonneg=False):
    """A seeded (NumPy) counterpart of :func:`stream` for loops outside hypothesis."""
    pts = points(time_dims)
    rows = rng.integers(0, domain, size=(n, arity))
    ts = rng.integers(0, len(pts), size=n)
    ds = rng.choice(np.array([1, 1, 2, -1, 3, -2]), size=n)
    ups = [(tuple(int(x) for x in rows[i]), pts[ts[i]], int(ds[i])) for i in range(n)]
    return clamp_nonneg(ups, time_dims) if nonneg else ups


# --------------------------------------------------------------------- driving a program


def _frontier_past(i, time_dims):
    """The input frontier closing every time whose first coordinate is ``<= i``."""
    return time_arg((i + 1,) + (0,) * (time_dims - 1))


def feed(inp, updates, arity, time_dims):
    """Insert updates, each at its own time, through ``InputHandle.update``."""
    if not updates:
        return
    n = len(updates)
    data = np.array([r for r, _, _ in updates], dtype=np.int64).reshape(n, arity)
    times = np.array([t for _, t, _ in updates], dtype=np.int64).reshape(n, time_dims)
    diffs = np.array([d for _, _, d in updates], dtype=np.int64)
    time = times[:, 0].copy() if time_dims == 1 else times
    inp.update(*[data[:, c].copy() for c in range(arity)], time=time, diff=diffs)


def captured_updates(cap):
    """The captured stream as a list, after checking the table's canonical form."""
    ups = updates_from_table(cap.updates())
    keys = [(r, t) for r, t, _ in ups]
    assert all(d != 0 for _, _, d in ups), f"captured updates hold a zero diff: {ups}"
    assert all(a < b for a, b in zip(keys, keys[1:])), (
        f"captured updates are not consolidated and sorted by (row, time): {ups}")
    return ups


def captured_at(cap, t, width):
    """A capture's collection at time ``t``: ``{row: count}`` of its ``width``
    columns (``Capture.at``)."""
    tab = cap.at(t)
    cols = [tab.column(i).to_pylist() for i in range(width)]
    counts = tab.column(width).to_pylist()
    return {tuple(r): c for r, c in zip(zip(*cols), counts)}


def check_at_times(cap, width, times, streams, reference, label):
    """``cap`` at each of ``times`` (1-D) against ``reference`` applied to the
    accumulations of ``streams`` (lists of ``(row, time, diff)``) at that time."""
    for s in times:
        accs = [accumulate_at([(r, (x,), d) for r, x, d in rows], (s,)) for rows in streams]
        assert captured_at(cap, s, width) == reference(*accs), f"{label} at t={s}"


def fixed_point(step, x, rounds):
    """``x`` stepped by ``step`` until it stops changing, within ``rounds`` steps (a
    loop's brute-force answer)."""
    for _ in range(rounds):
        nxt = step(x)
        if nxt == x:
            return x
        x = nxt
    raise AssertionError("the reference did not converge")


def _fmt(acc):
    return "{" + ", ".join(f"{r}: {c}" for r, c in sorted(acc.items())) + "}"


def _compare(label, actual, expected):
    if actual != expected:
        keys = sorted(set(actual) | set(expected))
        bad = [f"    row {k}: actual {actual.get(k, 0)}, expected {expected.get(k, 0)}"
               for k in keys if actual.get(k, 0) != expected.get(k, 0)]
        raise AssertionError(f"{label}\n" + "\n".join(bad[:12]))


def check(build, reference, inputs, time_dims, *, modes=MODES, check_at=True,
          workers=None):
    """Run ``build`` on ``inputs`` in each mode and compare with ``reference``.

    Parameters
    ----------
    build : callable
        ``build(*collections)`` returns the output Collection, or a tuple of them.
    reference : callable
        ``reference(*accumulated_inputs)`` (each a ``dict {row: count}``) returns the
        expected output collection, or a tuple of them matching ``build``.
    inputs : list of (names, updates)
        Column names and update stream of each input, in ``build``'s argument order.
    time_dims : int
    modes : iterable of {"all", "step", "close"}
        "all": every update inserted at its own time, inputs advanced past the grid,
        one ``run``. "close": the same but inputs closed. "step": for each first
        coordinate ``i``, insert the updates with ``time[0] == i``, advance every input
        to ``(i + 1, 0, ...)``, ``run``, and check the now complete grid points.
    check_at : bool
        Also compare ``Captured.at(t)`` at every grid point at the end of a run.
    workers : int, optional
        Worker processes (default: ``DDNUMBA_WORKERS``, else 1).
    """
    pts = points(time_dims)
    expected = {}
    for p in pts:
        accs = [accumulate_at(ups, p) for _, ups in inputs]
        exp = reference(*accs)
        expected[p] = [clean(e) for e in (exp if isinstance(exp, tuple) else (exp,))]
    for mode in modes:
        _run_mode(build, inputs, time_dims, mode, pts, expected, check_at, workers)


def _run_mode(build, inputs, time_dims, mode, pts, expected, check_at, workers=None):
    # Imported here so the oracle's own tests run without the runtime.
    import ddnumba as dd

    with dd.Dataflow(time_dims=time_dims, workers=workers) as df:
        _drive(df, build, inputs, time_dims, mode, pts, expected, check_at)


def _drive(df, build, inputs, time_dims, mode, pts, expected, check_at):
    handles, colls = [], []
    for names, _ in inputs:
        h, c = df.new_input(list(names))
        handles.append(h)
        colls.append(c)
    outs = build(*colls)
    outs = tuple(outs) if isinstance(outs, (tuple, list)) else (outs,)
    assert len(outs) == len(expected[pts[0]]), "build and reference disagree on outputs"
    caps = [o.capture() for o in outs]
    grid = set(pts)
    side = GRID_MAX[time_dims]

    def verify(done_upto, final):
        for k, (out, cap) in enumerate(zip(outs, caps)):
            ups = captured_updates(cap)
            where = f"[mode={mode}, time_dims={time_dims}, output {k} {list(out.names)}]"
            for r, t, _ in ups:
                assert len(r) == out.arity, f"{where} row {r} does not have arity {out.arity}"
                assert len(t) == time_dims, f"{where} time {t} is not {time_dims}-D"
            if final:
                stray = sorted({t for _, t, _ in ups} - grid)
                assert not stray, f"{where} output at times off the join closure: {stray}"
            for p in pts:
                if p[0] > done_upto:
                    continue
                _compare(f"{where} at time {p}: output accumulated from updates() != "
                         f"reference\n  captured updates: {ups}",
                         accumulate_at(ups, p), expected[p][k])
            if final and check_at:
                for p in pts:
                    _compare(f"{where} Captured.at({time_arg(p)}) != reference",
                             collection_from_table(cap.at(time_arg(p))), expected[p][k])

    arities = [len(names) for names, _ in inputs]
    if mode in ("all", "close"):
        # Insert in a scrambled order: an engine may not rely on arrival order.
        order = np.random.default_rng(len(pts)).permutation
        for h, a, (_, ups) in zip(handles, arities, inputs):
            feed(h, [ups[i] for i in order(len(ups))], a, time_dims)
        for h in handles:
            if mode == "close":
                h.close()
            else:
                h.advance_to(_frontier_past(side, time_dims))
        df.run()
        verify(side, final=True)
    elif mode == "step":
        for i in range(side + 1):
            for h, a, (_, ups) in zip(handles, arities, inputs):
                feed(h, [u for u in ups if u[1][0] == i], a, time_dims)
            for h in handles:
                h.advance_to(_frontier_past(i, time_dims))
            df.run()
            verify(i, final=(i == side))
    else:
        raise ValueError(f"unknown mode {mode!r}")


# ------------------------------------------------------------------------- references
# Plain Python over {row: count} dicts, written from the API contract. User functions
# (vectorised over NumPy columns) are applied once to the whole accumulated collection.


def _columns(acc, arity):
    rows = list(acc)
    cols = [np.array([r[c] for r in rows], dtype=np.int64) for c in range(arity)]
    return rows, cols


def _as_column_tuple(out, n):
    if not isinstance(out, (tuple, list)):
        out = (out,)
    return [np.broadcast_to(np.asarray(c, dtype=np.int64), (n,)) for c in out]


def ref_map(f, arity):
    def ref(acc):
        rows, cols = _columns(acc, arity)
        outc = _as_column_tuple(f(*cols), len(rows))
        out = {}
        for i, r in enumerate(rows):
            key = tuple(int(c[i]) for c in outc)
            out[key] = out.get(key, 0) + acc[r]
        return out
    return ref


def ref_filter(pred, arity):
    def ref(acc):
        rows, cols = _columns(acc, arity)
        mask = np.broadcast_to(np.asarray(pred(*cols), dtype=bool), (len(rows),))
        return {r: acc[r] for i, r in enumerate(rows) if mask[i]}
    return ref


def ref_flat_map(f, arity):
    def ref(acc):
        rows, cols = _columns(acc, arity)
        idx, *outc = f(*cols)
        idx = np.asarray(idx)
        outc = [np.broadcast_to(np.asarray(c, dtype=np.int64), idx.shape) for c in outc]
        out = {}
        for j in range(len(idx)):
            key = tuple(int(c[j]) for c in outc)
            out[key] = out.get(key, 0) + acc[rows[int(idx[j])]]
        return out
    return ref


def ref_concat(*accs):
    out = {}
    for acc in accs:
        for r, c in acc.items():
            out[r] = out.get(r, 0) + c
    return out


def ref_negate(acc):
    return {r: -c for r, c in acc.items()}


def ref_join(a, b, key=1):
    out = {}
    for ra, ca in a.items():
        for rb, cb in b.items():
            if ra[:key] == rb[:key]:
                row = ra + rb[key:]
                out[row] = out.get(row, 0) + ca * cb
    return out


def ref_semijoin(a, b, key=1):
    return {r: c * b.get(r[:key], 0) for r, c in a.items()}


def ref_antijoin(a, b, key=1):
    return {r: c - c * b.get(r[:key], 0) for r, c in a.items()}


def groups(acc, key=1):
    """``{key_tuple: {value_tuple: count}}`` over rows with a non-zero count."""
    out = {}
    for r, c in acc.items():
        if c != 0:
            out.setdefault(r[:key], {})[r[key:]] = c
    return out


def ref_count(acc, key=1):
    return {k + (sum(g.values()),): 1 for k, g in groups(acc, key).items()}


def ref_sum(acc, col, key=1):
    """``col`` indexes the value columns (0 = first column after the key)."""
    return {k + (sum(v[col] * c for v, c in g.items()),): 1
            for k, g in groups(acc, key).items()}


def _extreme(acc, col, key, pick):
    out = {}
    for k, g in groups(acc, key).items():
        vals = [v[col] for v, c in g.items() if c > 0]
        if vals:
            out[k + (pick(vals),)] = 1
    return out


def ref_min(acc, col, key=1):
    return _extreme(acc, col, key, min)


def ref_max(acc, col, key=1):
    return _extreme(acc, col, key, max)


def ref_distinct(acc):
    return {r: 1 for r, c in acc.items() if c > 0}


def ref_threshold(f):
    def ref(acc):
        out = {}
        for r, c in acc.items():
            fc = int(np.asarray(f(np.array([c], dtype=np.int64))).reshape(-1)[0])
            if fc != 0:
                out[r] = fc
        return out
    return ref


def ref_top_k(acc, k, key=1):
    out = {}
    for kk, g in groups(acc, key).items():
        left = k
        for v in sorted(g):
            c = g[v]
            if c <= 0 or left == 0:
                continue
            take = min(c, left)
            out[kk + v] = take
            left -= take
    return out


def ref_reduce(py_logic, acc, key=1):
    """``py_logic(list of (value_tuple, count))`` -> list of (out_value_tuple, count)."""
    out = {}
    for k, g in groups(acc, key).items():
        for v, c in py_logic(sorted(g.items())):
            out[k + tuple(v)] = out.get(k + tuple(v), 0) + c
    return out


def ref_union(a, b):
    return {r: max(a.get(r, 0), b.get(r, 0)) for r in set(a) | set(b)}


def ref_intersect(a, b):
    return {r: min(a.get(r, 0), b.get(r, 0)) for r in set(a) | set(b)}


def ref_except(a, b):
    return {r: max(a.get(r, 0) - b.get(r, 0), 0) for r in set(a) | set(b)}


@contextmanager
def loops_in(mode):
    """The native engine's loops in ``mode`` (``"rounds"`` or ``"sequential"``) inside
    the block, ``DDNUMBA_LOOPS`` set aside; both restored afterwards."""
    from ddnumba.native import NativeEngine
    old = NativeEngine.loop_mode, os.environ.pop("DDNUMBA_LOOPS", None)
    NativeEngine.loop_mode = mode
    try:
        yield mode
    finally:
        NativeEngine.loop_mode = old[0]
        if old[1] is not None:
            os.environ["DDNUMBA_LOOPS"] = old[1]

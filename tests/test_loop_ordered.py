"""``min``, ``max`` and ``top_k`` inside loops read a key's input in value order and stop
once the rows read hold the output (``kernels.seqloop._walk_order``), on the native
engine's sequential loops; a ``max`` reads from the largest value down, and a ``min`` or
``max`` of another value column moves it first (a selection).

Every program propagates values along the edges of a DAG (nodes ``0..N-1``, edges from
a smaller node to a larger one) from a ``base`` collection, so its loop converges
whatever the counts: the edges' and the base's accumulated counts may be negative or
above one, and a node's group holds many values, some of them negative or cancelled.
Each run takes out the least and the greatest base rows of every node and adds random
updates at several times; the loop's result is checked against a brute-force fixed
point at every time, on both engines (the Python engine is the reference the native
one is twinned with)."""
import numpy as np
import pytest

import ddnumba as dd

import oracle as O

ENGINES = ["native", "python"]
N = 6


def _body(op, edges, base):
    if op == "min":
        def body(x):
            hop = x.join(edges).map(lambda n, v, d: (d, v), names=["node", "v"])
            return hop.concat(base.map(lambda n, v, w: (n, v), names=["node", "v"])) \
                .min("v", name="v")
    elif op == "max":
        def body(x):
            hop = x.join(edges).map(lambda n, v, d: (d, v), names=["node", "v"])
            return hop.concat(base.map(lambda n, v, w: (n, v), names=["node", "v"])) \
                .max("v", name="v")
    elif op == "min_w":
        def body(x):
            hop = x.join(edges).map(lambda n, w, d: (d, w, w), names=["node", "v", "w"])
            return hop.concat(base).min("w", name="w")
    else:
        def body(x):
            hop = x.join(edges).map(lambda n, v, w, d: (d, v, w),
                                    names=["node", "v", "w"])
            return hop.concat(base).top_k(2)
    return body


def _start(op, base):
    if op in ("min", "max"):
        return base.map(lambda n, v, w: (n, v), names=["node", "v"])
    if op == "min_w":
        return base.map(lambda n, v, w: (n, w), names=["node", "w"])
    return base


def _ref_step(op, x, edges, base):
    """One iteration of the loop body, on ``{row: count}`` collections."""
    if op == "top2":
        hop = O.ref_map(lambda n, v, w, d: (d, v, w), 4)(O.ref_join(x, edges))
        return O.clean(O.ref_top_k(O.clean(O.ref_concat(hop, base)), 2))
    b2 = O.ref_map(lambda n, v, w: (n, v), 3)(base)
    if op == "min_w":
        hop = O.ref_map(lambda n, w, d: (d, w, w), 3)(O.ref_join(x, edges))
        return O.clean(O.ref_min(O.clean(O.ref_concat(hop, base)), 1))
    hop = O.ref_map(lambda n, v, d: (d, v), 3)(O.ref_join(x, edges))
    ref = O.ref_min if op == "min" else O.ref_max
    return O.clean(ref(O.clean(O.ref_concat(hop, b2)), 0))


def _ref_fixed_point(op, edges, base):
    x = O.clean(O.ref_map(lambda n, v, w: (n, v), 3)(base)) if op in ("min", "max") \
        else O.clean(O.ref_map(lambda n, v, w: (n, w), 3)(base)) if op == "min_w" \
        else base
    # (a DAG of N nodes settles in N + 1 rounds)
    return O.fixed_point(lambda x: _ref_step(op, x, edges, base), x, N + 3)


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("op", ["min", "max", "min_w", "top2"])
@pytest.mark.parametrize("engine", ENGINES)
def test_loop_extremes_over_big_groups_match_the_fixed_point(engine, op, seed):
    rng = np.random.default_rng(seed)
    df = dd.Dataflow(engine=engine)
    eh, edges = df.new_input(["src", "dst"])
    bh, base = df.new_input(["node", "v", "w"])
    out = _start(op, base).iterate(_body(op, edges, base), max_iterations=50)
    width = out.arity
    cap = out.capture()
    erows, brows = [], []

    def add_edges(s, d, ts, diff):
        keep = s < d                                # a DAG: smaller to larger nodes
        s, d, ts, diff = s[keep], d[keep], ts[keep], diff[keep]
        eh.update(s, d, time=ts, diff=diff)
        erows.extend(((int(a), int(b)), int(x), int(y))
                     for a, b, x, y in zip(s, d, ts, diff))

    def add_base(n, v, w, ts, diff):
        bh.update(n, v, w, time=ts, diff=diff)
        brows.extend(((int(a), int(b), int(c)), int(x), int(y))
                     for a, b, c, x, y in zip(n, v, w, ts, diff))

    m = 12
    add_edges(rng.integers(0, N, m), rng.integers(0, N, m), np.zeros(m, np.int64),
              rng.choice(np.array([1, 1, 2, -1]), m))
    m = 400                                 # ~65 rows a node
    add_base(rng.integers(0, N, m), rng.integers(0, 100, m), rng.integers(0, 4, m),
             np.zeros(m, np.int64), np.ones(m, np.int64))
    t = 0
    for run in range(12):
        # every node's least and greatest base rows go, at this run's first time
        live = sorted(r for r, c in O.accumulate_at(
            [(r, (s,), d) for r, s, d in brows], (t,)).items() if c > 0)
        gone = []
        for node in range(N):
            mine = [r for r in live if r[0] == node]
            gone += mine[:1] + mine[-1:]
        if gone:
            g = np.array(gone, dtype=np.int64).reshape(-1, 3)
            add_base(g[:, 0], g[:, 1], g[:, 2], np.full(len(g), t + 1),
                     -np.ones(len(g), np.int64))
        m = int(rng.integers(2, 12))        # random updates, negative counts among them
        add_base(rng.integers(0, N, m), rng.integers(-5, 105, m), rng.integers(0, 4, m),
                 t + 1 + rng.integers(0, 3, m), rng.choice(np.array([-2, -1, 1, 1, 2]), m))
        if run % 3 == 1:
            m = 3
            add_edges(rng.integers(0, N, m), rng.integers(0, N, m),
                      t + 1 + rng.integers(0, 3, m), rng.choice(np.array([-1, 1]), m))
        eh.advance_to(t + 4)
        bh.advance_to(t + 4)
        df.run()
        O.check_at_times(cap, width, range(0 if run == 0 else t + 1, t + 4),
                         [erows, brows], lambda e, b: _ref_fixed_point(op, e, b), op)
        t += 3
    if engine == "native":
        assert all(df._native.sequential), "the loop did not run sequentially"


# ----------------------------------------------------------------- the walk, directly


def _evaluate(logic, lparam, late_val, out_vals, delta_val, delta_diff=1):
    """One key (7) of a fused reduce (input block 0, output block 1 of one row) whose
    input holds values 0..999 at iteration 0 and ``late_val`` again at iteration 5,
    whose output holds the values ``out_vals`` (its output for that input), evaluated
    at iteration 0 for a delta of ``delta_diff`` on ``delta_val`` by
    ``seqloop._reduce_keys``.
    Returns the code, the corrections ``(iteration, diff, key, value)`` and the
    schedule rows ``(next iteration, 0, key)``."""
    from ddnumba.kernels import hstate as H
    from ddnumba.kernels import seqloop as S

    tab, arena, meta = H.new_state(1, 1, rows=16, entries=4096)
    ins = np.zeros((1000, 4), np.int64)
    ins[:, 1] = 1
    ins[:, 2] = 7
    ins[:, 3] = np.arange(1000)
    tab, arena = H.insert_delta(tab, arena, meta, 1, 0, ins, 1000, 1, 1, 0, "x")
    late = np.array([[5, 1, 7, late_val]], np.int64)
    tab, arena = H.insert_delta(tab, arena, meta, 1, 0, late, 1, 1, 1, 5, "x")
    out = np.array([[0, 1, 7, v] for v in out_vals], np.int64)
    tab, arena = H.insert_delta(tab, arena, meta, 1, 1, out, len(out), 1, 1, 0, "x")
    meta[H.M_EPOCH] = 1
    dd = np.array([[0, delta_diff, 7, delta_val]], np.int64)
    sk = np.zeros((0, 3), np.int64)
    pos = np.zeros(2, np.int64)
    acc, des, cur = (np.zeros((1100, 2), np.int64) for _ in range(3))
    cd = np.zeros((2100, 4), np.int64)
    nc = np.zeros(1, np.int64)
    sq = np.zeros((4, 3), np.int64)
    qc = np.array([0, S.INF, 0], np.int64)
    code = S._reduce_keys(tab, arena, meta, 1, 1, 1, 1, 1, 1, logic, lparam, 0, dd, 1,
                          sk, 0, pos, acc, des, cur, cd, nc, sq, qc)
    return code, cd[:nc[0]].tolist(), sq[:qc[0]].tolist()


@pytest.mark.parametrize("logic, lparam, late_val, out_vals", [
    ("min", 0, 900, [0]),           # the late row is far above the least value
    ("max", 0, 100, [999]),         # far below the greatest
    ("top", 3, 900, [0, 1, 2]),     # far above the three least
])
def test_a_loop_reduce_reads_a_big_key_only_up_to_its_output(logic, lparam, late_val,
                                                              out_vals):
    """The walk stops at the rows that hold the output: a row of a later iteration
    beyond them (``late_val`` at iteration 5) is not read, so the key is not
    scheduled for iteration 5, while the same row on a value the walk reads is. The
    output does not change, so nothing is corrected. (Reading the whole key, as every
    loop reduce did before, schedules it at 5 in both cases.)"""
    from ddnumba.kernels.reduce import L_MAX, L_MIN, L_TOP_K
    lg = {"min": L_MIN, "max": L_MAX, "top": L_TOP_K}[logic]
    assert _evaluate(lg, lparam, late_val, out_vals, 500) == (0, [], [])
    assert _evaluate(lg, lparam, out_vals[-1], out_vals, 500) == (0, [], [[5, 0, 7]])


def test_a_loop_max_or_min_taken_out_corrects_to_the_next_value_present():
    """A ``max`` whose greatest value is taken out reads down to the next one present
    and corrects its output there (a ``min`` likewise upwards); the late row is
    below (above) both, so nothing is scheduled."""
    from ddnumba.kernels.reduce import L_MAX, L_MIN
    assert _evaluate(L_MAX, 0, 100, [999], 999, -1) == \
        (0, [[0, 1, 7, 998], [0, -1, 7, 999]], [])
    assert _evaluate(L_MIN, 0, 900, [0], 0, -1) == \
        (0, [[0, -1, 7, 0], [0, 1, 7, 1]], [])

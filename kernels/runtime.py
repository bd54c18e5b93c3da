"""The native runtime: a whole dataflow executed by compiled code, loops included.

The Python engine (:mod:`ddnumba.dataflow`) steps every operator from Python; a round
of a loop then costs tens of Python calls per operator, which dominates small updates
(a single edge change can take a dozen rounds). This module runs the same operator
graph inside one compiled call per ``Dataflow.run()``: the graph is a *program* of
int64 arrays (operator kinds, wiring, parameters) and the state lives in typed lists of
flat batches (:mod:`ddnumba.kernels.batch`). User functions (``map``, ``filter``,
``reduce`` logic, ...) are called back in Python through ``objmode`` (~1.5 µs a call);
projections (maps that return their input columns) run natively.

Scope. One outer time coordinate (totally ordered), loops not nested, one worker. Times
are stored as ``(t, i)``: ``i`` is the iteration counter inside a loop and ``0``
outside, so entering a loop is the identity and leaving it zeroes ``i``.

Loops run here round-wise (``_run_loop``), or sequentially through
:mod:`ddnumba.kernels.seqloop` (``_run_loop_seq``, see the section there).

Frontiers. With a totally ordered outer time a frontier is one number: an update at
``(t, i)`` of a root operator is *due* when ``t < p`` (``p`` the least input frontier
upstream). In round ``k`` of a loop the frontier is ``{(p, 0), (q, k + 1)}`` (``q`` the
previous run's ``p``), so ``(t, i)`` is due when ``t < p and (t < q or i <= k)``.

Operators (one ``_step_*`` function each):

* linear ones pass batches on (``concat``, ``enter``), transform them natively
  (``negate``, projections, ``leave``, ``feedback``) or through a Python callback;
* ``arrange`` sorts the due updates of a step into one flat batch, hands it to its
  readers and inserts it into its *spine* (a list of batches of geometrically
  decreasing size, merged and compacted as in DESIGN.md section 4) after every reader
  of the pass has read the older trace;
* ``join`` emits ``dA·B + dA·dB + A·dB`` (``A``, ``B`` the traces before the pass), so
  every pair is produced exactly once and nothing needs cancelling;
* ``reduce`` keeps ``output(t) = logic(input(t))`` for partially ordered ``(t, i)``
  with the *round-wise interesting times* below.

Reduce in round ``k``. Every new input update of the round has iteration ``k``
(rounds visit iterations in order), and so has every due pending time. For a key
whose least such outer time is ``m``, the joins of ``(m', k)`` (``m' >= m``) with its
history ``(t_h, i_h)`` are ``(max(m', t_h), max(k, i_h))``:

* with ``i_h <= k`` they are ``(t, k)`` for ``t`` in ``{m} ∪ {t_h > m}``: the key is
  evaluated at those outer times, accumulating only history at iterations ``<= k`` —
  a one-dimensional walk per key (no pairwise closure);
* with ``i_h = j > k`` they lie at iteration ``j``; the key keeps one *pending* entry
  ``(j, max(m, min t_h at j))``, and at round ``j`` the walk from that time covers
  every such join (each is a history time at iteration ``<= j``, or the pending time).

Evaluating at a few extra times is harmless (the correction there is zero), so the
output history's times join the walk as well.
"""
import numpy as np
from numba import njit, types
from numba.typed import List

from .affine import MAP_OVERFLOW, affine_batch
from .batch import (advance, concat_batches, consolidate_dead, fence, key_ranges, merge,
                    sort_consolidate)
from .hooks import (_HOOKS, _cb_batch, _cb_logic, _cb_warn, loop_call_due,  # noqa: F401
                    set_hooks, trim_heap)
from .hstate import M_LIVE, _move_step as _hs_move_step, gc as _hs_gc, new_meta as _hs_new_meta
from .reduce import (L_CALLBACK, L_COUNT, L_DISTINCT, L_MAX, L_MIN, L_SUM,  # noqa: F401
                     L_TOP_K, LOGIC, _accumulate, _logic_count, _logic_extreme,
                     _logic_sum, _logic_top_k)
from .rootagg import agg_step, distinct_step
from .rootorder import O_MAX, O_MIN, O_TOP_K, SMALL as ORDER_SMALL, ordered_want
from .rows import (BFALSE, BTRUE, I0, add_checked, leaf, list_item, list_leaf,
                   mul_checked)
from .seqloop import S_LEAVE as SEQ_LEAVE, _nodes as seq_nodes, pack_fields
from .seqloop import leave_rows as seq_leave_rows, run_times as seq_run_times
from .seqloop import (buf_count as seq_buf_count, new_counters as seq_new_counters,
                      put_buf as seq_put_buf, set_buf_count as seq_set_buf_count)

__all__ = ["KIND", "LOGIC", "new_state", "run", "set_hooks", "spine_sizes",
           "BATCH_TYPE"]

INF = np.iinfo(np.int64).max
NEG = np.iinfo(np.int64).min

# Operator kinds (the program's ``kind`` array).
K_INPUT = 0
K_CALLBACK = 1
K_PROJECT = 2
K_CONCAT = 3
K_NEGATE = 4
K_CONSOLIDATE = 5
K_ARRANGE = 6
K_JOIN = 7
K_REDUCE = 8
K_ENTER = 9
K_LEAVE = 10
K_FEEDBACK = 11
K_LOOP = 12
K_CAPTURE = 13
K_PROBE = 14
K_AFFINE = 15   # a map of sums or a filter of comparisons (kernels.affine)

KIND = {"input": K_INPUT, "callback": K_CALLBACK, "project": K_PROJECT,
        "concat": K_CONCAT, "negate": K_NEGATE, "consolidate": K_CONSOLIDATE,
        "arrange": K_ARRANGE, "join": K_JOIN, "reduce": K_REDUCE, "enter": K_ENTER,
        "leave": K_LEAVE, "feedback": K_FEEDBACK, "loop": K_LOOP, "capture": K_CAPTURE,
        "probe": K_PROBE, "affine": K_AFFINE}

_I2 = types.Array(types.int64, 2, "C")
_I1 = types.Array(types.int64, 1, "C")
BATCH_TYPE = types.Tuple((_I2, _I2, _I1))
_BLIST = types.ListType(BATCH_TYPE)
# Batches inside a spine carry their fence (kernels.batch.fence) as a fourth array.
SBATCH_TYPE = types.Tuple((_I2, _I2, _I1, _I2))
_SLIST = types.ListType(SBATCH_TYPE)
# The hashed state of a sequential loop (kernels.hstate): table, arena, counters;
# its program (kernels.seqloop) and its counters (buffer row counts, least iterations,
# sizes, statistics: seqloop's ``cn``).
HSTATE_TYPE = types.Tuple((_I2, _I2, _I1))
SEQ_TYPE = types.Tuple((_I1, _I1))
_I2LIST = types.ListType(_I2)

# Status codes returned by run().
OK = 0
ITERATION_LIMIT = 1

# ------------------------------------------------------------------------------- program
#
# The program is one int64 array: a header of N_FIELDS + 1 offsets, then the fields
# (field i is prog[prog[i]:prog[i + 1]]). One array rather than a tuple of 19 keeps
# every compiled function's signature small, which matters for compile time (each
# function taking a wide tuple of arrays costs seconds to compile) and call overhead.

N_FIELDS = 19
PRM_W = 10      # parameters per node (field 7 holds an [N, PRM_W] matrix)


@njit(cache=True, nogil=True, inline="always")
def _fld(prog, i):
    return prog[prog[i]:prog[i + 1]]


@njit(cache=True, nogil=True, inline="always")
def _prm(prog):
    a = prog[prog[7]:prog[8]]
    return a.reshape((a.shape[0] // PRM_W, PRM_W))


def pack_program(fields):
    """Pack the program's arrays (in field order) into one int64 array."""
    assert len(fields) == N_FIELDS
    return pack_fields(fields)


# --------------------------------------------------------------------------------- state


@njit(cache=True)
def new_state(n_queues, n_spines, n_held, n_pend, pend_w, n_out, n_nodes, n_loops,
              loop_kv):
    """Empty runtime state for a program of the given sizes.

    ``pend_w[r]`` is the data width of reduce ``r``'s pending entries (key + 1);
    ``loop_kv[l]`` the widest key and value of loop ``l``'s traces when it runs
    sequentially (its hashed state, kernels.hstate); rows after the first
    ``n_loops`` are the key and value widths of the root scope's counts and sums
    (kernels.rootagg), whose hashed states follow the loops' in st[11].
    """
    q = List.empty_list(_BLIST)
    for _ in range(n_queues):
        q.append(List.empty_list(BATCH_TYPE))
    sp = List.empty_list(_SLIST)
    fresh = List.empty_list(_BLIST)
    for _ in range(n_spines):
        sp.append(List.empty_list(SBATCH_TYPE))
        fresh.append(List.empty_list(BATCH_TYPE))
    held = List.empty_list(_BLIST)
    for _ in range(n_held):
        held.append(List.empty_list(BATCH_TYPE))
    pend = List.empty_list(BATCH_TYPE)
    for r in range(n_pend):
        pend.append((np.empty((0, pend_w[r]), np.int64), np.empty((0, 2), np.int64),
                     np.empty(0, np.int64)))
    out = List.empty_list(_BLIST)
    for _ in range(n_out):
        out.append(List.empty_list(BATCH_TYPE))
    since = np.full(n_spines, NEG, np.int64)
    nf = np.zeros(n_nodes, np.int64)
    loop_prev = np.zeros(n_loops, np.int64)
    # info: [status detail: loop, iteration, rounds run in total, warned loops bitmask,
    #        spine merges, rows read by spine merges, root settle ratio (0: the
    #        default ROOT_SETTLE_RATIO), 1 + the node whose checked sum overflowed
    #        (INFO_MAP; 0: none),
    #        then per spine s, at INFO_SPINES + 2 * s: the first batch written in this
    #        run (-1: none) and rows added in this run (see _settle)]
    info = np.zeros(INFO_SPINES + 2 * n_spines, np.int64)
    for s in range(n_spines):
        info[INFO_SPINES + 2 * s] = -1
    # per node: [steps with input, updates in, updates out, unused]
    stats = np.zeros((n_nodes, 4), np.int64)
    hs = List.empty_list(HSTATE_TYPE)
    for l in range(loop_kv.shape[0]):
        kwm = loop_kv[l, 0]
        vwm = loop_kv[l, 1]
        meta = _hs_new_meta(kwm, vwm)
        hs.append((np.zeros((16, kwm + 6), np.int64), np.zeros((64, vwm + 2), np.int64),
                   meta))
    # filled by ddnumba.native (add_seq_loop) for the loops that run sequentially
    seq = List.empty_list(SEQ_TYPE)
    bufs = List.empty_list(_I2LIST)
    for l in range(n_loops):
        seq.append((np.zeros(0, np.int64), np.zeros(0, np.int64)))
        bufs.append(List.empty_list(_I2))
    return q, sp, fresh, since, held, pend, out, nf, loop_prev, info, stats, hs, seq, bufs


@njit(cache=True)
def add_seq_loop(st, l, lp, widths):
    """Give loop ``l`` its sequential program ``lp`` and one empty buffer per entry of
    ``widths`` (row widths)."""
    nb = widths.shape[0]
    st[12][l] = (lp, seq_new_counters(lp, widths, st[10].shape[0]))
    bl = st[13][l]
    bl.clear()
    for b in range(nb):
        bl.append(np.empty((16, widths[b]), np.int64))


@njit(cache=True)
def spine_sizes(st):
    """Updates held per spine (plus batches not yet inserted)."""
    sp = st[1]
    fresh = st[2]
    out = np.zeros(len(sp), np.int64)
    for s in range(len(sp)):
        for b in sp[s]:
            out[s] += b[2].shape[0]
        for b in fresh[s]:
            out[s] += b[2].shape[0]
    return out


@njit(cache=True)
def seq_records(st):
    """Entries held by each loop's hashed state (0 for loops that run round-wise)."""
    hs = st[11]
    out = np.zeros(len(hs), np.int64)
    for l in range(len(hs)):
        out[l] = hs[l][2][M_LIVE]
    return out


# Called from Python, a compiled function taking the whole state unboxes its fourteen
# parts (~3-5 µs) on every call; these two take one list (an input's queue or a
# capture's output, boxed once by ddnumba.native), so that only run() pays it.


@njit(cache=True)
def take_batches(lst, w):
    """Pop the batches of ``lst`` (rows of width ``w``), concatenated."""
    b = concat_batches(lst, w)
    lst.clear()
    return b


@njit(cache=True)
def push_batch(lst, d, t, f):
    """Append the batch ``(d, t, f)`` to ``lst`` (cheaper than ``List.append`` from
    Python, which resolves the types of the batch on every call)."""
    lst.append((d, t, f))


@njit(cache=True)
def spine_batches(st, s):
    """The batches of spine ``s`` (a copy of the list)."""
    out = List.empty_list(BATCH_TYPE)
    for b in st[1][s]:
        out.append((b[0], b[1], b[2]))
    return out


# ------------------------------------------------------------------------------- helpers


@njit(cache=True, nogil=True)
def _emit(prog, st, n, b):
    """Queue batch ``b`` at every consumer port of node ``n`` (empty batches vanish)."""
    if b[2].shape[0] == 0:
        return
    st[10][n, 2] += b[2].shape[0]
    cons_offs = _fld(prog, 3)
    cons_node = _fld(prog, 4)
    cons_port = _fld(prog, 5)
    qbase = _fld(prog, 6)
    q = st[0]
    for c in range(cons_offs[n], cons_offs[n + 1]):
        q[qbase[cons_node[c]] + cons_port[c]].append(b)


@njit(cache=True, nogil=True)
def _take(st, qid, w):
    """Pop every batch queued at ``qid``, concatenated (possibly empty)."""
    lst = st[0][qid]
    if len(lst) == 1:
        b = lst[0]
        lst.clear()
        return b
    if len(lst) == 0:
        return (np.empty((0, w), np.int64), np.empty((0, 2), np.int64),
                np.empty(0, np.int64))
    b = concat_batches(lst, w)
    lst.clear()
    return b


@njit(cache=True, nogil=True, inline="always")
def _due(t, i, p, q, k):
    return t < p and (t < q or i <= k)


# Spine shape: a new batch is merged into the previous one while it is at least
# 1/MERGE_RATIO of its size, so sizes fall by MERGE_RATIO or more from batch to batch.
# Every reader looks a key up in every batch, and in large batches each lookup costs
# cache misses, so fewer batches pay for more merging. Ratio 1 (merge while the new
# batch is at least as large: a binary counter over a run's rounds) was measured
# against 4 once the per-key loops had no reference counting: N=1,000 B=1000 runs
# 64 / 68 vs 75 / 74 ms, N=1e6 B=1000 p50 301 / 294 vs 314 / 314 ms, B=1 within
# 2-6% (slower), B=10000 +12%. (Before that change, ratio 2 vs 4 made no difference.)
# When a loop settles or a root pass ends, the tail of small batches is folded with
# SETTLE_RATIO, which also compacts it to the new frontier.
MERGE_RATIO = 1
SETTLE_RATIO = 8
# The same for the root scope's traces at the end of each pass (``info[6]`` overrides
# it when positive, so that two settings can be compared in one process). Root traces
# are compacted as batches are inserted, so settling only reshapes them, and a looser
# shape rewrites their large batches less often: a root-scope stream (a join and two
# counts over 200k + 50k rows, 2000 runs of 100 changes) read 9.5k rows in spine
# merges per run at 2 against 15.7k at 8, and ran 1.09x / 1.12x as fast (paired runs
# in one process, intervals 1.00-1.19 / 1.03-1.21); 1 and 4 gained 1.04-1.09x with
# intervals reaching below 1.
ROOT_SETTLE_RATIO = 2
# A spine merge reading at least this many rows first returns the C heap's free pages
# to the system (hooks.trim_heap), so its output does not come on top of them.
TRIM_ROWS = 1 << 24
INFO_MAP = 7        # 1 + the node whose checked sum overflowed (see K_AFFINE)
INFO_SPINES = 8     # per-spine slots of info start here (see new_state)


@njit(cache=True, nogil=True)
def _fenced(b):
    return (b[0], b[1], b[2], fence(b[0]))


@njit(cache=True, nogil=True)
def _before_merge(info, rows):
    """Count a spine merge reading ``rows`` rows in ``info`` (merges ``info[4]``, rows
    read ``info[5]``); before a large one, return the heap's free pages (TRIM_ROWS)."""
    info[4] += 1
    info[5] += rows
    if rows >= TRIM_ROWS:
        trim_heap()


@njit(cache=True, nogil=True)
def _merge_counted(x, m, since, info):
    """``merge`` of spine batch ``x`` (fenced) and ``m``, counted (:func:`_before_merge`)."""
    _before_merge(info, x[2].shape[0] + m[2].shape[0])
    return merge((x[0], x[1], x[2]), m, since)


@njit(cache=True, nogil=True)
def _settle_spine(sp, since, info, dirty, added, ratio):
    """At the end of a run (``since`` just advanced), compact and reshape a spine.

    First, a strongly geometric shape is restored: every batch is more than
    ``ratio`` times larger than all the batches after it together, the suffix that
    breaks this being merged into one batch, so readers search at most a couple of
    large batches, while a run that added little only merges little.

    Second, batches ``sp[dirty:]`` were written during the run (``added`` rows were
    inserted), while ``since`` still stood at the previous run's frontier, so they
    hold the run's distinct times uncompacted (with small state and large runs the
    run's rows even land in the largest batch). When rewriting them costs at most
    ``ratio`` times what the run added, they are merged too, compacted to the new
    frontier: state then stays near its compacted size instead of carrying a run's
    history until the batch's next rewrite.

    (Comparing the *compacted* suffix with its predecessor instead, so that a run's
    cancelling updates would not trigger rewrites of large batches, was measured: it
    saved no merge work on the reachability benchmark and left large batches
    uncompacted, with up to 6x more trace records at N=1000.)"""
    cut = len(sp)
    total = np.int64(0)
    for i in range(len(sp) - 1, 0, -1):
        total += sp[i][2].shape[0]
        if ratio * total >= sp[i - 1][2].shape[0]:
            cut = i - 1
    if 0 <= dirty < cut:
        rows = np.int64(0)
        for i in range(dirty, len(sp)):
            rows += sp[i][2].shape[0]
        if rows <= ratio * added:
            cut = dirty
    if cut >= len(sp):
        return
    if cut == len(sp) - 1 and not (0 <= dirty <= cut):
        return      # a single clean batch: nothing to merge or compact
    y = sp.pop()
    m = (y[0], y[1], y[2])
    if len(sp) == cut:
        # one dirty batch: compact it alone
        _before_merge(info, m[2].shape[0])
        m = advance(m, since)
    while len(sp) > cut:
        m = _merge_counted(sp.pop(), m, since, info)
    # only the final batch gets a fence (and key index): intermediate ones are dropped
    if m[2].shape[0] > 0:
        sp.append(_fenced(m))


@njit(cache=True, nogil=True)
def _settle(st, s, ratio):
    """:func:`_settle_spine` of spine ``s`` at its current ``since``; afterwards the
    spine is clean (no batch written in the run)."""
    sp = st[1][s]
    info = st[9]
    x = INFO_SPINES + 2 * s
    _settle_spine(sp, st[3][s], info, info[x], info[x + 1], ratio)
    info[x] = -1
    info[x + 1] = 0


@njit(cache=True, nogil=True)
def _spine_insert(sp, b, since, info, s):
    """Append a batch to spine ``s`` (``sp``) and restore its shape: while the last
    batch is at least 1/MERGE_RATIO of the one before it, merge the two. Only the
    batch that stays gets a fence (and key index). Records the batch written and the
    rows added for :func:`_settle`."""
    if b[2].shape[0] == 0:
        return
    m = b
    while len(sp) >= 1 and MERGE_RATIO * m[2].shape[0] >= sp[len(sp) - 1][2].shape[0]:
        x = sp.pop()
        m = _merge_counted(x, m, since, info)
    x = INFO_SPINES + 2 * s
    info[x + 1] += b[2].shape[0]
    if m[2].shape[0] > 0:
        sp.append(_fenced(m))
    if info[x] < 0 or info[x] > len(sp) - 1:
        info[x] = len(sp) - 1 if len(sp) else -1


@njit(cache=True, nogil=True)
def _flush(prog, st, spines):
    """Insert the batches arranged this pass into their spines."""
    sp = st[1]
    fresh = st[2]
    since = st[3]
    for s in spines:
        f = fresh[s]
        for b in f:
            _spine_insert(sp[s], b, since[s], st[9], s)
        f.clear()


# ------------------------------------------------------------------------- linear steps


@leaf
def _any_iteration(t):
    """Whether some time ``(t, iteration)`` of ``t`` has an iteration other than 0."""
    for r in range(t.shape[0]):
        if t[r, 1] != 0:
            return True
    return False


@njit(cache=True)
def _step_linear(prog, st, n, kind):
    in_offs = _fld(prog, 1)
    qbase = _fld(prog, 6)
    prm = _prm(prog)
    q = st[0]
    if kind == K_CONCAT or kind == K_ENTER or kind == K_INPUT:
        for port in range(in_offs[n + 1] - in_offs[n] if kind != K_INPUT else 1):
            lst = q[qbase[n] + port]
            for b in lst:
                _emit(prog, st, n, b)
            lst.clear()
        return
    if kind == K_PROBE:
        q[qbase[n]].clear()
        return
    if kind == K_CAPTURE:
        lst = q[qbase[n]]
        out = st[6][prm[n, 0]]
        for b in lst:
            out.append(b)
        lst.clear()
        return
    if kind == K_NEGATE:
        lst = q[qbase[n]]
        for b in lst:
            f = b[2]
            nf = np.empty(f.shape[0], np.int64)
            for i in range(f.shape[0]):
                if f[i] == NEG:
                    raise OverflowError("negate: a diff of -2**63 has no int64 negation")
                nf[i] = -f[i]
            _emit(prog, st, n, (b[0], b[1], nf))
        lst.clear()
        return
    if kind == K_PROJECT:
        cols = _fld(prog, 8)[prm[n, 0]:prm[n, 0] + prm[n, 1]]
        lst = q[qbase[n]]
        for b in lst:
            d = b[0]
            m = d.shape[0]
            od = np.empty((m, cols.shape[0]), np.int64)
            for r in range(m):
                for c in range(cols.shape[0]):
                    od[r, c] = d[r, cols[c]]
            _emit(prog, st, n, (od, b[1], b[2]))
        lst.clear()
        return
    if kind == K_AFFINE:
        lst = q[qbase[n]]
        for b in lst:
            od, ot, of, ok = affine_batch(_fld(prog, 8), prm[n, 0], prm[n, 1], b[0], b[1],
                                          b[2])
            if not ok:
                # (ddnumba.native raises the map's own message)
                st[9][INFO_MAP] = n + 1
                raise OverflowError(MAP_OVERFLOW)
            _emit(prog, st, n, (od, ot, of))
        lst.clear()
        return
    w = prm[n, 1]   # the node's input width (consolidate, leave, feedback, callback)
    u = _take(st, qbase[n], w)
    if u[2].shape[0] == 0:
        return
    if kind == K_CONSOLIDATE:
        _emit(prog, st, n, sort_consolidate(u[0], u[1], u[2]))
    elif kind == K_LEAVE:
        # the iteration goes (a sequential loop's leaves give none: no copy then)
        t = u[1]
        if _any_iteration(t):
            t = t.copy()
            for r in range(t.shape[0]):
                t[r, 1] = 0
        _emit(prog, st, n, sort_consolidate(u[0], t, u[2]))
    elif kind == K_FEEDBACK:
        b = sort_consolidate(u[0], u[1], u[2])
        t = b[1].copy()
        for r in range(t.shape[0]):
            t[r, 1] += 1
        _emit(prog, st, n, (b[0], t, b[2]))
    elif kind == K_CALLBACK:
        d0 = u[0]
        t0 = u[1]
        f0 = u[2]
        _emit(prog, st, n, _cb_batch(n, d0, t0, f0))


# ------------------------------------------------------------------------------- arrange


@njit(cache=True, nogil=True)
def _step_arrange(prog, st, n, p, q, k):
    qbase = _fld(prog, 6)
    prm = _prm(prog)
    w = prm[n, 0]
    s = prm[n, 1]
    h = prm[n, 2]
    lst = st[0][qbase[n]]
    held = st[4][h]
    if len(lst) == 0 and len(held) == 0:
        return
    for b in lst:
        held.append(b)
    lst.clear()
    u = concat_batches(held, w) if len(held) != 1 else held[0]
    held.clear()
    t = u[1]
    m = u[2].shape[0]
    nd = np.int64(0)
    for r in range(m):
        if _due(t[r, 0], t[r, 1], p, q, k):
            nd += 1
    if nd == 0:
        held.append(u)
        return
    if nd == m:
        due = u
    else:
        dd = np.empty((nd, w), np.int64)
        dt = np.empty((nd, 2), np.int64)
        df = np.empty(nd, np.int64)
        fd = np.empty((m - nd, w), np.int64)
        ft = np.empty((m - nd, 2), np.int64)
        ff = np.empty(m - nd, np.int64)
        a = np.int64(0)
        c = np.int64(0)
        for r in range(m):
            if _due(t[r, 0], t[r, 1], p, q, k):
                _copy_upd(u, r, dd, dt, df, a)
                a += 1
            else:
                _copy_upd(u, r, fd, ft, ff, c)
                c += 1
        held.append((fd, ft, ff))
        due = (dd, dt, df)
    b = sort_consolidate(due[0], due[1], due[2])
    if b[2].shape[0]:
        if prm[n, 3] > 0:
            # The arrangement of a reduce that shares its trace with the reduce's
            # output: rows become (key, 0, vals, padding) (see _reduce_gather).
            b = _tag_rows(b, prm[n, 4], prm[n, 3], I0)
        if prm[n, 6] == 0:      # (1: read by a root count/sum only, no trace)
            st[2][s].append(b)
        _emit(prog, st, n, b)


@njit(cache=True, nogil=True)
def _copy_upd(u, r, od, ot, of, o):
    d = u[0]
    for c in range(d.shape[1]):
        od[o, c] = d[r, c]
    ot[o, 0] = u[1][r, 0]
    ot[o, 1] = u[1][r, 1]
    of[o] = u[2][r]


@njit(cache=True, nogil=True)
def _tag_rows(b, kw, w, tag):
    """Rows ``(key, vals)`` as ``(key, tag, vals, 0...)`` of width ``w``: the layout of
    a trace shared by a reduce's input (tag 0) and output (tag 1). A constant column
    after the key keeps the rows sorted."""
    d = b[0]
    n = d.shape[0]
    out = np.zeros((n, w), np.int64)
    for r in range(n):
        for c in range(kw):
            out[r, c] = d[r, c]
        out[r, kw] = tag
        for c in range(kw, d.shape[1]):
            out[r, c + 1] = d[r, c]
    return out, b[1], b[2]


@njit(cache=True, nogil=True)
def _held_min_iter(st, h, p):
    """Least iteration of held updates with outer time < p (or INF)."""
    best = np.int64(INF)
    for b in st[4][h]:
        t = b[1]
        for r in range(t.shape[0]):
            if t[r, 0] < p and t[r, 1] < best:
                best = t[r, 1]
    return best


# ---------------------------------------------------------------------------------- join


@njit(cache=True, nogil=True)
def _grow2(buf, n, need):
    if need <= buf.shape[0]:
        return buf
    cap = max(need, 2 * buf.shape[0], 64)
    out = np.empty((cap, buf.shape[1]), np.int64)
    for i in range(n):
        for c in range(buf.shape[1]):
            out[i, c] = buf[i, c]
    return out


@njit(cache=True, nogil=True)
def _grow1(buf, n, need):
    if need <= buf.shape[0]:
        return buf
    cap = max(need, 2 * buf.shape[0], 64)
    out = np.empty(cap, np.int64)
    for i in range(n):
        out[i] = buf[i]
    return out


# _pairs' result codes when a diff overflows (the caller raises), or when its scratch
# is too small (the caller grows it and redoes the key)
OV_SUM = -1
OV_PRODUCT = -2
NEED_GBUF = -3


@njit(cache=True, nogil=True)
def _cross(L, R, kw, od, ot, of, o, lfence, rfence):
    """Append the pairs of updates of ``L`` and ``R`` with equal keys: row
    ``(key, L vals, R vals)``, time the join, diff the product (pairs that meet at the
    same time summed, see _pairs). Returns the buffers and the new count. Walks the
    keys of the smaller batch and gallops in the other (through its fence, if it has
    one)."""
    ld, lt, lf = L
    rd, rt, rf = R
    nl = lf.shape[0]
    nr = rf.shape[0]
    if nl == 0 or nr == 0:
        return od, ot, of, o
    lw = ld.shape[1]
    rw = rd.shape[1]
    drive_left = nl <= nr
    dd = ld if drive_left else rd
    nd = nl if drive_left else nr
    other = rd if drive_left else ld
    ofence = rfence if drive_left else lfence
    no = nr if drive_left else nl
    # The driving side's distinct keys (first row of each), then all their ranges in
    # the other side at once.
    starts = np.empty(nd + 1, np.int64)
    ng = _key_starts(dd, nd, kw, starts)
    los = np.empty(ng, np.int64)
    his = np.empty(ng, np.int64)
    key_ranges(other, ofence, dd, starts[:ng], kw, los, his)
    # Output space for every pair, reserved once (array-valued locals reassigned per
    # key, or calls that can raise, cost reference-count updates per key).
    need = o
    for g in range(ng):
        need += (starts[g + 1] - starts[g]) * (his[g] - los[g])
    od = _grow2(od, o, need)
    ot = _grow2(ot, o, need)
    of = _grow1(of, o, need)
    gbuf = np.zeros((4, 64), np.int64)    # _pairs_groups' per-group state
    at = np.zeros(2, np.int64)            # where _pairs_keys stopped: group, count
    g0 = np.int64(0)
    while True:
        r = _pairs_keys(ld, lt, lf, rd, rt, rf, starts, los, his, g0, ng, drive_left,
                        kw, od, ot, of, o, gbuf, at)
        if r >= 0:
            return od, ot, of, r
        if r != NEED_GBUF:
            _raise_join_overflow(r)
        # a key spans more iterations than gbuf has groups: grow it, redo that key
        gbuf = np.zeros((4, 2 * gbuf.shape[1]), np.int64)
        g0 = at[0]
        o = at[1]


@leaf
def _key_starts(dd, nd, kw, starts):
    """The first row of every distinct key of the sorted ``dd[:nd]`` into ``starts``,
    then ``nd``; returns the number of keys."""
    ng = np.int64(0)
    s = np.int64(0)
    while s < nd:
        starts[ng] = s
        ng += 1
        e = s + 1
        while e < nd and _same_key(dd, s, dd, e, kw):
            e += 1
        s = e
    starts[ng] = nd
    return ng


@leaf
def _pairs_keys(ld, lt, lf, rd, rt, rf, starts, los, his, g0, ng, drive_left, kw,
                od, ot, of, o, gbuf, at):
    """_pairs for the driving side's keys ``g0..ng-1`` (rows ``starts[g]:starts[g+1]``
    of the driving side, ``los[g]:his[g]`` of the other), appended at ``o``. Returns
    the new count, or a negative code with ``at = (key, count before it)``: OV_SUM /
    OV_PRODUCT, or NEED_GBUF when ``gbuf`` is too small for the key (grow, resume)."""
    for g in range(g0, ng):
        s = starts[g]
        e = starts[g + 1]
        lo = los[g]
        hi = his[g]
        if lo < hi:
            if drive_left:
                l0, l1, r0, r1 = s, e, lo, hi
            else:
                l0, l1, r0, r1 = lo, hi, s, e
            r = _pairs(ld, lt, lf, l0, l1, rd, rt, rf, r0, r1, kw, od, ot, of, o,
                       r1 - r0 >= l1 - l0, gbuf)
            if r < 0:
                at[0] = g
                at[1] = o
                return r
            o = r
    return o


@njit(cache=True, nogil=True)
def _raise_join_overflow(code):
    if code == OV_PRODUCT:
        raise OverflowError("join: the product of two diffs overflows int64")
    raise OverflowError("join: a sum of diffs overflows int64")


@leaf
def _pairs(ld, lt, lf, l0, l1, rd, rt, rf, r0, r1, kw, od, ot, of, o, acc_right,
           gbuf):
    """The pairs of one key's updates ``L[l0:l1]`` x ``R[r0:r1]`` (buffers sized for
    all of them), appended at ``o``, summed where they meet at the same time; returns
    the new count.

    Within a run every change has its own time, so a key's history holds many times
    and most pairs cancel once consolidated. Per pair of rows (one value on each side):
    when every pair's join lands on one iteration ``I`` (one side entirely at ``I``,
    the other at or below it; always so for a loop round's new updates against the
    traces of its inputs) the product is one-dimensional in the outer time and its
    changes are emitted by merging the two sorted histories: ``X(t) Y(t) - X(t-)
    Y(t-)`` at each time, at most ``|X| + |Y|`` outputs instead of ``|X| |Y|``.
    Otherwise, with ``acc_right``, for each left update at time ``a`` the right
    updates at times ``<= a`` are summed into one output at ``a`` and the others are
    paired one by one (symmetrically without ``acc_right``).

    ``gbuf`` is scratch of shape ``(4, m)`` (zero). Returns the new count, or OV_SUM /
    OV_PRODUCT (negative) when a diff overflows int64, or NEED_GBUF when ``m`` is less
    than the iterations the key spans: a leaf kernel, it leaves raising and allocating
    to _cross."""
    lw = ld.shape[1]
    rw = rd.shape[1]
    if acc_right:
        return _pairs_xy(ld, lt, lf, l0, l1, rd, rt, rf, r0, r1, BTRUE, lw, rw, kw,
                         od, ot, of, o, gbuf)
    return _pairs_xy(rd, rt, rf, r0, r1, ld, lt, lf, l0, l1, BFALSE, lw, rw, kw,
                     od, ot, of, o, gbuf)


@leaf
def _pairs_xy(xd, xt, xf, x0, x1, yd, yt, yf, y0, y1, acc_right, lw, rw, kw, od, ot,
              of, o, gbuf):
    """_pairs with the accumulated side ``y`` (right when ``acc_right``)."""
    xw = xd.shape[1]
    yw = yd.shape[1]
    xa = x0
    while xa < x1:
        xb = xa + 1
        while xb < x1 and _key_cmp(xd, xa, xd, xb, xw) == 0:
            xb += 1
        xlo = xt[xa, 1]
        xhi = xt[xa, 1]
        for i in range(xa + 1, xb):
            xlo = min(xlo, xt[i, 1])
            xhi = max(xhi, xt[i, 1])
        ya = y0
        while ya < y1:
            yb = ya + 1
            ylo = yt[ya, 1]
            yhi = yt[ya, 1]
            while yb < y1 and _key_cmp(yd, ya, yd, yb, yw) == 0:
                ylo = min(ylo, yt[yb, 1])
                yhi = max(yhi, yt[yb, 1])
                yb += 1
            if xb - xa == 1 and yb - ya == 1:
                # one update on each side: one pair
                d, ov = mul_checked(xf[xa], yf[ya])
                if ov:
                    return OV_PRODUCT
                o = _put_pair(od, ot, of, o, xd, xa, yd, ya, acc_right, lw, rw, kw,
                              max(xt[xa, 0], yt[ya, 0]), max(xt[xa, 1], yt[ya, 1]), d)
            elif xlo == xhi and yhi <= xlo:
                o = _pairs_1d(xd, xt, xf, xa, xb, yd, yt, yf, ya, yb, xlo, acc_right,
                              lw, rw, kw, od, ot, of, o)
            elif ylo == yhi and xhi <= ylo:
                o = _pairs_1d(yd, yt, yf, ya, yb, xd, xt, xf, xa, xb, ylo, not acc_right,
                              lw, rw, kw, od, ot, of, o)
            elif xlo == xhi:
                o = _pairs_groups(xd, xt, xf, xa, xb, yd, yt, yf, ya, yb, xlo, yhi,
                                  acc_right, lw, rw, kw, od, ot, of, o, gbuf)
            elif ylo == yhi:
                o = _pairs_groups(yd, yt, yf, ya, yb, xd, xt, xf, xa, xb, ylo, xhi,
                                  not acc_right, lw, rw, kw, od, ot, of, o, gbuf)
            else:
                o = _pairs_acc(xd, xt, xf, xa, xb, yd, yt, yf, ya, yb, acc_right, lw, rw,
                               kw, od, ot, of, o)
            if o < 0:
                return o
            ya = yb
        xa = xb
    return o


@njit(cache=True, nogil=True, inline="always")
def _pairs_1d(xd, xt, xf, xa, xb, yd, yt, yf, ya, yb, it, x_left, lw, rw, kw, od, ot,
              of, o):
    """Pairs of two rows' histories that all join at iteration ``it`` (x updates at
    ``it``, y updates at or below it): the changes of ``X(t) Y(t)`` (see _pairs)."""
    px = xa
    py = ya
    X = np.int64(0)
    Y = np.int64(0)
    prev = np.int64(0)
    while px < xb or py < yb:
        if py >= yb or (px < xb and xt[px, 0] <= yt[py, 0]):
            t = xt[px, 0]
        else:
            t = yt[py, 0]
        while px < xb and xt[px, 0] == t:
            X, ov = add_checked(X, xf[px])
            if ov:
                return OV_SUM
            px += 1
        while py < yb and yt[py, 0] == t:
            Y, ov = add_checked(Y, yf[py])
            if ov:
                return OV_SUM
            py += 1
        cur, ov = mul_checked(X, Y)
        if ov:
            return OV_PRODUCT
        if cur != prev:
            d, ov = add_checked(cur, -prev)
            if ov:
                return OV_SUM
            o = _put_pair(od, ot, of, o, xd, xa, yd, ya, x_left,
                          lw, rw, kw, t, it, d)
            prev = cur
    return o


@leaf
def _pairs_groups(xd, xt, xf, xa, xb, yd, yt, yf, ya, yb, it, yhi, x_left, lw, rw, kw,
                  od, ot, of, o, gbuf):
    """Pairs of two rows' histories when every x update is at iteration ``it`` and some
    y updates are later: the y updates at iterations ``<= it`` join at ``it``, those at
    a later iteration ``g`` at ``g``. One merge by outer time keeps ``X(t)`` and one
    ``Y_g(t)`` per group and emits each group's product change (see _pairs)."""
    ng = yhi - it + 1
    if gbuf.shape[1] < ng:
        return NEED_GBUF
    # per group in gbuf (zero on entry and on return except the last row): y sums,
    # last products, touched marks; the last row lists the groups touched at a time
    yacc = gbuf[0]
    prev = gbuf[1]
    mark = gbuf[2]
    touched = gbuf[3]
    px = xa
    py = ya
    X = np.int64(0)
    while px < xb or py < yb:
        if py >= yb or (px < xb and xt[px, 0] <= yt[py, 0]):
            t = xt[px, 0]
        else:
            t = yt[py, 0]
        x_changed = False
        while px < xb and xt[px, 0] == t:
            X, ov = add_checked(X, xf[px])
            if ov:
                _clear_groups(gbuf, ng)
                return OV_SUM
            px += 1
            x_changed = True
        nt = np.int64(0)
        while py < yb and yt[py, 0] == t:
            gi = max(yt[py, 1], it) - it
            acc, ov = add_checked(yacc[gi], yf[py])
            if ov:
                _clear_groups(gbuf, ng)
                return OV_SUM
            yacc[gi] = acc
            if mark[gi] == 0:
                mark[gi] = 1
                touched[nt] = gi
                nt += 1
            py += 1
        n_check = ng if x_changed else nt
        for c in range(n_check):
            gi = c if x_changed else touched[c]
            cur, ov = mul_checked(X, yacc[gi])
            if ov:
                _clear_groups(gbuf, ng)
                return OV_PRODUCT
            if cur != prev[gi]:
                d, ov = add_checked(cur, -prev[gi])
                if ov:
                    _clear_groups(gbuf, ng)
                    return OV_SUM
                o = _put_pair(od, ot, of, o, xd, xa, yd, ya, x_left,
                              lw, rw, kw, t, it + gi, d)
                prev[gi] = cur
        for c in range(nt):
            mark[touched[c]] = 0
    _clear_groups(gbuf, ng)
    return o


@leaf
def _clear_groups(gbuf, ng):
    """Reset _pairs_groups' scratch to zero (its y sums, products and marks)."""
    for r in range(3):
        for gi in range(ng):
            gbuf[r, gi] = 0


@leaf
def _pairs_acc(xd, xt, xf, xa, xb, yd, yt, yf, ya, yb, x_left, lw, rw, kw, od, ot, of,
               o):
    """Pairs of two rows' histories, each x update with the y updates at or below its
    time summed into one output: see _pairs."""
    for i in range(xa, xb):
        ta = xt[i, 0]
        ia = xt[i, 1]
        acc = np.int64(0)
        for jj in range(ya, yb):
            if yt[jj, 0] <= ta and yt[jj, 1] <= ia:
                acc, ov = add_checked(acc, yf[jj])
                if ov:
                    return OV_SUM
                continue
            pr, ov = mul_checked(xf[i], yf[jj])
            if ov:
                return OV_PRODUCT
            o = _put_pair(od, ot, of, o, xd, i, yd, jj, x_left,
                          lw, rw, kw, max(ta, yt[jj, 0]), max(ia, yt[jj, 1]), pr)
        if acc != 0:
            pr, ov = mul_checked(xf[i], acc)
            if ov:
                return OV_PRODUCT
            o = _put_pair(od, ot, of, o, xd, i, yd, ya, x_left,
                          lw, rw, kw, ta, ia, pr)
    return o


@njit(cache=True, nogil=True, inline="always")
def _put_pair(od, ot, of, o, xd, i, yd, j, x_left, lw, rw, kw, t, it, d):
    """Write output ``o``: row ``(key, left vals, right vals)`` of x row ``i`` and y
    row ``j`` (x is the left input when ``x_left``), time ``(t, it)``, diff ``d``."""
    if x_left:
        _pair_row(od, o, xd, i, yd, j, lw, rw, kw)
    else:
        _pair_row(od, o, yd, j, xd, i, lw, rw, kw)
    ot[o, 0] = t
    ot[o, 1] = it
    of[o] = d
    return o + 1


@njit(cache=True, nogil=True, inline="always")
def _pair_row(od, o, ld, i, rd, j, lw, rw, kw):
    for c in range(lw):
        od[o, c] = ld[i, c]
    for c in range(kw, rw):
        od[o, lw + c - kw] = rd[j, c]


@njit(cache=True, nogil=True, inline="always")
def _same_key(a, i, b, j, kw):
    for c in range(kw):
        if a[i, c] != b[j, c]:
            return False
    return True


@njit(cache=True, nogil=True)
def _step_join(prog, st, n):
    qbase = _fld(prog, 6)
    prm = _prm(prog)
    left = prm[n, 0]
    right = prm[n, 1]
    kw = prm[n, 2]
    w = prm[n, 3]
    sl = prm[left, 1]
    sr = prm[right, 1]
    qa = st[0][qbase[n]]
    qb = st[0][qbase[n] + 1]
    if len(qa) == 0 and len(qb) == 0:
        return
    od = np.empty((64, w), np.int64)
    ot = np.empty((64, 2), np.int64)
    of = np.empty(64, np.int64)
    o = np.int64(0)
    sp = st[1]
    # Traces as of the previous pass: this pass's batches wait in `fresh`.
    nofence = np.empty((0, 1), np.int64)
    for a in qa:
        for r in sp[sr]:
            od, ot, of, o = _cross(a, (r[0], r[1], r[2]), kw, od, ot, of, o, nofence, r[3])
        for b in qb:
            od, ot, of, o = _cross(a, b, kw, od, ot, of, o, nofence, nofence)
    for b in qb:
        for l in sp[sl]:
            od, ot, of, o = _cross((l[0], l[1], l[2]), b, kw, od, ot, of, o, l[3], nofence)
    qa.clear()
    qb.clear()
    if o:
        _emit(prog, st, n, (od[:o], ot[:o], of[:o]))


# -------------------------------------------------------------------------------- reduce


@njit(cache=True, nogil=True, inline="always")
def _key_cmp(a, i, b, j, kw):
    for c in range(kw):
        x = a[i, c]
        y = b[j, c]
        if x != y:
            return -1 if x < y else 1
    return 0


@leaf
def _sort_histories(vals, ts, fs, offs, nsrc, runs, tmp_v, tmp_t, tmp_f):
    """:func:`_sort_vt` of every key's entries ``[offs[k], offs[k + 1])`` gathered from
    more than one batch (``nsrc[k] > 1``), in one call."""
    for kk in range(offs.shape[0] - 1):
        if nsrc[kk] > 1:
            _sort_range(vals, ts, fs, offs[kk], offs[kk + 1], runs, tmp_v, tmp_t, tmp_f)


@leaf
def _sort_vt(vals, ts, fs, lo, hi, runs, tmp_v, tmp_t, tmp_f):
    """Sort entries ``[lo, hi)`` by (val, t) in place, stably (see _sort_range)."""
    _sort_range(vals, ts, fs, lo, hi, runs, tmp_v, tmp_t, tmp_f)


@njit(cache=True, nogil=True, inline="always")
def _sort_range(vals, ts, fs, lo, hi, runs, tmp_v, tmp_t, tmp_f):
    """Sort entries ``[lo, hi)`` by (val, t) in place, stably.

    The entries are a concatenation of a few sorted runs (one per trace batch), so this
    is a natural merge sort: find the runs, then merge neighbours pairwise, ping-ponging
    between the range and the scratch arrays (``tmp_*`` hold ``hi - lo`` entries,
    ``runs`` ``hi - lo + 1``)."""
    m = hi - lo
    if m <= 1:
        return
    vw = vals.shape[1]
    if vw == 0 and m <= 32:
        # Only times to order: insertion sort of (t, diff) pairs in place.
        _insertion_sort_pairs(ts, fs, lo, hi)
        return
    nr = np.int64(1)
    runs[0] = 0
    for i in range(lo + 1, hi):
        if _lt_vt(vals, ts, i, i - 1):
            runs[nr] = i - lo
            nr += 1
    if nr == 1:
        return
    runs[nr] = m
    in_tmp = False
    zero = np.int64(0)      # (not a literal 0, which would compile a second pass kernel)
    while nr > 1:
        if in_tmp:
            nr = _merge_runs_pass(tmp_v, tmp_t, tmp_f, zero, vals, ts, fs, lo, runs, nr,
                                  vw)
        else:
            nr = _merge_runs_pass(vals, ts, fs, lo, tmp_v, tmp_t, tmp_f, zero, runs, nr,
                                  vw)
        in_tmp = not in_tmp
    if in_tmp:
        for i in range(m):
            for x in range(vw):
                vals[lo + i, x] = tmp_v[i, x]
            ts[lo + i] = tmp_t[i]
            fs[lo + i] = tmp_f[i]


@leaf
def _merge_runs_pass(sv, st_, sf, so, dv, dt, df, do, runs, nr, vw):
    """One pass of _sort_vt: merge runs ``2q`` and ``2q + 1`` (bounds ``runs``, relative
    to offsets ``so`` / ``do``) from ``s*`` into ``d*``; rewrites ``runs``, returns the
    new run count. Values have ``vw`` columns (scratch arrays may have more)."""
    w = np.int64(0)
    q = np.int64(0)
    while q < nr:
        a0 = runs[q]
        a1 = runs[q + 1]
        b1 = runs[q + 2] if q + 1 < nr else a1
        i = a0
        j = a1
        o = a0
        while i < a1 and j < b1:
            c = np.int64(0)
            for x in range(vw):
                if sv[so + j, x] != sv[so + i, x]:
                    c = -1 if sv[so + j, x] < sv[so + i, x] else 1
                    break
            if c == 0:
                c = -1 if st_[so + j] < st_[so + i] else 1
            src = j if c < 0 else i
            for x in range(vw):
                dv[do + o, x] = sv[so + src, x]
            dt[do + o] = st_[so + src]
            df[do + o] = sf[so + src]
            o += 1
            if c < 0:
                j += 1
            else:
                i += 1
        while i < a1:
            for x in range(vw):
                dv[do + o, x] = sv[so + i, x]
            dt[do + o] = st_[so + i]
            df[do + o] = sf[so + i]
            o += 1
            i += 1
        while j < b1:
            for x in range(vw):
                dv[do + o, x] = sv[so + j, x]
            dt[do + o] = st_[so + j]
            df[do + o] = sf[so + j]
            o += 1
            j += 1
        runs[w] = a0
        w += 1
        q += 2
    runs[w] = o
    return w


@njit(cache=True, nogil=True, inline="always")
def _lt_vt(vals, ts, a, b):
    for x in range(vals.shape[1]):
        if vals[a, x] != vals[b, x]:
            return vals[a, x] < vals[b, x]
    return ts[a] < ts[b]


@njit(cache=True, nogil=True)
def _ranges(data, fnc, keys, kw, lo, hi, row):
    """For sorted unique ``keys``, the row range of each in the sorted ``data``
    (written to ``lo[row]``, ``hi[row]``); see kernels.batch.key_ranges."""
    nk = keys.shape[0]
    a = np.empty(nk, np.int64)
    b = np.empty(nk, np.int64)
    key_ranges(data, fnc, keys, np.arange(nk), kw, a, b)
    for kk in range(nk):
        lo[row, kk] = a[kk]
        hi[row, kk] = b[kk]


@njit(cache=True, nogil=True)
def _sort_small(a, lo, hi):
    """Sort ``a[lo:hi]`` in place (insertion sort; np.sort for long runs)."""
    if hi - lo > 32:
        srt = np.sort(a[lo:hi])
        for i in range(hi - lo):
            a[lo + i] = srt[i]
        return
    for i in range(lo + 1, hi):
        x = a[i]
        j = i
        while j > lo and a[j - 1] > x:
            a[j] = a[j - 1]
            j -= 1
        a[j] = x


@njit(cache=True, nogil=True, inline="always")
def _move_left(vals, ts, fs, src, dst, n):
    """Move entries ``[src, src + n)`` to ``dst <= src`` (in place, front to back)."""
    if dst == src:
        return
    for q in range(n):
        for x in range(vals.shape[1]):
            vals[dst + q, x] = vals[src + q, x]
        ts[dst + q] = ts[src + q]
        fs[dst + q] = fs[src + q]


@njit(cache=True, nogil=True)
def _reduce_gather(new, spine, out_spine, pend, kw, vw, ow, k, p, share, fold, split):
    """Phase 1 of a reduce round: keys, their due outer times, histories, pending.

    Returns ``(keys, due_offs, due_t, h_offs, h_vals, h_t, h_f, o_offs, o_vals, o_t,
    o_f, new_pend, in_lo, in_hi, big)``: per key (sorted), its due outer times
    (ascending, unique), its input history at iterations ``<= k`` sorted by (val, t),
    its output history the same way, and the reduce's pending entries afterwards.

    ``split`` (needs ``share > 0``; a root min/max/top_k, see kernels.rootorder): the
    input rows in the trace of a key with more than ORDER_SMALL of them (``big[kk]``)
    are not gathered, only its new batch's: ``in_lo[b, kk]:in_hi[b, kk]`` are its
    input rows in batch ``b`` (empty for a small key; ``(0, 0)`` arrays and ``big``
    empty without ``split``).

    Batch-major: every batch is searched for all keys in one pass, then each key's rows
    are read once and copied to its slot (no per-key allocation), and the slots are
    compacted.

    ``share`` != 0: input and output history share one trace (``spine``; ``out_spine``
    is empty), so each key is looked up once per batch instead of once in each trace.
    With ``share > 0`` rows are ``(key, tag, vals)`` (tag 0 input, 1 output, padded to
    ``share`` columns); with ``share == -1`` (input and output rows of equal width) the
    rows are unchanged and an output update at iteration ``i`` is stored at ``-1 - i``
    (iterations are never negative otherwise).

    ``fold`` (``distinct`` of whole rows, ``vw == ow == 0``): a key's rows at times
    ``<= m`` (its least due time) are summed into one entry at ``m`` instead of being
    copied, sorted and walked one by one: the walk starts at ``m`` and only needs
    their sum there (the rest of the history is unchanged).
    """
    if split and share <= 0:
        raise RuntimeError("reduce: internal error: split needs a tagged shared trace")
    voff = kw + 1 if share > 0 else kw
    nd, nt, nf = new
    pd, pt, pf = pend
    n_new = nf.shape[0]
    n_pend = pf.shape[0]
    for r in range(n_new):
        if nt[r, 1] != k:
            raise RuntimeError("reduce: internal error: a new update is not at the "
                               "round's iteration")
    # 1. Keys: the union of the new batch's keys and of due pending entries' keys, each
    # with its least due outer time m.
    cap = n_new + n_pend + 1
    keys = np.empty((cap, kw), np.int64)
    kmin = np.empty(cap, np.int64)
    keep = np.ones(n_pend, np.bool_)
    nk = np.int64(0)
    i = np.int64(0)
    j = np.int64(0)
    while i < n_new or j < n_pend:
        if j < n_pend and not (pd[j, kw] == k and pt[j, 0] < p):
            j += 1
            continue
        if j >= n_pend:
            c = -1
        elif i >= n_new:
            c = 1
        else:
            c = _key_cmp(nd, i, pd, j, kw)
        m = np.int64(INF)
        if c <= 0:
            for x in range(kw):
                keys[nk, x] = nd[i, x]
            e = i
            while e < n_new and _key_cmp(nd, i, nd, e, kw) == 0:
                if nt[e, 0] < m:
                    m = nt[e, 0]
                e += 1
            i = e
        else:
            for x in range(kw):
                keys[nk, x] = pd[j, x]
        if c >= 0:
            if pt[j, 0] < m:
                m = pt[j, 0]
            keep[j] = False
            j += 1
        kmin[nk] = m
        nk += 1
    keys = keys[:nk]
    # 2. Row ranges of every key in every batch: input batches, the new batch (last
    # input source), output batches.
    nsp = len(spine)
    nso = len(out_spine)
    nsrc = nsp + 1 + nso
    lo = np.empty((nsrc, nk), np.int64)
    hi = np.empty((nsrc, nk), np.int64)
    for sidx in range(nsp):
        _ranges(spine[sidx][0], spine[sidx][3], keys, kw, lo, hi, sidx)
    in_lo = np.empty((nsp if split else 0, nk), np.int64)
    in_hi = np.empty((nsp if split else 0, nk), np.int64)
    bigk = np.zeros(nk if split else 0, np.bool_)
    if split:
        # A key's rows in a shared trace: input (tag 0), then output (tag 1). A key
        # with more than ORDER_SMALL rows in the trace is big: its input rows are left
        # where they are (in_lo:in_hi, read in place by kernels.rootorder), only its
        # output rows are gathered. A small key is gathered whole, as for any reduce.
        for sidx in range(nsp):
            for kk in range(nk):
                in_lo[sidx, kk] = hi[sidx, kk] - lo[sidx, kk]
        for kk in range(nk):
            tot = np.int64(0)
            for sidx in range(nsp):
                tot += in_lo[sidx, kk]
            bigk[kk] = tot > ORDER_SMALL
        for sidx in range(nsp):
            bd = spine[sidx][0]
            for kk in range(nk):
                a = lo[sidx, kk]
                b = hi[sidx, kk]
                in_lo[sidx, kk] = a
                if not bigk[kk]:
                    in_hi[sidx, kk] = a
                    continue
                while a < b:
                    mid = (a + b) >> 1
                    if bd[mid, kw] == 0:
                        a = mid + 1
                    else:
                        b = mid
                in_hi[sidx, kk] = a
                lo[sidx, kk] = a
    _ranges(nd, np.empty((0, 1), np.int64), keys, kw, lo, hi, nsp)
    for sidx in range(nso):
        _ranges(out_spine[sidx][0], out_spine[sidx][3], keys, kw, lo, hi, nsp + 1 + sidx)
    # 3. One pass over the rows, batch by batch (they are the cache misses, so they are
    # read once): each key's entries go to its slot in three buffers, input history and
    # output history at iterations <= k and pending candidates beyond k. A slot holds
    # the key's rows over all batches, known from the ranges without reading the rows;
    # the buffers are compacted afterwards, sequentially.
    raw = np.zeros(nk + 1, np.int64)
    for sidx in range(nsrc):
        for kk in range(nk):
            raw[kk + 1] += hi[sidx, kk] - lo[sidx, kk]
    if fold:
        # one entry per key and side is kept for the sum of the folded rows
        for kk in range(nk):
            raw[kk + 1] += 1
    for kk in range(nk):
        raw[kk + 1] += raw[kk]
    nraw = raw[nk]
    h_vals = np.empty((nraw, vw), np.int64)
    h_t = np.empty(nraw, np.int64)
    h_f = np.empty(nraw, np.int64)
    o_vals = np.empty((nraw, ow), np.int64)
    o_t = np.empty(nraw, np.int64)
    o_f = np.empty(nraw, np.int64)
    c_it = np.empty(nraw, np.int64)
    c_t = np.empty(nraw, np.int64)
    hcur = raw[:nk].copy()
    ocur = raw[:nk].copy()
    ccur = raw[:nk].copy()
    if fold:
        for kk in range(nk):
            hcur[kk] += 1
            ocur[kk] += 1
    fold_h = np.zeros(nk if fold else 0, np.int64)
    fold_o = np.zeros(nk if fold else 0, np.int64)
    nsrc_h = np.zeros(nk, np.int64)
    nsrc_o = np.zeros(nk, np.int64)
    for sidx in range(nsrc):
        if sidx < nsp:
            bd, bt, bf, _ = spine[sidx]
        elif sidx == nsp:
            bd, bt, bf = new
        else:
            bd, bt, bf, _ = out_spine[sidx - nsp - 1]
        is_out = sidx > nsp
        for kk in range(nk):
            a = lo[sidx, kk]
            b = hi[sidx, kk]
            if a == b:
                continue
            h0 = hcur[kk]
            o0 = ocur[kk]
            for r in range(a, b):
                it = bt[r, 1]
                out = is_out
                if share > 0:
                    out = out or bd[r, kw] == 1
                elif share < 0 and it < 0:
                    out = True
                    it = -1 - it
                if it <= k and fold and bt[r, 0] <= kmin[kk]:
                    if out:
                        fold_o[kk], ov = add_checked(fold_o[kk], bf[r])
                    else:
                        fold_h[kk], ov = add_checked(fold_h[kk], bf[r])
                    if ov:
                        raise OverflowError("distinct: a count overflows int64")
                elif it <= k:
                    if out:
                        q = ocur[kk]
                        for x in range(ow):
                            o_vals[q, x] = bd[r, voff + x]
                        o_t[q] = bt[r, 0]
                        o_f[q] = bf[r]
                        ocur[kk] = q + 1
                    else:
                        q = hcur[kk]
                        for x in range(vw):
                            h_vals[q, x] = bd[r, voff + x]
                        h_t[q] = bt[r, 0]
                        h_f[q] = bf[r]
                        hcur[kk] = q + 1
                else:
                    q = ccur[kk]
                    c_it[q] = it
                    c_t[q] = max(kmin[kk], bt[r, 0])
                    ccur[kk] = q + 1
            if hcur[kk] > h0:
                nsrc_h[kk] += 1
            if ocur[kk] > o0:
                nsrc_o[kk] += 1
    # 4. Compact the slots to the front (rows only move left, so in place, in order).
    h_offs = np.zeros(nk + 1, np.int64)
    o_offs = np.zeros(nk + 1, np.int64)
    c_offs = np.zeros(nk + 1, np.int64)
    for kk in range(nk):
        s0 = raw[kk]
        c_offs[kk + 1] = c_offs[kk] + (ccur[kk] - s0)
        sh = s0
        so = s0
        if fold:
            # the folded sums, if not zero, go to the entry kept at the slot's front
            # (time m: before every copied entry, all later than m)
            sh += 1
            so += 1
            if fold_h[kk] != 0:
                sh = s0
                h_t[s0] = kmin[kk]
                h_f[s0] = fold_h[kk]
            if fold_o[kk] != 0:
                so = s0
                o_t[s0] = kmin[kk]
                o_f[s0] = fold_o[kk]
        h_offs[kk + 1] = h_offs[kk] + (hcur[kk] - sh)
        o_offs[kk + 1] = o_offs[kk] + (ocur[kk] - so)
        _move_left(h_vals, h_t, h_f, sh, h_offs[kk], hcur[kk] - sh)
        _move_left(o_vals, o_t, o_f, so, o_offs[kk], ocur[kk] - so)
        d = c_offs[kk]
        if d != s0:
            for q in range(ccur[kk] - s0):
                c_it[d + q] = c_it[s0 + q]
                c_t[d + q] = c_t[s0 + q]
    nh = h_offs[nk]
    no = o_offs[nk]
    h_vals = h_vals[:nh]
    h_t = h_t[:nh]
    h_f = h_f[:nh]
    o_vals = o_vals[:no]
    o_t = o_t[:no]
    o_f = o_f[:no]
    # 5. Per key: sort histories gathered from several batches by (val, t); due times
    # are m and every history time after it.
    big = np.int64(0)
    for kk in range(nk):
        big = max(big, h_offs[kk + 1] - h_offs[kk], o_offs[kk + 1] - o_offs[kk])
    perm = np.empty(big + 1, np.int64)
    tv = np.empty((big, max(vw, ow)), np.int64)
    tt = np.empty(big, np.int64)
    tf = np.empty(big, np.int64)
    due_t = np.empty(nk + nh + no, np.int64)
    due_offs = np.zeros(nk + 1, np.int64)
    ndue = np.int64(0)
    _sort_histories(h_vals, h_t, h_f, h_offs, nsrc_h, perm, tv, tt, tf)
    _sort_histories(o_vals, o_t, o_f, o_offs, nsrc_o, perm, tv, tt, tf)
    for kk in range(nk):
        h0 = h_offs[kk]
        h1 = h_offs[kk + 1]
        o0 = o_offs[kk]
        o1 = o_offs[kk + 1]
        m = kmin[kk]
        d0 = ndue
        due_t[ndue] = m
        ndue += 1
        if vw == 0 and ow == 0:
            # both histories are sorted by time: merge the times after m
            a = h0
            while a < h1 and h_t[a] <= m:
                a += 1
            b = o0
            while b < o1 and o_t[b] <= m:
                b += 1
            while a < h1 or b < o1:
                if b >= o1 or (a < h1 and h_t[a] <= o_t[b]):
                    x = h_t[a]
                    a += 1
                else:
                    x = o_t[b]
                    b += 1
                if x != due_t[ndue - 1]:
                    due_t[ndue] = x
                    ndue += 1
            due_offs[kk + 1] = ndue
            continue
        for r in range(h0, h1):
            if h_t[r] > m:
                due_t[ndue] = h_t[r]
                ndue += 1
        for r in range(o0, o1):
            if o_t[r] > m:
                due_t[ndue] = o_t[r]
                ndue += 1
        _sort_small(due_t, d0, ndue)
        w = d0 + 1
        for r in range(d0 + 1, ndue):
            if due_t[r] != due_t[w - 1]:
                due_t[w] = due_t[r]
                w += 1
        ndue = w
        due_offs[kk + 1] = ndue
    # 6. Pending afterwards: the entries not consumed, plus the candidates, one entry per
    # (key, iteration) with the least outer time. Candidates are reduced per key (sort by
    # iteration, keep the least time), so they come out sorted by (key, iteration) and
    # are merged with the kept entries (already sorted so) without a sort.
    c_end = np.empty(nk, np.int64)
    nc = _min_per_iteration(c_offs, c_it, c_t, c_end)
    n_keep = np.int64(0)
    for r in range(n_pend):
        if keep[r]:
            n_keep += 1
    tot = n_keep + nc
    pw = kw + 1
    qd = np.empty((tot, pw), np.int64)
    qt = np.zeros((tot, 2), np.int64)
    qf = np.ones(tot, np.int64)
    o = np.int64(0)
    r = np.int64(0)
    kk = np.int64(0)
    ci = np.int64(0)     # next reduced candidate (c_offs[kk] .. c_end[kk] per key)
    while True:
        while r < n_pend and not keep[r]:
            r += 1
        while kk < nk and ci >= c_end[kk]:
            kk += 1
            if kk < nk:
                ci = c_offs[kk]
        if r >= n_pend and kk >= nk:
            break
        if r >= n_pend:
            c = np.int64(1)
        elif kk >= nk:
            c = np.int64(-1)
        else:
            c = _key_cmp(pd, r, keys, kk, kw)
            if c == 0:
                c = -1 if pd[r, kw] < c_it[ci] else (0 if pd[r, kw] == c_it[ci] else 1)
        if c <= 0:
            for x in range(pw):
                qd[o, x] = pd[r, x]
            qt[o, 0] = pt[r, 0]
            if c == 0 and c_t[ci] < pt[r, 0]:
                qt[o, 0] = c_t[ci]
            r += 1
        else:
            for x in range(kw):
                qd[o, x] = keys[kk, x]
            qd[o, kw] = c_it[ci]
            qt[o, 0] = c_t[ci]
        if c >= 0:
            ci += 1
        o += 1
    new_pend = (qd[:o], qt[:o], qf[:o])
    return (keys, due_offs, due_t[:ndue].reshape((ndue, 1)), h_offs, h_vals,
            h_t.reshape((nh, 1)), h_f, o_offs, o_vals, o_t.reshape((no, 1)), o_f, new_pend,
            in_lo, in_hi, bigk)


@njit(cache=True, nogil=True)
def _min_per_iteration(c_offs, c_it, c_t, c_end):
    """Per key segment ``c_offs[kk] .. c_offs[kk + 1]`` of candidates (iteration, time):
    sort by iteration, keep one per iteration with the least time, compacted in place
    to the segment's front, which ends at ``c_end[kk]``. Returns the number kept."""
    nk = c_offs.shape[0] - 1
    total = np.int64(0)
    for kk in range(nk):
        a = c_offs[kk]
        b = c_offs[kk + 1]
        if b - a > 1:
            _sort_pairs(c_it, c_t, a, b)
        w = a
        for r in range(a, b):
            if w > a and c_it[w - 1] == c_it[r]:
                if c_t[r] < c_t[w - 1]:
                    c_t[w - 1] = c_t[r]
                continue
            c_it[w] = c_it[r]
            c_t[w] = c_t[r]
            w += 1
        c_end[kk] = w
        total += w - a
    return total


@njit(cache=True, nogil=True)
def _sort_pairs(a, b, lo, hi):
    """Sort ``(a, b)[lo:hi]`` by ``a`` (ties in any order)."""
    if hi - lo > 32:
        idx = np.argsort(a[lo:hi], kind="mergesort")
        ta = a[lo:hi][idx]
        tb = b[lo:hi][idx]
        a[lo:hi] = ta
        b[lo:hi] = tb
        return
    _insertion_sort_pairs(a, b, lo, hi)


@njit(cache=True, nogil=True, inline="always")
def _insertion_sort_pairs(a, b, lo, hi):
    """Stable insertion sort of ``(a, b)[lo:hi]`` by ``a``, in place."""
    for i in range(lo + 1, hi):
        x = a[i]
        y = b[i]
        j = i
        while j > lo and a[j - 1] > x:
            a[j] = a[j - 1]
            b[j] = b[j - 1]
            j -= 1
        a[j] = x
        b[j] = y


@njit(cache=True, nogil=True)
def _corrections_1d(due_offs, due_t, w_offs, w_vals, w_counts, o_offs, o_vals, o_t, o_f):
    """Per key and due time (ascending), ``desired - current`` per output value.

    ``current`` accumulates the old output (sorted by (val, t)) at times ``<= t`` plus
    the corrections already emitted. Returns ``(key index, vals, t, diffs)`` sorted by
    (key, val, t).

    The work is the leaf _corrections_keys; this wrapper owns its buffers and grows
    them when it stops at a key that needs more room (the key is then redone).
    """
    ow = o_vals.shape[1]
    cap = np.int64(16)      # distinct output values of one key
    ccap = np.int64(16)     # corrections of one key
    rcap = np.int64(64)     # results
    uv = np.empty((cap, ow), np.int64)
    u_int = np.empty((7, cap + 1), np.int64)
    c_int = np.empty((4, ccap), np.int64)
    r_key = np.empty(rcap, np.int64)
    r_vals = np.empty((rcap, ow), np.int64)
    r_t = np.empty(rcap, np.int64)
    r_f = np.empty(rcap, np.int64)
    at = np.zeros(5, np.int64)
    while True:
        code = _corrections_keys(due_offs, due_t, w_offs, w_vals, w_counts, o_offs, o_vals,
                                 o_t, o_f, uv, u_int, c_int, r_key, r_vals, r_t, r_f, at)
        if code == CORR_OV_SUM:
            raise OverflowError("reduce: a sum of output counts overflows int64")
        if code == CORR_OV:
            raise OverflowError("reduce: a correction overflows int64")
        if code == 0:
            break
        if at[2] > cap:
            cap = 2 * at[2]
            uv = np.empty((cap, ow), np.int64)
            u_int = np.empty((7, cap + 1), np.int64)
        if at[3] > ccap:
            ccap = 2 * at[3]
            c_int = np.empty((4, ccap), np.int64)
        if at[4] > rcap:
            nres = at[1]
            rcap = 2 * at[4]
            r_key = _grow1(r_key, nres, rcap)
            r_vals = _grow2(r_vals, nres, rcap)
            r_t = _grow1(r_t, nres, rcap)
            r_f = _grow1(r_f, nres, rcap)
    nres = at[1]
    return r_key[:nres], r_vals[:nres], r_t[:nres], r_f[:nres]


# _corrections_keys' result codes
CORR_MORE = 1      # stopped at key at[0] (results at[1]): grow the buffers to at[2:5]
CORR_OV_SUM = 2    # a sum of output counts overflows
CORR_OV = 3        # a correction overflows


@leaf
def _corrections_keys(due_offs, due_t, w_offs, w_vals, w_counts, o_offs, o_vals, o_t, o_f,
                      uv, u_int, c_int, r_key, r_vals, r_t, r_f, at):
    """_corrections_1d from key ``at[0]`` on, the results appended from ``at[1]``.
    Scratch: ``uv`` (one key's distinct output values), ``u_int`` (7 per-value rows),
    ``c_int`` (4 per-correction rows). Returns 0 when done (``at[1]``: the result count),
    CORR_MORE with ``at[2:5]`` the sizes needed (values, corrections, results) to redo
    key ``at[0]``, or an overflow code."""
    K = due_offs.shape[0] - 1
    ow = o_vals.shape[1]
    cap = uv.shape[0]
    ccap = c_int.shape[1]
    rcap = r_key.shape[0]
    ustart = u_int[0]
    uptr = u_int[1]
    ucur = u_int[2]
    uwant = u_int[3]
    cnt = u_int[4]
    rank = u_int[5]
    uorder = u_int[6]
    cu = c_int[0]
    ct = c_int[1]
    cd = c_int[2]
    order = c_int[3]
    nres = at[1]
    for kk in range(at[0], K):
        t0 = due_offs[kk]
        t1 = due_offs[kk + 1]
        if t0 == t1:
            continue
        a0 = o_offs[kk]
        a1 = o_offs[kk + 1]
        w0 = w_offs[t0]
        w1 = w_offs[t1]
        # Distinct output values of the key: old output runs and desired values.
        need = (a1 - a0) + (w1 - w0) + 1
        if need > cap:
            return _corrections_more(at, kk, nres, need, 0, 0)
        nu = np.int64(0)
        r = a0
        while r < a1:
            e = r + 1
            while e < a1 and _row_same(o_vals, r, o_vals, e):
                e += 1
            for x in range(ow):
                uv[nu, x] = o_vals[r, x]
            ustart[nu] = r
            nu += 1
            r = e
        n_old = nu
        ustart[nu] = a1
        # desired values not among the old ones (want rows are sorted per moment)
        for wi in range(w0, w1):
            found = -1
            for u in range(nu):
                if _row_same(uv, u, w_vals, wi):
                    found = u
                    break
            if found < 0:
                for x in range(ow):
                    uv[nu, x] = w_vals[wi, x]
                nu += 1
        for u in range(nu):
            uptr[u] = ustart[u] if u < n_old else 0
            ucur[u] = 0
        ncor = np.int64(0)
        for ti in range(t0, t1):
            tau = due_t[ti, 0]
            for u in range(nu):
                uwant[u] = 0
                if u < n_old:
                    pp = uptr[u]
                    e = ustart[u + 1]
                    acc = ucur[u]
                    while pp < e and o_t[pp, 0] <= tau:
                        acc, ov = add_checked(acc, o_f[pp])
                        if ov:
                            return CORR_OV_SUM
                        pp += 1
                    uptr[u] = pp
                    ucur[u] = acc
            for wi in range(w_offs[ti], w_offs[ti + 1]):
                for u in range(nu):
                    if _row_same(uv, u, w_vals, wi):
                        uwant[u] += w_counts[wi]
                        break
            for u in range(nu):
                diff = uwant[u] - ucur[u]
                if ((uwant[u] ^ ucur[u]) & (uwant[u] ^ diff)) < 0:
                    return CORR_OV
                if diff != 0:
                    if ncor >= ccap:
                        return _corrections_more(at, kk, nres, 0, nu * (t1 - t0), 0)
                    cu[ncor] = u
                    ct[ncor] = tau
                    cd[ncor] = diff
                    ncor += 1
                    ucur[u] = uwant[u]
        if ncor == 0:
            continue
        if nres + ncor > rcap:
            return _corrections_more(at, kk, nres, 0, 0, nres + ncor)
        # Order by output value (stable: times stay ascending).
        if nu == 1:
            for i in range(ncor):
                order[i] = i
        else:
            for i in range(nu):
                uorder[i] = i
            for i in range(1, nu):
                x = uorder[i]
                j = i
                while j > 0 and _row_lt(uv, x, uorder[j - 1]):
                    uorder[j] = uorder[j - 1]
                    j -= 1
                uorder[j] = x
            for i in range(nu):
                rank[uorder[i]] = i
            for u in range(nu + 1):
                cnt[u] = 0
            for i in range(ncor):
                cnt[rank[cu[i]] + 1] += 1
            for u in range(nu):
                cnt[u + 1] += cnt[u]
            for i in range(ncor):
                rr = rank[cu[i]]
                order[cnt[rr]] = i
                cnt[rr] += 1
        for i in range(ncor):
            c = order[i]
            r_key[nres] = kk
            for x in range(ow):
                r_vals[nres, x] = uv[cu[c], x]
            r_t[nres] = ct[c]
            r_f[nres] = cd[c]
            nres += 1
    at[1] = nres
    return 0


@njit(cache=True, nogil=True, inline="always")
def _corrections_more(at, kk, nres, need_u, need_c, need_r):
    at[0] = kk
    at[1] = nres
    at[2] = need_u
    at[3] = need_c
    at[4] = need_r
    return CORR_MORE


@njit(cache=True, nogil=True, inline="always")
def _row_same(a, i, b, j):
    for x in range(a.shape[1]):
        if a[i, x] != b[j, x]:
            return False
    return True


@njit(cache=True, nogil=True, inline="always")
def _row_lt(rows, a, b):
    for x in range(rows.shape[1]):
        if rows[a, x] != rows[b, x]:
            return rows[a, x] < rows[b, x]
    return False


@njit(cache=True)
def _step_reduce(prog, st, n, p, k):
    qbase = _fld(prog, 6)
    prm = _prm(prog)
    arr = prm[n, 0]
    s_out = prm[n, 1]
    pid = prm[n, 2]
    kw = prm[n, 3]
    vw = prm[n, 4]
    ow = prm[n, 5]
    logic = prm[n, 6]
    lparam = prm[n, 7]
    s_in = prm[arr, 1]
    lst = st[0][qbase[n]]
    pend = st[5][pid]
    if len(lst) == 0:
        # Only pending times can make work: any due now?
        pd, pt, _ = pend
        any_due = False
        for r in range(pt.shape[0]):
            if pd[r, kw] == k and pt[r, 0] < p:
                any_due = True
                break
        if not any_due:
            return
        new = (np.empty((0, prm[arr, 3] if prm[n, 9] > 0 else kw + vw), np.int64),
               np.empty((0, 2), np.int64), np.empty(0, np.int64))
    elif len(lst) == 1:
        new = lst[0]
    else:
        new = lst[0]
        for x in range(1, len(lst)):
            new = merge(new, lst[x], np.int64(NEG))
    lst.clear()
    if prm[n, 8] == 1:
        _step_reduce_agg(prog, st, n, new, kw, vw, logic == L_SUM, lparam)
        return
    share = prm[n, 9]
    out_spine = st[1][s_out] if share == 0 else _EMPTY_SPINE()
    fold = logic == L_DISTINCT and vw == 0 and ow == 0
    # A root min/max (of value column 0) or top_k reads its input trace in value order
    # (kernels.rootorder). Its trace is shared with its output, rows (key, tag, vals)
    # (see ddnumba.native): the gather finds each key's input rows in every batch but
    # gathers only the new batch's, and the output history, which also tells the walk
    # where to start (past the rows it says are gone).
    ordered = prm[n, 8] == 2
    (keys, due_offs, due_t, h_offs, h_vals, h_t, h_f, o_offs, o_vals, o_t, o_f,
     new_pend, in_lo, in_hi, big) = _reduce_gather(new, st[1][s_in], out_spine, pend, kw,
                                                   vw, ow, k, p, share, fold, ordered)
    st[5][pid] = new_pend
    if due_t.shape[0] == 0:
        return
    if ordered:
        mode = O_MIN if logic == L_MIN else (O_MAX if logic == L_MAX else O_TOP_K)
        w_offs, w_vals, w_counts, nw, _ = ordered_want(st[1][s_in], in_lo, in_hi, big,
                                                       kw + 1, vw, due_offs, due_t, h_offs,
                                                       h_vals, h_t, h_f, o_offs, o_vals,
                                                       o_f, mode, lparam)
        ck, cv, ct, cf = _corrections_1d(due_offs, due_t, w_offs, w_vals[:nw],
                                         w_counts[:nw], o_offs, o_vals, o_t, o_f)
        _reduce_emit(prog, st, n, keys, ck, cv, ct, cf, kw, ow, k, s_out)
        return
    if logic == L_DISTINCT and vw == 0:
        ck, ct, cf = _distinct_walk(due_offs, due_t, h_offs, h_t, h_f, o_offs, o_t, o_f)
        cv = np.empty((cf.shape[0], 0), np.int64)
        _reduce_emit(prog, st, n, keys, ck, cv, ct, cf, kw, ow, k, s_out)
        return
    mom_offs, acc_vals, acc_counts, na, over = _accumulate(due_offs, due_t, h_offs, h_vals,
                                                           h_t, h_f)
    if over:
        raise OverflowError("reduce: a sum of input diffs overflows int64")
    acc_vals = acc_vals[:na]
    acc_counts = acc_counts[:na]
    if logic == L_COUNT:
        w_offs, w_vals, w_counts, nw, over = _logic_count(mom_offs, acc_counts)
        if over:
            raise OverflowError("count: a sum of counts overflows int64")
    elif logic == L_SUM:
        w_offs, w_vals, w_counts, nw, over = _logic_sum(mom_offs, acc_vals, acc_counts, lparam)
        if over:
            raise OverflowError("sum: a sum of values times counts overflows int64")
    elif logic == L_MIN or logic == L_MAX:
        w_offs, w_vals, w_counts, nw = _logic_extreme(mom_offs, acc_vals, acc_counts, lparam,
                                                      logic == L_MAX)
    elif logic == L_DISTINCT:
        w_offs, w_vals, w_counts, nw = _logic_top_k(mom_offs, acc_vals, acc_counts, I0,
                                                    BTRUE)
    elif logic == L_TOP_K:
        w_offs, w_vals, w_counts, nw = _logic_top_k(mom_offs, acc_vals, acc_counts, lparam,
                                                    BFALSE)
    else:
        w_offs, w_vals, w_counts = _cb_logic(n, mom_offs, acc_vals, acc_counts)
        nw = w_counts.shape[0]
    ck, cv, ct, cf = _corrections_1d(due_offs, due_t, w_offs, w_vals[:nw], w_counts[:nw],
                                     o_offs, o_vals, o_t, o_f)
    _reduce_emit(prog, st, n, keys, ck, cv, ct, cf, kw, ow, k, s_out)


@njit(cache=True, nogil=True)
def _EMPTY_SPINE():
    return List.empty_list(SBATCH_TYPE)


@njit(cache=True, nogil=True)
def _reduce_emit(prog, st, n, keys, ck, cv, ct, cf, kw, ow, k, s_out):
    """Corrections (key index, out values, outer time, diff) at iteration ``k`` as a
    batch: inserted into the output trace (tagged 1 when the trace is shared with the
    input, see _reduce_gather) and emitted."""
    m = cf.shape[0]
    if m == 0:
        return
    data = np.empty((m, kw + ow), np.int64)
    times = np.empty((m, 2), np.int64)
    for r in range(m):
        for x in range(kw):
            data[r, x] = keys[ck[r], x]
        for x in range(ow):
            data[r, kw + x] = cv[r, x]
        times[r, 0] = ct[r]
        times[r, 1] = k
    out = (data, times, cf)
    prm = _prm(prog)
    if prm[n, 9] > 0:
        _spine_insert(st[1][s_out], _tag_rows(out, kw, prm[n, 9], np.int64(1)),
                      st[3][s_out], st[9], s_out)
    elif prm[n, 9] < 0:
        # Shared trace, equal widths: output updates at iteration -1 - k.
        st_times = times.copy()
        for r in range(m):
            st_times[r, 1] = -1 - k
        _spine_insert(st[1][s_out], (data, st_times, cf), st[3][s_out], st[9], s_out)
    else:
        _spine_insert(st[1][s_out], out, st[3][s_out], st[9], s_out)
    _emit(prog, st, n, out)


@njit(cache=True, nogil=True)
def _distinct_walk(due_offs, due_t, h_offs, h_t, h_f, o_offs, o_t, o_f):
    """``distinct`` of whole rows (no value columns), fused: per key, walk its due
    times with one pointer into the input history and one into the output history
    (both sorted by time); the desired count is 1 when the input count is positive.
    Returns ``(key index, t, diff)`` sorted by (key, t)."""
    K = due_offs.shape[0] - 1
    cap = due_t.shape[0]
    rk = np.empty(cap, np.int64)
    rt_ = np.empty(cap, np.int64)
    rf = np.empty(cap, np.int64)
    nres = np.int64(0)
    for kk in range(K):
        ph = h_offs[kk]
        h1 = h_offs[kk + 1]
        po = o_offs[kk]
        o1 = o_offs[kk + 1]
        acc_in = np.int64(0)
        acc_out = np.int64(0)
        for d in range(due_offs[kk], due_offs[kk + 1]):
            tau = due_t[d, 0]
            while ph < h1 and h_t[ph, 0] <= tau:
                acc_in, ov = add_checked(acc_in, h_f[ph])
                if ov:
                    raise OverflowError("distinct: a count overflows int64")
                ph += 1
            while po < o1 and o_t[po, 0] <= tau:
                acc_out, ov = add_checked(acc_out, o_f[po])
                if ov:
                    raise OverflowError("distinct: a count overflows int64")
                po += 1
            want = np.int64(1) if acc_in > 0 else np.int64(0)
            if want != acc_out:
                diff = want - acc_out
                if ((want ^ acc_out) & (want ^ diff)) < 0:
                    raise OverflowError("distinct: a correction overflows int64")
                rk[nres] = kk
                rt_[nres] = tau
                rf[nres] = diff
                nres += 1
                acc_out = want
    return rk[:nres], rt_[:nres], rf[:nres]


@njit(cache=True, nogil=True)
def _step_reduce_agg(prog, st, n, new, kw, vw, is_sum, col):
    """A count, sum or distinct outside loops: its hashed state is st[11][prm[n, 1]]
    (kernels.rootagg)."""
    h = _prm(prog)[n, 1]
    tab, arena, meta = st[11][h]
    if _prm(prog)[n, 6] == L_DISTINCT:
        tab, d, t, f = distinct_step(tab, meta, new[0], new[1], new[2])
    else:
        tab, arena, d, t, f = agg_step(tab, arena, meta, new[0], new[1], new[2], kw, vw,
                                       is_sum, col)
    st[11][h] = (tab, arena, meta)
    if f.shape[0]:
        _emit(prog, st, n, (d, t, f))


@njit(cache=True, nogil=True)
def _pend_min_iter(st, pid, kw, p):
    best = np.int64(INF)
    pd, pt, _ = st[5][pid]
    for r in range(pt.shape[0]):
        if pt[r, 0] < p and pd[r, kw] < best:
            best = pd[r, kw]
    return best


# ----------------------------------------------------------------------------- scheduling


@njit(cache=True)
def _step(prog, st, n, p, q, k):
    kind = _fld(prog, 0)[n]
    in_offs = _fld(prog, 1)
    qbase = _fld(prog, 6)
    nin = np.int64(0)
    for port in range(max(1, in_offs[n + 1] - in_offs[n])):
        for b in st[0][qbase[n] + port]:
            nin += b[2].shape[0]
    if nin:
        st[10][n, 0] += 1
        st[10][n, 1] += nin
    elif kind == K_ARRANGE:
        if len(st[4][_prm(prog)[n, 2]]) == 0:
            return      # nothing queued, nothing held
    elif kind == K_REDUCE:
        if st[5][_prm(prog)[n, 2]][2].shape[0] == 0:
            return      # nothing queued, nothing pending
    else:
        return          # the other operators only act on queued input
    if kind == K_ARRANGE:
        _step_arrange(prog, st, n, p, q, k)
    elif kind == K_JOIN:
        _step_join(prog, st, n)
    elif kind == K_REDUCE:
        _step_reduce(prog, st, n, p, k)
    else:
        _step_linear(prog, st, n, kind)


@njit(cache=True, nogil=True)
def _next_round(prog, st, l, p, kmin):
    """Least iteration >= kmin with work at outer times < p in loop ``l``; -1 if none."""
    order_offs = _fld(prog, 10)
    order = _fld(prog, 11)
    qbase = _fld(prog, 6)
    in_offs = _fld(prog, 1)
    prm = _prm(prog)
    kinds = _fld(prog, 0)
    best = np.int64(INF)
    for x in range(order_offs[l], order_offs[l + 1]):
        n = order[x]
        kind = kinds[n]
        nports = in_offs[n + 1] - in_offs[n]
        for port in range(nports):
            for b in st[0][qbase[n] + port]:
                t = b[1]
                for r in range(t.shape[0]):
                    if t[r, 0] < p and t[r, 1] < best:
                        best = t[r, 1]
        if kind == K_ARRANGE:
            v = _held_min_iter(st, prm[n, 2], p)
            if v < best:
                best = v
        elif kind == K_REDUCE:
            v = _pend_min_iter(st, prm[n, 2], prm[n, 3], p)
            if v < best:
                best = v
    if best == INF:
        return -1
    return max(best, kmin)


@njit(cache=True, nogil=True)
def _loop_frontier(prog, st, l):
    """P: the least frontier of the operators loop ``l``'s enters read from."""
    in_offs = _fld(prog, 1)
    in_src = _fld(prog, 2)
    enter_offs = _fld(prog, 12)
    enters = _fld(prog, 13)
    nf = st[7]
    p = np.int64(INF)
    for x in range(enter_offs[l], enter_offs[l + 1]):
        e = enters[x]
        for y in range(in_offs[e], in_offs[e + 1]):
            v = nf[in_src[y]]
            if v < p:
                p = v
    return p


@njit(cache=True, nogil=True)
def _loop_done(prog, st, l, p):
    """Loop ``l`` has no work left below P = ``p``: its operators' frontiers move to
    ``p``, which is also the next run's lower bound Q."""
    order_offs = _fld(prog, 10)
    order = _fld(prog, 11)
    for x in range(order_offs[l], order_offs[l + 1]):
        st[7][order[x]] = p
    if p != INF:
        st[8][l] = p


@njit(cache=True)
def _run_loop(prog, st, l):
    """Run loop ``l``'s rounds until no work remains at outer times < P."""
    order_offs = _fld(prog, 10)
    order = _fld(prog, 11)
    maxit = _fld(prog, 14)
    spines_offs = _fld(prog, 15)
    spines = _fld(prog, 16)
    info = st[9]
    since = st[3]
    p = _loop_frontier(prog, st, l)
    q = st[8][l]           # the previous run's P
    my_spines = spines[spines_offs[l + 1]:spines_offs[l + 2]]
    k = _next_round(prog, st, l, p, np.int64(0))
    while k >= 0:
        if maxit[l] >= 0 and k >= maxit[l]:
            info[0] = l
            info[1] = k
            return ITERATION_LIMIT
        if maxit[l] < 0 and loop_call_due(info, l, k):
            _cb_warn(l, k)
        for x in range(order_offs[l], order_offs[l + 1]):
            _step(prog, st, order[x], p, q, k)
        _flush(prog, st, my_spines)
        info[2] += 1
        k = _next_round(prog, st, l, p, k + 1)
    # Settled: nothing in flight below p. Traces may now compact to p.
    for s in my_spines:
        if p > since[s] and p != INF:
            since[s] = p
        _settle(st, s, np.int64(SETTLE_RATIO))
    _loop_done(prog, st, l, p)
    return OK

# ------------------------------------------------------------------ sequential loops
#
# A loop whose body uses only native operators and built-in reduce logic (see
# ddnumba.native) runs *sequentially* (kernels.seqloop): the run's outer times one
# after another, each to its fixed point, over hashed state that holds every trace
# fully compacted. Here: take the loop's entered updates that are due, hand them to
# the loop sorted by time, and pass what its leaves collected on to the root scope.
# Its state: st[11][l] the hashed traces (table, arena, counters), st[12][l] the loop
# program and its counters (seqloop's ``cn``), st[13][l] the buffers.


@njit(cache=True)
def _seq_enter_due(st, qid, w, p):
    """Take the updates queued at enter queue ``qid``: those at outer times < p sorted
    by time (stably), the others left queued."""
    lst = st[0][qid]
    if len(lst) == 0:
        return (np.empty((0, w), np.int64), np.empty((0, 2), np.int64),
                np.empty(0, np.int64))
    u = concat_batches(lst, w) if len(lst) != 1 else lst[0]
    lst.clear()
    t = u[1]
    m = u[2].shape[0]
    nd = np.int64(0)
    for r in range(m):
        if t[r, 0] < p:
            nd += 1
    if nd < m:
        fd = np.empty((m - nd, w), np.int64)
        ft = np.empty((m - nd, 2), np.int64)
        ff = np.empty(m - nd, np.int64)
        c = np.int64(0)
        for r in range(m):
            if t[r, 0] >= p:
                _copy_upd(u, r, fd, ft, ff, c)
                c += 1
        lst.append((fd, ft, ff))
    idx = np.empty(nd, np.int64)
    tv = np.empty(nd, np.int64)
    a = np.int64(0)
    for r in range(m):
        if t[r, 0] < p:
            idx[a] = r
            tv[a] = t[r, 0]
            a += 1
    order = np.argsort(tv, kind="mergesort")
    dd = np.empty((nd, w), np.int64)
    dt = np.zeros((nd, 2), np.int64)
    df = np.empty(nd, np.int64)
    for a in range(nd):
        r = idx[order[a]]
        for c in range(w):
            dd[a, c] = u[0][r, c]
        dt[a, 0] = t[r, 0]
        df[a] = u[2][r]
    return (dd, dt, df)


@njit(cache=True, inline="always")
def _run_loop_seq(prog, st, l):
    """Run loop ``l`` sequentially over the outer times < P of its entered updates.
    Returns OK or ITERATION_LIMIT.

    Inlined into ``run``, its one caller: Numba optimizes a compiled function together
    with every function it calls, linked into one module, and emits machine code for
    all of it, so as a function of its own this would optimize and emit the code of
    ``seqloop.run_times`` once more (~13 s of a cold compile's CPU, after the compile
    helper has finished: sixty-third session, HISTORY). The operators' steps under
    ``_step`` have the same shape, but inlined there they made round-wise loops
    slower (0.89x in ``bench ab``, every pair slower)."""
    enter_offs = _fld(prog, 12)
    enters = _fld(prog, 13)
    qbase = _fld(prog, 6)
    prm = _prm(prog)
    p = _loop_frontier(prog, st, l)
    ups = List.empty_list(BATCH_TYPE)
    total = np.int64(0)
    for x in range(enter_offs[l], enter_offs[l + 1]):
        e = enters[x]
        u = _seq_enter_due(st, qbase[e], prm[e, 1], p)
        total += u[2].shape[0]
        ups.append(u)
    status = OK
    if total:
        times = np.empty(total, np.int64)
        o = np.int64(0)
        for u in ups:
            tt = u[1]
            for r in range(tt.shape[0]):
                times[o] = tt[r, 0]
                o += 1
        times = np.unique(times)
        tab, arena, meta = st[11][l]
        lp, cn = st[12][l]
        bufs = st[13][l]
        status, tab, arena = seq_run_times(lp, bufs, cn, tab, arena, meta, ups, times,
                                           st[10], st[9])
        ups.clear()
        # buffers a large run grew (a load) are not kept for the small runs after it;
        # the empty ones go first, before the leaves' rows are copied out
        for x in range(len(bufs)):
            if seq_buf_count(cn, x) == 0 and bufs[x].shape[0] > 65536:
                seq_put_buf(bufs, cn, x, np.empty((16, bufs[x].shape[1]), np.int64))
        tab, arena = _hs_gc(tab, arena, meta)
        st[11][l] = (tab, arena, meta)
        # what the leaves collected: (iteration, diff, data, t) rows, to the root scope
        nodes = seq_nodes(lp)
        for ln in range(nodes.shape[0]):
            if nodes[ln, 0] != SEQ_LEAVE:
                continue
            q = nodes[ln, 3]
            n = seq_buf_count(cn, q)
            if n == 0:
                continue
            buf = bufs[q]
            # (consolidated here, where nothing else holds the rows, so that their
            # memory goes back as the sort proceeds: the leave's step finds them flat;
            # it is counted as receiving every row. Rows that cancel out queue nothing:
            # the step takes no empty batch, which would stay queued.)
            d, tt, f = seq_leave_rows(buf, n, nodes[ln, 2], _hs_move_step(buf))
            b = consolidate_dead(d, tt, f)
            st[10][nodes[ln, 1], 1] += n - b[2].shape[0]
            if b[2].shape[0]:
                st[0][qbase[nodes[ln, 1]]].append(b)
            seq_set_buf_count(cn, q, 0)
            if buf.shape[0] > 65536:
                seq_put_buf(bufs, cn, q, np.empty((16, buf.shape[1]), np.int64))
    if status != OK:
        return status
    _loop_done(prog, st, l, p)
    return OK


@njit(cache=True)
def run(prog, st, in_frontiers):
    """One ``Dataflow.run()``: a pass over the root scope (loops run their rounds when
    the pass reaches them). Returns a status code (``OK`` or ``ITERATION_LIMIT``)."""
    kinds = _fld(prog, 0)
    in_offs = _fld(prog, 1)
    in_src = _fld(prog, 2)
    prm = _prm(prog)
    root = _fld(prog, 9)
    spines_offs = _fld(prog, 15)
    spines = _fld(prog, 16)
    spine_nodes_offs = _fld(prog, 17)
    spine_nodes = _fld(prog, 18)
    nf = st[7]
    since = st[3]
    for x in range(root.shape[0]):
        n = root[x]
        kind = kinds[n]
        if kind == K_INPUT:
            nf[n] = in_frontiers[prm[n, 0]]
        elif kind != K_LOOP:
            f = np.int64(INF)
            for y in range(in_offs[n], in_offs[n + 1]):
                v = nf[in_src[y]]
                if v < f:
                    f = v
            nf[n] = f
        if kind == K_LOOP:
            if prm[n, 1] == 1:
                status = _run_loop_seq(prog, st, np.int64(prm[n, 0]))
            else:
                status = _run_loop(prog, st, np.int64(prm[n, 0]))
            if status != OK:
                return status
        else:
            _step(prog, st, n, nf[n], np.int64(INF), np.int64(0))
    root_spines = spines[spines_offs[0]:spines_offs[1]]
    # Compaction frontiers of root traces: the least frontier among their readers.
    # Every reader has taken this pass's updates, so the batches arranged in it can be
    # compacted as they are inserted (not one pass later, when they would already have
    # been merged into larger batches uncompacted).
    for s in root_spines:
        f = np.int64(INF)
        for y in range(spine_nodes_offs[s], spine_nodes_offs[s + 1]):
            v = nf[spine_nodes[y]]
            if v < f:
                f = v
        if f != INF and f > since[s]:
            since[s] = f
    _flush(prog, st, root_spines)
    ratio = st[9][6] if st[9][6] > 0 else ROOT_SETTLE_RATIO
    for s in root_spines:
        _settle(st, s, ratio)
    return OK

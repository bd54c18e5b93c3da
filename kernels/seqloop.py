"""Sequential loops: a loop run one outer time after another, over hashed state.

The round-wise runtime (:mod:`ddnumba.kernels.runtime`) runs a loop's rounds over
all the outer times of a run at once: inside the run those times stay distinct, so
each round re-reads every key's history of the whole run, and the traces only
compact once the run is over. This module runs a loop instead *one outer time at a
time*, each to its fixed point. Every update seen before is then at an outer time no
later than the current one, and no time still to be processed can tell those apart:
compacted, a trace is, per key, a short list of entries ``(vals, iteration, diff)``
(:mod:`ddnumba.kernels.hstate`), never longer than the key's distinct iterations.
Both orders visit the same lattice of ``(time, iteration)`` and produce the same
updates at the same times.

The loop program. :mod:`ddnumba.native` compiles a loop into *local nodes* in
schedule order -- enters, arrangements, joins, reduces, consolidates and feedbacks,
plus the leaves that take its results out -- and *routes*: the linear operators
between them (projections, concatenations, negations, maps that add columns or
constants, ``lambda n, k, d: (d, k + 1)``, and filters comparing such sums) fold into
a route from an emitting node to a *sink* (an arrangement, consolidate, feedback or
leave), a column map (each column a source column or a sum, R_AFF; the filters'
comparisons, kernels.affine) with a sign and an iteration shift.
A feedback is folded into the routes through it (+1 to their shift) unless its rows
reach another feedback; such a feedback stays a sink (+1 into it). Emitting writes each route's rows into its sink's queue; nothing
else happens between stateful operators.

Buffers. Every queue and scratch area is a 2-D int64 buffer of rows ``(iteration,
diff, data...)`` (a leave's rows also carry the outer time last), with a row count
and, for queues, the least iteration queued. Buffers grow and are reused from run to
run: a round allocates nothing in the common case.

A round ``j`` of outer time ``t`` steps the local nodes in order:

* an *arrangement* takes its queued rows at iteration ``j`` into its *delta*, sorted
  by data and consolidated. When its only reader is a reduce or a join (whose other
  input is also its own), that reader inserts the delta into the trace; otherwise
  it is inserted when the round ends, after every reader has read the trace. The
  delta of a value-less ``distinct`` / ``top_k``'s own arrangement is neither sorted
  nor consolidated (``FUSED_UNSORTED``): that reduce takes the rows as they were
  queued, one at a time (below);
* a *join* pairs ``dL x R + L x dR + dL x dR`` (``L``, ``R`` before the round); a
  delta update at ``j`` meets a trace entry at iteration ``i`` at ``max(j, i)``, so
  pairs with entries of later iterations are queued for later rounds. A join that
  owns both its arrangements inserts ``dL`` into ``L`` before pairing ``dR`` with
  ``L`` (the ``dL x dR`` pairs come with it), pairing and inserting ``dL`` in one
  walk over its keys (:func:`_pairs_insert`);
* a *reduce* evaluates every key of its arrangement's delta and every key scheduled
  for ``j``: the input accumulated at iterations ``<= j`` goes through the logic and
  the output accumulated at ``<= j`` is corrected to it, at ``j``. A key evaluated at
  ``j`` must be evaluated again at every later iteration of its input or output
  history (the joins of ``(t, j)`` with history times ``(s, i)``, ``s <= t``, are
  ``(t, max(i, j))``): it is scheduled for the least such iteration only, and that
  evaluation schedules the next. A stamp per key (the round's epoch) makes each key
  evaluated once a round. Built-in logic only (``count``, ``sum``, ``min``, ``max``,
  ``distinct``, ``top_k``, the conventions of :mod:`ddnumba.kernels.reduce`). A
  value-less ``distinct`` or ``top_k`` (a count per key, the output a function of it)
  keeps no output at all: its output at every iteration is that function of its input
  there, so the corrections for a delta at ``j`` -- at ``j`` and at each later
  iteration of the input history -- come from one walk over the input history. When
  it alone reads its arrangement it takes the delta unsorted, one walk per row: a
  key's rows correct it in turn, each against the history the ones before it left,
  and their corrections add up to those of the rows' sum (sorting a round's rows cost
  more than the extra walks: HISTORY, thirty-third session);
* a *consolidate*, or a *feedback* kept as a node (one whose rows reach another
  feedback; the others are folded into routes), takes its rows at ``j``,
  consolidates them and emits them.

The time is done when no queue holds anything; the next round is the least iteration
queued. A loop that keeps changing hits its ``max_iterations`` (the executor reports
it) or, without one, warns once past iteration 10,000.

The steps are *leaf* kernels (:func:`ddnumba.kernels.rows.leaf`: no reference
counting, no allocation), down to the per-key work, and read the buffer list without
taking references (:func:`ddnumba.kernels.rows.list_item`). When a buffer, the table or
the arena is too small, a step stops before the key (or the row group, or the emit)
that needs it and returns a *request*; ``run_times`` grows what was asked for
(:func:`_serve`) and calls the step again, which resumes at its stage and position.
The round loop itself is a leaf (:func:`_rounds`), returning to ``run_times`` only
for a request (or a warning, the iteration limit, and big-buffer hygiene), so a time's
rounds take and drop no references unless something has to grow.
"""
import numpy as np
from numba import njit

from . import affine as _aff
from .affine import passes as _passes, term as _aterm
from .batch import sort_consolidate
from .hooks import _cb_warn, loop_call_due, release_rows
from .hstate import (M_EPOCH, M_TOP, OVERFLOW, RW_EXTRA, _block_add, _block_need,
                     _find, _ins_apply, _new_row, blen, block_add, ensure_entries,
                     ensure_rows, flat_add, flat_history, flat_len, flat_need,
                     insert_from, rows_room)
from .hstate import PF_AHEAD, _move_rows, _move_step, _pf_block, _pf_on, _pf_slot
from .hstate import _same_key as _same
from .reduce import L_COUNT, L_DISTINCT, L_MAX, L_MIN, L_SUM, L_TOP_K
from .rows import (BFALSE, BTRUE, I0, add_checked, leaf, list_item, list_leaf,
                   mul_checked)

__all__ = ["run_times", "leave_rows", "new_counters", "buf_count", "set_buf_count",
           "put_buf", "pack", "pack_fields", "NPW", "RTW"]

INF = np.iinfo(np.int64).max
I64_MIN = np.iinfo(np.int64).min

# Local node kinds.
S_ENTER = 0
S_ARRANGE = 1
S_JOIN = 2
S_REDUCE = 3
S_CONSOL = 4
S_FEEDBACK = 5
S_LEAVE = 6

# Node parameters (columns of the node matrix).
P_KIND = 0
P_NODE = 1      # global node id (statistics)
P_W = 2         # row width: input data (arrange, consolidate, feedback, enter, leave),
                # output data (join, reduce)
P_Q = 3         # queue buffer (arrange, consolidate, feedback; reduce: scheduled keys;
                # leave: its output)
P_D = 4         # delta buffer (arrange, consolidate, feedback), output scratch (join,
                # reduce), staging (enter)
P_ROFF = 5      # first route
P_RN = 6        # number of routes
# arrange
P_TAG = 7       # trace tag
P_KW = 8        # key width
P_FUSED = 9     # 1: its reader inserts the delta (else the round's end); FUSED_UNSORTED:
                # and that reader, a value-less distinct / top_k, takes the delta's
                # rows as they were queued (see _reduce_keys), unsorted
FUSED_UNSORTED = 2
# join
P_LEFT = 7      # local id of the left arrangement
P_RIGHT = 8
P_JKW = 9
P_JFUSED = 10   # 1: the join inserts both deltas
# reduce
P_ARR = 7       # local id of the arrangement
P_TAG_IN = 8
P_TAG_OUT = 9
P_BLK = 10      # block of the output (1: same row as the input, the reduce inserts
                # the arrangement's delta)
P_RKW = 11
P_VW = 12
P_OW = 13
P_LOGIC = 14
P_LPARAM = 15
P_SCHED = 16    # scratch: the keys scheduled for this round
P_ACC = 17      # scratch: accumulated input (count, vals)
P_DES = 18      # scratch: desired output (count, vals)
P_CUR = 19      # scratch: current output (count, vals)
# enter
P_ENTER = 7     # index of the enter's updates in the run's list
NPW = 20

# Route parameters.
R_SINK = 0      # local id of the sink
R_SIGN = 1      # +1 or -1
R_SHIFT = 2     # added to the iteration
R_POFF = 3      # projection: columns (of the emitted data) at proj[POFF:POFF + PLEN]
R_PLEN = 4
R_COFF = 5      # the linear nodes whose statistics the route counts: CLEN triples at
R_CLEN = 6      # chain[COFF:], the node and the filters (R_AFF) a row has passed
                # before it and after it
R_BUF = 7       # the sink's queue buffer
R_LEAVE = 8     # 1: the sink is a leave (rows carry the outer time)
R_AFF = 9       # 0: proj holds a column a column (a projection); 1: kernels.affine's
                # words, AFW a column (the maps passed add columns or constants), then
                # the filters passed
RTW = 10

# The terms of a route with R_AFF: kernels.affine's words, over the emitted data.
A_WRAP, A_CHECKED, AFW = _aff.A_WRAP, _aff.A_CHECKED, _aff.AFW
CMP_LT, CMP_LE, CMP_GT, CMP_GE, CMP_EQ, CMP_NE = (
    _aff.CMP_LT, _aff.CMP_LE, _aff.CMP_GT, _aff.CMP_GE, _aff.CMP_EQ, _aff.CMP_NE)
MAP_OVERFLOW = _aff.MAP_OVERFLOW

# Program fields.
F_NODES = 0
F_ROUTES = 1
F_PROJ = 2
F_CHAIN = 3
F_QUEUES = 4    # buffers whose least iteration decides the next round
F_MISC = 5      # [loop index, max iterations (-1: none), IDLE_BIG_WORDS]
N_FIELDS = 6

# Leaf return codes.
DONE = 0
NEED_SCRATCH = -2
NEED_OUT = -3
NEED_ARENA = -4
OVF_IN = -5        # a sum of input diffs
OVF_LOGIC = -6     # count / sum
OVF_CORR = -7      # a correction
OVF_PAIR = -8      # a join product
NEED_ROWS = -13    # a table row (_pairs_insert)

# A loop's counters: one int64 array ``cn``, kept from run to run. Numba takes and
# drops a reference to every array a compiled function is given (and to every array in
# a tuple it is given), and a round calls ~20 steps: the steps take the program ``lp``,
# the node matrix, the buffer list and ``cn``, not ten arrays each. ``cn`` holds
# scratch counters (so that steps allocate nothing), then for each buffer ``x`` its
# row count, least queued iteration and size in words at ``C_BUF + 3 * x`` (see
# ``_bn``, ``_bmin``, ``_bwords``), then the steps' statistics since the last run
# returned, 4 per node of the dataflow (``kernels.runtime``'s ``stats``), from
# ``cn[SC_STATS]``.
SC_NC = 0       # reduce: corrections written (1)
SC_QC = 1       # reduce: schedule count, least iteration, keys evaluated (3)
SC_POS = 4      # reduce: resume position, amount needed (2)
SC_TAKE = 6     # _take: rows moved, rows left, least iteration left (3)
SC_JPOS = 9     # join: resume row, rows needed, count so far (3)
SC_BIG = 12     # IDLE_BIG_WORDS of the loop (1)
SC_NBIG = 13    # buffers of IDLE_BIG_WORDS or more (1)
SC_STATS = 14   # where the statistics start (1)
SC_STAGE = 15   # the stage a step resumes at (1)
SC_JO = 16      # join: output rows so far (1)
SC_REQ = 17     # a step's request: its arguments (6)
SC_J = 23       # _rounds: the round (iteration; -1: the time is done) (1)
SC_LN = 24      # _rounds: the local node it is at (1)
SC_PH = 25      # _rounds: the part of the round it is in (PH_START...) (1)
SC_SUB = 26     # _rounds: 0 node not begun, 1 in its step, 2 its step done (1)
SC_LEN = 27
C_BUF = SC_LEN

# Requests of a step to run_times (negative, apart from the leaf codes above). The
# steps are leaf kernels: they never allocate nor replace a buffer, the table or the
# arena. When one lacks room they return a request, with nothing of the unit of work
# it stopped at done; run_times serves it (_serve) and calls the step again, which
# resumes at its stage (cn[SC_STAGE]) and position. Arguments in cn[SC_REQ:].
RQ_GROW = -20      # grow buffer a to b rows, keeping its first c
RQ_SCRATCH = -21   # grow the three scratch buffers of reduce node a to b rows
RQ_ROWS = -22      # table room for a new rows
RQ_ARENA = -23     # arena room for a entries
RQ_INSERT = -24    # insert rows b..c of buffer a into trace d (key width e, vals f)
RQ_CONSOL = -25    # consolidate the b rows of buffer a (data width c)
RQ_PAST = -26      # internal error: a queued update at an iteration already past
OVF_NEG = -9       # a route's negation of -2**63
OVF_ARR = -10      # an arrangement's diff sum
OVF_CONS = -11     # a consolidation's diff sum
OVF_MAP = -12      # a route's checked sum (A_CHECKED)

# What else _rounds returns to run_times (the node is cn[SC_LN]); it resumes where
# it stopped (cn[SC_PH], cn[SC_SUB]).
R_LIMIT = -30      # the round reached max_iterations (info[0:2] set)
R_WARN = -31       # past iteration 10,000 without a limit: call the warning hook
                   # (it warns once per loop; see hooks.loop_call_due)
R_FIT_PRE = -32    # some buffer is big: fit the node's buffers before its step
R_FIT_POST = -33   # ... and after it (_fit_node)
R_IDLE = -34       # ... give back an idle node's big empty buffers (_drop_idle)

# The parts of a round (cn[SC_PH]).
PH_START = 0       # its checks
PH_STEPS = 1       # the nodes' steps
PH_INSERTS = 2     # the deltas of arrangements not inserted by their reader

# Status codes (as kernels.runtime).
OK = 0
ITERATION_LIMIT = 1


def pack_fields(fields):
    """Pack arrays into one int64 array: a header of ``len(fields) + 1`` offsets, then
    the fields flattened (field ``i`` is ``a[a[i]:a[i + 1]]``). One array instead of a
    tuple keeps compiled signatures small (see kernels.runtime)."""
    n = len(fields)
    flat = [np.ascontiguousarray(f, dtype=np.int64).reshape(-1) for f in fields]
    offs = np.zeros(n + 1, np.int64)
    pos = n + 1
    for i, f in enumerate(flat):
        offs[i] = pos
        pos += f.shape[0]
    offs[n] = pos
    return np.ascontiguousarray(np.concatenate([offs] + flat))


def pack(fields):
    """Pack the loop program's arrays (in field order) into one int64 array."""
    assert len(fields) == N_FIELDS
    return pack_fields(fields)


@njit(cache=True, nogil=True, inline="always")
def _fld(lp, i):
    return lp[lp[i]:lp[i + 1]]


@njit(cache=True, nogil=True, inline="always")
def _nodes(lp):
    a = lp[lp[F_NODES]:lp[F_NODES + 1]]
    return a.reshape((a.shape[0] // NPW, NPW))


@njit(cache=True, nogil=True, inline="always")
def _routes(lp):
    """The route matrix of program ``lp`` (for reading it: the steps index ``lp``)."""
    a = lp[lp[F_ROUTES]:lp[F_ROUTES + 1]]
    return a.reshape((a.shape[0] // RTW, RTW))


@njit(cache=True, nogil=True, inline="always")
def _cmp(a, i, ca, b, j, cb, w):
    for c in range(w):
        x = a[i, ca + c]
        y = b[j, cb + c]
        if x < y:
            return -1
        if x > y:
            return 1
    return 0


# --------------------------------------------------------------------------- buffers


@njit(cache=True, nogil=True, inline="always")
def _buf(bufs, x):
    """Buffer ``x``, for the code that grows or replaces buffers (the steps, leaves,
    read them with ``list_item``). Its index comes from the program, so the list's
    bounds check is left out (a checked read costs two calls into Numba's C
    helpers)."""
    return bufs.getitem_unchecked(x)


@njit(cache=True, nogil=True, inline="always")
def _bn(x):
    """Index in ``cn`` of buffer ``x``'s row count."""
    return C_BUF + 3 * x


@njit(cache=True, nogil=True, inline="always")
def _bmin(x):
    """Index in ``cn`` of the least iteration queued in buffer ``x`` (INF: none)."""
    return C_BUF + 3 * x + 1


@njit(cache=True, nogil=True, inline="always")
def _bwords(x):
    """Index in ``cn`` of buffer ``x``'s size in words (kept by :func:`_put`)."""
    return C_BUF + 3 * x + 2


@njit(cache=True, nogil=True)
def _put(bufs, cn, x, b):
    """Make ``b`` buffer ``x``. Every replacement goes through here, so that ``cn``
    knows each buffer's size and how many are big without reading the list."""
    big = cn[SC_BIG]
    was = cn[_bwords(x)]
    now = b.shape[0] * b.shape[1]
    cn[SC_NBIG] += (now >= big) - (was >= big)
    cn[_bwords(x)] = now
    bufs[x] = b


@njit(cache=True, nogil=True)
def _grown(buf, keep, need):
    """``buf`` with room for ``need`` rows (a copy of its first ``keep`` rows if it
    had to grow; ``buf`` is dead then). A large buffer is copied in parts, each given
    back once copied (hstate._move_rows), so that the old and the new one are not
    both resident: a load's leave collects the loop's whole output in one buffer
    (7.2M rows, ~290 MB at N=1e6), whose last doubling otherwise held both at once."""
    if need <= buf.shape[0]:
        return buf
    cap = max(2 * buf.shape[0], need, 16)
    out = np.empty((cap, buf.shape[1]), np.int64)
    _move_rows(buf, out, keep, _move_step(buf))
    return out


# A buffer of this many words or more (32 MiB) is given back when its node is idle for
# a round and it holds nothing, and so is an enter's input once taken: a load fills
# some buffers once (the entered graph) and others in its largest rounds, and keeping
# them all for the rest of the run would add their size to the run's peak memory.
# (Read when a loop program is packed, into its F_MISC field.)
IDLE_BIG_WORDS = 1 << 22


@njit(cache=True, nogil=True)
def _fit(bufs, cn, x, used, keep):
    """Replace buffer ``x`` (``IDLE_BIG_WORDS`` or more) by one of twice ``used`` rows
    (16 at least), keeping its first ``keep`` rows, when it is more than 8 times too
    large: a buffer grown in a load's largest rounds shrinks with the rounds after.
    (Callers test ``cn[_bwords(x)] >= cn[SC_BIG]`` first: most buffers are small.)"""
    b = _buf(bufs, x)
    if b.shape[0] * b.shape[1] >= cn[SC_BIG] and 8 * used < b.shape[0]:
        out = np.empty((max(np.int64(16), 2 * used), b.shape[1]), np.int64)
        _move_rows(b, out, keep, _move_step(b))
        _put(bufs, cn, x, out)


@njit(cache=True, nogil=True)
def _drop_empty(bufs, cn, x):
    """Give back buffer ``x`` when it is empty and big."""
    if cn[_bn(x)] == 0 and cn[_bwords(x)] >= cn[SC_BIG]:
        _fit(bufs, cn, x, I0, I0)


@njit(cache=True, nogil=True)
def _drop_idle(nodes, bufs, cn, ln):
    """Give back the big empty buffers of local node ``ln`` (idle this round; called
    only while some buffer is big)."""
    kind = nodes[ln, P_KIND]
    _drop_empty(bufs, cn, nodes[ln, P_D])
    if kind == S_ARRANGE or kind == S_CONSOL or kind == S_FEEDBACK:
        _drop_empty(bufs, cn, nodes[ln, P_Q])
    elif kind == S_REDUCE:
        for b in (P_Q, P_SCHED, P_ACC, P_DES, P_CUR):
            _drop_empty(bufs, cn, nodes[ln, b])


@njit(cache=True, nogil=True, inline="always")
def _route_head(src, r, dst, k, sign, shift, best):
    """Row ``r``'s iteration (plus ``shift``) and diff (times ``sign``) into row ``k``
    of ``dst``; returns the least of ``best`` and that iteration, or -1 when the
    negation overflows."""
    f = src[r, 1]
    if sign < 0:
        if f == I64_MIN:
            return -1
        f = -f
    it = src[r, 0] + shift
    dst[k, 0] = it
    dst[k, 1] = f
    return min(it, best)


@leaf
def _route_copy(src, n, dst, o, proj, poff, plen, sign, shift):
    """Rows ``src[:n]`` through a route into ``dst`` from row ``o`` (a sink in the
    loop; leaves: ``_leave_copy``; sums and filters: ``_route_sums``); returns the
    least iteration written (INF for none), or -1 when a negation overflows."""
    best = INF
    for r in range(n):
        best = _route_head(src, r, dst, o + r, sign, shift, best)
        if best < 0:
            return -1
        for c in range(plen):
            dst[o + r, 2 + c] = src[r, 2 + proj[poff + c]]
    return best


@njit(cache=True, nogil=True, inline="always")
def _term(proj, w, src, r):
    """The term at ``proj[w:w + AFW]`` (kernels.affine) of a row ``(iteration, diff,
    data...)``: ``(value, overflowed)``."""
    return _aterm(proj, w, src, r, 2)


@njit(cache=True, nogil=True, inline="always")
def _sums_into(proj, poff, plen, src, r, dst, k):
    """The columns of row ``r`` through a route with sums (``proj[poff:]``, AFW words
    a column) into row ``k`` of ``dst``; False when a checked sum overflows."""
    for c in range(plen):
        v, ov = _term(proj, poff + AFW * c, src, r)
        if ov:
            return False
        dst[k, 2 + c] = v
    return True


@leaf
def _route_sums(src, n, dst, o, proj, poff, plen, sign, shift, cn, slot):
    """:func:`_route_copy` of a route with sums or filters (R_AFF: kernels.affine's
    words at ``proj[poff:]``): the rows that pass every filter, from row ``o``. Sets
    ``cn[slot]`` to the row after the last one written; returns the least iteration
    written (INF for none), -1 when a negation overflows or -2 when a checked sum
    does (of a filter the row reaches, or of the row's columns once it passed them
    all)."""
    best = INF
    pw = poff + AFW * plen
    npred = proj[pw]
    k = o
    for r in range(n):
        p = _passes(proj, pw, npred, src, r, 2)
        if p <= 0:
            if p < 0:
                return -2
            continue
        best = _route_head(src, r, dst, k, sign, shift, best)
        if best < 0:
            return -1
        if not _sums_into(proj, poff, plen, src, r, dst, k):
            return -2
        k += 1
    cn[slot] = k
    return best


@leaf
def _leave_copy(src, n, dst, o, proj, poff, plen, sign, t):
    """Rows ``src[:n]`` through a route into a leave's buffer ``dst`` from row ``o``
    (``(0, diff, data, t)``), each row added to the row written just before it when
    their data and time are equal (a row that sums to zero is dropped). A leave drops
    the iteration, and a reduce emits a key's corrections at several iterations one
    after another, so a key whose output only moved between iterations (a node found
    at another depth) leaves nothing. The row before ``o`` may be added to as well.
    Returns the buffer's new row count, or -1 when a negation overflows. (A sum that
    would overflow is not taken: both rows are kept, for the root scope to report.)"""
    k = o
    for r in range(n):
        f = src[r, 1]
        if sign < 0:
            if f == I64_MIN:
                return -1
            f = -f
        for c in range(plen):
            dst[k, 2 + c] = src[r, 2 + proj[poff + c]]
        k = _leave_row(dst, k, plen, f, t)
    return k


@njit(cache=True, nogil=True, inline="always")
def _leave_row(dst, k, plen, f, t):
    """Row ``k`` of a leave's buffer holds a leaving row's data: add diff ``f`` to
    row ``k - 1`` when its data and time ``t`` are the same (both rows go when the sum
    is zero), else complete row ``k``. Returns the buffer's new row count."""
    if k > 0 and dst[k - 1, 2 + plen] == t:
        same = True
        for c in range(plen):
            if dst[k - 1, 2 + c] != dst[k, 2 + c]:
                same = False
                break
        if same:
            s, ov = add_checked(dst[k - 1, 1], f)
            if not ov:
                if s == 0:
                    return k - 1
                dst[k - 1, 1] = s
                return k
    dst[k, 0] = 0
    dst[k, 1] = f
    dst[k, 2 + plen] = t
    return k + 1


@leaf
def _leave_sums(src, n, dst, o, proj, poff, plen, sign, t):
    """:func:`_leave_copy` of a route with sums or filters (R_AFF, see
    :func:`_route_sums`): the rows that pass every filter, their columns computed.
    Returns the buffer's new row count, -1 when a negation overflows or -2 when a
    checked sum does."""
    pw = poff + AFW * plen          # (the filters: see kernels.affine)
    k = o
    for r in range(n):
        p = _passes(proj, pw, proj[pw], src, r, 2)
        if p <= 0:
            if p < 0:
                return -2
            continue
        f = src[r, 1]
        if sign < 0:
            if f == I64_MIN:
                return -1
            f = -f
        if not _sums_into(proj, poff, plen, src, r, dst, k):
            return -2
        k = _leave_row(dst, k, plen, f, t)
    return k


@list_leaf
def _emit(nodes, lp, bufs, cn, ln, sx, n, t):
    """Send rows ``[:n]`` of buffer ``sx`` of local node ``ln`` along its routes.
    Returns DONE, RQ_GROW (a sink's queue lacks room: checked for every route before
    any row is copied, so the emit can be repeated), OVF_NEG or OVF_MAP."""
    if n == 0:
        return DONE
    ro = lp[F_ROUTES]
    po = lp[F_PROJ]
    co = lp[F_CHAIN]
    so = cn[SC_STATS]
    r0 = nodes[ln, P_ROFF]
    r1 = r0 + nodes[ln, P_RN]
    for r in range(r0, r1):
        q = lp[ro + r * RTW + R_BUF]
        # (several routes of a node may share a sink)
        need = cn[_bn(q)] + n
        for r2 in range(r0, r):
            if lp[ro + r2 * RTW + R_BUF] == q:
                need += n
        if need > list_item(bufs, q).shape[0]:
            cn[SC_REQ] = q
            cn[SC_REQ + 1] = need
            cn[SC_REQ + 2] = cn[_bn(q)]
            return RQ_GROW
    src = list_item(bufs, sx)
    cn[so + 4 * nodes[ln, P_NODE] + 2] += n
    for r in range(r0, r1):
        rt = ro + r * RTW
        q = lp[rt + R_BUF]
        nq = cn[_bn(q)]
        dst = list_item(bufs, q)
        if lp[rt + R_LEAVE] == 1:
            if lp[rt + R_AFF] == 0:
                k = _leave_copy(src, n, dst, nq, lp, po + lp[rt + R_POFF],
                                lp[rt + R_PLEN], lp[rt + R_SIGN], t)
            else:
                k = _leave_sums(src, n, dst, nq, lp, po + lp[rt + R_POFF],
                                lp[rt + R_PLEN], lp[rt + R_SIGN], t)
            if k < 0:
                return OVF_NEG if k == -1 else OVF_MAP
            cn[_bn(q)] = k
        else:
            if lp[rt + R_AFF] == 0:
                best = _route_copy(src, n, dst, nq, lp, po + lp[rt + R_POFF],
                                   lp[rt + R_PLEN], lp[rt + R_SIGN], lp[rt + R_SHIFT])
                cn[_bn(q)] = nq + n
            else:       # (sets the queue's row count)
                best = _route_sums(src, n, dst, nq, lp, po + lp[rt + R_POFF],
                                   lp[rt + R_PLEN], lp[rt + R_SIGN], lp[rt + R_SHIFT], cn,
                                   _bn(q))
            if best < 0:
                return OVF_NEG if best == -1 else OVF_MAP
            if best < cn[_bmin(q)]:
                cn[_bmin(q)] = best
        c0 = co + lp[rt + R_COFF]
        c1 = c0 + 3 * lp[rt + R_CLEN]
        if lp[rt + R_AFF] == 0 or lp[po + lp[rt + R_POFF] + AFW * lp[rt + R_PLEN]] == 0:
            for c in range(c0, c1, 3):
                g = so + 4 * lp[c]
                cn[g] += 1
                cn[g + 1] += n
                cn[g + 2] += n
        else:
            _chain_stats(src, n, lp, po + lp[rt + R_POFF], lp[rt + R_PLEN], c0, c1, cn,
                         so)
        if lp[rt + R_LEAVE] == 0:
            # (a leave counts its rows when the root scope takes them; a filtered
            # route's sink takes the rows kept)
            cn[so + 4 * nodes[lp[rt + R_SINK], P_NODE] + 1] += cn[_bn(q)] - nq
    return DONE


@leaf
def _chain_stats(src, n, proj, poff, plen, c0, c1, cn, so):
    """The statistics of the linear nodes a filtered route counts (``proj[c0:c1]``,
    see R_COFF) for rows ``src[:n]``: a node takes the rows that pass the filters
    before it and emits those that pass the filters up to itself. The filters are
    evaluated again here (only routes with filters come here)."""
    pw = poff + AFW * plen
    cur = n          # the rows passing the first ``done`` filters
    done = 0
    for c in range(c0, c1, 3):
        into = cur
        for x in range(2):
            m = proj[c + 1 + x]
            if m != done:
                cur = 0
                for r in range(n):
                    if _passes(proj, pw, m, src, r, 2) == 1:
                        cur += 1
                done = m
            if x == 0:
                into = cur
        if into > 0:
            g = so + 4 * proj[c]
            cn[g] += 1
            cn[g + 1] += into
            cn[g + 2] += cur


@leaf
def _take_at(q, n, j, out, res, at):
    """Move the rows of ``q[:n]`` at iteration ``j`` to ``out`` (from row 0) and
    compact the others; ``res[at:at + 3]`` = (rows moved, rows left, least iteration
    left)."""
    a = np.int64(0)
    k = np.int64(0)
    best = INF
    w = q.shape[1]
    for r in range(n):
        it = q[r, 0]
        if it == j:
            for c in range(w):
                out[a, c] = q[r, c]
            a += 1
        else:
            if k != r:
                for c in range(w):
                    q[k, c] = q[r, c]
            k += 1
            if it < best:
                best = it
    res[at] = a
    res[at + 1] = k
    res[at + 2] = best


@list_leaf
def _take(bufs, cn, q, d, j):
    """Rows of queue ``q`` at iteration ``j`` into buffer ``d`` (its count set);
    returns how many, RQ_GROW (``d`` lacks room; nothing moved) or RQ_PAST."""
    n = cn[_bn(q)]
    if n == 0 or cn[_bmin(q)] > j:
        cn[_bn(d)] = 0
        return 0
    if cn[_bmin(q)] < j:
        return RQ_PAST
    out = list_item(bufs, d)
    if out.shape[0] < n:
        cn[SC_REQ] = d
        cn[SC_REQ + 1] = n
        cn[SC_REQ + 2] = 0
        return RQ_GROW
    _take_at(list_item(bufs, q), n, j, out, cn, SC_TAKE)
    a = cn[SC_TAKE]
    cn[_bn(d)] = a
    cn[_bn(q)] = cn[SC_TAKE + 1]
    cn[_bmin(q)] = cn[SC_TAKE + 2]
    return a


@leaf
def _isort_sum(b, n, w):
    """Sort rows ``b[:n]`` (``(iteration, diff, data[w])``, one iteration) by data,
    sum equal rows, drop zeros; returns the new count or -1 on overflow."""
    W = w + 2
    for i in range(1, n):
        x = i
        while x > 0 and _cmp(b, x - 1, 2, b, x, 2, w) > 0:
            for c in range(W):
                tmp = b[x, c]
                b[x, c] = b[x - 1, c]
                b[x - 1, c] = tmp
            x -= 1
    k = np.int64(0)
    r = np.int64(0)
    while r < n:
        s = b[r, 1]
        e = r + 1
        while e < n and _same(b, e, 2, b, r, 2, w):
            s, ov = add_checked(s, b[e, 1])
            if ov:
                return -1
            e += 1
        if s != 0:
            if k != r:
                for c in range(W):
                    b[k, c] = b[r, c]
            b[k, 1] = s
            k += 1
        r = e
    return k


@njit(cache=True, nogil=True)
def _consolidate(b, n, w):
    """Sort and consolidate rows ``b[:n]`` (one iteration) in place; returns the new
    count."""
    if n <= 48:
        k = _isort_sum(b, n, w)
        if k < 0:
            raise OverflowError("consolidate: a sum of diffs overflows int64")
        return k
    data = np.ascontiguousarray(b[:n, 2:2 + w])
    times = np.zeros((n, 2), np.int64)
    for r in range(n):
        times[r, 1] = b[r, 0]
    diffs = np.ascontiguousarray(b[:n, 1])
    d2, t2, f2 = sort_consolidate(data, times, diffs)
    k = f2.shape[0]
    for r in range(k):
        b[r, 0] = t2[r, 1]
        b[r, 1] = f2[r]
        for c in range(w):
            b[r, 2 + c] = d2[r, c]
    return k


# ---------------------------------------------------------------------------- join


@njit(cache=True, nogil=True, inline="always")
def _pairs_of_row(dd, r, arena, off, ln, j, kw, dvw, ovw, delta_left, od, o):
    """The pairs of delta row ``dd[r]`` with the ``ln`` trace entries at ``arena[off]``
    into ``od`` from row ``o``: ``(max(j, entry's iteration), product, key, left vals,
    right vals)``. Returns the new count, or -1 when a product overflows."""
    IT = arena.shape[1] - 2
    DF = arena.shape[1] - 1
    d = dd[r, 1]
    for x in range(ln):
        e = off + x
        f, ov = mul_checked(d, arena[e, DF])
        if ov:
            return np.int64(-1)
        it = arena[e, IT]
        od[o, 0] = it if it > j else j
        od[o, 1] = f
        for c in range(kw):
            od[o, 2 + c] = dd[r, 2 + c]
        if delta_left:
            for c in range(dvw):
                od[o, 2 + kw + c] = dd[r, 2 + kw + c]
            for c in range(ovw):
                od[o, 2 + kw + dvw + c] = arena[e, c]
        else:
            for c in range(ovw):
                od[o, 2 + kw + c] = arena[e, c]
            for c in range(dvw):
                od[o, 2 + kw + ovw + c] = dd[r, 2 + kw + c]
        o += 1
    return o


@leaf
def _pairs_trace(tab, arena, tag, dd, nd, kw, dvw, ovw, delta_left, j, od, o, pos):
    """Pairs of delta rows ``dd[pos[0]:nd]`` (``(iteration, diff, key, vals)``, grouped
    by key) with the entries of trace ``tag`` under the same key, appended to ``od``
    from row ``o``: ``(max(j, entry's iteration), product, key, left vals, right
    vals)``. Returns the new count, NEED_OUT (``pos`` = resume row, rows needed, count
    so far) or OVF_PAIR."""
    KW = tab.shape[1] - RW_EXTRA
    cap = od.shape[0]
    pf = _pf_on(tab)
    r = pos[0]
    off = np.int64(0)
    ln = np.int64(0)
    first = True
    while r < nd:
        if first or not _same(dd, r, 2, dd, r - 1, 2, kw):
            if pf and r + 1 < nd:
                if r + PF_AHEAD < nd:
                    _pf_slot(tab, dd, r + PF_AHEAD, kw)
                _pf_block(tab, arena, _find(tab, tag, dd, r + 1, 2, kw), 0)
            row = _find(tab, tag, dd, r, 2, kw)
            if row >= 0:
                off = tab[row, KW + 1]
                ln = blen(tab, row, 0)
            else:
                ln = 0
            first = False
        if o + ln > cap:
            pos[0] = r
            pos[1] = ln
            pos[2] = o
            return NEED_OUT
        o = _pairs_of_row(dd, r, arena, off, ln, j, kw, dvw, ovw, delta_left, od, o)
        if o < 0:
            return OVF_PAIR
        r += 1
    return o


@leaf
def _pairs_insert(tab, arena, meta, tag_r, tag_l, dd, nd, kw, dvw, ovw, j, od, o, pos):
    """A join owning both traces, its left delta in one walk: per key group of
    ``dd[pos[0]:nd]`` (rows ``(iteration, diff, key, vals)``, grouped by key), its pairs
    with the entries of trace ``tag_r`` under the key (as :func:`_pairs_trace` with
    ``delta_left``), then the group added to trace ``tag_l`` at iteration ``j`` (as
    ``hstate._ins_apply``). A key's two rows are neighbours (probes start from a hash of
    the key alone), so the second lookup reads lines the first brought in; while a key
    is worked on, both blocks of the next one are prefetched, so that the right
    block's miss and the left block's overlap (two walks had each wait on its own).

    Nothing of a key group is done before it has room. Returns the new count, or
    NEED_OUT (``pos`` = resume row, rows needed, count so far), NEED_ROWS (a new
    table row) or NEED_ARENA (``pos[1]`` entries), each with ``pos[0]`` at the group
    and ``pos[2]`` the count so far; or OVF_PAIR / OVF_ARR."""
    KW = tab.shape[1] - RW_EXTRA
    cap = od.shape[0]
    pf = _pf_on(tab)
    r = pos[0]
    # the rows of the next key group found while prefetching (at row n_at; -1: none).
    # A row found stays valid (rows never move here and a new row only takes an empty
    # slot); one found absent is looked up again, as a new row may have taken its slot
    n_at = np.int64(-1)
    n_r = np.int64(-1)
    n_l = np.int64(-1)
    while r < nd:
        e = r + 1
        while e < nd and _same(dd, e, 2, dd, r, 2, kw):
            e += 1
        if n_at == r and n_r >= 0:
            row_r = n_r
        else:
            row_r = _find(tab, tag_r, dd, r, 2, kw)
        if n_at == r and n_l >= 0:
            row_l = n_l
        else:
            row_l = _find(tab, tag_l, dd, r, 2, kw)
        if pf and e < nd:
            if e + PF_AHEAD < nd:
                _pf_slot(tab, dd, e + PF_AHEAD, kw)
            n_at = e
            n_r = _find(tab, tag_r, dd, e, 2, kw)
            n_l = _find(tab, tag_l, dd, e, 2, kw)
            _pf_block(tab, arena, n_r, 0)
            _pf_block(tab, arena, n_l, 0)
        elif not pf and e + PF_AHEAD - 1 < nd:
            # a table in cache (see hstate.PF_MIN_SLOTS): the slot alone, from L3
            _pf_slot(tab, dd, e + PF_AHEAD - 1, kw)
        ln = np.int64(0)
        off = np.int64(0)
        if row_r >= 0:
            off = tab[row_r, KW + 1]
            ln = blen(tab, row_r, 0)
        m = e - r
        pos[0] = r
        pos[2] = o
        if o + m * ln > cap:
            pos[1] = m * ln
            return NEED_OUT
        if row_l < 0:
            if not rows_room(tab, meta, 1):
                return NEED_ROWS
            ar = _block_need(tab, np.int64(-1), 0, m)
        else:
            ar = _block_need(tab, row_l, 0, m)
        if meta[M_TOP] + ar > arena.shape[0]:
            pos[1] = ar
            return NEED_ARENA
        for x in range(r, e):
            o = _pairs_of_row(dd, x, arena, off, ln, j, kw, dvw, ovw, True, od, o)
            if o < 0:
                return OVF_PAIR
        if row_l < 0:
            row_l = _new_row(tab, meta, -1 - row_l, tag_l, dd, r, 2, kw)
        if _block_add(tab, arena, meta, row_l, 0, dd, r, e, 2 + kw, dvw, 1, j) != 0:
            return OVF_ARR
        r = e
    pos[0] = nd
    pos[2] = o
    return o


_JOIN_OVF = "join: a product of diffs overflows int64 (in a loop)"


@list_leaf
def _join_trace(tab, arena, tag, bufs, cn, dx, nd, kw, dvw, ovw, delta_left, j, ob):
    """:func:`_pairs_trace` of delta buffer ``dx`` into output buffer ``ob`` from row
    ``cn[SC_JO]``, resuming at delta row ``cn[SC_JPOS]``; the new count goes to
    ``cn[SC_JO]``. Returns DONE, RQ_GROW or OVF_PAIR."""
    pos = cn[SC_JPOS:SC_JPOS + 3]
    od = list_item(bufs, ob)
    r = _pairs_trace(tab, arena, tag, list_item(bufs, dx), nd, kw, dvw, ovw, delta_left,
                     j, od, cn[SC_JO], pos)
    if r >= 0:
        cn[SC_JO] = r
        return DONE
    if r == OVF_PAIR:
        return OVF_PAIR
    o = pos[2]
    cn[SC_JO] = o
    cn[SC_REQ] = ob
    cn[SC_REQ + 1] = o + max(pos[1], od.shape[0])
    cn[SC_REQ + 2] = o
    return RQ_GROW


@list_leaf
def _join_insert(tab, arena, meta, tr, tl, bufs, cn, dx, nd, kw, dvw, ovw, j, ob):
    """:func:`_pairs_insert` of delta buffer ``dx`` into output buffer ``ob`` from row
    ``cn[SC_JO]``, resuming at delta row ``cn[SC_JPOS]``; the new count goes to
    ``cn[SC_JO]``. Returns DONE, a request (RQ_GROW, RQ_ROWS, RQ_ARENA), OVF_PAIR or
    OVF_ARR."""
    pos = cn[SC_JPOS:SC_JPOS + 3]
    od = list_item(bufs, ob)
    r = _pairs_insert(tab, arena, meta, tr, tl, list_item(bufs, dx), nd, kw, dvw, ovw,
                      j, od, cn[SC_JO], pos)
    if r >= 0:
        cn[SC_JO] = r
        return DONE
    if r == OVF_PAIR or r == OVF_ARR:
        return r
    o = pos[2]
    cn[SC_JO] = o
    if r == NEED_OUT:
        cn[SC_REQ] = ob
        cn[SC_REQ + 1] = o + max(pos[1], od.shape[0])
        cn[SC_REQ + 2] = o
        return RQ_GROW
    if r == NEED_ROWS:
        cn[SC_REQ] = nd - pos[0]
        return RQ_ROWS
    cn[SC_REQ] = pos[1]
    return RQ_ARENA


@list_leaf
def _join_deltas(bufs, cn, lx, nl, rx, nr, kw, j, ob):
    """Pairs of two delta buffers (each grouped by key, keys ascending) at iteration
    ``j`` into ``ob`` from row ``cn[SC_JO]``, resuming at the key groups
    ``cn[SC_JPOS:SC_JPOS + 2]``. Returns DONE, RQ_GROW (before a key's pairs) or
    OVF_PAIR."""
    ld = list_item(bufs, lx)
    rd = list_item(bufs, rx)
    od = list_item(bufs, ob)
    lvw = ld.shape[1] - 2 - kw
    rvw = rd.shape[1] - 2 - kw
    a = cn[SC_JPOS]
    b = cn[SC_JPOS + 1]
    o = cn[SC_JO]
    while a < nl and b < nr:
        c = _cmp(ld, a, 2, rd, b, 2, kw)
        if c < 0:
            a += 1
            continue
        if c > 0:
            b += 1
            continue
        a1 = a + 1
        while a1 < nl and _same(ld, a1, 2, ld, a, 2, kw):
            a1 += 1
        b1 = b + 1
        while b1 < nr and _same(rd, b1, 2, rd, b, 2, kw):
            b1 += 1
        need = o + (a1 - a) * (b1 - b)
        if need > od.shape[0]:
            cn[SC_JPOS] = a
            cn[SC_JPOS + 1] = b
            cn[SC_JO] = o
            cn[SC_REQ] = ob
            cn[SC_REQ + 1] = need
            cn[SC_REQ + 2] = o
            return RQ_GROW
        for x in range(a, a1):
            for y in range(b, b1):
                f, ov = mul_checked(ld[x, 1], rd[y, 1])
                if ov:
                    return OVF_PAIR
                od[o, 0] = j
                od[o, 1] = f
                for c in range(kw + lvw):
                    od[o, 2 + c] = ld[x, 2 + c]
                for c in range(rvw):
                    od[o, 2 + kw + lvw + c] = rd[y, 2 + kw + c]
                o += 1
        a = a1
        b = b1
    cn[SC_JO] = o
    return DONE


@list_leaf
def _insert(tab, arena, meta, bufs, cn, tag, dx, n, kw, vw, j):
    """Insert delta buffer ``dx[:n]`` into trace ``tag`` at iteration ``j``; returns
    DONE, RQ_INSERT (the rest, from the key that lacked room) or OVF_ARR."""
    r = _ins_apply(tab, arena, meta, tag, I0, list_item(bufs, dx), I0, n, kw,
                   vw, j)
    if r == OVERFLOW:
        return OVF_ARR
    if r < n:
        cn[SC_REQ] = dx
        cn[SC_REQ + 1] = r
        cn[SC_REQ + 2] = n
        cn[SC_REQ + 3] = tag
        cn[SC_REQ + 4] = kw
        cn[SC_REQ + 5] = vw
        return RQ_INSERT
    return DONE


@list_leaf
def _step_join(nodes, lp, bufs, cn, tab, arena, meta, ln, t, j):
    """A join's round, in stages (``cn[SC_STAGE]``): 0 start; 1 ``dL x R``; 2 ``L +=
    dL`` (a join owning both traces); 3 ``dR x L``; 4 ``R += dR`` (owning both) or
    ``dL x dR``; 5 emit. A join owning two distinct traces does stages 1 and 2 in one
    walk (:func:`_pairs_insert`)."""
    la = nodes[ln, P_LEFT]
    ra = nodes[ln, P_RIGHT]
    dl = nodes[la, P_D]
    dr = nodes[ra, P_D]
    nl = cn[_bn(dl)]
    nr = cn[_bn(dr)]
    kw = nodes[ln, P_JKW]
    lvw = nodes[la, P_W] - kw
    rvw = nodes[ra, P_W] - kw
    tl = nodes[la, P_TAG]
    tr = nodes[ra, P_TAG]
    ob = nodes[ln, P_D]
    owns = nodes[ln, P_JFUSED] == 1
    stage = cn[SC_STAGE]
    if stage == 0:
        if nl == 0 and nr == 0:
            return DONE
        g = cn[SC_STATS] + 4 * nodes[ln, P_NODE]
        cn[g] += 1
        cn[g + 1] += nl + nr
        cn[SC_JO] = 0
        cn[SC_JPOS] = 0
        stage = 1
    # (a request leaves the stage as it is, or past a stage the request completes)
    if stage == 1 and owns and nl and tl != tr:
        # dL x R and L += dL in one walk (_pairs_insert)
        code = _join_insert(tab, arena, meta, tr, tl, bufs, cn, dl, nl, kw, lvw, rvw, j,
                            ob)
        if code != DONE:
            cn[SC_STAGE] = 1
            return code
        cn[SC_JPOS] = 0
        stage = 3
    if stage == 1:
        if nl:
            code = _join_trace(tab, arena, tr, bufs, cn, dl, nl, kw, lvw, rvw, True, j,
                               ob)
            if code != DONE:
                cn[SC_STAGE] = 1
                return code
        stage = 2
    if stage == 2:
        cn[SC_JPOS] = 0
        stage = 3
        if owns and nl:
            code = _insert(tab, arena, meta, bufs, cn, tl, dl, nl, kw, lvw, j)
            if code != DONE:
                cn[SC_STAGE] = 3
                return code
    if stage == 3:
        if nr:
            code = _join_trace(tab, arena, tl, bufs, cn, dr, nr, kw, rvw, lvw, False, j,
                               ob)
            if code != DONE:
                cn[SC_STAGE] = 3
                return code
        cn[SC_JPOS] = 0
        cn[SC_JPOS + 1] = 0
        stage = 4
    if stage == 4:
        if owns:
            stage = 5
            if nr:
                code = _insert(tab, arena, meta, bufs, cn, tr, dr, nr, kw, rvw, j)
                if code != DONE:
                    cn[SC_STAGE] = 5
                    return code
        else:
            if nl and nr:
                code = _join_deltas(bufs, cn, dl, nl, dr, nr, kw, j, ob)
                if code != DONE:
                    cn[SC_STAGE] = 4
                    return code
            stage = 5
    cn[SC_STAGE] = 5
    return _emit(nodes, lp, bufs, cn, ln, ob, cn[SC_JO], t)


# -------------------------------------------------------------------------- reduce


@njit(cache=True, nogil=True, inline="always")
def _sum_group(arena, a, a_end, ref, ri, w, j, nxt):
    """Sum the diffs of the arena entries from ``a`` (before ``a_end``) whose vals equal
    ``ref[ri, 1:1 + w]``, at iterations ``<= j``; returns ``(sum, the entry after the
    group, least of nxt and the group's iterations after j, overflowed)``."""
    IT = arena.shape[1] - 2
    DF = arena.shape[1] - 1
    s = np.int64(0)
    while a < a_end and _cmp(arena, a, 0, ref, ri, 1, w) == 0:
        it = arena[a, IT]
        if it <= j:
            s, ov = add_checked(s, arena[a, DF])
            if ov:
                return s, a, nxt, True
        elif it < nxt:
            nxt = it
        a += 1
    return s, a, nxt, False


@njit(cache=True, nogil=True, inline="always")
def value_less(vw, ow, logic):
    """Whether a reduce with values of ``vw`` words in, ``ow`` out and logic ``logic``
    is a value-less ``distinct`` / ``top_k``: it keeps no output, and it takes its own
    arrangement's delta unsorted (``FUSED_UNSORTED``; ``ddnumba.native`` asks this
    too: a reduce of another kind given an unsorted delta would split its keys)."""
    return vw == 0 and ow == 0 and (logic == L_DISTINCT or logic == L_TOP_K)


@njit(cache=True, nogil=True, inline="always")
def _walk_order(vw, logic, lparam):
    """How a reduce with values reads a key's accumulated input: 1 in ascending
    order of its vals, stopping once the positive rows read hold the output (a ``min``
    of the first value column: one; a ``top_k``: ``k`` counts); -1 from the largest
    vals down, stopping at the first positive row (a ``max`` of the first value
    column); 0 all of it (the others, which need every row).

    Stopping early is exact. The rows not read hold larger vals (smaller for -1),
    which cannot enter the output while the rows read keep their counts; and the
    key's next evaluation, at the least later iteration of the rows read or of its
    output, is where those counts can change. Rows of later iterations that were not
    read change no output until then, so a key of many vals whose least ones are
    present costs a few rows, not its group."""
    if vw == 0:
        return np.int64(0)
    if logic == L_TOP_K or (logic == L_MIN and lparam == 0):
        return np.int64(1)
    if logic == L_MAX and lparam == 0:
        return np.int64(-1)
    return np.int64(0)


@njit(cache=True, nogil=True, inline="always")
def _count_want(c, logic, lparam):
    """The output count of a value-less ``distinct`` (1) or ``top_k`` (``min(c, k)``)
    whose input count is ``c`` (nothing for ``c <= 0``)."""
    if c <= 0:
        return np.int64(0)
    return np.int64(1) if logic == L_DISTINCT else min(c, lparam)


@njit(cache=True, nogil=True, inline="always")
def _flat_corrections(arena, off_in, ln_in, j, dsum, logic, lparam, cd, o, src, si, kw):
    """Corrections of a value-less ``distinct`` / ``top_k`` key whose input gains
    ``dsum`` at iteration ``j``, from its input history alone (block of ``ln_in``
    entries at ``off_in``, the delta not in it): at ``j`` and at every later iteration
    of that history, the change of the output count there, ``want(c + dsum) -
    want(c)`` with ``c`` the input accumulated at that iteration, less the corrections
    already written before it. Appended to ``cd`` from row ``o``; returns ``(rows
    written up to, 0 or an overflow code)``.

    Such a reduce keeps no output: in a sequential loop its output accumulated at any
    iteration is always ``want`` of its input accumulated there. Every earlier outer
    time ran to its fixed point, and a key whose input changes in a round is corrected
    there for that iteration and all later ones of its history at once; its history
    after ``j`` holds only earlier outer times' entries until a later round's delta
    (which walks again from its own iteration)."""
    IT = arena.shape[1] - 2
    DF = arena.shape[1] - 1
    a = off_in
    a_end = off_in + ln_in
    c = np.int64(0)
    while a < a_end and arena[a, IT] < j:
        c, ov = add_checked(c, arena[a, DF])
        if ov:
            return o, OVF_IN
        a += 1
    i = j
    prev = np.int64(0)
    while True:
        while a < a_end and arena[a, IT] == i:
            c, ov = add_checked(c, arena[a, DF])
            if ov:
                return o, OVF_IN
            a += 1
        cn, ov = add_checked(c, dsum)
        if ov:
            return o, OVF_IN
        d = _count_want(cn, logic, lparam) - _count_want(c, logic, lparam)
        if d != prev:
            dlt = d - prev
            if ((d ^ prev) & (d ^ dlt)) < 0:
                return o, OVF_CORR
            cd[o, 0] = i
            cd[o, 1] = dlt
            for q in range(kw):
                cd[o, 2 + q] = src[si, 2 + q]
            o += 1
            prev = d
        if a >= a_end:
            return o, 0
        i = arena[a, IT]


@njit(cache=True, nogil=True, inline="always")
def _pf_blocks(tab, arena, tag_in, tag_out, blk, src, si, kw):
    """Prefetch the input and output blocks of ``src[si]``'s key (see hstate.PF_AHEAD);
    returns the input row (-1: none)."""
    r = _find(tab, tag_in, src, si, 2, kw)
    _pf_block(tab, arena, r, 0)
    ri = r if r >= 0 else np.int64(-1)
    if tag_out != tag_in:
        r = _find(tab, tag_out, src, si, 2, kw)
    _pf_block(tab, arena, r, blk)
    return ri


@leaf
def _reduce_keys(tab, arena, meta, tag_in, tag_out, blk, kw, vw, ow, logic, lparam, j,
                 dd, nd, sk, ns, pos, acc, des, cur, cd, nc, sq, qc):
    """Evaluate a reduce at iteration ``j`` for the key groups of the delta
    ``dd[:nd]`` (rows ``(j, diff, key, vals)`` sorted by key and vals, consolidated)
    and then the scheduled keys ``sk[:ns]`` (rows ``(j, 0, key)``), resuming at
    ``pos[0]`` (a delta row, or ``nd + i`` for the i-th scheduled key). A value-less
    ``distinct`` / ``top_k`` takes its delta row by row, in any order and unconsolidated
    (``FUSED_UNSORTED``): each row's corrections are computed against the history the
    rows before it left (theirs inserted), so a key's corrections add up to those of
    its rows' sum, possibly as pairs that cancel (which the arrangements they reach
    consolidate away, see ``ddnumba.native``).

    Per key: the input accumulated at iterations ``<= j`` (block 0 of the input row
    plus the delta), the output accumulated so (block ``blk`` of the output row; with
    ``blk == 1`` input and output share the row, ``tag_in == tag_out``, and the delta
    is added to block 0 here), the logic, and the corrections: appended to ``cd``
    (rows ``(j, diff, key, out vals)``, ``nc[0]`` rows) and added to the output block.
    The least iteration after ``j`` in either history is appended to the schedule
    queue ``sq`` (``qc`` = its row count and least iteration). A value-less
    ``distinct`` / ``top_k`` keeps no output and schedules nothing: its corrections at
    ``j`` and later come from its input history (:func:`_flat_corrections`).

    Returns DONE, NEED_SCRATCH / NEED_OUT / NEED_ARENA (``pos[1]`` = amount needed;
    nothing of the key was changed) or an overflow code."""
    KW = tab.shape[1] - RW_EXTRA
    epoch = meta[M_EPOCH]
    total = nd + ns
    fused = blk == 1
    ob = KW + 1 + 2 * blk
    flat = value_less(vw, ow, logic)
    walk = _walk_order(vw, logic, lparam)
    pf_out = tag_in if flat else tag_out     # (a flat reduce reads no output block)
    pf_blk = 0 if flat else blk
    pf = _pf_on(tab)
    # input rows found while prefetching, for the next key (at row n1_at of the delta
    # or schedule) and the one after (n2_at); -1: none. A found row stays valid: rows
    # never move here, and a new row only takes an empty slot.
    n1_at = np.int64(-1)
    n1_row = np.int64(-1)
    n2_at = np.int64(-1)
    n2_row = np.int64(-1)
    while pos[0] < total:
        p0 = pos[0]
        known = n1_row if n1_at == p0 else np.int64(-1)
        if p0 < nd:
            src = dd
            si = p0
            e = p0 + 1
            if not flat:
                while e < nd and _same(dd, e, 2, dd, p0, 2, kw):
                    e += 1
            m = e - p0
        else:
            src = sk
            si = p0 - nd
            e = p0 + 1
            m = np.int64(0)
        # prefetch ahead (see hstate.PF_AHEAD): the table slot of the key PF_AHEAD
        # rows further; in a table in cache (see hstate.PF_MIN_SLOTS) that of the key
        # a row closer, and nothing else (its slot comes from L3)
        f = e + PF_AHEAD if pf else e + PF_AHEAD - 1
        if f < total:
            _pf_slot(tab, dd if f < nd else sk, f if f < nd else f - nd, kw)
        if pf:
            # the blocks of the key after the next one (whose own were prefetched
            # while its predecessor was evaluated)
            g = e
            if g < nd:
                g += 1
                while not flat and g < nd and _same(dd, g, 2, dd, e, 2, kw):
                    g += 1
            elif g < total:
                g += 1
            n1_at = n2_at
            n1_row = n2_row
            if n1_at != e:
                # the first key of the walk (or of a resumed one): its successor's
                # blocks too
                n1_at = e
                n1_row = np.int64(-1)
                if e < total:
                    n1_row = _pf_blocks(tab, arena, tag_in, pf_out, pf_blk,
                                        dd if e < nd else sk, e if e < nd else e - nd, kw)
            n2_at = g
            n2_row = np.int64(-1)
            if g < total:
                n2_row = _pf_blocks(tab, arena, tag_in, pf_out, pf_blk,
                                    dd if g < nd else sk, g if g < nd else g - nd, kw)
        if flat:
            # a value-less distinct / top_k: corrections from the input history alone
            # (see _flat_corrections); its keys are never scheduled
            row_in = known if known >= 0 else _find(tab, tag_in, src, si, 2, kw)
            if m == 0:
                pos[0] = e
                continue
            if row_in < 0 and fused:
                row_in = _new_row(tab, meta, -1 - row_in, tag_in, src, si, 2, kw)
            ln_in = flat_len(tab, row_in) if row_in >= 0 else np.int64(0)
            ncmax = ln_in + 1
            if nc[0] + ncmax > cd.shape[0]:
                pos[1] = ncmax
                return NEED_OUT
            if fused:
                # (its rows may hold their entries inline: hstate.flat_add)
                ar = flat_need(tab, row_in)
                if meta[M_TOP] + ar > arena.shape[0]:
                    pos[1] = ar
                    return NEED_ARENA
            off_in, ln_in = flat_history(tab, arena, meta, row_in)
            qc[2] += 1
            dsum = np.int64(0)
            for x in range(p0, e):
                dsum, ov = add_checked(dsum, dd[x, 1])
                if ov:
                    return OVF_IN
            o, code = _flat_corrections(arena, off_in, ln_in, j, dsum, logic, lparam, cd,
                                        nc[0], src, si, kw)
            if code != 0:
                return code
            nc[0] = o
            if fused:
                if flat_add(tab, arena, meta, row_in, j, dd, p0, 2 + kw, vw) == OVERFLOW:
                    return OVF_IN
            pos[0] = e
            continue
        if fused:
            row_in = known if known >= 0 else _find(tab, tag_in, src, si, 2, kw)
            if row_in < 0:
                if m == 0:
                    pos[0] = e          # scheduled, but its history is gone
                    continue
                row_in = _new_row(tab, meta, -1 - row_in, tag_in, src, si, 2, kw)
            row_out = row_in
        else:
            row_out = _find(tab, tag_out, src, si, 2, kw)
            if row_out < 0:
                row_out = _new_row(tab, meta, -1 - row_out, tag_out, src, si, 2, kw)
            row_in = known if known >= 0 else _find(tab, tag_in, src, si, 2, kw)
        if tab[row_out, KW + 5] == epoch:
            pos[0] = e
            continue
        off_in = np.int64(0)
        ln_in = np.int64(0)
        if row_in >= 0:
            off_in = tab[row_in, KW + 1]
            ln_in = blen(tab, row_in, 0)
        off_o = tab[row_out, ob]
        ln_o = blen(tab, row_out, blk)
        need = max(ln_in + m, ln_o) + 1
        if need > acc.shape[0] or need > des.shape[0] or need > cur.shape[0]:
            pos[1] = need
            return NEED_SCRATCH
        ncmax = ln_in + m + ln_o + 1
        if nc[0] + ncmax > cd.shape[0]:
            pos[1] = ncmax
            return NEED_OUT
        ar = _block_need(tab, row_out, blk, ncmax)
        if fused and m > 0:
            ar += _block_need(tab, row_in, 0, m)
        if meta[M_TOP] + ar > arena.shape[0]:
            pos[1] = ar
            return NEED_ARENA
        tab[row_out, KW + 5] = epoch
        qc[2] += 1
        nxt = INF
        c0 = nc[0]
        # input accumulated at <= j, per vals: the trace's entries and the delta. With
        # walk != 0 the vals are read in order (walk -1: from the largest) and the
        # walk stops once the rows read hold the output (see _walk_order)
        na = np.int64(0)
        left = lparam if logic == L_TOP_K else np.int64(1)
        a = off_in
        a_end = off_in + ln_in
        x = p0
        x_end = p0 + m
        while walk >= 0 and (a < a_end or x < x_end):
            if x >= x_end:
                c = -1
            elif a >= a_end:
                c = 1
            else:
                c = _cmp(arena, a, 0, dd, x, 2 + kw, vw)
            if c <= 0:
                for q in range(vw):
                    acc[na, 1 + q] = arena[a, q]
            else:
                for q in range(vw):
                    acc[na, 1 + q] = dd[x, 2 + kw + q]
            s, a, nxt, ov = _sum_group(arena, a, a_end, acc, na, vw, j, nxt)
            if ov:
                return OVF_IN
            if x < x_end and _cmp(dd, x, 2 + kw, acc, na, 1, vw) == 0:
                s, ov = add_checked(s, dd[x, 1])
                if ov:
                    return OVF_IN
                x += 1
            if s != 0:
                acc[na, 0] = s
                na += 1
                if walk == 1 and s > 0:
                    left -= s
                    if left <= 0:
                        break
        while walk < 0 and (a < a_end or x < x_end):
            # from the largest vals down: the top group of the trace's entries (found
            # by stepping back over it) and the delta's last row
            if x >= x_end:
                c = 1
            elif a >= a_end:
                c = -1
            else:
                c = _cmp(arena, a_end - 1, 0, dd, x_end - 1, 2 + kw, vw)
            s = np.int64(0)
            if c >= 0:
                for q in range(vw):
                    acc[na, 1 + q] = arena[a_end - 1, q]
                g = a_end - 1
                while g > a and _cmp(arena, g - 1, 0, acc, na, 1, vw) == 0:
                    g -= 1
                s, _, nxt, ov = _sum_group(arena, g, a_end, acc, na, vw, j, nxt)
                if ov:
                    return OVF_IN
                a_end = g
            else:
                for q in range(vw):
                    acc[na, 1 + q] = dd[x_end - 1, 2 + kw + q]
            if x < x_end and _cmp(dd, x_end - 1, 2 + kw, acc, na, 1, vw) == 0:
                s, ov = add_checked(s, dd[x_end - 1, 1])
                if ov:
                    return OVF_IN
                x_end -= 1
            if s != 0:
                acc[na, 0] = s
                na += 1
                if s > 0:
                    break
        # output accumulated at <= j
        nu = np.int64(0)
        a = off_o
        a_end = off_o + ln_o
        while a < a_end:
            for q in range(ow):
                cur[nu, 1 + q] = arena[a, q]
            s, a, nxt, ov = _sum_group(arena, a, a_end, cur, nu, ow, j, nxt)
            if ov:
                return OVF_IN
            if s != 0:
                cur[nu, 0] = s
                nu += 1
        # desired output
        nw = np.int64(0)
        if logic == L_DISTINCT:
            for i in range(na):
                if acc[i, 0] > 0:
                    for q in range(vw):
                        des[nw, 1 + q] = acc[i, 1 + q]
                    des[nw, 0] = 1
                    nw += 1
        elif logic == L_TOP_K:
            left = lparam
            for i in range(na):
                if left <= 0:
                    break
                cc = acc[i, 0]
                if cc > 0:
                    for q in range(vw):
                        des[nw, 1 + q] = acc[i, 1 + q]
                    tk = cc if cc < left else left
                    des[nw, 0] = tk
                    left -= tk
                    nw += 1
        elif logic == L_COUNT:
            if na > 0:
                s = np.int64(0)
                for i in range(na):
                    s, ov = add_checked(s, acc[i, 0])
                    if ov:
                        return OVF_LOGIC
                des[0, 1] = s
                des[0, 0] = 1
                nw = 1
        elif logic == L_SUM:
            if na > 0:
                s = np.int64(0)
                for i in range(na):
                    pr, o1 = mul_checked(acc[i, 1 + lparam], acc[i, 0])
                    s, o2 = add_checked(s, pr)
                    if o1 or o2:
                        return OVF_LOGIC
                des[0, 1] = s
                des[0, 0] = 1
                nw = 1
        else:   # L_MIN / L_MAX
            found = False
            best = np.int64(0)
            for i in range(na):
                if acc[i, 0] > 0:
                    v = acc[i, 1 + lparam]
                    if not found or (v > best if logic == L_MAX else v < best):
                        best = v
                        found = True
            if found:
                des[0, 1] = best
                des[0, 0] = 1
                nw = 1
        # corrections: desired - current, per out vals (both ascending)
        a = np.int64(0)
        b = np.int64(0)
        o = nc[0]
        while a < nw or b < nu:
            if b >= nu:
                c = -1
            elif a >= nw:
                c = 1
            else:
                c = _cmp(des, a, 1, cur, b, 1, ow)
            if c < 0:
                dlt = des[a, 0]
            elif c > 0:
                if cur[b, 0] == I64_MIN:
                    return OVF_CORR
                dlt = -cur[b, 0]
            else:
                dlt = des[a, 0] - cur[b, 0]
                if ((des[a, 0] ^ cur[b, 0]) & (des[a, 0] ^ dlt)) < 0:
                    return OVF_CORR
            if dlt != 0:
                cd[o, 0] = j
                cd[o, 1] = dlt
                for q in range(kw):
                    cd[o, 2 + q] = src[si, 2 + q]
                if c <= 0:
                    for q in range(ow):
                        cd[o, 2 + kw + q] = des[a, 1 + q]
                else:
                    for q in range(ow):
                        cd[o, 2 + kw + q] = cur[b, 1 + q]
                o += 1
            if c <= 0:
                a += 1
            if c >= 0:
                b += 1
        nc[0] = o
        # the corrections into the output block, the delta into the input block (when
        # the reduce owns its arrangement), the key's next evaluation
        o = nc[0]
        if o > c0:
            if block_add(tab, arena, meta, row_out, blk, cd, c0, o, 2 + kw, ow, 1,
                         np.int64(-1)) == OVERFLOW:
                return OVF_CORR
        if fused and m > 0:
            if block_add(tab, arena, meta, row_in, I0, dd, p0, e, 2 + kw, vw, 1,
                         j) == OVERFLOW:
                return OVF_IN
        if nxt != INF:
            k = qc[0]
            sq[k, 0] = nxt
            sq[k, 1] = 0
            for q in range(kw):
                sq[k, 2 + q] = src[si, 2 + q]
            qc[0] = k + 1
            if nxt < qc[1]:
                qc[1] = nxt
        pos[0] = e
    return DONE


@njit(cache=True, nogil=True)
def _reduce_overflow(code, logic):
    name = "reduce"
    if logic == L_COUNT:
        name = "count"
    elif logic == L_SUM:
        name = "sum"
    elif logic == L_MIN:
        name = "min"
    elif logic == L_MAX:
        name = "max"
    elif logic == L_DISTINCT:
        name = "distinct"
    elif logic == L_TOP_K:
        name = "top_k"
    if code == OVF_IN:
        raise OverflowError(name + ": a sum of input diffs overflows int64 (in a loop)")
    if code == OVF_LOGIC:
        raise OverflowError(name + ": a sum overflows int64 (in a loop)")
    raise OverflowError(name + ": a correction overflows int64 (in a loop)")


@list_leaf
def _step_reduce(nodes, lp, bufs, cn, tab, arena, meta, ln, t, j):
    """A reduce's round, in stages (``cn[SC_STAGE]``): 0 take the keys scheduled for
    ``j``; 1 room in the table and the schedule; 2 evaluate the keys
    (:func:`_reduce_keys`, resuming at ``cn[SC_POS]``); 3 emit."""
    la = nodes[ln, P_ARR]
    dq = nodes[la, P_D]
    nd = cn[_bn(dq)]
    sq = nodes[ln, P_Q]
    ss = nodes[ln, P_SCHED]
    ob = nodes[ln, P_D]
    g = cn[SC_STATS] + 4 * nodes[ln, P_NODE]
    stage = cn[SC_STAGE]
    if stage == 0:
        ns = _take(bufs, cn, sq, ss, j)
        if ns < 0:
            return ns
        if nd == 0 and ns == 0:
            return DONE
        cn[g] += 1
        stage = 1
    ns = cn[_bn(ss)]
    nc = cn[SC_NC:SC_NC + 1]
    qc = cn[SC_QC:SC_QC + 3]
    pos = cn[SC_POS:SC_POS + 2]
    if stage == 1:
        cn[SC_STAGE] = 1
        if not rows_room(tab, meta, nd + ns):
            cn[SC_REQ] = nd + ns
            return RQ_ROWS
        if cn[_bn(sq)] + nd + ns > list_item(bufs, sq).shape[0]:
            cn[SC_REQ] = sq
            cn[SC_REQ + 1] = cn[_bn(sq)] + nd + ns
            cn[SC_REQ + 2] = cn[_bn(sq)]
            return RQ_GROW
        nc[0] = 0
        qc[0] = cn[_bn(sq)]
        qc[1] = cn[_bmin(sq)]
        qc[2] = 0
        pos[0] = 0
        pos[1] = 0
        stage = 2
    if stage == 2:
        cn[SC_STAGE] = 2
        code = _reduce_keys(tab, arena, meta, nodes[ln, P_TAG_IN], nodes[ln, P_TAG_OUT],
                            nodes[ln, P_BLK], nodes[ln, P_RKW], nodes[ln, P_VW],
                            nodes[ln, P_OW], nodes[ln, P_LOGIC], nodes[ln, P_LPARAM], j,
                            list_item(bufs, dq), nd, list_item(bufs, ss), ns, pos,
                            list_item(bufs, nodes[ln, P_ACC]),
                            list_item(bufs, nodes[ln, P_DES]),
                            list_item(bufs, nodes[ln, P_CUR]), list_item(bufs, ob), nc,
                            list_item(bufs, sq), qc)
        if code == NEED_SCRATCH:
            cn[SC_REQ] = ln
            cn[SC_REQ + 1] = pos[1]
            return RQ_SCRATCH
        if code == NEED_OUT:
            cn[SC_REQ] = ob
            cn[SC_REQ + 1] = nc[0] + pos[1]
            cn[SC_REQ + 2] = nc[0]
            return RQ_GROW
        if code == NEED_ARENA:
            cn[SC_REQ] = pos[1]
            return RQ_ARENA
        if code != DONE:
            return code
        cn[_bn(sq)] = qc[0]
        cn[_bmin(sq)] = qc[1]
        cn[g + 3] += qc[2]       # keys evaluated
    cn[SC_STAGE] = 3
    return _emit(nodes, lp, bufs, cn, ln, ob, nc[0], t)


# --------------------------------------------------------------------------- rounds


@list_leaf
def _step_buffered(nodes, lp, bufs, cn, ln, t, j):
    """Arrange, consolidate or feedback: take the rows at ``j``, consolidate them into
    the node's delta buffer (stage 0; more than 48 rows: RQ_CONSOL, run_times sorts
    them; an arrangement whose reader takes its delta unsorted, ``FUSED_UNSORTED``,
    only takes them); consolidate and feedback emit it (stage 1)."""
    d = nodes[ln, P_D]
    g = cn[SC_STATS] + 4 * nodes[ln, P_NODE]
    if cn[SC_STAGE] == 0:
        n = _take(bufs, cn, nodes[ln, P_Q], d, j)
        if n <= 0:
            return n
        cn[g] += 1
        cn[SC_STAGE] = 1
        if nodes[ln, P_KIND] == S_ARRANGE and nodes[ln, P_FUSED] == FUSED_UNSORTED:
            cn[g + 2] += n
            return DONE
        if n > 48:
            cn[SC_REQ] = d
            cn[SC_REQ + 1] = n
            cn[SC_REQ + 2] = nodes[ln, P_W]
            return RQ_CONSOL
        k = _isort_sum(list_item(bufs, d), n, nodes[ln, P_W])
        if k < 0:
            return OVF_CONS
        cn[_bn(d)] = k
    k = cn[_bn(d)]
    if nodes[ln, P_KIND] == S_ARRANGE:
        cn[g + 2] += k
        return DONE
    return _emit(nodes, lp, bufs, cn, ln, d, k, t)


@list_leaf
def _step(nodes, lp, bufs, cn, tab, arena, meta, ln, t, j):
    """Local node ``ln``'s round at iteration ``j`` (see the steps), resumed at
    ``cn[SC_STAGE]``; an arrangement not inserted by its reader goes into its trace
    when ``cn[SC_STAGE]`` is -1. Returns DONE or a request."""
    kind = nodes[ln, P_KIND]
    if cn[SC_STAGE] < 0:
        if cn[SC_STAGE] == -2:
            return DONE             # (the request completed the insert)
        cn[SC_STAGE] = -2
        d = nodes[ln, P_D]
        kw = nodes[ln, P_KW]
        return _insert(tab, arena, meta, bufs, cn, nodes[ln, P_TAG], d, cn[_bn(d)], kw,
                       nodes[ln, P_W] - kw, j)
    if kind == S_JOIN:
        return _step_join(nodes, lp, bufs, cn, tab, arena, meta, ln, t, j)
    if kind == S_REDUCE:
        return _step_reduce(nodes, lp, bufs, cn, tab, arena, meta, ln, t, j)
    return _step_buffered(nodes, lp, bufs, cn, ln, t, j)


@njit(cache=True, nogil=True)
def _serve(nodes, bufs, cn, tab, arena, meta, ln, j, code):
    """Serve request ``code`` of local node ``ln``'s step (see RQ_GROW); raise for an
    overflow. Returns ``(tab, arena)``."""
    a = cn[SC_REQ]
    b = cn[SC_REQ + 1]
    c = cn[SC_REQ + 2]
    if code == RQ_GROW:
        _put(bufs, cn, a, _grown(_buf(bufs, a), c, b))
    elif code == RQ_SCRATCH:
        for p in (P_ACC, P_DES, P_CUR):
            x = nodes[a, p]
            _put(bufs, cn, x, _grown(_buf(bufs, x), I0, b))
    elif code == RQ_ROWS:
        tab = ensure_rows(tab, meta, a)
    elif code == RQ_ARENA:
        arena = ensure_entries(tab, arena, meta, a)
    elif code == RQ_INSERT:
        tab, arena = insert_from(tab, arena, meta, cn[SC_REQ + 3], I0, _buf(bufs, a), b,
                                 c, cn[SC_REQ + 4], cn[SC_REQ + 5], j,
                                 "arrange: a count overflows int64 (in a loop)")
    elif code == RQ_CONSOL:
        cn[_bn(a)] = _consolidate(_buf(bufs, a), b, c)
    elif code == RQ_PAST:
        raise RuntimeError("sequential loop: internal error: a queued update is at an "
                           "iteration already past")
    elif code == OVF_NEG:
        raise OverflowError("negate: a diff of -2**63 has no int64 negation")
    elif code == OVF_ARR:
        raise OverflowError("arrange: a count overflows int64 (in a loop)")
    elif code == OVF_CONS:
        raise OverflowError("consolidate: a sum of diffs overflows int64")
    elif code == OVF_MAP:
        raise OverflowError(MAP_OVERFLOW)
    elif code == OVF_PAIR:
        raise OverflowError(_JOIN_OVF)
    else:
        _reduce_overflow(code, nodes[ln, P_LOGIC])
    return tab, arena


@njit(cache=True, nogil=True)
def _fit_node(nodes, bufs, cn, ln, after):
    """While some buffer is big: before local node ``ln``'s step, its delta or
    schedule buffer fits the rows it is about to take; after it, its queue fits what
    it holds and its output scratch is given back (see :func:`_fit`)."""
    kind = nodes[ln, P_KIND]
    if kind == S_JOIN:
        if after:
            _fit(bufs, cn, nodes[ln, P_D], I0, I0)
        return
    q = nodes[ln, P_Q]
    d = nodes[ln, P_SCHED] if kind == S_REDUCE else nodes[ln, P_D]
    if not after:
        if cn[_bwords(d)] >= cn[SC_BIG]:
            _fit(bufs, cn, d, cn[_bn(q)], I0)
        return
    if cn[_bwords(q)] >= cn[SC_BIG]:
        _fit(bufs, cn, q, cn[_bn(q)], cn[_bn(q)])
    if kind == S_REDUCE and cn[_bwords(nodes[ln, P_D])] >= cn[SC_BIG]:
        _fit(bufs, cn, nodes[ln, P_D], I0, I0)


@leaf
def _next_round(lp, cn, kmin):
    """The next round: the least iteration queued in the program's queues, not below
    ``kmin`` (-1: none)."""
    best = INF
    for x in range(lp[F_QUEUES], lp[F_QUEUES + 1]):
        q = lp[x]
        if cn[_bn(q)] and cn[_bmin(q)] < best:
            best = cn[_bmin(q)]
    if best == INF:
        return np.int64(-1)
    return max(best, kmin)


@list_leaf
def _enter(nodes, lp, bufs, cn, ups, ptr, ln, t):
    """Enter ``ln``'s updates at outer time ``t`` (from row ``ptr[x]`` of its updates
    ``ups[x]``), staged and emitted. Returns how many (``ptr[x]`` is then past them,
    and ``cn[SC_REQ]`` is 1 when they were the last and many: the caller drops the
    input), or a request (nothing taken)."""
    x = nodes[ln, P_ENTER]
    d, tt, f = list_item(ups, x)
    a = ptr[x]
    b = a
    while b < f.shape[0] and tt[b, 0] == t:
        b += 1
    if b == a:
        return 0
    sb = nodes[ln, P_D]
    if list_item(bufs, sb).shape[0] < b - a:
        cn[SC_REQ] = sb
        cn[SC_REQ + 1] = b - a
        cn[SC_REQ + 2] = 0
        return RQ_GROW
    _stage(d, f, a, b, list_item(bufs, sb))
    code = _emit(nodes, lp, bufs, cn, ln, sb, b - a, t)
    if code != DONE:
        return code
    g = cn[SC_STATS] + 4 * nodes[ln, P_NODE]
    cn[g] += 1
    cn[g + 1] += b - a
    ptr[x] = b
    cn[SC_REQ] = 1 if b == f.shape[0] and b * (d.shape[1] + 3) >= cn[SC_BIG] else 0
    return b - a


@leaf
def _stage(d, f, a, b, out):
    """Rows ``(0, f[r], d[r])`` for ``a <= r < b`` into ``out``."""
    w = d.shape[1]
    for r in range(a, b):
        o = r - a
        out[o, 0] = 0
        out[o, 1] = f[r]
        for c in range(w):
            out[o, 2 + c] = d[r, c]


@njit(cache=True, nogil=True)
def leave_rows(buf, n, w, step):
    """A leave's rows ``buf[:n]`` (``(iteration, diff, data[w], t)``) as a batch
    ``(data, times (t, iteration), diffs)``. ``buf`` is read in parts of ``step`` rows,
    each given back once copied when ``step < n`` (a load's output is large): ``buf``
    is dead afterwards."""
    d = np.empty((n, w), np.int64)
    tt = np.empty((n, 2), np.int64)
    f = np.empty(n, np.int64)
    r0 = np.int64(0)
    while r0 < n:
        r1 = min(n, r0 + step)
        for r in range(r0, r1):
            tt[r, 0] = buf[r, 2 + w]
            tt[r, 1] = buf[r, 0]
            f[r] = buf[r, 1]
            for c in range(w):
                d[r, c] = buf[r, 2 + c]
        if step < n:
            release_rows(buf, r0, r1)
        r0 = r1
    return d, tt, f


@njit(cache=True)
def new_counters(lp, widths, n_nodes):
    """The counters ``cn`` of loop program ``lp`` for buffers of row widths ``widths``
    (16 rows each, as ``kernels.runtime.add_seq_loop`` makes them), nothing queued, and
    statistics for ``n_nodes`` nodes (see C_BUF)."""
    big = _fld(lp, F_MISC)[2]
    nb = widths.shape[0]
    cn = np.zeros(C_BUF + 3 * nb + 4 * n_nodes, np.int64)
    cn[SC_BIG] = big
    cn[SC_STATS] = C_BUF + 3 * nb
    for x in range(nb):
        cn[_bmin(x)] = INF
        cn[_bwords(x)] = 16 * widths[x]
        if cn[_bwords(x)] >= big:
            cn[SC_NBIG] += 1
    return cn


@njit(cache=True, nogil=True)
def buf_count(cn, x):
    """Rows held by buffer ``x``."""
    return cn[_bn(x)]


@njit(cache=True, nogil=True)
def set_buf_count(cn, x, n):
    """Set the rows held by buffer ``x`` (a leave's, once taken out)."""
    cn[_bn(x)] = n


@njit(cache=True, nogil=True)
def put_buf(bufs, cn, x, b):
    """Make ``b`` buffer ``x`` (from outside the loop: see :func:`_put`)."""
    _put(bufs, cn, x, b)


@list_leaf
def _rounds(nodes, lp, bufs, cn, tab, arena, meta, t, maxit, loop, info):
    """The rounds of outer time ``t`` from round ``cn[SC_J]`` until the time is done
    (DONE) or something must be done outside a leaf: a step's request, R_LIMIT, R_WARN
    or, while some buffer is big, R_FIT_PRE / R_FIT_POST / R_IDLE. Resumes where it
    returned (``cn[SC_PH]``, ``cn[SC_LN]``, ``cn[SC_SUB]``; a step at its stage)."""
    nl = nodes.shape[0]
    while cn[SC_J] >= 0:
        j = cn[SC_J]
        if cn[SC_PH] == PH_START:
            if maxit >= 0 and j >= maxit:
                info[0] = loop
                info[1] = j
                return R_LIMIT
            if maxit < 0 and loop_call_due(info, loop, j):
                return R_WARN
            meta[M_EPOCH] += 1
            cn[SC_PH] = PH_STEPS
            cn[SC_LN] = 0
            cn[SC_SUB] = 0
        if cn[SC_PH] == PH_STEPS:
            while cn[SC_LN] < nl:
                ln = cn[SC_LN]
                if cn[SC_SUB] == 0:
                    # (the checks skip nodes without work this round)
                    kind = nodes[ln, P_KIND]
                    if kind == S_ARRANGE or kind == S_CONSOL or kind == S_FEEDBACK:
                        q = nodes[ln, P_Q]
                        work = cn[_bn(q)] != 0 and cn[_bmin(q)] <= j
                        if not work:
                            cn[_bn(nodes[ln, P_D])] = 0
                    elif kind == S_JOIN:
                        work = cn[_bn(nodes[nodes[ln, P_LEFT], P_D])] != 0 or \
                            cn[_bn(nodes[nodes[ln, P_RIGHT], P_D])] != 0
                    elif kind == S_REDUCE:
                        q = nodes[ln, P_Q]
                        work = cn[_bn(nodes[nodes[ln, P_ARR], P_D])] != 0 or \
                            (cn[_bn(q)] != 0 and cn[_bmin(q)] <= j)
                    else:
                        cn[SC_LN] = ln + 1
                        continue
                    if not work:
                        if cn[SC_NBIG]:
                            cn[SC_SUB] = 2
                            return R_IDLE
                        cn[SC_LN] = ln + 1
                        continue
                    cn[SC_STAGE] = 0
                    cn[SC_SUB] = 1
                    if cn[SC_NBIG]:
                        return R_FIT_PRE
                if cn[SC_SUB] == 1:
                    code = _step(nodes, lp, bufs, cn, tab, arena, meta, ln, t, j)
                    if code != DONE:
                        return code
                    cn[SC_SUB] = 2
                    if cn[SC_NBIG]:
                        return R_FIT_POST
                cn[SC_SUB] = 0
                cn[SC_LN] = ln + 1
            cn[SC_PH] = PH_INSERTS
            cn[SC_LN] = 0
            cn[SC_SUB] = 0
        # deltas of arrangements not inserted by their reader go in now
        while cn[SC_LN] < nl:
            ln = cn[SC_LN]
            if nodes[ln, P_KIND] == S_ARRANGE:
                d = nodes[ln, P_D]
                if cn[_bn(d)] and nodes[ln, P_FUSED] == 0:
                    if cn[SC_SUB] == 0:
                        cn[SC_STAGE] = -1
                        cn[SC_SUB] = 1
                    code = _step(nodes, lp, bufs, cn, tab, arena, meta, ln, t, j)
                    if code != DONE:
                        return code
                cn[_bn(d)] = 0
            cn[SC_SUB] = 0
            cn[SC_LN] = ln + 1
        info[2] += 1
        cn[SC_J] = _next_round(lp, cn, j + 1)
        cn[SC_PH] = PH_START
    return DONE


@njit(cache=True)
def run_times(lp, bufs, cn, tab, arena, meta, ups, times, stats, info):
    """Run a loop over the outer times ``times`` (ascending): ``ups[e]`` holds the
    updates of the loop's ``e``-th enter, sorted by time (``(data, times (t, 0),
    diffs)``). Leaves' rows accumulate in their buffers (their counts in ``cn``).
    Returns ``(status, tab, arena)``; ``status`` is OK or ITERATION_LIMIT (``info[0:2]``
    = loop, iteration). ``info[2]`` counts rounds; the steps' statistics, counted in
    ``cn``, are added to ``stats`` when the run returns."""
    nodes = _nodes(lp)
    misc = _fld(lp, F_MISC)
    loop = misc[0]
    maxit = misc[1]
    nl = nodes.shape[0]
    ne = len(ups)
    ptr = np.zeros(ne, np.int64)
    status = OK
    for ti in range(times.shape[0]):
        t = times[ti]
        for ln in range(nl):
            if nodes[ln, P_KIND] != S_ENTER:
                continue
            code = _enter(nodes, lp, bufs, cn, ups, ptr, ln, t)
            while code < 0:
                tab, arena = _serve(nodes, bufs, cn, tab, arena, meta, ln,
                                    np.int64(0), code)    # (not a literal: see _insert)
                code = _enter(nodes, lp, bufs, cn, ups, ptr, ln, t)
            if code == 0:
                continue
            if cn[SC_NBIG]:
                _drop_empty(bufs, cn, nodes[ln, P_D])
            if cn[SC_REQ] == 1:
                # all taken: a large input (a load) is not held for the rest of the run
                x = nodes[ln, P_ENTER]
                w = ups[x][0].shape[1]
                ups[x] = (np.empty((0, w), np.int64), np.empty((0, 2), np.int64),
                          np.empty(0, np.int64))
                ptr[x] = 0
        cn[SC_J] = _next_round(lp, cn, np.int64(0))
        cn[SC_PH] = PH_START
        while True:
            # (the rounds run in a leaf; what needs allocation or Python is done here,
            # between calls, and is rare)
            code = _rounds(nodes, lp, bufs, cn, tab, arena, meta, t, maxit, loop, info)
            if code == DONE:
                break
            if code == R_LIMIT:
                status = ITERATION_LIMIT
                break
            ln = cn[SC_LN]
            if code == R_WARN:
                _cb_warn(loop, cn[SC_J])
            elif code == R_FIT_PRE:
                _fit_node(nodes, bufs, cn, ln, BFALSE)
            elif code == R_FIT_POST:
                _fit_node(nodes, bufs, cn, ln, BTRUE)
            elif code == R_IDLE:
                _drop_idle(nodes, bufs, cn, ln)
            else:
                tab, arena = _serve(nodes, bufs, cn, tab, arena, meta, ln, cn[SC_J], code)
        if status != OK:
            break
    # the steps' statistics (kept in cn, so that they are not lost if a step raises)
    so = cn[SC_STATS]
    for g in range(stats.shape[0]):
        for k in range(4):
            stats[g, k] += cn[so + 4 * g + k]
            cn[so + 4 * g + k] = 0
    # (the leaves' rows, summed where one follows its like (_leave_copy), are
    # consolidated outside in one sort for the whole run: see kernels.runtime, K_LEAVE)
    return status, tab, arena

"""``min``, ``max`` and ``top_k`` outside loops, read from the trace in value order.

Outside loops the native engine's times are one coordinate and an arrangement only
passes on updates at times its frontier has closed: when such a reduce steps, every
update already in its input trace is at a time before every update of the new batch.
The general reduce (:mod:`ddnumba.kernels.runtime`'s ``_reduce_gather`` and
``_accumulate``) copies a key's whole input history, sorts it and accumulates all of
it at every due time: a change to a key holding a million values cost ~60 ms, and a
batch of 100 changes to it 2 s (the accumulation is per due time).

These three operators only need the first positive rows in value order. Their trace
is shared with their output, rows ``(key, tag, vals)`` (tag 0 input, 1 output; see
``ddnumba.native``), and each batch is sorted, so a key's input rows in a batch are a
contiguous range already in value order. A key with more than SMALL rows in the trace
is *big*: ``_reduce_gather`` gathers only its output rows and its new updates, and
:func:`ordered_want` merges its input ranges of every batch (and the new updates)
lazily, one value row at a time, smallest first (largest first for ``max``), stopping
as soon as every due time of the key has its answer. A small key is gathered whole and
walked the same way (as cheap as the general reduce). A value row's count at a due
time is the sum of its entries at times ``<=`` it, so rows whose count is not positive
are passed over, as the general reduce does.

The work per big key is the rows walked plus a bisection per batch, whatever the size
of the group. The rows walked are usually the first few, because the walk starts where
the key's output is. Rows taken out stay in the trace until a merge brings them together
with the rows that put them in, which for a row put in long ago (in a large batch) can
take as long as the stream has run; walked, they made taking out the smallest value run
after run cost more every run (a key of 1e6 values, one taken out a run: 0.2 ms a run at
first, 2.1 ms after 5,000 runs). But the key's output history, gathered anyway, holds
its output now, and every update in the trace is at a time before the due times: so
every input row before the output's first row (its first value column, in the walk's
order; every row when the output is empty) has a count that is not positive at every
due time, unless a new update reaches it. That is the key's *skip*: the walk starts
past those rows in each batch (galloping from the batch's first row, so a batch with
nothing to skip costs the one row the walk reads anyway), and a new update's value row
among the skipped rows (a value put back, say) is read with its entries in every
batch, found by bisection. A skipped row's count can be negative, so its old entries
are needed.

``min``/``max`` read column 0 of the values (the first column in the sort order);
``Collection.min``/``max`` of another column move that column first with a selection.

The Python engine's root reduces read their traces the same way
(:func:`trie_want`): its batches are tries, where a key's value rows are a contiguous,
sorted range (:func:`val_ranges`) and each holds its own updates, so every key is read
lazily across the batches (in place, without gathering its group), past its skip as
well: its output trace is gathered before the walk, and since its batches already hold
the new updates, each key's new value rows come as one more source, read only among the
skipped rows. The batches reach the kernel as a typed list built in compiled code
(:func:`batch_list`, :func:`push_batch`).
"""
import numpy as np
from numba import njit
from numba.typed import List

from .cursor import _find_keys
from .rows import I0, add_checked, leaf

__all__ = ["ordered_want", "trie_want", "val_ranges", "batch_list", "push_batch", "O_MIN",
           "O_MAX", "O_TOP_K"]

# A key with at most SMALL input rows in the trace is gathered and sorted, as by any
# reduce (runtime._reduce_gather); a larger one is merged lazily from its batches.
SMALL = 64
O_MIN = 0
O_MAX = 1
O_TOP_K = 2


@leaf
def _cmp_rows(a, i, ao, b, j, bo, w):
    """Compare ``a[i, ao:ao + w]`` with ``b[j, bo:bo + w]``: -1, 0 or 1."""
    for x in range(w):
        u = a[i, ao + x]
        v = b[j, bo + x]
        if u != v:
            return -1 if u < v else 1
    return 0


@leaf
def _sort_by_time(et, ef, n):
    """Insertion sort of the entries ``(et, ef)[:n]`` by time (a row has few)."""
    for i in range(1, n):
        t = et[i]
        f = ef[i]
        j = i
        while j > 0 and et[j - 1] > t:
            et[j] = et[j - 1]
            ef[j] = ef[j - 1]
            j -= 1
        et[j] = t
        ef[j] = f


@njit(cache=True, nogil=True)
def _grow(a, n):
    b = np.empty(max(2 * a.shape[0], n), np.int64)
    b[:a.shape[0]] = a
    return b


@njit(cache=True, nogil=True)
def _grow2(a, n):
    b = np.empty((max(2 * a.shape[0], n), a.shape[1]), np.int64)
    b[:a.shape[0]] = a
    return b


# A key's *skip* (see the module's text): its input rows whose first value column is
# below ``b`` (above it for ``max``) are not positive at the key's due times unless new
# updates reach them. state: SK_ALL (no row of the trace is positive: the output is
# empty), SK_BELOW (rows on the far side of ``b``), SK_NONE (nothing is skipped).
SK_ALL = 0
SK_BELOW = 1
SK_NONE = 2


@njit(cache=True, nogil=True, inline="always")
def _out_skip(o_offs, o_vals, o_f, kk, mode):
    """Key ``kk``'s skip from its output history ``o_*[o_offs[kk]:o_offs[kk + 1]]``
    (rows sorted by value): ``(state, b)``, ``b`` the first column of the least (greatest
    for ``max``) output row with a positive count over the whole history, which is the
    output now. Every input row before it in the walk's order has a count that is not
    positive over the trace, or the output would hold it."""
    if o_vals.shape[1] == 0:
        return SK_NONE, np.int64(0)
    state = SK_ALL
    b = np.int64(0)
    i = o_offs[kk]
    z = o_offs[kk + 1]
    while i < z:
        s = np.int64(0)
        j = i
        while j < z and _cmp_rows(o_vals, j, I0, o_vals, i, I0, o_vals.shape[1]) == 0:
            s, ov = add_checked(s, o_f[j])
            if ov:
                return SK_NONE, np.int64(0)
            j += 1
        if s > 0:
            state = SK_BELOW
            b = o_vals[i, 0]
            if mode != O_MAX:
                break
        i = j
    return state, b


@leaf
def _skip_edge(bd, col, a, z, b, state, desc):
    """The edge of the skipped rows among the sorted rows ``a:z`` of ``bd`` (column
    ``col``: the first value column): the skipped ones are ``a:edge`` (``edge:z`` for
    ``max``). Searched from the walk's first row outwards (galloping, then bisecting),
    so a batch with nothing to skip costs one row, its first, which the walk reads
    anyway, and one with ``s`` rows to skip ~2 log2(s)."""
    if state == SK_NONE:
        return z if desc else a
    if state == SK_ALL:
        return a if desc else z
    if desc:
        # skipped: the rows with col > b, at the top
        if a == z or bd[z - 1, col] <= b:
            return z
        hi = z - 1                   # a skipped row
        g = np.int64(1)
        while hi - g >= a and bd[hi - g, col] > b:
            hi -= g
            g *= 2
        lo = max(a, hi - g)          # rows lo:hi hold the edge; hi is skipped
        while lo < hi:
            mid = (lo + hi) >> 1
            if bd[mid, col] > b:
                hi = mid
            else:
                lo = mid + 1
        return hi
    # skipped: the rows with col < b, at the bottom
    if a == z or bd[a, col] >= b:
        return a
    lo = a + 1                       # a is skipped
    g = np.int64(1)
    while lo + g - 1 < z and bd[lo + g - 1, col] < b:
        lo += g
        g *= 2
    hi = min(z, lo + g - 1)
    while lo < hi:
        mid = (lo + hi) >> 1
        if bd[mid, col] < b:
            lo = mid + 1
        else:
            hi = mid
    return lo


@leaf
def _in_skip(cur, state, b, desc):
    """Whether value row ``cur`` lies among the skipped rows."""
    if state == SK_NONE:
        return False
    if state == SK_ALL:
        return True
    return cur[0, 0] > b if desc else cur[0, 0] < b


@leaf
def _find_row(bd, col, a, z, cur, vw):
    """The first of the sorted rows ``a:z`` of ``bd`` (values from column ``col``) that
    is not less than ``cur``."""
    while a < z:
        mid = (a + z) >> 1
        if _cmp_rows(bd, mid, col, cur, I0, I0, vw) < 0:
            a = mid + 1
        else:
            z = mid
    return a


@njit(cache=True, nogil=True, inline="always")
def _push(et, ef, ne, t, f):
    """Append the entry ``(t, f)`` at ``ne``, the arrays grown as needed."""
    if ne == et.shape[0]:
        et = _grow(et, ne + 1)
        ef = _grow(ef, ne + 1)
    et[ne] = t
    ef[ne] = f
    return et, ef, ne + 1


@njit(cache=True, nogil=True, inline="always")
def _start_key(un, left, D, mode, k):
    """A key's ``D`` due times, all unresolved (``un``), each with ``k`` rows left to
    find for ``top_k`` and one for ``min``/``max``; the arrays grown as needed."""
    if un.shape[0] < D:
        un = np.empty(2 * D, np.int64)
        left = np.empty(2 * D, np.int64)
    for j in range(D):
        un[j] = j
        left[j] = k if mode == O_TOP_K else 1
    return un, left


@njit(cache=True, nogil=True, inline="always")
def _resolve(et, ef, ne, un, nun, left, due_t, d0, mode, cur, ow, r_due, r_vals, r_c, nr,
             cnt_per_due):
    """One value row ``cur`` with its entries ``(et, ef)[:ne]`` (sorted by time here):
    its count at each unresolved due time ``un[:nun]`` (ascending; ``due_t[d0 + j, 0]``),
    and a result row ``(d0 + j, cur[:ow], count)`` for each due time it is positive at
    (count 1 for ``min``/``max``, at most what is ``left[j]`` for ``top_k``). Due times
    with nothing left are dropped from ``un``. Returns ``(nun, nr, r_due, r_vals,
    r_c)`` (the result arrays grown as needed)."""
    _sort_by_time(et, ef, ne)
    acc = np.int64(0)
    e = np.int64(0)
    w = np.int64(0)
    for q in range(nun):
        j = un[q]
        tau = due_t[d0 + j, 0]
        while e < ne and et[e] <= tau:
            acc, ov = add_checked(acc, ef[e])
            if ov:
                raise OverflowError("reduce: a sum of input diffs overflows int64")
            e += 1
        if acc <= 0 and e == ne:
            # no later due time sees this row positive (a row retracted in an
            # earlier run, say, still in the trace): the rest stay unresolved
            if w != q:
                for q2 in range(q, nun):
                    un[w + q2 - q] = un[q2]
            w += nun - q
            break
        if acc > 0:
            c = acc if mode == O_TOP_K else np.int64(1)
            if c > left[j]:
                c = left[j]
            left[j] -= c
            if nr == r_c.shape[0]:
                r_due = _grow(r_due, nr + 1)
                r_c = _grow(r_c, nr + 1)
                r_vals = _grow2(r_vals, nr + 1)
            r_due[nr] = d0 + j
            for x in range(ow):
                r_vals[nr, x] = cur[0, x]
            r_c[nr] = c
            nr += 1
            cnt_per_due[d0 + j] += 1
        if left[j] > 0:
            un[w] = j
            w += 1
    return w, nr, r_due, r_vals, r_c


@njit(cache=True, nogil=True)
def _by_due(want_offs, cnt_per_due, r_due, r_vals, r_c, nr, ow):
    """The result rows grouped by due index (stable: a due's rows stay in walk order,
    i.e. value order): fills ``want_offs`` and returns ``(vals, counts)``."""
    M = cnt_per_due.shape[0]
    for d in range(M):
        want_offs[d + 1] = want_offs[d] + cnt_per_due[d]
    fill = want_offs[:M].copy()
    vals = np.empty((nr, ow), np.int64)
    counts = np.empty(nr, np.int64)
    for r in range(nr):
        q = fill[r_due[r]]
        fill[r_due[r]] = q + 1
        for x in range(ow):
            vals[q, x] = r_vals[r, x]
        counts[q] = r_c[r]
    return vals, counts


@njit(cache=True, nogil=True)
def ordered_want(spine, lo, hi, big, off, vw, due_offs, due_t, h_offs, h_vals, h_t, h_f,
                 o_offs, o_vals, o_f, mode, k):
    """The desired output of ``min``/``max`` (of value column 0) or ``top_k(k)`` at
    every due time of every key, in the layout of ``kernels.reduce._logic_*``:
    ``(want_offs, vals, counts, n)``, ``want_offs`` indexed by the global due index.

    ``spine``: the input trace's batches, every update at a time before the key's due
    times; a ``big`` key ``kk``'s input rows in batch ``b`` are ``lo[b, kk]:hi[b, kk]``,
    sorted by their values, which start at column ``off``; ``due_offs`` / ``due_t`` (a
    column) each key's due times, ascending; ``h_*`` each key's input history as
    ``_reduce_gather`` gathered it, sorted by ``(vals, t)`` (``h_t`` a column): a big
    key's new updates, a small key's whole history; ``o_*`` each key's output history,
    the same way (a big key's trace rows on the near side of its output are skipped,
    see the module's text). ``mode``: O_MIN, O_MAX or O_TOP_K (the ``k`` smallest rows,
    with multiplicity). Returns ``(want_offs, vals, counts, n, walked)``: ``walked``
    counts the value rows read, for tests.
    """
    nk = due_offs.shape[0] - 1
    nsp = len(spine)
    M = due_offs[nk]
    ow = 1 if mode != O_TOP_K else vw
    desc = mode == O_MAX
    want_offs = np.zeros(M + 1, np.int64)
    cnt_per_due = np.zeros(M, np.int64)
    # results, in walk order (per key: value-major); sorted by due afterwards
    r_due = np.empty(16, np.int64)
    r_vals = np.empty((16, ow), np.int64)
    r_c = np.empty(16, np.int64)
    nr = np.int64(0)
    pos = np.empty(nsp + 1, np.int64)
    end = np.empty(nsp + 1, np.int64)
    edge = np.empty(nsp + 1, np.int64)
    walked = np.int64(0)
    cur = np.empty((1, vw), np.int64)
    head = np.empty((nsp + 1, vw), np.int64)
    et = np.empty(16, np.int64)
    ef = np.empty(16, np.int64)
    un = np.empty(16, np.int64)
    left = np.empty(16, np.int64)
    # the new updates as one more source, typed as the trace's batches are
    hv = np.ascontiguousarray(h_vals)
    ht = np.ascontiguousarray(h_t)
    hf = np.ascontiguousarray(h_f)
    for kk in range(nk):
        d0 = due_offs[kk]
        D = due_offs[kk + 1] - d0
        if D == 0:
            continue
        un, left = _start_key(un, left, D, mode, k)
        nun = D
        # Source heads: pos moves up (down for max) to end; a small key's rows were
        # all gathered (h_*: its only source, s0 = nsp), a big one's trace rows are
        # read in place.
        s0 = np.int64(0) if big[kk] else nsp
        state = SK_NONE
        bnd = np.int64(0)
        if big[kk]:
            state, bnd = _out_skip(o_offs, o_vals, o_f, kk, mode)
        for s in range(s0, nsp):
            edge[s] = _skip_edge(spine[s][0], off, lo[s, kk], hi[s, kk], bnd, state, desc)
            if desc:
                pos[s] = edge[s] - 1
                end[s] = lo[s, kk] - 1
            else:
                pos[s] = edge[s]
                end[s] = hi[s, kk]
        a0 = h_offs[kk]
        a1 = h_offs[kk + 1]
        if desc:
            pos[nsp] = a1 - 1
            end[nsp] = a0 - 1
        else:
            pos[nsp] = a0
            end[nsp] = a1
        # each source's head row (the batches are fetched again only to advance)
        for s in range(s0, nsp):
            if pos[s] != end[s]:
                bd = spine[s][0]
                for x in range(vw):
                    head[s, x] = bd[pos[s], off + x]
        if pos[nsp] != end[nsp]:
            for x in range(vw):
                head[nsp, x] = hv[pos[nsp], x]
        while nun > 0:
            # the next value row: the least (greatest) head
            found = False
            for s in range(s0, nsp + 1):
                if pos[s] == end[s]:
                    continue
                if found:
                    c = _cmp_rows(head, s, I0, cur, I0, I0, vw)
                    better = c > 0 if desc else c < 0
                else:
                    better = True
                if better:
                    for x in range(vw):
                        cur[0, x] = head[s, x]
                    found = True
            if not found:
                break
            # its entries in every source whose head it is (the only batches fetched)
            ne = np.int64(0)
            for s in range(s0, nsp + 1):
                if pos[s] == end[s] or _cmp_rows(head, s, I0, cur, I0, I0, vw) != 0:
                    continue
                if s < nsp:
                    bat = spine[s]
                    bd = bat[0]
                    bt = bat[1]
                    bf = bat[2]
                    o = off
                else:
                    bd = hv
                    bt = ht
                    bf = hf
                    o = I0
                while pos[s] != end[s] and _cmp_rows(bd, pos[s], o, cur, I0, I0, vw) == 0:
                    et, ef, ne = _push(et, ef, ne, bt[pos[s], 0], bf[pos[s]])
                    pos[s] += -1 if desc else 1
                if pos[s] != end[s]:
                    for x in range(vw):
                        head[s, x] = bd[pos[s], o + x]
            if s0 < nsp and _in_skip(cur, state, bnd, desc):
                # a new update among the skipped rows: their entries for it
                for s in range(s0, nsp):
                    a = edge[s] if desc else lo[s, kk]
                    z = hi[s, kk] if desc else edge[s]
                    bat = spine[s]
                    bd = bat[0]
                    r = _find_row(bd, off, a, z, cur, vw)
                    while r < z and _cmp_rows(bd, r, off, cur, I0, I0, vw) == 0:
                        et, ef, ne = _push(et, ef, ne, bat[1][r, 0], bat[2][r])
                        r += 1
            walked += 1
            nun, nr, r_due, r_vals, r_c = _resolve(et, ef, ne, un, nun, left, due_t, d0,
                                                   mode, cur, ow, r_due, r_vals, r_c, nr,
                                                   cnt_per_due)
    vals, counts = _by_due(want_offs, cnt_per_due, r_due, r_vals, r_c, nr, ow)
    return want_offs, vals, counts, nr, walked


@njit(cache=True, nogil=True)
def trie_want(bats, lo, hi, due_offs, due_t, vw, o_offs, o_vals, o_f, nd, kw, mode, k):
    """:func:`ordered_want` for the Python engine's traces, whose batches are tries:
    ``bats[b] = (vals, val_offs, times, diffs)`` of batch ``b`` (a value row once per
    key, its updates at ``val_offs[i]:val_offs[i + 1]``, times one column), key ``kk``'s
    value rows in it ``lo[b, kk]:hi[b, kk]`` (sorted). Every update in them is at a time
    no later than the key's due times ``due_t[due_offs[kk]:due_offs[kk + 1]]``
    (ascending), and the batches hold the new updates too. Each key's value rows are
    merged lazily across the batches, smallest first (largest first for ``max``), until
    every due time has its answer. ``o_*``: each key's output history before the new
    updates (rows sorted by value), which sets its skip; ``nd``: the new updates' rows
    (``kw`` key columns, then the values; sorted, the keys those of ``due_offs``), whose
    value rows are read among the skipped rows. Returns ``(want_offs, vals, counts, n,
    walked)`` as :func:`ordered_want`."""
    nk = due_offs.shape[0] - 1
    nb = len(bats)
    M = due_offs[nk]
    ow = 1 if mode != O_TOP_K else vw
    desc = mode == O_MAX
    step = np.int64(-1) if desc else np.int64(1)
    want_offs = np.zeros(M + 1, np.int64)
    cnt_per_due = np.zeros(M, np.int64)
    r_due = np.empty(16, np.int64)
    r_vals = np.empty((16, ow), np.int64)
    r_c = np.empty(16, np.int64)
    nr = np.int64(0)
    # each key's new rows: nd[p_offs[kk]:p_offs[kk + 1]]
    p_offs = np.zeros(nk + 1, np.int64)
    g = np.int64(0)
    for r in range(1, nd.shape[0]):
        if _cmp_rows(nd, r, I0, nd, r - 1, I0, kw) != 0:
            g += 1
            if g >= nk:
                raise ValueError("trie_want: the new rows hold more keys than due_offs")
            p_offs[g] = r
    if nd.shape[0] > 0 and g != nk - 1:
        raise ValueError("trie_want: the new rows and due_offs have other keys")
    p_offs[nk] = nd.shape[0]
    # sources: the batches, then the new value rows among the skipped ones (nb)
    pos = np.empty(nb + 1, np.int64)
    end = np.empty(nb + 1, np.int64)
    edge = np.empty(nb + 1, np.int64)
    walked = np.int64(0)
    cur = np.empty((1, vw), np.int64)
    et = np.empty(16, np.int64)
    ef = np.empty(16, np.int64)
    un = np.empty(16, np.int64)
    left = np.empty(16, np.int64)
    for kk in range(nk):
        d0 = due_offs[kk]
        D = due_offs[kk + 1] - d0
        if D == 0:
            continue
        un, left = _start_key(un, left, D, mode, k)
        nun = D
        state, bnd = _out_skip(o_offs, o_vals, o_f, kk, mode)
        for b in range(nb):
            edge[b] = _skip_edge(bats[b][0], I0, lo[b, kk], hi[b, kk], bnd, state, desc)
            if desc:
                pos[b] = edge[b] - 1
                end[b] = lo[b, kk] - 1
            else:
                pos[b] = edge[b]
                end[b] = hi[b, kk]
        # the new value rows among the skipped ones, in the walk's order
        e = _skip_edge(nd, kw, p_offs[kk], p_offs[kk + 1], bnd, state, desc)
        if desc:
            pos[nb] = p_offs[kk + 1] - 1
            end[nb] = e - 1
        else:
            pos[nb] = p_offs[kk]
            end[nb] = e
        while nun > 0:
            # the next value row: the least (greatest) head of the sources
            found = False
            for b in range(nb + 1):
                if pos[b] == end[b]:
                    continue
                bv = bats[b][0] if b < nb else nd
                bo = 0 if b < nb else kw
                better = True
                if found:
                    c = _cmp_rows(bv, pos[b], bo, cur, I0, I0, vw)
                    better = c > 0 if desc else c < 0
                if better:
                    for x in range(vw):
                        cur[0, x] = bv[pos[b], bo + x]
                    found = True
            if not found:
                break
            # its updates in every batch whose head it is
            ne = np.int64(0)
            for b in range(nb):
                if pos[b] == end[b]:
                    continue
                bat = bats[b]
                if _cmp_rows(bat[0], pos[b], I0, cur, I0, I0, vw) != 0:
                    continue
                i = pos[b]
                for u in range(bat[1][i], bat[1][i + 1]):
                    et, ef, ne = _push(et, ef, ne, bat[2][u, 0], bat[3][u])
                pos[b] = i + step
            if pos[nb] != end[nb] and _cmp_rows(nd, pos[nb], kw, cur, I0, I0, vw) == 0:
                # a new value row among the skipped ones (once for all its times): its
                # updates in every batch
                while pos[nb] != end[nb] and \
                        _cmp_rows(nd, pos[nb], kw, cur, I0, I0, vw) == 0:
                    pos[nb] += step
                for b in range(nb):
                    bat = bats[b]
                    a = edge[b] if desc else lo[b, kk]
                    z = hi[b, kk] if desc else edge[b]
                    i = _find_row(bat[0], I0, a, z, cur, vw)
                    if i < z and _cmp_rows(bat[0], i, I0, cur, I0, I0, vw) == 0:
                        for u in range(bat[1][i], bat[1][i + 1]):
                            et, ef, ne = _push(et, ef, ne, bat[2][u, 0], bat[3][u])
            walked += 1
            nun, nr, r_due, r_vals, r_c = _resolve(et, ef, ne, un, nun, left, due_t, d0,
                                                   mode, cur, ow, r_due, r_vals, r_c, nr,
                                                   cnt_per_due)
    vals, counts = _by_due(want_offs, cnt_per_due, r_due, r_vals, r_c, nr, ow)
    return want_offs, vals, counts, nr, walked


@njit(cache=True, nogil=True)
def val_ranges(keys, key_offs, queries, lo, hi):
    """The value rows ``lo[q]:hi[q]`` of each sorted query key ``queries[q]`` in a
    trie's ``(keys, key_offs)`` (empty where the key is absent)."""
    kidx = _find_keys(keys, queries)
    for q in range(kidx.shape[0]):
        i = kidx[q]
        if i >= 0:
            lo[q] = key_offs[i]
            hi[q] = key_offs[i + 1]
        else:
            lo[q] = 0
            hi[q] = 0


@njit(cache=True, nogil=True)
def batch_list(vals, val_offs, times, diffs):
    """A typed list holding one trie batch ``(vals, val_offs, times, diffs)`` (C-contiguous
    int64), for :func:`trie_want`. Built in compiled code: a typed list built from
    Python costs ~70 us an item, this ~5 us (:func:`push_batch` adds the others)."""
    out = List()
    out.append((vals, val_offs, times, diffs))
    return out


@njit(cache=True, nogil=True)
def push_batch(lst, vals, val_offs, times, diffs):
    """Append one more trie batch to a :func:`batch_list`."""
    lst.append((vals, val_offs, times, diffs))

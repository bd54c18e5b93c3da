"""Counts and sums outside loops over hashed state.

Outside loops the native engine's times are one coordinate, and an arrangement only
passes on updates at times its frontier has closed. When a ``count`` or ``sum`` steps,
every update it has seen before is therefore at a time earlier than every update of
the new batch: for this batch all of them are "now". So the operator needs no trace:
per key, the current count of every value with a non-zero count, and the current
output (the total, present while some value's count is non-zero), are all it reads.

They are kept in a hashed state (:mod:`ddnumba.kernels.hstate`, as sequential loops
keep theirs): one row per key (tag :data:`TAG`), block 0 the entries ``(vals, 0,
count)`` sorted by vals (no zero counts, so its length is the number of non-zero
values), block 1 the output: one entry ``(total, 0, 1)``, or none while the key has no
output. A batch costs a lookup per key and a bisection per touched value, whatever
the history behind them; the trace-based path (``runtime._reduce_agg``) looked every
touched value up in every batch of the input's and the output's traces, and kept both
traces merged.

A step reads every key of the batch and computes its corrections first, then writes
the new counts and outputs (:func:`~kernels.hstate.insert_delta`), so a batch whose
sums overflow raises before the state is touched.
"""
import numpy as np
from numba import njit

from .batch import sort_consolidate
from .hstate import RW_EXTRA, _cmp_entry, _find, blen, gc, insert_delta
from .rows import add_checked, mul_checked

__all__ = ["agg_step", "TAG"]

TAG = 1        # the state's only trace

_MSG_COUNT = "count/sum: a count overflows int64"
_MSG_TOTAL = "count/sum: a total overflows int64"


@njit(cache=True, nogil=True)
def _same(a, i, b, j, w):
    """Whether rows ``a[i]`` and ``b[j]`` agree on their first ``w`` columns (a plain
    call: inlined into a loop of a regular kernel, its array arguments would take
    reference counts on every call)."""
    for c in range(w):
        if a[i, c] != b[j, c]:
            return False
    return True


@njit(cache=True, nogil=True)
def _old_count(tab, arena, row, nd, x, kw, vw):
    """The count of the values of ``nd[x, kw:kw + vw]`` in block 0 of ``row`` (0 when
    absent): a bisection of the block, sorted by vals."""
    if row < 0:
        return np.int64(0)
    KW = tab.shape[1] - RW_EXTRA
    off = tab[row, KW + 1]
    lo = np.int64(0)
    hi = blen(tab, row, 0)
    n = hi
    while lo < hi:
        mid = (lo + hi) >> 1
        if _cmp_entry(arena, off + mid, nd, x, kw, vw, 0) < 0:
            lo = mid + 1
        else:
            hi = mid
    if lo < n and _cmp_entry(arena, off + lo, nd, x, kw, vw, 0) == 0:
        return arena[off + lo, arena.shape[1] - 1]
    return np.int64(0)


@njit(cache=True, nogil=True)
def _by_time(ts, r, e, order):
    """``order[:e - r]`` = the rows ``r .. e - 1`` sorted by ``ts[row, 0]`` (stable);
    no sort when they are in order already (a load's: one time)."""
    m = e - r
    ordered = True
    for x in range(r + 1, e):
        if ts[x, 0] < ts[x - 1, 0]:
            ordered = False
            break
    if ordered:
        for i in range(m):
            order[i] = r + i
    elif m <= 32:
        for i in range(m):
            x = r + i
            k = i
            while k > 0 and ts[order[k - 1], 0] > ts[x, 0]:
                order[k] = order[k - 1]
                k -= 1
            order[k] = x
    else:
        o = np.argsort(ts[r:e, 0], kind="mergesort")
        for i in range(m):
            order[i] = r + o[i]


@njit(cache=True, nogil=True, inline="always")
def _out_row(d1, n1, nd, r, kw, total, diff):
    """Append the block-1 write ``(0, diff, key of nd[r], total)``; returns the count."""
    d1[n1, 1] = diff
    for c in range(kw):
        d1[n1, 2 + c] = nd[r, c]
    d1[n1, 2 + kw] = total
    return n1 + 1


@njit(cache=True, nogil=True)
def agg_step(tab, arena, meta, nd, nt, nf, kw, vw, is_sum, col):
    """Step a count (``is_sum`` false) or a sum of value column ``col`` over the new
    updates ``(nd, nt, nf)``: rows ``(key[kw], vals[vw])`` sorted by data, times
    ``(t, 0)`` all later than everything the state holds.

    Returns ``(tab, arena, data, times, diffs)``: the state's arrays (new ones when
    they grew) and the output's changes, rows ``(key, total)`` sorted and
    consolidated. Raises ``OverflowError`` before changing the state when a count or
    a total leaves int64."""
    n = nf.shape[0]
    w = kw + vw
    KW = tab.shape[1] - RW_EXTRA
    # per touched value (indexed like the rows of its first update): count before,
    # count now, weight; per row: the touched value's index
    cnt = np.empty(n, np.int64)
    dsum = np.empty(n, np.int64)
    wv = np.empty(n, np.int64)
    vof = np.empty(n, np.int64)
    order = np.empty(n, np.int64)
    # corrections (key row, total, time, diff): at most two per row
    o_row = np.empty(2 * n, np.int64)
    o_tot = np.empty(2 * n, np.int64)
    o_t = np.empty(2 * n, np.int64)
    o_f = np.empty(2 * n, np.int64)
    no = np.int64(0)
    # the writes, rows (0, diff, key, vals) for block 0 and (0, diff, key, total) for
    # block 1, both in key order
    d0 = np.zeros((n, 2 + kw + max(vw, 1)), np.int64)
    n0 = np.int64(0)
    d1 = np.zeros((2 * n, 3 + kw), np.int64)
    n1 = np.int64(0)
    r = np.int64(0)
    while r < n:
        e = r + 1
        while e < n and _same(nd, r, nd, e, kw):
            e += 1
        row = _find(tab, TAG, nd, r, 0, kw)
        had = False
        tot = np.int64(0)
        nz = np.int64(0)
        if row >= 0:
            nz = blen(tab, row, 0)
            if blen(tab, row, 1) > 0:
                had = True
                tot = arena[tab[row, KW + 3], 0]
        # touched values: their counts before the batch
        x = r
        while x < e:
            y = x + 1
            while y < e and _same(nd, x, nd, y, w):
                y += 1
            cnt[x] = _old_count(tab, arena, row, nd, x, kw, vw)
            dsum[x] = 0
            wv[x] = nd[x, kw + col] if is_sum else np.int64(1)
            for z in range(x, y):
                vof[z] = x
            x = y
        # the key's updates in time order; the output after each distinct time
        _by_time(nt, r, e, order)
        tot0 = tot
        pres = had          # the output as emitted so far: present, and its total
        prev = tot
        i = np.int64(0)
        m = e - r
        while i < m:
            tau = nt[order[i], 0]
            while i < m and nt[order[i], 0] == tau:
                z = order[i]
                v = vof[z]
                f = nf[z]
                c = cnt[v]
                c2, o1 = add_checked(c, f)
                s2, o2 = add_checked(dsum[v], f)
                if o1 or o2:
                    raise OverflowError(_MSG_COUNT)
                nz += np.int64(c2 != 0) - np.int64(c != 0)
                cnt[v] = c2
                dsum[v] = s2
                pr, o3 = mul_checked(f, wv[v])
                tot, o4 = add_checked(tot, pr)
                if o3 or o4:
                    raise OverflowError(_MSG_TOTAL)
                i += 1
            now = nz > 0
            if now != pres or (now and tot != prev):
                if pres:
                    o_row[no] = r
                    o_tot[no] = prev
                    o_t[no] = tau
                    o_f[no] = -1
                    no += 1
                if now:
                    o_row[no] = r
                    o_tot[no] = tot
                    o_t[no] = tau
                    o_f[no] = 1
                    no += 1
                pres = now
                prev = tot
        # the writes: each touched value's net change; the output entry replaced
        for x in range(r, e):
            if vof[x] == x and dsum[x] != 0:
                d0[n0, 1] = dsum[x]
                for c in range(w):
                    d0[n0, 2 + c] = nd[x, c]
                n0 += 1
        gone = had and (not pres or prev != tot0)
        new = pres and (not had or prev != tot0)
        if gone and new and prev < tot0:
            n1 = _out_row(d1, n1, nd, r, kw, prev, 1)
            new = False
        if gone:
            n1 = _out_row(d1, n1, nd, r, kw, tot0, -1)
        if new:
            n1 = _out_row(d1, n1, nd, r, kw, prev, 1)
        r = e
    if n0:
        tab, arena = insert_delta(tab, arena, meta, TAG, 0, d0, n0, kw, vw, 0, _MSG_COUNT)
    if n1:
        tab, arena = insert_delta(tab, arena, meta, TAG, 1, d1, n1, kw, 1, 0, _MSG_TOTAL)
    tab, arena = gc(tab, arena, meta)
    data = np.empty((no, kw + 1), np.int64)
    times = np.zeros((no, 2), np.int64)
    for q in range(no):
        for c in range(kw):
            data[q, c] = nd[o_row[q], c]
        data[q, kw] = o_tot[q]
        times[q, 0] = o_t[q]
    d, t, f = sort_consolidate(data, times, o_f[:no].copy())
    return tab, arena, d, t, f

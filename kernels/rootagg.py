"""Counts, sums and distincts outside loops over hashed state.

Outside loops the native engine's times are one coordinate, and an arrangement only
passes on updates at times its frontier has closed. When a ``count`` or ``sum`` steps,
every update it has seen before is therefore at a time earlier than every update of
the new batch: for this batch all of them are "now". So the operator needs no trace:
the current count of every ``(key, vals)`` present, and per key its current total and
number of values present (the key has an output while that is positive), are all it
reads.

They are kept in two open-addressing hash tables with linear probing (the state's
``(tab, arena, meta)`` in the runtime's list of hashed states, laid out differently
from :mod:`ddnumba.kernels.hstate`'s):

* ``tab[cap, max(kw + vw, 1) + 1]``, the values: the data row (padded) and its count.
  A count is never zero, so a zero count marks an empty slot;
* ``arena[kcap, max(kw, 1) + 2]``, the keys: the key (padded), its number of values
  present (never zero either: the empty mark) and its total.

A touched value costs one probe (its count is read and rewritten in one visit), and
so does a key, whatever the history behind them; a group of a million values costs no
more per change than a group of one (a block per key, as the loops keep, would move a
whole group's entries to insert one). Deleting
shifts the following entries of the probe run back (no tombstones), so the tables hold
the live state only; they grow (at least doubling) when 3/4 full and shrink when less
than 1/8 full, and both are sized for a whole batch before it is applied, so a load
grows them once.

A ``distinct`` (rows present while their count is positive) keeps the first table
only, one row per distinct row present with its count: its output changes exactly
where a row's count turns positive or stops being so, which the row's own updates in
time order tell (:func:`distinct_step`).

A batch that overflows raises part-way, with some keys written: the dataflow then
refuses further runs (``Dataflow.run``), as for every error inside a run.
"""
import numpy as np
from numba import njit

from .hooks import alloc2d, release_rows
from .hstate import MAX_SLOTS, _hash, _move_step, _slot, grid_cap, place_row
from .rows import BTRUE, add_checked, leaf, mul_checked, prefetch_row

__all__ = ["agg_step", "distinct_step", "M_VALUES", "M_KEYS"]

# meta words (the runtime's hashed-state counters; index 3 is read as its records)
M_VALUES = 3    # values present (rows of tab)
M_KEYS = 0      # keys with an output (rows of arena)
M_INIT = 1      # 1 once the tables have this module's layout

_MSG_COUNT = "count/sum: a count overflows int64"
_MSG_TOTAL = "count/sum: a total overflows int64"
_MSG_DISTINCT = "distinct: a count overflows int64"
_MIN_SLOTS = 16
# A batch's rows probe the tables at random places, which at scale lie beyond the
# caches: the kernels prefetch the home slots of the row PF_AHEAD rows further (its
# value and its key), so that a few of these misses are in flight at once. Tables
# of fewer slots stay in cache, where the extra hashing only costs.
PF_AHEAD = 8
PF_MIN_SLOTS = 1 << 15
# A key's corrections in a batch are sorted by insertion up to this many, else by a
# merge sort first.
_ISORT_MAX = 32


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
def _probe(t, src, i, w):
    """The slot of ``src[i, :w]`` in table ``t`` (rows: ``w`` data words, then values
    whose first word is non-zero in a used slot), or ``-1 - slot`` of the empty slot
    where it would go."""
    cap = t.shape[0]
    b = _slot(_hash(src, i, 0, w, w), cap)
    while True:
        if t[b, w] == 0:
            return -1 - b
        same = True
        for c in range(w):
            if t[b, c] != src[i, c]:
                same = False
                break
        if same:
            return b
        b += 1
        if b == cap:
            b = 0


@leaf
def _claim(t, s, key, w, meta, m):
    """The slot of :func:`_probe`'s result ``s``: ``s`` when the key was found, else
    the empty slot ``-1 - s``, which takes ``key[0, :w]`` and is counted in
    ``meta[m]`` (the caller writes the values)."""
    if s >= 0:
        return s
    s = -1 - s
    for c in range(w):
        t[s, c] = key[0, c]
    meta[m] += 1
    return s


@njit(cache=True, nogil=True)
def _delete(t, b, w):
    """Empty slot ``b`` of table ``t`` (keys of ``w`` words, the word after them
    non-zero in used slots), shifting later entries of its probe run back so that
    every entry stays reachable from its home slot."""
    cap = t.shape[0]
    W = t.shape[1]
    i = b
    j = b
    while True:
        j += 1
        if j == cap:
            j = 0
        if t[j, w] == 0:
            break
        h = _slot(_hash(t, j, 0, w, w), cap)
        # the entry at j may move to i unless its home lies cyclically in (i, j]
        if i <= j:
            stays = i < h <= j
        else:
            stays = h > i or h <= j
        if not stays:
            for c in range(W):
                t[i, c] = t[j, c]
            i = j
    for c in range(W):
        t[i, c] = 0


@njit(cache=True, nogil=True)
def _resized(t, w, used, more):
    """``t``, or its entries in a new table, so that ``used + more`` entries fit at a
    load of at most 3/4 and, when it shrank to ``used``, at least 1/8.

    A table that grows at least doubles (a stream of batches that each add a few
    percent would otherwise move every entry again every few batches); one that
    shrinks keeps room for twice what is left."""
    cap = t.shape[0]
    want = used + more
    if want * 4 <= cap * 3 and (want * 8 >= cap or cap <= _MIN_SLOTS):
        return t
    if want * 4 > cap * 3:
        ncap = max(grid_cap(want, np.int64(3), np.int64(4)), min(2 * cap, MAX_SLOTS))
    else:
        ncap = max(np.int64(_MIN_SLOTS), grid_cap(2 * want, np.int64(3), np.int64(4)))
    if ncap == cap:
        return t
    out = alloc2d(ncap, t.shape[1], BTRUE)
    step = _move_step(t)
    r0 = np.int64(0)
    while r0 < cap:
        r1 = min(cap, r0 + step)
        for r in range(r0, r1):
            if t[r, w] != 0:
                place_row(out, t, r, 0, w, w)
        if step < cap:
            release_rows(t, r0, r1)
        r0 = r1
    return out


@njit(cache=True, nogil=True)
def _put_out(g, m, total, tau, diff):
    """Append the correction ``total`` at ``tau`` with ``diff`` to the key's
    corrections ``g``; returns their new number."""
    g[m, 0] = total
    g[m, 1] = tau
    g[m, 2] = diff
    return m + 1


@leaf
def _flush_key(g, m, nd, r, kw, data, times, diffs, no):
    """Write a key's ``m`` corrections ``g[:m]`` (total, time, diff; in time order)
    as output rows ``(key of row r, total)`` from row ``no`` on, sorted by total,
    then time: a stable insertion sort by total (a key has few corrections in a
    batch, two per distinct time at most; the caller sorts many first). The key's
    rows follow every earlier key's, so the output comes out sorted; and no two
    corrections of a key share both total and time (at one time a key retracts its
    old total and adds a different one), so it is consolidated. Returns the rows
    written so far."""
    for i in range(1, m):
        t0 = g[i, 0]
        t1 = g[i, 1]
        t2 = g[i, 2]
        k = i
        while k > 0 and g[k - 1, 0] > t0:
            g[k, 0] = g[k - 1, 0]
            g[k, 1] = g[k - 1, 1]
            g[k, 2] = g[k - 1, 2]
            k -= 1
        g[k, 0] = t0
        g[k, 1] = t1
        g[k, 2] = t2
    for i in range(m):
        for c in range(kw):
            data[no, c] = nd[r, c]
        data[no, kw] = g[i, 0]
        times[no, 0] = g[i, 1]
        times[no, 1] = 0
        diffs[no] = g[i, 2]
        no += 1
    return no


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
    elif m <= _ISORT_MAX:
        for i in range(m):
            x = r + i
            k = i
            while k > 0 and ts[order[k - 1], 0] > ts[x, 0]:
                order[k] = order[k - 1]
                k -= 1
            order[k] = x
    else:
        # (a contiguous copy: a column slice would compile its own mergesort)
        o = np.argsort(ts[r:e, 0].copy(), kind="mergesort")
        for i in range(m):
            order[i] = r + o[i]


@njit(cache=True, nogil=True)
def agg_step(tab, arena, meta, nd, nt, nf, kw, vw, is_sum, col):
    """Step a count (``is_sum`` false) or a sum of value column ``col`` over the new
    updates ``(nd, nt, nf)``: rows ``(key[kw], vals[vw])`` sorted by data, times
    ``(t, 0)`` all later than everything the state holds.

    Returns ``(tab, arena, data, times, diffs)``: the state's tables (new ones when
    they were made, grew or shrank) and the output's changes, rows ``(key, total)``
    sorted and consolidated. Raises ``OverflowError`` when a count or a total leaves
    int64."""
    n = nf.shape[0]
    w = kw + vw
    W = max(w, 1)
    KW = max(kw, 1)
    if meta[M_INIT] == 0:
        tab = np.zeros((_MIN_SLOTS, W + 1), np.int64)
        arena = np.zeros((_MIN_SLOTS, KW + 2), np.int64)
        meta[M_VALUES] = 0
        meta[M_KEYS] = 0
        meta[M_INIT] = 1
    # room for every value and key of the batch, once; the most rows of one key
    nk = np.int64(0)
    nv = np.int64(0)
    k0 = np.int64(0)
    most = np.int64(0)
    for x in range(n):
        if x == 0 or not _same(nd, x - 1, nd, x, w):
            nv += 1
            if x == 0 or not _same(nd, x - 1, nd, x, kw):
                nk += 1
                most = max(most, x - k0)
                k0 = x
    most = max(most, n - k0)
    tab = _resized(tab, W, meta[M_VALUES], nv)
    arena = _resized(arena, KW, meta[M_KEYS], nk)
    # per touched value (indexed like the rows of its first update): its count and
    # weight; per row: the touched value's index
    cnt = np.empty(n, np.int64)
    wv = np.empty(n, np.int64)
    vof = np.empty(n, np.int64)
    order = np.empty(most, np.int64)        # a key's rows in time order
    # the output: at most two corrections per row, written in order (a key's after
    # the key's rows are done, sorted from its corrections ``g``: total, time, diff)
    data = np.empty((2 * n, kw + 1), np.int64)
    times = np.empty((2 * n, 2), np.int64)
    diffs = np.empty(2 * n, np.int64)
    g = np.empty((2 * most, 3), np.int64)
    no = np.int64(0)
    kkey = np.zeros((1, KW), np.int64)      # the key, padded (a key of no columns)
    vrow = np.zeros((1, W), np.int64)       # a data row, padded (no columns at all)
    pf_v = tab.shape[0] >= PF_MIN_SLOTS
    pf_k = arena.shape[0] >= PF_MIN_SLOTS
    r = np.int64(0)
    while r < n:
        e = r + 1
        while e < n and _same(nd, r, nd, e, kw):
            e += 1
        if pf_k and e + PF_AHEAD < n:
            prefetch_row(arena, _slot(_hash(nd, e + PF_AHEAD, 0, kw, KW), arena.shape[0]))
        for c in range(kw):
            kkey[0, c] = nd[r, c]
        ks = _probe(arena, kkey, 0, KW)
        tot = np.int64(0)
        nz = np.int64(0)
        if ks >= 0:
            nz = arena[ks, KW]
            tot = arena[ks, KW + 1]
        had = nz > 0
        # touched values: their counts before the batch kept for the walk below, and
        # their counts after it written at once (one probe a value)
        x = r
        while x < e:
            if pf_v and x + PF_AHEAD < n:
                prefetch_row(tab, _slot(_hash(nd, x + PF_AHEAD, 0, w, W), tab.shape[0]))
            y = x + 1
            ds = nf[x]
            while y < e and _same(nd, x, nd, y, w):
                ds, ov = add_checked(ds, nf[y])
                if ov:
                    raise OverflowError(_MSG_COUNT)
                y += 1
            for c in range(w):
                vrow[0, c] = nd[x, c]
            vs = _probe(tab, vrow, 0, W)
            old = tab[vs, W] if vs >= 0 else np.int64(0)
            cnt[x] = old
            wv[x] = nd[x, kw + col] if is_sum else np.int64(1)
            for z in range(x, y):
                vof[z] = x
            if ds != 0:
                new, ov = add_checked(old, ds)
                if ov:
                    raise OverflowError(_MSG_COUNT)
                if new == 0:
                    _delete(tab, vs, W)
                    meta[M_VALUES] -= 1
                else:
                    vs = _claim(tab, vs, vrow, W, meta, np.int64(M_VALUES))
                    tab[vs, W] = new
            x = y
        # the key's updates in time order; the output after each distinct time
        _by_time(nt, r, e, order)
        pres = had          # the output as emitted so far: present, and its total
        prev = tot
        i = np.int64(0)
        m = e - r
        mg = np.int64(0)
        while i < m:
            tau = nt[order[i], 0]
            while i < m and nt[order[i], 0] == tau:
                z = order[i]
                v = vof[z]
                f = nf[z]
                c = cnt[v]
                c2, o1 = add_checked(c, f)
                if o1:
                    raise OverflowError(_MSG_COUNT)
                nz += np.int64(c2 != 0) - np.int64(c != 0)
                cnt[v] = c2
                pr, o3 = mul_checked(f, wv[v])
                tot, o4 = add_checked(tot, pr)
                if o3 or o4:
                    raise OverflowError(_MSG_TOTAL)
                i += 1
            now = nz > 0
            if now != pres or (now and tot != prev):
                if pres:
                    mg = _put_out(g, mg, prev, tau, np.int64(-1))
                if now:
                    mg = _put_out(g, mg, tot, tau, np.int64(1))
                pres = now
                prev = tot
        if mg > _ISORT_MAX:
            # stable: time order kept (a contiguous copy, as above)
            o = np.argsort(g[:mg, 0].copy(), kind="mergesort")
            g[:mg] = g[o]
        no = _flush_key(g, mg, nd, r, kw, data, times, diffs, no)
        # the key's number of values and total
        if nz > 0:
            ks = _claim(arena, ks, kkey, KW, meta, np.int64(M_KEYS))
            arena[ks, KW] = nz
            arena[ks, KW + 1] = tot
        elif ks >= 0:
            _delete(arena, ks, KW)
            meta[M_KEYS] -= 1
        r = e
    # shrink what mass deletions left mostly empty
    tab = _resized(tab, W, meta[M_VALUES], np.int64(0))
    arena = _resized(arena, KW, meta[M_KEYS], np.int64(0))
    # The rows past ``no`` were never written, so they cost address space only (no
    # memory): views rather than copies, which would fill fresh pages again.
    return tab, arena, data[:no], times[:no], diffs[:no]


@njit(cache=True, nogil=True)
def distinct_step(tab, meta, nd, nt, nf):
    """Step a ``distinct`` outside loops over the new updates ``(nd, nt, nf)``: rows
    sorted by data, then time (times ``(t, 0)`` all later than everything the state
    holds), consolidated.

    A distinct needs only the current count of every row present: ``tab`` of the
    module docstring (``arena`` is not used). Each distinct row of the batch costs one
    probe; its updates, in time order, move its count, and the output changes
    (``+1`` / ``-1`` of the row) wherever the count turns positive or stops being so.
    Returns ``(tab, data, times, diffs)``, the output's changes sorted by data, then
    time, and consolidated (they come out so). Raises ``OverflowError`` when a count
    leaves int64."""
    n = nf.shape[0]
    w = nd.shape[1]
    W = max(w, 1)
    if meta[M_INIT] == 0:
        tab = np.zeros((_MIN_SLOTS, W + 1), np.int64)
        meta[M_VALUES] = 0
        meta[M_KEYS] = 0
        meta[M_INIT] = 1
    nv = np.int64(0)
    for x in range(n):
        if x == 0 or not _same(nd, x - 1, nd, x, w):
            nv += 1
    tab = _resized(tab, W, meta[M_VALUES], nv)
    src = np.empty(n, np.int64)             # per output change: its row of nd
    diffs = np.empty(n, np.int64)
    no = np.int64(0)
    vrow = np.zeros((1, W), np.int64)       # the row, padded (a row of no columns)
    pf = tab.shape[0] >= PF_MIN_SLOTS
    r = np.int64(0)
    while r < n:
        if pf and r + PF_AHEAD < n:
            prefetch_row(tab, _slot(_hash(nd, r + PF_AHEAD, 0, w, W), tab.shape[0]))
        e = r + 1
        while e < n and _same(nd, r, nd, e, w):
            e += 1
        for c in range(w):
            vrow[0, c] = nd[r, c]
        vs = _probe(tab, vrow, 0, W)
        c0 = tab[vs, W] if vs >= 0 else np.int64(0)
        cnt = c0
        for z in range(r, e):
            c2, ov = add_checked(cnt, nf[z])
            if ov:
                raise OverflowError(_MSG_DISTINCT)
            if (c2 > 0) != (cnt > 0):
                src[no] = z
                diffs[no] = 1 if c2 > 0 else -1
                no += 1
            cnt = c2
        if cnt != c0:
            if cnt == 0:
                _delete(tab, vs, W)
                meta[M_VALUES] -= 1
            else:
                vs = _claim(tab, vs, vrow, W, meta, np.int64(M_VALUES))
                tab[vs, W] = cnt
        r = e
    tab = _resized(tab, W, meta[M_VALUES], np.int64(0))
    data = np.empty((no, w), np.int64)
    times = np.zeros((no, 2), np.int64)
    for q in range(no):
        z = src[q]
        for c in range(w):
            data[q, c] = nd[z, c]
        times[q, 0] = nt[z, 0]
    return tab, data, times, diffs[:no].copy()

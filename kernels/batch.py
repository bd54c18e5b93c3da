"""Flat update batches for the native runtime: sort, consolidate, merge, seek.

A *flat batch* is a triple ``(data[n, w], times[n, 2], diffs[n])`` of C-contiguous int64
arrays, strictly sorted by ``(data, time)`` (lexicographically, data columns first) with
no zero diff: the consolidated form of :mod:`ddnumba.kernels.consolidate`, without the
trie's offset layers. The first ``kw`` data columns are the key. Times have two
coordinates ``(t, i)``: the outer time (totally ordered) and the iteration counter
(``0`` outside loops); lexicographic order on them extends the product order.

Everything here is ``@njit`` end to end (no Python orchestration between the steps),
because the native runtime (:mod:`ddnumba.kernels.runtime`) calls these functions from
compiled code, many times per round:

* :func:`sort_consolidate` packs the columns into one or more 64-bit words (per-column
  minimum and bit width, as :mod:`ddnumba.kernels.sort`) and radix-sorts them; a handful
  of updates are insertion-sorted instead.
* :func:`merge` merges two batches and *compacts* them: every outer time ``t`` is
  replaced by ``max(t, since)``. For the frontiers of a totally ordered outer time with
  an iteration counter (``{(s, 0)}``, or ``{(p, 0), (q, k + 1)}`` with ``q <= p``,
  which advances like ``{(q, 0)}``) this is exactly ``advance(t, F)`` of DESIGN.md
  section 4: every time a reader can still ask about (``t' >= s``) compares with the
  advanced time as with the original, and times that no reader can tell apart collapse
  and are summed.
* :func:`seek` gallops through a batch's keys: sorted queries cost ``O(log gap)`` each.
"""
import numpy as np
from numba import njit

from .hooks import release_rows
from .rows import I0, add_counted, flat_view, leaf
from .sort import _bucket_sort, _column_widths, _lsd_sort, _pack_word, _unpack_word

__all__ = ["sort_consolidate", "consolidate_dead", "merge", "seek", "seek_fenced", "fence",
           "concat_batches",
           "empty_batch", "is_flat", "FENCE_STEP", "fence_rows", "key_index",
           "INDEX_MIN"]

_SMALL = 32          # below this many updates, insertion sort
_BUCKET_LOG = 14     # as kernels.sort: ~16 K keys per bucket
_MAX_BUCKET_BITS = 22
_LSD_DIGIT = 11


@njit(cache=True, nogil=True)
def empty_batch(w):
    """An empty batch of width ``w``."""
    return (np.empty((0, w), np.int64), np.empty((0, 2), np.int64),
            np.empty(0, np.int64))


@njit(cache=True, nogil=True, inline="always")
def _cmp_upd(da, ta, i, db, tb, j):
    """Compare update ``i`` of ``(da, ta)`` with update ``j`` of ``(db, tb)``."""
    for c in range(da.shape[1]):
        x = da[i, c]
        y = db[j, c]
        if x != y:
            return -1 if x < y else 1
    for c in range(2):
        x = ta[i, c]
        y = tb[j, c]
        if x != y:
            return -1 if x < y else 1
    return 0


@njit(cache=True, nogil=True, inline="always")
def _cmp_data(da, i, db, j):
    for c in range(da.shape[1]):
        x = da[i, c]
        y = db[j, c]
        if x != y:
            return -1 if x < y else 1
    return 0


@njit(cache=True, nogil=True, inline="always")
def _cmp_prefix(a, i, b, j, w):
    """Compare the first ``w`` columns of ``a[i]`` and ``b[j]``."""
    for c in range(w):
        x = a[i, c]
        y = b[j, c]
        if x != y:
            return -1 if x < y else 1
    return 0


@leaf
def is_flat(data, times, diffs):
    """True when the updates are a flat batch: strictly sorted by (data, time) with
    no zero diff (stopping at the first row out of order: on an unsorted batch a few
    rows). A leaf: the inlined comparison takes no reference counts per row.

    Times must have the runtime's two columns (unchecked here: a leaf cannot raise;
    :func:`sort_consolidate` checks). For updates of any shape use
    :func:`ddnumba.kernels.consolidate.is_consolidated`."""
    for i in range(diffs.shape[0]):
        if diffs[i] == 0:
            return False
        if i > 0 and _cmp_upd(data, times, i - 1, data, times, i) >= 0:
            return False
    return True


# ------------------------------------------------------------------------------ sorting


@njit(cache=True, nogil=True)
def _bits(x):
    n = np.int64(0)
    while x != 0:
        x >>= 1
        n += 1
    return n


@njit(cache=True, nogil=True)
def _sort_keys(keys, payload, use_index, nbits):
    """Stable sort of uint64 ``keys`` (< 2**nbits) with payload (or row index)."""
    n = keys.shape[0]
    out_k = np.empty(n, np.uint64)
    out_p = np.empty(n, np.int64)
    if nbits == 0 or n <= 1:
        for i in range(n):
            out_k[i] = keys[i]
            out_p[i] = i if use_index else payload[i]
        return out_k, out_p
    h = min(nbits, max(0, _bits(n) - _BUCKET_LOG))
    cap = min(nbits, _MAX_BUCKET_BITS, max(_bits(n) + 2, 8))
    for _ in range(3):
        excess = _bucket_sort(keys, payload, use_index, nbits, h, out_k, out_p)
        if excess == 0:
            return out_k, out_p
        if h >= cap:
            break
        h = min(cap, h + excess + 1)
    _lsd_sort(keys, payload, use_index, nbits, _LSD_DIGIT, out_k, out_p)
    return out_k, out_p


@njit(cache=True, nogil=True)
def _layout(data, times):
    """Pack the columns of ``[data | times]`` into 64-bit words, least significant
    column first. Returns per-column minimum, width, word (-1: constant) and shift,
    and per word its bit count."""
    ka = data.shape[1]
    k = ka + times.shape[1]
    mins = np.zeros(k, np.int64)
    widths = np.zeros(k, np.int64)
    if ka:
        _column_widths(data, mins, widths, I0)
    _column_widths(times, mins, widths, ka)
    word_of = np.full(k, -1, np.int64)
    shifts = np.zeros(k, np.int64)
    word_bits = np.zeros(k + 1, np.int64)
    nw = np.int64(0)
    cur = np.int64(0)
    for c in range(k - 1, -1, -1):
        w = widths[c]
        if w == 0:
            continue
        if cur + w > 64:
            word_bits[nw] = cur
            nw += 1
            cur = np.int64(0)
        word_of[c] = nw
        shifts[c] = cur
        cur += w
    if cur:
        word_bits[nw] = cur
        nw += 1
    return mins, widths, word_of, shifts, word_bits[:nw]


@njit(cache=True, nogil=True)
def _insertion_perm(data, times):
    idx = np.empty(data.shape[0], np.int64)
    _insertion_sort_idx(data, times, idx)
    return idx


@leaf
def _insertion_sort_idx(data, times, idx):
    """The sorting permutation of the updates ``(data, times)`` into ``idx``
    (insertion sort, for small batches)."""
    n = data.shape[0]
    for i in range(n):
        idx[i] = i
    for i in range(1, n):
        x = idx[i]
        j = i
        while j > 0 and _cmp_upd(data, times, idx[j - 1], data, times, x) > 0:
            idx[j] = idx[j - 1]
            j -= 1
        idx[j] = x


@njit(cache=True, nogil=True)
def _sum_perm(data, times, diffs, perm):
    """Consolidate updates visited in the sorting order ``perm``."""
    n = perm.shape[0]
    w = data.shape[1]
    od = np.empty((n, w), np.int64)
    ot = np.empty((n, 2), np.int64)
    of = np.empty(n, np.int64)
    k = _sum_perm_into(data, times, diffs, perm, od, ot, of)
    if k < 0:
        raise OverflowError("consolidate: a sum of diffs overflows int64")
    return _trim(od, ot, of, k)


@leaf
def _sum_perm_into(data, times, diffs, perm, od, ot, of):
    """_sum_perm's loop: the consolidated updates into ``(od, ot, of)``; returns their
    count, or -1 when a sum overflows int64."""
    n = perm.shape[0]
    w = data.shape[1]
    k = np.int64(0)
    r = np.int64(0)
    while r < n:
        first = perm[r]
        s = diffs[first]
        carry = np.int64(0)
        r += 1
        while r < n and _cmp_upd(data, times, first, data, times, perm[r]) == 0:
            s, carry = add_counted(s, carry, diffs[perm[r]])
            r += 1
        if carry != 0:
            return np.int64(-1)
        if s != 0:
            for c in range(w):
                od[k, c] = data[first, c]
            ot[k, 0] = times[first, 0]
            ot[k, 1] = times[first, 1]
            of[k] = s
            k += 1
    return k


@njit(cache=True, nogil=True)
def _trim(data, times, diffs, k):
    """The first ``k`` updates; copied when that frees most of the buffers."""
    if 4 * k < 3 * diffs.shape[0]:
        return data[:k].copy(), times[:k].copy(), diffs[:k].copy()
    return data[:k], times[:k], diffs[:k]


@njit(cache=True, nogil=True)
def _sum_unpack(sk, sd, w, mins, widths, shifts):
    """The flat batch of sorted one-word keys ``sk`` with diffs ``sd``: runs of equal
    keys summed (in place), zeros dropped, rows decoded (see :func:`_layout`)."""
    n = sk.shape[0]
    k = np.int64(0)
    r = np.int64(0)
    while r < n:
        key = sk[r]
        s = sd[r]
        carry = np.int64(0)
        r += 1
        while r < n and sk[r] == key:
            s, carry = add_counted(s, carry, sd[r])
            r += 1
        if carry != 0:
            raise OverflowError("consolidate: a sum of diffs overflows int64")
        if s != 0:
            sk[k] = key
            sd[k] = s
            k += 1
    od = np.empty((k, w), np.int64)
    ot = np.empty((k, 2), np.int64)
    _unpack_word(sk, k, mins, widths, shifts, od, ot)
    return od, ot, (sd if k == n else sd[:k].copy())


#: updates from which :func:`consolidate_dead` gives its inputs' memory back early
DEAD_MIN = 1 << 20


@njit(cache=True, nogil=True)
def consolidate_dead(data, times, diffs):
    """:func:`sort_consolidate` of updates that nothing else holds (the caller drops
    them afterwards): with a one-word layout, the inputs' memory is given back as soon
    as the sort keys are packed from them, and the keys' once they are sorted, so that
    at most about two copies of a large batch are resident at once instead of four (a
    load's loop hands the root scope millions of rows at once)."""
    n = diffs.shape[0]
    if n < DEAD_MIN or times.shape[1] != 2 or times.shape[0] != n or \
            data.shape[0] != n or not (data.flags.c_contiguous and
                                       times.flags.c_contiguous and
                                       diffs.flags.c_contiguous) or \
            is_flat(data, times, diffs):
        return sort_consolidate(data, times, diffs)
    mins, widths, word_of, shifts, word_bits = _layout(data, times)
    if word_bits.shape[0] != 1:
        return sort_consolidate(data, times, diffs)
    keys = np.empty(n, np.uint64)
    _pack_word(data, times, mins, word_of, shifts, I0, np.empty(0, np.int64), False, keys)
    release_rows(data, I0, n)
    release_rows(times, I0, n)
    sk, sd = _sort_keys(keys, diffs, False, word_bits[0])
    release_rows(keys, I0, n)
    release_rows(diffs, I0, n)
    return _sum_unpack(sk, sd, data.shape[1], mins, widths, shifts)


@njit(cache=True, nogil=True)
def sort_consolidate(data, times, diffs):
    """Sort updates by (data, time), sum equal pairs, drop zeros: a flat batch.

    Inputs are not modified. Inputs that are already flat come back as they are,
    with no copy (batches are never written to): an arrangement of a batch that a
    leave or consolidate just sorted costs a pass over it, not a sort and a second
    copy of the batch. Raises ``OverflowError`` when a group's sum leaves int64,
    ``ValueError`` unless times have two columns and the three arrays one row count.
    """
    n = diffs.shape[0]
    if times.shape[1] != 2 or times.shape[0] != n or data.shape[0] != n:
        raise ValueError("sort_consolidate: a flat batch has times of two columns "
                         "and as many data and time rows as diffs")
    if is_flat(data, times, diffs):
        return (np.ascontiguousarray(data), np.ascontiguousarray(times),
                np.ascontiguousarray(diffs))
    w = data.shape[1]
    if n <= _SMALL:
        return _sum_perm(data, times, diffs, _insertion_perm(data, times))
    mins, widths, word_of, shifts, word_bits = _layout(data, times)
    nw = word_bits.shape[0]
    empty = np.empty(0, np.int64)
    if nw <= 1:
        keys = np.empty(n, np.uint64)
        if nw == 1:
            _pack_word(data, times, mins, word_of, shifts, I0, empty, False, keys)
        else:
            for r in range(n):
                keys[r] = 0
        sk, sd = _sort_keys(keys, diffs, False, word_bits[0] if nw == 1 else 0)
        return _sum_unpack(sk, sd, w, mins, widths, shifts)
    # Several words: LSD over words, carrying the permutation.
    keys = np.empty(n, np.uint64)
    perm = np.arange(n)
    for word in range(nw):
        _pack_word(data, times, mins, word_of, shifts, word, perm, word > 0, keys)
        _, perm = _sort_keys(keys, perm, word == 0, word_bits[word])
    return _sum_perm(data, times, diffs, perm)


@njit(cache=True, nogil=True)
def concat_batches(parts, w):
    """Concatenate a list of (unsorted) update triples into one triple."""
    n = np.int64(0)
    for p in parts:
        n += p[2].shape[0]
    od = np.empty((n, w), np.int64)
    ot = np.empty((n, 2), np.int64)
    of = np.empty(n, np.int64)
    o = np.int64(0)
    for p in parts:
        pd, pt, pf = p
        for r in range(pf.shape[0]):
            for c in range(w):
                od[o, c] = pd[r, c]
            ot[o, 0] = pt[r, 0]
            ot[o, 1] = pt[r, 1]
            of[o] = pf[r]
            o += 1
    return od, ot, of


# ------------------------------------------------------------------------------ merging


@njit(cache=True, nogil=True)
def _sort_group(times, diffs, lo, hi):
    """Sort updates ``[lo, hi)`` of one data row by time (insertion sort; groups
    are short: one row's distinct times after compaction)."""
    for i in range(lo + 1, hi):
        t0 = times[i, 0]
        t1 = times[i, 1]
        dv = diffs[i]
        j = i
        while j > lo and (times[j - 1, 0] > t0 or (times[j - 1, 0] == t0 and
                                                   times[j - 1, 1] > t1)):
            times[j, 0] = times[j - 1, 0]
            times[j, 1] = times[j - 1, 1]
            diffs[j] = diffs[j - 1]
            j -= 1
        times[j, 0] = t0
        times[j, 1] = t1
        diffs[j] = dv


@njit(cache=True, nogil=True)
def _close_group(ot, of, start, k):
    """Finish the output group of one data row at ``[start, k)``, whose times were
    advanced or summed (the caller calls it for such a group only): they may be out of
    order, repeated or zero, so re-sort them if needed, sum equal ones and drop zeros.
    Returns the group's new end, or -1 when a sum overflows int64 (the caller raises:
    a function that can raise takes extra references to its array arguments, costing
    atomic updates on every call)."""
    for i in range(start + 1, k):
        if ot[i - 1, 0] > ot[i, 0] or (ot[i - 1, 0] == ot[i, 0] and ot[i - 1, 1] > ot[i, 1]):
            _sort_group(ot, of, start, k)
            break
    o = start
    r = start
    while r < k:
        t0 = ot[r, 0]
        t1 = ot[r, 1]
        s = of[r]
        carry = np.int64(0)
        r += 1
        while r < k and ot[r, 0] == t0 and ot[r, 1] == t1:
            s, carry = add_counted(s, carry, of[r])
            r += 1
        if carry != 0:
            return -1
        if s != 0:
            ot[o, 0] = t0
            ot[o, 1] = t1
            of[o] = s
            o += 1
    return o


@njit(cache=True, nogil=True)
def _copy_times(st, sf, r, end, since, ot, of, k):
    """Copy updates ``[r, end)`` of one data row (times advanced to ``since``) to
    ``ot``/``of`` from ``k``. Returns the new end and whether the copied times may be
    out of order or repeated (then :func:`_close_group` must run).

    The rows' times are sorted and distinct, and the advanced ones come first. They
    stay so when every advanced time had the same outer time (it moves, their
    iterations keep their order) and no time left in place has outer time ``since``:
    the common case of a trace compacted at its last merge and advanced again."""
    need = False
    nadv = np.int64(0)
    a0 = np.int64(0)
    for x in range(r, end):
        t0 = st[x, 0]
        if t0 < since:
            if nadv > 0 and t0 != a0:
                need = True
            a0 = t0
            nadv += 1
            t0 = since
        elif nadv > 0 and t0 == since:
            need = True
        ot[k, 0] = t0
        ot[k, 1] = st[x, 1]
        of[k] = sf[x]
        k += 1
    return k, need


@njit(cache=True, nogil=True)
def _fill_rows(od, start, k, src, row):
    """Rows ``[start, k)`` of ``od`` become copies of ``src[row]``."""
    for q in range(start, k):
        for c in range(od.shape[1]):
            od[q, c] = src[row, c]


@njit(cache=True, nogil=True, inline="always")
def _copy_one(sd, st, sf, x, since, od, ot, of, k):
    """Copy update ``x`` of one input, alone on its data row, to output row ``k``, its
    outer time advanced to ``since`` (inlined: as fast as the copy written out, where a
    call per row costs twice the time, as ``_copy_times`` and ``_fill_rows`` did)."""
    t0 = st[x, 0]
    ot[k, 0] = t0 if t0 >= since else since
    ot[k, 1] = st[x, 1]
    of[k] = sf[x]
    for c in range(od.shape[1]):
        od[k, c] = sd[x, c]


@njit(cache=True, nogil=True)
def merge(a, b, since):
    """Merge two flat batches into one, advancing outer times to ``>= since``.

    ``a`` and ``b`` are consolidated; so is the result (equal updates summed, zeros
    dropped). ``since`` is the compaction frontier's outer time (``-2**63`` for none).
    """
    ad, at, af = a
    bd, bt, bf = b
    na = af.shape[0]
    nb = bf.shape[0]
    w = ad.shape[1]
    n = na + nb
    od = np.empty((n, w), np.int64)
    ot = np.empty((n, 2), np.int64)
    of = np.empty(n, np.int64)
    i = np.int64(0)
    j = np.int64(0)
    k = np.int64(0)
    while i < na or j < nb:
        # The next data row and the group of updates of that row in both inputs.
        if j >= nb:
            src = np.int64(0)
        elif i >= na:
            src = 1
        else:
            c = _cmp_data(ad, i, bd, j)
            src = 0 if c < 0 else (1 if c > 0 else 2)
        start = k
        # (No array-valued local is reassigned in this loop: each such assignment
        # costs a reference-count update per data row.)
        if src != 2:
            # A row of one input with one update, the common case in consolidated
            # traces: copied by the inlined _copy_one (its time advanced; one update
            # cannot collide), not through the calls below (2x faster merges of
            # such batches).
            if src == 0:
                one = i + 1 >= na or _cmp_data(ad, i, ad, i + 1) != 0
            else:
                one = j + 1 >= nb or _cmp_data(bd, j, bd, j + 1) != 0
            if one:
                if src == 0:
                    _copy_one(ad, at, af, i, since, od, ot, of, k)
                    i += 1
                else:
                    _copy_one(bd, bt, bf, j, since, od, ot, of, k)
                    j += 1
                k += 1
                continue
        if src == 0:
            r = i
            while i < na and _cmp_data(ad, r, ad, i) == 0:
                i += 1
            k, advanced = _copy_times(at, af, r, i, since, ot, of, k)
        elif src == 1:
            r = j
            while j < nb and _cmp_data(bd, r, bd, j) == 0:
                j += 1
            k, advanced = _copy_times(bt, bf, r, j, since, ot, of, k)
        else:
            r = i
            rb = j
            while i < na and _cmp_data(ad, r, ad, i) == 0:
                i += 1
            while j < nb and _cmp_data(bd, rb, bd, j) == 0:
                j += 1
            # Times of the group: merged by time from both sources (each sorted), then
            # advanced; equal times of the two inputs are summed (zeros dropped) in
            # _close_group, which is needed only when advancing may have reordered or
            # collided times (see _copy_times) or two equal times met (otherwise the
            # merged times are sorted and distinct).
            x = r
            y = rb
            advanced = False
            nadv = np.int64(0)
            a0 = np.int64(0)
            a1 = np.int64(0)
            while x < i or y < j:
                take_a = y >= j or (x < i and (at[x, 0] < bt[y, 0] or (
                    at[x, 0] == bt[y, 0] and at[x, 1] <= bt[y, 1])))
                if take_a:
                    t0 = at[x, 0]
                    t1 = at[x, 1]
                    dv = af[x]
                    x += 1
                else:
                    t0 = bt[y, 0]
                    t1 = bt[y, 1]
                    dv = bf[y]
                    y += 1
                if t0 < since:
                    # in merged order: advanced times with another outer time, or the
                    # same time twice, collide or reorder once advanced
                    if nadv > 0 and (t0 != a0 or t1 == a1):
                        advanced = True
                    a0 = t0
                    a1 = t1
                    nadv += 1
                    t0 = since
                elif nadv > 0 and t0 == since:
                    advanced = True
                elif k > start and ot[k - 1, 0] == t0 and ot[k - 1, 1] == t1:
                    advanced = True
                ot[k, 0] = t0
                ot[k, 1] = t1
                of[k] = dv
                k += 1
        if advanced and k - start > 1:       # (one update cannot collide)
            k = _close_group(ot, of, start, k)
            if k < 0:
                raise OverflowError("merge: a sum of diffs overflows int64")
        if src == 1:
            _fill_rows(od, start, k, bd, r)
        else:
            _fill_rows(od, start, k, ad, r)
    return _trim(od, ot, of, k)


@njit(cache=True, nogil=True)
def advance(batch, since):
    """Compact one batch to ``since`` (see :func:`merge`)."""
    d, t, f = batch
    lo = np.int64(0)
    for i in range(f.shape[0]):
        if t[i, 0] < since:
            lo = 1
            break
    if lo == 0:
        return batch
    return merge(batch, empty_batch(d.shape[1]), np.int64(since))


# ------------------------------------------------------------------------------ seeking


@njit(cache=True, nogil=True)
def seek(data, start, keys, ki, kw, strict):
    """First index ``i >= start`` whose key (first ``kw`` columns of ``data[i]``) is
    ``>= keys[ki, :kw]`` (``>`` when ``strict``), galloping from ``start``.

    Precondition: every row before ``start`` is below the bound.
    """
    return _gallop(data, start, keys, ki, kw, 1 if strict else 0)


@njit(cache=True, nogil=True, inline="always")
def _gallop(data, start, keys, ki, kw, limit):
    """:func:`seek` with ``limit`` (1: strict), inlined into loops over many keys: a
    call per key would cost reference-count updates of its array arguments."""
    n = data.shape[0]
    if start >= n or _cmp_prefix(data, start, keys, ki, kw) >= limit:
        return start
    if _cmp_prefix(data, n - 1, keys, ki, kw) < limit:
        return n   # past the last row: common for the small batches of a spine
    lo = start
    step = 1
    hi = start + 1
    while hi < n and _cmp_prefix(data, hi, keys, ki, kw) < limit:
        lo = hi
        step *= 2
        hi = lo + step
    if hi > n:
        hi = n
    lo, hi = _bisect_rows(data, lo, hi, keys, ki, kw, limit)
    return hi


@njit(cache=True, nogil=True, inline="always")
def _bisect_rows(data, lo, hi, keys, ki, kw, limit):
    """Narrow ``(lo, hi)`` to adjacent rows, keeping ``cmp(data[lo], key) < limit``
    and ``cmp(data[hi], key) >= limit`` (for the rows strictly inside)."""
    while hi - lo > 1:
        mid = (lo + hi) >> 1
        if _cmp_prefix(data, mid, keys, ki, kw) < limit:
            lo = mid
        else:
            hi = mid
    return lo, hi


# A *fence* is every FENCE_STEP-th row of a large batch's data, copied into a compact
# array. Looking a key up in a batch of millions of rows by galloping costs a cache
# miss per probe; the fence is ~FENCE_STEP times smaller, so a search in it mostly hits
# the cache and only the final block of FENCE_STEP rows is read from the batch.
#
# Batches of INDEX_MIN rows or more also carry a *key index*, appended after the
# ``fence_rows(n)`` fence rows, when it narrows lookups to a few rows: the key space is
# cut into at most ``n`` buckets in key order, and the index holds the first row of
# every bucket. A lookup reads two adjacent index entries and then the few rows of one
# bucket: about one cache miss per key where bisecting a fence block costs several
# (measured cold, 14k keys in a 20M-row batch: ~30 ns per key against ~900 ns).
#
# * One column: a bucket is ``2**shift`` consecutive values of the first column. Used
#   when the first column has many distinct values (node ids, say); with ``shift == 0``
#   a bucket is exactly one value.
# * Two columns: when the first column has few distinct values (the roots of a
#   reachability, say) a bucket is one of them (a small sorted table, searched in
#   cache) and ``2**shift`` consecutive values of the second column.
#
# Stored flat (``ravel``): ``[ncol, r, shift, lo, d, table[0..d], off[0..r]]`` with
# ``r`` buckets, ``lo`` the least value of the bucketed column (first or second),
# ``d`` the table's length (0 for one column) and ``off[r] = n``. There are at most
# ``n / INDEX_BUCKET_ROWS`` buckets: the index costs at most 4 bytes per row (a row is
# 40+ bytes), and the rows of a bucket share a cache line or two. Two rows per bucket
# make the index exact (one key per bucket, no search inside it) for the reachability
# traces at N=1e6 ((root, node) keys with ~2 rows each): ~10% faster runs than 4.
FENCE_STEP = 32
FENCE_MIN = 4 * FENCE_STEP   # smaller batches get no fence (galloping is cheap there)
INDEX_MIN = 1 << 14   # smaller batches get no key index (they mostly sit in cache)
INDEX_BUCKET_ROWS = 2   # at least this many rows per bucket on average (index size)
INDEX_ROWS = 64       # one-column index: at most this many rows per first-column value
INDEX_TABLE_MAX = 1 << 12   # two-column index: at most this many first-column values


@njit(cache=True, nogil=True)
def fence_rows(n, fnc):
    """First-level rows of the fence ``fnc`` of a batch of ``n`` rows (0: no fence)."""
    if fnc.shape[0] == 0:
        return np.int64(0)
    return (n + FENCE_STEP - 1) // FENCE_STEP


@njit(cache=True, nogil=True, inline="always")
def _shift_for(span, buckets_per_value, n):
    """The least ``shift`` with ``buckets_per_value * ((span >> shift) + 1) <=
    n / INDEX_BUCKET_ROWS``, and ``(span >> shift) + 1``. ``span`` is unsigned (exact
    for any int64 column)."""
    cap = np.uint64(n // (INDEX_BUCKET_ROWS * buckets_per_value))   # >= 2 here
    shift = np.uint64(0)
    while (span >> shift) >= cap:
        shift += np.uint64(1)
    return np.int64(shift), np.int64(span >> shift) + 1


@njit(cache=True, nogil=True)
def _build_index(data):
    """The flat key index of a batch (see above), or an empty array."""
    n = data.shape[0]
    w = data.shape[1]
    none = np.empty(0, np.int64)
    if n < INDEX_MIN or w == 0:
        return none
    # one pass: distinct first-column values, and the second column's range
    c1 = 1 if w >= 2 else 0
    d = np.int64(1)
    lo = data[0, c1]
    hi = lo
    for i in range(n):
        if i > 0 and data[i, 0] != data[i - 1, 0]:
            d += 1
        x = data[i, c1]
        lo = min(lo, x)
        hi = max(hi, x)
    if d * INDEX_ROWS >= n:
        ncol = 1
        lo = data[0, 0]
        span = np.uint64(data[n - 1, 0]) - np.uint64(lo)
        shift, per = _shift_for(span, 1, n)
        r = per
        d = 0
    elif w >= 2 and d <= INDEX_TABLE_MAX:
        ncol = 2
        shift, per = _shift_for(np.uint64(hi) - np.uint64(lo), d, n)
        r = d * per
    else:
        return none
    flat = np.empty(5 + d + r + 1, np.int64)
    flat[0] = ncol
    flat[1] = r
    flat[2] = shift
    flat[3] = lo
    flat[4] = d
    table = flat[5:5 + d]
    off = flat[5 + d:]
    ulo = np.uint64(lo)
    ushift = np.uint64(shift)
    j = np.int64(0)
    rank = np.int64(-1)
    for i in range(n):
        if ncol == 1:
            v = np.int64((np.uint64(data[i, 0]) - ulo) >> ushift)
        else:
            if i == 0 or data[i, 0] != data[i - 1, 0]:
                rank += 1
                table[rank] = data[i, 0]
            v = rank * per + np.int64((np.uint64(data[i, 1]) - ulo) >> ushift)
        while j <= v:
            off[j] = i
            j += 1
    while j <= r:
        off[j] = n
        j += 1
    return flat


@njit(cache=True, nogil=True)
def fence(data):
    """The fence of a batch's ``data`` (empty for small batches): every FENCE_STEP-th
    row, then for large batches the key index (see above)."""
    n = data.shape[0]
    w = data.shape[1]
    if n < FENCE_MIN:
        return np.empty((0, w), np.int64)
    m = (n + FENCE_STEP - 1) // FENCE_STEP
    idx = _build_index(data)
    ni = idx.shape[0]
    out = np.empty((m + (ni + w - 1) // w if ni else m, w), np.int64)
    for j in range(m):
        row = j * FENCE_STEP
        for c in range(w):
            out[j, c] = data[row, c]
    if ni:
        out[m:].ravel()[:ni] = idx
    return out


@njit(cache=True, nogil=True)
def key_index(n, fnc):
    """The key index of the fence ``fnc`` of a batch of ``n`` rows: ``(ncol, shift, lo,
    table, off)`` (see above); ``off`` is empty when the batch has none."""
    return _key_index(n, fnc)


@njit(cache=True, nogil=True, inline="always")
def _key_index(n, fnc):
    """:func:`key_index`, inlined into the leaf :func:`seek_fenced` (whose views of
    ``fnc`` then take no references)."""
    nf = fence_rows(n, fnc)
    flat = flat_view(fnc)[nf * fnc.shape[1]:]
    if flat.shape[0] == 0:
        return np.int64(0), np.int64(0), np.int64(0), flat, flat
    d = flat[4]
    return flat[0], flat[2], flat[3], flat[5:5 + d], flat[5 + d:6 + d + flat[1]]


@njit(cache=True, nogil=True, inline="always")
def _index_bucket(ix, keys, ki, kw):
    """``(a, b, exact)``: rows ``[a, b)`` of the bucket of key ``keys[ki, :kw]``; every
    row before ``a`` is below the key and every row from ``b`` on above it. ``exact``:
    the rows are exactly the key's."""
    ncol, shift, lo, table, off = ix
    r = off.shape[0] - 1
    x = keys[ki, 0]
    if ncol == 1:
        if x < lo:
            return off[0], off[0], True
        j = (np.uint64(x) - np.uint64(lo)) >> np.uint64(shift)
        if j >= np.uint64(r):
            return off[r], off[r], True
        jj = np.int64(j)
        return off[jj], off[jj + 1], kw == 1 and shift == 0
    # two columns: the table's rank of x, then the second column's bucket
    d = table.shape[0]
    per = r // d
    a = np.int64(0)
    b = d
    while a < b:
        mid = (a + b) >> 1
        if table[mid] < x:
            a = mid + 1
        else:
            b = mid
    base = a * per
    if a == d or table[a] != x:
        return off[base], off[base], True
    if kw == 1:
        return off[base], off[base + per], True
    y = keys[ki, 1]
    if y < lo:
        return off[base], off[base], True
    j = (np.uint64(y) - np.uint64(lo)) >> np.uint64(shift)
    if j >= np.uint64(per):
        return off[base + per], off[base + per], True
    jj = base + np.int64(j)
    return off[jj], off[jj + 1], kw == 2 and shift == 0


@leaf
def seek_fenced(data, fnc, start, keys, ki, kw, strict):
    """:func:`seek` helped by the batch's fence ``fnc`` (see :func:`fence`). A leaf:
    as a regular kernel its views of the fence and its inlined helpers cost ~8
    reference-count updates a call, which a caller seeking key after key pays per key
    (for many keys at once, :func:`key_ranges` overlaps their cache misses)."""
    n = data.shape[0]
    nf = fence_rows(n, fnc)
    limit = 1 if strict else 0
    if nf == 0:
        return _gallop(data, start, keys, ki, kw, limit)
    if start >= n or _cmp_prefix(data, start, keys, ki, kw) >= limit:
        return start
    ix = _key_index(n, fnc)
    if ix[4].shape[0] > 0:
        a, b, exact = _index_bucket(ix, keys, ki, kw)
        if exact:
            r = b if strict else a
        else:
            lo, r = _bisect_rows(data, a - 1, b, keys, ki, kw, limit)
        return r if r > start else start
    return _fence_seek(data, fnc[:nf], start, keys, ki, kw, limit)


@njit(cache=True, nogil=True, inline="always")
def _fence_seek(data, fence_rows_, start, keys, ki, kw, limit):
    """:func:`seek_fenced` in a batch with no key index, ``fence_rows_`` the rows of its
    fence; inlined (see :func:`_gallop`). Precondition: row ``start`` is below the
    bound."""
    n = data.shape[0]
    # First fence row at or after the bound: every fence row before it is below the
    # bound, so the answer lies after row (j - 1) * FENCE_STEP and at most at row
    # j * FENCE_STEP (or n).
    j = _gallop(fence_rows_, start // FENCE_STEP, keys, ki, kw, limit)
    lo = (j - 1) * FENCE_STEP
    if lo < start:
        lo = start
    hi = j * FENCE_STEP
    if hi > n:
        hi = n
    # rows before lo are below the bound; row hi (if < n) is not
    lo, hi = _bisect_rows(data, lo, hi, keys, ki, kw, limit)
    if _cmp_prefix(data, lo, keys, ki, kw) >= limit:
        return lo
    return hi


@leaf
def _lockstep_bisect(arr, queries, qrows, kw, a_, b_):
    """For every query ``i``, narrow ``(a_[i], b_[i]]`` (rows of the sorted ``arr``;
    ``arr[a] <`` key, ``arr[b] >=`` key, -1 and ``len(arr)`` standing for the ends)
    to adjacent rows, all queries taking their bisection steps together."""
    m = qrows.shape[0]
    active = True
    while active:
        active = False
        for i in range(m):
            a = a_[i]
            b = b_[i]
            if b - a > 1:
                mid = (a + b) >> 1
                if _cmp_prefix(arr, mid, queries, qrows[i], kw) < 0:
                    a_[i] = mid
                else:
                    b_[i] = mid
                if b_[i] - a_[i] > 1:
                    active = True


@leaf
def _index_ranges(data, ix, queries, qrows, kw, lo, hi, ends):
    """:func:`key_ranges` through the batch's key index: every query's bucket, then a
    lock-step bisection inside the buckets that are not exactly the key's rows.
    ``ends``: scratch of ``len(qrows)``."""
    m = qrows.shape[0]
    inexact = False
    for i in range(m):
        a, b, exact = _index_bucket(ix, queries, qrows[i], kw)
        if exact:
            lo[i] = a
            hi[i] = a     # adjacent bounds: the bisection leaves it alone
            ends[i] = b
        else:
            lo[i] = a - 1
            hi[i] = b
            ends[i] = -1
            inexact = True
    if inexact:
        _lockstep_bisect(data, queries, qrows, kw, lo, hi)
    for i in range(m):
        e = ends[i]
        if e >= 0:
            hi[i] = e
            continue
        a = hi[i]
        b = a
        q = qrows[i]
        while b < data.shape[0] and _cmp_prefix(data, b, queries, q, kw) == 0:
            b += 1
        lo[i] = a
        hi[i] = b


@njit(cache=True, nogil=True)
def key_ranges(data, fnc, queries, qrows, kw, lo, hi):
    """Row ranges ``[lo[i], hi[i])`` in the sorted batch ``data`` of the keys
    ``queries[qrows[i], :kw]`` (sorted ascending, distinct).

    Batches with a key index look every query's bucket up in it, then bisect the
    buckets in lock-step (unless a bucket is exactly one key). Fenced batches without
    one are searched in lock-step too: the fence (kept in cache) narrows every query to
    one block of FENCE_STEP rows, then all queries take their bisection steps together,
    so the cache misses of different queries overlap instead of queueing one after
    another. Queries dense in the batch are galloped in order.

    This wrapper allocates the scratch; the per-key loops are leaf kernels (no
    reference counting, see :func:`kernels.rows.leaf`).
    """
    n = data.shape[0]
    m = qrows.shape[0]
    nf = fence_rows(n, fnc)
    ix = key_index(n, fnc)
    if ix[4].shape[0] > 0 and m > 0:
        _index_ranges(data, ix, queries, qrows, kw, lo, hi, np.empty(m, np.int64))
        return
    # Dense queries (a few blocks apart on average) are cheapest galloped in order:
    # consecutive probes stay in cache. Lock-step pays off for sparse ones.
    if nf == 0 or m < 2 or m * 4 * FENCE_STEP >= n:
        _dense_ranges(data, fnc, nf, queries, qrows, kw, lo, hi)
        return
    _sparse_ranges(data, fnc, nf, queries, qrows, kw, lo, hi, np.empty(m, np.int64),
                   np.empty(m, np.int64))


@leaf
def _dense_ranges(data, fnc, nf, queries, qrows, kw, lo, hi):
    """:func:`key_ranges` for queries dense in the batch: galloped in order (through
    the first ``nf`` rows of the fence ``fnc``, if any)."""
    n = data.shape[0]
    m = qrows.shape[0]
    fr = fnc[:nf]     # a view: free in a leaf
    pos = np.int64(0)
    for i in range(m):
        q = qrows[i]
        if nf == 0:
            a = _gallop(data, pos, queries, q, kw, 0)
        elif pos >= n or _cmp_prefix(data, pos, queries, q, kw) >= 0:
            a = pos
        else:
            a = _fence_seek(data, fr, pos, queries, q, kw, 0)
        b = a
        while b < n and _cmp_prefix(data, b, queries, q, kw) == 0:
            b += 1
        lo[i] = a
        hi[i] = b
        pos = b


@leaf
def _sparse_ranges(data, fnc, nf, queries, qrows, kw, lo, hi, a_, b_):
    """:func:`key_ranges` for queries sparse in a fenced batch (``nf`` fence rows):
    lock-step bisections. ``a_``, ``b_``: scratch of ``len(qrows)``."""
    n = data.shape[0]
    m = qrows.shape[0]
    fr = fnc[:nf]
    # 1. The fence block of every query: rows (a, b] hold the first row >= the key.
    if 16 * m >= nf:
        # Queries a few fence rows apart: gallop through the fence (it is cached).
        jpos = np.int64(0)
        for i in range(m):
            j = _gallop(fr, jpos, queries, qrows[i], kw, 0)
            jpos = j
            a_[i] = j
    else:
        # Sparse queries: lock-step bisection of the fence as well (fence rows
        # (a, b]: the first fence row >= the key).
        for i in range(m):
            a_[i] = -1
            b_[i] = nf
        _lockstep_bisect(fr, queries, qrows, kw, a_, b_)
        for i in range(m):
            a_[i] = b_[i]
    for i in range(m):
        j = a_[i]
        a_[i] = (j - 1) * FENCE_STEP     # -FENCE_STEP when j == 0: no row below known
        if a_[i] < -1:
            a_[i] = -1
        b_[i] = min(j * FENCE_STEP, n)
    # 2. Lock-step bisection inside the blocks.
    _lockstep_bisect(data, queries, qrows, kw, a_, b_)
    # 3. Ends: the key's rows follow its first row.
    for i in range(m):
        a = b_[i]
        b = a
        q = qrows[i]
        while b < n and _cmp_prefix(data, b, queries, q, kw) == 0:
            b += 1
        lo[i] = a
        hi[i] = b

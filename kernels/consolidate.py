"""Consolidation of update triples.

An *update* is a triple ``(data row, time row, diff)``: ``data`` is int64 ``[n, a]``,
``times`` int64 ``[n, d]`` and ``diffs`` int64 ``[n]``. A set of updates is
*consolidated* when it is strictly sorted by ``(data, time)`` (lexicographically,
data columns first) and no diff is zero: equal ``(data, time)`` pairs have been summed
into one update and zero sums dropped. Consolidation does not change the collection
the updates describe, and it is the canonical form that batches, merges and the tests
compare.

Diff sums are exact: a group whose true sum lies outside int64 raises
``OverflowError`` (the kernels count wrap-arounds instead of stopping at the first
one, so a partial sum that overflows and comes back does not raise and the result does
not depend on the order of summation).

Implementation: the columns of ``[data | times]`` are packed into 64-bit words
(:mod:`ddnumba.kernels.sort`). With one word (the usual case) the packed keys are
sorted carrying the diffs as payload, equal keys are summed in one pass and the output
rows are decoded from the sorted keys, so the rows are never gathered in random order.
With several words, the rows are argsorted and gathered.

The per-row passes over sorted updates (sums of runs, sortedness checks, merges) are
leaf kernels (:func:`ddnumba.kernels.rows.leaf`): the row comparisons inlined into
their loops would otherwise take reference counts on every row.
"""
import numpy as np
from numba import njit

from .rows import add_checked, add_counted, leaf, row_cmp, row_eq
from .sort import (
    _EMPTY_I64,
    _argsort2,
    _is_sorted2,
    _layout,
    _pack_word,
    _sort_keys,
    _unpack_word,
    as_int64_rows,
    as_int64_vector,
)

__all__ = ["consolidate", "consolidate_sorted", "is_consolidated", "consolidate_data",
           "merge_consolidated", "merge_advanced", "accumulate_consolidated"]


# ----------------------------------------------------------------------------------
# Kernels
# ----------------------------------------------------------------------------------

@njit(cache=True, nogil=True)
def _sum_sorted_keys(keys, diffs):
    """Sum the diffs of equal adjacent ``keys``, compacting non-zero sums in place.

    Precondition: ``keys`` sorted. Returns ``(k, overflow)``: afterwards ``keys[:k]``
    are the distinct keys whose diff sum is non-zero and ``diffs[:k]`` those sums;
    ``overflow`` is True (and the arrays are garbage) when some true sum is outside
    int64. Writes never overtake reads: output slot ``k`` <= the run's first index.
    """
    n = keys.shape[0]
    k = 0
    r = 0
    while r < n:
        key = keys[r]
        s = diffs[r]
        carry = 0  # number of wrap-arounds (+1 up, -1 down): true sum = s + carry * 2**64
        r += 1
        while r < n and keys[r] == key:
            s, carry = add_counted(s, carry, diffs[r])
            r += 1
        if carry != 0:
            return k, True
        if s != 0:
            keys[k] = key
            diffs[k] = s
            k += 1
    return k, False


@leaf
def _sum_runs(data, times, diffs, perm, use_perm, rep, sums):
    """Sum the diffs of equal adjacent rows of ``[data | times]`` in ``perm`` order.

    Rows are visited in the order ``perm`` (or ``0..n-1``), which must sort them. For
    each group with a non-zero sum, ``rep[k]`` gets the group's first row index and
    ``sums[k]`` its sum. Returns ``(k, overflow)`` as ``_sum_sorted_keys``.
    """
    n = data.shape[0]
    k = 0
    r = 0
    while r < n:
        first = perm[r] if use_perm else r
        s = diffs[first]
        carry = 0
        r += 1
        while r < n:
            i = perm[r] if use_perm else r
            if not (row_eq(data, first, data, i) and row_eq(times, first, times, i)):
                break
            s, carry = add_counted(s, carry, diffs[i])
            r += 1
        if carry != 0:
            return k, True
        if s != 0:
            rep[k] = first
            sums[k] = s
            k += 1
    return k, False


@njit(cache=True, nogil=True)
def _gather_rows(src, idx, k, out):
    """``out[q] = src[idx[q]]`` for ``q < k``."""
    for q in range(k):
        i = idx[q]
        for c in range(src.shape[1]):
            out[q, c] = src[i, c]


@njit(cache=True, nogil=True, inline="always")
def _upd_cmp(ad, at, i, bd, bt, j):
    """Compare update ``i`` of ``(ad, at)`` with update ``j`` of ``(bd, bt)`` by
    ``(data, time)``: -1, 0 or 1."""
    c = row_cmp(ad, i, bd, j)
    if c == 0:
        c = row_cmp(at, i, bt, j)
    return c


@leaf
def _gallop(ad, at, lo, n, bd, bt, j):
    """The first ``i >= lo`` (``<= n``) with ``(ad[i], at[i]) >= (bd[j], bt[j])``, for
    ``(ad, at)`` sorted: steps of doubling size from ``lo``, then a binary search, so
    an insertion point ``g`` rows on costs ``O(log g)`` comparisons."""
    step = np.int64(1)
    hi = lo
    while hi < n and _upd_cmp(ad, at, hi, bd, bt, j) < 0:
        lo = hi + 1
        hi = lo + step
        step *= 2
    if hi > n:
        hi = n
    while lo < hi:
        mid = (lo + hi) >> 1
        if _upd_cmp(ad, at, mid, bd, bt, j) < 0:
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(cache=True, nogil=True, inline="always")
def _put_upd(sd, st, i, diff, od, ot, of, k):
    for c in range(sd.shape[1]):
        od[k, c] = sd[i, c]
    for c in range(st.shape[1]):
        ot[k, c] = st[i, c]
    of[k] = diff


@leaf
def _merge_consolidated(ad, at, af, bd, bt, bf, od, ot, of):
    """Merge two consolidated update sets into ``(od, ot, of)`` (room for both): the
    rows of ``a`` between two rows of ``b`` are found by galloping and copied as a
    run, so merging a few updates into many costs a copy of the many plus
    ``O(log)`` comparisons per few. Returns ``(k, overflow)``: ``k`` rows written,
    consolidated; ``overflow`` when a pair's sum is outside int64 (output garbage)."""
    n = ad.shape[0]
    m = bd.shape[0]
    i = np.int64(0)
    k = np.int64(0)
    for j in range(m):
        p = _gallop(ad, at, i, n, bd, bt, j)
        while i < p:
            _put_upd(ad, at, i, af[i], od, ot, of, k)
            i += 1
            k += 1
        if i < n and _upd_cmp(ad, at, i, bd, bt, j) == 0:
            s, over = add_checked(af[i], bf[j])
            if over:
                return k, True
            if s != 0:
                _put_upd(ad, at, i, s, od, ot, of, k)
                k += 1
            i += 1
        else:
            _put_upd(bd, bt, j, bf[j], od, ot, of, k)
            k += 1
    while i < n:
        _put_upd(ad, at, i, af[i], od, ot, of, k)
        i += 1
        k += 1
    return k, False


@leaf
def _merge_advance_1d(ad, at, af, bd, bt, bf, f, od, ot, of):
    """Merge two consolidated update sets with one time coordinate into ``(od, ot,
    of)`` (room for both), every time advanced to ``max(time, f)``, consolidated: a
    row's updates at times up to ``f`` become one at ``f``. ``max`` keeps each side's
    order, so one merge pass suffices. Returns ``(k, moved, overflow)``: ``k`` rows
    written; ``moved`` when some time was before ``f``; ``overflow`` when a sum is
    outside int64 (output garbage). Sums are exact (wrap-arounds counted)."""
    n = ad.shape[0]
    m = bd.shape[0]
    w = ad.shape[1]
    i = np.int64(0)
    j = np.int64(0)
    k = np.int64(0)
    moved = False
    pending = False         # od[k], ot[k] hold the row being summed into (s, carry)
    s = np.int64(0)
    carry = np.int64(0)
    from_a = False          # the next update: from a (else b), its advanced time, diff
    t = np.int64(0)
    d = np.int64(0)
    while True:
        done = i >= n and j >= m
        if not done:
            from_a = j >= m or (i < n and _upd_cmp(ad, at, i, bd, bt, j) <= 0)
            if from_a:
                t = at[i, 0]
                d = af[i]
            else:
                t = bt[j, 0]
                d = bf[j]
            if t < f:
                t = f
                moved = True
            same = pending and ot[k, 0] == t
            if same:
                for c in range(w):
                    x = ad[i, c] if from_a else bd[j, c]
                    if od[k, c] != x:
                        same = False
                        break
            if same:
                s, carry = add_counted(s, carry, d)
                if from_a:
                    i += 1
                else:
                    j += 1
                continue
        if pending:         # the row summed so far is complete: keep it unless zero
            if carry != 0:
                return k, moved, True
            if s != 0:
                of[k] = s
                k += 1
        if done:
            return k, moved, False
        for c in range(w):
            od[k, c] = ad[i, c] if from_a else bd[j, c]
        ot[k, 0] = t
        s = d
        carry = np.int64(0)
        pending = True
        if from_a:
            i += 1
        else:
            j += 1


@leaf
def _accumulate_at(data, times, diffs, t, first, sums):
    """One pass over consolidated updates (sorted by data, then time): per data row,
    the sum of the diffs at times ``<= t``. Writes the first index of every row whose
    sum is non-zero to ``first[:k]`` and the sum to ``sums[:k]``; returns ``(k,
    overflow)`` (``overflow``: some true sum is outside int64, see
    :func:`~ddnumba.kernels.rows.add_counted`)."""
    n = data.shape[0]
    d = times.shape[1]
    k = 0
    r = 0
    while r < n:
        s = 0
        carry = 0
        e = r
        while True:
            le = True
            for c in range(d):
                if times[e, c] > t[c]:
                    le = False
                    break
            if le:
                s, carry = add_counted(s, carry, diffs[e])
            e += 1
            if e >= n or not row_eq(data, e, data, r):
                break
        if carry != 0:
            return k, True
        if s != 0:
            first[k] = r
            sums[k] = s
            k += 1
        r = e
    return k, False


# ----------------------------------------------------------------------------------
# Orchestration
# ----------------------------------------------------------------------------------

def _check(data, times, diffs, where):
    data = as_int64_rows(data, "data")
    times = as_int64_rows(times, "times")
    n = data.shape[0]
    if times.shape[0] != n:
        raise ValueError(f"{where}: data has {n} rows but times has {times.shape[0]}")
    diffs = as_int64_vector(diffs, "diffs")
    if diffs.shape[0] != n:
        raise ValueError(f"{where}: data has {n} rows but diffs has {diffs.shape[0]}")
    return data, times, diffs


def _overflow(where):
    return OverflowError(
        f"{where}: the diffs of some (data, time) group sum outside int64; "
        "diff multiplicities this large are not supported"
    )


def _from_runs(data, times, perm, use_perm, diffs, where):
    """Group sorted runs (visited through ``perm``) into fresh output arrays."""
    n = data.shape[0]
    rep = np.empty(n, np.int64)
    sums = np.empty(n, np.int64)
    k, over = _sum_runs(data, times, diffs, perm, use_perm, rep, sums)
    if over:
        raise _overflow(where)
    out_data = np.empty((k, data.shape[1]), np.int64)
    out_times = np.empty((k, times.shape[1]), np.int64)
    _gather_rows(data, rep, k, out_data)
    _gather_rows(times, rep, k, out_times)
    return out_data, out_times, (sums if k == n else sums[:k].copy())


@njit(cache=True, nogil=True)
def _consolidate_small(data, times, diffs):
    """Consolidate a few updates in one call: insertion sort of row indices by
    (data, time), then the shared summing pass (``_sum_runs``: exact group sums)."""
    n = data.shape[0]
    idx = np.empty(n, np.int64)
    for i in range(n):
        idx[i] = i
    for i in range(1, n):
        x = idx[i]
        j = i
        while j > 0:
            y = idx[j - 1]
            c = row_cmp(data, y, data, x)
            if c == 0:
                c = row_cmp(times, y, times, x)
            if c <= 0:
                break
            idx[j] = y
            j -= 1
        idx[j] = x
    # Sum equal neighbours (exact group sums) and gather the survivors.
    rep = np.empty(n, np.int64)
    out_diffs = np.empty(n, np.int64)
    k, over = _sum_runs(data, times, diffs, idx, True, rep, out_diffs)
    out_data = np.empty((k, data.shape[1]), np.int64)
    out_times = np.empty((k, times.shape[1]), np.int64)
    _gather_rows(data, rep, k, out_data)
    _gather_rows(times, rep, k, out_times)
    return out_data, out_times, out_diffs, k, over


# Below this many updates one small kernel call beats the radix path's setup.
_SMALL = 64


def _consolidate(data, times, diffs, where="consolidate"):
    n = data.shape[0]
    if n == 0:
        return (np.empty((0, data.shape[1]), np.int64), np.empty((0, times.shape[1]), np.int64),
                np.empty(0, np.int64))
    if n <= _SMALL:
        d, t, f, k, over = _consolidate_small(data, times, diffs)
        if over:
            raise _overflow(where)
        return d, t, f[:k].copy()
    mins, widths, word_of, shifts, word_bits = layout = _layout(data, times)
    if len(word_bits) <= 1:
        keys = np.empty(n, np.uint64)
        _pack_word(data, times, mins, word_of, shifts, np.int64(0), _EMPTY_I64, False, keys)
        sk, sd = _sort_keys(keys, diffs, word_bits[0] if word_bits else 0)
        del keys
        k, over = _sum_sorted_keys(sk, sd)
        if over:
            raise _overflow(where)
        out_data = np.empty((k, data.shape[1]), np.int64)
        out_times = np.empty((k, times.shape[1]), np.int64)
        _unpack_word(sk, k, mins, widths, shifts, out_data, out_times)
        # `sd` is already a fresh array: copy only to release the unused tail.
        return out_data, out_times, (sd if k == n else sd[:k].copy())
    perm = _argsort2(data, times)[0]
    del layout
    return _from_runs(data, times, perm, True, diffs, where)


# ----------------------------------------------------------------------------------
# Public wrappers
# ----------------------------------------------------------------------------------

def consolidate(data, times, diffs):
    """Sort updates by ``(data, time)``, sum the diffs of equal pairs, drop zeros.

    Parameters
    ----------
    data : array_like of int, shape [n, a], a >= 0
    times : array_like of int, shape [n, d] (d >= 1 for times; d == 0 is accepted)
    diffs : array_like of int, shape [n]

    Returns
    -------
    (data, times, diffs)
        Fresh C-contiguous int64 arrays ``[k, a]``, ``[k, d]``, ``[k]``, consolidated
        (see :func:`is_consolidated`): for every distinct ``(data, time)`` of the input
        whose diffs sum to a non-zero value, one row with that sum.

    Raises
    ------
    OverflowError
        When the exact diff sum of some ``(data, time)`` group is outside int64.
    ValueError
        On mismatched lengths or a lossy dtype.
    """
    data, times, diffs = _check(data, times, diffs, "consolidate")
    return _consolidate(data, times, diffs)


def consolidate_sorted(data, times, diffs):
    """:func:`consolidate` for updates already sorted by ``(data, time)``: one linear
    pass (plus a gather of the surviving rows).

    Precondition (checked, ``ValueError`` otherwise): the rows of ``[data | times]``
    are lexicographically non-decreasing; equal rows need not be adjacent to anything
    else. Returns and raises as :func:`consolidate`.
    """
    data, times, diffs = _check(data, times, diffs, "consolidate_sorted")
    if not _is_sorted2(data, times, False):
        raise ValueError("consolidate_sorted: updates are not sorted by (data, time); "
                         "use consolidate() instead")
    return _from_runs(data, times, _EMPTY_I64, False, diffs, "consolidate_sorted")


def is_consolidated(data, times, diffs):
    """True when the updates are strictly sorted by ``(data, time)`` and no diff is 0.

    Shapes as for :func:`consolidate` (``ValueError`` on mismatch).
    """
    data, times, diffs = _check(data, times, diffs, "is_consolidated")
    return bool(_is_sorted2(data, times, True)) and not bool((diffs == 0).any())


def consolidate_data(data, diffs):
    """Consolidate rows without times: sort ``data`` rows, sum diffs, drop zeros.

    Parameters
    ----------
    data : array_like of int, shape [n, a]
    diffs : array_like of int, shape [n]

    Returns
    -------
    (data, diffs)
        Fresh int64 ``[k, a]`` (strictly sorted rows) and ``[k]`` (non-zero sums).
        Raises ``OverflowError`` as :func:`consolidate`.
    """
    data = as_int64_rows(data, "data")
    times = np.zeros((data.shape[0], 0), np.int64)
    data, times, diffs = _check(data, times, diffs, "consolidate_data")
    out_data, _, out_diffs = _consolidate(data, times, diffs, "consolidate_data")
    return out_data, out_diffs


def merge_consolidated(a, b):
    """Merge two consolidated update sets ``a`` and ``b`` (each ``(data, times,
    diffs)``) into one: the consolidation of their union, in time linear in the larger
    and logarithmic per row of the smaller (rows of one side between two of the other
    are found by galloping and copied as a run).

    Precondition (not checked: that would cost a pass over both): each input is
    consolidated (see :func:`is_consolidated`). Widths must agree (checked).

    Returns fresh C-contiguous int64 ``(data, times, diffs)``, consolidated. Raises
    ``OverflowError`` when an update of ``a`` and its equal in ``b`` sum outside
    int64, ``ValueError`` on mismatched shapes.
    """
    ad, at, af = _check(*a, "merge_consolidated")
    bd, bt, bf = _check(*b, "merge_consolidated")
    if ad.shape[1] != bd.shape[1] or at.shape[1] != bt.shape[1]:
        raise ValueError(f"merge_consolidated: widths differ: data {ad.shape[1]} and "
                         f"{bd.shape[1]} columns, times {at.shape[1]} and {bt.shape[1]}")
    if ad.shape[0] < bd.shape[0]:
        # gallop through the larger side: the smaller one's rows drive the loop
        ad, at, af, bd, bt, bf = bd, bt, bf, ad, at, af
    n = ad.shape[0] + bd.shape[0]
    od = np.empty((n, ad.shape[1]), np.int64)
    ot = np.empty((n, at.shape[1]), np.int64)
    of = np.empty(n, np.int64)
    k, over = _merge_consolidated(ad, at, af, bd, bt, bf, od, ot, of)
    if over:
        raise _overflow("merge_consolidated")
    return _trimmed(od, ot, of, k)


def _trimmed(od, ot, of, k):
    """The first ``k`` rows of a merge's output buffers: views when at most a quarter
    of the rows cancelled (prefix views stay C-contiguous), else copies (releasing the
    rest)."""
    n = of.shape[0]
    if k == n:
        return od, ot, of
    if 4 * (n - k) <= n:
        return od[:k], ot[:k], of[:k]
    return od[:k].copy(), ot[:k].copy(), of[:k].copy()


def merge_advanced(a, b, f):
    """The consolidation of the union of two consolidated update sets ``a`` and ``b``
    (each ``(data, times, diffs)``, one time coordinate), every time advanced to
    ``max(time, f)``, in one pass over both: what compacting them to time ``f`` keeps.

    Precondition (not checked): each input is consolidated. Returns ``(data, times,
    diffs, moved)``, fresh and consolidated; ``moved`` is True when some time was
    before ``f``. Raises ``OverflowError`` when a sum leaves int64, ``ValueError`` on
    different data widths or more than one time coordinate.
    """
    ad, at, af = _check(*a, "merge_advanced")
    bd, bt, bf = _check(*b, "merge_advanced")
    if ad.shape[1] != bd.shape[1] or at.shape[1] != 1 or bt.shape[1] != 1:
        raise ValueError(f"merge_advanced: data widths {ad.shape[1]} and {bd.shape[1]}, "
                         f"time widths {at.shape[1]} and {bt.shape[1]} (one time "
                         f"coordinate and equal data widths expected)")
    n = ad.shape[0] + bd.shape[0]
    od = np.empty((n, ad.shape[1]), np.int64)
    ot = np.empty((n, 1), np.int64)
    of = np.empty(n, np.int64)
    k, moved, over = _merge_advance_1d(ad, at, af, bd, bt, bf, np.int64(f), od, ot, of)
    if over:
        raise _overflow("merge_advanced")
    return (*_trimmed(od, ot, of, k), bool(moved))


def accumulate_consolidated(data, times, diffs, t):
    """The collection at time ``t`` of consolidated updates: every data row with the
    sum of its diffs at times ``<= t`` (product order), rows whose sum is zero left
    out. One pass, no sort: the rows come out sorted as they went in.

    Precondition (not checked: that would cost a pass): the updates are consolidated
    (see :func:`is_consolidated`), so each data row's updates are adjacent.

    Returns fresh int64 ``(rows [k, a], counts [k])``. Raises ``OverflowError`` when a
    row's sum lies outside int64, ``ValueError`` on mismatched shapes.
    """
    data, times, diffs = _check(data, times, diffs, "accumulate_consolidated")
    t = as_int64_vector(t, "t")
    if t.shape[0] != times.shape[1]:
        raise ValueError(f"accumulate_consolidated: the time has {t.shape[0]} "
                         f"coordinate(s), the updates {times.shape[1]}")
    n = data.shape[0]
    first = np.empty(n, np.int64)
    sums = np.empty(n, np.int64)
    k, over = _accumulate_at(data, times, diffs, t, first, sums)
    if over:
        raise _overflow("accumulate_consolidated")
    rows = np.empty((k, data.shape[1]), np.int64)
    _gather_rows(data, first, k, rows)
    return rows, sums[:k].copy()

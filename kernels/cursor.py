"""Cursors: vectorised lookup of many sorted keys in a sorted batch.

A *cursor* walks a sorted array of rows in step with a sorted array of query rows and
reports, for each query, where its equal rows sit. Because the queries are sorted, each
search starts where the previous one ended and gallops (probes 1, 2, 4, ... rows ahead,
then bisects the last gap), so ``q`` lookups in ``n`` rows cost ``O(q log(n / q))``
comparisons: a few per query when queries are dense, a binary search when sparse.

On a trie, the located keys then expand to their ``(val, time, diff)`` updates, tagged
with the query they answer, which is what joins and reduces consume.
"""
import numpy as np
from numba import njit

from .rows import row_cmp, row_eq
from .trie import _as_int64, _normalise_trie


@njit(cache=True, nogil=True, inline="always")
def _gallop(rows, start, n, q, qi, strict):
    """First index ``i >= start`` with ``rows[i] >= q[qi]`` (``> q[qi]`` when strict).

    Pre-condition: every row before ``start`` is below the bound.
    """
    # cmp_ok(i) := rows[i] is below the bound, i.e. < q (or <= q when strict)
    limit = 1 if strict else 0
    if start >= n or row_cmp(rows, start, q, qi) >= limit:
        return start
    lo = start  # rows[lo] is below the bound
    step = 1
    hi = start + 1
    while hi < n and row_cmp(rows, hi, q, qi) < limit:
        lo = hi
        step *= 2
        hi = lo + step
    if hi > n:
        hi = n
    # rows[lo] below the bound; rows[hi] not below it (or hi == n)
    while hi - lo > 1:
        mid = (lo + hi) >> 1
        if row_cmp(rows, mid, q, qi) < limit:
            lo = mid
        else:
            hi = mid
    return hi


@njit(cache=True, nogil=True)
def _key_ranges(rows, queries, lo, hi):
    n = rows.shape[0]
    pos = 0
    for qi in range(queries.shape[0]):
        if qi > 0 and row_eq(queries, qi - 1, queries, qi):
            lo[qi] = lo[qi - 1]
            hi[qi] = hi[qi - 1]
            continue
        # Rows before the previous query's end are <= it < this query.
        a = _gallop(rows, pos, n, queries, qi, False)
        b = _gallop(rows, a, n, queries, qi, True)
        lo[qi] = a
        hi[qi] = b
        pos = b


@njit(cache=True, nogil=True)
def _rows_unsorted_at(rows, strict):
    """Index of the first row out of (strictly, if ``strict``) increasing order, or -1."""
    limit = 0 if strict else 1
    for i in range(1, rows.shape[0]):
        if row_cmp(rows, i - 1, rows, i) >= limit:
            return i
    return -1


def key_ranges(sorted_rows, queries, *, check_sorted=False) -> tuple:
    """For each query row, the half-open range of equal rows in ``sorted_rows``.

    Parameters
    ----------
    sorted_rows : int64[n, w]
        Rows in non-decreasing lexicographic order; repeats allowed.
    queries : int64[q, w]
        Rows in non-decreasing order; repeats allowed. Checked (O(q)).
    check_sorted : bool, default False
        Also check that ``sorted_rows`` is sorted, which costs O(n) instead of the
        search's O(q log(n / q)); leave off for arrays sorted by construction.

    Returns
    -------
    lo, hi : int64[q]
        ``sorted_rows[lo[i]:hi[i]]`` are exactly the rows equal to ``queries[i]``;
        ``lo[i] == hi[i]`` (the insertion point) when there is none.

    Raises
    ------
    ValueError
        On mismatched widths or unsorted input.
    """
    rows = _as_int64(sorted_rows, "sorted_rows", 2)
    queries = _as_int64(queries, "queries", 2)
    if rows.shape[1] != queries.shape[1]:
        raise ValueError(
            f"key_ranges: sorted_rows has {rows.shape[1]} columns but queries has "
            f"{queries.shape[1]}"
        )
    bad = _rows_unsorted_at(queries, False)
    if bad >= 0:
        raise ValueError(f"key_ranges: queries are not sorted at row {bad}; sort them first")
    if check_sorted:
        bad = _rows_unsorted_at(rows, False)
        if bad >= 0:
            raise ValueError(f"key_ranges: sorted_rows is not sorted at row {bad}")
    q = queries.shape[0]
    lo = np.empty(q, np.int64)
    hi = np.empty(q, np.int64)
    _key_ranges(rows, queries, lo, hi)
    return lo, hi


@njit(cache=True, nogil=True)
def _gather(kidx, key_offs, vals, val_offs, times, diffs):
    """Expand trie keys ``kidx`` (``-1`` = absent) into their tagged updates.

    Two passes: count the output so it is allocated once, then fill it.
    """
    q = kidx.shape[0]
    total = 0
    for i in range(q):
        k = kidx[i]
        if k >= 0:
            total += val_offs[key_offs[k + 1]] - val_offs[key_offs[k]]
    vw = vals.shape[1]
    d = times.shape[1]
    qidx = np.empty(total, np.int64)
    out_vals = np.empty((total, vw), np.int64)
    out_times = np.empty((total, d), np.int64)
    out_diffs = np.empty(total, np.int64)
    w = 0
    for i in range(q):
        k = kidx[i]
        if k < 0:
            continue
        for v in range(key_offs[k], key_offs[k + 1]):
            for u in range(val_offs[v], val_offs[v + 1]):
                qidx[w] = i
                for c in range(vw):
                    out_vals[w, c] = vals[v, c]
                for c in range(d):
                    out_times[w, c] = times[u, c]
                out_diffs[w] = diffs[u]
                w += 1
    return qidx, out_vals, out_times, out_diffs


@njit(cache=True, nogil=True)
def _find_keys(keys, queries):
    """Index of each (sorted) query in the strictly increasing ``keys``, or -1."""
    q = queries.shape[0]
    lo = np.empty(q, np.int64)
    hi = np.empty(q, np.int64)
    _key_ranges(keys, queries, lo, hi)
    for i in range(q):
        if hi[i] == lo[i]:
            lo[i] = -1
    return lo


def gather_keys(trie, queries) -> tuple:
    """All updates of the trie keys equal to the query rows, tagged by query index.

    Parameters
    ----------
    trie : Trie
        A valid trie (``check_trie``; not re-checked).
    queries : int64[q, kw]
        Key rows in non-decreasing order (checked); repeats allowed, absent keys allowed.

    Returns
    -------
    qidx : int64[u]
        Index into ``queries`` of each output update.
    vals : int64[u, vw]
    times : int64[u, d]
    diffs : int64[u]
        For each query whose key is in the trie, every ``(val, time, diff)`` of that key;
        output sorted by ``(qidx, val, time)``. A repeated query is answered each time.
    """
    t = _normalise_trie(trie, "trie")
    queries = _as_int64(queries, "queries", 2)
    if queries.shape[1] != t.keys.shape[1]:
        raise ValueError(
            f"gather_keys: queries have {queries.shape[1]} columns but the trie's keys "
            f"{t.keys.shape[1]}"
        )
    bad = _rows_unsorted_at(queries, False)
    if bad >= 0:
        raise ValueError(f"gather_keys: queries are not sorted at row {bad}; sort them first")
    kidx = _find_keys(t.keys, queries)
    return _gather(kidx, t.key_offs, t.vals, t.val_offs, t.times, t.diffs)


def gather_rows(trie, key_idx) -> tuple:
    """All updates of the trie keys at the given indices, tagged by position in ``key_idx``.

    Parameters
    ----------
    trie : Trie
        A valid trie (not re-checked).
    key_idx : int64[q]
        Key indices ``0 <= key_idx[i] < nk``, in any order, repeats allowed.

    Returns
    -------
    qidx, vals, times, diffs
        As :func:`gather_keys`, with ``qidx`` indexing ``key_idx``; sorted by
        ``(qidx, val, time)``.
    """
    t = _normalise_trie(trie, "trie")
    kidx = _as_int64(key_idx, "key_idx", 1)
    nk = t.keys.shape[0]
    if kidx.size and (kidx.min() < 0 or kidx.max() >= nk):
        raise ValueError(f"gather_rows: key_idx must lie in [0, {nk}), got range "
                         f"[{kidx.min()}, {kidx.max()}]")
    return _gather(kidx, t.key_offs, t.vals, t.val_offs, t.times, t.diffs)

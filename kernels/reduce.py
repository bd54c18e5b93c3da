"""Reduce kernels: interesting times, accumulation, corrections and built-in logic.

A *reduce* groups rows by key and maintains, for every time ``t``, the invariant
``output accumulated at t == logic(key, input accumulated at t)``. Times are int64
vectors under the product partial order, so the input of a key can change at the *join*
of two update times even though no update carries that time: with ``count``, inputs at
``(0, 1)`` and ``(1, 0)`` change the output at ``(1, 1)``. The set of times at which a
key's output may need a correction is the *interesting times*: the closure of the times
of the new updates (the *seeds*) under join with each other and with the key's older
input times. The runtime drives one activation in four batched steps, each a kernel
here over CSR per-key lists (``offs[K + 1]`` indexes the rows of key ``k`` as
``offs[k]:offs[k + 1]``):

1. :func:`interesting_times` finds each key's interesting times, split into those that
   are due now (not in the future of the frontier ``upper``) and those still *pending*;
2. :func:`accumulate` computes the key's accumulated input at every due time
   (a *moment*);
3. a logic kernel maps every moment's accumulated input to the desired output
   (:func:`logic_count`, :func:`logic_sum`, :func:`logic_min`, :func:`logic_max`,
   :func:`logic_distinct`, :func:`logic_top_k`, or a driver from
   :func:`make_user_driver`), in one batched call over all moments of all keys;
4. :func:`corrections` compares the desired output with the output accumulated so far
   and emits the differences at the moments' times.

Diff arithmetic is checked: a kernel returns an overflow flag and the wrapper raises
``OverflowError`` instead of letting a sum wrap around.

``interesting_times``, ``accumulate`` and ``corrections`` take ``check=False`` to skip
their O(n) validation of offsets and sortedness when the caller guarantees them (the
runtime's reduce operator does: its inputs come from consolidated traces); shapes and
dtypes are still normalised.
"""
import numpy as np
from numba import njit

from .rows import I0, add_checked, mul_checked, row_cmp, row_eq, row_le

__all__ = [
    "interesting_times",
    "accumulate",
    "corrections",
    "logic_count",
    "logic_sum",
    "logic_min",
    "logic_max",
    "logic_distinct",
    "logic_top_k",
    "make_user_driver",
]

# Codes of the built-in logics, as the compiled runtimes (kernels.runtime,
# kernels.seqloop) receive them in their programs; CALLBACK runs a Python function on
# moments.
L_CALLBACK = 0
L_COUNT = 1
L_SUM = 2
L_MIN = 3
L_MAX = 4
L_DISTINCT = 5
L_TOP_K = 6
LOGIC = {"callback": L_CALLBACK, "count": L_COUNT, "sum": L_SUM, "min": L_MIN,
         "max": L_MAX, "distinct": L_DISTINCT, "top_k": L_TOP_K}

_I64 = np.int64
_I64_MIN = np.iinfo(np.int64).min
_I64_MAX = np.iinfo(np.int64).max


# ---------------------------------------------------------------------------------------
# Small jitted helpers: checked subtraction, growable buffers, a row hash set, row sort.
# ---------------------------------------------------------------------------------------


@njit(cache=True, nogil=True, inline="always")
def _sub_checked(x, y):
    """Return ``(x - y, overflowed)`` for int64 values without silently wrapping."""
    s = x - y
    # Overflow iff the operands have different signs and the result's sign differs
    # from x's (negating y first would itself overflow for y == INT64_MIN).
    return s, ((x ^ y) & (x ^ s)) < 0


@njit(cache=True, nogil=True, inline="always")
def _in_future(upper, a, i):
    """True when time ``a[i]`` is in the future of the antichain ``upper``."""
    for f in range(upper.shape[0]):
        if row_le(upper, f, a, i):
            return True
    return False


@njit(cache=True, nogil=True)
def _grow_rows(buf, n, need):
    """Return ``buf`` if it has ``need`` rows, else a larger copy of its first ``n`` rows.

    Capacity at least doubles so appends stay amortised O(1).
    """
    if need <= buf.shape[0]:
        return buf
    cap = max(need, 2 * buf.shape[0], 16)
    out = np.empty((cap, buf.shape[1]), np.int64)
    # Explicit loops: slice assignment compiles to far more code (seconds of JIT time).
    for i in range(n):
        for c in range(buf.shape[1]):
            out[i, c] = buf[i, c]
    return out


@njit(cache=True, nogil=True)
def _grow_vec(buf, n, need):
    """One-dimensional counterpart of :func:`_grow_rows`."""
    if need <= buf.shape[0]:
        return buf
    cap = max(need, 2 * buf.shape[0], 16)
    out = np.empty(cap, np.int64)
    for i in range(n):
        out[i] = buf[i]
    return out


@njit(cache=True, nogil=True, inline="always")
def _row_hash(a, i):
    """A 64-bit mix of row ``a[i]`` (FNV-style with a shift, good enough for probing)."""
    h = np.uint64(14695981039346656037)
    for c in range(a.shape[1]):
        h = (h ^ np.uint64(a[i, c])) * np.uint64(1099511628211)
        h = h ^ (h >> np.uint64(29))
    return h


@njit(cache=True, nogil=True)
def _new_set(d):
    """An empty reusable row hash set ``(rows, table, stamp)``.

    A slot ``s`` is occupied iff ``stamp[s] == gen`` for the caller's current
    generation ``gen >= 1``: bumping ``gen`` empties the set in O(1), so one set serves
    every key without reallocating or clearing its table.
    """
    return np.empty((16, d), np.int64), np.zeros(32, np.int64), np.zeros(32, np.int64)


@njit(cache=True, nogil=True)
def _rehash(rows, n, tcap, gen):
    table = np.empty(tcap, np.int64)
    stamp = np.zeros(tcap, np.int64)
    mask = np.uint64(tcap - 1)
    for j in range(n):
        s = np.int64(_row_hash(rows, j) & mask)
        while stamp[s] == gen:
            s = (s + 1) & (tcap - 1)
        table[s] = j
        stamp[s] = gen
    return table, stamp


@njit(cache=True, nogil=True)
def _set_insert(rows, n, table, stamp, gen, src, i):
    """Insert row ``src[i]``; return ``(rows, n, table, stamp, is_new)``.

    Open addressing with linear probing; the table is kept at most half full so probes
    stay short. ``rows[:n]`` keeps insertion order, which the closure worklist relies on.
    """
    if 2 * (n + 1) > table.shape[0]:
        table, stamp = _rehash(rows, n, 2 * table.shape[0], gen)
    tcap = table.shape[0]
    s = np.int64(_row_hash(src, i) & np.uint64(tcap - 1))
    while stamp[s] == gen:
        if row_eq(rows, table[s], src, i):
            return rows, n, table, stamp, False
        s = (s + 1) & (tcap - 1)
    rows = _grow_rows(rows, n, n + 1)
    for c in range(rows.shape[1]):
        rows[n, c] = src[i, c]
    table[s] = n
    stamp[s] = gen
    return rows, n + 1, table, stamp, True


@njit(cache=True, nogil=True)
def _argsort_rows(mat, lo, hi, idx, tmp):
    """Stable lexicographic argsort of rows ``mat[lo:hi]`` (absolute row indices).

    ``idx`` and ``tmp`` are scratch buffers of at least ``hi - lo`` entries; the result
    is in the first ``hi - lo`` entries of the returned buffer (one of the two).
    Insertion sort on short runs, then bottom-up merging: the sets sorted here (one
    key's times, one moment's user output) are usually tiny, and np.lexsort would cost
    a Python call per set.
    """
    n = hi - lo
    for i in range(n):
        idx[i] = lo + i
    run = 16
    for s in range(0, n, run):
        e = min(s + run, n)
        for i in range(s + 1, e):
            v = idx[i]
            j = i - 1
            while j >= s and row_cmp(mat, idx[j], mat, v) > 0:
                idx[j + 1] = idx[j]
                j -= 1
            idx[j + 1] = v
    src = idx
    dst = tmp
    width = run
    while width < n:
        for s in range(0, n, 2 * width):
            mid = min(s + width, n)
            e = min(s + 2 * width, n)
            i = s
            j = mid
            o = s
            while i < mid and j < e:
                # Take from the right run only when strictly smaller: keeps stability.
                if row_cmp(mat, src[j], mat, src[i]) < 0:
                    dst[o] = src[j]
                    j += 1
                else:
                    dst[o] = src[i]
                    i += 1
                o += 1
            while i < mid:
                dst[o] = src[i]
                i += 1
                o += 1
            while j < e:
                dst[o] = src[j]
                j += 1
                o += 1
        src, dst = dst, src
        width *= 2
    return src


@njit(cache=True, nogil=True)
def _run_starts(vals, lo, hi, starts):
    """Write the starts of the runs of equal rows in ``vals[lo:hi]`` to ``starts``.

    Returns the number of runs ``nr``; ``starts[nr] = hi`` is a sentinel, so ``starts``
    needs ``hi - lo + 1`` entries.
    """
    nr = 0
    p = lo
    while p < hi:
        starts[nr] = p
        nr += 1
        q = p + 1
        while q < hi and row_eq(vals, q, vals, p):
            q += 1
        p = q
    starts[nr] = hi
    return nr


# ---------------------------------------------------------------------------------------
# Input validation (Python side).
# ---------------------------------------------------------------------------------------


def _as_i64(x, name, ndim):
    """Return ``x`` as a writeable C-contiguous int64 array of ``ndim`` dimensions.

    Converts other dtypes only when the conversion is lossless; raises ``ValueError``
    naming the argument otherwise. Read-only inputs are copied so that every kernel is
    compiled for a single (writeable, C-contiguous) array type.
    """
    a = np.asarray(x)
    if a.ndim != ndim:
        raise ValueError(f"{name} must be a {ndim}-D array, got shape {a.shape}")
    if a.dtype != np.int64:
        kind = a.dtype.kind
        if kind in "bi" or (kind == "u" and a.dtype.itemsize < 8):
            a = a.astype(np.int64)
        elif kind == "u":
            if a.size and a.max() > _I64_MAX:
                raise ValueError(f"{name} has values that do not fit in int64")
            a = a.astype(np.int64)
        elif kind == "f":
            if a.size and not (
                np.all(np.isfinite(a))
                and np.all(a == np.trunc(a))
                and a.min() >= -(2.0**63)
                and a.max() < 2.0**63
            ):
                raise ValueError(f"{name} has non-integral or out-of-range float values")
            a = a.astype(np.int64)
        else:
            raise ValueError(f"{name} must hold integers, got dtype {a.dtype}")
    a = np.ascontiguousarray(a)
    if not a.flags.writeable:
        a = a.copy()
    return a


def _check_offs(offs, name, n_rows, rows_name, n_keys=None):
    """Check that ``offs`` is a valid CSR offset array over ``n_rows`` rows."""
    if offs.shape[0] < 1:
        raise ValueError(f"{name} must have at least one entry (K + 1 offsets)")
    if n_keys is not None and offs.shape[0] != n_keys + 1:
        raise ValueError(f"{name} has {offs.shape[0] - 1} keys, expected {n_keys}")
    if offs[0] != 0:
        raise ValueError(f"{name}[0] must be 0, got {offs[0]}")
    if offs[-1] != n_rows:
        raise ValueError(
            f"{name}[-1] = {offs[-1]} does not match the {n_rows} rows of {rows_name}"
        )
    if offs.shape[0] > 1 and np.any(offs[1:] < offs[:-1]):
        raise ValueError(f"{name} must be non-decreasing")


def _check_width(a, name, width, what):
    if a.shape[1] != width:
        raise ValueError(f"{name} has {a.shape[1]} columns, expected {width} ({what})")


@njit(cache=True, nogil=True)
def _csr_sorted(offs, a, b):
    """Index of the first row out of (a, b) lexicographic order within a key, or -1."""
    for k in range(offs.shape[0] - 1):
        for i in range(offs[k] + 1, offs[k + 1]):
            c = row_cmp(a, i - 1, a, i)
            if c > 0 or (c == 0 and row_cmp(b, i - 1, b, i) > 0):
                return i
    return -1


def _check_sorted(offs, a, b, what):
    bad = _csr_sorted(offs, a, b)
    if bad >= 0:
        raise ValueError(f"{what} must be sorted within each key; row {bad} is out of order")


def _upper(upper, d):
    """Normalise the frontier antichain to ``int64[m, d]`` (``m == 0``: all due)."""
    u = np.asarray(upper)
    if u.size == 0:
        return np.empty((0, d), np.int64)
    u = _as_i64(u, "upper", 2)
    _check_width(u, "upper", d, "time dimensions")
    return u


@njit(cache=True, nogil=True)
def _argsort_small(keys, n, out):
    """Stable argsort of ``keys[:n]`` into ``out[:n]``: insertion sort for short runs
    (no allocation), a merge sort otherwise."""
    if n > 32:
        perm = np.argsort(keys[:n], kind="mergesort")
        for i in range(n):
            out[i] = perm[i]
        return
    for i in range(n):
        out[i] = i
    for i in range(1, n):
        j = i
        x = out[i]
        while j > 0 and keys[out[j - 1]] > keys[x]:
            out[j] = out[j - 1]
            j -= 1
        out[j] = x


# ---------------------------------------------------------------------------------------
# 1. Interesting times.
# ---------------------------------------------------------------------------------------


@njit(cache=True, nogil=True)
def _interesting_times_1d(seed_offs, seed_times, hist_offs, hist_times, upper):
    """The closure for totally ordered (1-D) times: ``max(s, a)`` is ``a`` when
    ``a > s``, so T = seeds ∪ {history times > min seed}; no pairwise joins needed."""
    K = seed_offs.shape[0] - 1
    has_upper = upper.shape[0] > 0
    # The frontier of a total order is its least element.
    ub = upper[0, 0] if has_upper else 0
    for i in range(1, upper.shape[0]):
        if upper[i, 0] < ub:
            ub = upper[i, 0]
    total = seed_times.shape[0] + hist_times.shape[0]
    due_out = np.empty((total, 1), np.int64)
    pend_out = np.empty((total, 1), np.int64)
    due_offs = np.zeros(K + 1, np.int64)
    pend_offs = np.zeros(K + 1, np.int64)
    scratch = np.empty(16, np.int64)
    sorder = np.empty(16, np.int64)
    n_due = np.int64(0)
    n_pend = np.int64(0)
    bad_seed = -1
    for k in range(K):
        s0 = seed_offs[k]
        s1 = seed_offs[k + 1]
        if s0 < s1:
            lo = seed_times[s0, 0]
            for s in range(s0, s1):
                t = seed_times[s, 0]
                if t < lo:
                    lo = t
                if bad_seed < 0 and has_upper and t >= ub:
                    bad_seed = s
            h0 = hist_offs[k]
            h1 = hist_offs[k + 1]
            need = (s1 - s0) + (h1 - h0)
            if scratch.shape[0] < need:
                scratch = np.empty(2 * need, np.int64)
                sorder = np.empty(2 * need, np.int64)
            m = np.int64(0)
            for s in range(s0, s1):
                scratch[m] = seed_times[s, 0]
                m += 1
            for h in range(h0, h1):
                if hist_times[h, 0] > lo:
                    scratch[m] = hist_times[h, 0]
                    m += 1
            if sorder.shape[0] < m:
                sorder = np.empty(2 * m, np.int64)
            _argsort_small(scratch, m, sorder)
            prev = 0
            for i in range(m):
                t = scratch[sorder[i]]
                if i > 0 and t == prev:
                    continue
                prev = t
                if has_upper and t >= ub:
                    pend_out[n_pend, 0] = t
                    n_pend += 1
                else:
                    due_out[n_due, 0] = t
                    n_due += 1
        due_offs[k + 1] = n_due
        pend_offs[k + 1] = n_pend
    return due_offs, due_out, n_due, pend_offs, pend_out, n_pend, bad_seed


@njit(cache=True, nogil=True)
def _interesting_times(seed_offs, seed_times, hist_offs, hist_times, upper):
    K = seed_offs.shape[0] - 1
    d = seed_times.shape[1]
    due_offs = np.zeros(K + 1, np.int64)
    pend_offs = np.zeros(K + 1, np.int64)
    due_out = np.empty((max(16, seed_times.shape[0]), d), np.int64)
    pend_out = np.empty((16, d), np.int64)
    n_due = np.int64(0)
    n_pend = np.int64(0)
    tmp = np.empty((1, d), np.int64)
    meet = np.empty(d, np.int64)
    bad_seed = -1
    # Three row sets reused by every key (history', due, pending) and sort scratch:
    # per-key allocations would dominate when keys have a handful of times each.
    hrows, htab, hst = _new_set(d)
    drows, dtab, dst = _new_set(d)
    prows, ptab, pst = _new_set(d)
    sa = np.empty(16, np.int64)
    sb = np.empty(16, np.int64)
    gen = np.int64(0)
    for k in range(K):
        s0 = seed_offs[k]
        s1 = seed_offs[k + 1]
        if s0 < s1:
            gen += 1  # empties the three sets
            nh = np.int64(0)
            nd = np.int64(0)
            npd = np.int64(0)
            # Every element of the closure is >= the meet of the seeds, so history time
            # a can be replaced by a v meet without changing any join with an element of
            # the closure; equal replacements collapse (in 1-D, all a <= meet become one).
            for c in range(d):
                meet[c] = seed_times[s0, c]
            for s in range(s0 + 1, s1):
                for c in range(d):
                    if seed_times[s, c] < meet[c]:
                        meet[c] = seed_times[s, c]
            h0 = hist_offs[k]
            h1 = hist_offs[k + 1]
            for h in range(h0, h1):
                for c in range(d):
                    tmp[0, c] = max(hist_times[h, c], meet[c])
                hrows, nh, htab, hst, _ = _set_insert(hrows, nh, htab, hst, gen, tmp, I0)
            for s in range(s0, s1):
                if bad_seed < 0 and _in_future(upper, seed_times, s):
                    bad_seed = s
                drows, nd, dtab, dst, _ = _set_insert(
                    drows, nd, dtab, dst, gen, seed_times, s
                )

            # Worklist closure: element i is joined with every (collapsed) history time
            # and with every element found before it, so each pair is examined exactly
            # once: O(|T| * (|T| + |hist'|)) joins. Joins in the future of `upper` are
            # only recorded as pending (their own joins are in the future as well).
            i = 0
            while i < nd:
                for a in range(nh + i):
                    if a < nh:
                        if row_le(hrows, a, drows, i):
                            continue
                        for c in range(d):
                            tmp[0, c] = max(drows[i, c], hrows[a, c])
                    else:
                        j = a - nh
                        if row_le(drows, j, drows, i) or row_le(drows, i, drows, j):
                            continue
                        for c in range(d):
                            tmp[0, c] = max(drows[i, c], drows[j, c])
                    if _in_future(upper, tmp, 0):
                        prows, npd, ptab, pst, _ = _set_insert(
                            prows, npd, ptab, pst, gen, tmp, I0
                        )
                    else:
                        drows, nd, dtab, dst, _ = _set_insert(
                            drows, nd, dtab, dst, gen, tmp, I0
                        )
                i += 1

            sa = _grow_vec(sa, I0, max(nd, npd))
            sb = _grow_vec(sb, I0, max(nd, npd))
            order = _argsort_rows(drows, 0, nd, sa, sb)
            due_out = _grow_rows(due_out, n_due, n_due + nd)
            for r in range(nd):
                for c in range(d):
                    due_out[n_due + r, c] = drows[order[r], c]
            n_due += nd
            order = _argsort_rows(prows, 0, npd, sa, sb)
            pend_out = _grow_rows(pend_out, n_pend, n_pend + npd)
            for r in range(npd):
                for c in range(d):
                    pend_out[n_pend + r, c] = prows[order[r], c]
            n_pend += npd
        due_offs[k + 1] = n_due
        pend_offs[k + 1] = n_pend
    return due_offs, due_out, n_due, pend_offs, pend_out, n_pend, bad_seed


def interesting_times(seed_offs, seed_times, hist_offs, hist_times, upper, *, check=True):
    """Per key, the closure of the seed times under join, split into due and pending.

    Parameters
    ----------
    seed_offs : int64[K + 1]
        CSR offsets of each key's seeds in ``seed_times``.
    seed_times : int64[s, d]
        Times of the key's new input updates and of its pending times that became due.
        Precondition: no seed is in the future of ``upper`` (else ``ValueError``).
        Any order, duplicates allowed.
    hist_offs : int64[K + 1]
        CSR offsets of each key's old input times in ``hist_times``.
    hist_times : int64[h, d]
        The key's old input times; any order, duplicates allowed.
    upper : int64[m, d]
        The frontier antichain; ``m == 0`` means every time is due.

    Returns
    -------
    due_offs : int64[K + 1]
    due_times : int64[n, d]
        Per key, the elements of ``T`` not in the future of ``upper``, sorted
        lexicographically and without duplicates. ``T`` is the smallest set containing
        the seeds such that ``t v a`` is in ``T`` for ``t`` in ``T`` and ``a`` in
        ``T`` or in the history. (With 1-D times and history no later than the seeds,
        ``T`` is the seeds.) A key without seeds has no due times.
    pend_offs : int64[K + 1]
    pend_times : int64[p, d]
        Per key, the joins ``t v a`` (``t`` due, ``a`` due or history) in the future of
        ``upper``, sorted and without duplicates: the key's new pending times. Their
        own joins are not expanded: they are found when the pending time becomes due
        and is passed back as a seed.
    """
    seed_times = _as_i64(seed_times, "seed_times", 2)
    hist_times = _as_i64(hist_times, "hist_times", 2)
    d = seed_times.shape[1]
    if d < 1:
        raise ValueError("seed_times must have at least one time dimension")
    _check_width(hist_times, "hist_times", d, "time dimensions of seed_times")
    seed_offs = _as_i64(seed_offs, "seed_offs", 1)
    hist_offs = _as_i64(hist_offs, "hist_offs", 1)
    if check:
        _check_offs(seed_offs, "seed_offs", seed_times.shape[0], "seed_times")
    K = seed_offs.shape[0] - 1
    if check:
        _check_offs(hist_offs, "hist_offs", hist_times.shape[0], "hist_times", K)
    upper = _upper(upper, d)
    kernel = _interesting_times_1d if d == 1 else _interesting_times
    due_offs, due, nd, pend_offs, pend, npd, bad = kernel(
        seed_offs, seed_times, hist_offs, hist_times, upper
    )
    if bad >= 0:
        raise ValueError(
            f"seed_times[{bad}] = {seed_times[bad].tolist()} is in the future of upper; "
            "seeds must be due (keep such times pending until the frontier passes them)"
        )
    return due_offs, due[:nd], pend_offs, pend[:npd]


# ---------------------------------------------------------------------------------------
# 2. Accumulation of the input at every moment.
# ---------------------------------------------------------------------------------------


@njit(cache=True, nogil=True)
def _accumulate(due_offs, due_times, upd_offs, upd_vals, upd_times, upd_diffs):
    K = due_offs.shape[0] - 1
    M = due_times.shape[0]
    vw = upd_vals.shape[1]
    mom_offs = np.zeros(M + 1, np.int64)
    out_vals = np.empty((max(16, M), vw), np.int64)
    out_counts = np.empty(max(16, M), np.int64)
    n = np.int64(0)
    overflow = False
    one_d = due_times.shape[1] == 1
    # Scratch reused by every key (per-key allocation would dominate small keys).
    runs = np.empty(16, np.int64)
    ptr = np.empty(16, np.int64)
    acc = np.empty(16, np.int64)
    for k in range(K):
        t0 = due_offs[k]
        t1 = due_offs[k + 1]
        if t0 == t1:
            continue
        runs = _grow_vec(runs, I0, upd_offs[k + 1] - upd_offs[k] + 1)
        nr = _run_starts(upd_vals, upd_offs[k], upd_offs[k + 1], runs)
        if one_d:
            # Totally ordered times: moments and each val's updates are both ascending,
            # so one pointer per val moves forward only and every update is added once.
            ptr = _grow_vec(ptr, I0, nr)
            acc = _grow_vec(acc, I0, nr)
            for r in range(nr):
                ptr[r] = runs[r]
                acc[r] = 0
            for t in range(t0, t1):
                tv = due_times[t, 0]
                out_vals = _grow_rows(out_vals, n, n + nr)
                out_counts = _grow_vec(out_counts, n, n + nr)
                for r in range(nr):
                    p = ptr[r]
                    e = runs[r + 1]
                    a = acc[r]
                    while p < e and upd_times[p, 0] <= tv:
                        a, o = add_checked(a, upd_diffs[p])
                        overflow |= o
                        p += 1
                    ptr[r] = p
                    acc[r] = a
                    if a != 0:
                        for c in range(vw):
                            out_vals[n, c] = upd_vals[runs[r], c]
                        out_counts[n] = a
                        n += 1
                mom_offs[t + 1] = n
        else:
            for t in range(t0, t1):
                out_vals = _grow_rows(out_vals, n, n + nr)
                out_counts = _grow_vec(out_counts, n, n + nr)
                for r in range(nr):
                    a = np.int64(0)
                    # A val's times are lexicographically sorted and lex order extends
                    # the product order: once a time is lex-greater than t, no later
                    # one can be <= t.
                    for p in range(runs[r], runs[r + 1]):
                        if row_cmp(upd_times, p, due_times, t) > 0:
                            break
                        if row_le(upd_times, p, due_times, t):
                            a, o = add_checked(a, upd_diffs[p])
                            overflow |= o
                    if a != 0:
                        for c in range(vw):
                            out_vals[n, c] = upd_vals[runs[r], c]
                        out_counts[n] = a
                        n += 1
                mom_offs[t + 1] = n
    return mom_offs, out_vals, out_counts, n, overflow


def accumulate(due_offs, due_times, upd_offs, upd_vals, upd_times, upd_diffs, *, check=True):
    """The accumulated input of each key at each of its due times (its *moments*).

    Parameters
    ----------
    due_offs : int64[K + 1]
    due_times : int64[M, d]
        Per key, the due times, sorted lexicographically (as returned by
        :func:`interesting_times`).
    upd_offs : int64[K + 1]
    upd_vals : int64[u, vw]
    upd_times : int64[u, d]
    upd_diffs : int64[u]
        Per key, all its input updates (old and new), sorted by ``(val, time)``.

    Returns
    -------
    mom_offs : int64[M + 1]
        CSR offsets per moment; moments are in key order, then time order (row ``i`` of
        ``due_times`` is moment ``i``).
    acc_vals : int64[n, vw]
    acc_counts : int64[n]
        For moment ``(k, t)``: every distinct val of key ``k`` whose diffs at times
        ``<= t`` (product order) sum to a non-zero count, in val order.

    Raises
    ------
    OverflowError
        When a sum of diffs overflows int64.
    """
    due_times = _as_i64(due_times, "due_times", 2)
    upd_vals = _as_i64(upd_vals, "upd_vals", 2)
    upd_times = _as_i64(upd_times, "upd_times", 2)
    upd_diffs = _as_i64(upd_diffs, "upd_diffs", 1)
    d = due_times.shape[1]
    if d < 1:
        raise ValueError("due_times must have at least one time dimension")
    _check_width(upd_times, "upd_times", d, "time dimensions of due_times")
    if not (upd_vals.shape[0] == upd_times.shape[0] == upd_diffs.shape[0]):
        raise ValueError(
            "upd_vals, upd_times and upd_diffs must have the same number of rows, got "
            f"{upd_vals.shape[0]}, {upd_times.shape[0]}, {upd_diffs.shape[0]}"
        )
    due_offs = _as_i64(due_offs, "due_offs", 1)
    upd_offs = _as_i64(upd_offs, "upd_offs", 1)
    if check:
        _check_offs(due_offs, "due_offs", due_times.shape[0], "due_times")
    K = due_offs.shape[0] - 1
    if check:
        _check_offs(upd_offs, "upd_offs", upd_vals.shape[0], "upd_vals", K)
    if check:
        _check_sorted(due_offs, due_times, due_times, "due_times")
    if check:
        _check_sorted(upd_offs, upd_vals, upd_times, "updates (by val, time)")
    mom_offs, vals, counts, n, overflow = _accumulate(
        due_offs, due_times, upd_offs, upd_vals, upd_times, upd_diffs
    )
    if overflow:
        raise OverflowError("accumulate: a sum of input diffs overflows int64")
    return mom_offs, vals[:n], counts[:n]


# ---------------------------------------------------------------------------------------
# 3. Corrections: desired output minus the output accumulated so far.
# ---------------------------------------------------------------------------------------


@njit(cache=True, nogil=True)
def _corrections(
    due_offs, due_times, want_offs, want_vals, want_counts,
    out_offs, out_vals, out_times, out_diffs,
):
    K = due_offs.shape[0] - 1
    d = due_times.shape[1]
    ow = out_vals.shape[1]
    r_key = np.empty(16, np.int64)
    r_vals = np.empty((16, ow), np.int64)
    r_times = np.empty((16, d), np.int64)
    r_diffs = np.empty(16, np.int64)
    nres = np.int64(0)
    overflow = False
    # Scratch reused by every key (per-key allocation would dominate small keys).
    oruns = np.empty(16, np.int64)
    cand = np.empty((16, ow), np.int64)
    uvals = np.empty((16, ow), np.int64)
    cand_u = np.empty(16, np.int64)
    sa = np.empty(16, np.int64)
    sb = np.empty(16, np.int64)
    cur = np.empty(16, np.int64)
    want = np.empty(16, np.int64)
    cnt = np.empty(16, np.int64)
    perm = np.empty(16, np.int64)
    # One key's corrections so far, in moment (lexicographic time) order.
    c_u = np.empty(16, np.int64)
    c_t = np.empty(16, np.int64)
    c_d = np.empty(16, np.int64)
    for k in range(K):
        t0 = due_offs[k]
        t1 = due_offs[k + 1]
        if t0 == t1:
            continue
        o0 = out_offs[k]
        o1 = out_offs[k + 1]
        w0 = want_offs[t0]
        w1 = want_offs[t1]
        oruns = _grow_vec(oruns, I0, o1 - o0 + 1)
        nor = _run_starts(out_vals, o0, o1, oruns)
        # The key's outvals: the union of its old output's vals and every desired val,
        # numbered 0..nu-1 in val order so per-val sums live in a dense array.
        nc = nor + (w1 - w0)
        cand = _grow_rows(cand, I0, nc)
        uvals = _grow_rows(uvals, I0, nc)
        cand_u = _grow_vec(cand_u, I0, nc)
        sa = _grow_vec(sa, I0, nc)
        sb = _grow_vec(sb, I0, nc)
        cur = _grow_vec(cur, I0, nc)
        want = _grow_vec(want, I0, nc)
        cnt = _grow_vec(cnt, I0, nc + 1)
        for r in range(nor):
            for c in range(ow):
                cand[r, c] = out_vals[oruns[r], c]
        for i in range(w0, w1):
            for c in range(ow):
                cand[nor + i - w0, c] = want_vals[i, c]
        order = _argsort_rows(cand, 0, nc, sa, sb)
        nu = 0
        for r in range(nc):
            ci = order[r]
            if nu == 0 or not row_eq(cand, ci, uvals, nu - 1):
                for c in range(ow):
                    uvals[nu, c] = cand[ci, c]
                nu += 1
            cand_u[ci] = nu - 1

        ncor = np.int64(0)
        for t in range(t0, t1):
            for u in range(nu):
                cur[u] = 0
                want[u] = 0
            for r in range(nor):
                u = cand_u[r]
                a = cur[u]
                for p in range(oruns[r], oruns[r + 1]):
                    if row_cmp(out_times, p, due_times, t) > 0:
                        break  # lex order extends the product order
                    if row_le(out_times, p, due_times, t):
                        a, o = add_checked(a, out_diffs[p])
                        overflow |= o
                cur[u] = a
            for i in range(ncor):
                if row_le(due_times, c_t[i], due_times, t):
                    a, o = add_checked(cur[c_u[i]], c_d[i])
                    overflow |= o
                    cur[c_u[i]] = a
            for i in range(want_offs[t], want_offs[t + 1]):
                u = cand_u[nor + i - w0]
                a, o = add_checked(want[u], want_counts[i])
                overflow |= o
                want[u] = a
            c_u = _grow_vec(c_u, ncor, ncor + nu)
            c_t = _grow_vec(c_t, ncor, ncor + nu)
            c_d = _grow_vec(c_d, ncor, ncor + nu)
            for u in range(nu):
                diff, o = _sub_checked(want[u], cur[u])
                overflow |= o
                if diff != 0:
                    c_u[ncor] = u
                    c_t[ncor] = t
                    c_d[ncor] = diff
                    ncor += 1

        # Counting sort by outval number; stable, so each val's corrections stay in
        # time order and the result is sorted by (outval, time).
        for u in range(nu + 1):
            cnt[u] = 0
        for i in range(ncor):
            cnt[c_u[i] + 1] += 1
        for u in range(nu):
            cnt[u + 1] += cnt[u]
        perm = _grow_vec(perm, I0, ncor)
        for i in range(ncor):
            perm[cnt[c_u[i]]] = i
            cnt[c_u[i]] += 1
        need = nres + ncor
        r_key = _grow_vec(r_key, nres, need)
        r_vals = _grow_rows(r_vals, nres, need)
        r_times = _grow_rows(r_times, nres, need)
        r_diffs = _grow_vec(r_diffs, nres, need)
        for j in range(ncor):
            i = perm[j]
            r_key[nres] = k
            for c in range(ow):
                r_vals[nres, c] = uvals[c_u[i], c]
            for c in range(d):
                r_times[nres, c] = due_times[c_t[i], c]
            r_diffs[nres] = c_d[i]
            nres += 1
    return r_key, r_vals, r_times, r_diffs, nres, overflow


def corrections(
    due_offs, due_times, want_offs, want_vals, want_counts,
    out_offs, out_vals, out_times, out_diffs, *, check=True,
):
    """Output updates that make each key's output equal the desired one at its moments.

    Parameters
    ----------
    due_offs : int64[K + 1]
    due_times : int64[M, d]
        Per key, its moments' times, sorted lexicographically (a linear extension of
        the product order, so a correction is final before any later time reads it).
    want_offs : int64[M + 1]
    want_vals : int64[w, ow]
    want_counts : int64[w]
        Per moment (same order as ``due_times``), the desired output rows with their
        counts, as produced by a logic kernel.
    out_offs : int64[K + 1]
    out_vals : int64[o, ow]
    out_times : int64[o, d]
    out_diffs : int64[o]
        Per key, the old output updates, sorted by ``(outval, time)``.

    Returns
    -------
    corr_key : int64[c]
        Key index (0..K-1) of each correction.
    corr_vals : int64[c, ow]
    corr_times : int64[c, d]
    corr_diffs : int64[c]
        Sorted by ``(key, outval, time)``, consolidated (no repeated triple, no zero
        diff). Visiting a key's moments ``t`` in order, the correction at ``t`` for
        each outval is ``want(t) - current(t)``, where ``current(t)`` sums the old
        output and the corrections already emitted at times ``<= t``. Afterwards the
        old output plus the corrections, accumulated at any moment ``t``, equals
        ``want(t)``.

    Raises
    ------
    OverflowError
        When a sum or difference of counts overflows int64.
    """
    due_times = _as_i64(due_times, "due_times", 2)
    want_vals = _as_i64(want_vals, "want_vals", 2)
    want_counts = _as_i64(want_counts, "want_counts", 1)
    out_vals = _as_i64(out_vals, "out_vals", 2)
    out_times = _as_i64(out_times, "out_times", 2)
    out_diffs = _as_i64(out_diffs, "out_diffs", 1)
    d = due_times.shape[1]
    if d < 1:
        raise ValueError("due_times must have at least one time dimension")
    ow = out_vals.shape[1]
    _check_width(out_times, "out_times", d, "time dimensions of due_times")
    _check_width(want_vals, "want_vals", ow, "output width of out_vals")
    if want_vals.shape[0] != want_counts.shape[0]:
        raise ValueError(
            f"want_vals has {want_vals.shape[0]} rows but want_counts has "
            f"{want_counts.shape[0]}"
        )
    if not (out_vals.shape[0] == out_times.shape[0] == out_diffs.shape[0]):
        raise ValueError(
            "out_vals, out_times and out_diffs must have the same number of rows, got "
            f"{out_vals.shape[0]}, {out_times.shape[0]}, {out_diffs.shape[0]}"
        )
    due_offs = _as_i64(due_offs, "due_offs", 1)
    want_offs = _as_i64(want_offs, "want_offs", 1)
    out_offs = _as_i64(out_offs, "out_offs", 1)
    if check:
        _check_offs(due_offs, "due_offs", due_times.shape[0], "due_times")
    K = due_offs.shape[0] - 1
    if check:
        _check_offs(want_offs, "want_offs", want_vals.shape[0], "want_vals",
                    due_times.shape[0])
    if check:
        _check_offs(out_offs, "out_offs", out_vals.shape[0], "out_vals", K)
    if check:
        _check_sorted(due_offs, due_times, due_times, "due_times")
    if check:
        _check_sorted(out_offs, out_vals, out_times, "old output (by outval, time)")
    key, vals, times, diffs, n, overflow = _corrections(
        due_offs, due_times, want_offs, want_vals, want_counts,
        out_offs, out_vals, out_times, out_diffs,
    )
    if overflow:
        raise OverflowError("corrections: a sum of output counts overflows int64")
    return key[:n], vals[:n], times[:n], diffs[:n]


# ---------------------------------------------------------------------------------------
# 4. Built-in logic, batched over all moments.
#
# Every logic kernel maps (mom_offs[M + 1], acc_vals[n, vw], acc_counts[n]) to
# (want_offs[M + 1], want_vals[w, ow], want_counts[w]); a moment's input rows are sorted
# by val and have non-zero counts (the output of `accumulate`), and its output rows are
# sorted by val with non-zero counts (the input of `corrections`).
# ---------------------------------------------------------------------------------------


@njit(cache=True, nogil=True)
def _logic_count(mom_offs, acc_counts):
    M = mom_offs.shape[0] - 1
    want_offs = np.zeros(M + 1, np.int64)
    vals = np.empty((M, 1), np.int64)
    counts = np.empty(M, np.int64)
    n = 0
    overflow = False
    for t in range(M):
        a = mom_offs[t]
        b = mom_offs[t + 1]
        if a < b:
            s = np.int64(0)
            for i in range(a, b):
                s, o = add_checked(s, acc_counts[i])
                overflow |= o
            vals[n, 0] = s
            counts[n] = 1
            n += 1
        want_offs[t + 1] = n
    return want_offs, vals, counts, n, overflow


@njit(cache=True, nogil=True)
def _logic_sum(mom_offs, acc_vals, acc_counts, col):
    M = mom_offs.shape[0] - 1
    want_offs = np.zeros(M + 1, np.int64)
    vals = np.empty((M, 1), np.int64)
    counts = np.empty(M, np.int64)
    n = 0
    overflow = False
    for t in range(M):
        a = mom_offs[t]
        b = mom_offs[t + 1]
        if a < b:
            s = np.int64(0)
            for i in range(a, b):
                p, o1 = mul_checked(acc_vals[i, col], acc_counts[i])
                s, o2 = add_checked(s, p)
                overflow |= o1 | o2
            vals[n, 0] = s
            counts[n] = 1
            n += 1
        want_offs[t + 1] = n
    return want_offs, vals, counts, n, overflow


@njit(cache=True, nogil=True)
def _logic_extreme(mom_offs, acc_vals, acc_counts, col, want_max):
    M = mom_offs.shape[0] - 1
    want_offs = np.zeros(M + 1, np.int64)
    vals = np.empty((M, 1), np.int64)
    counts = np.empty(M, np.int64)
    n = 0
    for t in range(M):
        found = False
        best = np.int64(0)
        for i in range(mom_offs[t], mom_offs[t + 1]):
            if acc_counts[i] > 0:
                v = acc_vals[i, col]
                if not found or (v > best if want_max else v < best):
                    best = v
                    found = True
        if found:
            vals[n, 0] = best
            counts[n] = 1
            n += 1
        want_offs[t + 1] = n
    return want_offs, vals, counts, n


@njit(cache=True, nogil=True)
def _logic_top_k(mom_offs, acc_vals, acc_counts, k, distinct):
    M = mom_offs.shape[0] - 1
    vw = acc_vals.shape[1]
    want_offs = np.zeros(M + 1, np.int64)
    vals = np.empty((acc_vals.shape[0], vw), np.int64)
    counts = np.empty(acc_vals.shape[0], np.int64)
    n = 0
    for t in range(M):
        left = k
        # Rows are in val order, so the first positive ones are the smallest.
        for i in range(mom_offs[t], mom_offs[t + 1]):
            if not distinct and left <= 0:
                break
            c = acc_counts[i]
            if c > 0:
                for j in range(vw):
                    vals[n, j] = acc_vals[i, j]
                if distinct:
                    counts[n] = 1
                else:
                    counts[n] = min(c, left)
                    left -= counts[n]
                n += 1
        want_offs[t + 1] = n
    return want_offs, vals, counts, n


def _logic_inputs(mom_offs, acc_vals, acc_counts):
    acc_vals = _as_i64(acc_vals, "acc_vals", 2)
    acc_counts = _as_i64(acc_counts, "acc_counts", 1)
    if acc_vals.shape[0] != acc_counts.shape[0]:
        raise ValueError(
            f"acc_vals has {acc_vals.shape[0]} rows but acc_counts has "
            f"{acc_counts.shape[0]}"
        )
    mom_offs = _as_i64(mom_offs, "mom_offs", 1)
    _check_offs(mom_offs, "mom_offs", acc_vals.shape[0], "acc_vals")
    return mom_offs, acc_vals, acc_counts


def _check_col(col, vw, name):
    col = int(col)
    if not 0 <= col < vw:
        raise ValueError(f"{name}: col={col} is out of range for {vw} value columns")
    return col


def logic_count(mom_offs, acc_vals, acc_counts):
    """Count: one row ``[sum of counts]`` with count 1 per non-empty moment.

    Parameters
    ----------
    mom_offs : int64[M + 1]
    acc_vals : int64[n, vw]
    acc_counts : int64[n]
        Per moment, the accumulated input (non-zero counts), as from :func:`accumulate`.

    Returns
    -------
    want_offs : int64[M + 1]
    want_vals : int64[w, 1]
    want_counts : int64[w]
        Empty moments produce no row; the sum is emitted even when it is 0 or negative
        (negative counts).

    Raises
    ------
    OverflowError
        When the sum of counts overflows int64.
    """
    mom_offs, acc_vals, acc_counts = _logic_inputs(mom_offs, acc_vals, acc_counts)
    offs, vals, counts, n, overflow = _logic_count(mom_offs, acc_counts)
    if overflow:
        raise OverflowError("logic_count: a sum of counts overflows int64")
    return offs, vals[:n], counts[:n]


def logic_sum(mom_offs, acc_vals, acc_counts, col):
    """Sum: one row ``[sum of val[col] * count]`` with count 1 per non-empty moment.

    Same inputs and outputs as :func:`logic_count` (output width 1); the sum is emitted
    even when it is 0. ``col`` selects the value column (``0 <= col < vw``).

    Raises
    ------
    OverflowError
        When a product or the sum overflows int64.
    """
    mom_offs, acc_vals, acc_counts = _logic_inputs(mom_offs, acc_vals, acc_counts)
    col = _check_col(col, acc_vals.shape[1], "logic_sum")
    offs, vals, counts, n, overflow = _logic_sum(mom_offs, acc_vals, acc_counts, col)
    if overflow:
        raise OverflowError(f"logic_sum: sum of column {col} times count overflows int64")
    return offs, vals[:n], counts[:n]


def _logic_extreme_wrapper(mom_offs, acc_vals, acc_counts, col, is_max, name):
    mom_offs, acc_vals, acc_counts = _logic_inputs(mom_offs, acc_vals, acc_counts)
    col = _check_col(col, acc_vals.shape[1], name)
    offs, vals, counts, n = _logic_extreme(mom_offs, acc_vals, acc_counts, col, is_max)
    return offs, vals[:n], counts[:n]


def logic_min(mom_offs, acc_vals, acc_counts, col):
    """Min: one row ``[min val[col]]`` over the rows with positive count, count 1.

    Same inputs and outputs as :func:`logic_count` (output width 1); a moment without
    a positively counted row produces no row.
    """
    return _logic_extreme_wrapper(mom_offs, acc_vals, acc_counts, col, False, "logic_min")


def logic_max(mom_offs, acc_vals, acc_counts, col):
    """Max: one row ``[max val[col]]`` over the rows with positive count, count 1.

    Same inputs and outputs as :func:`logic_count` (output width 1); a moment without
    a positively counted row produces no row.
    """
    return _logic_extreme_wrapper(mom_offs, acc_vals, acc_counts, col, True, "logic_max")


def logic_distinct(mom_offs, acc_vals, acc_counts):
    """Distinct: every val with positive count, with count 1 (output width ``vw``).

    Same inputs as :func:`logic_count`; the output keeps the input's val order.
    """
    mom_offs, acc_vals, acc_counts = _logic_inputs(mom_offs, acc_vals, acc_counts)
    offs, vals, counts, n = _logic_top_k(mom_offs, acc_vals, acc_counts, I0, True)
    return offs, vals[:n], counts[:n]


def logic_top_k(mom_offs, acc_vals, acc_counts, k):
    """Top-k: the ``k`` smallest vals (lexicographic) with positive count, by multiplicity.

    Same inputs as :func:`logic_count`; output width ``vw``, in val order. A row with
    count ``c`` fills up to ``c`` of the ``k`` slots and is emitted with count
    ``min(c, slots left)``. ``k >= 0``; ``k == 0`` gives an empty output.
    """
    mom_offs, acc_vals, acc_counts = _logic_inputs(mom_offs, acc_vals, acc_counts)
    k = int(k)
    if k < 0:
        raise ValueError(f"logic_top_k: k must be >= 0, got {k}")
    offs, vals, counts, n = _logic_top_k(mom_offs, acc_vals, acc_counts, k, False)
    return offs, vals[:n], counts[:n]


# ---------------------------------------------------------------------------------------
# 5. User logic.
# ---------------------------------------------------------------------------------------


@njit(cache=True, nogil=True)
def _append_consolidated(src_vals, src_counts, r, out_vals, out_counts, n, sa, sb):
    """Append ``src[:r]`` sorted by val, equal vals summed, zero sums dropped.

    ``sa`` and ``sb`` are sort scratch of at least ``r`` entries.
    Returns ``(out_vals, out_counts, n, overflow)``.
    """
    order = _argsort_rows(src_vals, 0, r, sa, sb)
    out_vals = _grow_rows(out_vals, n, n + r)
    out_counts = _grow_vec(out_counts, n, n + r)
    overflow = False
    i = 0
    while i < r:
        first = order[i]
        s = np.int64(0)
        j = i
        while j < r and row_eq(src_vals, order[j], src_vals, first):
            s, o = add_checked(s, src_counts[order[j]])
            overflow |= o
            j += 1
        if s != 0:
            for c in range(src_vals.shape[1]):
                out_vals[n, c] = src_vals[first, c]
            out_counts[n] = s
            n += 1
        i = j
    return out_vals, out_counts, n, overflow


def make_user_driver(logic, out_width):
    """Build a batched driver for a user's Numba reduce function.

    Parameters
    ----------
    logic : numba-jitted function
        ``logic(vals[n, vw], counts[n]) -> (out_vals[r, out_width], out_counts[r])``,
        called once per non-empty moment with the moment's accumulated input (sorted by
        val, non-zero counts). Its output may be unsorted, repeat vals and hold zero
        counts. Empty moments (empty groups) are not passed to it and produce no output.
    out_width : int
        Number of columns of the logic's output rows (>= 0).

    Returns
    -------
    driver : callable
        ``driver(mom_offs, acc_vals, acc_counts) -> (want_offs, want_vals, want_counts)``
        with the same contract as the built-in logic kernels: each moment's rows sorted
        by val, equal vals summed, zero counts dropped. Raises ``OverflowError`` on
        overflow while summing, ``ValueError`` if the logic returns arrays of the wrong
        shape. The jitted loop is ``driver.kernel``; it is compiled on first call and
        not cached on disk (it closes over ``logic``).
    """
    ow = int(out_width)
    if ow < 0:
        raise ValueError(f"make_user_driver: out_width must be >= 0, got {out_width}")
    if not hasattr(logic, "py_func"):
        raise ValueError(
            "make_user_driver: logic must be a numba @njit function, got "
            f"{type(logic).__name__}"
        )

    @njit(nogil=True)
    def _drive(mom_offs, acc_vals, acc_counts):
        M = mom_offs.shape[0] - 1
        want_offs = np.zeros(M + 1, np.int64)
        vals = np.empty((max(16, M), ow), np.int64)
        counts = np.empty(max(16, M), np.int64)
        scratch_v = np.empty((16, ow), np.int64)
        scratch_c = np.empty(16, np.int64)
        sa = np.empty(16, np.int64)
        sb = np.empty(16, np.int64)
        n = np.int64(0)
        status = 0  # 0 ok, 1 overflow, 2 bad shape
        for t in range(M):
            a = mom_offs[t]
            b = mom_offs[t + 1]
            if a < b:
                ov, oc = logic(acc_vals[a:b], acc_counts[a:b])
                r = oc.shape[0]
                if ov.shape[0] != r or ov.shape[1] != ow:
                    status = 2
                    break
                # Copy into int64 scratch: the user may return other integer dtypes or
                # non-contiguous arrays, and the helper below is compiled for one type.
                scratch_v = _grow_rows(scratch_v, I0, r)
                scratch_c = _grow_vec(scratch_c, I0, r)
                sa = _grow_vec(sa, I0, r)
                sb = _grow_vec(sb, I0, r)
                for i in range(r):
                    for c in range(ow):
                        scratch_v[i, c] = ov[i, c]
                    scratch_c[i] = oc[i]
                vals, counts, n, o = _append_consolidated(
                    scratch_v, scratch_c, r, vals, counts, n, sa, sb
                )
                if o:
                    status = 1
                    break
            want_offs[t + 1] = n
        return want_offs, vals, counts, n, status

    def driver(mom_offs, acc_vals, acc_counts):
        mom_offs, acc_vals, acc_counts = _logic_inputs(mom_offs, acc_vals, acc_counts)
        offs, vals, counts, n, status = _drive(mom_offs, acc_vals, acc_counts)
        if status == 1:
            raise OverflowError("user reduce logic: a sum of output counts overflows int64")
        if status == 2:
            raise ValueError(
                "user reduce logic must return (out_vals[r, out_width], out_counts[r]) "
                f"with out_width={ow}"
            )
        return offs, vals[:n], counts[:n]

    driver.kernel = _drive
    driver.out_width = ow
    driver.__doc__ = f"Batched driver for user reduce logic {getattr(logic, '__name__', logic)!r}."
    return driver

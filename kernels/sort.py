"""Lexicographic sorting of int64 row matrices.

A *row matrix* is a C-contiguous int64 array ``[n, k]``; its rows are ordered
lexicographically, column 0 most significant (for time vectors this order is a linear
extension of the product order, see :mod:`ddnumba.kernels.rows`). ``argsort_rows``
returns the **stable** permutation that sorts the rows, ``argsort_rows2`` does the same
for the rows of ``[a | b]`` without building the concatenation (batches sort by
``(data, time)``), and ``is_sorted_rows`` checks the order.

Design
------
``np.lexsort`` runs at 1-3 M rec/s, and ``np.sort`` of int64 measured only 12-15 M rec/s
on this machine's NumPy build (no SIMD sort is dispatched here), so neither is fast
enough for the hot path. We sort with our own radix sort instead:

1. Per column, the minimum and the bit width of ``max - min`` (computed in uint64, so
   the full int64 range cannot overflow). ``x - min`` as uint64 orders like ``x``; a
   constant column takes 0 bits and drops out.
2. Columns are packed, least significant first, into as few 64-bit *words* as
   possible. Comparing rows by their words (most significant word first) as unsigned
   integers is exactly the lexicographic order of the original signed rows.
3. One word of ``nbits`` bits (the common case) is sorted by a stable *bucket sort*.
   A counting pass scatters the keys into ``2**h`` buckets by their top ``h`` bits,
   ``h`` chosen so a bucket holds ~16 K keys and stays in cache. In a bucket a key is
   stored as ``(its rest = nbits - h low bits) << lb | its position in the bucket``,
   where ``lb`` bits hold the largest bucket's size: the values are distinct, and the
   position keeps input order among equal keys (stability). Each bucket is then
   LSD-radix-sorted in cache, and the position bits fetch the payload (the row index,
   or the diff when consolidating) from the bucket's copy.
4. This needs ``rest + lb <= 64``. When a large bucket breaks it (wide keys, skewed
   data), ``h`` is raised and the sort retried; if that does not help either, a plain
   LSD radix sort of (key, payload) pairs with 11-bit digits is used (16 bytes per key
   per pass, but any distribution is fine). Constant digits are skipped.
5. Several words are sorted LSD-style: least significant word first, each word
   gathered in the current order and sorted stably, carrying the permutation.

The input-normalisation helpers (``as_int64_rows``, ``as_int64_vector``) live here and
are shared by the other kernel modules.
"""
import numpy as np
from numba import njit

from .rows import leaf, row_cmp, row_eq, row_le  # noqa: F401  (re-exported for merge/cursor kernels)

__all__ = [
    "argsort_rows",
    "argsort_rows2",
    "is_sorted_rows",
    "is_sorted_rows2",
    "row_cmp",
    "row_eq",
    "row_le",
    "as_int64_rows",
    "as_int64_vector",
]

_INT64_MAX = np.iinfo(np.int64).max
_EMPTY_I64 = np.zeros(0, np.int64)

# log2 of the target bucket size of the bucket sort: 2**14 keys (128 KiB of keys plus
# as much scratch) stay in L2 while they are radix-sorted. Measured on 10 M keys: 2**13
# to 2**15 perform alike; smaller buckets make the scatter pass slower (more streams).
_BUCKET_LOG = 14
# Upper bound on the number of top bits used for buckets (count array of 2**22 int64).
_MAX_BUCKET_BITS = 22
# Digit width of the LSD fallback: 2048 counters per pass stay in L1.
_LSD_DIGIT = 11
# Below this many keys a bucket is insertion-sorted.
_SMALL = 32


# ----------------------------------------------------------------------------------
# Input normalisation (shared by the kernel modules)
# ----------------------------------------------------------------------------------

def _to_int64(x, name):
    """Return ``x`` as an int64 ndarray when that is lossless, else raise ValueError."""
    arr = np.asarray(x)
    if arr.dtype == np.int64:
        return arr
    if arr.size == 0 or arr.dtype.kind in "ib" or (arr.dtype.kind == "u" and arr.dtype.itemsize < 8):
        # An empty array of any dtype converts vacuously (np.asarray([]) is float64).
        return arr.astype(np.int64)
    if arr.dtype.kind == "u":
        if int(arr.max()) <= _INT64_MAX:
            return arr.astype(np.int64)
        raise ValueError(
            f"{name}: uint64 values above 2**63-1 cannot be represented as int64; "
            "re-encode them (e.g. subtract an offset) before passing them"
        )
    raise ValueError(
        f"{name}: dtype {arr.dtype} cannot be converted to int64 without loss; "
        "pass integer (or boolean) arrays"
    )


def _finish(arr):
    # One Numba type per kernel argument: C-contiguous, writeable int64. Read-only
    # arrays (e.g. zero-copy Arrow views) would make every kernel compile twice.
    arr = np.ascontiguousarray(arr)
    if not arr.flags.writeable:
        arr = arr.copy()
    return arr


def as_int64_rows(x, name, *, ncols=None, allow_1d=False):
    """Normalise ``x`` to a C-contiguous, writeable int64 matrix ``[n, k]``.

    Parameters
    ----------
    x : array_like
        Integer (or boolean) values; uint64 values must be <= 2**63 - 1.
    name : str
        Argument name used in error messages.
    ncols : int, optional
        Required number of columns.
    allow_1d : bool
        Accept a 1-D array of length ``n`` as one column ``[n, 1]``.

    Returns
    -------
    numpy.ndarray
        int64 ``[n, k]``; ``x`` itself when it already qualifies, else a copy.

    Raises
    ------
    ValueError
        On a lossy dtype, a wrong number of dimensions or columns.
    """
    arr = _to_int64(x, name)
    if arr.ndim == 1 and allow_1d:
        arr = arr.reshape(-1, 1)
    if arr.ndim != 2:
        raise ValueError(f"{name}: expected a 2-D array [n, k], got shape {arr.shape}")
    if ncols is not None and arr.shape[1] != ncols:
        raise ValueError(f"{name}: expected {ncols} columns, got shape {arr.shape}")
    return _finish(arr)


def as_int64_vector(x, name, *, length=None):
    """Normalise ``x`` to a C-contiguous, writeable int64 vector ``[n]``.

    Raises ``ValueError`` on a lossy dtype, a wrong number of dimensions or a length
    different from ``length`` (when given).
    """
    arr = _to_int64(x, name)
    if arr.ndim != 1:
        raise ValueError(f"{name}: expected a 1-D array [n], got shape {arr.shape}")
    if length is not None and arr.shape[0] != length:
        raise ValueError(f"{name}: expected length {length}, got {arr.shape[0]}")
    return _finish(arr)


# ----------------------------------------------------------------------------------
# Kernels
# ----------------------------------------------------------------------------------

@njit(cache=True, nogil=True)
def _bit_length(x):
    """Number of significant bits of the uint64 ``x`` (0 for 0)."""
    n = 0
    while x != np.uint64(0):
        x = x >> np.uint64(1)
        n += 1
    return n


@njit(cache=True, nogil=True)
def _column_widths(a, mins, widths, base):
    """Store min and bit width of ``max - min`` of each column of ``a`` at ``base + c``.

    Precondition: ``a.shape[0] >= 1``. One row-major pass over ``a``.
    """
    n, k = a.shape
    lo = a[0].copy()
    hi = a[0].copy()
    if k == 1 or k == 2:
        # The usual widths get scalar accumulators: LLVM keeps them in registers and
        # vectorises the loop (~2.5x faster than the general loop over small arrays).
        l0 = h0 = a[0, 0]
        l1 = h1 = a[0, k - 1]
        for i in range(1, n):
            x = a[i, 0]
            y = a[i, k - 1]
            l0 = min(l0, x)
            h0 = max(h0, x)
            l1 = min(l1, y)
            h1 = max(h1, y)
        lo[0] = l0
        hi[0] = h0
        lo[k - 1] = l1
        hi[k - 1] = h1
    else:
        for i in range(1, n):
            for c in range(k):
                x = a[i, c]
                lo[c] = min(lo[c], x)
                hi[c] = max(hi[c], x)
    for c in range(k):
        mins[base + c] = lo[c]
        # uint64 subtraction cannot overflow: the range of int64 fits in uint64.
        widths[base + c] = _bit_length(np.uint64(hi[c]) - np.uint64(lo[c]))


@njit(cache=True, nogil=True)
def _pack_word(a, b, mins, word_of, shifts, word, perm, use_perm, out):
    """``out[r]`` = the bits of word ``word`` of row ``perm[r]`` (or ``r``) of ``[a | b]``.

    Column ``c`` contributes ``(x - mins[c]) << shifts[c]`` when ``word_of[c] == word``.
    """
    ka = a.shape[1]
    kb = b.shape[1]
    for r in range(out.shape[0]):
        i = perm[r] if use_perm else r
        acc = np.uint64(0)
        for c in range(ka):
            if word_of[c] == word:
                acc |= (np.uint64(a[i, c]) - np.uint64(mins[c])) << np.uint64(shifts[c])
        for c in range(kb):
            if word_of[ka + c] == word:
                acc |= (np.uint64(b[i, c]) - np.uint64(mins[ka + c])) << np.uint64(shifts[ka + c])
        out[r] = acc


@njit(cache=True, nogil=True, inline="always")
def _field(k, shift, width):
    """Bits ``[shift, shift + width)`` of the uint64 ``k`` (``width`` in 0..64)."""
    if width == 0:
        return np.uint64(0)
    if width == 64:
        return k
    return (k >> np.uint64(shift)) & ((np.uint64(1) << np.uint64(width)) - np.uint64(1))


@njit(cache=True, nogil=True)
def _unpack_word(keys, count, mins, widths, shifts, a, b):
    """Inverse of ``_pack_word`` for a single-word layout: decode ``keys[:count]``.

    Columns of width 0 are constant and get their minimum.
    """
    ka = a.shape[1]
    kb = b.shape[1]
    for r in range(count):
        k = keys[r]
        for c in range(ka):
            a[r, c] = np.int64(_field(k, shifts[c], widths[c]) + np.uint64(mins[c]))
        for c in range(kb):
            j = ka + c
            b[r, c] = np.int64(_field(k, shifts[j], widths[j]) + np.uint64(mins[j]))


@njit(cache=True, nogil=True)
def _insertion_sort(buf, lo, m):
    """Sort ``buf[lo:lo+m]`` ascending (uint64, distinct values: stability is moot)."""
    for i in range(lo + 1, lo + m):
        v = buf[i]
        j = i - 1
        while j >= lo and buf[j] > v:
            buf[j + 1] = buf[j]
            j -= 1
        buf[j + 1] = v


@njit(cache=True, nogil=True)
def _bucket_radix(buf, scratch, hist, lo, m, lb, npass, dbits):
    """Stable LSD radix sort of ``buf[lo:lo+m]`` by bits ``[lb, lb + npass*dbits)``.

    The ``lb`` low bits hold each key's position in the bucket, already ascending, so
    sorting by the bits above them (stably) sorts the distinct values completely.
    Returns True when the sorted keys are in ``buf[lo:lo+m]``, False when they are in
    ``scratch[:m]`` (after an odd number of passes; the caller reads them from there
    rather than paying for a copy back).
    """
    nb = 1 << dbits
    mask = np.uint64(nb - 1)
    ulb = np.uint64(lb)
    for p in range(npass):
        for d in range(nb):
            hist[p, d] = 0
    for i in range(lo, lo + m):
        v = buf[i] >> ulb
        for p in range(npass):
            hist[p, np.int64((v >> np.uint64(p * dbits)) & mask)] += 1
    in_buf = True
    for p in range(npass):
        sh = np.uint64(lb + p * dbits)
        first = np.int64((buf[lo] >> sh) & mask) if in_buf else np.int64((scratch[0] >> sh) & mask)
        if hist[p, first] == m:
            continue  # every key has the same digit here: the pass would not move anything
        s = 0
        for d in range(nb):
            c = hist[p, d]
            hist[p, d] = s
            s += c
        if in_buf:
            for i in range(m):
                v = buf[lo + i]
                d = np.int64((v >> sh) & mask)
                j = hist[p, d]
                hist[p, d] = j + 1
                scratch[j] = v
        else:
            for i in range(m):
                v = scratch[i]
                d = np.int64((v >> sh) & mask)
                j = hist[p, d]
                hist[p, d] = j + 1
                buf[lo + j] = v
        in_buf = not in_buf
    return in_buf


@njit(cache=True, nogil=True)
def _bucket_sort(keys, payload, use_index, nbits, h, out_keys, out_payload):
    """Stable sort of ``keys`` (uint64 < 2**nbits) carrying ``payload`` into ``out_*``.

    ``payload`` is replaced by the row index when ``use_index``. Buckets are the top
    ``h`` bits. Returns 0 on success. Otherwise the largest bucket is too large to
    store its positions next to the ``rest`` low key bits: nothing has been written
    and the return value is by how many bits ``rest + lb`` exceeds 64; the caller then
    retries with more buckets or uses ``_lsd_sort``.
    """
    n = keys.shape[0]
    rest = nbits - h
    nbk = 1 << h
    cnt = np.zeros(nbk + 1, np.int64)
    st = np.uint64(rest if rest < 64 else 0)
    if h > 0:
        for i in range(n):
            cnt[np.int64(keys[i] >> st) + 1] += 1
    else:
        cnt[1] = n
    mmax = 0
    for bk in range(1, nbk + 1):
        if cnt[bk] > mmax:
            mmax = cnt[bk]
    lb = _bit_length(np.uint64(mmax - 1))
    if rest + lb > 64:
        return rest + lb - 64
    for bk in range(nbk):
        cnt[bk + 1] += cnt[bk]
    start = cnt[:nbk].copy()
    cur = cnt  # cur[bk] advances from the start to the end of bucket bk
    if rest == 64:
        lowmask = np.uint64(0xFFFFFFFFFFFFFFFF)
    else:
        lowmask = (np.uint64(1) << np.uint64(rest)) - np.uint64(1)
    ulb = np.uint64(lb)
    for i in range(n):
        k = keys[i]
        bk = np.int64(k >> st) if h > 0 else 0
        j = cur[bk]
        cur[bk] = j + 1
        out_keys[j] = ((k & lowmask) << ulb) | np.uint64(j - start[bk])
        out_payload[j] = i if use_index else payload[i]
    # Digits for the in-bucket passes: about log2(bucket) - 3 bits, so clearing the
    # counters costs less than the pass; passes balanced over the `rest` bits.
    dcap = _bit_length(np.uint64(mmax)) - 3
    if dcap > 11:
        dcap = 11
    if dcap < 3:
        dcap = 3
    npass = (rest + dcap - 1) // dcap
    dbits = (rest + npass - 1) // npass if npass > 0 else 1
    hist = np.empty((max(npass, 1), 1 << dbits), np.int64)
    scratch = np.empty(max(mmax, 1), np.uint64)
    sp = np.empty(max(mmax, 1), np.int64)
    lbmask = (np.uint64(1) << ulb) - np.uint64(1)
    for bk in range(nbk):
        lo = start[bk]
        m = cur[bk] - lo
        if m == 0:
            continue
        in_place = True
        if m > 1 and rest > 0:
            if m <= _SMALL:
                _insertion_sort(out_keys, lo, m)
            else:
                in_place = _bucket_radix(out_keys, scratch, hist, lo, m, lb, npass, dbits)
        for r in range(m):
            sp[r] = out_payload[lo + r]
        top = (np.uint64(bk) << st) if h > 0 else np.uint64(0)
        # Replace each (low bits, position) by the full key and its payload.
        for r in range(m):
            v = out_keys[lo + r] if in_place else scratch[r]
            out_payload[lo + r] = sp[np.int64(v & lbmask)]
            out_keys[lo + r] = top | (v >> ulb)
    return 0


@njit(cache=True, nogil=True)
def _lsd_sort(keys, payload, use_index, nbits, dbits, out_keys, out_payload):
    """Stable LSD radix sort of (``keys`` < 2**nbits, payload) pairs into ``out_*``.

    Works for any key distribution; each pass moves 16 bytes per key through memory, so
    it is the fallback when ``_bucket_sort`` cannot pack a bucket.
    """
    n = keys.shape[0]
    npass = (nbits + dbits - 1) // dbits
    nb = 1 << dbits
    mask = np.uint64(nb - 1)
    hist = np.zeros((max(npass, 1), nb), np.int64)
    for i in range(n):
        k = keys[i]
        for p in range(npass):
            hist[p, np.int64((k >> np.uint64(p * dbits)) & mask)] += 1
    k1 = out_keys
    p1 = out_payload
    for i in range(n):
        k1[i] = keys[i]
        p1[i] = i if use_index else payload[i]
    k2 = np.empty(n, np.uint64)
    p2 = np.empty(n, np.int64)
    swapped = False  # the sorted data currently lives in (k2, p2), i.e. not in out_*
    for p in range(npass):
        sh = np.uint64(p * dbits)
        if hist[p, np.int64((k1[0] >> sh) & mask)] == n:
            continue  # constant digit
        s = 0
        for d in range(nb):
            c = hist[p, d]
            hist[p, d] = s
            s += c
        for i in range(n):
            k = k1[i]
            d = np.int64((k >> sh) & mask)
            j = hist[p, d]
            hist[p, d] = j + 1
            k2[j] = k
            p2[j] = p1[i]
        k1, k2 = k2, k1
        p1, p2 = p2, p1
        swapped = not swapped
    if swapped:
        for i in range(n):
            out_keys[i] = k1[i]
            out_payload[i] = p1[i]


@leaf
def _is_sorted2(a, b, strict):
    """True when the rows of ``[a | b]`` are non-decreasing (increasing if ``strict``).
    A leaf (see :func:`kernels.rows.leaf`): the inlined row comparisons take no
    reference counts, two a row otherwise."""
    for i in range(1, a.shape[0]):
        c = row_cmp(a, i - 1, a, i)
        if c == 0:
            c = row_cmp(b, i - 1, b, i)
        if c > 0 or (strict and c == 0):
            return False
    return True


# ----------------------------------------------------------------------------------
# Orchestration (per call, not per row)
# ----------------------------------------------------------------------------------

def _layout(a, b):
    """Plan the packing of the columns of ``[a | b]`` (n >= 1) into 64-bit words.

    Returns ``(mins, widths, word_of, shifts, word_bits)``: per column its minimum, bit
    width, word (-1 for constant columns) and shift inside the word; per word (0 = least
    significant) its number of bits.
    """
    ka, kb = a.shape[1], b.shape[1]
    k = ka + kb
    mins = np.zeros(k, np.int64)
    widths = np.zeros(k, np.int64)
    if ka:
        _column_widths(a, mins, widths, np.int64(0))
    if kb:
        _column_widths(b, mins, widths, ka)
    word_of = np.full(k, -1, np.int64)
    shifts = np.zeros(k, np.int64)
    word_bits = []
    cur = 0
    for c in range(k - 1, -1, -1):  # least significant column first
        w = int(widths[c])
        if w == 0:
            continue
        if cur + w > 64:
            word_bits.append(cur)
            cur = 0
        word_of[c] = len(word_bits)
        shifts[c] = cur
        cur += w
    if cur:
        word_bits.append(cur)
    return mins, widths, word_of, shifts, word_bits


def _sort_keys(keys, payload, nbits, *, method="auto", bucket_log=_BUCKET_LOG):
    """Stable sort of uint64 ``keys`` (< 2**nbits) carrying ``payload`` (None: row index).

    Returns ``(sorted_keys, payload_in_sorted_order)`` as fresh arrays. ``method`` is
    "auto" (bucket sort, LSD fallback) or "lsd" (tests use it to reach the fallback).
    """
    n = keys.shape[0]
    use_index = payload is None
    pl = _EMPTY_I64 if use_index else payload
    out_k = np.empty(n, np.uint64)
    out_p = np.empty(n, np.int64)
    if nbits == 0 or n <= 1:
        out_k[:] = keys
        out_p[:] = np.arange(n) if use_index else payload
        return out_k, out_p
    if method == "auto":
        h = min(nbits, max(0, int(n).bit_length() - bucket_log))
        cap = min(nbits, _MAX_BUCKET_BITS, max(int(n).bit_length() + 2, 8))
        for _ in range(3):
            excess = _bucket_sort(keys, pl, use_index, nbits, h, out_k, out_p)
            if excess == 0:
                return out_k, out_p
            if h >= cap:
                break
            # A bucket was too large to pack its positions next to the remaining bits:
            # each extra bucket bit frees one bit, and usually halves the bucket.
            h = min(cap, h + excess + 1)
    elif method != "lsd":
        raise ValueError(f"_sort_keys: unknown method {method!r}")
    _lsd_sort(keys, pl, use_index, nbits, _LSD_DIGIT, out_k, out_p)
    return out_k, out_p


def _argsort2(a, b, *, method="auto", bucket_log=_BUCKET_LOG):
    """Stable argsort of the rows of ``[a | b]`` (normalised inputs); see module doc.

    Returns ``(perm, layout, sorted_keys)`` where ``sorted_keys`` is the sorted packed
    key when the layout has exactly one word (else None): consolidation decodes rows
    from it instead of gathering them.
    """
    n = a.shape[0]
    if n == 0:
        return np.zeros(0, np.int64), None, None
    layout = _layout(a, b)
    mins, widths, word_of, shifts, word_bits = layout
    if not word_bits:  # every row is equal: the identity is the stable order
        return np.arange(n, dtype=np.int64), layout, None
    keys = np.empty(n, np.uint64)
    perm = None
    sk = None
    for word, nbits in enumerate(word_bits):  # least significant word first (LSD)
        _pack_word(a, b, mins, word_of, shifts, word,
                   _EMPTY_I64 if perm is None else perm, perm is not None, keys)
        sk, perm = _sort_keys(keys, perm, nbits, method=method, bucket_log=bucket_log)
    return perm, layout, (sk if len(word_bits) == 1 else None)


# ----------------------------------------------------------------------------------
# Public wrappers
# ----------------------------------------------------------------------------------

def argsort_rows(cols):
    """Stable permutation sorting the rows of ``cols`` lexicographically.

    Parameters
    ----------
    cols : array_like of int, shape [n, k] (or [n], read as one column)
        Any int64 values, the full range included. ``k == 0`` is allowed.

    Returns
    -------
    numpy.ndarray
        int64 ``[n]``: ``cols[perm]`` is sorted by column 0, then column 1, ...; rows
        that compare equal keep their input order (stable). ``k == 0`` or ``n <= 1``
        gives the identity.

    Notes
    -----
    Same order as ``np.lexsort(cols.T[::-1])``, ~10x faster; see the module docstring.
    """
    a = as_int64_rows(cols, "cols", allow_1d=True)
    return _argsort2(a, np.zeros((a.shape[0], 0), np.int64))[0]


def argsort_rows2(a, b):
    """Stable permutation sorting the rows of ``[a | b]`` without concatenating them.

    Parameters
    ----------
    a, b : array_like of int, shapes [n, ka] and [n, kb]
        Same number of rows; ``a``'s columns are the more significant.

    Returns
    -------
    numpy.ndarray
        int64 ``[n]``, as :func:`argsort_rows` of ``np.hstack([a, b])``.
    """
    a = as_int64_rows(a, "a", allow_1d=True)
    b = as_int64_rows(b, "b", allow_1d=True)
    if a.shape[0] != b.shape[0]:
        raise ValueError(f"argsort_rows2: a has {a.shape[0]} rows but b has {b.shape[0]}")
    return _argsort2(a, b)[0]


def is_sorted_rows(cols, strict=False):
    """True when the rows of ``cols`` are lexicographically non-decreasing.

    With ``strict=True``, increasing (no two equal rows). ``cols`` is ``[n, k]`` (or
    ``[n]``, one column); zero or one row is sorted.
    """
    a = as_int64_rows(cols, "cols", allow_1d=True)
    return bool(_is_sorted2(a, np.zeros((a.shape[0], 0), np.int64), bool(strict)))


def is_sorted_rows2(a, b, strict=False):
    """:func:`is_sorted_rows` of ``np.hstack([a, b])`` without concatenating."""
    a = as_int64_rows(a, "a", allow_1d=True)
    b = as_int64_rows(b, "b", allow_1d=True)
    if a.shape[0] != b.shape[0]:
        raise ValueError(f"is_sorted_rows2: a has {a.shape[0]} rows but b has {b.shape[0]}")
    return bool(_is_sorted2(a, b, bool(strict)))

"""Interning byte strings as dense int64 codes, in compiled code.

The string and binary columns of a dataflow's inputs become int64 codes
(:class:`ddnumba.io.encoding.Interner`): code ``c`` is the ``c``-th distinct value
seen. The interned values live in two growing arrays, append-only:

* ``blob``, uint8: every value's bytes, one after the other, in code order;
* ``offs``, int64: value ``c`` is ``blob[offs[c]:offs[c + 1]]`` (``offs[0] = 0``);

and a hash table ``table``, uint64 rows ``(code + 1, hash)`` (``code + 1 == 0``: an
empty slot), with linear probing, a power of two in size and at most 7/10 full;
``meta = [values, bytes]``. A value costs its bytes, 8 for its offset and 23 to 46
in the table, against ~100 and a Python ``str`` for a dictionary entry. The arrays
only grow at their end, so an Arrow array made over their prefixes
(``Interner.values``) stays valid while more values are interned.

The input is an Arrow ``large_string`` / ``large_binary`` array as two buffers:
``data`` (uint8) and ``voffs`` (int64, ``m + 1`` offsets into ``data``). A batch goes
in three passes, each over all its rows, so that the random reads of one row overlap
those of the next ones (prefetched a few rows ahead): hash every row; find each
row's code by its hash alone, inserting the rows whose hash is new; then check that
every row's bytes equal those of its code's value. A 64-bit hash shared by two
different values makes that check fail: the batch's insertions are then undone and
it is interned again comparing the bytes of every candidate (rare enough that its
speed does not matter; the result is the same either way).
"""
import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from .rows import BFALSE, BTRUE, prefetch_row

__all__ = ["hashes", "intern", "intern_hashed", "new_state"]

_MIN_VALUES = 64
_MIN_BYTES = 1024
_MIN_SLOTS = 128
# rows ahead whose table slot (pass 2) or offsets and bytes (pass 3) are prefetched
PF_AHEAD = 8
# tables of fewer slots (1 MiB) stay in cache, where prefetching only costs
PF_MIN_SLOTS = 1 << 16


def new_state():
    """Empty state: ``(blob, offs, table, meta)``."""
    return (np.empty(_MIN_BYTES, np.uint8), np.zeros(_MIN_VALUES + 1, np.int64),
            np.zeros((_MIN_SLOTS, 2), np.uint64), np.zeros(2, np.int64))


@intrinsic
def load_u64(typingctx, arr, i):
    """The eight bytes ``arr[i:i + 8]`` of a 1-D C uint8 array as a little-endian
    uint64, in one unaligned load; unchecked (the caller keeps ``i + 8 <= len``)."""
    if not (isinstance(arr, types.Array) and arr.ndim == 1 and arr.layout == "C" and
            arr.dtype == types.uint8 and isinstance(i, types.Integer)):
        return None
    sig = types.uint64(arr, i)

    def codegen(context, builder, signature, args):
        aryty, ity = signature.args
        ary = context.make_array(aryty)(context, builder, args[0])
        off = context.cast(builder, args[1], ity, types.intp)
        ptr = builder.gep(ary.data, [off])
        p64 = builder.bitcast(ptr, ir.IntType(64).as_pointer())
        return builder.load(p64, align=1)

    return sig, codegen


@njit(cache=True, nogil=True, inline="always")
def _tail(data, i, k):
    """The ``k < 8`` bytes ``data[i:i + k]`` as a little-endian uint64."""
    w = np.uint64(0)
    for q in range(k):
        w |= np.uint64(data[i + q]) << np.uint64(8 * q)
    return w


@njit(cache=True, nogil=True, inline="always")
def _hash(data, lo, hi):
    """A 64-bit hash of ``data[lo:hi]``: eight bytes at a time, each word folded in
    by a multiply and a shift (both bijective), then murmur3's finaliser (the table
    takes the low bits)."""
    h = np.uint64(0xcbf29ce484222325) ^ np.uint64(hi - lo)
    i = lo
    while i + 8 <= hi:
        h = (h ^ load_u64(data, i)) * np.uint64(0x9e3779b97f4a7c15)
        h ^= h >> np.uint64(29)
        i += 8
    if i < hi:
        h = (h ^ _tail(data, i, hi - i)) * np.uint64(0x9e3779b97f4a7c15)
        h ^= h >> np.uint64(29)
    h ^= h >> np.uint64(33)
    h *= np.uint64(0xff51afd7ed558ccd)
    h ^= h >> np.uint64(33)
    h *= np.uint64(0xc4ceb9fe1a85ec53)
    h ^= h >> np.uint64(33)
    return h


@njit(cache=True, nogil=True)
def _rebuilt(table, size, below):
    """A table of ``size`` slots holding ``table``'s entries of codes ``< below``."""
    new = np.zeros((size, 2), np.uint64)
    mask = size - 1
    for r in range(table.shape[0]):
        c1 = table[r, 0]
        if c1 == 0 or np.int64(c1) > below:
            continue
        s = np.int64(table[r, 1] & np.uint64(mask))
        while new[s, 0] != 0:
            s = (s + 1) & mask
        new[s, 0] = c1
        new[s, 1] = table[r, 1]
    return new


@njit(cache=True, nogil=True)
def _append(data, lo, ln, blob, offs, n, nb):
    """Value ``n``'s bytes ``data[lo:lo + ln]`` appended at ``blob[nb:]``; returns the
    arrays (new ones when they grew)."""
    if n + 2 > offs.shape[0]:
        grown = np.zeros(2 * offs.shape[0] - 1, np.int64)
        grown[:n + 1] = offs[:n + 1]
        offs = grown
    if nb + ln > blob.shape[0]:
        gb = np.empty(max(2 * blob.shape[0], nb + ln), np.uint8)
        gb[:nb] = blob[:nb]
        blob = gb
    for q in range(ln):
        blob[nb + q] = data[lo + q]
    offs[n + 1] = nb + ln
    return blob, offs


@njit(cache=True, nogil=True, inline="always")
def _same(data, lo, ln, blob, offs, c):
    """Whether ``data[lo:lo + ln]`` is value ``c``."""
    o = offs[c]
    if offs[c + 1] - o != ln:
        return False
    q = np.int64(0)
    while q + 8 <= ln:
        if load_u64(blob, o + q) != load_u64(data, lo + q):
            return False
        q += 8
    while q < ln and blob[o + q] == data[lo + q]:
        q += 1
    return q == ln


@njit(cache=True, nogil=True)
def _probe_all(data, voffs, hs, blob, offs, table, meta, codes, exact):
    """Each row's code, a new value interned where none is found. Pass 2 (``exact``
    false): a row takes the code of the first value of equal hash, unchecked. The
    slow way (``exact``): of the first value of equal hash and equal bytes."""
    m = hs.shape[0]
    n = meta[0]
    nb = meta[1]
    for i in range(m):
        size = table.shape[0]
        mask = size - 1
        if not exact and size >= PF_MIN_SLOTS and i + PF_AHEAD < m:
            prefetch_row(table, np.int64(hs[i + PF_AHEAD] & np.uint64(mask)))
        h = hs[i]
        lo = voffs[i]
        ln = voffs[i + 1] - lo
        s = np.int64(h & np.uint64(mask))
        c = np.int64(-1)
        while table[s, 0] != 0:
            if table[s, 1] == h:
                c = np.int64(table[s, 0]) - 1
                if not exact or _same(data, lo, ln, blob, offs, c):
                    break
                c = -1
            s = (s + 1) & mask
        if c >= 0:
            codes[i] = c
            continue
        blob, offs = _append(data, lo, ln, blob, offs, n, nb)
        table[s, 0] = np.uint64(n + 1)
        table[s, 1] = h
        codes[i] = n
        n += 1
        nb += ln
        if 10 * n > 7 * size:
            table = _rebuilt(table, 2 * size, n)
    meta[0] = n
    meta[1] = nb
    return blob, offs, table


@njit(cache=True, nogil=True)
def _verified(data, voffs, blob, offs, codes):
    """Pass 3: whether every row's bytes are its code's value's."""
    m = codes.shape[0]
    o2 = offs.reshape((offs.shape[0], 1))
    b2 = blob.reshape((blob.shape[0], 1))
    pf = offs.shape[0] >= PF_MIN_SLOTS
    for i in range(m):
        if pf and i + 2 * PF_AHEAD < m:
            prefetch_row(o2, codes[i + 2 * PF_AHEAD])
        if pf and i + PF_AHEAD < m:
            prefetch_row(b2, offs[codes[i + PF_AHEAD]])
        lo = voffs[i]
        if not _same(data, lo, voffs[i + 1] - lo, blob, offs, codes[i]):
            return False
    return True


@njit(cache=True, nogil=True)
def hashes(data, voffs):
    """The hash of each value ``data[voffs[i]:voffs[i + 1]]``."""
    m = voffs.shape[0] - 1
    hs = np.empty(m, np.uint64)
    for i in range(m):
        hs[i] = _hash(data, voffs[i], voffs[i + 1])
    return hs


@njit(cache=True, nogil=True)
def intern_hashed(data, voffs, hs, blob, offs, table, meta):
    """:func:`intern` with the values' hashes given (``hs``; any function of the
    bytes: tests give weak ones to make values share hashes)."""
    codes = np.empty(hs.shape[0], np.int64)
    n0 = meta[0]
    nb0 = meta[1]
    blob, offs, table = _probe_all(data, voffs, hs, blob, offs, table, meta, codes,
                                   BFALSE)
    if not _verified(data, voffs, blob, offs, codes):
        # two values share a hash: undo the batch's insertions, compare bytes
        table = _rebuilt(table, table.shape[0], n0)
        meta[0] = n0
        meta[1] = nb0
        blob, offs, table = _probe_all(data, voffs, hs, blob, offs, table, meta, codes,
                                       BTRUE)
    return codes, blob, offs, table


@njit(cache=True, nogil=True)
def intern(data, voffs, blob, offs, table, meta):
    """Codes of the ``m = voffs.shape[0] - 1`` values ``data[voffs[i]:voffs[i + 1]]``,
    interning the new ones in order of first appearance (the first gets code
    ``meta[0]``).

    Returns ``(codes, blob, offs, table)``: the state's arrays, new ones when they
    grew (``meta`` is updated in place)."""
    return intern_hashed(data, voffs, hashes(data, voffs), blob, offs, table, meta)

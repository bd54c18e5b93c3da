"""Hashed state: compacted per-key histories of a loop run one outer time at a time.

A *sequential* loop (:mod:`ddnumba.kernels.seqloop`) processes the outer times of a
run in order, each to its fixed point. Every update it has seen is then at an outer
time no later than the current one, and all such times are indistinguishable from
here on (the outer time is totally ordered and only later times remain to be
processed): compaction folds them all into "now". What is left of a time ``(t, i)``
is its iteration ``i``. A trace therefore stores, per key, a short list of entries
``(val, iteration, diff)`` -- fully compacted at every moment, with no outer times
and nothing to merge.

Layout. All the traces of one loop share one open-addressing hash table and one
arena (so that a compiled loop passes three arrays around, whatever the number of
traces):

* ``tab[cap, KW + 6]``: one row per (trace, key): ``tag`` (the trace's id plus one;
  0 is an empty slot), the key padded to ``KW`` words, two *blocks* in the arena
  (offset and length each: block 0 holds the trace, block 1 the output of a reduce
  that is the trace's only reader, so that one lookup finds both; a block's length
  word also holds its capacity's size class in its high bits) and a *stamp*
  (used by a reduce to evaluate a key once a round). With keys of two words a row
  is 64 bytes. Rows are found by linear probing from a hash of the key words only,
  so the rows of one key in different traces (a join's two inputs) sit next to each
  other; the hash's top bits scaled to the capacity pick the first slot. The
  capacity is a power of two or three times one, so a growing table grows by 3/2
  or 4/3 (not 2) and is between 5/12 and 5/8 full after growing. (At most 5/8 full,
  not 3/4: a lookup walks ~1.45 rows past its home slot at 70% full, each row a cache
  line, and at scale each line a miss; HISTORY, thirty-second session.)
* ``arena[acap, VW + 2]``: entries ``(vals padded to VW, iteration, diff)``; a key's
  block is sorted by ``(vals, iteration)`` with no zero diff and no two entries at
  the same ``(vals, iteration)``. The rows of a value-less ``distinct`` / ``top_k``'s
  own trace hold up to three entries in the row itself instead (*inline*, see
  :func:`flat_add`): most of its keys have no more, and such a key's visit then
  reads no arena block.
* ``meta``: counters (rows used, arena top, free entries, live entries, empty rows,
  epoch, key and value words, the free lists' scan bound), then the heads of the
  arena's free lists.

Arena space is handed out in chunks of 1, 2, 4 or 8 entries, or, from 12 on, a power
of two or three times one (12, 16, 24, 32, ...): a larger block's chunk is less than
1.5 times its length when taken (with powers of two alone, the blocks of 9 entries
that hold a node's 9 roots at N=1e6 took chunks of 16), and a small block keeps the
slack that lets a change land in place (a block of 3 in a chunk of 4, say). A block
that outgrows its chunk
relocates to one of the capacity it needs (a change that finds its entry, a new diff
or a cancellation, needs no room and lands in place even in a full chunk; the first
new entry without room sends the rest of the change to a merge into a fresh chunk);
a block keeps its chunk while it shrinks,
down to a quarter full (then it moves to a free chunk of half the size or less, or,
without one, gives up its upper part), and gives it up when empty.
Chunks given up go on the free list of their size, so they fit the next block of
that size, and allocation takes from that list before bumping the arena's top. So
the same space serves key after key, and the top only moves with the live state.
The arena is compacted when free space outweighs live entries anyway (after a large
state shrank, say), and :func:`gc` drops the rows of keys whose history cancelled out, so
memory follows the live state.

Kernels that touch state are *leaves* (:func:`ddnumba.kernels.rows.leaf`, no
reference counting); they cannot allocate, so every operation is planned first
(rows and arena entries it may need), the wrapper grows the arrays, then the leaf
applies it. Diff sums are checked: an overflow is reported, never wrapped.
"""
import numpy as np
from numba import njit

from .hooks import alloc2d, release_rows
from .rows import BFALSE, BTRUE, add_checked, leaf, move_rows, prefetch_row

__all__ = ["new_state", "new_meta", "insert_delta", "gc", "find_rows", "read_key",
           "records", "free_chunks", "M_ROWS", "M_TOP", "M_GARB", "M_LIVE", "M_EMPTY",
           "M_EPOCH"]

M_ROWS = 0      # occupied table rows
M_TOP = 1       # arena entries allocated (top of the bump allocator)
M_GARB = 2      # arena entries no block uses (all on the free lists)
M_LIVE = 3      # entries in blocks (the state's records)
M_EMPTY = 4     # occupied rows whose blocks are both empty
M_EPOCH = 5     # a counter the executor bumps every round (reduce stamps)
M_KW = 6        # KW: key words per row
M_VW = 7        # VW: value words per entry
M_MAXC = 8      # no free list above this size class is non-empty (-1: all empty)
M_FREE = 9      # meta[M_FREE + c]: first free chunk of class c (-1: none; sizes
                # 1, 2, 4, 8, 12, 16, 24, ..., see _size); a free chunk's first entry
                # holds the next one's offset in column 0
N_CLASSES = 92  # chunks of up to 2**47 entries
M_SWITCH = M_FREE + N_CLASSES  # 0; an experiment's switch (``bench pair --switch``):
                                # nothing in the engine reads it, gc and compaction keep it
META_LEN = M_SWITCH + 1

OVERFLOW = -1   # code: a diff sum overflows int64

RW_EXTRA = 6    # row words besides the key: tag, 2 x (offset, length), stamp
LEN_BITS = 40   # a block's length word: length | (size class + 1) << LEN_BITS
LEN_MASK = (1 << LEN_BITS) - 1
INLINE = 1 << 62   # a block-0 length word with this bit: the entries are in the row
INLINE_MAX = 3     # (see "inline blocks" below)
INL_COUNT = 3      # an inline length word's entry count (its low bits)
INL_MASK = (1 << 30) - 1   # the third inline entry's iteration and diff: 30 bits each
INL_DLIM = 1 << 29         # (an iteration below 2**30, a diff in [-2**29, 2**29))

_LOAD_NUM = 5   # at most 5/8 of the table's rows are occupied
_LOAD_DEN = 8
MAX_SLOTS = 1 << 32
INF_ENTRIES = np.iinfo(np.int64).max

# When a table or arena grows, the old one is read in parts of this many bytes and
# each part's memory is given back once it has been copied (hooks.release_rows), so
# that the old and the new array are never both resident; smaller arrays are copied
# whole.
MOVE_BYTES = 1 << 26


def new_state(kw_max, vw_max, rows=16, entries=64):
    """An empty state for keys of at most ``kw_max`` words and values of at most
    ``vw_max`` words: ``(tab, arena, meta)``."""
    tab = np.zeros((_table_cap(rows), kw_max + RW_EXTRA), np.int64)
    arena = np.zeros((max(entries, 16), vw_max + 2), np.int64)
    return tab, arena, new_meta(kw_max, vw_max)


@njit(cache=True, nogil=True)
def _table_cap(rows):
    """The least table capacity (16 or more, a power of two or three times one) with
    ``rows`` occupied rows at most at the load bound."""
    return grid_cap(rows, np.int64(_LOAD_NUM), np.int64(_LOAD_DEN))


@njit(cache=True, nogil=True)
def grid_cap(rows, num, den):
    """The least capacity (16 or more, a power of two or three times one) with
    ``rows`` at most ``num / den`` of it."""
    cap = np.int64(16)
    while True:
        for c in (cap, cap + (cap >> 1)):
            if c * num >= rows * den:
                if c > MAX_SLOTS:
                    raise MemoryError("hashed state: more than 2**32 table slots")
                return c
        cap *= 2


@njit(cache=True, nogil=True)
def new_meta(kw_max, vw_max):
    """The counters of an empty state (free lists empty)."""
    meta = np.zeros(META_LEN, np.int64)
    meta[M_KW] = kw_max
    meta[M_VW] = vw_max
    meta[M_MAXC:M_SWITCH] = -1
    return meta


# ------------------------------------------------------------------------ hashing


@njit(cache=True, nogil=True, inline="always")
def _slot(h, cap):
    """The home slot of hash ``h`` (non-negative, 63 bits) in ``cap`` slots: its top 32
    bits scaled to ``[0, cap)`` by a multiply and a shift (any capacity up to 2**32,
    no division)."""
    return np.int64(((np.uint64(h) >> np.uint64(31)) * np.uint64(cap)) >> np.uint64(32))


@njit(cache=True, nogil=True, inline="always")
def _hash(src, i, c0, kw, KW):
    """A 64-bit mix of ``src[i, c0:c0 + kw]`` padded with zeros to ``KW`` words (as
    a table row stores it), as a non-negative int64."""
    h = np.uint64(0x9E3779B97F4A7C15)
    for c in range(KW):
        x = src[i, c0 + c] if c < kw else np.int64(0)
        h = (h ^ np.uint64(x)) * np.uint64(0xBF58476D1CE4E5B9)
        h = h ^ (h >> np.uint64(31))
    h = h * np.uint64(0x94D049BB133111EB)
    h = h ^ (h >> np.uint64(29))
    return np.int64(h >> np.uint64(1))


@njit(cache=True, nogil=True, inline="always")
def _find(tab, tag, src, i, c0, kw):
    """The row of ``(tag, src[i, c0:c0 + kw])``, or ``-1 - slot`` (the empty slot where
    it would go) when absent."""
    cap = tab.shape[0]
    b = _slot(_hash(src, i, c0, kw, tab.shape[1] - RW_EXTRA), cap)
    while True:
        t = tab[b, 0]
        if t == 0:
            return -1 - b
        if t == tag:
            same = True
            for c in range(kw):
                if tab[b, 1 + c] != src[i, c0 + c]:
                    same = False
                    break
            if same:
                return b
        b += 1
        if b == cap:
            b = 0


# Probes land at random places in state that is gigabytes at scale, so the kernels
# that walk a delta key by key prefetch ahead: the table slot of the key PF_AHEAD rows
# further, and the blocks of the next key (whose slot was prefetched before). Tables
# of fewer than PF_MIN_SLOTS slots (8 MiB with two-word keys) stay in cache, where the
# extra probes of the blocks' prefetch only cost; there the reduce and join-insert
# walks (kernels.seqloop) prefetch the slot of the key PF_AHEAD rows further alone
# (a hash, no probe): such a table outgrows the 1 MiB L2, and its slots come from L3.
PF_AHEAD = 4
PF_MIN_SLOTS = 1 << 17


@njit(cache=True, nogil=True, inline="always")
def _pf_on(tab):
    """Whether to prefetch in ``tab`` (see PF_MIN_SLOTS)."""
    return tab.shape[0] >= PF_MIN_SLOTS


@njit(cache=True, nogil=True, inline="always")
def _pf_slot(tab, src, si, kw):
    """Prefetch the table slot where the key of ``src[si]`` (at column 2) starts."""
    prefetch_row(tab, _slot(_hash(src, si, 2, kw, tab.shape[1] - RW_EXTRA), tab.shape[0]))


@njit(cache=True, nogil=True, inline="always")
def _pf_block(tab, arena, row, blk):
    """Prefetch the first entry of block ``blk`` of ``row`` (nothing if ``row < 0``)."""
    KW = tab.shape[1] - RW_EXTRA
    if row >= 0:
        w = tab[row, KW + 2 + 2 * blk]
        if (w & LEN_MASK) > 0 and (w & INLINE) == 0:
            prefetch_row(arena, tab[row, KW + 1 + 2 * blk])


@njit(cache=True, nogil=True, inline="always")
def _new_row(tab, meta, slot, tag, src, i, c0, kw):
    KW = tab.shape[1] - RW_EXTRA
    tab[slot, 0] = tag
    for c in range(kw):
        tab[slot, 1 + c] = src[i, c0 + c]
    for c in range(kw, KW):
        tab[slot, 1 + c] = 0
    for b in range(2):
        tab[slot, KW + 1 + 2 * b] = -1
        tab[slot, KW + 2 + 2 * b] = 0
    tab[slot, KW + 5] = -1
    meta[M_ROWS] += 1
    meta[M_EMPTY] += 1
    return slot


@njit(cache=True, nogil=True, inline="always")
def _set_block(tab, meta, row, blk, off, cp, ln):
    """Set a block's offset, capacity and length, keeping the count of empty rows."""
    KW = tab.shape[1] - RW_EXTRA
    c = KW + 2 + 2 * blk
    o = KW + 4 - 2 * blk        # the other block's length
    other = tab[row, o] & LEN_MASK
    was = (tab[row, c] & LEN_MASK) + other
    tab[row, c - 1] = off
    tab[row, c] = _len_word(ln, cp)
    now = ln + other
    if was == 0 and now > 0:
        meta[M_EMPTY] -= 1
    elif was > 0 and now == 0:
        meta[M_EMPTY] += 1


@njit(cache=True, nogil=True, inline="always")
def _same_key(a, i, ca, b, j, cb, kw):
    for c in range(kw):
        if a[i, ca + c] != b[j, cb + c]:
            return False
    return True


@njit(cache=True, nogil=True, inline="always")
def _len_word(ln, cp):
    """A block's length word: length ``ln``, capacity ``cp`` (0 or a chunk size)."""
    return ln | ((_cls(cp) + 1) << LEN_BITS) if cp > 0 else ln


@njit(cache=True, nogil=True, inline="always")
def blen(tab, row, blk):
    """The length of block ``blk`` of ``row``."""
    return tab[row, tab.shape[1] - RW_EXTRA + 2 + 2 * blk] & LEN_MASK


@njit(cache=True, nogil=True, inline="always")
def bcap(tab, row, blk):
    """The capacity of block ``blk`` of ``row`` (0: it has no chunk)."""
    k = tab[row, tab.shape[1] - RW_EXTRA + 2 + 2 * blk] >> LEN_BITS
    return np.int64(0) if k == 0 else _size(k - 1)


@njit(cache=True, nogil=True, inline="always")
def _cap(n):
    """A block's capacity: its length rounded up to a chunk size (0 for none; see
    :func:`_size`)."""
    if n <= 0:
        return np.int64(0)
    c = np.int64(1)
    while c < n:
        if c >= 8 and c + (c >> 1) >= n:
            return c + (c >> 1)
        c <<= 1
    return c


# ------------------------------------------------------------------ free lists


@njit(cache=True, nogil=True, inline="always")
def _log2(n):
    """``floor(log2(n))`` for ``n >= 1``."""
    k = np.int64(0)
    while (n >> (k + 1)) > 0:
        k += 1
    return k


@njit(cache=True, nogil=True, inline="always")
def _cls(cp):
    """The size class of a chunk size ``cp`` (see :func:`_size`): ``k`` for ``2**k``
    up to 8, then ``2k - 3`` for ``2**k`` and ``2k - 2`` for ``3 * 2**(k - 1)``."""
    k = _log2(cp)
    if cp == np.int64(1) << k:
        return k if k <= 3 else 2 * k - 3
    return 2 * k - 2


@njit(cache=True, nogil=True, inline="always")
def _size(c):
    """The chunk size of class ``c``: 1, 2, 4, 8, 12, 16, 24, 32, 48, ... for ``c`` =
    0, 1, 2, ...: powers of two, and from 12 on three times one between them."""
    if c <= 3:
        return np.int64(1) << c
    if c & 1:
        return np.int64(1) << ((c + 3) >> 1)
    return np.int64(3) << (c >> 1)


@njit(cache=True, nogil=True, inline="always")
def _free(arena, meta, off, cp):
    """Put the chunk ``arena[off:off + cp]`` (``cp`` a chunk size) on its list."""
    k = _cls(cp)
    c = M_FREE + k
    arena[off, 0] = meta[c]
    meta[c] = off
    meta[M_GARB] += cp
    if k > meta[M_MAXC]:
        meta[M_MAXC] = k


@njit(cache=True, nogil=True, inline="always")
def _free_span(arena, meta, off, n):
    """Put ``arena[off:off + n]`` on the free lists as chunks, the largest first."""
    while n > 0:
        k = _log2(n)
        s = np.int64(1) << k
        if k >= 3 and s + (s >> 1) <= n:
            s += s >> 1
        _free(arena, meta, off, s)
        off += s
        n -= s


@njit(cache=True, nogil=True, inline="always")
def _take_free(arena, meta, cp, below):
    """Offset of a free chunk of ``cp`` entries (a chunk size): one of that size, else
    the lower part of the smallest larger free one of fewer than ``below`` entries,
    whose upper part goes back on the lists (:func:`_free_span`); -1 when there is
    none."""
    k = _cls(cp)
    h = meta[M_FREE + k]
    if h >= 0:
        meta[M_FREE + k] = arena[h, 0]
        meta[M_GARB] -= cp
        return h
    top = meta[M_MAXC]
    for b in range(k + 1, top + 1):
        sb = _size(b)
        if sb >= below:
            return np.int64(-1)
        h = meta[M_FREE + b]
        if h >= 0:
            meta[M_FREE + b] = arena[h, 0]
            meta[M_GARB] -= sb
            _free_span(arena, meta, h + cp, sb - cp)
            return h
    if top > k:
        meta[M_MAXC] = k        # every list above class k is empty
    return np.int64(-1)


@njit(cache=True, nogil=True, inline="always")
def _alloc(arena, meta, cp):
    """Offset of a chunk of ``cp`` entries (a chunk size): a free one (see
    :func:`_take_free`), else the top (which the caller has made room for,
    :func:`_block_need`). Space freed once is used before new memory is."""
    h = _take_free(arena, meta, cp, INF_ENTRIES)
    if h >= 0:
        return h
    h = meta[M_TOP]
    meta[M_TOP] = h + cp
    return h


def free_chunks(arena, meta):
    """Every free chunk as ``(offset, entries)`` (for tests and statistics)."""
    out = []
    for c in range(N_CLASSES):
        h = int(meta[M_FREE + c])
        while h >= 0:
            out.append((h, int(_size(c))))
            h = int(arena[h, 0])
    return out


# ------------------------------------------------------------------------ growth


@njit(cache=True, nogil=True, inline="always")
def place_row(out, src, r, c0, kw, mark):
    """Copy row ``r`` of ``src`` into open-addressing table ``out`` (same width): to
    the first free slot, probing linearly from the home slot of its key ``src[r, c0:c0
    + kw]``; a free slot has a zero in column ``mark``."""
    cap = out.shape[0]
    b = _slot(_hash(src, r, c0, kw, kw), cap)
    while out[b, mark] != 0:
        b += 1
        if b == cap:
            b = 0
    for c in range(src.shape[1]):
        out[b, c] = src[r, c]


@njit(cache=True, nogil=True)
def _rehash(tab, cap, step, drop_empty=False):
    """``tab``'s rows in a table of ``cap`` slots, without the rows
    whose blocks are both empty when ``drop_empty``. ``tab`` is read in parts of
    ``step`` rows, each given back once it is copied (when ``step`` is less than its
    rows, see :func:`_move_step`): ``tab`` is dead afterwards."""
    KW = tab.shape[1] - RW_EXTRA
    out = alloc2d(cap, tab.shape[1], BTRUE)
    n = tab.shape[0]
    r0 = np.int64(0)
    while r0 < n:
        r1 = min(n, r0 + step)
        for r in range(r0, r1):
            if tab[r, 0] == 0:
                continue
            if drop_empty and blen(tab, r, 0) == 0 and blen(tab, r, 1) == 0:
                continue
            place_row(out, tab, r, 1, KW, 0)
        if step < n:
            release_rows(tab, r0, r1)
        r0 = r1
    return out


@njit(cache=True, nogil=True)
def _move_step(a):
    """Rows of ``a`` per part when it is moved (all of them for small arrays)."""
    step = max(np.int64(1), MOVE_BYTES // (8 * a.shape[1]))
    return step if a.shape[0] >= 2 * step else a.shape[0]


@njit(cache=True, nogil=True)
def _move_rows(src, dst, n, step):
    """``dst[:n] = src[:n]``, giving ``src``'s memory back in parts of ``step`` rows
    (see :func:`_move_step`); ``src`` is dead afterwards."""
    if n < 2 * step:
        dst[:n] = src[:n]
        return
    r0 = np.int64(0)
    while r0 < n:
        r1 = min(n, r0 + step)
        dst[r0:r1] = src[r0:r1]
        release_rows(src, r0, r1)
        r0 = r1


@njit(cache=True, nogil=True, inline="always")
def rows_room(tab, meta, more):
    """Whether the table takes ``more`` new rows within its load bound."""
    return (meta[M_ROWS] + more) * _LOAD_DEN <= tab.shape[0] * _LOAD_NUM


@njit(cache=True, nogil=True)
def ensure_rows(tab, meta, more):
    """``tab``, or a larger copy, with room for ``more`` new rows at the load bound."""
    if rows_room(tab, meta, more):
        return tab
    return _rehash(tab, _table_cap(meta[M_ROWS] + more), _move_step(tab), BFALSE)


@njit(cache=True, nogil=True)
def _compact_into(tab, arena, out):
    """Copy every non-empty block into ``out`` back to back (each taking its length
    rounded up to a chunk size); rows get their new offsets and capacities. Returns
    the new top."""
    KW = tab.shape[1] - RW_EXTRA
    top = np.int64(0)
    ew = arena.shape[1]
    for r in range(tab.shape[0]):
        if tab[r, 0] == 0 or (tab[r, KW + 2] & INLINE) != 0:
            continue
        for b in range(2):
            c = KW + 1 + 2 * b
            ln = tab[r, c + 1] & LEN_MASK
            if ln == 0:
                tab[r, c] = -1
                tab[r, c + 1] = 0
                continue
            off = tab[r, c]
            for e in range(ln):
                for q in range(ew):
                    out[top + e, q] = arena[off + e, q]
            cp = _cap(ln)
            tab[r, c] = top
            tab[r, c + 1] = _len_word(ln, cp)
            top += cp
    return top


@njit(cache=True, nogil=True)
def ensure_entries(tab, arena, meta, more):
    """``arena``, or a new one, with room for ``more`` entries at its top. When most
    of the arena is free, blocks are compacted into the new one instead of growing
    it.

    New arenas are not zero-filled: nothing past the top is read before a block or a
    free chunk is written there, and untouched capacity takes no memory."""
    if meta[M_TOP] + more <= arena.shape[0]:
        return arena
    live = meta[M_LIVE]
    if meta[M_GARB] >= live:
        size = max(np.int64(16), 2 * (2 * live + more))
        out = alloc2d(size, arena.shape[1], BFALSE)
        meta[M_TOP] = _compact_into(tab, arena, out)
        meta[M_GARB] = 0
        meta[M_MAXC:M_SWITCH] = -1
        return out
    size = max(2 * arena.shape[0], meta[M_TOP] + more + (meta[M_TOP] >> 1))
    out = alloc2d(size, arena.shape[1], BFALSE)
    _move_rows(arena, out, meta[M_TOP], _move_step(arena))
    return out


@njit(cache=True, nogil=True)
def gc(tab, arena, meta):
    """Drop the rows whose blocks are both empty and compact the arena, when either
    is mostly waste. Returns ``(tab, arena)`` (new arrays when something was done).
    Run between outer times only: stamps of dropped rows are lost."""
    rows = meta[M_ROWS]
    empty = meta[M_EMPTY]
    if empty * 2 > rows and rows > 64:
        keep = rows - empty
        tab = _rehash(tab, _table_cap(2 * keep), _move_step(tab), BTRUE)
        meta[M_ROWS] = keep
        meta[M_EMPTY] = 0
    if meta[M_GARB] > meta[M_LIVE] and meta[M_TOP] > 1024:
        out_a = alloc2d(max(np.int64(16), 2 * meta[M_LIVE] + (meta[M_LIVE] >> 1)),
                        arena.shape[1], BFALSE)
        meta[M_TOP] = _compact_into(tab, arena, out_a)
        meta[M_GARB] = 0
        meta[M_MAXC:M_SWITCH] = -1
        arena = out_a
    return tab, arena


# ------------------------------------------------------------------ block updates


@njit(cache=True, nogil=True, inline="always")
def _cmp_entry(arena, e, src, x, c0, vw, it):
    """Compare arena entry ``e`` with ``(src[x, c0:c0 + vw], it)``: -1, 0, 1."""
    for c in range(vw):
        a = arena[e, c]
        b = src[x, c0 + c]
        if a < b:
            return -1
        if a > b:
            return 1
    a = arena[e, arena.shape[1] - 2]
    if a < it:
        return -1
    if a > it:
        return 1
    return 0


@njit(cache=True, nogil=True, inline="always")
def _block_need(tab, row, blk, m):
    """Arena entries that adding ``m`` entries to a block may take (0: in place)."""
    if row < 0:
        return _cap(m)
    ln = blen(tab, row, blk)
    if ln + m > bcap(tab, row, blk) or m > 8:
        return _cap(ln + m)
    return np.int64(0)


#: a shift of more rows than this within a block is one memmove (rows.move_rows);
#: fewer are copied in line (most blocks hold a few entries)
SHIFT_CALL = 16


@njit(cache=True, nogil=True, inline="always")
def _shift(arena, dst, src, n):
    """Move the ``n`` arena rows at ``src`` to ``dst`` (ranges may overlap): the
    entries after one added or taken out in place. A big key's block (a node of 1e5
    in-edges, say) holds as many entries, and a change to one of its first moves
    nearly all of them."""
    if n > SHIFT_CALL:
        move_rows(arena, dst, src, n)
    elif dst > src:
        for q in range(n - 1, -1, -1):
            for c in range(arena.shape[1]):
                arena[dst + q, c] = arena[src + q, c]
    else:
        for q in range(n):
            for c in range(arena.shape[1]):
                arena[dst + q, c] = arena[src + q, c]


@njit(cache=True, nogil=True, inline="always")
def _block_add(tab, arena, meta, row, blk, src, x0, x1, c0, vw, dcol, it):
    """Add entries ``(src[x, c0:c0 + vw], it)`` with diff ``src[x, dcol]``, for ``x0 <=
    x < x1`` (``(vals, it)`` ascending and distinct), to block ``blk`` of ``row``; with
    ``it < 0`` each row's iteration is its column 0. The arena must have room
    (:func:`_block_need`). Returns 0 or OVERFLOW. Inlined where a key's block is
    added to on the hottest path (the loop join's left insert); elsewhere it is called
    through :func:`block_add`."""
    KW = tab.shape[1] - RW_EXTRA
    EW = arena.shape[1]
    IT = EW - 2
    DF = EW - 1
    cb = KW + 1 + 2 * blk
    off = tab[row, cb]
    ln = blen(tab, row, blk)
    cp = bcap(tab, row, blk)
    m = x1 - x0
    fresh = False
    x = x0
    if m <= 8:
        # in place, entry by entry (few entries, each found by bisection from where
        # the previous one went: they ascend); space is given up at the end (an entry
        # may cancel before another is added). An entry that changes or cancels one
        # already there needs no room, so a full chunk takes those in place; the first
        # new entry it has no room for sends the rest to the merge below.
        lo = np.int64(0)
        while x < x1:
            itx = it if it >= 0 else src[x, 0]
            hi = ln
            while lo < hi:
                mid = (lo + hi) >> 1
                if _cmp_entry(arena, off + mid, src, x, c0, vw, itx) < 0:
                    lo = mid + 1
                else:
                    hi = mid
            pos = lo
            found = pos < ln and _cmp_entry(arena, off + pos, src, x, c0, vw, itx) == 0
            if found:
                s, ov = add_checked(arena[off + pos, DF], src[x, dcol])
                if ov:
                    return OVERFLOW
                if s == 0:
                    _shift(arena, off + pos, off + pos + 1, ln - pos - 1)
                    ln -= 1
                    meta[M_LIVE] -= 1
                else:
                    arena[off + pos, DF] = s
            elif ln < cp:
                _shift(arena, off + pos + 1, off + pos, ln - pos)
                for c in range(vw):
                    arena[off + pos, c] = src[x, c0 + c]
                for c in range(vw, IT):
                    arena[off + pos, c] = 0
                arena[off + pos, IT] = itx
                arena[off + pos, DF] = src[x, dcol]
                ln += 1
                meta[M_LIVE] += 1
            else:
                break
            x += 1
    if x < x1:
        # merge the entries left into a fresh chunk, then free the old one (its
        # length and those entries are at most the ones _block_need counted)
        ncap = _cap(ln + (x1 - x))
        noff = _alloc(arena, meta, ncap)
        a = np.int64(0)
        o = noff
        while a < ln or x < x1:
            if x >= x1:
                c = -1
            elif a >= ln:
                c = 1
            else:
                c = _cmp_entry(arena, off + a, src, x, c0, vw,
                               it if it >= 0 else src[x, 0])
            if c < 0:
                for q in range(EW):
                    arena[o, q] = arena[off + a, q]
                a += 1
                o += 1
            elif c > 0:
                for q in range(vw):
                    arena[o, q] = src[x, c0 + q]
                for q in range(vw, IT):
                    arena[o, q] = 0
                arena[o, IT] = it if it >= 0 else src[x, 0]
                arena[o, DF] = src[x, dcol]
                x += 1
                o += 1
            else:
                s, ov = add_checked(arena[off + a, DF], src[x, dcol])
                if ov:
                    return OVERFLOW
                if s != 0:
                    for q in range(EW):
                        arena[o, q] = arena[off + a, q]
                    arena[o, DF] = s
                    o += 1
                a += 1
                x += 1
        nl = o - noff
        if cp > 0:
            _free(arena, meta, off, cp)
        meta[M_LIVE] += nl - ln
        ln = nl
        off = noff
        cp = ncap
        fresh = True
    if ln == 0:
        if cp > 0:
            _free(arena, meta, off, cp)
        off = -1
        cp = 0
    else:
        off, cp = _shrink(arena, meta, off, cp, ln, fresh)
    _set_block(tab, meta, row, blk, off, cp, ln)
    return 0


@leaf
def block_add(tab, arena, meta, row, blk, src, x0, x1, c0, vw, dcol, it):
    """:func:`_block_add` compiled once, as a leaf of its own, for the callers off the
    hottest path. With the arena helpers it inlines, ``_block_add`` is ~600 lines of
    Numba IR, and the loop kernel inlined it in five places, each a copy that Numba
    deep-copies, types and rebuilds SSA for again: most of that kernel's cold compile
    time and memory (HISTORY, sixty-second session). A call costs a few ns a key."""
    return _block_add(tab, arena, meta, row, blk, src, x0, x1, c0, vw, dcol, it)


@njit(cache=True, nogil=True, inline="always")
def _shrink(arena, meta, off, cp, ln, fresh):
    """The chunk of a block of ``ln > 0`` entries at ``off`` (capacity ``cp``). A block
    at most a quarter full wants a chunk of twice its length rounded up to a chunk
    size (under four times its length); a block whose chunk is ``fresh`` (just taken
    for a merge whose diffs may have cancelled) one of its length rounded up. It moves
    to a free chunk of that size (or a smaller part of a larger one,
    :func:`_take_free`) when there is one, and its old chunk goes back whole. Without
    one, a block at most a quarter full keeps the lower part of its chunk and gives up
    the rest (as the largest chunks that fit). Returns ``(offset, capacity)``.

    Moving keeps the chunks of each size whole, so the arena holds, per size, about as
    many chunks as blocks of that size were ever live at once. Giving up parts turns
    large chunks into small ones for good, and the blocks that grow again take new
    large chunks from the top: at N=1e6 the top rose by ~600k entries a run (fresh
    memory each time) while the free lists filled with small chunks."""
    t = cp
    if fresh:
        t = _cap(ln)
    elif cp >= 4 and ln * 4 <= cp:
        t = _cap(2 * ln)
    if t >= cp:
        return off, cp
    noff = _take_free(arena, meta, t, cp)
    if noff >= 0:
        ew = arena.shape[1]
        for e in range(ln):
            for c in range(ew):
                arena[noff + e, c] = arena[off + e, c]
        _free(arena, meta, off, cp)
        return noff, t
    if cp >= 4 and ln * 4 <= cp:
        t = _cap(2 * ln)
        _free_span(arena, meta, off + t, cp - t)
        return off, t
    return off, cp


# ------------------------------------------------------------------ inline blocks
#
# A value-less ``distinct`` / ``top_k`` that owns its arrangement (the flat path of
# seqloop._reduce_keys) keeps per key only ``(iteration, diff)`` entries, mostly one to
# three (N=1e6 reachability: 45% of its keys hold one, 35% two, 15% three), and no
# output block. Such a row keeps up to INLINE_MAX entries in its own words instead of
# an arena chunk, so that visiting the key reads its table row and no block elsewhere:
# block 0's length word holds INLINE and the count (its low bits); entry 0 is (block
# 0's offset word, block 1's offset word), entry 1 (block 1's length word, the stamp),
# as ``(iteration, diff)``; a third entry is packed into the length word, 30 bits of
# iteration above the count and 30 of diff above those, when both fit (else the row
# keeps a chunk). Only those kernels write such rows (flat_add), and the rest of this
# module leaves them alone: no chunk to compact (_compact_into), never empty
# (_rehash: the count bits are never zero), no block to prefetch (_pf_block). A row of
# more entries has an arena block as usual, and goes back inline once its block has
# INLINE_MAX entries or fewer (that fit).


@njit(cache=True, nogil=True, inline="always")
def _inl_entry(tab, row, k):
    """Inline entry ``k`` (0, 1 or 2) of ``row``: ``(iteration, diff)``."""
    KW = tab.shape[1] - RW_EXTRA
    if k == 0:
        return tab[row, KW + 1], tab[row, KW + 3]
    if k == 1:
        return tab[row, KW + 4], tab[row, KW + 5]
    w = tab[row, KW + 2]
    d = (w >> 32) & INL_MASK
    return (w >> 2) & INL_MASK, (d ^ INL_DLIM) - INL_DLIM


@njit(cache=True, nogil=True, inline="always")
def _inl_fits(it, d):
    """Whether ``(it, d)`` can be a row's third inline entry."""
    return it >= 0 and it <= INL_MASK and d >= -INL_DLIM and d < INL_DLIM


@njit(cache=True, nogil=True, inline="always")
def _set_inline(tab, row, n, i0, d0, i1, d1, i2, d2):
    """Block 0 of ``row`` := ``n`` (1 to 3) inline entries ``(i0, d0)``, ``(i1, d1)``,
    ``(i2, d2)`` (the third must fit: :func:`_inl_fits`)."""
    KW = tab.shape[1] - RW_EXTRA
    w = INLINE | n
    if n == 3:
        w |= (i2 << 2) | ((d2 & INL_MASK) << 32)
    tab[row, KW + 1] = i0
    tab[row, KW + 2] = w
    tab[row, KW + 3] = d0
    tab[row, KW + 4] = i1
    tab[row, KW + 5] = d1


@njit(cache=True, nogil=True, inline="always")
def _set_chunk(tab, row, off, lw):
    """Block 0 of ``row`` := the arena block at ``off`` of length word ``lw``; block 1
    empty, no stamp (the words an inline row used)."""
    KW = tab.shape[1] - RW_EXTRA
    tab[row, KW + 1] = off
    tab[row, KW + 2] = lw
    tab[row, KW + 3] = -1
    tab[row, KW + 4] = 0
    tab[row, KW + 5] = -1


@njit(cache=True, nogil=True, inline="always")
def flat_len(tab, row):
    """The entries of flat row ``row`` (inline or in a block)."""
    w = tab[row, tab.shape[1] - RW_EXTRA + 2]
    if (w & INLINE) != 0:
        return w & INL_COUNT
    return w & LEN_MASK


@njit(cache=True, nogil=True, inline="always")
def flat_need(tab, row):
    """Arena entries at the top that :func:`flat_history` and :func:`flat_add` may
    take for one entry added to flat row ``row`` (0 for ``row < 0``: no row yet)."""
    if row < 0:
        return np.int64(0)
    w = tab[row, tab.shape[1] - RW_EXTRA + 2]
    if (w & INLINE) != 0:
        return _cap(INLINE_MAX + 1)     # scratch first, then maybe a chunk
    if (w & LEN_MASK) == 0:
        return np.int64(0)
    return _block_need(tab, row, 0, 1)


@njit(cache=True, nogil=True, inline="always")
def flat_history(tab, arena, meta, row):
    """``(offset, length)`` of the entries of flat row ``row`` in the arena: an inline
    row's are copied (iteration and diff) to scratch at the arena's top, which
    :func:`flat_need` made room for and nothing reads (``(0, 0)`` for ``row < 0``)."""
    if row < 0:
        return np.int64(0), np.int64(0)
    KW = tab.shape[1] - RW_EXTRA
    w = tab[row, KW + 2]
    if (w & INLINE) == 0:
        return tab[row, KW + 1], w & LEN_MASK
    n = w & INL_COUNT
    top = meta[M_TOP]
    IT = arena.shape[1] - 2
    for k in range(n):
        it, d = _inl_entry(tab, row, k)
        arena[top + k, IT] = it
        arena[top + k, IT + 1] = d
    return top, n


@njit(cache=True, nogil=True, inline="always")
def flat_add(tab, arena, meta, row, it, src, x, c0, vw):
    """Add the entry ``(it, src[x, 1])`` (no vals: ``src[x, c0:c0 + vw]`` are zeros)
    to flat row ``row``, inline while it holds INLINE_MAX entries or fewer that fit
    (room: :func:`flat_need`). Returns 0 or OVERFLOW."""
    KW = tab.shape[1] - RW_EXTRA
    IT = arena.shape[1] - 2
    w = tab[row, KW + 2]
    if (w & INLINE) == 0 and (w & LEN_MASK) > 0:
        if block_add(tab, arena, meta, row, np.int64(0), src, x, x + 1, c0, vw, 1,
                     it) == OVERFLOW:
            return OVERFLOW
        n = blen(tab, row, 0)
        if n == 0 or n > INLINE_MAX:
            return 0
        off = tab[row, KW + 1]
        i0 = arena[off, IT]
        d0 = arena[off, IT + 1]
        i1 = np.int64(0)
        d1 = np.int64(0)
        i2 = np.int64(0)
        d2 = np.int64(0)
        if n > 1:
            i1 = arena[off + 1, IT]
            d1 = arena[off + 1, IT + 1]
        if n > 2:
            i2 = arena[off + 2, IT]
            d2 = arena[off + 2, IT + 1]
            if not _inl_fits(i2, d2):
                return 0
        _free(arena, meta, off, bcap(tab, row, 0))
        _set_inline(tab, row, n, i0, d0, i1, d1, i2, d2)
        return 0
    d = src[x, 1]
    if d == 0:
        return 0
    # inline or empty: the entries (at most INLINE_MAX + 1) in registers, ascending
    n0 = np.int64(0)
    if (w & INLINE) != 0:
        n0 = w & INL_COUNT
    n = n0
    i0, d0 = _inl_entry(tab, row, 0)
    i1, d1 = _inl_entry(tab, row, 1)
    i2 = np.int64(0)
    d2 = np.int64(0)
    if n == 3:
        i2, d2 = _inl_entry(tab, row, 2)
    i3 = np.int64(0)
    d3 = np.int64(0)
    if n >= 1 and i0 == it:
        d0, ov = add_checked(d0, d)
        if ov:
            return OVERFLOW
        if d0 == 0:
            i0, d0 = i1, d1
            i1, d1 = i2, d2
            n -= 1
    elif n >= 2 and i1 == it:
        d1, ov = add_checked(d1, d)
        if ov:
            return OVERFLOW
        if d1 == 0:
            i1, d1 = i2, d2
            n -= 1
    elif n >= 3 and i2 == it:
        d2, ov = add_checked(d2, d)
        if ov:
            return OVERFLOW
        if d2 == 0:
            n -= 1
    elif n == 0:
        i0, d0 = it, d
        n = 1
    elif it < i0:
        i3, d3 = i2, d2
        i2, d2 = i1, d1
        i1, d1 = i0, d0
        i0, d0 = it, d
        n += 1
    elif n == 1 or it < i1:
        i3, d3 = i2, d2
        i2, d2 = i1, d1
        i1, d1 = it, d
        n += 1
    elif n == 2 or it < i2:
        i3, d3 = i2, d2
        i2, d2 = it, d
        n += 1
    else:
        i3, d3 = it, d
        n += 1
    meta[M_LIVE] += n - n0
    if n == 0:
        _set_chunk(tab, row, -1, 0)
        meta[M_EMPTY] += 1
    elif n < 3 or (n == 3 and _inl_fits(i2, d2)):
        _set_inline(tab, row, n, i0, d0, i1, d1, i2, d2)
        if n0 == 0:
            meta[M_EMPTY] -= 1
    else:
        cp = _cap(n)
        off = _alloc(arena, meta, cp)
        for e in range(n):
            for c in range(IT):
                arena[off + e, c] = 0
        arena[off, IT] = i0
        arena[off, IT + 1] = d0
        arena[off + 1, IT] = i1
        arena[off + 1, IT + 1] = d1
        arena[off + 2, IT] = i2
        arena[off + 2, IT + 1] = d2
        if n == 4:
            arena[off + 3, IT] = i3
            arena[off + 3, IT + 1] = d3
        _set_chunk(tab, row, off, _len_word(n, cp))
    return 0


# ------------------------------------------------------------------ delta insertion
#
# A *delta* is a buffer of rows ``(iteration, diff, key, vals)`` sorted by (key,
# vals), consolidated; the executor's buffers share this layout (kernels.seqloop).


@leaf
def _ins_plan(tab, tag, blk, dd, r0, n, kw, need):
    """Rows and arena entries that inserting the key groups of delta ``dd[r0:n]`` into
    block ``blk`` of trace ``tag`` may take: adds to ``need[0]`` (rows) and
    ``need[1]`` (entries)."""
    pf = _pf_on(tab)
    r = r0
    while r < n:
        if pf and r + PF_AHEAD < n:
            _pf_slot(tab, dd, r + PF_AHEAD, kw)
        e = r + 1
        while e < n and _same_key(dd, r, 2, dd, e, 2, kw):
            e += 1
        row = _find(tab, tag, dd, r, 2, kw)
        if row < 0:
            need[0] += 1
            need[1] += _cap(e - r)
        else:
            need[1] += _block_need(tab, row, blk, e - r)
        r = e


@leaf
def _ins_apply(tab, arena, meta, tag, blk, dd, r0, n, kw, vw, it):
    """Add the key groups of delta ``dd[r0:n]`` at iteration ``it`` to block ``blk`` of
    trace ``tag``. Returns ``n`` when done; the row of the first key group it could
    not add, without touching it, when the table is at its load bound and the key is
    new, or the arena's top lacks the entries the key may take (see
    :func:`insert_delta`); or OVERFLOW (the state is then inconsistent: the caller
    raises)."""
    pf = _pf_on(tab)
    r = r0
    nxt = np.int64(-1)      # the next key's row, found while prefetching (-1: none)
    while r < n:
        e = r + 1
        while e < n and _same_key(dd, r, 2, dd, e, 2, kw):
            e += 1
        # (a row found for the next key stays valid: rows never move here, and a new
        # row only takes an empty slot)
        row = nxt
        nxt = -1
        if pf and e < n:
            if e + PF_AHEAD < n:
                _pf_slot(tab, dd, e + PF_AHEAD, kw)
            nxt = _find(tab, tag, dd, e, 2, kw)
            _pf_block(tab, arena, nxt, blk)
            if nxt < 0:
                nxt = -1
        if row < 0:
            row = _find(tab, tag, dd, r, 2, kw)
        if row < 0:
            if (meta[M_ROWS] + 1) * _LOAD_DEN > tab.shape[0] * _LOAD_NUM or \
                    meta[M_TOP] + _cap(e - r) > arena.shape[0]:
                return r
            row = _new_row(tab, meta, -1 - row, tag, dd, r, 2, kw)
        elif meta[M_TOP] + _block_need(tab, row, blk, e - r) > arena.shape[0]:
            return r
        if block_add(tab, arena, meta, row, blk, dd, r, e, 2 + kw, vw, 1, it) != 0:
            return OVERFLOW
        r = e
    return n


@njit(cache=True, nogil=True)
def insert_delta(tab, arena, meta, tag, blk, dd, n, kw, vw, it, what):
    """Add the delta ``dd[:n]`` (rows ``(iteration, diff, key, vals)`` sorted by key
    and vals, consolidated) at iteration ``it`` to block ``blk`` of trace ``tag``.
    Returns ``(tab, arena)``, grown if needed. Raises ``OverflowError`` (message
    ``what``) when a diff sum leaves int64.

    Keys go in until one lacks room; only then are the rest planned (one more lookup
    per key, :func:`_ins_plan`) and the table and arena grown once for all of them.
    Most inserts find room, so they look each key up once."""
    return insert_from(tab, arena, meta, tag, blk, dd, np.int64(0), n, kw, vw, it, what)


@njit(cache=True, nogil=True)
def insert_from(tab, arena, meta, tag, blk, dd, r0, n, kw, vw, it, what):
    """:func:`insert_delta` of the rows ``dd[r0:n]`` (``r0`` at a key group's first
    row): the rest of an insert that :func:`_ins_apply` stopped at ``r0``."""
    r = r0
    grown = np.int64(-1)
    while r < n:
        r = _ins_apply(tab, arena, meta, tag, blk, dd, r, n, kw, vw, it)
        if r == OVERFLOW:
            raise OverflowError(what)
        if r < n:
            if r == grown:
                raise RuntimeError("insert_delta: internal error: no room after growing")
            grown = r
            need = np.zeros(2, np.int64)
            _ins_plan(tab, tag, blk, dd, r, n, kw, need)
            tab = ensure_rows(tab, meta, need[0])
            arena = ensure_entries(tab, arena, meta, need[1])
    return tab, arena


# ------------------------------------------------------------------------ reading


@njit(cache=True, nogil=True)
def find_rows(tab, tag, keys, kw):
    """Row of every key of ``keys`` in trace ``tag`` (-1 where absent)."""
    out = np.empty(keys.shape[0], np.int64)
    for i in range(keys.shape[0]):
        r = _find(tab, tag, keys, i, 0, kw)
        out[i] = r if r >= 0 else -1
    return out


@njit(cache=True, nogil=True)
def read_key(tab, arena, row, blk):
    """The entries of a row's block (a copy): ``(vals padded, iteration, diff)``."""
    KW = tab.shape[1] - RW_EXTRA
    if row < 0:
        return np.empty((0, arena.shape[1]), np.int64)
    if (tab[row, KW + 2] & INLINE) != 0:
        n = flat_len(tab, row) if blk == 0 else np.int64(0)
        out = np.zeros((n, arena.shape[1]), np.int64)
        for k in range(n):
            out[k, -2], out[k, -1] = _inl_entry(tab, row, k)
        return out
    off = tab[row, KW + 1 + 2 * blk]
    ln = blen(tab, row, blk)
    return arena[off:off + ln].copy()


@njit(cache=True, nogil=True)
def dump(tab, arena, tag, kw, blk):
    """Every entry of block ``blk`` of trace ``tag`` as ``(keys[n, kw], entries[n,
    VW + 2])``, in table order (for tests and statistics)."""
    n = np.int64(0)
    for r in range(tab.shape[0]):
        if tab[r, 0] == tag:
            n += read_key(tab, arena, r, blk).shape[0]
    keys = np.empty((n, kw), np.int64)
    ents = np.empty((n, arena.shape[1]), np.int64)
    o = np.int64(0)
    for r in range(tab.shape[0]):
        if tab[r, 0] != tag:
            continue
        e = read_key(tab, arena, r, blk)
        for k in range(e.shape[0]):
            for c in range(kw):
                keys[o, c] = tab[r, 1 + c]
            ents[o] = e[k]
            o += 1
    return keys, ents


def records(meta):
    """Entries held (the state's size in updates)."""
    return int(meta[M_LIVE])

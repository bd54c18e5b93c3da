"""Hashed state (kernels.hstate) against a dictionary: random deltas into several traces
and both blocks of a row, growth of the table and the arena, garbage collection,
sortedness of every block, and overflow reporting."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from numba import njit

from ddnumba.kernels import hstate as H
from ddnumba.kernels.hooks import (HUGE_BYTES, LINE_BYTES, RELEASE_ALIGN, RELEASES_PAGES,
                                   alloc2d, release_rows)

# (kw, vw) of traces 1, 2, 3 (tags)
SHAPES = {1: (1, 0), 2: (2, 1), 3: (1, 2)}


def _delta(rng, tag, n, domain, it):
    """A consolidated delta for ``tag`` as rows (iteration, diff, key, vals), sorted."""
    kw, vw = SHAPES[tag]
    rows = rng.integers(-domain, domain + 1, size=(n, kw + vw))
    acc = {}
    for r, f in zip(map(tuple, rows), rng.integers(-3, 4, size=n)):
        acc[r] = acc.get(r, 0) + int(f)
    items = sorted((r, f) for r, f in acc.items() if f != 0)
    dd = np.zeros((len(items), 2 + kw + vw), np.int64)
    for i, (r, f) in enumerate(items):
        dd[i, 0] = it
        dd[i, 1] = f
        dd[i, 2:] = r
    return dd, items


def _check(tab, arena, meta, model):
    got = {}
    for tag, (kw, vw) in SHAPES.items():
        for blk in (0, 1):
            keys, ents = H.dump(tab, arena, tag, kw, blk)
            for k, e in zip(keys, ents):
                key = (tag, blk, tuple(k), tuple(e[:vw]), int(e[-2]))
                assert key not in got, f"{key} twice"
                assert e[-1] != 0
                got[key] = int(e[-1])
    assert got == model
    assert H.records(meta) == len(model)
    KW = tab.shape[1] - H.RW_EXTRA
    for r in range(tab.shape[0]):
        if tab[r, 0]:
            vw = SHAPES[int(tab[r, 0])][1]
            for blk in (0, 1):
                e = H.read_key(tab, arena, r, blk)
                order = [tuple(x[:vw]) + (x[-2],) for x in e]
                assert order == sorted(set(order)), "block not sorted or repeated"
                assert H.blen(tab, r, blk) == len(e)
                assert H.bcap(tab, r, blk) >= len(e)
    _check_space(tab, arena, meta)


def _check_space(tab, arena, meta):
    """Blocks and free chunks tile the arena below its top without overlap, and the
    counters agree with them."""
    KW = tab.shape[1] - H.RW_EXTRA
    spans = []
    for r in range(tab.shape[0]):
        if tab[r, 0] and not tab[r, KW + 2] & H.INLINE:
            for blk in (0, 1):
                ln = int(H.blen(tab, r, blk))
                cap = int(H.bcap(tab, r, blk))
                assert (cap == 0) == (ln == 0), "a chunk without entries, or no chunk"
                assert cap == 0 or cap == H._cap(cap), "not a chunk size"
                assert cap < 4 or 4 * ln > cap, "a block under a quarter full"
                if ln:
                    spans.append((int(tab[r, KW + 1 + 2 * blk]), cap, "block"))
    free = H.free_chunks(arena, meta)
    assert sum(c for _, c in free) == meta[H.M_GARB]
    spans += [(o, c, "free") for o, c in free]
    spans.sort()
    end = 0
    for o, c, what in spans:
        assert o >= end, f"{what} at {o} overlaps the span before it"
        end = o + c
    assert end <= meta[H.M_TOP] <= arena.shape[0]
    # nothing below the top is lost: blocks and free chunks cover it
    assert sum(c for _, c, _w in spans) == meta[H.M_TOP]


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), domain=st.sampled_from([1, 3, 40]),
       steps=st.integers(1, 60), gc_every=st.sampled_from([1, 7, 1000]))
def test_hstate_matches_dictionary(seed, domain, steps, gc_every):
    rng = np.random.default_rng(seed)
    tab, arena, meta = H.new_state(2, 2)
    model = {}
    for step in range(steps):
        tag = int(rng.integers(1, 4))
        kw, vw = SHAPES[tag]
        blk = int(rng.integers(0, 2))
        it = int(rng.integers(0, 4))
        dd, items = _delta(rng, tag, int(rng.integers(1, 40)), domain, it)
        tab, arena = H.insert_delta(tab, arena, meta, tag, blk, dd, len(items), kw, vw,
                                    it, "overflow")
        for r, f in items:
            k = (tag, blk, r[:kw], r[kw:], it)
            model[k] = model.get(k, 0) + f
            if model[k] == 0:
                del model[k]
        if step % gc_every == gc_every - 1:
            tab, arena = H.gc(tab, arena, meta)
    _check(tab, arena, meta, model)
    tab, arena = H.gc(tab, arena, meta)
    _check(tab, arena, meta, model)


def _insert_and_cancel(tab, arena, meta, keys):
    """Insert one-word ``keys`` into trace 1 and take them out again (their rows are
    left empty, their chunks free)."""
    for sign in (1, -1):
        dd = np.zeros((len(keys), 3), np.int64)
        dd[:, 1] = sign
        dd[:, 2] = keys
        tab, arena = H.insert_delta(tab, arena, meta, 1, 0, dd, len(keys), 1, 0, 0, "x")
    return tab, arena


def test_hstate_rows_of_cancelled_keys_are_collected():
    """Keys whose history cancels leave empty rows; gc drops them and compacts the
    arena, so state follows the live keys, not the keys ever seen."""
    tab, arena, meta = H.new_state(1, 0)
    for round_ in range(20):
        keys = np.arange(round_ * 1000, (round_ + 1) * 1000)
        tab, arena = _insert_and_cancel(tab, arena, meta, keys)
        tab, arena = H.gc(tab, arena, meta)
    assert H.records(meta) == 0
    assert meta[H.M_ROWS] <= 1000
    assert tab.shape[0] <= 4096


def test_switch_word_is_kept_by_gc_and_compaction():
    """``M_SWITCH`` (``bench pair --switch``) starts at 0, and dropping rows and
    compacting the arena, which reset the free lists just below it, leave it as set."""
    tab, arena, meta = H.new_state(1, 0)
    assert meta[H.M_SWITCH] == 0 and meta.shape == (H.META_LEN,)
    meta[H.M_SWITCH] = 5
    for round_ in range(3):
        keys = np.arange(round_ * 2000, (round_ + 1) * 2000)
        tab, arena = _insert_and_cancel(tab, arena, meta, keys)
        top, rows = meta[H.M_TOP], meta[H.M_ROWS]
        tab, arena = H.gc(tab, arena, meta)
        assert meta[H.M_ROWS] < rows and meta[H.M_TOP] < top   # both were done
        assert (meta[H.M_MAXC:H.M_SWITCH] == -1).all() and meta[H.M_SWITCH] == 5
    # an arena grown while most of it is free is compacted instead (ensure_entries)
    tab, arena = _insert_and_cancel(tab, arena, meta, np.arange(10_000, 12_000))
    garbage, top = meta[H.M_GARB], meta[H.M_TOP]
    arena = H.ensure_entries(tab, arena, meta, arena.shape[0])
    assert garbage > 0 and meta[H.M_GARB] == 0 and meta[H.M_TOP] < top
    assert meta[H.M_SWITCH] == 5


def test_insert_resumes_where_room_ran_out():
    """``_ins_apply`` adds key groups until one lacks room (a new key with the table
    at its load bound, or too few arena entries at the top) and returns that group's
    first row with nothing of it added; ``insert_delta`` then plans the rest, grows
    the table and the arena, and goes on from there."""
    tag, (kw, vw) = 3, SHAPES[3]                  # one key word, two value words
    tab, arena, meta = H.new_state(2, 2)
    keys = np.repeat(np.arange(300), 2)
    dd = np.zeros((600, 2 + kw + vw), np.int64)
    dd[:, 0] = 4
    dd[:, 1] = np.tile([1, -3], 300)
    dd[:, 2] = keys
    dd[:, 3] = np.tile([5, 9], 300)
    dd[:, 4] = 7
    r = int(H._ins_apply(tab, arena, meta, tag, 0, dd, 0, 600, kw, vw, 4))
    assert 0 < r < 600 and r % 2 == 0            # stopped at a key's first row
    rows = H.find_rows(tab, tag, np.arange(300).reshape(-1, 1), kw)
    assert (rows[:r // 2] >= 0).all() and (rows[r // 2:] < 0).all()
    # (called again it stops there again: nothing of that key went in)
    assert int(H._ins_apply(tab, arena, meta, tag, 0, dd, r, 600, kw, vw, 4)) == r
    tab, arena = H.insert_delta(tab, arena, meta, tag, 0, np.ascontiguousarray(dd[r:]),
                                600 - r, kw, vw, 4, "x")
    model = {(tag, 0, (int(x[2]),), (int(x[3]), int(x[4])), 4): int(x[1]) for x in dd}
    _check(tab, arena, meta, model)
    # the whole delta through insert_delta on a fresh state: the same contents
    t2, a2, m2 = H.new_state(2, 2)
    t2, a2 = H.insert_delta(t2, a2, m2, tag, 0, dd, 600, kw, vw, 4, "x")
    _check(t2, a2, m2, model)


def test_hstate_long_blocks_and_growth():
    """One key with thousands of entries (the merge path), many keys (rehashes)."""
    rng = np.random.default_rng(5)
    tab, arena, meta = H.new_state(1, 1)
    model = {}
    for it in range(30):
        vals = np.unique(rng.integers(0, 3000, 200))
        dd = np.zeros((len(vals), 4), np.int64)
        dd[:, 0] = it
        dd[:, 1] = 1
        dd[:, 2] = 7
        dd[:, 3] = vals
        tab, arena = H.insert_delta(tab, arena, meta, 2, 0, dd, len(vals), 1, 1, it, "x")
        for v in vals:
            model[(7, int(v), it)] = 1
    keys, ents = H.dump(tab, arena, 2, 1, 0)
    assert {(int(k[0]), int(e[0]), int(e[1])): int(e[2]) for k, e in zip(keys, ents)} \
        == model
    dd = np.zeros((50_000, 4), np.int64)
    dd[:, 1] = 1
    dd[:, 2] = np.arange(50_000)
    tab, arena = H.insert_delta(tab, arena, meta, 2, 0, dd, 50_000, 1, 1, 0, "x")
    assert meta[H.M_ROWS] == 50_000      # key 7 was there already
    # the table grew past the size NumPy allocates (huge pages): nothing lost there
    assert tab.nbytes >= HUGE_BYTES
    for k in range(50_000):
        model[(k, 0, 0)] = model.get((k, 0, 0), 0) + 1
    keys, ents = H.dump(tab, arena, 2, 1, 0)
    assert {(int(k[0]), int(e[0]), int(e[1])): int(e[2]) for k, e in zip(keys, ents)} \
        == model
    rows = H.find_rows(tab, 2, np.arange(0, 50_000, 997).reshape(-1, 1), 1)
    assert (rows >= 0).all()


def test_in_place_changes_to_a_big_block_match_the_dictionary():
    """A key of ~500 entries, then small deltas (at most 8 rows: the in-place path)
    that add entries before, between and after the others and cancel some: the
    entries after each change move by one memmove (``hstate._shift``) when more than
    ``SHIFT_CALL`` of them follow it, else in line."""
    rng = np.random.default_rng(11)
    state = _new(4096)
    vals = np.unique(rng.integers(0, 5000, 600))
    _put(state, 3, vals, np.ones(len(vals), np.int64))
    model = {int(v): 1 for v in vals}
    shifted = 0
    for _ in range(300):
        m = int(rng.integers(1, 9))
        live = sorted(model)
        picks = set()
        for _ in range(m):
            if live and rng.random() < 0.5:
                picks.add(live[int(rng.integers(0, len(live)))])   # cancel
            else:
                picks.add(int(rng.integers(-100, 5100)))            # new or +1
        picks = np.array(sorted(picks), np.int64)
        diffs = np.array([-model[v] if v in model and rng.random() < 0.8 else 1
                          for v in picks.tolist()], np.int64)
        off0, ln0, cap0 = _block_of(state, 3)
        _put(state, 3, picks, diffs)
        for v, d in zip(picks.tolist(), diffs.tolist()):
            model[v] = model.get(v, 0) + d
            if model[v] == 0:
                del model[v]
        if ln0 + len(picks) <= cap0 and np.searchsorted(sorted(model), picks[0]) \
                < len(model) - H.SHIFT_CALL:
            shifted += 1
        keys, ents = H.dump(state[0], state[1], 2, 1, 0)
        got = {int(e[0]): int(e[2]) for k, e in zip(keys, ents) if k[0] == 3}
        assert got == model
    assert shifted > 100          # the memmove path ran
    _check_space(*state)


def _put(state, key, vals, diffs, it=0):
    """Insert ``(key, val)`` with ``diffs`` at ``it`` into trace 2 (one key word, one
    value word), block 0; returns the key's ``(offset, length, capacity)``."""
    tab, arena, meta = state
    order = np.argsort(vals)
    dd = np.zeros((len(vals), 4), np.int64)
    dd[:, 0] = it
    dd[:, 1] = np.asarray(diffs)[order]
    dd[:, 2] = key
    dd[:, 3] = np.asarray(vals)[order]
    state[0], state[1] = H.insert_delta(tab, arena, meta, 2, 0, dd, len(vals), 1, 1, it,
                                        "x")
    return _block_of(state, key)


def _find_row(state, key):
    return int(H.find_rows(state[0], 2, np.array([[key]]), 1)[0])


def _block_of(state, key):
    tab = state[0]
    row = _find_row(state, key)
    KW = tab.shape[1] - H.RW_EXTRA
    return int(tab[row, KW + 1]), int(H.blen(tab, row, 0)), int(H.bcap(tab, row, 0))


def _new(entries=256):
    return list(H.new_state(1, 1, rows=64, entries=entries))


def test_a_shrinking_block_moves_to_a_free_chunk_and_frees_its_own_whole():
    """A block left a quarter full moves to a free chunk of half its size or less; its
    old chunk goes back whole (not split into halves that only smaller blocks could
    use), and nothing new is taken from the top."""
    state = _new()
    off_a, _, cap_a = _put(state, 1, list(range(1, 10)), [1] * 9)
    off_b, _, cap_b = _put(state, 2, list(range(1, 7)), [1] * 6)
    assert (cap_a, cap_b) == (12, 8)
    assert _put(state, 2, list(range(1, 7)), [-1] * 6)[1] == 0      # a free 8-chunk
    top = state[2][H.M_TOP]
    before = H.free_chunks(state[1], state[2])
    assert (off_b, 8) in before
    # entries removed in place: six of twelve stay put; three of twelve want a chunk
    # of eight and move to B's
    assert _put(state, 1, [2, 3, 4], [-1] * 3) == (off_a, 6, 12)
    assert _put(state, 1, [5, 6, 7], [-1] * 3) == (off_b, 3, 8)
    after = H.free_chunks(state[1], state[2])
    assert sorted(after) == sorted([c for c in before if c != (off_b, 8)] + [(off_a, 12)])
    assert state[2][H.M_TOP] == top
    _check_space(*state)
    assert H.read_key(state[0], state[1], _find_row(state, 1), 0)[:, 0].tolist() == [1, 8, 9]


def test_a_shrinking_block_without_a_free_chunk_gives_up_its_upper_part():
    state = _new()
    off_a, _, _ = _put(state, 1, list(range(1, 10)), [1] * 9)
    assert H.free_chunks(state[1], state[2]) == []
    assert _put(state, 1, [2, 3, 4], [-1] * 3) == (off_a, 6, 12)
    assert _put(state, 1, [5, 6, 7], [-1] * 3) == (off_a, 3, 8)
    assert H.free_chunks(state[1], state[2]) == [(off_a + 8, 4)]
    _check_space(*state)


def test_a_merge_whose_diffs_cancel_ends_in_a_chunk_of_its_length():
    """A new entry before the one entry of a full one-entry block sends both changes
    to a merge through a fresh chunk of four (one cancels); the result moves back to a
    one-entry chunk (here its old one, freed by the merge) and the chunk of four goes
    back whole."""
    state = _new()
    off_a, _, _ = _put(state, 1, [5], [1])
    assert _put(state, 1, [4, 5], [1, -1]) == (off_a, 1, 1)
    free = H.free_chunks(state[1], state[2])
    assert len(free) == 1 and free[0][1] == 4
    assert H.read_key(state[0], state[1], _find_row(state, 1), 0)[:, 0].tolist() == [4]
    _check_space(*state)


def test_a_full_chunk_takes_changes_that_need_no_room_in_place():
    """A block whose chunk is full changes in place when each change finds its entry
    (a new diff, or a cancellation that makes room for a new entry after it): no chunk
    is taken or freed. The first new entry without room sends the rest to a merge."""
    state = _new()
    off_a, _, _ = _put(state, 1, [5], [1])
    top = state[2][H.M_TOP]
    assert _put(state, 1, [5], [2]) == (off_a, 1, 1)                  # a new diff
    assert _put(state, 1, [5, 6], [-3, 1]) == (off_a, 1, 1)           # cancel, then add
    assert H.free_chunks(state[1], state[2]) == []
    assert state[2][H.M_TOP] == top
    assert H.read_key(state[0], state[1], _find_row(state, 1), 0)[:, [0, 2]].tolist() \
        == [[6, 1]]
    off_b, _, _ = _put(state, 2, [1, 3], [1, 1])
    assert H.bcap(state[0], _find_row(state, 2), 0) == 2
    # 1 changes in place, 2 finds no room: 2 and 3 go to a merge with [1, 3] through
    # a fresh chunk of four, and the result moves back to the chunk of two it left
    assert _put(state, 2, [1, 2, 3], [4, 1, -1]) == (off_b, 2, 2)
    assert [c for _, c in H.free_chunks(state[1], state[2])] == [4]
    assert H.read_key(state[0], state[1], _find_row(state, 2), 0)[:, [0, 2]].tolist() \
        == [[1, 5], [2, 1]]
    _check_space(*state)


def test_chunk_sizes_are_powers_of_two_and_from_12_on_three_times_one():
    """A block's chunk is its length rounded up to the next of 1, 2, 4, 8, 12, 16, 24,
    ...: past 8 entries less than 1.5 times its length (a node's 9 entries take 12,
    not 16)."""
    sizes = [int(H._size(c)) for c in range(H.N_CLASSES)]
    assert sizes[:12] == [1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128]
    assert sizes == sorted(set(sizes)) and sizes[-1] >= 2**46
    assert [int(H._cls(x)) for x in sizes] == list(range(H.N_CLASSES))
    for n in range(1, 3000):
        c = int(H._cap(n))
        assert c in sizes and c >= n and (2 * c < 3 * n if n > 8 else c < 2 * n)
        assert all(x < n for x in sizes if x < c)
    assert H._cap(0) == 0


def test_free_lists_are_scanned_up_to_a_bound_that_follows_them():
    """``meta[M_MAXC]`` bounds the classes with free chunks: it rises when a chunk is
    freed, falls when an allocation found nothing above its class, and a chunk freed
    after it fell is found again."""
    _, arena, meta = _new(entries=256)
    meta[H.M_TOP] = 200                     # (as if 200 entries had been taken)

    def free():
        f = sorted(H.free_chunks(arena, meta))
        assert sum(c for _, c in f) == meta[H.M_GARB]
        return f

    H._free(arena, meta, 0, 48)
    assert meta[H.M_MAXC] == H._cls(48)
    # 24 entries: the lower half of the free 48; the upper 24 go back
    assert H._alloc(arena, meta, 24) == 0 and free() == [(24, 24)]
    # 32: nothing free above 24, so it comes from the top and the bound falls
    assert H._alloc(arena, meta, 32) == 200 and meta[H.M_TOP] == 232
    assert meta[H.M_MAXC] == H._cls(32)
    H._free(arena, meta, 200, 32)
    assert meta[H.M_MAXC] == H._cls(32)
    # 2: no free 2; the smallest larger free chunk (24) is split into 2, 16, 4 and 2
    assert H._alloc(arena, meta, 2) == 24
    assert free() == [(26, 16), (42, 4), (46, 2), (200, 32)]
    # 32 again: the chunk freed after the bound fell is found
    assert H._alloc(arena, meta, 32) == 200 and meta[H.M_TOP] == 232
    assert free() == [(26, 16), (42, 4), (46, 2)]


def test_alloc_splits_a_larger_free_chunk_before_taking_the_top():
    state = _new()
    off_b, _, cap_b = _put(state, 2, list(range(8)), [1] * 8)
    assert cap_b == 8
    _put(state, 2, list(range(8)), [-1] * 8)
    before = H.free_chunks(state[1], state[2])
    assert (off_b, 8) in before and all(c >= 8 for _, c in before)
    top = state[2][H.M_TOP]
    assert _put(state, 3, [9], [1]) == (off_b, 1, 1)
    after = H.free_chunks(state[1], state[2])
    # (the rest, seven entries, goes back as the largest chunks that fit: 4, 2, 1)
    assert sorted(after) == sorted([c for c in before if c != (off_b, 8)]
                                   + [(off_b + 1, 4), (off_b + 5, 2), (off_b + 7, 1)])
    assert state[2][H.M_TOP] == top
    _check_space(*state)


@pytest.mark.parametrize("rows", [3, HUGE_BYTES // 32 + 1])
def test_alloc2d_below_and_above_the_numpy_threshold(rows):
    """Large state arrays come from NumPy (huge pages), small ones from Numba: both are
    C-contiguous int64 arrays of the shape asked for, zero-filled when asked."""
    z = alloc2d(rows, 4, True)
    e = alloc2d(rows, 4, False)
    for a in (z, e):
        assert a.shape == (rows, 4) and a.dtype == np.int64 and a.flags.c_contiguous
    assert not z.any()
    e[:] = 7
    z[-1, -1] = 1
    assert (e == 7).all() and z.sum() == 1
    if rows * 32 >= HUGE_BYTES:
        # NumPy's arrays are cut to start on a cache line (a 64-byte row in one line)
        assert z.ctypes.data % LINE_BYTES == 0 and e.ctypes.data % LINE_BYTES == 0


def test_a_grown_table_starts_on_a_cache_line():
    """A hashed state grown past the NumPy threshold keeps every 64-byte table row in
    one cache line, and its contents are intact."""
    tab, arena, meta = H.new_state(2, 1)
    n = HUGE_BYTES // 64 + 1000
    keys = np.arange(n, dtype=np.int64)
    dd = np.zeros((n, 4), np.int64)
    dd[:, 1] = 1
    dd[:, 2] = keys
    dd[:, 3] = 3 * keys
    tab, arena = H.insert_delta(tab, arena, meta, 1, 0, dd, n, 1, 1, 0, "x")
    assert tab.nbytes >= HUGE_BYTES and tab.shape[1] * 8 == LINE_BYTES
    assert tab.ctypes.data % LINE_BYTES == 0
    assert meta[H.M_ROWS] == n and meta[H.M_LIVE] == n
    rows = H.find_rows(tab, 1, keys[::997].reshape(-1, 1), 1)
    assert (rows >= 0).all()
    for k, r in zip(keys[::997], rows):
        assert H.read_key(tab, arena, r, 0).tolist() == [[3 * k, 0, 1]]


def _zero_rows(a):
    return ~a.any(axis=1)


def _inner_rows(a):
    """The rows of ``a`` lying wholly inside its aligned RELEASE_ALIGN units."""
    p = a.ctypes.data
    lo = -(-p // RELEASE_ALIGN) * RELEASE_ALIGN
    hi = (p + a.nbytes) // RELEASE_ALIGN * RELEASE_ALIGN
    rb = a.strides[0]
    return a[-(-(lo - p) // rb):(hi - p) // rb]


@pytest.mark.skipif(not RELEASES_PAGES, reason="madvise (Linux) only")
def test_release_rows_zeroes_whole_units_only():
    """Released rows read as zeros, in whole aligned units inside the array; rows from
    the end of the range on are kept, and consecutive ranges leave no gaps."""
    n, w = (24 << 20) // 24, 3          # 24 MiB, rows of 24 bytes (units split rows)
    a = np.arange(n * w, dtype=np.int64).reshape(n, w) + 1
    keep = a.copy()
    k1, k2 = n // 3, 2 * n // 3
    release_rows(a, 0, k1)
    release_rows(a, k1, k2)
    z = _zero_rows(a)
    rb = 8 * w
    base = a.ctypes.data
    first_unit = -(-base // RELEASE_ALIGN) * RELEASE_ALIGN
    last_end = (base + k2 * rb) // RELEASE_ALIGN * RELEASE_ALIGN
    lo = -(-(first_unit - base) // rb)           # first row wholly in a released unit
    hi = (last_end - base) // rb                 # rows before it are wholly released
    assert z[lo:hi].all()                        # no gap at k1
    assert not z[:max(0, (first_unit - base) // rb)].any()   # before the first unit
    assert not z[-(-(last_end - base) // rb):].any()          # after the last unit
    assert (a[k2:] == keep[k2:]).all()
    assert hi - lo >= k2 - 2 * RELEASE_ALIGN // rb


def test_move_rows_copies_every_row_and_releases_the_source():
    n, w = (20 << 20) // 16, 2
    rng = np.random.default_rng(3)
    src = rng.integers(1, 1 << 40, (n, w))
    want = src[: n - 5].copy()
    dst = np.zeros((n + 100, w), np.int64)
    H._move_rows(src, dst, n - 5, 70_001)
    assert (dst[: n - 5] == want).all() and not dst[n - 5:].any()
    if RELEASES_PAGES:
        assert _zero_rows(src).mean() > 0.8     # given back as it was copied


def test_sequential_leave_rows_in_parts_release_the_buffer():
    """A sequential loop's leave buffer ``(iteration, diff, data, t)`` becomes a batch
    ``(data, (t, iteration), diff)``; copied in parts, the buffer is given back as it
    goes (every whole unit inside the rows copied reads as zeros)."""
    from ddnumba.kernels.seqloop import leave_rows
    rng = np.random.default_rng(8)
    n, w = 900_000, 2
    buf = rng.integers(-1000, 1000, size=(1_000_000, w + 3))
    want = buf[:n].copy()
    for step in (10**9, 70_001):
        b = buf.copy()
        d, tt, f = leave_rows(b, n, w, step)
        assert (d == want[:, 2:2 + w]).all() and (f == want[:, 1]).all()
        assert (tt[:, 0] == want[:, 2 + w]).all() and (tt[:, 1] == want[:, 0]).all()
        if step < n and RELEASES_PAGES:
            inner = _inner_rows(b[:n])
            assert len(inner) > n // 2 and _zero_rows(inner[:-RELEASE_ALIGN // 40]).all()
            assert (b[n:] == buf[n:]).all()


def _leave_copy_model(prev, src, proj, sign, t):
    """What ``seqloop._leave_copy`` writes, row by row in Python: a row adds to the
    row before it when their data and time are equal and the sum fits in int64."""
    out = [list(r) for r in prev]
    for r in src:
        f = int(r[1]) * sign
        if not -2 ** 63 <= f < 2 ** 63:
            return None
        data = [int(r[2 + c]) for c in proj]
        if out and out[-1][-1] == t and out[-1][2:-1] == data:
            s = out[-1][1] + f
            if -2 ** 63 <= s < 2 ** 63:
                if s == 0:
                    out.pop()
                else:
                    out[-1][1] = s
                continue
        out.append([0, f] + data + [t])
    return out


@pytest.mark.parametrize("seed", range(40))
def test_sequential_leave_copy_sums_adjacent_rows(seed):
    """A sequential loop's leave sums each row into the one before it when their data
    and outer time are equal (the leave drops iterations), drops rows that sum to zero
    (also the last row of an earlier call), keeps rows whose sum would overflow, and
    reports a negation that overflows."""
    from ddnumba.kernels.seqloop import _leave_copy
    rng = np.random.default_rng(seed)
    w = int(rng.integers(1, 4))                     # the source's data width
    plen = int(rng.integers(1, w + 1))
    proj = rng.choice(w, plen, replace=seed % 3 == 0).astype(np.int64)
    allp = np.concatenate([rng.integers(0, w, 3), proj]).astype(np.int64)
    poff = 3
    sign = 1 if seed % 2 else -1
    t = int(rng.integers(0, 3))
    n = int(rng.integers(0, 30))
    src = np.zeros((n, 2 + w), np.int64)
    src[:, 0] = rng.integers(0, 5, n)               # iterations (dropped)
    big = seed % 4 == 1
    src[:, 1] = (rng.choice([-2 ** 62, 2 ** 62, -1], n) if big
                 else rng.choice([-2, -1, 1, 2], n))
    src[:, 2:] = rng.integers(0, 2, (n, w))         # few distinct values: many merges
    if seed % 5 == 2 and n:
        src[-1, 1] = -2 ** 63
    k0 = int(rng.integers(0, 3))
    prev = np.zeros((k0, plen + 3), np.int64)
    prev[:, 1] = rng.choice([-1, 1], k0)
    prev[:, 2:2 + plen] = rng.integers(0, 2, (k0, plen))
    prev[:, -1] = rng.integers(0, 3, k0)            # earlier times, or this one
    dst = np.full((k0 + n + 2, plen + 3), 77, np.int64)
    dst[:k0] = prev
    k = _leave_copy(src, n, dst, k0, allp, poff, plen, sign, t)
    want = _leave_copy_model(prev.tolist(), src.tolist(), proj.tolist(), sign, t)
    if want is None:
        assert k == -1
        return
    assert k == len(want)
    assert dst[:k].tolist() == want
    # per (data, time), the buffer sums to what went in (a merge never loses a diff)
    def sums(rows):
        acc = {}
        for r in rows:
            key = (tuple(r[2:-1]), r[-1])
            acc[key] = acc.get(key, 0) + r[1]
        return {key: v for key, v in acc.items() if v}
    src_rows = [[0, int(r[1]) * sign] + [int(r[2 + c]) for c in proj] + [t]
                for r in src.tolist()]
    assert sums(dst[:k].tolist()) == sums(prev.tolist() + src_rows)
    pd = src[:, 2:][:, proj]
    if not big and (pd[1:] == pd[:-1]).all(axis=1).any():
        assert k < k0 + n   # two rows alike follow each other: at least one merge


@pytest.mark.parametrize("seed", range(30))
def test_sequential_small_consolidation(seed):
    """A sequential loop's small deltas (``seqloop._isort_sum``: rows ``(iteration,
    diff, data)`` at one iteration) come out sorted by data, equal rows summed and
    zeros dropped, whether the buffer has rows past them or not; a sum leaving int64
    is reported."""
    from ddnumba.kernels.seqloop import _isort_sum
    rng = np.random.default_rng(seed)
    w = int(rng.integers(1, 4))
    n = int(rng.integers(0, 49))
    rows = np.zeros((n, w + 2), np.int64)
    rows[:, 0] = 7
    rows[:, 1] = rng.choice([-2, -1, 1, 2], n)
    rows[:, 2:] = rng.integers(-2, 3, (n, w))
    acc = {}
    for r in rows.tolist():
        acc[tuple(r[2:])] = acc.get(tuple(r[2:]), 0) + r[1]
    want = [[7, f] + list(k) for k, f in sorted(acc.items()) if f]
    for spare in (True, False):
        b = np.full((n + (3 if spare else 0), w + 2), -99, np.int64)
        b[:n] = rows
        k = _isort_sum(b, n, w)
        assert k == len(want)
        assert b[:k].tolist() == want
    # a sum leaving int64 is reported
    if n >= 2:
        b = np.zeros((n + 1, w + 2), np.int64)
        b[:, 1] = 2 ** 62
        assert _isort_sum(b, n, w) == -1


def test_rehash_in_parts_keeps_every_row():
    """A table rehashed part by part (releasing each part) finds every key."""
    tab, arena, meta = H.new_state(1, 0)
    keys = np.arange(1, 200_001) * 7919
    dd = np.zeros((len(keys), 3), np.int64)
    dd[:, 1] = 1
    dd[:, 2] = np.sort(keys)
    tab, arena = H.insert_delta(tab, arena, meta, 1, 0, dd, len(keys), 1, 0, 0, "x")
    assert tab.nbytes >= 8 * RELEASE_ALIGN
    old = tab
    new = H._rehash(old, 2 * old.shape[0], 10_007)
    if RELEASES_PAGES:
        inner = _inner_rows(old)
        assert len(inner) > old.shape[0] // 2 and _zero_rows(inner).all()
    rows = H.find_rows(new, 1, keys.reshape(-1, 1), 1)
    assert (rows >= 0).all() and len(np.unique(rows)) == len(keys)
    assert (new[:, 0] != 0).sum() == len(keys)
    got, ents = H.dump(new, arena, 1, 1, 0)
    assert sorted(int(k[0]) for k in got) == sorted(keys.tolist())
    # a delta of old and new keys into the large table (its kernels prefetch there)
    assert new.shape[0] >= H.PF_MIN_SLOTS
    more = np.unique(np.concatenate([keys[::3], np.arange(1, 30_001) * 7919 + 1]))
    dd = np.zeros((len(more), 3), np.int64)
    dd[:, 0] = 1
    dd[:, 1] = 2
    dd[:, 2] = more
    new, arena = H.insert_delta(new, arena, meta, 1, 0, dd, len(more), 1, 0, 1, "x")
    model = {(int(k), 0): 1 for k in keys}
    for k in more:
        model[(int(k), 1)] = 2
    got, ents = H.dump(new, arena, 1, 1, 0)
    assert {(int(k[0]), int(e[0])): int(e[1]) for k, e in zip(got, ents)} == model


@pytest.mark.parametrize("rows", [0, 1, 10, 11, 12, 13, 15, 16, 18, 19, 100, 5000, 2**20 + 1,
                                  5 * 2**29])
def test_table_capacity_is_the_least_on_its_grid(rows):
    """Capacities are 16 or more, a power of two or three times one, the least such
    with ``rows`` at most 5/8 of it: a growing table grows by 3/2 or 4/3."""
    grid = sorted({1 << e for e in range(4, 33)} | {3 << e for e in range(3, 32)})
    cap = int(H._table_cap(rows))
    assert cap in grid
    assert 8 * rows <= 5 * cap
    below = [c for c in grid if c < cap]
    assert not below or 8 * rows > 5 * below[-1]
    with pytest.raises(MemoryError):
        H._table_cap(2**32)
    # the root scope's tables (kernels.rootagg) fill to 3/4 on the same grid
    cap = int(H.grid_cap(rows, 3, 4))
    assert cap in grid and 4 * rows <= 3 * cap
    below = [c for c in grid if c < cap]
    assert not below or 4 * rows > 3 * below[-1]


def test_slot_scales_the_hash_into_any_capacity():
    """Home slots are in range and follow the hash's order (top bits scaled, so a
    rehash into any capacity reads and writes in the same order)."""
    rng = np.random.default_rng(3)
    hs = np.sort(np.concatenate([[0, 2**63 - 1], rng.integers(0, 2**63 - 1, 500)]))
    for cap in (16, 24, 3 << 20, 1 << 31, 3 << 30, 1 << 32):
        s = [int(H._slot(int(h), cap)) for h in hs]
        assert s[0] == 0 and s[-1] == cap - 1
        assert s == sorted(s) and max(s) < cap


def test_probing_wraps_around_the_end_of_the_table():
    """Keys whose home is the last slot of a 24-slot table (not a power of two) go on
    in slots 0, 1, 2: found, dumped and rehashed like any others."""
    tab, arena, meta = H.new_state(1, 0, rows=15)
    assert tab.shape[0] == 24
    cand = np.arange(1, 2000, dtype=np.int64).reshape(-1, 1)
    last = [int(cand[i, 0]) for i in range(len(cand))
            if H._slot(H._hash(cand, i, 0, 1, 1), 24) == 23][:4]
    assert len(last) == 4
    dd = np.zeros((4, 3), np.int64)
    dd[:, 1] = [1, 2, 3, 4]
    dd[:, 2] = sorted(last)
    tab, arena = H.insert_delta(tab, arena, meta, 1, 0, dd, 4, 1, 0, 0, "x")
    assert tab.shape[0] == 24
    assert sorted(int(tab[s, 1]) for s in (23, 0, 1, 2)) == sorted(last)
    keys = np.array(sorted(last), np.int64).reshape(-1, 1)
    rows = H.find_rows(tab, 1, keys, 1)
    assert sorted(rows.tolist()) == [0, 1, 2, 23]
    for tb in (tab, H._rehash(tab, 36, 36), H._rehash(tab, 16, 16)):
        got, ents = H.dump(tb, arena, 1, 1, 0)
        assert {int(k[0]): int(e[1]) for k, e in zip(got, ents)} == \
            dict(zip(sorted(last), [1, 2, 3, 4]))
        assert (H.find_rows(tb, 1, keys, 1) >= 0).all()


def test_hstate_overflow_raises():
    tab, arena, meta = H.new_state(1, 0)
    big = np.iinfo(np.int64).max
    dd = np.array([[0, big, 1]], np.int64)
    tab, arena = H.insert_delta(tab, arena, meta, 1, 0, dd, 1, 1, 0, 0, "msg")
    with pytest.raises(OverflowError, match="a count overflows"):
        H.insert_delta(tab, arena, meta, 1, 0, np.array([[0, 1, 1]], np.int64), 1, 1, 0,
                       0, "distinct: a count overflows int64")


# ------------------------------------------------------------------ inline rows


@njit(cache=True)
def _flat_step(tab, arena, meta, tag, dd, x, kw):
    """One row of ``dd`` (``(iteration, diff, key)``) into flat trace ``tag`` the way
    seqloop._reduce_keys's flat path adds it (room first, then the history, then
    the entry); returns ``(tab, arena, code, the history before it)``."""
    tab = H.ensure_rows(tab, meta, 1)
    r = H._find(tab, tag, dd, x, 2, kw)
    if r < 0:
        r = H._new_row(tab, meta, -1 - r, tag, dd, x, 2, kw)
    arena = H.ensure_entries(tab, arena, meta, H.flat_need(tab, r))
    off, ln = H.flat_history(tab, arena, meta, r)
    hist = arena[off:off + ln, -2:].copy()
    code = H.flat_add(tab, arena, meta, r, dd[x, 0], dd, x, 2 + kw, 0)
    return tab, arena, code, hist


def _fits_inline(h):
    """Whether a flat row's history ``{iteration: diff}`` is kept inline: one or two
    entries, or three whose last has an iteration below 2**30 and a diff in
    [-2**29, 2**29)."""
    if len(h) == 3:
        it, d = max(h.items())
        return 0 <= it < 2**30 and -2**29 <= d < 2**29
    return 1 <= len(h) <= 2


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), keys=st.sampled_from([1, 4, 60]),
       its=st.sampled_from([2, 3, 5]), gc_every=st.sampled_from([1, 9, 1000]),
       wide=st.booleans())
def test_flat_rows_inline_match_a_dictionary(seed, keys, its, gc_every, wide):
    """Entries added one at a time to a value-less reduce's own trace (seqloop's flat
    path) against a dictionary, next to an ordinary trace in the same table: a row of
    one to three entries holds them inline (the third packed into the length word when
    its iteration and diff fit, ``wide`` draws some that do not), a fourth moves them
    to an arena chunk, and the chunk is given up once it holds three or fewer that
    fit; cancelling entries empty the row; gc and compaction keep inline rows as they
    are. Every row's history as the flat path reads it is its entries so far, in
    iteration order."""
    rng = np.random.default_rng(seed)
    tab, arena, meta = H.new_state(1, 1)
    model = {}
    other = {}
    for step in range(400):
        if rng.random() < 0.1:       # an ordinary trace sharing the table (tag 3)
            k = int(rng.integers(0, keys))
            dd = np.array([[1, int(rng.integers(1, 3)), k, 7]], np.int64)
            tab, arena = H.insert_delta(tab, arena, meta, 3, 0, dd, 1, 1, 1, 1, "x")
            other[k] = other.get(k, 0) + int(dd[0, 1])
            continue
        k = int(rng.integers(0, keys))
        it = int(rng.integers(0, its))
        d = int(rng.choice([-2, -1, 1, 2]))
        if wide and rng.random() < 0.3:
            # iterations and diffs at and past the packed third entry's bounds
            it = int(rng.choice([it, 2**30 - 1, 2**30, 2**31 + it]))
            d = int(rng.choice([2**29 - 1, -2**29, 2**29, -2**29 - 1, 2**40, -2**40]))
        dd = np.array([[it, d, k]], np.int64)
        hist = sorted(model.get(k, {}).items())
        tab, arena, code, got = _flat_step(tab, arena, meta, 5, dd, 0, 1)
        assert code == 0
        assert [tuple(map(int, e)) for e in got] == hist
        h = model.setdefault(k, {})
        h[it] = h.get(it, 0) + d
        if h[it] == 0:
            del h[it]
        r = int(H.find_rows(tab, 5, np.array([[k]]), 1)[0])
        KW = tab.shape[1] - H.RW_EXTRA
        assert bool(tab[r, KW + 2] & H.INLINE) == _fits_inline(h)
        assert H.flat_len(tab, r) == len(h)
        if step % gc_every == gc_every - 1:
            tab, arena = H.gc(tab, arena, meta)
    for tb, ar in ((tab, arena), H.gc(tab, arena, meta)):
        keys_, ents = H.dump(tb, ar, 5, 1, 0)
        got = {}
        for kk, e in zip(keys_, ents):
            got.setdefault(int(kk[0]), {})[int(e[-2])] = int(e[-1])
            assert e[0] == 0 and e[-1] != 0
        assert got == {k: h for k, h in model.items() if h}
        live = sum(len(h) for h in model.values()) + sum(1 for v in other.values() if v)
        assert H.records(meta) == live
        KW = tb.shape[1] - H.RW_EXTRA
        empty = sum(1 for r in range(tb.shape[0]) if tb[r, 0]
                    and H.blen(tb, r, 0) == 0 and H.blen(tb, r, 1) == 0)
        assert meta[H.M_EMPTY] == empty
        assert all(H.blen(tb, r, 1) == 0 for r in range(tb.shape[0])
                   if tb[r, 0] == 5 and not tb[r, KW + 2] & H.INLINE)
        _check_space(tb, ar, meta)
    _, ents = H.dump(tab, arena, 3, 1, 0)
    assert sorted(int(e[-1]) for e in ents) == sorted(v for v in other.values() if v)


def _flat_row(diffs):
    """A flat trace whose key 4 holds ``diffs`` at iterations 0, 1, ...: ``(tab,
    arena, meta)``."""
    tab, arena, meta = H.new_state(1, 0)
    for it, d in enumerate(diffs):
        tab, arena, code, _ = _flat_step(tab, arena, meta, 1,
                                         np.array([[it, d, 4]], np.int64), 0, 1)
        assert code == 0
    return tab, arena, meta


def _flat_entries(tab, arena):
    """Key 4's entries ``[(iteration, diff)]`` and whether its row holds them inline."""
    r = int(H.find_rows(tab, 1, np.array([[4]]), 1)[0])
    KW = tab.shape[1] - H.RW_EXTRA
    return ([tuple(e) for e in H.read_key(tab, arena, r, 0)[:, -2:].tolist()],
            bool(tab[r, KW + 2] & H.INLINE))


def test_flat_row_overflow_is_reported_inline_and_in_a_chunk():
    """A diff sum leaving int64 is reported (OVERFLOW), not wrapped, whether the row
    holds its entries inline (a third one packed or not) or in an arena chunk, and
    the row is left as it was."""
    big = np.iinfo(np.int64).max
    for diffs, inline in (([big], True), ([big, big], True), ([big] * 3, False),
                          ([big] * 4, False), ([1, 1, 1], True), ([1, 1, big], False)):
        tab, arena, meta = _flat_row(diffs)
        before = _flat_entries(tab, arena)
        assert before == ([(i, d) for i, d in enumerate(diffs)], inline)
        last = len(diffs) - 1
        add = 1 if diffs[last] == big else big
        tab, arena, code, _ = _flat_step(tab, arena, meta, 1,
                                         np.array([[last, add, 4]], np.int64), 0, 1)
        assert code == H.OVERFLOW
        assert _flat_entries(tab, arena) == before


def test_flat_row_third_entry_outgrowing_its_packed_form_moves_to_a_chunk():
    """A packed third entry whose diff grows past 30 bits moves the row to a chunk
    (its value exact), and back inline once the diff fits again."""
    tab, arena, meta = _flat_row([1, 2, 2**29 - 1])
    assert _flat_entries(tab, arena) == ([(0, 1), (1, 2), (2, 2**29 - 1)], True)
    for add, want, inline in ((1, 2**29, False), (-2**29 - 5, -5, True),
                              (-2**29 + 5, -2**29, True), (-1, -2**29 - 1, False),
                              (2**29 + 1, 0, True)):
        tab, arena, code, _ = _flat_step(tab, arena, meta, 1,
                                         np.array([[2, add, 4]], np.int64), 0, 1)
        assert code == 0
        ents = [(0, 1), (1, 2)] + ([(2, want)] if want else [])
        assert _flat_entries(tab, arena) == (ents, inline)
        assert H.records(meta) == len(ents)
        _check_space(tab, arena, meta)

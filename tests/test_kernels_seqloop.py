"""Row kernels of the sequential loop (kernels/seqloop.py) against Python references:
the in-step consolidation of a round's rows."""
import numpy as np
import pytest

from ddnumba.kernels import seqloop as sl

I64 = np.iinfo(np.int64)


def ref_sum(rows, w):
    """Rows ``(iteration, diff, data[w])`` summed per data, sorted, zeros dropped."""
    acc = {}
    for r in rows:
        key = tuple(int(x) for x in r[2:2 + w])
        acc[key] = acc.get(key, 0) + int(r[1])
    return [(k, d) for k, d in sorted(acc.items()) if d != 0]


def as_pairs(rows, k, w):
    return [(tuple(int(x) for x in r[2:2 + w]), int(r[1])) for r in rows[:k]]


@pytest.mark.parametrize("w", [1, 2, 3])
@pytest.mark.parametrize("spare", [0, 1, 4])
def test_isort_sum_sorts_and_sums_like_the_reference(w, spare):
    """Random rows (few distinct keys or many, negative and extreme values, diffs that
    cancel), with no room after the data or some (holding garbage, which may be used
    as scratch): the rows come back sorted by data, summed, without zeros, at the
    same iteration."""
    rng = np.random.default_rng(1000 * w + spare)
    for trial in range(400):
        n = int(rng.integers(0, 49))
        hi = int(rng.choice([2, 4, 1000, 2 ** 40]))
        rows = np.full((n + spare, w + 2), 99, np.int64)
        rows[:n, 0] = 7
        rows[:n, 1] = rng.integers(-3, 4, n)
        rows[:n, 2:] = rng.integers(-hi, hi, (n, w))
        if n and trial % 5 == 0:
            rows[rng.integers(0, n), 2] = I64.min
            rows[rng.integers(0, n), 2 + w - 1] = I64.max
        if trial % 9 == 0:                   # already sorted, or sorted backwards
            order = np.lexsort(rows[:n, 2:][:, ::-1].T)
            rows[:n] = rows[:n][order[::-1] if trial % 2 else order]
        want = ref_sum(rows[:n], w)
        k = sl._isort_sum(rows, n, w)
        assert as_pairs(rows, k, w) == want
        assert (rows[:k, 0] == 7).all()


def test_isort_sum_reports_an_overflowing_sum():
    rows = np.array([[0, I64.max, 5], [0, 1, 3], [0, 1, 5], [0, 0, 0]], np.int64)
    assert sl._isort_sum(rows, 3, 1) == -1


@pytest.mark.parametrize("n", [0, 1, 30, 48, 49, 200])
def test_consolidate_in_place_either_side_of_the_insertion_sort(n):
    """``_consolidate`` sorts up to 48 rows in place and hands more to
    ``sort_consolidate``: the same answer either way."""
    rng = np.random.default_rng(n)
    rows = np.zeros((n, 4), np.int64)
    rows[:, 0] = 3
    rows[:, 1] = rng.integers(-2, 3, n)
    rows[:, 2:] = rng.integers(0, 6, (n, 2))
    want = ref_sum(rows, 2)
    k = sl._consolidate(rows, n, 2)
    assert as_pairs(rows, k, 2) == want
    assert (rows[:k, 0] == 3).all()


@pytest.mark.parametrize("big", [False, True])
def test_a_grown_buffer_keeps_its_rows_and_gives_the_old_one_back(big):
    """A buffer grown for more rows keeps its first ``keep`` rows; a large one is
    copied in parts, each given back once copied (its whole 2 MiB units then read as
    zeros), so that old and new are not both resident; a small one is left as it was."""
    from ddnumba.kernels.hstate import _move_step
    w = 4
    step = int(_move_step(np.empty((1 << 22, w), np.int64)))
    n = 2 * step + 12_345 if big else 1_000
    buf = np.arange(n * w, dtype=np.int64).reshape(n, w) + 1
    keep = n - 7
    out = sl._grown(buf, keep, n + 1)
    assert out.shape[0] >= n + 1 and out.shape[1] == w
    np.testing.assert_array_equal(out[:keep], (np.arange(keep * w) + 1).reshape(keep, w))
    zero = (buf == 0).mean()
    if big:
        assert zero >= 1 - 2 * 2**21 / buf.nbytes
    else:
        assert zero == 0
    assert np.shares_memory(sl._grown(out, keep, 5), out)    # room enough: the same


# ------------------------------------------------------------- a join's fused walk


def _sorted_delta(rows, it):
    """Rows ``(key, val) -> diff`` as a consolidated delta ``(it, diff, key, val)``
    sorted by key and val."""
    items = sorted((k, f) for k, f in rows.items() if f != 0)
    dd = np.zeros((len(items), 4), np.int64)
    for i, ((key, val), f) in enumerate(items):
        dd[i] = (it, f, key, val)
    return dd


def _trace_model(tab, arena, tag):
    from ddnumba.kernels import hstate as H
    keys, ents = H.dump(tab, arena, tag, 1, 0)
    return {(int(k[0]), int(e[0]), int(e[1])): int(e[2]) for k, e in zip(keys, ents)}


@pytest.mark.parametrize("rows, od_rows, seed",
                         [(16, 2, 1), (16, 2, 2), (200_000, 64, 3)])
def test_pairs_insert_pairs_then_inserts_each_key_and_resumes_after_a_request(
        rows, od_rows, seed):
    """``_pairs_insert`` (a join owning both traces, its left delta in one walk) gives
    the pairs of the delta with the right trace -- ``(max(j, iteration), product, key,
    left val, right val)`` in delta order -- and leaves the left trace holding the
    delta, as a dictionary model says. Started with a small table, arena and output
    it stops before a key group that lacks room (NEED_OUT, NEED_ROWS, NEED_ARENA),
    with nothing of the group done, and resumes there once the room is made. The
    200,000-row table is large enough for the walk's prefetching path."""
    from ddnumba.kernels import hstate as H
    rng = np.random.default_rng(seed)
    tl, tr, j = 1, 2, 3
    tab, arena, meta = H.new_state(1, 1, rows=rows, entries=16)
    right, left = {}, {}
    for it in range(3):
        rows_r = {}
        for k, v in zip(rng.integers(0, 300, 400), rng.integers(0, 50, 400)):
            rows_r[(int(k), int(v))] = rows_r.get((int(k), int(v)), 0) + 1
        rows_l = {(int(k), int(v)): int(f) for k, v, f in zip(
            rng.integers(150, 450, 300), rng.integers(0, 10, 300),
            rng.integers(1, 3, 300))}
        for tag, rws, model in ((tr, rows_r, right), (tl, rows_l, left)):
            dd = _sorted_delta(rws, it)
            tab, arena = H.insert_delta(tab, arena, meta, tag, 0, dd, len(dd), 1, 1, it,
                                        "x")
            for (k, v), f in rws.items():
                model[(k, v, it)] = model.get((k, v, it), 0) + f
    # the delta: keys in both traces, in one, in neither; diffs that cancel entries
    delta = {}
    for k, v, f in zip(rng.integers(0, 600, 900), rng.integers(0, 10, 900),
                       rng.choice([-2, -1, 1, 2], 900)):
        delta[(int(k), int(v))] = delta.get((int(k), int(v)), 0) + int(f)
    for (k, v, it), f in list(left.items())[:50]:
        if it == j:
            delta[(k, v)] = -f
    dd = _sorted_delta(delta, j)
    nd = len(dd)
    want = []
    for x in dd:
        k, v, f = int(x[2]), int(x[3]), int(x[1])
        for (rk, rv, it), g in sorted(right.items()):
            if rk == k:
                want.append((max(it, j), f * g, k, v, rv))
        left[(k, v, j)] = left.get((k, v, j), 0) + f
    left = {key: f for key, f in left.items() if f != 0}
    if rows == 16:
        arena = np.ascontiguousarray(arena[:meta[H.M_TOP]])   # no room at the top
    od = np.zeros((od_rows, 5), np.int64)
    pos = np.zeros(3, np.int64)
    o = 0
    asked = {sl.NEED_OUT: 0, sl.NEED_ROWS: 0, sl.NEED_ARENA: 0}
    while True:
        before = _trace_model(tab, arena, tl)
        r = int(sl._pairs_insert(tab, arena, meta, tr, tl, dd, nd, 1, 1, 1, j, od, o,
                                 pos))
        if r >= 0:
            o = r
            break
        assert r in asked, r
        asked[r] += 1
        # nothing of the group at pos[0] was done: its key's pairs are not written and
        # its key is not in the left trace as the delta leaves it
        o = int(pos[2])
        key = int(dd[pos[0], 2])
        assert o == sum(1 for w in want if w[2] < key)
        now = _trace_model(tab, arena, tl)
        assert {kk: f for kk, f in now.items() if kk[0] == key} == \
            {kk: f for kk, f in before.items() if kk[0] == key}
        if r == sl.NEED_OUT:
            big = np.zeros((o + max(int(pos[1]), od.shape[0]), 5), np.int64)
            big[:o] = od[:o]
            od = big
        elif r == sl.NEED_ROWS:
            tab = H.ensure_rows(tab, meta, nd - int(pos[0]))
        else:
            arena = H.ensure_entries(tab, arena, meta, int(pos[1]))
    got = [tuple(int(c) for c in od[i]) for i in range(o)]
    assert got == want
    assert _trace_model(tab, arena, tl) == left
    assert _trace_model(tab, arena, tr) == {kk: f for kk, f in right.items() if f}
    assert H.records(meta) == len(left) + len(right)
    if rows == 16:
        assert all(asked.values()), asked      # every request was met on the way
    else:
        assert H._pf_on(tab)

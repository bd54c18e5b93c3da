"""Arrangements: Batch, Spine (fuelled merges, compaction) and trace handles.

Everything is checked against a plain-Python reference: a dict {(key, val, time): diff}
of all inserted updates.
"""
from collections import defaultdict

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from ddnumba.trace import Batch, Spine
from ddnumba.kernels import lattice

I64 = np.int64


def random_updates(rng, n, kw, vw, dims, dom=4, tmax=5):
    data = rng.integers(0, dom, size=(n, kw + vw)).astype(I64)
    times = rng.integers(0, tmax, size=(n, dims)).astype(I64)
    diffs = rng.choice(np.array([-2, -1, 1, 1, 2], I64), size=n)
    return data, times, diffs


def ref_sum(parts):
    acc = defaultdict(int)
    for data, times, diffs in parts:
        for r, t, d in zip(map(tuple, data.tolist()), map(tuple, times.tolist()), diffs.tolist()):
            acc[(r, t)] += d
    return {k: v for k, v in acc.items() if v}


def as_dict(data, times, diffs):
    out = {}
    for r, t, d in zip(map(tuple, data.tolist()), map(tuple, times.tolist()), diffs.tolist()):
        assert (r, t) not in out, "not consolidated"
        out[(r, t)] = d
    return out


def ref_accumulate(ref, t):
    acc = defaultdict(int)
    for (r, s), d in ref.items():
        if all(a <= b for a, b in zip(s, t)):
            acc[r] += d
    return {r: c for r, c in acc.items() if c}


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**32), st.integers(0, 2), st.integers(0, 2), st.integers(1, 3),
       st.integers(0, 60))
def test_batch_from_updates_is_consolidated_trie(seed, kw, vw, dims, n):
    rng = np.random.default_rng(seed)
    data, times, diffs = random_updates(rng, n, kw, vw, dims)
    b = Batch.from_updates(data, times, diffs, kw=kw)
    b.check()
    assert as_dict(*b.flatten()) == ref_sum([(data, times, diffs)])
    assert len(b) == len(ref_sum([(data, times, diffs)]))


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**32), st.integers(1, 2), st.integers(1, 3), st.integers(1, 40))
def test_spine_contents_equal_sum_of_inserts(seed, kw, dims, nbatches):
    rng = np.random.default_rng(seed)
    vw = 1
    spine = Spine(kw, vw, dims, effort=1, eager_merge=0, small=0)  # merges in progress
    parts = []
    for _ in range(nbatches):
        u = random_updates(rng, int(rng.integers(0, 30)), kw, vw, dims)
        parts.append(u)
        spine.insert(Batch.from_updates(*u, kw=kw))
    for b in spine.batches():
        b.check()
    ref = ref_sum(parts)
    assert as_dict(*spine.updates()) == ref
    # gather: per-key history for some present and absent keys
    keys = np.unique(rng.integers(0, 6, size=(5, kw)), axis=0).astype(I64)
    h = spine.gather(keys)
    assert h.offs[0] == 0 and h.offs[-1] == len(h.diffs)
    for q, key in enumerate(map(tuple, keys.tolist())):
        got = as_dict(h.vals[h.offs[q]:h.offs[q + 1]], h.times[h.offs[q]:h.offs[q + 1]],
                      h.diffs[h.offs[q]:h.offs[q + 1]])
        want = {(r[kw:], t): d for (r, t), d in ref.items() if r[:kw] == key}
        assert got == want
    # accumulate at a few times
    for _ in range(3):
        t = tuple(rng.integers(0, 6, size=dims).tolist())
        data, counts = spine.accumulate(t)
        assert dict(zip(map(tuple, data.tolist()), counts.tolist())) == ref_accumulate(ref, t)


def test_spine_number_of_batches_is_logarithmic():
    rng = np.random.default_rng(1)
    spine = Spine(1, 1, 1, eager_merge=0, small=0)
    total = 0
    for i in range(2000):
        n = int(rng.integers(1, 20))
        data = rng.integers(0, 10**6, size=(n, 2)).astype(I64)
        spine.insert(Batch.from_updates(data, np.full((n, 1), i, I64), np.ones(n, I64), kw=1))
        total += n
        assert spine.num_batches <= 2 * (int(np.log2(total)) + 2)
    assert len(spine) == total


@pytest.mark.parametrize("dims", [1, 2])
def test_compaction_preserves_accumulations_in_the_future_of_the_frontier(dims):
    rng = np.random.default_rng(7)
    spine = Spine(1, 1, dims)
    handle = spine.handle()
    parts = []
    for i in range(60):
        u = random_updates(rng, 20, 1, 1, dims, tmax=8)
        parts.append(u)
        spine.insert(Batch.from_updates(*u, kw=1))
    frontier = np.array([[4] + [2] * (dims - 1)], I64) if dims > 1 else np.array([[4]], I64)
    if dims == 2:
        frontier = np.array([[2, 5], [5, 2]], I64)
    handle.set_frontier(frontier)
    spine.compact()
    ref = ref_sum(parts)
    # Every time in the future of the frontier sees the same collection.
    grid = np.stack(np.meshgrid(*[np.arange(10)] * dims), -1).reshape(-1, dims)
    fut = grid[lattice.in_future(np.ascontiguousarray(grid, dtype=I64), frontier)]
    for t in map(tuple, fut.tolist()):
        data, counts = spine.accumulate(t)
        assert dict(zip(map(tuple, data.tolist()), counts.tolist())) == ref_accumulate(ref, t)
    # And every stored time is already advanced (advance is idempotent on it), and
    # compaction collapsed indistinguishable times.
    _, times, _ = spine.updates()
    np.testing.assert_array_equal(lattice.advance(times, frontier), times)
    assert len(spine) < sum(len(p[2]) for p in parts)


def test_handles_lower_envelope_monotone_and_release():
    spine = Spine(1, 0, 2)
    h1 = spine.handle()
    h2 = spine.handle()
    h1.set_frontier([[3, 0]])
    h2.set_frontier([[0, 3]])
    assert sorted(map(tuple, spine.since.tolist())) == [(0, 3), (3, 0)]
    with pytest.raises(ValueError, match="backward"):
        h1.set_frontier([[1, 0]])
    h2.close()
    assert spine.since.tolist() == [[3, 0]]
    spine.insert(Batch.from_updates(np.array([[1]], I64), np.array([[4, 4]], I64),
                                    np.array([1], I64), kw=1))
    assert len(spine) == 1
    h1.close()
    assert len(spine) == 0            # no readers left: the trace is released


def test_sliding_window_state_stays_bounded():
    """100,000 distinct times: insert a row, retract the row inserted W times earlier,
    advance the frontier; the spine holds a small multiple of the live rows."""
    rng = np.random.default_rng(3)
    window, total_times, per_batch = 1000, 100_000, 100
    spine = Spine(1, 1, 1)
    handle = spine.handle()
    keys = rng.integers(0, 10**6, size=total_times + window).astype(I64)
    vals = rng.integers(0, 10**6, size=total_times + window).astype(I64)
    max_records = max_batches = 0
    for start in range(0, total_times, per_batch):
        t = np.arange(start, start + per_batch, dtype=I64)
        ins = np.stack([keys[t], vals[t]], 1)
        old = t[t >= window] - window
        rem = np.stack([keys[old], vals[old]], 1)
        data = np.concatenate([ins, rem])
        times = np.concatenate([t, t[t >= window]]).reshape(-1, 1)
        diffs = np.concatenate([np.ones(len(t), I64), -np.ones(len(old), I64)])
        spine.insert(Batch.from_updates(data, times, diffs, kw=1))
        handle.set_frontier([[start + per_batch]])
        max_records = max(max_records, len(spine))
        max_batches = max(max_batches, spine.num_batches)
    assert max_records <= 4 * window, max_records
    assert max_batches <= 2 * int(np.log2(total_times * 2)), max_batches
    # The live collection is exactly the last `window` rows.
    data, counts = spine.accumulate([total_times])
    live = {(int(keys[i]), int(vals[i])) for i in range(total_times - window, total_times)}
    assert set(map(tuple, data.tolist())) == live and (counts == 1).all()


def test_small_batches_keep_few_batches_and_exact_contents():
    rng = np.random.default_rng(11)
    spine = Spine(1, 1, 2, small=64)
    parts = []
    for i in range(300):
        u = random_updates(rng, int(rng.integers(1, 5)), 1, 1, 2, dom=50, tmax=50)
        parts.append(u)
        spine.insert(Batch.from_updates(*u, kw=1))
        small = [b for b in spine.batches() if len(b) <= 64]
        assert len(small) <= 1
    assert as_dict(*spine.updates()) == ref_sum(parts)

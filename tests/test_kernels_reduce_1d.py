"""The one-coordinate count/sum kernel agrees with the general path (differential test).

Two activations per case: the first builds an old output with the general kernels, the
second runs both paths over new updates (times after the first) and must produce the
same corrections. ``count_sum_1d_trie`` must also return those corrections with real
key columns and as a valid trie equal to the one ``build_trie`` makes from them.
"""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from ddnumba.kernels import consolidate, reduce as R, trie as T

I64 = np.int64


def _csr(keys_of_rows, K):
    offs = np.zeros(K + 1, I64)
    np.cumsum(np.bincount(keys_of_rows, minlength=K), out=offs[1:])
    return offs


def _general(seed_offs, seed_times, uo, uv, ut, ud, oo, ov, ot, od, logic):
    upper = np.empty((0, 1), I64)
    due_offs, due_times, _, _ = R.interesting_times(seed_offs, seed_times, uo, ut, upper)
    mo, av, ac = R.accumulate(due_offs, due_times, uo, uv, ut, ud)
    wo, wv, wc = logic(mo, av, ac)
    return R.corrections(due_offs, due_times, wo, wv, wc, oo, ov, ot, od)


def _sorted_updates(rng, K, n, tlo, thi, vdom):
    key = rng.integers(0, K, n)
    data = np.stack([key, rng.integers(0, vdom, n)], 1).astype(I64)
    times = rng.integers(tlo, thi, (n, 1)).astype(I64)
    diffs = rng.choice(np.array([-2, -1, 1, 1, 2], I64), n)
    return consolidate.consolidate(data, times, diffs)


def _case(rng, K, n_old, n_new, t_split, t_end, vdom, is_sum, extra_seeds):
    """Inputs of the second activation and the general path's corrections."""
    logic = (lambda o, v, c: R.logic_sum(o, v, c, 0)) if is_sum else R.logic_count
    old = _sorted_updates(rng, K, n_old, 0, t_split, vdom)
    new = _sorted_updates(rng, K, n_new, t_split, t_end, vdom)
    # Activation 1: old updates -> old output (general path).
    ko = old[0][:, 0]
    o_out = (np.zeros(K + 1, I64), np.empty((0, 1), I64), np.empty((0, 1), I64),
             np.empty(0, I64))
    if len(ko):
        so = _csr(ko, K)
        ck, cv, ct, cd = _general(so, old[1], so, old[0][:, 1:], old[1], old[2], *o_out,
                                  logic)
        o_out = (_csr(ck, K), cv, ct, cd)
    # Activation 2: old + new; seeds are the new times (unsorted within a key, with
    # repeats) plus, optionally, due times where nothing changed (as after compaction).
    allu = consolidate.consolidate(np.concatenate([old[0], new[0]]),
                                   np.concatenate([old[1], new[1]]),
                                   np.concatenate([old[2], new[2]]))
    uo = _csr(allu[0][:, 0], K)
    sk = new[0][:, 0]
    stimes = new[1]
    if extra_seeds:
        ek = rng.integers(0, K, extra_seeds)
        et = rng.integers(t_split, t_end, (extra_seeds, 1)).astype(I64)
        sk = np.concatenate([sk, ek])
        stimes = np.concatenate([stimes, et])
    order = np.argsort(sk, kind="stable")
    so = _csr(sk, K)
    seed_times = np.ascontiguousarray(stimes[order])
    args = (so, seed_times, uo, np.ascontiguousarray(allu[0][:, 1:]), allu[1], allu[2],
            o_out[0], o_out[1], o_out[3])
    want = _general(so, seed_times, uo, allu[0][:, 1:], allu[1], allu[2], *o_out, logic)
    return args, want


def _check_trie_form(args, want, is_sum, kw, rng):
    K = len(args[0]) - 1
    keys = np.unique(rng.integers(-50, 50, (K + 20, kw)), axis=0)[:K] if kw else \
        np.empty((K, 0), I64)
    if len(keys) < K:
        return
    got = R.count_sum_1d_trie(keys, *args, col=0, is_sum=is_sum)
    assert got is not None
    data, times, diffs, trie = got
    ck, cv, ct, cd = want
    np.testing.assert_array_equal(data[:, :kw], keys[ck])
    np.testing.assert_array_equal(data[:, kw:], cv)
    np.testing.assert_array_equal(times, ct)
    np.testing.assert_array_equal(diffs, cd)
    T.check_trie(trie)
    ref = T.build_trie(data, times, diffs, kw)
    for g, w in zip(trie, ref):
        np.testing.assert_array_equal(g, w)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32), st.booleans())
def test_count_sum_1d_matches_general_path(seed, is_sum):
    rng = np.random.default_rng(seed)
    K = int(rng.integers(1, 6))
    args, want = _case(rng, K, int(rng.integers(0, 15)), int(rng.integers(1, 15)), 3, 7,
                       4, is_sum, int(rng.integers(0, 4)))
    got = R.count_sum_1d(*args, col=0, is_sum=is_sum)
    assert got is not None
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    _check_trie_form(args, want, is_sum, int(rng.integers(0, 3)) if K == 1 else
                     int(rng.integers(1, 3)), rng)


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**32), st.booleans(), st.booleans())
def test_count_sum_1d_many_times_per_key(seed, is_sum, many_vals):
    # More than 32 due times per key (sort and slot search switch algorithms there),
    # long val runs or many distinct vals, and outputs that go up and down.
    rng = np.random.default_rng(seed)
    K = int(rng.integers(1, 4))
    args, want = _case(rng, K, int(rng.integers(0, 60)), int(rng.integers(40, 200)), 20,
                       400, 1000 if many_vals else 3, is_sum, int(rng.integers(0, 20)))
    got = R.count_sum_1d(*args, col=0, is_sum=is_sum)
    assert got is not None
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    _check_trie_form(args, want, is_sum, 1, rng)


def test_count_sum_1d_empty_and_single_time():
    # No seeds at all: nothing to emit, an empty trie.
    z = np.zeros(3, I64)
    e1 = np.empty((0, 1), I64)
    e = np.empty(0, I64)
    data, times, diffs, trie = R.count_sum_1d_trie(np.array([[1], [2]], I64), z, e1, z,
                                                   e1, e1, e, z, e1, e)
    assert data.shape == (0, 2) and times.shape == (0, 1) and diffs.shape == (0,)
    T.check_trie(trie)
    assert trie.n_keys == 0
    # All updates at one time: one row per key, whatever the seeds' repeats.
    uo = np.array([0, 3, 4], I64)
    uv = np.array([[5], [6], [7], [1]], I64)
    ut = np.zeros((4, 1), I64)
    ud = np.array([1, 2, -1, 3], I64)
    data, times, diffs, trie = R.count_sum_1d_trie(
        np.array([[10], [20]], I64), uo, ut, uo, uv, ut, ud, z, e1, e)
    np.testing.assert_array_equal(data, [[10, 2], [20, 3]])
    np.testing.assert_array_equal(times, [[0], [0]])
    np.testing.assert_array_equal(diffs, [1, 1])
    T.check_trie(trie)


def test_count_sum_1d_falls_back_and_detects_overflow():
    one = np.array([0, 1], I64)
    t = np.zeros((1, 1), I64)
    # An old output with two rows for the key is not a count/sum output: None.
    oo = np.array([0, 2], I64)
    ov = np.array([[1], [2]], I64)
    od = np.array([1, 1], I64)
    assert R.count_sum_1d(one, t, one, np.array([[4]], I64), t, np.array([1], I64),
                          oo, ov, od) is None
    # sum of 2**62 * 2 overflows int64.
    with pytest.raises(OverflowError):
        R.count_sum_1d(one, t, one, np.array([[2**62]], I64), t, np.array([2], I64),
                       np.zeros(2, I64), np.empty((0, 1), I64), np.empty(0, I64),
                       is_sum=True)

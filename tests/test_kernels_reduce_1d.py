"""The one-coordinate count/sum kernel agrees with the general path (differential test).

Two activations per case: the first builds an old output with the general kernels, the
second runs both paths over new updates (times after the first) and must produce the
same corrections.
"""
import numpy as np
from hypothesis import given, settings, strategies as st

from ddnumba.kernels import consolidate, reduce as R

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


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32), st.booleans())
def test_count_sum_1d_matches_general_path(seed, is_sum):
    rng = np.random.default_rng(seed)
    K = int(rng.integers(1, 6))
    logic = (lambda o, v, c: R.logic_sum(o, v, c, 0)) if is_sum else R.logic_count
    old = _sorted_updates(rng, K, int(rng.integers(0, 15)), 0, 3, 4)
    new = _sorted_updates(rng, K, int(rng.integers(1, 15)), 3, 7, 4)
    # Activation 1: old updates -> old output (general path).
    ko = old[0][:, 0]
    o_out = (np.zeros(K + 1, I64), np.empty((0, 1), I64), np.empty((0, 1), I64),
             np.empty(0, I64))
    if len(ko):
        so = _csr(ko, K)
        ck, cv, ct, cd = _general(so, old[1], so, old[0][:, 1:], old[1], old[2], *o_out,
                                  logic)
        o_out = (_csr(ck, K), cv, ct, cd)
    # Activation 2: both paths over old + new.
    allu = consolidate.consolidate(np.concatenate([old[0], new[0]]),
                                   np.concatenate([old[1], new[1]]),
                                   np.concatenate([old[2], new[2]]))
    uo = _csr(allu[0][:, 0], K)
    so = _csr(new[0][:, 0], K)
    got = R.count_sum_1d(so, new[1], uo, allu[0][:, 1:], allu[1], allu[2],
                         o_out[0], o_out[1], o_out[3], col=0, is_sum=is_sum)
    want = _general(so, new[1], uo, allu[0][:, 1:], allu[1], allu[2], *o_out, logic)
    assert got is not None
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)

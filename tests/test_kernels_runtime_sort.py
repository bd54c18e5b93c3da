"""Runtime helper kernels used by the native reduce: the natural merge sort of key
histories (concatenated sorted runs) and the per-key reduction of pending candidates."""
import numpy as np
import pytest

from ddnumba.kernels.runtime import _min_per_iteration, _sort_vt


def _runs(rng, n_runs, vw, max_len):
    """A concatenation of ``n_runs`` runs, each sorted by (vals, t)."""
    parts_v, parts_t = [], []
    for _ in range(n_runs):
        m = int(rng.integers(0, max_len + 1))
        v = rng.integers(0, 4, (m, vw))
        t = rng.integers(0, 50, m)
        order = np.lexsort((t,) + tuple(v[:, c] for c in range(vw - 1, -1, -1)))
        parts_v.append(v[order])
        parts_t.append(t[order])
    vals = np.concatenate(parts_v) if parts_v else np.zeros((0, vw), np.int64)
    ts = np.concatenate(parts_t) if parts_t else np.zeros(0, np.int64)
    if vw == 0:
        vals = np.zeros((ts.shape[0], 0))
    return vals.astype(np.int64), ts.astype(np.int64)


@pytest.mark.parametrize("vw", [0, 1, 2])
@pytest.mark.parametrize("seed", range(12))
def test_sort_vt_merges_runs_stably(vw, seed):
    rng = np.random.default_rng(seed)
    vals, ts = _runs(rng, int(rng.integers(1, 9)), vw, 40)
    pad = 3                                   # sort a sub-range: neighbours untouched
    n = ts.shape[0]
    V = np.full((n + 2 * pad, vw), -7, np.int64)
    T = np.full(n + 2 * pad, -7, np.int64)
    F = np.full(n + 2 * pad, -7, np.int64)
    V[pad:pad + n] = vals
    T[pad:pad + n] = ts
    F[pad:pad + n] = np.arange(n)             # diffs tag the original position
    width = max(vw, 2)                        # scratch may be wider than the values
    _sort_vt(V, T, F, pad, pad + n, np.empty(n + 1, np.int64),
             np.empty((n, width), np.int64), np.empty(n, np.int64), np.empty(n, np.int64))
    keys = (ts,) + tuple(vals[:, c] for c in range(vw - 1, -1, -1))
    expect = np.lexsort(keys)                 # stable: ties keep their input order
    np.testing.assert_array_equal(F[pad:pad + n], expect)
    np.testing.assert_array_equal(T[pad:pad + n], ts[expect])
    np.testing.assert_array_equal(V[pad:pad + n], vals[expect])
    assert (T[:pad] == -7).all() and (T[pad + n:] == -7).all()
    assert (V[:pad] == -7).all() and (V[pad + n:] == -7).all()


@pytest.mark.parametrize("seed", range(10))
def test_min_per_iteration_keeps_least_time_per_key_and_iteration(seed):
    rng = np.random.default_rng(seed)
    nk = int(rng.integers(1, 8))
    counts = rng.integers(0, 60, nk)
    offs = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    its = rng.integers(0, 6, offs[-1]).astype(np.int64)
    ts = rng.integers(0, 100, offs[-1]).astype(np.int64)
    c_it, c_t, c_end = its.copy(), ts.copy(), np.empty(nk, np.int64)
    total = _min_per_iteration(offs.copy(), c_it, c_t, c_end)
    got_total = 0
    for kk in range(nk):
        a, b = offs[kk], offs[kk + 1]
        expect = {}
        for i, t in zip(its[a:b], ts[a:b]):
            expect[int(i)] = min(expect.get(int(i), 1 << 62), int(t))
        got = list(zip(c_it[a:c_end[kk]].tolist(), c_t[a:c_end[kk]].tolist()))
        assert got == sorted(expect.items())
        got_total += len(got)
    assert total == got_total

"""The root scope's count/sum over trace batches large enough for a fence and a key
index, against NumPy at every time."""
import numpy as np
import pytest

import ddnumba as dd

from reference_reduce import count_and_sum_at


@pytest.mark.parametrize("seed", [11, 12])
def test_root_count_and_sum_over_indexed_trace_batches(seed):
    """The root scope's count/sum looks a run's touched values up in its trace batches;
    batches of >= 16k rows carry a fence and a key index (``batch.fence``), which
    small-oracle streams never reach. A 40k-row load, then runs that retract and add
    existing and new values, checked at every time against NumPy, with the capture
    compacted along the way."""
    rng = np.random.default_rng(seed)
    n = 40_000
    k0 = rng.integers(0, 50, n)
    v0 = rng.integers(0, 3_000, n)
    rows = [(int(k), int(v), 0, 1) for k, v in zip(k0, v0)]
    df = dd.Dataflow(engine="native")
    try:
        inp, c = df.new_input(["k", "v"])
        cnt = c.count().capture()
        sm = c.sum("v").capture()
        inp.insert(k0, v0, time=0)
        inp.advance_to(1)
        df.run()
        for t in range(1, 13):
            pick = rng.integers(0, len(rows), 40)
            ks = [rows[i][0] for i in pick] + list(rng.integers(0, 60, 10))
            vs = [rows[i][1] for i in pick] + list(rng.integers(0, 3_500, 10))
            ds = [-1] * 40 + [1] * 10
            inp.update(np.array(ks, np.int64), np.array(vs, np.int64), time=t,
                       diff=np.array(ds, np.int64))
            rows += [(int(k), int(v), t, d) for k, v, d in zip(ks, vs, ds)]
            inp.advance_to(t + 1)
            df.run()
            if t % 4 == 0:
                cnt.compact(t - 2)
                sm.compact(t - 2)
            for x in range(max(0, t - 2), t + 1):
                want_c, want_s = count_and_sum_at(rows, x)
                got_c = cnt.at(x)
                got_s = sm.at(x)
                assert dict(zip(got_c.column("k").to_pylist(),
                                got_c.column("count").to_pylist())) == want_c, (t, x)
                assert dict(zip(got_s.column("k").to_pylist(),
                                got_s.column(1).to_pylist())) == want_s, (t, x)
    finally:
        df.close()

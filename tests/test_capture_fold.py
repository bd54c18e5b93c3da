"""A capture fed many small runs keeps a short list of parts (``CaptureNode.add``
folds every ``FOLD_PARTS`` new parts into one) and still answers every time exactly."""
from collections import Counter

import numpy as np
import pytest

import ddnumba as dd
from ddnumba.operators.output import CaptureNode


def _stream(runs, seed):
    rng = np.random.default_rng(seed)
    ops = []        # (time, values, diffs)
    live = Counter()
    for t in range(runs):
        vals, diffs = [], []
        for _ in range(int(rng.integers(0, 3))):           # some runs have no output
            v = int(rng.integers(0, 9))
            if live[v] > 0 and rng.random() < 0.4:
                vals.append(v)
                diffs.append(-1)
                live[v] -= 1
            else:
                vals.append(v)
                diffs.append(1)
                live[v] += 1
        ops.append((t, vals, diffs))
    return ops


def _expected(ops, t):
    acc = Counter()
    for time, vals, diffs in ops:
        if time <= t:
            for v, d in zip(vals, diffs):
                acc[v] += d
    return {v: c for v, c in acc.items() if c}


@pytest.mark.parametrize("engine,workers", [("python", 1), ("native", 1), ("python", 2)])
def test_capture_folds_parts_and_stays_exact(monkeypatch, engine, workers):
    monkeypatch.setattr(CaptureNode, "FOLD_PARTS", 8)
    runs = 150
    ops = _stream(runs, seed=7 + workers)
    df = dd.Dataflow(engine=engine, workers=workers)
    try:
        inp, c = df.new_input(["x"])
        cap = c.map(lambda x: (x * 3,), names=["y"]).capture()
        node = cap._node
        most = 0
        for t, vals, diffs in ops:
            if vals:
                inp.update(np.array(vals, np.int64), time=t, diff=np.array(diffs, np.int64))
            inp.advance_to(t + 1)
            df.run()
            most = max(most, len(node.parts))
            if t == runs // 2:
                # reading consolidates the parts into one; later parts fold after it
                mid = cap.at(t)
                assert dict(zip(*[col.to_pylist() for col in mid.columns[:2]])) == \
                    {3 * v: n for v, n in _expected(ops, t).items()}
        with_output = sum(1 for _, vals, _ in ops if vals)
        assert with_output > 3 * CaptureNode.FOLD_PARTS
        # never more than a fold's worth of new parts beside the folded ones
        assert most <= CaptureNode.FOLD_PARTS + with_output // CaptureNode.FOLD_PARTS + 1
        assert most < with_output // 2
        for t in (0, 9, 40, runs // 2 + 1, runs - 1):
            got = cap.at(t)
            assert dict(zip(*[col.to_pylist() for col in got.columns[:2]])) == \
                {3 * v: n for v, n in _expected(ops, t).items()}, t
    finally:
        df.close()

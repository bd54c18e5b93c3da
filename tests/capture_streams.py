"""Random update streams for capture tests, and their oracle: ``count`` keyed by
``v % 3`` over one input column ``v`` (``tests/test_capture_compact.py``,
``tests/test_capture_read.py``)."""
from collections import Counter

import numpy as np


def stream(rng, times, n_ops, *, values=6):
    """Random updates ``(value, time, diff)`` of values ``0..values-1`` at times drawn
    from ``times``, with retractions."""
    ups = []
    for _ in range(n_ops):
        t = times[int(rng.integers(0, len(times)))]
        v = int(rng.integers(0, values))
        ups.append((v, t, int(rng.choice([-1, 1, 1, 2]))))
    return ups


def leq(s, t):
    return all(a <= b for a, b in zip(s, t))


def count_at(ups, t):
    """The oracle: ``count`` keyed by ``v % 3`` of the input accumulated at ``t`` (a
    key with some value of non-zero count has a row, even when the counts sum to 0)."""
    acc = Counter()
    for v, s, d in ups:
        if leq(s, t):
            acc[v] += d
    out = {}
    for v, c in acc.items():
        if c:
            out[v % 3] = out.get(v % 3, 0) + c
    return out


def build(df, **capture):
    """The program: input ``v``, output ``(k, count)`` with ``k = v % 3``, captured
    (``capture``: options of ``Collection.capture``)."""
    inp, c = df.new_input(["v"])
    cap = c.map(lambda v: (v % 3, v), names=["k", "v"]).count().capture(**capture)
    return inp, cap


def feed(inp, ups, first):
    """Insert the updates whose first time coordinate is ``first``."""
    sel = [(v, t, d) for v, t, d in ups if t[0] == first]
    if sel:
        inp.update(np.array([v for v, _, _ in sel], np.int64),
                   time=np.array([t for _, t, _ in sel], np.int64).reshape(len(sel), -1)
                   if len(sel[0][1]) > 1 else np.array([t[0] for _, t, _ in sel], np.int64),
                   diff=np.array([d for _, _, d in sel], np.int64))

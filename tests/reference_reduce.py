"""Brute-force references for the reduce kernels, in plain Python.

Times are tuples under the product order, vals are tuples, a *group* is a dict
``{val: count}`` with non-zero counts. Nothing here is clever or fast: every quantity is
recomputed from its definition (closures by fixpoint iteration, accumulations by scanning
every update), so the kernels can be checked against something that shares no code or
shortcut with them. Python integers do not overflow, so overflow is tested separately.
"""
from itertools import product


def join(a, b):
    return tuple(max(x, y) for x, y in zip(a, b))


def le(a, b):
    """Product order."""
    return all(x <= y for x, y in zip(a, b))


def in_future(t, upper):
    """True when ``t`` is in the future of the antichain ``upper`` (``[]``: never)."""
    return any(le(f, t) for f in upper)


def closure(seeds, hist):
    """Smallest set containing ``seeds`` closed under join with itself and ``hist``."""
    T = set(seeds)
    while True:
        new = {join(t, a) for t in T for a in T | set(hist)} - T
        if not new:
            return T
        T |= new


def ref_interesting_times(seeds, hist, upper):
    """``(due, pending)`` for one key, both sorted lists of time tuples.

    ``due`` is the full join closure of the seeds with the history restricted to times
    not in the future of ``upper``; ``pending`` the joins of a due time with a due or
    history time that are in the future.
    """
    if not seeds:
        return [], []
    due = sorted(c for c in closure(seeds, hist) if not in_future(c, upper))
    pend = {join(t, a) for t in due for a in list(due) + list(hist)}
    return due, sorted(p for p in pend if in_future(p, upper))


def accumulate_at(updates, t):
    """Group of the (val, time, diff) ``updates`` accumulated at time ``t``."""
    acc = {}
    for val, time, diff in updates:
        if le(time, t):
            acc[val] = acc.get(val, 0) + diff
    return {v: c for v, c in acc.items() if c != 0}


def ref_corrections(moments, old_out):
    """Corrections for one key: ``moments`` is a list of ``(time, want_group)`` in the
    order they are visited, ``old_out`` a list of (val, time, diff). Returns a sorted list
    of (val, time, diff)."""
    corr = []
    for t, want in moments:
        cur = accumulate_at(list(old_out) + corr, t)
        for v in sorted(set(want) | set(cur)):
            d = want.get(v, 0) - cur.get(v, 0)
            if d != 0:
                corr.append((v, t, d))
    return sorted(corr)


# Reduce logic on one non-empty group (dict val -> non-zero count) -> dict outval -> count.

def ref_count(group):
    return {(sum(group.values()),): 1}


def ref_sum(col):
    return lambda group: {(sum(v[col] * c for v, c in group.items()),): 1}


def ref_min(col):
    def f(group):
        pos = [v[col] for v, c in group.items() if c > 0]
        return {(min(pos),): 1} if pos else {}
    return f


def ref_max(col):
    def f(group):
        pos = [v[col] for v, c in group.items() if c > 0]
        return {(max(pos),): 1} if pos else {}
    return f


def ref_distinct(group):
    return {v: 1 for v, c in group.items() if c > 0}


def ref_top_k(k):
    def f(group):
        # Expand multiplicities, take the k smallest, count them again.
        bag = sorted(v for v, c in group.items() if c > 0 for _ in range(c))[:k]
        out = {}
        for v in bag:
            out[v] = out.get(v, 0) + 1
        return out
    return f


def ref_user(group):
    """Python twin of the test's Numba user logic: ``(val[0] % 3, 7)`` per positive row."""
    out = {}
    for v, c in group.items():
        if c > 0:
            key = (v[0] % 3, 7)
            out[key] = out.get(key, 0) + c
    return out


def apply_logic(logic, group):
    """The reduce convention: an empty group has an empty output, else ``logic(group)``
    with zero counts dropped."""
    if not group:
        return {}
    return {v: c for v, c in logic(group).items() if c != 0}


def grid(d, size):
    """Every time with ``d`` coordinates in ``range(size)``."""
    return list(product(range(size), repeat=d))


def oracle_mismatches(inputs, outputs, logic, times, keys):
    """Check the reduce invariant at every time in ``times``.

    ``inputs`` / ``outputs`` map key -> list of (val, time, diff). Returns the list of
    ``(key, time, expected, got)`` where the output accumulated at ``time`` differs from
    ``logic`` applied to the input accumulated at ``time``.
    """
    bad = []
    for key in keys:
        for g in times:
            expected = apply_logic(logic, accumulate_at(inputs.get(key, []), g))
            got = accumulate_at(outputs.get(key, []), g)
            if expected != got:
                bad.append((key, g, expected, got))
    return bad


def count_and_sum_at(rows, x):
    """Per key, the count and the sum of the value of the ``(key, value, time, diff)``
    rows accumulated at the 1-D time ``x`` (keys without a value present omitted)."""
    acc = {}
    for k, v, t, d in rows:
        if t <= x:
            acc[(k, v)] = acc.get((k, v), 0) + d
    cnt, tot = {}, {}
    for (k, v), m in acc.items():
        if m:
            cnt[k] = cnt.get(k, 0) + m
            tot[k] = tot.get(k, 0) + m * v
    return cnt, tot

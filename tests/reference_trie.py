"""Plain-Python references for the trie, merge, cursor and partition kernels.

Everything here works on Python tuples, dicts and lists, one row at a time, and shares
no code with the kernels: a collection of updates is a dict ``{(key, val, time): diff}``
with tuple components (Python ints, so sums never overflow here).
"""
import bisect

import numpy as np

from ddnumba.kernels.trie import Trie

I64_MIN = -(2**63)
I64_MAX = 2**63 - 1
MASK64 = 2**64 - 1


def _matrix(rows, width):
    """int64 array of shape (len(rows), width) from a list of tuples (width may be 0)."""
    a = np.array([list(r) for r in rows], dtype=np.int64)
    return a.reshape(len(rows), width)


def add_update(coll, key, val, time, diff):
    """Add one update to a dict collection, dropping entries that sum to zero."""
    k = (tuple(key), tuple(val), tuple(time))
    s = coll.get(k, 0) + diff
    if s == 0:
        coll.pop(k, None)
    else:
        coll[k] = s


def dict_to_flat(coll, kw, vw, d):
    """Sorted flat ``(data, times, diffs)`` arrays of a dict collection."""
    items = sorted(coll.items())
    data = _matrix([k + v for (k, v, _), _ in items], kw + vw)
    times = _matrix([t for (_, _, t), _ in items], d)
    diffs = np.array([x for _, x in items], dtype=np.int64)
    return data, times, diffs


def dict_to_trie(coll, kw, vw, d):
    """Build a Trie from a dict collection with Python loops (independent of build_trie)."""
    items = sorted((k, x) for k, x in coll.items() if x != 0)
    keys, key_offs, vals, val_offs, times, diffs = [], [0], [], [0], [], []
    for (key, val, time), x in items:
        if not keys or keys[-1] != key:
            if keys:
                key_offs.append(len(vals))
            keys.append(key)
            if vals:
                val_offs.append(len(times))
            vals.append(val)
        elif vals[-1] != val:
            val_offs.append(len(times))
            vals.append(val)
        times.append(time)
        diffs.append(x)
    if keys:
        key_offs.append(len(vals))
        val_offs.append(len(times))
    return Trie(
        _matrix(keys, kw),
        np.array(key_offs, dtype=np.int64),
        _matrix(vals, vw),
        np.array(val_offs, dtype=np.int64),
        _matrix(times, d),
        np.array(diffs, dtype=np.int64),
    )


def trie_to_dict(trie):
    """Walk a Trie with Python loops; repeated (key, val, time) are summed."""
    keys, key_offs, vals, val_offs, times, diffs = (np.asarray(x).tolist() for x in trie)
    coll = {}
    for i, key in enumerate(keys):
        for j in range(key_offs[i], key_offs[i + 1]):
            for u in range(val_offs[j], val_offs[j + 1]):
                add_update(coll, key, vals[j], times[u], diffs[u])
    return coll


def advance_time(t, frontier):
    """``meet over f in F of join(t, f)`` by the definition, on tuples."""
    result = None
    for f in frontier:
        j = tuple(max(a, b) for a, b in zip(t, f))
        result = j if result is None else tuple(min(a, b) for a, b in zip(result, j))
    return result


def merge_ref(a, b, frontier=None):
    """Sum of two dict collections, times advanced by ``frontier`` when given."""
    out = {}
    for coll in (a, b):
        for (key, val, time), x in coll.items():
            if frontier is not None:
                time = advance_time(time, frontier)
            add_update(out, key, val, time, x)
    return out


def antichain(points):
    """The minimal elements (product order) of a set of time tuples."""
    pts = sorted(set(points))
    return [p for p in pts if not any(q != p and all(x <= y for x, y in zip(q, p)) for q in pts)]


def key_ranges_ref(rows, queries):
    """``(lo, hi)`` lists by ``bisect`` on lists of tuples."""
    r = [tuple(x) for x in np.asarray(rows).tolist()]
    lo = [bisect.bisect_left(r, tuple(q)) for q in np.asarray(queries).tolist()]
    hi = [bisect.bisect_right(r, tuple(q)) for q in np.asarray(queries).tolist()]
    return lo, hi


def gather_ref(coll, query_keys):
    """List of ``(qidx, val, time, diff)`` for every query key's updates, in order."""
    out = []
    for qi, key in enumerate(query_keys):
        key = tuple(key)
        for (k, v, t), x in sorted(coll.items()):
            if k == key:
                out.append((qi, v, t, x))
    return out


def splitmix_row_hash(row):
    """The partition hash on Python ints, written from the formula, not the kernel."""
    h = 0
    for x in row:
        z = ((h ^ (x & MASK64)) + 0x9E3779B97F4A7C15) & MASK64
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        h = z ^ (z >> 31)
    return h


def scatter_ref(bucket, nbuckets):
    """Stable grouping of row indices by bucket: ``(perm, offs)`` as lists."""
    groups = [[] for _ in range(nbuckets)]
    for i, b in enumerate(bucket):
        groups[b].append(i)
    perm = [i for g in groups for i in g]
    offs = [0]
    for g in groups:
        offs.append(offs[-1] + len(g))
    return perm, offs

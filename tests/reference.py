"""Plain-Python references for the lattice, sort and consolidate kernels.

Everything here works on Python tuples of Python ints, one row at a time, straight
from the definitions, and shares no code with the kernels (sums are exact Python ints,
so they cannot overflow here). Other kernel families keep their references in their own
``reference_*.py`` modules.
"""
import numpy as np

I64_MIN = -(2**63)
I64_MAX = 2**63 - 1


def rows_of(a):
    """A 2-D int array as a list of tuples of Python ints."""
    a = np.asarray(a)
    if a.ndim == 1:
        a = a.reshape(-1, 1)
    return [tuple(int(x) for x in r) for r in a]


def matrix(rows, width):
    """int64 ``[len(rows), width]`` from a list of tuples (width may be 0)."""
    return np.array([list(r) for r in rows], dtype=np.int64).reshape(len(rows), width)


# --- lattice ----------------------------------------------------------------------

def le(s, t):
    """Product order on tuples."""
    return all(x <= y for x, y in zip(s, t))


def join(s, t):
    return tuple(max(x, y) for x, y in zip(s, t))


def meet(s, t):
    return tuple(min(x, y) for x, y in zip(s, t))


def meet_all(ts):
    out = ts[0]
    for t in ts[1:]:
        out = meet(out, t)
    return out


def antichain(ts):
    """Minimal elements, deduplicated, in lexicographic order (quadratic, by definition)."""
    distinct = set(ts)
    return sorted(t for t in distinct if not any(s != t and le(s, t) for s in distinct))


def in_future(t, frontier):
    return any(le(f, t) for f in frontier)


def advance(t, frontier):
    """``meet over f in F of join(t, f)``; the empty frontier leaves ``t`` alone."""
    if not frontier:
        return tuple(t)
    return meet_all([join(t, f) for f in frontier])


def frontier_less_equal(f1, f2):
    return all(in_future(t, f1) for t in f2)


# --- sort -------------------------------------------------------------------------

def argsort_rows(rows):
    """Stable lexicographic argsort of a list of tuples (Python's sort is stable)."""
    return sorted(range(len(rows)), key=lambda i: rows[i])


def is_sorted_rows(rows, strict=False):
    if strict:
        return all(rows[i] < rows[i + 1] for i in range(len(rows) - 1))
    return all(rows[i] <= rows[i + 1] for i in range(len(rows) - 1))


# --- consolidate ------------------------------------------------------------------

def consolidate(data_rows, time_rows, diffs):
    """Sorted list of ``(data, time, diff)`` with exact sums, zeros dropped.

    Raises ``OverflowError`` when some exact sum is outside int64.
    """
    acc = {}
    for d, t, x in zip(data_rows, time_rows, diffs):
        acc[(d, t)] = acc.get((d, t), 0) + int(x)
    out = []
    for (d, t), s in sorted(acc.items()):
        if not I64_MIN <= s <= I64_MAX:
            raise OverflowError("diff sum outside int64")
        if s != 0:
            out.append((d, t, s))
    return out


def is_consolidated(data_rows, time_rows, diffs):
    keys = list(zip(data_rows, time_rows))
    return all(keys[i] < keys[i + 1] for i in range(len(keys) - 1)) and \
        all(int(x) != 0 for x in diffs)

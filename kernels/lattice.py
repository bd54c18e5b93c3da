"""Times, the product partial order, antichains and frontier advance.

A *time* is an int64 vector of ``d >= 1`` coordinates; a batch of times is a matrix
``[n, d]``. Times are *partially* ordered by the product order: ``s <= t`` iff
``s[c] <= t[c]`` for every coordinate ``c``. Any two times have a least upper bound,
the *join* (coordinate-wise max), and a greatest lower bound, the *meet*
(coordinate-wise min). A *frontier* is an *antichain* (a set of mutually incomparable
times, stored deduplicated and sorted lexicographically as ``[k, d]``); a time ``t`` is
*in the future of* a frontier ``F`` when ``f <= t`` for some ``f`` in ``F``. The empty
frontier has no future: it is the frontier of a stream that is complete.

*Advancing* a time by a frontier, ``advance(t, F) = meet over f in F of join(t, f)``,
is how traces compact history: for every ``g`` in the future of ``F``, ``t <= g`` iff
``advance(t, F) <= g`` (so accumulations at such ``g`` do not change), and it is the
greatest time with that property, so it merges as many times as possible.

Lexicographic order on time rows is a linear extension of the product order (if
``s <= t`` then ``s`` sorts no later than ``t``), which ``antichain`` relies on.
"""
import numpy as np
from numba import njit

from .rows import row_cmp, row_eq, row_le
from .sort import argsort_rows, as_int64_rows

__all__ = [
    "less_equal",
    "join",
    "meet",
    "antichain",
    "in_future",
    "advance",
    "frontier_meet",
    "frontier_less_equal",
    "meet_all",
]

# Below this many rows `antichain` sorts inside its kernel (insertion sort) instead of
# paying the ~20 us of the general radix argsort's orchestration: frontiers are tiny
# and the runtime computes them on every step.
_SMALL_ANTICHAIN = 32


# ----------------------------------------------------------------------------------
# Kernels
# ----------------------------------------------------------------------------------

@njit(cache=True, nogil=True)
def _less_equal(a, b):
    """``out[i] = a[i] <= b[i]`` (product order); ``b`` with one row is broadcast."""
    n = a.shape[0]
    out = np.empty(n, np.bool_)
    one = b.shape[0] == 1
    for i in range(n):
        out[i] = row_le(a, i, b, 0 if one else i)
    return out


@njit(cache=True, nogil=True)
def _join_meet(a, b, want_max):
    """Coordinate-wise max (``want_max``) or min of ``a[i]`` and ``b[i]`` (or ``b[0]``)."""
    n, d = a.shape
    out = np.empty((n, d), np.int64)
    one = b.shape[0] == 1
    for i in range(n):
        j = 0 if one else i
        for c in range(d):
            x = a[i, c]
            y = b[j, c]
            if want_max:
                out[i, c] = x if x >= y else y
            else:
                out[i, c] = x if x <= y else y
    return out


@njit(cache=True, nogil=True)
def _minimal_sorted(times, order):
    """Indices (into ``times``) of the minimal elements, visiting rows in ``order``.

    Precondition: ``times[order]`` is lexicographically sorted. Because that order
    extends the product order, every element strictly below ``t`` is visited before
    ``t``; and if some earlier element is ``<= t`` then some *kept* element is too
    (transitivity), so checking ``t`` against the kept elements only is enough.
    Duplicates are adjacent and dropped.
    """
    n = order.shape[0]
    kept = np.empty(n, np.int64)
    k = 0
    for r in range(n):
        i = order[r]
        if r > 0 and row_eq(times, i, times, order[r - 1]):
            continue
        minimal = True
        for q in range(k):
            if row_le(times, kept[q], times, i):
                minimal = False
                break
        if minimal:
            kept[k] = i
            k += 1
    out = np.empty((k, times.shape[1]), np.int64)
    for q in range(k):
        for c in range(times.shape[1]):
            out[q, c] = times[kept[q], c]
    return out


@njit(cache=True, nogil=True)
def _antichain_small(times):
    """``antichain`` for a few rows: stable insertion sort of row indices, then filter."""
    n = times.shape[0]
    order = np.arange(n)
    for i in range(1, n):
        v = order[i]
        j = i - 1
        while j >= 0 and row_cmp(times, order[j], times, v) > 0:
            order[j + 1] = order[j]
            j -= 1
        order[j + 1] = v
    return _minimal_sorted(times, order)


@njit(cache=True, nogil=True)
def _in_future(times, frontier):
    """``out[i]`` = some row ``f`` of ``frontier`` has ``f <= times[i]``."""
    n = times.shape[0]
    out = np.zeros(n, np.bool_)
    for i in range(n):
        for f in range(frontier.shape[0]):
            if row_le(frontier, f, times, i):
                out[i] = True
                break
    return out


@njit(cache=True, nogil=True)
def _meet_all(times):
    """Coordinate-wise minimum of the rows of ``times`` (precondition: >= 1 row)."""
    n, d = times.shape
    out = times[0].copy()
    for i in range(1, n):
        for c in range(d):
            if times[i, c] < out[c]:
                out[c] = times[i, c]
    return out


@njit(cache=True, nogil=True)
def _advance(times, frontier):
    """``advance(t, F)`` for every row ``t`` (precondition: ``F`` non-empty).

    Per coordinate, ``min over f of max(t[c], f[c]) == max(t[c], min over f of f[c])``
    because ``max(t[c], .)`` is monotone; so the meet of the joins equals the join of
    ``t`` with the meet of ``F``, and costs O(d) per time instead of O(|F| d).
    """
    m = _meet_all(frontier)
    n, d = times.shape
    out = np.empty((n, d), np.int64)
    for i in range(n):
        for c in range(d):
            x = times[i, c]
            out[i, c] = x if x >= m[c] else m[c]
    return out


# ----------------------------------------------------------------------------------
# Normalisation
# ----------------------------------------------------------------------------------

def _times(x, name):
    """``x`` as int64 ``[n, d]`` with ``d >= 1``."""
    t = as_int64_rows(x, name)
    if t.shape[1] < 1:
        raise ValueError(f"{name}: times need at least one coordinate, got shape {t.shape}")
    return t


def _operand(x, name, n, d):
    """``x`` as ``[n, d]`` or ``[1, d]`` (a single time ``[d]`` is broadcast)."""
    arr = np.asarray(x)
    if arr.ndim == 1:
        arr = arr.reshape(1, -1)
    b = as_int64_rows(arr, name)
    if b.shape[1] != d:
        raise ValueError(f"{name}: expected {d} time coordinates, got shape {b.shape}")
    if b.shape[0] not in (1, n):
        raise ValueError(f"{name}: expected {n} rows or a single time, got shape {b.shape}")
    return b


def _frontier(x, name, d=None):
    """A frontier as ``[k, d]``; a single time ``[d]`` is one element and an empty 1-D
    array is the empty frontier (its ``d`` then comes from the other argument)."""
    arr = np.asarray(x)
    if arr.ndim == 1:
        if arr.size == 0:
            if d is None:
                raise ValueError(f"{name}: an empty 1-D frontier has no dimension; "
                                 "pass an array of shape [0, d]")
            return np.zeros((0, d), np.int64)
        arr = arr.reshape(1, -1)
    f = as_int64_rows(arr, name)
    if d is not None and f.shape[1] != d:
        raise ValueError(f"{name}: expected {d} time coordinates, got shape {f.shape}")
    if f.shape[1] < 1:
        raise ValueError(f"{name}: times need at least one coordinate, got shape {f.shape}")
    return f


def _two_frontiers(f1, f2):
    """Two frontiers of the same ``d`` (taken from whichever one is not an empty 1-D)."""
    if np.ndim(f1) == 1 and np.size(f1) == 0:
        b = _frontier(f2, "f2")
        return _frontier(f1, "f1", b.shape[1]), b
    a = _frontier(f1, "f1")
    return a, _frontier(f2, "f2", a.shape[1])


# ----------------------------------------------------------------------------------
# Public wrappers
# ----------------------------------------------------------------------------------

def less_equal(a, b):
    """Rowwise product order: ``out[i] = all(a[i] <= b[i])``.

    Parameters
    ----------
    a : array_like of int, shape [n, d]
    b : array_like of int, shape [n, d], [1, d] or [d] (one time, broadcast)

    Returns
    -------
    numpy.ndarray of bool, shape [n]
    """
    a = _times(a, "a")
    b = _operand(b, "b", a.shape[0], a.shape[1])
    return _less_equal(a, b)


def join(a, b):
    """Least upper bound, rowwise: coordinate-wise max of ``a[i]`` and ``b[i]``.

    ``a`` is ``[n, d]``; ``b`` is ``[n, d]`` or one time (``[d]`` / ``[1, d]``).
    Returns a fresh int64 ``[n, d]``.
    """
    a = _times(a, "a")
    b = _operand(b, "b", a.shape[0], a.shape[1])
    return _join_meet(a, b, True)


def meet(a, b):
    """Greatest lower bound, rowwise: coordinate-wise min of ``a[i]`` and ``b[i]``.

    Shapes as for :func:`join`. Returns a fresh int64 ``[n, d]``.
    """
    a = _times(a, "a")
    b = _operand(b, "b", a.shape[0], a.shape[1])
    return _join_meet(a, b, False)


def antichain(times):
    """The minimal elements of a set of times.

    Parameters
    ----------
    times : array_like of int, shape [n, d], d >= 1
        Any times, duplicates allowed.

    Returns
    -------
    numpy.ndarray
        int64 ``[k, d]``: the distinct times ``t`` such that no other input time is
        ``< t``, sorted lexicographically (the canonical form of a frontier). Every
        input time is ``>=`` some output row. Empty input gives ``[0, d]``.
    """
    t = _times(times, "times")
    if t.shape[0] <= _SMALL_ANTICHAIN:
        return _antichain_small(t)
    return _minimal_sorted(t, argsort_rows(t))


def in_future(times, frontier):
    """``out[i]`` is True when some frontier element ``f <= times[i]``.

    Parameters
    ----------
    times : array_like of int, shape [n, d]
    frontier : array_like of int, shape [k, d] (any set of times; an antichain is the
        usual case). ``[d]`` is a single element; ``k == 0`` (the empty frontier) gives
        all False.

    Returns
    -------
    numpy.ndarray of bool, shape [n]
    """
    t = _times(times, "times")
    f = _frontier(frontier, "frontier", t.shape[1])
    return _in_future(t, f)


def advance(times, frontier):
    """Advance times by a frontier: ``meet over f in F of join(t, f)`` for each row.

    Parameters
    ----------
    times : array_like of int, shape [n, d]
    frontier : array_like of int, shape [k, d] (or [d], one element)

    Returns
    -------
    numpy.ndarray
        Fresh int64 ``[n, d]``. For every ``g`` in the future of ``F``: ``t <= g`` iff
        ``advance(t, F) <= g``; ``advance(t, F) >= t``; times already in the future of
        ``F`` are unchanged; the result is the greatest time with these properties.
        The empty frontier leaves the times unchanged (a copy is returned).
    """
    t = _times(times, "times")
    f = _frontier(frontier, "frontier", t.shape[1])
    if f.shape[0] == 0:
        return t.copy()
    return _advance(t, f)


def frontier_meet(f1, f2):
    """Lower envelope of two frontiers: ``antichain(concat(f1, f2))``.

    A time is in the future of the result iff it is in the future of ``f1`` or of
    ``f2``. Either may be empty; both must have the same ``d``.
    """
    a, b = _two_frontiers(f1, f2)
    if a.shape[0] == 0:
        return antichain(b)
    if b.shape[0] == 0:
        return antichain(a)
    return antichain(np.concatenate([a, b]))


def frontier_less_equal(f1, f2):
    """True when ``f1 <= f2`` as frontiers: every element of ``f2`` is ``>=`` some
    element of ``f1`` (``f2`` lies in the future of ``f1``).

    The empty frontier is the greatest: ``frontier_less_equal(f, [])`` is True for any
    ``f``, and ``frontier_less_equal([], f2)`` is False unless ``f2`` is empty too.
    Used to check that frontiers never move backward.
    """
    a, b = _two_frontiers(f1, f2)
    return bool(_in_future(b, a).all())


def meet_all(times):
    """Coordinate-wise minimum of all rows: the meet of a set of times, int64 ``[d]``.

    Raises ``ValueError`` on empty input (the meet of nothing is the unrepresentable
    top element).
    """
    t = _times(times, "times")
    if t.shape[0] == 0:
        raise ValueError("meet_all: times is empty; the meet of no times is undefined")
    return _meet_all(t)

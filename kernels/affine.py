"""Maps that add columns or constants, and filters comparing such sums, in compiled
code (see :meth:`ddnumba.operators.linear.MapNode.affine` and
:meth:`~ddnumba.operators.linear.FilterNode.affine`, which trace them).

Such an operator is a list of int64 *words*: ``AFW`` words a column of its output, a
*term* each, then its *filters*: their number, then for each filter the number of its
groups, and for each group the number of its comparisons followed by them, each a
term, one of ``CMP_LT ... CMP_NE``, a term. A row passes a filter when every
comparison of some group holds for it (a predicate in disjunctive normal form); it is
kept when it passes every filter, and its output columns are the terms' values. A
filter whose comparisons hold a checked sum has its number of groups negated: every
checked sum of it is computed for each row that reaches it, before its comparisons,
as the traced predicate computes them over every row (an overflow stops the operator
however the comparisons would have gone). ddnumba.native also puts such a filter of
``t == t`` comparisons before a filter that follows a map's checked sums ``t``, so
that a row the filter drops still overflows where the map would have raised. A
term is ``(kind, a, b, k)``, ``a`` and ``b`` columns of the input row (-1: none):

* ``A_WRAP``: ``row[a] + row[b] + k``, wrapping as NumPy's int64 arithmetic does (a
  source column is ``(A_WRAP, c, -1, 0)``, a constant ``(A_WRAP, -1, -1, k)``);
* ``A_CHECKED``: ``row[a] + row[b]``, or ``row[a] + k`` when ``b`` is -1, an overflow
  when the sum leaves int64 (the map's own message is raised by ddnumba.native).

The sequential loops (:mod:`ddnumba.kernels.seqloop`) compose the maps and filters
on a route into one such list, over rows ``(iteration, diff, data...)``; the
round-wise runtime (:mod:`ddnumba.kernels.runtime`) runs one operator's list over a
batch (:func:`affine_batch`).
"""
import numpy as np
from numba import njit

from .rows import add_checked

A_WRAP = 0
A_CHECKED = 1
AFW = 4
CMP_LT, CMP_LE, CMP_GT, CMP_GE, CMP_EQ, CMP_NE = 0, 1, 2, 3, 4, 5   # (operators.linear)
#: the error of a checked sum (ddnumba.native raises the map's own message instead)
MAP_OVERFLOW = "map: a checked sum leaves int64"


@njit(cache=True, nogil=True, inline="always")
def term(words, w, src, r, c0):
    """The term at ``words[w:w + AFW]`` of row ``r`` of ``src``, whose data starts at
    column ``c0``: ``(value, overflowed)``."""
    a = words[w + 1]
    b = words[w + 2]
    if words[w] == A_WRAP:
        v = words[w + 3]
        if a >= 0:
            v += src[r, c0 + a]
        if b >= 0:
            v += src[r, c0 + b]
        return v, False
    return add_checked(src[r, c0 + a], src[r, c0 + b] if b >= 0 else words[w + 3])


@njit(cache=True, nogil=True, inline="always")
def holds(x, op, y):
    """Comparison ``op`` (CMP_LT ... CMP_NE) of ``x`` and ``y``."""
    if op == CMP_LT:
        return x < y
    if op == CMP_LE:
        return x <= y
    if op == CMP_GT:
        return x > y
    if op == CMP_GE:
        return x >= y
    if op == CMP_EQ:
        return x == y
    return x != y


CW = 2 * AFW + 1     # words of a comparison


@njit(cache=True, nogil=True, inline="always")
def _checks_overflow(words, w, ng, src, r, c0):
    """Whether a checked sum of the filter whose groups start at ``words[w]`` (``ng``
    of them) overflows for row ``r``."""
    for _ in range(ng):
        nc = words[w]
        w += 1
        for i in range(nc):
            for t in (w + i * CW, w + i * CW + AFW + 1):
                if words[t] == A_CHECKED:
                    _v, ov = term(words, t, src, r, c0)
                    if ov:
                        return True
        w += nc * CW
    return False


@njit(cache=True, nogil=True, inline="always")
def passes(words, pw, m, src, r, c0):
    """Whether row ``r`` passes the first ``m`` filters at ``words[pw + 1:]`` (in
    order, up to the first that fails; a group up to its first comparison that
    fails): 1 when it passes them all, 0 when one fails, -1 when a checked sum of a
    filter it reaches overflows."""
    w = pw + 1
    for _ in range(m):
        ng = words[w]
        w += 1
        if ng < 0:
            ng = -ng
            if _checks_overflow(words, w, ng, src, r, c0):
                return -1
        ok = False
        for _ in range(ng):
            nc = words[w]
            w += 1
            if not ok:
                ok = True
                for i in range(nc):
                    x, _ov = term(words, w + i * CW, src, r, c0)
                    y, _ov = term(words, w + i * CW + AFW + 1, src, r, c0)
                    if not holds(x, words[w + i * CW + AFW], y):
                        ok = False
                        break
            w += nc * CW
        if not ok:
            return 0
    return 1


@njit(cache=True, nogil=True)
def affine_batch(words, off, plen, data, times, diffs):
    """One operator (``plen`` output columns, its words at ``words[off:]``) over a
    batch: ``(data, times, diffs, ok)`` of the rows kept, ``ok`` False when a
    checked sum overflowed (of a filter or of an output column; the batch is then
    incomplete)."""
    n = data.shape[0]
    pw = off + AFW * plen
    npred = words[pw]
    keep = np.ones(n, np.bool_)
    k = n
    if npred > 0:
        k = 0
        for r in range(n):
            p = passes(words, pw, npred, data, r, 0)
            if p < 0:
                return (np.empty((0, plen), np.int64),
                        np.empty((0, times.shape[1]), np.int64), np.empty(0, np.int64),
                        False)
            keep[r] = p == 1
            k += keep[r]
    od = np.empty((k, plen), np.int64)
    ot = np.empty((k, times.shape[1]), np.int64)
    of = np.empty(k, np.int64)
    i = 0
    for r in range(n):
        if not keep[r]:
            continue
        for c in range(plen):
            v, ov = term(words, off + AFW * c, data, r, 0)
            if ov:
                return od, ot, of, False
            od[i, c] = v
        for c in range(times.shape[1]):
            ot[i, c] = times[r, c]
        of[i] = diffs[r]
        i += 1
    return od, ot, of, True

"""The sequential loop's two key walks run alone, for timing them apart from a run
(asv ``LoopWalks``, ``python -m ddnumba.bench walks``).

A reachability run spends most of its time in two kernels of
:mod:`ddnumba.kernels.seqloop`: the value-less ``distinct``'s walk over its delta
(:func:`~ddnumba.kernels.seqloop._reduce_keys`, one table row a key) and the loop join's
walk that pairs its left delta with the edges and adds it to its own trace
(:func:`~ddnumba.kernels.seqloop._pairs_insert`). The drivers here call them as a
round does, over a loop's hashed state, ``width`` rows a call, each group of rows
first added at iteration ``j`` and then taken away again at ``j``, so that the state
ends as it began and a timing can be repeated over the same state.
"""
import numpy as np
from numba import njit

from .reduce import L_DISTINCT
from .seqloop import DONE, _pairs_insert, _reduce_keys


@njit(cache=True, nogil=True, inline="always")
def _group(dd, src, g, m, w, j, sign):
    """``dd[:m]`` := rows ``(j, sign, src[g + r, :w])`` for ``r < m``."""
    for r in range(m):
        dd[r, 0] = j
        dd[r, 1] = sign
        for c in range(w):
            dd[r, 2 + c] = src[g + r, c]


@njit(cache=True, nogil=True)
def distinct_walks(tab, arena, meta, tag, kw, j, keys, width, cd):
    """Walk the keys ``keys[:, :kw]`` (keys of the value-less ``distinct`` whose own
    trace is ``tag``) through :func:`_reduce_keys` ``width`` rows a call: each group
    once with diff +1 at iteration ``j``, then once with -1. The arena needs a few free
    entries past its top (an inline row's history is copied there, and a key of three
    entries takes a chunk while it has four); ``cd`` takes a call's corrections
    (``2 + kw`` wide; a row writes at most one more than its key's entries). Returns
    ``(rows walked, corrections written)``."""
    n = keys.shape[0]
    dd = np.zeros((width, 2 + kw), np.int64)
    sk = np.zeros((1, 2 + kw), np.int64)
    scratch = np.zeros((1, 1), np.int64)
    sq = np.zeros((1, 2 + kw), np.int64)
    pos = np.zeros(2, np.int64)
    nc = np.zeros(1, np.int64)
    qc = np.zeros(3, np.int64)
    one = np.int64(1)
    zero = np.int64(0)
    logic = np.int64(L_DISTINCT)     # (a module constant would be a literal)
    rows = np.int64(0)
    corrections = np.int64(0)
    for g in range(0, n, width):
        m = min(width, n - g)
        for sign in (1, -1):
            _group(dd, keys, g, m, kw, j, sign)
            pos[:] = 0
            nc[0] = 0
            qc[:] = 0
            code = _reduce_keys(tab, arena, meta, tag, tag, one, kw, zero, zero, logic,
                                zero, j, dd, np.int64(m), sk, zero, pos, scratch, scratch,
                                scratch, cd, nc, sq, qc)
            if code != DONE:
                raise RuntimeError("distinct_walks: the walk stopped (room or overflow)")
            rows += m
            corrections += nc[0]
    return rows, corrections


@njit(cache=True, nogil=True)
def join_walks(tab, arena, meta, tag_r, tag_l, kw, dvw, ovw, j, rows, width, out):
    """Walk the left delta rows ``rows`` (``(key, vals)``: ``kw`` + ``dvw`` words, each
    group of ``width`` rows sorted by key) through :func:`_pairs_insert` with the
    right trace ``tag_r`` and the left trace ``tag_l``: each group once with diff +1
    at iteration ``j``, then once with -1. ``out`` takes a call's pairs (rows ``2 + kw
    + dvw + ovw`` wide). Returns ``(rows walked, pairs written)``."""
    n = rows.shape[0]
    w = kw + dvw
    dd = np.zeros((width, 2 + w), np.int64)
    pos = np.zeros(3, np.int64)
    walked = np.int64(0)
    pairs = np.int64(0)
    for g in range(0, n, width):
        m = min(width, n - g)
        for sign in (1, -1):
            _group(dd, rows, g, m, w, j, sign)
            pos[:] = 0
            o = _pairs_insert(tab, arena, meta, tag_r, tag_l, dd, np.int64(m), kw, dvw,
                              ovw, j, out, np.int64(0), pos)
            if o < 0:
                raise RuntimeError("join_walks: the walk stopped (room or overflow)")
            walked += m
            pairs += o
    return walked, pairs

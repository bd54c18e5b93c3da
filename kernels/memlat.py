"""Memory latency probes: what a random access costs on this machine, by working-set
size (``python -m ddnumba.bench memory``).

The hashed state's walks (:mod:`ddnumba.kernels.seqloop`) visit keys at random places
in a table and an arena. What one visit can cost is bounded below by the latency of a
load that depends on the one before it (a pointer chase) and, when many visits are in
flight at once, by the throughput of independent loads. Both kernels read one 8-byte
word per 64-byte line of an int64 array.
"""
import numpy as np
from numba import njit

__all__ = ["chase", "gather_sum", "cycle_links"]

LINE_WORDS = 8      # int64 words per 64-byte cache line


@njit(cache=True, nogil=True)
def cycle_links(a, order):
    """Link the lines of ``a`` (``a.shape[0] // LINE_WORDS`` of them) into one cycle in
    the order ``order`` (a permutation of the line numbers): the first word of line
    ``order[k]`` holds the word index of line ``order[k + 1]`` (the last points back to
    the first)."""
    n = order.shape[0]
    for k in range(n):
        a[order[k] * LINE_WORDS] = order[(k + 1) % n] * LINE_WORDS


@njit(cache=True, nogil=True)
def chase(a, start, steps):
    """Follow the links of :func:`cycle_links` ``steps`` times from word ``start``;
    returns the word reached. Each load's address is the previous load's value, so
    the loads cannot overlap: the time per step is the latency of one access."""
    p = start
    for _ in range(steps):
        p = a[p]
    return p


@njit(cache=True, nogil=True)
def gather_sum(a, idx):
    """The sum of ``a[idx[k]]``: loads whose addresses are known in advance, so the
    CPU keeps as many in flight as it can (their throughput, not their latency)."""
    s = np.int64(0)
    for k in range(idx.shape[0]):
        s += a[idx[k]]
    return s

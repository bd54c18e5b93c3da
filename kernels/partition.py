"""Partitioning rows among workers by a stable hash of their key columns.

Workers each own the keys whose *bucket* ``hash(key) % workers`` is their index, so the
hash must be the same function in every process, on every machine and in every run
(Python's ``hash`` is salted per process and so is unusable). We define it here:

* a column value ``x`` (int64, read as its 64-bit two's-complement pattern) is mixed
  into the running state ``h`` (starting at 0) by ``h = fmix((h ^ x) + GOLDEN)``,
* ``fmix(z)`` is splitmix64's finaliser: ``z ^= z >> 30; z *= 0xBF58476D1CE4E5B9;
  z ^= z >> 27; z *= 0x94D049BB133111EB; z ^= z >> 31`` (all mod 2**64),
* ``GOLDEN = 0x9E3779B97F4A7C15``.

For a single column this is exactly the splitmix64 output for state ``x``, whose
avalanche spreads consecutive integers evenly; chaining through the state makes the
column order matter. A row with no columns hashes to 0.

*Scattering* then groups rows by bucket with a stable counting sort, so each worker's
share is a contiguous slice in the original order.
"""
import numpy as np
from numba import njit

from .trie import _as_int64

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
# Shift counts as uint64 too: mixing uint64 with int64 in Numba promotes to float64.
_S30 = np.uint64(30)
_S27 = np.uint64(27)
_S31 = np.uint64(31)


@njit(cache=True, nogil=True, inline="always")
def _row_hash(cols, i):
    """Hash of row ``i`` of the uint64 matrix ``cols``."""
    h = np.uint64(0)
    for c in range(cols.shape[1]):
        z = (h ^ cols[i, c]) + _GOLDEN
        z = (z ^ (z >> _S30)) * _M1
        z = (z ^ (z >> _S27)) * _M2
        h = z ^ (z >> _S31)
    return h


@njit(cache=True, nogil=True)
def _hash_rows(cols, out):
    """``cols`` is the uint64 view of the int64 rows; writes one hash per row."""
    n = cols.shape[0]
    for i in range(n):
        out[i] = _row_hash(cols, i)


def hash_rows(cols) -> np.ndarray:
    """Stable 64-bit hash of each row (the formula is in the module docstring).

    Parameters
    ----------
    cols : int64[n, k]
        Rows to hash; ``k >= 0``.

    Returns
    -------
    uint64[n]
        Same values for the same rows in any process, machine or run.
    """
    cols = _as_int64(cols, "cols", 2)
    out = np.empty(cols.shape[0], np.uint64)
    # A view, not a conversion: the hash is defined on the two's-complement bits.
    _hash_rows(cols.view(np.uint64), out)
    return out


@njit(cache=True, nogil=True)
def _bucket_of(cols, workers, out):
    n = cols.shape[0]
    for i in range(n):
        out[i] = np.int64(_row_hash(cols, i) % workers)


def bucket_of(cols, workers) -> np.ndarray:
    """Bucket (worker index) of each row: ``hash_rows(cols) % workers``.

    Parameters
    ----------
    cols : int64[n, k]
    workers : int
        Number of buckets, ``>= 1``.

    Returns
    -------
    int64[n]
        Values in ``[0, workers)``.
    """
    workers = int(workers)
    if workers < 1:
        raise ValueError(f"bucket_of: workers must be >= 1, got {workers}")
    cols = _as_int64(cols, "cols", 2)
    out = np.empty(cols.shape[0], np.int64)
    # Fused with the hash so no uint64 temporary is materialised.
    _bucket_of(cols.view(np.uint64), np.uint64(workers), out)
    return out


@njit(cache=True, nogil=True)
def _scatter(bucket, nbuckets, perm, offs):
    """Stable counting sort by bucket; returns the first out-of-range row or -1."""
    n = bucket.shape[0]
    for b in range(nbuckets + 1):
        offs[b] = 0
    for i in range(n):
        b = bucket[i]
        if b < 0 or b >= nbuckets:
            return i
        offs[b + 1] += 1
    for b in range(nbuckets):
        offs[b + 1] += offs[b]
    # Fill cursors start at each bucket's offset; a copy keeps offs intact.
    fill = offs[:nbuckets].copy()
    for i in range(n):
        b = bucket[i]
        perm[fill[b]] = i
        fill[b] += 1
    return -1


def scatter(bucket, nbuckets) -> tuple:
    """Group row indices by bucket, keeping the original order within each bucket.

    Parameters
    ----------
    bucket : int64[n]
        Bucket of each row, ``0 <= bucket[i] < nbuckets``.
    nbuckets : int
        ``>= 1``.

    Returns
    -------
    perm : int64[n]
        Row indices; ``perm[offs[b]:offs[b + 1]]`` are the rows of bucket ``b`` in
        increasing order.
    offs : int64[nbuckets + 1]
        ``offs[0] == 0``, ``offs[nbuckets] == n``, non-decreasing.
    """
    nbuckets = int(nbuckets)
    if nbuckets < 1:
        raise ValueError(f"scatter: nbuckets must be >= 1, got {nbuckets}")
    bucket = _as_int64(bucket, "bucket", 1)
    perm = np.empty(bucket.shape[0], np.int64)
    offs = np.empty(nbuckets + 1, np.int64)
    bad = _scatter(bucket, nbuckets, perm, offs)
    if bad >= 0:
        raise ValueError(
            f"scatter: bucket[{bad}] = {bucket[bad]} is outside [0, {nbuckets})"
        )
    return perm, offs

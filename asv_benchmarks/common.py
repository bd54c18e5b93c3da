"""Shared, seeded and cached workload generators for the asv suites.

Data generation is outside every timed region; arrays are built once per process and
reused (first touch of fresh memory is slow on these VMs, so warm-up matters too).
"""
import functools
import time

import numpy as np

SEED = 20240601
SIZES = [10_000, 100_000, 1_000_000, 10_000_000]


@functools.lru_cache(maxsize=None)
def unsorted_updates(n, *, key_dom=1_000_000, val_dom=1_000_000, time_dom=100_000):
    """n updates with 1 key column, 1 value column, 1 time column, diffs +-1."""
    rng = np.random.default_rng(SEED)
    data = np.empty((n, 2), np.int64)
    data[:, 0] = rng.integers(0, key_dom, n)
    data[:, 1] = rng.integers(0, val_dom, n)
    times = rng.integers(0, time_dom, (n, 1)).astype(np.int64)
    diffs = rng.choice(np.array([-1, 1], np.int64), n)
    return data, times, diffs


@functools.lru_cache(maxsize=None)
def sorted_trie(n, seed):
    """A consolidated trie of about n updates (distinct random keys)."""
    from ddnumba.kernels import consolidate, trie
    rng = np.random.default_rng(seed)
    data = np.empty((n, 2), np.int64)
    data[:, 0] = rng.integers(0, 1 << 40, n)
    data[:, 1] = rng.integers(0, 1 << 20, n)
    times = rng.integers(0, 1000, (n, 1)).astype(np.int64)
    diffs = np.ones(n, np.int64)
    d, t, f = consolidate.consolidate(data, times, diffs)
    return trie.build_trie(d, t, f, 1)


def median_seconds(fn, repeat=5):
    """Median wall time of ``fn()`` over ``repeat`` runs (after one warm-up call)."""
    fn()
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return float(np.median(samples))


@functools.lru_cache(maxsize=None)
def memcpy_bytes_per_second(nbytes=256 * 1024 * 1024):
    """Measured memcpy bandwidth of this machine (bytes/s, median of 5)."""
    src = np.ones(nbytes // 8, np.int64)
    dst = np.empty_like(src)
    return nbytes / median_seconds(lambda: np.copyto(dst, src))

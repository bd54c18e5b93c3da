"""Shared, seeded and cached workload generators for the asv suites.

Data generation is outside every timed region; arrays are built once per process and
reused (first touch of fresh memory is slow on these VMs, so warm-up matters too).
"""
import functools
import os
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


def interleaved_ratio(ref, fn, repeat=7):
    """median time of ``ref()`` / median time of ``fn()``, calls alternating so that
    machine noise hits both (> 1: ``fn`` is faster); one warm-up call each."""
    ref()
    fn()
    a, b = [], []
    for _ in range(repeat):
        t0 = time.perf_counter()
        ref()
        a.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        fn()
        b.append(time.perf_counter() - t0)
    return float(np.median(a) / np.median(b))


@functools.lru_cache(maxsize=None)
def memcpy_bytes_per_second(nbytes=256 * 1024 * 1024):
    """Measured memcpy bandwidth of this machine (bytes/s, median of 5)."""
    src = np.ones(nbytes // 8, np.int64)
    dst = np.empty_like(src)
    return nbytes / median_seconds(lambda: np.copyto(dst, src))


# ------------------------------------------------------------ flat batches (kernels.batch)

I64_MIN = np.iinfo(np.int64).min


@functools.lru_cache(maxsize=None)
def flat_updates(n, layout="packed", seed=SEED):
    """n unsorted updates in the native runtime's flat layout: ``data[n, 2]`` (key, val),
    ``times[n, 2]`` (outer time, iteration) and diffs +-1, all C-contiguous int64.

    ``layout="packed"``: key, val < 2**20, time < 2**17, iteration < 8 (60 bits: the
    sort packs a row into one 64-bit word). ``"wide"``: keys < 2**40 (80 bits: two
    words, the multi-pass sort).
    """
    rng = np.random.default_rng(seed)
    data = np.empty((n, 2), np.int64)
    data[:, 0] = rng.integers(0, 1 << (40 if layout == "wide" else 20), n)
    data[:, 1] = rng.integers(0, 1 << 20, n)
    times = np.empty((n, 2), np.int64)
    times[:, 0] = rng.integers(0, 100_000, n)
    times[:, 1] = rng.integers(0, 8, n)
    diffs = rng.choice(np.array([-1, 1], np.int64), n)
    return data, times, diffs


@functools.lru_cache(maxsize=None)
def flat_batch(n, seed):
    """A consolidated flat batch built from n random updates whose rows repeat: keys
    < n/8, vals < 4, outer times < 1000, iteration 0, diffs +-1. Two such batches share
    many rows (the merge's equal-row path) and many times of a row become equal when
    compacted to ``since=500``."""
    from ddnumba.kernels import batch
    rng = np.random.default_rng(seed)
    data = np.empty((n, 2), np.int64)
    data[:, 0] = rng.integers(0, max(1, n // 8), n)
    data[:, 1] = rng.integers(0, 4, n)
    times = np.zeros((n, 2), np.int64)
    times[:, 0] = rng.integers(0, 1000, n)
    diffs = rng.choice(np.array([-1, 1], np.int64), n)
    return batch.sort_consolidate(data, times, diffs)


def batch_bytes(data):
    """Bytes of one update of a flat batch with ``data``'s width: data, 2 times, diff."""
    return (data.shape[1] + 3) * 8


# ------------------------------------------------------------------- reach suite limits

def _env_int(name):
    v = os.environ.get(name, "").strip()
    return int(float(v)) if v else None


# Optional caps for a quick look at the reachability suites (unset: everything runs).
# Configurations beyond them are skipped (asv shows n/a) and their shared preparation
# in setup_cache is not done, e.g. DDNUMBA_ASV_MAX_NODES=1000 DDNUMBA_ASV_MAX_CHANGES=1e4.
REACH_MAX_NODES = _env_int("DDNUMBA_ASV_MAX_NODES")
REACH_MAX_CHANGES = _env_int("DDNUMBA_ASV_MAX_CHANGES")


def reach_allowed(nodes=None, changes=None):
    """Whether a reachability configuration is within the caps above."""
    return not ((nodes is not None and REACH_MAX_NODES is not None
                 and nodes > REACH_MAX_NODES)
                or (changes is not None and REACH_MAX_CHANGES is not None
                    and changes > REACH_MAX_CHANGES))


def skip_unless_allowed(nodes=None, changes=None):
    """In a benchmark's setup: skip (NotImplementedError) a capped configuration."""
    if not reach_allowed(nodes, changes):
        raise NotImplementedError(
            f"skipped: beyond DDNUMBA_ASV_MAX_NODES={REACH_MAX_NODES} / "
            f"DDNUMBA_ASV_MAX_CHANGES={REACH_MAX_CHANGES}")

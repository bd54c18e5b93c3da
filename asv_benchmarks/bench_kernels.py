"""Kernel suites: rows/s for the storage-layer kernels at 1e4..1e7 rows, and each one's
throughput relative to the machine's memcpy bandwidth measured in the same run.

``time_*`` benchmarks are asv-timed; ``track_*`` benchmarks report rows/s and the ratio
"bytes the kernel streams per second / memcpy bytes per second" (1.0 = memcpy speed).
The ``Batch*`` suites cover :mod:`ddnumba.kernels.batch`, the flat batches of the native
runtime (sort_consolidate, merge with compaction, seek). Compile and import times are
in ``bench_compile``.
"""
import numpy as np
from numba import njit

from ddnumba.kernels import batch, consolidate, cursor, lattice, merge, partition, sort, \
    trie

from .common import I64_MIN, SIZES, batch_bytes, flat_batch, flat_updates, \
    interleaved_ratio, median_seconds, memcpy_bytes_per_second, sorted_trie, \
    unsorted_updates

BYTES_PER_UPDATE = 4 * 8  # key, val, time, diff


class Memcpy:
    """The reference: copy 256 MiB."""

    def setup(self):
        self.src = np.ones(32 * 1024 * 1024, np.int64)
        self.dst = np.empty_like(self.src)
        np.copyto(self.dst, self.src)

    def time_memcpy_256mib(self):
        np.copyto(self.dst, self.src)

    def track_memcpy_gib_per_s(self):
        return memcpy_bytes_per_second() / 2**30
    track_memcpy_gib_per_s.unit = "GiB/s"


class Consolidate:
    params = [SIZES]
    param_names = ["n"]
    timeout = 300

    def setup(self, n):
        self.data, self.times, self.diffs = unsorted_updates(n)
        consolidate.consolidate(self.data[:1000], self.times[:1000], self.diffs[:1000])

    def time_consolidate(self, n):
        consolidate.consolidate(self.data, self.times, self.diffs)

    def track_consolidate_rows_per_s(self, n):
        return n / median_seconds(lambda: consolidate.consolidate(
            self.data, self.times, self.diffs), repeat=3)
    track_consolidate_rows_per_s.unit = "rows/s"

    def track_consolidate_vs_memcpy(self, n):
        rate = self.track_consolidate_rows_per_s(n) * BYTES_PER_UPDATE
        return rate / memcpy_bytes_per_second()
    track_consolidate_vs_memcpy.unit = "fraction of memcpy"


class ArgsortRows:
    params = [SIZES, [1, 2, 3]]
    param_names = ["n", "columns"]
    timeout = 300

    def setup(self, n, columns):
        data, times, _ = unsorted_updates(n)
        self.cols = np.ascontiguousarray(np.concatenate([data, times], axis=1)[:, :columns])
        sort.argsort_rows(self.cols[:100])

    def time_argsort_rows(self, n, columns):
        sort.argsort_rows(self.cols)


class Merge:
    """Merge two sorted batches of n/2 updates each (n input updates in total)."""

    params = [SIZES]
    param_names = ["n"]
    timeout = 300

    def setup(self, n):
        self.a = sorted_trie(n // 2, 1)
        self.b = sorted_trie(n // 2, 2)
        merge.merge(sorted_trie(1000, 3), sorted_trie(1000, 4))
        self.frontier = np.array([[500]], np.int64)
        a, b = self.a, self.b
        nk = len(a.keys) + len(b.keys)
        nv = len(a.vals) + len(b.vals)
        nu = len(a.diffs) + len(b.diffs)
        self.out = trie.Trie(np.zeros((nk, a.keys.shape[1]), np.int64),
                             np.zeros(nk + 1, np.int64),
                             np.zeros((nv, a.vals.shape[1]), np.int64),
                             np.zeros(nv + 1, np.int64),
                             np.zeros((nu, a.times.shape[1]), np.int64),
                             np.zeros(nu, np.int64))
        merge.merge(self.a, self.b, out=self.out)

    def time_merge(self, n):
        merge.merge(self.a, self.b)

    def time_merge_reused_buffers(self, n):
        # Output buffers allocated (and touched) once: first touch of fresh memory is
        # slow on these VMs, so this is the kernel's own speed.
        merge.merge(self.a, self.b, out=self.out)

    def time_merge_compacting(self, n):
        merge.merge(self.a, self.b, self.frontier)

    def track_merge_rows_per_s(self, n):
        return n / median_seconds(lambda: merge.merge(self.a, self.b), repeat=3)
    track_merge_rows_per_s.unit = "rows/s"

    def track_merge_reused_buffers_rows_per_s(self, n):
        return n / median_seconds(lambda: merge.merge(self.a, self.b, out=self.out),
                                  repeat=3)
    track_merge_reused_buffers_rows_per_s.unit = "rows/s"

    def track_merge_vs_memcpy(self, n):
        return self.track_merge_rows_per_s(n) * BYTES_PER_UPDATE / memcpy_bytes_per_second()
    track_merge_vs_memcpy.unit = "fraction of memcpy"


class Cursor:
    """Look up n/10 sorted query keys in a trie of n updates and gather their histories."""

    params = [SIZES[:3]]
    param_names = ["n"]

    def setup(self, n):
        self.trie = sorted_trie(n, 5)
        rng = np.random.default_rng(6)
        pick = np.sort(rng.choice(len(self.trie.keys), max(1, n // 10), replace=False))
        self.queries = np.ascontiguousarray(self.trie.keys[pick])
        cursor.gather_keys(self.trie, self.queries[:10])

    def time_gather_keys(self, n):
        cursor.gather_keys(self.trie, self.queries)


class Lattice:
    params = [SIZES[:3], [1, 2, 3]]
    param_names = ["n", "dims"]

    def setup(self, n, dims):
        rng = np.random.default_rng(7)
        self.times = rng.integers(0, 1000, (n, dims)).astype(np.int64)
        self.frontier = lattice.antichain(rng.integers(0, 1000, (4, dims)).astype(np.int64))
        lattice.advance(self.times[:10], self.frontier)
        lattice.in_future(self.times[:10], self.frontier)

    def time_advance(self, n, dims):
        lattice.advance(self.times, self.frontier)

    def time_in_future(self, n, dims):
        lattice.in_future(self.times, self.frontier)


class Partition:
    params = [SIZES[:3]]
    param_names = ["n"]

    def setup(self, n):
        self.cols, _, _ = unsorted_updates(n)
        partition.hash_rows(self.cols[:10])
        self.buckets = partition.bucket_of(self.cols, 4)
        partition.scatter(self.buckets[:10], 4)

    def time_hash_rows(self, n):
        partition.hash_rows(self.cols)

    def time_scatter(self, n):
        partition.scatter(self.buckets, 4)


# --------------------------------------------------------- kernels.batch (native runtime)


class BatchSortConsolidate:
    """``batch.sort_consolidate`` of n unsorted updates (data, outer time, iteration).

    ``layout``: ``packed`` rows fit one 64-bit sort word (the single-pass path), ``wide``
    rows need two (a pass per word carrying the permutation). The result is allocated
    per call, as in the runtime.
    """

    params = [SIZES, ["packed", "wide"]]
    param_names = ["n", "layout"]
    timeout = 300

    def setup(self, n, layout):
        self.data, self.times, self.diffs = flat_updates(n, layout)
        small = flat_updates(1000, layout)
        batch.sort_consolidate(*small)                         # JIT warm-up
        d, t, f = batch.sort_consolidate(self.data, self.times, self.diffs)
        assert batch.is_flat(d, t, f)

    def time_sort_consolidate(self, n, layout):
        batch.sort_consolidate(self.data, self.times, self.diffs)

    def track_sort_consolidate_rows_per_s(self, n, layout):
        return n / median_seconds(lambda: batch.sort_consolidate(
            self.data, self.times, self.diffs), repeat=3)
    track_sort_consolidate_rows_per_s.unit = "rows/s"

    def track_sort_consolidate_vs_memcpy(self, n, layout):
        rate = self.track_sort_consolidate_rows_per_s(n, layout) * batch_bytes(self.data)
        return rate / memcpy_bytes_per_second()
    track_sort_consolidate_vs_memcpy.unit = "fraction of memcpy"


class BatchMerge:
    """``batch.merge`` of two consolidated flat batches built from n/2 updates each (n
    input updates in total; the batches share many rows). ``since=-2**63`` only merges;
    ``since=500`` also compacts: outer times below 500 advance to 500 and equal times of
    a row are summed (zeros dropped). The result is allocated per call, as in the
    runtime."""

    params = [SIZES]
    param_names = ["n"]
    timeout = 300

    def setup(self, n):
        self.a = flat_batch(n // 2, 1)
        self.b = flat_batch(n // 2, 2)
        self.rows = len(self.a[2]) + len(self.b[2])     # updates actually merged
        small_a, small_b = flat_batch(1000, 3), flat_batch(1000, 4)
        batch.merge(small_a, small_b, I64_MIN)                 # JIT warm-up
        out = batch.merge(self.a, self.b, I64_MIN)
        assert len(out[2]) <= self.rows and batch.is_flat(*out)
        out = batch.merge(self.a, self.b, 500)
        assert batch.is_flat(*out) and out[1][:, 0].min() >= 500

    def time_merge(self, n):
        batch.merge(self.a, self.b, I64_MIN)

    def time_merge_compacting(self, n):
        batch.merge(self.a, self.b, 500)

    def track_merge_rows_per_s(self, n):
        return self.rows / median_seconds(lambda: batch.merge(self.a, self.b, I64_MIN),
                                          repeat=3)
    track_merge_rows_per_s.unit = "rows/s"

    def track_merge_compacting_rows_per_s(self, n):
        return self.rows / median_seconds(lambda: batch.merge(self.a, self.b, 500),
                                          repeat=3)
    track_merge_compacting_rows_per_s.unit = "rows/s"

    def track_merge_vs_memcpy(self, n):
        rate = self.track_merge_rows_per_s(n) * batch_bytes(self.a[0])
        return rate / memcpy_bytes_per_second()
    track_merge_vs_memcpy.unit = "fraction of memcpy"



def trace_batch(n, seed, t_lo, t_hi):
    """A consolidated flat batch of n distinct rows with one update each (two key words
    from a space of 10n rows, outer times in [t_lo, t_hi)): the shape of a compacted
    trace's batches, whose rows rarely repeat."""
    rng = np.random.default_rng(seed)
    keys = rng.choice(10 * n, n, replace=False)
    data = np.ascontiguousarray(np.stack([keys // 1000, keys % 1000], 1), dtype=np.int64)
    times = np.zeros((n, 2), np.int64)
    times[:, 0] = rng.integers(t_lo, t_hi, n)
    return batch.sort_consolidate(data, times, np.ones(n, np.int64))


class BatchMergeTrace:
    """``batch.merge`` of spine-shaped batches: n rows of one update each merged with n/2
    (a root spine settles at ratio 2) or n/100 newer ones (an insert into a large
    batch), compacting the older batch's times to the newer's. Rows of one input with
    one update take ``merge``'s inline copy (twenty-second session)."""

    params = [SIZES[:3], [2, 100]]
    param_names = ["n", "ratio"]
    timeout = 300

    def setup(self, n, ratio):
        self.a = trace_batch(n, 5, 0, 1000)
        self.b = trace_batch(max(1, n // ratio), 6, 1000, 2000)
        self.rows = len(self.a[2]) + len(self.b[2])
        out = batch.merge(self.a, self.b, 1000)
        assert batch.is_flat(*out) and out[1][:, 0].min() >= 1000
        assert len(out[2]) <= self.rows

    def time_merge_compacting(self, n, ratio):
        batch.merge(self.a, self.b, 1000)

    def track_merge_compacting_rows_per_s(self, n, ratio):
        return self.rows / median_seconds(lambda: batch.merge(self.a, self.b, 1000),
                                          repeat=3)
    track_merge_compacting_rows_per_s.unit = "rows/s"

@njit(cache=True, nogil=True, inline="always")
def _key_end(data, a, keys, q):
    # The rows of a key follow its first row (one key column here).
    b = a
    while b < data.shape[0] and data[b, 0] == keys[q, 0]:
        b += 1
    return b


@njit(cache=True, nogil=True)
def _ranges_seek(data, keys, lo, hi):
    """Row range of every (sorted) query key with ``batch.seek``, each search galloping
    on from the previous key's end, as the runtime's joins walk a batch."""
    pos = np.int64(0)
    for q in range(keys.shape[0]):
        a = batch.seek(data, pos, keys, q, 1, False)
        pos = _key_end(data, a, keys, q)
        lo[q] = a
        hi[q] = pos


# Newer than batch.seek: batch.seek_fenced (a fence of every FENCE_STEP-th row guides the
# search) and batch.key_ranges (all queries searched in lock-step). A variant is skipped
# on versions without its kernel (the drivers compile lazily, so a missing attribute is
# never looked up there).
HAS_KERNEL = {"seek": True, "seek_fenced": hasattr(batch, "seek_fenced"),
              "key_ranges": hasattr(batch, "key_ranges"),
              "key_ranges_fence": hasattr(batch, "key_index")}


@njit(cache=True, nogil=True)
def _ranges_seek_fenced(data, fnc, keys, lo, hi):
    pos = np.int64(0)
    for q in range(keys.shape[0]):
        a = batch.seek_fenced(data, fnc, pos, keys, q, 1, False)
        pos = _key_end(data, a, keys, q)
        lo[q] = a
        hi[q] = pos


class BatchSeek:
    """The row range of each of many sorted, distinct query keys in a consolidated flat
    batch of about n updates (~n/8 keys, ~8 updates each): ``n * density`` draws, half
    from the batch's keys and half random, deduplicated (``density=1`` asks about nearly
    every key).

    ``kernel``: ``seek`` gallops on from the previous key's end; ``seek_fenced`` first
    searches the batch's fence; ``key_ranges`` searches all queries at once, through the
    batch's key index where it has one (``n >= batch.INDEX_MIN``), else in lock-step
    through the fence; ``key_ranges_fence`` the same with the key index stripped from
    the fence (lock-step through the fence: the comparison for the index). Fences are
    built once per batch, outside the timing (as the runtime keeps them); every kernel
    yields each key's first and end row. The reference is
    ``np.searchsorted`` of the queries in the key column, ``"left"`` and ``"right"`` (a
    binary search per query and side): ``track_seek_vs_searchsorted`` > 1 means the
    kernel is faster.
    """

    params = [SIZES, [0.001, 0.1, 1.0], ["seek", "seek_fenced", "key_ranges",
                                         "key_ranges_fence"]]
    param_names = ["n", "density", "kernel"]
    timeout = 300

    def setup(self, n, density, kernel):
        if not HAS_KERNEL[kernel]:
            raise NotImplementedError(f"batch.{kernel} is not in this version")
        data, self.col, keys = _seek_case(n, density)
        self.keys = keys
        lo = np.empty(len(keys), np.int64)
        hi = np.empty(len(keys), np.int64)
        if kernel == "seek":
            self.seek = lambda: _ranges_seek(data, keys, lo, hi)
        elif kernel == "seek_fenced":
            fnc = batch.fence(data)
            self.seek = lambda: _ranges_seek_fenced(data, fnc, keys, lo, hi)
        else:
            fnc = batch.fence(data)
            if kernel == "key_ranges_fence":
                fnc = fnc[:batch.fence_rows(len(data), fnc)].copy()
            qrows = np.arange(len(keys))
            self.seek = lambda: batch.key_ranges(data, fnc, keys, qrows, 1, lo, hi)
        self.seek()                                               # JIT warm-up
        assert np.array_equal(lo, np.searchsorted(self.col, keys[:, 0], "left"))
        assert np.array_equal(hi, np.searchsorted(self.col, keys[:, 0], "right"))

    def time_seek(self, n, density, kernel):
        self.seek()

    def track_seek_queries_per_s(self, n, density, kernel):
        return len(self.keys) / median_seconds(self.seek, repeat=5)
    track_seek_queries_per_s.unit = "queries/s"

    def track_seek_vs_searchsorted(self, n, density, kernel):
        col, keys = self.col, np.ascontiguousarray(self.keys[:, 0])
        return interleaved_ratio(lambda: (np.searchsorted(col, keys, "left"),
                                          np.searchsorted(col, keys, "right")), self.seek)
    track_seek_vs_searchsorted.unit = "x searchsorted"


def _seek_case(n, density):
    """The batch's data, its key column, and the sorted distinct queries ``[q, 1]``."""
    data = flat_batch(n, 5)[0]
    col = np.ascontiguousarray(data[:, 0])
    rng = np.random.default_rng(6)
    q = max(1, int(n * density))
    present = data[rng.integers(0, len(data), q - q // 2), 0]
    absent = rng.integers(0, max(1, n // 8) + 1, q // 2)
    keys = np.ascontiguousarray(np.unique(np.concatenate([present, absent])).reshape(-1, 1))
    return data, col, keys


class SearchsortedReference:
    """``np.searchsorted`` (both sides) of the ``BatchSeek`` queries in the key column."""

    params = [SIZES, [0.001, 0.1, 1.0]]
    param_names = ["n", "density"]
    timeout = 300

    def setup(self, n, density):
        _, self.col, keys = _seek_case(n, density)
        self.keys = np.ascontiguousarray(keys[:, 0])

    def time_searchsorted(self, n, density):
        np.searchsorted(self.col, self.keys, "left")
        np.searchsorted(self.col, self.keys, "right")

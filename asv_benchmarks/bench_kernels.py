"""Kernel suites: rows/s for the storage-layer kernels at 1e4..1e7 rows, and each one's
throughput relative to the machine's memcpy bandwidth measured in the same run.

``time_*`` benchmarks are asv-timed; ``track_*`` benchmarks report rows/s and the ratio
"bytes the kernel streams per second / memcpy bytes per second" (1.0 = memcpy speed).
"""
import numpy as np

from ddnumba.kernels import consolidate, cursor, lattice, merge, partition, sort, trie

from .common import SIZES, median_seconds, memcpy_bytes_per_second, sorted_trie, \
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


class Compile:
    """Import time of the package (kernels load from Numba's cache)."""

    def timeraw_import_ddnumba(self):
        return "import ddnumba"

    def timeraw_compile_consolidate_uncached(self):
        # A fresh Numba cache directory: this measures compiling the kernels involved.
        return """
import os, tempfile
os.environ["NUMBA_CACHE_DIR"] = tempfile.mkdtemp()
import numpy as np
from ddnumba.kernels import consolidate
consolidate.consolidate(np.zeros((3, 2), np.int64), np.zeros((3, 1), np.int64),
                        np.ones(3, np.int64))
"""
    timeraw_compile_consolidate_uncached.timeout = 300

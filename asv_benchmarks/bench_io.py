"""I/O suites: costs of a long stream of runs written out as Parquet.

``ddnumba run`` (and ``write_changes(out, dir, new=True)``) appends one part file per
run, and decodes each run's string codes: a write into a directory that already holds
thousands of parts, and a decode after new strings arrive in an interner holding
hundreds of thousands, should cost what the new data costs, not what came before
(thirty-seventh session: 2.874 -> 0.265 ms a write at 3,000 parts; 5.97 -> 0.17 ms a
run's intern and decode at 2.2M values).
"""
import shutil
import tempfile

import numpy as np
import pyarrow as pa

from ddnumba.io.encoding import Interner
from ddnumba.io.parquet import write_changes


class PartWrites:
    """One one-row part file written into a directory already holding ``parts``."""
    params = [10, 3_000]
    param_names = ["parts"]
    timeout = 300

    def setup(self, parts):
        self.dir = tempfile.mkdtemp(prefix="ddnumba-asv-parts-")
        self.table = pa.table({"a": [1], "time": [0], "diff": [1]})
        for _ in range(parts):
            write_changes(self.table, self.dir)

    def teardown(self, parts):
        shutil.rmtree(self.dir, ignore_errors=True)

    def time_write_one_part(self, parts):
        # (the parts written by the timing repeats stay: removing one would change
        # the directory, which makes the next write list it, as it should)
        write_changes(self.table, self.dir)


class InternerGrowth:
    """A run's 20 new strings interned and their codes decoded, with ``held`` values
    interned before (in runs of 20, as a stream interns them)."""
    params = [1_000, 200_000]
    param_names = ["held"]
    timeout = 300

    def setup(self, held):
        self.it = Interner()
        for r in range(0, held, 20):
            self.it.intern(pa.array([f"s{r + i:09d}" for i in range(20)]))
        self.it.lookup(np.arange(20))
        self.next = held

    def time_intern_and_decode(self, held):
        new = pa.array([f"n{self.next + i:09d}" for i in range(20)])
        self.next += 20
        self.it.lookup(self.it.intern(new))


class InternerThroughput:
    """A batch of 1M string rows drawn from ``distinct`` values, every one of them
    already interned (a stream's later batches), then the same values interned new
    (a load). Forty-first session, one process, the compiled interner
    (kernels.intern) against the Python dictionary it replaced: 2M new strings 5.0 ->
    0.81 s, 1M known rows of high cardinality 2.1 -> 0.12 s, RSS per value 193 -> 73
    bytes (values of ~21 bytes)."""
    params = [1_000, 1_000_000]
    param_names = ["distinct"]
    timeout = 300

    def setup(self, distinct):
        vals = pa.array([f"user-{i:09d}-{i * 7919 % 1000003}" for i in range(distinct)],
                        pa.large_string())
        rng = np.random.default_rng(3)
        self.rows = vals.take(pa.array(rng.integers(0, distinct, 1_000_000)))
        self.vals = vals
        self.it = Interner()
        self.it.intern(vals)

    def time_intern_known_rows(self, distinct):
        self.it.intern(self.rows)

    def time_intern_new_values(self, distinct):
        Interner().intern(self.vals)


class ParquetStringColumn:
    """``read_changes`` over one file of 1M rows whose string column holds
    ``distinct`` values (~17 bytes each): with 1,000 the file keeps dictionary pages
    and the column is read as a dictionary; with 1M Arrow's writer falls back to plain
    pages, read as strings (forty-second session: reading with ``read_dictionary``
    made Arrow hash every value; 10 files of 500k rows, 500k distinct, read in 2.4-2.7
    s that way and 0.32-0.40 s as strings)."""
    params = [1_000, 1_000_000]
    param_names = ["distinct"]
    timeout = 300

    def setup(self, distinct):
        import pyarrow.parquet as pq
        rng = np.random.default_rng(5)
        vals = np.array([f"user-{i:012d}" for i in range(distinct)])
        n = 1_000_000
        self.dir = tempfile.mkdtemp(prefix="ddnumba-asv-pqstr-")
        pq.write_table(pa.table({"user": vals[rng.integers(0, distinct, n)],
                                 "time": np.arange(n, dtype=np.int64)}),
                       f"{self.dir}/part-0.parquet")

    def teardown(self, distinct):
        shutil.rmtree(self.dir, ignore_errors=True)

    def time_read_and_encode(self, distinct):
        from ddnumba.io.parquet import read_changes
        for _ in read_changes(self.dir, ["user"]):
            pass

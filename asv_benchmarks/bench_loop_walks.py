"""The sequential loop's two key walks timed alone (``ddnumba.benchwalks``).

Most of a reachability run is the value-less ``distinct``'s walk
(``seqloop._reduce_keys``) and the loop join's (``seqloop._pairs_insert``). Here each
runs as a round runs it, over a copy of the loop state the benchmark's load leaves,
``width`` rows a call (25: a round's delta at N=1e6; 1,000: a batch's), every group
added at one iteration and taken away again, so that the state stays as loaded.
N=1,000's state (1.4 MiB) is in cache, N=100,000's (138 MiB) is not.
``track_*_ns_per_row`` report nanoseconds a row walked (the median of 5 passes).
"""
from ddnumba.bench import ReachSession
from ddnumba.benchwalks import LoopWalks as _Walks

from .common import median_seconds

ROWS = 100_000


class LoopWalks:
    params = ([1000, 100_000], [25, 1000])
    param_names = ["nodes", "width"]
    timeout = 600

    def setup(self, nodes, width):
        self.session = ReachSession(nodes, 1, engine="native", loops="sequential")
        self.session.load()
        self.walks = _Walks(self.session, ROWS, width)
        self.walks.distinct()           # compiled, and the state's lines touched
        self.walks.join()

    def teardown(self, nodes, width):
        self.session.close()

    def time_distinct_walk(self, nodes, width):
        self.walks.distinct()

    def time_join_walk(self, nodes, width):
        self.walks.join()

    def track_distinct_ns_per_row(self, nodes, width):
        return median_seconds(self.walks.distinct) / (2 * ROWS) * 1e9
    track_distinct_ns_per_row.unit = "ns/row"

    def track_join_ns_per_row(self, nodes, width):
        return median_seconds(self.walks.join) / (2 * ROWS) * 1e9
    track_join_ns_per_row.unit = "ns/row"

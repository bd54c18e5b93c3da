"""The roadmap's reachability benchmarks (see ``ddnumba.bench`` for the workload).

``ReachThroughput``: changes/s for N nodes (M = 2N edges, 10 roots) with B changes per
``run()``, each change at its own time. ``ReachSustained``: single-change latency
percentiles at N=1,000 after many changes, and the arrangement record count (state must
stay flat). ``ReachWorkers``: throughput with 1 and 2 worker processes. Each track_
benchmark runs its workload once in the benchmark process.
"""
from ddnumba.bench import run_reach


def _changes(n, b):
    # Enough runs for a stable median without making N=1e6 take hours.
    if n >= 1_000_000:
        return max(b * 3, 20)
    return max(b * 10, 200)


class ReachThroughput:
    params = [[1_000, 1_000_000], [1, 10, 100, 1000, 10000]]
    param_names = ["nodes", "batch"]
    timeout = 3600
    number = 1
    repeat = 1

    def setup(self, n, b):
        if n >= 1_000_000 and b >= 10000:
            raise NotImplementedError("too slow for this engine version (see issue notes)")
        run_reach(1000, 10, 20, recompute=False)      # JIT warm-up

    def track_changes_per_s(self, n, b):
        return run_reach(n, b, _changes(n, b), recompute=False)["changes_per_s"]
    track_changes_per_s.unit = "changes/s"


class ReachLoad:
    timeout = 3600
    params = [[1_000, 1_000_000]]
    param_names = ["nodes"]

    def setup(self, n):
        run_reach(1000, 10, 20, recompute=False)

    def track_load_seconds(self, n):
        return run_reach(n, 1, 1, recompute=False)["load_s"]
    track_load_seconds.unit = "s"


class ReachSustained:
    """N=1,000, single-change runs: p50/p99/max latency and state after U changes."""

    params = [[1_000, 10_000]]
    param_names = ["changes"]
    timeout = 3600

    def setup(self, u):
        run_reach(1000, 1, 10, recompute=False)
        self.result = run_reach(1000, 1, u, recompute=False)

    def track_p50_ms(self, u):
        return self.result["p50_ms"]
    track_p50_ms.unit = "ms"

    def track_p99_ms(self, u):
        return self.result["p99_ms"]
    track_p99_ms.unit = "ms"

    def track_max_ms(self, u):
        return self.result["max_ms"]
    track_max_ms.unit = "ms"

    def track_state_records(self, u):
        return self.result["records_end"]
    track_state_records.unit = "records"


class ReachWorkers:
    """Issue 6: the same workload with W=1 and W=2 worker processes (changes/s; the
    speedup is the ratio of the two W values at equal N and B)."""

    params = [[100_000, 1_000_000], [1000, 10000], [1, 2]]
    param_names = ["nodes", "batch", "workers"]
    timeout = 3600
    number = 1
    repeat = 1

    def setup(self, n, b, w):
        run_reach(1000, 10, 20, recompute=False, workers=w)

    def track_changes_per_s(self, n, b, w):
        changes = max(b * 3, 20) if n >= 1_000_000 else max(b * 5, 200)
        return run_reach(n, b, changes, recompute=False, workers=w)["changes_per_s"]
    track_changes_per_s.unit = "changes/s"

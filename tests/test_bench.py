"""The reach benchmark's figures: the spine work column is the engine's counter delta,
and the answer after the window matches a from-scratch BFS."""
from ddnumba.bench import ReachSession, spine_work


def test_merged_per_change_is_the_spine_counter_delta():
    session = ReachSession(300, 400, engine="native")
    try:
        session.load()
        before = spine_work(session.df)
        assert before is not None and before[0] > 0          # the load merged batches
        out = session.feed(10, 400)
        after = spine_work(session.df)
        merges, rows = after[0] - before[0], after[1] - before[1]
        assert merges > 0 and rows >= 2 * merges             # a merge reads two batches
        assert out["merged_per_change"] * out["changes"] == rows
        _, check = session.recompute()
        assert check
    finally:
        session.close()


def test_spine_work_is_none_for_the_python_engine():
    session = ReachSession(50, 10, engine="python")
    try:
        session.load()
        assert spine_work(session.df) is None
        assert session.feed(5, 10)["merged_per_change"] is None
    finally:
        session.close()


def test_traces_stay_compact_under_a_sliding_window():
    """Each run's updates are compacted when it ends: after many runs of many distinct
    times the traces hold about what the load left (the live graph's state), not the
    last run's history as well."""
    session = ReachSession(300, 6000, engine="native")
    try:
        session.load()
        base = session.records_after_load
        peak = 0
        for _ in range(12):
            out = session.feed(500, 500)
            peak = max(peak, out["records_end"])
        assert peak <= 1.5 * base, (base, peak)
        _, check = session.recompute()
        assert check
    finally:
        session.close()

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

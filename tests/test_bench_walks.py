"""The loop's two key walks timed alone (``ddnumba.benchwalks``, ``kernels.walks``,
asv ``LoopWalks``): the drivers leave the state as they found it, and do the work a
model of it says (the ``distinct``'s corrections, the join's pairs)."""
import subprocess
import sys

import numpy as np
import pytest

from ddnumba import benchwalks
from ddnumba.bench import ReachSession
from ddnumba.kernels.hstate import M_LIVE, find_rows, read_key


@pytest.fixture(scope="module")
def session():
    s = ReachSession(300, 1, engine="native", loops="sequential")
    s.load()
    yield s
    s.close()


def _histories(w, tag, keys, kw):
    """``{key: {iteration: diff}}`` of ``keys`` in trace ``tag`` of the walk's state."""
    keys = np.unique(keys, axis=0)
    out = {}
    for k, r in zip(map(tuple, keys), find_rows(w.tab, tag, keys, kw)):
        e = read_key(w.tab, w.arena, r, 0) if r >= 0 else np.zeros((0, 3), np.int64)
        out[k] = {(tuple(x[:-2]), int(x[-2])): int(x[-1]) for x in e}
    return out


def _model_corrections(hist, keys, width, j):
    """The corrections a value-less ``distinct`` writes for the walks of
    ``distinct_walks``: each row, in order, corrected against the history the rows
    before it left, at ``j`` and at every later iteration of that history where the
    output (1 where the accumulated count is positive) changes."""
    hist = {k: {it: d for (_v, it), d in h.items()} for k, h in hist.items()}
    total = 0
    for g in range(0, len(keys), width):
        for sign in (1, -1):
            for k in map(tuple, keys[g:g + width]):
                h = hist[k]
                its = sorted(i for i in h if i > j)
                c = sum(d for i, d in h.items() if i < j)
                prev = 0
                for i in [j] + its:
                    c += h.get(i, 0)
                    d = int(c + sign > 0) - int(c > 0)
                    if d != prev:
                        total += 1
                        prev = d
                h[j] = h.get(j, 0) + sign
                if h[j] == 0:
                    del h[j]
    return total


@pytest.mark.parametrize("width", [1, 7, 25])
def test_walks_do_the_modelled_work_and_restore_the_state(session, width):
    w = benchwalks.LoopWalks(session, 400, width, seed=3)
    j = int(w.j)
    d_before = _histories(w, w.d_tag, w.d_keys, w.d_kw)
    l_before = _histories(w, w.j_tl, w.j_rows[:, :w.j_kw], w.j_kw)
    live = int(w.meta[M_LIVE])
    rows, corrections = w.distinct()
    assert rows == 2 * 400
    assert corrections == _model_corrections(d_before, w.d_keys, width, j)
    assert corrections > 0
    walked, pairs = w.join()
    assert walked == 2 * 400
    assert pairs == w.expected_pairs > 0
    # both walks took back what they added: the same histories, the same live count
    assert _histories(w, w.d_tag, w.d_keys, w.d_kw) == d_before
    assert _histories(w, w.j_tl, w.j_rows[:, :w.j_kw], w.j_kw) == l_before
    assert int(w.meta[M_LIVE]) == live
    # and a second pass does the same work again
    assert w.distinct() == (rows, corrections)
    assert w.join() == (walked, pairs)


def test_walks_read_the_loop_program_not_fixed_tags(session):
    w = benchwalks.LoopWalks(session, 50, 25)
    # the distinct's keys are (root, node) pairs of its own trace, the join's left
    # rows (node, root) entries of its left trace, whose right trace is the edges
    assert w.d_kw == 2 and w.j_kw == 1 and w.j_lvw == 1 and w.j_rvw == 1
    assert len({w.d_tag, w.j_tl, w.j_tr}) == 3
    roots = set(session.roots.tolist())
    assert set(w.d_keys[:, 0].tolist()) <= roots
    assert set(w.j_rows[:, 1].tolist()) <= roots


def test_walks_refuse_a_session_without_a_sequential_loop():
    s = ReachSession(50, 1, engine="python")
    s.load()
    try:
        with pytest.raises(ValueError, match="sequential"):
            benchwalks.LoopWalks(s, 10, 5)
    finally:
        s.close()


def test_walk_figures_and_the_command(session, capsys):
    figs = benchwalks.walk_figures(300, [5, 50], rows=300, repeat=2)
    out = capsys.readouterr().out
    assert [f["width"] for f in figs] == [5, 50]
    for f in figs:
        assert f["distinct_ns"] > 0 and f["join_ns"] > 0
        assert f["distinct_best_ns"] <= f["distinct_ns"]
        assert f["join_made"] > 0
    lines = [ln for ln in out.splitlines() if ln.startswith("N=")]
    assert len(lines) == 2 and all("width" in ln and "pairs a row" in ln for ln in lines)
    r = subprocess.run([sys.executable, "-m", "ddnumba.bench", "walks", "--width", "0"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "--width must be at least 1" in r.stderr


def test_asv_suite_runs_at_its_smallest_size():
    from asv_benchmarks import bench_loop_walks as bw
    c = bw.LoopWalks()
    c.setup(1000, 25)
    try:
        c.time_distinct_walk(1000, 25)
        c.time_join_walk(1000, 25)
        assert c.track_distinct_ns_per_row(1000, 25) > 0
        assert c.track_join_ns_per_row(1000, 25) > 0
    finally:
        c.teardown(1000, 25)

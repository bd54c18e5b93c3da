"""The reach benchmark's figures: the spine work column is the engine's counter delta,
and the answer after the window matches a from-scratch BFS."""
import numpy as np
import pytest

from ddnumba.bench import ReachSession, spine_work


@pytest.mark.parametrize("loops", ["rounds", "sequential"])
def test_merged_per_change_is_the_spine_counter_delta(loops):
    session = ReachSession(300, 400, engine="native", loops=loops)
    try:
        session.load()
        before = spine_work(session.df)
        out = session.feed(10, 400)
        after = spine_work(session.df)
        if loops == "sequential":
            # no trace at all: the loop keeps hashed state, and so does the root
            # scope's count (kernels.rootagg), whose arrangement it alone reads
            assert before == after == (0, 0) and out["merged_per_change"] == 0
            return
        assert before is not None and before[0] > 0          # the load merged batches
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


def test_batch_resolution_reaches_the_same_graph_with_fewer_updates():
    """``resolution="batch"`` feeds the same window changes, a run's at one time: the
    answer after the window is the same, and fewer updates flow (per-change times
    make the dataflow report every intermediate state). ``updates_per_change`` is the
    delta of the operators' input counters."""
    from ddnumba.bench import operator_updates
    figures = {}
    for res in ("record", "batch"):
        session = ReachSession(300, 400, engine="native")
        try:
            session.load()
            before = operator_updates(session.df)
            out = session.feed(50, 400, resolution=res)
            after = operator_updates(session.df)
            assert out["resolution"] == res
            # (a float ratio: compare to rounding)
            assert round(out["updates_per_change"] * out["changes"]) == after - before
            assert out["ns_per_update"] > 0
            _, check = session.recompute()
            assert check
            figures[res] = out["updates_per_change"]
        finally:
            session.close()
    assert figures["batch"] < figures["record"]


def test_resolution_must_be_record_or_batch():
    import pytest
    session = ReachSession(50, 10, engine="python")
    try:
        session.load()
        with pytest.raises(ValueError, match="resolution"):
            session.feed(5, 10, resolution="epoch")
        out = session.feed(5, 10)
        assert out["updates_per_change"] is None and out["ns_per_update"] is None
    finally:
        session.close()


def test_runs_split_into_passes_only_when_updates_are_many_next_to_the_state():
    """A loop dataflow's run over many times is executed in passes only when its
    updates are many next to the trace records (see NativeEngine.run); the answer
    after the window is the BFS's either way."""
    session = ReachSession(300, 6100, engine="native")
    try:
        session.load()
        eng = session.df._native
        eng.max_times_per_pass = 7
        share = session.records_after_load // eng.PASS_STATE_RATIO
        assert share > 2 * 50              # 50 changes: 100 updates, fewer than share
        before = eng.passes
        session.feed(50, 50)
        assert eng.passes == before + 1
        before = eng.passes
        session.feed(6000, 6000)           # 12,000 updates at 6,000 times
        assert eng.passes > before + 1
        _, check = session.recompute()
        assert check
    finally:
        session.close()


def test_sequential_loops_reach_the_same_graph(capsys):
    """``--loops rounds sequential`` runs the workload with both loop modes in one
    process: both answers match the from-scratch BFS, the table says which mode ran,
    and a ratio line compares them."""
    from ddnumba.bench import main
    main(["reach", "--nodes", "300", "--batch", "1", "50", "--changes", "200",
          "--engine", "native", "--loops", "rounds", "sequential"])
    out = capsys.readouterr().out
    table = [line.split() for line in out.splitlines() if line.strip().startswith("300")]
    assert len(table) == 4
    assert sorted(row[5] for row in table) == ["rounds", "rounds", "sequential",
                                               "sequential"]
    assert all(row[-1] == "True" for row in table)
    assert out.count("sequential loops") == 2 and "ratio" in out


def test_session_compacts_its_count_capture(monkeypatch):
    """Every ``COMPACT_EVERY`` changes the count capture is compacted to the last complete
    time: it keeps the roots' counts and the changes since, and the answer still matches
    BFS."""
    monkeypatch.setattr(ReachSession, "COMPACT_EVERY", 100)
    session = ReachSession(200, 700, engine="native")
    try:
        session.load()
        session.feed(1, 230)
        session.feed(7, 420)            # 650 changes, change j at time j
        assert session.t - 1 == 650
        # The run that crossed 600 ended at change 230 + 7 * 53 = 601 (time 601).
        assert session.counts.since.tolist() == [601]
        u = session.counts.raw()
        assert (u.times[:, 0] >= 601).all()
        assert (u.times[:, 0] == 601).sum() == 10      # one (root, count) row per root
        _, check = session.recompute()
        assert check
    finally:
        session.close()


def test_per_run_counts_add_up_to_the_segment():
    # feed(per_run=True): per run, the updates all operators received and the rows
    # spine merges read; they sum to the segment's own counter deltas.
    from ddnumba.bench import operator_updates
    session = ReachSession(300, 600, engine="native")
    try:
        session.load()
        session.feed(10, 200)
        u0, w0 = operator_updates(session.df), spine_work(session.df)[1]
        out = session.feed(10, 400, per_run=True)
        runs = out["per_run"]
        assert len(runs["updates"]) == len(out["latencies"]) == 40
        assert runs["updates"].sum() == operator_updates(session.df) - u0
        assert runs["merged_rows"].sum() == spine_work(session.df)[1] - w0
        assert runs["updates"].sum() == out["updates_per_change"] * 400
        assert (runs["updates"] > 0).all()
        assert "per_run" not in session.feed(10, 0)
    finally:
        session.close()


def test_tail_lists_the_slowest_runs_with_their_work(capsys):
    from ddnumba.bench import main, run_tail
    r = run_tail(300, 2, 200, warm=50, top=5)
    assert r["check"] and r["runs"] == 100
    lat, upd = r["latencies"], r["per_run"]["updates"]
    slow = r["slowest"]
    assert [i for i, *_ in slow] == list(np.argsort(-lat, kind="stable")[:5])
    for i, ms, u, ns, mr in slow:
        assert ms == lat[i] * 1e3 and u == upd[i] and mr == r["per_run"]["merged_rows"][i]
        assert abs(ns - lat[i] * 1e9 / max(u, 1)) < 1e-6
    assert r["max_ms"] == slow[0][1]
    assert r["median_updates"] == float(np.median(upd))
    assert -1 <= r["corr"] <= 1
    main(["tail", "--nodes", "200", "--batch", "1", "--changes", "30", "--top", "3"])
    text = capsys.readouterr().out
    assert "answer matches BFS" in text and "30 runs" in text
    assert len([ln for ln in text.splitlines()[2:] if ln.strip()]) == 3


def test_tail_needs_the_native_engine():
    from ddnumba.bench import run_tail
    with pytest.raises(ValueError, match="native engine"):
        run_tail(50, 1, 5, warm=0, engine="python")


def test_feed_gates_each_timed_run():
    """``gate`` brackets every timed run, and only those: True right before, False
    right after, once per run (what ``bench profile`` records between)."""
    s = ReachSession(300, 2000)
    s.load()
    calls = []
    r = s.feed(50, 500, gate=calls.append)
    assert len(r["latencies"]) == 10
    assert calls == [True, False] * 10
    s.close()


_FAKE_PERF = r"""
import os, sys
ctl, ack, mode = sys.argv[1], sys.argv[2], sys.argv[3]
c = open(ctl, "rb")
a = os.open(ack, os.O_WRONLY)
for line in c:
    if mode == "die":
        sys.exit(3)
    os.write(a, b"ack\n")
"""


@pytest.mark.parametrize("mode", ["ack", "die"])
def test_perf_gate_waits_for_perf_and_never_hangs(tmp_path, mode):
    """The control-fifo protocol of ``bench profile`` against a stand-in for perf:
    each enable/disable waits for perf's ack; a perf that exits instead raises
    SystemExit at once rather than hanging."""
    import os
    import subprocess
    import sys
    from ddnumba.bench import _PerfGate
    ctl, ack = str(tmp_path / "ctl"), str(tmp_path / "ack")
    os.mkfifo(ctl)
    os.mkfifo(ack)
    rec = subprocess.Popen([sys.executable, "-c", _FAKE_PERF, ctl, ack, mode],
                           stderr=subprocess.PIPE)
    gate = _PerfGate(rec, ctl, ack, timeout=10.0)
    try:
        if mode == "ack":
            for on in (True, False, True, False):
                gate(on)
            assert rec.poll() is None
        else:
            with pytest.raises(SystemExit, match="perf record failed"):
                gate(True)
    finally:
        gate.close()
        rec.kill()
        rec.wait()


@pytest.mark.parametrize("argv,msg", [
    (["reach", "--nodes", "0"], "--nodes must be at least 10"),
    (["reach", "--nodes", "5"], "--nodes must be at least 10"),
    (["reach", "--batch", "0"], "--batch must be at least 1"),
    (["reach", "--batch", "-1"], "--batch must be at least 1"),
    (["reach", "--changes", "-3"], "--changes must be positive"),
    (["reach", "--changes", "0"], "--changes must be positive"),
    (["reach", "--batch", "10", "--changes", "5"], "less than one run of --batch 10"),
    (["reach", "--workers", "0"], "--workers must be at least 1"),
    (["reach", "--plot", "/nonexistent_dir_xyz/x.png"], "no such directory"),
    (["tail", "--batch", "0"], "--batch must be at least 1"),
    (["tail", "--warm", "-1"], "--warm must be positive"),
    (["sharing", "--nodes", "5"], "--nodes must be at least 10"),
    (["floor", "--nodes", "-3"], "--nodes must be at least 10"),
    (["memory", "--steps", "0"], "--steps must be at least 1"),
    (["memory", "--mib", "nan"], "--mib must be a positive size"),
    (["memory", "--mib", "-1"], "--mib must be a positive size"),
    (["memory", "--touch", "-1"], "--touch must be a size in MiB"),
    (["memory", "--touch", "inf"], "--touch must be a size in MiB"),
])
def test_bench_refuses_nonsense_arguments_in_one_line(argv, msg, capsys):
    # argparse's error (exit status 2, one line naming the flag) before any work
    from ddnumba.bench import main
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert msg in err and "Traceback" not in err


def test_bench_pair_setup_must_exist():
    from ddnumba.bench import main
    with pytest.raises(SystemExit, match="--setup /nonexistent_xyz.py: no such file"):
        main(["pair", "--setup", "/nonexistent_xyz.py"])


def test_ratio_lines_set_workers_against_one_process_of_each_engine(capsys):
    """With several worker counts and engines, a W > 1 row (the Python engine) is
    compared with its own engine at W=1 and with each other engine's single process."""
    from ddnumba.bench import _ratio_lines

    def row(w, e, cps, b=100):
        return {"n": 1000, "batch": b, "workers": w, "requested": e, "engine": e,
                "changes_per_s": cps}
    rows = [row(1, "native", 8000.0), row(1, "python", 400.0), row(2, "python", 500.0),
            row(1, "native", 9000.0, b=10)]
    _ratio_lines(rows, ["native", "python"], [1, 2])
    out = capsys.readouterr().out.splitlines()
    assert "N=1000 B=100 engine=python: W=2 speedup 1.25x over W=1, 250 changes/s per " \
           "worker" in out
    assert "N=1000 B=100: W=2 python 500 changes/s, W=1 native 8000 changes/s: ratio " \
           "0.06x" in out
    # (no W=2 row at B=10, and no cross line against the W=2 row's own engine)
    assert not any("B=10:" in line and "W=2" in line for line in out)
    assert sum("W=1 python" in line and "W=2 python" in line for line in out) == 0
    assert "N=1000 B=100 W=1: native 8000 changes/s, python 400 changes/s: ratio " \
           "native/python 20.00x" in out


def test_latency_figures_give_the_median_and_the_mean_throughput():
    from ddnumba.bench import _latency_figures
    # nine quick runs and one slow: the median run leaves the slow one out, the mean
    # counts it
    lat = np.array([0.001] * 9 + [0.091])
    f = _latency_figures(lat, 10)
    assert f["changes_per_s"] == pytest.approx(10 / 0.001)
    assert f["mean_changes_per_s"] == pytest.approx(100 / 0.1)
    assert f["p50_ms"] == pytest.approx(1.0)
    assert f["max_ms"] == pytest.approx(91.0)
    empty = _latency_figures(np.array([]), 10)
    assert np.isnan(empty["changes_per_s"]) and np.isnan(empty["mean_changes_per_s"])


def test_feed_reports_the_mean_throughput_of_its_runs():
    s = ReachSession(1000, 60)
    try:
        s.load()
        r = s.feed(20, 60)
    finally:
        s.close()
    lat = np.asarray(r["latencies"])
    assert len(lat) == 3
    assert r["mean_changes_per_s"] == pytest.approx(60 / lat.sum())


def test_the_load_is_timed_after_the_runtime_is_ready(monkeypatch):
    """``ReachSession.load`` has the dataflow compile (or load) its runtime before its
    clock starts: on a machine's first use that compile takes minutes, which is not
    the load (``bench targets`` once read a 184 s load so)."""
    import types

    from ddnumba import bench
    events = []
    clock = types.SimpleNamespace(perf_counter=lambda: events.append("clock") or 0.0)
    session = ReachSession(50, 10)
    try:
        prepare = session.df.prepare
        monkeypatch.setattr(session.df, "prepare",
                            lambda: (events.append("prepare"), prepare())[1])
        monkeypatch.setattr(bench, "time", clock)
        session.load()
        assert events[:2] == ["prepare", "clock"]
        monkeypatch.undo()
        assert session.recompute()[1]
    finally:
        session.close()

"""The ``ddnumba`` command: ``run`` with built-in and user queries, errors, the demo.

``run`` tests write their inputs with pyarrow and compare the Parquet the command writes
with references computed here (networkx, Counters). The demo test runs the installed
console script in a subprocess with small sizes (it starts its own Spark).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter

import networkx as nx
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ddnumba.cli import main
from ddnumba.demo import bfs_reachable


def write(path, **cols):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    pq.write_table(pa.table(cols), path)


def accumulate(table, cols, t):
    acc = Counter()
    for r in table.to_pylist():
        if r["time"] <= t:
            acc[tuple(r[c] for c in cols)] += r["diff"]
    return {k: v for k, v in acc.items() if v}


def assert_word_counts(tbl, events, times):
    """The written count output accumulated at each of ``times`` is the count of the
    ``(word, time, diff)`` events up to it: one ``(word, count)`` row each."""
    for t in times:
        acc = Counter()
        for w, s, d in events:
            if s <= t:
                acc[w] += d
        assert accumulate(tbl, ["word", "count"], t) == {
            (w, c): 1 for w, c in acc.items() if c}, t


def run_cli(argv, capsys):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


# ------------------------------------------------------------------ built-in queries
@pytest.mark.parametrize("workers", [1, 2])
def test_run_reachability_on_strings(tmp_path, capsys, workers):
    rng = np.random.default_rng(3)
    names = np.array([f"n{i}" for i in range(12)])
    inp = tmp_path / "in"
    write(str(inp / "roots" / "part-0.parquet"), node=["n0", "n5"], time=[0, 0])
    edges, present = [], []
    for t in range(4):
        for _ in range(6):
            e = tuple(names[rng.integers(0, 12, 2)])
            edges.append((*e, t, 1))
            present.append(e)
        if t:
            e = present.pop(int(rng.integers(0, len(present))))
            edges.append((*e, t, -1))
        part = [x for x in edges if x[2] == t]
        write(str(inp / "edges" / f"batch={t}" / "part-0.parquet"),
              src=[x[0] for x in part], dst=[x[1] for x in part],
              time=[x[2] for x in part], diff=[x[3] for x in part])
    code, out, err = run_cli(["run", "reachability", "--input", inp, "--output",
                              tmp_path / "out", "--no-progress", "--workers", workers],
                             capsys)
    assert code == 0, err
    assert "reachability:" in out
    tbl = pq.read_table(tmp_path / "out" / "reachability")
    assert tbl.schema.field("root").type == pa.string()
    assert tbl.schema.field("node").type == pa.string()
    for t in range(4):
        acc = Counter()
        for s, d, tt, df in edges:
            if tt <= t:
                acc[(s, d)] += df
        g = nx.DiGraph([k for k, v in acc.items() if v > 0])
        g.add_nodes_from(["n0", "n5"])
        want = {(r, v): 1 for r in ("n0", "n5") for v in nx.descendants(g, r) | {r}}
        assert accumulate(tbl, ["root", "node"], t) == want


def test_run_connected_components(tmp_path, capsys):
    inp = tmp_path / "in"
    write(str(inp / "edges" / "part-0.parquet"), a=[1, 2, 7, 9], b=[2, 3, 8, 9],
          time=[0, 0, 0, 0])
    write(str(inp / "edges" / "part-1.parquet"), a=[2, 3], b=[3, 7], time=[1, 2],
          diff=[-1, 1])
    code, out, err = run_cli(["run", "connected-components", "--input", inp, "--output",
                              tmp_path / "out", "--no-progress"], capsys)
    assert code == 0, err
    tbl = pq.read_table(tmp_path / "out" / "connected_components")
    for t, edges in ((0, [(1, 2), (2, 3), (7, 8), (9, 9)]),
                     (1, [(1, 2), (7, 8), (9, 9)]),
                     (2, [(1, 2), (3, 7), (7, 8), (9, 9)])):
        g = nx.Graph(edges)
        want = {(v, min(comp)): 1 for comp in nx.connected_components(g) for v in comp}
        assert accumulate(tbl, ["node", "label"], t) == want


def test_run_count_with_key_and_join(tmp_path, capsys):
    inp = tmp_path / "in"
    write(str(inp / "input" / "part-0.parquet"), x=[1, 2, 3], word=["a", "b", "a"],
          time=[0, 0, 1])
    code, _, err = run_cli(["run", "count", "--input", inp, "--output", tmp_path / "out",
                            "--key", "word", "--no-progress"], capsys)
    assert code == 0, err
    tbl = pq.read_table(tmp_path / "out" / "count")
    assert tbl.column_names == ["word", "count", "time", "diff"]
    assert accumulate(tbl, ["word", "count"], 0) == {("a", 1): 1, ("b", 1): 1}
    assert accumulate(tbl, ["word", "count"], 1) == {("a", 2): 1, ("b", 1): 1}

    write(str(inp / "left" / "part-0.parquet"), k=["p", "q", "p"], x=[1.5, 2.5, -1.0],
          time=[0, 0, 0])
    write(str(inp / "right" / "part-0.parquet"), y=[True, False], k=["p", "r"],
          time=[0, 0])
    code, _, err = run_cli(["run", "join", "--input", inp, "--output", tmp_path / "out",
                            "--key", "k", "--no-progress"], capsys)
    assert code == 0, err
    tbl = pq.read_table(tmp_path / "out" / "join")
    assert tbl.schema.field("x").type == pa.float64()
    assert tbl.schema.field("y").type == pa.bool_()
    assert accumulate(tbl, ["k", "x", "y"], 0) == {("p", 1.5, True): 1,
                                                   ("p", -1.0, True): 1}


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("parts", ["per-run", "default", "rows", "runs"])
def test_run_streams_each_runs_changes_and_compacts(tmp_path, capsys, monkeypatch,
                                                    workers, parts):
    # Many input files (a run each): the output's changes gather into part files
    # (--part-rows 1: one per run; by default, of 100,000 rows: one here; of 7 rows;
    # or one every PART_RUNS runs), the captures compact themselves as they go
    # (COMPACT_MIN 0), and the dataset still holds every change once: accumulated at
    # every time it is the count of the input there.
    import ddnumba.cli as cli
    from ddnumba.operators.output import CaptureNode
    monkeypatch.setattr(CaptureNode, "COMPACT_MIN", 0)
    if parts == "runs":
        monkeypatch.setattr(cli, "PART_RUNS", 10)
    compactions = []
    real = CaptureNode.compact
    monkeypatch.setattr(CaptureNode, "compact",
                        lambda self, f: (compactions.append(int(f[0, 0])),
                                         real(self, f))[1])
    rng = np.random.default_rng(11)
    inp = tmp_path / "in"
    live = []
    events = []                     # (word, time, diff)
    T = 40
    for t in range(T):
        words, diffs = [], []
        for _ in range(int(rng.integers(1, 4))):
            if live and rng.random() < 0.4:
                w = live.pop(int(rng.integers(0, len(live))))
                words.append(w)
                diffs.append(-1)
            else:
                w = f"w{int(rng.integers(0, 6))}"
                live.append(w)
                words.append(w)
                diffs.append(1)
        events += [(w, t, d) for w, d in zip(words, diffs)]
        write(str(inp / "input" / f"part-{t:03d}.parquet"), word=words,
              time=[t] * len(words), diff=diffs)
    argv = ["run", "count", "--input", inp, "--output", tmp_path / "out", "--no-progress"]
    argv += {"per-run": ["--part-rows", 1], "default": [], "rows": ["--part-rows", 7],
             "runs": []}[parts]
    if workers > 1:
        argv += ["--workers", workers]
    code, out, err = run_cli(argv, capsys)
    assert code == 0, err
    files = sorted(os.listdir(tmp_path / "out" / "count"))
    assert f"in {len(files)} part file(s)" in out
    rows = [pq.read_metadata(tmp_path / "out" / "count" / f).num_rows for f in files]
    if parts == "per-run":
        assert len(files) > T // 2, files
    elif parts == "default":
        assert len(files) == 1, files
    elif parts == "rows":
        assert 3 <= len(files) < T // 2 and min(rows[:-1]) >= 7, rows
    else:
        # after runs 10, 20, 30, 40, and the end (the input's close is a run too)
        assert T // 10 <= len(files) <= T // 10 + 1, rows
    assert len(compactions) > 3 and compactions == sorted(compactions)
    tbl = pq.read_table(tmp_path / "out" / "count")
    assert f"count: {tbl.num_rows:,} updates" in out
    assert_word_counts(tbl, events, range(T))
    # each change once: no update at a time repeats another's (word, count, time)
    keys = Counter((r["word"], r["count"], r["time"]) for r in tbl.to_pylist())
    assert max(keys.values()) == 1


@pytest.mark.parametrize("workers", [1, 2])
def test_run_first_file_of_many_times_keeps_them(tmp_path, capsys, monkeypatch, workers):
    # The first input file spans several times and its run compacts the output
    # capture at once (COMPACT_MIN 0): its part file must still hold every change at
    # its own time (the capture is read once before the first run), not all of them
    # at the file's last time.
    from ddnumba.operators.output import CaptureNode
    monkeypatch.setattr(CaptureNode, "COMPACT_MIN", 0)
    rng = np.random.default_rng(3)
    inp = tmp_path / "in"
    events = []
    for f, (t0, t1) in enumerate([(0, 8), (8, 10)]):
        n = 60
        words = [f"w{int(x)}" for x in rng.integers(0, 7, n)]
        times = sorted(int(x) for x in rng.integers(t0, t1, n))
        diffs = [1] * n
        events += list(zip(words, times, diffs))
        write(str(inp / "input" / f"part-{f}.parquet"), word=words, time=times,
              diff=diffs)
    argv = ["run", "count", "--input", inp, "--output", tmp_path / "out", "--no-progress"]
    if workers > 1:
        argv += ["--workers", workers]
    code, out, err = run_cli(argv, capsys)
    assert code == 0, err
    assert "RuntimeWarning" not in err
    tbl = pq.read_table(tmp_path / "out" / "count")
    assert len(set(tbl.column("time").to_pylist())) > 5
    assert_word_counts(tbl, events, range(10))


def test_run_two_time_coordinates_streams_and_compacts(tmp_path, capsys, monkeypatch):
    # (epoch, round) times, a file per epoch: the captures compact themselves to the
    # frontier stepped back, (e, 0) after epoch e, and the written changes accumulate
    # to the input's count at every (epoch, round).
    from ddnumba.operators.output import CaptureNode
    monkeypatch.setattr(CaptureNode, "COMPACT_MIN", 0)
    compactions = []
    real = CaptureNode.compact
    monkeypatch.setattr(CaptureNode, "compact",
                        lambda self, f: (compactions.append(f.tolist()), real(self, f))[1])
    rng = np.random.default_rng(12)
    inp = tmp_path / "in"
    events = []                     # (word, t0, t1, diff)
    E = 12
    for e in range(E):
        n = int(rng.integers(2, 6))
        words = [f"w{int(rng.integers(0, 5))}" for _ in range(n)]
        rounds = [0] + [int(rng.integers(0, 4)) for _ in range(n - 1)]
        diffs = [1] + [int(rng.choice([-1, 1, 1])) for _ in range(n - 1)]
        events += list(zip(words, [e] * n, rounds, diffs))
        write(str(inp / "input" / f"part-{e:03d}.parquet"), word=words, time_0=[e] * n,
              time_1=rounds, diff=diffs)
    code, out, err = run_cli(["run", "count", "--input", inp, "--output", tmp_path / "out",
                              "--time-dims", "2", "--no-progress"], capsys)
    assert code == 0, err
    assert len(compactions) > 3
    assert all(f[0][1] == 0 for f in compactions)
    assert [f[0][0] for f in compactions] == sorted({f[0][0] for f in compactions})
    rows = pq.read_table(tmp_path / "out" / "count").to_pylist()
    for x in range(E):
        for y in range(5):
            want = Counter()
            for w, a, b, d in events:
                if a <= x and b <= y:
                    want[w] += d
            got = Counter()
            for r in rows:
                if r["time_0"] <= x and r["time_1"] <= y:
                    got[(r["word"], r["count"])] += r["diff"]
            assert {k: v for k, v in got.items() if v} == {
                (w, c): 1 for w, c in want.items() if c}, (x, y)


def test_run_user_query_file(tmp_path, capsys):
    q = tmp_path / "q.py"
    q.write_text(
        "def build(df):\n"
        "    ei, edges = df.new_input(['src', 'dst'])\n"
        "    deg = edges.map(lambda s, d: d, names=['dst']).count(name='indegree')\n"
        "    return {'edges': ei}, {'indegree': deg}\n")
    write(str(tmp_path / "in" / "edges" / "part-0.parquet"), src=[1, 2, 3], dst=[3, 3, 1],
          time=[0, 0, 1], diff=[1, 1, 1])
    code, out, err = run_cli(["run", q, "--input", tmp_path / "in", "--output",
                              tmp_path / "out", "--no-progress"], capsys)
    assert code == 0, err
    tbl = pq.read_table(tmp_path / "out" / "indegree")
    assert accumulate(tbl, ["dst", "indegree"], 1) == {(3, 2): 1, (1, 1): 1}


# ------------------------------------------------------------------ errors
def one_line(err):
    # (a first run that compiles the runtime announces it: not part of the error)
    lines = [ln for ln in err.splitlines() if ln.strip()
             and not ln.startswith(("ddnumba: compiling", "ddnumba: ... done",
                                    "ddnumba: note: "))]
    assert len(lines) == 1, err
    assert lines[0].startswith("ddnumba: error: ")
    return lines[0]


def test_errors_exit_2_with_one_line(tmp_path, capsys):
    inp = tmp_path / "in"
    out = tmp_path / "out"
    code, _, err = run_cli(["run", "reachability", "--input", inp, "--output", out],
                           capsys)
    assert code == 2 and "--input is not a directory" in one_line(err)
    os.makedirs(inp / "edges")
    write(str(inp / "roots" / "part-0.parquet"), node=[1], time=[0])
    code, _, err = run_cli(["run", "reachability", "--input", inp, "--output", out],
                           capsys)
    assert code == 2 and "edges: no Parquet files" in one_line(err)
    (inp / "edges" / "part-0.parquet").write_bytes(b"garbage")
    code, _, err = run_cli(["run", "reachability", "--input", inp, "--output", out],
                           capsys)
    assert code == 2 and "part-0.parquet: not a readable Parquet file" in one_line(err)
    write(str(inp / "edges" / "part-0.parquet"), src=[1], dst=[2], time=[5])
    write(str(inp / "edges" / "part-1.parquet"), src=[1], dst=[2], time=[3])
    code, _, err = run_cli(["run", "reachability", "--input", inp, "--output", out,
                            "--no-progress"], capsys)
    assert code == 2 and "part-1.parquet: column 'time': times go backwards" in one_line(
        err)
    code, _, err = run_cli(["run", "reachability", "--input", inp, "--output", out,
                            "--order", "sort", "--no-progress"], capsys)
    assert code == 0, err
    code, _, err = run_cli(["run", "reachability", "--input", inp, "--output", out,
                            "--order", "sort", "--no-progress"], capsys)
    assert code == 2 and "pass --overwrite" in one_line(err)
    code, _, err = run_cli(["run", "reachability", "--input", inp, "--output", out,
                            "--order", "sort", "--overwrite", "--no-progress"], capsys)
    assert code == 0, err
    write(str(inp / "input" / "part-0.parquet"), v=[1], time=[0])
    code, _, err = run_cli(["run", "count", "--input", inp, "--output", out, "--key",
                            "nope"], capsys)
    assert code == 2 and "no column 'nope'" in one_line(err)
    code, _, err = run_cli(["run", "nosuch.py", "--input", inp, "--output", out], capsys)
    assert code == 2 and "no such query file" in one_line(err)
    (tmp_path / "bad.py").write_text("x = 1\n")
    code, _, err = run_cli(["run", tmp_path / "bad.py", "--input", inp, "--output", out],
                           capsys)
    assert code == 2 and "defines no build(df)" in one_line(err)
    code, _, err = run_cli(["run", "count"], capsys)
    assert code == 2 and "required" in one_line(err)
    code, _, err = run_cli(["frobnicate"], capsys)
    assert code == 2 and "invalid choice" in one_line(err)
    code, _, err = run_cli(["demo", "--batch", "0"], capsys)
    assert code == 2 and "--batch must be >= 1" in one_line(err)


def test_output_overlapping_an_input_is_refused_before_anything_is_deleted(tmp_path,
                                                                          capsys):
    # An output that is an input directory, lies in one or holds one: refused, with
    # --overwrite too, and the input is left as it was.
    inp = tmp_path / "in"
    write(str(inp / "input" / "part-0.parquet"), k=[1, 2], time=[0, 1])
    q = tmp_path / "q.py"
    q.write_text("def build(df):\n"
                 "    i, c = df.new_input(['k'])\n"
                 "    return {'input': i}, {'input': c.distinct()}\n")
    cases = [([q], inp),                          # output 'input' is in/input itself
             (["count"], inp / "input"),          # in/input/count: inside the input
             (["count"], tmp_path)]               # (tmp_path/count holds no input)
    for query, out in cases[:2]:
        for extra in ([], ["--overwrite"]):
            code, _, err = run_cli(["run", *query, "--input", inp, "--output", out,
                                    "--no-progress", *extra], capsys)
            assert code == 2 and "would overlap input 'input'" in one_line(err)
            assert os.listdir(inp) == ["input"]
            assert os.listdir(inp / "input") == ["part-0.parquet"]
    # an output next to the inputs (not overlapping) is fine; and an --output that
    # holds the input directories is refused
    code, _, err = run_cli(["run", "count", "--input", inp, "--output", tmp_path,
                            "--no-progress"], capsys)
    assert code == 0, err
    code, _, err = run_cli(["run", "count", "--input", inp / "input" / "..", "--output",
                            tmp_path / "in2", "--no-progress"], capsys)
    assert code == 0, err
    q2 = tmp_path / "q2.py"
    q2.write_text("def build(df):\n"
                  "    i, c = df.new_input(['k'])\n"
                  "    return {'a/input': i}, {'a': c.distinct()}\n")
    os.makedirs(tmp_path / "root" / "a")
    write(str(tmp_path / "root" / "a" / "input" / "part-0.parquet"), k=[1], time=[0])
    code, _, err = run_cli(["run", q2, "--input", tmp_path / "root", "--output",
                            tmp_path / "root", "--overwrite", "--no-progress"], capsys)
    assert code == 2 and "would overlap input 'a/input'" in one_line(err)
    assert os.listdir(tmp_path / "root" / "a" / "input") == ["part-0.parquet"]


def test_integer_types_that_differ_decode_every_value(tmp_path, capsys):
    # A key that is int8 in the first file and int64 in the next, and reachability with
    # int32 roots over int64 edges whose ids need 41 bits: every output value decodes
    # (the output type widens), none is refused at write time.
    inp = tmp_path / "in"
    write(str(inp / "input" / "part-0.parquet"), k=pa.array([1, 2], pa.int8()), time=[0, 0])
    write(str(inp / "input" / "part-1.parquet"), k=pa.array([1000, 1], pa.int64()),
          time=[1, 1])
    code, out, err = run_cli(["run", "count", "--input", inp, "--output", tmp_path / "o1",
                              "--no-progress"], capsys)
    assert code == 0, err
    parts = sorted(os.listdir(tmp_path / "o1" / "count"))
    tbl = pa.concat_tables([pq.read_table(tmp_path / "o1" / "count" / f).cast(
        pa.schema([("k", pa.int64()), ("count", pa.int64()), ("time", pa.int64()),
                   ("diff", pa.int64())])) for f in parts])
    assert accumulate(tbl, ["k", "count"], 1) == {(1, 2): 1, (2, 1): 1, (1000, 1): 1}
    big = 1 << 40
    g = tmp_path / "g"
    write(str(g / "roots" / "part-0.parquet"), node=pa.array([1], pa.int32()), time=[0])
    write(str(g / "edges" / "part-0.parquet"), src=pa.array([1, big, 2], pa.int64()),
          dst=pa.array([big, 2, big + 1], pa.int64()), time=[0, 0, 1])
    code, out, err = run_cli(["run", "reachability", "--input", g, "--output",
                              tmp_path / "o2", "--no-progress"], capsys)
    assert code == 0, err
    tbl = pq.read_table(tmp_path / "o2" / "reachability")
    assert tbl.schema.field("node").type == pa.int64()
    assert accumulate(tbl, ["root", "node"], 0) == {(1, 1): 1, (1, big): 1, (1, 2): 1}
    assert accumulate(tbl, ["root", "node"], 1) == {(1, 1): 1, (1, big): 1, (1, 2): 1,
                                                    (1, big + 1): 1}


def test_input_columns_named_count_are_decoded(tmp_path, capsys):
    # A string column called "count": as count's key (the count is then "count_") and
    # as a join column, it comes back as the strings, not as their int64 codes.
    inp = tmp_path / "in"
    write(str(inp / "input" / "part-0.parquet"), count=["x", "y", "x"], time=[0, 0, 1])
    write(str(inp / "left" / "part-0.parquet"), k=[1, 2], count=["x", "y"], time=[0, 0])
    write(str(inp / "right" / "part-0.parquet"), k=[1, 2], b=["p", "q"], time=[0, 1])
    code, out, err = run_cli(["run", "count", "--input", inp, "--output", tmp_path / "o",
                              "--no-progress"], capsys)
    assert code == 0, err
    tbl = pq.read_table(tmp_path / "o" / "count")
    assert tbl.schema.field("count").type == pa.string()
    assert accumulate(tbl, ["count", "count_"], 1) == {("x", 2): 1, ("y", 1): 1}
    code, out, err = run_cli(["run", "join", "--input", inp, "--output", tmp_path / "o",
                              "--no-progress"], capsys)
    assert code == 0, err
    tbl = pq.read_table(tmp_path / "o" / "join")
    assert accumulate(tbl, ["k", "count", "b"], 1) == {(1, "x", "p"): 1, (2, "y", "q"): 1}


def test_error_in_a_worker_is_one_line_exit_2(tmp_path, capsys):
    # diffs that overflow when a worker sums them: the same one-line error and exit
    # status as with one worker, not the worker's traceback.
    inp = tmp_path / "in"
    write(str(inp / "input" / "part-0.parquet"), k=[1, 1, 2, 3], time=[0, 0, 0, 0],
          diff=[2**62, 2**62, 1, 1])
    for workers in (1, 2):
        code, _, err = run_cli(["run", "count", "--input", inp, "--output",
                                tmp_path / f"o{workers}", "--no-progress", "--workers",
                                workers], capsys)
        assert code == 2 and "OverflowError" in one_line(err), err


def test_join_value_columns_of_one_name_and_two_types(tmp_path, capsys):
    # Left v: string, right v: double are two columns (v, v_right), each decoded to
    # its own type; the keys are still compared (an int key against a string key is
    # refused).
    inp = tmp_path / "in"
    write(str(inp / "left" / "part-0.parquet"), k=[1, 2], v=["a", "b"], time=[0, 1])
    write(str(inp / "right" / "part-0.parquet"), k=[1, 2, 2], v=[1.5, 2.5, -0.5],
          time=[0, 0, 1])
    code, out, err = run_cli(["run", "join", "--input", inp, "--output", tmp_path / "o",
                              "--no-progress"], capsys)
    assert code == 0, err
    tbl = pq.read_table(tmp_path / "o" / "join")
    assert tbl.schema.field("v").type == pa.string()
    assert tbl.schema.field("v_right").type == pa.float64()
    assert accumulate(tbl, ["k", "v", "v_right"], 0) == {(1, "a", 1.5): 1}
    assert accumulate(tbl, ["k", "v", "v_right"], 1) == {
        (1, "a", 1.5): 1, (2, "b", 2.5): 1, (2, "b", -0.5): 1}
    write(str(inp / "right" / "part-0.parquet"), k=["x"], v=[1.0], time=[0])
    code, _, err = run_cli(["run", "join", "--input", inp, "--output", tmp_path / "o2",
                            "--no-progress"], capsys)
    assert code == 2 and "column 'k'" in one_line(err)


def test_error_part_way_says_what_it_left_and_names_flags(tmp_path, capsys):
    # A string key in the third file: the error, then a note that the output holds
    # the part files written before it (a part per run: --part-rows 1).
    inp = tmp_path / "in"
    for f in range(3):
        write(str(inp / "input" / f"part-{f}.parquet"), k=[f] if f < 2 else ["x"],
              time=[f])
    code, _, err = run_cli(["run", "count", "--input", inp, "--output", tmp_path / "o",
                            "--part-rows", 1, "--no-progress"], capsys)
    assert code == 2 and "part-2.parquet: column 'k'" in one_line(err)
    notes = [ln for ln in err.splitlines() if ln.startswith("ddnumba: note: ")]
    assert len(notes) == 1 and "is incomplete: 2 part file(s)" in notes[0], err
    assert len(os.listdir(tmp_path / "o" / "count")) == 2
    # By default the changes were still gathering: nothing written, nothing to note.
    code, _, err = run_cli(["run", "count", "--input", inp, "--output", tmp_path / "o1",
                            "--no-progress"], capsys)
    assert code == 2 and "part-2.parquet: column 'k'" in one_line(err)
    assert "ddnumba: note" not in err
    assert not os.path.isdir(tmp_path / "o1" / "count") or \
        not os.listdir(tmp_path / "o1" / "count")
    # times going backwards (found before anything is written: no note), the error
    # naming --order, the CLI flag
    write(str(inp / "input" / "part-2.parquet"), k=[2], time=[0])
    code, _, err = run_cli(["run", "count", "--input", inp, "--output", tmp_path / "o2",
                            "--no-progress"], capsys)
    line = one_line(err)
    assert code == 2 and "times go backwards" in line and "ddnumba: note" not in err
    assert "--order sort or --order any" in line and "order='" not in line
    # time columns that do not fit --time-dims: the flag, and no contradiction
    write(str(tmp_path / "t" / "input" / "part-0.parquet"), k=[1], time=[0], time_1=[0])
    code, _, err = run_cli(["run", "count", "--input", tmp_path / "t", "--output",
                            tmp_path / "o3", "--time-dims", 2, "--no-progress"], capsys)
    line = one_line(err)
    assert code == 2 and "--time-dims 2 the time columns are ['time_0', 'time_1']" in line
    assert "pass" not in line
    code, _, err = run_cli(["run", "count", "--input", tmp_path / "t", "--output",
                            tmp_path / "o3", "--time-dims", 3, "--no-progress"], capsys)
    assert code == 2 and "(pass --time-dims 2)" in one_line(err)


def test_key_is_refused_where_unused_and_empty_output_said(tmp_path, capsys):
    g = tmp_path / "g"
    write(str(g / "roots" / "part-0.parquet"), node=[1], time=[0])
    write(str(g / "edges" / "part-0.parquet"), src=[1], dst=[2], time=[0])
    for q in ("reachability", "connected-components"):
        code, _, err = run_cli(["run", q, "--input", g, "--output", tmp_path / "o",
                                "--key", "src", "--no-progress"], capsys)
        assert code == 2 and "--key applies to the count and join" in one_line(err)
    # a stream whose changes cancel: no part file, and the summary says so
    write(str(tmp_path / "z" / "input" / "part-0.parquet"), k=[1, 1], time=[0, 0],
          diff=[1, -1])
    code, out, err = run_cli(["run", "count", "--input", tmp_path / "z", "--output",
                              tmp_path / "oz", "--no-progress"], capsys)
    assert code == 0, err
    assert "count: no updates, nothing written" in out
    assert not os.path.exists(tmp_path / "oz" / "count")


def test_null_input_names_file_and_column(tmp_path, capsys):
    inp = tmp_path / "in"
    write(str(inp / "input" / "part-0.parquet"), w=pa.array(["a", None]), time=[0, 0])
    code, _, err = run_cli(["run", "count", "--input", inp, "--output", tmp_path / "o",
                            "--no-progress"], capsys)
    assert code == 2
    assert "part-0.parquet: column 'w': 1 null" in one_line(err)
    assert not os.path.exists(tmp_path / "o" / "count" / "part-00000.parquet")


# ------------------------------------------------------------------ the demo
def test_bfs_reference_matches_networkx():
    rng = np.random.default_rng(0)
    for n, m in ((1, 0), (5, 3), (50, 80), (200, 150)):
        src, dst = rng.integers(0, n, m), rng.integers(0, n, m)
        roots = rng.choice(n, size=min(3, n), replace=False)
        r, v = bfs_reachable(src, dst, roots, n)
        g = nx.DiGraph(list(zip(src.tolist(), dst.tolist())))
        g.add_nodes_from(roots.tolist())
        want = {(int(a), b) for a in roots for b in nx.descendants(g, int(a)) | {int(a)}}
        assert set(zip(r.tolist(), v.tolist())) == want


def _console_script():
    script = os.path.join(os.path.dirname(sys.executable), "ddnumba")
    return [script] if os.path.exists(script) else [sys.executable, "-m", "ddnumba.cli"]


@pytest.mark.slow
@pytest.mark.spark
def test_demo_small_matches_and_writes_outputs(tmp_path):
    pytest.importorskip("pyspark")
    out = tmp_path / "demo"
    proc = subprocess.run(
        _console_script() + ["demo", "--nodes", "150", "--changes", "60", "--batch", "20",
                             "--roots", "3", "--out", str(out), "--seed", "5"],
        capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "result: match" in proc.stdout
    assert "reachability: match" in proc.stdout and "out_degree: match" in proc.stdout
    for word in ("throughput", "latency p50", "latency p99", "latency max"):
        assert word in proc.stdout
    png = out / "latency_cdf.png"
    assert png.exists() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "Parquet part files" in proc.stdout
    for name in ("reachability", "out_degree"):
        files = [f for f in os.listdir(out / "output" / name) if f.endswith(".parquet")]
        # the load's output, then each run's changes as the next part file
        assert len(files) >= 2, files
        tbl = pq.read_table(out / "output" / name / sorted(files)[0])
        assert {"time", "diff"} <= set(tbl.column_names)
        assert set(pq.read_table(out / "output" / name / sorted(files)[0])
                   .column("time").to_pylist()) == {0}
    assert len([d for d in os.listdir(out / "input" / "edges")
                if d.startswith("batch=")]) == 4
    summary = json.loads((out / "summary.json").read_text())
    assert summary["match"] is True and summary["stats"]["changes"] == 60
    assert summary["stats"]["runs"] == 3


def test_run_with_two_time_coordinates(tmp_path, capsys):
    inp = tmp_path / "in"
    write(str(inp / "roots" / "part-0.parquet"), node=[0], time_0=[0], time_1=[0])
    # (0, 0): 0 -> 1; (0, 1): 1 -> 2; (1, 0): 0 -> 3. At (0, 5) node 3 is not reached,
    # at (1, 0) node 2 is not: the product order keeps the two coordinates apart.
    write(str(inp / "edges" / "part-0.parquet"), src=[0, 1], dst=[1, 2], time_0=[0, 0],
          time_1=[0, 1])
    write(str(inp / "edges" / "part-1.parquet"), src=[0], dst=[3], time_0=[1], time_1=[0])
    code, _, err = run_cli(["run", "reachability", "--input", inp, "--output",
                            tmp_path / "out", "--time-dims", "2", "--no-progress"], capsys)
    assert code == 0, err
    rows = pq.read_table(tmp_path / "out" / "reachability").to_pylist()

    def at(t0, t1):
        acc = Counter()
        for r in rows:
            if r["time_0"] <= t0 and r["time_1"] <= t1:
                acc[r["node"]] += r["diff"]
        return {k for k, v in acc.items() if v}

    assert at(0, 0) == {0, 1}
    assert at(0, 5) == {0, 1, 2}
    assert at(1, 0) == {0, 1, 3}
    assert at(1, 1) == {0, 1, 2, 3}


def test_python_dash_m_ddnumba_is_the_command():
    proc = subprocess.run([sys.executable, "-m", "ddnumba", "run", "--help"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "--input DIR" in proc.stdout and "130 interrupted" in proc.stdout
    proc = subprocess.run([sys.executable, "-m", "ddnumba", "run", "count"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "--input" in proc.stderr


# --------------------------------------------- query files and --overwrite (session 37 QA)


def _query(tmp_path, body, name="q.py"):
    q = tmp_path / name
    q.write_text("import pyarrow as pa\n" + body)
    return q


def test_query_file_names_and_values_are_checked_before_anything_is_touched(tmp_path,
                                                                           capsys):
    inp = tmp_path / "proj" / "in"
    write(str(inp / "input" / "part-0.parquet"), k=[1, 2], time=[0, 1])
    precious = tmp_path / "proj" / "precious.txt"
    precious.write_text("keep me")
    out = tmp_path / "proj" / "out"
    os.makedirs(out)
    cases = {
        "{'input': i}, {'..': c.distinct()}": "output name '..'",
        "{'input': i}, {'/tmp/elsewhere': c.distinct()}": "output name '/tmp/elsewhere'",
        "{'input': i}, {'_hidden': c.distinct()}": "output name '_hidden'",
        "{'../in/input': i}, {'o': c.distinct()}": "input name '../in/input'",
        "{'input': c}, {'o': c.distinct()}": "must be an input handle",
        "{'input': __import__('ddnumba').Dataflow().new_input(['k'])[0]}, "
        "{'o': c.distinct()}": "belongs to another Dataflow",
    }
    for ret, needle in cases.items():
        q = _query(tmp_path, "def build(df):\n    i, c = df.new_input(['k'])\n"
                             f"    return {ret}\n")
        code, _, err = run_cli(["run", q, "--input", inp, "--output", out, "--overwrite",
                                "--no-progress"], capsys)
        assert code == 2 and needle in one_line(err), (ret, err)
        assert precious.read_text() == "keep me" and os.path.isdir(out)
    for types in ("{'o': {'k': 'string'}}", "[('o', 1)]"):
        q = _query(tmp_path, "def build(df):\n    i, c = df.new_input(['k'])\n"
                             "    return {'input': i}, {'o': c.distinct()}\n"
                             f"TYPES = {types}\n")
        code, _, err = run_cli(["run", q, "--input", inp, "--output", out,
                                "--no-progress"], capsys)
        assert code == 2 and "TYPES must map output names" in one_line(err)
    # --output (or an output in it) that is a file
    f = tmp_path / "afile"
    f.write_text("x")
    code, _, err = run_cli(["run", "count", "--input", inp, "--output", f,
                            "--no-progress"], capsys)
    assert code == 2 and "--output is a file" in one_line(err)
    (out / "count").write_text("x")
    code, _, err = run_cli(["run", "count", "--input", inp, "--output", out,
                            "--no-progress"], capsys)
    assert code == 2 and "is a file, not a directory" in one_line(err)


def test_overwrite_replaces_an_output_only_when_the_run_completes(tmp_path, capsys):
    inp = tmp_path / "in"
    write(str(inp / "input" / "part-0.parquet"), k=[1, 2, 2], time=[0, 1, 1])
    out = tmp_path / "out"
    code, _, err = run_cli(["run", "count", "--input", inp, "--output", out,
                            "--no-progress"], capsys)
    assert code == 0, err
    before = {f: (out / "count" / f).read_bytes() for f in os.listdir(out / "count")}
    # a file whose times go backwards: planned late for a query file, after the
    # old output used to be deleted
    write(str(inp / "input" / "part-1.parquet"), k=[3], time=[5])
    write(str(inp / "input" / "part-2.parquet"), k=[3], time=[2])
    q = _query(tmp_path, "def build(df):\n    i, c = df.new_input(['k'])\n"
                         "    return {'input': i}, {'count': c.count()}\n")
    code, _, err = run_cli(["run", q, "--input", inp, "--output", out, "--overwrite",
                            "--no-progress"], capsys)
    assert code == 2 and "was left as it was" in err, err
    assert {f: (out / "count" / f).read_bytes() for f in os.listdir(out / "count")} \
        == before
    assert os.listdir(out) == ["count"]                   # no staging left behind
    # fixed: the new output replaces the old one whole
    os.remove(inp / "input" / "part-2.parquet")
    code, _, err = run_cli(["run", q, "--input", inp, "--output", out, "--overwrite",
                            "--no-progress"], capsys)
    assert code == 0, err
    assert os.listdir(out) == ["count"]
    got = pq.read_table(out / "count")
    assert accumulate(got, ["k", "count"], 9) == {(1, 1): 1, (2, 2): 1, (3, 1): 1}


def test_an_error_in_query_code_part_way_says_what_was_left(tmp_path, capsys):
    inp = tmp_path / "in"
    for t in range(3):
        write(str(inp / "input" / f"part-{t}.parquet"), k=[t], time=[t])
    q = _query(tmp_path, "def boom(k):\n"
                         "    if (k == 2).any():\n"
                         "        raise RuntimeError('user code failed')\n"
                         "    return k + 0\n"
                         "def build(df):\n    i, c = df.new_input(['k'])\n"
                         "    return {'input': i}, {'o': c.map(boom, names=['k'])}\n")
    with pytest.raises(RuntimeError, match="user code failed"):
        main(["run", str(q), "--input", str(inp), "--output", str(tmp_path / "out"),
              "--part-rows", "1", "--no-progress"])
    err = capsys.readouterr().err
    assert "out/o is incomplete" in err


def test_an_empty_spark_stream_is_an_input_without_changes(tmp_path, capsys):
    # A partitioned Spark export of no rows holds only _SUCCESS: reachability with
    # no root changes runs (nothing is reachable), and count of nothing is empty.
    inp = tmp_path / "in"
    os.makedirs(inp / "roots")
    (inp / "roots" / "_SUCCESS").write_text("")
    write(str(inp / "edges" / "part-0.parquet"), src=[1, 2], dst=[2, 3], time=[0, 0])
    code, out, err = run_cli(["run", "reachability", "--input", inp, "--output",
                              tmp_path / "out", "--no-progress"], capsys)
    assert code == 0, err
    assert "reachability: no updates" in out
    os.makedirs(inp / "input")
    (inp / "input" / "_SUCCESS").write_text("")
    code, out, err = run_cli(["run", "count", "--input", inp, "--output",
                              tmp_path / "out2", "--no-progress"], capsys)
    assert code == 0, err
    assert "count: no updates" in out and "read 0 input updates" in out


def test_count_by_a_partition_column(tmp_path, capsys):
    # Spark's partitionBy("day") keeps day only in the directory names: --key day
    # reads it from there (it used to be refused, and without --key the count was
    # silently by another column with nothing said).
    inp = tmp_path / "in"
    write(str(inp / "input" / "day=1" / "p.parquet"), user=["a", "b"], time=[0, 0])
    write(str(inp / "input" / "day=2" / "p.parquet"), user=["a"], time=[1])
    code, _, err = run_cli(["run", "count", "--key", "day", "--input", inp, "--output",
                            tmp_path / "out", "--no-progress"], capsys)
    assert code == 0, err
    got = pq.read_table(tmp_path / "out" / "count")
    assert accumulate(got, ["day", "count"], 1) == {(1, 2): 1, (2, 1): 1}


def test_each_input_file_is_planned_once(tmp_path, capsys, monkeypatch):
    # The built-in queries read each file's footer to learn the columns, then fed
    # the same files through a second reader that read them all again.
    from ddnumba.io import parquet as ddpq
    inp = tmp_path / "in"
    for t in range(5):
        write(str(inp / "input" / f"part-{t}.parquet"), k=[t, t + 1], time=[t, t])
    planned = Counter()
    real = ddpq.ChangeReader._plan

    def counting(self, path, wanted):
        planned[path] += 1
        return real(self, path, wanted)

    monkeypatch.setattr(ddpq.ChangeReader, "_plan", counting)
    code, _, err = run_cli(["run", "count", "--input", inp, "--output", tmp_path / "out",
                            "--no-progress"], capsys)
    assert code == 0, err
    assert len(planned) == 5 and set(planned.values()) == {1}
    got = pq.read_table(tmp_path / "out" / "count")
    assert accumulate(got, ["k", "count"], 4) == {(0, 1): 1, (1, 2): 1, (2, 2): 1,
                                                  (3, 2): 1, (4, 2): 1, (5, 1): 1}


def test_overwrite_of_a_nested_output_leaves_nothing_beside_it(tmp_path, capsys):
    inp = tmp_path / "in"
    write(str(inp / "input" / "part-0.parquet"), k=[1, 2], time=[0, 1])
    q = _query(tmp_path, "def build(df):\n    i, c = df.new_input(['k'])\n"
                         "    return {'input': i}, {'a/b': c.distinct()}\n")
    for _ in range(2):
        code, _, err = run_cli(["run", q, "--input", inp, "--output", tmp_path / "out",
                                "--overwrite", "--no-progress"], capsys)
        assert code == 0, err
    assert os.listdir(tmp_path / "out") == ["a"]
    assert os.listdir(tmp_path / "out" / "a") == ["b"]
    assert accumulate(pq.read_table(tmp_path / "out" / "a" / "b"), ["k"], 1) == {
        (1,): 1, (2,): 1}

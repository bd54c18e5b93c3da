"""``ddnumba compile``: compile ddnumba's Numba code into Numba's on-disk cache ahead of
its first use, then check it on small queries.

A machine's first native ``run()`` compiles the runtime for minutes (two to three on
this project's 2-core VM). A container image, a CI job's setup step or a service's
deployment can pay that once, in its own step, so that the first real query starts in
seconds: ``ddnumba compile`` compiles (or finds in the cache) the native runtime, runs
each built-in query (reachability, connected components, count, join) on a few rows of
Parquet change batches written to a temporary directory, on the native engine and on
the Python one (which runs several time coordinates and workers), compares the written
results with the answers they must have, and says where Numba keeps the cache.
Whatever else a first run compiles (reading and writing Parquet, the inputs' and
captures' entry points, the Python engine's kernels: ~40 s more on a first use) is
compiled and cached by those queries too.

Exit status 0 when everything is ready and cached; 1 when a query's answer is wrong or
Numba's cache could not be written (then every new process compiles again: set
``NUMBA_CACHE_DIR`` to a writable directory).
"""
from __future__ import annotations

import contextlib
import io
import os
import sys
import tempfile
import time

__all__ = ["precompile", "QUERIES", "ENGINES"]

# The engines each query runs on ("python" also for several time coordinates and
# workers, which its kernels serve).
ENGINES = ("native", "python")

# The built-in queries checked, each as (inputs {name: {column: values}} with the
# change columns time and diff, output name, output columns, the output's final
# accumulated rows). Every input changes at time 0 and again at time 1 (retractions
# among them), so that each query runs twice and forgets its first time's history.
QUERIES = {
    "reachability": (
        {"roots": {"node": [0], "time": [0], "diff": [1]},
         "edges": {"src": [0, 1, 2, 3, 1, 0], "dst": [1, 2, 0, 4, 2, 3],
                   "time": [0, 0, 0, 0, 1, 1], "diff": [1, 1, 1, 1, -1, 1]}},
        "reachability", ("root", "node"),
        {(0, 0), (0, 1), (0, 3), (0, 4)}),
    "connected-components": (
        {"edges": {"src": [0, 1, 3, 5, 1], "dst": [1, 2, 4, 6, 2],
                   "time": [0, 0, 0, 0, 1], "diff": [1, 1, 1, 1, -1]}},
        "connected_components", ("node", "label"),
        {(0, 0), (1, 0), (3, 3), (4, 3), (5, 5), (6, 5)}),
    "count": (
        {"input": {"key": [1, 1, 2, 7, 1], "time": [0, 0, 0, 0, 1],
                   "diff": [1, 1, 1, 1, -1]}},
        "count", ("key", "count"),
        {(1, 1), (2, 1), (7, 1)}),
    "join": (
        {"left": {"key": [1, 2, 2, 2], "a": [10, 20, 21, 21], "time": [0, 0, 0, 1],
                  "diff": [1, 1, 1, -1]},
         "right": {"key": [1, 1, 2, 3], "b": [100, 101, 200, 300],
                   "time": [0, 0, 0, 1], "diff": [1, 1, 1, 1]}},
        "join", ("key", "a", "b"),
        {(1, 10, 100), (1, 10, 101), (2, 20, 200)}),
}


def _say(out, msg):
    print(f"ddnumba compile: {msg}", file=out, flush=True)


def _cache_place(dispatcher):
    """Where Numba's cache keeps ``dispatcher``'s compiled code (None if not known)."""
    try:
        return dispatcher._cache._cache_path
    except AttributeError:      # (a private part of Numba, or caching off)
        return None


def _runtime():
    """Compile the native runtime, or load it from the cache, through a small
    dataflow's ``prepare()``. Returns (seconds, what happened: 'compiled', 'loaded'
    or 'ready' (compiled in this process already, or the cache's state unknown), the
    number of the runtime's signatures cached afterwards (None: unknown))."""
    import ddnumba as dd
    from ddnumba import algorithms as alg
    before = None if _compiled_here() else _cached_runtimes()
    # (a compile of more than a few seconds is announced on stderr by prepare())
    df = dd.Dataflow(engine="native")
    _, roots = df.new_input(["node"])
    _, edges = df.new_input(["src", "dst"])
    alg.reachability(roots, edges).capture()
    t0 = time.perf_counter()
    df.prepare()
    took = time.perf_counter() - t0
    df.close()
    what = "ready" if before is None else "compiled" if before == 0 else "loaded"
    return took, what, _cached_runtimes()


def _compiled_here():
    """Whether this process has compiled (or loaded) the native runtime already."""
    from ddnumba.kernels import runtime as rt
    from ddnumba.native import _cold
    return not _cold(rt.run)


def _cached_runtimes():
    """How many signatures of the native runtime Numba's cache holds for the current
    sources (0: a process would compile it; None: not known)."""
    from ddnumba.kernels import runtime as rt
    from ddnumba.native import _cache_entries
    return _cache_entries(rt.run)


def _accumulated(path, cols):
    """The rows of the changes written under ``path`` whose diffs do not sum to zero,
    and the sum of each (summed by pyarrow)."""
    import pyarrow.parquet as pq
    from ddnumba.io.parquet import list_files
    files = list_files(path)
    if not files:
        return {}
    import pyarrow as pa
    t = pa.concat_tables([pq.read_table(f) for f in files])
    g = t.group_by(list(cols)).aggregate([("diff", "sum")])
    rows = zip(*(g.column(c).to_pylist() for c in cols), g.column("diff_sum").to_pylist())
    return {tuple(r[:-1]): r[-1] for r in rows if r[-1] != 0}


@contextlib.contextmanager
def _engine(name):
    """``DDNUMBA_ENGINE`` set to ``name`` inside the block (the engine ``ddnumba run``'s
    dataflows take), and as it was after."""
    old = os.environ.get("DDNUMBA_ENGINE")
    os.environ["DDNUMBA_ENGINE"] = name
    try:
        yield
    finally:
        if old is None:
            del os.environ["DDNUMBA_ENGINE"]
        else:
            os.environ["DDNUMBA_ENGINE"] = old


def _check_query(query, spec, work, engine="native"):
    """Write ``query``'s inputs under ``work``, run it through ``ddnumba run`` on
    ``engine`` and compare its output's final rows with the expected ones; returns None
    or what was wrong."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from ddnumba.cli import _parser, _run
    inputs, name, cols, want = spec
    inp = os.path.join(work, engine, query, "in")
    outp = os.path.join(work, engine, query, "out")
    for sub, table in inputs.items():
        os.makedirs(os.path.join(inp, sub))
        pq.write_table(pa.table(table), os.path.join(inp, sub, "part-00000.parquet"))
    args = _parser().parse_args(["run", query, "--input", inp, "--output", outp,
                                 "--no-progress"])
    with contextlib.redirect_stdout(io.StringIO()), _engine(engine):
        _run(args)
    got = _accumulated(os.path.join(outp, name), cols)
    expected = {r: 1 for r in want}
    if got != expected:
        return (f"{query} ({engine} engine): the output holds {sorted(got.items())}, not "
                f"{sorted(expected.items())} (rows and counts)")
    return None


def precompile(out=None) -> int:
    """What ``ddnumba compile`` does (see the module's docstring); messages go to
    ``out`` (default stdout). Returns the exit status."""
    out = sys.stdout if out is None else out
    from ddnumba.kernels import runtime as rt
    took, what, cached = _runtime()
    verb = {"compiled": "compiled in", "loaded": "loaded from the cache in",
            "ready": "ready in"}[what]
    _say(out, f"native runtime {verb} {took:.1f} s")
    t0 = time.perf_counter()
    wrong = []
    with tempfile.TemporaryDirectory(prefix="ddnumba-compile-") as work:
        for engine in ENGINES:
            for query, spec in QUERIES.items():
                bad = _check_query(query, spec, work, engine)
                if bad is not None:
                    wrong.append(bad)
    took = time.perf_counter() - t0
    for bad in wrong:
        _say(out, f"MISMATCH: {bad}")
    if wrong:
        _say(out, "the compiled code gives wrong answers: please report this "
                  "(with your Numba, NumPy and CPU)")
        return 1
    _say(out, f"{', '.join(QUERIES)} over Parquet change batches, on the "
              f"{' and the '.join(ENGINES)} engine: answers checked ({took:.1f} s)")
    place = _cache_place(rt.run)
    if cached == 0:
        _say(out, f"Numba's cache holds no native runtime{f' (in {place})' if place else ''}"
                  f": every new process will compile it again; set NUMBA_CACHE_DIR to "
                  f"a writable directory")
        return 1
    if place:
        _say(out, f"cached in {place}")
    return 0

"""The ``ddnumba`` command: the demo, and incremental queries over Parquet changes.

``ddnumba demo``
    Spark generates a changing graph, ddnumba maintains reachability and out-degrees,
    Spark checks the answer (see :mod:`ddnumba.demo`).

``ddnumba compile``
    Compiles the native runtime into Numba's cache ahead of a first run and checks
    the built-in queries on a few rows (see :mod:`ddnumba.precompile`).

``ddnumba run QUERY --input DIR --output DIR``
    Reads change streams (Parquet; columns, ``time`` or ``time_0..``, ``diff``) from
    subdirectories of ``--input``, runs a query incrementally and writes each output's
    changes to ``--output/NAME/``, decoded to the input types: after every run (a round
    of input batches) what the output gained becomes the next ``part-NNNNN.parquet``,
    and the output forgets its history up to the last complete time (with several
    time coordinates, up to the output frontier stepped back by one in each), so
    memory follows the outputs' size, not the input's length. QUERY
    is a built-in or a Python file:

    ===================== =================== ========================================
    query                 inputs              output (columns)
    ===================== =================== ========================================
    reachability          roots/, edges/      reachability (root, node)
    connected-components  edges/              connected_components (node, label)
    count                 input/              count (key, count); ``--key`` picks the
                                              key column (default: the first)
    join                  left/, right/       join (key, left..., right...); ``--key``
                                              names the join column (default: first)
    FILE.py               one per input       one per output
    ===================== =================== ========================================

    A Python file defines ``build(df)`` returning ``(inputs, outputs)``: dicts from
    names to input handles (read from ``--input/NAME/`` with the handle's column names)
    and to collections (written to ``--output/NAME/``). An optional ``TYPES`` dict maps
    output names to ``{column: pyarrow type}`` for columns whose names do not match an
    input column.

Exit status: 0 on success, 1 when the demo's check finds a mismatch or a query file's
own code raises (with its traceback), 2 for bad usage or bad input (one line on
stderr: ``ddnumba: error: ...``), 130 when interrupted. After an error part-way a
``ddnumba: note: ...`` line says what each output was left as: incomplete, or (with
``--overwrite``, which swaps a new output in only when the run completes) as it was.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import re
import shutil
import sys

__all__ = ["main", "BUILTIN_QUERIES"]

BUILTIN_QUERIES = ("reachability", "connected-components", "count", "join")


class UsageError(Exception):
    """Bad usage or bad input: reported on one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(f"{message} (see '{self.prog} --help')")


# ``ddnumba run`` gathers an output's changes over runs into part files of about
# PART_ROWS rows (so a stream of thousands of small input files does not become as
# many small output files), writing at least every PART_RUNS runs (the capture warns
# when updates wait 1,000 runs) and at the end.
PART_ROWS = 100_000
PART_RUNS = 500


def _parser():
    p = _Parser(prog="ddnumba", description="Differential dataflow for Python: "
                "incremental queries over Parquet change streams.")
    from ddnumba import __version__
    p.add_argument("--version", action="version", version=f"ddnumba {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    d = sub.add_parser("demo", help="Spark -> ddnumba -> Spark round trip on a changing "
                       "graph (reachability and out-degree), with a latency summary",
                       description="Spark exports a random graph and a sliding window of "
                       "edge changes as Parquet change batches; ddnumba maintains "
                       "reachability and out-degrees over them and writes its output "
                       "changes back as Parquet; Spark recomputes the final answer and "
                       "the command prints match or MISMATCH, a summary and a latency "
                       "CDF plot. Needs PySpark and Java 17 or later.",
                       epilog="exit status: 0 match, 1 MISMATCH, 2 bad usage or no "
                       "Spark/Java, 130 interrupted")
    d.add_argument("--nodes", type=int, default=2_000, help="graph nodes (default 2000)")
    d.add_argument("--edges", type=int, default=None,
                   help="initial edges (default 2 * nodes)")
    d.add_argument("--roots", type=int, default=10, help="reachability roots (10)")
    d.add_argument("--changes", type=int, default=2_000,
                   help="edge changes in the sliding window (default 2000)")
    d.add_argument("--batch", type=int, default=100,
                   help="changes per run, each at its own time (default 100)")
    d.add_argument("--out", default="./ddnumba-demo-out",
                   help="output directory (default ./ddnumba-demo-out)")
    d.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    d.add_argument("--no-progress", action="store_true", help="no progress bars")

    sub.add_parser("compile", help="compile ddnumba's code into Numba's cache now (a "
                   "machine's first run otherwise compiles for minutes) and check it",
                   description="Compile the native runtime into Numba's on-disk cache "
                   "(or find it there), run each built-in query on a few rows of "
                   "Parquet change batches and check the answers, and say where the "
                   "cache is. For a container image or a setup step: later processes "
                   "start in seconds.",
                   epilog="exit status: 0 ready and cached, 1 a wrong answer or no "
                   "cache written (set NUMBA_CACHE_DIR to a writable directory), 130 "
                   "interrupted")

    r = sub.add_parser(
        "run", help="run a query over Parquet change streams",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Run a query incrementally over Parquet change streams (columns, "
        "time or time_0.., diff) and write each output's changes as Parquet.",
        epilog="inputs under --input, outputs under --output:\n"
        "  reachability          roots/, edges/  -> reachability/ (root, node)\n"
        "  connected-components  edges/          -> connected_components/ (node, label)\n"
        "  count                 input/          -> count/ (<key column>, count)\n"
        "  join                  left/, right/   -> join/ (key, left..., right...)\n"
        "  FILE.py               build(df) -> (inputs, outputs): one directory per "
        "name\n\nexit status: 0 ok, 1 an error in a query file's code (traceback), 2 bad "
        "usage or bad input, 130 interrupted\n\nEach command reads its inputs from the "
        "start: rerunning after more input files arrive recomputes every output "
        "(with --overwrite, which replaces an output only once the run completes).")
    r.add_argument("query", metavar="QUERY",
                   help=f"one of {', '.join(BUILTIN_QUERIES)}, or a Python file "
                   f"defining build(df)")
    r.add_argument("--input", required=True, metavar="DIR",
                   help="directory with one subdirectory of changes per input")
    r.add_argument("--output", required=True, metavar="DIR",
                   help="directory for the outputs (one subdirectory each)")
    r.add_argument("--time-dims", type=int, default=1, metavar="N",
                   help="time coordinates (time_0..time_{N-1}; default 1: time)")
    r.add_argument("--key", default=None, help="key column for count and join")
    r.add_argument("--order", choices=("check", "sort", "any"), default="check",
                   help="how files must be ordered in time (default check)")
    r.add_argument("--overwrite", action="store_true",
                   help="replace existing output subdirectories")
    r.add_argument("--workers", type=int, default=None, metavar="W",
                   help="worker processes (default: DDNUMBA_WORKERS, else 1)")
    r.add_argument("--part-rows", type=int, default=PART_ROWS, metavar="N",
                   help=f"write an output's changes as a part file once N of them have "
                   f"gathered, or {PART_RUNS} runs have passed, and at the end (default "
                   f"{PART_ROWS:,}; 1: a part file per run that changed it)")
    r.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


# --------------------------------------------------------------------------- run
def _input_dir(root, name):
    path = os.path.join(root, name)
    if not os.path.isdir(path):
        raise UsageError(f"{path}: missing input directory (this query reads "
                         f"'{name}/' under --input)")
    return path


def _refuse_overlap(target, name, inputs):
    """An output directory must neither be an input directory, nor lie inside one, nor
    hold one: ``--overwrite`` would delete input data, and a later run would read its
    own output as input."""
    t = os.path.realpath(target)
    for in_name, (_, path, _) in inputs.items():
        p = os.path.realpath(path)
        if t == p or t.startswith(p + os.sep) or p.startswith(t + os.sep):
            raise UsageError(f"{target}: output {name!r} would overlap input "
                             f"{in_name!r} ({path}); choose an --output outside the "
                             f"input directories")


def _reader(path, columns, args, enc):
    from ddnumba.io.parquet import read_changes
    return read_changes(path, columns, time_dims=args.time_dims, encoder=enc,
                        order=args.order)


def _schema_columns(path, args, enc, empty):
    """Data column names of a change directory (from its first file); ``empty`` for
    an empty stream (a Spark job's output without rows holds only ``_SUCCESS``),
    whose columns no file tells."""
    from ddnumba.io.parquet import list_files
    if not list_files(path):
        return list(empty)
    r = _reader(path, None, args, enc)
    # (partition columns, kept in name=value/ directory names, only for --key)
    _PARTITIONS[path] = list(r.partition_columns)
    _READERS[path] = r          # planned once: fed as it is when its columns serve
    return list(r.names)


def _with_key_first(cols, key, path):
    if key is None:
        return cols
    if key not in cols and key in _PARTITIONS.get(path, ()):
        return [key] + cols                 # a partition column: read from the path
    if key not in cols:
        raise UsageError(f"{path}: no column {key!r} for --key (columns: {cols})")
    return [key] + [c for c in cols if c != key]


_PARTITIONS = {}
_READERS = {}


def _builtin(query, df, args, enc):
    """The inputs ``{name: (handle, path, columns)}``, outputs ``{name: collection}``,
    output columns that carry an input column's values ``{output column: input
    column}`` (to decode them) and column pairs the query compares (to check their types)."""
    from ddnumba import algorithms as alg
    root = args.input
    if query == "reachability":
        rp, ep = _input_dir(root, "roots"), _input_dir(root, "edges")
        rcols = _schema_columns(rp, args, enc, ["node"])
        ecols = _schema_columns(ep, args, enc, ["src", "dst"])
        if len(rcols) != 1:
            raise UsageError(f"{rp}: roots need exactly one data column, found {rcols}")
        if len(ecols) != 2:
            raise UsageError(f"{ep}: edges need two data columns (src, dst), found "
                             f"{ecols}")
        rin, roots = df.new_input(rcols)
        ein, edges = df.new_input(ecols)
        out = {"reachability": alg.reachability(roots, edges)}
        inputs = {"roots": (rin, rp, rcols), "edges": (ein, ep, ecols)}
        node_cols = {"root": rcols[0], "node": rcols[0]}
    elif query == "connected-components":
        ep = _input_dir(root, "edges")
        ecols = _schema_columns(ep, args, enc, ["src", "dst"])
        if len(ecols) != 2:
            raise UsageError(f"{ep}: edges need two data columns (src, dst), found "
                             f"{ecols}")
        ein, edges = df.new_input(ecols)
        out = {"connected_components": alg.connected_components(edges)}
        inputs = {"edges": (ein, ep, ecols)}
        node_cols = {"node": ecols[0], "label": ecols[0]}
    elif query == "count":
        ip = _input_dir(root, "input")
        cols = _with_key_first(_schema_columns(ip, args, enc, [args.key or "key"]),
                               args.key, ip)
        iin, coll = df.new_input(cols)
        key = cols[0]
        out = {"count": coll.count(name="count" if key != "count" else "count_")}
        inputs = {"input": (iin, ip, cols)}
        # (named: an input column called "count" is decoded too, where output
        # columns of that name otherwise stay int64 counts)
        node_cols = {key: key}
    else:  # join
        lp, rp = _input_dir(root, "left"), _input_dir(root, "right")
        lcols = _with_key_first(_schema_columns(lp, args, enc, [args.key or "key"]),
                                args.key, lp)
        rcols = _with_key_first(_schema_columns(rp, args, enc, [args.key or "key"]),
                                args.key, rp)
        # The right input's value columns are named as the join output names them
        # (a _right suffix where a left column has the name), so that their types
        # are recorded apart from the left's: left v: string and right v: double are
        # two columns, v and v_right.
        from ddnumba.collection import _dedupe
        rnames = [rcols[0]] + _dedupe(lcols + rcols[1:])[len(lcols):]
        lin, left = df.new_input(lcols)
        rin, right = df.new_input(rnames)
        joined = left.join(right)
        out = {"join": joined}
        inputs = {"left": (lin, lp, lcols), "right": (rin, rp, dict(zip(rnames, rcols)))}
        # Every output column is named for the input column it comes from.
        node_cols = {c: c for c in joined.names}
        return inputs, out, node_cols, [("left", lcols[0], "right", rcols[0])]
    checks = []
    if query == "reachability":
        checks.append(("roots", rcols[0], "edges", ecols[0]))
    if query in ("reachability", "connected-components"):
        checks.append(("edges", ecols[0], "edges", ecols[1]))
    return inputs, out, node_cols, checks


def _user_query(path, df):
    if not os.path.isfile(path):
        raise UsageError(f"{path}: no such query file (built-in queries: "
                         f"{', '.join(BUILTIN_QUERIES)})")
    spec = importlib.util.spec_from_file_location("ddnumba_user_query", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    build = getattr(mod, "build", None)
    if not callable(build):
        raise UsageError(f"{path}: defines no build(df) function")
    res = build(df)
    if not (isinstance(res, tuple) and len(res) == 2 and isinstance(res[0], dict)
            and isinstance(res[1], dict)):
        raise UsageError(f"{path}: build(df) must return (inputs, outputs), two dicts "
                         f"from names to input handles and to collections")
    from ddnumba.dataflow import InputHandle
    for kind, d in (("input", res[0]), ("output", res[1])):
        for name in d:
            _check_name(path, kind, name)
    for name, h in res[0].items():
        if not isinstance(h, InputHandle):
            raise UsageError(f"{path}: input {name!r} must be an input handle (the "
                             f"first of df.new_input's pair), got {type(h).__name__}")
        if h.df is not df:
            raise UsageError(f"{path}: input {name!r} belongs to another Dataflow than "
                             f"the df build() was given (--workers and --time-dims "
                             f"apply to that one)")
    types = getattr(mod, "TYPES", {}) or {}
    import pyarrow as pa
    if not isinstance(types, dict) or not all(
            isinstance(v, dict) and all(isinstance(t, pa.DataType) for t in v.values())
            for v in types.values()):
        raise UsageError(f"{path}: TYPES must map output names to {{column: pyarrow "
                         f"type}} dicts (e.g. {{'out': {{'name': pa.string()}}}})")
    return res[0], res[1], types


def _beside(target, what):
    """A hidden name next to ``target`` (readers skip names starting with '.')."""
    head, tail = os.path.split(os.path.normpath(target))
    return os.path.join(head, f".{tail}.ddnumba-{what}-{os.getpid()}")


def _check_name(path, kind, name):
    """An input or output name is a directory under --input/--output, given
    relative to it: ``..`` or an absolute name would read, or with --overwrite
    replace, files elsewhere. An output's parts must not start with '.' or '_'
    (Parquet readers skip such directories)."""
    parts = name.replace(os.altsep or "/", "/").split("/") if isinstance(name, str) \
        else None
    bad = (parts is None or not name or os.path.isabs(name)
           or any(p in ("", ".", "..") for p in parts)
           or (kind == "output" and any(p.startswith((".", "_")) for p in parts)))
    if bad:
        raise UsageError(f"{path}: {kind} name {name!r} must be a relative path under "
                         f"--{kind} (no '..', '.', empty or absolute parts" +
                         (", none starting with '.' or '_', which readers skip)"
                          if kind == "output" else ")"))


def _check_same_kind(enc, checks, inputs):
    """Columns compared by a query (roots vs edge endpoints, join keys) must share an
    encoding family, or the comparison of codes would be meaningless."""
    from ddnumba.io.encoding import kind_of
    fam = {"uint64": "int"}
    for a_in, a_col, b_in, b_col in checks:
        ta = enc.types.get(a_col)
        tb = enc.types.get(b_col)
        if ta is None or tb is None:
            continue
        ka, kb = kind_of(ta), kind_of(tb)
        if fam.get(ka, ka) != fam.get(kb, kb):
            raise UsageError(f"{inputs[a_in][1]}: column {a_col!r} ({ta}) cannot be "
                             f"compared with column {b_col!r} ({tb}) of "
                             f"{inputs[b_in][1]}")


def _compared_int_types(enc, checks):
    """Integer columns a query compares carry one another's values into its outputs
    (reachability's nodes come from the roots and the edges): each such column's type
    for decoding is the common integer type of all the columns it is compared with."""
    from ddnumba.io.encoding import common_int_type, kind_of
    groups = {}
    for _, a, _, b in checks:
        ta, tb = enc.types.get(a), enc.types.get(b)
        ints = ("int", "uint64")
        if ta is None or tb is None or kind_of(ta) not in ints or kind_of(tb) not in ints:
            continue
        ga, gb = groups.get(a, {a}), groups.get(b, {b})
        g = ga | gb
        for c in g:
            groups[c] = g
    wide = {}
    for c, g in groups.items():
        t = None
        for x in sorted(g):
            t = enc.types[x] if t is None else common_int_type(t, enc.types[x])
        wide[c] = t
    return wide


def _run(args):
    import ddnumba as dd
    from ddnumba.io.encoding import encoder_for
    import pyarrow.parquet as pq

    from ddnumba.io.parquet import feed_all, write_changes
    if args.time_dims < 1:
        raise UsageError(f"--time-dims must be >= 1, got {args.time_dims}")
    if not os.path.isdir(args.input):
        raise UsageError(f"{args.input}: --input is not a directory")
    if args.workers is not None and args.workers < 1:
        raise UsageError(f"--workers must be >= 1, got {args.workers}")
    if args.part_rows < 1:
        raise UsageError(f"--part-rows must be >= 1, got {args.part_rows}")
    if args.key is not None and args.query not in ("count", "join"):
        raise UsageError(f"--key applies to the count and join queries only, not to "
                         f"{args.query}")
    df = dd.Dataflow(time_dims=args.time_dims, workers=args.workers)
    enc = encoder_for(df)
    types = {}
    if args.query in BUILTIN_QUERIES:
        inputs, outputs, from_input, checks = _builtin(args.query, df, args, enc)
    else:
        handles, collections, user_types = _user_query(args.query, df)
        inputs = {}
        for name, h in handles.items():
            inputs[name] = (h, _input_dir(args.input, name), list(h.names))
        outputs = collections
        from_input, checks = {}, []
        types = {k: dict(v) for k, v in user_types.items()}
    captures = {}
    for name, coll in outputs.items():
        if not hasattr(coll, "capture"):
            raise UsageError(f"output {name!r} is not a collection "
                             f"({type(coll).__name__})")
        # self-compacting: an output stays about as large as its collection however
        # long the input (its changes are streamed out run by run below)
        captures[name] = coll.capture(auto_compact=True)
        # read once before the first run: from here on every update is handed out
        # at its own time, however soon the capture compacts (a first run of more
        # than ~65k output updates compacts it before the first part file is written)
        captures[name].new_updates()
    if os.path.exists(args.output) and not os.path.isdir(args.output):
        raise UsageError(f"{args.output}: --output is a file, not a directory")
    targets, staged = {}, {}
    for name in captures:
        target = os.path.join(args.output, name)
        _refuse_overlap(target, name, inputs)
        if os.path.exists(target) and not os.path.isdir(target):
            raise UsageError(f"{target}: output {name!r} is a file, not a directory")
        if os.path.isdir(target) and os.listdir(target):
            if not args.overwrite:
                raise UsageError(f"{target}: output directory exists and is not empty "
                                 f"(pass --overwrite to replace it)")
            # Written beside it (a hidden name, which readers skip) and swapped in
            # when the run completes: until then the old output stays whole, and an
            # error part-way leaves it as it was.
            staged[name] = _beside(target, "new")
            if os.path.exists(staged[name]):
                shutil.rmtree(staged[name])
        targets[name] = target
    dirs = {name: staged.get(name, t) for name, t in targets.items()}
    written = {name: [0, 0] for name in captures}       # updates, part files

    def write_new(last=False):
        # An output's changes become the next part file of its dataset once
        # --part-rows of them (or PART_RUNS runs) have gathered, and at the end.
        # (Compared columns are checked first: nothing is written for a query whose
        # inputs cannot be compared.)
        _check_same_kind(enc, checks, inputs)
        wide = _compared_int_types(enc, checks)
        for name, cap in captures.items():
            node = cap._node
            if not last and node._pending_rows < args.part_rows and \
                    node._pending_runs < PART_RUNS:
                continue
            out_types = dict(types.get(name, {}))
            for out_col, in_col in from_input.items():
                if in_col in enc.types and out_col not in out_types:
                    out_types[out_col] = wide.get(in_col, enc.types[in_col])
            path = write_changes(cap, dirs[name], new=True, encoder=enc,
                                 types=out_types)
            if path is not None:
                written[name][0] += pq.read_metadata(path).num_rows
                written[name][1] += 1

    try:
        def source(h, p, cols):
            r = _READERS.get(p)
            return (h, r if r is not None and list(cols) == list(r.names) else p, cols)

        fed = feed_all([source(h, p, cols) for h, p, cols in inputs.values()],
                       progress=not args.no_progress, encoder=enc, order=args.order,
                       on_run=write_new)
        write_new(last=True)
    except BaseException:
        for name in captures:
            if name in staged:
                shutil.rmtree(staged[name], ignore_errors=True)
                _NOTES.append(f"{targets[name]} was left as it was (--overwrite "
                              f"replaces an output only when the run completes)")
            elif written[name][1]:
                _NOTES.append(f"{targets[name]} is incomplete: {written[name][1]} part "
                              f"file(s) were written before the error (rerun with "
                              f"--overwrite)")
        raise
    for name, new in staged.items():
        old = _beside(targets[name], "old")
        os.replace(targets[name], old)
        if os.path.isdir(new):
            os.replace(new, targets[name])
        else:                          # nothing was written: an empty output
            os.makedirs(targets[name])
        shutil.rmtree(old)
    for name in captures:
        n, k = written[name]
        if k:
            print(f"{name}: {n:,} updates in {k} part file(s) -> {targets[name]}")
        else:
            print(f"{name}: no updates, nothing written ({targets[name]})")
    print(f"read {fed:,} input updates from {len(inputs)} input(s)")
    df.close()
    return 0


def _demo(args):
    from ddnumba.demo import DemoConfig, run_demo
    cfg = DemoConfig(nodes=args.nodes, edges=args.edges, roots=args.roots,
                     changes=args.changes, batch=args.batch, out=args.out,
                     seed=args.seed, progress=not args.no_progress)
    try:
        cfg = cfg.resolved()
    except ValueError as e:
        raise UsageError(str(e)) from None
    try:
        import pyspark  # noqa: F401
    except ImportError:
        raise UsageError("the demo needs PySpark: pip install 'ddnumba[spark]'") from None
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        raise UsageError("the demo needs Java (17 or later) for Spark: none found on "
                         "PATH and JAVA_HOME is unset")
    result = run_demo(cfg)
    return 0 if result.match else 1


def main(argv=None) -> int:
    """Entry point of the ``ddnumba`` console script; returns the exit status."""
    from ddnumba.io.parquet import ChangeFileError
    from ddnumba.workers import WorkerError
    _NOTES.clear()      # (a previous call in this process that raised may have left some)
    _READERS.clear()
    _PARTITIONS.clear()
    try:
        args = _parser().parse_args(argv)
        if args.command is None:
            raise UsageError("a command is required: demo, compile or run (see 'ddnumba "
                             "--help')")
        if args.command == "demo":
            return _demo(args)
        if args.command == "compile":
            from ddnumba.precompile import precompile
            return precompile()
        return _run(args)
    except UsageError as e:
        _error(str(e))
        return 2
    except (ChangeFileError, FileNotFoundError, FileExistsError) as e:
        _error(str(e))
        return 2
    except (ValueError, TypeError, OverflowError) as e:
        # Input the engine rejected (times before the frontier, mismatched columns...).
        _error(f"{type(e).__name__}: {e}")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write("ddnumba: interrupted\n")
        for note in _NOTES:
            sys.stderr.write(f"ddnumba: note: {note}\n")
        _NOTES.clear()
        return 130
    except WorkerError as e:
        # The same, found by a worker process (--workers): one line too.
        if e.kind not in ("ValueError", "TypeError", "OverflowError"):
            _notes()
            raise
        _error(f"{e.kind}: {e.text}")
        return 2
    except Exception:
        # An error in a query file's own code (or a bug): its traceback, exit 1,
        # and what the command left behind.
        _notes()
        raise


def _error(message):
    line = " ".join(str(message).split())
    # the library's messages name its keyword arguments; here they are flags
    line = re.sub(r"\border='(\w+)'", r"--order \1", line)
    line = re.sub(r"\btime_dims=(\d+)", r"--time-dims \1", line)
    sys.stderr.write(f"ddnumba: error: {line}\n")
    _notes()


def _notes():
    for note in _NOTES:
        sys.stderr.write(f"ddnumba: note: {note}\n")
    _NOTES.clear()
    sys.stderr.flush()


# Said after an error (``_error``): what the failed command left behind.
_NOTES = []


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

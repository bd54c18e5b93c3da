"""The native engine: a dataflow compiled into one program for the compiled runtime.

:mod:`ddnumba.kernels.runtime` executes a whole dataflow (loops included) inside one
compiled call per :meth:`Dataflow.run`; this module translates the graph that the
:class:`~ddnumba.collection.Collection` methods built into that runtime's *program*
(arrays of operator kinds, wiring and parameters), owns the runtime's state, feeds the
inputs, calls user functions back when the compiled code asks, and hands captured
output and frontiers back to the Python objects users hold (``Captured``, ``Probe``).

Which engine runs a dataflow: ``Dataflow(engine=...)`` or the ``DDNUMBA_ENGINE``
environment variable: ``"auto"`` (default) uses the native engine whenever it supports
the graph, ``"native"`` requires it (``ValueError`` naming what is unsupported),
``"python"`` always steps operators from Python. The native engine supports one outer
time coordinate, one worker and loops that are not nested; every operator of the
library is supported (user functions are called back from the compiled code; ``map``
functions that return their argument columns, such as ``lambda a, b: (b, a)``, run
as native projections; inside sequential loops, so do maps whose columns add columns
or constants, as ``bfs``'s ``lambda n, k, d: (d, k + 1)`` does, and filters comparing
such sums: see :meth:`~ddnumba.operators.linear.MapNode.affine` and
:meth:`~ddnumba.operators.linear.FilterNode.affine`). Both engines give identical
results; the Python engine is the reference the tests compare against.

Loops run round-wise (all the outer times of a run at once, round by round) or, with
``Dataflow(loops="sequential")`` (or ``DDNUMBA_LOOPS``), sequentially: one outer time
after another over hashed, always-compacted state (:mod:`ddnumba.kernels.seqloop`),
for the loops whose operators are all native (:func:`_sequential`);
:func:`_seq_program` compiles such a loop into local nodes and routes.

The graph is fixed at the first ``run()``: adding operators afterwards raises.
"""
from __future__ import annotations

import sys
import warnings

# (signal.signal and signal.getsignal wrap these in enum conversions costing ~4 µs a
# call, 2% of a single-change run; each run makes three such calls, see _HeldCtrlC)
try:
    import _signal as _sig
except ImportError:         # pragma: no cover (not CPython)
    import signal as _sig

import numpy as np

from ddnumba.kernels import hooks as _hooks
from ddnumba.kernels import runtime as _rt
from ddnumba.kernels import seqloop as _seq
from ddnumba.updates import Updates

_I64 = np.int64
_INF = np.iinfo(np.int64).max

ENGINES = ("auto", "native", "python")

# The first run() in a process with nothing compiled yet first loads the runtime from
# Numba's cache (seconds) or compiles it (minutes: the first use on a machine, or after
# an upgrade). When that takes more than this many seconds a line on stderr says so,
# so that a first run does not look hung.
COMPILE_NOTICE_S = 10.0
COMPILE_NOTICE = ("ddnumba: compiling the native runtime for this machine (first use or "
                  "after an upgrade: a few minutes, once; cached afterwards)...")


class _SlowNotice:
    """Prints ``message`` on stderr if the ``with`` block is still running after
    ``delay`` seconds (from a timer thread: Numba's compiler lets it run), and when the
    block ends after that, how long it took."""

    def __init__(self, delay, message):
        import threading
        self.message = message
        self.said = threading.Event()
        self.timer = threading.Timer(delay, self._say)
        self.timer.daemon = True

    def _say(self):
        import sys
        self.said.set()
        print(self.message, file=sys.stderr, flush=True)

    def __enter__(self):
        import time
        self.t0 = time.perf_counter()
        self.timer.start()
        return self

    def __exit__(self, *exc):
        import sys
        import time
        self.timer.cancel()
        if self.said.is_set():
            print(f"ddnumba: ... done in {time.perf_counter() - self.t0:.0f} s",
                  file=sys.stderr, flush=True)
        return False


class _HeldCtrlC:
    """Ctrl-C while a run's compiled code executes, held for a safe point.

    Compiled code never lets Python handle a signal: Python runs the SIGINT handler at
    the first bytecode it executes afterwards, which is inside a call from compiled
    code back into Python (an ``objmode`` block, kernels.hooks). Numba's glue for such
    a call runs Python code of its own (it unpickles a type to box each array
    argument). The default handler raises KeyboardInterrupt wherever it runs, and
    raised inside that glue it leaves the call without its arguments: ``TypeError:
    _cb_batch expected 4 arguments, got 3``, a SystemError, or a double free that
    kills the process (seen in round-wise loops with a Python ``map``).

    Inside the ``with`` block this handler only records the interrupt. The hooks
    (:meth:`NativeEngine._batch_cb` and the others), entered with their arguments
    boxed, hand it to the handler it took over from (:meth:`check`: Python's default
    raises KeyboardInterrupt); a run that ends before calling a hook hands it over
    when it returns (``hit``, :meth:`deliver`). While a hook runs a user function
    (``in_user``) the handler hands it over at once, as if it had not been there, so
    that a slow or endless user function is stopped where it is. It takes over from
    any Python handler: Python's default, and a program's own, such as the one a
    ``SparkContext`` installs (it cancels the Spark jobs and raises KeyboardInterrupt),
    which would otherwise run inside the glue. ``SIG_IGN`` and ``SIG_DFL`` are left
    alone, and so is every thread but the main one (the only one that handles
    signals).
    """

    def __init__(self):
        self.hit = False
        self.in_user = False
        self._prev = None

    def _handler(self, signum, frame):
        if self.in_user:
            self.in_user = False
            self._prev(signum, frame)
            return
        self.hit = True

    def __enter__(self):
        self.hit = False
        self.in_user = False
        self._prev = None
        try:
            prev = _sig.getsignal(_sig.SIGINT)
            if callable(prev):
                _sig.signal(_sig.SIGINT, self._handler)
                self._prev = prev
        except ValueError:          # not the main thread
            pass
        return self

    def __exit__(self, *exc):
        if self._prev is not None:
            _sig.signal(_sig.SIGINT, self._prev)
        return False

    def check(self):
        """Hand a held interrupt to the handler taken over (called where a hook
        starts): Python's default raises KeyboardInterrupt."""
        if self.hit:
            self.hit = False
            self._prev(_sig.SIGINT, sys._getframe(1))

    def deliver(self):
        """After the ``with`` block: the handler a held interrupt is for, or None
        (none held). The caller calls it once the run is complete."""
        if not self.hit:
            return None
        self.hit = False
        return self._prev


def _cold(dispatcher):
    """True when ``dispatcher`` has no compiled signature in this process yet (its
    next call compiles it or loads it from the cache)."""
    return not getattr(dispatcher, "signatures", ())


def seq_run_times_signature():
    """The argument types ``kernels.runtime._run_loop_seq`` calls
    ``kernels.seqloop.run_times`` with (see :func:`compile_runtime`), in the runtime's
    own type names: the program and counters (``SEQ_TYPE``), the buffers, the hashed
    state (``HSTATE_TYPE``), the entered batches, the times, statistics and info."""
    i1, i2 = _rt._I1, _rt._I2
    lp, cn = _rt.SEQ_TYPE.types
    tab, arena, meta = _rt.HSTATE_TYPE.types
    return (lp, _rt._I2LIST, cn, tab, arena, meta, _rt._BLIST, i1, i2, i1)


def compile_runtime(sig):
    """Compile (or load from the cache) ``kernels.runtime.run`` for ``sig``.

    The sequential loop's ``seqloop.run_times`` goes first, on its own. Nested deep
    inside ``run``'s compile, Numba's type inference of its largest kernel
    (``_reduce_keys``) ran ~7x slower than compiled by itself; compiled first, a
    benchmark session's cold compile took 248 s instead of 306 s (the README's first
    command: 251 against 259 s; HISTORY, twenty-ninth session). ``run``'s compile then
    finds it compiled for the signature it calls it with (``tests/conftest.py`` fails a
    test session in which it compiles twice).

    When nothing of it is cached and the machine has a core to spare, a helper process
    compiles ``run_times`` into Numba's on-disk cache (:func:`_compile_loop_kernel`)
    while this one compiles the round-wise loop ``runtime._run_loop`` and the root
    scope's steps under it; ``run``'s compile then loads ``run_times`` from the cache.
    Both write the cache under a lock (:class:`serialized_cache_saves`).
    Numba compiles one function at a time in a process, so this is the only way to use
    both cores. Should the helper fail, or take more than ``HELPER_PATIENCE`` times
    as long as this process's part (and at least ``HELPER_MIN_WAIT_S``), ``run_times``
    is compiled here after all. ``DDNUMBA_COMPILE_HELPER=0`` turns the helper off."""
    with serialized_cache_saves():
        if _cold(_seq.run_times):
            if not (_helper_wanted() and _compile_beside_helper(sig)):
                _seq.run_times.compile(seq_run_times_signature())
        _rt.run.compile(sig)


def _compile_beside_helper(sig):
    """Compile ``runtime._run_loop`` for ``run``'s ``sig`` while a helper process
    compiles ``seqloop.run_times`` into the cache, then load that here (or compile it,
    should the helper fail or take too long). Returns False if no helper could be
    started (nothing done)."""
    import subprocess
    import sys
    import time
    from numba import types
    helper = _start_helper()
    if helper is None:
        return False
    try:
        t0 = time.monotonic()
        _rt._run_loop.compile((sig[0], sig[1], types.int64))
        wait = max(HELPER_MIN_WAIT_S, HELPER_PATIENCE * (time.monotonic() - t0))
        try:
            rc = helper.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            rc = None
    finally:
        _end_helper(helper)
    if rc is None:
        print(f"ddnumba: the compile helper did not finish within {wait:.0f} s; "
              f"compiling its part here", file=sys.stderr, flush=True)
    elif rc != 0:
        print(f"ddnumba: the compile helper failed (exit status {rc}); compiling "
              f"its part here", file=sys.stderr, flush=True)
    # (loads what the helper cached, or compiles it)
    _seq.run_times.compile(seq_run_times_signature())
    return True


# How long compile_runtime waits for its helper once its own part is compiled: this
# many times as long as that part took (the two parts take about as long), and at least
# HELPER_MIN_WAIT_S; then the helper is stopped and its part compiled in this process.
HELPER_PATIENCE = 4.0
HELPER_MIN_WAIT_S = 300.0


def _cache_entries(dispatcher):
    """How many signatures of ``dispatcher`` Numba's on-disk cache holds for its
    current source (0: it would compile), or None when that cannot be told (caching
    off, or another Numba's cache layout)."""
    try:
        return len(dispatcher._cache._cache_file._load_index())
    except Exception:       # (a private part of Numba: any change means "unknown")
        return None


def _helper_wanted():
    """Whether a cold start should compile the loop kernel in a helper process: it is
    not cached, there are two cores to use, and ``DDNUMBA_COMPILE_HELPER`` is not 0."""
    import os
    if os.environ.get("DDNUMBA_COMPILE_HELPER", "1") == "0":
        return False
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 1
    return cores >= 2 and _cache_entries(_seq.run_times) == 0


# Source a child process runs before it imports ddnumba (with ``_kdir`` set to a
# directory holding ddnumba's kernels): ``ddnumba.kernels`` is then imported from there,
# whatever an import by path would find (an installed ddnumba maps it to its own
# top-level ``kernels/``). Used by the compile helper and by ``bench ab``'s children.
KERNELS_FINDER = (
    "import importlib.abc, importlib.util, os, sys\n"
    "class _Kernels(importlib.abc.MetaPathFinder):\n"
    "    def find_spec(self, name, path=None, target=None):\n"
    "        if name == 'ddnumba.kernels':\n"
    "            return importlib.util.spec_from_file_location(\n"
    "                name, os.path.join(_kdir, '__init__.py'),\n"
    "                submodule_search_locations=[_kdir])\n"
    "        return None\n"
    "sys.meta_path.insert(0, _Kernels())\n")


def helper_command():
    """The helper process's command line: :func:`child_command` running
    :func:`_compile_loop_kernel`."""
    return child_command("import ddnumba.native as n; n._compile_loop_kernel()",
                         "ddnumba compile helper")


def child_command(body, who="ddnumba child process"):
    """A command line running the Python source ``body`` in a child process with this
    process's ddnumba: this interpreter, with this process's import path (a script's
    own directory included) ahead of its own.

    ``ddnumba.kernels`` is imported from the directory this process imported it from,
    whatever finder found it here (an installed ddnumba maps it to the top-level
    ``kernels/``; ``bench ab`` maps it to another checkout's), and the child exits with
    status 1 and a message (``who``: ...) if its ``ddnumba`` or ``ddnumba.kernels`` is
    not this process's: the compile helper would compile another tree's kernel into
    another cache, and this process would then compile its own after all."""
    import os
    import sys

    import ddnumba
    import ddnumba.kernels as k
    own = [os.path.realpath(ddnumba.__file__), os.path.realpath(k.__file__)]
    kdir = os.path.dirname(own[1])
    code = (
        "import sys; sys.path[:0] = {path!r}\n"
        "_kdir = {kdir!r}\n"
        + KERNELS_FINDER +
        "import ddnumba, ddnumba.kernels\n"
        "got = [os.path.realpath(ddnumba.__file__), "
        "os.path.realpath(ddnumba.kernels.__file__)]\n"
        "if got != {own!r}:\n"
        "    sys.exit({who!r} + ': imported ' + ' and '.join(got) + "
        "', not the caller\\'s ' + ' and '.join({own!r}))\n"
    ).format(path=list(sys.path), kdir=kdir, own=own, who=who) + body
    return [sys.executable, "-c", code]


def _start_helper():
    """Start the helper process (:func:`helper_command`); None if it cannot be
    started, or if Numba's cache writes cannot be serialized here
    (:func:`serialized_cache_saves`). It prints nothing but errors (on this process's
    stderr)."""
    import subprocess
    if _save_lock() is None:
        return None
    try:
        return subprocess.Popen(helper_command(), stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL)
    except OSError:
        return None


def _end_helper(p):
    """Stop helper ``p`` if it still runs."""
    if p.poll() is None:
        p.kill()
        p.wait()


def _compile_loop_kernel():
    """The helper process of :func:`compile_runtime`: compile ``seqloop.run_times``
    for the runtime's signature into Numba's on-disk cache (or find it there), its
    cache writes serialized with the caller's. Returns whether it was compiled (not
    loaded)."""
    sig = seq_run_times_signature()
    with serialized_cache_saves():
        _seq.run_times.compile(sig)
    return _seq.run_times.stats.cache_misses.get(sig, 0) > 0


SAVE_LOCK_NAME = "ddnumba-save.lock"


def _save_lock():
    """The ``(IndexDataCacheFile, fcntl)`` that :func:`serialized_cache_saves` needs,
    or None where it cannot work (no ``fcntl``: not POSIX; another Numba)."""
    try:
        import fcntl
        from numba.core.caching import IndexDataCacheFile
    except ImportError:
        return None
    if not callable(getattr(IndexDataCacheFile, "save", None)):
        return None
    return IndexDataCacheFile, fcntl


class serialized_cache_saves:
    """While active, every write of an entry to Numba's on-disk cache in this process
    holds an exclusive lock (``flock``) on ``SAVE_LOCK_NAME`` in the cache directory.

    Numba's cache is not safe for two processes writing entries of one function at
    once: each reads the function's index, picks a data file name for its new entry
    and writes the index back, so two entries can get the same name and an index can
    end up naming the other process's data. :func:`compile_runtime` holds this for
    its whole compile and its helper while it compiles (shared kernels are compiled by
    whichever gets there first and loaded by the other; so do two programs starting
    cold at once). Readers need no lock: Numba writes each file under a temporary name
    and renames it. Where a lock file cannot be opened or locked, the write goes ahead
    without it."""

    def __enter__(self):
        import os
        found = _save_lock()
        if found is None:
            self.cls = None
            return self
        cls, fcntl = found
        self.cls = cls
        self.orig = orig = cls.save

        def save(cache_file, key, data):
            try:
                f = open(os.path.join(cache_file._cache_path, SAVE_LOCK_NAME), "a")
            except OSError:
                return orig(cache_file, key, data)
            with f:
                try:
                    fcntl.flock(f, fcntl.LOCK_EX)
                except OSError:
                    pass
                return orig(cache_file, key, data)      # (closing f unlocks)

        cls.save = save
        return self

    def __exit__(self, *exc):
        if self.cls is not None:
            self.cls.save = self.orig
        return False


class Unsupported(Exception):
    """The graph uses something the native engine does not run (the message says what)."""


def _nodes_in_order(df):
    """Root nodes in schedule order, and per loop its nodes in schedule order."""
    from ddnumba.operators.iterate import LoopNode
    root = list(df.root.nodes)
    loops = []
    for node in root:
        if isinstance(node, LoopNode):
            for inner in node.child.nodes:
                if isinstance(inner, LoopNode):
                    raise Unsupported(f"nested loop {inner.child.name!r} inside loop "
                                      f"{node.child.name!r}")
            loops.append(node)
    return root, loops


def check_supported(df):
    """Raise :class:`Unsupported` when the native engine cannot run ``df``."""
    if df.time_dims != 1:
        raise Unsupported(f"time_dims={df.time_dims} (the native engine runs one outer "
                          f"time coordinate)")
    if df.workers != 1:
        raise Unsupported(f"workers={df.workers}")
    _nodes_in_order(df)


LOOP_MODES = ("rounds", "sequential")


def _loop_mode(df):
    """The loop mode: ``Dataflow(loops=)``, else ``DDNUMBA_LOOPS``, else
    ``NativeEngine.loop_mode``."""
    import os
    mode = getattr(df, "loops", None) or os.environ.get("DDNUMBA_LOOPS") or \
        NativeEngine.loop_mode
    if mode not in LOOP_MODES:
        raise ValueError(f"DDNUMBA_LOOPS must be one of {LOOP_MODES}, got {mode!r}")
    return mode


def _sequential(lp, mode):
    """Whether loop ``lp`` runs sequentially (:mod:`ddnumba.kernels.seqloop`): one
    outer time after another over hashed state. Every operator of the loop must be
    native (no Python callbacks: ``delay`` moves updates to later times, which a loop
    run one time at a time cannot take, and the others would be called once per time
    and round) and reduces need built-in logic. Only in mode ``"sequential"``."""
    from ddnumba.operators import linear as L
    from ddnumba.operators.arrange import ArrangeNode
    from ddnumba.operators.iterate import EnterNode, FeedbackNode
    from ddnumba.operators.join import JoinNode
    from ddnumba.operators.reduce import ReduceNode
    if mode == "rounds":
        return False
    for node in lp.child.nodes:
        if isinstance(node, (EnterNode, FeedbackNode, ArrangeNode, JoinNode, L.ConcatNode,
                             L.NegateNode, L.ConsolidateNode)):
            continue
        if isinstance(node, ReduceNode):
            if getattr(node, "spec", None) is None:
                return False
            continue
        if isinstance(node, (L.MapNode, L.FilterNode)) and node.affine() is not None:
            continue
        return False
    # Maps in a row compose into one sum per column (_compose), and filters into
    # comparisons, which not every route can take: try every path through the linear
    # operators.
    def paths(node, cols, preds, seen):
        for c, _ in node.consumers:
            nxt, more = cols, preds
            if isinstance(c, L.MapNode):
                nxt = _compose(cols, c.affine())
            elif isinstance(c, L.FilterNode):
                more = preds + [_compose_filter(cols, c.affine())]
            elif not isinstance(c, (L.ConcatNode, L.NegateNode, FeedbackNode)):
                _route_words(cols, preds)
                continue
            if id(c) not in seen:
                paths(c, nxt, more, seen | {id(c)})
    try:
        for node in lp.child.nodes:
            paths(node, _identity(node.arity), [], {id(node)})
    except Unsupported:
        return False
    return True


def _identity(arity):
    """The terms of a row's own columns (see _compose)."""
    return [((c,), 0, None) for c in range(arity)]


def _is_projection(terms):
    return all(len(c) == 1 and k == 0 and m is None for c, k, m in terms)


def _compose(cols, terms):
    """The columns of a map's output over the columns of the rows a route starts
    from, as terms of :meth:`~ddnumba.operators.linear.MapNode.affine`: ``cols`` are
    the map's input columns, ``terms`` the map's own. Raises Unsupported when a column
    is not one such sum (more than two columns, or a checked sum involving another
    sum)."""
    from ddnumba.operators.linear import _wrap64
    out = []
    for mcols, mconst, msg in terms:
        if msg is None and len(mcols) == 1 and mconst == 0:
            out.append(cols[mcols[0]])
            continue
        parts = [cols[c] for c in mcols]
        if any(p[2] is not None for p in parts):
            raise Unsupported("a sum over a checked sum in a sequential loop")
        if msg is not None:
            if any(len(p[0]) != 1 or p[1] != 0 for p in parts):
                raise Unsupported("a checked sum over a sum in a sequential loop")
            out.append((tuple(p[0][0] for p in parts), mconst, msg))
        else:
            sc = sum((p[0] for p in parts), ())
            if len(sc) > 2:
                raise Unsupported("a sum of more than two columns in a sequential loop")
            out.append((sc, _wrap64(mconst + sum(p[1] for p in parts)), None))
    return out


def _check_filter(terms):
    """A filter that computes the checked sums ``terms`` (``t == t`` for each; it holds
    unless one overflows, which stops the route as the map that computes it raises):
    placed before a filter or a map that a map's checked sums precede on a route, so
    that a row the filter drops, or a column the map drops, still overflows."""
    return [[(t, _seq.CMP_EQ, t) for t in dict.fromkeys(terms)]]


def _compose_filter(cols, groups):
    """A filter's comparisons (:meth:`~ddnumba.operators.linear.FilterNode.affine`:
    groups of them, a row kept when all of some group hold) over the columns of the
    rows a route starts from (see _compose)."""
    out = []
    for group in groups:
        out.append([])
        for left, op, right in group:
            left, right = _compose(cols, [left, right])
            out[-1].append((left, op, right))
    return out


def _messages(cols, preds):
    """The messages of the checked sums of columns ``cols`` and filters ``preds``, each
    once, in order."""
    return list(dict.fromkeys(t[2] for t in cols + _clause_terms(preds)
                              if t[2] is not None))


def _clause_terms(preds):
    """The terms compared by the filters ``preds`` (each a list of groups)."""
    return [x for groups in preds for g in groups for c in g for x in (c[0], c[2])]


def _term_words(term):
    from ddnumba.kernels import seqloop as S
    c, k, m = term
    return [S.A_WRAP if m is None else S.A_CHECKED, c[0] if len(c) > 0 else -1,
            c[1] if len(c) > 1 else -1, k]


def _route_words(terms, preds=()):
    """A route's columns for :mod:`ddnumba.kernels.seqloop`: one word a column (the
    source column) for a projection, else kernels.affine's words: AFW words a column
    (kind, first column, second column, constant; see affine.A_WRAP), then the
    filters ``preds`` (each a list of groups of comparisons); and whether it is the
    latter (R_AFF)."""
    if _is_projection(terms) and not preds:
        return [c[0] for c, _, _ in terms], 0
    return _affine_words_of(terms, preds), 1


def _affine_words_of(terms, preds):
    """kernels.affine's words of columns ``terms`` and filters ``preds`` (see
    _route_words); a filter whose comparisons hold a checked sum has its number of
    groups negated (its checked sums are computed for every row that reaches it)."""
    words = [w for t in terms for w in _term_words(t)] + [len(preds)]
    for groups in preds:
        checked = any(t[2] is not None for t in _clause_terms([groups]))
        words.append(-len(groups) if checked else len(groups))
        for group in groups:
            words.append(len(group))
            for left, op, right in group:
                words += _term_words(left) + [op] + _term_words(right)
    return words


def _affine_words(node):
    """A map of sums or a filter of comparisons outside sequential loops, for
    kernels.runtime's K_AFFINE: ``(words, output columns, messages of its checked
    sums)``; None when it is not one."""
    from ddnumba.operators import linear as L
    cached = getattr(node, "_affine_words", False)
    if cached is not False:
        return cached
    node._affine_words = None
    terms = node.affine()
    if terms is None:
        return None
    cols, preds = (terms, []) if isinstance(node, L.MapNode) else \
        (_identity(node.arity), [terms])
    words = _affine_words_of(cols, preds)
    messages = _messages(cols, preds)
    node._affine_words = (words, len(cols), messages)
    return node._affine_words


def _seq_program(li, lp, ids, kind, prm):
    """The program of sequential loop ``li`` for :mod:`ddnumba.kernels.seqloop` and the
    row widths of its buffers."""
    from ddnumba.kernels import seqloop as S
    from ddnumba.operators import linear as L
    from ddnumba.operators.arrange import ArrangeNode
    from ddnumba.operators.iterate import EnterNode, FeedbackNode, LeaveNode
    from ddnumba.operators.join import JoinNode
    from ddnumba.operators.reduce import ReduceNode

    widths = []

    def buf(w):
        widths.append(w)
        return len(widths) - 1

    linear = (L.MapNode, L.FilterNode, L.ConcatNode, L.NegateNode)

    def sinks(node):
        """The nodes ``node`` reaches through linear operators."""
        out = []
        for c, _ in node.consumers:
            out.extend(sinks(c) if isinstance(c, linear) else [c])
        return out

    # A feedback only adds 1 to the iteration: one whose rows reach no feedback through
    # linear operators is folded into the routes through it (the sinks after it
    # consolidate its rows), so the variable's rows are queued and sorted once a round
    # instead of twice. The others (a chain of feedbacks, e.g. a variable set to a map
    # of itself) stay nodes with their own queue.
    folded = {id(node) for node in lp.child.nodes if isinstance(node, FeedbackNode)
              and not any(isinstance(c, FeedbackNode) for c in sinks(node))}

    local = []                      # loop nodes with a local id, in schedule order
    for node in lp.child.nodes:
        if isinstance(node, (EnterNode, ArrangeNode, JoinNode, ReduceNode,
                             L.ConsolidateNode)) or \
                (isinstance(node, FeedbackNode) and id(node) not in folded):
            local.append(node)
    leaves = []
    for node in lp.child.nodes:
        for c, _ in node.consumers:
            if isinstance(c, LeaveNode) and c not in leaves:
                leaves.append(c)
    local.extend(leaves)
    lid = {id(n): i for i, n in enumerate(local)}
    NP = np.zeros((len(local), S.NPW), _I64)

    def readers(a):
        return [c for c, _ in a.consumers]

    n_enter = 0
    queues = []
    for i, node in enumerate(local):
        g = ids[id(node)]
        NP[i, S.P_NODE] = g
        if isinstance(node, EnterNode):
            NP[i, S.P_KIND] = S.S_ENTER
            NP[i, S.P_W] = node.arity
            NP[i, S.P_D] = buf(node.arity + 2)
            NP[i, S.P_ENTER] = n_enter
            n_enter += 1
        elif isinstance(node, (ArrangeNode, L.ConsolidateNode, FeedbackNode)):
            NP[i, S.P_KIND] = (S.S_ARRANGE if isinstance(node, ArrangeNode) else
                               S.S_CONSOL if isinstance(node, L.ConsolidateNode) else
                               S.S_FEEDBACK)
            NP[i, S.P_W] = node.arity
            NP[i, S.P_Q] = buf(node.arity + 2)
            NP[i, S.P_D] = buf(node.arity + 2)
            queues.append(NP[i, S.P_Q])
            if isinstance(node, ArrangeNode):
                NP[i, S.P_TAG] = prm[g, 1] + 1
                NP[i, S.P_KW] = node.kw
        elif isinstance(node, JoinNode):
            NP[i, S.P_KIND] = S.S_JOIN
            NP[i, S.P_W] = node.arity
            NP[i, S.P_D] = buf(node.arity + 2)
            NP[i, S.P_LEFT] = lid[id(node.left)]
            NP[i, S.P_RIGHT] = lid[id(node.right)]
            NP[i, S.P_JKW] = node.kw
            if node.left is not node.right and readers(node.left) == [node] and \
                    readers(node.right) == [node]:
                NP[i, S.P_JFUSED] = 1
                NP[lid[id(node.left)], S.P_FUSED] = 1
                NP[lid[id(node.right)], S.P_FUSED] = 1
        elif isinstance(node, ReduceNode):
            a = node.arranged
            la = lid[id(a)]
            NP[i, S.P_KIND] = S.S_REDUCE
            kw, vw, ow = node.kw, a.vw, node.ow
            NP[i, S.P_W] = kw + ow
            NP[i, S.P_Q] = buf(kw + 2)
            queues.append(NP[i, S.P_Q])
            NP[i, S.P_D] = buf(kw + ow + 2)
            NP[i, S.P_ARR] = la
            NP[i, S.P_TAG_IN] = NP[la, S.P_TAG]
            if readers(a) == [node]:
                NP[i, S.P_BLK] = 1
                NP[i, S.P_TAG_OUT] = NP[la, S.P_TAG]
                # (a value-less distinct / top_k takes its delta unsorted: see
                # seqloop.P_FUSED)
                NP[la, S.P_FUSED] = S.FUSED_UNSORTED if S.value_less(
                    vw, ow, int(prm[g, 6])) else 1
            else:
                NP[i, S.P_BLK] = 0
                NP[i, S.P_TAG_OUT] = prm[g, 1] + 1
            NP[i, S.P_RKW] = kw
            NP[i, S.P_VW] = vw
            NP[i, S.P_OW] = ow
            NP[i, S.P_LOGIC] = prm[g, 6]
            NP[i, S.P_LPARAM] = prm[g, 7]
            NP[i, S.P_SCHED] = buf(kw + 2)
            NP[i, S.P_ACC] = buf(vw + 1)
            NP[i, S.P_DES] = buf(max(vw, ow) + 1)
            NP[i, S.P_CUR] = buf(ow + 1)
        else:   # a leave
            NP[i, S.P_KIND] = S.S_LEAVE
            NP[i, S.P_W] = node.arity
            NP[i, S.P_Q] = buf(node.arity + 3)

    # Routes: from every emitting node through the linear operators to the sinks.
    routes, proj, chain = [], [], []
    messages = []                   # those of the checked sums (seqloop.OVF_MAP)

    # The statistics of the linear nodes on the way: a route lists those it counts,
    # each with the filters a row has passed before and after it (seqloop.R_COFF).
    # Routes from one node share the start of their paths, which the first of them
    # counts (a map read by two filters takes and emits its rows once; a concat
    # reading one node twice takes its rows twice: a path step is a node and its
    # input port).
    # ``pending``: the checked sums of maps since the route's last filter. A filter,
    # or a map that drops one of them, has them computed first (_check_filter): the
    # composed route computes its columns only for the rows that pass every filter.
    def walk(src_i, node, cols, sign, shift, path, preds, counted, seen, pending):
        for c, port in node.consumers:
            here = path + ((ids[id(c)], port),)
            terms = c.affine() if isinstance(c, L.MapNode) else None
            nxt = cols if terms is None else _compose(cols, terms)
            before, left = preds, pending
            if pending and (isinstance(c, L.FilterNode) or
                            any(t not in nxt for t in pending)):   # (a map drops one)
                before, left = preds + [_check_filter(pending)], []
            more = before
            if isinstance(c, L.FilterNode):
                more = before + [_compose_filter(cols, c.affine())]
            count = counted + [(here, ids[id(c)], len(before), len(more))]
            if terms is not None:
                own = [nxt[i] for i, t in enumerate(terms) if t[2] is not None]
                walk(src_i, c, nxt, sign, shift, here, more, count, seen, left + own)
            elif isinstance(c, L.FilterNode):
                walk(src_i, c, cols, sign, shift, here, more, count, seen, [])
            elif isinstance(c, L.ConcatNode):
                walk(src_i, c, cols, sign, shift, here, preds, count, seen, pending)
            elif isinstance(c, L.NegateNode):
                walk(src_i, c, cols, -sign, shift, here, preds, count, seen, pending)
            elif isinstance(c, FeedbackNode) and id(c) in folded:
                walk(src_i, c, cols, sign, shift + 1, here, preds, count, seen, pending)
            elif isinstance(c, (ArrangeNode, L.ConsolidateNode, FeedbackNode, LeaveNode)):
                sink = lid[id(c)]
                leave = isinstance(c, LeaveNode)
                into = 1 if isinstance(c, FeedbackNode) else 0
                words, aff = _route_words(cols, preds)          # (_sequential checked)
                if aff:
                    messages.extend(_messages(cols, preds))
                new = [x for x in counted if x[0] not in seen]
                seen.update(x[0] for x in new)
                routes.append([sink, sign, shift + into, len(proj), len(cols),
                               len(chain), len(new), NP[sink, S.P_Q],
                               1 if leave else 0, aff])
                proj.extend(words)
                chain.extend(w for x in new for w in x[1:])
            else:
                raise Unsupported(f"{c!r} in a sequential loop")

    for i, node in enumerate(local):
        if NP[i, S.P_KIND] in (S.S_ENTER, S.S_JOIN, S.S_REDUCE, S.S_CONSOL, S.S_FEEDBACK):
            first = len(routes)
            walk(i, node, _identity(node.arity), 1, 0, (), [], [], set(), [])
            NP[i, S.P_ROFF] = first
            NP[i, S.P_RN] = len(routes) - first
    # A reduce reading an unsorted delta corrects a key once per row of it, so its
    # corrections may hold pairs that cancel: an arrangement they reach consolidates
    # its delta (else such pairs could circle a loop for ever).
    for i in range(len(local)):
        if NP[i, S.P_KIND] == S.S_REDUCE and \
                NP[NP[i, S.P_ARR], S.P_FUSED] == S.FUSED_UNSORTED:
            for r in routes[NP[i, S.P_ROFF]:NP[i, S.P_ROFF] + NP[i, S.P_RN]]:
                if NP[r[0], S.P_KIND] == S.S_ARRANGE and \
                        NP[r[0], S.P_FUSED] == S.FUSED_UNSORTED:
                    NP[r[0], S.P_FUSED] = 1
    maxit = -1 if lp.child.max_iterations is None else int(lp.child.max_iterations)
    prog = _seq.pack([NP, np.array(routes, _I64).reshape(-1, S.RTW),
                      np.array(proj, _I64), np.array(chain, _I64),
                      np.array(queues, _I64),
                      np.array([li, maxit, S.IDLE_BIG_WORDS], _I64)])
    return prog, np.array(widths, _I64), messages


class NativeEngine:
    """The compiled program and state of one dataflow."""

    #: how loops run when neither Dataflow(loops=) nor DDNUMBA_LOOPS says:
    #: "sequential" (one outer time after another over hashed state, for the loops
    #: that can, see _sequential; the others run round-wise) or "rounds" (round-wise
    #: over all the times of a run)
    loop_mode = "sequential"

    def __init__(self, df):
        from ddnumba.operators import linear as L
        from ddnumba.operators.arrange import ArrangeNode
        from ddnumba.operators.iterate import (EnterNode, FeedbackNode, LeaveNode,
                                               LoopNode)
        from ddnumba.operators.join import JoinNode
        from ddnumba.operators.output import CaptureNode, ProbeNode
        from ddnumba.operators.reduce import ReduceNode
        from ddnumba.dataflow import InputNode

        check_supported(df)
        _hooks.use_huge_pages()     # large compiled-code arrays on huge pages
        self.df = df
        root, loops = _nodes_in_order(df)
        order = list(root)
        for lp in loops:
            order.extend(lp.child.nodes)
        self.nodes = order
        ids = {id(n): i for i, n in enumerate(order)}
        N = len(order)
        loop_index = {id(lp): li for li, lp in enumerate(loops)}
        mode = _loop_mode(df)
        self.sequential = [_sequential(lp, mode) for lp in loops]
        scope_of = np.full(N, -1, _I64)       # -1 root, else loop index
        for li, lp in enumerate(loops):
            for inner in lp.child.nodes:
                scope_of[ids[id(inner)]] = li

        kind = np.zeros(N, _I64)
        prm = np.zeros((N, _rt.PRM_W), _I64)
        proj = []                     # projections' columns, K_AFFINE's words
        self._map_messages = {}       # node id -> its checked sums' message (K_AFFINE)
        self.callbacks = {}           # node id -> Python node (batch callbacks)
        self.logic = {}               # node id -> reduce node (logic callbacks)
        self.captures = []            # (node, out id)
        self.probes = []
        spine_scope = []              # scope group of each spine (0 root, l + 1 loop l)
        spine_nodes = []              # nodes bounding each spine's compaction (root)
        self.spine_owner = []         # (node, "arrange" | "reduce")
        n_held = 0
        pend_w = []
        agg_nodes = []                # root-scope count/sum/distinct (hashed state)
        inputs = {id(h): i for i, h in enumerate(df.inputs)}
        for i, node in enumerate(order):
            group = int(scope_of[i]) + 1
            cols = node.projection() if isinstance(node, L.MapNode) else None
            if isinstance(node, InputNode):
                kind[i] = _rt.K_INPUT
                prm[i, 0] = inputs[id(node.handle)]
            elif cols is not None:
                kind[i] = _rt.K_PROJECT
                prm[i, 0] = len(proj)
                prm[i, 1] = len(cols)
                proj.extend(cols)
            elif isinstance(node, (L.MapNode, L.FilterNode)) and \
                    _affine_words(node) is not None:
                words, width, messages = _affine_words(node)
                kind[i] = _rt.K_AFFINE
                prm[i, 0] = len(proj)
                prm[i, 1] = width
                proj.extend(words)
                if messages:
                    self._map_messages[i] = " / ".join(messages)
            elif isinstance(node, (L.MapNode, L.FilterNode, L.FlatMapNode, L.InspectNode,
                                   L.DelayNode)):
                kind[i] = _rt.K_CALLBACK
                self.callbacks[i] = node
            elif isinstance(node, L.ConcatNode):
                kind[i] = _rt.K_CONCAT
            elif isinstance(node, L.NegateNode):
                kind[i] = _rt.K_NEGATE
            elif isinstance(node, L.ConsolidateNode):
                kind[i] = _rt.K_CONSOLIDATE
            elif isinstance(node, ArrangeNode):
                kind[i] = _rt.K_ARRANGE
                prm[i, 0] = node.arity
                prm[i, 1] = len(spine_scope)
                prm[i, 2] = n_held
                prm[i, 5] = node.kw                # key width (sequential loops)
                n_held += 1
                spine_scope.append(group)
                spine_nodes.append([i] + [ids[id(c)] for c, _ in node.consumers])
                self.spine_owner.append((node, "arrange"))
            elif isinstance(node, JoinNode):
                kind[i] = _rt.K_JOIN
                prm[i, 0] = ids[id(node.left)]
                prm[i, 1] = ids[id(node.right)]
                prm[i, 2] = node.kw
            elif isinstance(node, ReduceNode):
                kind[i] = _rt.K_REDUCE
                arr_id = ids[id(node.arranged)]
                prm[i, 0] = arr_id
                prm[i, 1] = len(spine_scope)
                prm[i, 2] = len(pend_w)
                prm[i, 3] = node.kw
                prm[i, 4] = node.arranged.vw
                prm[i, 5] = node.ow
                spec = getattr(node, "spec", None)
                if spec is None:
                    prm[i, 6] = _rt.L_CALLBACK
                    self.logic[i] = node
                else:
                    prm[i, 6] = _rt.LOGIC[spec[0]]
                    prm[i, 7] = int(spec[1])
                    if spec[0] in ("count", "sum", "distinct") and group == 0:
                        # Outside loops: count/sum/distinct over hashed current state,
                        # no output trace (kernels.rootagg); prm[i, 1] becomes the
                        # index of its state in st[11], after the loops' (set below).
                        prm[i, 8] = 1
                        agg_nodes.append(i)
                    elif group == 0 and (spec[0] == "top_k" or (
                            spec[0] in ("min", "max") and int(spec[1]) == 0)) and \
                            [c for c, _ in node.arranged.consumers] == [node]:
                        # Outside loops: min/max of value column 0 and top_k read
                        # their input trace in value order (kernels.rootorder), in a
                        # trace shared with their output, tagged (input rows first).
                        prm[i, 8] = 2
                pend_w.append(node.kw + 1)
                seq = group > 0 and self.sequential[group - 1]
                if prm[i, 8] == 1:
                    pass        # no trace at all (kernels.rootagg)
                elif not seq and \
                        [c for c, _ in node.arranged.consumers] == [node]:
                    # The reduce is its arrangement's only reader: input and output
                    # history share one trace, rows (key, tag, vals) (runtime
                    # _reduce_gather), so each key is looked up once per batch.
                    if node.arranged.vw == node.ow and prm[i, 8] != 2:
                        # Equal widths: rows unchanged, output updates stored at
                        # iteration -1 - i (no extra column).
                        prm[i, 9] = -1
                    else:
                        w = node.kw + 1 + max(node.arranged.vw, node.ow)
                        prm[arr_id, 3] = w
                        prm[arr_id, 4] = node.kw
                        prm[i, 9] = w
                    prm[i, 1] = prm[arr_id, 1]
                    spine_nodes[prm[arr_id, 1]].append(i)
                else:
                    spine_scope.append(group)
                    spine_nodes.append([i])
                    self.spine_owner.append((node, "reduce"))
            elif isinstance(node, EnterNode):
                kind[i] = _rt.K_ENTER
            elif isinstance(node, LeaveNode):
                kind[i] = _rt.K_LEAVE
            elif isinstance(node, FeedbackNode):
                kind[i] = _rt.K_FEEDBACK
            elif isinstance(node, LoopNode):
                kind[i] = _rt.K_LOOP
                prm[i, 0] = loop_index[id(node)]
                prm[i, 1] = 1 if self.sequential[prm[i, 0]] else 0
            elif isinstance(node, CaptureNode):
                kind[i] = _rt.K_CAPTURE
                prm[i, 0] = len(self.captures)
                self.captures.append(node)
            elif isinstance(node, ProbeNode):
                kind[i] = _rt.K_PROBE
                self.probes.append(node)
            else:
                raise Unsupported(f"operator {node!r}")
            if kind[i] in (_rt.K_CONSOLIDATE, _rt.K_LEAVE, _rt.K_FEEDBACK, _rt.K_CALLBACK,
                           _rt.K_ENTER):
                prm[i, 1] = node.inputs[0].arity if node.inputs else node.arity
            if kind[i] == _rt.K_JOIN:
                prm[i, 3] = node.arity

        # Wiring: inputs per port, consumers per node, queue ids.
        in_offs = np.zeros(N + 1, _I64)
        in_src = []
        cons_offs = np.zeros(N + 1, _I64)
        cons = []
        qbase = np.zeros(N, _I64)
        nq = 0
        for i, node in enumerate(order):
            srcs = [ids[id(x)] for x in node.inputs]
            in_src.extend(srcs)
            in_offs[i + 1] = len(in_src)
            qbase[i] = nq
            nq += max(1, len(srcs))
            for c, port in node.consumers:
                if id(c) not in ids:
                    raise Unsupported(f"{node!r} feeds {c!r}, which is not scheduled")
                cons.append((ids[id(c)], port))
            cons_offs[i + 1] = len(cons)
        for i, node in enumerate(order):
            if isinstance(node, FeedbackNode) and not node.inputs:
                raise Unsupported("a loop variable was never set")

        L_ = len(loops)
        for a, i in enumerate(agg_nodes):
            prm[i, 1] = max(L_, 1) + a
        agg = set(agg_nodes)
        for i, node in enumerate(order):
            if kind[i] == _rt.K_ARRANGE and node.consumers and \
                    all(ids[id(c)] in agg for c, _ in node.consumers):
                prm[i, 6] = 1       # read by root counts/sums/distincts only: no trace
        self.agg_nodes = agg_nodes
        root_order = np.array([ids[id(n)] for n in root], _I64)
        lo_offs = np.zeros(L_ + 1, _I64)
        lo = []
        en_offs = np.zeros(L_ + 1, _I64)
        en = []
        maxit = np.full(max(L_, 1), -1, _I64)
        for li, lp in enumerate(loops):
            lo.extend(ids[id(n)] for n in lp.child.nodes)
            lo_offs[li + 1] = len(lo)
            en.extend(ids[id(e)] for e in lp.child.enter_nodes)
            en_offs[li + 1] = len(en)
            if lp.child.max_iterations is not None:
                maxit[li] = int(lp.child.max_iterations)
        # Spines grouped by scope (root first, then each loop).
        S = len(spine_scope)
        sorder = sorted(range(S), key=lambda s: (spine_scope[s], s))
        sp_offs = np.zeros(L_ + 2, _I64)
        for s in range(S):
            sp_offs[spine_scope[s] + 1] += 1
        sp_offs = np.cumsum(sp_offs).astype(_I64)
        sn_offs = np.zeros(S + 1, _I64)
        sn = []
        for s in range(S):
            sn.extend(spine_nodes[s])
            sn_offs[s + 1] = len(sn)

        def arr(x):
            return np.ascontiguousarray(np.asarray(x, dtype=_I64).reshape(-1))

        self.prm = prm
        self.prog = _rt.pack_program(
            (kind, in_offs, arr(in_src), cons_offs, arr([c for c, _ in cons]),
             arr([p for _, p in cons]), qbase, prm, arr(proj), root_order, lo_offs, arr(lo),
             en_offs, arr(en), maxit, sp_offs, arr(sorder), sn_offs, arr(sn)))
        self.kind = kind
        self.qbase = qbase
        self.loops = loops
        self.input_nodes = [ids[id(n)] for n in order if isinstance(n, InputNode)]
        self.input_qid = {inputs[id(n.handle)]: int(qbase[ids[id(n)]])
                          for n in order if isinstance(n, InputNode)}
        self.root_scope = scope_of
        self.st = _rt.new_state(nq, S, n_held, len(pend_w), arr(pend_w) if pend_w else
                                np.zeros(0, _I64), len(self.captures), N, max(L_, 1),
                                self._state_widths(order, kind, prm, scope_of, L_))
        self._sum_messages = []        # those of the loops' checked sums
        for li, lp in enumerate(loops):
            if self.sequential[li]:
                prog, widths, messages = _seq_program(li, lp, ids, kind, prm)
                self._sum_messages.extend(m for m in messages
                                          if m not in self._sum_messages)
                _rt.add_seq_loop(self.st, li, prog, widths)
        # Each input's queue (a typed list inside st[0]), boxed once: reading an item of
        # a typed list from Python costs ~4-8 µs, a tenth of a single-change run. The
        # compiled code only appends to and clears these lists, never replaces them.
        self._input_queues = {i: self.st[0][qid] for i, qid in self.input_qid.items()}
        self._capture_lists = [self.st[6][i] for i in range(len(self.captures))]
        self._hooks = (self._batch_cb, self._logic_cb, self._warn_cb)
        self._warned_loops = set()     # loops that warned (see _warn_cb)
        self._ctrl_c = _HeldCtrlC()
        self.frontiers = np.zeros(len(df.inputs), _I64)
        self.passes = 0               # compiled passes run (a run may take several)
        self.n_nodes = N
        self._capture_ids = [ids[id(c)] for c in self.captures]
        self._cap_seen = [0] * len(self.captures)
        self._probe_ids = [ids[id(p)] for p in self.probes]
        # Compiled entry points, resolved once (see _entry).
        self._run_fn = _rt.run
        self._take_fn = _rt.take_batches
        self._push_fn = _rt.push_batch
        self._prepared = False        # (see prepare)

    def _state_widths(self, order, kind, prm, scope_of, n_loops):
        """The key and value widths of every hashed state: per loop the widest of its
        traces (used when it runs sequentially), then a placeholder per root-scope
        count/sum/distinct (kernels.rootagg makes its own tables at its first step)."""
        kv = self._loop_widths(order, kind, prm, scope_of, n_loops)
        agg = np.ones((len(self.agg_nodes), 2), _I64)
        return np.ascontiguousarray(np.concatenate([kv, agg]))

    def _loop_widths(self, order, kind, prm, scope_of, n_loops):
        """Per loop, the widest key and value of its traces (its hashed state's row
        and entry widths when it runs sequentially)."""
        kv = np.zeros((max(n_loops, 1), 2), _I64)
        for i in range(len(order)):
            li = int(scope_of[i])
            if li < 0 or not self.sequential[li]:
                continue
            if kind[i] == _rt.K_ARRANGE:
                kw = int(prm[i, 5])
                kv[li, 0] = max(kv[li, 0], kw)
                kv[li, 1] = max(kv[li, 1], int(prm[i, 0]) - kw)
            elif kind[i] == _rt.K_REDUCE:
                kv[li, 1] = max(kv[li, 1], int(prm[i, 5]))
        kv[:, 0] = np.maximum(kv[:, 0], 1)
        return kv

    # ------------------------------------------------------------------ callbacks
    def _batch_cb(self, n, data, times, diffs):
        held = self._ctrl_c
        held.check()
        node = self.callbacks[n]
        root = self.root_scope[n] < 0
        u = Updates(data, np.ascontiguousarray(times[:, :1]) if root else times, diffs)
        held.in_user = True
        try:
            out = node.apply(u)
        finally:
            held.in_user = False
        t = out.times
        if root:
            t2 = np.zeros((len(out), 2), _I64)
            t2[:, :1] = t
            t = t2
        return (np.ascontiguousarray(out.data, dtype=_I64),
                np.ascontiguousarray(t, dtype=_I64),
                np.ascontiguousarray(out.diffs, dtype=_I64))

    def _logic_cb(self, n, mom_offs, acc_vals, acc_counts):
        held = self._ctrl_c
        held.check()
        node = self.logic[n]
        held.in_user = True
        try:
            offs, vals, counts = node.logic(mom_offs, acc_vals, acc_counts)
        finally:
            held.in_user = False
        return (np.ascontiguousarray(offs, dtype=_I64),
                np.ascontiguousarray(vals, dtype=_I64).reshape(len(counts), node.ow),
                np.ascontiguousarray(counts, dtype=_I64))

    def _warn_cb(self, loop, k):
        # Called at iteration 10,000 of a loop without a limit, then every 1,024
        # iterations (kernels.hooks.loop_call_due): it warns the first time; every
        # call raises a Ctrl-C held since (see _HeldCtrlC) out of the run.
        self._ctrl_c.check()
        if loop in self._warned_loops:
            return
        self._warned_loops.add(loop)
        from ddnumba.operators.iterate import ctrl_c_hint
        warnings.warn(f"loop {self.loops[loop].child.name!r} is at iteration {k} and still "
                      f"changing; pass max_iterations= to stop a loop that does not "
                      f"converge ({ctrl_c_hint()})", RuntimeWarning, stacklevel=4)

    # ------------------------------------------------------------------ running
    # A run of a dataflow with loops whose new updates are many next to the state
    # (more than 1/PASS_STATE_RATIO of the trace records) and span more than
    # max_times_per_pass distinct times is executed as several passes, each advancing
    # the frontier over a share of those times (at least max_times_per_pass). Inside a
    # loop run nothing can be compacted until the run ends and every round re-reads
    # the run's history, so when a run's updates pile onto few keys one pass costs
    # more than its share: at N=1,000, 10,000 reachability changes at their own times
    # ran at 9,700 changes/s in one pass, 14,400 in passes of 1,024 times. Each pass
    # ends with a settle (merges), so with large state (N=1e6: 36M records against
    # 20k updates) one pass is better: passes there made B=10000 1.6x slower. Passes
    # are what a caller advancing the inputs in steps would run; the results are the
    # same.
    max_times_per_pass = 1024
    PASS_STATE_RATIO = 16

    def prepare(self):
        """Compile (or load from Numba's cache) what a run calls, before it takes any
        input: the first run() in a process. The runtime is compiled apart from running,
        so that only that is announced (a long compile, not a long first run), and an
        interrupt here (Ctrl-C during minutes of compiling) loses nothing: the dataflow
        is as it was (:meth:`Dataflow.run` calls this before the run proper)."""
        if self._prepared:
            return
        from numba import typeof
        if self._run_fn is _rt.run:
            if _cold(_rt.run):
                sig = tuple(typeof(a) for a in (self.prog, self.st, self.frontiers))
                with _SlowNotice(COMPILE_NOTICE_S, COMPILE_NOTICE):
                    compile_runtime(sig)
            self._run_fn = _entry(_rt.run)
        # (the batch types: C-contiguous and writeable, see _writeable)
        d2, d1 = typeof(np.zeros((1, 1), _I64)), typeof(np.zeros(1, _I64))
        if self._push_fn is _rt.push_batch and self._input_queues:
            if _cold(_rt.push_batch):
                q = next(iter(self._input_queues.values()))
                _rt.push_batch.compile((typeof(q), d2, d2, d1))
            self._push_fn = _entry(_rt.push_batch)
        if self._take_fn is _rt.take_batches and self._capture_lists:
            if _cold(_rt.take_batches):
                _rt.take_batches.compile((typeof(self._capture_lists[0]), typeof(1)))
            self._take_fn = _entry(_rt.take_batches)
        self._prepared = True

    def run(self):
        self.prepare()
        df = self.df
        queues = self._input_queues
        new_times = []
        for i, h in enumerate(df.inputs):
            u = h._drain()
            if u is not None and len(u):
                t = np.zeros((len(u), 2), _I64)
                t[:, 0] = u.times[:, 0]
                new_times.append(t[:, 0])
                # Batches are never written to, but the compiled code's batch type is
                # writeable (Arrow zero-copy columns are read-only): copy those.
                self._push_fn(queues[i], _writeable(u.data), t, _writeable(u.diffs))
            f = h.frontier
            self.frontiers[i] = _INF if (h.closed or len(f) == 0) else f[0, 0]
        passes = [self.frontiers]
        # (a run of few updates cannot span many times: no work on the small-run path)
        if self.loops and sum(len(x) for x in new_times) > self.max_times_per_pass:
            times = np.concatenate(new_times)
            times = times[times < self.frontiers.min()]
            ts = np.unique(times)
            c = self.max_times_per_pass
            if len(ts) > c:
                share = max(1, self.state_records() // self.PASS_STATE_RATIO)
                if len(times) > share:
                    c = max(c, int(len(ts) * share // len(times)))
                    passes = [np.minimum(self.frontiers, b) for b in ts[c::c]] + passes
        saved = _rt._HOOKS[:]
        _rt.set_hooks(*self._hooks)
        try:
            with self._ctrl_c:
                for fr in passes:
                    self.passes += 1
                    status = self._run_pass(fr)
                    if status != _rt.OK:
                        break
        finally:
            _rt._HOOKS[:] = saved
        if status == _rt.ITERATION_LIMIT:
            from ddnumba.operators.iterate import IterationLimitError
            info = self.st[9]
            lp = self.loops[int(info[0])].child
            raise IterationLimitError(
                f"loop {lp.name!r} did not converge within max_iterations="
                f"{lp.max_iterations} (still changing at iteration {int(info[1])}); raise "
                f"the limit or check that the loop body reaches a fixed point")
        self._sync_outputs()
        return self._ctrl_c.deliver()

    def _run_pass(self, fr):
        """One compiled pass up to frontier ``fr``: its status."""
        try:
            return self._run_fn(self.prog, self.st, fr)
        except OverflowError as e:
            # a checked sum of a map: the map's message
            if str(e) != _seq.MAP_OVERFLOW:
                raise
            node = int(self.st[9][_rt.INFO_MAP]) - 1
            self.st[9][_rt.INFO_MAP] = 0
            if node >= 0 and node in self._map_messages:
                raise OverflowError(self._map_messages[node]) from None
            if node < 0 and self._sum_messages:      # (a sequential loop's)
                raise OverflowError(" / ".join(self._sum_messages)) from None
            raise
        except SystemError as e:
            # A Ctrl-C raised inside Numba's objmode glue (where _HeldCtrlC could not
            # take the signal over: another handler was installed) is reported so.
            if isinstance(e.__cause__, KeyboardInterrupt):
                raise KeyboardInterrupt() from None
            raise

    def _sync_outputs(self):
        nf = self.st[7]
        for idx, node in enumerate(self.captures):
            i = self._capture_ids[idx]
            if self.st[10][i, 1] != self._cap_seen[idx]:
                # New updates reached the capture since the last run.
                self._cap_seen[idx] = self.st[10][i, 1]
                d, t, f = self._take_fn(self._capture_lists[idx], node.arity)
                if len(f):
                    node.add(Updates(d, np.ascontiguousarray(t[:, :1]), f))
            self._set_frontier(node, nf[i])
        for node, i in zip(self.probes, self._probe_ids):
            self._set_frontier(node, nf[i])

    def _set_frontier(self, node, v):
        # (the array is made when it is read: see output.SinkNode)
        if node._native_frontier != v:
            node._native_frontier = v
            node._frontier = None

    # ------------------------------------------------------------------ statistics
    def state_records(self):
        """Updates held by every trace (arrangements and reduce outputs)."""
        return int(_rt.spine_sizes(self.st).sum()) + int(_rt.seq_records(self.st).sum())

    def node_stats(self):
        """Per operator: ``(node, steps with input, updates in, updates out)``."""
        st = self.st[10]
        return [(node, int(st[i, 0]), int(st[i, 1]), int(st[i, 2]))
                for i, node in enumerate(self.nodes)]

    def rounds(self):
        """Loop rounds run so far (all loops, all runs)."""
        return int(self.st[9][2])

    def spine_work(self):
        """Trace maintenance so far: ``(merges, rows read by them)``."""
        return int(self.st[9][4]), int(self.st[9][5])


def _entry(dispatcher):
    """The compiled entry point of a runtime function with a single signature.

    Calling the dispatcher resolves the Numba types of the arguments on every call;
    for the runtime's nested tuples of typed lists that costs ~150 µs, more than a
    single-change run itself. The entry point of the (only) compiled signature skips
    that. Falls back to the dispatcher before the first compilation.
    """
    sigs = getattr(dispatcher, "signatures", ())
    if len(sigs) == 1:
        return dispatcher.overloads[sigs[0]].entry_point
    return dispatcher


def _writeable(a):
    f = a.flags
    if f.c_contiguous and f.writeable and a.dtype == _I64:
        return a            # (the common case: np.require costs ~1.5 µs)
    return np.require(a, _I64, ["C", "W"])


def compile_dataflow(df, engine):
    """The native engine for ``df``, or None when the Python engine should run it."""
    if engine == "python":
        return None
    try:
        return NativeEngine(df)
    except Unsupported as e:
        if engine == "native":
            raise ValueError(f"Dataflow(engine='native'): not supported: {e}") from None
        return None

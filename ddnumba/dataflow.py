"""Dataflow graphs: inputs, scopes, frontiers and the scheduler.

A :class:`Dataflow` is a graph of operator *nodes* built by :class:`Collection` methods
and executed by :meth:`Dataflow.run`. Data moves between nodes as :class:`Updates`
(structure-of-arrays update batches in which every row carries its own time).

Frontiers. Every input holds a *frontier*: an antichain of times that no future update
can precede. A node's frontier is the lower envelope (meet) of its inputs' frontiers, so
times *not* in the future of it are complete. Stateless operators pass every update on at
once; stateful ones (arrangements, reduces) act on all updates at complete times in one
pass, however many distinct times those are, and hold the rest. After each step a stateful
node advances its traces' compaction frontiers to its own frontier, so state stays
proportional to what can still be observed.

Scopes. The root scope has ``time_dims`` coordinates; every ``iterate`` opens a child
scope with one more (the iteration counter). A child scope runs in *rounds*; see
:mod:`ddnumba.operators.iterate`.

Times are non-negative: inputs start at the frontier ``(0, ..., 0)``.
"""
from __future__ import annotations

import numbers
import os
import re
import sys

import numpy as np

from ddnumba.kernels import lattice as _lattice
from ddnumba.updates import Updates

_I64 = np.int64
_I64_MAX = np.iinfo(np.int64).max


def meet_frontiers(frontiers, dims):
    """Lower envelope of several frontiers (an empty list gives the empty frontier)."""
    fs = [f for f in frontiers if f is not None and len(f)]
    if not fs:
        return np.empty((0, dims), _I64)
    if len(fs) == 1:
        return fs[0]
    return _lattice.antichain(np.ascontiguousarray(np.concatenate(fs)))


class Node:
    """An operator in the graph. Subclasses implement :meth:`step`.

    ``inputs`` are upstream nodes; what they emit is queued per input port. ``frontier``
    is set by the scheduler before each ``step``.
    """

    kind = "node"

    def __init__(self, scope, inputs, arity, *, name=None):
        self.scope = scope
        self.df = scope.df
        self.inputs = list(inputs)
        self.arity = arity
        self.name = name or self.kind
        self.queues = [[] for _ in self.inputs]
        self.consumers = []
        self.frontier = np.zeros((1, scope.dims), _I64)
        scope.add(self)         # (first: it may refuse, and then nothing is linked)
        for port, node in enumerate(self.inputs):
            node.consumers.append((self, port))

    @property
    def dims(self):
        return self.scope.dims

    # -- data movement -------------------------------------------------------------
    def push(self, port, item):
        if item is not None and len(item):
            self.queues[port].append(item)

    def take(self, port=0) -> Updates:
        q = self.queues[port]
        self.queues[port] = []
        if not q:
            return Updates.empty(self.inputs[port].arity, self.dims)
        return Updates.concat(q, self.inputs[port].arity, self.dims)

    def emit(self, item):
        if item is None or not len(item):
            return
        for node, port in self.consumers:
            node.push(port, item)

    # -- scheduling ------------------------------------------------------------------
    def input_frontier(self):
        return meet_frontiers([n.frontier for n in self.inputs], self.dims)

    def has_queued(self):
        return any(self.queues)

    def queued_times(self):
        """Times of queued updates and batches (used by loops to find the next round)."""
        return [item.trie.times if hasattr(item, "trie") else item.times
                for q in self.queues for item in q]

    def held_times(self):
        """Times of work this node holds (pending times, buffered future updates)."""
        return []

    def step(self):
        raise NotImplementedError

    def holds_work(self):
        """True when the node keeps updates or pending times for a later frontier."""
        return False

    def wants_step(self, frontier_changed, force):
        """Whether a pass must step this node. Nodes with nothing queued are skipped
        unless their frontier moved and they hold work it may release, or the pass is a
        ``force`` pass (root passes and loop settling, where traces compact)."""
        if any(self.queues):
            return True
        return frontier_changed and (force or self.holds_work())

    def __repr__(self):
        return f"<{type(self).__name__} {self.name!r}>"


class Scope:
    """A set of nodes with the same number of time coordinates, in creation order.

    Creation order is a topological order (a node's inputs exist before it), except for
    loop feedback edges, which the loop scheduler handles by running rounds.
    """

    def __init__(self, df, parent, dims):
        self.df = df
        self.parent = parent
        self.dims = dims
        self.nodes: list[Node] = []
        self.depth = 0 if parent is None else parent.depth + 1
        self.loop = None

    def add(self, node):
        if self.df.cluster is not None:
            raise RuntimeError("cannot add operators to a dataflow with workers after its "
                               "first run(); build the whole graph first")
        if self.df._native:
            raise RuntimeError("cannot add operators after the first run() (or prepare()) "
                               "of a dataflow on the native engine; build the whole graph "
                               "first (or use Dataflow(engine='python'))")
        if self.df.runs:
            raise RuntimeError(
                "cannot add operators after the first run(): an operator added now would "
                "see only the updates fed from here on, not the collections as they "
                "are; build the whole graph first")
        self.nodes.append(node)

    def all_nodes(self):
        """Nodes of this scope and of every loop nested in it."""
        for node in self.nodes:
            yield node
            child = getattr(node, "child", None)
            if child is not None:
                yield from child.all_nodes()

    def run_pass(self, *, force=True):
        """One topological pass: each node computes its frontier and steps if needed."""
        for node in self.nodes:
            f = self.node_frontier(node)
            old = node.frontier
            changed = f is not old and (f.shape != old.shape or not np.array_equal(f, old))
            node.frontier = f
            if node.wants_step(changed, force):
                node.step()

    def node_frontier(self, node):
        return node.input_frontier()


class InputNode(Node):
    kind = "input"

    def __init__(self, scope, handle):
        self.handle = handle
        super().__init__(scope, [], len(handle.names), name=f"input{handle.names}")

    def input_frontier(self):
        return self.handle.frontier

    def wants_step(self, frontier_changed, force):
        return bool(self.handle._buffer)

    def step(self):
        upd = self.handle._drain()
        if upd is not None:
            self.emit(upd)

    def held_times(self):
        return []


def _as_int_column(values, what):
    """Convert one user column to int64, rejecting non-integer data with a clear error."""
    if isinstance(values, np.ndarray):
        arr = values
    else:
        try:
            import pyarrow as pa
            if isinstance(values, (pa.Array, pa.ChunkedArray)):
                if values.null_count:
                    raise ValueError(f"{what}: column has {values.null_count} null(s); "
                                     f"nulls are not supported")
                arr = values.to_numpy(zero_copy_only=False)
            else:
                arr = np.asarray(values)
        except ImportError:  # pragma: no cover - pyarrow is a dependency
            arr = np.asarray(values)
    if arr.dtype.kind == "b":
        return arr.astype(_I64)
    if arr.dtype.kind == "i":
        return arr.astype(_I64, copy=False)
    if arr.dtype.kind == "u":
        if arr.size and arr.max() > _I64_MAX:
            raise OverflowError(f"{what}: value {arr.max()} does not fit in int64")
        return arr.astype(_I64)
    if arr.size == 0 and arr.dtype.kind in "Of":
        return np.empty(0, _I64)        # ([] and np.array([]) are float64)
    if arr.dtype.kind == "O" and all(isinstance(v, numbers.Integral) and
                                     not isinstance(v, bool) for v in arr.flat):
        big = [v for v in arr.flat if not -_I64_MAX - 1 <= v <= _I64_MAX]
        if big:
            raise OverflowError(f"{what}: value {big[0]} does not fit in int64")
        return arr.astype(_I64)
    sample = arr.flat[0] if arr.size else None
    raise TypeError(
        f"{what}: expected integer data, got dtype {arr.dtype}"
        + (f" (first value {sample!r})" if sample is not None else "")
        + "; encode other types with ddnumba.io (strings, floats, dates)")


class InputHandle:
    """Feeds updates into a dataflow, like differential dataflow's ``InputSession``.

    Every row carries its own time; one call may hold many distinct times and the engine
    processes them in one pass. Times must be in the future of the input's frontier
    (``>=`` it); :meth:`advance_to` moves the frontier and tells the engine that earlier
    times are complete.
    """

    def __init__(self, df, names):
        self.df = df
        self.names = list(names)
        self.dims = df.time_dims
        self.frontier = np.zeros((1, self.dims), _I64)
        self.closed = False
        self._buffer: list[Updates] = []
        self._label = f"input {self.names}"
        # The least and greatest time coordinate fed since the last run (None: none
        # fed), for an error in the run to say which updates it was processing.
        self._fed = self._ran = None
        self._bound = 0     # >= the sum of |diff| over the buffer (see update)

    # -- feeding -----------------------------------------------------------------
    def insert(self, *columns, time=None):
        """Insert rows (diff +1, or a table's ``diff`` column) at ``time`` (a
        scalar/tuple, or one time per row)."""
        self.update(*columns, time=time)

    def remove(self, *columns, time=None):
        """Remove rows (diff -1) at ``time`` (a table with a ``diff`` column is refused:
        feed it with :meth:`update`)."""
        self.update(*columns, time=time, diff=-1)

    def update(self, *columns, time=None, diff=None):
        """Add rows with multiplicities ``diff`` (scalar or one per row; default: a
        table's ``diff`` column, else 1) at ``time``.

        ``columns`` is one array-like per input column, a single 2-D array ``[n, arity]``,
        or one ``pyarrow.Table``/``RecordBatch`` with the input's column names (and
        optionally ``time`` or ``time_0..`` and ``diff`` columns). A table with a
        ``diff`` column takes no ``diff`` argument (nor :meth:`remove`).

        Nothing of a refused call is kept. Raises
        ``RuntimeError`` when the input is closed; ``TypeError`` for data, times or
        diffs that are not integers (floats, strings, ``None`` are not truncated or
        parsed); ``ValueError`` for a wrong number of columns or of times, columns of
        different lengths, no time, a negative time, a time not ``>=`` the frontier
        or with a coordinate 2**63 - 1, table time columns that do not fit
        ``time_dims``, or a table's ``diff`` column with ``diff=``; and
        ``OverflowError`` for values beyond int64 or diffs that, with those fed
        before them, sum outside int64 for one row at one time.
        """
        if self.closed:
            raise RuntimeError(f"{self._label}: the input is closed; no more updates "
                               f"can be added")
        data, table_times, table_diffs = self._columns(columns)
        n = data.shape[0]
        if time is None:
            if table_times is None:
                raise ValueError(f"{self._label}: no time given (pass time=...)")
            times = table_times
        else:
            times = self._times(time, n)
        if table_diffs is not None:
            if diff is not None:
                raise ValueError(f"{self._label}: the table has a diff column, and diff="
                                 f"{diff!r} (or remove) would override it; feed it with "
                                 f"update(table), or drop the column")
            diffs = table_diffs
        else:
            diffs = self._diffs(1 if diff is None else diff, n)
        if n == 0:
            return
        lo, hi = self._check_times(times)
        upd = Updates(data, times, diffs)
        # Diffs that each fit int64 but sum outside it for one row at one time (two
        # updates of 2**62) are refused here, when fed: a capture would keep them and
        # fail on every read, and a run would fail part-way. ``_bound`` bounds the sum
        # of |diff| over what is buffered; only past int64 is the buffer summed per
        # row and time. (A few rows, as in a run of one change: Python's max is ~10x
        # cheaper than two NumPy reductions.)
        d = upd.diffs
        big = max(map(abs, d.tolist())) if n <= 16 else max(int(d.max()), -int(d.min()))
        bound = self._bound + n * big
        if bound > _I64_MAX:
            both = Updates.concat(self._buffer + [upd], len(self.names), self.dims)
            try:
                both = both.consolidated()
            except OverflowError:
                raise OverflowError(f"{self._label}: with the updates fed before it, "
                                    f"this batch's diffs for one row at one time sum "
                                    f"outside int64 (refused; nothing of it is kept)"
                                    ) from None
            # One consolidated batch now, which holds this one, and its own bound
            # (so later batches need not sum it again unless it is still large).
            self._buffer = [both]
            d = both.diffs
            bound = len(d) * (max(int(d.max()), -int(d.min())) if len(d) else 0)
        else:
            self._buffer.append(upd)
        self._bound = bound
        r = self._fed
        self._fed = (lo, hi) if r is None else (min(r[0], lo), max(r[1], hi))

    def advance_to(self, time):
        """Promise that no more updates will arrive at times not ``>= time``.

        ``time`` is one time, or (partially ordered times) an antichain: a list of
        times, ``[n, time_dims]``, after which updates may arrive at times ``>=`` any
        of them. A time with a coordinate ``2**63 - 1`` (the end of time) admits no
        update, so advancing to it (or to an empty antichain) closes the input.

        Raises ``RuntimeError`` when the input is closed, ``ValueError`` for a move
        backward (the new frontier must be ``>=`` the old one) or a time of the
        wrong shape, ``TypeError`` for a time that is not integer.
        """
        if self.closed:
            raise RuntimeError(f"{self._label}: advance_to on a closed input")
        if (self.dims == 1 and type(time) is int
                and int(self.frontier[0, 0]) <= time < _I64_MAX):
            self.frontier = np.array([[time]], _I64)   # (the common case)
            return
        new = self._frontier_of(time)
        if self.dims == 1 and len(new):
            # A total order: the frontier is one time (the common, hot case).
            back = int(new[0, 0]) < int(self.frontier[0, 0])
        else:
            back = not _lattice.frontier_less_equal(self.frontier, new)
        if back:
            shown = _fmt_time(new[0]) if len(new) == 1 else _fmt_frontier(new)
            raise ValueError(
                f"{self._label}: advance_to({shown}) would move the frontier "
                f"backward from {_fmt_frontier(self.frontier)}")
        if len(new) == 0:
            self.close()
        else:
            self.frontier = np.ascontiguousarray(new)

    def _frontier_of(self, time):
        """``time`` (one time or an antichain of them) as a frontier ``[k, dims]``:
        its minimal elements, without those that have an end-of-time coordinate."""
        try:
            a = np.asarray(time) if not isinstance(time, np.ndarray) else time
        except ValueError:
            raise ValueError(f"{self._label}: advance_to: {time!r} is neither a time "
                             f"nor a list of times of time_dims={self.dims} "
                             f"coordinates") from None
        if a.size == 0 and a.ndim >= 1:
            return np.empty((0, self.dims), _I64)     # the empty antichain
        if a.ndim == 2 or (a.ndim == 1 and a.dtype == object):
            if a.ndim == 2 and a.shape[1] != self.dims:
                raise ValueError(f"{self._label}: advance_to: times of shape {a.shape} "
                                 f"do not match time_dims={self.dims} (expected "
                                 f"[n, {self.dims}])")
            t = _int_times(a, self._label, one=False)
            if t.ndim != 2:
                raise ValueError(f"{self._label}: advance_to: {time!r} is neither a time "
                                 f"nor a list of times")
            if np.any(t < 0):
                raise ValueError(f"{self._label}: advance_to: negative time in {time!r}")
        else:
            t = self._one_time(time).reshape(1, self.dims)
            if t.min() < 0:
                raise ValueError(f"{self._label}: advance_to: negative time "
                                 f"{_fmt_time(t[0])}")
        t = t[(t != _I64_MAX).all(axis=1)]
        return _lattice.antichain(t) if len(t) > 1 else np.ascontiguousarray(t)

    def close(self):
        """No more updates: the frontier becomes empty and every time completes."""
        self.closed = True
        self.frontier = np.empty((0, self.dims), _I64)

    # -- internals -----------------------------------------------------------------
    def _drain(self):
        if not self._buffer:
            return None
        upd = Updates.concat(self._buffer, len(self.names), self.dims)
        self._buffer = []
        self._ran, self._fed = self._fed, None
        self._bound = 0
        return upd

    def _columns(self, columns):
        arity = len(self.names)
        table_times = table_diffs = None
        if len(columns) == 1 and _is_arrow_table(columns[0]):
            tbl = columns[0]
            missing = [c for c in self.names if c not in tbl.column_names]
            if missing:
                raise ValueError(f"{self._label}: table lacks column(s) {missing} "
                                 f"(it has {tbl.column_names})")
            cols = [_as_int_column(tbl.column(c), f"{self._label} column {c!r}")
                    for c in self.names]
            # time columns: "time" (or "time_0") with one coordinate, time_0..time_{d-1}
            # with d; a data column of the input is never one
            tnames = [c for c in tbl.column_names if c not in self.names
                      and (c == "time" or re.fullmatch(r"time_\d+", c))]
            if tnames:
                want = ([("time" if "time" in tnames else "time_0")] if self.dims == 1
                        else [f"time_{i}" for i in range(self.dims)])
                if sorted(tnames) != sorted(want):
                    raise ValueError(f"{self._label}: the table's time column(s) {tnames} "
                                     f"do not fit time_dims={self.dims} (expected "
                                     f"{want})")
                tcols = [_as_int_column(tbl.column(c), f"{self._label} column {c!r}")
                         for c in want]
                table_times = np.ascontiguousarray(np.stack(tcols, axis=1))
            if "diff" in tbl.column_names:
                table_diffs = _as_int_column(tbl.column("diff"), f"{self._label} diff")
        elif len(columns) == 1 and isinstance(columns[0], np.ndarray) and columns[0].ndim == 2:
            mat = columns[0]
            if mat.shape[1] != arity:
                raise ValueError(f"{self._label}: expected {arity} column(s) "
                                 f"{self.names}, got a matrix with {mat.shape[1]}")
            cols = [_as_int_column(mat[:, i], f"{self._label} column {self.names[i]!r}")
                    for i in range(arity)]
        else:
            if len(columns) != arity:
                raise ValueError(f"{self._label}: expected {arity} column(s) "
                                 f"{self.names}, got {len(columns)}")
            cols = []
            for name, c in zip(self.names, columns):
                if type(c) is np.ndarray and c.ndim == 1 and c.dtype == _I64:
                    cols.append(c)      # (the common case; copied into data below)
                    continue
                if isinstance(c, numbers.Integral):
                    c = [c]
                a = _as_int_column(c, f"{self._label} column {name!r}")
                if a.ndim != 1:
                    raise ValueError(f"{self._label} column {name!r}: expected a 1-D "
                                     f"array, got shape {a.shape}")
                cols.append(a)
        lens = {len(c) for c in cols}
        if len(lens) > 1:
            raise ValueError(f"{self._label}: columns have different lengths "
                             f"{[len(c) for c in cols]}")
        n = lens.pop() if lens else 0
        data = np.empty((n, arity), _I64)
        for i, c in enumerate(cols):
            data[:, i] = c
        return data, table_times, table_diffs

    def _one_time(self, time):
        t = _int_times(time, self._label, one=True).reshape(-1)
        if t.shape[0] != self.dims:
            shown = np.asarray(time).tolist() if isinstance(time, np.ndarray) else time
            raise ValueError(f"{self._label}: time {shown!r} has {t.shape[0]} "
                             f"coordinate(s); this dataflow has time_dims={self.dims}")
        return t

    def _times(self, time, n):
        if (self.dims == 1 and type(time) is np.ndarray and time.ndim == 1
                and time.dtype == _I64 and time.shape[0] == n):
            return time.reshape(n, 1).copy()    # (the common case: one time per row)
        t = _int_times(time, self._label, one=False)
        if t.ndim == 0 or (t.ndim == 1 and self.dims > 1):
            one = self._one_time(t)
            return np.ascontiguousarray(np.broadcast_to(one, (n, self.dims)))
        if t.ndim == 1 and self.dims == 1:
            t = t.reshape(-1, 1)
        if t.ndim != 2 or t.shape[1] != self.dims:
            raise ValueError(f"{self._label}: times of shape {t.shape} do not match "
                             f"time_dims={self.dims} (expected [n, {self.dims}])")
        if t.shape[0] != n:
            raise ValueError(f"{self._label}: {t.shape[0]} times for {n} rows")
        return np.ascontiguousarray(t)

    def _diffs(self, diff, n):
        if type(diff) is np.ndarray and diff.dtype == _I64 and diff.shape == (n,):
            return diff.copy()                  # (the common case)
        d = np.asarray(diff)
        if d.dtype.kind not in "iub":
            raise TypeError(f"{self._label}: diffs must be integers, got dtype {d.dtype}")
        if d.dtype.kind == "u" and d.size and d.max() > _I64_MAX:
            raise OverflowError(f"{self._label}: diff {d.max()} does not fit in int64")
        d = d.astype(_I64)
        if d.ndim == 0:
            return np.full(n, d, _I64)
        if d.shape != (n,):
            raise ValueError(f"{self._label}: {d.shape} diffs for {n} rows")
        return np.ascontiguousarray(d)

    def _check_times(self, times):
        # (few rows, as in a run of one change: Python's min/max beat NumPy's calls)
        if times.size <= 16:
            flat = times.ravel().tolist()
            lo, hi = (min(flat), max(flat)) if flat else (0, 0)
        else:
            lo, hi = times.min(), times.max()
        if lo < 0:
            raise ValueError(f"{self._label}: negative time "
                             f"{_fmt_time(times[np.argmin(times.min(axis=1))])}; times "
                             f"are non-negative")
        if hi == _I64_MAX:
            bad = times[np.argmax(times.max(axis=1))]
            raise ValueError(f"{self._label}: time {_fmt_time(bad)} has a coordinate "
                             f"2**63 - 1, which stands for 'never' (the end of time); "
                             f"times must be below it")
        if self.dims == 1 and lo >= self.frontier[0, 0]:
            return lo, hi   # a total order: every time is >= the frontier's element
        ok = _lattice.in_future(times, self.frontier)
        if not ok.all():
            bad = times[np.argmin(ok)]
            raise ValueError(
                f"{self._label}: time {_fmt_time(bad)} is not >= the input frontier "
                f"{_fmt_frontier(self.frontier)} (times may not go backwards; "
                f"advance_to only moves forward)")
        return lo, hi

    def __repr__(self):
        return f"InputHandle({self.names}, frontier={_fmt_frontier(self.frontier)})"


def _is_arrow_table(x):
    try:
        import pyarrow as pa
    except ImportError:  # pragma: no cover
        return False
    return isinstance(x, (pa.Table, pa.RecordBatch))


def _int_times(t, label, *, one):
    """``t`` (``one``: a time, else times) as int64: ``TypeError`` unless integer
    (bool, signed or unsigned; a float, a string or ``None`` is refused rather than
    truncated or parsed), ``OverflowError`` for unsigned values beyond int64 (which
    a cast would wrap to negative times). Shared by inputs and output readers."""
    a = np.asarray(t)
    if a.dtype.kind not in "iub":
        raise TypeError(f"{label}: time {t!r} is not integer" if one else
                        f"{label}: times must be integers, got dtype {a.dtype}")
    if a.dtype.kind == "u" and a.size and a.max() > _I64_MAX:
        raise OverflowError(f"{label}: time {a.max()} does not fit in int64")
    return a.astype(_I64)


def _fmt_time(t):
    t = np.asarray(t).reshape(-1)
    return str(int(t[0])) if t.shape[0] == 1 else str(tuple(int(x) for x in t))


def _fmt_frontier(f):
    return "{" + ", ".join(_fmt_time(r) for r in f) + "}"


class Dataflow:
    """A differential dataflow program and its runtime.

    Parameters
    ----------
    time_dims : int
        Number of outer time coordinates (times are int64 vectors under the product
        order).
    workers : int, optional
        Number of worker processes, each owning a shard of the keys (see
        :mod:`ddnumba.workers`). The driver is worker 0; the others are forked at the first
        :meth:`run`. Defaults to the ``DDNUMBA_WORKERS`` environment variable, else 1.
    engine : {"auto", "native", "python"}, optional
        See the README's "Engines"; defaults to ``DDNUMBA_ENGINE``, else ``"auto"``.
    loops : {"rounds", "sequential"}, optional
        How the native engine runs loops: ``"rounds"`` (all the outer times of a run
        at once, round by round) or ``"sequential"`` (one outer time after another over
        hashed state, for loops of native operators and built-in reduces; see
        :mod:`ddnumba.kernels.seqloop`; other loops run round-wise). Defaults to
        ``DDNUMBA_LOOPS``, else ``"sequential"``. Results are identical.

    Raises ``ValueError`` for a ``time_dims``, ``workers``, ``engine`` or ``loops``
    that is not one of the above, and for ``engine="native"`` with ``workers > 1``.
    Whether the native engine applies to the graph is only known at the first
    :meth:`run`, which raises ``ValueError`` saying why when ``engine="native"``
    does not (``"auto"`` then runs the Python engine).

    Examples
    --------
    >>> import ddnumba as dd
    >>> df = dd.Dataflow()
    >>> inp, words = df.new_input(["w"])
    >>> out = words.count().capture()
    >>> inp.insert([1, 1, 2], time=0); inp.advance_to(1); df.run()
    >>> out.at(0).to_pylist()
    [{'w': 1, 'count': 2, 'count_': 1}, {'w': 2, 'count': 1, 'count_': 1}]
    """

    def __init__(self, *, time_dims=1, workers=None, engine=None, loops=None):
        if isinstance(time_dims, bool) or not isinstance(time_dims, numbers.Integral) \
                or time_dims < 1:
            raise ValueError(f"Dataflow: time_dims must be an integer >= 1, got "
                             f"{time_dims!r}")
        from_env = workers is None and "DDNUMBA_WORKERS" in os.environ
        if workers is None:
            workers = os.environ.get("DDNUMBA_WORKERS", "1")
        w = workers
        if isinstance(w, str) and w.strip().isdigit():
            w = int(w.strip())
        if isinstance(w, bool) or not isinstance(w, numbers.Integral) or w < 1:
            raise ValueError(f"Dataflow: workers must be a positive integer, got "
                             f"{workers!r}"
                             + (" (from DDNUMBA_WORKERS)" if from_env else ""))
        self.time_dims = int(time_dims)
        self.workers = int(w)
        from ddnumba.native import ENGINES
        engine = engine or os.environ.get("DDNUMBA_ENGINE", "auto")
        if engine not in ENGINES:
            raise ValueError(f"Dataflow: engine must be one of {ENGINES}, got {engine!r}")
        if engine == "native" and self.workers != 1:
            raise ValueError(f"Dataflow(engine='native'): not supported: workers="
                             f"{self.workers}" + (" (from DDNUMBA_WORKERS)" if from_env
                                                  else "") +
                             " (worker processes run the Python engine; use "
                             "engine='auto' or 'python', or workers=1)")
        self.engine = engine
        from ddnumba.native import LOOP_MODES
        if loops is not None and loops not in LOOP_MODES:
            raise ValueError(f"Dataflow: loops must be one of {LOOP_MODES}, got {loops!r}")
        self.loops = loops
        self._native = None        # NativeEngine, False (Python engine), None (undecided)
        self.cluster = None        # set at the first run() when workers > 1
        self._failed = None
        self._captures = None      # capture nodes, listed once the graph is fixed
        self._auto_captures = []   # self-compacting capture nodes (checked after runs)
        self.root = Scope(self, None, self.time_dims)
        self.inputs: list[InputHandle] = []
        self.runs = 0

    def new_input(self, names):
        """A new input: returns ``(InputHandle, Collection)``."""
        from ddnumba.collection import Collection
        if isinstance(names, str):
            names = [names]
        names = [str(n) for n in names]
        if not names:
            raise ValueError("new_input: at least one column name is required")
        if len(set(names)) != len(names):
            raise ValueError(f"new_input: duplicate column names in {names}")
        handle = InputHandle(self, names)
        node = InputNode(self.root, handle)
        self.inputs.append(handle)
        return handle, Collection(node, names)

    def iterative(self, build, *, max_iterations=None, name=None):
        """Build a loop with several (mutually recursive) variables.

        ``build(loop)`` receives a :class:`~ddnumba.operators.iterate.Loop`; it creates
        variables with ``loop.variable(source)`` (a
        :class:`~ddnumba.operators.iterate.Variable`: its ``.collection`` is the
        variable's value inside the loop, starting from ``source``, and
        ``.set(result)`` makes ``result`` its next iteration's value), sets every
        one, and returns the collection (or tuple of collections) to take out of the
        loop; ``loop.enter(c)`` brings an outer collection in (using it inside does
        so too). Returns them left. ``max_iterations`` and ``name`` are as for
        :meth:`Collection.iterate`.

        Examples
        --------
        Nodes at an even and at an odd number of steps from the roots, two variables
        defined by each other:

        >>> import ddnumba as dd
        >>> df = dd.Dataflow()
        >>> ri, roots = df.new_input(["node"]); ei, edges = df.new_input(["src", "dst"])
        >>> def build(loop):
        ...     even = loop.variable(roots)
        ...     odd = loop.variable(roots.filter(lambda n: n < 0))    # starts empty
        ...     step = lambda x: x.join(edges).map(lambda n, d: d, names=["node"])
        ...     even.set(step(odd.collection).concat(roots).distinct())
        ...     odd.set(step(even.collection).distinct())
        ...     return even.collection, odd.collection
        >>> even, odd = df.iterative(build)
        >>> ce, co = even.capture(), odd.capture()
        >>> ri.insert([1], time=0); ei.insert([1, 2, 3], [2, 3, 4], time=0)
        >>> ri.close(); ei.close(); df.run()
        >>> [sorted(c.at(0).column("node").to_pylist()) for c in (ce, co)]
        [[1, 3], [2, 4]]
        """
        from ddnumba.operators.iterate import build_loop
        return build_loop(self.root, build, max_iterations=max_iterations, name=name)

    def _refuse_if_failed(self):
        """RuntimeError if an earlier run() stopped part-way (see :meth:`run`)."""
        if self._failed is not None:
            raise RuntimeError(f"this dataflow failed in an earlier run() "
                               f"({self._failed}); build a new one") from None

    def prepare(self):
        """Settle the engine and compile the native runtime (or load it from Numba's
        cache) now rather than in the first :meth:`run`, which does this itself.

        On a machine's first use that compile takes minutes (it says so on stderr), so
        a program that times its runs, or answers requests, can call this first. On
        the native engine the graph is fixed from here on, as after a run. Nothing to
        compile with workers (their processes start at the first run) or on the Python
        engine.

        Examples
        --------
        >>> import ddnumba as dd
        >>> df = dd.Dataflow()
        >>> inp, xs = df.new_input(["x"])
        >>> got = xs.map(lambda x: (x % 2,), names=["odd"]).count().capture()
        >>> df.prepare()                # (compiles on a machine's first use)
        >>> inp.insert([5, 6, 7], time=0); inp.advance_to(1); df.run()
        >>> got.at(0).to_pylist()
        [{'odd': 0, 'count': 1, 'count_': 1}, {'odd': 1, 'count': 2, 'count_': 1}]
        """
        self._refuse_if_failed()
        if self.workers != 1:
            return
        if self._native is None:
            from ddnumba.native import compile_dataflow
            self._native = compile_dataflow(self, self.engine) or False
        if self._native:
            self._native.prepare()     # (compiling: an interrupt loses nothing)

    def run(self):
        """Process every update at a time the input frontiers have closed.

        Raises
        ------
        OverflowError
            A diff sum, join product or aggregate overflowing int64 (the message
            names the run, the times each input was fed and the frontier).
        IterationLimitError
            A loop with ``max_iterations`` that has not converged.
        ValueError
            ``engine="native"`` that does not apply to this dataflow, or a
            ``DDNUMBA_LOOPS`` value that is not a loop mode.
        WorkerError
            With workers: an error raised in a worker process, with its traceback.
        RuntimeError
            After an earlier ``run()`` raised part-way (the operators' states no
            longer agree: build a new dataflow), or after :meth:`close`.
        KeyboardInterrupt
            Ctrl-C. The native engine's compiled code takes it at its next call back
            into Python (a loop checks in every 1,024 iterations past 10,000): the run
            stops part-way and the dataflow fails for later runs. A run that finishes
            first completes, and then raises it; the dataflow goes on. A SIGINT
            handler of the program's own (a ``SparkContext`` installs one) is called
            at those same points instead, never inside compiled code's calls.

        Any exception raised by a user function (``map``, ``filter``, ...) passes
        through, and also fails the dataflow for later runs.
        """
        self._refuse_if_failed()
        held = None
        if self.workers == 1:
            self.prepare()
            try:
                if self._native:
                    held = self._native.run()
                else:
                    self.root.run_pass()
            except BaseException as e:
                # the run stopped part-way (an overflow, a user function raising, an
                # interrupt): some operators have taken the updates and others not,
                # so no later run could be right; say so instead of going on
                if isinstance(e, SystemError) and isinstance(
                        e.__cause__ or e.__context__, KeyboardInterrupt):
                    # Ctrl-C landing inside Numba's glue (unpickling a compiled
                    # function's constants) is reported so: it is an interrupt.
                    self._failed = "KeyboardInterrupt"
                    raise KeyboardInterrupt() from None
                self._failed = f"{type(e).__name__}: {e}"
                if isinstance(e, OverflowError):
                    raise OverflowError(f"{e} ({self._run_context()})") from e
                raise
        else:
            self._run_workers()
        self.runs += 1
        for node in self._auto_captures:
            node.after_run()
        if held is not None:
            # Ctrl-C during compiled code that finished before calling back into
            # Python (see ddnumba.native._HeldCtrlC): the run is complete, so the
            # dataflow goes on; the interrupt goes to its handler now (Python's
            # default raises KeyboardInterrupt; a program's own, Spark's say, runs).
            import signal
            if held is signal.default_int_handler:
                raise KeyboardInterrupt("Ctrl-C during run(); the run completed first")
            held(signal.SIGINT, sys._getframe())

    def _run_context(self):
        """Which run failed and which updates it was given, for an error message."""
        what = "times" if self.time_dims == 1 else "times with coordinates in"
        said = "; ".join(f"{h._label} was fed {what} {h._ran[0]}..{h._ran[1]}"
                         for h in self.inputs if h._ran is not None)
        fronts = {_fmt_frontier(h.frontier) for h in self.inputs}
        upto = ("" if len(fronts) != 1 else
                "; the inputs are closed: every time completes" if fronts == {"{}"} else
                f"; the run completes the times before the frontier {fronts.pop()}")
        return (f"in run() number {self.runs + 1}: " +
                (said or "no input was fed since the last run") + upto)

    # -- workers ---------------------------------------------------------------------
    def agree_min(self, value):
        """The minimum of ``value`` over all workers (``None`` = no value)."""
        if self.cluster is None:
            return value
        return self.cluster.allreduce_min(value)

    def _sink_nodes(self):
        """The captures and probes (fixed once workers run, so computed once)."""
        if getattr(self, "_sinks", None) is None:
            from ddnumba.operators.output import SinkNode
            self._sinks = [n for n in self.root.all_nodes() if isinstance(n, SinkNode)]
        return self._sinks

    def _capture_nodes(self):
        # The graph is fixed once workers run, so the list is computed once.
        if self._captures is None:
            from ddnumba.operators.output import CaptureNode
            self._captures = [n for n in self.root.all_nodes()
                              if isinstance(n, CaptureNode)]
        return self._captures

    def _run_workers(self):
        from ddnumba import workers as _workers
        if self.cluster is None:
            # Before draining: if the workers cannot start (no memory to fork, a
            # process or file limit), the input stays buffered for another try.
            self.cluster = _workers.start(self)
        drained = [h._drain() for h in self.inputs]
        cl = self.cluster
        W = self.workers
        # The sinks' frontiers before the run: if a worker fails after the driver's
        # own pass, the driver's captures and probes hold only its shard, so they
        # must not claim the run's times complete.
        sinks = self._sink_nodes()
        before = [n.frontier for n in sinks]
        try:
            cl.seq += 1
            cuts = [None if u is None else np.linspace(0, len(u), W + 1).astype(np.int64)
                    for u in drained]
            for r in range(1, W):
                descs = []
                for i, (h, u, c) in enumerate(zip(self.inputs, drained, cuts)):
                    desc = None
                    if u is not None and c[r + 1] > c[r]:
                        desc = cl.blocks.write(("in", i, r), u.take(slice(c[r], c[r + 1])))
                    descs.append((h.frontier, h.closed, desc))
                cl.send(r, ("run", cl.seq, descs))
            for h, u, c in zip(self.inputs, drained, cuts):
                if u is not None and c[1] > 0:
                    h._buffer = [u.take(slice(0, c[1]))]
            self.root.run_pass()
            caps = self._capture_nodes()
            for r in range(1, W):
                msg = cl.recv(r)
                cl._check(r, msg, "done")
                for idx, desc in msg[2]:
                    node = caps[idx]
                    node.add(cl.blocks.read(r, desc, node.arity, node.dims))
        except BaseException as e:
            for n, f in zip(sinks, before):
                n.frontier = f
            err = _workers.fail(cl, e)
            x = err or e
            self._failed = f"{type(x).__name__}: {str(x).splitlines()[0] if str(x) else ''}"
            if err is None:
                raise
            raise err from None

    def _attach_worker(self, cluster):
        """In a freshly forked worker: take the cluster, drop the driver's buffers."""
        self.cluster = cluster
        for h in self.inputs:
            h._buffer = []

    def _worker_run(self, msg):
        cl = self.cluster
        cl.seq += 1
        cl._check(0, msg, "run")
        for h, (frontier, closed, desc) in zip(self.inputs, msg[2]):
            h.frontier = frontier
            h.closed = closed
            h._buffer = [] if desc is None else \
                [cl.blocks.read(0, desc, len(h.names), h.dims)]
        self.root.run_pass()
        self.runs += 1
        out = []
        for idx, node in enumerate(self._capture_nodes()):
            if node.parts:
                u = Updates.concat(node.parts, node.arity, node.dims).consolidated()
                node.clear()
                if len(u):
                    out.append((idx, cl.blocks.write(("cap", idx), u)))
        cl.send(0, ("done", cl.seq, out))

    def close(self):
        """Stop the worker processes (if any) and release their shared memory. Also
        happens when the dataflow is garbage collected or the interpreter exits."""
        if self.cluster is not None and self.cluster.procs:
            from ddnumba import workers as _workers
            _workers.shutdown(self.cluster)
        if self.cluster is not None:
            self._failed = self._failed or "closed"

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __repr__(self):
        return (f"Dataflow(time_dims={self.time_dims}, inputs={len(self.inputs)}, "
                f"nodes={len(self.root.nodes)})")

"""Sinks: ``capture`` (keep every output update) and ``probe`` (watch the frontier).

A captured stream is read back as Arrow: :meth:`Captured.updates` gives the consolidated
updates (columns, time, diff); :meth:`Captured.at` the accumulated collection at a time
that is complete. Asking about a time the frontier has not passed is an error rather
than a silently partial answer.
"""
from __future__ import annotations

import heapq
import warnings

import numpy as np

from ddnumba.dataflow import Node, _fmt_frontier, _fmt_time, _int_times
from ddnumba.io.arrow import collection_table, updates_to_table
from ddnumba.kernels import consolidate as _consolidate
from ddnumba.kernels import lattice as _lattice
from ddnumba.kernels import sort as _sort
from ddnumba.updates import Updates

_I64 = np.int64


_INF = np.iinfo(np.int64).max


class SinkNode(Node):
    """A capture or a probe. Its ``frontier`` may also be given as one time: the
    native engine (1-D times) sets ``_native_frontier`` and clears ``_frontier`` after
    every run, and the array is made only when read (a run that changes one record
    would otherwise spend ~1.5 µs a sink on it)."""
    _native_frontier = None
    _frontier = None

    @property
    def frontier(self):
        f = self._frontier
        if f is None:
            v = int(self._native_frontier)
            f = np.empty((0, 1), _I64) if v == _INF else np.array([[v]], _I64)
            self._frontier = f
        return f

    @frontier.setter
    def frontier(self, f):
        self._frontier = f


class CaptureNode(SinkNode):
    """Keeps every update it receives, as a list of parts (one per run with output).
    A long stream of small runs would make that list hold one tiny array triple per
    run, several times the size of its rows: every ``FOLD_PARTS`` parts added since
    the last fold are joined into one (concatenated, not sorted).

    Once consolidated, the first part is the consolidated whole (``_head``): reading
    the capture again after a run consolidates only the parts added since and merges
    them into it (:func:`ddnumba.kernels.consolidate.merge_consolidated`), a copy
    rather than a sort of everything.

    ``pending``: the parts not yet handed out by :meth:`take_new` (``None`` until the
    first :meth:`peek_new`; then every added part also goes there), so that reading
    what is new costs its size whatever :meth:`compact` did meanwhile."""
    kind = "capture"
    FOLD_PARTS = 256
    # A self-compacting capture (``auto_compact``) compacts after a run once the
    # updates added since its last compaction reach twice what that compaction kept
    # plus COMPACT_MIN: each compaction (a sort of what is kept) is then paid for by
    # the updates it covers, and the capture never holds much more than three times its
    # collection (plus COMPACT_MIN and one run's output).
    COMPACT_MIN = 1 << 16
    # Up to this many parts that are each consolidated are merged two at a time when
    # the capture is read or compacted (each row copied at most three times); more are
    # sorted together. Measured on a count's output (forty-third session, HISTORY.md): the
    # compactions of a count ingest, two new parts of ~1M rows each, took 0.75-0.87 s
    # merged and 1.17-1.32 s sorted; 7 or 13 parts of ~150k rows (asv CaptureCompact)
    # merged 1.1-1.8x slower than they sorted. A one-pass merge of k parts (a
    # tournament tree) was no better: 2M rows in 8 parts merged in 1.5-2.2x the sort's
    # time, 13 parts 2.3-2.5x, 3 parts about as fast as the sort and slower than two
    # pairwise merges (forty-fourth session, HISTORY.md): every row costs log2(k)
    # comparisons whose outcome cannot be predicted.
    MERGE_PARTS = 4
    # A self-compacting capture warns (once until the next take_new) when updates
    # wait for new_updates() over PENDING_WARN_RUNS runs and outnumber what the
    # capture itself may hold: they are kept until read, and a program that asked
    # once and never again would grow without bound.
    PENDING_WARN_RUNS = 1000

    def __init__(self, scope, src, names, *, auto_compact=False):
        self.names = names
        self.parts: list[Updates] = []
        self._recent = 0            # parts added since the last fold
        self._consolidated = None
        self._head = None           # parts[0] when it is consolidated
        self.pending = None         # parts since the last take_new() (None: not asked)
        self._pending_recent = 0
        self._pending_whole = None  # pending[0] when it is all of pending, consolidated
        self._pending_rows = 0      # updates in pending
        self._pending_runs = 0      # runs since the last take_new (self-compacting only)
        self._pending_warned = False
        self.since = None           # the frontier [k, d] of the compactions, if any
        self.auto_compact = bool(auto_compact)
        self._moved = False         # a compaction has moved some update's time
        self._kept_base = 0         # updates the last compaction kept
        self._kept_new = 0          # updates added since
        super().__init__(scope, [src], src.arity)
        if self.auto_compact:
            self.df._auto_captures.append(self)

    def add(self, u: Updates):
        """Record the updates ``u`` (not empty)."""
        self._kept_new += len(u)
        self.parts.append(u)
        self._consolidated = None
        self._recent = self._fold(self.parts, self._recent + 1)
        if self.pending is not None:
            self.pending.append(u)
            self._pending_rows += len(u)
            self._pending_recent = self._fold(self.pending, self._pending_recent + 1)

    def _fold(self, parts, recent):
        """Join the last ``recent`` parts into one when there are ``FOLD_PARTS`` of
        them; returns the parts added since the last fold."""
        if recent < self.FOLD_PARTS:
            return recent
        parts[-recent:] = [Updates.concat(parts[-recent:], self.arity, self.dims)]
        return 0

    def clear(self):
        """Forget the parts (a worker hands them to the driver after each run)."""
        self.parts = []
        self._recent = 0
        self._consolidated = None
        self._head = None
        if self.pending is not None:
            self.pending = []
            self._pending_recent = 0
            self._pending_whole = None
            self._pending_rows = 0

    def step(self):
        u = self.take()
        if len(u):
            self.add(u)

    def compact(self, frontier):
        """Advance every kept update's time by ``frontier`` (an antichain ``[k, d]``:
        to the meet over its elements of the join with each) and consolidate: the
        collection at every time in the future of ``frontier`` stays the same, and
        updates that cancel there are dropped. ``since`` becomes the frontier whose
        future is that of both the old ``since`` and ``frontier`` (the antichain of
        their pairwise joins): the times every compaction so far still answers for.
        """
        f = np.ascontiguousarray(frontier, dtype=_I64).reshape(-1, self.dims)
        if self.since is not None:
            s = self.since
            joins = np.maximum(s[:, None, :], f[None, :, :]).reshape(-1, self.dims)
            f = _lattice.antichain(np.ascontiguousarray(joins))
        if self.dims == 1 and len(f) == 1:
            # One pass: the kept head merged with the parts added since, each time
            # advanced to the frontier's (a 1-D antichain has one element at most).
            head, rest = self._head_and_rest()
            d, t, df, moved = _consolidate.merge_advanced(
                (head.data, head.times, head.diffs), (rest.data, rest.times, rest.diffs),
                f[0, 0])
            self._moved = self._moved or moved
            u = Updates(d, t, df)
        elif len(u := self.consolidated()):
            adv = _lattice.advance(u.times, f)
            # The rows stay sorted by data; when the advanced times keep their order
            # within each row, one linear pass consolidates them, else a sort.
            if not self._moved and not np.array_equal(adv, u.times):
                self._moved = True
            if _sort.is_sorted_rows2(u.data, adv):
                u = Updates(*_consolidate.consolidate_sorted(u.data, adv, u.diffs))
            else:
                u = Updates(u.data, adv, u.diffs).consolidated()
        self._set_whole(u)
        self.since = f
        self._kept_base = len(u)
        self._kept_new = 0

    def after_run(self):
        """The self-compacting capture's rule, checked after every run: once the
        updates added since the last compaction reach ``2 * kept + COMPACT_MIN``,
        compact to the output frontier stepped back by one in each coordinate (the
        antichain of ``f - e_i`` over its elements ``f`` and coordinates ``i``, those
        that are times): every later time is in its future, and so are the latest
        complete times -- for one coordinate, it is the last complete time; for
        ``(epoch, round)`` times with the frontier at ``(a + 1, 0)``, every time of
        epoch ``a``. Nothing happens once the output is final (empty frontier), or
        when ``since`` would not move.

        Also warns when updates wait for :meth:`take_new` too long
        (``PENDING_WARN_RUNS``)."""
        if self.pending is not None:
            self._check_pending()
        if self._kept_new < 2 * self._kept_base + self.COMPACT_MIN:
            return False
        f = self.frontier
        d = self.dims
        if not len(f):
            return False
        back = (f[:, None, :] - np.eye(d, dtype=_I64)[None, :, :]).reshape(-1, d)
        back = back[(back >= 0).all(axis=1)]
        if not len(back):
            return False
        target = _lattice.antichain(np.ascontiguousarray(back))
        if self.since is not None and _lattice.frontier_less_equal(target, self.since):
            return False            # already compacted that far
        self.compact(target)
        return True

    def _check_pending(self):
        """Count a run since the last :meth:`take_new`, and warn once when the
        updates waiting for it have outgrown the capture's own bound."""
        self._pending_runs += 1
        if self._pending_warned or self._pending_runs < self.PENDING_WARN_RUNS:
            return
        bound = 4 * (self._kept_base + self.COMPACT_MIN)
        if self._pending_rows <= bound:
            return
        self._pending_warned = True
        warnings.warn(
            f"capture(auto_compact=True): {self._pending_rows:,} updates from "
            f"{self._pending_runs:,} runs wait for new_updates(). Once new_updates() "
            f"has been called, the capture keeps every later update until it is read "
            f"again, however far it compacts: call new_updates() after runs to "
            f"stream results out, or read this capture with at() / updates() only",
            RuntimeWarning, stacklevel=4)

    def _set_whole(self, u):
        self.parts = [u] if len(u) else []
        self._recent = 0
        self._consolidated = u
        self._head = u if len(u) else None

    def _head_and_rest(self):
        """``(head, rest)``, both consolidated, whose union is every kept update: the
        consolidated first part (empty if there is none) and the other parts."""
        empty = Updates.empty(self.arity, self.dims)
        if self._consolidated is not None:
            return self._consolidated, empty
        parts = self.parts
        if self._head is not None and parts and parts[0] is self._head:
            return self._head, self._union(parts[1:])
        return empty, self._union(parts)

    def _union(self, parts):
        """The consolidation of the union of ``parts``. A reduce's output arrives
        consolidated, one part a run; when at most ``MERGE_PARTS`` parts each are (a
        linear check that stops at the first row out of order), they are merged pairwise
        (:func:`ddnumba.kernels.consolidate.merge_consolidated`, the two smallest
        first) instead of sorted together."""
        parts = [p for p in parts if len(p)]
        if len(parts) <= 1 or len(parts) > self.MERGE_PARTS or not all(
                _consolidate.is_consolidated(p.data, p.times, p.diffs) for p in parts):
            return Updates.concat(parts, self.arity, self.dims).consolidated()
        # the two smallest first (as in a Huffman code): a large part is copied as
        # few times as can be
        heap = [(len(p), i, p) for i, p in enumerate(parts)]
        heapq.heapify(heap)
        i = len(heap)
        while len(heap) > 1:
            _, _, a = heapq.heappop(heap)
            _, _, b = heapq.heappop(heap)
            m = Updates(*_consolidate.merge_consolidated(
                (a.data, a.times, a.diffs), (b.data, b.times, b.diffs)))
            heapq.heappush(heap, (len(m), i, m))
            i += 1
        return heap[0][2]

    def consolidated(self) -> Updates:
        if self._consolidated is None:
            u, rest = self._head_and_rest()
            if not len(u):
                u = rest
            elif len(rest):
                u = Updates(*_consolidate.merge_consolidated(
                    (u.data, u.times, u.diffs), (rest.data, rest.times, rest.diffs)))
            self._set_whole(u)
        return self._consolidated

    def peek_new(self) -> Updates:
        """The updates added since the last :meth:`take_new` (all of them before the
        first), consolidated among themselves, with the times they were produced at;
        they stay pending until taken."""
        if self.pending is not None and len(self.pending) == 1 and \
                self.pending[0] is self._pending_whole:
            return self._pending_whole
        if self.pending is None:
            if self.auto_compact and self._moved:
                warnings.warn(
                    "capture(auto_compact=True): the first new_updates() comes after "
                    "the capture compacted itself, so updates before its last complete "
                    "time are reported at that time, not at their own. To stream every "
                    "update at its own time, call new_updates() once before the first "
                    "run() (and after every run)", RuntimeWarning, stacklevel=4)
            u = self.consolidated()
        else:
            u = Updates.concat(self.pending, self.arity, self.dims).consolidated()
        self.pending = [u] if len(u) else []
        self._pending_recent = 0
        self._pending_whole = u
        self._pending_rows = len(u)
        return u

    def take_new(self) -> Updates:
        """:meth:`peek_new`, and the updates stop being pending."""
        u = self.peek_new()
        self.pending = []
        self._pending_recent = 0
        self._pending_whole = None
        self._pending_rows = 0
        self._pending_runs = 0
        self._pending_warned = False
        return u


def _as_time(t, dims, label):
    """``t`` as an int64 vector of ``dims`` coordinates; ``TypeError`` unless it is
    integer (as input times must be: a float, a string or ``None`` is refused rather
    than truncated or parsed), ``OverflowError`` outside int64."""
    a = _int_times(t, label, one=True).reshape(-1)
    if a.shape[0] != dims:
        raise ValueError(f"{label}: time {t!r} has {a.shape[0]} coordinate(s), expected "
                         f"{dims}")
    return a


class Captured:
    """The captured output of a collection (see :meth:`Collection.capture`)."""

    def __init__(self, node: CaptureNode):
        self._node = node

    @property
    def names(self):
        """The captured collection's column names."""
        return list(self._node.names)

    @property
    def frontier(self):
        """Times in the future of this antichain may still change."""
        return self._node.frontier.copy()

    def done(self, time) -> bool:
        """True when no more output at times ``<= time`` can appear."""
        t = _as_time(time, self._node.dims, "Captured.done")
        return not bool(_lattice.in_future(t.reshape(1, -1), self._node.frontier)[0])

    @property
    def since(self):
        """Where the capture is compacted to (``None`` if never): the collection is
        known at the times in the future of this and no others. A time (``[d]``) when
        that is one time, as after :meth:`compact` to a time; a frontier (``[k, d]``)
        of several elements after compacting to frontiers of several times."""
        s = self._node.since
        if s is None:
            return None
        return s[0].copy() if len(s) == 1 else s.copy()

    @property
    def auto_compact(self) -> bool:
        """Whether the capture compacts itself after runs (see
        :meth:`Collection.capture`)."""
        return self._node.auto_compact

    def compact(self, time):
        """Forget how the output changed up to ``time``, keeping the collection at
        ``time`` and every change after it: each kept update's time becomes its join
        with ``time`` (for 1-D times, the later of the two) and updates that then
        cancel are dropped. A capture over an endless stream stays as large as its
        collection plus the changes since the last compaction
        (``capture(auto_compact=True)`` does this by itself).

        ``time`` must be complete (:meth:`done`) and not before an earlier compaction's
        time. Afterwards :meth:`at` answers for times ``>= time`` only, and
        :meth:`updates` returns the compacted updates (the collection at ``time``
        stamped ``time``, then the changes after it).

        ``time`` may instead be a *frontier*, a 2-D array ``[k, d]`` of times (an
        antichain; for several time coordinates, where no complete time is before
        every later one): each time advances to the meet, over the frontier's
        elements, of its join with each, and :meth:`at` then answers for the times
        in the frontier's future. The frontier must not be empty, must not be ahead
        of the output frontier (every output frontier element is at or after one of
        its elements) and must not be before an earlier compaction.
        """
        a = np.asarray(time)
        if a.ndim == 2:
            self._node.compact(self._compact_frontier(a))
            return
        t = self._complete_time(time, "Captured.compact",
                                "the capture is already compacted to {}; a compaction "
                                "cannot go back before it")
        self._node.compact(t.reshape(1, -1))

    def _compact_frontier(self, a):
        """``a`` checked as a compaction frontier; returned as an antichain."""
        d = self._node.dims
        if a.shape[1] != d:
            raise ValueError(f"Captured.compact: frontier of shape {a.shape} has "
                             f"{a.shape[1]} coordinate(s) per time, expected {d}")
        if a.shape[0] == 0:
            raise ValueError("Captured.compact: the frontier is empty (no time would "
                             "remain readable)")
        if not np.issubdtype(a.dtype, np.integer):
            raise TypeError(f"Captured.compact: frontier times must be integers, got "
                            f"{a.dtype}")
        f = _lattice.antichain(np.ascontiguousarray(a, dtype=_I64))
        out = self._node.frontier
        if not _lattice.frontier_less_equal(f, out):
            raise ValueError(f"Captured.compact({_fmt_frontier(f)}): the frontier is "
                             f"ahead of the output frontier {_fmt_frontier(out)}; a "
                             f"capture compacts only to where its output has reached")
        s = self._node.since
        if s is not None and not _lattice.frontier_less_equal(s, f):
            raise ValueError(f"Captured.compact({_fmt_frontier(f)}): the capture is "
                             f"already compacted to {_fmt_frontier(s)}; a compaction "
                             f"cannot go back before it")
        return f

    def _complete_time(self, time, label, before_since):
        """``time`` as an array, checked: complete, and in the future of the
        compactions (else ``ValueError`` with ``before_since`` naming where the
        capture is compacted to)."""
        t = _as_time(time, self._node.dims, label)
        if not self.done(t):
            raise ValueError(
                f"{label}({_fmt_time(t)}): time not complete; the output frontier is "
                f"{_fmt_frontier(self._node.frontier)} (advance the inputs past it and "
                f"run())")
        s = self._node.since
        if s is not None and not bool(_lattice.in_future(t.reshape(1, -1), s)[0]):
            where = _fmt_time(s[0]) if len(s) == 1 else _fmt_frontier(s)
            raise ValueError(f"{label}({_fmt_time(t)}): " + before_since.format(where))
        return t

    def updates(self):
        """All output updates, consolidated and sorted: columns, time(s), diff."""
        return updates_to_table(self._node.consolidated(), self._node.names)

    def raw(self) -> Updates:
        """The consolidated updates as arrays (``data``, ``times``, ``diffs``)."""
        return self._node.consolidated()

    def new_updates(self):
        """The output updates captured since the previous ``new_updates()`` (or
        :meth:`new_raw`) call, consolidated and sorted: columns, time(s), diff. The
        first call returns everything captured so far.

        The way to read a stream run by run: this costs the size of what is new, while
        :meth:`updates` consolidates the whole capture. Updates keep the times they
        were output at, whatever :meth:`compact` did to the capture since the previous
        call (the first call reads the capture as it is, compacted or not); they stay
        in the capture too (compact it to bound its memory). So to stream a
        self-compacting capture, call it once before the first ``run()``: otherwise a
        first run large enough to compact it hands out its updates at its last
        complete time (a ``RuntimeWarning`` says so).

        Once called, it keeps every later update until the next call, so call it
        after every run (or every few). A self-compacting capture warns
        (``RuntimeWarning``) when updates have waited 1,000 runs and outnumber
        ``4 * (kept + COMPACT_MIN)``, ``kept`` being what its last compaction kept.

        Examples
        --------
        >>> import ddnumba as dd
        >>> df = dd.Dataflow()
        >>> ai, a = df.new_input(["k"])
        >>> out = a.count().capture()
        >>> ai.insert([1, 1], time=0); ai.advance_to(1); df.run()
        >>> out.new_updates().to_pylist()
        [{'k': 1, 'count': 2, 'time': 0, 'diff': 1}]
        >>> ai.remove([1], time=1); ai.advance_to(2); df.run()
        >>> out.new_updates().to_pylist()
        [{'k': 1, 'count': 1, 'time': 1, 'diff': 1}, {'k': 1, 'count': 2, 'time': 1, 'diff': -1}]
        >>> out.new_updates().num_rows
        0
        """
        return updates_to_table(self._node.take_new(), self._node.names)

    def new_raw(self) -> Updates:
        """:meth:`new_updates` as arrays (``data``, ``times``, ``diffs``); the two
        share one position in the stream."""
        return self._node.take_new()

    def at(self, time):
        """The accumulated collection at ``time``: columns and ``count``.

        Raises ``ValueError`` if ``time`` is not complete yet (advance the inputs past it
        and ``run()``).
        """
        auto = " (it compacts itself: capture(auto_compact=True))" \
            if self._node.auto_compact else ""
        t = self._complete_time(time, "Captured.at",
                                "the capture was compacted to {}; only times at or "
                                "after it can be read" + auto)
        data, counts = self._accumulate(t)
        return collection_table(data, counts, self._node.names)

    def accumulate(self, time):
        """``(rows, counts)`` of the collection at ``time``, as arrays: one pass over
        the consolidated updates, which are sorted by row already.

        Unlike :meth:`at` it does not require ``time`` to be complete (a time not yet
        complete gives what has been captured so far). Raises ``TypeError`` for a
        time that is not integer, ``ValueError`` for one with the wrong number of
        coordinates or before the time the capture was compacted to.
        """
        t = _as_time(time, self._node.dims, "Captured.accumulate")
        s = self._node.since
        if s is not None and not bool(_lattice.in_future(t.reshape(1, -1), s)[0]):
            where = _fmt_time(s[0]) if len(s) == 1 else _fmt_frontier(s)
            raise ValueError(f"Captured.accumulate({_fmt_time(t)}): the capture was "
                             f"compacted to {where}; only times at or after it can be "
                             f"read")
        return self._accumulate(t)

    def _accumulate(self, t):
        u = self._node.consolidated()
        return _consolidate.accumulate_consolidated(u.data, u.times, u.diffs, t)

    def __len__(self):
        return len(self._node.consolidated())


class ProbeNode(SinkNode):
    kind = "probe"

    def __init__(self, scope, src):
        super().__init__(scope, [src], src.arity)

    def step(self):
        self.take()


class Probe:
    """Watches a collection's frontier: which times are complete."""

    def __init__(self, node: ProbeNode):
        self._node = node

    @property
    def frontier(self):
        """Times in the future of this antichain may still change."""
        return self._node.frontier.copy()

    def done(self, time) -> bool:
        """True when no more output at times ``<= time`` can appear (``TypeError``
        for a time that is not integer, ``ValueError`` for a wrong shape)."""
        t = _as_time(time, self._node.dims, "Probe.done")
        return not bool(_lattice.in_future(t.reshape(1, -1), self._node.frontier)[0])

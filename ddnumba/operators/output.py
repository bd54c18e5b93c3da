"""Sinks: ``capture`` (keep every output update) and ``probe`` (watch the frontier).

A captured stream is read back as Arrow: :meth:`Captured.updates` gives the consolidated
updates (columns, time, diff); :meth:`Captured.at` the accumulated collection at a time
that is complete. Asking about a time the frontier has not passed is an error rather
than a silently partial answer.
"""
from __future__ import annotations

import numpy as np

from ddnumba.dataflow import Node, _fmt_frontier, _fmt_time
from ddnumba.io.arrow import collection_table, updates_to_table
from ddnumba.kernels import consolidate as _consolidate
from ddnumba.kernels import lattice as _lattice
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

    def __init__(self, scope, src, names):
        self.names = names
        self.parts: list[Updates] = []
        self._recent = 0            # parts added since the last fold
        self._consolidated = None
        self._head = None           # parts[0] when it is consolidated
        self.pending = None         # parts since the last take_new() (None: not asked)
        self._pending_recent = 0
        self._pending_whole = None  # pending[0] when it is all of pending, consolidated
        self.since = None           # the time of the last compact(), if any
        super().__init__(scope, [src], src.arity)

    def add(self, u: Updates):
        """Record the updates ``u`` (not empty)."""
        self.parts.append(u)
        self._consolidated = None
        self._recent = self._fold(self.parts, self._recent + 1)
        if self.pending is not None:
            self.pending.append(u)
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

    def step(self):
        u = self.take()
        if len(u):
            self.add(u)

    def compact(self, t):
        """Advance every kept update's time to its join with ``t`` (a complete time,
        not before ``since``) and consolidate: the collection at any time ``>= t``
        stays the same, and updates that cancel there are dropped."""
        u = self.consolidated()
        if len(u):
            u = Updates(u.data, _lattice.join(u.times, t), u.diffs).consolidated()
        self._set_whole(u)
        self.since = t.copy()

    def _set_whole(self, u):
        self.parts = [u] if len(u) else []
        self._recent = 0
        self._consolidated = u
        self._head = u if len(u) else None

    def consolidated(self) -> Updates:
        if self._consolidated is None:
            parts = self.parts
            if self._head is not None and parts and parts[0] is self._head:
                rest = Updates.concat(parts[1:], self.arity, self.dims).consolidated()
                u = self._head
                if len(rest):
                    u = Updates(*_consolidate.merge_consolidated(
                        (u.data, u.times, u.diffs), (rest.data, rest.times, rest.diffs)))
            else:
                u = Updates.concat(parts, self.arity, self.dims).consolidated()
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
            u = self.consolidated()
        else:
            u = Updates.concat(self.pending, self.arity, self.dims).consolidated()
        self.pending = [u] if len(u) else []
        self._pending_recent = 0
        self._pending_whole = u
        return u

    def take_new(self) -> Updates:
        """:meth:`peek_new`, and the updates stop being pending."""
        u = self.peek_new()
        self.pending = []
        self._pending_recent = 0
        self._pending_whole = None
        return u


def _as_time(t, dims, label):
    a = np.asarray(t, dtype=_I64).reshape(-1)
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
        """The time of the last :meth:`compact` (``None`` if never compacted): the
        collection is known at this time and the times after it only."""
        s = self._node.since
        return None if s is None else s.copy()

    def compact(self, time):
        """Forget how the output changed up to ``time``, keeping the collection at
        ``time`` and every change after it: each kept update's time becomes its join
        with ``time`` (for 1-D times, the later of the two) and updates that then
        cancel are dropped. A capture over an endless stream stays as large as its
        collection plus the changes since the last compaction.

        ``time`` must be complete (:meth:`done`) and not before an earlier compaction's
        time. Afterwards :meth:`at` answers for times ``>= time`` only, and
        :meth:`updates` returns the compacted updates (the collection at ``time``
        stamped ``time``, then the changes after it).
        """
        t = self._complete_time(time, "Captured.compact",
                                "the capture is already compacted to {}; a compaction "
                                "cannot go back before it")
        self._node.compact(t)

    def _complete_time(self, time, label, before_since):
        """``time`` as an array, checked: complete, and not before the last compaction
        (else ``ValueError`` with ``before_since`` naming that compaction's time)."""
        t = _as_time(time, self._node.dims, label)
        if not self.done(t):
            raise ValueError(
                f"{label}({_fmt_time(t)}): time not complete; the output frontier is "
                f"{_fmt_frontier(self._node.frontier)} (advance the inputs past it and "
                f"run())")
        s = self._node.since
        if s is not None and not bool(_lattice.less_equal(s.reshape(1, -1), t)[0]):
            raise ValueError(f"{label}({_fmt_time(t)}): " + before_since.format(_fmt_time(s)))
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
        in the capture too (compact it to bound its memory).

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
        t = self._complete_time(time, "Captured.at",
                                "the capture was compacted to {}; only times at or "
                                "after it can be read")
        data, counts = self.accumulate(t)
        return collection_table(data, counts, self._node.names)

    def accumulate(self, time):
        """``(rows, counts)`` of the collection at ``time`` (no completeness check)."""
        u = self._node.consolidated()
        t = np.asarray(time, dtype=_I64).reshape(-1)
        keep = _lattice.less_equal(u.times, t) if len(u) else np.zeros(0, bool)
        data = np.ascontiguousarray(u.data[keep])
        diffs = np.ascontiguousarray(u.diffs[keep])
        if not len(diffs):
            return data, diffs
        return _consolidate.consolidate_data(data, diffs)

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
        return self._node.frontier.copy()

    def done(self, time) -> bool:
        t = _as_time(time, self._node.dims, "Probe.done")
        return not bool(_lattice.in_future(t.reshape(1, -1), self._node.frontier)[0])

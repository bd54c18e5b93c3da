"""Arrange: turn an update stream into an indexed, shareable trace.

An :class:`ArrangeNode` collects its input's updates at *complete* times (not in the
future of its frontier) into one sorted batch per step, inserts it into its
:class:`~ddnumba.trace.Spine`, and hands the batch to every reader (joins, reduces).
Updates at incomplete times wait in the node. Several readers may share one arrangement;
each holds its own :class:`~ddnumba.trace.TraceHandle`, and the spine compacts to the
lower envelope of their frontiers.

The helpers here convert between batches and per-key CSR views used by the join and
reduce operators.
"""
from __future__ import annotations

import numpy as np

from ddnumba.dataflow import Node
from ddnumba.kernels import consolidate as _consolidate
from ddnumba.kernels import cursor as _cursor
from ddnumba.trace import Batch, Spine
from ddnumba.updates import Updates

_I64 = np.int64


class ArrangeNode(Node):
    kind = "arrange"

    def __init__(self, scope, src, kw, names):
        if not 0 <= kw <= src.arity:
            raise ValueError(f"arrange: key width {kw} out of range for {src.arity} "
                             f"column(s)")
        super().__init__(scope, [src], src.arity)
        self.kw = kw
        self.vw = src.arity - kw
        self.names = names
        self.spine = Spine(kw, self.vw, scope.dims)
        # The node's own hold follows its frontier so an unread arrangement compacts too.
        self.handle = self.spine.handle()
        self.held: list[Updates] = []
        self.lower = np.zeros((1, scope.dims), _I64)

    def wants_step(self, frontier_changed, force):
        # With workers every arrangement exchanges in every pass (a collective), even
        # when this worker has nothing to send.
        if self.df.cluster is not None:
            return True
        return super().wants_step(frontier_changed, force)

    def step(self):
        new = self.take()
        cl = self.df.cluster
        if cl is not None:
            new = cl.exchange(new, self.kw)        # this worker's shard of the keys
        u = Updates.concat(self.held + [new], self.arity, self.dims)
        self.held = []
        if len(u):
            due, fut = u.split_future(self.frontier)
            if fut is not None:
                self.held = [fut]
            if due is not None and len(due):
                batch = Batch.from_updates(due.data, due.times, due.diffs, kw=self.kw,
                                           lower=self.lower, upper=self.frontier)
                if len(batch):
                    self.spine.insert(batch)
                    self.emit(batch)
        self.lower = self.frontier
        self.handle.set_frontier(self.frontier)

    def held_times(self):
        return [u.times for u in self.held]

    def holds_work(self):
        return bool(self.held)


def take_batches(node, port):
    """Pop the batches queued on ``port`` of ``node``."""
    q = node.queues[port]
    node.queues[port] = []
    return q


def batches_to_flat(batches, kw, vw, dims):
    """Concatenate batches into one flat sorted, consolidated update set."""
    if not batches:
        return (np.empty((0, kw + vw), _I64), np.empty((0, dims), _I64),
                np.empty(0, _I64))
    if len(batches) == 1:
        return batches[0].flatten()
    parts = [b.flatten() for b in batches]
    return _consolidate.consolidate(np.concatenate([p[0] for p in parts]),
                                    np.concatenate([p[1] for p in parts]),
                                    np.concatenate([p[2] for p in parts]))


def group_by_key(data, kw):
    """For flat data sorted by key: ``(keys[q, kw], offs[q+1])`` of its distinct keys."""
    n = len(data)
    keycols = np.ascontiguousarray(data[:, :kw])
    if n == 0:
        return keycols, np.zeros(1, _I64)
    if kw == 0:
        return keycols[:1], np.array([0, n], _I64)
    change = np.empty(n, bool)
    change[0] = True
    np.any(keycols[1:] != keycols[:-1], axis=1, out=change[1:])
    starts = np.flatnonzero(change)
    offs = np.empty(len(starts) + 1, _I64)
    offs[:-1] = starts
    offs[-1] = n
    return np.ascontiguousarray(keycols[starts]), offs


def unique_rows(rows):
    """Sorted distinct rows of an int64 matrix."""
    if len(rows) <= 1:
        return np.ascontiguousarray(rows)
    data, _ = _consolidate.consolidate_data(np.ascontiguousarray(rows),
                                            np.ones(len(rows), _I64))
    return data


def offsets_for(sorted_rows, keys):
    """CSR offsets of ``sorted_rows`` grouped by the sorted unique ``keys`` (each row's
    key must be one of ``keys``)."""
    lo, hi = _cursor.key_ranges(np.ascontiguousarray(sorted_rows),
                                np.ascontiguousarray(keys))
    # Every row belongs to one of the keys, so key i ends where key i+1 starts (absent
    # keys get an empty range at their insertion point).
    offs = np.empty(len(keys) + 1, _I64)
    offs[:-1] = lo
    offs[-1] = len(sorted_rows)
    return offs

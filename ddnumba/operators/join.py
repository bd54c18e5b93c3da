"""Join: the bilinear operator on two arranged collections.

For arranged inputs ``A`` and ``B`` keyed alike, the output holds, for every key, every
pair of rows ``(a, b)`` at time ``ta ∨ tb`` with diff ``da * db``. A step receives the new
batches ``dA`` and ``dB`` (already inserted into their traces, so the traces read
``A + dA`` and ``B + dB``) and emits

    Δ(A·B) = dA·(B + dB) + A·dB

so every pair is produced exactly once, including pairs of two updates that arrive in
the same step (two inputs changing at the same time) and the self-join ``c.join(c)``,
where ``dA`` and ``dB`` are the same batch. ``A`` for ``dB``'s keys is read from the left
trace with ``dA`` taken back out in the same gather (rather than emitting ``dA·dB`` twice
and a cancelling ``−dA·dB``, which would triple the output of a first load). Each side
reads the other's trace through its own handle, whose compaction frontier follows the
join's frontier: every future update is at a time ``t >= f`` for some ``f`` in it, and
``t ∨ advance(s, F) == t ∨ s`` for such ``t``, so compaction never changes an output time.
New batches are at times in the future of that frontier, which compaction leaves as they
are, so taking ``dA`` out of the trace cancels exactly.
"""
from __future__ import annotations

import numpy as np

from ddnumba.dataflow import Node
from ddnumba.kernels import join as _join
from ddnumba.operators.arrange import batches_to_flat, group_by_key, take_batches
from ddnumba.updates import Updates

_I64 = np.int64


class JoinNode(Node):
    kind = "join"

    def __init__(self, scope, left, right, names):
        if left.kw != right.kw:
            raise ValueError(f"join: key widths differ ({left.kw} vs {right.kw})")
        self.left, self.right = left, right
        self.kw = left.kw
        self.names = names
        super().__init__(scope, [left, right], left.kw + left.vw + right.vw)
        self.left_handle = left.spine.handle()
        self.right_handle = right.spine.handle()

    def step(self):
        kw = self.kw
        da = batches_to_flat(take_batches(self, 0), kw, self.left.vw, self.dims)
        db = batches_to_flat(take_batches(self, 1), kw, self.right.vw, self.dims)
        parts = []
        if len(da[2]):
            keys, offs = group_by_key(da[0], kw)
            h = self.right.spine.gather(keys)         # B + dB for dA's keys
            parts.append(self._cross(keys, offs, da[0][:, kw:], da[1], da[2],
                                     h.offs, h.vals, h.times, h.diffs))
        if len(db[2]):
            keys, offs = group_by_key(db[0], kw)
            minus = self._taken_out(da, keys) if len(da[2]) else None
            h = self.left.spine.gather(keys, extra=minus)    # A for dB's keys
            parts.append(self._cross(keys, h.offs, h.vals, h.times, h.diffs,
                                     offs, db[0][:, kw:], db[1], db[2]))
        out = Updates.concat(parts, self.arity, self.dims)
        if len(out):
            self.emit(out.consolidated())
        self.left_handle.set_frontier(self.frontier)
        self.right_handle.set_frontier(self.frontier)

    def _cross(self, keys, loffs, lvals, ltimes, ldiffs, roffs, rvals, rtimes, rdiffs):
        """Per-key cross product, assembled into output rows (key, left vals, right vals)."""
        kw, lw = self.kw, self.left.vw
        li, ri, times, diffs = _join.cross(loffs, ltimes, ldiffs, roffs, rtimes, rdiffs)
        m = len(diffs)
        data = np.empty((m, self.arity), _I64)
        if m:
            # The key of an output row is the key of the left update it came from.
            key_of = np.searchsorted(loffs, li, side="right") - 1
            data[:, :kw] = keys[key_of]
            data[:, kw:kw + lw] = lvals[li]
            data[:, kw + lw:] = rvals[ri]
        return Updates(data, times, diffs)

    def _taken_out(self, da, keys):
        """``-dA`` restricted to the sorted unique ``keys``, as ``(qidx, vals, times,
        diffs)`` for :meth:`Spine.gather`; ``None`` when no key is shared."""
        from ddnumba.kernels import cursor as _cursor
        kw = self.kw
        ka, oa = group_by_key(da[0], kw)
        lo, hi = _cursor.key_ranges(keys, ka)
        lens = np.diff(oa)
        keep = np.repeat(hi > lo, lens)
        if not keep.any():
            return None
        diffs = da[2][keep]
        if diffs.min() == np.iinfo(_I64).min:
            raise OverflowError("join: a diff of -2**63 has no int64 negation")
        return (np.repeat(lo, lens)[keep], da[0][keep, kw:], da[1][keep], -diffs)

"""Join: the bilinear operator on two arranged collections.

For arranged inputs ``A`` and ``B`` keyed alike, the output holds, for every key, every
pair of rows ``(a, b)`` at time ``ta ∨ tb`` with diff ``da * db``. A step receives the new
batches ``dA`` and ``dB`` (already inserted into their traces, so the traces read
``A + dA`` and ``B + dB``) and emits

    Δ(A·B) = dA·(B + dB) + (A + dA)·dB − dA·dB

so every pair is produced exactly once, including pairs of two updates that arrive in
the same step (two inputs changing at the same time) and the self-join ``c.join(c)``,
where ``dA`` and ``dB`` are the same batch. Each side reads the other's trace through its
own handle, whose compaction frontier follows the join's frontier: every future update
is at a time ``t >= f`` for some ``f`` in it, and ``t ∨ advance(s, F) == t ∨ s`` for such
``t``, so compaction never changes an output time.
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
            h = self.left.spine.gather(keys)          # A + dA for dB's keys
            parts.append(self._cross(keys, h.offs, h.vals, h.times, h.diffs,
                                     offs, db[0][:, kw:], db[1], db[2]))
        if len(da[2]) and len(db[2]):
            parts.append(self._delta_delta(da, db).negate())
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

    def _delta_delta(self, da, db):
        """``dA·dB`` restricted to keys present on both sides."""
        kw = self.kw
        ka, oa = group_by_key(da[0], kw)
        kb, ob = group_by_key(db[0], kw)
        # Keep keys in both: align the two key lists.
        from ddnumba.kernels import cursor as _cursor
        lo, hi = _cursor.key_ranges(kb, ka)
        both = hi > lo
        if not both.any():
            return Updates.empty(self.arity, self.dims)
        ka_idx = np.flatnonzero(both)
        kb_idx = lo[both]
        loffs = np.zeros(len(ka_idx) + 1, _I64)
        roffs = np.zeros(len(ka_idx) + 1, _I64)
        lsel = _ranges_index(oa, ka_idx)
        rsel = _ranges_index(ob, kb_idx)
        np.cumsum(oa[ka_idx + 1] - oa[ka_idx], out=loffs[1:])
        np.cumsum(ob[kb_idx + 1] - ob[kb_idx], out=roffs[1:])
        return self._cross(ka[ka_idx], loffs, da[0][lsel][:, kw:], da[1][lsel],
                           da[2][lsel], roffs, db[0][rsel][:, kw:], db[1][rsel],
                           db[2][rsel])


def _ranges_index(offs, groups):
    """Indices of the rows of the selected CSR groups, concatenated in group order."""
    starts = offs[groups]
    lens = offs[groups + 1] - starts
    total = int(lens.sum())
    if total == 0:
        return np.zeros(0, _I64)
    # index = start of the row's group + position within the group
    group_of = np.repeat(np.arange(len(groups)), lens)
    first = np.cumsum(lens) - lens
    return (starts[group_of] + np.arange(total) - first[group_of]).astype(_I64)

"""Update batches in flight: structure-of-arrays ``(data, times, diffs)``.

An :class:`Updates` is what flows along the edges of a dataflow: ``data[n, arity]`` int64
rows, ``times[n, dims]`` int64 time vectors (each row carries its own time) and
``diffs[n]`` int64 multiplicities. It need not be sorted or consolidated; operators that
need that call :meth:`consolidated`. Validation of user input happens at the boundary
(:mod:`ddnumba.dataflow`); inside the engine arrays are trusted to be C-contiguous int64.
"""
from __future__ import annotations

import numpy as np

from ddnumba.kernels import consolidate as _consolidate
from ddnumba.kernels import lattice as _lattice

_I64 = np.int64


class Updates:
    __slots__ = ("data", "times", "diffs")

    def __init__(self, data, times, diffs):
        self.data = data
        self.times = times
        self.diffs = diffs

    @classmethod
    def empty(cls, arity, dims):
        return cls(np.empty((0, arity), _I64), np.empty((0, dims), _I64),
                   np.empty(0, _I64))

    @classmethod
    def concat(cls, parts, arity, dims):
        parts = [p for p in parts if len(p)]
        if not parts:
            return cls.empty(arity, dims)
        if len(parts) == 1:
            return parts[0]
        return cls(np.concatenate([p.data for p in parts]),
                   np.concatenate([p.times for p in parts]),
                   np.concatenate([p.diffs for p in parts]))

    def __len__(self):
        return len(self.diffs)

    @property
    def arity(self):
        return self.data.shape[1]

    @property
    def dims(self):
        return self.times.shape[1]

    def consolidated(self) -> "Updates":
        """Sorted by (data, time), equal (data, time) summed, zeros dropped."""
        if len(self) == 0:
            return self
        return Updates(*_consolidate.consolidate(self.data, self.times, self.diffs))

    def take(self, mask_or_index) -> "Updates":
        return Updates(np.ascontiguousarray(self.data[mask_or_index]),
                       np.ascontiguousarray(self.times[mask_or_index]),
                       np.ascontiguousarray(self.diffs[mask_or_index]))

    def split_future(self, frontier):
        """Split into (due, future): ``future`` holds rows whose time is in the future of
        the frontier (antichain ``[k, dims]``); an empty frontier makes everything due."""
        if len(self) == 0 or len(frontier) == 0:
            return self, None
        fut = _lattice.in_future(self.times, frontier)
        if not fut.any():
            return self, None
        if fut.all():
            return None, self
        return self.take(~fut), self.take(fut)

    def negate(self) -> "Updates":
        if len(self) and self.diffs.min() == np.iinfo(_I64).min:
            raise OverflowError("negate: a diff of -2**63 has no int64 negation")
        return Updates(self.data, self.times, -self.diffs)

    def __repr__(self):
        return f"Updates(n={len(self)}, arity={self.arity}, dims={self.dims})"

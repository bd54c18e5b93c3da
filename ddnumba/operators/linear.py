"""Linear operators: stateless transformations of update streams.

A linear operator ``L`` satisfies ``L(a + b) = L(a) + L(b)``, so it can transform each
update on its own: output times equal input times and diffs pass through (``negate`` flips
them). These operators keep no state and never wait for frontiers; they pass each batch
on as soon as it arrives, whatever mixture of times it holds. User functions are
NumPy-vectorised: they receive whole columns (read-only int64 views) and return columns.
"""
from __future__ import annotations

import warnings

import numpy as np

from ddnumba.dataflow import Node, _as_int_column
from ddnumba.updates import Updates

_I64 = np.int64


def column_views(data):
    """Read-only column views of a data matrix (no copies)."""
    cols = []
    for i in range(data.shape[1]):
        c = data[:, i]
        c.flags.writeable = False
        cols.append(c)
    return cols


def columns_to_matrix(out, n, what, expect=None):
    """Turn a user function's result (array, scalar, or tuple of them) into ``[n, k]``."""
    if isinstance(out, np.ndarray) and out.ndim == 2:
        out = [out[:, i] for i in range(out.shape[1])]
    elif not isinstance(out, (tuple, list)):
        out = [out]
    if expect is not None and len(out) != expect:
        raise ValueError(f"{what}: returned {len(out)} column(s), expected {expect}")
    mat = np.empty((n, len(out)), _I64)
    for i, col in enumerate(out):
        a = _as_int_column(col if not np.isscalar(col) else np.asarray(col),
                           f"{what} output column {i}")
        if a.ndim == 0:
            mat[:, i] = a
        elif a.shape != (n,):
            raise ValueError(f"{what}: output column {i} has shape {a.shape}, expected "
                             f"({n},) (one value per input row)")
        else:
            mat[:, i] = a
    return mat


class MapNode(Node):
    kind = "map"

    def __init__(self, scope, src, f, arity):
        self.f = f
        super().__init__(scope, [src], arity)

    def step(self):
        u = self.take()
        if len(u):
            self.emit(self.apply(u))

    def apply(self, u):
        """The map of one non-empty batch (shared with the native runtime)."""
        out = self.f(*column_views(u.data))
        return Updates(columns_to_matrix(out, len(u), "map", self.arity), u.times, u.diffs)

    def projection(self):
        """The input columns this map returns, when ``f`` returns its argument arrays
        themselves (a reordering or selection such as ``lambda a, b: (b, a)``); else
        None. Probed on random columns twice; such maps run without calling ``f``."""
        arity_in = self.inputs[0].arity
        rng = np.random.default_rng(12345)
        cols = None
        for _ in range(2):
            data = rng.integers(-2**62, 2**62, (3, arity_in))
            views = column_views(data)
            try:
                # (made-up rows: whatever they make NumPy warn about is not the user's)
                with np.errstate(all="ignore"), warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    out = self.f(*views)
            except Exception:
                return None
            if isinstance(out, np.ndarray) and out.ndim == 1:
                out = (out,)
            if not isinstance(out, (tuple, list)) or len(out) != self.arity:
                return None
            got = []
            for o in out:
                idx = [i for i, v in enumerate(views) if o is v]
                if not idx:
                    return None
                got.append(idx[0])
            if cols is not None and got != cols:
                return None
            cols = got
        return cols


class FilterNode(Node):
    kind = "filter"

    def __init__(self, scope, src, pred):
        self.pred = pred
        super().__init__(scope, [src], src.arity)

    def step(self):
        u = self.take()
        if len(u):
            self.emit(self.apply(u))

    def apply(self, u):
        mask = np.asarray(self.pred(*column_views(u.data)))
        if mask.dtype != np.bool_ or mask.shape != (len(u),):
            raise ValueError(f"filter: predicate must return a boolean mask of shape "
                             f"({len(u)},), got dtype {mask.dtype} shape {mask.shape}")
        if mask.all():
            return u
        return u.take(mask)


class FlatMapNode(Node):
    kind = "flat_map"

    def __init__(self, scope, src, f, arity):
        self.f = f
        super().__init__(scope, [src], arity)

    def step(self):
        u = self.take()
        if len(u):
            self.emit(self.apply(u))

    def apply(self, u):
        out = self.f(*column_views(u.data))
        if not isinstance(out, (tuple, list)) or len(out) != self.arity + 1:
            raise ValueError(f"flat_map: function must return (row_index, "
                             f"{self.arity} column(s))")
        idx = _as_int_column(out[0], "flat_map row_index")
        if idx.size and (idx.min() < 0 or idx.max() >= len(u)):
            raise ValueError(f"flat_map: row_index values must be in [0, {len(u)})")
        mat = columns_to_matrix(list(out[1:]), len(idx), "flat_map", self.arity)
        return Updates(mat, np.ascontiguousarray(u.times[idx]),
                       np.ascontiguousarray(u.diffs[idx]))


class ConcatNode(Node):
    kind = "concat"

    def step(self):
        for port in range(len(self.inputs)):
            self.emit(self.take(port))


class NegateNode(Node):
    kind = "negate"

    def step(self):
        u = self.take()
        if len(u):
            self.emit(u.negate())


class ConsolidateNode(Node):
    """Sums updates at equal (row, time) and drops zeros (within each step's input)."""

    kind = "consolidate"

    def step(self):
        u = self.take()
        if len(u):
            self.emit(u.consolidated())


class InspectNode(Node):
    kind = "inspect"

    def __init__(self, scope, src, f, names):
        self.f = f
        self.names = names
        super().__init__(scope, [src], src.arity)

    def step(self):
        u = self.take()
        if len(u):
            self.emit(self.apply(u))

    def apply(self, u):
        from ddnumba.io.arrow import updates_to_table
        self.f(updates_to_table(u, self.names))
        return u


class DelayNode(Node):
    """Advances every time to ``join(t, g(t))`` for a user map of times (DD's ``delay``)."""

    kind = "delay"

    def __init__(self, scope, src, f):
        self.f = f
        super().__init__(scope, [src], src.arity)

    def step(self):
        u = self.take()
        if len(u):
            self.emit(self.apply(u))

    def apply(self, u):
        new = np.asarray(self.f(u.times.copy()))
        if new.dtype.kind not in "iu" or new.shape != u.times.shape:
            raise TypeError(f"delay: f must return integer times of the shape it is "
                            f"given, {u.times.shape}; got dtype {new.dtype}, shape "
                            f"{new.shape}")
        if new.dtype.kind == "u" and new.size and new.max() > np.iinfo(_I64).max:
            raise OverflowError(f"delay: time {new.max()} does not fit in int64")
        new = new.astype(_I64)
        if new.size and new.max() == np.iinfo(_I64).max:
            raise ValueError("delay: a time of 2**63 - 1 stands for 'never' (the end of "
                             "time); times must be below it")
        return Updates(u.data, np.ascontiguousarray(np.maximum(u.times, new)), u.diffs)

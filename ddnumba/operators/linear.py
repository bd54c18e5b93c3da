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


_I64_MIN = -2**63
_I64_MAX = 2**63 - 1


class _NotAffine(Exception):
    pass


def _wrap64(v):
    """``v`` wrapped to int64, as NumPy's int64 arithmetic wraps."""
    return (v - _I64_MIN) % 2**64 + _I64_MIN


def _constant(v):
    """``v`` as an int64 constant of an affine map, or raise _NotAffine: Python ints
    in int64's range and NumPy signed integers (not bools, floats or unsigned
    integers, which NumPy would not keep int64)."""
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.signedinteger)):
        raise _NotAffine
    v = int(v)
    if not _I64_MIN <= v <= _I64_MAX:
        raise _NotAffine
    return v


class _Column:
    """A column of a map traced symbolically (:meth:`MapNode.affine`): the sum of
    input columns ``cols`` (at most two) and ``const``, wrapping as NumPy's int64
    arithmetic does; or, when ``checked``, a sum that refuses to leave int64
    (:func:`checked_sum`), which nothing may be added to. Every other use raises
    _NotAffine, so a function that does anything else is not affine."""
    __slots__ = ("cols", "const", "checked")
    __array_ufunc__ = None          # (``array + column`` calls __radd__)

    def __init__(self, cols, const=0, checked=None):
        self.cols = tuple(cols)
        self.const = const
        self.checked = checked

    def __add__(self, other):
        if self.checked is not None:
            raise _NotAffine
        if isinstance(other, _Column):
            if other.checked is not None or len(self.cols) + len(other.cols) > 2:
                raise _NotAffine
            return _Column(self.cols + other.cols, _wrap64(self.const + other.const))
        return _Column(self.cols, _wrap64(self.const + _constant(other)))

    __radd__ = __add__

    def __sub__(self, other):
        if isinstance(other, _Column):
            raise _NotAffine
        return self + _wrap64(-_constant(other))

    def __pos__(self):
        return self

    def _cmp(self, other, op):
        return _Cond([[(_term(self), op, _term(other))]])

    def __lt__(self, other):
        return self._cmp(other, CMP_LT)

    def __le__(self, other):
        return self._cmp(other, CMP_LE)

    def __gt__(self, other):
        return self._cmp(other, CMP_GT)

    def __ge__(self, other):
        return self._cmp(other, CMP_GE)

    def __eq__(self, other):
        return self._cmp(other, CMP_EQ)

    def __ne__(self, other):
        return self._cmp(other, CMP_NE)

    def _refuse(self, *args, **kwargs):
        raise _NotAffine

    (__rsub__, __mul__, __rmul__, __neg__, __abs__, __invert__, __bool__, __index__,
     __int__, __float__, __len__, __iter__, __getitem__, __array__, __and__, __or__,
     __xor__, __lshift__, __rshift__, __floordiv__, __truediv__, __mod__,
     __pow__) = (_refuse,) * 23
    __hash__ = None

    def __getattr__(self, name):
        raise _NotAffine


#: comparisons of a traced filter (:meth:`FilterNode.affine`), as kernels.seqloop
#: evaluates them
CMP_LT, CMP_LE, CMP_GT, CMP_GE, CMP_EQ, CMP_NE = range(6)
_CMP_NP = [np.less, np.less_equal, np.greater, np.greater_equal, np.equal, np.not_equal]


def _term(x):
    """A traced column, or an int constant, as a term of :meth:`MapNode.affine`."""
    if isinstance(x, _Column):
        return (x.cols, x.const, x.checked)
    return ((), _constant(x), None)


#: the comparison that holds exactly where ``op`` does not (``~``)
_NEGATED = {CMP_LT: CMP_GE, CMP_LE: CMP_GT, CMP_GT: CMP_LE, CMP_GE: CMP_LT,
            CMP_EQ: CMP_NE, CMP_NE: CMP_EQ}
#: the most conjunctions a traced predicate may expand to (``&`` of ``|``s multiplies)
MAX_GROUPS = 16


class _Cond:
    """A filter predicate traced symbolically (:meth:`FilterNode.affine`), in
    disjunctive normal form: a row is kept when, for some group of ``groups``, every
    comparison ``(left, op, right)`` of terms in it holds. ``&``, ``|`` and ``~`` of
    such predicates are predicates; every other use raises _NotAffine (``and``,
    ``or``, ``not``, truth), as does a predicate of more than MAX_GROUPS groups."""
    __slots__ = ("groups",)
    __array_ufunc__ = None

    def __init__(self, groups):
        if len(groups) > MAX_GROUPS:
            raise _NotAffine
        self.groups = [list(g) for g in groups]

    def __and__(self, other):
        if not isinstance(other, _Cond):
            raise _NotAffine
        if len(self.groups) * len(other.groups) > MAX_GROUPS:
            raise _NotAffine
        return _Cond([a + b for a in self.groups for b in other.groups])

    def __or__(self, other):
        if not isinstance(other, _Cond):
            raise _NotAffine
        return _Cond(self.groups + other.groups)

    def __invert__(self):
        # not (g1 or g2 ...) = (not g1) and (not g2) ..., and not (c1 and c2 ...) =
        # (not c1) or (not c2) ...
        out = _Cond([[]])
        for g in self.groups:
            out = out & _Cond([[(x, _NEGATED[op], y)] for x, op, y in g])
        return out

    def _refuse(self, *args, **kwargs):
        raise _NotAffine

    (__rand__, __ror__, __xor__, __rxor__, __bool__, __len__, __iter__, __array__,
     __eq__, __ne__) = (_refuse,) * 10
    __hash__ = None

    def __getattr__(self, name):
        raise _NotAffine


def checked_sum(a, b, message):
    """``a + b`` of int64 columns (or a column and an integer), raising
    ``OverflowError(message)`` for a sum that leaves int64 (where NumPy would wrap).
    Traced maps (:meth:`MapNode.affine`) keep it as a checked sum, so that a loop
    adding along paths (``sssp``) runs in compiled code."""
    if isinstance(a, _Column) or isinstance(b, _Column):
        cols, const = [], 0
        for x in (a, b):
            if isinstance(x, _Column):
                if x.checked is not None or len(x.cols) != 1 or x.const != 0:
                    raise _NotAffine
                cols.append(x.cols[0])
            else:
                const = _constant(x)
        if len(cols) == 2 and const != 0:
            raise _NotAffine
        return _Column(cols, const, checked=message)
    s = a + b
    if ((a ^ s) & (b ^ s) < 0).any():
        raise OverflowError(message)
    return s


def affine_values(terms, data):
    """The columns ``terms`` (see :meth:`MapNode.affine`) give for the rows of
    ``data``: NumPy's wrapping sums, and checked sums that raise on overflow."""
    n = data.shape[0]
    out = np.empty((n, len(terms)), _I64)
    with np.errstate(all="ignore"):
        for i, (cols, const, message) in enumerate(terms):
            v = np.full(n, const, _I64)
            if message is None:
                for c in cols:
                    v = v + data[:, c]
            else:
                v = checked_sum(data[:, cols[0]], data[:, cols[1]] if len(cols) == 2
                                else v, message)
            out[:, i] = v
    return out


def affine_mask(groups, data):
    """The rows of ``data`` that a predicate of :meth:`FilterNode.affine` keeps."""
    keep = np.zeros(data.shape[0], bool)
    for group in groups:
        hold = np.ones(data.shape[0], bool)
        for left, op, right in group:
            v = affine_values([left, right], data)
            hold &= _CMP_NP[op](v[:, 0], v[:, 1])
        keep |= hold
    return keep


def _traced(f, arity_in):
    """``f`` called on symbolic columns (:class:`_Column`), or None if it raised."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return f(*[_Column((i,)) for i in range(arity_in)])
    except Exception:
        return None


def _agrees(f, arity_in, expected, low, high):
    """Whether ``f`` on random columns (twice, values in ``[low, high)``) gives what
    ``expected(data, got)`` accepts (a traced map's or filter's check); False if it
    raised."""
    rng = np.random.default_rng(54321)
    for _ in range(2):
        data = rng.integers(low, high, (16, arity_in))
        try:
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                got = f(*column_views(data.copy()))
                if not expected(data, got):
                    return False
        except Exception:
            return False
    return True


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


    def affine(self):
        """The map as sums of input columns, when ``f`` computes each output column as
        one: a list of ``(cols, const, message)`` per output column, ``cols`` the input
        columns added (at most two) to the integer ``const``, wrapping as NumPy's int64
        arithmetic does, or (``message`` not None) a sum of two columns, or of a column
        and ``const``, that raises ``OverflowError(message)`` when it leaves int64
        (:func:`checked_sum`). A projection is ``((c,), 0, None)`` per column. Else None.

        ``f`` is called on symbolic columns that record additions and refuse
        everything else, then on random columns, whose result must agree. Sequential
        loops run such maps in compiled code (``lambda n, k, d: (d, k + 1)`` in ``bfs``)."""
        cached = getattr(self, "_affine", False)
        if cached is not False:
            return cached
        self._affine = None
        arity_in = self.inputs[0].arity
        p = self.projection()
        if p is not None:
            self._affine = [((c,), 0, None) for c in p]
            return self._affine
        out = _traced(self.f, arity_in)
        if out is None:
            return None
        if not isinstance(out, (tuple, list)):
            out = (out,)
        if len(out) != self.arity:
            return None
        try:
            terms = [_term(o) for o in out]
        except _NotAffine:
            return None
        if not _agrees(self.f, arity_in, lambda data, got: np.array_equal(
                columns_to_matrix(got, len(data), "map", self.arity),
                affine_values(terms, data)), -2**40, 2**40):
            return None
        self._affine = terms
        return terms


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


    def affine(self):
        """The predicate as comparisons of sums, when ``pred`` is a comparison or
        ``&``, ``|`` and ``~`` of comparisons: a list of groups, a row kept when every
        comparison of some group holds for it (at most MAX_GROUPS groups), each
        comparison ``(left, op, right)``, ``left`` and ``right`` terms of
        :meth:`MapNode.affine` (a column, a sum, a checked sum or a constant) and ``op``
        one of CMP_LT ... CMP_NE; else None. Traced on symbolic columns, then checked
        on random columns. The native engine runs such filters in compiled code
        (``lambda n, d: (d < 10) | (n == 0)``)."""
        cached = getattr(self, "_affine", False)
        if cached is not False:
            return cached
        self._affine = None
        arity_in = self.inputs[0].arity
        out = _traced(self.pred, arity_in)
        if not isinstance(out, _Cond):
            return None
        groups = out.groups

        def same(data, got):
            got = np.asarray(got)
            return got.dtype == np.bool_ and got.shape == (len(data),) and \
                np.array_equal(got, affine_mask(groups, data))
        if not _agrees(self.pred, arity_in, same, -4, 4):
            return None
        self._affine = groups
        return groups


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

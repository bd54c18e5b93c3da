"""Collections: the user's handle on a stream of updates, with operator methods.

A :class:`Collection` is an immutable handle on one node's output in a dataflow: a
multiset of int64 rows (named columns) that changes over (partially ordered) time. Its
methods build new operators and return new collections, so programs read as method
chains::

    counts = edges.map(lambda s, d: s, names=["src"]).count()

Keyed operators (``join``, the reduce family, ``arrange_by_key``) use the first ``key``
columns as the key (default 1; pass an int or a list of leading column names).
"""
from __future__ import annotations

import inspect
import numbers

import numpy as np

from ddnumba.operators import linear as _linear
from ddnumba.operators import reduce as _reduce_ops
from ddnumba.operators.arrange import ArrangeNode
from ddnumba.operators.join import JoinNode
from ddnumba.operators.output import Captured, CaptureNode, Probe, ProbeNode
from ddnumba.operators.reduce import ReduceNode

_I64 = np.int64

__all__ = ["Collection", "Arranged"]


def _key_width(key, names, op):
    if isinstance(key, (list, tuple)):
        key = list(key)
        if key != list(names[:len(key)]):
            raise ValueError(f"{op}: key columns {key} must be the leading columns of "
                             f"{names} (reorder with map first)")
        return len(key)
    k = int(key)
    if not 0 <= k <= len(names):
        raise ValueError(f"{op}: key width {k} out of range for columns {names}")
    return k


def _check_takes(f, n, op, what):
    """Refuse, when it is built, a user function that cannot take ``n`` positional
    arguments (``what`` says what they are). Callables without an inspectable
    signature (NumPy ufuncs, builtins) are left to fail at ``run()``."""
    if not callable(f):
        raise TypeError(f"{op}: expected a function, got {type(f).__name__}")
    try:
        sig = inspect.signature(f)
    except (TypeError, ValueError):
        return
    try:
        sig.bind(*range(n))
    except TypeError:
        name = getattr(f, "__name__", repr(f))
        raise TypeError(f"{op}: function {name!r}{sig} cannot take {what}") from None


class _KeyColumns:
    """``f(*columns) -> columns[:kw]``: the key columns themselves (a selection, which
    the native engine runs without calling it)."""

    def __init__(self, kw):
        self.kw = kw

    def __call__(self, *cols):
        return cols[:self.kw]


class _Columns:
    """``f(*columns) -> columns in the given order`` (a selection, which the native
    engine runs without calling it)."""

    def __init__(self, order):
        self.order = tuple(order)

    def __call__(self, *cols):
        return tuple(cols[i] for i in self.order)


# Reduces whose output holds each row once, whatever their input's counts.
_SET_REDUCES = frozenset({"distinct", "count", "sum", "min", "max"})


def _never_negative(node, _depth=0):
    """True when the collection ``node`` outputs can hold no row with a negative
    count at any time: built from set-valued reduces by operators that add counts
    or multiply them. Inputs, ``negate``, loop variables and user logic are not
    known to be."""
    if _depth > 200:
        return False
    k = node.kind
    if k == "reduce":
        return node.spec is not None and node.spec[0] in _SET_REDUCES
    if k == "leave":
        return _never_negative(node.inner, _depth + 1)
    if k in ("map", "filter", "flat_map", "concat", "consolidate", "inspect", "delay",
             "enter", "arrange", "join"):
        return all(_never_negative(i, _depth + 1) for i in node.inputs)
    return False


def _encloses(outer, inner):
    """True when scope ``outer`` is ``inner`` or one of its ancestors."""
    s = inner
    while s is not None:
        if s is outer:
            return True
        s = s.parent
    return False


def _dedupe(names):
    out, seen = [], set()
    for n in names:
        m = n
        while m in seen:
            m = m + "_right"
        seen.add(m)
        out.append(m)
    return out


class Collection:
    """A changing multiset of int64 rows with named columns."""

    def __init__(self, node, names):
        self._node = node
        self.names = list(names)

    # -- basics --------------------------------------------------------------------
    @property
    def arity(self) -> int:
        """The number of columns."""
        return len(self.names)

    @property
    def scope(self):
        """The scope the collection lives in (the root, or a loop's)."""
        return self._node.scope

    @property
    def dataflow(self):
        """The :class:`~ddnumba.Dataflow` the collection belongs to."""
        return self._node.df

    def _new(self, node, names):
        return Collection(node, names)

    def _names_for(self, arity, names, op):
        if names is None:
            if arity == self.arity:
                return list(self.names)
            return [f"c{i}" for i in range(arity)]
        names = [str(n) for n in ([names] if isinstance(names, str) else names)]
        if len(names) != arity:
            raise ValueError(f"{op}: {len(names)} names given for {arity} column(s)")
        return names

    def _same_scope(self, other, op):
        """``other`` brought into this collection's scope (entered if it is outer)."""
        other = other._collection if isinstance(other, Arranged) else other
        if not isinstance(other, Collection):
            raise TypeError(f"{op}: expected a Collection, got {type(other).__name__}")
        if other._node.df is not self._node.df:
            raise ValueError(f"{op}: collections belong to different dataflows")
        if other.scope is not self.scope:
            if not _encloses(other.scope, self.scope):
                raise ValueError(f"{op}: {other.names} is from an inner loop scope; "
                                 f"leave() it first")
            # Collections from an enclosing scope are entered automatically.
            return self.scope.import_collection(other)
        return other

    def _innermost(self, others, op):
        """This collection entered into the innermost scope among ``others`` (so that
        ``outer.join(inner)`` inside a loop body works like ``inner.join(outer)``)."""
        me = self
        for o in others:
            oc = o._collection if isinstance(o, Arranged) else o
            if isinstance(oc, Collection) and oc.scope is not me.scope and \
                    _encloses(me.scope, oc.scope):
                me = oc.scope.import_collection(me)
        return me

    def __repr__(self):
        return f"Collection({self.names}, node={self._node!r})"

    # -- linear operators ------------------------------------------------------------
    def map(self, f, *, names=None, arity=None):
        """Apply a vectorised function to every row.

        ``f(*columns)`` receives one read-only int64 array per column and returns a tuple
        of columns (or one array). It should be pure and work row by row: it is also
        called on empty and on a few made-up columns when the map is built (to learn
        its width and whether it only selects columns, which then run without it),
        and by the native engine on symbolic columns that record additions (a map
        inside a loop whose columns add columns or constants, ``k + 1``, runs in the
        compiled loop without it; see ``MapNode.affine``).
        ``names`` names the output columns (default: when ``f`` returns input columns
        themselves, as ``lambda k, v: (v, k)`` does, their names; else the input's
        names when the arity is unchanged, else ``c0, c1, ...``).

        Examples
        --------
        >>> import ddnumba as dd
        >>> df = dd.Dataflow(); inp, c = df.new_input(["a", "b"])
        >>> out = c.map(lambda a, b: (b, a + b), names=["b", "s"]).capture()
        >>> inp.insert([1], [2], time=0); inp.close(); df.run()
        >>> out.updates().to_pylist()
        [{'b': 2, 's': 3, 'time': 0, 'diff': 1}]
        """
        _check_takes(f, self.arity, "map", self._columns_said())
        if arity is None:
            arity = len(names) if names is not None and not isinstance(names, str) else (
                1 if isinstance(names, str) else None)
        if arity is None:
            arity = self._probe_arity(f)
        else:
            self._check_probe(f, arity, "map",
                              "names give" if names is not None else "arity is")
        out_names = self._names_for(arity, names, "map")
        node = _linear.MapNode(self.scope, self._node, f, arity)
        if names is None:
            # A map returning input columns themselves (a reordering or selection)
            # keeps their names: ``lambda k, v: (v, k)`` is named ``v, k``.
            cols = node.projection()
            if cols is not None:
                out_names, seen = [], set()
                for i in cols:
                    n, k = self.names[i], 1
                    while n in seen:
                        n, k = f"{self.names[i]}_{k}", k + 1
                    seen.add(n)
                    out_names.append(n)
        return self._new(node, out_names)

    def _columns_said(self):
        return (f"the {self.arity} column(s) {self.names}" if self.arity
                else "no arguments (the collection has no columns)")

    def _probe_arity(self, f):
        # Call f on empty columns to learn how many columns it returns.
        out = f(*[np.empty(0, _I64) for _ in range(self.arity)])
        if isinstance(out, (tuple, list)):
            return len(out)
        if isinstance(out, np.ndarray) and out.ndim == 2:
            return out.shape[1]
        return 1

    def _check_probe(self, f, expect, op, given):
        """With the output width given, still call ``f`` on empty columns once and
        refuse a different width now rather than at ``run()``; a function that does
        not run on empty columns is left to be checked there."""
        try:
            got = self._probe_arity(f)
        except Exception:
            return
        if got != expect:
            raise ValueError(f"{op}: the function returns {got} column(s) but {given} "
                             f"{expect}")

    def filter(self, predicate):
        """Keep rows where ``predicate(*columns)`` (a boolean mask) is True.

        The native engine also calls ``predicate`` on symbolic columns: inside a loop,
        a conjunction (``&``) of comparisons of columns, sums and constants
        (``lambda n, d: d <= 3``) runs in the compiled loop without it (see
        ``FilterNode.affine``)."""
        _check_takes(predicate, self.arity, "filter", self._columns_said())
        return self._new(_linear.FilterNode(self.scope, self._node, predicate), self.names)

    def flat_map(self, f, *, names=None):
        """``f(*columns) -> (row_index, *columns)``: each output row names its source row,
        whose time and diff it takes (any number of outputs per input row)."""
        _check_takes(f, self.arity, "flat_map", self._columns_said())
        if names is None:
            arity = self._probe_arity(f) - 1
        else:
            names = [names] if isinstance(names, str) else list(names)
            arity = len(names)
            self._check_probe(f, arity + 1, "flat_map", "names (plus the row index) give")
        names = self._names_for(arity, names, "flat_map")
        node = _linear.FlatMapNode(self.scope, self._node, f, arity)
        return self._new(node, names)

    def concat(self, *others):
        """The sum (multiset union) of this collection and ``others``."""
        me = self._innermost(others, "concat")
        if me is not self:
            return me.concat(*others)
        others = [self._same_scope(o, "concat") for o in others]
        for o in others:
            if o.arity != self.arity:
                raise ValueError(f"concat: arity {o.arity} of {o.names} differs from "
                                 f"{self.arity} of {self.names}")
        node = _linear.ConcatNode(self.scope, [self._node] + [o._node for o in others],
                                  self.arity)
        return self._new(node, self.names)

    def negate(self):
        """Every diff negated."""
        return self._new(_linear.NegateNode(self.scope, [self._node], self.arity),
                         self.names)

    def consolidate(self):
        """Sum updates of equal (row, time) and drop zeros."""
        return self._new(_linear.ConsolidateNode(self.scope, [self._node], self.arity),
                         self.names)

    def inspect(self, f):
        """Call ``f(table)`` on each batch of updates (an Arrow table: columns, time, diff)."""
        _check_takes(f, 1, "inspect", "one argument (an Arrow table)")
        return self._new(_linear.InspectNode(self.scope, self._node, f, self.names),
                         self.names)

    def delay(self, f):
        """Advance each update's time to ``join(t, f(times))`` (``f`` is vectorised)."""
        _check_takes(f, 1, "delay", "one argument (an array of times)")
        return self._new(_linear.DelayNode(self.scope, self._node, f), self.names)

    # -- arrangements and joins -----------------------------------------------------
    def arrange_by_key(self, *, key=1) -> "Arranged":
        """Index this collection by its first ``key`` columns; shareable by joins."""
        kw = _key_width(key, self.names, "arrange_by_key")
        return Arranged(self, ArrangeNode(self.scope, self._node, kw, self.names), kw)

    def arrange_by_self(self) -> "Arranged":
        """Index by the whole row (no values)."""
        return self.arrange_by_key(key=self.arity)

    def _arranged(self, key, op):
        kw = _key_width(key, self.names, op)
        return Arranged(self, self._shared_arrangement(kw), kw)

    def _shared_arrangement(self, kw):
        """This collection arranged by its first ``kw`` columns. At the root scope
        there is one such arrangement per collection and key width, which every join
        and every ``count`` / ``sum`` of it reads (one index built and kept, not one
        per use). Inside loops each use arranges anew: there the native engine fuses
        an arrangement with its only reader (a reduce keeps its input and output in
        one row, a join owning both traces inserts its deltas itself). (Operators
        cannot be added after a run.)"""
        if self.scope is not self.dataflow.root:
            return ArrangeNode(self.scope, self._node, kw, self.names)
        shared = self._node.__dict__.setdefault("_shared_arrangements", {})
        k = (kw, tuple(self.names))
        arr = shared.get(k)
        if arr is None:
            arr = shared[k] = ArrangeNode(self.scope, self._node, kw, self.names)
        return arr

    def join(self, other, *, key=1):
        """Rows ``(key..., left values..., right values...)`` for every matching pair.

        ``other`` is a Collection or an :class:`Arranged` (share one arrangement between
        several joins). The output time is the join of the two times, the diff their
        product.

        Examples
        --------
        >>> import ddnumba as dd
        >>> df = dd.Dataflow()
        >>> ai, a = df.new_input(["k", "x"]); bi, b = df.new_input(["k", "y"])
        >>> out = a.join(b).capture()
        >>> ai.insert([1], [10], time=0); bi.insert([1], [20], time=1)
        >>> ai.close(); bi.close(); df.run()
        >>> out.updates().to_pylist()
        [{'k': 1, 'x': 10, 'y': 20, 'time': 1, 'diff': 1}]
        """
        me = self._innermost([other], "join")
        if me is not self:
            return me.join(other, key=key)
        left = self._arranged(key, "join")
        right = self._as_arranged(other, left.kw, "join")
        names = _dedupe(self.names[:left.kw] + self.names[left.kw:]
                        + right.names[right.kw:])
        node = JoinNode(self.scope, left._node, right._node, names)
        return self._new(node, names)

    def _as_arranged(self, other, kw, op):
        if isinstance(other, Arranged):
            if other.kw != kw:
                raise ValueError(f"{op}: the arrangement is keyed by {other.kw} column(s), "
                                 f"this side by {kw}")
            if other._node.scope is self.scope:
                return other
            # An arrangement from an enclosing scope: enter its collection and arrange
            # it again inside (arrangements themselves are not shared across scopes).
            other = other._collection
        other = self._same_scope(other, op)
        return other._arranged(kw, op)

    def join_map(self, other, f, *, key=1, names=None):
        """``join`` followed by ``map(f)``."""
        return self.join(other, key=key).map(f, names=names)

    def semijoin(self, other, *, key=1):
        """Rows whose key is in ``other`` (a collection of keys), diff multiplied by the
        key's count in ``other``.

        Raises ``TypeError`` unless ``other`` is a Collection (or Arranged), and
        ``ValueError`` unless it has exactly the key's columns.
        """
        kw = _key_width(key, self.names, "semijoin")
        other_c = other._collection if isinstance(other, Arranged) else other
        if not isinstance(other_c, Collection):
            raise TypeError(f"semijoin: expected a Collection or Arranged, got "
                            f"{type(other).__name__}")
        if other_c.arity != kw:
            raise ValueError(f"semijoin: other must have exactly {kw} key column(s), "
                             f"has {other_c.names}")
        joined = self.join(other, key=kw)
        return joined  # right side has no value columns: rows are (key, left values)

    def antijoin(self, other, *, key=1):
        """Rows whose key is not in ``other``: ``self - self.semijoin(other)``."""
        return self.concat(self.semijoin(other, key=key).negate())

    # -- reduce family ----------------------------------------------------------------
    def _reduce(self, kw, logic, ow, names, op, fast=None, spec=None):
        if spec is not None and spec[0] in ("count", "sum"):
            # (at the root these aggregate incrementally from the arrangement, which
            # they can share; other reduces keep input and output in one trace)
            arr = self._shared_arrangement(kw)
        else:
            arr = ArrangeNode(self.scope, self._node, kw, self.names)
        node = ReduceNode(self.scope, arr, logic, ow, names, name=op, fast=fast, spec=spec)
        return self._new(node, names)

    def reduce(self, logic, *, key=1, names):
        """Per-key user logic: ``logic(vals[n, vw], counts[n]) -> (out_vals, out_counts)``.

        ``logic`` must be a ``numba.njit`` function; it sees the key's rows with non-zero
        accumulated counts. ``names`` names the output (key columns, then outputs).

        Raises ``TypeError`` when ``logic`` is not an ``@njit`` function, does not
        compile for ``(int64[n, vw], int64[n])`` or does not return two integer
        arrays, and ``ValueError`` when ``names`` has fewer names than key columns.
        An output count overflowing int64 raises ``OverflowError`` in ``run()``.
        """
        if not hasattr(logic, "py_func"):
            raise TypeError(f"reduce: logic must be a numba @njit function, got "
                            f"{type(logic).__name__} (decorate it with numba.njit)")
        kw = _key_width(key, self.names, "reduce")
        names = [names] if isinstance(names, str) else list(names)
        ow = len(names) - kw
        if ow < 0:
            raise ValueError(f"reduce: names {names} must include the {kw} key column(s)")
        driver = _reduce_ops.user_driver(logic, ow)
        return self._reduce(kw, driver, ow, names, "reduce")

    def count(self, *, key=1, name="count"):
        """``(key..., count)``: the sum of the counts of each key's rows.

        Over a collection that can never hold a negative count (the output of a
        ``distinct``, ``count``, ``sum``, ``min`` or ``max``, of a loop whose result is
        one, and what ``map``, ``filter``, ``concat`` and ``join`` make of those), a
        key has rows exactly when their total is positive, so the count reads the key
        columns alone: its state holds one entry per key, not one per row.
        """
        kw = _key_width(key, self.names, "count")
        if 0 < kw < self.arity and _never_negative(self._node):
            keys = self.map(_KeyColumns(kw), names=self.names[:kw])
            return keys._reduce(kw, _reduce_ops.logic_count, 1,
                                self.names[:kw] + [name], "count", fast=("count", 0),
                                spec=("count", 0))
        return self._reduce(kw, _reduce_ops.logic_count, 1, self.names[:kw] + [name],
                            "count", fast=("count", 0), spec=("count", 0))

    def sum(self, col, *, key=1, name=None):
        """``(key..., sum)`` of ``col * count`` over each key's rows.

        ``col`` is a value column's name or its index among the value columns; the
        output column is ``name`` (default ``sum_<col>``). Raises ``ValueError`` when
        there is no value column or ``col`` is not one; a sum overflowing int64
        raises ``OverflowError`` in ``run()``.
        """
        kw = _key_width(key, self.names, "sum")
        c = self._value_col(col, kw, "sum")
        return self._reduce(kw, _reduce_ops.logic_sum(c), 1,
                            self.names[:kw] + [name or f"sum_{self.names[kw + c]}"], "sum",
                            fast=("sum", c), spec=("sum", c))

    def min(self, col=None, *, key=1, name=None):
        """``(key..., min)`` of ``col`` over rows with positive count.

        ``col`` (default: the first value column) is a value column's name or index;
        the output column is ``name`` (default ``min_<col>``). Raises ``ValueError``
        when there is no value column or ``col`` is not one.
        """
        kw = _key_width(key, self.names, "min")
        c = self._value_col(col, kw, "min")
        names = self.names[:kw] + [name or f"min_{self.names[kw + c]}"]
        src, c = self._column_first(kw, c)
        return src._reduce(kw, _reduce_ops.logic_min(c), 1, names, "min", spec=("min", c))

    def max(self, col=None, *, key=1, name=None):
        """``(key..., max)`` of ``col`` over rows with positive count.

        As :meth:`min`, with the largest value (default name ``max_<col>``).
        """
        kw = _key_width(key, self.names, "max")
        c = self._value_col(col, kw, "max")
        names = self.names[:kw] + [name or f"max_{self.names[kw + c]}"]
        src, c = self._column_first(kw, c)
        return src._reduce(kw, _reduce_ops.logic_max(c), 1, names, "max", spec=("max", c))

    def _column_first(self, kw, c):
        """For a ``min``/``max`` of value column ``c``: the collection with that column
        moved first among the values, and its new index (0). Rows are only permuted, so
        every row keeps its count; the native engine then reads the key's values in
        that column's order and stops at the first positive row (kernels.rootorder
        outside loops, seqloop._walk_order in sequential loops), instead of
        accumulating the whole group."""
        if c == 0:
            return self, c
        order = list(range(kw)) + [kw + c] + [kw + i for i in range(self.arity - kw)
                                              if i != c]
        return self.map(_Columns(order), names=[self.names[i] for i in order]), 0

    def _value_col(self, col, kw, op):
        vals = self.names[kw:]
        if not vals:
            raise ValueError(f"{op}: no value columns besides the key {self.names[:kw]}")
        if col is None:
            return 0
        if isinstance(col, str):
            if col not in vals:
                raise ValueError(f"{op}: column {col!r} is not a value column of "
                                 f"{self.names} (key is {self.names[:kw]})")
            return vals.index(col)
        c = int(col)
        if not 0 <= c < len(vals):
            raise ValueError(f"{op}: value column index {c} out of range for {vals}")
        return c

    def distinct(self):
        """Each row with positive count, once."""
        return self._reduce(self.arity, _reduce_ops.logic_distinct, 0, self.names,
                            "distinct", spec=("distinct", 0))

    def threshold(self, f):
        """Each row with its count ``c`` replaced by ``f(c)`` (vectorised over counts)."""
        _check_takes(f, 1, "threshold", "one argument (an array of counts)")
        return self._reduce(self.arity, _reduce_ops.logic_threshold(f), 0, self.names,
                            "threshold")

    def top_k(self, k, *, key=1):
        """Per key, the ``k`` smallest value rows (counting multiplicity)."""
        kw = _key_width(key, self.names, "top_k")
        if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 1:
            raise ValueError(f"top_k: k must be an integer >= 1, got {k!r}")
        return self._reduce(kw, _reduce_ops.logic_top_k(int(k)), self.arity - kw,
                            self.names, "top_k", spec=("top_k", int(k)))

    # -- multiset operators (Naiad patent) --------------------------------------------
    def _pair(self, other, combine, op):
        me = self._innermost([other], op)
        if me is not self:
            return me._pair(other, combine, op)
        other = self._same_scope(other, op)
        if other.arity != self.arity:
            raise ValueError(f"{op}: arity {other.arity} differs from {self.arity}")
        a = self.map(lambda *cols: (*cols, np.zeros(len(cols[0]), _I64)),
                     names=self.names + ["__tag"])
        b = other.map(lambda *cols: (*cols, np.ones(len(cols[0]), _I64)),
                      names=self.names + ["__tag"])
        return a.concat(b)._reduce(self.arity, _reduce_ops.logic_pair(combine), 0,
                                   self.names, op)

    def union(self, other):
        """Multiset union: each row with the max of its two counts."""
        return self._pair(other, np.maximum, "union")

    def intersect(self, other):
        """Multiset intersection: each row with the min of its two counts."""
        return self._pair(other, np.minimum, "intersect")

    def except_(self, other):
        """Multiset difference: each row with ``max(a - b, 0)``."""
        return self._pair(other, lambda a, b: np.maximum(a - b, 0), "except_")

    # -- iteration ----------------------------------------------------------------------
    def iterate(self, body, *, max_iterations=None, name=None):
        """The fixed point of ``x_{i+1} = body(x_i)`` starting from ``x_0 = self``.

        ``body`` receives the loop variable (a collection with one more time coordinate,
        the iteration) and returns the next value. Outer collections used inside are
        entered automatically. ``max_iterations`` raises
        :class:`~ddnumba.operators.iterate.IterationLimitError` (in ``run()``) if the
        loop has not converged after that many rounds; without it, a loop still
        changing at iteration 10,000 warns once. ``name`` names the loop in messages.
        Raises ``TypeError`` when ``body`` does not return a Collection (the loop is
        then discarded: the dataflow stays usable).

        Examples
        --------
        >>> import ddnumba as dd
        >>> df = dd.Dataflow()
        >>> ei, edges = df.new_input(["src", "dst"]); ri, roots = df.new_input(["node"])
        >>> reach = roots.iterate(lambda r: r.join(edges).map(
        ...     lambda s, d: d, names=["node"]).concat(roots).distinct())
        >>> out = reach.capture()
        >>> ei.insert([1, 2], [2, 3], time=0); ri.insert([1], time=0)
        >>> ei.close(); ri.close(); df.run()
        >>> sorted(out.at(0).column("node").to_pylist())
        [1, 2, 3]
        """
        from ddnumba.operators.iterate import Variable, build_loop

        def build(loop):
            var = Variable(loop.scope, self)
            result = body(var.collection)
            if not isinstance(result, Collection):
                raise TypeError("iterate: body must return a Collection")
            var.set(result)
            return result if result.scope is loop.scope else loop.enter(result)

        return build_loop(self.scope, build, max_iterations=max_iterations, name=name)

    def enter(self, loop):
        """Bring this collection into a loop scope (``loop`` is a Loop, a LoopScope, or a
        collection of that loop). Usually automatic."""
        scope = getattr(loop, "scope", loop)
        return scope.import_collection(self)

    def leave(self):
        """Take this collection out of its loop (dropping the iteration coordinate).

        Leaving a variable other than through ``iterate``/``iterative`` is allowed for any
        collection of a loop scope; it is scheduled after the loop runs."""
        from ddnumba.operators.iterate import LeaveNode
        parent = self.scope.parent
        if parent is None:
            raise ValueError("leave: the collection is not inside a loop")
        if not getattr(self.scope, "closed", True):
            # The loop is scheduled in its parent only once built; a leave created now
            # would run before the loop does.
            raise ValueError(f"leave: loop {self.scope.name!r} is still being built; "
                             f"return the collection from the body (iterate) or from "
                             f"build (Dataflow.iterative) instead")
        return Collection(LeaveNode(parent, self._node), self.names)

    # -- outputs ------------------------------------------------------------------------
    def capture(self, *, auto_compact=False) -> Captured:
        """Record every output update; read with ``updates()`` and ``at(t)``.

        ``auto_compact=True``: the capture bounds its own memory over an endless
        stream. After a run, once the updates it gained since its last compaction
        reach twice what that compaction kept (plus ``CaptureNode.COMPACT_MIN``,
        65,536), it compacts (:meth:`Captured.compact`): with one time coordinate to
        the last complete time; with several, to the output frontier stepped back by
        one in each coordinate (with the frontier at ``(a + 1, 0)``: to ``(a, 0)``,
        so every time of epoch ``a`` stays readable). After every run that moves its
        frontier it then holds less than three times the collection it was last
        compacted to, plus ``COMPACT_MIN`` updates, and each compaction's sort is
        paid for by the updates it covers. :meth:`Captured.at` answers for the times
        in the future of ``since``; :meth:`Captured.new_updates` still returns every
        change once, at the time it was output (the way to stream results out).
        """
        if self.scope.parent is not None:
            raise ValueError("capture: leave() the loop scope before capturing")
        return Captured(CaptureNode(self.scope, self._node, self.names,
                                    auto_compact=auto_compact))

    def probe(self) -> Probe:
        """A probe that tells which times of this collection are complete."""
        return Probe(ProbeNode(self.scope, self._node))


class Arranged:
    """A collection indexed by key, shareable by several joins.

    Each reader holds its own handle on the underlying trace; the trace compacts to what
    all readers can still observe.
    """

    def __init__(self, collection: Collection, node: ArrangeNode, kw: int):
        self._collection = collection
        self._node = node
        self.kw = kw
        self.names = collection.names

    @property
    def arity(self):
        """The number of columns (key and values)."""
        return len(self.names)

    @property
    def spine(self):
        """The arrangement's trace (a :class:`~ddnumba.trace.Spine`; Python engine)."""
        return self._node.spine

    def as_collection(self) -> Collection:
        """The collection that was arranged."""
        return self._collection

    def join(self, other, *, key=None):
        """Join with another collection or arrangement on this arrangement's key.

        ``key`` may be given only as this arrangement's key (its width or its column
        names); ``ValueError`` otherwise, before anything is built.
        """
        kw = self.kw if key is None else _key_width(key, self.names, "join")
        if kw != self.kw:
            raise ValueError(f"join: this arrangement is keyed by {self.kw} column(s) "
                             f"{self.names[:self.kw]}; key={key!r} asks for {kw} "
                             f"(arrange by that key instead)")
        right = self._collection._as_arranged(other, kw, "join")
        names = _dedupe(self.names + right.names[right.kw:])
        node = JoinNode(self._node.scope, self._node, right._node, names)
        return Collection(node, names)

    def __repr__(self):
        return f"Arranged({self.names}, key={self.names[:self.kw]})"

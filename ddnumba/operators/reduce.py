"""Reduce: per-key logic over the accumulated input, correct for partially ordered times.

A reduce groups rows by key and keeps, for every time ``t``, its output accumulated at
``t`` equal to ``logic(key, input accumulated at t)``. With partially ordered times the
output can change at times where no input changed: at *joins* of input times (inputs at
(0,1) and (1,0) can change the output at (1,1)). Each step of a :class:`ReduceNode`:

1. takes the new input batch (complete times only; the arrangement holds the rest) and
   the keys whose *pending* times became complete;
2. per key, finds the *interesting* times: the closure of the new update times (and due
   pending times) under join with each other and with the key's history; those in the
   future of the frontier are kept as pending times of the key;
3. accumulates the input at every interesting, complete time (one batched kernel for all
   keys and all times), runs the logic once over all those moments, and
4. emits, in time order per key, ``desired − current output`` at each such time, and
   inserts the corrections into its output trace.

All distinct times of a batch go through one pass of each kernel (``kernels/reduce.py``).
With one time coordinate the closure is the set of new times and accumulation walks
times in order. Input and output traces compact to the node's frontier after each step.

A ``count``, ``sum`` or ``distinct`` with one time coordinate keeps no output trace and
reads no history: every update it has seen is earlier than the new batch's, so the
current count of each ``(key, vals)`` (and for a count or sum each key's total), in
hash tables, are all it needs (:mod:`ddnumba.kernels.rootagg`, as the native engine's
root counts and distincts). A one-row change then costs the same whatever the size of
its key's group. A ``min``, ``max`` or ``top_k`` with one time coordinate reads a
changed key's values in order from the trace's batches and stops at the first positive
ones (:func:`ddnumba.kernels.rootorder.trie_want`), instead of gathering and
accumulating the key's whole history.
"""
from __future__ import annotations

import functools

import numpy as np

from ddnumba.dataflow import Node
from ddnumba.kernels import consolidate as _consolidate
from ddnumba.kernels import lattice as _lattice
from ddnumba.kernels import reduce as _reduce
from ddnumba.kernels import rootagg as _rootagg
from ddnumba.kernels import rootorder as _rootorder
from ddnumba.operators.arrange import (batches_to_flat, group_by_key, offsets_for,
                                       take_batches, unique_rows)
from ddnumba.trace import Batch, Spine
from ddnumba.updates import Updates

_I64 = np.int64
_ORDERED = {"min": _rootorder.O_MIN, "max": _rootorder.O_MAX, "top_k": _rootorder.O_TOP_K}


class ReduceNode(Node):
    """Reduce over an :class:`~ddnumba.operators.arrange.ArrangeNode`.

    ``logic(mom_offs, acc_vals, acc_counts) -> (want_offs, want_vals, want_counts)`` is a
    batched function over CSR "moments" (one per key and interesting time); ``ow`` is the
    width of its output values.
    """

    kind = "reduce"

    def __init__(self, scope, arranged, logic, ow, names, *, name=None, fast=None,
                 spec=None):
        # ``fast = ("count" | "sum", col)``: with one time coordinate, count and sum (and
        # distinct) keep hashed current state (kernels.rootagg), no output trace.
        self.fast = fast
        # ``spec = (name, param)`` names built-in logic the native runtime runs itself
        # (count, sum, min, max, distinct, top_k); None: it calls ``logic`` back.
        self.spec = spec
        self.arranged = arranged
        self.kw = arranged.kw
        self.ow = ow
        self.logic = logic
        self.names = names
        super().__init__(scope, [arranged], arranged.kw + ow, name=name)
        self.in_handle = arranged.spine.handle()
        self.out = Spine(self.kw, ow, scope.dims)
        self.out_handle = self.out.handle()
        d = scope.dims
        self.pend_keys = np.empty((0, self.kw), _I64)
        self.pend_times = np.empty((0, d), _I64)
        # count/sum/distinct with one time coordinate: (tab, arena, meta) of
        # kernels.rootagg (a distinct uses no arena)
        self.hashed = None
        self.hashed_distinct = spec is not None and spec[0] == "distinct"
        if d == 1 and (fast is not None or self.hashed_distinct):
            self.hashed = (np.zeros((0, 1), _I64), np.zeros((0, 1), _I64),
                           np.zeros(4, _I64))
        # min / max (of value column 0) / top_k with one time coordinate: (mode, k) of
        # kernels.rootorder.trie_want, which reads a changed key's values in order
        self.ordered = None
        if d == 1 and spec is not None and spec[0] in _ORDERED and (
                spec[0] == "top_k" or spec[1] == 0):
            self.ordered = (_ORDERED[spec[0]], spec[1] if spec[0] == "top_k" else 0)

    def hashed_records(self):
        """Entries of the hashed state (values present plus keys with an output);
        0 without one."""
        if self.hashed is None:
            return 0
        meta = self.hashed[2]
        return int(meta[_rootagg.M_VALUES] + meta[_rootagg.M_KEYS])

    def held_times(self):
        return [self.pend_times] if len(self.pend_times) else []

    def holds_work(self):
        return len(self.pend_times) > 0

    def step(self):
        kw, d = self.kw, self.dims
        frontier = self.frontier
        new = batches_to_flat(take_batches(self, 0), kw, self.arranged.vw, d)
        if self.hashed is not None or self.ordered is not None:
            if self.hashed is not None:
                self._step_hashed(new)
            else:
                self._step_ordered(new)
            self.in_handle.set_frontier(frontier)
            self.out_handle.set_frontier(frontier)
            return
        seed_keys = [new[0][:, :kw]]
        seed_times = [new[1]]
        if len(self.pend_times):
            due = ~_lattice.in_future(self.pend_times, frontier) if len(frontier) else \
                np.ones(len(self.pend_times), bool)
            if due.any():
                seed_keys.append(self.pend_keys[due])
                seed_times.append(self.pend_times[due])
                self.pend_keys = np.ascontiguousarray(self.pend_keys[~due])
                self.pend_times = np.ascontiguousarray(self.pend_times[~due])
        grouped = len(seed_keys) == 1
        sk = np.ascontiguousarray(seed_keys[0] if grouped else np.concatenate(seed_keys))
        st = np.ascontiguousarray(seed_times[0] if grouped else np.concatenate(seed_times))
        if len(st):
            self._process(sk, st, frontier, grouped=grouped)
        self.in_handle.set_frontier(frontier)
        self.out_handle.set_frontier(frontier)

    def _step_hashed(self, new):
        """A count, sum or distinct over hashed current state: ``new`` is the
        arrangement's batch, sorted by data and consolidated, all of it later than
        what the state has seen (the arrangement passes on closed times only)."""
        nd, nt, nf = new
        if not len(nf):
            return
        tab, arena, meta = self.hashed
        if self.hashed_distinct:
            tab, data, times, diffs = _rootagg.distinct_step(tab, meta, nd, nt, nf)
        else:
            kind, col = self.fast
            tab, arena, data, times, diffs = _rootagg.agg_step(
                tab, arena, meta, nd, nt, nf, self.kw, self.arranged.vw, kind == "sum",
                col)
        self.hashed = (tab, arena, meta)
        if len(diffs):
            self.emit(Updates(data, np.ascontiguousarray(times[:, :1]), diffs))

    def _step_ordered(self, new):
        """A ``min``, ``max`` or ``top_k`` with one time coordinate: every update in the
        input trace is at a time no later than the new batch's (the arrangement passes
        on closed times only), so each changed key's due times are the new batch's
        times for it, and its answers come from its values read in order across the
        trace's batches, starting where the key's output is and stopping at the first
        positive ones (:func:`ddnumba.kernels.rootorder.trie_want`): a change costs about
        the same whatever the size of its key's group, not a gather of its whole
        history, nor a walk over the values taken out before."""
        nd, nt, nf = new
        if not len(nf):
            return
        kw = self.kw
        # each key's due times: its distinct new times, ascending
        seeds, _ = _consolidate.consolidate_data(
            np.ascontiguousarray(np.concatenate([nd[:, :kw], nt], axis=1)),
            np.ones(len(nf), _I64))
        keys, due_offs = group_by_key(seeds, kw)
        due_times = np.ascontiguousarray(seeds[:, kw:])
        tries = [b.trie for b in self.arranged.spine.batches() if len(b)]
        lo = np.empty((len(tries), len(keys)), _I64)
        hi = np.empty((len(tries), len(keys)), _I64)
        for b, t in enumerate(tries):
            _rootorder.val_ranges(t.keys, t.key_offs, keys, lo[b], hi[b])
        mode, k = self.ordered
        old = self.out.gather(keys)
        if tries:
            bats = None
            for t in tries:
                arrs = [np.ascontiguousarray(a, dtype=_I64)
                        for a in (t.vals, t.val_offs, t.times, t.diffs)]
                if bats is None:
                    bats = _rootorder.batch_list(*arrs)
                else:
                    _rootorder.push_batch(bats, *arrs)
            want_offs, want_vals, want_counts, _, _ = _rootorder.trie_want(
                bats, lo, hi, due_offs, due_times, self.arranged.vw, old.offs,
                np.ascontiguousarray(old.vals), old.diffs, np.ascontiguousarray(nd), kw,
                mode, k)
        else:
            want_offs = np.zeros(len(due_times) + 1, _I64)
            want_vals = np.empty((0, self.ow), _I64)
            want_counts = np.empty(0, _I64)
        self._correct(keys, due_offs, due_times, want_offs, want_vals, want_counts, old)

    def _process(self, sk, st, frontier, grouped=False):
        kw, d = self.kw, self.dims
        if grouped:
            # Seeds straight from one sorted batch: already grouped by key. The kernels
            # accept unsorted, repeated seed times within a key.
            keys, seed_offs = group_by_key(sk, kw)
            seed_times = st
        else:
            # Seeds: distinct (key, time), grouped by key.
            seeds, _ = _consolidate.consolidate_data(
                np.ascontiguousarray(np.concatenate([sk, st], axis=1)),
                np.ones(len(st), _I64))
            keys = unique_rows(np.ascontiguousarray(seeds[:, :kw]))
            seed_offs = offsets_for(np.ascontiguousarray(seeds[:, :kw]), keys)
            seed_times = np.ascontiguousarray(seeds[:, kw:])

        hist = self.arranged.spine.gather(keys)        # old input + the new batch
        due_offs, due_times, pend_offs, pend_times = _reduce.interesting_times(
            seed_offs, seed_times, hist.offs, hist.times, frontier, check=False)
        if len(pend_times):
            pk = np.repeat(keys, np.diff(pend_offs), axis=0)
            self.pend_keys = np.ascontiguousarray(np.concatenate([self.pend_keys, pk]))
            self.pend_times = np.ascontiguousarray(
                np.concatenate([self.pend_times, pend_times]))
            self._dedup_pending()
        if not len(due_times):
            return
        old = self.out.gather(keys)
        mom_offs, acc_vals, acc_counts = _reduce.accumulate(
            due_offs, due_times, hist.offs, hist.vals, hist.times, hist.diffs, check=False)
        want_offs, want_vals, want_counts = self.logic(mom_offs, acc_vals, acc_counts)
        self._correct(keys, due_offs, due_times, want_offs, want_vals, want_counts, old)

    def _correct(self, keys, due_offs, due_times, want_offs, want_vals, want_counts, old):
        """Emit and record the corrections that take the output ``old`` (gathered for
        ``keys``) to the desired output at every due time."""
        kw = self.kw
        ck, cv, ct, cd = _reduce.corrections(
            due_offs, due_times, want_offs, want_vals, want_counts,
            old.offs, old.vals, old.times, old.diffs, check=False)
        if not len(cd):
            return
        data = np.empty((len(cd), kw + self.ow), _I64)
        data[:, :kw] = keys[ck]
        data[:, kw:] = cv
        # Corrections come sorted by (key, outval, time) and consolidated.
        self.out.insert(Batch.from_updates(data, ct, cd, kw=kw, consolidated=True))
        self.emit(Updates(data, ct, cd))

    def _dedup_pending(self):
        both = np.ascontiguousarray(np.concatenate([self.pend_keys, self.pend_times], axis=1))
        uniq, _ = _consolidate.consolidate_data(both, np.ones(len(both), _I64))
        self.pend_keys = np.ascontiguousarray(uniq[:, :self.kw])
        self.pend_times = np.ascontiguousarray(uniq[:, self.kw:])


# ---------------------------------------------------------------------- built-in logic
@functools.lru_cache(maxsize=256)
def user_driver(logic, ow):
    """The batched driver for a user's ``@njit`` logic, compiled once per function (the
    driver closes over the function, so it cannot live in Numba's on-disk cache)."""
    if hasattr(logic, "py_func"):
        _check_logic_types(logic)
    return _reduce.make_user_driver(logic, ow)


def _check_logic_types(logic):
    """Compile ``logic`` for the arrays the driver passes it and refuse, with a
    ``TypeError`` naming the function, logic that does not compile for them or does
    not return two integer arrays: float output would be truncated to int64 codes."""
    from numba import types as nbt
    from numba.core.errors import TypingError
    name = getattr(logic, "__name__", repr(logic))
    sig = (nbt.int64[:, ::1], nbt.int64[::1])
    try:
        logic.compile(sig)
    except TypingError as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise TypeError(f"reduce: logic {name!r} does not compile for (vals: int64[n, "
                        f"vw], counts: int64[n]): {first}") from None
    rt = next(s.return_type for s in logic.nopython_signatures if tuple(s.args) == sig)
    ok = (isinstance(rt, nbt.BaseTuple) and len(rt) == 2 and
          all(isinstance(t, nbt.Array) and isinstance(t.dtype, (nbt.Integer, nbt.Boolean))
              for t in rt))
    if not ok:
        raise TypeError(f"reduce: logic {name!r} must return (out_vals, out_counts), two "
                        f"integer arrays; it returns {rt}")


def logic_count(mom_offs, acc_vals, acc_counts):
    return _reduce.logic_count(mom_offs, acc_vals, acc_counts)


def logic_sum(col):
    return lambda o, v, c: _reduce.logic_sum(o, v, c, col)


def logic_min(col):
    return lambda o, v, c: _reduce.logic_min(o, v, c, col)


def logic_max(col):
    return lambda o, v, c: _reduce.logic_max(o, v, c, col)


def logic_distinct(mom_offs, acc_vals, acc_counts):
    return _reduce.logic_distinct(mom_offs, acc_vals, acc_counts)


def logic_top_k(k):
    return lambda o, v, c: _reduce.logic_top_k(o, v, c, k)


def logic_threshold(f):
    """Map every non-zero count ``c`` to ``f(c)`` (whole rows are the key; vw == 0)."""

    def logic(mom_offs, acc_vals, acc_counts):
        new = np.asarray(f(acc_counts.copy()))
        if new.shape != acc_counts.shape or new.dtype.kind not in "iub":
            raise ValueError(f"threshold: f must map an int64 array of counts to an "
                             f"integer array of the same shape; got dtype {new.dtype}, "
                             f"shape {new.shape}")
        new = new.astype(_I64)
        keep = new != 0
        # One entry per moment at most (the only value is the empty row).
        moment = np.repeat(np.arange(len(mom_offs) - 1), np.diff(mom_offs))
        offs = np.zeros(len(mom_offs), _I64)
        np.cumsum(np.bincount(moment[keep], minlength=len(mom_offs) - 1), out=offs[1:])
        return offs, np.ascontiguousarray(acc_vals[keep]), np.ascontiguousarray(new[keep])

    return logic


def logic_pair(combine):
    """Multiset combination of two tagged inputs (tag 0 = left, tag 1 = right).

    The key is the whole row; the value is the tag; ``combine(ca, cb)`` gives the output
    count from the two accumulated counts (vectorised)."""

    def logic(mom_offs, acc_vals, acc_counts):
        m = len(mom_offs) - 1
        moment = np.repeat(np.arange(m), np.diff(mom_offs))
        tag = acc_vals[:, 0]
        ca = np.zeros(m, _I64)
        cb = np.zeros(m, _I64)
        ca[moment[tag == 0]] = acc_counts[tag == 0]
        cb[moment[tag == 1]] = acc_counts[tag == 1]
        out = np.asarray(combine(ca, cb), dtype=_I64)
        keep = out != 0
        offs = np.zeros(m + 1, _I64)
        np.cumsum(keep, out=offs[1:])
        return offs, np.empty((int(keep.sum()), 0), _I64), np.ascontiguousarray(out[keep])

    return logic

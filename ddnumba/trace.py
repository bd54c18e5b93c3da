"""Arrangements: batches, spines and trace handles (the storage layer).

An *arrangement* is a collection's update history indexed by key, so that joins and
reduces can look up everything that ever happened to a key without rescanning the
stream. It is stored as a :class:`Spine`: a log-structured merge of immutable
:class:`Batch` es.

Batch
    A trie of arrays sorted by (key, val, time): ``keys[nk, kw]`` with ``key_offs[nk+1]``
    into ``vals[nv, vw]`` with ``val_offs[nv+1]`` into ``times[nu, d]`` and ``diffs[nu]``
    (see :mod:`ddnumba.kernels.trie`), plus a description: it holds updates at times
    ``t`` with ``lower <= t`` and ``t`` not in the future of ``upper``, and its times may
    have been advanced by the frontier ``since``.

Spine
    Batches live in levels; level ``L`` holds one batch of about ``2**L`` updates or one
    merge in progress of two such batches. Inserting a batch places it at its level; an
    occupied level starts a merge whose result moves up. Merges are *fuelled*: each insert
    of ``n`` updates grants every merge in progress ``effort * n`` units of work, so no
    single insert pays for a huge merge, while a merge at level ``L`` still completes
    before the level is needed again. Merges *compact*: every time is replaced by
    ``advance(t, since)`` for the spine's compaction frontier ``since`` (taken when the
    merge starts), equal (key, val, time) are summed and zeros dropped. That is what keeps
    a sliding window's state proportional to its live rows instead of its history.

Trace handles
    Every reader of a spine holds a :class:`TraceHandle` with its own compaction frontier
    (the times it still needs to tell apart). The spine compacts to the lower envelope of
    all handles' frontiers; a handle's frontier never moves backward; closing the last
    handle releases the whole spine.

Mathematics. For a frontier ``F`` and any time ``g`` in the future of ``F``,
``t <= g`` iff ``advance(t, F) <= g``: accumulations at every time a reader can still ask
about are unchanged by compaction, and times no such reader can distinguish collapse.
"""
from __future__ import annotations

import numpy as np

from ddnumba.kernels import consolidate as _consolidate
from ddnumba.kernels import cursor as _cursor
from ddnumba.kernels import lattice as _lattice
from ddnumba.kernels import merge as _merge
from ddnumba.kernels import trie as _trie

__all__ = ["Batch", "Spine", "TraceHandle", "History"]

_I64 = np.int64


def _antichain(times, dims):
    """Normalise a frontier-like value to an int64 antichain ``[k, dims]``."""
    a = np.asarray(times, dtype=_I64)
    if a.ndim == 1:
        a = a.reshape(-1, dims) if a.size else np.empty((0, dims), _I64)
    return _lattice.antichain(np.ascontiguousarray(a))


class Batch:
    """An immutable, sorted and consolidated trie of updates with its description.

    Invariants (checked by :meth:`check`): keys strictly increasing; vals strictly
    increasing within a key; times strictly increasing (lexicographic) within a val;
    no zero diffs; every key has a val and every val an update.
    """

    __slots__ = ("trie", "lower", "upper", "since", "kw", "vw", "dims")

    def __init__(self, trie, *, kw, vw, dims, lower=None, upper=None, since=None):
        self.trie = trie
        self.kw, self.vw, self.dims = kw, vw, dims
        zero = np.zeros((1, dims), _I64)
        self.lower = zero if lower is None else lower
        # An empty upper antichain means "no upper bound known": every time may occur.
        self.upper = np.empty((0, dims), _I64) if upper is None else upper
        self.since = zero if since is None else since

    @classmethod
    def from_updates(cls, data, times, diffs, *, kw, lower=None, upper=None,
                     since=None, consolidated=False):
        """Build a batch from flat updates ``data[n, kw+vw]``, ``times[n, d]``, ``diffs[n]``.

        The updates need not be sorted or consolidated unless ``consolidated=True``
        promises they already are (sorted by (data, time), no duplicates, no zeros).
        """
        data = np.ascontiguousarray(data, dtype=_I64)
        times = np.ascontiguousarray(times, dtype=_I64)
        diffs = np.ascontiguousarray(diffs, dtype=_I64)
        if not consolidated:
            data, times, diffs = _consolidate.consolidate(data, times, diffs)
        trie = _trie.build_trie(data, times, diffs, kw)
        return cls(trie, kw=kw, vw=data.shape[1] - kw, dims=times.shape[1],
                   lower=lower, upper=upper, since=since)

    @classmethod
    def from_trie(cls, trie, *, kw, lower=None, upper=None, since=None):
        """Wrap a trie a kernel built and guarantees valid (``check_trie`` holds); only
        the widths are read from it, nothing is validated or copied."""
        return cls(trie, kw=kw, vw=trie.vals.shape[1], dims=trie.times.shape[1],
                   lower=lower, upper=upper, since=since)

    @classmethod
    def empty(cls, kw, vw, dims):
        return cls(_trie.empty_trie(kw, vw, dims), kw=kw, vw=vw, dims=dims)

    def __len__(self):
        return len(self.trie.diffs)

    @property
    def num_keys(self):
        return len(self.trie.keys)

    def flatten(self):
        """The updates as flat ``(data, times, diffs)``, sorted and consolidated."""
        return _trie.flatten_trie(self.trie)

    def check(self):
        """Raise ``ValueError`` if an invariant of the trie is violated."""
        _trie.check_trie(self.trie)

    def __repr__(self):
        return (f"Batch(updates={len(self)}, keys={self.num_keys}, kw={self.kw}, "
                f"vw={self.vw}, dims={self.dims})")


class _Merging:
    """A merge in progress of two batches; both stay readable until it finishes."""

    __slots__ = ("a", "b", "state", "since")

    def __init__(self, a, b, since):
        self.a, self.b, self.since = a, b, since
        frontier = since if since is not None and len(since) else None
        self.state = _merge.MergeState.begin(a.trie, b.trie, frontier)

    def __len__(self):
        return len(self.a) + len(self.b)

    def step(self, fuel):
        return self.state.step(int(fuel))

    def finish(self):
        trie = self.state.finish()
        a, b = self.a, self.b
        return Batch(trie, kw=a.kw, vw=a.vw, dims=a.dims,
                     lower=_lattice.frontier_meet(a.lower, b.lower),
                     upper=_upper_join(a.upper, b.upper, a.dims),
                     since=self.since if self.since is not None else a.since)


def _upper_join(u1, u2, dims):
    # An empty upper means unbounded; the merged batch's upper is the later of the two.
    if len(u1) == 0 or len(u2) == 0:
        return np.empty((0, dims), _I64)
    return u2


def _level_of(n):
    return max(0, int(n - 1).bit_length()) if n > 0 else 0


class History:
    """The per-key history read from a trace: CSR arrays over the queried keys.

    ``offs[q+1]`` splits ``vals``, ``times``, ``diffs`` by query; within a query the
    updates are sorted by (val, time) and consolidated.
    """

    __slots__ = ("offs", "vals", "times", "diffs")

    def __init__(self, offs, vals, times, diffs):
        self.offs, self.vals, self.times, self.diffs = offs, vals, times, diffs

    def __len__(self):
        return len(self.diffs)


class Spine:
    """A log-structured merge of batches with fuelled, compacting merges.

    Parameters
    ----------
    kw, vw, dims : int
        Key width, value width and number of time coordinates.
    effort : int
        Units of merge work granted per inserted update to each merge in progress.
        4 suffices for a merge at level ``L`` to finish before level ``L`` is needed again.
    eager_merge : int
        Merges of at most this many updates complete at once instead of in steps.
    small : int
        Batches of at most this many updates are merged at once with every batch in the
        levels below ``small`` (so those levels hold at most one batch).
    """

    def __init__(self, kw, vw, dims, *, effort=4, eager_merge=4096, small=512):
        self.kw, self.vw, self.dims = int(kw), int(vw), int(dims)
        self.effort = int(effort)
        self.eager_merge = int(eager_merge)
        self.small = int(small)
        self.levels: list = []
        self._handles: dict[int, np.ndarray] = {}
        self._next_handle = 0
        self.since = np.zeros((1, self.dims), _I64)
        self.upper = np.zeros((1, self.dims), _I64)
        self.inserted = 0            # updates ever inserted (for statistics)

    # ------------------------------------------------------------------ writing
    def insert(self, batch: Batch):
        """Add a batch. Grants fuel to merges in progress, then places the batch."""
        if batch.kw != self.kw or batch.vw != self.vw or batch.dims != self.dims:
            raise ValueError(
                f"Spine.insert: batch shape (kw={batch.kw}, vw={batch.vw}, "
                f"dims={batch.dims}) does not match the spine's (kw={self.kw}, "
                f"vw={self.vw}, dims={self.dims})")
        if len(batch.upper):
            self.upper = batch.upper
        n = len(batch)
        if n == 0:
            return
        self.inserted += n
        self._apply_fuel(self.effort * n)
        if n <= self.small:
            # Small batches (single-change rounds) are merged at once with the small
            # batches already present, so the low levels hold at most one batch: reads
            # touch few batches, and each such merge costs at most ~2 * small updates.
            small_levels = _level_of(self.small) + 1
            for lvl in range(min(small_levels, len(self.levels))):
                slot = self.levels[lvl]
                if isinstance(slot, Batch):
                    self.levels[lvl] = None
                    batch = _Merging(slot, batch, self._merge_frontier()).finish()
                elif isinstance(slot, _Merging):
                    self.levels[lvl] = None
                    batch = _Merging(slot.finish(), batch, self._merge_frontier()).finish()
            self._place(batch, _level_of(len(batch)))
            return
        self._place(batch, _level_of(n))

    def _apply_fuel(self, fuel):
        for lvl, slot in enumerate(self.levels):
            if isinstance(slot, _Merging) and slot.step(fuel):
                self.levels[lvl] = None
                self._place(slot.finish(), None, from_level=lvl)

    def _place(self, batch, level, from_level=None):
        n = len(batch)
        if n == 0:
            return
        if level is None:
            # A finished merge of level L belongs at level L+1, or lower if compaction
            # shrank it; never higher than L+1 so the level structure stays geometric.
            level = min(_level_of(n), from_level + 1)
        while len(self.levels) <= level:
            self.levels.append(None)
        slot = self.levels[level]
        if slot is None:
            self.levels[level] = batch
        elif isinstance(slot, Batch):
            merging = _Merging(slot, batch, self._merge_frontier())
            if len(merging) <= self.eager_merge:
                # Small merges cost less than the bookkeeping of doing them in steps,
                # and finishing them keeps the number of batches (read costs) low.
                self.levels[level] = None
                self._place(merging.finish(), None, from_level=level)
            else:
                self.levels[level] = merging
        else:
            # The level is still merging: finish that merge now (rare when fuel suffices),
            # take the level, and move the merge result up.
            done = slot.finish()
            self.levels[level] = batch
            self._place(done, None, from_level=level)

    def _merge_frontier(self):
        return self.since.copy() if self.since is not None else None

    def exert(self, fuel=None):
        """Spend merge effort while idle, so a quiet trace still compacts.

        With ``fuel=None`` every merge in progress is finished and, if more than one batch
        remains, the two smallest are merged (one step towards a single compact batch).
        """
        if fuel is not None:
            self._apply_fuel(fuel)
            return
        for lvl, slot in enumerate(self.levels):
            if isinstance(slot, _Merging):
                self.levels[lvl] = None
                self._place(slot.finish(), None, from_level=lvl)
        occupied = [i for i, s in enumerate(self.levels) if s is not None]
        if len(occupied) >= 2:
            lo, hi = occupied[0], occupied[1]
            small = self.levels[lo]
            self.levels[lo] = None
            self.levels[hi] = _Merging(self.levels[hi], small, self._merge_frontier())

    def compact(self):
        """Merge everything into a single batch advanced to the compaction frontier."""
        while True:
            self.exert()
            slots = [s for s in self.levels if s is not None]
            if len(slots) <= 1 and not any(isinstance(s, _Merging) for s in slots):
                break
        # A lone batch may still carry times older than the frontier.
        for lvl, slot in enumerate(self.levels):
            if isinstance(slot, Batch) and self.since is not None and len(self.since):
                trie = _merge.advance_trie(slot.trie, self.since)
                self.levels[lvl] = None
                b = Batch(trie, kw=self.kw, vw=self.vw, dims=self.dims, lower=slot.lower,
                          upper=slot.upper, since=self.since.copy())
                self._place(b, _level_of(len(b)))

    def clear(self):
        self.levels = []

    # ------------------------------------------------------------------ handles
    def handle(self, frontier=None) -> "TraceHandle":
        """A new reader; its frontier starts at ``frontier`` (default: the spine's since)."""
        return TraceHandle(self, frontier)

    def _set_handle(self, hid, frontier):
        self._handles[hid] = frontier
        self._refresh_since()

    def _drop_handle(self, hid):
        self._handles.pop(hid, None)
        if not self._handles:
            # Nobody can read this trace any more: release its memory.
            self.clear()
        self._refresh_since()

    def _refresh_since(self):
        if not self._handles:
            return
        fronts = [f for f in self._handles.values()]
        self.since = _lattice.antichain(np.ascontiguousarray(np.concatenate(fronts)))

    # ------------------------------------------------------------------ reading
    def batches(self):
        """Every readable batch (inputs of merges in progress included)."""
        out = []
        for slot in self.levels:
            if isinstance(slot, Batch):
                out.append(slot)
            elif isinstance(slot, _Merging):
                out.append(slot.a)
                out.append(slot.b)
        return out

    def __len__(self):
        return sum(len(b) for b in self.batches())

    @property
    def num_batches(self):
        return len(self.batches())

    def gather(self, queries, extra=None) -> History:
        """The (val, time, diff) history of each query key across all batches.

        ``queries`` must be sorted and unique (``[q, kw]``). Returns a :class:`History`
        whose part ``q`` holds that key's updates sorted by (val, time), consolidated.
        ``extra`` = ``(qidx, vals, times, diffs)`` adds updates of query ``qidx`` first
        (a join uses it to take a batch back out).
        """
        queries = np.ascontiguousarray(queries, dtype=_I64)
        q = len(queries)
        parts = []
        for b in self.batches():
            if len(b):
                # Batches are trusted (built by the kernels), so the private kernels are
                # called directly: the public wrapper re-validates every array.
                t = b.trie
                kidx = _cursor._find_keys(t.keys, queries)
                qidx, vals, times, diffs = _cursor._gather(kidx, t.key_offs, t.vals,
                                                           t.val_offs, t.times, t.diffs)
                if len(diffs):
                    parts.append((qidx, vals, times, diffs))
        if extra is not None and len(extra[3]):
            parts.append(tuple(np.ascontiguousarray(a) for a in extra))
        if not parts:
            return History(np.zeros(q + 1, _I64), np.empty((0, self.vw), _I64),
                           np.empty((0, self.dims), _I64), np.empty(0, _I64))
        if len(parts) == 1:
            qidx, vals, times, diffs = parts[0]
        else:
            qidx = np.concatenate([p[0] for p in parts])
            data = np.empty((len(qidx), 1 + self.vw), _I64)
            data[:, 0] = qidx
            data[:, 1:] = np.concatenate([p[1] for p in parts])
            times = np.concatenate([p[2] for p in parts])
            diffs = np.concatenate([p[3] for p in parts])
            data, times, diffs = _consolidate.consolidate(data, times, diffs)
            qidx = np.ascontiguousarray(data[:, 0])
            vals = np.ascontiguousarray(data[:, 1:])
        offs = np.zeros(q + 1, _I64)
        np.cumsum(np.bincount(qidx, minlength=q), out=offs[1:])
        return History(offs, vals, times, diffs)

    def updates(self):
        """All updates, flat ``(data, times, diffs)``, sorted and consolidated."""
        parts = [b.flatten() for b in self.batches() if len(b)]
        if not parts:
            return (np.empty((0, self.kw + self.vw), _I64),
                    np.empty((0, self.dims), _I64), np.empty(0, _I64))
        if len(parts) == 1:
            return parts[0]
        return _consolidate.consolidate(np.concatenate([p[0] for p in parts]),
                                        np.concatenate([p[1] for p in parts]),
                                        np.concatenate([p[2] for p in parts]))

    def accumulate(self, time):
        """The collection at ``time``: rows ``[n, kw+vw]`` with non-zero counts ``[n]``."""
        t = np.asarray(time, dtype=_I64).reshape(1, self.dims)
        data, times, diffs = self.updates()
        keep = _lattice.less_equal(times, t[0])
        data, diffs = data[keep], diffs[keep]
        zeros = np.zeros((len(diffs), 1), _I64)
        data, _, diffs = _consolidate.consolidate(np.ascontiguousarray(data), zeros, diffs)
        return data, diffs

    def __repr__(self):
        return (f"Spine(kw={self.kw}, vw={self.vw}, dims={self.dims}, "
                f"updates={len(self)}, batches={self.num_batches})")


class TraceHandle:
    """A reader of a spine holding its own compaction frontier.

    The spine may advance times to the lower envelope of all handles' frontiers, so a
    handle promises it will only ask about times in the future of its frontier.
    """

    def __init__(self, spine: Spine, frontier=None):
        self.spine = spine
        self._id = spine._next_handle
        spine._next_handle += 1
        if frontier is None:
            frontier = np.zeros((1, spine.dims), _I64)
        self.frontier = _antichain(frontier, spine.dims)
        self.closed = False
        spine._set_handle(self._id, self.frontier)

    def set_frontier(self, frontier):
        """Advance this reader's compaction frontier (it may never move backward)."""
        if self.closed:
            raise RuntimeError("TraceHandle.set_frontier: the handle is closed")
        new = _antichain(frontier, self.spine.dims)
        if not _lattice.frontier_less_equal(self.frontier, new):
            raise ValueError(
                f"TraceHandle.set_frontier: frontier {new.tolist()} is not in the future "
                f"of the current frontier {self.frontier.tolist()} (frontiers never move "
                f"backward)")
        self.frontier = new
        self.spine._set_handle(self._id, new)

    def close(self):
        """Release this reader's hold on the spine."""
        if not self.closed:
            self.closed = True
            self.spine._drop_handle(self._id)

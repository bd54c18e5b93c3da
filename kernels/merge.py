"""Merging tries: the sum of two batches, optionally compacted, done in fuelled steps.

The *merge* of tries ``a`` and ``b`` is the trie holding the sum of their updates:
updates at equal ``(key, val, time)`` are added, zero sums vanish, and keys or vals left
without updates vanish with them. Given a compaction frontier ``F`` (an antichain of
times), every time ``t`` is first replaced by ``advance(t, F) = meet_{f in F} join(t, f)``
(coordinate-wise ``min_f max(t, f)``). For every time ``g`` in the future of ``F``,
``t <= g`` iff ``advance(t, F) <= g``, so the collection seen from any such ``g`` is
unchanged while times that no future reader can tell apart collapse into one.

Advancing is monotone for the product order but not for the lexicographic order we
sort by: within one val, advanced times may come out of order or coincide. Those runs
(short in practice) are re-sorted in place and consolidated.

A merge is *resumable*: a spine amortises a big merge over many small inserts, giving
it ``fuel`` (input updates to consume) at each insert. All progress lives in a five-slot
position array, so the kernel can stop after any whole key and pick up where it left off.
"""
import numpy as np
from numba import njit

from .rows import add_checked, row_cmp, row_eq
from .trie import Trie, _as_int64, _normalise_trie, empty_trie

# Runs of at most this many updates are sorted by insertion sort; longer ones (rare:
# a val with a long history) by heapsort, which is in place and O(n log n).
_INSERTION_MAX = 24

# Slots of the position array shared by the Python state and the kernel.
_A_KEY, _B_KEY, _O_KEY, _O_VAL, _O_UPD = range(5)

_FUEL_ALL = np.iinfo(np.int64).max


# --------------------------------------------------------------------------------------
# Row and time helpers
#
# A note on shape: the hot loops below (`_plain_run`, `_compact_run`) are written
# without `break`/`continue` and without per-key conditional bookkeeping, and their
# per-key helpers are inlined at the Numba level. Each of those choices was measured:
# the obvious versions run 2-5x slower because of the loop shape LLVM receives.


@njit(cache=True, nogil=True, inline="always")
def _copy_row(src, i, dst, j):
    """``dst[j] = src[i]``; one-column rows (the common case) skip the loop machinery."""
    w = src.shape[1]
    if w == 1:
        dst[j, 0] = src[i, 0]
    else:
        for c in range(w):
            dst[j, c] = src[i, c]


@njit(cache=True, nogil=True, inline="always")
def _advance_rows(times, lo, hi, frontier):
    """Replace each time in ``times[lo:hi]`` by ``meet_f join(t, f)``, in place.

    Join and meet act coordinate by coordinate, so each coordinate becomes
    ``min over f of max(t_c, f_c)``.
    """
    d = times.shape[1]
    m = frontier.shape[0]
    for x in range(lo, hi):
        for c in range(d):
            t = times[x, c]
            best = max(t, frontier[0, c])
            for f in range(1, m):
                best = min(best, max(t, frontier[f, c]))
            times[x, c] = best


@njit(cache=True, nogil=True, inline="always")
def _swap_upd(times, diffs, i, j):
    for c in range(times.shape[1]):
        t = times[i, c]
        times[i, c] = times[j, c]
        times[j, c] = t
    x = diffs[i]
    diffs[i] = diffs[j]
    diffs[j] = x


@njit(cache=True, nogil=True)
def _sift_down(times, diffs, lo, root, n):
    """Restore the max-heap property below ``root`` of the heap ``times[lo:lo + n]``."""
    while True:
        child = 2 * root + 1
        if child >= n:
            return
        if child + 1 < n and row_cmp(times, lo + child, times, lo + child + 1) < 0:
            child += 1
        if row_cmp(times, lo + root, times, lo + child) >= 0:
            return
        _swap_upd(times, diffs, lo + root, lo + child)
        root = child


@njit(cache=True, nogil=True)
def _sort_run(times, diffs, lo, hi):
    """Sort updates ``[lo, hi)`` by time in place (not stable: equal times are summed next)."""
    n = hi - lo
    if n <= _INSERTION_MAX:
        for i in range(lo + 1, hi):
            j = i
            while j > lo and row_cmp(times, j - 1, times, j) > 0:
                _swap_upd(times, diffs, j - 1, j)
                j -= 1
        return
    # Heapsort: no scratch memory needed, and the worst case stays n log n.
    for start in range(n // 2 - 1, -1, -1):
        _sift_down(times, diffs, lo, start, n)
    for end in range(n - 1, 0, -1):
        _swap_upd(times, diffs, lo, lo + end)
        _sift_down(times, diffs, lo, np.int64(0), end)


@njit(cache=True, nogil=True)
def _fix_run(times, diffs, lo, hi):
    """Restore strictly increasing times in ``[lo, hi)`` after advancing them.

    Returns ``(new_hi, overflowed)``: the run is sorted and consolidated in place (equal
    times summed, zeros dropped) when advancing broke its order; untouched otherwise.
    """
    ordered = True
    for u in range(lo + 1, hi):
        if row_cmp(times, u - 1, times, u) >= 0:
            ordered = False
            break
    if ordered:
        return hi, False
    _sort_run(times, diffs, lo, hi)
    w = lo
    i = lo
    while i < hi:
        s = diffs[i]
        j = i + 1
        while j < hi and row_eq(times, j, times, i):
            s, over = add_checked(s, diffs[j])
            if over:
                return w, True
            j += 1
        if s != 0:
            if w != i:
                _copy_row(times, i, times, w)
            diffs[w] = s
            w += 1
        i = j
    return w, False


@njit(cache=True, nogil=True)
def _fix_key(ov, ovo, ot, od, v_start, v_end):
    """Re-sort and consolidate, val by val, output vals whose advanced times broke order.

    Vals ``[v_start, v_end)`` were written with their runs back to back; runs that
    shrink (or vanish, taking their val with them) are closed up. Returns
    ``(nv, nu, overflow)``: the new ends of the val and update layers.
    """
    nv = v_start
    nu = ovo[v_start]
    lo = nu
    for j in range(v_start, v_end):
        # Read before any write: ovo[nv + 1] below never reaches past ovo[j + 1].
        hi = ovo[j + 1]
        if nu != lo:
            for x in range(lo, hi):
                _copy_row(ot, x, ot, nu + (x - lo))
                od[nu + (x - lo)] = od[x]
        end, over = _fix_run(ot, od, nu, nu + (hi - lo))
        if over:
            return nv, end, True
        if end > nu:
            if nv != j:
                _copy_row(ov, j, ov, nv)
            ovo[nv + 1] = end
            nv += 1
            nu = end
        lo = hi
    return nv, nu, False


# --------------------------------------------------------------------------------------
# Merge layers: updates of one val, vals of one key, keys


@njit(cache=True, nogil=True)
def _merge_times(at, ad, i, ie, bt, bd, j, je, ot, od, u):
    """Merge two sorted update runs of one val into ``ot/od[u:]``; ``(u, overflow)``.

    Equal times are summed and zero sums dropped. Times are copied unadvanced: equal
    times stay equal under advancing, so summing first loses nothing.
    """
    while i < ie and j < je:
        c = row_cmp(at, i, bt, j)
        if c < 0:
            _copy_row(at, i, ot, u)
            od[u] = ad[i]
            u += 1
            i += 1
        elif c > 0:
            _copy_row(bt, j, ot, u)
            od[u] = bd[j]
            u += 1
            j += 1
        else:
            s, over = add_checked(ad[i], bd[j])
            if over:
                return u, True
            if s != 0:
                _copy_row(at, i, ot, u)
                od[u] = s
                u += 1
            i += 1
            j += 1
    while i < ie:
        _copy_row(at, i, ot, u)
        od[u] = ad[i]
        u += 1
        i += 1
    while j < je:
        _copy_row(bt, j, ot, u)
        od[u] = bd[j]
        u += 1
        j += 1
    return u, False


@njit(cache=True, nogil=True, inline="always")
def _copy_vals(sv, svo, st, sd, v0, v1, ov, ovo, ot, od, nv, nu):
    """Append vals ``[v0, v1)`` of one input and their updates unchanged; ``(nv, nu)``.

    Offsets are rebased onto the output; vals and updates are block copies.
    """
    u0 = svo[v0]
    u1 = svo[v1]
    shift = nu - u0
    for j in range(v0, v1):
        w = nv + (j - v0)
        _copy_row(sv, j, ov, w)
        ovo[w + 1] = svo[j + 1] + shift
    for u in range(u0, u1):
        _copy_row(st, u, ot, u + shift)
        od[u + shift] = sd[u]
    return nv + (v1 - v0), nu + (u1 - u0)


@njit(cache=True, nogil=True)
def _merge_vals(av, avo, at, ad, va, vae, bv, bvo, bt, bd, vb, vbe, ov, ovo, ot, od, nv, nu):
    """Merge the val lists of one key present in both inputs; ``(nv, nu, overflow)``.

    Times are not advanced here (the caller advances the whole key afterwards).
    """
    while va < vae and vb < vbe:
        c = row_cmp(av, va, bv, vb)
        if c < 0:
            nv, nu = _copy_vals(av, avo, at, ad, va, va + 1, ov, ovo, ot, od, nv, nu)
            va += 1
        elif c > 0:
            nv, nu = _copy_vals(bv, bvo, bt, bd, vb, vb + 1, ov, ovo, ot, od, nv, nu)
            vb += 1
        else:
            u_start = nu
            nu, over = _merge_times(at, ad, avo[va], avo[va + 1], bt, bd, bvo[vb], bvo[vb + 1],
                                    ot, od, nu)
            if over:
                return nv, nu, True
            # A val whose updates all cancelled is dropped by not counting it.
            if nu > u_start:
                _copy_row(av, va, ov, nv)
                ovo[nv + 1] = nu
                nv += 1
            va += 1
            vb += 1
    nv, nu = _copy_vals(av, avo, at, ad, va, vae, ov, ovo, ot, od, nv, nu)
    nv, nu = _copy_vals(bv, bvo, bt, bd, vb, vbe, ov, ovo, ot, od, nv, nu)
    return nv, nu, False


@njit(cache=True, nogil=True)
def _plain_run(ak, ako, av, avo, at, ad, bk, bko, bv, bvo, bt, bd, ok, oko, ov, ovo, ot, od,
               ia, ib, nk, nv, nu, fuel):
    """Copy keys present in one input only, until a key in both, the fuel or the end.

    The hot loop of a merge without compaction. Every update copied here is one input
    update consumed, so the fuel is tracked through ``nu``. Returns the updated
    ``(ia, ib, nk, nv, nu)``; ``fuel > 0`` and ``nu + fuel`` must not overflow.
    """
    na = ak.shape[0]
    nb = bk.shape[0]
    stop = nu + fuel
    while (ia < na or ib < nb) and nu < stop:
        if ia < na and ib < nb:
            c = row_cmp(ak, ia, bk, ib)
        elif ia < na:
            c = -1
        else:
            c = 1
        if c < 0:
            _copy_row(ak, ia, ok, nk)
            nv, nu = _copy_vals(av, avo, at, ad, ako[ia], ako[ia + 1], ov, ovo, ot, od, nv, nu)
            ia += 1
        elif c > 0:
            _copy_row(bk, ib, ok, nk)
            nv, nu = _copy_vals(bv, bvo, bt, bd, bko[ib], bko[ib + 1], ov, ovo, ot, od, nv, nu)
            ib += 1
        else:
            # A key in both inputs: leave it to the general path. Stepping nk back makes
            # the unconditional bookkeeping below rewrite oko[nk] with the value it
            # already holds (oko[nk] == nv between keys) and restore nk.
            stop = nu
            nk -= 1
        oko[nk + 1] = nv
        nk += 1
    return ia, ib, nk, nv, nu


@njit(cache=True, nogil=True)
def _compact_run(ak, ako, av, avo, at, ad, bk, bko, bv, bvo, bt, bd, frontier,
                 ok, oko, ov, ovo, ot, od, ia, ib, nk, nv, nu, fuel):
    """Like ``_plain_run``, advancing times by ``frontier``.

    Each key is block-copied and its times advanced in place; only when that broke the
    strict order inside some val (for one time dimension, where advancing is
    monotone, only by making times equal) is it fixed up by ``_fix_key``. Stops before
    a key present in both inputs, once ``fuel`` input updates are consumed, at the
    end, or on overflow. Returns ``(ia, ib, nk, nv, nu, consumed, overflow)``.
    """
    na = ak.shape[0]
    nb = bk.shape[0]
    consumed = 0
    over = False
    while (ia < na or ib < nb) and consumed < fuel:
        if ia < na and ib < nb:
            c = row_cmp(ak, ia, bk, ib)
        elif ia < na:
            c = -1
        else:
            c = 1
        v_start = nv
        u_start = nu
        if c < 0:
            _copy_row(ak, ia, ok, nk)
            nv, nu = _copy_vals(av, avo, at, ad, ako[ia], ako[ia + 1], ov, ovo, ot, od, nv, nu)
            ia += 1
        elif c > 0:
            _copy_row(bk, ib, ok, nk)
            nv, nu = _copy_vals(bv, bvo, bt, bd, bko[ib], bko[ib + 1], ov, ovo, ot, od, nv, nu)
            ib += 1
        else:
            fuel = consumed  # a key in both inputs: leave it to the general path
        consumed += nu - u_start
        _advance_rows(ot, u_start, nu, frontier)
        # Count adjacent updates of one val that are no longer increasing.
        bad = 0
        if nu - u_start > 1:
            next_val = ovo[v_start + 1]
            j = v_start + 1
            for x in range(u_start + 1, nu):
                if x == next_val:
                    j += 1
                    next_val = ovo[j]
                else:
                    bad += row_cmp(ot, x - 1, ot, x) >= 0
        if bad > 0:
            nv, nu, over = _fix_key(ov, ovo, ot, od, v_start, nv)
            if over:
                fuel = consumed
        oko[nk + 1] = nv
        # A key whose vals all cancelled is dropped by not counting it.
        nk += nv > v_start
    return ia, ib, nk, nv, nu, consumed, over


@njit(cache=True, nogil=True)
def _merge_step(ak, ako, av, avo, at, ad, bk, bko, bv, bvo, bt, bd, frontier,
                ok, oko, ov, ovo, ot, od, pos, fuel):
    """Merge whole keys until ``fuel`` input updates are consumed or both inputs end.

    ``pos`` holds (a key, b key, output keys, output vals, output updates) and is
    updated in place; ``oko[0]`` and ``ovo[0]`` must be 0; ``fuel`` must be at most the
    number of input updates (so positions plus fuel cannot overflow). An empty
    ``frontier`` means no compaction. Returns 0, or 1 when a diff sum overflowed (the
    output is then unusable).
    """
    ia = pos[_A_KEY]
    ib = pos[_B_KEY]
    nk = pos[_O_KEY]
    nv = pos[_O_VAL]
    nu = pos[_O_UPD]
    na = ak.shape[0]
    nb = bk.shape[0]
    compact = frontier.shape[0] > 0
    consumed = 0
    status = 0
    while (ia < na or ib < nb) and consumed < fuel:
        # Keys found in one input only take a fast path, which returns at each key
        # present in both inputs (or when done).
        if compact:
            ia, ib, nk, nv, nu, used, over = _compact_run(
                ak, ako, av, avo, at, ad, bk, bko, bv, bvo, bt, bd, frontier,
                ok, oko, ov, ovo, ot, od, ia, ib, nk, nv, nu, fuel - consumed)
            consumed += used
            if over:
                status = 1
                break
        else:
            u_start = nu
            ia, ib, nk, nv, nu = _plain_run(
                ak, ako, av, avo, at, ad, bk, bko, bv, bvo, bt, bd, ok, oko, ov, ovo, ot, od,
                ia, ib, nk, nv, nu, fuel - consumed)
            consumed += nu - u_start
        if not (ia < na and ib < nb and consumed < fuel):
            break
        # Here ak[ia] == bk[ib]: sum the two val lists, then advance the key's times.
        consumed += avo[ako[ia + 1]] - avo[ako[ia]] + bvo[bko[ib + 1]] - bvo[bko[ib]]
        v_start = nv
        u_start = nu
        nv, nu, over = _merge_vals(av, avo, at, ad, ako[ia], ako[ia + 1],
                                   bv, bvo, bt, bd, bko[ib], bko[ib + 1],
                                   ov, ovo, ot, od, nv, nu)
        if not over and compact:
            _advance_rows(ot, u_start, nu, frontier)
            nv, nu, over = _fix_key(ov, ovo, ot, od, v_start, nv)
        if over:
            status = 1
            break
        # A key whose vals all cancelled is dropped by not counting it.
        if nv > v_start:
            _copy_row(ak, ia, ok, nk)
            oko[nk + 1] = nv
            nk += 1
        ia += 1
        ib += 1
    pos[_A_KEY] = ia
    pos[_B_KEY] = ib
    pos[_O_KEY] = nk
    pos[_O_VAL] = nv
    pos[_O_UPD] = nu
    return status


# --------------------------------------------------------------------------------------
# Python API


def _check_out(out, a, b, frontier, caps, widths):
    """Validate caller-provided output buffers: int64, C-contiguous, large enough, disjoint."""
    if len(out) != 6:
        raise ValueError(
            "out must be a Trie of six buffers (keys, key_offs, vals, val_offs, times, diffs)"
        )
    nk, nv, nu = caps
    kw, vw, d = widths
    need = [((nk, kw), "keys"), ((nk + 1,), "key_offs"), ((nv, vw), "vals"),
            ((nv + 1,), "val_offs"), ((nu, d), "times"), ((nu,), "diffs")]
    for arr, (shape, name) in zip(out, need):
        if not isinstance(arr, np.ndarray) or arr.dtype != np.int64 or not arr.flags.c_contiguous \
                or not arr.flags.writeable:
            raise ValueError(f"out.{name} must be a writeable C-contiguous int64 array")
        if arr.ndim != len(shape) or arr.shape[0] < shape[0] or arr.shape[1:] != shape[1:]:
            raise ValueError(f"out.{name} has shape {arr.shape}; need at least {shape}")
        for src in (*a, *b, frontier):
            if np.may_share_memory(arr, src):
                raise ValueError(f"out.{name} overlaps an input array; pass separate buffers")
    return Trie(*out)


class MergeState:
    """An in-progress, resumable merge of two tries (see the module docstring).

    Create with :meth:`begin`, advance with :meth:`step`, complete with :meth:`finish`.
    The inputs must not be modified while the merge is in progress.
    """

    __slots__ = ("_a", "_b", "_frontier", "_out", "_pos", "_result", "_failed")

    def __init__(self, a, b, frontier, out):
        self._a = a
        self._b = b
        self._frontier = frontier
        self._out = out
        self._pos = np.zeros(5, np.int64)
        self._result = None
        self._failed = False

    @classmethod
    def begin(cls, a, b, frontier=None, *, out=None) -> "MergeState":
        """Prepare to merge tries ``a`` and ``b``, compacting by ``frontier`` if given.

        Parameters
        ----------
        a, b : Trie
            Valid tries (``check_trie``; only the O(1) structure is re-checked here) with
            equal key width, val width and time dimensions.
        frontier : int64[m, d], optional
            Compaction frontier, ``m >= 1``; ``None`` merges without advancing times.
        out : Trie, optional
            Output buffers to reuse instead of allocating: int64, C-contiguous,
            writeable, not overlapping the inputs, with at least ``nk_a + nk_b`` key rows,
            ``nv_a + nv_b`` val rows, ``nu_a + nu_b`` update rows and offsets one longer.
            The result of :meth:`finish` is a view into them.

        Returns
        -------
        MergeState
            Nothing merged yet; buffers sized for the worst case (nothing cancels).
        """
        a = _normalise_trie(a, "a")
        b = _normalise_trie(b, "b")
        widths = a.widths
        if b.widths != widths:
            raise ValueError(
                f"merge: tries differ in (key width, val width, time dims): {widths} vs {b.widths}"
            )
        d = widths[2]
        if frontier is None:
            # An empty frontier array is the kernel's "do not advance" marker.
            frontier = np.empty((0, d), np.int64)
        else:
            frontier = _as_int64(frontier, "frontier", 2)
            if frontier.shape[0] < 1 or frontier.shape[1] != d:
                raise ValueError(
                    f"merge: frontier must have shape (m >= 1, d={d}), got {frontier.shape}"
                )
        caps = (a.n_keys + b.n_keys, a.n_vals + b.n_vals, a.n_updates + b.n_updates)
        if out is None:
            nk, nv, nu = caps
            kw, vw, _ = widths
            out = Trie(np.empty((nk, kw), np.int64), np.empty(nk + 1, np.int64),
                       np.empty((nv, vw), np.int64), np.empty(nv + 1, np.int64),
                       np.empty((nu, d), np.int64), np.empty(nu, np.int64))
        else:
            out = _check_out(out, a, b, frontier, caps, widths)
        out.key_offs[0] = 0
        out.val_offs[0] = 0
        return cls(a, b, frontier, out)

    @property
    def done(self) -> bool:
        """True when both inputs have been consumed."""
        return (self._result is not None
                or (self._pos[_A_KEY] == self._a.n_keys and self._pos[_B_KEY] == self._b.n_keys))

    def step(self, fuel) -> bool:
        """Merge whole keys until at least ``fuel`` input updates are consumed.

        Parameters
        ----------
        fuel : int
            Input updates (of ``a`` and ``b`` together) to consume; ``<= 0`` does nothing.
            A key is never split, so a step may overshoot by one key's updates.

        Returns
        -------
        bool
            Whether both inputs are exhausted (then :meth:`finish` is O(1)).

        Raises
        ------
        OverflowError
            When summing diffs overflows int64; the merge cannot continue.
        """
        if self._failed:
            raise RuntimeError("merge: this merge failed earlier (diff overflow); start a new one")
        if self.done:
            return True
        fuel = int(fuel)
        if fuel <= 0:
            return False
        # Consuming every input update finishes the merge, and the cap keeps the
        # kernel's position arithmetic far from int64 overflow.
        fuel = min(fuel, self._a.n_updates + self._b.n_updates)
        status = _merge_step(*self._a, *self._b, self._frontier, *self._out, self._pos, fuel)
        if status:
            self._failed = True
            key = int(self._pos[_A_KEY]), int(self._pos[_B_KEY])
            raise OverflowError(
                f"merge: int64 overflow summing diffs near key index {key[0]} of a / "
                f"{key[1]} of b"
            )
        return self.done

    def finish(self) -> Trie:
        """Complete the merge and return the result.

        Returns
        -------
        Trie
            The merged (and compacted) trie, satisfying ``check_trie``: views into the
            output buffers trimmed to the used lengths. Calling again returns the same.
        """
        if self._result is None:
            self.step(_FUEL_ALL)
            nk, nv, nu = (int(x) for x in self._pos[_O_KEY:])
            o = self._out
            self._result = Trie(o.keys[:nk], o.key_offs[:nk + 1], o.vals[:nv],
                                o.val_offs[:nv + 1], o.times[:nu], o.diffs[:nu])
            # Drop the inputs: a finished merge should not keep them alive.
            self._a = self._b = None
        return self._result


def merge(a, b, frontier=None, *, out=None) -> Trie:
    """Merge two tries in one go: ``MergeState.begin(a, b, frontier, out=out).finish()``.

    Parameters
    ----------
    a, b : Trie
        Valid tries with equal widths (see :meth:`MergeState.begin`).
    frontier : int64[m, d], optional
        Compaction frontier; every time ``t`` becomes ``advance(t, frontier)``.
    out : Trie, optional
        Reusable output buffers (see :meth:`MergeState.begin`).

    Returns
    -------
    Trie
        Holds the sum of ``a`` and ``b`` (times advanced), consolidated: no zero diffs,
        no empty vals or keys.

    Raises
    ------
    OverflowError
        When a sum of diffs leaves the int64 range.

    Examples
    --------
    >>> import numpy as np
    >>> from ddnumba.kernels.trie import build_trie
    >>> a = build_trie(np.array([[1, 10]]), np.array([[0]]), np.array([1]), kw=1)
    >>> b = build_trie(np.array([[1, 10], [2, 20]]), np.array([[3], [0]]), np.array([1, 5]), kw=1)
    >>> m = merge(a, b, frontier=np.array([[5]]))
    >>> m.keys.ravel().tolist(), m.times.ravel().tolist(), m.diffs.tolist()
    ([1, 2], [5, 5], [2, 5])
    """
    return MergeState.begin(a, b, frontier, out=out).finish()


def advance_trie(trie, frontier, *, out=None) -> Trie:
    """Compact one trie: advance every time by ``frontier`` and consolidate.

    Parameters
    ----------
    trie : Trie
        A valid trie.
    frontier : int64[m, d]
        Compaction frontier, ``m >= 1``.
    out : Trie, optional
        Reusable output buffers (see :meth:`MergeState.begin`).

    Returns
    -------
    Trie
        Same accumulations at every time in the future of ``frontier``; satisfies
        ``check_trie``.
    """
    if frontier is None:
        raise ValueError("advance_trie: a frontier is required (use merge for a plain copy)")
    t = _normalise_trie(trie, "trie")
    return merge(t, empty_trie(*t.widths), frontier, out=out)

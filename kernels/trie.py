"""Tries of arrays: the storage layout of an arranged batch.

A *trie* holds a consolidated set of updates ``(key, val, time, diff)`` sorted by
``(key, val, time)`` as three layers of structure-of-arrays, each layer owning a
contiguous range of the layer below through an offset array one longer than itself
(the layout of differential dataflow's ``ord_neu`` batches):

* ``keys: int64[nk, kw]``, strictly increasing rows; key ``i`` owns vals
  ``key_offs[i]:key_offs[i + 1]``;
* ``vals: int64[nv, vw]``, strictly increasing within each key; val ``j`` owns updates
  ``val_offs[j]:val_offs[j + 1]``;
* ``times: int64[nu, d]``, strictly increasing (lexicographically) within each val, with
  ``diffs: int64[nu]``, all non-zero.

Offsets start at 0 and end at the length of the layer below, and are strictly
increasing: every key has at least one val and every val at least one update. Widths
may be zero: ``kw == 0`` means one empty key (so ``nk <= 1``), ``vw == 0`` one empty val
per key. Times have ``d >= 1`` coordinates.

Because keys and vals are stored once, a trie is smaller than the flat ``(data, time,
diff)`` form and lets cursors and merges work key by key.
"""
from typing import NamedTuple

import numpy as np
from numba import njit

from .rows import row_cmp

_I64_MIN = -(2**63)
_I64_MAX = 2**63 - 1


class Trie(NamedTuple):
    """A batch of updates as a trie of arrays (see the module docstring).

    The fields are plain NumPy arrays, so a ``Trie`` can be unpacked straight into the
    argument list of a kernel.
    """

    keys: np.ndarray
    key_offs: np.ndarray
    vals: np.ndarray
    val_offs: np.ndarray
    times: np.ndarray
    diffs: np.ndarray

    @property
    def n_keys(self) -> int:
        """Number of keys ``nk``."""
        return self.keys.shape[0]

    @property
    def n_vals(self) -> int:
        """Number of (key, val) pairs ``nv``."""
        return self.vals.shape[0]

    @property
    def n_updates(self) -> int:
        """Number of updates ``nu`` (the size of the batch)."""
        return self.diffs.shape[0]

    @property
    def widths(self) -> tuple:
        """``(kw, vw, d)``: key width, val width and time dimensions."""
        return self.keys.shape[1], self.vals.shape[1], self.times.shape[1]


# --------------------------------------------------------------------------------------
# Input normalisation shared by the kernels of this package's trie family.


def _as_int64(x, name, ndim):
    """Return ``x`` as a C-contiguous, writeable int64 array with ``ndim`` dimensions.

    Integer inputs are converted when every value fits in int64; booleans become 0/1;
    floats are accepted only when every value is an integer in range. Anything else
    raises ``ValueError`` naming the argument. Writeable contiguous int64 arrays are
    returned as is (no copy); read-only arrays are copied because Numba types them
    differently and each kernel would compile twice.
    """
    a = np.asarray(x)
    if a.ndim != ndim:
        raise ValueError(f"{name} must be a {ndim}-D array, got shape {a.shape}")
    if a.dtype != np.int64:
        a = _convert_lossless(a, name)
    if not a.flags.c_contiguous:
        a = np.ascontiguousarray(a)
    if not a.flags.writeable:
        a = a.copy()
    return a


def _convert_lossless(a, name):
    kind = a.dtype.kind
    if kind in "bi" or (kind == "u" and a.dtype.itemsize < 8):
        return a.astype(np.int64)
    if kind == "u":
        if a.size and a.max() > _I64_MAX:
            raise ValueError(
                f"{name} has values above the int64 maximum (max {a.max()}); "
                "only int64 columns are supported"
            )
        return a.astype(np.int64)
    if kind == "f":
        if a.size:
            finite = np.isfinite(a).all()
            # 2**63 is exactly representable as a float, the int64 maximum is not.
            if not finite or (a != np.floor(a)).any() or a.min() < _I64_MIN or a.max() >= 2.0**63:
                raise ValueError(
                    f"{name} has dtype {a.dtype} with non-integer or out-of-range values; "
                    "pass int64 data"
                )
        return a.astype(np.int64)
    raise ValueError(f"{name} must hold integers (int64), got dtype {a.dtype}")


# --------------------------------------------------------------------------------------
# build_trie


@njit(cache=True, nogil=True, inline="always")
def _classify(data, kw, times, i):
    """How flat row ``i`` relates to row ``i - 1``.

    Returns 0 (starts a new key), 1 (same key, new val), 2 (same val, later time),
    -1 (out of order) or -2 (same (data, time) as the previous row: not consolidated).
    """
    w = data.shape[1]
    for c in range(w):
        x = data[i - 1, c]
        y = data[i, c]
        if x < y:
            return 0 if c < kw else 1
        if x > y:
            return -1
    c = row_cmp(times, i - 1, times, i)
    if c < 0:
        return 2
    if c > 0:
        return -1
    return -2


@njit(cache=True, nogil=True)
def _count_trie(data, kw, times, diffs):
    """First pass of ``build_trie``: count keys and vals, or find the first bad row.

    Returns ``(status, row, nk, nv)`` with status 0 (ok), -1 (unsorted), -2 (repeated
    (data, time)) or -3 (zero diff) at ``row``.
    """
    n = data.shape[0]
    if n == 0:
        return 0, 0, 0, 0
    if diffs[0] == 0:
        return -3, 0, 0, 0
    nk = 1
    nv = 1
    for i in range(1, n):
        if diffs[i] == 0:
            return -3, i, 0, 0
        k = _classify(data, kw, times, i)
        if k < 0:
            return k, i, 0, 0
        if k == 0:
            nk += 1
            nv += 1
        elif k == 1:
            nv += 1
    return 0, 0, nk, nv


@njit(cache=True, nogil=True)
def _fill_trie(data, kw, times, keys, key_offs, vals, val_offs):
    """Second pass of ``build_trie``: write keys, vals and both offset arrays.

    The input was validated by ``_count_trie``; times and diffs are copied by the
    caller since the update layer is the flat input itself.
    """
    n = data.shape[0]
    w = data.shape[1]
    nk = 0
    nv = 0
    for i in range(n):
        k = 0 if i == 0 else _classify(data, kw, times, i)
        if k == 0:
            for c in range(kw):
                keys[nk, c] = data[i, c]
            key_offs[nk] = nv
            nk += 1
        if k <= 1:
            for c in range(kw, w):
                vals[nv, c - kw] = data[i, c]
            val_offs[nv] = i
            nv += 1
    key_offs[nk] = nv
    val_offs[nv] = n


def build_trie(data, times, diffs, kw) -> Trie:
    """Build a trie from flat, sorted, consolidated updates.

    Parameters
    ----------
    data : int64[n, kw + vw]
        Update rows; the first ``kw`` columns are the key, the rest the val.
    times : int64[n, d]
        One time per update, ``d >= 1``.
    diffs : int64[n]
        Non-zero multiplicities.
    kw : int
        Number of key columns, ``0 <= kw <= data.shape[1]``.

    Returns
    -------
    Trie
        Keys and vals deduplicated; ``times`` and ``diffs`` are copies of the input.

    Notes
    -----
    Pre-condition: rows sorted by ``(data row, time)`` lexicographically, no two rows
    with equal ``(data, time)`` and no zero diff; violations raise ``ValueError`` (they
    are detected by the comparisons the build does anyway). Post-condition: the result
    satisfies ``check_trie``. One linear pass to count, one to fill.
    """
    data = _as_int64(data, "data", 2)
    times = _as_int64(times, "times", 2)
    diffs = _as_int64(diffs, "diffs", 1)
    n = data.shape[0]
    if times.shape[0] != n or diffs.shape[0] != n:
        raise ValueError(
            f"build_trie: data, times and diffs must have equal lengths, got "
            f"{n}, {times.shape[0]} and {diffs.shape[0]}"
        )
    if times.shape[1] < 1:
        raise ValueError("build_trie: times must have at least one column (d >= 1)")
    kw = int(kw)
    if not 0 <= kw <= data.shape[1]:
        raise ValueError(f"build_trie: kw={kw} must lie in [0, {data.shape[1]}] (data columns)")
    status, row, nk, nv = _count_trie(data, kw, times, diffs)
    if status == -1:
        raise ValueError(f"build_trie: updates are not sorted by (data, time) at row {row}")
    if status == -2:
        raise ValueError(
            f"build_trie: updates are not consolidated: rows {row - 1} and {row} have "
            "equal data and time (consolidate them first)"
        )
    if status == -3:
        raise ValueError(f"build_trie: diff at row {row} is zero (consolidate first)")
    vw = data.shape[1] - kw
    keys = np.empty((nk, kw), np.int64)
    key_offs = np.empty(nk + 1, np.int64)
    vals = np.empty((nv, vw), np.int64)
    val_offs = np.empty(nv + 1, np.int64)
    _fill_trie(data, kw, times, keys, key_offs, vals, val_offs)
    return Trie(keys, key_offs, vals, val_offs, times.copy(), diffs.copy())


# --------------------------------------------------------------------------------------
# flatten_trie


@njit(cache=True, nogil=True)
def _flatten(keys, key_offs, vals, val_offs, data):
    kw = keys.shape[1]
    vw = vals.shape[1]
    for k in range(keys.shape[0]):
        for v in range(key_offs[k], key_offs[k + 1]):
            for u in range(val_offs[v], val_offs[v + 1]):
                for c in range(kw):
                    data[u, c] = keys[k, c]
                for c in range(vw):
                    data[u, kw + c] = vals[v, c]


def flatten_trie(trie) -> tuple:
    """Expand a trie into flat updates: the inverse of ``build_trie``.

    Parameters
    ----------
    trie : Trie
        Satisfying ``check_trie`` (not re-checked here).

    Returns
    -------
    data : int64[nu, kw + vw]
        Key columns followed by val columns, one row per update.
    times : int64[nu, d]
        Copy of ``trie.times``.
    diffs : int64[nu]
        Copy of ``trie.diffs``.

    Notes
    -----
    Post-condition: rows are sorted by ``(data, time)`` and consolidated, so
    ``build_trie(*flatten_trie(t), kw)`` reproduces ``t``.
    """
    t = _normalise_trie(trie, "trie")
    keys, key_offs, vals, val_offs, times, diffs = t
    nu = diffs.shape[0]
    data = np.empty((nu, keys.shape[1] + vals.shape[1]), np.int64)
    _flatten(keys, key_offs, vals, val_offs, data)
    return data, times.copy(), diffs.copy()


# --------------------------------------------------------------------------------------
# check_trie and structural normalisation


def _normalise_trie(trie, name):
    """Convert the six fields to int64 arrays and check the shapes agree.

    Checks the cheap, O(1) structure only (dimensions, lengths, first and last offsets);
    ``check_trie`` checks the ordering invariants.
    """
    if len(trie) != 6:
        raise ValueError(
            f"{name} must have 6 fields (keys, key_offs, vals, val_offs, times, diffs)"
        )
    keys = _as_int64(trie[0], f"{name}.keys", 2)
    key_offs = _as_int64(trie[1], f"{name}.key_offs", 1)
    vals = _as_int64(trie[2], f"{name}.vals", 2)
    val_offs = _as_int64(trie[3], f"{name}.val_offs", 1)
    times = _as_int64(trie[4], f"{name}.times", 2)
    diffs = _as_int64(trie[5], f"{name}.diffs", 1)
    nk, nv, nu = keys.shape[0], vals.shape[0], diffs.shape[0]
    if key_offs.shape[0] != nk + 1:
        raise ValueError(
            f"{name}.key_offs has length {key_offs.shape[0]}, expected nk + 1 = {nk + 1}"
        )
    if val_offs.shape[0] != nv + 1:
        raise ValueError(
            f"{name}.val_offs has length {val_offs.shape[0]}, expected nv + 1 = {nv + 1}"
        )
    if times.shape[0] != nu:
        raise ValueError(f"{name}.times has {times.shape[0]} rows but diffs has {nu}")
    if times.shape[1] < 1:
        raise ValueError(f"{name}.times must have at least one column (d >= 1)")
    if key_offs[0] != 0 or key_offs[nk] != nv:
        raise ValueError(
            f"{name}.key_offs must start at 0 and end at nv = {nv}, "
            f"got {key_offs[0]} .. {key_offs[nk]}"
        )
    if val_offs[0] != 0 or val_offs[nv] != nu:
        raise ValueError(
            f"{name}.val_offs must start at 0 and end at nu = {nu}, "
            f"got {val_offs[0]} .. {val_offs[nv]}"
        )
    return Trie(keys, key_offs, vals, val_offs, times, diffs)


@njit(cache=True, nogil=True)
def _check_trie(keys, key_offs, vals, val_offs, times, diffs):
    """Return ``(code, index)`` of the first violated invariant, ``(0, 0)`` if none."""
    nk = keys.shape[0]
    nv = vals.shape[0]
    # Offsets first: the ordering checks below index through them.
    for i in range(nk):
        if key_offs[i + 1] <= key_offs[i]:
            return 1, i
    for j in range(nv):
        if val_offs[j + 1] <= val_offs[j]:
            return 2, j
    for i in range(1, nk):
        if row_cmp(keys, i - 1, keys, i) >= 0:
            return 3, i
    for i in range(nk):
        for j in range(key_offs[i] + 1, key_offs[i + 1]):
            if row_cmp(vals, j - 1, vals, j) >= 0:
                return 4, j
    for j in range(nv):
        for u in range(val_offs[j] + 1, val_offs[j + 1]):
            if row_cmp(times, u - 1, times, u) >= 0:
                return 5, u
    for u in range(diffs.shape[0]):
        if diffs[u] == 0:
            return 6, u
    return 0, 0


_CHECK_MESSAGES = {
    1: "key {i} owns no vals (key_offs must be strictly increasing)",
    2: "val {i} owns no updates (val_offs must be strictly increasing)",
    3: "keys are not strictly increasing at key {i}",
    4: "vals are not strictly increasing within their key at val {i}",
    5: "times are not strictly increasing within their val at update {i}",
    6: "diff of update {i} is zero",
}


def check_trie(trie) -> None:
    """Raise ``ValueError`` describing the first violated trie invariant.

    Parameters
    ----------
    trie : Trie or 6-tuple of arrays

    Notes
    -----
    Checks, in order: array dimensions and lengths; offsets starting at 0 and ending at
    the next layer's length; offsets strictly increasing (no empty key or val); keys
    strictly increasing; vals strictly increasing within each key; times strictly
    increasing within each val; no zero diff. Returns ``None`` when all hold. Linear time.
    """
    t = _normalise_trie(trie, "trie")
    code, i = _check_trie(*t)
    if code:
        raise ValueError("trie invariant violated: " + _CHECK_MESSAGES[code].format(i=i))


def empty_trie(kw, vw, d) -> Trie:
    """Return a trie with no updates, key width ``kw``, val width ``vw`` and ``d`` time dims."""
    kw, vw, d = int(kw), int(vw), int(d)
    if kw < 0 or vw < 0 or d < 1:
        raise ValueError(f"empty_trie: need kw >= 0, vw >= 0, d >= 1, got {kw}, {vw}, {d}")
    return Trie(
        np.empty((0, kw), np.int64),
        np.zeros(1, np.int64),
        np.empty((0, vw), np.int64),
        np.zeros(1, np.int64),
        np.empty((0, d), np.int64),
        np.empty(0, np.int64),
    )

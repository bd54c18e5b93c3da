"""Assertions and small helpers for testing differential dataflow programs.

A *collection* is a multiset of rows (tuples of int64 values), written either as a
``dict {row: count}`` or as a ``pyarrow.Table`` whose last column is ``count`` (the
shape of ``Captured.at(t)``). An *update* is a triple ``(row, time, diff)``; a list of
updates describes how a collection changes, and the collection *at* time ``t`` is the
sum of the updates whose time is ``<= t`` in the product partial order (every
coordinate ``<=``), with rows whose sum is zero left out. Times are ``int`` (one
dimension) or tuples of ints. Update tables (the shape of ``Captured.updates()``) hold
the data columns, then ``time`` (one dimension) or ``time_0 .. time_{d-1}``, then
``diff``.

The helpers here are the ones ddnumba's own test-suite uses, so a user can check a
program with the same vocabulary: :func:`assert_collection_equal` compares two
collections, :func:`assert_updates_equal` compares update streams after consolidation,
:func:`accumulate` turns updates into the collection at a time, and
:func:`updates_table` builds an Arrow change batch from literal updates (a fixture that
``InputHandle.insert`` accepts).

They are written for clarity on test-sized data (plain Python over rows), not speed.
"""
from __future__ import annotations

import re
from collections.abc import Mapping

import numpy as np
import pyarrow as pa

__all__ = [
    "accumulate",
    "assert_collection_equal",
    "assert_updates_equal",
    "collection_from_table",
    "consolidate_updates",
    "updates_from_table",
    "updates_table",
]

_MAX_SHOWN = 10
_TIME_COL = re.compile(r"^time_(\d+)$")


# --------------------------------------------------------------------------- normalising


def _as_int(x, what):
    """Return ``x`` as a Python int, refusing values that are not exact integers."""
    if isinstance(x, (bool, np.bool_)):
        # True/False are ints in Python; accepting them would hide a row built by mistake
        # from a comparison result.
        raise TypeError(f"{what} must be an integer, got the boolean {x!r}")
    if isinstance(x, (int, np.integer)):
        return int(x)
    if isinstance(x, (float, np.floating)) and float(x).is_integer():
        return int(x)
    raise TypeError(f"{what} must be an integer, got {x!r}")


def _as_row(row):
    """A row as a tuple of Python ints; a bare integer is a one-column row."""
    if isinstance(row, (tuple, list, np.ndarray)):
        return tuple(_as_int(x, f"row value in {row!r}") for x in row)
    return (_as_int(row, "row"),)


def _as_time(t):
    """A time as a tuple of Python ints; a bare integer is a one-dimensional time."""
    if isinstance(t, (tuple, list, np.ndarray)):
        out = tuple(_as_int(x, f"time coordinate in {t!r}") for x in t)
        if not out:
            raise ValueError("a time needs at least one coordinate, got ()")
        return out
    return (_as_int(t, "time"),)


def _time_leq(s, t):
    """Product order: every coordinate of ``s`` is ``<=`` the same one of ``t``."""
    return all(a <= b for a, b in zip(s, t))


def _normalise_updates(updates, what):
    """Updates as a list of ``(row_tuple, time_tuple, diff)`` with one time dimension."""
    out = []
    dims = None
    for i, u in enumerate(updates):
        try:
            row, time, diff = u
        except (TypeError, ValueError):
            raise ValueError(
                f"{what}[{i}] must be a (row, time, diff) triple, got {u!r}") from None
        r, t = _as_row(row), _as_time(time)
        if dims is None:
            dims = len(t)
        elif len(t) != dims:
            raise ValueError(
                f"{what}[{i}] has a time with {len(t)} coordinates, earlier updates "
                f"have {dims}: {u!r}")
        out.append((r, t, _as_int(diff, f"diff of {what}[{i}]")))
    return out


# ---------------------------------------------------------------------- update streams


def consolidate_updates(updates):
    """Sum the diffs of equal ``(row, time)`` pairs and drop the zeros.

    Parameters
    ----------
    updates : iterable of (row, time, diff)
        ``row`` a tuple of ints (or one int), ``time`` an int or a tuple of ints.

    Returns
    -------
    list of (tuple, tuple, int)
        Rows and times as tuples of Python ints, sorted by ``(row, time)``
        lexicographically, each pair at most once, no zero diff.

    Examples
    --------
    >>> consolidate_updates([((1,), 0, 1), ((1,), 0, -1), ((2,), 1, 3)])
    [((2,), (1,), 3)]
    """
    acc: dict = {}
    for r, t, d in _normalise_updates(updates, "updates"):
        acc[(r, t)] = acc.get((r, t), 0) + d
    return [(r, t, d) for (r, t), d in sorted(acc.items()) if d != 0]


def accumulate(updates, t):
    """The collection at time ``t``: the sum of the updates whose time is ``<= t``.

    Parameters
    ----------
    updates : iterable of (row, time, diff), or a pyarrow update table
        Times are ints or tuples with as many coordinates as ``t``.
    t : int or tuple of int
        The time to accumulate at (product partial order).

    Returns
    -------
    dict
        ``{row_tuple: count}`` with the rows whose accumulated count is non-zero.

    Examples
    --------
    >>> accumulate([((1,), (0, 1), 1), ((1,), (1, 0), 1), ((2,), (1, 1), 1)], (1, 0))
    {(1,): 1}
    """
    if isinstance(updates, (pa.Table, pa.RecordBatch)):
        updates = updates_from_table(updates)
    t = _as_time(t)
    acc: dict = {}
    for r, s, d in _normalise_updates(updates, "updates"):
        if len(s) != len(t):
            raise ValueError(
                f"cannot accumulate at time {t}: the updates have times with {len(s)} "
                f"coordinates (e.g. {s})")
        if _time_leq(s, t):
            acc[r] = acc.get(r, 0) + d
    return {r: c for r, c in acc.items() if c != 0}


def _time_columns(names):
    """Split update-table column names into (data names, time names); diff is last."""
    if len(names) < 3 or names[-1] != "diff":
        raise ValueError(
            "an update table needs data columns, then 'time' or 'time_0..time_{d-1}', "
            f"then 'diff'; got columns {names}")
    before = names[:-1]
    if before[-1] == "time":
        return before[:-1], before[-1:]
    m = _TIME_COL.match(before[-1])
    if m is None:
        raise ValueError(
            "an update table needs 'time' or 'time_0..time_{d-1}' just before 'diff'; "
            f"got columns {names}")
    d = int(m.group(1)) + 1
    expected = [f"time_{i}" for i in range(d)]
    if before[-d:] != expected or len(before) <= d:
        raise ValueError(
            f"an update table needs time columns {expected} after at least one data "
            f"column; got columns {names}")
    return before[:-d], before[-d:]


def updates_from_table(table):
    """Read an update table (data columns, time column(s), ``diff``) as a list.

    Parameters
    ----------
    table : pyarrow.Table or pyarrow.RecordBatch
        Columns as produced by ``Captured.updates()``: the data columns, ``time`` or
        ``time_0 .. time_{d-1}``, then ``diff``; all integer typed.

    Returns
    -------
    list of (tuple, tuple, int)
        ``(row, time, diff)`` in table order (not consolidated).
    """
    names = list(table.schema.names)
    data_names, time_names = _time_columns(names)
    # Columns are read by position: a data column may itself be called "count" or
    # "time" (the output of ``count()``), so names need not be unique.
    cols = [table.column(i).to_pylist() for i in range(len(names))]
    nd, nt = len(data_names), len(time_names)
    out = []
    for i in range(table.num_rows):
        row = tuple(cols[c][i] for c in range(nd))
        time = tuple(cols[nd + c][i] for c in range(nt))
        out.append((row, time, cols[-1][i]))
    return out


def updates_table(updates, names, *, time_dims=None):
    """Build an Arrow update table from literal ``(row, time, diff)`` triples.

    Parameters
    ----------
    updates : iterable of (row, time, diff)
        Rows with ``len(names)`` values; times ints or tuples.
    names : list of str
        The data column names.
    time_dims : int, optional
        Number of time coordinates; inferred from the first update when omitted
        (required when ``updates`` is empty).

    Returns
    -------
    pyarrow.Table
        int64 columns ``names...``, ``time`` (one dimension) or
        ``time_0 .. time_{d-1}``, and ``diff``, in the given order (not consolidated).

    Examples
    --------
    >>> updates_table([((1, 2), 0, 1)], ["src", "dst"]).column_names
    ['src', 'dst', 'time', 'diff']
    """
    ups = _normalise_updates(list(updates), "updates")
    if time_dims is None:
        if not ups:
            raise ValueError("updates_table: pass time_dims when updates is empty")
        time_dims = len(ups[0][1])
    for r, t, _ in ups:
        if len(r) != len(names):
            raise ValueError(f"row {r} has {len(r)} values but names are {list(names)}")
        if len(t) != time_dims:
            raise ValueError(f"time {t} does not have time_dims={time_dims} coordinates")
    time_names = ["time"] if time_dims == 1 else [f"time_{i}" for i in range(time_dims)]
    arrays = [np.array([r[c] for r, _, _ in ups], dtype=np.int64) for c in range(len(names))]
    arrays += [np.array([t[c] for _, t, _ in ups], dtype=np.int64) for c in range(time_dims)]
    arrays.append(np.array([d for _, _, d in ups], dtype=np.int64))
    return pa.table(dict(zip(list(names) + time_names + ["diff"], arrays)))


# ------------------------------------------------------------------------- collections


def collection_from_table(table):
    """Read a collection table (data columns, then ``count``) as ``{row: count}``.

    The last column holds the counts. It is named ``count``, or ``count`` with a suffix
    (``count_``) when a data column is already called ``count``, as for the output of
    ``Collection.count()``. Duplicate rows are summed and zero counts dropped.
    """
    names = list(table.schema.names)
    if not names or not names[-1].startswith("count"):
        raise ValueError(
            f"a collection table needs a last column named 'count'; got columns {names}")
    # By position: the output of ``count()`` has a data column named "count" too.
    cols = [table.column(i).to_pylist() for i in range(len(names))]
    out: dict = {}
    for i in range(table.num_rows):
        row = tuple(_as_int(cols[c][i], f"column {names[c]!r}") for c in range(len(names) - 1))
        out[row] = out.get(row, 0) + _as_int(cols[-1][i], "count")
    return {r: c for r, c in out.items() if c != 0}


def _as_collection(x, what):
    if isinstance(x, (pa.Table, pa.RecordBatch)):
        return collection_from_table(x)
    if isinstance(x, Mapping):
        out: dict = {}
        for row, c in x.items():
            r = _as_row(row)
            out[r] = out.get(r, 0) + _as_int(c, f"count of row {row!r} in {what}")
        return {r: c for r, c in out.items() if c != 0}
    raise TypeError(
        f"{what} must be a pyarrow Table with a 'count' column or a dict "
        f"{{row: count}}, got {type(x).__name__}")


def _describe_differences(actual, expected, key_fmt):
    keys = sorted(set(actual) | set(expected))
    diffs = [k for k in keys if actual.get(k, 0) != expected.get(k, 0)]
    lines = [f"  {key_fmt(k)}: actual {actual.get(k, 0)}, expected {expected.get(k, 0)}"
             for k in diffs[:_MAX_SHOWN]]
    if len(diffs) > _MAX_SHOWN:
        lines.append(f"  ... and {len(diffs) - _MAX_SHOWN} more")
    return diffs, lines


def assert_collection_equal(actual, expected):
    """Assert that two collections hold the same rows with the same counts.

    Parameters
    ----------
    actual, expected : pyarrow.Table or dict
        A table whose last column is ``count`` (as returned by ``Captured.at``), or a
        ``dict {row: count}`` (a bare int key is a one-column row). Rows with count 0 are
        ignored and duplicate rows are summed.

    Raises
    ------
    AssertionError
        Listing the first differing rows with both counts.

    Examples
    --------
    >>> assert_collection_equal({(1, 2): 1, (3, 4): 0}, {(1, 2): 1})
    """
    a = _as_collection(actual, "actual")
    e = _as_collection(expected, "expected")
    diffs, lines = _describe_differences(a, e, lambda r: f"row {r}")
    if diffs:
        raise AssertionError(
            f"collections differ in {len(diffs)} row(s) (actual has {len(a)} rows, "
            f"expected {len(e)}):\n" + "\n".join(lines))


def assert_updates_equal(actual, expected_updates):
    """Assert that two update streams are equal after consolidation.

    Parameters
    ----------
    actual : Captured, pyarrow.Table, or iterable of (row, time, diff)
        A ``Captured`` (its ``updates()`` are used), an update table, or literal updates.
    expected_updates : iterable of (row, time, diff)
        ``row`` a tuple (or one int), ``time`` an int or a tuple.

    Both sides are consolidated first: diffs of equal ``(row, time)`` are summed and
    zeros dropped, so only the net change at each time matters.

    Raises
    ------
    AssertionError
        Listing the first differing ``(row, time)`` pairs with both diffs.

    Examples
    --------
    >>> assert_updates_equal([((1,), 0, 2), ((1,), 0, -1)], [((1,), 0, 1)])
    """
    if hasattr(actual, "updates") and callable(actual.updates):
        actual = actual.updates()
    if isinstance(actual, (pa.Table, pa.RecordBatch)):
        actual = updates_from_table(actual)
    a = {(r, t): d for r, t, d in consolidate_updates(actual)}
    e = {(r, t): d for r, t, d in consolidate_updates(expected_updates)}
    dims_a = {len(t) for _, t in a}
    dims_e = {len(t) for _, t in e}
    if dims_a and dims_e and dims_a != dims_e:
        raise AssertionError(
            f"time dimensions differ: actual times have {sorted(dims_a)} coordinates, "
            f"expected {sorted(dims_e)}")
    diffs, lines = _describe_differences(
        a, e, lambda k: f"row {k[0]} at time {k[1] if len(k[1]) > 1 else k[1][0]}")
    if diffs:
        raise AssertionError(
            f"update streams differ at {len(diffs)} (row, time) pair(s):\n" + "\n".join(lines))


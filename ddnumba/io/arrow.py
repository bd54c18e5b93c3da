"""Arrow boundary: update batches <-> ``pyarrow.Table``.

Output tables carry the collection's columns, then the time (``time`` for one
coordinate, ``time_0 .. time_{d-1}`` for several), then ``diff``. Accumulated
collections carry the columns and ``count``. Columns are int64; decoding of other
Arrow types (strings, floats, dates) happens in :mod:`ddnumba.io.encoding`.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa

__all__ = ["time_names", "updates_to_table", "collection_table", "count_name"]


def time_names(dims):
    """The time column names for ``dims`` coordinates: ``time``, or ``time_0..``."""
    return ["time"] if dims == 1 else [f"time_{i}" for i in range(dims)]


def updates_to_table(upd, names):
    """An :class:`~ddnumba.updates.Updates` as a table: columns, time(s), diff. A time
    or diff column whose name a data column already has gets underscores appended
    (``time_``, ``diff_``), as :func:`count_name` does."""
    arrays = [pa.array(np.ascontiguousarray(upd.data[:, i])) for i in range(len(names))]
    arrays += [pa.array(np.ascontiguousarray(upd.times[:, i])) for i in range(upd.dims)]
    arrays.append(pa.array(np.ascontiguousarray(upd.diffs)))
    taken = set(names)
    extra = []
    for n in time_names(upd.dims) + ["diff"]:
        while n in taken:
            n += "_"
        taken.add(n)
        extra.append(n)
    return pa.table(arrays, names=list(names) + extra)


def count_name(names):
    """Name of the multiplicity column of an accumulated collection: ``count``, or
    ``count_`` (``count__``, ...) when a data column is already called that."""
    name = "count"
    while name in names:
        name += "_"
    return name


def collection_table(data, counts, names):
    """An accumulated collection as a table: columns and ``count`` (see count_name)."""
    arrays = [pa.array(np.ascontiguousarray(data[:, i])) for i in range(len(names))]
    arrays.append(pa.array(np.ascontiguousarray(counts)))
    return pa.table(arrays, names=list(names) + [count_name(names)])

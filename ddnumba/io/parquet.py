"""Parquet change streams: read update batches in time order, write output changes.

A *change stream* on disk is a Parquet file, or a directory of them (a Spark output
directory: ``part-*.parquet`` files; names starting with ``_`` or ``.``, such as
``_SUCCESS`` and ``.crc`` files, and such directories, e.g. ``_temporary``, are ignored).
Each row is one update: the data columns, the time (``time`` for one coordinate,
``time_0 .. time_{d-1}`` for ``d``) and ``diff`` (+1 when the column is absent).

Reading (:func:`read_changes`) is bounded in memory: it plans from the files' footers
(schemas and row-group statistics, no data), then yields one :class:`ChangeBatch` per
Arrow record batch, encoding the data columns to int64 codes with the dataflow's
:class:`~ddnumba.io.encoding.Encoder` (int64 columns are zero-copy, read-only views of
Arrow buffers). Files are read in *path order* (names compared with numbers as numbers,
so ``part-2`` precedes ``part-10`` and ``batch=9/`` precedes ``batch=10/``).

Time order. Within a file, rows may come in any order (one batch may hold many times).
Across files, times must not go backwards: with ``order="check"`` (the default) a file
whose earliest time (on ``time``, or ``time_0`` with several coordinates) is before the
latest time of an earlier file is an error naming both files; ``order="sort"`` reorders
the files by their time ranges first (and still rejects files whose ranges overlap);
``order="any"`` accepts any order. Each batch carries a *frontier*, a time that every
later batch's times are ``>=``: the coordinate-wise minimum of the row-group statistics
still unread. It is always safe, whatever the order; in time order it advances at every
row-group boundary, so :func:`feed` completes times as it goes.

Writing (:func:`write_changes`) decodes int64 codes back to the input types, sorts the
updates by time and writes a file Spark reads with the original column names and types,
plus ``time``/``time_i`` and ``diff``. The file is written under a hidden temporary name
and renamed into place, so readers never see a half-written file.

Every error about a file names the file, and the column when there is one.
"""
from __future__ import annotations

import os
import re
import sys
import time as _time
import uuid
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ddnumba.io.encoding import (Encoder, NullValueError, UnsupportedTypeError,
                                 encoder_for, kind_of)

__all__ = [
    "ChangeBatch",
    "ChangeFileError",
    "ChangeReader",
    "ChangeTypeError",
    "TimeOrderError",
    "feed",
    "feed_all",
    "list_files",
    "read_changes",
    "write_changes",
]

_I64 = np.int64
_I64_MAX = np.iinfo(np.int64).max
DEFAULT_BATCH_ROWS = 1 << 20


# ------------------------------------------------------------------------ errors
class ChangeFileError(ValueError):
    """A change file cannot be used; ``path`` and ``column`` say where."""

    def __init__(self, message, *, path=None, column=None):
        super().__init__(message)
        self.path = path
        self.column = column


class ChangeTypeError(ChangeFileError, TypeError):
    """A column of a change file has a type that cannot be used there."""


class TimeOrderError(ChangeFileError):
    """Times go backwards across the files of a change stream."""


def _fail(cls, path, column, message):
    where = f"{path}: column {column!r}: " if column is not None else f"{path}: "
    return cls(where + message, path=path, column=column)


# ------------------------------------------------------------------------ files
# numbers, with a sign after '=' (a partition directory part=-2 sorts before part=-1)
_DIGITS = re.compile(r"((?<==)-\d+|\d+)")


def _natural_key(s):
    return [(0, int(p), "") if p.lstrip("-").isdigit() else (1, 0, p)
            for p in _DIGITS.split(s)]


def _hidden(name):
    return name.startswith(("_", "."))


def list_files(path_or_paths) -> list[str]:
    """The data files of a change stream, in read order.

    A directory is searched recursively, following links to directories; hidden
    names (``_*``, ``.*``) are skipped and the rest sorted by relative path with
    numbers compared as numbers (``part=-2`` before ``part=-1``). Several paths are
    concatenated in the order given. Raises ``FileNotFoundError`` for a missing path
    and :class:`ChangeFileError` when no file is found, unless the directory is a
    Spark job's output (it holds ``_SUCCESS``): an empty change stream, no files.
    """
    return [f for f, _ in _list_files(path_or_paths)]


def _list_files(path_or_paths):
    """``(file, stream root)`` pairs: :func:`list_files` with the directory each file
    was found under (its partition directories ``name=value/`` lie below it)."""
    paths = ([path_or_paths] if isinstance(path_or_paths, (str, os.PathLike))
             else list(path_or_paths))
    if not paths:
        raise ChangeFileError("no paths given")
    out = []
    for p in paths:
        p = os.fspath(p)
        if os.path.isfile(p):
            out.append((p, None))
            continue
        if not os.path.isdir(p):
            raise FileNotFoundError(f"{p}: no such file or directory")
        found = []
        seen = {os.path.realpath(p)}
        for root, dirs, files in os.walk(p, followlinks=True):
            # (a link back up the tree is walked once, not for ever)
            keep = []
            for d in dirs:
                real = os.path.realpath(os.path.join(root, d))
                if not _hidden(d) and real not in seen:
                    seen.add(real)
                    keep.append(d)
            dirs[:] = keep
            found += [os.path.join(root, f) for f in files if not _hidden(f)]
        if not found:
            if os.path.exists(os.path.join(p, "_SUCCESS")):
                continue          # a Spark job that wrote no rows: nothing to read
            raise ChangeFileError(
                f"{p}: no Parquet files in this directory (an empty change stream; "
                f"files whose names start with '_' or '.' are ignored)", path=p)
        found.sort(key=lambda f: _natural_key(os.path.relpath(f, p)))
        out += [(f, p) for f in found]
    return out


# ------------------------------------------------------------------------ batches
@dataclass
class ChangeBatch:
    """One batch of updates read from a change file.

    Attributes
    ----------
    names : list of str
        Column names (the input's names when columns were mapped).
    columns : tuple of numpy.ndarray
        One int64 code array per column (possibly read-only views of Arrow buffers).
    times : numpy.ndarray
        ``int64[n, d]`` time of each row.
    diffs : numpy.ndarray
        ``int64[n]`` multiplicities.
    frontier : numpy.ndarray or None
        ``int64[d]``: every later batch of the stream has times ``>=`` this; ``None``
        after the last batch.
    path : str
        The file the rows came from.
    """

    names: list
    columns: tuple
    times: np.ndarray
    diffs: np.ndarray
    frontier: np.ndarray | None
    path: str

    def __len__(self):
        return len(self.diffs)

    @property
    def data(self) -> np.ndarray:
        """The columns as one ``int64[n, arity]`` matrix (a copy)."""
        out = np.empty((len(self), len(self.columns)), _I64)
        for i, c in enumerate(self.columns):
            out[:, i] = c
        return out

    def to_table(self) -> pa.Table:
        """The batch as an int64 table: columns, ``time``/``time_i``, ``diff``."""
        d = self.times.shape[1]
        tnames = ["time"] if d == 1 else [f"time_{i}" for i in range(d)]
        arrays = [pa.array(np.asarray(c)) for c in self.columns]
        arrays += [pa.array(np.ascontiguousarray(self.times[:, i])) for i in range(d)]
        arrays.append(pa.array(self.diffs))
        return pa.table(arrays, names=list(self.names) + tnames + ["diff"])


@dataclass
class _RowGroup:
    index: int
    rows: int
    tmin: np.ndarray     # int64[d], coordinate-wise minimum time
    tmax: np.ndarray     # int64[d]


@dataclass
class _FilePlan:
    path: str
    columns: list        # file column names, in output order
    times: list          # file time column names
    diff: str | None     # file diff column name, or None for +1
    int96: set           # columns stored as INT96 (Spark's legacy timestamps)
    dictionary: list     # string columns read as dictionary arrays
    groups: list
    rows: int
    hive: dict = None    # partition columns from the path: name -> pyarrow scalar


def _not_parquet(path):
    """True when the file has 4 bytes or more and does not start with Parquet's magic
    ``PAR1`` (a shorter one may be a Parquet file cut short)."""
    try:
        with open(path, "rb") as f:
            head = f.read(4)
    except OSError:
        return False
    return len(head) == 4 and head != b"PAR1"


def _thrift_i32(buf, i):
    """A zigzag varint (Thrift's compact protocol) at ``buf[i]``: (value, next index)."""
    v = 0
    shift = 0
    while True:
        if i >= len(buf) or shift > 35:
            raise ValueError("truncated varint")
        b = buf[i]
        i += 1
        v |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return (v >> 1) ^ -(v & 1), i


def _dictionary_page(buf):
    """``(uncompressed size, entries)`` of a dictionary page, from its header (a Thrift
    compact ``PageHeader``: i32 fields 1-4, then field 7, a ``DictionaryPageHeader``
    whose first field is its number of entries). ValueError for anything else."""
    i = 0
    fid = 0
    sizes = {}
    while i < len(buf):
        h = buf[i]
        i += 1
        delta, typ = h >> 4, h & 0x0F
        if h == 0 or delta == 0:
            break
        fid += delta
        if typ == 5:                                   # i32
            sizes[fid], i = _thrift_i32(buf, i)
        elif typ == 12 and fid == 7 and i < len(buf) and buf[i] == 0x15:
            entries, _ = _thrift_i32(buf, i + 1)       # field 1, i32
            if sizes.get(1) != 2 or 2 not in sizes:    # type DICTIONARY_PAGE
                break
            return sizes[2], entries
        else:
            break
    raise ValueError("not a dictionary page header")


def _read_as_dictionary(path, md, col):
    """Whether to read string column ``col`` (a leaf index) of a file as a dictionary
    array: yes when its pages are dictionary-encoded throughout. Writers fall back to
    plain pages once a column chunk's dictionary grows past a limit (1 MiB for Arrow
    and Spark), as with many distinct values; reading those as a dictionary makes Arrow
    hash every value, several times slower than reading the strings (the encoder
    interns them in compiled code anyway). Pages of indices take at most their bit
    width (from the dictionary's size) per value, plain ones take at least 4 bytes per
    value, so the chunk's size past its dictionary page tells them apart (small chunks
    read fast either way). When a header cannot be read, the column is read as a
    dictionary (either way reads the same values)."""
    try:
        with open(path, "rb") as f:
            for k in range(md.num_row_groups):
                cc = md.row_group(k).column(col)
                if cc.num_values == 0:
                    continue
                if not cc.has_dictionary_page:
                    return False
                f.seek(cc.dictionary_page_offset)
                size, entries = _dictionary_page(f.read(64))
                bits = max(1, int(entries - 1).bit_length())
                # (1 KiB for the pages' headers)
                if cc.total_uncompressed_size - size > cc.num_values * (bits / 8 + 1) \
                        + 1024:
                    return False
    except (OSError, ValueError, TypeError):
        return True
    return True


def _open(path, dictionary=()):
    try:
        return pq.ParquetFile(path, read_dictionary=list(dictionary) or None,
                              coerce_int96_timestamp_unit="us")
    except (pa.ArrowException, OSError) as e:
        hint = "is it truncated or corrupt?"
        if _not_parquet(path):
            # Some other file in a stream's directory (notes, a checksum): say how to
            # keep it there rather than skip it, since skipping could drop a batch.
            hint = ("it is not Parquet at all; move it out of the stream's directory, "
                    "or rename it to start with '_' or '.' (such files are ignored)")
        raise _fail(ChangeFileError, path, None,
                    f"not a readable Parquet file ({e}); {hint}"
                    ) from None


def _is_int(typ):
    return pa.types.is_integer(typ)


def _resolve_times(path, names, time, dims):
    if time is not None:
        tcols = [time] if isinstance(time, str) else list(time)
        if len(tcols) != dims:
            raise ValueError(f"read_changes: {len(tcols)} time column(s) {tcols} given "
                             f"for time_dims={dims}")
    elif dims == 1:
        tcols = ["time"] if "time" in names else ["time_0"]
    else:
        tcols = [f"time_{i}" for i in range(dims)]
    present = [c for c in names if c == "time" or re.fullmatch(r"time_\d+", c)]
    extra = sorted(set(present) - set(tcols))
    if time is None and extra:
        hint = (f"pass time_dims={len(present)}" if len(present) != dims else
                f"with time_dims={dims} the time columns are {tcols}")
        raise _fail(ChangeFileError, path, extra[0],
                    f"the file has time column(s) {present} but time_dims={dims} "
                    f"({hint})")
    return tcols


class ChangeReader:
    """An iterable over the :class:`ChangeBatch` es of a change stream (see
    :func:`read_changes`). Planning (footers, schemas, statistics, order checks)
    happens when it is created, so errors surface before any data is read."""

    def __init__(self, path_or_paths, columns=None, *, time_dims=1, encoder=None,
                 diff="diff", time=None, default_time=None, order="check",
                 batch_rows=DEFAULT_BATCH_ROWS):
        if order not in ("check", "sort", "any"):
            raise ValueError(f"read_changes: order must be 'check', 'sort' or 'any', "
                             f"got {order!r}")
        dims = int(time_dims)
        if dims < 1:
            raise ValueError(f"read_changes: time_dims must be >= 1, got {time_dims}")
        if int(batch_rows) < 1:
            raise ValueError(f"read_changes: batch_rows must be >= 1, got {batch_rows}")
        self.time_dims = dims
        self.encoder = encoder if encoder is not None else Encoder()
        self.batch_rows = int(batch_rows)
        self.default_time = None
        if default_time is not None:
            t = np.asarray(default_time, dtype=_I64).reshape(-1)
            if t.shape[0] != dims:
                raise ValueError(f"read_changes: default_time {default_time!r} has "
                                 f"{t.shape[0]} coordinate(s), expected {dims}")
            self.default_time = t
        if isinstance(columns, dict):
            self.names = [str(k) for k in columns]
            wanted = [str(v) for v in columns.values()]
        elif columns is None:
            self.names = wanted = None
        else:
            cols = [columns] if isinstance(columns, str) else list(columns)
            self.names = wanted = [str(c) for c in cols]
        listed = _list_files(path_or_paths)
        self.files = [f for f, _ in listed]
        self._time_arg = time
        self._diff_arg = diff
        self._hive = _hive_columns(listed)
        if not listed:
            # A Spark job's output without rows: an empty stream, if its columns
            # are known.
            if self.names is None:
                raise ChangeFileError(
                    f"{path_or_paths}: an empty change stream (a Spark job's output "
                    f"with no rows): no file to take the columns from", path=None)
            self.plans = []
            self.num_rows = 0
            self.partition_columns = []
            return
        first = self._plan(self.files[0], wanted)
        #: partition columns of the first file (``name=value/`` directories), which
        #: may be asked for by name
        self.partition_columns = [c for c in self._hive.get(self.files[0], {})]
        if self.names is None:
            # Columns found in the first file are required of every other file.
            self.names = wanted = list(first.columns)
        self.plans = [first] + [self._plan(p, wanted) for p in self.files[1:]]
        self._order(order)
        self.num_rows = sum(p.rows for p in self.plans)

    # -- planning --------------------------------------------------------------------
    def _plan(self, path, wanted) -> _FilePlan:
        with _open(path) as pf:
            schema = pf.schema_arrow
            # Partition columns (Spark keeps their values in directory names
            # name=value/, not in the files) follow the file's own columns.
            hive = {c: v for c, v in self._hive.get(path, {}).items()
                    if c not in schema.names}
            for c, v in hive.items():
                schema = schema.append(pa.field(c, v.type))
            names = schema.names
            dims = self.time_dims
            if self.default_time is None:
                tcols = _resolve_times(path, names, self._time_arg, dims)
                for c in tcols:
                    if c not in names:
                        raise _fail(ChangeFileError, path, c,
                                    f"missing time column (the file has columns "
                                    f"{names}; pass time= to name it, or default_time=)")
            else:
                tcols = []
            dcol = self._diff_arg if self._diff_arg in names else None
            if wanted is None:
                # Every column that is not a time or diff column, from the first file
                # on; partition columns only when asked for by name (a stream of
                # batch=K/ directories is a layout, not a column of the changes).
                skip = set(tcols) | {dcol} | set(hive) | {
                    c for c in names if c == "time" or re.fullmatch(r"time_\d+", c)}
                wanted = [c for c in names if c not in skip]
                if not wanted:
                    raise _fail(ChangeFileError, path, None,
                                f"no data columns (the file has columns {names})")
            for c in wanted:
                if c not in names:
                    raise _fail(ChangeFileError, path, c,
                                f"missing column (the file has columns {names})")
            for c in tcols + ([dcol] if dcol else []):
                typ = schema.field(c).type
                if not _is_int(typ):
                    role = "diff" if c == dcol else "time"
                    raise _fail(ChangeTypeError, path, c,
                                f"{role} column has type {typ}; {role}s must be integers")
            for c in tcols + ([dcol] if dcol else []):
                if c in hive:
                    raise _fail(ChangeFileError, path, c,
                                f"the {'diff' if c == dcol else 'time'} column is only "
                                f"in the directory name ({c}=...): every file needs "
                                f"its own (do not partition by it)")
            pschema = pf.schema
            leaf = {pschema.column(i).path: i for i in range(len(pschema))}
            int96 = {c for c in wanted if c in leaf
                     and pschema.column(leaf[c]).physical_type == "INT96"}
            for c in wanted:
                try:
                    kind_of(schema.field(c).type)
                except UnsupportedTypeError as e:
                    raise _fail(ChangeTypeError, path, c, str(e)) from None
            md = pf.metadata
            dictionary = [c for c in wanted if kind_of(schema.field(c).type) == "string"
                          and (c not in leaf or _read_as_dictionary(path, md, leaf[c]))]
            groups = []
            for k in range(md.num_row_groups):
                rg = md.row_group(k)
                if rg.num_rows == 0:
                    continue
                tmin, tmax = self._group_times(pf, path, rg, k, tcols, leaf)
                groups.append(_RowGroup(k, rg.num_rows, tmin, tmax))
            rows = sum(g.rows for g in groups)
        return _FilePlan(path, list(wanted), tcols, dcol, int96,
                         [c for c in dictionary if c not in hive], groups, rows,
                         {c: v for c, v in hive.items() if c in wanted})

    def _group_times(self, pf, path, rg, k, tcols, leaf):
        dims = self.time_dims
        if not tcols:
            return self.default_time.copy(), self.default_time.copy()
        tmin = np.empty(dims, _I64)
        tmax = np.empty(dims, _I64)
        for i, c in enumerate(tcols):
            st = rg.column(leaf[c]).statistics if c in leaf else None
            if st is not None and st.has_min_max and st.null_count == 0:
                lo, hi = int(st.min), int(st.max)
            else:
                # No usable statistics: read just this column of this row group.
                try:
                    col = pf.read_row_group(k, columns=[c]).column(0)
                except (pa.ArrowException, OSError) as e:
                    raise _fail(ChangeFileError, path, c,
                                f"cannot read row group {k} ({e}); is the file "
                                f"truncated or corrupt?") from None
                if col.null_count:
                    raise _fail(NullError, path, c,
                                f"{col.null_count} null time(s); every update needs a time")
                v = col.to_numpy()
                lo, hi = int(v.min()), int(v.max())
            if lo < 0:
                raise _fail(ChangeFileError, path, c,
                            f"negative time {lo}; times are non-negative")
            if hi > _I64_MAX:
                raise _fail(ChangeFileError, path, c, f"time {hi} does not fit in int64")
            tmin[i], tmax[i] = lo, hi
        return tmin, tmax

    def _order(self, order):
        if order == "any":
            return
        spans = [(p, min(g.tmin[0] for g in p.groups), max(g.tmax[0] for g in p.groups))
                 for p in self.plans if p.groups]
        if order == "sort":
            keyed = sorted(range(len(spans)), key=lambda i: (spans[i][1], spans[i][2], i))
            spans = [spans[i] for i in keyed]
            order_idx = {id(s[0]): j for j, s in enumerate(spans)}
            # Files without rows have no time range; they keep their place up front.
            self.plans.sort(key=lambda p: order_idx.get(id(p), -1))
        latest = None
        for plan, lo, hi in spans:
            if latest is not None and lo < latest[1]:
                col = plan.times[0] if plan.times else "time"
                how = ("their time ranges overlap; files are read one after another, so "
                       "pass order='any' (the frontier then waits for the slowest file)"
                       if order == "sort" else
                       "files are read in path order: write the changes sorted by time "
                       "(e.g. df.orderBy('time') or one directory per batch), or pass "
                       "order='sort' or order='any'")
                raise _fail(TimeOrderError, plan.path, col,
                            f"times go backwards: earliest time {int(lo)} is before time "
                            f"{int(latest[1])} in {latest[0]}; {how}")
            if latest is None or hi > latest[1]:
                latest = (plan.path, hi)

    # -- reading -----------------------------------------------------------------------
    def __iter__(self):
        groups = [g for p in self.plans for g in p.groups]
        dims = self.time_dims
        # suffix[k] = coordinate-wise minimum time of groups k.. (the frontier before k).
        suffix = np.empty((len(groups) + 1, dims), _I64)
        suffix[-1] = _I64_MAX
        for k in range(len(groups) - 1, -1, -1):
            suffix[k] = np.minimum(suffix[k + 1], groups[k].tmin)
        k = 0
        for plan in self.plans:
            if not plan.groups:
                continue
            with _open(plan.path, plan.dictionary) as pf:
                for g in plan.groups:
                    after = suffix[k + 1] if k + 1 < len(groups) else None
                    within = (np.minimum(g.tmin, after) if after is not None
                              else g.tmin)
                    batches = self._batches(pf, plan, g)
                    pending = next(batches, None)
                    while pending is not None:
                        nxt = next(batches, None)
                        frontier = (within if nxt is not None else after)
                        yield self._convert(plan, pending,
                                            None if frontier is None else frontier.copy())
                        pending = nxt
                    k += 1

    def _batches(self, pf, plan, g):
        hive = plan.hive or {}
        cols = list(dict.fromkeys([c for c in plan.columns if c not in hive] + plan.times
                                  + ([plan.diff] if plan.diff else [])))
        try:
            for b in pf.iter_batches(batch_size=self.batch_rows, row_groups=[g.index],
                                     columns=cols, use_threads=True):
                if b.num_rows:
                    yield b
        except (pa.ArrowException, OSError) as e:
            raise _fail(ChangeFileError, plan.path, None,
                        f"cannot read row group {g.index} ({e}); is the file truncated "
                        f"or corrupt?") from None

    def _convert(self, plan, batch, frontier) -> ChangeBatch:
        path = plan.path
        n = batch.num_rows
        cols = []
        hive = plan.hive or {}
        for name, c in zip(self.names, plan.columns):
            if c in hive:
                v = hive[c]
                if not v.is_valid:
                    raise _fail(NullError, path, c, f"{n} null(s) (the partition "
                                f"directory {c}={_HIVE_NULL})")
                # one value for the file's rows: a dictionary of one entry
                arr = pa.DictionaryArray.from_arrays(
                    pa.array(np.zeros(n, np.int32)), pa.array([v.as_py()], v.type))
                if not pa.types.is_string(v.type):
                    arr = arr.dictionary_decode()
            else:
                arr = batch.column(c)
            if c in plan.int96:
                # Spark's INT96 timestamps are instants (TimestampType): keep them as UTC
                # microseconds so they are written back as the same Spark type.
                arr = arr.cast(pa.timestamp("us", tz="UTC"))
            where = f"{path}: column {c!r}"
            try:
                # Types are recorded under the input's name: outputs derive their column
                # names from it, and decode by it.
                arr = self.encoder.conform(name, arr, source=where)
                cols.append(self.encoder.encode(arr, source=where))
            except NullValueError as e:
                raise NullError(str(e), path=path, column=c) from None
            except UnsupportedTypeError as e:
                raise ChangeTypeError(str(e), path=path, column=c) from None
            except OverflowError as e:
                raise ChangeFileError(str(e), path=path, column=c) from None
        if plan.times:
            tcols = [self._int_column(batch.column(c), path, c, "time") for c in plan.times]
            if len(tcols) == 1:
                times = tcols[0].reshape(-1, 1)
            else:
                times = np.empty((n, len(tcols)), _I64)
                for i, c in enumerate(tcols):
                    times[:, i] = c
        else:
            times = np.broadcast_to(self.default_time, (n, self.time_dims))
        if plan.diff:
            diffs = self._int_column(batch.column(plan.diff), path, plan.diff, "diff")
        else:
            diffs = np.ones(n, _I64)
        return ChangeBatch(list(self.names), tuple(cols), times, diffs, frontier, path)

    @staticmethod
    def _int_column(arr, path, name, role):
        if arr.null_count:
            raise _fail(NullError, path, name,
                        f"{arr.null_count} null {role}(s); every update needs a {role}")
        if pa.types.is_int64(arr.type):
            return arr.to_numpy(zero_copy_only=True)
        v = arr.to_numpy(zero_copy_only=False)
        if v.dtype.kind == "u" and v.size and v.max() > _I64_MAX:
            raise _fail(ChangeFileError, path, name,
                        f"{role} {int(v.max())} does not fit in int64")
        return v.astype(_I64)


_HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"


def _hive_columns(listed):
    """``{file: {column: pyarrow scalar}}`` for the partition directories
    (``name=value/``) between each file and its stream's root, as Spark writes them.
    A column is int64 when every value of it in the stream is an integer, else a
    string (values are URL-unquoted; Spark's null directory is a null)."""
    from urllib.parse import unquote
    raw = {}
    for f, root in listed:
        if root is None:
            continue
        parts = os.path.relpath(os.path.dirname(f), root).split(os.sep)
        vals = {}
        for part in parts:
            name, eq, value = part.partition("=")
            if eq and name:
                vals[unquote(name)] = None if value == _HIVE_NULL else unquote(value)
        if vals:
            raw[f] = vals
    kinds = {}
    for vals in raw.values():
        for c, v in vals.items():
            if v is not None and kinds.get(c, "int") == "int":
                try:
                    ok = -2**63 <= int(v) < 2**63 and re.fullmatch(r"-?\d+", v)
                except ValueError:
                    ok = False
                kinds[c] = "int" if ok else "string"
            kinds.setdefault(c, "int")
    return {f: {c: pa.scalar(None if v is None else (int(v) if kinds[c] == "int"
                                                      else v),
                             pa.int64() if kinds[c] == "int" else pa.string())
                for c, v in vals.items()}
            for f, vals in raw.items()}


class NullError(ChangeFileError, NullValueError):
    """A change file holds a null where a value is required."""


def read_changes(path_or_paths, columns=None, *, time_dims=1, encoder=None, diff="diff",
                 time=None, default_time=None, order="check",
                 batch_rows=DEFAULT_BATCH_ROWS) -> ChangeReader:
    """Read a Parquet change stream as update batches, in time order.

    Parameters
    ----------
    path_or_paths : str, os.PathLike or list of them
        A Parquet file, a directory of them (e.g. Spark's output), or several.
    columns : list of str, or dict of str to str, optional
        Data columns to read, by name, in the order wanted. A dict maps output names to
        file column names (``{"node": "id"}``). Default: every column of the first file
        that is not a time or ``diff`` column. A partition column (Spark's
        ``name=value/`` directories, whose values are not in the files) is read
        from the path when named here; ``.partition_columns`` lists them.
    time_dims : int
        Number of time coordinates: ``time`` (or ``time_0``) when 1, else
        ``time_0 .. time_{d-1}``.
    encoder : Encoder, optional
        Encodes non-integer columns; pass the dataflow's (:func:`encoder_for`) so codes
        agree with its other inputs. Default: a new one (``reader.encoder``).
    diff : str
        Name of the diff column; when a file lacks it every row has diff +1.
    time : str or list of str, optional
        Names of the time columns, overriding the defaults above.
    default_time : int or tuple, optional
        Time of every row, for files without time columns (snapshots).
    order : {"check", "sort", "any"}
        How files must relate in time (see the module docstring).
    batch_rows : int
        Maximum rows per batch (memory bound; batches never span row groups).

    Returns
    -------
    ChangeReader
        Iterable of :class:`ChangeBatch`; ``num_rows``, ``files`` and ``encoder`` describe
        it. Post: batches come in file order; each batch's ``frontier`` is ``<=`` every
        time of every later batch; the last batch has ``frontier=None``.

    Raises
    ------
    FileNotFoundError
        A path does not exist.
    ChangeFileError
        Empty directory, missing column, unreadable (corrupt, truncated) file, negative
        time, nulls (:class:`NullError`), wrong types (:class:`ChangeTypeError`), times
        going backwards across files (:class:`TimeOrderError`). The message names the
        file and the column.
    """
    return ChangeReader(path_or_paths, columns, time_dims=time_dims, encoder=encoder,
                        diff=diff, time=time, default_time=default_time, order=order,
                        batch_rows=batch_rows)


# ------------------------------------------------------------------------ writing
_PART = re.compile(r"^part-(\d+)")


def _as_table(data, new=False):
    from ddnumba.io.arrow import updates_to_table
    from ddnumba.operators.output import Captured
    if isinstance(data, Captured):
        if new:
            # peeked, taken only once the file is in place (a failed write loses
            # nothing: the next one writes these updates again)
            table = updates_to_table(data._node.peek_new(), data._node.names)
        else:
            table = data.updates()
        return table, encoder_for(data._node.df)
    if new:
        raise TypeError(f"write_changes: new=True reads a Captured output, not a "
                        f"{type(data).__name__}")
    if isinstance(data, pa.RecordBatch):
        return pa.Table.from_batches([data]), None
    if isinstance(data, pa.Table):
        return data, None
    raise TypeError(f"write_changes: expected a Captured output or a pyarrow Table, got "
                    f"{type(data).__name__}")


def _time_sorted(table):
    tnames = [c for c in table.column_names if c == "time" or re.fullmatch(r"time_\d+", c)]
    if not tnames or table.num_rows < 2:
        return table
    tnames.sort(key=_natural_key)
    keys = [table.column(c).to_numpy() for c in tnames]
    # lexsort's last key is the primary one; it is stable, so rows of one time keep
    # their (sorted, consolidated) order.
    order = np.lexsort(keys[::-1])
    if np.all(order[1:] >= order[:-1]):
        return table
    return table.take(pa.array(order))


def _target(path):
    """(directory, final file path) for a write to ``path``."""
    p = os.fspath(path)
    if p.endswith(".parquet") and not os.path.isdir(p):
        return os.path.dirname(os.path.abspath(p)), p, False
    os.makedirs(p, exist_ok=True)
    # The next part number: remembered per directory by the last write into it,
    # so that a long stream of writes does not list an ever larger directory each
    # time (8,000 parts: 5.5 ms a write, most of a ddnumba run's time). Trusted only
    # while the directory is unchanged since (its modification time), else listed.
    st = os.stat(p)
    known = _NEXT_PART.get((st.st_dev, st.st_ino))
    if known is not None and known[1] == st.st_mtime_ns and known[2] == p:
        k = known[0]
    else:
        taken = [int(m.group(1)) for f in os.listdir(p) if (m := _PART.match(f))]
        k = max(taken) + 1 if taken else 0
    return p, os.path.join(p, f"part-{k:05d}.parquet"), True


def _wrote_part(directory, final):
    """Remember the part number after ``final`` for the next write to ``directory``."""
    m = _PART.match(os.path.basename(final))
    st = os.stat(directory)
    _NEXT_PART[(st.st_dev, st.st_ino)] = (int(m.group(1)) + 1, st.st_mtime_ns, directory)


_NEXT_PART = {}


def write_changes(data, path, *, new=False, encoder=None, types=None, overwrite=False,
                  row_group_size=1 << 20) -> str | None:
    """Write output changes as Parquet that Spark (and :func:`read_changes`) reads.

    Parameters
    ----------
    data : Captured or pyarrow.Table
        A captured output (its consolidated ``updates()``) or an update table (int64
        columns, ``time``/``time_i``, ``diff``).
    path : str or os.PathLike
        A file path ending in ``.parquet``, or a directory: the table then becomes the
        next ``part-NNNNN.parquet`` in it (so repeated writes append to one dataset).
    new : bool
        Write only what a ``Captured`` output gained since the previous ``new=True``
        write or :meth:`~ddnumba.operators.output.Captured.new_updates` read (the two
        share one position; the first takes everything captured so far), and write
        nothing when that is empty. After every ``run()``, ``write_changes(out, dir,
        new=True)`` streams the output's changes into one dataset, each change once,
        at the cost of what is new.
    encoder : Encoder, optional
        Decodes codes back to the input types; default the dataflow's encoder for a
        ``Captured``, none for a table.
    types : dict of str to pyarrow.DataType, optional
        Arrow types of output columns whose names differ from the input columns they
        come from (e.g. ``{"root": pa.string()}``).
    overwrite : bool
        Replace an existing file (file paths only).
    row_group_size : int
        Rows per row group.

    Returns
    -------
    str or None
        The path of the file written; ``None`` when ``new=True`` found nothing new.

    Post: the file holds the rows sorted by time, with decoded columns, ``time`` or
    ``time_i`` and ``diff``; it appears atomically (a failed write leaves no file, not
    even a partial one, and an existing file is untouched).

    Raises
    ------
    FileExistsError
        The file path exists and ``overwrite`` is False.
    TypeError
        ``new=True`` with a table, or ``data`` neither a ``Captured`` nor a table.
    ValueError
        A ``timestamp[ns]`` value that needs nanoseconds (outputs are written in
        microseconds, Spark's unit).
    """
    table, default_encoder = _as_table(data, new)
    if new and table.num_rows == 0:
        return None
    encoder = encoder if encoder is not None else default_encoder
    if encoder is not None or types:
        table = (encoder or Encoder()).decode_table(table, types)
    table = _time_sorted(table)
    directory, final, appending = _target(path)
    if not appending and os.path.exists(final) and not overwrite:
        raise FileExistsError(f"{final}: file exists (pass overwrite=True to replace it)")
    os.makedirs(directory, exist_ok=True)
    tmp = os.path.join(directory, f".{os.path.basename(final)}.{uuid.uuid4().hex}.tmp")
    try:
        # Spark cannot read nanosecond timestamps: store microseconds, and fail rather
        # than truncate a value that needs nanoseconds.
        try:
            pq.write_table(table, tmp, row_group_size=row_group_size,
                           coerce_timestamps="us", allow_truncated_timestamps=False)
        except pa.ArrowInvalid as e:
            ns = [f.name for f in table.schema
                  if pa.types.is_timestamp(f.type) and f.type.unit == "ns"]
            if not ns or "lose data" not in str(e):
                raise
            raise ValueError(
                f"{final}: column(s) {ns}: a timestamp[ns] value needs nanoseconds, and "
                f"outputs are written in microseconds (Spark's unit); round the "
                f"column to microseconds before it is read ({e})") from None
        os.replace(tmp, final)
        if appending:
            _wrote_part(directory, final)
        if new:
            data._node.take_new()
    except BaseException:
        try:
            os.remove(tmp)
        except FileNotFoundError:
            pass
        raise
    return final


# ------------------------------------------------------------------------ feeding
class _Progress:
    """A progress bar: tqdm when installed, else a small line printer on stderr."""

    def __init__(self, total, desc, unit="rows", enabled=True):
        self.enabled = enabled
        self.total = total
        self.desc = desc
        self.unit = unit
        self.n = 0
        self._bar = None
        self._t0 = _time.perf_counter()
        self._last = 0.0
        if not enabled:
            return
        try:
            from tqdm import tqdm
            self._bar = tqdm(total=total, desc=desc, unit=unit,
                             unit_scale=bool(total and total >= 10_000),
                             file=sys.stderr, leave=True, dynamic_ncols=True)
        except ImportError:
            self._bar = None

    def update(self, n):
        if not self.enabled:
            return
        self.n += n
        if self._bar is not None:
            self._bar.update(n)
            return
        now = _time.perf_counter()
        # Redraw at most twice a second; close() draws the final state.
        if now - self._last >= 0.5:
            self._last = now
            self._print(now)

    def _print(self, now, end=""):
        el = now - self._t0
        rate = self.n / el if el > 0 else 0.0
        width = 30
        frac = min(1.0, self.n / self.total) if self.total else 0.0
        bar = "#" * int(frac * width) + "-" * (width - int(frac * width))
        total = f"/{self.total}" if self.total else ""
        sys.stderr.write(f"\r{self.desc}: [{bar}] {self.n}{total} {self.unit} "
                         f"{el:5.1f}s {rate:,.0f} {self.unit}/s{end}")
        sys.stderr.flush()

    def close(self):
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.close()
        else:
            self._print(_time.perf_counter(), end="\n")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _advance(handle, frontier):
    """Advance ``handle`` to ``frontier`` unless that would not move it forward."""
    cur = handle.frontier
    if cur.shape[0] == 1 and np.all(frontier >= cur[0]) and not np.array_equal(
            frontier, cur[0]):
        handle.advance_to(frontier)


def feed_all(sources, *, encoder=None, run=True, close=True, order="check",
             batch_rows=DEFAULT_BATCH_ROWS, progress=False, on_run=None) -> int:
    """Stream several change directories into their inputs, side by side.

    Parameters
    ----------
    sources : list of (InputHandle, path) or (InputHandle, path, columns)
        ``columns`` as in :func:`read_changes` (default: the input's column names).
        ``path`` may be a :class:`ChangeReader` from :func:`read_changes` (planned
        already), reading those columns with this encoder.
    encoder, order, batch_rows
        As in :func:`read_changes`; ``encoder`` defaults to the dataflow's
        (:func:`~ddnumba.io.encoding.encoder_for`).
    run : bool
        Run the dataflow after each round of batches (one batch from every source), so
        completed times are processed while reading and memory stays bounded.
    close : bool
        Close each input after its last batch; otherwise advance a one-coordinate input
        to one past its last time (several coordinates: to the last frontier).
    progress : bool
        Show a progress bar over rows.
    on_run : callable, optional
        Called with no arguments after each of those runs (``run=True``), e.g. to
        write what the outputs gained (``write_changes(out, dir, new=True)``) and
        compact them (or capture them with ``auto_compact=True``), so that outputs
        stay bounded too.

    Returns
    -------
    int
        Rows fed.
    """
    if on_run is not None and not run:
        raise ValueError("feed_all: on_run needs run=True (it is called after each run)")
    readers = []
    df = None
    for src in sources:
        # (path may also be a ChangeReader already planned, read as it is)
        handle, path, *rest = src
        cols = rest[0] if rest else None
        if cols is None:
            cols = list(handle.names)
        df = handle.df
        enc = encoder if encoder is not None else encoder_for(handle.df)
        if isinstance(path, ChangeReader):
            # planned already (its footers read once): taken as it is
            reader = path
            if list(cols) != list(reader.names) or reader.encoder is not enc:
                raise ValueError(f"feed: the reader given reads {reader.names}, not "
                                 f"{list(cols)} with this encoder")
        else:
            reader = read_changes(path, cols, time_dims=handle.dims, encoder=enc,
                                  order=order, batch_rows=batch_rows)
        if len(reader.names) != len(handle.names):
            raise ValueError(f"feed: {len(reader.names)} column(s) {reader.names} for "
                             f"input {handle.names}")
        readers.append((handle, reader))
    total = sum(r.num_rows for _, r in readers)
    fed = 0
    active = [(h, r, iter(r), None) for h, r in readers]
    with _Progress(total, "feed", enabled=progress) as bar:
        while active:
            still = []
            for handle, reader, it, last in active:
                batch = next(it, None)
                if batch is None:
                    if close:
                        handle.close()
                    elif last is not None and handle.dims == 1:
                        _advance(handle, last + 1)
                    continue
                try:
                    handle.update(*batch.columns, time=batch.times, diff=batch.diffs)
                except (ValueError, TypeError) as e:
                    raise ChangeFileError(f"{batch.path}: {e}", path=batch.path) from None
                hi = batch.times.max(axis=0) if len(batch) else None
                last = hi if last is None else (np.maximum(last, hi) if hi is not None
                                                else last)
                if batch.frontier is not None:
                    _advance(handle, batch.frontier)
                fed += len(batch)
                bar.update(len(batch))
                still.append((handle, reader, it, last))
            active = still
            if run and df is not None:
                df.run()
                if on_run is not None:
                    on_run()
    return fed


def feed(input_handle, path, columns=None, **kwargs) -> int:
    """Stream a change directory (or file) into one input: the one-line API.

    Reads ``path`` with :func:`read_changes` (columns default to the input's names, the
    encoder to the dataflow's), updates the input batch by batch, advances its frontier
    as times complete, runs the dataflow after each batch and closes the input at the
    end. Keyword options are those of :func:`feed_all`. Returns the number of rows fed.

    Raises ``FileNotFoundError`` for a missing path, :class:`ChangeFileError` (a
    ``ValueError`` naming the file and column) for a file that cannot be read or
    whose rows the input refuses, times going backwards across files included,
    ``NullError`` for nulls, and ``ValueError`` for ``on_run`` with ``run=False``;
    errors of the dataflow's ``run()`` pass through.

    Examples
    --------
    A degree count over a directory Spark wrote, written back for Spark::

        import ddnumba as dd
        from ddnumba.io.parquet import feed, write_changes

        df = dd.Dataflow()
        edges_in, edges = df.new_input(["src", "dst"])
        degree = edges.count().capture()
        feed(edges_in, "edges/")           # columns src, dst, time, diff
        write_changes(degree, "degree/")   # spark.read.parquet("degree/")

    Or streamed: each run's changes written as it completes (one part file each)::

        feed(edges_in, "edges/",
             on_run=lambda: write_changes(degree, "degree/", new=True))
    """
    return feed_all([(input_handle, path, columns)], **kwargs)

"""Encoding Arrow columns as int64 codes, and decoding them back.

The engine computes on int64 rows only. At the boundary every Arrow column is *encoded*:
an injective map from its values to int64 *codes*, chosen so that equal values get equal
codes in every input of a dataflow (joins compare codes) and so that decoding gives back
exactly the value (and Arrow type) that came in. One :class:`Encoder` per dataflow holds
the state of these maps (see :func:`encoder_for`):

=================================  ======================================================
Arrow type                         code
=================================  ======================================================
signed / unsigned integers         the value (uint64 above ``2**63 - 1`` is an error)
bool                               0 / 1
date32 / date64                    days / milliseconds since the epoch
timestamp, duration, time32/64     the stored count of the unit of the type first
                                   seen under the column's name (later batches in
                                   another unit are converted, exactly or not at all)
float64 / float32                  an *order-preserving* bit transform of the float64
                                   value: codes sort like the floats (``-inf < ... < -0.0
                                   = 0.0 < ... < inf < nan``); ``-0.0`` is stored as
                                   ``0.0`` and every NaN as one NaN, as Spark groups them
string / large_string              a dictionary code from the dataflow's string interner
binary / large_binary              a dictionary code from the dataflow's binary interner
dictionary<...>                    the code of the decoded value
=================================  ======================================================

Interned codes are assigned in order of first appearance and never change or get reused
for the life of the :class:`Encoder`, so a string seen in one input batch gets the same
code in every later batch and every other input. They are *not* order-preserving: use
them for equality (joins, grouping, distinct), not for ``min``/``max`` of strings.

Nulls have no code: encoding a column with nulls raises :class:`NullValueError` naming the
column (and the file, when the caller says where the data came from).

Decoding needs each output column's Arrow type. The encoder records the type of every
column it encodes under that column's name (:attr:`Encoder.types`); outputs whose column
names match an input column decode to its type, others are given explicitly
(``types={"root": pa.string()}``) or stay int64.
"""
from __future__ import annotations

import weakref

import numpy as np
import pyarrow as pa

from ddnumba.kernels import intern as _intern

__all__ = [
    "Encoder",
    "Interner",
    "NullValueError",
    "UnsupportedTypeError",
    "common_int_type",
    "encoder_for",
    "float_to_code",
    "code_to_float",
    "kind_of",
]

_I64 = np.int64
_I64_MAX = np.iinfo(np.int64).max
# Flipping the 63 value bits of a negative float's bit pattern reverses their order, so
# negative floats sort below positive ones and more negative below less negative when
# the bits are compared as signed int64.
_LOW63 = np.int64(0x7FFF_FFFF_FFFF_FFFF)
_CANONICAL_NAN = np.float64(np.nan)


class NullValueError(ValueError):
    """A column holds nulls, which have no int64 code."""


class UnsupportedTypeError(TypeError):
    """A column's Arrow type has no int64 encoding."""


# ----------------------------------------------------------------------------- floats
def float_to_code(values) -> np.ndarray:
    """Order-preserving int64 codes of float64 values.

    Pre: ``values`` is a float array (float32 is widened exactly). Post: for floats
    ``a < b`` the codes satisfy ``code(a) < code(b)``; ``-0.0`` and ``0.0`` share one
    code, every NaN gets the same code, above ``+inf``. :func:`code_to_float` inverts it.
    """
    f = np.asarray(values, dtype=np.float64)
    # Canonicalise before taking bits: -0.0 == 0.0 and NaN payloads would otherwise give
    # distinct rows for values that Spark (and users) consider equal.
    f = np.where(f == 0.0, 0.0, f)
    f = np.where(np.isnan(f), _CANONICAL_NAN, f)
    bits = np.ascontiguousarray(f).view(_I64)
    return np.where(bits < 0, bits ^ _LOW63, bits).astype(_I64, copy=False)


def code_to_float(codes) -> np.ndarray:
    """Inverse of :func:`float_to_code` (float64)."""
    c = np.asarray(codes, dtype=_I64)
    bits = np.where(c < 0, c ^ _LOW63, c).astype(_I64, copy=False)
    return np.ascontiguousarray(bits).view(np.float64)


# --------------------------------------------------------------------------- kinds
def kind_of(typ: pa.DataType) -> str:
    """The encoding family of an Arrow type: ``int``, ``uint64``, ``bool``, ``temporal``,
    ``float``, ``string`` or ``binary``. Raises :class:`UnsupportedTypeError`."""
    t = pa.types
    if t.is_dictionary(typ):
        return kind_of(typ.value_type)
    if t.is_uint64(typ):
        return "uint64"
    if t.is_integer(typ):
        return "int"
    if t.is_boolean(typ):
        return "bool"
    if (t.is_date(typ) or t.is_timestamp(typ) or t.is_duration(typ) or t.is_time(typ)):
        return "temporal"
    if t.is_float64(typ) or t.is_float32(typ):
        return "float"
    if t.is_string(typ) or t.is_large_string(typ) or t.is_string_view(typ):
        return "string"
    if t.is_binary(typ) or t.is_large_binary(typ) or t.is_binary_view(typ):
        return "binary"
    hint = ""
    if t.is_decimal(typ):
        hint = ("; cast the column first, e.g. to long in its smallest unit (cents: "
                "(col * 100).cast('long')), to double, or to string")
    raise UnsupportedTypeError(
        f"Arrow type {typ} has no int64 encoding (supported: integers, bool, dates, "
        f"timestamps, durations, times, floats, strings, binary){hint}")


def _family(kind):
    # Integers of any width decode to one another's values, so a column that is int32 in
    # one file and int64 in the next is consistent; uint64 and int are one family too.
    return "int" if kind == "uint64" else kind


_SIGNED = {8: pa.int8(), 16: pa.int16(), 32: pa.int32(), 64: pa.int64()}


def common_int_type(a: pa.DataType, b: pa.DataType) -> pa.DataType:
    """The narrowest integer type that holds every value of integer types ``a`` and
    ``b`` (int64 when that would take more than 64 bits: the codes are int64 anyway)."""
    if a == b:
        return a
    sa, sb = pa.types.is_signed_integer(a), pa.types.is_signed_integer(b)
    if sa == sb:
        return a if a.bit_width >= b.bit_width else b
    u, i = (b, a) if sa else (a, b)
    return _SIGNED[min(64, max(2 * u.bit_width, i.bit_width))]


# --------------------------------------------------------------------------- interner
class Interner:
    """Stable dictionary codes for strings (or binary values).

    Codes are ``0, 1, 2, ...`` in order of first appearance and never change. Encoding a
    batch is a compiled hash-table probe per row (:mod:`ddnumba.kernels.intern`,
    which keeps the values' bytes in one growing buffer: a value costs its bytes and
    31 to 54 more); decoding is one Arrow ``take`` over an array made on that buffer
    without copying.

    Parameters
    ----------
    binary : bool
        Intern byte strings (``large_binary``) instead of text (``large_string``).
    """

    def __init__(self, *, binary=False):
        self.value_type = pa.large_binary() if binary else pa.large_string()
        self._blob, self._offs, self._table, self._meta = _intern.new_state()
        self._values: pa.Array | None = None

    def __len__(self):
        return int(self._meta[0])

    @property
    def nbytes(self):
        """Bytes held: the values' bytes and the arrays and table that index them
        (their allocated sizes)."""
        return int(self._blob.nbytes + self._offs.nbytes + self._table.nbytes)

    def intern(self, values) -> np.ndarray:
        """Codes of ``values`` (a pyarrow array without nulls), adding new values.

        Post: the result is a new writable int64 array with one code per value; equal
        values get equal codes, now and in every later call.
        """
        arr = _as_array(values)
        if pa.types.is_dictionary(arr.type):
            # Parquet dictionary pages arrive as dictionary arrays: intern the (small)
            # dictionary and gather, instead of hashing every row again.
            dict_codes = self.intern(arr.dictionary)
            idx = arr.indices.to_numpy(zero_copy_only=False).astype(np.intp, copy=False)
            return dict_codes[idx]
        if len(arr) == 0:
            return np.empty(0, _I64)
        if arr.null_count:
            raise NullValueError(f"{arr.null_count} null value(s): an interner takes "
                                 f"values only")
        arr = arr.cast(self.value_type)
        data, voffs = _byte_buffers(arr)
        before = len(self)
        codes, self._blob, self._offs, self._table = _intern.intern(
            data, voffs, self._blob, self._offs, self._table, self._meta)
        if len(self) != before:
            self._values = None
        return codes

    def values(self) -> pa.Array:
        """Every interned value, in code order (``values()[c]`` is code ``c``'s value).
        Made over the interner's buffers without copying; it stays valid while more
        values are interned (they are written after its end)."""
        if self._values is None:
            n = len(self)
            nb = int(self._meta[1])
            self._values = pa.Array.from_buffers(
                self.value_type, n,
                [None, pa.py_buffer(self._offs[:n + 1]), pa.py_buffer(self._blob[:nb])])
        return self._values

    def lookup(self, codes) -> pa.Array:
        """Values of ``codes``; raises ``ValueError`` for a code never handed out."""
        c = np.asarray(codes, dtype=_I64)
        n = len(self)
        if c.size and (c.min() < 0 or c.max() >= n):
            bad = c[(c < 0) | (c >= n)][0]
            raise ValueError(f"code {int(bad)} was never assigned by this interner "
                             f"({n} values): decode with the encoder that encoded the "
                             f"input")
        return self.values().take(pa.array(c))


def _byte_buffers(arr):
    """The bytes and the ``len(arr) + 1`` int64 offsets of a ``large_string`` /
    ``large_binary`` array without nulls, as read-only NumPy views of its buffers."""
    bufs = arr.buffers()
    voffs = np.frombuffer(bufs[1], np.int64, count=len(arr) + 1, offset=arr.offset * 8)
    data = bufs[2]
    if data is None or data.size == 0:
        data = _NO_BYTES
    return np.frombuffer(data, np.uint8), voffs


_NO_BYTES = bytes(1)


# --------------------------------------------------------------------------- encoder
def _as_array(values) -> pa.Array:
    if isinstance(values, pa.ChunkedArray):
        return (values.combine_chunks() if values.num_chunks != 1 else values.chunk(0))
    if isinstance(values, pa.Array):
        return values
    return pa.array(values)


def _where(column, source):
    """Where a value came from, for messages: ``file: column 'x'``."""
    if column is None:
        return source or "column"
    return f"{source}: column {column!r}" if source else f"column {column!r}"


def _int_codes(arr: pa.Array, what) -> np.ndarray:
    """int64 values of an integer/temporal array (zero-copy for 64-bit types)."""
    typ = arr.type
    if pa.types.is_integer(typ):
        if pa.types.is_uint64(typ):
            v = arr.to_numpy(zero_copy_only=False)
            if v.size and v.max() > _I64_MAX:
                raise OverflowError(f"{what}: value {int(v.max())} does not fit in int64")
            return v.astype(_I64)
        if pa.types.is_int64(typ):
            # Zero-copy (read-only) view of the Arrow buffer; the engine copies on input.
            return arr.to_numpy(zero_copy_only=True)
        return arr.to_numpy(zero_copy_only=False).astype(_I64)
    # Temporal types: reinterpret the stored integers (same width), then widen.
    width = typ.bit_width
    storage = arr.view(pa.int64() if width == 64 else pa.int32())
    return _int_codes(storage, what)


class Encoder:
    """Codes for the Arrow columns of one dataflow (see the module docstring).

    Keeps one string and one binary :class:`Interner`, shared by every column, so equal
    strings in different inputs get equal codes; and :attr:`types`, the Arrow type of
    each column name it has encoded, used to decode outputs.
    """

    def __init__(self):
        self.strings = Interner()
        self.binaries = Interner(binary=True)
        self.types: dict[str, pa.DataType] = {}

    # -- types ---------------------------------------------------------------------
    def register(self, name, typ, *, source=None):
        """Record that column ``name`` holds Arrow type ``typ``.

        A name seen before must keep its encoding family (an integer column may change
        width between files, not become a string). An integer column's type widens to
        hold both (:func:`common_int_type`: int32 then int64 decodes as int64, uint32
        then int8 as int64), so that outputs decode every value; otherwise the first
        type seen wins (a later temporal column is converted to it by :meth:`conform`).
        """
        typ = typ.value_type if pa.types.is_dictionary(typ) else typ
        old = self.types.get(name)
        if old is None:
            kind_of(typ)
            self.types[name] = typ
            return
        if old == typ:
            return
        ko, kt = kind_of(old), kind_of(typ)
        if _family(ko) != _family(kt):
            # ``source`` may already name the column (a file column mapped to ``name``).
            where = source if source and "column" in source else _where(name, source)
            raise UnsupportedTypeError(
                f"{where}: type {typ} does not match type {old} seen "
                f"earlier for this column (codes of different types are not comparable)")
        if _family(ko) == "int":
            self.types[name] = common_int_type(old, typ)

    def conform(self, name, values, *, source=None) -> pa.Array:
        """Register column ``name``'s type (:meth:`register`) and return ``values`` as
        an array whose codes mean what the codes of the type first seen under ``name``
        mean: a temporal column in another unit or type (``timestamp[us]`` after
        ``timestamp[ms]``, a timestamp after a date) is cast to that type, and refused
        (``UnsupportedTypeError`` naming the column) when a value would change, as
        ``timestamp[us]`` 1001 would in milliseconds, or when the time zones differ.
        Other types are returned as they are (their codes do not depend on width)."""
        arr = _as_array(values)
        self.register(name, arr.type, source=source)
        old = self.types[name]
        typ = arr.type.value_type if pa.types.is_dictionary(arr.type) else arr.type
        if typ == old or kind_of(old) != "temporal":
            return arr
        where = source if source and "column" in source else _where(name, source)
        tz = (getattr(typ, "tz", None), getattr(old, "tz", None))
        if pa.types.is_timestamp(typ) and pa.types.is_timestamp(old) and tz[0] != tz[1]:
            raise UnsupportedTypeError(
                f"{where}: type {typ} has another time zone than type {old} seen "
                f"earlier for this column")
        if pa.types.is_dictionary(arr.type):
            arr = arr.dictionary_decode()
        try:
            conv = arr.cast(old)
            same = conv.cast(typ).equals(arr)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            same = False
        if not same:
            raise UnsupportedTypeError(
                f"{where}: type {typ} cannot be converted to type {old} seen earlier "
                f"for this column without changing values (codes of different units "
                f"are not comparable)")
        return conv

    # -- encode / decode -----------------------------------------------------------
    def encode(self, values, *, name=None, source=None) -> np.ndarray:
        """int64 codes of one column.

        Parameters
        ----------
        values : pyarrow.Array, pyarrow.ChunkedArray or array-like
            The column. Must hold no nulls.
        name : str, optional
            Column name: its type is recorded in :attr:`types` (and checked against the
            type seen before under that name).
        source : str, optional
            Where the data came from (a file name), for error messages.

        Returns
        -------
        numpy.ndarray
            int64 codes, one per value. May be a read-only zero-copy view of the Arrow
            buffer (int64 columns); copy before writing to it.

        Raises
        ------
        NullValueError
            The column holds nulls.
        UnsupportedTypeError
            The type has no encoding (lists, structs, decimals, ...).
        OverflowError
            A uint64 value above ``2**63 - 1``.
        """
        arr = _as_array(values)
        what = _where(name, source)
        if arr.null_count:
            raise NullValueError(
                f"{what}: {arr.null_count} null value(s); nulls are not supported "
                f"(filter them out or fill them before exporting, e.g. "
                f"df.na.drop() / fillna in Spark)")
        try:
            kind = kind_of(arr.type)
        except UnsupportedTypeError as e:
            raise UnsupportedTypeError(f"{what}: {e}") from None
        if name is not None:
            arr = self.conform(name, arr, source=source)
            kind = kind_of(arr.type)
        if pa.types.is_dictionary(arr.type) and kind not in ("string", "binary"):
            arr = arr.dictionary_decode()
        if kind in ("int", "uint64", "temporal"):
            return _int_codes(arr, what)
        if kind == "bool":
            return arr.to_numpy(zero_copy_only=False).astype(_I64)
        if kind == "float":
            return float_to_code(arr.to_numpy(zero_copy_only=False))
        interner = self.strings if kind == "string" else self.binaries
        return interner.intern(arr)

    def decode(self, codes, typ) -> pa.Array:
        """The Arrow array of type ``typ`` whose codes are ``codes`` (inverse of
        :meth:`encode`). Integers are cast safely: a value that does not fit ``typ``
        raises ``pyarrow.ArrowInvalid``."""
        c = np.ascontiguousarray(np.asarray(codes), dtype=_I64)
        typ = typ.value_type if pa.types.is_dictionary(typ) else typ
        kind = kind_of(typ)
        if kind in ("int", "uint64"):
            return pa.array(c).cast(typ)
        if kind == "bool":
            bad = (c < 0) | (c > 1)
            if bad.any():
                raise ValueError(f"bool codes must be 0 or 1, got {int(c[bad][0])}")
            return pa.array(c.astype(bool))
        if kind == "temporal":
            width = typ.bit_width
            storage = pa.array(c).cast(pa.int64() if width == 64 else pa.int32())
            return storage.view(typ)
        if kind == "float":
            f = code_to_float(c)
            return pa.array(f).cast(typ) if not pa.types.is_float64(typ) else pa.array(f)
        interner = self.strings if kind == "string" else self.binaries
        return interner.lookup(c).cast(typ)

    def decode_table(self, table: pa.Table, types=None) -> pa.Table:
        """Decode the columns of an int64 table to their Arrow types.

        Parameters
        ----------
        table : pyarrow.Table
            int64 columns (e.g. ``Captured.updates()``).
        types : mapping of str to pyarrow.DataType, optional
            Types of output columns; names not given here fall back to :attr:`types`
            (columns encoded under the same name); the rest, and ``time``/``time_i``/
            ``diff``/``count`` columns, stay int64.
        """
        types = dict(types or {})
        arrays, fields = [], []
        for name in table.column_names:
            col = table.column(name)
            typ = types.get(name)
            if typ is None and name not in ("diff", "time", "count") and not (
                    name.startswith("time_") and name[5:].isdigit()):
                typ = self.types.get(name)
            if typ is None or typ == col.type:
                arrays.append(col)
                fields.append(pa.field(name, col.type, nullable=False))
                continue
            codes = _as_array(col).to_numpy(zero_copy_only=False)
            try:
                arrays.append(self.decode(codes, typ))
            except ValueError as e:
                if "never assigned" not in str(e):
                    raise
                raise ValueError(f"column {name!r} cannot be decoded as {typ}: {e}; "
                                 f"its values are not codes of {typ} values fed to "
                                 f"this dataflow (is the type given for it right?)"
                                 ) from None
            fields.append(pa.field(name, arrays[-1].type, nullable=False))
        return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


_ENCODERS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def encoder_for(dataflow) -> Encoder:
    """The :class:`Encoder` of ``dataflow`` (created on first use, lives as long as it).

    Every reader and writer of one dataflow uses this encoder by default, so codes are
    stable for the dataflow's life and shared by all its inputs and outputs.
    """
    enc = _ENCODERS.get(dataflow)
    if enc is None:
        enc = Encoder()
        _ENCODERS[dataflow] = enc
    return enc

"""Parquet change streams and type encoding (``ddnumba.io.parquet``, ``.encoding``).

Everything here runs without Spark: files are written with pyarrow. References are
plain Python: a dict for the interner, ``sorted`` on floats for the order-preserving
codes, the rows written for the reader, per-key sums for ``feed`` into ``count``.
"""
from __future__ import annotations

import datetime as dt
import os
from collections import Counter

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ddnumba as dd
from ddnumba.io import parquet as ddpq
from ddnumba.io.encoding import (Encoder, Interner, NullValueError, UnsupportedTypeError,
                                 code_to_float, encoder_for, float_to_code)
from ddnumba.io.parquet import (ChangeFileError, ChangeTypeError, NullError,
                                TimeOrderError, feed, list_files, read_changes,
                                write_changes)

FAST = settings(max_examples=40, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])


def tnames(d):
    return ["time"] if d == 1 else [f"time_{i}" for i in range(d)]


def write(path, **cols):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    pq.write_table(pa.table(cols), path)
    return path


def read_all(reader):
    """(rows as tuples, times as tuples, diffs, batches) of a whole reader."""
    rows, times, diffs, batches = [], [], [], list(reader)
    for b in batches:
        rows += list(zip(*[c.tolist() for c in b.columns])) if b.columns else []
        times += [tuple(t) for t in b.times.tolist()]
        diffs += b.diffs.tolist()
    return rows, times, diffs, batches


# ------------------------------------------------------------------------ floats
floats = st.floats(allow_nan=True, allow_infinity=True, width=64)


@FAST
@given(st.lists(floats, min_size=0, max_size=40))
def test_float_codes_sort_like_floats_and_round_trip(xs):
    a = np.array(xs, dtype=np.float64)
    codes = float_to_code(a)
    back = code_to_float(codes)
    # Round trip: exact, except that -0.0 becomes 0.0 and NaNs stay NaN.
    for x, y in zip(xs, back.tolist()):
        if x != x:
            assert y != y
        else:
            assert y == x and not (x == 0 and np.signbit(y))
    # Order: sorting by code is sorting by value (NaN last, -0.0 equal to 0.0).
    key = lambda x: (1, 0.0) if x != x else (0, x + 0.0)  # noqa: E731
    for i in range(len(xs)):
        for j in range(len(xs)):
            ki, kj = key(xs[i]), key(xs[j])
            assert (codes[i] < codes[j]) == (ki < kj)
            assert (codes[i] == codes[j]) == (ki == kj)


def test_float_codes_edge_values():
    vals = [-np.inf, -1e308, -1.0, -5e-324, -0.0, 0.0, 5e-324, 1.0, 1e308, np.inf, np.nan]
    codes = float_to_code(np.array(vals))
    assert list(codes[:4]) == sorted(codes[:4])
    assert codes[4] == codes[5] == 0
    assert np.all(np.diff(codes[5:]) > 0)
    assert codes.dtype == np.int64


# ------------------------------------------------------------------------ interner
@FAST
@given(st.lists(st.lists(st.text(max_size=4), max_size=20), max_size=5))
def test_interner_codes_are_stable_first_appearance_order(batches):
    it = Interner()
    ref: dict[str, int] = {}
    for batch in batches:
        codes = it.intern(pa.array(batch, pa.string()))
        for v in batch:
            ref.setdefault(v, len(ref))
        assert codes.dtype == np.int64
        assert codes.tolist() == [ref[v] for v in batch]
    assert len(it) == len(ref)
    all_codes = np.arange(len(ref))
    assert it.lookup(all_codes).to_pylist() == list(ref)


def test_interner_dictionary_arrays_and_bad_codes():
    it = Interner()
    assert it.intern(pa.array(["x", "y"])).tolist() == [0, 1]
    d = pa.array(["y", "z", "y", "x"]).dictionary_encode()
    assert it.intern(d).tolist() == [1, 2, 1, 0]
    assert it.intern(pa.array([], pa.string())).tolist() == []
    with pytest.raises(ValueError, match="never assigned"):
        it.lookup([3])
    b = Interner(binary=True)
    assert b.intern(pa.array([b"\x00", b"a", b"\x00"])).tolist() == [0, 1, 0]
    assert b.lookup([1, 0]).to_pylist() == [b"a", b"\x00"]


def test_strings_share_codes_across_columns_and_types():
    enc = Encoder()
    a = enc.encode(pa.array(["u", "v"]), name="left")
    b = enc.encode(pa.array(["v", "w", "u"], pa.large_string()), name="right")
    assert a.tolist() == [0, 1] and b.tolist() == [1, 2, 0]
    assert enc.types == {"left": pa.string(), "right": pa.large_string()}


# ------------------------------------------------------------------------ encoder
CASES = [
    pa.array([3, -1, 0, 2**62], pa.int64()),
    pa.array([1, -2, 7], pa.int8()),
    pa.array([0, 65535], pa.uint16()),
    pa.array([0, 2**63 - 1], pa.uint64()),
    pa.array([True, False, True]),
    pa.array([dt.date(1969, 12, 31), dt.date(2024, 2, 29)], pa.date32()),
    pa.array([0, 86_400_000], pa.date64()),
    pa.array([-1, 1_700_000_000_000_000], pa.timestamp("us", tz="UTC")),
    pa.array([5, 6], pa.timestamp("ns")),
    pa.array([1, 2], pa.duration("ms")),
    pa.array([1, 86_399], pa.time32("s")),
    pa.array([1.5, -2.25, 1e300, -np.inf], pa.float64()),
    pa.array([1.5, -0.25], pa.float32()),
    pa.array(["a", "", "ä", "a"], pa.string()),
    pa.array(["x", "y"], pa.large_string()),
    pa.array([b"\x00\x01", b""], pa.binary()),
    pa.array(["p", "q", "p"]).dictionary_encode(),
]


@pytest.mark.parametrize("arr", CASES, ids=lambda a: str(a.type))
def test_encode_decode_round_trip(arr):
    enc = Encoder()
    codes = enc.encode(arr, name="c")
    assert codes.dtype == np.int64 and codes.shape == (len(arr),)
    back = enc.decode(codes, enc.types["c"])
    want = arr.dictionary_decode() if pa.types.is_dictionary(arr.type) else arr
    assert back.type == want.type
    assert back.to_pylist() == want.to_pylist()


def test_encoder_order_preserving_for_ordered_types():
    enc = Encoder()
    for arr in (pa.array([dt.date(2020, 1, 2), dt.date(2019, 5, 1)], pa.date32()),
                pa.array([3.5, -1.0], pa.float64()),
                pa.array([True, False])):
        codes = enc.encode(arr)
        assert (codes[0] > codes[1])


def test_encoder_rejects_nulls_unsupported_and_overflow():
    enc = Encoder()
    with pytest.raises(NullValueError, match=r"f\.parquet: column 'x': 1 null"):
        enc.encode(pa.array([1, None]), name="x", source="f.parquet")
    with pytest.raises(UnsupportedTypeError, match="column 'l'.*list"):
        enc.encode(pa.array([[1], [2]]), name="l")
    with pytest.raises(UnsupportedTypeError, match="decimal.*cast the column first"):
        enc.encode(pa.array([1], pa.decimal128(5, 2)))
    # a type given for decoding that the values are no codes of: said so
    with pytest.raises(ValueError, match=r"column 'qty' cannot be decoded as string"):
        Encoder().decode_table(pa.table({"qty": [2, 1, 0]}), {"qty": pa.string()})
    with pytest.raises(OverflowError, match="does not fit"):
        enc.encode(pa.array([2**63], pa.uint64()))
    enc.encode(pa.array(["s"]), name="k")
    with pytest.raises(UnsupportedTypeError, match="does not match type string"):
        enc.encode(pa.array([1]), name="k")
    enc.encode(pa.array([1], pa.int32()), name="n")
    enc.encode(pa.array([2], pa.int64()), name="n")        # widths may differ
    with pytest.raises(ValueError, match="never assigned"):
        enc.decode(np.array([5]), pa.string())


def test_encoder_for_is_one_per_dataflow():
    a, b = dd.Dataflow(), dd.Dataflow()
    assert encoder_for(a) is encoder_for(a)
    assert encoder_for(a) is not encoder_for(b)


# ------------------------------------------------------------------------ reading
def update_tables(rng, n, k, d, n_files):
    """A random change stream split into ``n_files`` tables in time order."""
    t0 = np.sort(rng.integers(0, 6, n))
    times = [t0] + [rng.integers(0, 4, n) for _ in range(d - 1)]
    cols = {f"c{i}": rng.integers(-3, 3, n) for i in range(k)}
    diffs = rng.integers(-2, 3, n)
    # Cut points on time_0 boundaries only, so files do not overlap in time.
    cuts = sorted(set(int(x) for x in rng.integers(0, n + 1, n_files - 1)))
    cuts = [c for c in cuts if c in (0, n) or t0[c - 1] != t0[c]]
    bounds = [0] + cuts + [n]
    tables = []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        cols_part = {c: v[lo:hi] for c, v in cols.items()}
        cols_part.update({nm: t[lo:hi] for nm, t in zip(tnames(d), times)})
        cols_part["diff"] = diffs[lo:hi]
        tables.append(pa.table(cols_part))
    rows = list(zip(*[v.tolist() for v in cols.values()]))
    ts = list(zip(*[t.tolist() for t in times]))
    return tables, rows, ts, diffs.tolist()


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n=st.sampled_from([0, 1, 2, 7, 40]), k=st.integers(1, 3), d=st.integers(1, 3),
       n_files=st.integers(1, 4), row_group=st.sampled_from([1, 3, 100]),
       batch_rows=st.sampled_from([1, 2, 1000]), seed=st.integers(0, 2**16))
def test_read_changes_matches_written_rows(tmp_path_factory, n, k, d, n_files, row_group,
                                           batch_rows, seed):
    rng = np.random.default_rng(seed)
    tables, rows, ts, diffs = update_tables(rng, n, k, d, n_files)
    base = tmp_path_factory.mktemp("stream")
    for i, t in enumerate(tables):
        pq.write_table(t, base / f"part-{i}.parquet", row_group_size=row_group)
    reader = read_changes(base, [f"c{i}" for i in range(k)], time_dims=d,
                          batch_rows=batch_rows)
    assert reader.num_rows == n
    got_rows, got_ts, got_diffs, batches = read_all(reader)
    assert got_rows == rows and got_ts == ts and got_diffs == diffs
    for i, b in enumerate(batches):
        assert len(b) <= batch_rows
        assert b.times.dtype == np.int64 and b.times.shape == (len(b), d)
        later = np.concatenate([x.times for x in batches[i + 1:]] or
                               [np.empty((0, d), np.int64)])
        if b.frontier is None:
            assert i == len(batches) - 1
        else:
            # The frontier is a lower bound of every later time (product order).
            assert np.all(later >= b.frontier)
            if i:
                assert np.all(b.frontier >= batches[i - 1].frontier)
    if batches:
        assert batches[-1].frontier is None


def test_read_changes_defaults_and_zero_copy(tmp_path):
    path = write(str(tmp_path / "a.parquet"), k=pa.array([5, 6], pa.int64()),
                 s=["x", "y"], time=pa.array([0, 1], pa.int32()))
    reader = read_changes(path)
    assert reader.names == ["k", "s"]
    (b,) = list(reader)
    assert b.diffs.tolist() == [1, 1]                   # no diff column: +1
    assert b.columns[0].tolist() == [5, 6] and not b.columns[0].flags.writeable
    assert b.columns[1].tolist() == [0, 1]
    assert reader.encoder.types["s"] == pa.string()
    assert b.to_table().column_names == ["k", "s", "time", "diff"]
    assert b.data.tolist() == [[5, 0], [6, 1]]
    renamed = read_changes(path, {"key": "k"})
    assert renamed.names == ["key"] and list(renamed)[0].names == ["key"]
    snap = write(str(tmp_path / "snap" / "s.parquet"), k=[1, 2])
    (b,) = list(read_changes(snap, default_time=3))
    assert b.times.tolist() == [[3], [3]]


def test_files_are_read_in_natural_path_order(tmp_path):
    for b in (10, 2, 0, 1):
        write(str(tmp_path / f"batch={b}" / "part-0.parquet"), x=[b], time=[b])
    write(str(tmp_path / "_SUCCESS" / "x.parquet"), x=[99], time=[99])   # hidden dir
    (tmp_path / "_SUCCESS.marker").write_text("")
    (tmp_path / ".part-0.crc").write_text("crc")
    files = [os.path.relpath(f, tmp_path) for f in list_files(tmp_path)]
    assert files == [os.path.join(f"batch={b}", "part-0.parquet") for b in (0, 1, 2, 10)]
    rows, times, _, _ = read_all(read_changes(tmp_path, ["x"]))
    assert [t[0] for t in times] == [0, 1, 2, 10]


# ------------------------------------------------------------------------ bad input
def test_missing_column_names_file_and_column(tmp_path):
    path = write(str(tmp_path / "d" / "part-0.parquet"), a=[1], time=[0])
    with pytest.raises(ChangeFileError, match=r"part-0\.parquet: column 'b': missing"):
        read_changes(tmp_path / "d", ["a", "b"])
    with pytest.raises(ChangeFileError, match=r"part-0\.parquet: column 'time': the file "
                                              r"has time column\(s\) \['time'\] but "
                                              r"time_dims=2"):
        read_changes(path, ["a"], time_dims=2)
    p1 = write(str(tmp_path / "f" / "g.parquet"), a=[1], time_0=[0])
    with pytest.raises(ChangeFileError, match=r"g\.parquet: column 'time_1': missing time"):
        read_changes(p1, ["a"], time_dims=2)
    p2 = write(str(tmp_path / "e" / "f.parquet"), a=[1], time_0=[0], time_1=[0])
    with pytest.raises(ChangeFileError, match="time_dims=2"):
        read_changes(p2, ["a"])


def test_wrong_types_name_file_and_column(tmp_path):
    p = write(str(tmp_path / "t.parquet"), a=[1], time=["zero"])
    with pytest.raises(ChangeTypeError, match=r"t\.parquet: column 'time': time column "
                                              r"has type string"):
        read_changes(p, ["a"])
    p = write(str(tmp_path / "d.parquet"), a=[1], time=[0], diff=[1.5])
    with pytest.raises(ChangeTypeError, match=r"column 'diff'.*diffs must be integers"):
        read_changes(p, ["a"])
    p = write(str(tmp_path / "l.parquet"), a=pa.array([[1]]), time=[0])
    with pytest.raises(ChangeTypeError, match=r"l\.parquet: column 'a'.*no int64"):
        read_changes(p, ["a"])
    p = write(str(tmp_path / "n.parquet"), a=[1], time=[-1])
    with pytest.raises(ChangeFileError, match=r"column 'time': negative time -1"):
        read_changes(p, ["a"])


def test_temporal_columns_in_another_unit_are_converted_or_refused():
    # The same instants as timestamp[ms], then [us], then [s]: one code each (the
    # first type's), decoding to it; a value the first unit cannot hold, another time
    # zone or another kind of temporal type is refused, naming the column.
    enc = Encoder()
    ms = enc.encode(pa.array([1000, 2000], pa.timestamp("ms")), name="ts")
    us = enc.encode(pa.array([1_000_000, 2_000_000], pa.timestamp("us")), name="ts")
    sec = enc.encode(pa.array([1, 2], pa.timestamp("s")), name="ts")
    assert ms.tolist() == us.tolist() == sec.tolist() == [1000, 2000]
    assert enc.types["ts"] == pa.timestamp("ms")
    assert enc.decode(us, enc.types["ts"]).equals(pa.array([1000, 2000], pa.timestamp("ms")))
    with pytest.raises(UnsupportedTypeError, match=r"f1: column 'ts'.*timestamp\[us\]"
                                                   r".*timestamp\[ms\].*changing values"):
        enc.encode(pa.array([1_000_001], pa.timestamp("us")), name="ts", source="f1")
    with pytest.raises(UnsupportedTypeError, match="time zone"):
        enc.encode(pa.array([1000], pa.timestamp("ms", tz="UTC")), name="ts")
    with pytest.raises(UnsupportedTypeError, match="changing values"):
        enc.encode(pa.array([1000], pa.duration("ms")), name="ts")
    # a date column, then timestamps: midnight converts, another hour does not
    day = enc.encode(pa.array([dt.date(2024, 1, 1)]), name="d")
    mid = enc.encode(pa.array([dt.datetime(2024, 1, 1)], pa.timestamp("us")), name="d")
    assert day.tolist() == mid.tolist()
    with pytest.raises(UnsupportedTypeError, match="column 'd'"):
        enc.encode(pa.array([dt.datetime(2024, 1, 1, 5)], pa.timestamp("us")), name="d")
    # dictionary-encoded temporal values convert too
    d = pa.array([2_000_000, 1_000_000], pa.timestamp("us")).dictionary_encode()
    assert enc.encode(d, name="ts").tolist() == [2000, 1000]


def test_integer_columns_widen_between_files():
    # An integer column keeps its codes whatever its width; the type outputs decode
    # to widens to hold every type seen.
    from ddnumba.io.encoding import common_int_type
    cases = [(pa.int8(), pa.int64(), pa.int64()), (pa.int32(), pa.int16(), pa.int32()),
             (pa.uint32(), pa.int8(), pa.int64()), (pa.uint8(), pa.int16(), pa.int16()),
             (pa.uint16(), pa.int8(), pa.int32()), (pa.uint64(), pa.int32(), pa.int64()),
             (pa.uint8(), pa.uint32(), pa.uint32()), (pa.int64(), pa.int64(), pa.int64())]
    for a, b, want in cases:
        assert common_int_type(a, b) == want and common_int_type(b, a) == want, (a, b)
        enc = Encoder()
        enc.encode(pa.array([1], a), name="k")
        codes = enc.encode(pa.array([-5 if pa.types.is_signed_integer(b) else 200], b),
                           name="k")
        assert enc.types["k"] == want
        assert enc.decode(codes, enc.types["k"]).to_pylist() == codes.tolist()


def test_reader_converts_units_across_files_and_names_the_file(tmp_path):
    d = tmp_path / "ts"
    write(str(d / "part-0.parquet"), ts=pa.array([1000], pa.timestamp("ms")), time=[0])
    write(str(d / "part-1.parquet"), ts=pa.array([1_000_000], pa.timestamp("us")),
          time=[1])
    rows, times, _, _ = read_all(read_changes(str(d), ["ts"]))
    assert rows == [(1000,), (1000,)] and times == [(0,), (1,)]
    write(str(d / "part-2.parquet"), ts=pa.array([1_000_500], pa.timestamp("us")),
          time=[2])
    with pytest.raises(ChangeTypeError, match=r"part-2\.parquet: column 'ts'"):
        read_all(read_changes(str(d), ["ts"]))


def test_nulls_name_file_and_column(tmp_path):
    p = write(str(tmp_path / "n.parquet"), a=pa.array(["x", None]), time=[0, 0])
    with pytest.raises(NullError, match=r"n\.parquet: column 'a': 1 null"):
        list(read_changes(p, ["a"]))
    p = write(str(tmp_path / "t.parquet"), a=[1, 2], time=pa.array([0, None]))
    with pytest.raises(NullError, match=r"t\.parquet: column 'time'.*null time"):
        list(read_changes(p, ["a"]))
    p = write(str(tmp_path / "d.parquet"), a=[1, 2], time=[0, 0], diff=pa.array([1, None]))
    with pytest.raises(NullError, match=r"column 'diff'.*null diff"):
        list(read_changes(p, ["a"]))


def test_corrupt_and_truncated_files(tmp_path):
    d = tmp_path / "d"
    write(str(d / "part-0.parquet"), a=list(range(1000)), time=[0] * 1000)
    (d / "part-1.parquet").write_bytes(b"this is not parquet at all")
    with pytest.raises(ChangeFileError, match=r"part-1\.parquet: not a readable Parquet"):
        read_changes(d, ["a"])
    # Another kind of file in the directory: refused (not skipped: it could be a
    # batch), with how to keep it there; a renamed one is ignored.
    (d / "part-1.parquet").unlink()
    (d / "README.txt").write_text("notes about this stream")
    with pytest.raises(ChangeFileError, match=r"README\.txt.*not Parquet at all.*start "
                                              r"with '_' or '\.'"):
        read_changes(d, ["a"])
    (d / "README.txt").rename(d / "_README.txt")
    assert sum(len(b) for b in read_changes(d, ["a"])) == 1000
    (d / "part-1.parquet").write_bytes(b"PAR")          # shorter than the magic: cut
    with pytest.raises(ChangeFileError, match=r"part-1\.parquet.*truncated or corrupt"):
        read_changes(d, ["a"])
    good = (d / "part-0.parquet").read_bytes()
    (d / "part-1.parquet").write_bytes(good[: len(good) // 2])
    with pytest.raises(ChangeFileError, match=r"part-1\.parquet.*truncated or corrupt"):
        read_changes(d, ["a"])
    # A file whose data pages are damaged but whose footer is intact fails on reading.
    damaged = bytearray(good)
    damaged[8:400] = b"\xff" * 392
    (d / "part-1.parquet").write_bytes(bytes(damaged))
    with pytest.raises(ChangeFileError, match=r"part-1\.parquet"):
        list(read_changes(d, ["a"]))


def test_times_out_of_order_across_files(tmp_path):
    d = tmp_path / "d"
    write(str(d / "part-0.parquet"), a=[1, 2], time=[3, 5])
    write(str(d / "part-1.parquet"), a=[3], time=[4])
    write(str(d / "part-2.parquet"), a=[4], time=[0])
    with pytest.raises(TimeOrderError, match=r"part-1\.parquet: column 'time': times go "
                                             r"backwards: earliest time 4 is before time "
                                             r"5 in .*part-0\.parquet"):
        read_changes(d, ["a"])
    # Sorting by time ranges cannot fix overlapping ranges...
    with pytest.raises(TimeOrderError, match="overlap"):
        read_changes(d, ["a"], order="sort")
    # ...but it reorders disjoint ones, and order='any' accepts anything, with a
    # frontier that is still a valid lower bound.
    os.remove(d / "part-1.parquet")
    _, times, _, batches = read_all(read_changes(d, ["a"], order="sort"))
    assert [t[0] for t in times] == [0, 3, 5]
    _, times, _, batches = read_all(
        read_changes([d / "part-0.parquet", d / "part-2.parquet"], ["a"], order="any"))
    assert [t[0] for t in times] == [3, 5, 0]
    assert batches[0].frontier.tolist() == [0]


def test_empty_directory_and_missing_path(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ChangeFileError, match=r"empty: no Parquet files"):
        read_changes(tmp_path / "empty", ["a"])
    # A Spark job's output without rows (partitioned, Spark writes only _SUCCESS):
    # an empty stream, when its columns are known.
    (tmp_path / "empty" / "_SUCCESS").write_text("")
    assert list(read_changes(tmp_path / "empty", ["a"])) == []
    with pytest.raises(ChangeFileError, match=r"empty change stream.*no file to take"):
        read_changes(tmp_path / "empty")
    with pytest.raises(FileNotFoundError, match="nope"):
        read_changes(tmp_path / "nope", ["a"])
    with pytest.raises(ValueError, match="order must be"):
        read_changes(tmp_path / "empty", ["a"], order="backwards")


# ------------------------------------------------------------------------ writing
def string_dataflow():
    df = dd.Dataflow()
    inp, words = df.new_input(["word", "flag"])
    out = words.count().capture()
    enc = encoder_for(df)
    w = enc.encode(pa.array(["b", "a", "b", "c"]), name="word")
    f = enc.encode(pa.array([True, False, True, True]), name="flag")
    inp.update(w, f, time=[0, 0, 1, 1], diff=[1, 1, 1, -1])
    inp.close()
    df.run()
    return df, out


def test_write_changes_decodes_types_and_sorts_by_time(tmp_path):
    df, out = string_dataflow()
    path = write_changes(out, tmp_path / "counts")
    assert path.endswith("part-00000.parquet")
    tbl = pq.read_table(path)
    assert tbl.schema.field("word").type == pa.string()
    assert tbl.column_names == ["word", "count", "time", "diff"]
    rows = tbl.to_pylist()
    assert [r["time"] for r in rows] == sorted(r["time"] for r in rows)
    acc = Counter()
    for r in rows:
        acc[(r["word"], r["count"])] += r["diff"]
    # count sums diffs: "c" was removed once and never inserted, so it counts -1.
    assert {k: v for k, v in acc.items() if v} == {("a", 1): 1, ("b", 2): 1, ("c", -1): 1}
    # A second write appends the next part file.
    assert write_changes(out, tmp_path / "counts").endswith("part-00001.parquet")
    # Re-reading the written stream gives the same updates.
    rows2, times, diffs, _ = read_all(read_changes(path, ["word", "count"],
                                                   encoder=encoder_for(df)))
    assert len(rows2) == len(rows)


def test_write_changes_file_path_refuses_overwrite(tmp_path):
    t = pa.table({"a": [1], "time": [0], "diff": [1]})
    p = str(tmp_path / "out.parquet")
    assert write_changes(t, p) == p
    with pytest.raises(FileExistsError, match="overwrite=True"):
        write_changes(t, p)
    write_changes(pa.table({"a": [2], "time": [0], "diff": [1]}), p, overwrite=True)
    assert pq.read_table(p).column("a").to_pylist() == [2]
    with pytest.raises(TypeError, match="Captured output or a pyarrow Table"):
        write_changes([1, 2], p)


def test_failed_write_leaves_no_file(tmp_path, monkeypatch):
    t = pa.table({"a": list(range(100)), "time": [0] * 100, "diff": [1] * 100})
    target = tmp_path / "out"
    real = pq.write_table

    def half_then_fail(table, where, **kw):
        real(table, where, **kw)
        with open(where, "r+b") as f:            # a half-written file on disk...
            f.truncate(os.path.getsize(where) // 2)
        raise OSError("disk full")               # ...when the write fails

    monkeypatch.setattr(pq, "write_table", half_then_fail)
    with pytest.raises(OSError, match="disk full"):
        write_changes(t, target)
    assert os.listdir(target) == []
    p = tmp_path / "x.parquet"
    monkeypatch.setattr(pq, "write_table", real)
    write_changes(t, p)
    monkeypatch.setattr(pq, "write_table", half_then_fail)
    with pytest.raises(OSError):
        write_changes(t.slice(0, 3), p, overwrite=True)
    monkeypatch.setattr(pq, "write_table", real)
    assert pq.read_table(p).num_rows == 100          # the old file is untouched
    assert sorted(os.listdir(tmp_path)) == ["out", "x.parquet"]
    # Codes that were never assigned fail before anything is written.
    with pytest.raises(ValueError, match="never assigned"):
        write_changes(pa.table({"w": [7], "time": [0], "diff": [1]}), tmp_path / "y",
                      encoder=Encoder(), types={"w": pa.string()})
    assert not os.path.exists(tmp_path / "y")


def test_nanosecond_timestamps_are_not_truncated(tmp_path):
    enc = Encoder()
    t = pa.table({"ts": enc.encode(pa.array([1, 2], pa.timestamp("ns")), name="ts"),
                  "time": [0, 0], "diff": [1, 1]})
    with pytest.raises(ValueError, match=r"column\(s\) \['ts'\]: a timestamp\[ns\] "
                                         r"value needs nanoseconds"):
        write_changes(t, tmp_path / "o", encoder=enc)
    assert os.listdir(tmp_path / "o") == []
    t = pa.table({"ts": enc.encode(pa.array([1000, 2000], pa.timestamp("ns")), name="ts"),
                  "time": [0, 0], "diff": [1, 1]})
    p = write_changes(t, tmp_path / "o", encoder=enc)
    assert pq.read_table(p).schema.field("ts").type == pa.timestamp("us")


# ------------------------------------------------------------------------ feeding
@settings(max_examples=15, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n=st.sampled_from([1, 5, 30]), files=st.integers(1, 3), seed=st.integers(0, 999))
def test_feed_count_matches_reference(tmp_path_factory, n, files, seed):
    rng = np.random.default_rng(seed)
    base = tmp_path_factory.mktemp("feed")
    keys = np.array(["k0", "k1", "k2"])[rng.integers(0, 3, n)]
    times = np.sort(rng.integers(0, 5, n))
    diffs = rng.choice([1, 1, 2, -1], n)
    bounds = np.linspace(0, n, files + 1).astype(int)
    for i in range(files):
        lo, hi = bounds[i], bounds[i + 1]
        # Times are sorted, so files are in time order (they may share a boundary time).
        pq.write_table(pa.table({"key": keys[lo:hi], "time": times[lo:hi],
                                 "diff": diffs[lo:hi]}), base / f"part-{i}.parquet")
    df = dd.Dataflow()
    inp, coll = df.new_input(["key"])
    out = coll.count().capture()
    assert feed(inp, base) == n
    assert inp.closed
    enc = encoder_for(df)
    for t in range(5):
        ref = Counter()
        for k, tt, d in zip(keys, times, diffs):
            if tt <= t:
                ref[str(k)] += int(d)
        want = {(k, c) for k, c in ref.items() if c != 0}
        at = out.at(t)
        words = enc.decode(at.column("key").to_numpy(), pa.string()).to_pylist()
        got = set(zip(words, at.column("count").to_pylist()))
        assert got == want


def test_feed_advances_frontier_without_closing(tmp_path):
    write(str(tmp_path / "part-0.parquet"), a=[1, 2], time=[0, 4])
    write(str(tmp_path / "part-1.parquet"), a=[3], time=[7])
    df = dd.Dataflow()
    inp, coll = df.new_input(["a"])
    out = coll.capture()
    feed(inp, tmp_path, close=False)
    assert not inp.closed and inp.frontier.tolist() == [[8]]
    assert out.done(7) and not out.done(8)
    inp.insert([9], time=8)                           # the stream can go on
    with pytest.raises(ChangeFileError, match=r"part-0\.parquet.*not >= the input "
                                              r"frontier"):
        feed(inp, tmp_path)


def test_feed_all_interleaves_inputs_and_runs(tmp_path):
    for b in range(3):
        write(str(tmp_path / "l" / f"part-{b}.parquet"), k=[b, b], x=[10 * b + 1, 10 * b + 2],
              time=[b, b])
        write(str(tmp_path / "r" / f"part-{b}.parquet"), k=[b], y=[-b], time=[b])
    df = dd.Dataflow()
    li, left = df.new_input(["k", "x"])
    ri, right = df.new_input(["k", "y"])
    out = left.join(right).capture()
    runs = []
    real_run = df.run
    df.run = lambda: (runs.append(1), real_run())
    assert ddpq.feed_all([(li, tmp_path / "l"), (ri, tmp_path / "r")]) == 9
    assert len(runs) >= 3
    rows = sorted(tuple(r.values()) for r in out.at(2).to_pylist())
    assert rows == sorted((b, v, -b, 1) for b in range(3) for v in (10 * b + 1, 10 * b + 2))


# ------------------------------------------------- Spark layouts (session 37 QA)


def test_partition_columns_are_read_back_from_directory_names(tmp_path):
    """Spark's partitionBy keeps a column's value only in ``name=value/``: it is read
    back from there (an integer column when every value is one, else a string;
    URL-quoted values unquoted), so a query keyed by it counts by it."""
    d = tmp_path / "s"
    write(str(d / "day=2024-01-01" / "hour=9" / "part-0.parquet"), user=["a", "b"],
          time=[0, 0])
    write(str(d / "day=2024-01-01" / "hour=10" / "part-0.parquet"), user=["a"],
          time=[1])
    write(str(d / "day=2024%2F01%2F02" / "hour=-1" / "part-0.parquet"), user=["c"],
          time=[2])
    r = read_changes(d, order="sort")
    assert r.names == ["user"]                       # by default: the files' columns
    assert r.partition_columns == ["day", "hour"]
    df = dd.Dataflow()
    inp, c = df.new_input(["day", "hour", "user"])
    out = c.count().capture()
    ddpq.feed(inp, d, ["day", "hour", "user"], order="sort")
    dec = encoder_for(df).decode_table(out.updates())
    acc = Counter()
    for row in dec.to_pylist():
        acc[(row["day"], row["count"])] += row["diff"]
    assert {k: v for k, v in acc.items() if v} == {("2024-01-01", 3): 1,
                                                   ("2024/01/02", 1): 1}
    assert encoder_for(df).types["hour"] == pa.int64()
    # the partition column can also be renamed or picked alone
    rows, times, diffs, _ = read_all(read_changes(d, {"h": "hour"}, order="sort"))
    assert sorted(rows) == [(-1,), (9,), (9,), (10,)]
    # a time or diff column only in directory names is refused
    e = tmp_path / "e"
    write(str(e / "time=0" / "part-0.parquet"), user=["a"])
    with pytest.raises(ChangeFileError, match="only in the directory name"):
        read_changes(e, ["user"])


def test_links_to_partition_directories_are_followed(tmp_path):
    d = tmp_path / "s"
    write(str(d / "batch=0" / "part-0.parquet"), k=[1], time=[0])
    elsewhere = tmp_path / "elsewhere" / "batch=1"
    write(str(elsewhere / "part-0.parquet"), k=[2, 3], time=[1, 1])
    os.symlink(elsewhere, d / "batch=1")
    os.symlink(d, d / "batch=2")                     # a loop back up: walked once
    rows, times, diffs, _ = read_all(read_changes(d, ["k"]))
    assert sorted(rows) == [(1,), (2,), (3,)]


def test_negative_partition_values_sort_as_numbers(tmp_path):
    d = tmp_path / "s"
    for i, part in enumerate([-2, -1, 0, 3]):
        write(str(d / f"part={part}" / "f.parquet"), k=[part], time=[i])
    files = ddpq.list_files(d)
    assert [os.path.basename(os.path.dirname(f)) for f in files] == [
        "part=-2", "part=-1", "part=0", "part=3"]
    rows, _, _, _ = read_all(read_changes(d, ["k"]))         # order='check' passes
    assert rows == [(-2,), (-1,), (0,), (3,)]


def test_part_numbers_stay_unique_when_others_touch_the_directory(tmp_path):
    # The next part number is remembered per directory (no listing per write), and
    # checked: parts another writer added, or a directory made anew, are seen.
    t = pa.table({"a": [1], "time": [0], "diff": [1]})
    d = tmp_path / "out"
    names = [os.path.basename(write_changes(t, d)) for _ in range(3)]
    assert names == ["part-00000.parquet", "part-00001.parquet", "part-00002.parquet"]
    pq.write_table(t, d / "part-00007.parquet")                  # someone else's
    assert os.path.basename(write_changes(t, d)) == "part-00008.parquet"
    os.remove(d / "part-00008.parquet")                          # the last one gone
    assert os.path.basename(write_changes(t, d)) == "part-00008.parquet"
    import shutil
    shutil.rmtree(d)
    assert os.path.basename(write_changes(t, d)) == "part-00000.parquet"
    assert pq.read_table(d).num_rows == 1


def test_interner_lookup_across_many_batches():
    # Values interned a few at a time: a lookup of any codes, in any order and with
    # repeats, equals the one-array answer.
    rng = np.random.default_rng(7)
    it = Interner()
    seen = []
    for r in range(300):
        batch = [f"v{int(x)}" for x in rng.integers(0, 2000, int(rng.integers(1, 9)))]
        it.intern(pa.array(batch))
        for v in batch:
            if v not in seen:
                seen.append(v)
        if r % 37 == 0:
            codes = rng.integers(0, len(it), 50)
            assert it.lookup(codes).to_pylist() == [seen[c] for c in codes]
    codes = rng.integers(0, len(it), 500)
    assert it.lookup(codes).to_pylist() == [seen[c] for c in codes]
    assert it.values().to_pylist() == seen
    assert it.lookup(codes[::-1]).to_pylist() == [seen[c] for c in codes[::-1]]


# ------------------------------------------------------- string pages: dictionary or plain
def _strings(case, rng, n):
    if case == "few":
        return [f"value-{i}" for i in rng.integers(0, 50, n)]
    return [f"value-{i:09d}" for i in rng.permutation(10 * n)[:n]]


@pytest.mark.parametrize("case,options,as_dictionary", [
    ("few", {}, True),                                      # dictionary pages only
    ("few", {"row_group_size": 1_000}, True),               # in every row group
    ("many", {"dictionary_pagesize_limit": 4096}, False),   # falls back to plain pages
    ("many", {}, True),                                     # 2e4 values fit 1 MiB
    ("few", {"use_dictionary": False}, False),              # no dictionary at all
    ("many", {"data_page_version": "2.0", "dictionary_pagesize_limit": 4096}, False),
])
def test_string_columns_are_read_as_dictionaries_only_when_stored_so(
        tmp_path, case, options, as_dictionary):
    # A string column whose pages fell back to plain encoding (a column chunk's
    # dictionary outgrew its limit) is read as strings: as a dictionary, Arrow would
    # hash every value. Either way the values read back are those written.
    rng = np.random.default_rng(11)
    n = 20_000
    values = _strings(case, rng, n)
    pq.write_table(pa.table({"s": values, "k": rng.integers(0, 9, n),
                             "time": np.arange(n, dtype=np.int64)}),
                   tmp_path / "part-0.parquet", **options)
    reader = read_changes(tmp_path, ["s", "k"])
    assert (reader.plans[0].dictionary == ["s"]) is as_dictionary
    batches = list(reader)
    enc = reader.encoder
    got = [w for b in batches
           for w in enc.decode(b.columns[0], pa.string()).to_pylist()]
    assert got == values


def test_mixed_row_groups_read_as_strings(tmp_path):
    # One row group of few values (dictionary pages) and one past its dictionary's
    # limit (plain pages): the file's column is read as strings.
    rng = np.random.default_rng(5)
    values = _strings("few", rng, 5_000) + _strings("many", rng, 5_000)
    pq.write_table(pa.table({"s": values, "time": np.zeros(10_000, np.int64)}),
                   tmp_path / "part-0.parquet", row_group_size=5_000,
                   dictionary_pagesize_limit=4096)
    reader = read_changes(tmp_path, ["s"])
    assert reader.plans[0].dictionary == []
    got = [w for b in reader
           for w in reader.encoder.decode(b.columns[0], pa.string()).to_pylist()]
    assert got == values


def test_unreadable_dictionary_page_header_falls_back_to_dictionary(tmp_path):
    path = write(str(tmp_path / "a.parquet"), s=["x", "y", "x"], time=[0, 0, 1])
    md = pq.ParquetFile(path).metadata
    assert ddpq._read_as_dictionary(path, md, 0)

    class Chunk:
        num_values = 3
        has_dictionary_page = True
        dictionary_page_offset = 0          # the file's magic, not a page header
        total_uncompressed_size = 100

    class Meta:
        num_row_groups = 1

        def row_group(self, k):
            return type("G", (), {"column": lambda self, c: Chunk()})()

    assert ddpq._read_as_dictionary(path, Meta(), 0)
    assert ddpq._read_as_dictionary(str(tmp_path / "gone.parquet"), md, 0)
    for junk in (b"", b"\x00", b"\x15\x04", b"\x15\x00\x15\x80", b"PAR1" * 8):
        with pytest.raises(ValueError):
            ddpq._dictionary_page(junk)

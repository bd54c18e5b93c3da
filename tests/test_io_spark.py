"""Round trips through a real local Spark: Spark writes changes, ddnumba computes,
Parquet, Spark reads, and the result equals Spark's own computation from scratch.

Each test uses the session-scoped ``spark`` fixture (tests/conftest.py). References are
Spark queries over the accumulated inputs (join + groupBy with multiplicities) and
networkx on the edge list Spark accumulates, never ddnumba itself.
"""
from __future__ import annotations

import datetime as dt
import os
from collections import Counter

import networkx as nx
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import ddnumba as dd
from ddnumba.algorithms import reachability
from ddnumba.io.encoding import encoder_for
from ddnumba.io.parquet import _dictionary_page
from ddnumba.io.parquet import NullError, feed, feed_all, read_changes, write_changes
from ddnumba.io.spark import (accumulate, as_changes, export_changes, read_updates,
                              snapshot_changes, to_spark)

pytestmark = pytest.mark.spark


def rows_of(df):
    return Counter(tuple(r) for r in df.collect())


# ------------------------------------------------------------------ join + groupBy
def test_join_groupby_count_round_trip(spark, tmp_path):
    from pyspark.sql import functions as F
    rng = np.random.default_rng(7)
    customers = [f"cust-{i}" for i in range(6)]
    regions = ["north", "south", "east"]
    orders, custs = [], []
    present = []
    for t in range(5):
        for _ in range(8):                       # new orders, some duplicated
            row = (str(rng.choice(customers)), int(rng.integers(0, 4)))
            orders.append((*row, t, 1))
            present.append(row)
        for _ in range(2 if t else 0):           # cancel earlier orders
            row = present.pop(int(rng.integers(0, len(present))))
            orders.append((*row, t, -1))
    for c in customers[:5]:                      # cust-5 never gets a region
        custs.append((c, str(rng.choice(regions)), 0, 1))
    custs += [("cust-0", "north", 2, 1),         # cust-0 gains a second region at 2
              (custs[1][0], custs[1][1], 3, -1)]  # cust-1 loses its region at 3
    odf = spark.createDataFrame(orders, "customer string, item long, time long, diff long")
    cdf = spark.createDataFrame(custs, "customer string, region string, time long, "
                                       "diff long")
    export_changes(odf, tmp_path / "orders")
    export_changes(cdf, tmp_path / "customers")

    df = dd.Dataflow()
    oi, o = df.new_input(["customer", "item"])
    ci, c = df.new_input(["customer", "region"])
    per_region = (o.join(c).map(lambda cu, it, rg: rg, names=["region"]).count()
                  .capture())
    assert feed_all([(oi, tmp_path / "orders"), (ci, tmp_path / "customers")]) == (
        len(orders) + len(custs))
    write_changes(per_region, tmp_path / "out")

    out = read_updates(spark, tmp_path / "out")
    assert dict(out.dtypes) == {"region": "string", "count": "bigint", "time": "bigint",
                                "diff": "bigint"}
    # Spark from scratch, at every time t at once (a cross join with the times):
    # accumulate both inputs at t, join with multiplicities, count per region.
    times = spark.range(5).withColumnRenamed("id", "t")

    def acc_at(changes, cols, name):
        return (changes.crossJoin(times).filter(F.col("time") <= F.col("t"))
                .groupBy("t", *cols).agg(F.sum("diff").alias(name))
                .filter(F.col(name) != 0))

    oa = acc_at(odf, ["customer", "item"], "n1")
    ca = acc_at(cdf, ["customer", "region"], "n2")
    want = (oa.join(ca, ["t", "customer"]).groupBy("t", "region")
            .agg(F.sum(F.col("n1") * F.col("n2")).alias("count"))
            .filter(F.col("count") != 0))
    got = acc_at(out, ["region", "count"], "mult")
    got_rows = rows_of(got)
    assert all(k[-1] == 1 for k in got_rows)
    assert Counter({k[:-1]: v for k, v in got_rows.items()}) == rows_of(want)
    assert {k[0] for k in got_rows} == set(range(5))


# ------------------------------------------------------------------ reachability
def test_reachability_round_trip(spark, tmp_path):
    from pyspark.sql import functions as F
    n, m, c, roots = 40, 60, 30, [0, 7, 19]
    ids = spark.range(m + c)
    edges = ids.select(
        "id", F.pmod(F.xxhash64(F.lit("s"), "id"), F.lit(n)).alias("src"),
        F.pmod(F.xxhash64(F.lit("d"), "id"), F.lit(n)).alias("dst"))
    stream = (as_changes(edges.filter(F.col("id") < m), time=0)
              .unionByName(as_changes(edges.filter(F.col("id") < c),
                                      time=F.col("id") + 1, diff=-1))
              .unionByName(as_changes(edges.filter(F.col("id") >= m),
                                      time=F.col("id") - m + 1)))
    stream = stream.drop("id")
    export_changes(stream, tmp_path / "edges")
    export_changes(as_changes(spark.createDataFrame([(r,) for r in roots], "node long"),
                              time=0), tmp_path / "roots")

    df = dd.Dataflow()
    ri, r = df.new_input(["node"])
    ei, e = df.new_input(["src", "dst"])
    cap = reachability(r, e).capture()
    feed(ri, tmp_path / "roots", run=False)
    feed(ei, tmp_path / "edges", batch_rows=16)
    write_changes(cap, tmp_path / "reach")

    out = read_updates(spark, tmp_path / "reach")
    ups = out.toPandas()
    all_changes = stream.toPandas()
    for t in (0, 1, 10, c):
        acc = Counter()
        for s, d, tt, df_ in all_changes[["src", "dst", "time", "diff"]].itertuples(
                index=False):
            if tt <= t:
                acc[(s, d)] += df_
        g = nx.DiGraph()
        g.add_nodes_from(roots)
        g.add_edges_from(k for k, v in acc.items() if v > 0)
        want = {(root, v) for root in roots for v in nx.descendants(g, root) | {root}}
        got = Counter()
        for root, node, tt, d in ups[["root", "node", "time", "diff"]].itertuples(
                index=False):
            if tt <= t:
                got[(root, node)] += d
        assert {k for k, v in got.items() if v} == want, t
        assert set(v for v in got.values() if v) <= {1}


# ------------------------------------------------------------------ types
def typed_frame(spark):
    from pyspark.sql.types import (BinaryType, BooleanType, DateType, DoubleType,
                                   FloatType, IntegerType, LongType, StringType,
                                   StructField, StructType, TimestampNTZType,
                                   TimestampType)
    schema = StructType([
        StructField("s", StringType()), StructField("b", BooleanType()),
        StructField("d", DateType()), StructField("ts", TimestampType()),
        StructField("ntz", TimestampNTZType()), StructField("f", DoubleType()),
        StructField("f32", FloatType()), StructField("i", IntegerType()),
        StructField("l", LongType()), StructField("bin", BinaryType())])
    utc = dt.timezone.utc
    rows = [
        ("héllo", True, dt.date(2024, 2, 29), dt.datetime(2024, 1, 1, 12, 0, 0, 123456,
                                                           tzinfo=utc),
         dt.datetime(2020, 5, 5, 1, 2, 3), -1.5, 0.25, -7, 2**40, b"\x00\xff"),
        ("", False, dt.date(1969, 12, 31), dt.datetime(1960, 1, 1, tzinfo=utc),
         dt.datetime(1999, 12, 31, 23, 59, 59), 1e300, -3.0, 2**31 - 1, -2**62, b""),
        ("héllo", False, dt.date(2000, 1, 1), dt.datetime(2000, 1, 1, tzinfo=utc),
         dt.datetime(2000, 1, 1), float("inf"), 1.0, 0, 0, b"x"),
    ]
    return spark.createDataFrame(rows, schema)


@pytest.mark.parametrize("timestamps", ["TIMESTAMP_MICROS", "INT96"])
def test_types_survive_the_round_trip(spark, tmp_path, timestamps):
    from pyspark.sql import functions as F
    base = typed_frame(spark)
    changes = (as_changes(base, time=0)
               .unionByName(as_changes(base.filter(F.col("i") == 0), time=1, diff=-1)))
    old = spark.conf.get("spark.sql.parquet.outputTimestampType")
    spark.conf.set("spark.sql.parquet.outputTimestampType", timestamps)
    try:
        export_changes(changes, tmp_path / "in")
    finally:
        spark.conf.set("spark.sql.parquet.outputTimestampType", old)

    import pyarrow.parquet as pq
    part = next(f for f in os.listdir(tmp_path / "in") if f.endswith(".parquet"))
    pschema = pq.ParquetFile(tmp_path / "in" / part).schema
    physical = {pschema.column(i).name: pschema.column(i).physical_type
                for i in range(len(pschema))}
    assert physical["ts"] == ("INT96" if timestamps == "INT96" else "INT64")

    df = dd.Dataflow()
    cols = base.columns
    inp, coll = df.new_input(cols)
    cap = coll.distinct().capture()
    feed(inp, tmp_path / "in")
    write_changes(cap, tmp_path / "out")

    back = read_updates(spark, tmp_path / "out")
    assert [(f.name, f.dataType) for f in back.schema.fields][:len(cols)] == [
        (f.name, f.dataType) for f in base.schema.fields]
    assert rows_of(back) == rows_of(changes)
    # Codes are stable: a second directory read by the same dataflow's encoder decodes
    # to the same values.
    enc = encoder_for(df)
    first = [b for b in read_changes(tmp_path / "in", cols, encoder=enc)]
    assert sum(len(b) for b in first) == 4


def test_nulls_from_spark_are_a_clear_error(spark, tmp_path):
    df = spark.createDataFrame([("a", 1), (None, 2)], "name string, v long")
    export_changes(as_changes(df, time=0), tmp_path / "in")
    with pytest.raises(NullError, match=r"part-.*\.parquet: column 'name': 1 null"):
        list(read_changes(tmp_path / "in", ["name", "v"]))


# ------------------------------------------------------------------ snapshots, to_spark
def test_snapshot_changes_and_to_spark(spark, tmp_path):
    old = spark.createDataFrame([("a", 1), ("a", 1), ("b", 2), ("c", 3)], "k string, v long")
    new = spark.createDataFrame([("a", 1), ("b", 2), ("b", 2), ("d", 4)], "k string, v long")
    changes = as_changes(old, time=0).unionByName(snapshot_changes(old, new, time=1))
    assert rows_of(changes.filter("time = 1")) == Counter(
        {("a", 1, 1, -1): 1, ("c", 3, 1, -1): 1, ("b", 2, 1, 1): 1, ("d", 4, 1, 1): 1})
    export_changes(changes, tmp_path / "snap")

    df = dd.Dataflow()
    inp, coll = df.new_input(["k", "v"])
    cap = coll.capture()
    feed(inp, tmp_path / "snap")
    enc = encoder_for(df)
    at1 = cap.at(1)
    got = Counter()
    for k, v, n in zip(enc.decode(at1.column("k").to_numpy(), pa.string()).to_pylist(),
                       at1.column("v").to_pylist(), at1.column("count").to_pylist()):
        got[(k, v)] += n
    assert got == Counter(tuple(r) for r in new.collect())

    sdf = to_spark(spark, cap)
    assert dict(sdf.dtypes)["k"] == "string"
    assert rows_of(accumulate(sdf, 1).select("k", "v", "count")) == Counter(
        {(k, v, n): 1 for (k, v), n in got.items()})
    with pytest.raises(ValueError, match="different columns"):
        snapshot_changes(old, new.withColumnRenamed("v", "w"), time=1)
    assert os.path.isdir(tmp_path / "snap")


def test_changes_never_overwrite_a_tables_own_time_or_diff(spark, tmp_path):
    """A table with its own ``time``/``diff`` columns: as_changes refuses to
    overwrite them (the event times and diffs were silently replaced), unless the
    argument names them; snapshots with such columns are refused; partitioning an
    export by time is refused (files would lose their time column)."""
    t = spark.createDataFrame([("a", 5, 2), ("b", 7, -1)], "k string, time long, diff long")
    with pytest.raises(ValueError, match="already has a column 'time'"):
        as_changes(t, time=0)
    with pytest.raises(ValueError, match="already has a column 'diff'"):
        as_changes(t, time="time")
    own = as_changes(t, time="time", diff="diff")
    assert rows_of(own) == Counter({("a", 5, 2): 1, ("b", 7, -1): 1})
    with pytest.raises(ValueError, match=r"snapshots have column\(s\) \['time', 'diff'\]"):
        snapshot_changes(t, t.limit(1), time=1)
    with pytest.raises(ValueError, match="cannot partition by"):
        export_changes(own, tmp_path / "x", partition_by="time")
    # partitioned by a data column: read back from the directory names when named
    p = spark.createDataFrame([("u1", 1), ("u2", 1), ("u1", 2)], "user string, day long")
    export_changes(as_changes(p, time="day"), tmp_path / "byday", partition_by="day")
    df = dd.Dataflow()
    inp, c = df.new_input(["day", "user"])
    out = c.count().capture()
    feed(inp, tmp_path / "byday")
    assert sorted((r["day"], r["count"]) for r in out.at(2).to_pylist()) == [(1, 2),
                                                                              (2, 1)]


def test_spark_string_pages_are_read_as_dictionaries_only_when_stored_so(spark, tmp_path):
    # Spark's writer keeps few distinct strings as dictionary pages and writes many as
    # plain pages: the reader takes the first as dictionary arrays and the second as
    # strings, and reads both back.
    n = 150_000
    df = spark.range(0, n, numPartitions=1).selectExpr(
        "concat('user-', lpad(cast(id * 7919 % 150001 as string), 12, '0')) as many",
        "concat('v', cast(id % 20 as string)) as few",
        "id as time", "cast(1 as long) as diff")
    df.coalesce(1).write.parquet(str(tmp_path / "x"))
    reader = read_changes(tmp_path / "x", ["many", "few"])
    assert [p.dictionary for p in reader.plans if p.groups] == [["few"]]
    path = [p.path for p in reader.plans if p.groups][0]
    md = pq.ParquetFile(path).metadata
    many, few = md.row_group(0).column(0), md.row_group(0).column(1)
    # Spark dropped the dictionary of "many" altogether; that of "few" is read, not
    # assumed for want of a readable header.
    assert not many.has_dictionary_page
    with open(path, "rb") as f:
        f.seek(few.dictionary_page_offset)
        assert _dictionary_page(f.read(64))[1] == 20
    got = {"many": [], "few": []}
    for b in reader:
        for name, col in zip(("many", "few"), b.columns):
            got[name] += reader.encoder.decode(col, pa.string()).to_pylist()
    want = sorted(df.select("time", "many", "few").collect())
    assert got["many"] == [r[1] for r in want] and got["few"] == [r[2] for r in want]

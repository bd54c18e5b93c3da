"""Spark boundary: export DataFrames as change streams, read ddnumba's output back.

Spark is the upstream pipeline. A *change stream* is a DataFrame (or its Parquet
directory) whose rows are updates: the data columns, ``time`` (or ``time_0 ..``) and
``diff``. This module turns Spark data into such streams and reads ddnumba's output
(written by :func:`ddnumba.io.parquet.write_changes`) back:

* :func:`as_changes` appends ``time`` and ``diff`` to a DataFrame (an insert, or with
  ``diff=-1`` a delete, of every row);
* :func:`snapshot_changes` diffs two snapshots of a table into +1/-1 updates with
  ``exceptAll`` (multiset difference, so duplicate rows count);
* :func:`export_changes` writes a stream so that :func:`~ddnumba.io.parquet.read_changes`
  reads it in time order: range-partitioned and sorted by time, so part files hold
  increasing time ranges (or one directory per ``partition_by`` value);
* :func:`read_updates` / :func:`accumulate` read output changes back and turn them into
  the collection at a time (data columns and ``count``), for comparison with a Spark
  computation from scratch; :func:`to_spark` does the same from memory;
* :func:`local_session` starts a quiet local session set up to run offline on this
  machine (loopback address, the current Python for workers, errors-only logging, no UI,
  two shuffle partitions, UTC session time zone, microsecond Parquet timestamps).

PySpark is imported lazily: importing this module does not start a JVM.
"""
from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile

__all__ = [
    "local_session",
    "as_changes",
    "snapshot_changes",
    "export_changes",
    "read_updates",
    "accumulate",
    "to_spark",
    "time_columns",
]

_LOG4J2 = """\
# Written by ddnumba.io.spark.local_session: errors only, on stderr.
rootLogger.level = error
rootLogger.appenderRef.stdout.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n
logger.gateway.name = org.apache.spark.api.python.PythonGatewayServer
logger.gateway.level = error
logger.nativecode.name = org.apache.hadoop.util.NativeCodeLoader
logger.nativecode.level = error
"""

_conf_dir = None


def _quiet_conf_dir():
    """A directory holding an errors-only ``log4j2.properties`` (made once)."""
    global _conf_dir
    if _conf_dir is None:
        d = tempfile.mkdtemp(prefix="ddnumba-spark-conf-")
        with open(os.path.join(d, "log4j2.properties"), "w") as f:
            f.write(_LOG4J2)
        # The JVM reads it once, at start-up; remove it when this process ends.
        atexit.register(shutil.rmtree, d, True)
        _conf_dir = d
    return _conf_dir


def local_session(app_name="ddnumba", *, cores=2, conf=None, quiet=True, quick_jvm=True):
    """A local SparkSession set up to run offline and quietly.

    Parameters
    ----------
    app_name : str
        Spark application name.
    cores : int
        Local worker threads (``local[cores]``).
    conf : dict, optional
        Extra Spark settings (they override the defaults below).
    quiet : bool
        Log errors only (through a ``log4j2.properties`` in a temporary
        ``SPARK_CONF_DIR``, unless ``SPARK_CONF_DIR`` is already set).
    quick_jvm : bool
        Run the driver JVM with the quick (C1) JIT only and the serial collector. Short
        local jobs spend most of their time warming the JVM up; on two busy cores this
        halved session start-up and first-job times here. Pass ``False`` for long jobs,
        where the optimising JIT pays off.

    Returns
    -------
    pyspark.sql.SparkSession
        The active session if one exists (settings that need a new JVM then have no
        effect), else a new one.

    Notes
    -----
    Must be called before anything else starts a JVM in this process: the environment
    it sets (``SPARK_LOCAL_IP=127.0.0.1`` so Spark binds the loopback interface;
    ``PYSPARK_PYTHON`` = this interpreter so Python workers have pyarrow and ddnumba) is
    read when the JVM starts. Defaults: no UI, no console progress bars, 2 shuffle
    partitions, UTC session time zone, Parquet timestamps as microseconds (not INT96).
    """
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if quiet and "SPARK_CONF_DIR" not in os.environ:
        os.environ["SPARK_CONF_DIR"] = _quiet_conf_dir()
    from pyspark.sql import SparkSession
    settings = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.driver.host": "127.0.0.1",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        # Plain-text log lines instead of Spark 4's JSON ones for the errors we show.
        "spark.log.structuredLogging.enabled": "false",
    }
    if quick_jvm:
        settings["spark.driver.extraJavaOptions"] = ("-XX:TieredStopAtLevel=1 "
                                                     "-XX:+UseSerialGC")
    settings.update({str(k): str(v) for k, v in (conf or {}).items()})
    builder = SparkSession.builder.master(f"local[{int(cores)}]").appName(app_name)
    for k, v in settings.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    if quiet:
        spark.sparkContext.setLogLevel("ERROR")
    return spark


# ------------------------------------------------------------------------ exporting
def time_columns(df_or_names):
    """The time column names of an update DataFrame (or list of names), in order."""
    import re
    names = getattr(df_or_names, "columns", df_or_names)
    tcols = [c for c in names if c == "time" or re.fullmatch(r"time_\d+", c)]
    return sorted(tcols, key=lambda c: -1 if c == "time" else int(c[5:]))


def _data_columns(df):
    tcols = set(time_columns(df))
    return [c for c in df.columns if c not in tcols and c != "diff"]


def as_changes(df, *, time, diff=1):
    """``df`` with ``time`` and ``diff`` columns appended: every row becomes an update.

    Parameters
    ----------
    df : pyspark.sql.DataFrame
        The rows.
    time : int, tuple of int, str or Column
        The time of every row (a tuple gives ``time_0 ..`` columns), or a column name /
        expression computing a one-coordinate time per row.
    diff : int, str or Column
        Multiplicity of every row (+1 inserts, -1 deletes), or a column.

    Raises ``ValueError`` when ``df`` already has a column the result would
    overwrite (``time``, ``time_i`` or ``diff``), unless that argument names it:
    ``as_changes(df, time="time")`` takes the table's own ``time`` as the time.
    """
    from pyspark.sql import Column
    from pyspark.sql import functions as F

    tnames = ([f"time_{i}" for i in range(len(time))] if isinstance(time, tuple)
              else ["time"])
    targets = list(zip(tnames, time if isinstance(time, tuple) else [time]))
    for name, v in targets + [("diff", diff)]:
        if name in df.columns and v != name:
            raise ValueError(f"as_changes: the DataFrame already has a column {name!r}, "
                             f"which would be overwritten; pass {name.split('_')[0]}="
                             f"{name!r} to use it, or rename it first")

    def col(v):
        if isinstance(v, Column):
            return v
        if isinstance(v, str):
            return F.col(v)
        return F.lit(int(v))

    if isinstance(time, tuple):
        out = df
        for i, t in enumerate(time):
            out = out.withColumn(f"time_{i}", col(t).cast("long"))
    else:
        out = df.withColumn("time", col(time).cast("long"))
    return out.withColumn("diff", col(diff).cast("long"))


def snapshot_changes(old, new, *, time):
    """The updates that turn snapshot ``old`` into snapshot ``new``, at ``time``.

    Rows of ``new`` not in ``old`` get diff +1, rows of ``old`` not in ``new`` diff -1,
    with multiset semantics (``exceptAll``): a row twice in ``new`` and once in ``old``
    gives one +1 update. Both DataFrames must have the same columns.
    """
    if list(old.columns) != list(new.columns):
        raise ValueError(f"snapshot_changes: snapshots have different columns "
                         f"{old.columns} and {new.columns}")
    clash = [c for c in old.columns if c == "diff" or c in time_columns([c])]
    if clash:
        raise ValueError(f"snapshot_changes: the snapshots have column(s) {clash}, "
                         f"which the changes' own time and diff columns would "
                         f"overwrite; rename them first")
    plus = as_changes(new.exceptAll(old), time=time, diff=1)
    minus = as_changes(old.exceptAll(new), time=time, diff=-1)
    return plus.unionByName(minus)


def export_changes(df, path, *, partition_by=None, mode="overwrite"):
    """Write a change DataFrame as Parquet that ``read_changes`` reads in time order.

    Rows are range-partitioned and sorted by time, so the part files (numbered in
    partition order) hold increasing, non-overlapping time ranges. With
    ``partition_by`` (a column that grows with time, e.g. a batch number), each value
    gets its own directory ``name=value/`` holding one file: a stream of batches.
    Spark keeps a partition column's value only in the directory name;
    :func:`~ddnumba.io.parquet.read_changes` reads it back from there when it is
    asked for by name (``columns=``, a query file's input names, ``ddnumba run
    --key``), as an integer when every value is one, else as a string. ``mode="append"`` adds part
    files whose names do not sort after the earlier ones: read such a directory with
    ``order="sort"`` (``ddnumba run --order sort``).

    Raises ``ValueError`` without a time column, or when ``partition_by`` is a time
    or ``diff`` column (every file needs them).
    """
    tcols = time_columns(df)
    if not tcols:
        raise ValueError(f"export_changes: no time column in {df.columns} (use "
                         f"as_changes first)")
    if partition_by is not None:
        by = [partition_by] if isinstance(partition_by, str) else list(partition_by)
        bad = [c for c in by if c in tcols or c == "diff"]
        if bad:
            raise ValueError(f"export_changes: cannot partition by {bad}: every change "
                             f"file needs its own time and diff columns (partition by "
                             f"a batch column instead)")
    if partition_by is not None:
        out = df.repartition(partition_by).sortWithinPartitions(*tcols)
        out.write.mode(mode).partitionBy(partition_by).parquet(os.fspath(path))
    else:
        df.orderBy(*tcols).write.mode(mode).parquet(os.fspath(path))


# ------------------------------------------------------------------------ reading
def read_updates(spark, path):
    """ddnumba's output changes (a Parquet file or directory) as a DataFrame."""
    return spark.read.parquet(os.fspath(path))


def accumulate(updates, time=None):
    """The collection an update DataFrame describes, at ``time`` (default: all times).

    Returns the data columns and ``count`` (``count_`` if a data column is called
    ``count``): the sum of ``diff`` over updates with time ``<= time`` (every
    coordinate), rows with a zero sum left out.
    """
    from pyspark.sql import functions as F
    tcols = time_columns(updates)
    data = _data_columns(updates)
    u = updates
    if time is not None:
        ts = tuple(time) if isinstance(time, (tuple, list)) else (time,)
        if len(ts) != len(tcols):
            raise ValueError(f"accumulate: time {time!r} has {len(ts)} coordinate(s), "
                             f"the updates have {tcols}")
        cond = None
        for c, t in zip(tcols, ts):
            e = F.col(c) <= F.lit(int(t))
            cond = e if cond is None else (cond & e)
        u = u.filter(cond)
    name = "count"
    while name in data:
        name += "_"
    return (u.groupBy(*data).agg(F.sum("diff").alias(name))
            .filter(F.col(name) != 0))


def to_spark(spark, data, *, encoder=None, types=None):
    """A Captured output (decoded, like ``write_changes``) or Arrow table as a
    DataFrame."""
    import pyarrow as pa
    from ddnumba.io.encoding import Encoder
    from ddnumba.io.parquet import _as_table
    table, default = _as_table(data)
    enc = encoder if encoder is not None else default
    if enc is not None or types:
        table = (enc or Encoder()).decode_table(table, types)
    if not isinstance(table, pa.Table):  # pragma: no cover - _as_table gives tables
        table = pa.table(table)
    return spark.createDataFrame(table)

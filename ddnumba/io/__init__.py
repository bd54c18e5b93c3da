"""Connectors between ddnumba and the outside world, one module per boundary.

* :mod:`ddnumba.io.arrow` — update batches as Arrow tables (what ``capture`` returns);
* :mod:`ddnumba.io.encoding` — int64 codes for Arrow types (strings, floats, dates, ...)
  and their decoding, with one :class:`~ddnumba.io.encoding.Encoder` per dataflow;
* :mod:`ddnumba.io.parquet` — Parquet change streams: ``read_changes`` (in time order,
  bounded memory), ``write_changes`` (atomic), ``feed`` (a directory into an input);
* :mod:`ddnumba.io.spark` — Spark DataFrames to change streams and back, and a quiet
  local session.

The submodules are imported on first use (``ddnumba.io.parquet`` loads Parquet support,
``ddnumba.io.spark`` PySpark), so ``import ddnumba`` stays light.
"""
from __future__ import annotations

import importlib

__all__ = ["arrow", "encoding", "parquet", "spark"]


def __getattr__(name):
    if name in __all__:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

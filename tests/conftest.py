"""Shared pytest fixtures: one local SparkSession for every Spark test, and both loop
modes for the loop and graph-algorithm tests.

Starting a local Spark JVM costs seconds, so the ``spark`` fixture is session-scoped and
created on first use only (tests without Spark never start a JVM). Spark tests are
marked ``@pytest.mark.spark``; they run wherever PySpark and Java are installed and are
skipped, with the reason, only where one of them is missing.
"""
from __future__ import annotations

import os
import shutil

import pytest


def _java_found():
    return shutil.which("java") is not None or bool(os.environ.get("JAVA_HOME"))


@pytest.fixture(scope="session")
def spark():
    pytest.importorskip("pyspark", reason="Spark tests need PySpark (ddnumba[spark])")
    if not _java_found():
        pytest.skip("Spark tests need Java: none on PATH and JAVA_HOME is unset")
    from ddnumba.io.spark import local_session
    session = local_session("ddnumba-tests")
    yield session
    session.stop()


# The native engine runs a loop sequentially or round-wise (Dataflow(loops=)); the
# default is sequential. Modules that use this fixture (``pytestmark =
# pytest.mark.usefixtures("loop_mode")``) run once in each mode, so that both stay
# tested against their oracles whatever the default (module scope: hypothesis tests
# cannot take function-scoped fixtures).
@pytest.fixture(scope="module", params=["sequential", "rounds"])
def loop_mode(request):
    from oracle import loops_in
    with loops_in(request.param):
        yield request.param

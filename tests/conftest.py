"""Shared pytest fixtures: one local SparkSession for every Spark test.

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

"""Shared pytest fixtures: one local SparkSession for every Spark test, and both loop
modes for the loop and graph-algorithm tests.

Starting a local Spark JVM costs seconds, so the ``spark`` fixture is session-scoped and
created on first use only (tests without Spark never start a JVM). Spark tests are
marked ``@pytest.mark.spark``; they run wherever PySpark and Java are installed and are
skipped, with the reason, only where one of them is missing.
"""
from __future__ import annotations

import collections
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
# With worker processes (DDNUMBA_WORKERS > 1, as in the reruns of tests/test_workers.py)
# every dataflow runs the Python engine, which has no loop modes: one pass is enough.
def _loop_modes():
    try:
        workers = int(os.environ.get("DDNUMBA_WORKERS", "1"))
    except ValueError:
        workers = 1
    return ["sequential", "rounds"] if workers <= 1 else ["sequential"]


@pytest.fixture(scope="module", params=_loop_modes())
def loop_mode(request):
    from oracle import loops_in
    with loops_in(request.param):
        yield request.param


# ddnumba.native compiles kernels.seqloop.run_times on its own before the runtime
# (native.compile_runtime), for the signature the runtime calls it with. Were the two
# to differ, the runtime's compile would compile it a second time: minutes lost on a
# cold start, and no test would notice. Kernels compile only without a cache (CI, from
# a fresh clone, compiles them all within the suite); there a second compile fails the
# session. (On a cold start with two cores a helper process compiles it instead and
# this process loads it from the cache: then a differing signature leaves two in
# ``run_times.signatures``, which tests/test_compile_notice.py checks.)
_COMPILES = collections.Counter()
_ONCE = ("ddnumba.kernels.seqloop.run_times",)


def pytest_configure(config):
    from numba.core import event

    class CompileCounter(event.Listener):
        def on_start(self, ev):
            f = ev.data["dispatcher"].py_func
            _COMPILES[f"{f.__module__}.{f.__qualname__}"] += 1

        def on_end(self, ev):
            pass

    event.register("numba:compile", CompileCounter())


def pytest_sessionfinish(session, exitstatus):
    twice = {k: _COMPILES[k] for k in _ONCE if _COMPILES[k] > 1}
    if twice:
        print(f"\nkernels compiled more than once in this process (a signature in "
              f"ddnumba.native differs from the one its caller uses): {twice}")
        session.exitstatus = 1

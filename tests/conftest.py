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
import subprocess
import sys

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
# session, in any process of it (a worker reports it to the controller). (On a cold
# start with two cores a helper process compiles it instead and this process loads it
# from the cache: then a differing signature leaves two in ``run_times.signatures``,
# which tests/test_compile_notice.py checks, and so does the up-front compile below.)
_COMPILES = collections.Counter()
_ONCE = ("ddnumba.kernels.seqloop.run_times",)
_FAILED_ELSEWHERE = []      # (the controller's: what its workers or the warm-up found)
# Every kernel's compiles in this process (the controller's: in its workers too), as
# {kernel: {(plain signature, signature)}}: a kernel compiled twice for one plain
# signature got a literal argument one of those times, an avoidable compile
# (literal_allowances.literal_copies; tests/test_kernel_literals.py reads the sources
# for the same; found only where kernels compile, on a cold cache).
_SIGS = collections.defaultdict(set)
_KERNELS = ("ddnumba.kernels.",)       # (the modules whose compiles are recorded)


def _literal_copies(sigs):
    """``literal_allowances.literal_copies`` (loaded from beside this file: a copy of
    these hooks elsewhere, as tests/test_conftest_checks.py makes, still finds it)."""
    import importlib.util
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                        "literal_allowances.py")
    spec = importlib.util.spec_from_file_location("ddnumba_literal_allowances", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.literal_copies(sigs)


def _listen(compiles, sigs):
    """Count every compile into ``compiles`` and record the kernels' signatures in
    ``sigs`` (Numba's compile event: it fires for a compile, not a cache load)."""
    from numba.core import event, types

    class CompileCounter(event.Listener):
        def on_start(self, ev):
            f = ev.data["dispatcher"].py_func
            name = f"{f.__module__}.{f.__qualname__}"
            compiles[name] += 1
            if f.__module__.startswith(_KERNELS):
                args = tuple(ev.data["args"])
                sigs[name].add((str(tuple(types.unliteral(a) for a in args)),
                                str(args)))

        def on_end(self, ev):
            pass

    event.register("numba:compile", CompileCounter())


def pytest_configure(config):
    _listen(_COMPILES, _SIGS)
    if _distributing(config):
        _compile_runtime_first(config)


# The suite runs in parallel worker processes (pytest-xdist: ``-n auto`` in the
# pyproject's ``addopts``; ``-n 0`` runs it in one process). On a fresh checkout the
# first native dataflow compiles the native runtime (minutes): every worker would
# compile it at once, each with the compile helper beside it. The controller compiles
# it once before the workers start, in a subprocess (itself using both cores through
# the helper, see ddnumba.native.compile_runtime), and the workers load it from
# Numba's cache. With the runtime cached already the subprocess only checks that.
_WARM_UP = """
import collections, json, sys
sys.path.insert(0, "tests")
from conftest import _listen, _literal_copies
kernel_sigs = collections.defaultdict(set)
_listen(collections.Counter(), kernel_sigs)
from ddnumba import native
from ddnumba.kernels import runtime
if native._cache_entries(runtime.run) != 0:
    sys.exit(0)          # cached (or a cache layout this check cannot read)
print("ddnumba tests: compiling the native runtime once, before the test workers "
      "start (a few minutes on a fresh checkout)", file=sys.stderr, flush=True)
import ddnumba as dd
from ddnumba.algorithms import reachability
df = dd.Dataflow(engine="native")
ri, roots = df.new_input(["node"])
ei, edges = df.new_input(["src", "dst"])
out = reachability(roots, edges).capture()
ri.insert([1], time=0)
ei.insert([1, 2], [2, 3], time=0)
ri.advance_to(1)
ei.advance_to(1)
df.run()
got = sorted(r["node"] for r in out.at(0).to_pylist())
assert got == [1, 2, 3], got
from ddnumba.kernels import seqloop
sigs = seqloop.run_times.signatures
if len(sigs) != 1:
    print(f"ddnumba tests: kernels.seqloop.run_times has {len(sigs)} signatures after "
          f"the runtime's compile (a signature in ddnumba.native differs from the one "
          f"its caller uses)", file=sys.stderr)
    sys.exit(3)
copies = _literal_copies(kernel_sigs)
if copies:
    print(json.dumps(copies), file=sys.stderr)
    sys.exit(4)
"""


def _distributing(config):
    """Whether this process is the controller of a run in worker processes."""
    return (not hasattr(config, "workerinput")
            and bool(getattr(config.option, "numprocesses", 0))
            and not config.getoption("collectonly"))


def _compile_runtime_first(config):
    capman = config.pluginmanager.getplugin("capturemanager")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with capman.global_and_fixture_disabled():
        proc = subprocess.run([sys.executable, "-c", _WARM_UP], cwd=root)
    if proc.returncode == 3:
        _FAILED_ELSEWHERE.append("the up-front compile of the native runtime compiled "
                                 "kernels.seqloop.run_times for two signatures")
    elif proc.returncode == 4:
        _FAILED_ELSEWHERE.append("the up-front compile of the native runtime compiled "
                                 "kernels for literal arguments as well as plain ones "
                                 "(printed above)")
    elif proc.returncode != 0:
        # (the workers then compile it themselves, and the tests say what is wrong)
        _FAILED_ELSEWHERE.append(f"the up-front compile of the native runtime failed "
                                 f"(exit status {proc.returncode})")


def pytest_collection_modifyitems(config, items):
    """Tests marked ``slow`` first (a stable sort: the rest keep their order), so that
    parallel workers do not wait at the end on one long test started last."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """(controller) A worker's report of kernels it compiled twice."""
    out = getattr(node, "workeroutput", {})
    for name, pairs in out.get("ddnumba_kernel_sigs", {}).items():
        _SIGS[name].update(tuple(p) for p in pairs)
    twice = out.get("ddnumba_compiled_twice")
    if twice:
        worker = getattr(node, "workerinput", {}).get("workerid", "?")
        _FAILED_ELSEWHERE.append(f"worker {worker}: kernels compiled more than once "
                                 f"(a signature in ddnumba.native differs from the one "
                                 f"its caller uses): {twice}")


# (tryfirst: a worker sends its workeroutput in its own pytest_sessionfinish)
@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session, exitstatus):
    twice = {k: _COMPILES[k] for k in _ONCE if _COMPILES[k] > 1}
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        if twice:
            workeroutput["ddnumba_compiled_twice"] = twice  # (sent to the controller)
        workeroutput["ddnumba_kernel_sigs"] = {k: sorted(v) for k, v in _SIGS.items()}
    problems = list(_FAILED_ELSEWHERE)
    copies = _literal_copies(_SIGS) if workeroutput is None else {}
    if copies:
        problems.append("kernels compiled for literal arguments as well as plain ones "
                        "(each compile is avoidable: pass np.int64(...), rows.BTRUE or "
                        "rows.BFALSE, or start an accumulator at np.int64(0); see "
                        "tests/test_kernel_literals.py): " + "; ".join(
                            f"{k}: {v}" for k, v in sorted(copies.items())))
    if twice:
        problems.append(f"kernels compiled more than once in this process (a "
                        f"signature in ddnumba.native differs from the one its caller "
                        f"uses): {twice}")
    for p in problems:
        print(f"\n{p}")
    if problems:
        session.exitstatus = 1

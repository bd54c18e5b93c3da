"""The first run() of a process that must compile the native runtime says so on stderr
after ``COMPILE_NOTICE_S`` (compiling takes minutes on a fresh machine, and a silent
first run looks hung); a run that does not compile says nothing."""
import time

import numpy as np

import ddnumba as dd
from ddnumba import native as N
from ddnumba.kernels import runtime as _rt


def test_slow_block_is_announced_and_timed(capsys):
    with N._SlowNotice(0.05, "slow thing..."):
        time.sleep(0.4)
    err = capsys.readouterr().err
    assert "slow thing..." in err and "done in" in err


def test_fast_block_says_nothing(capsys):
    with N._SlowNotice(0.3, "slow thing..."):
        pass
    time.sleep(0.5)                 # the timer was cancelled: it never fires
    assert capsys.readouterr().err == ""


def _run_a_native_count():
    """A small native dataflow run once (the runtime compiled or loaded by then);
    returns it and its input."""
    df = dd.Dataflow(engine="native")
    inp, c = df.new_input(["k"])
    c.count().probe()
    inp.insert(np.arange(3), time=0)
    inp.advance_to(1)
    df.run()
    return df, inp


def test_the_engine_announces_only_a_cold_runtime(monkeypatch):
    df, inp = _run_a_native_count()  # compiled (or loaded) by now, in any order
    assert not N._cold(_rt.run)
    assert N._cold(object())
    # pretend the runtime had not been compiled in this process: the run is wrapped
    used = []

    class Recorder:
        def __init__(self, delay, message):
            used.append((delay, message))

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr(N, "_cold", lambda d: True)
    monkeypatch.setattr(N, "_SlowNotice", Recorder)
    df._native._run_fn = _rt.run
    df._native._prepared = False
    inp.insert(np.arange(3), time=1)
    inp.advance_to(2)
    df.run()
    assert used == [(N.COMPILE_NOTICE_S, N.COMPILE_NOTICE)]
    # once resolved to the compiled entry point, runs are not wrapped again
    inp.insert(np.arange(3), time=2)
    inp.advance_to(3)
    df.run()
    assert len(used) == 1


def test_the_loop_kernel_is_compiled_first_for_the_signature_its_caller_uses():
    from ddnumba.kernels import seqloop
    _run_a_native_count()
    sig = N.seq_run_times_signature()
    # compile_runtime compiled (or loaded) it for this signature and no other; that
    # the runtime calls it with the same one is checked where kernels compile (see
    # tests/conftest.py)
    assert [tuple(s) for s in seqloop.run_times.signatures] == [sig]
    assert sig[6].dtype is _rt.BATCH_TYPE


# --------------------------------------------------------------- the compile helper
# On a cold start compile_runtime has a helper process compile the loop kernel into
# Numba's cache while this process compiles the round-wise loop; the tests below take
# the decisions and the order apart with stand-ins for the kernels (a real cold
# compile takes minutes), and check the parts that touch Numba and a real process.


class _Disp:
    """Stands in for a Numba dispatcher: records what it is asked to compile."""

    def __init__(self, name, log, fail=False, compiled=()):
        self.name, self.log, self.fail, self.signatures = name, log, fail, compiled

    def compile(self, sig):
        self.log.append((self.name, sig))
        if self.fail:
            raise RuntimeError(f"{self.name} failed")


def _stand_ins(monkeypatch, helper_code=None, wanted=True, cached=False, fail=False):
    """Replace the kernels compile_runtime compiles; the helper (when wanted) runs
    ``helper_code`` in a real process. Returns the call log and the started helpers."""
    import subprocess
    import sys
    import types as pytypes
    log, started = [], []
    rt = pytypes.SimpleNamespace(_run_loop=_Disp("_run_loop", log, fail=fail),
                                 run=_Disp("run", log))
    seq = pytypes.SimpleNamespace(
        run_times=_Disp("run_times", log, compiled=("x",) if cached else ()))
    monkeypatch.setattr(N, "_rt", rt)
    monkeypatch.setattr(N, "_seq", seq)
    monkeypatch.setattr(N, "seq_run_times_signature", lambda: "SEQ")
    monkeypatch.setattr(N, "_helper_wanted", lambda: wanted)

    def start():
        if helper_code is None:
            return None
        p = subprocess.Popen([sys.executable, "-c", helper_code])
        started.append(p)
        return p

    monkeypatch.setattr(N, "_start_helper", start)
    return log, started


def test_a_cold_start_compiles_the_round_wise_loop_while_the_helper_works(
        monkeypatch, capsys):
    from numba import types
    log, started = _stand_ins(monkeypatch, "import time; time.sleep(0.3)")
    N.compile_runtime(("P", "S", "F"))
    assert log == [("_run_loop", ("P", "S", types.int64)), ("run_times", "SEQ"),
                   ("run", ("P", "S", "F"))]
    assert started[0].returncode == 0           # waited for before run_times
    assert capsys.readouterr().err == ""


def test_a_failed_helper_is_said_and_its_part_compiled_here(monkeypatch, capsys):
    log, started = _stand_ins(monkeypatch, "import sys; sys.exit(3)")
    N.compile_runtime(("P", "S", "F"))
    assert [name for name, _ in log] == ["_run_loop", "run_times", "run"]
    assert "exit status 3" in capsys.readouterr().err


def test_without_a_helper_the_loop_kernel_goes_first(monkeypatch):
    for kw in ({"wanted": False, "helper_code": "pass"}, {"helper_code": None}):
        log, started = _stand_ins(monkeypatch, **kw)
        N.compile_runtime(("P", "S", "F"))
        assert log == [("run_times", "SEQ"), ("run", ("P", "S", "F"))]
        assert started == []
    log, started = _stand_ins(monkeypatch, "pass", cached=True)
    N.compile_runtime(("P", "S", "F"))
    assert log == [("run", ("P", "S", "F"))] and started == []


def test_a_helper_that_does_not_finish_is_stopped_and_its_part_compiled_here(
        monkeypatch, capsys):
    log, started = _stand_ins(monkeypatch, "import time; time.sleep(60)")
    monkeypatch.setattr(N, "HELPER_MIN_WAIT_S", 1.0)
    t0 = time.monotonic()
    N.compile_runtime(("P", "S", "F"))
    assert time.monotonic() - t0 < 30
    assert started[0].returncode not in (None, 0)   # killed
    assert [name for name, _ in log] == ["_run_loop", "run_times", "run"]
    assert "did not finish within 1 s" in capsys.readouterr().err


def test_every_compile_of_compile_runtime_writes_the_cache_under_the_lock(
        monkeypatch):
    from numba.core.caching import IndexDataCacheFile
    original = IndexDataCacheFile.save
    for kw in ({"helper_code": "pass"}, {"helper_code": None}):
        log, started = _stand_ins(monkeypatch, **kw)
        locked = []
        for d in (N._rt._run_loop, N._rt.run, N._seq.run_times):
            d.compile = (lambda f: lambda sig: (
                locked.append(IndexDataCacheFile.save is not original), f(sig)))(
                    d.compile)
        N.compile_runtime(("P", "S", "F"))
        assert len(locked) == len(log) >= 2 and all(locked)
        assert IndexDataCacheFile.save is original


def test_the_helper_does_not_outlive_a_failed_compile(monkeypatch):
    import pytest
    log, started = _stand_ins(monkeypatch, "import time; time.sleep(60)", fail=True)
    with pytest.raises(RuntimeError, match="_run_loop failed"):
        N.compile_runtime(("P", "S", "F"))
    assert started[0].returncode not in (None, 0)   # killed, not waited for


def test_the_helper_is_wanted_on_a_cold_cache_with_two_cores(monkeypatch):
    import os
    monkeypatch.delenv("DDNUMBA_COMPILE_HELPER", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    for entries, wanted in ((0, True), (1, False), (None, False)):
        monkeypatch.setattr(N, "_cache_entries", lambda d, e=entries: e)
        assert N._helper_wanted() is wanted
    monkeypatch.setattr(N, "_cache_entries", lambda d: 0)
    monkeypatch.setenv("DDNUMBA_COMPILE_HELPER", "0")
    assert not N._helper_wanted()
    monkeypatch.setenv("DDNUMBA_COMPILE_HELPER", "1")
    assert N._helper_wanted()
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0}, raising=False)
    assert not N._helper_wanted()


def _probe_module(tmp_path):
    """A module of one cached Numba function, in ``tmp_path`` (its cache beside it)."""
    import importlib.util
    src = tmp_path / "probe_mod.py"
    src.write_text("from numba import njit\n\n\n@njit(cache=True)\n"
                   "def f(x):\n    return x + 1\n")
    spec = importlib.util.spec_from_file_location("probe_mod", src)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_cache_probe_tells_a_cached_function_from_a_cold_one(tmp_path):
    mod = _probe_module(tmp_path)
    assert N._cache_entries(mod.f) == 0
    assert mod.f(1) == 2
    assert N._cache_entries(mod.f) == 1
    mod.f(1.5)
    assert N._cache_entries(mod.f) == 2
    assert N._cache_entries(object()) is None


def test_cache_saves_wait_for_the_lock_while_serialized(tmp_path):
    """Inside ``serialized_cache_saves`` a write to Numba's cache waits while another
    process holds the lock of that cache directory; outside, Numba's own save is back.
    (An order of events, not a duration: the other process writes the time it lets go
    just before it does.)"""
    import subprocess
    import sys
    import time
    from numba.core.caching import IndexDataCacheFile
    mod = _probe_module(tmp_path)
    cache_dir = str(mod.f._cache._cache_path)
    lock = f"{cache_dir}/{N.SAVE_LOCK_NAME}"
    released = tmp_path / "released"
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import fcntl, os, sys, time\n"
         f"os.makedirs({cache_dir!r}, exist_ok=True)\n"
         f"f = open({lock!r}, 'a'); fcntl.flock(f, fcntl.LOCK_EX)\n"
         "print('locked', flush=True); time.sleep(2.5)\n"
         f"open({str(released)!r}, 'w').write(repr(time.time()))\n"
         "f.close()\n"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        original = IndexDataCacheFile.save
        with N.serialized_cache_saves():
            assert IndexDataCacheFile.save is not original
            assert mod.f(1) == 2                    # compiles, then saves (waits)
            saved_at = time.time()
        assert IndexDataCacheFile.save is original
    finally:
        holder.wait(timeout=60)
    assert saved_at >= float(released.read_text())
    assert N._cache_entries(mod.f) == 1


def test_the_helper_process_finds_the_loop_kernel(tmp_path):
    """The helper's command, run for real (from another directory) after this process
    has the runtime: it must import, build the same signature and find it in the same
    cache (a compile here would mean it computes another signature or looks
    elsewhere)."""
    import subprocess
    import sys
    _run_a_native_count()
    cmd = N.helper_command()
    assert cmd[0] == sys.executable
    cmd[-1] += ("; from ddnumba.kernels import seqloop as s; "
                "sys.exit(5 if s.run_times.stats.cache_misses else 0)")
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=900,
                       cwd=tmp_path)
    assert r.returncode == 0, r.stderr


def _helper_probe(cmd, report):
    """``cmd`` (a helper command) with its compile replaced by ``report``."""
    assert cmd[-1].endswith("n._compile_loop_kernel()")
    return cmd[:-1] + [cmd[-1][:-len("n._compile_loop_kernel()")] + report]


def test_the_helper_imports_the_callers_kernels(tmp_path):
    """A caller that imports ``ddnumba.kernels`` from another directory through a
    finder of its own (as ``bench ab``'s children do with another checkout): its
    helper must import that directory's kernels, not the ones an import by path finds
    (it would compile another tree's loop kernel into another cache)."""
    import os
    import shutil
    import subprocess
    import sys
    import ddnumba.kernels
    src = os.path.dirname(os.path.realpath(ddnumba.kernels.__file__))
    kdir = tmp_path / "other" / "kernels"
    shutil.copytree(src, kdir, ignore=shutil.ignore_patterns("__pycache__"))
    parent = (
        "import importlib.abc, importlib.util, subprocess, sys\n"
        "class F(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'ddnumba.kernels':\n"
        f"            return importlib.util.spec_from_file_location(name, "
        f"{str(kdir / '__init__.py')!r}, submodule_search_locations=[{str(kdir)!r}])\n"
        "sys.meta_path.insert(0, F())\n"
        "import ddnumba.native as N, ddnumba.kernels as k\n"
        "cmd = N.helper_command()\n"
        "cmd = cmd[:-1] + [cmd[-1][:-len('n._compile_loop_kernel()')] + "
        "'import ddnumba.kernels.seqloop as s; print(s.__file__)']\n"
        "r = subprocess.run(cmd, capture_output=True, text=True)\n"
        "print(k.__file__); print(r.returncode); print(r.stdout.strip()); "
        "print(r.stderr.strip()[-300:])\n")
    r = subprocess.run([sys.executable, "-c", parent], capture_output=True,
                       text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    mine, rc, helpers, err = (r.stdout.splitlines() + ["", "", "", ""])[:4]
    assert os.path.realpath(mine) == str((kdir / "__init__.py").resolve())
    assert rc == "0", err
    assert os.path.realpath(helpers) == str((kdir / "seqloop.py").resolve())


def test_a_helper_that_imports_another_ddnumba_exits(monkeypatch):
    """Should the helper's ``ddnumba`` not be the caller's file, it exits non-zero with
    a message (and the caller compiles its part itself) rather than compiling another
    tree's kernel."""
    import subprocess
    import ddnumba
    monkeypatch.setattr(ddnumba, "__file__", "/nowhere/ddnumba/__init__.py")
    cmd = _helper_probe(N.helper_command(), "sys.exit(0)")
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode != 0
    assert "not the caller's /nowhere/ddnumba/__init__.py" in r.stderr

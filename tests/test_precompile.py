"""``ddnumba compile``: the runtime readied ahead of a first run, the built-in queries'
answers checked, the cache's state said (and its absence an error)."""
from __future__ import annotations

import io
import os
import subprocess
import sys

from ddnumba import algorithms as alg
from ddnumba import precompile as pc
from ddnumba.cli import main
from ddnumba.kernels import runtime as rt
from ddnumba.native import _cache_entries


def test_compile_readies_the_runtime_checks_every_query_and_says_where_it_is(capsys):
    assert main(["compile"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 3, out
    assert out[0].startswith("ddnumba compile: native runtime ")
    assert " in " in out[0] and out[0].endswith(" s")
    assert out[1].startswith("ddnumba compile: reachability, connected-components, "
                             "count, join over Parquet change batches, on the native "
                             "and the python engine: answers checked")
    assert out[2] == f"ddnumba compile: cached in {rt.run._cache._cache_path}"
    # (the test session's runtime is cached: the command found or wrote it)
    assert _cache_entries(rt.run)


def test_a_wrong_answer_is_a_mismatch_and_exit_status_1(capsys, monkeypatch):
    # reachability that forgets the edges: each root reaches itself only
    before = os.environ.get("DDNUMBA_ENGINE")
    monkeypatch.setattr(alg, "reachability", lambda roots, edges: roots.map(
        lambda n: (n, n), names=["root", "node"]))
    assert main(["compile"]) == 1
    out = capsys.readouterr().out
    for engine in ("native", "python"):
        assert f"MISMATCH: reachability ({engine} engine): the output holds " \
               f"[((0, 0), 1)], not [((0, 0), 1), ((0, 1), 1), ((0, 3), 1), " \
               f"((0, 4), 1)]" in out
    assert "wrong answers" in out
    # the other queries were checked, and are right
    for q in ("connected-components", "count", "join"):
        assert f"MISMATCH: {q}" not in out
    assert "cached in" not in out
    assert os.environ.get("DDNUMBA_ENGINE") == before


def test_each_query_runs_on_the_engine_it_is_checked_on(monkeypatch):
    import ddnumba as dd
    seen = []
    real = dd.Dataflow.run

    def run(self):
        got = real(self)
        seen.append(bool(self._native))
        return got
    monkeypatch.setattr(dd.Dataflow, "run", run)
    monkeypatch.setenv("DDNUMBA_ENGINE", "auto")
    assert pc.precompile(out=io.StringIO()) == 0
    # the native engine's runs first (every query), then the Python engine's
    assert True in seen and False in seen
    k = seen.index(False)
    assert all(seen[:k]) and not any(seen[k:])
    assert os.environ["DDNUMBA_ENGINE"] == "auto"


def test_a_first_compile_is_said_and_a_cache_left_empty_is_an_error(
        capsys, monkeypatch):
    # as on a machine whose Numba cannot write its cache: nothing cached before or
    # after (the runtime itself is this session's, readied by prepare())
    monkeypatch.setattr(pc, "_compiled_here", lambda: False)
    monkeypatch.setattr(pc, "_cached_runtimes", lambda: 0)
    assert main(["compile"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("ddnumba compile: native runtime compiled in ")
    assert "answers checked" in out[1]
    assert out[2].startswith("ddnumba compile: Numba's cache holds no native runtime")
    assert out[2].endswith("every new process will compile it again; set "
                           "NUMBA_CACHE_DIR to a writable directory")


def test_cache_state_unknown_is_neither_compiled_nor_loaded(capsys, monkeypatch):
    monkeypatch.setattr(pc, "_compiled_here", lambda: False)
    monkeypatch.setattr(pc, "_cached_runtimes", lambda: None)
    assert main(["compile"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("ddnumba compile: native runtime ready in ")


def test_compile_is_a_command_of_the_console_script():
    env = dict(os.environ)
    r = subprocess.run([sys.executable, "-m", "ddnumba", "compile", "--help"],
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "Numba's on-disk cache" in r.stdout and "exit status" in r.stdout
    r = subprocess.run([sys.executable, "-m", "ddnumba"], capture_output=True,
                       text=True, env=env, timeout=120)
    assert r.returncode == 2
    assert "demo, compile or run" in r.stderr

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


def test_the_engine_announces_only_a_cold_runtime(monkeypatch):
    df = dd.Dataflow(engine="native")
    inp, c = df.new_input(["k"])
    c.count().probe()
    inp.insert(np.arange(3), time=0)
    inp.advance_to(1)
    df.run()                        # compiled (or loaded) by now, in any order of tests
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
    df = dd.Dataflow(engine="native")
    inp, c = df.new_input(["k"])
    c.count().probe()
    inp.insert(np.arange(3), time=0)
    inp.advance_to(1)
    df.run()
    sig = N.seq_run_times_signature()
    # compile_runtime compiled (or loaded) it for this signature and no other; that
    # the runtime calls it with the same one is checked where kernels compile (see
    # tests/conftest.py)
    assert [tuple(s) for s in seqloop.run_times.signatures] == [sig]
    assert sig[6].dtype is _rt.BATCH_TYPE

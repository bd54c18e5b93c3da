"""The suite's own checks (tests/conftest.py) hold when it runs in worker processes:
a kernel compiled twice fails the session whether a worker or the only process
compiled it, and so does a kernel compiled for a literal argument as well as a plain
one; a failed up-front compile of the native runtime fails it, and tests marked
``slow`` are collected first.

Each case runs pytest in a subprocess on a small module in a temporary directory,
whose conftest loads this suite's conftest under another name and takes its hooks;
the function watched for a second compile is the module's own (compiling it costs
milliseconds, where ``seqloop.run_times`` costs minutes)."""
import os
import subprocess
import sys
import textwrap

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))

CONFTEST = textwrap.dedent(f"""
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "ddnumba_suite_conftest", {os.path.join(HERE, "conftest.py")!r})
    suite = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(suite)
    suite._ONCE = suite._ONCE + ("test_twice.twice",)
    suite._KERNELS = suite._KERNELS + ("test_twice",)
    WARM_UP = {{WARM_UP}}
    if WARM_UP is not None:
        suite._WARM_UP = WARM_UP
    pytest_configure = suite.pytest_configure
    pytest_collection_modifyitems = suite.pytest_collection_modifyitems
    pytest_testnodedown = suite.pytest_testnodedown
    pytest_sessionfinish = suite.pytest_sessionfinish
""")

MODULE = textwrap.dedent("""
    import pytest
    from numba import njit

    @njit
    def twice(x):
        return x + 1

    def test_first():
        assert twice(1) == 2
        if {COMPILE_TWICE}:
            assert twice(1.5) == 2.5       # a second signature: a second compile

    @njit
    def add(x, n):
        return x + n

    @njit
    def accumulate(k):
        # n is 0 (a literal) until typing meets the value add returns: add is
        # compiled for Literal[int](0), then for int64
        n = 0
        for i in range(k):
            n = add(n, i)
        return n

    @pytest.mark.slow
    def test_last_but_slow():
        if {LITERAL}:
            assert accumulate(4) == 6
""")


def _run(tmp_path, args, *, compile_twice=False, warm_up=None, literal=False):
    (tmp_path / "conftest.py").write_text(CONFTEST.replace("{WARM_UP}", repr(warm_up)))
    (tmp_path / "test_twice.py").write_text(
        MODULE.replace("{COMPILE_TWICE}", str(compile_twice))
        .replace("{LITERAL}", str(literal)))
    (tmp_path / "pytest.ini").write_text(
        "[pytest]\nmarkers =\n    slow: long\n")
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "numba-cache"))
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("args", [["-n", "2"], ["-n", "0"]], ids=["workers", "one"])
def test_a_kernel_compiled_twice_fails_the_session(tmp_path, args):
    if args[1] != "0":
        ok = _run(tmp_path, args, warm_up="pass")
        assert ok.returncode == 0, ok.stdout + ok.stderr
        assert "compiled more than once" not in ok.stdout
    bad = _run(tmp_path, args, compile_twice=True, warm_up="pass")
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "2 passed" in bad.stdout
    assert "'test_twice.twice': 2" in bad.stdout
    if args[1] != "0":
        assert "worker gw" in bad.stdout         # reported by the worker that ran it


@pytest.mark.parametrize("args", [["-n", "2"], ["-n", "0"]], ids=["workers", "one"])
def test_a_kernel_compiled_for_a_literal_and_a_plain_argument_fails_the_session(
        tmp_path, args):
    ok = _run(tmp_path, args, warm_up="pass")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    # (with workers: a worker compiles it, the controller reports it)
    bad = _run(tmp_path, args, warm_up="pass", literal=True)
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "2 passed" in bad.stdout
    assert "kernels compiled for literal arguments as well as plain ones" in bad.stdout
    assert "test_twice.add: ['(Literal[int](0), int64)', '(int64, int64)']" \
        in bad.stdout, bad.stdout


@pytest.mark.parametrize("code, says", [
    (3, "compiled kernels.seqloop.run_times for two signatures"),
    (4, "compiled kernels for literal arguments as well as plain ones"),
    (1, "the up-front compile of the native runtime failed (exit status 1)")])
def test_a_failed_up_front_compile_fails_the_session(tmp_path, code, says):
    proc = _run(tmp_path, ["-n", "2"], warm_up=f"import sys; sys.exit({code})")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "2 passed" in proc.stdout and says in proc.stdout


def test_one_process_compiles_nothing_up_front(tmp_path):
    proc = _run(tmp_path, ["-n", "0"], warm_up="import sys; sys.exit(3)")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_slow_tests_are_collected_first(tmp_path):
    proc = _run(tmp_path, ["--collect-only"], warm_up="pass")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ids = [line for line in proc.stdout.splitlines() if "::" in line]
    assert ids == ["test_twice.py::test_last_but_slow", "test_twice.py::test_first"]

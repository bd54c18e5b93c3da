"""The raw-allocator hook that puts large compiled-code arrays on transparent huge pages
(kernels.hooks.use_huge_pages)."""
import os
import subprocess
import sys
import textwrap

import pytest

from ddnumba.kernels import hooks

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="the hook is installed on Linux only")


def _child(code, **env):
    full = {k: v for k, v in os.environ.items()
            if k not in ("DDNUMBA_HUGE_PAGES", "PYTHONMALLOC", "PYTHONDEVMODE",
                         "PYTHONTRACEMALLOC")}
    full.update(env)
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=full,
                         capture_output=True, text=True, timeout=1500)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


@linux_only
def test_large_compiled_arrays_are_marked_for_huge_pages_while_hooked():
    # In a fresh process, where a 64 MiB block gets a mapping of its own (above
    # glibc's largest mmap threshold): a long-running process may serve it from a
    # heap that earlier huge-page blocks already marked.
    code = """
        import re
        import numpy as np
        from numba import njit
        from ddnumba.kernels import hooks

        @njit
        def filled(n):
            a = np.empty(n, np.int64)
            a[:] = 7
            return a

        def flags(addr):
            inside = False
            with open("/proc/self/smaps") as f:
                for line in f:
                    m = re.match(r"^([0-9a-f]+)-([0-9a-f]+) ", line)
                    if m:
                        inside = int(m.group(1), 16) <= addr < int(m.group(2), 16)
                    elif inside and line.startswith("VmFlags:"):
                        return line.split()[1:]

        print(hooks.use_huge_pages(), hooks.huge_pages_in_use())
        a = filled(1 << 23)
        print(int(a.sum()) == 7 << 23, "hg" in flags(a.ctypes.data + (1 << 25)))
        print(hooks.use_huge_pages(False), hooks.huge_pages_in_use())
        b = filled(1 << 23)
        print(int(b[-1]) == 7, "hg" in flags(b.ctypes.data + (1 << 25)))
    """
    assert _child(code) == ["True", "True", "True", "True", "False", "False", "True",
                            "False"]


def test_unhooking_restores_the_default_allocator(monkeypatch):
    monkeypatch.delenv("DDNUMBA_HUGE_PAGES", raising=False)
    was = hooks.huge_pages_in_use()
    try:
        if not hooks.use_huge_pages():
            pytest.skip("the hook is not installed here (not Linux, or not over the "
                        "default allocator)")
        assert hooks._raw_allocator().malloc == hooks._ALLOC["hooked"].malloc
        assert hooks.use_huge_pages(False) is False
        assert hooks._raw_allocator().malloc == hooks._ALLOC["default"].malloc
        assert hooks.use_huge_pages() is True
    finally:
        hooks.use_huge_pages(was)


@linux_only
def test_not_installed_when_switched_off_or_over_another_allocator():
    code = """
        from ddnumba.kernels import hooks
        print(hooks.use_huge_pages(), hooks.huge_pages_in_use())
    """
    assert _child(code, DDNUMBA_HUGE_PAGES="1") == ["True", "True"]
    assert _child(code, DDNUMBA_HUGE_PAGES="0") == ["False", "False"]
    # debug hooks wrap the default allocator with a context: left alone
    assert _child(code, PYTHONMALLOC="debug") == ["False", "False"]


@linux_only
def test_tracemalloc_started_later_wraps_the_hook_and_is_not_unhooked():
    code = """
        import tracemalloc
        from ddnumba.kernels import hooks
        print(hooks.use_huge_pages())
        tracemalloc.start()
        print(hooks.huge_pages_in_use(), hooks.use_huge_pages(False))
        tracemalloc.stop()
        print(hooks.huge_pages_in_use())
        tracemalloc.start()
        print(hooks.use_huge_pages())      # not over tracemalloc's wrapper
        tracemalloc.stop()
    """
    assert _child(code) == ["True", "False", "False", "True", "False"]


@linux_only
def test_a_native_run_installs_the_hook_and_is_right():
    code = """
        import ddnumba as dd
        from ddnumba.kernels import hooks
        from ddnumba.algorithms import reachability
        df = dd.Dataflow(engine="native")
        ri, roots = df.new_input(["node"])
        ei, edges = df.new_input(["src", "dst"])
        out = reachability(roots, edges).capture()
        ri.insert([0], time=0)
        ei.insert([0, 1, 2, 5], [1, 2, 3, 6], time=0)
        ri.advance_to(1); ei.advance_to(1); df.run()
        got = sorted((r["root"], r["node"]) for r in out.at(0).to_pylist())
        print(hooks.huge_pages_in_use(), got == [(0, 0), (0, 1), (0, 2), (0, 3)])
    """
    assert _child(code) == ["True", "True"]
    assert _child(code, DDNUMBA_HUGE_PAGES="0") == ["False", "True"]

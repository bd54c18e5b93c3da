"""The perf-map helpers of ddnumba.profiling (naming compiled kernels for perf)."""
import os
import shutil
import subprocess

import numpy as np
import pytest
from numba import njit

from ddnumba.profiling import (compiled_functions, refcount_callers, short_symbol,
                                write_perf_map)


def test_short_symbol_reads_numba_mangling():
    name = ("_ZN7ddnumba7kernels5batch5mergeB4v234B52c8tJTIeFIjxB2IKSgI4Crv"
            "E5TupleI5ArrayIxLi2E1C7mutable7alignedE")
    assert short_symbol(name) == "ddnumba.kernels.batch.merge"
    assert short_symbol("_ZN7ddnumba7kernels7runtime14_reduce_gatherB4v3") == \
        "ddnumba.kernels.runtime._reduce_gather"
    assert short_symbol("gc_collect_main") == "gc_collect_main"


def test_write_perf_map_names_a_freshly_compiled_function(tmp_path):
    @njit                                     # no cache: compiled in this process
    def _ddnumba_profiling_probe(a):
        s = 0
        for x in a:
            s += x
        return s

    assert _ddnumba_profiling_probe(np.arange(5)) == 10
    cres = next(iter(_ddnumba_profiling_probe.overloads.values()))
    entry = cres.library.get_pointer_to_function(cres.fndesc.llvm_func_name)
    path = write_perf_map(str(tmp_path / "perf-test.map"))
    rows = [line.split(" ", 2) for line in open(path).read().splitlines()]
    assert rows, "empty perf map"
    table = {int(a, 16): (int(s, 16), name) for a, s, name in rows}
    assert table[entry][1] == cres.fndesc.llvm_func_name
    addrs = sorted(table)
    for a, b in zip(addrs, addrs[1:]):       # sizes never overlap the next function
        assert 0 < table[a][0] <= b - a
    assert compiled_functions()[entry] == cres.fndesc.llvm_func_name


@pytest.mark.skipif(shutil.which("perf") is None, reason="perf is not installed")
def test_bench_profile_names_the_kernels(tmp_path):
    probe = subprocess.run(["perf", "record", "-o", str(tmp_path / "p.data"), "true"],
                           capture_output=True)
    if probe.returncode != 0:
        pytest.skip("perf record is not permitted here")
    from ddnumba.bench import profile_reach

    fig, rows = profile_reach(200, 50, 2000, out=str(tmp_path / "reach.data"), top=200)
    assert fig["changes"] == 2000
    names = [name for _, _, name in rows]
    assert any(n.startswith("ddnumba.kernels.") for n in names), names[:20]
    assert os.path.getsize(tmp_path / "reach.data") > 0
    assert "refcount" not in fig
    # with the stack words: reference counting is attributed to kernels
    # (enough changes for a few dozen reference counting samples on a busy machine)
    fig, rows = profile_reach(200, 50, 8000, out=str(tmp_path / "reach2.data"), top=50,
                              callers=True)
    share, callers = fig["refcount"]
    assert 0 < share < 100
    assert sum(c for _, c, _ in callers) > 0
    assert any(name.startswith("ddnumba.kernels.") for _, _, name in callers), callers


def _fake_sample(ip, stack_words, offset=0x20, raw_ip=None):
    """Lines of one sample as ``perf report -D`` prints it: the raw event's hex dump
    (header, instruction pointer, ..., at ``offset`` the u64 size of the saved user
    stack and its words), then the sample's description with the stack's offset."""
    raw = bytearray(8) + (ip if raw_ip is None else raw_ip).to_bytes(8, "little")
    raw += bytearray(offset - len(raw)) + (8 * len(stack_words)).to_bytes(8, "little")
    for w in stack_words:
        raw += w.to_bytes(8, "little")
    lines = ["", "0x233c8@p.data [0x40f8]: event: 9", ".",
             f". ... raw event: size {len(raw)} bytes"]
    for i in range(0, len(raw), 16):
        chunk = " ".join(f"{b:02x}" for b in raw[i:i + 16])
        lines.append(f".  {i:04x}:  {chunk:<47}  ................")
    lines += ["", f"123 0x1f2d0 [0x40f8]: PERF_RECORD_SAMPLE(IP, 0x2): 7/7: {ip:#x} "
              "period: 1 addr: 0", "... FP chain: nr:0",
              f"... ustack: size {8 * len(stack_words)}, offset {offset:#x}",
              " ... thread: python:7"]
    return lines


def test_refcount_callers_names_the_first_compiled_caller_on_the_stack(tmp_path):
    mp = tmp_path / "perf-1.map"
    mp.write_text("1000 10 NRT_incref\n1010 10 NRT_decref\n"
                  "2000 100 _ZN7ddnumba7kernels5batch5mergeB4v2\n"
                  "3000 100 _ZN7ddnumba7kernels7runtime8_pairsxyB4v3\n")
    lines = []
    lines += _fake_sample(0x1004, [0x2010, 0x3000])          # incref from merge
    lines += _fake_sample(0x1014, [0x7, 0x1008, 0x3050])      # decref from _pairsxy
    lines += _fake_sample(0x1014, [0x3010])                   # decref from _pairsxy
    lines += _fake_sample(0x1004, [0x9, 0x10])                # no compiled caller
    lines += _fake_sample(0x2040, [0x3000])                   # inside merge itself
    share, rows = refcount_callers(lines, str(mp))
    assert share == pytest.approx(80.0)
    assert rows == [(40.0, 2, "ddnumba.kernels.runtime._pairsxy"),
                    (20.0, 1, "ddnumba.kernels.batch.merge"), (20.0, 1, "?")]
    # the stack belongs to the sample whose raw bytes precede its description: a
    # sample without a stack never borrows the next one's
    lines = _fake_sample(0x1004, [0x2010])[:-2] + _fake_sample(0x1004, [0x3000])
    share, rows = refcount_callers(lines, str(mp))
    assert sorted(rows) == [(50.0, 1, "?"), (50.0, 1, "ddnumba.kernels.runtime._pairsxy")]
    # raw bytes of another event (instruction pointer differs) are not used
    share, rows = refcount_callers(_fake_sample(0x1004, [0x2010], raw_ip=0x1014), str(mp))
    assert rows == [(100.0, 1, "?")]
    # only the first `words` stack words are searched
    share, rows = refcount_callers(_fake_sample(0x1004, [0x9, 0x2010]), str(mp), words=1)
    assert share == 100.0 and rows == [(100.0, 1, "?")]
    assert refcount_callers([], str(mp)) == (0.0, [])

"""The perf-map helpers of ddnumba.profiling (naming compiled kernels for perf)."""
import os
import shutil
import subprocess

import numpy as np
import pytest
from numba import njit

from ddnumba.profiling import compiled_functions, short_symbol, write_perf_map


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

"""Profile the compiled kernels with Linux ``perf``.

Numba's machine code lives in anonymous memory, so ``perf report`` shows it as
``[JIT] tid ...`` with raw addresses. :func:`write_perf_map` writes the addresses of
every compiled function of this process to ``/tmp/perf-<pid>.map``, the file ``perf``
reads to name JIT code, so a profile splits the time by kernel::

    NUMBA_CACHE_DIR=$(mktemp -d) python my_job.py &        # calls write_perf_map()
    perf record -F 999 -p <pid> -o prof.data               # while the job runs
    perf report -i prof.data --no-children --sort sym

Functions loaded from Numba's on-disk cache carry no symbol table, so only their entry
points get names; run with an empty ``NUMBA_CACHE_DIR`` (everything compiles afresh)
to name every function, helpers included. Call :func:`write_perf_map` after the
dataflow's first ``run()`` (everything it uses is compiled by then) and before the
part to profile. ``python -m ddnumba.bench profile`` does all of this for the
reachability benchmark.
"""
from __future__ import annotations

import gc
import os

__all__ = ["write_perf_map", "compiled_functions", "short_symbol", "perf_top"]


def _libraries():
    from numba.core.registry import CPUDispatcher

    for obj in gc.get_objects():
        try:
            if not isinstance(obj, CPUDispatcher):
                continue
        except ReferenceError:       # a dead weak proxy among the heap's objects
            continue
        for cres in list(obj.overloads.values()):
            yield cres


def compiled_functions():
    """``{address: symbol}`` of the Numba functions compiled in this process."""
    results = list(_libraries())
    names = set()
    for cres in results:
        names.add(cres.fndesc.llvm_func_name)
        try:
            mod = cres.library._final_module
            names.update(f.name for f in mod.functions if not f.is_declaration)
        except Exception:        # noqa: BLE001 - a library without a module: skip
            pass
    found = {}
    for cres in results:
        lib = cres.library
        for name in names:
            try:
                addr = lib.get_pointer_to_function(name)
            except Exception:    # noqa: BLE001 - the symbol is not in this library
                continue
            if addr:
                found[int(addr)] = name
    return found


def write_perf_map(path=None):
    """Write ``perf``'s symbol map of the compiled Numba functions; returns its path
    (default ``/tmp/perf-<pid>.map``). A function's size is the distance to the next
    known function (at most 1 MiB), which is exact for code laid out back to back and
    an over-estimate for the last function of a block."""
    path = path or f"/tmp/perf-{os.getpid()}.map"
    found = compiled_functions()
    addrs = sorted(found)
    with open(path, "w") as fh:
        for i, a in enumerate(addrs):
            size = min(addrs[i + 1] - a if i + 1 < len(addrs) else 4096, 1 << 20)
            fh.write(f"{a:x} {size:x} {found[a]}\n")
    return path


def short_symbol(name):
    """A readable name for a Numba symbol: ``_ZN7ddnumba7kernels5batch5mergeB4v2...``
    becomes ``ddnumba.kernels.batch.merge`` (other names are returned unchanged)."""
    if not name.startswith("_ZN"):
        return name
    parts = []
    i = 3
    while i < len(name) and name[i].isdigit():
        j = i
        while j < len(name) and name[j].isdigit():
            j += 1
        n = int(name[i:j])
        parts.append(name[j:j + n])
        i = j + n
    return ".".join(parts) if parts else name


def perf_top(data, top=25):
    """The ``top`` symbols of a ``perf`` recording by share of samples:
    ``[(percent, samples, short name)]``."""
    import re
    import shutil
    import subprocess

    perf = shutil.which("perf")
    if perf is None:
        raise RuntimeError("perf_top: the perf command is not installed")
    out = subprocess.run([perf, "report", "-i", data, "--no-children", "-n", "--sort",
                          "sym", "--stdio"], capture_output=True, text=True, check=True)
    rows = []
    for line in out.stdout.splitlines():
        m = re.match(r"\s*([0-9.]+)%\s+(\d+)\s+\[[.k]\]\s+(\S+)", line)
        if m:
            rows.append((float(m.group(1)), int(m.group(2)), short_symbol(m.group(3))))
    return rows[:top]

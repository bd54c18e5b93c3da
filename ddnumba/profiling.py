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

Reference counting (``NRT_incref`` / ``NRT_decref``, atomic updates Numba makes when
a compiled function takes or drops an array) often tops such a profile, and ``perf``
cannot unwind JIT code to say who calls it. :func:`refcount_callers` reads the stack
words ``perf record --call-graph dwarf`` saved with each sample: the first return
address inside a compiled function names the caller (``bench profile --callers``).
"""
from __future__ import annotations

import gc
import os

__all__ = ["write_perf_map", "compiled_functions", "short_symbol", "perf_top",
           "refcount_callers"]


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


REFCOUNT = ("NRT_incref", "NRT_decref")


def _read_map(path):
    """``(starts, entries)`` of a perf map, sorted by address."""
    entries = []
    with open(path) as fh:
        for line in fh:
            parts = line.rstrip("\n").split(" ", 2)
            if len(parts) == 3:
                entries.append((int(parts[0], 16), int(parts[1], 16), parts[2]))
    entries.sort()
    return [e[0] for e in entries], entries


def _symbol_at(starts, entries, addr):
    import bisect

    i = bisect.bisect_right(starts, addr) - 1
    if i >= 0 and addr < entries[i][0] + entries[i][1]:
        return entries[i][2]
    return None


def _dump_samples(lines):
    """``(ip, stack bytes)`` of every sample in ``perf report -D`` output (the user
    stack saved by ``--call-graph dwarf``; empty when there is none).

    ``perf report -D`` prints each event's raw bytes first (after a ``... @file
    [size]: event: N`` line), then its description: for a sample, the line with its
    instruction pointer and the offset of the saved stack within the raw bytes. A
    sample's raw bytes start with the event header and then the instruction pointer,
    which is checked, so stack words are never taken from another event."""
    import re
    import struct

    sample = re.compile(r"PERF_RECORD_SAMPLE\(.*?\): \d+/\d+: (0x[0-9a-f]+)")
    stack = re.compile(r"ustack: size \d+, offset (0x[0-9a-f]+)")
    header = re.compile(r"^0x[0-9a-f]+@\S* \[0x[0-9a-f]+\]: event:")
    hexline = re.compile(r"^\.\s+[0-9a-f]{4}:\s+((?:[0-9a-f]{2}\s?)+)")
    ip = None
    off = None
    raw = b""
    pending = bytearray()       # raw bytes of the event being printed

    def done():
        if ip is None:
            return None
        if (off is None or len(raw) < off + 8 or len(raw) < 16
                or struct.unpack_from("<Q", raw, 8)[0] != ip):
            return ip, b""
        return ip, raw[off + 8:]    # after the u64 size of the stack dump

    for line in lines:
        m = sample.search(line)
        if m:
            out = done()
            if out is not None:
                yield out
            ip, off, raw = int(m.group(1), 16), None, bytes(pending)
            pending = bytearray()
            continue
        m = stack.search(line)
        if m:
            off = int(m.group(1), 16)
            continue
        if header.match(line):
            pending = bytearray()
            continue
        m = hexline.match(line)
        if m:
            pending += bytes(int(x, 16) for x in m.group(1).split())
    out = done()
    if out is not None:
        yield out


def refcount_callers(dump_lines, map_path, top=20, words=64):
    """Attribute the reference-count samples of a recording to their callers.

    ``dump_lines``: the lines of ``perf report -D -i <data>`` for a recording made
    with ``--call-graph dwarf`` of a process whose perf map is ``map_path`` (see
    :func:`write_perf_map`). For each sample in ``NRT_incref`` / ``NRT_decref``, the
    first of the ``words`` stack words that is an address inside another compiled
    function names the caller. Returns ``(share, rows)``: the percentage of all
    samples spent in reference counting, and ``[(percent of all samples, samples,
    caller)]`` for the ``top`` callers (``"?"``: no compiled caller found, e.g. a
    call from C code such as the typed list's).
    """
    import collections
    import struct

    starts, entries = _read_map(map_path)
    total = 0
    in_rc = 0
    callers = collections.Counter()
    for ip, stack in _dump_samples(dump_lines):
        total += 1
        name = _symbol_at(starts, entries, ip)
        if name not in REFCOUNT:
            continue
        in_rc += 1
        who = "?"
        for w in range(min(words, len(stack) // 8)):
            addr = struct.unpack_from("<Q", stack, 8 * w)[0]
            sym = _symbol_at(starts, entries, addr)
            if sym is not None and sym not in REFCOUNT:
                who = short_symbol(sym)
                break
        callers[who] += 1
    if total == 0:
        return 0.0, []
    rows = [(100.0 * c / total, c, who) for who, c in callers.most_common(top)]
    return 100.0 * in_rc / total, rows

"""Profile the compiled kernels with Linux ``perf``.

Numba's machine code lives in anonymous memory, so ``perf report`` shows it as
``[JIT] tid ...`` with raw addresses. :func:`write_perf_map` writes the addresses of
every compiled function of this process to ``/tmp/perf-<pid>.map``, the file ``perf``
reads to name JIT code, so a profile splits the time by kernel::

    export NUMBA_CACHE_DIR=$(mktemp -d) DDNUMBA_COMPILE_HELPER=0
    python my_job.py &                                     # calls write_perf_map()
    perf record -F 999 -p <pid> -o prof.data               # while the job runs
    perf report -i prof.data --no-children --sort sym

Functions loaded from Numba's on-disk cache carry no symbol table, so only their entry
points get names; run with an empty ``NUMBA_CACHE_DIR`` (everything compiles afresh)
to name every function, helpers included, and with ``DDNUMBA_COMPILE_HELPER=0``: on a
cold start, a helper process compiles the loop kernel, which then reaches this process
through the cache (``ddnumba.native.compile_runtime``). Call :func:`write_perf_map`
after the dataflow's first ``run()`` (everything it uses is compiled by then) and
before the part to profile. ``python -m ddnumba.bench profile`` does all of this for
the reachability benchmark.

Reference counting (``NRT_incref`` / ``NRT_decref``, atomic updates Numba makes when
a compiled function takes or drops an array) often tops such a profile, and ``perf``
cannot unwind JIT code to say who calls it. :func:`refcount_callers` reads the stack
words ``perf record --call-graph dwarf`` saved with each sample: the first return
address inside a compiled function names the caller (``bench profile --callers``).

Within one kernel, :func:`annotate` puts a recording's samples on the kernel's
instructions: :func:`capture_code` copies the machine code of the named functions out
of the running process (after :func:`write_perf_map`, while the code is alive), and
after the recording each sample's instruction pointer is counted at its offset in
the function and written beside ``objdump``'s disassembly of the copied bytes
(``bench profile --annotate _reduce_keys``). A sample usually lands on the
instruction that waits for a slow result or just after the slow one, so read the
lines above a hot instruction (e.g. the load whose value it uses).
"""
from __future__ import annotations

import collections
import gc
import os
import re
import shutil
from typing import NamedTuple

__all__ = ["write_perf_map", "compiled_functions", "short_symbol", "perf_top",
           "refcount_callers", "capture_code", "annotate", "Code", "Annotation"]


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


# ---------------------------------------------------------------------------------
# Instruction-level profiles of chosen functions


class Code(NamedTuple):
    """A compiled function's machine code, copied out of this process."""
    request: str        # the name it was asked for by (see capture_code)
    name: str           # its short symbol (short_symbol)
    addr: int           # its address in the process that compiled it
    code: bytes         # its perf map extent, cut at the end of its memory mapping


def _match_kernels(entries, kernels):
    """``[(request, addr, size, short name)]`` of the perf map ``entries`` that the
    names ``kernels`` ask for: a name matches a short symbol equal to it or ending in
    ``"." + name`` (``_reduce_keys`` and ``seqloop._reduce_keys`` both match
    ``ddnumba.kernels.seqloop._reduce_keys``; ``keys`` does not). Numba's CPython
    wrappers (``cpython.*``) are skipped, and a function asked for twice is listed
    once. Raises SystemExit naming close names when a name matches nothing."""
    import difflib

    shorts = [(addr, size, short_symbol(name)) for addr, size, name in entries]
    shorts = [row for row in shorts if not row[2].startswith("cpython.")]
    found = []
    seen = set()
    missing = []
    for want in kernels:
        hits = [row for row in shorts if row[2] == want or row[2].endswith("." + want)]
        if not hits:
            missing.append(want)
        for addr, size, short in hits:
            if addr not in seen:
                seen.add(addr)
                found.append((want, addr, size, short))
    if missing:
        lines = []
        for want in missing:
            # compare with the symbols' last components, as many as the name has
            depth = want.count(".") + 1
            tails = collections.defaultdict(set)
            for _, _, short in shorts:
                tails[".".join(short.split(".")[-depth:])].add(short)
            close = difflib.get_close_matches(want, list(tails), n=5, cutoff=0.6)
            names = sorted({s for t in close for s in tails[t]})[:5]
            lines.append(f"  {want!r}: " + (f"close names: {', '.join(names)}" if names
                                            else "no close names"))
        raise SystemExit(
            "annotate: no compiled function matches these names (a name matches the "
            "end of a short symbol, e.g. '_reduce_keys' or 'seqloop._reduce_keys'; "
            "code loaded from Numba's on-disk cache names only its entry points):\n"
            + "\n".join(lines))
    return found


def _readable_mappings():
    """``[(start, end)]`` of this process's readable memory mappings, sorted."""
    spans = []
    with open("/proc/self/maps") as fh:
        for line in fh:
            fields = line.split()
            if len(fields) >= 2 and fields[1].startswith("r"):
                start, end = fields[0].split("-")
                spans.append((int(start, 16), int(end, 16)))
    spans.sort()
    return spans


def capture_code(map_path, kernels):
    """Copy the machine code of the compiled functions that ``kernels`` name out of
    this process, for :func:`annotate`. Returns ``[Code]``.

    ``map_path``: this process's perf map (:func:`write_perf_map`); call this in the
    process that compiled the functions, while they are alive. A name matches a
    function whose short symbol (:func:`short_symbol`) is the name or ends with
    ``"." + name``; one name may match several functions (e.g. specializations),
    each is copied. Numba's CPython wrappers (``cpython.*``) are skipped. A name that
    matches nothing raises SystemExit listing close names.

    A function's extent is the perf map's (up to the next known function), cut at
    the end of the memory mapping that holds it, so the copy never reads unmapped
    memory; the last function of a block may carry some bytes that follow it."""
    import bisect
    import ctypes

    _, entries = _read_map(map_path)
    spans = _readable_mappings()
    starts = [s for s, _ in spans]
    codes = []
    for request, addr, size, name in _match_kernels(entries, kernels):
        i = bisect.bisect_right(starts, addr) - 1
        if i < 0 or addr >= spans[i][1]:
            raise RuntimeError(
                f"capture_code: {name} at {addr:#x} is not in this process's memory; "
                f"call capture_code in the process that compiled it, with its perf map")
        size = min(size, spans[i][1] - addr)
        codes.append(Code(request, name, addr, ctypes.string_at(addr, size)))
    return codes


def _histogram(ips, functions):
    """``(counts, total)``: for each function ``(addr, size)`` (not overlapping), a
    Counter of the offsets inside it of the instruction pointers ``ips``; ``total``
    is the number of ``ips``."""
    import bisect

    order = sorted(range(len(functions)), key=lambda i: functions[i][0])
    starts = [functions[i][0] for i in order]
    counts = [collections.Counter() for _ in functions]
    total = 0
    for ip in ips:
        total += 1
        j = bisect.bisect_right(starts, ip) - 1
        if j >= 0:
            addr, size = functions[order[j]]
            if ip < addr + size:
                counts[order[j]][ip - addr] += 1
    return counts, total


def _sample_ips(data):
    """The instruction pointer of every sample of the perf recording ``data``."""
    import subprocess

    perf = shutil.which("perf")
    if perf is None:
        raise RuntimeError("annotate: the perf command is not installed")
    # -G: only each sample's own address, not the call chain of a --call-graph run
    out = subprocess.run([perf, "script", "-i", data, "-F", "ip", "-G"],
                         capture_output=True, text=True, check=True)
    return [int(word, 16) for word in out.stdout.split()]


def _disassembler_problem():
    """Why this machine cannot disassemble the kernels, or None."""
    import platform

    machine = platform.machine()
    if machine not in ("x86_64", "AMD64"):
        return (f"the annotation disassembles x86-64 code and this machine is "
                f"{machine or 'of unknown kind'}")
    if shutil.which("objdump") is None:
        return "objdump is not installed (it comes with GNU binutils)"
    return None


def _objdump(code):
    """objdump's Intel-syntax disassembly of the x86-64 machine code ``code`` (its
    addresses are offsets into ``code``)."""
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory(prefix="ddnumba-annotate-") as tmp:
        path = os.path.join(tmp, "code.bin")
        with open(path, "wb") as fh:
            fh.write(code)
        out = subprocess.run([shutil.which("objdump"), "-D", "-b", "binary", "-m",
                              "i386:x86-64", "-M", "intel", "--no-show-raw-insn", path],
                             capture_output=True, text=True, check=True)
    return out.stdout


_INSN = re.compile(r"^\s+([0-9a-f]+):\s*(.*)$")


def _annotate_listing(disassembly, hits):
    """``(listing, unplaced)``: objdump's ``disassembly`` as ``[(offset, samples,
    text)]``, one row per instruction with the samples ``hits`` (a mapping offset ->
    samples) counts at its offset (``(None, 0, "...")`` where objdump skips zeros);
    ``unplaced``: the samples at offsets where no instruction starts (nonzero means
    the disassembly is out of step with the code)."""
    listing = []
    placed = 0
    for line in disassembly.splitlines():
        m = _INSN.match(line)
        if m:
            off = int(m.group(1), 16)
            n = hits.get(off, 0)
            placed += n
            listing.append((off, n, " ".join(m.group(2).split(None, 1))))
        elif line.strip() == "...":
            listing.append((None, 0, "..."))
    return listing, sum(hits.values()) - placed


_HEX = re.compile(r"\b0x([0-9a-f]+)\b")


def _name_targets(text, addr, size, names):
    """``text`` (an instruction of the function at ``addr``) with the compiled
    functions it refers to named: an absolute address (``movabs rax, 0x7f..``, then
    ``call rax``) or a relative call or jump leaving the function."""
    found = []
    branch = text.split(" ", 1)[0] in ("call", "jmp")
    for m in _HEX.finditer(text):
        v = int(m.group(1), 16)
        if v in names:
            found.append(names[v])
        elif branch and not 0 <= v < size and addr + v in names:
            found.append(names[addr + v])
    return text + "".join(f"    <{n}>" for n in found)


def _row(mark, off, n, samples, text):
    """A listing row: rank mark, samples, percent of ``samples``, offset, text
    (objdump's ``...``, bytes it skipped, has no figures)."""
    if off is None:
        return f"{'':4} {'':7} {'':6}  {'':7}  {text}"
    pct = 100.0 * n / samples if samples else 0.0
    return f"{mark:>4} {n:7d} {pct:5.1f}%  {off:6x}:  {text}"


class Annotation(NamedTuple):
    """A compiled function's samples placed on its instructions (:func:`annotate`)."""
    request: str        # the name it was asked for by
    name: str           # its short symbol
    addr: int
    samples: int        # the recording's samples inside the function
    total: int          # all the recording's samples
    listing: list       # [(offset, samples, instruction)], offset None for "..."
    unplaced: int       # samples at offsets where no instruction starts
    path: str | None    # the full annotated listing, when written

    def hottest(self, top=15):
        """``[(offset, samples)]`` of the ``top`` instructions by samples."""
        rows = sorted(((-n, off) for off, n, _ in self.listing if off is not None and n))
        return [(off, -n) for n, off in rows[:top]]

    def header(self):
        share = 100.0 * self.samples / self.total if self.total else 0.0
        return (f"{self.request}: {self.name} at {self.addr:#x}: {self.samples} samples, "
                f"{share:.1f}% of all {self.total}"
                + (f" ({self.unplaced} between instructions)" if self.unplaced else ""))

    def summary(self, top=15, context=3):
        """The header, then the ``top`` instructions by samples (ranked ``#1``...) in
        address order with ``context`` instructions either side; columns: samples,
        percent of the function's samples, offset, instruction."""
        lines = [self.header()]
        hot = self.hottest(top)
        if not hot:
            return lines[0] + "\n"
        if self.path:
            lines.append(f"  full listing: {self.path}")
        lines.append(f"  the top {len(hot)} instructions (#rank), {context} either side: "
                     f"samples, % of the function's, offset, instruction")
        rank = {off: i + 1 for i, (off, _) in enumerate(hot)}
        index = {off: i for i, (off, _, _) in enumerate(self.listing) if off is not None}
        shown = set()
        for off, _ in hot:
            i = index[off]
            shown.update(range(max(0, i - context), min(len(self.listing), i + context + 1)))
        prev = None
        for i in sorted(shown):
            if prev is not None and i != prev + 1:
                lines.append(_row("", None, 0, 0, "..."))
            off, n, text = self.listing[i]
            mark = f"#{rank[off]}" if off in rank else ""
            lines.append(_row(mark, off, n, self.samples, text))
            prev = i
        return "\n".join(lines) + "\n"

    def render(self):
        """The full annotated listing: every instruction with its samples."""
        lines = [self.header(),
                 "columns: samples, percent of the function's samples, offset, "
                 "instruction"]
        lines += [_row("", off, n, self.samples, text) for off, n, text in self.listing]
        return "\n".join(lines) + "\n"


def annotate(data, codes, *, out_prefix=None, map_path=None):
    """Place the samples of the perf recording ``data`` on the instructions of the
    functions ``codes`` (from :func:`capture_code`, in the recorded process before the
    recording). Returns ``[Annotation]``, one per function, in the order of ``codes``.

    ``out_prefix``: also write each function's full annotated listing to
    ``<out_prefix>.<request>.annotated.txt`` (``.<request>.2.annotated.txt``, ... for
    further functions a name matched); ``map_path``: the perf map, to name the
    functions that instructions call. Raises RuntimeError when the code cannot be
    disassembled here (no ``objdump``, not an x86-64 machine).

    Print ``Annotation.summary()`` for the hottest instructions with their context."""
    problem = _disassembler_problem()
    if problem:
        raise RuntimeError(f"annotate: {problem}")
    counts, total = _histogram(_sample_ips(data), [(c.addr, len(c.code)) for c in codes])
    names = {}
    if map_path:
        _, entries = _read_map(map_path)
        names = {addr: short_symbol(name) for addr, _, name in entries}
    result = []
    taken = set()
    for code, hits in zip(codes, counts):
        listing, unplaced = _annotate_listing(_objdump(code.code), hits)
        if names:
            listing = [(off, n, _name_targets(text, code.addr, len(code.code), names))
                       for off, n, text in listing]
        path = None
        if out_prefix:
            k = 1
            path = f"{out_prefix}.{code.request}.annotated.txt"
            while path in taken:
                k += 1
                path = f"{out_prefix}.{code.request}.{k}.annotated.txt"
            taken.add(path)
        ann = Annotation(code.request, code.name, code.addr, sum(hits.values()), total,
                         listing, unplaced, path)
        if path:
            with open(path, "w") as fh:
                fh.write(ann.render())
        result.append(ann)
    return result

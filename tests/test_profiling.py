"""The perf-map helpers of ddnumba.profiling (naming compiled kernels for perf)."""
import ctypes
import json
import os
import platform
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from numba import njit

from ddnumba.profiling import (Annotation, _annotate_listing, _histogram,
                                _match_kernels, _name_targets, annotate, capture_code,
                                compiled_functions, refcount_callers, short_symbol,
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


def _skip_unless_perf_records(tmp_path):
    probe = subprocess.run(["perf", "record", "-o", str(tmp_path / "p.data"), "true"],
                           capture_output=True)
    if probe.returncode != 0:
        pytest.skip("perf record is not permitted here")


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("perf") is None, reason="perf is not installed")
def test_bench_profile_names_the_kernels(tmp_path):
    _skip_unless_perf_records(tmp_path)
    from ddnumba.bench import profile_reach

    fig, rows = profile_reach(200, 50, 2000, out=str(tmp_path / "reach.data"), top=200)
    assert fig["changes"] == 2000
    names = [name for _, _, name in rows]
    assert any(n.startswith("ddnumba.kernels.") for n in names), names[:20]
    assert os.path.getsize(tmp_path / "reach.data") > 0
    assert "refcount" not in fig
    # with the stack words: reference counting is attributed to kernels
    # (enough changes for a few dozen reference counting samples on a busy machine:
    # ~1.5-2% of the samples since the root count keeps hashed state, ~5 in 8,000
    # changes, ~20 in 30,000)
    # ... and, with --annotate, the samples of the top kernel go on its instructions
    # (an entry point: the cached kernels of this process name only those)
    kernel = next(n for n in names if n.startswith("ddnumba.kernels."))
    fig, rows = profile_reach(200, 50, 30000, out=str(tmp_path / "reach2.data"), top=50,
                              callers=True, annotate=[kernel])
    share, callers = fig["refcount"]
    assert 0 < share < 100
    assert sum(c for _, c, _ in callers) > 0
    # the callers are compiled functions of the perf map: the kernels, or Numba's own
    # helpers they call (the typed list's getitem takes references too; with few
    # reference-counting samples on a busy machine, those may be all there are)
    assert any(name.startswith(("ddnumba.kernels.", "numba."))
               for _, _, name in callers), callers
    if _disassembles():
        # a name can match several compiled copies of a kernel (one per signature):
        # each gets its own listing (.2, .3, ... after the first); the samples are on
        # at least one of them
        anns = fig["annotate"]
        assert anns and all(a.name == kernel for a in anns)
        prefix = str(tmp_path / "reach2.data") + f".{kernel}"
        assert [a.path for a in anns] == [prefix + ".annotated.txt"] + [
            f"{prefix}.{k}.annotated.txt" for k in range(2, len(anns) + 1)]
        ann = max(anns, key=lambda a: a.samples)
        assert 0 < ann.samples < ann.total
        assert sum(a.samples for a in anns) <= ann.total
        text = open(ann.path).read()
        assert text == ann.render()
        off, n = ann.hottest(1)[0]
        assert n > 0 and f" {off:6x}:  " in text


def _disassembles():
    return platform.machine() == "x86_64" and shutil.which("objdump") is not None


def _mangled(*parts):
    return "_ZN" + "".join(f"{len(p)}{p}" for p in parts) + "B2v1B38c8tJTIeFIjx"


_ENTRIES = [
    (0x1000, 0x100, _mangled("ddnumba", "kernels", "seqloop", "_reduce_keys")),
    (0x1100, 0x80, _mangled("cpython", "ddnumba", "kernels", "seqloop", "_reduce_keys")),
    (0x1180, 0x80, _mangled("ddnumba", "kernels", "hstate", "_ins_apply")),
    (0x1200, 0x40, _mangled("ddnumba", "kernels", "hstate", "_ins_apply")),  # 2nd type
    (0x1240, 0x10, "NRT_incref"),
]


def test_annotate_names_match_the_end_of_a_short_symbol():
    # the kernel, not Numba's CPython wrapper of it
    expect = [("_reduce_keys", 0x1000, 0x100, "ddnumba.kernels.seqloop._reduce_keys")]
    assert _match_kernels(_ENTRIES, ["_reduce_keys"]) == expect
    assert _match_kernels(_ENTRIES, ["seqloop._reduce_keys"])[0][1:] == expect[0][1:]
    assert _match_kernels(_ENTRIES, ["ddnumba.kernels.seqloop._reduce_keys"])[0][1] == 0x1000
    # every function a name matches (two specializations), each once; plain names too
    found = _match_kernels(_ENTRIES, ["_ins_apply", "hstate._ins_apply", "NRT_incref"])
    assert [(r, a) for r, a, _, _ in found] == [("_ins_apply", 0x1180),
                                                ("_ins_apply", 0x1200),
                                                ("NRT_incref", 0x1240)]
    # whole components only: "keys" is not "_reduce_keys"
    with pytest.raises(SystemExit):
        _match_kernels(_ENTRIES, ["keys"])


def test_annotate_an_unknown_name_lists_close_names():
    with pytest.raises(SystemExit) as e:
        _match_kernels(_ENTRIES, ["_reduce_key", "_reduce_keys", "hstate._ins_aply",
                                  "zzzz"])
    lines = str(e.value).splitlines()
    assert lines[0].startswith("annotate: no compiled function matches these names")
    assert lines[1:] == ["  '_reduce_key': close names: "
                         "ddnumba.kernels.seqloop._reduce_keys",
                         "  'hstate._ins_aply': close names: "
                         "ddnumba.kernels.hstate._ins_apply",
                         "  'zzzz': no close names"]


def test_annotate_histogram_counts_each_sample_at_its_offset_in_its_function():
    functions = [(0x2000, 0x10), (0x1000, 0x40), (0x1040, 0x20)]   # adjacent 2nd, 3rd
    ips = [0x1000, 0x103f, 0x1040, 0x1040, 0x105f, 0x1060, 0xfff, 0x2000, 0x200f,
           0x2010, 0x1010, 0x1fff]
    counts, total = _histogram(ips, functions)
    assert total == len(ips)
    assert counts == [{0: 1, 0xf: 1}, {0: 1, 0x3f: 1, 0x10: 1}, {0: 2, 0x1f: 1}]
    assert _histogram([], functions) == ([{}, {}, {}], 0)


_OBJDUMP = textwrap.dedent("""
    /tmp/ddnumba-annotate-x/code.bin:     file format binary


    Disassembly of section .data:

    0000000000000000 <.data>:
    """) + ("   0:\tpush   r14\n"
            "   2:\tmov    rax,QWORD PTR [rsp+0x18]\n"
            "   7:\tadd    r10,QWORD PTR [rax+r14*8]\n"
            "   b:\timul   r11,rcx\n"
            "   f:\tjne    0x2\n"
            "  11:\tret\n"
            "\t...\n"
            "  20:\tint3\n")


def test_annotate_listing_puts_the_samples_on_their_instructions():
    hits = {0xb: 6, 0x2: 2, 0x7: 1, 0x11: 1, 0x5: 3}        # 0x5: inside an instruction
    listing, unplaced = _annotate_listing(_OBJDUMP, hits)
    assert listing == [(0x0, 0, "push r14"), (0x2, 2, "mov rax,QWORD PTR [rsp+0x18]"),
                       (0x7, 1, "add r10,QWORD PTR [rax+r14*8]"),
                       (0xb, 6, "imul r11,rcx"), (0xf, 0, "jne 0x2"), (0x11, 1, "ret"),
                       (None, 0, "..."), (0x20, 0, "int3")]
    assert unplaced == 3
    ann = Annotation("probe", "m.probe", 0x7f00, 13, 26, listing, unplaced, "p.txt")
    assert ann.hottest() == [(0xb, 6), (0x2, 2), (0x7, 1), (0x11, 1)]   # ties: by offset
    assert ann.hottest(2) == [(0xb, 6), (0x2, 2)]
    head, where, legend, *rows = ann.summary(top=1, context=1).splitlines()
    assert head == ("probe: m.probe at 0x7f00: 13 samples, 50.0% of all 26 "
                    "(3 between instructions)")
    assert where == "  full listing: p.txt"
    assert legend.startswith("  the top 1 instructions (#rank), 1 either side")
    assert rows == ["           1   7.7%       7:  add r10,QWORD PTR [rax+r14*8]",
                    "  #1       6  46.2%       b:  imul r11,rcx",
                    "           0   0.0%       f:  jne 0x2"]
    # windows in address order, a gap marked, ranks by samples
    rows = ann.summary(top=2, context=0).splitlines()[3:]
    assert [r.split()[0] for r in rows] == ["#2", "...", "#1"]
    assert rows[0].endswith("2:  mov rax,QWORD PTR [rsp+0x18]")
    full = ann.render().splitlines()
    assert full[0] == head and len(full) == 2 + len(listing)
    assert [r.split()[0] for r in full[2:]] == ["0", "2", "1", "6", "0", "1", "...", "0"]
    assert full[5] == "           6  46.2%       b:  imul r11,rcx"
    # a function without samples: just the header
    idle = Annotation("idle", "m.idle", 0x7f00, 0, 26,
                      [(off, 0, text) for off, _, text in listing], 0, None)
    assert idle.hottest() == [] and idle.summary() == idle.header() + "\n"


def test_annotate_names_the_functions_an_instruction_calls():
    addr = 0x7f0000000000                     # a function of 0x200 bytes there
    names = {0x7f0000005050: "NRT_incref", addr + 0x1000: "m.helper", addr: "m.self"}
    # Numba's calls: the address in a register (movabs), or relative (call/jmp)
    assert _name_targets("movabs rax,0x7f0000005050", addr, 0x200, names) == \
        "movabs rax,0x7f0000005050    <NRT_incref>"
    assert _name_targets("call 0x1000", addr, 0x200, names) == "call 0x1000    <m.helper>"
    assert _name_targets("mov rax,0x1000", addr, 0x200, names) == "mov rax,0x1000"
    assert _name_targets("jmp 0x0", addr, 0x200, names) == "jmp 0x0"    # a jump inside


def test_annotate_gives_each_copy_of_a_name_its_own_listing(monkeypatch, tmp_path):
    """A name can match several compiled copies of a kernel (one per signature): each
    gets its own Annotation, with only its own samples, and its own listing file."""
    from ddnumba import profiling
    monkeypatch.setattr(profiling, "_disassembler_problem", lambda: None)
    monkeypatch.setattr(profiling, "_objdump", lambda code: _OBJDUMP)
    monkeypatch.setattr(profiling, "_sample_ips",
                        lambda data: [0x1000 + 0xb, 0x1000 + 0xb, 0x5000 + 0x2, 0x9999])
    codes = [profiling.Code("probe", "m.probe", 0x1000, bytes(0x21)),
             profiling.Code("probe", "m.probe", 0x5000, bytes(0x21))]
    out = str(tmp_path / "rec.data")
    anns = annotate("rec.data", codes, out_prefix=out)
    assert [a.path for a in anns] == [f"{out}.probe.annotated.txt",
                                      f"{out}.probe.2.annotated.txt"]
    assert [a.samples for a in anns] == [2, 1] and all(a.total == 4 for a in anns)
    assert anns[0].hottest(1) == [(0xb, 2)] and anns[1].hottest(1) == [(0x2, 1)]
    for a in anns:
        assert open(a.path).read() == a.render()


def test_annotate_says_why_it_cannot_disassemble(monkeypatch, tmp_path):
    which = shutil.which
    monkeypatch.setattr(shutil, "which",
                        lambda cmd, *a, **k: None if cmd == "objdump" else which(cmd))
    with pytest.raises(RuntimeError, match="annotate: objdump is not installed"):
        annotate(str(tmp_path / "none.data"), [])
    monkeypatch.setattr(platform, "machine", lambda: "aarch64")
    with pytest.raises(RuntimeError, match="x86-64 code and this machine is aarch64"):
        annotate(str(tmp_path / "none.data"), [])


def test_bench_profile_annotate_refuses_cached_kernels(capsys):
    from ddnumba.bench import main

    for argv in (["profile", "--cached", "--annotate", "_reduce_keys"],
                 ["profile", "--annotate", " , "]):
        with pytest.raises(SystemExit) as e:
            main(argv)
        assert e.value.code == 2
    err = capsys.readouterr().err
    assert "drop --cached" in err and "needs at least one function name" in err


def test_capture_code_copies_this_process_memory_up_to_its_mapping_end(tmp_path):
    import mmap

    page = mmap.PAGESIZE
    mem = mmap.mmap(-1, 3 * page)
    mem[:] = bytes(range(256)) * (3 * page // 256)
    view = ctypes.c_char.from_buffer(mem)
    base = ctypes.addressof(view)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    # the third page unreadable: the mapping that holds the "function" ends there
    assert libc.mprotect(base + 2 * page, page, 0) == 0      # PROT_NONE
    try:
        start = base + page + 16
        mp = tmp_path / "perf-1.map"
        mp.write_text(f"{start:x} 100000 {_mangled('m', 'probe')}\n"
                      f"10 20 {_mangled('m', 'nowhere')}\n")
        (code,) = capture_code(str(mp), ["probe"])
        assert code == ("probe", "m.probe", start, mem[page + 16:2 * page])
        with pytest.raises(RuntimeError, match="not in this process's memory"):
            capture_code(str(mp), ["nowhere"])
    finally:
        libc.mprotect(base + 2 * page, page, mmap.PROT_READ | mmap.PROT_WRITE)
        del view
        mem.close()


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


_ANNOTATE_PROBE = r"""
import json, os, signal, subprocess, sys, time
import numpy as np
from numba import njit
from ddnumba.profiling import annotate, capture_code, write_perf_map

@njit
def _annotate_probe(t, n):
    s = 0
    k = 1
    for _ in range(n):         # random loads from 32 MiB: they miss the caches
        k = k * 6364136223846793005 + 1442695040888963407
        s += t[(k >> 20) & (t.size - 1)]
    return s

tmp = sys.argv[1]
t = np.arange(1 << 22, dtype=np.int64)
_annotate_probe(t, 10)
map_path = write_perf_map(os.path.join(tmp, "perf.map"))
codes = capture_code(map_path, ["_annotate_probe"])
data = os.path.join(tmp, "probe.data")
rec = subprocess.Popen(["perf", "record", "-F", "999", "-p", str(os.getpid()), "-o", data],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
time.sleep(1.0)                 # let perf attach
t0 = time.perf_counter()
while time.perf_counter() - t0 < 0.5:
    _annotate_probe(t, 1_000_000)
rec.send_signal(signal.SIGINT)
rec.wait()
(a,) = annotate(data, codes, out_prefix=data, map_path=map_path)
print(json.dumps({"ann": a, "size": len(codes[0].code), "hottest": a.hottest(5)}))
"""


@pytest.mark.skipif(shutil.which("perf") is None, reason="perf is not installed")
def test_annotate_places_a_hot_loops_samples_on_its_instructions(tmp_path):
    _skip_unless_perf_records(tmp_path)
    if not _disassembles():
        pytest.skip("no objdump, or not an x86-64 machine")
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "numba-cache"))
    out = subprocess.run([sys.executable, "-c", _ANNOTATE_PROBE, str(tmp_path)], env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.splitlines()[-1])
    fields = got["ann"]
    fields[5] = listing = [tuple(row) for row in fields[5]]
    ann = Annotation(*fields)
    assert ann.request == "_annotate_probe" and ann.name == "__main__._annotate_probe"
    assert ann.samples >= 100 and ann.samples >= 0.5 * ann.total, ann.header()
    assert ann.unplaced == 0                  # every sample on an instruction's start
    assert sum(n for _, n, _ in listing) == ann.samples
    # the disassembly is the probe's: its multiplier is an immediate in it
    assert any("0x5851f42d4c957f2d" in text for _, _, text in listing)
    # the samples are in the loop: between a backward branch and its target
    loops = []
    for off, _, text in listing:
        words = text.split()
        if off is not None and words[0].startswith("j") and len(words) == 2:
            target = int(words[1], 16) if words[1].startswith("0x") else None
            if target is not None and target < off:
                loops.append((target, off))
    assert loops, listing
    in_loops = sum(n for off, n, _ in listing
                   if off is not None and any(a <= off <= b for a, b in loops))
    assert in_loops >= 0.9 * ann.samples, (loops, got["hottest"])
    off, n = got["hottest"][0]
    assert any(a <= off <= b for a, b in loops) and off < got["size"]
    assert ann.path == str(tmp_path / "probe.data._annotate_probe.annotated.txt")
    assert open(ann.path).read() == ann.render()

"""Calls from compiled code back into Python (``objmode``): the hooks of the native
runtime.

:mod:`ddnumba.native` installs three Python functions before a run
(:func:`set_hooks`): one that applies a user function to a batch, one that runs user
``reduce`` logic on accumulated moments, and one that warns about a loop still changing
after many iterations. Each ``objmode`` block lives in a tiny function of its own: a
function holding one is compiled in several passes (the block is lifted out), so
keeping them small keeps that cheap. They sit in this module of their own so that the
loop kernels (:mod:`ddnumba.kernels.seqloop`) and the runtime share them.

:func:`alloc2d` is the other way out to Python: large arrays of long-lived, randomly
accessed state are allocated by NumPy, which asks the kernel for transparent huge pages
for them (``madvise``). Random access to gigabytes of hashed state then misses the TLB
far less, and filling fresh memory takes a page fault per 2 MiB instead of per 4 KiB.
The arrays compiled code creates itself come from Numba through CPython's raw
allocator; :func:`use_huge_pages` hooks its ``malloc`` so that large ones get huge
pages too (see the section at the end).
"""
import atexit
import ctypes
import os
import sys

import numpy as np
from numba import cfunc, njit, objmode, types

__all__ = ["set_hooks", "alloc2d", "HUGE_BYTES", "LINE_BYTES", "trim_heap", "release_rows",
           "RELEASES_PAGES", "use_huge_pages", "huge_pages_in_use"]

#: from this size on, NumPy marks an allocation for transparent huge pages (its
#: threshold), so :func:`alloc2d` hands such allocations to it
HUGE_BYTES = 1 << 22

# Python hooks called from objmode: [batch callback, logic callback, warning].
_HOOKS = [None, None, None]


def set_hooks(batch_cb, logic_cb, warn_cb):
    """Install the Python functions the compiled code calls back (see ddnumba.native)."""
    _HOOKS[0] = batch_cb
    _HOOKS[1] = logic_cb
    _HOOKS[2] = warn_cb


def _py_batch(node, data, times, diffs):
    return _HOOKS[0](node, data, times, diffs)


def _py_logic(node, mom_offs, acc_vals, acc_counts):
    return _HOOKS[1](node, mom_offs, acc_vals, acc_counts)


def _py_warn(loop, k):
    _HOOKS[2](loop, k)


@njit(cache=True)
def _cb_batch(n, d0, t0, f0):
    with objmode(d="int64[:, ::1]", t="int64[:, ::1]", f="int64[::1]"):
        d, t, f = _py_batch(n, d0, t0, f0)
    return d, t, f


@njit(cache=True)
def _cb_logic(n, mom_offs, acc_vals, acc_counts):
    with objmode(w_offs="int64[::1]", w_vals="int64[:, ::1]", w_counts="int64[::1]"):
        w_offs, w_vals, w_counts = _py_logic(n, mom_offs, acc_vals, acc_counts)
    return w_offs, w_vals, w_counts


@njit(cache=True)
def _cb_warn(loop, k):
    with objmode():
        _py_warn(loop, k)


# A loop without an iteration limit calls the warning hook once it reaches WARN_AT
# iterations (the hook warns, once per loop), then every CHECK_EVERY iterations more:
# compiled code never lets Python handle a signal, and these calls are where a
# Ctrl-C held since is raised (ddnumba.native holds it until a hook runs; it comes out
# of the run as KeyboardInterrupt), so that a loop that does not converge can be
# stopped. info[INFO_CHECKED] is the iteration of the last call; info[3] has a bit
# per loop that has warned.
WARN_AT = 10_000
CHECK_EVERY = 1024
INFO_CHECKED = 7


@njit(cache=True, nogil=True, inline="always")
def loop_call_due(info, loop, j):
    """Whether loop ``loop`` at iteration ``j`` (no iteration limit) should call the
    warning hook now (see WARN_AT); records the call in ``info``."""
    if j < WARN_AT:
        return False
    bit = np.int64(1) << min(loop, 62)
    if info[3] & bit == 0:
        info[3] |= bit
        info[INFO_CHECKED] = j
        return True
    if j < info[INFO_CHECKED] or j - info[INFO_CHECKED] >= CHECK_EVERY:
        info[INFO_CHECKED] = j
        return True
    return False


#: arrays from :func:`alloc2d`'s NumPy path start on a cache line of this many bytes
LINE_BYTES = 64


def _np_alloc(rows, cols, zero):
    # NumPy puts a large array's data 16 bytes into its first page, so a 64-byte table
    # row would lie across two cache lines: every probe would touch (and prefetch
    # only the first of) two lines. The array is cut from one line more so that it
    # starts on a line.
    n = rows * cols
    pad = LINE_BYTES // 8
    buf = np.zeros(n + pad, np.int64) if zero else np.empty(n + pad, np.int64)
    skip = (-buf.ctypes.data % LINE_BYTES) // 8
    return buf[skip:skip + n].reshape(rows, cols)


@njit(cache=True)
def alloc2d(rows, cols, zero):
    """A new ``int64[rows, cols]`` (zero-filled when ``zero``). Large ones come from
    NumPy (huge pages, see the module's text) and start on a cache line (LINE_BYTES);
    small ones from Numba, with no call into Python."""
    if rows * cols * 8 < HUGE_BYTES:
        if zero:
            return np.zeros((rows, cols), np.int64)
        return np.empty((rows, cols), np.int64)
    with objmode(out="int64[:, ::1]"):
        out = _np_alloc(rows, cols, zero)
    return out


def _libc_function(name, argtypes):
    """A function of the C library, or None (not every C library has it)."""
    import ctypes
    import ctypes.util
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        fn = getattr(libc, name)
    except (OSError, AttributeError):
        return None
    fn.argtypes = argtypes
    fn.restype = ctypes.c_int
    return fn


def _find_malloc_trim():
    """glibc's ``malloc_trim``, or None (other C libraries have no such call)."""
    import ctypes
    return _libc_function("malloc_trim", [ctypes.c_size_t])


_MALLOC_TRIM = _find_malloc_trim()
#: whether :func:`release_rows` gives pages back: on Linux, where ``MADV_DONTNEED``
#: frees anonymous pages at once (and they read as zeros afterwards)
RELEASES_PAGES = sys.platform.startswith("linux")
_MADV_DONTNEED = 4
_LIBC_MADVISE = types.ExternalFunction("madvise",
                                       types.intc(types.uintp, types.uintp, types.intc))
#: pages are released in whole aligned units of this size (a transparent huge page,
#: so that releasing part of an array never splits one)
RELEASE_ALIGN = 1 << 21


def _py_trim():
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)


@njit(cache=True)
def trim_heap():
    """Give the C heap's free pages back to the system (glibc ``malloc_trim``).

    glibc serves allocations below its mmap threshold from the heap, and that
    threshold rises (up to 32 MiB) each time a larger mapped block is freed, so after a
    while of large merges many batches live on the heap; when they are freed their
    pages stay with the process unless they happen to sit at the heap's top. A large
    merge (called before one, see kernels.runtime) then writes its output into new
    pages while those free ones still count. Trimming first returns them: at N=1e6
    the load's peak drops by the free heap (~0.6 GB). It costs a walk of the free
    lists and page faults when the memory is reused, so it is for large merges only.
    """
    with objmode():
        _py_trim()


@njit(cache=True, nogil=True)
def release_rows(arr, r0, r1):
    """Give back the memory of rows ``[r0, r1)`` of ``arr`` (C-contiguous, 1-D or 2-D)
    that are no longer needed: every aligned 2 MiB unit inside the array that ends by row
    ``r1`` and does not end before row ``r0`` (so calls for consecutive ranges leave no
    gaps). Those rows, and every row before ``r0``, must be dead: afterwards they read
    as zeros (Linux ``madvise(MADV_DONTNEED)``; elsewhere nothing happens).

    For copying a large array into its larger replacement: releasing each part once it
    is copied keeps the two from being resident at once. Only for arrays that nothing
    else reads (the caller drops the old array right after the copy).

    It calls ``madvise`` directly, not through Python (an ``objmode`` block would box
    the array through Python code, where a pending Ctrl-C is raised and the call
    goes wrong: see ddnumba.native's ``_HeldCtrlC``).
    """
    if not RELEASES_PAGES:
        return
    base = np.int64(arr.ctypes.data)
    rb = np.int64(arr.strides[0])
    a = np.int64(RELEASE_ALIGN)
    first = (base + a - 1) // a * a                 # the array's first whole unit
    lo = max(first, (base + r0 * rb) // a * a)
    hi = (base + r1 * rb) // a * a
    if hi > lo:
        _LIBC_MADVISE(np.uint64(lo), np.uint64(hi - lo), np.int32(_MADV_DONTNEED))


# ------------------------------------------------------------- Numba's own allocations
#
# Numba allocates the arrays that compiled code creates (round buffers, sort scratch,
# merge outputs) through CPython's "raw" allocator (PyMem_RawMalloc), which calls
# malloc: large blocks come from fresh mmap regions in ordinary 4 KiB pages. Loading
# the N=1e6 reachability graph first-touches ~5 GB that way (1.4M page faults, each
# zero-filling a page). :func:`use_huge_pages` hooks the raw allocator's malloc: a
# block of HUGE_BYTES or more is marked for transparent huge pages (madvise
# MADV_HUGEPAGE on its whole 2 MiB units) before anything touches it, as NumPy does
# for its own large arrays, so it fills a fault per 2 MiB. Everything else is the
# default allocator's: the hook is installed only over it (it has no context; debug
# hooks and tracemalloc have one), it calls malloc as the default does, and calloc,
# realloc and free stay the default's.

_LIBC_MALLOC = types.ExternalFunction("malloc", types.uintp(types.uintp))
_MADV_HUGEPAGE = 14


def _raw_malloc_py(ctx, size):
    """The raw domain's malloc: the default's (``malloc``, 1 byte for 0), with blocks
    of HUGE_BYTES or more marked for huge pages (compiled as a C callback by
    :func:`_raw_malloc` when first needed, so that importing costs nothing)."""
    p = _LIBC_MALLOC(size if size > 0 else 1)
    if p != 0 and size >= HUGE_BYTES:
        lo = (p + RELEASE_ALIGN - 1) & ~(RELEASE_ALIGN - 1)
        hi = (p + size) & ~(RELEASE_ALIGN - 1)
        if hi > lo:
            _LIBC_MADVISE(lo, hi - lo, _MADV_HUGEPAGE)
    return p


def _raw_malloc():
    if _ALLOC["cfunc"] is None:
        _ALLOC["cfunc"] = cfunc(types.uintp(types.uintp, types.uintp), cache=True,
                                nogil=True)(_raw_malloc_py)
    return _ALLOC["cfunc"]


class _Allocator(ctypes.Structure):
    # CPython's PyMemAllocatorEx
    _fields_ = [("ctx", ctypes.c_void_p), ("malloc", ctypes.c_void_p),
                ("calloc", ctypes.c_void_p), ("realloc", ctypes.c_void_p),
                ("free", ctypes.c_void_p)]


_PYMEM_DOMAIN_RAW = 0
_ALLOC = {"default": None, "hooked": None, "exit": False, "cfunc": None}


def _raw_allocator():
    cur = _Allocator()
    ctypes.pythonapi.PyMem_GetAllocator(ctypes.c_int(_PYMEM_DOMAIN_RAW), ctypes.byref(cur))
    return cur


def _set_raw_allocator(a):
    ctypes.pythonapi.PyMem_SetAllocator(ctypes.c_int(_PYMEM_DOMAIN_RAW), ctypes.byref(a))


def huge_pages_in_use():
    """Whether the raw allocator's malloc is :func:`use_huge_pages`'s hook now."""
    return _ALLOC["hooked"] is not None and \
        _raw_allocator().malloc == _ALLOC["hooked"].malloc


def use_huge_pages(on=True):
    """Hook (``on``) or unhook the raw allocator's malloc so that the large arrays
    compiled code creates get transparent huge pages (see above). Returns whether the
    hook is in place afterwards.

    Does nothing off Linux, with ``DDNUMBA_HUGE_PAGES=0`` in the environment, or
    when the raw allocator is not CPython's default (``PYTHONMALLOC=debug``, ``-X
    dev``, tracemalloc tracing: they wrap it with a context of their own). Unhooking
    happens only while the hook is still the raw allocator (tracemalloc started
    later wraps it and keeps calling it), and at interpreter exit."""
    if not on:
        if huge_pages_in_use():
            _set_raw_allocator(_ALLOC["default"])
        return huge_pages_in_use()
    if huge_pages_in_use():
        return True
    if not sys.platform.startswith("linux") or \
            os.environ.get("DDNUMBA_HUGE_PAGES", "1").strip() == "0":
        return False
    cur = _raw_allocator()
    if cur.ctx:
        return False
    hooked = _Allocator(cur.ctx, _raw_malloc().address, cur.calloc, cur.realloc,
                        cur.free)
    _ALLOC["default"] = cur
    _ALLOC["hooked"] = hooked
    _set_raw_allocator(hooked)
    if not _ALLOC["exit"]:
        # before Numba's own exit handlers (registered earlier, run later) tear the
        # compiled code down
        atexit.register(use_huge_pages, False)
        _ALLOC["exit"] = True
    return True

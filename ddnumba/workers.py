"""Data-parallel workers: W processes, one shard of keys each, exchanging through shared memory.

``Dataflow(workers=W)`` runs the same graph in W processes. The driver (the user's
process) is worker 0; the others are forked from it at the first ``run()``, once the graph
is built, so they start warm (compiled kernels and the graph are copied, not rebuilt).

Sharding. Stateless operators work on whatever rows a worker has. Every keyed operator
reads an arrangement, and an arrangement first *exchanges* its input: each row goes to
worker ``hash(key) % W`` (``kernels.partition``, a stable splitmix64 hash of the key
columns), so all updates of a key meet in one worker and joins and reduces are local.
Input rows fed through the driver are split evenly across the workers at each ``run()``;
the first exchange puts them where they belong.

Lock step. All workers run the same passes in the same order: every exchange is a
collective (each worker sends one part to every other and then receives one from each),
and loops agree on their next round with an all-reduce (the minimum of the workers'
candidate rounds). Frontiers are functions of the input frontiers and the agreed rounds, so
they agree everywhere without further messages, and since an exchange finishes before the
arrangement steps, no update is in flight when a frontier passes it.

Transport. Row data never goes through pickle: a batch is written as an Arrow IPC stream
(columns ``data`` and ``time`` as fixed-size lists of int64, and ``diff``) into a
``multiprocessing.shared_memory`` block owned by the sender and reused from one call to the
next; only the block's name and size travel through the (socket) pipe between the two
processes. Collectives are strictly ordered, so a sender reuses a block only after the
receiver has copied out of it (exchanges alternate between two blocks per peer).

Failures. A worker that raises sends its traceback to the driver and exits; one that dies
closes its pipes, which the others see at once. The driver then stops every worker, removes
every shared-memory block of the dataflow, and raises :class:`WorkerError` from ``run()``.
The dataflow cannot be used again; build a new one.
"""
from __future__ import annotations

import errno
import glob
import itertools
import os
import shutil
import signal
import sys
import time
import traceback
import weakref

import numpy as np

from ddnumba.kernels import partition as _partition
from ddnumba.updates import Updates

_I64 = np.int64

_RANK = 0
_COUNTER = itertools.count()

#: Blocks start at this size and grow by doubling (so a block is rarely re-created).
_MIN_BLOCK = 1 << 16


def rank() -> int:
    """Index of the worker this code runs in (0 in the driver and without workers)."""
    return _RANK


class WorkerError(RuntimeError):
    """A worker process raised or died; the message names it and carries its error
    (with the worker's traceback). ``kind`` and ``text``: the class name and message
    of the exception the worker raised (``None`` when it died)."""

    def __init__(self, message, kind=None, text=None):
        super().__init__(message)
        self.kind = kind
        self.text = text


class _PeerLost(Exception):
    def __init__(self, peer):
        super().__init__(peer)
        self.peer = peer


# ------------------------------------------------------------------------ shared memory


def _untrack(name):
    # The resource tracker would unlink a block when *any* process that touched it exits
    # (and warn about "leaks"); blocks are owned and cleaned up by the dataflow instead.
    from multiprocessing import resource_tracker
    try:
        resource_tracker.unregister(name, "shared_memory")
    except Exception:  # pragma: no cover - tracker gone at interpreter exit
        pass


def _shm_names(prefix):
    return [os.path.basename(p) for p in glob.glob(f"/dev/shm/{prefix}*")]


def _unlink(name):
    # ``SharedMemory.unlink`` would also unregister from the tracker, which never saw it.
    import _posixshmem
    try:
        _posixshmem.shm_unlink(name if name.startswith("/") else "/" + name)
    except FileNotFoundError:
        pass


class SharedMemoryFull(OSError):
    """``/dev/shm`` has no room for an exchange block."""


def _reserve(shm, size):
    """Make ``shm``'s pages real now: a block is a sparse file in ``/dev/shm``, and
    writing past the room left there kills the process with SIGBUS instead of
    raising. ``posix_fallocate`` fails with ENOSPC instead (the block is then
    removed)."""
    fallocate = getattr(os, "posix_fallocate", None)
    if fallocate is None or getattr(shm, "_fd", -1) < 0:     # pragma: no cover
        return
    try:
        fallocate(shm._fd, 0, size)
    except OSError as e:
        if e.errno not in (errno.ENOSPC, errno.ENOMEM, errno.EFBIG):
            if e.errno in (errno.EOPNOTSUPP, errno.EINVAL):   # pragma: no cover
                return
            raise
        try:
            free = shutil.disk_usage("/dev/shm").free
        except OSError:                                       # pragma: no cover
            free = None
        shm.close()
        _unlink(shm.name)
        raise SharedMemoryFull(
            e.errno, f"workers: no room in shared memory (/dev/shm) for a "
            f"{size / 2**20:.1f} MiB exchange block"
            + (f" ({free / 2**20:.1f} MiB free)" if free is not None else "")
            + "; enlarge /dev/shm (in Docker: --shm-size), feed smaller batches per "
            "run(), or use fewer workers") from None


def remove_blocks(prefix):
    """Unlink every shared-memory block whose name starts with ``prefix``."""
    for name in _shm_names(prefix):
        _unlink(name)


def _batch(upd):
    import pyarrow as pa
    cols, names = [], []
    n = len(upd)
    if upd.data.shape[1]:
        cols.append(pa.FixedSizeListArray.from_arrays(
            pa.array(np.ascontiguousarray(upd.data).reshape(-1)), upd.data.shape[1]))
        names.append("data")
    cols.append(pa.FixedSizeListArray.from_arrays(
        pa.array(np.ascontiguousarray(upd.times).reshape(-1)), upd.times.shape[1]))
    names.append("time")
    cols.append(pa.array(np.ascontiguousarray(upd.diffs)))
    names.append("diff")
    rb = pa.record_batch(cols, names=names)
    assert rb.num_rows == n
    return rb


class Blocks:
    """The shared-memory blocks one process writes (by slot) and has attached (by peer)."""

    def __init__(self, prefix, rank_):
        self.prefix = prefix
        self.rank = rank_
        self.own = {}        # slot -> SharedMemory (written by this process)
        self.seen = {}       # (peer, slot) -> SharedMemory (attached, written by peer)
        self.count = itertools.count()

    def write(self, slot, upd):
        """Write ``upd`` into this process's block for ``slot``: ``(slot, name, nbytes)``."""
        import pyarrow as pa
        from multiprocessing.shared_memory import SharedMemory
        rb = _batch(upd)
        mock = pa.MockOutputStream()
        with pa.ipc.new_stream(mock, rb.schema) as w:
            w.write_batch(rb)
        nbytes = mock.size()
        shm = self.own.get(slot)
        if shm is None or shm.size < nbytes:
            if shm is not None:
                shm.close()
                _unlink(shm.name)
            size = max(_MIN_BLOCK, 1 << (nbytes - 1).bit_length())
            name = f"{self.prefix}{self.rank}_{next(self.count)}"
            shm = SharedMemory(name=name, create=True, size=size)
            _untrack(shm._name)
            _reserve(shm, size)
            self.own[slot] = shm
        buf = pa.py_buffer(shm.buf)
        sink = pa.FixedSizeBufferWriter(buf)
        with pa.ipc.new_stream(sink, rb.schema) as w:
            w.write_batch(rb)
        sink.close()
        del sink, buf
        return (slot, shm.name, nbytes)

    def read(self, peer, desc, arity, dims):
        """The updates a peer wrote (``desc`` from its :meth:`write`), copied out."""
        import pyarrow as pa
        from multiprocessing.shared_memory import SharedMemory
        slot, name, nbytes = desc
        shm = self.seen.get((peer, slot))
        if shm is None or shm.name != name:
            if shm is not None:
                shm.close()
            shm = SharedMemory(name=name)
            _untrack(shm._name)
            self.seen[(peer, slot)] = shm
        reader = pa.ipc.open_stream(pa.py_buffer(shm.buf)[:nbytes])
        rb = reader.read_next_batch()
        n = rb.num_rows
        i = 0
        if arity:
            data = rb.column(0).values.to_numpy().reshape(n, arity).copy()
            i = 1
        else:
            data = np.empty((n, 0), _I64)
        times = rb.column(i).values.to_numpy().reshape(n, dims).copy()
        diffs = rb.column(i + 1).to_numpy().copy()
        del rb, reader
        return Updates(data, times, diffs)

    def close(self):
        for shm in self.seen.values():
            try:
                shm.close()
            except BufferError:  # pragma: no cover - a view outlived its read
                pass
        for shm in self.own.values():
            try:
                shm.close()
            except BufferError:  # pragma: no cover
                pass
            _unlink(shm.name)
        self.seen.clear()
        self.own.clear()


# ----------------------------------------------------------------------------- cluster


class Cluster:
    """One process's view of the workers: pipes to every peer, its blocks, collectives."""

    def __init__(self, workers, rank_, conns, prefix):
        self.W = workers
        self.rank = rank_
        self.conns = conns            # peer -> Connection
        self.prefix = prefix
        self.blocks = Blocks(prefix, rank_)
        self.seq = 0
        self.procs = {}               # driver only: rank -> Process
        self.failed = None

    # -- messages ------------------------------------------------------------------
    def send(self, peer, msg):
        try:
            self.conns[peer].send(msg)
        except (BrokenPipeError, ConnectionResetError, EOFError, OSError):
            raise _PeerLost(peer) from None

    def recv(self, peer):
        if self.rank == 0:
            self._wait_driver(peer)
        try:
            msg = self.conns[peer].recv()
        except (EOFError, ConnectionResetError, OSError):
            raise _PeerLost(peer) from None
        if msg[0] == "error":
            raise _RemoteError(msg)
        return msg

    def _wait_driver(self, peer):
        # The driver also watches the process sentinels: a worker that died is noticed even
        # while the driver waits for another one.
        from multiprocessing.connection import wait
        conn = self.conns[peer]
        sentinels = {p.sentinel: r for r, p in self.procs.items()}
        while True:
            ready = wait([conn] + list(sentinels), timeout=None)
            if conn in ready:
                return
            for s in ready:
                dead = sentinels[s]
                # It may have left a message (an error, most likely): read it on the way out.
                try:
                    msg = self.conns[dead].recv() if self.conns[dead].poll(0) else None
                except (EOFError, OSError):
                    msg = None
                if msg is not None and msg[0] == "error":
                    raise _RemoteError(msg)
                raise _PeerLost(dead)

    def _check(self, peer, msg, kind):
        if msg[0] != kind or msg[1] != self.seq:
            raise RuntimeError(f"worker {self.rank}: expected {kind}#{self.seq} from worker "
                               f"{peer}, got {msg[0]}#{msg[1]}; the workers diverged")

    # -- collectives ---------------------------------------------------------------
    def exchange(self, upd: Updates, kw: int) -> Updates:
        """All-to-all: each row goes to worker ``hash(row[:kw]) % W``; returns this
        worker's rows from everyone (its own first)."""
        self.seq += 1
        arity, dims = upd.data.shape[1], upd.times.shape[1]
        n = len(upd)
        W = self.W
        if n == 0:
            parts = [None] * W
        elif kw == 0:
            parts = [upd if w == 0 else None for w in range(W)]
        else:
            bucket = _partition.bucket_of(np.ascontiguousarray(upd.data[:, :kw]), W)
            perm, offs = _partition.scatter(bucket, W)
            parts = []
            for w in range(W):
                lo, hi = int(offs[w]), int(offs[w + 1])
                parts.append(upd.take(perm[lo:hi]) if hi > lo else None)
        for w in range(W):
            if w == self.rank:
                continue
            desc = (self.blocks.write(("x", w, self.seq & 1), parts[w])
                    if parts[w] is not None else None)
            self.send(w, ("x", self.seq, desc))
        got = [parts[self.rank]] if parts[self.rank] is not None else []
        for w in range(W):
            if w == self.rank:
                continue
            msg = self.recv(w)
            self._check(w, msg, "x")
            if msg[2] is not None:
                got.append(self.blocks.read(w, msg[2], arity, dims))
        return Updates.concat(got, arity, dims)

    def allreduce_min(self, value):
        """The minimum of every worker's ``value`` (``None`` counts as no value)."""
        self.seq += 1
        for w in range(self.W):
            if w != self.rank:
                self.send(w, ("m", self.seq, value))
        vals = [value]
        for w in range(self.W):
            if w != self.rank:
                msg = self.recv(w)
                self._check(w, msg, "m")
                vals.append(msg[2])
        vals = [v for v in vals if v is not None]
        return min(vals) if vals else None

    def close(self):
        self.blocks.close()
        for c in self.conns.values():
            try:
                c.close()
            except OSError:  # pragma: no cover
                pass


class _RemoteError(Exception):
    def __init__(self, msg):
        super().__init__(msg)
        self.msg = msg


def _describe(msg):
    _, rank_, kind, text, tb = msg
    return f"worker {rank_} raised {kind}: {text}\n--- worker {rank_} traceback ---\n{tb}"


# --------------------------------------------------------------------------- processes


def start(df):
    """Fork ``df.workers - 1`` workers from the driver; returns the driver's Cluster."""
    import multiprocessing as mp
    from multiprocessing import resource_tracker
    W = df.workers
    _check_fork_safe()
    # Workers share the driver's tracker (else each would start its own).
    resource_tracker.ensure_running()
    prefix = f"ddn{os.getpid()}_{next(_COUNTER)}_"
    remove_blocks(prefix)
    pipes = {}
    for a in range(W):
        for b in range(a + 1, W):
            pipes[(a, b)] = mp.Pipe(duplex=True)

    def ends(r):
        out = {}
        for (a, b), (ca, cb) in pipes.items():
            if a == r:
                out[b] = ca
            elif b == r:
                out[a] = cb
        return out

    ctx = mp.get_context("fork")
    procs = {}
    for r in range(1, W):
        p = ctx.Process(target=_child_main, args=(df, r, W, prefix, pipes),
                        name=f"ddnumba-worker-{r}", daemon=True)
        p.start()
        procs[r] = p
    for (a, b), (ca, cb) in pipes.items():
        for end, owner in ((ca, a), (cb, b)):
            if owner != 0:
                end.close()
    cl = Cluster(W, 0, ends(0), prefix)
    cl.procs = procs
    cl.owner = os.getpid()
    weakref.finalize(df, shutdown, cl)
    return cl


def _check_fork_safe():
    # A forked child of a process whose OpenMP runtime has started can deadlock in its
    # first parallel region (ENVIRONMENT.md); ddnumba's kernels are serial, user code may
    # not be.
    try:
        import numba
        layer = numba.threading_layer()
    except (ImportError, ValueError):      # ValueError: no parallel kernel has run yet
        return
    if layer == "omp":
        import warnings
        warnings.warn("a Numba parallel kernel ran on the OpenMP threading layer before "
                      "the workers were forked; parallel kernels in the workers may hang. "
                      "Set NUMBA_THREADING_LAYER=workqueue or run them after run().",
                      RuntimeWarning, stacklevel=4)


def _child_main(df, r, W, prefix, pipes):
    global _RANK
    _RANK = r
    signal.signal(signal.SIGINT, signal.SIG_IGN)    # the driver handles Ctrl-C
    conns = {}
    for (a, b), (ca, cb) in pipes.items():
        for end, owner, other in ((ca, a, b), (cb, b, a)):
            if owner == r:
                conns[other] = end
            else:
                end.close()
    cl = Cluster(W, r, conns, prefix)
    df._attach_worker(cl)
    code = 0
    try:
        while True:
            msg = cl.recv(0)
            if msg[0] == "stop":
                break
            if msg[0] != "run":
                raise RuntimeError(f"worker {r}: unexpected message {msg[0]!r}")
            df._worker_run(msg)
    except _PeerLost as e:
        code = 1
        _report(cl, r, "WorkerLost", f"lost contact with worker {e.peer}", "")
        if e.peer == 0 and _driver_gone(prefix):
            # The driver died (killed, or os._exit) without removing its blocks,
            # and nobody else will: they would stay in /dev/shm until a reboot.
            remove_blocks(f"{prefix}0_")
    except _RemoteError:
        code = 1
    except BaseException as e:  # noqa: BLE001 - everything goes to the driver
        code = 1
        _report(cl, r, type(e).__name__, str(e), traceback.format_exc())
    finally:
        try:
            cl.close()
        finally:
            # os._exit skips the interpreter's exit, so flush what user functions
            # printed here (buffered when stdout is a file or a pipe).
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except Exception:  # noqa: BLE001 - a closed or broken stream
                    pass
            os._exit(code)


def _driver_gone(prefix, wait=2.0):
    """True once this worker has been re-parented away from the driver. The pipe
    from a dying driver reads EOF as its files close, a moment before the kernel
    re-parents its children: wait for that a little."""
    driver = _driver_pid(prefix)
    deadline = time.monotonic() + wait
    while os.getppid() == driver:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def _driver_pid(prefix):
    """The driver's process id, from a block prefix ``ddn<pid>_<n>_``."""
    try:
        return int(prefix[3:].split("_", 1)[0])
    except ValueError:                                        # pragma: no cover
        return -1


def _report(cl, r, kind, text, tb):
    if 0 in cl.conns:
        try:
            cl.conns[0].send(("error", r, kind, text, tb))
        except OSError:
            pass


def shutdown(cl, *, timeout=5.0):
    """Stop the workers (politely, then by force) and remove every block. Only in the
    process that started them: a worker forked later for another dataflow inherits
    this finalizer, and must leave them alone (it cannot even ask whether they live)."""
    if getattr(cl, "owner", os.getpid()) != os.getpid():
        return
    for r, p in cl.procs.items():
        if p.is_alive():
            try:
                cl.conns[r].send(("stop",))
            except (OSError, KeyError):
                pass
    deadline = time.monotonic() + timeout
    for p in cl.procs.values():
        p.join(max(0.0, deadline - time.monotonic()))
    _stop(cl)


def fail(cl, exc):
    """After ``exc`` interrupted ``run()`` in the driver: stop everything and return the
    exception to raise (``None``: re-raise ``exc``, the driver's own error)."""
    if not isinstance(exc, (_PeerLost, _RemoteError)):
        # The driver's own error (or Ctrl-C): the workers wait for it; stop them.
        _stop(cl)
        return None
    errors = [exc.msg] if isinstance(exc, _RemoteError) else []
    # Give the others a moment to report (a worker that lost its peer says so too).
    deadline = time.monotonic() + 2.0
    pending = dict(cl.procs)
    while pending and time.monotonic() < deadline:
        for r in list(pending):
            conn = cl.conns[r]
            try:
                while conn.poll(0):
                    msg = conn.recv()
                    if msg[0] == "error":
                        errors.append(msg)
            except (EOFError, OSError):
                pending.pop(r)
                continue
            if not cl.procs[r].is_alive():
                pending.pop(r)
        if pending:
            time.sleep(0.01)
    codes = {r: p.exitcode for r, p in cl.procs.items()}   # before we stop the rest
    _stop(cl)
    primary = [m for m in errors if m[2] != "WorkerLost"]
    if primary:
        return WorkerError(_describe(primary[0]), primary[0][2], primary[0][3])
    died = [r for r, c in codes.items() if c is not None and c < 0]
    if died:
        r = died[0]
        try:
            sig = signal.Signals(-codes[r]).name
        except ValueError:  # pragma: no cover
            sig = str(-codes[r])
        return WorkerError(f"worker {r} died (killed by {sig}) during run()")
    if errors:
        return WorkerError(_describe(errors[0]), errors[0][2], errors[0][3])
    peer = exc.peer if isinstance(exc, _PeerLost) else "?"
    return WorkerError(f"worker {peer} exited unexpectedly during run() (exit code "
                       f"{codes.get(peer)})")


def _stop(cl):
    """Kill the workers still running, then release pipes and blocks."""
    for p in cl.procs.values():
        if p.is_alive():
            p.kill()
    for p in cl.procs.values():
        p.join(2.0)
    cl.close()
    remove_blocks(cl.prefix)
    cl.procs = {}

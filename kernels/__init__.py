"""Numba kernels of ddnumba (installed as ``ddnumba.kernels``).

Numba's on-disk cache validates a compiled function against its *own* source file
only, but a kernel's machine code also contains every kernel it calls, often from
other modules (``runtime.run`` holds most of ``seqloop``). Editing one kernel module
would leave stale code cached for its callers. So on import the caches of this
package are dropped whenever any of its source files changed since they were written
(a fingerprint of all the sources is kept next to them).
"""
import hashlib
import os
from pathlib import Path

_STAMP = "ddnumba-kernels.stamp"


def sources_fingerprint(pkg_dir):
    """A digest of the contents of every ``*.py`` file in ``pkg_dir``."""
    h = hashlib.sha256()
    for p in sorted(Path(pkg_dir).glob("*.py")):
        h.update(p.name.encode())
        h.update(b"\0")
        h.update(p.read_bytes())
        h.update(b"\0")
    return h.hexdigest()


def cache_dirs(pkg_dir):
    """Where Numba may keep this package's cache: ``__pycache__`` beside the sources,
    the directory under ``NUMBA_CACHE_DIR`` when that is set, and the user-wide cache
    Numba falls back to when the package directory is not writable."""
    pkg_dir = Path(os.path.abspath(pkg_dir))
    dirs = [pkg_dir / "__pycache__"]
    try:
        from numba.core import caching, config
        sub = caching._CacheLocator.get_suitable_cache_subpath(str(pkg_dir / "x.py"))
        if config.CACHE_DIR:
            dirs.append(Path(config.CACHE_DIR) / sub)
        from numba.misc.appdirs import AppDirs
        dirs.append(Path(AppDirs(appname="numba", appauthor=False).user_cache_dir) / sub)
    except (ImportError, AttributeError):    # another Numba layout: in-tree only
        pass
    return dirs


def drop_stale_caches(pkg_dir, dirs=None):
    """Delete the Numba cache files (``*.nbi``, ``*.nbc``) in ``dirs`` unless they were
    written for the current sources of ``pkg_dir``; returns how many were deleted.
    Unwritable locations are left alone (Numba then caches elsewhere or not at all)."""
    digest = sources_fingerprint(pkg_dir)
    dropped = 0
    for d in dirs if dirs is not None else cache_dirs(pkg_dir):
        if dirs is None and d != Path(os.path.abspath(pkg_dir)) / "__pycache__" \
                and not Path(d).is_dir():
            continue            # Numba never cached there: leave no trace
        mark = Path(d) / _STAMP
        try:
            if mark.read_text() == digest:
                continue
        except OSError:
            pass
        try:
            for f in list(Path(d).glob("*.nbi")) + list(Path(d).glob("*.nbc")):
                try:
                    f.unlink()
                    dropped += 1
                except FileNotFoundError:   # another process got there first
                    pass
            Path(d).mkdir(parents=True, exist_ok=True)
            tmp = mark.with_name(f"{_STAMP}.{os.getpid()}")
            tmp.write_text(digest)
            os.replace(tmp, mark)
        except OSError:
            pass
    return dropped


drop_stale_caches(Path(__file__).parent)

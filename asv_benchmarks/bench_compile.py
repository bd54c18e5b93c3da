"""Start-up costs, each measured in a fresh Python subprocess (the only honest way: a
benchmark process has already imported everything and loaded its kernels).

* ``Import``: ``import ddnumba`` (kernels load lazily from Numba's cache).
* ``NativeRuntime``: a tiny reachability dataflow (``ddnumba.bench.build_reach``) built
  and run on ``engine="native"`` until its first complete answer, in a subprocess with
  an empty temporary ``NUMBA_CACHE_DIR`` (cold: the compile of the native runtime,
  2-4 minutes on this project's 2-core VM) and then again with that directory
  populated (warm: loading the cached code); and cold once more with
  ``DDNUMBA_COMPILE_HELPER=0``, where no helper process compiles the loop kernel
  beside the rest (``ddnumba.native.compile_runtime``). The seconds are measured
  inside the subprocess, from before ``import ddnumba`` to after the first ``run()``
  returned.
* ``KernelCompile``: one storage kernel (``consolidate``) compiled with an empty cache.
"""
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

# Printed by the subprocess as JSON: seconds to import, to build and run the dataflow to
# its first answer, and for one more single-change run.
_NATIVE_SCRIPT = """
import json, time
t0 = time.perf_counter()
import numpy as np
import ddnumba
t1 = time.perf_counter()
from ddnumba.bench import build_reach
df, roots_in, edges_in, probe, counts = build_reach(engine="native")
edges_in.insert(np.array([0, 1, 2, 3]), np.array([1, 2, 3, 0]), time=0)
roots_in.insert(np.array([0]), time=0)
edges_in.advance_to(1); roots_in.advance_to(1)
df.run()
t2 = time.perf_counter()
assert df._native, "the native engine did not run"
edges_in.remove(np.array([1]), np.array([2]), time=1)
edges_in.advance_to(2); roots_in.advance_to(2)
df.run()
t3 = time.perf_counter()
got = counts.at(1).to_pylist()
assert got == [{"root": 0, "count": 2, "count_": 1}], got
print(json.dumps({"import_s": t1 - t0, "first_run_s": t2 - t1, "total_s": t2 - t0,
                  "second_run_s": t3 - t2}))
"""

_IMPORT_SCRIPT = """
import time
t0 = time.perf_counter()
import ddnumba
print(time.perf_counter() - t0)
"""


def _python(script, *, cache_dir=None, timeout=600, env_extra=None):
    """Run ``script`` in a fresh interpreter; its last stdout line."""
    env = dict(os.environ, **(env_extra or {}))
    if cache_dir is not None:
        env["NUMBA_CACHE_DIR"] = cache_dir
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                         text=True, timeout=timeout)
    if out.returncode != 0:
        raise RuntimeError(f"subprocess failed ({out.returncode}):\n{out.stderr[-3000:]}")
    return out.stdout.strip().splitlines()[-1]


class Import:
    """``import ddnumba`` in a fresh interpreter (Numba's cache as configured)."""

    timeout = 300

    def setup(self):
        _python(_IMPORT_SCRIPT)       # warm the OS file cache

    def track_import_seconds(self):
        return float(np.median([float(_python(_IMPORT_SCRIPT)) for _ in range(5)]))
    track_import_seconds.unit = "s"

    def timeraw_import_ddnumba(self):
        return "import ddnumba"


class NativeRuntime:
    """Time to the first answer of a tiny dataflow on the native engine, with an empty
    Numba cache (cold compile, with and without the compile helper process) and with
    the cache that run left (warm load)."""

    timeout = 1800

    def setup_cache(self):
        cache_dir = tempfile.mkdtemp(prefix="ddnumba-asv-numba-")
        alone_dir = tempfile.mkdtemp(prefix="ddnumba-asv-numba-")
        try:
            cold = json.loads(_python(_NATIVE_SCRIPT, cache_dir=cache_dir, timeout=900))
            warm = [json.loads(_python(_NATIVE_SCRIPT, cache_dir=cache_dir, timeout=300))
                    for _ in range(3)]
            alone = json.loads(_python(_NATIVE_SCRIPT, cache_dir=alone_dir, timeout=900,
                                       env_extra={"DDNUMBA_COMPILE_HELPER": "0"}))
        finally:
            shutil.rmtree(cache_dir, ignore_errors=True)
            shutil.rmtree(alone_dir, ignore_errors=True)
        return {"cold": cold, "cold_no_helper": alone,
                "warm": {k: float(np.median([w[k] for w in warm])) for k in warm[0]}}
    setup_cache.timeout = 1800

    def track_cold_seconds(self, r):
        return r["cold"]["total_s"]
    track_cold_seconds.unit = "s"

    def track_cold_first_run_seconds(self, r):
        return r["cold"]["first_run_s"]
    track_cold_first_run_seconds.unit = "s"

    def track_cold_no_helper_seconds(self, r):
        return r["cold_no_helper"]["total_s"]
    track_cold_no_helper_seconds.unit = "s"

    def track_warm_seconds(self, r):
        return r["warm"]["total_s"]
    track_warm_seconds.unit = "s"

    def track_warm_first_run_seconds(self, r):
        return r["warm"]["first_run_s"]
    track_warm_first_run_seconds.unit = "s"

    def track_warm_second_run_seconds(self, r):
        # A single change after the first answer: the steady-state cost, for scale.
        return r["warm"]["second_run_s"]
    track_warm_second_run_seconds.unit = "s"


_KC_PREFIX = "ddnumba-asv-kernel-compile-"


class KernelCompile:
    """One storage kernel compiled from scratch (a fresh, empty Numba cache)."""

    def teardown(self):
        # The timed subprocess leaves its cache directory behind (removing it there
        # would be timed).
        for d in glob.glob(os.path.join(tempfile.gettempdir(), _KC_PREFIX + "*")):
            shutil.rmtree(d, ignore_errors=True)

    def timeraw_compile_consolidate_uncached(self):
        return f"""
import os, tempfile
os.environ["NUMBA_CACHE_DIR"] = tempfile.mkdtemp(prefix={_KC_PREFIX!r})
import numpy as np
from ddnumba.kernels import consolidate
consolidate.consolidate(np.zeros((3, 2), np.int64), np.zeros((3, 1), np.int64),
                        np.ones(3, np.int64))
"""
    timeraw_compile_consolidate_uncached.timeout = 300

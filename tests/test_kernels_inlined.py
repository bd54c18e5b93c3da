"""Helpers compiled with ``rows.inlined``: LLVM inlines them into every caller.

A helper made with :func:`ddnumba.kernels.rows.inlined` is compiled once per signature
and marked ``alwaysinline``; the caller's module optimisation must then leave no call to
it and no copy of it. Checked on the linking module of a compiled caller (what Numba
links into the callers above it, and caches as bitcode), for a small module of our own
and for the engine's hottest kernels, whether compiled here or loaded from the cache.
"""
import importlib.util

import numpy as np

from ddnumba.kernels import seqloop


def _defined(disp):
    """``{name: attributes}`` of the functions defined in the linking module of each
    compiled signature of ``disp`` (Numba private API: ``CodeLibrary``)."""
    out = {}
    for cres in disp.overloads.values():
        mod = cres.library._get_module_for_linking()
        for fn in mod.functions:
            if not fn.is_declaration:
                out[fn.name] = b" ".join(fn.attributes).decode()
    return out


def _called(disp):
    """Names of the functions called in the linking modules of ``disp``."""
    out = set()
    for cres in disp.overloads.values():
        mod = cres.library._get_module_for_linking()
        for fn in mod.functions:
            for block in fn.blocks:
                for ins in block.instructions:
                    if ins.opcode == "call":
                        ops = list(ins.operands)
                        out.add(ops[-1].name)
    return out


def _mod(tmp_path):
    src = tmp_path / "inl_mod.py"
    src.write_text(
        "from ddnumba.kernels.rows import inlined, leaf\n"
        "\n\n@leaf\n"
        "def inner_leaf(a, i):\n"
        "    s = 0\n"
        "    for c in range(a.shape[1]):\n"
        "        s += a[i, c]\n"
        "    return s\n"
        "\n\n@inlined\n"
        "def helper(a, i, k):\n"
        "    return inner_leaf(a, i) * k, i + 1\n"
        "\n\n@leaf\n"
        "def caller(a, n, k):\n"
        "    t = 0\n"
        "    i = n - n\n"
        "    while i < n:\n"
        "        s, i = helper(a, i, k)\n"
        "        t += s\n"
        "    return t\n")
    spec = importlib.util.spec_from_file_location("inl_mod", src)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _names(names, part):
    return [n for n in names if part in n]


def test_an_inlined_helper_leaves_no_call_and_no_copy(tmp_path):
    mod = _mod(tmp_path)
    a = np.arange(12, dtype=np.int64).reshape(4, 3)
    assert mod.caller(a, 4, 2) == 2 * int(a.sum())
    defined = _defined(mod.caller)
    called = _called(mod.caller)
    assert _names(defined, "6caller") and not _names(defined, "6helper")
    assert not _names(called, "6helper")
    # the helper itself is marked for inlining, and a leaf it calls is not (Numba
    # would otherwise pass the flag on to callees compiled inside the helper's compile)
    def marked(disp, part):
        found = {n: a for n, a in _defined(disp).items()
                 if part in n and "cpython" not in n and not n.startswith("cfunc.")}
        assert found, (disp, part)
        return ["alwaysinline" in a.split() for a in found.values()]
    assert all(marked(mod.helper, "6helper"))
    assert not any(marked(mod.inner_leaf, "10inner_leaf"))
    assert not any(marked(mod.caller, "6caller"))


def _inlined_helpers():
    """Every helper of the kernel modules made with ``rows.inlined``, as the part of
    a mangled symbol that names it (``7ddnumba7kernels6hstate5_find``)."""
    from numba.core.registry import CPUDispatcher
    out = {}
    for name in KERNEL_MODULES:
        mod = importlib.import_module(f"ddnumba.kernels.{name}")
        for v in vars(mod).values():
            if isinstance(v, CPUDispatcher) and v.targetoptions.get("forceinline") \
                    and v.py_func.__module__ == mod.__name__:
                path = f"{v.py_func.__module__}.{v.py_func.__qualname__}".split(".")
                out[v.py_func.__qualname__] = "".join(f"{len(p)}{p}" for p in path)
    return out


KERNEL_MODULES = ["batch", "consolidate", "cursor", "hstate", "merge", "partition",
                  "reduce", "rows", "runtime", "seqloop", "sort", "trie"]


def test_the_engine_holds_its_helpers_inline():
    """The native runtime's compiled code (``runtime.run``, which links everything a
    run executes, and the sequential loop ``seqloop.run_times``): no call to, and no
    copy of, any ``inlined`` helper."""
    from ddnumba.bench import ReachSession
    from ddnumba.kernels import runtime
    helpers = _inlined_helpers()
    assert {"_find", "_block_add", "_flat_corrections", "add_checked", "_pairs_1d",
            "row_cmp"} <= set(helpers)
    ReachSession(40, 80).load()
    for disp in (runtime.run, seqloop.run_times):
        assert disp.signatures
        names = set(_defined(disp)) | _called(disp)
        # the loop's leaves are linked in under the names the helpers are looked for by
        for leaf_name in ("7seqloop12_reduce_keys", "6hstate10_ins_apply"):
            assert any("7ddnumba7kernels" + leaf_name in n for n in names), leaf_name
        left = {h for h, part in helpers.items() if any(part in n for n in names)}
        assert not left, (disp, sorted(left))

"""No compiled kernel is compiled twice because its callers pass literals.

Numba types a constant argument of a call between compiled functions as a literal
(``Literal[int](0)``) and compiles the callee once per combination of literal and
non-literal arguments its callers pass. ``hstate.block_add``, ~600 lines of Numba IR
once its arena helpers are inlined, was compiled twice in the sequential loop's cold
compile (~25 s each: ``blk=0`` from one call site, ``it=-1`` from another). Callers
therefore pass ``np.int64(0)``, which is typed as a plain int64. ``True`` and ``False``
are literals too: ``runtime._pairs_xy`` (~4 s) and the join helpers under it were
compiled once for each, in the part of a cold compile that the wait for a first answer
follows; callers pass ``kernels.rows.BTRUE`` / ``BFALSE`` (NumPy booleans, typed as
plain ``bool``) instead.

This test reads the kernels' source: for every call of a kernel that is compiled on its
own (``@njit`` without ``inline="always"``, ``@leaf``, ``@list_leaf``) made from
compiled code, it puts each positional argument down as a literal (an integer or
boolean constant, a negated integer, or a module-level integer constant of the
kernels) or as anything else, and fails when one kernel's call sites give more than
one such pattern, unless the kernel is in ``ALLOWED`` (``literal_allowances.py``): a
flag kept literal on purpose, so that Numba prunes the branch it selects in a hot loop.
Calls from Python are left out (Numba types a Python argument by its type alone, never
as a literal). ``conftest.py`` checks what a cold test session compiles, the same way.
"""
import ast
import pathlib
from collections import defaultdict

from literal_allowances import ALLOWED

KERNELS = pathlib.Path(__file__).resolve().parent.parent / "kernels"


def _compiled_kind(fn):
    """'kernel' for a function compiled on its own, 'inline' for an inlined helper,
    None for plain Python."""
    for d in fn.decorator_list:
        name = d.func.id if isinstance(d, ast.Call) and isinstance(d.func, ast.Name) \
            else getattr(d, "id", None)
        if name in ("leaf", "list_leaf"):
            return "kernel"
        if name in ("njit", "jit"):
            if isinstance(d, ast.Call) and any(
                    k.arg == "inline" and getattr(k.value, "value", None) == "always"
                    for k in d.keywords):
                return "inline"
            return "kernel"
    return None


def _modules(root):
    mods = {}
    for path in sorted(root.glob("*.py")):
        mods[path.stem] = ast.parse(path.read_text(), filename=str(path))
    return mods


def _int_constants(mods):
    consts = {}
    for m, tree in mods.items():
        for node in tree.body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 \
                    and isinstance(node.targets[0], ast.Name) \
                    and isinstance(node.value, ast.Constant) \
                    and type(node.value.value) is int:
                consts[(m, node.targets[0].id)] = node.value.value
    return consts


def _namespaces(mods):
    """Per module: a name -> (defining module, name) map of its own top-level
    functions and constants and what it imports from other kernel modules."""
    ns = {}
    for m, tree in mods.items():
        names = {}
        for node in tree.body:
            if isinstance(node, ast.FunctionDef):
                names[node.name] = (m, node.name)
            elif isinstance(node, ast.Assign):
                for t in node.targets:
                    if isinstance(t, ast.Name):
                        names[t.id] = (m, t.id)
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
                src = node.module.split(".")[0]
                if src in mods:
                    for a in node.names:
                        names[a.asname or a.name] = (src, a.name)
        ns[m] = names
    return ns


def _resolve(ns, m, name, seen=()):
    """Follow re-exports to the module that defines ``name``."""
    target = ns[m].get(name)
    if target is None or target == (m, name) or target in seen:
        return target
    return _resolve(ns, target[0], target[1], seen + (target,)) or target


def _assigned_names(fn):
    """The names ``fn``'s body assigns (``=``, ``+=``, ``for`` targets)."""
    names = set()
    for n in ast.walk(fn):
        targets = n.targets if isinstance(n, ast.Assign) else \
            [n.target] if isinstance(n, (ast.AugAssign, ast.AnnAssign, ast.For)) else []
        for t in targets:
            names.update(x.id for x in ast.walk(t) if isinstance(x, ast.Name))
    return names


def _local_literals(fn):
    """``fn``'s local variables given a literal by a plain ``name = <constant>``:
    (those assigned nothing else, name -> the constant's expression; those assigned
    other values too, name -> the constant's expression). Numba types the first as a
    literal. The second it types as a literal until its type inference meets the
    other values and widens it, so a kernel the variable is passed to before that
    (an accumulator ``n = 0`` that a call in a loop returns the next value of) is
    compiled for the literal first, and then again."""
    counts, lits = defaultdict(int), {}
    for n in ast.walk(fn):
        if isinstance(n, ast.Assign):
            targets = n.targets
            if len(targets) == 1 and isinstance(targets[0], ast.Name) \
                    and _is_constant(n.value):
                lits[targets[0].id] = n.value
        elif isinstance(n, (ast.AugAssign, ast.AnnAssign, ast.For, ast.comprehension,
                            ast.NamedExpr)):
            targets = [n.target]
        elif isinstance(n, ast.withitem) and n.optional_vars is not None:
            targets = [n.optional_vars]
        else:
            continue
        for t in targets:
            for x in ast.walk(t):
                if isinstance(x, ast.Name):
                    counts[x.id] += 1
    params = {a.arg for a in fn.args.args + fn.args.kwonlyargs}
    lits = {k: v for k, v in lits.items() if k not in params}
    return ({k: v for k, v in lits.items() if counts[k] == 1},
            {k: v for k, v in lits.items() if counts[k] > 1})


def _is_constant(a):
    """An integer or boolean constant, or a negated integer one."""
    if isinstance(a, ast.UnaryOp) and isinstance(a.op, ast.USub):
        a = a.operand
        return isinstance(a, ast.Constant) and type(a.value) is int
    return isinstance(a, ast.Constant) and type(a.value) in (int, bool)


def literal_patterns(root=KERNELS):
    """(module, kernel) -> {pattern: [call sites]}, a pattern being the tuple of
    (position, literal) of a call's integer-literal positional arguments.

    A literal passed on is followed: a parameter of a compiled function or an inlined
    helper to which every call site passes the same literal (and which its body never
    assigns) is that literal wherever the body passes it on; so is a local variable
    assigned once, to a literal (``n = 0``: Numba types it as ``Literal[int](0)``). A
    call passing a local variable that is assigned a literal and other values too
    gives two patterns, with and without that literal (see :func:`_local_literals`)."""
    mods = _modules(root)
    defs, kinds = {}, {}
    for m, tree in mods.items():
        for node in tree.body:
            if isinstance(node, ast.FunctionDef):
                defs[(m, node.name)] = node
                kinds[(m, node.name)] = _compiled_kind(node)
    consts = _int_constants(mods)
    ns = _namespaces(mods)
    assigned = {k: _assigned_names(fn) for k, fn in defs.items()}
    local = {k: _local_literals(fn) for k, fn in defs.items()}

    def literal(m, params, a, local=None):
        if isinstance(a, ast.Constant) and type(a.value) is int:
            return a.value
        if isinstance(a, ast.Constant) and type(a.value) is bool:
            return repr(a.value)        # (a string: True == 1 would merge patterns)
        if isinstance(a, ast.UnaryOp) and isinstance(a.op, ast.USub) \
                and isinstance(a.operand, ast.Constant) and type(a.operand.value) is int:
            return -a.operand.value
        if isinstance(a, ast.Name):
            if a.id in params:
                return params[a.id]
            if local is not None and a.id in local:
                return literal(m, params, local[a.id])
            target = _resolve(ns, m, a.id)
            if target in consts:
                return consts[target]
        return None

    params = {k: {} for k in defs}      # function -> {parameter: its one literal}
    for _ in range(len(defs)):
        calls = defaultdict(lambda: defaultdict(list))
        for (m, name), fn in defs.items():
            if kinds[(m, name)] is None:
                continue        # (called from Python, an argument is never a literal)
            for node in ast.walk(fn):
                if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
                    continue
                target = _resolve(ns, m, node.func.id)
                if kinds.get(target) is None:
                    continue
                once, widened = local[(m, name)]
                vals = [literal(m, params[(m, name)], a, once) for a in node.args]
                pattern = tuple((i, v) for i, v in enumerate(vals) if v is not None)
                calls[target][pattern].append(f"{m}.py:{node.lineno}")
                wide = [(i, literal(m, {}, widened[a.id])) for i, a in
                        enumerate(node.args) if vals[i] is None
                        and isinstance(a, ast.Name) and a.id in widened]
                if wide:
                    first = tuple(sorted(pattern + tuple(wide)))
                    calls[target][first].append(
                        f"{m}.py:{node.lineno} (" + ", ".join(
                            f"{node.args[i].id} = {v}" for i, v in wide) +
                        " at first)")
        new = {}
        for k, fn in defs.items():
            pats = list(calls.get(k, {}))
            lits = {}
            if len(pats) == 1:
                for i, v in pats[0]:
                    if i < len(fn.args.args) and fn.args.args[i].arg not in assigned[k]:
                        lits[fn.args.args[i].arg] = v
            new[k] = lits
        if new == params:
            break
        params = new
    return {k: v for k, v in calls.items() if kinds[k] == "kernel"}


def test_no_kernel_gets_two_copies_from_literals():
    pats = literal_patterns()
    mixed = {k: dict(v) for k, v in pats.items() if len(v) > 1 and k not in ALLOWED}
    assert not mixed, (
        "kernels whose callers pass literals in different patterns (Numba compiles a "
        "copy per pattern: pass np.int64(...), rows.BTRUE or rows.BFALSE instead):\n"
        + "\n".join(
            f"  {m}.{f}: " + "; ".join(f"{list(p) or 'no literal'} at {', '.join(s)}"
                                       for p, s in pats.items())
            for (m, f), pats in sorted(mixed.items())))
    stale = sorted(k for k in ALLOWED if len(pats.get(k, ())) < 2)
    assert not stale, f"ALLOWED lists kernels no longer called with mixed literals: {stale}"


def test_the_scan_sees_a_mixed_pattern(tmp_path):
    """The scan itself: a kernel called with 0 at one site and a variable at another
    is reported, so is one called with True and False (apart from 1 and 0), an
    inlined helper is not, a call from Python is not, and a literal passed on through
    a parameter is followed."""
    (tmp_path / "a.py").write_text(
        "from numba import njit\n"
        "from .b import g, g2, g3\n"
        "K = 3\n"
        "@njit(cache=True)\n"
        "def f(x, n, flag):\n"
        "    return x\n"
        "@njit(cache=True, inline='always')\n"
        "def h(x, n):\n"
        "    return x\n"
        "@njit(cache=True)\n"
        "def passes_on(x, n, m):\n"
        "    m = m + 1\n"
        "    return g(x, n) + g(x, m)\n"
        "@njit(cache=True)\n"
        "def caller(x, n):\n"
        "    passes_on(x, 7, 0)\n"
        "    f(x, 0, True)\n"
        "    f(x, n, False)\n"
        "    f(x, 1, 0)\n"
        "    h(x, 0)\n"
        "    h(x, n)\n"
        "    g(x, K)\n"
        "    g(x, -1)\n"
        "    g(x, n)\n"
        "@njit(cache=True)\n"
        "def locals_(x, n):\n"
        "    z = 0\n"
        "    g3(x, z)\n"
        "    w = 0\n"
        "    for i in range(n):\n"
        "        w = g2(x, w)\n"
        "    return w\n"
        "def from_python(x):\n"
        "    return g(x, 5)\n")
    (tmp_path / "b.py").write_text(
        "from numba import njit\n"
        "@njit(cache=True)\n"
        "def g(x, n):\n"
        "    return x\n"
        "@njit(cache=True)\n"
        "def g2(x, n):\n"
        "    return n + 1\n"
        "@njit(cache=True)\n"
        "def g3(x, n):\n"
        "    return x\n")
    pats = literal_patterns(tmp_path)
    assert set(pats) == {("a", "f"), ("a", "passes_on"), ("b", "g"), ("b", "g2"),
                         ("b", "g3")}
    assert set(pats[("a", "f")]) == {((1, 0), (2, "True")), ((2, "False"),),
                                     ((1, 1), (2, 0))}
    assert set(pats[("a", "passes_on")]) == {((1, 7), (2, 0))}
    # 7 passed on through passes_on's n; its m is assigned, so not followed
    assert set(pats[("b", "g")]) == {((1, 3),), ((1, -1),), ((1, 7),), ()}
    # a local assigned a literal once is that literal; one widened later is compiled
    # for the literal first and then again
    assert set(pats[("b", "g3")]) == {((1, 0),)}
    assert dict(pats[("b", "g2")]) == {(): ["a.py:31"],
                                       ((1, 0),): ["a.py:31 (w = 0 at first)"]}

"""Random non-monotone loop bodies against a from-scratch Python fixed point.

Most loop tests are reachability, where the input counts of the loop's ``distinct``
only grow from one iteration to the next. Here hypothesis draws loop bodies ``f(x)``
from a small grammar over a loop variable ``x`` of pairs ``(a, b)`` with values in
``0..D-1`` (``-D+1..D-1`` after a ``count`` or ``sum``), mixing monotone pieces with
non-monotone ones, so that a ``distinct`` inside the loop sees the count of a row rise
and fall (negative changes at later iterations). That is the case the native engine's
sequential loops keep in compact form (a value-less ``distinct``'s or ``top_k``'s
per-key history, up to three ``(iteration, diff)`` entries inline in a hash-table row,
the third packed into 30-bit fields, see ``kernels/hstate.py``).

The grammar (expressions are nested tuples such as ``("hop", ("x",))``, which
hypothesis prints when an example fails):

* leaves: the loop variable ``x``, the loop's own input ``init`` and an input ``edges``,
  both entered into the loop;
* ``hop``: ``e`` joined with ``edges`` on ``b``, re-keyed to ``(a, dst)`` by maps;
  ``swap``: ``(b, a)``; ``succ``: ``(a, b + 1)`` kept while ``b + 1 < D``;
  ``filter``: one of a few comparisons of ``a`` and ``b``;
* ``concat``; ``minus`` (``e1.concat(e2.negate())``); ``antijoin`` of ``e1`` against
  the keys of ``e2`` (``distinct`` of its first column); ``distinct``;
* reductions keyed by ``a``, each giving pairs ``(a, v)``: ``count`` (``v`` the sum of
  the counts of ``a``'s rows) and ``sum`` (of ``b`` times count), both emitted for every
  key with a row of non-zero count, even when ``v`` is 0 or negative (the kernels'
  ``logic_count``/``logic_sum``), then clamped to ``-D < v < D`` by a filter so that
  values stay bounded; ``min`` and ``max`` of ``b`` over the rows with positive count
  (no row for a key without one). Their inputs are any expression, so they see
  negative counts, and ``count``'s input is sometimes a ``distinct``'s output (the
  count of key columns alone). They run in the sequential loops' general reduce path
  (keys with values and output blocks, rescheduled at later iterations);
* ``top_k`` in its two forms: ``("top_k", k, e)`` keyed by ``a`` (``k`` in 1..3), per
  key the ``k`` smallest ``b`` counting multiplicity, that is the rows with positive
  count in order of ``b``, each with count ``min(c, slots left)`` (the sequential
  loops read a key's values in that order and stop once they hold ``k`` counts, and
  reschedule the key like the reduces above); and ``("top_k_rows", k, e)``, value-less
  (``top_k(k, key=2)``: every row of positive count ``c`` with count ``min(c, k)``,
  ``k`` in 2..3), which the sequential loops run like a value-less ``distinct`` (no
  output kept, the corrections from the input history alone);
* the body is ``distinct(...)`` of such an expression or, one time in three,
  ``top_k_rows(k, ...)``, which bounds the loop's counts at ``k`` and so keeps in its
  result the multiplicities ``top_k``, ``hop`` and ``concat`` make (a ``distinct``
  hides them); the expression is often shaped as an inflationary step ``init + e``, a
  semi-naive difference ``e - x`` or both.

Every map and filter is a projection or a sum of columns and every reduce (``top_k``
in both forms too) is built in, so the native engine runs the loop sequentially in
mode ``"sequential"`` (asserted: the test cannot silently fall back to round-wise
loops) and round-wise in mode ``"rounds"`` (the ``loop_mode`` fixture runs the module
in both).

The oracle, written from ``Collection.iterate``'s definition (``x_0`` is the loop's
input, ``x_{i+1} = body(x_i)``; the result is the fixed point) and never from the
engine: at every time ``t`` of ``0..T-1`` it accumulates both inputs at ``t`` (multisets
with negative counts allowed: ``x_0`` is ``init`` as it is) and evaluates the body
from scratch on ``{row: count}`` dicts (each operator from its documented definition;
for ``top_k``, ``Collection.top_k``'s and ``logic_top_k``'s in ``kernels/reduce.py``),
iteration after iteration, until ``x`` stops changing (the expected output at ``t``)
or returns to an earlier value without having settled (the loop never converges:
bodies here may oscillate). A loop that never converges must raise
``IterationLimitError`` (``max_iterations=K``) in the run that reaches that time, and
every earlier time must still be right; examples whose loop settles too close to
``K`` for the limit to be unambiguous (or not within the oracle's search) are
rejected. The update streams (``oracle.stream``, times ``0..5``) hold retractions,
negative counts and rows that vanish and return; they are fed one run per time and
all in one run.

Three pinned examples of the grammar check that the case is reached: their oracles
show a loop ``distinct``'s input count at a key rising and then falling (in one, the
third change of a key's count negative: the packed third inline entry), and the
engine must agree on them, the Python engine too. Three more pin the reduces: a
``count`` whose total goes to 0 (still emitted) and below, a ``min`` that skips
negatively counted rows beside a ``sum`` that changes (and leaves the clamp) at later
iterations, and a ``sum`` that a later time must evaluate again at iterations where
only its earlier history changes. Two pin ``top_k``, each with its output changing at
a later iteration of a later time: a row cut off at iteration 0 that takes a slot at
iteration 1 as the count of the row before it falls, and a row that a smaller one
pushes out at iteration 1 (with the value-less form as the body, so the result keeps
the counts ``min(c, slots left)``).

Two outer time coordinates. A second property test runs the same grammar in a
``Dataflow(time_dims=2)``, its input streams over ``oracle``'s two-dimensional grid
(``(0, 0)`` to ``(3, 3)``). The native engine runs one outer time coordinate only, so
the dataflow's ``engine="auto"`` runs the Python engine (asserted: ``df._native is
False``); this test exercises the Python engine's loops (rounds over every outer time
of a run at once, reduces correcting their output at joins of times) and nothing of
the native engine. The inputs are fed all at once and a run per first coordinate
``i`` (advanced to ``(i + 1, 0)``); after each run, at every grid point ``t`` it
completed, the captured updates accumulated at ``t`` in the product order (and
``Captured.at(t)``) must equal the oracle's fixed point of the inputs accumulated at
``t``, and no output lies off the grid. A point whose loop never converges must make
the first run that completes it raise ``IterationLimitError`` (see
:func:`run_engine_2d`). A pinned example has a loop ``distinct`` correct its output
at a point where no input changed, the join of two times of its input's history.

The keyed ``top_k``'s walk. The sequential loops read a keyed ``top_k``'s input at a
key in order of value and stop once the rows read hold ``k`` positive counts. A walk
that stops one count short of ``k`` differs only where the key's rows of positive
count add up to exactly ``k - 1`` before a further one (which takes the last slot),
and shows only where the loop's result depends on that row: the grammar draws the
first in a few examples in a hundred, both well under one in a hundred. A third property
test draws its bodies for that case and checks them like the first (every time, both
loop modes, the sequential path asserted): ``top_k(k, e)``, ``k`` of 2 or 3 and ``e``
an expression of ``x`` that gives a key several values with counts above 1 changing
over the iterations (such as ``x + hop(x)`` or ``x + swap(x)``), alone, as
``init + top_k`` or as ``top_k - x``, under a ``distinct`` or a value-less ``top_k``
(which keeps the keyed one's counts in the result). Its inputs crowd onto few keys
(``init``'s rows onto keys 0 and 1), each row with its own count at every time, some
of them negative. With the walk one count short, about two examples in five fail;
with the logic giving out ``k + 1`` slots of the rows read, about one in three.
"""
from __future__ import annotations

import itertools

import pytest
from hypothesis import assume, event, given, settings
from hypothesis import strategies as st

import ddnumba as dd
from ddnumba.operators.iterate import IterationLimitError
from oracle import EXAMPLES, GRID_MAX, SETTINGS, accumulate_at, captured_at, \
    captured_updates, feed, points, states_to_updates, stream, time_arg

# every test here runs with the native engine's loops sequential and round-wise
pytestmark = pytest.mark.usefixtures("loop_mode")

D = 4                   # values of both columns: 0..D-1
T = GRID_MAX[1] + 1     # times 0..T-1 (oracle.stream's one-dimensional grid)
K = 30                  # the loop's max_iterations
SETTLED_BY = K - 4      # the oracle accepts loops that settle by this iteration ...
SEARCH = 200            # ... and looks this far for a settled or repeated value

PREDICATES = {
    "a<b": lambda a, b: a < b,
    "a!=b": lambda a, b: a != b,
    "b<2": lambda a, b: b < 2,
    "a+b<=3": lambda a, b: a + b <= 3,
}
LEAVES = ("x", "init", "edges")
REDUCES = ["count", "sum", "min", "max"]        # keyed by the first column
# top_k, by the k each form draws: ("top_k", k, e) keyed by the first column, its
# values the second; ("top_k_rows", k, e) value-less, keyed by the whole row (with
# k = 1 it would be a distinct)
TOP_K_KS = {"top_k": (1, 2, 3), "top_k_rows": (2, 3)}


# ---------------------------------------------------------------------- the grammar
X, INIT, EDGES = ("x",), ("init",), ("edges",)


def exprs(depth):
    """Expressions of at most ``depth`` operators (hypothesis shrinks to leaves)."""
    leaf = st.sampled_from([X, X, INIT, EDGES])
    if depth == 0:
        return leaf
    sub = exprs(depth - 1)
    return st.one_of(
        leaf,
        st.tuples(st.sampled_from(["hop", "swap", "succ", "distinct"]), sub),
        st.tuples(st.sampled_from(REDUCES), sub),
        st.sampled_from(sorted(TOP_K_KS)).flatmap(
            lambda op: st.tuples(st.just(op), st.sampled_from(TOP_K_KS[op]), sub)),
        st.tuples(st.just("filter"), st.sampled_from(sorted(PREDICATES)), sub),
        st.tuples(st.sampled_from(["concat", "minus", "antijoin"]), sub, sub),
    )


def _ops(expr):
    yield expr[0]
    for e in expr[1:]:
        if isinstance(e, tuple):
            yield from _ops(e)


def mentions_x(expr):
    return expr == X or any(isinstance(e, tuple) and mentions_x(e) for e in expr[1:])


@st.composite
def bodies(draw, depth=3):
    """A loop body: ``distinct`` (or, one time in three, a value-less ``top_k``, which
    bounds counts at ``k`` and keeps them in the result) of an expression, plain or in
    one of the shapes of inflationary (``init + e``) and semi-naive (``e - x``)
    steps."""
    e = draw(exprs(depth))
    shape = draw(st.sampled_from(["plain", "inflate", "frontier", "both"]))
    if shape in ("frontier", "both"):
        e = ("minus", e, X)
    if shape in ("inflate", "both"):
        e = ("concat", INIT, e)
    if draw(st.sampled_from(["distinct", "distinct", "top_k_rows"])) == "distinct":
        body = ("distinct", e)
    else:
        body = ("top_k_rows", draw(st.sampled_from(TOP_K_KS["top_k_rows"])), e)
    assume(mentions_x(body))
    return body


# The keyed top_k's walk (test_keyed_top_k_walks_to_k_counts, see the module
# docstring): top_k's inputs, expressions of x that give a key several values with
# counts above 1 (concat, hop, x twice) that change over the iterations.
TOP_K_INPUTS = [X, ("concat", X, INIT), ("concat", X, ("swap", X)),
                ("concat", X, ("hop", X)), ("concat", INIT, ("hop", X)),
                ("succ", ("concat", X, X))]


@st.composite
def top_k_bodies(draw):
    """A loop body around ``top_k(k, e)`` with ``e`` from TOP_K_INPUTS: the ``top_k``
    alone (one time in two), ``init + top_k`` or ``top_k - x``, under a ``distinct``
    (one time in four) or a value-less ``top_k`` (``k`` of 2 or 3), which keeps in the
    result the counts the keyed one gives."""
    e = ("top_k", draw(st.sampled_from((2, 3, 3))), draw(st.sampled_from(TOP_K_INPUTS)))
    shape = draw(st.sampled_from(["plain", "plain", "inflate", "frontier"]))
    if shape == "inflate":
        e = ("concat", INIT, e)
    elif shape == "frontier":
        e = ("minus", e, X)
    outer = draw(st.sampled_from(["distinct", 2, 3, 3]))
    return ("distinct", e) if outer == "distinct" else ("top_k_rows", outer, e)


@st.composite
def crowded_stream(draw, keys, min_rows):
    """Updates at times ``0..T-1`` of ``min_rows`` to 6 rows ``(a, b)`` with
    ``a < keys`` and ``b < D``, each with its own count at every time (mostly 1 or 2,
    sometimes 0 or -1: rows come, go and return, and some count below zero)."""
    pairs = [(a, b) for a in range(keys) for b in range(D)]
    rows = draw(st.lists(st.sampled_from(pairs), min_size=min_rows, max_size=6,
                         unique=True))
    counts = st.lists(st.sampled_from([0, 1, 1, 2, 2, -1]), min_size=T, max_size=T)
    hist = {r: draw(counts) for r in rows}
    return states_to_updates(
        {(t,): {r: cs[t] for r, cs in hist.items() if cs[t]} for t in range(T)}, 1)


# ------------------------------------------------------------------------ the oracle
def _add(out, row, c):
    c = out.get(row, 0) + c
    if c:
        out[row] = c
    else:
        out.pop(row, None)


def evaluate(expr, env, trace=None, path=()):
    """``expr`` on ``env`` (``{leaf: {row: count}}``) with plain dicts. With ``trace``,
    appends each ``distinct``'s input to ``trace[path of that distinct]`` (and each
    reduce's or ``top_k``'s to ``trace[its path plus its name]``)."""
    op = expr[0]
    if op in LEAVES:
        return env[op]
    args = [evaluate(e, env, trace, path + (i,)) for i, e in enumerate(expr[1:], 1)
            if isinstance(e, tuple)]
    out = {}
    if op == "hop":
        for (a, b), c in args[0].items():
            for (s, d), w in env["edges"].items():
                if s == b:
                    _add(out, (a, d), c * w)
    elif op == "swap":
        for (a, b), c in args[0].items():
            _add(out, (b, a), c)
    elif op == "succ":
        for (a, b), c in args[0].items():
            if b + 1 < D:
                _add(out, (a, b + 1), c)
    elif op == "filter":
        keep = PREDICATES[expr[1]]
        out = {r: c for r, c in args[0].items() if keep(*r)}
    elif op == "concat":
        out = dict(args[0])
        for r, c in args[1].items():
            _add(out, r, c)
    elif op == "minus":
        out = dict(args[0])
        for r, c in args[1].items():
            _add(out, r, -c)
    elif op == "antijoin":
        # e1 less its rows whose key is in distinct(e2's first column)
        sums = {}
        for (a, _), c in args[1].items():
            _add(sums, (a,), c)
        if trace is not None:
            trace.setdefault(path + ("keys",), []).append(sums)
        out = {r: c for r, c in args[0].items() if sums.get((r[0],), 0) <= 0}
    elif op in REDUCES:
        if trace is not None:
            trace.setdefault(path + (op,), []).append(args[0])
        out = _reduce(op, args[0])
    elif op in TOP_K_KS:
        if trace is not None:
            trace.setdefault(path + (op,), []).append(args[0])
        out = _top_k(op, expr[1], args[0])
    elif op == "distinct":
        if trace is not None:
            trace.setdefault(path, []).append(args[0])
        out = {r: 1 for r, c in args[0].items() if c > 0}
    else:
        raise ValueError(f"unknown operator {op!r}")
    return out


def _reduce(op, acc):
    """A reduce of ``acc`` keyed by its first column, from the documented semantics
    (DESIGN's conventions, ``kernels/reduce.py``): each key's rows with non-zero
    count; ``count`` and ``sum`` emit for every key with such a row, even a total of 0
    or below (then clamped to ``-D < v < D`` like the engine's filter); ``min`` and
    ``max`` look at the rows with positive count only."""
    groups = {}
    for (a, b), c in acc.items():
        if c:
            groups.setdefault(a, []).append((b, c))
    out = {}
    for a, rows in groups.items():
        if op in ("count", "sum"):
            v = sum(c if op == "count" else b * c for b, c in rows)
            if -D < v < D:
                out[(a, v)] = 1
        else:
            pos = [b for b, c in rows if c > 0]
            if pos:
                out[(a, min(pos) if op == "min" else max(pos))] = 1
    return out


def _top_k(op, k, acc):
    """``top_k(k)`` of ``acc`` from its documented definition (``Collection.top_k``:
    per key, the ``k`` smallest value rows counting multiplicity; ``logic_top_k`` in
    ``kernels/reduce.py``: the rows with positive count, in value order, a row of
    count ``c`` emitted with count ``min(c, slots left)``). ``"top_k"`` is keyed by
    ``a`` (values ``b``); ``"top_k_rows"`` by the whole row, whose only value is the
    empty one: each row of count ``c > 0`` with count ``min(c, k)``."""
    if op == "top_k_rows":
        return {r: min(c, k) for r, c in acc.items() if c > 0}
    groups = {}
    for (a, b), c in acc.items():
        if c > 0:
            groups.setdefault(a, []).append((b, c))
    out = {}
    for a, rows in groups.items():
        left = k
        for b, c in sorted(rows):
            if left == 0:
                break
            out[(a, b)] = min(c, left)
            left -= out[(a, b)]
    return out


def subexpr(expr, path):
    """The sub-expression of ``expr`` at ``path`` (indices into the nested tuples)."""
    for i in path:
        expr = expr[i]
    return expr


def top_k_outputs(body, trace):
    """``{path + (name,): [output at iteration 0, 1, ...]}`` of every ``top_k`` (either
    form) of ``body``, from its inputs in ``trace``."""
    return {path: [_top_k(path[-1], subexpr(body, path[:-1])[1], acc) for acc in inputs]
            for path, inputs in trace.items() if path and path[-1] in TOP_K_KS}


def top_k_changes_later(body, trace):
    """Whether some ``top_k``'s output at some row changes at an iteration after the
    first."""
    return any(i > 0 for outs in top_k_outputs(body, trace).values()
               for seq in changes_by_key(outs).values() for i, _ in seq)


def top_k_last_slot_later(body, trace):
    """Whether some keyed ``top_k``'s input at some iteration has a key whose rows of
    positive count, in order of value, add up to exactly ``k - 1`` before a further
    such row (which takes the last slot: a walk over the key's values that stops one
    count short of ``k`` leaves it out)."""
    for path, inputs in trace.items():
        if not path or path[-1] != "top_k":
            continue
        k = subexpr(body, path[:-1])[1]
        for acc in inputs:
            counts = {}         # per key, its positive counts in order of value
            for (a, _), c in sorted(acc.items()):
                if c > 0:
                    counts.setdefault(a, []).append(c)
            if any(k - 1 in itertools.accumulate(cs[:-1]) for cs in counts.values()):
                return True
    return False


def reduce_rescheduled(trace):
    """Whether some reduce's input at some key changes at an iteration after the
    first (the key is reduced again at a later iteration)."""
    return any(i > 0 for path, inputs in trace.items() if _is_reduce(path)
               for seq in changes_by_key(inputs).values() for i, _ in seq)


def _is_reduce(path):
    """Whether ``path`` is a reduce's with values (in the engine, a key's input and
    output history, evaluated again at later iterations); a value-less ``top_k``'s,
    like a ``distinct``'s, is a count per row."""
    return bool(path) and (path[-1] in REDUCES or path[-1] == "top_k")


def _frozen(acc):
    return frozenset(acc.items())


def fixed_point(body, init, edges):
    """The loop ``x_0 = init, x_{i+1} = body(x_i)`` on the accumulated inputs, as
    ``(kind, result, n, trace)``: ``kind`` is ``"settles"`` (``x_n == x_{n+1}``, the
    first such ``n``; ``result`` is ``x_n``), ``"cycles"`` (``x_{n+1}`` repeats an
    earlier value and differs from ``x_n``: the loop never settles) or ``"unknown"``
    (neither within SEARCH steps); ``trace`` holds every ``distinct``'s input at the
    iterations evaluated (``0..n``), by the path of that ``distinct`` in ``body`` (an
    ``antijoin``'s key ``distinct`` at its path plus ``"keys"``), and every reduce's
    input at its path plus its name (``"count"`` ...)."""
    x, trace = init, {}
    seen = {_frozen(x)}
    for i in range(SEARCH):
        nxt = evaluate(body, {"x": x, "init": init, "edges": edges}, trace)
        if nxt == x:
            return "settles", x, i, trace
        if _frozen(nxt) in seen:
            return "cycles", None, i, trace
        seen.add(_frozen(nxt))
        x = nxt
    return "unknown", None, SEARCH, trace


def changes_by_key(inputs):
    """``{row: [(iteration, change)]}``: the non-zero changes of each row's count over
    a list of per-iteration inputs (what a loop distinct's history holds per key)."""
    out = {}
    for row in {r for acc in inputs for r in acc}:
        prev, seq = 0, []
        for i, acc in enumerate(inputs):
            c = acc.get(row, 0)
            if c != prev:
                seq.append((i, c - prev))
            prev = c
        out[row] = seq
    return out


def rises_and_falls(trace):
    """Whether some distinct's input count at some key goes up at one iteration and
    down at a later one."""
    for path, inputs in trace.items():
        if _is_reduce(path):
            continue
        for seq in changes_by_key(inputs).values():
            ups = [i for i, d in seq if d > 0]
            if ups and any(i > ups[0] and d < 0 for i, d in seq):
                return True
    return False


def third_change_negative(trace):
    """Whether some distinct's input count at some key changes at three iterations or
    more, the third change negative (the packed third inline entry)."""
    return any(len(seq) >= 3 and seq[2][1] < 0
               for path, inputs in trace.items() if not _is_reduce(path)
               for seq in changes_by_key(inputs).values())


def expectations(body, init_ups, edge_ups):
    """The oracle's answer at each time ``0..T-1``: ``fixed_point``'s result on the
    inputs accumulated there."""
    return [fixed_point(body, accumulate_at(init_ups, (t,)),
                        accumulate_at(edge_ups, (t,))) for t in range(T)]


# ------------------------------------------------------------------------ the engine
def build(expr, env):
    """The dataflow of ``expr`` inside the loop (``env``: its leaves as loop
    collections)."""
    op = expr[0]
    if op in LEAVES:
        return env[op]
    if op == "filter":
        return build(expr[2], env).filter(PREDICATES[expr[1]])
    args = [build(e, env) for e in expr[1:] if isinstance(e, tuple)]
    if op == "hop":
        by_b = args[0].map(lambda a, b: (b, a), names=["b", "a"])
        return by_b.join(env["edges"]).map(lambda b, a, d: (a, d), names=["a", "b"])
    if op == "swap":
        return args[0].map(lambda a, b: (b, a), names=["a", "b"])
    if op == "succ":
        return args[0].map(lambda a, b: (a, b + 1), names=["a", "b"]) \
            .filter(lambda a, b: b < D)
    if op == "concat":
        return args[0].concat(args[1])
    if op == "minus":
        return args[0].concat(args[1].negate())
    if op == "antijoin":
        keys = args[1].map(lambda a, b: a, names=["a"]).distinct()
        return args[0].antijoin(keys)
    if op == "distinct":
        return args[0].distinct()
    if op == "count":
        return args[0].count(name="b").filter(lambda a, b: (b > -D) & (b < D))
    if op == "sum":
        return args[0].sum(0, name="b").filter(lambda a, b: (b > -D) & (b < D))
    if op == "min":
        return args[0].min(0, name="b")
    if op == "max":
        return args[0].max(0, name="b")
    if op == "top_k":
        return args[0].top_k(expr[1])
    if op == "top_k_rows":
        return args[0].top_k(expr[1], key=2)
    raise ValueError(f"unknown operator {op!r}")


def loop_dataflow(body, **options):
    """A ``Dataflow(**options)`` with inputs ``init`` and ``edges`` (pairs) and the loop
    of ``body`` from ``init``, captured: ``(df, init handle, edges handle, capture)``."""
    df = dd.Dataflow(**options)
    ih, init = df.new_input(["a", "b"])
    eh, edges = df.new_input(["src", "dst"])

    def loop_body(x):
        env = {"x": x, "init": init.enter(x), "edges": edges.enter(x)}
        return build(body, env)

    cap = init.iterate(loop_body, max_iterations=K, name="random_body").capture()
    return df, ih, eh, cap


def run_engine(body, init_ups, edge_ups, expected, *, loops, feed_mode,
               engine="native"):
    """Build the loop of ``body``, feed both inputs (``"step"``: a run per time;
    ``"all"``: one run for every time) and compare each time with ``expected``. A time
    whose loop never converges must make its run raise IterationLimitError; the
    example ends there."""
    df, ih, eh, cap = loop_dataflow(body, engine=engine, **(
        {"loops": loops, "workers": 1} if engine == "native" else {}))
    cycles = [t for t, e in enumerate(expected) if e[0] == "cycles"]
    diverges = cycles[0] if cycles else None
    where = f"[{engine} engine, {loops or 'its'} loops, {feed_mode}] body {body}"

    def check(t):
        assert captured_at(cap, t, 2) == expected[t][1], f"{where} at time {t}"

    runs = [range(T)] if feed_mode == "all" else [[t] for t in range(T)]
    for times in runs:
        for h, ups in ((ih, init_ups), (eh, edge_ups)):
            feed(h, [u for u in ups if u[1][0] in times], 2, 1)
            h.advance_to(times[-1] + 1)
        if diverges is not None and diverges <= times[-1]:
            with pytest.raises(IterationLimitError, match="random_body"):
                df.run()
            break
        df.run()
        for t in range(times[-1] + 1):      # (earlier times too: they must not move)
            check(t)
    else:
        captured_updates(cap)           # (consolidated and sorted)
    if engine == "native":
        assert df._native.sequential == [loops == "sequential"], \
            f"{where}: the loop did not run in the expected mode"


def run_both_ways(body, init_ups, edge_ups, expected, loops, engine="native"):
    """:func:`run_engine` fed a run per time, then all in one run."""
    for feed_mode in ("step", "all"):
        run_engine(body, init_ups, edge_ups, expected, loops=loops, feed_mode=feed_mode,
                   engine=engine)


def admissible(expected):
    """Whether every time's loop either settles well before K or never converges."""
    return all(kind == "cycles" or (kind == "settles" and n <= SETTLED_BY)
               for kind, _, n, _ in expected)


# ---------------------------------------------------------- two outer time coordinates
GRID2 = points(2)           # (0, 0) .. (G2, G2) under the product order
GRID2_SET = set(GRID2)
G2 = GRID_MAX[2]


def expectations_2d(body, init_ups, edge_ups):
    """``{p: fixed_point(...)}`` on the inputs accumulated at every point ``p`` of the
    two-dimensional grid (product order)."""
    return {p: fixed_point(body, accumulate_at(init_ups, p), accumulate_at(edge_ups, p))
            for p in GRID2}


def run_engine_2d(body, init_ups, edge_ups, expected, *, feed_mode):
    """As :func:`run_engine` over ``Dataflow(time_dims=2)`` (``engine="auto"``, which
    must fall back to the Python engine), fed all at once (``"all"``) or a run per
    first coordinate ``i`` (``"step"``: the updates with ``time[0] == i``, inputs
    advanced to ``(i + 1, 0)``). After each run every complete point of the grid is
    compared, the captured updates accumulated there in the product order."""
    df, ih, eh, cap = loop_dataflow(body, time_dims=2, engine="auto", workers=1)
    where = f"[time_dims=2, {feed_mode}] body {body}"
    runs = [range(G2 + 1)] if feed_mode == "all" else [[i] for i in range(G2 + 1)]
    for firsts in runs:
        for h, ups in ((ih, init_ups), (eh, edge_ups)):
            feed(h, [u for u in ups if u[1][0] in firsts], 2, 2)
            h.advance_to((firsts[-1] + 1, 0))
        done = [p for p in GRID2 if p[0] <= firsts[-1]]
        if any(expected[p][0] == "cycles" for p in done):
            # The Python engine runs a loop's rounds for every outer time the run
            # completes at once (operators/iterate.py) and raises when a round at
            # max_iterations or later still has work (Collection.iterate): a point
            # whose loop never converges has work at every iteration, so the first
            # run that completes one must raise. The runs before it complete only
            # points whose loops settle by SETTLED_BY, at which, and at every point
            # below which, nothing in the loop changes after that iteration: they
            # must not raise.
            with pytest.raises(IterationLimitError, match="random_body"):
                df.run()
            break
        df.run()
        assert df._native is False, f"{where}: not the Python engine"
        ups = captured_updates(cap)
        assert all(t in GRID2_SET for _, t, _ in ups), \
            f"{where}: output at times off the grid: {ups}"
        for p in done:
            assert accumulate_at(ups, p) == expected[p][1], f"{where} at time {p}"
            assert captured_at(cap, time_arg(p), 2) == expected[p][1], \
                f"{where}: Captured.at{p}"
    assert df._native is False, f"{where}: not the Python engine"


# ------------------------------------------------------------------------- the tests
# Examples cost ~10 ms (both feed modes): four times the oracle modules' count. With
# the packed third entry's diff read without sign extension, about one example in 50
# fails, so this test alone usually catches it; the pinned cases below always do.
@settings(SETTINGS, max_examples=4 * EXAMPLES)
@given(body=bodies(), init_ups=stream(2, 1, domain=D, max_size=10),
       edge_ups=stream(2, 1, domain=D, max_size=12))
def test_random_bodies_match_the_fixed_point(loop_mode, body, init_ups, edge_ups):
    expected = expectations(body, init_ups, edge_ups)
    assume(admissible(expected))
    if any(kind == "cycles" for kind, _, _, _ in expected):
        event("a time whose loop never converges")
    if any(rises_and_falls(tr) for _, _, _, tr in expected):
        event("a distinct's input count rises and falls")
    if any(third_change_negative(tr) for _, _, _, tr in expected):
        event("a distinct's input count changes three times, the third down")
    if any(op in REDUCES for op in _ops(body)):
        event("a reduce in the loop")
    if any(reduce_rescheduled(tr) for _, _, _, tr in expected):
        event("a reduce's input at a key changes at a later iteration")
    for op in TOP_K_KS:
        if op in _ops(body):
            event(f"a {op} in the loop")
    if any(top_k_changes_later(body, tr) for _, _, _, tr in expected):
        event("a top_k's output changes at a later iteration")
    run_both_ways(body, init_ups, edge_ups, expected, loop_mode)


# The Python engine has no loop modes: the module's two passes draw different examples.
@settings(SETTINGS, max_examples=2 * EXAMPLES)
@given(body=bodies(), init_ups=stream(2, 2, domain=D, max_size=10),
       edge_ups=stream(2, 2, domain=D, max_size=12))
def test_random_bodies_over_two_outer_time_coordinates(body, init_ups, edge_ups):
    expected = expectations_2d(body, init_ups, edge_ups)
    assume(admissible(expected.values()))
    if any(kind == "cycles" for kind, _, _, _ in expected.values()):
        event("a point whose loop never converges")
    elif any(x for _, x, _, _ in expected.values()):
        event("a point with a non-empty fixed point")
        out_times = {t for _, t, _ in states_to_updates(
            {p: x for p, (_, x, _, _) in expected.items()}, 2)}
        if out_times - {t for _, t, _ in init_ups + edge_ups}:
            event("an output update at a time of no input update (a join)")
    for feed_mode in ("step", "all"):
        run_engine_2d(body, init_ups, edge_ups, expected, feed_mode=feed_mode)


# With the sequential loops' walk over a key's values stopping one count short of k,
# about two examples in five fail here (in the first test, well under one in a hundred).
@settings(SETTINGS, max_examples=2 * EXAMPLES)
@given(body=top_k_bodies(), init_ups=crowded_stream(2, 3),
       edge_ups=crowded_stream(D, 2))
def test_keyed_top_k_walks_to_k_counts(loop_mode, body, init_ups, edge_ups):
    expected = expectations(body, init_ups, edge_ups)
    assume(admissible(expected))
    if any(top_k_last_slot_later(body, tr) for _, _, _, tr in expected):
        event("a key's last top_k slot goes to a row after k - 1 counts")
    if any(top_k_changes_later(body, tr) for _, _, _, tr in expected):
        event("a top_k's output changes at a later iteration")
    run_both_ways(body, init_ups, edge_ups, expected, loop_mode)


# Pinned examples of the grammar (found by the first test above with the packed third
# entry's diff read unsigned: each fails then), each fed both ways, on the native
# engine (in both loop modes) and on the Python engine (which has no loop modes: it
# runs the same in both passes of the module).
ENGINES = ["native", "python"]


@pytest.mark.parametrize("engine", ENGINES)
def test_a_distinct_input_count_rises_and_falls(loop_mode, engine):
    """``x - hop(x)`` shifted by ``succ``: a chain walked off the end of the domain.
    At time 1 an edge with count -1 adds rows to iteration 0 that leave later, so the
    loop ``distinct``'s input at ``(0, 2)`` rises at iteration 0 and falls at 2 (from
    scratch), and the history the engine kept from time 0 (up at 1, down at 2) gains
    an entry before them: three entries, the third negative."""
    body = ("distinct", ("succ", ("minus", X, ("hop", X))))
    init_ups = [((0, 0), (0,), 1)]
    edge_ups = [((0, 1), (1,), -1)]
    expected = expectations(body, init_ups, edge_ups)
    assert [(kind, x, n) for kind, x, n, _ in expected] == [("settles", {}, 4)] * T
    # the input of the body's own distinct (path ()) at times 0 and 1, at (0, 2)
    assert changes_by_key(expected[0][3][()])[(0, 2)] == [(1, 1), (2, -1)]
    assert changes_by_key(expected[1][3][()])[(0, 2)] == [(0, 1), (2, -1)]
    assert rises_and_falls(expected[1][3])
    run_both_ways(body, init_ups, edge_ups, expected, loop_mode, engine)


@pytest.mark.parametrize("engine", ENGINES)
def test_a_negative_count_in_the_loop_input_seeds_the_loop(loop_mode, engine):
    """``hop(distinct(x)) - x``: ``init`` is empty until time 4, where it holds
    ``(0, 0)`` with count -1, which ``- x`` turns into a row (the loop settles at
    iteration 2 on two rows); at time 5 that row is gone and ``(0, 1)`` came: the
    loop settles on nothing."""
    body = ("distinct", ("minus", ("hop", ("distinct", X)), X))
    init_ups = [((0, 0), (4,), -1), ((0, 0), (5,), 1), ((0, 1), (5,), 1)]
    edge_ups = [((0, 0), (0,), 2), ((0, 1), (0,), 3)]
    expected = expectations(body, init_ups, edge_ups)
    assert [x for _, x, _, _ in expected] == [{}] * 4 + [{(0, 0): 1, (0, 1): 1}, {}]
    assert any(rises_and_falls(tr) for _, _, _, tr in expected)
    run_both_ways(body, init_ups, edge_ups, expected, loop_mode, engine)


@pytest.mark.parametrize("engine", ENGINES)
def test_an_oscillating_body_raises_at_the_iteration_limit(loop_mode, engine):
    """``edges - x`` with ``init`` holding the one edge twice: ``x`` alternates between
    nothing and the edge from iteration 1 on, so the loop never converges, and the
    ``distinct``'s input at the edge changes by -1, +2, -1, +1, -1, ... (the third
    inline entry negative)."""
    body = ("distinct", ("minus", EDGES, X))
    init_ups = [((0, 0), (0,), 2)]
    edge_ups = [((0, 0), (0,), 1)]
    expected = expectations(body, init_ups, edge_ups)
    assert [kind for kind, _, _, _ in expected] == ["cycles"] * T
    assert changes_by_key(expected[0][3][()])[(0, 0)][:3] == [(0, -1), (1, 2), (2, -1)]
    assert third_change_negative(expected[0][3])
    run_both_ways(body, init_ups, edge_ups, expected, loop_mode, engine)


@pytest.mark.parametrize("engine", ENGINES)
def test_a_count_in_the_loop_goes_to_zero_and_below(loop_mode, engine):
    """``count(hop(x) - x)``: at time 0 the key's rows ``(0, 1)`` and ``(0, 0)`` count
    +1 and -1, a total of 0, which ``count`` still emits (the loop settles on
    ``(0, 0)``; omitting it would settle on nothing). From time 1 the edge counts -1:
    the total is -2, then the loop's own negative rows make it -1 at iteration 2, where
    it settles on ``(0, -1)``: one key reduced again at later iterations with new
    values."""
    body = ("distinct", ("count", ("minus", ("hop", X), X)))
    init_ups = [((0, 0), (0,), 1)]
    edge_ups = [((0, 1), (0,), 1), ((0, 1), (1,), -2), ((0, 1), (3,), 1)]
    expected = expectations(body, init_ups, edge_ups)
    assert [(x, n) for _, x, n, _ in expected] == \
        [({(0, 0): 1}, 0)] + [({(0, -1): 1}, 2)] * 2 + [({(0, -1): 1}, 1)] * 3
    assert expected[1][3][(1, "count")] == \
        [{(0, 1): -1, (0, 0): -1}, {(0, -2): -1}, {(0, -1): -1}]
    run_both_ways(body, init_ups, edge_ups, expected, loop_mode, engine)


@pytest.mark.parametrize("engine", ENGINES)
def test_min_and_sum_in_the_loop(loop_mode, engine):
    """``min(edges - x) + sum(succ(x))``: ``min`` skips the rows ``- x`` makes
    negative, and the sum at key 0 goes 1, 5 (dropped by the clamp), 3 over the
    iterations before the loop settles at iteration 3 on ``(0, 2), (0, 3)``; at time
    1 new edges add key 1."""
    body = ("distinct", ("concat", ("min", ("minus", EDGES, X)), ("sum", ("succ", X))))
    init_ups = [((0, 0), (0,), 1)]
    edge_ups = [((0, 2), (0,), 2), ((0, 3), (1,), -1), ((1, 3), (1,), 2)]
    expected = expectations(body, init_ups, edge_ups)
    assert [(x, n) for _, x, n, _ in expected] == \
        [({(0, 2): 1, (0, 3): 1}, 3)] + [({(0, 2): 1, (0, 3): 1, (1, 3): 1}, 3)] * 5
    assert expected[0][3][(1, 2, "sum")] == \
        [{(0, 1): 1}, {(0, 2): 1, (0, 3): 1}, {(0, 3): 1}, {(0, 3): 1}]
    assert reduce_rescheduled(expected[0][3])
    run_both_ways(body, init_ups, edge_ups, expected, loop_mode, engine)


@pytest.mark.parametrize("engine", ENGINES)
def test_a_sum_reevaluated_at_a_later_iteration_of_a_later_time(loop_mode, engine):
    """``hop(sum(x + edges))`` (found by the property test with the sequential loops'
    rescheduling of a reduce's keys switched off, which it catches only in a longer
    search): the edge ``(0, 0)`` is in at times 0 and 1, and ``init``'s row ``(0, 0)``
    counts -1 at time 1 and 0 again from time 2. At time 1 the sum's key 0 then has
    history, from time 0, at iterations after the one its new input changes at, and
    must be evaluated there again though no input row arrives at those iterations."""
    body = ("distinct", ("hop", ("sum", ("concat", X, EDGES))))
    init_ups = [((0, 0), (1,), -1), ((0, 0), (2,), 1)]
    edge_ups = [((0, 0), (0,), 1), ((0, 0), (2,), -1)]
    expected = expectations(body, init_ups, edge_ups)
    assert [x for _, x, _, _ in expected] == [{(0, 0): 1}] * 2 + [{}] * (T - 2)
    assert reduce_rescheduled(expected[1][3])
    run_both_ways(body, init_ups, edge_ups, expected, loop_mode, engine)


@pytest.mark.parametrize("engine", ENGINES)
def test_a_top_k_row_cut_at_one_iteration_enters_at_a_later_one(loop_mode, engine):
    """``init + top_k(2, hop(x))`` with ``init`` holding ``(0, 0)`` twice and the edge
    ``(0, 0)`` once: at time 0 the ``top_k``'s input at key 0 is ``(0, 0)`` with count
    2, then 1 (``x`` is a ``distinct`` from iteration 1). At time 1 the edge ``(0, 1)``
    comes with count 2: at iteration 0 the key's input also holds ``(0, 1)`` (count 4),
    cut off since ``(0, 0)`` fills both slots; at iteration 1 ``(0, 0)`` falls to 1
    (and ``(0, 1)`` to 2) and ``(0, 1)`` takes the slot left (count ``min(2, 1)``): the
    ``top_k``'s output changes at a later iteration of a later time, and the loop
    settles one iteration later on both rows. (With the sequential loops' walk over a
    key's values stopping one count short of ``k``, this fails, and so does the third
    property test; the first one rarely does.)"""
    body = ("distinct", ("concat", INIT, ("top_k", 2, ("hop", X))))
    init_ups = [((0, 0), (0,), 2)]
    edge_ups = [((0, 0), (0,), 1), ((0, 1), (1,), 2)]
    expected = expectations(body, init_ups, edge_ups)
    assert [(x, n) for _, x, n, _ in expected] == \
        [({(0, 0): 1}, 1)] + [({(0, 0): 1, (0, 1): 1}, 2)] * (T - 1)
    path = (1, 2, "top_k")
    assert expected[1][3][path][:2] == [{(0, 0): 2, (0, 1): 4}, {(0, 0): 1, (0, 1): 2}]
    outs = [changes_by_key(top_k_outputs(body, expected[t][3])[path]) for t in (0, 1)]
    assert outs == [{(0, 0): [(0, 2), (1, -1)]},
                    {(0, 0): [(0, 2), (1, -1)], (0, 1): [(1, 1)]}]
    assert top_k_changes_later(body, expected[1][3])
    run_both_ways(body, init_ups, edge_ups, expected, loop_mode, engine)


@pytest.mark.parametrize("engine", ENGINES)
def test_a_top_k_row_pushed_out_at_a_later_iteration_of_a_later_time(loop_mode, engine):
    """``top_k_rows(2, top_k(3, x + swap(x)))``: the keyed ``top_k`` gives rows counts
    below their input's (``min(c, slots left)``), and the value-less one caps the
    loop's counts at 2, so the result keeps multiplicities. At time 0 (``init``:
    ``(0, 1)`` and ``(1, 1)``) key 1's ``(1, 1)`` gets 2 slots, then 1 of its 4 at
    iteration 1, and none at iteration 2; the loop settles at iteration 3. At time 1
    ``init`` gains ``(0, 0)``: at iteration 1 its count (4) fills key 0's three slots,
    so ``(0, 1)``, in the output at every iteration at time 0, leaves it there, and
    ``(1, 1)`` keeps its slot: the loop settles at iteration 2 on other rows. (This
    fails with a keyed ``top_k``'s row emitted with its whole count, in the sequential
    loops or in ``logic_top_k``, and with a value-less one's count not capped at ``k``
    in the sequential loops.)"""
    body = ("top_k_rows", 2, ("top_k", 3, ("concat", X, ("swap", X))))
    init_ups = [((0, 1), (0,), 1), ((1, 1), (0,), 1), ((0, 0), (1,), 1)]
    expected = expectations(body, init_ups, [])
    later = {(0, 0): 2, (1, 0): 2, (1, 1): 1}
    assert [(x, n) for _, x, n, _ in expected] == \
        [({(0, 1): 2, (1, 0): 2}, 3)] + [(later, 2)] * (T - 1)
    path = (2, "top_k")
    assert expected[1][3][path][1] == {(0, 0): 4, (0, 1): 2, (1, 0): 2, (1, 1): 4}
    outs = [changes_by_key(top_k_outputs(body, expected[t][3])[path]) for t in (0, 1)]
    assert outs[0][(0, 1)] == [(0, 1), (1, 1), (2, 1)]
    assert outs[0][(1, 1)] == [(0, 2), (1, -1), (2, -1)]
    assert outs[1][(0, 1)] == [(0, 1), (1, -1)]
    assert outs[1][(0, 0)] == [(0, 2), (1, 1)]
    assert outs[1][(1, 1)] == [(0, 2), (1, -1)]
    run_both_ways(body, init_ups, [], expected, loop_mode, engine)


def test_two_outer_coordinates_a_distinct_corrected_at_a_join_of_input_times():
    """``init + hop(x)`` over two outer coordinates (the case the property test above
    finds, on smaller bodies, with a reduce's history left out of the joins of times
    of three coordinates; this example fails then): ``init`` gains ``(0, 0)`` at
    ``(0, 1)`` and again at ``(1, 0)``, and the edge ``(0, 1)`` comes at ``(1, 0)``.
    At ``(1, 1)``, where no input changes, ``init`` holds ``(0, 0)`` twice: the loop's
    ``distinct`` must take its output there back to one, a correction at the join of
    two times of its input's history (in the step mode, one from an earlier run)."""
    body = ("distinct", ("concat", INIT, ("hop", X)))
    init_ups = [((0, 0), (0, 1), 1), ((0, 0), (1, 0), 1)]
    edge_ups = [((0, 1), (1, 0), 1)]
    expected = expectations_2d(body, init_ups, edge_ups)
    assert expected[(0, 1)][1] == {(0, 0): 1}
    assert expected[(1, 0)][1] == expected[(1, 1)][1] == {(0, 0): 1, (0, 1): 1}
    assert expected[(1, 1)][3][()][0] == {(0, 0): 2, (0, 1): 2}
    assert ((0, 0), (1, 1), -1) in states_to_updates(
        {p: x for p, (_, x, _, _) in expected.items()}, 2)
    for feed_mode in ("step", "all"):
        run_engine_2d(body, init_ups, edge_ups, expected, feed_mode=feed_mode)

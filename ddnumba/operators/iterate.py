"""Iteration: loop scopes, variables, enter/leave, and the round scheduler.

A loop is a child :class:`LoopScope` whose times have one more coordinate than its
parent's: the iteration counter. ``enter`` appends a 0; a :class:`Variable`'s feedback
edge adds 1; ``leave`` drops the coordinate (and consolidates, summing the changes of all
iterations into the fixed point). ``x.iterate(body)`` is ``x_{i+1} = body(x_i)`` with
``x_0 = x``: the variable is ``source + feedback`` where the feedback carries
``body(variable) - source`` one iteration later.

Rounds. The parent runs the whole loop when its pass reaches the loop's
:class:`LoopNode`. The loop then runs *rounds*: round ``k`` steps every node of the
scope once (creation order is topological except for feedback) with the frontier

    F_k = antichain( {(p, 0) : p in P}  ∪  {(q, k + 1) : q in Q} )

where ``P`` is the parent's current frontier (inputs not yet complete) and ``Q`` a lower
bound of the outer times of the work of this run (the parent's previous frontier, or for a
nested loop the parent's own ``(q, round)``). Times not in the future of ``F_k`` — outer
part complete and iteration ``<= k`` — are complete, so stateful operators process every
update with iteration ``<= k``, for *all* outer times at once. Rounds skip ahead to the
smallest iteration that has work, and the loop ends when no work remains that is not in
the future of ``P`` (queued updates, arrangements' held updates, reduces' pending times,
nested loops' work). A final pass with ``F = {(p, 0)}`` lets traces compact. Frontiers
move forward across rounds and runs, as traces require.

``max_iterations`` bounds the rounds: a loop that does not converge raises
:class:`IterationLimitError` naming the loop instead of hanging.
"""
from __future__ import annotations

import numpy as np

from ddnumba.dataflow import Node, Scope, meet_frontiers
from ddnumba.kernels import lattice as _lattice
from ddnumba.updates import Updates

_I64 = np.int64


def ctrl_c_hint() -> str:
    """How to stop a loop that does not converge, for the warning at iteration 10,000.

    A process started with SIGINT ignored (a background job of a shell without job
    control, ``nohup``) cannot be interrupted by Ctrl-C, so the warning says so rather
    than promise it. A worker process ignores SIGINT on purpose (its driver handles
    Ctrl-C) and is told the usual thing."""
    import signal
    from ddnumba import workers
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN and workers.rank() == 0:
        return ("SIGINT is ignored in this process (started in the background or "
                "under nohup), so Ctrl-C cannot interrupt it; stop it with kill")
    return "Ctrl-C interrupts it"


class IterationLimitError(RuntimeError):
    """A loop ran more rounds than its ``max_iterations``."""


class LoopScope(Scope):
    """A child scope with one extra (iteration) time coordinate."""

    def __init__(self, df, parent, *, name, max_iterations=None):
        super().__init__(df, parent, parent.dims + 1)
        self.name = name
        self.max_iterations = max_iterations
        self.entered: dict[int, "Node"] = {}      # outer node id -> EnterNode
        self.enter_nodes: list[EnterNode] = []
        self.round_frontier = np.zeros((1, self.dims), _I64)
        self.Q = np.zeros((1, parent.dims), _I64)
        self.k = 0
        self.rounds_run = 0
        self.closed = False       # set once the loop is scheduled in its parent

    def node_frontier(self, node):
        return self.round_frontier

    def import_collection(self, other):
        """Enter a collection of an enclosing scope into this one (cached)."""
        from ddnumba.collection import Collection
        chain = []
        s = self
        while s is not None and s is not other.scope:
            chain.append(s)
            s = s.parent
        if s is None:
            raise ValueError(f"collection {other.names} is not from an enclosing scope "
                             f"of loop {self.name!r}")
        c = other
        for scope in reversed(chain):
            node = scope.entered.get(id(c._node))
            if node is None:
                node = EnterNode(scope, c._node)
                scope.entered[id(c._node)] = node
            c = Collection(node, c.names)
        return c

    # -- scheduling ------------------------------------------------------------------
    def next_round(self, P, k_min):
        """Smallest iteration >= k_min with work not in the future of ``P``; None if idle."""
        col = self.dims - 1
        pd = self.dims - 1
        best = None
        for node in self.all_nodes():
            for times in node.queued_times() + node.held_times():
                if not len(times):
                    continue
                if len(P):
                    live = ~_lattice.in_future(np.ascontiguousarray(times[:, :pd]), P)
                    if not live.any():
                        continue
                    it = times[live, col]
                else:
                    it = times[:, col]
                m = int(it.min())
                if best is None or m < best:
                    best = m
        if best is None:
            return None
        return max(best, k_min)

    def frontier_for(self, P, k):
        parts = [np.concatenate([P, np.zeros((len(P), 1), _I64)], axis=1)] if len(P) else []
        if k is not None:
            parts.append(np.concatenate([self.Q, np.full((len(self.Q), 1), k + 1, _I64)],
                                        axis=1))
        return meet_frontiers(parts, self.dims)

    def run_loop(self, P, Q):
        """Run rounds until no work remains that is not in the future of ``P``."""
        self.Q = Q
        agree = self.df.agree_min      # with workers, all of them run the same rounds
        k = agree(self.next_round(P, 0))
        warned = False
        while k is not None:
            if self.max_iterations is None and k >= 10_000 and not warned:
                # Without a limit a divergent loop would spin silently: say so once.
                import warnings
                warnings.warn(f"loop {self.name!r} is at iteration {k} and still changing; "
                              f"pass max_iterations= to stop a loop that does not "
                              f"converge ({ctrl_c_hint()})", RuntimeWarning, stacklevel=2)
                warned = True
            if self.max_iterations is not None and k >= self.max_iterations:
                raise IterationLimitError(
                    f"loop {self.name!r} did not converge within max_iterations="
                    f"{self.max_iterations} (still changing at iteration {k}); raise the "
                    f"limit or check that the loop body reaches a fixed point")
            self.k = k
            self.round_frontier = self.frontier_for(P, k)
            self.run_pass(force=False)
            self.rounds_run += 1
            k = agree(self.next_round(P, k + 1))
        # Settle: nothing is in flight below P; let every trace compact to {(p, 0)}.
        # (self.k keeps the last round: nested loops stepped now use it as their lower
        # bound, and they have no work below P either.)
        self.round_frontier = self.frontier_for(P, None)
        self.run_pass(force=True)


class LoopNode(Node):
    """Stands in the parent scope for a whole loop; stepping it runs the loop's rounds."""

    kind = "loop"

    def __init__(self, parent, child: LoopScope):
        self.child = child
        super().__init__(parent, [], 0, name=f"loop {child.name}")
        self.prev_P = np.zeros((1, parent.dims), _I64)

    def wants_step(self, frontier_changed, force):
        return True

    def step(self):
        parent = self.scope
        child = self.child
        P = meet_frontiers([e.inputs[0].frontier for e in child.enter_nodes], parent.dims) \
            if child.enter_nodes else self.frontier
        if isinstance(parent, LoopScope):
            # Work of this invocation has the parent's current round as iteration.
            Q = np.concatenate([parent.Q, np.full((len(parent.Q), 1), parent.k, _I64)],
                               axis=1)
        else:
            Q = self.prev_P
        child.run_loop(P, Q)
        if not isinstance(parent, LoopScope):
            self.prev_P = P

    def input_frontier(self):
        return self.scope.node_frontier(self) if isinstance(self.scope, LoopScope) else \
            np.zeros((1, self.dims), _I64)


class EnterNode(Node):
    """Brings an outer collection into a loop: appends iteration coordinate 0."""

    kind = "enter"

    def __init__(self, scope: LoopScope, outer):
        # Registered as a consumer of the outer node; its queue fills in the parent's pass.
        super().__init__(scope, [outer], outer.arity)
        scope.enter_nodes.append(self)

    def take(self, port=0):
        q = self.queues[port]
        self.queues[port] = []
        return Updates.concat(q, self.arity, self.dims - 1)

    def queued_times(self):
        # Outer times extended with iteration 0.
        return [np.concatenate([u.times, np.zeros((len(u), 1), _I64)], axis=1)
                for u in self.queues[0]]

    def step(self):
        u = self.take()
        if len(u):
            times = np.zeros((len(u), self.dims), _I64)
            times[:, :-1] = u.times
            self.emit(Updates(u.data, times, u.diffs))


class LeaveNode(Node):
    """Takes a loop's collection back to the parent: drops the iteration coordinate."""

    kind = "leave"

    def __init__(self, parent, inner):
        self.inner = inner
        super().__init__(parent, [inner], inner.arity)

    def take(self, port=0):
        q = self.queues[port]
        self.queues[port] = []
        return Updates.concat(q, self.arity, self.dims + 1)

    def queued_times(self):
        return [u.times[:, :-1] for u in self.queues[0]]

    def input_frontier(self):
        f = self.inner.frontier
        return _lattice.antichain(np.ascontiguousarray(f[:, :-1])) if len(f) else \
            np.empty((0, self.dims), _I64)

    def step(self):
        u = self.take()
        if len(u):
            out = Updates(u.data, np.ascontiguousarray(u.times[:, :-1]), u.diffs)
            self.emit(out.consolidated())


class FeedbackNode(Node):
    """The back edge of a variable: consolidates and adds 1 to the iteration."""

    kind = "feedback"

    def __init__(self, scope, arity):
        super().__init__(scope, [], arity)

    def connect(self, src):
        self.inputs = [src]
        self.queues = [[]]
        src.consumers.append((self, 0))

    def step(self):
        if not self.inputs:
            return
        u = self.take()
        if len(u):
            u = u.consolidated()
            if len(u):
                times = u.times.copy()
                times[:, -1] += 1
                self.emit(Updates(u.data, times, u.diffs))


class Variable:
    """A loop variable: ``source`` entered, plus feedback set later by :meth:`set`.

    Defines ``x = source`` at iteration 0 and ``x_{i+1} = result_i`` afterwards, where
    ``result`` is what :meth:`set` receives (DD's ``Variable::new_from``). Several
    variables in one scope give mutually recursive definitions.
    """

    def __init__(self, scope: LoopScope, source):
        from ddnumba.collection import Collection
        if source.scope is not scope:
            source = scope.import_collection(source)
        self.scope = scope
        self.source = source
        self.feedback = FeedbackNode(scope, source.arity)
        from ddnumba.operators.linear import ConcatNode
        node = ConcatNode(scope, [source._node, self.feedback], source.arity)
        self.collection = Collection(node, source.names)
        self._set = False

    def set(self, result):
        """Close the loop: the next iteration's value of this variable is ``result``."""
        if self._set:
            raise ValueError("Variable.set: the variable is already set")
        if result.scope is not self.scope:
            result = self.scope.import_collection(result)
        if result.arity != self.source.arity:
            raise ValueError(f"Variable.set: result has {result.arity} column(s) "
                             f"{result.names}, the variable {self.source.arity}")
        delta = result.concat(self.source.negate())
        self.feedback.connect(delta._node)
        self._set = True
        return self.collection


_loop_counter = [0]


def open_loop(parent_scope, *, name=None, max_iterations=None):
    """Create a child loop scope of ``parent_scope``."""
    _loop_counter[0] += 1
    name = name or f"iterate#{_loop_counter[0]}"
    return LoopScope(parent_scope.df, parent_scope, name=name, max_iterations=max_iterations)


def close_loop(child: LoopScope):
    """Append the loop to its parent's schedule (after every node the body created)."""
    child.closed = True
    return LoopNode(child.parent, child)


class Loop:
    """What ``Dataflow.iterative``'s ``build`` receives: make variables, enter collections,
    nest further loops."""

    def __init__(self, scope: LoopScope):
        self.scope = scope

    def variable(self, source):
        """A new variable starting from ``source`` (entered if it is an outer collection)."""
        return Variable(self.scope, source)

    def enter(self, collection):
        """``collection`` (from an enclosing scope) as a collection of this loop,
        constant over its iterations."""
        return self.scope.import_collection(collection)

    def iterative(self, build, *, max_iterations=None, name=None):
        """A loop nested in this one (see :meth:`Dataflow.iterative`)."""
        return build_loop(self.scope, build, max_iterations=max_iterations, name=name)


def _discard_loop(child):
    """Undo a loop whose build raised: the nodes it made (nested loops' too) leave the
    consumer lists of the outer nodes they read, and its self-compacting captures
    leave the dataflow's list, so that the graph is as if the loop had never been
    started (it was never scheduled in its parent)."""
    gone = {id(n) for n in child.all_nodes()}
    for node in child.all_nodes():
        for src in node.inputs:
            if id(src) not in gone:
                src.consumers = [(c, p) for c, p in src.consumers if id(c) not in gone]
    child.df._auto_captures = [c for c in child.df._auto_captures if id(c) not in gone]


def build_loop(parent_scope, build, *, max_iterations=None, name=None):
    """Open a loop under ``parent_scope``, let ``build`` fill it, and leave its results."""
    from ddnumba.collection import Collection
    child = open_loop(parent_scope, name=name, max_iterations=max_iterations)
    try:
        results = build(Loop(child))
        single = not isinstance(results, (tuple, list))
        results = [results] if single else list(results)
        for r in results:
            if not isinstance(r, Collection) or r.scope is not child:
                raise ValueError(f"loop {child.name!r}: build must return collection(s) "
                                 f"of the loop scope")
        for node in child.nodes:
            if isinstance(node, FeedbackNode) and not node.inputs:
                raise ValueError(f"loop {child.name!r}: a variable was never set")
    except BaseException:
        _discard_loop(child)
        raise
    close_loop(child)
    left = [Collection(LeaveNode(parent_scope, r._node), r.names) for r in results]
    return left[0] if single else tuple(left)

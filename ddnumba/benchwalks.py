"""``python -m ddnumba.bench walks``: the sequential loop's two key walks timed alone.

Most of a reachability run is two walks of :mod:`ddnumba.kernels.seqloop`: the
value-less ``distinct``'s (``_reduce_keys``, a table row a key) and the loop join's
(``_pairs_insert``: a key's edges paired with its delta rows, which are then added to
its own trace). Timed inside a run they come with the rest of a round and with the
run-to-run noise of a whole benchmark; here each is called as a round calls it, over
the loop state the benchmark's load leaves (a copy of it), on keys drawn from that
state, ``width`` rows a call, every group added at one iteration and then taken away
again (:mod:`ddnumba.kernels.walks`), so that a timing repeats over the same state.
The figure is nanoseconds per row walked: at N=1,000 the state is in cache, at
N=100,000 (96 MiB of table) it is not. asv's ``LoopWalks`` runs the same.
"""
import time

import numpy as np

from .kernels import seqloop as _sq
from .kernels.hstate import M_TOP, RW_EXTRA, find_rows, flat_len, read_key
from .kernels.reduce import L_DISTINCT

#: iteration the walks add their rows at (within the benchmark's loop depths)
WALK_ITERATION = 6
SEED = 20240601


class LoopWalks:
    """The inputs of both walks over a copy of ``session``'s loop state (a loaded
    :class:`ddnumba.bench.ReachSession` on the native engine's sequential loop):
    ``rows`` keys of the ``distinct`` and ``rows`` left delta rows of the join, drawn
    from the state's own keys with ``seed``, the join's grouped by key within each
    ``width`` rows."""

    def __init__(self, session, rows, width, seed=SEED):
        nat = session.df._native
        if not nat or not any(nat.sequential):
            raise ValueError("walks: the session runs no sequential loop (the native "
                             "engine's loops='sequential' is needed)")
        tab, arena, meta = nat.st[11][0]
        lp = np.asarray(nat.st[12][0][0])
        nodes = lp[lp[_sq.F_NODES]:lp[_sq.F_NODES + 1]].reshape(-1, _sq.NPW)
        self.tab = tab.copy()
        # room past the arena's top: an inline row's history is copied there, and a
        # key's fourth entry takes a chunk
        spare = max(1 << 16, 4 * rows)
        self.arena = np.zeros((max(arena.shape[0], int(meta[M_TOP]) + spare),
                               arena.shape[1]), np.int64)
        self.arena[:arena.shape[0]] = arena
        self.meta = meta.copy()
        self.width = int(width)
        self.j = np.int64(WALK_ITERATION)
        rng = np.random.default_rng(seed)
        kwmax = self.tab.shape[1] - RW_EXTRA
        red = [ln for ln in range(nodes.shape[0])
               if nodes[ln, _sq.P_KIND] == _sq.S_REDUCE and nodes[ln, _sq.P_VW] == 0
               and nodes[ln, _sq.P_OW] == 0 and nodes[ln, _sq.P_LOGIC] == L_DISTINCT
               and nodes[ln, _sq.P_BLK] == 1]
        joins = [ln for ln in range(nodes.shape[0])
                 if nodes[ln, _sq.P_KIND] == _sq.S_JOIN and nodes[ln, _sq.P_JFUSED] == 1]
        if not red or not joins:
            raise ValueError("walks: the loop has no value-less distinct owning its "
                             "trace, or no join owning both of its traces")
        ln = red[0]
        self.d_tag = np.int64(nodes[ln, _sq.P_TAG_IN])
        self.d_kw = np.int64(nodes[ln, _sq.P_RKW])
        own = np.nonzero(self.tab[:, 0] == self.d_tag)[0]
        self.d_keys = np.ascontiguousarray(
            self.tab[own[rng.integers(0, own.shape[0], rows)], 1:1 + self.d_kw])
        # a row writes at most one correction more than its key's entries, and a
        # call's +1 rows may add one entry to each key before its -1 rows come
        longest = max((int(flat_len(self.tab, r)) for r in np.unique(find_rows(
            self.tab, self.d_tag, self.d_keys, self.d_kw))), default=0)
        self.cd = np.zeros((self.width * (longest + 2), 2 + int(self.d_kw)), np.int64)
        ln = joins[0]
        la, ra = nodes[ln, _sq.P_LEFT], nodes[ln, _sq.P_RIGHT]
        self.j_kw = np.int64(nodes[ln, _sq.P_JKW])
        self.j_lvw = np.int64(nodes[la, _sq.P_W] - self.j_kw)
        self.j_rvw = np.int64(nodes[ra, _sq.P_W] - self.j_kw)
        self.j_tl = np.int64(nodes[la, _sq.P_TAG])
        self.j_tr = np.int64(nodes[ra, _sq.P_TAG])
        if self.j_kw > kwmax:
            raise ValueError("walks: the join's key is wider than the table's")
        # left delta rows: an entry's vals of a left key (so that every row pairs with
        # the key's edges and lands on an existing entry's vals or beside them)
        left = np.nonzero(self.tab[:, 0] == self.j_tl)[0]
        picks = left[rng.integers(0, left.shape[0], rows)]
        w = int(self.j_kw + self.j_lvw)
        out = np.zeros((rows, w), np.int64)
        most = 0
        right = {}
        for i, r in enumerate(picks):
            e = read_key(self.tab, arena, r, 0)
            out[i, :self.j_kw] = self.tab[r, 1:1 + self.j_kw]
            if e.shape[0]:
                out[i, self.j_kw:] = e[rng.integers(0, e.shape[0]), :self.j_lvw]
        for g in range(0, rows, self.width):
            blk = out[g:g + self.width]
            out[g:g + self.width] = blk[np.lexsort(blk.T[::-1])]
        self.j_rows = out
        keys = np.unique(out[:, :self.j_kw], axis=0)
        for key, rr in zip(map(tuple, keys), find_rows(self.tab, self.j_tr, keys,
                                                       self.j_kw)):
            n = read_key(self.tab, arena, rr, 0).shape[0] if rr >= 0 else 0
            right[key] = n
            most = max(most, n)
        #: the pairs a +1 and a -1 pass over ``j_rows`` write: each row pairs with
        #: every entry of its key in the right trace
        self.expected_pairs = 2 * sum(right[tuple(k)] for k in out[:, :self.j_kw])
        self.out = np.zeros((max(1, self.width * most), 2 + w + int(self.j_rvw)),
                            np.int64)

    def distinct(self):
        """One pass of the ``distinct``'s walk: ``(rows walked, corrections)``."""
        from .kernels.walks import distinct_walks
        return distinct_walks(self.tab, self.arena, self.meta, self.d_tag, self.d_kw,
                              self.j, self.d_keys, self.width, self.cd)

    def join(self):
        """One pass of the join's walk: ``(rows walked, pairs)``."""
        from .kernels.walks import join_walks
        return join_walks(self.tab, self.arena, self.meta, self.j_tr, self.j_tl,
                          self.j_kw, self.j_lvw, self.j_rvw, self.j, self.j_rows,
                          self.width, self.out)


def walk_figures(nodes, widths, *, rows=100_000, repeat=5, out=print):
    """Load the benchmark at ``nodes`` and time both walks at every width in
    ``widths`` (``rows`` rows, best and median of ``repeat`` passes): a list of
    dicts, one per width."""
    from .bench import ReachSession
    s = ReachSession(nodes, 1, engine="native", loops="sequential")
    s.load()
    try:
        state = s.df._native.st[11][0]
        mib = (state[0].nbytes + state[1].nbytes) / 2 ** 20
        res = []
        for width in widths:
            w = LoopWalks(s, rows, width)
            fig = {"nodes": nodes, "width": width, "rows": rows, "state_mib": mib}
            for name, fn in (("distinct", w.distinct), ("join", w.join)):
                fn()
                times = []
                for _ in range(repeat):
                    t = time.perf_counter()
                    walked, made = fn()
                    times.append(time.perf_counter() - t)
                fig[f"{name}_ns"] = float(np.median(times)) / walked * 1e9
                fig[f"{name}_best_ns"] = min(times) / walked * 1e9
                fig[f"{name}_made"] = made / walked
            res.append(fig)
            out(f"N={nodes:>9,} width {width:>6}: distinct {fig['distinct_ns']:6.1f} ns a "
                f"row (best {fig['distinct_best_ns']:.1f}, {fig['distinct_made']:.2f} "
                f"corrections a row), join {fig['join_ns']:6.1f} ns a row (best "
                f"{fig['join_best_ns']:.1f}, {fig['join_made']:.2f} pairs a row); state "
                f"{mib:,.1f} MiB")
        return res
    finally:
        s.close()


def add_parser(sub):
    w = sub.add_parser("walks", help="the loop's two key walks timed alone (ns a row)")
    w.add_argument("--nodes", type=int, nargs="+", default=[1000, 100000])
    w.add_argument("--width", type=int, nargs="+", default=[25, 1000],
                   help="rows a call (a round's delta; 25 is a round's at N=1e6)")
    w.add_argument("--rows", type=int, default=100_000, help="rows a pass")
    w.add_argument("--repeat", type=int, default=5)
    return w


def main(args):
    for n in args.nodes:
        walk_figures(n, args.width, rows=args.rows, repeat=args.repeat)

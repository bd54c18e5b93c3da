"""A/B runs of the reachability benchmark: ``python -m ddnumba.bench ab --base REV``.

Benchmark sittings on a shared 2-core machine differ by up to 1.5x, so a figure from
one sweep says little about whether a change helped. This compares two versions of
the code in one sitting: each run is a fresh process (one load of the graph, then the
window fed ``B`` changes per ``run()``, the answer checked against scipy BFS), and the
two versions alternate, ABBA, so that drift in the machine's speed falls on both.

A side is a git revision (checked out once as a detached worktree under ``--workdir``
and reused by later comparisons, so its kernels compile only on first use) or a
directory holding a ddnumba checkout; ``--new`` defaults to the checkout this module
lives in, uncommitted changes included. Each child process imports ``ddnumba`` and
``ddnumba.kernels`` from its side's tree (and checks that it did), whatever ddnumba
the interpreter has installed.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

from .native import KERNELS_FINDER

__all__ = ["checkout", "probe", "run_side", "compare", "summarize", "pair_interval",
           "verdict", "best_of_runs", "add_comparison_arguments",
           "check_tolerance", "main"]

_TAG = "ABRESULT "

# Runs in the child: import ddnumba (and ddnumba.kernels, which an installed ddnumba
# maps elsewhere) from the tree given, then run the benchmark or only report paths.
_CHILD = r"""
import inspect, json, os, resource, sys
tree, args = os.path.realpath(sys.argv[1]), json.loads(sys.argv[2])
_kdir = os.path.join(tree, "kernels")
""" + KERNELS_FINDER + r"""
sys.path.insert(0, tree)
import ddnumba, ddnumba.kernels, ddnumba.bench as bench
files = {"ddnumba": os.path.realpath(ddnumba.__file__),
         "kernels": os.path.realpath(ddnumba.kernels.__file__)}
for what, f in files.items():
    if not f.startswith(tree + os.sep):
        raise SystemExit(f"ab: {what} was imported from {f}, not from {tree}")
res = {"files": files}
if not args.get("probe"):
    params = inspect.signature(bench.run_reach).parameters
    kw = {k: v for k, v in args["kw"].items() if k in params}
    res["ignored"] = sorted(k for k, v in args["kw"].items() if k not in params and v)
    out = bench.run_reach(args["n"], args["batch"], args["changes"], **kw)
    for k in ("p50_ms", "p99_ms", "changes_per_s", "load_s", "check", "engine", "loops"):
        res[k] = out.get(k)
    res["latencies"] = [float(x) for x in out.get("latencies", [])]
    res["peak_gib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20
print("ABRESULT " + json.dumps(res), flush=True)
"""


def _git(repo, *args):
    r = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f"ab: git {' '.join(args)} failed: {r.stderr.strip()}")
    return r.stdout.strip()


def _own_tree():
    """The checkout this module belongs to (it must have ``kernels/`` beside
    ``ddnumba/``)."""
    tree = Path(__file__).resolve().parents[1]
    if not (tree / "kernels" / "__init__.py").is_file():
        raise SystemExit(f"ab: {tree} is not a ddnumba checkout (no kernels/); give "
                         f"--new a checkout or a revision")
    return tree


def default_workdir():
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"),
                                                            ".cache")
    return Path(base) / "ddnumba" / "ab"


def checkout(spec, *, repo=None, workdir=None):
    """``(label, tree)`` of a side: ``spec`` is a directory holding a ddnumba checkout,
    or a git revision of ``repo`` (default: this module's checkout), checked out as a
    detached worktree ``workdir/<commit>`` unless one is there already."""
    path = Path(spec)
    if path.is_dir():
        tree = path.resolve()
        if not ((tree / "ddnumba" / "__init__.py").is_file()
                and (tree / "kernels" / "__init__.py").is_file()):
            raise SystemExit(f"ab: {tree} is not a ddnumba checkout (needs ddnumba/ and "
                             f"kernels/)")
        return str(tree), tree
    repo = Path(repo) if repo else _own_tree()
    r = subprocess.run(["git", "-C", str(repo), "rev-parse", "--verify", "--quiet",
                        f"{spec}^{{commit}}"], capture_output=True, text=True)
    sha = r.stdout.strip() if r.returncode == 0 else ""
    if not sha:
        raise SystemExit(f"ab: {spec!r} is neither a directory nor a revision of {repo}")
    tree = Path(workdir or default_workdir()).resolve() / sha[:12]
    if not (tree / "kernels" / "__init__.py").is_file():
        tree.parent.mkdir(parents=True, exist_ok=True)
        _git(repo, "worktree", "prune")
        _git(repo, "worktree", "add", "--detach", "--force", str(tree), sha)
        return f"{spec} ({sha[:12]})", tree
    r = subprocess.run(["git", "-C", str(tree), "rev-parse", "HEAD"], capture_output=True,
                       text=True)
    if r.returncode:
        _reattach(repo, tree, sha)
    elif r.stdout.strip() != sha:
        raise SystemExit(f"ab: {tree} exists but is not at {sha}; remove it")
    return f"{spec} ({sha[:12]})", tree


def _reattach(repo, tree, sha):
    """Make ``tree``, a cached worktree whose repository is gone (it was made from a
    clone since deleted, so its ``.git`` file points nowhere), a worktree of ``repo``
    again, keeping its files and the kernels compiled in it. Refused when its tracked
    files are not those of ``sha``."""
    if not (tree / ".git").is_file():
        raise SystemExit(f"ab: {tree} exists but is not a git worktree; remove it")
    tmp = tree.parent / (tree.name + ".relink")
    shutil.rmtree(tmp, ignore_errors=True)
    _git(repo, "worktree", "prune")
    _git(repo, "worktree", "add", "--detach", "--no-checkout", str(tmp), sha)
    os.replace(tmp / ".git", tree / ".git")
    shutil.rmtree(tmp)
    _git(repo, "worktree", "repair", str(tree))
    _git(tree, "reset", "-q")                    # the index from sha; files untouched
    changed = _git(tree, "status", "--porcelain", "--untracked-files=no")
    if changed:
        raise SystemExit(f"ab: {tree} was a worktree of a repository that is gone, and "
                         f"its files differ from {sha[:12]} ({len(changed.splitlines())} "
                         f"changed); remove it")
    print(f"ab: {tree}: its repository was gone; attached to {repo} again", flush=True)


def _child(tree, args, *, timeout=None):
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    r = subprocess.run([sys.executable, "-c", _CHILD, str(tree), json.dumps(args)],
                       cwd=str(tree), env=env, capture_output=True, text=True,
                       timeout=timeout)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith(_TAG)]
    if r.returncode or not lines:
        tail = "\n".join((r.stderr or r.stdout).strip().splitlines()[-15:])
        raise SystemExit(f"ab: the run in {tree} failed (exit {r.returncode}):\n{tail}")
    return json.loads(lines[-1][len(_TAG):])


def probe(tree):
    """Where a child process for ``tree`` imports ddnumba and its kernels from."""
    return _child(tree, {"probe": True})["files"]


def run_side(tree, n, batch, changes, *, engine="native", loops=None, timeout=None):
    """One fresh process of the benchmark in ``tree``: its figures (``p50_ms``,
    ``changes_per_s``, ``load_s``, ``peak_gib``, ``check``, ...)."""
    kw = {"recompute": True, "engine": engine, "loops": loops}
    return _child(tree, {"n": n, "batch": batch, "changes": changes, "kw": kw},
                  timeout=timeout)


def pair_interval(ratios, level=0.95):
    """``(geomean, lo, hi)`` of per-pair ratios: their geometric mean and its
    ``level`` confidence interval (Student's t on the log ratios; a ratio varies by
    a factor, so its logarithm is what spreads symmetrically). With one pair the
    interval is unbounded."""
    r = np.asarray(ratios, dtype=np.float64)
    if r.size == 0 or not np.all(np.isfinite(r) & (r > 0)):
        raise ValueError("pair_interval: needs positive, finite ratios")
    logs = np.log(r)
    mean = float(logs.mean())
    if logs.size < 2:
        return float(np.exp(mean)), 0.0, float("inf")
    from scipy.stats import t as student_t
    half = (float(student_t.ppf(0.5 + level / 2, logs.size - 1))
            * float(logs.std(ddof=1)) / np.sqrt(logs.size))
    return float(np.exp(mean)), float(np.exp(mean - half)), float(np.exp(mean + half))


def verdict(lo, hi, tolerance):
    """What the interval ``[lo, hi]`` of new/base says: ``"faster"`` or ``"slower"``
    when it excludes 1, ``"same"`` when it lies within ``1 +- tolerance`` (no
    difference that large), else ``"undecided"``."""
    if lo > 1:
        return "faster"
    if hi < 1:
        return "slower"
    if lo >= 1 - tolerance and hi <= 1 + tolerance:
        return "same"
    return "undecided"


def best_of_runs(runs, side):
    """The seconds one of ``side``'s processes would take if each of its batches
    (each ``run()`` call, by position) took its least time over all of that side's
    processes in ``runs``: the sum of the per-batch minima. None when the runs'
    latencies are missing or of different lengths.

    Every run feeds the same batches, so a batch's fastest time over several runs
    is its time with the least interference; on a shared machine whose slowdowns
    come and go for seconds (a whole run at 0.7x its speed, say) this is far steadier
    than any one run's median."""
    lats = [f.get("latencies") for _, s, f in runs if s == side]
    if not lats or any(not x for x in lats) or len({len(x) for x in lats}) != 1:
        return None
    return float(np.min(np.asarray(lats, dtype=np.float64), axis=0).sum())


def summarize(runs, *, tolerance=0.02):
    """Medians per side and the new/base ratios of ``runs``, a list of
    ``(pair, side, figures)`` with ``side`` in ``("base", "new")``: the ratio of the
    medians, each pair's ratio, their geometric mean with its 95% interval
    (``geomean``, ``lo``, ``hi``) and the :func:`verdict` at ``tolerance``; and
    ``best_ratio``, base/new of :func:`best_of_runs` (None without latencies), with
    ``best_halves``, the same from the first and the second half of the pairs."""
    out = {}
    for side in ("base", "new"):
        figs = [f for _, s, f in runs if s == side]
        out[side] = {k: float(np.median([f[k] for f in figs]))
                     for k in ("p50_ms", "changes_per_s", "load_s", "peak_gib")}
    pairs = sorted({p for p, _, _ in runs})
    by = {(p, s): f for p, s, f in runs}
    per_pair = [by[p, "new"]["changes_per_s"] / by[p, "base"]["changes_per_s"]
                for p in pairs if (p, "base") in by and (p, "new") in by]
    out["ratio"] = out["new"]["changes_per_s"] / out["base"]["changes_per_s"]
    out["pair_ratios"] = per_pair
    out["pairs_new_faster"] = sum(r > 1 for r in per_pair)
    if per_pair:
        out["geomean"], out["lo"], out["hi"] = pair_interval(per_pair)
        out["verdict"] = verdict(out["lo"], out["hi"], tolerance)
    else:
        out["geomean"], out["lo"], out["hi"], out["verdict"] = (
            float("nan"), 0.0, float("inf"), "undecided")
    def best_ratio(rs):
        bb, bn = best_of_runs(rs, "base"), best_of_runs(rs, "new")
        return bb / bn if bb and bn else None

    out["best_ratio"] = best_ratio(runs)
    half = len(pairs) // 2
    if out["best_ratio"] is not None and half:
        # the same estimate from each half of the pairs: how far it moves
        halves = [best_ratio([r for r in runs if r[0] in part])
                  for part in (pairs[:half], pairs[half:])]
        out["best_halves"] = [h for h in halves if h is not None]
    out["check"] = all(f.get("check") for _, _, f in runs)
    return out


def _verdict_line(s, tolerance):
    n = len(s["pair_ratios"])
    words = {"faster": "new is faster", "slower": "new is slower",
             "same": f"no difference beyond {100 * tolerance:.0f}%",
             "undecided": "undecided (the pairs disagree more than the difference; "
                          "add pairs: --max-pairs)"}
    hi = "inf" if not np.isfinite(s["hi"]) else f"{s['hi']:.3f}"
    return (f"pair ratios: geometric mean {s['geomean']:.3f}x, 95% interval "
            f"{s['lo']:.3f}-{hi}x over {n} pair{'s' if n != 1 else ''}, range "
            f"{min(s['pair_ratios']):.3f}-{max(s['pair_ratios']):.3f}: "
            f"{words[s['verdict']]}")


def compare(base, new, *, nodes=1000, batch=1000, changes=None, pairs=4,
            max_pairs=None, tolerance=0.02, engine="native", loops=None,
            workdir=None, out=print):
    """Alternate fresh processes of the two sides (ABBA), ``pairs`` of each, then one
    pair at a time while the verdict is ``"undecided"`` and fewer than ``max_pairs``
    (default ``pairs``) have run; print a line per run and the summary; return
    ``(runs, summary)``."""
    changes = changes or max(20 * batch, 200)
    max_pairs = max(max_pairs or pairs, pairs)
    (lb, tb), (ln, tn) = (checkout(base, workdir=workdir),
                          checkout(new, workdir=workdir) if new else
                          (f"working tree ({_own_tree()})", _own_tree()))
    more = f" (up to {max_pairs} until decided)" if max_pairs > pairs else ""
    out(f"ab: base = {lb}\n    new  = {ln}\n    N={nodes} B={batch}, {changes} changes "
        f"per run, engine={engine}, loops={loops or 'default'}, {pairs} pairs{more}")
    for tree, label in {tb: lb, tn: ln}.items():
        # The first run in a tree compiles its kernels into the tree's own cache.
        out(f"ab: warming {label} (compiles its kernels on first use: minutes)")
        fig = run_side(tree, min(nodes, 200), 10, 20, engine=engine, loops=loops)
        if fig.get("ignored"):
            out(f"ab: warning: {label} has no option {', '.join(fig['ignored'])}; its "
                f"runs use its defaults")
    runs = []
    out(f"{'pair':>4} {'side':>4} {'p50_ms':>10} {'changes/s':>11} {'load_s':>7} "
        f"{'peak_GiB':>8} check")
    p = 0
    while p < max_pairs:
        if p >= pairs:
            s = summarize(runs, tolerance=tolerance)
            if s["verdict"] != "undecided":
                break
            out(_verdict_line(s, tolerance) + f"; pair {p + 1} next")
        order = ("base", "new") if p % 2 == 0 else ("new", "base")
        for side in order:
            fig = run_side(tb if side == "base" else tn, nodes, batch, changes,
                           engine=engine, loops=loops)
            runs.append((p, side, fig))
            out(f"{p + 1:>4} {side:>4} {fig['p50_ms']:>10.3f} "
                f"{fig['changes_per_s']:>11.0f} {fig['load_s']:>7.2f} "
                f"{fig['peak_gib']:>8.2f} {fig['check']}")
        p += 1
    s = summarize(runs, tolerance=tolerance)
    b, n_ = s["base"], s["new"]
    out(f"median p50: base {b['p50_ms']:.3f} ms, new {n_['p50_ms']:.3f} ms; changes/s: "
        f"base {b['changes_per_s']:.0f}, new {n_['changes_per_s']:.0f}: new/base "
        f"{s['ratio']:.3f}x; new faster in {s['pairs_new_faster']} of "
        f"{len(s['pair_ratios'])} pairs (ratios "
        f"{', '.join(f'{r:.3f}' for r in s['pair_ratios'])})")
    out(_verdict_line(s, tolerance))
    if s.get("best_ratio") is not None:
        halves = s.get("best_halves") or []
        out(f"best of runs per batch (each batch's least time over a side's runs): "
            f"new/base {s['best_ratio']:.3f}x"
            + (f"; from each half of the pairs {' and '.join(f'{h:.3f}x' for h in halves)}"
               if len(halves) == 2 else ""))
    out(f"median load: base {b['load_s']:.2f} s, new {n_['load_s']:.2f} s; peak: base "
        f"{b['peak_gib']:.2f} GiB, new {n_['peak_gib']:.2f} GiB; answers "
        f"{'all match BFS' if s['check'] else 'DO NOT all match BFS'}")
    return runs, s


def add_comparison_arguments(a):
    """The options ``ab`` shares with ``bench pair``: ``--tolerance``, ``--engine``,
    ``--loops``."""
    a.add_argument("--tolerance", type=float, default=0.02,
                   help="a difference below this fraction counts as none (default "
                        "0.02)")
    a.add_argument("--engine", choices=("auto", "native", "python"), default="native")
    a.add_argument("--loops", choices=("rounds", "sequential"), default=None)


def check_tolerance(cmd, tolerance):
    """Exit with a message unless ``--tolerance`` is a fraction in (0, 1)."""
    if not 0 < tolerance < 1:
        raise SystemExit(f"{cmd}: --tolerance must be a fraction in (0, 1), not "
                         f"{tolerance}")


def add_parser(sub):
    a = sub.add_parser("ab", help="compare two versions of the code in one sitting")
    a.add_argument("--base", required=True,
                   help="git revision (checked out as a worktree) or checkout directory")
    a.add_argument("--new", default=None,
                   help="the same; default: this checkout's working tree")
    a.add_argument("--nodes", type=int, default=1000)
    a.add_argument("--batch", type=int, default=1000)
    a.add_argument("--changes", type=int, default=None,
                   help="changes per run (default: max(20 * B, 200))")
    a.add_argument("--pairs", type=int, default=4)
    a.add_argument("--max-pairs", type=int, default=None,
                   help="after --pairs, add pairs one at a time while the 95%% interval "
                        "of new/base holds 1 and is wider than --tolerance, up to this "
                        "many (default: --pairs, no more)")
    add_comparison_arguments(a)
    a.add_argument("--workdir", default=None,
                   help=f"where revisions are checked out (default {default_workdir()})")


def main(args):
    if args.pairs < 1:
        raise SystemExit("ab: --pairs must be at least 1")
    if args.max_pairs is not None and args.max_pairs < args.pairs:
        raise SystemExit(f"ab: --max-pairs ({args.max_pairs}) is below --pairs "
                         f"({args.pairs})")
    check_tolerance("ab", args.tolerance)
    _, s = compare(args.base, args.new, nodes=args.nodes, batch=args.batch,
                   changes=args.changes, pairs=args.pairs, max_pairs=args.max_pairs,
                   tolerance=args.tolerance, engine=args.engine,
                   loops=args.loops, workdir=args.workdir,
                   out=lambda m: print(m, flush=True))
    if not s["check"]:
        raise SystemExit(1)

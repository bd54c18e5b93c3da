"""``python -m ddnumba.bench ab``: two versions of the code in alternating fresh
processes, each importing ddnumba from its own tree, with answers checked."""
import math
import shutil
import subprocess
from pathlib import Path

import pytest

from ddnumba import benchab
from ddnumba.bench import main

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_ab_alternates_fresh_processes_and_summarizes(capsys):
    """Both sides are this checkout (no compile): runs go base, new, new, base; every
    answer matches BFS; the summary's medians are those of the printed runs."""
    runs, s = benchab.compare(str(ROOT), str(ROOT), nodes=80, batch=5, changes=40,
                              pairs=2)
    assert [(p, side) for p, side, _ in runs] == [(0, "base"), (0, "new"),
                                                  (1, "new"), (1, "base")]
    assert s["check"] and all(f["check"] is True for _, _, f in runs)
    assert all(f["engine"] == "native" and f["changes_per_s"] > 0 for _, _, f in runs)
    base = sorted(f["p50_ms"] for _, side, f in runs if side == "base")
    assert s["base"]["p50_ms"] == pytest.approx(sum(base) / 2)
    assert len(s["pair_ratios"]) == 2
    out = capsys.readouterr().out
    assert "warming" in out and out.count("warming") == 1     # one tree, warmed once
    assert "new/base" in out and "all match BFS" in out
    assert all(len(f["latencies"]) == 8 for _, _, f in runs)   # 40 changes, 5 a run
    assert s["best_ratio"] > 0 and "best of runs per batch" in out


def test_summary_ratio_and_pairs():
    def fig(cps, check=True):
        return {"p50_ms": 1000 / cps, "changes_per_s": cps, "load_s": 1.0,
                "peak_gib": 0.5, "check": check}
    runs = [(0, "base", fig(100)), (0, "new", fig(150)), (1, "new", fig(90)),
            (1, "base", fig(100)), (2, "base", fig(110)), (2, "new", fig(130))]
    s = benchab.summarize(runs)
    assert s["base"]["changes_per_s"] == 100 and s["new"]["changes_per_s"] == 130
    assert s["ratio"] == pytest.approx(1.3)
    assert s["pair_ratios"] == pytest.approx([1.5, 0.9, 130 / 110])
    assert s["pairs_new_faster"] == 2 and s["check"]
    assert s["best_ratio"] is None           # no latencies given
    runs[3] = (1, "base", fig(100, check=False))
    assert not benchab.summarize(runs)["check"]


def test_best_of_runs_takes_each_batch_least_time():
    def fig(lat):
        return {"p50_ms": 1.0, "changes_per_s": 1.0, "load_s": 1.0, "peak_gib": 0.5,
                "check": True, "latencies": lat}
    runs = [(0, "base", fig([1.0, 2.0, 3.0])), (0, "new", fig([1.0, 1.0, 1.0])),
            (1, "new", fig([0.5, 3.0, 2.0])), (1, "base", fig([2.0, 1.0, 5.0])),
            (2, "base", fig([4.0, 4.0, 4.0])), (2, "new", fig([0.5, 0.5, 9.0])),
            (3, "new", fig([2.0, 2.0, 2.0])), (3, "base", fig([1.0, 1.0, 1.0]))]
    # base minima 1, 1, 1 -> 3; new minima 0.5, 0.5, 1 -> 2
    assert benchab.best_of_runs(runs, "base") == pytest.approx(3.0)
    assert benchab.best_of_runs(runs, "new") == pytest.approx(2.0)
    s = benchab.summarize(runs)
    assert s["best_ratio"] == pytest.approx(1.5)
    # pairs 0-1: base 1+1+3 = 5, new 0.5+1+1 = 2.5; pairs 2-3: base 3, new 0.5+0.5+2
    assert s["best_halves"] == pytest.approx([2.0, 1.0])
    runs[0] = (0, "base", fig([1.0, 2.0]))     # runs of different lengths: no figure
    assert benchab.best_of_runs(runs, "base") is None
    assert benchab.summarize(runs)["best_ratio"] is None


def test_a_revision_is_checked_out_once_and_imported_from_its_tree(tmp_path):
    label, tree = benchab.checkout("HEAD", repo=ROOT, workdir=tmp_path)
    try:
        sha = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"],
                             capture_output=True, text=True, check=True).stdout.strip()
        assert tree == tmp_path.resolve() / sha[:12] and sha[:12] in label
        assert (tree / "kernels" / "seqloop.py").is_file()
        stamp = (tree / "ddnumba" / "__init__.py").stat().st_mtime_ns
        assert benchab.checkout("HEAD", repo=ROOT, workdir=tmp_path)[1] == tree
        assert (tree / "ddnumba" / "__init__.py").stat().st_mtime_ns == stamp  # reused
        # The child imports both packages from the worktree, not from this checkout
        # (which the interpreter has installed).
        files = benchab.probe(tree)
        assert files["ddnumba"] == str(tree / "ddnumba" / "__init__.py")
        assert files["kernels"] == str(tree / "kernels" / "__init__.py")
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force",
                        str(tree)], check=True)


def _orphaned_worktree(tmp_path, name):
    """A cached worktree of HEAD made from a clone of this repository that is then
    deleted (as when ``bench ab`` ran in a clone since removed)."""
    clone = tmp_path / name
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    _, tree = benchab.checkout("HEAD", repo=clone, workdir=tmp_path / "wd")
    shutil.rmtree(clone)
    return tree


def test_a_cached_worktree_whose_repository_is_gone_is_attached_again(tmp_path, capsys):
    sha = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"],
                         capture_output=True, text=True, check=True).stdout.strip()
    tree = _orphaned_worktree(tmp_path, "gone")
    (tree / "kernels" / "compiled.marker").write_text("kept")    # e.g. its kernel cache
    assert subprocess.run(["git", "-C", str(tree), "status"],
                          capture_output=True).returncode != 0    # orphaned
    try:
        assert benchab.checkout("HEAD", repo=ROOT, workdir=tmp_path / "wd")[1] == tree
        assert "attached to" in capsys.readouterr().out
        assert (tree / "kernels" / "compiled.marker").read_text() == "kept"
        head = subprocess.run(["git", "-C", str(tree), "rev-parse", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
        assert head == sha
        assert subprocess.run(["git", "-C", str(tree), "status", "--porcelain",
                               "--untracked-files=no"], capture_output=True, text=True,
                              check=True).stdout == ""
        # the next use finds it attached: nothing to do
        assert benchab.checkout("HEAD", repo=ROOT, workdir=tmp_path / "wd")[1] == tree
        assert "attached to" not in capsys.readouterr().out
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force",
                        str(tree)], check=True)


def test_an_orphaned_worktree_with_changed_files_is_refused(tmp_path):
    tree = _orphaned_worktree(tmp_path, "gone")
    with open(tree / "README.md", "a") as f:
        f.write("changed\n")
    try:
        with pytest.raises(SystemExit, match="files differ from"):
            benchab.checkout("HEAD", repo=ROOT, workdir=tmp_path / "wd")
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force",
                        str(tree)], check=True)


def test_bad_sides_are_refused(tmp_path):
    with pytest.raises(SystemExit, match="neither a directory nor a revision"):
        benchab.checkout("no-such-revision-xyz", repo=ROOT, workdir=tmp_path)
    with pytest.raises(SystemExit, match="not a ddnumba checkout"):
        benchab.checkout(str(tmp_path), workdir=tmp_path)
    with pytest.raises(SystemExit, match="pairs"):
        main(["ab", "--base", str(ROOT), "--pairs", "0"])
    with pytest.raises(SystemExit, match="--max-pairs .3. is below --pairs .4."):
        main(["ab", "--base", str(ROOT), "--pairs", "4", "--max-pairs", "3"])
    with pytest.raises(SystemExit, match="tolerance"):
        main(["ab", "--base", str(ROOT), "--tolerance", "1.5"])


def test_a_failing_side_reports_its_error(tmp_path):
    """A tree whose ddnumba cannot be imported: the child's error is shown."""
    (tmp_path / "ddnumba").mkdir()
    (tmp_path / "kernels").mkdir()
    (tmp_path / "ddnumba" / "__init__.py").write_text("raise ImportError('broken tree')\n")
    (tmp_path / "kernels" / "__init__.py").write_text("")
    _, tree = benchab.checkout(str(tmp_path))
    with pytest.raises(SystemExit, match="broken tree"):
        benchab.run_side(tree, 50, 5, 10)


def test_pair_interval_is_a_t_interval_on_log_ratios():
    # Identical ratios: no spread, the interval is the point.
    g, lo, hi = benchab.pair_interval([1.1, 1.1, 1.1])
    assert g == pytest.approx(1.1) and lo == pytest.approx(1.1) and hi == pytest.approx(1.1)
    # Two pairs: Student's t with one degree of freedom (12.706), worked by hand.
    a, b = math.log(0.9), math.log(1.1)
    mean, sd = (a + b) / 2, abs(b - a) / math.sqrt(2)
    half = 12.7062 * sd / math.sqrt(2)
    g, lo, hi = benchab.pair_interval([0.9, 1.1])
    assert g == pytest.approx(math.sqrt(0.99))
    assert lo == pytest.approx(math.exp(mean - half), rel=1e-4)
    assert hi == pytest.approx(math.exp(mean + half), rel=1e-4)
    # Eight pairs (t = 2.3646 at 7 degrees of freedom).
    r = [1.02, 0.97, 1.10, 1.05, 0.99, 1.08, 1.03, 1.06]
    logs = [math.log(x) for x in r]
    m = sum(logs) / 8
    sd = math.sqrt(sum((x - m) ** 2 for x in logs) / 7)
    g, lo, hi = benchab.pair_interval(r)
    assert g == pytest.approx(math.exp(m))
    assert lo == pytest.approx(math.exp(m - 2.3646 * sd / math.sqrt(8)), rel=1e-4)
    assert hi == pytest.approx(math.exp(m + 2.3646 * sd / math.sqrt(8)), rel=1e-4)
    # One pair: no interval.
    assert benchab.pair_interval([1.2]) == (pytest.approx(1.2), 0.0, float("inf"))
    with pytest.raises(ValueError):
        benchab.pair_interval([1.0, 0.0])


def test_verdict():
    assert benchab.verdict(1.01, 1.2, 0.02) == "faster"
    assert benchab.verdict(0.8, 0.99, 0.02) == "slower"
    assert benchab.verdict(0.985, 1.015, 0.02) == "same"
    assert benchab.verdict(0.97, 1.015, 0.02) == "undecided"
    assert benchab.verdict(0.0, float("inf"), 0.02) == "undecided"


def _fake_tree(path):
    for d in ("ddnumba", "kernels"):
        (path / d).mkdir(parents=True)
        (path / d / "__init__.py").write_text("")
    return str(path)


def _scripted(monkeypatch, base_tree, new_ratios):
    """Replace the child runs: the base side always runs 1000 changes/s; the new
    side's k-th measured run runs ``1000 * new_ratios[k]``."""
    calls = []

    def run_side(tree, n, batch, changes, **kw):
        calls.append((str(tree), batch))
        if batch == 10 and changes == 20:            # the warm-up run
            return {"p50_ms": 1.0, "changes_per_s": 1.0, "load_s": 0.0,
                    "peak_gib": 0.0, "check": True}
        if str(tree) == base_tree:
            cps = 1000.0
        else:
            cps = 1000.0 * new_ratios[sum(1 for t, b in calls if t != base_tree
                                          and b != 10) - 1]
        return {"p50_ms": batch * 1000 / cps, "changes_per_s": cps, "load_s": 1.0,
                "peak_gib": 0.1, "check": True}
    monkeypatch.setattr(benchab, "run_side", run_side)
    return calls


@pytest.mark.parametrize("ratios, pairs, max_pairs, ran, verdict", [
    # Decided after the first pairs: no more are run.
    ([1.10, 1.12, 1.09, 1.11, 1.5, 1.5], 4, 6, 4, "faster"),
    # Undecided after 3, 4 and 5, decided after the 6th (the interval leaves 1).
    ([1.2, 0.95, 1.1, 1.15, 1.12, 1.14, 0.5, 0.5], 3, 8, 6, "faster"),
    # Never decided: stops at max_pairs.
    ([1.3, 0.7, 1.3, 0.7, 1.3, 0.7, 1.3, 0.7], 2, 6, 6, "undecided"),
    # Pairs that agree closely on no change.
    ([1.0, 1.004, 0.996, 1.001, 0.999, 1.5], 5, 6, 5, "same"),
    # Without max_pairs exactly `pairs` pairs, decided or not.
    ([1.3, 0.7, 1.3, 0.7], 2, None, 2, "undecided"),
])
def test_ab_adds_pairs_until_decided(tmp_path, monkeypatch, capsys, ratios, pairs,
                                     max_pairs, ran, verdict):
    base, new = _fake_tree(tmp_path / "b"), _fake_tree(tmp_path / "n")
    _scripted(monkeypatch, str(Path(base).resolve()), ratios)
    runs, s = benchab.compare(base, new, nodes=10, batch=5, changes=50, pairs=pairs,
                              max_pairs=max_pairs)
    assert len({p for p, _, _ in runs}) == ran and len(runs) == 2 * ran
    assert [side for p, side, _ in runs[:4]] == ["base", "new", "new", "base"][:len(runs[:4])]
    assert s["pair_ratios"] == pytest.approx(ratios[:ran])
    assert s["verdict"] == verdict
    out = capsys.readouterr().out
    assert "geometric mean" in out and "95% interval" in out
    assert out.count("next") == ran - pairs     # one progress line per added pair

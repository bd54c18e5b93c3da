"""``python -m ddnumba.bench ab``: two versions of the code in alternating fresh
processes, each importing ddnumba from its own tree, with answers checked."""
import subprocess
from pathlib import Path

import pytest

from ddnumba import benchab
from ddnumba.bench import main

ROOT = Path(__file__).resolve().parents[1]


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
    runs[3] = (1, "base", fig(100, check=False))
    assert not benchab.summarize(runs)["check"]


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


def test_bad_sides_are_refused(tmp_path):
    with pytest.raises(SystemExit, match="neither a directory nor a revision"):
        benchab.checkout("no-such-revision-xyz", repo=ROOT, workdir=tmp_path)
    with pytest.raises(SystemExit, match="not a ddnumba checkout"):
        benchab.checkout(str(tmp_path), workdir=tmp_path)
    with pytest.raises(SystemExit, match="pairs"):
        main(["ab", "--base", str(ROOT), "--pairs", "0"])


def test_a_failing_side_reports_its_error(tmp_path):
    """A tree whose ddnumba cannot be imported: the child's error is shown."""
    (tmp_path / "ddnumba").mkdir()
    (tmp_path / "kernels").mkdir()
    (tmp_path / "ddnumba" / "__init__.py").write_text("raise ImportError('broken tree')\n")
    (tmp_path / "kernels" / "__init__.py").write_text("")
    _, tree = benchab.checkout(str(tmp_path))
    with pytest.raises(SystemExit, match="broken tree"):
        benchab.run_side(tree, 50, 5, 10)

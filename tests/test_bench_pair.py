"""``bench pair``: two sessions in one process, fed the same batches alternately."""
import math
import time

import numpy as np
import pytest

from ddnumba import bench, benchpair


def test_abba_order():
    assert [benchpair.abba(k) for k in range(8)] == [
        ("A", "B"), ("B", "A"), ("B", "A"), ("A", "B")] * 2


def test_summarize_pairs_by_hand():
    s = benchpair.summarize_pairs([2.0, 2.0, 2.0, 2.0], [1.0, 1.0, 1.0, 1.0])
    assert s["speedup"] == pytest.approx(2.0)
    assert s["lo"] == pytest.approx(2.0) and s["hi"] == pytest.approx(2.0)
    assert s["verdict"] == "faster" and s["sum_ratio"] == pytest.approx(2.0)
    assert s["halves"] == pytest.approx([2.0, 2.0])
    assert s["p50_ms_a"] == pytest.approx(2000.0) and s["p50_ms_b"] == pytest.approx(1000.0)

    # ratios 0.5 and 4: geometric mean sqrt(2); logs -ln 2 and 2 ln 2, so their sd is
    # 3 ln 2 / sqrt(2) and the half-width t(0.975, 1) * sd / sqrt(2) = 12.706 * 1.5 ln 2
    s = benchpair.summarize_pairs([1.0, 4.0], [2.0, 1.0])
    assert s["speedup"] == pytest.approx(math.sqrt(2))
    half = 12.7062047 * 1.5 * math.log(2)
    assert s["lo"] == pytest.approx(math.sqrt(2) * math.exp(-half), rel=1e-6)
    assert s["hi"] == pytest.approx(math.sqrt(2) * math.exp(half), rel=1e-6)
    assert s["verdict"] == "undecided"
    assert s["sd_log"] == pytest.approx(3 * math.log(2) / math.sqrt(2))
    assert s["sum_ratio"] == pytest.approx(5 / 3) and s["halves"] == pytest.approx([0.5, 4])

    # no difference, 1% of scatter: within a 2% tolerance, not within 0.01%
    rng = np.random.default_rng(3)
    b = rng.uniform(1, 2, 200)
    a = b * np.exp(rng.normal(0, 0.01, 200))
    s = benchpair.summarize_pairs(a, b)
    assert s["lo"] < 1 < s["hi"] and s["verdict"] == "same"
    assert benchpair.summarize_pairs(a, b, tolerance=0.0001)["verdict"] == "undecided"
    # B 3% slower on every batch: the interval lies below 1
    assert benchpair.summarize_pairs(a / 1.03, b)["verdict"] == "slower"


@pytest.mark.parametrize("a, b", [([1.0, 2.0], [1.0]), ([1.0], [1.0]),
                                  ([1.0, 0.0], [1.0, 1.0]), ([1.0, np.nan], [1.0, 1.0])])
def test_summarize_pairs_rejects_bad_series(a, b):
    with pytest.raises(ValueError):
        benchpair.summarize_pairs(a, b)


def test_compare_in_process_sees_a_slower_side_and_calls_configure_in_order():
    calls = []

    def configure(side, session):
        calls.append((side, session.pos))
        if side == "B" and not hasattr(session, "_slowed"):
            run = session.df.run
            session.df.run = lambda: (time.sleep(0.02), run())[1]
            session._slowed = True

    s = benchpair.compare_in_process(200, 10, 8, configure=configure, out=lambda m: None)
    assert s["check"] is True
    assert s["verdict"] == "slower" and s["hi"] < 1 and s["speedup"] < 0.5
    assert s["lat"]["A"].shape == (8,) and (s["lat"]["B"] > 0.02).all()
    # before each load (nothing fed), before each warm-up batch, then ABBA
    assert calls[:4] == [("A", 0), ("B", 0), ("A", 0), ("B", 0)]
    fed = [side for side, _ in calls[4:]]
    assert fed == [x for k in range(8) for x in benchpair.abba(k)]
    # each side's session saw its own batches in order: 10 changes a batch
    for side in "AB":
        assert [p for sd, p in calls[4:] if sd == side] == [10 * (k + 1) for k in range(8)]


def test_pair_command_a_to_a(capsys):
    bench.main(["pair", "--nodes", "200", "--batch", "10", "--batches", "4"])
    out = capsys.readouterr().out
    assert "A/A (no --setup or --switch)" in out and "answers both match BFS" in out
    assert "B's speed over A's, per batch" in out


def test_pair_command_setup_file(tmp_path, capsys):
    f = tmp_path / "setup.py"
    f.write_text("SEEN = []\n"
                 "def configure(side, session):\n"
                 "    assert side in ('A', 'B') and session.n == 200\n")
    bench.main(["pair", "--nodes", "200", "--batch", "10", "--batches", "2",
                "--setup", str(f)])
    assert f"setup {f}" in capsys.readouterr().out


def test_pair_command_errors(tmp_path):
    f = tmp_path / "nothing.py"
    f.write_text("x = 1\n")
    with pytest.raises(SystemExit, match="defines no function configure"):
        bench.main(["pair", "--nodes", "200", "--batch", "10", "--setup", str(f)])
    with pytest.raises(SystemExit, match="--batches must be at least 2"):
        bench.main(["pair", "--batches", "1"])
    with pytest.raises(SystemExit, match="--tolerance"):
        bench.main(["pair", "--tolerance", "1.5"])
    with pytest.raises(SystemExit, match="must be positive"):
        bench.main(["pair", "--batch", "0"])


def test_pair_command_fails_when_an_answer_is_wrong(monkeypatch, capsys):
    """A side whose final answer differs from BFS makes the command exit 1."""
    calls = []

    def recompute(self):
        calls.append(self)
        return 1.0, len(calls) != 2         # the second side's answer is wrong

    monkeypatch.setattr(bench.ReachSession, "recompute", recompute)
    with pytest.raises(SystemExit) as e:
        bench.main(["pair", "--nodes", "200", "--batch", "10", "--batches", "2"])
    assert e.value.code == 1 and len(calls) == 2
    assert "DO NOT both match BFS" in capsys.readouterr().out


def test_switch_sets_side_b_loop_states_word_only(capsys):
    """``--switch V``: side B's sequential loop states get ``M_SWITCH = V`` from its
    warm-up batch on, side A's keep 0; another configure runs first. Nothing in the
    engine reads the word, so both answers still match."""
    from ddnumba.kernels.hstate import M_SWITCH
    seen = {}

    def then(side, session):
        seen[side] = session

    s = benchpair.compare_in_process(200, 10, 4, configure=benchpair.switch_configure(
        3, then), out=lambda m: None)
    assert s["check"] is True
    for side, want in (("A", 0), ("B", 3)):
        nat = seen[side].df._native
        assert nat.sequential == [True]
        assert nat.st[11][0][2][M_SWITCH] == want
    bench.main(["pair", "--nodes", "200", "--batch", "10", "--batches", "4",
                "--switch", "2"])
    out = capsys.readouterr().out
    assert "B's switch word 2" in out and "answers both match BFS" in out


@pytest.mark.parametrize("engine, loops", [("python", None), ("native", "rounds")])
def test_switch_refuses_sessions_without_sequential_loop_state(engine, loops, capsys):
    with pytest.raises(SystemExit, match="--switch needs the native engine's sequential"):
        bench.main(["pair", "--nodes", "200", "--batch", "10", "--batches", "2",
                    "--switch", "1", "--engine", engine]
                   + (["--loops", loops] if loops else []))

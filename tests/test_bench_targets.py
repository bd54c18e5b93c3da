"""``python -m ddnumba.bench targets``: the performance targets measured in one sitting
and judged met or missed (ddnumba.benchtargets)."""
import io
import json

import pytest

from ddnumba import bench, benchtargets as bt


def _figures(**over):
    """Figures that meet every target by a margin, with ``over`` replacing some."""
    f = {"large_b1000_changes_per_s": 25_000.0, "large_b1_changes_per_s": 2_000.0,
         "load_s": 12.0, "load_peak_gib": 2.5, "small_b1_p50_ms": 0.1,
         "small_b1000_changes_per_s": 120_000.0, "sustained_p99_ratio": 1.0,
         "sustained_records_ratio": 1.1,
         "checks": {"a": True, "b": True}}
    f.update(over)
    return f


def _met(figs, sizes=None):
    return {row[0]: row[4] for row in bt.evaluate(figs, sizes)}


def test_every_target_is_met_by_figures_within_it():
    assert set(_met(_figures()).values()) == {True}
    assert len(bt.evaluate(_figures())) == len(bt.TARGETS) == 8


@pytest.mark.parametrize("fig, key, at, beyond", [
    ("large_b1000_changes_per_s", "large_b1000", 20_000, 19_999.9),
    ("large_b1_changes_per_s", "large_b1", 1_245, 1_244.9),
    ("load_s", "load_s", 20.0, 20.01),
    ("load_peak_gib", "load_peak", 3.0, 3.001),
    ("small_b1_p50_ms", "small_b1_p50", 0.5, 0.5001),
    ("small_b1000_changes_per_s", "small_b1000", 100_000, 99_999),
    ("sustained_p99_ratio", "sustained_p99", 1.25, 1.2501),
    ("sustained_records_ratio", "sustained_flat", bt.FLAT_RATIO, bt.FLAT_RATIO + 0.01),
])
def test_a_target_is_met_at_its_bound_and_missed_beyond_it(fig, key, at, beyond):
    """The bounds are the issue's (throughput at least, latency, seconds, memory and
    ratios at most), each judged alone."""
    assert _met(_figures(**{fig: at}))[key] is True
    got = _met(_figures(**{fig: beyond}))
    assert got[key] is False
    assert [k for k, v in got.items() if not v] == [key]


def test_a_missing_figure_is_neither_met_nor_missed():
    figs = _figures()
    del figs["load_s"]
    assert _met(figs)["load_s"] is None


def test_the_lines_name_the_sizes_measured():
    rows = bt.evaluate(_figures(), {"large": 5000, "small": 200, "sustained": 3000})
    whats = [r[1] for r in rows]
    assert whats[0] == "N=5,000 B=1000 throughput"
    assert whats[4] == "N=200 B=1 p50 latency"
    assert bt.evaluate(_figures())[0][1] == "N=1e6 B=1000 throughput"


def test_report_flags_wrong_answers_misses_and_other_sizes():
    out = io.StringIO()
    right, met = bt.report(_figures(), out=out)
    text = out.getvalue()
    assert (right, met) == (True, True)
    assert "MISSED" not in text and "WRONG" not in text and "note:" not in text
    assert "all 2 segments match" in text

    out = io.StringIO()
    right, met = bt.report(_figures(checks={"a": True, "N=9 sustained": False},
                                    small_b1_p50_ms=0.7),
                           sizes={"large": 10, "small": 9, "sustained": 1000}, out=out)
    text = out.getvalue()
    assert (right, met) == (False, False)
    assert "WRONG ANSWER: N=9 sustained differs from scipy BFS" in text
    assert text.count("MISSED") == 1
    assert "note: not the targets' workload sizes" in text


@pytest.mark.parametrize("strict", [False, True])
def test_main_exits_1_on_a_wrong_answer_and_on_a_miss_only_when_strict(monkeypatch,
                                                                       strict, capsys):
    flags = ["--strict"] if strict else []
    monkeypatch.setattr(bt, "measure", lambda *a, **k: _figures(load_s=25.0))
    if strict:
        with pytest.raises(SystemExit) as e:
            bench.main(["targets"] + flags)
        assert e.value.code == 1
    else:
        bench.main(["targets"])
    assert "MISSED" in capsys.readouterr().out
    monkeypatch.setattr(bt, "measure",
                        lambda *a, **k: _figures(checks={"x": False}))
    with pytest.raises(SystemExit) as e:
        bench.main(["targets"] + flags)
    assert e.value.code == 1


@pytest.mark.parametrize("argv, msg", [
    (["--runs", "0"], "--runs must be positive"),
    (["--large", "-5"], "--large must be positive"),
    (["--sustained", "10999"], "at least 1,000 changes more than its 10 pairs"),
    (["--sustained", "2999", "--pairs", "2"], "more than its 2 pairs of 1,000, not 2999"),
    (["--pairs", "0"], "--pairs must be positive"),
    (["--touch", "-1"], "--touch must be a size in MiB"),
    (["--touch", "nan"], "--touch must be a size in MiB"),
    (["--touch", "inf"], "--touch must be a size in MiB"),
])
def test_bad_arguments_are_refused(argv, msg):
    with pytest.raises(SystemExit) as e:
        bench.main(["targets", "--large", "300", "--small", "100"] + argv)
    assert msg in str(e.value)


def test_a_small_sitting_measures_every_figure_and_checks_every_answer(tmp_path, capsys):
    """End to end on small graphs: every target gets a figure, every segment's answer
    is checked against scipy BFS, and the ratios are those of the figures beside
    them."""
    path = tmp_path / "t.json"
    bench.main(["targets", "--large", "2000", "--small", "200", "--sustained", "3000",
                "--runs", "2", "--pairs", "2", "--touch", "8", "--json", str(path)])
    out = capsys.readouterr().out
    assert "all 3 segments match scipy BFS" in out
    assert "note: not the targets' workload sizes" in out
    doc = json.loads(path.read_text())
    figs = doc["figures"]
    assert doc["sizes"] == {"large": 2000, "small": 200, "sustained": 3000}
    assert all(figs["checks"].values()) and len(figs["checks"]) == 3
    assert [t["met"] is not None for t in doc["targets"]] == [True] * 8
    assert figs["sustained_p99_ratio"] == pytest.approx(
        figs["sustained_p99_end_ms"] / figs["sustained_p99_first_ms"])
    assert figs["sustained_pairs"] == 2
    assert figs["sustained_p99_alone_ratio"] == pytest.approx(
        figs["sustained_p99_alone_end_ms"] / figs["sustained_p99_alone_first_ms"])
    assert "2 fresh sessions' first 1,000 changes" in out and "the long run alone" in out
    assert "alternating run by run" in out
    assert figs["sustained_records_ratio"] == pytest.approx(
        figs["sustained_records_end"] / figs["sustained_records_first"])
    assert 0 < figs["load_peak_gib"] < 24 and figs["load_s"] > 0
    # the load's CPU time, user and system, is counted over the load alone
    assert figs["load_user_s"] > 0 and figs["load_sys_s"] >= 0
    assert figs["load_user_s"] + figs["load_sys_s"] < figs["load_s"] + 1.0
    assert figs["touch_fresh_s_per_gib"] > 0 and figs["touch_recycled_s_per_gib"] > 0
    assert (f"N=2,000 load: {figs['load_s']:.1f} s, of which CPU "
            f"{figs['load_user_s']:.1f} s user") in out
    assert "a first write to fresh memory costs" in out
    for side in ("large", "small"):
        assert figs[f"{side}_b1000_changes_per_s"] == pytest.approx(
            1000 / (figs[f"{side}_b1000_p50_ms"] / 1e3))
        assert figs[f"{side}_recompute_ms"] > 0


def _fake_sustained_run():
    """A ``sustained_runs`` result whose parts differ in every figure."""
    import numpy as np
    return {"first": np.linspace(0.001, 0.002, 1000),         # p99 ~1.99 ms
            "last": np.linspace(0.003, 0.007, 1000),          # p99 ~6.96 ms
            "fresh": [np.linspace(0.0005, 0.001, 1000), np.linspace(0.0005, 0.003, 1000)],
            "long": [np.linspace(0.002, 0.004, 1000), np.linspace(0.001, 0.002, 1000)],
            "records_first": 400, "records_end": 500, "check": True}


def _fake_sustained_runs(monkeypatch):
    """``bt.sustained_runs`` replaced by one returning :func:`_fake_sustained_run`;
    returns that run and the list of the calls' ``(n, changes, pairs)``."""
    run = _fake_sustained_run()
    calls = []

    def fake_sustained_runs(n, changes, pairs, **kw):
        calls.append((n, changes, pairs))
        return run

    monkeypatch.setattr(bt, "sustained_runs", fake_sustained_runs)
    return run, calls


def test_the_sustained_figures_come_from_their_own_runs(monkeypatch):
    """The target's p99s are those of the pooled interleaved runs (fresh sessions'
    first 1,000 against the long session's end), the long run alone's are its first
    and last 1,000, and the records those of its two checkpoints: not swapped or
    mixed. A fake sustained run whose parts differ in every figure."""
    import numpy as np
    run, calls = _fake_sustained_runs(monkeypatch)
    first, last, fresh, long = run["first"], run["last"], run["fresh"], run["long"]
    figs = bt.measure(300, 100, 5000, pairs=2, runs=1, large_single=10,
                      small_single=10, touch_mib=0)
    assert "touch_fresh_s_per_gib" not in figs
    assert calls == [(100, 5000, 2)]
    p99 = lambda *a: np.percentile(np.concatenate(a), 99) * 1e3  # noqa: E731
    assert figs["sustained_p99_first_ms"] == pytest.approx(p99(*fresh))
    assert figs["sustained_p99_end_ms"] == pytest.approx(p99(*long))
    assert figs["sustained_p99_ratio"] == pytest.approx(p99(*long) / p99(*fresh))
    assert figs["sustained_p99_alone_first_ms"] == pytest.approx(p99(first))
    assert figs["sustained_p99_alone_end_ms"] == pytest.approx(p99(last))
    assert figs["sustained_p99_alone_ratio"] == pytest.approx(p99(last) / p99(first))
    assert figs["sustained_pairs"] == 2
    assert (figs["sustained_records_first"], figs["sustained_records_end"]) == (400, 500)
    assert figs["sustained_records_ratio"] == pytest.approx(1.25)
    assert len(figs["checks"]) == 3 and all(figs["checks"].values())


def test_the_sustained_pairs_alternate_fresh_and_long_sessions_run_by_run(monkeypatch):
    """``sustained_runs``: the long session's last pairs x 1,000 single changes
    alternate run by run with a fresh session's first 1,000 (a new one per pair),
    every session is made for the same stream (its capacity fixes the new edges), the
    long session's answer is checked at the end, and every session is closed."""
    events = []
    real = bench.ReachSession

    class Spy(real):
        made = 0

        def __init__(self, n, capacity, **kw):
            super().__init__(n, capacity, **kw)
            Spy.made += 1
            self.name = f"S{Spy.made}"
            events.append((self.name, "new", n, capacity))

        def load(self):
            events.append((self.name, "load"))
            return super().load()

        def feed(self, batch, changes, **kw):
            events.append((self.name, "feed", batch, changes))
            return super().feed(batch, changes, **kw)

        def recompute(self):
            events.append((self.name, "recompute"))
            return super().recompute()

        def close(self):
            events.append((self.name, "close"))
            super().close()

    monkeypatch.setattr(bench, "ReachSession", Spy)
    r = bt.sustained_runs(150, 3500, 2)
    want = [("S1", "new", 150, 3500), ("S1", "load"), ("S1", "feed", 1, 1500)]
    for fresh in ("S2", "S3"):
        want += [(fresh, "new", 150, 3500), (fresh, "load")]
        want += [(fresh, "feed", 1, 1), ("S1", "feed", 1, 1)] * 1000
        want += [(fresh, "close")]
    want += [("S1", "recompute"), ("S1", "close")]
    assert events == want
    assert r["check"] is True
    assert [len(x) for x in r["fresh"]] == [len(x) for x in r["long"]] == [1000, 1000]
    assert len(r["first"]) == len(r["last"]) == 1000
    assert r["records_first"] > 0 and r["records_end"] > 0
    with pytest.raises(ValueError, match="more than its 2 pairs of 1,000, not 2999"):
        bt.sustained_runs(150, 2999, 2)
    with pytest.raises(ValueError, match="at least one pair, not 0"):
        bt.sustained_runs(150, 3000, 0)
    monkeypatch.setattr(bt, "_segments", lambda *a: pytest.fail("ran before the check"))
    with pytest.raises(ValueError, match="more than its 3 pairs of 1,000, not 3999"):
        bt.measure(300, 100, 3999, pairs=3)


def test_the_runtime_is_compiled_apart_before_anything_is_measured(monkeypatch):
    """``measure`` has a child process compile the runtime (or load it) first, so that
    neither the load's seconds nor this process's peak memory hold the compiler's."""
    events = []
    monkeypatch.setattr(bt, "compile_apart", lambda: events.append("compile") or 1.5)
    monkeypatch.setattr(bt, "_segments", lambda side, *a: events.append(side))
    _fake_sustained_runs(monkeypatch)
    figs = bt.measure(300, 100, 3000, pairs=2, touch_mib=0)
    assert events == ["compile", "large", "small"]
    assert figs["compile_apart_s"] == 1.5


def test_compile_apart_runs_this_ddnumba_in_a_child_and_reports_its_failure(monkeypatch):
    """The child readies the benchmark's runtime (here: loads it from the cache the
    test session compiled); a child that fails stops the command with its status."""
    assert bt.compile_apart() > 0
    import sys

    from ddnumba import native
    cmds = []
    monkeypatch.setattr(native, "child_command",
                        lambda body, who: cmds.append((body, who))
                        or [sys.executable, "-c", "raise SystemExit(3)"])
    with pytest.raises(SystemExit, match="in a child process failed .exit status 3"):
        bt.compile_apart()
    assert "build_reach()[0].prepare()" in cmds[0][0]


def test_the_sustained_windows_are_the_long_runs_own(monkeypatch):
    """``first`` and ``last`` are the long run's first 1,000 runs and its last 1,000
    before the pairs, and ``long`` its runs during them: a fake session whose runs
    take as long as the number of changes fed before them."""
    import numpy as np

    class Fake:
        def __init__(self, n, capacity):
            self.pos, self.df = 0, None

        def load(self):
            return 0.0

        def feed(self, batch, changes, checkpoints=(), **kw):
            lat = np.arange(self.pos, self.pos + changes, dtype=float)
            marks = {c: (lat[c - 1000:c], 7 * c) for c in checkpoints}
            self.pos += changes
            return {"latencies": lat, "marks": marks}

        def recompute(self):
            return 1.0, True

        def close(self):
            pass

    monkeypatch.setattr(bench, "ReachSession", Fake)
    monkeypatch.setattr(bench, "state_records", lambda df: 99)
    r = bt.sustained_runs(10, 5000, 3)
    assert (r["first"] == np.arange(0, 1000)).all()
    assert (r["last"] == np.arange(1000, 2000)).all()
    assert [(x == np.arange(2000 + 1000 * k, 3000 + 1000 * k)).all()
            for k, x in enumerate(r["long"])] == [True] * 3
    assert [(x == np.arange(0, 1000)).all() for x in r["fresh"]] == [True] * 3
    assert (r["records_first"], r["records_end"]) == (7000, 99)


def test_asv_sustained_pairs_reports_the_targets_figures(monkeypatch):
    """asv ``ReachSustainedPairs`` reads the same sustained run as ``bench targets``
    and reports its figures unswapped: fed a fake run whose parts differ in every
    figure, each track returns the pooled percentile computed here; a wrong answer
    fails its setup."""
    import numpy as np

    from asv_benchmarks import bench_reach as br
    run, calls = _fake_sustained_runs(monkeypatch)
    first, last, fresh, long = run["first"], run["last"], run["fresh"], run["long"]
    monkeypatch.setattr(br, "_warm_up", lambda *a, **k: None)
    c = br.ReachSustainedPairs()
    cache = c.setup_cache()
    assert calls == [(1000, 1_000_000, 10)]
    c.setup(cache)
    p99 = lambda *a: np.percentile(np.concatenate(a), 99) * 1e3  # noqa: E731
    assert c.track_p99_fresh_ms(cache) == pytest.approx(p99(*fresh))
    assert c.track_p99_end_ms(cache) == pytest.approx(p99(*long))
    assert c.track_p99_ratio(cache) == pytest.approx(p99(*long) / p99(*fresh))
    assert c.track_p99_ratio_alone(cache) == pytest.approx(p99(last) / p99(first))
    assert c.track_records_ratio(cache) == pytest.approx(1.25)
    run["check"] = False
    with pytest.raises(RuntimeError, match="differs from the scipy recompute"):
        c.setup(c.setup_cache())

"""bench/completeness's summary of runs: losses, intervals, k of n, and a run
without the collector's account refused rather than counted as lossless."""
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
spec = importlib.util.spec_from_file_location("completeness", ROOT / "bench" / "completeness" / "run.py")
completeness = importlib.util.module_from_spec(spec)
spec.loader.exec_module(completeness)


def row(dropped, unnumbered, produced=100_000, **kw):
    return {"scheduler": "custos", "produced": produced, "dropped": dropped, "unnumbered": unnumbered,
            "runtime_ms": 1000, "marker_delivered": True, "sched_ext_state": "enabled", **kw}


def test_summary_counts_every_kind_of_loss_and_gives_intervals():
    s = completeness.summarise([row(0, 0), row(128, 0), row(0, 44), row(0, 0), row(0, 0)])
    assert s["runs"] == 5 and s["runs_with_loss"] == 2 and s["lost_events"] == [0, 128, 44, 0, 0]
    # 44 skipped of 100,044 events that happened.
    assert s["loss_pct"][2] == pytest.approx(100 * 44 / 100_044)
    lo, hi = s["loss_pct_ci95"]
    assert lo < s["loss_pct_mean"] < hi
    assert s["runs_with_loss_ci95"][0] > 0 and s["runs_with_loss_ci95"][1] < 1
    # Zero of five is an interval, not "never".
    clean = completeness.summarise([row(0, 0)] * 5)
    assert clean["runs_with_loss"] == 0 and clean["runs_with_loss_ci95"][1] == pytest.approx(0.5218, abs=1e-3)


def test_a_run_without_the_collectors_account_is_refused():
    with pytest.raises(ValueError, match="account"):
        completeness.summarise([row(0, 0), row(None, None)])


def test_the_plan_puts_the_stalls_on_the_first_flood_only():
    args = type("A", (), {"cpus": [1, 2], "policies": ["static"], "floods": ["find16", "exec16"],
                          "pauses": [0, 500, 2000], "files": 4000, "ring_kb": 512, "hold_rings": False,
                          "resumer": "read", "rounds": 300})
    cells = completeness.plan(args)
    assert len(cells) == 2 * (3 + 1)
    assert {c["pause_ms"] for c in cells if c["flood"] == "exec16"} == {0}
    # The ring size is in the cell's name unless it is the guest's default.
    assert completeness.cell_name(**cells[0]) == "cpus1-find16-pause0-static-ring512"
    assert completeness.cell_name(**dict(cells[0], ring_kb=64)) == "cpus1-find16-pause0-static"
    # Rings grown for the hold's bound are another cell.
    assert completeness.cell_name(**dict(cells[0], hold_rings=True)) == "cpus1-find16-pause0-static-ring512-holdrings"
    # So is a stopped consumer resumed by an exec'd sleep.
    assert completeness.cell_name(**dict(cells[0], pause_ms=2000, resumer="exec")) == \
        "cpus1-find16-pause2000-static-ring512-resumerexec"
    # Without a stop there is nothing to resume.
    assert completeness.cell_name(**dict(cells[0], resumer="exec")) == "cpus1-find16-pause0-static-ring512"


def test_a_runs_stall_and_bound_are_summarised():
    rows = [row(0, 0, stall_ms=2010, hold_bounded=[True, True, True]),
            row(0, 0, stall_ms=11000, hold_bounded=[False, True, True]), row(0, 0)]
    s = completeness.summarise(rows)
    assert s["stall_ms"] == [2010, 11000]
    assert s["hold_bounded_runs"] == 1


def test_the_holds_account_is_kept_per_run_and_its_worst_is_a_headline():
    def hold(bounces, floors, lowest):
        return {"holds": 1, "held": 16, "held_in_program": 0, "held_at_stop": 3, "bounces": bounces,
                "leaks": 0, "floors": floors, "lowest_free_pct": lowest, "floor_pct": 8.59, "kicks": 90, "stops": 90}
    runs = completeness.summarise([row(0, 0, hold=hold(0, 0, 27.5)), row(0, 0, hold=hold(2, 1, 7.9)), row(0, 0)])
    assert runs["hold_runs"] == 2
    assert runs["hold_bounces"] == [0, 2] and runs["hold_floors"] == [0, 1]
    assert runs["hold_lowest_free_pct"] == [27.5, 7.9] and runs["held_at_stop"] == [3, 3]
    # A scheduler that never held has no hold account.
    assert "hold_runs" not in completeness.summarise([row(0, 0)])
    h = completeness.headlines([{"pause_ms": 2000, "custos-hold": runs}])
    assert h["custos_hold_hold_floors"] == 1 and h["custos_hold_hold_bounces_max"] == 2
    assert h["custos_hold_hold_lowest_free_pct_min"] == 7.9


def test_a_cell_lacking_a_schedulers_runs_is_not_on_disk():
    rows = [{"scheduler": "default"}] * 5 + [{"scheduler": "custos"}] * 5
    assert completeness.missing_runs(rows, ["default", "custos"], 5) == {}
    # A scheduler added to the cells: its runs are missing, the others not.
    assert completeness.missing_runs(rows, ["default", "custos", "custos-hold"], 5) == {"custos-hold": 5}
    assert completeness.missing_runs(rows[:9], ["default", "custos"], 5) == {"custos": 1}


def test_headlines_per_custos_scheduler_count_runs_stall_loss_and_the_worst_probe_ratio():
    def cell(pause_ms, lost_hold, ratio_hold):
        hold = completeness.summarise([row(lost_hold, 0, probe_p99_ns=2e7)] + [row(0, 0, probe_p99_ns=2e7)] * 4)
        hold["probe_p99_ratio_vs_default"] = ratio_hold
        return {"pause_ms": pause_ms, "default": completeness.summarise([row(900, 0)] * 5), "custos-hold": hold}
    h = completeness.headlines([cell(0, 0, 1.1), cell(2000, 7, 3.0)])
    assert h["custos_hold_runs"] == 10 and h["custos_hold_runs_with_loss"] == 1
    # Only the 2 s stalls count in their own figure.
    assert h["stall_2s_custos_hold_lost"] == 7
    assert h["innocent_p99_ratio_vs_default_custos_hold_max"] == 3.0
    # No plain Custos runs: no figures made up for it.
    assert not any(k.startswith("custos_runs") for k in h)


def test_the_ratios_are_median_over_median_and_absent_without_figures():
    entry = {"default": {"probe_p99_ms": [10.0, 20.0, 30.0]}, "custos": {"probe_p99_ms": [25.0, 50.0, 5.0]}}
    assert completeness.ratio_vs_default(entry) == 25.0 / 20.0
    assert completeness.ratio_vs_default({"default": {"probe_p99_ms": []}, "custos": {"probe_p99_ms": [1.0]}}) is None
    assert completeness.ratio_vs_default({"custos": {"probe_p99_ms": [1.0]}}) is None
    attack = {"default": {"attack_ms": [100, 300, 200]}, "custos-hold": {"attack_ms": [250, 150, 500]}}
    assert completeness.ratio_vs_default(attack, "custos-hold", "attack_ms") == 250 / 200


def test_the_attack_is_summarised_and_a_late_or_unrecorded_attack_is_a_headline():
    rows = [row(0, 0, attack_ms=300, attack_end_ms=1400, attack_recorded=True),
            # Outlasted the flood (runtime 1000 ms), and a step is missing.
            row(0, 0, attack_ms=900, attack_end_ms=1900, attack_recorded=False),
            # Not timed: no time and no place against the flood's end.
            row(0, 0)]
    s = completeness.summarise(rows)
    assert s["attack_ms"] == [300, 900]
    assert s["attack_before_flood_end"] == 0 and s["attack_recorded"] == 1
    ok = completeness.summarise([row(0, 0, runtime_ms=5000, attack_ms=300, attack_end_ms=1300,
                                     attack_recorded=True)] * 3)
    assert ok["attack_before_flood_end"] == 3
    h = completeness.headlines([{"pause_ms": 0, "custos-hold": ok}, {"pause_ms": 0, "custos-hold": s}])
    assert h["custos_hold_attack_after_flood_runs"] == 2
    # In a cell where the attack ran, a run without its steps in the stream
    # counts as unrecorded, whether or not it was timed.
    assert h["custos_hold_attack_unrecorded_runs"] == 2


def made_by(commit):
    return {"commit": commit, "dirty": False, "date": "2026-11-30T10:00:00+00:00", "cpu_model": "AMD EPYC"}


def test_the_report_names_the_commits_that_made_the_runs_not_its_own(tmp_path, monkeypatch):
    import json
    import subprocess

    from custos_bench import provenance

    monkeypatch.setattr(completeness, "OUT", tmp_path / "out")
    monkeypatch.setattr(completeness, "HERE", tmp_path)
    cells = [dict(cpus=c, flood="find16", pause_ms=0, policy="static", files=4000, ring_kb=64, hold_rings=False)
             for c in (1, 2, 4)]
    names = [completeness.cell_name(**c) for c in cells]
    for name in names:
        d = tmp_path / "out" / name
        d.mkdir(parents=True)
        rows = [row(900, 0, scheduler="default"), row(0, 0), row(700, 0, scheduler="default"), row(0, 0)]
        (d / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))

    def report():
        completeness.report(cells, 2, "bench/completeness/run.py --cpus 1 2 4 --floods find16 --pauses 0 --runs 2")
        return json.loads((tmp_path / "results.json").read_text())

    # Two cells run at one commit, the third after a fix.
    provenance.keep(tmp_path / "out" / names[0], made_by("a" * 40))
    provenance.keep(tmp_path / "out" / names[1], made_by("a" * 40))
    provenance.keep(tmp_path / "out" / names[2], made_by("b" * 40))
    doc = report()
    assert doc["made_by"]["commit"] == "several" and doc["made_by"]["commits"] == ["a" * 40, "b" * 40]
    assert [s["made"] for s in doc["sittings"]] == [[n] for n in names]
    # What wrote the report is said apart: it is not what made the runs.
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True,
                          cwd=ROOT).stdout.strip()
    assert doc["made_by"]["written"]["commit"] == head
    # Every cell at one commit: that commit.
    provenance.keep(tmp_path / "out" / names[2], made_by("a" * 40))
    assert report()["made_by"]["commit"] == "a" * 40
    # A cell run before records were kept: its commit is unknown, and so the file's.
    (tmp_path / "out" / names[1] / provenance.KEPT).unlink()
    doc = report()
    assert doc["made_by"]["commit"] == "several" and doc["made_by"]["commits"] == ["a" * 40, None]
    assert doc["sittings"][1]["provenance"] is None


def test_a_cell_run_in_a_fresh_checkout_joins_the_cells_results_json_holds(tmp_path, monkeypatch):
    """out/ is scratch (a fresh checkout has none): a cell run there joins
    the cells of results.json, each with its sitting, instead of erasing them."""
    import json
    import shutil

    from custos_bench import provenance

    monkeypatch.setattr(completeness, "OUT", tmp_path / "out")
    monkeypatch.setattr(completeness, "HERE", tmp_path)
    cells = [dict(cpus=c, flood="find16", pause_ms=0, policy="static", files=4000, ring_kb=64, hold_rings=False)
             for c in (1, 2)]
    names = [completeness.cell_name(**c) for c in cells]
    for name, lost in zip(names, (900, 700)):
        d = tmp_path / "out" / name
        d.mkdir(parents=True)
        rows = [row(lost, 0, scheduler="default"), row(0, 0)]
        (d / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        provenance.keep(d, made_by("a" * 40))
    completeness.report(cells, 1, "run.py --cpus 1 2")
    before = json.loads((tmp_path / "results.json").read_text())
    # A fresh checkout runs the 2-vCPU cell again, at another commit.
    shutil.rmtree(tmp_path / "out")
    d = tmp_path / "out" / names[1]
    d.mkdir(parents=True)
    (d / "results.jsonl").write_text(json.dumps(row(0, 0)) + "\n" + json.dumps(row(500, 0, scheduler="default")) + "\n")
    provenance.keep(d, made_by("b" * 40))
    completeness.report(cells[1:], 1, "run.py --cpus 2")
    doc = json.loads((tmp_path / "results.json").read_text())
    assert [c["name"] for c in doc["cells"]] == sorted(names)
    kept = next(c for c in doc["cells"] if c["name"] == names[0])
    assert kept == next(c for c in before["cells"] if c["name"] == names[0])
    again = next(c for c in doc["cells"] if c["name"] == names[1])
    assert again["default"]["dropped"] == [500]
    assert {s["made"][0]: s["provenance"]["commit"] for s in doc["sittings"]} == {names[0]: "a" * 40,
                                                                                 names[1]: "b" * 40}
    assert doc["made_by"]["commits"] == ["a" * 40, "b" * 40]
    # With nothing on disk, the report says again what results.json holds.
    shutil.rmtree(tmp_path / "out")
    completeness.report(cells, 1, "run.py --cpus 1 2")
    assert json.loads((tmp_path / "results.json").read_text())["cells"] == doc["cells"]


def test_the_limit_is_the_bare_floods_runtime_plus_the_consumers_time_and_the_stop():
    rows = [row(0, 0, runtime_ms=30_000, consumer_cpu_ms=10_000, delivered=100_000),
            row(0, 0, runtime_ms=26_000, consumer_cpu_ms=5_000, delivered=100_000),
            {"scheduler": "bare", "runtime_ms": 20_000}, {"scheduler": "bare", "runtime_ms": 24_000},
            {"scheduler": "bare", "runtime_ms": 22_000}]
    bare = completeness.summarise_bare([r for r in rows if r["scheduler"] == "bare"])
    assert bare["runtime_ms"] == [20_000, 24_000, 22_000]
    # Own runtime: the bare runs' median, 22 s; a 2 s stop adds 2 s.
    acc = completeness.limit_account(rows, "custos", bare["runtime_ms"], 2000)
    assert acc["own_runtime_ms"] == 22_000 and acc["limit_ms"] == [34_000, 29_000]
    assert acc["limit_ratio"] == [30_000 / 34_000, 26_000 / 29_000]
    assert acc["drain_rate_eps"] == [10_000, 20_000]
    lo, hi = acc["limit_ratio_ci95"]
    assert lo < acc["limit_ratio_mean"] < hi
    # Runs made before the consumer's time was recorded: no limit, not zero.
    assert completeness.limit_account([row(0, 0)], "custos", [20_000], 0) == {}


def test_the_best_policy_lost_nothing_and_has_the_lowest_worst_cell_ratio():
    def cell(policy, ratio, lossy=0):
        return {"policy": policy, "custos": {"limit_ratio_median": ratio, "runs_with_loss": lossy}}
    h = completeness.best_policy([cell("static", 1.2), cell("static", 1.4), cell("learned", 1.3),
                                  cell("feedback", 1.1, lossy=1), {"policy": "static", "default": {}}])
    assert h["limit_ratio_median_max_static"] == 1.4 and h["limit_ratio_median_max_feedback"] == 1.1
    # Feedback's ratio is lower, but it lost a run; learned's is lower
    # than static's, but only across cells run apart (the emulator's drift
    # between boots): nothing shows it better, static stands.
    assert h["best_policy"] == "static" and h["policy_beats_static"] is False
    assert h["policies_compared"] == 3
    # Each policy in cells of its own: compared, but not run by run.
    assert h["policies_interleaved"] is False
    # No Custos run beside a bare one: no best policy made up.
    assert "best_policy" not in completeness.best_policy([{"policy": "static", "custos": {}}])


def test_a_shell_floods_rounds_are_in_its_cells_name_unless_the_default():
    cell = {"cpus": 2, "flood": "swarm16", "pause_ms": 0, "policy": "static", "files": 2000}
    assert completeness.cell_name(**cell) == "cpus2-swarm16-pause0-static-files2000"
    assert completeness.cell_name(**cell, rounds=40) == "cpus2-swarm16-pause0-static-files2000-rounds40"
    # find reads files, it has no rounds.
    assert completeness.cell_name(**dict(cell, flood="find16"), rounds=40) == "cpus2-find16-pause0-static-files2000"


def test_interleaved_policies_share_a_cell_and_are_told_apart_by_scheduler():
    args = type("A", (), {"cpus": [2], "policies": ["static", "feedback", "learned"], "floods": ["find16"],
                          "pauses": [0], "files": 2000, "ring_kb": 64, "hold_rings": True,
                          "resumer": "read", "rounds": 300, "interleave_policies": True})
    [cell] = completeness.plan(args)
    assert completeness.cell_name(**cell) == "cpus2-find16-pause0-static-feedback-learned-files2000-holdrings"
    # `custos` stands for each policy; the others run once per round.
    assert completeness.cell_schedulers(cell, ["default", "custos", "custos-nohold", "bare"]) == \
        ["default", "custos", "custos-feedback", "custos-learned", "custos-nohold", "bare"]
    assert [completeness.policy_of(cell, s) for s in ("custos", "custos-learned", "custos-nohold")] == \
        ["static", "learned", None]
    # Without the flag, a cell per policy, as before.
    separate = completeness.plan(type("B", (args,), {"interleave_policies": False}))
    assert [c["policy"] for c in separate] == ["static", "feedback", "learned"]
    assert completeness.cell_schedulers(separate[2], ["default", "custos"]) == ["default", "custos"]
    assert completeness.policy_of(separate[2], "custos") == "learned"
    # A cell of feedback and learned alone has no plain `custos`.
    two = dict(cell, policy="feedback-learned")
    assert completeness.cell_schedulers(two, ["custos", "bare"]) == ["custos-feedback", "custos-learned", "bare"]


def runs(median):
    """Five runs' ratios around `median`, 2 % apart."""
    return [median * f for f in (0.96, 0.98, 1.0, 1.02, 1.04)]


def test_the_best_policy_of_interleaved_cells_is_a_fair_comparison():
    def cell(ratios, lossy=()):
        return {"policy": "static-feedback-learned",
                **{s: {"limit_ratio_median": r, "limit_ratio": runs(r), "runs_with_loss": int(s in lossy)}
                   for s, r in ratios.items()}}
    h = completeness.best_policy([cell({"custos": 1.2, "custos-feedback": 1.1, "custos-learned": 1.0}),
                                  cell({"custos": 1.3, "custos-feedback": 0.9, "custos-learned": 1.05},
                                       lossy=("custos-feedback",))])
    assert h["limit_ratio_median_max_static"] == 1.3 and h["limit_ratio_median_max_learned"] == 1.05
    assert h["best_policy"] == "learned" and h["policies_compared"] == 3 and h["policies_interleaved"] is True
    assert h["policy_beats_static"] is True


def test_a_lower_median_within_the_noise_does_not_pick_a_new_default():
    # Learned's median is 4 % under static's in both cells, its runs
    # spread as the emulator's are: the intervals cannot tell them apart.
    noisy = lambda m: [m * f for f in (0.80, 0.92, 1.0, 1.08, 1.2)]  # noqa: E731
    def cell(ratios):
        return {"policy": "static-feedback-learned",
                **{s: {"limit_ratio_median": r, "limit_ratio": noisy(r), "runs_with_loss": 0,
                       "policy_decisions": [7]} for s, r in ratios.items()}}
    h = completeness.best_policy([cell({"custos": 1.2, "custos-feedback": 1.3, "custos-learned": 1.15}),
                                  cell({"custos": 1.25, "custos-feedback": 1.2, "custos-learned": 1.2})])
    assert h["limit_ratio_median_max_learned"] == 1.2 < h["limit_ratio_median_max_static"] == 1.25
    assert h["best_policy"] == "static" and h["policy_beats_static"] is False
    # Clearly lower in one cell and clearly higher in another: not better.
    mixed = [{"policy": "static-learned",
              "custos": {"limit_ratio_median": 1.2, "limit_ratio": runs(1.2), "runs_with_loss": 0},
              "custos-learned": {"limit_ratio_median": 1.0, "limit_ratio": runs(1.0), "runs_with_loss": 0}},
             {"policy": "static-learned",
              "custos": {"limit_ratio_median": 1.3, "limit_ratio": runs(1.3), "runs_with_loss": 0},
              "custos-learned": {"limit_ratio_median": 1.5, "limit_ratio": runs(1.5), "runs_with_loss": 0}}]
    assert completeness.best_policy(mixed)["best_policy"] == "static"


def test_the_guest_knows_every_scheduler_the_bench_can_name():
    script = (ROOT / "scripts" / "superproducer-guest.sh").read_text()
    for s in completeness.SCHEDULERS:
        assert s in script, s


def test_a_cells_name_parses_back_to_the_cell(tmp_path, monkeypatch):
    cells = [
        {"cpus": 2, "flood": "find16", "pause_ms": 0, "policy": "static", "files": 2000, "ring_kb": 64,
         "hold_rings": True, "resumer": "read", "rounds": 300},
        {"cpus": 4, "flood": "find16", "pause_ms": 2000, "policy": "static", "files": 4000, "ring_kb": 512,
         "hold_rings": False, "resumer": "exec", "rounds": 300},
        {"cpus": 2, "flood": "swarm16", "pause_ms": 0, "policy": "static-feedback-learned", "files": 2000,
         "ring_kb": 64, "hold_rings": True, "resumer": "read", "rounds": 30},
    ]
    for cell in cells:
        assert completeness.parse_cell_name(completeness.cell_name(**cell)) == cell
    assert completeness.parse_cell_name("cpus2-find16-pause0-bogus") is None
    assert completeness.parse_cell_name("notes") is None
    # --report --all: the cells with runs on disk, nothing else.
    monkeypatch.setattr(completeness, "OUT", tmp_path)
    for cell in cells[:2]:
        d = tmp_path / completeness.cell_name(**cell)
        d.mkdir()
        (d / "results.jsonl").write_text("{}\n")
    (tmp_path / completeness.cell_name(**cells[2])).mkdir()  # a cell that never ran a run
    (tmp_path / "scratch").mkdir()
    assert sorted(completeness.cells_on_disk(), key=lambda c: c["cpus"]) == cells[:2]


def test_policies_that_decided_nothing_do_not_pick_a_new_default(tmp_path):
    import json

    def cell(ratios, decisions):
        return {"policy": "static-feedback-learned",
                **{s: {"limit_ratio_median": r, "limit_ratio": runs(r), "runs_with_loss": 0,
                       "policy_decisions": decisions} for s, r in ratios.items()}}
    ratios = {"custos": 1.08, "custos-feedback": 0.95, "custos-learned": 1.10}
    idle = completeness.best_policy([cell(ratios, [0, 0, None])])
    # Three identical configurations: feedback's lower ratio is noise.
    assert idle["best_policy"] == "static" and idle["policies_acted"] is False
    assert idle["best_policy_median_limit_ratio"] == 1.08
    acted = completeness.best_policy([cell(ratios, [0, 12, 3])])
    assert acted["best_policy"] == "feedback" and acted["policies_acted"] is True
    # The decisions come from each run's --stats-json.
    (tmp_path / "custos-learned-w16-r2.sched.json").write_text(json.dumps({"policy_to_budgeted": 5, "inferences": 40}))
    row = {"scheduler": "custos-learned", "workers": 16, "run": 2}
    assert completeness.policy_decisions(tmp_path, row) == 45
    assert completeness.policy_decisions(tmp_path, dict(row, run=3)) is None


def test_policies_are_compared_over_the_cells_they_shared():
    shared = {"policy": "static-feedback-learned",
              **{s: {"limit_ratio_median": r, "runs_with_loss": 0, "policy_decisions": [4]}
                 for s, r in {"custos": 1.08, "custos-feedback": 1.12, "custos-learned": 1.10}.items()}}
    # A stall cell run with the static policy alone: its ratio is a worst
    # case to report, not a handicap in a comparison the others never ran.
    stall = {"policy": "static", "custos": {"limit_ratio_median": 1.25, "runs_with_loss": 0, "policy_decisions": [9]}}
    h = completeness.best_policy([shared, stall])
    assert h["limit_ratio_median_max_static"] == 1.25
    assert h["best_policy"] == "static" and h["best_policy_median_limit_ratio"] == 1.08
    assert h["policies_interleaved"] is True and h["policies_acted"] is True


def test_whether_policies_acted_is_asked_of_the_cells_they_are_compared_by():
    shared = {"policy": "static-feedback-learned",
              **{s: {"limit_ratio_median": r, "runs_with_loss": 0, "policy_decisions": [0, 0]}
                 for s, r in {"custos": 1.08, "custos-feedback": 1.02, "custos-learned": 1.10}.items()}}
    # Static budgeted tasks in a cell the others never ran: the shared cell,
    # where none acted, still compares three identical configurations.
    stall = {"policy": "static", "custos": {"limit_ratio_median": 1.25, "runs_with_loss": 0, "policy_decisions": [9]}}
    h = completeness.best_policy([shared, stall])
    assert h["policies_acted"] is False and h["best_policy"] == "static"

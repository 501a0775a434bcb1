import importlib.util
import json
from pathlib import Path

import pytest

spec = importlib.util.spec_from_file_location("sched_run", Path(__file__).resolve().parents[2] / "sched" / "run.py")
sched_run = importlib.util.module_from_spec(spec)
spec.loader.exec_module(sched_run)


def line(sched, phase, result):
    return json.dumps({"scheduler": sched, "phase": phase, "result": result})


def lines_for(sched, rtt, dropped):
    return [
        line(sched, "pipe", {"round_trip": {"mean_ns": rtt}}),
        line(sched, "pipe", {"round_trip": {"mean_ns": rtt * 3}}),
        line(sched, "pipe", {"round_trip": {"mean_ns": rtt * 2}}),
        line(sched, "unix", {"round_trip": {"mean_ns": rtt}}),
        line(sched, "forkexec", {"latency": {"mean_ns": 1000}}),
        line(sched, "cpu", {"wall_ns": 5}),
    ]


def sp(sched, dropped, unnumbered=0, produced=1000):
    return {"scheduler": sched, "produced": produced, "delivered": produced - dropped, "dropped": dropped,
            "unnumbered": unnumbered, "runtime_ms": 10, "marker_delivered": True, "sched_ext_state": "enabled"}


def test_summary_takes_medians_and_loss_percentages():
    data = sched_run.parse(lines_for("default", 100, 250) + lines_for("custos", 110, 0))
    s = sched_run.summarize(data, [sp("default", 250), sp("custos", 0)])
    assert s["default"]["pipe_rtt_ns"] == 200  # median of 100, 300, 200
    assert s["default"]["sp_loss_pct"] == 25.0
    assert s["custos"]["sp_loss_pct"] == 0.0


def test_skipped_syscalls_count_as_loss():
    # 500 recorded (100 of them refused by full rings), 500 never numbered.
    s = sched_run.summarize({}, [sp("default", 100, unnumbered=500, produced=500)])
    assert s["default"]["sp_loss_pct"] == 60.0


def test_a_missing_collector_summary_is_an_error():
    bad = dict(sp("default", 0), produced=None, delivered=None, dropped=None, unnumbered=None)
    with pytest.raises(ValueError, match="no summary"):
        sched_run.summarize({}, [bad])


def series_row(sched, workers, run, dropped=0, unnumbered=0, produced=1000):
    return dict(sp(sched, dropped, unnumbered, produced), workers=workers, run=run)


def test_series_counts_every_custos_run_with_loss():
    rows = [series_row("default", 16, 1, dropped=300), series_row("custos", 16, 1),
            series_row("default", 16, 2, dropped=100), series_row("custos", 16, 2, unnumbered=1),
            series_row("default", 64, 1, dropped=500), series_row("custos", 64, 1, dropped=10)]
    s = sched_run.summarize_series(rows, {}, 1.0)
    assert s["superproducer_runs"] == 3
    assert s["custos_runs_with_loss"] == 2
    assert s["custos_max_loss_pct"] == 1.0
    assert s["default_min_loss_pct"] == 10.0
    assert s["superproducer_series"]["by_workers"]["16"]["custos_runs_with_loss"] == 1
    assert len(s["superproducer_series"]["per_run"]) == 6


def test_series_run_without_figures_counts_as_loss():
    bad = dict(series_row("custos", 16, 1), produced=None, delivered=None, dropped=None, unnumbered=None)
    s = sched_run.summarize_series([series_row("default", 16, 1, dropped=300), bad], {}, 1.0)
    assert s["custos_runs_with_loss"] == 1


def made_by(commit):
    return {"commit": commit, "dirty": False, "date": "2026-11-30T10:00:00+00:00"}


def test_the_series_made_again_names_both_sittings():
    from custos_bench import provenance

    # The committed file, from before sittings were kept: made whole by its made_by (or by no record).
    assert sched_run.sittings_after({}, made_by("b" * 40), sched_run.SERIES) == [
        {"provenance": None, "made": ["latency and CPU workloads", "super producer"]},
        {"provenance": made_by("b" * 40), "made": ["series"]}]
    full = {"sittings": [provenance.sitting_entry(made_by("a" * 40), sched_run.PARTS)]}
    after = sched_run.sittings_after(full, made_by("b" * 40), sched_run.SERIES)
    assert [(s["provenance"]["commit"][0], s["made"]) for s in after] == [
        ("a", ["latency and CPU workloads", "super producer"]), ("b", ["series"])]
    made = provenance.combined([s["provenance"] for s in after])
    assert made["commit"] == "several" and made["commits"] == ["a" * 40, "b" * 40]
    # The series made once more: the earlier series' sitting leaves, the workloads' stays.
    again = sched_run.sittings_after({"sittings": after}, made_by("c" * 40), sched_run.SERIES)
    assert [(s["provenance"]["commit"][0], s["made"]) for s in again] == [
        ("a", ["latency and CPU workloads", "super producer"]), ("c", ["series"])]

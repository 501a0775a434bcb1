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
                          "pauses": [0, 500, 2000], "files": 4000})
    cells = completeness.plan(args)
    assert len(cells) == 2 * (3 + 1)
    assert {c["pause_ms"] for c in cells if c["flood"] == "exec16"} == {0}


def test_the_probe_ratio_is_median_over_median_and_absent_without_figures():
    entry = {"default": {"probe_p99_ms": [10.0, 20.0, 30.0]}, "custos": {"probe_p99_ms": [25.0, 50.0, 5.0]}}
    assert completeness.probe_ratio(entry) == 25.0 / 20.0
    assert completeness.probe_ratio({"default": {"probe_p99_ms": []}, "custos": {"probe_p99_ms": [1.0]}}) is None
    assert completeness.probe_ratio({"custos": {"probe_p99_ms": [1.0]}}) is None

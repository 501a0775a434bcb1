import json
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from custos_bench import matrix, subset


def clustered_features(rng):
    """Nine workloads in three tight, well separated groups."""
    centres = np.array([[0.0, 0.0, 0.0], [5.0, 0.0, 1.0], [0.0, 6.0, -2.0]])
    rows = [centres[i // 3] + rng.normal(0, 0.05, 3) for i in range(9)]
    return [f"w{i}" for i in range(9)], np.array(rows)


def test_subsetting_picks_one_workload_per_cluster_at_the_knee():
    names, feats = clustered_features(np.random.default_rng(3))
    s = subset.choose(names, feats)
    chosen = s["chosen"]
    assert chosen["k"] == 3
    assert sorted(int(n[1:]) // 3 for n in chosen["subset"]) == [0, 1, 2]
    # The three representatives reproduce the whole set's mean almost exactly
    # (equal thirds), and every workload is near one of them.
    assert chosen["accuracy_rmse"] < 0.05
    assert chosen["representativeness_rmse"] < 0.2
    assert sum(chosen["weights"]) == pytest.approx(1.0, abs=0.02)
    assert all(w >= 0 for w in chosen["weights"])
    # More representatives never represent the set worse.
    reps = [x["representativeness_rmse"] for x in s["sweep"]]
    assert all(a >= b - 1e-9 for a, b in zip(reps, reps[1:]))
    assert reps[0] > 5 * chosen["representativeness_rmse"]


def test_standardizing_drops_columns_that_cannot_tell_workloads_apart():
    z = subset.standardize(np.array([[1.0, 7.0], [3.0, 7.0], [5.0, 7.0]]))
    assert z.shape == (3, 1)
    assert z[:, 0].mean() == pytest.approx(0) and z[:, 0].std() == pytest.approx(1)


def run(workload, collector, scheduler, rep, work_s, produced=None, dropped=0, unnumbered=0, ok=True, **extra):
    return {"key": f"{workload}/{collector}/{scheduler}/{rep}", "workload": workload, "collector": collector,
            "scheduler": scheduler, "rep": rep, "ok": ok, "wall_s": work_s, "work_s": work_s,
            "produced": produced, "delivered": None if produced is None else produced - dropped,
            "dropped": dropped if produced is not None else None,
            "unnumbered": unnumbered if produced is not None else None,
            "invariant_ok": True if collector == "custos" else None, **extra}


@pytest.fixture
def runs_file(tmp_path):
    rows = []
    for rep, jitter in ((1, 0.0), (2, 0.2), (3, -0.2)):
        rows += [
            run("flood", "none", "default", rep, 10 + jitter),
            run("flood", "none", "custos", rep, 11 + jitter),
            run("flood", "custos", "default", rep, 12 + jitter, produced=1000, dropped=700, unnumbered=100),
            run("flood", "custos", "custos", rep, 16 + jitter, produced=3000),
            run("cpu", "none", "default", rep, 4 + jitter),
            run("cpu", "none", "custos", rep, 4 + jitter),
            run("cpu", "custos", "default", rep, 5 + jitter, produced=100),
            run("cpu", "custos", "custos", rep, 5 + jitter, produced=100),
        ]
    # An interrupted run, written again when the matrix resumed: the last one counts.
    rows.insert(0, run("cpu", "custos", "custos", 3, 99.0, produced=100, ok=False, error="boom"))
    rows.append(run("ipc", "none", "default", 1, 2.0))
    rows.append(run("ipc", "none", "custos", 1, 2.0, ok=False, error="custos did not reach enabled"))
    p = tmp_path / "runs.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return p


def test_loss_counts_refused_and_skipped_events_over_all_that_happened():
    assert matrix.loss_pct(1000, 700, 100) == pytest.approx(100 * 800 / 1100)
    assert matrix.loss_pct(3000, 0, 0) == 0.0
    assert np.isnan(matrix.loss_pct(None, None, None))
    assert matrix.run_loss_pct({"produced": 1000, "dropped": 700, "unnumbered": 100}) == pytest.approx(100 * 800 / 1100)


def test_cells_are_medians_normalized_to_the_default_scheduler(runs_file):
    df = matrix.load_runs(runs_file)
    assert len(df) == 26  # the rerun replaced its failed first attempt
    c = matrix.cells(matrix.with_limits(df, {"custos": 500.0})).set_index(["workload", "collector", "scheduler"])
    assert c.loc[("flood", "custos", "custos"), "runtime_ratio"] == pytest.approx(16 / 12)
    assert c.loc[("flood", "custos", "default"), "loss_pct"] == pytest.approx(100 * 800 / 1100)
    assert c.loc[("flood", "custos", "custos"), "loss_pct"] == 0.0
    assert c.loc[("flood", "custos", "custos"), "overhead_ratio"] == pytest.approx(16 / 10)
    # The consumer-bound limit: 10 s of own work plus 3000 events at 500/s.
    assert c.loc[("flood", "custos", "custos"), "over_limit"] == pytest.approx(16 / (10 + 6))
    # A lossy run has no limit to be judged against.
    assert np.isnan(c.loc[("flood", "custos", "default"), "over_limit"])
    # A cell whose only run failed is there, saying so.
    assert c.loc[("ipc", "none", "custos"), "failed"] == 1 and c.loc[("ipc", "none", "custos"), "runs"] == 0


def test_summary_json_has_every_cell_the_subset_and_the_command(runs_file, tmp_path):
    df = matrix.load_runs(runs_file)
    out = tmp_path / "results"
    out.mkdir()
    s = matrix.write_all(df, {"custos": 500.0}, out, "bench/matrix/run.py", ["default", "custos"],
                         ["flood", "cpu", "ipc"])
    saved = json.loads((out / "summary.json").read_text())
    assert saved == json.loads(json.dumps(s))
    assert saved["command"] == "bench/matrix/run.py"
    cell = saved["cells"]["flood/custos/custos"]
    assert cell["median_runtime_ratio"] == pytest.approx(16 / 12)
    assert cell["ratio_to_consumer_bound"] == pytest.approx(1.0)
    assert cell["loss_pct"] == 0.0
    assert saved["runs_failed"] == 1 and saved["custos_invariant_holds"] is True
    for f in ("runs.parquet", "runs.csv", "summary.md", "runtime-custos.svg", "runtime-custos.png", "loss-custos.png"):
        assert (out / f).exists(), f
    import pandas as pd
    assert len(pd.read_parquet(out / "runs.parquet")) == 26
    md = (out / "summary.md").read_text()
    assert "| flood | 1.00× / 72.7 % | 1.33× / 0.0 % |" in md


def test_a_partial_matrix_says_so_and_chooses_no_subset(runs_file, tmp_path):
    df = matrix.load_runs(runs_file)
    s = matrix.write_all(df, {"custos": 500.0}, tmp_path, "bench/matrix/run.py", ["default", "custos"],
                         ["flood", "cpu", "ipc"], planned=40)
    assert s["complete"] is False and s["planned_runs"] == 40 and "subset" not in s
    assert "Partial: 26 of 40 planned runs" in (tmp_path / "summary.md").read_text()


def made_by(commit):
    return {"commit": commit, "dirty": False, "date": "2026-11-30T10:00:00+00:00", "cpu_model": "AMD EPYC"}


def test_each_run_carries_its_sitting_and_summary_json_the_commits_of_the_runs(runs_file, tmp_path):
    df = matrix.load_runs(runs_file)
    keys = list(df["key"])
    out = tmp_path / "results"
    out.mkdir()
    f = out / matrix.SITTINGS
    # The first sitting made half the runs and the drain rate; the second the
    # rest, and ran one of the first's again (the last to run a key made it).
    matrix.add_sitting(f, made_by("a" * 40), keys[:13], ["custos"])
    matrix.add_sitting(f, made_by("b" * 40), keys[12:20], [])
    sittings = matrix.load_sittings(f)
    assert [s["provenance"]["commit"][0] for s in sittings] == ["a", "b"] and sittings[1]["runs"] == keys[12:20]
    saved = matrix.write_all(df, {"custos": 500.0}, out, "bench/matrix/run.py", ["default", "custos"],
                             ["flood", "cpu", "ipc"], sittings=sittings)
    assert saved == json.loads((out / "summary.json").read_text())
    import pandas as pd
    runs = pd.read_parquet(out / "runs.parquet").set_index("key")
    assert runs.loc[keys[0], "sitting"] == 0 and runs.loc[keys[0], "commit"] == "a" * 40
    assert runs.loc[keys[12], "sitting"] == 1 and runs.loc[keys[12], "commit"] == "b" * 40
    # Runs no sitting names were made before sittings were recorded.
    assert pd.isna(runs.loc[keys[25], "sitting"]) and pd.isna(runs.loc[keys[25], "commit"])
    assert saved["made_by"]["commit"] == "several" and saved["made_by"]["commits"] == ["a" * 40, "b" * 40, None]
    assert [s["made"] for s in saved["sittings"]] == [
        ["12 runs (runs.parquet's rows with sitting 0)", "the drain rate of custos"],
        ["8 runs (runs.parquet's rows with sitting 1)"],
        ["6 runs made before sittings were recorded"]]
    # All made in one sitting: its commit, no "several".
    matrix.add_sitting(f, made_by("c" * 40), keys, ["custos"])
    saved = matrix.write_all(df, {"custos": 500.0}, out, "bench/matrix/run.py", ["default", "custos"],
                             ["flood", "cpu", "ipc"], sittings=matrix.load_sittings(f))
    assert saved["made_by"]["commits"] == ["c" * 40] and saved["made_by"]["commit"] == "c" * 40
    assert saved["made_by"]["cpu_model"] == "AMD EPYC"


def test_a_summary_without_sittings_names_no_commit(runs_file, tmp_path):
    """The runs on disk before sittings were recorded: the report's own commit is not theirs."""
    saved = matrix.write_all(matrix.load_runs(runs_file), {"custos": 500.0}, tmp_path, "bench/matrix/run.py",
                             ["default", "custos"], ["flood", "cpu", "ipc"])
    assert saved["made_by"]["commit"] is None and saved["made_by"]["written"]["commit"]
    (tmp_path / matrix.SITTINGS).write_text("[]")
    with pytest.raises(ValueError, match="holds no list of sittings"):
        matrix.load_sittings(tmp_path / matrix.SITTINGS)

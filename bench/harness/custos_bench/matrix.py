"""The evaluation matrix's analysis: every run of workload × collector ×
scheduler into one table (Parquet), the Figure-6-shaped tables of seed 000
(runtime normalized to the default scheduler, loss per cell, geometric
means), the consumer-bound limit, the benchmark subset, and summary.json.

The runs themselves are made by bench/matrix (run.py on the host, guest.py
in the VM)."""
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from . import plots, results, subset
from .provenance import sitting_entry

# OUT/sittings.json: each sitting of bench/matrix/run.py, where it ran
# (provenance) and the runs (keys) and drain rates (collectors) it made.
SITTINGS = "sittings.json"

RUN_COLUMNS = [
    "key", "workload", "collector", "scheduler", "rep", "order", "boot", "ok", "error", "quick", "ring_kb",
    "wall_s", "user_s", "sys_s", "work_s", "produced", "delivered", "dropped", "dropped_critical",
    "dropped_events", "unnumbered", "incomplete", "loss_records", "invariant_ok", "collector_cpu_s",
    "audit_wait_ms", "events_bytes", "features_only", "features_cpu_s", "sched_ext_state", "sched_stats", "started", "ended",
]


def loss_pct(produced, dropped, unnumbered):
    """Events that happened but were not recorded: refused by full buffers,
    or (Custos) never numbered because the kernel skipped the program."""
    if produced is None or (isinstance(produced, float) and math.isnan(produced)):
        return np.nan
    unnumbered = 0 if unnumbered is None or (isinstance(unnumbered, float) and math.isnan(unnumbered)) else unnumbered
    happened = produced + unnumbered
    return 100.0 * (dropped + unnumbered) / happened if happened else 0.0


def run_loss_pct(r):
    """loss_pct of one run's record (its produced, dropped, unnumbered)."""
    return loss_pct(r["produced"], r["dropped"], r["unnumbered"])


def load_runs(path: Path) -> pd.DataFrame:
    """runs.jsonl (one line per run, the last line of a key wins) as a table."""
    rows = {}
    for line in path.read_text().splitlines():
        if line.strip():
            r = json.loads(line)
            rows[r["key"]] = r
    df = pd.DataFrame([{c: r.get(c) for c in RUN_COLUMNS} for r in rows.values()], columns=RUN_COLUMNS)
    df["loss_pct"] = [loss_pct(p, d, u) for p, d, u in zip(df["produced"], df["dropped"], df["unnumbered"])]
    return df


def load_drains(path: Path) -> dict:
    """{collector: events/s} of the drain measurements (the last per collector wins)."""
    rates = {}
    if path.exists():
        for line in path.read_text().splitlines():
            if line.strip():
                r = json.loads(line)
                if "rate_eps" in r:
                    rates[r["collector"]] = r["rate_eps"]
    return rates


def load_sittings(path: Path) -> list:
    """The sittings recorded in OUT/sittings.json, oldest first ([] before any)."""
    if not path.exists():
        return []
    doc = json.loads(path.read_text())
    if not isinstance(doc, dict) or not isinstance(doc.get("sittings"), list):
        raise ValueError(f"{path} holds no list of sittings")
    return doc["sittings"]


def add_sitting(path: Path, made_by: dict, runs: list, drains: list):
    """Appends a sitting to OUT/sittings.json: its record and what it made."""
    sittings = load_sittings(path) + [{"provenance": made_by, "runs": list(runs), "drains": list(drains)}]
    path.write_text(json.dumps({"sittings": sittings}, indent=1) + "\n")


def with_sittings(df: pd.DataFrame, sittings: list) -> pd.DataFrame:
    """Adds to each run the sitting that made it (its index in sittings.json,
    the last one that ran its key) and that sitting's commit; <NA> and None
    for runs made before sittings were recorded."""
    made = {}
    for i, s in enumerate(sittings):
        for key in s.get("runs", []):
            made[key] = i
    df = df.copy()
    df["sitting"] = pd.array([made.get(k) for k in df["key"]], dtype="Int64")
    df["commit"] = [(sittings[made[k]]["provenance"] or {}).get("commit") if k in made else None for k in df["key"]]
    return df


def summary_sittings(df: pd.DataFrame, sittings: list, rates: dict) -> list:
    """summary.json's sittings: each one that made a run or a drain rate still
    in the results, with how many runs (runs.parquet's rows with its index)
    and which drain rates; the runs made before sittings were recorded as
    one more, without a record."""
    drained = {}
    for i, s in enumerate(sittings):
        for c in s.get("drains", []):
            drained[c] = i
    out = []
    for i, s in enumerate(sittings):
        n = int((df["sitting"] == i).sum())
        drains = sorted(c for c, j in drained.items() if j == i and c in rates)
        if n or drains:
            out.append(sitting_entry(s["provenance"], ([f"{n} runs (runs.parquet's rows with sitting {i})"] if n else [])
                                     + [f"the drain rate of {c}" for c in drains]))
    unknown = int(df["sitting"].isna().sum())
    undrained = sorted(c for c in rates if c not in drained)
    if unknown or undrained:
        out.append(sitting_entry(None, ([f"{unknown} runs made before sittings were recorded"] if unknown else [])
                                 + [f"the drain rate of {c}, made before sittings were recorded" for c in undrained]))
    return out


def with_limits(df: pd.DataFrame, rates: dict, rate_based=()) -> pd.DataFrame:
    """Adds the consumer-bound limit of each lossless run: on the VM's one
    CPU the workload's own work (its median runtime with no collector, under
    the default scheduler) and the consumer's work (the run's events at the
    collector's drain rate alone) must both be done, one after the other at
    best, so no scheduler can finish the run without loss sooner than their
    sum. `over_limit` is the run's wall time over that sum. Workloads whose
    tool runs for a fixed time (`rate_based`) have none."""
    df = df.copy()
    base = df[(df["collector"] == "none") & (df["scheduler"] == "default") & (df["ok"] == True)]  # noqa: E712
    alone = base.groupby("workload")["wall_s"].median()
    df["limit_s"] = df["workload"].map(alone) + df["produced"] / df["collector"].map(rates)
    lossless = (df["loss_pct"] == 0) & ~df["workload"].isin(list(rate_based))
    df["over_limit"] = np.where(lossless & (df["limit_s"] > 0), df["wall_s"] / df["limit_s"], np.nan)
    return df


def cells(df: pd.DataFrame) -> pd.DataFrame:
    """Medians per workload × collector × scheduler and the ratio to the
    default scheduler's median in the same workload and collector."""
    ok = df[df["ok"] == True]  # noqa: E712
    g = ok.groupby(["workload", "collector", "scheduler"])
    c = g.agg(runs=("key", "count"), work_s=("work_s", "median"), loss_pct=("loss_pct", "median"),
              loss_pct_max=("loss_pct", "max"), over_limit=("over_limit", "median")).reset_index()
    base = c[c["scheduler"] == "default"].set_index(["workload", "collector"])["work_s"]
    c["runtime_ratio"] = [w / base.get((wl, co), np.nan) for w, wl, co in zip(c["work_s"], c["workload"], c["collector"])]
    nocoll = c[(c["collector"] == "none") & (c["scheduler"] == "default")].set_index("workload")["work_s"]
    c["overhead_ratio"] = [w / nocoll.get(wl, np.nan) for w, wl in zip(c["work_s"], c["workload"])]
    failed = df[df["ok"] != True].groupby(["workload", "collector", "scheduler"]).size()  # noqa: E712
    # A cell whose every run failed still shows, with its failures.
    only_failed = [k for k in failed.index if k not in set(zip(c["workload"], c["collector"], c["scheduler"]))]
    if only_failed:
        c = pd.concat([c, pd.DataFrame([dict(workload=w, collector=co, scheduler=s, runs=0) for w, co, s in only_failed])],
                      ignore_index=True)
    c["failed"] = [int(failed.get((a, b, s), 0)) for a, b, s in zip(c["workload"], c["collector"], c["scheduler"])]
    return c


def figure6_table(c: pd.DataFrame, collector: str, schedulers: list, workloads: list) -> str:
    """Markdown: runtime normalized to the default scheduler and loss, per
    workload and scheduler, for one collector; the last row is the geometric
    mean of the ratios and the mean loss."""
    sub = c[c["collector"] == collector].set_index(["workload", "scheduler"])
    scheds = [s for s in schedulers if s in set(sub.index.get_level_values(1))]
    head = "| workload | " + " | ".join(scheds) + " |\n|---|" + "---|" * len(scheds) + "\n"
    rows = []
    for w in workloads:
        cellv = []
        for s in scheds:
            if (w, s) not in sub.index:
                cellv.append("—")
                continue
            r = sub.loc[(w, s)]
            if not r["runs"]:
                cellv.append(f"failed ({r['failed']})")
                continue
            # No default-scheduler run to divide by (yet): the loss alone.
            text = "?×" if math.isnan(r["runtime_ratio"]) else f"{r['runtime_ratio']:.2f}×"
            if collector != "none":
                text += f" / {r['loss_pct']:.1f} %"
            if r["failed"]:
                text += f" ({r['failed']} failed)"
            cellv.append(text)
        rows.append(f"| {w} | " + " | ".join(cellv) + " |")
    gm = []
    for s in scheds:
        col = sub.xs(s, level=1)
        try:
            text = f"{results.geomean(col['runtime_ratio']):.2f}×"
        except ValueError:  # no run of this column finished
            text = "?×"
        if collector != "none":
            text += f" / {col['loss_pct'].mean():.1f} %"
        gm.append(f"**{text}**")
    rows.append("| **geomean** | " + " | ".join(gm) + " |")
    return head + "\n".join(rows) + "\n"


def subset_features(c: pd.DataFrame, workloads: list):
    """Per workload: log overhead (runtime over the no-collector default run)
    and loss fraction in every collector × scheduler cell, the vector seed
    003 clusters on."""
    cols = sorted({(co, s) for co, s in zip(c["collector"], c["scheduler"])})
    idx = c.set_index(["workload", "collector", "scheduler"])
    rows, names = [], []
    for w in workloads:
        row = []
        for co, s in cols:
            if (w, co, s) not in idx.index:
                break
            r = idx.loc[(w, co, s)]
            row.append(math.log(r["overhead_ratio"]) if r["overhead_ratio"] > 0 else 0.0)
            if co != "none":
                row.append(0.0 if math.isnan(r["loss_pct"]) else r["loss_pct"] / 100.0)
        else:
            rows.append(row)
            names.append(w)
    return names, np.array(rows)


def summarize(df: pd.DataFrame, rates: dict, command: str, schedulers: list, workloads: list):
    """summary.json's content, and the subset's (names, standardized features)
    for its picture, or None without a subset."""
    c = cells(df)
    out = {"command": command, "runs": int(len(df)), "runs_failed": int((df["ok"] != True).sum()),  # noqa: E712
           "drain_rate_events_per_s": rates, "cells": {}}
    for r in c.itertuples():
        key = f"{r.workload}/{r.collector}/{r.scheduler}"
        out["cells"][key] = {
            "runs": int(r.runs), "failed": int(r.failed),
            "median_runtime_ratio": _num(r.runtime_ratio), "ratio_to_consumer_bound": _num(r.over_limit),
            "loss_pct": _num(r.loss_pct), "loss_pct_max": _num(r.loss_pct_max), "median_work_s": _num(r.work_s),
        }
    custos = df[(df["collector"] == "custos") & (df["ok"] == True)]  # noqa: E712
    out["custos_invariant_holds"] = bool(custos["invariant_ok"].all()) if len(custos) else None
    names, feats = subset_features(c, [w for w in workloads if w in set(c["workload"])])
    try:
        s = subset.choose(names, feats) if len(names) >= 3 else None
    except ValueError:  # the workloads do not differ in any feature
        s = None
    if s:
        out["subset"] = s["chosen"]["subset"]
        out["subset_rmse"] = s["chosen"]["accuracy_rmse"]
        out["subset_representativeness_rmse"] = s["chosen"]["representativeness_rmse"]
        out["subset_weights"] = dict(zip(s["chosen"]["subset"], s["chosen"]["weights"]))
        out["subset_sweep"] = [{k: v for k, v in x.items() if k != "weights"} for x in s["sweep"]]
    return out, ((names, s["standardized"]) if s else None)


def _num(v):
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)


def write_all(df: pd.DataFrame, rates: dict, out: Path, command: str, schedulers: list, workloads: list,
              rate_based=(), planned: int = None, sittings: list = ()) -> dict:
    """runs.parquet, runs.csv, summary.md, summary.json and the pictures.
    `planned`: the plan's size; fewer runs than that is a partial matrix,
    and the summary says so (and picks no subset from it). `sittings`:
    OUT/sittings.json's; each run carries its sitting and commit, and
    summary.json's made_by names the commits of the runs (not of this
    report). Returns summary.json's content."""
    df = with_limits(with_sittings(df, list(sittings)), rates, rate_based)
    df.to_parquet(out / "runs.parquet", index=False)
    df.drop(columns=["sched_stats"]).to_csv(out / "runs.csv", index=False)
    summary, subset_inputs = summarize(df, rates, command, schedulers, workloads)
    summary["planned_runs"] = planned if planned is not None else int(len(df))
    summary["complete"] = bool(len(df) >= summary["planned_runs"])
    if not summary["complete"]:
        for k in [k for k in summary if k.startswith("subset")]:
            del summary[k]
    summary = results.write_results(out / "summary.json", summary, ["command", "runs", "runs_failed"],
                                    sittings=summary_sittings(df, list(sittings), rates))
    c = cells(df)
    present = [w for w in workloads if w in set(c["workload"])]
    md = ["# Evaluation matrix", "", f"Command: `{command}`", ""]
    if not summary["complete"]:
        md += [f"**Partial: {len(df)} of {summary['planned_runs']} planned runs.** The same command continues "
               "the matrix; cells may have fewer repetitions than planned, and no subset is chosen yet.", ""]
    md += [
          f"{summary['runs']} runs ({summary['runs_failed']} failed); every run is in `runs.parquet` "
          "(and `runs.csv`).", ""]
    if rates:
        md += ["Drain rate of each collector alone (events/s; the consumer-bound limit is events ÷ this rate): "
               + ", ".join(f"{k} {v:,.0f}" for k, v in sorted(rates.items())), ""]
    for co in [x for x in ["none", "custos", "bpftrace", "auditd"] if x in set(c["collector"])]:
        what = "runtime ratio to the default scheduler" + (" / events lost" if co != "none" else "")
        md += [f"## Collector: {co} ({what})", "", figure6_table(c, co, schedulers, present)]
        groups = {w: {s: v for s, v in zip(g["scheduler"], g["runtime_ratio"])}
                  for w, g in c[c["collector"] == co].groupby("workload")}
        plots.grouped_bars({w: groups[w] for w in present if w in groups}, f"{co}: runtime / default scheduler",
                           "ratio", out / f"runtime-{co}", order=schedulers)
        if co != "none":
            loss = {w: {s: v for s, v in zip(g["scheduler"], g["loss_pct"])}
                    for w, g in c[c["collector"] == co].groupby("workload")}
            plots.grouped_bars({w: loss[w] for w in present if w in loss}, f"{co}: events lost (%)", "% lost",
                               out / f"loss-{co}", order=schedulers)
    lim = c[c["over_limit"].notna()]
    if len(lim):
        md += ["## Against the consumer-bound limit", "",
               "Median wall time of lossless runs over the consumer-bound limit: the workload's own runtime "
               "(no collector) plus its events at the collector's drain rate, both on the VM's one CPU "
               "(1.0 = as fast as any scheduler could finish without loss).", "",
               "| workload | collector | scheduler | × limit |", "|---|---|---|---|"]
        md += [f"| {r.workload} | {r.collector} | {r.scheduler} | {r.over_limit:.2f} |" for r in lim.itertuples()]
        md.append("")
    if "subset" in summary:
        plots.subset_picture(*subset_inputs, summary["subset"], "benchmark subset", out / "subset")
        md += ["## Benchmark subset (seed 003)", "", "![subset](subset.svg)", "",
               f"Chosen: {', '.join(summary['subset'])} (accuracy RMSE {summary['subset_rmse']:.3f}, "
               f"representativeness RMSE {summary['subset_representativeness_rmse']:.3f}).", "",
               "| k | subset | accuracy RMSE | representativeness RMSE |", "|---|---|---|---|"]
        md += [f"| {s['k']} | {', '.join(s['subset'])} | {s['accuracy_rmse']:.3f} | {s['representativeness_rmse']:.3f} |"
               for s in summary["subset_sweep"]]
        md.append("")
    (out / "summary.md").write_text("\n".join(md))
    return summary

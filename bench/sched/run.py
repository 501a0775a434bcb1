#!/usr/bin/env python3
"""Scheduler benchmark: Custos against the kernel's default scheduler and
scx_bpfland, in one VM session, as ratios.

    bench/sched/run.py            # full run (about 15 minutes under emulation, plus the series)
    bench/sched/run.py --quick    # small sizes, to check the pipeline
    bench/sched/run.py --series-only   # only the repeated super-producer series,
                                       # merged into the existing results.json

The repeated super-producer series (issue 16): 10 runs each at 16 and 64
workers, default scheduler and Custos alternating, in one VM session (one
vCPU); every run's figures and the worst of each scheduler go to results.json.

Writes bench/sched/results.json, a table on stdout, and SVG/PNG pictures in
bench/sched/. results.json lists the sittings that made its parts (the
workloads, the super producer, the series: `--series-only` makes the last
again) with where each ran, and its made_by names their commits. Needs `make build` and the scx_bpfland peer
(`cargo install --locked --root .tools/cargo scx_bpfland --version 1.1.4`,
which this script runs when it is missing).
"""
import argparse
import collections
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "harness"))
from custos_bench import matrix, plots, provenance, results, vm  # noqa: E402
from custos_bench.paths import CUSTOS, ROOT, TOOLS_BIN, WORKLOAD, bpf_clang  # noqa: E402

HERE = Path(__file__).resolve().parent
SERIES_REQUIRED = ["superproducer_runs", "custos_runs_with_loss", "custos_max_loss_pct", "default_min_loss_pct"]
REQUIRED = SERIES_REQUIRED + [
    "loss_pct_default", "loss_pct_custos", "superproducer_runtime_ratio", "pipe_latency_ratio",
    "unix_latency_ratio", "forkexec_latency_ratio", "cpu_job_runtime_ratio",
    "stress_seconds_without_stall", "worst_case_max_measured_over_bound", "command",
]
BPFLAND_VERSION = "1.1.4"
# What a sitting makes of results.json: --series-only makes the series again.
PARTS = ["latency and CPU workloads", "super producer", "series"]
SERIES = ["series"]


def sittings_after(previous: dict, made_by: dict, made: list) -> list:
    """results.json's sittings once a sitting made `made`: the previous
    file's, those parts moved to the new sitting. A file from before
    sittings were kept was made whole by its made_by (None when it had none)."""
    old = previous.get("sittings") or [provenance.sitting_entry(previous.get("made_by"), PARTS)]
    return provenance.replace_made(old, made, made_by)


def ensure_bpfland():
    if (TOOLS_BIN / "scx_bpfland").exists():
        return
    print("bench/sched: building the scx_bpfland peer from crates.io (once, several minutes)", file=sys.stderr)
    env = dict(os.environ, BPF_CLANG=os.environ.get("BPF_CLANG", bpf_clang()))
    subprocess.run(["cargo", "install", "--locked", "--root", str(TOOLS_BIN.parent), "scx_bpfland",
                    "--version", BPFLAND_VERSION], check=True, env=env)


def parse(lines):
    """{scheduler: {phase: [result, ...]}} from the guest's JSON lines."""
    out = collections.defaultdict(lambda: collections.defaultdict(list))
    for line in lines:
        if line.strip():
            rec = json.loads(line)
            out[rec["scheduler"]][rec["phase"]].append(rec["result"])
    return out


def run_series(out, workers, runs, files, ring_kb, sitting):
    """The repeated super producer: `runs` runs of each scheduler per worker
    count, default and Custos alternating, all in one VM session on one vCPU."""
    sp_out = out / "series"
    env = dict(SP_WORKERS=" ".join(map(str, workers)), SP_RUNS=runs, SP_FILES=files, SP_RING_KB=ring_kb,
               SP_OUT=sp_out, SP_SCHEDULERS="default custos", SP_ORDER="interleaved",
               SP_KEEP_EVENTS=os.environ.get("SP_KEEP_EVENTS", "0"), SP_TRACE=os.environ.get("SP_TRACE", "0"))
    script = "".join(f"export {k}={json.dumps(str(v))}\n" for k, v in env.items())
    script += f"exec bash {ROOT / 'scripts' / 'superproducer-guest.sh'}\n"
    t0 = time.time()
    try:
        print(vm.run_script(script, sp_out, timeout_s=3 * 3600, cpus=1, sitting=sitting), end="")
    except vm.VmFailed as e:
        # A run that failed is in results.jsonl without figures; the summary says so.
        print(f"bench/sched: {e}", file=sys.stderr)
    rows = [json.loads(l) for l in (sp_out / "results.jsonl").read_text().splitlines() if l.strip()]
    return summarize_series(rows, dict(env, SP_OUT=str(sp_out.relative_to(ROOT))), time.time() - t0)


def summarize_series(rows, params, wall_s):
    per_run = []
    for r in rows:
        ok = r["produced"] is not None and r["unnumbered"] is not None
        per_run.append({
            "scheduler": r["scheduler"], "workers": r["workers"], "run": r["run"],
            "produced": r["produced"], "delivered": r["delivered"], "dropped": r["dropped"],
            "unnumbered": r["unnumbered"], "loss_pct": matrix.run_loss_pct(r) if ok else None,
            "runtime_ms": r["runtime_ms"], "marker_delivered": r["marker_delivered"],
            "sched_ext_state": r["sched_ext_state"],
        })
    runs = {s: [r for r in per_run if r["scheduler"] == s] for s in ("default", "custos")}
    if not runs["custos"] or len(runs["custos"]) != len(runs["default"]):
        raise ValueError(f"series incomplete: {len(runs['default'])} default, {len(runs['custos'])} custos runs")
    # A run without figures (the collector printed no summary) counts as a run with loss.
    custos_loss = [r["loss_pct"] if r["loss_pct"] is not None else math.inf for r in runs["custos"]]
    by_workers = {}
    for w in sorted({r["workers"] for r in per_run}):
        c = [r for r in runs["custos"] if r["workers"] == w]
        d = [r for r in runs["default"] if r["workers"] == w]
        by_workers[str(w)] = {
            "runs": len(c),
            "custos_runs_with_loss": sum(1 for r in c if r["loss_pct"] != 0),
            "custos_max_loss_pct": max(r["loss_pct"] if r["loss_pct"] is not None else math.inf for r in c),
            "custos_markers_delivered": sum(1 for r in c if r["marker_delivered"]),
            "default_min_loss_pct": min(r["loss_pct"] or 0.0 for r in d),
            "default_max_loss_pct": max(r["loss_pct"] or 0.0 for r in d),
            "default_runs_without_loss": sum(1 for r in d if not r["loss_pct"]),
            "default_markers_delivered": sum(1 for r in d if r["marker_delivered"]),
            "custos_median_runtime_ms": results.median([r["runtime_ms"] for r in c]),
            "default_median_runtime_ms": results.median([r["runtime_ms"] for r in d]),
        }
    return {
        # runs per scheduler (each worker count, both schedulers alternating)
        "superproducer_runs": len(runs["custos"]),
        "custos_runs_with_loss": sum(1 for v in custos_loss if v != 0),
        "custos_max_loss_pct": max(custos_loss),
        "custos_runs_marker_missing": sum(1 for r in runs["custos"] if not r["marker_delivered"]),
        "custos_runs_detached": sum(1 for r in runs["custos"] if r["sched_ext_state"] != "enabled"),
        "default_min_loss_pct": min(r["loss_pct"] or 0.0 for r in runs["default"]),
        "default_runs_without_loss": sum(1 for r in runs["default"] if not r["loss_pct"]),
        "superproducer_series": {
            "by_workers": by_workers, "per_run": per_run, "wall_seconds": round(wall_s, 1),
            "parameters": params, "vm": {"cpus": 1, "memory": "2G", "accelerator": "QEMU emulation, one thread"},
        },
    }


def print_series(res):
    s = res["superproducer_series"]
    print(results.table([(w, v["runs"], v["default_min_loss_pct"], v["default_max_loss_pct"], v["custos_runs_with_loss"],
                          v["custos_max_loss_pct"], v["custos_markers_delivered"]) for w, v in s["by_workers"].items()],
                        ["workers", "runs", "default min loss %", "default max loss %", "custos runs with loss",
                         "custos max loss %", "custos markers"]))


def summarize(data, superproducer):
    """Medians per scheduler and phase: the figures the ratios are made of."""
    s = {}
    for sched, phases in data.items():
        s[sched] = {
            "pipe_rtt_ns": results.median([r["round_trip"]["mean_ns"] for r in phases["pipe"]]),
            "unix_rtt_ns": results.median([r["round_trip"]["mean_ns"] for r in phases["unix"]]),
            "forkexec_ns": results.median([r["latency"]["mean_ns"] for r in phases["forkexec"]]),
            "cpu_job_ns": results.median([r["wall_ns"] for r in phases["cpu"]]),
        }
    for r in superproducer:
        if r["produced"] is None or r["unnumbered"] is None:
            raise ValueError(f"{r['scheduler']}: the collector printed no summary "
                             f"(see superproducer/{r['scheduler']}.collect.log)")
        s.setdefault(r["scheduler"], {}).update({
            "sp_runtime_ns": r["runtime_ms"] * 1_000_000, "sp_produced": r["produced"],
            "sp_delivered": r["delivered"], "sp_dropped": r["dropped"], "sp_unnumbered": r["unnumbered"],
            "sp_loss_pct": matrix.run_loss_pct(r), "sp_marker_delivered": r["marker_delivered"],
            "sp_sched_ext_state": r["sched_ext_state"],
        })
    return s


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small sizes, to check the pipeline")
    ap.add_argument("--schedulers", default="default custos bpfland")
    ap.add_argument("--series-only", action="store_true",
                    help="only the repeated super-producer series, merged into the existing results.json")
    ap.add_argument("--series-runs", type=int, default=10, help="runs per scheduler and worker count")
    ap.add_argument("--series-workers", default="16,64")
    ap.add_argument("--series-files", type=int, default=2000, help="files each worker reads")
    ap.add_argument("--worst-case", type=Path, default=ROOT / "target" / "tmp" / "worst_case.json",
                    help="measured/bound ratios written by the scheduler's worst-case VM test "
                         "(seed 000 Table 7; `cargo test --release -p custos-sched --test vm`)")
    args = ap.parse_args()

    params = dict(REPS=3, PINGPONG_N=20000, FORKEXEC_N=300, CPU_UNITS=300, SP_WORKERS=16, SP_FILES=4000,
                  SP_RING_KB=64, STRESS_SECONDS=60)
    if args.quick:
        params.update(REPS=1, PINGPONG_N=2000, FORKEXEC_N=30, CPU_UNITS=30, SP_FILES=3000, STRESS_SECONDS=5)
    if "bpfland" in args.schedulers.split() and not args.series_only:
        ensure_bpfland()

    # The binaries the guests run: ours, and the peer when it is compared.
    binaries = [CUSTOS, WORKLOAD]
    if "bpfland" in args.schedulers.split() and not args.series_only:
        binaries.append(TOOLS_BIN / "scx_bpfland")
    sitting = provenance.Sitting(binaries)
    out = HERE / "out" / time.strftime("%Y%m%d-%H%M%S")
    out.mkdir(parents=True)
    workers = [int(w) for w in args.series_workers.split(",")]
    series_runs = 2 if args.quick else args.series_runs
    if args.series_only:
        series = run_series(out, workers, series_runs, args.series_files, params["SP_RING_KB"], sitting)
        res = json.loads((HERE / "results.json").read_text())
        sittings = sittings_after(res, sitting.made_by(), SERIES)
        res.update(series)
        res["series_command"] = "bench/sched/run.py --series-only"
        results.write_results(HERE / "results.json", res, REQUIRED, sittings=sittings)
        print_series(res)
        return
    env = "".join(f"export {k}={json.dumps(str(v))}\n" for k, v in
                  dict(params, OUT=out, ROOT=ROOT, SCHEDULERS=args.schedulers).items())
    script = env + (HERE / "guest.sh").read_text()
    t0 = time.time()
    vm.run_script(script, out, timeout_s=7200, sitting=sitting)
    data = parse((out / "results.jsonl").read_text().splitlines())
    # The super producer on one vCPU, every scheduler in one boot: QEMU's
    # single-threaded emulation runs one vCPU at a time for up to 100 ms, so
    # on two the consumer's vCPU would stand still whatever the guest decides.
    sp_out = out / "superproducer"
    sp_env = {k: params[k] for k in ("SP_WORKERS", "SP_FILES", "SP_RING_KB")}
    sp_env.update(SP_OUT=sp_out, SP_SCHEDULERS=args.schedulers)
    sp_script = "".join(f"export {k}={json.dumps(str(v))}\n" for k, v in sp_env.items())
    sp_script += f"exec bash {ROOT / 'scripts' / 'superproducer-guest.sh'}\n"
    print(vm.run_script(sp_script, sp_out, timeout_s=3600, cpus=1, sitting=sitting), end="")
    superproducer = [json.loads(l) for l in (sp_out / "results.jsonl").read_text().splitlines() if l.strip()]
    s = summarize(data, superproducer)
    d, c = s["default"], s["custos"]
    series = run_series(out, workers, series_runs, args.series_files, params["SP_RING_KB"], sitting)

    res = {
        "pipe_latency_ratio": results.ratio(c["pipe_rtt_ns"], d["pipe_rtt_ns"]),
        "unix_latency_ratio": results.ratio(c["unix_rtt_ns"], d["unix_rtt_ns"]),
        "forkexec_latency_ratio": results.ratio(c["forkexec_ns"], d["forkexec_ns"]),
        "cpu_job_runtime_ratio": results.ratio(c["cpu_job_ns"], d["cpu_job_ns"]),
        "superproducer_runtime_ratio": results.ratio(c["sp_runtime_ns"], d["sp_runtime_ns"]),
        "loss_pct_default": d["sp_loss_pct"],
        "loss_pct_custos": c["sp_loss_pct"],
        "stress_seconds_without_stall": float(data["custos"]["stress"][-1]["seconds_enabled"]) if data["custos"].get("stress") else 0.0,
        "per_scheduler": s,
        "parameters": params,
        "vm": {"cpus": 2, "superproducer_cpus": 1, "memory": "2G", "accelerator": "QEMU emulation, one thread"},
        "wall_seconds": round(time.time() - t0, 1),
        "raw": str(out.relative_to(ROOT)),
        "command": "bench/sched/run.py" + (" --quick" if args.quick else ""),
    }
    res.update(series)
    if "bpfland" in s:
        b = s["bpfland"]
        res["bpfland"] = {k: results.ratio(b[m], d[m]) for k, m in [
            ("pipe_latency_ratio", "pipe_rtt_ns"), ("unix_latency_ratio", "unix_rtt_ns"),
            ("forkexec_latency_ratio", "forkexec_ns"), ("cpu_job_runtime_ratio", "cpu_job_ns"),
            ("superproducer_runtime_ratio", "sp_runtime_ns")]}
        res["loss_pct_bpfland"] = b["sp_loss_pct"]
    if args.worst_case.exists():
        wc = json.loads(args.worst_case.read_text())
        res["worst_case"] = wc
        res["worst_case_max_measured_over_bound"] = max(e["measured_over_bound"] for e in wc["experiments"])

    results.write_results(HERE / "results.json", res, REQUIRED,
                          sittings=[provenance.sitting_entry(sitting.made_by(), PARTS)])
    ratio_keys = ["pipe_latency_ratio", "unix_latency_ratio", "forkexec_latency_ratio", "cpu_job_runtime_ratio",
                  "superproducer_runtime_ratio"]
    print(results.table([(k, res[k], res.get("bpfland", {}).get(k, "")) for k in ratio_keys],
                        ["metric (vs default)", "custos", "bpfland"]))
    print_series(res)
    print(results.table([(n, v["sp_produced"], v["sp_delivered"], v["sp_dropped"], v["sp_unnumbered"], v["sp_loss_pct"],
                          v["sp_runtime_ns"] / 1e9) for n, v in s.items()],
                        ["super producer", "produced", "delivered", "dropped", "unnumbered", "loss %", "runtime s"]))
    plots.ratio_bars({k.replace("_ratio", ""): res[k] for k in ratio_keys}, "Custos vs default scheduler (VM)",
                     HERE / "ratios")
    plots.grouped_bars({"event loss": {n: v["sp_loss_pct"] for n, v in s.items()}},
                       "Super producer: events lost (dropped + unnumbered)", "% of events", HERE / "superproducer_loss")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""The GRU placement policy (seed 002) against the kernel's default scheduler
and Custos's own placement, in one VM session with two vCPUs.

    bench/placement/run.py --train   # record the default scheduler's placements, train, ship the model
    bench/placement/run.py           # the comparison: results.json, ratios.svg/.png
    bench/placement/run.py --quick   # small sizes, to check the pipeline
    bench/placement/run.py --speed   # the model's inference time here and in the VM: inference.json

See README.md beside this file for what runs and how to read it. Each VM
run keeps the record of its sitting beside its files (out/<time>/sitting.json);
results.json lists them and its made_by names their commits, so a summary
made again with --from names the commit that ran it.
"""
import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "harness"))
from custos_bench import matrix, plots, provenance, results, vm  # noqa: E402
from custos_bench.paths import CUSTOS, ROOT, WORKLOAD  # noqa: E402

HERE = Path(__file__).resolve().parent
SHIPPED_MODEL = ROOT / "crates" / "custos-policy" / "models" / "placement-gru.onnx"
CONFIGS = ["default", "custos", "gru"]
REQUIRED = ["inference_us_median", "inference_us_p99", "prediction_used_pct", "fallback_pct",
            "sysbench1_events_ratio", "sysbench8_events_ratio", "io_context_switch_ratio",
            "loss_pct_superproducer_gru", "command"]


def parse(lines):
    """results.jsonl -> {config: {load: [result, ...]}}."""
    data = {}
    for raw in lines:
        if raw.strip():
            rec = json.loads(raw)
            data.setdefault(rec["config"], {}).setdefault(rec["load"], []).append(rec["result"])
    return data


def pairs_mean_rtt_ns(result):
    return results.median([p["round_trip"]["mean_ns"] for p in result["pairs_results"]])


def summarize(data):
    """Medians per configuration of every figure the comparison reports."""
    out = {}
    for config, loads in data.items():
        med = lambda load, f: results.median([f(r) for r in loads.get(load, [])]) if loads.get(load) else None
        out[config] = {
            "sysbench1_events_per_s": med("cpu1", lambda r: r["events_per_s"]),
            "sysbench1_latency_ms_median": med("cpu1", lambda r: r["latency_ms_median"]),
            "sysbench1_latency_ms_p95": med("cpu1", lambda r: r["latency_ms_p95"]),
            "sysbench8_events_per_s": med("cpu8", lambda r: r["events_per_s"]),
            "sysbench8_latency_ms_median": med("cpu8", lambda r: r["latency_ms_median"]),
            "sysbench8_latency_ms_p95": med("cpu8", lambda r: r["latency_ms_p95"]),
            "sysbench8_latency_ms_max": med("cpu8", lambda r: r["latency_ms_max"]),
            "mixed_events_per_s": med("mixed", lambda r: r["cpu"]["events_per_s"]),
            "mixed_latency_ms_p95": med("mixed", lambda r: r["cpu"]["latency_ms_p95"]),
            "mixed_rtt_ns": med("mixed", pairs_mean_rtt_ns),
            "io_wall_ms": med("io", lambda r: r["wall_ms"]),
            "io_context_switches": med("io", lambda r: r["context_switches"]),
            "io_rtt_ns": med("io", pairs_mean_rtt_ns),
        }
    return out


def placement_stats(stats_json: Path):
    """The GRU run's placement counters (custos sched --stats-json)."""
    s = json.loads(stats_json.read_text())
    p = {k: v for k, v in s.items() if k.startswith("placement_")}
    decided = p["placement_used"] + p["placement_fallbacks"] + p["placement_stale"] + \
        p["placement_rejected_cpumask"] + p.get("placement_busy", 0)
    if decided == 0:
        raise ValueError(f"{stats_json}: the GRU run placed no task through the placement layer")
    run = p.get("placement_predictions", 0) + p.get("placement_prediction_errors", 0)
    return {
        "inference_us_median": p["placement_inference_p50_us"],
        "inference_us_p99": p["placement_inference_p99_us"],
        "inference_us_per_window": p.get("placement_inference_ns", 0) / 1000.0 / run if run else None,
        "predictions": p["placement_predictions"],
        "prediction_used_pct": 100.0 * p["placement_used"] / decided,
        "fallback_pct": 100.0 * (decided - p["placement_used"]) / decided,
        "counters": p,
    }


def superproducer(path: Path):
    recs = [json.loads(l) for l in path.read_text().splitlines() if l.strip()]
    by = {}
    for r in recs:
        by.setdefault(r["scheduler"], []).append(r)
    return {k: {"runs": len(v), "max_loss_pct": max(matrix.run_loss_pct(r) for r in v),
                "marker_delivered": all(r["marker_delivered"] for r in v)} for k, v in by.items()}


def guest_script(env):
    """guest.sh with its parameters exported before it."""
    return "".join(f"export {k}={json.dumps(str(v))}\n" for k, v in env.items()) + (HERE / "guest.sh").read_text()


def train(args, out: Path):
    env = dict(OUT=out, ROOT=ROOT, MODE="record", SECONDS_PER_LOAD=args.seconds, PINGPONG_N=args.pingpong_n,
               REPS=args.reps)
    script = guest_script(env)
    print(f"bench/placement: recording the default scheduler's placements in the VM (2 vCPUs) into {out}",
          file=sys.stderr)
    vm.run_script(script, out, timeout_s=3600)
    model = out / "placement-gru.onnx"
    subprocess.run([str(CUSTOS), "placement", "train", "--recording", str(out / "placements.jsonl"),
                    "--out", str(model), "--cpus", "2"], check=True)
    shutil.copyfile(model, SHIPPED_MODEL)
    print(f"bench/placement: the shipped model is now {SHIPPED_MODEL.relative_to(ROOT)}", file=sys.stderr)


def speed(out: Path):
    """`custos placement speed` for the shipped model here and in the VM under
    both guest CPUs: what the agent's budget buys where it runs."""
    sitting = provenance.Sitting([CUSTOS])
    cmd = [str(CUSTOS), "placement", "speed", "--cpus", "2", "--json"]
    rows = {"native": json.loads(subprocess.run(cmd + ["--windows", "4000"], check=True, stdout=subprocess.PIPE,
                                                text=True).stdout)}
    for model in ("max", "qemu64"):
        print(f"bench/placement: timing the model in the VM, guest CPU {model}", file=sys.stderr)
        script = " ".join(cmd + ["--windows", "640"]) + "\n"
        rows[f"vm_{model}"] = json.loads(vm.run_script(script, out / f"speed-{model}", timeout_s=1800, cpu_model=model,
                                                       sitting=sitting))
    res = {"command": "bench/placement/run.py --speed", "model": str(SHIPPED_MODEL.relative_to(ROOT)),
           "where": {"native": "this host", "vm_max": "the VM, QEMU emulation, guest CPU max (AVX2, FMA)",
                     "vm_qemu64": "the VM, QEMU emulation, guest CPU qemu64 (SSE2)"},
           "rows": rows}
    results.write_results(HERE / "inference.json", res, ["command"], made_by=sitting.made_by())
    print(results.table([(where, r["batch"], r["us_per_call_median"], r["us_per_window"])
                         for where, rs in rows.items() for r in rs],
                        ["where", "batch", "us/call (median)", "us/window"]))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--train", action="store_true", help="record placements in the VM and train the shipped model")
    ap.add_argument("--quick", action="store_true", help="small sizes, to check the pipeline")
    ap.add_argument("--speed", action="store_true", help="time the shipped model natively and in the VM (inference.json)")
    ap.add_argument("--model", type=Path, help="model for the gru configuration (default: the shipped one)")
    ap.add_argument("--from", dest="from_dir", type=Path, help="summarize an existing out/<time> run again")
    ap.add_argument("--gru-args", default="", help="more `custos sched` options for the gru configuration "
                    "(e.g. --placement-cpu-pct 50)")
    ap.add_argument("--sp-cpu-model", default="max",
                    help="the super producer also runs in a second boot with this guest CPU (default max, the VM's "
                    "usual, where the consumer protection was established); 'none' skips it")
    ap.add_argument("--cpu-model", default="qemu64",
                    help="the guest's QEMU CPU model (default qemu64: without AVX2/FMA, which QEMU emulates "
                    "slowly and tract would pick; 'max' is the VM's usual)")
    args = ap.parse_args()
    args.seconds, args.pingpong_n, args.reps = (5, 2000, 1) if args.quick else (20, 20000, 3)
    out = args.from_dir.resolve() if args.from_dir else HERE / "out" / time.strftime("%Y%m%d-%H%M%S")
    out.mkdir(parents=True, exist_ok=True)
    if args.train:
        train(args, out)
        return
    if args.speed:
        speed(out)
        return

    params = dict(SECONDS_PER_LOAD=args.seconds, PINGPONG_N=args.pingpong_n, REPS=args.reps,
                  SP_WORKERS=16, SP_FILES=2000 if args.quick else 4000, SP_RING_KB=64,
                  SP_RUNS=1 if args.quick else 3)
    env = dict(params, OUT=out, ROOT=ROOT, MODE="bench", CONFIGS=" ".join(CONFIGS), GRU_ARGS=args.gru_args)
    if args.model:
        env["MODEL"] = args.model.resolve()
    script = guest_script(env)
    t0 = time.time()
    if args.from_dir:
        # Runs before --cpu-model existed booted QEMU's default under emulation.
        args.cpu_model = (out / "cpu-model").read_text().strip() if (out / "cpu-model").exists() else "max"
    # The super producer again on a second guest CPU, in a boot of its own
    # (also added to an existing run given with --from).
    guests = {args.cpu_model: out}
    second = None
    if args.sp_cpu_model not in ("none", args.cpu_model):
        guests[args.sp_cpu_model] = out / f"guest-{args.sp_cpu_model}"
        if not (guests[args.sp_cpu_model] / "sp-gru" / "results.jsonl").exists():
            second = guests[args.sp_cpu_model]
    if not args.from_dir or second:
        # The binaries the guests run, and a model given in place of the shipped one (in git).
        sitting = provenance.Sitting([CUSTOS, WORKLOAD] + ([args.model] if args.model else []))
    if not args.from_dir:
        (out / "cpu-model").write_text(args.cpu_model + "\n")
        try:
            vm.run_script(script, out, timeout_s=3 * 3600, cpu_model=args.cpu_model, sitting=sitting)
        finally:
            provenance.keep(out, sitting.made_by())
    if second:
        env2 = dict(env, OUT=second, CONFIGS="")
        try:
            vm.run_script(guest_script(env2), second, timeout_s=3600, cpu_model=args.sp_cpu_model, sitting=sitting)
        finally:
            provenance.keep(second, sitting.made_by())
    s = summarize(parse((out / "results.jsonl").read_text().splitlines()))
    d, c, g = s["default"], s["custos"], s["gru"]
    stats = placement_stats(out / "stats-gru.json")
    sp = {guest: {"base": superproducer(d_ / "sp-custos" / "results.jsonl"),
                  "gru": superproducer(d_ / "sp-gru" / "results.jsonl")} for guest, d_ in guests.items()}

    def ratios(x):
        return {
            "sysbench1_events_ratio": results.ratio(x["sysbench1_events_per_s"], d["sysbench1_events_per_s"]),
            "sysbench1_latency_p95_ratio": results.ratio(x["sysbench1_latency_ms_p95"], d["sysbench1_latency_ms_p95"]),
            "sysbench8_events_ratio": results.ratio(x["sysbench8_events_per_s"], d["sysbench8_events_per_s"]),
            "sysbench8_latency_p95_ratio": results.ratio(x["sysbench8_latency_ms_p95"], d["sysbench8_latency_ms_p95"]),
            "mixed_events_ratio": results.ratio(x["mixed_events_per_s"], d["mixed_events_per_s"]),
            "mixed_rtt_ratio": results.ratio(x["mixed_rtt_ns"], d["mixed_rtt_ns"]),
            "io_context_switch_ratio": results.ratio(x["io_context_switches"], d["io_context_switches"]),
            "io_runtime_ratio": results.ratio(x["io_wall_ms"], d["io_wall_ms"]),
        }

    custos_r, gru_r = ratios(c), ratios(g)
    res = dict(gru_r)
    res.update({k: stats[k] for k in ("inference_us_median", "inference_us_p99", "inference_us_per_window",
                                      "prediction_used_pct", "fallback_pct", "predictions")})
    res.update({
        "guest_cpu_models": list(guests),
        "custos_placement_vs_default": custos_r,
        "gru_vs_custos_placement": {k: results.ratio(v, custos_r[k]) for k, v in gru_r.items()},
        # The worst run on either guest CPU.
        "loss_pct_superproducer_gru": max(x["gru"]["custos"]["max_loss_pct"] for x in sp.values()),
        "loss_pct_superproducer_custos": max(x["base"]["custos"]["max_loss_pct"] for x in sp.values()),
        "loss_pct_superproducer_default": max(x["base"]["default"]["max_loss_pct"] for x in sp.values()),
        "superproducer": {guest: {"custos": x["base"]["custos"], "gru": x["gru"]["custos"],
                                  "default": x["base"]["default"]} for guest, x in sp.items()},
        "placement_counters": stats["counters"],
        "per_config": s,
        "parameters": params,
        "model": str(args.model) if args.model else str(SHIPPED_MODEL.relative_to(ROOT)),
        "vm": {"cpus": 2, "memory": "2G", "accelerator": "QEMU emulation, one thread", "cpu_model": args.cpu_model},
        "wall_seconds": round(time.time() - t0, 1),
        "raw": str(out.relative_to(ROOT)),
        "gru_args": args.gru_args,
        "command": "bench/placement/run.py" + (" --quick" if args.quick else "")
        + (f" --gru-args '{args.gru_args}'" if args.gru_args else "")
        + (f" --cpu-model {args.cpu_model}" if args.cpu_model != "qemu64" else "")
        + (f" --sp-cpu-model {args.sp_cpu_model}" if args.sp_cpu_model != "max" else ""),
    })
    # Each boot's sitting (one, or an earlier one's where --from reused its runs).
    sittings = [provenance.sitting_entry(provenance.kept(d_), [f"{'the comparison and ' if d_ == out else ''}"
                                                              f"the super producer, guest CPU {guest}"])
                for guest, d_ in guests.items()]
    results.write_results(HERE / "results.json", res, REQUIRED, sittings=sittings)
    keys = list(gru_r)
    print(results.table([(k, res["custos_placement_vs_default"][k], res[k]) for k in keys],
                        ["metric (vs default)", "custos placement", "gru placement"]))
    print(results.table([(k, res[k]) for k in REQUIRED if k != "command"], ["figure", "value"]))
    plots.grouped_bars({k.replace("_ratio", ""): {"custos placement": res["custos_placement_vs_default"][k],
                                                  "gru placement": res[k]} for k in keys},
                       "Placement vs the default scheduler (VM, 2 vCPUs)", "ratio to default", HERE / "ratios")


if __name__ == "__main__":
    main()

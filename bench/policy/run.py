#!/usr/bin/env python3
"""The learned policy's benchmark (issue 10): what one decision costs in the
kernel, and whether the learned policy loses less than the static one.

    bench/policy/run.py                          # the shipped model, full run
    bench/policy/run.py --model FILE --quick     # one worker count, no unseen

Cost, on the host kernel: the network's forward pass, JIT-compiled, timed
through BPF_PROG_TEST_RUN (`custos train --inference-cost`) for the model and
for hidden layers of 16..256 units. In the VM (one vCPU,
bench/policy/eval-guest.sh): the find flood at 16 and 64 workers (training
saw at most 8) and an exec storm never used in training, under the default
scheduler, Custos's static policy and its learned policy, loss and runtime
side by side; the scheduler's own stats give the in-kernel cost per
decision (under emulation), the CPU share and the delta function's skip
rate. Each policy runs with Custos's consumer protection and without it
(the seed's backbone, where the queue policy alone keeps the consumer fed),
next to "none" (every task primary). Writes bench/policy/results.json, a table and loss.svg/png.
The VM runs keep their sitting's record in out/eval/sitting.json; with
--reuse, results.json names that sitting's commit for them and this one's
for the inference cost. Needs `make build`.
"""
import argparse
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "harness"))
from custos_bench import matrix, plots, provenance, results, vm  # noqa: E402
from custos_bench.paths import CUSTOS, ROOT, WORKLOAD  # noqa: E402

HERE = Path(__file__).resolve().parent
DEFAULT_MODEL = ROOT / "crates/custos-policy/models/default.json"
REQUIRED = [
    "inference_ns_median", "inference_cpu_pct", "delta_skip_pct",
    "loss_pct_learned_superproducer", "loss_pct_static_superproducer", "loss_pct_learned_unseen",
    "runtime_ratio_learned_vs_static", "runtime_ratio_learned_vs_default", "bit_exact_inputs_tested",
    "command",
]
# policy::tests::the_kernel_network_matches_the_rust_reference_bit_for_bit:
# 5 shapes x 3 networks x 300 inputs, plus the two extreme inputs.
BIT_EXACT_INPUTS = 5 * 3 * 300 + 2


def inference_cost(*args):
    out = subprocess.run([str(CUSTOS), "train", "--inference-cost", *map(str, args)],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    ap.add_argument("--quick", action="store_true", help="16 workers only, no unseen workload")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--reuse", action="store_true",
                    help="do not run the VM: summarise the runs already in bench/policy/out/eval")
    args = ap.parse_args()
    model = args.model.resolve()
    command = "bench/policy/run.py" + (f" --model {args.model}" if args.model != DEFAULT_MODEL else "") + \
        (" --quick" if args.quick else "") + (f" --runs {args.runs}" if args.runs != 1 else "")

    # The binaries, and a model given in place of the shipped one (in git).
    sitting = provenance.Sitting([CUSTOS, WORKLOAD] + ([model] if args.model != DEFAULT_MODEL else []))
    print("inference cost on the host kernel (BPF_PROG_TEST_RUN, JIT):", file=sys.stderr)
    cost = {"model": inference_cost("--from", model)}
    for hidden in (16, 32, 64, 128, 256):
        cost[f"hidden_{hidden}"] = inference_cost("--hidden", hidden)
    for name, c in cost.items():
        print(f"  {name}: {c['hidden']}x{c['actions']} {c['inference_ns_median']:.0f} ns "
              f"(p90 {c['inference_ns_p90']:.0f})", file=sys.stderr)

    share = HERE / "out" / "eval"
    workers = "16" if args.quick else "16 64"
    if not args.reuse:
        subprocess.run(["rm", "-rf", str(share)], check=True)
        share.mkdir(parents=True)
        script = (f"EVAL_WORKERS='{workers}' EVAL_RUNS={args.runs} "
                  f"{'EVAL_UNSEEN_WORKERS=0 ' if args.quick else ''}"
                  f"bash {HERE / 'eval-guest.sh'} {share.resolve()} {model}\n")
        try:
            print(vm.run_script(script, share, timeout_s=7200, cpus=1, sitting=sitting), file=sys.stderr)
        finally:
            provenance.keep(share, sitting.made_by())

    runs = []
    for f in sorted(share.glob("*/results.jsonl")):
        # find-w16-learned-unprotected -> learned-unprotected
        policy = f.parent.name.split("-", 2)[2]
        for line in f.read_text().splitlines():
            r = json.loads(line)
            r["policy"] = policy
            r["loss_pct"] = matrix.run_loss_pct(r)
            stats = f.parent / (f"custos-w{r['workers']}-r{r['run']}.sched.json"
                                if args.runs > 1 else "custos.sched.json")
            if stats.exists():
                r["sched"] = json.loads(stats.read_text())
            runs.append(r)

    def pick(workload, workers, policy):
        # policy: a configuration of eval-guest.sh (static, learned-unprotected, ...)
        return [r for r in runs if r["workload"] == workload and r["workers"] == workers and r["policy"] == policy]

    def med(rs, key):
        return results.median([r[key] for r in rs])

    top = max(int(w) for w in workers.split())
    learned_top, static_top, default_top = (pick("find", top, p) for p in ("learned", "static", "default"))
    unseen = [r for r in runs if r["workload"] == "exec" and r["policy"] == "learned"]
    learned_stats = [r["sched"] for r in runs if r["policy"].startswith("learned") and "sched" in r]
    inferences = sum(s["inferences"] for s in learned_stats)
    skips = sum(s["delta_skips"] for s in learned_stats)
    out = {
        "command": command,
        "model": str(args.model),
        "inference_ns_median": cost["model"]["inference_ns_median"],
        "inference_ns_by_hidden": {k: v["inference_ns_median"] for k, v in cost.items() if k != "model"},
        "inference_ns_in_vm_per_decision": (sum(s["inference_ns"] for s in learned_stats) / inferences
                                            if inferences else None),
        "inference_cpu_pct": results.median([s["inference_cpu_pct"] for s in learned_stats]),
        "delta_skip_pct": 100.0 * skips / (inferences + skips) if inferences + skips else 0.0,
        # What one core could decide (host JIT), and what the VM asked for.
        "decisions_per_sec_per_core_capacity": 1e9 / cost["model"]["inference_ns_median"],
        "decisions_per_sec_per_core_in_vm": results.median(
            [(s["inferences"] + s["delta_skips"]) / s["interval_s"] / max(1, s["nr_cpus"]) for s in learned_stats]),
        f"loss_pct_learned_superproducer": med(learned_top, "loss_pct"),
        f"loss_pct_static_superproducer": med(static_top, "loss_pct"),
        "loss_pct_default_superproducer": med(default_top, "loss_pct"),
        "superproducer_workers": top,
        "loss_pct_learned_unseen": med(unseen, "loss_pct") if unseen else None,
        "runtime_ratio_learned_vs_static": results.ratio(med(learned_top, "runtime_ms"), med(static_top, "runtime_ms")),
        "runtime_ratio_learned_vs_default": results.ratio(med(learned_top, "runtime_ms"), med(default_top, "runtime_ms")),
        "bit_exact_inputs_tested": BIT_EXACT_INPUTS,
        "loss_pct_by_config": {f"{r['workload']}-w{r['workers']}-{r['policy']}": r["loss_pct"] for r in runs},
        "runtime_ms_by_config": {f"{r['workload']}-w{r['workers']}-{r['policy']}": r["runtime_ms"] for r in runs},
        "runs": [{k: v for k, v in r.items() if k != "sched"} for r in runs],
    }
    # With --reuse the VM runs came from an earlier sitting: both are named.
    stamp = dict(sittings=[provenance.sitting_entry(provenance.kept(share), ["the VM runs"]),
                           provenance.sitting_entry(sitting.made_by(), ["the inference cost on the host"])]) \
        if args.reuse else dict(made_by=sitting.made_by())
    if args.quick:
        # No unseen workload: a quick run is a check, not the results file.
        out.pop("loss_pct_learned_unseen")
        results.write_results(HERE / "results-quick.json", out, [k for k in REQUIRED if k != "loss_pct_learned_unseen"],
                              **stamp)
    else:
        previous = HERE / "results.json"
        if previous.exists() and "ablation" in json.loads(previous.read_text()):
            out["ablation"] = json.loads(previous.read_text())["ablation"]  # ablation.py's, kept
        results.write_results(HERE / "results.json", out, REQUIRED, **stamp)

    rows, groups = [], {}
    for r in runs:
        rows.append([r["workload"], r["workers"], r["policy"], r["run"], f"{r['loss_pct']:.2f}%",
                     r["runtime_ms"], r["marker_delivered"]])
        groups.setdefault(f"{r['workload']} x{r['workers']}", {})[r["policy"]] = r["loss_pct"]
    print(results.table(rows, ["workload", "workers", "policy", "run", "loss", "runtime ms", "marker"]))
    plots.grouped_bars(groups, "events lost: default vs static vs learned (1 vCPU VM)", "lost %", HERE / "loss")
    print(json.dumps({k: v for k, v in out.items() if k != "runs"}, indent=2))


if __name__ == "__main__":
    main()

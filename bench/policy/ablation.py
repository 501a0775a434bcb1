#!/usr/bin/env python3
"""The learned policy's ablation (issue 10, seed 000 §6.6), in three stages:

    bench/policy/ablation.py             # record, train, evaluate, report
    bench/policy/ablation.py --from train|eval|report   # resume at a stage

1. record (VM): the training workloads (train-guest.sh, as for the shipped
   model) under each queue configuration the ablation varies and the shipped
   model did not see: 1, 2 and 4 budgeted queues (C1, C2, C4; the shipped
   model is C3) and linear waiting times. Each recording is the static
   policy with 30 % exploration, without consumer protection, as train.sh.
2. train (host): one model per variant, with train.sh's settings:
   task-only and provenance-only features (seed F1/F2) from the shipped
   model's recording, and C1, C2, C4 and linear from their own.
3. eval (VM, one session per protection setting): every variant next to
   the static policy, the feedback controller (no learning) and the shipped
   model (C3, all features, exponential waiting times), on the find flood at
   16 and 64 workers and an exec storm never used in training; the default
   scheduler once per workload for reference.

Each policy runs without Custos's consumer protection (the seed's bare
backbone, --no-consumer-preempt --no-overflow-hold), where the queue policy
alone decides the loss, and with it (the product), where every policy lost
nothing in bench/policy/results.json and the runtime tells them apart.
Writes bench/policy/ablation.json, a table, ablation-loss.svg/png
(protection off) and ablation-runtime.svg/png (on). Each stage keeps the
record of its sitting beside what it made (sitting.json in record/,
models/ and each eval-protection-*/); ablation.json lists them and its
made_by names their commits, "several" where stages ran at different ones.
Needs `make build` and bench/policy/train.sh's recording
(bench/policy/out/train/train.tr).
"""
import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "harness"))
from custos_bench import matrix, plots, provenance, results, vm  # noqa: E402
from custos_bench.paths import CUSTOS, ROOT, WORKLOAD  # noqa: E402

HERE = Path(__file__).resolve().parent
OUT = HERE / "out" / "ablation"
SHIPPED = ROOT / "crates/custos-policy/models/default.json"
SHIPPED_RECORDING = HERE / "out" / "train" / "train.tr"
UNPROTECTED = ["--no-consumer-preempt", "--no-overflow-hold"]

# Queue configurations the shipped model (C3, exponential) was not trained
# for. C1's one queue waits t̂∞ itself, the baseline seed 000 §4.1.2 derives
# Eq. 7 from. Eq. 7 at N = 1 gives t̂∞^1.5 = 354 ms (the seed's own indexing,
# queue 1 primary, 13 ms), under which the training workloads had recorded
# under 17 000 transitions after 8 minutes; at t̂∞, 289 000 in 7.
QUEUE_VARIANTS = {
    "C1": ["--waiting-time-ns", "5e5"],
    "C2": ["--nr-queues", "2"],
    "C4": ["--nr-queues", "4"],
    "linear": ["--waiting-time-scale", "linear"],
}
# name -> (scheduler args, model: None, a path, or "shipped")
CONFIGS = {
    "static": ([], None),
    "feedback": (["--policy", "feedback"], None),
    "learned": ([], "shipped"),
    "learned-task": ([], OUT / "models" / "task.json"),
    "learned-provenance": ([], OUT / "models" / "provenance.json"),
    **{f"learned-{v}": (a, OUT / "models" / f"{v}.json") for v, a in QUEUE_VARIANTS.items()},
    "static-linear": (QUEUE_VARIANTS["linear"], None),
}


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def record():
    rec = OUT / "record"
    subprocess.run(["rm", "-rf", str(rec)], check=True)
    rec.mkdir(parents=True)
    lines = []
    for v, args in QUEUE_VARIANTS.items():
        d = rec / v
        sched = ["--policy", "static", "--explore-pct", "30", "--record-transitions", f"{d}/train.tr",
                 *UNPROTECTED, *args]
        lines.append(f"echo 'recording {v}'; TRAIN_RING_KB=64 bash {HERE / 'train-guest.sh'} {d} 4 {' '.join(sched)}")
    log(f"recording {len(QUEUE_VARIANTS)} configurations in the VM (about 6 min each)")
    sitting = provenance.Sitting([CUSTOS, WORKLOAD])
    try:
        print(vm.run_script("\n".join(lines) + "\n", rec, timeout_s=5400, cpus=1, sitting=sitting), file=sys.stderr)
    finally:
        provenance.keep(rec, sitting.made_by())


def train_one(name, recording, extra):
    out = OUT / "models" / f"{name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    log(f"training {name} from {recording.relative_to(ROOT)}")
    # bench/policy/train.sh's settings.
    cmd = [str(CUSTOS), "train", "--recording", str(recording), "--out", str(out),
           "--epochs", "40", "--seed", "1", "--lr", "1e-3", *extra]
    with open(OUT / "models" / f"{name}.log", "w") as f:
        subprocess.run(cmd, stderr=f, check=True)


def train():
    if not SHIPPED_RECORDING.exists():
        sys.exit(f"{SHIPPED_RECORDING} is missing: run bench/policy/train.sh first (it also retrains the shipped model)")
    sitting = provenance.Sitting([CUSTOS])
    (OUT / "models").mkdir(parents=True, exist_ok=True)
    (OUT / "models" / provenance.KEPT).unlink(missing_ok=True)
    train_one("task", SHIPPED_RECORDING, ["--features", "task"])
    train_one("provenance", SHIPPED_RECORDING, ["--features", "provenance"])
    for v, args in QUEUE_VARIANTS.items():
        queues = {"--nr-queues": args[1], "--waiting-time-ns": str(len(args[1].split(",")))}.get(args[0], "3")
        train_one(v, OUT / "record" / v / "train.tr", ["--nr-queues", queues])
    provenance.keep(OUT / "models", sitting.made_by())


PROTECTION = {"off": UNPROTECTED, "on": []}


def evaluate(protection, workers, exec_iterations):
    ev = OUT / f"eval-protection-{protection}"
    subprocess.run(["rm", "-rf", str(ev)], check=True)
    ev.mkdir(parents=True)
    sp = ROOT / "scripts" / "superproducer-guest.sh"
    lines = []
    workloads = [("find", w) for w in workers] + [("exec", 16)]
    for workload, w in workloads:
        for name, (args, model) in CONFIGS.items():
            sched = [*PROTECTION[protection], *args]
            if model is not None:
                sched += ["--policy", "learned", "--model", str(SHIPPED if model == "shipped" else model)]
            lines.append(
                f"SP_OUT={ev}/{workload}-w{w}-{name} SP_WORKLOAD={workload} SP_SCHEDULERS=custos "
                f"SP_WORKERS={w} SP_EXEC_ITERATIONS={exec_iterations} SP_KEEP_EVENTS=0 "
                f"bash {sp} {' '.join(sched)} || echo 'FAILED {workload}-w{w}-{name}'")
        lines.append(f"SP_OUT={ev}/{workload}-w{w}-default SP_WORKLOAD={workload} SP_SCHEDULERS=default "
                     f"SP_WORKERS={w} SP_EXEC_ITERATIONS={exec_iterations} SP_KEEP_EVENTS=0 bash {sp}")
    (ev / "command.txt").write_text(f"bench/policy/ablation.py --from eval --protection {protection} "
                                    f"--workers '{' '.join(workers)}' --exec-iterations {exec_iterations}\n")
    log(f"protection {protection}: {len(CONFIGS)} policies + the default scheduler on {len(workloads)} workloads, one VM session")
    sitting = provenance.Sitting([CUSTOS, WORKLOAD])
    try:
        print(vm.run_script("\n".join(lines) + "\n", ev, timeout_s=7200, cpus=1, sitting=sitting), file=sys.stderr)
    finally:
        provenance.keep(ev, sitting.made_by())


def stages_sittings():
    """The sitting of each stage whose output the report reads: the
    recordings, the models, each evaluation (None where a stage ran before
    records were kept)."""
    dirs = [(OUT / "record", "the recordings (record/)"), (OUT / "models", "the models (models/)")]
    dirs += [(d, f"the runs of {d.name}/") for d in sorted(OUT.glob("eval-protection-*"))]
    return [provenance.sitting_entry(provenance.kept(d), [what]) for d, what in dirs if d.is_dir()]


def workload_order(key):
    """'find x16, protection on' before 'find x64, ...', the find floods first."""
    return not key.startswith("find"), int(key.split(",")[0].rsplit("x", 1)[1])


def report(command):
    runs = []
    for f in sorted(OUT.glob("eval-protection-*/*/results.jsonl")):
        protection = f.parent.parent.name.rsplit("-", 1)[1]
        workload, w, name = f.parent.name.split("-", 2)
        for line in f.read_text().splitlines():
            r = json.loads(line)
            r.update(config=name, protection=protection, loss_pct=matrix.run_loss_pct(r))
            stats = f.parent / "custos.sched.json"
            if stats.exists():
                s = json.loads(stats.read_text())
                r["policy_reported"] = s.get("policy")
                r["policy_generation"] = s.get("policy_generation")
            runs.append(r)
    if not runs:
        sys.exit(f"no runs in {OUT}/eval-protection-*")
    models = {}
    for p in [SHIPPED, *sorted((OUT / "models").glob("*.json"))]:
        m = json.loads(p.read_text())["model"]
        name = "shipped" if p == SHIPPED else p.stem
        recording = OUT / "record" / name / "train.tr"
        if not recording.exists():
            recording = SHIPPED_RECORDING
        # Which queue the model picks on the states it was trained on.
        inspect = subprocess.run([str(CUSTOS), "train", "--inspect", "--from", str(p), "--recording", str(recording)],
                                 capture_output=True, text=True, check=True)
        models[name] = {"nr_queues": m["nr_queues"], "masked_features": m.get("masked_features", []),
                        "transitions": m["trained"]["transitions"],
                        "actions_by_class": json.loads(inspect.stdout)["actions_by_class"]}
    by = {}
    for r in runs:
        key = f"{r['workload']} x{r['workers']}, protection {r['protection']}"
        by.setdefault(key, {})[r["config"]] = r
    table = {k: {c: {"loss_pct": r["loss_pct"], "runtime_ms": r["runtime_ms"],
                     "marker_delivered": r["marker_delivered"]} for c, r in v.items()} for k, v in by.items()}
    out = {
        "command": command,
        # Each protection setting's VM session, as it was run.
        "sessions": {p.parent.name: p.read_text().strip() for p in sorted(OUT.glob("eval-protection-*/command.txt"))},
        "protection": {"off": "--no-consumer-preempt --no-overflow-hold: the queue policy alone keeps the consumer fed",
                       "on": "Custos's default: a waking consumer preempts, budgeted queues hold on full rings"},
        "configs": {n: {"args": a, "model": None if m is None else str(m if m != "shipped" else SHIPPED.relative_to(ROOT))}
                    for n, (a, m) in CONFIGS.items()},
        "models": models,
        "table": table,
        "runs": runs,
    }
    written = results.write_results(HERE / "ablation.json", out, ["command"], sittings=stages_sittings())
    # The benchmark's results file carries the ablation table too (issue 10),
    # with what made it (a part measured apart from the rest of that file).
    main_results = HERE / "results.json"
    if main_results.exists():
        merged = json.loads(main_results.read_text())
        merged["ablation"] = {"command": command, "file": "bench/policy/ablation.json", "table": table,
                              "made_by": written["made_by"]}
        main_results.write_text(json.dumps(merged, indent=2, sort_keys=True) + "\n")
    rows = []
    for wl, v in by.items():
        for c, r in v.items():
            rows.append([wl, c, f"{r['loss_pct']:.2f}%", r["runtime_ms"], r["marker_delivered"],
                         r.get("policy_reported") or ""])
    print(results.table(rows, ["workload", "config", "loss", "runtime ms", "marker", "policy (stats)"]))
    # Markdown, one table per protection setting: loss · runtime per workload.
    for protection in ("off", "on"):
        cols = sorted((wl for wl in by if wl.endswith(f"protection {protection}")), key=workload_order)
        if not cols:
            continue
        print(f"\nprotection {protection}\n")
        print("| config | " + " | ".join(c.split(",")[0] for c in cols) + " |")
        print("|---" * (len(cols) + 1) + "|")
        names = ["default", *CONFIGS]
        for name in names:
            cells = []
            for c in cols:
                r = by[c].get(name)
                cells.append("–" if r is None else
                             f"{r['loss_pct']:.1f} % · {r['runtime_ms'] / 1000:.1f} s" +
                             ("" if r["marker_delivered"] else " (marker lost)"))
            print(f"| {name} | " + " | ".join(cells) + " |")
    ordered = sorted(by, key=workload_order)
    plots.grouped_bars({wl.replace(", protection off", ""): {c: r["loss_pct"] for c, r in by[wl].items()}
                        for wl in ordered if wl.endswith("off")},
                       "ablation without consumer protection: events lost (1 vCPU VM)", "lost %",
                       HERE / "ablation-loss", order=["default", *CONFIGS])
    plots.grouped_bars({wl.replace(", protection on", ""): {c: r["runtime_ms"] / 1000 for c, r in by[wl].items()}
                        for wl in ordered if wl.endswith("on")},
                       "ablation with consumer protection: workload runtime (1 vCPU VM)", "runtime s",
                       HERE / "ablation-runtime", order=["default", *CONFIGS])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--from", dest="start", choices=["record", "train", "eval", "report"], default="record")
    ap.add_argument("--workers", default="16 64", help="find flood worker counts (default: 16 64)")
    ap.add_argument("--protection", default="off on",
                    help="consumer protection settings to evaluate, one VM session each (default: off on)")
    ap.add_argument("--exec-iterations", type=int, default=100,
                    help="fork+exec per worker of the unseen exec storm (default 100)")
    args = ap.parse_args()
    command = "bench/policy/ablation.py" + (f" --workers '{args.workers}'" if args.workers != "16 64" else "") + \
        (f" --exec-iterations {args.exec_iterations}" if args.exec_iterations != 100 else "") + \
        (f" --protection '{args.protection}'" if args.protection != "off on" else "")
    stages = ["record", "train", "eval", "report"]
    for stage in stages[stages.index(args.start):]:
        if stage == "record":
            record()
        elif stage == "train":
            train()
        elif stage == "eval":
            for protection in args.protection.split():
                evaluate(protection, args.workers.split(), args.exec_iterations)
        else:
            report(command)


if __name__ == "__main__":
    main()

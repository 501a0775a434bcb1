#!/usr/bin/env python3
"""The evaluation matrix: workloads × provenance collectors × schedulers,
with repetitions in randomized order, in the sched_ext VM (one vCPU).

    bench/matrix/run.py            # the full matrix into bench/results (hours; resumable)
    bench/matrix/run.py --quick    # the benchmark subset, small: 3.5-15 minutes (the emulator's speed)
    bench/matrix/run.py --report-only   # redo the tables and pictures from runs.jsonl

Every run is appended to OUT/runs.jsonl the moment it ends; run the same
command again after an interruption and it continues where it stopped
(`--fresh` starts over). Each invocation that runs is a sitting: where it
ran (commit, binaries, host, VM, load) and which runs it made go to
OUT/sittings.json. The runs go to OUT/runs.parquet (each with its sitting
and commit), with summary.md, summary.json (made_by: the runs' commits)
and SVG/PNG pictures. bench/matrix/README.md explains each
workload, collector and scheduler.
"""
import argparse
import json
import os
import random
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "harness"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from custos_bench import matrix, vm  # noqa: E402
from custos_bench.paths import CUSTOS, ROOT, TOOLS_BIN, WORKLOAD, bpf_clang  # noqa: E402
from custos_bench.provenance import Sitting  # noqa: E402
from workloads import BY_NAME, COLLECTORS, QUICK_SCHEDULERS, SCHEDULERS, SCX_PEERS, SCX_VERSION, WORKLOADS, run_key  # noqa: E402

HERE = Path(__file__).resolve().parent
RESULTS = ROOT / "bench" / "results"
# Without a full matrix to subset from: a flood, a server, a micro-benchmark.
QUICK_DEFAULT = ["find16", "nginx", "forkexec"]


def libbpf_source() -> str:
    """libbpf's C sources as vendored by the libbpf-sys crate the workspace builds (the compile workload)."""
    meta = json.loads(subprocess.run(["cargo", "metadata", "--format-version", "1"], cwd=ROOT, check=True,
                                     capture_output=True, text=True).stdout)
    for p in meta["packages"]:
        if p["name"] == "libbpf-sys":
            src = Path(p["manifest_path"]).parent / "libbpf" / "src"
            if src.is_dir():
                return str(src)
    raise SystemExit("bench/matrix: libbpf-sys's sources are not in the cargo registry (run `make build`)")


def ensure_scx(peers):
    missing = [p for p in peers if not (TOOLS_BIN / p).exists()]
    if missing:
        print(f"bench/matrix: building {', '.join(missing)} {SCX_VERSION} from crates.io (once, about 25 minutes)",
              file=sys.stderr)
        subprocess.run(["cargo", "install", "--locked", "--root", str(TOOLS_BIN.parent)]
                       + [f"{p}@{SCX_VERSION}" for p in missing], check=True, env=dict(os.environ, BPF_CLANG=os.environ.get("BPF_CLANG", bpf_clang())))


def quick_workloads():
    """The benchmark subset chosen from the committed full matrix (seed 003)."""
    summary = RESULTS / "summary.json"
    if summary.exists():
        s = json.loads(summary.read_text())
        if s.get("complete") and s.get("subset"):
            return s["subset"]
    return QUICK_DEFAULT


def make_plan(args, workloads, collectors, schedulers, seed):
    runs = [dict(workload=w, collector=c, scheduler=s, rep=r, key=run_key(w, c, s, r))
            for w in workloads for c in collectors for s in schedulers for r in range(1, args.reps + 1)]
    random.Random(seed).shuffle(runs)
    for i, r in enumerate(runs):
        r["order"] = i
    drains = [c for c in collectors if c != "none"]
    return {"runs": runs, "seed": seed, "drain_collectors": drains,
            "params": {"quick": args.quick, "ring_kb": args.ring_kb, "drain_storm_s": 1 if args.quick else 3,
                       "libbpf_src": libbpf_source() if "compile" in workloads else None,
                       "budget_s": args.boot_minutes * 60}}


def count_lines(path: Path) -> int:
    return sum(1 for l in path.read_text().splitlines() if l.strip()) if path.exists() else 0


def made_since(path: Path, start: int, field: str) -> list:
    """`field` of each line of runs.jsonl ("key") or drain.jsonl ("collector") after the first `start`."""
    if not path.exists():
        return []
    return [json.loads(l)[field] for l in path.read_text().splitlines() if l.strip()][start:]


def boot(plan_path: Path, out: Path, boot_no: int, total: int, timeout_s: int, mem: str, sitting: Sitting):
    """One VM session that runs what is left of the plan (or its time budget's worth)."""
    from tqdm import tqdm
    plan = json.loads(plan_path.read_text())
    plan["boot"] = boot_no
    plan_path.write_text(json.dumps(plan, indent=1))
    (out / vm.GUEST_FACTS).unlink(missing_ok=True)
    script = vm.guest_prologue(out) + f"exec python3 {HERE / 'guest.py'} {plan_path} {out}\n"
    (out / "guest-script.sh").write_text(script)
    cmd = [str(CUSTOS), "vm", "run", "-q", "--cpus", "1", "--mem", mem, "--timeout", str(timeout_s),
           "--share", str(out), "--", "bash", str(out / "guest-script.sh")]
    runs = out / "runs.jsonl"
    # On a terminal a bar; elsewhere (CI logs) the per-run lines alone.
    bar = tqdm(total=total, initial=count_lines(runs), unit="run", desc="matrix", dynamic_ncols=True, disable=None)
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    log = open(out / "guest.log", "a")

    def relay():
        for line in proc.stderr:
            log.write(line)
            log.flush()
            if line.startswith("matrix:"):
                bar.write(line.rstrip())
    t = threading.Thread(target=relay, daemon=True)
    t.start()
    while proc.poll() is None:
        time.sleep(2)
        bar.n = count_lines(runs)
        bar.refresh()
    t.join(5)
    bar.n = count_lines(runs)
    bar.close()
    # Without --cpu-model the runner picks (max under emulation, host under KVM).
    sitting.saw_vm(1, memory=mem, cpu_model="the runner's default", **vm.guest_facts(out))
    return proc.returncode


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true",
                    help="the benchmark subset (bench/results/summary.json), smaller, one repetition, "
                         "the default and Custos schedulers")
    ap.add_argument("--out", type=Path, help="results directory (default bench/results, or target/tmp/matrix-quick)")
    ap.add_argument("--reps", type=int, help="repetitions per cell (default 2, about 3 hours for the full matrix; 1 with --quick)")
    ap.add_argument("--workloads", help="comma-separated subset of: " + ",".join(w.name for w in WORKLOADS))
    ap.add_argument("--collectors", help="comma-separated subset of: " + ",".join(COLLECTORS))
    ap.add_argument("--schedulers", help="comma-separated subset of: " + ",".join(SCHEDULERS))
    ap.add_argument("--ring-kb", type=int, default=64,
                    help="Custos's ring sizes (KiB): 64, as the demo, so that floods overflow (README)")
    ap.add_argument("--boot-minutes", type=int, default=45,
                    help="runs per VM boot stop after this long; the next boot resumes (bounds a stuck guest)")
    ap.add_argument("--mem", default="4G", help="VM memory (the collectors write to tmpfs there)")
    ap.add_argument("--seed", type=int, default=11, help="seed of the randomized run order")
    ap.add_argument("--fresh", action="store_true", help="discard earlier runs in OUT and start over")
    ap.add_argument("--retry-failed", action="store_true",
                    help="run the failed runs again (their records move to failed.jsonl)")
    ap.add_argument("--report-only", action="store_true", help="only redo the tables and pictures")
    args = ap.parse_args()

    out = (args.out or (ROOT / "target" / "tmp" / "matrix-quick" if args.quick else RESULTS)).resolve()
    out.mkdir(parents=True, exist_ok=True)
    if args.reps is None:
        args.reps = 1 if args.quick else 2
    workloads = args.workloads.split(",") if args.workloads else (quick_workloads() if args.quick else
                                                                  [w.name for w in WORKLOADS])
    collectors = args.collectors.split(",") if args.collectors else COLLECTORS
    schedulers = args.schedulers.split(",") if args.schedulers else (
        QUICK_SCHEDULERS if args.quick else SCHEDULERS)
    for name, given, known in (("workload", workloads, BY_NAME), ("collector", collectors, COLLECTORS),
                               ("scheduler", schedulers, SCHEDULERS)):
        bad = [x for x in given if x not in known]
        if bad:
            raise SystemExit(f"bench/matrix: unknown {name} {', '.join(bad)}")
    # The command that reproduces the results (not how this invocation resumed them).
    command = " ".join(["bench/matrix/run.py"] + [a for a in sys.argv[1:]
                                                  if a not in ("--fresh", "--retry-failed", "--report-only")])
    if not args.report_only:
        if args.fresh:
            for f in ("runs.jsonl", "drain.jsonl", "plan.json", matrix.SITTINGS):
                (out / f).unlink(missing_ok=True)
        if args.retry_failed and (out / "runs.jsonl").exists():
            lines = [l for l in (out / "runs.jsonl").read_text().splitlines() if l.strip()]
            failed = [l for l in lines if not json.loads(l)["ok"]]
            with open(out / "failed.jsonl", "a") as f:
                f.writelines(l + "\n" for l in failed)
            (out / "runs.jsonl").write_text("".join(l + "\n" for l in lines if json.loads(l)["ok"]))
            if (out / "drain.jsonl").exists():
                drains = [l for l in (out / "drain.jsonl").read_text().splitlines() if l.strip()]
                (out / "drain.jsonl").write_text("".join(l + "\n" for l in drains if "rate_eps" in json.loads(l)))
            print(f"bench/matrix: {len(failed)} failed runs will run again", file=sys.stderr)
        ensure_scx([s for s in schedulers if s in SCX_PEERS])
        plan_path = out / "plan.json"
        plan = make_plan(args, workloads, collectors, schedulers, args.seed)
        if plan_path.exists():
            old = json.loads(plan_path.read_text())
            if {r["key"] for r in old["runs"]} != {r["key"] for r in plan["runs"]}:
                raise SystemExit(f"bench/matrix: {plan_path} holds another matrix; use --fresh or another --out")
            plan = dict(old, params=plan["params"])
        plan["command"] = command
        plan_path.write_text(json.dumps(plan, indent=1))
        total = len(plan["runs"])
        # The binaries the guest runs: ours and the sched_ext peers of the plan.
        sitting = Sitting([CUSTOS, WORKLOAD] + [TOOLS_BIN / s for s in schedulers if s in SCX_PEERS])
        runs_before, drains_before = count_lines(out / "runs.jsonl"), count_lines(out / "drain.jsonl")
        try:
            for boot_no in range(1, 100):
                done = count_lines(out / "runs.jsonl")
                drained = count_lines(out / "drain.jsonl")
                if done >= total and drained >= len(plan["drain_collectors"]):
                    break
                print(f"bench/matrix: VM boot {boot_no}: {total - done} of {total} runs to go", file=sys.stderr)
                rc = boot(plan_path, out, boot_no, total, args.boot_minutes * 60 + 900, args.mem, sitting)
                if count_lines(out / "runs.jsonl") == done and count_lines(out / "drain.jsonl") == drained:
                    raise SystemExit(f"bench/matrix: a VM boot made no progress (exit {rc}); see {out / 'guest.log'}")
        finally:
            # What this sitting made, also when it stopped early: its runs are kept.
            made = made_since(out / "runs.jsonl", runs_before, "key")
            drains = made_since(out / "drain.jsonl", drains_before, "collector")
            if made or drains:
                matrix.add_sitting(out / matrix.SITTINGS, sitting.made_by(), made, drains)
    if (out / "plan.json").exists():  # the command that made the runs, also for --report-only
        command = json.loads((out / "plan.json").read_text()).get("command", command)
    df = matrix.load_runs(out / "runs.jsonl")
    rates = matrix.load_drains(out / "drain.jsonl")
    plan_path = out / "plan.json"
    planned = len(json.loads(plan_path.read_text())["runs"]) if plan_path.exists() else None
    summary = matrix.write_all(df, rates, out, command, schedulers, workloads,
                               rate_based=[w.name for w in WORKLOADS if w.rate_based], planned=planned,
                               sittings=matrix.load_sittings(out / matrix.SITTINGS))
    print((out / "summary.md").read_text())
    print(f"bench/matrix: {summary['runs']} runs, {summary['runs_failed']} failed; results in {out}", file=sys.stderr)


if __name__ == "__main__":
    main()

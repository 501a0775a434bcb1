#!/usr/bin/env python3
"""Completeness under the super producer (issue 29): how often, and how much,
the collector loses under the kernel's default scheduler and under Custos,
on 1, 2 and 4 vCPUs, through floods and through a stalled consumer.

    bench/completeness/run.py                      # every cell, 5 interleaved runs each
    bench/completeness/run.py --cpus 2 --floods find16 --pauses 0 2000 --runs 5
    bench/completeness/run.py --cpus 2 --floods find16 --schedulers default custos custos-hold --ring-kb 512
    bench/completeness/run.py --quick              # one run of each, 1 vCPU: checks the harness
    bench/completeness/run.py --report             # results.json and pictures from the runs on disk

A cell is a vCPU count, a flood, a consumer stall and a ring size; each cell
is one boot of the sched_ext VM running scripts/superproducer-guest.sh,
which alternates the schedulers run by run (SP_ORDER=interleaved: the
default, `custos sched`, `custos sched --hold`) so that a drift of the
emulator's speed hits them alike. Loss is the
collector's exact account: records refused by full rings ("dropped") plus
syscalls the kernel skipped ("unnumbered"), as a share of all events.

Per cell and scheduler, results.json has every run's loss, the mean loss
with its 95 % t-interval, and the runs that lost anything as k of n with its
exact (Clopper-Pearson) interval: 0 of 5 means "lossy in at most 52 % of
runs", not "never". loss.svg/png show every run beside the mean.

Cells already on disk (out/<cell>/results.jsonl with every planned run) are
not run again: a long run can be stopped and resumed; --fresh redoes them.
Each cell keeps the record of the sitting that ran it (out/<cell>/sitting.json:
commit, binaries, host, VM, load); results.json lists them (`sittings`) and
its made_by names their commits, "several" where cells were run at
different commits, none for cells run before records were kept.
The VM's vCPUs run in turns on one host thread (no KVM here), so the
consumer's vCPU stands still while another runs: a harsher stall than real
hardware. Needs `make build`; --quick took 8 min on the slow emulator of
2026-11-27, a run pair on more vCPUs takes longer.
"""
import argparse
import collections
import json
import re
import shutil
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "harness"))
from custos_bench import matrix, plots, provenance, results, vm  # noqa: E402
from custos_bench.paths import CUSTOS, ROOT, WORKLOAD  # noqa: E402

HERE = Path(__file__).resolve().parent
OUT = HERE / "out"
SCRIPT = ROOT / "scripts" / "superproducer-guest.sh"

# name: (SP_WORKLOAD, workers). find: `find -exec cat` over 4000 files per
# worker; exec: fork+exec of /bin/true, 400 per worker; storm: open+close
# for 15 s per worker; from the shell, 300 rounds per worker (--rounds):
# swarm (a process reading 20 files), churn (create/rename/unlink), connect
# (4 loopback TCP connections), critical (open-for-write and exec).
FLOODS = {
    "find16": ("find", 16),
    "find64": ("find", 64),
    "exec16": ("exec", 16),
    "storm16": ("storm", 16),
    "swarm16": ("swarm", 16),
    "churn16": ("churn", 16),
    "connect16": ("connect", 16),
    "critical16": ("critical", 16),
}
SHELL_FLOODS = ("swarm", "churn", "connect", "critical")
# The guest's rounds per worker of a shell flood when none is given.
ROUNDS = 300
# The guest's names: the kernel's default, `custos sched` as it ships at
# the commit that ran (the hold on by default since 2026-11-29, off before),
# `custos sched --hold` and `custos sched --no-hold` (the hold's ablation);
# "bare", the flood alone (no collector, no scheduler): its own runtime, the
# first term of the consumer-bound limit.
# `custos sched --policy P` is "custos-P" in the guest ("custos" for static,
# as it ships), so that one cell can alternate the policies run by run
# (--interleave-policies).
POLICIES = ("static", "feedback", "learned")
POLICY_SCHEDULERS = {p: "custos" if p == "static" else f"custos-{p}" for p in POLICIES}
CUSTOS_SCHEDULERS = ("custos", "custos-hold", "custos-nohold", *list(POLICY_SCHEDULERS.values())[1:])
SCHEDULERS = ("default", *CUSTOS_SCHEDULERS, "bare")
# The guest's ring size when none is given (scripts/superproducer-guest.sh).
RING_KB = 64


def cell_name(cpus, flood, pause_ms, policy, files=4000, ring_kb=RING_KB, hold_rings=False, resumer="read",
              rounds=ROUNDS):
    return f"cpus{cpus}-{flood}-pause{pause_ms}-{policy}" + (f"-files{files}" if files != 4000 else "") + \
        (f"-rounds{rounds}" if rounds != ROUNDS and FLOODS[flood][0] in SHELL_FLOODS else "") + \
        (f"-ring{ring_kb}" if ring_kb != RING_KB else "") + ("-holdrings" if hold_rings else "") + \
        (f"-resumer{resumer}" if resumer != "read" and pause_ms else "")


CELL_NAME = re.compile(r"cpus(?P<cpus>\d+)-(?P<flood>[a-z]+\d+)-pause(?P<pause_ms>\d+)"
                       r"-(?P<policy>(?:static|feedback|learned)(?:-(?:static|feedback|learned))*)"
                       r"(?:-files(?P<files>\d+))?(?:-rounds(?P<rounds>\d+))?(?:-ring(?P<ring_kb>\d+))?"
                       r"(?P<hold_rings>-holdrings)?(?:-resumer(?P<resumer>[a-z]+))?")


def parse_cell_name(name):
    """The cell a name stands for (cell_name's inverse), or None."""
    m = CELL_NAME.fullmatch(name)
    if not m or m["flood"] not in FLOODS:
        return None
    g = m.groupdict()
    return {"cpus": int(g["cpus"]), "flood": g["flood"], "pause_ms": int(g["pause_ms"]), "policy": g["policy"],
            "files": int(g["files"] or 4000), "ring_kb": int(g["ring_kb"] or RING_KB),
            "hold_rings": bool(g["hold_rings"]), "resumer": g["resumer"] or "read",
            "rounds": int(g["rounds"] or ROUNDS)}


def cells_on_disk():
    """Every cell with runs under out/, whatever command made it."""
    found = [parse_cell_name(d.name) for d in sorted(OUT.iterdir()) if (d / "results.jsonl").exists()] \
        if OUT.exists() else []
    return [c for c in found if c]


def plan(args):
    """Every cell: the floods on every vCPU count without a stall, and the
    stalls on the first flood (issue 29: find x16 with the consumer stopped
    0.5 and 2 s). With --interleave-policies the policies share each cell
    (its policy names them all: "static-feedback-learned"), run by run."""
    cells = []
    policies = ["-".join(args.policies)] if getattr(args, "interleave_policies", False) else args.policies
    for cpus in args.cpus:
        for policy in policies:
            for flood in args.floods:
                for pause in (args.pauses if flood == args.floods[0] else [0]):
                    cells.append({"cpus": cpus, "flood": flood, "pause_ms": pause, "policy": policy,
                                  "files": args.files, "ring_kb": args.ring_kb, "hold_rings": args.hold_rings,
                                  "resumer": args.resumer, "rounds": args.rounds})
    return cells


def read_rows(path: Path):
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def summarise(rows):
    """One scheduler's runs of one cell: losses, mean with interval, and
    how many runs lost anything, with its exact interval."""
    bad = [r for r in rows if r.get("produced") is None or r.get("unnumbered") is None or r.get("dropped") is None]
    if bad:
        raise ValueError(f"runs without the collector's account (did the collector stop cleanly?): {bad}")
    losses = [matrix.run_loss_pct(r) for r in rows]
    mean, lo, hi = results.mean_interval(losses)
    lossy = sum(1 for r in rows if r["dropped"] + r["unnumbered"] > 0)
    p_lo, p_hi = results.proportion_interval(lossy, len(rows))
    return {
        "runs": len(rows),
        "loss_pct": losses,
        "lost_events": [r["dropped"] + r["unnumbered"] for r in rows],
        "dropped": [r["dropped"] for r in rows],
        "unnumbered": [r["unnumbered"] for r in rows],
        "loss_pct_mean": mean,
        "loss_pct_ci95": [lo, hi],
        "runs_with_loss": lossy,
        "runs_with_loss_ci95": [p_lo, p_hi],
        "marker_delivered": sum(1 for r in rows if r.get("marker_delivered")),
        "runtime_ms": [r["runtime_ms"] for r in rows],
        # The innocent probe's wake-to-run latency (p99 of each run), where recorded.
        "probe_p99_ms": [r["probe_p99_ns"] / 1e6 for r in rows if r.get("probe_p99_ns") is not None],
        "sched_ext_enabled": sum(1 for r in rows if r.get("sched_ext_state") == "enabled"),
        # How long each stop of the consumer really lasted (a held resumer stretches it).
        "stall_ms": [r["stall_ms"] for r in rows if r.get("stall_ms") is not None],
        # Runs whose rings were all large enough for the hold's bound.
        "hold_bounded_runs": sum(1 for r in rows if r.get("hold_bounded") and all(r["hold_bounded"])),
        # The attack the flood hides: its own time, runs where it ended
        # before the flood did, runs where every step of it is in the stream.
        "attack_ms": [r["attack_ms"] for r in rows if r.get("attack_ms") is not None],
        "attack_before_flood_end": sum(1 for r in rows if r.get("attack_end_ms") is not None
                                       and r["attack_end_ms"] < r["runtime_ms"]),
        "attack_recorded": sum(1 for r in rows if r.get("attack_recorded")),
        **hold_account(rows),
    }


def hold_account(rows):
    """The hold's own account of each run that held (the bound's margin):
    producers kicked inside a program their CPU could not hold there
    (bounces), rings taken under their floor, the lowest free space seen
    (percent of the ring) against the floor, and the tasks held at their
    hold stop. Empty for schedulers that never held."""
    held = [r["hold"] for r in rows if r.get("hold")]
    if not held:
        return {}
    return {
        "hold_runs": len(held),
        "hold_bounces": [h["bounces"] for h in held],
        "hold_floors": [h["floors"] for h in held],
        "hold_lowest_free_pct": [h["lowest_free_pct"] for h in held],
        "hold_floor_pct": [h["floor_pct"] for h in held],
        "hold_leaks": [h["leaks"] for h in held],
        "held_at_stop": [h.get("held_at_stop") for h in held],
        "hold_stops": [h.get("stops") for h in held],
    }


def ratio_vs_default(entry, scheduler="custos", key="probe_p99_ms"):
    """Median of a per-run figure (the innocent probe's p99, the attack's
    time) under a Custos scheduler over the default's, or None when a side
    has no such figures (runs made before it was recorded)."""
    base = entry.get("default", {}).get(key)
    mine = entry.get(scheduler, {}).get(key)
    if not base or not mine:
        return None
    return statistics.median(mine) / statistics.median(base)


def cell_policies(cell):
    """The policies a cell runs: one, or several interleaved."""
    return cell["policy"].split("-")


def cell_schedulers(cell, schedulers):
    """The guest's schedulers for a cell: in a cell of several policies,
    `custos` stands for `custos sched` under each of them (static is how it
    ships, so plain `custos`); the hold's variants keep the shipped policy."""
    policies = cell_policies(cell)
    if len(policies) == 1:
        return list(schedulers)
    out = []
    for s in schedulers:
        out += [POLICY_SCHEDULERS[p] for p in policies] if s == "custos" else [s]
    return out


def policy_of(cell, scheduler):
    """The policy a Custos scheduler's runs in a cell used, or None."""
    if scheduler == "custos" and len(cell_policies(cell)) == 1:
        return cell["policy"]
    return next((p for p, s in POLICY_SCHEDULERS.items() if s == scheduler), None)


def missing_runs(rows, schedulers, runs):
    """How many runs each scheduler still lacks in a cell on disk."""
    have = collections.Counter(r["scheduler"] for r in rows)
    return {s: runs - have[s] for s in schedulers if have[s] < runs}


def run_cell(cell, runs, schedulers, share: Path):
    workload, workers = FLOODS[cell["flood"]]
    # A cell of several policies names each run's policy in its scheduler.
    sched_args = "" if len(cell_policies(cell)) > 1 or cell["policy"] == "static" else f"--policy {cell['policy']}"
    env = (f"CUSTOS_BIN={ROOT / 'target/release'} SP_OUT={share} SP_SCHEDULERS='{' '.join(schedulers)}' "
           f"SP_RUNS={runs} SP_ORDER=interleaved SP_KEEP_EVENTS=0 SP_WORKLOAD={workload} "
           f"SP_WORKERS={workers} SP_PAUSE_MS={cell['pause_ms']} SP_FILES={cell['files']} "
           f"SP_RING_KB={cell['ring_kb']} SP_HOLD_RINGS={int(cell.get('hold_rings', False))} "
           f"SP_RESUMER={cell.get('resumer', 'read')} SP_ITERATIONS={cell.get('rounds', ROUNDS)}")
    # A guard against a hung guest: a run pair took 8 min on one vCPU of the
    # slow emulator; more vCPUs run in turns, so the budget grows with them.
    timeout = 300 + runs * len(schedulers) * 600 * cell["cpus"]
    sitting = provenance.Sitting([CUSTOS, WORKLOAD])
    try:
        # The guest's table goes to stderr: a line per run as it ends.
        vm.run_script(f"{env} bash {SCRIPT} {sched_args} >&2\n", share, timeout_s=timeout, cpus=cell["cpus"],
                      mem="2G", sitting=sitting)
    finally:
        # Beside the runs, for the report: what made them (also the runs of a cell that failed).
        provenance.keep(share, sitting.made_by())


def sittings_of(names):
    """The sitting of each cell on disk (a cell is run whole in one): its
    record, None for a cell run before records were kept."""
    return [provenance.sitting_entry(provenance.kept(OUT / name), [name]) for name in names]


def cell_label(cell):
    """A cell as the figure's legend names it."""
    return f"{cell['cpus']} vCPU{'s' if cell['cpus'] > 1 else ''}, {cell['flood']}" + \
        (f", stall {cell['pause_ms'] / 1000:g} s" if cell["pause_ms"] else "") + \
        (f", {cell['policy']}" if cell["policy"] != "static" and len(cell_policies(cell)) == 1 else "") + \
        (f", policies {', '.join(cell_policies(cell))} run by run" if len(cell_policies(cell)) > 1 else "") + \
        (f", {cell['files']} files" if cell["files"] != 4000 else "") + \
        (f", {cell['rounds']} rounds" if cell.get("rounds", ROUNDS) != ROUNDS
         and FLOODS[cell["flood"]][0] in SHELL_FLOODS else "") + \
        (f", {cell['ring_kb']} KiB rings" if cell["ring_kb"] != RING_KB else "") + \
        (", rings for the hold" if cell.get("hold_rings") else "") + \
        (f", resumer {cell['resumer']}" if cell.get("resumer", "read") != "read" else "")


def kept_cells(names):
    """The cells results.json holds whose runs are not on disk to summarise
    again (out/ is scratch: a fresh checkout has none), with their sittings:
    a cell run now joins them instead of erasing them."""
    f = HERE / "results.json"
    if not f.exists():
        return [], []
    old = json.loads(f.read_text())
    cells = [c for c in old.get("cells", []) if c["name"] not in names]
    keep = {c["name"] for c in cells}
    sittings = []
    for s in old.get("sittings", []):
        made = [m for m in s["made"] if m in keep]
        if made:
            sittings.append(provenance.sitting_entry(s["provenance"], made))
    return cells, sittings


def report(cells, runs, command):
    summary, groups, present, names = [], {}, [], []
    for cell in cells:
        name = cell_name(**cell)
        rows = read_rows(OUT / name / "results.jsonl")
        if not rows:
            continue
        entry = dict(cell, name=name)
        names.append(name)
        for s in SCHEDULERS:
            mine = [r for r in rows if r["scheduler"] == s]
            if mine:
                entry[s] = summarise_bare(mine) if s == "bare" else summarise(mine)
        for s in CUSTOS_SCHEDULERS:
            if s in entry:
                entry[s]["policy_decisions"] = [policy_decisions(OUT / name, r) for r in rows if r["scheduler"] == s]
        for s in ("default", *CUSTOS_SCHEDULERS):
            if s in entry and "bare" in entry:
                entry[s].update(limit_account(rows, s, entry["bare"]["runtime_ms"], cell["pause_ms"]))
        # The innocent probe under Custos against the default: median p99
        # over median p99 (issue 29 asks for at most 1.25).
        # The attack's time likewise (issue 29: reported against the default's).
        for s in CUSTOS_SCHEDULERS:
            for key, name in (("probe_p99_ms", "probe_p99_ratio_vs_default"),
                              ("attack_ms", "attack_time_ratio_vs_default")):
                ratio = ratio_vs_default(entry, s, key)
                if ratio is not None and s in entry:
                    entry[s][name] = ratio
        summary.append(entry)
    kept, kept_sittings = kept_cells(names)
    if not summary and not kept:
        raise SystemExit("no runs on disk: run the cells first")
    summary = sorted(summary + kept, key=lambda c: c["name"])
    for entry in summary:
        groups[cell_label(entry)] = {s: entry[s]["loss_pct"] for s in SCHEDULERS if s in entry and s != "bare"}
        present += [s for s in SCHEDULERS if s in entry and s not in present]
    default_min = min((min(c["default"]["loss_pct"]) for c in summary if "default" in c), default=None)
    doc = {
        "command": command,
        "runs_per_cell": runs,
        "cells": summary,
        "vcpus_max": max(c["cpus"] for c in summary),
        "note": "loss = (dropped + unnumbered) / (produced + unnumbered); intervals are 95 %",
    }
    # Every flood must overflow the default's rings (or a cell shows
    # nothing); cells run without the default (a policy's) have no say.
    if default_min is not None:
        doc["default_min_loss_pct"] = default_min
    doc.update(headlines(summary))
    required = ["command", "runs_per_cell", "vcpus_max"]
    # Stamped with the commits that made the runs, not the one writing the report.
    results.write_results(HERE / "results.json", doc, required, sittings=kept_sittings + sittings_of(names))
    plots.runs_with_intervals(groups, "Loss under the super producer (every run; mean, 95 % interval)",
                              "events lost, % (symlog)", HERE / "loss", order=present, symlog=True)
    rows = []
    for c in summary:
        for s in present:
            if s in c and s != "bare":
                m = c[s]
                lo, hi = m["loss_pct_ci95"]
                ci = f"[{lo:.3g}, {hi:.3g}]" if lo is not None else "-"
                rows.append((c["name"], s, m["runs"], f"{m['loss_pct_mean']:.3g}", ci,
                             f"{m['runs_with_loss']}/{m['runs']}"))
    print(results.table(rows, ["cell", "scheduler", "runs", "loss % mean", "95 % interval", "lossy runs"]))
    print(f"wrote {HERE / 'results.json'}, {HERE / 'loss.svg'} and loss.png", file=sys.stderr)


def headlines(summary):
    """Issue 29's figures, per Custos scheduler (`custos`, `custos_hold`):
    runs and runs that lost anything over every cell, events lost in the
    2 s stalls, and the innocent probe's worst cell ratio to the default."""
    out = {}
    for s in CUSTOS_SCHEDULERS:
        cells = [c for c in summary if s in c]
        if not cells:
            continue
        key = s.replace("-", "_")
        out[f"{key}_runs"] = sum(c[s]["runs"] for c in cells)
        out[f"{key}_runs_with_loss"] = sum(c[s]["runs_with_loss"] for c in cells)
        stalls = [c for c in cells if c["pause_ms"] == 2000]
        if stalls:
            out[f"stall_2s_{key}_lost"] = sum(sum(c[s]["lost_events"]) for c in stalls)
        held = [c for c in cells if c[s].get("hold_runs")]
        if held:
            # The bound's margin over every run that held: the hold's
            # producers must never take a ring under its floor.
            out[f"{key}_hold_floors"] = sum(sum(c[s]["hold_floors"]) for c in held)
            out[f"{key}_hold_bounces_max"] = max(max(c[s]["hold_bounces"]) for c in held)
            out[f"{key}_hold_lowest_free_pct_min"] = min(min(c[s]["hold_lowest_free_pct"]) for c in held)
        ratios = [c[s]["probe_p99_ratio_vs_default"] for c in cells if "probe_p99_ratio_vs_default" in c[s]]
        if ratios:
            out[f"innocent_p99_ratio_vs_default_{key}_max"] = max(ratios)
        ratios = [c[s]["attack_time_ratio_vs_default"] for c in cells if "attack_time_ratio_vs_default" in c[s]]
        if ratios:
            out[f"attack_time_ratio_vs_default_{key}_max"] = max(ratios)
        timed = [c for c in cells if c[s]["attack_ms"]]
        if timed:
            # Runs where the attack outlasted the flood, and runs where a
            # step of it is missing from the stream (both must be 0).
            out[f"{key}_attack_after_flood_runs"] = sum(len(c[s]["attack_ms"]) - c[s]["attack_before_flood_end"]
                                                       for c in timed)
            out[f"{key}_attack_unrecorded_runs"] = sum(c[s]["runs"] - c[s]["attack_recorded"] for c in timed)
    out.update(best_policy(summary))
    return out


def policy_decisions(share: Path, row):
    """What the queue policy decided in a run (custos sched --stats-json):
    tasks it sent to a budgeted queue plus the network's inferences; None
    where the file is missing."""
    try:
        stats = json.loads((share / f"{row['scheduler']}-w{row['workers']}-r{row['run']}.sched.json").read_text())
    except (OSError, ValueError, KeyError):
        return None
    return stats.get("policy_to_budgeted", 0) + stats.get("inferences", 0)


def best_policy(summary):
    """Issue 29: which policy to ship. Per policy, over the cells where
    `custos sched` (the hold on, as it ships) ran beside the bare flood:
    the worst cell's median runtime over the consumer-bound limit
    (`limit_ratio_median_max_<policy>`, every such cell), and the runs that
    lost anything. The best is the policy that lost nothing with the lowest
    worst-cell ratio over the cells where every policy ran, run by run
    (`policies_interleaved`; cells run one after the other differ by the
    emulator's drift, so only those compare fairly, and only those are used
    when there are any); with one policy measured it is that one, by
    default rather than by comparison (`policies_compared` says how many).
    Policies that never budgeted a task nor ran an inference ran alike
    (`policies_acted` false): their ratios differ by noise alone, and the
    default as shipped (static) stands rather than the luckiest; so it does
    unless another policy beats it by more than the runs' noise
    (`beats_static`, `policy_beats_static`)."""
    per_cell = []
    for c in summary:
        mine = {}
        for s in POLICY_SCHEDULERS.values():
            m = c.get(s)
            if m and "limit_ratio_median" in m:
                mine[policy_of(c, s)] = m
        if mine:
            per_cell.append(mine)
    policies = {p for mine in per_cell for p in mine}
    common = [mine for mine in per_cell if len(policies) > 1 and set(mine) == policies]
    out = {}
    for p in sorted(policies):
        out[f"limit_ratio_median_max_{p}"] = max(m[p]["limit_ratio_median"] for m in per_cell if p in m)
    worst, lossy, decided, known = {}, collections.Counter(), collections.Counter(), False
    # Whether the policies acted is asked of the runs they are compared
    # by; a loss anywhere rules a policy out.
    for mine in common or per_cell:
        for p, m in mine.items():
            worst[p] = max(worst.get(p, 0.0), m["limit_ratio_median"])
            for d in m.get("policy_decisions", []):
                if d is not None:
                    decided[p] += d
                    known = True
    for mine in per_cell:
        for p, m in mine.items():
            lossy[p] += m["runs_with_loss"]
    clean = {p: r for p, r in worst.items() if lossy[p] == 0}
    if clean:
        best = min(clean, key=clean.get)
        # (Unknown for runs made before --stats-json was kept.)
        acted = any(decided[p] for p in worst) if known else None
        if acted is False and "static" in clean:
            best = "static"
        differs = None
        if best != "static" and "static" in clean:
            differs = beats_static(best, common or per_cell)
            if not differs:
                best = "static"
        out.update(best_policy=best, best_policy_median_limit_ratio=clean[best], policies_compared=len(worst),
                   policies_interleaved=bool(common), policies_acted=acted, policy_beats_static=differs)
    return out


def beats_static(policy, cells):
    """Whether `policy`'s runtimes over the limit are lower than static's
    in a way the runs can tell (issue 32: a difference is one when the 95 %
    bootstrap interval of the ratio of the medians excludes 1): lower in a
    cell they shared, and higher in none. Runs of the same configuration
    differ by 5-12 % under the emulator, so the lower of two medians alone
    picks the luckier policy, not the better one. Cells without per-run
    ratios tell nothing."""
    better = False
    for mine in cells:
        a, b = (mine.get(p, {}).get("limit_ratio") for p in (policy, "static"))
        if not a or not b or not results.differs(a, b):
            continue
        if statistics.median(a) > statistics.median(b):
            return False
        better = True
    return better


def summarise_bare(rows):
    """The flood alone (no collector, no scheduler): its runtime, and the
    probe and the attack beside it."""
    return {
        "runs": len(rows),
        "runtime_ms": [r["runtime_ms"] for r in rows],
        "probe_p99_ms": [r["probe_p99_ns"] / 1e6 for r in rows if r.get("probe_p99_ns") is not None],
        "attack_ms": [r["attack_ms"] for r in rows if r.get("attack_ms") is not None],
    }


def limit_account(rows, scheduler, bare_runtimes, pause_ms):
    """Each run's runtime over its consumer-bound limit (issue 29): the
    flood's own runtime (the bare runs' median) plus the time the consumer
    needs for the run's events, as if the two could not overlap. That time
    is the consumer's measured CPU time to its exit (events ÷ its drain
    rate, the rate measured in the same run) plus the stop imposed on it in
    a stall cell, during which nothing could drain. Under the emulator a
    vCPU's task is charged the turns its vCPU stands still, which inflates
    the consumer's time alike in every run."""
    own = statistics.median(bare_runtimes)
    mine = [r for r in rows if r["scheduler"] == scheduler and r.get("consumer_cpu_ms") is not None]
    if not mine:
        return {}
    limits = [own + r["consumer_cpu_ms"] + pause_ms for r in mine]
    ratios = [r["runtime_ms"] / lim for r, lim in zip(mine, limits)]
    mean, lo, hi = results.mean_interval(ratios)
    return {
        "own_runtime_ms": own,
        "consumer_cpu_ms": [r["consumer_cpu_ms"] for r in mine],
        "drain_rate_eps": [round(r["delivered"] / (r["consumer_cpu_ms"] / 1000)) for r in mine
                           if r["consumer_cpu_ms"] > 0],
        "limit_ms": limits,
        "limit_ratio": ratios,
        "limit_ratio_median": statistics.median(ratios),
        "limit_ratio_mean": mean,
        "limit_ratio_ci95": [lo, hi],
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cpus", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--floods", nargs="+", default=list(FLOODS), choices=list(FLOODS))
    ap.add_argument("--pauses", type=int, nargs="+", default=[0, 500, 2000],
                    help="consumer stalls (ms, SIGSTOP 2 s into the flood), on the first flood")
    ap.add_argument("--policies", nargs="+", default=["static"], choices=list(POLICIES))
    ap.add_argument("--interleave-policies", action="store_true",
                    help="run the policies in the same cells, alternated run by run (`custos` stands for each), "
                         "rather than a cell per policy: the fair comparison for choosing the default")
    ap.add_argument("--runs", type=int, default=5, help="runs of each scheduler per cell, interleaved")
    ap.add_argument("--schedulers", nargs="+", default=["default", "custos", "custos-nohold", "bare"],
                    choices=[s for s in SCHEDULERS if s == "custos" or s not in POLICY_SCHEDULERS.values()],
                    help="alternated run by run in each cell")
    ap.add_argument("--ring-kb", type=int, default=RING_KB, help="the collector's rings (KiB, a power of two)")
    ap.add_argument("--hold-rings", action="store_true",
                    help="grow each ring to the smallest on which the hold's bound holds on the VM's vCPUs "
                         "(custos collect --hold-rings)")
    ap.add_argument("--files", type=int, default=4000,
                    help="files each find worker reads (a shorter flood at the same rate of events)")
    ap.add_argument("--rounds", type=int, default=ROUNDS,
                    help="rounds per worker of the floods written in the shell (swarm, churn, connect, critical): "
                         "a shorter flood at the same rate")
    ap.add_argument("--resumer", choices=["read", "exec"], default="read",
                    help="what the shell resuming a stopped consumer waits with: a builtin read, or an exec'd "
                         "sleep (18 events of loading while the hold is on)")
    ap.add_argument("--quick", action="store_true", help="1 vCPU, find16, no stall, one run of each")
    ap.add_argument("--fresh", action="store_true", help="run cells again even if their runs are on disk")
    ap.add_argument("--report", action="store_true", help="do not run: summarise the runs on disk")
    ap.add_argument("--all", action="store_true",
                    help="with --report: every cell on disk, whatever command ran it (the cells' sittings name "
                         "their commits)")
    args = ap.parse_args(sys.argv[1:])
    if args.quick:
        args.cpus, args.floods, args.pauses, args.policies, args.runs = [1], ["find16"], [0], ["static"], 1
    if args.runs < 1 or any(c not in (1, 2, 4, 8) for c in args.cpus) or any(p < 0 for p in args.pauses) \
            or args.files < 100 or args.rounds < 10 or args.ring_kb < 4 or args.ring_kb & (args.ring_kb - 1) \
            or len(set(args.policies)) < len(args.policies):
        ap.error("--runs must be at least 1, --cpus of 1, 2, 4 or 8, --pauses not negative, --files at least 100, "
                 "--rounds at least 10, "
                 "--ring-kb a power of two of at least 4, --policies each once")
    if args.interleave_policies and "custos" not in args.schedulers:
        ap.error("--interleave-policies alternates the policies of `custos`: name it in --schedulers")
    # What reproduces the runs: --report and --fresh only say how.
    command = "bench/completeness/run.py " + " ".join(a for a in sys.argv[1:] if a not in ("--report", "--fresh"))
    if args.all and not args.report:
        ap.error("--all only reports (--report --all)")
    cells = cells_on_disk() if args.all else plan(args)
    failed = []
    if not args.report:
        for i, cell in enumerate(cells, 1):
            share = OUT / cell_name(**cell)
            done = read_rows(share / "results.jsonl")
            schedulers = cell_schedulers(cell, args.schedulers)
            if not args.fresh and not missing_runs(done, schedulers, args.runs):
                print(f"[{i}/{len(cells)}] {share.name}: on disk", file=sys.stderr)
                continue
            print(f"[{i}/{len(cells)}] {share.name}: {args.runs} run(s) of each of {', '.join(schedulers)}",
                  file=sys.stderr)
            # A cell is one interleaved session: one that lacks runs is run
            # again whole, so that its schedulers shared the same emulator.
            shutil.rmtree(share, ignore_errors=True)
            try:
                run_cell(cell, args.runs, schedulers, share)
            except vm.VmFailed as e:
                # The other cells still run; the runs this one finished are
                # reported, and the bench fails at the end.
                print(f"[{i}/{len(cells)}] {share.name}: FAILED: {e}", file=sys.stderr)
                failed.append(share.name)
    report(cells, args.runs, command.strip())
    if failed:
        raise SystemExit(f"cells that failed (their logs are in {OUT}): {', '.join(failed)}")


if __name__ == "__main__":
    main()

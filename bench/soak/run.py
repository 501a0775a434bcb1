#!/usr/bin/env python3
"""The soak (issue 31, item 6): `custos sched` and `custos collect --db` for
30 minutes in the sched_ext VM, a super-producer flood every 3 minutes (as
seed 000 trained with), and at the end: no stall, no scheduler ejection,
produced = stored + counted loss, the memory of both processes bounded, and
the store answering queries while it ingests.

    bench/soak/run.py                          # 30 minutes, a flood every 180 s
    bench/soak/run.py --minutes 7              # a short validation: 2 floods
    bench/soak/run.py --report                 # results.json and the picture from the run on disk

One boot of the VM runs bench/soak/guest.sh (what it samples and how is
described there and in README.md); its files land in out/. This writes
results.json (stamped with where the soak ran, `made_by`: the record kept
in out/sitting.json by the sitting that ran it, so --report names that
commit, not its own), samples.csv (the memory
and state samples, kept beside the results) and rss.svg/png. Needs
`make build`. The run fails (exit 1) when a check fails; results.json says
which.
"""
import argparse
import csv
import json
import math
import re
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "harness"))
from custos_bench import plots, provenance, results, vm  # noqa: E402
from custos_bench.paths import CUSTOS, ROOT, WORKLOAD  # noqa: E402

HERE = Path(__file__).resolve().parent
OUT = HERE / "out"
SCRIPT = HERE / "guest.sh"

# The categories of loss records that are sequence gaps: events that had
# their number (counted in `produced`) and were refused by a full ring
# (docs/event-schema.md, `loss`). `skipped` events never got a number and
# `incomplete` events were stored (their attributes lost): neither is part
# of produced = stored + lost.
GAP_CATEGORIES = ("critical", "events", "unknown")
# A stall: the pipeline (collector, sink, store) standing still, or a
# runnable task waiting, this long. The sched_ext watchdog's default
# timeout, the longest a runnable task may wait before the kernel ejects
# the scheduler.
STALL_S = 30.0
# The probe (a task waking every 10 ms) late by more than this: the
# scheduler's starvation guard (`custos sched --starvation-guard-ms`), the
# longest any task may wait by design.
PROBE_STALL_MS = 2000.0
# Memory that grows by more than this between the first and the last flood
# cycle (peak and quiet floor alike) is not bounded: MB, or this share of
# the first cycle's figure, whichever is larger.
GROWTH_MB, GROWTH_SHARE = 16.0, 0.10
# The figures results.json must have as finite numbers.
REQUIRED = ["command", "minutes", "floods", "stalls", "scheduler_ejected", "produced", "stored", "lost_counted",
            "lost_unaccounted", "collector_rss_max_mb", "sched_rss_max_mb"]


def read_csv(path: Path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def percentile(values, q):
    """The q-th percentile (nearest rank) of a non-empty list."""
    v = sorted(values)
    return v[min(len(v) - 1, max(0, math.ceil(q / 100 * len(v)) - 1))]


def collector_line(log: str):
    """produced/delivered/dropped/unnumbered of the collector's final line."""
    m = re.search(r"produced (\d+) = delivered (\d+) \+ dropped (\d+) .*?unnumbered (\d+)", log)
    if not m:
        return None
    return dict(zip(("produced", "delivered", "dropped", "unnumbered"), map(int, m.groups())))


def cycles(floods, samples, end_s):
    """Per flood cycle (a flood's start to the next one's; the last to the
    end): the samples in it."""
    starts = [f["start_s"] for f in floods]
    out = []
    for i, s in enumerate(starts):
        e = starts[i + 1] if i + 1 < len(starts) else end_s + 1
        out.append([x for x in samples if s <= x["t_s"] < e])
    return [c for c in out if c]


def growth(cycle_samples, key):
    """(first, last, growth) of the peak and of the quiet floor (the last
    sample before the next flood) of `key` across flood cycles, in MB."""
    if len(cycle_samples) < 2:
        return None
    peaks = [max(s[key] for s in c) / 1024 for c in cycle_samples]
    floors = [c[-1][key] / 1024 for c in cycle_samples]
    return {"peak_first_mb": peaks[0], "peak_last_mb": peaks[-1], "peak_growth_mb": peaks[-1] - peaks[0],
            "floor_first_mb": floors[0], "floor_last_mb": floors[-1], "floor_growth_mb": floors[-1] - floors[0]}


def bounded(g):
    """No growth past the tolerance, of the peak or of the floor."""
    if g is None:
        return None
    return (g["peak_growth_mb"] <= max(GROWTH_MB, GROWTH_SHARE * g["peak_first_mb"])
            and g["floor_growth_mb"] <= max(GROWTH_MB, GROWTH_SHARE * g["floor_first_mb"]))


def summarise(out: Path):
    """Everything the guest left in `out`, checked. Raises ValueError when
    a figure the checks need is missing (a run that did not finish is
    not a passing run)."""
    need = ["meta.json", "samples.csv", "queries.csv", "markers.csv", "floods.csv", "store.json", "collect.log",
            "stats.jsonl", "sched.json"]
    missing = [n for n in need if not (out / n).exists()]
    if missing:
        raise ValueError(f"the run left no {', '.join(missing)} in {out} (did the guest script finish?)")
    meta = json.loads((out / "meta.json").read_text())
    sched = json.loads((out / "sched.json").read_text())
    store = json.loads((out / "store.json").read_text())
    final = store.get("final_stats")
    log = collector_line((out / "collect.log").read_text(errors="replace"))
    if final is None or log is None:
        raise ValueError("no final account of the collector (its final stats record in the store, its last line)")

    # --- produced = stored + counted loss, from the store's own records.
    produced, stored = final["produced"], store["stored"]
    losses = store["losses"]
    lost_counted = sum(losses.get(c, {}).get("count") or 0 for c in GAP_CATEGORIES)
    lost_unaccounted = produced - stored - lost_counted
    # The store's stats record and the collector's last line are one account.
    if (log["produced"], log["delivered"], log["dropped"]) != (final["produced"], final["delivered"],
                                                               final["dropped"]):
        raise ValueError(f"the collector's last line {log} disagrees with its final stats record in the store")
    accounting = {
        "produced_is_delivered_plus_dropped": final["produced"] == final["delivered"] + final["dropped"],
        "stored_is_delivered": stored == final["delivered"],
        "loss_records_cover_dropped": lost_counted == final["dropped"],
        "invariant_holds": bool(final.get("invariant_holds")),
        "collector_exit_0": meta["collector_rc"] == 0,
        "no_rejects": store["rejects"] == 0,
    }

    # --- memory.
    samples = [{k: (float(v) if k == "t_s" else int(v) if v.lstrip("-").isdigit() else v) for k, v in r.items()}
               for r in read_csv(out / "samples.csv")]
    if not samples:
        raise ValueError("no samples")
    # A read of /proc/PID/status that lost lines (seen in the 30-minute
    # run: VmRSS or RssAnon 0 while the process lived) is no measurement.
    torn = [s for s in samples if (s["collector_alive"] == 1 and 0 in (s["collector_rss_kb"], s["collector_anon_kb"]))
            or (s["sched_alive"] == 1 and 0 in (s["sched_rss_kb"], s["sched_anon_kb"]))]
    samples = [s for s in samples if s not in torn]
    floods = [{"flood": int(r["flood"]), "start_s": float(r["start_s"]), "end_s": float(r["end_s"])}
              for r in read_csv(out / "floods.csv")]
    per_cycle = cycles(floods, samples, meta["end_s"])
    mem = {
        "collector_rss_max_mb": max(s["collector_rss_kb"] for s in samples) / 1024,
        "collector_anon_max_mb": max(s["collector_anon_kb"] for s in samples) / 1024,
        "sched_rss_max_mb": max(s["sched_rss_kb"] for s in samples) / 1024,
        "sched_anon_max_mb": max(s["sched_anon_kb"] for s in samples) / 1024,
        "samples": len(samples),
        "samples_torn": len(torn),
        "collector_rss_growth": growth(per_cycle, "collector_rss_kb"),
        "collector_anon_growth": growth(per_cycle, "collector_anon_kb"),
        "sched_rss_growth": growth(per_cycle, "sched_rss_kb"),
    }
    # RssAnon is what a leak grows; VmRSS also holds the store's mapped
    # pages (SQLite mmap, at most 256 MiB), which grow with the store.
    rss_bounded = [bounded(mem["collector_anon_growth"]), bounded(mem["sched_rss_growth"])]

    # --- the scheduler stayed attached.
    dmesg_new = []
    if (out / "dmesg.txt").exists():
        before = set((out / "dmesg-start.txt").read_text(errors="replace").splitlines()) \
            if (out / "dmesg-start.txt").exists() else set()
        dmesg_new = [line for line in (out / "dmesg.txt").read_text(errors="replace").splitlines()
                     if line not in before and re.search(r"sched_ext", line)]
    not_enabled = [s["t_s"] for s in samples if s["sched_ext_state"] != "enabled"]
    sched_dead = [s["t_s"] for s in samples if s["sched_alive"] != 1]
    ejections = {
        "samples_not_enabled": len(not_enabled),
        "samples_scheduler_gone": len(sched_dead),
        "enable_seq_changed": meta["enable_seq_start"] != meta["enable_seq_end"],
        "ops_changed": meta["sched_ops_start"] != meta["sched_ops_end"] or not meta["sched_ops_start"],
        "state_end": meta["sched_ext_state_end"],
        "dmesg_sched_ext_lines": dmesg_new,
    }
    scheduler_ejected = int(bool(not_enabled or sched_dead or ejections["enable_seq_changed"]
                                 or ejections["ops_changed"] or meta["sched_ext_state_end"] != "enabled"
                                 or any(re.search(r"disabled|error|stall", x) for x in dmesg_new)))

    # --- the store answering while it ingests; stalls.
    queries = read_csv(out / "queries.csv")
    markers = {int(r["marker"]): float(r["written_s"]) for r in read_csv(out / "markers.csv")}
    found_at = {}
    for q in queries:
        m = int(q["marker"])
        if q["found"] == "1" and m not in found_at:
            found_at[m] = float(q["t_s"]) + int(q["ms"]) / 1000
    live = [q for q in queries if float(q["t_s"]) < meta["end_s"]]
    failed = [q for q in queries if q["answered"] != "1"]
    # Freshness: how long after its write the store named a marker's
    # writer; only markers answered while the store ingested (the last
    # ones are asked in the drained store, after the collector stopped).
    fresh = {m: found_at[m] - w for m, w in markers.items() if m in found_at and found_at[m] < meta["end_s"]}
    markers_missing = sorted(m for m in markers if m not in found_at)
    # Stalls. (1) The pipeline: the collector writes a stats record every
    # 5 s into its stream, and the store keeps them; two records more than
    # STALL_S apart (the collector's loop, or the store it waits for, stood
    # still), or events waiting (consumer_lag > 0: produced, not yet
    # stored) for STALL_S while none got delivered.
    stats = [json.loads(line) for line in (out / "stats.jsonl").read_text().splitlines() if line.strip()]
    pipeline_stalls = []
    standing = None
    for a, b in zip(stats, stats[1:]):
        if (b["time_ns"] - a["time_ns"]) / 1e9 > STALL_S:
            pipeline_stalls.append(("no stats record", a["time_ns"], b["time_ns"]))
        if b["consumer_lag"] > 0 and b["delivered"] == a["delivered"]:
            standing = standing or a["time_ns"]
            if (b["time_ns"] - standing) / 1e9 > STALL_S:
                pipeline_stalls.append(("lag standing", standing, b["time_ns"]))
                standing = None
        else:
            standing = None
    # (2) A runnable task that waited STALL_S (the sched_ext watchdog's
    # timeout: the kernel's "runnable task stall"): the scheduler's own
    # longest wait of any task in any queue over the run.
    waits_ms = [q["wait_max_us"] / 1000 for q in sched["queues"]]
    task_wait_max_ms = max(waits_ms) if waits_ms else None
    task_stalls = int(task_wait_max_ms is not None and task_wait_max_ms >= STALL_S * 1000)
    # (3) The innocent probe woke more than PROBE_STALL_MS late.
    probes = []
    for p in sorted(out.glob("probe-*.json"), key=lambda p: int(p.stem.split("-")[1])):
        text = p.read_text().strip()
        start = p.with_suffix(".start")
        if text:
            d = json.loads(text)
            d["start_s"] = float(start.read_text()) if start.exists() else None
            probes.append(d)
    probe_stalls = [p["start_s"] for p in probes if p["max_ns"] / 1e6 > PROBE_STALL_MS]
    stalls = len(pipeline_stalls) + task_stalls + len(probe_stalls)
    # Not stalls, but how the monitor itself fared: its longest time
    # between two samples (it forks and execs every tick, an ordinary
    # task competing with the flood).
    times = [s["t_s"] for s in samples]
    monitor_gap_max_s = max((b - a for a, b in zip(times, times[1:])), default=None)
    live_ms = [int(q["ms"]) for q in live]
    answering = {
        "queries": len(live),
        "queries_failed": len(failed),
        "query_ms_p50": percentile(live_ms, 50) if live_ms else None,
        "query_ms_p99": percentile(live_ms, 99) if live_ms else None,
        "query_ms_max": max(live_ms) if live_ms else None,
        "markers": len(markers),
        "markers_missing": markers_missing,
        "marker_freshness_s_p50": percentile(list(fresh.values()), 50) if fresh else None,
        "marker_freshness_s_max": max(fresh.values()) if fresh else None,
    }

    checks = {
        "no_stall": stalls == 0,
        "scheduler_stayed": scheduler_ejected == 0,
        "produced_is_stored_plus_lost": lost_unaccounted == 0 and all(accounting.values()),
        "rss_bounded": all(b is True for b in rss_bounded),
        "store_answered": len(live) > 0 and not failed and not markers_missing,
    }
    return {
        "minutes": meta["minutes"],
        "elapsed_s": meta["end_s"],
        "flood_every_s": meta["flood_every_s"],
        "flood_s": meta["flood_s"],
        "workers": meta["workers"],
        "files": meta["files"],
        "ring_kb": meta["ring_kb"],
        # Runs before the store's page cache was an option had the default, 512.
        "db_cache_mb": meta.get("db_cache_mb", 512),
        "cpus": meta["cpus"],
        "guest_kernel": meta["kernel"],
        "floods": len(floods),
        "stalls": stalls,
        "stall_detail": {"pipeline": pipeline_stalls, "task_wait_stalls": task_stalls,
                         "probe_windows_s": probe_stalls, "stall_s": STALL_S, "probe_stall_ms": PROBE_STALL_MS},
        "task_wait_max_ms": task_wait_max_ms,
        "task_wait_max_ms_by_queue": waits_ms,
        "monitor_gap_max_s": monitor_gap_max_s,
        "stats_records": len(stats),
        "probe_p99_ms_max": max(p["p99_ns"] for p in probes) / 1e6 if probes else None,
        "probe_max_ms": max(p["max_ns"] for p in probes) / 1e6 if probes else None,
        "probe_windows": len(probes),
        "scheduler_ejected": scheduler_ejected,
        "ejection_detail": ejections,
        "produced": produced,
        "delivered": final["delivered"],
        "stored": stored,
        "lost_counted": lost_counted,
        "lost_unaccounted": lost_unaccounted,
        "loss_records": {c: v for c, v in losses.items()},
        "unnumbered": final.get("unnumbered"),
        # The collector's own account of its consumer (docs/event-schema.md,
        # `stats`): `late` events arrived after their gap was written as lost.
        "collector_final": {k: final.get(k) for k in ("delivered", "dropped", "lost_in_gaps", "late", "out_of_order",
                                                       "reorder_forced", "loss_records", "invariant_holds")},
        "incomplete": final.get("incomplete"),
        "accounting": accounting,
        **mem,
        **answering,
        "db_mb": meta["db_bytes"] / 2**20,
        "checks": checks,
        "passed": all(checks.values()),
    }


def picture(out: Path, summary, stem: Path):
    """Memory of both processes over time, the floods shaded; below, how
    long after its write the store named each marker."""
    samples = [s for s in read_csv(out / "samples.csv")
               if not (s["collector_alive"] == "1" and "0" in (s["collector_rss_kb"], s["collector_anon_kb"]))
               and not (s["sched_alive"] == "1" and "0" in (s["sched_rss_kb"], s["sched_anon_kb"]))]
    floods = [(float(r["start_s"]) / 60, float(r["end_s"]) / 60) for r in read_csv(out / "floods.csv")]
    t = [float(s["t_s"]) / 60 for s in samples]
    mb = lambda k: [int(s[k]) / 1024 for s in samples]  # noqa: E731
    markers = {int(r["marker"]): float(r["written_s"]) for r in read_csv(out / "markers.csv")}
    found = {}
    for q in read_csv(out / "queries.csv"):
        if q["found"] == "1" and int(q["marker"]) not in found:
            found[int(q["marker"])] = float(q["t_s"]) + int(q["ms"]) / 1000
    fresh = sorted((markers[m] / 60, f - markers[m]) for m, f in found.items()
                   if m in markers and f < summary["elapsed_s"])
    panels = [
        ("RSS, MB", {"collector VmRSS": list(zip(t, mb("collector_rss_kb"))),
                     "collector RssAnon": list(zip(t, mb("collector_anon_kb"))),
                     "scheduler VmRSS": list(zip(t, mb("sched_rss_kb")))}),
        ("marker in store\nafter, s", {"store names the writer": fresh}),
    ]
    title = (f"Soak: {summary['minutes']} min, {summary['floods']} floods (shaded); "
             f"{'passed' if summary['passed'] else 'FAILED'}")
    return plots.time_panels(panels, floods, title, "minutes", stem)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=int, default=30)
    ap.add_argument("--flood-every", type=int, default=180, help="seconds between flood starts")
    ap.add_argument("--flood-seconds", type=int, default=60, help="each worker passes over its files this long")
    ap.add_argument("--workers", type=int, default=16, help="`find -exec cat` workers of a flood")
    ap.add_argument("--files", type=int, default=500, help="files one find pass reads")
    ap.add_argument("--sample", type=int, default=5, help="seconds between samples")
    ap.add_argument("--cpus", type=int, default=2)
    ap.add_argument("--db-cache-mb", type=int, default=8,
                    help="the store writer's page cache (`collect --db-cache-mb`): small, so it fills early")
    ap.add_argument("--report", action="store_true", help="do not run: summarise the run on disk")
    args = ap.parse_args(sys.argv[1:])
    if args.minutes < 1 or args.sample < 1 or args.flood_seconds < 1 or args.workers < 1 or args.files < 10 \
            or args.cpus not in (1, 2, 4, 8) or args.flood_every < args.flood_seconds:
        ap.error("--minutes, --sample, --flood-seconds and --workers at least 1, --files at least 10, "
                 "--cpus 1, 2, 4 or 8, --flood-every at least --flood-seconds")
    command = "bench/soak/run.py " + " ".join(a for a in sys.argv[1:] if a != "--report")
    if not args.report:
        shutil.rmtree(OUT, ignore_errors=True)
        env = (f"CUSTOS_BIN={ROOT / 'target/release'} SOAK_OUT={OUT} SOAK_MINUTES={args.minutes} "
               f"SOAK_FLOOD_EVERY={args.flood_every} SOAK_FLOOD_SECONDS={args.flood_seconds} "
               f"SOAK_WORKERS={args.workers} SOAK_FILES={args.files} SOAK_SAMPLE_S={args.sample} "
               f"SOAK_DB_CACHE_MB={args.db_cache_mb}")
        print(f"soak: {args.minutes} min in the VM ({args.cpus} vCPUs); a line a minute", file=sys.stderr)
        sitting = provenance.Sitting([CUSTOS, WORKLOAD])
        # Boot, the soak, the drain and the store's count: a hung guest is
        # killed after twice the soak and 15 minutes.
        try:
            vm.run_script(f"{env} bash {SCRIPT} >&2\n", OUT, timeout_s=2 * args.minutes * 60 + 900,
                          cpus=args.cpus, mem="3G", sitting=sitting)
        except vm.VmFailed as e:
            print(f"soak: the guest failed: {e}; summarising what it left", file=sys.stderr)
        finally:
            provenance.keep(OUT, sitting.made_by())
    s = summarise(OUT)
    s["command"] = command.strip()
    results.write_results(HERE / "results.json", s, REQUIRED,
                          sittings=[provenance.sitting_entry(provenance.kept(OUT), ["the soak"])])
    shutil.copy(OUT / "samples.csv", HERE / "samples.csv")
    picture(OUT, s, HERE / "rss")
    rows = [(k, s[k]) for k in REQUIRED[1:]] + [(f"check {k}", v) for k, v in s["checks"].items()]
    print(results.table(rows, ["figure", "value"]))
    print(f"wrote {HERE / 'results.json'}, samples.csv, rss.svg and rss.png", file=sys.stderr)
    if not s["passed"]:
        raise SystemExit("soak: a check failed: " + ", ".join(k for k, v in s["checks"].items() if not v))


if __name__ == "__main__":
    main()

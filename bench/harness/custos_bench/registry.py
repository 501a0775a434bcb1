"""The project's registry for bench/report.py: every benchmark with its
results files, the command that makes them and the code that decides their
figures; and every section and figure the documents quote from them.

`measures` lists what decides a benchmark's figures: the crates it runs
(their src/, Cargo.toml, build.rs, shipped models; not their tests, which
change often and measure nothing here), the scripts and harness code that
drive and compute it, and the release profile. Not Cargo.lock: one crate's
new dependency would make every benchmark stale; a crate's own Cargo.toml
is listed instead.
"""
import math
import statistics

from .report import Benchmark, Figure, Registry, Section, benchmark_table
from .results import geomean


def crate(name):
    return (f"crates/{name}/src", f"crates/{name}/Cargo.toml", f"crates/{name}/build.rs", f"crates/{name}/models")


def harness(*modules):
    return tuple(f"bench/harness/custos_bench/{m}.py" for m in modules)


# [profile.release]: optimisation and overflow checks (issue 31) of every Rust binary measured.
RELEASE_PROFILE = ("Cargo.toml",)
# `custos collect`: BPF programs, consumer, writer, sealing (on by default),
# the kernel/user contract, and the binary's glue that attaches the store.
COLLECTOR = (*crate("custos-collector"), *crate("custos-output"), *crate("custos-seal"), "include/custos",
             "crates/custos/src/collect.rs")
# `custos sched`: the scheduler, its policies and their shipped models.
SCHEDULER = (*crate("custos-sched"), *crate("custos-policy"), "include/custos")
STORE = (*crate("custos-store"), *crate("custos-seal"), *crate("custos-output"))
VM = crate("custos-vm")  # the guest's kernel, CPUs and emulation decide every VM figure
WORKLOADS = crate("custos-workloads")
# The super producer of seed 000 §2.1, as every VM benchmark floods.
SUPER_PRODUCER = ("scripts/superproducer-guest.sh", *WORKLOADS)


def measures(*groups):
    return tuple(dict.fromkeys(p for g in groups for p in g))


BENCHMARKS = (
    Benchmark("collector overhead and throughput", "`sudo .tools/venv/bin/python bench/collector/run.py`",
              ("bench/collector/results.json",), measures(
                  RELEASE_PROFILE, COLLECTOR, SCHEDULER, VM, SUPER_PRODUCER,
                  ("bench/collector/run.py", "bench/collector/loadgen.c", "bench/collector/uring_copy.c"),
                  harness("results", "vm"))),
    Benchmark("store at LPM scale (6.9 M nodes)", "`bench/store/run.sh` (see `bench/store/README.md`)",
              ("bench/store/results.json",), measures(RELEASE_PROFILE, STORE, ("bench/store/run.sh",))),
    Benchmark("store: the cost of overflow checks on its ingest", "see `bench/store/README.md`, \"Overflow checks\"",
              ("bench/store/overflow.json",), measures(RELEASE_PROFILE, STORE)),
    Benchmark("scheduler vs default vs scx_bpfland", "`bench/sched/run.py`",
              ("bench/sched/results.json",), measures(
                  RELEASE_PROFILE, COLLECTOR, SCHEDULER, VM, SUPER_PRODUCER,
                  # worst_case_max_measured_over_bound comes from the scheduler's VM test.
                  ("crates/custos-sched/tests/vm.rs", "bench/sched/run.py", "bench/sched/guest.sh"),
                  harness("results", "vm", "matrix"))),
    Benchmark("VM boot time", "`bench/vm/run.sh`", ("bench/vm/results.json",),
              measures(RELEASE_PROFILE, VM, ("bench/vm/run.sh",))),
    Benchmark("reliability: an attack's graph under a flood, start orders, memory, order",
              "`bench/reliability/run.py`", ("bench/reliability/results.json",), measures(
                  RELEASE_PROFILE, COLLECTOR, STORE, SCHEDULER, VM, WORKLOADS,
                  ("scripts/attack.sh", "bench/reliability/run.py", "bench/reliability/guest.sh"),
                  harness("results", "vm"))),
    Benchmark("the evaluation: workloads × collectors × schedulers, consumer-bound limit, benchmark subset",
              "`bench/matrix/run.py` (`--quick`: 3.5 min on 2026-11-24, 12–15 min on the slow emulator of 2026-11-27)",
              ("bench/results/summary.json",), measures(
                  RELEASE_PROFILE, COLLECTOR, SCHEDULER, VM, WORKLOADS,
                  ("bench/matrix/run.py", "bench/matrix/guest.py", "bench/matrix/workloads.py"),
                  harness("matrix", "subset")), ("summary.md",)),
    Benchmark("learned policy: inference cost, loss and runtime vs static and default",
              "`bench/policy/run.py` (model: `bench/policy/train.sh`)", ("bench/policy/results.json",), measures(
                  RELEASE_PROFILE, COLLECTOR, SCHEDULER, VM, SUPER_PRODUCER,
                  ("bench/policy/run.py", "bench/policy/eval-guest.sh"), harness("results", "vm", "matrix"))),
    Benchmark("the seed's ablation of the learned policy, and a feedback controller", "`bench/policy/ablation.py`",
              ("bench/policy/ablation.json",), measures(
                  RELEASE_PROFILE, COLLECTOR, SCHEDULER, VM, SUPER_PRODUCER,
                  ("bench/policy/ablation.py", "bench/policy/train-guest.sh", "bench/policy/eval-guest.sh"),
                  harness("results", "vm", "matrix"))),
    Benchmark("GRU placement (seed 002) vs Custos's own and the default scheduler's: sysbench 1/8 threads, "
              "mixed, socket-bound, the super producer", "`bench/placement/run.py` (model: `run.py --train`)",
              ("bench/placement/results.json",), measures(
                  RELEASE_PROFILE, COLLECTOR, SCHEDULER, VM, SUPER_PRODUCER,
                  ("bench/placement/run.py", "bench/placement/guest.sh"), harness("results", "vm", "matrix"))),
    Benchmark("GRU placement: the model's inference time on the host and in the VM", "`bench/placement/run.py --speed`",
              ("bench/placement/inference.json",), measures(
                  RELEASE_PROFILE, SCHEDULER, VM, ("bench/placement/run.py",), harness("vm"))),
    Benchmark("completeness: loss under the super producer on 1, 2 and 4 vCPUs, through floods and a stalled "
              "consumer, ≥ 5 interleaved runs per cell with intervals",
              "`bench/completeness/run.py` (`--quick`: one run pair)", ("bench/completeness/results.json",),
              measures(RELEASE_PROFILE, COLLECTOR, SCHEDULER, VM, SUPER_PRODUCER,
                       ("bench/completeness/run.py",), harness("results", "vm", "matrix")), ("loss.svg",)),
    Benchmark("soak: `custos sched` and `custos collect --db` for 30 minutes in the VM, a flood every 3 minutes: "
              "stalls, ejection, produced = stored + counted loss, memory, queries while ingesting",
              "`bench/soak/run.py`", ("bench/soak/results.json",), measures(
                  RELEASE_PROFILE, COLLECTOR, STORE, SCHEDULER, VM, WORKLOADS,
                  ("bench/soak/run.py", "bench/soak/guest.sh"), harness("results", "vm")), ("rss.svg",)),
    Benchmark("fuzzing the hand-written readers (line parsers, raw segments, the sealed-stream verifier); "
              "`make test` runs a 30 s smoke per target", "`make fuzz FUZZ_SECONDS=600`",
              ("bench/fuzz/results.json",), measures(
                  STORE, ("fuzz/fuzz_targets", "fuzz/Cargo.toml", "fuzz/corpus"))),
    Benchmark("fleet: events/s through Kafka into ClickHouse, ClickHouse bytes per event vs gzip; end to end with "
              "the graph: latency, a cross-host query, duplicates after a broker restart", "`bench/fleet/run.sh`",
              ("bench/fleet/results.json", "bench/fleet/results-lz4.json", "bench/fleet/results-zstd.json"),
              measures(RELEASE_PROFILE, crate("custos-fleet"), STORE, ("bench/fleet/run.sh",))),
)

NOT_RESULTS = {
    "bench/results/plan.json": "the evaluation matrix's plan (its input: the runs in random order)",
    "bench/results/sittings.json": "the evaluation matrix's sittings: where each ran and which runs it made "
                                   "(summary.json's made_by names their commits)",
    "bench/completeness/hold-2026-11-28/": "raw runs kept beside the README's account of them",
    "bench/completeness/light-preempt-2026-11-29/": "raw runs kept beside the README's account of them",
    "bench/completeness/hold-stop-2026-11-29/": "raw runs kept beside the README's account of them",
}


# ---------------------------------------------------------------- formats

def spaced(n):
    """1 299 904, as bench/collector/README.md writes numbers."""
    return f"{n:,.0f}".replace(",", " ")


def sig3(x):
    """Three significant digits, trailing zeros kept: 1.40, 79.5, 0.022."""
    if x == 0:
        return "0"
    return f"{x:.{max(0, 2 - math.floor(math.log10(abs(x))))}f}"


def millions(x):
    return f"{x / 1e6:.2f} M"


def micro(ns):
    return f"{ns / 1000:.1f} µs"


# ---------------------------------------------------------------- the evaluation matrix (bench/results)

SUMMARY = "bench/results/summary.json"
MATRIX_SCHEDULERS = [("default", "default"), ("custos", "Custos"), ("custos-learned", "Custos learned"),
                     ("scx_lavd", "scx_lavd"), ("scx_bpfland", "scx_bpfland"), ("scx_rusty", "scx_rusty")]
CUSTOS_SCHEDULERS = ("custos", "custos-learned")


def workloads(doc):
    return sorted({k.split("/")[0] for k in doc["cells"]})


def matrix_cell(doc, workload, collector, scheduler):
    key = f"{workload}/{collector}/{scheduler}"
    if key not in doc["cells"]:
        raise KeyError(f"{SUMMARY} has no cell {key}")
    return doc["cells"][key]


def matrix_row(doc, label, collector, of_workloads):
    """Runtime over the default scheduler's (geometric mean) / loss (mean), as
    the summary.md tables' last row, here for every scheduler at once. Custos's
    loss is in bold where the default's lost events and Custos's did not."""
    cells = {s: [matrix_cell(doc, w, collector, s) for w in of_workloads] for s, _ in MATRIX_SCHEDULERS}
    loss = {s: statistics.fmean(c["loss_pct"] for c in cs) for s, cs in cells.items()}
    texts = []
    for s, _ in MATRIX_SCHEDULERS:
        lost = f"{loss[s]:.1f} %"
        if s in CUSTOS_SCHEDULERS and loss["default"] > 0 and loss[s] == 0:
            lost = f"**{lost}**"
        texts.append(f"{geomean([c['median_runtime_ratio'] for c in cells[s]]):.2f}× / {lost}")
    return f"| {label} | " + " | ".join(texts) + " |"


def matrix_geomeans(ctx):
    doc = ctx.load(SUMMARY)
    every = workloads(doc)
    return "\n".join([
        "| collector | " + " | ".join(name for _, name in MATRIX_SCHEDULERS) + " |",
        "|---|" + "---|" * len(MATRIX_SCHEDULERS),
        matrix_row(doc, "Custos's", "custos", every),
        matrix_row(doc, "bpftrace", "bpftrace", every),
        matrix_row(doc, "auditd", "auditd", every),
        matrix_row(doc, "find16 (flood), Custos's collector", "custos", ["find16"]),
    ])


def custos_loss_claim(doc):
    """What Custos's schedulers lost in every run with a collector, as a claim
    the table cannot contradict."""
    cells = [matrix_cell(doc, w, co, s) for w in workloads(doc) for co in ("custos", "bpftrace", "auditd")
             for s in CUSTOS_SCHEDULERS]
    runs = sum(c["runs"] for c in cells)
    lossy = [c for c in cells if c["loss_pct_max"]]
    if not lossy:
        return f"lost nothing in any of its {runs} runs with a collector"
    return f"lost events in {len(lossy)} of its {len(cells)} cells ({runs} runs) with a collector"


def limit_median(collector, scheduler):
    """The median over workloads of a lossless cell's runtime over the
    consumer-bound limit (bench/matrix/README.md, "The consumer-bound limit")."""
    def value(doc):
        cells = [matrix_cell(doc, w, collector, scheduler) for w in workloads(doc)]
        ratios = [c["ratio_to_consumer_bound"] for c in cells if c["loss_pct_max"] == 0
                  and c["ratio_to_consumer_bound"] is not None]
        return statistics.median(ratios)
    return value


def subset_rmse(k):
    def value(doc):
        return next(s["accuracy_rmse"] for s in doc["subset_sweep"] if s["k"] == k)
    return value


def listed(names):
    return ", ".join(names[:-1]) + " and " + names[-1] if len(names) > 1 else names[0]


def kilo(x):
    return f"{x / 1000:.1f} k"


# ---------------------------------------------------------------- completeness

COMPLETENESS = "bench/completeness/results.json"


def completeness_cell_label(cell, varying):
    stall = f"stall {cell['pause_ms'] / 1000:g} s" if cell["pause_ms"] else "no stall"
    if cell["pause_ms"] and cell.get("resumer", "read") == "exec":
        stall += ", resumed from an exec'd sleep"
    more = {"cpus": f"{cell['cpus']} vCPU{'s' if cell['cpus'] > 1 else ''}", "flood": cell["flood"],
            "files": f"{cell['files']} files", "ring_kb": f"{cell['ring_kb']} KiB rings",
            "hold_rings": "rings for the hold" if cell.get("hold_rings") else "64 KiB rings",
            "policy": cell["policy"], "rounds": f"{cell.get('rounds', 300)} rounds"}
    return ", ".join([more[k] for k in more if k in varying] + [stall])


def completeness_cells(ctx):
    """The README's table of every cell: loss with its interval, runs that lost
    anything (with the exact interval where none did: 0 of 5 is not "never"),
    events lost, the innocent probe's p99, how long the stop lasted, and for
    a scheduler that held, the hold's margin: bounces, times a ring went
    under its floor, the lowest free space seen (percent of the ring); and
    where the cell ran the bare flood, the runtime over the consumer-bound
    limit (median, the runs' range)."""
    doc = ctx.load(COMPLETENESS)
    cells = doc["cells"]
    varying = {k for k in ("cpus", "flood", "files", "ring_kb", "hold_rings", "policy", "rounds")
               if len({str(c.get(k)) for c in cells}) > 1}
    rows = ["| cell | scheduler | loss, mean [95 % interval] | runs that lost anything | events lost (all runs) "
            "| probe p99, ms | the stop lasted, ms | hold: bounces, floors, lowest free % "
            "| runtime ÷ limit, median (runs) |",
            "|---|---|---|---|---|---|---|---|---|"]
    for cell in cells:
        for s in ("default", "custos", "custos-feedback", "custos-learned", "custos-hold", "custos-nohold"):
            if s not in cell:
                continue
            m = cell[s]
            # A cell of policies run by run (`static-feedback-learned`):
            # `custos` is its first, the others are named by their scheduler.
            name = {"default": "default", "custos": f"Custos ({cell['policy'].split('-')[0]})",
                    "custos-feedback": "Custos (feedback)", "custos-learned": "Custos (learned)",
                    "custos-hold": "Custos `--hold`", "custos-nohold": "Custos `--no-hold`"}[s]
            mean, (lo, hi) = m["loss_pct_mean"], m["loss_pct_ci95"]
            if mean == 0 and hi == 0:
                loss = "0"
            else:
                digits = sig3(mean).partition(".")[2]
                loss = f"{mean:.{len(digits)}f} % [{lo:.{len(digits)}f}, {hi:.{len(digits)}f}]"
            lossy = f"{m['runs_with_loss']} of {m['runs']}"
            if m["runs_with_loss"] == 0:
                lossy += f" (exact interval 0–{m['runs_with_loss_ci95'][1] * 100:.0f} %)"
            p99 = m["probe_p99_ms"]
            stop = f"{min(m['stall_ms']):,}–{max(m['stall_ms']):,}" if cell["pause_ms"] else ""
            hold = ""
            if m.get("hold_runs"):
                free = m["hold_lowest_free_pct"]
                hold = (f"{sum(m['hold_bounces'])}, {sum(m['hold_floors'])}, "
                        f"{min(free):.1f}–{max(free):.1f} (floor {max(m['hold_floor_pct']):.1f})")
            limit = ""
            if m.get("limit_ratio"):
                r = m["limit_ratio"]
                limit = f"{m['limit_ratio_median']:.2f} ({min(r):.2f}–{max(r):.2f})"
            rows.append(f"| {completeness_cell_label(cell, varying)} | {name} | {loss} | {lossy} | "
                        f"{sum(m['lost_events']):,} | {min(p99):.0f}–{max(p99):.0f} | {stop} | {hold} | {limit} |")
    return "\n".join(rows)


def probe_ratio_range(doc):
    ratios = [c[s]["probe_p99_ratio_vs_default"] for c in doc["cells"]
              for s in ("custos", "custos-hold", "custos-nohold")
              if s in c and "probe_p99_ratio_vs_default" in c[s]]
    lo, hi = f"{min(ratios):.1f}", f"{max(ratios):.1f}"
    return f"{lo}×" if lo == hi else f"{lo}–{hi}×"


def attack_ratio_hold(doc):
    """The attack's median time over the default's, worst cell, for the
    Custos scheduler that held (`custos` once the hold is its default,
    `custos-hold` before)."""
    ratios = [c[s]["attack_time_ratio_vs_default"] for c in doc["cells"]
              for s in ("custos", "custos-hold")
              if c.get(s, {}).get("hold_runs") and "attack_time_ratio_vs_default" in c[s]]
    return max(ratios)


# ---------------------------------------------------------------- the collector

COLLECTOR_RESULTS = "bench/collector/results.json"


def collector_targets(doc):
    """Issue 12's targets, met or missed, said from the figures themselves."""
    targets = [("traced syscalls", doc["added_ns_per_syscall"] <= 500),
               ("untraced ones", doc["untraced_added_ns_per_syscall"] <= 50),
               ("the live rate", doc["live_max_events_per_s_zero_drop"] >= 2_000_000)]
    met = [n for n, ok in targets if ok]
    missed = [n for n, ok in targets if not ok]
    parts = ([f"met for {listed(met)}"] if met else []) + ([f"missed for {listed(missed)}"] if missed else [])
    return ", ".join(parts)


def io_uring_interval(doc):
    lo, hi = doc["details"]["io_uring"]["ratio_interval_95"]
    return f"[{lo:.2f}, {hi:.2f}]"


def metrics_interval(key):
    """The 95 % interval of the --metrics drain ratio by `key` (events_per_s, events_per_core_s)."""
    def interval(doc):
        lo, hi = doc["details"]["metrics_cost"][key]["ratio_interval_95"]
        return f"[{lo:.2f}, {hi:.2f}]"
    return interval


def figures():
    C, S, ST, F = COLLECTOR_RESULTS, SUMMARY, "bench/store/results.json", "bench/fleet/results.json"
    lz4, zstd = "bench/fleet/results-lz4.json", "bench/fleet/results-zstd.json"
    return {
        # The evaluation (README.md)
        "matrix.runs": Figure(S, "runs", "{:,}"),
        "matrix.runs-failed": Figure(S, "runs_failed", "{:,}"),
        "matrix.workloads": Figure(S, lambda d: len(workloads(d)), "{}"),
        "matrix.custos-loss": Figure(S, custos_loss_claim),
        "matrix.auditd-custos-runtime": Figure(S, lambda d: geomean(
            [matrix_cell(d, w, "auditd", "custos")["median_runtime_ratio"] for w in workloads(d)]), "{:.2f}×"),
        "matrix.drain-custos": Figure(S, "drain_rate_events_per_s.custos", kilo),
        "matrix.drain-bpftrace": Figure(S, "drain_rate_events_per_s.bpftrace", kilo),
        "matrix.drain-auditd": Figure(S, "drain_rate_events_per_s.auditd", kilo),
        "matrix.limit-custos": Figure(S, limit_median("custos", "custos"), "{:.2f}×"),
        "matrix.limit-custos-learned": Figure(S, limit_median("custos", "custos-learned"), "{:.2f}×"),
        "matrix.limit-auditd": Figure(S, limit_median("auditd", "custos"), "{:.2f}×"),
        "matrix.limit-bpftrace": Figure(S, limit_median("bpftrace", "custos"), "{:.2f}×"),
        "matrix.subset": Figure(S, "subset", listed),
        "matrix.subset-rmse": Figure(S, "subset_rmse", "{:.2f}"),
        "matrix.subset-rmse-k2": Figure(S, subset_rmse(2), "{:.2f}"),
        "matrix.subset-rmse-k5": Figure(S, subset_rmse(5), "{:.2f}"),
        # Completeness (bench/completeness/README.md)
        "completeness.probe-ratio": Figure(COMPLETENESS, probe_ratio_range),
        "completeness.attack-ratio-hold": Figure(COMPLETENESS, attack_ratio_hold, "{:.2f}×"),
        # The collector (docs/collector.md, bench/collector/README.md)
        "collector.added-ns": Figure(C, "added_ns_per_syscall", "{:.0f} ns"),
        "collector.openclose-custos-ns": Figure(C, "details.median_ns_per_openat_close.custos", spaced),
        "collector.openclose-none-ns": Figure(C, "details.median_ns_per_openat_close.none", "{:.0f} ns"),
        "collector.untraced-ns": Figure(C, "untraced_added_ns_per_syscall", "{:.0f} ns"),
        "collector.bpftrace-ns": Figure(C, "bpftrace_added_ns_per_syscall", lambda v: spaced(float(f"{v:.3g}"))),
        "collector.auditd-ns": Figure(C, "auditd_added_ns_per_syscall", lambda v: spaced(float(f"{v:.3g}"))),
        "collector.bpftrace-us": Figure(C, "bpftrace_added_ns_per_syscall", micro),
        "collector.auditd-us": Figure(C, "auditd_added_ns_per_syscall", micro),
        "collector.ratio-bpftrace": Figure(C, "ratio_custos_to_bpftrace", "{}"),
        "collector.ratio-auditd": Figure(C, "ratio_custos_to_auditd", "{}"),
        "collector.live": Figure(C, "live_max_events_per_s_zero_drop", spaced),
        "collector.live-m": Figure(C, "live_max_events_per_s_zero_drop", millions),
        "collector.consumer-pct": Figure(C, "consumer_cpu_pct_at_live_max", "{:.1f} %"),
        "collector.live-per-cpu-s": Figure(C, "details.live_consumer_events_per_cpu_s", millions),
        "collector.drain": Figure(C, "details.consumer_drain.events_per_s", millions),
        "collector.drain-per-cpu-s": Figure(C, "details.consumer_drain.events_per_core_s", millions),
        "collector.drain-no-seal": Figure(C, "details.consumer_drain_no_seal.events_per_s", millions),
        "collector.drain-no-seal-per-cpu-s": Figure(C, "details.consumer_drain_no_seal.events_per_core_s", millions),
        "collector.drain-events": Figure(C, "details.consumer_drain.drained_events", lambda v: f"{v / 1e6:.1f} M"),
        "collector.targets": Figure(C, collector_targets),
        "collector.superproducer-skipped": Figure(C, "superproducer_skipped_syscalls", spaced),
        "collector.superproducer-workers": Figure(C, "details.superproducer.workers", "{}"),
        "collector.superproducer-produced": Figure(C, "details.superproducer.produced", spaced),
        "collector.superproducer-first-copy-skipped": Figure(C, "details.superproducer.first_copy_skipped", spaced),
        "collector.overload-produced": Figure(C, "overload_produced", spaced),
        "collector.overload-delivered": Figure(C, "overload_delivered", spaced),
        "collector.overload-dropped": Figure(C, "overload_dropped", spaced),
        "collector.io-uring-ratio": Figure(C, "io_uring_overhead_ratio", "{:.2f}"),
        "collector.io-uring-interval": Figure(C, io_uring_interval),
        "collector.io-uring-custos": Figure(C, "details.io_uring.median_ns_per_request.custos", micro),
        "collector.io-uring-none": Figure(C, "details.io_uring.median_ns_per_request.none", micro),
        "collector.metrics-ratio": Figure(C, "metrics_drain_ratio", "{:.2f}"),
        "collector.metrics-interval": Figure(C, metrics_interval("events_per_s")),
        "collector.metrics-cpu-ratio": Figure(C, "details.metrics_cost.events_per_core_s.ratio", "{:.2f}"),
        "collector.metrics-cpu-interval": Figure(C, metrics_interval("events_per_core_s")),
        "collector.metrics-rounds": Figure(C, lambda d: str(len(d["details"]["metrics_cost"]["events_per_s"]["ratios"]))),
        "collector.metrics-none": Figure(C, "details.metrics_cost.events_per_s.median.none", millions),
        "collector.metrics-with": Figure(C, "details.metrics_cost.events_per_s.median.metrics", millions),
        # The store (docs/store.md)
        "store.nodes": Figure(ST, "nodes", "{:,}"),
        "store.edges": Figure(ST, "edges", "{:,}"),
        "store.events": Figure(ST, "events", lambda v: f"{v / 1e6:.2f} M"),
        "store.worst-ancestors": Figure(ST, "ancestry_worst_ancestors", "{:,}"),
        "store.worst-ms": Figure(ST, "ancestry_worst_ms", "{:.2f} ms"),
        "store.worst-ms-cold": Figure(ST, "ancestry_worst_ms_cold", "{:.2f} ms"),
        "store.worst-ms-with-edges": Figure(ST, "ancestry_worst_ms_with_edges", "{:.2f} ms"),
        "store.worst-ms-with-node-details": Figure(ST, "ancestry_worst_ms_with_node_details", "{:.1f} ms"),
        "store.query-ms": Figure(ST, "query_answer_worst_ms", "{:.1f} ms"),
        "store.median-ms": Figure(ST, "ancestry_median_ms", "{:.3f} ms"),
        "store.median-ms-cold": Figure(ST, "ancestry_median_ms_cold", "{:.2f} ms"),
        "store.median-ancestors": Figure(ST, "ancestry_median_ancestors", "{:.0f}"),
        "store.ingest": Figure(ST, "ingest_events_per_s", lambda v: f"{round(v, -3):,.0f} events/s"),
        "store.ingest-s": Figure(ST, "ingest_seconds", "{:.1f} s"),
        "store.db-bytes": Figure(ST, "db_bytes_per_event", "{:.1f} B"),
        "store.gzip-bytes": Figure(ST, "gzip_bytes_per_event", "{:.1f} B"),
        "store.zstd-bytes": Figure(ST, "zstd_bytes_per_event", "{:.1f} B"),
        "store.jsonl-bytes": Figure(ST, "jsonl_bytes_per_event", "{:.0f} B"),
        # The fleet (docs/fleet.md)
        "fleet.events": Figure(lz4, "events", "{:,}"),
        "fleet.clickhouse-lz4": Figure(lz4, "clickhouse_bytes_per_event", "{:.0f}"),
        "fleet.clickhouse-zstd": Figure(zstd, "clickhouse_bytes_per_event", "{:.0f}"),
        "fleet.gzip": Figure(lz4, "gzip_bytes_per_event", "{:.0f}"),
        "fleet.e2e-events-per-s": Figure(F, "events_per_s", "{:,.0f}"),
        "fleet.e2e-p50": Figure(F, "e2e_latency_ms_p50", "{:.0f}"),
        "fleet.e2e-p99": Figure(F, "e2e_latency_ms_p99", "{:.0f}"),
        "fleet.e2e-bytes": Figure(F, "clickhouse_bytes_per_event", "{:.0f}"),
        "fleet.duplicates": Figure(F, "duplicates_after_broker_restart", "{}"),
        "fleet.cross-host-ms": Figure(F, "cross_host_query_ms", "{:.0f}"),
    }


PROJECT = Registry(
    benchmarks=BENCHMARKS,
    sections={
        "benchmarks": Section(benchmark_table, tuple(p for b in BENCHMARKS for p in b.results)),
        "matrix-geomeans": Section(matrix_geomeans, (SUMMARY,)),
        "completeness-cells": Section(completeness_cells, (COMPLETENESS,)),
    },
    figures=figures(),
    not_results=NOT_RESULTS,
)

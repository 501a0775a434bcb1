//! The scheduler in a real sched_ext kernel: one VM boot runs every guest
//! check (tests/guest/backbone.sh), each test asserts on its part.
//! Run as root; needs the VM tools from scripts/deps.sh.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use custos_vm::runner::{self, Streams};
use custos_vm::VmSpec;

const BIN: &str = env!("CARGO_BIN_EXE_custos-sched");

/// Seed 000 Table 7: waiting times (ns) of the budgeted queues, last = lowest priority.
const TABLE7: [(&str, &[f64]); 6] = [
    ("E1", &[1e2, 5e5]),
    ("E2", &[1e2, 7e3, 5e5]),
    ("E3", &[1e2, 2e3, 3e4, 5e5]),
    ("E4", &[1e2, 2e3, 4e4]),
    ("E5", &[1e2, 3e4, 6e6]),
    ("E6", &[1e2, 8e4, 7e7]),
];

/// Scaling to the VM: keep each setting's last waiting time and the order and
/// log-spacing of the others, but shrink the spread t̂_N/t̂_2 to its 0.4th
/// power. Unscaled, E6's Eq. 3 bound at the VM's 4 ms slice (HZ=250) is
/// s·N·7e5 ≈ 3 h, far past sched_ext's 30 s watchdog; scaled it is 3.5 s,
/// under the 5 s starvation guard these runs use.
const SPREAD_EXPONENT: f64 = 0.4;
/// The slice backbone.sh's worst case runs with (`--slice-us 4000`).
const SLICE_NS: f64 = 4e6;
/// Finite tasks in the lowest queue (the paper sweeps 2..100).
const M_N: u32 = 3;

fn scaled(times: &[f64]) -> Vec<u64> {
    let last = *times.last().unwrap();
    times
        .iter()
        .map(|t| (last * (t / last).powf(SPREAD_EXPONENT)).round() as u64)
        .collect()
}

struct Guest {
    results: BTreeMap<String, String>,
    out: PathBuf,
    stderr: String,
}

impl Guest {
    fn get(&self, key: &str) -> &str {
        self.results
            .get(key)
            .map(String::as_str)
            .unwrap_or_else(|| {
                panic!(
                    "guest reported no {key:?}; results: {:#?}\nstderr: {}",
                    self.results, self.stderr
                )
            })
    }

    fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.out.join(name)).unwrap_or_default()
    }

    fn json(&self, name: &str) -> serde_json::Value {
        let text = std::fs::read_to_string(self.out.join(name)).unwrap_or_else(|e| {
            panic!(
                "{name}: {e}; log: {}",
                self.log(&name.replace(".json", ".log"))
            )
        });
        serde_json::from_str(&text).unwrap()
    }
}

fn boot() -> Result<Guest, String> {
    let kernel = custos_vm::kernel::select_default().map_err(|e| format!("{e:#}"))?;
    // The guest's results, kept for a look after a failure and replaced by
    // the next run. (A TempDir in the static Guest was never dropped: every
    // run left a directory in /tmp.)
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("custos-sched-vm");
    match std::fs::remove_dir_all(&out) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => panic!("{}: {e}", out.display()),
        _ => {}
    }
    std::fs::create_dir_all(&out).unwrap();
    let cases: String = TABLE7
        .iter()
        .map(|(name, times)| {
            let w: Vec<String> = scaled(times).iter().map(u64::to_string).collect();
            format!("{name} {} {M_N}\n", w.join(","))
        })
        .collect();
    std::fs::write(out.join("worst_case.in"), cases).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/guest/backbone.sh");

    let mut spec = VmSpec::new(kernel);
    spec.cpus = 2;
    spec.shares.push(out.clone());
    // A guard against a hung guest, not a speed target: this boot took
    // 278 to 832 s in make test runs on this 2-core host (QEMU emulation).
    spec.timeout = Duration::from_secs(1200);
    // The feature maps' layout, for the maps the policy section pins
    // like a collector (a size written there went stale with a new field).
    let task_bytes = format!(
        "TASK_FEATURES_BYTES={}",
        std::mem::size_of::<custos_sched::bpf_intf::custos_task_features>()
    );
    let global_bytes = format!(
        "GLOBAL_FEATURES_BYTES={}",
        std::mem::size_of::<custos_sched::bpf_intf::custos_global_features>()
    );
    let command: Vec<String> = [
        "env",
        &task_bytes,
        &global_bytes,
        "sh",
        script.to_str().unwrap(),
        BIN,
        out.to_str().unwrap(),
        "lifecycle",
        "ejection",
        "policy",
        "light",
        "stress",
        "placement",
        "worst_case",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let output =
        runner::run(&spec, &command, Streams::Capture).map_err(|e| format!("VM run: {e:#}"))?;
    let stdout = String::from_utf8_lossy(&output.stdout).to_string();
    let stderr = String::from_utf8_lossy(&output.stderr).to_string();
    let results = stdout
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect::<BTreeMap<_, _>>();
    if output.code != 0 || results.get("done").map(String::as_str) != Some("yes") {
        return Err(format!(
            "guest script failed ({})\nstdout: {stdout}\nstderr: {stderr}",
            output.code
        ));
    }
    let seconds: Vec<String> = results
        .iter()
        .filter_map(|(k, v)| Some(format!("{} {v} s", k.strip_prefix("seconds.")?)))
        .collect();
    eprintln!("the guest's sections: {}", seconds.join(", "));
    Ok(Guest {
        results,
        out,
        stderr,
    })
}

/// The one VM boot all VM tests share (a failed boot is reported by each, not retried).
fn guest() -> &'static Guest {
    static GUEST: OnceLock<Result<Guest, String>> = OnceLock::new();
    match GUEST.get_or_init(boot) {
        Ok(g) => g,
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn host_without_sched_ext_is_a_clear_error() {
    if PathBuf::from("/sys/kernel/sched_ext").exists() {
        eprintln!("this host has sched_ext; the no-sched_ext path is not reachable here");
        return;
    }
    let out = Command::new(BIN).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr: {stderr}");
    assert!(
        stderr.contains("has no sched_ext") && stderr.contains("custos vm run"),
        "stderr: {stderr}"
    );
}

#[test]
fn bad_options_are_clear_errors_before_loading() {
    for (args, want) in [
        (&["--nr-queues", "0"][..], "--nr-queues"),
        (&["--waiting-time-ns", "1e2,abc"][..], "not a number"),
        (&["--budget-queue", "9"][..], "--budget-queue"),
        (&["--force-queue", "stress-ng"][..], "KEY=QUEUE"),
        (&["--starvation-guard-ms", "40000"][..], "watchdog"),
        (
            &["--availability-low", "80", "--availability-high", "20"][..],
            "--availability-high",
        ),
    ] {
        let out = Command::new(BIN).args(args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(stderr.contains(want), "{args:?}: {stderr}");
    }
}

#[test]
fn vm_loads_reaches_enabled_and_detaches_to_disabled() {
    let g = guest();
    assert_eq!(g.get("lifecycle.before"), "disabled");
    assert_eq!(
        g.get("lifecycle.attached"),
        "enabled",
        "log: {}",
        g.log("lifecycle.log")
    );
    assert!(
        g.get("lifecycle.ops").starts_with("custos"),
        "{}",
        g.get("lifecycle.ops")
    );
    assert_eq!(
        g.get("lifecycle.rc"),
        "0",
        "log: {}",
        g.log("lifecycle.log")
    );
    assert_eq!(g.get("lifecycle.after"), "disabled");
    let log = g.log("lifecycle.log");
    assert!(log.contains("unregistered from user space"), "log: {log}");
    let monitor = g.log("monitor.log");
    assert_eq!(g.get("lifecycle.monitor_rc"), "0", "monitor: {monitor}");
    assert!(
        monitor.contains("[custos] policy:") && monitor.contains("q0    primary"),
        "monitor: {monitor}"
    );
    let m = g.json("lifecycle.json");
    assert!(
        m["queues"][0]["dispatches"].as_u64().unwrap() + m["direct_dispatches"].as_u64().unwrap()
            > 0
    );
    assert_eq!(m["collector_features"], 0, "no collector in this VM");
    // --metrics: a scrape of the running scheduler (issue 34), the same
    // statistics under Prometheus names (the shared server's format is
    // scraped by a real Prometheus in crates/custos/tests/metrics.rs).
    assert_eq!(
        g.get("lifecycle.metrics_rc"),
        "0",
        "log: {}",
        g.log("lifecycle.log")
    );
    let text = g.log("metrics.txt");
    let value = |series: &str| -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("{series} not in the scrape:\n{text}"))
    };
    assert!(
        value("custos_sched_queue_dispatches_total{queue=\"0\"}")
            + value("custos_sched_direct_dispatches_total")
            > 0.0,
        "{text}"
    );
    assert_eq!(value("custos_sched_collector_features"), 0.0, "{text}");
    assert!(value("process_cpu_seconds_total") > 0.0, "{text}");
    assert!(
        text.contains("custos_sched_policy_info{policy=\"static\",placement=\"custos\"} 1"),
        "{text}"
    );
}

#[test]
fn vm_kernel_ejection_prints_the_exit_reason_and_fails() {
    let g = guest();
    let log = g.log("ejection.log");
    assert_eq!(g.get("ejection.rc"), "1", "log: {log}");
    assert_eq!(g.get("ejection.after"), "disabled");
    assert!(
        log.contains("ejected") && log.contains("sysrq"),
        "log: {log}"
    );
}

#[test]
fn vm_static_policy_budgets_pressured_producers_and_spares_consumers() {
    let g = guest();
    let log = g.log("policy.log");
    assert_eq!(g.get("policy.state"), "enabled", "log: {log}");
    assert_eq!(g.get("policy.rc"), "0", "log: {log}");
    assert!(log.contains("reusing the maps pinned in"), "log: {log}");
    assert!(!log.contains("audit pressure unavailable"), "log: {log}");
    let m = g.json("policy.json");
    assert_eq!(m["collector_features"], 1, "{m}");
    // Only the producer is budgeted, once (consumers are registered before
    // attach); the consumer, producing as much under the same pressure,
    // stays primary, and so does a thread whose tid's entry is a dead
    // thread's (another start time).
    assert_eq!(m["policy_to_budgeted"], 1, "{m}");
    assert!(m["consumer_decisions"].as_u64().unwrap() > 0, "{m}");
    // ... and it returns once the rings drain.
    assert_eq!(m["policy_to_primary"], 1, "{m}");
    assert!(
        m["queues"][3]["dispatches"].as_u64().unwrap() > 0,
        "the budgeted producer ran: {m}"
    );
    // A task pinned to the kept consumer's CPU runs within a few slices, not
    // when the starvation guard (2 s) ends the consumer's run: it waited up
    // to the guard before (as did the kworkers there). Half the guard
    // leaves room for the emulator running the vCPUs in turns.
    let waited: u64 = g.get("policy.pinned_wait_max_us").parse().unwrap();
    assert!(
        waited < 1_000_000,
        "a task pinned to the consumer's CPU waited {waited} us: {m}"
    );
}

#[test]
fn vm_a_sleeping_task_in_the_light_lane_does_not_wait_behind_spinning_ones() {
    let g = guest();
    let slice_us = 5_000;
    let rounds: u32 = g.get("light.rounds").parse().unwrap();
    assert!(rounds >= 3, "{rounds} rounds: a median needs 3");
    for round in 1..=rounds {
        for share in [50, 0] {
            let name = format!("light{share}.{round}");
            let log = g.log(&format!("{name}.log"));
            assert_eq!(g.get(&format!("{name}.state")), "enabled", "log: {log}");
            assert_eq!(g.get(&format!("{name}.rc")), "0", "log: {log}");
            let m = g.json(&format!("{name}.json"));
            if share == 0 {
                assert_eq!(m["light_enqueues"], 0, "the lane is off at 0: {m}");
            } else {
                assert!(m["light_dispatches"].as_u64().unwrap() > 0, "{m}");
            }
        }
    }
    let p90 = |name: String| -> u64 { g.get(&format!("{name}.late_p90_us")).parse().unwrap() };
    let median = |share: u32| -> u64 {
        let mut v: Vec<u64> = (1..=rounds)
            .map(|r| p90(format!("light{share}.{r}")))
            .collect();
        v.sort_unstable();
        v[v.len() / 2]
    };
    let (with_lane, without) = (median(50), median(0));
    let each: Vec<String> = (1..=rounds)
        .map(|r| {
            format!(
                "{}/{}",
                p90(format!("light50.{r}")),
                p90(format!("light0.{r}"))
            )
        })
        .collect();
    eprintln!(
        "light lane: a sleeper late by {with_lane} us with it, {without} us without \
         (medians of {rounds} interleaved rounds' 90th pct of 100 wake-ups; with/without: {})",
        each.join(" ")
    );
    // Without the lane the sleeper waits behind the 4 spinners per CPU in
    // the FIFO (4 slices), so the check below can fail; with it, it waits
    // for the running slice to end, which happens at a tick (HZ=250: up to
    // 8 ms). 90th percentiles, not the maximum: the emulator runs the vCPUs
    // in turns. Alone: 5.6-9.4 ms with the lane, 36-37 without; in make
    // test, beside another VM, 48.4 and 80.2 (the other VM's turns stretch
    // both), so the lane is asked to be faster, not twice as fast. Medians
    // of interleaved rounds: one pass of each saw a busier host in one.
    assert!(
        without > 2 * slice_us,
        "without the lane the sleeper was late by only {without} us (90th pct): the spinners did not delay it"
    );
    assert!(
        with_lane < without,
        "the light lane's sleeper was late by {with_lane} us (90th pct), {without} us without the lane (rounds: {})",
        each.join(" ")
    );
}

#[test]
fn vm_60s_stress_ng_keeps_the_scheduler_enabled_without_stalls() {
    let g = guest();
    let log = g.log("stress.log");
    assert_eq!(
        g.get("stress.stressng_rc"),
        "0",
        "stress-ng: {}",
        g.log("stress-ng.log")
    );
    assert!(g.get("stress.seconds").parse::<u64>().unwrap() >= 60);
    assert_eq!(g.get("stress.state"), "enabled", "log: {log}");
    assert_eq!(g.get("stress.alive"), "yes", "log: {log}");
    assert_eq!(g.get("stress.rc"), "0", "log: {log}");
    assert!(!log.contains("stall"), "log: {log}");
    let m = g.json("stress.json");
    assert!(
        m["pinned_enqueues"].as_u64().unwrap() > 0,
        "one-CPU tasks took the per-CPU path: {m}"
    );
    // Under emulation on a busy host a vCPU can stall for seconds, so the
    // 2 s guard may cut in; what must hold is that no task came near the
    // 30 s watchdog.
    for q in m["queues"].as_array().unwrap() {
        assert!(
            q["wait_max_us"].as_f64().unwrap() < 10e6,
            "a task waited 10 s: {m}"
        );
    }
    eprintln!(
        "stress: feature maintenance {:.0} ns/update ({} outliers), {:.4}% of CPU time; primary wait avg {:.1} us \
         max {:.1} us; starvation guard picks {}",
        m["feature_ns_per_update"].as_f64().unwrap(),
        m["feature_outliers"],
        m["feature_cpu_pct"].as_f64().unwrap(),
        m["queues"][0]["wait_avg_us"].as_f64().unwrap(),
        m["queues"][0]["wait_max_us"].as_f64().unwrap(),
        m["starvation_guard_picks"],
    );
}

#[test]
fn vm_worst_case_lowest_queue_finishes_within_the_eq4_bound() {
    let g = guest();
    let mut worst = 0f64;
    let mut experiments = Vec::new();
    eprintln!(
        "setting  waiting times (ns)             m_N  r_RAW ms  measured ms  Eq.4 bound ms  measured/Eq.4  \
         measured/Eq.6  last-queue max wait ms  Eq.3 ms"
    );
    for (name, _) in TABLE7 {
        assert_eq!(
            g.get(&format!("wc.{name}.state")),
            "enabled",
            "{name}: {}",
            g.log(&format!("wc-{name}.log"))
        );
        assert_eq!(
            g.get(&format!("wc.{name}.rc")),
            "0",
            "{name}: {}",
            g.log(&format!("wc-{name}.log"))
        );
        let fields: BTreeMap<&str, &str> = g
            .get(&format!("wc.{name}.result"))
            .split(' ')
            .filter_map(|kv| kv.split_once('='))
            .collect();
        let raw = fields["raw_ns"].parse::<f64>().unwrap();
        let measured = fields["measured_ns"].parse::<f64>().unwrap();
        let m = fields["m"].parse::<f64>().unwrap();
        let times: Vec<f64> = fields["wts"]
            .split(',')
            .map(|t| t.parse().unwrap())
            .collect();
        // N counts the primary queue, as in Eq. 3 (queue 1 primary, 2..N budgeted).
        let n = times.len() as f64 + 1.0;
        let spread = times.last().unwrap() / times[0];
        let eq4 = spread * n * m * raw;
        let eq6 = spread * n * (n + m - 2.0) * raw;
        let stats = g.json(&format!("wc-{name}.json"));
        let last_q = times.len();
        // Eq. 3 at the nominal 4 ms slice: the longest a head of the last
        // queue should wait. Reported, not asserted: under emulation a slice
        // lasts longer in wall time when the host is loaded (backbone.sh).
        let eq3 = SLICE_NS * n * spread;
        let wait_max = stats["queues"][last_q]["wait_max_us"].as_f64().unwrap() * 1e3;
        // The primary queue on the saturated CPU starves by design (h_1 = 0)
        // until the guard; the lowest queue must be served by Eq. 2 alone.
        assert_eq!(
            stats["queues"][last_q]["starvation_guard_picks"],
            0,
            "{name}: the backbone alone must meet the bound; the last queue's longest wait \
             {:.0} ms, Eq. 3 at a {} ms slice {:.0} ms; queues: {}",
            wait_max / 1e6,
            SLICE_NS / 1e6,
            eq3 / 1e6,
            stats["queues"]
        );
        assert!(stats["queues"][last_q]["dispatches"].as_u64().unwrap() > 0);
        eprintln!(
            "{name:<8} {:<32} {m:>3} {:>9.1} {:>12.1} {:>14.1} {:>14.4} {:>14.4} {:>23.1} {:>8.1}",
            fields["wts"],
            raw / 1e6,
            measured / 1e6,
            eq4 / 1e6,
            measured / eq4,
            measured / eq6,
            wait_max / 1e6,
            eq3 / 1e6
        );
        assert!(
            measured <= eq4,
            "{name}: lowest queue took {measured} ns > Eq. 4 bound {eq4} ns"
        );
        worst = worst.max(measured / eq4);
        experiments.push(serde_json::json!({
            "setting": name, "waiting_times_ns": fields["wts"], "m_n": m, "raw_ns": raw,
            "measured_ns": measured, "eq4_bound_ns": eq4, "measured_over_bound": measured / eq4,
            "measured_over_eq6": measured / eq6,
            "last_queue_wait_max_ns": wait_max, "eq3_bound_ns": eq3,
        }));
    }
    eprintln!("worst_case_max_measured_over_bound {worst:.4}");
    // For bench/sched/run.py, which reports the worst ratio beside the others.
    let record = serde_json::json!({
        "experiments": experiments,
        "max_measured_over_bound": worst,
        "scaling": format!("Table 7 spread t_N/t_2 to the power {SPREAD_EXPONENT}"),
    });
    let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join("worst_case.json");
    std::fs::write(&path, serde_json::to_string_pretty(&record).unwrap() + "\n").unwrap();
}

#[test]
fn vm_gru_placement_places_waking_tasks_and_a_bad_model_falls_back() {
    let g = guest();
    let log = g.log("placement.log");
    assert_eq!(g.get("placement.attached"), "enabled", "log: {log}");
    assert_eq!(g.get("placement.state"), "enabled", "log: {log}");
    assert_eq!(g.get("placement.rc"), "0", "log: {log}");
    let m = g.json("placement.json");
    assert_eq!(m["placement"], "gru (shipped model)", "{m}");
    let n = |k: &str| m[k].as_u64().unwrap_or_else(|| panic!("{k}: {m}"));
    // Snapshots reach the agent, it predicts, and predictions place tasks.
    assert!(n("placement_snapshots") > 100, "{m}");
    assert!(n("placement_agent_snapshots") > 0, "{m}");
    assert!(n("placement_predictions") > 0, "{m}");
    assert!(
        n("placement_used") > 0,
        "predictions never placed a task: {m}"
    );
    assert_eq!(n("placement_prediction_errors"), 0, "{m}");
    assert_eq!(n("placement_map_write_failures"), 0, "{m}");
    assert!(
        m["placement_inference_p50_us"].as_f64().unwrap() > 0.0,
        "{m}"
    );
    // The final statistics are taken after the scheduler detached and the
    // agent stopped: the agent read no more than the kernel sent, and
    // each full window it read was predicted or skipped for one reason.
    assert!(
        n("placement_agent_snapshots") <= n("placement_snapshots"),
        "{m}"
    );
    let windows = n("placement_agent_snapshots") - 9;
    let accounted = [
        "predictions",
        "prediction_errors",
        "skipped_late",
        "skipped_budget",
        "skipped_unplaceable",
        "skipped_superseded",
        "skipped_pressure",
    ]
    .iter()
    .map(|k| n(&format!("placement_{k}")))
    .sum::<u64>();
    assert_eq!(accounted, windows, "{m}");
    // Windows run in batches: no more calls than windows run.
    assert!(
        (1..=n("placement_predictions")).contains(&n("placement_inference_calls")),
        "{m}"
    );

    // A model file that is not ONNX: said, own placement, still scheduling.
    let bad = g.log("placement_bad.log");
    assert_eq!(g.get("placement_bad.state"), "enabled", "log: {bad}");
    assert_eq!(g.get("placement_bad.rc"), "0", "log: {bad}");
    assert!(bad.contains("not an ONNX model"), "log: {bad}");
    let b = g.json("placement_bad.json");
    assert!(
        b["placement"]
            .as_str()
            .unwrap()
            .starts_with("custos (gru unavailable"),
        "{b}"
    );
    assert_eq!(b["placement_snapshots"], 0, "{b}");
}

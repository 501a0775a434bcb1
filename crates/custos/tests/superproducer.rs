//! The super-producer attack in the sched_ext VM: the collector with small
//! rings under 16 `find -exec cat` workers (2000 files each) and a marker process, a run under
//! the kernel's default scheduler, then one under Custos, in one VM session
//! (scripts/superproducer-guest.sh).
//!
//! Loss is the collector's exact account: records the full rings refused
//! ("dropped") plus syscalls no copy of the collector's program saw because
//! every copy was already running, preempted, on that CPU ("unnumbered").
//! Issue 16: the flood must really overflow the default scheduler's rings
//! (more than 5 % lost in every run), and Custos must lose nothing, not a
//! refused record nor a skipped syscall, with the marker's events delivered.
//! One loss fails the test.
//!
//! The default scheduler's run also shows that every syscall the kernel
//! skipped is in the stream's loss records (exactly, or under an upper
//! bound), each exact one naming its CPU.
//!
//! Custos's run starts the collector first, then the scheduler: the
//! collector-first start order (tests/attack.rs asks the other two).
//!
//! On one vCPU and on two (there with rings grown to the hold's bound).
//! One run of each: repetitions are bench/completeness's (five and more
//! interleaved runs on 1, 2 and 4 vCPUs and through a stalled consumer, with
//! intervals), not make test's; three runs of each here took 15 of its
//! minutes on the slow emulator of 2026-11-27 and were no interval either.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

const WORKERS: u32 = 16;
/// Files each worker reads: half the demo's 4000, the same rate of events
/// in half the time; it still overflows the default's rings (asserted below).
const FILES: u32 = 2000;
const RUNS: u32 = 1;

fn n(r: &Value, k: &str) -> u64 {
    r[k].as_u64()
        .unwrap_or_else(|| panic!("{k} missing in {r}"))
}

/// Events lost, and the share of all events that happened, in percent.
fn lost(r: &Value) -> (u64, f64) {
    assert!(n(r, "produced") > 100_000, "the workload hardly ran: {r}");
    let lost = n(r, "dropped") + n(r, "unnumbered");
    (
        lost,
        100.0 * lost as f64 / (n(r, "produced") + n(r, "unnumbered")) as f64,
    )
}

/// One VM at a time: the two tests of this target would otherwise boot
/// side by side and slow each other's emulated CPUs.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

#[test]
fn custos_loses_nothing_under_the_super_producer_where_the_default_scheduler_does() {
    let _g = serial();
    default_loses_and_custos_does_not(1, "");
}

/// Issue 29: on two vCPUs producers run while the consumer runs (and, under
/// the emulator, while its vCPU stands still), so running the consumer first
/// no longer suffices: here only the hold keeps the rings from filling. Its
/// bound needs rings at least the size it computes (`--hold-rings`: 16 MiB,
/// 256 KiB and 16 MiB from 64 KiB), at which the default scheduler still
/// loses most of the flood (asserted). Before the hold, Custos lost records
/// in 2 of 5 and 7 of 12 such runs.
#[test]
fn custos_loses_nothing_under_the_super_producer_on_two_vcpus() {
    let _g = serial();
    default_loses_and_custos_does_not(2, "SP_HOLD_RINGS=1");
}

/// A run under the kernel's default scheduler, then one under Custos, on
/// `cpus` vCPUs: the default must lose more than 5 %, with every skip in
/// band; Custos nothing.
fn default_loses_and_custos_does_not(cpus: u32, extra_env: &str) {
    let bin = Path::new(env!("CARGO_BIN_EXE_custos"));
    let bin_dir = bin.parent().unwrap();
    assert!(
        bin_dir.join("custos-workload").exists(),
        "build the workspace first (make build)"
    );
    let out = tempfile::tempdir().unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/superproducer-guest.sh");
    let env = format!(
        "CUSTOS_BIN={} SP_OUT={} SP_WORKERS={WORKERS} SP_FILES={FILES} SP_RUNS={RUNS} SP_KEEP_EVENTS=0 {extra_env}",
        bin_dir.display(),
        out.path().display()
    );
    let run = Command::new(bin)
        .args(["vm", "run", "-q", "--cpus"])
        .arg(cpus.to_string())
        .args(["--timeout", "1800", "--share"])
        .arg(out.path())
        .args(["--", "sh", "-c"])
        .arg(format!("{env} bash {}", script.display()))
        .output()
        .expect("run custos vm");
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(
        run.status.code(),
        Some(0),
        "stdout: {stdout}\nstderr: {stderr}"
    );
    eprintln!("{stdout}");

    let results: Vec<Value> = std::fs::read_to_string(out.path().join("results.jsonl"))
        .unwrap_or_else(|e| panic!("no results ({e}); stdout: {stdout}\nstderr: {stderr}"))
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let of =
        |name: &str| -> Vec<&Value> { results.iter().filter(|r| r["scheduler"] == name).collect() };
    let (default, custos) = (of("default"), of("custos"));
    assert_eq!(
        default.len(),
        RUNS as usize,
        "default runs; stdout: {stdout}"
    );
    assert_eq!(custos.len(), RUNS as usize, "custos runs; stdout: {stdout}");

    // The attack works: the default scheduler loses more than 5 % every time.
    for r in &default {
        let (_, pct) = lost(r);
        assert!(
            pct > 5.0,
            "the default scheduler lost only {pct:.2} % on {cpus} vCPU(s): {r}"
        );
    }

    skips_are_in_band(out.path());

    // Custos, every run: still attached, marker and every step of the
    // attack delivered, nothing lost.
    for r in &custos {
        assert_eq!(r["sched_ext_state"], "enabled", "{r}");
        assert_eq!(r["marker_delivered"], true, "{r}");
        assert_eq!(r["attack_recorded"], true, "{r}");
        assert_eq!(
            n(r, "dropped"),
            0,
            "custos on {cpus} vCPU(s): records refused by full rings: {r}"
        );
        assert_eq!(
            n(r, "unnumbered"),
            0,
            "custos on {cpus} vCPU(s): syscalls no copy of the program saw: {r}"
        );
        assert_eq!(lost(r).0, 0, "{r}");
    }
}

/// The default scheduler's run: syscalls skipped, all of them in loss records.
fn skips_are_in_band(out: &Path) {
    let text = std::fs::read_to_string(out.join("default.collector-stats.json")).unwrap();
    let stats: Value = serde_json::from_str(text.trim())
        .unwrap_or_else(|e| panic!("no final stats record ({e}): {text:?}"));
    assert!(
        n(&stats, "unnumbered") > 0,
        "the default scheduler skipped nothing: {stats}"
    );
    let losses: Vec<Value> = std::fs::read_to_string(out.join("default.loss.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let skipped = |bound: bool| -> Vec<&Value> {
        losses
            .iter()
            .filter(|l| {
                l["category"] == "skipped" && l["upper_bound"].as_bool().unwrap_or(false) == bound
            })
            .collect()
    };
    let sum = |ls: Vec<&Value>| -> u64 { ls.iter().map(|l| n(l, "count")).sum() };
    assert_eq!(
        sum(skipped(false)),
        n(&stats, "skipped"),
        "exact skips in-band: {stats}"
    );
    assert!(
        sum(skipped(true)) >= n(&stats, "skipped_bound"),
        "the bound in-band covers the final bound: {stats}"
    );
    assert!(
        skipped(false).iter().all(|l| l["cpu"].is_u64()),
        "an exact skip record without its CPU"
    );
}

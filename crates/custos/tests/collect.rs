//! `custos collect` through the real binary: the command mode, its exit
//! status and stderr account, and a bad --syscalls name. Needs root.

use std::process::Command;

/// One collector per machine: the tests that start one take turns.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn collect_runs_a_command_records_it_and_balances_the_account() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().canonicalize().unwrap();
    let out = d.join("events.jsonl");
    let target = d.join("written.txt");
    let script = format!("echo hi > {}; sleep 0.6; exit 7", target.display());
    let run = Command::new(env!("CARGO_BIN_EXE_custos"))
        .args(["collect", "-o", out.to_str().unwrap(), "--stats-interval", "0.2", "--", "sh", "-c", &script])
        .output()
        .unwrap();
    let err = text(&run.stderr);
    assert_eq!(run.status.code(), Some(7), "the command's exit status comes back: {err}");
    assert!(err.contains("custos collect: produced") && err.contains("= delivered"), "{err}");
    assert!(err.contains(" ev/s  produced ") && err.contains("rings used: critical"), "periodic stats on stderr: {err}");

    let lines: Vec<serde_json::Value> =
        std::fs::read_to_string(&out).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let open = lines
        .iter()
        .find(|e| e["type"] == "event" && e["syscall"] == "openat" && e["path"] == target.to_str().unwrap())
        .expect("the command's open-for-write");
    assert_eq!(open["critical"], true);
    assert!(lines.iter().any(|l| l["type"] == "stats" && l["final"] == false), "periodic stats records");
    let last = lines.last().unwrap();
    assert_eq!(last["type"], "stats");
    assert_eq!(last["final"], true);
    assert_eq!(last["invariant_holds"], true);
    assert_eq!(last["produced"].as_u64().unwrap(), last["delivered"].as_u64().unwrap() + last["dropped"].as_u64().unwrap());
}

#[test]
fn an_unknown_syscall_name_is_a_clear_error() {
    let run = Command::new(env!("CARGO_BIN_EXE_custos"))
        .args(["collect", "--syscalls", "execve,conect", "--duration", "1"])
        .output()
        .unwrap();
    let err = text(&run.stderr);
    assert_eq!(run.status.code(), Some(1), "{err}");
    assert!(err.contains("unknown syscall name in --syscalls: `conect` (did you mean `connect`?)"), "{err}");
    assert!(err.contains("--list-syscalls"), "{err}");
}

/// The consumer's memory is out of khugepaged's reach (a preempted
/// khugepaged holding its mmap lock stalled it under a flood), and the
/// command it runs gets transparent huge pages as the system sets them.
#[test]
fn the_collector_keeps_khugepaged_off_its_memory_but_not_its_commands() {
    let _g = serial();
    let run = Command::new(env!("CARGO_BIN_EXE_custos"))
        .args(["collect", "-o", "/dev/null", "--stats-interval", "0", "--", "sh", "-c"])
        .arg("grep THP_enabled /proc/$PPID/status /proc/self/status")
        .output()
        .unwrap();
    let (out, err) = (text(&run.stdout), text(&run.stderr));
    assert_eq!(run.status.code(), Some(0), "{out}{err}");
    // One line each, `/proc/PID/status:THP_enabled:<tab>N`: the collector's, then the command's.
    let thp: Vec<&str> = out.lines().map(|l| l.rsplit('\t').next().unwrap_or("")).collect();
    assert_eq!(thp, ["0", "1"], "THP off for the collector, on for its command: {out}");
}

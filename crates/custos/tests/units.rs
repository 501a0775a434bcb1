//! The systemd units of deploy/systemd/ as systemd would run them: each
//! passes `systemd-analyze verify` and its command line parses; the
//! collector's unit, run as its lines say (ExecStartPre, ExecStart, the
//! KillSignal within TimeoutStopSec, a restart), records with real BPF,
//! stops with its final account, and never overwrites an earlier
//! recording. Paths under /var/lib/custos and /usr/bin/custos are moved into
//! a temporary directory; nothing else of the lines is changed. The
//! collector part needs root (BPF); a host collector test.

mod unit;

use std::path::{Path, PathBuf};
use std::process::Command;
use unit::{pre_script, recording, relocated, run_collect_unit, value};

const UNITS: &[&str] = &[
    "custos-collect.service",
    "custos-sched.service",
    "custos-fleet-ingest.service",
];

fn unit(name: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../deploy/systemd")
        .join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[test]
fn every_unit_verifies_and_its_command_line_parses() {
    let tmp = tempfile::tempdir().unwrap();
    for name in UNITS {
        let text = relocated(&unit(name), env!("CARGO_BIN_EXE_custos"), tmp.path());
        let path = tmp.path().join(name);
        std::fs::write(&path, &text).unwrap();
        let out = Command::new("systemd-analyze")
            .arg("verify")
            .arg(&path)
            .output()
            .expect("systemd-analyze (Debian's systemd package)");
        assert!(
            out.status.success(),
            "{name}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        // clap stops at --help only after parsing (and checking the values
        // of) every argument before it.
        let start = value(&text, "ExecStart");
        let mut words = start.split_whitespace();
        let out = Command::new(words.next().unwrap())
            .args(words)
            .arg("--help")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{name}: ExecStart={start}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn the_collector_unit_records_stops_with_its_account_and_a_restart_keeps_the_recording() {
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path();
    let text = relocated(
        &unit("custos-collect.service"),
        env!("CARGO_BIN_EXE_custos"),
        state,
    );
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();

    let (out, first) = run_collect_unit(&text, state, port);
    // A restart: the first recording is moved aside, byte for byte, and a
    // new one begins.
    let (_, second) = run_collect_unit(&text, state, port);
    let mut kept: Vec<PathBuf> = std::fs::read_dir(state)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p != &out
                && p.file_name()
                    .unwrap()
                    .to_string_lossy()
                    .starts_with("events.")
        })
        .collect();
    assert_eq!(kept.len(), 1, "{kept:?}");
    let kept = kept.pop().unwrap();
    assert!(
        recording(&kept) == first,
        "{} is not the first recording",
        kept.display()
    );
    assert!(second != first);
    // Named by the UTC time of the move: events.YYYYMMDDTHHMMSS.NNNNNNNNNZ
    let name = kept.file_name().unwrap().to_string_lossy().into_owned();
    let stamp = name.strip_prefix("events.").unwrap();
    assert!(
        stamp.len() == 26 && stamp.ends_with('Z') && stamp.as_bytes()[8] == b'T',
        "{name}"
    );

    // A directory already at the name the move would take is neither
    // replaced nor entered: `mv -n -T` leaves both, and collect then
    // refuses the existing series.
    let script = pre_script(&text);
    let stamp = "$(date -u +%Y%m%dT%H%M%S.%NZ)";
    assert!(script.contains(stamp), "{script}");
    let script = script.replace(stamp, "fixed");
    let fixed = state.join("events.fixed");
    std::fs::create_dir(&fixed).unwrap();
    std::fs::write(fixed.join("segment-000001.jsonl"), b"older\n").unwrap();
    let st = Command::new("/bin/sh")
        .args(["-c", &script])
        .status()
        .unwrap();
    assert!(st.success());
    assert!(
        recording(&fixed) == b"older\n",
        "a directory of the same name was replaced or entered"
    );
    assert!(
        recording(&out) == second,
        "the recording was moved onto another directory's name"
    );
    let start = value(&text, "ExecStart").replace("127.0.0.1:9464", &format!("127.0.0.1:{port}"));
    let mut words = start.split_whitespace();
    let refused = Command::new(words.next().unwrap())
        .args(words)
        .output()
        .unwrap();
    assert!(
        !refused.status.success() && String::from_utf8_lossy(&refused.stderr).contains("--force"),
        "collect did not refuse the series left in place: {}",
        String::from_utf8_lossy(&refused.stderr)
    );
    assert!(
        recording(&out) == second,
        "the series left in place was changed"
    );
}

//! The systemd units of deploy/systemd/ as systemd would run them: each
//! passes `systemd-analyze verify` and its command line parses; the
//! collector's unit, run as its lines say (ExecStartPre, ExecStart, the
//! KillSignal within TimeoutStopSec, a restart), records with real BPF,
//! stops with its final account, and never overwrites an earlier
//! recording. Paths under /var/lib/custos and /usr/bin/custos are moved into
//! a temporary directory; nothing else of the lines is changed. The
//! collector part needs root (BPF); a host collector test.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

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

/// The value of `key=` in the unit (the first, comments skipped).
fn value(text: &str, key: &str) -> String {
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix('=').map(str::to_string))
        .unwrap_or_else(|| panic!("no {key}= in the unit"))
}

/// A unit's text with the installed paths moved under `root`.
fn relocated(text: &str, root: &Path) -> String {
    text.replace("/usr/bin/custos", env!("CARGO_BIN_EXE_custos"))
        .replace("/var/lib/custos", &root.to_string_lossy())
}

/// The script of `ExecStartPre=/bin/sh -c '...'`, with systemd's `%%`
/// specifier unescaped as systemd does before running the line.
fn pre_script(text: &str) -> String {
    let pre = value(text, "ExecStartPre");
    pre.strip_prefix("/bin/sh -c '")
        .and_then(|s| s.strip_suffix('\''))
        .unwrap_or_else(|| panic!("ExecStartPre is not /bin/sh -c '...': {pre}"))
        .replace("%%", "%")
}

/// A rotated recording's segments laid end to end: the stream.
fn recording(dir: &Path) -> Vec<u8> {
    let mut segments: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| d.map(|e| e.unwrap().path()).collect())
        .unwrap_or_default();
    // segment-NNNNNN.jsonl: the padded numbers sort by name.
    segments.sort();
    segments
        .iter()
        .flat_map(|p| std::fs::read(p).unwrap())
        .collect()
}

/// What a child wrote to its piped stderr, once it has exited.
fn stderr_of(child: &mut std::process::Child) -> String {
    let mut err = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).ok();
    err
}

fn seconds(v: &str) -> u64 {
    v.strip_suffix('s').unwrap_or(v).parse().unwrap()
}

#[test]
fn every_unit_verifies_and_its_command_line_parses() {
    let tmp = tempfile::tempdir().unwrap();
    for name in UNITS {
        let text = relocated(&unit(name), tmp.path());
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

/// Runs the collector unit's ExecStartPre then ExecStart until it has
/// written events, stops it with its KillSignal, and returns the recording.
fn run_collect_unit(text: &str, state: &Path, port: u16) -> (PathBuf, Vec<u8>) {
    let script = pre_script(text);
    let st = Command::new("/bin/sh")
        .args(["-c", &script])
        .status()
        .unwrap();
    assert!(st.success(), "ExecStartPre failed");

    let start = value(text, "ExecStart").replace("127.0.0.1:9464", &format!("127.0.0.1:{port}"));
    let mut words = start.split_whitespace();
    let mut child = Command::new(words.next().unwrap())
        .args(words)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = state.join("events");
    let t0 = Instant::now();
    // A process's opens, recorded under the unit's lines (a child: the
    // collector leaves out its own parent, this test).
    while !recording(&out).windows(8).any(|w| w == b"\"openat\"") {
        Command::new("cat")
            .arg("/etc/hostname")
            .stdout(Stdio::null())
            .status()
            .unwrap();
        if let Ok(Some(st)) = child.try_wait() {
            panic!(
                "the collector exited at once ({st}): {}",
                stderr_of(&mut child)
            );
        }
        if t0.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            let err = stderr_of(&mut child);
            panic!(
                "no open recorded in 60 s ({}, {} bytes): {err}",
                out.display(),
                recording(&out).len()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // Its metrics are served where the line says.
    let scrape = std::net::TcpStream::connect(("127.0.0.1", port));
    assert!(scrape.is_ok(), "--metrics not served: {scrape:?}");

    let signal = value(text, "KillSignal");
    let stop = Duration::from_secs(seconds(&value(text, "TimeoutStopSec")));
    let t1 = Instant::now();
    let kill = Command::new("kill")
        .args([
            &format!("-{}", signal.trim_start_matches("SIG")),
            &child.id().to_string(),
        ])
        .status()
        .unwrap();
    assert!(kill.success());
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if t1.elapsed() > stop {
            let _ = child.kill();
            panic!("not stopped by {signal} within TimeoutStopSec ({stop:?}): systemd would SIGKILL it");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let err = stderr_of(&mut child);
    assert!(
        status.success(),
        "{signal} is a clean stop: {status}: {err}"
    );
    let body = recording(&out);
    assert!(
        String::from_utf8_lossy(&body)
            .lines()
            .any(|l| l.contains("\"type\":\"stats\"") && l.contains("\"final\":true")),
        "no final account after {signal}: {err}"
    );
    (out, body)
}

#[test]
fn the_collector_unit_records_stops_with_its_account_and_a_restart_keeps_the_recording() {
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path();
    let text = relocated(&unit("custos-collect.service"), state);
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

//! The units of deploy/systemd/ run as systemd would run them, outside
//! systemd: shared by tests/units.rs (the units in the tree) and
//! tests/package.rs (the units the .deb installs).

// Each test crate that includes this module uses only some of it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The value of `key=` in the unit (the first, comments skipped).
pub fn value(text: &str, key: &str) -> String {
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix('=').map(str::to_string))
        .unwrap_or_else(|| panic!("no {key}= in the unit"))
}

/// A unit's (or the config file's) text with the installed paths moved:
/// /usr/bin/custos to `custos` (a command: it may carry options),
/// /var/lib/custos under `root`.
pub fn relocated(text: &str, custos: &str, root: &Path) -> String {
    text.replace("/usr/bin/custos", custos)
        .replace("/var/lib/custos", &root.to_string_lossy())
}

/// The script of `ExecStartPre=/bin/sh -c '...'`, with systemd's `%%`
/// specifier unescaped as systemd does before running the line.
pub fn pre_script(text: &str) -> String {
    let pre = value(text, "ExecStartPre");
    pre.strip_prefix("/bin/sh -c '")
        .and_then(|s| s.strip_suffix('\''))
        .unwrap_or_else(|| panic!("ExecStartPre is not /bin/sh -c '...': {pre}"))
        .replace("%%", "%")
}

/// A rotated recording's segments laid end to end: the stream.
pub fn recording(dir: &Path) -> Vec<u8> {
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
pub fn stderr_of(child: &mut std::process::Child) -> String {
    let mut err = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).ok();
    err
}

pub fn seconds(v: &str) -> u64 {
    v.strip_suffix('s').unwrap_or(v).parse().unwrap()
}

/// Runs the collector unit's ExecStartPre then ExecStart until it has
/// written events, stops it with its KillSignal, and returns the recording.
pub fn run_collect_unit(text: &str, state: &Path, port: u16) -> (PathBuf, Vec<u8>) {
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

//! The units of deploy/systemd/ run as systemd would run them, outside
//! systemd, with the configuration file they name (`--config
//! /etc/custos/custos.toml`, the only option they pass): shared by
//! tests/units.rs (the units and deploy/custos.toml in the tree) and
//! tests/package.rs (those the .deb installs).

// Each test crate that includes this module uses only some of it.
#![allow(dead_code)]

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The value of `key=` in the unit (the first, comments skipped).
pub fn value(text: &str, key: &str) -> String {
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix('=').map(str::to_string))
        .unwrap_or_else(|| panic!("no {key}= in the unit"))
}

/// Where the package installs the binary, as the units name it.
pub const BIN: &str = "/usr/bin/custos";
/// Where the package installs the configuration file, as the units name
/// it (crates/custos/Cargo.toml, [package.metadata.deb]).
pub const CONFIG: &str = "/etc/custos/custos.toml";

/// A unit's text with its two paths moved: /usr/bin/custos to `custos`,
/// /etc/custos/custos.toml to `config` (the test's). Nothing else is
/// changed: the unit's ExecStart, which must pass `--config` that file,
/// is run as it is, so the command reads the config through the unit's
/// own option.
pub fn relocated(text: &str, custos: &Path, config: &Path) -> String {
    let start = value(text, "ExecStart");
    assert!(
        start.starts_with(&format!("{BIN} --config {CONFIG} ")),
        "ExecStart={start}: not `{BIN} --config {CONFIG} ...`"
    );
    text.replace(BIN, custos.to_str().unwrap())
        .replace(CONFIG, config.to_str().unwrap())
}

/// A port on 127.0.0.1 nothing listens on.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A configuration file's text (deploy/custos.toml, or the one the package
/// installs) as a test runs the units with it: every value under
/// /var/lib/custos moved under `root`, every `metrics` address to a free
/// port of 127.0.0.1; nothing else changed.
pub fn relocated_config(text: &str, root: &Path) -> toml::Table {
    let mut file: toml::Table = text.parse().expect("the config file is TOML");
    for (name, table) in file.iter_mut() {
        let toml::Value::Table(table) = table else {
            panic!("[{name}] is not a table");
        };
        for (key, v) in table.iter_mut() {
            let toml::Value::String(s) = v else { continue };
            if let Some(rest) = s.strip_prefix("/var/lib/custos") {
                *s = format!("{}{rest}", root.display());
            }
            if key == "metrics" {
                *s = format!("127.0.0.1:{}", free_port());
            }
        }
    }
    file
}

/// Writes `file` to `path`.
pub fn write_config(file: &toml::Table, path: &Path) {
    std::fs::write(path, toml::to_string(file).unwrap()).unwrap();
}

/// The string `[table] key` of a config file.
pub fn config_str(file: &toml::Table, table: &str, key: &str) -> String {
    file[table][key]
        .as_str()
        .unwrap_or_else(|| panic!("[{table}] {key} is not a string"))
        .to_string()
}

/// Sets `[table] key` of a config file.
pub fn set_config(file: &mut toml::Table, table: &str, key: &str, v: impl Into<toml::Value>) {
    file[table]
        .as_table_mut()
        .unwrap()
        .insert(key.to_string(), v.into());
}

/// The segments of a rotated recording, by number.
pub fn segments(dir: &Path) -> Vec<(u64, PathBuf)> {
    let mut v: Vec<(u64, PathBuf)> = std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(|e| {
                let p = e.unwrap().path();
                let n = p
                    .file_name()?
                    .to_str()?
                    .strip_prefix("segment-")?
                    .strip_suffix(".jsonl")?
                    .parse()
                    .ok()?;
                Some((n, p))
            })
            .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// A rotated recording's segments laid end to end: the stream (while the
/// collector runs, a segment it rotates away between the listing and the
/// read is left out).
pub fn recording(dir: &Path) -> Vec<u8> {
    segments(dir)
        .iter()
        .flat_map(|(_, p)| match std::fs::read(p) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            r => r.unwrap(),
        })
        .collect()
}

/// Whether the recording in `dir` holds an open (the workload's `cat`).
pub fn recorded_an_open(dir: &Path) -> bool {
    recording(dir).windows(8).any(|w| w == b"\"openat\"")
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

/// The unit's ExecStart line with the privileges the unit gives it: only
/// its CapabilityBoundingSet, and NoNewPrivileges, through util-linux's
/// `setpriv`, as systemd would set them. The units run as root (no
/// `User=`), whose capabilities after exec are the bounding set's; their
/// AmbientCapabilities (the same list) would matter only under a `User=`,
/// and cannot be raised here past what this process holds (this host's
/// container has no CAP_SYS_RESOURCE). The unit's other sandboxing (ProtectSystem, PrivateTmp,
/// MemoryDenyWriteExecute, RestrictAddressFamilies, ...) needs systemd as
/// the service manager and is not applied: the tests run the units'
/// lines outside systemd (the VM has no systemd).
pub fn confined_exec_start(text: &str) -> Vec<String> {
    let caps = |key: &str| -> String {
        let names: Vec<String> = value(text, key)
            .split_whitespace()
            .map(|c| {
                let c = c
                    .strip_prefix("CAP_")
                    .unwrap_or_else(|| panic!("{key}: {c} is not a CAP_ name"));
                format!("+{}", c.to_lowercase())
            })
            .collect();
        format!("-all,{}", names.join(","))
    };
    let mut argv: Vec<String> = ["setpriv", "--bounding-set"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    argv.push(caps("CapabilityBoundingSet"));
    assert_eq!(value(text, "NoNewPrivileges"), "yes");
    argv.push("--no-new-privs".to_string());
    argv.extend(
        value(text, "ExecStart")
            .split_whitespace()
            .map(str::to_string),
    );
    argv
}

/// The unit's ExecStart line as a command, confined as the unit says
/// (`confined_exec_start`).
fn exec_start(text: &str) -> Command {
    let argv = confined_exec_start(text);
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..]);
    cmd
}

/// Runs the collector unit's ExecStart, which records to `out` (its
/// config's output, a new directory: an earlier one is set aside) and
/// serves metrics on `port`, until `done(out)`, with a workload of short
/// processes beside it; stops it with its
/// KillSignal, and returns the recording and its stderr.
pub fn run_collect_unit(
    text: &str,
    out: &Path,
    port: u16,
    mut done: impl FnMut(&Path) -> bool,
) -> (Vec<u8>, String) {
    let mut child = exec_start(text)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    // Until then `out` may be the earlier recording, not yet set aside.
    let inode = |p: &Path| std::fs::metadata(p).ok().map(|m| m.ino());
    let earlier = inode(out);
    // A process's opens, recorded under the unit's lines (a child: the
    // collector leaves out its own parent, this test).
    while inode(out).is_none() || inode(out) == earlier || !done(out) {
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
        if t0.elapsed() > Duration::from_secs(120) {
            let _ = child.kill();
            let err = stderr_of(&mut child);
            panic!(
                "not done in 120 s ({}, {} bytes): {err}",
                out.display(),
                recording(out).len()
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    // Its metrics are served where the config says.
    let scrape = std::net::TcpStream::connect(("127.0.0.1", port));
    assert!(scrape.is_ok(), "metrics not served on {port}: {scrape:?}");

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
    let body = recording(out);
    assert!(
        String::from_utf8_lossy(&body)
            .lines()
            .any(|l| l.contains("\"type\":\"stats\"") && l.contains("\"final\":true")),
        "no final account after {signal}: {err}"
    );
    (body, err)
}

/// Runs the unit's ExecStart expecting a refusal before it records:
/// returns its stderr.
pub fn refused_collect_unit(text: &str) -> String {
    let out = exec_start(text).stdin(Stdio::null()).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "not refused: {err}");
    err
}

/// The recordings set aside beside `out` (`NAME.YYYYMMDDTHHMMSS.NNNNNNNNNZ`),
/// oldest first (the stamps sort as the times do), each name checked.
pub fn set_aside(out: &Path) -> Vec<PathBuf> {
    let prefix = format!("{}.", out.file_name().unwrap().to_string_lossy());
    let mut v: Vec<PathBuf> = std::fs::read_dir(out.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with(&prefix)
        })
        .collect();
    v.sort();
    for p in &v {
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        let stamp = &name[prefix.len()..];
        let b = stamp.as_bytes();
        assert!(
            stamp.len() == 26
                && b[8] == b'T'
                && b[15] == b'.'
                && b[25] == b'Z'
                && stamp[..8].bytes().all(|c| c.is_ascii_digit())
                && stamp[16..25].bytes().all(|c| c.is_ascii_digit()),
            "{name}"
        );
    }
    v
}

//! The systemd units of deploy/systemd/ as systemd would run them, with
//! deploy/custos.toml as their /etc/custos/custos.toml: each unit passes
//! `systemd-analyze verify` and its command line parses with the config;
//! every unit passes `--config /etc/custos/custos.toml` (where the package
//! installs the file) and no option the config sets (the config is the
//! one place a service is configured, and a command typed by hand reads
//! no file by itself); the collector's unit, run as its lines say
//! (ExecStart, the KillSignal within TimeoutStopSec, restarts), records
//! with real BPF where the config says and rotates by its values, stops
//! with its final account, sets each earlier recording aside byte for
//! byte, and refuses to start rather than move a recording it cannot.
//! Paths under /var/lib/custos and the metrics ports of the config are
//! moved into a temporary directory and to free ports, the units'
//! /usr/bin/custos is this build and their /etc/custos/custos.toml that
//! file; nothing else is changed. The collector part needs root (BPF); a
//! host collector test.

mod shipped;
mod unit;

use std::path::{Path, PathBuf};
use std::process::Command;
use unit::{
    config_str, confined_exec_start, recorded_an_open, recording, refused_collect_unit, relocated,
    relocated_config, run_collect_unit, seconds, segments, set_aside, set_config, value,
    write_config, BIN, CONFIG,
};

const UNITS: &[&str] = &[
    "custos-collect.service",
    "custos-sched.service",
    "custos-fleet-ingest.service",
];

fn deploy(name: &str) -> String {
    let p = shipped::deployed(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn unit(name: &str) -> String {
    deploy(&format!("systemd/{name}"))
}

/// The unit with this build in place of /usr/bin/custos and `config` in
/// place of /etc/custos/custos.toml (which its ExecStart passes to --config).
fn with_config(name: &str, config: &Path) -> String {
    relocated(&unit(name), Path::new(env!("CARGO_BIN_EXE_custos")), config)
}

#[test]
fn every_unit_verifies_and_its_command_line_parses() {
    let tmp = tempfile::tempdir().unwrap();
    let config = tmp.path().join("custos.toml");
    write_config(
        &relocated_config(&deploy("custos.toml"), tmp.path()),
        &config,
    );
    for name in UNITS {
        let text = with_config(name, &config);
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
        // of) every argument before it, the config's included.
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

/// The long names of a subcommand's short options (`o` → `output`), from
/// its --help: the binary's own definition, not a list kept here.
fn longs_of_shorts(subcommand: &[&str]) -> Vec<(char, String)> {
    let out = Command::new(env!("CARGO_BIN_EXE_custos"))
        .args(subcommand)
        .arg("--help")
        .output()
        .unwrap();
    assert!(out.status.success(), "{subcommand:?} --help");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let l = l.trim_start().strip_prefix('-')?;
            let (short, rest) = l.split_once(", --")?;
            let long = rest.split([' ', '=', '<']).next()?;
            Some((short.chars().next()?, long.to_string()))
        })
        .collect()
}

/// The configuration has one home: a unit that passed an option the config
/// sets would override it, and an operator's edit of the config would
/// change nothing for that service. The file is read only when named
/// (src/config.rs), so every unit names it: `--config`, before the
/// subcommand, the file the package installs.
#[test]
fn every_unit_passes_the_config_and_no_option_it_sets() {
    let config: toml::Table = deploy("custos.toml").parse().unwrap();
    let mut tables_used = Vec::new();
    for name in UNITS {
        let text = unit(name);
        let start = value(&text, "ExecStart");
        let words: Vec<&str> = start.split_whitespace().collect();
        assert!(
            words.len() > 3 && words[..3] == [BIN, "--config", CONFIG],
            "{name}: ExecStart={start}: not `{BIN} --config {CONFIG} SUBCOMMAND`"
        );
        let words = &words[3..];
        let path: Vec<&str> = words
            .iter()
            .copied()
            .take_while(|w| !w.starts_with('-'))
            .collect();
        let table = path.join("-");
        let shorts = longs_of_shorts(&path);
        let set = config
            .get(&table)
            .and_then(|t| t.as_table())
            .map(|t| t.keys().cloned().collect::<Vec<_>>())
            .unwrap_or_default();
        for w in &words[path.len()..] {
            let long = match w.strip_prefix("--") {
                Some(l) => l.split('=').next().unwrap().to_string(),
                None => match w.strip_prefix('-').and_then(|s| s.chars().next()) {
                    Some(c) => shorts
                        .iter()
                        .find(|(s, _)| *s == c)
                        .map(|(_, l)| l.clone())
                        .unwrap_or_else(|| panic!("{name}: no long name for {w}")),
                    None => continue,
                },
            };
            assert!(
                !set.contains(&long),
                "{name}: ExecStart passes {w} (--{long}), which deploy/custos.toml's [{table}] sets: the unit's would override the file's"
            );
        }
        tables_used.push(table);
    }
    // The tables the units read, named as src/config.rs names them.
    assert_eq!(tables_used, ["collect", "sched", "fleet-ingest"]);
}

/// The file the units name is the one the package installs, and where:
/// deploy/custos.toml at /etc/custos/custos.toml (the package's assets in
/// crates/custos/Cargo.toml; tests/package.rs checks the built .deb).
#[test]
fn the_units_config_is_where_the_package_installs_it() {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml");
    let manifest: toml::Table = std::fs::read_to_string(&manifest).unwrap().parse().unwrap();
    let assets = manifest["package"]["metadata"]["deb"]["assets"]
        .as_array()
        .expect("[package.metadata.deb] assets");
    let to: Vec<&str> = assets
        .iter()
        .filter_map(|a| {
            let a = a.as_array()?;
            (a[0].as_str()? == "../../deploy/custos.toml").then(|| a[1].as_str().unwrap())
        })
        .collect();
    assert_eq!(to, [CONFIG.trim_start_matches('/')], "{assets:?}");
    // And the binary the units run.
    assert!(
        assets
            .iter()
            .any(|a| a[0].as_str() == Some("target/release/custos")
                && a[1].as_str().map(|d| format!("/{d}custos")).as_deref() == Some(BIN)),
        "{assets:?}"
    );
}

/// A tmpfs mounted for the test, unmounted when it ends (also on a panic).
struct Mounted(PathBuf);

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

#[test]
fn the_collector_unit_records_where_the_config_says_rotates_by_it_and_sets_earlier_recordings_aside(
) {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let config = root.join("custos.toml");
    let mut file = relocated_config(&deploy("custos.toml"), root);
    // Another output and smaller segments than the shipped ones: the unit
    // follows the file, with nothing of them on its command line.
    let out = root.join("recordings");
    set_config(&mut file, "collect", "output", out.to_str().unwrap());
    set_config(&mut file, "collect", "rotate-mb", 1);
    set_config(&mut file, "collect", "rotate-keep", 2);
    write_config(&file, &config);
    let port: u16 = config_str(&file, "collect", "metrics")
        .rsplit(':')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let text = with_config("custos-collect.service", &config);

    // Rotated by 1 MiB, the newest 2 kept.
    let (first, _) = run_collect_unit(&text, &out, port, |o| {
        segments(o).last().is_some_and(|(n, _)| *n >= 4)
    });
    // Segments 1 and 2 rotated away (for up to a batch there are 3).
    let kept = segments(&out);
    assert!(kept.len() <= 3 && kept[0].0 >= 3, "rotate-keep 2: {kept:?}");
    // A segment is closed at the first seal past 1 MiB (a seal comes at
    // least every 4096 lines): nowhere near the shipped 256 MiB.
    let closed = std::fs::metadata(&kept[0].1).unwrap().len();
    assert!(
        (1 << 20..16 << 20).contains(&closed),
        "a closed segment of {closed} bytes with rotate-mb 1"
    );
    assert!(set_aside(&out).is_empty());

    // Two restarts: each earlier recording is set aside, byte for byte,
    // under its name and the time, and a new one begins.
    let (second, err) = run_collect_unit(&text, &out, port, recorded_an_open);
    assert!(err.contains("set the earlier recording aside"), "{err}");
    let aside = set_aside(&out);
    assert_eq!(aside.len(), 1, "{aside:?}");
    assert!(
        recording(&aside[0]) == first,
        "{aside:?} is not the first recording"
    );
    let (third, _) = run_collect_unit(&text, &out, port, recorded_an_open);
    let aside = set_aside(&out);
    assert_eq!(aside.len(), 2, "{aside:?}");
    assert!(recording(&aside[0]) == first && recording(&aside[1]) == second);
    assert!(recording(&out) == third && third != second);

    let names = || {
        let mut v: Vec<_> = std::fs::read_dir(root)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        v.sort();
        v
    };
    let before = names();
    // A bad value in the file: refused before anything is moved.
    let mut bad = file.clone();
    set_config(&mut bad, "collect", "rotate-keep", 0);
    write_config(&bad, &config);
    let err = refused_collect_unit(&text);
    assert!(err.contains("--rotate-keep must be at least 1"), "{err}");
    assert_eq!(names(), before);
    assert!(recording(&out) == third);

    // A recording that cannot be renamed (a mount point): the collector
    // refuses to start, saying why, and leaves it where and as it is.
    let mounted = root.join("mounted");
    std::fs::create_dir(&mounted).unwrap();
    let st = Command::new("mount")
        .args(["-t", "tmpfs", "custos-test", mounted.to_str().unwrap()])
        .status()
        .unwrap();
    assert!(st.success(), "mount -t tmpfs (needs root)");
    let _unmount = Mounted(mounted.clone());
    std::fs::write(mounted.join("segment-000001.jsonl"), b"earlier\n").unwrap();
    let before = names();
    let mut on_mount = file.clone();
    set_config(
        &mut on_mount,
        "collect",
        "output",
        mounted.to_str().unwrap(),
    );
    write_config(&on_mount, &config);
    let err = refused_collect_unit(&text);
    assert!(
        err.contains("cannot be set aside") && err.contains("mount point"),
        "{err}"
    );
    assert_eq!(
        std::fs::read(mounted.join("segment-000001.jsonl")).unwrap(),
        b"earlier\n"
    );
    assert_eq!(std::fs::read_dir(&mounted).unwrap().count(), 1);
    assert_eq!(names(), before);
}

/// The "key value" lines a guest script printed.
fn guest_results(stdout: &str) -> std::collections::BTreeMap<String, String> {
    stdout
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(k, v)| (k.to_string(), v.trim().to_string()))
        .collect()
}

/// The scheduler's and the collector's units in the sched_ext VM (the
/// host kernel has no sched_ext), run as their lines say, as the other
/// tests here run the collector's: each ExecStart with the unit's
/// capabilities and NoNewPrivileges (`setpriv`; the rest of the sandbox
/// needs systemd, which the VM does not run), with deploy/custos.toml,
/// watched by a real Prometheus loading the shipped rule file and scraping
/// both ports. Either may start first: here the scheduler does, pinning
/// the feature maps the collector then shares. `custos status` follows
/// each state (collector missing: 3; both: 0; the scheduler killed or
/// stopped: 4, the collector running on). Under a find flood on 2 vCPUs
/// with the config's rings `CustosEventsLost` must not fire and nothing
/// is lost; the scheduler killed, the kernel falls back to its own
/// scheduler, and started again (Restart=on-failure, after RestartSec) it
/// attaches beside the running collector; stopped by its KillSignal within
/// TimeoutStopSec, the same flood under the kernel's scheduler loses
/// events and the alert fires. The collector's unit then stops within its
/// TimeoutStopSec, and its rotated recording verifies.
#[test]
fn the_units_run_the_scheduler_and_collector_in_the_vm_and_the_alert_tells_them_apart() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let config = root.join("custos.toml");
    let file = relocated_config(&deploy("custos.toml"), root);
    write_config(&file, &config);
    let port = |table: &str| -> String {
        config_str(&file, table, "metrics")
            .rsplit(':')
            .next()
            .unwrap()
            .to_string()
    };
    let collect = with_config("custos-collect.service", &config);
    let sched = with_config("custos-sched.service", &config);
    let signal = |text: &str| {
        value(text, "KillSignal")
            .trim_start_matches("SIG")
            .to_string()
    };
    let timeout = |text: &str| seconds(&value(text, "TimeoutStopSec")).to_string();
    let bin = Path::new(env!("CARGO_BIN_EXE_custos"));
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/guest/units.sh");
    let env: Vec<(&str, String)> = vec![
        ("B", bin.parent().unwrap().display().to_string()),
        ("OUT", root.display().to_string()),
        ("COLLECT", confined_exec_start(&collect).join(" ")),
        ("SCHED", confined_exec_start(&sched).join(" ")),
        ("COLLECT_SIGNAL", signal(&collect)),
        ("COLLECT_TIMEOUT", timeout(&collect)),
        ("SCHED_SIGNAL", signal(&sched)),
        ("SCHED_TIMEOUT", timeout(&sched)),
        (
            "RESTART_SEC",
            seconds(&value(&sched, "RestartSec")).to_string(),
        ),
        ("EVENTS", config_str(&file, "collect", "output")),
        ("PROM", unit::free_port().to_string()),
        ("COLLECT_PORT", port("collect")),
        ("SCHED_PORT", port("sched")),
        (
            "RULES",
            shipped::deployed("prometheus/custos-rules.yml")
                .canonicalize()
                .unwrap()
                .display()
                .to_string(),
        ),
        ("FILES", "1000".to_string()),
    ];
    let env: Vec<String> = env.iter().map(|(k, v)| format!("{k}='{v}'")).collect();
    let t0 = std::time::Instant::now();
    let run = Command::new(bin)
        .args([
            "vm",
            "run",
            "-q",
            "--cpus",
            "2",
            "--timeout",
            "1500",
            "--share",
        ])
        .arg(root)
        .args(["--", "sh", "-c"])
        .arg(format!("env {} bash {}", env.join(" "), script.display()))
        .output()
        .expect("run custos vm");
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    let log = |name: &str| std::fs::read_to_string(root.join(name)).unwrap_or_default();
    let context = format!(
        "stdout: {stdout}\nstderr: {stderr}\nsched: {}{}\ncollect: {}",
        log("sched-first.log"),
        log("sched-restarted.log"),
        log("collect.log")
    );
    assert_eq!(run.status.code(), Some(0), "{context}");
    let r = guest_results(&stdout);
    let got = |k: &str| r.get(k).map(String::as_str).unwrap_or("(missing)");
    assert_eq!(got("done"), "yes", "{context}");
    let json = |name: &str| -> serde_json::Value {
        serde_json::from_str(&log(name)).unwrap_or_else(|e| panic!("{name}: {e}; {context}"))
    };
    let result = |name: &str| -> Vec<serde_json::Value> {
        let q = json(&format!("query-{name}.json"));
        assert_eq!(q["status"], "success", "{name}: {q}");
        q["data"]["result"].as_array().unwrap().clone()
    };
    let scalar = |name: &str| -> f64 {
        let r = result(name);
        assert_eq!(r.len(), 1, "{name}: {r:?}; {context}");
        r[0]["value"][1].as_str().unwrap().parse().unwrap()
    };
    let version = String::from_utf8(Command::new(bin).arg("--version").output().unwrap().stdout)
        .unwrap()
        .split_whitespace()
        .last()
        .unwrap()
        .to_string();

    assert_eq!(got("prometheus.ready"), "yes", "{context}");
    // The scheduler alone: attached, the collector missing (exit 3).
    assert_eq!(got("sched.first.attached"), "yes", "{context}");
    assert_eq!(got("status.sched-only"), "3", "{context}");
    let alone = json("status-sched-only.json");
    assert_eq!(alone["scheduler"]["running"], true, "{alone}");
    assert_eq!(alone["scheduler"]["version"], version.as_str(), "{alone}");
    assert_eq!(alone["collector"]["running"], false, "{alone}");
    // Both, the collector started second on the scheduler's pins.
    assert_eq!(got("status.both"), "0", "{context}");
    let both = json("status-both.json");
    assert_eq!(both["collector"]["running"], true, "{both}");
    assert_eq!(both["collector"]["version"], version.as_str(), "{both}");
    // The scheduler's metrics where the config says, scraped by Prometheus.
    assert_eq!(got("sched.metrics_rc"), "0", "{context}");
    let metrics = log("sched-metrics.txt");
    assert!(
        metrics.contains(&format!(
            "custos_sched_build_info{{version=\"{version}\"}} 1"
        )),
        "{metrics}"
    );
    assert_eq!(scalar("sched-up"), 1.0, "{context}");

    // Under custos sched: nothing lost, the alert never fired.
    assert!(
        scalar("custos-produced") > 100_000.0,
        "the flood hardly ran: {context}"
    );
    assert_eq!(scalar("custos-lost"), 0.0, "{context}");
    assert!(
        result("custos-alert").is_empty(),
        "CustosEventsLost fired under custos sched: {context}"
    );
    assert_eq!(got("status.after-custos-flood"), "0", "{context}");

    // Killed: the kernel's scheduler again, the collector running on;
    // started again, it attaches beside it.
    assert_eq!(got("sched.killed_state"), "disabled", "{context}");
    assert_eq!(got("status.sched-killed"), "4", "{context}");
    assert_eq!(
        json("status-sched-killed.json")["collector"]["running"],
        true
    );
    assert_eq!(got("sched.restarted.attached"), "yes", "{context}");
    assert_eq!(got("status.restarted"), "0", "{context}");

    // Stopped by its KillSignal within TimeoutStopSec, with its final stats.
    assert_eq!(r.get("sched.stop_timed_out"), None, "{context}");
    assert_eq!(got("sched.stop_rc"), "0", "{context}");
    assert_eq!(got("sched.stopped_state"), "disabled", "{context}");
    assert_eq!(got("status.sched-stopped"), "4", "{context}");
    let stopped = json("status-sched-stopped.json");
    assert!(
        stopped["scheduler"]["says"]
            .as_str()
            .unwrap()
            .contains("no sched_ext scheduler is attached"),
        "{stopped}"
    );
    // Under the kernel's scheduler the flood overflows the rings: the alert fires.
    assert!(
        scalar("default-lost") > 0.0,
        "the default scheduler lost nothing: the flood shows nothing; {context}"
    );
    assert_eq!(got("default.alert_fired"), "yes", "{context}");

    // The collector's unit stops within its TimeoutStopSec; its recording verifies.
    assert_eq!(r.get("collect.stop_timed_out"), None, "{context}");
    assert_eq!(got("collect.stop_rc"), "0", "{context}");
    assert_eq!(got("verify.rc"), "0", "{}; {context}", log("verify.log"));
    eprintln!(
        "units in the VM: {:.0} s; floods {} s under custos sched, the alert {} s into the default's; stops {} ms (sched), {} ms (collector)",
        t0.elapsed().as_secs_f64(),
        got("flood.custos_s"),
        got("default.alert_after_s"),
        got("sched.stop_ms"),
        got("collect.stop_ms"),
    );
}

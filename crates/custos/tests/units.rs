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

mod unit;

use std::path::{Path, PathBuf};
use std::process::Command;
use unit::{
    config_str, recorded_an_open, recording, refused_collect_unit, relocated, relocated_config,
    run_collect_unit, segments, set_aside, set_config, value, write_config, BIN, CONFIG,
};

const UNITS: &[&str] = &[
    "custos-collect.service",
    "custos-sched.service",
    "custos-fleet-ingest.service",
];

fn deploy(name: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../deploy")
        .join(name);
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

//! `custos collect --features-only`: the per-task features count what a
//! recording run would count, and nothing is recorded. Needs root; the
//! binary tests need the workspace built (`cargo build --release --workspace`).

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use custos_collector::features::{self, read_global, read_task, task_bytes, TaskFeatures};
use custos_collector::Options;
use libbpf_rs::{MapCore, MapFlags, MapHandle};

/// openat+close pairs the storm makes: 2 × PAIRS traced syscalls.
const PAIRS: u64 = 20_000;
/// Besides the pairs the storm's thread makes a few traced syscalls it
/// cannot avoid: the read of its go line, the write of `done`, and one
/// write of `ready` whose exit may come after the test looked.
const SLACK: u64 = 16;

/// The `custos` binary of this build (target/<profile>/custos, beside the
/// deps directory this test runs from, whatever CARGO_TARGET_DIR is).
fn custos_bin() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let bin = exe
        .parent()
        .and_then(|deps| deps.parent())
        .unwrap()
        .join("custos");
    assert!(
        bin.exists(),
        "{} missing: build the workspace first (cargo build --release --workspace)",
        bin.display()
    );
    bin
}

/// One thread that waits for a line, opens and closes /dev/null PAIRS
/// times (half, a pause longer than a rate window so the rate rolls, half),
/// says `done` and waits for a line before it exits.
struct Storm {
    child: Child,
    stdin: std::process::ChildStdin,
    stdout: BufReader<std::process::ChildStdout>,
}

impl Storm {
    fn start() -> Storm {
        let script = format!(
            "import os, sys, time\n\
             def pairs(n):\n    for _ in range(n): os.close(os.open('/dev/null', os.O_RDONLY))\n\
             print('ready', flush=True)\nsys.stdin.readline()\n\
             pairs({half})\ntime.sleep(0.25)\npairs({half})\n\
             print('done', flush=True)\nsys.stdin.readline()\n",
            half = PAIRS / 2
        );
        let mut child = Command::new("python3")
            .args(["-c", &script])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3");
        let (stdin, stdout) = (
            child.stdin.take().unwrap(),
            BufReader::new(child.stdout.take().unwrap()),
        );
        let mut storm = Storm {
            child,
            stdin,
            stdout,
        };
        storm.expect_line("ready");
        storm
    }

    fn expect_line(&mut self, want: &str) {
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        assert_eq!(line.trim(), want);
    }

    /// Runs the storm and returns its thread's feature entry. Before, the
    /// entry is overwritten with what a dead thread under the same tid
    /// would have left (another start time, a flood's counts): the storm
    /// must start from zero, not inherit them.
    fn run(&mut self, tasks: &MapHandle) -> TaskFeatures {
        let tid = self.child.id();
        std::thread::sleep(Duration::from_millis(50));
        let mut left = read_task(&vec![0u8; std::mem::size_of::<TaskFeatures>()]).unwrap();
        (left.start_time_ns, left.events_total, left.event_rate) = (1, 1 << 40, 1 << 30);
        tasks
            .update(&tid.to_ne_bytes(), task_bytes(&left), MapFlags::ANY)
            .unwrap();
        writeln!(self.stdin).unwrap();
        self.expect_line("done");
        let raw = tasks
            .lookup(&tid.to_ne_bytes(), MapFlags::ANY)
            .unwrap()
            .expect("the storm's thread has a feature entry");
        read_task(&raw).unwrap()
    }

    /// Lets it exit; its entry goes with it.
    fn finish(mut self, tasks: &MapHandle) {
        let tid = self.child.id();
        drop(self.stdin);
        assert!(self.child.wait().unwrap().success());
        assert!(
            tasks
                .lookup(&tid.to_ne_bytes(), MapFlags::ANY)
                .unwrap()
                .is_none(),
            "an exited thread's entry is deleted"
        );
    }
}

/// The storm's entry counts its syscalls, each once, from zero.
fn assert_counts_the_storm(t: &TaskFeatures, mode: &str) {
    assert!(
        t.start_time_ns > 1,
        "{mode}: the entry is the live thread's, not the dead one's: {t:?}"
    );
    assert!(
        (2 * PAIRS..=2 * PAIRS + SLACK).contains(&t.events_total),
        "{mode}: {} events counted for {} traced syscalls: {t:?}",
        t.events_total,
        2 * PAIRS
    );
    assert!(
        t.event_rate > 0 && t.event_rate < 1 << 30,
        "{mode}: nr_event EWMA: {t:?}"
    );
}

#[test]
fn features_count_the_same_events_with_and_without_recording() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("events.jsonl");
    let mut counted = Vec::new();
    for features_only in [false, true] {
        let mode = if features_only {
            "features-only"
        } else {
            "recording"
        };
        let mut entry = None;
        let run = run_collector(
            Options {
                features_only,
                ..quiet_options()
            },
            &out,
            || {
                let tasks = MapHandle::from_pinned_path(features::task_features_path())
                    .expect("task_features pinned");
                let mut storm = Storm::start();
                entry = Some(storm.run(&tasks));
                storm.finish(&tasks);
                // The recording run before left its rings' sizes in the kept
                // map: a features-only run has none, which is no pressure.
                let global = MapHandle::from_pinned_path(features::global_features_path())
                    .expect("global_features pinned");
                let g = read_global(
                    &global
                        .lookup(&0u32.to_ne_bytes(), MapFlags::ANY)
                        .unwrap()
                        .unwrap(),
                )
                .unwrap();
                assert_eq!(
                    g.ring_size.iter().all(|&size| size > 0),
                    !features_only,
                    "{mode}: {g:?}"
                );
                assert_eq!(
                    g.ring_size.iter().any(|&size| size > 0),
                    !features_only,
                    "{mode}: {g:?}"
                );
            },
        );
        let t = entry.unwrap();
        assert_counts_the_storm(&t, mode);
        assert!(run.summary.invariant_holds, "{mode}: {:?}", run.summary);
        assert_eq!(run.summary.features_only, features_only);
        if features_only {
            assert_eq!(
                t.drops_total, 0,
                "nothing is dropped when nothing is produced: {t:?}"
            );
            assert!(
                run.lines.is_empty(),
                "features-only writes nothing: {:?}",
                run.lines.first()
            );
            let s = &run.summary;
            assert_eq!(
                (s.produced, s.delivered, s.dropped, s.dropped_attrs),
                (0, 0, 0, 0),
                "{s:?}"
            );
            assert!(
                s.cpu_seq.iter().all(|&n| n == 0),
                "no event was numbered: {:?}",
                s.cpu_seq
            );
            assert!(
                s.features_counted >= t.events_total,
                "the storm is among the counted events: {s:?}"
            );
        } else {
            assert!(run.summary.produced >= 2 * PAIRS, "{:?}", run.summary);
            assert_eq!(run.summary.features_counted, 0);
        }
        counted.push(t.events_total);
    }
    eprintln!(
        "storm of {} syscalls: counted {} recording, {} features-only",
        2 * PAIRS,
        counted[0],
        counted[1]
    );
}

#[test]
fn the_binary_in_features_only_mode_counts_a_storm_and_writes_nothing() {
    let _g = serial();
    let mut collector = Command::new(custos_bin())
        .args(["collect", "--features-only", "--stats-interval", "0.5"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run custos collect");
    // Attached once its features say so (published after every program is attached).
    let started = Instant::now();
    let global = loop {
        if let Some(status) = collector.try_wait().unwrap() {
            let mut err = String::new();
            collector
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut err)
                .unwrap();
            panic!("custos collect --features-only exited ({status}) before attaching:\n{err}");
        }
        let g = MapHandle::from_pinned_path(features::global_features_path())
            .ok()
            .and_then(|m| {
                read_global(&m.lookup(&0u32.to_ne_bytes(), MapFlags::ANY).ok()??).map(|g| (m, g))
            });
        match g {
            Some((m, g)) if g.collector_running == 1 && g.consumer_pids[0] == collector.id() => {
                break m
            }
            _ => assert!(
                started.elapsed() < Duration::from_secs(120),
                "the collector did not attach in 120 s"
            ),
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let tasks =
        MapHandle::from_pinned_path(features::task_features_path()).expect("task_features pinned");
    let mut storm = Storm::start();
    let t = storm.run(&tasks);
    storm.finish(&tasks);
    assert_counts_the_storm(&t, "features-only");
    assert_eq!(t.drops_total, 0, "{t:?}");
    std::thread::sleep(Duration::from_millis(700)); // a stats line, and a fresh publish
    let g = read_global(
        &global
            .lookup(&0u32.to_ne_bytes(), MapFlags::ANY)
            .unwrap()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        (g.produced, g.consumed, g.consumer_lag),
        (0, 0, 0),
        "nothing produced: {g:?}"
    );
    assert_eq!(
        g.ring_size, [0; 3],
        "no rings: no pressure of this collector's: {g:?}"
    );

    // SAFETY: signalling the child we started.
    assert_eq!(
        unsafe { libc::kill(collector.id() as i32, libc::SIGINT) },
        0
    );
    let out = collector.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        out.stdout.is_empty(),
        "features-only writes nothing to stdout: {:?}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(stderr.lines().any(|l| l.starts_with("custos collect: features-only: ") && l.contains("ev/s counted")), "a stats line: {stderr}");
    let last = stderr
        .lines()
        .find(|l| l.contains("recorded "))
        .unwrap_or_else(|| panic!("a final summary: {stderr}"));
    assert!(
        last.starts_with("custos collect: features-only: recorded 0 events (produced 0 = delivered 0 + dropped 0); counted "),
        "{last}"
    );
    let counted: u64 = last
        .split("; counted ")
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap();
    assert!(
        counted >= t.events_total,
        "the storm is among the {counted} counted events: {last}"
    );
    let g = read_global(
        &global
            .lookup(&0u32.to_ne_bytes(), MapFlags::ANY)
            .unwrap()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(g.collector_running, 0, "marked stopped at exit");
}

#[test]
fn features_only_refuses_an_output() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("events.jsonl");
    let db = dir.path().join("custos.db");
    for (flag, path) in [
        ("-o", &file),
        ("--output", &file),
        ("--db", &db),
        ("--archive", &file),
    ] {
        let out = Command::new(custos_bin())
            .args(["collect", "--features-only", flag])
            .arg(path)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{flag}: {stderr}");
        assert!(
            stderr.contains("--features-only records no events, so there is nothing to write to"),
            "{flag}: {stderr}"
        );
        let named = if flag.starts_with("-o") || flag == "--output" {
            "-o/--output"
        } else {
            flag
        };
        assert!(
            stderr.contains(named),
            "{flag}: the message names it: {stderr}"
        );
        assert!(
            !path.exists(),
            "{flag}: nothing created at {}",
            path.display()
        );
        assert!(out.stdout.is_empty());
    }
}

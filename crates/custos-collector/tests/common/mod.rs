//! Shared harness: runs the real collector (real BPF programs in the running
//! kernel) on a thread while the test drives workloads as child processes.
#![allow(dead_code)]

use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex, MutexGuard};
use std::time::Duration;

use custos_collector::{collect, Options, Summary};
use serde_json::Value;

/// One collector per machine: tests that load it run one at a time.
pub fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

pub struct Run {
    pub lines: Vec<Value>,
    pub summary: Summary,
}

impl Run {
    pub fn events(&self) -> impl Iterator<Item = &Value> {
        self.lines.iter().filter(|l| l["type"] == "event")
    }

    pub fn losses(&self) -> impl Iterator<Item = &Value> {
        self.lines.iter().filter(|l| l["type"] == "loss")
    }

    pub fn final_stats(&self) -> &Value {
        self.lines.iter().rev().find(|l| l["type"] == "stats" && l["final"] == true).expect("final stats record")
    }
}

/// Starts the collector, runs `workload` once it is attached, stops it.
pub fn run_collector(opts: Options, out: &Path, workload: impl FnOnce()) -> Run {
    let stop = Arc::new(AtomicBool::new(false));
    let (ready_tx, ready_rx) = mpsc::channel();
    let out_path = out.to_path_buf();
    let stop2 = stop.clone();
    let handle = std::thread::spawn(move || {
        let file = BufWriter::new(File::create(&out_path).expect("create output"));
        collect(&opts, file, &stop2, move || ready_tx.send(()).unwrap())
    });
    if ready_rx.recv_timeout(Duration::from_secs(120)).is_err() {
        let err = handle.join().unwrap().err();
        panic!("collector did not start: {err:?}");
    }
    workload();
    stop.store(true, Ordering::SeqCst);
    let summary = handle.join().expect("collector thread").expect("collector run");
    let lines = BufReader::new(File::open(out).unwrap())
        .lines()
        .map(|l| serde_json::from_str(&l.unwrap()).expect("every line is JSON"))
        .collect();
    Run { lines, summary }
}

pub fn quiet_options() -> Options {
    Options { stats_interval: None, ..Options::default() }
}

pub fn sh(script: &str) -> std::process::ExitStatus {
    std::process::Command::new("bash").arg("-c").arg(script).status().expect("run bash")
}

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
        self.lines
            .iter()
            .rev()
            .find(|l| l["type"] == "stats" && l["final"] == true)
            .expect("final stats record")
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
    let summary = handle
        .join()
        .expect("collector thread")
        .expect("collector run");
    let lines = BufReader::new(File::open(out).unwrap())
        .lines()
        .map(|l| serde_json::from_str(&l.unwrap()).expect("every line is JSON"))
        .collect();
    Run { lines, summary }
}

pub fn quiet_options() -> Options {
    Options {
        stats_interval: None,
        ..Options::default()
    }
}

pub fn sh(script: &str) -> std::process::ExitStatus {
    std::process::Command::new("bash")
        .arg("-c")
        .arg(script)
        .status()
        .expect("run bash")
}

/// The stream's ordering guarantee (docs/event-schema.md, "Order"): lines in
/// time order (a loss record at the start of its window), each CPU's numbers
/// rising, and no event of a thread after its own exit.
pub fn assert_causal_order(run: &Run) {
    let mut last_time = 0u64;
    let mut last_seq: std::collections::HashMap<u64, u64> = Default::default();
    let mut exited: std::collections::HashMap<u64, String> = Default::default();
    for l in &run.lines {
        let (time, cpu, first, last) = match l["type"].as_str() {
            Some("event") => {
                let seq = l["seq"].as_u64().unwrap();
                (
                    l["time_ns"].as_u64().unwrap(),
                    l["cpu"].as_u64().unwrap(),
                    seq,
                    seq,
                )
            }
            Some("loss") => (
                l["start_ns"].as_u64().unwrap(),
                l["cpu"].as_u64().unwrap(),
                l["first_seq"].as_u64().unwrap(),
                l["last_seq"].as_u64().unwrap(),
            ),
            _ => continue,
        };
        assert!(
            time >= last_time,
            "a line older than the one before it ({last_time}): {l}"
        );
        last_time = time;
        let prev = last_seq.insert(cpu, last).unwrap_or(0);
        assert!(first > prev, "cpu {cpu}: number {first} after {prev}: {l}");
        if l["type"] == "event" {
            let tid = l["tid"].as_u64().unwrap();
            if let Some(exit) = exited.get(&tid) {
                panic!("an event of thread {tid} after its exit ({exit}): {l}");
            }
            if l["syscall"] == "exit" || l["syscall"] == "exit_group" {
                exited.insert(tid, l.to_string());
            }
        }
    }
    assert_eq!(
        run.final_stats()["out_of_order"],
        0,
        "{}",
        run.final_stats()
    );
}

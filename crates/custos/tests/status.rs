//! `custos status` on this host: while a real `custos collect` runs, it
//! says so with the collector's pid, version and pins, the rings as sized
//! and figures that move with a workload and never pass the collector's
//! final account; once it stops, or with nothing pinned, it exits 3 and
//! says why. This kernel has no sched_ext: the scheduler is reported as
//! not available, and --expect-sched makes that exit 4. Needs root (BPF,
//! pinned maps); a host collector test.

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

fn status(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_custos"))
        // No --config: no config file is read, the host's included.
        .arg("status")
        .args(args)
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}{}", text(&out.stdout), text(&out.stderr)))
}

fn has_sched_ext() -> bool {
    Path::new("/sys/kernel/sched_ext/state").exists()
}

fn u(v: &serde_json::Value, key: &str) -> u64 {
    v[key].as_u64().unwrap_or_else(|| panic!("no {key} in {v}"))
}

/// Stops the collector with SIGINT (its clean stop), also on a panic.
struct Collector(Child);

impl Collector {
    fn stop(&mut self) -> std::process::ExitStatus {
        // SAFETY: kill(2) on our child's pid.
        unsafe { libc::kill(self.0.id() as i32, libc::SIGINT) };
        self.0.wait().unwrap()
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            self.stop();
        }
    }
}

#[test]
fn status_follows_a_running_collector_and_agrees_with_its_final_account() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("events.jsonl");
    let mut collector = Collector(
        Command::new(env!("CARGO_BIN_EXE_custos"))
            .args(["collect", "-o"])
            .arg(&out)
            .args(["--critical-ring-kb", "512", "--events-ring-kb", "1024"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    // Attached, pinned and publishing: status says it runs.
    let t0 = Instant::now();
    let first = loop {
        let s = status(&["--json"]);
        if s.status.code() == Some(0) {
            break json(&s);
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "status never saw the collector run: {}{}",
            text(&s.stdout),
            text(&s.stderr)
        );
        assert!(
            collector.0.try_wait().unwrap().is_none(),
            "the collector exited"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let c = &first["collector"];
    assert_eq!(first["ok"], true);
    assert_eq!(c["running"], true);
    assert_eq!(u(c, "pid"), collector.0.id() as u64);
    assert_eq!(c["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(
        c["pins"],
        serde_json::json!([
            "/sys/fs/bpf/custos/task_features",
            "/sys/fs/bpf/custos/global_features"
        ])
    );
    assert!(c["published_s_ago"].as_f64().unwrap() < 5.0, "{c}");
    let rings: Vec<(String, u64)> = c["rings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let a = r["available"].as_f64().unwrap();
            assert!((0.0..=1.0).contains(&a), "{r}");
            assert!(u(r, "free_bytes") <= u(r, "size_bytes"), "{r}");
            (r["ring"].as_str().unwrap().to_string(), u(r, "size_bytes"))
        })
        .collect();
    assert_eq!(
        rings,
        [
            ("critical".to_string(), 512 << 10),
            ("events".to_string(), 1 << 20),
            ("attrs".to_string(), 16 << 20)
        ]
    );

    // Live: a workload of 50 processes moves the figures by at least
    // their execs and opens.
    for _ in 0..50 {
        Command::new("cat")
            .arg("/etc/hostname")
            .stdout(Stdio::null())
            .status()
            .unwrap();
    }
    std::thread::sleep(Duration::from_millis(300));
    let second = json(&status(&["--json"]));
    let c2 = &second["collector"];
    assert!(u(c2, "produced") >= u(c, "produced") + 100, "{c} then {c2}");
    assert!(
        u(c2, "delivered") >= u(c, "delivered") + 100,
        "{c} then {c2}"
    );
    for key in [
        "dropped",
        "dropped_critical",
        "dropped_events",
        "dropped_attrs",
        "unnumbered",
    ] {
        assert!(u(c2, key) >= u(c, key), "{key}: {c} then {c2}");
    }
    assert_eq!(
        u(c2, "dropped"),
        u(c2, "dropped_critical") + u(c2, "dropped_events")
    );

    // The text says the same; the scheduler's part is this kernel's.
    let s = status(&[]);
    assert_eq!(s.status.code(), Some(0), "{}", text(&s.stderr));
    let t = text(&s.stdout);
    assert!(
        t.contains(&format!(
            "collector: running, pid {}, custos {}",
            collector.0.id(),
            env!("CARGO_PKG_VERSION")
        )) && t.contains("rings available: critical"),
        "{t}"
    );
    if !has_sched_ext() {
        assert!(
            t.contains("scheduler: sched_ext not available on this kernel"),
            "{t}"
        );
        let sched = &second["scheduler"];
        assert_eq!(sched["sched_ext"], false);
        assert_eq!(sched["running"], false);
        // Required, the scheduler is what fails: exit 4.
        let s = status(&["--expect-sched", "--json"]);
        assert_eq!(s.status.code(), Some(4), "{}", text(&s.stdout));
        assert_eq!(json(&s)["exit_status"], 4);
    }

    // Stopped: its final account is at least what status saw last.
    let st = collector.stop();
    assert!(st.success(), "{st}");
    let stream = std::fs::read_to_string(&out).unwrap();
    let last: serde_json::Value = stream
        .lines()
        .rev()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|l| l["type"] == "stats" && l["final"] == true)
        .expect("a final stats record");
    for key in [
        "produced",
        "delivered",
        "dropped",
        "dropped_critical",
        "dropped_events",
        "dropped_attrs",
        "unnumbered",
    ] {
        assert!(u(&last, key) >= u(c2, key), "{key}: {c2} then {last}");
    }
    // The status runs since were recorded too.
    assert!(u(&last, "produced") > u(c2, "produced"), "{last}");

    // Not running: 3, saying why, in both forms.
    let s = status(&["--json"]);
    assert_eq!(s.status.code(), Some(3), "{}", text(&s.stderr));
    let v = json(&s);
    assert_eq!((&v["ok"], &v["exit_status"]), (&false.into(), &3.into()));
    assert_eq!(v["collector"]["running"], false);
    assert!(
        v["collector"]["says"]
            .as_str()
            .unwrap()
            .contains("none is attached"),
        "{v}"
    );
    let s = status(&["--expect-sched"]);
    assert_eq!(s.status.code(), Some(3), "the collector's 3 wins");
    assert!(text(&s.stdout).starts_with("collector: not running"));
}

#[test]
fn status_with_nothing_pinned_exits_3_and_says_so() {
    let empty = tempfile::tempdir().unwrap();
    let dir = empty.path().to_str().unwrap();
    let s = status(&["--pin-dir", dir]);
    assert_eq!(s.status.code(), Some(3), "{}", text(&s.stderr));
    let t = text(&s.stdout);
    assert!(
        t.starts_with(&format!("collector: not running: nothing pinned at {dir}")),
        "{t}"
    );
    if !has_sched_ext() {
        assert!(
            t.contains("scheduler: sched_ext not available on this kernel"),
            "{t}"
        );
    }
    let v = json(&status(&["--pin-dir", dir, "--json"]));
    assert_eq!(v["exit_status"], 3);
    assert_eq!(v["collector"]["pins"], serde_json::json!([]));
    // A wrong option is clap's 2, not a status.
    let s = status(&["--pin-dir"]);
    assert_eq!(s.status.code(), Some(2));
}

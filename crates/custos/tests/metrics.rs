//! `custos collect --metrics` scraped by a real Prometheus server (Debian's
//! `prometheus`, scripts/deps.sh): a flood into small rings makes the
//! collector refuse records; the alert of deploy/prometheus/custos-rules.yml
//! fires while it lasts, and the loss counters Prometheus scraped last are
//! the collector's final account. Needs root (BPF); a host collector test
//! (one collector per machine: run it under the host collector lock).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// A loopback port nobody listens on now.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `GET path` from a server on loopback: the status code and the body.
fn get(port: u16, path: &str) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect_timeout(
        &SocketAddr::from(([127, 0, 0, 1], port)),
        Duration::from_secs(2),
    )?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")?;
    let mut raw = String::new();
    s.read_to_string(&mut raw)?;
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let code = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    Ok((code, body.to_string()))
}

/// A PromQL expression as a query-string value.
fn encoded(q: &str) -> String {
    q.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Prometheus's answer to an instant query: each series' labels and value.
fn query(port: u16, q: &str) -> Vec<(Value, f64)> {
    let (code, body) = get(port, &format!("/api/v1/query?query={}", encoded(q))).unwrap();
    assert_eq!(code, 200, "{q}: {body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["status"], "success", "{q}: {body}");
    v["data"]["result"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let value = r["value"][1].as_str().unwrap().parse().unwrap();
            (r["metric"].clone(), value)
        })
        .collect()
}

/// Ends a child on drop, so a failed assertion leaves no server behind.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn rules_file() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/prometheus/custos-rules.yml")
}

#[test]
fn prometheus_scrapes_the_loss_counters_and_the_alert_fires() {
    let t0 = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let rules = rules_file().canonicalize().unwrap();
    // The rule file ships: promtool must accept it.
    let check = Command::new("promtool")
        .args(["check", "rules"])
        .arg(&rules)
        .output()
        .expect("promtool (Debian's prometheus package: scripts/deps.sh)");
    assert!(
        check.status.success(),
        "promtool check rules: {}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );

    let (exporter, prom) = (free_port(), free_port());
    let config = dir.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
             rule_files:\n  - {}\n\
             scrape_configs:\n  - job_name: custos\n    static_configs:\n      - targets: ['127.0.0.1:{exporter}']\n",
            rules.display()
        ),
    )
    .unwrap();
    let server = Killed(
        Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("tsdb").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{prom}"))
            .arg("--log.level=warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("prometheus (Debian's prometheus package: scripts/deps.sh)"),
    );
    while !matches!(get(prom, "/-/ready"), Ok((200, _))) {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "prometheus never became ready"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // The rule file is loaded, with its alert.
    let (_, rules_now) = get(prom, "/api/v1/rules").unwrap();
    assert!(rules_now.contains("\"CustosEventsLost\""), "{rules_now}");

    // Small rings and a flood of one-byte reads: records are refused.
    let out = dir.path().join("events.jsonl");
    let mut collector = Killed(
        Command::new(env!("CARGO_BIN_EXE_custos"))
            .args(["collect", "--stats-interval", "1", "-o"])
            .arg(&out)
            .args(["--events-ring-kb", "16", "--attrs-ring-kb", "16"])
            .args(["--metrics", &format!("127.0.0.1:{exporter}")])
            .args(["--metrics-final-wait", "15"])
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    while std::fs::metadata(&out).map_or(0, |m| m.len()) == 0 {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "the collector never started"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let flood: Vec<Killed> = (0..4)
        .map(|_| {
            Killed(
                Command::new("dd")
                    .args(["if=/dev/zero", "of=/dev/null", "bs=1", "count=1000000000"])
                    .stderr(Stdio::null())
                    .spawn()
                    .unwrap(),
            )
        })
        .collect();
    // While the flood lasts the alert fires: Prometheus saw events lost.
    let flood_started = Instant::now();
    let firing = loop {
        let (_, alerts) = get(prom, "/api/v1/alerts").unwrap();
        let v: Value = serde_json::from_str(&alerts).unwrap();
        let firing = v["data"]["alerts"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["labels"]["alertname"] == "CustosEventsLost" && a["state"] == "firing");
        if firing || flood_started.elapsed() > Duration::from_secs(45) {
            break firing;
        }
        std::thread::sleep(Duration::from_millis(250));
    };
    let fired_after = flood_started.elapsed();
    drop(flood);
    let term = Command::new("kill")
        .args(["-TERM", &collector.0.id().to_string()])
        .status()
        .unwrap();
    assert!(term.success());
    let status = collector.0.wait().unwrap();
    let mut err = String::new();
    collector
        .0
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert_eq!(status.code(), Some(0), "{err}");
    assert!(
        firing,
        "CustosEventsLost never fired in 45 s of flood: {err}"
    );
    assert!(
        !err.contains("no scrape read the final account"),
        "the final account was scraped: {err}"
    );

    // The collector's final account: its final stats record.
    let text = std::fs::read_to_string(&out).unwrap();
    let last = text
        .lines()
        .rev()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|l| l["type"] == "stats")
        .unwrap();
    assert_eq!(last["final"], true);
    assert_eq!(last["invariant_holds"], true, "{last}");
    let n = |k: &str| last[k].as_u64().unwrap_or_else(|| panic!("{k}: {last}"));
    assert!(n("dropped") > 0, "the flood made no loss: {last}");

    // What Prometheus scraped last (the collector is gone: its series are
    // stale now, so the last sample of the last minutes).
    let expected: Vec<(&str, u64)> = vec![
        ("custos_events_produced_total", n("produced")),
        ("custos_events_delivered_total", n("delivered")),
        (
            "custos_events_lost_total{cause=\"ring_full\",ring=\"critical\"}",
            n("dropped_critical"),
        ),
        (
            "custos_events_lost_total{cause=\"ring_full\",ring=\"events\"}",
            n("dropped_events"),
        ),
        ("custos_events_lost_total{cause=\"skipped\"}", n("skipped")),
        (
            "custos_events_lost_total{cause=\"skipped_bound\"}",
            n("skipped_bound"),
        ),
        (
            "custos_events_lost_total{cause=\"hook_skipped\"}",
            n("skipped_lsm"),
        ),
        ("custos_attributes_dropped_total", n("dropped_attrs")),
        ("custos_events_incomplete_total", n("incomplete")),
        ("custos_loss_records_total", n("loss_records")),
        ("custos_events_reported_lost_total", n("lost_in_gaps")),
        ("custos_reorder_forced_total", n("reorder_forced")),
        ("custos_lines_written_total", n("lines_written")),
    ];
    let scraped = |series: &str| -> Option<u64> {
        let r = query(prom, &format!("last_over_time({series}[5m])"));
        assert!(r.len() <= 1, "{series}: {r:?}");
        r.first().map(|(_, v)| *v as u64)
    };
    // The last scrape's samples are stored a moment after they were served.
    let stored_by = Instant::now() + Duration::from_secs(10);
    for (series, want) in &expected {
        let mut got = scraped(series);
        while got != Some(*want) && Instant::now() < stored_by {
            std::thread::sleep(Duration::from_millis(200));
            got = scraped(series);
        }
        assert_eq!(got, Some(*want), "{series} scraped vs. the final account");
    }
    // Lost = the ring-full series summed, as a dashboard shows it.
    let summed = query(
        prom,
        "sum(last_over_time(custos_events_lost_total{cause=\"ring_full\"}[5m]))",
    );
    assert_eq!(summed[0].1 as u64, n("dropped"));
    // Every metric the shipped rule file and dashboard name is one the
    // collector serves (Prometheus has its series).
    let dashboard =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/grafana/custos-collector.json");
    let shipped =
        std::fs::read_to_string(&rules).unwrap() + &std::fs::read_to_string(&dashboard).unwrap();
    let mut names: Vec<&str> = shipped
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| {
            (w.starts_with("custos_") && w.len() > "custos_".len()) || w.starts_with("process_")
        })
        .collect();
    names.sort_unstable();
    names.dedup();
    assert!(names.len() >= 5, "{names:?}");
    for name in names {
        assert!(
            !query(prom, &format!("count(last_over_time({name}[5m]))")).is_empty(),
            "{name} (in the rule file or the dashboard) was never scraped"
        );
    }
    drop(server);
    eprintln!(
        "metrics test: alert fired {:.1} s into the flood; produced {}, dropped {} (critical {}, events {}); {:.1} s in all",
        fired_after.as_secs_f64(),
        n("produced"),
        n("dropped"),
        n("dropped_critical"),
        n("dropped_events"),
        t0.elapsed().as_secs_f64()
    );
}

//! `custos collect --metrics` scraped by a real Prometheus server (Debian's
//! `prometheus`, scripts/deps.sh): a flood into small rings makes the
//! collector refuse records; the alert of deploy/prometheus/custos-rules.yml
//! fires while it lasts, and the loss counters Prometheus scraped last are
//! the collector's final account. And `custos ingest --metrics` over a
//! stream recorded here with losses: its counters, scraped by Prometheus
//! and directly, are its summary lines and what its store holds. Needs
//! root (BPF); a host collector test (one collector per machine: run it
//! under the host collector lock, and the tests here one collector at a
//! time).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use custos_store::rusqlite::Connection;
use serde_json::Value;

mod shipped;

/// Held while a test of this file runs a collector: one per machine.
static COLLECTOR: Mutex<()> = Mutex::new(());

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
    shipped::deployed("prometheus/custos-rules.yml")
}

/// A Prometheus server on a free port scraping `targets` every second
/// (as job `job`), with `rules` if given, ready; and its port.
fn prometheus(dir: &Path, job: &str, targets: &[u16], rules: Option<&Path>) -> (Killed, u16) {
    let t0 = Instant::now();
    let prom = free_port();
    let config = dir.join("prometheus.yml");
    let rule_files = rules.map_or(String::new(), |r| {
        format!("rule_files:\n  - {}\n", r.display())
    });
    let targets: Vec<String> = targets.iter().map(|p| format!("'127.0.0.1:{p}'")).collect();
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n{rule_files}\
             scrape_configs:\n  - job_name: {job}\n    static_configs:\n      - targets: [{}]\n",
            targets.join(", ")
        ),
    )
    .unwrap();
    let server = Killed(
        Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("tsdb").display()
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
    (server, prom)
}

#[test]
fn prometheus_scrapes_the_loss_counters_and_the_alert_fires() {
    let _one = COLLECTOR.lock().unwrap_or_else(|e| e.into_inner());
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

    let exporter = free_port();
    let (server, prom) = prometheus(dir.path(), "custos", &[exporter], Some(&rules));
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
        ("custos_hold_kicks_total", n("hold_kicks")),
        ("custos_hold_stops_total", n("hold_stops")),
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
    let names = shipped::metric_names(&[
        rules.clone(),
        shipped::deployed("grafana/custos-collector.json"),
    ]);
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

/// The number right before `label` in a summary line (`1239 lines in`).
fn figure(line: &str, label: &str) -> u64 {
    let (before, _) = line
        .split_once(label)
        .unwrap_or_else(|| panic!("{label:?} not in {line}"));
    let at = before
        .rfind(|c: char| !c.is_ascii_digit())
        .map_or(0, |i| i + 1);
    before[at..]
        .parse()
        .unwrap_or_else(|_| panic!("no number before {label:?} in {line}"))
}

/// The value of an unlabelled series in an exposition's text.
fn sample(text: &str, series: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// Each counter of `custos ingest --metrics` and the words its summary
/// line prints the same figure before.
const INGEST_FIGURES: &[(&str, &str)] = &[
    ("custos_ingest_lines_read_total", " lines in"),
    ("custos_ingest_events_stored_total", " new events"),
    ("custos_ingest_events_duplicate_total", " already stored"),
    ("custos_ingest_loss_records_total", " loss records"),
    ("custos_ingest_events_reported_lost_total", " events lost"),
    ("custos_ingest_lines_malformed_total", " malformed lines"),
    ("custos_ingest_graph_nodes_total", " nodes and"),
    ("custos_ingest_graph_edges_total", " edges added"),
];

/// The figures of `custos ingest`'s summary lines (one per input), summed.
fn printed(stderr: &str) -> Vec<(&'static str, u64)> {
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("custos ingest: ") && l.contains(" lines in "))
        .collect();
    assert!(!lines.is_empty(), "no summary line: {stderr}");
    INGEST_FIGURES
        .iter()
        .map(|(series, label)| (*series, lines.iter().map(|l| figure(l, label)).sum()))
        .collect()
}

/// `custos ingest --metrics` of a stream recorded here, with losses (a
/// flood into small rings), and a second input of lines already stored and
/// lines cut short: what Prometheus scraped last is what the command
/// printed, summed over its inputs, and what its store holds. Then the
/// same stream again through stdin, in two parts, scraped directly: the
/// endpoint serves the lines read while the run waits for more, and its
/// final account (all duplicates) is the run's summary.
#[test]
fn ingest_metrics_are_its_summary_and_its_store() {
    let t0 = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let custos = env!("CARGO_BIN_EXE_custos");
    let rec = d.join("rec.jsonl");
    {
        let _one = COLLECTOR.lock().unwrap_or_else(|e| e.into_inner());
        let flood = "dd if=/dev/zero of=/dev/null bs=1 count=100000 2>/dev/null & \
                     dd if=/dev/zero of=/dev/null bs=1 count=100000 2>/dev/null; wait";
        let out = Command::new(custos)
            .args([
                "collect",
                "--events-ring-kb",
                "16",
                "--attrs-ring-kb",
                "16",
                "-o",
            ])
            .arg(&rec)
            .args(["--", "sh", "-c", flood])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let recorded = std::fs::read_to_string(&rec).unwrap();
    let rec_lines: Vec<&str> = recorded.lines().collect();
    let kind = |l: &str| serde_json::from_str::<Value>(l).unwrap()["type"].clone();
    let rec_events = rec_lines.iter().filter(|l| kind(l) == "event").count() as u64;
    assert!(
        rec_lines.iter().any(|l| kind(l) == "loss"),
        "the flood lost nothing: no loss record to count"
    );
    // The second input: the recording's first lines again (its boot line
    // and events the store then holds), and two lines no record.
    let again = d.join("again.jsonl");
    let cut = &rec_lines[20][..rec_lines[20].len() / 2];
    std::fs::write(
        &again,
        format!("{}\n{cut}\nnot a record\n", rec_lines[..20].join("\n")),
    )
    .unwrap();

    // Prometheus scrapes the ingest, which waits until it read the end.
    let exporter = free_port();
    let (server, prom) = prometheus(d, "custos-ingest", &[exporter], None);
    let db = d.join("store.db");
    let run = Command::new(custos)
        .args(["ingest", "--no-seal", "--db"])
        .arg(&db)
        .args(["--metrics", &format!("127.0.0.1:{exporter}")])
        .args(["--metrics-final-wait", "30"])
        .arg(&rec)
        .arg(&again)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&run.stderr).into_owned();
    assert!(run.status.success(), "{err}");
    assert!(
        !err.contains("no scrape read the final account"),
        "Prometheus read the final account: {err}"
    );
    let acks = String::from_utf8_lossy(&run.stdout)
        .lines()
        .filter(|l| l.starts_with("ack batch="))
        .count() as u64;
    let mut want = printed(&err);
    want.push(("custos_ingest_batches_total", acks));
    let figure_of = |series: &str| want.iter().find(|(s, _)| *s == series).unwrap().1;
    // What the run meant to show: losses, lines already stored, malformed lines.
    assert!(figure_of("custos_ingest_loss_records_total") > 0, "{err}");
    assert!(
        figure_of("custos_ingest_events_duplicate_total") > 0,
        "{err}"
    );
    assert_eq!(figure_of("custos_ingest_lines_malformed_total"), 2, "{err}");
    assert_eq!(
        figure_of("custos_ingest_lines_read_total"),
        rec_lines.len() as u64 + 22
    );
    // The store holds what the figures say.
    let conn = Connection::open(&db).unwrap();
    let held =
        |sql: &str| -> u64 { conn.query_row(sql, [], |r| r.get::<_, i64>(0)).unwrap() as u64 };
    let lost = "FROM losses WHERE category <> 'incomplete'";
    for (series, sql) in [
        (
            "custos_ingest_events_stored_total",
            "SELECT COALESCE(SUM(last_id - first_id + 1), 0) FROM event_ranges".to_string(),
        ),
        (
            "custos_ingest_loss_records_total",
            format!("SELECT COUNT(*) {lost}"),
        ),
        (
            "custos_ingest_events_reported_lost_total",
            format!("SELECT COALESCE(SUM(count), 0) {lost}"),
        ),
        (
            "custos_ingest_lines_malformed_total",
            "SELECT COUNT(*) FROM rejects".to_string(),
        ),
        (
            "custos_ingest_lines_read_total",
            "SELECT SUM(lines) FROM ingests".to_string(),
        ),
    ] {
        assert_eq!(held(&sql), figure_of(series), "{series}: the store's {sql}");
    }
    assert_eq!(figure_of("custos_ingest_events_stored_total"), rec_events);

    // What Prometheus scraped last (the ingest is gone: its series are
    // stale, so the last sample of the last minutes), stored a moment after
    // it was served.
    let scraped = |series: &str| -> Option<u64> {
        let r = query(prom, &format!("last_over_time({series}[5m])"));
        assert!(r.len() <= 1, "{series}: {r:?}");
        r.first().map(|(_, v)| *v as u64)
    };
    let stored_by = Instant::now() + Duration::from_secs(10);
    for (series, want) in &want {
        let mut got = scraped(series);
        while got != Some(*want) && Instant::now() < stored_by {
            std::thread::sleep(Duration::from_millis(200));
            got = scraped(series);
        }
        assert_eq!(got, Some(*want), "{series} scraped vs. printed");
    }
    // And every metric the shipped dashboard names.
    let dashboard = shipped::metric_names(&[shipped::deployed("grafana/custos-ingest.json")]);
    assert!(dashboard.len() >= 5, "{dashboard:?}");
    for series in ["custos_ingest_build_info".to_string()]
        .iter()
        .chain(&dashboard)
    {
        assert!(
            !query(prom, &format!("count(last_over_time({series}[5m]))")).is_empty(),
            "{series} (custos ingest's, or in deploy/grafana/custos-ingest.json) was never scraped"
        );
    }
    drop(server);
    let prometheus_done = t0.elapsed();

    // The recording again, through stdin in two parts, scraped directly.
    let port = free_port();
    let (out, errf) = (d.join("again.out"), d.join("again.err"));
    let mut ingest = Killed(
        Command::new(custos)
            .args(["ingest", "--no-seal", "--db"])
            .arg(&db)
            .args(["--metrics", &format!("127.0.0.1:{port}")])
            .args(["--metrics-final-wait", "30", "-"])
            .stdin(Stdio::piped())
            .stdout(std::fs::File::create(&out).unwrap())
            .stderr(std::fs::File::create(&errf).unwrap())
            .spawn()
            .unwrap(),
    );
    let mut stdin = ingest.0.stdin.take().unwrap();
    let half = rec_lines.len() / 2;
    for l in &rec_lines[..half] {
        writeln!(stdin, "{l}").unwrap();
    }
    stdin.flush().unwrap();
    let lines_read = |body: &str| sample(body, "custos_ingest_lines_read_total");
    let mut body = String::new();
    while lines_read(&body) != Some(half as u64) {
        assert!(
            t0.elapsed() < prometheus_done + Duration::from_secs(30),
            "the first {half} lines were never served as read: {body}"
        );
        std::thread::sleep(Duration::from_millis(100));
        if let Ok((200, b)) = get(port, "/metrics") {
            body = b;
        }
    }
    for l in &rec_lines[half..] {
        writeln!(stdin, "{l}").unwrap();
    }
    drop(stdin);
    // It exits once a scrape read its final account: the last scrape's.
    let ended = Instant::now();
    let status = loop {
        if let Some(status) = ingest.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            ended.elapsed() < Duration::from_secs(60),
            "the second ingest never ended"
        );
        if let Ok((200, b)) = get(port, "/metrics") {
            body = b;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let err = std::fs::read_to_string(&errf).unwrap();
    assert!(status.success(), "{err}");
    assert!(!err.contains("no scrape read the final account"), "{err}");
    let mut want = printed(&err);
    let acks = std::fs::read_to_string(&out).unwrap().lines().count() as u64;
    want.push(("custos_ingest_batches_total", acks));
    for (series, want) in &want {
        assert_eq!(sample(&body, series), Some(*want), "{series}: {body}");
    }
    // Every event was stored before: none new, each counted once as a duplicate.
    assert_eq!(sample(&body, "custos_ingest_events_stored_total"), Some(0));
    assert_eq!(
        sample(&body, "custos_ingest_events_duplicate_total"),
        Some(rec_events)
    );
    assert_eq!(sample(&body, "custos_ingest_loss_records_total"), Some(0));
    eprintln!(
        "ingest metrics test: {} lines recorded ({} events); Prometheus part {:.1} s, {:.1} s in all",
        rec_lines.len(),
        rec_events,
        prometheus_done.as_secs_f64(),
        t0.elapsed().as_secs_f64()
    );
}

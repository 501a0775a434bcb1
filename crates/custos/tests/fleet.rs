//! Drives the real `custos fleet ingest` against real Kafka and ClickHouse
//! servers (custos_fleet::servers): a stream the Kafka sink sent (the code
//! `custos collect --kafka` runs) lands in ClickHouse, and a second run that
//! reads the topic again adds nothing. And two real machines (this host
//! and a `custos vm` guest on a host-only network), each recording with its
//! own collector into one Kafka topic, queried as one graph across the
//! connection between them.

use custos_fleet::servers::{ClickHouseServer, KafkaBroker};
use custos_fleet::sink::{KafkaOptions, KafkaTarget};
use custos_store::sink::LiveSink;
use custos_store::synth::{self, SynthConfig};
use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod shipped;

/// `custos fleet ingest`, to run until the topic is quiet.
fn ingest_command(
    broker: &KafkaBroker,
    ch: &ClickHouseServer,
    topic: &str,
    group: &str,
    db: &str,
) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_custos"));
    cmd.args([
        "fleet",
        "ingest",
        "--kafka",
        &broker.bootstrap(),
        "--topic",
        topic,
        "--clickhouse",
        &ch.url(),
    ])
    .args([
        "--group",
        group,
        "--clickhouse-db",
        db,
        "--batch-secs",
        "0.3",
        "--stop-when-idle",
        "2",
    ]);
    cmd
}

/// Runs `custos fleet ingest` until the topic is quiet; returns whether it
/// succeeded and its report.
fn run_ingest(
    broker: &KafkaBroker,
    ch: &ClickHouseServer,
    topic: &str,
    group: &str,
    db: &str,
) -> (bool, String) {
    let out = ingest_command(broker, ch, topic, group, db)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `GET /metrics` from loopback `port`: the body, if it answered 200.
fn scrape(port: u16) -> Option<String> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut raw = String::new();
    s.read_to_string(&mut raw).ok()?;
    let (head, body) = raw.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200").then(|| body.to_string())
}

/// The value of a series (with its labels, as exposed) in a scrape.
fn sample(text: &str, series: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// Runs `custos fleet ingest --metrics` until the topic is quiet, scraping
/// its endpoint every 100 ms; returns its report and the last scrape,
/// which is its final account (it waits until a scrape has read that).
fn ingest_scraped(
    broker: &KafkaBroker,
    ch: &ClickHouseServer,
    topic: &str,
    group: &str,
) -> (String, String) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut child = ingest_command(broker, ch, topic, group, "custos")
        .args(["--metrics", &format!("127.0.0.1:{port}")])
        .args(["--metrics-final-wait", "30"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Its report, read as it comes (a full pipe would stop it).
    let mut err = child.stderr.take().unwrap();
    let report = std::thread::spawn(move || {
        let mut s = String::new();
        err.read_to_string(&mut s).unwrap();
        s
    });
    let (t0, mut last) = (Instant::now(), String::new());
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if t0.elapsed() > Duration::from_secs(300) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("fleet ingest never ended: {}", report.join().unwrap());
        }
        if let Some(body) = scrape(port) {
            last = body;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let report = report.join().unwrap();
    assert!(status.success(), "fleet ingest failed: {report}");
    assert!(
        !report.contains("no scrape read the final account"),
        "{report}"
    );
    (report, last)
}

/// The metrics of a fleet ingest's final account against the rows of
/// `host` ClickHouse holds, and against the line the run printed.
fn check_scrape(ch: &ClickHouseServer, host: &str, report: &str, scraped: &str) {
    let rows = |sql: &str| ch.query_u64(&sql.replace("HOST", host)).unwrap()[0];
    let line = report
        .lines()
        .find(|l| l.contains(" lines read, "))
        .unwrap_or_else(|| panic!("no final line in: {report}"));
    let printed = |label: &str| -> u64 {
        let before = line.split(label).next().unwrap();
        let at = before.rfind(|c: char| !c.is_ascii_digit()).unwrap() + 1;
        before[at..].parse().unwrap()
    };
    let events = "custos_fleet_ingest_rows_inserted_total{table=\"events\"}";
    let losses = "custos_fleet_ingest_rows_inserted_total{table=\"losses\"}";
    let records = "custos_fleet_ingest_rows_inserted_total{table=\"records\"}";
    for (series, held, label) in [
        (
            events,
            rows("SELECT count() FROM custos.events WHERE host = 'HOST'"),
            " events,",
        ),
        (
            losses,
            rows("SELECT count() FROM custos.losses WHERE host = 'HOST'"),
            " loss records",
        ),
        (
            "custos_fleet_ingest_events_reported_lost_total",
            rows("SELECT sum(count) FROM custos.losses WHERE host = 'HOST'"),
            " events lost",
        ),
        (
            records,
            rows("SELECT count() FROM custos.records WHERE host = 'HOST'"),
            " other records",
        ),
        (
            "custos_fleet_ingest_lines_malformed_total",
            rows("SELECT count() FROM custos.records WHERE host = 'HOST' AND type = 'malformed'"),
            " malformed lines",
        ),
    ] {
        assert_eq!(
            sample(scraped, series),
            Some(held),
            "{series}: ClickHouse holds {held}; scraped:\n{scraped}"
        );
        assert_eq!(printed(label), held, "{label}: {line}");
    }
    for (series, label) in [
        ("custos_fleet_ingest_lines_read_total", " lines read"),
        ("custos_fleet_ingest_batches_total", " batches"),
        (
            "custos_fleet_ingest_lines_redelivered_total",
            " re-delivered",
        ),
        (
            "custos_fleet_ingest_retries_total",
            " requests to ClickHouse",
        ),
    ] {
        assert_eq!(
            sample(scraped, series),
            Some(printed(label)),
            "{series}: {line}\n{scraped}"
        );
    }
    // Caught up and committed: nothing left on the topic for the group.
    assert_eq!(
        sample(scraped, "custos_fleet_ingest_consumer_lag_messages"),
        Some(0),
        "{scraped}"
    );
    // Every metric the shipped dashboard names is one the ingester serves.
    let names = shipped::metric_names(&[shipped::deployed("grafana/custos-fleet-ingest.json")]);
    assert!(names.len() >= 5, "{names:?}");
    let served = custos_metrics::series(scraped);
    for name in names {
        assert!(
            served.contains(&name.as_str()),
            "{name} (in deploy/grafana/custos-fleet-ingest.json) is not served: {scraped}"
        );
    }
}

fn ingest(broker: &KafkaBroker, ch: &ClickHouseServer, topic: &str, group: &str) -> String {
    let (ok, stderr) = run_ingest(broker, ch, topic, group, "custos");
    assert!(ok, "fleet ingest failed: {stderr}");
    stderr
}

#[test]
fn fleet_ingest_stores_the_topic_once() {
    let ch = ClickHouseServer::start().unwrap();
    let broker = KafkaBroker::start(2).unwrap();
    let topic = "custos-cli";
    broker.create_topic(topic, 2).unwrap();
    let mut stream = Vec::new();
    let report = synth::generate(&SynthConfig::scaled(11, 0.0005), &mut stream, |_| {}).unwrap();

    let target =
        KafkaTarget::connect(KafkaOptions::new(&broker.bootstrap(), topic, "cli-host")).unwrap();
    let (sink, mut w) = LiveSink::spawn("custos-kafka-sink", target, 1 << 20).unwrap();
    w.write_all(&stream).unwrap();
    // And a line cut short, as a crash leaves one.
    w.write_all(b"{\"type\":\"event\",\"id\":7,\"ti\n").unwrap();
    drop(w);
    let sent = sink.finish().unwrap();
    let lines = report.lines + 1;
    assert_eq!(sent.delivered, lines, "{sent:?}");

    // Both runs serve their figures (--metrics): the first's are the rows
    // ClickHouse holds, the second's the lines it skipped.
    let (first, scraped) = ingest_scraped(&broker, &ch, topic, "g1");
    let want = format!("{} events, {} loss records", report.events, report.losses);
    assert!(first.contains(&want), "expected {want:?} in: {first}");
    assert!(first.contains(&format!(" {lines} lines read, ")), "{first}");
    assert!(first.contains(" 1 malformed lines"), "{first}");
    assert!(first.contains(" 0 re-delivered lines skipped"), "{first}");
    check_scrape(&ch, "cli-host", &first, &scraped);
    let (again, scraped) = ingest_scraped(&broker, &ch, topic, "g2");
    let want = format!("0 events, 0 loss records (0 events lost), 0 other records, 0 malformed lines; {lines} re-delivered lines skipped");
    assert!(again.contains(&want), "expected {want:?} in: {again}");
    assert_eq!(
        sample(&scraped, "custos_fleet_ingest_lines_redelivered_total"),
        Some(lines),
        "{scraped}"
    );
    assert_eq!(
        sample(
            &scraped,
            "custos_fleet_ingest_rows_inserted_total{table=\"events\"}"
        ),
        Some(0),
        "{scraped}"
    );

    // A table of another schema where ours should be: refused at the start, saying why.
    ch.execute("CREATE DATABASE other").unwrap();
    ch.execute("CREATE TABLE other.events (host String, id UInt64) ENGINE = MergeTree ORDER BY id")
        .unwrap();
    let (ok, stderr) = run_ingest(&broker, &ch, topic, "g3", "other");
    assert!(
        !ok && stderr.contains("table other.events is not the fleet's")
            && stderr.contains("kafka_topic"),
        "{stderr}"
    );
}

/// The whole way for real: `custos collect --kafka` records a command with
/// the BPF collector and sends its stream to the broker (beside its file),
/// and `custos fleet ingest` stores exactly the file's events, once.
#[test]
fn a_recording_reaches_clickhouse_through_kafka() {
    let ch = ClickHouseServer::start().unwrap();
    let broker = KafkaBroker::start(1).unwrap();
    let topic = "custos-collect";
    broker.create_topic(topic, 1).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("events.jsonl");
    let run = Command::new(env!("CARGO_BIN_EXE_custos"))
        .args([
            "collect",
            "--kafka",
            &broker.bootstrap(),
            "--topic",
            topic,
            "--host-id",
            "recorded-host",
            "-o",
        ])
        .arg(&out)
        .args([
            "--",
            "sh",
            "-c",
            "cat /etc/hostname >/dev/null; ls / >/dev/null",
        ])
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let mut want: Vec<u64> = std::fs::read_to_string(&out)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|l| l["type"] == "event")
        .map(|l| l["id"].as_u64().unwrap())
        .collect();
    want.sort_unstable();
    assert!(
        want.len() > 50,
        "a recording of a few commands: {} events",
        want.len()
    );

    ingest(&broker, &ch, topic, "g");
    let got = ch
        .query_u64("SELECT id FROM custos.events WHERE host = 'recorded-host' ORDER BY id")
        .unwrap();
    assert_eq!(
        got, want,
        "ClickHouse holds the recording's events, each once"
    );
}

/// A host-only network for the VM: a TAP device with the host's address,
/// removed when the test ends.
struct Tap(&'static str);

impl Tap {
    fn create(name: &'static str, host_cidr: &str) -> Tap {
        let ip = |args: &[&str]| Command::new("ip").args(args).output().expect("run ip");
        let _ = ip(&["link", "del", name]); // left by a killed run
        for args in [
            &["tuntap", "add", "dev", name, "mode", "tap"][..],
            &["addr", "add", host_cidr, "dev", name],
            &["link", "set", name, "up"],
        ] {
            let out = ip(args);
            assert!(
                out.status.success(),
                "ip {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Tap(name)
    }
}

impl Drop for Tap {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["link", "del", self.0]).output();
    }
}

/// A child killed if the test ends before it does (a failed assertion must
/// not leave a collector running).
struct Reaped(std::process::Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        if self.0.try_wait().ok().flatten().is_none() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// The fleet's reason to exist, with two real kernels: a process in the VM
/// reads a secret and sends it over TCP to a server on the host, each
/// machine's own collector records its side into the host's Kafka, and the
/// fleet's graph follows the secret from the VM's file to the file the host
/// wrote, joined at the connection by both ends' addresses (not by port and
/// time). The broker is killed mid-stream and restarted before the VM
/// boots: every event is in ClickHouse once or counted lost in-band. About 1 minute under emulation.
#[test]
fn two_machines_provenance_joins_at_the_connection_between_them() {
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_custos"));
    let (host_ip, guest_ip) = ("10.77.0.1", "10.77.0.2");
    let _tap = Tap::create("custos-fleet0", "10.77.0.1/24");
    let ch = ClickHouseServer::start().unwrap();
    let broker = KafkaBroker::start_on(1, host_ip).unwrap();
    let topic = "custos-two-machines";
    broker.create_topic(topic, 1).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().canonicalize().unwrap();

    // The host's side: its collector, around a server that takes one
    // connection and writes what it received to a file.
    let port_file = d.join("port");
    let received = d.join("received");
    let server = format!(
        "import socket, sys\n\
         srv = socket.socket(); srv.bind(('{host_ip}', 0)); srv.listen(1); srv.settimeout(900)\n\
         open(sys.argv[1] + '.tmp', 'w').write(str(srv.getsockname()[1])); __import__('os').rename(sys.argv[1] + '.tmp', sys.argv[1])\n\
         c, peer = srv.accept(); c.settimeout(60)\n\
         data = b''\n\
         while True:\n    b = c.recv(65536)\n    if not b: break\n    data += b\n\
         open(sys.argv[2], 'wb').write(data)\n"
    );
    let host = Command::new(bin)
        .args([
            "collect",
            "--kafka",
            &broker.bootstrap(),
            "--topic",
            topic,
            "--host-id",
            "host",
            "-o",
        ])
        .arg(d.join("host.jsonl"))
        .args(["--", "python3", "-c", &server])
        .arg(&port_file)
        .arg(&received)
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(d.join("host-collect.log")).unwrap())
        .spawn()
        .unwrap();
    let mut host = Reaped(host);
    let t = std::time::Instant::now();
    while !port_file.exists() {
        assert!(
            host.0.try_wait().unwrap().is_none(),
            "the host's collector ended: {}",
            std::fs::read_to_string(d.join("host-collect.log")).unwrap()
        );
        assert!(
            t.elapsed().as_secs() < 120,
            "the host's server never listened"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let port = std::fs::read_to_string(&port_file).unwrap();

    // The broker dies mid-stream (the host's collector is sending) and is
    // started again 3 s later, before the connection the query must cross:
    // an outage that outlasts the sink's buffer costs counted events, and
    // if the accept were among them the crossing would rightly be missing
    // (seen when the VM booted while the broker's JVM took 15 s to return).
    let mut broker = broker;
    broker.kill();
    std::thread::sleep(std::time::Duration::from_secs(3));
    broker.restart().unwrap();

    // The VM's side: its own kernel, its own collector.
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/guest/fleet.sh");
    let vm = Command::new(bin)
        .args([
            "vm",
            "run",
            "-q",
            "--cpus",
            "1",
            "--timeout",
            "900",
            "--tap",
            "custos-fleet0",
            "--share",
        ])
        .arg(&d)
        .args(["--", "sh"])
        .arg(&script)
        .arg(bin.parent().unwrap())
        .arg(&d)
        .args([guest_ip, host_ip, port.trim(), &broker.bootstrap(), topic])
        .output()
        .expect("run custos vm");
    let stdout = String::from_utf8_lossy(&vm.stdout);
    let log = |f: &str| std::fs::read_to_string(d.join(f)).unwrap_or_default();
    assert!(
        stdout.contains("done yes") && stdout.contains("net.rc 0"),
        "stdout: {stdout}\nstderr: {}",
        String::from_utf8_lossy(&vm.stderr)
    );
    assert!(
        stdout.contains("collect.rc 0"),
        "the VM's collector: {}",
        log("vm-collect.log")
    );
    let status = host.0.wait().unwrap();
    assert!(
        status.success(),
        "the host's collector: {}",
        log("host-collect.log")
    );
    assert_eq!(
        std::fs::read_to_string(&received).unwrap(),
        "a secret of the vm's\n"
    );

    // Each machine recorded its end, with both addresses.
    let end = |file: &str, syscall: &[&str]| -> serde_json::Value {
        std::fs::read_to_string(d.join(file))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .find(|e| {
                syscall.contains(&e["syscall"].as_str().unwrap_or(""))
                    && e["laddr"].is_string()
                    && e["laddr"].as_str().unwrap().starts_with("10.77.0.")
            })
            .unwrap_or_else(|| panic!("no {syscall:?} on the host-only network in {file}"))
    };
    let connect = end("vm.jsonl", &["connect"]);
    let accept = end("host.jsonl", &["accept", "accept4"]);
    assert_eq!(connect["addr"], accept["laddr"], "{connect}\n{accept}");
    assert_eq!(connect["laddr"], accept["addr"], "{connect}\n{accept}");

    // One graph of both machines.
    let out = Command::new(bin)
        .args([
            "fleet",
            "ingest",
            "--kafka",
            &broker.bootstrap(),
            "--topic",
            topic,
            "--clickhouse",
            &ch.url(),
        ])
        .args([
            "--group",
            "g",
            "--batch-secs",
            "0.3",
            "--stop-when-idle",
            "3",
            "--graph-dir",
        ])
        .arg(d.join("graphs"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "fleet ingest: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Across the outage: each machine's events in ClickHouse once, or counted lost in-band.
    for (h, file) in [("host", "host.jsonl"), ("vm", "vm.jsonl")] {
        let recorded = log(file)
            .lines()
            .filter(|l| l.starts_with(r#"{"type":"event""#))
            .count() as u64;
        let q = |sql: String| ch.query_u64(&sql).unwrap()[0];
        let (stored, unique) = (
            q(format!(
                "SELECT count() FROM custos.events WHERE host = '{h}'"
            )),
            q(format!(
                "SELECT uniqExact(boot, id) FROM custos.events WHERE host = '{h}'"
            )),
        );
        let lost = q(format!(
            "SELECT sum(count) FROM custos.losses WHERE host = '{h}' AND category = 'kafka'"
        ));
        assert_eq!(stored, unique, "{h}: no event twice");
        assert_eq!(
            stored + lost,
            recorded,
            "{h}: every recorded event stored or counted lost ({stored} + {lost})"
        );
        eprintln!("{h}: {recorded} events recorded, {stored} stored, {lost} counted lost in the broker's outage");
    }
    let secret = format!("vm:{}", d.join("vm-secret").display());
    let out = Command::new(bin)
        .args([
            "query",
            "--clickhouse",
            &ch.url(),
            "--json",
            "descendants",
            &secret,
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "query: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let answer: serde_json::Value = serde_json::from_str(&text).unwrap();
    let names: Vec<&str> = answer["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["name"].as_str().unwrap())
        .collect();
    let wrote = format!("host:{}", received.display());
    assert!(
        names.contains(&wrote.as_str()),
        "the host's file descends from the VM's secret: {names:?}"
    );
    let notes = answer["notes"].to_string();
    assert!(
        notes.contains("crossed hosts")
            && !notes.contains(": joined by port and time")
            && !notes.contains("possible other ends"),
        "{notes}"
    );
}

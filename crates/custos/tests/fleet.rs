//! Drives the real `custos fleet ingest` against real Kafka and ClickHouse
//! servers (custos_fleet::servers): a stream the Kafka sink sent (the code
//! `custos collect --kafka` runs) lands in ClickHouse, and a second run that
//! reads the topic again adds nothing.

use custos_fleet::servers::{ClickHouseServer, KafkaBroker};
use custos_fleet::sink::{KafkaOptions, KafkaTarget};
use custos_store::sink::LiveSink;
use custos_store::synth::{self, SynthConfig};
use std::io::Write;
use std::process::Command;

/// Runs `custos fleet ingest` until the topic is quiet; returns whether it
/// succeeded and its report.
fn run_ingest(broker: &KafkaBroker, ch: &ClickHouseServer, topic: &str, group: &str, db: &str) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_custos"))
        .args(["fleet", "ingest", "--kafka", &broker.bootstrap(), "--topic", topic, "--clickhouse", &ch.url()])
        .args(["--group", group, "--clickhouse-db", db, "--batch-secs", "0.3", "--stop-when-idle", "2"])
        .output()
        .unwrap();
    (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
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

    let target = KafkaTarget::connect(KafkaOptions::new(&broker.bootstrap(), topic, "cli-host")).unwrap();
    let (sink, mut w) = LiveSink::spawn("custos-kafka-sink", target, 1 << 20).unwrap();
    w.write_all(&stream).unwrap();
    drop(w);
    let sent = sink.finish().unwrap();
    assert_eq!(sent.delivered, report.lines, "{sent:?}");

    let first = ingest(&broker, &ch, topic, "g1");
    let want = format!("{} events, {} loss records", report.events, report.losses);
    assert!(first.contains(&want), "expected {want:?} in: {first}");
    assert!(first.contains(" 0 re-delivered lines skipped"), "{first}");
    let again = ingest(&broker, &ch, topic, "g2");
    let want = format!("0 events, 0 loss records (0 events lost), 0 other records, 0 malformed lines; {} re-delivered lines skipped", report.lines);
    assert!(again.contains(&want), "expected {want:?} in: {again}");

    // A table of another schema where ours should be: refused at the start, saying why.
    ch.execute("CREATE DATABASE other").unwrap();
    ch.execute("CREATE TABLE other.events (host String, id UInt64) ENGINE = MergeTree ORDER BY id").unwrap();
    let (ok, stderr) = run_ingest(&broker, &ch, topic, "g3", "other");
    assert!(!ok && stderr.contains("table other.events is not the fleet's") && stderr.contains("kafka_topic"), "{stderr}");
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
        .args(["collect", "--kafka", &broker.bootstrap(), "--topic", topic, "--host-id", "recorded-host", "-o"])
        .arg(&out)
        .args(["--", "sh", "-c", "cat /etc/hostname >/dev/null; ls / >/dev/null"])
        .output()
        .unwrap();
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let mut want: Vec<u64> = std::fs::read_to_string(&out)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|l| l["type"] == "event")
        .map(|l| l["id"].as_u64().unwrap())
        .collect();
    want.sort_unstable();
    assert!(want.len() > 50, "a recording of a few commands: {} events", want.len());

    ingest(&broker, &ch, topic, "g");
    let got = ch.query_u64("SELECT id FROM custos.events WHERE host = 'recorded-host' ORDER BY id").unwrap();
    assert_eq!(got, want, "ClickHouse holds the recording's events, each once");
}

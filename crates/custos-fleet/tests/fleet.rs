//! The fleet's path end to end, on real servers: a stream through the Kafka
//! sink (the code `custos collect --kafka` runs) and `fleet ingest` into
//! ClickHouse; then the same with the broker killed mid-stream.

use custos_fleet::ingest::{IngestOptions, IngestSummary, Ingester};
use custos_fleet::servers::{ClickHouseServer, KafkaBroker};
use custos_fleet::sink::{KafkaOptions, KafkaSummary, KafkaTarget, LOSS_CATEGORY};
use custos_store::record::{parse_line, Record};
use custos_store::sink::{LiveSink, SinkWriter};
use std::io::Write;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

const HOST: &str = "test-host-1";

/// A synthetic stream (the store's generator), and the ids of its events.
fn stream() -> (Vec<u8>, Vec<u64>, u64) {
    let mut out = Vec::new();
    let report = custos_store::synth::generate(
        &custos_store::synth::SynthConfig::scaled(7, 0.001),
        &mut out,
        |_| {},
    )
    .unwrap();
    let mut ids = Vec::new();
    for line in std::str::from_utf8(&out).unwrap().lines() {
        if let Ok(Record::Event(e, _)) = parse_line(line) {
            ids.push(e.id);
        }
    }
    ids.sort_unstable();
    assert_eq!(ids.len() as u64, report.events);
    (out, ids, report.losses)
}

/// Both servers, started on this thread: they end with it (servers.rs).
fn servers(partitions: i32, topic: &str) -> (KafkaBroker, ClickHouseServer) {
    let ch = ClickHouseServer::start().expect("starting ClickHouse");
    let broker = KafkaBroker::start(partitions as u32).expect("starting the Kafka broker");
    broker.create_topic(topic, partitions).unwrap();
    (broker, ch)
}

fn sink(opts: KafkaOptions) -> (LiveSink<KafkaSummary>, SinkWriter) {
    LiveSink::spawn(
        "custos-kafka-sink",
        KafkaTarget::connect(opts).unwrap(),
        1 << 20,
    )
    .unwrap()
}

fn ingest(broker: &KafkaBroker, ch: &ClickHouseServer, topic: &str, group: &str) -> IngestSummary {
    let mut opts = IngestOptions::new(&broker.bootstrap(), topic, &ch.url());
    opts.group = group.into();
    opts.batch_lines = 5_000;
    opts.batch_wait = Duration::from_millis(300);
    opts.stop_when_idle = Some(Duration::from_secs(2));
    Ingester::connect(opts)
        .unwrap()
        .run(&AtomicBool::new(false))
        .unwrap()
}

fn query<T: clickhouse::RowOwned + clickhouse::RowRead>(
    ch: &ClickHouseServer,
    sql: &str,
) -> Vec<T> {
    let client = clickhouse::Client::default()
        .with_url(ch.url())
        .with_validation(false)
        .with_database("custos");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(client.query(sql).fetch_all()).unwrap()
}

#[test]
fn stream_through_kafka_arrives_in_clickhouse_complete_and_once() {
    let started = Instant::now();
    let topic = "custos-complete";
    let (broker, ch) = servers(3, topic);
    let (stream, ids, losses) = stream();

    let (synthetic, mut w) = sink(KafkaOptions::new(&broker.bootstrap(), topic, HOST));
    // Writes cut across lines, as the collector's output thread does.
    for chunk in stream.chunks(64 << 10) {
        w.write_all(chunk).unwrap();
    }
    drop(w);
    let sent = synthetic.finish().unwrap();
    let lines = stream.iter().filter(|&&b| b == b'\n').count() as u64;
    assert_eq!(
        (sent.sent, sent.delivered, sent.dropped_lines),
        (lines, lines, 0),
        "{sent:?}"
    );

    // And a stream the collector recorded (a gcc build; one stats line, no boot line) from a second host.
    let recorded = std::io::read_to_string(
        custos_store::archive::open_input(std::path::Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../custos-store/tests/data/collector-gcc-build.jsonl.zst"
        )))
        .unwrap(),
    )
    .unwrap();
    let recorded_events = recorded
        .lines()
        .filter(|l| matches!(parse_line(l), Ok(Record::Event(..))))
        .count() as u64;
    let (sink2, mut w) = sink(KafkaOptions::new(
        &broker.bootstrap(),
        topic,
        "recorded-host",
    ));
    w.write_all(recorded.as_bytes()).unwrap();
    drop(w);
    assert_eq!(
        sink2.finish().unwrap().delivered,
        recorded.lines().count() as u64
    );

    let first = ingest(&broker, &ch, topic, "g1");
    assert_eq!(
        first.events,
        ids.len() as u64 + recorded_events,
        "{first:?}"
    );
    assert_eq!(first.losses, losses);
    assert_eq!(
        first.events + first.losses + first.records,
        lines + recorded.lines().count() as u64
    );
    let got: Vec<u64> = query(
        &ch,
        &format!("SELECT id FROM events WHERE host = '{HOST}' ORDER BY id"),
    );
    assert_eq!(got, ids, "the events in ClickHouse are the stream's");
    let (count, unique, boot) =
        query::<(u64, u64, String)>(&ch, &format!("SELECT count(), uniqExact(host, boot, id), any(boot) FROM events WHERE host = '{HOST}'")).remove(0);
    assert_eq!(
        (count, unique, boot.as_str()),
        (
            ids.len() as u64,
            ids.len() as u64,
            custos_store::synth::SYNTH_BOOT
        )
    );
    let (count, unique, stats) = query::<(u64, u64, u64)>(
        &ch,
        "SELECT count(), uniqExact(host, boot, id), (SELECT count() FROM records WHERE host = 'recorded-host' AND type = 'stats') FROM events WHERE host = 'recorded-host'",
    )
    .remove(0);
    assert_eq!(
        (count, unique, stats),
        (recorded_events, recorded_events, 1)
    );

    // A new group reads the topic from the start: every line is re-delivered,
    // and ClickHouse's marks skip them all.
    let again = ingest(&broker, &ch, topic, "g2");
    assert_eq!(
        (again.events, again.losses, again.records, again.redelivered),
        (0, 0, 0, lines + recorded.lines().count() as u64),
        "{again:?}"
    );
    let count: u64 = query(&ch, "SELECT count() FROM events")[0];
    assert_eq!(count, ids.len() as u64 + recorded_events);
    eprintln!(
        "{} lines, {} events (and {recorded_events} recorded ones); took {:?}",
        lines,
        ids.len(),
        started.elapsed()
    );
}

#[test]
fn broker_outage_loses_nothing_silently_and_duplicates_nothing() {
    let started = Instant::now();
    let topic = "custos-outage";
    let (mut broker, ch) = servers(1, topic);
    let (stream, ids, _) = stream();
    let lines: Vec<&[u8]> = stream.split_inclusive(|&b| b == b'\n').collect();

    let mut opts = KafkaOptions::new(&broker.bootstrap(), topic, HOST);
    // A small buffer, so the outage overflows it.
    opts.buffer_messages = 2_000;
    let (sink, mut w) = sink(opts);
    let third = lines.len() / 3;
    for l in &lines[..third] {
        w.write_all(l).unwrap();
    }
    // The sink has taken those lines (some may still wait in its buffer, unacknowledged).
    while sink.lines_done.load(std::sync::atomic::Ordering::Relaxed) < third as u64 {
        std::thread::sleep(Duration::from_millis(10));
    }
    broker.kill();
    for l in &lines[third..2 * third] {
        w.write_all(l).unwrap();
    }
    // Give the sink time to take the lines written during the outage.
    std::thread::sleep(Duration::from_millis(500));
    broker.restart().unwrap();
    // The rest at a modest pace (about 2k lines/s), so the sink finds the
    // broker again while it comes.
    for chunk in lines[2 * third..].chunks(100) {
        for l in chunk {
            w.write_all(l).unwrap();
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(w);
    let sent = sink.finish().unwrap();
    assert!(
        sent.dropped_events > 0,
        "the outage overflowed the buffer: {sent:?}"
    );
    assert!(
        sent.loss_records > 0 && sent.unreported_lines == 0,
        "the drops were reported in-band: {sent:?}"
    );

    let got = ingest(&broker, &ch, topic, "g1");
    let (count, unique): (u64, u64) =
        query(&ch, "SELECT count(), uniqExact(host, boot, id) FROM events")[0];
    assert_eq!(count, unique, "no event twice");
    let lost: u64 = query(
        &ch,
        &format!("SELECT sum(count) FROM losses WHERE category = '{LOSS_CATEGORY}'"),
    )[0];
    assert_eq!(
        lost, sent.dropped_events,
        "the loss records count every dropped event"
    );
    assert_eq!(
        count + lost,
        ids.len() as u64,
        "every event is in ClickHouse or counted lost: {got:?} {sent:?}"
    );
    let got_ids: Vec<u64> = query(&ch, "SELECT id FROM events");
    assert!(
        got_ids.iter().all(|id| ids.binary_search(id).is_ok()),
        "only the stream's events"
    );
    // Before the outage nothing was lost, and after it the sink resumed.
    let event_ids = |ls: &[&[u8]]| -> Vec<u64> {
        ls.iter()
            .filter_map(
                |l| match parse_line(std::str::from_utf8(l).unwrap().trim_end()) {
                    Ok(Record::Event(e, _)) => Some(e.id),
                    _ => None,
                },
            )
            .collect()
    };
    let stored = |id: &u64| got_ids.contains(id);
    let before = event_ids(&lines[..third]);
    assert!(
        before.iter().all(stored),
        "every event before the outage arrived: {} of {}; {sent:?}",
        before.iter().filter(|i| stored(i)).count(),
        before.len()
    );
    let after = event_ids(&lines[lines.len() - 100..]);
    assert!(
        !after.is_empty() && after.iter().all(stored),
        "the last events, after the outage, arrived"
    );
    eprintln!(
        "{} events: {} stored, {} lost in the outage; took {:?}",
        ids.len(),
        count,
        lost,
        started.elapsed()
    );
}

#[test]
fn clickhouse_crash_mid_ingest_is_waited_out_and_stores_each_line_once() {
    let started = Instant::now();
    let topic = "custos-chcrash";
    let (broker, mut ch) = servers(2, topic);
    let (stream, ids, _) = stream();
    let send = |host: &str| {
        let (sink, mut w) = sink(KafkaOptions::new(&broker.bootstrap(), topic, host));
        w.write_all(&stream).unwrap();
        drop(w);
        assert_eq!(sink.finish().unwrap().dropped_lines, 0);
    };
    send(HOST);

    let mut opts = IngestOptions::new(&broker.bootstrap(), topic, &ch.url());
    opts.batch_lines = 2_000;
    opts.batch_wait = Duration::from_millis(200);
    let ingester = Ingester::connect(opts).unwrap();
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    let running = std::thread::spawn(move || ingester.run(&s));
    let count = |ch: &ClickHouseServer| -> Option<(u64, u64)> {
        let client = clickhouse::Client::default()
            .with_url(ch.url())
            .with_validation(false);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(
            client
                .query("SELECT count(), uniqExact(host, boot, id) FROM custos.events")
                .fetch_one(),
        )
        .ok()
    };
    let wait_for = |ch: &ClickHouseServer, n: u64| {
        let t = Instant::now();
        while count(ch).is_none_or(|c| c.0 < n) && t.elapsed() < Duration::from_secs(60) {
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    wait_for(&ch, ids.len() as u64);

    // ClickHouse crashes; a second host's stream comes meanwhile.
    ch.kill();
    send("test-host-2");
    std::thread::sleep(Duration::from_secs(1));
    ch.restart().unwrap();
    wait_for(&ch, 2 * ids.len() as u64);
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let got = running.join().unwrap().unwrap();
    assert!(
        got.retries > 0,
        "the crash failed an insert, which was tried again: {got:?}"
    );
    let (count, unique) = count(&ch).unwrap();
    assert_eq!(
        (count, unique),
        (2 * ids.len() as u64, 2 * ids.len() as u64),
        "{got:?}"
    );
    eprintln!(
        "{} events from two hosts, {} inserts tried again; took {:?}",
        count,
        got.retries,
        started.elapsed()
    );
}

#[test]
fn broker_gone_at_the_end_every_line_is_delivered_or_counted() {
    let topic = "custos-gone";
    let mut broker = KafkaBroker::start(1).unwrap();
    broker.create_topic(topic, 1).unwrap();
    let (stream, _, _) = stream();
    let lines: Vec<&[u8]> = stream.split_inclusive(|&b| b == b'\n').collect();
    let mut opts = KafkaOptions::new(&broker.bootstrap(), topic, HOST);
    opts.buffer_messages = 2_000;
    opts.flush_timeout = Duration::from_secs(2);
    let (sink, mut w) = sink(opts);
    let half = lines.len() / 2;
    for l in &lines[..half] {
        w.write_all(l).unwrap();
    }
    while sink.lines_done.load(std::sync::atomic::Ordering::Relaxed) < half as u64 {
        std::thread::sleep(Duration::from_millis(10));
    }
    broker.kill();
    for l in &lines[half..] {
        w.write_all(l).unwrap();
    }
    drop(w);
    let sent = sink.finish().unwrap();
    // Nothing in-band could say what was lost: all of it is in the summary.
    assert_eq!(
        sent.delivered + sent.dropped_lines,
        lines.len() as u64,
        "{sent:?}"
    );
    assert_eq!(
        (sent.unreported_lines, sent.unreported_events),
        (sent.dropped_lines, sent.dropped_events),
        "{sent:?}"
    );
    assert!(
        sent.dropped_lines >= (lines.len() - half) as u64,
        "{sent:?}"
    );
}

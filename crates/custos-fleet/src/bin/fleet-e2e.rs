//! The fleet end to end (bench/fleet/README.md, results.json): a live
//! `fleet ingest --graph-dir` while a synthetic stream goes through the
//! Kafka sink with the broker killed and restarted in the middle; then
//! probe events one at a time, each timed from its write into the sink to
//! when ClickHouse answers it; then a cross-host query on two hosts'
//! streams (servers::fleet_streams).

use anyhow::{ensure, Result};
use clap::Parser;
use custos_fleet::ingest::{IngestOptions, Ingester};
use custos_fleet::query::Fleet;
use custos_fleet::servers::{fleet_streams, ClickHouseServer, KafkaBroker};
use custos_fleet::sink::{KafkaOptions, KafkaTarget};
use custos_store::query::{Direction, Window};
use custos_store::sink::LiveSink;
use custos_store::synth::{self, SynthConfig};
use serde_json::json;
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Parser)]
#[command(
    about = "The fleet end to end: throughput, latency, duplicates after a broker restart, a cross-host query"
)]
struct Args {
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Fraction of the store bench's LPM scale (0.01 ≈ 140k events).
    #[arg(long, default_value_t = 0.01)]
    scale: f64,
    /// Probe events timed one by one.
    #[arg(long, default_value_t = 50)]
    probes: u64,
    #[arg(long)]
    results: Option<PathBuf>,
}

fn main() -> Result<()> {
    let args = Args::parse();
    let mut stream = Vec::new();
    let report = synth::generate(
        &SynthConfig::scaled(args.seed, args.scale),
        &mut stream,
        |_| {},
    )?;
    let ch = ClickHouseServer::start()?;
    let mut broker = KafkaBroker::start(2)?;
    let topic = "custos-e2e";
    broker.create_topic(topic, 2)?;
    let graph_dir = tempfile::tempdir()?;

    // The ingester runs live, as in production, batching every 100 ms.
    let mut opts = IngestOptions::new(&broker.bootstrap(), topic, &ch.url());
    opts.batch_wait = Duration::from_millis(100);
    opts.graph_dir = Some(graph_dir.path().to_path_buf());
    let stop = Arc::new(AtomicBool::new(false));
    let ingester = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || Ingester::connect(opts)?.run(&stop))
    };
    let count = |sql: &str| -> Result<u64> { Ok(ch.query_u64(sql)?.first().copied().unwrap_or(0)) };

    // Throughput: from the first line written to the last event queryable,
    // with the broker SIGKILLed a third of the way and restarted.
    let start = Instant::now();
    let (sink, mut w) = LiveSink::spawn(
        "custos-kafka-sink",
        KafkaTarget::connect(KafkaOptions::new(&broker.bootstrap(), topic, "bench-host"))?,
        64 << 20,
    )?;
    let third = stream.len() / 3;
    let cut = third
        + stream[third..]
            .iter()
            .position(|&b| b == b'\n')
            .map_or(0, |p| p + 1);
    w.write_all(&stream[..cut])?;
    std::thread::sleep(Duration::from_millis(500));
    broker.kill();
    std::thread::sleep(Duration::from_secs(2));
    broker.restart()?;
    w.write_all(&stream[cut..])?;
    drop(w);
    let sent = sink.finish()?;
    loop {
        let stored = count("SELECT count() FROM custos.events WHERE host = 'bench-host'")?;
        let counted = count(
            "SELECT sum(count) FROM custos.losses WHERE host = 'bench-host' AND category = 'kafka'",
        )?;
        if stored + counted >= report.events {
            break;
        }
        ensure!(
            start.elapsed() < Duration::from_secs(600),
            "events never arrived: {stored} stored, {counted} counted lost of {}",
            report.events
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let secs = start.elapsed().as_secs_f64();
    let stored = count("SELECT count() FROM custos.events WHERE host = 'bench-host'")?;
    let duplicates = stored
        - count("SELECT uniqExact(host, boot, id) FROM custos.events WHERE host = 'bench-host'")?;
    let kafka_lost = count(
        "SELECT sum(count) FROM custos.losses WHERE host = 'bench-host' AND category = 'kafka'",
    )?;
    eprintln!("fleet-e2e: {stored} events stored, {kafka_lost} counted lost, {duplicates} duplicates, {secs:.2} s ({sent:?})");

    // Latency: one event at a time, from the write into the sink to a
    // ClickHouse answer holding it (polled every 5 ms).
    let (probe_sink, mut pw) = LiveSink::spawn(
        "custos-kafka-sink",
        KafkaTarget::connect(KafkaOptions::new(&broker.bootstrap(), topic, "probe-host"))?,
        1 << 20,
    )?;
    let mut lat = Vec::new();
    for i in 1..=args.probes {
        let line = format!(
            r#"{{"type":"event","id":{i},"cpu":0,"seq":{i},"time_ns":{},"pid":1,"tid":1,"ppid":0,"comm":"probe","syscall":"getpid","ret":1}}"#,
            1_800_000_000_000_000_000u64 + i
        );
        let t = Instant::now();
        pw.write_all(format!("{line}\n").as_bytes())?;
        pw.flush()?;
        while count(&format!(
            "SELECT count() FROM custos.events WHERE host = 'probe-host' AND id = {i}"
        ))? == 0
        {
            ensure!(
                t.elapsed() < Duration::from_secs(60),
                "probe {i} never arrived"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        lat.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    drop(pw);
    probe_sink.finish()?;
    lat.sort_by(f64::total_cmp);
    let pct = |p: f64| lat[((lat.len() as f64 * p).ceil() as usize).clamp(1, lat.len()) - 1];

    // A cross-host query: three hosts' streams, the secret's descendants.
    for (host, lines) in fleet_streams() {
        let (s, mut w) = LiveSink::spawn(
            "custos-kafka-sink",
            KafkaTarget::connect(KafkaOptions::new(&broker.bootstrap(), topic, host))?,
            1 << 20,
        )?;
        w.write_all(lines.as_bytes())?;
        drop(w);
        s.finish()?;
    }
    let t = Instant::now();
    while count(
        "SELECT count() FROM custos.nodes WHERE host = 'host-b' AND name = '/srv/received'",
    )? == 0
    {
        ensure!(
            t.elapsed() < Duration::from_secs(60),
            "host-b's graph never arrived"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut query_ms = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        let mut fleet = Fleet::connect(&ch.url(), "custos")?;
        let d = fleet.ancestry(
            "host-a:/etc/secret",
            Direction::Descendants,
            None,
            Window::default(),
        )?;
        query_ms.push(t.elapsed().as_secs_f64() * 1000.0);
        ensure!(
            d.nodes.iter().any(|n| n.name == "host-b:/srv/received"),
            "the query did not cross hosts"
        );
    }
    query_ms.sort_by(f64::total_cmp);
    stop.store(true, Ordering::SeqCst);
    let ingested = ingester.join().expect("the ingester thread")?;

    let disk =
        count("SELECT sum(bytes_on_disk) FROM system.parts WHERE database = 'custos' AND active")?;
    let results = json!({
        "command": "bench/fleet/run.sh (fleet-e2e --scale 0.01 --probes 50)",
        "events": report.events,
        "events_per_s": stored as f64 / secs,
        "e2e_latency_ms_p50": pct(0.5),
        "e2e_latency_ms_p99": pct(0.99),
        "clickhouse_bytes_per_event": disk as f64 / stored as f64,
        "cross_host_query_ms": query_ms[query_ms.len() / 2],
        "duplicates_after_broker_restart": duplicates,
        "events_lost_in_broker_outage_counted": kafka_lost,
        "graph_nodes": ingested.nodes,
        "graph_edges": ingested.edges,
        "ingest_batch_wait_ms": 100,
        "machine": format!("{} cores", std::thread::available_parallelism().map_or(0, |n| n.get())),
    });
    let text = serde_json::to_string_pretty(&results)? + "\n";
    match &args.results {
        Some(p) => std::fs::write(p, &text)?,
        None => print!("{text}"),
    }
    eprint!("{text}");
    Ok(())
}

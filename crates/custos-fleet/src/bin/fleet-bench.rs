//! The fleet benchmark (bench/fleet/README.md): a synthetic stream through
//! the Kafka sink into a real broker, then `fleet ingest` into a real
//! ClickHouse; measures events/s of each leg and ClickHouse's bytes per
//! event against gzip of the JSON Lines.

use anyhow::{ensure, Result};
use clap::Parser;
use custos_fleet::ingest::{IngestOptions, Ingester};
use custos_fleet::servers::{ClickHouseServer, KafkaBroker};
use custos_fleet::sink::{KafkaOptions, KafkaTarget};
use custos_store::sink::LiveSink;
use custos_store::synth::{self, SynthConfig};
use serde_json::json;
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

#[derive(Parser)]
#[command(about = "Benchmark the fleet path: collector stream → Kafka → ClickHouse")]
struct Args {
    /// Generator seed (same seed, same stream).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Fraction of the store bench's LPM scale (0.01 ≈ 140k events).
    #[arg(long, default_value_t = 0.05)]
    scale: f64,
    /// Partitions of the topic.
    #[arg(long, default_value_t = 4)]
    partitions: i32,
    /// Lines per ClickHouse insert.
    #[arg(long, default_value_t = custos_fleet::ingest::DEFAULT_BATCH_LINES)]
    batch_lines: usize,
    /// ClickHouse compresses parts with zstd instead of its default LZ4
    /// (server-wide: 18.16 has no per-column codecs).
    #[arg(long)]
    zstd: bool,
    /// The results file (not written when absent).
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
    let raw_bytes = stream.len() as u64;
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(6));
    gz.write_all(&stream)?;
    let gzip_bytes = gz.finish()?.len() as u64;
    eprintln!(
        "fleet-bench: {} lines, {} events, {raw_bytes} bytes ({gzip_bytes} gzip)",
        report.lines, report.events
    );

    let ch = match args.zstd {
        true => ClickHouseServer::start_with(
            "<compression><case><method>zstd</method></case></compression>",
        )?,
        false => ClickHouseServer::start()?,
    };
    let broker = KafkaBroker::start(args.partitions as u32)?;
    let topic = "custos-bench";
    broker.create_topic(topic, args.partitions)?;

    // Leg 1: the sink, from the first write to the last acknowledgement.
    let start = Instant::now();
    let target = KafkaTarget::connect(KafkaOptions::new(&broker.bootstrap(), topic, "bench-host"))?;
    let (sink, mut w) = LiveSink::spawn("custos-kafka-sink", target, 64 << 20)?;
    for chunk in stream.chunks(64 << 10) {
        w.write_all(chunk)?;
    }
    drop(w);
    let sent = sink.finish()?;
    let sink_secs = start.elapsed().as_secs_f64();
    ensure!(
        sent.delivered == report.lines && sent.dropped_lines == 0,
        "the sink lost lines: {sent:?}"
    );
    eprintln!(
        "fleet-bench: sink: {:.0} events/s ({sink_secs:.2} s)",
        report.events as f64 / sink_secs
    );

    // Leg 2: the ingest of the full topic, busy time only (not the idle wait at the end).
    let mut opts = IngestOptions::new(&broker.bootstrap(), topic, &ch.url());
    opts.batch_lines = args.batch_lines;
    opts.stop_when_idle = Some(Duration::from_secs(3));
    let got = Ingester::connect(opts)?.run(&AtomicBool::new(false))?;
    ensure!(
        got.events == report.events,
        "ingested {} of {} events",
        got.events,
        report.events
    );
    let ingest_secs = got.busy.as_secs_f64();
    eprintln!(
        "fleet-bench: ingest: {:.0} events/s ({ingest_secs:.2} s, {} batches)",
        report.events as f64 / ingest_secs,
        got.batches
    );

    // What ClickHouse keeps: every table's active parts, and the events
    // table's columns (the raw line against the typed ones).
    let client = clickhouse::Client::default()
        .with_url(ch.url())
        .with_validation(false);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let tables: Vec<(String, u64, u64, u64)> = rt.block_on(
        client
            .query("SELECT table, sum(rows), sum(bytes_on_disk), sum(data_uncompressed_bytes) FROM system.parts WHERE database = 'custos' AND active GROUP BY table ORDER BY table")
            .fetch_all(),
    )?;
    let columns: Vec<(String, u64)> = rt.block_on(
        client
            .query("SELECT name, data_compressed_bytes FROM system.columns WHERE database = 'custos' AND table = 'events' ORDER BY data_compressed_bytes DESC")
            .fetch_all(),
    )?;
    let disk: u64 = tables.iter().map(|t| t.2).sum();
    // Merged into one part per partition (what the table settles to).
    for t in custos_fleet::schema::TABLES {
        rt.block_on(
            client
                .query(&format!("OPTIMIZE TABLE custos.{t} FINAL"))
                .execute(),
        )?;
    }
    let merged: u64 = rt.block_on(
        client
            .query(
                "SELECT sum(bytes_on_disk) FROM system.parts WHERE database = 'custos' AND active",
            )
            .fetch_one(),
    )?;
    let line_col = columns.iter().find(|c| c.0 == "line").map_or(0, |c| c.1);
    let per = |b: u64| b as f64 / report.events as f64;
    let results = json!({
        "seed": args.seed,
        "scale": args.scale,
        "partitions": args.partitions,
        "clickhouse_compression": if args.zstd { "zstd" } else { "lz4" },
        "batch_lines": args.batch_lines,
        "lines": report.lines,
        "events": report.events,
        "raw_bytes_per_event": per(raw_bytes),
        "gzip_bytes_per_event": per(gzip_bytes),
        "sink_events_per_s": report.events as f64 / sink_secs,
        "ingest_events_per_s": report.events as f64 / ingest_secs,
        "ingest_batches": got.batches,
        "clickhouse_bytes_per_event": per(disk),
        "clickhouse_bytes_per_event_merged": per(merged),
        "clickhouse_line_column_bytes_per_event": per(line_col),
        "clickhouse_typed_columns_bytes_per_event": per(columns.iter().filter(|c| c.0 != "line").map(|c| c.1).sum()),
        "tables": tables.iter().map(|(t, rows, disk, raw)| json!({"table": t, "rows": rows, "bytes_on_disk": disk, "uncompressed_bytes": raw})).collect::<Vec<_>>(),
        "events_columns_compressed_bytes": columns.iter().map(|(c, b)| json!({"column": c, "bytes": b})).collect::<Vec<_>>(),
        "machine": format!("{} cores", std::thread::available_parallelism().map_or(0, |n| n.get())),
    });
    let text = serde_json::to_string_pretty(&results)? + "\n";
    match &args.results {
        Some(p) => std::fs::write(p, &text)?,
        None => print!("{text}"),
    }
    eprintln!(
        "fleet-bench: ClickHouse {:.1} bytes/event on disk ({:.1} merged; {:.1} of them the raw line), gzip {:.1}, raw {:.1}",
        per(disk),
        per(merged),
        per(line_col),
        per(gzip_bytes),
        per(raw_bytes)
    );
    Ok(())
}

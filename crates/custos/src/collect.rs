//! `custos collect` with the store attached: the collector's options plus
//! `--db` and `--archive`, which send the stream straight into the provenance
//! store and/or a compressed archive as it is recorded, and `--kafka`, which
//! sends it to the fleet's Kafka topic (docs/fleet.md).
//!
//! This lives in the binary because it joins crates that otherwise do not
//! know each other: the collector writes a stream, the store and the fleet
//! read one.

use anyhow::Result;
use clap::Args;
use custos_output::{Existing, Output};
use std::io::Write;
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct CollectCmd {
    #[command(flatten)]
    pub collect: custos_collector::cli::CollectArgs,
    /// Also ingest the events into this provenance store (SQLite) as they are recorded.
    #[arg(long, value_name = "FILE")]
    pub db: Option<PathBuf>,
    /// Also record the raw stream, compressed (`.zst` or `.gz`); beside a
    /// rotated `-o DIR` (--rotate-mb), a directory of the same segments
    /// compressed with zstd.
    #[arg(long, value_name = "FILE|DIR")]
    pub archive: Option<PathBuf>,
    #[command(flatten)]
    pub kafka: custos_fleet::cli::KafkaArgs,
    /// Stream not yet stored that may wait for the store (MiB). Past it the
    /// collector waits for the store, and a flood the store cannot follow is
    /// refused by the kernel's rings: counted and reported, never unbounded memory.
    /// (The same bound holds the stream waiting for the Kafka sink.)
    #[arg(long, default_value_t = custos_store::sink::DEFAULT_SINK_BUFFER >> 20, value_name = "MIB")]
    pub sink_buffer_mb: usize,
    #[command(flatten)]
    pub db_cache: custos_store::cli::DbCacheArg,
}

pub fn run(cmd: CollectCmd) -> Result<i32> {
    // Before the store is opened: --features-only writes nothing.
    cmd.collect.check_features_only(&[
        ("--db", cmd.db.is_some()),
        ("--archive", cmd.archive.is_some()),
        ("--kafka", cmd.kafka.kafka.is_some()),
    ])?;
    // Beside a rotated -o DIR the archive is a directory of the same
    // segments, compressed (one compressor per segment, cut where the
    // stream's segment headers are).
    let archive_series = cmd.collect.rotate_mb.is_some() && cmd.archive.is_some();
    let kafka = cmd.kafka.options()?;
    if cmd.sink_buffer_mb == 0 || cmd.sink_buffer_mb > 1 << 20 {
        anyhow::bail!("--sink-buffer-mb must be between 1 and 1048576");
    }
    // Every option and every file this run writes, before the store or the
    // archive is opened: a typo must not cost an earlier recording.
    let existing = cmd.collect.existing();
    if !cmd.collect.list_syscalls {
        let mut outputs = Vec::new();
        if let Some(db) = &cmd.db {
            // The store grows with every run: an existing one is the point.
            outputs.push(Output::new("--db", db, Existing::Append));
        }
        match &cmd.archive {
            Some(a) if archive_series => {
                if custos_store::archive::check_name(a).is_ok() {
                    anyhow::bail!(
                        "--archive {}: with --rotate-mb the archive is a directory of compressed segments (segment-NNNNNN.jsonl.zst), like -o DIR: name a directory, not a .zst or .gz file",
                        a.display()
                    );
                }
                custos_output::segments::check_dir("--archive", a, existing)?;
                if cmd.collect.output.as_deref() == Some(a.as_path()) {
                    anyhow::bail!(
                        "--archive {}: the same directory as -o: the archive's segments go beside the plain ones of the same numbers; name another directory",
                        a.display()
                    );
                }
            }
            Some(a) => {
                custos_store::archive::check_name(a)?;
                outputs.push(Output::new("--archive", a, existing));
            }
            None => {}
        }
        cmd.collect.validate(&outputs)?;
    }
    // Listening before the store or the archive is opened: a taken port
    // must not cost an earlier recording either.
    let endpoint = match cmd.collect.list_syscalls {
        true => None,
        false => cmd.collect.bind_metrics()?,
    };
    // After the port, before any output: a refusal moves nothing.
    if !cmd.collect.list_syscalls {
        cmd.collect.move_previous_aside("custos collect")?;
        if let Some(a) = cmd
            .archive
            .as_ref()
            .filter(|_| existing == Existing::SetAside)
        {
            custos_collector::cli::set_aside_noting("custos collect", "--archive", a)?;
        }
    }
    if cmd.db.is_none() && cmd.archive.is_none() && kafka.is_none() {
        return custos_collector::cli::run_with_sink(cmd.collect, None, endpoint);
    }
    let store = match cmd.db.is_some() || cmd.archive.is_some() {
        true => {
            // The store seals its batches with the key that seals the stream.
            let seal_key = match cmd.db.is_some() && !cmd.collect.no_seal {
                true => Some(custos_seal::SealKey::open(
                    cmd.collect.seal_key.as_deref(),
                    "custos collect",
                )?),
                false => None,
            };
            let recorder = match &cmd.archive {
                Some(a) if archive_series => Some(custos_store::archive::Recorder::create_series(
                    a,
                    existing,
                    "custos collect",
                )?),
                Some(a) => Some(custos_store::archive::Recorder::create(a, existing)?),
                None => None,
            };
            Some(custos_store::sink::LiveSink::start(
                cmd.db.as_deref(),
                recorder,
                "custos collect",
                cmd.sink_buffer_mb << 20,
                seal_key,
                cmd.db_cache.db_cache_mb,
            )?)
        }
        false => None,
    };
    let kafka = match kafka {
        Some(opts) => {
            let target = custos_fleet::sink::KafkaTarget::connect(opts)?;
            Some(custos_store::sink::LiveSink::spawn(
                "custos-kafka-sink",
                target,
                cmd.sink_buffer_mb << 20,
            )?)
        }
        None => None,
    };
    // The consumer lag the scheduler sees: the store's when there is one (the
    // Kafka sink drops rather than wait through an outage, so it is not the
    // one that falls behind for long).
    let (writer, done, store, kafka): (Box<dyn Write + Send>, _, _, _) = match (store, kafka) {
        (Some((s, sw)), Some((k, kw))) => (
            Box::new(custos_collector::cli::Tee(Box::new(sw), Box::new(kw))),
            s.lines_done.clone(),
            Some(s),
            Some(k),
        ),
        (Some((s, sw)), None) => (Box::new(sw), s.lines_done.clone(), Some(s), None),
        (None, Some((k, kw))) => (Box::new(kw), k.lines_done.clone(), None, Some(k)),
        (None, None) => unreachable!("one sink at least"),
    };
    let code = custos_collector::cli::run_with_sink(cmd.collect, Some((writer, done)), endpoint);
    // Whatever the collector's outcome, what it delivered is written out.
    let kafka_summary = kafka.map(|k| k.finish()).transpose();
    let summary = store.map(|s| s.finish()).transpose()?;
    if let (Some(db), Some(s)) = (&cmd.db, summary.as_ref().and_then(|s| s.ingest.as_ref())) {
        eprintln!(
            "custos collect: stored in {}: {} new events, {} loss records ({} events lost), {} malformed lines; {} nodes and {} edges added",
            db.display(),
            s.events_new,
            s.losses_new,
            s.lost_events,
            s.malformed,
            s.graph.nodes,
            s.graph.edges
        );
    }
    if let Some(a) = &cmd.archive {
        eprintln!("custos collect: archived to {}", a.display());
    }
    if let Some(k) = kafka_summary? {
        eprintln!(
            "custos collect: sent to Kafka topic {}: {} lines delivered; {} lines dropped ({} events) and reported in {} loss records{}",
            cmd.kafka.topic.as_deref().unwrap_or_default(),
            k.delivered,
            k.dropped_lines,
            k.dropped_events,
            k.loss_records,
            match k.unreported_lines {
                0 => String::new(),
                n => format!("; {n} lines ({} events) dropped at the end with the broker away: reported only here", k.unreported_events),
            }
        );
    }
    code
}

//! `custos collect` with the store attached: the collector's options plus
//! `--db` and `--archive`, which send the stream straight into the provenance
//! store and/or a compressed archive as it is recorded.
//!
//! This lives in the binary because it joins two crates that otherwise do not
//! know each other: the collector writes a stream, the store reads one.

use anyhow::Result;
use clap::Args;
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct CollectCmd {
    #[command(flatten)]
    pub collect: custos_collector::cli::CollectArgs,
    /// Also ingest the events into this provenance store (SQLite) as they are recorded.
    #[arg(long, value_name = "FILE")]
    pub db: Option<PathBuf>,
    /// Also record the raw stream, compressed (`.zst` or `.gz`).
    #[arg(long, value_name = "FILE")]
    pub archive: Option<PathBuf>,
    /// Stream not yet stored that may wait for the store (MiB). Past it the
    /// collector waits for the store, and a flood the store cannot follow is
    /// refused by the kernel's rings: counted and reported, never unbounded memory.
    #[arg(long, default_value_t = custos_store::sink::DEFAULT_SINK_BUFFER >> 20, value_name = "MIB")]
    pub sink_buffer_mb: usize,
}

pub fn run(cmd: CollectCmd) -> Result<i32> {
    // Before the store is opened: --features-only writes nothing.
    cmd.collect.check_features_only(&[("--db", cmd.db.is_some()), ("--archive", cmd.archive.is_some())])?;
    if cmd.db.is_none() && cmd.archive.is_none() {
        return custos_collector::cli::run(cmd.collect);
    }
    if cmd.sink_buffer_mb == 0 || cmd.sink_buffer_mb > 1 << 20 {
        anyhow::bail!("--sink-buffer-mb must be between 1 and 1048576");
    }
    // The store seals its batches with the key that seals the stream.
    let seal_key = match cmd.db.is_some() && !cmd.collect.no_seal {
        true => Some(custos_seal::SealKey::open(cmd.collect.seal_key.as_deref(), "custos collect")?),
        false => None,
    };
    let (sink, writer) = custos_store::sink::LiveSink::start(
        cmd.db.as_deref(),
        cmd.archive.as_deref(),
        "custos collect",
        cmd.sink_buffer_mb << 20,
        seal_key,
    )?;
    let done = sink.lines_done.clone();
    let code = custos_collector::cli::run_with_sink(cmd.collect, Some((Box::new(writer), done)));
    // Whatever the collector's outcome, what it delivered is written out.
    let summary = sink.finish()?;
    if let (Some(db), Some(s)) = (&cmd.db, &summary.ingest) {
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
    code
}

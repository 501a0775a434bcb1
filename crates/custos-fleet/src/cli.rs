//! `custos fleet ...` and the Kafka options of `custos collect`.

use crate::ingest::{IngestOptions, Ingester, DEFAULT_BATCH_LINES};
use crate::sink::{KafkaOptions, DEFAULT_BUFFER_KIB, DEFAULT_BUFFER_MESSAGES};
use anyhow::Result;
use clap::{Args, Subcommand};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// `custos collect --kafka BROKERS --topic T`: also send the stream to Kafka.
#[derive(Args, Debug, Clone)]
pub struct KafkaArgs {
    /// Also send every line of the stream to Kafka (bootstrap brokers,
    /// `host:port[,host:port]`), keyed by host and boot (docs/fleet.md).
    #[arg(long, value_name = "BROKERS", requires = "topic")]
    pub kafka: Option<String>,
    /// The Kafka topic (with --kafka).
    #[arg(long, value_name = "TOPIC", requires = "kafka")]
    pub topic: Option<String>,
    /// This host's identity in the fleet. Default: /etc/machine-id.
    #[arg(long, value_name = "ID", requires = "kafka")]
    pub host_id: Option<String>,
    /// Lines the Kafka producer may hold unacknowledged; while the broker is
    /// away, past this (or --kafka-buffer-mb) lines are dropped and counted
    /// in an in-band loss record.
    #[arg(long, default_value_t = DEFAULT_BUFFER_MESSAGES, value_name = "LINES")]
    pub kafka_buffer_lines: usize,
    /// Bytes the Kafka producer may hold unacknowledged (MiB).
    #[arg(long, default_value_t = DEFAULT_BUFFER_KIB >> 10, value_name = "MIB")]
    pub kafka_buffer_mb: usize,
}

impl KafkaArgs {
    /// The sink's options, if `--kafka` was given.
    pub fn options(&self) -> Result<Option<KafkaOptions>> {
        let (Some(brokers), Some(topic)) = (&self.kafka, &self.topic) else {
            return Ok(None);
        };
        if self.kafka_buffer_lines == 0 || self.kafka_buffer_lines > 10_000_000 {
            anyhow::bail!("--kafka-buffer-lines must be between 1 and 10000000");
        }
        // librdkafka's own bound on queue.buffering.max.kbytes is 2^31-1 KiB.
        if self.kafka_buffer_mb == 0 || self.kafka_buffer_mb > 1 << 20 {
            anyhow::bail!("--kafka-buffer-mb must be between 1 and 1048576");
        }
        let host = crate::sink::host_id(self.host_id.as_deref())?;
        let mut opts = KafkaOptions::new(brokers, topic, &host);
        opts.buffer_messages = self.kafka_buffer_lines;
        opts.buffer_kib = self.kafka_buffer_mb << 10;
        Ok(Some(opts))
    }
}

#[derive(Subcommand, Debug)]
pub enum FleetCommand {
    /// Move the collectors' Kafka topic into ClickHouse, each line once.
    Ingest(IngestArgs),
}

#[derive(Args, Debug)]
pub struct IngestArgs {
    /// Kafka bootstrap brokers, `host:port[,host:port]`.
    #[arg(long, value_name = "BROKERS")]
    pub kafka: String,
    #[arg(long, value_name = "TOPIC")]
    pub topic: String,
    /// ClickHouse's HTTP interface.
    #[arg(long, value_name = "URL")]
    pub clickhouse: String,
    /// The ClickHouse database of the tables (created on first run).
    #[arg(long, default_value = crate::schema::DEFAULT_DATABASE, value_name = "NAME")]
    pub clickhouse_db: String,
    /// Kafka consumer group; ingesters of one group share the partitions.
    #[arg(long, default_value = "custos-fleet-ingest", value_name = "GROUP")]
    pub group: String,
    /// Lines per insert, at most.
    #[arg(long, default_value_t = DEFAULT_BATCH_LINES, value_name = "LINES")]
    pub batch_lines: usize,
    /// Seconds a batch may gather lines before it is inserted.
    #[arg(long, default_value_t = 1.0, value_name = "SECS")]
    pub batch_secs: f64,
    /// Stop once the topic has been quiet this many seconds, counted from when
    /// the group assigned this ingester its partitions (a catch-up run).
    #[arg(long, value_name = "SECS")]
    pub stop_when_idle: Option<f64>,
    /// Also build each host's provenance graph (the store's graph state, one
    /// SQLite file per host, kept here) and store its nodes and edges in
    /// ClickHouse, for `custos query --clickhouse` (docs/fleet.md, "The graph").
    #[arg(long, value_name = "DIR")]
    pub graph_dir: Option<std::path::PathBuf>,
    /// Serve the ingester's figures (those of its final line,
    /// docs/operations.md) for Prometheus at http://ADDR/metrics, e.g.
    /// 127.0.0.1:9466 (an IP address and a port).
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<std::net::SocketAddr>,
    /// After the run ends (--stop-when-idle, SIGINT), keep serving until a
    /// scrape has read the final account, at most this many seconds (0:
    /// exit at once).
    #[arg(long, default_value_t = 0.0, value_name = "SECS", requires = "metrics")]
    pub metrics_final_wait: f64,
}

fn secs(name: &str, v: f64) -> Result<Duration> {
    if !v.is_finite() || v <= 0.0 || v > 86_400.0 {
        anyhow::bail!("{name} must be a number of seconds above 0 (and at most a day)");
    }
    Ok(Duration::from_secs_f64(v))
}

pub fn run(cmd: FleetCommand) -> Result<i32> {
    match cmd {
        FleetCommand::Ingest(a) => {
            let mut opts = IngestOptions::new(&a.kafka, &a.topic, &a.clickhouse);
            opts.group = a.group;
            opts.database = a.clickhouse_db;
            opts.batch_lines = a.batch_lines;
            opts.batch_wait = secs("--batch-secs", a.batch_secs)?;
            opts.stop_when_idle = a
                .stop_when_idle
                .map(|s| secs("--stop-when-idle", s))
                .transpose()?;
            opts.graph_dir = a.graph_dir;
            let final_wait = custos_metrics::final_wait(a.metrics_final_wait)?;
            // Bound before ClickHouse's schema or the graph's directory is
            // made: a taken port is refused with nothing created.
            if let Some(addr) = a.metrics {
                let endpoint = custos_metrics::Endpoint::bind(addr)?;
                opts.metrics =
                    Some(endpoint.serve(crate::metrics::PROCESS, crate::metrics::encode_metrics)?);
                eprintln!("custos fleet ingest: metrics at http://{addr}/metrics");
            }
            let metrics = opts.metrics.clone();
            let stop = Arc::new(AtomicBool::new(false));
            let s = Arc::clone(&stop);
            ctrlc::set_handler(move || s.store(true, Ordering::SeqCst))?;
            let summary = Ingester::connect(opts)?.run(&stop)?;
            eprintln!(
                "custos fleet ingest: {} lines read, {} batches: {} events, {} loss records ({} events lost), {} other records, {} malformed lines; {} re-delivered lines skipped; graph: {} nodes, {} edges; {} requests to ClickHouse retried",
                summary.lines, summary.batches, summary.events, summary.losses, summary.lost_events, summary.records, summary.malformed, summary.redelivered, summary.nodes, summary.edges, summary.retries
            );
            if let Some(p) = metrics {
                p.wait_final(final_wait, "custos fleet ingest");
            }
            Ok(0)
        }
    }
}

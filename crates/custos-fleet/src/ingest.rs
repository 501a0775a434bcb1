//! `custos fleet ingest`: the topic into ClickHouse, in batches, each line
//! once (docs/fleet.md, "Exactly once").
//!
//! A batch is read from Kafka, split by record type into the three tables
//! (schema.rs), inserted table by table, and only then are its offsets
//! committed to Kafka. Every row carries its Kafka partition and offset.
//! A batch can be inserted and its commit lost (a crash, a broker outage):
//! Kafka then delivers it again. So before inserting, each table's
//! high-water mark per partition (`max(kafka_offset)`, read from ClickHouse
//! when partitions are assigned) filters out the rows the table already
//! holds. That is exact because one table's rows of one partition are
//! inserted in offset order and each insert is one block (a batch is far
//! below `max_insert_block_size`), which ClickHouse writes whole or not at
//! all. The tables' ReplacingMergeTree keys (host, boot, event id) are the
//! second guard, for a line that reached the topic twice.

use crate::schema::{self, EVENTS, LOSSES, RECORDS};
use crate::sink::{BOOT_HEADER, HOST_HEADER};
use anyhow::{bail, Context, Result};
use custos_store::record::{parse_line, Record};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance};
use rdkafka::message::{Headers, Message};
use rdkafka::{ClientContext, Offset, TopicPartitionList};
use serde::Serialize;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Debug, Clone)]
pub struct IngestOptions {
    pub brokers: String,
    pub topic: String,
    /// Kafka consumer group: ingesters of one group share the partitions.
    pub group: String,
    /// ClickHouse's HTTP interface, e.g. `http://127.0.0.1:8123`.
    pub clickhouse: String,
    pub database: String,
    /// Lines per batch, at most (bounds the ingester's memory).
    pub batch_lines: usize,
    /// How long a batch may gather lines before it is inserted.
    pub batch_wait: Duration,
    /// Stop once no line came for this long (catch-up runs, tests).
    pub stop_when_idle: Option<Duration>,
    /// Build each host's provenance graph here (the store's graph state,
    /// one SQLite file per host) and keep its nodes and edges in ClickHouse
    /// for `custos query --clickhouse`; None: events only.
    pub graph_dir: Option<std::path::PathBuf>,
    /// `--metrics`: where the summary goes for the metrics server, once a
    /// second and at the end (crate::metrics).
    pub metrics: Option<crate::metrics::Publisher>,
}

/// Default lines per batch: large enough for ClickHouse (it wants few, big
/// inserts), far below `max_insert_block_size` (1,048,576 rows), so that
/// each insert stays one block, atomic.
pub const DEFAULT_BATCH_LINES: usize = 100_000;

impl IngestOptions {
    pub fn new(brokers: &str, topic: &str, clickhouse: &str) -> IngestOptions {
        IngestOptions {
            brokers: brokers.into(),
            topic: topic.into(),
            group: "custos-fleet-ingest".into(),
            clickhouse: clickhouse.into(),
            database: schema::DEFAULT_DATABASE.into(),
            batch_lines: DEFAULT_BATCH_LINES,
            batch_wait: Duration::from_secs(1),
            stop_when_idle: None,
            graph_dir: None,
            metrics: None,
        }
    }
}

/// What an ingest run did: the figures of the line `custos fleet ingest`
/// prints at its end, and of its metrics (crate::metrics).
#[derive(Debug, Default, Clone)]
pub struct IngestSummary {
    /// Lines (Kafka messages) read from the topic, re-deliveries included.
    pub lines: u64,
    /// Batches stored: inserted, then their offsets committed.
    pub batches: u64,
    pub events: u64,
    pub losses: u64,
    /// Events counted in the loss records inserted.
    pub lost_events: u64,
    /// Boot, stats, seal and unknown lines.
    pub records: u64,
    /// Lines that were not valid records (kept in `records` as `malformed`),
    /// counted as they are inserted.
    pub malformed: u64,
    /// Lines Kafka delivered again that ClickHouse already held (skipped).
    pub redelivered: u64,
    /// Inserts tried again after ClickHouse failed them.
    pub retries: u64,
    /// Graph nodes and edges stored (with --graph-dir).
    pub nodes: u64,
    pub edges: u64,
    /// From the first line read to the last batch stored (idle time excluded).
    pub busy: Duration,
    /// Messages on the topic's assigned partitions not yet stored and
    /// committed, summed (librdkafka's `consumer_lag`, with --metrics only;
    /// None: not known yet).
    pub consumer_lag: Option<u64>,
}

#[derive(clickhouse::Row, Serialize)]
struct EventRow {
    host: String,
    boot: String,
    id: u64,
    cpu: u32,
    seq: u64,
    time_ns: u64,
    pid: u32,
    tid: u32,
    ppid: u32,
    uid: Option<u32>,
    euid: Option<u32>,
    comm: String,
    syscall: String,
    ret: Option<i64>,
    fd: Option<i32>,
    path: String,
    path2: String,
    addr: String,
    laddr: String,
    argv: Vec<String>,
    child_pid: Option<u32>,
    dev: Option<u64>,
    inode: Option<u64>,
    workflow: Option<u64>,
    container: String,
    incomplete: u8,
    line: String,
    kafka_topic: String,
    kafka_partition: i32,
    kafka_offset: i64,
}

#[derive(clickhouse::Row, Serialize)]
struct LossRow {
    host: String,
    boot: String,
    category: String,
    cpu: Option<u32>,
    first_seq: Option<u64>,
    last_seq: Option<u64>,
    count: u64,
    start_ns: u64,
    end_ns: u64,
    line: String,
    kafka_topic: String,
    kafka_partition: i32,
    kafka_offset: i64,
}

#[derive(clickhouse::Row, Serialize)]
struct RecordRow {
    host: String,
    boot: String,
    #[serde(rename = "type")]
    kind: String,
    time_ns: u64,
    line: String,
    error: String,
    kafka_topic: String,
    kafka_partition: i32,
    kafka_offset: i64,
}

/// Seq bits of an event id (`(cpu << 48) | seq`, docs/event-schema.md).
const SEQ_MASK: u64 = (1 << 48) - 1;

/// Tells the loop that partitions moved: the high-water marks must be read
/// again. And keeps the consumer's lag from librdkafka's statistics (with
/// --metrics, once a second).
struct Rebalanced(AtomicBool, Arc<Lag>);

/// The topic's lag, summed over the partitions whose lag librdkafka knows
/// (-1: none yet).
#[derive(Debug)]
pub struct Lag {
    topic: String,
    messages: AtomicI64,
}

impl Lag {
    fn get(&self) -> Option<u64> {
        u64::try_from(self.messages.load(Ordering::Relaxed)).ok()
    }
}

impl ClientContext for Rebalanced {
    fn stats(&self, statistics: rdkafka::Statistics) {
        let Some(topic) = statistics.topics.get(&self.1.topic) else {
            return;
        };
        // -1 where librdkafka does not know the partition's end or our
        // committed offset (not assigned; -1 is its internal partition).
        let known: Vec<u64> = topic
            .partitions
            .values()
            .filter_map(|p| u64::try_from(p.consumer_lag).ok())
            .collect();
        let sum = match known.is_empty() {
            true => -1,
            false => i64::try_from(known.iter().sum::<u64>()).unwrap_or(i64::MAX),
        };
        self.1.messages.store(sum, Ordering::Relaxed);
    }
}

impl ConsumerContext for Rebalanced {
    fn post_rebalance(&self, _: &BaseConsumer<Self>, _: &Rebalance<'_>) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// One batch's rows, table by table, and where it ends per partition.
#[derive(Default)]
struct Batch {
    events: Vec<EventRow>,
    losses: Vec<LossRow>,
    records: Vec<RecordRow>,
    lines: usize,
    /// Next offset to read per partition (what Kafka is told on commit).
    next: HashMap<i32, i64>,
    /// When its first line came.
    started: Option<Instant>,
    /// Every line with its host, re-deliveries too (the graph skips what it
    /// holds), when the graph is built.
    graph_lines: Vec<(String, String)>,
}

pub struct Ingester {
    opts: IngestOptions,
    consumer: BaseConsumer<Rebalanced>,
    client: clickhouse::Client,
    rt: tokio::runtime::Runtime,
    /// Per table, per partition: the highest offset the table holds (-1: none).
    marks: HashMap<&'static str, HashMap<i32, i64>>,
    summary: IngestSummary,
    last_notice: Option<(String, Instant)>,
    graphs: Option<crate::graph::HostGraphs>,
    lag: Arc<Lag>,
}

impl Ingester {
    /// Connects to both ends and creates the schema if it is not there.
    pub fn connect(opts: IngestOptions) -> Result<Ingester> {
        if opts.topic.is_empty() || opts.group.is_empty() {
            bail!("--topic and --group must not be empty");
        }
        if opts.database.is_empty()
            || !opts
                .database
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_')
        {
            bail!(
                "--clickhouse-db {:?}: only letters, digits and '_'",
                opts.database
            );
        }
        if opts.batch_lines == 0 || opts.batch_lines > 1_000_000 {
            bail!("--batch-lines must be between 1 and 1000000 (an insert must stay one block)");
        }
        if !(opts.clickhouse.starts_with("http://") || opts.clickhouse.starts_with("https://")) {
            bail!(
                "--clickhouse {:?}: give ClickHouse's HTTP URL, e.g. http://127.0.0.1:8123",
                opts.clickhouse
            );
        }
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        // RowBinary without the schema check: 18.16 has no RowBinaryWithNamesAndTypes.
        let client = clickhouse::Client::default()
            .with_url(&opts.clickhouse)
            .with_validation(false);
        for sql in schema::create_statements(&opts.database) {
            rt.block_on(client.query(&sql).execute()).with_context(|| {
                format!("creating the schema in ClickHouse at {}", opts.clickhouse)
            })?;
        }
        // A table made by someone else (or another version) under our name:
        // say so now, rather than fail every insert.
        for table in schema::TABLES.into_iter().chain(schema::GRAPH_TABLES) {
            let have: Vec<String> = rt
                .block_on(
                    client
                        .query("SELECT name FROM system.columns WHERE database = ? AND table = ?")
                        .bind(&opts.database)
                        .bind(table)
                        .fetch_all(),
                )
                .context("reading the tables' columns from ClickHouse")?;
            let mut lacks: Vec<String> = schema::columns(table)
                .into_iter()
                .filter(|c| !have.contains(c))
                .collect();
            // Columns a later version added: add them to the earlier version's table.
            if !lacks.is_empty()
                && lacks.iter().all(|c| {
                    schema::ADDED_COLUMNS
                        .iter()
                        .any(|&(t, name, _)| t == table && name == c)
                })
            {
                for &(_, name, ty) in schema::ADDED_COLUMNS
                    .iter()
                    .filter(|(t, name, _)| *t == table && lacks.iter().any(|c| c == name))
                {
                    let sql = format!(
                        "ALTER TABLE {}.{table} ADD COLUMN {name} {ty}",
                        opts.database
                    );
                    rt.block_on(client.query(&sql).execute()).with_context(|| {
                        format!("adding column {name} to {}.{table}", opts.database)
                    })?;
                }
                lacks.clear();
            }
            if !lacks.is_empty() {
                bail!(
                    "table {}.{table} is not the fleet's (docs/fleet.md): it lacks column(s) {}; drop it or give another --clickhouse-db",
                    opts.database,
                    lacks.join(", ")
                );
            }
        }
        let client = client.with_database(&opts.database);
        let lag = Arc::new(Lag {
            topic: opts.topic.clone(),
            messages: AtomicI64::new(-1),
        });
        let mut config = ClientConfig::new();
        if opts.metrics.is_some() {
            // The consumer's lag for the metrics: librdkafka's statistics,
            // handed to Rebalanced::stats from the consumer's poll.
            config.set("statistics.interval.ms", "1000");
        }
        let consumer: BaseConsumer<Rebalanced> = config
            .set("bootstrap.servers", &opts.brokers)
            .set("group.id", &opts.group)
            // Offsets are committed by hand, after the insert.
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("auto.offset.reset", "earliest")
            .set("log_level", "3")
            // As the sink's producer: librdkafka's default backs off up to
            // 10 s between reconnects, so after a broker outage ingest
            // resumed up to 10 s after the broker did (bench/fleet/README.md,
            // "Graph ingest, session 15").
            .set("reconnect.backoff.max.ms", "1000")
            .create_with_context(Rebalanced(AtomicBool::new(true), lag.clone()))
            .with_context(|| format!("connecting a Kafka consumer to {}", opts.brokers))?;
        consumer
            .subscribe(&[&opts.topic])
            .with_context(|| format!("subscribing to topic {}", opts.topic))?;
        let graphs = opts
            .graph_dir
            .as_deref()
            .map(crate::graph::HostGraphs::new)
            .transpose()?;
        Ok(Ingester {
            opts,
            consumer,
            client,
            rt,
            marks: HashMap::new(),
            summary: IngestSummary::default(),
            last_notice: None,
            graphs,
            lag,
        })
    }

    /// Hands the metrics server a copy of the summary, if one is due.
    fn publish(&self) {
        if let Some(p) = self.opts.metrics.as_ref().filter(|p| p.due()) {
            p.publish(&IngestSummary {
                consumer_lag: self.lag.get(),
                ..self.summary.clone()
            });
        }
    }

    /// Ingests until `stop` is set (or the stream is idle for `stop_when_idle`).
    pub fn run(mut self, stop: &AtomicBool) -> Result<IngestSummary> {
        // Idle counts from when the group gave us partitions: joining takes seconds.
        let mut last_line: Option<Instant> = None;
        let mut first_line: Option<Instant> = None;
        while !stop.load(Ordering::Relaxed) {
            let batch = self.gather(stop)?;
            if batch.lines == 0 {
                if last_line.is_none() && self.consumer.assignment().is_ok_and(|a| a.count() > 0) {
                    last_line = Some(Instant::now());
                }
                if let (Some(idle), Some(last)) = (self.opts.stop_when_idle, last_line) {
                    if last.elapsed() >= idle {
                        break;
                    }
                }
                continue;
            }
            first_line = first_line.or(batch.started);
            self.store(batch, stop)?;
            last_line = Some(Instant::now());
            self.summary.busy = first_line.map_or(Duration::ZERO, |f| f.elapsed());
            self.publish();
        }
        self.summary.consumer_lag = self.lag.get();
        if let Some(p) = &self.opts.metrics {
            p.publish_final(&self.summary);
        }
        Ok(self.summary)
    }

    /// Reads one batch: up to `batch_lines`, or what came within `batch_wait`.
    fn gather(&mut self, stop: &AtomicBool) -> Result<Batch> {
        let mut batch = Batch::default();
        let deadline = Instant::now() + self.opts.batch_wait;
        while batch.lines < self.opts.batch_lines && !stop.load(Ordering::Relaxed) {
            self.publish();
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            let msg = match self.consumer.poll(left.min(Duration::from_millis(200))) {
                None => continue,
                Some(Err(e)) => {
                    // The broker away: librdkafka reconnects; say so and go on.
                    self.notice(format!("kafka: {e}"));
                    continue;
                }
                Some(Ok(m)) => m,
            };
            if self.consumer.context().0.swap(false, Ordering::SeqCst) {
                self.marks.clear();
            }
            batch.started.get_or_insert_with(Instant::now);
            let (partition, offset) = (msg.partition(), msg.offset());
            batch.next.insert(partition, offset + 1);
            batch.lines += 1;
            self.summary.lines += 1;
            let (mut host, mut boot) = (None, None);
            if let Some(h) = msg.headers() {
                for hd in h.iter() {
                    let v = hd.value.map(|v| String::from_utf8_lossy(v).into_owned());
                    match hd.key {
                        HOST_HEADER => host = v,
                        BOOT_HEADER => boot = v,
                        _ => {}
                    }
                }
            }
            // A producer without our headers: its key, else unknown.
            if host.is_none() {
                if let Some(k) = msg.key().map(String::from_utf8_lossy) {
                    let mut parts = k.splitn(2, '/');
                    host = parts.next().map(str::to_string);
                    boot = boot.or(parts.next().map(str::to_string));
                }
            }
            let host = host.unwrap_or_else(|| "unknown".into());
            let boot = boot.unwrap_or_else(|| "unknown".into());
            let line = String::from_utf8_lossy(msg.payload().unwrap_or_default()).into_owned();
            if self.graphs.is_some() {
                batch.graph_lines.push((host.clone(), line.clone()));
            }
            let place = Place {
                topic: self.opts.topic.clone(),
                partition,
                offset,
            };
            self.classify(&mut batch, host, boot, line, place, stop)?;
        }
        Ok(batch)
    }

    /// Says `what` on stderr, unless it said the same in the last 10 s (a
    /// broker away repeats itself at every poll).
    fn notice(&mut self, what: String) {
        if self
            .last_notice
            .as_ref()
            .is_some_and(|(w, at)| *w == what && at.elapsed() < Duration::from_secs(10))
        {
            return;
        }
        eprintln!("custos fleet ingest: {what}");
        self.last_notice = Some((what, Instant::now()));
    }

    /// The high-water mark of `table` for `partition`, read once per
    /// assignment; asked again while ClickHouse does not answer (until `stop`).
    fn mark(&mut self, table: &'static str, partition: i32, stop: &AtomicBool) -> Result<i64> {
        let (mut delay, mut attempt) = (Duration::from_millis(200), 0);
        while !self.marks.contains_key(table) {
            let sql = format!("SELECT kafka_partition, max(kafka_offset) FROM {table} WHERE kafka_topic = ? GROUP BY kafka_partition");
            match self.rt.block_on(
                self.client
                    .query(&sql)
                    .bind(&self.opts.topic)
                    .fetch_all::<(i32, i64)>(),
            ) {
                Ok(rows) => {
                    self.marks.insert(table, rows.into_iter().collect());
                }
                Err(e) if !stop.load(Ordering::Relaxed) && worth_retrying(&e, attempt) => {
                    attempt += 1;
                    eprintln!("custos fleet ingest: reading where table {table} stands in ClickHouse: {e}; trying again in {delay:?}");
                    self.publish();
                    std::thread::sleep(delay);
                    delay = (delay * 2).min(Duration::from_secs(10));
                }
                Err(e) => {
                    return Err(e).with_context(|| {
                        format!("reading where table {table} stands in ClickHouse")
                    })
                }
            }
        }
        Ok(*self.marks[table].get(&partition).unwrap_or(&-1))
    }

    /// Parses a line into its table's row, unless that table already holds it.
    fn classify(
        &mut self,
        batch: &mut Batch,
        host: String,
        boot: String,
        line: String,
        at: Place,
        stop: &AtomicBool,
    ) -> Result<()> {
        let parsed = parse_line(&line);
        let table = match &parsed {
            Ok(Record::Event(..)) => EVENTS,
            Ok(Record::Loss(_)) => LOSSES,
            _ => RECORDS,
        };
        if at.offset <= self.mark(table, at.partition, stop)? {
            self.summary.redelivered += 1;
            return Ok(());
        }
        let Place {
            topic: kafka_topic,
            partition: kafka_partition,
            offset: kafka_offset,
        } = at;
        match parsed {
            Ok(Record::Event(e, line_boot)) => {
                let row = EventRow {
                    host,
                    boot: line_boot.map_or(boot, |b| b.into_owned()),
                    id: e.id,
                    cpu: e.cpu,
                    seq: e.id & SEQ_MASK,
                    time_ns: e.time_ns,
                    pid: e.pid,
                    tid: e.tid,
                    ppid: e.ppid,
                    uid: e.uid,
                    euid: e.euid,
                    comm: e.comm.unwrap_or_default(),
                    syscall: e.syscall.into_owned(),
                    ret: e.ret,
                    fd: e.fd,
                    path: e.path.unwrap_or_default(),
                    path2: e.path2.unwrap_or_default(),
                    addr: e.addr.unwrap_or_default(),
                    laddr: e.laddr.unwrap_or_default(),
                    argv: e.argv.unwrap_or_default(),
                    child_pid: e.child_pid,
                    dev: e.dev,
                    inode: e.inode,
                    workflow: e.workflow,
                    container: e.container.map(|c| c.id).unwrap_or_default(),
                    incomplete: e.incomplete as u8,
                    line,
                    kafka_topic,
                    kafka_partition,
                    kafka_offset,
                };
                batch.events.push(row);
            }
            Ok(Record::Loss(l)) => batch.losses.push(LossRow {
                host,
                boot: l.boot_id.unwrap_or(boot),
                category: l.category,
                cpu: l.cpu,
                first_seq: l.first_seq,
                last_seq: l.last_seq,
                count: l.count,
                start_ns: l.start_ns,
                end_ns: l.end_ns,
                line,
                kafka_topic,
                kafka_partition,
                kafka_offset,
            }),
            other => {
                let (kind, time_ns, error) = match other {
                    Ok(Record::Boot(_)) => ("boot".to_string(), 0, String::new()),
                    Ok(Record::Stats { time_ns, .. }) => {
                        ("stats".to_string(), time_ns, String::new())
                    }
                    Ok(Record::Other(kind)) => (kind, 0, String::new()),
                    Err(e) => ("malformed".to_string(), 0, e),
                    Ok(Record::Event(..) | Record::Loss(_)) => unreachable!("matched above"),
                };
                batch.records.push(RecordRow {
                    host,
                    boot,
                    kind,
                    time_ns,
                    line,
                    error,
                    kafka_topic,
                    kafka_partition,
                    kafka_offset,
                });
            }
        }
        Ok(())
    }

    /// Inserts a batch, then commits its offsets. A failed insert is tried
    /// again (ClickHouse restarting) until it succeeds or `stop` is set.
    fn store(&mut self, batch: Batch, stop: &AtomicBool) -> Result<()> {
        let Batch {
            events,
            losses,
            records,
            next,
            graph_lines,
            ..
        } = batch;
        self.insert(EVENTS, events, stop)?;
        self.insert(LOSSES, losses, stop)?;
        self.insert(RECORDS, records, stop)?;
        // The graph after the lines it is built from: a node never names an
        // event ClickHouse lacks.
        self.store_graph(&graph_lines, stop)?;
        let mut tpl = TopicPartitionList::new();
        for (&p, &o) in &next {
            tpl.add_partition_offset(&self.opts.topic, p, Offset::Offset(o))?;
        }
        // A lost commit costs a re-read, not a duplicate: the marks filter it.
        if let Err(e) = self.consumer.commit(&tpl, CommitMode::Sync) {
            self.notice(format!("committing offsets to Kafka: {e} (the batch is stored; a re-delivery will be skipped)"));
        }
        self.summary.batches += 1;
        Ok(())
    }

    /// Applies the lines to their hosts' graphs and inserts what they made.
    /// Order: ClickHouse's events, the graph's own commit, its rows in
    /// ClickHouse, Kafka's offsets. A crash between the graph's commit and
    /// its rows' insert is caught up when the host's graph is next opened
    /// (its nodes above ClickHouse's highest, its edges from ClickHouse's
    /// newest time on; the tables' keys fold the overlap).
    fn store_graph(&mut self, lines: &[(String, String)], stop: &AtomicBool) -> Result<()> {
        let Some(mut graphs) = self.graphs.take() else {
            return Ok(());
        };
        let result = (|| {
            let mut hosts: Vec<&str> = lines
                .iter()
                .map(|(h, _)| h.as_str())
                .filter(|h| !graphs.is_open(h))
                .collect();
            hosts.sort_unstable();
            hosts.dedup();
            for host in hosts {
                let marks = self.graph_marks(host, stop)?;
                let (nodes, edges) = graphs.open(host, marks)?;
                self.insert_graph(nodes, edges, stop)?;
            }
            let (nodes, edges) = graphs.apply(lines)?;
            self.insert_graph(nodes, edges, stop)
        })();
        self.graphs = Some(graphs);
        result
    }

    fn graph_marks(&mut self, host: &str, stop: &AtomicBool) -> Result<crate::graph::Marks> {
        let (count, node, edge_time_ns) =
            self.retrying("reading where the graph stands in ClickHouse", stop, |c| {
                c.query(crate::graph::MARKS_SQL)
                    .bind(host)
                    .bind(host)
                    .fetch_one::<(u64, i64, i64)>()
            })?;
        Ok(crate::graph::Marks {
            node: if count == 0 { -1 } else { node },
            edge_time_ns,
        })
    }

    fn insert_graph(
        &mut self,
        nodes: Vec<crate::graph::NodeRowCh>,
        edges: Vec<crate::graph::EdgeRowCh>,
        stop: &AtomicBool,
    ) -> Result<()> {
        if !nodes.is_empty() {
            self.retrying("inserting into nodes", stop, |c| {
                insert_rows(c, schema::NODES, &nodes)
            })?;
        }
        if !edges.is_empty() {
            self.retrying("inserting into edges", stop, |c| {
                insert_rows(c, schema::EDGES, &edges)
            })?;
        }
        self.summary.nodes += nodes.len() as u64;
        self.summary.edges += edges.len() as u64;
        Ok(())
    }

    /// Runs `request` until ClickHouse answers it (as for the inserts: a
    /// refusal a few times, silence until `stop`). For requests that may
    /// run twice: the graph's rows are folded by their tables' keys.
    fn retrying<'a, T, F>(
        &'a mut self,
        what: &str,
        stop: &AtomicBool,
        request: impl Fn(&'a clickhouse::Client) -> F,
    ) -> Result<T>
    where
        F: std::future::Future<Output = clickhouse::error::Result<T>>,
    {
        let (mut delay, mut attempt) = (Duration::from_millis(200), 0);
        loop {
            match self.rt.block_on(request(&self.client)) {
                Ok(v) => return Ok(v),
                Err(e) if !stop.load(Ordering::Relaxed) && worth_retrying(&e, attempt) => {
                    attempt += 1;
                    eprintln!("custos fleet ingest: {what}: {e}; trying again in {delay:?}");
                    self.summary.retries += 1;
                    self.publish();
                    std::thread::sleep(delay);
                    delay = (delay * 2).min(Duration::from_secs(10));
                }
                Err(e) => return Err(e).with_context(|| what.to_string()),
            }
        }
    }

    fn insert<R>(&mut self, table: &'static str, mut rows: Vec<R>, stop: &AtomicBool) -> Result<()>
    where
        R: clickhouse::RowOwned + clickhouse::RowWrite + Offsets,
    {
        let (mut delay, mut attempt) = (Duration::from_millis(200), 0);
        loop {
            if rows.is_empty() {
                return Ok(());
            }
            match self.rt.block_on(insert_rows(&self.client, table, &rows)) {
                Ok(()) => break,
                Err(e) if !stop.load(Ordering::Relaxed) && worth_retrying(&e, attempt) => {
                    attempt += 1;
                    eprintln!("custos fleet ingest: inserting {} rows into {table}: {e:#}; trying again in {delay:?}", rows.len());
                    self.summary.retries += 1;
                    self.publish();
                    std::thread::sleep(delay);
                    delay = (delay * 2).min(Duration::from_secs(10));
                    // The failed insert may have landed after all (the
                    // answer lost): read the marks again and keep what is new.
                    self.marks.remove(table);
                    let mut kept = Vec::with_capacity(rows.len());
                    for r in rows {
                        if r.offset() <= self.mark(table, r.partition(), stop)? {
                            self.summary.redelivered += 1;
                        } else {
                            kept.push(r);
                        }
                    }
                    rows = kept;
                }
                Err(e) => return Err(e).with_context(|| format!("inserting into {table}")),
            }
        }
        // (Marks not loaded are read from ClickHouse when next needed.)
        if let Some(marks) = self.marks.get_mut(table) {
            for r in &rows {
                let m = marks.entry(r.partition()).or_insert(-1);
                *m = (*m).max(r.offset());
            }
        }
        let n = rows.len() as u64;
        match table {
            EVENTS => self.summary.events += n,
            LOSSES => {
                self.summary.losses += n;
                self.summary.lost_events += rows.iter().map(Offsets::lost).sum::<u64>();
            }
            _ => {
                self.summary.records += n;
                self.summary.malformed += rows.iter().filter(|r| r.malformed()).count() as u64;
            }
        }
        Ok(())
    }
}

/// Whether a failed request to ClickHouse is worth trying again: always
/// when it did not answer (restarting, unreachable), a few times when it
/// refused (too many parts, memory), never for a request it cannot take
/// (a table of another schema, say): that is an error for the user.
fn worth_retrying(e: &clickhouse::error::Error, attempt: u32) -> bool {
    use clickhouse::error::Error;
    match e {
        Error::Network(_) | Error::TimedOut => true,
        Error::BadResponse(_) => attempt < REFUSALS_RETRIED,
        _ => false,
    }
}

/// Refusals tried again (backing off from 0.2 s to 10 s: about 40 s in all).
const REFUSALS_RETRIED: u32 = 8;

/// Where a line was in Kafka.
struct Place {
    topic: String,
    partition: i32,
    offset: i64,
}

/// A row's place in Kafka, for the high-water marks.
trait Offsets {
    fn partition(&self) -> i32;
    fn offset(&self) -> i64;
    fn lost(&self) -> u64 {
        0
    }
    fn malformed(&self) -> bool {
        false
    }
}

/// Each row's place from its `kafka_partition` and `kafka_offset`, with
/// what else its table knows (`lost`, `malformed`).
macro_rules! offsets {
    ($($t:ty { $($more:item)* })*) => {$(
        impl Offsets for $t {
            fn partition(&self) -> i32 { self.kafka_partition }
            fn offset(&self) -> i64 { self.kafka_offset }
            $($more)*
        }
    )*};
}
offsets! {
    EventRow {}
    RecordRow {
        fn malformed(&self) -> bool {
            self.kind == "malformed"
        }
    }
    LossRow {
        fn lost(&self) -> u64 {
            self.count
        }
    }
}

async fn insert_rows<R>(
    client: &clickhouse::Client,
    table: &str,
    rows: &[R],
) -> clickhouse::error::Result<()>
where
    R: clickhouse::RowOwned + clickhouse::RowWrite,
{
    let mut insert = client.insert::<R>(table).await?;
    for r in rows {
        insert.write(r).await?;
    }
    insert.end().await?;
    Ok(())
}

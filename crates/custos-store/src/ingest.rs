//! Batched, idempotent ingest of the JSON Lines stream into the store.
//!
//! Each batch is one transaction holding its events, graph nodes/edges, loss
//! records, rejected lines, the column segment of its raw lines and the builder
//! state. A batch is *acknowledged* once its COMMIT returned (synchronous=FULL,
//! so it is on disk); [`IngestOptions::on_commit`] is called right after.

use crate::archive::Recorder;
use crate::graph::{Graph, GraphStats, Sql};
use crate::rawseg::{HeldLine, SegmentBuilder};
use crate::record::{parse_line, Record};
use anyhow::{Context, Result};
use rusqlite::{params, Connection, OptionalExtension};
use serde::Serialize;
use std::collections::{BTreeMap, VecDeque};
use std::fs::File;
use std::path::Path;
use std::time::{Duration, Instant};

/// What a committed batch reports (printed by `custos ingest` as an `ack` line).
#[derive(Debug, Clone, Serialize)]
pub struct Ack {
    pub batch: u64,
    /// Every input line up to and including this one is in the store.
    pub lines_through: u64,
    pub events_new: u64,
    pub events_duplicate: u64,
    pub malformed: u64,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct IngestSummary {
    pub lines: u64,
    pub events_new: u64,
    pub events_duplicate: u64,
    pub losses_new: u64,
    pub lost_events: u64,
    pub malformed: u64,
    /// Of the malformed lines, those longer than `--max-line-bytes`: kept
    /// in `rejects` as their first bytes, never read whole.
    pub overlong: u64,
    pub unknown_types: u64,
    /// Events that arrived older than events already applied (later than the
    /// reorder window allows): applied late, so their edges may be missing.
    pub out_of_window: u64,
    pub batches: u64,
    pub graph: GraphStats,
    pub seconds: f64,
}

impl IngestSummary {
    /// `o`'s counts added to these: the totals of a run's inputs, one after
    /// another (`custos ingest a.jsonl b.jsonl`, its metrics).
    pub fn add(&mut self, o: &IngestSummary) {
        // Every field named: one added to the summary must be added here.
        let IngestSummary {
            lines,
            events_new,
            events_duplicate,
            losses_new,
            lost_events,
            malformed,
            overlong,
            unknown_types,
            out_of_window,
            batches,
            graph:
                GraphStats {
                    nodes,
                    edges,
                    unresolved_io,
                    no_graph_effect,
                },
            seconds,
        } = o;
        self.lines += lines;
        self.events_new += events_new;
        self.events_duplicate += events_duplicate;
        self.losses_new += losses_new;
        self.lost_events = self.lost_events.saturating_add(*lost_events);
        self.malformed += malformed;
        self.overlong += overlong;
        self.unknown_types += unknown_types;
        self.out_of_window += out_of_window;
        self.batches += batches;
        self.graph.nodes += nodes;
        self.graph.edges += edges;
        self.graph.unresolved_io += unresolved_io;
        self.graph.no_graph_effect += no_graph_effect;
        self.seconds += seconds;
    }
}

pub struct IngestOptions {
    /// Lines per transaction.
    pub batch_lines: usize,
    /// A batch is also committed when this much time passed (live streams).
    pub batch_interval: Duration,
    /// Recorded in the `ingests` table.
    pub source: String,
    /// Malformed lines reported on stderr before going quiet (all are kept in `rejects`).
    pub report_malformed: u64,
    pub archive: Option<Recorder>,
    /// How far out of time order events may arrive and still be applied in
    /// order (ns of event time); see docs/store.md, "Order".
    pub reorder_window_ns: u64,
    /// Events held back at most; past it the oldest are applied early.
    pub reorder_max_events: usize,
    /// Seal every committed batch with this key (docs/tamper-evidence.md,
    /// "The store"); None: the batches are not sealed.
    pub seal_key: Option<custos_seal::SealKey>,
    /// SQLite's page cache of the writer (MiB). Ingest inserts into several
    /// B-trees keyed by random values (paths, cause ids); a large cache keeps
    /// their interiors hot. It holds the pages written, so the writer's memory
    /// grows with the store up to this bound (a long `collect --db` reaches it).
    pub page_cache_mib: u32,
}

/// Defaults of the reorder window: 250 ms of event time, at most 100 000 events.
pub const REORDER_WINDOW_NS: u64 = 250_000_000;
pub const REORDER_MAX_EVENTS: usize = 100_000;
/// Default of [`IngestOptions::page_cache_mib`].
pub const PAGE_CACHE_MIB: u32 = 512;

impl Default for IngestOptions {
    fn default() -> Self {
        Self {
            batch_lines: 20_000,
            batch_interval: Duration::from_secs(1),
            source: "-".into(),
            report_malformed: 20,
            archive: None,
            reorder_window_ns: REORDER_WINDOW_NS,
            reorder_max_events: REORDER_MAX_EVENTS,
            seal_key: None,
            page_cache_mib: PAGE_CACHE_MIB,
        }
    }
}

/// The event ids in the store, per boot, as disjoint inclusive ranges
/// (first → last): exact de-duplication without a row per event. Ranges of
/// all batches merge here; on disk each batch keeps its own (they name its segment).
#[derive(Default)]
struct StoredIds(crate::graph::Map<i64, BTreeMap<i64, i64>>);

impl StoredIds {
    fn load(conn: &Connection) -> Result<Self> {
        let mut ids = Self::default();
        let mut st = conn
            .prepare("SELECT boot, first_id, last_id FROM event_ranges ORDER BY boot, first_id")?;
        let mut rows = st.query([])?;
        while let Some(r) = rows.next()? {
            let (boot, first, last): (i64, i64, i64) = (r.get(0)?, r.get(1)?, r.get(2)?);
            ids.insert_range(boot, first, last);
        }
        Ok(ids)
    }

    fn contains(&self, boot: i64, id: i64) -> bool {
        self.0
            .get(&boot)
            .and_then(|m| m.range(..=id).next_back())
            .is_some_and(|(_, &last)| last >= id)
    }

    /// Adds `id` (not contained), merging with the neighbouring ranges.
    fn insert(&mut self, boot: i64, id: i64) {
        self.insert_range(boot, id, id);
    }

    fn insert_range(&mut self, boot: i64, mut first: i64, mut last: i64) {
        let m = self.0.entry(boot).or_default();
        // A range ending right before `first` (or overlapping it) absorbs it.
        if let Some((&f, &l)) = m.range(..=first).next_back() {
            if l.checked_add(1).is_none_or(|next| next >= first) {
                first = f;
                last = last.max(l);
            }
        }
        // Ranges starting inside or right after the new one are absorbed.
        while let Some((&f, &l)) = m.range(first..).next() {
            if last.checked_add(1).is_some_and(|next| f > next) {
                break;
            }
            m.remove(&f);
            last = last.max(l);
        }
        m.insert(first, last);
    }
}

/// Writes a stream into a store. Library entry point for `custos collect` too:
/// `Ingestor::open`, then `push_line` per line, `commit_if_due` now and then, `finish`.
pub struct Ingestor {
    conn: Connection,
    graph: Graph,
    opts: IngestOptions,
    ingest_id: i64,
    boots: crate::graph::Map<String, i64>,
    current_boot: String,
    in_tx: bool,
    tx_started: Instant,
    raw: SegmentBuilder,
    /// The workflows of the open batch (workflows.rs).
    workflows: crate::workflows::WorkflowLog,
    /// Seals each committed batch (tamper.rs); None: not sealed.
    sealer: Option<crate::tamper::StoreSealer>,
    /// The first and last time of the events applied in the open batch.
    batch_times: Option<(u64, u64)>,
    stored: StoredIds,
    batch_lines: usize,
    next_segment: i64,
    line_no: u64,
    /// Events not applied yet, in the order they are applied (see `apply_ready`).
    pending: Held,
    /// The newest event time seen, and the key of the last event applied.
    newest_ns: u64,
    applied_through: Option<OrderKey>,
    summary: IngestSummary,
    started: Instant,
    _lock: File,
}

/// The order events are applied in: time, then event id (CPU and sequence),
/// then boot. Nothing in it depends on arrival order.
type OrderKey = (u64, u64, i64);

struct Pending {
    line_no: u64,
    boot: i64,
    event: Box<crate::record::Event>,
    /// Its line, cut into the raw segment's shape and values when read.
    line: HeldLine,
}

/// The reorder window's events, in apply order. Events arriving in order
/// (the collector's own stream, an archive of it) queue up at the back,
/// O(1) each, instead of walking a tree of up to 100,000 entries; the few
/// that arrive out of order go to a sorted map. The next to apply is the
/// smaller of the two fronts.
#[derive(Default)]
struct Held {
    in_order: VecDeque<(OrderKey, Pending)>,
    late: BTreeMap<OrderKey, Pending>,
}

impl Held {
    /// Holds an event; false if one with the same key is held already.
    fn insert(&mut self, key: OrderKey, p: Pending) -> bool {
        let newest = match (self.in_order.back(), self.late.last_key_value()) {
            (Some((a, _)), Some((b, _))) => Some(*a.max(b)),
            (Some((a, _)), None) => Some(*a),
            (None, Some((b, _))) => Some(*b),
            (None, None) => None,
        };
        if newest.is_none_or(|n| key > n) {
            self.in_order.push_back((key, p));
            return true;
        }
        if self.in_order.binary_search_by(|(k, _)| k.cmp(&key)).is_ok() {
            return false;
        }
        match self.late.entry(key) {
            std::collections::btree_map::Entry::Occupied(_) => false,
            std::collections::btree_map::Entry::Vacant(v) => {
                v.insert(p);
                true
            }
        }
    }

    fn first_key(&self) -> Option<OrderKey> {
        match (self.in_order.front(), self.late.first_key_value()) {
            (Some((a, _)), Some((b, _))) => Some(*a.min(b)),
            (Some((a, _)), None) => Some(*a),
            (None, Some((b, _))) => Some(*b),
            (None, None) => None,
        }
    }

    fn pop_first(&mut self) -> Option<(OrderKey, Pending)> {
        let from_queue = match (self.in_order.front(), self.late.first_key_value()) {
            (Some((a, _)), Some((b, _))) => a < b,
            (Some(_), None) => true,
            (None, _) => false,
        };
        if from_queue {
            self.in_order.pop_front()
        } else {
            self.late.pop_first()
        }
    }

    fn len(&self) -> usize {
        self.in_order.len() + self.late.len()
    }

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn clear(&mut self) {
        self.in_order.clear();
        self.late.clear();
    }

    /// The held lines of every event not applied yet.
    fn lines_mut(&mut self) -> impl Iterator<Item = &mut HeldLine> {
        self.in_order
            .iter_mut()
            .map(|(_, p)| &mut p.line)
            .chain(self.late.values_mut().map(|p| &mut p.line))
    }

    /// The input line of the earliest-read event held.
    fn first_line(&self) -> Option<u64> {
        self.in_order
            .iter()
            .map(|(_, p)| p.line_no)
            .chain(self.late.values().map(|p| p.line_no))
            .min()
    }
}

/// Boot identity used when the stream names none (see docs/event-schema.md, `boot_id`).
pub const UNKNOWN_BOOT: &str = "unknown";

fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

impl Ingestor {
    pub fn open(db: &Path, mut opts: IngestOptions) -> Result<Self> {
        let lock_path = format!("{}-lock", db.display());
        let lock = File::create(&lock_path)
            .with_context(|| format!("creating writer lock {lock_path}"))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                anyhow::bail!(
                    "another `custos ingest` is writing to {}; wait for it or use another --db",
                    db.display()
                )
            }
            Err(std::fs::TryLockError::Error(e)) => {
                return Err(e).with_context(|| format!("locking {lock_path}"))
            }
        }
        let conn = crate::schema::open_rw(db)?;
        conn.execute_batch(&format!(
            "PRAGMA cache_size = -{};",
            u64::from(opts.page_cache_mib) << 10
        ))?;
        let graph = Graph::load(&conn)?;
        let stored = StoredIds::load(&conn)?;
        conn.execute(
            "INSERT INTO ingests(source, started_ns) VALUES(?1, ?2)",
            params![opts.source, now_ns()],
        )?;
        let ingest_id = conn.last_insert_rowid();
        let sealer = opts
            .seal_key
            .take()
            .map(crate::tamper::StoreSealer::new)
            .transpose()?;
        let next_segment: i64 = conn.query_row(
            "SELECT COALESCE(MAX(segment), 0) + 1 FROM raw_segments",
            [],
            |r| r.get(0),
        )?;
        Ok(Self {
            conn,
            graph,
            opts,
            ingest_id,
            boots: Default::default(),
            current_boot: UNKNOWN_BOOT.into(),
            in_tx: false,
            tx_started: Instant::now(),
            raw: SegmentBuilder::default(),
            workflows: crate::workflows::WorkflowLog::default(),
            sealer,
            batch_times: None,
            stored,
            batch_lines: 0,
            next_segment,
            line_no: 0,
            pending: Held::default(),
            newest_ns: 0,
            applied_through: None,
            summary: IngestSummary::default(),
            started: Instant::now(),
            _lock: lock,
        })
    }

    pub fn connection(&self) -> &Connection {
        &self.conn
    }

    fn boot(&mut self, id: Option<&str>) -> Result<i64> {
        let id = id.unwrap_or(&self.current_boot);
        if let Some(b) = self.boots.get(id) {
            return Ok(*b);
        }
        self.conn
            .execute("INSERT OR IGNORE INTO boots(boot_id) VALUES(?1)", [id])?;
        let b: i64 =
            self.conn
                .query_row("SELECT boot FROM boots WHERE boot_id = ?1", [id], |r| {
                    r.get(0)
                })?;
        self.boots.insert(id.to_string(), b);
        Ok(b)
    }

    fn begin(&mut self) -> Result<()> {
        if !self.in_tx {
            self.conn
                .execute_batch("BEGIN IMMEDIATE")
                .context("starting a batch transaction")?;
            self.in_tx = true;
            self.tx_started = Instant::now();
        }
        Ok(())
    }

    /// Ingests one line of input (without its newline). Bytes that are not
    /// UTF-8 are a malformed line; use [`Ingestor::push_bytes`] for raw input.
    pub fn push_line(&mut self, line: &str) -> Result<Option<Ack>> {
        self.line_no += 1;
        self.summary.lines += 1;
        if let Some(a) = self.opts.archive.as_mut() {
            a.write_line(line)?;
        }
        let line = line.trim_end_matches('\r');
        if line.trim().is_empty() {
            return Ok(None);
        }
        self.begin()?;
        self.batch_lines += 1;
        // A line of a known shape is read once, by its shape (its record and
        // its cut); the others are parsed, and an event's line cut, apart.
        let (parsed, held) = match self.raw.read_by_shape(line) {
            Some(read) => read,
            None => (parse_line(line), None),
        };
        match parsed {
            Err(msg) => self.reject(line, &msg)?,
            Ok(Record::Event(ev, boot_id)) => {
                let boot = self.boot(boot_id.as_deref())?;
                if ev.syscall == "sched:process_fork" {
                    self.graph.note_fork_hooks(boot);
                }
                let key = (ev.time_ns, ev.id, boot);
                if self.applied_through.is_some_and(|done| key <= done) {
                    self.summary.out_of_window += 1;
                }
                self.newest_ns = self.newest_ns.max(ev.time_ns);
                // Cut now, while the line is in cache: the event may be applied
                // up to a reorder window later.
                let held = held.unwrap_or_else(|| self.raw.cut(line));
                if !self.pending.insert(
                    key,
                    Pending {
                        line_no: self.line_no,
                        boot,
                        event: ev,
                        line: held,
                    },
                ) {
                    self.summary.events_duplicate += 1;
                }
            }
            Ok(Record::Loss(l)) => {
                let boot = self.boot(l.boot_id.as_deref())?;
                let fresh = self
                    .conn
                    .prepare_cached(
                        "INSERT OR IGNORE INTO losses(boot, cpu, category, first_seq, last_seq, count, start_ns, end_ns) VALUES(?1,?2,?3,?4,?5,?6,?7,?8)",
                    )?
                    .execute(params![
                        boot,
                        l.cpu.map_or(-1, i64::from),
                        l.category,
                        l.first_seq.map(|v| v as i64).unwrap_or(-1),
                        l.last_seq.map(|v| v as i64).unwrap_or(-1),
                        l.count as i64,
                        l.start_ns as i64,
                        l.end_ns as i64
                    ])?;
                if fresh == 1 {
                    self.raw.keep_other(line);
                    self.summary.losses_new += 1;
                    // Each count is at most i64::MAX (record.rs): their sum may not be.
                    self.summary.lost_events = self.summary.lost_events.saturating_add(l.count);
                }
            }
            Ok(Record::Boot(id)) => {
                self.current_boot = id;
                self.boot(None)?;
            }
            Ok(Record::Stats { boot_id, time_ns }) => {
                let boot = self.boot(boot_id.as_deref())?;
                self.conn
                    .prepare_cached(
                        "INSERT OR IGNORE INTO stats(boot, time_ns, line) VALUES(?1,?2,?3)",
                    )?
                    .execute(params![boot, time_ns as i64, line])?;
            }
            Ok(Record::Other(_)) => {
                self.summary.unknown_types += 1;
                self.raw.keep_other(line);
            }
        }
        if self.batch_lines >= self.opts.batch_lines {
            return self.commit();
        }
        Ok(None)
    }

    /// Input lines up to which everything is in the store once the open
    /// batch commits: events still in the reorder window are not.
    fn lines_through(&self) -> u64 {
        match self.pending.first_line() {
            Some(first_held) => first_held - 1,
            None => self.line_no,
        }
    }

    /// Like [`Ingestor::push_line`] for bytes straight from a file.
    pub fn push_bytes(&mut self, bytes: &[u8]) -> Result<Option<Ack>> {
        match std::str::from_utf8(bytes) {
            Ok(s) => self.push_line(s),
            Err(e) => {
                self.line_no += 1;
                self.summary.lines += 1;
                let lossy = String::from_utf8_lossy(bytes).into_owned();
                if let Some(a) = self.opts.archive.as_mut() {
                    a.write_line(&lossy)?;
                }
                self.begin()?;
                self.batch_lines += 1;
                self.reject(&lossy, &format!("not UTF-8 ({e})"))?;
                Ok(None)
            }
        }
    }

    /// A line longer than the limit, of which only `head` was kept: counted
    /// and kept as a reject (its first bytes and its length), like any
    /// malformed line; the archive gets the head, so its lines stay the input's.
    pub fn push_overlong(
        &mut self,
        head: &[u8],
        line_bytes: u64,
        limit: u64,
    ) -> Result<Option<Ack>> {
        self.line_no += 1;
        self.summary.lines += 1;
        self.summary.overlong += 1;
        let head = String::from_utf8_lossy(head);
        if let Some(a) = self.opts.archive.as_mut() {
            a.write_line(&head)?;
        }
        self.begin()?;
        self.batch_lines += 1;
        self.reject(
            &head,
            &format!(
                "a line of {line_bytes} bytes, longer than --max-line-bytes {limit}; its first {} bytes are kept",
                head.len()
            ),
        )?;
        if self.batch_lines >= self.opts.batch_lines {
            return self.commit();
        }
        Ok(None)
    }

    fn reject(&mut self, line: &str, msg: &str) -> Result<()> {
        self.summary.malformed += 1;
        if self.summary.malformed <= self.opts.report_malformed {
            eprintln!(
                "custos ingest: {}: line {}: {msg}; skipped (kept in the rejects table)",
                self.opts.source, self.line_no
            );
        } else if self.summary.malformed == self.opts.report_malformed + 1 {
            eprintln!(
                "custos ingest: {}: more malformed lines; not reporting each (see the summary)",
                self.opts.source
            );
        }
        self.conn
            .prepare_cached(
                "INSERT OR REPLACE INTO rejects(ingest, line_no, error, line) VALUES(?1,?2,?3,?4)",
            )?
            .execute(params![self.ingest_id, self.line_no as i64, msg, line])?;
        Ok(())
    }

    /// Commits when the batch interval has passed (call while waiting for input).
    pub fn commit_if_due(&mut self) -> Result<Option<Ack>> {
        if self.in_tx && self.tx_started.elapsed() >= self.opts.batch_interval {
            return self.commit();
        }
        Ok(None)
    }

    /// Commits the open batch, if any.
    pub fn commit(&mut self) -> Result<Option<Ack>> {
        self.commit_with(false)
    }

    /// Commits the open batch; with `all`, every held event too.
    fn commit_with(&mut self, all: bool) -> Result<Option<Ack>> {
        if all && !self.pending.is_empty() {
            self.begin()?;
        }
        if !self.in_tx {
            return Ok(None);
        }
        let result = self.commit_inner(all);
        if result.is_err() {
            let _ = self.conn.execute_batch("ROLLBACK");
            self.in_tx = false;
            self.pending.clear();
            self.raw.clear();
            self.workflows.clear();
            self.batch_times = None;
            if let Some(s) = self.sealer.as_mut() {
                s.rolled_back();
            }
            self.batch_lines = 0;
            self.graph.reset_cache(&self.conn)?;
            self.stored = StoredIds::load(&self.conn)?;
        }
        result.map(Some)
    }

    /// Applies, in order, the held events the window has passed: older than
    /// the newest event by more than the reorder window, or beyond its
    /// count; with `all`, every one. A stream reordered within the window
    /// (an archive, another collector) thus builds the same graph as the
    /// ordered stream. De-duplication against the store happens here.
    fn apply_ready(&mut self, all: bool) -> Result<()> {
        // Statements prepared once for the run, not looked up per event.
        let mut sql = Sql::new(&self.conn)?;
        while let Some(key) = self.pending.first_key() {
            let due = all
                || key.0.saturating_add(self.opts.reorder_window_ns) <= self.newest_ns
                || self.pending.len() > self.opts.reorder_max_events;
            if !due {
                break;
            }
            let (key, p) = self.pending.pop_first().expect("the first key is held");
            self.applied_through = Some(self.applied_through.map_or(key, |k| k.max(key)));
            let id = p.event.id as i64;
            if self.stored.contains(p.boot, id) {
                self.summary.events_duplicate += 1;
                continue;
            }
            self.stored.insert(p.boot, id);
            self.summary.events_new += 1;
            if p.event.incomplete {
                // Its paths, argv or address were lost: an answer through it may be wrong.
                crate::graph::put_event_loss(&self.conn, p.boot, "incomplete", &p.event)?;
            }
            self.graph
                .apply(&mut sql, p.boot, &p.event)
                .with_context(|| {
                    format!(
                        "line {}: applying event {} to the graph",
                        p.line_no, p.event.id
                    )
                })?;
            self.workflows.note(p.boot, &p.event);
            let t = p.event.time_ns;
            self.batch_times = Some(
                self.batch_times
                    .map_or((t, t), |(a, b)| (a.min(t), b.max(t))),
            );
            self.raw.keep_held(p.boot, p.event.id, &p.line);
        }
        Ok(())
    }

    fn commit_inner(&mut self, all: bool) -> Result<Ack> {
        self.apply_ready(all)?;
        if !self.raw.is_empty() {
            let (blob, lines, runs) = self.raw.seal()?;
            self.conn
                .prepare_cached(
                    "INSERT INTO raw_segments(segment, ingest, lines, data) VALUES(?1,?2,?3,?4)",
                )?
                .execute(params![self.next_segment, self.ingest_id, lines, blob])?;
            let mut put = self.conn.prepare_cached(
                "INSERT INTO event_ranges(boot, first_id, last_id, segment) VALUES(?1,?2,?3,?4)",
            )?;
            for &(boot, first, last) in &runs {
                put.execute(params![boot, first, last, self.next_segment])?;
            }
            if let Some(s) = self.sealer.as_mut() {
                let times = self.batch_times.unwrap_or((0, 0));
                s.seal(
                    &self.conn,
                    self.ingest_id,
                    Some(self.next_segment),
                    &blob,
                    &runs,
                    lines as u64,
                    times,
                )?;
            }
            self.next_segment += 1;
            // The lines still held were cut against the shapes just written;
            // if those are past their bounds, they start afresh and the held lines are cut again.
            self.raw.renew_if_full(self.pending.lines_mut());
        }
        self.graph.flush(&self.conn)?;
        self.workflows.flush(&self.conn)?;
        let s = &self.summary;
        self.conn.execute(
            "UPDATE ingests SET lines = ?2, events_new = ?3, events_duplicate = ?4, malformed = ?5, losses = ?6 WHERE ingest = ?1",
            params![self.ingest_id, s.lines as i64, s.events_new as i64, s.events_duplicate as i64, s.malformed as i64, s.losses_new as i64],
        )?;
        self.conn
            .execute_batch("COMMIT")
            .context("committing a batch")?;
        if let Some(s) = self.sealer.as_mut() {
            s.committed();
        }
        self.batch_times = None;
        self.in_tx = false;
        self.raw.clear();
        self.batch_lines = 0;
        self.summary.batches += 1;
        if let Some(a) = self.opts.archive.as_mut() {
            a.flush()?;
        }
        Ok(Ack {
            batch: self.summary.batches,
            lines_through: self.lines_through(),
            events_new: self.summary.events_new,
            events_duplicate: self.summary.events_duplicate,
            malformed: self.summary.malformed,
        })
    }

    /// Commits the rest, closes the archive, returns the totals.
    pub fn finish(mut self) -> Result<(IngestSummary, Option<Ack>)> {
        let ack = self.commit_with(true)?;
        if let Some(mut s) = self.sealer.take() {
            // The final seal: this ingest ended cleanly (without it, `custos
            // verify --db` says the ingest was cut short or its end removed).
            self.conn.execute_batch("BEGIN IMMEDIATE")?;
            s.seal(&self.conn, self.ingest_id, None, &[], &[], 0, (0, 0))?;
            self.conn
                .execute_batch("COMMIT")
                .context("committing the final seal")?;
        }
        if let Some(a) = self.opts.archive.take() {
            a.finish()?;
        }
        self.conn.execute(
            "UPDATE ingests SET finished_ns = ?2 WHERE ingest = ?1",
            params![self.ingest_id, now_ns()],
        )?;
        // Fold the WAL back so the store is one self-contained file at rest.
        self.conn
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
            .context("checkpointing the WAL")?;
        Ok((self.totals(), ack))
    }

    /// Commits the open batch and every event still held for reordering
    /// (the end of what is known for now; later events are still applied).
    pub fn commit_all(&mut self) -> Result<Option<Ack>> {
        self.commit_with(true)
    }

    /// From now on, keep a copy of the nodes and edges each commit writes
    /// (for the fleet, which keeps them in ClickHouse too).
    pub fn keep_graph(&mut self) {
        self.graph.keep_made();
    }

    /// The nodes and edges committed since the last call (after a commit
    /// that failed, only those of batches before it).
    pub fn take_graph(&mut self) -> crate::graph::Made {
        self.graph.take_made()
    }

    pub fn summary(&self) -> &IngestSummary {
        &self.summary
    }

    /// The totals so far, the graph's and the time included: what
    /// [`Ingestor::finish`] returns at the end, and what `custos ingest`
    /// prints and serves (`--metrics`) meanwhile.
    pub fn totals(&self) -> IngestSummary {
        IngestSummary {
            graph: self.graph.stats.clone(),
            seconds: self.started.elapsed().as_secs_f64(),
            ..self.summary.clone()
        }
    }
}

/// Reads the raw JSON line of an event back: one seek in `event_ranges`
/// names its segment; only that segment is decompressed and walked.
pub fn raw_event(conn: &Connection, boot: i64, event_id: i64) -> Result<Option<String>> {
    let Some(segment) = segment_of(conn, boot, event_id)? else {
        return Ok(None);
    };
    let blob: Vec<u8> = conn.query_row(
        "SELECT data FROM raw_segments WHERE segment = ?1",
        [segment],
        |r| r.get(0),
    )?;
    match crate::rawseg::event_line(&blob, boot, event_id)? {
        Some(line) => Ok(Some(line)),
        None => anyhow::bail!(
            "event {event_id:#x}: raw segment {segment} does not hold it (the store is damaged)"
        ),
    }
}

/// The raw lines of events `ids` of `boot` (those the store holds), each
/// segment read once.
pub fn raw_events(
    conn: &Connection,
    boot: i64,
    ids: &[u64],
) -> Result<std::collections::HashMap<u64, String>> {
    let mut by_segment: std::collections::BTreeMap<i64, std::collections::HashSet<u64>> =
        Default::default();
    for &id in ids {
        if let Some(segment) = segment_of(conn, boot, id as i64)? {
            by_segment.entry(segment).or_default().insert(id);
        }
    }
    let mut out = std::collections::HashMap::new();
    let mut blob_of = conn.prepare_cached("SELECT data FROM raw_segments WHERE segment = ?1")?;
    for (segment, want) in by_segment {
        let blob: Vec<u8> = blob_of.query_row([segment], |r| r.get(0))?;
        out.extend(crate::rawseg::event_lines(&blob, boot, &want)?);
    }
    Ok(out)
}

/// The boots holding an event with this id (ids are unique only within a boot).
pub fn event_boots(conn: &Connection, event_id: i64) -> Result<Vec<i64>> {
    let boots: Vec<i64> = conn
        .prepare("SELECT boot FROM boots ORDER BY boot")?
        .query_map([], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    let mut found = Vec::new();
    for b in boots {
        if segment_of(conn, b, event_id)?.is_some() {
            found.push(b);
        }
    }
    Ok(found)
}

/// The raw segment holding event `event_id` of `boot`, by the event ranges.
fn segment_of(conn: &Connection, boot: i64, event_id: i64) -> Result<Option<i64>> {
    let row: Option<(i64, i64)> = conn
        .prepare_cached("SELECT last_id, segment FROM event_ranges WHERE boot = ?1 AND first_id <= ?2 ORDER BY first_id DESC LIMIT 1")?
        .query_row(params![boot, event_id], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    Ok(row
        .filter(|(last, _)| *last >= event_id)
        .map(|(_, segment)| segment))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_writer_s_page_cache_is_the_one_asked_for() {
        let dir = tempfile::tempdir().unwrap();
        for (mib, kib) in [(PAGE_CACHE_MIB, -524_288), (3, -3072)] {
            let opts = IngestOptions {
                page_cache_mib: mib,
                ..Default::default()
            };
            let ing = Ingestor::open(&dir.path().join(format!("{mib}.db")), opts).unwrap();
            let size: i64 = ing
                .conn
                .query_row("PRAGMA cache_size", [], |r| r.get(0))
                .unwrap();
            assert_eq!(size, kib);
        }
    }

    /// An event of `cpu` with sequence `seq`; its time is a scramble of the
    /// sequence, so events are applied (in time order) out of sequence order.
    fn line(cpu: u64, seq: u64) -> String {
        let id = cpu << 48 | seq;
        let t = 1_000_000_000 + ((seq * 37) % 101) * 1000 + cpu;
        format!(
            r#"{{"type":"event","id":{id},"cpu":{cpu},"time_ns":{t},"pid":7,"syscall":"getpid","ret":7}}"#
        )
    }

    fn ingest(db: &Path, lines: &[String], batch_lines: usize) -> IngestSummary {
        let mut ing = Ingestor::open(
            db,
            IngestOptions {
                batch_lines,
                ..Default::default()
            },
        )
        .unwrap();
        for l in lines {
            ing.push_line(l).unwrap();
        }
        ing.finish().unwrap().0
    }

    fn stored_count(conn: &Connection, id: i64) -> i64 {
        conn.query_row(
            "SELECT COUNT(*) FROM event_ranges WHERE ?1 BETWEEN first_id AND last_id",
            [id],
            |r| r.get(0),
        )
        .unwrap()
    }

    fn id_of(line: &str) -> i64 {
        serde_json::from_str::<serde_json::Value>(line).unwrap()["id"]
            .as_i64()
            .unwrap()
    }

    #[test]
    fn overlapping_reingest_adds_only_the_missing_events_and_every_event_is_found() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("s.db");
        let run = |cpu: u64, seqs: std::ops::RangeInclusive<u64>| seqs.map(move |s| line(cpu, s));
        let first: Vec<String> = run(0, 1..=100).chain(run(1, 1..=100)).collect();
        let s = ingest(&db, &first, 17);
        assert_eq!((s.events_new, s.events_duplicate), (200, 0));
        // Partly overlapping on both CPUs, each CPU's sequences out of order
        // (reversed in blocks of 7), and a line repeated within the run.
        let mut second: Vec<String> = run(0, 50..=150).chain(run(1, 90..=120)).collect();
        for block in second.chunks_mut(7) {
            block.reverse();
        }
        second.push(line(0, 150));
        let s = ingest(&db, &second, 13);
        assert_eq!(s.events_new, 50 + 20, "cpu 0: 101..=150, cpu 1: 101..=120");
        assert_eq!(s.events_duplicate, 51 + 11 + 1);
        // Once more, whole: nothing new.
        let s = ingest(&db, &[first, second].concat(), 50);
        assert_eq!(s.events_new, 0);

        let conn = crate::schema::open_ro(&db).unwrap();
        let total: i64 = conn
            .query_row(
                "SELECT SUM(last_id - first_id + 1) FROM event_ranges",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(total, 270);
        let boot: i64 = conn
            .query_row(
                "SELECT boot FROM boots WHERE boot_id = 'unknown'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        for (cpu, last) in [(0u64, 150u64), (1, 120)] {
            for seq in 1..=last {
                let id = (cpu << 48 | seq) as i64;
                assert_eq!(
                    stored_count(&conn, id),
                    1,
                    "event {id:#x} stored exactly once"
                );
                let raw = raw_event(&conn, boot, id)
                    .unwrap()
                    .expect("the raw line is found");
                assert_eq!(raw, line(cpu, seq));
            }
            let past = (cpu << 48 | (last + 1)) as i64;
            assert_eq!(raw_event(&conn, boot, past).unwrap(), None);
            assert_eq!(event_boots(&conn, past).unwrap(), Vec::<i64>::new());
        }
        // One batch of one CPU is one row, not one row per event.
        let rows: i64 = conn
            .query_row("SELECT COUNT(*) FROM event_ranges", [], |r| r.get(0))
            .unwrap();
        assert!(rows < 40, "{rows} range rows for 270 events");
    }

    #[test]
    fn gaps_are_filled_exactly_and_ids_of_other_boots_are_separate() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("s.db");
        let odd: Vec<String> = (1..=40)
            .filter(|s| s % 2 == 1)
            .map(|s| line(2, s))
            .collect();
        assert_eq!(ingest(&db, &odd, 6).events_new, 20);
        let mut all: Vec<String> = (1..=40).map(|s| line(2, s)).collect();
        let s = ingest(&db, &all, 6);
        assert_eq!((s.events_new, s.events_duplicate), (20, 20));
        // The same ids under another boot are other events.
        all.insert(0, r#"{"type":"boot","boot_id":"second"}"#.to_string());
        let s = ingest(&db, &all, 6);
        assert_eq!((s.events_new, s.events_duplicate), (40, 0));
        let conn = crate::schema::open_ro(&db).unwrap();
        for l in &all[1..] {
            let id = id_of(l);
            assert_eq!(stored_count(&conn, id), 2, "once per boot");
            let boots = event_boots(&conn, id).unwrap();
            assert_eq!(boots.len(), 2);
            for b in boots {
                assert_eq!(
                    raw_event(&conn, b, id).unwrap().as_deref(),
                    Some(l.as_str())
                );
            }
        }
    }

    /// `custos query event ID` returns every event's line as ingested, byte
    /// for byte: the synthetic stream's lines (cut into columns), and lines
    /// the columns do not take (an escape, a float where an integer is
    /// usual), across several segments and the reorder window.
    #[test]
    fn every_event_of_the_synthetic_stream_is_returned_byte_for_byte() {
        let mut out = Vec::new();
        crate::synth::generate(
            &crate::synth::SynthConfig::scaled(2, 0.0005),
            &mut out,
            |_| {},
        )
        .unwrap();
        let mut lines: Vec<String> = String::from_utf8(out)
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect();
        let t = 1_900_000_000_000_000_000u64;
        lines.push(format!(r#"{{"type":"event","id":{},"time_ns":{t},"pid":1,"syscall":"openat","path":"/tmp/a\"b","ret":3}}"#, 40u64 << 48 | 1));
        lines.push(format!(r#"{{"syscall":"read", "pid":1,"ret":1,"bytes":1.5e3,"time_ns":{},"type":"event","id":{}}}"#, t + 1, 40u64 << 48 | 2));
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("s.db");
        let s = ingest(&db, &lines, 1000);
        assert_eq!((s.malformed, s.events_duplicate), (0, 0));
        let conn = crate::schema::open_ro(&db).unwrap();
        let mut events = 0;
        for l in lines.iter().filter(|l| l.contains(r#""type":"event""#)) {
            let id = id_of(l);
            let boots = event_boots(&conn, id).unwrap();
            assert_eq!(boots.len(), 1, "event {id:#x}");
            assert_eq!(
                raw_event(&conn, boots[0], id).unwrap().as_deref(),
                Some(l.as_str())
            );
            events += 1;
        }
        assert_eq!(events, s.events_new);
        let segments: i64 = conn
            .query_row("SELECT COUNT(*) FROM raw_segments", [], |r| r.get(0))
            .unwrap();
        assert!(segments > 5, "{segments} segments");
    }

    /// Lines are cut when read and kept when their event is applied, up to
    /// a reorder window (here several batches) later; a stream of ever new
    /// shapes renews the shapes at seals in between. Every line comes back.
    #[test]
    fn lines_held_across_batches_and_renewed_shapes_come_back_byte_for_byte() {
        let values = vec!["\"ab\""; 60].join(",");
        let lines: Vec<String> = (1..=3000u64)
            .map(|i| {
                let t = 1_000_000_000 + i * 1_000_000;
                match i % 3 {
                    0 => format!(r#"{{"type":"event","id":{i},"time_ns":{t},"pid":7,"syscall":"getpid","ret":7,"k{i}":[{values}]}}"#),
                    _ => format!(r#"{{"type":"event","id":{i},"cpu":0,"time_ns":{t},"pid":7,"syscall":"getpid","ret":7}}"#),
                }
            })
            .collect();
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("s.db");
        let s = ingest(&db, &lines, 100);
        assert_eq!(
            (s.events_new, s.malformed, s.events_duplicate),
            (3000, 0, 0)
        );
        let conn = crate::schema::open_ro(&db).unwrap();
        let boot: i64 = conn
            .query_row(
                "SELECT boot FROM boots WHERE boot_id = 'unknown'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        for l in &lines {
            assert_eq!(
                raw_event(&conn, boot, id_of(l)).unwrap().as_deref(),
                Some(l.as_str())
            );
        }
    }

    /// The queue-plus-map window yields exactly what one sorted map would:
    /// the same order, the same duplicates refused, the same first line.
    #[test]
    fn held_events_come_out_in_key_order_like_a_sorted_map() {
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        let mut rnd = move |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        for round in 0..200 {
            let mut held = Held::default();
            let mut model: BTreeMap<OrderKey, u64> = BTreeMap::new();
            let mut t = 1000u64;
            for line_no in 1..=300u64 {
                // Mostly in order, sometimes late by up to 50, sometimes a repeat.
                t += rnd(3);
                let time = if rnd(4) == 0 {
                    t.saturating_sub(rnd(50))
                } else {
                    t
                };
                let key = (time, rnd(if round % 2 == 0 { 4 } else { 1000 }), 1);
                let p = Pending {
                    line_no,
                    boot: 1,
                    event: Box::default(),
                    line: HeldLine::default(),
                };
                let fresh = !model.contains_key(&key);
                assert_eq!(held.insert(key, p), fresh, "{key:?}");
                if fresh {
                    model.insert(key, line_no);
                }
                assert_eq!(held.len(), model.len());
                assert_eq!(held.first_line(), model.values().min().copied());
                // Apply some now and then, as the window does.
                if rnd(10) == 0 {
                    for _ in 0..rnd(20) {
                        assert_eq!(held.first_key(), model.first_key_value().map(|(k, _)| *k));
                        let got = held.pop_first().map(|(k, p)| (k, p.line_no));
                        assert_eq!(got, model.pop_first());
                    }
                }
            }
            while let Some((k, l)) = model.pop_first() {
                assert_eq!(held.pop_first().map(|(k, p)| (k, p.line_no)), Some((k, l)));
            }
            assert!(held.is_empty() && held.first_key().is_none());
        }
    }

    #[test]
    fn stored_ids_merge_and_answer_exactly() {
        let mut s = StoredIds::default();
        for id in [5, 7, 6, 1, 3, 2, 10, i64::MAX, i64::MAX - 1, -4] {
            assert!(!s.contains(1, id));
            s.insert(1, id);
            assert!(s.contains(1, id));
        }
        let ranges: Vec<(i64, i64)> = s.0[&1].iter().map(|(a, b)| (*a, *b)).collect();
        assert_eq!(
            ranges,
            vec![(-4, -4), (1, 3), (5, 7), (10, 10), (i64::MAX - 1, i64::MAX)]
        );
        for id in [0, 4, 8, 9, 11, i64::MAX - 2, -3, -5] {
            assert!(!s.contains(1, id), "{id}");
        }
        assert!(!s.contains(2, 5), "boots are separate");
        s.insert_range(1, 0, 12);
        assert_eq!(s.0[&1].len(), 3);
        assert!((-4..=12)
            .filter(|i| *i != -3 && *i != -2 && *i != -1)
            .all(|i| s.contains(1, i)));
    }
}

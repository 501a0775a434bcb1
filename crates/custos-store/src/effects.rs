//! The edges by cause: descendants, the readers of a version, the writes of
//! a process (docs/store.md, "Effect parts").
//!
//! A batch's new edges are grouped by their cause's block of
//! [`BLOCK_NODES`] node ids (as in `causes.rs`) and written as one row per
//! block touched, `effect_parts(part)` keyed by `block << 3 | number`,
//! instead of a row per edge:
//! most causes are nodes of the same batch or a few busy old ones (shared
//! headers, long-lived processes), so a batch touches few blocks. A lookup
//! by cause reads the rows of its block (one seek, a short scan) and keeps
//! the cause's edges. A block that gathered [`MERGE_PARTS`] parts is merged,
//! so a busy block costs a few rows, not one per batch: its newer parts
//! into one while they hold less than a [`MERGE_RATIO`]th of the bytes of
//! its oldest part, else all of them into one (a tiered merge: the oldest
//! part of a busy block — a shared header's, `make`'s — is most of it, and
//! rewriting it at every merge made the merges grow with the run).
//!
//! A part is its edges sorted by (cause, effect, kind, event id): a header
//! (base time, event sequence and boot, then each cause's slot in the block
//! and the byte length of its run), then per cause a run of entries coded
//! as the cause blocks' (`blocks::EntryBase`): `zigzag(effect − cause)`,
//! `cpu << 3 | kind`, `zigzag` deltas of the event id's sequence (with a
//! flag: the boot differs) and of the time from the previous entry of the
//! run (the first from the base), and the boot when it differs. A lookup decodes only
//! its cause's run of each part: a busy block (a shared header's) holds
//! tens of thousands of edges.
//!
//! De-duplication: an edge is made by applying an event, and the ingest
//! applies every event once (event ranges), so an edge can only repeat
//! within one event, that is within one batch: the batch's edges are kept
//! exactly once there ([`EdgeBatch`]).

pub use crate::blocks::{block_of, BLOCK_NODES, BLOCK_SHIFT};
use crate::blocks::{slot_of, Entry, EntryBase, SEQ_MASK};
use crate::varint;
use anyhow::{Context, Result};
use rusqlite::{params, Connection};

/// A block with this many parts is merged (to one or two parts).
pub const MERGE_PARTS: i64 = 8;
/// A part's row is `block << PART_BITS | number` (numbers below [`MERGE_PARTS`]).
const PART_BITS: u32 = 3;
const _: () = assert!(MERGE_PARTS <= 1 << PART_BITS);

/// The first and last row key of `block_id`'s parts. The parts are rows of
/// an integer-keyed table, not of a table keyed by (block, part) `WITHOUT
/// ROWID`: such a table keeps at most ~1 KB of a row in its leaf page and
/// the rest in overflow pages, and a typical part (~1 KB) left most of its
/// overflow page empty (4.1 of 12.9 bytes an event at scale 0.25).
fn part_keys(block_id: i64) -> [i64; 2] {
    let lo = block_id << PART_BITS;
    [lo, lo | ((1 << PART_BITS) - 1)]
}

/// A merge leaves a block's oldest part as it is while the newer parts
/// hold less than this fraction of its bytes (1/4), and merges those alone.
pub const MERGE_RATIO: i64 = 4;

/// One edge, effect → cause.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Edge {
    pub cause: i64,
    pub effect: i64,
    pub kind: u8,
    pub event_id: i64,
    pub time_ns: i64,
    pub boot: i64,
}

/// Encodes edges sorted by cause (all of one block): the header, then each
/// cause's run of entries.
fn encode_part(edges: &[Edge]) -> Vec<u8> {
    let base_time = edges.first().map_or(0, |e| e.time_ns);
    let base_seq = edges.first().map_or(0, |e| e.event_id as u64 & SEQ_MASK);
    let base_boot = edges.first().map_or(0, |e| e.boot);
    let mut runs: Vec<(u64, Vec<u8>)> = Vec::new();
    let mut base = EntryBase::new(base_time, base_seq, base_boot);
    for e in edges {
        let slot = slot_of(e.cause) as u64;
        if runs.last().is_none_or(|r| r.0 != slot) {
            runs.push((slot, Vec::new()));
            base = EntryBase::new(base_time, base_seq, base_boot);
        }
        let out = &mut runs.last_mut().expect("pushed above").1;
        let entry = Entry {
            effect_minus_cause: e.effect.wrapping_sub(e.cause),
            kind: e.kind,
            event_id: e.event_id,
            time_ns: e.time_ns,
            boot: e.boot,
        };
        base.put(out, &entry);
    }
    let mut out =
        Vec::with_capacity(16 + 3 * runs.len() + runs.iter().map(|r| r.1.len()).sum::<usize>());
    varint::put(&mut out, varint::zigzag(base_time));
    varint::put(&mut out, base_seq);
    varint::put(&mut out, base_boot as u64);
    varint::put(&mut out, runs.len() as u64);
    for (slot, bytes) in &runs {
        varint::put(&mut out, *slot);
        varint::put(&mut out, bytes.len() as u64);
    }
    for (_, bytes) in &runs {
        out.extend_from_slice(bytes);
    }
    out
}

/// Decodes a part's edges of the cause in slot `only` (all with `None`).
fn decode_part(block_id: i64, buf: &[u8], only: Option<u64>, out: &mut Vec<Edge>) -> Result<()> {
    let mut pos = 0;
    let base_time = varint::unzigzag(varint::get(buf, &mut pos)?);
    let base_seq = varint::get(buf, &mut pos)?;
    let base_boot = varint::get(buf, &mut pos)? as i64;
    let n = varint::get(buf, &mut pos)? as usize;
    anyhow::ensure!(
        n <= BLOCK_NODES,
        "effect part of block {block_id}: {n} causes"
    );
    let mut runs = [(0u64, 0usize); BLOCK_NODES];
    for r in runs.iter_mut().take(n) {
        *r = (
            varint::get(buf, &mut pos)?,
            varint::get(buf, &mut pos)? as usize,
        );
    }
    for &(slot, len) in &runs[..n] {
        anyhow::ensure!(
            slot < BLOCK_NODES as u64,
            "effect part of block {block_id}: slot {slot} out of range"
        );
        let bytes = buf.get(pos..pos + len).context("effect part truncated")?;
        pos += len;
        if only.is_some_and(|o| o != slot) {
            continue;
        }
        let cause = (block_id << BLOCK_SHIFT) + slot as i64;
        let (mut p, mut base) = (0usize, EntryBase::new(base_time, base_seq, base_boot));
        while p < bytes.len() {
            let e = base.get(bytes, &mut p)?;
            out.push(Edge {
                cause,
                effect: cause.wrapping_add(e.effect_minus_cause),
                kind: e.kind,
                event_id: e.event_id,
                time_ns: e.time_ns,
                boot: e.boot,
            });
        }
    }
    Ok(())
}

/// The edges made in the open batch, each once.
#[derive(Default)]
pub struct EdgeBatch {
    edges: Vec<Edge>,
    /// A merged block's edges, kept across merges: a busy block holds up to
    /// millions of edges, and a fresh vector each time cost page faults.
    merged: Vec<Edge>,
}

impl EdgeBatch {
    /// Adds an edge; false if the batch already holds it. An edge is keyed
    /// by its event, and every event is applied once (event ranges), all
    /// its edges together: so a repeat can only be among the edges at the
    /// end of the batch that carry its event id, and only those are compared
    /// (a few; a set of every edge of the batch cost a hash insert each).
    pub fn add(&mut self, e: Edge) -> bool {
        let same = |o: &Edge| (o.cause, o.effect, o.kind) == (e.cause, e.effect, e.kind);
        if self
            .edges
            .iter()
            .rev()
            .take_while(|o| o.event_id == e.event_id)
            .any(same)
        {
            return false;
        }
        self.edges.push(e);
        true
    }

    /// The batch's edges so far.
    pub fn edges(&self) -> &[Edge] {
        &self.edges
    }

    /// Writes the batch's edges, one part per cause block, merging blocks
    /// that reach [`MERGE_PARTS`] (see the module's notes). Call inside the
    /// batch's transaction.
    pub fn write(&mut self, db: &Connection) -> Result<()> {
        self.edges.sort_unstable();
        let mut parts =
            db.prepare_cached("SELECT COUNT(*) FROM effect_parts WHERE part BETWEEN ?1 AND ?2")?;
        let mut put = db.prepare_cached("INSERT INTO effect_parts(part, data) VALUES(?1, ?2)")?;
        let mut rest = &self.edges[..];
        while let Some(first) = rest.first() {
            let block_id = block_of(first.cause);
            let n = rest
                .iter()
                .take_while(|e| block_of(e.cause) == block_id)
                .count();
            let (these, after) = rest.split_at(n);
            rest = after;
            let [lo, hi] = part_keys(block_id);
            let count: i64 = parts.query_row([lo, hi], |r| r.get(0))?;
            // A block's parts are numbered 0.. in the order written (a
            // merge leaves part 0, or parts 0 and 1), so `count` is the next
            // number.
            if count + 1 < MERGE_PARTS {
                put.execute(params![lo + count, encode_part(these)])?;
                continue;
            }
            // The parts after the oldest are merged alone while they are
            // small beside it; else the oldest goes in too.
            // (length() of a blob reads no more than its row's header.)
            let sizes: Vec<i64> = db
                .prepare_cached("SELECT length(data) FROM effect_parts WHERE part BETWEEN ?1 AND ?2 ORDER BY part")?
                .query_map([lo, hi], |r| r.get(0))?
                .collect::<rusqlite::Result<_>>()?;
            let newer_len: i64 = sizes.iter().skip(1).sum();
            let from = match sizes.first() {
                Some(&oldest_len) if newer_len.saturating_mul(MERGE_RATIO) < oldest_len => lo + 1,
                _ => lo,
            };
            let mut all = std::mem::take(&mut self.merged);
            all.clear();
            read_part_range(db, block_id, from, hi, &mut all)?;
            all.extend_from_slice(these);
            // Each part and the batch's edges are sorted runs: the stable
            // sort merges runs (equal edges are identical, so it sorts as
            // an unstable sort would).
            all.sort();
            db.prepare_cached("DELETE FROM effect_parts WHERE part BETWEEN ?1 AND ?2")?
                .execute([from, hi])?;
            put.execute(params![from, encode_part(&all)])?;
            self.merged = all;
        }
        self.edges.clear();
        Ok(())
    }
}

/// Every stored edge whose cause is in `block_id`, sorted.
fn read_block(db: &Connection, block_id: i64) -> Result<Vec<Edge>> {
    let mut out = Vec::new();
    read_parts(db, block_id, &mut out)?;
    out.sort_unstable();
    Ok(out)
}

/// Appends the edges of `block_id`'s parts, part by part (each part sorted).
fn read_parts(db: &Connection, block_id: i64, out: &mut Vec<Edge>) -> Result<()> {
    let [lo, hi] = part_keys(block_id);
    read_part_range(db, block_id, lo, hi, out)
}

/// [`read_parts`] of the parts whose row keys are in `from..=to`.
fn read_part_range(
    db: &Connection,
    block_id: i64,
    from: i64,
    to: i64,
    out: &mut Vec<Edge>,
) -> Result<()> {
    let mut st = db.prepare_cached(
        "SELECT data FROM effect_parts WHERE part BETWEEN ?1 AND ?2 ORDER BY part",
    )?;
    let mut rows = st.query([from, to])?;
    while let Some(r) = rows.next()? {
        let data = r
            .get_ref(0)?
            .as_blob()
            .context("effect part is not a blob")?;
        decode_part(block_id, data, None, out)?;
    }
    Ok(())
}

/// Reads edges by cause, keeping the parts of the block read last (a
/// walk's nodes are often neighbours); only the cause's run of each part
/// is decoded.
pub struct EffectReader<'c> {
    conn: &'c Connection,
    block: Option<(i64, Vec<Vec<u8>>)>,
    edges: Vec<Edge>,
}

impl<'c> EffectReader<'c> {
    pub fn new(conn: &'c Connection) -> Self {
        Self {
            conn,
            block: None,
            edges: Vec::new(),
        }
    }

    /// `cause`'s edges (to its effects), in (effect, kind, event id) order.
    pub fn of(&mut self, cause: i64) -> Result<&[Edge]> {
        let b = block_of(cause);
        if self.block.as_ref().is_none_or(|(id, _)| *id != b) {
            let mut st = self.conn.prepare_cached(
                "SELECT data FROM effect_parts WHERE part BETWEEN ?1 AND ?2 ORDER BY part",
            )?;
            let parts = st
                .query_map(part_keys(b), |r| r.get::<_, Vec<u8>>(0))?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            self.block = Some((b, parts));
        }
        self.edges.clear();
        let slot = slot_of(cause) as u64;
        for part in &self.block.as_ref().expect("read above").1 {
            decode_part(b, part, Some(slot), &mut self.edges)?;
        }
        self.edges.sort_unstable();
        Ok(&self.edges)
    }
}

/// Every edge, sorted by cause (tests and tools).
pub fn all(conn: &Connection) -> Result<Vec<Edge>> {
    let blocks: Vec<i64> = conn
        .prepare("SELECT DISTINCT part >> ?1 FROM effect_parts ORDER BY part")?
        .query_map([PART_BITS], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    let mut out = Vec::new();
    for b in blocks {
        out.extend(read_block(conn, b)?);
    }
    Ok(out)
}

/// How many edges the store holds (reads every part).
pub fn count(conn: &Connection) -> Result<i64> {
    let mut st = conn.prepare("SELECT part >> ?1, data FROM effect_parts")?;
    let mut rows = st.query([PART_BITS])?;
    let (mut n, mut part) = (0, Vec::new());
    while let Some(r) = rows.next()? {
        part.clear();
        decode_part(
            r.get(0)?,
            r.get_ref(1)?
                .as_blob()
                .context("effect part is not a blob")?,
            None,
            &mut part,
        )?;
        n += part.len() as i64;
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_round_trip_and_merge() {
        let dir = tempfile::tempdir().unwrap();
        let conn = crate::schema::open_rw(&dir.path().join("e.db")).unwrap();
        let mut want = Vec::new();
        for batch in 0..(2 * MERGE_PARTS + 3) {
            let mut b = EdgeBatch::default();
            for i in 0..20 {
                let e = Edge {
                    cause: (i * 7) % 150,
                    effect: 1000 + batch * 20 + i,
                    kind: (1 + i % 5) as u8,
                    event_id: ((i % 16) << 48) | (batch * 100 + i),
                    time_ns: 1_700_000_000_000_000_000 + batch * 1000 - i,
                    boot: 1 + i % 2,
                };
                assert!(b.add(e));
                assert!(!b.add(e), "a repeat within the batch is dropped");
                want.push(e);
            }
            b.write(&conn).unwrap();
        }
        want.sort_unstable();
        assert_eq!(all(&conn).unwrap(), want);
        let most: i64 = conn
            .query_row(
                "SELECT MAX(c) FROM (SELECT COUNT(*) c FROM effect_parts GROUP BY part >> 3)",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert!(most < MERGE_PARTS, "{most} parts in a block");
        let mut r = EffectReader::new(&conn);
        for cause in [0, 7, 63, 64, 140, 149, 151] {
            let got: Vec<Edge> = r.of(cause).unwrap().to_vec();
            let exp: Vec<Edge> = want.iter().filter(|e| e.cause == cause).copied().collect();
            assert_eq!(got, exp, "cause {cause}");
        }
    }

    /// A busy block: a large first part, then small batches. Merges leave
    /// the large part alone while the others are small beside it, the
    /// block never holds MERGE_PARTS parts, and every edge reads back.
    #[test]
    fn a_large_oldest_part_is_merged_only_when_the_newer_ones_grow() {
        let dir = tempfile::tempdir().unwrap();
        let conn = crate::schema::open_rw(&dir.path().join("e.db")).unwrap();
        let edge = |n: i64| Edge {
            cause: n % 64,
            effect: 100 + n,
            kind: (1 + n % 5) as u8,
            event_id: ((n % 16) << 48) | n,
            time_ns: 1_700_000_000_000_000_000 + n * 1000,
            boot: 1,
        };
        let (mut want, mut n) = (Vec::new(), 0);
        // Block 0's first part (row key 0) as the first batch wrote it.
        let (mut oldest_kept, mut first_len) = (0, 0);
        for batch in 0..200 {
            let mut b = EdgeBatch::default();
            for _ in 0..if batch == 0 { 2_000 } else { 5 } {
                assert!(b.add(edge(n)));
                want.push(edge(n));
                n += 1;
            }
            b.write(&conn).unwrap();
            let (parts, len0): (i64, i64) = conn
                .query_row("SELECT COUNT(*), (SELECT length(data) FROM effect_parts WHERE part = 0) FROM effect_parts WHERE part BETWEEN 0 AND 7", [], |r| {
                    Ok((r.get(0)?, r.get(1)?))
                })
                .unwrap();
            assert!(parts < MERGE_PARTS, "{parts} parts after batch {batch}");
            if batch == 0 {
                first_len = len0;
            }
            if len0 == first_len {
                oldest_kept = batch;
            }
        }
        // 2,000 edges against 5 a batch: the first part outlives many merges, not all.
        assert!(
            oldest_kept >= 50,
            "the large part was rewritten at batch {}",
            oldest_kept + 1
        );
        assert!(oldest_kept < 199, "the large part was never merged");
        want.sort_unstable();
        assert_eq!(all(&conn).unwrap(), want);
        let mut r = EffectReader::new(&conn);
        for cause in [0, 1, 31, 63] {
            let exp: Vec<Edge> = want.iter().filter(|e| e.cause == cause).copied().collect();
            assert_eq!(r.of(cause).unwrap(), &exp[..], "cause {cause}");
        }
    }
}

//! The ancestry index: every node's edges to its causes, packed in blocks of
//! [`BLOCK_NODES`] consecutive node ids (`cause_blocks`, keyed by
//! `node >> BLOCK_SHIFT`). Node ids are dense and assigned in order, and a
//! node gains its causes while it is the newest version of its object, so a
//! batch writes the blocks of the nodes it made, once, instead of a row per
//! node; a later batch rewrites a block only to extend its last, partly
//! filled block or when an older node gains a cause (docs/store.md, "Cause
//! blocks").
//!
//! A block is `base_time: i64, base_seq: u64, offsets: [u32; BLOCK_NODES + 1]`
//! (little-endian) followed by the entries; node `first + i`'s entries are
//! the bytes `offsets[i]..offsets[i + 1]` after the header. A walk step reads
//! two offsets and that slice through the incremental-blob API, so it never
//! decodes more than the one node's list. Each entry is five varints, the
//! values relative to the previous entry of the same node (the first to the
//! block's base): `zigzag(effect − cause)`, `cpu << 3 | kind`,
//! `zigzag(seq − previous seq)`, `zigzag(time − previous time)`, `boot` —
//! where an event id is `cpu << 48 | seq`. About 10 bytes an entry against
//! 29 for fixed-width fields.

pub use crate::blocks::{block_of, BLOCK_NODES, BLOCK_SHIFT};
use crate::blocks::{slot_of, Entry, EntryBase, SEQ_MASK};
use anyhow::{Context, Result};
use rusqlite::{params, Connection, OptionalExtension};

const HEADER: usize = 16 + 4 * (BLOCK_NODES + 1);

/// One edge from a node to a cause.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CauseEntry {
    pub cause: i64,
    pub kind: u8,
    pub event_id: i64,
    pub time_ns: i64,
    pub boot: i64,
}


/// Appends the varints of `entries` (the causes of `effect`) to `out`.
fn encode_node(out: &mut Vec<u8>, effect: i64, entries: &[CauseEntry], base_time: i64, base_seq: u64) {
    let mut base = EntryBase::new(base_time, base_seq);
    for e in entries {
        let entry = Entry { effect_minus_cause: effect.wrapping_sub(e.cause), kind: e.kind, event_id: e.event_id, time_ns: e.time_ns, boot: e.boot };
        base.put(out, &entry);
    }
}

/// Decodes one node's entries (the slice of its block) into `out`.
pub fn decode_node(out: &mut Vec<CauseEntry>, effect: i64, bytes: &[u8], base_time: i64, base_seq: u64) -> Result<()> {
    let mut base = EntryBase::new(base_time, base_seq);
    let mut pos = 0;
    while pos < bytes.len() {
        let e = base.get(bytes, &mut pos)?;
        out.push(CauseEntry { cause: effect.wrapping_sub(e.effect_minus_cause), kind: e.kind, event_id: e.event_id, time_ns: e.time_ns, boot: e.boot });
    }
    Ok(())
}

fn header_u32(block: &[u8], i: usize) -> usize {
    let at = 16 + 4 * i;
    u32::from_le_bytes(block[at..at + 4].try_into().expect("4 bytes")) as usize
}

/// One block's lists, decoded (for rewriting a block).
fn decode_block(block_id: i64, block: &[u8]) -> Result<Vec<Vec<CauseEntry>>> {
    anyhow::ensure!(block.len() >= HEADER, "cause block {block_id} is shorter than its header");
    let base_time = i64::from_le_bytes(block[0..8].try_into().expect("8 bytes"));
    let base_seq = u64::from_le_bytes(block[8..16].try_into().expect("8 bytes"));
    let body = &block[HEADER..];
    let mut lists = vec![Vec::new(); BLOCK_NODES];
    for (i, list) in lists.iter_mut().enumerate() {
        let (a, b) = (header_u32(block, i), header_u32(block, i + 1));
        let bytes = body.get(a..b).context("cause block offsets out of range")?;
        decode_node(list, (block_id << BLOCK_SHIFT) + i as i64, bytes, base_time, base_seq)?;
    }
    Ok(lists)
}

fn encode_block(block_id: i64, lists: &[Vec<CauseEntry>]) -> Vec<u8> {
    let first = lists.iter().flatten().next();
    let base_time = first.map_or(0, |e| e.time_ns);
    let base_seq = first.map_or(0, |e| e.event_id as u64 & SEQ_MASK);
    let mut out = Vec::with_capacity(HEADER + 16 * lists.iter().map(Vec::len).sum::<usize>());
    out.extend_from_slice(&base_time.to_le_bytes());
    out.extend_from_slice(&base_seq.to_le_bytes());
    out.resize(HEADER, 0);
    for (i, list) in lists.iter().enumerate() {
        encode_node(&mut out, (block_id << BLOCK_SHIFT) + i as i64, list, base_time, base_seq);
        let end = (out.len() - HEADER) as u32;
        let at = 16 + 4 * (i + 1);
        out[at..at + 4].copy_from_slice(&end.to_le_bytes());
    }
    out
}

/// Writes the new cause entries of a batch (`pending`: effect → entries, in
/// the order they were made), block by block, merging them into blocks
/// already stored. Call inside the batch's transaction.
pub fn write_pending(db: &Connection, pending: &mut Vec<(i64, CauseEntry)>) -> Result<()> {
    // Stable: a node's entries keep the order they were made in.
    pending.sort_by_key(|(effect, _)| *effect);
    let mut get = db.prepare_cached("SELECT data FROM cause_blocks WHERE block = ?1")?;
    let mut put = db.prepare_cached("INSERT OR REPLACE INTO cause_blocks(block, data) VALUES(?1, ?2)")?;
    let mut rest = &pending[..];
    while let Some(&(first, _)) = rest.first() {
        let block_id = block_of(first);
        let n = rest.iter().take_while(|(e, _)| block_of(*e) == block_id).count();
        let (these, after) = rest.split_at(n);
        rest = after;
        let stored: Option<Vec<u8>> = get.query_row([block_id], |r| r.get(0)).optional()?;
        let mut lists = match stored {
            Some(b) => decode_block(block_id, &b)?,
            None => vec![Vec::new(); BLOCK_NODES],
        };
        for (effect, e) in these {
            lists[slot_of(*effect)].push(*e);
        }
        put.execute(params![block_id, encode_block(block_id, &lists)])?;
    }
    pending.clear();
    Ok(())
}

/// Reads nodes' cause lists through SQLite's incremental-blob API: per node
/// two small reads (its offsets, then its bytes) from an open handle on its
/// block, reopened (one integer-keyed seek) only when the block changes.
pub struct CauseReader<'c> {
    conn: &'c Connection,
    blob: Option<rusqlite::blob::Blob<'c>>,
    /// The block the handle is on (`None`: no handle, or the block does not exist).
    block: Option<i64>,
    base_time: i64,
    base_seq: u64,
    buf: Vec<u8>,
    /// The entries of the node loaded last.
    pub entries: Vec<CauseEntry>,
}

impl<'c> CauseReader<'c> {
    pub fn new(conn: &'c Connection) -> Self {
        Self { conn, blob: None, block: None, base_time: 0, base_seq: 0, buf: Vec::with_capacity(1024), entries: Vec::new() }
    }

    fn position(&mut self, block_id: i64) -> Result<bool> {
        if self.block == Some(block_id) {
            return Ok(true);
        }
        self.block = None;
        let ok = match self.blob.as_mut() {
            Some(b) => b.reopen(block_id).is_ok(),
            None => match self.conn.blob_open(rusqlite::MAIN_DB, "cause_blocks", "data", block_id, true) {
                Ok(b) => {
                    self.blob = Some(b);
                    true
                }
                Err(_) => false,
            },
        };
        if !ok {
            // A failed reopen aborts the handle; start a fresh one next time.
            self.blob = None;
            return Ok(false);
        }
        let b = self.blob.as_ref().expect("opened above");
        let mut base = [0u8; 16];
        b.read_at_exact(&mut base, 0).context("reading a cause block")?;
        self.base_time = i64::from_le_bytes(base[0..8].try_into().expect("8 bytes"));
        self.base_seq = u64::from_le_bytes(base[8..16].try_into().expect("8 bytes"));
        self.block = Some(block_id);
        Ok(true)
    }

    /// Loads `node`'s entries into `self.entries` (empty if it has none).
    pub fn load(&mut self, node: i64) -> Result<&[CauseEntry]> {
        self.entries.clear();
        if !self.position(block_of(node))? {
            return Ok(&self.entries);
        }
        let b = self.blob.as_ref().expect("positioned");
        let mut off = [0u8; 8];
        b.read_at_exact(&mut off, 16 + 4 * slot_of(node)).context("reading a cause block")?;
        let start = u32::from_le_bytes(off[0..4].try_into().expect("4 bytes")) as usize;
        let end = u32::from_le_bytes(off[4..8].try_into().expect("4 bytes")) as usize;
        anyhow::ensure!(start <= end, "cause block {}: offsets out of order", block_of(node));
        self.buf.resize(end - start, 0);
        b.read_at_exact(&mut self.buf, HEADER + start).context("reading a cause list")?;
        decode_node(&mut self.entries, node, &self.buf, self.base_time, self.base_seq)?;
        Ok(&self.entries)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_round_trip_extreme_values() {
        let mut lists = vec![Vec::new(); BLOCK_NODES];
        let block_id = 7;
        let first = block_id << BLOCK_SHIFT;
        lists[0].push(CauseEntry { cause: 1, kind: 5, event_id: (15 << 48) | 3, time_ns: 1_700_000_000_000_000_000, boot: 1 });
        lists[0].push(CauseEntry { cause: first + 40, kind: 1, event_id: 2, time_ns: 0, boot: 0 });
        lists[3].push(CauseEntry { cause: i64::MAX, kind: 3, event_id: i64::MAX, time_ns: i64::MIN, boot: u32::MAX as i64 });
        lists[63].push(CauseEntry { cause: 0, kind: 2, event_id: 0xffff << 48, time_ns: -5, boot: 2 });
        let b = encode_block(block_id, &lists);
        assert_eq!(decode_block(block_id, &b).unwrap(), lists);
    }
}

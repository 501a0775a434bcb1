//! The ancestry index: every node's edges to its causes, packed in blocks of
//! [`BLOCK_NODES`] consecutive node ids (`cause_blocks`, keyed by
//! `node >> BLOCK_SHIFT`). Node ids are dense and assigned in order, and a
//! node gains its causes while it is the newest version of its object, so a
//! batch writes the blocks of the nodes it made, once, instead of a row per
//! node; a later batch rewrites a block only to extend its last, partly
//! filled block or when an older node gains a cause (docs/store.md, "Cause
//! blocks").
//!
//! A block is `base_time: i64, base_seq: u64, offsets: [u16; BLOCK_NODES + 1]`
//! (little-endian; `[u32; ..]` when the entries take more than 64 KiB, marked
//! by the top bit of `base_seq`, whose bits 48..62 hold the base boot)
//! followed by the entries; node `first + i`'s entries are
//! the bytes `offsets[i]..offsets[i + 1]` after the header. A walk step reads
//! two offsets and that slice through the incremental-blob API, so it never
//! decodes more than the one node's list. Each entry is four or five
//! varints, the values relative to the previous entry of the same node (the
//! first to the block's base): `zigzag(effect − cause)`, `cpu << 3 | kind`,
//! `zigzag(seq − previous seq) << 1 | boot differs`, `zigzag(time − previous
//! time)`, and `boot` only when it differs — where an event id is `cpu << 48
//! | seq`. About 9 bytes an entry against 29 for fixed-width fields.

pub use crate::blocks::{block_of, BLOCK_NODES, BLOCK_SHIFT};
use crate::blocks::{slot_of, Entry, EntryBase, SEQ_BITS, SEQ_MASK};
use anyhow::{Context, Result};
use rusqlite::{params, Connection, OptionalExtension};

/// Set in the stored `base_seq` (a sequence number has 48 bits) when the
/// block's offsets are 16 bits wide: nearly every block's entries take
/// under 64 KiB, and two bytes less per offset is 130 of a block's ~1.2 KB.
const NARROW: u64 = 1 << 63;

/// The header's size with offsets `width` bytes wide.
const fn header(width: usize) -> usize {
    16 + width * (BLOCK_NODES + 1)
}

/// Bits 48..63 of the stored `base_seq` hold the base boot (entries carry
/// their boot only when it differs from the previous entry's).
const BOOT_MAX: i64 = (1 << 15) - 1;

/// Where a block's nodes' first entries are counted from: time, sequence
/// number, boot.
pub type Base = (i64, u64, i64);

/// The base of a block whose header holds `base_time` and `stored`.
fn base_of(base_time: i64, stored: u64) -> Base {
    (
        base_time,
        stored & SEQ_MASK,
        ((stored >> SEQ_BITS) as i64) & BOOT_MAX,
    )
}

/// The offsets' width of a block whose stored `base_seq` is `stored`.
fn width_of(stored: u64) -> usize {
    if stored & NARROW != 0 {
        2
    } else {
        4
    }
}

/// Offset `i` of a header whose offsets are `width` bytes wide.
fn offset_at(bytes: &[u8], width: usize) -> usize {
    match width {
        2 => u16::from_le_bytes([bytes[0], bytes[1]]) as usize,
        _ => u32::from_le_bytes(bytes[..4].try_into().expect("4 bytes")) as usize,
    }
}

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
fn encode_node(out: &mut Vec<u8>, effect: i64, entries: &[CauseEntry], (time, seq, boot): Base) {
    let mut base = EntryBase::new(time, seq, boot);
    for e in entries {
        let entry = Entry {
            effect_minus_cause: effect.wrapping_sub(e.cause),
            kind: e.kind,
            event_id: e.event_id,
            time_ns: e.time_ns,
            boot: e.boot,
        };
        base.put(out, &entry);
    }
}

/// Decodes one node's entries (the slice of its block) into `out`.
pub fn decode_node(
    out: &mut Vec<CauseEntry>,
    effect: i64,
    bytes: &[u8],
    (time, seq, boot): Base,
) -> Result<()> {
    let mut base = EntryBase::new(time, seq, boot);
    let mut pos = 0;
    while pos < bytes.len() {
        let e = base.get(bytes, &mut pos)?;
        out.push(CauseEntry {
            cause: effect.wrapping_sub(e.effect_minus_cause),
            kind: e.kind,
            event_id: e.event_id,
            time_ns: e.time_ns,
            boot: e.boot,
        });
    }
    Ok(())
}

/// One block's lists, decoded (for rewriting a block).
fn decode_block(block_id: i64, block: &[u8]) -> Result<Vec<Vec<CauseEntry>>> {
    anyhow::ensure!(
        block.len() >= 16,
        "cause block {block_id} is shorter than its header"
    );
    let base_time = i64::from_le_bytes(block[0..8].try_into().expect("8 bytes"));
    let stored = u64::from_le_bytes(block[8..16].try_into().expect("8 bytes"));
    let (width, base) = (width_of(stored), base_of(base_time, stored));
    anyhow::ensure!(
        block.len() >= header(width),
        "cause block {block_id} is shorter than its header"
    );
    let body = &block[header(width)..];
    let offset = |i: usize| offset_at(&block[16 + width * i..], width);
    let mut lists = vec![Vec::new(); BLOCK_NODES];
    for (i, list) in lists.iter_mut().enumerate() {
        let bytes = body
            .get(offset(i)..offset(i + 1))
            .context("cause block offsets out of range")?;
        decode_node(list, (block_id << BLOCK_SHIFT) + i as i64, bytes, base)?;
    }
    Ok(lists)
}

fn encode_block(block_id: i64, lists: &[Vec<CauseEntry>]) -> Vec<u8> {
    let first = lists.iter().flatten().next();
    let base_time = first.map_or(0, |e| e.time_ns);
    let base_seq = first.map_or(0, |e| e.event_id as u64 & SEQ_MASK);
    // The base boot is the first entry's when it fits its 15 bits (else 0:
    // the entries then say theirs).
    let base_boot = first.map_or(0, |e| e.boot);
    let base_boot = if (0..=BOOT_MAX).contains(&base_boot) {
        base_boot
    } else {
        0
    };
    let mut body = Vec::with_capacity(16 * lists.iter().map(Vec::len).sum::<usize>());
    let mut ends = [0usize; BLOCK_NODES];
    for (i, list) in lists.iter().enumerate() {
        encode_node(
            &mut body,
            (block_id << BLOCK_SHIFT) + i as i64,
            list,
            (base_time, base_seq, base_boot),
        );
        ends[i] = body.len();
    }
    let width = if body.len() <= u16::MAX as usize {
        2
    } else {
        4
    };
    let mut out = Vec::with_capacity(header(width) + body.len());
    out.extend_from_slice(&base_time.to_le_bytes());
    let stored = base_seq | (base_boot as u64) << SEQ_BITS | if width == 2 { NARROW } else { 0 };
    out.extend_from_slice(&stored.to_le_bytes());
    for end in std::iter::once(0).chain(ends) {
        match width {
            2 => out.extend_from_slice(&(end as u16).to_le_bytes()),
            _ => out.extend_from_slice(&(end as u32).to_le_bytes()),
        }
    }
    out.extend_from_slice(&body);
    out
}

/// Writes the new cause entries of a batch (`pending`: effect → entries, in
/// the order they were made), block by block, merging them into blocks
/// already stored. Call inside the batch's transaction.
pub fn write_pending(db: &Connection, pending: &mut Vec<(i64, CauseEntry)>) -> Result<()> {
    // Stable: a node's entries keep the order they were made in.
    pending.sort_by_key(|(effect, _)| *effect);
    let mut get = db.prepare_cached("SELECT data FROM cause_blocks WHERE block = ?1")?;
    let mut put =
        db.prepare_cached("INSERT OR REPLACE INTO cause_blocks(block, data) VALUES(?1, ?2)")?;
    let mut rest = &pending[..];
    while let Some(&(first, _)) = rest.first() {
        let block_id = block_of(first);
        let n = rest
            .iter()
            .take_while(|(e, _)| block_of(*e) == block_id)
            .count();
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
    base: Base,
    /// The block's offsets' width (2 or 4 bytes).
    width: usize,
    buf: Vec<u8>,
    /// The entries of the node loaded last.
    pub entries: Vec<CauseEntry>,
}

impl<'c> CauseReader<'c> {
    pub fn new(conn: &'c Connection) -> Self {
        Self {
            conn,
            blob: None,
            block: None,
            base: (0, 0, 0),
            width: 4,
            buf: Vec::with_capacity(1024),
            entries: Vec::new(),
        }
    }

    fn position(&mut self, block_id: i64) -> Result<bool> {
        if self.block == Some(block_id) {
            return Ok(true);
        }
        self.block = None;
        let ok = match self.blob.as_mut() {
            Some(b) => b.reopen(block_id).is_ok(),
            None => {
                match self
                    .conn
                    .blob_open(rusqlite::MAIN_DB, "cause_blocks", "data", block_id, true)
                {
                    Ok(b) => {
                        self.blob = Some(b);
                        true
                    }
                    Err(_) => false,
                }
            }
        };
        if !ok {
            // A failed reopen aborts the handle; start a fresh one next time.
            self.blob = None;
            return Ok(false);
        }
        let b = self.blob.as_ref().expect("opened above");
        let mut base = [0u8; 16];
        b.read_at_exact(&mut base, 0)
            .context("reading a cause block")?;
        let base_time = i64::from_le_bytes(base[0..8].try_into().expect("8 bytes"));
        let stored = u64::from_le_bytes(base[8..16].try_into().expect("8 bytes"));
        (self.width, self.base) = (width_of(stored), base_of(base_time, stored));
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
        let w = self.width;
        let mut off = [0u8; 8];
        b.read_at_exact(&mut off[..2 * w], 16 + w * slot_of(node))
            .context("reading a cause block")?;
        let (start, end) = (offset_at(&off, w), offset_at(&off[w..], w));
        anyhow::ensure!(
            start <= end,
            "cause block {}: offsets out of order",
            block_of(node)
        );
        self.buf.resize(end - start, 0);
        b.read_at_exact(&mut self.buf, header(w) + start)
            .context("reading a cause list")?;
        decode_node(&mut self.entries, node, &self.buf, self.base)?;
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
        lists[0].push(CauseEntry {
            cause: 1,
            kind: 5,
            event_id: (15 << 48) | 3,
            time_ns: 1_700_000_000_000_000_000,
            boot: 1,
        });
        lists[0].push(CauseEntry {
            cause: first + 40,
            kind: 1,
            event_id: 2,
            time_ns: 0,
            boot: 0,
        });
        lists[3].push(CauseEntry {
            cause: i64::MAX,
            kind: 3,
            event_id: i64::MAX,
            time_ns: i64::MIN,
            boot: u32::MAX as i64,
        });
        lists[63].push(CauseEntry {
            cause: 0,
            kind: 2,
            event_id: 0xffff << 48,
            time_ns: -5,
            boot: 2,
        });
        let b = encode_block(block_id, &lists);
        assert_eq!(
            width_of(u64::from_le_bytes(b[8..16].try_into().unwrap())),
            2
        );
        assert_eq!(decode_block(block_id, &b).unwrap(), lists);
        // Past 64 KiB of entries the offsets are 32 bits wide.
        for i in 0..8000 {
            lists[9].push(CauseEntry {
                cause: i * 1_000_003,
                kind: 1,
                event_id: i << 20,
                time_ns: i << 30,
                boot: 1,
            });
        }
        let b = encode_block(block_id, &lists);
        assert!(b.len() > 1 << 16);
        assert_eq!(
            width_of(u64::from_le_bytes(b[8..16].try_into().unwrap())),
            4
        );
        assert_eq!(decode_block(block_id, &b).unwrap(), lists);
    }
}

//! What the packed graph blocks (node blocks, cause blocks, effect parts)
//! share: blocks of 64 consecutive node ids, and the split of an event id
//! into CPU and sequence number (`cpu << 48 | seq`, docs/event-schema.md),
//! and the coding of an edge entry.

use crate::varint;
use anyhow::Result;

/// log2 of the node ids per block.
pub const BLOCK_SHIFT: u32 = 6;
/// Node ids per block.
pub const BLOCK_NODES: usize = 1 << BLOCK_SHIFT;
/// Bits of an event id's sequence number (its CPU above them).
pub const SEQ_BITS: u32 = 48;
pub const SEQ_MASK: u64 = (1 << SEQ_BITS) - 1;

/// The block holding `node`.
pub fn block_of(node: i64) -> i64 {
    node >> BLOCK_SHIFT
}

/// `node`'s place in its block.
pub fn slot_of(node: i64) -> usize {
    (node as u64 as usize) & (BLOCK_NODES - 1)
}

/// One edge entry of a cause block or an effect part: four or five
/// varints, the sequence number, time and boot relative to the previous
/// entry of the same node (the first to the block's or part's base), so
/// both directions of the graph share one coding. The boot is written only
/// when it differs from the previous entry's (a flag in the sequence
/// number's varint says so): it nearly never does, and a byte per entry
/// was 1.7 bytes an event in the two directions.
#[derive(Clone, Copy, Debug)]
pub struct Entry {
    /// `effect − cause`: the other end, relative to the node the entry is under.
    pub effect_minus_cause: i64,
    pub kind: u8,
    pub event_id: i64,
    pub time_ns: i64,
    pub boot: i64,
}

/// A list of event ids in order, each as its CPU and its step from the
/// sequence number after that CPU's previous id in the list: consecutive
/// events of one CPU take two bytes. Raw segments (rawseg.rs) and workflow
/// parts (workflows.rs) store their ids this way.
#[derive(Default)]
pub struct IdList {
    /// Per CPU, the sequence number after its last id.
    next_seq: Vec<u64>,
}

impl IdList {
    pub fn put(&mut self, out: &mut Vec<u8>, id: u64) {
        let (cpu, seq) = (id >> SEQ_BITS, id & SEQ_MASK);
        if self.next_seq.len() <= cpu as usize {
            self.next_seq.resize(cpu as usize + 1, 0);
        }
        let next = &mut self.next_seq[cpu as usize];
        varint::put(out, cpu);
        varint::put(out, varint::zigzag(seq.wrapping_sub(*next) as i64));
        *next = seq + 1;
    }

    /// The next id; None when its CPU is past an id's 16 bits (damaged bytes).
    pub fn get(&mut self, bytes: &[u8], pos: &mut usize) -> Result<Option<u64>> {
        let cpu = varint::get(bytes, pos)?;
        let step = varint::unzigzag(varint::get(bytes, pos)?) as u64;
        if cpu > u16::MAX as u64 {
            return Ok(None);
        }
        if self.next_seq.len() <= cpu as usize {
            self.next_seq.resize(cpu as usize + 1, 0);
        }
        let seq = self.next_seq[cpu as usize].wrapping_add(step) & SEQ_MASK;
        self.next_seq[cpu as usize] = seq + 1;
        Ok(Some(cpu << SEQ_BITS | seq))
    }

    /// Starts a new list.
    pub fn clear(&mut self) {
        self.next_seq.clear();
    }
}

/// Where the next entry's sequence number, time and boot are counted from.
pub struct EntryBase {
    time: i64,
    seq: u64,
    boot: i64,
}

impl EntryBase {
    pub fn new(time: i64, seq: u64, boot: i64) -> Self {
        EntryBase { time, seq, boot }
    }

    pub fn put(&mut self, out: &mut Vec<u8>, e: &Entry) {
        let id = e.event_id as u64;
        let seq = id & SEQ_MASK;
        let new_boot = e.boot != self.boot;
        varint::put(out, varint::zigzag(e.effect_minus_cause));
        varint::put(out, (id >> SEQ_BITS) << 3 | e.kind as u64);
        // A step of a 48-bit sequence number: its zigzag has room for the flag.
        varint::put(
            out,
            varint::zigzag(seq.wrapping_sub(self.seq) as i64) << 1 | new_boot as u64,
        );
        varint::put(out, varint::zigzag(e.time_ns.wrapping_sub(self.time)));
        if new_boot {
            varint::put(out, e.boot as u64);
        }
        (self.time, self.seq, self.boot) = (e.time_ns, seq, e.boot);
    }

    pub fn get(&mut self, bytes: &[u8], pos: &mut usize) -> Result<Entry> {
        let effect_minus_cause = varint::unzigzag(varint::get(bytes, pos)?);
        let hi = varint::get(bytes, pos)?;
        let step = varint::get(bytes, pos)?;
        self.seq = self.seq.wrapping_add(varint::unzigzag(step >> 1) as u64) & SEQ_MASK;
        self.time = self
            .time
            .wrapping_add(varint::unzigzag(varint::get(bytes, pos)?));
        if step & 1 != 0 {
            self.boot = varint::get(bytes, pos)? as i64;
        }
        Ok(Entry {
            effect_minus_cause,
            kind: (hi & 7) as u8,
            event_id: ((hi >> 3) << SEQ_BITS | self.seq) as i64,
            time_ns: self.time,
            boot: self.boot,
        })
    }
}

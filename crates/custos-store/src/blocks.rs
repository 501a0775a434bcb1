//! What the packed graph blocks (node blocks, cause blocks, effect parts)
//! share: blocks of 64 consecutive node ids, and the split of an event id
//! into CPU and sequence number (`cpu << 48 | seq`, docs/event-schema.md).

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

//! LEB128 varints and zigzag signs: the integer coding of the packed graph
//! blocks (cause blocks, node blocks, effect parts); the varints through
//! the `integer-encoding` crate (protobuf's coding), with the store's errors.

use anyhow::{Context, Result};
use integer_encoding::VarInt;

/// Zigzag: small magnitudes of either sign become small varints (the
/// crate's signed coding does the same inside, but does not expose it).
pub fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

pub fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

pub fn put(out: &mut Vec<u8>, v: u64) {
    let mut buf = [0u8; 10];
    let n = v.encode_var(&mut buf);
    out.extend_from_slice(&buf[..n]);
}

pub fn get(buf: &[u8], pos: &mut usize) -> Result<u64> {
    let (v, n) = u64::decode_var(buf.get(*pos..).unwrap_or_default()).context("packed graph block truncated or corrupt")?;
    *pos += n;
    Ok(v)
}

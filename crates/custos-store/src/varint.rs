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

/// Appends `v` as a LEB128 varint (the `integer-encoding` crate's coding,
/// written byte by byte: a `memcpy` call per value cost more than the value).
#[inline]
pub fn put(out: &mut Vec<u8>, mut v: u64) {
    out.reserve(10);
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

pub fn get(buf: &[u8], pos: &mut usize) -> Result<u64> {
    let (v, n) = u64::decode_var(buf.get(*pos..).unwrap_or_default())
        .context("packed graph block truncated or corrupt")?;
    *pos += n;
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn put_writes_the_crates_coding() {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut values = vec![
            0,
            1,
            127,
            128,
            255,
            16383,
            16384,
            u64::MAX,
            u64::MAX >> 1,
            1 << 63,
        ];
        for _ in 0..10_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            values.push(x >> (x % 64));
        }
        for v in values {
            let mut ours = vec![7u8];
            put(&mut ours, v);
            let mut buf = [0u8; 10];
            let n = v.encode_var(&mut buf);
            assert_eq!(&ours[1..], &buf[..n], "{v}");
            let mut pos = 1;
            assert_eq!(get(&ours, &mut pos).unwrap(), v);
            assert_eq!(pos, ours.len());
        }
    }
}

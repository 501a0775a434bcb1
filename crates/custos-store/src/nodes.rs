//! The graph's nodes, out of per-row SQLite inserts (docs/store.md, "Node
//! blocks and the key index").
//!
//! **Node blocks.** Node ids are dense and assigned in order, and a node's
//! row never changes, so a batch packs the nodes it made into blocks of
//! [`BLOCK_NODES`] consecutive ids (`node_blocks`, keyed by `node >>
//! BLOCK_SHIFT`), each written once (the batch's last, partly filled block is
//! rewritten by the next batch). A block is one byte saying how the rest is
//! stored (0: plain; 1: zstd, then the plain length as a varint), then per slot: `kind` (0: no node), boot,
//! version, pid + 1 (0: none), `zigzag(node − exec) + 1` (0: none), the time
//! and the event id's sequence as deltas from the previous node of the block,
//! the id's CPU, the name front-coded against the previous node's name, and
//! the attributes' length + 1 (0: none) and text; all integers varints.
//!
//! **The key index.** Lookups by name (paths, `uid:N`, command names), by
//! pid and by execution go through sorted runs of `(key, node)` pairs
//! (`node_key_runs`, `node_key_pages`), a small log-structured merge: each
//! batch writes one run of its nodes' keys; [`FANOUT`] runs of a level are
//! merged into one of the next. A run is pages of at most [`PAGE_BYTES`]
//! (rows of their own) and the first key of each page (its fences); a
//! lookup reads every run's fences (a few dozen runs), binary-searches them
//! and reads the one page (rarely two) that can hold the key. An entry is
//! a 32-bit key (30 bits of a name's hash, or of a pid or an execution's
//! first node, tagged) and a node id, both as varint steps from the
//! page's previous entry (about 2.5 bytes an entry, 10 at fixed width
//! before schema version 5); lookups read the candidates' blocks and keep only the
//! nodes that really match. A process is keyed by name and pid at the start
//! of its execution, its later versions by the execution.

pub use crate::blocks::{block_of, BLOCK_NODES, BLOCK_SHIFT};
use crate::blocks::{slot_of, SEQ_BITS, SEQ_MASK};
use crate::varint;
use anyhow::{Context, Result};
use rusqlite::{params, Connection, OptionalExtension};

/// Blocks are compressed with zstd at this level (see docs/store.md).
const BLOCK_ZSTD_LEVEL: i32 = 1;
/// Runs of one level merged into one run of the next.
pub const FANOUT: usize = 8;
/// Runs of this level are not merged further (keeps every run a few
/// hundred MiB at most, under SQLite's blob limit).
const TOP_LEVEL: i64 = 3;
/// Bytes of a page of a run at most: a page row stays within one 4 KiB
/// database page, so reading it never walks an overflow chain (reading a
/// run stored as one blob at a random offset walked its chain from the
/// start: the key lookup of a path took ~10 ms at LPM scale). Smaller in
/// the unit tests, so that their keys span many pages.
#[cfg(not(test))]
const PAGE_BYTES: usize = 4000;
#[cfg(test)]
const PAGE_BYTES: usize = 200;
/// The most bytes one entry takes (two varints).
const ENTRY_MAX: usize = 5 + 10;
/// A page's id is `run << PAGE_BITS | page number`.
const PAGE_BITS: u32 = 24;

/// One node as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeRow {
    pub node: i64,
    pub kind: i64,
    pub boot: i64,
    pub name: String,
    pub version: i64,
    pub pid: Option<i64>,
    pub exec: Option<i64>,
    pub time_ns: i64,
    pub event_id: i64,
    pub attrs: Option<String>,
}

fn get_bytes<'a>(buf: &'a [u8], pos: &mut usize, n: usize) -> Result<&'a [u8]> {
    let b = buf.get(*pos..*pos + n).context("node block truncated")?;
    *pos += n;
    Ok(b)
}

/// A zstd compressor and decompressor kept across blocks (a fresh context
/// per block cost more than compressing it: allocating and zeroing its tables).
pub struct Codec {
    zc: zstd::bulk::Compressor<'static>,
    zd: zstd::bulk::Decompressor<'static>,
    /// The last block decompressed, and the name being front-decoded.
    plain: Vec<u8>,
    name: String,
}

impl Codec {
    pub fn new() -> Result<Self> {
        Ok(Self {
            zc: zstd::bulk::Compressor::new(BLOCK_ZSTD_LEVEL)
                .context("creating a zstd compressor")?,
            zd: zstd::bulk::Decompressor::new().context("creating a zstd decompressor")?,
            plain: Vec::new(),
            name: String::new(),
        })
    }
}

/// Encodes one block's slots (`None`: no node with that id).
fn encode_block(codec: &mut Codec, slots: &[Option<NodeRow>]) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(64 * slots.len());
    let (mut time, mut seq) = (0i64, 0u64);
    let mut prev_name: &str = "";
    for slot in slots {
        let Some(n) = slot else {
            out.push(0);
            continue;
        };
        varint::put(&mut out, n.kind as u64);
        varint::put(&mut out, n.boot as u64);
        varint::put(&mut out, varint::zigzag(n.version));
        varint::put(&mut out, n.pid.map_or(0, |p| p as u64 + 1));
        varint::put(
            &mut out,
            n.exec
                .map_or(0, |e| varint::zigzag(n.node.wrapping_sub(e)) + 1),
        );
        varint::put(&mut out, varint::zigzag(n.time_ns.wrapping_sub(time)));
        let id = n.event_id as u64;
        varint::put(&mut out, id >> SEQ_BITS);
        varint::put(
            &mut out,
            varint::zigzag((id & SEQ_MASK).wrapping_sub(seq) as i64),
        );
        let shared = n
            .name
            .bytes()
            .zip(prev_name.bytes())
            .take_while(|(a, b)| a == b)
            .count();
        // Never split a UTF-8 sequence: the suffix must be valid text on its own.
        let shared = (0..=shared)
            .rev()
            .find(|i| n.name.is_char_boundary(*i))
            .unwrap_or(0);
        varint::put(&mut out, shared as u64);
        varint::put(&mut out, (n.name.len() - shared) as u64);
        out.extend_from_slice(&n.name.as_bytes()[shared..]);
        match &n.attrs {
            Some(a) => {
                varint::put(&mut out, a.len() as u64 + 1);
                out.extend_from_slice(a.as_bytes());
            }
            None => out.push(0),
        }
        (time, seq, prev_name) = (n.time_ns, id & SEQ_MASK, &n.name);
    }
    let mut block = Vec::with_capacity(out.len() / 3 + 16);
    if BLOCK_ZSTD_LEVEL > 0 {
        block.push(1);
        varint::put(&mut block, out.len() as u64);
        block.extend_from_slice(
            &codec
                .zc
                .compress(&out)
                .context("compressing a node block")?,
        );
    } else {
        block.push(0);
        block.extend_from_slice(&out);
    }
    Ok(block)
}

/// All slots of a block, for [`decode_block`].
const ALL: u64 = u64::MAX;

/// Decodes a stored block into its slots; only the slots whose bit is set in
/// `want` are built (the others are `None`, and cost no allocation).
fn decode_block(
    codec: &mut Codec,
    block_id: i64,
    block: &[u8],
    want: u64,
) -> Result<Vec<Option<NodeRow>>> {
    let (&how, body) = block.split_first().context("empty node block")?;
    let buf: &[u8] = match how {
        0 => body,
        1 => {
            let mut pos = 0;
            let len = varint::get(body, &mut pos)? as usize;
            codec.plain.clear();
            codec.plain.reserve(len);
            codec
                .zd
                .decompress_to_buffer(&body[pos..], &mut codec.plain)
                .context("decompressing a node block")?;
            &codec.plain
        }
        other => anyhow::bail!("node block {block_id}: unknown encoding {other}"),
    };
    let mut slots = Vec::with_capacity(BLOCK_NODES);
    let (mut pos, mut time, mut seq) = (0usize, 0i64, 0u64);
    let prev_name = &mut codec.name;
    prev_name.clear();
    for i in 0..BLOCK_NODES {
        if want >> i == 0 {
            break;
        }
        let kind = varint::get(buf, &mut pos)? as i64;
        if kind == 0 {
            slots.push(None);
            continue;
        }
        let node = (block_id << BLOCK_SHIFT) + i as i64;
        let boot = varint::get(buf, &mut pos)? as i64;
        let version = varint::unzigzag(varint::get(buf, &mut pos)?);
        let pid = varint::get(buf, &mut pos)?.checked_sub(1).map(|p| p as i64);
        let exec = varint::get(buf, &mut pos)?
            .checked_sub(1)
            .map(|e| node.wrapping_sub(varint::unzigzag(e)));
        time = time.wrapping_add(varint::unzigzag(varint::get(buf, &mut pos)?));
        let cpu = varint::get(buf, &mut pos)?;
        seq = seq.wrapping_add(varint::unzigzag(varint::get(buf, &mut pos)?) as u64) & SEQ_MASK;
        let shared = varint::get(buf, &mut pos)? as usize;
        let len = varint::get(buf, &mut pos)? as usize;
        let suffix = std::str::from_utf8(get_bytes(buf, &mut pos, len)?)
            .context("node name is not UTF-8")?;
        anyhow::ensure!(
            prev_name.is_char_boundary(shared) && shared <= prev_name.len(),
            "node block: bad name prefix"
        );
        prev_name.truncate(shared);
        prev_name.push_str(suffix);
        let attrs = match varint::get(buf, &mut pos)? as usize {
            0 => None,
            n => Some(
                std::str::from_utf8(get_bytes(buf, &mut pos, n - 1)?)
                    .context("attributes are not UTF-8")?,
            ),
        };
        if want >> i & 1 == 0 {
            slots.push(None);
            continue;
        }
        let (name, attrs) = (prev_name.clone(), attrs.map(str::to_owned));
        slots.push(Some(NodeRow {
            node,
            kind,
            boot,
            name,
            version,
            pid,
            exec,
            time_ns: time,
            event_id: (cpu << SEQ_BITS | seq) as i64,
            attrs,
        }));
    }
    Ok(slots)
}

/// A stable 64-bit hash (FNV-1a) for the key index: the same in every run.
fn fnv(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for b in *p {
            h = (h ^ *b as u64).wrapping_mul(0x0000_0100_0000_01b3);
        }
        h = (h ^ 0xff).wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Keys are 32 bits: the top two say what the rest is. Every lookup checks
/// the candidates' rows, so a key shared by several names, pids or
/// executions costs a block read, never a wrong answer.
const KEY_VALUE: u32 = (1 << 30) - 1;

/// The key of a name of a kind (top two bits 00): 30 bits of its hash.
pub fn name_key(kind: i64, name: &str) -> u32 {
    (fnv(&[&[kind as u8], name.as_bytes()]) >> 34) as u32
}

/// The key of a pid (top bits 01).
pub fn pid_key(pid: i64) -> u32 {
    1 << 30 | (pid as u32 & KEY_VALUE)
}

/// The key of an execution (top bits 10): its first node's id, modulo 2^30.
pub fn exec_key(exec: i64) -> u32 {
    2 << 30 | (exec as u32 & KEY_VALUE)
}

/// The keys a node is found by. A process is found by name and pid at the
/// start of its execution (`exec == node`); its later versions only by
/// their execution (queries reach them from the start).
fn keys_of(n: &NodeRow, out: &mut Vec<(u32, i64)>) {
    match n.exec {
        Some(e) if e != n.node => out.push((exec_key(e), n.node)),
        _ => {
            out.push((name_key(n.kind, &n.name), n.node));
            if let Some(p) = n.pid {
                out.push((pid_key(p), n.node));
            }
        }
    }
}

/// Appends entry `(k, n)` of a page to `out`: the key's step from the
/// previous entry's key (the first entry's from 0) and `zigzag` of the
/// node's step from the previous entry's node, as varints. A run is sorted
/// by key, so the steps are small (a run of N name hashes spreads them
/// 2^30 / N apart), and pid and execution keys of a batch are near each
/// other and their nodes too: 2.2 bytes an entry against 10 at fixed width.
fn put_entry(out: &mut Vec<u8>, prev: &mut (u32, i64), (k, n): (u32, i64)) {
    varint::put(out, u64::from(k.wrapping_sub(prev.0)));
    varint::put(out, varint::zigzag(n.wrapping_sub(prev.1)));
    *prev = (k, n);
}

/// Writes a sorted run: its pages of at most [`PAGE_BYTES`], then its row
/// with the first key of every page (the fences).
fn put_run(db: &Connection, level: i64, keys: &[(u32, i64)]) -> Result<()> {
    db.prepare_cached("INSERT INTO node_key_runs(level, fences) VALUES(?1, x'')")?
        .execute([level])?;
    let run = db.last_insert_rowid();
    anyhow::ensure!(run < 1 << (62 - PAGE_BITS), "too many key runs");
    let mut fences = Vec::new();
    let mut put = db.prepare_cached("INSERT INTO node_key_pages(page, data) VALUES(?1, ?2)")?;
    let (mut page, mut prev, mut number) = (Vec::with_capacity(PAGE_BYTES), (0u32, 0i64), 0i64);
    for (i, &entry) in keys.iter().enumerate() {
        if page.is_empty() {
            fences.extend_from_slice(&entry.0.to_le_bytes());
            prev = (0, 0);
        }
        put_entry(&mut page, &mut prev, entry);
        if page.len() + ENTRY_MAX > PAGE_BYTES || i + 1 == keys.len() {
            anyhow::ensure!(
                number < 1 << PAGE_BITS,
                "a key run of more than 2^{PAGE_BITS} pages"
            );
            put.execute(params![run << PAGE_BITS | number, page])?;
            (number, page) = (number + 1, Vec::with_capacity(PAGE_BYTES));
        }
    }
    db.prepare_cached("UPDATE node_key_runs SET fences = ?2 WHERE run = ?1")?
        .execute(params![run, fences])?;
    Ok(())
}

/// A page's entries, in order.
fn decode_page(data: &[u8], out: &mut Vec<(u32, i64)>) -> Result<()> {
    let (mut pos, mut prev) = (0, (0u32, 0i64));
    while pos < data.len() {
        let step = varint::get(data, &mut pos)?;
        let k = u32::try_from(u64::from(prev.0) + step).context("key page: key out of range")?;
        let n = prev
            .1
            .wrapping_add(varint::unzigzag(varint::get(data, &mut pos)?));
        out.push((k, n));
        prev = (k, n);
    }
    Ok(())
}

/// Writes a batch's new nodes (ascending ids) into their blocks and their
/// keys as a new run, then merges full levels. Call inside the batch's transaction.
pub fn write_pending(db: &Connection, codec: &mut Codec, pending: &mut Vec<NodeRow>) -> Result<()> {
    if pending.is_empty() {
        return Ok(());
    }
    let mut get = db.prepare_cached("SELECT data FROM node_blocks WHERE block = ?1")?;
    let mut put =
        db.prepare_cached("INSERT OR REPLACE INTO node_blocks(block, data) VALUES(?1, ?2)")?;
    let mut keys = Vec::with_capacity(pending.len() * 2);
    let mut rest = &pending[..];
    while let Some(first) = rest.first() {
        let block_id = block_of(first.node);
        let n = rest
            .iter()
            .take_while(|r| block_of(r.node) == block_id)
            .count();
        let (these, after) = rest.split_at(n);
        rest = after;
        let stored: Option<Vec<u8>> = if slot_of(first.node) == 0 {
            None
        } else {
            get.query_row([block_id], |r| r.get(0)).optional()?
        };
        let mut slots = match stored {
            Some(b) => decode_block(codec, block_id, &b, ALL)?,
            None => vec![None; BLOCK_NODES],
        };
        for r in these {
            keys_of(r, &mut keys);
            slots[slot_of(r.node)] = Some(r.clone());
        }
        put.execute(params![block_id, encode_block(codec, &slots)?])?;
    }
    pending.clear();
    keys.sort_unstable();
    put_run(db, 0, &keys)?;
    for level in 0..TOP_LEVEL {
        let runs: Vec<i64> = db
            .prepare_cached("SELECT run FROM node_key_runs WHERE level = ?1 ORDER BY run")?
            .query_map([level], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        if runs.len() < FANOUT {
            break;
        }
        let mut merged: Vec<(u32, i64)> = Vec::new();
        for run in &runs {
            let mut st =
                db.prepare_cached("SELECT data FROM node_key_pages WHERE page BETWEEN ?1 AND ?2")?;
            let mut rows = st.query(params![
                run << PAGE_BITS,
                (run << PAGE_BITS) | ((1 << PAGE_BITS) - 1)
            ])?;
            while let Some(r) = rows.next()? {
                decode_page(
                    r.get_ref(0)?.as_blob().context("key page is not a blob")?,
                    &mut merged,
                )?;
            }
            db.prepare_cached("DELETE FROM node_key_pages WHERE page BETWEEN ?1 AND ?2")?
                .execute(params![
                    run << PAGE_BITS,
                    (run << PAGE_BITS) | ((1 << PAGE_BITS) - 1)
                ])?;
            db.prepare_cached("DELETE FROM node_key_runs WHERE run = ?1")?
                .execute([run])?;
        }
        merged.sort_unstable();
        put_run(db, level + 1, &merged)?;
    }
    Ok(())
}

/// The next node id of a store (1 for an empty one).
pub fn next_node(db: &Connection) -> Result<i64> {
    let last: Option<(i64, Vec<u8>)> = db
        .query_row(
            "SELECT block, data FROM node_blocks ORDER BY block DESC LIMIT 1",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()?;
    Ok(match last {
        None => 1,
        Some((b, data)) => decode_block(&mut Codec::new()?, b, &data, ALL)?
            .iter()
            .flatten()
            .map(|n| n.node + 1)
            .max()
            .unwrap_or(b << BLOCK_SHIFT),
    })
}

/// Reads node rows, keeping the block read last decoded (an answer's nodes
/// come in id order, and neighbours share blocks).
pub struct NodeReader<'c> {
    conn: &'c Connection,
    codec: Option<Codec>,
    block: Option<(i64, Vec<Option<NodeRow>>)>,
}

impl<'c> NodeReader<'c> {
    pub fn new(conn: &'c Connection) -> Self {
        Self {
            conn,
            codec: None,
            block: None,
        }
    }

    /// The node with id `node`, if it exists.
    pub fn get(&mut self, node: i64) -> Result<Option<&NodeRow>> {
        let b = block_of(node);
        if self.block.as_ref().is_none_or(|(id, _)| *id != b) {
            let data: Option<Vec<u8>> = self
                .conn
                .prepare_cached("SELECT data FROM node_blocks WHERE block = ?1")?
                .query_row([b], |r| r.get(0))
                .optional()?;
            let slots = match data {
                Some(d) => {
                    if self.codec.is_none() {
                        self.codec = Some(Codec::new()?);
                    }
                    decode_block(self.codec.as_mut().expect("made above"), b, &d, ALL)?
                }
                None => Vec::new(),
            };
            self.block = Some((b, slots));
        }
        let slots = &self.block.as_ref().expect("loaded above").1;
        Ok(slots.get(slot_of(node)).and_then(Option::as_ref))
    }
}

/// One node's row.
pub fn get(conn: &Connection, node: i64) -> Result<Option<NodeRow>> {
    Ok(NodeReader::new(conn).get(node)?.cloned())
}

/// Every node with `key` in the key index (candidates: a name key may
/// collide), ascending, no repeats.
pub fn lookup(conn: &Connection, key: u32) -> Result<Vec<i64>> {
    let mut runs = conn.prepare_cached("SELECT run, fences FROM node_key_runs")?;
    let mut page = conn.prepare_cached("SELECT data FROM node_key_pages WHERE page = ?1")?;
    let (mut out, mut entries) = (Vec::new(), Vec::new());
    let mut rows = runs.query([])?;
    while let Some(r) = rows.next()? {
        let run: i64 = r.get(0)?;
        let fences: Vec<u32> = r
            .get_ref(1)?
            .as_blob()
            .context("key fences are not a blob")?
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes")))
            .collect();
        // The key's entries start in the last page whose first key is
        // below it (or in the first page whose first key is it).
        let mut p = fences.partition_point(|f| *f < key).saturating_sub(1);
        'pages: while p < fences.len() && fences[p] <= key {
            let mut data = page.query([run << PAGE_BITS | p as i64])?;
            let Some(d) = data.next()? else {
                anyhow::bail!("key run {run} lacks page {p}")
            };
            entries.clear();
            decode_page(
                d.get_ref(0)?.as_blob().context("key page is not a blob")?,
                &mut entries,
            )?;
            for &(k, node) in &entries {
                if k > key {
                    break 'pages;
                }
                if k == key {
                    out.push(node);
                }
            }
            p += 1;
        }
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// The nodes among `candidates` that pass `keep`, ascending.
pub fn rows_where(
    conn: &Connection,
    candidates: &[i64],
    keep: impl Fn(&NodeRow) -> bool,
) -> Result<Vec<NodeRow>> {
    let mut reader = NodeReader::new(conn);
    let mut out = Vec::new();
    for c in candidates {
        if let Some(r) = reader.get(*c)? {
            if keep(r) {
                out.push(r.clone());
            }
        }
    }
    Ok(out)
}

/// The rows of `ids` (ascending), each block read and decoded once and
/// only the wanted slots built. Ids with no node are left out.
pub fn rows(conn: &Connection, ids: &[i64]) -> Result<Vec<NodeRow>> {
    let mut get = conn.prepare_cached("SELECT data FROM node_blocks WHERE block = ?1")?;
    let mut codec = Codec::new()?;
    let mut out = Vec::with_capacity(ids.len());
    let mut rest = ids;
    while let Some(&first) = rest.first() {
        let b = block_of(first);
        let n = rest.iter().take_while(|id| block_of(**id) == b).count();
        let want = rest[..n].iter().fold(0u64, |m, id| m | 1 << slot_of(*id));
        rest = &rest[n..];
        let mut rows = get.query([b])?;
        if let Some(r) = rows.next()? {
            let data = r
                .get_ref(0)?
                .as_blob()
                .context("node block is not a blob")?;
            out.extend(
                decode_block(&mut codec, b, data, want)?
                    .into_iter()
                    .flatten(),
            );
        }
    }
    Ok(out)
}

/// Calls `f` with every node, ascending (tests and tools; reads everything).
pub fn for_each(conn: &Connection, mut f: impl FnMut(NodeRow)) -> Result<()> {
    let mut st = conn.prepare("SELECT block, data FROM node_blocks ORDER BY block")?;
    let mut rows = st.query([])?;
    let mut codec = Codec::new()?;
    while let Some(r) = rows.next()? {
        let b: i64 = r.get(0)?;
        let data = r
            .get_ref(1)?
            .as_blob()
            .context("node block is not a blob")?;
        decode_block(&mut codec, b, data, ALL)?
            .into_iter()
            .flatten()
            .for_each(&mut f);
    }
    Ok(())
}

/// Every node, ascending (tests and tools; reads the whole table).
pub fn all(conn: &Connection) -> Result<Vec<NodeRow>> {
    let mut out = Vec::new();
    for_each(conn, |r| out.push(r))?;
    Ok(out)
}

/// How many nodes the store holds (reads every block).
pub fn count(conn: &Connection) -> Result<i64> {
    let mut n = 0;
    for_each(conn, |_| n += 1)?;
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(node: i64, name: &str) -> NodeRow {
        NodeRow {
            node,
            kind: 1 + node % 5,
            boot: 1,
            name: name.into(),
            version: node % 3,
            pid: (node % 2 == 0).then_some(node * 7),
            exec: (node % 2 == 0).then_some(node - 3),
            time_ns: 1_700_000_000_000_000_000 - node * 1000,
            event_id: ((node % 16) << 48) | (node * 11),
            attrs: (node % 4 == 0).then(|| format!("{{\"n\":{node}}}")),
        }
    }

    #[test]
    fn blocks_round_trip_with_gaps_and_shared_prefixes() {
        let names = [
            "/usr/include/stdio.h",
            "/usr/include/stdlib.h",
            "é/ü",
            "é/ö",
            "",
            "[cc1]",
            "/usr/include/stdio.h",
        ];
        let mut slots = vec![None; BLOCK_NODES];
        for (i, name) in names.iter().enumerate() {
            slots[i * 3 + 1] = Some(row(5 * 64 + (i * 3 + 1) as i64, name));
        }
        let mut codec = Codec::new().unwrap();
        let b = encode_block(&mut codec, &slots).unwrap();
        assert_eq!(decode_block(&mut codec, 5, &b, ALL).unwrap(), slots);
        let some = decode_block(&mut codec, 5, &b, 1 << 4 | 1 << 7).unwrap();
        assert_eq!(some.len(), 8);
        for (i, s) in some.iter().enumerate() {
            assert_eq!(
                s.as_ref(),
                if i == 4 || i == 7 {
                    slots[i].as_ref()
                } else {
                    None
                },
                "slot {i}"
            );
        }
    }

    #[test]
    fn the_key_index_finds_every_node_across_merged_runs() {
        let dir = tempfile::tempdir().unwrap();
        let conn = crate::schema::open_rw(&dir.path().join("k.db")).unwrap();
        let mut next = 1;
        let mut codec = Codec::new().unwrap();
        // Enough batches to merge level 0 twice and leave runs on two levels.
        for batch in 0..(2 * FANOUT + 3) {
            let mut pending: Vec<NodeRow> = (0..(batch % 5 + 1) * 13)
                .map(|_| {
                    next += 1;
                    row(next - 1, &format!("/f/{}", (next - 1) % 17))
                })
                .collect();
            write_pending(&conn, &mut codec, &mut pending).unwrap();
        }
        // One batch whose keys span pages: 2,000 nodes of one name.
        let mut pending: Vec<NodeRow> = (0..2000)
            .map(|_| {
                next += 1;
                row(next - 1, "/same")
            })
            .collect();
        write_pending(&conn, &mut codec, &mut pending).unwrap();
        let all = all(&conn).unwrap();
        assert_eq!(all.len() as i64, next - 1);
        for kind in 1..=5 {
            let named = |n: &&NodeRow| {
                n.kind == kind && n.name == "/same" && n.exec.is_none_or(|e| e == n.node)
            };
            let want: Vec<i64> = all.iter().filter(named).map(|n| n.node).collect();
            // Two bytes an entry at least: the key spans pages.
            assert!(2 * want.len() > PAGE_BYTES, "{} nodes", want.len());
            let got: Vec<i64> = rows_where(
                &conn,
                &lookup(&conn, name_key(kind, "/same")).unwrap(),
                |n| named(&n),
            )
            .unwrap()
            .iter()
            .map(|n| n.node)
            .collect();
            assert_eq!(got, want, "kind {kind}");
        }
        assert_eq!(next_node(&conn).unwrap(), next);
        let levels: i64 = conn
            .query_row("SELECT COUNT(DISTINCT level) FROM node_key_runs", [], |r| {
                r.get(0)
            })
            .unwrap();
        assert!(levels >= 2, "{levels} levels");
        for probe in [1, 2, 17, 100, next - 1] {
            let r = get(&conn, probe).unwrap().unwrap();
            let named = |n: &&NodeRow| {
                n.kind == r.kind && n.name == r.name && n.exec.is_none_or(|e| e == n.node)
            };
            let want: Vec<i64> = all.iter().filter(named).map(|n| n.node).collect();
            let got: Vec<i64> = rows_where(
                &conn,
                &lookup(&conn, name_key(r.kind, &r.name)).unwrap(),
                |n| n.kind == r.kind && n.name == r.name,
            )
            .unwrap()
            .iter()
            .map(|n| n.node)
            .collect();
            assert_eq!(got, want, "name of {probe}");
            if let Some(p) = r.pid {
                let starts = |n: &&NodeRow| n.exec.is_none_or(|e| e == n.node);
                let want: Vec<i64> = all
                    .iter()
                    .filter(|n| n.pid == Some(p))
                    .filter(starts)
                    .map(|n| n.node)
                    .collect();
                assert_eq!(lookup(&conn, pid_key(p)).unwrap(), want, "pid of {probe}");
            }
            if let Some(e) = r.exec.filter(|e| *e != r.node) {
                let want: Vec<i64> = all
                    .iter()
                    .filter(|n| n.exec == Some(e) && n.node != e)
                    .map(|n| n.node)
                    .collect();
                assert_eq!(lookup(&conn, exec_key(e)).unwrap(), want, "exec of {probe}");
            }
        }
    }
}

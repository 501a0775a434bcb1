//! The raw lines of a batch as one column segment (docs/store.md, "Raw
//! events as column segments"): every kept line comes back byte for byte,
//! but a plain event line is not stored as text. It is cut into its
//! *skeleton* (the keys, punctuation, whitespace and literals, with a
//! marker where each string or number was) and its values; the skeleton is
//! kept once per segment as a *shape*, each value goes to the column of its
//! key path (`time_ns`, `comm`, `args.flags`, `argv[]`): integers as zigzag
//! varints of their difference from a prediction (the previous value of
//! the column; for `id`, `cpu` and `seq` the event's own id), strings as
//! their bytes, each ended by a 0 byte (zstd finds the repeats: interning
//! them per column measured larger and slower). A line the cutter does not
//! take (an escape or a 0 byte in a string, a control byte in a key,
//! deeper nesting, a shape too many) is kept whole, and so are loss
//! records and lines of unknown types.
//!
//! Events are kept in the order they were applied (time order), so times
//! differ by little; the event ids, which locate an event, are a column of
//! their own (CPU and the step from that CPU's previous sequence number).

use crate::blocks::{IdList, SEQ_BITS, SEQ_MASK};
use crate::graph::Map;
use crate::record::{Record, ShapePlan};
use crate::varint;
use anyhow::{bail, Context, Result};
use std::fmt::Write as _;

/// zstd level of a segment. Level 1: the columns are already small, and
/// its fast strategy compressed the raw lines smaller than level 3 did.
const ZSTD_LEVEL: i32 = 1;
/// Shapes one segment holds at most; lines of further shapes stay whole (a
/// stream that orders every line's fields its own way would otherwise grow
/// the shape table without bound).
const MAX_SHAPES: usize = 4096;
/// Edges the shape tree of one segment holds at most; a line whose new
/// shape would pass it stays whole. Shapes share their common prefixes
/// (an `argv` one longer adds one edge), so only long lines that share
/// nothing (fields in their own order each) reach it; it bounds the tree
/// at ~50 bytes an edge.
const MAX_TREE_EDGES: usize = 1 << 18;
/// Emptied column buffers kept for the next registry.
const MAX_SPARE: usize = 256;
/// Bytes of the shape table past which the registry is started afresh at
/// a seal (every segment writes the table; the collector's few dozen
/// shapes take a few KiB).
const MAX_TABLE_BYTES: usize = 64 << 10;
/// Nesting the cutter follows (`args`, `argv`); deeper lines stay whole.
const MAX_DEPTH: u32 = 8;

/// Markers of the values in a skeleton. Control bytes: JSON allows none
/// outside strings but the whitespace ones, and the cutter refuses keys
/// holding any, so a skeleton's markers are exactly its values.
const INT: u8 = 1;
const STR: u8 = 2;
/// A number that is not a canonical integer of 64 bits (a fraction, an
/// exponent, `-0`, a huge one): kept as its text.
const NUM: u8 = 3;

/// What an integer is predicted from.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Pred {
    /// The column's previous value (times, pids, sizes).
    Prev = 0,
    /// The event's id (`id`), its CPU (`cpu`) or its sequence number (`seq`).
    EventId = 1,
    Cpu = 2,
    Seq = 3,
}

impl Pred {
    fn of(path: &[u8], marker: u8) -> Pred {
        match (path, marker) {
            (b"id", INT) => Pred::EventId,
            (b"cpu", INT) => Pred::Cpu,
            (b"seq", INT) => Pred::Seq,
            _ => Pred::Prev,
        }
    }

    fn from_u8(v: u8) -> Result<Pred> {
        Ok(match v {
            0 => Pred::Prev,
            1 => Pred::EventId,
            2 => Pred::Cpu,
            3 => Pred::Seq,
            _ => bail!("raw segment: unknown prediction {v} (the store is damaged)"),
        })
    }

    fn value(self, prev: i64, id: u64) -> i64 {
        match self {
            Pred::Prev => prev,
            Pred::EventId => id as i64,
            Pred::Cpu => (id >> SEQ_BITS) as i64,
            Pred::Seq => (id & SEQ_MASK) as i64,
        }
    }
}

#[derive(Clone, Copy, Debug)]
pub(crate) enum Val {
    Int(i64),
    /// A string's bytes (between its quotes) or a number's text: a range of the line.
    Text(u32, u32),
}

/// A line cut into skeleton and values.
#[derive(Default)]
struct Cutter {
    skel: Vec<u8>,
    vals: Vec<Val>,
    /// With `track`, the key path of each value (only when a shape is new).
    track: bool,
    path: Vec<u8>,
    paths: Vec<Vec<u8>>,
}

struct Pos<'a> {
    b: &'a [u8],
    i: usize,
    /// Start of the skeleton text not yet copied.
    gap: usize,
}

impl Pos<'_> {
    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.b.get(self.i) {
            self.i += 1;
        }
    }

    fn at(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    fn lit(&mut self, word: &[u8]) -> Option<()> {
        self.b
            .get(self.i..self.i + word.len())
            .filter(|w| *w == word)?;
        self.i += word.len();
        Some(())
    }
}

/// `text` as an integer if printing that integer gives `text` back.
fn canonical_int(text: &[u8]) -> Option<i64> {
    match text.split_first() {
        Some((b'-', rest)) => int_value(true, rest),
        _ => int_value(false, text),
    }
}

/// The integer of an optional minus and ASCII `digits`, if it is a
/// canonical one (no leading zero, no `-0`) of 64 bits.
fn int_value(neg: bool, digits: &[u8]) -> Option<i64> {
    // Past 19 digits nothing fits an i64; up to 19 nothing overflows a u64.
    if digits.is_empty() || digits.len() > 19 || (digits[0] == b'0' && (digits.len() > 1 || neg)) {
        return None;
    }
    if !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let v = digits.iter().fold(0u64, |v, &c| v * 10 + (c - b'0') as u64);
    if neg {
        (v <= i64::MAX as u64 + 1).then(|| (v as i64).wrapping_neg())
    } else {
        i64::try_from(v).ok()
    }
}

/// The closing quote of a string whose text starts at `start`: the next
/// quote. None if a backslash (an escape: the line is kept whole, as the
/// fast-path parser leaves it to serde) or a 0 byte (the text columns'
/// terminator) comes first.
fn string_end(b: &[u8], start: usize) -> Option<usize> {
    let n = memchr::memchr3(b'"', b'\\', 0, b.get(start..)?)?;
    (b[start + n] == b'"').then_some(start + n)
}

/// Whether `c` continues a number: the cutter takes a number's text up to
/// the first other byte, and the shape tree must end it at the same place.
fn in_number(c: u8) -> bool {
    matches!(c, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E')
}

/// Reads a value of kind `marker` at `at` of a plain line, as the cutter
/// would: the value and where it ends.
fn read_value(b: &[u8], at: usize, marker: u8) -> Option<(Val, usize)> {
    match marker {
        STR => {
            let end = string_end(b, at)?;
            Some((Val::Text(at as u32, end as u32), end))
        }
        INT => {
            // One pass over the digits, with `int_value`'s rules: at most 19
            // digits (no overflow of a u64), no leading zero, no `-0`, fits an i64.
            let neg = b.get(at) == Some(&b'-');
            let first = at + neg as usize;
            let (mut end, mut v) = (first, 0u64);
            while let Some(&c) = b.get(end).filter(|c| c.is_ascii_digit()) {
                if end - first == 19 {
                    return None;
                }
                v = v * 10 + (c - b'0') as u64;
                end += 1;
            }
            let n = end - first;
            if n == 0
                || (b[first] == b'0' && (n > 1 || neg))
                || b.get(end).is_some_and(|&c| in_number(c))
            {
                return None;
            }
            let v = if neg {
                (v <= i64::MAX as u64 + 1).then(|| (v as i64).wrapping_neg())?
            } else {
                i64::try_from(v).ok()?
            };
            Some((Val::Int(v), end))
        }
        _ => {
            let n = b
                .get(at..)?
                .iter()
                .position(|&c| !in_number(c))
                .unwrap_or(b.len() - at);
            let end = at + n;
            (n > 0 && canonical_int(&b[at..end]).is_none())
                .then_some((Val::Text(at as u32, end as u32), end))
        }
    }
}

impl Cutter {
    /// Cuts `b`; false if it is not a line the columns take.
    fn cut(&mut self, b: &[u8], track: bool) -> bool {
        self.skel.clear();
        self.vals.clear();
        self.track = track;
        self.path.clear();
        self.paths.clear();
        let mut p = Pos { b, i: 0, gap: 0 };
        if self.value(&mut p, 0).is_none() {
            return false;
        }
        p.ws();
        if p.i != b.len() {
            return false;
        }
        self.skel.extend_from_slice(&b[p.gap..]);
        true
    }

    /// Ends the skeleton text before a value at `start`.
    fn mark(&mut self, p: &Pos, start: usize, marker: u8, v: Val) {
        self.skel.extend_from_slice(&p.b[p.gap..start]);
        self.skel.push(marker);
        self.vals.push(v);
        if self.track {
            self.paths.push(self.path.clone());
        }
    }

    fn value(&mut self, p: &mut Pos, depth: u32) -> Option<()> {
        p.ws();
        match p.at()? {
            b'"' => {
                let start = p.i + 1;
                let end = string_end(p.b, start)?;
                self.mark(p, start, STR, Val::Text(start as u32, end as u32));
                p.gap = end;
                p.i = end + 1;
            }
            b'{' => {
                p.i += 1;
                p.ws();
                if p.at()? == b'}' {
                    p.i += 1;
                    return Some(());
                }
                if depth >= MAX_DEPTH {
                    return None;
                }
                loop {
                    p.ws();
                    if p.at()? != b'"' {
                        return None;
                    }
                    let key = p.i + 1;
                    let key_end = string_end(p.b, key)?;
                    // A control byte in a key would pass for a value's
                    // marker in the skeleton: such a line stays whole.
                    if p.b[key..key_end].iter().any(|&c| c < 0x20) {
                        return None;
                    }
                    p.i = key_end + 1;
                    p.ws();
                    if p.at()? != b':' {
                        return None;
                    }
                    p.i += 1;
                    let outer = self.path.len();
                    if self.track {
                        if outer > 0 {
                            self.path.push(b'.');
                        }
                        self.path.extend_from_slice(&p.b[key..key_end]);
                    }
                    self.value(p, depth + 1)?;
                    self.path.truncate(outer);
                    p.ws();
                    match p.at()? {
                        b',' => p.i += 1,
                        b'}' => {
                            p.i += 1;
                            return Some(());
                        }
                        _ => return None,
                    }
                }
            }
            b'[' => {
                p.i += 1;
                p.ws();
                if p.at()? == b']' {
                    p.i += 1;
                    return Some(());
                }
                if depth >= MAX_DEPTH {
                    return None;
                }
                let outer = self.path.len();
                if self.track {
                    self.path.extend_from_slice(b"[]");
                }
                loop {
                    self.value(p, depth + 1)?;
                    p.ws();
                    match p.at()? {
                        b',' => p.i += 1,
                        b']' => {
                            p.i += 1;
                            self.path.truncate(outer);
                            return Some(());
                        }
                        _ => return None,
                    }
                }
            }
            b'-' | b'0'..=b'9' => {
                let start = p.i;
                while p.at().is_some_and(in_number) {
                    p.i += 1;
                }
                let v = match canonical_int(&p.b[start..p.i]) {
                    Some(v) => (INT, Val::Int(v)),
                    None => (NUM, Val::Text(start as u32, p.i as u32)),
                };
                self.mark(p, start, v.0, v.1);
                p.gap = p.i;
            }
            b't' => p.lit(b"true")?,
            b'f' => p.lit(b"false")?,
            b'n' => p.lit(b"null")?,
            _ => return None,
        }
        Some(())
    }
}

/// One column of a segment being built.
struct Column {
    marker: u8,
    pred: Pred,
    prev: i64,
    /// Integers: the residuals as varints. Texts: the bytes of each, ended by a 0 byte.
    data: Vec<u8>,
}

/// A segment's shapes as a tree: a shape is a path from the root, one edge
/// per value (the skeleton text before it, its kind and column), ending in
/// the text after the last value. A line finds its shape by walking it and
/// comparing text in place, with no skeleton built and nothing hashed.
#[derive(Default)]
struct ShapeNode {
    edges: Vec<ShapeEdge>,
    /// The last gap of the shapes ending here, and their numbers.
    ends: Vec<(Box<[u8]>, u32)>,
}

struct ShapeEdge {
    gap: Box<[u8]>,
    marker: u8,
    column: u32,
    to: u32,
}

/// An event's line as held until the event is applied: cut into its shape
/// and values when it was read (while the line is in cache), or whole.
#[derive(Debug)]
pub enum HeldLine {
    /// A line the columns do not take (or taken when the shapes were full): its text.
    Whole(Box<str>),
    /// Its shape in the builder's registry and its values in order, packed:
    /// an integer as the zigzag varint of its value, a text as its length and bytes.
    Cut { shape: u32, vals: Box<[u8]> },
}

impl Default for HeldLine {
    fn default() -> Self {
        HeldLine::Whole("".into())
    }
}

/// The open batch's raw lines, built into a segment at commit.
///
/// The shapes and their columns (the registry: tree, table, columns by key
/// path) outlive a segment: a line is cut when it is read, and its event
/// may be applied, and its values kept, a segment later (the reorder
/// window holds events across commits). Every segment writes the whole
/// table, so a registry past its bounds is started afresh at a seal
/// ([`SegmentBuilder::renew_if_full`]), the held lines re-cut.
pub struct SegmentBuilder {
    cutter: Cutter,
    tree: Vec<ShapeNode>,
    /// The values of the line being cut, each with its column.
    vals: Vec<(u32, Val)>,
    /// Skeleton → shape number (from 1; 0 marks a line kept whole), for
    /// the lines the tree's walk does not place.
    shapes: Map<Vec<u8>, u32>,
    /// Per shape, the column of each of its values.
    shape_columns: Vec<Vec<u32>>,
    /// Per shape, its gaps (the text before each value, then the last): to
    /// re-create a held line when the registry is renewed.
    shape_gaps: Vec<Vec<Box<[u8]>>>,
    /// Per shape, how the fast-path parser reads its lines (None: it is not
    /// read by shape), for [`SegmentBuilder::read_by_shape`].
    shape_plans: Vec<Option<ShapePlan>>,
    /// The shapes as written: per shape the values, each a gap and its column, then the last gap.
    shape_table: Vec<u8>,
    columns_by_path: Map<(Vec<u8>, u8), u32>,
    columns: Vec<Column>,
    /// A line was kept whole because the registry was at its bounds.
    full: bool,
    /// Per event: its shape, boot (difference from the previous) and id.
    slot_shapes: Vec<u8>,
    slot_boots: Vec<u8>,
    slot_ids: Vec<u8>,
    last_boot: i64,
    /// The coding of `slot_ids`.
    ids: IdList,
    /// Events kept whole (shape 0), then the other kept lines, each behind
    /// its length (a line handed to `push_line` may hold a newline).
    whole: Vec<u8>,
    other: Vec<u8>,
    other_lines: i64,
    /// (boot, id) of every event, for the runs of the event ranges.
    events: Vec<(i64, i64)>,
    /// One zstd context for all segments (made at the first seal).
    zstd: Option<zstd::bulk::Compressor<'static>>,
    /// Emptied column buffers of a renewed registry, and the segment's
    /// plain bytes, reused: growing fresh ones cost page faults and copies.
    spare: Vec<Vec<u8>>,
    plain: Vec<u8>,
    /// Scratch of `cut`.
    packed: Vec<u8>,
}

/// A run of consecutive event ids in a segment: (boot, first id, last id).
pub type Run = (i64, i64, i64);

impl Default for SegmentBuilder {
    fn default() -> Self {
        SegmentBuilder {
            cutter: Cutter::default(),
            tree: vec![ShapeNode::default()],
            vals: Vec::new(),
            shapes: Map::default(),
            shape_columns: Vec::new(),
            shape_gaps: Vec::new(),
            shape_plans: Vec::new(),
            shape_table: Vec::new(),
            columns_by_path: Map::default(),
            columns: Vec::new(),
            full: false,
            slot_shapes: Vec::new(),
            slot_boots: Vec::new(),
            slot_ids: Vec::new(),
            last_boot: 0,
            ids: IdList::default(),
            whole: Vec::new(),
            other: Vec::new(),
            other_lines: 0,
            events: Vec::new(),
            zstd: None,
            spare: Vec::new(),
            plain: Vec::new(),
            packed: Vec::new(),
        }
    }
}

impl SegmentBuilder {
    /// Keeps an event's line (applied, new to the store).
    pub fn keep_event(&mut self, boot: i64, id: u64, line: &str) {
        let held = self.cut(line);
        self.keep_held(boot, id, &held);
    }

    /// Cuts an event's line into its shape and values (registering a new
    /// shape), to be kept by [`SegmentBuilder::keep_held`] when the event is applied.
    pub fn cut(&mut self, line: &str) -> HeldLine {
        let shape = self.shape_of(line.as_bytes());
        if shape == 0 {
            return HeldLine::Whole(line.into());
        }
        self.pack(line, shape)
    }

    /// A line of a registered shape read by that shape's plan (record.rs,
    /// shapeline.rs) from the values its walk found, in one pass over the
    /// line: its record (as [`crate::record::parse_line`] reads it) and, for
    /// an event, its held line (as [`SegmentBuilder::cut`] cuts it). None
    /// for a line of a new shape, of a shape without a plan, or that the
    /// fast-path parser would not take: parse and cut it as those do.
    pub fn read_by_shape<'l>(
        &mut self,
        line: &'l str,
    ) -> Option<(Result<Record<'l>, String>, Option<HeldLine>)> {
        let shape = self.walk_tree(line.as_bytes())?;
        let plan = self.shape_plans[shape as usize - 1].as_ref()?;
        let rec = crate::record::parse_by_shape(plan, line, &self.vals)?;
        let held = matches!(rec, Ok(Record::Event(..))).then(|| self.pack(line, shape));
        Some((rec, held))
    }

    /// The held line of `line`, of `shape`, its values in `vals`.
    fn pack(&mut self, line: &str, shape: u32) -> HeldLine {
        let b = line.as_bytes();
        self.packed.clear();
        for &(_, v) in &self.vals {
            match v {
                Val::Int(v) => varint::put(&mut self.packed, varint::zigzag(v)),
                Val::Text(a, e) => put_bytes(&mut self.packed, &b[a as usize..e as usize]),
            }
        }
        HeldLine::Cut {
            shape,
            vals: self.packed.as_slice().into(),
        }
    }

    /// Keeps an applied event's held line.
    pub fn keep_held(&mut self, boot: i64, id: u64, held: &HeldLine) {
        let shape = match held {
            HeldLine::Whole(_) => 0,
            HeldLine::Cut { shape, .. } => *shape,
        };
        varint::put(&mut self.slot_shapes, shape as u64);
        varint::put(
            &mut self.slot_boots,
            varint::zigzag(boot.wrapping_sub(self.last_boot)),
        );
        self.last_boot = boot;
        self.ids.put(&mut self.slot_ids, id);
        self.events.push((boot, id as i64));
        let vals = match held {
            HeldLine::Whole(line) => {
                put_bytes(&mut self.whole, line.as_bytes());
                return;
            }
            HeldLine::Cut { vals, .. } => vals,
        };
        let mut pos = 0;
        for &c in &self.shape_columns[shape as usize - 1] {
            let col = &mut self.columns[c as usize];
            // Packed by `cut` from a shape of this registry: well formed.
            if col.marker == INT {
                let v = varint::unzigzag(varint::get(vals, &mut pos).expect("a held value"));
                let pred = col.pred.value(col.prev, id);
                varint::put(&mut col.data, varint::zigzag(v.wrapping_sub(pred)));
                col.prev = v;
            } else {
                let n = varint::get(vals, &mut pos).expect("a held value") as usize;
                col.data.extend_from_slice(&vals[pos..pos + n]);
                col.data.push(0);
                pos += n;
            }
        }
    }

    /// The text of a held line, re-created from its shape and values.
    fn recreate(&self, held: &HeldLine) -> Box<str> {
        let (shape, vals) = match held {
            HeldLine::Whole(line) => return line.clone(),
            HeldLine::Cut { shape, vals } => (*shape as usize, vals),
        };
        let mut out: Vec<u8> = Vec::with_capacity(vals.len() * 2 + 64);
        let gaps = &self.shape_gaps[shape - 1];
        let mut pos = 0;
        for (gap, &c) in gaps.iter().zip(&self.shape_columns[shape - 1]) {
            out.extend_from_slice(gap);
            if self.columns[c as usize].marker == INT {
                let v = varint::unzigzag(varint::get(vals, &mut pos).expect("a held value"));
                out.extend_from_slice(v.to_string().as_bytes());
            } else {
                let n = varint::get(vals, &mut pos).expect("a held value") as usize;
                out.extend_from_slice(&vals[pos..pos + n]);
                pos += n;
            }
        }
        out.extend_from_slice(&gaps[gaps.len() - 1]);
        String::from_utf8(out)
            .expect("a line re-created from UTF-8 pieces")
            .into_boxed_str()
    }

    /// After a seal: when the shape registry reached its bounds (a line was
    /// kept whole for them, or its table, written in every segment, grew
    /// past [`MAX_TABLE_BYTES`]), starts it afresh and cuts the lines still
    /// held (`held`: every event not applied yet) against the new one.
    pub fn renew_if_full<'a>(&mut self, held: impl Iterator<Item = &'a mut HeldLine>) {
        if !self.full && self.shape_table.len() <= MAX_TABLE_BYTES {
            return;
        }
        let mut held: Vec<&mut HeldLine> = held.collect();
        let texts: Vec<Box<str>> = held.iter().map(|h| self.recreate(h)).collect();
        self.reset_registry();
        for (h, text) in held.iter_mut().zip(texts) {
            **h = self.cut(&text);
        }
    }

    fn reset_registry(&mut self) {
        self.tree.clear();
        self.tree.push(ShapeNode::default());
        self.shapes.clear();
        self.shape_columns.clear();
        self.shape_gaps.clear();
        self.shape_plans.clear();
        self.shape_table.clear();
        self.columns_by_path.clear();
        for c in self.columns.drain(..) {
            // A stream of many shapes may make many columns: keep a few dozen.
            if self.spare.len() < MAX_SPARE {
                let mut data = c.data;
                data.clear();
                self.spare.push(data);
            }
        }
        self.full = false;
    }

    /// The shape of a line, its values in `vals`; 0 to keep the line whole.
    fn shape_of(&mut self, line: &[u8]) -> u32 {
        if let Some(s) = self.walk_tree(line) {
            return s;
        }
        // A new shape, or one the walk missed (it follows the first edge
        // that matches, and a line's text may match two): cut the line.
        if !self.cutter.cut(line, false) {
            return 0;
        }
        let s = match self.shapes.get(&self.cutter.skel[..]) {
            Some(&s) => s,
            None if self.shapes.len() >= MAX_SHAPES
                || self.tree.len() + self.cutter.vals.len() > MAX_TREE_EDGES =>
            {
                self.full = true;
                return 0;
            }
            None => self.register(line),
        };
        self.vals.clear();
        self.vals.extend(
            self.cutter
                .vals
                .iter()
                .zip(&self.shape_columns[s as usize - 1])
                .map(|(v, &c)| (c, *v)),
        );
        s
    }

    fn walk_tree(&mut self, line: &[u8]) -> Option<u32> {
        self.vals.clear();
        let (mut node, mut pos) = (0, 0);
        'node: loop {
            let n = &self.tree[node];
            let rest = &line[pos..];
            if let Some((_, s)) = n.ends.iter().find(|(gap, _)| **gap == *rest) {
                return Some(*s);
            }
            for e in &n.edges {
                if rest.starts_with(&e.gap) {
                    if let Some((v, end)) = read_value(line, pos + e.gap.len(), e.marker) {
                        self.vals.push((e.column, v));
                        (node, pos) = (e.to as usize, end);
                        continue 'node;
                    }
                }
            }
            return None;
        }
    }

    /// Registers the shape of a cut line: its columns (by key path), its
    /// entry in the shape table and its path in the tree.
    fn register(&mut self, line: &[u8]) -> u32 {
        self.cutter.cut(line, true);
        let s = self.shape_columns.len() as u32 + 1;
        let skel = &self.cutter.skel;
        let mut cols = Vec::with_capacity(self.cutter.vals.len());
        let mut gaps: Vec<Box<[u8]>> = Vec::with_capacity(self.cutter.vals.len() + 1);
        let (mut gap, mut node) = (0, 0);
        varint::put(&mut self.shape_table, self.cutter.vals.len() as u64);
        let markers = skel
            .iter()
            .enumerate()
            .filter(|(_, &c)| matches!(c, INT | STR | NUM));
        for ((at, &marker), path) in markers.zip(&self.cutter.paths) {
            let next = self.columns.len() as u32;
            let c = *self
                .columns_by_path
                .entry((path.clone(), marker))
                .or_insert(next);
            if c == next {
                let data = self.spare.pop().unwrap_or_default();
                self.columns.push(Column {
                    marker,
                    pred: Pred::of(path, marker),
                    prev: 0,
                    data,
                });
            }
            cols.push(c);
            let text = &skel[gap..at];
            gaps.push(text.into());
            put_bytes(&mut self.shape_table, text);
            varint::put(&mut self.shape_table, c as u64);
            node = match self.tree[node]
                .edges
                .iter()
                .find(|e| *e.gap == *text && e.marker == marker)
            {
                Some(e) => e.to as usize,
                None => {
                    let to = self.tree.len();
                    self.tree.push(ShapeNode::default());
                    self.tree[node].edges.push(ShapeEdge {
                        gap: text.into(),
                        marker,
                        column: c,
                        to: to as u32,
                    });
                    to
                }
            };
            gap = at + 1;
        }
        put_bytes(&mut self.shape_table, &skel[gap..]);
        self.tree[node].ends.push((skel[gap..].into(), s));
        gaps.push(skel[gap..].into());
        self.shape_gaps.push(gaps);
        self.shape_plans.push(ShapePlan::build(skel));
        self.shape_columns.push(cols);
        self.shapes.insert(skel.clone(), s);
        s
    }

    /// Keeps a line that is not an event (a loss record, an unknown type), whole.
    pub fn keep_other(&mut self, line: &str) {
        put_bytes(&mut self.other, line.as_bytes());
        self.other_lines += 1;
    }

    pub fn is_empty(&self) -> bool {
        self.events.is_empty() && self.other_lines == 0
    }

    /// Empties the segment (its buffers keep their capacity); the shapes
    /// and columns stay for the next one.
    pub fn clear(&mut self) {
        for c in &mut self.columns {
            c.data.clear();
            c.prev = 0;
        }
        for b in [
            &mut self.slot_shapes,
            &mut self.slot_boots,
            &mut self.slot_ids,
            &mut self.whole,
            &mut self.other,
        ] {
            b.clear();
        }
        self.last_boot = 0;
        self.ids.clear();
        self.other_lines = 0;
        self.events.clear();
    }

    /// The segment's bytes, its line count and its runs of consecutive
    /// event ids (sorted by boot and id); the builder is empty afterwards.
    pub fn seal(&mut self) -> Result<(Vec<u8>, i64, Vec<Run>)> {
        let lines = self.events.len() as i64 + self.other_lines;
        let mut head = Vec::new();
        for n in [
            self.events.len() as u64,
            self.other_lines as u64,
            self.shape_columns.len() as u64,
            self.columns.len() as u64,
        ] {
            varint::put(&mut head, n);
        }
        for c in &self.columns {
            head.extend_from_slice(&[c.marker, c.pred as u8]);
        }
        let sections = [
            &self.shape_table,
            &self.slot_shapes,
            &self.slot_boots,
            &self.slot_ids,
            &self.whole,
            &self.other,
        ];
        let sections: Vec<&Vec<u8>> = sections
            .into_iter()
            .chain(self.columns.iter().map(|c| &c.data))
            .collect();
        for s in &sections {
            varint::put(&mut head, s.len() as u64);
        }
        let mut plain = std::mem::take(&mut self.plain);
        plain.clear();
        plain.reserve(head.len() + 10 + sections.iter().map(|s| s.len()).sum::<usize>());
        put_bytes(&mut plain, &head);
        for s in sections {
            plain.extend_from_slice(s);
        }
        let zstd = match &mut self.zstd {
            Some(z) => z,
            None => self.zstd.insert(zstd::bulk::Compressor::new(ZSTD_LEVEL)?),
        };
        let blob = zstd.compress(&plain).context("compressing a raw segment")?;
        self.plain = plain;
        self.events.sort_unstable();
        let mut runs: Vec<Run> = Vec::new();
        for &(boot, id) in &self.events {
            match runs.last_mut() {
                Some(r) if r.0 == boot && r.2.checked_add(1) == Some(id) => r.2 = id,
                _ => runs.push((boot, id, id)),
            }
        }
        self.clear();
        Ok((blob, lines, runs))
    }
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    varint::put(out, b.len() as u64);
    out.extend_from_slice(b);
}

fn damaged() -> anyhow::Error {
    anyhow::anyhow!("raw segment truncated or corrupt (the store is damaged)")
}

fn take<'a>(b: &'a [u8], pos: &mut usize, n: usize) -> Result<&'a [u8]> {
    let s = b
        .get(*pos..pos.checked_add(n).ok_or_else(damaged)?)
        .ok_or_else(damaged)?;
    *pos += n;
    Ok(s)
}

struct DecodedShape<'a> {
    /// gaps[0] value gaps[1] value … gaps[n].
    gaps: Vec<&'a [u8]>,
    columns: Vec<usize>,
}

struct DecodedColumn<'a> {
    marker: u8,
    pred: Pred,
    data: &'a [u8],
    pos: usize,
    prev: i64,
}

impl DecodedColumn<'_> {
    /// Steps to the next value, appending its text to `out` if given.
    fn next(&mut self, id: u64, out: Option<&mut String>) -> Result<()> {
        if self.marker == INT {
            let v = self
                .pred
                .value(self.prev, id)
                .wrapping_add(varint::unzigzag(varint::get(self.data, &mut self.pos)?));
            self.prev = v;
            if let Some(out) = out {
                let _ = write!(out, "{v}");
            }
            return Ok(());
        }
        let rest = self.data.get(self.pos..).ok_or_else(damaged)?;
        let n = memchr::memchr(0, rest).ok_or_else(damaged)?;
        if let Some(out) = out {
            out.push_str(std::str::from_utf8(&rest[..n]).context("raw segment text is not UTF-8")?);
        }
        self.pos += n + 1;
        Ok(())
    }
}

/// The sections a segment holds before its columns: the shape table, per
/// event its shape, boot and id, the events kept whole, the other lines.
const SECTIONS: usize = 6;

/// A stored segment, decompressed: its head, then its sections.
struct Unpacked {
    plain: Vec<u8>,
}

fn unpack(blob: &[u8]) -> Result<Unpacked> {
    Ok(Unpacked {
        plain: zstd::stream::decode_all(blob).context("decompressing a raw segment")?,
    })
}

/// A segment read back.
struct Segment<'a> {
    events: usize,
    shapes: Vec<DecodedShape<'a>>,
    columns: Vec<DecodedColumn<'a>>,
    slot_shapes: &'a [u8],
    slot_boots: &'a [u8],
    slot_ids: &'a [u8],
    whole: &'a [u8],
    other: &'a [u8],
}

impl<'a> Segment<'a> {
    fn read(u: &'a Unpacked) -> Result<Segment<'a>> {
        let plain = &u.plain[..];
        let mut pos = 0;
        let len = varint::get(plain, &mut pos)? as usize;
        let head = take(plain, &mut pos, len)?;
        let mut h = 0;
        let mut n = || varint::get(head, &mut h).map(|v| v as usize);
        let (events, _other, shapes, columns) = (n()?, n()?, n()?, n()?);
        let markers = take(head, &mut h, columns.checked_mul(2).ok_or_else(damaged)?)?;
        let mut s6 = Vec::with_capacity(SECTIONS + columns);
        for _ in 0..SECTIONS + columns {
            let len = varint::get(head, &mut h)? as usize;
            s6.push(take(plain, &mut pos, len)?);
        }
        let mut cols = Vec::with_capacity(columns);
        for (i, m) in markers.chunks_exact(2).enumerate() {
            cols.push(DecodedColumn {
                marker: m[0],
                pred: Pred::from_u8(m[1])?,
                data: s6[SECTIONS + i],
                pos: 0,
                prev: 0,
            });
        }
        let table = s6[0];
        let mut t = 0;
        // Capacities bounded by what the segment can hold, whatever its counts say.
        let mut decoded = Vec::with_capacity(shapes.min(MAX_SHAPES));
        for _ in 0..shapes {
            let values = varint::get(table, &mut t)? as usize;
            if values > table.len() {
                return Err(damaged());
            }
            let mut shape = DecodedShape {
                gaps: Vec::with_capacity(values + 1),
                columns: Vec::with_capacity(values),
            };
            for _ in 0..values {
                let len = varint::get(table, &mut t)? as usize;
                shape.gaps.push(take(table, &mut t, len)?);
                let c = varint::get(table, &mut t)? as usize;
                if c >= cols.len() {
                    return Err(damaged());
                }
                shape.columns.push(c);
            }
            let len = varint::get(table, &mut t)? as usize;
            shape.gaps.push(take(table, &mut t, len)?);
            decoded.push(shape);
        }
        Ok(Segment {
            events,
            shapes: decoded,
            columns: cols,
            slot_shapes: s6[1],
            slot_boots: s6[2],
            slot_ids: s6[3],
            whole: s6[4],
            other: s6[5],
        })
    }

    /// Walks the events in order, re-creating the line of each for which
    /// `want(boot, id)` holds and handing it to `found`; stops when `found` says so.
    fn walk(
        &mut self,
        mut want: impl FnMut(i64, u64) -> bool,
        mut found: impl FnMut(String) -> bool,
    ) -> Result<()> {
        let (mut ps, mut pb, mut pi) = (0, 0, 0);
        let mut boot = 0i64;
        let mut ids = IdList::default();
        let mut whole = 0;
        for _ in 0..self.events {
            let shape = varint::get(self.slot_shapes, &mut ps)? as usize;
            boot = boot.wrapping_add(varint::unzigzag(varint::get(self.slot_boots, &mut pb)?));
            let id = ids.get(self.slot_ids, &mut pi)?.ok_or_else(damaged)?;
            let wanted = want(boot, id);
            let mut line = String::new();
            if shape == 0 {
                let len = varint::get(self.whole, &mut whole)? as usize;
                let text = take(self.whole, &mut whole, len)?;
                if wanted {
                    line = std::str::from_utf8(text)
                        .context("raw segment text is not UTF-8")?
                        .to_string();
                }
            } else {
                // Every column must advance, wanted or not: values are coded in turn.
                let s = self.shapes.get(shape - 1).ok_or_else(damaged)?;
                let utf8 = |gap| std::str::from_utf8(gap).context("raw segment text is not UTF-8");
                for (gap, &c) in s.gaps.iter().zip(&s.columns) {
                    if wanted {
                        line.push_str(utf8(gap)?);
                    }
                    self.columns[c].next(id, wanted.then_some(&mut line))?;
                }
                if wanted {
                    line.push_str(utf8(s.gaps[s.columns.len()])?);
                }
            }
            if wanted && found(line) {
                return Ok(());
            }
        }
        Ok(())
    }
}

/// The line of event `id` of `boot` in a stored segment, if it holds it.
pub fn event_line(blob: &[u8], boot: i64, id: i64) -> Result<Option<String>> {
    Ok(
        event_lines(blob, boot, &std::collections::HashSet::from([id as u64]))?
            .pop()
            .map(|(_, line)| line),
    )
}

/// The lines of the events of `boot` a stored segment holds among `ids`.
pub fn event_lines(
    blob: &[u8],
    boot: i64,
    ids: &std::collections::HashSet<u64>,
) -> Result<Vec<(u64, String)>> {
    let unpacked = unpack(blob)?;
    let mut seg = Segment::read(&unpacked)?;
    let mut out = Vec::new();
    let at = std::cell::Cell::new(0u64);
    seg.walk(
        |b, i| {
            at.set(i);
            b == boot && ids.contains(&i)
        },
        |l| {
            out.push((at.get(), l));
            out.len() == ids.len()
        },
    )?;
    Ok(out)
}

/// Every line of a stored segment: its events in the order they were
/// applied, then its other lines (for tests and tools).
pub fn lines(blob: &[u8]) -> Result<Vec<String>> {
    let unpacked = unpack(blob)?;
    let mut seg = Segment::read(&unpacked)?;
    let mut out = Vec::new();
    seg.walk(
        |_, _| true,
        |l| {
            out.push(l);
            false
        },
    )?;
    let mut pos = 0;
    while pos < seg.other.len() {
        let len = varint::get(seg.other, &mut pos)? as usize;
        out.push(
            std::str::from_utf8(take(seg.other, &mut pos, len)?)
                .context("raw segment text is not UTF-8")?
                .to_string(),
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synth::Rng;
    use std::io::BufRead;

    /// Keeps `lines` as events of `boot` with ids `cpu << 48 | seq` (CPU
    /// and sequence drawn by `rng`), plus a few other lines, seals the
    /// segment and checks every line comes back byte for byte, in order
    /// and by id; returns how many events were cut into columns.
    fn round_trip(lines: &[String], rng: &mut Rng) -> usize {
        let mut b = SegmentBuilder::default();
        let mut seqs = [0u64; 4];
        let mut ids = Vec::new();
        for (i, l) in lines.iter().enumerate() {
            let cpu = rng.next_u64() % 4;
            // Mostly the next sequence number, sometimes a gap or a step back.
            seqs[cpu as usize] = match rng.next_u64() % 8 {
                0 => seqs[cpu as usize].saturating_sub(rng.range(1, 5)),
                1 => seqs[cpu as usize] + rng.range(2, 1000),
                _ => seqs[cpu as usize] + 1,
            };
            let (boot, id) = (
                1 + (i as i64 / 500) % 2,
                cpu << SEQ_BITS | seqs[cpu as usize],
            );
            b.keep_event(boot, id, l);
            ids.push((boot, id));
        }
        let mut pos = 0;
        let whole = (0..lines.len())
            .filter(|_| varint::get(&b.slot_shapes, &mut pos).unwrap() == 0)
            .count();
        let cut = lines.len() - whole;
        let others = [
            r#"{"type":"loss","cpu":1,"count":3}"#,
            "{\"type\":\"future\",\"x\":\"\\u0041\"}",
        ];
        for o in others {
            b.keep_other(o);
        }
        let (blob, n, runs) = b.seal().unwrap();
        assert_eq!(n as usize, lines.len() + others.len());
        assert!(b.is_empty());
        let back = super::lines(&blob).unwrap();
        assert_eq!(back.len(), lines.len() + others.len());
        for (i, l) in lines.iter().enumerate() {
            assert_eq!(&back[i], l, "line {i}");
        }
        assert_eq!(&back[lines.len()..], &others[..]);
        // Every id is found, in its run, with its own line (ids may repeat
        // here, unlike in a store: the first is found).
        for (i, &(boot, id)) in ids.iter().enumerate().step_by(ids.len() / 300 + 1) {
            let first = ids.iter().position(|&x| x == (boot, id)).unwrap();
            assert_eq!(
                event_line(&blob, boot, id as i64).unwrap().as_deref(),
                Some(lines[first].as_str()),
                "line {i}"
            );
            assert!(runs
                .iter()
                .any(|r| r.0 == boot && (r.1..=r.2).contains(&(id as i64))));
        }
        assert_eq!(event_line(&blob, 3, 1).unwrap(), None);
        cut
    }

    fn recorded() -> Vec<String> {
        let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data/collector-gcc-build.jsonl.zst");
        crate::archive::open_input(&p)
            .unwrap()
            .lines()
            .map(Result::unwrap)
            .filter(|l| l.contains("\"type\":\"event\""))
            .collect()
    }

    fn synthetic() -> Vec<String> {
        let mut out = Vec::new();
        crate::synth::generate(
            &crate::synth::SynthConfig::scaled(5, 0.001),
            &mut out,
            |_| {},
        )
        .unwrap();
        String::from_utf8(out)
            .unwrap()
            .lines()
            .filter(|l| l.contains("\"type\":\"event\""))
            .map(str::to_string)
            .collect()
    }

    #[test]
    fn collector_lines_come_back_byte_for_byte_and_are_cut() {
        let mut rng = Rng::new(7);
        for (name, lines) in [("recorded", recorded()), ("synthetic", synthetic())] {
            let cut = round_trip(&lines, &mut rng);
            // The collector's plain lines all go into columns.
            assert_eq!(
                cut,
                lines.len(),
                "{name}: {cut} of {} lines cut",
                lines.len()
            );
        }
    }

    /// A line of the collector's kind with random field order, values of
    /// every JSON type (integers at the edges of 64 bits, numbers that are
    /// not canonical integers, strings with multi-byte characters and
    /// escapes), nested objects and arrays and optional whitespace, newlines
    /// included (`push_line` takes any text).
    fn random_line(r: &mut Rng) -> String {
        const KEYS: &[&str] = &[
            "type", "id", "cpu", "seq", "time_ns", "pid", "comm", "syscall", "ret", "path", "args",
            "argv", "fd", "x1", "é",
        ];
        const INTS: &[&str] = &[
            "0",
            "1",
            "-1",
            "42",
            "9223372036854775807",
            "-9223372036854775808",
            "9223372036854775808",
            "18446744073709551615",
            "-0",
            "1.5",
            "-2.5e-3",
            "1E9",
            "100000000000000000000",
            "07",
        ];
        const STRS: &[&str] = &[
            "", "event", "read", "/tmp/a b", "é☃", "a\\\"b", "tab\\t", "{\\\"", "[1,2]", "0",
        ];
        let ws = |r: &mut Rng| {
            if r.next_u64().is_multiple_of(6) {
                [" ", "\t", "  ", "\r", "\n"][r.next_u64() as usize % 5]
            } else {
                ""
            }
        };
        fn value(r: &mut Rng, depth: u32, ws: &dyn Fn(&mut Rng) -> &'static str) -> String {
            match r.next_u64() % if depth > 2 { 5 } else { 7 } {
                0 | 1 => INTS[r.next_u64() as usize % INTS.len()].to_string(),
                2 | 3 => format!("\"{}\"", STRS[r.next_u64() as usize % STRS.len()]),
                4 => ["true", "false", "null"][r.next_u64() as usize % 3].to_string(),
                5 => {
                    let n = r.next_u64() % 4;
                    let items: Vec<String> = (0..n)
                        .map(|_| format!("{}{}{}", ws(r), value(r, depth + 1, ws), ws(r)))
                        .collect();
                    format!("[{}]", items.join(","))
                }
                _ => object(r, depth + 1, ws),
            }
        }
        fn object(r: &mut Rng, depth: u32, ws: &dyn Fn(&mut Rng) -> &'static str) -> String {
            let n = r.next_u64() % 5;
            let members: Vec<String> = (0..n)
                .map(|_| {
                    let k = KEYS[r.next_u64() as usize % KEYS.len()];
                    format!(
                        "{}\"{k}\"{}:{}{}{}",
                        ws(r),
                        ws(r),
                        ws(r),
                        value(r, depth, ws),
                        ws(r)
                    )
                })
                .collect();
            format!("{{{}}}", members.join(","))
        }
        let mut l = object(r, 0, &ws);
        if r.next_u64().is_multiple_of(4) {
            l = format!("{}{l}{}", ws(r), ws(r));
        }
        l
    }

    #[test]
    fn random_lines_and_their_mutations_come_back_byte_for_byte() {
        let mut r = Rng::new(11);
        let mut lines: Vec<String> = (0..3000).map(|_| random_line(&mut r)).collect();
        // Truncations and single-byte changes of collector lines: what the
        // columns do not take is kept whole, never changed.
        let subs: &[u8] = b"\"\\1.e-}],:{[ 0ntf";
        for l in recorded()
            .iter()
            .step_by(53)
            .chain(synthetic().iter().step_by(401))
        {
            for cut in (0..l.len()).step_by(3) {
                if l.is_char_boundary(cut) {
                    lines.push(l[..cut].to_string());
                }
            }
            for at in (0..l.len()).step_by(2) {
                let mut m = l.as_bytes().to_vec();
                m[at] = subs[at % subs.len()];
                if let Ok(m) = String::from_utf8(m) {
                    lines.push(m);
                }
            }
        }
        let cut = round_trip(&lines, &mut r);
        // Both paths were taken often (a third of the strings hold escapes).
        assert!(
            cut > 2000 && lines.len() - cut > 2000,
            "{cut} of {} lines cut",
            lines.len()
        );
    }

    /// Long lines that share no prefix, each its own shape: past the
    /// tree's bound they stay whole, and every line still comes back.
    #[test]
    fn the_shape_tree_is_bounded() {
        // Another first key each: no two lines share a path in the tree.
        let values = vec!["\"a\""; 600].join(",");
        let lines: Vec<String> = (0..600)
            .map(|i| format!("{{\"k{i}\":[{values}]}}"))
            .collect();
        let cut = round_trip(&lines, &mut Rng::new(5));
        assert!(
            cut > 100 && cut < lines.len(),
            "{cut} of {} lines cut",
            lines.len()
        );
    }

    /// Lines cut when read and kept a segment later, across a registry
    /// renewed in between (its table past the bound): every line comes back.
    #[test]
    fn held_lines_survive_the_registry_being_renewed() {
        let values = vec!["\"ab\""; 40].join(",");
        let mut lines: Vec<String> = (0..800)
            .map(|i| format!("{{\"k{i}\":[{values}],\"n\":{i}}}"))
            .collect();
        lines.extend(synthetic().into_iter().take(2000));
        let mut r = Rng::new(9);
        for i in (0..lines.len()).rev() {
            lines.swap(i, r.next_u64() as usize % (i + 1));
        }
        let mut b = SegmentBuilder::default();
        let mut held: Vec<HeldLine> = lines.iter().map(|l| b.cut(l)).collect();
        assert!(
            b.shape_table.len() > MAX_TABLE_BYTES,
            "the test must pass the bound"
        );
        let half = lines.len() / 2;
        for (i, h) in held[..half].iter().enumerate() {
            b.keep_held(1, i as u64 + 1, h);
        }
        let (first, _, _) = b.seal().unwrap();
        let before = (b.shape_table.len(), b.shape_columns.len());
        b.renew_if_full(held[half..].iter_mut());
        // Only the held lines' shapes are left.
        assert!(
            b.shape_table.len() < before.0 && b.shape_columns.len() < before.1,
            "{before:?} -> {}",
            b.shape_columns.len()
        );
        for (i, h) in held[half..].iter().enumerate() {
            b.keep_held(1, (half + i) as u64 + 1, h);
        }
        let (second, _, _) = b.seal().unwrap();
        let back = [
            super::lines(&first).unwrap(),
            super::lines(&second).unwrap(),
        ]
        .concat();
        assert_eq!(back, lines);
        for i in (0..lines.len()).step_by(97) {
            let blob = if i < half { &first } else { &second };
            assert_eq!(
                event_line(blob, 1, i as i64 + 1).unwrap().as_deref(),
                Some(lines[i].as_str())
            );
        }
        // Renewing only when due: the collector's lines alone leave the registry as it is.
        let mut b = SegmentBuilder::default();
        let mut held: Vec<HeldLine> = synthetic().iter().map(|l| b.cut(l)).collect();
        let shapes = b.shape_columns.len();
        b.renew_if_full(held.iter_mut());
        assert_eq!(b.shape_columns.len(), shapes);
        assert!(held.iter().all(|h| matches!(h, HeldLine::Cut { .. })));
    }

    /// Feeds `lines` to `read_by_shape` and to `parse_line` (then `cut`),
    /// asserting equal records, errors and held lines wherever the line
    /// was read by shape; a line not read by shape registers its shape as
    /// the ingest does (events only) or, with `register_all`, always.
    /// Returns how many lines were read by shape.
    fn by_shape_agrees(lines: &[String], register_all: bool) -> usize {
        let mut b = SegmentBuilder::default();
        let mut read = 0;
        for l in lines {
            let old = crate::record::parse_line(l);
            let event = matches!(old, Ok(Record::Event(..)));
            match b.read_by_shape(l) {
                Some((rec, held)) => {
                    assert_eq!(
                        format!("{rec:?}"),
                        format!("{old:?}"),
                        "read by shape differently: {l:?}"
                    );
                    assert_eq!(held.is_some(), event, "{l:?}");
                    if let Some(h) = held {
                        assert_eq!(
                            format!("{h:?}"),
                            format!("{:?}", b.cut(l)),
                            "held line: {l:?}"
                        );
                    }
                    read += 1;
                }
                None if event || register_all => drop(b.cut(l)),
                None => {}
            }
        }
        read
    }

    fn all_synthetic(seed: u64, scale: f64) -> Vec<String> {
        let mut out = Vec::new();
        crate::synth::generate(
            &crate::synth::SynthConfig::scaled(seed, scale),
            &mut out,
            |_| {},
        )
        .unwrap();
        String::from_utf8(out)
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// A line's top-level members (text between the braces, split at
    /// commas outside strings, arrays and objects); None if it is not an object.
    fn members(l: &str) -> Option<Vec<String>> {
        let inner = l.trim().strip_prefix('{')?.strip_suffix('}')?;
        let (mut out, mut cur, mut depth, mut in_str, mut esc) =
            (Vec::new(), String::new(), 0i32, false, false);
        for c in inner.chars() {
            if in_str {
                in_str = c != '"' || esc;
                esc = c == '\\' && !esc;
            } else {
                match c {
                    '"' => in_str = true,
                    '{' | '[' => depth += 1,
                    '}' | ']' => depth -= 1,
                    ',' if depth == 0 => {
                        out.push(std::mem::take(&mut cur));
                        continue;
                    }
                    _ => {}
                }
            }
            cur.push(c);
        }
        out.push(cur);
        Some(out)
    }

    /// A random change of a valid line of the kinds that decide whether the
    /// fast path takes it: bytes, numbers at and past each type's range,
    /// escapes and control bytes in strings, repeated, reordered and
    /// unknown keys, literals, whitespace.
    fn mutate(l: &str, r: &mut Rng, only_numbers: bool) -> String {
        const NUMS: &[&str] = &[
            "0",
            "1",
            "-1",
            "255",
            "4294967295",
            "4294967296",
            "2147483647",
            "2147483648",
            "-2147483648",
            "-2147483649",
            "9223372036854775807",
            "-9223372036854775808",
            "9223372036854775808",
            "18446744073709551615",
            "18446744073709551616",
            "01",
            "-0",
            "1.5",
            "1e3",
            "-",
            "00",
            "1.",
            "12345678901234567890123",
        ];
        const INSERTS: &[&str] = &[
            "\\n", "\\\"", "\\u0041", "\\\\", "\u{1}", "\t", "\u{1f}", "\0", "\n", "é", "\u{7f}",
        ];
        const MEMBERS: &[&str] = &[
            r#""zz":1"#,
            r#""zz":"q""#,
            r#""zz":{"a":[1,"b",null]}"#,
            r#""incomplete":true"#,
            r#""incomplete":false"#,
            r#""incomplete":7"#,
            r#""incomplete":"x""#,
            r#""incomplete":[1]"#,
            r#""incomplete":null"#,
            r#""upper_bound":false"#,
            r#""upper_bound":true"#,
            r#""upper_bound":1"#,
            r#""workflow_running":true"#,
            r#""comm":null"#,
            r#""path":null"#,
            r#""args":null"#,
            r#""args":{}"#,
            r#""args":{"fd":3,"fd":"x"}"#,
            r#""args":{"fds":[1,"a",true,[2],{"q":3}],"fds":5}"#,
            r#""args":{"newfd":-4,"flags":null,"cmd":[1],"fds":[7,8]}"#,
            r#""argv":[]"#,
            r#""argv":null"#,
            r#""argv":["a",1]"#,
            r#""argv":["a","b c"]"#,
            r#""args":5"#,
            r#""container":{"id":"c","runtime":"docker"}"#,
            r#""fd":null"#,
            r#""ret":null"#,
            r#""pid":true"#,
            r#""workflow":4"#,
            r#""workflow_parent":3"#,
            r#""root_dev":1"#,
            r#""root_inode":2"#,
            r#""type":"loss""#,
            r#""x":1.5e3"#,
            r#""cpu":"1""#,
            r#""id":-3"#,
        ];
        let pick = |r: &mut Rng, n: usize| r.next_u64() as usize % n;
        if l.is_empty() {
            return "{}".into();
        }
        let mut b = l.as_bytes().to_vec();
        match if only_numbers { 1 } else { r.next_u64() % 8 } {
            0 => {
                let at = pick(r, b.len());
                b[at] = b"\"\\1.e-}],:{[ 0ntf\x01\x1f"[pick(r, 19)];
            }
            1 | 2 => {
                // A number replaced (the same shape if the new one is a canonical integer).
                let starts: Vec<usize> = (1..b.len())
                    .filter(|&i| b[i].is_ascii_digit() && matches!(b[i - 1], b':' | b',' | b'['))
                    .collect();
                if let Some(&at) = starts.get(pick(r, starts.len().max(1))) {
                    let end = (at..b.len())
                        .find(|&i| !b[i].is_ascii_digit())
                        .unwrap_or(b.len());
                    b.splice(at..end, NUMS[pick(r, NUMS.len())].bytes());
                }
            }
            3 => {
                // Inside a string: after an opening quote of a value.
                let quotes: Vec<usize> = (1..b.len())
                    .filter(|&i| b[i] == b'"' && matches!(b[i - 1], b':' | b',' | b'['))
                    .collect();
                if let Some(&at) = quotes.get(pick(r, quotes.len().max(1))) {
                    let ins = INSERTS[pick(r, INSERTS.len())].as_bytes();
                    let at = at + 1 + pick(r, 3).min(b.len() - at - 1);
                    b.splice(at..at, ins.iter().copied());
                }
            }
            4 => {
                // A repeated member, or the members in another order.
                if let Some(mut m) = members(l) {
                    if r.next_u64().is_multiple_of(2) {
                        let i = pick(r, m.len());
                        let at = pick(r, m.len() + 1);
                        m.insert(at, m[i].clone());
                    } else {
                        for i in (1..m.len()).rev() {
                            m.swap(i, pick(r, i + 1));
                        }
                    }
                    return format!("{{{}}}", m.join(","));
                }
            }
            5 => {
                // Whitespace after a comma or colon, or around the line.
                let at: Vec<usize> = (0..b.len())
                    .filter(|&i| matches!(b[i], b',' | b':'))
                    .collect();
                let ws = [&b" "[..], b"\t", b"  ", b"\r\n"][pick(r, 4)];
                match at.get(pick(r, at.len().max(1))) {
                    Some(&i) if !r.next_u64().is_multiple_of(4) => {
                        drop(b.splice(i + 1..i + 1, ws.iter().copied()))
                    }
                    _ => b.splice(0..0, ws.iter().copied()).for_each(drop),
                }
            }
            _ => {
                if let Some(mut m) = members(l) {
                    let at = pick(r, m.len() + 1);
                    m.insert(at, MEMBERS[pick(r, MEMBERS.len())].to_string());
                    return format!("{{{}}}", m.join(","));
                }
            }
        }
        String::from_utf8_lossy(&b).into_owned()
    }

    /// The parse by shape reads every line as the fast path and serde do
    /// (records, error messages) and cuts it as `cut` does: the synthetic
    /// and the recorded streams, hand-made edge cases, and random
    /// mutations of collector lines, each followed by a sibling of the
    /// same shape with other values (so both the registering line and later
    /// lines of a shape are read).
    #[test]
    fn lines_read_by_shape_read_as_the_parser_reads_them() {
        let synth = all_synthetic(3, 0.002);
        let events = synth
            .iter()
            .filter(|l| l.contains("\"type\":\"event\""))
            .count();
        let read = by_shape_agrees(&synth, false);
        // Nearly every event line of the stream after its shape's first is read by shape.
        assert!(
            read * 100 >= events * 99,
            "synthetic: {read} of {events} events read by shape"
        );
        eprintln!(
            "synthetic: {read} of {} lines ({events} events) read by shape",
            synth.len()
        );
        let rec: Vec<String> = {
            let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/data/collector-gcc-build.jsonl.zst");
            crate::archive::open_input(&p)
                .unwrap()
                .lines()
                .map(Result::unwrap)
                .collect()
        };
        let read = by_shape_agrees(&rec, false);
        assert!(
            read * 100 >= rec.len() * 90,
            "recorded: {read} of {} read by shape",
            rec.len()
        );
        eprintln!("recorded: {read} of {} lines read by shape", rec.len());

        let ev = |rest: &str| {
            format!(r#"{{"type":"event","id":1,"time_ns":2,"pid":3,"syscall":"read"{rest}}}"#)
        };
        let mut edge: Vec<String> = Vec::new();
        for rest in [
            "",
            r#","ret":-9223372036854775808,"fd":-1,"cpu":4294967295"#,
            r#","ret":9223372036854775807,"fd":2147483647"#,
            r#","fd":2147483648"#,
            r#","fd":-2147483649"#,
            r#","cpu":4294967296"#,
            r#","pid":-1"#,
            r#","id":-1"#,
            r#","time_ns":9223372036854775807"#,
            r#","time_ns":9223372036854775808"#,
            r#","time_ns":18446744073709551615"#,
            r#","ret":-1,"comm":null,"path":null,"argv":[],"args":{}"#,
            r#","argv":["a","b c"],"args":{"fd":3,"fds":[1,2],"z":{"q":[true,false,null]}}"#,
            r#","incomplete":true,"upper_bound":false,"extra":{"a":[1,2,"s"]}"#,
            r#","incomplete":7"#,
            r#","incomplete":null"#,
            r#","incomplete":"x""#,
            r#","incomplete":{"a":1}"#,
            r#","path":"/a\"b""#,
            r#","pid":4"#,
            r#","fd":1.0"#,
            r#","ret":-0"#,
            r#","fd":1e2"#,
            r#","fd":01"#,
            r#","id":18446744073709551616"#,
            r#","x":01"#,
            r#","x":1."#,
            r#","x":-"#,
            r#","upper_bound":1"#,
            r#","comm":"a	b""#,
            "\",\"comm\":\"a\u{1}b\"",
            "\",\"path\":\"/x\u{1f}\"",
            r#","path":"""#,
            r#","args":{"fd":3,"fd":"x"}"#,
            r#","args":{"fd":"x","fd":3}"#,
            r#","args":{"fds":[1,"a",true,[2],{"q":3}],"fds":5}"#,
            r#","args":{"fds":[1],"fds":{"a":1}}"#,
            r#","args":{"newfd":-4,"flags":null,"cmd":[1],"uid":{"a":2}}"#,
            r#","args":null"#,
            r#","args":5"#,
            r#","args":[]"#,
            r#","argv":null"#,
            r#","argv":["a",1]"#,
            r#","argv":[null]"#,
            r#","argv":"a""#,
            r#","container":{"id":"c"}"#,
            r#","x":1,"x":2"#,
            r#","pid":3"#,
            r#","workflow":1,"workflow_parent":2,"workflow_cause":3,"workflow_running":true"#,
            r#","workflow":1,"workflow_running":1"#,
            r#","root_dev":1,"root_inode":2"#,
            r#" , "tid" : 5 "#,
            r#","x":1.5e3"#,
            r#","dev":"1""#,
            r#","comm":5"#,
            r#","upper_bound":null,"workflow_running":false"#,
            r#","x":"é☃""#,
        ] {
            edge.push(ev(rest));
        }
        edge.extend([
            format!(" \t{} \n", ev("")),
            format!("{} x", ev("")),
            format!("{}}}", ev("")),
            r#"{"type":"event","type":"event","id":1,"time_ns":2,"pid":3,"syscall":"read"}"#.into(),
            r#"{"ty\u0070e":"event","id":1,"time_ns":2,"pid":3,"syscall":"read"}"#.into(),
            r#"{"id":1,"time_ns":2,"pid":3,"syscall":"read"}"#.into(),
            r#"{"type":"event","id":1,"pid":3,"syscall":"read"}"#.into(),
            r#"{"type":"loss","boot_id":"b","cpu":1,"count":3,"start_ns":5,"end_ns":4}"#.into(),
            r#"{"type":"loss","boot_id":"b","cpu":1,"first_seq":3,"last_seq":9,"start_ns":5,"end_ns":6,"category":"ring","upper_bound":true}"#.into(),
            r#"{"type":"boot","boot_id":"b"}"#.into(),
            r#"{"type":"stats","time_ns":5}"#.into(),
            r#"{"type":"future","id":1}"#.into(),
            r#"{}"#.into(),
            r#"{"type":null}"#.into(),
            "".into(),
            "[1]".into(),
        ]);
        // Each edge case after a line of its shape with plain values.
        let mut r = Rng::new(13);
        let mut lines = Vec::new();
        for l in &edge {
            lines.push(
                l.replace("-1", "7")
                    .replace("4294967296", "8")
                    .replace("\u{1}", "c")
                    .replace("\u{1f}", "d"),
            );
            lines.push(l.clone());
            lines.push(l.clone());
        }
        // Random mutations of collector lines, each then with a number changed.
        let bases: Vec<&String> = synth
            .iter()
            .step_by(7)
            .chain(rec.iter().step_by(3))
            .chain(&edge)
            .collect();
        for _ in 0..20 {
            for l in &bases {
                let m = mutate(l, &mut r, false);
                let (m2, m3) = (mutate(&m, &mut r, true), mutate(&m, &mut r, true));
                lines.extend([m, m2, m3]);
            }
        }
        // Lines of every JSON form, and their mutations.
        for _ in 0..4000 {
            let l = random_line(&mut r);
            let m = mutate(&l, &mut r, false);
            let m2 = mutate(&m, &mut r, true);
            lines.extend([l, m, m2]);
        }
        let (mut read_ingest, mut read_all) = (0, 0);
        for chunk in lines.chunks(5000) {
            read_ingest += by_shape_agrees(chunk, false);
            read_all += by_shape_agrees(chunk, true);
        }
        assert!(
            read_ingest > lines.len() / 8 && read_all > read_ingest,
            "{read_ingest}, {read_all} of {}",
            lines.len()
        );
        eprintln!(
            "by shape: {read_ingest} (events registered) / {read_all} (all registered) of {} lines",
            lines.len()
        );
    }

    /// The same on a whole stream file (`CUSTOS_SHAPE_STREAM`, e.g. store-bench's
    /// events.jsonl), in order, with registration as the ingest does it.
    #[test]
    #[ignore = "needs CUSTOS_SHAPE_STREAM"]
    fn a_stream_file_reads_by_shape_as_the_parser_reads_it() {
        let p = std::env::var("CUSTOS_SHAPE_STREAM").expect("CUSTOS_SHAPE_STREAM");
        let lines: Vec<String> = crate::archive::open_input(std::path::Path::new(&p))
            .unwrap()
            .lines()
            .map(Result::unwrap)
            .collect();
        let read = by_shape_agrees(&lines, false);
        eprintln!("{p}: {read} of {} lines read by shape", lines.len());
    }

    #[test]
    fn values_past_64_bits_or_not_canonical_are_kept_as_text() {
        for (text, int) in [
            ("0", Some(0)),
            ("-1", Some(-1)),
            ("-0", None),
            ("01", None),
            ("1.0", None),
            ("-", None),
            ("", None),
        ] {
            assert_eq!(canonical_int(text.as_bytes()), int, "{text}");
        }
        assert_eq!(canonical_int(b"-9223372036854775808"), Some(i64::MIN));
        assert_eq!(canonical_int(b"9223372036854775808"), None);
        assert_eq!(
            canonical_int(b"1234567890123456789"),
            Some(1234567890123456789)
        );
        assert_eq!(canonical_int(b"-12345678"), Some(-12345678));
        assert_eq!(canonical_int(b"12345678901234567890"), None);
        let mut r = Rng::new(3);
        for _ in 0..10_000 {
            let v = r.next_u64() as i64 >> (r.next_u64() % 64);
            assert_eq!(canonical_int(v.to_string().as_bytes()), Some(v));
        }
    }
}

//! Answers for people (tables), programs (JSON), pictures (DOT/SVG) and
//! other provenance tools (W3C PROV-JSON).

use crate::query::{Answer, NodeInfo, NodeMap};
use crate::schema::{EdgeKind, NodeKind};
use crate::timefmt::format_ns;
use anyhow::{Context, Result};
use serde_json::{json, Map, Value};
use std::fmt::Write as _;

fn table(out: &mut String, header: &[&str], rows: &[Vec<String>]) {
    let mut width: Vec<usize> = header.iter().map(|h| char_width(h)).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            width[i] = width[i].max(char_width(c));
        }
    }
    out.reserve(rows.len() * (width.iter().sum::<usize>() + 2 * width.len()));
    table_line(out, &width, &mut header.iter().map(|h| (*h, char_width(h))));
    for r in rows {
        table_line(
            out,
            &width,
            &mut r.iter().map(|c| (c.as_str(), char_width(c))),
        );
    }
}

/// One row: left-aligned cells padded to the column's width in characters,
/// two spaces between columns, the last one unpadded (pushed by hand: the
/// formatting machinery per cell was most of a 20,000-row answer's time).
fn table_line(out: &mut String, width: &[usize], cells: &mut dyn Iterator<Item = (&str, usize)>) {
    let mut cells = cells.enumerate().peekable();
    while let Some((i, (c, chars))) = cells.next() {
        out.push_str(c);
        if cells.peek().is_some() {
            pad(out, width[i].saturating_sub(chars) + 2);
        }
    }
    out.push('\n');
}

/// Appends `n` spaces (a slice at a time: a char at a time was 4 % of a
/// 20,000-row table).
fn pad(out: &mut String, mut n: usize) {
    const SPACES: &str = "                                                                ";
    while n > 0 {
        let k = n.min(SPACES.len());
        out.push_str(&SPACES[..k]);
        n -= k;
    }
}

/// The width of a cell in characters (a byte each when ASCII, as nearly all are).
fn char_width(s: &str) -> usize {
    if s.is_ascii() {
        s.len()
    } else {
        s.chars().count()
    }
}

/// Table cells written into one buffer, row after row.
struct Cells {
    text: String,
    ends: Vec<usize>,
}

impl Cells {
    fn with_capacity(cells: usize) -> Self {
        Self {
            text: String::with_capacity(cells * 12),
            ends: Vec::with_capacity(cells),
        }
    }

    /// Closes the cell being written.
    fn end(&mut self) {
        self.ends.push(self.text.len());
    }

    /// Lays the cells out as [`table`] does, `header.len()` to a row.
    fn table(&self, out: &mut String, header: &[&str]) {
        let cols = header.len();
        let cell = |i: usize| &self.text[if i == 0 { 0 } else { self.ends[i - 1] }..self.ends[i]];
        let chars: Vec<usize> = (0..self.ends.len()).map(|i| char_width(cell(i))).collect();
        let mut width: Vec<usize> = header.iter().map(|h| char_width(h)).collect();
        for (i, w) in chars.iter().enumerate() {
            width[i % cols] = width[i % cols].max(*w);
        }
        out.reserve(self.ends.len() / cols * (width.iter().sum::<usize>() + 2 * cols));
        table_line(out, &width, &mut header.iter().map(|h| (*h, char_width(h))));
        for row in 0..self.ends.len() / cols {
            table_line(
                out,
                &width,
                &mut (row * cols..(row + 1) * cols).map(|i| (cell(i), chars[i])),
            );
        }
    }
}

fn short_time(ns: i64) -> String {
    // 2026-11-21T10:15:04.123456Z: microseconds are enough to read.
    let s = format_ns(ns as u64);
    format!("{}Z", &s[..26])
}

/// The human-readable answer.
pub fn text(a: &Answer) -> String {
    let mut out = String::new();
    let by_id: NodeMap<&NodeInfo> = a.nodes.iter().map(|n| (n.node, n)).collect();
    let node = |id: i64| by_id.get(&id).copied();
    for l in &a.losses {
        let _ = writeln!(out, "WARNING: {}", l.message());
    }
    for n in &a.notes {
        let _ = writeln!(out, "NOTE: {n}");
    }
    if let Some(p) = &a.path {
        let _ = writeln!(out, "{}: {p}", a.query);
    }
    if !a.rows.is_empty() || a.query.starts_with("touched-by") || a.query.starts_with("who-touched")
    {
        let rows: Vec<Vec<String>> = a
            .rows
            .iter()
            .map(|r| {
                let p = node(r.process).map(NodeInfo::label).unwrap_or_default();
                let o = node(r.object)
                    .map(|n| format!("{} {}", n.kind, n.label()))
                    .unwrap_or_default();
                vec![
                    short_time(r.time_ns),
                    r.action.to_string(),
                    p,
                    o,
                    format!("{:#x}", r.event_id),
                ]
            })
            .collect();
        table(
            &mut out,
            &["TIME", "ACTION", "PROCESS", "OBJECT", "EVENT"],
            &rows,
        );
        let _ = writeln!(out, "{} rows", a.rows.len());
    } else {
        let mut via: NodeMap<&crate::query::EdgeInfo> = NodeMap::default();
        for e in &a.edges {
            // The edge that first reached a node (the BFS tree edge) explains why it is listed.
            let (from, to) = if a.query.starts_with("descendants") {
                (e.cause, e.effect)
            } else {
                (e.effect, e.cause)
            };
            let (df, dt) = (
                node(from).and_then(|n| n.depth),
                node(to).and_then(|n| n.depth),
            );
            if matches!((df, dt), (Some(x), Some(y)) if y == x + 1) {
                via.entry(to).or_insert(e);
            }
        }
        // One buffer for every cell (a `String` per cell was most of a
        // 20,000-row answer's time); the node's creation time is its
        // formatted `time` cut to microseconds, as `short_time` writes it.
        let mut cells = Cells::with_capacity(a.nodes.len() * 7);
        for n in &a.nodes {
            if let Some(d) = n.depth {
                let _ = write!(cells.text, "{d}");
            }
            cells.end();
            let _ = write!(cells.text, "{}", n.node);
            cells.end();
            cells.text.push_str(n.kind);
            cells.end();
            n.write_label(&mut cells.text);
            cells.end();
            match n.time.get(..26) {
                Some(t) if n.time.len() == 30 => {
                    cells.text.push_str(t);
                    cells.text.push('Z');
                }
                _ => cells.text.push_str(&short_time(n.time_ns)),
            }
            cells.end();
            if let Some(e) = via.get(&n.node) {
                cells.text.push_str(e.kind.name());
                cells.end();
                let _ = write!(cells.text, "{:#x}", e.event_id);
            } else {
                cells.end();
            }
            cells.end();
        }
        cells.table(
            &mut out,
            &["DEPTH", "NODE", "KIND", "WHAT", "CREATED", "VIA", "EVENT"],
        );
        let _ = writeln!(out, "{} nodes, {} edges", a.nodes.len(), a.edges.len());
    }
    if a.complete {
        let _ = writeln!(out, "complete: no loss recorded in the answer's time span");
    }
    out
}

pub fn json(a: &Answer) -> Result<String> {
    serde_json::to_string_pretty(a).context("encoding the answer as JSON")
}

fn esc(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}

/// Graphviz DOT: processes are blue boxes (PROV activities), files yellow
/// ellipses (entities), sockets green diamonds, pipes grey cylinders, users
/// orange houses (agents); edges point from effect to cause as in PROV.
pub fn dot(a: &Answer) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "digraph provenance {{");
    let _ = writeln!(out, "  rankdir=BT;\n  node [fontname=\"Helvetica\", fontsize=10];\n  edge [fontname=\"Helvetica\", fontsize=8];");
    let _ = writeln!(out, "  label=\"{}\"; labelloc=t;", esc(&a.query));
    let starts: std::collections::HashSet<i64> = a.start.iter().copied().collect();
    // Each container's processes in a box of their own, named.
    let mut members: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for n in &a.nodes {
        if let Some(id) = n.container() {
            members.entry(id).or_default().push(format!("n{}", n.node));
        }
    }
    for (i, (id, name)) in a.containers.iter().enumerate() {
        let Some(members) = members.get(id) else {
            continue;
        };
        let title = match name {
            Some(name) => format!("container {name} ({})", &id[..id.len().min(12)]),
            None => format!("container {}", &id[..id.len().min(12)]),
        };
        let _ = writeln!(
            out,
            "  subgraph cluster_container{i} {{ label=\"{}\"; style=dashed; {}; }}",
            esc(&title),
            members.join("; ")
        );
    }
    for n in &a.nodes {
        let (shape, fill) = match n.node_kind() {
            NodeKind::Process => ("box", "#9fb1fc"),
            NodeKind::File => ("ellipse", "#fffc87"),
            NodeKind::Socket => ("diamond", "#a6e3a1"),
            NodeKind::Pipe => ("cylinder", "#d0d0d0"),
            NodeKind::User => ("house", "#fed37f"),
        };
        let pen = if starts.contains(&n.node) {
            ", penwidth=3"
        } else {
            ""
        };
        let _ = writeln!(
            out,
            "  n{} [shape={shape}, style=filled, fillcolor=\"{fill}\"{pen}, label=\"{}\\n#{} {}\"];",
            n.node,
            esc(&n.label()),
            n.node,
            &short_time(n.time_ns)[11..]
        );
    }
    for e in &a.edges {
        let style = match e.kind {
            EdgeKind::Used => "solid",
            EdgeKind::WasGeneratedBy => "bold",
            EdgeKind::WasInformedBy => "dashed",
            EdgeKind::WasDerivedFrom => "dotted",
            EdgeKind::WasAssociatedWith => "tapered",
        };
        let _ = writeln!(
            out,
            "  n{} -> n{} [label=\"{}\", style={style}];",
            e.effect,
            e.cause,
            e.kind.name()
        );
    }
    if !a.losses.is_empty() {
        let text: Vec<String> = loss_note_lines(&a.losses).iter().map(|l| esc(l)).collect();
        let _ = writeln!(
            out,
            "  incomplete [shape=note, color=red, fontcolor=red, label=\"{}\"];",
            text.join("\\n")
        );
    }
    if !a.notes.is_empty() {
        let text: Vec<String> = a.notes.iter().map(|n| esc(n)).collect();
        let _ = writeln!(out, "  notes [shape=note, label=\"{}\"];", text.join("\\n"));
    }
    out.push_str("}\n");
    out
}

/// Leaves out of a picture the nodes whose name matches one of `patterns`
/// (the query's targets stay) and the edges that touch them; the answer's
/// title says how many went (`described`: the patterns as the user wrote
/// them). Returns how many nodes were hidden.
pub fn hide_nodes(a: &mut Answer, patterns: &[glob::Pattern], described: &str) -> usize {
    if patterns.is_empty() {
        return 0;
    }
    let hidden: std::collections::HashSet<i64> = a
        .nodes
        .iter()
        .filter(|n| !a.start.contains(&n.node) && patterns.iter().any(|p| p.matches(&n.name)))
        .map(|n| n.node)
        .collect();
    a.nodes.retain(|n| !hidden.contains(&n.node));
    a.edges
        .retain(|e| !hidden.contains(&e.cause) && !hidden.contains(&e.effect));
    if !hidden.is_empty() {
        a.query = format!("{} ({} nodes hidden: {described})", a.query, hidden.len());
    }
    hidden.len()
}

/// Loss records a picture lists one by one; beyond, their sum and span.
const LOSS_NOTE_LINES: usize = 4;

/// The picture's note on what the answer may lack: each overlapping loss
/// record, or with many (a flood leaves hundreds), the first few and then
/// how many more, how many events and when. The JSON answer has them all.
fn loss_note_lines(losses: &[crate::query::LossNote]) -> Vec<String> {
    if losses.len() <= LOSS_NOTE_LINES + 1 {
        return losses.iter().map(|l| l.message()).collect();
    }
    let (shown, rest) = losses.split_at(LOSS_NOTE_LINES);
    let mut lines: Vec<String> = shown.iter().map(|l| l.message()).collect();
    let events: i64 = rest.iter().map(|l| l.count).sum();
    let from = rest.iter().map(|l| l.start_ns).min().unwrap_or(0);
    let to = rest.iter().map(|l| l.end_ns).max().unwrap_or(0);
    lines.push(format!(
        "... and {} more loss records: {events} events (at most) between {} and {}",
        rest.len(),
        format_ns(from as u64),
        format_ns(to as u64)
    ));
    lines
}

fn qn(id: i64) -> String {
    format!("custos:n{id}")
}

/// W3C PROV-JSON (https://www.w3.org/submissions/prov-json/).
pub fn prov_json(a: &Answer) -> Result<String> {
    let mut entity = Map::new();
    let mut activity = Map::new();
    let mut agent = Map::new();
    for n in &a.nodes {
        let mut attrs = Map::new();
        attrs.insert("prov:type".into(), json!(format!("custos:{}", n.kind)));
        attrs.insert("prov:label".into(), json!(n.label()));
        attrs.insert("custos:name".into(), json!(n.name));
        attrs.insert("custos:version".into(), json!(n.version));
        attrs.insert("custos:event".into(), json!(n.event_id));
        match n.node_kind() {
            NodeKind::Process => {
                attrs.insert("prov:startTime".into(), json!(format_ns(n.time_ns as u64)));
                if let Some(pid) = n.pid {
                    attrs.insert("custos:pid".into(), json!(pid));
                }
                activity.insert(qn(n.node), Value::Object(attrs));
            }
            NodeKind::User => {
                agent.insert(qn(n.node), Value::Object(attrs));
            }
            _ => {
                entity.insert(qn(n.node), Value::Object(attrs));
            }
        }
    }
    let mut rel: std::collections::BTreeMap<&str, Map<String, Value>> = Default::default();
    for (i, e) in a.edges.iter().enumerate() {
        let (k1, k2) = match e.kind {
            EdgeKind::Used => ("prov:activity", "prov:entity"),
            EdgeKind::WasGeneratedBy => ("prov:entity", "prov:activity"),
            EdgeKind::WasInformedBy => ("prov:informed", "prov:informant"),
            EdgeKind::WasDerivedFrom => ("prov:generatedEntity", "prov:usedEntity"),
            EdgeKind::WasAssociatedWith => ("prov:activity", "prov:agent"),
        };
        let mut m = Map::new();
        m.insert(k1.into(), json!(qn(e.effect)));
        m.insert(k2.into(), json!(qn(e.cause)));
        if matches!(e.kind, EdgeKind::Used | EdgeKind::WasGeneratedBy) {
            m.insert("prov:time".into(), json!(format_ns(e.time_ns as u64)));
        } else {
            m.insert("custos:time".into(), json!(format_ns(e.time_ns as u64)));
        }
        m.insert("custos:event".into(), json!(e.event_id));
        rel.entry(e.kind.name())
            .or_default()
            .insert(format!("_:e{i}"), Value::Object(m));
    }
    let mut doc = Map::new();
    doc.insert(
        "prefix".into(),
        json!({"custos": "https://example.invalid/custos/ns#"}),
    );
    doc.insert("entity".into(), Value::Object(entity));
    doc.insert("activity".into(), Value::Object(activity));
    doc.insert("agent".into(), Value::Object(agent));
    for (k, v) in rel {
        doc.insert(k.into(), Value::Object(v));
    }
    // Completeness travels with the document as a bundle-level note.
    doc.insert(
        "custos:completeness".into(),
        json!({"complete": a.complete, "losses": a.losses.iter().map(|l| l.message()).collect::<Vec<_>>()}),
    );
    serde_json::to_string_pretty(&Value::Object(doc)).context("encoding PROV-JSON")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_line_up_by_characters_not_bytes() {
        let mut out = String::new();
        let rows = vec![
            vec!["/tmp/ünïcödé".to_string(), "x".to_string()],
            vec!["/tmp/plain".to_string(), "y".to_string()],
        ];
        table(&mut out, &["PATH", "V"], &rows);
        let lines: Vec<&str> = out.lines().collect();
        // The second column starts at the same character in every line,
        // whatever the bytes before it.
        let col = |l: &str| {
            l.chars()
                .position(|c| c == 'x' || c == 'y' || c == 'V')
                .unwrap()
        };
        assert_eq!(col(lines[0]), 14);
        assert!(lines.iter().all(|l| col(l) == 14), "{out}");
        let mut cells = Cells::with_capacity(4);
        for c in ["ä", "1", "bb", "2"] {
            cells.text.push_str(c);
            cells.end();
        }
        let mut out = String::new();
        cells.table(&mut out, &["K", "V"]);
        assert_eq!(out, "K   V\nä   1\nbb  2\n");
    }
}

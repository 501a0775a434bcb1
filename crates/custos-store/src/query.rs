//! Provenance queries over the store: ancestors, descendants, a causal path,
//! what a process touched, who touched a file; each answer carries the loss
//! records that overlap it in time (the completeness annotation).

use crate::effects::EffectReader;
use crate::nodes::{self, NodeReader, NodeRow};
use crate::schema::{EdgeKind, NodeKind};
use crate::timefmt::format_ns;
use anyhow::{bail, Context, Result};
use rusqlite::{params, Connection, OptionalExtension};
use serde::Serialize;
use std::collections::{HashMap, HashSet, VecDeque};

#[derive(Debug, Clone, Serialize)]
pub struct NodeInfo {
    pub node: i64,
    pub kind: &'static str,
    pub boot: i64,
    pub name: String,
    pub version: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exec: Option<i64>,
    pub time_ns: i64,
    pub time: String,
    pub event_id: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attrs: Option<Attrs>,
    /// Distance from the query's start node(s), when the query is a traversal.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub depth: Option<u32>,
}

impl NodeInfo {
    /// The container a process node runs in (its attrs say), if any.
    pub fn container(&self) -> Option<String> {
        let at = self.attrs.as_ref()?;
        // Most nodes have none: a substring test before any parse.
        if !at.0.contains("\"container\"") {
            return None;
        }
        at.value()["container"].as_str().map(str::to_string)
    }

    pub fn node_kind(&self) -> NodeKind {
        match self.kind {
            "process" => NodeKind::Process,
            "socket" => NodeKind::Socket,
            "pipe" => NodeKind::Pipe,
            "user" => NodeKind::User,
            _ => NodeKind::File,
        }
    }
    /// One-line human label: `cc1 pid 42 v2`, `/tmp/a.o v3`.
    pub fn label(&self) -> String {
        let mut out = String::with_capacity(self.name.len() + 16);
        self.write_label(&mut out);
        out
    }

    /// Appends [`NodeInfo::label`] to `out`.
    pub fn write_label(&self, out: &mut String) {
        use std::fmt::Write as _;
        out.push_str(&self.name);
        let _ = match self.node_kind() {
            NodeKind::Process if self.version > 1 => {
                write!(out, " pid {} v{}", self.pid.unwrap_or(0), self.version)
            }
            NodeKind::Process => write!(out, " pid {}", self.pid.unwrap_or(0)),
            NodeKind::User => Ok(()),
            _ => write!(out, " v{}", self.version),
        };
    }
}

#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq, Hash)]
pub struct EdgeInfo {
    pub effect: i64,
    pub cause: i64,
    #[serde(serialize_with = "ser_kind")]
    pub kind: EdgeKind,
    pub event_id: i64,
    pub time_ns: i64,
    pub boot: i64,
}

fn ser_kind<S: serde::Serializer>(k: &EdgeKind, s: S) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_str(k.name())
}

/// A loss record overlapping the answer: "may be incomplete: N events lost on CPU c between t1 and t2".
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct LossNote {
    /// The host whose stream lost the events (the fleet's answers; None in one store).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    pub boot: i64,
    pub cpu: i64,
    pub category: String,
    pub count: i64,
    pub start_ns: i64,
    pub end_ns: i64,
}

impl LossNote {
    pub fn message(&self) -> String {
        let what = match self.category.as_str() {
            "incomplete" => format!(
                "{} events lost their paths, arguments or address",
                self.count
            ),
            "unresolved" => format!(
                "{} execs whose program file nothing named (its origin is not in the graph)",
                self.count
            ),
            c if c.ends_with("upper bound") => format!("up to {} events lost ({c})", self.count),
            "skipped" => format!(
                "{} events lost (syscalls skipped by the kernel)",
                self.count
            ),
            _ => format!("{} events lost", self.count),
        };
        let mut cpu = if self.cpu < 0 {
            "an unknown CPU".to_string()
        } else {
            format!("CPU {}", self.cpu)
        };
        if let Some(h) = &self.host {
            cpu = format!("{cpu} of host {h}");
        }
        format!(
            "may be incomplete: {what} on {cpu} between {} and {}",
            format_ns(self.start_ns as u64),
            format_ns(self.end_ns as u64)
        )
    }
}

/// One row of a touched-by / who-touched answer.
#[derive(Debug, Clone, Serialize)]
pub struct TouchRow {
    pub time_ns: i64,
    pub time: String,
    /// `read` or `wrote`
    pub action: &'static str,
    pub process: i64,
    pub object: i64,
    pub event_id: i64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Answer {
    pub query: String,
    pub start: Vec<i64>,
    pub nodes: Vec<NodeInfo>,
    pub edges: Vec<EdgeInfo>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub rows: Vec<TouchRow>,
    /// For `path`: which way causality runs, or that there is no path.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Earliest and latest time (ns) in the answer's subgraph.
    pub span_ns: Option<(i64, i64)>,
    pub complete: bool,
    pub losses: Vec<LossNote>,
    /// The containers of the answer's processes: id → name, when known.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub containers: std::collections::BTreeMap<String, Option<String>>,
    /// What else the reader must know to trust the answer: the fleet's
    /// cross-host links (how they were matched, what they cannot see).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

impl Answer {
    pub fn node(&self, id: i64) -> Option<&NodeInfo> {
        self.nodes.iter().find(|n| n.node == id)
    }
}

/// A node's stored attributes: JSON text, checked when read and turned into
/// a JSON value only when an answer is written as JSON (building a
/// `serde_json::Value` per node was a fifth of a large answer's time).
#[derive(Debug, Clone, PartialEq)]
pub struct Attrs(String);

impl Attrs {
    /// Attributes as stored: JSON text (checked when written out).
    pub fn new(text: String) -> Self {
        Self(text)
    }

    /// The attributes as a JSON value.
    pub fn value(&self) -> serde_json::Value {
        serde_json::from_str(&self.0).unwrap_or(serde_json::Value::Null)
    }
}

impl Serialize for Attrs {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        self.value().serialize(s)
    }
}

/// Holds one read transaction across many point lookups. Outside a
/// transaction SQLite takes and drops its file locks on every statement
/// (two fcntl and an fstat each): that, not the b-tree, dominated the walk.
pub struct ReadTx<'c> {
    conn: &'c Connection,
    owned: bool,
}

impl<'c> ReadTx<'c> {
    pub fn begin(conn: &'c Connection) -> Result<Self> {
        let owned = conn.is_autocommit();
        if owned {
            conn.execute_batch("BEGIN DEFERRED")
                .context("starting a read transaction")?;
        }
        Ok(Self { conn, owned })
    }
}

impl Drop for ReadTx<'_> {
    fn drop(&mut self) {
        if self.owned {
            let _ = self.conn.execute_batch("COMMIT");
        }
    }
}

pub use crate::causes::CauseReader;

/// `node`'s edges to its causes, in the order of the edge table's old key
/// (cause, kind, event id), so answers list them as before.
fn edges_of(reader: &mut CauseReader<'_>, node: i64) -> Result<Vec<EdgeInfo>> {
    let mut v = reader
        .load(node)?
        .iter()
        .map(|c| {
            let kind = EdgeKind::from_i64(c.kind as i64).context("unknown edge kind in store")?;
            Ok(EdgeInfo {
                effect: node,
                cause: c.cause,
                kind,
                event_id: c.event_id,
                time_ns: c.time_ns,
                boot: c.boot,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    v.sort_by_key(|e| (e.cause, e.kind as i64, e.event_id));
    Ok(v)
}

#[derive(Debug, Clone, Copy, Default)]
pub struct Window {
    pub since: Option<i64>,
    pub until: Option<i64>,
}

impl Window {
    pub fn admits(&self, t: i64) -> bool {
        self.since.is_none_or(|s| t >= s) && self.until.is_none_or(|u| t <= u)
    }
}

/// Node id → value with the cheap hasher.
pub type NodeMap<V> = HashMap<i64, V, std::hash::BuildHasherDefault<NodeHasher>>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Follow edges effect → cause.
    Ancestors,
    /// Follow edges cause → effect.
    Descendants,
}

fn node_info_of(r: NodeRow) -> NodeInfo {
    NodeInfo {
        node: r.node,
        kind: NodeKind::from_i64(r.kind)
            .map(|k| k.name())
            .unwrap_or("unknown"),
        boot: r.boot,
        name: r.name,
        version: r.version,
        pid: r.pid,
        exec: r.exec,
        time_ns: r.time_ns,
        time: format_ns(r.time_ns as u64),
        event_id: r.event_id,
        // Checked only when written as JSON (`Attrs::value`: text that is not
        // JSON becomes null); parsing every node's text here was 4 % of the
        // largest answer.
        attrs: r.attrs.map(Attrs),
        depth: None,
    }
}

pub fn node_info(conn: &Connection, id: i64) -> Result<Option<NodeInfo>> {
    Ok(nodes::get(conn, id)
        .context("reading a node")?
        .map(node_info_of))
}

/// The rows of many nodes (an answer's), with their depths, in id order:
/// each node block is read and decompressed once, only the wanted slots built.
fn node_infos(conn: &Connection, depth: &NodeMap<u32>) -> Result<Vec<NodeInfo>> {
    let mut ids: Vec<i64> = depth.keys().copied().collect();
    ids.sort_unstable();
    let _tx = ReadTx::begin(conn)?;
    let rows = nodes::rows(conn, &ids)?;
    if rows.len() != ids.len() {
        let found: HashSet<i64> = rows.iter().map(|r| r.node).collect();
        let missing = ids
            .iter()
            .find(|id| !found.contains(id))
            .copied()
            .unwrap_or_default();
        bail!("node {missing} referenced by an edge is missing");
    }
    Ok(rows
        .into_iter()
        .map(|r| {
            let node = r.node;
            let mut info = node_info_of(r);
            info.depth = depth.get(&node).copied();
            info
        })
        .collect())
}

/// The nodes named `name` of `kind`, ascending.
fn named(conn: &Connection, kind: NodeKind, name: &str) -> Result<Vec<NodeRow>> {
    let k = kind as i64;
    nodes::rows_where(conn, &nodes::lookup(conn, nodes::name_key(k, name))?, |r| {
        r.kind == k && r.name == name
    })
}

/// Every version of the execution that starts at node `exec`, ascending.
fn versions_of(conn: &Connection, exec: i64) -> Result<Vec<i64>> {
    let later = nodes::rows_where(conn, &nodes::lookup(conn, nodes::exec_key(exec))?, |r| {
        r.exec == Some(exec)
    })?;
    Ok(std::iter::once(exec)
        .chain(later.iter().map(|r| r.node))
        .collect())
}

fn ids_of(rows: &[NodeRow]) -> Vec<i64> {
    rows.iter().map(|r| r.node).collect()
}

const SPEC_HELP: &str = "give a node id (42 or n42), a path (/etc/passwd, /tmp/x@v2 for one version; CONTAINER:/etc/hostname in a container), pid:N, sock:ADDR, pipe:[INODE] or uid:N";

/// Resolves a user's name for something to node ids.
/// `latest`: for a path or socket, only its newest version (what "this file" means now).
/// A target given as a node id (`123`, `n123`).
fn node_id_of(spec: &str) -> Option<i64> {
    spec.strip_prefix('n').unwrap_or(spec).parse::<i64>().ok()
}

/// An event id as a user writes it: decimal, or hex after `0x`.
pub fn event_id_of(spec: &str) -> Option<i64> {
    let spec = spec.trim();
    match spec.strip_prefix("0x") {
        Some(h) => i64::from_str_radix(h, 16).ok(),
        None => spec.parse::<i64>().ok(),
    }
}

/// A target given as one version of a file: `path@vN`.
fn file_version_of(spec: &str) -> Option<(&str, i64)> {
    spec.rsplit_once("@v")
        .and_then(|(p, v)| Some((p, v.parse::<i64>().ok()?)))
}

/// Whether a target names one version (`path@vN`, a node id) rather than
/// whatever is newest (a path, `pid:N`, a socket or pipe).
fn names_a_version(spec: &str) -> bool {
    let spec = spec.trim();
    node_id_of(spec).is_some() || file_version_of(spec).is_some()
}

pub fn resolve(conn: &Connection, spec: &str, latest: bool) -> Result<Vec<i64>> {
    let spec = spec.trim();
    if let Some(id) = node_id_of(spec) {
        if node_info(conn, id)?.is_none() {
            bail!("node {id} does not exist in this store");
        }
        return Ok(vec![id]);
    }
    let found = if let Some(pid) = spec.strip_prefix("pid:") {
        let pid: i64 = pid
            .parse()
            .with_context(|| format!("{spec:?}: pid:N needs a number"))?;
        // The newest version of every execution that had this pid.
        let starts = nodes::rows_where(conn, &nodes::lookup(conn, nodes::pid_key(pid))?, |r| {
            r.kind == NodeKind::Process as i64 && r.pid == Some(pid)
        })?;
        let mut v = Vec::with_capacity(starts.len());
        for s in &starts {
            v.push(versions_of(conn, s.node)?.last().copied().unwrap_or(s.node));
        }
        v.sort_unstable();
        v
    } else if spec.starts_with("uid:") {
        ids_of(&named(conn, NodeKind::User, spec)?)
    } else {
        let (name, kind, version) = if let Some(a) = spec
            .strip_prefix("sock:")
            .or_else(|| spec.strip_prefix("socket:"))
        {
            (a, NodeKind::Socket, None)
        } else if spec.starts_with("pipe:[") {
            (spec, NodeKind::Pipe, None)
        } else if let Some((p, v)) = file_version_of(spec) {
            (p, NodeKind::File, Some(v))
        } else {
            (spec, NodeKind::File, None)
        };
        let mut rows = Vec::new();
        for name in file_names(conn, kind, name)? {
            rows.extend(named(conn, kind, &name)?);
        }
        rows.sort_by_key(|r| (r.version, r.node));
        let all = ids_of(&rows);
        match version {
            Some(v) => rows
                .iter()
                .filter(|r| r.version == v)
                .map(|r| r.node)
                .collect(),
            None if latest => all.last().copied().into_iter().collect(),
            None => all,
        }
    };
    if found.is_empty() {
        bail!("nothing in the store matches {spec:?}; {SPEC_HELP}");
    }
    Ok(found)
}

/// The stored names a user's name for a file stands for: a path is the
/// host's file; `CONTAINER:/path` (a container's name, id or id prefix) is
/// that file in the container, as the store names it (graph::file_name).
fn file_names(conn: &Connection, kind: NodeKind, name: &str) -> Result<Vec<String>> {
    let qualified = (kind == NodeKind::File && !name.starts_with('/'))
        .then(|| name.split_once(":/"))
        .flatten();
    let Some((root, path)) = qualified else {
        return Ok(vec![name.to_string()]);
    };
    if root.starts_with("ctr:") || root.starts_with("root:") {
        return Ok(vec![name.to_string()]);
    }
    let ids = containers_named(conn, root)
        .with_context(|| format!("{name:?} names a file in container {root:?}"))?;
    Ok(ids.iter().map(|id| format!("ctr:{id}:/{path}")).collect())
}

/// Process nodes for `touched-by`: every version of every matching execution.
pub fn resolve_processes(conn: &Connection, spec: &str) -> Result<Vec<i64>> {
    let start = match resolve(conn, spec, false) {
        Ok(v) => v,
        Err(e) => {
            // Also accept an executable path or command name.
            let mut v = ids_of(&named(conn, NodeKind::Process, spec)?);
            v.extend(ids_of(&named(
                conn,
                NodeKind::Process,
                &format!("[{spec}]"),
            )?));
            v.sort_unstable();
            if v.is_empty() {
                return Err(e.context(format!("no process named {spec:?} either")));
            }
            v
        }
    };
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    for n in start {
        let info = node_info(conn, n)?.context("node vanished")?;
        let Some(exec) = info.exec else {
            bail!(
                "{spec:?} resolves to a {} ({}), not a process; use pid:N or a node id",
                info.kind,
                info.name
            );
        };
        for v in versions_of(conn, exec)? {
            if seen.insert(v) {
                out.push(v);
            }
        }
    }
    Ok(out)
}

/// Breadth-first walk; returns each reached node's depth and every edge crossed.
/// This is the ancestry engine: one indexed point lookup per node (see docs/store.md).
pub fn traverse(
    conn: &Connection,
    roots: &[i64],
    dir: Direction,
    max_depth: Option<u32>,
    window: Window,
) -> Result<(NodeMap<u32>, Vec<EdgeInfo>)> {
    let _tx = ReadTx::begin(conn)?;
    let mut depth: NodeMap<u32> = roots.iter().map(|r| (*r, 0)).collect();
    let mut queue: VecDeque<i64> = roots.iter().copied().collect();
    let mut edges = Vec::new();
    if dir == Direction::Ancestors {
        let mut reader = CauseReader::new(conn);
        while let Some(n) = queue.pop_front() {
            let d = depth[&n];
            if max_depth.is_some_and(|m| d >= m) {
                continue;
            }
            for c in reader.load(n)? {
                if !window.admits(c.time_ns) {
                    continue;
                }
                let kind =
                    EdgeKind::from_i64(c.kind as i64).context("unknown edge kind in store")?;
                edges.push(EdgeInfo {
                    effect: n,
                    cause: c.cause,
                    kind,
                    event_id: c.event_id,
                    time_ns: c.time_ns,
                    boot: c.boot,
                });
                if let std::collections::hash_map::Entry::Vacant(v) = depth.entry(c.cause) {
                    v.insert(d + 1);
                    queue.push_back(c.cause);
                }
            }
        }
        return Ok((depth, edges));
    }
    let mut effects = EffectReader::new(conn);
    while let Some(n) = queue.pop_front() {
        let d = depth[&n];
        if max_depth.is_some_and(|m| d >= m) {
            continue;
        }
        for e in effects.of(n)? {
            if !window.admits(e.time_ns) {
                continue;
            }
            let kind = EdgeKind::from_i64(e.kind as i64).context("unknown edge kind in store")?;
            edges.push(EdgeInfo {
                effect: e.effect,
                cause: n,
                kind,
                event_id: e.event_id,
                time_ns: e.time_ns,
                boot: e.boot,
            });
            if let std::collections::hash_map::Entry::Vacant(v) = depth.entry(e.effect) {
                v.insert(d + 1);
                queue.push_back(e.effect);
            }
        }
    }
    Ok((depth, edges))
}

pub(crate) fn losses_for(
    conn: &Connection,
    boots: &HashSet<i64>,
    span: Option<(i64, i64)>,
) -> Result<Vec<LossNote>> {
    let Some((lo, hi)) = span else {
        return Ok(vec![]);
    };
    let mut st = conn.prepare_cached(
        "SELECT boot, cpu, category, count, start_ns, end_ns FROM losses WHERE start_ns <= ?2 AND end_ns >= ?1 ORDER BY start_ns, cpu",
    )?;
    let all = st
        .query_map(params![lo, hi], |r| {
            Ok(LossNote {
                host: None,
                boot: r.get(0)?,
                cpu: r.get(1)?,
                category: r.get(2)?,
                count: r.get(3)?,
                start_ns: r.get(4)?,
                end_ns: r.get(5)?,
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(all
        .into_iter()
        .filter(|l| boots.contains(&l.boot))
        .collect())
}

/// How far in time a lost event could still have changed an answer. A
/// lost event leaves no edge, so the edges found do not bound it: a cause
/// of the target may have been lost at any time before the target was
/// written, and a later reader or writer at any time after the target
/// appeared. (Before, only the found edges' span counted, and a who-touched
/// of a secret whose reader was lost answered "complete".)
#[derive(Clone, Copy)]
pub enum Reach {
    /// The edges found (a path: its own links are what it claims).
    Found,
    /// From the window's start (or the recording's) to the targets' time:
    /// the causes of one version (`path@vN`, a node id).
    Before(Window),
    /// The whole window: the causes of the newest version of a path or a
    /// process, which a lost later write or exec may have replaced.
    All(Window),
    /// From the targets' time to the window's end (or the recording's).
    After(Window),
}

/// `nodes` ordered by (depth, id). The sort runs on small keys and each node
/// moves once: sorting the nodes themselves moved them again at every pass
/// (a fifth of the largest answer's time).
fn by_depth(nodes: Vec<NodeInfo>) -> Vec<NodeInfo> {
    let mut order: Vec<(Option<u32>, i64, usize)> = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (n.depth, n.node, i))
        .collect();
    order.sort_unstable();
    let mut slots: Vec<Option<NodeInfo>> = nodes.into_iter().map(Some).collect();
    order
        .into_iter()
        .filter_map(|(_, _, i)| slots[i].take())
        .collect()
}

/// The first and last of `times`.
pub fn span_of(times: impl IntoIterator<Item = i64>) -> Option<(i64, i64)> {
    times.into_iter().fold(None, |acc, t| {
        Some(acc.map_or((t, t), |(a, b): (i64, i64)| (a.min(t), b.max(t))))
    })
}

impl Reach {
    /// The time range a lost event would have to fall in to change an
    /// answer spanning `span` about targets made at `targets`.
    pub fn question(
        self,
        span: Option<(i64, i64)>,
        targets: impl Iterator<Item = i64> + Clone,
    ) -> Option<(i64, i64)> {
        match self {
            Reach::Found => span,
            Reach::Before(w) => targets.max().map(|t| {
                (
                    w.since.unwrap_or(i64::MIN),
                    span.map_or(t, |(_, hi)| hi.max(t)),
                )
            }),
            Reach::All(w) => Some((w.since.unwrap_or(i64::MIN), w.until.unwrap_or(i64::MAX))),
            Reach::After(w) => targets.min().map(|t| {
                (
                    span.map_or(t, |(lo, _)| lo.min(t)),
                    w.until.unwrap_or(i64::MAX),
                )
            }),
        }
        .or(span)
    }
}

/// What a query walked: where it started, each node's depth, the edges and
/// the rows of touches it found.
struct Walk {
    start: Vec<i64>,
    depth: NodeMap<u32>,
    edges: Vec<EdgeInfo>,
    rows: Vec<TouchRow>,
}

fn finish(
    conn: &Connection,
    query: String,
    walk: Walk,
    path: Option<String>,
    reach: Reach,
) -> Result<Answer> {
    let Walk {
        start,
        depth,
        edges,
        rows,
    } = walk;
    let nodes = by_depth(node_infos(conn, &depth)?);
    // The span is when the answer's causal facts happened: its edge times. A
    // long-lived node (a user, a header first read hours ago) does not stretch
    // it back to its creation; a lone node with no edges spans its own creation.
    let times: Vec<i64> = if edges.is_empty() {
        nodes.iter().map(|n| n.time_ns).collect()
    } else {
        edges.iter().map(|e| e.time_ns).collect()
    };
    let span = span_of(times);
    let boots: HashSet<i64> = nodes
        .iter()
        .map(|n| n.boot)
        .chain(edges.iter().map(|e| e.boot))
        .collect();
    let question = reach.question(
        span,
        nodes
            .iter()
            .filter(|n| start.contains(&n.node))
            .map(|n| n.time_ns),
    );
    let losses = losses_for(conn, &boots, question)?;
    let containers = containers_of(conn, &nodes)?;
    Ok(Answer {
        query,
        start,
        nodes,
        edges,
        rows,
        path,
        span_ns: span,
        complete: losses.is_empty(),
        losses,
        containers,
        notes: vec![],
    })
}

pub fn ancestry(
    conn: &Connection,
    spec: &str,
    dir: Direction,
    max_depth: Option<u32>,
    window: Window,
) -> Result<Answer> {
    let _tx = ReadTx::begin(conn)?;
    let start = resolve(conn, spec, true)?;
    let (depth, edges) = traverse(conn, &start, dir, max_depth, window)?;
    let what = if dir == Direction::Ancestors {
        "ancestors"
    } else {
        "descendants"
    };
    let reach = match dir {
        Direction::Ancestors if names_a_version(spec) => Reach::Before(window),
        Direction::Ancestors => Reach::All(window),
        Direction::Descendants => Reach::After(window),
    };
    finish(
        conn,
        format!("{what} {spec}"),
        Walk {
            start,
            depth,
            edges,
            rows: vec![],
        },
        None,
        reach,
    )
}

/// Shortest causal path between two things: `a` depends on `b` or `b` on `a`.
pub fn path(conn: &Connection, a: &str, b: &str) -> Result<Answer> {
    let from = resolve(conn, a, false)?;
    let to = resolve(conn, b, false)?;
    for (src, dst, label) in [
        (&from, &to, format!("{a} depends on {b}")),
        (&to, &from, format!("{b} depends on {a}")),
    ] {
        if let Some(edges) = shortest(conn, src, dst)? {
            let mut depth = NodeMap::default();
            for (i, e) in edges.iter().enumerate() {
                depth.entry(e.effect).or_insert(i as u32);
                depth.entry(e.cause).or_insert(i as u32 + 1);
            }
            if edges.is_empty() {
                depth.insert(src[0], 0);
            }
            let start = vec![edges.first().map(|e| e.effect).unwrap_or(src[0])];
            return finish(
                conn,
                format!("path {a} {b}"),
                Walk {
                    start,
                    depth,
                    edges,
                    rows: vec![],
                },
                Some(label),
                Reach::Found,
            );
        }
    }
    let mut depth = NodeMap::default();
    depth.insert(from[from.len() - 1], 0);
    depth.insert(to[to.len() - 1], 0);
    finish(
        conn,
        format!("path {a} {b}"),
        Walk {
            start: vec![],
            depth,
            edges: vec![],
            rows: vec![],
        },
        Some("no causal path".into()),
        Reach::Found,
    )
}

fn shortest(conn: &Connection, src: &[i64], dst: &[i64]) -> Result<Option<Vec<EdgeInfo>>> {
    let _tx = ReadTx::begin(conn)?;
    let targets: HashSet<i64> = dst.iter().copied().collect();
    let mut reader = CauseReader::new(conn);
    let mut parent: HashMap<i64, Option<EdgeInfo>> = src.iter().map(|s| (*s, None)).collect();
    let mut queue: VecDeque<i64> = src.iter().copied().collect();
    while let Some(n) = queue.pop_front() {
        if targets.contains(&n) {
            let mut out = Vec::new();
            let mut cur = n;
            while let Some(Some(e)) = parent.get(&cur) {
                out.push(*e);
                cur = e.effect;
            }
            out.reverse();
            return Ok(Some(out));
        }
        for e in edges_of(&mut reader, n)? {
            if parent.contains_key(&e.cause) {
                continue;
            }
            parent.insert(e.cause, Some(e));
            queue.push_back(e.cause);
        }
    }
    Ok(None)
}

/// `node`'s edges of `kind` to its effects.
fn effects_of_kind(
    effects: &mut EffectReader<'_>,
    node: i64,
    kind: EdgeKind,
) -> Result<Vec<EdgeInfo>> {
    Ok(effects
        .of(node)?
        .iter()
        .filter(|e| e.kind == kind as u8)
        .map(|e| EdgeInfo {
            effect: e.effect,
            cause: node,
            kind,
            event_id: e.event_id,
            time_ns: e.time_ns,
            boot: e.boot,
        })
        .collect())
}

fn is_process(nodes: &mut NodeReader<'_>, node: i64) -> Result<bool> {
    Ok(nodes
        .get(node)?
        .is_some_and(|r| r.kind == NodeKind::Process as i64))
}

/// What a process version read (artifacts it `used`, not the executable's
/// process edges), from its cause list.
fn reads_of_proc(
    nodes: &mut NodeReader<'_>,
    reader: &mut CauseReader<'_>,
    node: i64,
) -> Result<Vec<EdgeInfo>> {
    let mut out = Vec::new();
    for e in edges_of(reader, node)? {
        if e.kind == EdgeKind::Used && !is_process(nodes, e.cause)? {
            out.push(e);
        }
    }
    Ok(out)
}

/// Who wrote an artifact version, from its cause list.
fn writer_of(reader: &mut CauseReader<'_>, node: i64) -> Result<Vec<EdgeInfo>> {
    Ok(edges_of(reader, node)?
        .into_iter()
        .filter(|e| e.kind == EdgeKind::WasGeneratedBy)
        .collect())
}

fn touch_answer(
    conn: &Connection,
    query: String,
    start: Vec<i64>,
    edges: Vec<EdgeInfo>,
    window: Window,
) -> Result<Answer> {
    let mut rows: Vec<TouchRow> = edges
        .iter()
        .map(|e| {
            let (action, process, object) = if e.kind == EdgeKind::Used {
                ("read", e.effect, e.cause)
            } else {
                ("wrote", e.cause, e.effect)
            };
            TouchRow {
                time_ns: e.time_ns,
                time: format_ns(e.time_ns as u64),
                action,
                process,
                object,
                event_id: e.event_id,
            }
        })
        .collect();
    rows.sort_by_key(|r| (r.time_ns, r.event_id));
    let mut depth: NodeMap<u32> = start.iter().map(|s| (*s, 0)).collect();
    for e in &edges {
        depth.entry(e.effect).or_insert(1);
        depth.entry(e.cause).or_insert(1);
    }
    finish(
        conn,
        query,
        Walk {
            start,
            depth,
            edges,
            rows,
        },
        None,
        Reach::After(window),
    )
}

/// Every artifact version the process (all versions of its executions) read or wrote.
pub fn touched_by(conn: &Connection, spec: &str, window: Window) -> Result<Answer> {
    let procs = resolve_processes(conn, spec)?;
    let _tx = ReadTx::begin(conn)?;
    let mut reader = CauseReader::new(conn);
    let mut nodes = NodeReader::new(conn);
    let mut effects = EffectReader::new(conn);
    let mut edges = Vec::new();
    for p in &procs {
        edges.extend(reads_of_proc(&mut nodes, &mut reader, *p)?);
        for e in effects_of_kind(&mut effects, *p, EdgeKind::WasGeneratedBy)? {
            if !is_process(&mut nodes, e.effect)? {
                edges.push(e);
            }
        }
    }
    edges.retain(|e| window.admits(e.time_ns));
    touch_answer(conn, format!("touched-by {spec}"), procs, edges, window)
}

/// Every process that read or wrote any version of the file (or socket/pipe).
pub fn who_touched(conn: &Connection, spec: &str, window: Window) -> Result<Answer> {
    let versions = resolve(conn, spec, false)?;
    let _tx = ReadTx::begin(conn)?;
    let mut reader = CauseReader::new(conn);
    let mut effects = EffectReader::new(conn);
    let mut edges = Vec::new();
    for v in &versions {
        edges.extend(effects_of_kind(&mut effects, *v, EdgeKind::Used)?);
        edges.extend(writer_of(&mut reader, *v)?);
    }
    edges.retain(|e| window.admits(e.time_ns));
    touch_answer(conn, format!("who-touched {spec}"), versions, edges, window)
}

/// A cheap hasher for node ids (SipHash costs more than the rest of a BFS step).
#[derive(Default, Clone, Copy)]
pub struct NodeHasher(u64);
impl std::hash::Hasher for NodeHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0.rotate_left(5) ^ *b as u64).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
        }
    }
    fn write_i64(&mut self, v: i64) {
        self.0 = (v as u64)
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
            .rotate_left(29);
    }
}
pub type NodeSet = HashSet<i64, std::hash::BuildHasherDefault<NodeHasher>>;

/// The ancestor set only (no edges, no depths): the benchmark's "ancestry query".
/// Same walk as [`traverse`], without building the answer.
pub fn ancestor_ids(conn: &Connection, root: i64) -> Result<NodeSet> {
    let _tx = ReadTx::begin(conn)?;
    let mut reader = CauseReader::new(conn);
    let mut seen = NodeSet::default();
    seen.insert(root);
    let mut stack = vec![root];
    while let Some(n) = stack.pop() {
        for c in reader.load(n)? {
            if seen.insert(c.cause) {
                stack.push(c.cause);
            }
        }
    }
    seen.remove(&root);
    Ok(seen)
}

#[cfg(test)]
#[path = "query_tests.rs"]
mod tests;

/// The containers of `nodes`' processes, with their names from the store.
fn containers_of(
    conn: &Connection,
    nodes: &[NodeInfo],
) -> Result<std::collections::BTreeMap<String, Option<String>>> {
    let mut out = std::collections::BTreeMap::new();
    for n in nodes {
        if let Some(id) = n.container() {
            out.entry(id).or_insert(None);
        }
    }
    for (id, name) in out.iter_mut() {
        *name = conn
            .query_row(
                "SELECT name FROM containers WHERE id = ?1",
                [id.as_str()],
                |r| r.get::<_, Option<String>>(0),
            )
            .optional()
            .context("reading the containers table")?
            .flatten();
    }
    Ok(out)
}

/// The containers `spec` names: an id, an id's first 12 or more hex digits,
/// or a name (docs/containers.md).
pub fn containers_named(conn: &Connection, spec: &str) -> Result<Vec<String>> {
    let mut st = conn.prepare_cached(
        "SELECT id FROM containers WHERE id = ?1 OR name = ?1 OR container_name = ?1 \
         OR (length(?1) >= 12 AND substr(id, 1, length(?1)) = lower(?1)) ORDER BY id",
    )?;
    let ids: Vec<String> = st
        .query_map([spec], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    if ids.is_empty() {
        let mut st = conn.prepare_cached(
            "SELECT COALESCE(name, substr(id, 1, 12)) FROM containers ORDER BY 1 LIMIT 10",
        )?;
        let known: Vec<String> = st
            .query_map([], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        if known.is_empty() {
            bail!("container {spec}: the store has no containers (no event came from one)");
        }
        bail!(
            "container {spec}: no such container; the store has {}",
            known.join(", ")
        );
    }
    Ok(ids)
}

/// Narrows an answer to the processes of the containers `ids`, the nodes
/// their edges join them to (what they read and wrote, the host process that
/// started them), and the query's start; says so in the answer's title.
pub fn only_containers(a: &mut Answer, ids: &[String], spec: &str) {
    let in_container = |n: &NodeInfo| {
        n.node_kind() == NodeKind::Process && n.container().is_some_and(|c| ids.contains(&c))
    };
    let procs: HashSet<i64> = a
        .nodes
        .iter()
        .filter(|n| in_container(n))
        .map(|n| n.node)
        .collect();
    let mut keep: HashSet<i64> = procs.clone();
    keep.extend(a.start.iter().copied());
    for e in &a.edges {
        if procs.contains(&e.cause) || procs.contains(&e.effect) {
            keep.insert(e.cause);
            keep.insert(e.effect);
        }
    }
    for r in &a.rows {
        if procs.contains(&r.process) {
            keep.insert(r.object);
        }
    }
    a.nodes.retain(|n| keep.contains(&n.node));
    a.edges.retain(|e| {
        keep.contains(&e.cause)
            && keep.contains(&e.effect)
            && (procs.contains(&e.cause) || procs.contains(&e.effect))
    });
    a.rows.retain(|r| procs.contains(&r.process));
    a.containers.retain(|id, _| ids.contains(id));
    a.query = format!(
        "{} (container {spec}: {} of its processes)",
        a.query,
        procs.len()
    );
}

//! Turns events into provenance nodes and edges.
//!
//! Acyclicity comes from versioning: a node that already serves as a cause
//! of something ("frozen") never gains a new cause; instead a new version is
//! made (file/socket/pipe: a new version wasDerivedFrom the old; process: a
//! new version wasInformedBy the old, same execution). Every edge therefore
//! points from a node frozen later to one frozen earlier, so no cycle can form.
//! Writes make a new artifact version unless the same process version wrote
//! the current one and nobody has read it since (collapses write bursts).

use crate::causes::CauseEntry;
use crate::effects::{Edge, EdgeBatch};
use crate::nodes::NodeRow;
use crate::record::Event;
use crate::schema::{EdgeKind, NodeKind};
use anyhow::{Context, Result};
use rusqlite::{params, Connection, OptionalExtension};
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::collections::{HashMap, HashSet};

/// The graph's maps: keyed by paths and addresses that traced programs
/// choose, so hashed with a randomly keyed hash (aHash; faster than the
/// standard SipHash, and unlike FxHash its collisions cannot be forced).
pub(crate) type Map<K, V> = HashMap<K, V, ahash::RandomState>;
pub(crate) type Set<K> = HashSet<K, ahash::RandomState>;

/// The connection the graph reads its saved state from, for a run of
/// [`Graph::apply`] calls.
pub struct Sql<'c> {
    pub conn: &'c Connection,
}

impl<'c> Sql<'c> {
    pub fn new(conn: &'c Connection) -> Result<Self> {
        Ok(Self { conn })
    }
}

// A process node's `attrs`, serialized from a struct rather than built as
// a `json!` map; fields in alphabetical order, as the map wrote them.
#[derive(Serialize)]
struct FirstSeenAttrs<'a> {
    comm: &'a str,
    first_seen: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    container: Option<&'a str>,
}
#[derive(Serialize)]
struct ForkAttrs<'a> {
    comm: Option<&'a str>,
    parent_pid: u32,
    /// The parent's container (the fork's event is the parent's).
    #[serde(skip_serializing_if = "Option::is_none")]
    container: Option<&'a str>,
}
#[derive(Serialize)]
struct ExecAttrs<'a> {
    argv: Option<&'a [String]>,
    comm: Option<&'a str>,
    euid: Option<u32>,
    uid: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    container: Option<&'a str>,
}

/// The id of the container an event's process runs in.
fn container_id(ev: &Event) -> Option<&str> {
    ev.container.as_deref().map(|c| c.id.as_str())
}

/// The name of the file at `path` as `ev`'s process sees it. Paths are
/// relative to the process's root: under the host's, the path is the name;
/// under another (a container's, a chroot) the name says which root, so a
/// container's /etc/hostname is not taken for the host's
/// (docs/containers.md): `ctr:ID:/etc/hostname` in a container,
/// `root:MAJOR:MINOR:INODE:/etc/passwd` in a chroot.
pub fn file_name(ev: &Event, path: &str) -> String {
    match (ev.root, container_id(ev)) {
        (None, _) => path.to_string(),
        (Some(_), Some(c)) => format!("ctr:{c}:{path}"),
        (Some((dev, ino)), None) => format!("root:{}:{}:{ino}:{path}", dev >> 20, dev & 0xfffff),
    }
}

/// The key of the file at `path` as `ev`'s process sees it: the path
/// itself, borrowed, under the host's root.
fn file_key<'a>(ev: &Event, path: &'a str) -> Key<'a> {
    let name = match (ev.root, container_id(ev)) {
        (None, _) => Cow::Borrowed(path),
        _ => Cow::Owned(file_name(ev, path)),
    };
    Key {
        kind: NodeKind::File as i64,
        scope: 0,
        name,
    }
}

/// How the collector names a memfd (its dentry's name, `memfd:NAME`).
const MEMFD: &str = "memfd:";

/// What follows a memfd's name in its key: the inode that makes it its own.
fn memfd_inode(ev: &Event) -> Option<String> {
    Some(format!(":[{}:{}]", ev.dev?, ev.inode?))
}

/// The key of the memfd `name` that `ev` acted on. A memfd has no path,
/// and any number of them may share a name: its inode (which every event
/// on it carries) makes the name its own, for this boot. None for another
/// name, or without an inode (then nothing says which memfd it was).
fn memfd_key(boot: i64, ev: &Event, name: &str) -> Option<Key<'static>> {
    let inode = memfd_inode(ev).filter(|_| name.starts_with(MEMFD))?;
    Some(Key::new(NodeKind::File, boot, format!("{name}{inode}")))
}

/// Does `path` name a file in the tree? Not the names of pipes, sockets,
/// anonymous inodes and memfds, nor d_path's "/" for a file with no place
/// in the tree.
fn names_a_file(path: &str) -> bool {
    path != "/"
        && ![MEMFD, "pipe:[", "socket:[", "anon_inode:"]
            .iter()
            .any(|k| path.starts_with(k))
}

/// Records `ev` alone as lost in `category` (its meaning did not reach the
/// graph whole), so that an answer it may change says it may be incomplete.
pub(crate) fn put_event_loss(db: &Connection, boot: i64, category: &str, ev: &Event) -> Result<()> {
    db.prepare_cached(
        "INSERT OR IGNORE INTO losses(boot, cpu, category, first_seq, last_seq, count, start_ns, end_ns) VALUES(?1,?2,?3,?4,?4,1,?5,?5)",
    )?
    .execute(params![
        boot,
        ev.cpu,
        category,
        (ev.id & crate::blocks::SEQ_MASK) as i64,
        ev.time_ns as i64
    ])?;
    Ok(())
}

fn attrs_json(a: &impl Serialize) -> String {
    serde_json::to_string(a).expect("attributes serialize")
}

/// Clean cached heads are dropped when the cache grows past this; they are in the `heads` table.
const HEAD_CACHE_MAX: usize = 4_000_000;

#[derive(Clone, PartialEq, Eq, Hash, Debug, Serialize, Deserialize)]
pub struct ObjKey {
    pub kind: i64,
    /// The boot for boot-local objects (pipes, local socket inodes); 0 for files, endpoints, users.
    pub scope: i64,
    pub name: String,
}

/// An object's key as an event names it: borrowed from the event where it
/// can be (a path, an address), so that looking it up builds nothing; an
/// [`ObjKey`] is made only when a head or an fd table keeps it.
#[derive(Clone, Debug)]
struct Key<'a> {
    kind: i64,
    scope: i64,
    name: Cow<'a, str>,
}

impl<'a> Key<'a> {
    fn new(kind: NodeKind, scope: i64, name: impl Into<Cow<'a, str>>) -> Self {
        Self {
            kind: kind as i64,
            scope,
            name: name.into(),
        }
    }
    fn owned(k: ObjKey) -> Self {
        Self {
            kind: k.kind,
            scope: k.scope,
            name: Cow::Owned(k.name),
        }
    }
    fn into_owned(self) -> ObjKey {
        ObjKey {
            kind: self.kind,
            scope: self.scope,
            name: self.name.into_owned(),
        }
    }
}

/// The cached heads: each in a slot of a vector, found through a table of
/// slot numbers hashed by (kind, scope, name). An event's key is hashed and
/// compared once ([`Heads::find`]); reading, freezing and replacing its head
/// then go by slot, and a changed slot is marked dirty in place (no second
/// map of dirty heads).
struct Heads {
    table: hashbrown::HashTable<u32>,
    slots: Vec<Slot>,
    /// Slots changed in the open batch (each once), written by the flush.
    dirty: Vec<u32>,
    hasher: ahash::RandomState,
}

struct Slot {
    key: ObjKey,
    head: Head,
    dirty: bool,
}

impl Heads {
    fn new(hasher: ahash::RandomState) -> Self {
        Self {
            table: hashbrown::HashTable::new(),
            slots: Vec::new(),
            dirty: Vec::new(),
            hasher,
        }
    }
    fn hash(hasher: &ahash::RandomState, kind: i64, scope: i64, name: &str) -> u64 {
        hasher.hash_one((kind, scope, name))
    }
    fn find(&self, k: &Key<'_>) -> Option<u32> {
        let hash = Self::hash(&self.hasher, k.kind, k.scope, &k.name);
        let slots = &self.slots;
        self.table
            .find(hash, |&i| {
                let s = &slots[i as usize].key;
                s.kind == k.kind && s.scope == k.scope && s.name == *k.name
            })
            .copied()
    }
    /// Adds a head for a key not in the table; returns its slot.
    fn insert(&mut self, k: &Key<'_>, head: Head, dirty: bool) -> u32 {
        let i = u32::try_from(self.slots.len()).expect("fewer than 2^32 cached heads");
        let hash = Self::hash(&self.hasher, k.kind, k.scope, &k.name);
        self.slots.push(Slot {
            key: k.clone().into_owned(),
            head,
            dirty,
        });
        let (slots, hasher) = (&self.slots, &self.hasher);
        self.table.insert_unique(hash, i, |&j| {
            let s = &slots[j as usize].key;
            Self::hash(hasher, s.kind, s.scope, &s.name)
        });
        if dirty {
            self.dirty.push(i);
        }
        i
    }
    fn get(&self, i: u32) -> Head {
        self.slots[i as usize].head
    }
    fn set(&mut self, i: u32, h: Head) {
        let s = &mut self.slots[i as usize];
        s.head = h;
        if !s.dirty {
            s.dirty = true;
            self.dirty.push(i);
        }
    }
    fn len(&self) -> usize {
        self.slots.len()
    }
    fn clear(&mut self) {
        self.table.clear();
        self.slots.clear();
        self.dirty.clear();
    }
}

#[derive(Clone, Copy, Debug)]
struct Head {
    node: i64,
    version: i64,
    frozen: bool,
    /// The process node that wrote this version (0: none seen).
    generator: i64,
    deleted: bool,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct Proc {
    node: i64,
    exec: i64,
    version: i64,
    frozen: bool,
    euid: Option<u32>,
    name: String,
    /// The first node of this pid's lineage when it was first seen without a
    /// fork (0: it came from a fork we saw).
    #[serde(default)]
    root: i64,
    fds: Map<i32, ObjKey>,
    /// Causes already linked to the current version (avoids duplicate edges;
    /// persisted so a resumed ingest builds exactly the same graph).
    causes: Set<i64>,
}

/// Counters about events the graph could not use; reported by the ingest summary.
#[derive(Default, Debug, Clone, Serialize)]
pub struct GraphStats {
    pub nodes: u64,
    pub edges: u64,
    /// read/write events whose object could be found neither by path, address nor fd.
    pub unresolved_io: u64,
    /// events with no graph meaning (kept raw only), by syscall name would be too much; a total.
    pub no_graph_effect: u64,
}

pub struct Graph {
    next_node: i64,
    procs: Map<(i64, u32), Proc>,
    /// Cached heads; the ones changed in the open batch are marked dirty
    /// there, and the flush writes them sorted by key.
    heads: Heads,
    dirty_procs: Set<(i64, u32)>,
    /// True while every persisted head/proc is also cached, so a cache miss needs no lookup.
    all_cached: bool,
    /// Cause entries added in the open batch, with their effect, in the order made.
    pending_causes: Vec<(i64, CauseEntry)>,
    /// Nodes made in the open batch, in id order.
    pending_nodes: Vec<NodeRow>,
    node_codec: crate::nodes::Codec,
    /// Edges made in the open batch (by cause).
    pending_edges: EdgeBatch,
    /// Boots whose stream records births where they happen (`sched:process_fork`):
    /// there the clone/fork/vfork records, written when the parent's call
    /// returns (after the child ran, for vfork), add nothing.
    fork_hook_boots: Set<i64>,
    /// What the `containers` table holds of each container seen in this
    /// ingest: a row is written only when an event tells more.
    containers: Map<String, crate::record::ContainerRef>,
    /// The keys of every process's fd table and cause set: drawn once
    /// (randomly) and cloned, as drawing a fresh key per map cost more than the map.
    hasher: ahash::RandomState,
    pub stats: GraphStats,
    /// Copies of the nodes and edges each flush writes, for a caller that
    /// keeps the graph in another store too (the fleet's ClickHouse); None:
    /// not asked for.
    made: Option<Made>,
}

/// Nodes and edges the graph wrote since they were last taken
/// ([`Graph::keep_made`], [`Graph::take_made`]).
#[derive(Default, Debug)]
pub struct Made {
    pub nodes: Vec<NodeRow>,
    pub edges: Vec<Edge>,
}

fn is_read(s: &str) -> bool {
    matches!(
        s,
        "read"
            | "pread64"
            | "readv"
            | "preadv"
            | "preadv2"
            | "recv"
            | "recvfrom"
            | "recvmsg"
            | "recvmmsg"
    )
}
fn is_write(s: &str) -> bool {
    matches!(
        s,
        "write"
            | "pwrite64"
            | "writev"
            | "pwritev"
            | "pwritev2"
            | "send"
            | "sendto"
            | "sendmsg"
            | "sendmmsg"
            | "ftruncate"
            | "truncate"
    )
}

impl Graph {
    pub fn load(db: &Connection) -> Result<Self> {
        let next_node = crate::nodes::next_node(db)?;
        let heads: i64 = db.query_row("SELECT EXISTS(SELECT 1 FROM heads)", [], |r| r.get(0))?;
        let procs: i64 = db.query_row("SELECT EXISTS(SELECT 1 FROM procs)", [], |r| r.get(0))?;
        let hasher = ahash::RandomState::new();
        Ok(Self {
            next_node,
            procs: Map::default(),
            heads: Heads::new(hasher.clone()),
            dirty_procs: Set::default(),
            all_cached: heads == 0 && procs == 0,
            pending_causes: Vec::new(),
            pending_nodes: Vec::new(),
            node_codec: crate::nodes::Codec::new()?,
            pending_edges: EdgeBatch::default(),
            fork_hook_boots: Set::default(),
            containers: Map::default(),
            hasher,
            stats: GraphStats::default(),
            made: None,
        })
    }

    /// From now on, keep a copy of what each flush writes (see [`Made`]).
    pub fn keep_made(&mut self) {
        self.made.get_or_insert_with(Made::default);
    }

    /// What the flushes wrote since the last call (committed once the
    /// batch's transaction is).
    pub fn take_made(&mut self) -> Made {
        self.made.as_mut().map(std::mem::take).unwrap_or_default()
    }

    /// Writes dirty builder state; call inside the batch transaction before commit.
    pub fn flush(&mut self, db: &Connection) -> Result<()> {
        if let Some(m) = self.made.as_mut() {
            m.nodes.extend_from_slice(&self.pending_nodes);
            m.edges.extend_from_slice(self.pending_edges.edges());
        }
        crate::nodes::write_pending(db, &mut self.node_codec, &mut self.pending_nodes)?;
        crate::causes::write_pending(db, &mut self.pending_causes)?;
        self.pending_edges.write(db)?;
        let mut put_head = db.prepare_cached(
            "INSERT OR REPLACE INTO heads(kind, scope, name, node, version, frozen, generator, deleted) VALUES(?1,?2,?3,?4,?5,?6,?7,?8)",
        )?;
        // In key order: consecutive rows land on the same b-tree pages.
        let mut dirty = std::mem::take(&mut self.heads.dirty);
        let slots = &mut self.heads.slots;
        let key_of = |i: &u32| {
            let k = &slots[*i as usize].key;
            (k.kind, k.scope, k.name.as_bytes())
        };
        dirty.sort_unstable_by(|a, b| key_of(a).cmp(&key_of(b)));
        for &i in &dirty {
            let Slot {
                key,
                head: h,
                dirty,
            } = &mut slots[i as usize];
            put_head.execute(params![
                key.kind,
                key.scope,
                key.name,
                h.node,
                h.version,
                h.frozen,
                h.generator,
                h.deleted
            ])?;
            *dirty = false;
        }
        dirty.clear();
        self.heads.dirty = dirty;
        let mut put_proc =
            db.prepare_cached("INSERT OR REPLACE INTO procs(boot, pid, state) VALUES(?1,?2,?3)")?;
        let mut del_proc = db.prepare_cached("DELETE FROM procs WHERE boot = ?1 AND pid = ?2")?;
        for (boot, pid) in self.dirty_procs.drain() {
            match self.procs.get(&(boot, pid)) {
                Some(p) => put_proc.execute(params![boot, pid, serde_json::to_string(p)?])?,
                None => del_proc.execute(params![boot, pid])?,
            };
        }
        if self.heads.len() > HEAD_CACHE_MAX {
            self.heads.clear();
            self.all_cached = false;
        }
        Ok(())
    }

    /// Forgets unflushed state (after a failed batch was rolled back).
    pub fn reset_cache(&mut self, db: &Connection) -> Result<()> {
        let stats = std::mem::take(&mut self.stats);
        let keeping = self.made.is_some();
        *self = Self::load(db)?;
        self.all_cached = false;
        self.stats = stats;
        if keeping {
            // What was taken was committed; what was not is rolled back with the batch.
            self.keep_made();
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)] // one column each; a struct would only rename them
    fn new_node(
        &mut self,
        _db: &mut Sql<'_>,
        kind: NodeKind,
        boot: i64,
        name: &str,
        version: i64,
        proc: Option<(u32, Option<i64>)>,
        ev: &Event,
        attrs: Option<String>,
    ) -> Result<i64> {
        let node = self.next_node;
        self.next_node += 1;
        let (pid, exec) = match proc {
            Some((pid, exec)) => (Some(pid), Some(exec.unwrap_or(node))),
            None => (None, None),
        };
        self.pending_nodes.push(NodeRow {
            node,
            kind: kind as i64,
            boot,
            name: name.to_owned(),
            version,
            pid: pid.map(i64::from),
            exec,
            time_ns: ev.time_ns as i64,
            event_id: ev.id as i64,
            attrs,
        });
        self.stats.nodes += 1;
        Ok(node)
    }

    fn edge(
        &mut self,
        _db: &mut Sql<'_>,
        effect: i64,
        cause: i64,
        kind: EdgeKind,
        boot: i64,
        ev: &Event,
    ) -> Result<()> {
        let (event_id, time_ns) = (ev.id as i64, ev.time_ns as i64);
        if self.pending_edges.add(Edge {
            cause,
            effect,
            kind: kind as u8,
            event_id,
            time_ns,
            boot,
        }) {
            self.pending_causes.push((
                effect,
                CauseEntry {
                    cause,
                    kind: kind as u8,
                    event_id,
                    time_ns,
                    boot,
                },
            ));
            self.stats.edges += 1;
        }
        Ok(())
    }

    /// The slot of the key's head, loaded into the cache if saved; None: no head.
    fn head(&mut self, db: &mut Sql<'_>, key: &Key<'_>) -> Result<Option<u32>> {
        if let Some(i) = self.heads.find(key) {
            return Ok(Some(i));
        }
        if self.all_cached {
            return Ok(None);
        }
        let h = db
            .conn
            .prepare_cached(
                "SELECT node, version, frozen, generator, deleted FROM heads WHERE kind = ?1 AND scope = ?2 AND name = ?3",
            )?
            .query_row(params![key.kind, key.scope, &*key.name], |r| {
                Ok(Head { node: r.get(0)?, version: r.get(1)?, frozen: r.get(2)?, generator: r.get(3)?, deleted: r.get(4)? })
            })
            .optional()?;
        Ok(h.map(|h| self.heads.insert(key, h, false)))
    }

    /// Sets the key's head: in its slot `at` (what [`Graph::head`] returned
    /// for it), or in a new slot if it had none.
    fn set_head(&mut self, key: &Key<'_>, at: Option<u32>, h: Head) {
        match at {
            Some(i) => self.heads.set(i, h),
            None => {
                self.heads.insert(key, h, true);
            }
        }
    }

    fn cached_proc(&mut self, db: &mut Sql<'_>, boot: i64, pid: u32) -> Result<bool> {
        if self.procs.contains_key(&(boot, pid)) {
            return Ok(true);
        }
        if self.all_cached {
            return Ok(false);
        }
        let state: Option<String> = db
            .conn
            .prepare_cached("SELECT state FROM procs WHERE boot = ?1 AND pid = ?2")?
            .query_row(params![boot, pid], |r| r.get(0))
            .optional()?;
        match state {
            Some(s) => {
                let p: Proc = serde_json::from_str(&s).context("decoding saved process state")?;
                self.procs.insert((boot, pid), p);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn proc_mut(&mut self, boot: i64, pid: u32) -> &mut Proc {
        self.dirty_procs.insert((boot, pid));
        self.procs
            .get_mut(&(boot, pid))
            .expect("process ensured before use")
    }

    /// Keeps the container's id, runtime, name, image and labels (the
    /// collector names a container by id until its runtime has answered,
    /// so what a row lacks, a later event may bring).
    fn note_container(&mut self, db: &mut Sql<'_>, c: &crate::record::ContainerRef) -> Result<()> {
        let known = self.containers.get(&c.id);
        let merged = |new: &Option<String>, old: Option<&Option<String>>| {
            new.clone().or_else(|| old.cloned().flatten())
        };
        let row = crate::record::ContainerRef {
            id: c.id.clone(),
            runtime: merged(&c.runtime, known.map(|k| &k.runtime)),
            name: merged(&c.name, known.map(|k| &k.name)),
            image: merged(&c.image, known.map(|k| &k.image)),
            pod: merged(&c.pod, known.map(|k| &k.pod)),
            namespace: merged(&c.namespace, known.map(|k| &k.namespace)),
            container_name: merged(&c.container_name, known.map(|k| &k.container_name)),
        };
        if known == Some(&row) {
            return Ok(());
        }
        db.conn
            .prepare_cached(
                "INSERT INTO containers(id, runtime, name, image, pod, namespace, container_name) VALUES(?1,?2,?3,?4,?5,?6,?7) \
                 ON CONFLICT(id) DO UPDATE SET runtime = COALESCE(excluded.runtime, runtime), name = COALESCE(excluded.name, name), \
                 image = COALESCE(excluded.image, image), pod = COALESCE(excluded.pod, pod), \
                 namespace = COALESCE(excluded.namespace, namespace), container_name = COALESCE(excluded.container_name, container_name)",
            )?
            .execute(rusqlite::params![row.id, row.runtime, row.name, row.image, row.pod, row.namespace, row.container_name])?;
        if self.containers.len() >= 1 << 16 {
            self.containers.clear();
        }
        self.containers.insert(row.id.clone(), row);
        Ok(())
    }

    /// The current node of the event's process, creating it on first sight.
    fn proc_node(&mut self, db: &mut Sql<'_>, boot: i64, ev: &Event) -> Result<i64> {
        if self.cached_proc(db, boot, ev.pid)? {
            return Ok(self.procs[&(boot, ev.pid)].node);
        }
        // Started before collection (or its fork was lost): an execution with no known parent.
        let comm = ev.comm.clone().unwrap_or_default();
        let name = format!("[{}]", if comm.is_empty() { "unknown" } else { &comm });
        let attrs = attrs_json(&FirstSeenAttrs {
            comm: &comm,
            first_seen: true,
            container: container_id(ev),
        });
        let node = self.new_node(
            db,
            NodeKind::Process,
            boot,
            &name,
            1,
            Some((ev.pid, None)),
            ev,
            Some(attrs),
        )?;
        self.procs.insert(
            (boot, ev.pid),
            Proc {
                node,
                exec: node,
                version: 1,
                frozen: false,
                euid: None,
                name,
                root: node,
                fds: Map::with_hasher(self.hasher.clone()),
                causes: Set::with_hasher(self.hasher.clone()),
            },
        );
        self.dirty_procs.insert((boot, ev.pid));
        if let Some(uid) = ev.euid.or(ev.uid) {
            self.associate(db, boot, ev, uid)?;
        }
        Ok(node)
    }

    /// The process's node, ready to receive a new cause (a new version if it is frozen).
    fn proc_effect(&mut self, db: &mut Sql<'_>, boot: i64, ev: &Event) -> Result<i64> {
        let cur = self.proc_node(db, boot, ev)?;
        let p = &self.procs[&(boot, ev.pid)];
        if !p.frozen {
            return Ok(cur);
        }
        let (name, version, exec) = (p.name.clone(), p.version + 1, p.exec);
        let node = self.new_node(
            db,
            NodeKind::Process,
            boot,
            &name,
            version,
            Some((ev.pid, Some(exec))),
            ev,
            None,
        )?;
        self.edge(db, node, cur, EdgeKind::WasInformedBy, boot, ev)?;
        let p = self.proc_mut(boot, ev.pid);
        p.node = node;
        p.version = version;
        p.frozen = false;
        p.causes.clear();
        Ok(node)
    }

    /// The current version of an object as a cause (creating version 0 if never seen).
    fn obj_cause(&mut self, db: &mut Sql<'_>, key: &Key<'_>, boot: i64, ev: &Event) -> Result<i64> {
        let at = self.head(db, key)?;
        self.obj_cause_at(db, key, at, boot, ev)
    }

    /// [`Graph::obj_cause`] with the key's slot already found.
    fn obj_cause_at(
        &mut self,
        db: &mut Sql<'_>,
        key: &Key<'_>,
        at: Option<u32>,
        boot: i64,
        ev: &Event,
    ) -> Result<i64> {
        let head = at.map(|i| self.heads.get(i));
        if let Some(mut h) = head.filter(|h| !h.deleted) {
            if !h.frozen {
                h.frozen = true;
                self.set_head(key, at, h);
            }
            return Ok(h.node);
        }
        let version = head.map(|h| h.version + 1).unwrap_or(0);
        let kind = NodeKind::from_i64(key.kind).expect("object kinds are valid");
        let node = self.new_node(db, kind, boot, &key.name, version, None, ev, None)?;
        self.set_head(
            key,
            at,
            Head {
                node,
                version,
                frozen: true,
                generator: 0,
                deleted: false,
            },
        );
        Ok(node)
    }

    fn associate(&mut self, db: &mut Sql<'_>, boot: i64, ev: &Event, uid: u32) -> Result<()> {
        let p = self.proc_effect(db, boot, ev)?;
        let u = self.obj_cause(
            db,
            &Key::new(NodeKind::User, 0, format!("uid:{uid}")),
            boot,
            ev,
        )?;
        let proc = self.proc_mut(boot, ev.pid);
        proc.euid = Some(uid);
        if proc.causes.insert(u) {
            self.edge(db, p, u, EdgeKind::WasAssociatedWith, boot, ev)?;
        }
        Ok(())
    }

    /// Process `ev.pid` read `key`.
    fn read(&mut self, db: &mut Sql<'_>, boot: i64, ev: &Event, key: &Key<'_>) -> Result<()> {
        let pnode = self.proc_node(db, boot, ev)?;
        let at = self.head(db, key)?;
        if let Some(h) = at.map(|i| self.heads.get(i)).filter(|h| !h.deleted) {
            // Reading back what this very process version wrote adds no
            // information; but what a socket returns comes from its peer,
            // whoever wrote the request.
            let own = h.generator == pnode && key.kind != NodeKind::Socket as i64;
            if own || self.procs[&(boot, ev.pid)].causes.contains(&h.node) {
                return Ok(());
            }
        }
        let p = self.proc_effect(db, boot, ev)?;
        // The slot found above still holds the key's head: a new process
        // version links at most a user (another kind of key), and slots
        // are only dropped by the flush.
        let o = self.obj_cause_at(db, key, at, boot, ev)?;
        if self.proc_mut(boot, ev.pid).causes.insert(o) {
            self.edge(db, p, o, EdgeKind::Used, boot, ev)?;
        }
        Ok(())
    }

    /// Process `effect` took data from process `cause` (`ev` is the call
    /// that moved it, by either): `effect` gets a version informed by the
    /// current one of `cause`, which is then frozen like a writer, so what
    /// `cause` does later is not behind what it passed on.
    fn informed(
        &mut self,
        db: &mut Sql<'_>,
        boot: i64,
        ev: &Event,
        effect: u32,
        cause: u32,
    ) -> Result<()> {
        // The other process as the subject of a call of its own: only its
        // pid (its name and user are its own, not the caller's).
        let as_pid = |pid: u32| -> Event {
            let mut e = ev.clone();
            if pid != ev.pid {
                e.pid = pid;
                e.tid = pid;
                e.comm = None;
                e.uid = None;
                e.euid = None;
            }
            e
        };
        let (cause_ev, effect_ev) = (as_pid(cause), as_pid(effect));
        let c = self.proc_node(db, boot, &cause_ev)?;
        self.proc_node(db, boot, &effect_ev)?;
        if self.procs[&(boot, effect)].causes.contains(&c) {
            return Ok(());
        }
        let e = self.proc_effect(db, boot, &effect_ev)?;
        self.proc_mut(boot, cause).frozen = true;
        if self.proc_mut(boot, effect).causes.insert(c) {
            self.edge(db, e, c, EdgeKind::WasInformedBy, boot, ev)?;
        }
        Ok(())
    }

    /// Process `ev.pid` wrote `key`; returns the new version if one was made.
    fn write(
        &mut self,
        db: &mut Sql<'_>,
        boot: i64,
        ev: &Event,
        key: &Key<'_>,
        force: bool,
        derive_from_previous: bool,
    ) -> Result<Option<i64>> {
        let p = self.proc_node(db, boot, ev)?;
        let at = self.head(db, key)?;
        let head = at.map(|i| self.heads.get(i));
        if let Some(h) = head {
            if !force && !h.deleted && !h.frozen && h.generator == p {
                return Ok(None);
            }
        }
        let version = head.map(|h| h.version + 1).unwrap_or(1);
        let kind = NodeKind::from_i64(key.kind).expect("object kinds are valid");
        let node = self.new_node(db, kind, boot, &key.name, version, None, ev, None)?;
        if let Some(h) = head.filter(|h| !h.deleted && derive_from_previous) {
            self.edge(db, node, h.node, EdgeKind::WasDerivedFrom, boot, ev)?;
        }
        self.edge(db, node, p, EdgeKind::WasGeneratedBy, boot, ev)?;
        self.proc_mut(boot, ev.pid).frozen = true;
        self.set_head(
            key,
            at,
            Head {
                node,
                version,
                frozen: false,
                generator: p,
                deleted: false,
            },
        );
        Ok(Some(node))
    }

    /// What process `pid`'s fd table says `fd` is.
    fn fd_table(
        &mut self,
        db: &mut Sql<'_>,
        boot: i64,
        pid: u32,
        fd: i32,
    ) -> Result<Option<ObjKey>> {
        Ok(if self.cached_proc(db, boot, pid)? {
            self.procs[&(boot, pid)].fds.get(&fd).cloned()
        } else {
            None
        })
    }

    fn fd_arg(ev: &Event, names: &[&str]) -> Option<i32> {
        names.iter().find_map(|n| ev.arg_i64(n)).map(|v| v as i32)
    }

    /// What a read/write touched: its path, else its address, else the fd table.
    fn io_object<'e>(
        &mut self,
        db: &mut Sql<'_>,
        boot: i64,
        ev: &'e Event,
        fd: Option<i32>,
    ) -> Result<Option<Key<'e>>> {
        if let Some(p) = &ev.path {
            if p.starts_with("pipe:[") {
                return Ok(Some(Key::new(NodeKind::Pipe, boot, p.as_str())));
            }
            if let Some(k) = memfd_key(boot, ev, p) {
                return Ok(Some(k));
            }
            if names_a_file(p) {
                return Ok(Some(file_key(ev, p)));
            }
        }
        if let Some(a) = &ev.addr {
            return Ok(Some(Key::new(NodeKind::Socket, 0, a.as_str())));
        }
        let from_table = match fd {
            Some(fd) => self.fd_table(db, boot, ev.pid, fd)?,
            None => None,
        };
        // A connected socket's peer (from connect/accept) names it best; else
        // the event's own inode beats our possibly stale fd table.
        match from_table {
            Some(k) if k.kind == NodeKind::Socket as i64 => return Ok(Some(Key::owned(k))),
            // The memfd its memfd_create bound to the fd, when the event
            // is on that very inode (the stream may carry no name for it).
            Some(k)
                if k.name.starts_with(MEMFD)
                    && memfd_inode(ev).is_some_and(|i| k.name.ends_with(&i)) =>
            {
                return Ok(Some(Key::owned(k)))
            }
            _ => {}
        }
        if let Some(key) = Self::anonymous(boot, ev) {
            return Ok(Some(key));
        }
        if let Some(k) = from_table {
            return Ok(Some(Key::owned(k)));
        }
        if let Some(p) = &ev.path {
            if p.starts_with("socket:[") {
                // A socket we never saw connect: its inode is all we know.
                return Ok(Some(Key::new(NodeKind::Socket, boot, p.as_str())));
            }
        }
        Ok(None)
    }

    /// A read/write cannot target a directory, so a path of "/" (what d_path
    /// gives for pipefs/sockfs/anon inodes) or no path with a known inode
    /// means an anonymous kernel object: a pipe, or an eventfd and the like.
    /// Sockets with a known peer were matched by `addr` before this.
    fn anonymous(boot: i64, ev: &Event) -> Option<Key<'static>> {
        let anon = ev
            .path
            .as_deref()
            .is_none_or(|p| p == "/" || p.starts_with("anon_inode:") || p.starts_with("socket:["));
        match (anon, ev.dev, ev.inode) {
            (true, Some(dev), Some(ino)) if ev.addr.is_none() => Some(Key::new(
                NodeKind::Pipe,
                boot,
                format!("anon:[{dev}:{ino}]"),
            )),
            _ => None,
        }
    }

    fn bind_fd(
        &mut self,
        db: &mut Sql<'_>,
        boot: i64,
        ev: &Event,
        fd: i32,
        key: Key<'_>,
    ) -> Result<()> {
        self.proc_node(db, boot, ev)?;
        // A file made into an io_uring's registered slot has no fd (-1):
        // its requests name it themselves.
        if fd >= 0 {
            self.proc_mut(boot, ev.pid).fds.insert(fd, key.into_owned());
        }
        Ok(())
    }

    /// The stream of `boot` records births with `sched:process_fork` (called
    /// for every such event read, stored before or not, so a resumed ingest knows).
    pub fn note_fork_hooks(&mut self, boot: i64) {
        self.fork_hook_boots.insert(boot);
    }

    /// Applies one (new, never before seen) event to the graph.
    pub fn apply(&mut self, db: &mut Sql<'_>, boot: i64, ev: &Event) -> Result<()> {
        if let Some(c) = ev.container.as_deref() {
            self.note_container(db, c)?;
        }
        let call = &*ev.syscall;
        if ev.failed() {
            self.stats.no_graph_effect += 1;
            return Ok(());
        }
        let returned_fd = ev
            .fd
            .or_else(|| ev.ret.filter(|r| *r >= 0).map(|r| r as i32));
        match call {
            "sched:process_fork" => match ev.child_pid {
                Some(c) if c != ev.pid && c != 0 => self.fork(db, boot, ev, c)?,
                _ => self.stats.no_graph_effect += 1,
            },
            "clone" | "clone3" | "fork" | "vfork" if self.fork_hook_boots.contains(&boot) => {
                self.stats.no_graph_effect += 1;
            }
            "clone" | "clone3" | "fork" | "vfork" => {
                let child = ev
                    .child_pid
                    // A pid is 32 bits: a wider `ret` (a crafted line) names
                    // no process, not the one of its low bits.
                    .or_else(|| {
                        ev.ret
                            .filter(|r| *r > 0)
                            .and_then(|r| u32::try_from(r).ok())
                    });
                match child {
                    Some(c) if c != ev.pid && c != 0 => self.fork(db, boot, ev, c)?,
                    // A new thread folds into its process; the child side of fork says nothing new.
                    _ => self.stats.no_graph_effect += 1,
                }
            }
            "execve" | "execveat" => self.exec(db, boot, ev)?,
            "exit" | "exit_group" => {
                if (call == "exit_group" || ev.tid == ev.pid)
                    && (self.procs.remove(&(boot, ev.pid)).is_some() || !self.all_cached)
                {
                    self.dirty_procs.insert((boot, ev.pid));
                }
            }
            "open" | "openat" | "openat2" | "creat" | "lsm:file_open" => {
                match (&ev.path, returned_fd) {
                    (Some(p), Some(fd)) => {
                        let key = if p.starts_with("pipe:[") {
                            Key::new(NodeKind::Pipe, boot, p.as_str())
                        } else {
                            file_key(ev, p)
                        };
                        self.bind_fd(db, boot, ev, fd, key)?
                    }
                    _ => self.stats.no_graph_effect += 1,
                }
            }
            // The memfd is its creator's until written: its fd names it
            // for the writes (and an execveat) that follow.
            "memfd_create" => {
                let key = ev.path.as_deref().and_then(|p| memfd_key(boot, ev, p));
                match (returned_fd, key) {
                    (Some(fd), Some(key)) => self.bind_fd(db, boot, ev, fd, key)?,
                    _ => self.stats.no_graph_effect += 1,
                }
            }
            "connect" | "accept" | "accept4" => {
                let fd = if call == "connect" {
                    Self::fd_arg(ev, &["fd", "sockfd"]).or(ev.fd)
                } else {
                    returned_fd
                };
                match (fd, &ev.addr) {
                    (Some(fd), Some(a)) => {
                        self.bind_fd(db, boot, ev, fd, Key::new(NodeKind::Socket, 0, a.as_str()))?
                    }
                    _ => self.stats.no_graph_effect += 1,
                }
            }
            "pipe" | "pipe2" | "socketpair" => {
                let name = ev
                    .path
                    .clone()
                    .unwrap_or_else(|| format!("pipe:[event {}]", ev.id));
                let key = Key::new(NodeKind::Pipe, boot, name);
                let mut fds: Vec<i32> = ["read_fd", "write_fd"]
                    .iter()
                    .filter_map(|n| ev.arg_i64(n))
                    .map(|v| v as i32)
                    .collect();
                fds.extend(ev.arg_fds().iter().map(|v| *v as i32));
                if fds.is_empty() {
                    self.stats.no_graph_effect += 1;
                }
                for fd in fds {
                    self.bind_fd(db, boot, ev, fd, key.clone())?;
                }
            }
            "dup" | "dup2" | "dup3" | "fcntl" => {
                let is_dup = call != "fcntl" || matches!(ev.arg_i64("cmd"), Some(0) | Some(1030));
                let old = Self::fd_arg(ev, &["oldfd", "fd"]);
                let new = Self::fd_arg(ev, &["newfd"])
                    .or_else(|| ev.ret.filter(|r| *r >= 0).map(|r| r as i32))
                    .or(ev.fd);
                let real_path = ev
                    .path
                    .as_deref()
                    .filter(|p| p.starts_with('/') && *p != "/");
                match (is_dup, old, new) {
                    // The collector names the duplicated file: trust it over our table.
                    (true, _, Some(new)) if real_path.is_some() => {
                        let key = file_key(ev, real_path.unwrap_or_default());
                        self.bind_fd(db, boot, ev, new, key)?
                    }
                    (true, Some(old), Some(new)) => {
                        self.proc_node(db, boot, ev)?;
                        let known = self.procs[&(boot, ev.pid)].fds.get(&old).cloned();
                        let p = self.proc_mut(boot, ev.pid);
                        match known {
                            Some(k) => p.fds.insert(new, k),
                            // Unknown source: whatever `new` named before is gone.
                            None => p.fds.remove(&new),
                        };
                    }
                    _ => self.stats.no_graph_effect += 1,
                }
            }
            "close" => {
                let fd = Self::fd_arg(ev, &["fd"]).or(ev.fd);
                match fd {
                    Some(fd) if self.cached_proc(db, boot, ev.pid)? => {
                        self.proc_mut(boot, ev.pid).fds.remove(&fd);
                    }
                    _ => {}
                }
            }
            c if is_read(c) || is_write(c) => {
                if ev.ret == Some(0) && c != "ftruncate" && c != "truncate" {
                    self.stats.no_graph_effect += 1; // EOF / nothing transferred
                    return Ok(());
                }
                let fd = ev.fd.or_else(|| Self::fd_arg(ev, &["fd", "sockfd"]));
                match self.io_object(db, boot, ev, fd)? {
                    Some(key) if is_read(c) => self.read(db, boot, ev, &key)?,
                    Some(key) => {
                        self.write(db, boot, ev, &key, false, true)?;
                    }
                    None => self.stats.unresolved_io += 1,
                }
            }
            "mmap" | "mmap2" => {
                // A file mapping is a read (code and data flow in) and, when
                // shared and writable, a write. Anonymous memory has no fd.
                const PROT_READ: i64 = 1;
                const PROT_WRITE: i64 = 2;
                const PROT_EXEC: i64 = 4;
                const MAP_SHARED: i64 = 1;
                let prot = ev.arg_i64("prot").unwrap_or(PROT_READ);
                let flags = ev.arg_i64("flags").unwrap_or(0);
                let fd = ev
                    .fd
                    .or_else(|| Self::fd_arg(ev, &["fd"]))
                    .filter(|fd| *fd >= 0);
                if fd.is_none() {
                    self.stats.no_graph_effect += 1;
                    return Ok(());
                }
                match self.io_object(db, boot, ev, fd)? {
                    Some(key) => {
                        if prot & (PROT_READ | PROT_EXEC) != 0 {
                            self.read(db, boot, ev, &key)?;
                        }
                        if prot & PROT_WRITE != 0 && flags & MAP_SHARED != 0 {
                            self.write(db, boot, ev, &key, false, true)?;
                        }
                    }
                    None => self.stats.unresolved_io += 1,
                }
            }
            "sendfile" | "sendfile64" | "splice" | "copy_file_range" | "tee" => {
                let fd_in = Self::fd_arg(ev, &["in_fd", "fd_in"]);
                let fd_out = Self::fd_arg(ev, &["out_fd", "fd_out"]);
                let mut bare = ev.clone();
                bare.path = None;
                bare.addr = None;
                bare.inode = None;
                let src = self.io_object(db, boot, &bare, fd_in)?;
                let dst = self.io_object(db, boot, &bare, fd_out)?;
                match (src, dst) {
                    (Some(s), Some(d)) => {
                        self.read(db, boot, ev, &s)?;
                        self.write(db, boot, ev, &d, false, true)?;
                    }
                    _ => self.stats.unresolved_io += 1,
                }
            }
            // One process writes another's memory or registers, or reads
            // them: data flows between processes with no file between.
            "ptrace" | "process_vm_writev" | "process_vm_readv" => {
                // PTRACE_POKETEXT/DATA/USER, SETREGS, SETFPREGS, SETSIGINFO,
                // SETREGSET write the tracee; PEEK*/GET* read it (the raw
                // syscall stores a peeked word at `data` and returns 0).
                const WRITES: [i64; 7] = [4, 5, 6, 13, 15, 0x4203, 0x4205];
                const READS: [i64; 7] = [1, 2, 3, 12, 14, 0x4202, 0x4204];
                // As a clone's `ret`: past 32 bits no pid, not a wrapped one.
                let target = ev
                    .arg_i64("target_pid")
                    .filter(|t| *t > 0)
                    .and_then(|t| u32::try_from(t).ok());
                let request = ev.arg_i64("request");
                let into_target = match call {
                    "process_vm_writev" => Some(true),
                    "process_vm_readv" => Some(false),
                    _ => request.and_then(|r| {
                        WRITES
                            .contains(&r)
                            .then_some(true)
                            .or(READS.contains(&r).then_some(false))
                    }),
                };
                match (target, into_target) {
                    (Some(t), Some(true)) if t != ev.pid => {
                        self.informed(db, boot, ev, t, ev.pid)?
                    }
                    (Some(t), Some(false)) if t != ev.pid => {
                        self.informed(db, boot, ev, ev.pid, t)?
                    }
                    _ => self.stats.no_graph_effect += 1,
                }
            }
            "unlink" | "unlinkat" | "rmdir" => match &ev.path {
                Some(p) => {
                    let key = file_key(ev, p);
                    if let Some(i) = self.head(db, &key)? {
                        let mut h = self.heads.get(i);
                        h.deleted = true;
                        self.heads.set(i, h);
                    }
                }
                None => self.stats.no_graph_effect += 1,
            },
            "rename" | "renameat" | "renameat2" | "link" | "linkat" => {
                match (&ev.path, &ev.path2) {
                    (Some(src), Some(dst)) => {
                        let (skey, dkey) = (file_key(ev, src), file_key(ev, dst));
                        let s = self.obj_cause(db, &skey, boot, ev)?;
                        if let Some(d) = self.write(db, boot, ev, &dkey, true, false)? {
                            self.edge(db, d, s, EdgeKind::WasDerivedFrom, boot, ev)?;
                        }
                        if call.starts_with("rename") {
                            if let Some(i) = self.head(db, &skey)? {
                                let mut h = self.heads.get(i);
                                h.deleted = true;
                                self.heads.set(i, h);
                            }
                        }
                    }
                    _ => self.stats.no_graph_effect += 1,
                }
            }
            "setuid" | "setreuid" | "setresuid" | "setfsuid" => {
                let uid = Self::fd_arg(ev, &["euid", "uid", "fsuid"])
                    .map(|u| u as u32)
                    .or(ev.euid);
                match uid {
                    Some(uid) => {
                        self.proc_node(db, boot, ev)?;
                        if self.procs[&(boot, ev.pid)].euid != Some(uid) {
                            self.associate(db, boot, ev, uid)?;
                        }
                    }
                    None => self.stats.no_graph_effect += 1,
                }
            }
            _ => self.stats.no_graph_effect += 1,
        }
        Ok(())
    }

    fn fork(&mut self, db: &mut Sql<'_>, boot: i64, ev: &Event, child: u32) -> Result<()> {
        let parent = self.proc_node(db, boot, ev)?;
        if self.cached_proc(db, boot, child)? {
            // The child ran (even exec'd) before the parent's clone returned and
            // was recorded: link its first node to the parent instead of
            // starting over. Safe for acyclicity: nothing the parent did before
            // this clone can depend on the new child.
            let (fds, euid) = {
                let p = self.proc_mut(boot, ev.pid);
                p.frozen = true;
                (p.fds.clone(), p.euid)
            };
            let c = self.proc_mut(boot, child);
            let root = c.root;
            for (fd, key) in fds {
                c.fds.entry(fd).or_insert(key);
            }
            if c.euid.is_none() {
                c.euid = euid;
            }
            if root != 0 {
                self.edge(db, root, parent, EdgeKind::WasInformedBy, boot, ev)?;
            }
            return Ok(());
        }
        let (name, fds, euid) = {
            let p = self.proc_mut(boot, ev.pid);
            p.frozen = true;
            (p.name.clone(), p.fds.clone(), p.euid)
        };
        let attrs = attrs_json(&ForkAttrs {
            comm: ev.comm.as_deref(),
            parent_pid: ev.pid,
            container: container_id(ev),
        });
        let node = self.new_node(
            db,
            NodeKind::Process,
            boot,
            &name,
            1,
            Some((child, None)),
            ev,
            Some(attrs),
        )?;
        self.edge(db, node, parent, EdgeKind::WasInformedBy, boot, ev)?;
        let mut causes = Set::with_hasher(self.hasher.clone());
        causes.insert(parent);
        self.procs.insert(
            (boot, child),
            Proc {
                node,
                exec: node,
                version: 1,
                frozen: false,
                euid,
                name,
                root: 0,
                fds,
                causes,
            },
        );
        self.dirty_procs.insert((boot, child));
        Ok(())
    }

    /// The file an exec ran: its path; a memfd by name and inode; for
    /// `execveat(fd, "", .., AT_EMPTY_PATH)` (fexecve) the file of `fd` in
    /// the caller's fd table; an unnamed file by its inode. None: nothing
    /// names it.
    fn program<'e>(
        &mut self,
        db: &mut Sql<'_>,
        boot: i64,
        ev: &'e Event,
    ) -> Result<Option<Key<'e>>> {
        const AT_EMPTY_PATH: i64 = 0x1000;
        if let Some(p) = ev.path.as_deref() {
            if let Some(k) = memfd_key(boot, ev, p) {
                return Ok(Some(k));
            }
            if names_a_file(p) {
                return Ok(Some(file_key(ev, p)));
            }
        }
        let at_fd = ev
            .arg_i64("flags")
            .is_some_and(|f| f & AT_EMPTY_PATH != 0)
            .then(|| Self::fd_arg(ev, &["dirfd"]))
            .flatten();
        if let Some(fd) = at_fd {
            if let Some(k) = self.fd_table(db, boot, ev.pid, fd)? {
                return Ok(Some(Key::owned(k)));
            }
        }
        Ok(Self::anonymous(boot, ev))
    }

    fn exec(&mut self, db: &mut Sql<'_>, boot: i64, ev: &Event) -> Result<()> {
        let program = self.program(db, boot, ev)?;
        let old = self.proc_node(db, boot, ev)?;
        let name = ev
            .path
            .clone()
            .or_else(|| ev.argv.as_ref().and_then(|a| a.first().cloned()))
            .or_else(|| ev.comm.as_ref().map(|c| format!("[{c}]")))
            .unwrap_or_else(|| "[unknown]".into());
        let attrs = attrs_json(&ExecAttrs {
            argv: ev.argv.as_deref(),
            comm: ev.comm.as_deref(),
            euid: ev.euid,
            uid: ev.uid,
            container: container_id(ev),
        });
        let node = self.new_node(
            db,
            NodeKind::Process,
            boot,
            &name,
            1,
            Some((ev.pid, None)),
            ev,
            Some(attrs),
        )?;
        self.edge(db, node, old, EdgeKind::WasInformedBy, boot, ev)?;
        let mut causes = Set::with_hasher(self.hasher.clone());
        causes.insert(old);
        match program {
            Some(key) => {
                let exe = self.obj_cause(db, &key, boot, ev)?;
                self.edge(db, node, exe, EdgeKind::Used, boot, ev)?;
                causes.insert(exe);
            }
            // Lost attributes are a loss already (`incomplete`).
            None if !ev.incomplete => put_event_loss(db.conn, boot, "unresolved", ev)?,
            None => {}
        }
        let p = self.proc_mut(boot, ev.pid);
        p.node = node;
        p.exec = node;
        p.version = 1;
        p.frozen = false;
        p.name = name;
        p.causes = causes;
        let before = p.euid;
        if let Some(uid) = ev.euid.or(ev.uid) {
            if before != Some(uid) {
                self.associate(db, boot, ev, uid)?;
            }
        }
        Ok(())
    }
}

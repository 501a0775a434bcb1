//! The fleet's provenance graph (docs/fleet.md, "The graph"): each host's
//! lines go through the store's own graph builder — a `custos_store`
//! ingest into one SQLite file per host under `--graph-dir`, which holds the
//! builder's state (fd tables, heads, versions) between batches and runs —
//! and the nodes and edges it makes are copied into ClickHouse, named by
//! host. One definition of the graph's rules: the store's.

use anyhow::{bail, Context, Result};
use custos_store::effects::Edge;
use custos_store::nodes::NodeRow;
use custos_store::{IngestOptions as StoreOptions, Ingestor};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// A row of `nodes`.
#[derive(clickhouse::Row, Serialize, Deserialize, Debug, Clone)]
pub struct NodeRowCh {
    pub host: String,
    pub node: i64,
    pub kind: u8,
    pub boot: String,
    pub name: String,
    pub version: i64,
    pub pid: Option<i64>,
    pub exec: Option<i64>,
    pub time_ns: i64,
    pub event_id: i64,
    pub attrs: String,
}

/// A row of `edges`.
#[derive(clickhouse::Row, Serialize, Deserialize, Debug, Clone)]
pub struct EdgeRowCh {
    pub host: String,
    pub effect: i64,
    pub cause: i64,
    pub kind: u8,
    pub event_id: i64,
    pub time_ns: i64,
    pub boot: String,
}

/// What ClickHouse holds of a host's graph: its highest node id, its
/// newest edge's time (-1: nothing).
#[derive(Debug, Clone, Copy)]
pub struct Marks {
    pub node: i64,
    pub edge_time_ns: i64,
}

/// The marks of host `?` (bound twice): (nodes held, max node, max edge time).
pub const MARKS_SQL: &str = "SELECT count(), max(node), (SELECT max(time_ns) FROM edges WHERE host = ?) FROM nodes WHERE host = ?";

struct HostGraph {
    store: Ingestor,
    /// The store's boot numbers → the stream's boot ids.
    boots: HashMap<i64, String>,
}

/// Every host's graph builder, opened as its host's lines first arrive.
pub struct HostGraphs {
    dir: PathBuf,
    hosts: HashMap<String, HostGraph>,
}

/// The file of a host's graph state: the host id when it is a plain file
/// name (the sink's ids are), else its hex (ids from other producers).
fn file_of(dir: &Path, host: &str) -> PathBuf {
    let plain = !host.is_empty()
        && !host.starts_with('.')
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c));
    let name = if plain {
        host.to_string()
    } else {
        format!(
            "x-{}",
            host.bytes().map(|b| format!("{b:02x}")).collect::<String>()
        )
    };
    dir.join(format!("{name}.db"))
}

impl HostGraphs {
    pub fn new(dir: &Path) -> Result<Self> {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("creating --graph-dir {}", dir.display()))?;
        Ok(Self {
            dir: dir.to_path_buf(),
            hosts: HashMap::new(),
        })
    }

    pub fn is_open(&self, host: &str) -> bool {
        self.hosts.contains_key(host)
    }

    /// Opens `host`'s graph; returns what it made that ClickHouse lacks
    /// (`marks`): a run that stopped between the two.
    pub fn open(&mut self, host: &str, marks: Marks) -> Result<(Vec<NodeRowCh>, Vec<EdgeRowCh>)> {
        let path = file_of(&self.dir, host);
        let opts = StoreOptions {
            source: format!("fleet:{host}"),
            report_malformed: 0,
            ..StoreOptions::default()
        };
        let mut store = Ingestor::open(&path, opts)
            .with_context(|| format!("opening host {host}'s graph at {}", path.display()))?;
        store.keep_graph();
        let mut g = HostGraph {
            store,
            boots: HashMap::new(),
        };
        g.load_boots()?;
        let conn = g.store.connection();
        let mut nodes = Vec::new();
        custos_store::nodes::for_each(conn, |r| {
            if r.node > marks.node {
                nodes.push(r);
            }
        })?;
        let edges: Vec<Edge> = custos_store::effects::all(conn)?
            .into_iter()
            .filter(|e| e.time_ns >= marks.edge_time_ns)
            .collect();
        let rows = g.rows(host, nodes, edges)?;
        self.hosts.insert(host.to_string(), g);
        Ok(rows)
    }

    /// Applies a batch's lines (host, line), in order, each host's as one
    /// store batch; returns the nodes and edges made. Lines the store
    /// already holds (a re-delivery) make nothing.
    pub fn apply(
        &mut self,
        lines: &[(String, String)],
    ) -> Result<(Vec<NodeRowCh>, Vec<EdgeRowCh>)> {
        for (host, line) in lines {
            let Some(g) = self.hosts.get_mut(host) else {
                bail!("host {host}'s graph is not open")
            };
            g.store
                .push_line(line)
                .with_context(|| format!("host {host}'s graph"))?;
        }
        let (mut nodes, mut edges) = (Vec::new(), Vec::new());
        for (host, g) in &mut self.hosts {
            // Every held event too: what Kafka is told is stored must be
            // (an event arriving in a later batch than newer ones of its
            // host is applied late, as the store counts it: out_of_window).
            g.store
                .commit_all()
                .with_context(|| format!("committing host {host}'s graph"))?;
            let made = g.store.take_graph();
            if made.nodes.is_empty() && made.edges.is_empty() {
                continue;
            }
            g.load_boots()?;
            let (n, e) = g.rows(host, made.nodes, made.edges)?;
            nodes.extend(n);
            edges.extend(e);
        }
        Ok((nodes, edges))
    }
}

impl HostGraph {
    fn load_boots(&mut self) -> Result<()> {
        let conn = self.store.connection();
        let mut st = conn.prepare("SELECT boot, boot_id FROM boots")?;
        let rows = st.query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?)))?;
        for r in rows {
            let (b, id) = r?;
            self.boots.insert(b, id);
        }
        Ok(())
    }

    fn boot(&self, b: i64) -> String {
        self.boots
            .get(&b)
            .cloned()
            .unwrap_or_else(|| custos_store::ingest::UNKNOWN_BOOT.into())
    }

    fn rows(
        &self,
        host: &str,
        nodes: Vec<NodeRow>,
        edges: Vec<Edge>,
    ) -> Result<(Vec<NodeRowCh>, Vec<EdgeRowCh>)> {
        let nodes = nodes
            .into_iter()
            .map(|r| {
                Ok(NodeRowCh {
                    host: host.to_string(),
                    node: r.node,
                    kind: u8::try_from(r.kind).context("node kind")?,
                    boot: self.boot(r.boot),
                    name: r.name,
                    version: r.version,
                    pid: r.pid,
                    exec: r.exec,
                    time_ns: r.time_ns,
                    event_id: r.event_id,
                    attrs: r.attrs.unwrap_or_default(),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let edges = edges
            .into_iter()
            .map(|e| EdgeRowCh {
                host: host.to_string(),
                effect: e.effect,
                cause: e.cause,
                kind: e.kind,
                event_id: e.event_id,
                time_ns: e.time_ns,
                boot: self.boot(e.boot),
            })
            .collect();
        Ok((nodes, edges))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn host_ids_become_file_names_that_stay_in_the_directory() {
        let d = std::path::Path::new("/g");
        assert_eq!(super::file_of(d, "web-7").to_str(), Some("/g/web-7.db"));
        assert_eq!(
            super::file_of(d, "../etc").to_str(),
            Some("/g/x-2e2e2f657463.db")
        );
        assert_eq!(super::file_of(d, "").to_str(), Some("/g/x-.db"));
    }
}

//! `custos query --clickhouse`: the store's queries (ancestors,
//! descendants, path, touched-by, who-touched) over the fleet's graph in
//! ClickHouse (docs/fleet.md, "Querying the fleet"), answered in the
//! store's own `Answer`, so the store's renderers print it.
//!
//! ClickHouse 18.16 has no recursive queries: a walk is breadth-first, one
//! query per level for the level's edges (and its nodes). A level that
//! reaches a socket also looks for the connection's other end on another
//! host (`links`): the store's graph names a socket by its peer's address,
//! so the two ends of one TCP connection are two nodes on two hosts, joined
//! here on the connect (client) and the accept (server) whose addresses
//! mirror each other (or, from collectors before `laddr`, by port and time).

use crate::graph::{EdgeRowCh, NodeRowCh};
use anyhow::{bail, Context, Result};
use custos_store::cli::{GraphArgs, Query, QueryArgs};
use custos_store::query::{
    span_of, Answer, Attrs, Direction, EdgeInfo, LossNote, NodeInfo, Reach, TouchRow, Window,
};
use custos_store::schema::{EdgeKind, NodeKind};
use custos_store::timefmt::format_ns;
use std::collections::{BTreeMap, HashMap, HashSet};

/// A node of the fleet: its host and its id in that host's graph.
pub type Key = (String, i64);

/// How far apart the connect and the accept of one connection may be
/// (ns): the accept follows the connect by a round trip plus the server's
/// backlog wait; clocks of two hosts differ by their NTP error.
pub const LINK_WINDOW_NS: i64 = 5_000_000_000;
/// How far a host's clock may be ahead of another's (the accept seen
/// before the connect).
pub const LINK_SKEW_NS: i64 = 1_000_000_000;

/// Said in every answer that crossed hosts: what the join rests on.
const LINK_NOTE: &str = "crossed hosts at sockets: a connect on one host joined to the accept on another whose addresses mirror it \
     (the client's own ip:port is the accept's peer, and the server's own ip:port, or a port that host bound, is the connect's \
     address); streams without the client's own address (collectors before `laddr`) are joined by port and time \
     within 5 s, and say so; NAT, proxies or load balancers between the hosts hide the link";

pub struct Fleet {
    client: clickhouse::Client,
    rt: tokio::runtime::Runtime,
    hosts: Vec<String>,
    /// Nodes read so far, by key.
    nodes: HashMap<Key, NodeRowCh>,
    notes: Vec<String>,
    crossed: bool,
}

/// One edge of an answer under construction.
#[derive(Clone, Debug)]
struct FleetEdge {
    effect: Key,
    cause: Key,
    kind: EdgeKind,
    event_id: i64,
    time_ns: i64,
    host: String,
    boot: String,
}

impl FleetEdge {
    fn of(r: EdgeRowCh) -> Result<Self> {
        Ok(FleetEdge {
            effect: (r.host.clone(), r.effect),
            cause: (r.host.clone(), r.cause),
            kind: EdgeKind::from_i64(r.kind as i64).context("unknown edge kind in ClickHouse")?,
            event_id: r.event_id,
            time_ns: r.time_ns,
            host: r.host,
            boot: r.boot,
        })
    }
}

/// A string as a ClickHouse literal.
fn lit(s: &str) -> String {
    format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'"))
}

/// `(host = 'a' AND col IN (1, 2)) OR (host = 'b' AND ...)`: the keys as a
/// condition (plain per-host IN lists: tuple IN with one tuple is read as a
/// tuple, not a list, by 18.16).
fn keys_cond(keys: &[Key], col: &str) -> String {
    let mut by_host: BTreeMap<&str, Vec<i64>> = BTreeMap::new();
    for (h, n) in keys {
        by_host.entry(h).or_default().push(*n);
    }
    let parts: Vec<String> = by_host
        .iter()
        .map(|(h, ns)| {
            format!(
                "(host = {} AND {col} IN ({}))",
                lit(h),
                ns.iter().map(i64::to_string).collect::<Vec<_>>().join(",")
            )
        })
        .collect();
    if parts.is_empty() {
        "0".into()
    } else {
        parts.join(" OR ")
    }
}

const NODE_COLUMNS: &str =
    "host, node, kind, boot, name, version, pid, exec, time_ns, event_id, attrs";
const EDGE_COLUMNS: &str = "host, effect, cause, kind, event_id, time_ns, boot";
/// Keys per query, at most (a level of a large walk is split).
const CHUNK: usize = 2000;

/// The port of `ip:port` / `[ip6]:port`.
fn port_of(addr: &str) -> Option<&str> {
    addr.rsplit_once(':')
        .map(|(_, p)| p)
        .filter(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
}

fn ip_of(addr: &str) -> &str {
    addr.rsplit_once(':').map_or(addr, |(ip, _)| ip)
}

fn is_loopback(addr: &str) -> bool {
    let ip = ip_of(addr);
    ip.starts_with("127.") || ip == "[::1]"
}

/// `[::ffff:a.b.c.d]:p` (an IPv4 peer of a dual-stack socket) as `a.b.c.d:p`.
fn canon(addr: &str) -> String {
    match addr
        .strip_prefix("[::ffff:")
        .and_then(|r| r.split_once("]:"))
    {
        Some((ip, port)) if ip.contains('.') => format!("{ip}:{port}"),
        _ => addr.to_string(),
    }
}

fn same_addr(a: &str, b: &str) -> bool {
    !a.is_empty() && canon(a) == canon(b)
}

/// Every spelling of `addr` in a stream: as is, and an IPv4 address also as
/// a dual-stack socket names it.
fn spellings(addr: &str) -> Vec<String> {
    let c = canon(addr);
    match c.rsplit_once(':') {
        Some((ip, port)) if ip.contains('.') && !ip.starts_with('[') => {
            vec![c.clone(), format!("[::ffff:{ip}]:{port}")]
        }
        _ => vec![c],
    }
}

/// One end of a connection, as the stream recorded it.
#[derive(Clone, Debug)]
struct End {
    host: String,
    /// The socket's name in that host's graph: the peer's address.
    addr: String,
    /// The socket's own address (`laddr`), empty from collectors before it.
    laddr: String,
    time_ns: i64,
    event_id: i64,
}

/// How a connect and an accept on two hosts belong together.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Pairing {
    /// The client's own address is the accept's peer, and the server's own
    /// address (or a port its host bound) is the connect's address.
    Exact,
    /// Only the server's port and the time: the client's own address was not
    /// recorded.
    ByPortAndTime,
    No,
}

/// Whether `client` (a connect) and `server` (an accept) are the two ends of
/// one connection, given whether the server's host bound the port the
/// client connected to.
fn pairing(client: &End, server: &End, server_bound_port: bool) -> Pairing {
    let server_side = if server.laddr.is_empty() {
        server_bound_port
    } else {
        same_addr(&server.laddr, &client.addr)
    };
    if !server_side {
        return Pairing::No;
    }
    match client.laddr.is_empty() {
        false if same_addr(&client.laddr, &server.addr) => Pairing::Exact,
        false => Pairing::No,
        true => Pairing::ByPortAndTime,
    }
}

impl Fleet {
    pub fn connect(url: &str, db: &str) -> Result<Self> {
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            bail!("--clickhouse {url:?}: give ClickHouse's HTTP URL, e.g. http://127.0.0.1:8123");
        }
        if db.is_empty() || !db.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            bail!("--clickhouse-db {db:?}: only letters, digits and '_'");
        }
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let client = clickhouse::Client::default()
            .with_url(url)
            .with_validation(false);
        let tables: Vec<String> = rt
            .block_on(
                client
                    .query("SELECT name FROM system.tables WHERE database = ?")
                    .bind(db)
                    .fetch_all(),
            )
            .with_context(|| format!("asking ClickHouse at {url} for the fleet's tables"))?;
        for t in ["events", "losses", "nodes", "edges"] {
            if !tables.iter().any(|have| have == t) {
                bail!("ClickHouse at {url} has no table {db}.{t}: ingest with `custos fleet ingest --graph-dir DIR` first (docs/fleet.md)");
            }
        }
        let client = client.with_database(db);
        let hosts: Vec<String> = rt
            .block_on(client.query("SELECT DISTINCT host FROM nodes").fetch_all())
            .context("reading the fleet's hosts")?;
        Ok(Fleet {
            client,
            rt,
            hosts,
            nodes: HashMap::new(),
            notes: Vec::new(),
            crossed: false,
        })
    }

    fn fetch<T: clickhouse::RowOwned + clickhouse::RowRead>(&self, sql: &str) -> Result<Vec<T>> {
        self.rt
            .block_on(self.client.query(sql).fetch_all::<T>())
            .with_context(|| format!("querying ClickHouse: {sql:.200}"))
    }

    fn nodes_where(&mut self, cond: &str) -> Result<Vec<NodeRowCh>> {
        let rows: Vec<NodeRowCh> = self.fetch(&format!(
            "SELECT {NODE_COLUMNS} FROM nodes FINAL WHERE {cond}"
        ))?;
        for r in &rows {
            self.nodes.insert((r.host.clone(), r.node), r.clone());
        }
        Ok(rows)
    }

    /// Reads the nodes of `keys` not read yet.
    fn load(&mut self, keys: &[Key]) -> Result<()> {
        let missing: Vec<Key> = keys
            .iter()
            .filter(|k| !self.nodes.contains_key(*k))
            .cloned()
            .collect();
        for chunk in missing.chunks(CHUNK) {
            self.nodes_where(&keys_cond(chunk, "node"))?;
        }
        Ok(())
    }

    /// The edges leaving `keys` in direction `dir` (ancestors: to causes).
    fn edges_of(&self, keys: &[Key], dir: Direction, extra: &str) -> Result<Vec<FleetEdge>> {
        let col = if dir == Direction::Ancestors {
            "effect"
        } else {
            "cause"
        };
        let mut out = Vec::new();
        for chunk in keys.chunks(CHUNK) {
            let rows: Vec<EdgeRowCh> = self.fetch(&format!(
                "SELECT {EDGE_COLUMNS} FROM edges FINAL WHERE ({}){extra}",
                keys_cond(chunk, col)
            ))?;
            for r in rows {
                out.push(FleetEdge::of(r)?);
            }
        }
        out.sort_by(|a, b| {
            (&a.effect, &a.cause, a.kind as i64, a.event_id).cmp(&(
                &b.effect,
                &b.cause,
                b.kind as i64,
                b.event_id,
            ))
        });
        Ok(out)
    }

    /// Splits `HOST:SPEC` when HOST is a host of the fleet.
    fn host_of<'s>(&self, spec: &'s str) -> (Option<&'s str>, &'s str) {
        match spec.split_once(':') {
            Some((h, rest)) if self.hosts.iter().any(|k| k == h) => (Some(h), rest),
            _ => (None, spec),
        }
    }

    /// The nodes a user's name stands for, on one host (`HOST:SPEC`) or on
    /// every host; with `latest`, each host's newest version of a file or
    /// socket (the same path on two hosts is two files).
    pub fn resolve(&mut self, spec: &str, latest: bool) -> Result<Vec<Key>> {
        let spec = spec.trim();
        let (host, rest) = self.host_of(spec);
        let on_host = host
            .map(|h| format!(" AND host = {}", lit(h)))
            .unwrap_or_default();
        if let Some(id) = rest
            .strip_prefix('n')
            .unwrap_or(rest)
            .parse::<i64>()
            .ok()
            .filter(|_| !rest.starts_with('/'))
        {
            let Some(h) = host else {
                bail!(
                    "{spec:?}: a node id names a node of one host; give HOST:n{id} (hosts: {})",
                    self.hosts.join(", ")
                )
            };
            if self
                .nodes_where(&format!("host = {} AND node = {id}", lit(h)))?
                .is_empty()
            {
                bail!("node {id} of host {h} is not in the fleet's graph");
            }
            return Ok(vec![(h.to_string(), id)]);
        }
        let rows = if let Some(pid) = rest.strip_prefix("pid:") {
            let pid: i64 = pid
                .parse()
                .with_context(|| format!("{spec:?}: pid:N needs a number"))?;
            let procs = self.nodes_where(&format!(
                "kind = {} AND pid = {pid}{on_host}",
                NodeKind::Process as i64
            ))?;
            // The newest version of every execution that had this pid.
            let execs: Vec<Key> = procs
                .iter()
                .filter_map(|r| r.exec.map(|e| (r.host.clone(), e)))
                .collect();
            let all = if execs.is_empty() {
                vec![]
            } else {
                self.nodes_where(&format!(
                    "kind = {} AND ({})",
                    NodeKind::Process as i64,
                    keys_cond(&execs, "exec")
                ))?
            };
            let mut newest: BTreeMap<Key, NodeRowCh> = BTreeMap::new();
            for r in all {
                let k = (r.host.clone(), r.exec.unwrap_or(r.node));
                if newest.get(&k).is_none_or(|n| n.node < r.node) {
                    newest.insert(k, r);
                }
            }
            newest.into_values().collect()
        } else {
            let (name, kind, version) = if let Some(a) = rest
                .strip_prefix("sock:")
                .or_else(|| rest.strip_prefix("socket:"))
            {
                (a, NodeKind::Socket, None)
            } else if rest.starts_with("pipe:[") {
                (rest, NodeKind::Pipe, None)
            } else if rest.starts_with("uid:") {
                (rest, NodeKind::User, None)
            } else if let Some((p, v)) = rest
                .rsplit_once("@v")
                .and_then(|(p, v)| Some((p, v.parse::<i64>().ok()?)))
            {
                (p, NodeKind::File, Some(v))
            } else {
                (rest, NodeKind::File, None)
            };
            let mut rows = self.nodes_where(&format!(
                "kind = {} AND name = {}{on_host}",
                kind as i64,
                lit(name)
            ))?;
            if let Some(v) = version {
                rows.retain(|r| r.version == v);
            } else if latest {
                let mut newest: BTreeMap<String, NodeRowCh> = BTreeMap::new();
                for r in rows {
                    if newest
                        .get(&r.host)
                        .is_none_or(|n| (n.version, n.node) < (r.version, r.node))
                    {
                        newest.insert(r.host.clone(), r);
                    }
                }
                rows = newest.into_values().collect();
            }
            rows
        };
        if rows.is_empty() {
            bail!(
                "nothing in the fleet's graph matches {spec:?}; give [HOST:]PATH, [HOST:]PATH@vN, HOST:nID, [HOST:]pid:N, [HOST:]sock:ADDR, [HOST:]pipe:[INODE] or [HOST:]uid:N (hosts: {})",
                self.hosts.join(", ")
            );
        }
        let mut keys: Vec<Key> = rows.into_iter().map(|r| (r.host, r.node)).collect();
        keys.sort();
        keys.dedup();
        Ok(keys)
    }

    /// The socket nodes of the other end of each socket node in `socks`'
    /// connections, as edges in direction `dir` (the data crosses from the
    /// writer's end to the reader's: an edge wasDerivedFrom, other end →
    /// this end for descendants, this end → other end for ancestors).
    fn links(&mut self, socks: &[Key], dir: Direction) -> Result<Vec<FleetEdge>> {
        let socks: Vec<NodeRowCh> = socks
            .iter()
            .filter_map(|k| self.nodes.get(k).cloned())
            .filter(|r| {
                r.kind == NodeKind::Socket as u8
                    && port_of(&r.name).is_some()
                    && !is_loopback(&r.name)
            })
            .collect();
        if socks.is_empty() || self.hosts.len() < 2 {
            return Ok(vec![]);
        }
        self.crossed = true;
        let by_host_addr = |rows: &[NodeRowCh]| -> String {
            let mut by_host: BTreeMap<&str, Vec<String>> = BTreeMap::new();
            for r in rows {
                by_host.entry(&r.host).or_default().push(lit(&r.name));
            }
            by_host
                .iter()
                .map(|(h, a)| format!("(host = {} AND addr IN ({}))", lit(h), a.join(",")))
                .collect::<Vec<_>>()
                .join(" OR ")
        };
        let cond = by_host_addr(&socks);
        // Which end each socket is: a connect to its name (client) or an accept from it (server).
        let connects = self.ends(&format!(
            "syscall = 'connect' AND (ret = 0 OR ret = -115) AND ({cond})"
        ))?;
        let accepts = self.ends(&format!(
            "syscall IN ('accept', 'accept4') AND ret >= 0 AND ({cond})"
        ))?;
        // Every port each host bound, with the address (a wildcard, or one of its own).
        let binds: Vec<(String, String)> =
            self.fetch("SELECT DISTINCT host, addr FROM events WHERE syscall = 'bind' AND ret = 0 AND addr != ''")?;
        // Whether `host` bound the port of `to` (on every address, or on `to`'s).
        let binds_port = |host: &str, to: &str| -> bool {
            binds.iter().any(|(h, a)| {
                h == host
                    && port_of(a) == port_of(to)
                    && (matches!(ip_of(a), "0.0.0.0" | "[::]") || a == to)
            })
        };
        let mut out = Vec::new();
        for s in &socks {
            let key = (s.host.clone(), s.node);
            // This version's connection: the newest connect/accept at or before it.
            let latest = |ends: &[End]| {
                ends.iter()
                    .filter(|e| e.host == s.host && e.addr == s.name && e.time_ns <= s.time_ns)
                    .max_by_key(|e| e.time_ns)
                    .cloned()
            };
            let (mine, client) = match (latest(&connects), latest(&accepts)) {
                (Some(c), _) => (c, true),
                (None, Some(a)) => (a, false),
                (None, None) => continue,
            };
            // The other end: accepts elsewhere whose peer is this client's own
            // address, or (unrecorded) of the port it connected to within the
            // window; connects elsewhere from this server's peer, or to a port
            // this server bound within the window.
            let (lo, hi) = if client {
                (mine.time_ns - LINK_SKEW_NS, mine.time_ns + LINK_WINDOW_NS)
            } else {
                (mine.time_ns - LINK_WINDOW_NS, mine.time_ns + LINK_SKEW_NS)
            };
            // The exact other end, at any time: an accept whose peer is this
            // client's own address; a connect from this server's peer.
            let any_of = |addr: &str| {
                spellings(addr)
                    .iter()
                    .map(|a| lit(a))
                    .collect::<Vec<_>>()
                    .join(",")
            };
            let mirror = match client {
                true if mine.laddr.is_empty() => None,
                true => Some(format!("addr IN ({})", any_of(&mine.laddr))),
                false => Some(format!("laddr IN ({})", any_of(&mine.addr))),
            };
            let others = self.ends(&format!(
                "{} AND host != {} AND ({}time_ns BETWEEN {} AND {})",
                if client {
                    "syscall IN ('accept', 'accept4') AND ret >= 0"
                } else {
                    "syscall = 'connect' AND (ret = 0 OR ret = -115)"
                },
                lit(&s.host),
                mirror.map_or(String::new(), |m| m + " OR "),
                lo.max(0),
                hi.max(0)
            ))?;
            let paired: Vec<(Pairing, End)> = others
                .into_iter()
                .filter(|o| client || !is_loopback(&o.addr))
                .map(|o| {
                    let p = if client {
                        pairing(&mine, &o, binds_port(&o.host, &mine.addr))
                    } else {
                        pairing(&o, &mine, binds_port(&s.host, &o.addr))
                    };
                    (p, o)
                })
                .filter(|(p, o)| {
                    *p == Pairing::Exact
                        || (*p == Pairing::ByPortAndTime && (lo..=hi).contains(&o.time_ns))
                })
                .collect();
            let which = if client {
                format!("{}'s connect to {}", s.host, mine.addr)
            } else {
                format!("{}'s accept from {}", s.host, mine.addr)
            };
            let exact: Vec<&End> = paired
                .iter()
                .filter(|(p, _)| *p == Pairing::Exact)
                .map(|(_, o)| o)
                .collect();
            let peers: Vec<End> = if !exact.is_empty() {
                // One 4-tuple can recur (a port reused later): the nearest in time.
                if exact.len() > 1 {
                    self.notes.push(format!("{which}: its addresses recur {} times in the fleet (ports reused); linked to the nearest in time", exact.len()));
                }
                exact
                    .into_iter()
                    .min_by_key(|o| (o.time_ns - mine.time_ns).abs())
                    .cloned()
                    .into_iter()
                    .collect()
            } else {
                let by_port: Vec<End> = paired.into_iter().map(|(_, o)| o).collect();
                match by_port.len() {
                    0 => {
                        self.notes.push(format!("{which}: no other end in the fleet (a host outside it, or NAT or a proxy between)"));
                        continue;
                    }
                    1 => self.notes.push(format!("{which}: joined by port and time (the client's own address was not recorded)")),
                    n => self.notes.push(format!("{which}: {n} possible other ends by port and time (the client's own address was not recorded); all are linked")),
                }
                by_port
            };
            for p in peers {
                // The other end's socket node, named as its host's graph names
                // it: by the accept's peer on the server, by the connect's
                // address on the client.
                let cands = self.nodes_where(&format!(
                    "host = {} AND kind = {} AND name = {}",
                    lit(&p.host),
                    NodeKind::Socket as i64,
                    lit(&p.addr)
                ))?;
                // Its versions of this connection: made after its connect/accept.
                let mut cands: Vec<NodeRowCh> = cands
                    .into_iter()
                    .filter(|c| c.time_ns >= p.time_ns.min(mine.time_ns) - LINK_SKEW_NS)
                    .collect();
                cands.sort_by_key(|c| (c.time_ns, c.node));
                let pick = match dir {
                    // Data written here reaches the other end's versions after it.
                    Direction::Descendants => {
                        cands.iter().find(|c| c.time_ns >= s.time_ns - LINK_SKEW_NS)
                    }
                    // Data read here came from the other end's newest version before it.
                    Direction::Ancestors => cands
                        .iter()
                        .rev()
                        .find(|c| c.time_ns <= s.time_ns + LINK_SKEW_NS),
                };
                let Some(other) = pick else { continue };
                let other_key = (other.host.clone(), other.node);
                let (effect, cause) = match dir {
                    Direction::Descendants => (other_key, key.clone()),
                    Direction::Ancestors => (key.clone(), other_key),
                };
                let server = if client { &p } else { &mine };
                out.push(FleetEdge {
                    effect,
                    cause,
                    kind: EdgeKind::WasDerivedFrom,
                    event_id: server.event_id,
                    time_ns: server.time_ns,
                    host: server.host.clone(),
                    boot: String::new(),
                });
            }
        }
        Ok(out)
    }

    fn ends(&self, cond: &str) -> Result<Vec<End>> {
        let rows: Vec<(String, String, String, u64, u64)> = self.fetch(&format!(
            "SELECT host, addr, laddr, time_ns, id FROM events FINAL WHERE {cond}"
        ))?;
        Ok(rows
            .into_iter()
            .map(|(host, addr, laddr, t, id)| End {
                host,
                addr,
                laddr,
                time_ns: t as i64,
                event_id: id as i64,
            })
            .collect())
    }

    /// Breadth-first walk, one query per level (plus the socket links).
    fn traverse(
        &mut self,
        roots: &[Key],
        dir: Direction,
        max_depth: Option<u32>,
        window: Window,
    ) -> Result<(HashMap<Key, u32>, Vec<FleetEdge>)> {
        let mut depth: HashMap<Key, u32> = roots.iter().map(|r| (r.clone(), 0)).collect();
        let mut level: Vec<Key> = roots.to_vec();
        let mut edges = Vec::new();
        let mut d = 0;
        while !level.is_empty() && max_depth.is_none_or(|m| d < m) {
            self.load(&level)?;
            let mut found = self.edges_of(&level, dir, "")?;
            found.extend(self.links(&level, dir)?);
            let mut next = Vec::new();
            for e in found {
                if !window.admits(e.time_ns) {
                    continue;
                }
                let to = if dir == Direction::Ancestors {
                    e.cause.clone()
                } else {
                    e.effect.clone()
                };
                if !depth.contains_key(&to) {
                    depth.insert(to.clone(), d + 1);
                    next.push(to);
                }
                edges.push(e);
            }
            level = next;
            d += 1;
        }
        Ok((depth, edges))
    }

    pub fn ancestry(
        &mut self,
        spec: &str,
        dir: Direction,
        max_depth: Option<u32>,
        window: Window,
    ) -> Result<Answer> {
        let start = self.resolve(spec, true)?;
        let (depth, edges) = self.traverse(&start, dir, max_depth, window)?;
        let what = if dir == Direction::Ancestors {
            "ancestors"
        } else {
            "descendants"
        };
        let (_, rest) = self.host_of(spec.trim());
        let names_version = rest
            .rsplit_once("@v")
            .is_some_and(|(_, v)| v.parse::<i64>().is_ok())
            || rest
                .strip_prefix('n')
                .unwrap_or(rest)
                .parse::<i64>()
                .is_ok();
        let reach = match dir {
            Direction::Ancestors if names_version => Reach::Before(window),
            Direction::Ancestors => Reach::All(window),
            Direction::Descendants => Reach::After(window),
        };
        self.finish(
            format!("{what} {spec}"),
            start,
            depth,
            edges,
            vec![],
            None,
            reach,
        )
    }

    /// Shortest causal path: `a` depends on `b` or `b` on `a`.
    pub fn path(&mut self, a: &str, b: &str) -> Result<Answer> {
        let from = self.resolve(a, false)?;
        let to = self.resolve(b, false)?;
        for (src, dst, label) in [
            (&from, &to, format!("{a} depends on {b}")),
            (&to, &from, format!("{b} depends on {a}")),
        ] {
            if let Some(edges) = self.shortest(src, dst)? {
                let mut depth = HashMap::new();
                for (i, e) in edges.iter().enumerate() {
                    depth.entry(e.effect.clone()).or_insert(i as u32);
                    depth.entry(e.cause.clone()).or_insert(i as u32 + 1);
                }
                if edges.is_empty() {
                    depth.insert(src[0].clone(), 0);
                }
                let start = vec![edges
                    .first()
                    .map(|e| e.effect.clone())
                    .unwrap_or_else(|| src[0].clone())];
                return self.finish(
                    format!("path {a} {b}"),
                    start,
                    depth,
                    edges,
                    vec![],
                    Some(label),
                    Reach::Found,
                );
            }
        }
        let depth: HashMap<Key, u32> = [
            (from[from.len() - 1].clone(), 0),
            (to[to.len() - 1].clone(), 0),
        ]
        .into_iter()
        .collect();
        self.finish(
            format!("path {a} {b}"),
            vec![],
            depth,
            vec![],
            vec![],
            Some("no causal path".into()),
            Reach::Found,
        )
    }

    fn shortest(&mut self, src: &[Key], dst: &[Key]) -> Result<Option<Vec<FleetEdge>>> {
        let targets: HashSet<&Key> = dst.iter().collect();
        let mut parent: HashMap<Key, Option<FleetEdge>> =
            src.iter().map(|s| (s.clone(), None)).collect();
        let mut level: Vec<Key> = src.to_vec();
        while !level.is_empty() {
            if let Some(hit) = level.iter().find(|k| targets.contains(k)) {
                let mut out = Vec::new();
                let mut cur = hit.clone();
                while let Some(Some(e)) = parent.get(&cur) {
                    out.push(e.clone());
                    cur = e.effect.clone();
                }
                out.reverse();
                return Ok(Some(out));
            }
            self.load(&level)?;
            let mut found = self.edges_of(&level, Direction::Ancestors, "")?;
            found.extend(self.links(&level, Direction::Ancestors)?);
            let mut next = Vec::new();
            for e in found {
                if parent.contains_key(&e.cause) {
                    continue;
                }
                parent.insert(e.cause.clone(), Some(e.clone()));
                next.push(e.cause);
            }
            level = next;
        }
        Ok(None)
    }

    /// Every version of the executions `spec` names (pid:N, HOST:nID, an
    /// executable path or a command name).
    fn processes(&mut self, spec: &str) -> Result<Vec<Key>> {
        let start = match self.resolve(spec, false) {
            Ok(v) => v,
            Err(e) => {
                let (host, rest) = self.host_of(spec.trim());
                let on_host = host
                    .map(|h| format!(" AND host = {}", lit(h)))
                    .unwrap_or_default();
                let rows = self.nodes_where(&format!(
                    "kind = {} AND name IN ({}, {}){on_host}",
                    NodeKind::Process as i64,
                    lit(rest),
                    lit(&format!("[{rest}]"))
                ))?;
                if rows.is_empty() {
                    return Err(e.context(format!("no process named {spec:?} either")));
                }
                rows.into_iter().map(|r| (r.host, r.node)).collect()
            }
        };
        self.load(&start)?;
        let mut execs = Vec::new();
        for k in &start {
            let r = &self.nodes[k];
            let Some(exec) = r.exec else {
                bail!(
                    "{spec:?} resolves to a {} ({}), not a process; use pid:N or HOST:nID",
                    kind_name(r.kind),
                    r.name
                );
            };
            execs.push((k.0.clone(), exec));
        }
        let rows = self.nodes_where(&format!(
            "kind = {} AND ({})",
            NodeKind::Process as i64,
            keys_cond(&execs, "exec")
        ))?;
        let mut out: Vec<Key> = rows.into_iter().map(|r| (r.host, r.node)).collect();
        out.sort();
        out.dedup();
        Ok(out)
    }

    pub fn touched_by(&mut self, spec: &str, window: Window) -> Result<Answer> {
        let procs = self.processes(spec)?;
        let mut edges = self.edges_of(
            &procs,
            Direction::Ancestors,
            &format!(" AND kind = {}", EdgeKind::Used as i64),
        )?;
        edges.extend(self.edges_of(
            &procs,
            Direction::Descendants,
            &format!(" AND kind = {}", EdgeKind::WasGeneratedBy as i64),
        )?);
        let others: Vec<Key> = edges
            .iter()
            .flat_map(|e| [e.effect.clone(), e.cause.clone()])
            .collect();
        self.load(&others)?;
        let is_proc = |k: &Key, n: &HashMap<Key, NodeRowCh>| {
            n.get(k).is_some_and(|r| r.kind == NodeKind::Process as u8)
        };
        edges.retain(|e| {
            !is_proc(
                if e.kind == EdgeKind::Used {
                    &e.cause
                } else {
                    &e.effect
                },
                &self.nodes,
            ) && window.admits(e.time_ns)
        });
        self.touch_answer(format!("touched-by {spec}"), procs, edges, window)
    }

    pub fn who_touched(&mut self, spec: &str, window: Window) -> Result<Answer> {
        let versions = self.resolve(spec, false)?;
        let mut edges = self.edges_of(
            &versions,
            Direction::Descendants,
            &format!(" AND kind = {}", EdgeKind::Used as i64),
        )?;
        edges.extend(self.edges_of(
            &versions,
            Direction::Ancestors,
            &format!(" AND kind = {}", EdgeKind::WasGeneratedBy as i64),
        )?);
        edges.retain(|e| window.admits(e.time_ns));
        self.touch_answer(format!("who-touched {spec}"), versions, edges, window)
    }

    fn touch_answer(
        &mut self,
        query: String,
        start: Vec<Key>,
        edges: Vec<FleetEdge>,
        window: Window,
    ) -> Result<Answer> {
        let rows = edges
            .iter()
            .map(|e| {
                let (action, process, object) = if e.kind == EdgeKind::Used {
                    ("read", &e.effect, &e.cause)
                } else {
                    ("wrote", &e.cause, &e.effect)
                };
                (
                    action,
                    process.clone(),
                    object.clone(),
                    e.time_ns,
                    e.event_id,
                )
            })
            .collect();
        let mut depth: HashMap<Key, u32> = start.iter().map(|s| (s.clone(), 0)).collect();
        for e in &edges {
            depth.entry(e.effect.clone()).or_insert(1);
            depth.entry(e.cause.clone()).or_insert(1);
        }
        self.finish(query, start, depth, edges, rows, None, Reach::After(window))
    }

    /// The answer in the store's terms: nodes numbered 1.. in (depth, host,
    /// id) order and named `HOST:NAME`; the losses of the answer's hosts
    /// and boots that overlap what it asks about.
    #[allow(clippy::too_many_arguments)] // the parts of one answer
    fn finish(
        &mut self,
        query: String,
        start: Vec<Key>,
        depth: HashMap<Key, u32>,
        edges: Vec<FleetEdge>,
        rows: Vec<(&'static str, Key, Key, i64, i64)>,
        path: Option<String>,
        reach: Reach,
    ) -> Result<Answer> {
        let keys: Vec<Key> = depth.keys().cloned().collect();
        self.load(&keys)?;
        let mut order: Vec<(u32, Key)> = depth.iter().map(|(k, d)| (*d, k.clone())).collect();
        order.sort();
        let ids: HashMap<Key, i64> = order
            .iter()
            .enumerate()
            .map(|(i, (_, k))| (k.clone(), i as i64 + 1))
            .collect();
        let mut boots: BTreeMap<(String, String), i64> = BTreeMap::new();
        let mut boot_no = |h: &str, b: &str| -> i64 {
            let n = boots.len() as i64 + 1;
            *boots.entry((h.to_string(), b.to_string())).or_insert(n)
        };
        let mut nodes = Vec::with_capacity(order.len());
        for (d, k) in &order {
            let r = self.nodes.get(k).with_context(|| {
                format!(
                    "node {} of host {} referenced by an edge is missing",
                    k.1, k.0
                )
            })?;
            nodes.push(NodeInfo {
                node: ids[k],
                kind: kind_name(r.kind),
                boot: boot_no(&r.host, &r.boot),
                name: format!("{}:{}", r.host, r.name),
                version: r.version,
                pid: r.pid,
                exec: r.exec.and_then(|e| ids.get(&(r.host.clone(), e)).copied()),
                time_ns: r.time_ns,
                time: format_ns(r.time_ns as u64),
                event_id: r.event_id,
                attrs: (!r.attrs.is_empty()).then(|| Attrs::new(r.attrs.clone())),
                depth: Some(*d),
            });
        }
        let edge_infos: Vec<EdgeInfo> = edges
            .iter()
            .map(|e| EdgeInfo {
                effect: ids[&e.effect],
                cause: ids[&e.cause],
                kind: e.kind,
                event_id: e.event_id,
                time_ns: e.time_ns,
                boot: boot_no(&e.host, &e.boot),
            })
            .collect();
        let rows = rows
            .into_iter()
            .map(|(action, p, o, t, ev)| TouchRow {
                time_ns: t,
                time: format_ns(t as u64),
                action,
                process: ids[&p],
                object: ids[&o],
                event_id: ev,
            })
            .collect::<Vec<_>>();
        let mut rows = rows;
        rows.sort_by_key(|r| (r.time_ns, r.event_id));
        let times: Vec<i64> = if edges.is_empty() {
            nodes.iter().map(|n| n.time_ns).collect()
        } else {
            edges.iter().map(|e| e.time_ns).collect()
        };
        let span = span_of(times);
        // ClickHouse's times are unsigned: an open start is 0.
        let question = reach
            .question(
                span,
                start
                    .iter()
                    .filter_map(|k| self.nodes.get(k))
                    .map(|r| r.time_ns),
            )
            .map(|(lo, hi)| (lo.max(0), hi));
        let hosts_boots: Vec<(String, String)> = boots
            .keys()
            .filter(|(_, b)| !b.is_empty())
            .cloned()
            .collect();
        let losses = self.losses(&hosts_boots, question, &boots)?;
        let mut containers = BTreeMap::new();
        for n in &nodes {
            if let Some(c) = n.container() {
                containers.insert(c, None);
            }
        }
        let mut notes = std::mem::take(&mut self.notes);
        if self.crossed {
            notes.insert(0, LINK_NOTE.to_string());
        }
        notes.dedup();
        let start = start.iter().filter_map(|k| ids.get(k).copied()).collect();
        Ok(Answer {
            query,
            start,
            nodes,
            edges: edge_infos,
            rows,
            path,
            span_ns: span,
            complete: losses.is_empty(),
            losses,
            containers,
            notes,
        })
    }

    /// Loss records (the collectors', the Kafka sinks') and events that lost
    /// their attributes, of these hosts' boots, overlapping `span`.
    fn losses(
        &self,
        hosts_boots: &[(String, String)],
        span: Option<(i64, i64)>,
        boots: &BTreeMap<(String, String), i64>,
    ) -> Result<Vec<LossNote>> {
        let Some((lo, hi)) = span else {
            return Ok(vec![]);
        };
        if hosts_boots.is_empty() {
            return Ok(vec![]);
        }
        let cond = hosts_boots
            .iter()
            .map(|(h, b)| format!("(host = {} AND boot = {})", lit(h), lit(b)))
            .collect::<Vec<_>>()
            .join(" OR ");
        let (lo, hi) = (lo.max(0), hi.max(0));
        let mut rows: Vec<(String, String, String, i64, u64, u64, u64)> = self.fetch(&format!(
            "SELECT host, boot, category, ifNull(toInt64(cpu), -1), count, start_ns, end_ns FROM losses FINAL \
             WHERE start_ns <= {hi} AND end_ns >= {lo} AND ({cond}) ORDER BY start_ns, host"
        ))?;
        rows.extend(self.fetch::<(String, String, String, i64, u64, u64, u64)>(&format!(
            "SELECT host, boot, 'incomplete', toInt64(cpu), count(), min(time_ns), max(time_ns) FROM events FINAL \
             WHERE incomplete = 1 AND time_ns BETWEEN {lo} AND {hi} AND ({cond}) GROUP BY host, boot, cpu"
        ))?);
        Ok(rows
            .into_iter()
            .map(|(host, boot, category, cpu, count, s, e)| LossNote {
                boot: boots.get(&(host.clone(), boot)).copied().unwrap_or(0),
                host: Some(host),
                cpu,
                category,
                count: count as i64,
                start_ns: s as i64,
                end_ns: e as i64,
            })
            .collect())
    }
}

/// The answer to `q` over the fleet.
fn answer(fleet: &mut Fleet, q: &Query, container: Option<&str>) -> Result<Answer> {
    if container.is_some() {
        bail!("--container does not narrow a fleet answer yet (the fleet keeps container ids, not names); leave it out");
    }
    match q {
        Query::Ancestors(t) => {
            fleet.ancestry(&t.target, Direction::Ancestors, t.depth, t.window.window()?)
        }
        Query::Descendants(t) => fleet.ancestry(
            &t.target,
            Direction::Descendants,
            t.depth,
            t.window.window()?,
        ),
        Query::Path { a, b } => fleet.path(a, b),
        Query::TouchedBy { process, window } => fleet.touched_by(process, window.window()?),
        Query::WhoTouched { path, window } => fleet.who_touched(path, window.window()?),
        Query::Event { .. } => bail!("`event` prints a raw event; it has no graph"),
        Query::Workflow { .. } => {
            bail!("`workflow` is not answered over the fleet yet; ask one host's store (--db)")
        }
    }
}

/// `custos query --clickhouse URL ...`.
pub fn query(args: QueryArgs) -> Result<i32> {
    let url = args
        .fleet
        .clickhouse
        .as_deref()
        .context("--clickhouse is needed to ask the fleet")?;
    let mut fleet = Fleet::connect(url, &args.fleet.clickhouse_db)?;
    if let Query::Event { id } = &args.query {
        let id = custos_store::query::event_id_of(id).with_context(|| {
            format!(
                "event id {:?}: expected a decimal or 0x-hex number",
                id.trim()
            )
        })?;
        let lines: Vec<String> =
            fleet.fetch(&format!("SELECT DISTINCT line FROM events WHERE id = {id}"))?;
        if lines.is_empty() {
            bail!("no event {id:#x} in the fleet");
        }
        for l in lines {
            println!("{l}");
        }
        return Ok(0);
    }
    let a = answer(&mut fleet, &args.query, args.container.as_deref())?;
    custos_store::cli::print_answer(&a, args.json)
}

/// `custos graph --clickhouse URL ...`.
pub fn graph(args: GraphArgs) -> Result<i32> {
    let url = args
        .fleet
        .clickhouse
        .as_deref()
        .context("--clickhouse is needed to ask the fleet")?;
    args.check_outputs(&[])?;
    let mut fleet = Fleet::connect(url, &args.fleet.clickhouse_db)?;
    let a = answer(&mut fleet, &args.query, args.container.as_deref())?;
    custos_store::cli::draw(&args, a)
}

fn kind_name(kind: u8) -> &'static str {
    NodeKind::from_i64(kind as i64)
        .map(|k| k.name())
        .unwrap_or("unknown")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_become_a_condition_per_host() {
        let keys = vec![
            ("a".to_string(), 1),
            ("b'".to_string(), 2),
            ("a".to_string(), 3),
        ];
        assert_eq!(
            keys_cond(&keys, "node"),
            "(host = 'a' AND node IN (1,3)) OR (host = 'b\\'' AND node IN (2))"
        );
        assert_eq!(keys_cond(&[], "node"), "0");
    }

    #[test]
    fn addresses_split_into_ip_and_port() {
        assert_eq!(port_of("10.0.0.2:8080"), Some("8080"));
        assert_eq!(port_of("[fe80::1]:443"), Some("443"));
        assert_eq!(port_of("unix:/run/x.sock"), None);
        assert_eq!(ip_of("[::1]:80"), "[::1]");
        assert!(is_loopback("127.0.0.1:5") && !is_loopback("10.0.0.1:5"));
        // A dual-stack socket's IPv4 peer is the same address.
        assert_eq!(canon("[::ffff:10.0.0.1]:45678"), "10.0.0.1:45678");
        assert_eq!(canon("[fe80::1]:443"), "[fe80::1]:443");
        assert_eq!(
            spellings("10.0.0.1:5"),
            ["10.0.0.1:5", "[::ffff:10.0.0.1]:5"]
        );
        assert_eq!(
            spellings("[::ffff:10.0.0.1]:5"),
            ["10.0.0.1:5", "[::ffff:10.0.0.1]:5"]
        );
        assert_eq!(spellings("[fe80::1]:443"), ["[fe80::1]:443"]);
    }

    #[test]
    fn a_connect_and_an_accept_pair_by_their_addresses_or_else_by_port() {
        let end = |addr: &str, laddr: &str| End {
            host: "h".into(),
            addr: addr.into(),
            laddr: laddr.into(),
            time_ns: 0,
            event_id: 0,
        };
        let client = end("10.0.0.2:7000", "10.0.0.1:45678");
        // The accept's peer is the client's own address, its own the connect's address.
        assert_eq!(
            pairing(&client, &end("10.0.0.1:45678", "10.0.0.2:7000"), false),
            Pairing::Exact
        );
        assert_eq!(
            pairing(
                &client,
                &end("[::ffff:10.0.0.1]:45678", "[::ffff:10.0.0.2]:7000"),
                false
            ),
            Pairing::Exact
        );
        // Another client's connection to the same port, or the same client's to another port.
        assert_eq!(
            pairing(&client, &end("10.0.0.1:45679", "10.0.0.2:7000"), true),
            Pairing::No
        );
        assert_eq!(
            pairing(&client, &end("10.0.0.1:45678", "10.0.0.2:7001"), true),
            Pairing::No
        );
        // A server without `laddr`: its host bound the port, and the client's address matches.
        assert_eq!(
            pairing(&client, &end("10.0.0.1:45678", ""), true),
            Pairing::Exact
        );
        assert_eq!(
            pairing(&client, &end("10.0.0.1:45678", ""), false),
            Pairing::No
        );
        // A client without `laddr`: only the port (and the caller's time window).
        let old = end("10.0.0.2:7000", "");
        assert_eq!(
            pairing(&old, &end("10.0.0.9:1234", ""), true),
            Pairing::ByPortAndTime
        );
        assert_eq!(
            pairing(&old, &end("10.0.0.9:1234", "10.0.0.2:7000"), false),
            Pairing::ByPortAndTime
        );
        assert_eq!(
            pairing(&old, &end("10.0.0.9:1234", "10.0.0.2:7001"), true),
            Pairing::No
        );
        // Through NAT the server sees another client address: no exact pair, said as no other end.
        assert_eq!(
            pairing(&client, &end("192.0.2.1:6000", "10.0.0.2:7000"), true),
            Pairing::No
        );
    }
}

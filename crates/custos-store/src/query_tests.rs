//! Known answers on small hand-built streams (JSON Lines per docs/event-schema.md).

use super::*;
use crate::ingest::{IngestOptions, Ingestor};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

/// Builds events with increasing ids and times (1 s apart, from T0).
struct Stream {
    lines: Vec<String>,
    seq: u64,
}
const T0: u64 = 1_763_700_000_000_000_000;
const SEC: u64 = 1_000_000_000;

impl Stream {
    fn new() -> Self {
        Self {
            lines: vec![json!({"type":"boot","boot_id":"test-boot"}).to_string()],
            seq: 0,
        }
    }
    fn t(&self) -> u64 {
        T0 + self.seq * SEC
    }
    fn ev(&mut self, pid: u32, comm: &str, syscall: &str, extra: Value) -> u64 {
        self.seq += 1;
        let cpu = self.seq % 2;
        let mut v = json!({"type":"event","id": (cpu << 48) | self.seq, "cpu": cpu, "seq": self.seq, "time_ns": self.t(),
            "pid": pid, "tid": pid, "ppid": 1, "uid": 1000, "gid": 1000, "euid": 1000, "egid": 1000,
            "comm": comm, "syscall": syscall, "category": "file"});
        for (k, x) in extra.as_object().unwrap() {
            v[k] = x.clone();
        }
        self.lines.push(v.to_string());
        self.t()
    }
    fn fork(&mut self, pid: u32, comm: &str, child: u32) -> u64 {
        self.ev(
            pid,
            comm,
            "clone",
            json!({"ret": child, "child_pid": child}),
        )
    }
    fn exec(&mut self, pid: u32, path: &str) -> u64 {
        let comm = path.rsplit('/').next().unwrap().to_string();
        self.ev(
            pid,
            &comm,
            "execve",
            json!({"ret": 0, "path": path, "argv": [comm]}),
        )
    }
    fn read(&mut self, pid: u32, path: &str) -> u64 {
        self.ev(pid, "x", "read", json!({"ret": 100, "fd": 9, "path": path}))
    }
    fn write(&mut self, pid: u32, path: &str) -> u64 {
        self.ev(
            pid,
            "x",
            "write",
            json!({"ret": 100, "fd": 9, "path": path}),
        )
    }
    fn loss(&mut self, cpu: u32, count: u64, start: u64, end: u64) {
        self.lines.push(json!({"type":"loss","cpu":cpu,"first_seq":1000+start % 1000,"last_seq":1000 + start % 1000 + count - 1,"count":count,"category":"events","start_ns":start,"end_ns":end}).to_string());
    }
    fn ingest(&self, db: &Path) -> crate::IngestSummary {
        let mut ing = Ingestor::open(
            db,
            IngestOptions {
                batch_lines: 7,
                ..Default::default()
            },
        )
        .unwrap();
        for l in &self.lines {
            ing.push_line(l).unwrap();
        }
        ing.finish().unwrap().0
    }
}

fn db() -> (tempfile::TempDir, PathBuf) {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("t.db");
    (d, p)
}

/// The ancestors of @of in the store at @db, over all time.
fn ancestors_of(db: &Path, of: &str) -> Answer {
    let conn = crate::schema::open_ro(db).unwrap();
    ancestry(&conn, of, Direction::Ancestors, None, Window::default()).unwrap()
}

fn labels(a: &Answer) -> Vec<String> {
    let start: HashSet<i64> = a.start.iter().copied().collect();
    let mut v: Vec<String> = a
        .nodes
        .iter()
        .filter(|n| !start.contains(&n.node))
        .map(|n| n.label())
        .collect();
    v.sort();
    v
}

/// A small build: bash forks gcc (reads main.c via fd, stdio.h by path, writes
/// main.o twice), bash forks ld (reads main.o, writes app, renames it), then
/// another process rewrites main.o.
fn build_stream() -> Stream {
    let mut s = Stream::new();
    s.fork(100, "bash", 101);
    s.exec(101, "/usr/bin/gcc");
    s.ev(
        101,
        "gcc",
        "openat",
        json!({"ret": 3, "fd": 3, "path": "/src/main.c"}),
    );
    s.ev(101, "gcc", "read", json!({"ret": 100, "fd": 3})); // no path: resolved through the fd table
    s.read(101, "/usr/include/stdio.h");
    s.ev(
        101,
        "gcc",
        "openat",
        json!({"ret": 4, "fd": 4, "path": "/tmp/main.o"}),
    );
    s.ev(101, "gcc", "write", json!({"ret": 100, "fd": 4}));
    s.ev(101, "gcc", "write", json!({"ret": 100, "fd": 4})); // same writer, unread: same version
    s.ev(101, "gcc", "exit_group", json!({}));
    s.fork(100, "bash", 102);
    s.exec(102, "/usr/bin/ld");
    s.read(102, "/tmp/main.o");
    s.write(102, "/out/app");
    s.ev(
        102,
        "ld",
        "rename",
        json!({"ret": 0, "path": "/out/app", "path2": "/out/app.final"}),
    );
    s.ev(102, "ld", "exit_group", json!({}));
    s.fork(100, "bash", 103);
    s.write(103, "/tmp/main.o");
    s
}

#[test]
fn ancestors_of_a_renamed_build_output() {
    let (_d, p) = db();
    let s = build_stream();
    let sum = s.ingest(&p);
    assert_eq!(sum.malformed, 0);
    let conn = crate::schema::open_ro(&p).unwrap();
    let a = ancestry(
        &conn,
        "/out/app.final",
        Direction::Ancestors,
        None,
        Window::default(),
    )
    .unwrap();
    assert_eq!(
        labels(&a),
        vec![
            "/out/app v1",
            "/src/main.c v0",
            "/tmp/main.o v1",
            "/usr/bin/gcc pid 101",
            "/usr/bin/gcc v0",
            "/usr/bin/ld pid 102",
            "/usr/bin/ld v0",
            "/usr/include/stdio.h v0",
            "[bash] pid 100",
            "[bash] pid 101",
            "[bash] pid 102",
            "uid:1000",
        ]
    );
    // The later rewrite of main.o (by pid 103) is not an ancestor; the version chain is.
    let v2 = resolve(&conn, "/tmp/main.o@v2", true).unwrap();
    let d = ancestry(
        &conn,
        "/src/main.c",
        Direction::Descendants,
        None,
        Window::default(),
    )
    .unwrap();
    assert!(
        d.nodes.iter().any(|n| n.node == v2[0]),
        "v2 wasDerivedFrom v1, so it descends from main.c"
    );
    assert_eq!(
        labels(&d),
        vec![
            "/out/app v1",
            "/out/app.final v1",
            "/tmp/main.o v1",
            "/tmp/main.o v2",
            "/usr/bin/gcc pid 101",
            "/usr/bin/ld pid 102"
        ]
    );
    // Depth limit: one step back from app.final is its rename source and ld.
    let a1 = ancestry(
        &conn,
        "/out/app.final",
        Direction::Ancestors,
        Some(1),
        Window::default(),
    )
    .unwrap();
    assert_eq!(labels(&a1), vec!["/out/app v1", "/usr/bin/ld pid 102"]);
    let kinds: HashSet<&str> = a1.edges.iter().map(|e| e.kind.name()).collect();
    assert_eq!(
        kinds,
        ["wasDerivedFrom", "wasGeneratedBy"].into_iter().collect()
    );
}

#[test]
fn time_window_limits_the_walk() {
    let (_d, p) = db();
    let s = build_stream();
    s.ingest(&p);
    let conn = crate::schema::open_ro(&p).unwrap();
    // Event n happens at T0+n s: ld reads main.o at 12, writes /out/app at 13, renames at 14.
    let w = Window {
        since: None,
        until: Some((T0 + 11 * SEC) as i64),
    };
    let a = ancestry(&conn, "/out/app.final", Direction::Ancestors, None, w).unwrap();
    // Every edge into app.final's past is at T0+12s or later: nothing is admitted.
    assert!(a.edges.is_empty(), "{:?}", a.edges);
    assert_eq!(a.nodes.len(), 1, "only the target itself");
    let w = Window {
        since: Some((T0 + 12 * SEC) as i64),
        until: None,
    };
    let a = ancestry(&conn, "/out/app.final", Direction::Ancestors, None, w).unwrap();
    assert_eq!(
        labels(&a),
        vec!["/out/app v1", "/tmp/main.o v1", "/usr/bin/ld pid 102"]
    );
}

#[test]
fn exec_chain_and_path() {
    let (_d, p) = db();
    let mut s = Stream::new();
    // init(1) → sh(10) → sh(11) → python(12) writes /data/result
    s.fork(1, "init", 10);
    s.exec(10, "/bin/sh");
    s.fork(10, "sh", 11);
    s.exec(11, "/bin/sh");
    s.exec(11, "/usr/bin/python3"); // exec twice in one pid: two executions
    s.read(11, "/data/input.csv");
    s.write(11, "/data/result");
    s.ingest(&p);
    let conn = crate::schema::open_ro(&p).unwrap();
    let a = ancestry(
        &conn,
        "/data/result",
        Direction::Ancestors,
        None,
        Window::default(),
    )
    .unwrap();
    let procs: Vec<String> = a
        .nodes
        .iter()
        .filter(|n| n.kind == "process")
        .map(|n| n.label())
        .collect();
    assert_eq!(
        procs,
        [
            "/usr/bin/python3 pid 11",
            "/bin/sh pid 11",
            "/bin/sh pid 11",
            "/bin/sh pid 10",
            "[init] pid 10",
            "[init] pid 1"
        ]
    );
    let depths: Vec<u32> = a
        .nodes
        .iter()
        .filter(|n| n.kind == "process")
        .map(|n| n.depth.unwrap())
        .collect();
    assert_eq!(
        depths,
        vec![1, 2, 3, 4, 5, 6],
        "one exec or fork per step up the chain"
    );
    let path_answer = path(&conn, "/data/result", "pid:1").unwrap();
    assert_eq!(
        path_answer.path.as_deref(),
        Some("/data/result depends on pid:1")
    );
    assert_eq!(path_answer.edges.len(), 6);
    let back = path(&conn, "pid:1", "/data/result").unwrap();
    assert_eq!(back.path.as_deref(), Some("/data/result depends on pid:1"));
    let none = path(&conn, "/data/input.csv", "/bin/sh").unwrap();
    assert_eq!(none.path.as_deref(), Some("no causal path"));
    assert!(none.edges.is_empty());
}

/// Topological check over the whole edge table: the graph must be a DAG.
fn assert_acyclic(conn: &Connection) {
    let edges: Vec<(i64, i64)> = crate::effects::all(conn)
        .unwrap()
        .iter()
        .map(|e| (e.effect, e.cause))
        .collect();
    let mut indeg: HashMap<i64, usize> = HashMap::new();
    let mut out: HashMap<i64, Vec<i64>> = HashMap::new();
    for (e, c) in &edges {
        *indeg.entry(*c).or_default() += 1;
        indeg.entry(*e).or_default();
        out.entry(*e).or_default().push(*c);
    }
    let mut ready: Vec<i64> = indeg
        .iter()
        .filter(|(_, d)| **d == 0)
        .map(|(n, _)| *n)
        .collect();
    let mut seen = 0;
    while let Some(n) = ready.pop() {
        seen += 1;
        for c in out.get(&n).cloned().unwrap_or_default() {
            let d = indeg.get_mut(&c).unwrap();
            *d -= 1;
            if *d == 0 {
                ready.push(c);
            }
        }
    }
    assert_eq!(seen, indeg.len(), "the provenance graph has a cycle");
}

#[test]
fn process_versions_keep_the_graph_acyclic_and_precise() {
    let (_d, p) = db();
    let mut s = Stream::new();
    // P reads A, writes B, then reads C and writes D: B must not depend on C.
    s.read(20, "/a");
    s.write(20, "/b");
    s.read(20, "/c");
    s.write(20, "/d");
    // The classic cycle: P writes F, Q reads F and writes G, P reads G.
    s.write(30, "/f");
    s.read(31, "/f");
    s.write(31, "/g");
    s.read(30, "/g");
    s.write(30, "/h");
    // Reading back one's own write adds nothing.
    s.write(40, "/self");
    s.read(40, "/self");
    s.ingest(&p);
    let conn = crate::schema::open_ro(&p).unwrap();
    assert_acyclic(&conn);
    let b = ancestry(&conn, "/b", Direction::Ancestors, None, Window::default()).unwrap();
    assert_eq!(
        labels(&b),
        vec!["/a v0", "[test] pid 20", "uid:1000"]
            .into_iter()
            .map(|l| l.replace("[test]", "[x]"))
            .collect::<Vec<_>>()
    );
    let d = ancestry(&conn, "/d", Direction::Ancestors, None, Window::default()).unwrap();
    assert_eq!(
        labels(&d),
        vec!["/a v0", "/c v0", "[x] pid 20", "[x] pid 20 v2", "uid:1000"]
    );
    let h = ancestry(&conn, "/h", Direction::Ancestors, None, Window::default()).unwrap();
    assert!(labels(&h).contains(&"/g v1".to_string()) && labels(&h).contains(&"/f v1".to_string()));
    let own = ancestry(
        &conn,
        "pid:40",
        Direction::Ancestors,
        None,
        Window::default(),
    )
    .unwrap();
    assert_eq!(
        labels(&own),
        vec!["uid:1000"],
        "no used edge back to its own output"
    );
}

#[test]
fn pipes_sockets_and_fd_tracking() {
    let (_d, p) = db();
    let mut s = Stream::new();
    // sh creates a pipe, forks a writer and a reader that inherit it.
    s.ev(
        50,
        "sh",
        "pipe2",
        json!({"ret": 0, "path": "pipe:[4242]", "args": {"read_fd": 3, "write_fd": 4}}),
    );
    s.fork(50, "sh", 51);
    s.fork(50, "sh", 52);
    s.ev(51, "producer", "write", json!({"ret": 10, "fd": 4}));
    s.ev(
        52,
        "consumer",
        "dup2",
        json!({"ret": 0, "args": {"oldfd": 3, "newfd": 0}}),
    );
    s.ev(
        52,
        "consumer",
        "close",
        json!({"ret": 0, "args": {"fd": 3}}),
    );
    s.ev(52, "consumer", "read", json!({"ret": 10, "fd": 0}));
    s.ev(
        52,
        "consumer",
        "write",
        json!({"ret": 10, "path": "/out/consumed"}),
    );
    // A download: connect, receive on the socket fd, write a file; then send back.
    s.ev(
        60,
        "curl",
        "connect",
        json!({"ret": 0, "args": {"fd": 5}, "addr": "93.184.216.34:443"}),
    );
    s.ev(
        60,
        "curl",
        "recvfrom",
        json!({"ret": 1400, "fd": 5, "path": "socket:[99]"}),
    );
    s.write(60, "/tmp/download");
    s.ev(60, "curl", "sendto", json!({"ret": 20, "fd": 5}));
    s.ev(60, "curl", "read", json!({"ret": 20, "fd": 77})); // unknown fd, no path: counted, not guessed
    let sum = s.ingest(&p);
    assert_eq!(sum.graph.unresolved_io, 1);
    let conn = crate::schema::open_ro(&p).unwrap();
    let a = ancestry(
        &conn,
        "/out/consumed",
        Direction::Ancestors,
        None,
        Window::default(),
    )
    .unwrap();
    let l = labels(&a);
    assert!(l.contains(&"pipe:[4242] v1".to_string()), "{l:?}");
    assert!(
        a.nodes
            .iter()
            .any(|n| n.kind == "process" && n.pid == Some(51)),
        "the writer is an ancestor: {l:?}"
    );
    let kinds: HashSet<&str> = a.nodes.iter().map(|n| n.kind).collect();
    assert!(kinds.contains("pipe"));
    let dl = ancestry(
        &conn,
        "/tmp/download",
        Direction::Ancestors,
        None,
        Window::default(),
    )
    .unwrap();
    assert!(
        labels(&dl).contains(&"93.184.216.34:443 v0".to_string()),
        "{:?}",
        labels(&dl)
    );
    let sock = resolve(&conn, "sock:93.184.216.34:443", true).unwrap();
    let si = node_info(&conn, sock[0]).unwrap().unwrap();
    assert_eq!(
        (si.kind, si.version),
        ("socket", 1),
        "the send made a new version of the endpoint"
    );
}

#[test]
fn touched_by_and_who_touched() {
    let (_d, p) = db();
    let s = build_stream();
    s.ingest(&p);
    let conn = crate::schema::open_ro(&p).unwrap();
    let t = touched_by(&conn, "pid:101", Window::default()).unwrap();
    let rows: Vec<(String, String)> = t
        .rows
        .iter()
        .map(|r| (r.action.to_string(), t.node(r.object).unwrap().label()))
        .collect();
    assert_eq!(
        rows,
        vec![
            ("read".to_string(), "/usr/bin/gcc v0".to_string()),
            ("read".into(), "/src/main.c v0".into()),
            ("read".into(), "/usr/include/stdio.h v0".into()),
            ("wrote".into(), "/tmp/main.o v1".into()),
        ]
    );
    let w = who_touched(&conn, "/tmp/main.o", Window::default()).unwrap();
    let rows: Vec<(String, Option<i64>)> = w
        .rows
        .iter()
        .map(|r| (r.action.to_string(), w.node(r.process).unwrap().pid))
        .collect();
    assert_eq!(
        rows,
        vec![
            ("wrote".to_string(), Some(101)),
            ("read".into(), Some(102)),
            ("wrote".into(), Some(103))
        ]
    );
    assert!(
        touched_by(&conn, "/tmp/main.o", Window::default()).is_err(),
        "a file is not a process"
    );
    assert!(resolve(&conn, "/nonexistent", true)
        .unwrap_err()
        .to_string()
        .contains("nothing in the store"));
}

#[test]
fn completeness_annotation_exactly_when_a_loss_overlaps() {
    let (_d, p) = db();
    let mut s = Stream::new();
    s.read(70, "/early/in"); // T0+1s
    s.write(70, "/early/out"); // T0+2s
    for i in 0..5 {
        s.read(80 + i, "/filler"); // T0+3..7s, unrelated processes
    }
    let late_start = s.read(90, "/late/in"); // T0+8s
    let late_end = s.write(90, "/late/out"); // T0+9s
    s.loss(3, 7, T0 + 4 * SEC, T0 + 6 * SEC); // after /early/out was written, before /late/out
    s.loss(1, 42, late_end, late_end + SEC); // touches the late span at its last instant
    s.ingest(&p);
    let conn = crate::schema::open_ro(&p).unwrap();
    // A loss after a version was written cannot hide one of its causes ...
    let version = |path: &str| resolve(&conn, path, true).unwrap()[0].to_string();
    let early = ancestry(
        &conn,
        &version("/early/out"),
        Direction::Ancestors,
        None,
        Window::default(),
    )
    .unwrap();
    assert!(
        early.complete,
        "losses at T0+4..6s come after {:?}",
        early.span_ns
    );
    assert!(early.losses.is_empty());
    // ... but the newest version of a path may be a write that was lost.
    let newest = ancestry(
        &conn,
        "/early/out",
        Direction::Ancestors,
        None,
        Window::default(),
    )
    .unwrap();
    assert_eq!(
        newest.losses.iter().map(|l| l.cpu).collect::<Vec<_>>(),
        vec![3, 1]
    );
    // Any loss before it may have: the CPU 3 loss may have been a write to
    // /late/in, though no edge of the answer is near it.
    let late = ancestry(
        &conn,
        "/late/out",
        Direction::Ancestors,
        None,
        Window::default(),
    )
    .unwrap();
    assert_eq!(late.span_ns, Some((late_start as i64, late_end as i64)));
    assert!(!late.complete);
    assert_eq!(
        late.losses.iter().map(|l| l.cpu).collect::<Vec<_>>(),
        vec![3, 1]
    );
    let msg = late.losses[1].message();
    assert!(
        msg.starts_with("may be incomplete: 42 events lost on CPU 1 between "),
        "{msg}"
    );
    assert!(
        crate::render::text(&late).contains("WARNING: may be incomplete: 42 events lost on CPU 1")
    );
    assert!(!crate::render::text(&early).contains("may be incomplete"));
    // What /filler fed, and who touched /early/out, may have grown by any
    // loss after them (a reader lost leaves no edge near the found ones).
    let filler = ancestry(
        &conn,
        "/filler",
        Direction::Descendants,
        None,
        Window::default(),
    )
    .unwrap();
    assert_eq!(
        filler.losses.iter().map(|l| l.cpu).collect::<Vec<_>>(),
        vec![3, 1]
    );
    let touched = who_touched(&conn, "/early/out", Window::default()).unwrap();
    assert!(
        !touched.complete && touched.losses.len() == 2,
        "{:?}",
        touched.losses
    );
    // ... unless the question ends before them.
    let until = Window {
        since: None,
        until: Some((T0 + 3 * SEC) as i64),
    };
    assert!(who_touched(&conn, "/early/out", until).unwrap().complete);
}

#[test]
fn reingest_does_not_duplicate_and_malformed_lines_are_skipped() {
    let (_d, p) = db();
    let mut s = build_stream();
    s.lines.insert(3, "{not json".into());
    s.lines.insert(6, r#"{"type":"event","id":5}"#.into());
    s.lines.insert(9, "".into());
    let first = s.ingest(&p);
    assert_eq!(first.malformed, 2);
    let conn = crate::schema::open_ro(&p).unwrap();
    let count = |sql: &str| -> i64 { conn.query_row(sql, [], |r| r.get(0)).unwrap() };
    let (events, nodes, edges) = (
        count("SELECT COALESCE(SUM(last_id - first_id + 1), 0) FROM event_ranges"),
        crate::nodes::count(&conn).unwrap(),
        crate::effects::count(&conn).unwrap(),
    );
    assert_eq!(events as u64, first.events_new);
    let rejects: Vec<(i64, String)> = conn
        .prepare("SELECT line_no, error FROM rejects ORDER BY line_no")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(|r| r.unwrap())
        .collect();
    assert_eq!(
        rejects.iter().map(|r| r.0).collect::<Vec<_>>(),
        vec![4, 7],
        "1-based line numbers"
    );
    assert!(rejects[1].1.contains("time_ns"));
    let again = s.ingest(&p);
    assert_eq!(again.events_new, 0);
    assert_eq!(again.events_duplicate, first.events_new);
    assert_eq!(
        count("SELECT COALESCE(SUM(last_id - first_id + 1), 0) FROM event_ranges"),
        events
    );
    assert_eq!(crate::nodes::count(&conn).unwrap(), nodes);
    assert_eq!(crate::effects::count(&conn).unwrap(), edges);
    // The raw line is kept, byte for byte.
    let first: serde_json::Value = serde_json::from_str(&s.lines[1]).unwrap();
    let id = first["id"].as_i64().unwrap();
    let boot: i64 = conn
        .query_row(
            "SELECT boot FROM boots WHERE boot_id = 'test-boot'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(crate::ingest::event_boots(&conn, id).unwrap(), vec![boot]);
    assert_eq!(
        crate::ingest::raw_event(&conn, boot, id)
            .unwrap()
            .as_deref(),
        Some(s.lines[1].as_str())
    );
}

#[test]
fn a_stream_split_across_ingests_continues_version_chains() {
    let (_d, p) = db();
    let s = build_stream();
    let (_d2, whole) = db();
    s.ingest(&whole);
    // Same stream in two runs: the builder state persisted in the store carries over.
    let mut a = Stream::new();
    a.lines = s.lines[..9].to_vec();
    let mut b = Stream::new();
    b.lines = s.lines[9..].to_vec();
    a.ingest(&p);
    b.lines.insert(0, s.lines[0].clone());
    b.ingest(&p);
    let c1 = crate::schema::open_ro(&whole).unwrap();
    let c2 = crate::schema::open_ro(&p).unwrap();
    let ans = |c: &Connection| {
        labels(
            &ancestry(
                c,
                "/out/app.final",
                Direction::Ancestors,
                None,
                Window::default(),
            )
            .unwrap(),
        )
    };
    assert_eq!(ans(&c1), ans(&c2));
    let n = |c: &Connection| -> (i64, i64) {
        (
            crate::nodes::count(c).unwrap(),
            crate::effects::count(c).unwrap(),
        )
    };
    assert_eq!(n(&c1), n(&c2));
}

#[test]
fn a_picture_sums_up_a_flood_of_loss_records() {
    let (_d, p) = db();
    let mut s = build_stream();
    for i in 0..40u64 {
        s.loss(i as u32, 5, T0 + i * SEC / 4, T0 + 100 * SEC);
    }
    s.ingest(&p);
    let a = ancestors_of(&p, "/out/app.final");
    assert!(a.losses.len() > 10, "{}", a.losses.len());
    let dot = crate::render::dot(&a);
    let note = dot
        .lines()
        .find(|l| l.contains("incomplete [shape=note"))
        .unwrap();
    assert_eq!(note.matches("may be incomplete").count(), 4, "{note}");
    let rest = a.losses.len() - 4;
    let events: i64 = a.losses[4..].iter().map(|l| l.count).sum();
    assert!(
        note.contains(&format!("and {rest} more loss records: {events} events")),
        "{note}"
    );
    // The JSON answer keeps every record.
    assert_eq!(
        serde_json::to_value(&a).unwrap()["losses"]
            .as_array()
            .unwrap()
            .len(),
        a.losses.len()
    );
}

#[test]
fn hidden_nodes_leave_the_picture_with_their_edges_but_targets_stay() {
    let (_d, p) = db();
    build_stream().ingest(&p);
    let conn = crate::schema::open_ro(&p).unwrap();
    let mut a = ancestry(
        &conn,
        "/out/app.final",
        Direction::Ancestors,
        None,
        Window::default(),
    )
    .unwrap();
    let (nodes, edges) = (a.nodes.len(), a.edges.len());
    let libs = a
        .nodes
        .iter()
        .filter(|n| n.name.starts_with("/usr/include/"))
        .count();
    assert!(
        libs > 0,
        "the fixture reads a header: {:?}",
        a.nodes.iter().map(|n| &n.name).collect::<Vec<_>>()
    );
    let pats = [
        glob::Pattern::new("/usr/include/*").unwrap(),
        glob::Pattern::new("/out/app.final").unwrap(),
    ];
    assert_eq!(
        crate::render::hide_nodes(&mut a, &pats, "/usr/include/* /out/app.final"),
        libs
    );
    assert_eq!(a.nodes.len(), nodes - libs);
    assert!(a.edges.len() < edges);
    let ids: std::collections::HashSet<i64> = a.nodes.iter().map(|n| n.node).collect();
    assert!(a
        .edges
        .iter()
        .all(|e| ids.contains(&e.cause) && ids.contains(&e.effect)));
    assert!(a.start.iter().all(|s| ids.contains(s)), "the target stays");
    assert!(crate::render::dot(&a).contains(&format!(
        "({libs} nodes hidden: /usr/include/* /out/app.final)"
    )));
}

#[test]
fn dot_and_prov_json() {
    let (_d, p) = db();
    let mut s = build_stream();
    s.loss(0, 5, T0, T0 + 100 * SEC);
    s.ingest(&p);
    let a = ancestors_of(&p, "/out/app.final");
    let dot = crate::render::dot(&a);
    assert!(
        dot.contains("shape=box") && dot.contains("shape=ellipse") && dot.contains("shape=house")
    );
    assert!(dot.contains("incomplete [shape=note"));
    let dir = tempfile::tempdir().unwrap();
    let dp = dir.path().join("a.dot");
    std::fs::write(&dp, &dot).unwrap();
    crate::cli::render_svg(&dp, &dir.path().join("a.svg")).expect("Graphviz parses our DOT");
    assert!(std::fs::read_to_string(dir.path().join("a.svg"))
        .unwrap()
        .contains("<svg"));
    let prov: Value = serde_json::from_str(&crate::render::prov_json(&a).unwrap()).unwrap();
    assert_eq!(
        prov["activity"].as_object().unwrap().len(),
        a.nodes.iter().filter(|n| n.kind == "process").count()
    );
    assert_eq!(prov["wasDerivedFrom"].as_object().unwrap().len(), 1);
    let used = prov["used"].as_object().unwrap().values().next().unwrap();
    assert!(
        used["prov:activity"]
            .as_str()
            .unwrap()
            .starts_with("custos:n")
            && used["prov:time"].is_string()
    );
    assert_eq!(prov["custos:completeness"]["complete"], false);
}

#[test]
fn out_of_order_delivery_is_applied_in_time_order() {
    // As the real collector delivers: per ring and per CPU, so a child's exec can
    // precede the parent's clone record (clone returns in the parent after the
    // child ran), and a reader's record can precede the writer's.
    let (_d, p) = db();
    let mut s = Stream::new();
    let line = |id: u64, t: u64, pid: u32, syscall: &str, extra: Value| {
        let mut v = json!({"type":"event","id":id,"cpu":0,"seq":id,"time_ns":T0 + t * SEC,"pid":pid,"tid":pid,"uid":0,"euid":0,
            "comm":"x","syscall":syscall});
        for (k, x) in extra.as_object().unwrap() {
            v[k] = x.clone();
        }
        v.to_string()
    };
    s.lines
        .push(line(1, 1, 10, "write", json!({"ret": 5, "path": "/seed"})));
    s.lines.push(line(
        4,
        4,
        11,
        "execve",
        json!({"ret": 0, "path": "/usr/bin/reader", "argv": ["reader"]}),
    ));
    s.lines
        .push(line(6, 6, 11, "read", json!({"ret": 5, "path": "/shared"}))); // delivered before the write it read
    s.lines
        .push(line(3, 5, 10, "clone", json!({"ret": 11, "child_pid": 11}))); // the parent's clone returns late
    s.lines.push(line(
        5,
        5,
        12,
        "write",
        json!({"ret": 5, "path": "/shared"}),
    ));
    s.lines.push(line(
        7,
        7,
        11,
        "write",
        json!({"ret": 5, "path": "/result"}),
    ));
    s.ingest(&p);
    let a = ancestors_of(&p, "/result");
    let l = labels(&a);
    assert!(
        l.contains(&"/shared v1".to_string()),
        "the read saw the write's version: {l:?}"
    );
    assert!(
        a.nodes.iter().any(|n| n.pid == Some(12)),
        "the writer is an ancestor: {l:?}"
    );
    assert!(
        a.nodes.iter().any(|n| n.pid == Some(10)),
        "the late clone still links the child to its parent: {l:?}"
    );
    assert!(
        !l.contains(&"/seed v1".to_string()),
        "the parent's earlier write is not an input: {l:?}"
    );
    let execs: Vec<&NodeInfo> = a
        .nodes
        .iter()
        .filter(|n| n.pid == Some(11) && n.name == "/usr/bin/reader")
        .collect();
    assert_eq!(
        execs.len(),
        1,
        "the exec is not replaced by the late clone: {l:?}"
    );
}

/// The ancestor set through the edges by cause alone (every edge read
/// first: fine for a test's graph).
fn ancestor_ids_by_edge_table(conn: &Connection, root: i64) -> Result<NodeSet> {
    let mut by_effect: HashMap<i64, Vec<i64>> = HashMap::new();
    for e in crate::effects::all(conn)? {
        by_effect.entry(e.effect).or_default().push(e.cause);
    }
    let mut seen = NodeSet::default();
    seen.insert(root);
    let mut stack = vec![root];
    while let Some(n) = stack.pop() {
        for c in by_effect.get(&n).cloned().unwrap_or_default() {
            if seen.insert(c) {
                stack.push(c);
            }
        }
    }
    seen.remove(&root);
    Ok(seen)
}

/// The ancestry index (cause lists) must hold exactly the edge table's rows.
fn assert_cause_lists_match_edges(conn: &Connection) {
    let nodes: Vec<i64> = crate::nodes::all(conn)
        .unwrap()
        .iter()
        .map(|r| r.node)
        .collect();
    let blocks: i64 = conn
        .query_row("SELECT COUNT(*) FROM cause_blocks", [], |r| r.get(0))
        .unwrap();
    let spanned: std::collections::HashSet<i64> =
        nodes.iter().map(|n| crate::causes::block_of(*n)).collect();
    assert!(
        blocks as usize <= spanned.len(),
        "no block outside the nodes' range"
    );
    let mut reader = crate::causes::CauseReader::new(conn);
    let all_edges = crate::effects::all(conn).unwrap();
    for n in nodes {
        let mut from_list: Vec<(i64, i64, i64, i64)> = reader
            .load(n)
            .unwrap()
            .iter()
            .map(|c| (c.cause, c.kind as i64, c.event_id, c.time_ns))
            .collect();
        let mut from_edges: Vec<(i64, i64, i64, i64)> = all_edges
            .iter()
            .filter(|e| e.effect == n)
            .map(|e| (e.cause, e.kind as i64, e.event_id, e.time_ns))
            .collect();
        from_list.sort();
        from_edges.sort();
        assert_eq!(from_list, from_edges, "node {n}");
        let by_list = ancestor_ids(conn, n).unwrap();
        let by_table = ancestor_ids_by_edge_table(conn, n).unwrap();
        assert_eq!(by_list, by_table, "ancestors of {n}");
    }
}

#[test]
fn ancestry_index_matches_the_edge_table() {
    // Batches of 7 lines: long-lived processes gain causes across batches (the append path).
    for s in [build_stream(), {
        let mut s = Stream::new();
        for i in 0..40 {
            s.read(20, &format!("/in/{i}"));
            if i % 5 == 0 {
                s.write(20, "/out");
            }
        }
        s
    }] {
        let (_d, p) = db();
        s.ingest(&p);
        let conn = crate::schema::open_ro(&p).unwrap();
        assert_cause_lists_match_edges(&conn);
    }
}

#[test]
fn file_mappings_are_reads_and_shared_writable_ones_writes() {
    let (_d, p) = db();
    let mut s = Stream::new();
    s.exec(30, "/usr/bin/app");
    // The dynamic loader maps libc read+exec (private): a used edge.
    s.ev(30, "app", "mmap", json!({"ret": 1, "fd": 3, "path": "/usr/lib/libc.so.6", "args": {"prot": 5, "flags": 2066, "fd": 3}}));
    // Anonymous memory: nothing.
    s.ev(
        30,
        "app",
        "mmap",
        json!({"ret": 1, "args": {"prot": 3, "flags": 34, "fd": -1}}),
    );
    // A shared writable mapping of a data file: a write.
    s.ev(30, "app", "mmap", json!({"ret": 1, "fd": 4, "path": "/var/db/data", "args": {"prot": 3, "flags": 1, "fd": 4}}));
    s.ingest(&p);
    let conn = crate::schema::open_ro(&p).unwrap();
    let a = ancestry(
        &conn,
        "/var/db/data",
        Direction::Ancestors,
        None,
        Window::default(),
    )
    .unwrap();
    let l = labels(&a);
    assert!(l.contains(&"/usr/lib/libc.so.6 v0".to_string()), "{l:?}");
    assert!(
        l.contains(&"/var/db/data v0".to_string()),
        "mapped for reading too: {l:?}"
    );
    assert_eq!(a.start.len(), 1);
    assert_eq!(
        node_info(&conn, a.start[0]).unwrap().unwrap().version,
        1,
        "the shared writable mapping made version 1"
    );
}

#[test]
fn skipped_syscalls_and_incomplete_events_make_answers_say_so() {
    let (_d, p) = db();
    let mut s = Stream::new();
    let a = s.read(70, "/a/in");
    s.write(70, "/a/out");
    s.read(71, "/b/in");
    // Its attribute half was lost: a write whose path the collector did not get.
    s.ev(
        71,
        "x",
        "write",
        json!({"ret": 100, "fd": 9, "path": "/b/out", "incomplete": true}),
    );
    let c = s.read(72, "/c/in");
    let c_end = s.write(72, "/c/out");
    // Exact skips on CPU 1 during /a's span; a bound without a CPU during /c's.
    s.lines.push(json!({"type":"loss","cpu":1,"count":3,"category":"skipped","start_ns":a,"end_ns":a + SEC / 2}).to_string());
    s.lines.push(json!({"type":"loss","count":2,"category":"skipped","upper_bound":true,"start_ns":c,"end_ns":c_end}).to_string());
    s.ingest(&p);
    let conn = crate::schema::open_ro(&p).unwrap();
    // One version each (its node id): the losses before it was written.
    let msg = |path: &str| -> Vec<String> {
        let node = resolve(&conn, path, true).unwrap()[0].to_string();
        let ans = ancestry(&conn, &node, Direction::Ancestors, None, Window::default()).unwrap();
        assert_eq!(ans.complete, ans.losses.is_empty());
        ans.losses.iter().map(LossNote::message).collect()
    };
    let a = msg("/a/out");
    assert!(
        a.len() == 1
            && a[0].starts_with(
                "may be incomplete: 3 events lost (syscalls skipped by the kernel) on CPU 1"
            ),
        "{a:?}"
    );
    // Later targets: every earlier loss may have held one of their causes.
    let b = msg("/b/out");
    assert!(
        b.len() == 2 && b[1].contains("1 events lost their paths, arguments or address on CPU 0"),
        "{b:?}"
    );
    let c = msg("/c/out");
    assert!(
        c.len() == 3
            && c[2].contains("up to 2 events lost (skipped, upper bound) on an unknown CPU"),
        "{c:?}"
    );
}

/// Node attributes reach a JSON answer exactly as stored (they are parsed
/// only when the answer is written).
#[test]
fn json_answers_carry_every_nodes_stored_attributes() {
    let (_d, p) = db();
    build_stream().ingest(&p);
    let conn = crate::schema::open_ro(&p).unwrap();
    let gcc: i64 = crate::nodes::all(&conn)
        .unwrap()
        .into_iter()
        .find(|r| r.name == "/usr/bin/gcc" && r.kind == 1)
        .unwrap()
        .node;
    let a = ancestry(
        &conn,
        &gcc.to_string(),
        Direction::Ancestors,
        None,
        Window::default(),
    )
    .unwrap();
    let out: Value = serde_json::from_str(&crate::render::json(&a).unwrap()).unwrap();
    let nodes = out["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), a.nodes.len());
    let mut with_attrs = 0;
    for n in nodes {
        let stored: Option<String> = crate::nodes::get(&conn, n["node"].as_i64().unwrap())
            .unwrap()
            .unwrap()
            .attrs;
        match stored {
            Some(text) => {
                assert_eq!(n["attrs"], serde_json::from_str::<Value>(&text).unwrap());
                with_attrs += 1;
            }
            None => assert!(n.get("attrs").is_none()),
        }
    }
    assert!(with_attrs >= 2, "bash and gcc carry attributes");
    assert_eq!(
        nodes.iter().find(|n| n["node"] == gcc).unwrap()["attrs"]["argv"],
        json!(["gcc"])
    );
}

/// An answer read through a connection the caller opened (not
/// `schema::open_ro`) still gets its node rows.
#[test]
fn answers_work_on_a_plain_connection() {
    let (_d, p) = db();
    build_stream().ingest(&p);
    let plain = Connection::open(&p).unwrap();
    let ours = crate::schema::open_ro(&p).unwrap();
    let gcc: i64 = crate::nodes::all(&ours)
        .unwrap()
        .into_iter()
        .find(|r| r.name == "/usr/bin/gcc" && r.kind == 1)
        .unwrap()
        .node;
    let a = ancestry(
        &plain,
        &gcc.to_string(),
        Direction::Ancestors,
        None,
        Window::default(),
    )
    .unwrap();
    let b = ancestry(
        &ours,
        &gcc.to_string(),
        Direction::Ancestors,
        None,
        Window::default(),
    )
    .unwrap();
    assert!(a.nodes.len() > 1);
    assert_eq!(
        crate::render::json(&a).unwrap(),
        crate::render::json(&b).unwrap()
    );
}

/// A container's processes are known by the container's id in the store,
/// found by its name once an event named it, and an answer narrows to them.
#[test]
fn a_container_is_kept_found_by_name_and_narrows_an_answer() {
    let (_d, p) = db();
    let id = "ab".repeat(32);
    let mut s = Stream::new();
    // runc (on the host) starts the container's shell, which reads a config
    // and writes a report; a host process reads the report afterwards.
    s.exec(10, "/usr/bin/runc");
    s.fork(10, "runc", 11);
    let only_id = json!({"id": id, "runtime": "podman"});
    let named = json!({"id": id, "runtime": "podman", "name": "web", "image": "localhost/web:1"});
    s.ev(
        11,
        "sh",
        "execve",
        json!({"ret": 0, "path": "/bin/sh", "argv": ["sh"], "container": only_id}),
    );
    s.ev(
        11,
        "sh",
        "read",
        json!({"ret": 10, "fd": 3, "path": "/etc/app.conf", "container": named}),
    );
    s.ev(
        11,
        "sh",
        "write",
        json!({"ret": 10, "fd": 4, "path": "/out/report", "container": named}),
    );
    s.exec(20, "/usr/bin/cat");
    s.read(20, "/out/report");
    s.write(20, "/home/u/copy");
    let sum = s.ingest(&p);
    assert_eq!(sum.malformed, 0);
    let conn = crate::schema::open_ro(&p).unwrap();

    let row: (String, Option<String>, Option<String>) = conn
        .query_row(
            "SELECT runtime, name, image FROM containers WHERE id = ?1",
            [&id],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap();
    assert_eq!(
        row,
        (
            "podman".into(),
            Some("web".into()),
            Some("localhost/web:1".into())
        ),
        "a later event's name fills the row"
    );
    assert_eq!(
        containers_named(&conn, "web").unwrap(),
        std::slice::from_ref(&id)
    );
    assert_eq!(
        containers_named(&conn, &id[..12]).unwrap(),
        std::slice::from_ref(&id)
    );
    assert!(
        containers_named(&conn, &id[..6]).is_err(),
        "a prefix shorter than 12 digits is not an id"
    );
    let err = containers_named(&conn, "db").unwrap_err().to_string();
    assert!(
        err.contains("no such container") && err.contains("web"),
        "{err}"
    );

    let mut a = ancestry(
        &conn,
        "/home/u/copy",
        Direction::Ancestors,
        None,
        Window::default(),
    )
    .unwrap();
    assert_eq!(
        a.containers.get(&id),
        Some(&Some("web".to_string())),
        "the answer names its containers"
    );
    let sh = a.nodes.iter().find(|n| n.name == "/bin/sh").unwrap();
    assert_eq!(sh.container().as_deref(), Some(id.as_str()));
    assert!(
        a.nodes
            .iter()
            .filter(|n| n.name.contains("runc"))
            .all(|n| n.container().is_none()),
        "runc runs on the host"
    );
    let dot = crate::render::dot(&a);
    assert!(
        dot.contains("subgraph cluster_container0 { label=\"container web (abababababab)\""),
        "{dot}"
    );

    only_containers(&mut a, std::slice::from_ref(&id), "web");
    let names: Vec<&str> = a.nodes.iter().map(|n| n.name.as_str()).collect();
    assert!(
        names.contains(&"/bin/sh")
            && names.contains(&"/etc/app.conf")
            && names.contains(&"/out/report"),
        "{names:?}"
    );
    assert!(
        names.contains(&"/home/u/copy"),
        "the query's start stays: {names:?}"
    );
    // The host's runc itself and the host's cat are out; the fork that
    // became the container's shell is its direct cause, so it stays.
    assert!(!names.iter().any(|n| n.contains("cat")), "{names:?}");
    let runcs: Vec<Option<i64>> = a
        .nodes
        .iter()
        .filter(|n| n.name.contains("runc"))
        .map(|n| n.pid)
        .collect();
    assert_eq!(runcs, [Some(11)], "{names:?}");
    assert!(
        a.query.contains("(container web: 1 of its processes)"),
        "{}",
        a.query
    );
}

/// A path is relative to its process's root (docs/containers.md): the
/// container's /etc/hostname and a chroot's are files of their own, found
/// by `NAME:/path` and by the stored name, and never the host's.
#[test]
fn the_same_path_under_another_root_is_another_file() {
    let (_d, p) = db();
    let id = "cd".repeat(32);
    let ctr = json!({"id": id, "runtime": "podman", "name": "web"});
    let mut s = Stream::new();
    s.exec(10, "/usr/bin/cat");
    s.read(10, "/etc/hostname");
    s.ev(11, "cat", "execve", json!({"ret": 0, "path": "/bin/cat", "argv": ["cat"], "container": ctr, "root_dev": 47, "root_inode": 256}));
    s.ev(11, "cat", "read", json!({"ret": 7, "fd": 3, "path": "/etc/hostname", "container": ctr, "root_dev": 47, "root_inode": 256}));
    s.ev(12, "busybox", "execve", json!({"ret": 0, "path": "/bin/busybox", "argv": ["busybox"], "root_dev": (8 << 20) | 1, "root_inode": 99}));
    s.ev(12, "busybox", "read", json!({"ret": 7, "fd": 3, "path": "/etc/hostname", "root_dev": (8 << 20) | 1, "root_inode": 99}));
    assert_eq!(s.ingest(&p).malformed, 0);
    let conn = crate::schema::open_ro(&p).unwrap();
    let readers = |spec: &str| -> Vec<Option<i64>> {
        let a = who_touched(&conn, spec, Window::default()).unwrap();
        let mut pids: Vec<Option<i64>> = a
            .nodes
            .iter()
            .filter(|n| n.node_kind() == NodeKind::Process)
            .map(|n| n.pid)
            .collect();
        pids.sort();
        pids.dedup();
        pids
    };
    assert_eq!(
        readers("/etc/hostname"),
        [Some(10)],
        "the host's file, read by the host's cat alone"
    );
    assert_eq!(readers("web:/etc/hostname"), [Some(11)]);
    assert_eq!(readers(&format!("{}:/etc/hostname", &id[..12])), [Some(11)]);
    assert_eq!(readers(&format!("ctr:{id}:/etc/hostname")), [Some(11)]);
    assert_eq!(readers("root:8:1:99:/etc/hostname"), [Some(12)]);
    // The binaries too: the container's /bin/cat is not the host's.
    assert!(resolve(&conn, &format!("ctr:{id}:/bin/cat"), false).is_ok());
    assert!(resolve(&conn, "/bin/cat", false).is_err());
    let err = resolve(&conn, "db:/etc/hostname", false).unwrap_err();
    assert!(format!("{err:#}").contains("no such container"), "{err:#}");
}

/// Workflows (docs/workflows.md): a shell's child starts a session, runs a
/// chain and forks a helper; the store lists the chain in order across
/// batches, with the fork that caused it, and finds it by any of its events
/// or by pid. Re-ingesting adds nothing.
#[test]
fn a_workflow_is_listed_in_order_with_its_cause() {
    let (_d, p) = db();
    let mut s = Stream::new();
    let id = |s: &Stream| ((s.seq % 2) << 48) | s.seq;
    s.ev(
        100,
        "bash",
        "read",
        json!({"ret": 1, "fd": 0, "path": "/dev/tty"}),
    );
    let shell = id(&s);
    let l = s.lines.last_mut().unwrap();
    *l = l.replace(
        "}",
        &format!(",\"workflow\":{shell},\"workflow_running\":true}}"),
    );
    s.ev(
        100,
        "bash",
        "sched:process_fork",
        json!({"child_pid": 101, "workflow": shell}),
    );
    let fork = id(&s);
    s.ev(
        100,
        "bash",
        "read",
        json!({"ret": 1, "fd": 0, "path": "/dev/tty", "workflow": shell}),
    );
    s.ev(101, "bash", "setsid", json!({"ret": 101}));
    let job = id(&s);
    let l = s.lines.last_mut().unwrap();
    *l = l.replace(
        "\"ret\":101",
        &format!(
            "\"ret\":101,\"workflow\":{job},\"workflow_parent\":{shell},\"workflow_cause\":{fork}"
        ),
    );
    let mut chain = vec![job];
    s.ev(
        101,
        "nsenter",
        "execve",
        json!({"ret": 0, "path": "/usr/bin/nsenter", "argv": ["nsenter", "-u"], "workflow": job}),
    );
    chain.push(id(&s));
    s.ev(
        101,
        "nsenter",
        "setns",
        json!({"ret": 0, "fd": 3, "workflow": job}),
    );
    chain.push(id(&s));
    s.ev(
        100,
        "bash",
        "read",
        json!({"ret": 1, "fd": 0, "path": "/dev/tty", "workflow": shell}),
    );
    s.ev(
        101,
        "nsenter",
        "sched:process_fork",
        json!({"child_pid": 102, "workflow": job}),
    );
    chain.push(id(&s));
    for _ in 0..10 {
        s.ev(
            102,
            "cat",
            "read",
            json!({"ret": 10, "fd": 3, "path": "/etc/app.conf", "workflow": job}),
        );
        chain.push(id(&s));
    }
    let sum = s.ingest(&p);
    assert_eq!(sum.malformed, 0);
    let conn = crate::schema::open_ro(&p).unwrap();

    let by_event = crate::workflows::query(&conn, &chain[5].to_string(), 0).unwrap();
    assert_eq!(by_event.len(), 1);
    let l = &by_event[0];
    assert_eq!(
        l.steps.iter().map(|st| st.id).collect::<Vec<_>>(),
        chain,
        "every event, in order, across batches"
    );
    assert_eq!(
        l.cause.as_ref().map(|c| (c.id, c.syscall.as_str())),
        Some((fork, "sched:process_fork"))
    );
    let w = &l.workflow;
    assert_eq!(
        (w.id, w.parent, w.cause, w.running, w.leader),
        (job, Some(shell), Some(fork), Some(false), Some(101))
    );
    assert_eq!(
        (w.events, w.pids.clone()),
        (chain.len() as i64, vec![101, 102])
    );
    assert_eq!(l.steps[1].detail.as_deref(), Some("nsenter -u"));
    assert!(l.losses.is_empty());

    let by_pid = crate::workflows::query(&conn, "pid:102", 3).unwrap();
    assert_eq!(by_pid.len(), 1);
    assert_eq!(
        (by_pid[0].workflow.id, by_pid[0].steps.len(), by_pid[0].more),
        (job, 3, chain.len() as u64 - 3)
    );
    let outer = crate::workflows::query(&conn, &shell.to_string(), 0).unwrap();
    assert_eq!(
        (outer[0].workflow.running, outer[0].workflow.events),
        (Some(true), 4)
    );
    assert!(crate::workflows::render_text(&by_event).contains(&format!(
        "workflow {job}, started by bash (pid 101), from workflow {shell}"
    )));
    assert!(crate::workflows::query(&conn, "pid:999", 0)
        .unwrap_err()
        .to_string()
        .contains("no workflow holds pid 999"));
    assert!(crate::workflows::query(&conn, "xyz", 0)
        .unwrap_err()
        .to_string()
        .contains("expected an event id"));
    drop(conn);

    let again = s.ingest(&p);
    assert_eq!(again.events_new, 0);
    let conn = crate::schema::open_ro(&p).unwrap();
    let l = crate::workflows::query(&conn, &job.to_string(), 0).unwrap();
    assert_eq!(
        (l[0].workflow.events, l[0].steps.len()),
        (chain.len() as i64, chain.len()),
        "re-ingest adds nothing"
    );
}

/// Fileless exec: a memfd made, written and run with
/// `execveat(fd, "", .., AT_EMPTY_PATH)`. The exec names its program by
/// path and inode when the stream has them, else the store finds it by the
/// dirfd in its fd table; an exec whose program nothing names makes every
/// answer over it say it may be incomplete.
#[test]
fn a_memfd_run_by_execveat_is_the_program_of_its_process() {
    const AT_EMPTY_PATH: i64 = 0x1000;
    let memfd = "memfd:payload:[1:77]";
    for named in [true, false] {
        let (_d, p) = db();
        let mut s = Stream::new();
        s.fork(1, "init", 10);
        s.exec(10, "/usr/bin/loader");
        s.read(10, "/usr/bin/cat");
        let on_memfd = json!({"dev": 1, "inode": 77});
        s.ev(
            10,
            "loader",
            "memfd_create",
            json!({"ret": 4, "fd": 4, "path": "memfd:payload", "dev": 1, "inode": 77}),
        );
        // The consumer names later events on the memfd's inode when it has
        // seen memfd_create first; not always (another ring, another run).
        let mut write = json!({"ret": 100, "args": {"fd": 4}});
        let mut exec =
            json!({"ret": 0, "args": {"dirfd": 4, "flags": AT_EMPTY_PATH}, "argv": ["cat"]});
        for e in [&mut write, &mut exec] {
            for (k, v) in on_memfd.as_object().unwrap() {
                e[k] = v.clone();
            }
            if named {
                e["path"] = json!("memfd:payload");
            }
        }
        s.ev(10, "loader", "write", write);
        s.ev(10, "loader", "execveat", exec);
        s.write(10, "/tmp/out");
        s.ingest(&p);
        let conn = crate::schema::open_ro(&p).unwrap();
        let a = ancestry(
            &conn,
            "/tmp/out",
            Direction::Ancestors,
            None,
            Window::default(),
        )
        .unwrap();
        let names = labels(&a);
        assert!(
            names.contains(&format!("{memfd} v1")),
            "named {named}: {names:?}"
        );
        assert!(
            names.contains(&"/usr/bin/cat v0".to_string()),
            "named {named}: {names:?}"
        );
        assert!(a.complete, "named {named}: {:?}", a.losses);
    }

    // Nothing names the program (no path, no inode, no fd): a loss.
    let (_d, p) = db();
    let mut s = Stream::new();
    s.fork(1, "init", 10);
    s.ev(10, "x", "execve", json!({"ret": 0, "argv": ["x"]}));
    s.write(10, "/tmp/out");
    s.ingest(&p);
    let a = ancestors_of(&p, "/tmp/out");
    assert!(!a.complete);
    assert_eq!(a.losses[0].category, "unresolved", "{:?}", a.losses);
    assert!(
        a.losses[0].message().contains("program"),
        "{}",
        a.losses[0].message()
    );
}

/// A pid past 32 bits (a crafted clone's `ret`, a ptrace `target_pid`)
/// names no process: before, it was cut to its low 32 bits, so 2^32 + 7
/// linked the forger to pid 7's output.
#[test]
fn a_pid_past_32_bits_links_no_process() {
    let ancestors = |target: u64| {
        let (_d, p) = db();
        let mut s = Stream::new();
        s.exec(7, "/bin/victim");
        s.exec(100, "/bin/forger");
        s.ev(100, "forger", "clone", json!({ "ret": target }));
        s.ev(
            100,
            "forger",
            "ptrace",
            json!({"ret": 0, "args": {"request": 5, "target_pid": target}}),
        );
        s.write(7, "/out/x");
        s.ingest(&p);
        labels(&ancestors_of(&p, "/out/x"))
    };
    // The control: pid 7 itself is linked (by the clone and the poke).
    let seven = ancestors(7);
    assert!(seven.iter().any(|l| l.contains("forger")), "{seven:?}");
    let wide = ancestors((1 << 32) + 7);
    assert!(wide.iter().all(|l| !l.contains("forger")), "{wide:?}");
}

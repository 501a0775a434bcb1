//! Drives the real `custos` binary against real store files: crash safety,
//! malformed input, archives, queries and pictures.

use custos_store::rusqlite::Connection;
use custos_store::synth::{self, SynthConfig};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn custos() -> Command {
    Command::new(env!("CARGO_BIN_EXE_custos"))
}

fn synthetic(dir: &Path, fraction: f64) -> (PathBuf, Vec<String>) {
    let path = dir.join("events.jsonl");
    let mut buf = Vec::new();
    synth::generate(&SynthConfig::scaled(3, fraction), &mut buf, |_| {}).unwrap();
    std::fs::write(&path, &buf).unwrap();
    let lines = String::from_utf8(buf)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    (path, lines)
}

fn event_id(line: &str) -> Option<i64> {
    let v: serde_json::Value = serde_json::from_str(line).ok()?;
    (v["type"] == "event").then(|| v["id"].as_i64().unwrap())
}

fn count(conn: &Connection, sql: &str) -> i64 {
    conn.query_row(sql, [], |r| r.get(0)).unwrap()
}

fn ingest_ok(db: &Path, input: &Path) -> String {
    let out = custos()
        .arg("ingest")
        .arg("--db")
        .arg(db)
        .arg("--quiet")
        .arg(input)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "ingest failed: {err}");
    err
}

#[test]
fn kill_9_mid_ingest_keeps_every_acknowledged_batch() {
    let dir = tempfile::tempdir().unwrap();
    let (input, lines) = synthetic(dir.path(), 0.003);
    let db = dir.path().join("crash.db");
    // Fed through stdin by a thread, so the kill always lands mid-stream: the
    // pipe holds 64 KiB and the input is megabytes.
    let mut child = custos()
        .args(["ingest", "--batch", "1000", "--db"])
        .arg(&db)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let bytes = std::fs::read(&input).unwrap();
    let feeder = std::thread::spawn(move || {
        let _ = stdin.write_all(&bytes); // fails with EPIPE once the process is killed
    });
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    // Acknowledged lines trail the lines read by the events still held in
    // the reorder window.
    let mut acked = 0u64;
    let mut line = String::new();
    while acked < 8000 {
        line.clear();
        assert!(
            stdout.read_line(&mut line).unwrap() > 0,
            "ingest ended before it could be killed"
        );
        if let Some(v) = line
            .split_whitespace()
            .find_map(|w| w.strip_prefix("lines_through="))
        {
            acked = v.parse().unwrap();
        }
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    feeder.join().unwrap();
    // Acks printed between our last read and the kill were acknowledged too.
    for l in stdout.lines().map_while(Result::ok) {
        if let Some(v) = l
            .split_whitespace()
            .find_map(|w| w.strip_prefix("lines_through="))
        {
            acked = v.parse().unwrap();
        }
    }
    let conn = Connection::open(&db).unwrap();
    let check: String = conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(check, "ok");
    let stored = count(
        &conn,
        "SELECT COALESCE(SUM(last_id - first_id + 1), 0) FROM event_ranges",
    );
    let total = lines.iter().filter_map(|l| event_id(l)).count() as i64;
    assert!(
        stored < total,
        "the kill landed after the whole ingest ({stored} of {total}); make the input larger"
    );
    let mut q = conn
        .prepare("SELECT COUNT(*) FROM event_ranges WHERE ?1 BETWEEN first_id AND last_id")
        .unwrap();
    let mut checked = 0;
    for l in &lines[..acked as usize] {
        if let Some(id) = event_id(l) {
            let n: i64 = q.query_row([id], |r| r.get(0)).unwrap();
            assert_eq!(
                n, 1,
                "acknowledged event {id:#x} (line ≤ {acked}) is missing after kill -9"
            );
            checked += 1;
        }
    }
    assert!(checked > 7000, "checked {checked} acknowledged events");
    drop(q);
    assert_raw_lines(&conn, &lines[..acked as usize], 15);
    drop(conn);

    // Resume: re-ingest the whole file; nothing duplicates and the graph equals a clean run's.
    let err = ingest_ok(&db, &input);
    assert!(err.contains("already stored"), "{err}");
    let clean = dir.path().join("clean.db");
    ingest_ok(&clean, &input);
    let (a, b) = (
        Connection::open(&db).unwrap(),
        Connection::open(&clean).unwrap(),
    );
    assert_eq!(
        a.query_row("PRAGMA integrity_check", [], |r| r.get::<_, String>(0))
            .unwrap(),
        "ok"
    );
    for sql in [
        "SELECT COALESCE(SUM(last_id - first_id + 1), 0) FROM event_ranges",
        "SELECT SUM(length(data)) FROM node_blocks",
        "SELECT COUNT(*) FROM losses",
        "SELECT SUM(length(data)) FROM cause_blocks",
    ] {
        assert_eq!(count(&a, sql), count(&b, sql), "{sql}");
    }
    assert_eq!(
        custos_store::effects::count(&a).unwrap(),
        custos_store::effects::count(&b).unwrap(),
        "edges"
    );
    assert_eq!(
        count(
            &a,
            "SELECT COALESCE(SUM(last_id - first_id + 1), 0) FROM event_ranges"
        ),
        total
    );
    assert_raw_lines(&a, &lines, 30);
}

/// Every `step`-th event line of `lines` is what `custos query event`
/// returns for its id, byte for byte (the raw column segments).
fn assert_raw_lines(conn: &Connection, lines: &[String], step: usize) {
    let mut checked = 0;
    for l in lines.iter().filter(|l| event_id(l).is_some()).step_by(step) {
        let id = event_id(l).unwrap();
        let boots = custos_store::ingest::event_boots(conn, id).unwrap();
        assert_eq!(boots.len(), 1, "event {id:#x}");
        assert_eq!(
            custos_store::ingest::raw_event(conn, boots[0], id)
                .unwrap()
                .as_deref(),
            Some(l.as_str()),
            "event {id:#x}"
        );
        checked += 1;
    }
    assert!(checked > 500, "checked {checked} raw lines");
}

/// The whole graph, in node order: identical tables mean an identical graph.
fn graph_dump(db: &Path) -> (Vec<String>, Vec<String>) {
    let conn = Connection::open(db).unwrap();
    (
        custos_store::nodes::all(&conn)
            .unwrap()
            .iter()
            .map(|n| {
                format!(
                    "{}|{}|{}|{}|{}|{:?}|{:?}|{}",
                    n.node, n.kind, n.boot, n.name, n.version, n.pid, n.exec, n.event_id
                )
            })
            .collect(),
        {
            let mut e: Vec<_> = custos_store::effects::all(&conn)
                .unwrap()
                .iter()
                .map(|e| (e.effect, e.cause, e.kind, e.event_id))
                .collect();
            e.sort();
            e.iter()
                .map(|(a, b, k, id)| format!("{a}|{b}|{k}|{id}"))
                .collect()
        },
    )
}

#[test]
fn a_stream_reordered_within_the_window_builds_the_same_graph() {
    let dir = tempfile::tempdir().unwrap();
    let (input, lines) = synthetic(dir.path(), 0.002);
    // Each event is delayed by up to half the window (the default, 250 ms)
    // and the stream re-sorted by arrival: an event then never arrives after
    // one the store had to apply before it. Small batches put events and
    // their causes in different transactions.
    let mut rng = synth::Rng::new(7);
    let mut arrivals: Vec<(u64, usize, &String)> = lines
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            let at = match v["type"].as_str().unwrap() {
                "boot" => 0,
                "event" => v["time_ns"].as_u64().unwrap() + rng.range(0, 125_000_000),
                "loss" => v["start_ns"].as_u64().unwrap(),
                _ => v["time_ns"].as_u64().unwrap_or(0),
            };
            (at, i, l)
        })
        .collect();
    arrivals.sort();
    let moved = arrivals
        .iter()
        .enumerate()
        .filter(|(pos, (_, i, _))| pos != i)
        .count();
    assert!(
        moved > lines.len() / 2,
        "the shuffle moved only {moved} of {} lines",
        lines.len()
    );
    let shuffled = dir.path().join("shuffled.jsonl");
    std::fs::write(
        &shuffled,
        arrivals
            .iter()
            .map(|(_, _, l)| format!("{l}\n"))
            .collect::<String>(),
    )
    .unwrap();

    let ingest = |db: &Path, input: &Path| {
        let out = custos()
            .args(["ingest", "--batch", "500", "--quiet", "--db"])
            .arg(db)
            .arg(input)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{err}");
        assert!(!err.contains("out of time order"), "{err}");
    };
    let (ordered_db, shuffled_db) = (
        dir.path().join("ordered.db"),
        dir.path().join("shuffled.db"),
    );
    ingest(&ordered_db, &input);
    ingest(&shuffled_db, &shuffled);
    let (a, b) = (graph_dump(&ordered_db), graph_dump(&shuffled_db));
    assert!(
        a.0.len() > 1000 && a.1.len() > 1000,
        "{} nodes, {} edges",
        a.0.len(),
        a.1.len()
    );
    assert_eq!(a.0.len(), b.0.len(), "node count");
    assert_eq!(a.1.len(), b.1.len(), "edge count");
    assert!(a == b, "the reordered stream built another graph");
}

#[test]
fn malformed_lines_are_reported_with_line_numbers_and_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("bad.jsonl");
    let mut f = std::fs::File::create(&input).unwrap();
    writeln!(f, r#"{{"type":"boot","boot_id":"b"}}"#).unwrap();
    writeln!(
        f,
        r#"{{"type":"event","id":1,"time_ns":100,"pid":5,"syscall":"write","ret":3,"path":"/x"}}"#
    )
    .unwrap();
    writeln!(f, r#"{{"type":"event","id":2,"time_ns":"#).unwrap();
    f.write_all(b"\xff\xfe not utf-8\n").unwrap();
    writeln!(
        f,
        r#"{{"type":"event","id":3,"time_ns":300,"pid":6,"syscall":"read","ret":3,"path":"/x"}}"#
    )
    .unwrap();
    drop(f);
    let db = dir.path().join("s.db");
    let err = ingest_ok(&db, &input);
    assert!(err.contains("line 3: not valid JSON"), "{err}");
    assert!(err.contains("line 4: not UTF-8"), "{err}");
    assert!(err.contains("2 malformed lines skipped"), "{err}");
    let out = custos()
        .args(["query", "--db"])
        .arg(&db)
        .args(["who-touched", "/x"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    assert!(
        text.contains("wrote") && text.contains("read") && text.contains("2 rows"),
        "{text}"
    );
}

#[test]
fn query_graph_and_archive_through_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    let (input, _) = synthetic(dir.path(), 0.0005);
    let db = dir.path().join("q.db");
    let archive = dir.path().join("events.jsonl.zst");
    // From stdin, recording the compressed archive on the way.
    let mut child = custos()
        .args(["ingest", "--quiet", "--db"])
        .arg(&db)
        .arg("--archive")
        .arg(&archive)
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(&std::fs::read(&input).unwrap())
        .unwrap();
    assert!(child.wait_with_output().unwrap().status.success());
    assert!(
        std::fs::metadata(&archive).unwrap().len() * 5 < std::fs::metadata(&input).unwrap().len()
    );
    // Archive-only mode touches no database and gives the same stream back.
    let only = dir.path().join("only.jsonl.gz");
    let out = custos()
        .args(["ingest", "--db"])
        .arg(dir.path().join("never.db"))
        .arg("--archive-only")
        .arg("--archive")
        .arg(&only)
        .arg(&input)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!dir.path().join("never.db").exists());
    let mut text = String::new();
    std::io::Read::read_to_string(
        &mut custos_store::archive::open_input(&only).unwrap(),
        &mut text,
    )
    .unwrap();
    assert_eq!(text.as_bytes(), &std::fs::read(&input).unwrap()[..]);
    // Re-ingesting the archive adds nothing.
    let err = ingest_ok(&db, &archive);
    assert!(err.contains(" 0 new events"), "{err}");

    let out = custos()
        .args(["query", "--json", "--db"])
        .arg(&db)
        .args(["ancestors", "/build/p0/out.bin"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["nodes"].as_array().unwrap().len() > 50);
    assert!(v["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .any(|n| n["name"] == "/usr/bin/ld"));
    let table = custos()
        .args(["query", "--db"])
        .arg(&db)
        .args(["ancestors", "/build/p0/out.bin", "--depth", "2"])
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(
        table.starts_with("DEPTH") || table.starts_with("WARNING"),
        "{table}"
    );

    let prefix = dir.path().join("answer");
    let out = custos()
        .args(["graph", "--db"])
        .arg(&db)
        .arg("-o")
        .arg(&prefix)
        .args(["ancestors", "/build/p0/obj/u0.o"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dot = dir.path().join("answer.dot");
    let svg = std::fs::read_to_string(dir.path().join("answer.svg")).unwrap();
    assert!(svg.contains("<svg") && svg.contains("cc1"));
    let parsed = Command::new("dot")
        .arg("-Tcanon")
        .arg(&dot)
        .output()
        .unwrap();
    assert!(
        parsed.status.success(),
        "dot rejects our output: {}",
        String::from_utf8_lossy(&parsed.stderr)
    );

    let out = custos()
        .args(["graph", "--format", "prov-json", "--db"])
        .arg(&db)
        .arg("-o")
        .arg(&prefix)
        .args(["descendants", "/build/p0/src/u0.c"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let prov: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("answer.json")).unwrap())
            .unwrap();
    assert!(prov["wasGeneratedBy"].as_object().unwrap().len() >= 2);

    let bad = custos()
        .args(["query", "--db"])
        .arg(&db)
        .args(["ancestors", "/no/such/file"])
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("nothing in the store matches"));
    let missing = custos()
        .args(["query", "--db", "/nonexistent/x.db", "ancestors", "/a"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&missing.stderr).contains("does not exist"));
}

#[test]
fn sigterm_on_a_live_stream_commits_what_was_read() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("live.db");
    let mut child = custos()
        .args([
            "ingest",
            "--batch",
            "1000000",
            "--batch-interval-ms",
            "60000",
            "--db",
        ])
        .arg(&db)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    writeln!(stdin, r#"{{"type":"boot","boot_id":"live"}}"#).unwrap();
    for i in 1..=50 {
        writeln!(stdin, r#"{{"type":"event","id":{i},"time_ns":{i},"pid":7,"syscall":"write","ret":1,"path":"/log"}}"#).unwrap();
    }
    stdin.flush().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    // The stream stays open (a collector still running); the batch is neither full nor due.
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{err}");
    assert!(err.contains("interrupted"), "{err}");
    drop(stdin);
    let conn = Connection::open(&db).unwrap();
    assert_eq!(
        count(
            &conn,
            "SELECT COALESCE(SUM(last_id - first_id + 1), 0) FROM event_ranges"
        ),
        50
    );
}

/// `custos query event ID` finds any stored event's raw line through the
/// event ranges (hex or decimal id), says so when there is none, and a
/// store of the old layout is refused naming the command that rebuilds it.
#[test]
fn query_event_prints_the_raw_line_and_old_stores_name_custos_ingest() {
    let dir = tempfile::tempdir().unwrap();
    let (input, lines) = synthetic(dir.path(), 0.0005);
    let db = dir.path().join("e.db");
    ingest_ok(&db, &input);
    let events: Vec<(&String, i64)> = lines
        .iter()
        .filter_map(|l| event_id(l).map(|id| (l, id)))
        .collect();
    assert!(events.len() > 1000);
    for (line, id) in events.iter().step_by(97).chain(events.last()) {
        for arg in [format!("{id:#x}"), id.to_string()] {
            let out = custos()
                .args(["query", "--db"])
                .arg(&db)
                .args(["event", &arg])
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert_eq!(
                String::from_utf8_lossy(&out.stdout).trim_end(),
                line.as_str()
            );
        }
    }
    let missing = events.iter().map(|e| e.1).max().unwrap() + 1;
    let out = custos()
        .args(["query", "--db"])
        .arg(&db)
        .args(["event", &missing.to_string()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no event"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let old = dir.path().join("old.db");
    let c = Connection::open(&old).unwrap();
    c.execute_batch("CREATE TABLE meta(key TEXT PRIMARY KEY, value) WITHOUT ROWID; INSERT INTO meta VALUES('schema_version', 1);").unwrap();
    drop(c);
    for args in [
        vec!["query", "--db", old.to_str().unwrap(), "ancestors", "/x"],
        vec![
            "ingest",
            "--db",
            old.to_str().unwrap(),
            input.to_str().unwrap(),
        ],
    ] {
        let out = custos().args(&args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success()
                && err.contains("schema version 1")
                && err.contains("custos ingest --db"),
            "{args:?}: {err}"
        );
    }
}

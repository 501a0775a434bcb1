//! What a user types or feeds in never costs data (issue 31): every flag
//! that can be wrong is refused before any file is created or truncated,
//! the files already there are left byte for byte, and a signal, an
//! overlong line or a crafted number loses nothing silently. The refusals
//! happen before the collector attaches, so these need no BPF.

use custos_store::rusqlite::Connection;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn custos(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_custos"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A file that stands for an earlier recording, and what it holds.
fn old_file(dir: &Path, name: &str) -> (PathBuf, Vec<u8>) {
    let p = dir.join(name);
    let body = format!("earlier recording in {name}\n").into_bytes();
    std::fs::write(&p, &body).unwrap();
    (p, body)
}

/// Runs `args`, expects a refusal naming `why`, and every file in `kept` intact.
fn refused(args: &[&str], why: &str, kept: &[(&Path, &[u8])]) {
    let out = custos(args);
    let err = text(&out.stderr);
    // 1: our refusal; 2: clap's (an unknown flag).
    assert!(
        matches!(out.status.code(), Some(1 | 2)),
        "{args:?} was not refused: {err}"
    );
    assert!(err.contains(why), "{args:?}: expected {why:?} in: {err}");
    for (path, body) in kept {
        assert_eq!(
            std::fs::read(path).unwrap(),
            *body,
            "{args:?} changed {}",
            path.display()
        );
    }
}

#[test]
fn collect_refuses_every_bad_flag_before_touching_its_output() {
    let dir = tempfile::tempdir().unwrap();
    let (out, body) = old_file(dir.path(), "events.jsonl");
    let (zst, zbody) = old_file(dir.path(), "events.jsonl.zst");
    let (raw, rbody) = old_file(dir.path(), "raw.jsonl");
    let o = out.to_str().unwrap();
    let kept: &[(&Path, &[u8])] = &[(&out, &body), (&zst, &zbody), (&raw, &rbody)];
    let new = dir.path().join("new.jsonl");
    let n = new.to_str().unwrap();
    // Each with --force, so only the bad flag stands in the way.
    for (flag, value, why) in [
        ("--reorder-buffer-mb", "0", "--reorder-buffer-mb"),
        ("--output-buffer-mb", "0", "--output-buffer-mb"),
        ("--critical-ring-kb", "3", "--critical-ring-kb"),
        ("--events-ring-kb", "5000", "--events-ring-kb"),
        ("--attrs-ring-kb", "0", "--attrs-ring-kb"),
        ("--syscalls", "execve,conect", "conect"),
        ("--duration=-1", "", "--duration"),
        ("--stats-interval=-1", "", "--stats-interval"),
        ("--seal-every", "0", "--seal-every"),
        ("--metrics", "127.0.0.1:notaport", "--metrics"),
        ("--metrics", "localhost", "--metrics"),
        ("--metrics-final-wait", "3", "--metrics"),
        ("--sink-buffer-mb", "0", "--sink-buffer-mb"),
        ("--db-cache-mb", "0", "--db-cache-mb"),
        (
            "--archive",
            raw.to_str().unwrap(),
            "must end in .zst or .gz",
        ),
        ("--archive", dir.path().to_str().unwrap(), "must end in"),
    ] {
        let arg: Vec<&str> = [flag, value]
            .into_iter()
            .filter(|a| !a.is_empty())
            .collect();
        refused(
            &[&["collect", "--force", "-o", o], &arg[..]].concat(),
            why,
            kept,
        );
        assert!(!new.exists());
        // And with a new -o: not created either.
        refused(&[&["collect", "-o", n], &arg[..]].concat(), why, kept);
        assert!(!new.exists(), "{flag} {value} created -o");
    }
    // A metrics port another program holds: refused before -o, --archive
    // or --db is created or truncated.
    let holder = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken = holder.local_addr().unwrap().to_string();
    let db = dir.path().join("new.db");
    let zst_new = dir.path().join("new.jsonl.zst");
    for extra in [
        &[][..],
        &["--archive", zst_new.to_str().unwrap()][..],
        &["--db", db.to_str().unwrap()][..],
    ] {
        for first in [&["--force", "-o", o][..], &["-o", n][..]] {
            refused(
                &[&["collect"], first, &["--metrics", &taken], extra].concat(),
                "cannot listen there",
                kept,
            );
            assert!(!new.exists() && !zst_new.exists() && !db.exists());
        }
    }
    // Two outputs in one file.
    let z = zst.to_str().unwrap();
    refused(
        &["collect", "--force", "-o", z, "--archive", z],
        "same file",
        kept,
    );
    refused(
        &["collect", "--force", "-o", o, "--db", o],
        "same file",
        kept,
    );
    // A typo in a flag clap knows nothing of.
    refused(
        &["collect", "--force", "-o", o, "--reorder-bufer-mb", "1"],
        "unexpected argument",
        kept,
    );
    // An existing file without --force: refused, saying how to replace it.
    refused(&["collect", "-o", o], "--force", kept);
    refused(
        &["collect", "-o", n, "--archive", zst.to_str().unwrap()],
        "--force",
        kept,
    );
    assert!(!new.exists());
    // No such directory, a directory, a file as a directory.
    refused(
        &["collect", "-o", "/nonexistent/dir/e.jsonl"],
        "/nonexistent/dir",
        kept,
    );
    refused(
        &["collect", "-o", dir.path().to_str().unwrap()],
        "is a directory",
        kept,
    );
    let under = out.join("x.jsonl");
    refused(
        &["collect", "-o", under.to_str().unwrap()],
        "Not a directory",
        kept,
    );
    let nodir = dir.path().join("none/x.db");
    refused(
        &["collect", "-o", n, "--db", nodir.to_str().unwrap()],
        "none",
        kept,
    );
    assert!(!new.exists());
}

#[test]
fn ingest_refuses_every_bad_flag_before_touching_its_files() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let input = d.join("in.jsonl");
    let stream =
        r#"{"type":"event","id":1,"time_ns":1,"pid":7,"syscall":"write","ret":1,"path":"/log"}"#;
    std::fs::write(&input, format!("{stream}\n")).unwrap();
    let inbody = std::fs::read(&input).unwrap();
    let (zst, zbody) = old_file(d, "old.jsonl.zst");
    let (raw, rbody) = old_file(d, "raw.jsonl");
    let (db, dbbody) = old_file(d, "not-yet.db");
    std::fs::remove_file(&db).unwrap();
    let _ = dbbody;
    let (i, z, r, s) = (
        input.to_str().unwrap(),
        zst.to_str().unwrap(),
        raw.to_str().unwrap(),
        db.to_str().unwrap(),
    );
    let kept: &[(&Path, &[u8])] = &[(&input, &inbody), (&zst, &zbody), (&raw, &rbody)];
    let cases: &[(&[&str], &str)] = &[
        // The wrong extension: refused before the file is emptied.
        (&["--archive", r, "--force", i], "must end in .zst or .gz"),
        // An earlier archive without --force.
        (&["--archive", z, i], "--force"),
        (&["--archive-only", "--archive", z, i], "--force"),
        // The archive naming the input stream itself.
        (&["--archive", z, "--force", z], "same file as the input"),
        (
            &["--archive-only", "--archive", z, "--force", z],
            "same file as the input",
        ),
        // The store naming the input.
        (&["--db", i, i], "same file as the input"),
        (&["--batch", "0", i], "--batch"),
        (&["--batch-interval-ms", "0", i], "--batch-interval-ms"),
        (&["--max-line-bytes", "10", i], "--max-line-bytes"),
        (&["--db-cache-mb", "0", i], "--db-cache-mb"),
        // A missing input (after a good one): nothing is ingested, no store made.
        (&[i, "/nonexistent/in.jsonl"], "/nonexistent/in.jsonl"),
        (&["--archive", "/nonexistent/x.zst", i], "/nonexistent"),
        // --metrics: not an address, a wait without it, a wrong wait,
        // with --archive-only (which serves nothing).
        (&["--metrics", "127.0.0.1:notaport", i], "--metrics"),
        (&["--metrics", "localhost", i], "--metrics"),
        (&["--metrics-final-wait", "3", i], "--metrics"),
        (
            &["--metrics", "127.0.0.1:9", "--metrics-final-wait=-1", i],
            "--metrics-final-wait",
        ),
        (
            &[
                "--archive-only",
                "--archive",
                z,
                "--force",
                "--metrics",
                "127.0.0.1:9",
                i,
            ],
            "--metrics",
        ),
    ];
    for (args, why) in cases {
        let mut argv = vec!["ingest", "--quiet"];
        if !args.contains(&"--db") {
            argv.extend(["--db", s]);
        }
        argv.extend_from_slice(args);
        refused(&argv, why, kept);
        assert!(!db.exists(), "{args:?} made the store");
    }
    // A metrics port another program holds: refused before the store or
    // the archive is made, or an earlier archive replaced.
    let holder = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken = holder.local_addr().unwrap().to_string();
    let new_zst = d.join("new.jsonl.zst");
    let nz = new_zst.to_str().unwrap();
    for archive in [&["--archive", z, "--force"][..], &["--archive", nz]] {
        refused(
            &[
                &["ingest", "--quiet", "--db", s, "--metrics", &taken][..],
                archive,
                &[i],
            ]
            .concat(),
            "cannot listen there",
            kept,
        );
        assert!(!db.exists() && !new_zst.exists());
    }
    // stdin redirected from the archive it would write.
    let out = Command::new(env!("CARGO_BIN_EXE_custos"))
        .args(["ingest", "--db", s, "--force", "--archive", z, "-"])
        .stdin(std::fs::File::open(&zst).unwrap())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("same file as the input"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(std::fs::read(&zst).unwrap(), zbody);
    // With --force an archive is replaced, as asked.
    let out = custos(&["ingest", "--quiet", "--db", s, "--force", "--archive", z, i]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_ne!(std::fs::read(&zst).unwrap(), zbody);
}

/// `custos fleet ingest --metrics`: a bad address or a taken port is
/// refused before Kafka or ClickHouse is asked (here neither listens,
/// which would be the error otherwise) or the graph's directory is made.
#[test]
fn fleet_ingest_refuses_a_bad_metrics_address_first() {
    let dir = tempfile::tempdir().unwrap();
    let graphs = dir.path().join("graphs");
    let holder = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken = holder.local_addr().unwrap().to_string();
    let base = [
        "fleet",
        "ingest",
        "--kafka",
        "127.0.0.1:9",
        "--topic",
        "t",
        "--clickhouse",
        "http://127.0.0.1:9",
        "--stop-when-idle",
        "1",
        "--graph-dir",
        graphs.to_str().unwrap(),
    ];
    for (args, why) in [
        (&["--metrics", "localhost"][..], "--metrics"),
        (&["--metrics-final-wait", "3"], "--metrics"),
        (
            &["--metrics", "127.0.0.1:9", "--metrics-final-wait", "inf"],
            "--metrics-final-wait",
        ),
        (&["--metrics", &taken], "cannot listen there"),
    ] {
        refused(&[&base[..], args].concat(), why, &[]);
        assert!(!graphs.exists(), "{args:?} made the graph's directory");
    }
}

#[test]
fn graph_checks_its_pictures_before_asking_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("pic");
    std::fs::create_dir(dir.path().join("pic.dot")).unwrap();
    // The store does not exist: the picture's path is refused first.
    refused(
        &[
            "graph",
            "--db",
            "/nonexistent/x.db",
            "-o",
            prefix.to_str().unwrap(),
            "ancestors",
            "/a",
        ],
        "is a directory",
        &[],
    );
}

/// Lines `first..first + count` (from 1) of a stream of distinct events,
/// all of one length.
fn events(first: u64, count: u64) -> Vec<u8> {
    let mut out = Vec::new();
    for n in first..first + count {
        let id = 100_000_000_000 + n;
        writeln!(
            out,
            r#"{{"type":"event","id":{id},"time_ns":{id},"pid":7,"syscall":"write","ret":1,"path":"/log"}}"#
        )
        .unwrap();
    }
    out
}

fn stored_events(db: &Path) -> i64 {
    Connection::open(db)
        .unwrap()
        .query_row(
            "SELECT COALESCE(SUM(last_id - first_id + 1), 0) FROM event_ranges",
            [],
            |r| r.get(0),
        )
        .unwrap()
}

/// A number after `after` in `text`.
fn number_after(text: &str, after: &str) -> u64 {
    text.split(after)
        .nth(1)
        .unwrap_or_else(|| panic!("{after:?} not in {text}"))
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

/// SIGTERM while lines are queued: every line read is committed, the
/// message says how many and where a re-run resumes, and the store holds
/// exactly those lines; resuming from that byte stores the rest, once.
#[test]
fn sigterm_with_lines_queued_commits_every_line_read_and_says_where_to_resume() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("live.db");
    let total = 3_000_000u64;
    let line_len = events(1, 1).len() as u64;
    let mut child = Command::new(env!("CARGO_BIN_EXE_custos"))
        .args(["ingest", "--quiet", "--no-seal", "--db"])
        .arg(&db)
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    // A writer as fast as the pipe takes it, which keeps the pipe open.
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let written = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let writer = {
        let written = written.clone();
        std::thread::spawn(move || {
            for first in (1..=total).step_by(1000) {
                let batch = events(first, 1000);
                if stdin.write_all(&batch).is_err() {
                    break;
                }
                written.fetch_add(batch.len() as u64, std::sync::atomic::Ordering::Relaxed);
            }
            // Held open until the test is done: a collector still running.
            let _ = rx.recv();
            drop(stdin);
        })
    };
    // The signal once the ingest is reading (a pipe holds 64 KiB, so 1 MiB
    // written means it read the rest), not after a fixed 400 ms: on a
    // loaded machine (make test beside a VM) that could come before it
    // read anything. The reader outruns the store: lines are queued then.
    let reading = std::time::Instant::now();
    while written.load(std::sync::atomic::Ordering::Relaxed) < 1 << 20 {
        assert!(
            reading.elapsed() < std::time::Duration::from_secs(120),
            "the ingest read under 1 MiB in 120 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let term = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(term.success());
    let status = child.wait().unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    tx.send(()).unwrap();
    writer.join().unwrap();
    assert_eq!(status.code(), Some(130), "{err}");
    let committed = number_after(&err, "committed all ");
    let queued = number_after(&err, "lines read (");
    let offset = number_after(&err, "resumes at byte ");
    assert!(committed > 0 && committed < total, "mid-stream: {err}");
    assert!(queued > 0, "the signal came with lines queued: {err}");
    assert_eq!(offset, committed * line_len, "{err}");
    assert_eq!(stored_events(&db), committed as i64, "{err}");
    // Resuming at the byte it named: the next lines are new, none twice.
    let rest = dir.path().join("rest.jsonl");
    std::fs::write(&rest, events(offset / line_len + 1, 1000)).unwrap();
    let out = custos(&[
        "ingest",
        "--quiet",
        "--no-seal",
        "--db",
        db.to_str().unwrap(),
        rest.to_str().unwrap(),
    ]);
    let err2 = text(&out.stderr);
    assert!(out.status.success(), "{err2}");
    assert!(err2.contains(" 0 already stored"), "{err2}");
    assert_eq!(stored_events(&db), committed as i64 + 1000);
}

/// A line over --max-line-bytes is kept as a reject (its first bytes and its
/// length) and counted, and the lines after it are ingested; an input
/// without a newline is one such reject, never held whole.
#[test]
fn lines_over_the_limit_are_rejects_and_the_ingest_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("long.jsonl");
    let mut body = events(1, 1);
    let long_line = format!(r#"{{"type":"event","path":"{}"}}"#, "a".repeat(3 << 20));
    body.extend_from_slice(long_line.as_bytes());
    body.push(b'\n');
    body.extend_from_slice(&events(2, 1));
    std::fs::write(&input, &body).unwrap();
    let db = dir.path().join("s.db");
    let out = custos(&[
        "ingest",
        "--quiet",
        "--no-seal",
        "--max-line-bytes",
        "1048576",
        "--db",
        db.to_str().unwrap(),
        input.to_str().unwrap(),
    ]);
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("1 of them longer than --max-line-bytes"),
        "{err}"
    );
    assert_eq!(stored_events(&db), 2, "{err}");
    let conn = Connection::open(&db).unwrap();
    let (line_no, error, kept): (i64, String, String) = conn
        .query_row("SELECT line_no, error, line FROM rejects", [], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })
        .unwrap();
    assert_eq!(line_no, 2);
    assert!(
        error.contains(&format!("a line of {} bytes", long_line.len())),
        "{error}"
    );
    assert_eq!(
        kept,
        long_line[..custos_store::linereader::OVERLONG_HEAD_BYTES]
    );

    // No newline at all: 40 MiB through a pipe, one reject.
    let db2 = dir.path().join("t.db");
    let mut child = Command::new(env!("CARGO_BIN_EXE_custos"))
        .args([
            "ingest",
            "--quiet",
            "--no-seal",
            "--max-line-bytes",
            "1048576",
            "--db",
        ])
        .arg(&db2)
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let chunk = vec![b'{'; 1 << 20];
    for _ in 0..40 {
        stdin.write_all(&chunk).unwrap();
    }
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("1 lines in") && err.contains("1 of them longer"),
        "{err}"
    );
    let error: String = Connection::open(&db2)
        .unwrap()
        .query_row("SELECT error FROM rejects", [], |r| r.get(0))
        .unwrap();
    assert!(
        error.contains(&format!("a line of {} bytes", 40u64 << 20)),
        "{error}"
    );
}

/// A crafted loss record whose span wraps, or whose count would be stored
/// negative, is a reject with its reason; the store's lost-event total is
/// what the valid records say.
#[test]
fn crafted_loss_records_are_rejected_not_wrapped() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("loss.jsonl");
    let max = u64::MAX;
    let big = i64::MAX as u64 + 1;
    let lines = [
        format!(r#"{{"type":"loss","cpu":0,"category":"events","first_seq":0,"last_seq":{max},"start_ns":1,"end_ns":2}}"#),
        format!(r#"{{"type":"loss","cpu":0,"category":"events","count":{big},"start_ns":1,"end_ns":2}}"#),
        r#"{"type":"loss","cpu":0,"category":"events","count":-3,"start_ns":1,"end_ns":2}"#.to_string(),
        r#"{"type":"loss","cpu":1,"category":"events","first_seq":4,"last_seq":9,"start_ns":1,"end_ns":2}"#.to_string(),
    ];
    std::fs::write(&input, lines.join("\n") + "\n").unwrap();
    let db = dir.path().join("s.db");
    let out = custos(&[
        "ingest",
        "--quiet",
        "--no-seal",
        "--db",
        db.to_str().unwrap(),
        input.to_str().unwrap(),
    ]);
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("3 malformed lines"), "{err}");
    assert!(err.contains("1 loss records (6 events lost)"), "{err}");
    let conn = Connection::open(&db).unwrap();
    let negative: i64 = conn
        .query_row(
            "SELECT COUNT(*) FROM losses WHERE count < 0 OR first_seq < -1 OR last_seq < -1",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(negative, 0);
    let reasons: Vec<String> = conn
        .prepare("SELECT error FROM rejects ORDER BY line_no")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert!(reasons[0].contains("last_seq"), "{reasons:?}");
    assert!(reasons[1].contains("count"), "{reasons:?}");
}

/// A `--since` or `--until` past the store's last time (i64 nanoseconds,
/// 2262) is refused with the reason: before, 2555-01-01 wrapped to
/// 1970-06-13 and the answer was silently empty.
#[test]
fn query_times_past_the_store_s_range_are_refused_not_wrapped() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("w.jsonl");
    std::fs::write(
        &input,
        concat!(
            r#"{"type":"event","id":1,"time_ns":1763700000000000000,"pid":7,"comm":"w","syscall":"write","ret":1,"fd":3,"path":"/out/x"}"#,
            "\n"
        ),
    )
    .unwrap();
    let db = dir.path().join("s.db");
    let (d, i) = (db.to_str().unwrap(), input.to_str().unwrap());
    let out = custos(&["ingest", "--quiet", "--no-seal", "--db", d, i]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let until = |t: &str| {
        custos(&[
            "query",
            "--db",
            d,
            "--json",
            "ancestors",
            "/out/x",
            "--until",
            t,
        ])
    };
    // The control: a bound after the write keeps its writer.
    let kept = until("2262-01-01T00:00:00Z");
    assert!(kept.status.success(), "{}", text(&kept.stderr));
    assert!(
        text(&kept.stdout).contains("\"pid\": 7"),
        "{}",
        text(&kept.stdout)
    );
    for t in ["2555-01-01T00:00:00Z", "9223372036854775808"] {
        for flag in ["--since", "--until"] {
            refused(
                &["query", "--db", d, "ancestors", "/out/x", flag, t],
                "past the store's range",
                &[],
            );
        }
    }
}

/// Rotation's flags are checked before anything is attached or written,
/// and an earlier series' segments are never replaced without --force.
#[test]
fn collect_refuses_bad_rotation_before_touching_a_series() {
    let dir = tempfile::tempdir().unwrap();
    let (file, body) = old_file(dir.path(), "events.jsonl");
    let series = dir.path().join("series");
    std::fs::create_dir(&series).unwrap();
    let (seg, seg_body) = old_file(&series, "segment-000003.jsonl");
    let kept: &[(&Path, &[u8])] = &[(&file, &body), (&seg, &seg_body)];
    let new = dir.path().join("new");
    let (n, s, f) = (
        new.to_str().unwrap(),
        series.to_str().unwrap(),
        file.to_str().unwrap(),
    );
    let zst = dir.path().join("new.jsonl.zst");
    for (args, why) in [
        (&["--rotate-mb", "1"][..], "name it with -o DIR"),
        (&["-o", "-", "--rotate-mb", "1"][..], "name it with -o DIR"),
        (
            &["-o", n, "--rotate-mb", "0"][..],
            "--rotate-mb must be between",
        ),
        (
            &["-o", n, "--rotate-mb", "2000000"][..],
            "--rotate-mb must be between",
        ),
        (
            &["-o", n, "--rotate-mb", "1", "--rotate-keep", "0"][..],
            "--rotate-keep must be at least 1",
        ),
        (
            &["-o", n, "--rotate-keep", "2"][..],
            "--rotate-keep needs --rotate-mb",
        ),
        (
            &["-o", n, "--rotate-mb", "1", "--no-seal"][..],
            "drop --no-seal",
        ),
        (&["-o", f, "--rotate-mb", "1"][..], "is not a directory"),
        (
            &["-o", f, "--rotate-mb", "1", "--force"][..],
            "is not a directory",
        ),
        (
            &["-o", s, "--rotate-mb", "1"][..],
            "holds 1 segments of an earlier recording",
        ),
        (
            &[
                "-o",
                n,
                "--rotate-mb",
                "1",
                "--archive",
                zst.to_str().unwrap(),
            ][..],
            "with --rotate-mb the archive is a directory",
        ),
        // The archive's series beside the plain one: never in its directory,
        // never over an earlier archive's segments without --force.
        (
            &["-o", n, "--rotate-mb", "1", "--archive", n][..],
            "the same directory as -o",
        ),
        (
            &["-o", n, "--rotate-mb", "1", "--archive", s][..],
            "holds 1 segments of an earlier recording",
        ),
        (
            &["-o", "/no/such/dir", "--rotate-mb", "1"][..],
            "its parent /no/such",
        ),
    ] {
        refused(&[&["collect"], args].concat(), why, kept);
        assert!(
            !new.exists() && !zst.exists(),
            "{args:?} created its output"
        );
    }
    // Verify and ingest of a directory without segments: said, not an empty success.
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let e = empty.to_str().unwrap();
    refused(&["verify", e], "no segments", kept);
    let db = dir.path().join("new.db");
    refused(
        &["ingest", "--no-seal", "--db", db.to_str().unwrap(), e],
        "without segments",
        kept,
    );
    assert!(!db.exists(), "the store was made for nothing");
}

/// `--set-aside-previous` is checked with every other flag and output: a
/// refusal moves nothing, and it is refused where it would name nothing.
#[test]
fn collect_refuses_a_bad_set_aside_before_moving_anything() {
    let dir = tempfile::tempdir().unwrap();
    let (file, body) = old_file(dir.path(), "events.jsonl");
    let series = dir.path().join("series");
    std::fs::create_dir(&series).unwrap();
    let (seg, seg_body) = old_file(&series, "segment-000001.jsonl");
    let kept: &[(&Path, &[u8])] = &[(&file, &body), (&seg, &seg_body)];
    let names = || {
        let mut v: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        v.sort();
        v
    };
    let before = names();
    let (s, f) = (series.to_str().unwrap(), file.to_str().unwrap());
    let holder = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken = holder.local_addr().unwrap().to_string();
    let zst = dir.path().join("new.jsonl.zst");
    let series_aside = ["-o", s, "--rotate-mb", "1", "--set-aside-previous"];
    for (args, why) in [
        (
            [&series_aside[..], &["--rotate-keep", "0"]].concat(),
            "--rotate-keep must be at least 1",
        ),
        (
            ["-o", f, "--set-aside-previous", "--reorder-buffer-mb", "0"].to_vec(),
            "--reorder-buffer-mb",
        ),
        (
            [&series_aside[..], &["--metrics", &taken]].concat(),
            "cannot listen there",
        ),
        (
            [&series_aside[..], &["--archive", zst.to_str().unwrap()]].concat(),
            "with --rotate-mb the archive is a directory",
        ),
        (
            ["-o", f, "--set-aside-previous", "--force"].to_vec(),
            "cannot be used with",
        ),
        (
            ["--set-aside-previous"].to_vec(),
            "--set-aside-previous renames an earlier recording",
        ),
        (
            ["-o", "-", "--set-aside-previous"].to_vec(),
            "--set-aside-previous renames an earlier recording",
        ),
        (
            ["-o", "/", "--rotate-mb", "1", "--set-aside-previous"].to_vec(),
            "by its own name",
        ),
    ] {
        refused(&[&["collect"], &args[..]].concat(), why, kept);
        assert_eq!(names(), before, "{args:?} moved or made something");
    }
}

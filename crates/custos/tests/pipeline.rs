//! The whole pipeline on this machine's kernel: `custos collect` records a real
//! workload, `custos ingest` builds the graph, `custos query` answers where a
//! file came from. Nothing here is hand-written provenance.

use std::process::Command;

/// One collector runs at a time on a machine (it owns the pinned maps), and
/// tests in this file run in parallel threads: they take turns.
static COLLECTOR: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn custos(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_custos")).args(args).output().expect("run custos")
}

fn ok(out: &std::process::Output) -> String {
    assert!(out.status.success(), "exit {:?}\nstderr: {}", out.status, String::from_utf8_lossy(&out.stderr));
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
    ok(&custos(&["collect", "-o", events.to_str().unwrap(), "--", "sh", "-c", &workload]));
    assert_eq!(std::fs::read_to_string(dir.path().join("final.txt")).unwrap(), "SECRET\n");

    ok(&custos(&["ingest", "--db", db.to_str().unwrap(), "-q", events.to_str().unwrap()]));
    let final_txt = format!("{d}/final.txt");
    let answer = ok(&custos(&["query", "--db", db.to_str().unwrap(), "--json", "ancestors", &final_txt]));
    let v: serde_json::Value = serde_json::from_str(&answer).unwrap();
    let names: Vec<String> = v["nodes"].as_array().unwrap().iter().map(|n| n["name"].as_str().unwrap_or("").to_string()).collect();
    let has = |want: &str| names.iter().any(|n| n == want || n.ends_with(want));
    for want in ["/final.txt", "/copy.txt", "/out.txt", "/up.txt", "/mid.txt", "/src.txt", "/usr/bin/mv", "/usr/bin/cp", "/usr/bin/cat", "/usr/bin/tr", "/usr/bin/sort"] {
        assert!(has(want), "ancestors of final.txt lack {want}: {names:?}");
    }
    // Every edge points from effect to cause, and the answer says whether it is complete.
    let kinds: Vec<&str> = v["edges"].as_array().unwrap().iter().map(|e| e["kind"].as_str().unwrap()).collect();
    for k in ["wasGeneratedBy", "used", "wasDerivedFrom", "wasInformedBy"] {
        assert!(kinds.contains(&k), "no {k} edge in {kinds:?}");
    }
    assert_eq!(v["complete"], true, "no loss happened, yet: {}", v["losses"]);

    // And the picture renders.
    let prefix = dir.path().join("final");
    ok(&custos(&["graph", "--db", db.to_str().unwrap(), "-o", prefix.to_str().unwrap(), "ancestors", &final_txt]));
    let svg = std::fs::read_to_string(prefix.with_extension("svg")).unwrap();
    assert!(svg.contains("<svg") && svg.contains("final.txt"), "{}", &svg[..svg.len().min(300)]);
    assert!(std::fs::read_to_string(prefix.with_extension("dot")).unwrap().starts_with("digraph"));
}

#[test]
fn collect_writes_straight_into_the_store_and_an_archive() {
    let _turn = COLLECTOR.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let db = dir.path().join("live.db");
    let zst = dir.path().join("live.jsonl.zst");
    let workload = format!("cd {d} && echo data > a.txt && sort a.txt > b.txt");
    let out = custos(&["collect", "--db", db.to_str().unwrap(), "--archive", zst.to_str().unwrap(), "--", "sh", "-c", &workload]);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{err}");
    assert!(out.stdout.is_empty(), "with --db and no -o, no events on stdout");
    assert!(err.contains("stored in") && err.contains("archived to"), "{err}");

    // The store answers without a separate ingest.
    let b = format!("{d}/b.txt");
    let answer = ok(&custos(&["query", "--db", db.to_str().unwrap(), "--json", "ancestors", &b]));
    let v: serde_json::Value = serde_json::from_str(&answer).unwrap();
    let names: Vec<&str> = v["nodes"].as_array().unwrap().iter().filter_map(|n| n["name"].as_str()).collect();
    assert!(names.iter().any(|n| n.ends_with("/a.txt")) && names.iter().any(|n| n.ends_with("/usr/bin/sort")), "{names:?}");

    // The archive holds the same stream: ingesting it elsewhere gives the same events.
    let again = dir.path().join("from-archive.db");
    let out = custos(&["ingest", "--db", again.to_str().unwrap(), "-q", zst.to_str().unwrap()]);
    assert!(out.status.success());
    let count = |db: &std::path::Path| {
        let out = Command::new("sqlite3").arg(db).arg("SELECT count(*) FROM events").output().unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    assert_eq!(count(&db), count(&again));
    assert_ne!(count(&db), "0");
}

//! `custos collect -o DIR --rotate-mb N` through the real binary, during a
//! flood: the segments account for every event, verify as one chain (and
//! name the segment a tampering is in), rotate away what `--rotate-keep`
//! does not keep, visibly, and ingest as the stream they cut; `--archive
//! ADIR` beside them is the same series compressed. Needs root.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// One collector per machine: the tests that start one take turns.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn custos(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_custos"))
        .args(args)
        .output()
        .unwrap()
}

/// Records a flood of `find -exec cat` over /usr/include and /usr/share/doc into `dir`, rotated at 1 MiB,
/// sealed with the key at `key`; `extra` flags after. Returns stderr.
fn collect_flood(dir: &Path, key: &Path, extra: &[&str]) -> String {
    let run = Command::new(env!("CARGO_BIN_EXE_custos"))
        .args(["collect", "-o", dir.to_str().unwrap(), "--rotate-mb", "1"])
        .args(["--seal-key", key.to_str().unwrap(), "--seal-every", "1000"])
        .args(["--stats-interval", "0.5"])
        .args(extra)
        .args([
            "--",
            "sh",
            "-c",
            "find /usr/include /usr/share/doc -xdev -type f -exec cat {} + > /dev/null 2>&1",
        ])
        .output()
        .unwrap();
    let err = text(&run.stderr);
    assert!(run.status.success(), "{err}");
    err
}

/// The segments in `dir`, in order.
fn segments(dir: &Path) -> Vec<PathBuf> {
    let mut s: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_str()
                .unwrap()
                .starts_with("segment-")
        })
        .collect();
    s.sort();
    s
}

/// `custos verify DIR --json --key KEY`: exit status and report.
fn verify(dir: &Path, key: &Path) -> (Option<i32>, serde_json::Value) {
    let o = custos(&[
        "verify",
        dir.to_str().unwrap(),
        "--json",
        "--key",
        key.with_extension("pub").to_str().unwrap(),
    ]);
    let report =
        serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&o.stderr)));
    (o.status.code(), report)
}

/// The names of the segments the findings of `report` are in.
fn named(report: &serde_json::Value) -> Vec<(String, String)> {
    report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["kind"].as_str().unwrap().to_string(),
                f["segment"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

/// A copy of the series in `from` at `to`.
fn copy(from: &Path, to: &Path) {
    std::fs::create_dir(to).unwrap();
    for s in segments(from) {
        std::fs::copy(&s, to.join(s.file_name().unwrap())).unwrap();
    }
}

/// `custos ingest --db DB INPUT` (a stream or a series directory), then
/// the graph it built.
fn ingested_graph(db: &Path, input: &Path) -> (Vec<String>, Vec<String>) {
    let o = custos(&[
        "ingest",
        "--db",
        db.to_str().unwrap(),
        "--no-seal",
        "-q",
        input.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    graph_dump(db)
}

fn graph_dump(db: &Path) -> (Vec<String>, Vec<String>) {
    let conn = custos_store::rusqlite::Connection::open(db).unwrap();
    let nodes = custos_store::nodes::all(&conn)
        .unwrap()
        .iter()
        .map(|n| format!("{}|{}|{}|{}|{}", n.node, n.kind, n.boot, n.name, n.event_id))
        .collect();
    let mut edges: Vec<String> = custos_store::effects::all(&conn)
        .unwrap()
        .iter()
        .map(|e| format!("{}|{}|{}|{}", e.effect, e.cause, e.kind, e.event_id))
        .collect();
    edges.sort();
    (nodes, edges)
}

#[test]
fn a_rotated_flood_accounts_verifies_names_tampering_and_ingests_as_one_stream() {
    let _g = serial();
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().canonicalize().unwrap();
    let key = d.join("keys/seal.key");
    let dir = d.join("series");
    collect_flood(&dir, &key, &[]);
    let segs = segments(&dir);
    assert!(segs.len() >= 4, "several MB of stream: {segs:?}");

    // Every event is in a segment or counted lost; every line is whole.
    let mut events = 0u64;
    let mut last_stats = None;
    for (i, s) in segs.iter().enumerate() {
        let body = std::fs::read_to_string(s).unwrap();
        assert!(body.ends_with('\n'), "{} ends on a whole line", s.display());
        for (j, l) in body.lines().enumerate() {
            let v: serde_json::Value =
                serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"));
            if j == 0 {
                assert_eq!(v["type"], "segment");
                assert_eq!(v["segment"], i as u64 + 1);
            }
            match v["type"].as_str() {
                Some("event") => events += 1,
                Some("stats") => last_stats = Some(v),
                _ => {}
            }
        }
        // Cut at a seal once past 1 MiB (the last one, whatever is left).
        let last = body.lines().last().unwrap();
        assert!(last.starts_with("{\"type\":\"seal\""), "{last}");
        if i + 1 < segs.len() {
            assert!(std::fs::metadata(s).unwrap().len() >= 1 << 20);
        }
    }
    let stats = last_stats.expect("the final stats record");
    assert_eq!(stats["final"], true);
    assert_eq!(stats["invariant_holds"], true);
    let n = |f: &str| stats[f].as_u64().unwrap();
    assert_eq!(n("delivered"), events, "{stats}");
    assert_eq!(n("produced"), events + n("dropped"), "{stats}");

    // The series verifies whole, from segment 1.
    let (code, r) = verify(&dir, &key);
    assert_eq!(code, Some(0), "{r}");
    assert_eq!(r["intact"], true);
    assert_eq!(
        (r["first_segment"].as_u64(), r["rotated_away"].as_u64()),
        (Some(1), Some(0))
    );
    assert_eq!(r["segments"].as_array().unwrap().len(), segs.len());

    // Ingested as a directory, it is the concatenated stream's store.
    let all = d.join("all.jsonl");
    let body: Vec<u8> = segs
        .iter()
        .flat_map(|s| std::fs::read(s).unwrap())
        .collect();
    std::fs::write(&all, body).unwrap();
    let (a, b) = (
        ingested_graph(&d.join("dir.db"), &dir),
        ingested_graph(&d.join("all.db"), &all),
    );
    assert!(
        a.0.len() > 100 && a.1.len() > 100,
        "{} nodes, {} edges",
        a.0.len(),
        a.1.len()
    );
    assert_eq!(
        (a.0.len(), a.1.len()),
        (b.0.len(), b.1.len()),
        "node and edge counts"
    );
    assert!(a == b, "ingesting the directory built another graph");

    // A middle segment deleted: named, by the segment after the gap.
    let name = |p: &Path| p.file_name().unwrap().to_str().unwrap().to_string();
    let gone = d.join("gone");
    copy(&dir, &gone);
    std::fs::remove_file(gone.join(name(&segs[1]))).unwrap();
    let (code, r) = verify(&gone, &key);
    assert_eq!(code, Some(3), "{r}");
    assert_eq!(named(&r)[0], ("deleted".into(), name(&segs[2])), "{r}");
    assert!(r["findings"][0]["message"]
        .as_str()
        .unwrap()
        .contains("segment 2 is missing"));

    // Two swapped: both named.
    let swapped = d.join("swapped");
    copy(&dir, &swapped);
    let (a, b) = (swapped.join(name(&segs[1])), swapped.join(name(&segs[2])));
    let held = std::fs::read(&a).unwrap();
    std::fs::copy(&b, &a).unwrap();
    std::fs::write(&b, held).unwrap();
    let (code, r) = verify(&swapped, &key);
    assert_eq!(code, Some(3), "{r}");
    let found = named(&r);
    for s in [&segs[1], &segs[2]] {
        assert!(found.contains(&("reordered".into(), name(s))), "{found:?}");
    }

    // One line edited: the segment, and the batch, in plain text too.
    let edited = d.join("edited");
    copy(&dir, &edited);
    let victim = edited.join(name(&segs[2]));
    let body = std::fs::read_to_string(&victim).unwrap();
    let at = body.find("\"type\":\"event\"").unwrap();
    let changed = format!(
        "{}{}",
        &body[..at],
        body[at..].replacen("\"pid\":", "\"pid\":1", 1)
    );
    assert_ne!(changed, body);
    std::fs::write(&victim, changed).unwrap();
    let (code, r) = verify(&edited, &key);
    assert_eq!(code, Some(3), "{r}");
    assert_eq!(named(&r), [("altered".to_string(), name(&segs[2]))], "{r}");
    let plain = custos(&["verify", edited.to_str().unwrap()]);
    let out = text(&plain.stdout);
    assert_eq!(plain.status.code(), Some(3), "{out}");
    assert!(
        out.contains(&format!("altered in {} batch", name(&segs[2]))),
        "{out}"
    );

    // The last segment cut short: a writer cut off, in that segment.
    let cut = d.join("cut");
    copy(&dir, &cut);
    let last = cut.join(name(segs.last().unwrap()));
    let len = std::fs::metadata(&last).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&last)
        .unwrap()
        .set_len(len - 100)
        .unwrap();
    let (code, r) = verify(&cut, &key);
    assert_eq!(code, Some(3), "{r}");
    let found = named(&r);
    assert!(
        found.contains(&("truncated".into(), name(segs.last().unwrap()))),
        "{found:?}"
    );
}

#[test]
fn rotate_keep_bounds_the_series_and_verify_says_where_it_starts() {
    let _g = serial();
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().canonicalize().unwrap();
    let key = d.join("keys/seal.key");
    let dir = d.join("series");
    let archive = d.join("archive");
    let err = collect_flood(
        &dir,
        &key,
        &["--rotate-keep", "2", "--archive", archive.to_str().unwrap()],
    );
    let segs = segments(&dir);
    assert!(segs.len() <= 2, "{segs:?}");
    let first: u64 = segs[0].to_str().unwrap()[segs[0].to_str().unwrap().len() - 12..][..6]
        .parse()
        .unwrap();
    assert!(
        first > 2,
        "a flood of several MB rotated segments away: {segs:?}"
    );
    // Said on stderr as it happened, and in the end.
    assert!(
        err.contains("rotated away segment-000001.jsonl (--rotate-keep 2)"),
        "{err}"
    );
    assert!(
        err.contains(&format!("holds segments {first} to ")) && err.contains("older rotated away"),
        "{err}"
    );
    let (code, r) = verify(&dir, &key);
    assert_eq!(code, Some(0), "{r}");
    assert_eq!(r["first_segment"].as_u64(), Some(first));
    assert_eq!(r["rotated_away"].as_u64(), Some(first - 1));
    let plain = custos(&["verify", dir.to_str().unwrap()]);
    let out = text(&plain.stdout);
    assert!(
        out.contains(&format!(
            "starts at segment {first}: the {} before it were rotated away",
            first - 1
        )) && out.contains(": intact: "),
        "{out}"
    );

    // The archive is the same series compressed: the same segments kept,
    // each holding the same bytes, rotated away as they were; it verifies
    // and ingests as the plain one does.
    let archived = segments(&archive);
    let plain_names: Vec<String> = segs
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned() + ".zst")
        .collect();
    let archived_names: Vec<String> = archived
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(archived_names, plain_names);
    for (plain, packed) in segs.iter().zip(&archived) {
        let mut unpacked = Vec::new();
        std::io::Read::read_to_end(
            &mut custos_output::segments::open(packed).unwrap(),
            &mut unpacked,
        )
        .unwrap();
        assert!(
            unpacked == std::fs::read(plain).unwrap(),
            "{} is not {} compressed",
            packed.display(),
            plain.display()
        );
        assert!(
            std::fs::metadata(packed).unwrap().len() < std::fs::metadata(plain).unwrap().len() / 2
        );
    }
    assert!(
        err.lines().any(|l| l.contains("rotated away archived ")
            && l.contains("segment-000001.jsonl.zst")
            && l.contains("--rotate-keep")),
        "{err}"
    );
    let (code, r) = verify(&archive, &key);
    assert_eq!(code, Some(0), "{r}");
    assert_eq!(r["first_segment"].as_u64(), Some(first));
    let plain = ingested_graph(&d.join("plain.db"), &dir);
    assert!(plain.0.len() > 100, "{} nodes", plain.0.len());
    assert!(
        plain == ingested_graph(&d.join("archive.db"), &archive),
        "the archive ingested into another graph"
    );

    // Removing the oldest kept segment is not rotation: the headers say so.
    std::fs::remove_file(&segs[0]).unwrap();
    let (code, r) = verify(&dir, &key);
    assert_eq!(code, Some(3), "{r}");
    assert_eq!(r["findings"][0]["kind"], "deleted", "{r}");
}

//! A real stream recorded by `custos collect` (collector branch, 2026-11-21) on
//! this project's build machine while running tests/data/collector-gcc-build.sh:
//! gcc compiles and links hello.c, runs it into out.txt, `cat out.txt
//! /etc/hostname | sort > out.sorted`, `mv out.sorted out.final`. The stream
//! is whole-system (a QEMU process ran alongside) and arrives in ring order,
//! not time order, exactly as the collector delivers it.

use custos_store::query::{ancestry, who_touched, Direction, Window};
use custos_store::{IngestOptions, Ingestor};
use std::io::BufRead;
use std::path::Path;

#[test]
fn ancestry_of_a_real_recorded_build() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("real.db");
    let input =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/collector-gcc-build.jsonl.zst");
    let mut ing = Ingestor::open(
        &db,
        IngestOptions {
            batch_lines: 100_000,
            ..Default::default()
        },
    )
    .unwrap();
    for line in custos_store::archive::open_input(&input).unwrap().lines() {
        ing.push_line(&line.unwrap()).unwrap();
    }
    let (sum, _) = ing.finish().unwrap();
    assert_eq!((sum.events_new, sum.malformed), (1238, 0), "{sum:?}");

    let conn = custos_store::schema::open_ro(&db).unwrap();
    let a = ancestry(
        &conn,
        "/tmp/rw/out.final",
        Direction::Ancestors,
        None,
        Window::default(),
    )
    .unwrap();
    let has = |name: &str| a.nodes.iter().any(|n| n.name == name);
    // The whole chain back to the source: mv ← out.sorted ← sort ← pipe ← cat
    // ← out.txt, /etc/hostname ← ./hello ← ld ← hello.o ← as ← the .s ← cc1 ← hello.c.
    for name in [
        "/tmp/rw/out.sorted",
        "/usr/bin/mv",
        "/usr/bin/sort",
        "/usr/bin/cat",
        "/tmp/rw/out.txt",
        "/etc/hostname",
        "/tmp/rw/hello",
        "/tmp/rw/hello.o",
        "/usr/bin/x86_64-linux-gnu-as",
        "/usr/lib/gcc/x86_64-linux-gnu/12/cc1",
        "/tmp/rw/hello.c",
        "/tmp/rw/work.sh",
    ] {
        assert!(has(name), "{name} missing from the ancestry of out.final");
    }
    assert!(
        a.nodes.iter().any(|n| n.kind == "pipe"),
        "the cat | sort pipe is on the path"
    );
    // QEMU's eventfd traffic shows up with path "/" (d_path of an anonymous
    // inode); it must not be mistaken for a file that everything shares.
    assert!(
        a.nodes.iter().all(|n| !n.name.contains("qemu")),
        "an unrelated process on the machine is not an ancestor"
    );
    assert!(
        !has("/"),
        "no read or write makes the root directory a file"
    );
    assert!(a.complete, "the collector reported no loss");
    // hello.o: written by `as`, read by the linker.
    let w = who_touched(&conn, "/tmp/rw/hello.o", Window::default()).unwrap();
    let who: Vec<(&str, String)> = w
        .rows
        .iter()
        .map(|r| (r.action, w.node(r.process).unwrap().name.clone()))
        .collect();
    assert_eq!(
        who,
        vec![
            ("wrote", "/usr/bin/x86_64-linux-gnu-as".to_string()),
            ("read", "/usr/bin/x86_64-linux-gnu-ld.bfd".to_string())
        ]
    );
}

//! The causal graph of a real attack under the super producer, end to end:
//! collector → scheduler → store → query, in the sched_ext VM (one vCPU),
//! with bench/reliability/guest.sh (16 `find` workers): the scheduler
//! protects the consumer when it starts before the collector, and after a
//! collector restart (the collector first is tests/superproducer.rs's
//! Custos run, which also checks that the default scheduler's skips are all
//! in the loss records), under the learned policy.
//!
//! On demand (`CUSTOS_ATTACK=1`), the scripted attack of scripts/attack.sh
//! during the flood (four secrets read, archived, uploaded over HTTP with
//! curl's non-blocking connect, a script downloaded and copied over
//! another) is found step by step; under the static policy that is `make
//! demo`'s, tests/demo.rs, in every make test.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

fn custos(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_custos"))
        .args(args)
        .output()
        .expect("run custos");
    assert!(
        out.status.success(),
        "custos {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The final stats record and the loss records of a stream.
fn account(stream: &Path) -> (Value, Vec<Value>) {
    let text =
        std::fs::read_to_string(stream).unwrap_or_else(|e| panic!("{}: {e}", stream.display()));
    let mut fin = None;
    let mut losses = Vec::new();
    for line in text.lines() {
        if line.contains("\"type\":\"stats\"") && line.contains("\"final\":true") {
            fin = Some(serde_json::from_str(line).unwrap());
        } else if line.contains("\"type\":\"loss\"") {
            losses.push(serde_json::from_str(line).unwrap());
        }
    }
    (
        fin.unwrap_or_else(|| panic!("{}: no final stats", stream.display())),
        losses,
    )
}

fn n(v: &Value, k: &str) -> u64 {
    v[k].as_u64()
        .unwrap_or_else(|| panic!("{k} missing in {v}"))
}

/// Runs bench/reliability/guest.sh's `runs` in the VM (one vCPU, 16
/// workers) with `custos sched {sched_args}`; the streams are in the result.
fn run_guest(sched_args: &str, runs: &str, files: u32) -> tempfile::TempDir {
    let bin = Path::new(env!("CARGO_BIN_EXE_custos"));
    let out = tempfile::tempdir().unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/reliability/guest.sh");
    let env = format!(
        "CUSTOS_BIN={} OUT={} WORKERS=16 FILES={files} SCHED_ARGS='{sched_args}' RUNS='{runs}'",
        bin.parent().unwrap().display(),
        out.path().display()
    );
    let run = Command::new(bin)
        .args([
            "vm",
            "run",
            "-q",
            "--cpus",
            "1",
            "--timeout",
            "1500",
            "--share",
        ])
        .arg(out.path())
        .args(["--", "sh", "-c"])
        .arg(format!("{env} bash {}", script.display()))
        .output()
        .expect("run custos vm");
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(0), "stderr: {stderr}");
    out
}

const START_ORDERS: [&str; 2] = ["sched-first", "restart"];

/// The start orders under the learned policy (the shipped model): which of
/// scheduler and collector starts first is met by the consumer protection,
/// which no policy changes, so one boot asks both at once whether the
/// learned policy loses anything of a flood. The static policy's floods are
/// tests/demo.rs's (with the attack) and tests/superproducer.rs's.
///
/// The floods are half the demo's (2000 files a worker): the same rate of
/// events, which overflows the default scheduler's rings within seconds
/// (tests/superproducer.rs asserts more than 5 % lost with as many files),
/// in half of make test's time. `CUSTOS_ATTACK=1` adds the attack, found
/// step by step, during a flood of 4000 (the attack must run inside it);
/// `CUSTOS_SCHED_ARGS` asks another configuration. Each run of the attack
/// under the learned policy took about 7 of make test's minutes on the slow
/// emulator of 2026-11-27, a boot and a flood of its own.
#[test]
fn every_start_order_protects_the_consumer_under_the_learned_policy() {
    let sched_args =
        std::env::var("CUSTOS_SCHED_ARGS").unwrap_or_else(|_| "--policy learned".into());
    let attack = std::env::var("CUSTOS_ATTACK").is_ok_and(|v| v == "1");
    let (runs, files) = if attack {
        ("attack sched-first restart", 4000)
    } else {
        ("sched-first restart", 2000)
    };
    let out = run_guest(&sched_args, runs, files);
    let o = out.path();
    if attack {
        the_attack_is_found_and_nothing_lost(o);
    }
    start_orders_protect_the_consumer(o);
    if sched_args.contains("learned") {
        for order in START_ORDERS {
            let log = std::fs::read_to_string(o.join(format!("{order}.sched.log"))).unwrap();
            assert!(
                log.contains("learned policy:"),
                "{order}: the scheduler did not run the learned policy: {log}"
            );
        }
    }
}

fn the_attack_is_found_and_nothing_lost(o: &Path) {
    // The attack: nothing lost, and every step found by a query.
    let (attack, in_band) = account(&o.join("attack.jsonl"));
    assert!(
        n(&attack, "produced") > 50_000,
        "the flood hardly ran: {attack}"
    );
    assert_eq!(
        n(&attack, "dropped") + n(&attack, "unnumbered") + n(&attack, "incomplete"),
        0,
        "events lost under custos sched: {attack}"
    );
    assert!(
        in_band.is_empty(),
        "nothing was lost, yet the stream has loss records: {in_band:?}"
    );
    let db = o.join("attack.db");
    let db = db.to_str().unwrap();
    custos(&[
        "ingest",
        "-q",
        "--db",
        db,
        o.join("attack.jsonl").to_str().unwrap(),
    ]);
    let v = "/tmp/reliability/victim";
    let endpoint = format!(
        "127.0.0.1:{}",
        std::fs::read_to_string(o.join("attack.port"))
            .unwrap()
            .trim()
    );
    let names = |dir: &str, file: &str| -> (Vec<String>, Value) {
        let a: Value = serde_json::from_str(&custos(&[
            "query",
            "--db",
            db,
            "--json",
            dir,
            &format!("{v}/{file}"),
        ]))
        .unwrap();
        (
            a["nodes"]
                .as_array()
                .unwrap()
                .iter()
                .map(|n| n["name"].as_str().unwrap_or("").to_string())
                .collect(),
            serde_json::json!({"complete": a["complete"], "losses": a["losses"]}),
        )
    };
    let (behind_archive, _) = names("ancestors", "archive.tar");
    for s in ["id_rsa", "shadow", "db.conf", "wallet"] {
        assert!(
            behind_archive.contains(&format!("{v}/secret/{s}")),
            "the archive does not hold {s}: {behind_archive:?}"
        );
    }
    assert!(
        behind_archive.iter().any(|n| n == "/usr/bin/tar"),
        "{behind_archive:?}"
    );
    let (from_archive, _) = names("descendants", "archive.tar");
    assert!(
        from_archive.contains(&endpoint),
        "the upload to {endpoint} is missing: {from_archive:?}"
    );
    let (behind_download, _) = names("ancestors", "suspicious.sh");
    assert!(
        behind_download.contains(&endpoint),
        "the download from {endpoint} is missing: {behind_download:?}"
    );
    let (behind_overwrite, complete) = names("ancestors", "maintenance.sh");
    assert!(
        behind_overwrite.contains(&format!("{v}/suspicious.sh")),
        "{behind_overwrite:?}"
    );
    assert!(behind_overwrite.contains(&endpoint), "{behind_overwrite:?}");
    assert_eq!(
        complete["complete"], true,
        "nothing was lost, so the answer is complete: {complete}"
    );
}

fn start_orders_protect_the_consumer(o: &Path) {
    for order in START_ORDERS {
        let (s, _) = account(&o.join(format!("{order}.jsonl")));
        let info: Value = serde_json::from_str(
            &std::fs::read_to_string(o.join(format!("{order}.json"))).unwrap(),
        )
        .unwrap();
        assert!(
            n(&s, "produced") > 50_000,
            "{order}: the flood hardly ran: {s}"
        );
        assert_eq!(info["sched_ext_state"], "enabled", "{order}: {info}");
        assert_eq!(
            n(&s, "dropped") + n(&s, "unnumbered"),
            0,
            "{order}: events lost: {s}"
        );
        let marker = std::fs::read_to_string(o.join(format!("{order}.jsonl")))
            .unwrap()
            .lines()
            .any(|l| {
                l.contains("\"path\":\"/tmp/reliability/marker\"")
                    && l.contains("\"critical\":true")
            });
        assert!(marker, "{order}: the marker's open-for-write is missing");
    }
}

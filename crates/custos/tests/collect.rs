//! `custos collect` through the real binary: the command mode, its exit
//! status and stderr account, and a bad --syscalls name. Needs root.

use std::process::Command;

/// One collector per machine: the tests that start one take turns.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The event lines of a recorded stream.
fn events_in(stream: &std::path::Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(stream)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|l| l["type"] == "event")
        .collect()
}

/// A root file system of Debian's static busybox at `root`: `bin/busybox`,
/// a link to it per applet, and `etc/hostname` saying `hostname`.
fn busybox_root(root: &std::path::Path, applets: &[&str], hostname: &str) {
    std::fs::create_dir_all(root.join("bin")).unwrap();
    std::fs::create_dir_all(root.join("etc")).unwrap();
    std::fs::copy("/bin/busybox", root.join("bin/busybox"))
        .expect("Debian's busybox-static (scripts/deps.sh installs it)");
    for applet in applets {
        std::os::unix::fs::symlink("busybox", root.join("bin").join(applet)).unwrap();
    }
    std::fs::write(root.join("etc/hostname"), format!("{hostname}\n")).unwrap();
}

#[test]
fn collect_runs_a_command_records_it_and_balances_the_account() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().canonicalize().unwrap();
    let out = d.join("events.jsonl");
    let target = d.join("written.txt");
    let script = format!("echo hi > {}; sleep 0.6; exit 7", target.display());
    let run = Command::new(env!("CARGO_BIN_EXE_custos"))
        .args([
            "collect",
            "-o",
            out.to_str().unwrap(),
            "--stats-interval",
            "0.2",
            "--",
            "sh",
            "-c",
            &script,
        ])
        .output()
        .unwrap();
    let err = text(&run.stderr);
    assert_eq!(
        run.status.code(),
        Some(7),
        "the command's exit status comes back: {err}"
    );
    assert!(
        err.contains("custos collect: produced") && err.contains("= delivered"),
        "{err}"
    );
    assert!(
        err.contains(" ev/s  produced ") && err.contains("rings used: critical"),
        "periodic stats on stderr: {err}"
    );

    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&out)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let open = lines
        .iter()
        .find(|e| {
            e["type"] == "event"
                && e["syscall"] == "openat"
                && e["path"] == target.to_str().unwrap()
        })
        .expect("the command's open-for-write");
    assert_eq!(open["critical"], true);
    assert!(
        lines
            .iter()
            .any(|l| l["type"] == "stats" && l["final"] == false),
        "periodic stats records"
    );
    // The stream is sealed: the final seal closes it, after the final stats.
    assert_eq!(lines.last().unwrap()["type"], "seal");
    assert_eq!(lines.last().unwrap()["final"], true);
    let last = lines.iter().rev().find(|l| l["type"] != "seal").unwrap();
    assert_eq!(last["type"], "stats");
    assert_eq!(last["final"], true);
    assert_eq!(last["invariant_holds"], true);
    assert_eq!(
        last["produced"].as_u64().unwrap(),
        last["delivered"].as_u64().unwrap() + last["dropped"].as_u64().unwrap()
    );
}

/// `--hold-rings` grows rings too small for the hold's bound on this
/// machine's CPUs; the final stats record says, per ring, whether the
/// rings were large enough (they are not at 4 KiB).
#[test]
fn hold_rings_grow_the_rings_to_the_holds_bound() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let bounded = |grow: bool| -> serde_json::Value {
        let out = dir.path().join(format!("events-{grow}.jsonl"));
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_custos"));
        cmd.args(["collect", "-o", out.to_str().unwrap()]).args([
            "--critical-ring-kb",
            "4",
            "--events-ring-kb",
            "4",
            "--attrs-ring-kb",
            "4",
        ]);
        if grow {
            cmd.arg("--hold-rings");
        }
        let run = cmd.args(["--", "true"]).output().unwrap();
        assert!(run.status.success(), "{}", text(&run.stderr));
        let last = std::fs::read_to_string(&out)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .rfind(|l| l["type"] == "stats")
            .expect("the final stats record");
        assert_eq!(last["final"], true);
        last["hold_bounded"].clone()
    };
    assert_eq!(bounded(false), serde_json::json!([false, false, false]));
    assert_eq!(bounded(true), serde_json::json!([true, true, true]));
}

#[test]
fn an_unknown_syscall_name_is_a_clear_error() {
    let run = Command::new(env!("CARGO_BIN_EXE_custos"))
        .args(["collect", "--syscalls", "execve,conect", "--duration", "1"])
        .output()
        .unwrap();
    let err = text(&run.stderr);
    assert_eq!(run.status.code(), Some(1), "{err}");
    assert!(
        err.contains("unknown syscall name in --syscalls: `conect` (did you mean `connect`?)"),
        "{err}"
    );
    assert!(err.contains("--list-syscalls"), "{err}");
}

/// The consumer's memory is out of khugepaged's reach (a preempted
/// khugepaged holding its mmap lock stalled it under a flood), and the
/// command it runs gets transparent huge pages as the system sets them.
#[test]
fn the_collector_keeps_khugepaged_off_its_memory_but_not_its_commands() {
    let _g = serial();
    let run = Command::new(env!("CARGO_BIN_EXE_custos"))
        .args([
            "collect",
            "-o",
            "/dev/null",
            "--stats-interval",
            "0",
            "--",
            "sh",
            "-c",
        ])
        .arg("grep THP_enabled /proc/$PPID/status /proc/self/status")
        .output()
        .unwrap();
    let (out, err) = (text(&run.stdout), text(&run.stderr));
    assert_eq!(run.status.code(), Some(0), "{out}{err}");
    // One line each, `/proc/PID/status:THP_enabled:<tab>N`: the collector's, then the command's.
    let thp: Vec<&str> = out
        .lines()
        .map(|l| l.rsplit('\t').next().unwrap_or(""))
        .collect();
    assert_eq!(
        thp,
        ["0", "1"],
        "THP off for the collector, on for its command: {out}"
    );
}

/// A recorded stream and its archive verify; the same stream edited, cut or
/// with a batch removed does not, and `custos verify` says where.
#[test]
fn a_sealed_stream_verifies_and_tampering_is_located() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().canonicalize().unwrap();
    let key = d.join("keys/seal.key");
    let out = d.join("events.jsonl");
    let archive = d.join("events.jsonl.zst");
    let run = Command::new(env!("CARGO_BIN_EXE_custos"))
        .args([
            "collect",
            "-o",
            out.to_str().unwrap(),
            "--archive",
            archive.to_str().unwrap(),
        ])
        .args([
            "--seal-key",
            key.to_str().unwrap(),
            "--seal-every",
            "64",
            "--stats-interval",
            "0",
        ])
        .args([
            "--",
            "sh",
            "-c",
            "for i in 1 2 3 4 5 6 7 8; do cat /etc/hostname /etc/passwd > /dev/null; done",
        ])
        .output()
        .unwrap();
    let err = text(&run.stderr);
    assert!(run.status.success(), "{err}");
    assert!(err.contains("made a new seal key"), "{err}");
    // The public key, printed and written beside the key: `--key` takes either.
    let public = std::fs::read_to_string(d.join("keys/seal.pub"))
        .unwrap()
        .trim()
        .to_string();
    assert!(err.contains(&format!("(public key {public}")), "{err}");
    let public_file = d.join("keys/seal.pub").to_str().unwrap().to_string();
    let verify = |path: &std::path::Path, key: Option<&str>| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_custos"));
        cmd.args(["verify", path.to_str().unwrap(), "--json"]);
        if let Some(k) = key {
            cmd.args(["--key", k]);
        }
        let o = cmd.output().unwrap();
        let report: serde_json::Value = serde_json::from_slice(&o.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", text(&o.stderr)));
        (o.status.code(), report)
    };
    for (path, key) in [(&out, &public), (&archive, &public_file)] {
        let (code, r) = verify(path, Some(key));
        assert_eq!(code, Some(0), "{r}");
        assert_eq!(r["intact"], true);
        assert!(r["batches_verified"].as_u64().unwrap() >= 2, "{r}");
    }

    let text_lines: Vec<String> = std::fs::read_to_string(&out)
        .unwrap()
        .lines()
        .map(|l| format!("{l}\n"))
        .collect();
    let seal_at: Vec<usize> = text_lines
        .iter()
        .enumerate()
        .filter(|(_, l)| l.starts_with("{\"type\":\"seal\""))
        .map(|(i, _)| i)
        .collect();
    let tampered = d.join("tampered.jsonl");
    // A path changed in whichever batch first names it: how many lines come
    // before the first `cat` (the shell's exec, its mappings, other CPUs'
    // events) varies from run to run, so it need not be the first batch.
    let first = text_lines
        .iter()
        .position(|l| l.contains("/etc/passwd"))
        .expect("the command's reads are in the stream");
    let batch = seal_at.iter().filter(|&&s| s < first).count();
    let mut edited = text_lines.clone();
    edited[first] = edited[first].replacen("/etc/passwd", "/etc/passwx", 1);
    std::fs::write(&tampered, edited.concat()).unwrap();
    let (code, r) = verify(&tampered, None);
    assert_eq!(code, Some(3), "{r}");
    assert_eq!(r["findings"][0]["kind"], "altered", "{r}");
    assert_eq!(r["findings"][0]["batch"], batch, "{r}");
    // The second batch removed, lines and seal.
    let removed: String = text_lines
        .iter()
        .enumerate()
        .filter(|(i, _)| *i <= seal_at[0] || *i > seal_at[1])
        .map(|(_, l)| l.as_str())
        .collect();
    std::fs::write(&tampered, removed).unwrap();
    let (code, r) = verify(&tampered, None);
    assert_eq!(code, Some(3));
    assert_eq!(
        (
            r["findings"][0]["kind"].as_str(),
            r["findings"][0]["batch"].as_u64()
        ),
        (Some("deleted"), Some(1)),
        "{r}"
    );
    // The tail cut off.
    std::fs::write(&tampered, text_lines[..seal_at[1] + 1].concat()).unwrap();
    let (code, r) = verify(&tampered, None);
    assert_eq!(code, Some(3));
    assert_eq!(r["findings"][0]["kind"], "truncated", "{r}");
    // Sealed by another key than the one given (another host's, say).
    let run = Command::new(env!("CARGO_BIN_EXE_custos"))
        .args([
            "collect",
            "-o",
            "/dev/null",
            "--duration",
            "0.2",
            "--stats-interval",
            "0",
        ])
        .args(["--seal-key", d.join("other.key").to_str().unwrap()])
        .output()
        .unwrap();
    let err = text(&run.stderr);
    assert!(run.status.success(), "{err}");
    let other = std::fs::read_to_string(d.join("other.pub"))
        .unwrap()
        .trim()
        .to_string();
    assert_ne!(other, public);
    let (code, r) = verify(&out, Some(&other));
    assert_eq!(code, Some(3));
    assert_eq!(r["findings"][0]["kind"], "foreign-key", "{r}");
    // A key that is not one is an error, not a verdict.
    let o = Command::new(env!("CARGO_BIN_EXE_custos"))
        .args(["verify", out.to_str().unwrap(), "--key", "abc"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o.stderr).contains("--key"), "{}", text(&o.stderr));

    // The store seals its own batches with the same key: verified, then a
    // loss hidden and a batch's bytes altered.
    let db = d.join("store.db");
    let run = Command::new(env!("CARGO_BIN_EXE_custos"))
        .args([
            "ingest",
            "-q",
            "--batch",
            "100",
            "--seal-key",
            key.to_str().unwrap(),
            "--db",
            db.to_str().unwrap(),
            out.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(run.status.success(), "{}", text(&run.stderr));
    let verify_db = || {
        let o = Command::new(env!("CARGO_BIN_EXE_custos"))
            .args([
                "verify",
                "--json",
                "--key",
                &public,
                "--db",
                db.to_str().unwrap(),
            ])
            .output()
            .unwrap();
        let r: serde_json::Value = serde_json::from_slice(&o.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", text(&o.stderr)));
        (o.status.code(), r)
    };
    let (code, r) = verify_db();
    assert_eq!(code, Some(0), "{r}");
    assert!(
        r[0]["report"]["batches_verified"].as_u64().unwrap() >= 2,
        "{r}"
    );
    let conn = custos_store::rusqlite::Connection::open(&db).unwrap();
    conn.execute_batch("UPDATE raw_segments SET data = CAST(data || x'00' AS BLOB) WHERE segment = (SELECT MIN(segment) FROM raw_segments)").unwrap();
    drop(conn);
    let (code, r) = verify_db();
    assert_eq!(code, Some(3));
    assert_eq!(
        (
            r[0]["report"]["findings"][0]["kind"].as_str(),
            r[0]["report"]["findings"][0]["batch"].as_u64()
        ),
        (Some("altered"), Some(0)),
        "{r}"
    );
}

/// A process in a real podman container is attributed to it — container id,
/// runtime, name and image — and the
/// host's processes (podman itself) are not. The image is built here from
/// Debian's static busybox (no registry is reachable).
#[test]
fn events_in_a_podman_container_carry_the_container() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().canonicalize().unwrap();
    let root = d.join("rootfs");
    busybox_root(&root, &["sh", "cat", "sleep"], "inside");
    let image = "localhost/custos-test-busybox:1";
    let import = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "tar -C {} -c . | podman import - {image}",
            root.display()
        ))
        .output()
        .expect("podman (scripts/deps.sh installs it)");
    assert!(
        import.status.success(),
        "podman import: {}",
        text(&import.stderr)
    );

    let name = format!("custos-test-{}", std::process::id());
    let cidfile = d.join("cid");
    let out = d.join("events.jsonl");
    let mut podman = vec!["podman".to_string()];
    // crun refuses a host with cgroup v1 controllers mounted (hybrid); runc copes.
    if Command::new("runc")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        podman.extend(["--runtime".into(), "runc".into()]);
    }
    podman.extend(
        [
            "run",
            "--network",
            "none",
            "--ulimit",
            "nofile=1024:1024",
            "--ulimit",
            "nproc=1024:1024",
            "--cidfile",
            cidfile.to_str().unwrap(),
            "--name",
            &name,
            image,
            "/bin/sh",
            "-c",
            // The first read at once, the second after podman had time to answer.
            "cat /etc/hostname; sleep 1.5; cat /etc/hostname",
        ]
        .map(String::from),
    );
    let db = d.join("store.db");
    // The host reads its own /etc/hostname first: the same path, another file.
    let run = Command::new(env!("CARGO_BIN_EXE_custos"))
        .args([
            "collect",
            "-o",
            out.to_str().unwrap(),
            "--db",
            db.to_str().unwrap(),
            "--stats-interval",
            "0",
            "--no-seal",
            "--",
        ])
        .args([
            "sh",
            "-c",
            "cat /etc/hostname >/dev/null && exec \"$@\"",
            "sh",
        ])
        .args(&podman)
        .output()
        .unwrap();
    let _ = Command::new("podman").args(["rm", "-f", &name]).output();
    // The image goes too: each run imports it anew (left, they piled up untagged).
    let _ = Command::new("podman").args(["rmi", "-f", image]).output();
    let err = text(&run.stderr);
    assert!(run.status.success(), "{err}");
    let cid = std::fs::read_to_string(&cidfile)
        .unwrap()
        .trim()
        .to_string();
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&out)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let events = || lines.iter().filter(|e| e["type"] == "event");
    let host_mnt_ns = std::fs::metadata("/proc/self/ns/mnt")
        .map(|m| std::os::unix::fs::MetadataExt::ino(&m))
        .unwrap();

    let reads: Vec<&serde_json::Value> = events()
        .filter(|e| {
            e["syscall"] == "openat"
                && e["path"] == "/etc/hostname"
                && e["comm"] == "cat"
                && e["mnt_ns"] != host_mnt_ns
        })
        .collect();
    assert_eq!(
        reads.len(),
        2,
        "the container's two opens of /etc/hostname: {reads:?}"
    );
    // Relative to the container's root, which the events name: not the host's.
    use std::os::unix::fs::MetadataExt;
    let host_root = std::fs::metadata("/").unwrap();
    for r in &reads {
        assert_eq!(r["container"]["id"], cid.as_str(), "{r}");
        assert_eq!(r["container"]["runtime"], "podman", "{r}");
        let (dev, ino) = (
            r["root_dev"].as_u64().expect("root_dev"),
            r["root_inode"].as_u64().expect("root_inode"),
        );
        let host = (
            libc::major(host_root.dev()) as u64,
            libc::minor(host_root.dev()) as u64,
            host_root.ino(),
        );
        assert_ne!((dev >> 20, dev & 0xfffff, ino), host, "{r}");
    }
    let host_read = events()
        .find(|e| {
            e["syscall"] == "openat"
                && e["path"] == "/etc/hostname"
                && e["comm"] == "cat"
                && e.get("container").is_none()
        })
        .expect("the host's read of its /etc/hostname");
    assert!(
        host_read.get("root_dev").is_none() && host_read.get("root_inode").is_none(),
        "{host_read}"
    );
    // Named from the first: the watch of the cgroup tree read podman's own
    // files when the container's cgroup was made, before its first process ran.
    for r in &reads {
        assert_eq!(r["container"]["name"], name.as_str(), "{r}");
        assert_eq!(r["container"]["image"], image, "{r}");
    }
    // The shell's sleep is the container's too; podman's own events are not.
    assert!(events().any(|e| e["comm"] == "sleep" && e["container"]["id"] == cid.as_str()));
    let host = events().filter(|e| e["comm"] == "podman").count();
    assert!(host > 0, "podman's own events were recorded");
    assert!(
        events()
            .filter(|e| e["comm"] == "podman")
            .all(|e| e.get("container").is_none()),
        "podman runs on the host"
    );

    // The store keeps the two files apart: the host's /etc/hostname was
    // read by the host's cat alone, the container's (NAME:/etc/hostname)
    // by the container's cat alone; and it narrows an answer to a container.
    let who_touched = |args: &[&str]| -> serde_json::Value {
        let q = Command::new(env!("CARGO_BIN_EXE_custos"))
            .args(["query", "--db", db.to_str().unwrap(), "--json"])
            .args(args)
            .output()
            .unwrap();
        assert!(q.status.success(), "{}", text(&q.stderr));
        serde_json::from_slice(&q.stdout).unwrap()
    };
    let readers = |a: &serde_json::Value| -> Vec<Option<String>> {
        let procs = a["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|n| n["kind"] == "process" && n["attrs"]["argv"][0] == "cat");
        procs
            .map(|n| n["attrs"]["container"].as_str().map(String::from))
            .collect()
    };
    let host = who_touched(&["who-touched", "/etc/hostname"]);
    assert!(
        !readers(&host).is_empty() && readers(&host).iter().all(Option::is_none),
        "only the host's cat: {host}"
    );
    let inside = who_touched(&["who-touched", &format!("{name}:/etc/hostname")]);
    assert!(
        !readers(&inside).is_empty()
            && readers(&inside)
                .iter()
                .all(|c| c.as_deref() == Some(cid.as_str())),
        "only the container's cat: {inside}"
    );
    let by_id = who_touched(&["who-touched", &format!("{}:/etc/hostname", &cid[..12])]);
    assert_eq!(inside["nodes"], by_id["nodes"], "a name or an id prefix");
    let a = who_touched(&[
        "--container",
        &name,
        "who-touched",
        &format!("{name}:/etc/hostname"),
    ]);
    assert_eq!(a["containers"][&cid], name.as_str(), "{a}");
    assert!(!a["rows"].as_array().unwrap().is_empty(), "{a}");
}

/// Paths are relative to their process's root (docs/containers.md): a
/// chrooted process's /etc/hostname is the file under its root, which its
/// events name, whether it opened it by an absolute path or relative to its
/// working directory; the host's processes name no root, and the store
/// keeps the two files apart.
#[test]
fn a_chrooted_process_names_its_root_and_its_files_stay_apart() {
    use std::os::unix::fs::MetadataExt;
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().canonicalize().unwrap();
    let jail = d.join("jail");
    busybox_root(&jail, &[], "jailed");
    let out = d.join("events.jsonl");
    let db = d.join("store.db");
    let j = jail.display();
    let script = format!(
        "cat /etc/hostname >/dev/null; chroot {j} /bin/busybox cat /etc/hostname >/dev/null; \
         chroot {j} /bin/busybox sh -c 'cd /etc && /bin/busybox cat hostname' >/dev/null"
    );
    let run = Command::new(env!("CARGO_BIN_EXE_custos"))
        .args([
            "collect",
            "--no-seal",
            "--stats-interval",
            "0",
            "-o",
            out.to_str().unwrap(),
            "--db",
            db.to_str().unwrap(),
            "--",
        ])
        .args(["sh", "-c", &script])
        .output()
        .unwrap();
    assert!(run.status.success(), "{}", text(&run.stderr));
    let events = events_in(&out);
    let jail_root = std::fs::metadata(&jail).unwrap();
    let kernel_dev =
        ((libc::major(jail_root.dev()) as u64) << 20) | libc::minor(jail_root.dev()) as u64;
    let opens = |comm: &str| -> Vec<&serde_json::Value> {
        events
            .iter()
            .filter(|e| {
                e["syscall"] == "openat" && e["comm"] == comm && e["ret"].as_i64() >= Some(0)
            })
            .collect()
    };
    let jailed: Vec<_> = opens("busybox")
        .into_iter()
        .filter(|e| e["path"] == "/etc/hostname")
        .collect();
    assert_eq!(
        jailed.len(),
        2,
        "the jail's two opens, by absolute and by relative path: {:?}",
        opens("busybox")
    );
    for e in &jailed {
        assert_eq!(
            (e["root_dev"].as_u64(), e["root_inode"].as_u64()),
            (Some(kernel_dev), Some(jail_root.ino())),
            "{e}"
        );
    }
    assert!(
        events.iter().all(|e| !e["path"]
            .as_str()
            .is_some_and(|p| p.starts_with(&j.to_string()) && e["comm"] == "busybox")),
        "named from the host's root"
    );
    let host = opens("cat")
        .into_iter()
        .find(|e| e["path"] == "/etc/hostname")
        .expect("the host's open");
    assert!(host.get("root_dev").is_none(), "{host}");

    let query = |spec: &str| -> Vec<String> {
        let q = Command::new(env!("CARGO_BIN_EXE_custos"))
            .args([
                "query",
                "--db",
                db.to_str().unwrap(),
                "--json",
                "who-touched",
                spec,
            ])
            .output()
            .unwrap();
        assert!(q.status.success(), "{spec}: {}", text(&q.stderr));
        let a: serde_json::Value = serde_json::from_slice(&q.stdout).unwrap();
        a["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|n| n["kind"] == "process")
            .map(|n| n["attrs"]["comm"].as_str().unwrap_or("").to_string())
            .collect()
    };
    let host_readers = query("/etc/hostname");
    assert!(
        host_readers.contains(&"cat".to_string()) && !host_readers.contains(&"busybox".to_string()),
        "{host_readers:?}"
    );
    let jail_spec = format!(
        "root:{}:{}:{}:/etc/hostname",
        kernel_dev >> 20,
        kernel_dev & 0xfffff,
        jail_root.ino()
    );
    let jail_readers = query(&jail_spec);
    assert!(
        !jail_readers.is_empty() && jail_readers.iter().all(|c| c == "busybox"),
        "{jail_readers:?}"
    );
}

/// Scripted chains whose grouping is known (docs/workflows.md): a shell
/// with job control (under `script`, which gives it a terminal) runs two
/// pipelines, each its own workflow, and a `setsid nsenter` chain (clone →
/// setsid → execve → setns → execve → openat), a workflow of its own whose
/// cause is the fork that made it.
///
/// `script` starts `bash -m` through the user's `$SHELL`, which either
/// becomes it (bash execs a lone command) or forks it (dash); forked, `bash
/// -m` makes a group, so a workflow, of its own. Both are right, so the
/// test runs both and finds the job shell by what it did: fork the jobs.
#[test]
fn scripted_chains_become_the_workflows_they_are() {
    let _g = serial();
    for shell in ["/bin/bash", "/bin/sh"] {
        scripted_chains_under(shell);
    }
}

fn scripted_chains_under(login_shell: &str) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("events.jsonl");
    let jobs = "cat /etc/hostname | wc -c; head -c 3 /etc/passwd | od -c; setsid -w nsenter --uts=/proc/self/ns/uts -- cat /etc/hostname";
    let run = Command::new(env!("CARGO_BIN_EXE_custos"))
        .args([
            "collect",
            "--no-seal",
            "-o",
            out.to_str().unwrap(),
            "--",
            "script",
            "-qec",
        ])
        .arg(format!("bash -m -c '{jobs}'"))
        .arg("/dev/null")
        .env("SHELL", login_shell)
        .output()
        .unwrap();
    let err = text(&run.stderr);
    assert!(run.status.success(), "{err}");
    let events = events_in(&out);
    let by_id: std::collections::HashMap<u64, &serde_json::Value> = events
        .iter()
        .map(|e| (e["id"].as_u64().unwrap(), e))
        .collect();
    // Every event has a workflow, and each workflow's id is the event that started it.
    for e in &events {
        let w = e["workflow"]
            .as_u64()
            .unwrap_or_else(|| panic!("no workflow: {e}"));
        assert_eq!(by_id[&w]["workflow"].as_u64(), Some(w), "{e}");
    }
    let exec_of = |comm: &str, arg: &str| {
        events
            .iter()
            .find(|e| {
                e["syscall"] == "execve"
                    && e["ret"] == 0
                    && e["comm"] == comm
                    && e["argv"].to_string().contains(arg)
            })
            .unwrap_or_else(|| panic!("no exec of {comm} {arg}"))
    };
    let wf = |e: &serde_json::Value| e["workflow"].as_u64().unwrap();
    let (cat1, wc) = (exec_of("cat", "/etc/hostname"), exec_of("wc", "-c"));
    let (head, od) = (exec_of("head", "/etc/passwd"), exec_of("od", "-c"));
    let nsenter = exec_of("nsenter", "--uts");
    // The job shell: the bash that forked the first job's processes.
    let fork_of = |pid: &serde_json::Value| {
        events
            .iter()
            .find(|e| e["syscall"] == "sched:process_fork" && &e["child_pid"] == pid)
            .unwrap_or_else(|| panic!("no fork of {pid}"))
    };
    let shell = fork_of(&cat1["pid"]);
    assert_eq!(shell["comm"], "bash", "{shell}");
    assert_eq!(
        fork_of(&head["pid"])["pid"],
        shell["pid"],
        "one shell runs both jobs"
    );
    assert_eq!(wf(cat1), wf(wc), "one pipeline, one workflow");
    assert_eq!(wf(head), wf(od), "one pipeline, one workflow");
    let distinct: std::collections::HashSet<u64> =
        [wf(shell), wf(cat1), wf(head), wf(nsenter)].into();
    assert_eq!(
        distinct.len(),
        4,
        "the shell and each job apart: {distinct:?}"
    );
    // Each job came from the shell's workflow, through the fork of its first process.
    for job in [wf(cat1), wf(head)] {
        let start = by_id[&job];
        assert_eq!(
            start["workflow_parent"].as_u64(),
            Some(wf(shell)),
            "{login_shell}: {start}"
        );
        let fork = by_id[&start["workflow_cause"].as_u64().expect("cause")];
        assert_eq!(fork["syscall"], "sched:process_fork");
        assert_eq!(fork["child_pid"], start["pid"]);
        assert_eq!(fork["pid"], shell["pid"]);
    }
    // A forked `bash -m` made its own group: its workflow starts at that
    // setpgid and comes from the login shell's.
    let shell_start = by_id[&wf(shell)];
    if shell_start["pid"] == shell["pid"] && shell_start["syscall"] == "setpgid" {
        assert_eq!(shell_start["args"]["pgid"], shell["pid"], "{shell_start}");
        let login = by_id[&shell_start["workflow_parent"].as_u64().expect("parent")];
        assert_eq!(
            login["syscall"], "setsid",
            "the login shell's workflow is script's session: {login}"
        );
    }
    // The chain: everything from setsid to the config-file open, in order, is one workflow.
    let chain_wf = wf(nsenter);
    let chain: Vec<&serde_json::Value> = events.iter().filter(|e| wf(e) == chain_wf).collect();
    let first = chain[0];
    assert_eq!(
        (first["syscall"].as_str(), first["id"].as_u64()),
        (Some("setsid"), Some(chain_wf))
    );
    let cause = by_id[&first["workflow_cause"].as_u64().expect("cause")];
    assert_eq!(
        (cause["syscall"].as_str(), &cause["child_pid"]),
        (Some("sched:process_fork"), &first["pid"])
    );
    let pos = |pred: &dyn Fn(&serde_json::Value) -> bool| {
        chain.iter().position(|e| pred(e)).expect("in the chain")
    };
    let steps = [
        pos(&|e| e["syscall"] == "execve" && e["comm"] == "nsenter"),
        pos(&|e| e["syscall"] == "setns"),
        pos(&|e| e["syscall"] == "execve" && e["comm"] == "cat"),
        pos(&|e| e["syscall"] == "openat" && e["comm"] == "cat" && e["path"] == "/etc/hostname"),
    ];
    assert!(
        steps.windows(2).all(|w| w[0] < w[1]),
        "clone → setsid → execve → setns → execve → openat: {steps:?}"
    );

    // The store lists the chain by the pid that ran it, led by its cause.
    let db = dir.path().join("store.db");
    let ingest = Command::new(env!("CARGO_BIN_EXE_custos"))
        .args(["ingest", "-q", "--db"])
        .arg(&db)
        .arg(&out)
        .output()
        .unwrap();
    assert!(ingest.status.success(), "{}", text(&ingest.stderr));
    let pid = format!("pid:{}", first["pid"]);
    let q = Command::new(env!("CARGO_BIN_EXE_custos"))
        .args(["query", "--json", "--db"])
        .arg(&db)
        .args(["workflow", &pid, "--limit", "0"])
        .output()
        .unwrap();
    assert!(q.status.success(), "{}", text(&q.stderr));
    let listings: serde_json::Value = serde_json::from_slice(&q.stdout).unwrap();
    let l = &listings[0];
    assert_eq!(l["workflow"]["id"].as_u64(), Some(chain_wf));
    assert_eq!(l["cause"]["id"], cause["id"]);
    let listed: Vec<u64> = l["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_u64().unwrap())
        .collect();
    let recorded: Vec<u64> = chain.iter().map(|e| e["id"].as_u64().unwrap()).collect();
    assert_eq!(
        listed, recorded,
        "the store lists the chain as the stream has it"
    );
}

/// SIGTERM in the middle of a flood: the collector drains and accounts for
/// everything (produced = delivered + dropped in its final stats and on
/// stderr) and the file ends with a whole line, the final seal.
#[test]
fn sigterm_mid_flood_drains_accounts_and_ends_on_a_whole_line() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("events.jsonl");
    let mut collector = Command::new(env!("CARGO_BIN_EXE_custos"))
        .args(["collect", "--stats-interval", "0", "-o"])
        .arg(&out)
        .args(["--events-ring-kb", "64", "--attrs-ring-kb", "64"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Attached: the stream has begun.
    let t0 = std::time::Instant::now();
    while std::fs::metadata(&out).map_or(0, |m| m.len()) == 0 {
        assert!(t0.elapsed().as_secs() < 60, "the collector never started");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let flood: Vec<_> = (0..4)
        .map(|_| {
            Command::new("dd")
                .args(["if=/dev/zero", "of=/dev/null", "bs=1", "count=100000000"])
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    // Mid-flood: the stream is growing fast.
    let grown = std::fs::metadata(&out).unwrap().len() + (8 << 20);
    while std::fs::metadata(&out).unwrap().len() < grown {
        assert!(
            t0.elapsed().as_secs() < 120,
            "the flood never reached the stream"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let term = Command::new("kill")
        .args(["-TERM", &collector.id().to_string()])
        .status()
        .unwrap();
    assert!(term.success());
    let status = collector.wait().unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut collector.stderr.take().unwrap(), &mut err).unwrap();
    for mut p in flood {
        let _ = p.kill();
        let _ = p.wait();
    }
    assert_eq!(status.code(), Some(0), "{err}");
    let n = |after: &str| -> u64 {
        err.split(after)
            .nth(1)
            .unwrap_or_else(|| panic!("{after}: {err}"))
            .split(|c: char| !c.is_ascii_digit())
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    let (produced, delivered, dropped) = (
        n("custos collect: produced "),
        n(" = delivered "),
        n(" + dropped "),
    );
    assert_eq!(produced, delivered + dropped, "{err}");
    assert!(produced > 100_000, "a flood: {err}");
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(text.ends_with('\n'), "the last line is whole");
    let last_lines: Vec<serde_json::Value> = text
        .lines()
        .rev()
        .take(3)
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert_eq!(last_lines[0]["type"], "seal");
    assert_eq!(last_lines[0]["final"], true);
    let stats = text
        .lines()
        .rev()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|l| l["type"] == "stats")
        .unwrap();
    assert_eq!(stats["final"], true);
    assert_eq!(stats["invariant_holds"], true);
    assert_eq!(stats["produced"].as_u64().unwrap(), produced);
    assert_eq!(
        stats["produced"].as_u64().unwrap(),
        stats["delivered"].as_u64().unwrap() + stats["dropped"].as_u64().unwrap()
    );
}

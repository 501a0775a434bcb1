//! The collector on the running kernel: a scripted workload, bad input, and
//! the exact loss accounting under overload. Needs root.

mod common;

use std::collections::{BTreeSet, HashMap};
use std::io::Read;
use std::net::TcpListener;

use common::*;
use custos_collector::Options;
use serde_json::Value;

fn find<'a>(run: &'a Run, what: &str, pred: impl Fn(&Value) -> bool) -> &'a Value {
    run.events()
        .find(|e| pred(e))
        .unwrap_or_else(|| panic!("no event for {what}"))
}

#[test]
fn scripted_workload_is_recorded_with_paths_pids_argv_and_returns() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().canonicalize().unwrap();
    let d = d.to_str().unwrap().to_string();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let acceptor = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut buf = String::new();
        s.read_to_string(&mut buf).unwrap();
        buf
    });
    let out = d.clone() + "/events.jsonl";
    let script = format!(
        "cd {d} && echo hello > a.txt && mv a.txt b.txt && rm b.txt && \
         /bin/echo provenance 'two words' >/dev/null && echo piped | cat >/dev/null && \
         exec 3<>/dev/tcp/127.0.0.1/{port} && echo ping >&3"
    );
    // Only what the assertions need: on a shared 2-core machine the whole
    // set would also record every compile running next to the test.
    let opts = Options {
        syscalls: Some("execve,clone,clone3,fork,vfork,openat,write,rename,renameat,renameat2,unlink,unlinkat,socket,connect,pipe,pipe2".into()),
        ..quiet_options()
    };
    let run = run_collector(opts, out.as_ref(), || assert!(sh(&script).success()));
    assert_eq!(acceptor.join().unwrap(), "ping\n");

    assert_eq!(
        run.lines[0]["type"], "boot",
        "the stream starts with its boot"
    );
    assert_causal_order(&run);
    assert_eq!(
        run.lines[0]["boot_id"],
        std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
            .unwrap()
            .trim()
    );
    let me = std::process::id() as u64;
    assert!(
        run.events().all(|e| e["pid"] != me),
        "the collector's own process is excluded"
    );

    let shell = find(&run, "the workload shell's exec", |e| {
        e["syscall"] == "execve"
            && e["ret"] == 0
            && e["argv"]
                .as_array()
                .is_some_and(|a| a.iter().any(|x| x.as_str() == Some(script.as_str())))
    });
    assert_eq!(shell["ret"], 0);
    assert_eq!(shell["critical"], true);
    let p = shell["pid"].clone();

    let a_txt = format!("{d}/a.txt");
    let b_txt = format!("{d}/b.txt");
    let open = find(&run, "open a.txt for writing", |e| {
        e["pid"] == p && e["syscall"] == "openat" && e["path"] == a_txt.as_str()
    });
    assert!(open["ret"].as_i64().unwrap() >= 0);
    assert_eq!(open["fd"], open["ret"]);
    assert_eq!(
        open["critical"], true,
        "open for write goes on the reserved ring"
    );
    assert_ne!(
        open["args"]["flags"].as_u64().unwrap() & libc::O_CREAT as u64,
        0
    );
    let write = find(&run, "write to a.txt", |e| {
        e["pid"] == p && e["syscall"] == "write" && e["path"] == a_txt.as_str()
    });
    assert_eq!(write["ret"], 6);
    assert_eq!(
        write["first"], true,
        "the first write of a file is the provenance edge"
    );

    // fork + exec of mv, with the parent/child link on both sides.
    let mv = find(&run, "exec of mv", |e| {
        e["syscall"] == "execve" && e["argv"] == serde_json::json!(["mv", "a.txt", "b.txt"])
    });
    assert_eq!(mv["ppid"], p);
    assert_eq!(mv["path"], "/usr/bin/mv");
    let is_clone =
        |e: &Value| ["clone", "clone3", "fork", "vfork"].contains(&e["syscall"].as_str().unwrap());
    let clone = find(&run, "clone of mv", |e| {
        e["pid"] == p && e["child_pid"] == mv["pid"] && is_clone(e)
    });
    assert_eq!(clone["ret"], mv["pid"]);
    // The birth itself, recorded before the child could run: it precedes
    // everything the child did, even when the parent's call returns later.
    let birth = run
        .lines
        .iter()
        .position(|e| e["syscall"] == "sched:process_fork" && e["child_pid"] == mv["pid"]);
    let birth = birth.expect("the birth of mv is recorded");
    assert_eq!(run.lines[birth]["pid"], p);
    assert_eq!(run.lines[birth]["critical"], true);
    let first_of_child = run
        .lines
        .iter()
        .position(|e| e["pid"] == mv["pid"])
        .unwrap();
    assert!(
        birth < first_of_child,
        "the birth comes after the child's first event"
    );
    let rename = find(&run, "rename", |e| {
        e["pid"] == mv["pid"] && e["syscall"].as_str().unwrap().starts_with("rename")
    });
    assert_eq!(rename["path"], a_txt.as_str());
    assert_eq!(rename["path2"], b_txt.as_str());
    assert_eq!(rename["ret"], 0);
    assert_eq!(rename["critical"], true);

    let unlink = find(&run, "unlink", |e| {
        e["syscall"].as_str().unwrap().starts_with("unlink") && e["path"] == b_txt.as_str()
    });
    assert_eq!(unlink["ret"], 0);
    assert_eq!(unlink["ppid"], p);

    let echo = find(&run, "exec of echo", |e| {
        e["syscall"] == "execve"
            && e["argv"] == serde_json::json!(["/bin/echo", "provenance", "two words"])
    });
    assert_eq!(echo["ppid"], p);
    assert_eq!(echo["ret"], 0);
    find(&run, "clone of echo", |e| {
        e["pid"] == p && e["child_pid"] == echo["pid"] && is_clone(e)
    });

    // A pipe: both fds, named like /proc/PID/fd names it, and the write into it.
    let pipe = find(&run, "pipe", |e| {
        e["pid"] == p && e["syscall"].as_str().unwrap().starts_with("pipe")
    });
    assert_eq!(pipe["ret"], 0);
    let (r, w) = (
        pipe["args"]["read_fd"].as_i64().unwrap(),
        pipe["args"]["write_fd"].as_i64().unwrap(),
    );
    assert!(r >= 0 && w >= 0 && r != w);
    let name = pipe["path"].as_str().unwrap();
    assert!(name.starts_with("pipe:[") && name.ends_with(']'), "{name}");
    let into = find(&run, "write into the pipe", |e| {
        e["syscall"] == "write" && e["path"] == name
    });
    assert_eq!(into["ppid"], p);
    assert_eq!(into["inode"], pipe["inode"]);

    // bash resolves the address through libc first, which may connect to
    // nscd's unix socket before it: look for the TCP connect itself.
    let tcp = format!("127.0.0.1:{port}");
    let connect = find(&run, "connect to the listener", |e| {
        e["pid"] == p && e["syscall"] == "connect" && e["addr"] == tcp.as_str()
    });
    assert_eq!(connect["ret"], 0);
    assert_eq!(connect["critical"], true);

    // Every record carries the context the schema promises.
    for key in [
        "id",
        "cpu",
        "seq",
        "time_ns",
        "tid",
        "uid",
        "gid",
        "euid",
        "egid",
        "comm",
        "category",
        "mnt_ns",
        "pid_ns",
        "cgroup_id",
    ] {
        assert!(!connect[key].is_null(), "{key} missing");
    }
    assert_eq!(
        connect["id"].as_u64().unwrap(),
        (connect["cpu"].as_u64().unwrap() << 48) | connect["seq"].as_u64().unwrap()
    );

    let s = &run.summary;
    assert!(s.invariant_holds);
    assert_eq!(s.produced, s.delivered + s.dropped);
    let stats = run.final_stats();
    assert_eq!(stats["produced"].as_u64().unwrap(), s.produced);
    assert_eq!(stats["invariant_holds"], true);
}

/// Both ends of a TCP connection name its 4-tuple: connect's `addr` is the
/// server's and `laddr` the client's own; accept's `addr` is the client's and
/// `laddr` the server's. A non-blocking connect (-EINPROGRESS) has its port
/// already; a refused one has none. This is what joins two hosts' streams.
#[test]
fn both_ends_of_a_connection_name_its_four_tuple() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("events.jsonl");
    let script = dir.path().join("peers.py");
    let said = dir.path().join("said.txt");
    // One process plays both ends (the test's own process is not recorded).
    std::fs::write(
        &script,
        r#"
import errno, socket, sys
said = []
def pair(family, host, blocking):
    srv = socket.socket(family)
    srv.bind((host, 0))
    srv.listen(4)
    port = srv.getsockname()[1]
    c = socket.socket(family)
    c.setblocking(blocking)
    r = c.connect_ex((host, port))
    assert r in (0, errno.EINPROGRESS), r
    a, peer = srv.accept()
    said.append("%s %d %s %d %d" % (host, port, host, c.getsockname()[1], r))
    return srv, c, a
keep = [pair(socket.AF_INET, "127.0.0.1", False), pair(socket.AF_INET6, "::1", True)]
# Refused: nothing listens on a port just released.
s = socket.socket(); s.bind(("127.0.0.1", 0)); dead = s.getsockname()[1]; s.close()
assert socket.socket().connect_ex(("127.0.0.1", dead)) == errno.ECONNREFUSED
said.append("refused %d" % dead)
open(sys.argv[1], "w").write("\n".join(said) + "\n")
"#,
    )
    .unwrap();
    let opts = Options {
        syscalls: Some("socket,bind,listen,connect,accept,accept4".into()),
        ..quiet_options()
    };
    let run = run_collector(opts, &out, || {
        assert!(sh(&format!("python3 {} {}", script.display(), said.display())).success())
    });
    let said = std::fs::read_to_string(&said).unwrap();
    assert!(
        said.lines()
            .next()
            .unwrap()
            .ends_with(&format!(" {}", libc::EINPROGRESS)),
        "the non-blocking connect is in progress: {said}"
    );
    let lines: Vec<&str> = said.lines().collect();
    let name = |host: &str, port: &str| {
        if host.contains(':') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        }
    };
    for line in &lines[..2] {
        let f: Vec<&str> = line.split(' ').collect();
        let (server, client) = (name(f[0], f[1]), name(f[2], f[3]));
        let connect = find(&run, &format!("connect to {server}"), |e| {
            e["syscall"] == "connect" && e["addr"] == server.as_str()
        });
        assert_eq!(
            connect["laddr"],
            client.as_str(),
            "the client's own address: {connect}"
        );
        // What connect_ex returned, as the kernel's negative errno.
        assert_eq!(
            connect["ret"].as_i64().unwrap(),
            -f[4].parse::<i64>().unwrap(),
            "{connect}"
        );
        let accept = find(&run, &format!("accept on {server}"), |e| {
            e["syscall"].as_str().unwrap().starts_with("accept") && e["laddr"] == server.as_str()
        });
        assert_eq!(
            accept["addr"],
            client.as_str(),
            "the accepted peer is the connecting client: {accept}"
        );
        assert!(accept["ret"].as_i64().unwrap() >= 0);
    }
    let dead = format!("127.0.0.1:{}", lines[2].strip_prefix("refused ").unwrap());
    let refused = find(&run, "the refused connect", |e| {
        e["syscall"] == "connect" && e["addr"] == dead.as_str()
    });
    assert_eq!(refused["ret"].as_i64().unwrap(), -libc::ECONNREFUSED as i64);
    assert!(
        refused["laddr"].is_null(),
        "a refused connect has no port of its own: {refused}"
    );
    assert!(run.summary.invariant_holds);
}

#[test]
fn long_paths_and_argv_are_truncated_with_a_flag_not_lost() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("events.jsonl");
    let component = "c".repeat(200);
    let long_path = format!("/nonexistent{}", format!("/{component}").repeat(8)); // ~1600 bytes
    let big_arg = "a".repeat(700); // beyond one argument's capture limit
    let many: Vec<String> = (0..80).map(|i| format!("arg{i:03}")).collect(); // beyond the argument count
    let script = format!(
        "cat {long_path} 2>/dev/null; /bin/true custos-argv {big_arg} {} ; true",
        many.join(" ")
    );
    let opts = Options {
        syscalls: Some("execve,openat".into()),
        ..quiet_options()
    };
    let run = run_collector(opts, &out, || {
        sh(&script);
    });
    let open = find(&run, "open of the long path", |e| {
        e["comm"] == "cat"
            && e["syscall"] == "openat"
            && e["path"]
                .as_str()
                .is_some_and(|p| p.starts_with("/nonexistent/ccc"))
    });
    assert!(open["ret"].as_i64().unwrap() < 0);
    assert_eq!(open["truncated"], serde_json::json!(["path"]));
    let path = open["path"].as_str().unwrap();
    assert!(
        path.len() >= 1000 && long_path.starts_with(path),
        "kept the first bytes: {} of {}",
        path.len(),
        long_path.len()
    );

    let exec = find(&run, "exec with oversized argv", |e| {
        e["syscall"] == "execve"
            && e["argv"]
                .as_array()
                .is_some_and(|a| a.len() > 1 && a[1] == "custos-argv")
    });
    assert!(exec["truncated"]
        .as_array()
        .unwrap()
        .contains(&Value::from("argv")));
    let argv = exec["argv"].as_array().unwrap();
    assert_eq!(argv[0], "/bin/true");
    assert!(
        argv[2].as_str().unwrap().len() >= 500 && big_arg.starts_with(argv[2].as_str().unwrap())
    );
    assert_eq!(argv[3], "arg000");
    assert!(run.summary.invariant_holds);
}

#[test]
fn unknown_syscall_name_is_a_clear_error() {
    let opts = Options {
        syscalls: Some("openat,opnat".into()),
        ..quiet_options()
    };
    let stop = std::sync::atomic::AtomicBool::new(true);
    let err = custos_collector::collect(&opts, std::io::sink(), &stop, || {}).unwrap_err();
    let msg = format!("{err:#}");
    assert!(
        msg.contains("unknown syscall name") && msg.contains("`opnat` (did you mean `openat`?)"),
        "{msg}"
    );

    let opts = Options {
        events_ring_kb: 3,
        ..quiet_options()
    };
    let _g = serial();
    let err = custos_collector::collect(&opts, std::io::sink(), &stop, || {}).unwrap_err();
    assert!(format!("{err:#}").contains("power of two"), "{err:#}");
}

/// A tiny best-effort ring and a storm from several processes: every event
/// is delivered or counted, the per-CPU sequences prove it, and a marker
/// process's exec and open-for-write still arrive on the reserved ring.
#[test]
fn overload_accounts_every_event_and_keeps_critical_ones() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().canonicalize().unwrap();
    let out = d.join("events.jsonl");
    let marker_file = d.join("marker.txt");
    let opts = Options {
        events_ring_kb: 4,
        attrs_ring_kb: 4,
        ..quiet_options()
    };
    let marker_script = format!(
        "echo written > {}; exec /bin/true custos-marker",
        marker_file.display()
    );
    let run = run_collector(opts, &out, || {
        let storm: Vec<_> = (0..4)
            .map(|_| {
                std::process::Command::new("dd")
                    .args(["if=/dev/zero", "of=/dev/null", "bs=1", "count=150000"])
                    .stderr(std::process::Stdio::null())
                    .spawn()
                    .unwrap()
            })
            .collect();
        std::thread::sleep(std::time::Duration::from_millis(150));
        assert!(sh(&marker_script).success());
        for mut p in storm {
            assert!(p.wait().unwrap().success());
        }
    });
    let s = &run.summary;
    eprintln!("overload: {s:?}");
    assert!(
        s.dropped > 0,
        "the storm must overflow a 4 KiB ring (dropped 0 of {})",
        s.produced
    );
    assert_eq!(
        s.produced,
        s.delivered + s.dropped,
        "produced = delivered + dropped"
    );
    assert_eq!(s.dropped_critical, 0, "the reserved ring kept up");
    assert!(s.invariant_holds);

    // The same, checked from the stream against the per-CPU sequences: every
    // number 1..=seq of every CPU is delivered exactly once or inside exactly
    // one loss record.
    let mut delivered: HashMap<u64, BTreeSet<u64>> = HashMap::new();
    for e in run.events() {
        let new = delivered
            .entry(e["cpu"].as_u64().unwrap())
            .or_default()
            .insert(e["seq"].as_u64().unwrap());
        assert!(new, "sequence delivered twice: {e}");
    }
    let mut lost: HashMap<u64, u64> = HashMap::new();
    let mut loss_total = 0;
    for l in run.losses() {
        let (cpu, first, last) = (
            l["cpu"].as_u64().unwrap(),
            l["first_seq"].as_u64().unwrap(),
            l["last_seq"].as_u64().unwrap(),
        );
        assert_eq!(l["count"].as_u64().unwrap(), last - first + 1);
        assert!(l["start_ns"].as_u64().unwrap() <= l["end_ns"].as_u64().unwrap());
        let seen = delivered
            .get(&cpu)
            .map(|s| s.range(first..=last).count())
            .unwrap_or(0);
        assert_eq!(seen, 0, "a lost range overlaps delivered events: {l}");
        *lost.entry(cpu).or_default() += last - first + 1;
        loss_total += last - first + 1;
    }
    assert!(run.losses().count() > 0, "in-band loss records present");
    assert_eq!(loss_total, s.dropped);
    // Critical records are drained first, yet the stream is in causal order.
    assert_causal_order(&run);
    let cpu_seq = run.final_stats()["cpu_seq"].as_array().unwrap().clone();
    for (cpu, seq) in cpu_seq.iter().enumerate() {
        let seq = seq.as_u64().unwrap();
        let got = delivered
            .get(&(cpu as u64))
            .map(|s| s.len() as u64)
            .unwrap_or(0);
        if let Some(max) = delivered
            .get(&(cpu as u64))
            .and_then(|s| s.iter().next_back())
        {
            assert!(*max <= seq);
        }
        assert_eq!(
            got + lost.get(&(cpu as u64)).copied().unwrap_or(0),
            seq,
            "cpu {cpu}"
        );
    }

    // The marker's critical events survived the storm.
    let exec = find(&run, "marker exec", |e| {
        e["syscall"] == "execve" && e["argv"] == serde_json::json!(["/bin/true", "custos-marker"])
    });
    assert_eq!(exec["critical"], true);
    assert_eq!(exec["ret"], 0);
    let open = find(&run, "marker open-for-write", |e| {
        e["syscall"] == "openat" && e["path"] == marker_file.to_str().unwrap()
    });
    assert_eq!(open["critical"], true);
}

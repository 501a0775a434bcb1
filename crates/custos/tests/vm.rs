//! The VM runner, driven through the real `custos` binary and a real VM.
//! These boot QEMU (software emulation on CI hosts), so each test is one or
//! two boots of about ten seconds.

use std::process::{Command, Output};
use std::time::{Duration, Instant};

fn custos(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_custos"))
        .args(args)
        .output()
        .expect("run custos")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn guest_runs_the_provisioned_sched_ext_kernel() {
    // The kernel `vm run` boots by default is the one `vm kernel` settles on.
    let chosen = custos(&["vm", "kernel", "--offline"]);
    assert!(chosen.status.success(), "{}", text(&chosen.stderr));
    let release = text(&chosen.stdout).trim().to_string();
    assert!(!release.is_empty());

    let out = custos(&["vm", "run", "-q", "--", "sh", "-c", "test -e /sys/kernel/sched_ext/state && cat /sys/kernel/sched_ext/state && uname -r && test -s /boot/config-$(uname -r) && touch /tmp/writable && echo ok"]);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    assert_eq!(text(&out.stdout), format!("disabled\n{release}\nok\n"));
}

/// --cpu-model reaches QEMU: the guest's CPUID is the model's, so software
/// that picks its kernels by CPUID (tract, glibc) sees no AVX2 or FMA.
/// A malformed model is refused before any boot.
#[test]
fn the_guest_cpu_model_is_the_one_asked_for() {
    let flags = "grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\\n' | grep -cx 'avx2\\|fma'";
    let default = custos(&["vm", "run", "-q", "--cpus", "1", "--", "sh", "-c", flags]);
    let qemu64 = custos(&[
        "vm",
        "run",
        "-q",
        "--cpus",
        "1",
        "--cpu-model",
        "qemu64",
        "--",
        "sh",
        "-c",
        flags,
    ]);
    assert_eq!(
        default.status.code(),
        Some(0),
        "stderr: {}",
        text(&default.stderr)
    );
    // grep -c exits 1 when it counts none.
    assert_eq!(
        qemu64.status.code(),
        Some(1),
        "stderr: {}",
        text(&qemu64.stderr)
    );
    assert_eq!(
        text(&default.stdout).trim(),
        "2",
        "the default (max) has AVX2 and FMA"
    );
    assert_eq!(text(&qemu64.stdout).trim(), "0");
    let bad = custos(&["vm", "run", "--cpu-model", "max -smp 64", "--", "true"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        text(&bad.stderr).contains("not a QEMU CPU model"),
        "{}",
        text(&bad.stderr)
    );
}

#[test]
fn exit_codes_stdout_stderr_and_shared_files_come_back_exactly() {
    let share = tempfile::tempdir().unwrap();
    let file = share.path().join("from-guest.txt");
    let script = format!(
        "printf 'line one\\nline two\\n'; echo 'a stderr line' >&2; echo written > {}; exit 3",
        file.display()
    );
    let out = custos(&[
        "vm",
        "run",
        "-q",
        "--share",
        share.path().to_str().unwrap(),
        "--",
        "sh",
        "-c",
        &script,
    ]);
    assert_eq!(out.status.code(), Some(3), "stderr: {}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "line one\nline two\n");
    assert_eq!(text(&out.stderr), "a stderr line\n");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "written\n");

    // Exit 0, and the progress lines that a person sees without -q.
    let out = custos(&["vm", "run", "--", "true"]);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(
        err.contains("custos vm: booting") && err.contains("command started after"),
        "{err}"
    );
}

/// virtme-ng takes virtiofsd's pid file as the sign the daemon listens, but
/// the daemon writes it before binding its socket; QEMU that gets there first
/// exits before any guest exists (seen in CI on a loaded host). A virtiofsd
/// that is slow exactly there, once, must cost a second boot, not the run.
#[test]
fn a_boot_that_beat_virtiofsd_to_its_socket_is_booted_again() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let wrapper = dir.path().join("virtiofsd");
    // The first start writes the pid file vng waits for, then stalls before
    // the real daemon starts; later starts are the real daemon at once.
    std::fs::write(
        &wrapper,
        r#"#!/bin/sh
here=$(dirname "$0")
PATH=$(printf %s "$PATH" | tr : '\n' | grep -vxF "$here" | paste -sd:)
sock= prev=
for a; do [ "$prev" = --socket-path ] && sock=$a; prev=$a; done
# vng also runs it with --version and --help: those go straight through.
if [ -n "$sock" ] && [ ! -e "$here/stalled" ]; then
    : > "$here/stalled"
    : > "$sock.pid"
    sleep 30
fi
exec virtiofsd "$@"
"#,
    )
    .unwrap();
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        dir.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new(env!("CARGO_BIN_EXE_custos"))
        .args(["vm", "run", "--cpus", "1", "--", "sh", "-c", "echo booted"])
        .env("PATH", &path)
        .output()
        .expect("run custos");
    let err = text(&out.stderr);
    assert!(
        dir.path().join("stalled").exists(),
        "the slow virtiofsd was never started: {err}"
    );
    assert_eq!(out.status.code(), Some(0), "stderr: {err}");
    assert_eq!(text(&out.stdout), "booted\n");
    assert_eq!(
        err.matches("QEMU started before virtiofsd listened; booting again (2/3)")
            .count(),
        1,
        "{err}"
    );
}

#[test]
fn missing_and_corrupt_kernels_fail_fast_with_the_fix() {
    let out = custos(&[
        "vm",
        "run",
        "--kernel",
        "/nonexistent/vmlinuz",
        "--",
        "true",
    ]);
    assert_ne!(out.status.code(), Some(0));
    let err = text(&out.stderr);
    assert!(
        err.contains("does not exist") && err.contains("custos vm kernel"),
        "{err}"
    );

    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("vmlinuz"), vec![0x5au8; 4096]).unwrap();
    let out = custos(&[
        "vm",
        "run",
        "--kernel",
        dir.path().join("vmlinuz").to_str().unwrap(),
        "--",
        "true",
    ]);
    assert_ne!(out.status.code(), Some(0));
    let err = text(&out.stderr);
    assert!(
        err.contains("bzImage") && err.contains("custos vm kernel"),
        "{err}"
    );
}

#[test]
fn a_truncated_kernel_never_hangs() {
    // A valid boot header but most of the image cut off: QEMU starts, the
    // guest never runs the command, and the runner says so within its timeout.
    let chosen = custos(&["vm", "kernel", "--offline", "--list"]);
    let line = text(&chosen.stdout)
        .lines()
        .find(|l| l.starts_with('*'))
        .expect("a selected kernel")
        .to_string();
    let vmlinuz = line.rsplit('\t').next().unwrap().to_string();
    let image = std::fs::read(&vmlinuz).unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("vmlinuz"), &image[..image.len() / 3]).unwrap();
    std::fs::copy(
        std::path::Path::new(&vmlinuz).with_file_name("config"),
        dir.path().join("config"),
    )
    .unwrap();

    let start = Instant::now();
    let out = custos(&[
        "vm",
        "run",
        "--timeout",
        "60",
        "--kernel",
        dir.path().to_str().unwrap(),
        "--",
        "true",
    ]);
    assert!(
        start.elapsed() < Duration::from_secs(90),
        "took {:?}",
        start.elapsed()
    );
    let code = out.status.code();
    assert!(code == Some(124) || code == Some(125), "code {code:?}");
    let err = text(&out.stderr);
    assert!(err.contains("custos vm kernel"), "{err}");
}

#[test]
fn a_run_past_its_timeout_is_killed_with_qemu() {
    let tag = format!("custos.test={}", std::process::id());
    let start = Instant::now();
    let out = custos(&[
        "vm",
        "run",
        "--timeout",
        "40",
        "--append",
        &tag,
        "--",
        "sleep",
        "600",
    ]);
    assert_eq!(
        out.status.code(),
        Some(124),
        "stderr: {}",
        text(&out.stderr)
    );
    assert!(start.elapsed() < Duration::from_secs(70));
    let err = text(&out.stderr);
    assert!(
        err.contains("timed out after 40 s") && err.contains("QEMU killed"),
        "{err}"
    );
    // QEMU, whose command line carries the tag, is gone.
    let left = Command::new("pgrep").args(["-f", &tag]).output().unwrap();
    assert!(
        left.stdout.is_empty(),
        "QEMU left running: {}",
        text(&left.stdout)
    );
}

/// Whatever ends `custos vm run` — a signal it handles or SIGKILL — QEMU and
/// virtiofsd (the guest's whole process group) end with it.
#[test]
fn killing_the_runner_leaves_no_guest_processes() {
    use std::io::{BufRead, BufReader};
    for signal in ["TERM", "KILL"] {
        let tag = format!("custos.kill={}.{signal}", std::process::id());
        let mut run = Command::new(env!("CARGO_BIN_EXE_custos"))
            .args([
                "vm",
                "run",
                "--timeout",
                "300",
                "--append",
                &tag,
                "--",
                "sleep",
                "600",
            ])
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut err = BufReader::new(run.stderr.take().unwrap());
        let mut line = String::new();
        while !line.contains("command started") {
            line.clear();
            assert!(
                err.read_line(&mut line).unwrap() > 0,
                "the guest never started"
            );
        }
        let qemu = text(
            &Command::new("pgrep")
                .args(["-f", &format!("qemu-system.*{tag}")])
                .output()
                .unwrap()
                .stdout,
        );
        let qemu = qemu
            .lines()
            .next()
            .unwrap_or_else(|| panic!("QEMU is not running before the kill"));
        let pgid = text(
            &Command::new("ps")
                .args(["-o", "pgid=", "-p", qemu])
                .output()
                .unwrap()
                .stdout,
        )
        .trim()
        .to_string();
        let group = || {
            text(
                &Command::new("pgrep")
                    .args(["-a", "-g", &pgid])
                    .output()
                    .unwrap()
                    .stdout,
            )
        };
        assert!(
            group().contains("virtiofsd"),
            "no virtiofsd in the guest's group: {}",
            group()
        );
        assert!(Command::new("kill")
            .args([&format!("-{signal}"), &run.id().to_string()])
            .status()
            .unwrap()
            .success());
        run.wait().unwrap();
        let start = Instant::now();
        while !group().is_empty() && start.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(100));
        }
        assert!(group().is_empty(), "SIG{signal}: left running: {}", group());
    }
}

#[test]
fn no_kernel_anywhere_is_one_clear_error() {
    let empty = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_custos"))
            .args(args)
            .env("CUSTOS_CACHE_DIR", empty.path())
            .env("CUSTOS_SHARED_KERNELS", empty.path().join("none"))
            .output()
            .unwrap()
    };
    for args in [
        &["vm", "kernel", "--offline"][..],
        &["vm", "run", "--", "true"][..],
    ] {
        let out = run(args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = text(&out.stderr);
        assert!(
            err.contains("no sched_ext-capable kernel found")
                && err.contains("run `custos vm kernel`"),
            "{err}"
        );
    }
}

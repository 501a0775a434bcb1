//! BPF-LSM hooks. The host kernel refuses trampoline programs, so the outer
//! test boots the sched_ext VM kernel (custos-vm) and runs the inner test of
//! this same binary there; the inner test loads the collector with
//! `--lsm require` and checks what the hooks saw.

mod common;

use std::time::Duration;

use common::*;
use custos_collector::{LsmMode, Options};
use custos_vm::runner::{self, Streams, VmSpec};

#[test]
fn lsm_hooks_load_and_fire_in_the_vm_kernel() {
    let kernel = custos_vm::kernel::select_default().expect("a VM kernel (see `custos vm kernel`)");
    let mut spec = VmSpec::new(kernel);
    spec.env.push(("CUSTOS_IN_VM".into(), "1".into()));
    spec.timeout = Duration::from_secs(600);
    let exe = std::env::current_exe()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let cmd: Vec<String> = [
        exe.as_str(),
        "--ignored",
        "--exact",
        "lsm_hooks_inside_the_vm",
        "--nocapture",
        "--test-threads=1",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let out = runner::run(&spec, &cmd, Streams::Capture).expect("VM run");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.code, 0,
        "inner test failed in the VM\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(
        stdout.contains("test lsm_hooks_inside_the_vm ... ok"),
        "{stdout}"
    );
}

#[test]
#[ignore = "runs inside the VM; started by lsm_hooks_load_and_fire_in_the_vm_kernel"]
fn lsm_hooks_inside_the_vm() {
    assert!(
        std::env::var_os("CUSTOS_IN_VM").is_some(),
        "run through lsm_hooks_load_and_fire_in_the_vm_kernel"
    );
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().canonicalize().unwrap();
    let out = d.join("events.jsonl");
    let target = d.join("lsm.txt");
    let opts = Options {
        lsm: LsmMode::Require,
        ..quiet_options()
    };
    let script = format!("echo x > {}; /bin/true custos-lsm", target.display());
    let run = run_collector(opts, &out, || assert!(sh(&script).success()));
    assert!(run.summary.lsm_active);
    assert!(run.summary.invariant_holds, "{:?}", run.summary);

    let bprm = run
        .events()
        .find(|e| {
            e["syscall"] == "lsm:bprm_check_security"
                && e["argv"] == serde_json::json!(["/bin/true", "custos-lsm"])
        })
        .expect("bprm_check_security with argv");
    assert_eq!(
        bprm["path"], "/usr/bin/true",
        "the full resolved binary path"
    );
    assert_eq!(bprm["category"], "process");
    assert_eq!(bprm["critical"], true);
    assert!(bprm.get("ret").is_none(), "hooks have no return value");
    // The hook fires before the fact, in the same process as the execve tracepoint.
    let exec = run
        .events()
        .find(|e| {
            e["syscall"] == "execve"
                && e["argv"] == serde_json::json!(["/bin/true", "custos-lsm"])
                && e["ret"] == 0
        })
        .expect("execve tracepoint event");
    assert_eq!(exec["pid"], bprm["pid"]);
    assert!(bprm["time_ns"].as_u64() <= exec["time_ns"].as_u64());

    let open = run
        .events()
        .find(|e| e["syscall"] == "lsm:file_open" && e["path"] == target.to_str().unwrap())
        .expect("file_open with the resolved path");
    assert_eq!(
        open["args"]["flags"].as_u64().unwrap() & libc::O_ACCMODE as u64,
        libc::O_WRONLY as u64
    );
    assert_eq!(open["critical"], true, "open for write is critical");
    assert!(open["inode"].as_u64().unwrap() > 0);
}

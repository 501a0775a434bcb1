//! Compiles src/bpf/main.bpf.c (CO-RE, clang) and generates its libbpf-rs
//! skeleton, and generates the Rust bindings of its contract header
//! src/bpf/intf.h (bindgen; included by src/intf.rs).
//! vmlinux.h comes from the build machine's kernel BTF (`bpftool btf dump`);
//! CO-RE relocations make the object load on other kernels too.
//! CUSTOS_VMLINUX_H=path uses a given vmlinux.h instead; BPF_CLANG picks clang
//! (.cargo/config.toml names it, for this and scx_cargo's builds alike).
use std::{
    env, fs,
    path::{Path, PathBuf},
    process::Command,
};

use libbpf_cargo::SkeletonBuilder;

fn vmlinux_h(out: &Path) -> PathBuf {
    let dir = out.join("vmlinux");
    fs::create_dir_all(&dir).expect("create vmlinux dir");
    let dst = dir.join("vmlinux.h");
    println!("cargo:rerun-if-env-changed=CUSTOS_VMLINUX_H");
    if let Ok(given) = env::var("CUSTOS_VMLINUX_H") {
        fs::copy(&given, &dst).unwrap_or_else(|e| panic!("copy CUSTOS_VMLINUX_H={given}: {e}"));
        return dir;
    }
    let btf = "/sys/kernel/btf/vmlinux";
    let out = Command::new("bpftool")
        .args(["btf", "dump", "file", btf, "format", "c"])
        .output()
        .unwrap_or_else(|e| {
            panic!("running bpftool to generate vmlinux.h failed ({e}); run scripts/deps.sh or set CUSTOS_VMLINUX_H")
        });
    if !out.status.success() {
        panic!(
            "bpftool btf dump {btf} failed: {}; the build needs kernel BTF (CONFIG_DEBUG_INFO_BTF) or CUSTOS_VMLINUX_H",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    fs::write(&dst, out.stdout).expect("write vmlinux.h");
    dir
}

fn main() {
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR"));
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let include = manifest.join("../../include/custos");
    let vmlinux = vmlinux_h(&out);
    let clang = env::var("BPF_CLANG").unwrap_or_else(|_| "clang".into());
    println!("cargo:rerun-if-env-changed=BPF_CLANG");
    SkeletonBuilder::new()
        .source("src/bpf/main.bpf.c")
        .clang(&clang)
        .clang_args([
            "-O2".into(),
            "-g".into(),
            "-mcpu=v3".into(),
            "-Wall".into(),
            format!("-I{}", vmlinux.display()),
            format!("-I{}", include.display()),
            "-Isrc/bpf".into(),
        ])
        .build_and_generate(out.join("collector.skel.rs"))
        .expect("building the BPF collector program");
    // The header as the BPF programs see it (BPF target layout); the
    // bindings' layout checks then hold it to the host's.
    bindgen::Builder::default()
        .header("src/bpf/intf.h")
        .clang_args(["--target=bpf".into(), format!("-I{}", include.display())])
        // CUSTOS_EV_CRITICAL, not custos_event_flags_CUSTOS_EV_CRITICAL.
        .prepend_enum_name(false)
        .derive_default(true)
        .generate()
        .expect("generating the bindings of src/bpf/intf.h")
        .write_to_file(out.join("intf.rs"))
        .expect("writing the bindings of src/bpf/intf.h");
    println!("cargo:rerun-if-changed=src/bpf");
    println!("cargo:rerun-if-changed={}", include.display());
}

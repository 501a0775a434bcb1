// SPDX-License-Identifier: GPL-2.0-only
// Compiles the BPF scheduler and generates Rust bindings for its contract header.
fn main() {
    // BPF_CLANG comes from .cargo/config.toml.
    println!("cargo:rerun-if-changed=../../include/custos");
    scx_cargo::BpfBuilder::new()
        .unwrap()
        .add_include_path("../../include")
        .enable_intf("src/bpf/intf.h", "bpf_intf.rs")
        .enable_skel("src/bpf/main.bpf.c", "bpf")
        .build()
        .unwrap();
    // The policy network and normalisation alone, for BPF_PROG_TEST_RUN
    // (tests and the inference-cost benchmark; runs without sched_ext).
    scx_cargo::BpfBuilder::new()
        .unwrap()
        .add_include_path("../../include")
        .enable_skel("src/bpf/policy_probe.bpf.c", "policy_probe")
        .build()
        .unwrap();
    // The recorder of the default scheduler's placements (GRU training
    // data); tracepoints only, no sched_ext.
    scx_cargo::BpfBuilder::new()
        .unwrap()
        .add_include_path("../../include")
        .enable_skel("src/bpf/placement_record.bpf.c", "placement_record")
        .build()
        .unwrap();
}

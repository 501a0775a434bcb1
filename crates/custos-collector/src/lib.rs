//! Custos collector: loads the provenance BPF programs, drains their rings and
//! writes the event stream. Not a store or a query engine (custos-store) and
//! not a scheduler (custos-sched): it only produces events and features.
mod bpf_skel {
    #![allow(
        clippy::all,
        non_camel_case_types,
        non_snake_case,
        dead_code,
        unused_imports
    )]
    include!(concat!(env!("OUT_DIR"), "/collector.skel.rs"));
}

pub mod cli;
pub mod collector;
pub mod consumer;
pub mod containers;
pub mod exporter;
pub mod features;
pub mod reorder;
/// Tamper evidence: the stream's seals (crates/custos-seal).
pub use custos_seal as seal;
pub mod intf;
pub mod stats;
pub mod syscalls;
pub mod uring;
pub mod workflows;
pub mod writer;

pub use collector::{collect, LsmMode, Options, Summary};

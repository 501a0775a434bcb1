//! custos-sched: Custos's sched_ext scheduler, the Aegis queue backbone
//! (seed 000, section 4.1) with its static and learned queue policies.
//!
//! For: keeping a provenance consumer (the Custos collector, auditd, ...)
//! fed while producers flood it, by parking pressured producers in budgeted
//! FIFO queues whose waiting times cap how often they run. The BPF side
//! (`src/bpf/main.bpf.c`) makes every scheduling decision; this crate loads
//! it, writes its tunables, feeds it consumer pids and external pressure,
//! and reports its statistics (`custos sched --stats`).
//!
//! The queue policy is static (`policy_static.bpf.h`) or the learned
//! integer network (`policy_net.bpf.h`); `learning` and `train` feed it
//! transitions, train it with custos-policy's DQN and push its weights.
//! Beside the queue policy, `--placement gru` lets seed 002's GRU choose the
//! CPU of waking tasks (`placement`, `placement_gru.bpf.h`).
//!
//! Not for: collecting provenance (that is `custos-collector`, which
//! publishes the features read here through the pinned maps of
//! `include/custos/provenance_features.h`), nor the network's mathematics
//! (custos-policy).

pub mod bpf_intf {
    #![allow(
        non_upper_case_globals,
        non_camel_case_types,
        non_snake_case,
        dead_code
    )]
    include!(concat!(env!("OUT_DIR"), "/bpf_intf.rs"));
}
mod bpf_skel {
    #![allow(clippy::all, non_camel_case_types, non_snake_case, dead_code)]
    include!(concat!(env!("OUT_DIR"), "/bpf_skel.rs"));
}
mod placement_record_skel {
    #![allow(clippy::all, non_camel_case_types, non_snake_case, dead_code)]
    include!(concat!(env!("OUT_DIR"), "/placement_record_skel.rs"));
}
mod policy_probe_skel {
    #![allow(clippy::all, non_camel_case_types, non_snake_case, dead_code)]
    include!(concat!(env!("OUT_DIR"), "/policy_probe_skel.rs"));
}

pub mod cli;
pub mod learning;
pub mod placement;
pub mod policy;
pub mod pressure;
mod scheduler;
pub mod stats;
pub mod train;
pub mod waiting_time;

pub use scheduler::{sched_ext_state, Attached};

/// Number of budgeted queues the BPF side supports (queue 0 is primary).
pub const MAX_BUDGETED_QUEUES: u32 = bpf_intf::custos_sched_consts_CUSTOS_MAX_QUEUES - 1;

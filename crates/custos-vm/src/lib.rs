//! The VM runner: boots a sched_ext-capable kernel and runs a command in it.
pub mod cli;

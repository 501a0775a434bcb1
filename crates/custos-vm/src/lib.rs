//! The VM runner: boots a sched_ext-capable Linux kernel under QEMU and runs one
//! command inside it, returning the command's exit code, stdout and stderr.
//!
//! Custos's scheduler needs `CONFIG_SCHED_CLASS_EXT`, and its LSM hooks need a
//! kernel that allows trampoline programs; the development and CI hosts have
//! neither. This crate provisions such a kernel (Debian's cloud kernel, see
//! [`kernel`]) and runs commands in it through virtme-ng, with the host's root
//! shared read-only over virtiofs (see [`runner`]).
//!
//! Not for: building kernels, or running anything that needs a persistent guest.

pub mod cli;
pub mod kernel;
pub mod provision;
pub mod runner;
mod tools;

pub use kernel::{Kernel, KernelOrigin};
pub use runner::{VmOutput, VmSpec};

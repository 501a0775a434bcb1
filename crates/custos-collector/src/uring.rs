//! io_uring requests recorded as their syscall twins: one table drives the
//! kernel side (`custos_uring_op`, by opcode) and the JSON of each event.
//! docs/collector.md ("io_uring") lists it; keep them in step.
//!
//! Opcodes are the kernel's ABI (`enum io_uring_op`, include/uapi/linux/
//! io_uring.h); a test checks them against the running kernel's BTF.

use crate::intf::*;
use crate::syscalls::{self, Category};

#[derive(Debug)]
pub struct UringOp {
    /// The kernel's opcode.
    pub op: u8,
    /// Its name without `IORING_OP_`, lower case (JSON `io_uring_op`).
    pub name: &'static str,
    /// The syscall doing the same (JSON `syscall`), so the store applies it as one.
    pub twin: &'static str,
    /// `URING_*` flags (intf.h).
    pub flags: u16,
}

const F: u16 = URING_FILE;
const RD: u16 = URING_FILE | URING_RW;
const WR: u16 = URING_FILE | URING_RW | URING_WRITE;
const SOCK: u16 = URING_SOCK;

macro_rules! op {
    ($op:literal, $name:literal, $twin:literal, $flags:expr) => {
        UringOp {
            op: $op,
            name: $name,
            twin: $twin,
            flags: $flags,
        }
    };
}

/// The opcodes recorded. Left out: those that move no data between a
/// process and a file or peer (nop, timeouts, cancel, poll, futex, waitid,
/// buffer rings, madvise/fadvise, epoll); msg_ring and uring_cmd are gaps
/// (docs/collector.md says what each means).
pub static URING_OPS: &[UringOp] = &[
    op!(1, "readv", "readv", RD),
    op!(2, "writev", "writev", WR),
    op!(3, "fsync", "fsync", F),
    op!(4, "read_fixed", "read", RD),
    op!(5, "write_fixed", "write", WR),
    op!(8, "sync_file_range", "sync_file_range", F),
    op!(9, "sendmsg", "sendmsg", WR | SOCK),
    op!(10, "recvmsg", "recvmsg", RD | SOCK),
    op!(13, "accept", "accept4", URING_RET_FD | SOCK),
    op!(16, "connect", "connect", F | SOCK),
    op!(17, "fallocate", "fallocate", F),
    op!(18, "openat", "openat", URING_RET_FD | URING_OPEN),
    op!(19, "close", "close", URING_CLOSE),
    // A look at metadata: no flow, and its path is gone by its result.
    op!(21, "statx", "statx", 0),
    op!(22, "read", "read", RD),
    op!(23, "write", "write", WR),
    op!(26, "send", "sendto", WR | SOCK),
    op!(27, "recv", "recvfrom", RD | SOCK),
    op!(28, "openat2", "openat2", URING_RET_FD | URING_OPEN),
    // The output file only: the input is named by an fd the request no
    // longer holds at completion.
    op!(30, "splice", "splice", F | URING_NO_PATHS),
    op!(33, "tee", "tee", F | URING_NO_PATHS),
    op!(34, "shutdown", "shutdown", F | SOCK),
    // Path strings: the kernel frees them before the result is posted.
    op!(35, "renameat", "renameat2", URING_NO_PATHS),
    op!(36, "unlinkat", "unlinkat", URING_NO_PATHS),
    op!(37, "mkdirat", "mkdirat", URING_NO_PATHS),
    op!(38, "symlinkat", "symlinkat", URING_NO_PATHS),
    op!(39, "linkat", "linkat", URING_NO_PATHS),
    op!(41, "fsetxattr", "fsetxattr", F),
    op!(42, "setxattr", "setxattr", URING_NO_PATHS),
    op!(45, "socket", "socket", URING_RET_FD),
    op!(47, "send_zc", "sendto", WR | SOCK),
    op!(48, "sendmsg_zc", "sendmsg", WR | SOCK),
    op!(49, "read_multishot", "read", RD),
    // A registered file given an fd: the fd names the file from now on.
    op!(54, "fixed_fd_install", "dup", URING_RET_FD),
    op!(55, "ftruncate", "ftruncate", WR),
    op!(56, "bind", "bind", F | SOCK),
    op!(57, "listen", "listen", F | SOCK),
    op!(58, "recv_zc", "recvfrom", RD | SOCK),
    op!(60, "readv_fixed", "readv", RD),
    op!(61, "writev_fixed", "writev", WR),
    // The two new fds are written to user memory, not posted.
    op!(62, "pipe", "pipe2", URING_NO_PATHS),
];

impl UringOp {
    /// The twin's category; io_uring-only twins (fsync, statx, ...) are files.
    pub fn category(&self) -> Category {
        syscalls::by_name(self.twin)
            .map(|s| s.category)
            .unwrap_or(Category::File)
    }

    /// As critical as its twin (connect, accept, unlink, ...).
    pub fn critical(&self) -> bool {
        syscalls::by_name(self.twin).is_some_and(|s| s.critical)
    }

    pub fn spec(&self) -> custos_uring_op {
        custos_uring_op {
            traced: 1,
            critical: self.critical() as u8,
            flags: self.flags,
        }
    }
}

pub fn by_op(op: u64) -> Option<&'static UringOp> {
    URING_OPS.iter().find(|o| o.op as u64 == op)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_consistent() {
        let mut seen = std::collections::HashSet::new();
        for o in URING_OPS {
            assert!((o.op as u32) < URING_MAX_OPS, "{}", o.name);
            assert!(seen.insert(o.op), "duplicate opcode {}", o.name);
            assert_eq!(by_op(o.op as u64).unwrap().name, o.name);
            // A twin the syscall table knows is decoded like it; the
            // others are named here and in docs/collector.md.
            assert!(
                syscalls::by_name(o.twin).is_some()
                    || ["fsync", "sync_file_range", "fallocate", "statx", "tee"].contains(&o.twin),
                "{}: twin {}",
                o.name,
                o.twin
            );
        }
    }

    /// The opcodes are the running kernel's (its BTF's enum io_uring_op).
    #[test]
    fn opcodes_are_the_kernels() {
        let out = std::process::Command::new("bpftool")
            .args([
                "btf",
                "dump",
                "file",
                "/sys/kernel/btf/vmlinux",
                "format",
                "c",
            ])
            .output()
            .expect("bpftool (the build needs it too)");
        assert!(out.status.success());
        let text = String::from_utf8_lossy(&out.stdout);
        let start = text
            .find("enum io_uring_op {")
            .expect("enum io_uring_op in the kernel's BTF");
        let body = &text[start..start + text[start..].find("};").unwrap()];
        let kernel: std::collections::HashMap<String, u64> = body
            .lines()
            .filter_map(|l| {
                let (n, v) = l.trim().trim_end_matches(',').split_once(" = ")?;
                Some((
                    n.strip_prefix("IORING_OP_")?.to_lowercase(),
                    v.parse().ok()?,
                ))
            })
            .collect();
        for o in URING_OPS {
            assert_eq!(kernel.get(o.name), Some(&(o.op as u64)), "{}", o.name);
        }
    }
}

//! The provenance syscall set: one table drives the kernel-side decoding
//! (`custos_syscall_spec`), the tracepoints attached and the JSON arguments.
//! docs/collector.md lists it; keep them in step.

use anyhow::{bail, Result};

use crate::intf::*;

#[cfg(not(target_arch = "x86_64"))]
compile_error!("the syscall table carries x86_64 numbers; add the table for this architecture");

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Category {
    Process,
    File,
    Network,
    Credential,
    Module,
    Mount,
    Memory,
    Ipc,
}

impl Category {
    pub fn as_str(self) -> &'static str {
        match self {
            Category::Process => "process",
            Category::File => "file",
            Category::Network => "network",
            Category::Credential => "credential",
            Category::Module => "module",
            Category::Mount => "mount",
            Category::Memory => "memory",
            Category::Ipc => "ipc",
        }
    }

    /// `enum custos_category`.
    fn code(self) -> u8 {
        match self {
            Category::Process => CAT_PROCESS,
            Category::File => CAT_FILE,
            Category::Network => CAT_NETWORK,
            Category::Credential => CAT_CREDENTIAL,
            Category::Module => CAT_MODULE,
            Category::Mount => CAT_MOUNT,
            Category::Memory => CAT_MEMORY,
            Category::Ipc => CAT_IPC,
        }
    }
}

/// What one positional argument means.
#[derive(Clone, Copy, Debug)]
pub enum Arg {
    /// Not reported (a pointer, or nothing useful).
    Skip,
    /// A C `int`, reported under this name.
    Int(&'static str),
    /// A `long`.
    Long(&'static str),
    /// An unsigned value (flags, sizes, modes).
    Uint(&'static str),
    /// The fd the call works on (`fd`; its file identity and, where useful, path).
    Fd,
    /// dirfd of `Path` / `Path2`.
    DirFd,
    DirFd2,
    /// A user path string (`path`, `path2`).
    Path,
    Path2,
    /// exec argv.
    Argv,
    /// struct sockaddr pointer and its length (value or pointer).
    Addr,
    AddrLen,
    AddrLenPtr,
    /// open(2) flags (`flags`): write intent makes the event critical.
    OpenFlags,
    /// mmap/mprotect protection (`prot`): PROT_EXEC is traced, and mmap of
    /// a file whatever its protection (SPEC_FILE_MAP).
    Prot,
    /// int[2] the kernel fills with two new fds (`read_fd`, `write_fd` / `fds`).
    FdPair,
}

#[derive(Debug)]
pub struct Syscall {
    pub name: &'static str,
    pub nr: u32,
    pub category: Category,
    pub critical: bool,
    pub args: &'static [Arg],
    pub flags: u16,
}

impl Syscall {
    /// Returns an fd (open, socket, accept, dup): JSON `fd` is the result.
    pub fn returns_fd(&self) -> bool {
        matches!(
            self.name,
            "open"
                | "openat"
                | "openat2"
                | "creat"
                | "open_by_handle_at"
                | "dup"
                | "dup2"
                | "dup3"
                | "socket"
                | "accept"
                | "accept4"
                | "memfd_create"
        )
    }

    /// Creates a process or thread: a positive result is the child's pid.
    pub fn creates_task(&self) -> bool {
        matches!(self.name, "clone" | "clone3" | "fork" | "vfork")
    }

    pub fn spec(&self) -> custos_syscall_spec {
        let find = |want: fn(&Arg) -> bool| -> i8 {
            self.args
                .iter()
                .position(want)
                .map(|i| i as i8)
                .unwrap_or(-1)
        };
        let addr_len = find(|a| matches!(a, Arg::AddrLen | Arg::AddrLenPtr));
        custos_syscall_spec {
            traced: 1,
            category: self.category.code(),
            critical: self.critical as u8,
            path_arg: find(|a| matches!(a, Arg::Path)),
            dirfd_arg: find(|a| matches!(a, Arg::DirFd)),
            path2_arg: find(|a| matches!(a, Arg::Path2)),
            dirfd2_arg: find(|a| matches!(a, Arg::DirFd2)),
            fd_arg: find(|a| matches!(a, Arg::Fd)),
            addr_arg: find(|a| matches!(a, Arg::Addr)),
            addrlen_arg: addr_len,
            argv_arg: find(|a| matches!(a, Arg::Argv)),
            open_flags_arg: find(|a| matches!(a, Arg::OpenFlags)),
            prot_arg: find(|a| matches!(a, Arg::Prot)),
            fdpair_arg: find(|a| matches!(a, Arg::FdPair)),
            flags: self.flags
                | if self.args.iter().any(|a| matches!(a, Arg::AddrLenPtr)) {
                    SPEC_ADDR_OUT
                } else {
                    0
                },
        }
    }
}

use Arg::*;
use Category::*;

macro_rules! sc {
    ($name:literal, $nr:literal, $cat:expr, $crit:expr, [$($arg:expr),*]) => {
        sc!($name, $nr, $cat, $crit, [$($arg),*], 0)
    };
    ($name:literal, $nr:literal, $cat:expr, $crit:expr, [$($arg:expr),*], $flags:expr) => {
        Syscall { name: $name, nr: $nr, category: $cat, critical: $crit, args: &[$($arg),*], flags: $flags }
    };
}

const RW: u16 = SPEC_RW;
const WR: u16 = SPEC_RW | SPEC_WRITE;
const FDP: u16 = SPEC_FD_PATH;
const RFD: u16 = SPEC_RET_FD_PATH;
const LADDR: u16 = SPEC_LOCAL_ADDR;

/// The provenance syscall set (x86_64 numbers).
pub static SYSCALLS: &[Syscall] = &[
    // process life
    sc!(
        "clone",
        56,
        Process,
        true,
        [Uint("flags"), Skip, Skip, Skip, Skip]
    ),
    sc!("clone3", 435, Process, true, [Skip, Uint("size")]),
    sc!("fork", 57, Process, true, []),
    sc!("vfork", 58, Process, true, []),
    sc!("execve", 59, Process, true, [Path, Argv, Skip], SPEC_EXEC),
    sc!(
        "execveat",
        322,
        Process,
        true,
        [DirFd, Path, Argv, Skip, Int("flags")],
        SPEC_EXEC
    ),
    sc!("exit", 60, Process, true, [Int("status")], SPEC_NO_EXIT),
    sc!(
        "exit_group",
        231,
        Process,
        true,
        [Int("status")],
        SPEC_NO_EXIT
    ),
    sc!(
        "kill",
        62,
        Process,
        false,
        [Int("target_pid"), Int("signal")]
    ),
    sc!(
        "tkill",
        200,
        Process,
        false,
        [Int("target_tid"), Int("signal")]
    ),
    sc!(
        "tgkill",
        234,
        Process,
        false,
        [Int("target_pid"), Int("target_tid"), Int("signal")]
    ),
    sc!(
        "ptrace",
        101,
        Process,
        true,
        [Long("request"), Int("target_pid"), Skip, Skip]
    ),
    // Another process's memory, read or written without ptrace.
    sc!(
        "process_vm_readv",
        310,
        Process,
        true,
        [
            Int("target_pid"),
            Skip,
            Uint("liovcnt"),
            Skip,
            Uint("riovcnt"),
            Uint("flags")
        ]
    ),
    sc!(
        "process_vm_writev",
        311,
        Process,
        true,
        [
            Int("target_pid"),
            Skip,
            Uint("liovcnt"),
            Skip,
            Uint("riovcnt"),
            Uint("flags")
        ]
    ),
    sc!(
        "prctl",
        157,
        Process,
        false,
        [
            Int("option"),
            Uint("arg2"),
            Uint("arg3"),
            Uint("arg4"),
            Uint("arg5")
        ]
    ),
    sc!("setns", 308, Process, true, [Fd, Int("nstype")], FDP),
    sc!("unshare", 272, Process, true, [Uint("flags")]),
    // jobs: a new session or process group starts a workflow (docs/workflows.md)
    sc!("setsid", 112, Process, true, []),
    sc!("setpgid", 109, Process, true, [Int("pid"), Int("pgid")]),
    sc!("chdir", 80, Process, false, [Path]),
    sc!("fchdir", 81, Process, false, [Fd], FDP),
    sc!("chroot", 161, Process, true, [Path]),
    // credentials
    sc!("setuid", 105, Credential, true, [Int("uid")]),
    sc!("setgid", 106, Credential, true, [Int("gid")]),
    sc!(
        "setreuid",
        113,
        Credential,
        true,
        [Int("ruid"), Int("euid")]
    ),
    sc!(
        "setregid",
        114,
        Credential,
        true,
        [Int("rgid"), Int("egid")]
    ),
    sc!(
        "setresuid",
        117,
        Credential,
        true,
        [Int("ruid"), Int("euid"), Int("suid")]
    ),
    sc!(
        "setresgid",
        119,
        Credential,
        true,
        [Int("rgid"), Int("egid"), Int("sgid")]
    ),
    sc!("setfsuid", 122, Credential, true, [Int("fsuid")]),
    sc!("setfsgid", 123, Credential, true, [Int("fsgid")]),
    sc!("setgroups", 116, Credential, true, [Int("size"), Skip]),
    sc!("capset", 126, Credential, true, [Skip, Skip]),
    // files
    sc!("open", 2, File, false, [Path, OpenFlags, Uint("mode")], RFD),
    sc!(
        "openat",
        257,
        File,
        false,
        [DirFd, Path, OpenFlags, Uint("mode")],
        RFD
    ),
    sc!(
        "openat2",
        437,
        File,
        false,
        [DirFd, Path, Skip, Uint("size")],
        RFD | SPEC_OPEN_HOW
    ),
    sc!("creat", 85, File, true, [Path, Uint("mode")], RFD),
    sc!(
        "open_by_handle_at",
        304,
        File,
        false,
        [Int("mount_fd"), Skip, OpenFlags],
        RFD
    ),
    sc!("close", 3, File, false, [Fd]),
    sc!("read", 0, File, false, [Fd, Skip, Uint("count")], RW),
    sc!("write", 1, File, false, [Fd, Skip, Uint("count")], WR),
    sc!(
        "pread64",
        17,
        File,
        false,
        [Fd, Skip, Uint("count"), Long("pos")],
        RW
    ),
    sc!(
        "pwrite64",
        18,
        File,
        false,
        [Fd, Skip, Uint("count"), Long("pos")],
        WR
    ),
    sc!("readv", 19, File, false, [Fd, Skip, Uint("iovcnt")], RW),
    sc!("writev", 20, File, false, [Fd, Skip, Uint("iovcnt")], WR),
    sc!(
        "preadv",
        295,
        File,
        false,
        [Fd, Skip, Uint("iovcnt"), Long("pos_l"), Long("pos_h")],
        RW
    ),
    sc!(
        "pwritev",
        296,
        File,
        false,
        [Fd, Skip, Uint("iovcnt"), Long("pos_l"), Long("pos_h")],
        WR
    ),
    sc!(
        "preadv2",
        327,
        File,
        false,
        [
            Fd,
            Skip,
            Uint("iovcnt"),
            Long("pos_l"),
            Long("pos_h"),
            Int("rwf")
        ],
        RW
    ),
    sc!(
        "pwritev2",
        328,
        File,
        false,
        [
            Fd,
            Skip,
            Uint("iovcnt"),
            Long("pos_l"),
            Long("pos_h"),
            Int("rwf")
        ],
        WR
    ),
    sc!("rename", 82, File, true, [Path, Path2]),
    sc!("renameat", 264, File, true, [DirFd, Path, DirFd2, Path2]),
    sc!(
        "renameat2",
        316,
        File,
        true,
        [DirFd, Path, DirFd2, Path2, Uint("flags")]
    ),
    sc!("unlink", 87, File, true, [Path]),
    sc!("unlinkat", 263, File, true, [DirFd, Path, Uint("flags")]),
    sc!("rmdir", 84, File, true, [Path]),
    sc!("link", 86, File, false, [Path, Path2]),
    sc!(
        "linkat",
        265,
        File,
        false,
        [DirFd, Path, DirFd2, Path2, Int("flags")]
    ),
    sc!("symlink", 88, File, false, [Path, Path2], SPEC_PATH_RAW),
    sc!(
        "symlinkat",
        266,
        File,
        false,
        [Path, DirFd2, Path2],
        SPEC_PATH_RAW
    ),
    sc!("mkdir", 83, File, false, [Path, Uint("mode")]),
    sc!("mkdirat", 258, File, false, [DirFd, Path, Uint("mode")]),
    sc!("mknod", 133, File, false, [Path, Uint("mode"), Uint("dev")]),
    sc!(
        "mknodat",
        259,
        File,
        false,
        [DirFd, Path, Uint("mode"), Uint("dev")]
    ),
    sc!("chmod", 90, File, false, [Path, Uint("mode")]),
    sc!("fchmod", 91, File, false, [Fd, Uint("mode")], FDP),
    sc!("fchmodat", 268, File, false, [DirFd, Path, Uint("mode")]),
    sc!(
        "fchmodat2",
        452,
        File,
        false,
        [DirFd, Path, Uint("mode"), Int("flags")]
    ),
    sc!("chown", 92, File, false, [Path, Int("uid"), Int("gid")]),
    sc!("lchown", 94, File, false, [Path, Int("uid"), Int("gid")]),
    sc!("fchown", 93, File, false, [Fd, Int("uid"), Int("gid")], FDP),
    sc!(
        "fchownat",
        260,
        File,
        false,
        [DirFd, Path, Int("uid"), Int("gid"), Int("flags")]
    ),
    sc!("truncate", 76, File, false, [Path, Long("length")]),
    sc!("ftruncate", 77, File, false, [Fd, Long("length")], FDP),
    sc!("dup", 32, File, false, [Fd]),
    sc!("dup2", 33, File, false, [Fd, Int("newfd")]),
    sc!("dup3", 292, File, false, [Fd, Int("newfd"), Int("flags")]),
    sc!("fcntl", 72, File, false, [Fd, Int("cmd"), Uint("arg")]),
    sc!(
        "sendfile",
        40,
        File,
        false,
        [Int("out_fd"), Int("in_fd"), Skip, Uint("count")]
    ),
    sc!(
        "splice",
        275,
        File,
        false,
        [
            Int("fd_in"),
            Skip,
            Int("fd_out"),
            Skip,
            Uint("len"),
            Uint("flags")
        ]
    ),
    sc!(
        "copy_file_range",
        326,
        File,
        false,
        [
            Int("fd_in"),
            Skip,
            Int("fd_out"),
            Skip,
            Uint("len"),
            Uint("flags")
        ]
    ),
    sc!(
        "setxattr",
        188,
        File,
        false,
        [Path, Skip, Skip, Uint("size"), Int("flags")]
    ),
    sc!(
        "lsetxattr",
        189,
        File,
        false,
        [Path, Skip, Skip, Uint("size"), Int("flags")]
    ),
    sc!(
        "fsetxattr",
        190,
        File,
        false,
        [Fd, Skip, Skip, Uint("size"), Int("flags")],
        FDP
    ),
    sc!("removexattr", 197, File, false, [Path, Skip]),
    // io_uring: the calls themselves; their requests are recorded as the
    // syscalls they stand for (uring.rs).
    sc!("io_uring_setup", 425, File, false, [Uint("entries"), Skip]),
    sc!(
        "io_uring_enter",
        426,
        File,
        false,
        [Fd, Uint("to_submit"), Uint("min_complete"), Uint("flags")]
    ),
    sc!(
        "io_uring_register",
        427,
        File,
        false,
        [Fd, Uint("opcode"), Skip, Uint("nr_args")]
    ),
    // ipc
    sc!("pipe", 22, Ipc, false, [FdPair]),
    sc!("pipe2", 293, Ipc, false, [FdPair, Int("flags")]),
    sc!(
        "memfd_create",
        319,
        Ipc,
        // Critical: the name it gives the memfd must reach the consumer
        // before an exec of it (also critical, the same ring) is written.
        true,
        [Path, Uint("flags")],
        SPEC_PATH_RAW | SPEC_RET_FD_ID
    ),
    // memory: executable mappings, and mappings of files (a read of the
    // file; shared and writable, a write with no write syscall after it)
    sc!(
        "mmap",
        9,
        Memory,
        false,
        [
            Uint("addr"),
            Uint("length"),
            Prot,
            Uint("flags"),
            Fd,
            Uint("offset")
        ],
        SPEC_PROT_EXEC | SPEC_FILE_MAP | FDP
    ),
    sc!(
        "mprotect",
        10,
        Memory,
        false,
        [Uint("addr"), Uint("length"), Prot],
        SPEC_PROT_EXEC
    ),
    // mounts
    sc!(
        "mount",
        165,
        Mount,
        true,
        [Path, Path2, Skip, Uint("flags"), Skip],
        SPEC_PATH_RAW
    ),
    sc!("umount2", 166, Mount, true, [Path, Int("flags")]),
    sc!("pivot_root", 155, Mount, true, [Path, Path2]),
    // kernel modules
    sc!(
        "init_module",
        175,
        Module,
        true,
        [Skip, Uint("length"), Skip]
    ),
    sc!(
        "finit_module",
        313,
        Module,
        true,
        [Fd, Skip, Int("flags")],
        FDP
    ),
    sc!(
        "delete_module",
        176,
        Module,
        true,
        [Path, Uint("flags")],
        SPEC_PATH_RAW
    ),
    // network
    sc!(
        "socket",
        41,
        Network,
        false,
        [Int("family"), Int("type"), Int("protocol")]
    ),
    sc!(
        "socketpair",
        53,
        Network,
        false,
        [Int("family"), Int("type"), Int("protocol"), FdPair]
    ),
    sc!("connect", 42, Network, true, [Fd, Addr, AddrLen], LADDR),
    sc!("accept", 43, Network, true, [Fd, Addr, AddrLenPtr], LADDR),
    sc!(
        "accept4",
        288,
        Network,
        true,
        [Fd, Addr, AddrLenPtr, Int("flags")],
        LADDR
    ),
    sc!("bind", 49, Network, false, [Fd, Addr, AddrLen]),
    sc!("listen", 50, Network, false, [Fd, Int("backlog")]),
    sc!(
        "sendto",
        44,
        Network,
        false,
        [Fd, Skip, Uint("len"), Int("flags"), Addr, AddrLen]
    ),
    sc!(
        "recvfrom",
        45,
        Network,
        false,
        [Fd, Skip, Uint("size"), Int("flags"), Addr, AddrLenPtr]
    ),
    sc!("sendmsg", 46, Network, false, [Fd, Skip, Int("flags")]),
    sc!("recvmsg", 47, Network, false, [Fd, Skip, Int("flags")]),
    sc!(
        "sendmmsg",
        307,
        Network,
        false,
        [Fd, Skip, Uint("vlen"), Int("flags")]
    ),
    sc!(
        "recvmmsg",
        299,
        Network,
        false,
        [Fd, Skip, Uint("vlen"), Int("flags"), Skip]
    ),
    sc!("shutdown", 48, Network, false, [Fd, Int("how")]),
];

/// Syscall by number (the kernel's `nr`).
pub fn by_nr(nr: u32) -> Option<&'static Syscall> {
    static INDEX: std::sync::OnceLock<Vec<Option<usize>>> = std::sync::OnceLock::new();
    let index = INDEX.get_or_init(|| {
        let mut v = vec![None; MAX_SYSCALLS as usize];
        for (i, s) in SYSCALLS.iter().enumerate() {
            v[s.nr as usize] = Some(i);
        }
        v
    });
    index
        .get(nr as usize)
        .copied()
        .flatten()
        .map(|i| &SYSCALLS[i])
}

pub fn by_name(name: &str) -> Option<&'static Syscall> {
    SYSCALLS.iter().find(|s| s.name == name)
}

/// Resolves a `--syscalls` list. Names or category names (`file`, `network`, ...).
pub fn select(spec: Option<&str>) -> Result<Vec<&'static Syscall>> {
    let Some(spec) = spec else {
        return Ok(SYSCALLS.iter().collect());
    };
    let mut out: Vec<&'static Syscall> = Vec::new();
    let mut unknown = Vec::new();
    for word in spec.split(',').map(str::trim).filter(|w| !w.is_empty()) {
        if let Some(s) = by_name(word) {
            if !out.iter().any(|o| o.nr == s.nr) {
                out.push(s);
            }
        } else if let Some(cat) = SYSCALLS
            .iter()
            .map(|s| s.category)
            .find(|c| c.as_str() == word)
        {
            for s in SYSCALLS.iter().filter(|s| s.category == cat) {
                if !out.iter().any(|o| o.nr == s.nr) {
                    out.push(s);
                }
            }
        } else {
            unknown.push(word.to_string());
        }
    }
    if !unknown.is_empty() {
        let hints: Vec<String> = unknown
            .iter()
            .map(|u| match closest(u) {
                Some(c) => format!("`{u}` (did you mean `{c}`?)"),
                None => format!("`{u}`"),
            })
            .collect();
        bail!(
            "unknown syscall name in --syscalls: {}; `custos collect --list-syscalls` shows the {} traceable syscalls and their categories",
            hints.join(", "),
            SYSCALLS.len()
        );
    }
    if out.is_empty() {
        bail!("--syscalls is empty; give syscall or category names separated by commas");
    }
    Ok(out)
}

fn closest(word: &str) -> Option<&'static str> {
    SYSCALLS
        .iter()
        .map(|s| (edit_distance(word, s.name), s.name))
        .filter(|(d, _)| *d <= 2)
        .min()
        .map(|(_, n)| n)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            cur[j + 1] = (prev[j] + (ca != *cb) as usize)
                .min(prev[j + 1] + 1)
                .min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_consistent() {
        assert!(
            SYSCALLS.len() >= 80,
            "the provenance set has {} syscalls",
            SYSCALLS.len()
        );
        let mut seen = std::collections::HashSet::new();
        for s in SYSCALLS {
            assert!(s.nr < MAX_SYSCALLS, "{} nr {}", s.name, s.nr);
            assert!(seen.insert(s.nr), "duplicate nr for {}", s.name);
            assert!(s.args.len() <= 6, "{}", s.name);
            assert_eq!(by_nr(s.nr).unwrap().name, s.name);
        }
    }

    #[test]
    fn unknown_name_is_a_clear_error() {
        let err = select(Some("openat,opnat")).unwrap_err().to_string();
        assert!(err.contains("`opnat` (did you mean `openat`?)"), "{err}");
        assert_eq!(select(Some("network")).unwrap().len(), 14);
        assert_eq!(select(Some("execve, execve")).unwrap().len(), 1);
    }
}

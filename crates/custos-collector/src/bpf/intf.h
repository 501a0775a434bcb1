/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The contract between the collector's BPF programs and its consumer:
 * record layouts on the three rings, the per-syscall decoding table and the
 * per-CPU loss accounting. Numbers shared by both sides live here once.
 * The pinned scheduler-facing maps are in include/custos/provenance_features.h.
 */
#ifndef CUSTOS_COLLECTOR_INTF_H
#define CUSTOS_COLLECTOR_INTF_H

#ifndef __VMLINUX_H__
typedef unsigned char __u8;
typedef signed char __s8;
typedef unsigned short __u16;
typedef unsigned int __u32;
typedef int __s32;
typedef unsigned long long __u64;
typedef long long __s64;
#endif

#include "provenance_features.h"

/* Syscall numbers index the decoding table; x86_64 has < 512. */
#define CUSTOS_MAX_SYSCALLS        512
/* Hook ids share the `nr` field with syscalls, above every syscall number. */
#define CUSTOS_HOOK_BPRM_CHECK     1000
#define CUSTOS_HOOK_FILE_OPEN      1001
#define CUSTOS_HOOK_FORK           1002 /* a new process, before it can run */
/* An io_uring request, recorded as its syscall twin (args: see below). */
#define CUSTOS_HOOK_IO_URING       1003

/*
 * io_uring requests: opcodes index the io_uring_ops table, filled by user
 * space from its opcode table (uring.rs). An io_uring event carries
 * args[0] = the fd the request named (-1: not known, or a registered file),
 * args[1] = the opcode, args[2] = CUSTOS_URING_EV_* flags.
 */
#define CUSTOS_URING_MAX_OPS       256
/* args[2] of an io_uring event. */
#define CUSTOS_URING_EV_FIXED_FILE 1 /* the request named a registered file (IOSQE_FIXED_FILE) */
#define CUSTOS_URING_EV_AT_SUBMIT  2 /* recorded at submission: it posts no CQE on success
                                        (IOSQE_CQE_SKIP_SUCCESS), so it has no result */

enum custos_uring_op_flags {
	CUSTOS_URING_FILE       = 1 << 0, /* req->file is the object acted on */
	CUSTOS_URING_RW         = 1 << 1, /* read/write: path only on first use */
	CUSTOS_URING_WRITE      = 1 << 2, /* RW: this is the write direction */
	CUSTOS_URING_RET_FD     = 1 << 3, /* the result is a new fd (or a registered slot) */
	CUSTOS_URING_SOCK       = 1 << 4, /* a socket: its peer and own addresses */
	CUSTOS_URING_CLOSE      = 1 << 5, /* close: the fd is in struct io_close */
	CUSTOS_URING_OPEN       = 1 << 6, /* open: flags in struct io_open (write intent) */
	CUSTOS_URING_NO_PATHS   = 1 << 7, /* path strings not captured: delivered incomplete */
};

struct custos_uring_op {
	__u8 traced;
	__u8 critical;       /* always on the reserved ring */
	__u16 flags;         /* enum custos_uring_op_flags */
};

/* The event id is (cpu << CUSTOS_ID_CPU_SHIFT) | seq. */
#define CUSTOS_ID_CPU_SHIFT        48

/* Capture limits. Anything longer is cut and flagged, never dropped. */
#define CUSTOS_ATTR_DATA_MAX       8192  /* attribute bytes per event; power of 2 */
#define CUSTOS_PATH_CAP            1024  /* one user path string, incl. NUL */
#define CUSTOS_NAME_CAP            256   /* one path component (NAME_MAX + NUL) */
#define CUSTOS_PATH_DEPTH          32    /* path components walked up to the root */
#define CUSTOS_DENTRY_PATH_CAP     2048  /* bytes of one resolved path */
#define CUSTOS_ARGV_MAX_ARGS       64    /* exec arguments captured */
#define CUSTOS_ARG_CAP             512   /* one exec argument, incl. NUL */
#define CUSTOS_ARGV_CAP            4096  /* all exec arguments together */
#define CUSTOS_SOCKADDR_CAP        128   /* sizeof(struct sockaddr_storage) */

/* Categories, in output order (docs/collector.md has the syscall table). */
enum custos_category {
	CUSTOS_CAT_PROCESS    = 0,
	CUSTOS_CAT_FILE       = 1,
	CUSTOS_CAT_NETWORK    = 2,
	CUSTOS_CAT_CREDENTIAL = 3,
	CUSTOS_CAT_MODULE     = 4,
	CUSTOS_CAT_MOUNT      = 5,
	CUSTOS_CAT_MEMORY     = 6,
	CUSTOS_CAT_IPC        = 7,
};

/* Drop-counter slots per CPU: which ring refused the record. */
enum custos_drop_slot {
	CUSTOS_DROP_CRITICAL = 0, /* metadata on the reserved ring */
	CUSTOS_DROP_EVENTS   = 1, /* metadata on the best-effort ring */
	CUSTOS_DROP_ATTRS    = 2, /* attribute half (event delivered incomplete) */
	CUSTOS_NR_DROP_SLOTS = 3,
};

/* How the programs decode one syscall (array map, index = syscall nr). */
enum custos_spec_flags {
	CUSTOS_SPEC_NO_EXIT      = 1 << 0, /* exit/exit_group: emitted at entry */
	CUSTOS_SPEC_EXEC         = 1 << 1, /* argv + path captured at entry */
	CUSTOS_SPEC_FD_PATH      = 1 << 2, /* resolve the path of fd_arg's file */
	CUSTOS_SPEC_RET_FD_PATH  = 1 << 3, /* resolve the path of the returned fd */
	CUSTOS_SPEC_RW           = 1 << 4, /* read/write: path only on first use */
	CUSTOS_SPEC_ADDR_OUT     = 1 << 5, /* sockaddr is filled by the kernel; len is a pointer */
	CUSTOS_SPEC_OPEN_HOW     = 1 << 6, /* openat2: flags inside struct open_how */
	CUSTOS_SPEC_PROT_EXEC    = 1 << 7, /* only traced when prot_arg has PROT_EXEC */
	CUSTOS_SPEC_WRITE        = 1 << 8, /* RW: this is the write direction */
	CUSTOS_SPEC_PATH_RAW     = 1 << 9, /* path_arg is not a file here (symlink target, mount source) */
	CUSTOS_SPEC_LOCAL_ADDR   = 1 << 10, /* connect/accept: the socket's own address (ATTR_LADDR) */
	CUSTOS_SPEC_FILE_MAP     = 1 << 11, /* mmap: also traced when it maps a file, whatever its prot */
	CUSTOS_SPEC_RET_FD_ID    = 1 << 12, /* identify the returned fd's file (dev/ino), no path walk */
};

struct custos_syscall_spec {
	__u8 traced;
	__u8 category;       /* enum custos_category */
	__u8 critical;       /* always on the reserved ring */
	__s8 path_arg;       /* user path string, -1 = none */
	__s8 dirfd_arg;      /* its dirfd (-1: relative to cwd) */
	__s8 path2_arg;
	__s8 dirfd2_arg;
	__s8 fd_arg;         /* fd whose file identity is reported */
	__s8 addr_arg;       /* struct sockaddr pointer */
	__s8 addrlen_arg;    /* its length (value, or pointer with ADDR_OUT) */
	__s8 argv_arg;       /* exec argv */
	__s8 open_flags_arg; /* open flags: write intent makes it critical */
	__s8 prot_arg;       /* mmap/mprotect prot */
	__s8 fdpair_arg;     /* int[2] the kernel fills (pipe, pipe2, socketpair) */
	__u16 flags;         /* enum custos_spec_flags */
};

/* Flags of the metadata record. */
enum custos_event_flags {
	CUSTOS_EV_CRITICAL   = 1 << 0, /* sent on the reserved ring */
	CUSTOS_EV_HAS_ATTRS  = 1 << 1, /* an attribute record with this id was submitted first */
	CUSTOS_EV_ATTRS_LOST = 1 << 2, /* the attribute half was dropped: deliver incomplete */
	CUSTOS_EV_NO_RET     = 1 << 3, /* no return value (exit, hooks) */
	CUSTOS_EV_FIRST      = 1 << 4, /* first read/write of this file by this process */
	CUSTOS_EV_HAS_FILE   = 1 << 5, /* dev/ino identify the file of `fd` */
};

/* Fixed-size metadata: CRITICAL or EVENTS ring. */
struct custos_event {
	__u64 id;
	__u64 ktime_ns;      /* bpf_ktime_get_ns at submit */
	__u64 cgroup_id;
	__u64 args[6];
	__s64 ret;
	__u64 ino;           /* with HAS_FILE */
	__u32 dev;
	__u32 pid;           /* tgid */
	__u32 tid;
	__u32 ppid;
	__u32 uid, gid, euid, egid;
	__u32 mnt_ns, pid_ns;
	__u16 nr;            /* syscall nr, or CUSTOS_HOOK_* */
	__u16 flags;         /* enum custos_event_flags */
	__u32 open_flags;    /* decoded open flags (openat2, file_open) */
	__u32 file_mode;     /* with HAS_FILE: i_mode (type bits name pipes, sockets) */
	__s32 fd_pair[2];    /* pipe/pipe2/socketpair: the two new fds */
	char comm[16];
	__u32 pgid;          /* process group: the job a workflow follows (docs/workflows.md) */
};

/*
 * Attribute record on the ATTRS ring: header then TLVs, each
 * { u8 kind, u8 flags, u16 len, data[len] }. Joined to the metadata by id.
 */
struct custos_attr_hdr {
	__u64 id;
	__u32 len;           /* TLV bytes after this header */
	__u32 pad;
};

enum custos_attr_kind {
	CUSTOS_ATTR_PATH        = 1, /* user path string as passed */
	CUSTOS_ATTR_PATH_BASE   = 2, /* dir the relative PATH is resolved against (components) */
	CUSTOS_ATTR_PATH2       = 3,
	CUSTOS_ATTR_PATH2_BASE  = 4,
	CUSTOS_ATTR_FILE_PATH   = 5, /* resolved path of the file (components) */
	CUSTOS_ATTR_ARGV        = 6, /* NUL-separated arguments */
	CUSTOS_ATTR_ADDR        = 7, /* raw struct sockaddr */
	CUSTOS_ATTR_ROOT        = 8, /* the task's root when not the host's: u32 dev, u64 inode */
	CUSTOS_ATTR_LADDR       = 9, /* the socket's own address, as a struct sockaddr_in/in6 */
};

/* TLV flags. */
#define CUSTOS_ATTR_TRUNCATED 1

/*
 * Resolved paths ("components") are written leaf first, NUL-separated,
 * because that is the order a dentry walk visits them; the consumer reverses.
 */

/* Per-CPU loss accounting (per-CPU array, one entry). */
struct custos_cpu_state {
	__u64 seq;                          /* incremented before every submit attempt */
	__u64 drops[CUSTOS_NR_DROP_SLOTS];  /* submit attempts a ring refused */
	__u64 since_sample;                 /* events since ring availability was sampled */
	/* Syscall entries / exits a backup copy of the program saw first
	 * (the first copy skipped them): see SYSCALL_COPY in main.bpf.c. */
	__u64 covered[2];
	/* Tracepoint runs that found the task's previous tracepoint of the same
	 * kind: the other one went unseen by every copy. [0]: entries found
	 * unseen at the exit, [1]: exits found unseen at the next entry. */
	__u64 unseen[2];
	/* Of those, syscalls that would have been recorded: lost, each once. */
	__u64 skipped;
	/* Hook runs (fork, BPF-LSM) the first copy of a hook program made, and
	 * runs any copy handled: see HOOK_COPY in main.bpf.c. */
	__u64 hook_runs_first;
	__u64 hook_handled;
	/* Features-only mode: events counted in their task's features and not
	 * recorded (0 in a recording run, where submit() counts them). */
	__u64 counted;
	/* The hold (custos sched's): set by submit() when a ring's free
	 * space fell under the reserve; the syscall program then kicks this
	 * CPU (hold_kick) and clears it. Kicks made, summed, and of them those
	 * deferred to the task's return to user mode (its hold stop). */
	__u64 hold_kick_pending;
	__u64 hold_kicks;
	__u64 hold_stops;
};

#endif /* CUSTOS_COLLECTOR_INTF_H */

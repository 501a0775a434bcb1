// SPDX-License-Identifier: GPL-2.0-only
/*
 * Custos provenance collector: syscall tracepoints (and BPF-LSM hooks where
 * the kernel allows them) feeding a loss-aware dual-path pipeline.
 *
 * Every event takes the next number of its CPU's sequence whether or not its
 * ring accepts it, so a record a ring refuses leaves a gap the consumer can
 * see, and the per-CPU drop counters say which ring refused it. The number is
 * taken once the ring has answered (see submit()). Metadata is fixed-size and
 * goes to the reserved ring (security-critical events) or the best-effort ring;
 * variable-length attributes go to a third ring under the same event id.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "intf.h"

char LICENSE[] SEC("license") = "GPL";

/* The collector's own process: its threads are never traced (they would feed
 * back into the rings they drain). */
const volatile __u32 collector_tgid = 0;
/* log2 of a sixteenth of each ring, set by user space with the ring sizes:
 * a record that takes the bytes waiting across a multiple of it wakes the
 * consumer (see wakeup_policy). */
const volatile __u32 wake_shift_critical = 8;
const volatile __u32 wake_shift_events = 8;
const volatile __u32 wake_shift_attrs = 8;
/* Events per CPU between samples of ring availability: sampling every event
 * would make every CPU write the same cache line. */
const volatile __u32 availability_sample_every = 64;
/* Non-zero while every copy of the syscall programs is attached (set by
 * user space after attaching, cleared before detaching): only then does a
 * tracepoint found unseen mean a skip (see note_unseen). */
volatile __u32 skip_epoch = 0;
/* Features-only mode (`custos collect --features-only`): every event the
 * programs would record is counted in its task's features (task_features,
 * for the scheduler) and nothing else happens: no number is taken, no ring
 * is touched, nothing is built. It measures per-task event rates for a
 * scheduler protecting another provenance consumer (auditd, bpftrace) at the
 * lowest cost. Read-only, so the verifier drops the recording path. */
const volatile bool features_only = false;
/* The host's root directory (init's, as the kernel numbers devices), set by
 * user space. Paths are relative to their task's root: a task whose root is
 * another (a container's, a chroot) says which, so that its /etc/hostname
 * is not taken for the host's (docs/containers.md). */
const volatile __u32 host_root_dev = 0;
const volatile __u64 host_root_ino = 0;

#define AT_FDCWD_VAL    -100
#define PROT_EXEC_VAL   0x4
#define MAP_ANONYMOUS_VAL 0x20
#define O_ACCMODE_VAL   03
#define O_CREAT_VAL     0100
#define O_TRUNC_VAL     01000
#define WRITE_INTENT(f) (((f) & O_ACCMODE_VAL) || ((f) & (O_CREAT_VAL | O_TRUNC_VAL)))
#define ATTR_MASK       (CUSTOS_ATTR_DATA_MAX - 1)

/* Sizes are set by user space before load (--*-ring-kb). */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20);
} ring_critical SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 24);
} ring_events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 24);
} ring_attrs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, CUSTOS_MAX_SYSCALLS);
	__type(key, __u32);
	__type(value, struct custos_syscall_spec);
} syscall_specs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct custos_cpu_state);
} cpu_state SEC(".maps");

/* Hooks beside the syscall tracepoints, each with HOOK_COPIES programs. */
enum hook_kind {
	HOOK_KIND_FORK,
	HOOK_KIND_BPRM_CHECK,
	HOOK_KIND_FILE_OPEN,
	NR_HOOK_KINDS,
};

/* Arguments saved at entry until the syscall returns, in the task itself:
 * no hashing, and freed with the task (a thread killed inside a syscall
 * never reaches its exit tracepoint). */
struct inflight {
	__u64 args[6];
	__u32 nr;
	__u32 active;
	/* Which tracepoint the task passed last, by any copy of its program:
	 * PHASE_ENTER or PHASE_EXIT. Entries and exits alternate, so a copy that
	 * finds the phase already moved knows an earlier copy saw this syscall. */
	__u32 phase;
	/* skip_epoch when the phase was recorded. */
	__u32 epoch;
	/* Syscall entries this task made (by whichever copy saw them). */
	__u32 calls;
	/* The hook run each kind of hook handled last, as (object, calls):
	 * the copies of a hook program see the same run one after the other
	 * (see hook_first_to_see). */
	__u32 hook_call[NR_HOOK_KINDS];
	__u64 hook_object[NR_HOOK_KINDS];
};

#define PHASE_ENTER 1
#define PHASE_EXIT  2 /* 0: a task no copy has seen yet (a fork child's first hit is an exit) */

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct inflight);
} inflight SEC(".maps");

struct attr_buf {
	struct custos_attr_hdr hdr;
	/* Twice the limit so that masked offsets plus a fixed read size stay
	 * inside the buffer, which is what the verifier needs to see. */
	__u8 data[CUSTOS_ATTR_DATA_MAX * 2];
	/* Loop cursor kept in memory, not in a register: the verifier then sees
	 * the same state every iteration instead of one per possible length. */
	__u32 cursor;
	__u32 pad;
};

/* exec's arguments live in the old image, gone once exec succeeds: they are
 * captured at entry and parked here, by tgid (a non-leader thread's exec
 * returns under the leader's tid), until the exit tracepoint. LRU: an exec
 * killed half-way never returns, and its entry must not pin a slot forever.
 * (Task storage would be the natural home, but 7.x kernels refuse to
 * allocate a 16 KiB element from a tracing program.) */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 256);
	__type(key, __u32);
	__type(value, struct attr_buf);
} exec_attrs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct attr_buf);
} attr_scratch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct custos_event);
} event_scratch SEC(".maps");

/* (process, file, direction) pairs already reported: the first read or
 * write is the provenance edge and carries the path; later ones do not. */
struct rw_key {
	__u64 ino;
	__u32 dev;
	__u32 tgid;
	__u32 write;
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct rw_key);
	__type(value, __u8);
} rw_seen SEC(".maps");

/* Provenance features for the scheduler (include/custos/provenance_features.h). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, CUSTOS_MAX_TRACKED_TASKS);
	__type(key, __u32);
	__type(value, struct custos_task_features);
} task_features SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct custos_global_features);
} global_features SEC(".maps");

/* x86: thread_info.status bit of a task inside a 32-bit (ia32) syscall,
 * whose numbers mean other syscalls than the 64-bit table. */
#define TS_COMPAT_VAL 0x0002

static __always_inline int in_compat_syscall(void)
{
	struct task_struct *t = bpf_get_current_task_btf();

	return t->thread_info.status & TS_COMPAT_VAL;
}

static __always_inline __u64 arg_at(const __u64 *args, int i)
{
	switch (i) {
	case 0: return args[0];
	case 1: return args[1];
	case 2: return args[2];
	case 3: return args[3];
	case 4: return args[4];
	case 5: return args[5];
	}
	return 0;
}

/* Whether this call of a syscall that filters on its arguments is traced:
 * mprotect when it makes memory executable; mmap then too, and whenever it
 * maps a file (mmap(addr, len, prot, flags, fd, off)): a mapping reads the
 * file, and a shared writable one writes it with no write syscall after. */
static __always_inline bool args_traced(const struct custos_syscall_spec *spec, const __u64 *args)
{
	if (!(spec->flags & CUSTOS_SPEC_PROT_EXEC))
		return true;
	if (arg_at(args, spec->prot_arg) & PROT_EXEC_VAL)
		return true;
	return (spec->flags & CUSTOS_SPEC_FILE_MAP) && !(args[3] & MAP_ANONYMOUS_VAL) &&
	       (int)args[4] >= 0;
}

/* ---- attribute builders (TLV into an attr_buf) ---- */

static __always_inline __u32 put_tlv_hdr(struct attr_buf *b, __u32 off, __u8 kind,
					  __u8 flags, __u32 len)
{
	__u32 o = off & ATTR_MASK;

	b->data[o] = kind;
	b->data[(o + 1) & ATTR_MASK] = flags;
	b->data[(o + 2) & ATTR_MASK] = len & 0xff;
	b->data[(o + 3) & ATTR_MASK] = (len >> 8) & 0xff;
	return off + 4 + len;
}

/* No room left for the attribute: record that it existed and was cut. */
static __always_inline __u32 put_cut(struct attr_buf *b, __u32 off, __u8 kind)
{
	if (off > CUSTOS_ATTR_DATA_MAX - 4)
		return off;
	return put_tlv_hdr(b, off, kind, CUSTOS_ATTR_TRUNCATED, 0);
}

/*
 * The builders below are global functions: the verifier checks each once,
 * instead of once per call site, which keeps the programs under its limit.
 * Kernel and user pointers therefore travel as plain __u64.
 */
__noinline __u32 put_user_str(struct attr_buf *b, __u32 off, __u32 kind, __u64 us)
{
	const char *s = (const char *)us;
	__u32 o;
	long n;
	__u8 flags = 0;
	char last = 0;

	if (!b || off > CUSTOS_ATTR_DATA_MAX - 4 - CUSTOS_PATH_CAP)
		return b ? put_cut(b, off, kind) : off;
	o = off & ATTR_MASK;
	n = bpf_probe_read_user_str(&b->data[(o + 4) & ATTR_MASK], CUSTOS_PATH_CAP, s);
	if (n <= 0)
		return off;
	if (n == CUSTOS_PATH_CAP &&
	    !bpf_probe_read_user(&last, 1, s + CUSTOS_PATH_CAP - 1) && last)
		flags = CUSTOS_ATTR_TRUNCATED;
	return put_tlv_hdr(b, off, kind, flags, n & (CUSTOS_PATH_CAP * 2 - 1));
}

__noinline __u32 put_argv(struct attr_buf *b, __u32 off, __u64 uargv)
{
	const char *const *argv = (const char *const *)uargv;
	__u32 start, len;
	const char *p;
	long n;
	char last;
	int i;

	if (!b || off > CUSTOS_ATTR_DATA_MAX - 4 - CUSTOS_ARGV_CAP)
		return b ? put_cut(b, off, CUSTOS_ATTR_ARGV) : off;
	start = off & ATTR_MASK;
	b->data[(start + 1) & ATTR_MASK] = 0;
	b->cursor = 0;
	for (i = 0; i < CUSTOS_ARGV_MAX_ARGS; i++) {
		p = NULL;
		if (bpf_probe_read_user(&p, sizeof(p), &argv[i]) || !p)
			break;
		len = b->cursor & (CUSTOS_ARGV_CAP * 2 - 1);
		if (len > CUSTOS_ARGV_CAP - CUSTOS_ARG_CAP) {
			b->data[(start + 1) & ATTR_MASK] = CUSTOS_ATTR_TRUNCATED;
			break;
		}
		n = bpf_probe_read_user_str(&b->data[(start + 4 + len) & ATTR_MASK],
					    CUSTOS_ARG_CAP, p);
		if (n <= 0)
			break;
		b->cursor = len + (n & (CUSTOS_ARG_CAP * 2 - 1));
		if (n == CUSTOS_ARG_CAP) {
			last = 0;
			bpf_probe_read_user(&last, 1, p + CUSTOS_ARG_CAP - 1);
			if (last)
				b->data[(start + 1) & ATTR_MASK] = CUSTOS_ATTR_TRUNCATED;
		}
	}
	if (i == CUSTOS_ARGV_MAX_ARGS) {
		p = NULL;
		if (!bpf_probe_read_user(&p, sizeof(p), &argv[i]) && p)
			b->data[(start + 1) & ATTR_MASK] = CUSTOS_ATTR_TRUNCATED;
	}
	len = b->cursor & (CUSTOS_ARGV_CAP * 2 - 1);
	b->data[start] = CUSTOS_ATTR_ARGV;
	b->data[(start + 2) & ATTR_MASK] = len & 0xff;
	b->data[(start + 3) & ATTR_MASK] = (len >> 8) & 0xff;
	return off + 4 + len;
}

/* Walks dentry -> root, crossing mounts, writing names leaf first. */
__noinline __u32 put_dentry_path(struct attr_buf *b, __u32 off, __u32 kind,
				 __u64 kdentry, __u64 kvfsmnt)
{
	/* Cast to BTF-typed pointers: the walk then uses plain (fault-safe)
	 * loads instead of a probe-read helper call per field. */
	struct dentry *dentry = bpf_core_cast((void *)kdentry, struct dentry);
	struct vfsmount *vfsmnt = bpf_core_cast((void *)kvfsmnt, struct vfsmount);
	struct mount *mnt, *mnt_parent;
	struct dentry *parent, *mnt_root, *task_root = NULL;
	struct vfsmount *task_root_mnt = NULL;
	struct fs_struct *fs;
	const unsigned char *name;
	__u32 start, len;
	long n;
	int i;

	if (!b || !kdentry || !kvfsmnt)
		return off;
	if (off > CUSTOS_ATTR_DATA_MAX - 4 - CUSTOS_DENTRY_PATH_CAP)
		return put_cut(b, off, kind);
	start = off & ATTR_MASK;
	b->data[(start + 1) & ATTR_MASK] = 0;
	b->cursor = 0;
	/* Names are relative to the task's root, as d_path makes them and as
	 * the task wrote them: a chrooted task's /etc/passwd is under its root
	 * (which put_root names), not the host's /jail/etc/passwd. */
	fs = bpf_get_current_task_btf()->fs;
	if (fs) {
		task_root = fs->root.dentry;
		task_root_mnt = fs->root.mnt;
	}
	mnt = bpf_core_cast((void *)kvfsmnt - bpf_core_field_offset(struct mount, mnt), struct mount);
	for (i = 0; i < CUSTOS_PATH_DEPTH; i++) {
		if (dentry == task_root && vfsmnt == task_root_mnt)
			break;
		mnt_root = vfsmnt->mnt_root;
		parent = dentry->d_parent;
		if (dentry == mnt_root || dentry == parent) {
			mnt_parent = mnt->mnt_parent;
			if (dentry != mnt_root || mnt == mnt_parent)
				break; /* the root, or a pseudo file system */
			dentry = mnt->mnt_mountpoint;
			mnt = mnt_parent;
			vfsmnt = &mnt->mnt;
			continue;
		}
		len = b->cursor & (CUSTOS_DENTRY_PATH_CAP * 2 - 1);
		if (len > CUSTOS_DENTRY_PATH_CAP - CUSTOS_NAME_CAP) {
			b->data[(start + 1) & ATTR_MASK] = CUSTOS_ATTR_TRUNCATED;
			break;
		}
		name = dentry->d_name.name;
		n = bpf_probe_read_kernel_str(&b->data[(start + 4 + len) & ATTR_MASK],
					      CUSTOS_NAME_CAP, name);
		if (n <= 1)
			break;
		b->cursor = len + (n & (CUSTOS_NAME_CAP * 2 - 1));
		dentry = parent;
	}
	if (i == CUSTOS_PATH_DEPTH)
		b->data[(start + 1) & ATTR_MASK] = CUSTOS_ATTR_TRUNCATED;
	len = b->cursor & (CUSTOS_DENTRY_PATH_CAP * 2 - 1);
	b->data[start] = kind;
	b->data[(start + 2) & ATTR_MASK] = len & 0xff;
	b->data[(start + 3) & ATTR_MASK] = (len >> 8) & 0xff;
	return off + 4 + len;
}

static __always_inline __u32 put_file_path(struct attr_buf *b, __u32 off, __u8 kind,
					   struct file *f)
{
	if (!f)
		return off;
	/* Probe reads: the global function takes plain numbers, and a pointer
	 * loaded directly stays a pointer to the verifier. */
	return put_dentry_path(b, off, kind, (__u64)BPF_CORE_READ(f, f_path.dentry),
			       (__u64)BPF_CORE_READ(f, f_path.mnt));
}

/* The current task's file at @fd. Direct loads through the BTF-typed task
 * (one probe read, for the array element: the verifier cannot type an
 * element at a variable index): each probe-read helper call costs tens of
 * nanoseconds, a fault-safe load about one. */
static __always_inline struct file *fd_file_of(struct task_struct *t, __s64 fd)
{
	struct files_struct *files;
	struct fdtable *fdt;
	struct file **fds;
	struct file *f = NULL;

	if (fd < 0)
		return NULL;
	files = t->files;
	if (!files)
		return NULL;
	fdt = files->fdt;
	if (!fdt || (__u64)fd >= fdt->max_fds)
		return NULL;
	fds = fdt->fd;
	bpf_probe_read_kernel(&f, sizeof(f), &fds[fd]);
	return f;
}

static __always_inline struct file *fd_file(__s64 fd)
{
	return fd_file_of(bpf_get_current_task_btf(), fd);
}

/* A relative user path: also record the directory it is relative to. */
__noinline __u32 put_path_base(struct attr_buf *b, __u32 off, __u32 kind,
			       __u64 uupath, __s64 dirfd)
{
	const char *upath = (const char *)uupath;
	struct task_struct *t = bpf_get_current_task_btf();
	struct file *f;
	char c = 0;

	if (!b || bpf_probe_read_user(&c, 1, upath) || c == '/' || c == 0)
		return off;
	if ((__s32)dirfd != AT_FDCWD_VAL) {
		f = fd_file((__s32)dirfd);
		return put_file_path(b, off, kind, f);
	}
	return put_dentry_path(b, off, kind, (__u64)BPF_CORE_READ(t, fs, pwd.dentry),
			       (__u64)BPF_CORE_READ(t, fs, pwd.mnt));
}

__noinline __u32 put_sockaddr(struct attr_buf *b, __u32 off, __u64 uaddr, __u32 len)
{
	const void *addr = (const void *)uaddr;
	__u32 o;

	if (!b || !addr || !len)
		return off;
	if (off > CUSTOS_ATTR_DATA_MAX - 4 - CUSTOS_SOCKADDR_CAP)
		return put_cut(b, off, CUSTOS_ATTR_ADDR);
	if (len > CUSTOS_SOCKADDR_CAP)
		len = CUSTOS_SOCKADDR_CAP;
	o = off & ATTR_MASK;
	if (bpf_probe_read_user(&b->data[(o + 4) & ATTR_MASK], len, addr))
		return off;
	return put_tlv_hdr(b, off, CUSTOS_ATTR_ADDR, 0, len);
}

/*
 * The socket's own address, as a struct sockaddr_in/in6 (ATTR_LADDR): the
 * client's ip:port of a connect, the server's of an accepted connection. With
 * the peer's address (ATTR_ADDR) it is the connection's 4-tuple, which is how
 * two hosts' streams are joined at the network hop. Only once the kernel has
 * given the socket a port (a failed connect has none).
 */
#define AF_INET_VAL   2
#define AF_INET6_VAL  10
#define S_IFMT_VAL    00170000
#define S_IFSOCK_VAL  0140000

/* @peer: the address of the other end (ATTR_ADDR, once connected), else
 * the socket's own (ATTR_LADDR). */
__noinline __u32 put_sock_addr(struct attr_buf *b, __u32 off, __u64 file, __u32 peer)
{
	/* A plain integer in, as the verifier wants of a global function's args. */
	struct file *f = (struct file *)file;
	struct socket *sock;
	struct sock *sk;
	__u16 family, port;
	__u32 o, len;
	__u8 kind = peer ? CUSTOS_ATTR_ADDR : CUSTOS_ATTR_LADDR;

	if (!b || !f || (BPF_CORE_READ(f, f_inode, i_mode) & S_IFMT_VAL) != S_IFSOCK_VAL)
		return off;
	sock = BPF_CORE_READ(f, private_data);
	sk = sock ? BPF_CORE_READ(sock, sk) : NULL;
	if (!sk)
		return off;
	family = BPF_CORE_READ(sk, __sk_common.skc_family);
	if (peer) {
		port = BPF_CORE_READ(sk, __sk_common.skc_dport); /* network order */
		port = (port >> 8) | ((port & 0xff) << 8);
	} else {
		port = BPF_CORE_READ(sk, __sk_common.skc_num);
	}
	if (port == 0 || (family != AF_INET_VAL && family != AF_INET6_VAL))
		return off;
	len = family == AF_INET_VAL ? 16 : 28;
	if (off > CUSTOS_ATTR_DATA_MAX - 4 - 28)
		return put_cut(b, off, kind);
	o = (off + 4) & ATTR_MASK;
	for (int i = 0; i < 28; i++)
		b->data[(o + i) & ATTR_MASK] = 0;
	__builtin_memcpy(&b->data[o], &family, sizeof(family));
	/* sin_port / sin6_port: network order, as in a sockaddr. */
	b->data[(o + 2) & ATTR_MASK] = port >> 8;
	b->data[(o + 3) & ATTR_MASK] = port & 0xff;
	if (family == AF_INET_VAL) {
		__u32 a = peer ? BPF_CORE_READ(sk, __sk_common.skc_daddr) :
				 BPF_CORE_READ(sk, __sk_common.skc_rcv_saddr);

		__builtin_memcpy(&b->data[(o + 4) & ATTR_MASK], &a, sizeof(a));
	} else {
		struct in6_addr a6 = peer ? BPF_CORE_READ(sk, __sk_common.skc_v6_daddr) :
					    BPF_CORE_READ(sk, __sk_common.skc_v6_rcv_saddr);

		__builtin_memcpy(&b->data[(o + 8) & ATTR_MASK], &a6, sizeof(a6));
	}
	return put_tlv_hdr(b, off, kind, 0, len);
}

static __always_inline __u32 put_local_addr(struct attr_buf *b, __u32 off, __u64 file)
{
	return put_sock_addr(b, off, file, 0);
}

/* ---- features and submission ---- */

static __always_inline void ewma_roll(struct custos_task_features *tf, __u64 now)
{
	__u64 windows = (now - tf->window_start_ns) / CUSTOS_RATE_WINDOW_NS;
	int i;

	if (!windows)
		return;
	tf->event_rate = tf->event_rate - (tf->event_rate >> CUSTOS_RATE_EWMA_SHIFT) +
			 (tf->window_events >> CUSTOS_RATE_EWMA_SHIFT);
	tf->drop_rate = tf->drop_rate - (tf->drop_rate >> CUSTOS_RATE_EWMA_SHIFT) +
			(tf->window_drops >> CUSTOS_RATE_EWMA_SHIFT);
	tf->kin_rate = tf->kin_rate - (tf->kin_rate >> CUSTOS_RATE_EWMA_SHIFT) +
		       (tf->kin_window_events >> CUSTOS_RATE_EWMA_SHIFT);
	/* Idle windows decay the rates; a few are enough to reach zero. */
	for (i = 1; i < 8 && i < windows; i++) {
		tf->event_rate -= tf->event_rate >> CUSTOS_RATE_EWMA_SHIFT;
		tf->drop_rate -= tf->drop_rate >> CUSTOS_RATE_EWMA_SHIFT;
		tf->kin_rate -= tf->kin_rate >> CUSTOS_RATE_EWMA_SHIFT;
	}
	if (windows >= 8) {
		tf->event_rate = 0;
		tf->drop_rate = 0;
		tf->kin_rate = 0;
	}
	tf->window_start_ns = now;
	tf->window_events = 0;
	tf->window_drops = 0;
	tf->kin_window_events = 0;
}

/* Called in the thread itself: its events and drops, in its own entry. */
static __always_inline void account_task(__u32 tid, __u64 now, int dropped)
{
	struct custos_task_features *tf, fresh = {};
	__u64 start = bpf_get_current_task_btf()->start_time;

	tf = bpf_map_lookup_elem(&task_features, &tid);
	if (!tf || tf->start_time_ns != start) {
		/* No entry, or one a dead thread with this tid left (it exited
		 * while no collector ran): this thread starts from zero. */
		fresh.start_time_ns = start;
		fresh.window_start_ns = now;
		bpf_map_update_elem(&task_features, &tid, &fresh, BPF_ANY);
		tf = bpf_map_lookup_elem(&task_features, &tid);
		if (!tf)
			return;
	}
	ewma_roll(tf, now);
	tf->events_total++;
	tf->window_events++;
	if (dropped) {
		tf->drops_total++;
		tf->window_drops++;
	}
}

/*
 * The hold (custos sched's, issue 29). A ring whose free space is under
 * the reserve the consumer publishes (what one syscall can write, times the
 * CPUs, times the syscalls that may run before a producer is off its CPU)
 * stops this producer at the syscall that crossed it, not at the next tick:
 * the syscall program kicks its own CPU (hold_kick) and the scheduler holds
 * the task. The free space goes to the scheduler with it, fresher than the
 * samples. Only while such a scheduler says it is there (hold_sched_ns).
 */
static __always_inline void note_hold_pressure(struct custos_cpu_state *cs, int ring,
					       __u64 waiting)
{
	struct custos_global_features *g;
	__u32 zero = 0;
	__u64 size, reserve;

	g = bpf_map_lookup_elem(&global_features, &zero);
	if (!g || ring < 0 || ring >= CUSTOS_NR_RINGS)
		return;
	size = g->ring_size[ring];
	reserve = g->hold_reserve_bytes[ring];
	if (!reserve || waiting > size || size - waiting >= reserve)
		return;
	/* Only a scheduler holding producers wants the kick. */
	if (bpf_ktime_get_ns() - g->hold_sched_ns > CUSTOS_HOLD_SCHED_FRESH_NS)
		return;
	g->ring_free_bytes[ring] = size - waiting;
	cs->hold_kick_pending = 1;
}

/*
 * A ring's free bytes. BPF_RB_AVAIL_DATA reads the consumer's position and
 * then the producers' without their lock, so while both move it can exceed
 * the ring's size (kernel/bpf/ringbuf.c): a full ring, not a free space
 * that wrapped round to 2^64.
 */
static __always_inline __u64 ring_free(void *ring, __u64 size)
{
	__u64 waiting = bpf_ringbuf_query(ring, BPF_RB_AVAIL_DATA);

	return waiting < size ? size - waiting : 0;
}

static __always_inline void sample_availability(struct custos_cpu_state *cs)
{
	struct custos_global_features *g;
	__u32 zero = 0;
	__u64 size;

	if (++cs->since_sample < availability_sample_every)
		return;
	cs->since_sample = 0;
	g = bpf_map_lookup_elem(&global_features, &zero);
	if (!g)
		return;
	size = bpf_ringbuf_query(&ring_critical, BPF_RB_RING_SIZE);
	g->ring_size[CUSTOS_RING_CRITICAL] = size;
	g->ring_free_bytes[CUSTOS_RING_CRITICAL] = ring_free(&ring_critical, size);
	size = bpf_ringbuf_query(&ring_events, BPF_RB_RING_SIZE);
	g->ring_size[CUSTOS_RING_EVENTS] = size;
	g->ring_free_bytes[CUSTOS_RING_EVENTS] = ring_free(&ring_events, size);
	size = bpf_ringbuf_query(&ring_attrs, BPF_RB_RING_SIZE);
	g->ring_size[CUSTOS_RING_ATTRS] = size;
	g->ring_free_bytes[CUSTOS_RING_ATTRS] = ring_free(&ring_attrs, size);
}

/* Direct loads through the BTF-typed current task: the verifier turns them
 * into fault-safe loads, far cheaper than one probe-read helper call each. */
static __always_inline void fill_task_of(struct custos_event *e, struct task_struct *t)
{
	const struct cred *cred = t->cred;
	struct nsproxy *ns = t->nsproxy;
	struct css_set *cgroups = t->cgroups;
	const __u64 *comm = (const __u64 *)t->comm;

	/* What bpf_get_current_pid_tgid, _cgroup_id and _comm return, loaded
	 * without a helper call each (calls and returns are dear on kernels
	 * with return-stack mitigations). */
	e->pid = t->tgid;
	e->tid = t->pid;
	e->ppid = t->real_parent->tgid;
	if (cred) {
		e->uid = cred->uid.val;
		e->gid = cred->gid.val;
		e->euid = cred->euid.val;
		e->egid = cred->egid.val;
	}
	if (ns) {
		e->mnt_ns = ns->mnt_ns->ns.inum;
		e->pid_ns = ns->pid_ns_for_children->ns.inum;
	}
	if (cgroups)
		e->cgroup_id = cgroups->dfl_cgrp->kn->id;
	((__u64 *)e->comm)[0] = comm[0];
	((__u64 *)e->comm)[1] = comm[1];
	/* The group as the initial pid namespace numbers it, like pid and tid. */
	if (t->signal && t->signal->pids[PIDTYPE_PGID])
		e->pgid = t->signal->pids[PIDTYPE_PGID]->numbers[0].nr;
}

/*
 * Waking the consumer for every record costs more than the record itself
 * (an irq_work, a self-interrupt and a wake-up per event). The consumer
 * drains until every ring is empty before it sleeps, and then for at most
 * 10 ms, so it needs a wake-up only when data piles up while it sleeps: a
 * record wakes it when it takes the bytes waiting in its ring across
 * another sixteenth of the ring (the first at 1/16 full), at most 16
 * wake-ups per ring's worth of data. (Waking on every record above 1/16
 * full, as before, made a consumer that was behind, and so awake, cost each
 * producer a wake-up per event: a sixfold slower producer in the drain
 * benchmark.) @before, @after: the bytes waiting without and with the record.
 */
static __always_inline __u64 wakeup_policy(__u64 before, __u64 after, __u32 wake_shift)
{
	return (before >> wake_shift) != (after >> wake_shift) ? BPF_RB_FORCE_WAKEUP :
								  BPF_RB_NO_WAKEUP;
}

/* A record's bytes in a ring: its header and its length, rounded up to 8. */
static __always_inline __u64 ring_record_bytes(__u64 len)
{
	return (len + BPF_RINGBUF_HDR_SZ + 7) & ~7ULL;
}

/*
 * Programs may run preemptible: LSM hooks always, and since syscall
 * tracepoints became faultable (7.x) the raw sys_enter/sys_exit ones too.
 * Preempted between taking a sequence number and committing its record, a
 * producer could wait in a run queue for seconds (its number would be
 * settled as lost, then arrive), and another task's program on this CPU
 * would overwrite the per-CPU scratch records half built. Every stretch
 * from building a record to committing it therefore runs with preemption
 * off (a few microseconds).
 */
extern void bpf_preempt_disable(void) __ksym;
extern void bpf_preempt_enable(void) __ksym;
/* Weak: kernels without sched_ext load the collector as well (and never
 * kick). A tracing program may call it (scx_kfunc_set_any). */
extern void scx_bpf_kick_cpu(s32 cpu, u64 flags) __ksym __weak;
#define CUSTOS_SCX_KICK_PREEMPT (1ULL << 1) /* enum scx_kick_flags, kernel ABI */

/*
 * The hold stop: a producer kicked inside this program stops there, and
 * while it is off its CPU that copy is skipped for every other task on the
 * CPU, so the scheduler can hold only one such task per CPU; the others
 * went back to leave the program and were kicked inside it again at their
 * next syscall (a bounce, one more syscall a round, for the whole hold).
 * So the kick is deferred to the task's return to user mode, through a
 * task work: there it is outside every copy, and any number of producers
 * can be held. One task work per thread (an LRU: a swarm cannot fill it);
 * `armed` while it waits, so the exit of the syscall that armed it at entry
 * does not arm it again.
 */
struct hold_stop {
	struct bpf_task_work work;
	__u32 armed;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8192);
	__type(key, __u32);
	__type(value, struct hold_stop);
} hold_stops SEC(".maps");

/* Weak, either one: kernels before 6.18 have neither, and fall back to the
 * kick inside the program. 6.18 takes the program's aux as an argument
 * (__prog, filled in by the verifier); 7.x names that the _impl and adds
 * the plain one, whose _impl no longer matches this prototype. */
extern int bpf_task_work_schedule_resume(struct task_struct *task, struct bpf_task_work *tw,
					 void *map__map, bpf_task_work_callback_t callback) __ksym __weak;
extern int bpf_task_work_schedule_resume_impl(struct task_struct *task, struct bpf_task_work *tw,
					      void *map__map, bpf_task_work_callback_t callback,
					      void *aux__prog) __ksym __weak;

/*
 * The hold stop itself, in the producer on its way back to user mode: it
 * says it is there (task_features.hold_stop, which the scheduler reads to
 * hold it without a copy to spare) and kicks its CPU; the switch comes as
 * preemption is turned back on, and it goes on from here when released.
 */
static int hold_stop_run(struct bpf_map *map, void *key, void *value)
{
	struct hold_stop *hs = value;
	struct custos_task_features *tf;
	__u32 tid = (__u32)bpf_get_current_pid_tgid();

	hs->armed = 0;
	if (!bpf_ksym_exists(scx_bpf_kick_cpu))
		return 0;
	bpf_preempt_disable();
	tf = bpf_map_lookup_elem(&task_features, &tid);
	if (tf)
		tf->hold_stop = 1;
	scx_bpf_kick_cpu(bpf_get_smp_processor_id(), CUSTOS_SCX_KICK_PREEMPT);
	bpf_preempt_enable();
	/* Looked up again: held for seconds, the entry may be another's. */
	tf = bpf_map_lookup_elem(&task_features, &tid);
	if (tf)
		tf->hold_stop = 0;
	return 0;
}

enum { HOLD_STOP_NONE, HOLD_STOP_ARMED, HOLD_STOP_WAITING };

/* Arms the current task's hold stop: HOLD_STOP_NONE if it cannot be (then
 * the kick lands inside the program, as before), HOLD_STOP_WAITING if an
 * earlier kick (its syscall's entry) armed it already. */
static __always_inline int hold_stop_arm(void)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct hold_stop *hs, fresh = {};
	__u32 tid = task->pid;
	int err;

	hs = bpf_map_lookup_elem(&hold_stops, &tid);
	if (!hs) {
		bpf_map_update_elem(&hold_stops, &tid, &fresh, BPF_NOEXIST);
		hs = bpf_map_lookup_elem(&hold_stops, &tid);
		if (!hs)
			return HOLD_STOP_NONE;
	}
	if (hs->armed)
		return HOLD_STOP_WAITING;
	/* One test per branch: clang folded two existence tests into one
	 * OR of the addresses, which the verifier refuses. */
	if (bpf_ksym_exists(bpf_task_work_schedule_resume))
		err = bpf_task_work_schedule_resume(task, &hs->work, &hold_stops, hold_stop_run);
	else if (bpf_ksym_exists(bpf_task_work_schedule_resume_impl))
		err = bpf_task_work_schedule_resume_impl(task, &hs->work, &hold_stops,
							 hold_stop_run, NULL);
	else
		return HOLD_STOP_NONE;
	if (err)
		return HOLD_STOP_NONE;
	hs->armed = 1;
	return HOLD_STOP_ARMED;
}

/*
 * A kick note_hold_pressure() asked for: the producer is off its CPU (held,
 * by custos sched) before its next syscall, at its hold stop when
 * that can be armed, else at the end of this program. Called with
 * preemption off, after the record is built: a kick here switches as
 * preemption is turned back on.
 */
static __always_inline void hold_kick(void)
{
	struct custos_cpu_state *cs;
	__u32 zero = 0;

	cs = bpf_map_lookup_elem(&cpu_state, &zero);
	if (!cs || !cs->hold_kick_pending)
		return;
	cs->hold_kick_pending = 0;
	if (!bpf_ksym_exists(scx_bpf_kick_cpu))
		return;
	switch (hold_stop_arm()) {
	case HOLD_STOP_WAITING:
		return;
	case HOLD_STOP_ARMED:
		cs->hold_stops++;
		break;
	default:
		scx_bpf_kick_cpu(bpf_get_smp_processor_id(), CUSTOS_SCX_KICK_PREEMPT);
	}
	cs->hold_kicks++;
}

/*
 * Ends an attribute record with the task's root when it is not the host's:
 * the paths before it are relative to that root. Only records with
 * attributes carry it; the consumer keeps it with the file's path for the
 * reads and writes that name their file by inode alone.
 */
static __always_inline void put_root(struct attr_buf *b)
{
	struct fs_struct *fs = bpf_get_current_task_btf()->fs;
	struct dentry *root;
	__u32 off = b->hdr.len, o, dev;
	__u64 ino;

	if (!fs)
		return;
	root = fs->root.dentry;
	if (!root)
		return;
	dev = root->d_sb->s_dev;
	ino = root->d_inode->i_ino;
	if (dev == host_root_dev && ino == host_root_ino)
		return;
	if (off > CUSTOS_ATTR_DATA_MAX - 4 - 12) {
		b->hdr.len = put_cut(b, off, CUSTOS_ATTR_ROOT);
		return;
	}
	o = (off + 4) & ATTR_MASK;
	__builtin_memcpy(&b->data[o], &dev, sizeof(dev));
	__builtin_memcpy(&b->data[(o + 4) & ATTR_MASK], &ino, sizeof(ino));
	b->hdr.len = put_tlv_hdr(b, off, CUSTOS_ATTR_ROOT, 0, 12);
}

/*
 * Numbers the event, then tries its ring. The metadata slot is reserved
 * before the attributes are sent, so an attribute record is only ever sent
 * for an event that will be delivered.
 */
__noinline int submit(struct custos_event *ev, struct attr_buf *b, int critical)
{
	struct custos_cpu_state *cs;
	struct custos_event *slot;
	__u32 zero = 0, len;
	__u64 now, seq, waiting;
	int dropped = 0;
	long err;

	if (!ev)
		return 0;
	cs = bpf_map_lookup_elem(&cpu_state, &zero);
	if (!cs)
		return 0;
	/* The slot before the number: a number the consumer reads in a
	 * snapshot of cpu_state then belongs to a record already reserved (or
	 * refused and counted), so once the consumer has passed the producer
	 * positions read after that snapshot, a number it has not seen is lost.
	 * Numbered first, a record whose CPU stalled between the two (a vCPU
	 * descheduled by its hypervisor: preemption off does not stop that)
	 * was settled as lost and then came late. */
	if (critical) {
		ev->flags |= CUSTOS_EV_CRITICAL;
		slot = bpf_ringbuf_reserve(&ring_critical, sizeof(*slot), 0);
	} else {
		slot = bpf_ringbuf_reserve(&ring_events, sizeof(*slot), 0);
	}
	/* Atomic: numbers are taken by programs of several kinds on this CPU.
	 * The number before the time: a number the consumer has not seen yet
	 * then has a time after the consumer looked (the stream's order). */
	seq = __sync_fetch_and_add(&cs->seq, 1) + 1;
	now = bpf_ktime_get_ns();
	ev->id = ((__u64)bpf_get_smp_processor_id() << CUSTOS_ID_CPU_SHIFT) | seq;
	ev->ktime_ns = now;
	if (!slot) {
		if (critical)
			__sync_fetch_and_add(&cs->drops[CUSTOS_DROP_CRITICAL], 1);
		else
			__sync_fetch_and_add(&cs->drops[CUSTOS_DROP_EVENTS], 1);
		dropped = 1;
		goto out;
	}
	if (b && b->hdr.len) {
		put_root(b);
		b->hdr.id = ev->id;
		len = b->hdr.len;
		if (len > CUSTOS_ATTR_DATA_MAX)
			len = CUSTOS_ATTR_DATA_MAX;
		/* A critical event's attributes (exec path and argv, the file
		 * opened for writing) share its reserved ring; there a record's
		 * size tells the halves apart, so an attribute record is never
		 * exactly the size of a metadata record. */
		if (sizeof(b->hdr) + len == sizeof(struct custos_event))
			len++;
		if (critical)
			err = bpf_ringbuf_output(&ring_critical, b, sizeof(b->hdr) + len,
						 BPF_RB_NO_WAKEUP);
		else {
			waiting = bpf_ringbuf_query(&ring_attrs, BPF_RB_AVAIL_DATA);
			err = bpf_ringbuf_output(&ring_attrs, b, sizeof(b->hdr) + len,
						 wakeup_policy(waiting, waiting + ring_record_bytes(sizeof(b->hdr) + len),
							       wake_shift_attrs));
		}
		if (err) {
			__sync_fetch_and_add(&cs->drops[CUSTOS_DROP_ATTRS], 1);
			ev->flags |= CUSTOS_EV_ATTRS_LOST;
		} else {
			ev->flags |= CUSTOS_EV_HAS_ATTRS;
			if (!critical)
				note_hold_pressure(cs, CUSTOS_RING_ATTRS,
						   bpf_ringbuf_query(&ring_attrs, BPF_RB_AVAIL_DATA));
		}
	}
	__builtin_memcpy(slot, ev, sizeof(*slot));
	/* The slot is reserved: the bytes waiting include it. */
	waiting = bpf_ringbuf_query(critical ? (void *)&ring_critical : (void *)&ring_events, BPF_RB_AVAIL_DATA);
	bpf_ringbuf_submit(slot, wakeup_policy(waiting - ring_record_bytes(sizeof(*slot)), waiting,
					       critical ? wake_shift_critical : wake_shift_events));
	note_hold_pressure(cs, critical ? CUSTOS_RING_CRITICAL : CUSTOS_RING_EVENTS, waiting);
out:
	account_task(ev->tid, now, dropped);
	sample_availability(cs);
	return 0;
}

/* Features-only mode: the event counts where submit() would count it, in
 * the current thread's features (never dropped: no ring refuses it). */
static __always_inline void count_only(void)
{
	struct custos_cpu_state *cs;
	__u32 zero = 0;

	account_task((__u32)bpf_get_current_pid_tgid(), bpf_ktime_get_ns(), 0);
	cs = bpf_map_lookup_elem(&cpu_state, &zero);
	if (cs)
		__sync_fetch_and_add(&cs->counted, 1);
}

static __always_inline struct custos_event *new_event_of(__u32 nr, struct task_struct *t)
{
	__u32 zero = 0;
	struct custos_event *e = bpf_map_lookup_elem(&event_scratch, &zero);

	if (!e)
		return NULL;
	__builtin_memset(e, 0, sizeof(*e));
	e->nr = nr;
	fill_task_of(e, t);
	return e;
}

static __always_inline struct custos_event *new_event(__u32 nr)
{
	return new_event_of(nr, bpf_get_current_task_btf());
}

static __always_inline struct attr_buf *scratch_attrs(void)
{
	__u32 zero = 0;
	struct attr_buf *b = bpf_map_lookup_elem(&attr_scratch, &zero);

	if (b)
		b->hdr.len = 0;
	return b;
}

static __always_inline void set_file_identity(struct custos_event *e, struct file *f)
{
	struct inode *inode = bpf_core_cast(f, struct file)->f_inode;

	e->ino = inode->i_ino;
	e->dev = inode->i_sb->s_dev;
	e->file_mode = inode->i_mode;
	e->flags |= CUSTOS_EV_HAS_FILE;
}

/* Path-string attributes (and the base of relative ones) of one syscall. */
static __always_inline __u32 put_path_args(struct attr_buf *b, __u32 off,
					   const struct custos_syscall_spec *spec,
					   const __u64 *args, int resolved)
{
	__u64 p;

	if (spec->path_arg >= 0) {
		p = arg_at(args, spec->path_arg);
		off = put_user_str(b, off, CUSTOS_ATTR_PATH, p);
		if (!resolved && !(spec->flags & CUSTOS_SPEC_PATH_RAW))
			off = put_path_base(b, off, CUSTOS_ATTR_PATH_BASE, p,
					    spec->dirfd_arg >= 0 ? arg_at(args, spec->dirfd_arg) :
								   AT_FDCWD_VAL);
	}
	if (spec->path2_arg >= 0) {
		p = arg_at(args, spec->path2_arg);
		off = put_user_str(b, off, CUSTOS_ATTR_PATH2, p);
		off = put_path_base(b, off, CUSTOS_ATTR_PATH2_BASE, p,
				    spec->dirfd2_arg >= 0 ? arg_at(args, spec->dirfd2_arg) :
							    AT_FDCWD_VAL);
	}
	return off;
}

/* Emits one syscall: entry args, and the return value unless NO_RET. */
static __always_inline int emit_syscall(__u32 nr, const struct custos_syscall_spec *spec,
					const __u64 *args, __s64 ret, int has_ret)
{
	struct task_struct *t;
	struct custos_event *e;
	struct attr_buf *b;
	struct file *f = NULL;
	int critical = spec->critical, i;
	__u64 open_flags = 0;
	__u32 off = 0;
	__u64 addr;
	__u32 addrlen = 0;

	if (features_only) {
		count_only();
		return 0;
	}
	t = bpf_get_current_task_btf();
	e = new_event(nr);
	if (!e)
		return 0;
	for (i = 0; i < 6; i++)
		e->args[i] = args[i];
	e->ret = ret;
	if (!has_ret)
		e->flags |= CUSTOS_EV_NO_RET;

	if (spec->flags & CUSTOS_SPEC_EXEC) {
		__u32 tgid = bpf_get_current_pid_tgid() >> 32;

		b = bpf_map_lookup_elem(&exec_attrs, &tgid);
		if (ret == 0) {
			/* The program now running, by identity too: a file with
			 * no place in the tree (a memfd) is named by its inode. */
			f = BPF_CORE_READ(t, mm, exe_file);
			if (f)
				set_file_identity(e, f);
		}
		if (b) {
			off = b->hdr.len;
			if (f)
				off = put_file_path(b, off, CUSTOS_ATTR_FILE_PATH, f);
			b->hdr.len = off;
			submit(e, b, 1);
			bpf_map_delete_elem(&exec_attrs, &tgid);
		} else {
			/* Parking failed or was evicted: deliver without attributes. */
			e->flags |= CUSTOS_EV_ATTRS_LOST;
			submit(e, NULL, 1);
		}
		return 0;
	}

	b = scratch_attrs();
	if (!b)
		return 0;

	if (spec->open_flags_arg >= 0)
		open_flags = arg_at(args, spec->open_flags_arg);
	if (spec->flags & CUSTOS_SPEC_OPEN_HOW)
		bpf_probe_read_user(&open_flags, sizeof(open_flags), (void *)args[2]);
	e->open_flags = open_flags;
	if ((spec->open_flags_arg >= 0 || (spec->flags & CUSTOS_SPEC_OPEN_HOW)) &&
	    WRITE_INTENT(open_flags))
		critical = 1;

	if (spec->fdpair_arg >= 0 && has_ret && ret == 0) {
		/* The two fds the kernel wrote back; the pipe's inode names it. */
		bpf_probe_read_user(e->fd_pair, sizeof(e->fd_pair),
				    (void *)arg_at(args, spec->fdpair_arg));
		f = fd_file(e->fd_pair[0]);
	} else if ((spec->flags & CUSTOS_SPEC_RET_FD_PATH) && has_ret && ret >= 0)
		f = fd_file(ret);
	else if ((spec->flags & CUSTOS_SPEC_RET_FD_ID) && has_ret && ret >= 0)
		f = fd_file(ret);
	else if (spec->fd_arg >= 0)
		f = fd_file((__s32)arg_at(args, spec->fd_arg));
	if (f)
		set_file_identity(e, f);

	if (spec->flags & CUSTOS_SPEC_RW) {
		struct rw_key k = {};
		__u8 one = 1;

		if (!f)
			goto send;
		k.ino = e->ino;
		k.dev = e->dev;
		k.tgid = e->pid;
		k.write = !!(spec->flags & CUSTOS_SPEC_WRITE);
		if (bpf_map_lookup_elem(&rw_seen, &k))
			goto send; /* not the first: metadata only, no path walk */
		bpf_map_update_elem(&rw_seen, &k, &one, BPF_ANY);
		e->flags |= CUSTOS_EV_FIRST;
		off = put_file_path(b, off, CUSTOS_ATTR_FILE_PATH, f);
		goto send;
	}
	if (f && (spec->flags & (CUSTOS_SPEC_FD_PATH | CUSTOS_SPEC_RET_FD_PATH)))
		off = put_file_path(b, off, CUSTOS_ATTR_FILE_PATH, f);
	off = put_path_args(b, off, spec, args, f && (spec->flags & CUSTOS_SPEC_RET_FD_PATH));

	if (spec->addr_arg >= 0) {
		addr = arg_at(args, spec->addr_arg);
		if (spec->flags & CUSTOS_SPEC_ADDR_OUT) {
			if (has_ret && ret >= 0 && spec->addrlen_arg >= 0)
				bpf_probe_read_user(&addrlen, sizeof(addrlen),
						    (void *)arg_at(args, spec->addrlen_arg));
		} else if (spec->addrlen_arg >= 0) {
			addrlen = arg_at(args, spec->addrlen_arg);
		}
		off = put_sockaddr(b, off, addr, addrlen);
	}
	if (spec->flags & CUSTOS_SPEC_LOCAL_ADDR) {
		/* connect: its fd's socket; accept: the new connection's, its result. */
		if (spec->flags & CUSTOS_SPEC_ADDR_OUT)
			f = has_ret && ret >= 0 ? fd_file(ret) : NULL;
		off = put_local_addr(b, off, (__u64)f);
	}
send:
	b->hdr.len = off;
	return submit(e, b, critical);
}

/*
 * Syscalls enter through raw_syscalls:sys_enter as a BTF tracepoint and are
 * filtered here by the syscall table. (Per-syscall tracepoints would spare
 * untraced syscalls the program call, but each of the ~100 pairs costs an
 * RCU-tasks grace period to detach, serialised: seconds at every stop.)
 */
/* The entry could not be parked (no memory for the task's storage): the
 * event is lost, so it is numbered and counted like a refused record. */
static __always_inline void account_unparked(int critical)
{
	struct custos_cpu_state *cs;
	__u32 zero = 0;

	cs = bpf_map_lookup_elem(&cpu_state, &zero);
	if (!cs)
		return;
	__sync_fetch_and_add(&cs->seq, 1);
	if (critical)
		__sync_fetch_and_add(&cs->drops[CUSTOS_DROP_CRITICAL], 1);
	else
		__sync_fetch_and_add(&cs->drops[CUSTOS_DROP_EVENTS], 1);
}

/* @key, @spec: the traced syscall and its table entry (traced_spec). */
static __always_inline int sys_enter(struct pt_regs *regs, __u32 key,
				     const struct custos_syscall_spec *spec, struct inflight *in)
{
	__u32 tgid = bpf_get_current_task_btf()->tgid;
	struct inflight now = {};
	struct attr_buf *b;
	__u32 off = 0;

	if (tgid == collector_tgid || in_compat_syscall())
		return 0;
	now.args[0] = regs->di;
	now.args[1] = regs->si;
	now.args[2] = regs->dx;
	now.args[3] = regs->r10;
	now.args[4] = regs->r8;
	now.args[5] = regs->r9;
	if (!args_traced(spec, now.args))
		return 0;
	if (spec->flags & CUSTOS_SPEC_NO_EXIT)
		return emit_syscall(key, spec, now.args, 0, 0);
	if (!in) {
		/* The event cannot be counted at its exit: a recording run
		 * numbers it and counts it dropped; in features-only mode
		 * there is no number to account for. (Its task's features
		 * miss it either way.) */
		if (!features_only)
			account_unparked(spec->critical);
		return 0;
	}
	now.nr = key;
	now.active = 1;
	now.phase = in->phase;
	now.epoch = in->epoch;
	*in = now;
	if ((spec->flags & CUSTOS_SPEC_EXEC) && !features_only) {
		b = scratch_attrs();
		if (b) {
			off = put_path_args(b, off, spec, now.args, 0);
			if (spec->argv_arg >= 0)
				off = put_argv(b, off, arg_at(now.args, spec->argv_arg));
			b->hdr.len = off;
			bpf_map_update_elem(&exec_attrs, &tgid, b, BPF_ANY);
		}
	}
	return 0;
}

static __always_inline int sys_exit(__u32 nr, const struct custos_syscall_spec *spec, long ret,
				    struct inflight *in)
{
	__u32 tgid = bpf_get_current_task_btf()->tgid;
	struct inflight saved;

	if (tgid == collector_tgid)
		return 0;
	/* A fork child returning from clone has no entry: its parent reports. */
	if (!in || !in->active || in->nr != nr)
		return 0;
	in->active = 0;
	saved = *in;
	return emit_syscall(nr, spec, saved.args, ret, 1);
}

/*
 * A traced syscall's run is made with preemption off (see submit()). Besides
 * the records, this protects every other syscall on this CPU: the kernel
 * skips a program that is already running on the CPU (recursion_misses), so
 * one preempted in the middle would make the next task's syscalls go
 * unrecorded. (An untraced syscall's run only moves the task's phase, a few
 * instructions, without switching preemption off and on: two calls saved on
 * every syscall of the machine, and a preemption there is like one in the
 * kernel's code around the program, which the copies below cover.)
 *
 * Preemption off still ends inside the program, and a task preempted there
 * (or in the kernel's code around the program) keeps it "running" until it
 * runs again. So each tracepoint gets CUSTOS_SYSCALL_COPIES identical copies,
 * attached in order: the kernel tracks each one separately, so a syscall a
 * busy copy skips is still seen by a later one. The first copy to see a
 * syscall handles it; the task's phase tells the later ones (see inflight).
 * A backup copy that handles a syscall counts it in cpu_state.covered, so
 * user space knows exactly how many syscalls no copy saw: the first copy's
 * skips minus the syscalls a backup covered. (After such a loss the phase
 * can be stale and make a backup take the next syscall for seen: that one is
 * then lost as well, and counted as well.)
 */
/*
 * The first copy found the task at the phase it is entering: entries and
 * exits alternate, so the task's other tracepoint went unseen by every copy.
 * An exit unseen loses the syscall parked at its entry; an entry unseen loses
 * this syscall if it would have been recorded. Counted once each, on this
 * CPU, for in-band loss records. (A syscall whose entry and exit both went
 * unseen leaves no trace in the task: user space bounds those from the
 * kernel's per-program skip counters.)
 */
static __always_inline void note_unseen(__u32 phase, struct inflight *in, struct pt_regs *regs)
{
	struct custos_syscall_spec *spec;
	struct custos_cpu_state *cs;
	__u32 zero = 0, nr;
	__u64 args[6];
	bool lost = false;
	long id;

	cs = bpf_map_lookup_elem(&cpu_state, &zero);
	if (!cs)
		return;
	__sync_fetch_and_add(&cs->unseen[phase == PHASE_ENTER], 1);
	if (phase == PHASE_ENTER) {
		lost = in->active;
		in->active = 0;
	} else {
		id = regs->orig_ax;
		if (id >= 0 && id < CUSTOS_MAX_SYSCALLS &&
		    (__u32)(bpf_get_current_pid_tgid() >> 32) != collector_tgid && !in_compat_syscall()) {
			nr = id;
			spec = bpf_map_lookup_elem(&syscall_specs, &nr);
			if (spec && spec->traced && !(spec->flags & CUSTOS_SPEC_NO_EXIT)) {
				args[0] = regs->di;
				args[1] = regs->si;
				args[2] = regs->dx;
				args[3] = regs->r10;
				args[4] = regs->r8;
				args[5] = regs->r9;
				lost = args_traced(spec, args);
			}
		}
	}
	if (lost)
		__sync_fetch_and_add(&cs->skipped, 1);
}

/* The syscall table's entry of syscall @id if it is traced, else NULL: an
 * array lookup, which the verifier inlines (no helper call). Every other
 * syscall of the machine passes here too, so nothing more happens for it
 * than the phase below. */
static __always_inline const struct custos_syscall_spec *traced_spec(long id)
{
	struct custos_syscall_spec *spec;
	__u32 key = id;

	if (id < 0 || id >= CUSTOS_MAX_SYSCALLS)
		return NULL;
	spec = bpf_map_lookup_elem(&syscall_specs, &key);
	return spec && spec->traced ? spec : NULL;
}

/* Whether this copy handles the syscall. @in: the task's storage (NULL
 * without memory: then the first copy alone handles it, unparked). Runs
 * preemptible for untraced syscalls: it only touches the task's own storage
 * (no other program writes it meanwhile) and counters updated atomically. */
static __always_inline bool first_to_see(int copy, __u32 phase, struct inflight *in,
					 struct pt_regs *regs)
{
	struct custos_cpu_state *cs;
	__u32 zero = 0;

	if (!in)
		return copy == 0;
	if (copy && in->phase == phase)
		return false; /* an earlier copy saw this syscall */
	/* Only a phase recorded while every copy was attached tells a skip
	 * (not a tracepoint that was not attached yet, or any more). */
	if (in->phase == phase && skip_epoch && in->epoch == skip_epoch)
		note_unseen(phase, in, regs);
	in->phase = phase;
	in->epoch = skip_epoch;
	if (phase == PHASE_ENTER)
		in->calls++;
	if (copy) {
		cs = bpf_map_lookup_elem(&cpu_state, &zero);
		if (cs)
			__sync_fetch_and_add(&cs->covered[phase == PHASE_EXIT], 1);
	}
	return true;
}

/*
 * One copy's run at either tracepoint: @arg is the syscall id at entry,
 * the return value at exit. On this kernel every call and return costs
 * (return-stack mitigations), so the common runs make one helper call: a
 * backup finding the syscall seen, and any copy on an untraced syscall,
 * only read or move the task's phase. Preemption is switched off only
 * around building a record.
 */
static __always_inline int syscall_copy(int copy, __u32 phase, struct pt_regs *regs, long arg)
{
	const struct custos_syscall_spec *spec;
	long id = phase == PHASE_ENTER ? arg : regs->orig_ax;
	const struct custos_syscall_spec *parked;
	struct inflight *in;

	in = bpf_task_storage_get(&inflight, bpf_get_current_task_btf(), 0,
				  BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (copy && in && in->phase == phase)
		return 0;
	/* A successful exec returns under execve's number whatever the call
	 * was (x86's set_personality_64bit "pretends that this comes from a
	 * 64bit execve"): execveat's return is the exec parked at its entry.
	 * Read by orig_ax alone, every successful execveat went unrecorded. */
	if (phase == PHASE_EXIT && in && in->active && in->nr != id) {
		parked = traced_spec(in->nr);
		if (parked && (parked->flags & CUSTOS_SPEC_EXEC))
			id = in->nr;
	}
	spec = traced_spec(id);
	if (!spec) {
		first_to_see(copy, phase, in, regs);
		return 0;
	}
	bpf_preempt_disable();
	if (first_to_see(copy, phase, in, regs)) {
		if (phase == PHASE_ENTER)
			sys_enter(regs, id, spec, in);
		else
			sys_exit(id, spec, arg, in);
	}
	hold_kick();
	bpf_preempt_enable();
	return 0;
}

#define SYSCALL_COPY(n)                                                        \
	SEC("tp_btf/sys_enter")                                                \
	int BPF_PROG(custos_sys_enter_##n, struct pt_regs *regs, long id)      \
	{                                                                      \
		return syscall_copy(n, PHASE_ENTER, regs, id);                 \
	}                                                                      \
	SEC("tp_btf/sys_exit")                                                 \
	int BPF_PROG(custos_sys_exit_##n, struct pt_regs *regs, long ret)      \
	{                                                                      \
		return syscall_copy(n, PHASE_EXIT, regs, ret);                 \
	}

/* CUSTOS_SYSCALL_COPIES of them; collector.rs checks the count. */
SYSCALL_COPY(0)
SYSCALL_COPY(1)
SYSCALL_COPY(2)

/*
 * A thread's features end with it; its tid will name another thread. Its
 * events go to its parent's kin first (custos_task_features.kin_rate).
 */
SEC("tp_btf/sched_process_exit")
int BPF_PROG(custos_task_exit, struct task_struct *p)
{
	struct custos_task_features *tf, *ptf;
	struct task_struct *parent;
	__u32 tid = p->pid, ptid;

	tf = bpf_map_lookup_elem(&task_features, &tid);
	parent = p->real_parent;
	/* An entry of start time 0 is taken as its thread's (the header). */
	if (tf && (!tf->start_time_ns || tf->start_time_ns == p->start_time) &&
	    tf->events_total && parent) {
		ptid = parent->pid;
		ptf = bpf_map_lookup_elem(&task_features, &ptid);
		/* In the parent's window of now: a shell waiting out a child
		 * that lived for windows has an old one open, and counted in
		 * it the child's events would be folded in as that old. The
		 * parent, waiting, rarely rolls it at the same moment.
		 * Capped: one long life must not wrap the window's count. */
		if (ptf && (!ptf->start_time_ns || ptf->start_time_ns == parent->start_time)) {
			ewma_roll(ptf, bpf_ktime_get_ns());
			__sync_fetch_and_add(&ptf->kin_window_events,
					     tf->events_total > 0xffff ? 0xffff : (__u32)tf->events_total);
		}
	}
	bpf_map_delete_elem(&task_features, &tid);
	bpf_map_delete_elem(&hold_stops, &tid);
	return 0;
}

/*
 * The hooks get copies for the same reason as the syscall tracepoints (see
 * SYSCALL_COPY): the kernel skips a program still "running" on this CPU in
 * a preempted task, here in the trampoline around an LSM program. The
 * copies of a hook see one run of it one after the other; the first to run
 * handles it and leaves (object, calls) in the task for the others: the
 * object (the file, the child) is unique among the runs of one syscall.
 * A run is lost only when no copy ran; user space counts those: the first
 * copy's skips, less the runs handled without it (hook_handled -
 * hook_runs_first), which holds whatever order the copies run in (user
 * space attaches them so that the first copy runs first, as for syscalls).
 */
static __always_inline bool hook_first_to_see(int copy, enum hook_kind kind, const void *object,
					      struct inflight **inp)
{
	struct custos_cpu_state *cs;
	struct inflight *in;
	__u32 zero = 0;
	bool mine;

	cs = bpf_map_lookup_elem(&cpu_state, &zero);
	if (cs && !copy)
		__sync_fetch_and_add(&cs->hook_runs_first, 1);
	in = bpf_task_storage_get(&inflight, bpf_get_current_task_btf(), 0,
				  BPF_LOCAL_STORAGE_GET_F_CREATE);
	*inp = in;
	if (!in) {
		mine = !copy; /* no memory: the first copy alone, as for syscalls */
	} else if (in->hook_object[kind] == (__u64)object && in->hook_call[kind] == in->calls) {
		mine = false;
	} else {
		in->hook_object[kind] = (__u64)object;
		in->hook_call[kind] = in->calls;
		mine = true;
	}
	if (mine && cs)
		__sync_fetch_and_add(&cs->hook_handled, 1);
	return mine;
}

/*
 * A new process, recorded by its parent before the child can run: the
 * clone/fork/vfork record is written when the parent's call returns, which
 * for vfork (and for a parent that waits for a CPU) is after the child has
 * run, even exited. This record puts the birth, and the fd table the child
 * inherits, before anything the child does (docs/event-schema.md, "Order").
 * New threads are not new processes: they are left out.
 */
static __always_inline int fork_hook(int copy, struct task_struct *child)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	struct custos_event *e;
	struct inflight *in;
	__u32 child_tgid = child->tgid;

	/* Every run is seen, also those left out, for exact skip counts. */
	bpf_preempt_disable();
	if (!hook_first_to_see(copy, HOOK_KIND_FORK, child, &in))
		goto out;
	if ((__u32)(pid_tgid >> 32) == collector_tgid || child_tgid == (__u32)(pid_tgid >> 32))
		goto out;
	if (features_only) {
		count_only();
		goto out;
	}
	e = new_event(CUSTOS_HOOK_FORK);
	if (e) {
		e->flags |= CUSTOS_EV_NO_RET;
		e->args[0] = child_tgid;
		submit(e, NULL, 1);
	}
out:
	bpf_preempt_enable();
	return 0;
}

/* ---- BPF-LSM hooks: intent before the fact (only where the kernel allows) ---- */

static __always_inline int bprm_check(int copy, struct linux_binprm *bprm)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tgid = pid_tgid >> 32, nr;
	struct custos_syscall_spec *spec;
	struct custos_event *e;
	struct inflight *in;
	struct attr_buf *b;
	__u32 off = 0;

	bpf_preempt_disable();
	/* A script's interpreter is checked again with the same bprm: the
	 * file tells the runs apart. */
	if (!hook_first_to_see(copy, HOOK_KIND_BPRM_CHECK, bprm->file, &in) || tgid == collector_tgid)
		goto out;
	if (features_only) {
		count_only();
		goto out;
	}
	e = new_event(CUSTOS_HOOK_BPRM_CHECK);
	b = scratch_attrs();
	if (!e || !b)
		goto out;
	e->flags |= CUSTOS_EV_NO_RET;
	/* The program's inode too, as file_open gives: a program with no
	 * place in the tree (a memfd run by fexecve) walks to "/", and the
	 * consumer names it by its inode, as it named the memfd when made. */
	set_file_identity(e, BPF_CORE_READ(bprm, file));
	off = put_file_path(b, off, CUSTOS_ATTR_FILE_PATH, BPF_CORE_READ(bprm, file));
	/* The caller's argv is still mapped here: the old image is replaced later. */
	if (in && in->active) {
		nr = in->nr;
		spec = bpf_map_lookup_elem(&syscall_specs, &nr);
		if (spec && spec->argv_arg >= 0)
			off = put_argv(b, off, arg_at(in->args, spec->argv_arg));
	}
	b->hdr.len = off;
	submit(e, b, 1);
out:
	bpf_preempt_enable();
	return 0;
}

static __always_inline int file_open(int copy, struct file *file)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	struct custos_event *e;
	struct inflight *in;
	struct attr_buf *b;
	__u32 flags;

	bpf_preempt_disable();
	if (!hook_first_to_see(copy, HOOK_KIND_FILE_OPEN, file, &in) ||
	    (__u32)(pid_tgid >> 32) == collector_tgid)
		goto out;
	if (features_only) {
		count_only();
		goto out;
	}
	e = new_event(CUSTOS_HOOK_FILE_OPEN);
	b = scratch_attrs();
	if (!e || !b)
		goto out;
	e->flags |= CUSTOS_EV_NO_RET;
	flags = BPF_CORE_READ(file, f_flags);
	e->open_flags = flags;
	set_file_identity(e, file);
	b->hdr.len = put_file_path(b, 0, CUSTOS_ATTR_FILE_PATH, file);
	submit(e, b, WRITE_INTENT(flags));
out:
	bpf_preempt_enable();
	return 0;
}

#define HOOK_COPY(n)                                                           \
	SEC("tp_btf/sched_process_fork")                                       \
	int BPF_PROG(custos_fork_##n, struct task_struct *parent,              \
		     struct task_struct *child)                                \
	{                                                                      \
		return fork_hook(n, child);                                    \
	}                                                                      \
	SEC("lsm/bprm_check_security")                                         \
	int BPF_PROG(custos_bprm_check_##n, struct linux_binprm *bprm)         \
	{                                                                      \
		return bprm_check(n, bprm);                                    \
	}                                                                      \
	SEC("lsm/file_open")                                                   \
	int BPF_PROG(custos_file_open_##n, struct file *file)                  \
	{                                                                      \
		return file_open(n, file);                                     \
	}

/* Keep in step with HOOK_COPIES in collector.rs. */
HOOK_COPY(0)
HOOK_COPY(1)
HOOK_COPY(2)

/* ---- io_uring: requests the kernel runs without their syscalls ---- */

/*
 * A process can open, read, write, connect and send through an io_uring
 * without making those syscalls: io_uring_enter (or none at all, with a
 * polling submission thread) hands the kernel requests, which it runs
 * inline, from task work or in an iou-wrk worker thread. Each request is
 * recorded once, as its syscall twin with the same fields, at the
 * tracepoint where its result is posted (io_uring_complete): there the
 * request's file is assigned (a registered file too) and its result known.
 * Failures are posted there as well, including those io_uring_req_failed
 * reports (a failed request always posts its CQE). A request that posts no
 * CQE on success (IOSQE_CQE_SKIP_SUCCESS) is recorded at submission
 * instead, with its file and without a result.
 *
 * The actor is the task that submitted the request (the ring's task
 * context), not the worker that ran it nor whoever runs the task work.
 * One program per tracepoint: it runs with preemption off, so no other
 * run of it can be parked on this CPU (see SYSCALL_COPY); the kernel's
 * count of its skipped runs is reported with the hooks'.
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, CUSTOS_URING_MAX_OPS);
	__type(key, __u32);
	__type(value, struct custos_uring_op);
} io_uring_ops SEC(".maps");

/* FFS_NOWAIT | FFS_ISREG: flag bits below a registered file's pointer. */
#define URING_FFS_BITS 3UL
/* IORING_FILE_INDEX_ALLOC: the kernel picks the slot and returns it. */
#define URING_FILE_INDEX_ALLOC (~0U)

/* The ring's registered file in @slot. */
static __always_inline struct file *ring_file(struct io_ring_ctx *ctx, __u32 slot)
{
	struct io_rsrc_node **nodes;
	struct io_rsrc_node *node = NULL;

	/* The registered-file table took this shape in 6.13: on a kernel
	 * where it has another, registered files go unnamed (the request is
	 * still recorded) rather than the whole collector failing to load. */
	if (!bpf_core_field_exists(struct io_rsrc_node, file_ptr) ||
	    !bpf_core_field_exists(struct io_file_table, data))
		return NULL;
	if (!ctx || slot >= ctx->file_table.data.nr)
		return NULL;
	nodes = ctx->file_table.data.nodes;
	bpf_probe_read_kernel(&node, sizeof(node), &nodes[slot]);
	if (!node)
		return NULL;
	return (struct file *)(bpf_core_cast(node, struct io_rsrc_node)->file_ptr & ~URING_FFS_BITS);
}

/* The file an open or accept made: a new fd (@res) in the submitter's
 * table, or a registered slot (file_slot is the slot + 1; with
 * IORING_FILE_INDEX_ALLOC the result is the slot). @fd: the new fd, or -1. */
static __always_inline struct file *new_file(struct io_kiocb *req, struct io_ring_ctx *ctx,
					     struct task_struct *task, __u32 opcode, long res,
					     __s32 *fd)
{
	__u32 slot = 0;

	if (opcode == IORING_OP_OPENAT || opcode == IORING_OP_OPENAT2)
		slot = bpf_core_cast(req, struct io_open)->file_slot;
	else if (opcode == IORING_OP_ACCEPT)
		slot = bpf_core_cast(req, struct io_accept)->file_slot;
	else if (opcode == IORING_OP_SOCKET)
		slot = bpf_core_cast(req, struct io_socket)->file_slot;
	if (!slot) {
		*fd = res;
		return fd_file_of(task, res);
	}
	return ring_file(ctx, slot == URING_FILE_INDEX_ALLOC ? res : slot - 1);
}

static __always_inline int uring_event(struct io_kiocb *req, long res, int at_submit)
{
	struct task_struct *task = NULL;
	const struct custos_uring_op *op;
	struct io_uring_task *tctx;
	struct io_ring_ctx *ctx;
	struct custos_event *e;
	struct attr_buf *b;
	struct file *f = NULL;
	__u32 opcode, off = 0;
	__u64 rflags;
	__s32 fd = -1;
	int critical;

	if (!req)
		return 0; /* an auxiliary CQE (multishot, msg_ring) of no request */
	opcode = req->opcode;
	op = bpf_map_lookup_elem(&io_uring_ops, &opcode);
	if (!op || !op->traced)
		return 0;
	tctx = req->tctx;
	if (tctx)
		task = tctx->task;
	if (!task)
		task = bpf_get_current_task_btf();
	if (task->tgid == collector_tgid)
		return 0;
	if (features_only) {
		count_only();
		return 0;
	}
	e = new_event_of(CUSTOS_HOOK_IO_URING, task);
	b = scratch_attrs();
	if (!e || !b)
		return 0;
	ctx = req->ctx;
	rflags = req->flags;
	critical = op->critical;
	e->args[1] = opcode;
	if (rflags & REQ_F_FIXED_FILE)
		e->args[2] |= CUSTOS_URING_EV_FIXED_FILE;
	if (at_submit) {
		e->args[2] |= CUSTOS_URING_EV_AT_SUBMIT;
		e->flags |= CUSTOS_EV_NO_RET;
	} else {
		e->ret = res;
	}

	if (op->flags & CUSTOS_URING_FILE) {
		if (!at_submit) {
			/* Read, not loaded: the helpers below take plain numbers. */
			f = BPF_CORE_READ(req, file);
		} else if (rflags & REQ_F_FIXED_FILE) {
			f = ring_file(ctx, req->cqe.fd); /* not yet assigned: the sqe's slot */
		} else {
			fd = req->cqe.fd; /* the sqe's fd, until the result replaces it */
			f = fd_file_of(task, fd);
		}
	} else if ((op->flags & CUSTOS_URING_RET_FD) && !at_submit && res >= 0) {
		f = new_file(req, ctx, task, opcode, res, &fd);
	} else if (op->flags & CUSTOS_URING_CLOSE) {
		if (!bpf_core_cast(req, struct io_close)->file_slot)
			fd = bpf_core_cast(req, struct io_close)->fd;
	}
	e->args[0] = (__u64)(__s64)fd;
	if (op->flags & CUSTOS_URING_OPEN) {
		e->open_flags = bpf_core_cast(req, struct io_open)->how.flags;
		if (WRITE_INTENT(e->open_flags))
			critical = 1;
	}
	if (f)
		set_file_identity(e, f);
	if (op->flags & CUSTOS_URING_NO_PATHS)
		e->flags |= CUSTOS_EV_ATTRS_LOST; /* says so rather than look complete */

	if (f && (op->flags & CUSTOS_URING_RW)) {
		/* The same first-use map as the syscalls: the first read of a
		 * file by a process is the edge, whichever way it read. */
		struct rw_key k = {};
		__u8 one = 1;

		k.ino = e->ino;
		k.dev = e->dev;
		k.tgid = e->pid;
		k.write = !!(op->flags & CUSTOS_URING_WRITE);
		if (!bpf_map_lookup_elem(&rw_seen, &k)) {
			bpf_map_update_elem(&rw_seen, &k, &one, BPF_ANY);
			e->flags |= CUSTOS_EV_FIRST;
			off = put_file_path(b, off, CUSTOS_ATTR_FILE_PATH, f);
		}
	} else if (f) {
		off = put_file_path(b, off, CUSTOS_ATTR_FILE_PATH, f);
	}
	if (f && (op->flags & CUSTOS_URING_SOCK)) {
		/* Every time: a registered socket has no fd for the store's
		 * table, so each send and receive names its peer itself. */
		off = put_sock_addr(b, off, (__u64)f, 1);
		off = put_sock_addr(b, off, (__u64)f, 0);
	}
	b->hdr.len = off;
	return submit(e, b, critical);
}

/* Requests linked after one another run one after the other. A linked
 * request that posts no CQE is recorded when the one before it posts its
 * result, so that it comes after what it may use (the read before its
 * write); a chain of such requests at the head of a link, at submission. */
#define URING_LINK_WALK 8

SEC("tp_btf/io_uring_complete")
int BPF_PROG(custos_io_uring_complete, void *ctx_, void *req_, struct io_uring_cqe *cqe)
{
	struct io_kiocb *req = bpf_core_cast(req_, struct io_kiocb);
	struct io_kiocb *next;
	int i;

	bpf_preempt_disable();
	uring_event(req, cqe->res, 0);
	/* A failure cancels the rest of the chain: each posts its CQE then. */
	if (req && cqe->res >= 0) {
		next = req->link;
		for (i = 0; i < URING_LINK_WALK && next && (next->flags & REQ_F_CQE_SKIP); i++) {
			uring_event(next, 0, 1);
			next = next->link;
		}
	}
	bpf_preempt_enable();
	return 0;
}

SEC("tp_btf/io_uring_submit_req")
int BPF_PROG(custos_io_uring_submit, struct io_kiocb *req)
{
	struct io_kiocb *prev;
	int i;

	/* Only the requests that will post no CQE if they succeed. */
	if (!(req->flags & REQ_F_CQE_SKIP))
		return 0;
	/* In a link behind a request that posts its result: recorded then. */
	prev = req->ctx->submit_state.link.head;
	for (i = 0; i < URING_LINK_WALK && prev; i++) {
		if (!(prev->flags & REQ_F_CQE_SKIP))
			return 0;
		prev = prev->link;
	}
	bpf_preempt_disable();
	uring_event(req, 0, 1);
	bpf_preempt_enable();
	return 0;
}

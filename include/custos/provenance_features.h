/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Provenance features: the one contract between the collector (which writes
 * these maps) and the scheduler (which reads them to decide queues).
 *
 * The collector pins both maps under CUSTOS_PIN_DIR. The scheduler reuses the
 * pinned maps when they exist; without a collector it runs on zeroed features.
 * These are the "provenance features" of Aegis (seed 000, Table 4):
 * nr_event, nr_drop, latency (consumer lag) and availability.
 *
 * Included by BPF C (vmlinux.h already provides __u32/__u64) and by the Rust
 * side through bindgen; keep it free of kernel-only types.
 */
#ifndef CUSTOS_PROVENANCE_FEATURES_H
#define CUSTOS_PROVENANCE_FEATURES_H

#define CUSTOS_PIN_DIR                "/sys/fs/bpf/custos"
#define CUSTOS_TASK_FEATURES_MAP      "task_features"   /* CUSTOS_PIN_DIR "/" name */
#define CUSTOS_GLOBAL_FEATURES_MAP    "global_features"

/* A task-feature entry per thread; LRU so a fork storm cannot fill it. */
#define CUSTOS_MAX_TRACKED_TASKS      65536
/* Pids whose threads are "the consumer" (never throttled, never traced). */
#define CUSTOS_MAX_CONSUMERS          8

/*
 * Rates are exponentially weighted per window: when a window of
 * CUSTOS_RATE_WINDOW_NS closes, rate = rate - rate/2^SHIFT + count/2^SHIFT,
 * so old behaviour fades in a few windows and one burst cannot dominate.
 * Rates are in events per window.
 */
#define CUSTOS_RATE_WINDOW_NS         (100ULL * 1000 * 1000)
#define CUSTOS_RATE_EWMA_SHIFT        2

/*
 * Copies of the collector's syscall programs on each tracepoint. The kernel
 * runs a program on a CPU for one task at a time and skips it for every
 * other task there meanwhile; the next copy sees what it skipped. So while a
 * task is held off its CPU inside a program (preempted there, migration
 * disabled), one copy on that CPU is taken: the scheduler holds at most
 * CUSTOS_SYSCALL_COPIES - 2 such tasks per CPU, so that two stay free (one
 * for a task preempted inside it by anything else). The collector kicks a
 * producer at its hold stop instead where the kernel has task works
 * (custos_task_features.hold_stop), which takes no copy.
 */
#define CUSTOS_SYSCALL_COPIES         3

/* Bytes of custos_global_features.collector_version, its NUL included. */
#define CUSTOS_VERSION_LEN            32

/* How long custos_global_features.hold_sched_ns says a hold is there. */
#define CUSTOS_HOLD_SCHED_FRESH_NS    (1000ULL * 1000 * 1000)

/* Rings whose free space is published, in this order. */
enum custos_ring {
	CUSTOS_RING_CRITICAL  = 0, /* reserved path: exec, clone, creds, ... */
	CUSTOS_RING_EVENTS    = 1, /* best-effort fixed-size records */
	CUSTOS_RING_ATTRS     = 2, /* variable-length attributes (paths, argv) */
	CUSTOS_NR_RINGS       = 3,
};

/*
 * Value of the task_features map (LRU hash, key: __u32 tid). A tid is
 * recycled once its thread is gone, so an entry belongs to the thread whose
 * task_struct start_time it carries: the collector resets an entry another
 * thread left, and a reader ignores one whose start time is not its task's.
 * The collector deletes a thread's entry when the thread exits.
 */
struct custos_task_features {
	__u64 start_time_ns;     /* task_struct->start_time of the owning thread;
				  * 0: unknown to the writer (taken as the thread's) */
	__u64 events_total;      /* events produced by this thread, ever */
	__u64 drops_total;       /* of those, dropped before reaching a ring */
	__u64 event_rate;        /* nr_event: EWMA of events per window */
	__u64 drop_rate;         /* nr_drop: EWMA of drops per window */
	__u64 window_start_ns;   /* start of the open window (bpf_ktime_get_ns) */
	__u32 window_events;     /* events in the open window */
	__u32 window_drops;      /* drops in the open window */
	__u32 hold_stop;         /* 1 while the thread is kicked at its hold stop
				  * (its return to user mode): off its CPU
				  * there it is inside no copy of the
				  * collector's programs (migration disabled
				  * all the same) */
	/*
	 * Its kin: events its children (threads and processes it forked) made
	 * in all their lives, counted at their exit in the open window, and
	 * their EWMA per window like event_rate. A flood split into
	 * short-lived children (a shell starting a `cat` every few ms) shows
	 * in its parent's kin, not in any child's own rate. Written by the
	 * exiting child, so a count may race the parent's own roll.
	 */
	__u32 kin_window_events;
	__u64 kin_rate;
};

/* Value of the global_features map (array, one entry, key 0). */
struct custos_global_features {
	__u64 ring_size[CUSTOS_NR_RINGS];       /* bytes; 0: no ring (a features-only
						  * collector records nothing) */
	__u64 ring_free_bytes[CUSTOS_NR_RINGS]; /* availability, sampled at submit
						  * and by the consumer as it drains */
	/*
	 * The hold (custos sched --hold; crates/custos-sched/README.md, "The
	 * hold"), per ring. Under the reserve, producers are held and only
	 * light tasks run, on the light tasks' share of the ring; under the
	 * floor, every producer is held. The floor is the bytes one syscall can
	 * write, times the CPUs, times the syscalls a CPU may run before its
	 * producer is off it: what is written after the floor is crossed.
	 */
	__u64 hold_reserve_bytes[CUSTOS_NR_RINGS];
	__u64 hold_floor_bytes[CUSTOS_NR_RINGS];
	/*
	 * Written by custos sched --hold as it looks at the rings (its BPF side,
	 * bpf_ktime_get_ns): while it is recent (CUSTOS_HOLD_SCHED_FRESH_NS),
	 * the collector's programs kick a producer off its CPU at the syscall
	 * that takes a ring under its reserve. Kept by the consumer's updates.
	 */
	__u64 hold_sched_ns;
	__u64 produced;          /* events produced (sum of per-CPU sequences) */
	__u64 consumed;          /* events accounted for: read by the consumer, or
				  * refused by a full ring (written by user space) */
	__u64 consumer_lag;      /* latency: produced - consumed, in events still
				  * waiting in the rings */
	__u64 updated_ns;        /* when user space last refreshed produced/consumed */
	__u32 consumer_pids[CUSTOS_MAX_CONSUMERS]; /* tgids; 0 = unused slot */
	__u32 nr_consumers;
	__u32 collector_running; /* 1 while a collector is attached */
	/*
	 * The collector's account so far, for `custos status` (its final
	 * account is the stream's last `stats` record). Written by user space
	 * with produced and consumed; no program reads them.
	 */
	__u64 delivered;         /* events the consumer received */
	__u64 dropped[CUSTOS_NR_RINGS]; /* refused by a full ring: events on the
				  * critical and events rings; on the attrs ring
				  * attribute halves (their events delivered
				  * incomplete) */
	__u64 lost_to_skips;     /* events lost to the kernel's skips of
				  * re-entrant programs, at most (stats
				  * `unnumbered`) */
	char collector_version[CUSTOS_VERSION_LEN]; /* `custos --version`'s
				  * number, NUL-terminated */
};

#endif /* CUSTOS_PROVENANCE_FEATURES_H */

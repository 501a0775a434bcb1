/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Custos scheduler: the Aegis queue backbone (seed 000, section 4.1).
 *
 * One primary FIFO queue and nr_queues budgeted FIFO queues. Budgeted queue
 * q may be consumed only when the time since it was last consumed, t_q,
 * reached its waiting time w_q; among the eligible non-empty ones the CPU
 * consumes the hungriest, h_q = t_q / w_q (Eq. 1-2), else the primary queue.
 * The waiting time is the budget: a flood of producers parked in a budgeted
 * queue gets at most one slice per w_q, so the provenance consumer, which
 * stays primary, keeps up.
 *
 * Each queue exists once shared and once per CPU. A task that can run on one
 * CPU only (per-CPU kthreads, pinned tasks) goes to its CPU's copy, so it
 * never waits behind a shared queue that only other CPUs drain, yet it stays
 * under its queue's budget (pinning must not be a way out of the budget).
 *
 * Which queue a task enters is decided by a policy function, features in,
 * queue out, each time the task is queued, and on every tick for the running
 * task (so a producer that never sleeps is budgeted within a tick, not a
 * slice). Two policies sit behind that seam: the static one
 * (policy_static.bpf.h) and the learned integer network (policy_net.bpf.h)
 * of seed 000 §4.2, with its delta function and the transitions it emits
 * for training (policy_intf.h).
 *
 * Consumer protection (beyond seed 000, which only keeps consumers in the
 * primary queue): a waking consumer takes an idle CPU or preempts a budgeted
 * task, so it never waits a slice behind a producer while the rings fill.
 * The budget itself still decides how much producers run in the long run.
 */
#include <scx/common.bpf.h>
#include "intf.h"
#include "features.bpf.h"

char _license[] SEC("license") = "GPL";

#define NSEC_PER_MSEC	1000000ULL
#define NSEC_PER_SEC	1000000000ULL
#define PF_KTHREAD	0x00200000

UEI_DEFINE(uei);

/* Tunables (user space writes them before load; same names as the flags). */

/* Fixed slice of every task; Aegis schedules FIFO with one slice length. */
const volatile u64 slice_ns = 5 * NSEC_PER_MSEC;

/* Number of budgeted (non-primary) queues, 1..CUSTOS_MAX_QUEUES-1. */
const volatile u32 nr_queues = 3;

/*
 * Waiting time of each budgeted queue, index 1..nr_queues (Eq. 7 by default,
 * computed in user space). Index 0, the primary queue, is unused.
 */
const volatile u64 waiting_time_ns[CUSTOS_MAX_QUEUES];

/*
 * Let an idle CPU run a task from an ineligible budgeted queue. Off by
 * default: the budget must hold even with idle CPUs, or a flood spread over
 * all CPUs outruns the consumer. On for ablations.
 */
const volatile bool work_conserving;

/* A waking consumer preempts a budgeted (or ordinary) task; off for ablations. */
const volatile bool consumer_preempt = true;

/*
 * While ring availability is at or below availability_low, budgeted queues
 * wait (up to the starvation guard) for the consumer to make room, instead
 * of spending their budget on records the full rings would refuse. Off for
 * ablations.
 */
const volatile bool overflow_hold = true;

/* How often a CPU holding budgeted queues looks at the rings again. */
#define OVERFLOW_RECHECK_NS	(1ULL * NSEC_PER_MSEC)
const volatile u8 availability_low = 32;	/* 25% of the ring free */
const volatile u8 availability_high = 64;	/* 50% of the ring free */

/*
 * No task may wait longer than this (ns): a queue whose oldest task waited
 * this long is consumed first. Eq. 3 bounds waits only for sane waiting
 * times; with extreme ones (Table 7 E6: t_N / t_2 = 7e5) a saturated system
 * would hold budgeted or primary tasks past the sched_ext watchdog, which
 * ejects the scheduler. 0 disables the guard.
 */
const volatile u64 starvation_guard_ns = 2000ULL * NSEC_PER_MSEC;

/*
 * The hold (issue 29; on with --hold). While a ring's free space is under
 * the reserve the collector publishes, every task that produces events
 * waits in the held queue, off every CPU, until all rings are back above
 * availability_high. Consumers, kthreads and light tasks (fewer than
 * hold_allowance events since the hold began) run on: the shell that sends
 * a stopped consumer SIGCONT, a task that makes no traced syscall. They
 * share the light tasks' part of the ring, between the reserve and the
 * floor; under the floor (what one syscall can write, times the CPUs,
 * times the syscalls that can run before a held task is off its CPU)
 * every task but the consumers and kthreads is held, so however many light
 * tasks there are, the ring does not fill. A task making light_rate
 * events a window or more (or, in its first windows, whose parent did) is
 * held at once. The held queue is ordered by event rate, lightest first.
 * Once the hold has lasted hold_guard_ns, its head is let through, one
 * task every hold_leak_gap_ns, each for at most hold_leak_events events,
 * counted (hold_leaks): the consumer may be blocked on a held task (the
 * reader of the pipe it writes into, a lock it holds, the shell that would
 * resume it). Longer than the starvation guard, so that a consumer stopped
 * for its length loses nothing; shorter than the kernel's 30 s watchdog.
 */
const volatile bool hold_enabled;
const volatile u32 hold_allowance = 64;
/* Events a window from which a task is not light: the hold holds it at
 * once, and it waits in the primary queue, not the light lane. Lower (2)
 * held the shell resuming a stopped consumer after its burst of a fork and
 * a kill, and the stall lasted until the guard let it through (133 s); at
 * 64, ten find workers making 40 a window each spent the light tasks'
 * share of a 512 KiB ring before that shell woke up. */
const volatile u32 light_rate = 16;

/*
 * The light lane (issue 29, item 3: innocent tasks keep their pace). A
 * task of the primary queue that wakes up making fewer than light_rate
 * events a window (a shell, an interactive program, one that makes no
 * traced syscall) waits in a queue of its own, served before the budgeted
 * queues and the primary FIFO, instead of behind every flood worker there
 * (a 10 ms ticker saw a p99 of 173 ms behind 16 of them on 2 vCPUs, the
 * default scheduler 33 ms). A flood split into processes does not make
 * them light: a young task counts as its parent's rate. A wake-up keeps
 * the lane for LIGHT_SLICES_PER_WAKE slices, then a task that computes on
 * goes to the primary queue; per CPU the lane runs at most light_share_pct
 * of the time, over a burst of LIGHT_BURST_NS: what makes few events and
 * computes much cannot starve the rest. The consumer still goes first,
 * but never by preempting a light task (consumer_victim). 0: no lane.
 */
const volatile u32 light_share_pct = 50;
#define LIGHT_BURST_NS		(4 * slice_ns)
/*
 * Slices a light task keeps the lane for per wake-up: one burst. Two were
 * too few on 4 emulated vCPUs, where a 100 us wake-up read as two to five
 * whole slices in 98 of 1639 wake-ups (its vCPU paused meanwhile), and the
 * next slice, in the primary FIFO, came 87-240 ms later (traced).
 */
#define LIGHT_SLICES_PER_WAKE	4
/*
 * A light task's first slice after it woke up, served before the lane's
 * share is asked (CUSTOS_FRESH_DSQ): the 10 ms probe under a swarm waited
 * 66-79 ms at p99 (the default 21-66 ms) while the swarm's `cat`s, light
 * by rate, spent the lane's share and it refilled at half the time. Short,
 * so a task that wakes often buys little with it: one per wake-up, charged
 * to the share like any light slice; the rest of its burst is the lane's.
 */
#define LIGHT_FRESH_SLICE_NS	(NSEC_PER_MSEC)
/* How long a held task may wait before it is let through (hold_leaks). */
const volatile u64 hold_guard_ns = 5000ULL * NSEC_PER_MSEC;
/* A task let through makes at most this many events before it is held
 * again, and the next is let through this long after: leaks stay small
 * against the floor, and a deadlock still ends. */
const volatile u32 hold_leak_events = 16;
const volatile u64 hold_leak_gap_ns = 100ULL * NSEC_PER_MSEC;

/* Debug: the forced_comm / forced_pid maps override the policy. */
const volatile bool queue_forcing;

/* Which policy decides queues: CUSTOS_POLICY_STATIC, _LEARNED or _FEEDBACK. */
const volatile u32 policy_kind = CUSTOS_POLICY_STATIC;

/*
 * The delta function (seed 000 Eq. 12): the learned policy reuses a task's
 * last decision while its nvcsw and nr_event each moved by less than
 * 1/2^delta_shift of their value since the network last ran (2: the seed's
 * delta = 0.25). Unlike the seed, ring availability must also have held
 * still: a steady producer's context does not change while the rings fill,
 * and a decision reused then is how the rings overflow. 0 turns it off.
 */
const volatile u32 delta_shift = 2;

/* Emit a transition per decision for training (custos train, --record-transitions). */
const volatile bool emit_transitions;

/* Maps */

/* Provenance features written by the collector; reused from its pins. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, CUSTOS_MAX_TRACKED_TASKS);
	__type(key, u32);
	__type(value, struct custos_task_features);
} task_features SEC(".maps");

/*
 * @p's provenance features, or NULL: an entry with another start time is a
 * dead thread's under a recycled tid; 0 is a writer that does not know it
 * (not the collector).
 */
static __always_inline const struct custos_task_features *
task_features_of(const struct task_struct *p)
{
	const struct custos_task_features *tf;
	u32 tid = p->pid;

	tf = bpf_map_lookup_elem(&task_features, &tid);
	if (tf && tf->start_time_ns && tf->start_time_ns != p->start_time)
		return NULL;
	return tf;
}

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct custos_global_features);
} global_features SEC(".maps");

/* Consumers named on the command line (tgid -> 1), kept fresh by user space. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, u32);
	__type(value, u32);
} consumers SEC(".maps");

/*
 * Pressure from a non-Custos provenance system (e.g. the audit backlog),
 * published by user space in the same normalised units; 128 = no pressure.
 */
u8 external_availability = CUSTOS_FEATURE_MAX;
u64 external_lag;

/* Debug queue forcing: comm -> queue, tgid -> queue. */
struct comm_key {
	char comm[CUSTOS_COMM_LEN];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, struct comm_key);
	__type(value, u32);
} forced_comm SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, u32);
	__type(value, u32);
} forced_pid SEC(".maps");

/* The learned policy's weights, two copies; policy_state says which is live. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, CUSTOS_NET_SLOTS);
	__type(key, u32);
	__type(value, struct custos_net);
} policy_nets SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct custos_policy_state);
} policy_state SEC(".maps");

/* Transitions for training; user space sizes it and drains it without wakeups. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20);
} transitions SEC(".maps");

struct task_ctx {
	u32 queue;		/* queue the task is in or was last put in */
	bool decided;		/* select_cpu already ran the policy for this wakeup */
	bool budgeted;		/* policy state for hysteresis */
	bool consumer;		/* a provenance consumer, as of the last decision */
	u64 enqueued_at;
	u64 running_at;
	/* Table 4 task features, raw */
	u64 runtime_ns;
	u64 nvcsw_window_start;
	u64 nvcsw_at_window;
	u64 nvcsw_avg;		/* voluntary switches per window, EWMA */
	u64 wait_freq;		/* sleeps per second, EWMA (scx_lavd) */
	u64 wake_freq;		/* wakeups of others per second, EWMA (scx_lavd) */
	u64 last_sleep_at;
	u64 last_wake_at;
	u64 slice_used_ns;
	u32 stops_this_slice;
	u32 nr_stop;
	u32 nr_idle;
	/* The delta function's reference: the context when the network last ran. */
	u64 delta_nvcsw;
	u64 delta_nr_event;
	u8  delta_availability;
	bool delta_valid;
	bool inferred;		/* the network ran for the last learned decision */
	/* The last decision, the start of the task's next transition. */
	bool prev_valid;
	bool prev_inferred;
	u8  prev_action;
	u8  prev_state[CUSTOS_NR_FEATURES];
	u32 prev_idle;
	u64 prev_events;
	u64 prev_drops;
	/*
	 * The GRU placement layer's snapshot features. switch_count counts
	 * switch-ins in custos_running, the scheduler's own callback, where the
	 * seed used a kprobe on finish_task_switch: the same event without a
	 * second program on every context switch.
	 */
	u64 switch_count;
	bool placement_created;	/* forked, its first runnable not seen yet */
	/* The hold: the epoch this task was last seen in, its events then. */
	u64 hold_epoch;
	u64 hold_events_base;
	u64 hold_pass_until;	/* let through by the hold's guard until then, */
	u64 hold_pass_events;	/* and while its events stay under this */
	u64 hold_order;		/* the held queue's order: its rate and what it spent in the hold */
	u64 inherited_rate;	/* its parent's event rate at fork (young tasks) */
	u64 inherited_kin;	/* its parent's kin rate at fork (young tasks) */
	bool held_in_program;	/* held while migration disabled (held_in_program[]) */
	bool hold_spent;	/* its allowance in hold_epoch is spent (its children's too) */
	u32 hold_born;		/* children it forked in hold_epoch (each costs light_rate events) */
	bool light;		/* queued in (then running from) the light lane */
	bool light_direct;	/* light, sent straight to an idle CPU (not charged) */
	u8 light_slices;	/* slices it was given in the lane since it woke up */
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct task_ctx);
} task_ctx_stor SEC(".maps");

struct cpu_ctx {
	u32 idle_slices;	/* idle entries since a task last ran here */
	u32 prefer_pinned;	/* bit q: alternate pinned/shared copies fairly */
	s64 light_budget_ns;	/* the light lane's time left here (light_share_pct) */
	u64 light_refill_at;	/* when light_budget_ns was last refilled */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct cpu_ctx);
} cpu_ctx_stor SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct custos_sched_stats);
} stats SEC(".maps");

/*
 * One timer per CPU: a CPU that went idle while budgeted work waited for
 * its queue's waiting time is woken when the time has passed. Without it
 * budgeted tasks could sit in an ineligible queue with every CPU asleep.
 */
struct budget_timer {
	struct bpf_timer timer;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, CUSTOS_MAX_CPUS);
	__type(key, u32);
	__type(value, struct budget_timer);
} budget_timers SEC(".maps");

/* When each queue was last consumed by any CPU: the budget is global. */
u64 last_consumed_ns[CUSTOS_MAX_QUEUES];

/* What each CPU runs now (enum custos_cpu_running); racy reads are fine. */
u8 cpu_running[CUSTOS_MAX_CPUS];

/* The held queue (see hold_enabled): one shared queue, by event rate. */
#define CUSTOS_HELD_DSQ		(CUSTOS_PINNED_DSQ_BASE - 1)
/* The light lane (see light_share_pct): one shared FIFO. */
#define CUSTOS_LIGHT_DSQ	(CUSTOS_PINNED_DSQ_BASE - 2)
/* The lane's first slices after a wake-up (LIGHT_FRESH_SLICE_NS): a FIFO. */
#define CUSTOS_FRESH_DSQ	(CUSTOS_PINNED_DSQ_BASE - 3)

/*
 * When the hold began, 0 while it is off: one word, so that no CPU sees the
 * hold on with the start of an earlier one (or 0) and lets held tasks
 * through the guard at once (a CI run leaked one 2 s into a hold). An
 * epoch per hold, so allowances restart.
 */
u64 hold_since_ns;
u64 hold_epoch;

static __always_inline bool hold_is_on(void)
{
	return hold_since_ns != 0;
}

/* How long the hold has been on at @now; 0 if off, or if it began after
 * @now was read (another CPU's clock reading may be the later one). */
static __always_inline u64 hold_age(u64 now)
{
	u64 since = hold_since_ns;

	return since && now > since ? now - since : 0;
}
/* 1 while a ring is under its floor: every producer is held, light or not. */
u32 hold_all;
u64 hold_last_leak_ns;
/*
 * Tasks held inside a program on each CPU (migration disabled: preempted
 * there, as the collector's kick at the syscall that crossed the reserve
 * leaves them). Each takes a copy of the collector's programs on its CPU
 * until it runs again; one copy is always left (CUSTOS_SYSCALL_COPIES).
 */
u32 held_in_program[CUSTOS_MAX_CPUS];
/* The lowest free space the scheduler saw on each ring (bytes; --stats). */
u64 hold_lowest_free[CUSTOS_NR_RINGS] = { ~0ULL, ~0ULL, ~0ULL };

/*
 * Slice of a task preempted with migration disabled, which runs next on its
 * CPU (see enqueue): enough to leave the program it was preempted in, and
 * no more; the kernel enforces it at the next tick.
 */
#define MIGRATION_DISABLED_SLICE_NS	(500ULL * 1000)

/*
 * Events per window of the whole system, EWMA like the per-task rates,
 * derived from the collector's published total (refreshed every ~100 ms).
 */
u64 total_event_rate;
u64 total_rate_produced;
u64 total_rate_at_ns;
/* Events per window the consumer accounted for, from the same refreshes. */
u64 consumer_event_rate;
u64 total_rate_consumed;

/* Helpers */

static __always_inline struct custos_sched_stats *cpu_stats(void)
{
	u32 zero = 0;

	return bpf_map_lookup_elem(&stats, &zero);
}

static __always_inline struct cpu_ctx *this_cpu_ctx(void)
{
	u32 zero = 0;

	return bpf_map_lookup_elem(&cpu_ctx_stor, &zero);
}

static __always_inline struct task_ctx *task_ctx(const struct task_struct *p)
{
	return bpf_task_storage_get(&task_ctx_stor, (struct task_struct *)p, 0, 0);
}

static __always_inline u64 pinned_dsq(s32 cpu, u32 q)
{
	return CUSTOS_PINNED_DSQ_BASE + (u64)cpu * CUSTOS_MAX_QUEUES + q;
}

static __always_inline bool is_pinned(const struct task_struct *p)
{
	return p->nr_cpus_allowed == 1 || is_migration_disabled(p);
}

/* Frequencies in events per second, smoothed like the collector's rates. */
static __always_inline u64 ewma(u64 avg, u64 sample)
{
	return avg - (avg >> CUSTOS_RATE_EWMA_SHIFT) + (sample >> CUSTOS_RATE_EWMA_SHIFT);
}

static __always_inline u64 freq_of(u64 interval_ns)
{
	return NSEC_PER_SEC / (interval_ns ? interval_ns : 1);
}

/* Ring availability in [0, 128]: the fullest ring decides. */
static __always_inline u8 ring_availability(const struct custos_global_features *g)
{
	u64 avail = CUSTOS_FEATURE_MAX;
	int r;

	if (!g || !g->collector_running)
		return CUSTOS_FEATURE_MAX;
	for (r = 0; r < CUSTOS_NR_RINGS; r++) {
		u64 size = g->ring_size[r], a;

		if (!size)
			continue;
		a = g->ring_free_bytes[r] * CUSTOS_FEATURE_MAX / size;
		if (a < avail)
			avail = a;
	}
	return avail;
}

/* Availability in [0, 128]: the fullest ring, or external pressure if worse. */
static __always_inline u8 availability_of(const struct custos_global_features *g)
{
	u8 avail = ring_availability(g);

	return external_availability < avail ? external_availability : avail;
}

static __always_inline bool is_consumer(const struct task_struct *p,
					const struct custos_global_features *g)
{
	u32 tgid = p->tgid;
	int i;

	if (bpf_map_lookup_elem(&consumers, &tgid))
		return true;
	if (!g)
		return false;
	for (i = 0; i < CUSTOS_MAX_CONSUMERS; i++)
		if (g->consumer_pids[i] && g->consumer_pids[i] == tgid)
			return true;
	return false;
}

/*
 * A task's events per window: the smoothed rate, or the open window's count
 * when that is already higher, so a burst counts at once, not after the
 * average caught up. A window the collector has not rolled for two windows
 * is an old burst, not a current one.
 */
static __always_inline u64 task_event_rate(const struct custos_task_features *tf, u64 now,
					   bool drops)
{
	u64 rate = drops ? tf->drop_rate : tf->event_rate;
	u64 open = drops ? tf->window_drops : tf->window_events;

	if (now <= tf->window_start_ns + 2 * CUSTOS_RATE_WINDOW_NS && open > rate)
		return open;
	return rate;
}

/* One EWMA step of a system rate, a burst counting at once as per task. */
static __always_inline u64 rate_step(u64 avg, u64 per_window)
{
	avg = avg - (avg >> CUSTOS_RATE_EWMA_SHIFT) + (per_window >> CUSTOS_RATE_EWMA_SHIFT);
	return per_window > avg ? per_window : avg;
}

/*
 * Fold the collector's latest totals into the system's event rate and the
 * consumer's. "consumed" also counts records refused by full rings, so
 * under overflow the consumer's rate reads high; availability says it then.
 */
static void update_total_rate(const struct custos_global_features *g)
{
	u64 at, produced, consumed, dt;

	if (!g || !g->collector_running)
		return;
	at = g->updated_ns;
	produced = g->produced;
	consumed = g->consumed;
	if (at <= total_rate_at_ns || produced < total_rate_produced ||
	    consumed < total_rate_consumed)
		goto reset;
	dt = at - total_rate_at_ns;
	if (dt < CUSTOS_RATE_WINDOW_NS / 2)
		return;
	total_event_rate = rate_step(total_event_rate,
				     (produced - total_rate_produced) * CUSTOS_RATE_WINDOW_NS / dt);
	consumer_event_rate = rate_step(consumer_event_rate,
					(consumed - total_rate_consumed) * CUSTOS_RATE_WINDOW_NS / dt);
reset:
	total_rate_at_ns = at;
	total_rate_produced = produced;
	total_rate_consumed = consumed;
}

static void fill_policy_input(const struct task_struct *p, const struct task_ctx *tctx,
			      struct custos_policy_input *in)
{
	const struct custos_global_features *g;
	const struct custos_task_features *tf;
	u32 zero = 0;
	u64 now = bpf_ktime_get_ns();

	in->feat[CUSTOS_FEAT_RUNTIME] = norm_log2(tctx->runtime_ns);
	in->feat[CUSTOS_FEAT_NVCSW] = norm_log2(tctx->nvcsw_avg);
	in->feat[CUSTOS_FEAT_WAIT_FREQ] = norm_log2(tctx->wait_freq);
	in->feat[CUSTOS_FEAT_WAKE_FREQ] = norm_log2(tctx->wake_freq);
	in->feat[CUSTOS_FEAT_NR_STOP] = norm_log2(tctx->nr_stop);
	in->feat[CUSTOS_FEAT_NR_IDLE] = norm_log2(tctx->nr_idle);
	in->feat[CUSTOS_FEAT_PRIO] = nr_queues ?
		tctx->queue * CUSTOS_FEATURE_MAX / nr_queues : 0;

	in->raw_nvcsw = tctx->nvcsw_avg;
	tf = task_features_of(p);
	if (tf) {
		in->raw_nr_event = task_event_rate(tf, now, false);
		in->feat[CUSTOS_FEAT_NR_EVENT] = norm_log2(in->raw_nr_event);
		in->feat[CUSTOS_FEAT_NR_DROP] = norm_log2(task_event_rate(tf, now, true));
		in->events_total = tf->events_total;
		in->drops_total = tf->drops_total;
	}

	g = bpf_map_lookup_elem(&global_features, &zero);
	update_total_rate(g);
	in->total_event_rate = norm_log2(total_event_rate);
	in->consumer_event_rate = norm_log2(consumer_event_rate);
	in->feat[CUSTOS_FEAT_AVAILABILITY] = availability_of(g);
	in->feat[CUSTOS_FEAT_LATENCY] =
		norm_log2((g && g->collector_running ? g->consumer_lag : 0) + external_lag);

	in->is_consumer = is_consumer(p, g);
	in->budgeted = tctx->budgeted;
}

#include "policy_static.bpf.h"
#include "policy_feedback.bpf.h"
#include "policy_net.bpf.h"
#include "placement_gru.bpf.h"

/* Within 1/2^delta_shift of the current value (Eq. 12), or unchanged. */
static __always_inline bool delta_near(u64 prev, u64 cur)
{
	u64 diff = prev > cur ? prev - cur : cur - prev;

	return diff == 0 || diff < (cur >> delta_shift);
}

/*
 * The learned policy: the network's argmax, unless the delta function finds
 * the task's context unchanged since the network last ran for it. Without
 * pushed weights (generation 0) the static policy decides, counted.
 *
 * The budgeted queues are masked while there is no provenance pressure
 * (availability at or above availability_high, as for the feedback policy):
 * then nothing can be lost and a budget only costs the task its runtime.
 * Unmasked, the shipped model budgeted 47 tasks of a 16-worker find flood
 * with no collector running at all, which then took 3.5x as long as under
 * the static policy (bench/matrix, 2026-11-23).
 *
 * A global function, so the verifier checks it once on its own: inlined,
 * it was re-verified for every distinct state the feature normalisation
 * leaves behind in each caller, past the verifier's 1M-instruction limit.
 * Whether the network ran is left in tctx->inferred.
 */
__noinline u32 learned_policy(struct custos_policy_input *in, struct task_ctx *tctx)
{
	struct custos_sched_stats *st = cpu_stats();
	const struct custos_policy_state *ps;
	const struct custos_net *net;
	s32 q[CUSTOS_MAX_QUEUES];
	u32 zero = 0, slot, action;
	u64 start;
	u8 avail;

	if (!in || !tctx)
		return CUSTOS_PRIMARY_QUEUE;
	tctx->inferred = false;
	avail = in->feat[CUSTOS_FEAT_AVAILABILITY];
	ps = bpf_map_lookup_elem(&policy_state, &zero);
	if (!ps || !ps->generation) {
		if (st)
			st->learned_fallbacks++;
		return static_policy(in);
	}
	if (avail >= availability_high) {
		if (st)
			st->learned_unpressured++;
		return CUSTOS_PRIMARY_QUEUE;
	}
	if (delta_shift && tctx->delta_valid &&
	    delta_near(tctx->delta_nvcsw, in->raw_nvcsw) &&
	    delta_near(tctx->delta_nr_event, in->raw_nr_event) &&
	    delta_near(tctx->delta_availability, avail)) {
		if (st)
			st->delta_skips++;
		return tctx->queue;
	}
	slot = ps->generation & 1;
	net = bpf_map_lookup_elem(&policy_nets, &slot);
	if (!net)
		return static_policy(in);
	start = bpf_ktime_get_ns();
	action = policy_net_forward(net, in->feat, q);
	if (st) {
		st->inference_ns += bpf_ktime_get_ns() - start;
		st->inferences++;
	}
	tctx->inferred = true;
	tctx->delta_nvcsw = in->raw_nvcsw;
	tctx->delta_nr_event = in->raw_nr_event;
	tctx->delta_availability = avail;
	tctx->delta_valid = true;
	return action;
}

/*
 * Exploration for training (epsilon-greedy): explore_pct percent of the
 * decisions of either policy pick a random queue, so recorded transitions
 * show what every action leads to. 0 unless a trainer or recording asks.
 */
static __always_inline u32 explore(u32 q, struct custos_sched_stats *st)
{
	const struct custos_policy_state *ps;
	u32 zero = 0;

	if (!emit_transitions)	/* nobody learns from this run: never explore */
		return q;
	ps = bpf_map_lookup_elem(&policy_state, &zero);
	if (!ps || !ps->explore_pct || bpf_get_prandom_u32() % 100 >= ps->explore_pct)
		return q;
	if (st)
		st->explorations++;
	return bpf_get_prandom_u32() % (nr_queues + 1);
}

static __always_inline u32 counted_since(u64 now, u64 before)
{
	u64 d = now >= before ? now - before : now;

	return d > 0xffffffffULL ? 0xffffffffU : d;
}

/*
 * T = (S_t -> S_t+1) for the task's previous decision, now that S_t+1 is
 * known, with what the task's events and its CPU's idleness did in between
 * (the reward's inputs, Eq. 10-11). Never blocks: a full ring is counted.
 */
static void emit_transition(const struct task_struct *p, struct task_ctx *tctx,
			    const struct custos_policy_input *in, u32 q, bool inferred,
			    struct custos_sched_stats *st)
{
	struct custos_transition *t;
	int i;

	if (!emit_transitions || in->is_consumer)
		return;
	if (tctx->prev_valid) {
		t = bpf_ringbuf_reserve(&transitions, sizeof(*t), 0);
		if (!t) {
			if (st)
				st->transitions_dropped++;
		} else {
			t->pid = p->pid;
			t->action = tctx->prev_action;
			t->inferred = tctx->prev_inferred;
#pragma unroll
			for (i = 0; i < CUSTOS_NR_FEATURES; i++) {
				t->state[i] = tctx->prev_state[i];
				t->next_state[i] = in->feat[i];
			}
			/*
			 * A task whose features entry the LRU evicted starts
			 * counting again from zero: what it has now is then all
			 * that is known of the interval, not a wrapped difference.
			 */
			t->events = counted_since(in->events_total, tctx->prev_events);
			t->drops = counted_since(in->drops_total, tctx->prev_drops);
			t->idle_before = tctx->prev_idle;
			t->idle_after = tctx->nr_idle;
			t->at_ns = bpf_ktime_get_ns();
			/* User space drains the ring on its own clock. */
			bpf_ringbuf_submit(t, BPF_RB_NO_WAKEUP);
			if (st)
				st->transitions++;
		}
	}
	tctx->prev_valid = true;
	tctx->prev_inferred = inferred;
	tctx->prev_action = q;
#pragma unroll
	for (i = 0; i < CUSTOS_NR_FEATURES; i++)
		tctx->prev_state[i] = in->feat[i];
	tctx->prev_idle = tctx->nr_idle;
	tctx->prev_events = in->events_total;
	tctx->prev_drops = in->drops_total;
}

static __always_inline s32 forced_queue(const struct task_struct *p)
{
	struct comm_key key = {};
	u32 tgid = p->tgid, *q;

	q = bpf_map_lookup_elem(&forced_pid, &tgid);
	if (q)
		return *q;
	bpf_probe_read_kernel_str(key.comm, sizeof(key.comm), p->comm);
	q = bpf_map_lookup_elem(&forced_comm, &key);
	return q ? *q : -1;
}

/*
 * Decide the queue of @p: when it is queued again, and at the tick while it
 * runs in the primary queue. Consumers are never budgeted, whatever the
 * policy says; the answer is clamped to the queues that exist.
 */
static u32 decide_queue(const struct task_struct *p, struct task_ctx *tctx)
{
	struct custos_sched_stats *st = cpu_stats();
	struct custos_policy_input in = {};
	bool inferred = false;
	u32 q;
	s32 forced;

	if (queue_forcing && (forced = forced_queue(p)) >= 0) {
		q = forced <= nr_queues ? forced : nr_queues;
	} else {
		fill_policy_input(p, tctx, &in);
		if (in.is_consumer)
			q = CUSTOS_PRIMARY_QUEUE;
		else if (policy_kind == CUSTOS_POLICY_LEARNED) {
			q = learned_policy(&in, tctx);
			inferred = tctx->inferred;
		} else if (policy_kind == CUSTOS_POLICY_FEEDBACK) {
			q = feedback_policy(&in);
		} else {
			q = static_policy(&in);
		}
		if (!in.is_consumer)
			q = explore(q, st);
		tctx->consumer = in.is_consumer;
		if (q > nr_queues)
			q = nr_queues;
		if (st) {
			if (in.is_consumer)
				st->consumer_decisions++;
			if (q != CUSTOS_PRIMARY_QUEUE && !tctx->budgeted)
				st->to_budgeted++;
			else if (q == CUSTOS_PRIMARY_QUEUE && tctx->budgeted)
				st->to_primary++;
		}
		tctx->budgeted = q != CUSTOS_PRIMARY_QUEUE;
		emit_transition(p, tctx, &in, q, inferred, st);
	}
	if (st && q < CUSTOS_MAX_QUEUES)
		st->policy_decisions[q & (CUSTOS_MAX_QUEUES - 1)]++;
	tctx->queue = q;
	return q;
}

static __always_inline u64 nr_waiting(u32 q, s32 cpu)
{
	return scx_bpf_dsq_nr_queued(q) + scx_bpf_dsq_nr_queued(pinned_dsq(cpu, q));
}

/* Move the head of queue @q (this CPU's copy or the shared one) here. */
static bool consume_queue(u32 q, s32 cpu, struct cpu_ctx *cctx)
{
	bool pinned_first = cctx && (cctx->prefer_pinned & (1U << q));

	/* Alternate which copy goes first so neither starves the other. */
	if (cctx)
		cctx->prefer_pinned ^= 1U << q;
	if (pinned_first) {
		if (scx_bpf_dsq_move_to_local(pinned_dsq(cpu, q), 0))
			return true;
		return scx_bpf_dsq_move_to_local(q, 0);
	}
	if (scx_bpf_dsq_move_to_local(q, 0))
		return true;
	return scx_bpf_dsq_move_to_local(pinned_dsq(cpu, q), 0);
}

/* How long the head of @dsq has been waiting, 0 if empty. */
static u64 head_wait(u64 dsq, u64 now)
{
	struct task_struct *p;
	struct task_ctx *tctx;
	u64 at = 0;

	bpf_rcu_read_lock();
	p = __COMPAT_scx_bpf_dsq_peek(dsq);
	if (p) {
		tctx = bpf_task_storage_get(&task_ctx_stor, p, 0, 0);
		if (tctx)
			at = tctx->enqueued_at;
	}
	bpf_rcu_read_unlock();
	return at && now > at ? now - at : 0;
}

/* Is the head of @dsq a consumer? */
static bool consumer_at_head(u64 dsq)
{
	struct task_struct *p;
	struct task_ctx *tctx;
	bool yes = false;

	bpf_rcu_read_lock();
	p = __COMPAT_scx_bpf_dsq_peek(dsq);
	if (p) {
		tctx = bpf_task_storage_get(&task_ctx_stor, p, 0, 0);
		yes = tctx && tctx->consumer;
	}
	bpf_rcu_read_unlock();
	return yes;
}

/*
 * A consumer waiting in the primary queue (its slice ran out while the rings
 * had room) goes before the budgeted queues: a budgeted queue whose waiting
 * time is below a slice is always eligible, and the consumer would wait
 * behind it until the rings overflowed.
 */
static bool consume_waiting_consumer(s32 cpu, struct custos_sched_stats *st)
{
	u64 dsq;

	if (consumer_at_head(CUSTOS_PRIMARY_QUEUE))
		dsq = CUSTOS_PRIMARY_QUEUE;
	else if (consumer_at_head(pinned_dsq(cpu, CUSTOS_PRIMARY_QUEUE)))
		dsq = pinned_dsq(cpu, CUSTOS_PRIMARY_QUEUE);
	else
		return false;
	if (!scx_bpf_dsq_move_to_local(dsq, 0))
		return false;
	if (st) {
		st->dispatches[CUSTOS_PRIMARY_QUEUE]++;
		st->consumer_first++;
	}
	return true;
}

/*
 * The hold lasted hold_guard_ns: run the held queue's head (the lightest),
 * and do not hold it again for a slice or hold_leak_events events (the
 * consumer may be waiting for it); the next one hold_leak_gap_ns later.
 */
static bool let_held_through(u64 now, struct custos_sched_stats *st)
{
	const struct custos_task_features *tf;
	struct task_struct *p;
	struct task_ctx *tctx;
	u64 last = hold_last_leak_ns;

	if (now <= last || now - last < hold_leak_gap_ns ||
	    __sync_val_compare_and_swap(&hold_last_leak_ns, last, now) != last)
		return false;
	bpf_rcu_read_lock();
	p = __COMPAT_scx_bpf_dsq_peek(CUSTOS_HELD_DSQ);
	if (p) {
		tctx = bpf_task_storage_get(&task_ctx_stor, p, 0, 0);
		if (tctx) {
			/* Not a dead thread's entry under a recycled tid. */
			tf = task_features_of(p);
			tctx->hold_pass_until = now + slice_ns;
			tctx->hold_pass_events = (tf ? tf->events_total : 0) + hold_leak_events;
		}
	}
	bpf_rcu_read_unlock();
	if (!p || !scx_bpf_dsq_move_to_local(CUSTOS_HELD_DSQ, 0))
		return false;
	if (st)
		st->hold_leaks++;
	return true;
}

/* The starvation guard: consume the copy holding the longest-waiting head. */
static bool consume_starving(s32 cpu, u64 now, struct custos_sched_stats *st)
{
	u64 oldest = 0, dsq = 0, w;
	u32 q, oldest_q = 0;

	bpf_for(q, 0, nr_queues + 1) {
		if (q >= CUSTOS_MAX_QUEUES)
			break;
		w = head_wait(q, now);
		if (w > oldest) {
			oldest = w;
			dsq = q;
			oldest_q = q;
		}
		w = head_wait(pinned_dsq(cpu, q), now);
		if (w > oldest) {
			oldest = w;
			dsq = pinned_dsq(cpu, q);
			oldest_q = q;
		}
	}
	if (oldest < starvation_guard_ns)
		oldest = 0;
	/* The held queue has a guard of its own (hold_guard_ns). */
	if (hold_enabled && hold_age(now) >= hold_guard_ns &&
	    head_wait(CUSTOS_HELD_DSQ, now) && let_held_through(now, st))
		return true;
	if (!oldest || !scx_bpf_dsq_move_to_local(dsq, 0))
		return false;
	oldest_q &= CUSTOS_MAX_QUEUES - 1;
	if (oldest_q != CUSTOS_PRIMARY_QUEUE)
		last_consumed_ns[oldest_q] = now;
	if (st) {
		st->dispatches[oldest_q]++;
		st->starvation_guard_picks[oldest_q]++;
	}
	return true;
}

static void arm_budget_timer(s32 cpu, u64 delay_ns)
{
	struct budget_timer *bt;
	u32 key = cpu;

	bt = bpf_map_lookup_elem(&budget_timers, &key);
	if (bt)
		bpf_timer_start(&bt->timer, delay_ns ? delay_ns : 1, 0);
}

static int budget_timer_fn(void *map, u32 *key, struct budget_timer *bt)
{
	struct custos_sched_stats *st = cpu_stats();

	if (st)
		st->budget_timer_fires++;
	scx_bpf_kick_cpu(*key, SCX_KICK_IDLE);
	return 0;
}

/*
 * A sample this long means the CPU was taken away mid-update (an emulated
 * vCPU descheduled by the host); it is counted apart so it cannot swamp the
 * mean cost.
 */
#define FEATURE_COST_OUTLIER_NS	(100ULL * 1000)

static __always_inline void feature_cost(u64 start)
{
	struct custos_sched_stats *st = cpu_stats();
	u64 ns = bpf_ktime_get_ns() - start;

	if (!st)
		return;
	if (ns > FEATURE_COST_OUTLIER_NS) {
		st->feature_outliers++;
		return;
	}
	st->feature_ns += ns;
	st->feature_updates++;
}

/*
 * A CPU a waking consumer may take: one running a budgeted task first (the
 * producers being held back), else one running an ordinary task. Consumers
 * and per-CPU kthreads are never preempted, nor a task run from the light
 * lane: preempted just after its wake-up, it went back behind every flood
 * worker in the primary queue (a 10 ms ticker, preempted so in 194 of 544
 * wake-ups, saw a p99 of 94 ms on 2 vCPUs where its wait to be first run
 * had a p99 of 19 ms); it runs briefly, and the consumer waits at the head
 * of that CPU's queue if no other CPU will do. Returns -1 if there is none.
 */
static s32 consumer_victim(const struct task_struct *p, s32 prev_cpu)
{
	struct custos_sched_stats *st;
	s32 cpu, ordinary = -1;
	u32 nr_cpus = scx_bpf_nr_cpu_ids();
	bool spared = false;
	u8 r;

	if (prev_cpu >= 0 && prev_cpu < CUSTOS_MAX_CPUS &&
	    bpf_cpumask_test_cpu(prev_cpu, p->cpus_ptr)) {
		r = cpu_running[prev_cpu];
		if (r == CUSTOS_RUN_BUDGETED)
			return prev_cpu;
		if (r == CUSTOS_RUN_PRIMARY)
			ordinary = prev_cpu;
	}
	bpf_for(cpu, 0, nr_cpus) {
		if (cpu >= CUSTOS_MAX_CPUS)
			break;
		if (!bpf_cpumask_test_cpu(cpu, p->cpus_ptr))
			continue;
		r = cpu_running[cpu];
		if (r == CUSTOS_RUN_BUDGETED)
			return cpu;
		if (r == CUSTOS_RUN_PRIMARY && ordinary < 0)
			ordinary = cpu;
		if (r == CUSTOS_RUN_LIGHT)
			spared = true;
	}
	if (spared && (st = cpu_stats()))
		st->light_spared++;
	return ordinary;
}

static __always_inline void set_cpu_running(s32 cpu, u8 what)
{
	if (cpu >= 0 && cpu < CUSTOS_MAX_CPUS)
		cpu_running[cpu] = what;
}

/*
 * Tasks that can run on @cpu only wait for it: what the kernel put on its
 * local queue (per-CPU kthreads, a task preempted with migration disabled,
 * a consumer placed there) and primary tasks pinned to it. A consumer keeps
 * its CPU, but not past them: a busy consumer that kept its CPU until the
 * starvation guard held each of them for 2 s (a kworker doing virtiofs
 * completions made the guest's shell take minutes per step).
 */
static __always_inline bool others_need_cpu(s32 cpu)
{
	if (cpu < 0)
		return false;
	if (scx_bpf_dsq_nr_queued(SCX_DSQ_LOCAL_ON | cpu))
		return true;
	/* With one CPU every task is pinned to it: the flood's workers too.
	 * Yielding to them let them run between the consumer's slices (24
	 * events lost in the attack VM test on one vCPU). */
	return scx_bpf_nr_cpu_ids() > 1 &&
	       scx_bpf_dsq_nr_queued(pinned_dsq(cpu, CUSTOS_PRIMARY_QUEUE));
}

/* The waker's CPU for a synchronous wakeup of @p, if it may take it now. */
static bool sync_wakeup_target(const struct task_struct *p, s32 *cpu)
{
	struct task_struct *waker = bpf_get_current_task_btf();
	s32 this_cpu = bpf_get_smp_processor_id();

	if (waker->flags & PF_EXITING)
		return false;
	if (!bpf_cpumask_test_cpu(this_cpu, p->cpus_ptr))
		return false;
	if (scx_bpf_dsq_nr_queued(SCX_DSQ_LOCAL_ON | this_cpu))
		return false;
	*cpu = this_cpu;
	return true;
}

/*
 * Whether the hold is on, after looking at the rings: on when a ring's
 * free space is under its reserve (at most 3/8 of the ring, so that a ring
 * too small for the reserve still has a hold that ends), off when every
 * ring is back above availability_high. The CPU that turns it on kicks the
 * others running ordinary or budgeted tasks, so that each is queued again
 * (and held) now rather than at its next tick; the CPU that turns it off
 * kicks the idle ones to run what was held.
 */
static bool hold_update(u64 now)
{
	struct custos_global_features *g;
	struct custos_sched_stats *st;
	u32 zero = 0, nr_cpus;
	bool under = false, clear = true, all = false;
	u64 since;
	s32 cpu, this_cpu;
	int r;

	if (!hold_enabled)
		return false;
	g = bpf_map_lookup_elem(&global_features, &zero);
	/* Tells the collector's programs to kick at the crossing syscall. */
	if (g && now - g->hold_sched_ns > CUSTOS_HOLD_SCHED_FRESH_NS / 4)
		g->hold_sched_ns = now;
	if (g && g->collector_running) {
		for (r = 0; r < CUSTOS_NR_RINGS; r++) {
			u64 size = g->ring_size[r], free = g->ring_free_bytes[r], reserve;

			if (!size)
				continue;
			if (free < hold_lowest_free[r])
				hold_lowest_free[r] = free;
			reserve = g->hold_reserve_bytes[r]; /* capped by the collector */
			if (free < reserve)
				under = true;
			if (free < g->hold_floor_bytes[r])
				all = true;

			if (free * CUSTOS_FEATURE_MAX < (u64)availability_high * size)
				clear = false;
		}
	}
	if (all != (bool)hold_all &&
	    __sync_val_compare_and_swap(&hold_all, !all, all) == !all && all) {
		st = cpu_stats();
		if (st)
			st->hold_floors++;
	}
	if (under && !hold_is_on()) {
		if (__sync_val_compare_and_swap(&hold_since_ns, 0, now) != 0)
			return true;
		__sync_fetch_and_add(&hold_epoch, 1);
		st = cpu_stats();
		if (st)
			st->holds++;
		nr_cpus = scx_bpf_nr_cpu_ids();
		this_cpu = bpf_get_smp_processor_id();
		bpf_for(cpu, 0, nr_cpus) {
			u8 running;

			if (cpu >= CUSTOS_MAX_CPUS)
				break;
			running = cpu_running[cpu];
			if (cpu == this_cpu ||
			    (running != CUSTOS_RUN_PRIMARY && running != CUSTOS_RUN_BUDGETED))
				continue;
			scx_bpf_kick_cpu(cpu, SCX_KICK_PREEMPT);
			if (st)
				st->hold_kicks++;
		}
		return true;
	}
	since = hold_since_ns;
	if (since && clear && !under) {
		if (__sync_val_compare_and_swap(&hold_since_ns, since, 0) != since)
			return false;
		st = cpu_stats();
		if (st && now > since)
			st->hold_ns += now - since;
		nr_cpus = scx_bpf_nr_cpu_ids();
		bpf_for(cpu, 0, nr_cpus)
			scx_bpf_kick_cpu(cpu, SCX_KICK_IDLE);
		return false;
	}
	return hold_is_on();
}

/*
 * A task's event rate now: the collector folds a window into the rate only
 * when the task makes its next event, so a task asleep for seconds still
 * shows the rate of its last burst (the shell that will resume a stopped
 * consumer). Each window since then folds a zero in, as the collector's
 * ewma_roll would; eight or more leave nothing.
 */
static u64 decayed_since(u64 rate, u64 window_start_ns, u64 now)
{
	u64 idle = 0;
	u32 i;

	if (now > window_start_ns)
		idle = (now - window_start_ns) / CUSTOS_RATE_WINDOW_NS;
	if (idle >= 8)
		return 0;
	/* The open window is the first; the rest are empty. */
	bpf_for(i, 1, idle)
		rate -= rate >> CUSTOS_RATE_EWMA_SHIFT;
	return rate;
}

static u64 rate_since(const struct custos_task_features *tf, u64 now)
{
	return decayed_since(task_event_rate(tf, now, false), tf->window_start_ns, now);
}

/*
 * A task's events per window as the hold and the light lane judge it: its
 * own, or while it is young (two windows) its parent's when higher, so a
 * flood split into short-lived children (find -exec) is the flood's kind.
 * @tf: its features (task_features_of(p), looked up once by the caller);
 * @events: its events so far (the collector's count; 0 if unknown).
 */
static u64 task_rate(const struct task_struct *p, const struct custos_task_features *tf,
		     const struct task_ctx *tctx, u64 now, u64 *events)
{
	u64 rate = 0;

	*events = 0;
	if (tf) {
		*events = tf->events_total;
		rate = rate_since(tf, now);
	}
	if (now - p->start_time < 2 * CUSTOS_RATE_WINDOW_NS && tctx->inherited_rate > rate)
		rate = tctx->inherited_rate;
	return rate;
}

/*
 * The events per window of a task's children that exited (the collector
 * counts them at their exit, custos_task_features.kin_rate): as
 * task_event_rate and rate_since read a task's own.
 */
static u64 kin_rate_of(const struct custos_task_features *tf, u64 now)
{
	u64 rate = tf->kin_rate;

	if (now <= tf->window_start_ns + 2 * CUSTOS_RATE_WINDOW_NS && tf->kin_window_events > rate)
		rate = tf->kin_window_events;
	return decayed_since(rate, tf->window_start_ns, now);
}

/*
 * Whether the light lane takes a task (and a consumer spares it): by rate
 * alone, not task_heavy: outside a hold no fork charge bounds what the
 * children of a light parent make, and an exec storm's children (fewer
 * than hold_allowance events each) would all be light. Its kin too, its
 * own or while it is young its parent's: a swarm of short-lived children
 * (a shell starting a `cat` of 20 files every few ms) is light by every
 * child's rate and its parent's own, and 16 of them in the lane took the
 * 10 ms probe's p50 from 8 to 54 ms (p99 41 to 101 ms) on 2 vCPUs.
 * The lane only: the hold judges by the task's own events, or the shell
 * resuming a stopped consumer, whose `sleep 2` just exited, would be held.
 */
static bool light_by_rate(const struct task_struct *p, const struct task_ctx *tctx, u64 now)
{
	const struct custos_task_features *tf = task_features_of(p);
	u64 events, kin = 0;

	if (task_rate(p, tf, tctx, now, &events) >= light_rate)
		return false;
	if (tf)
		kin = kin_rate_of(tf, now);
	if (now - p->start_time < 2 * CUSTOS_RATE_WINDOW_NS && tctx->inherited_kin > kin)
		kin = tctx->inherited_kin;
	return kin < light_rate;
}

/*
 * Whether a task makes events like a producer, held at once by the hold:
 * light_rate a window or more, its own or, while it is young, its
 * parent's. A task of a light parent that has made fewer than
 * hold_allowance events in all is judged by them, not by its rate:
 * its first window is the loading of the program it exec'd (18 events for
 * /bin/sleep), and judged by light_rate, the sleep of the shell that
 * resumes a stopped consumer was held until the guard let it through
 * (stops of 9.7-20.8 s, not 2 s, beside a CPU hog). Not "while young": an
 * exec under a flood, beside a hog, outlasted the two windows.
 */
static bool task_heavy(const struct task_ctx *tctx, u64 rate, u64 events)
{
	if (tctx->inherited_rate < light_rate && events < hold_allowance)
		return false;
	return rate >= light_rate;
}

/* A task's allowance counts from the first time it is seen in a hold. */
static void hold_see(struct task_ctx *tctx, u64 events, u64 epoch)
{
	if (tctx->hold_epoch != epoch) {
		tctx->hold_epoch = epoch;
		tctx->hold_events_base = events;
		tctx->hold_born = 0;
		tctx->hold_spent = false;
	}
}

/*
 * What a task spent of its allowance in this hold: its events, and
 * light_rate (about an exec's loading) for each child it forked. A child
 * is judged by its own events and has an allowance of its own, so without
 * the charge a light shell forking one program after another in a hold
 * gave each a fresh allowance; with it, a light task starts at most
 * hold_allowance / light_rate (4) before it and its young children are
 * held.
 */
static u64 hold_spent(const struct task_ctx *tctx, u64 events)
{
	return events - tctx->hold_events_base + (u64)tctx->hold_born * light_rate;
}

/*
 * A light task's allowance now: hold_allowance while every ring has its
 * reserve, shrinking with the room left above the floor on the fullest
 * ring, to none at the floor. One allowance per task alone let the light
 * tasks overspend their share however many they were: a swarm of 16
 * shells starting `cat`s (6-9 events a window each, light) took the ring
 * under its floor in every run, and the floor held the shell resuming a
 * stopped consumer until the guard (stops of 6-7 s for 2 s). Shrinking,
 * the heaviest spenders are held first and what is left of the share
 * stays for the tasks that spent least: N light tasks spending alike are
 * all held with 1 / (1 + N * hold_allowance * event / room) of the room
 * (reserve - floor) left: 22 % for N = 32, events of ~120 bytes and the
 * 70 KiB of room of the 256 KiB events ring on 2 CPUs (--hold-rings),
 * where the swarm through a stop left 17-28 % of it (lowest free 13.3-
 * 16.1 %, floor 8.6 %, reserve 35.9 %).
 */
static u64 hold_allowance_now(const struct custos_global_features *g)
{
	u64 left = CUSTOS_FEATURE_MAX;
	int r;

	if (!g || !g->collector_running)
		return hold_allowance;
	for (r = 0; r < CUSTOS_NR_RINGS; r++) {
		u64 free = g->ring_free_bytes[r], floor = g->hold_floor_bytes[r];
		u64 reserve = g->hold_reserve_bytes[r], a;

		if (!g->ring_size[r] || reserve <= floor)
			continue;
		if (free <= floor)
			a = 0;
		else if (free >= reserve)
			a = CUSTOS_FEATURE_MAX;
		else
			a = (free - floor) * CUSTOS_FEATURE_MAX / (reserve - floor);
		if (a < left)
			left = a;
	}
	return hold_allowance * left / CUSTOS_FEATURE_MAX;
}

/* A task that spent nothing in the hold is not held by its allowance: the
 * floor holds every task that makes an event. */
static bool hold_allowance_spent(const struct task_ctx *tctx, u64 events, u64 allowance)
{
	u64 spent = hold_spent(tctx, events);

	return spent && spent >= allowance;
}

/*
 * A task that made no event for two windows (asleep since its last burst:
 * its last event was in the window that opened at window_start_ns) starts
 * its allowance afresh in this hold, as if first seen now: what it spends
 * is its new burst's. The shell that resumes a stopped consumer forks
 * /bin/sleep once the hold is on; woken 2 s later, by what the sleep's
 * exec had spent it was held under the floor, and the stop lasted until
 * the guard let it through. After eight windows, as at first, a 0.5 s
 * stop reached the guard in 2 of 5 runs (5.7-5.9 s). Under the floor a
 * task whose rate shows its burst is held all the same.
 */
#define HOLD_FRESH_AFTER_NS	(3 * CUSTOS_RATE_WINDOW_NS)

static void hold_rebase_idle(const struct custos_task_features *tf, struct task_ctx *tctx,
			     u64 events, u64 now)
{
	if (!tf || now < tf->window_start_ns + HOLD_FRESH_AFTER_NS)
		return;
	tctx->hold_events_base = events;
	tctx->hold_born = 0;
	tctx->hold_spent = false;
}

static bool parent_spent(const struct task_struct *p, u64 epoch)
{
	struct task_struct *parent;
	struct task_ctx *pctx = NULL;
	bool spent = false;

	bpf_rcu_read_lock();
	parent = p->real_parent;
	if (parent)
		pctx = bpf_task_storage_get(&task_ctx_stor, parent, 0, 0);
	if (pctx)
		spent = pctx->hold_epoch == epoch && pctx->hold_spent;
	bpf_rcu_read_unlock();
	return spent;
}

/*
 * Whether @p is to be held while the hold is on: a task that produces
 * events, not a consumer or a kthread, and not one the starvation guard
 * just let through. Its allowance counts from the first time it is seen in
 * this hold.
 */
static bool holdable(const struct task_struct *p, struct task_ctx *tctx, u64 now)
{
	const struct custos_global_features *g;
	const struct custos_task_features *tf;
	u32 zero = 0;
	u64 events, rate, epoch = hold_epoch;

	/* An exiting task makes no more syscalls, and the kernel puts it back
	 * on its CPU without asking enqueue (no SCX_OPS_ENQ_EXITING): kicked
	 * off, it would only be kicked again. */
	if (!tctx || (p->flags & (PF_KTHREAD | PF_EXITING)))
		return false;
	g = bpf_map_lookup_elem(&global_features, &zero);
	if (tctx->consumer || is_consumer(p, g))
		return false;
	/* This scheduler's own daemon is a task like the others: exempt, its
	 * stats (a socket round-trip and a log line a second) spent the light
	 * tasks' share of a 64 KiB ring through a 2 s stall. */
	tf = task_features_of(p);
	rate = task_rate(p, tf, tctx, now, &events);
	/* Let through by the guard: for a slice, and a few events. */
	if (now < tctx->hold_pass_until && events < tctx->hold_pass_events)
		return false;
	hold_see(tctx, events, epoch);
	hold_rebase_idle(tf, tctx, events, now);
	/* Lightest first by what it makes now and what it spent of its
	 * allowance in this hold: a producer a policy slowed before the hold
	 * looks light by its rate, but spent its allowance. By rate alone the
	 * guard let 93-149 of them through before the shell resuming a
	 * stopped consumer (learned policy, 2 s stop: the stop lasted 14-20 s
	 * and what they wrote overflowed the ring). */
	tctx->hold_order = rate + hold_spent(tctx, events);
	/* Under the floor the light tasks' share is spent: every task that
	 * made an event lately (its rate shows it, for eight windows) or in
	 * this hold is held. One that made none runs on: a task that only
	 * computes cannot fill a ring, and its next event holds it. */
	if (hold_all && (rate || events != tctx->hold_events_base))
		return true;
	if (tctx->hold_spent || task_heavy(tctx, rate, events) ||
	    hold_allowance_spent(tctx, events, hold_allowance_now(g))) {
		tctx->hold_spent = true;
		return true;
	}
	/* A young task whose parent spent its allowance in this hold has
	 * none of its own, for the whole hold: a flood split into children
	 * (find -exec) would otherwise start each with a fresh allowance,
	 * and 16 of them spent the light tasks' share of a 512 KiB ring. */
	if (now - p->start_time < 2 * CUSTOS_RATE_WINDOW_NS && parent_spent(p, epoch)) {
		tctx->hold_spent = true;
		return true;
	}
	return false;
}

/* Hold @p if the hold is on and it produces events; counts it. */
static bool hold_task(struct task_struct *p, struct task_ctx *tctx, u64 enq_flags, u64 now)
{
	struct custos_sched_stats *st;

	if (!hold_update(now) || !holdable(p, tctx, now))
		return false;
	/* Lightest first (hold_order): the guard lets the shell that resumes
	 * a stopped consumer through before the flood's workers. */
	scx_bpf_dsq_insert_vtime(p, CUSTOS_HELD_DSQ, slice_ns, tctx->hold_order, enq_flags);
	st = cpu_stats();
	if (st)
		st->held++;
	return true;
}

/*
 * Whether @p (migration disabled) was kicked at its hold stop: on its way
 * back to user mode, in the collector's task work, inside none of its
 * programs (custos_task_features.hold_stop).
 */
static bool at_hold_stop(const struct task_struct *p)
{
	const struct custos_task_features *tf = task_features_of(p);

	return tf && tf->hold_stop;
}

/*
 * Hold @p, preempted with migration disabled, if the hold is on and it
 * produces events. At its hold stop it takes no copy of the collector's
 * programs: held like any other. Inside a program, only while its CPU has
 * copies to spare: CUSTOS_SYSCALL_COPIES - 2 such tasks per CPU at most,
 * so that two copies stay free. With one free copy, another task preempted
 * inside it made the kernel skip every copy for whatever ran meanwhile (222
 * syscalls lost through a held hold of 6 s on one vCPU, two tasks held in
 * programs). Otherwise it leaves the program first (enqueue's short slice)
 * and is held at its next stop.
 */
static bool hold_in_program(struct task_struct *p, struct task_ctx *tctx, u64 enq_flags)
{
	struct custos_sched_stats *st;
	s32 cpu = scx_bpf_task_cpu(p);
	u64 now = bpf_ktime_get_ns();
	u32 *held;

	if (at_hold_stop(p)) {
		if (!hold_task(p, tctx, enq_flags, now))
			return false;
		st = cpu_stats();
		if (st)
			st->held_at_stop++;
		return true;
	}
	if (cpu < 0 || cpu >= CUSTOS_MAX_CPUS)
		return false;
	held = &held_in_program[cpu];
	if (*held >= CUSTOS_SYSCALL_COPIES - 2) {
		/* A bounce: back on its CPU to leave the program; its next
		 * syscall arms its hold stop (or, on a kernel without task
		 * works, kicks it inside the program again). */
		st = cpu_stats();
		if (st && hold_update(now) && holdable(p, tctx, now))
			st->hold_bounces++;
		return false;
	}
	if (!hold_task(p, tctx, enq_flags, now))
		return false;
	__sync_fetch_and_add(held, 1);
	tctx->held_in_program = true;
	st = cpu_stats();
	if (st)
		st->held_in_program++;
	return true;
}

/* sched_ext callbacks, in the order the kernel calls them */

s32 BPF_STRUCT_OPS(custos_select_cpu, struct task_struct *p, s32 prev_cpu, u64 wake_flags)
{
	struct task_ctx *tctx = task_ctx(p);
	struct custos_sched_stats *st;
	s32 cpu = -1;
	bool sync;

	if (!tctx)
		return prev_cpu;
	tctx->decided = true;
	if (decide_queue(p, tctx) != CUSTOS_PRIMARY_QUEUE)
		return prev_cpu;
	/* Held tasks go through enqueue, never straight to an idle CPU. */
	if (hold_enabled) {
		u64 now = bpf_ktime_get_ns();

		if (hold_update(now) && holdable(p, tctx, now))
			return prev_cpu;
	}

	/*
	 * The GRU's CPU if usable (placement_gru.bpf.h); never for a consumer.
	 * decide_queue just refreshed tctx->consumer, except for a task whose
	 * queue is forced (debug), which is asked directly.
	 */
	if (placement_gru && !tctx->consumer && !(queue_forcing && placement_is_consumer(p))) {
		st = cpu_stats();
		cpu = placement_predicted(p, wake_flags, st);
		if (cpu >= 0) {
			tctx->enqueued_at = bpf_ktime_get_ns();
			scx_bpf_dsq_insert(p, SCX_DSQ_LOCAL, slice_ns, 0);
			/* A primary task sent to an idle CPU, as below. */
			if (st)
				st->direct_dispatches++;
			return cpu;
		}
	}

	/*
	 * A synchronous wakeup (the waker sleeps next: pipes, sockets, futex
	 * hand-offs) runs the wakee on the waker's CPU once it is free, if
	 * nothing else waits there: the pair stays on one CPU instead of paying
	 * a cross-CPU wakeup per hand-off.
	 */
	sync = (wake_flags & SCX_WAKE_SYNC) && sync_wakeup_target(p, &cpu);
	/* Else a primary task and an idle CPU: no queue to wait in. */
	if (!sync)
		cpu = scx_bpf_select_cpu_and(p, prev_cpu, wake_flags, p->cpus_ptr, 0);
	if (cpu >= 0) {
		tctx->enqueued_at = bpf_ktime_get_ns();
		/* Light on an idle CPU: no lane to wait in, but a consumer waking
		 * later spares it like one run from the lane. */
		tctx->light_direct = light_share_pct && !tctx->consumer &&
				     light_by_rate(p, tctx, tctx->enqueued_at);
		scx_bpf_dsq_insert(p, SCX_DSQ_LOCAL, slice_ns, 0);
		st = cpu_stats();
		if (st) {
			if (sync)
				st->sync_wakeups++;
			else
				st->direct_dispatches++;
		}
		return cpu;
	}
	/* No idle CPU: a consumer goes where it can preempt (see enqueue). */
	if (tctx->consumer && consumer_preempt) {
		cpu = consumer_victim(p, prev_cpu);
		if (cpu >= 0)
			return cpu;
	}
	return prev_cpu;
}

/* Free ring space now, from the collector's map and external sources. */
static u8 availability_now(void)
{
	u32 zero = 0;

	return availability_of(bpf_map_lookup_elem(&global_features, &zero));
}

/*
 * A consumer woke up with no idle CPU for it: take the CPU select_cpu chose,
 * preempting what runs there unless that is a consumer or a kthread.
 *
 * A consumer queued again while runnable (its slice ended: at the tick it is
 * refilled, so that happens when another consumer waits on the CPU, or past
 * the starvation guard) goes to the head of its CPU's local queue, never to
 * a shared one: the kernel runs the local queue without asking ops.dispatch
 * while it is not empty, and kthreads and preempted producers keep landing
 * there, so a consumer in a shared queue could wait for tens of ms (session
 * 4 traces: 24.6 ms, 12 records refused). Only past the starvation guard
 * does it take the head of the primary queue like everyone.
 */
static bool enqueue_consumer(struct task_struct *p, struct task_ctx *tctx, u64 enq_flags,
			     struct custos_sched_stats *st)
{
	s32 cpu = scx_bpf_task_cpu(p);
	u8 r = cpu >= 0 && cpu < CUSTOS_MAX_CPUS ? cpu_running[cpu] : CUSTOS_RUN_PROTECTED;

	/* SCX_DSQ_LOCAL is the task's own CPU here, which its cpumask allows. */
	if (!consumer_preempt)
		return false;
	if (!(enq_flags & SCX_ENQ_WAKEUP)) {
		if (starvation_guard_ns &&
		    bpf_ktime_get_ns() - tctx->running_at >= starvation_guard_ns)
			return false;
		/* Behind what only this CPU can run (others_need_cpu). */
		if (others_need_cpu(cpu))
			scx_bpf_dsq_insert(p, SCX_DSQ_LOCAL, slice_ns, enq_flags);
		else
			scx_bpf_dsq_insert(p, SCX_DSQ_LOCAL, slice_ns, enq_flags | SCX_ENQ_HEAD);
		if (st)
			st->consumer_kept++;
		return true;
	}
	if (r != CUSTOS_RUN_BUDGETED && r != CUSTOS_RUN_PRIMARY) {
		/*
		 * The CPU is between tasks, or runs a kthread or another
		 * consumer: run next, without preempting. In the shared queue
		 * the consumer would wait behind every eligible budgeted queue.
		 */
		scx_bpf_dsq_insert(p, SCX_DSQ_LOCAL, slice_ns, enq_flags | SCX_ENQ_HEAD);
		if (st)
			st->consumer_next++;
		return true;
	}
	scx_bpf_dsq_insert(p, SCX_DSQ_LOCAL, slice_ns, enq_flags | SCX_ENQ_PREEMPT);
	if (st) {
		if (r == CUSTOS_RUN_BUDGETED)
			st->consumer_preemptions++;
		else
			st->consumer_preemptions_primary++;
	}
	return true;
}

void BPF_STRUCT_OPS(custos_enqueue, struct task_struct *p, u64 enq_flags)
{
	struct task_ctx *tctx = task_ctx(p);
	struct custos_sched_stats *st = cpu_stats();
	u32 q = CUSTOS_PRIMARY_QUEUE;
	s32 cpu;

	if (tctx) {
		q = tctx->decided ? tctx->queue : decide_queue(p, tctx);
		tctx->decided = false;
		tctx->enqueued_at = bpf_ktime_get_ns();
	}

	/*
	 * Per-CPU kthreads (ksoftirqd, kworkers, ...) are the kernel's own
	 * plumbing, never producers: run them next on their CPU. Queued, they
	 * would sit in the primary queue, which a CPU saturated by eligible
	 * budgeted queues never serves (h_1 = 0), and everything waiting on
	 * their work would stall with them.
	 */
	if ((p->flags & PF_KTHREAD) && is_pinned(p)) {
		scx_bpf_dsq_insert(p, SCX_DSQ_LOCAL, slice_ns, enq_flags);
		if (st)
			st->kthread_dispatches++;
		return;
	}

	/*
	 * A task preempted with migration disabled: typically a producer
	 * inside the collector's program, preempted by a waking consumer the
	 * moment the program turned preemption back on. While it is off the
	 * CPU, that copy of the program is skipped for every other task's
	 * syscalls here, so it runs next, on the local queue (after whatever
	 * preempted it and what waits there already: a consumer put at its
	 * head goes first), for a short slice that only lets it leave. The
	 * kernel did the same before SCX_OPS_ENQ_MIGRATION_DISABLED (set by the
	 * loader) routed these tasks here, but with its default 20 ms slice: a
	 * producer running 20 ms past a consumer's slice end while the consumer
	 * waited is what overflowed the rings (session 4 traces).
	 */
	if (!(enq_flags & SCX_ENQ_WAKEUP) && is_migration_disabled(p) &&
	    !(tctx && tctx->consumer)) {
		/* Under the hold, a producer the collector kicked at the syscall
		 * that crossed the reserve is held where it stopped, while a
		 * copy of the programs is left on its CPU. */
		if (hold_enabled && tctx && hold_in_program(p, tctx, enq_flags))
			return;
		scx_bpf_dsq_insert(p, SCX_DSQ_LOCAL, MIGRATION_DISABLED_SLICE_NS, enq_flags);
		if (st)
			st->migration_disabled_next++;
		return;
	}

	if (hold_enabled && hold_task(p, tctx, enq_flags, bpf_ktime_get_ns()))
		return;
	/*
	 * While the hold is on it decides who waits: a task it lets run (a
	 * light one, within its allowance) goes to the primary side, the
	 * light lane included, not to the budgeted queue a policy chose,
	 * which dispatch does not serve during a hold. There it waited for
	 * the starvation guard: under the learned policy, through a 2 s stop
	 * of the consumer, 62 guard picks, and the stop lasted 20 s.
	 */
	if (hold_enabled && q != CUSTOS_PRIMARY_QUEUE && hold_is_on()) {
		q = CUSTOS_PRIMARY_QUEUE;
		if (st)
			st->hold_unbudgeted++;
	}

	if (tctx && tctx->consumer && q == CUSTOS_PRIMARY_QUEUE) {
		if (enqueue_consumer(p, tctx, enq_flags, st))
			return;
		enq_flags |= SCX_ENQ_HEAD;
		if (st)
			st->consumer_queued++;
	}

	/*
	 * A wake-up enters the lane, and keeps it for LIGHT_SLICES_PER_WAKE
	 * slices: a ticker whose 100 us of work read as whole slices on a
	 * vCPU the emulator had paused went back behind every flood worker in
	 * the primary FIFO and waited 90 ms there (a steal-time stall does the
	 * same on a real host). A task that computes on goes to the primary
	 * FIFO: spinning shells that make no events must not crowd a sleeper
	 * out of the lane. A light task preempted with slice left never comes
	 * here: the kernel keeps it at the head of its CPU's local queue.
	 * On one CPU every task is pinned, and the lane is that CPU's alone:
	 * without it there the probe's p99 was 204-406 ms (the default's
	 * 10-89), light_enqueues 0.
	 */
	if (light_share_pct && tctx && !tctx->consumer && q == CUSTOS_PRIMARY_QUEUE &&
	    (!is_pinned(p) || scx_bpf_nr_cpu_ids() == 1) &&
	    ((enq_flags & SCX_ENQ_WAKEUP) || tctx->light_slices < LIGHT_SLICES_PER_WAKE)) {
		if (light_by_rate(p, tctx, bpf_ktime_get_ns())) {
			tctx->light_slices = enq_flags & SCX_ENQ_WAKEUP ? 1 : tctx->light_slices + 1;
			tctx->light = true;
			if (enq_flags & SCX_ENQ_WAKEUP)
				scx_bpf_dsq_insert(p, CUSTOS_FRESH_DSQ, LIGHT_FRESH_SLICE_NS, enq_flags);
			else
				scx_bpf_dsq_insert(p, CUSTOS_LIGHT_DSQ, slice_ns, enq_flags);
			if (st)
				st->light_enqueues++;
			goto kick_idle;
		}
	}

	if (is_pinned(p)) {
		cpu = scx_bpf_task_cpu(p);
		scx_bpf_dsq_insert(p, pinned_dsq(cpu, q), slice_ns, enq_flags);
		scx_bpf_kick_cpu(cpu, SCX_KICK_IDLE);
		if (st)
			st->pinned_enqueues++;
		return;
	}

	scx_bpf_dsq_insert(p, q, slice_ns, enq_flags);
kick_idle:
	/* Wake an idle CPU the task may run on; it decides whether the budget allows. */
	cpu = scx_bpf_pick_idle_cpu(p->cpus_ptr, 0);
	if (cpu >= 0) {
		scx_bpf_kick_cpu(cpu, SCX_KICK_IDLE);
		if (st)
			st->idle_kicks++;
	}
}

/*
 * The head of the light lane, while this CPU's share for it lasts (the
 * budget refills at light_share_pct of the time, up to LIGHT_BURST_NS;
 * stopping charges what a light task ran). Out of budget, the lane waits
 * for the primary queue's turn (dispatch serves it when that is empty).
 */
static bool consume_light(u64 now, struct cpu_ctx *cctx, struct custos_sched_stats *st)
{
	if (!cctx || !scx_bpf_dsq_nr_queued(CUSTOS_LIGHT_DSQ))
		return false;
	if (now > cctx->light_refill_at) {
		cctx->light_budget_ns += (s64)((now - cctx->light_refill_at) * light_share_pct / 100);
		if (cctx->light_budget_ns > (s64)LIGHT_BURST_NS)
			cctx->light_budget_ns = LIGHT_BURST_NS;
	}
	cctx->light_refill_at = now;
	if (cctx->light_budget_ns <= 0) {
		if (st)
			st->light_deferred++;
		return false;
	}
	if (!scx_bpf_dsq_move_to_local(CUSTOS_LIGHT_DSQ, 0))
		return false;
	if (st)
		st->light_dispatches++;
	return true;
}

void BPF_STRUCT_OPS(custos_dispatch, s32 cpu, struct task_struct *prev)
{
	struct custos_sched_stats *st = cpu_stats();
	struct cpu_ctx *cctx = this_cpu_ctx();
	u64 now = bpf_ktime_get_ns(), earliest = 0, tried = 0;
	struct task_ctx *prev_ctx = NULL;
	bool prev_queued = prev && (prev->scx.flags & SCX_TASK_QUEUED), hold, holding;
	u32 q, attempt;

	if (prev_queued)
		prev_ctx = task_ctx(prev);

	if (starvation_guard_ns && consume_starving(cpu, now, st))
		return;
	/*
	 * A consumer whose slice ran out while it still has work keeps its CPU:
	 * it sleeps as soon as the rings are empty, so runnable means events are
	 * waiting (the sampled ring availability lags behind by up to 64 events
	 * per CPU, too late to ask). This has to happen here: the kernel asks for
	 * the next task before it puts prev back through enqueue, so a consumer
	 * that enqueue sent to the head of the primary queue would lose at least
	 * a slice to whatever this picked instead. The starvation guard above
	 * still serves anyone who waits too long.
	 */
	if (consumer_preempt && prev_ctx && prev_ctx->consumer) {
		/* A primary task pinned here goes first (others_need_cpu):
		 * enqueue then puts the consumer right behind it. */
		if (scx_bpf_nr_cpu_ids() > 1 &&
		    scx_bpf_dsq_move_to_local(pinned_dsq(cpu, CUSTOS_PRIMARY_QUEUE), 0)) {
			if (st)
				st->dispatches[CUSTOS_PRIMARY_QUEUE]++;
			return;
		}
		/* Slices through the kfunc: kernels since 6.19 deprecate direct
		 * writes (7.2 logs it at every load); compat.bpf.h falls back. */
		scx_bpf_task_set_slice(prev, slice_ns);
		if (st)
			st->consumer_kept++;
		return;
	}
	if (consumer_preempt && consume_waiting_consumer(cpu, st))
		return;
	holding = hold_update(now);
	/* Released: what was held has waited longest. */
	if (hold_enabled && !holding && scx_bpf_dsq_move_to_local(CUSTOS_HELD_DSQ, 0)) {
		if (st)
			st->hold_released++;
		return;
	}
	/* Light tasks before the budgeted queues and the primary FIFO; they
	 * are not held (hold_task sent the others to the held queue). Those
	 * just woken first, whatever the share (LIGHT_FRESH_SLICE_NS). */
	if (light_share_pct && scx_bpf_dsq_move_to_local(CUSTOS_FRESH_DSQ, 0)) {
		if (st)
			st->light_dispatches++;
		return;
	}
	if (light_share_pct && consume_light(now, cctx, st))
		return;
	hold = holding || (overflow_hold && availability_now() <= availability_low);
	if (hold) {
		earliest = now + OVERFLOW_RECHECK_NS;
		if (st)
			st->overflow_holds++;
		goto primary;
	}

	/*
	 * Eq. 2: the hungriest eligible non-empty budgeted queue. If its tasks
	 * cannot run here, try the next one.
	 */
	bpf_for(attempt, 0, nr_queues) {
		u64 best_h = 0;
		u32 best = 0, nr_eligible = 0;

		bpf_for(q, 1, nr_queues + 1) {
			u64 t, w, h, ready_at;

			if (q >= CUSTOS_MAX_QUEUES)
				break;
			if (tried & (1ULL << q))
				continue;
			if (!nr_waiting(q, cpu) &&
			    !(prev_ctx && prev_ctx->queue == q))
				continue;
			w = waiting_time_ns[q];
			t = now - last_consumed_ns[q];
			if (t < w) {
				ready_at = last_consumed_ns[q] + w;
				if (!earliest || ready_at < earliest)
					earliest = ready_at;
				continue;
			}
			if (!nr_waiting(q, cpu))
				continue;	/* only prev is in it; handled below */
			nr_eligible++;
			/* h = t / w in 16.16 fixed point; t capped so it cannot overflow */
			if (t > (1ULL << 46))
				t = 1ULL << 46;
			h = (t << 16) / (w ? w : 1);
			if (h > best_h) {
				best_h = h;
				best = q;
			}
		}
		if (!best)
			break;
		tried |= 1ULL << best;
		if (consume_queue(best, cpu, cctx)) {
			last_consumed_ns[best & (CUSTOS_MAX_QUEUES - 1)] = now;
			if (st) {
				st->dispatches[best & (CUSTOS_MAX_QUEUES - 1)]++;
				if (nr_eligible > 1 || nr_waiting(CUSTOS_PRIMARY_QUEUE, cpu))
					st->hungry_picks[best & (CUSTOS_MAX_QUEUES - 1)]++;
			}
			return;
		}
	}

primary:
	if (consume_queue(CUSTOS_PRIMARY_QUEUE, cpu, cctx)) {
		if (st)
			st->dispatches[CUSTOS_PRIMARY_QUEUE]++;
		return;
	}
	/* The light lane out of budget, and nothing else to run: run it. */
	if (light_share_pct && scx_bpf_dsq_move_to_local(CUSTOS_LIGHT_DSQ, 0)) {
		if (st)
			st->light_dispatches++;
		return;
	}

	/* Nothing else to run: keep prev if its queue allows it another slice. */
	if (prev_ctx && !(holding && holdable(prev, prev_ctx, now))) {
		q = prev_ctx->queue & (CUSTOS_MAX_QUEUES - 1);
		if (q == CUSTOS_PRIMARY_QUEUE ||
		    (!hold && (work_conserving || now - last_consumed_ns[q] >= waiting_time_ns[q]))) {
			scx_bpf_task_set_slice(prev, slice_ns);
			if (q != CUSTOS_PRIMARY_QUEUE)
				last_consumed_ns[q] = now;
			if (st)
				st->keep_running++;
			return;
		}
	}

	if (work_conserving && !hold) {
		bpf_for(q, 1, nr_queues + 1) {
			if (q >= CUSTOS_MAX_QUEUES)
				break;
			if (consume_queue(q, cpu, cctx)) {
				last_consumed_ns[q] = now;
				if (st)
					st->dispatches[q]++;
				return;
			}
		}
		return;
	}

	/* Budgeted work is waiting for its time: come back when it is due. */
	if (earliest)
		arm_budget_timer(cpu, earliest > now ? earliest - now : 1);
}

void BPF_STRUCT_OPS(custos_runnable, struct task_struct *p, u64 enq_flags)
{
	struct task_struct *waker;
	struct task_ctx *wctx, *tctx;
	u64 now;

	if (placement_gru && (tctx = task_ctx(p)))
		placement_snapshot(p, tctx, enq_flags);

	/* wake_freq as scx_lavd defines it: how often the waker wakes others. */
	if (!(enq_flags & SCX_ENQ_WAKEUP))
		return;
	now = bpf_ktime_get_ns();
	waker = bpf_get_current_task_btf();
	wctx = task_ctx(waker);
	if (!wctx)
		return;
	wctx->wake_freq = ewma(wctx->wake_freq, freq_of(now - wctx->last_wake_at));
	wctx->last_wake_at = now;
	feature_cost(now);
}

void BPF_STRUCT_OPS(custos_running, struct task_struct *p)
{
	struct custos_sched_stats *st = cpu_stats();
	struct cpu_ctx *cctx = this_cpu_ctx();
	struct task_ctx *tctx = task_ctx(p);
	u64 now = bpf_ktime_get_ns(), wait;
	u32 q;

	if (!tctx)
		return;
	tctx->running_at = now;
	tctx->switch_count++;
	if (tctx->held_in_program) {
		s32 cpu = scx_bpf_task_cpu(p);

		tctx->held_in_program = false;
		if (cpu >= 0 && cpu < CUSTOS_MAX_CPUS && held_in_program[cpu])
			__sync_fetch_and_sub(&held_in_program[cpu], 1);
	}
	/*
	 * A producer queued before the hold began (or run by an idle CPU that
	 * did not look): off again at once, through enqueue, which holds it.
	 * Not inside a program (migration disabled): it has to leave it first.
	 */
	if (hold_enabled && hold_is_on() && !is_migration_disabled(p) && holdable(p, tctx, now)) {
		scx_bpf_kick_cpu(scx_bpf_task_cpu(p), SCX_KICK_PREEMPT);
		if (st)
			st->hold_running_kicks++;
	}
	q = tctx->queue & (CUSTOS_MAX_QUEUES - 1);
	set_cpu_running(scx_bpf_task_cpu(p),
			tctx->consumer || ((p->flags & PF_KTHREAD) && is_pinned(p)) ?
				CUSTOS_RUN_PROTECTED :
			tctx->light || tctx->light_direct ? CUSTOS_RUN_LIGHT :
			q != CUSTOS_PRIMARY_QUEUE ? CUSTOS_RUN_BUDGETED : CUSTOS_RUN_PRIMARY);
	if (st && tctx->enqueued_at) {
		wait = now - tctx->enqueued_at;
		st->wait_ns[q] += wait;
		if (wait > st->wait_max_ns[q])
			st->wait_max_ns[q] = wait;
	}
	tctx->enqueued_at = 0;
	if (cctx) {
		tctx->nr_idle = cctx->idle_slices;
		cctx->idle_slices = 0;
	}
	feature_cost(now);
}

void BPF_STRUCT_OPS(custos_stopping, struct task_struct *p, bool runnable)
{
	struct task_ctx *tctx = task_ctx(p);
	u64 now = bpf_ktime_get_ns(), ran;

	set_cpu_running(scx_bpf_task_cpu(p), CUSTOS_RUN_IDLE);
	if (!tctx)
		return;
	ran = now - tctx->running_at;
	tctx->runtime_ns += ran;
	tctx->light_direct = false;
	/* The light lane's time here: charged, not below one burst owed. */
	if (tctx->light) {
		struct cpu_ctx *cctx = this_cpu_ctx();

		tctx->light = false;
		if (cctx) {
			cctx->light_budget_ns -= (s64)ran;
			if (cctx->light_budget_ns < -(s64)LIGHT_BURST_NS)
				cctx->light_budget_ns = -(s64)LIGHT_BURST_NS;
		}
	}

	/* nr_stop: stops before the task used up a slice's worth of CPU. */
	tctx->stops_this_slice++;
	tctx->slice_used_ns += ran;
	if (tctx->slice_used_ns >= slice_ns) {
		tctx->nr_stop = tctx->stops_this_slice;
		tctx->stops_this_slice = 0;
		tctx->slice_used_ns = 0;
	} else if (tctx->stops_this_slice > tctx->nr_stop) {
		tctx->nr_stop = tctx->stops_this_slice;
	}

	/* nvcsw: voluntary switches per rate window, averaged like nr_event. */
	if (now - tctx->nvcsw_window_start >= CUSTOS_RATE_WINDOW_NS) {
		tctx->nvcsw_avg = ewma(tctx->nvcsw_avg, p->nvcsw - tctx->nvcsw_at_window);
		tctx->nvcsw_at_window = p->nvcsw;
		tctx->nvcsw_window_start = now;
	}
	feature_cost(now);
}

/*
 * A running consumer keeps its CPU while it is runnable: it sleeps as soon
 * as the rings are empty, so runnable means events are waiting. This is done
 * at the tick, before the kernel acts on an expired slice: once the slice
 * has ended, the kernel runs whatever sits on the CPU's local queue without
 * asking ops.dispatch (whose keep rule then never fires), and the consumer
 * waits behind it. Bounded by the starvation guard, and not done while
 * a task that can run only here waits (others_need_cpu).
 */
static void keep_consumer(struct task_struct *p, struct task_ctx *tctx, u64 now)
{
	struct custos_sched_stats *st;
	s32 cpu = scx_bpf_task_cpu(p);

	if (!consumer_preempt || p->scx.slice >= slice_ns)
		return;
	if (others_need_cpu(cpu))
		return;
	if (starvation_guard_ns && now - tctx->running_at >= starvation_guard_ns)
		return;
	if (!p->scx.slice && (st = cpu_stats()))
		st->consumer_kept++;
	scx_bpf_task_set_slice(p, slice_ns);
}

/*
 * The policy again, for the running task: a producer that never sleeps
 * would otherwise flood the rings for a whole slice before its next enqueue
 * asks the policy. Ending its slice sends it through enqueue, which parks it.
 */
void BPF_STRUCT_OPS(custos_tick, struct task_struct *p)
{
	struct custos_sched_stats *st;
	struct task_ctx *tctx = task_ctx(p);
	u64 now = bpf_ktime_get_ns();

	/* Every CPU's tick looks at the rings: the hold begins and ends here
	 * even while no task wakes or sleeps. */
	if (hold_enabled && hold_update(now) && tctx && !tctx->consumer &&
	    !is_migration_disabled(p) && holdable(p, tctx, now)) {
		p->scx.slice = 0;
		st = cpu_stats();
		if (st)
			st->hold_tick_preemptions++;
		return;
	}
	if (tctx && tctx->consumer) {
		keep_consumer(p, tctx, now);
		return;
	}
	if (!tctx || tctx->queue != CUSTOS_PRIMARY_QUEUE ||
	    (p->flags & PF_KTHREAD))
		return;
	if (queue_forcing && forced_queue(p) >= 0)
		return;
	if (decide_queue(p, tctx) != CUSTOS_PRIMARY_QUEUE) {
		/* Decided: enqueue parks it without asking again. */
		tctx->decided = true;
		scx_bpf_task_set_slice(p, 0);
		st = cpu_stats();
		if (st)
			st->tick_preemptions++;
	}
	feature_cost(now);
}

void BPF_STRUCT_OPS(custos_quiescent, struct task_struct *p, u64 deq_flags)
{
	struct task_ctx *tctx;
	u64 now;

	/* wait_freq as scx_lavd defines it: how often the task goes to sleep. */
	if (!(deq_flags & SCX_DEQ_SLEEP))
		return;
	tctx = task_ctx(p);
	if (!tctx)
		return;
	now = bpf_ktime_get_ns();
	tctx->wait_freq = ewma(tctx->wait_freq, freq_of(now - tctx->last_sleep_at));
	tctx->last_sleep_at = now;
	feature_cost(now);
}

void BPF_STRUCT_OPS(custos_update_idle, s32 cpu, bool idle)
{
	struct cpu_ctx *cctx;

	if (!idle)
		return;
	cctx = this_cpu_ctx();
	if (cctx)
		cctx->idle_slices++;
}

s32 BPF_STRUCT_OPS(custos_init_task, struct task_struct *p, struct scx_init_task_args *args)
{
	struct task_ctx *tctx;
	u64 now = bpf_ktime_get_ns();

	tctx = bpf_task_storage_get(&task_ctx_stor, p, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!tctx)
		return -ENOMEM;
	tctx->last_sleep_at = now;
	tctx->last_wake_at = now;
	tctx->nvcsw_window_start = now;
	tctx->nvcsw_at_window = p->nvcsw;
	tctx->placement_created = args->fork;
	/* A child starts as its parent's kind (the hold, the light lane):
	 * fork runs in the parent. */
	if ((hold_enabled || light_share_pct) && args->fork) {
		struct task_struct *parent = bpf_get_current_task_btf();
		const struct custos_task_features *tf = task_features_of(parent);
		struct task_ctx *pctx;
		u64 events = 0;

		if (tf) {
			tctx->inherited_rate = task_event_rate(tf, now, false);
			tctx->inherited_kin = kin_rate_of(tf, now);
			events = tf->events_total;
		}
		pctx = bpf_task_storage_get(&task_ctx_stor, parent, 0, 0);
		if (pctx && now - parent->start_time < 2 * CUSTOS_RATE_WINDOW_NS) {
			if (pctx->inherited_rate > tctx->inherited_rate)
				tctx->inherited_rate = pctx->inherited_rate;
			if (pctx->inherited_kin > tctx->inherited_kin)
				tctx->inherited_kin = pctx->inherited_kin;
		}
		/* A child born in a hold costs its parent (hold_allowance_spent). */
		if (pctx && hold_enabled && hold_is_on()) {
			u64 epoch = hold_epoch;
			u32 zero = 0;

			hold_see(pctx, events, epoch);
			hold_rebase_idle(tf, pctx, events, now);
			pctx->hold_born++;
			if (hold_allowance_spent(pctx, events,
						 hold_allowance_now(bpf_map_lookup_elem(&global_features, &zero))))
				pctx->hold_spent = true;
			/* Born spent: no allowance of its own in this hold. */
			if (pctx->hold_spent) {
				hold_see(tctx, 0, epoch);
				tctx->hold_spent = true;
			}
		}
	}
	return 0;
}

s32 BPF_STRUCT_OPS_SLEEPABLE(custos_init)
{
	u32 nr_cpus = scx_bpf_nr_cpu_ids(), q;
	s32 cpu, err;

	if (nr_cpus > CUSTOS_MAX_CPUS) {
		scx_bpf_error("%u CPUs, the scheduler supports %d", nr_cpus, CUSTOS_MAX_CPUS);
		return -E2BIG;
	}
	bpf_for(q, 0, nr_queues + 1) {
		err = scx_bpf_create_dsq(q, -1);
		if (err) {
			scx_bpf_error("failed to create queue %u: %d", q, err);
			return err;
		}
		bpf_for(cpu, 0, nr_cpus) {
			err = scx_bpf_create_dsq(pinned_dsq(cpu, q), -1);
			if (err) {
				scx_bpf_error("failed to create queue %u of CPU %d: %d", q, cpu, err);
				return err;
			}
		}
	}
	err = scx_bpf_create_dsq(CUSTOS_HELD_DSQ, -1);
	if (err) {
		scx_bpf_error("failed to create the held queue: %d", err);
		return err;
	}
	err = scx_bpf_create_dsq(CUSTOS_LIGHT_DSQ, -1);
	if (!err)
		err = scx_bpf_create_dsq(CUSTOS_FRESH_DSQ, -1);
	if (err) {
		scx_bpf_error("failed to create the light lane: %d", err);
		return err;
	}
	bpf_for(cpu, 0, nr_cpus) {
		struct budget_timer *bt;
		u32 key = cpu;

		bt = bpf_map_lookup_elem(&budget_timers, &key);
		if (!bt)
			return -ENOENT;
		bpf_timer_init(&bt->timer, &budget_timers, CLOCK_MONOTONIC);
		bpf_timer_set_callback(&bt->timer, budget_timer_fn);
	}
	return 0;
}

void BPF_STRUCT_OPS(custos_exit, struct scx_exit_info *ei)
{
	UEI_RECORD(uei, ei);
}

SCX_OPS_DEFINE(custos_ops,
	       .select_cpu	= (void *)custos_select_cpu,
	       .enqueue		= (void *)custos_enqueue,
	       .dispatch	= (void *)custos_dispatch,
	       .runnable	= (void *)custos_runnable,
	       .running		= (void *)custos_running,
	       .stopping	= (void *)custos_stopping,
	       .tick		= (void *)custos_tick,
	       .quiescent	= (void *)custos_quiescent,
	       .update_idle	= (void *)custos_update_idle,
	       .init_task	= (void *)custos_init_task,
	       .init		= (void *)custos_init,
	       .exit		= (void *)custos_exit,
	       .timeout_ms	= 30000,
	       .name		= "custos");

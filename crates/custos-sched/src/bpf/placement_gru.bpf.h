/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The GRU placement layer (seed 002), beside the queue policies: it only
 * chooses the CPU of a primary task that wakes up; which queue a task
 * enters stays the queue policy's (static, learned or feedback).
 *
 * Each task created or woken up is sent to user space as a snapshot
 * (placement_snapshots); the agent there runs a GRU over the last ten
 * snapshots and writes the CPU for the last one's pid into pid_to_cpu. At
 * the task's next wakeup select_cpu uses that CPU if the prediction is
 * fresh, allowed and idle, else the scheduler's own placement. Scheduling
 * never waits for the agent: no prediction is the ordinary path.
 *
 * Consumer protection holds: a consumer never takes the predicted CPU (it
 * keeps its idle-or-preempt path), and its snapshots still feed the window
 * like any task's, as they did in the default scheduler's recordings.
 */

/* Off by default: without --placement gru nothing here runs. */
const volatile bool placement_gru;

/*
 * A prediction older than this is not used (ns). The prediction is for the
 * task's previous wakeup's window: a task that sleeps and wakes within
 * 50 ms (interactive and I/O-bound tasks, which placement helps most) finds
 * its own; 50 ms is also about the default scheduler's load-balancing
 * period on small machines, past which the placements the window described
 * have been rebalanced anyway. --placement-stale-ms sets it.
 */
const volatile u64 placement_stale_ns = 50 * NSEC_PER_MSEC;

/*
 * The scheduler's own process (its agent thread): not sent. Its wakeups
 * are caused by the snapshots themselves, and the default scheduler's
 * recordings the model learned from never contained it.
 */
const volatile u32 placement_agent_tgid;

/*
 * Adaptive wakeups (flags 0): the agent is woken only for the first record
 * after it caught up, so a busy system costs one wakeup per batch.
 */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20);
} placement_snapshots SEC(".maps");

/* pid -> the predicted CPU and when; written by user space. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, CUSTOS_PLACEMENT_MAX_PIDS);
	__type(key, u32);
	__type(value, struct custos_placement_prediction);
} pid_to_cpu SEC(".maps");

#include "placement_snapshot.bpf.h"

/*
 * From ops.runnable: every wakeup (SCX_ENQ_WAKEUP) and every new task (its
 * first runnable after init_task with args->fork; wake_up_new_task enqueues
 * without the wakeup flag). The task is on the runqueue of the CPU it was
 * placed on, so this is the same moment, and the same CPU, as the
 * recorder's sched_wakeup and sched_wakeup_new tracepoints see.
 */
static __always_inline void placement_snapshot(const struct task_struct *p,
					       struct task_ctx *tctx, u64 enq_flags)
{
	struct custos_placement_snapshot *s;
	struct custos_sched_stats *st;
	bool created = tctx->placement_created;

	if (!placement_gru)
		return;
	tctx->placement_created = false;
	if (!(enq_flags & SCX_ENQ_WAKEUP) && !created)
		return;
	if (p->tgid == placement_agent_tgid)
		return;
	st = cpu_stats();
	s = bpf_ringbuf_reserve(&placement_snapshots, sizeof(*s), 0);
	if (!s) {
		/* Counted, never waited on: the window then skips a task. */
		if (st)
			st->placement_snapshots_dropped++;
		return;
	}
	placement_fill(s, p, scx_bpf_task_cpu(p), tctx->switch_count, created);
	/*
	 * select_cpu just ran decide_queue for this wakeup (a new task's
	 * first queue is decided at enqueue, after this: it counts as
	 * primary). A budgeted task or a consumer never takes a prediction.
	 */
	s->placeable = s->placeable && !tctx->budgeted && !tctx->consumer;
	/* Counted before the agent can read it, so its count never leads. */
	if (st)
		st->placement_snapshots++;
	bpf_ringbuf_submit(s, 0);
}

static __always_inline bool placement_is_consumer(const struct task_struct *p)
{
	u32 zero = 0;

	return is_consumer(p, bpf_map_lookup_elem(&global_features, &zero));
}

/*
 * The predicted CPU for a waking primary non-consumer task, claimed idle,
 * or -1 for the scheduler's own placement. The seed runs the task on the
 * predicted CPU whatever runs there; here it must be idle: on a busy CPU
 * the task would wait behind its current task on that CPU's local queue,
 * while the own path still finds an idle CPU or the shared queue any CPU
 * drains, and a wrong prediction would cost a slice of latency.
 */
static s32 placement_predicted(const struct task_struct *p, u64 wake_flags,
			       struct custos_sched_stats *st)
{
	const struct custos_placement_prediction *pr;
	u32 pid = p->pid;
	u64 now;
	s32 cpu;

	/* A new task has no prediction; a hit would be a dead task's under a recycled pid. */
	if (wake_flags & SCX_WAKE_FORK)
		pr = NULL;
	else
		pr = bpf_map_lookup_elem(&pid_to_cpu, &pid);
	if (!pr) {
		if (st)
			st->placement_fallbacks++;
		return -1;
	}
	now = bpf_ktime_get_ns();
	if (now > pr->at_ns && now - pr->at_ns > placement_stale_ns) {
		if (st)
			st->placement_stale++;
		return -1;
	}
	cpu = pr->cpu;
	if (cpu < 0 || cpu >= CUSTOS_MAX_CPUS || !bpf_cpumask_test_cpu(cpu, p->cpus_ptr)) {
		if (st)
			st->placement_rejected_cpumask++;
		return -1;
	}
	if (!scx_bpf_test_and_clear_cpu_idle(cpu)) {
		if (st)
			st->placement_busy++;
		return -1;
	}
	if (st)
		st->placement_used++;
	return cpu;
}

/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The contract between the Custos scheduler's BPF side and its user space:
 * queue limits, the policy's feature vector, and the statistics both read.
 * Tunables live as `const volatile` globals in main.bpf.c; their user-space
 * flags carry the same names.
 */
#ifndef CUSTOS_SCHED_INTF_H
#define CUSTOS_SCHED_INTF_H

#ifndef __VMLINUX_H__
typedef unsigned char u8;
typedef signed char s8;
typedef int s32;
typedef unsigned int u32;
typedef unsigned long long u64;
typedef unsigned int __u32;
typedef unsigned long long __u64;
#endif

/* The collector/scheduler contract, so both sides of this one see it too. */
#include <custos/provenance_features.h>
/* The policy's feature vector, shared with custos-policy. */
#include <custos/policy_features.h>

enum custos_sched_consts {
	/* Queue 0 is the primary FIFO; 1..nr_queues are the budgeted ones. */
	CUSTOS_PRIMARY_QUEUE	= 0,
	CUSTOS_MAX_QUEUES	= 8,
	CUSTOS_MAX_CPUS		= 512,

	/* Shared queue q is DSQ q; queue q pinned to CPU c is DSQ BASE + c * MAX_QUEUES + q. */
	CUSTOS_PINNED_DSQ_BASE	= 1024,

	/* Length of the comm key of the debug queue-forcing map (TASK_COMM_LEN). */
	CUSTOS_COMM_LEN		= 16,
};

/*
 * Features in, queue out: the whole interface of a queue-assignment policy
 * (policy_static.bpf.h, policy_net.bpf.h). The rest is context the policy
 * seam needs around them: the delta function's raw values and the task's
 * event totals for its transitions.
 */
struct custos_policy_input {
	u8  feat[CUSTOS_NR_FEATURES];
	u8  is_consumer;		/* a provenance consumer: never budgeted */
	u8  budgeted;			/* the task sits in a budgeted queue now */
	/*
	 * Context, not a Table 4 feature: events per window of the whole
	 * system, on the NR_EVENT scale, so a policy can judge a task's share.
	 */
	u8  total_event_rate;
	/* Events per window the consumer drains, on the same scale (feedback). */
	u8  consumer_event_rate;
	u64 raw_nvcsw;			/* nvcsw before normalisation (delta function) */
	u64 raw_nr_event;		/* nr_event before normalisation (delta function) */
	u64 events_total;		/* the task's events and drops so far (transitions) */
	u64 drops_total;
};

/* What a CPU is running, for the consumer's choice of a CPU to preempt. */
enum custos_cpu_running {
	CUSTOS_RUN_IDLE		= 0,
	CUSTOS_RUN_PRIMARY	= 1,	/* an ordinary task */
	CUSTOS_RUN_BUDGETED	= 2,	/* a task of a budgeted queue */
	CUSTOS_RUN_PROTECTED	= 3,	/* a consumer or a per-CPU kthread: never preempted */
	CUSTOS_RUN_LIGHT	= 4,	/* a task run from the light lane: not preempted by a consumer */
};

/* Per-CPU counters; user space sums them over CPUs. */
struct custos_sched_stats {
	u64 dispatches[CUSTOS_MAX_QUEUES];	 /* tasks moved to a CPU from queue q */
	u64 wait_ns[CUSTOS_MAX_QUEUES];		 /* enqueue-to-run time, summed */
	u64 wait_max_ns[CUSTOS_MAX_QUEUES];	 /* longest enqueue-to-run time */
	u64 hungry_picks[CUSTOS_MAX_QUEUES];	 /* q won Eq. 2 over other eligible queues */
	u64 policy_decisions[CUSTOS_MAX_QUEUES]; /* policy answers per queue */
	u64 to_budgeted;			 /* policy moved a task primary -> budgeted */
	u64 to_primary;				 /* policy moved a task budgeted -> primary */
	u64 consumer_decisions;			 /* policy decisions for consumer tasks */
	u64 direct_dispatches;			 /* to an idle CPU, bypassing the queues */
	u64 sync_wakeups;			 /* synchronous wakeups run on the waker's CPU */
	u64 pinned_enqueues;			 /* one-CPU tasks put on per-CPU queues */
	u64 kthread_dispatches;			 /* per-CPU kthreads run next on their CPU */
	u64 keep_running;			 /* slice refilled for the running task */
	u64 budget_timer_fires;			 /* idle CPU woken when a queue became eligible */
	u64 idle_kicks;				 /* idle CPUs kicked on enqueue */
	u64 consumer_preemptions;		 /* a waking consumer preempted a budgeted task */
	u64 consumer_preemptions_primary;	 /* ... or, with none running, an ordinary one */
	u64 consumer_kept;			 /* a consumer kept its CPU past its slice (events waiting) */
	u64 migration_disabled_next;		 /* a task preempted with migration disabled runs next, short slice */
	u64 consumer_next;			 /* a waking consumer runs next without preempting */
	u64 consumer_queued;			 /* a consumer found no CPU to take and queued */
	u64 consumer_first;			 /* a queued consumer went before the budgeted queues */
	u64 tick_preemptions;			 /* a running task's slice ended early to budget it */
	u64 overflow_holds;			 /* dispatches that held the budgeted queues: rings nearly full */
	u64 starvation_guard_picks[CUSTOS_MAX_QUEUES]; /* q consumed because its head waited too long */
	u64 feature_ns;				 /* time spent maintaining features */
	u64 feature_updates;			 /* feature-maintenance calls measured */
	u64 feature_outliers;			 /* calls over 100 us (CPU taken away), not in feature_ns */
	u64 inferences;				 /* learned policy: forward passes of the network */
	u64 inference_ns;			 /* ... and their time */
	u64 delta_skips;			 /* learned policy: decisions the delta function reused */
	u64 learned_fallbacks;			 /* learned policy without weights: static decided */
	u64 learned_unpressured;		 /* learned policy: primary, no pressure (queues masked) */
	u64 explorations;			 /* training: random queues instead of the network's */
	u64 transitions;			 /* transitions emitted for training */
	u64 transitions_dropped;		 /* ... refused by a full transitions ring */
	/* The GRU placement layer (placement_gru.bpf.h); 0 while it is off. */
	u64 placement_snapshots;		 /* snapshots sent to the agent */
	u64 placement_snapshots_dropped;	 /* ... refused by a full snapshots ring */
	u64 placement_used;			 /* wakeups placed on the predicted (idle) CPU */
	u64 placement_stale;			 /* the prediction was older than placement_stale_ns */
	u64 placement_rejected_cpumask;		 /* the predicted CPU is not in the task's cpumask */
	u64 placement_busy;			 /* the predicted CPU was not idle */
	u64 placement_fallbacks;		 /* no prediction for the task (or a new task) */
	/* The hold (--hold); 0 while it is off. */
	u64 holds;				 /* times the hold began: a ring under its reserve */
	u64 hold_ns;				 /* time the hold was on, summed */
	u64 held;				 /* tasks put in the held queue */
	u64 held_in_program;			 /* of those, held preempted inside a program */
	u64 held_at_stop;			 /* of those, held at their hold stop (return to user mode) */
	u64 hold_bounces;			 /* kicked inside a program, not held there: no copy to spare */
	u64 hold_kicks;				 /* CPUs running producers kicked when it began */
	u64 hold_tick_preemptions;		 /* running producers stopped at the tick */
	u64 hold_running_kicks;			 /* producers stopped as they were switched in */
	u64 hold_released;			 /* held tasks run after the hold ended */
	u64 hold_leaks;				 /* held tasks let through by hold_guard_ns */
	u64 hold_floors;			 /* times a ring went under its floor: all held */
	u64 hold_unbudgeted;			 /* tasks the hold let run, sent primary from a budgeted queue */
	/* The light lane (light_share_pct); 0 while it is off. */
	u64 light_enqueues;			 /* waking light tasks queued in the lane */
	u64 light_dispatches;			 /* ... run from it */
	u64 light_deferred;			 /* times the lane waited: its CPU share spent */
	u64 light_spared;			 /* waking consumers that left a light task's CPU alone */
};

/*
 * The GRU placement policy (seed 002): what the scheduler (under sched_ext)
 * and the recorder (under the kernel's default scheduler) send for each task
 * created or woken up, byte for byte the same, and the prediction user space
 * writes back. custos-policy's placement::Snapshot holds the seven features.
 */
enum custos_placement_consts {
	/* pid_to_cpu holds at most this many predictions (LRU). */
	CUSTOS_PLACEMENT_MAX_PIDS	= 32768,
};

struct custos_placement_snapshot {
	u32 pid;
	s32 prio;			/* task->prio: 100..139 for normal tasks */
	u32 nr_cpus_allowed;
	s32 cpu;			/* where the task was placed */
	u8  kthread;			/* PF_KTHREAD */
	u8  created;			/* a new task (fork), not a wakeup */
	/*
	 * The scheduler would use a prediction for this task at its next
	 * wakeup (a primary non-consumer free to run on more than one CPU):
	 * the agent runs the model only for those. Not a model feature.
	 */
	u8  placeable;
	u8  pad[5];
	u64 runtime_ns;			/* se.sum_exec_runtime */
	u64 nvcsw;
	u64 nivcsw;
	u64 switch_count;		/* switch-ins counted since the program loaded */
	u64 at_ns;			/* bpf_ktime_get_ns() (CLOCK_MONOTONIC) */
};

/* A value of pid_to_cpu: the CPU predicted for the pid's next wakeup. */
struct custos_placement_prediction {
	s32 cpu;
	u32 pad;
	u64 at_ns;			/* CLOCK_MONOTONIC, bpf_ktime_get_ns()'s clock */
};

/* The learned policy's weights and transitions. */
#include "policy_intf.h"

#endif /* CUSTOS_SCHED_INTF_H */

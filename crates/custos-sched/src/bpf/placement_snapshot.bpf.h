/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * One snapshot of a task created or woken up (seed 002, table 3.3), filled
 * the same way by the scheduler (placement_gru.bpf.h) and by the recorder
 * of the default scheduler's placements (placement_record.bpf.c): a model
 * trained on the recorder's snapshots reads the scheduler's as it was taught.
 */
#ifndef CUSTOS_PLACEMENT_SNAPSHOT_BPF_H
#define CUSTOS_PLACEMENT_SNAPSHOT_BPF_H

#ifndef PF_KTHREAD
#define PF_KTHREAD	0x00200000
#endif

static __always_inline void placement_fill(struct custos_placement_snapshot *s,
					   const struct task_struct *p, s32 cpu,
					   u64 switch_count, bool created)
{
	s->pid = p->pid;
	s->prio = p->prio;
	s->nr_cpus_allowed = p->nr_cpus_allowed;
	s->cpu = cpu;
	s->kthread = !!(p->flags & PF_KTHREAD);
	s->created = created;
	s->placeable = p->nr_cpus_allowed > 1;
	__builtin_memset(s->pad, 0, sizeof(s->pad));
	/*
	 * Maintained under sched_ext too: update_curr_scx() adds each slice's
	 * time to the running task's se.sum_exec_runtime (update_curr_common),
	 * so both programs read the kernel's own CPU-time total.
	 */
	s->runtime_ns = p->se.sum_exec_runtime;
	s->nvcsw = p->nvcsw;
	s->nivcsw = p->nivcsw;
	s->switch_count = switch_count;
	s->at_ns = bpf_ktime_get_ns();
}

#endif /* CUSTOS_PLACEMENT_SNAPSHOT_BPF_H */

/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Records the kernel's default scheduler placing tasks, the GRU placement
 * policy's training data (seed 002): a snapshot of each task created or
 * woken up, with the CPU the default scheduler chose, in the very struct
 * the scheduler sends its agent (placement_snapshot.bpf.h).
 *
 * At sched_wakeup and sched_wakeup_new the choice is made: try_to_wake_up
 * and wake_up_new_task call set_task_cpu() and activate the task on that
 * CPU's runqueue before the tracepoint fires, so task_cpu(p), on x86_64
 * p->thread_info.cpu, is the chosen CPU. (p->wake_cpu is only the CPU a
 * blocked proxy-execution donor wants, not where the task goes.)
 */
/* Not scx/common.bpf.h: this runs without sched_ext. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "intf.h"
#include "placement_snapshot.bpf.h"

char _license[] SEC("license") = "GPL";

/* The recorder's own process: its wakeups are caused by the records. */
const volatile u32 recorder_tgid;

/* Sized by user space; adaptive wakeups as in the scheduler. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 22);
} placement_snapshots SEC(".maps");

/* Switch-ins per task since the recorder loaded (seed: finish_task_switch). */
struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, u64);
} switch_counts SEC(".maps");

u64 recorded;
u64 dropped;

static __always_inline void record(struct task_struct *p, bool created)
{
	struct custos_placement_snapshot *s;
	u64 *sw, switches = 0;

	if (p->tgid == recorder_tgid)
		return;
	sw = bpf_task_storage_get(&switch_counts, p, 0, 0);
	if (sw)
		switches = *sw;
	s = bpf_ringbuf_reserve(&placement_snapshots, sizeof(*s), 0);
	if (!s) {
		__sync_fetch_and_add(&dropped, 1);
		return;
	}
	placement_fill(s, p, p->thread_info.cpu, switches, created);
	bpf_ringbuf_submit(s, 0);
	__sync_fetch_and_add(&recorded, 1);
}

SEC("tp_btf/sched_wakeup")
int BPF_PROG(placement_record_wakeup, struct task_struct *p)
{
	record(p, false);
	return 0;
}

SEC("tp_btf/sched_wakeup_new")
int BPF_PROG(placement_record_wakeup_new, struct task_struct *p)
{
	record(p, true);
	return 0;
}

SEC("tp_btf/sched_switch")
int BPF_PROG(placement_record_switch, bool preempt, struct task_struct *prev,
	     struct task_struct *next, unsigned int prev_state)
{
	u64 *sw;

	if (!next->pid)		/* the idle task */
		return 0;
	sw = bpf_task_storage_get(&switch_counts, next, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (sw)
		(*sw)++;
	return 0;
}

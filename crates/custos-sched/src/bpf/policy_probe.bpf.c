/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Runs the scheduler's policy network and feature normalisation on inputs
 * from user space (BPF_PROG_TEST_RUN of a syscall program), so the exact
 * headers the scheduler compiles are checked against the Rust reference
 * and timed on any kernel with BPF, sched_ext or not.
 */
/* Not scx/common.bpf.h: its programs need sched_ext to load. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "intf.h"
#include "features.bpf.h"
#include "policy_net.bpf.h"

char _license[] SEC("license") = "GPL";

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct custos_net);
} probe_net SEC(".maps");

SEC("syscall")
int policy_probe(struct custos_policy_probe *ctx)
{
	struct custos_net *net;
	u8 x[CUSTOS_NR_FEATURES];
	s32 q[CUSTOS_MAX_QUEUES] = {};
	u32 zero = 0, reps = ctx->reps, r, action = 0;
	u64 start;
	int i;

	net = bpf_map_lookup_elem(&probe_net, &zero);
	if (!net)
		return -1;
#pragma unroll
	for (i = 0; i < CUSTOS_NR_FEATURES; i++)
		x[i] = ctx->x[i];
	start = bpf_ktime_get_ns();
	bpf_for(r, 0, reps ? reps : 1)
		action = policy_net_forward(net, x, q);
	ctx->elapsed_ns = bpf_ktime_get_ns() - start;
	ctx->action = action;
#pragma unroll
	for (i = 0; i < CUSTOS_MAX_QUEUES; i++)
		ctx->q[i] = q[i];
#pragma unroll
	for (i = 0; i < CUSTOS_PROBE_NORM_VALUES; i++)
		ctx->norm_out[i] = norm_log2(ctx->norm_in[i]);
	return 0;
}

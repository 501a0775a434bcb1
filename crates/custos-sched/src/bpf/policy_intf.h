/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The learned policy's contract between the scheduler's BPF side and user
 * space: the integer Q-network's weights (written by user space, read by
 * policy_net.bpf.h), the generation that says which copy is live, and the
 * transitions the scheduler emits for training. The Rust reference of the
 * network is crates/custos-policy/src/net.rs; the constants below have Rust
 * twins there, checked by a test.
 */
#ifndef CUSTOS_POLICY_INTF_H
#define CUSTOS_POLICY_INTF_H

enum custos_policy_consts {
	/* Which policy decides queues (the policy_kind tunable). */
	CUSTOS_POLICY_STATIC		= 0,
	CUSTOS_POLICY_LEARNED		= 1,
	CUSTOS_POLICY_FEEDBACK		= 2,

	/* Largest hidden layer; one Q-value per queue (CUSTOS_MAX_QUEUES). */
	CUSTOS_NET_MAX_HIDDEN		= 256,
	/* w1 rows are padded from CUSTOS_NR_FEATURES to this many bytes. */
	CUSTOS_NET_ROW			= 16,
	/* Hidden activations are requantised to [0, 127]: h = (acc * requant) >> 16. */
	CUSTOS_NET_HIDDEN_MAX		= 127,
	CUSTOS_NET_REQUANT_SHIFT	= 16,
	/* Bounds user space enforces so no sum overflows 32 bits (net.rs). */
	CUSTOS_NET_BIAS_LIMIT		= 1 << 24,
	CUSTOS_NET_REQUANT_LIMIT	= 1 << 30,

	/* Two copies of the weights: user space writes the one not in use. */
	CUSTOS_NET_SLOTS		= 2,
};

/*
 * One copy of the weights (an entry of the policy_nets map). Biases are in
 * accumulator units; see net.rs for the forward pass both sides compute.
 */
struct custos_net {
	u32 hidden;
	u32 actions;
	u32 requant;
	u32 reserved;
	s32 b1[CUSTOS_NET_MAX_HIDDEN];
	s32 b2[CUSTOS_MAX_QUEUES];
	s8  w1[CUSTOS_NET_MAX_HIDDEN][CUSTOS_NET_ROW];
	s8  w2[CUSTOS_MAX_QUEUES][CUSTOS_NET_MAX_HIDDEN];
};

/*
 * Which copy is live (the policy_state map, one entry): generation g uses
 * slot g % 2; 0 means no network was pushed yet (the static policy
 * decides). User space writes slot (g + 1) % 2, then sets g + 1.
 */
struct custos_policy_state {
	u64 generation;
	/*
	 * Exploration while training or recording (epsilon-greedy): this
	 * percentage of either policy's decisions picks a random queue. 0
	 * otherwise.
	 */
	u32 explore_pct;
	/* Queues the scheduler runs (actions of its network), set at load. */
	u32 nr_actions;
};

/*
 * What one task saw, did and got between two decisions (seed 000 §5:
 * T = (S_t -> S_t+1)); the reward is computed in user space from it.
 */
struct custos_transition {
	u32 pid;
	u8  action;			/* queue chosen at S_t */
	u8  inferred;			/* 1: the network ran; 0: the delta function reused the action */
	u8  state[CUSTOS_NR_FEATURES];
	u8  next_state[CUSTOS_NR_FEATURES];
	u32 events;			/* E_t: the task's events between the decisions */
	u32 drops;			/* E^d_t: of those, lost */
	u32 idle_before;		/* C_t: idle slices before the task ran at t */
	u32 idle_after;			/* C_t+1 */
	u64 at_ns;
};

/*
 * The context of policy_probe.bpf.c, a BPF_PROG_TEST_RUN program that runs
 * this header's network and normalisation on inputs user space gives it,
 * so tests compare them with the Rust reference on the host kernel (no
 * sched_ext needed) and benchmarks time them.
 */
enum custos_probe_consts {
	CUSTOS_PROBE_NORM_VALUES	= 16,
};

struct custos_policy_probe {
	u8  x[CUSTOS_NET_ROW];			/* in: features (first CUSTOS_NR_FEATURES) */
	u32 reps;				/* in: forward passes to time (>= 1) */
	u32 action;				/* out */
	s32 q[CUSTOS_MAX_QUEUES];		/* out */
	u64 elapsed_ns;				/* out: time of all reps */
	u64 norm_in[CUSTOS_PROBE_NORM_VALUES];	/* in */
	u8  norm_out[CUSTOS_PROBE_NORM_VALUES];	/* out: norm_log2(norm_in[i]) */
};

#endif /* CUSTOS_POLICY_INTF_H */

/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The learned policy's forward pass: the integer Q-network of seed 000
 * §4.2, evaluated in the kernel on every decision the delta function does
 * not skip. Integers only (BPF has no floating point), bounded loops, and
 * exactly the arithmetic of custos_policy::net::QNet::q_values, which the
 * policy_net test checks input by input through BPF_PROG_TEST_RUN.
 *
 * No hidden-layer array lives on the BPF stack; integer sums do not depend
 * on their order, and the bounds in policy_intf.h keep them in 32 bits.
 */
#ifndef CUSTOS_POLICY_NET_BPF_H
#define CUSTOS_POLICY_NET_BPF_H

/*
 * Hidden units [0, hidden), each added into q[0..cols) as soon as it is
 * known. cols is a constant per copy, so the loop body has no branch on the
 * number of actions: the verifier then sees the same state on every
 * iteration and checks the loop once, not once per unit.
 */
#define POLICY_NET_LAYERS(net, x, q, hidden, cols)				\
	bpf_for(j, 0, hidden) {							\
		s32 acc;							\
		u64 h;								\
										\
		if (j >= CUSTOS_NET_MAX_HIDDEN)					\
			break;							\
		acc = net->b1[j];						\
		_Pragma("unroll")						\
		for (i = 0; i < CUSTOS_NR_FEATURES; i++)			\
			acc += (s32)net->w1[j][i] * (s32)x[i];			\
		if (acc <= 0)							\
			continue;						\
		h = ((u64)acc * net->requant) >> CUSTOS_NET_REQUANT_SHIFT;	\
		if (h > CUSTOS_NET_HIDDEN_MAX)					\
			h = CUSTOS_NET_HIDDEN_MAX;				\
		_Pragma("unroll")						\
		for (k = 0; k < (cols); k++)					\
			q[k] += (s32)net->w2[k][j] * (s32)h;			\
	}

/*
 * Fills q[0..actions) and returns the first largest one's index. Rows of
 * w2 past `actions` are zero (user space writes whole entries), so the
 * four-column copy serves up to four actions and the eight-column copy the
 * rest.
 */
static __always_inline u32 policy_net_forward(const struct custos_net *net, const u8 *x, s32 *q)
{
	u32 hidden = net->hidden, actions = net->actions, j, best = 0;
	s32 best_q;
	int i, k;

#pragma unroll
	for (k = 0; k < CUSTOS_MAX_QUEUES; k++)
		q[k] = net->b2[k];
	if (actions <= CUSTOS_MAX_QUEUES / 2) {
		POLICY_NET_LAYERS(net, x, q, hidden, CUSTOS_MAX_QUEUES / 2)
	} else {
		POLICY_NET_LAYERS(net, x, q, hidden, CUSTOS_MAX_QUEUES)
	}

	/* No variable index: best stays imprecise, states merge. */
	best_q = q[0];
#pragma unroll
	for (k = 1; k < CUSTOS_MAX_QUEUES; k++) {
		if (k < actions && q[k] > best_q) {
			best = k;
			best_q = q[k];
		}
	}
	return best;
}

#endif /* CUSTOS_POLICY_NET_BPF_H */

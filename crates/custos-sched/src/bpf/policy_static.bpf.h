/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The static policy: a producer with a high event rate (an absolute floor,
 * and a share of all events) while the rings run out of room is budgeted
 * until the pressure is gone; everything else is primary. Consumers never
 * reach a policy (decide_queue keeps them primary). Its thresholds are
 * tunables with the same names as their flags.
 */
#ifndef CUSTOS_POLICY_STATIC_BPF_H
#define CUSTOS_POLICY_STATIC_BPF_H

/* Queue the static policy parks pressured producers in (the most budgeted). */
const volatile u32 budget_queue = 3;

/*
 * Static policy thresholds on normalised features: a task is budgeted when
 * its nr_event >= event_rate_high while availability <= availability_low;
 * it returns to primary once availability >= availability_high (hysteresis,
 * so a task does not flap at the boundary) or its event rate fell.
 */
const volatile u8 event_rate_high = 14;	/* log2 scale: 64 events/window */

/*
 * A producer must also make a share of all events: its rate on the log2
 * scale plus producer_share_steps reaches the system's (8 steps = 1/16).
 * A relative test holds on a slow emulated guest and a busy server alike.
 */
const volatile u8 producer_share_steps = 8;

static __always_inline u32 static_policy(const struct custos_policy_input *in)
{
	u8 avail = in->feat[CUSTOS_FEAT_AVAILABILITY];
	u8 rate = in->feat[CUSTOS_FEAT_NR_EVENT];
	bool producing = rate >= event_rate_high &&
			 rate + producer_share_steps >= in->total_event_rate;

	if (in->budgeted)
		return producing && avail < availability_high ?
			budget_queue : CUSTOS_PRIMARY_QUEUE;
	return producing && avail <= availability_low ?
		budget_queue : CUSTOS_PRIMARY_QUEUE;
}

#endif /* CUSTOS_POLICY_STATIC_BPF_H */

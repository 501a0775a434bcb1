/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The feedback controller: the learned policy's baseline without learning
 * (issue 10's ablation). The rings fill when events arrive faster than the
 * consumer drains them, so a producer's queue follows two measurements:
 *
 *  - ring availability: below availability_high, the deeper it falls the
 *    more budgeted the queue (proportional: 1 .. nr_queues as availability
 *    goes from availability_high to empty);
 *  - the consumer's measured rate: only a task whose own event rate is a
 *    real share of what the consumer drains (producer_share_steps on the
 *    log2 scale, as the static policy's share of all events) is a producer,
 *    and while the system produces faster than the consumer drains, a
 *    producer goes one queue deeper.
 *
 * No hysteresis and no memory: the controller answers the current pressure.
 */
#ifndef CUSTOS_POLICY_FEEDBACK_BPF_H
#define CUSTOS_POLICY_FEEDBACK_BPF_H

static __always_inline u32 feedback_policy(const struct custos_policy_input *in)
{
	u8 avail = in->feat[CUSTOS_FEAT_AVAILABILITY];
	u8 rate = in->feat[CUSTOS_FEAT_NR_EVENT];
	u32 q;

	if (!nr_queues || avail >= availability_high)
		return CUSTOS_PRIMARY_QUEUE;
	if (rate < event_rate_high || rate + producer_share_steps < in->consumer_event_rate)
		return CUSTOS_PRIMARY_QUEUE;
	q = 1 + (u32)(availability_high - avail) * nr_queues / ((u32)availability_high + 1);
	if (in->total_event_rate > in->consumer_event_rate)
		q++;
	return q < nr_queues ? q : nr_queues;
}

#endif /* CUSTOS_POLICY_FEEDBACK_BPF_H */

/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The queue policy's input: seed 000 Table 4's features, in the order the
 * scheduler's BPF side fills them (fill_policy_input in main.bpf.c) and the
 * learned network reads them. custos-policy takes the count, the scale and
 * each feature's index from here through bindgen (crates/custos-policy/
 * build.rs); a model file records the list, so changing it refuses models
 * trained on the old one.
 *
 * Included by BPF C and by bindgen; it uses no types at all.
 */
#ifndef CUSTOS_POLICY_FEATURES_H
#define CUSTOS_POLICY_FEATURES_H

/* Every normalised feature lies in [0, CUSTOS_FEATURE_MAX] (seed 000). */
#define CUSTOS_FEATURE_MAX	128

/* Each normalised to [0, CUSTOS_FEATURE_MAX]; log2: 2 x bit length (norm_log2). */
enum custos_feature {
	CUSTOS_FEAT_RUNTIME,		/* log2: total CPU time of the task */
	CUSTOS_FEAT_NVCSW,		/* log2: voluntary switches per second (average) */
	CUSTOS_FEAT_WAIT_FREQ,		/* log2: how often the task sleeps (scx_lavd) */
	CUSTOS_FEAT_WAKE_FREQ,		/* log2: how often the task wakes others (scx_lavd) */
	CUSTOS_FEAT_NR_STOP,		/* log2: stops within the current slice */
	CUSTOS_FEAT_NR_IDLE,		/* log2: idle slices on the CPU before the task ran */
	CUSTOS_FEAT_PRIO,		/* linear: current queue, 0 = primary */
	CUSTOS_FEAT_NR_EVENT,		/* log2: provenance events per window (collector) */
	CUSTOS_FEAT_NR_DROP,		/* log2: dropped events per window (collector) */
	CUSTOS_FEAT_LATENCY,		/* log2: consumer lag in events (collector) */
	CUSTOS_FEAT_AVAILABILITY,	/* linear: free ring space, 128 = empty ring */
	CUSTOS_NR_FEATURES,
};

#endif /* CUSTOS_POLICY_FEATURES_H */

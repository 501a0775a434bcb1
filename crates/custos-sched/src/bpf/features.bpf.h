/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Feature normalisation (seed 000 §5: log2 for long-tailed features). The
 * Rust twin is custos_policy::features::norm_log2; the policy_net test runs
 * both on the same values.
 */
#ifndef CUSTOS_FEATURES_BPF_H
#define CUSTOS_FEATURES_BPF_H

/* Long-tailed features: 2 * bit length, so u64 maps onto [0, 128]. */
static __always_inline u8 norm_log2(u64 x)
{
	u32 bits = 0;

	if (x >= (1ULL << 32)) { bits += 32; x >>= 32; }
	if (x >= (1ULL << 16)) { bits += 16; x >>= 16; }
	if (x >= (1ULL << 8)) { bits += 8; x >>= 8; }
	if (x >= (1ULL << 4)) { bits += 4; x >>= 4; }
	if (x >= (1ULL << 2)) { bits += 2; x >>= 2; }
	if (x >= (1ULL << 1)) { bits += 1; x >>= 1; }
	bits += x;
	return bits * 2;
}

#endif /* CUSTOS_FEATURES_BPF_H */

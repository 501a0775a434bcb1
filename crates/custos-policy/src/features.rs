//! The policy's input: seed 000 Table 4's eleven task and provenance
//! features, each normalised to [0, FEATURE_MAX]. The BPF scheduler fills
//! them (`fill_policy_input` in main.bpf.c, `norm_log2` in features.bpf.h);
//! this is the Rust side of the same definition, and the scheduler's
//! bit-exactness test runs both on the same inputs.

use serde::{Deserialize, Serialize};

/// Number of features (`CUSTOS_NR_FEATURES`).
pub const NR_FEATURES: usize = 11;
/// Every normalised feature lies in [0, FEATURE_MAX] (`CUSTOS_FEATURE_MAX`).
pub const FEATURE_MAX: u8 = 128;

/// A normalised feature vector, in `CUSTOS_FEAT_*` order.
pub type State = [u8; NR_FEATURES];

/// How a raw value becomes a feature (seed 000 §5: log2 for long-tailed
/// features, a linear scale for uniform ones).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Normalization {
    /// 2 × bit length: any u64 onto [0, 128] (`norm_log2`).
    Log2,
    /// A quantity already on a linear [0, 128] scale.
    Linear,
}

/// One feature: its name (the paper's) and normalisation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FeatureSpec {
    pub name: &'static str,
    pub normalization: Normalization,
}

use Normalization::{Linear, Log2};

/// The features in `enum custos_feature` order; a model file records this
/// list, and a model trained on another list is refused.
pub const FEATURES: [FeatureSpec; NR_FEATURES] = [
    FeatureSpec { name: "runtime", normalization: Log2 },
    FeatureSpec { name: "nvcsw", normalization: Log2 },
    FeatureSpec { name: "wait_freq", normalization: Log2 },
    FeatureSpec { name: "wake_freq", normalization: Log2 },
    FeatureSpec { name: "nr_stop", normalization: Log2 },
    FeatureSpec { name: "nr_idle", normalization: Log2 },
    FeatureSpec { name: "prio", normalization: Linear },
    FeatureSpec { name: "nr_event", normalization: Log2 },
    FeatureSpec { name: "nr_drop", normalization: Log2 },
    FeatureSpec { name: "latency", normalization: Log2 },
    FeatureSpec { name: "availability", normalization: Linear },
];

/// Index of a feature by name.
pub fn index_of(name: &str) -> Option<usize> {
    FEATURES.iter().position(|f| f.name == name)
}

pub const FEAT_NR_EVENT: usize = 7;
pub const FEAT_AVAILABILITY: usize = 10;

/// Long-tailed features: 2 × bit length, so any u64 maps onto [0, 128].
/// The C twin is `norm_log2()` in the scheduler's features.bpf.h; the
/// scheduler's policy_net test runs both on the same values.
pub fn norm_log2(x: u64) -> u8 {
    (2 * (64 - x.leading_zeros())) as u8
}

/// Uniform features given in percent: [0, 100] onto [0, 128].
pub fn norm_percent(pct: f64) -> u8 {
    (pct.clamp(0.0, 100.0) * 128.0 / 100.0).round() as u8
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalisation_spans_0_to_128() {
        assert_eq!(norm_log2(0), 0);
        assert_eq!(norm_log2(1), 2);
        assert_eq!(norm_log2(1000), 20);
        assert_eq!(norm_log2(u64::MAX), FEATURE_MAX);
        assert_eq!(norm_percent(100.0), FEATURE_MAX);
        assert_eq!(norm_percent(-3.0), 0);
    }

    #[test]
    fn feature_names_are_unique_and_indexed() {
        for (i, f) in FEATURES.iter().enumerate() {
            assert_eq!(index_of(f.name), Some(i));
        }
        assert_eq!(index_of("nr_event"), Some(FEAT_NR_EVENT));
        assert_eq!(index_of("availability"), Some(FEAT_AVAILABILITY));
    }
}

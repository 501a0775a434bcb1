//! The policy's input: seed 000 Table 4's task and provenance features, each normalised to [0, FEATURE_MAX]. The BPF scheduler fills
//! them (`fill_policy_input` in main.bpf.c, `norm_log2` in features.bpf.h);
//! their count, scale and order are include/custos/policy_features.h's
//! (bindgen, build.rs), and the scheduler's bit-exactness test runs both
//! normalisations on the same inputs.

use serde::{Deserialize, Serialize};

mod c {
    #![allow(non_camel_case_types, dead_code)]
    include!(concat!(env!("OUT_DIR"), "/policy_features.rs"));
}

/// Number of features (`CUSTOS_NR_FEATURES`).
pub const NR_FEATURES: usize = c::CUSTOS_NR_FEATURES as usize;
/// Every normalised feature lies in [0, FEATURE_MAX] (`CUSTOS_FEATURE_MAX`).
pub const FEATURE_MAX: u8 = {
    assert!(c::CUSTOS_FEATURE_MAX <= u8::MAX as u32);
    c::CUSTOS_FEATURE_MAX as u8
};

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

/// The features in `enum custos_feature` order: each is placed at its
/// index there, and a feature the header has and this list lacks fails the
/// build. A model file records this list, and a model trained on another
/// list is refused.
pub const FEATURES: [FeatureSpec; NR_FEATURES] = at_header_indices([
    (c::CUSTOS_FEAT_RUNTIME, "runtime", Log2),
    (c::CUSTOS_FEAT_NVCSW, "nvcsw", Log2),
    (c::CUSTOS_FEAT_WAIT_FREQ, "wait_freq", Log2),
    (c::CUSTOS_FEAT_WAKE_FREQ, "wake_freq", Log2),
    (c::CUSTOS_FEAT_NR_STOP, "nr_stop", Log2),
    (c::CUSTOS_FEAT_NR_IDLE, "nr_idle", Log2),
    (c::CUSTOS_FEAT_PRIO, "prio", Linear),
    (c::CUSTOS_FEAT_NR_EVENT, "nr_event", Log2),
    (c::CUSTOS_FEAT_NR_DROP, "nr_drop", Log2),
    (c::CUSTOS_FEAT_LATENCY, "latency", Log2),
    (c::CUSTOS_FEAT_AVAILABILITY, "availability", Linear),
]);

const fn at_header_indices(
    list: [(c::custos_feature, &'static str, Normalization); NR_FEATURES],
) -> [FeatureSpec; NR_FEATURES] {
    let mut out = [FeatureSpec {
        name: "",
        normalization: Linear,
    }; NR_FEATURES];
    let mut i = 0;
    while i < NR_FEATURES {
        let (index, name, normalization) = list[i];
        assert!(
            out[index as usize].name.is_empty(),
            "two features at one index"
        );
        out[index as usize] = FeatureSpec {
            name,
            normalization,
        };
        i += 1;
    }
    out
}

/// Seed 000's feature groups (its F1/F2 ablation): what the scheduler knows
/// of a task by itself, and what the collector publishes about provenance.
pub const TASK_FEATURES: [&str; 7] = [
    "runtime",
    "nvcsw",
    "wait_freq",
    "wake_freq",
    "nr_stop",
    "nr_idle",
    "prio",
];
pub const PROVENANCE_FEATURES: [&str; 4] = ["nr_event", "nr_drop", "latency", "availability"];

/// A set of input features, parsed from `all`, `task`, `provenance` or a
/// comma-separated list of feature names. Returns the indices it keeps.
pub fn parse_feature_set(spec: &str) -> Result<Vec<usize>, String> {
    let names: Vec<&str> = match spec.trim() {
        "all" => FEATURES.iter().map(|f| f.name).collect(),
        "task" => TASK_FEATURES.to_vec(),
        "provenance" => PROVENANCE_FEATURES.to_vec(),
        list => list
            .split(',')
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .collect(),
    };
    let mut keep = Vec::new();
    for name in names {
        let i = index_of(name).ok_or_else(|| {
            format!(
                "unknown feature {name:?}: all, task, provenance, or names from {}",
                FEATURES
                    .iter()
                    .map(|f| f.name)
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })?;
        if !keep.contains(&i) {
            keep.push(i);
        }
    }
    if keep.is_empty() {
        return Err("the feature set is empty".into());
    }
    keep.sort_unstable();
    Ok(keep)
}

/// Zeroes the features outside `keep`: what a model trained on a subset sees.
pub fn mask_state(state: &mut State, keep: &[usize]) {
    for (i, x) in state.iter_mut().enumerate() {
        if !keep.contains(&i) {
            *x = 0;
        }
    }
}

/// Index of a feature by name.
pub fn index_of(name: &str) -> Option<usize> {
    FEATURES.iter().position(|f| f.name == name)
}

pub const FEAT_NR_EVENT: usize = c::CUSTOS_FEAT_NR_EVENT as usize;
pub const FEAT_AVAILABILITY: usize = c::CUSTOS_FEAT_AVAILABILITY as usize;

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

    #[test]
    fn the_feature_groups_split_the_features() {
        let task = parse_feature_set("task").unwrap();
        let prov = parse_feature_set("provenance").unwrap();
        assert_eq!(task.len() + prov.len(), NR_FEATURES);
        assert!(task.iter().all(|i| !prov.contains(i)));
        assert_eq!(
            parse_feature_set("all").unwrap(),
            (0..NR_FEATURES).collect::<Vec<_>>()
        );
        assert_eq!(
            parse_feature_set("availability, nr_event").unwrap(),
            vec![FEAT_NR_EVENT, FEAT_AVAILABILITY]
        );
        assert!(parse_feature_set("nr_events")
            .unwrap_err()
            .contains("unknown feature"));
        assert!(parse_feature_set(" , ").is_err());
        let mut s = [7u8; NR_FEATURES];
        mask_state(&mut s, &prov);
        assert_eq!(s, [0, 0, 0, 0, 0, 0, 0, 7, 7, 7, 7]);
    }
}

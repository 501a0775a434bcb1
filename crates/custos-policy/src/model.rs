//! The model file: a trained policy with everything needed to refuse it
//! where it does not fit.
//!
//! JSON, `{"checksum": "sha256:<hex>", "model": {...}}`, where the checksum
//! covers the exact bytes of `model` as written. The model carries a format
//! version, the feature list and normalisation it was trained on, the queue
//! configuration (its actions are queues), the integer network the kernel
//! runs and the float network training resumes from.

use std::path::Path;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use sha2::{Digest, Sha256};

use crate::features::{FeatureSpec, Normalization, FEATURES, NR_FEATURES};
use crate::net::QNet;

pub const MODEL_FORMAT: &str = "custos-policy-model";

/// The shipped model (bench/policy/train.sh made it; bench/policy/README.md
/// says how it compares with the static policy).
pub const DEFAULT_MODEL: &[u8] = include_bytes!("../models/default.json");
pub const DEFAULT_MODEL_NAME: &str = "the shipped model (crates/custos-policy/models/default.json)";
pub const MODEL_VERSION: u32 = 1;

/// A feature as a model file names it (owned, unlike `FeatureSpec`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FeatureEntry {
    pub name: String,
    pub normalization: Normalization,
}

impl From<&FeatureSpec> for FeatureEntry {
    fn from(f: &FeatureSpec) -> Self {
        FeatureEntry {
            name: f.name.into(),
            normalization: f.normalization,
        }
    }
}

/// The float network training works on (same shapes as `QNet`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FloatNet {
    pub hidden: usize,
    pub actions: usize,
    pub w1: Vec<f32>,
    pub b1: Vec<f32>,
    pub w2: Vec<f32>,
    pub b2: Vec<f32>,
}

impl FloatNet {
    /// Zeroes the first-layer weights of every input outside `keep`.
    pub fn keep_inputs(&mut self, keep: &[usize]) {
        for i in (0..NR_FEATURES).filter(|i| !keep.contains(i)) {
            for j in 0..self.hidden {
                self.w1[j * NR_FEATURES + i] = 0.0;
            }
        }
    }
}

/// How the model was made, for people reading the file.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Provenance {
    pub transitions: u64,
    pub epochs: u64,
    pub note: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Model {
    pub format: String,
    pub version: u32,
    pub features: Vec<FeatureEntry>,
    /// Budgeted queues the model's actions address (actions = nr_queues + 1).
    pub nr_queues: u32,
    /// 8 (INT8) or 4 (INT4).
    pub weight_bits: u32,
    pub qnet: QNet,
    pub float: Option<FloatNet>,
    #[serde(default)]
    pub trained: Provenance,
    /// Features the model was trained without (an ablation): their inputs
    /// were zero in training and their first-layer weights are zero, so the
    /// kernel's network ignores them. Empty: all features.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub masked_features: Vec<String>,
}

#[derive(Serialize, Deserialize)]
struct File<'a> {
    checksum: String,
    #[serde(borrow)]
    model: &'a RawValue,
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

impl Model {
    pub fn new(
        nr_queues: u32,
        weight_bits: u32,
        qnet: QNet,
        float: Option<FloatNet>,
        trained: Provenance,
    ) -> Self {
        Model {
            format: MODEL_FORMAT.into(),
            version: MODEL_VERSION,
            features: FEATURES.iter().map(FeatureEntry::from).collect(),
            nr_queues,
            weight_bits,
            qnet,
            float,
            trained,
            masked_features: Vec::new(),
        }
    }

    /// Restricts the model to the features in `keep` (indices): records the
    /// others as masked and zeroes their first-layer weights, in the integer
    /// network and the float one. Training must have seen them as zero.
    pub fn mask_features(&mut self, keep: &[usize]) {
        self.masked_features.clear();
        for (i, f) in FEATURES.iter().enumerate() {
            if keep.contains(&i) {
                continue;
            }
            self.masked_features.push(f.name.to_string());
            for j in 0..self.qnet.hidden {
                self.qnet.w1[j * NR_FEATURES + i] = 0;
            }
        }
        if let Some(float) = &mut self.float {
            float.keep_inputs(keep);
        }
    }

    /// Indices of the features the model reads.
    pub fn used_features(&self) -> Vec<usize> {
        (0..NR_FEATURES)
            .filter(|&i| !self.masked_features.iter().any(|m| m == FEATURES[i].name))
            .collect()
    }

    /// The file's bytes.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let body = serde_json::to_string(self)?;
        let raw = RawValue::from_string(body)?;
        let file = File {
            checksum: format!("sha256:{}", sha256_hex(raw.get().as_bytes())),
            model: &raw,
        };
        Ok(serde_json::to_vec(&file)?)
    }

    pub fn save(&self, path: &Path) -> Result<()> {
        // Write then rename, so a reader never sees half a model.
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, self.to_bytes()?)
            .with_context(|| format!("writing {}", tmp.display()))?;
        std::fs::rename(&tmp, path)
            .with_context(|| format!("renaming {} to {}", tmp.display(), path.display()))
    }

    /// Parses and checks a model: checksum, format, version, features and
    /// network bounds. The queue configuration is checked by `fits`.
    pub fn from_bytes(bytes: &[u8], name: &str) -> Result<Self> {
        let file: File = serde_json::from_slice(bytes)
            .with_context(|| format!("{name}: not a Custos policy model (or truncated)"))?;
        let want = file.checksum.strip_prefix("sha256:").unwrap_or("");
        let got = sha256_hex(file.model.get().as_bytes());
        if want != got {
            bail!("{name}: checksum mismatch (file says {}, content is sha256:{got}): corrupt or edited", file.checksum);
        }
        let probe: serde_json::Value = serde_json::from_str(file.model.get())?;
        let format = probe.get("format").and_then(|v| v.as_str()).unwrap_or("");
        if format != MODEL_FORMAT {
            bail!("{name}: format {format:?}, expected {MODEL_FORMAT:?}");
        }
        let version = probe.get("version").and_then(|v| v.as_u64()).unwrap_or(0);
        if version != MODEL_VERSION as u64 {
            bail!("{name}: model version {version}, this build reads version {MODEL_VERSION}");
        }
        let model: Model = serde_json::from_str(file.model.get())
            .with_context(|| format!("{name}: malformed model"))?;
        let ours: Vec<FeatureEntry> = FEATURES.iter().map(FeatureEntry::from).collect();
        if model.features != ours {
            bail!(
                "{name}: trained on features [{}], this scheduler provides [{}]",
                model
                    .features
                    .iter()
                    .map(|f| format!("{}:{:?}", f.name, f.normalization))
                    .collect::<Vec<_>>()
                    .join(", "),
                ours.iter()
                    .map(|f| format!("{}:{:?}", f.name, f.normalization))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        if !matches!(model.weight_bits, 4 | 8) {
            bail!(
                "{name}: {}-bit weights; 4 and 8 are supported",
                model.weight_bits
            );
        }
        model
            .qnet
            .validate()
            .with_context(|| format!("{name}: invalid network"))?;
        for feature in &model.masked_features {
            let Some(i) = crate::features::index_of(feature) else {
                bail!("{name}: masks an unknown feature {feature:?}");
            };
            if (0..model.qnet.hidden).any(|j| model.qnet.w1[j * NR_FEATURES + i] != 0) {
                bail!("{name}: feature {feature:?} is masked but its first-layer weights are not zero");
            }
        }
        if model.qnet.actions != model.nr_queues as usize + 1 {
            bail!(
                "{name}: {} actions for {} budgeted queues (needs one per queue)",
                model.qnet.actions,
                model.nr_queues
            );
        }
        Ok(model)
    }

    pub fn load(path: &Path) -> Result<Self> {
        let bytes =
            std::fs::read(path).with_context(|| format!("reading model {}", path.display()))?;
        Self::from_bytes(&bytes, &path.display().to_string())
    }

    /// Whether this model can drive a scheduler with `nr_queues` budgeted queues.
    pub fn fits(&self, nr_queues: u32) -> Result<()> {
        if self.nr_queues != nr_queues {
            bail!(
                "the model was trained for {} budgeted queues, the scheduler runs {nr_queues} (--nr-queues)",
                self.nr_queues
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model() -> Model {
        let hidden = 4;
        let qnet = QNet {
            hidden,
            actions: 4,
            weight_max: 127,
            w1: (0..hidden * NR_FEATURES)
                .map(|i| (i % 11) as i8 - 5)
                .collect(),
            b1: vec![1, -2, 3, -4],
            requant: 40_000,
            w2: (0..4 * hidden).map(|i| (i % 7) as i8 - 3).collect(),
            b2: vec![10, 0, -10, 5],
        };
        Model::new(
            3,
            8,
            qnet,
            None,
            Provenance {
                transitions: 7,
                epochs: 1,
                note: "test".into(),
            },
        )
    }

    #[test]
    fn the_shipped_model_is_valid() {
        let m = Model::from_bytes(DEFAULT_MODEL, DEFAULT_MODEL_NAME).unwrap();
        m.fits(3).unwrap();
        assert!(m.float.is_some());
    }

    #[test]
    fn a_model_round_trips() {
        let m = model();
        let bytes = m.to_bytes().unwrap();
        assert_eq!(Model::from_bytes(&bytes, "m").unwrap(), m);
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("m.json");
        m.save(&p).unwrap();
        assert_eq!(Model::load(&p).unwrap(), m);
        m.fits(3).unwrap();
    }

    #[test]
    fn a_masked_model_ignores_its_masked_features() {
        let mut m = model();
        let keep = crate::features::parse_feature_set("provenance").unwrap();
        m.mask_features(&keep);
        assert_eq!(m.masked_features.len(), NR_FEATURES - keep.len());
        assert_eq!(m.used_features(), keep);
        let back = Model::from_bytes(&m.to_bytes().unwrap(), "m").unwrap();
        assert_eq!(back, m);
        // Any values in the masked inputs: the same Q-values as zeros there.
        let mut x = [0u8; NR_FEATURES];
        for (i, v) in x.iter_mut().enumerate() {
            *v = (i * 37 % 129) as u8;
        }
        let mut masked = x;
        crate::features::mask_state(&mut masked, &keep);
        assert_ne!(x, masked);
        assert_eq!(back.qnet.q_values(&x), back.qnet.q_values(&masked));
        // An unmasked model's file has no masked_features field (format unchanged).
        assert!(!String::from_utf8(model().to_bytes().unwrap())
            .unwrap()
            .contains("masked_features"));
    }

    #[test]
    fn every_bad_file_is_a_clear_error() {
        let m = model();
        let bytes = m.to_bytes().unwrap();
        let err = |b: &[u8]| Model::from_bytes(b, "f").unwrap_err().to_string();

        assert!(err(&bytes[..bytes.len() / 2]).contains("not a Custos policy model"));
        assert!(err(b"").contains("not a Custos policy model"));
        // One weight changed, checksum not: corrupt.
        let text = String::from_utf8(bytes.clone()).unwrap();
        let corrupt = text.replacen("\"b2\":[10,", "\"b2\":[11,", 1);
        assert_ne!(corrupt, text);
        assert!(err(corrupt.as_bytes()).contains("checksum mismatch"));

        // Consistent checksums over wrong contents: each check names its cause.
        let mut other = m.clone();
        other.version = 2;
        assert!(err(&other.to_bytes().unwrap()).contains("model version 2"));
        let mut other = m.clone();
        other.format = "something".into();
        assert!(err(&other.to_bytes().unwrap()).contains("format"));
        let mut other = m.clone();
        other.features.swap(0, 1);
        assert!(err(&other.to_bytes().unwrap()).contains("trained on features"));
        let mut other = m.clone();
        other.nr_queues = 2;
        assert!(err(&other.to_bytes().unwrap()).contains("4 actions for 2 budgeted queues"));
        let mut other = m.clone();
        other.qnet.b1.pop();
        assert!(err(&other.to_bytes().unwrap()).contains("invalid network"));
        let mut other = m.clone();
        other.weight_bits = 2;
        assert!(err(&other.to_bytes().unwrap()).contains("2-bit"));

        let mut other = m.clone();
        other.masked_features = vec!["latency".into()];
        assert!(err(&other.to_bytes().unwrap())
            .contains("\"latency\" is masked but its first-layer weights are not zero"));
        other.masked_features = vec!["lateness".into()];
        assert!(err(&other.to_bytes().unwrap()).contains("unknown feature \"lateness\""));

        assert!(m
            .fits(2)
            .unwrap_err()
            .to_string()
            .contains("trained for 3 budgeted queues"));
        assert!(Model::load(Path::new("/nonexistent/m.json"))
            .unwrap_err()
            .to_string()
            .contains("reading model"));
    }
}

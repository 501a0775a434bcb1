//! The GRU placement policy (seed 002): which CPU a task that was created or
//! woke up should run on, learned by imitating the placements of the
//! kernel's default scheduler.
//!
//! The scheduler sends a snapshot of each such task (seven features,
//! [`Snapshot`]); a window of the last [`WINDOW`] snapshots goes through a
//! GRU, and its last hidden state through a linear layer gives one logit
//! per CPU. The model is trained here (candle) as a classifier: the label
//! of a window is the CPU the default scheduler put its last task on
//! (categorical cross-entropy, Adam, early stopping on held-out windows),
//! with a floor under the norm of each input feature's weight column so
//! that no feature is switched off (seed 002 §3.4). It is saved as ONNX,
//! which any framework can write, so users can bring their own; the
//! scheduler runs it with tract, a pure-Rust ONNX runtime.
//!
//! Not for: the kernel side (the snapshots, the `pid_to_cpu` map and the
//! fallback live in custos-sched).

use anyhow::{bail, ensure, Context, Result};
use candle_core::{DType, Device, Tensor, Var};
use candle_nn::rnn::{GRUConfig, GRU, RNN};
use candle_nn::{AdamW, Linear, Module, Optimizer, ParamsAdamW, VarBuilder, VarMap};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use std::path::Path;
use tract_onnx::pb;
use tract_onnx::prelude::*;

/// Features per snapshot (seed 002, table 3.3).
pub const FEATURES: usize = 7;
/// Snapshots per window: the model sees the last ten tasks placed.
pub const WINDOW: usize = 10;
/// The features' names and scaling, as the model file records them: a
/// model trained on other features or scales is refused, not misread.
pub const FEATURE_SPEC: &str =
    "prio,nr_cpus_allowed,kthread,ln1p_runtime_us,ln1p_nvcsw,ln1p_nivcsw,ln1p_switch_count;v1";

/// The model that ships: trained by imitating the kernel's default scheduler
/// in the 2-vCPU VM (bench/placement/run.py --train, bench/placement/README.md).
pub const SHIPPED_MODEL: &[u8] = include_bytes!("../models/placement-gru.onnx");

/// Model file metadata keys.
const META_FEATURES: &str = "custos.placement.features";
const META_WINDOW: &str = "custos.placement.window";
const META_CPUS: &str = "custos.placement.cpus";

/// One task as the scheduler sees it when the task is created or wakes up.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Snapshot {
    /// The kernel's priority (`task->prio`: 100..139 for normal tasks).
    pub prio: i32,
    pub nr_cpus_allowed: u32,
    /// A kernel thread (`PF_KTHREAD`).
    pub kthread: bool,
    /// CPU time so far (`se.sum_exec_runtime`).
    pub runtime_ns: u64,
    /// Voluntary and involuntary context switches (`nvcsw`, `nivcsw`).
    pub nvcsw: u64,
    pub nivcsw: u64,
    /// Times the task was switched in (counted by the scheduler).
    pub switch_count: u64,
}

/// The model's input for one snapshot: every feature scaled to about
/// [-1, 1] (counts and times grow over orders of magnitude: logarithms).
pub fn features(s: &Snapshot) -> [f32; FEATURES] {
    let ln1p = |x: u64, scale: f32| ((x as f64).ln_1p() as f32) / scale;
    [
        (s.prio as f32 - 120.0) / 20.0,
        ((s.nr_cpus_allowed as f64).ln_1p() as f32) / 5.0,
        if s.kthread { 1.0 } else { 0.0 },
        ln1p(s.runtime_ns / 1000, 20.0),
        ln1p(s.nvcsw, 16.0),
        ln1p(s.nivcsw, 16.0),
        ln1p(s.switch_count, 16.0),
    ]
}

/// The model's input: the last [`WINDOW`] snapshots, oldest first.
pub type Window = [[f32; FEATURES]; WINDOW];

/// A training example: a window and the CPU the default scheduler placed
/// its last task on.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    pub window: Window,
    pub cpu: u32,
}

/// The network's weights as floats, in PyTorch's GRU layout (gates r, z, n;
/// `w_ih` is (3·hidden, FEATURES) row-major, and so on).
#[derive(Clone, Debug, PartialEq)]
pub struct GruWeights {
    pub hidden: usize,
    pub cpus: usize,
    pub w_ih: Vec<f32>,
    pub w_hh: Vec<f32>,
    pub b_ih: Vec<f32>,
    pub b_hh: Vec<f32>,
    /// (cpus, hidden) row-major, and its bias.
    pub head_w: Vec<f32>,
    pub head_b: Vec<f32>,
}

/// The trainable network (candle).
pub struct GruNet {
    vars: VarMap,
    gru: GRU,
    head: Linear,
    hidden: usize,
    cpus: usize,
}

impl GruNet {
    /// A fresh network: uniform in ±1/√hidden as PyTorch's `nn.GRU` starts,
    /// drawn from `seed` (candle's own initialisers cannot be seeded).
    pub fn new(hidden: usize, cpus: usize, seed: u64) -> Result<Self> {
        ensure!(
            hidden > 0 && cpus > 0,
            "a network needs hidden units and CPUs"
        );
        let mut rng = StdRng::seed_from_u64(seed);
        let bound = 1.0 / (hidden as f32).sqrt();
        let mut u =
            |n: usize| -> Vec<f32> { (0..n).map(|_| rng.gen_range(-bound..bound)).collect() };
        let w = GruWeights {
            hidden,
            cpus,
            w_ih: u(3 * hidden * FEATURES),
            w_hh: u(3 * hidden * hidden),
            b_ih: u(3 * hidden),
            b_hh: u(3 * hidden),
            head_w: u(cpus * hidden),
            head_b: u(cpus),
        };
        Self::from_weights(&w)
    }

    pub fn from_weights(w: &GruWeights) -> Result<Self> {
        let (h, c) = (w.hidden, w.cpus);
        let lens = [
            (&w.w_ih, 3 * h * FEATURES),
            (&w.w_hh, 3 * h * h),
            (&w.b_ih, 3 * h),
            (&w.b_hh, 3 * h),
            (&w.head_w, c * h),
            (&w.head_b, c),
        ];
        ensure!(
            lens.iter().all(|(v, n)| v.len() == *n),
            "weights of the wrong sizes for {h} hidden units and {c} CPUs"
        );
        let dev = Device::Cpu;
        let mut vars = VarMap::new();
        let vb = VarBuilder::from_varmap(&vars, DType::F32, &dev);
        let gru = candle_nn::rnn::gru(FEATURES, h, GRUConfig::default(), vb.pp("gru"))?;
        let head = candle_nn::linear(h, c, vb.pp("head"))?;
        for (name, data, shape) in [
            ("gru.weight_ih_l0", &w.w_ih, vec![3 * h, FEATURES]),
            ("gru.weight_hh_l0", &w.w_hh, vec![3 * h, h]),
            ("gru.bias_ih_l0", &w.b_ih, vec![3 * h]),
            ("gru.bias_hh_l0", &w.b_hh, vec![3 * h]),
            ("head.weight", &w.head_w, vec![c, h]),
            ("head.bias", &w.head_b, vec![c]),
        ] {
            vars.set_one(name, Tensor::from_slice(data, shape, &dev)?)?;
        }
        Ok(GruNet {
            vars,
            gru,
            head,
            hidden: h,
            cpus: c,
        })
    }

    pub fn weights(&self) -> Result<GruWeights> {
        let data = self.vars.data().lock().unwrap();
        let get = |name: &str| -> Result<Vec<f32>> {
            Ok(data
                .get(name)
                .with_context(|| format!("no {name}"))?
                .as_tensor()
                .flatten_all()?
                .to_vec1::<f32>()?)
        };
        Ok(GruWeights {
            hidden: self.hidden,
            cpus: self.cpus,
            w_ih: get("gru.weight_ih_l0")?,
            w_hh: get("gru.weight_hh_l0")?,
            b_ih: get("gru.bias_ih_l0")?,
            b_hh: get("gru.bias_hh_l0")?,
            head_w: get("head.weight")?,
            head_b: get("head.bias")?,
        })
    }

    /// Logits (batch, cpus) for windows (batch, WINDOW, FEATURES).
    pub fn logits(&self, x: &Tensor) -> Result<Tensor> {
        let states = self.gru.seq(x)?;
        let last = &states.last().context("an empty window")?.h;
        Ok(self.head.forward(last)?)
    }

    /// The CPU each window's last task goes to.
    pub fn predict(&self, windows: &[Window]) -> Result<Vec<u32>> {
        let x = windows_tensor(windows)?;
        Ok(self.logits(&x)?.argmax(1)?.to_vec1::<u32>()?)
    }

    /// The Euclidean norm of each feature's column of the GRU's input
    /// weights: how much the feature can move the gates.
    pub fn feature_norms(&self) -> Result<Vec<f32>> {
        let data = self.vars.data().lock().unwrap();
        let w = data
            .get("gru.weight_ih_l0")
            .context("no input weights")?
            .as_tensor()
            .clone();
        Ok(w.sqr()?.sum(0)?.sqrt()?.to_vec1::<f32>()?)
    }

    fn all_vars(&self) -> Vec<Var> {
        self.vars.all_vars()
    }
}

fn windows_tensor(windows: &[Window]) -> Result<Tensor> {
    let flat: Vec<f32> = windows
        .iter()
        .flat_map(|w| w.iter().flatten().copied())
        .collect();
    Ok(Tensor::from_vec(
        flat,
        (windows.len(), WINDOW, FEATURES),
        &Device::Cpu,
    )?)
}

/// How to train.
#[derive(Clone, Debug)]
pub struct TrainConfig {
    pub hidden: usize,
    pub cpus: usize,
    pub lr: f64,
    pub batch: usize,
    pub max_epochs: usize,
    /// Epochs without a better held-out loss before stopping.
    pub patience: usize,
    /// Share of the samples held out to decide when to stop.
    pub validation: f64,
    /// The floor under each feature's weight-column norm, and the weight
    /// of the penalty for falling below it.
    pub norm_floor: f32,
    pub norm_weight: f32,
    pub seed: u64,
}

impl TrainConfig {
    pub fn for_cpus(cpus: usize) -> Self {
        TrainConfig {
            hidden: 32,
            cpus,
            lr: 3e-3,
            batch: 64,
            max_epochs: 60,
            patience: 6,
            validation: 0.2,
            norm_floor: 0.5,
            norm_weight: 1.0,
            seed: 1,
        }
    }
}

/// What training did.
#[derive(Clone, Debug)]
pub struct TrainReport {
    pub epochs: usize,
    pub best_epoch: usize,
    pub train_samples: usize,
    pub validation_samples: usize,
    pub validation_loss: f32,
    /// Share of held-out windows placed where the default scheduler placed them.
    pub validation_accuracy: f32,
    /// The same for always choosing the most common CPU: the bar to beat.
    pub majority_accuracy: f32,
    pub feature_norms: Vec<f32>,
}

/// Consecutive samples held out together (see [`train_with_progress`]).
const HOLDOUT_BLOCK: usize = 1000;

/// One epoch's outcome, for progress reports.
#[derive(Clone, Copy, Debug)]
pub struct EpochReport {
    pub epoch: usize,
    pub max_epochs: usize,
    pub validation_loss: f32,
    pub best_epoch: usize,
}

/// Trains a network to place as the samples' scheduler did.
pub fn train(samples: &[Sample], cfg: &TrainConfig) -> Result<(GruNet, TrainReport)> {
    train_with_progress(samples, cfg, |_| {})
}

/// [`train`], calling `progress` after every epoch (training on a long
/// recording takes minutes).
///
/// The held-out windows are whole blocks of consecutive samples, spread
/// over the recording (about `validation` of them), not a random draw:
/// consecutive windows share nine of their ten snapshots, so a random draw
/// would hold out near-copies of training windows and overstate the
/// accuracy (session 16: 87.7 % so, 59.8 % on the last fifth). Blocks
/// rather than the tail keep every load of the recording in both sets.
pub fn train_with_progress(
    samples: &[Sample],
    cfg: &TrainConfig,
    mut progress: impl FnMut(EpochReport),
) -> Result<(GruNet, TrainReport)> {
    ensure!(
        samples.len() >= 20,
        "{} samples are too few to train on (20 at least)",
        samples.len()
    );
    if let Some(s) = samples.iter().find(|s| s.cpu as usize >= cfg.cpus) {
        bail!(
            "a sample placed on CPU {}, but the model is for {} CPUs",
            s.cpu,
            cfg.cpus
        );
    }
    let mut rng = StdRng::seed_from_u64(cfg.seed);
    // Blocks of HOLDOUT_BLOCK samples; every k-th block is held out.
    let every = ((1.0 / cfg.validation.clamp(0.01, 0.5)).round() as usize).max(2);
    let block = (samples.len() / (every * 8)).clamp(1, HOLDOUT_BLOCK);
    let (val_idx, train_idx): (Vec<usize>, Vec<usize>) =
        (0..samples.len()).partition(|i| (i / block) % every == every - 1);
    ensure!(
        !val_idx.is_empty() && !train_idx.is_empty(),
        "{} samples cannot be split for training",
        samples.len()
    );
    let set = |idx: &[usize]| -> Result<(Tensor, Tensor)> {
        let windows: Vec<Window> = idx.iter().map(|&i| samples[i].window).collect();
        let labels: Vec<u32> = idx.iter().map(|&i| samples[i].cpu).collect();
        Ok((
            windows_tensor(&windows)?,
            Tensor::from_vec(labels, idx.len(), &Device::Cpu)?,
        ))
    };
    let (val_x, val_y) = set(&val_idx)?;

    let net = GruNet::new(cfg.hidden, cfg.cpus, cfg.seed)?;
    let mut opt = AdamW::new(
        net.all_vars(),
        ParamsAdamW {
            lr: cfg.lr,
            weight_decay: 0.0,
            ..Default::default()
        },
    )?;
    let mut best = (f32::INFINITY, 0usize, net.weights()?);
    let mut train_idx = train_idx;
    let mut epochs = 0;
    for epoch in 0..cfg.max_epochs {
        epochs = epoch + 1;
        train_idx.shuffle(&mut rng);
        for chunk in train_idx.chunks(cfg.batch) {
            let (x, y) = set(chunk)?;
            let loss = candle_nn::loss::cross_entropy(&net.logits(&x)?, &y)?;
            let loss = (loss + norm_penalty(&net, cfg)?)?;
            opt.backward_step(&loss)?;
        }
        let val_loss =
            candle_nn::loss::cross_entropy(&net.logits(&val_x)?, &val_y)?.to_scalar::<f32>()?;
        if val_loss < best.0 {
            best = (val_loss, epoch + 1, net.weights()?);
        }
        progress(EpochReport {
            epoch: epoch + 1,
            max_epochs: cfg.max_epochs,
            validation_loss: val_loss,
            best_epoch: best.1,
        });
        if epoch + 1 - best.1 >= cfg.patience {
            break;
        }
    }
    let net = GruNet::from_weights(&best.2)?;
    let predicted = net.logits(&val_x)?.argmax(1)?.to_vec1::<u32>()?;
    let truth = val_y.to_vec1::<u32>()?;
    let hits = predicted.iter().zip(&truth).filter(|(p, t)| p == t).count();
    // The bar on the same held-out windows: always their most common CPU.
    let mut counts = vec![0usize; cfg.cpus];
    for &t in &truth {
        counts[t as usize] += 1;
    }
    let report = TrainReport {
        epochs,
        best_epoch: best.1,
        train_samples: train_idx.len(),
        validation_samples: truth.len(),
        validation_loss: best.0,
        validation_accuracy: hits as f32 / truth.len() as f32,
        majority_accuracy: *counts.iter().max().unwrap() as f32 / truth.len() as f32,
        feature_norms: net.feature_norms()?,
    };
    Ok((net, report))
}

/// Σ over features of max(0, floor − ‖column‖)²: pushes a feature's weights
/// back up when training would silence it.
fn norm_penalty(net: &GruNet, cfg: &TrainConfig) -> Result<Tensor> {
    let data = net.vars.data().lock().unwrap();
    let w = data
        .get("gru.weight_ih_l0")
        .context("no input weights")?
        .as_tensor()
        .clone();
    drop(data);
    let norms = w.sqr()?.sum(0)?.sqrt()?;
    let short = norms.affine(-1.0, cfg.norm_floor as f64)?.relu()?;
    Ok((short.sqr()?.sum_all()? * cfg.norm_weight as f64)?)
}

/// Writes the network as an ONNX model: Transpose → GRU (linear before
/// reset, as PyTorch and candle compute it) → Reshape → Gemm; input
/// `window` (batch, WINDOW, FEATURES), output `logits` (batch, cpus). The
/// batch is left open so the agent can run many windows in one call.
pub fn to_onnx(w: &GruWeights) -> Vec<u8> {
    use prost::Message;
    let h = w.hidden;
    // ONNX orders the gates z, r, h; PyTorch and candle r, z, n.
    let zrh = |m: &[f32], row: usize| -> Vec<f32> {
        let gate = |g: usize| &m[g * h * row..(g + 1) * h * row];
        [gate(1), gate(0), gate(2)].concat()
    };
    let b = [zrh(&w.b_ih, 1), zrh(&w.b_hh, 1)].concat();
    let floats = |name: &str, dims: &[usize], data: Vec<f32>| pb::TensorProto {
        name: name.into(),
        dims: dims.iter().map(|&d| d as i64).collect(),
        data_type: pb::tensor_proto::DataType::Float as i32,
        float_data: data,
        ..Default::default()
    };
    let attr_int = |name: &str, v: i64| pb::AttributeProto {
        name: name.into(),
        r#type: pb::attribute_proto::AttributeType::Int as i32,
        i: v,
        ..Default::default()
    };
    let node = |op: &str, inputs: &[&str], outputs: &[&str], attribute: Vec<pb::AttributeProto>| {
        pb::NodeProto {
            op_type: op.into(),
            name: format!("{op}_{}", outputs[outputs.len() - 1]),
            input: inputs.iter().map(|s| s.to_string()).collect(),
            output: outputs.iter().map(|s| s.to_string()).collect(),
            attribute,
            ..Default::default()
        }
    };
    // A (batch, dims...) tensor whose batch is named, not fixed.
    let value = |name: &str, dims: &[usize]| pb::ValueInfoProto {
        name: name.into(),
        r#type: Some(pb::TypeProto {
            value: Some(pb::type_proto::Value::TensorType(pb::type_proto::Tensor {
                elem_type: pb::tensor_proto::DataType::Float as i32,
                shape: Some(pb::TensorShapeProto {
                    dim: std::iter::once(pb::tensor_shape_proto::dimension::Value::DimParam(
                        "batch".into(),
                    ))
                    .chain(
                        dims.iter()
                            .map(|&d| pb::tensor_shape_proto::dimension::Value::DimValue(d as i64)),
                    )
                    .map(|v| pb::tensor_shape_proto::Dimension {
                        value: Some(v),
                        ..Default::default()
                    })
                    .collect(),
                }),
            })),
            ..Default::default()
        }),
        ..Default::default()
    };
    let perm = pb::AttributeProto {
        name: "perm".into(),
        r#type: pb::attribute_proto::AttributeType::Ints as i32,
        ints: vec![1, 0, 2],
        ..Default::default()
    };
    let graph = pb::GraphProto {
        name: "custos_gru_placement".into(),
        node: vec![
            node("Transpose", &["window"], &["steps"], vec![perm]),
            node(
                "GRU",
                &["steps", "W", "R", "B"],
                &["", "h_last"],
                vec![
                    attr_int("hidden_size", h as i64),
                    attr_int("linear_before_reset", 1),
                ],
            ),
            node("Reshape", &["h_last", "h_shape"], &["h"], vec![]),
            node(
                "Gemm",
                &["h", "head_w", "head_b"],
                &["logits"],
                vec![attr_int("transB", 1)],
            ),
        ],
        initializer: vec![
            floats("W", &[1, 3 * h, FEATURES], zrh(&w.w_ih, FEATURES)),
            floats("R", &[1, 3 * h, h], zrh(&w.w_hh, h)),
            floats("B", &[1, 6 * h], b),
            pb::TensorProto {
                name: "h_shape".into(),
                dims: vec![2],
                data_type: pb::tensor_proto::DataType::Int64 as i32,
                int64_data: vec![-1, h as i64],
                ..Default::default()
            },
            floats("head_w", &[w.cpus, h], w.head_w.clone()),
            floats("head_b", &[w.cpus], w.head_b.clone()),
        ],
        input: vec![value("window", &[WINDOW, FEATURES])],
        output: vec![value("logits", &[w.cpus])],
        ..Default::default()
    };
    let meta = |k: &str, v: String| pb::StringStringEntryProto {
        key: k.into(),
        value: v,
    };
    let model = pb::ModelProto {
        ir_version: 8,
        opset_import: vec![pb::OperatorSetIdProto {
            domain: String::new(),
            version: 14,
        }],
        producer_name: "custos".into(),
        producer_version: env!("CARGO_PKG_VERSION").into(),
        graph: Some(graph),
        metadata_props: vec![
            meta(META_FEATURES, FEATURE_SPEC.into()),
            meta(META_WINDOW, WINDOW.to_string()),
            meta(META_CPUS, w.cpus.to_string()),
        ],
        ..Default::default()
    };
    model.encode_to_vec()
}

/// The most windows one inference call takes; a larger batch is split.
pub const MAX_BATCH: usize = 64;

/// A placement model ready to run: any ONNX model that takes `window`
/// (1, WINDOW, FEATURES) and gives logits (1, cpus), and says in its
/// metadata that its features are ours. If its batch is open (as
/// [`to_onnx`] writes it) windows are run many at a time: under emulation
/// inference costs ~1000 times what it does natively (QEMU emulates the
/// floating point), and one call of 64 windows costs what ~13 single calls
/// do; natively a call is mostly fixed overhead (16 µs for one window,
/// 5 µs a window in 64).
pub struct PlacementModel {
    proto: pb::ModelProto,
    /// Plans by batch size, built on first use: tract's GRU needs a
    /// concrete batch. Index k holds batch 2^k; None if the model's
    /// graph does not take that batch (a fixed batch of one).
    plans: std::sync::Mutex<Vec<Option<Option<Plan>>>>,
    cpus: usize,
}

type Plan = std::sync::Arc<TypedSimplePlan>;

impl PlacementModel {
    /// Loads `path` for a machine with `cpus` CPUs; every way a file can be
    /// wrong is a clear error (the scheduler then places as it would
    /// without a model, and says so).
    pub fn load(path: &Path, cpus: usize) -> Result<Self> {
        let bytes = std::fs::read(path)
            .with_context(|| format!("reading the placement model {}", path.display()))?;
        Self::from_bytes(&bytes, cpus)
            .with_context(|| format!("the placement model {}", path.display()))
    }

    pub fn from_bytes(bytes: &[u8], cpus: usize) -> Result<Self> {
        use prost::Message;
        let proto = pb::ModelProto::decode(bytes).context("not an ONNX model")?;
        let meta = |k: &str| {
            proto
                .metadata_props
                .iter()
                .find(|p| p.key == k)
                .map(|p| p.value.as_str())
        };
        match meta(META_FEATURES) {
            Some(FEATURE_SPEC) => {}
            Some(other) => bail!("it was trained on features {other:?}; this scheduler sends {FEATURE_SPEC:?}"),
            None => bail!("it does not say which features it takes (metadata {META_FEATURES}, {FEATURE_SPEC:?} here)"),
        }
        if let Some(w) = meta(META_WINDOW) {
            ensure!(
                w == WINDOW.to_string(),
                "it takes windows of {w} tasks; this scheduler keeps {WINDOW}"
            );
        }
        let one = Self::plan(&proto, 1).context("its graph does not take a (1, 10, 7) window")?;
        let out = one
            .model()
            .output_fact(0)?
            .shape
            .as_concrete()
            .map(|s| s.to_vec());
        match out.as_deref() {
            Some([1, c]) if *c == cpus => {}
            Some([1, c]) => bail!("it places tasks on {c} CPUs; this machine has {cpus}"),
            other => bail!("its output has shape {other:?}, not (1, {cpus}) logits"),
        }
        let mut plans = vec![None; MAX_BATCH.ilog2() as usize + 1];
        plans[0] = Some(Some(one));
        Ok(PlacementModel {
            proto,
            plans: std::sync::Mutex::new(plans),
            cpus,
        })
    }

    /// The optimized plan for `batch` windows a call.
    fn plan(proto: &pb::ModelProto, batch: usize) -> Result<Plan> {
        let model = tract_onnx::onnx()
            .model_for_proto_model(proto)
            .context("tract cannot read it")?
            .with_input_fact(0, f32::fact([batch, WINDOW, FEATURES]).into())?;
        // tract panics on some graphs it cannot type; that is a model
        // that does not take this batch, not a reason to stop scheduling.
        let optimized =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| model.into_optimized()))
                .map_err(|_| anyhow::anyhow!("tract failed on its graph"))??;
        let out = optimized
            .output_fact(0)?
            .shape
            .as_concrete()
            .map(|s| s.to_vec());
        ensure!(
            matches!(out.as_deref(), Some([b, _]) if *b == batch),
            "its output has shape {out:?} for a batch of {batch}"
        );
        optimized.into_runnable()
    }

    /// The plan for 2^k windows, if the model takes that batch.
    fn plan_for(&self, k: usize) -> Option<Plan> {
        let mut plans = self.plans.lock().unwrap();
        plans[k]
            .get_or_insert_with(|| Self::plan(&self.proto, 1 << k).ok())
            .clone()
    }

    pub fn cpus(&self) -> usize {
        self.cpus
    }

    /// The logits for each window, in calls of up to MAX_BATCH windows
    /// (powers of two; one at a time for a model of a fixed batch).
    pub fn logits_batch(&self, windows: &[Window]) -> Result<Vec<Vec<f32>>> {
        let mut out = Vec::with_capacity(windows.len());
        let mut rest = windows;
        while !rest.is_empty() {
            let mut k = rest.len().min(MAX_BATCH).ilog2() as usize;
            let plan = loop {
                match self.plan_for(k) {
                    Some(p) => break p,
                    None if k > 0 => k -= 1,
                    None => bail!("the model no longer runs one window"),
                }
            };
            let (now, later) = rest.split_at(1 << k);
            let flat: Vec<f32> = now
                .iter()
                .flat_map(|w| w.iter().flatten().copied())
                .collect();
            let input = tract_ndarray::Array3::from_shape_vec((now.len(), WINDOW, FEATURES), flat)?
                .into_tensor();
            let result = plan.run(tvec!(input.into()))?;
            let view = result[0].to_plain_array_view::<f32>()?;
            let view = view.into_dimensionality::<tract_ndarray::Ix2>()?;
            out.extend(view.outer_iter().map(|row| row.to_vec()));
            rest = later;
        }
        Ok(out)
    }

    /// The logits for one window.
    pub fn logits(&self, window: &Window) -> Result<Vec<f32>> {
        Ok(self.logits_batch(std::slice::from_ref(window))?.remove(0))
    }

    /// The CPU for each window's last task.
    pub fn predict_batch(&self, windows: &[Window]) -> Result<Vec<u32>> {
        Ok(self
            .logits_batch(windows)?
            .iter()
            .map(|l| argmax(l))
            .collect())
    }

    /// The CPU for the window's last task.
    pub fn predict(&self, window: &Window) -> Result<u32> {
        Ok(argmax(&self.logits(window)?))
    }
}

fn argmax(l: &[f32]) -> u32 {
    l.iter()
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(b.1))
        .map(|(i, _)| i as u32)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn random_windows(n: usize, seed: u64) -> Vec<Window> {
        let mut rng = StdRng::seed_from_u64(seed);
        (0..n)
            .map(|_| std::array::from_fn(|_| std::array::from_fn(|_| rng.gen_range(-1.0..1.0))))
            .collect()
    }

    /// The ONNX file computes what the trained network computes: one
    /// definition of the model, whichever runtime runs it.
    #[test]
    fn the_onnx_model_agrees_with_the_network() {
        let net = GruNet::new(16, 4, 7).unwrap();
        let model = PlacementModel::from_bytes(&to_onnx(&net.weights().unwrap()), 4).unwrap();
        let windows = random_windows(50, 3);
        let candle = net
            .logits(&windows_tensor(&windows).unwrap())
            .unwrap()
            .to_vec2::<f32>()
            .unwrap();
        for (w, want) in windows.iter().zip(&candle) {
            let got = model.logits(w).unwrap();
            let diff = got
                .iter()
                .zip(want)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0f32, f32::max);
            assert!(diff < 1e-4, "tract {got:?} against candle {want:?}");
        }
        assert_eq!(
            windows
                .iter()
                .map(|w| model.predict(w).unwrap())
                .collect::<Vec<_>>(),
            net.predict(&windows).unwrap()
        );
    }

    /// Many windows in one call give each window's own answer, in order,
    /// whatever the split into calls; a model of a fixed batch of one (as
    /// frameworks often export) runs them one at a time.
    #[test]
    fn batches_agree_with_single_windows() {
        let net = GruNet::new(16, 2, 9).unwrap();
        let bytes = to_onnx(&net.weights().unwrap());
        let model = PlacementModel::from_bytes(&bytes, 2).unwrap();
        let windows = random_windows(2 * MAX_BATCH + 13, 4);
        let one: Vec<Vec<f32>> = windows.iter().map(|w| model.logits(w).unwrap()).collect();
        let many = model.logits_batch(&windows).unwrap();
        assert_eq!(many.len(), windows.len());
        for (a, b) in one.iter().zip(&many) {
            assert!(
                a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-5),
                "{a:?} against {b:?}"
            );
        }
        assert_eq!(
            model.predict_batch(&windows).unwrap(),
            net.predict(&windows).unwrap()
        );
        assert!(
            model
                .plans
                .lock()
                .unwrap()
                .iter()
                .filter(|p| matches!(p, Some(Some(_))))
                .count()
                > 1,
            "batched plans were built"
        );

        let mut fixed = {
            use prost::Message;
            pb::ModelProto::decode(bytes.as_slice()).unwrap()
        };
        let shape = fixed
            .graph
            .as_mut()
            .unwrap()
            .initializer
            .iter_mut()
            .find(|t| t.name == "h_shape")
            .unwrap();
        shape.int64_data[0] = 1;
        let fixed = PlacementModel::from_bytes(&prost::Message::encode_to_vec(&fixed), 2).unwrap();
        assert_eq!(
            fixed.predict_batch(&windows).unwrap(),
            net.predict(&windows).unwrap()
        );
        assert!(
            fixed
                .plans
                .lock()
                .unwrap()
                .iter()
                .skip(1)
                .all(|p| matches!(p, None | Some(None))),
            "no batch plan for a fixed batch"
        );
    }

    /// Training learns a placement that depends on the window's history,
    /// not only on its last task, and keeps every feature's weights above
    /// the floor. (The rule here is made up; the scheduler's own data comes
    /// from recording the default scheduler.)
    #[test]
    fn training_imitates_a_placement_rule_and_silences_no_feature() {
        let mut rng = StdRng::seed_from_u64(11);
        let samples: Vec<Sample> = random_windows(1500, 5)
            .into_iter()
            .map(|window| {
                // CPU 1 when the last task is a kernel thread or the tasks
                // before it ran long; else CPU 0.
                let busy: f32 = window[..WINDOW - 1].iter().map(|s| s[3]).sum();
                let cpu = (window[WINDOW - 1][2] > 0.3 || busy > 1.0) as u32;
                let _ = rng.gen::<u8>();
                Sample { window, cpu }
            })
            .collect();
        let cfg = TrainConfig {
            max_epochs: 40,
            ..TrainConfig::for_cpus(2)
        };
        let (net, report) = train(&samples, &cfg).unwrap();
        assert!(report.validation_accuracy > 0.9, "{report:?}");
        assert!(
            report.validation_accuracy > report.majority_accuracy + 0.2,
            "{report:?}"
        );
        assert!(
            report
                .feature_norms
                .iter()
                .all(|&n| n > 0.8 * cfg.norm_floor),
            "{report:?}"
        );
        // The file runs the same network.
        let model = PlacementModel::from_bytes(&to_onnx(&net.weights().unwrap()), 2).unwrap();
        let windows: Vec<Window> = samples.iter().take(100).map(|s| s.window).collect();
        assert_eq!(
            windows
                .iter()
                .map(|w| model.predict(w).unwrap())
                .collect::<Vec<_>>(),
            net.predict(&windows).unwrap()
        );
    }

    #[test]
    fn wrong_model_files_are_clear_errors() {
        let good = to_onnx(&GruNet::new(8, 2, 1).unwrap().weights().unwrap());
        let err = |bytes: &[u8], cpus: usize| {
            format!(
                "{:#}",
                PlacementModel::from_bytes(bytes, cpus)
                    .err()
                    .expect("refused")
            )
        };
        assert!(err(b"not a model at all", 2).contains("not an ONNX model"));
        assert!(err(&good[..good.len() / 2], 2).contains("not an ONNX model"));
        assert!(err(&good, 4).contains("places tasks on 2 CPUs; this machine has 4"));
        let mut other = {
            use prost::Message;
            pb::ModelProto::decode(good.as_slice()).unwrap()
        };
        other.metadata_props.retain(|p| p.key != META_FEATURES);
        let bytes = prost::Message::encode_to_vec(&other);
        assert!(err(&bytes, 2).contains("does not say which features"));
        other.metadata_props.push(pb::StringStringEntryProto {
            key: META_FEATURES.into(),
            value: "prio,runtime;v0".into(),
        });
        let bytes = prost::Message::encode_to_vec(&other);
        assert!(err(&bytes, 2).contains("trained on features"));
        let missing = std::env::temp_dir().join("custos-no-such-model.onnx");
        assert!(
            format!("{:#}", PlacementModel::load(&missing, 2).err().unwrap())
                .contains("reading the placement model")
        );
    }

    #[test]
    fn features_are_scaled_to_about_one() {
        let s = Snapshot {
            prio: 120,
            nr_cpus_allowed: 2,
            kthread: true,
            runtime_ns: 5_000_000_000,
            nvcsw: 10_000,
            nivcsw: 300,
            switch_count: 10_300,
        };
        let f = features(&s);
        assert_eq!(f[0], 0.0);
        assert_eq!(f[2], 1.0);
        assert!(f.iter().all(|v| v.abs() <= 1.5), "{f:?}");
        assert!(features(&Snapshot { prio: 100, ..s })[0] < 0.0);
    }
}

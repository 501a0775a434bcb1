//! The learned policy's user-space side while a scheduler runs: the weight
//! maps (pushing a network and reading its generation), and the learner
//! that drains the transitions ring, records transitions, and trains the
//! DQN online, pushing the quantised network after every epoch.
//!
//! The same code serves `custos sched --train` (in the scheduler process,
//! on its own map handles) and `custos train --online` (another process,
//! on the maps the scheduler pinned under PIN_DIR/sched).

use std::cell::RefCell;
use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use custos_policy::dqn::{Dqn, DqnConfig};
use custos_policy::features::{mask_state, State, NR_FEATURES};
use custos_policy::model::{Model, Provenance};
use custos_policy::net::QNet;
use custos_policy::quantize::quantize;
use custos_policy::replay::ReplayMemory;
use custos_policy::transition::{RecordingWriter, Transition};
use libbpf_rs::{MapCore, MapFlags, MapHandle, RingBufferBuilder};
use log::{info, warn};
use rand::SeedableRng;

use crate::bpf_intf::{custos_policy_state, custos_transition};
use crate::policy::{as_bytes, to_bpf_net};

/// Names of the policy maps pinned under PIN_DIR/sched.
pub const PINNED_MAPS: [&str; 3] = ["policy_nets", "policy_state", "transitions"];

/// Where a scheduler pins its policy maps for `custos train --online`.
pub fn policy_pin_dir(pin_dir: &Path) -> PathBuf {
    pin_dir.join("sched")
}

/// Handles on the scheduler's policy maps (the kernel's, not copies).
pub struct PolicyMaps {
    pub nets: MapHandle,
    pub state: MapHandle,
    pub transitions: MapHandle,
}

impl PolicyMaps {
    /// The maps a running scheduler pinned in `dir` (PIN_DIR/sched).
    pub fn from_pins(dir: &Path) -> Result<Self> {
        let open = |name: &str| {
            let path = dir.join(name);
            MapHandle::from_pinned_path(&path).with_context(|| {
                format!(
                    "no {} pinned: is `custos sched --policy learned` running? ({})",
                    name,
                    path.display()
                )
            })
        };
        Ok(PolicyMaps {
            nets: open("policy_nets")?,
            state: open("policy_state")?,
            transitions: open("transitions")?,
        })
    }

    /// The live weights' generation (0: none pushed; the static policy decides).
    pub fn generation(&self) -> Result<u64> {
        Ok(read_policy_state(&self.state)?.generation)
    }

    /// Queues of the scheduler the maps belong to (its network's actions).
    pub fn nr_actions(&self) -> Result<u32> {
        Ok(read_policy_state(&self.state)?.nr_actions)
    }

    pub fn explore_pct(&self) -> Result<u32> {
        Ok(read_policy_state(&self.state)?.explore_pct)
    }

    /// Changes the policy state in place (read, change, write back).
    fn update_state(
        &self,
        what: &str,
        change: impl FnOnce(&mut custos_policy_state),
    ) -> Result<()> {
        let mut state = read_policy_state(&self.state)?;
        change(&mut state);
        self.state
            .update(&0u32.to_ne_bytes(), as_bytes(&state), MapFlags::ANY)
            .context(what.to_string())
    }

    /// Records the scheduler's queue count for trainers (at load).
    pub fn set_nr_actions(&self, actions: u32) -> Result<()> {
        self.update_state("recording the number of queues", |s| s.nr_actions = actions)
    }

    /// Sets the share of decisions that explore (0 when not training).
    pub fn set_explore_pct(&self, pct: u32) -> Result<()> {
        self.update_state("setting the exploration rate", |s| {
            s.explore_pct = pct.min(100)
        })
    }

    /// Makes `net` the live network: writes the copy not in use, then moves
    /// the generation to it. Returns the new generation.
    ///
    /// Readers never see a half-written copy: a BPF program looks up the
    /// generation and reads the copy it names within one scheduler callback
    /// (microseconds, under RCU), and the copy written here stopped being
    /// live one push ago; pushes are at least MIN_PUSH_INTERVAL apart.
    pub fn push(&self, net: &QNet) -> Result<u64> {
        let value = to_bpf_net(net)?;
        let state = read_policy_state(&self.state)?;
        if state.nr_actions != 0 && net.actions != state.nr_actions as usize {
            bail!(
                "a network with {} actions for a scheduler with {} queues",
                net.actions,
                state.nr_actions
            );
        }
        let next = state.generation + 1;
        let slot = (next % 2) as u32;
        self.nets
            .update(&slot.to_ne_bytes(), as_bytes(&value), MapFlags::ANY)
            .context("writing the network's weights")?;
        let state = custos_policy_state {
            generation: next,
            ..state
        };
        self.state
            .update(&0u32.to_ne_bytes(), as_bytes(&state), MapFlags::ANY)
            .context("publishing the network's generation")?;
        Ok(next)
    }
}

/// The policy_state entry of a scheduler's map (its own or a pinned one).
pub fn read_policy_state(map: &dyn MapCore) -> Result<custos_policy_state> {
    let raw = map
        .lookup(&0u32.to_ne_bytes(), MapFlags::ANY)
        .context("reading the policy state")?
        .context("the policy_state map has no entry")?;
    if raw.len() < std::mem::size_of::<custos_policy_state>() {
        bail!("policy_state entry of {} bytes", raw.len());
    }
    // SAFETY: the map's value is this plain struct.
    Ok(unsafe { std::ptr::read_unaligned(raw.as_ptr().cast()) })
}

/// The network to train: the start model's float weights, else a fresh one.
pub fn start_dqn(start: Option<&Model>, cfg: DqnConfig) -> Result<Dqn> {
    match start.and_then(|m| m.float.as_ref()) {
        Some(float) => Dqn::from_float(float, cfg),
        None => Dqn::new(cfg),
    }
}

/// The trained network as a model file: quantised, with `calibration`
/// states setting the hidden layer's range, and the float weights kept so
/// training can resume from it. A network trained on the features `keep`
/// only (the others zero in every state) has the others masked: their
/// first-layer weights never mattered in training, so they are zeroed
/// before quantisation and cannot widen its scale.
pub fn quantised_model(
    dqn: &Dqn,
    nr_queues: u32,
    weight_bits: u32,
    keep: &[usize],
    calibration: &[State],
    trained: Provenance,
) -> Result<Model> {
    let mut float = dqn.to_float()?;
    float.keep_inputs(keep);
    let qnet = quantize(&float, weight_bits, calibration)?;
    let mut model = Model::new(nr_queues, weight_bits, qnet, Some(float), trained);
    model.mask_features(keep);
    Ok(model)
}

/// Pushes are spaced at least this far apart (see `PolicyMaps::push`).
pub const MIN_PUSH_INTERVAL: Duration = Duration::from_millis(100);

pub fn transition_from_kernel(raw: &[u8]) -> Option<Transition> {
    if raw.len() < std::mem::size_of::<custos_transition>() {
        return None;
    }
    // SAFETY: the ring's records are this plain struct.
    let t: custos_transition = unsafe { std::ptr::read_unaligned(raw.as_ptr().cast()) };
    let mut state = [0u8; NR_FEATURES];
    let mut next_state = [0u8; NR_FEATURES];
    state.copy_from_slice(&t.state[..NR_FEATURES]);
    next_state.copy_from_slice(&t.next_state[..NR_FEATURES]);
    Some(Transition {
        pid: t.pid,
        action: t.action,
        inferred: t.inferred,
        state,
        next_state,
        events: t.events,
        drops: t.drops,
        idle_before: t.idle_before,
        idle_after: t.idle_after,
        at_ns: t.at_ns,
    })
}

/// What the learner does with the transitions.
#[derive(Clone, Debug)]
pub struct LearnerConfig {
    /// Append every transition to this recording.
    pub record: Option<PathBuf>,
    /// Train online; None only drains (and records).
    pub train: Option<TrainConfig>,
}

#[derive(Clone, Debug)]
pub struct TrainConfig {
    pub dqn: DqnConfig,
    /// Budgeted queues of the scheduler (the model's actions are queues).
    pub nr_queues: u32,
    pub weight_bits: u32,
    /// Start from this model's float weights (else a fresh network).
    pub start: Option<Model>,
    /// One epoch (then a push) per this interval, once enough transitions came.
    pub epoch_every: Duration,
    pub min_transitions: usize,
    pub replay_capacity: usize,
    /// Write the model here after every epoch.
    pub save: Option<PathBuf>,
    /// Share of decisions that explore while training (epsilon-greedy).
    pub explore_pct: u32,
}

/// What a learner did, for the caller's report.
#[derive(Clone, Debug, Default)]
pub struct LearnerReport {
    pub transitions: u64,
    pub recorded: u64,
    pub epochs: u64,
    pub last_generation: u64,
    pub last_mean_reward: f64,
}

struct Trainer {
    cfg: TrainConfig,
    /// The features the start model reads (all, unless it was masked).
    keep: Vec<usize>,
    dqn: Dqn,
    memory: ReplayMemory,
    rng: rand::rngs::StdRng,
    epochs: u64,
    seen: u64,
    last_push: Option<Instant>,
}

impl Trainer {
    fn new(cfg: TrainConfig) -> Result<Self> {
        let dqn = start_dqn(cfg.start.as_ref(), cfg.dqn.clone())?;
        let keep = cfg
            .start
            .as_ref()
            .map_or_else(|| (0..NR_FEATURES).collect(), Model::used_features);
        Ok(Trainer {
            keep,
            memory: ReplayMemory::new(cfg.replay_capacity)?,
            rng: rand::rngs::StdRng::seed_from_u64(cfg.dqn.seed),
            dqn,
            cfg,
            epochs: 0,
            seen: 0,
            last_push: None,
        })
    }

    /// One epoch, quantised: the new model.
    fn epoch(&mut self) -> Result<(Model, f64)> {
        let stats = self.dqn.train_epoch(&self.memory, &mut self.rng)?;
        self.epochs += 1;
        let calibration: Vec<State> = self
            .memory
            .sample(2048.min(self.memory.len()), &mut self.rng)
            .into_iter()
            .map(|t| t.state)
            .collect();
        let model = quantised_model(
            &self.dqn,
            self.cfg.nr_queues,
            self.cfg.weight_bits,
            &self.keep,
            &calibration,
            Provenance {
                transitions: self.seen
                    + self.cfg.start.as_ref().map_or(0, |m| m.trained.transitions),
                epochs: self.epochs + self.cfg.start.as_ref().map_or(0, |m| m.trained.epochs),
                note: "trained online (custos sched --train / custos train --online)".into(),
            },
        )?;
        Ok((model, stats.mean_reward_of_batches))
    }
}

/// Drains the transitions ring until `shutdown`, recording and training as
/// configured. Runs on the calling thread.
pub fn run_learner(
    maps: &PolicyMaps,
    cfg: LearnerConfig,
    shutdown: Arc<AtomicBool>,
) -> Result<LearnerReport> {
    let mut report = LearnerReport::default();
    let mut recorder = match &cfg.record {
        Some(path) => Some(RecordingWriter::new(BufWriter::new(
            File::create(path).with_context(|| format!("cannot create {}", path.display()))?,
        ))?),
        None => None,
    };
    let mut trainer = cfg.train.clone().map(Trainer::new).transpose()?;
    let explored = maps.explore_pct()?;
    if let Some(tr) = &trainer {
        maps.set_explore_pct(tr.cfg.explore_pct)?;
    }
    let batch: Rc<RefCell<Vec<Transition>>> = Rc::default();
    let mut builder = RingBufferBuilder::new();
    {
        let batch = batch.clone();
        builder.add(&maps.transitions, move |raw| {
            if let Some(t) = transition_from_kernel(raw) {
                batch.borrow_mut().push(t);
            }
            0
        })?;
    }
    let ring = builder
        .build()
        .context("cannot read the transitions ring")?;
    let mut last_epoch = Instant::now();
    loop {
        let stopping = shutdown.load(Ordering::Relaxed);
        ring.consume().context("draining the transitions ring")?;
        let drained: Vec<Transition> = std::mem::take(&mut *batch.borrow_mut());
        report.transitions += drained.len() as u64;
        if let Some(w) = recorder.as_mut() {
            for t in &drained {
                w.write(t)?;
            }
            report.recorded = w.written;
        }
        if let Some(tr) = trainer.as_mut() {
            tr.seen += drained.len() as u64;
            for mut t in drained {
                mask_state(&mut t.state, &tr.keep);
                mask_state(&mut t.next_state, &tr.keep);
                tr.memory.push(t);
            }
            let due = last_epoch.elapsed() >= tr.cfg.epoch_every
                && tr
                    .last_push
                    .is_none_or(|p| p.elapsed() >= MIN_PUSH_INTERVAL);
            if due && tr.memory.len() >= tr.cfg.min_transitions {
                last_epoch = Instant::now();
                let (model, mean_reward) = tr.epoch()?;
                let generation = maps.push(&model.qnet)?;
                tr.last_push = Some(Instant::now());
                report.epochs = tr.epochs;
                report.last_generation = generation;
                report.last_mean_reward = mean_reward;
                info!(
                    "policy epoch {}: {} transitions seen, mean reward {:.3}, weights generation {}",
                    tr.epochs, tr.seen, mean_reward, generation
                );
                if let Some(path) = &tr.cfg.save {
                    if let Err(e) = model.save(path) {
                        warn!("cannot save the model: {e:#}");
                    }
                }
            }
        }
        if stopping {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    if trainer.is_some() {
        // The scheduler may run on without this trainer: explore as before it.
        let _ = maps.set_explore_pct(explored);
    }
    if let Some(w) = recorder.as_mut() {
        w.flush()?;
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kernel_transition_reads_field_by_field() {
        // SAFETY: plain integers; all-zero is valid.
        let mut k: custos_transition = unsafe { std::mem::zeroed() };
        k.pid = 4242;
        k.action = 3;
        k.inferred = 1;
        for i in 0..NR_FEATURES {
            k.state[i] = i as u8;
            k.next_state[i] = 100 + i as u8;
        }
        k.events = 1000;
        k.drops = 250;
        k.idle_before = 2;
        k.idle_after = 7;
        k.at_ns = 1 << 50;
        let t = transition_from_kernel(as_bytes(&k)).unwrap();
        assert_eq!((t.pid, t.action, t.inferred), (4242, 3, 1));
        assert_eq!(t.state[10], 10);
        assert_eq!(t.next_state[0], 100);
        assert_eq!(
            (t.events, t.drops, t.idle_before, t.idle_after, t.at_ns),
            (1000, 250, 2, 7, 1 << 50)
        );
        assert_eq!(t.reward(), -0.25 + 2.0 / 10.0);
        assert!(transition_from_kernel(&as_bytes(&k)[..10]).is_none());
    }
}

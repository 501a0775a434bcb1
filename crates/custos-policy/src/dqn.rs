//! The DQN trainer (seed 000 §4.2, §5): learns the queue policy's
//! Q-function from transitions in a replay memory, on the CPU with candle.
//!
//! Two copies of one two-layer network (11 features / 128 → `hidden` ReLU
//! → one Q-value per queue): the online network, which the optimiser
//! trains, and the target network, which supplies the bootstrap target
//! y = r + γ · max_a' Q_target(s', a') and follows the online network by a
//! soft update after every gradient step. The online network's weights are
//! the `FloatNet` a model file stores and `quantize` turns into the kernel's
//! integer network.

use anyhow::{bail, Context, Result};
use candle_core::{DType, Device, Tensor, Var};
use candle_nn::{AdamW, Linear, Module, Optimizer, ParamsAdamW};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::features::{State, NR_FEATURES};
use crate::model::FloatNet;
use crate::net::{MAX_ACTIONS, MAX_HIDDEN};
use crate::quantize::{check_float, INPUT_SCALE};
use crate::replay::ReplayMemory;
use crate::transition::Transition;

/// Huber loss threshold: quadratic for TD errors below it, linear above, so
/// one surprising transition cannot produce a huge gradient.
const HUBER_DELTA: f64 = 1.0;

#[derive(Clone, Debug, PartialEq)]
pub struct DqnConfig {
    /// Hidden ReLU units (the kernel holds at most `net::MAX_HIDDEN`).
    pub hidden: usize,
    /// One action per queue: the primary queue and the budgeted ones.
    pub actions: usize,
    /// Discount factor γ.
    pub gamma: f64,
    /// Soft update rate τ: target = τ · online + (1 − τ) · target.
    pub tau: f64,
    /// Learning rate of the optimiser (Adam).
    pub lr: f64,
    /// Transitions per gradient step.
    pub batch: usize,
    /// Gradient steps per `train_epoch`.
    pub steps_per_epoch: usize,
    /// Seeds the initial weights, so a run is reproducible.
    pub seed: u64,
}

impl DqnConfig {
    /// The seed's defaults for a network with `actions` queues.
    pub fn for_actions(actions: usize) -> Self {
        DqnConfig {
            hidden: 64,
            actions,
            gamma: 0.9,
            tau: 0.005,
            lr: 1e-4,
            batch: 64,
            steps_per_epoch: 200,
            seed: 0,
        }
    }

    pub fn validate(&self) -> Result<()> {
        if self.hidden == 0 || self.hidden > MAX_HIDDEN {
            bail!("{} hidden units; 1 to {MAX_HIDDEN} supported", self.hidden);
        }
        if self.actions < 2 || self.actions > MAX_ACTIONS {
            bail!("{} actions; 2 to {MAX_ACTIONS} supported", self.actions);
        }
        if !(0.0..1.0).contains(&self.gamma) {
            bail!("discount factor γ = {} must lie in [0, 1)", self.gamma);
        }
        if !(self.tau > 0.0 && self.tau <= 1.0) {
            bail!("soft update rate τ = {} must lie in (0, 1]", self.tau);
        }
        if !(self.lr > 0.0 && self.lr.is_finite()) {
            bail!("learning rate {} must be positive", self.lr);
        }
        if self.batch == 0 {
            bail!("a batch needs at least one transition");
        }
        Ok(())
    }
}

/// What one epoch did, averaged over its gradient steps.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct EpochStats {
    pub steps: usize,
    /// Huber loss between Q_online(s, a) and the target y.
    pub mean_loss: f64,
    /// Mean reward of the sampled transitions.
    pub mean_reward_of_batches: f64,
    /// Mean over the batches' states of max_a Q_online(s, a), before the
    /// step: a divergence alarm (it should settle near r̄ / (1 − γ)).
    pub mean_max_q: f64,
}

/// One step's numbers, summed into `EpochStats`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct StepStats {
    pub loss: f64,
    pub mean_reward: f64,
    pub mean_max_q: f64,
}

/// One copy of the network: its variables and the layers reading them.
/// `Var::set` writes in place, so the layers always see current weights.
struct QLayers {
    vars: [Var; 4],
    l1: Linear,
    l2: Linear,
}

impl QLayers {
    fn from_float(f: &FloatNet, dev: &Device) -> Result<Self> {
        let w1 = Var::from_slice(&f.w1, (f.hidden, NR_FEATURES), dev)?;
        let b1 = Var::from_slice(&f.b1, f.hidden, dev)?;
        let w2 = Var::from_slice(&f.w2, (f.actions, f.hidden), dev)?;
        let b2 = Var::from_slice(&f.b2, f.actions, dev)?;
        let l1 = Linear::new(w1.as_tensor().clone(), Some(b1.as_tensor().clone()));
        let l2 = Linear::new(w2.as_tensor().clone(), Some(b2.as_tensor().clone()));
        Ok(QLayers {
            vars: [w1, b1, w2, b2],
            l1,
            l2,
        })
    }

    /// Q-values for a (batch, NR_FEATURES) tensor of scaled features.
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        Ok(self.l2.forward(&self.l1.forward(x)?.relu()?)?)
    }

    /// Row-major like `QNet`: `Linear` keeps weights as (out, in).
    fn to_float(&self) -> Result<FloatNet> {
        let v = |i: usize| -> Result<Vec<f32>> {
            Ok(self.vars[i].as_tensor().flatten_all()?.to_vec1::<f32>()?)
        };
        let (hidden, actions) = (self.vars[1].dims()[0], self.vars[3].dims()[0]);
        Ok(FloatNet {
            hidden,
            actions,
            w1: v(0)?,
            b1: v(1)?,
            w2: v(2)?,
            b2: v(3)?,
        })
    }
}

/// The trainer: online and target networks and the online network's
/// optimiser.
pub struct Dqn {
    cfg: DqnConfig,
    device: Device,
    online: QLayers,
    target: QLayers,
    optimizer: AdamW,
    steps: u64,
}

impl Dqn {
    /// A fresh network: weights and biases uniform in ±1/√fan_in (PyTorch's
    /// `nn.Linear` default), drawn from `cfg.seed` so runs are reproducible
    /// (candle's own initialisers use an unseedable CPU rng).
    pub fn new(cfg: DqnConfig) -> Result<Self> {
        cfg.validate()?;
        let mut rng = StdRng::seed_from_u64(cfg.seed);
        let mut uniform = |n: usize, fan_in: usize| -> Vec<f32> {
            let bound = 1.0 / (fan_in as f32).sqrt();
            (0..n).map(|_| rng.gen_range(-bound..bound)).collect()
        };
        let (h, a) = (cfg.hidden, cfg.actions);
        let float = FloatNet {
            hidden: h,
            actions: a,
            w1: uniform(h * NR_FEATURES, NR_FEATURES),
            b1: uniform(h, NR_FEATURES),
            w2: uniform(a * h, h),
            b2: uniform(a, h),
        };
        Self::from_float(&float, cfg)
    }

    /// Resumes from a stored float network (both networks start as it). The
    /// optimiser's moments are not stored and start afresh.
    pub fn from_float(float: &FloatNet, cfg: DqnConfig) -> Result<Self> {
        cfg.validate()?;
        check_float(float).context("cannot resume training")?;
        if (float.hidden, float.actions) != (cfg.hidden, cfg.actions) {
            bail!(
                "the stored network has {} hidden units and {} actions, the configuration asks for {} and {}",
                float.hidden,
                float.actions,
                cfg.hidden,
                cfg.actions
            );
        }
        let device = Device::Cpu;
        let online = QLayers::from_float(float, &device)?;
        let target = QLayers::from_float(float, &device)?;
        // Plain Adam: weight decay would pull every Q-value toward 0 and
        // bias the bootstrap targets.
        let params = ParamsAdamW {
            lr: cfg.lr,
            weight_decay: 0.0,
            ..ParamsAdamW::default()
        };
        let optimizer = AdamW::new(online.vars.to_vec(), params)?;
        Ok(Dqn {
            cfg,
            device,
            online,
            target,
            optimizer,
            steps: 0,
        })
    }

    pub fn config(&self) -> &DqnConfig {
        &self.cfg
    }

    /// Gradient steps taken since `new` / `from_float`.
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// The online network's weights (what a model file stores).
    pub fn to_float(&self) -> Result<FloatNet> {
        self.online.to_float()
    }

    /// The target network's weights, for diagnostics and tests.
    pub fn target_float(&self) -> Result<FloatNet> {
        self.target.to_float()
    }

    /// The online network's Q-values for one state.
    pub fn q_float(&self, state: &State) -> Result<Vec<f32>> {
        let x = self.states_tensor([state].into_iter())?;
        Ok(self.online.forward(&x)?.squeeze(0)?.to_vec1::<f32>()?)
    }

    fn states_tensor<'a>(
        &self,
        states: impl ExactSizeIterator<Item = &'a State>,
    ) -> Result<Tensor> {
        let n = states.len();
        let data: Vec<f32> = states
            .flat_map(|s| s.iter().map(|&x| x as f32 / INPUT_SCALE))
            .collect();
        Ok(Tensor::from_vec(data, (n, NR_FEATURES), &self.device)?)
    }

    /// One gradient step on `batch`, then the soft update. A transition
    /// naming a queue the network does not have is an error, not a guess.
    pub fn train_step(&mut self, batch: &[&Transition]) -> Result<StepStats> {
        if batch.is_empty() {
            bail!("a training step needs at least one transition");
        }
        if let Some(t) = batch.iter().find(|t| t.action as usize >= self.cfg.actions) {
            bail!(
                "transition of pid {} chose queue {}, the network has {} actions",
                t.pid,
                t.action,
                self.cfg.actions
            );
        }
        let n = batch.len();
        let s = self.states_tensor(batch.iter().map(|t| &t.state))?;
        let s_next = self.states_tensor(batch.iter().map(|t| &t.next_state))?;
        let actions = Tensor::from_vec(
            batch.iter().map(|t| t.action as u32).collect::<Vec<_>>(),
            (n, 1),
            &self.device,
        )?;
        let rewards: Vec<f32> = batch.iter().map(|t| t.reward()).collect();
        let mean_reward = rewards.iter().map(|&r| r as f64).sum::<f64>() / n as f64;
        let rewards = Tensor::from_vec(rewards, n, &self.device)?;

        // y = r + γ · max_a' Q_target(s', a'); no gradient flows into it.
        let q_next = self.target.forward(&s_next)?.detach().max(1)?;
        let y = (rewards + q_next.affine(self.cfg.gamma, 0.0)?)?.detach();

        let q = self.online.forward(&s)?;
        let mean_max_q = q
            .detach()
            .max(1)?
            .mean_all()?
            .to_dtype(DType::F64)?
            .to_scalar::<f64>()?;
        let q_sa = q.gather(&actions, 1)?.squeeze(1)?;
        let loss = candle_nn::loss::huber(&q_sa, &y, HUBER_DELTA)?;
        self.optimizer.backward_step(&loss)?;
        self.soft_update()?;
        self.steps += 1;
        let loss = loss.to_dtype(DType::F64)?.to_scalar::<f64>()?;
        if !loss.is_finite() {
            bail!(
                "training diverged: loss {loss} after {} steps (lower the learning rate)",
                self.steps
            );
        }
        Ok(StepStats {
            loss,
            mean_reward,
            mean_max_q,
        })
    }

    /// target = τ · online + (1 − τ) · target, for every weight. Slowly
    /// moving targets keep the bootstrap from chasing its own updates.
    fn soft_update(&self) -> Result<()> {
        let tau = self.cfg.tau;
        for (t, o) in self.target.vars.iter().zip(&self.online.vars) {
            let mixed = (o.as_tensor().detach().affine(tau, 0.0)?
                + t.as_tensor().detach().affine(1.0 - tau, 0.0)?)?;
            t.set(&mixed)?;
        }
        Ok(())
    }

    /// `steps_per_epoch` steps, each on a batch sampled uniformly from the
    /// replay memory. An empty memory is zero steps, not an error.
    pub fn train_epoch<R: Rng + ?Sized>(
        &mut self,
        memory: &ReplayMemory,
        rng: &mut R,
    ) -> Result<EpochStats> {
        let mut stats = EpochStats::default();
        if memory.is_empty() {
            return Ok(stats);
        }
        for _ in 0..self.cfg.steps_per_epoch {
            let batch = memory.sample(self.cfg.batch, rng);
            let s = self.train_step(&batch)?;
            stats.steps += 1;
            stats.mean_loss += s.loss;
            stats.mean_reward_of_batches += s.mean_reward;
            stats.mean_max_q += s.mean_max_q;
        }
        if stats.steps > 0 {
            let n = stats.steps as f64;
            stats.mean_loss /= n;
            stats.mean_reward_of_batches /= n;
            stats.mean_max_q /= n;
        }
        Ok(stats)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::features::{FEAT_AVAILABILITY, FEAT_NR_EVENT};
    use crate::quantize::{agreement, float_action, float_q_values, quantize};
    use std::time::Instant;

    /// The super producer's situation: the CPU is busy (little
    /// availability) and the task emits a flood of events.
    fn is_flood(x: &State) -> bool {
        x[FEAT_AVAILABILITY] < 32 && x[FEAT_NR_EVENT] > 40
    }

    fn random_state(rng: &mut StdRng) -> State {
        let mut x = [0u8; NR_FEATURES];
        for f in x.iter_mut() {
            *f = rng.gen_range(0..=128);
        }
        x
    }

    fn flood_state(rng: &mut StdRng) -> State {
        let mut x = random_state(rng);
        x[FEAT_AVAILABILITY] = rng.gen_range(0..32);
        x[FEAT_NR_EVENT] = rng.gen_range(41..=128);
        x
    }

    fn calm_state(rng: &mut StdRng) -> State {
        loop {
            let x = random_state(rng);
            if !is_flood(&x) {
                return x;
            }
        }
    }

    /// A quarter each: floods, the two near misses (busy CPU but few
    /// events; many events but an available CPU) and anything. Under
    /// uniform features the first three are rare, and without the near
    /// misses the network cannot tell which feature the flood hinges on.
    fn training_state(rng: &mut StdRng) -> State {
        let mut x = random_state(rng);
        match rng.gen_range(0..4) {
            0 => x = flood_state(rng),
            1 => {
                x[FEAT_AVAILABILITY] = rng.gen_range(0..32);
                x[FEAT_NR_EVENT] = rng.gen_range(0..=40);
            }
            2 => {
                x[FEAT_AVAILABILITY] = rng.gen_range(32..=128);
                x[FEAT_NR_EVENT] = rng.gen_range(41..=128);
            }
            _ => {}
        }
        x
    }

    /// What the scheduler would record for `action` (0 = primary queue,
    /// 1..=3 budgeted, 3 the most budgeted) taken at `x`.
    fn outcome(x: State, action: u8, next_state: State) -> Transition {
        let (events, drops, idle_before, idle_after) = match (is_flood(&x), action) {
            // The primary queue cannot keep up: 80 % lost (r = −0.8).
            (true, 0) => (100, 80, 0, 0),
            // Budgeting stops the drops, the more the better; the CPU idles (r_p = 0).
            (true, k) => (100, 80 * (3 - k as u32) / 3, 0, 4),
            // Calm: the primary queue keeps the CPU busy (r_p = 2/3) ...
            (false, 0) => (10, 0, 2, 0),
            // ... budgeting only wastes it (r_p = 0).
            (false, _) => (10, 0, 0, 4),
        };
        Transition {
            action,
            state: x,
            next_state,
            events,
            drops,
            idle_before,
            idle_after,
            ..Default::default()
        }
    }

    fn small_cfg() -> DqnConfig {
        DqnConfig {
            hidden: 16,
            batch: 8,
            seed: 3,
            ..DqnConfig::for_actions(4)
        }
    }

    fn memory_of(n: usize, seed: u64) -> (ReplayMemory, StdRng) {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut m = ReplayMemory::new(n).unwrap();
        for _ in 0..n {
            let x = training_state(&mut rng);
            let next = training_state(&mut rng);
            let a = rng.gen_range(0..4u8);
            m.push(outcome(x, a, next));
        }
        (m, rng)
    }

    #[test]
    fn the_soft_update_moves_the_target_by_tau() {
        let mut dqn = Dqn::new(small_cfg()).unwrap();
        let (m, mut rng) = memory_of(64, 1);
        assert_eq!(
            dqn.target_float().unwrap(),
            dqn.to_float().unwrap(),
            "the target starts as the online network"
        );
        let before = dqn.target_float().unwrap();
        dqn.train_step(&m.sample(8, &mut rng)).unwrap();
        let online = dqn.to_float().unwrap();
        let after = dqn.target_float().unwrap();
        let tau = dqn.config().tau as f32;

        let moved = |b: f32, o: f32, a: f32| {
            assert!(
                (a - (tau * o + (1.0 - tau) * b)).abs() <= 1e-6,
                "target {a}, expected τ·{o} + (1−τ)·{b}"
            );
        };
        // One weight, spelled out: the first the gradient step changed (a
        // unit dead on the whole batch gets no gradient); the target moved
        // τ of the way toward it.
        let i = (0..online.w1.len())
            .find(|&i| online.w1[i] != before.w1[i])
            .expect("the step changed some w1");
        moved(before.w1[i], online.w1[i], after.w1[i]);
        let gap = online.w1[i] - before.w1[i];
        assert!(
            ((after.w1[i] - before.w1[i]) / gap - tau).abs() < 1e-2,
            "moved {} of the gap",
            (after.w1[i] - before.w1[i]) / gap
        );
        // And every other one.
        for (b, (o, a)) in [
            (&before.w1, (&online.w1, &after.w1)),
            (&before.b1, (&online.b1, &after.b1)),
            (&before.w2, (&online.w2, &after.w2)),
            (&before.b2, (&online.b2, &after.b2)),
        ] {
            for i in 0..b.len() {
                moved(b[i], o[i], a[i]);
            }
        }
        assert_eq!(dqn.steps(), 1);
    }

    #[test]
    fn a_float_network_round_trips_and_matches_the_plain_forward_pass() {
        let mut dqn = Dqn::new(small_cfg()).unwrap();
        let (m, mut rng) = memory_of(256, 2);
        dqn.train_epoch(&m, &mut rng).unwrap();
        let float = dqn.to_float().unwrap();
        let resumed = Dqn::from_float(&float, small_cfg()).unwrap();
        assert_eq!(resumed.to_float().unwrap(), float);
        for _ in 0..50 {
            let x = random_state(&mut rng);
            let q = dqn.q_float(&x).unwrap();
            assert_eq!(resumed.q_float(&x).unwrap(), q);
            // The layout of FloatNet is the one the plain forward pass (and QNet) reads.
            for (a, b) in q.iter().zip(float_q_values(&float, &x)) {
                assert!((a - b).abs() <= 1e-5 * (1.0 + b.abs()), "{q:?}");
            }
        }
        // A different seed is a different network; the same seed the same one.
        assert_eq!(
            Dqn::new(small_cfg()).unwrap().to_float().unwrap().w1,
            Dqn::new(small_cfg()).unwrap().to_float().unwrap().w1
        );
        assert_ne!(
            Dqn::new(DqnConfig {
                seed: 4,
                ..small_cfg()
            })
            .unwrap()
            .to_float()
            .unwrap()
            .w1,
            Dqn::new(small_cfg()).unwrap().to_float().unwrap().w1
        );
    }

    #[test]
    fn bad_configurations_and_data_are_errors() {
        let bad = |cfg: DqnConfig| {
            Dqn::new(cfg)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default()
        };
        assert!(bad(DqnConfig {
            hidden: 0,
            ..small_cfg()
        })
        .contains("hidden"));
        assert!(bad(DqnConfig::for_actions(1)).contains("1 actions"));
        assert!(bad(DqnConfig::for_actions(9)).contains("9 actions"));
        assert!(bad(DqnConfig {
            gamma: 1.0,
            ..small_cfg()
        })
        .contains("γ"));
        assert!(bad(DqnConfig {
            tau: 0.0,
            ..small_cfg()
        })
        .contains("τ"));
        assert!(bad(DqnConfig {
            lr: f64::NAN,
            ..small_cfg()
        })
        .contains("learning rate"));
        assert!(bad(DqnConfig {
            batch: 0,
            ..small_cfg()
        })
        .contains("batch"));

        let float = Dqn::new(small_cfg()).unwrap().to_float().unwrap();
        let err = Dqn::from_float(&float, DqnConfig::for_actions(4))
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("16 hidden units"), "{err}");
        let mut broken = float.clone();
        broken.b2.push(0.0);
        assert!(Dqn::from_float(&broken, small_cfg()).is_err());

        let mut dqn = Dqn::new(small_cfg()).unwrap();
        let t = Transition {
            action: 4,
            pid: 9,
            ..Default::default()
        };
        assert!(dqn
            .train_step(&[&t])
            .unwrap_err()
            .to_string()
            .contains("chose queue 4"));
        assert!(dqn.train_step(&[]).is_err());
        let empty = ReplayMemory::new(10).unwrap();
        let stats = dqn
            .train_epoch(&empty, &mut StdRng::seed_from_u64(0))
            .unwrap();
        assert_eq!(stats, EpochStats::default());
        assert_eq!(dqn.steps(), 0);
    }

    #[test]
    fn dqn_learns_to_budget_the_super_producer_and_survives_quantisation() {
        let start = Instant::now();
        let (memory, mut rng) = memory_of(8000, 11);
        let cfg = DqnConfig {
            lr: 1e-3,
            seed: 5,
            ..DqnConfig::for_actions(4)
        };
        let mut dqn = Dqn::new(cfg).unwrap();
        let mut last = EpochStats::default();
        for epoch in 0..100 {
            last = dqn.train_epoch(&memory, &mut rng).unwrap();
            if epoch % 20 == 19 {
                println!("epoch {epoch}: {last:?}");
            }
        }
        assert_eq!(last.steps, 200);
        assert!(last.mean_loss.is_finite() && last.mean_max_q.is_finite());
        println!("trained {} steps in {:.2?}", dqn.steps(), start.elapsed());

        // Held out: fresh states, floods and calm ones from the whole
        // feature space (near misses included).
        let floods: Vec<State> = (0..1000).map(|_| flood_state(&mut rng)).collect();
        let calms: Vec<State> = (0..1000).map(|_| calm_state(&mut rng)).collect();
        let held_out: Vec<State> = floods.iter().chain(&calms).copied().collect();
        let share = |states: &[State], ok: &dyn Fn(&State) -> bool| {
            states.iter().filter(|x| ok(x)).count() as f64 / states.len() as f64
        };
        // (agreement with the float network, budgeted on floods, primary when calm)
        let solves = |act: &dyn Fn(&State) -> usize| {
            (
                share(&floods, &|x| act(x) != 0),
                share(&calms, &|x| act(x) == 0),
            )
        };

        let float = dqn.to_float().unwrap();
        let (budgets, primary) = solves(&|x| float_action(&float, x));
        println!(
            "float: budgeted on {:.1} % of floods, primary on {:.1} % of calm states",
            100.0 * budgets,
            100.0 * primary
        );
        assert!(
            budgets >= 0.9,
            "float network budgets only {budgets} of floods"
        );
        assert!(
            primary >= 0.9,
            "float network keeps only {primary} of calm states on the primary queue"
        );
        // q_float (candle) and the plain forward pass pick the same actions.
        for x in held_out.iter().step_by(10) {
            assert_eq!(
                crate::quantize::argmax_f32(&dqn.q_float(x).unwrap()),
                float_action(&float, x)
            );
        }

        let calibration: Vec<State> = memory.iter().map(|t| t.state).collect();
        let mut results = Vec::new();
        for bits in [8, 4] {
            let plain = crate::quantize::quantize_plain(&float, bits, &calibration).unwrap();
            let q = quantize(&float, bits, &calibration).unwrap();
            for (name, net) in [("plain scheme", &plain), ("quantize", &q)] {
                let (b, p) = solves(&|x| net.action(x));
                let a = agreement(&float, net, &held_out);
                println!(
                    "INT{bits} {name:12}: agreement {:.1} %, budgeted {:.1} %, primary {:.1} % (requant {})",
                    100.0 * a,
                    100.0 * b,
                    100.0 * p,
                    net.requant
                );
                results.push((bits, name, a, b, p));
            }
        }
        println!("total {:.2?}", start.elapsed());
        for (bits, name, a, b, p) in results {
            if name != "quantize" {
                continue;
            }
            if bits == 8 {
                assert!(a >= 0.95, "INT8 agreement {a}");
                assert!(
                    b >= 0.9 && p >= 0.9,
                    "INT8 network: budgeted {b}, primary {p}"
                );
            } else {
                // 7 levels per weight: a coarser copy, but it must still
                // mostly agree (the plain scheme alone often does not).
                assert!(a >= 0.8, "INT4 agreement {a}");
            }
        }
    }
}

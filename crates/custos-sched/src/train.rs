//! `custos train`: trains the learned queue policy, offline from recorded
//! transitions or online beside a running `custos sched --policy learned`
//! (through the maps it pins under PIN_DIR/sched), and writes a model file.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;
use custos_policy::dqn::{Dqn, DqnConfig};
use custos_policy::features::{
    mask_state, norm_log2, norm_percent, State, FEAT_AVAILABILITY, FEAT_NR_EVENT, NR_FEATURES,
};
use custos_policy::model::{Model, Provenance};
use custos_policy::quantize::{agreement, quantize};
use custos_policy::replay::ReplayMemory;
use custos_policy::transition::{read_recording, Transition};
use rand::SeedableRng;

use crate::cli::{DEFAULT_AVAILABILITY_LOW_PCT, DEFAULT_EVENT_RATE_HIGH};
use crate::learning::{self, LearnerConfig, PolicyMaps, TrainConfig};

/// Train the learned queue policy (seed 000's DQN) and write a model file.
///
/// Offline: `custos train --recording run.tr --out model.json`, from
/// transitions a scheduler recorded (`custos sched --record-transitions`).
/// Online: `custos train --online --out model.json` beside a running
/// `custos sched --policy learned`: the new weights go into the kernel after
/// every epoch (the scheduler's stats show their generation).
#[derive(Args, Debug, Clone)]
pub struct TrainArgs {
    /// A recording of transitions; repeatable.
    #[arg(long = "recording", value_name = "FILE")]
    pub recordings: Vec<PathBuf>,

    /// Train beside a running scheduler instead, through its pinned maps.
    #[arg(long, conflicts_with = "recordings")]
    pub online: bool,

    /// Write the trained model here.
    #[arg(long, short, value_name = "FILE", required_unless_present_any = ["inference_cost", "inspect"])]
    pub out: Option<PathBuf>,

    /// Measure instead: the kernel's cost of one forward pass (JIT, through
    /// BPF_PROG_TEST_RUN) of the --from model, or of a fresh --hidden network;
    /// prints one JSON line.
    #[arg(long)]
    pub inference_cost: bool,

    /// Inspect instead: which queue the --from model picks for the recorded
    /// states (--recording), by pressure (availability at or below 25 %) and
    /// by producer (at least 64 events per window, the static policy's
    /// defaults); prints one JSON line.
    #[arg(long, requires = "from")]
    pub inspect: bool,

    /// Start from this model's weights instead of a fresh network.
    #[arg(long, value_name = "FILE")]
    pub from: Option<PathBuf>,

    /// Budgeted queues of the scheduler the model is for (offline; online
    /// reads it from the running scheduler).
    #[arg(long, default_value_t = 3)]
    pub nr_queues: u32,

    /// Offline: the input features the model may read: all, task,
    /// provenance (seed 000's F1/F2 groups) or a list of names; the others
    /// are zero in training and masked in the model (an ablation).
    #[arg(long, default_value = "all", value_parser = parse_features)]
    pub features: FeatureSet,

    /// Units of the hidden layer (the seed: 256; 64 keeps inference under 1 us).
    #[arg(long, default_value_t = 64)]
    pub hidden: usize,

    /// Weight precision in the kernel: 8 (INT8) or 4 (INT4, the seed's).
    #[arg(long, default_value_t = 8)]
    pub weight_bits: u32,

    /// Offline: passes over the recorded transitions.
    #[arg(long, default_value_t = 30)]
    pub epochs: u64,

    /// Gradient steps per epoch.
    #[arg(long, default_value_t = 200)]
    pub steps_per_epoch: usize,

    /// Transitions per gradient step.
    #[arg(long, default_value_t = 64)]
    pub batch: usize,

    /// Discount factor γ.
    #[arg(long, default_value_t = 0.9)]
    pub gamma: f64,

    /// Soft update coefficient τ of the target network.
    #[arg(long, default_value_t = 0.005)]
    pub tau: f64,

    /// Learning rate.
    #[arg(long, default_value_t = 1e-4)]
    pub lr: f64,

    /// Seed of the network's initialisation and of batch sampling.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,

    /// Online: seconds between epochs (and weight pushes).
    #[arg(long, default_value_t = 2.0)]
    pub epoch_secs: f64,

    /// Online: percentage of decisions that explore a random queue.
    #[arg(long, default_value_t = 5)]
    pub explore_pct: u32,

    /// Online: stop after this many seconds (default: Ctrl-C).
    #[arg(long)]
    pub duration: Option<f64>,

    /// Online: directory of the pinned maps (the scheduler's --pin-dir).
    #[arg(long, default_value = "/sys/fs/bpf/custos")]
    pub pin_dir: PathBuf,
}

/// Indices of the features a model may read (`--features`).
#[derive(Clone, Debug)]
pub struct FeatureSet(pub Vec<usize>);

fn parse_features(spec: &str) -> std::result::Result<FeatureSet, String> {
    custos_policy::features::parse_feature_set(spec).map(FeatureSet)
}

fn dqn_config(args: &TrainArgs, actions: usize) -> DqnConfig {
    DqnConfig {
        hidden: args.hidden,
        gamma: args.gamma,
        tau: args.tau,
        lr: args.lr,
        batch: args.batch,
        steps_per_epoch: args.steps_per_epoch,
        seed: args.seed,
        ..DqnConfig::for_actions(actions)
    }
}

fn start_model(args: &TrainArgs, nr_queues: u32) -> Result<Option<Model>> {
    let Some(path) = &args.from else {
        return Ok(None);
    };
    let model = Model::load(path)?;
    model
        .fits(nr_queues)
        .with_context(|| format!("--from {}", path.display()))?;
    if model.float.is_none() {
        bail!(
            "--from {}: the model has no float weights to continue training from",
            path.display()
        );
    }
    Ok(Some(model))
}

/// Entry point of `custos train`; returns the process exit code.
pub fn run(args: TrainArgs) -> Result<i32> {
    if !matches!(args.weight_bits, 4 | 8) {
        bail!("--weight-bits must be 8 or 4 (got {})", args.weight_bits);
    }
    // Where the model goes, checked before training (not after it).
    if let Some(out) = &args.out {
        let inputs: Vec<&std::path::Path> = args
            .recordings
            .iter()
            .chain(&args.from)
            .map(PathBuf::as_path)
            .collect();
        custos_output::check(
            &[custos_output::Output::new(
                "--out",
                out,
                custos_output::Existing::Replace,
            )],
            &inputs,
        )?;
    }
    if args.inference_cost {
        return run_inference_cost(args);
    }
    if args.inspect {
        return run_inspect(args);
    }
    if args.online {
        if args.features.0.len() != NR_FEATURES {
            bail!("--features is for offline training; online training keeps the --from model's features");
        }
        return run_online(args);
    }
    if args.recordings.is_empty() {
        bail!("give --recording FILE (from custos sched --record-transitions) or --online");
    }
    run_offline(args)
}

fn read_recordings(paths: &[PathBuf]) -> Result<Vec<Transition>> {
    let mut all = Vec::new();
    for path in paths {
        let file =
            std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
        let ts = read_recording(std::io::BufReader::new(file), &path.display().to_string())?;
        eprintln!(
            "custos train: {} transitions from {}",
            ts.len(),
            path.display()
        );
        all.extend(ts);
    }
    Ok(all)
}

fn run_inspect(args: TrainArgs) -> Result<i32> {
    let path = args.from.as_ref().context("--inspect needs --from MODEL")?;
    let model = Model::load(path)?;
    if args.recordings.is_empty() {
        bail!("--inspect needs --recording FILE: the states to ask the model about");
    }
    let pressure_at = norm_percent(DEFAULT_AVAILABILITY_LOW_PCT);
    let producer_at = norm_log2(DEFAULT_EVENT_RATE_HIGH);
    let mut counts: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for t in read_recordings(&args.recordings)? {
        let class = format!(
            "{}-{}",
            if t.state[FEAT_AVAILABILITY] <= pressure_at {
                "pressure"
            } else {
                "no_pressure"
            },
            if t.state[FEAT_NR_EVENT] >= producer_at {
                "producer"
            } else {
                "quiet"
            }
        );
        counts
            .entry(class)
            .or_insert_with(|| vec![0; model.qnet.actions])[model.qnet.action(&t.state)] += 1;
    }
    println!(
        "{}",
        serde_json::json!({ "model": path, "actions_by_class": counts })
    );
    Ok(0)
}

fn run_inference_cost(args: TrainArgs) -> Result<i32> {
    let qnet = match &args.from {
        Some(path) => Model::load(path)?.qnet,
        None => {
            let cfg = dqn_config(&args, args.nr_queues as usize + 1);
            quantize(&Dqn::new(cfg)?.to_float()?, args.weight_bits, &[])?
        }
    };
    let (median, p90) = crate::policy::inference_cost(&qnet, 200, 2000)?;
    println!(
        "{}",
        serde_json::json!({
            "hidden": qnet.hidden,
            "actions": qnet.actions,
            "weight_max": qnet.weight_max,
            "inference_ns_median": median,
            "inference_ns_p90": p90,
            "kernel": std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim(),
        })
    );
    Ok(0)
}

fn run_offline(args: TrainArgs) -> Result<i32> {
    let out = args.out.clone().context("--out FILE is needed")?;
    let mut all = read_recordings(&args.recordings)?;
    let actions = args.nr_queues as usize + 1;
    if let Some(t) = all.iter().find(|t| t.action as usize >= actions) {
        bail!(
            "a transition chose queue {} but --nr-queues {} gives queues 0..={}: recorded with other queues?",
            t.action,
            args.nr_queues,
            args.nr_queues
        );
    }
    if all.len() < args.batch {
        bail!(
            "{} transitions are too few to train on (a batch is {})",
            all.len(),
            args.batch
        );
    }
    let start = start_model(&args, args.nr_queues)?;
    let cfg = dqn_config(&args, actions);
    let mut dqn = learning::start_dqn(start.as_ref(), cfg)?;
    let mut memory = ReplayMemory::new(all.len())?;
    for t in &mut all {
        mask_state(&mut t.state, &args.features.0);
        mask_state(&mut t.next_state, &args.features.0);
    }
    let states: Vec<State> = all.iter().map(|t| t.state).collect();
    let seen = all.len() as u64;
    for t in all {
        memory.push(t);
    }
    let mut rng = rand::rngs::StdRng::seed_from_u64(args.seed);
    let began = Instant::now();
    for epoch in 1..=args.epochs {
        let st = dqn.train_epoch(&memory, &mut rng)?;
        eprintln!(
            "custos train: epoch {epoch}/{}: loss {:.5}, mean reward {:.3}, mean max Q {:.3} ({:.0} s)",
            args.epochs,
            st.mean_loss,
            st.mean_reward_of_batches,
            st.mean_max_q,
            began.elapsed().as_secs_f64()
        );
    }
    let model = learning::quantised_model(
        &dqn,
        args.nr_queues,
        args.weight_bits,
        &args.features.0,
        &states,
        Provenance {
            transitions: seen + start.as_ref().map_or(0, |m| m.trained.transitions),
            epochs: args.epochs + start.as_ref().map_or(0, |m| m.trained.epochs),
            note: format!(
                "offline from {}",
                args.recordings
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        },
    )?;
    let float = model
        .float
        .as_ref()
        .expect("quantised_model keeps the float weights");
    eprintln!(
        "custos train: {}-bit network agrees with the float one on {:.2} % of the {} recorded states",
        args.weight_bits,
        agreement(float, &model.qnet, &states) * 100.0,
        states.len()
    );
    model.save(&out)?;
    eprintln!("custos train: wrote {}", out.display());
    Ok(0)
}

fn run_online(args: TrainArgs) -> Result<i32> {
    let out = args.out.clone().context("--out FILE is needed")?;
    let dir = learning::policy_pin_dir(&args.pin_dir);
    let maps = PolicyMaps::from_pins(&dir)?;
    let actions = maps.nr_actions()?;
    if actions < 2 {
        bail!(
            "the scheduler pinned in {} has not recorded its queues",
            dir.display()
        );
    }
    let nr_queues = actions - 1;
    let start = start_model(&args, nr_queues)?;
    if !(args.epoch_secs >= 0.1 && args.epoch_secs.is_finite()) {
        bail!(
            "--epoch-secs must be at least 0.1 (got {})",
            args.epoch_secs
        );
    }
    let shutdown = Arc::new(AtomicBool::new(false));
    {
        let shutdown = shutdown.clone();
        ctrlc::set_handler(move || shutdown.store(true, Ordering::Relaxed))
            .context("cannot install the Ctrl-C handler")?;
    }
    if let Some(secs) = args.duration {
        let shutdown = shutdown.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs_f64(secs));
            shutdown.store(true, Ordering::Relaxed);
        });
    }
    let cfg = LearnerConfig {
        record: None,
        train: Some(TrainConfig {
            dqn: dqn_config(&args, actions as usize),
            nr_queues,
            weight_bits: args.weight_bits,
            start,
            epoch_every: Duration::from_secs_f64(args.epoch_secs),
            min_transitions: args.batch * 8,
            replay_capacity: 200_000,
            save: Some(out.clone()),
            explore_pct: args.explore_pct,
        }),
    };
    // Each epoch says so (run_learner logs it): long work shows progress.
    crate::cli::init_logging(false);
    eprintln!(
        "custos train: training online beside the scheduler pinned in {}",
        dir.display()
    );
    let report = learning::run_learner(&maps, cfg, shutdown)?;
    eprintln!(
        "custos train: {} transitions, {} epochs, weights generation {}, model in {}",
        report.transitions,
        report.epochs,
        report.last_generation,
        out.display()
    );
    if report.epochs == 0 {
        bail!("no epoch ran: too few transitions came (is the scheduler emitting them? it needs --policy learned with --emit-transitions)");
    }
    Ok(0)
}

//! The scheduler's user-space loop: open the skeleton, write the tunables,
//! load, attach, then keep consumers and external pressure fresh and serve
//! statistics until Ctrl-C or a scheduler exit, whose reason is reported.

use std::collections::BTreeSet;
use std::mem::MaybeUninit;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use crossbeam::channel::RecvTimeoutError;
use libbpf_rs::{MapCore, MapFlags, OpenObject};
use log::{info, warn};
use scx_stats::prelude::*;
use scx_utils::{scx_ops_attach, scx_ops_load, scx_ops_open, uei_exited, uei_report, UserExitInfo};

use crate::bpf_intf;
use crate::bpf_skel::*;
use crate::cli::{parse_forcing, PlacementKind, PolicyKind, SchedArgs};
use crate::learning::{self, LearnerConfig, LearnerReport, PolicyMaps, TrainConfig};
use crate::placement::{
    choose_placement, possible_cpus, AgentThread, PlacementChoice, PressureGauge,
};
use crate::pressure;
use crate::stats::{Metrics, QueueMetrics};
use crate::waiting_time;
use custos_policy::dqn::DqnConfig;
use custos_policy::features::{norm_log2, norm_percent};
use custos_policy::model::Model;

const SCHED_EXT_STATE: &str = "/sys/kernel/sched_ext/state";
/// The attached scheduler's name: its ops' `.name` and, from scx_utils, its
/// version (`custos_0.1.0_...`).
const SCHED_EXT_OPS: &str = "/sys/kernel/sched_ext/root/ops";
/// The ops' `.name` in src/bpf/main.bpf.c.
const OPS_NAME: &str = "custos";

/// `/sys/kernel/sched_ext/state` ("enabled", "disabled", ...), None without sched_ext.
pub fn sched_ext_state() -> Option<String> {
    std::fs::read_to_string(SCHED_EXT_STATE)
        .ok()
        .map(|s| s.trim().to_string())
}

/// What sched_ext runs on this kernel (`custos status`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attached {
    /// The kernel has no sched_ext (no /sys/kernel/sched_ext/state).
    NoSchedExt,
    /// sched_ext is there, no BPF scheduler is attached (`state` says so).
    Nothing { state: String },
    /// Another sched_ext scheduler, by its ops' name.
    Other { state: String, ops: String },
    /// `custos sched`, with the version its ops' name carries.
    Custos {
        state: String,
        ops: String,
        version: String,
    },
}

impl Attached {
    /// What sysfs says now.
    pub fn now() -> Self {
        let ops = std::fs::read_to_string(SCHED_EXT_OPS).ok();
        Self::from_sysfs(sched_ext_state(), ops.as_deref())
    }

    /// From the contents of /sys/kernel/sched_ext/state and root/ops.
    pub fn from_sysfs(state: Option<String>, ops: Option<&str>) -> Self {
        let Some(state) = state else {
            return Attached::NoSchedExt;
        };
        let ops = ops.map(str::trim).unwrap_or_default();
        // root/ops keeps the last scheduler's name after it detached.
        if ops.is_empty() || state == "disabled" {
            return Attached::Nothing { state };
        }
        let ours = ops == OPS_NAME || ops.starts_with(&format!("{OPS_NAME}_"));
        if !ours {
            return Attached::Other {
                state,
                ops: ops.to_string(),
            };
        }
        // scx_utils appends `_<version>[_<git>][_<build tag>]` to the name.
        let version = ops[OPS_NAME.len()..]
            .trim_start_matches('_')
            .split('_')
            .next()
            .unwrap_or_default()
            .to_string();
        Attached::Custos {
            state,
            ops: ops.to_string(),
            version,
        }
    }
}

/// Fails clearly on kernels that cannot run a sched_ext scheduler.
pub fn check_kernel() -> Result<()> {
    if sched_ext_state().is_none() {
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        bail!(
            "this kernel ({}) has no sched_ext (CONFIG_SCHED_CLASS_EXT is off, {} is missing); \
             run the scheduler in the VM instead: custos vm run -- custos sched",
            release.trim(),
            SCHED_EXT_STATE
        );
    }
    if let Ok(ops) = std::fs::read_to_string(SCHED_EXT_OPS) {
        if sched_ext_state().as_deref() == Some("enabled") {
            bail!(
                "another sched_ext scheduler ({}) is attached; stop it first",
                ops.trim()
            );
        }
    }
    Ok(())
}

/// Everything the BPF side needs, validated from the command line.
#[derive(Debug, Clone)]
pub struct Config {
    pub slice_ns: u64,
    pub starvation_guard_ns: u64,
    pub waiting_time_ns: Vec<u64>,
    pub budget_queue: u32,
    pub event_rate_high: u8,
    pub producer_share_steps: u8,
    pub availability_low: u8,
    pub availability_high: u8,
    pub forced_comm: Vec<(String, u32)>,
    pub forced_pid: Vec<(u32, u32)>,
    pub policy: PolicyChoice,
    pub delta_shift: u32,
    /// The kernel emits transitions (someone records or trains).
    pub emit_transitions: bool,
    pub transitions_ring_bytes: u32,
    pub explore_pct: u32,
    /// Who places waking tasks (independent of the queue policy).
    pub placement: PlacementChoice,
    /// The agent's limits: its share of one CPU, and the stale limit it
    /// sheds by, which is also the kernel's (placement_stale_ns).
    pub placement_limits: crate::placement::AgentLimits,
}

/// The policy a run uses, once --policy and --model were looked at.
#[derive(Debug, Clone)]
pub struct PolicyChoice {
    pub kind: PolicyKind,
    pub model: Option<Model>,
    /// For the log and the stats: which policy, from where, or why not.
    pub description: String,
}

/// --policy learned with a model that cannot be used: the shipped model
/// falls back to static and says why; a model the user named (--model) is
/// an error, as is any for training, which needs a usable start.
fn choose_policy(args: &SchedArgs, nr_queues: u32) -> Result<PolicyChoice> {
    if args.policy != PolicyKind::Learned {
        if args.train {
            bail!("--train trains the learned policy: use it with --policy learned");
        }
        let description = match args.policy {
            PolicyKind::Feedback => "feedback",
            _ => "static",
        };
        return Ok(PolicyChoice {
            kind: args.policy,
            model: None,
            description: description.into(),
        });
    }
    // Without --model: the shipped model, unless training starts afresh.
    let (loaded, name) = match &args.model {
        Some(path) => (Model::load(path).map(Some), path.display().to_string()),
        None if args.train => (Ok(None), String::new()),
        None => (
            Model::from_bytes(
                custos_policy::model::DEFAULT_MODEL,
                custos_policy::model::DEFAULT_MODEL_NAME,
            )
            .map(Some),
            "shipped model".to_string(),
        ),
    };
    let loaded = loaded.and_then(|m| match m {
        Some(m) => m.fits(nr_queues).map(|()| Some(m)),
        None => Ok(None),
    });
    match (loaded, args.train) {
        (Ok(Some(model)), _) => Ok(PolicyChoice {
            kind: PolicyKind::Learned,
            description: format!("learned ({name})"),
            model: Some(model),
        }),
        (Ok(None), true) => Ok(PolicyChoice {
            kind: PolicyKind::Learned,
            model: None,
            description:
                "learned (trained online from a fresh network; static until its first epoch)".into(),
        }),
        (Ok(None), false) => unreachable!("without --model the shipped model is loaded"),
        (Err(e), true) => Err(e.context("--train cannot start from this model")),
        // Asked for by name: running another policy instead would not be what was asked.
        (Err(e), false) if args.model.is_some() => Err(e.context(format!(
            "--model {name}: the learned policy cannot use it (leave out --model for the shipped model, or fix the file)"
        ))),
        (Err(e), false) => {
            warn!("learned policy unavailable, falling back to the static policy: {e:#}");
            Ok(PolicyChoice {
                kind: PolicyKind::Static,
                model: None,
                description: format!("static (learned unavailable: {e:#})"),
            })
        }
    }
}

impl Config {
    pub fn from_args(args: &SchedArgs) -> Result<Self> {
        if !(50..=1_000_000).contains(&args.slice_us) {
            bail!(
                "--slice-us must be between 50 us and 1 s (got {})",
                args.slice_us
            );
        }
        let waiting_time_ns = match &args.waiting_time_ns {
            Some(list) => waiting_time::parse_list(list)?,
            None => waiting_time::waiting_times(
                args.waiting_time_inf_ns,
                args.nr_queues,
                args.waiting_time_scale,
            )?,
        };
        let nr_queues = waiting_time_ns.len() as u32;
        if args.starvation_guard_ms >= 25_000 {
            bail!(
                "--starvation-guard-ms must stay below the 30 s sched_ext watchdog with a margin \
                 (at most 25000, got {})",
                args.starvation_guard_ms
            );
        }
        let budget_queue = args.budget_queue.unwrap_or(nr_queues);
        if budget_queue == 0 || budget_queue > nr_queues {
            bail!("--budget-queue must be a budgeted queue, 1..={nr_queues} (got {budget_queue})");
        }
        for (name, pct) in [
            ("--availability-low", args.availability_low),
            ("--availability-high", args.availability_high),
        ] {
            if !(0.0..=100.0).contains(&pct) {
                bail!("{name} is a percentage, 0..100 (got {pct})");
            }
        }
        if !(args.producer_share > 0.0 && args.producer_share <= 100.0) {
            bail!(
                "--producer-share is a percentage, above 0 and at most 100 (got {})",
                args.producer_share
            );
        }
        if args.availability_high < args.availability_low {
            bail!(
                "--availability-high ({}) must not be below --availability-low ({})",
                args.availability_high,
                args.availability_low
            );
        }
        let check_queue = |what: &str, key: &str, q: u32| -> Result<()> {
            if q > nr_queues {
                bail!("{what} {key}={q}: queue must be 0 (primary) ..{nr_queues}");
            }
            Ok(())
        };
        let forced_comm = parse_forcing(&args.force_queue, "force-queue")?;
        for (comm, q) in &forced_comm {
            check_queue("--force-queue", comm, *q)?;
            if comm.len() >= bpf_intf::custos_sched_consts_CUSTOS_COMM_LEN as usize {
                bail!("--force-queue {comm}: a comm has at most 15 bytes");
            }
        }
        let mut forced_pid = Vec::new();
        for (pid, q) in parse_forcing(&args.force_queue_pid, "force-queue-pid")? {
            let pid: u32 = pid
                .parse()
                .with_context(|| format!("--force-queue-pid {pid}={q}: {pid:?} is not a pid"))?;
            check_queue("--force-queue-pid", &pid.to_string(), q)?;
            forced_pid.push((pid, q));
        }
        if args.delta_shift > 16 {
            bail!(
                "--delta-shift must be 0 (off) to 16 (got {})",
                args.delta_shift
            );
        }
        let ring = args.transitions_ring_kb as u64 * 1024;
        if !ring.is_power_of_two() || !(16..=1 << 20).contains(&args.transitions_ring_kb) {
            bail!(
                "--transitions-ring-kb must be a power of two from 16 to 1048576 (got {})",
                args.transitions_ring_kb
            );
        }
        let policy = choose_policy(args, nr_queues)?;
        // The files this run writes, checked before anything is attached. A
        // model, transitions or statistics of an earlier run are replaced:
        // these are re-made by running again, not evidence.
        let outputs: Vec<custos_output::Output<'_>> = [
            ("--record-transitions", &args.record_transitions),
            ("--save-model", &args.save_model),
            ("--stats-json", &args.stats_json),
        ]
        .into_iter()
        .filter_map(|(flag, p)| {
            p.as_deref()
                .map(|p| custos_output::Output::new(flag, p, custos_output::Existing::Replace))
        })
        .collect();
        let model_input: Vec<&std::path::Path> = args.model.as_deref().into_iter().collect();
        custos_output::check(&outputs, &model_input)?;
        let emit_transitions =
            args.record_transitions.is_some() || args.train || args.emit_transitions;
        let explore_pct = args.explore_pct.unwrap_or(if args.train { 5 } else { 0 });
        if explore_pct > 100 {
            bail!("--explore-pct is a percentage (got {explore_pct})");
        }
        if explore_pct > 0 && !emit_transitions {
            bail!("--explore-pct only serves learning: use it with --record-transitions, --train or --emit-transitions");
        }
        if args.placement_model.is_some() && args.placement != PlacementKind::Gru {
            bail!("--placement-model is the model of --placement gru");
        }
        if !(1..=10_000).contains(&args.placement_stale_ms) {
            bail!(
                "--placement-stale-ms must be 1 to 10000 (got {})",
                args.placement_stale_ms
            );
        }
        if !(args.placement_cpu_pct > 0.0 && args.placement_cpu_pct <= 100.0) {
            bail!(
                "--placement-cpu-pct must be above 0 and at most 100 (got {})",
                args.placement_cpu_pct
            );
        }
        let placement = match args.placement {
            PlacementKind::Custos => choose_placement(false, None, 0),
            PlacementKind::Gru => match possible_cpus() {
                Ok(cpus) => choose_placement(true, args.placement_model.as_deref(), cpus),
                Err(e) => PlacementChoice::Custos {
                    reason: format!("gru unavailable: {e:#}"),
                },
            },
        };
        Ok(Self {
            placement,
            placement_limits: crate::placement::AgentLimits::new(
                args.placement_stale_ms,
                args.placement_cpu_pct,
            ),
            policy,
            delta_shift: args.delta_shift,
            emit_transitions,
            transitions_ring_bytes: ring as u32,
            explore_pct,
            slice_ns: args.slice_us * 1000,
            starvation_guard_ns: args.starvation_guard_ms * 1_000_000,
            waiting_time_ns,
            budget_queue,
            event_rate_high: norm_log2(args.event_rate_high),
            producer_share_steps: waiting_time::share_steps(args.producer_share),
            availability_low: norm_percent(args.availability_low),
            availability_high: norm_percent(args.availability_high),
            forced_comm,
            forced_pid,
        })
    }

    pub fn nr_queues(&self) -> u32 {
        self.waiting_time_ns.len() as u32
    }

    /// Eq. 3: worst-case wait of the last queue, s · N · t̂_N / t̂_2, with N
    /// counting the primary queue and t̂_2 the first budgeted queue's time.
    pub fn eq3_bound_ns(&self) -> f64 {
        let first = *self.waiting_time_ns.first().unwrap_or(&1) as f64;
        let last = *self.waiting_time_ns.last().unwrap_or(&1) as f64;
        self.slice_ns as f64 * (self.nr_queues() + 1) as f64 * last / first
    }
}

struct Scheduler<'a> {
    skel: BpfSkel<'a>,
    struct_ops: Option<libbpf_rs::Link>,
    config: &'a Config,
    args: &'a SchedArgs,
    stats_server: Option<StatsServer<(), Metrics>>,
    attached_at: Instant,
    consumers: BTreeSet<u32>,
    last_audit_error: Option<String>,
    /// The learner thread (recording, online training) and its stop flag.
    learner: Option<(
        std::thread::JoinHandle<Result<LearnerReport>>,
        Arc<AtomicBool>,
    )>,
    /// Where the policy maps are pinned for `custos train --online`.
    policy_pins: Option<PathBuf>,
    /// The GRU placement agent, with --placement gru and a usable model.
    placement_agent: Option<AgentThread>,
    /// The audit availability, also for the agent (which reads the rings' own).
    external_availability: Arc<AtomicU8>,
}

/// Makes the consumers map equal to --consumer-pid plus the live --consumer
/// names, given what it held (`known`); returns what it holds now.
fn register_consumers(
    skel: &BpfSkel<'_>,
    args: &SchedArgs,
    known: &BTreeSet<u32>,
) -> Result<BTreeSet<u32>> {
    let mut want = pressure::pids_by_name(&args.consumers)?;
    want.extend(args.consumer_pids.iter().copied());
    for gone in known.difference(&want) {
        let _ = skel.maps.consumers.delete(&gone.to_ne_bytes());
    }
    for new in want.difference(known) {
        skel.maps
            .consumers
            .update(&new.to_ne_bytes(), &1u32.to_ne_bytes(), MapFlags::ANY)
            .with_context(|| format!("cannot register consumer pid {new}"))?;
        info!("consumer pid {new} protected (always primary)");
    }
    Ok(want)
}

fn feature_pins(pin_dir: &Path) -> Option<(PathBuf, PathBuf)> {
    let task = pin_dir.join(custos_str(bpf_intf::CUSTOS_TASK_FEATURES_MAP));
    let global = pin_dir.join(custos_str(bpf_intf::CUSTOS_GLOBAL_FEATURES_MAP));
    (task.exists() && global.exists()).then_some((task, global))
}

/// Pins the scheduler's own feature maps where the collector looks for them.
/// Another process may pin first (a collector starting now): then reusing
/// its maps would need a reload, so say so plainly.
fn pin_features(skel: &mut BpfSkel, pin_dir: &Path) -> Result<()> {
    std::fs::create_dir_all(pin_dir).with_context(|| format!("creating {}", pin_dir.display()))?;
    let task = pin_dir.join(custos_str(bpf_intf::CUSTOS_TASK_FEATURES_MAP));
    let global = pin_dir.join(custos_str(bpf_intf::CUSTOS_GLOBAL_FEATURES_MAP));
    let again = "a collector pinning at the same moment? start the scheduler again";
    skel.maps
        .task_features
        .pin(&task)
        .with_context(|| format!("pinning {} ({again})", task.display()))?;
    if let Err(e) = skel.maps.global_features.pin(&global) {
        let _ = std::fs::remove_file(&task);
        return Err(e).with_context(|| format!("pinning {} ({again})", global.display()));
    }
    Ok(())
}

/// Handles on this scheduler's policy maps.
fn policy_maps(skel: &BpfSkel<'_>) -> Result<PolicyMaps> {
    Ok(PolicyMaps {
        nets: libbpf_rs::MapHandle::try_from(&skel.maps.policy_nets)?,
        state: libbpf_rs::MapHandle::try_from(&skel.maps.policy_state)?,
        transitions: libbpf_rs::MapHandle::try_from(&skel.maps.transitions)?,
    })
}

/// Pins the policy maps under PIN_DIR/sched for `custos train --online`,
/// replacing pins a previous run left.
fn pin_policy_maps(skel: &mut BpfSkel<'_>, pin_dir: &Path) -> Result<PathBuf> {
    let dir = learning::policy_pin_dir(pin_dir);
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    for name in learning::PINNED_MAPS {
        let _ = std::fs::remove_file(dir.join(name));
    }
    skel.maps.policy_nets.pin(dir.join("policy_nets"))?;
    skel.maps.policy_state.pin(dir.join("policy_state"))?;
    skel.maps.transitions.pin(dir.join("transitions"))?;
    Ok(dir)
}

/// The learner thread and the flag that stops it.
type Learner = (
    std::thread::JoinHandle<Result<LearnerReport>>,
    Arc<AtomicBool>,
);

/// The learner thread, when this run records or trains.
fn start_learner(args: &SchedArgs, config: &Config, maps: PolicyMaps) -> Result<Option<Learner>> {
    if args.record_transitions.is_none() && !args.train {
        return Ok(None);
    }
    let train = args.train.then(|| TrainConfig {
        dqn: DqnConfig::for_actions(config.nr_queues() as usize + 1),
        nr_queues: config.nr_queues(),
        weight_bits: config.policy.model.as_ref().map_or(8, |m| m.weight_bits),
        start: config.policy.model.clone(),
        epoch_every: Duration::from_secs(2),
        min_transitions: 512,
        replay_capacity: 200_000,
        save: args.save_model.clone(),
        explore_pct: config.explore_pct,
    });
    let cfg = LearnerConfig {
        record: args.record_transitions.clone(),
        train,
    };
    let stop = Arc::new(AtomicBool::new(false));
    let handle = {
        let stop = stop.clone();
        std::thread::Builder::new()
            .name("custos-learner".into())
            .spawn(move || learning::run_learner(&maps, cfg, stop))?
    };
    Ok(Some((handle, stop)))
}

fn custos_str(c: &[u8]) -> &str {
    std::str::from_utf8(c)
        .unwrap_or_default()
        .trim_end_matches('\0')
}

impl<'a> Scheduler<'a> {
    fn init(
        args: &'a SchedArgs,
        config: &'a Config,
        open_object: &'a mut MaybeUninit<OpenObject>,
    ) -> Result<Self> {
        scx_utils::try_set_rlimit_infinity();

        let mut builder = BpfSkelBuilder::default();
        builder.obj_builder.debug(args.verbose);
        let mut skel = scx_ops_open!(
            builder,
            open_object,
            custos_ops,
            None::<libbpf_rs::libbpf_sys::bpf_object_open_opts>
        )
        .context("cannot open the BPF scheduler")?;
        skel.struct_ops.custos_ops_mut().exit_dump_len = args.exit_dump_len;
        // ENQ_LAST: a budgeted task that used its slice must go back to
        // its queue instead of silently running on. ENQ_MIGRATION_DISABLED:
        // without it the kernel queues a task preempted with migration
        // disabled (a producer inside the collector's program) on its CPU's
        // local queue itself, with the kernel's default 20 ms slice, where
        // it runs before anything ops.dispatch would choose; a consumer whose
        // slice ended then waited behind it while the rings overflowed
        // (bench/sched/README.md, session 4).
        skel.struct_ops.custos_ops_mut().flags = *scx_utils::compat::SCX_OPS_ENQ_LAST
            | *scx_utils::compat::SCX_OPS_KEEP_BUILTIN_IDLE
            | *scx_utils::compat::SCX_OPS_ENQ_MIGRATION_DISABLED;

        let rodata = skel
            .maps
            .rodata_data
            .as_mut()
            .context("BPF object has no rodata")?;
        rodata.slice_ns = config.slice_ns;
        rodata.starvation_guard_ns = config.starvation_guard_ns;
        rodata.nr_queues = config.nr_queues();
        for (i, w) in config.waiting_time_ns.iter().enumerate() {
            rodata.waiting_time_ns[i + 1] = *w;
        }
        rodata.work_conserving = args.work_conserving;
        rodata.budget_queue = config.budget_queue;
        rodata.event_rate_high = config.event_rate_high;
        rodata.producer_share_steps = config.producer_share_steps;
        rodata.consumer_preempt = !args.no_consumer_preempt;
        rodata.overflow_hold = !args.no_overflow_hold;
        rodata.hold_enabled = !args.no_hold;
        rodata.hold_allowance = args.hold_allowance;
        rodata.light_share_pct = args.light_share;
        rodata.hold_guard_ns = args.hold_guard_ms * 1_000_000;
        rodata.availability_low = config.availability_low;
        rodata.availability_high = config.availability_high;
        rodata.queue_forcing = !config.forced_comm.is_empty() || !config.forced_pid.is_empty();
        rodata.policy_kind = match config.policy.kind {
            PolicyKind::Learned => bpf_intf::custos_policy_consts_CUSTOS_POLICY_LEARNED,
            PolicyKind::Feedback => bpf_intf::custos_policy_consts_CUSTOS_POLICY_FEEDBACK,
            PolicyKind::Static => bpf_intf::custos_policy_consts_CUSTOS_POLICY_STATIC,
        };
        rodata.delta_shift = config.delta_shift;
        rodata.emit_transitions = config.emit_transitions;
        rodata.placement_gru = config.placement.is_gru();
        rodata.placement_stale_ns = config.placement_limits.stale_ns;
        rodata.placement_agent_tgid = std::process::id();
        skel.maps
            .transitions
            .set_max_entries(config.transitions_ring_bytes)
            .context("cannot size the transitions ring")?;

        // The feature maps are shared through pins, whichever of the
        // scheduler and the collector starts first: reuse them if they are
        // there, else pin ours after loading for the collector to reuse
        // (it fills them from then on, also after a restart).
        let reused = match feature_pins(&args.pin_dir) {
            Some((task, global)) => {
                // A layout of another version is refused by the kernel with a
                // bare EACCES: say which map and why first.
                for (path, want) in [
                    (&task, std::mem::size_of::<bpf_intf::custos_task_features>()),
                    (
                        &global,
                        std::mem::size_of::<bpf_intf::custos_global_features>(),
                    ),
                ] {
                    let pinned = libbpf_rs::MapHandle::from_pinned_path(path)
                        .and_then(|m| m.info())
                        .map(|i| i.info.value_size as usize);
                    if let Ok(size) = pinned {
                        anyhow::ensure!(
                            size == want,
                            "the provenance feature map {} holds {size}-byte values, this scheduler's are {want} bytes: it was pinned by another custos version. Restart the collector from this version (it replaces maps of another layout), or remove {} once no collector runs",
                            path.display(),
                            args.pin_dir.display()
                        );
                    }
                }
                skel.maps.task_features.reuse_pinned_map(&task).with_context(|| {
                    format!("cannot reuse the provenance feature map {} (left by another version? remove {} once no collector runs)", task.display(), args.pin_dir.display())
                })?;
                skel.maps
                    .global_features
                    .reuse_pinned_map(&global)
                    .with_context(|| {
                        format!(
                            "cannot reuse the provenance feature map {}",
                            global.display()
                        )
                    })?;
                info!(
                    "provenance features: reusing the maps pinned in {}",
                    args.pin_dir.display()
                );
                true
            }
            None => false,
        };
        let mut skel =
            scx_ops_load!(skel, custos_ops, uei).context("cannot load the BPF scheduler")?;

        for (comm, q) in &config.forced_comm {
            let mut key = [0u8; bpf_intf::custos_sched_consts_CUSTOS_COMM_LEN as usize];
            key[..comm.len()].copy_from_slice(comm.as_bytes());
            skel.maps
                .forced_comm
                .update(&key, &q.to_ne_bytes(), MapFlags::ANY)
                .with_context(|| format!("cannot force comm {comm} into queue {q}"))?;
        }
        for (pid, q) in &config.forced_pid {
            skel.maps
                .forced_pid
                .update(&pid.to_ne_bytes(), &q.to_ne_bytes(), MapFlags::ANY)
                .with_context(|| format!("cannot force pid {pid} into queue {q}"))?;
        }

        if !reused {
            pin_features(&mut skel, &args.pin_dir)?;
            info!(
                "provenance features: no collector yet; pinned the feature maps in {} for it to fill when it starts",
                args.pin_dir.display()
            );
        }

        // Consumers are known before the first decision, so none is ever budgeted.
        let consumers = register_consumers(&skel, args, &BTreeSet::new())?;

        // The network is live before the first decision too.
        let maps = policy_maps(&skel)?;
        maps.set_nr_actions(config.nr_queues() + 1)?;
        maps.set_explore_pct(config.explore_pct)?;
        if let Some(model) = &config.policy.model {
            let generation = maps.push(&model.qnet)?;
            info!(
                "learned policy: {}x{} network, {}-bit weights, generation {generation}",
                model.qnet.hidden, model.qnet.actions, model.weight_bits
            );
        }
        let policy_pins = if config.policy.kind == PolicyKind::Learned || config.emit_transitions {
            Some(pin_policy_maps(&mut skel, &args.pin_dir)?)
        } else {
            None
        };
        let learner = start_learner(args, config, maps)?;
        // The agent runs before the first wakeup's snapshot.
        let external_availability = Arc::new(AtomicU8::new(128));
        let placement_agent = match &config.placement {
            PlacementChoice::Gru { model, .. } => Some(AgentThread::start(
                libbpf_rs::MapHandle::try_from(&skel.maps.placement_snapshots)?,
                libbpf_rs::MapHandle::try_from(&skel.maps.pid_to_cpu)?,
                model.clone(),
                config.placement_limits,
                PressureGauge {
                    global_features: libbpf_rs::MapHandle::try_from(&skel.maps.global_features)?,
                    external_availability: external_availability.clone(),
                    availability_high: config.availability_high,
                },
            )?),
            PlacementChoice::Custos { reason } => {
                if !reason.is_empty() {
                    warn!("placing tasks with the scheduler's own placement: {reason}");
                }
                None
            }
        };

        let struct_ops =
            Some(scx_ops_attach!(skel, custos_ops).context("cannot attach the BPF scheduler")?);
        info!(
            "custos scheduler attached: slice {} us, waiting times {:?} ns, policy {}, placement {}, static budget queue {}{}",
            config.slice_ns / 1000,
            config.waiting_time_ns,
            config.policy.description,
            config.placement.description(),
            config.budget_queue,
            if args.work_conserving { ", work-conserving" } else { "" }
        );

        let bound = config.eq3_bound_ns();
        if config.starvation_guard_ns > 0 && bound > config.starvation_guard_ns as f64 {
            info!(
                "Eq. 3 allows the last queue to wait up to {:.1} s when every queue is saturated; \
                 the starvation guard caps waits at {} ms",
                bound / 1e9,
                config.starvation_guard_ns / 1_000_000
            );
        }

        let stats_server = match StatsServer::new(crate::stats::server_data())
            .set_sched_path(crate::stats::STATS_SCHED_PATH)
            .launch()
        {
            Ok(s) => Some(s),
            Err(e) => {
                warn!("statistics socket unavailable ({e:#}); --monitor will not see this run");
                None
            }
        };

        Ok(Self {
            skel,
            struct_ops,
            config,
            args,
            stats_server,
            attached_at: Instant::now(),
            consumers,
            last_audit_error: None,
            learner,
            policy_pins,
            placement_agent,
            external_availability,
        })
    }

    /// Stops the learner and reports what it did.
    fn stop_learner(&mut self) -> Result<()> {
        let Some((handle, stop)) = self.learner.take() else {
            return Ok(());
        };
        stop.store(true, Ordering::Relaxed);
        let report = handle
            .join()
            .map_err(|_| anyhow::anyhow!("the learner thread panicked"))??;
        info!(
            "learner: {} transitions drained, {} recorded, {} training epochs, weights generation {}",
            report.transitions, report.recorded, report.epochs, report.last_generation
        );
        Ok(())
    }

    fn refresh_consumers(&mut self) -> Result<()> {
        self.consumers = register_consumers(&self.skel, self.args, &self.consumers)?;
        Ok(())
    }

    fn refresh_audit_pressure(&mut self) {
        if !self.args.audit_pressure {
            return;
        }
        match pressure::audit_status() {
            Ok(s) => {
                // external_availability starts at 128, so it lives in .data.
                self.skel
                    .maps
                    .data_data
                    .as_mut()
                    .unwrap()
                    .external_availability = s.availability();
                self.external_availability
                    .store(s.availability(), Ordering::Relaxed);
                self.skel.maps.bss_data.as_mut().unwrap().external_lag = s.backlog as u64;
                self.last_audit_error = None;
            }
            Err(e) => {
                let msg = format!("{e:#}");
                if self.last_audit_error.as_deref() != Some(msg.as_str()) {
                    warn!("audit pressure unavailable: {msg}");
                }
                self.last_audit_error = Some(msg);
            }
        }
    }

    fn global_features(&self) -> Option<bpf_intf::custos_global_features> {
        pressure::read_global_features(&self.skel.maps.global_features)
    }

    fn metrics(&self) -> Metrics {
        // The agent's statistics before the kernel's: the kernel counts a
        // snapshot before the agent can read it, so read in this order the
        // agent's count never leads.
        let agent = self
            .placement_agent
            .as_ref()
            .map(|a| a.stats.lock().unwrap().clone());
        // SAFETY: plain-old-data counters; all zeroes is the empty sum.
        let mut sum: bpf_intf::custos_sched_stats = unsafe { std::mem::zeroed() };
        let mut nr_cpus = 0u64;
        if let Ok(Some(per_cpu)) = self
            .skel
            .maps
            .stats
            .lookup_percpu(&0u32.to_ne_bytes(), MapFlags::ANY)
        {
            for raw in per_cpu {
                if raw.len() < std::mem::size_of::<bpf_intf::custos_sched_stats>() {
                    continue;
                }
                nr_cpus += 1;
                // SAFETY: the map's value is this plain-old-data struct.
                let s: bpf_intf::custos_sched_stats =
                    unsafe { std::ptr::read_unaligned(raw.as_ptr().cast()) };
                for q in 0..sum.dispatches.len() {
                    sum.dispatches[q] += s.dispatches[q];
                    sum.wait_ns[q] += s.wait_ns[q];
                    sum.wait_max_ns[q] = sum.wait_max_ns[q].max(s.wait_max_ns[q]);
                    sum.hungry_picks[q] += s.hungry_picks[q];
                    sum.policy_decisions[q] += s.policy_decisions[q];
                    sum.starvation_guard_picks[q] += s.starvation_guard_picks[q];
                }
                sum.to_budgeted += s.to_budgeted;
                sum.to_primary += s.to_primary;
                sum.consumer_decisions += s.consumer_decisions;
                sum.direct_dispatches += s.direct_dispatches;
                sum.sync_wakeups += s.sync_wakeups;
                sum.pinned_enqueues += s.pinned_enqueues;
                sum.kthread_dispatches += s.kthread_dispatches;
                sum.keep_running += s.keep_running;
                sum.budget_timer_fires += s.budget_timer_fires;
                sum.idle_kicks += s.idle_kicks;
                sum.consumer_preemptions += s.consumer_preemptions;
                sum.consumer_preemptions_primary += s.consumer_preemptions_primary;
                sum.consumer_queued += s.consumer_queued;
                sum.consumer_first += s.consumer_first;
                sum.consumer_next += s.consumer_next;
                sum.consumer_kept += s.consumer_kept;
                sum.migration_disabled_next += s.migration_disabled_next;
                sum.tick_preemptions += s.tick_preemptions;
                sum.overflow_holds += s.overflow_holds;
                sum.holds += s.holds;
                sum.hold_ns += s.hold_ns;
                sum.held += s.held;
                sum.hold_kicks += s.hold_kicks;
                sum.hold_tick_preemptions += s.hold_tick_preemptions;
                sum.hold_running_kicks += s.hold_running_kicks;
                sum.hold_released += s.hold_released;
                sum.hold_leaks += s.hold_leaks;
                sum.hold_unbudgeted += s.hold_unbudgeted;
                sum.hold_floors += s.hold_floors;
                sum.light_enqueues += s.light_enqueues;
                sum.light_dispatches += s.light_dispatches;
                sum.light_deferred += s.light_deferred;
                sum.light_spared += s.light_spared;
                sum.held_in_program += s.held_in_program;
                sum.held_at_stop += s.held_at_stop;
                sum.hold_bounces += s.hold_bounces;
                sum.feature_ns += s.feature_ns;
                sum.feature_updates += s.feature_updates;
                sum.feature_outliers += s.feature_outliers;
                sum.inferences += s.inferences;
                sum.inference_ns += s.inference_ns;
                sum.delta_skips += s.delta_skips;
                sum.learned_fallbacks += s.learned_fallbacks;
                sum.learned_unpressured += s.learned_unpressured;
                sum.explorations += s.explorations;
                sum.transitions += s.transitions;
                sum.transitions_dropped += s.transitions_dropped;
                sum.placement_snapshots += s.placement_snapshots;
                sum.placement_snapshots_dropped += s.placement_snapshots_dropped;
                sum.placement_used += s.placement_used;
                sum.placement_stale += s.placement_stale;
                sum.placement_rejected_cpumask += s.placement_rejected_cpumask;
                sum.placement_busy += s.placement_busy;
                sum.placement_fallbacks += s.placement_fallbacks;
            }
        }
        let queues = (0..=self.config.nr_queues() as usize)
            .map(|q| {
                // Direct dispatches are primary tasks that skipped the queue.
                let runs = sum.dispatches[q] + if q == 0 { sum.direct_dispatches } else { 0 };
                QueueMetrics {
                    waiting_time_ns: if q == 0 {
                        0
                    } else {
                        self.config.waiting_time_ns[q - 1]
                    },
                    dispatches: sum.dispatches[q],
                    hungry_factor_picks: sum.hungry_picks[q],
                    starvation_guard_picks: sum.starvation_guard_picks[q],
                    policy_decisions: sum.policy_decisions[q],
                    wait_total_ns: sum.wait_ns[q],
                    wait_avg_us: if runs > 0 {
                        sum.wait_ns[q] as f64 / runs as f64 / 1000.0
                    } else {
                        0.0
                    },
                    wait_max_us: sum.wait_max_ns[q] as f64 / 1000.0,
                }
            })
            .collect();
        let global = self.global_features();
        let collector_consumers = global
            .filter(|g| g.collector_running != 0)
            .map(|g| g.consumer_pids.iter().filter(|p| **p != 0).count() as u64)
            .unwrap_or(0);
        let data = self.skel.maps.data_data.as_ref().unwrap();
        let availability = (pressure::ring_availability(global.as_ref()) as u64)
            .min(data.external_availability as u64);
        let mut m = Metrics {
            interval_s: self.attached_at.elapsed().as_secs_f64(),
            queues,
            policy_to_budgeted: sum.to_budgeted,
            policy_to_primary: sum.to_primary,
            consumer_decisions: sum.consumer_decisions,
            direct_dispatches: sum.direct_dispatches,
            sync_wakeups: sum.sync_wakeups,
            pinned_enqueues: sum.pinned_enqueues,
            kthread_dispatches: sum.kthread_dispatches,
            keep_running: sum.keep_running,
            budget_timer_fires: sum.budget_timer_fires,
            idle_kicks: sum.idle_kicks,
            consumer_preemptions: sum.consumer_preemptions,
            consumer_preemptions_primary: sum.consumer_preemptions_primary,
            consumer_queued: sum.consumer_queued,
            consumer_first: sum.consumer_first,
            consumer_next: sum.consumer_next,
            consumer_kept: sum.consumer_kept,
            migration_disabled_next: sum.migration_disabled_next,
            tick_preemptions: sum.tick_preemptions,
            overflow_holds: sum.overflow_holds,
            holds: sum.holds,
            hold_ns: sum.hold_ns,
            held: sum.held,
            hold_kicks: sum.hold_kicks,
            hold_tick_preemptions: sum.hold_tick_preemptions,
            hold_running_kicks: sum.hold_running_kicks,
            hold_released: sum.hold_released,
            hold_leaks: sum.hold_leaks,
            hold_unbudgeted: sum.hold_unbudgeted,
            hold_floors: sum.hold_floors,
            light_enqueues: sum.light_enqueues,
            light_dispatches: sum.light_dispatches,
            light_deferred: sum.light_deferred,
            light_spared: sum.light_spared,
            held_in_program: sum.held_in_program,
            held_at_stop: sum.held_at_stop,
            hold_bounces: sum.hold_bounces,
            hold_on: self
                .skel
                .maps
                .bss_data
                .as_ref()
                .map_or(0, |b| u64::from(b.hold_since_ns != 0)),
            starvation_guard_picks: sum.starvation_guard_picks.iter().sum(),
            feature_updates: sum.feature_updates,
            feature_ns: sum.feature_ns,
            feature_outliers: sum.feature_outliers,
            nr_cpus,
            nr_consumers: self.consumers.len() as u64 + collector_consumers,
            collector_features: global.is_some_and(|g| g.collector_running != 0) as u64,
            availability,
            policy: self.config.policy.description.clone(),
            policy_generation: learning::read_policy_state(&self.skel.maps.policy_state)
                .map_or(0, |s| s.generation),
            inferences: sum.inferences,
            inference_ns: sum.inference_ns,
            delta_skips: sum.delta_skips,
            learned_fallbacks: sum.learned_fallbacks,
            learned_unpressured: sum.learned_unpressured,
            explorations: sum.explorations,
            transitions: sum.transitions,
            transitions_dropped: sum.transitions_dropped,
            placement: self.config.placement.description(),
            placement_snapshots: sum.placement_snapshots,
            placement_snapshots_dropped: sum.placement_snapshots_dropped,
            placement_used: sum.placement_used,
            placement_stale: sum.placement_stale,
            placement_rejected_cpumask: sum.placement_rejected_cpumask,
            placement_busy: sum.placement_busy,
            placement_fallbacks: sum.placement_fallbacks,
            ..Default::default()
        };
        (m.hold_lowest_free_pct, m.hold_reserve_pct, m.hold_floor_pct) =
            pressure::hold_headroom(global.as_ref(), &data.hold_lowest_free);
        if let Some(a) = agent {
            m.placement_agent_snapshots = a.snapshots;
            m.placement_predictions = a.predictions;
            m.placement_prediction_errors = a.prediction_errors;
            m.placement_map_write_failures = a.map_write_failures;
            m.placement_skipped_late = a.skipped_late;
            m.placement_skipped_budget = a.skipped_budget;
            m.placement_skipped_unplaceable = a.skipped_unplaceable;
            m.placement_skipped_superseded = a.skipped_superseded;
            m.placement_skipped_pressure = a.skipped_pressure;
            m.placement_inference_calls = a.calls;
            m.placement_inference_ns = a.inference_ns;
            (m.placement_inference_p50_us, m.placement_inference_p99_us) = a.latency.p50_p99_us();
        }
        m.derive_feature_cost();
        m
    }

    fn exited(&mut self) -> bool {
        uei_exited!(&self.skel, uei)
    }

    fn run(
        &mut self,
        shutdown: Arc<AtomicBool>,
        metrics: Option<&custos_metrics::Publisher<Metrics>>,
    ) -> Result<UserExitInfo> {
        let deadline = self
            .args
            .duration
            .map(|s| self.attached_at + Duration::from_secs_f64(s));
        let channels = self.stats_server.as_ref().map(|s| s.channels());
        let mut last_consumer_scan = Instant::now();
        while !shutdown.load(Ordering::Relaxed) && !self.exited() {
            if let Some(publisher) = metrics.filter(|p| p.due()) {
                publisher.publish(&self.metrics());
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                break;
            }
            // Audit pressure moves fast; poll it at the policy's rate window.
            self.refresh_audit_pressure();
            if last_consumer_scan.elapsed() >= Duration::from_secs(1) {
                self.refresh_consumers()?;
                last_consumer_scan = Instant::now();
            }
            match &channels {
                Some((res_ch, req_ch)) => match req_ch.recv_timeout(Duration::from_millis(100)) {
                    Ok(()) => res_ch.send(self.metrics())?,
                    Err(RecvTimeoutError::Timeout) => {}
                    Err(e) => Err(e)?,
                },
                None => std::thread::sleep(Duration::from_millis(100)),
            }
        }
        let _ = self.struct_ops.take();
        let learner = self.stop_learner();
        // Detached first, then the agent stopped: the final statistics
        // hold every snapshot the kernel sent and all the agent did.
        if let Some(agent) = self.placement_agent.as_mut() {
            if let Err(e) = agent.stop() {
                warn!("placement agent: {e:#}");
            }
        }
        let mut final_metrics = self.metrics();
        // The learner's last epoch pushes weights as it stops: the final
        // statistics name the generation the run ended with.
        if let Ok(state) = learning::read_policy_state(&self.skel.maps.policy_state) {
            final_metrics.policy_generation = state.generation;
        }
        if let Some(dir) = self.policy_pins.take() {
            for name in learning::PINNED_MAPS {
                let _ = std::fs::remove_file(dir.join(name));
            }
            let _ = std::fs::remove_dir(&dir);
        }
        learner?;
        if let Some(publisher) = metrics {
            publisher.publish_final(&final_metrics);
        }
        if let Some(path) = &self.args.stats_json {
            let json = serde_json::to_string_pretty(&final_metrics)?;
            std::fs::write(path, json + "\n")
                .with_context(|| format!("cannot write statistics to {}", path.display()))?;
        }
        info!("custos scheduler detached");
        uei_report!(&self.skel, uei).context("the kernel ejected the custos scheduler")
    }
}

/// Loads, attaches and runs the scheduler; restarts it when the kernel asks
/// (CPU hotplug), returns 0 on a clean detach.
pub fn run(
    args: &SchedArgs,
    config: &Config,
    shutdown: Arc<AtomicBool>,
    metrics: Option<custos_metrics::Publisher<Metrics>>,
) -> Result<i32> {
    let mut open_object = MaybeUninit::uninit();
    loop {
        let mut sched = Scheduler::init(args, config, &mut open_object)?;
        let uei = sched.run(shutdown.clone(), metrics.as_ref())?;
        if !uei.should_restart() || shutdown.load(Ordering::Relaxed) {
            return Ok(0);
        }
        info!("the kernel asked the scheduler to restart; restarting");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    /// sysfs read as `custos status` reports it: no sched_ext, nothing
    /// attached (root/ops keeps a detached scheduler's name), another
    /// scheduler, and ours with the version scx_utils put in its name.
    #[test]
    fn attached_reads_sysfs() {
        let s = |v: &str| Some(v.to_string());
        assert_eq!(Attached::from_sysfs(None, None), Attached::NoSchedExt);
        assert_eq!(
            Attached::from_sysfs(s("disabled"), Some("custos_0.1.0\n")),
            Attached::Nothing {
                state: "disabled".into()
            }
        );
        assert_eq!(
            Attached::from_sysfs(s("enabled"), Some("bpfland_1.0.9_x86_64\n")),
            Attached::Other {
                state: "enabled".into(),
                ops: "bpfland_1.0.9_x86_64".into()
            }
        );
        // A name that only begins like ours is another scheduler's.
        assert!(matches!(
            Attached::from_sysfs(s("enabled"), Some("custosx_1")),
            Attached::Other { .. }
        ));
        for (ops, version) in [
            ("custos_0.1.0_g1a2b3c4_x86_64_unknown_linux_gnu\n", "0.1.0"),
            ("custos_0.1.0", "0.1.0"),
            ("custos", ""),
        ] {
            assert_eq!(
                Attached::from_sysfs(s("enabled"), Some(ops)),
                Attached::Custos {
                    state: "enabled".into(),
                    ops: ops.trim().into(),
                    version: version.into()
                },
                "{ops}"
            );
        }
    }

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: SchedArgs,
    }

    fn config(argv: &[&str]) -> Result<Config> {
        let cli = Cli::try_parse_from(std::iter::once("custos-sched").chain(argv.iter().copied()))?;
        Config::from_args(&cli.args)
    }

    /// Placement is independent of the queue policy: every policy runs
    /// with either placement, and an unusable GRU model leaves the policy
    /// as asked and the own placement on, with the reason.
    #[test]
    fn placement_composes_with_every_queue_policy() {
        let dir = tempfile::tempdir().unwrap();
        let cpus = possible_cpus().unwrap();
        let good = dir.path().join("gru.onnx");
        let net = custos_policy::placement::GruNet::new(8, cpus, 1).unwrap();
        std::fs::write(
            &good,
            custos_policy::placement::to_onnx(&net.weights().unwrap()),
        )
        .unwrap();
        let wrong = dir.path().join("wrong.onnx");
        let net = custos_policy::placement::GruNet::new(8, cpus + 1, 1).unwrap();
        std::fs::write(
            &wrong,
            custos_policy::placement::to_onnx(&net.weights().unwrap()),
        )
        .unwrap();
        for (policy, kind) in [
            ("static", PolicyKind::Static),
            ("feedback", PolicyKind::Feedback),
            ("learned", PolicyKind::Learned),
        ] {
            let c = config(&["--policy", policy]).unwrap();
            assert_eq!(c.policy.kind, kind);
            assert_eq!(c.placement.description(), "custos");
            let c = config(&[
                "--policy",
                policy,
                "--placement",
                "gru",
                "--placement-model",
                good.to_str().unwrap(),
            ])
            .unwrap();
            assert_eq!(c.policy.kind, kind);
            assert!(c.placement.is_gru(), "{:?}", c.placement);
            assert_eq!(c.placement_limits.stale_ns, 50_000_000);
            let c = config(&[
                "--policy",
                policy,
                "--placement",
                "gru",
                "--placement-model",
                wrong.to_str().unwrap(),
            ])
            .unwrap();
            assert_eq!(c.policy.kind, kind);
            assert!(!c.placement.is_gru());
            assert!(
                c.placement
                    .description()
                    .contains(&format!("this machine has {cpus}")),
                "{:?}",
                c.placement
            );
        }
        let c = config(&["--placement", "gru", "--placement-stale-ms", "5"]).unwrap();
        // The shipped model is for two CPUs.
        assert_eq!(c.placement.is_gru(), cpus == 2, "{:?}", c.placement);
        assert_eq!(c.placement_limits.stale_ns, 5_000_000);
        assert!(config(&["--placement-model", good.to_str().unwrap()]).is_err());
        assert!(config(&["--placement", "gru", "--placement-stale-ms", "0"]).is_err());
    }

    /// A model the user named and the policy cannot use is an error, before
    /// anything is attached; the shipped model needs no file.
    #[test]
    fn a_named_model_that_cannot_be_used_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.json");
        let corrupt = dir.path().join("corrupt.json");
        std::fs::write(&corrupt, "{\"not\": \"a model\"}").unwrap();
        for bad in [&missing, &corrupt] {
            let e = config(&["--policy", "learned", "--model", bad.to_str().unwrap()])
                .err()
                .unwrap_or_else(|| panic!("{} accepted", bad.display()));
            let msg = format!("{e:#}");
            assert!(
                msg.contains("--model") && msg.contains(bad.to_str().unwrap()),
                "{msg}"
            );
        }
        let c = config(&["--policy", "learned"]).unwrap();
        assert_eq!(
            c.policy.kind,
            PolicyKind::Learned,
            "{}",
            c.policy.description
        );
        // Writing the statistics over the model read is refused.
        let model = dir.path().join("model.json");
        let m = custos_policy::model::Model::from_bytes(
            custos_policy::model::DEFAULT_MODEL,
            custos_policy::model::DEFAULT_MODEL_NAME,
        )
        .unwrap();
        m.save(&model).unwrap();
        let before = std::fs::read(&model).unwrap();
        let p = model.to_str().unwrap();
        assert!(config(&["--policy", "learned", "--model", p, "--stats-json", p]).is_err());
        assert_eq!(std::fs::read(&model).unwrap(), before);
    }
}

//! `custos sched`: options and entry point.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Args;

use crate::waiting_time::Scale;

/// The static policy's defaults: a producer's events per window, and the
/// ring availability (percent) that counts as pressure.
pub const DEFAULT_EVENT_RATE_HIGH: u64 = 64;
pub const DEFAULT_AVAILABILITY_LOW_PCT: f64 = 25.0;

/// The queue-assignment policies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum PolicyKind {
    /// Thresholds on a producer's event rate and share while the rings fill.
    Static,
    /// The integer Q-network of --model, evaluated in the kernel.
    Learned,
    /// No learning: a producer's queue follows ring availability and the
    /// consumer's measured rate (the learned policy's ablation baseline).
    Feedback,
}

/// Who chooses the CPU of a waking task.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum PlacementKind {
    /// The scheduler's own: the waker's CPU for synchronous wakeups, else an idle CPU.
    Custos,
    /// Seed 002's GRU, imitating the kernel's default scheduler (--placement-model);
    /// the own placement whenever its prediction is missing, stale, not allowed or busy.
    Gru,
}

/// Run the Custos sched_ext scheduler (Aegis queue backbone) until Ctrl-C.
///
/// Consumers (the collector's, and any named here) always run from the primary
/// queue; a task producing many provenance events while the rings fill up is
/// parked in a budgeted queue until the pressure is gone.
#[derive(Args, Debug, Clone)]
pub struct SchedArgs {
    /// Fixed time slice of every task, in microseconds.
    #[arg(long, default_value_t = 5000)]
    pub slice_us: u64,

    /// Number of budgeted (non-primary) queues.
    #[arg(long, default_value_t = 3)]
    pub nr_queues: u32,

    /// t̂∞ of Eq. 7: the waiting time that alone absorbs the worst case, in ns.
    #[arg(long, default_value_t = 500_000)]
    pub waiting_time_inf_ns: u64,

    /// How waiting times grow across the budgeted queues.
    #[arg(long, value_enum, default_value_t = Scale::Exponential)]
    pub waiting_time_scale: Scale,

    /// Explicit waiting times in ns, one per budgeted queue (e.g. 1e2,7e3,5e5);
    /// overrides --waiting-time-inf-ns, --waiting-time-scale and --nr-queues.
    #[arg(long, value_name = "NS,NS,...")]
    pub waiting_time_ns: Option<String>,

    /// Let idle CPUs run budgeted tasks before their waiting time (ablation:
    /// weakens the budget).
    #[arg(long)]
    pub work_conserving: bool,

    /// No task waits longer than this (ms): a queue whose oldest task waited
    /// this long is consumed first, so extreme waiting times can never trip
    /// the sched_ext watchdog (30 s). 0 disables the guard.
    #[arg(long, default_value_t = 2000)]
    pub starvation_guard_ms: u64,

    /// Budgeted queue that the static policy parks pressured producers in
    /// (default: the last, most budgeted one).
    #[arg(long)]
    pub budget_queue: Option<u32>,

    /// A producer is "high rate" from this many provenance events per 100 ms
    /// window on (compared on the policy's log2 scale) ...
    #[arg(long, default_value_t = DEFAULT_EVENT_RATE_HIGH)]
    pub event_rate_high: u64,

    /// ... and when it makes at least this percentage of all events (rounded
    /// to the policy's log2 scale: 5 % means 1/16). 100 disables the share test.
    #[arg(long, default_value_t = 5.0)]
    pub producer_share: f64,

    /// Ablation: do not let a waking consumer preempt budgeted or ordinary
    /// tasks; it waits in the primary queue like any other task.
    #[arg(long)]
    pub no_consumer_preempt: bool,

    /// Ablation: let budgeted queues run on their waiting times even while
    /// the rings are nearly full (availability at or below --availability-low).
    #[arg(long)]
    pub no_overflow_hold: bool,

    /// The hold (crates/custos-sched/README.md, "The hold"), on by default:
    /// while a ring's free space is under the reserve the collector
    /// publishes, hold every task that produces events off every CPU until
    /// the rings are back above --availability-high; light tasks run on
    /// until the ring's floor. Named, it changes nothing (command lines of
    /// when it was off by default still work).
    #[arg(long, conflicts_with = "no_hold")]
    pub hold: bool,

    /// Ablation: no hold. Nothing but the queues and the consumer's
    /// protection keeps the rings from filling: through a stopped consumer
    /// they fill (bench/completeness).
    #[arg(long)]
    pub no_hold: bool,

    /// Events a task may make after the hold began before it is held too
    /// (a shell sending a stopped consumer SIGCONT makes a few).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(0..=1_000_000))]
    pub hold_allowance: u32,

    /// Once the hold has lasted this long (ms), held tasks are let through
    /// one at a time, lightest first, a few events each, counted as leaks:
    /// the consumer may be blocked on one. Below the kernel's 30 s watchdog.
    #[arg(long, default_value_t = 5000, value_parser = clap::value_parser!(u64).range(1..=20_000))]
    pub hold_guard_ms: u64,

    /// The light lane's share of each CPU, in percent (crates/custos-sched/
    /// README.md, "The light lane"): a waking task that makes few events runs
    /// before the flood's workers, for at most this much of a CPU's time.
    /// 0: no lane, every such task waits in the primary FIFO.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(0..=100))]
    pub light_share: u32,

    /// Budget producers when ring availability falls to this percentage.
    #[arg(long, default_value_t = DEFAULT_AVAILABILITY_LOW_PCT)]
    pub availability_low: f64,

    /// Return them to primary once availability is back above this percentage.
    #[arg(long, default_value_t = 50.0)]
    pub availability_high: f64,

    /// Which policy puts tasks in queues: the static thresholds below, or the
    /// learned integer network (seed 000 §4.2) from --model. A model named
    /// by --model that cannot be used is an error; the shipped model, if it
    /// cannot be used, falls back to static, and says so.
    #[arg(long, value_enum, default_value_t = PolicyKind::Static)]
    pub policy: PolicyKind,

    /// Model file of the learned policy (`custos train` writes one; default:
    /// the shipped model).
    #[arg(long, value_name = "FILE")]
    pub model: Option<PathBuf>,

    /// Who places waking tasks on CPUs; independent of --policy, which
    /// chooses their queues. A GRU model that cannot be used leaves the
    /// scheduler's own placement on, and says so.
    #[arg(long, value_enum, default_value_t = PlacementKind::Custos)]
    pub placement: PlacementKind,

    /// ONNX model of --placement gru (`custos placement train` writes one;
    /// default: the shipped model, trained for the 2-vCPU VM).
    #[arg(long, value_name = "FILE")]
    pub placement_model: Option<PathBuf>,

    /// A GRU prediction older than this (ms) is not used.
    #[arg(long, default_value_t = 50, value_name = "MS")]
    pub placement_stale_ms: u64,

    /// The GRU agent's inference may use this percentage of one CPU; windows
    /// past the budget are not predicted (counted). The agent runs beside
    /// the workload and the provenance consumer: its cost stays bounded.
    #[arg(long, default_value_t = 5.0, value_name = "PCT")]
    pub placement_cpu_pct: f64,

    /// Delta function (Eq. 12): reuse a task's last learned decision while its
    /// nvcsw, nr_event and the ring availability each moved by less than
    /// 1/2^SHIFT (2 = the seed's δ = 0.25). 0 runs the network on every decision.
    #[arg(long, default_value_t = 2, value_name = "SHIFT")]
    pub delta_shift: u32,

    /// Write every transition (state, action, next state, events lost) to
    /// FILE, for `custos train --recording FILE`.
    #[arg(long, value_name = "FILE")]
    pub record_transitions: Option<PathBuf>,

    /// Train the learned policy online from this run's transitions and push
    /// the new weights into the kernel after every epoch; --save-model keeps them.
    #[arg(long)]
    pub train: bool,

    /// Where --train writes the model it learned (after every epoch).
    #[arg(long, value_name = "FILE")]
    pub save_model: Option<PathBuf>,

    /// Percentage of decisions that pick a random queue (epsilon-greedy), so
    /// recorded transitions show every action's outcome (default: 5 with
    /// --train, else 0). Costs completeness while on: for training runs only.
    #[arg(long, value_name = "PCT")]
    pub explore_pct: Option<u32>,

    /// Emit transitions for an external `custos train --online` (pinned under
    /// PIN_DIR/sched) even when this run neither records nor trains.
    #[arg(long)]
    pub emit_transitions: bool,

    /// Size of the transitions ring, in KiB (a power of two).
    #[arg(long, default_value_t = 4096)]
    pub transitions_ring_kb: u32,

    /// Protect processes with this command name (comm) as consumers; repeatable.
    #[arg(long = "consumer", value_name = "NAME")]
    pub consumers: Vec<String>,

    /// Protect this process id as a consumer; repeatable.
    #[arg(long = "consumer-pid", value_name = "PID")]
    pub consumer_pids: Vec<u32>,

    /// Read provenance pressure from the kernel audit status (auditd's backlog
    /// and lost counters); use with `--consumer auditd`.
    #[arg(long)]
    pub audit_pressure: bool,

    /// Directory of the collector's pinned feature maps.
    #[arg(long, default_value = "/sys/fs/bpf/custos")]
    pub pin_dir: PathBuf,

    /// Debug: put tasks with this comm in queue Q regardless of the policy
    /// (COMM=Q; repeatable).
    #[arg(long = "force-queue", value_name = "COMM=Q")]
    pub force_queue: Vec<String>,

    /// Debug: put this process's tasks in queue Q regardless of the policy
    /// (PID=Q; repeatable).
    #[arg(long = "force-queue-pid", value_name = "PID=Q")]
    pub force_queue_pid: Vec<String>,

    /// Detach after this many seconds (default: run until Ctrl-C).
    #[arg(long)]
    pub duration: Option<f64>,

    /// Print statistics every SECS seconds while running.
    #[arg(long, value_name = "SECS")]
    pub stats: Option<f64>,

    /// Only monitor an already running `custos sched` every SECS seconds.
    #[arg(long, value_name = "SECS")]
    pub monitor: Option<f64>,

    /// Describe every statistic and exit.
    #[arg(long)]
    pub help_stats: bool,

    /// On exit, write the statistics of the whole run to this JSON file.
    #[arg(long, value_name = "PATH")]
    pub stats_json: Option<PathBuf>,

    /// Serve the statistics (the run's totals, as in --stats-json) for
    /// Prometheus at http://ADDR/metrics, e.g. 127.0.0.1:9465 (an IP
    /// address and a port; docs/operations.md, "Metrics").
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<std::net::SocketAddr>,

    /// Bytes of the kernel's debug dump kept on a scheduler error (0 = default).
    #[arg(long, default_value_t = 0)]
    pub exit_dump_len: u32,

    /// Verbose output, including libbpf's.
    #[arg(short, long)]
    pub verbose: bool,
}

/// Parses `KEY=Q` debug forcing options.
pub(crate) fn parse_forcing(items: &[String], what: &str) -> Result<Vec<(String, u32)>> {
    items
        .iter()
        .map(|item| {
            let (key, q) = item.rsplit_once('=').with_context(|| {
                format!("--{what} {item:?}: expected KEY=QUEUE, e.g. stress-ng=3")
            })?;
            let q: u32 = q
                .parse()
                .with_context(|| format!("--{what} {item:?}: queue {q:?} is not a number"))?;
            if key.is_empty() {
                bail!("--{what} {item:?}: empty key");
            }
            Ok((key.to_string(), q))
        })
        .collect()
}

pub(crate) fn init_logging(verbose: bool) {
    let level = if verbose {
        simplelog::LevelFilter::Debug
    } else {
        simplelog::LevelFilter::Info
    };
    let cfg = simplelog::ConfigBuilder::new()
        .set_time_level(simplelog::LevelFilter::Off)
        .set_target_level(simplelog::LevelFilter::Off)
        .set_thread_level(simplelog::LevelFilter::Off)
        .set_location_level(simplelog::LevelFilter::Off)
        .build();
    let _ = simplelog::TermLogger::init(
        level,
        cfg,
        simplelog::TerminalMode::Stderr,
        simplelog::ColorChoice::Never,
    );
}

fn start_monitor(secs: f64, shutdown: Arc<AtomicBool>) -> Result<std::thread::JoinHandle<()>> {
    if !(secs > 0.0 && secs.is_finite()) {
        bail!("the stats interval must be a positive number of seconds (got {secs})");
    }
    Ok(std::thread::spawn(move || {
        if let Err(e) = crate::stats::monitor(Duration::from_secs_f64(secs), shutdown) {
            eprintln!("custos sched: stats monitor stopped: {e:#}");
        }
    }))
}

/// Entry point of `custos sched`; returns the process exit code.
pub fn run(args: SchedArgs) -> Result<i32> {
    if args.help_stats {
        crate::stats::server_data().describe_meta(&mut std::io::stdout(), None)?;
        return Ok(0);
    }
    init_logging(args.verbose);
    let shutdown = Arc::new(AtomicBool::new(false));
    {
        let shutdown = shutdown.clone();
        ctrlc::set_handler(move || shutdown.store(true, Ordering::Relaxed))
            .context("cannot install the Ctrl-C handler")?;
    }

    if let Some(secs) = args.monitor {
        let handle = start_monitor(secs, shutdown)?;
        let _ = handle.join();
        return Ok(0);
    }

    // Options first: a typo is reported the same on every kernel.
    let config = crate::scheduler::Config::from_args(&args)?;
    crate::scheduler::check_kernel()?;
    // Bound before anything is attached: a taken address is refused first.
    let metrics = args
        .metrics
        .map(custos_metrics::Endpoint::bind)
        .transpose()?
        .map(|e| e.serve("sched", crate::stats::encode_metrics))
        .transpose()?;
    if let Some(secs) = args.stats {
        start_monitor(secs, shutdown.clone())?;
    }
    crate::scheduler::run(&args, &config, shutdown, metrics)
}

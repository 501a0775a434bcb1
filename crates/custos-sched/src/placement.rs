//! The GRU placement policy's user space (seed 002): the agent that turns
//! the scheduler's snapshots into predictions in `pid_to_cpu`, the choice
//! of a model at start, and `custos placement record|train`, which record
//! the kernel's default scheduler placing tasks and train a model to
//! imitate it.
//!
//! The BPF side is `placement_gru.bpf.h` (in the scheduler) and
//! `placement_record.bpf.c` (the recorder); both send the same
//! `struct custos_placement_snapshot`. The model and its features are
//! custos-policy's `placement` module.
//!
//! Not for: deciding anything in the kernel's hot path. The agent is
//! asynchronous: a wakeup uses the last prediction written for its pid, or
//! none; scheduling never waits for inference.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::mem::MaybeUninit;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, Subcommand};
use custos_policy::placement::{
    self, features, PlacementModel, Sample, Snapshot, Window, FEATURES, WINDOW,
};
use libbpf_rs::skel::{OpenSkel, Skel, SkelBuilder};
use libbpf_rs::{MapCore, MapFlags, MapHandle, OpenObject, RingBufferBuilder};
use log::{info, warn};
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use crate::bpf_intf::{custos_placement_prediction, custos_placement_snapshot};
use crate::placement_record_skel::{PlacementRecordSkel, PlacementRecordSkelBuilder};
use crate::policy::as_bytes;

/// The model `--placement gru` uses without --placement-model: trained on
/// the default scheduler's placements in the 2-vCPU VM (`bench/placement/run.py
/// --train`). A model is for one CPU count: elsewhere it is refused, and
/// the machine's own recording trains one (docs/placement.md).
const SHIPPED_MODEL: &[u8] = custos_policy::placement::SHIPPED_MODEL;

/// One snapshot as the kernel sent it and a recording keeps it (JSON Lines).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SnapshotRecord {
    pub pid: u32,
    /// The CPU the task was placed on: the training label.
    pub cpu: u32,
    pub prio: i32,
    pub nr_cpus_allowed: u32,
    pub kthread: bool,
    /// A new task (fork) rather than a wakeup.
    #[serde(default)]
    pub created: bool,
    pub runtime_ns: u64,
    pub nvcsw: u64,
    pub nivcsw: u64,
    pub switch_count: u64,
    /// CLOCK_MONOTONIC ns.
    #[serde(default)]
    pub at_ns: u64,
    /// The scheduler would use a prediction for the task (a primary
    /// non-consumer allowed on more than one CPU); not a model feature.
    #[serde(default)]
    pub placeable: bool,
}

impl SnapshotRecord {
    /// A record of the snapshots ring, None if it is too short.
    pub fn from_kernel(raw: &[u8]) -> Option<Self> {
        if raw.len() < std::mem::size_of::<custos_placement_snapshot>() {
            return None;
        }
        // SAFETY: the ring's records are this plain-old-data struct.
        let s: custos_placement_snapshot = unsafe { std::ptr::read_unaligned(raw.as_ptr().cast()) };
        Some(SnapshotRecord {
            pid: s.pid,
            cpu: s.cpu.max(0) as u32,
            prio: s.prio,
            nr_cpus_allowed: s.nr_cpus_allowed,
            kthread: s.kthread != 0,
            created: s.created != 0,
            runtime_ns: s.runtime_ns,
            nvcsw: s.nvcsw,
            nivcsw: s.nivcsw,
            switch_count: s.switch_count,
            at_ns: s.at_ns,
            placeable: s.placeable != 0,
        })
    }

    /// The model's view of the task.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            prio: self.prio,
            nr_cpus_allowed: self.nr_cpus_allowed,
            kthread: self.kthread,
            runtime_ns: self.runtime_ns,
            nvcsw: self.nvcsw,
            nivcsw: self.nivcsw,
            switch_count: self.switch_count,
        }
    }
}

/// The model's input for the WINDOW snapshots given, oldest first: the
/// one place a window's features are computed (the agent and training).
pub fn window_of<'a>(snapshots: impl IntoIterator<Item = &'a Snapshot>) -> Window {
    let mut w: Window = [[0.0; FEATURES]; WINDOW];
    for (row, snap) in w.iter_mut().zip(snapshots) {
        *row = features(snap);
    }
    w
}

/// The sliding window of the last [`WINDOW`] snapshots of all tasks, as
/// the seed keeps it: each snapshot that fills or slides it ends the
/// window whose prediction is for that snapshot's pid. It holds the
/// snapshots; features are computed only for a window asked for.
#[derive(Debug, Default)]
pub struct SlidingWindow {
    last: VecDeque<Snapshot>,
}

impl SlidingWindow {
    /// Adds a snapshot; true once WINDOW are held (a window ends with it).
    pub fn push(&mut self, rec: &SnapshotRecord) -> bool {
        if self.last.len() == WINDOW {
            self.last.pop_front();
        }
        self.last.push_back(rec.snapshot());
        self.last.len() == WINDOW
    }

    /// The window as it stands (WINDOW snapshots once `push` said so).
    pub fn window(&self) -> Window {
        window_of(&self.last)
    }
}

/// A bounded sample of inference times (reservoir sampling, algorithm R):
/// its median and 99th percentile describe the whole run in fixed memory.
#[derive(Clone, Debug)]
pub struct LatencySample {
    seen: u64,
    ns: Vec<u64>,
    cap: usize,
    rng: rand::rngs::StdRng,
}

impl LatencySample {
    pub fn new(cap: usize) -> Self {
        LatencySample {
            seen: 0,
            ns: Vec::with_capacity(cap),
            cap: cap.max(1),
            rng: rand::rngs::StdRng::seed_from_u64(2),
        }
    }

    pub fn add(&mut self, ns: u64) {
        self.seen += 1;
        if self.ns.len() < self.cap {
            self.ns.push(ns);
        } else {
            let j = self.rng.gen_range(0..self.seen);
            if (j as usize) < self.cap {
                self.ns[j as usize] = ns;
            }
        }
    }

    /// (median, 99th percentile) in microseconds; zeros before any sample.
    pub fn p50_p99_us(&self) -> (f64, f64) {
        if self.ns.is_empty() {
            return (0.0, 0.0);
        }
        let mut v = self.ns.clone();
        v.sort_unstable();
        let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize] as f64 / 1000.0;
        (at(0.5), at(0.99))
    }
}

/// What the agent did, shared with the scheduler's statistics.
#[derive(Clone, Debug)]
pub struct AgentStats {
    pub snapshots: u64,
    pub predictions: u64,
    /// Predictions out of the machine's CPUs or that the model could not run.
    pub prediction_errors: u64,
    pub map_write_failures: u64,
    /// Windows not predicted because their snapshot was already older than
    /// the stale limit when read: the kernel would refuse the answer.
    pub skipped_late: u64,
    /// Windows not predicted because inference had used its CPU budget for
    /// the current second.
    pub skipped_budget: u64,
    /// Windows whose last task would not use a prediction (budgeted, a
    /// consumer, or pinned to one CPU).
    pub skipped_unplaceable: u64,
    /// Windows of a pid that had a newer window in the same batch: only
    /// the newest prediction would be read.
    pub skipped_superseded: u64,
    /// Windows not predicted while the provenance rings were under
    /// pressure: the agent's CPU time is then the consumer's.
    pub skipped_pressure: u64,
    /// Inference calls, each over a batch of windows.
    pub calls: u64,
    /// The duration of each call.
    pub latency: LatencySample,
    /// Total inference time, for the cost of one window.
    pub inference_ns: u64,
}

impl Default for AgentStats {
    fn default() -> Self {
        AgentStats {
            snapshots: 0,
            predictions: 0,
            prediction_errors: 0,
            map_write_failures: 0,
            skipped_late: 0,
            skipped_budget: 0,
            skipped_unplaceable: 0,
            skipped_superseded: 0,
            skipped_pressure: 0,
            calls: 0,
            latency: LatencySample::new(4096),
            inference_ns: 0,
        }
    }
}

/// How much work the agent may do. The agent is an ordinary task beside the
/// workload (and beside the provenance consumer it must never crowd out),
/// so its cost is bounded whatever the wakeup rate or the machine's speed:
/// natively a window takes 5-16 µs, but under emulation (the VM) ~1-5 ms,
/// and there the agent unbounded took most of a CPU during a flood.
#[derive(Clone, Copy, Debug)]
pub struct AgentLimits {
    /// A snapshot read later than this after it was taken is not predicted
    /// (the kernel ignores predictions this old: --placement-stale-ms).
    pub stale_ns: u64,
    /// Inference time allowed per second of wall time (--placement-cpu-pct).
    pub budget_ns_per_s: u64,
}

impl AgentLimits {
    pub fn new(stale_ms: u64, cpu_pct: f64) -> Self {
        AgentLimits {
            stale_ns: stale_ms * 1_000_000,
            budget_ns_per_s: (cpu_pct * 1e7) as u64,
        }
    }

    /// No shedding (tests of the window logic).
    pub fn unlimited() -> Self {
        AgentLimits {
            stale_ns: u64::MAX,
            budget_ns_per_s: u64::MAX,
        }
    }
}

/// A window worth predicting: its last task and when that was seen.
#[derive(Clone, Debug)]
pub struct Pending {
    pub pid: u32,
    pub window: Window,
    pub at_ns: u64,
}

/// The agent's logic without BPF: snapshots in, predictions out, batched.
/// Every snapshot slides the window; a window is predicted only if its
/// answer could be used (the task is placeable, the answer would not be
/// stale, no newer window of the pid waits) and the CPU budget allows.
pub struct Agent<P> {
    /// The last WINDOW - 1 snapshots of earlier batches: the start of the
    /// windows that end in the next batch.
    tail: Vec<Snapshot>,
    predict: P,
    cpus: usize,
    limits: AgentLimits,
    /// The current budget second: its start and the inference time spent in it.
    second_start_ns: u64,
    spent_ns: u64,
    /// What one window has cost lately (ns), to size the next call.
    ns_per_window: u64,
}

impl<P: FnMut(&[Window]) -> Result<Vec<u32>>> Agent<P> {
    pub fn new(predict: P, cpus: usize, limits: AgentLimits) -> Self {
        Agent {
            tail: Vec::new(),
            predict,
            cpus,
            limits,
            second_start_ns: 0,
            spent_ns: 0,
            ns_per_window: 0,
        }
    }

    /// Slides the window over a drained batch of snapshots (oldest first)
    /// and returns the windows worth predicting, oldest first. Features are
    /// computed only for those: most windows are skipped, and under
    /// emulation the logarithms of every snapshot's features would cost the
    /// agent more than reading the ring does.
    pub fn admit(&mut self, recs: &[SnapshotRecord], stats: &mut AgentStats) -> Vec<Pending> {
        stats.snapshots += recs.len() as u64;
        let held = self.tail.len();
        let all: Vec<Snapshot> = self
            .tail
            .iter()
            .copied()
            .chain(recs.iter().map(SnapshotRecord::snapshot))
            .collect();
        // Newest first, so a pid's newest window is the one kept: an older
        // prediction would be overwritten before its task could read it.
        let mut newest = std::collections::HashSet::new();
        let mut picked = Vec::new();
        for (i, rec) in recs.iter().enumerate().rev() {
            if held + i + 1 < WINDOW {
                continue; // not a full window yet
            }
            if !rec.placeable {
                stats.skipped_unplaceable += 1;
            } else if !newest.insert(rec.pid) {
                stats.skipped_superseded += 1;
            } else {
                picked.push(i);
            }
        }
        let pending = picked
            .iter()
            .rev()
            .map(|&i| {
                let end = held + i + 1;
                Pending {
                    pid: recs[i].pid,
                    window: window_of(&all[end - WINDOW..end]),
                    at_ns: recs[i].at_ns,
                }
            })
            .collect();
        self.tail = all[all.len().saturating_sub(WINDOW - 1)..].to_vec();
        pending
    }

    /// One inference call over the newest windows of `pending` that the
    /// budget allows, taken off it; the (pid, cpu) to write. Windows that
    /// turned stale are dropped first; past the budget all are.
    pub fn infer(
        &mut self,
        pending: &mut Vec<Pending>,
        now_ns: u64,
        stats: &mut AgentStats,
    ) -> Vec<(u32, u32)> {
        let stale_ns = self.limits.stale_ns;
        let before = pending.len();
        pending.retain(|p| now_ns.saturating_sub(p.at_ns) <= stale_ns);
        stats.skipped_late += (before - pending.len()) as u64;
        if now_ns.saturating_sub(self.second_start_ns) >= 1_000_000_000 {
            self.second_start_ns = now_ns;
            self.spent_ns = 0;
        }
        if self.spent_ns >= self.limits.budget_ns_per_s {
            stats.skipped_budget += pending.len() as u64;
            pending.clear();
        }
        if pending.is_empty() {
            return Vec::new();
        }
        // As many as the budget left and half the stale limit allow (an
        // answer that takes longer than that arrives mostly stale), by what
        // windows cost lately; one while that is unknown, at least one.
        let allowed = match self.ns_per_window {
            0 => 1,
            per => ((self.limits.budget_ns_per_s - self.spent_ns) / per)
                .min(stale_ns / 2 / per)
                .max(1),
        };
        let n = pending
            .len()
            .min(placement::MAX_BATCH)
            .min(allowed.try_into().unwrap_or(usize::MAX));
        // The newest: the likeliest to be fresh when their tasks wake.
        let batch = pending.split_off(pending.len() - n);
        let windows: Vec<Window> = batch.iter().map(|p| p.window).collect();
        let start = Instant::now();
        let cpus = (self.predict)(&windows);
        // Wall time, not the thread's CPU time: time the agent waited for a
        // CPU mid-inference is time the machine was too busy for it anyway.
        let took = start.elapsed().as_nanos() as u64;
        self.spent_ns += took;
        self.ns_per_window = if self.ns_per_window == 0 {
            took / n as u64
        } else {
            (3 * self.ns_per_window + took / n as u64) / 4
        };
        stats.calls += 1;
        stats.inference_ns += took;
        stats.latency.add(took);
        match cpus {
            Ok(cpus) if cpus.len() == n => {
                let mut out = Vec::with_capacity(n);
                for (p, cpu) in batch.iter().zip(cpus) {
                    if (cpu as usize) < self.cpus {
                        stats.predictions += 1;
                        out.push((p.pid, cpu));
                    } else {
                        stats.prediction_errors += 1;
                    }
                }
                out
            }
            _ => {
                stats.prediction_errors += n as u64;
                Vec::new()
            }
        }
    }
}

/// bpf_ktime_get_ns()'s clock.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The placement a run uses, once --placement and --placement-model were
/// looked at.
#[derive(Clone)]
pub enum PlacementChoice {
    Gru {
        model: Arc<PlacementModel>,
        name: String,
    },
    Custos {
        reason: String,
    },
}

impl std::fmt::Debug for PlacementChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.description())
    }
}

impl PlacementChoice {
    pub fn is_gru(&self) -> bool {
        matches!(self, PlacementChoice::Gru { .. })
    }

    /// For the log and the stats.
    pub fn description(&self) -> String {
        match self {
            PlacementChoice::Gru { name, .. } => format!("gru ({name})"),
            PlacementChoice::Custos { reason } if reason.is_empty() => "custos".into(),
            PlacementChoice::Custos { reason } => format!("custos ({reason})"),
        }
    }
}

/// --placement gru with a model that cannot be used places as custos does
/// and says why (a missing, corrupt or mismatched model, the shipped one
/// included); the scheduler runs on. `cpus` is the machine's possible
/// CPUs, the model's output width.
pub fn choose_placement(gru: bool, model: Option<&Path>, cpus: usize) -> PlacementChoice {
    if !gru {
        return PlacementChoice::Custos {
            reason: String::new(),
        };
    }
    let loaded = match model {
        Some(path) => PlacementModel::load(path, cpus).map(|m| (m, path.display().to_string())),
        None => PlacementModel::from_bytes(SHIPPED_MODEL, cpus)
            .map(|m| (m, "shipped model".to_string()))
            .context(
                "the shipped placement model (train one for this machine: custos placement record, then \
                 custos placement train; use it with --placement-model)",
            ),
    };
    match loaded {
        Ok((model, name)) => PlacementChoice::Gru {
            model: Arc::new(model),
            name,
        },
        // The scheduler says so as it attaches (the reason is also a statistic).
        Err(e) => PlacementChoice::Custos {
            reason: format!("gru unavailable: {e:#}"),
        },
    }
}

/// The possible CPUs: the model's output width.
pub fn possible_cpus() -> Result<usize> {
    libbpf_rs::num_possible_cpus().context("cannot count the possible CPUs")
}

/// How often the agent publishes its statistics (and once as it stops).
const STATS_PUBLISH_PERIOD: Duration = Duration::from_millis(100);

/// Provenance pressure as the agent sees it before each inference call.
pub struct PressureGauge {
    /// The collector's pinned global features (its rings' free bytes).
    pub global_features: MapHandle,
    /// Availability from other provenance systems (audit), [0, 128].
    pub external_availability: Arc<AtomicU8>,
    /// Below this availability the agent does not infer (the scheduler's
    /// --availability-high, normalised): the rings are filling, and the
    /// consumer needs every CPU cycle the agent would take.
    pub availability_high: u8,
}

impl PressureGauge {
    pub fn under_pressure(&self) -> bool {
        let g = crate::pressure::read_global_features(&self.global_features);
        let avail = crate::pressure::ring_availability(g.as_ref())
            .min(self.external_availability.load(Ordering::Relaxed));
        avail < self.availability_high
    }
}

/// Runs the agent until `stop`: reads the snapshots ring, predicts the
/// windows worth predicting in batches and writes each CPU into pid_to_cpu.
pub fn run_agent(
    snapshots: &MapHandle,
    pid_to_cpu: &MapHandle,
    model: &PlacementModel,
    limits: AgentLimits,
    pressure: &PressureGauge,
    stats: &Mutex<AgentStats>,
    stop: &AtomicBool,
) -> Result<()> {
    let batch: std::rc::Rc<std::cell::RefCell<Vec<SnapshotRecord>>> = Default::default();
    let mut builder = RingBufferBuilder::new();
    {
        let batch = batch.clone();
        builder.add(snapshots, move |raw| {
            if let Some(r) = SnapshotRecord::from_kernel(raw) {
                batch.borrow_mut().push(r);
            }
            0
        })?;
    }
    let ring = builder
        .build()
        .context("cannot read the placement snapshots ring")?;
    let mut agent = Agent::new(|w: &[Window]| model.predict_batch(w), model.cpus(), limits);
    // The agent counts into its own copy and publishes it: the scheduler's
    // main loop reads the shared one to answer a stats request, and must
    // not wait while a batch is inferred (seconds under emulation).
    let mut st = AgentStats::default();
    let mut published = Instant::now();
    let publish = |st: &AgentStats, published: &mut Instant| {
        *stats.lock().unwrap() = st.clone();
        *published = Instant::now();
    };
    while !stop.load(Ordering::Relaxed) {
        // The timeout only bounds how late a stop is seen.
        poll(&ring, Duration::from_millis(100)).context("polling the placement snapshots ring")?;
        let drained = std::mem::take(&mut *batch.borrow_mut());
        let mut pending = agent.admit(&drained, &mut st);
        // Not cut short by a stop: the budget bounds this loop, and every
        // admitted window is accounted for.
        while !pending.is_empty() {
            if pressure.under_pressure() {
                st.skipped_pressure += pending.len() as u64;
                break;
            }
            for (pid, cpu) in agent.infer(&mut pending, monotonic_ns(), &mut st) {
                let value = custos_placement_prediction {
                    cpu: cpu as i32,
                    pad: 0,
                    at_ns: monotonic_ns(),
                };
                if pid_to_cpu
                    .update(&pid.to_ne_bytes(), as_bytes(&value), MapFlags::ANY)
                    .is_err()
                {
                    st.map_write_failures += 1;
                }
            }
            if published.elapsed() >= STATS_PUBLISH_PERIOD {
                publish(&st, &mut published);
            }
        }
        if published.elapsed() >= STATS_PUBLISH_PERIOD {
            publish(&st, &mut published);
        }
    }
    // The final statistics hold everything the agent did.
    publish(&st, &mut published);
    Ok(())
}

/// Waits up to `timeout` for records and reads them; a signal (Ctrl-C,
/// which stops the loop anyway) interrupting the wait is not an error.
fn poll(ring: &libbpf_rs::RingBuffer<'_>, timeout: Duration) -> Result<()> {
    match ring.poll_raw(timeout) {
        n if n >= 0 || n == -libc::EINTR => Ok(()),
        n => Err(std::io::Error::from_raw_os_error(-n).into()),
    }
}

/// The agent thread and its stop flag.
pub struct AgentThread {
    handle: Option<std::thread::JoinHandle<Result<()>>>,
    stop: Arc<AtomicBool>,
    pub stats: Arc<Mutex<AgentStats>>,
}

impl AgentThread {
    pub fn start(
        snapshots: MapHandle,
        pid_to_cpu: MapHandle,
        model: Arc<PlacementModel>,
        limits: AgentLimits,
        pressure: PressureGauge,
    ) -> Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let stats = Arc::new(Mutex::new(AgentStats::default()));
        let handle = {
            let (stop, stats) = (stop.clone(), stats.clone());
            std::thread::Builder::new()
                .name("custos-placement".into())
                .spawn(move || {
                    run_agent(
                        &snapshots,
                        &pid_to_cpu,
                        &model,
                        limits,
                        &pressure,
                        &stats,
                        &stop,
                    )
                })?
        };
        Ok(AgentThread {
            handle: Some(handle),
            stop,
            stats,
        })
    }

    pub fn stop(&mut self) -> Result<()> {
        self.stop.store(true, Ordering::Relaxed);
        match self.handle.take() {
            Some(h) => h
                .join()
                .map_err(|_| anyhow!("the placement agent panicked"))?,
            None => Ok(()),
        }
    }
}

impl Drop for AgentThread {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

/// placement_record.bpf.c attached to the running kernel's tracepoints.
pub struct Recorder {
    skel: PlacementRecordSkel<'static>,
}

impl Recorder {
    /// Loads and attaches the recorder with a snapshots ring of `ring_bytes`
    /// (a power of two); this process's own wakeups are left out.
    pub fn start(ring_bytes: u32) -> Result<Self> {
        if !ring_bytes.is_power_of_two() || ring_bytes < 4096 {
            bail!("the snapshots ring must be a power of two of at least 4 KiB (got {ring_bytes} bytes)");
        }
        // One recorder per process run; its object storage lives as long.
        let storage: &'static mut MaybeUninit<OpenObject> =
            Box::leak(Box::new(MaybeUninit::uninit()));
        let mut open = PlacementRecordSkelBuilder::default()
            .open(storage)
            .context("cannot open the placement recorder BPF program")?;
        open.maps
            .rodata_data
            .as_mut()
            .context("the recorder has no rodata")?
            .recorder_tgid = std::process::id();
        open.maps.placement_snapshots.set_max_entries(ring_bytes)?;
        let mut skel = open.load().context(
            "cannot load the placement recorder (needs root, BTF and tp_btf tracepoints)",
        )?;
        skel.attach()
            .context("cannot attach the placement recorder to sched_wakeup/sched_switch")?;
        Ok(Recorder { skel })
    }

    /// Drains the ring until `stop` or `until`, handing each snapshot to `sink`.
    pub fn run(
        &self,
        until: Option<Instant>,
        stop: &AtomicBool,
        mut sink: impl FnMut(&SnapshotRecord) -> Result<()>,
    ) -> Result<()> {
        let batch: std::rc::Rc<std::cell::RefCell<Vec<SnapshotRecord>>> = Default::default();
        let mut builder = RingBufferBuilder::new();
        {
            let batch = batch.clone();
            builder.add(&self.skel.maps.placement_snapshots, move |raw| {
                if let Some(r) = SnapshotRecord::from_kernel(raw) {
                    batch.borrow_mut().push(r);
                }
                0
            })?;
        }
        let ring = builder.build().context("cannot read the recorder's ring")?;
        loop {
            let last = stop.load(Ordering::Relaxed) || until.is_some_and(|t| Instant::now() >= t);
            let wait = until.map_or(Duration::from_millis(100), |t| {
                t.saturating_duration_since(Instant::now())
                    .min(Duration::from_millis(100))
            });
            if last {
                ring.consume()?;
            } else {
                poll(&ring, wait)?;
            }
            for rec in std::mem::take(&mut *batch.borrow_mut()) {
                sink(&rec)?;
            }
            if last {
                return Ok(());
            }
        }
    }

    /// Snapshots sent, and refused by a full ring, so far.
    pub fn counts(&self) -> (u64, u64) {
        let bss = self
            .skel
            .maps
            .bss_data
            .as_ref()
            .expect("the recorder's counters");
        (bss.recorded, bss.dropped)
    }
}

/// `custos placement`: the GRU placement policy's data and model.
#[derive(Subcommand, Debug, Clone)]
pub enum PlacementCommand {
    Record(RecordArgs),
    Train(TrainPlacementArgs),
    Speed(SpeedArgs),
}

/// Time a placement model's inference on this machine: what one window
/// costs alone and in batches (the agent batches; its CPU budget buys
/// windows at this price). No BPF, no scheduler.
#[derive(Args, Debug, Clone)]
pub struct SpeedArgs {
    /// The model (default: the shipped one).
    #[arg(long, value_name = "FILE")]
    pub model: Option<PathBuf>,
    /// CPUs the model places on (default: this machine's possible CPUs).
    #[arg(long)]
    pub cpus: Option<usize>,
    /// Windows to time at each batch size.
    #[arg(long, default_value_t = 2000)]
    pub windows: usize,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Record the kernel's default scheduler placing tasks (no sched_ext: run it
/// without `custos sched`), as JSON Lines for `custos placement train`.
#[derive(Args, Debug, Clone)]
pub struct RecordArgs {
    /// Write the snapshots here (JSON Lines, one task created or woken up each).
    #[arg(long, short, value_name = "FILE")]
    pub out: PathBuf,
    /// Stop after this many seconds (default: at Ctrl-C).
    #[arg(long)]
    pub seconds: Option<f64>,
    /// Size of the snapshots ring, in KiB (a power of two).
    #[arg(long, default_value_t = 4096)]
    pub ring_kb: u32,
}

/// Train a GRU placement model (ONNX) from recordings of the default scheduler.
#[derive(Args, Debug, Clone)]
pub struct TrainPlacementArgs {
    /// A recording of `custos placement record`; repeatable.
    #[arg(long = "recording", value_name = "FILE", required = true)]
    pub recordings: Vec<PathBuf>,
    /// Write the model here (ONNX; `custos sched --placement gru --placement-model FILE`).
    #[arg(long, short, value_name = "FILE")]
    pub out: PathBuf,
    /// CPUs of the machine the model is for (default: this machine's possible CPUs).
    #[arg(long)]
    pub cpus: Option<usize>,
    /// GRU hidden units.
    #[arg(long, default_value_t = 32)]
    pub hidden: usize,
    /// Most training epochs (training stops earlier once held-out loss stops improving).
    #[arg(long, default_value_t = 60)]
    pub max_epochs: usize,
    /// Train on at most this many windows, every k-th in recording order
    /// (a minute's recording holds hundreds of thousands; an epoch's time
    /// grows with them). 0: all.
    #[arg(long, default_value_t = 100_000)]
    pub max_windows: usize,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

pub fn run(cmd: PlacementCommand) -> Result<i32> {
    crate::cli::init_logging(false);
    match cmd {
        PlacementCommand::Record(args) => record(&args),
        PlacementCommand::Train(args) => {
            let report = train(&args)?;
            println!("{report}");
            Ok(0)
        }
        PlacementCommand::Speed(args) => speed(&args),
    }
}

/// One batch size's timing.
#[derive(Debug, Serialize)]
pub struct SpeedRow {
    pub batch: usize,
    pub calls: usize,
    pub us_per_call_median: f64,
    pub us_per_window: f64,
}

/// Times `model` on `windows` windows at each batch size (after one
/// untimed call each, which builds that batch's plan).
pub fn time_model(model: &PlacementModel, windows: usize) -> Result<Vec<SpeedRow>> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(3);
    // Features are scaled to about one (custos_policy::placement::features).
    let all: Vec<Window> = (0..windows.max(placement::MAX_BATCH))
        .map(|_| std::array::from_fn(|_| std::array::from_fn(|_| rng.gen_range(-1.0..1.5))))
        .collect();
    let mut rows = Vec::new();
    for batch in [1, 8, placement::MAX_BATCH] {
        model.predict_batch(&all[..batch])?;
        let mut calls_ns = Vec::new();
        for chunk in all.chunks_exact(batch).take(windows.div_ceil(batch).max(1)) {
            let start = Instant::now();
            model.predict_batch(chunk)?;
            calls_ns.push(start.elapsed().as_nanos() as f64);
        }
        let total: f64 = calls_ns.iter().sum();
        let n = calls_ns.len();
        calls_ns.sort_by(f64::total_cmp);
        rows.push(SpeedRow {
            batch,
            calls: n,
            us_per_call_median: calls_ns[n / 2] / 1000.0,
            us_per_window: total / 1000.0 / (n * batch) as f64,
        });
    }
    Ok(rows)
}

fn speed(args: &SpeedArgs) -> Result<i32> {
    let cpus = match args.cpus {
        Some(n) => n,
        None => possible_cpus()?,
    };
    if args.windows == 0 {
        bail!("--windows must be at least 1");
    }
    let model = match &args.model {
        Some(path) => PlacementModel::load(path, cpus)?,
        None => PlacementModel::from_bytes(SHIPPED_MODEL, cpus)
            .context("the shipped placement model (--cpus 2 times it anywhere)")?,
    };
    let rows = time_model(&model, args.windows)?;
    if args.json {
        println!("{}", serde_json::to_string(&rows)?);
    } else {
        println!("batch  calls  us/call (median)  us/window");
        for r in &rows {
            println!(
                "{:>5}  {:>5}  {:>16.1}  {:>9.1}",
                r.batch, r.calls, r.us_per_call_median, r.us_per_window
            );
        }
    }
    Ok(0)
}

fn record(args: &RecordArgs) -> Result<i32> {
    if crate::sched_ext_state().as_deref() == Some("enabled") {
        warn!("a sched_ext scheduler is attached: this records its placements, not the default scheduler's");
    }
    let until = match args.seconds {
        Some(s) if s > 0.0 && s.is_finite() => Some(Instant::now() + Duration::from_secs_f64(s)),
        Some(s) => bail!("--seconds must be a positive number (got {s})"),
        None => None,
    };
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = stop.clone();
        ctrlc::set_handler(move || stop.store(true, Ordering::Relaxed))
            .context("cannot install the Ctrl-C handler")?;
    }
    let ring = args
        .ring_kb
        .checked_mul(1024)
        .context("--ring-kb is too large")?;
    custos_output::check(
        &[custos_output::Output::new(
            "-o/--out",
            &args.out,
            custos_output::Existing::Replace,
        )],
        &[],
    )?;
    let mut out = BufWriter::new(
        File::create(&args.out).with_context(|| format!("cannot create {}", args.out.display()))?,
    );
    let recorder = Recorder::start(ring)?;
    info!(
        "recording the default scheduler's placements into {}",
        args.out.display()
    );
    let mut written = 0u64;
    recorder.run(until, &stop, |rec| {
        serde_json::to_writer(&mut out, rec)?;
        out.write_all(b"\n")?;
        written += 1;
        Ok(())
    })?;
    out.flush()?;
    let (sent, dropped) = recorder.counts();
    eprintln!(
        "custos placement record: {written} snapshots written to {}, {dropped} dropped by a full ring{}",
        args.out.display(),
        if dropped > 0 { " (a larger --ring-kb keeps them)" } else { "" }
    );
    if sent < written {
        warn!("the kernel counted {sent} snapshots sent, fewer than written");
    }
    Ok(0)
}

/// A recording's unreadable lines: (line number, error).
pub type BadLines = Vec<(usize, String)>;

/// Hands each snapshot of a recording to `each`, in order; returns the
/// unreadable lines (skipped). Streams: a recording can be larger than memory.
pub fn for_each_record(path: &Path, mut each: impl FnMut(&SnapshotRecord)) -> Result<BadLines> {
    let file = File::open(path)
        .with_context(|| format!("cannot open the recording {}", path.display()))?;
    let mut bad = Vec::new();
    for (i, line) in BufReader::new(file).lines().enumerate() {
        let line = line.with_context(|| format!("reading {}", path.display()))?;
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<SnapshotRecord>(&line) {
            Ok(r) => each(&r),
            Err(e) => bad.push((i + 1, e.to_string())),
        }
    }
    Ok(bad)
}

/// A recording's snapshots, and its unreadable lines.
pub fn read_recording(path: &Path) -> Result<(Vec<SnapshotRecord>, BadLines)> {
    let mut records = Vec::new();
    let bad = for_each_record(path, |r| records.push(*r))?;
    Ok((records, bad))
}

/// Training samples of one recording: every WINDOW consecutive snapshots,
/// labelled with the CPU of the last (the default scheduler's choice).
pub fn samples_of(records: &[SnapshotRecord]) -> Vec<Sample> {
    let mut window = SlidingWindow::default();
    let mut samples = Vec::new();
    for r in records {
        if window.push(r) {
            samples.push(Sample {
                window: window.window(),
                cpu: r.cpu,
            });
        }
    }
    samples
}

/// What `custos placement train` did.
#[derive(Debug)]
pub struct TrainPlacementReport {
    pub snapshots: usize,
    pub bad_lines: usize,
    pub report: placement::TrainReport,
    pub out: PathBuf,
    pub cpus: usize,
}

impl std::fmt::Display for TrainPlacementReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let r = &self.report;
        write!(
            f,
            "placement model for {} CPUs written to {}: {} snapshots ({} bad lines skipped), {} training and {} held-out windows, \
             {} epochs (best {}); held-out accuracy {:.1}% against {:.1}% for always the most common CPU",
            self.cpus,
            self.out.display(),
            self.snapshots,
            self.bad_lines,
            r.train_samples,
            r.validation_samples,
            r.epochs,
            r.best_epoch,
            r.validation_accuracy * 100.0,
            r.majority_accuracy * 100.0
        )
    }
}

pub fn train(args: &TrainPlacementArgs) -> Result<TrainPlacementReport> {
    let cpus = match args.cpus {
        Some(0) => bail!("--cpus must be at least 1"),
        Some(n) => n,
        None => possible_cpus()?,
    };
    // Where the model goes, checked before training (not after it).
    let inputs: Vec<&std::path::Path> = args.recordings.iter().map(PathBuf::as_path).collect();
    custos_output::check(
        &[custos_output::Output::new(
            "-o/--out",
            &args.out,
            custos_output::Existing::Replace,
        )],
        &inputs,
    )?;
    // Two passes over the recordings, so that memory holds only the windows
    // trained on (--max-windows of them), not the recordings: the first
    // counts windows and reports bad lines, the second keeps every
    // stride-th window.
    let (mut windows, mut snapshots, mut bad_lines) = (0usize, 0usize, 0usize);
    for path in &args.recordings {
        let mut records = 0usize;
        let bad = for_each_record(path, |_| records += 1)?;
        for (line, e) in bad.iter().take(10) {
            eprintln!("{}:{line}: skipped: {e}", path.display());
        }
        if bad.len() > 10 {
            eprintln!(
                "{}: {} more bad lines skipped",
                path.display(),
                bad.len() - 10
            );
        }
        bad_lines += bad.len();
        snapshots += records;
        windows += records.saturating_sub(WINDOW - 1);
    }
    if windows == 0 {
        bail!(
            "no usable windows in the recordings ({snapshots} snapshots, {bad_lines} bad lines; a window needs {WINDOW} snapshots)"
        );
    }
    let stride = if args.max_windows > 0 && windows > args.max_windows {
        windows.div_ceil(args.max_windows)
    } else {
        1
    };
    let mut samples = Vec::with_capacity(windows.div_ceil(stride));
    let mut index = 0usize;
    for path in &args.recordings {
        // Windows never span two recordings: their tasks never ran together.
        let mut window = SlidingWindow::default();
        for_each_record(path, |r| {
            if window.push(r) {
                // Features only for the windows kept.
                if index.is_multiple_of(stride) {
                    samples.push(Sample {
                        window: window.window(),
                        cpu: r.cpu,
                    });
                }
                index += 1;
            }
        })?;
    }
    if stride > 1 {
        eprintln!(
            "training on every {stride}th of {windows} windows: {} (--max-windows)",
            samples.len()
        );
    }
    let cfg = placement::TrainConfig {
        hidden: args.hidden,
        max_epochs: args.max_epochs,
        seed: args.seed,
        ..placement::TrainConfig::for_cpus(cpus)
    };
    let progress = |e: placement::EpochReport| {
        eprintln!(
            "epoch {}/{}: held-out loss {:.4} (best: epoch {})",
            e.epoch, e.max_epochs, e.validation_loss, e.best_epoch
        )
    };
    let (net, report) = placement::train_with_progress(&samples, &cfg, progress).with_context(|| {
        format!("training a model for {cpus} CPUs (--cpus: the CPUs of the machine that will run it)")
    })?;
    let bytes = placement::to_onnx(&net.weights()?);
    std::fs::write(&args.out, bytes)
        .with_context(|| format!("cannot write {}", args.out.display()))?;
    Ok(TrainPlacementReport {
        snapshots,
        bad_lines,
        report,
        out: args.out.clone(),
        cpus,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(pid: u32, cpu: u32, runtime_ns: u64) -> SnapshotRecord {
        SnapshotRecord {
            pid,
            cpu,
            prio: 120,
            nr_cpus_allowed: 2,
            runtime_ns,
            nvcsw: pid as u64,
            placeable: true,
            ..Default::default()
        }
    }

    /// Admits and infers until nothing is pending, as run_agent does
    /// without pressure.
    fn run<P: FnMut(&[Window]) -> Result<Vec<u32>>>(
        agent: &mut Agent<P>,
        recs: &[SnapshotRecord],
        now_ns: u64,
        stats: &mut AgentStats,
    ) -> Vec<(u32, u32)> {
        let mut pending = agent.admit(recs, stats);
        let mut out = Vec::new();
        while !pending.is_empty() {
            out.extend(agent.infer(&mut pending, now_ns, stats));
        }
        out
    }

    #[test]
    fn the_kernel_record_reads_back() {
        // SAFETY: plain integers.
        let mut s: custos_placement_snapshot = unsafe { std::mem::zeroed() };
        s.pid = 42;
        s.prio = 110;
        s.nr_cpus_allowed = 4;
        s.cpu = 3;
        s.kthread = 1;
        s.created = 1;
        s.placeable = 1;
        s.runtime_ns = 5;
        s.nvcsw = 6;
        s.nivcsw = 7;
        s.switch_count = 8;
        s.at_ns = 9;
        let r = SnapshotRecord::from_kernel(as_bytes(&s)).unwrap();
        assert_eq!(
            r,
            SnapshotRecord {
                pid: 42,
                cpu: 3,
                prio: 110,
                nr_cpus_allowed: 4,
                kthread: true,
                created: true,
                runtime_ns: 5,
                nvcsw: 6,
                nivcsw: 7,
                switch_count: 8,
                at_ns: 9,
                placeable: true
            }
        );
        assert!(SnapshotRecord::from_kernel(&as_bytes(&s)[..10]).is_none());
        assert_eq!(std::mem::size_of::<custos_placement_snapshot>(), 64);
    }

    /// The agent predicts once per snapshot from the tenth on, for the last
    /// snapshot's pid, from a window of the last ten in order, whether the
    /// snapshots arrive one at a time or in one batch.
    #[test]
    fn the_agent_predicts_for_the_last_pid_of_each_full_window() {
        for batched in [false, true] {
            let mut seen: Vec<Window> = Vec::new();
            let mut agent = Agent::new(
                |ws: &[Window]| {
                    seen.extend_from_slice(ws);
                    // "CPU" = which runtime the last task had, as a marker.
                    Ok(ws
                        .iter()
                        .map(|w| (w[WINDOW - 1][3] * 20.0).round() as u32 % 4)
                        .collect())
                },
                4,
                AgentLimits::unlimited(),
            );
            let mut stats = AgentStats::default();
            let recs: Vec<_> = (0..25u32).map(|i| rec(1000 + i, 0, 1000u64 << i)).collect();
            let mut writes = Vec::new();
            if batched {
                writes = run(&mut agent, &recs, 0, &mut stats);
            } else {
                for r in &recs {
                    writes.extend(run(&mut agent, std::slice::from_ref(r), 0, &mut stats));
                }
            }
            drop(agent);
            let mut pids: Vec<u32> = writes.iter().map(|w| w.0).collect();
            pids.sort();
            assert_eq!(
                pids,
                (1000 + WINDOW as u32 - 1..1025).collect::<Vec<_>>(),
                "batched {batched}"
            );
            assert_eq!(stats.snapshots, 25);
            assert_eq!(stats.predictions, writes.len() as u64);
            // Each window is the ten last snapshots before its pid's, oldest first.
            let mut seen_sorted = seen.clone();
            seen_sorted.sort_by(|a, b| a[WINDOW - 1][3].total_cmp(&b[WINDOW - 1][3]));
            for (k, w) in seen_sorted.iter().enumerate() {
                for (j, row) in w.iter().enumerate() {
                    assert_eq!(
                        *row,
                        features(&rec(1000 + (k + j) as u32, 0, 1000u64 << (k + j)).snapshot()),
                        "window {k} row {j}"
                    );
                }
            }
            for (pid, cpu) in &writes {
                let k = (pid - 1000) as usize;
                assert_eq!(
                    *cpu,
                    (features(&rec(*pid, 0, 1000u64 << k).snapshot())[3] * 20.0).round() as u32 % 4
                );
            }
            // Batched: one window while its cost is unknown, then all the
            // rest in one call. One call per snapshot otherwise.
            assert_eq!(
                stats.calls,
                if batched { 2 } else { writes.len() as u64 },
                "batched {batched}"
            );
            assert_eq!(stats.latency.ns.len() as u64, stats.calls);
        }
    }

    /// Only windows whose answer would be read are run: a task that would
    /// not take a prediction is skipped, and of a pid's windows in one batch
    /// only the newest is run. Every snapshot still slides the window.
    #[test]
    fn the_agent_skips_windows_no_one_would_read() {
        let mut seen: Vec<Window> = Vec::new();
        let mut agent = Agent::new(
            |ws: &[Window]| {
                seen.extend_from_slice(ws);
                Ok(vec![1; ws.len()])
            },
            2,
            AgentLimits::unlimited(),
        );
        let mut stats = AgentStats::default();
        // 30 snapshots: pids 0..10 three times over; odd pids not placeable.
        let recs: Vec<_> = (0..30u32)
            .map(|i| SnapshotRecord {
                placeable: i % 2 == 0,
                ..rec(i % 10, 0, 1 + i as u64)
            })
            .collect();
        let writes = run(&mut agent, &recs, 0, &mut stats);
        drop(agent);
        let mut pids: Vec<u32> = writes.iter().map(|w| w.0).collect();
        pids.sort();
        assert_eq!(pids, vec![0, 2, 4, 6, 8]);
        // 21 full windows (snapshots 9 to 29): 11 of odd pids, 10 of the
        // five even ones, of which the five newest are run.
        assert_eq!(stats.snapshots, 30);
        assert_eq!(stats.skipped_unplaceable, 11);
        assert_eq!(stats.skipped_superseded, 5);
        assert_eq!(stats.calls, 2);
        // ... and the window run for pid 8 is its newest (runtime 29).
        let last = seen
            .iter()
            .find(|w| w[WINDOW - 1] == features(&rec(8, 0, 29).snapshot()))
            .expect("pid 8's newest window");
        assert_eq!(
            last[0],
            features(&rec(9, 0, 20).snapshot()),
            "snapshots 19 to 28"
        );
    }

    #[test]
    fn predictions_outside_the_machine_or_failing_are_not_written() {
        let mut calls = 0;
        let mut agent = Agent::new(
            |ws: &[Window]| {
                calls += 1;
                if calls % 2 == 0 {
                    Ok(vec![9; ws.len()])
                } else {
                    Err(anyhow!("no"))
                }
            },
            4,
            AgentLimits::unlimited(),
        );
        let mut stats = AgentStats::default();
        let out: Vec<_> = (0..20)
            .flat_map(|i| run(&mut agent, &[rec(i, 0, 1)], 0, &mut stats))
            .collect();
        assert!(out.is_empty());
        assert_eq!(stats.prediction_errors, 11);
        assert_eq!(stats.predictions, 0);
    }

    /// A snapshot read after the stale limit still slides the window but is
    /// not predicted: the kernel would refuse the answer.
    #[test]
    fn late_snapshots_are_not_predicted() {
        let mut calls = 0;
        let mut agent = Agent::new(
            |ws: &[Window]| {
                calls += 1;
                Ok(vec![1; ws.len()])
            },
            2,
            AgentLimits::new(50, 100.0),
        );
        let mut stats = AgentStats::default();
        let taken = |i: u32| SnapshotRecord {
            at_ns: 1_000_000_000 + i as u64 * 1_000_000,
            ..rec(i, 0, 1)
        };
        // Read 60 ms after each was taken: all late.
        for i in 0..20 {
            assert_eq!(
                run(
                    &mut agent,
                    &[taken(i)],
                    taken(i).at_ns + 60_000_000,
                    &mut stats
                ),
                vec![]
            );
        }
        assert_eq!(
            (stats.skipped_late, stats.predictions),
            (20 - WINDOW as u64 + 1, 0)
        );
        // Read 10 ms after: predicted, from a window that kept sliding.
        assert_eq!(
            run(
                &mut agent,
                &[taken(20)],
                taken(20).at_ns + 10_000_000,
                &mut stats
            ),
            vec![(20, 1)]
        );
        drop(agent);
        assert_eq!(calls, 1);
    }

    /// Past its CPU budget in a second the agent skips windows until the
    /// next second; every skip is counted. Calls are sized by what windows
    /// cost lately, so a batch does not overrun the budget by much.
    #[test]
    fn the_agent_keeps_to_its_cpu_budget() {
        let mut windows_run = 0;
        let mut agent = Agent::new(
            |ws: &[Window]| {
                windows_run += ws.len();
                // 2 ms a window (a sleep is never shorter; on a busy machine longer).
                std::thread::sleep(Duration::from_millis(2) * ws.len() as u32);
                Ok(vec![0; ws.len()])
            },
            2,
            // 1 % of a second: 10 ms, about five windows of 2 ms.
            AgentLimits::new(10_000, 1.0),
        );
        let mut stats = AgentStats::default();
        let at = 5_000_000_000u64;
        let recs: Vec<_> = (0..60)
            .map(|i| SnapshotRecord {
                at_ns: at,
                ..rec(i, 0, 1)
            })
            .collect();
        let first_second = run(&mut agent, &recs, at, &mut stats).len();
        // The first call is one window (no cost known yet), the next ones
        // what the budget left pays for.
        assert!(
            (2..=6).contains(&first_second),
            "{first_second} predictions in the first second"
        );
        assert_eq!(
            stats.skipped_budget as usize,
            60 - (WINDOW - 1) - first_second
        );
        // A second later the budget is back.
        let next = at + 1_000_000_000;
        assert_eq!(
            run(
                &mut agent,
                &[SnapshotRecord {
                    at_ns: next,
                    ..rec(99, 0, 1)
                }],
                next,
                &mut stats
            )
            .len(),
            1
        );
        drop(agent);
        assert_eq!(windows_run, first_second + 1);
    }

    #[test]
    fn the_latency_sample_is_bounded_and_ranks() {
        let mut s = LatencySample::new(100);
        for ns in 1..=10_000u64 {
            s.add(ns * 1000);
        }
        assert_eq!(s.ns.len(), 100);
        let (p50, p99) = s.p50_p99_us();
        assert!((2000.0..8000.0).contains(&p50), "{p50}");
        assert!(p99 > p50 && p99 <= 10_000.0, "{p99}");
        assert_eq!(LatencySample::new(4).p50_p99_us(), (0.0, 0.0));
    }

    #[test]
    fn windows_for_training_are_labelled_with_the_last_cpu() {
        let records: Vec<_> = (0..15).map(|i| rec(i, i % 3, 1)).collect();
        let samples = samples_of(&records);
        assert_eq!(samples.len(), 6);
        assert_eq!(
            samples.iter().map(|s| s.cpu).collect::<Vec<_>>(),
            vec![0, 1, 2, 0, 1, 2]
        );
        assert!(samples_of(&records[..WINDOW - 1]).is_empty());
    }
}

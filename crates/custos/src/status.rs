//! `custos status`: whether the collector and the scheduler run on this
//! host, their versions, their pins, and the collector's losses and rings
//! so far. Read from what the two leave for each other and for the kernel:
//! the collector's pinned global features (include/custos/
//! provenance_features.h, read by custos-collector's reader) and
//! sched_ext's sysfs (read by custos-sched), so nothing here keeps a
//! second definition of either.
//!
//! This lives in the binary because it joins the collector's and the
//! scheduler's views of the host.

use anyhow::Result;
use clap::Args;
use custos_collector::consumer::monotonic_ns;
use custos_collector::features::{self, GlobalFeatures, RING_NAMES};
use custos_collector::intf::{NR_RINGS, PIN_DIR, RING_CRITICAL, RING_EVENTS};
use custos_sched::Attached;
use serde::Serialize;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Exit status when everything expected runs.
pub const OK: i32 = 0;
/// Exit status when the collector is not running (or stalled).
pub const COLLECTOR_NOT_RUNNING: i32 = 3;
/// Exit status with --expect-sched when `custos sched` is not attached.
pub const SCHED_NOT_RUNNING: i32 = 4;

/// A running collector publishes every 100 ms: one silent this long is
/// stalled (its drain loop stuck), not running as it should.
const STALE_SECS: f64 = 5.0;

/// The exit statuses, for `custos status --help` and its man page.
/// Lines short enough for the man page's indented text not to wrap.
pub const EXIT_STATUS: &str = "\
Exit status:
  0  the collector runs (with --expect-sched, custos sched too)
  1  the status could not be read (not root; another version's pins)
  2  a wrong option
  3  the collector is not running, or silent for 5 s
  4  with --expect-sched: custos sched is not attached (no sched_ext
     here, none or another scheduler attached); 3 wins if both";

#[derive(Args, Debug)]
pub struct StatusArgs {
    /// Print one JSON object (the same figures) instead of text.
    #[arg(long)]
    pub json: bool,
    /// Also require the scheduler: exit 4 unless `custos sched` is
    /// attached. Without it the scheduler is reported, not required.
    #[arg(long)]
    pub expect_sched: bool,
    /// Where the collector pins its feature maps (`custos sched --pin-dir`).
    #[arg(long, default_value = PIN_DIR, value_name = "DIR")]
    pub pin_dir: PathBuf,
}

/// What `custos status --json` prints.
#[derive(Serialize, Debug)]
struct Status {
    /// Everything expected runs: the exit status is 0.
    ok: bool,
    exit_status: i32,
    collector: Collector,
    scheduler: Scheduler,
}

#[derive(Serialize, Debug)]
struct Collector {
    running: bool,
    /// One line: running, or why not.
    says: String,
    pid: Option<u32>,
    /// The running collector's `custos --version` number.
    version: Option<String>,
    /// The feature maps pinned in the pin directory.
    pins: Vec<PathBuf>,
    /// Recording nothing (`collect --features-only`): no rings.
    features_only: bool,
    /// Seconds since it last published the figures below.
    published_s_ago: Option<f64>,
    /// The figures of its `stats` records, so far: events numbered,
    /// received, refused by a full ring (critical + events, and each),
    /// attribute halves refused, events lost to the kernel's skips (at most).
    produced: u64,
    delivered: u64,
    dropped: u64,
    dropped_critical: u64,
    dropped_events: u64,
    dropped_attrs: u64,
    unnumbered: u64,
    /// Events produced and not yet stored (the scheduler's lag: what waits
    /// in the rings, the reorder buffer and the output).
    consumer_lag: u64,
    rings: Vec<Ring>,
}

#[derive(Serialize, Debug)]
struct Ring {
    ring: &'static str,
    size_bytes: u64,
    free_bytes: u64,
    /// free / size when last sampled (`custos_ring_available_ratio`).
    available: f64,
}

#[derive(Serialize, Debug)]
struct Scheduler {
    running: bool,
    /// One line: attached, or why not.
    says: String,
    /// The kernel has sched_ext.
    sched_ext: bool,
    /// /sys/kernel/sched_ext/state.
    state: Option<String>,
    /// The attached scheduler's name (/sys/kernel/sched_ext/root/ops).
    ops: Option<String>,
    version: Option<String>,
    /// Its policy maps pinned for `custos train --online`.
    pins: Vec<PathBuf>,
}

pub fn run(args: StatusArgs) -> Result<i32> {
    let collector = collector(&args.pin_dir)?;
    let scheduler = scheduler(&args.pin_dir);
    let exit_status = if !collector.running {
        COLLECTOR_NOT_RUNNING
    } else if args.expect_sched && !scheduler.running {
        SCHED_NOT_RUNNING
    } else {
        OK
    };
    let status = Status {
        ok: exit_status == OK,
        exit_status,
        collector,
        scheduler,
    };
    let shown = match args.json {
        true => serde_json::to_string_pretty(&status)? + "\n",
        false => text(&status),
    };
    // A reader that stopped early (`| head`) changes nothing of the status.
    match std::io::stdout().lock().write_all(shown.as_bytes()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(exit_status),
    }
}

fn existing(paths: impl IntoIterator<Item = PathBuf>) -> Vec<PathBuf> {
    paths.into_iter().filter(|p| p.exists()).collect()
}

fn collector(pin_dir: &Path) -> Result<Collector> {
    let pins = existing(
        [
            custos_collector::intf::TASK_FEATURES_MAP,
            custos_collector::intf::GLOBAL_FEATURES_MAP,
        ]
        .map(|name| pin_dir.join(name)),
    );
    let g = features::read_pinned_global(pin_dir)?;
    let mut c = Collector {
        running: false,
        says: String::new(),
        pid: None,
        version: None,
        pins,
        features_only: false,
        published_s_ago: None,
        produced: 0,
        delivered: 0,
        dropped: 0,
        dropped_critical: 0,
        dropped_events: 0,
        dropped_attrs: 0,
        unnumbered: 0,
        consumer_lag: 0,
        rings: Vec::new(),
    };
    let Some(g) = g else {
        c.says = format!(
            "not running: nothing pinned at {} (no collector ran since boot, or its pins were removed)",
            pin_dir.display()
        );
        return Ok(c);
    };
    let Some(pid) = features::collector_pid(&g) else {
        c.says = match g.collector_running {
            0 => "not running: none is attached (the feature maps stay pinned for the scheduler and the next collector)".to_string(),
            _ => format!(
                "not running: its process (pid {}) is gone without saying it stopped (killed?)",
                g.consumer_pids[0]
            ),
        };
        return Ok(c);
    };
    fill(&mut c, &g);
    c.pid = Some(pid);
    let version = features::collector_version(&g);
    let age = monotonic_ns().saturating_sub(g.updated_ns) as f64 / 1e9;
    c.published_s_ago = Some(age);
    c.running = age <= STALE_SECS;
    c.says = match (c.running, c.features_only) {
        (false, _) => format!(
            "stalled: pid {pid} has published nothing for {age:.0} s (its drain loop is stuck?)"
        ),
        (true, false) => format!("running, pid {pid}, custos {version}"),
        (true, true) => {
            format!("running, pid {pid}, custos {version}, features only (records nothing)")
        }
    };
    c.version = (!version.is_empty()).then_some(version);
    Ok(c)
}

/// The collector's figures from its global features.
fn fill(c: &mut Collector, g: &GlobalFeatures) {
    c.features_only = g.ring_size.iter().all(|&s| s == 0);
    c.produced = g.produced;
    c.delivered = g.delivered;
    c.dropped_critical = g.dropped[RING_CRITICAL];
    c.dropped_events = g.dropped[RING_EVENTS];
    c.dropped = c.dropped_critical + c.dropped_events;
    c.dropped_attrs = g.dropped[custos_collector::intf::RING_ATTRS];
    c.unnumbered = g.lost_to_skips;
    c.consumer_lag = g.consumer_lag;
    c.rings = (0..NR_RINGS)
        .filter(|&r| g.ring_size[r] > 0)
        .map(|r| Ring {
            ring: RING_NAMES[r],
            size_bytes: g.ring_size[r],
            free_bytes: g.ring_free_bytes[r],
            available: g.ring_free_bytes[r] as f64 / g.ring_size[r] as f64,
        })
        .collect();
}

fn scheduler(pin_dir: &Path) -> Scheduler {
    let policy = custos_sched::learning::policy_pin_dir(pin_dir);
    let pins = existing(
        custos_sched::learning::PINNED_MAPS
            .iter()
            .map(|name| policy.join(name)),
    );
    let mut s = Scheduler {
        running: false,
        says: String::new(),
        sched_ext: true,
        state: None,
        ops: None,
        version: None,
        pins,
    };
    match Attached::now() {
        Attached::NoSchedExt => {
            s.sched_ext = false;
            s.says = "sched_ext not available on this kernel (no /sys/kernel/sched_ext/state): custos sched cannot run here".into();
        }
        Attached::Nothing { state } => {
            s.says = format!("not running: no sched_ext scheduler is attached (state {state})");
            s.state = Some(state);
        }
        Attached::Other { state, ops } => {
            s.says = format!("not running: another sched_ext scheduler is attached ({ops})");
            (s.state, s.ops) = (Some(state), Some(ops));
        }
        Attached::Custos {
            state,
            ops,
            version,
        } => {
            s.running = true;
            s.says = format!("running, custos {version} (sched_ext {state}, ops {ops})");
            (s.state, s.ops, s.version) = (Some(state), Some(ops), Some(version));
        }
    }
    s
}

fn mib(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b => format!("{} KiB", b >> 10),
    }
}

fn text(s: &Status) -> String {
    let c = &s.collector;
    let mut out = format!("collector: {}\n", c.says);
    if !c.pins.is_empty() {
        let pins: Vec<String> = c.pins.iter().map(|p| p.display().to_string()).collect();
        out += &format!("  pins: {}\n", pins.join(" "));
    }
    // A features-only collector numbers nothing and has no rings.
    if c.pid.is_some() && !c.features_only {
        out += &format!(
            "  events: produced {}, delivered {}, consumer lag {}; published {:.1} s ago\n",
            c.produced,
            c.delivered,
            c.consumer_lag,
            c.published_s_ago.unwrap_or_default()
        );
        out += &format!(
            "  lost: {} to full rings (critical {}, events {}), at most {} to skips; attributes dropped {}\n",
            c.dropped, c.dropped_critical, c.dropped_events, c.unnumbered, c.dropped_attrs
        );
        if !c.rings.is_empty() {
            let rings: Vec<String> = c
                .rings
                .iter()
                .map(|r| {
                    format!(
                        "{} {:.1} % of {}",
                        r.ring,
                        r.available * 100.0,
                        mib(r.size_bytes)
                    )
                })
                .collect();
            out += &format!("  rings available: {}\n", rings.join(", "));
        }
    }
    let d = &s.scheduler;
    out += &format!("scheduler: {}\n", d.says);
    if !d.pins.is_empty() {
        let pins: Vec<String> = d.pins.iter().map(|p| p.display().to_string()).collect();
        out += &format!("  pins: {}\n", pins.join(" "));
    }
    out
}

//! `custos collect`: options and entry point.

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;
use custos_output::{Existing, Output};

use crate::collector::{collect, LsmMode, Options};
use crate::exporter::Endpoint;
use crate::intf::{RING_ATTRS, RING_CRITICAL, RING_EVENTS};
use crate::seal::{SealKey, Sealer};
use crate::syscalls::SYSCALLS;
use crate::writer::{LinesDone, OffloadWriter};

/// Record provenance (processes, files, sockets) as JSON Lines, losing nothing silently.
#[derive(Args, Debug, Clone)]
// --rotate-mb and --rotate-keep describe the output: a config file's
// (`custos --config FILE`) are left out when -o is typed, and its output
// when they are (crates/custos/src/config.rs honours the groups named
// `with-…`; the derive's own group, named after the struct, holds every
// field). `multiple`: they are given together, not one of them.
#[command(group(
    clap::ArgGroup::new("with-output")
        .multiple(true)
        .args(["output", "rotate_mb", "rotate_keep"])
))]
pub struct CollectArgs {
    /// Write events here (JSON Lines, docs/event-schema.md); `-` or absent: stdout
    /// (absent with --db or --archive: only there).
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Replace an existing -o FILE (and --archive FILE), or the segments an
    /// earlier run left in -o DIR with --rotate-mb. Without it they are
    /// refused and left as they are: they may be a previous recording.
    #[arg(long)]
    pub force: bool,
    /// Rename an earlier recording at -o (a file, or with --rotate-mb a
    /// directory holding segments) and at --archive to
    /// NAME.YYYYMMDDTHHMMSS.NNNNNNNNNZ, the UTC time, before the run starts,
    /// instead of refusing it: for a service that restarts. Never replaces
    /// anything at that name; refused if it cannot be renamed.
    #[arg(long, conflicts_with = "force")]
    pub set_aside_previous: bool,
    /// Write -o DIR as numbered sealed segments (segment-000001.jsonl, …):
    /// a segment is closed at the first seal after it passes this many MiB,
    /// and the seal chain runs on into the next (docs/tamper-evidence.md,
    /// "Rotated series").
    #[arg(long, value_name = "MIB")]
    pub rotate_mb: Option<u64>,
    /// With --rotate-mb: keep only the newest this many segments; older ones
    /// are deleted (said on stderr, and announced in the stream, so that
    /// `custos verify DIR` tells rotation from deletion). Default: keep all.
    #[arg(long, value_name = "SEGMENTS")]
    pub rotate_keep: Option<u64>,
    /// Only these syscalls: comma-separated names or categories (process, file,
    /// network, credential, module, mount, memory, ipc). Default: the whole set.
    #[arg(long, value_name = "LIST")]
    pub syscalls: Option<String>,
    /// Print the traceable syscalls with their categories and exit.
    #[arg(long)]
    pub list_syscalls: bool,
    /// BPF-LSM hooks (bprm_check_security, file_open).
    #[arg(long, value_enum, default_value_t = LsmMode::Auto)]
    pub lsm: LsmMode,
    /// Size of the reserved ring for security-critical events (KiB, power of two).
    #[arg(long, default_value_t = 4096, value_name = "KIB")]
    pub critical_ring_kb: u32,
    /// Size of the best-effort metadata ring (KiB, power of two).
    #[arg(long, default_value_t = 16384, value_name = "KIB")]
    pub events_ring_kb: u32,
    /// Size of the attribute ring: paths, argv, addresses (KiB, power of two).
    #[arg(long, default_value_t = 16384, value_name = "KIB")]
    pub attrs_ring_kb: u32,
    /// Grow each ring to the smallest size on which `custos sched`'s hold
    /// rules loss out on this machine's CPUs (docs/collector.md); the sizes
    /// given are the least.
    #[arg(long)]
    pub hold_rings: bool,
    /// Output not yet written that the collector may hold (MiB). The stream
    /// is written by a thread of its own so that a slow output never stalls
    /// the draining of the rings; only when this much is waiting does it.
    #[arg(long, default_value_t = 256, value_name = "MIB")]
    pub output_buffer_mb: usize,
    /// Lines the consumer may hold back to put the stream in causal order
    /// (MiB). Past it, lines go out before their order is settled, and the
    /// final stats count those written out of order (docs/event-schema.md).
    #[arg(long, default_value_t = 128, value_name = "MIB")]
    pub reorder_buffer_mb: usize,
    /// Stop after this many seconds.
    #[arg(long, value_name = "SECS")]
    pub duration: Option<f64>,
    /// Seconds between stats lines on stderr (and `stats` records); 0 turns them off.
    #[arg(long, default_value_t = 5.0, value_name = "SECS")]
    pub stats_interval: f64,
    /// Record nothing; only keep the per-task provenance features (event
    /// counts and rates, pinned under /sys/fs/bpf/custos) up to date. For
    /// protecting a third-party provenance consumer (auditd, bpftrace) with
    /// `custos sched --consumer NAME`: the scheduler budgets producers by
    /// these rates, and this mode measures them at the lowest cost — no ring
    /// is used and nothing is written, so -o/--output, --db and --archive
    /// are refused. The features count the events a recording run would.
    #[arg(long)]
    pub features_only: bool,
    /// Seal the stream against later editing: after every N lines (and at
    /// least once a second) a `seal` line hash-chains the batch to the one
    /// before and signs it (Ed25519); `custos verify` checks the chain
    /// (docs/tamper-evidence.md).
    #[arg(long, default_value_t = crate::seal::DEFAULT_EVERY, value_name = "LINES")]
    pub seal_every: u64,
    /// The signing key: 32 secret bytes, only its owner may read it; made on
    /// first use. Default: /var/lib/custos/seal.key for root, else
    /// $XDG_DATA_HOME/custos/seal.key (or $CUSTOS_SEAL_KEY).
    #[arg(long, value_name = "FILE")]
    pub seal_key: Option<PathBuf>,
    /// Do not attribute events to containers (by default each event of a
    /// process in a podman, docker, containerd or CRI-O container carries
    /// `container`: id, runtime, name, image; docs/containers.md).
    #[arg(long)]
    pub no_containers: bool,
    /// Do not link events into workflows (by default each event carries
    /// `workflow`, the id of the event that started its job: its process
    /// group's run; docs/workflows.md).
    #[arg(long)]
    pub no_workflows: bool,
    /// Serve the statistics (the `--stats` figures, docs/operations.md) for
    /// Prometheus at http://ADDR/metrics, e.g. 127.0.0.1:9464 (an IP
    /// address and a port; 0.0.0.0 or [::] for every interface).
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<std::net::SocketAddr>,
    /// After the final account, keep serving until a scrape has read it, at
    /// most this many seconds, so that the monitoring sees the end of a
    /// run that stops (0: exit at once).
    #[arg(long, default_value_t = 0.0, value_name = "SECS", requires = "metrics")]
    pub metrics_final_wait: f64,
    /// Write the stream without seals.
    #[arg(long, conflicts_with_all = ["seal_every", "seal_key"])]
    pub no_seal: bool,
    /// Run this command once the collector is attached; stop when it exits
    /// and exit with its status.
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

impl CollectArgs {
    /// `--features-only` writes nothing: an output given with it (`-o`, and
    /// the caller's `outputs`, named and whether given) is refused, saying why.
    pub fn check_features_only(&self, outputs: &[(&str, bool)]) -> Result<()> {
        if !self.features_only {
            return Ok(());
        }
        let given: Vec<&str> = [("-o/--output", self.output.is_some())]
            .iter()
            .chain(outputs)
            .filter(|(_, given)| *given)
            .map(|(name, _)| *name)
            .collect();
        if !given.is_empty() {
            anyhow::bail!(
                "--features-only records no events, so there is nothing to write to {}: drop it, or drop --features-only to record",
                given.join(" or ")
            );
        }
        Ok(())
    }

    /// What an existing file at -o (or another output of this run) means.
    pub fn existing(&self) -> Existing {
        match self.set_aside_previous {
            true => Existing::SetAside,
            false => Existing::unless_forced(self.force),
        }
    }

    /// `--set-aside-previous`: renames the earlier recording at -o, if
    /// any. Called once every option and output is checked
    /// ([`CollectArgs::validate`]) and before any output is created; a
    /// second call finds nothing to move.
    pub fn move_previous_aside(&self, program: &str) -> Result<()> {
        let Some(p) = self.output.as_ref().filter(|p| p.as_os_str() != "-") else {
            return Ok(());
        };
        if !self.set_aside_previous {
            return Ok(());
        }
        set_aside_noting(program, "-o/--output", p)
    }

    /// Every option checked, and every file this run will write (-o and the
    /// caller's `outputs`), before anything is attached, created or truncated.
    pub fn validate(&self, outputs: &[Output<'_>]) -> Result<()> {
        if self.stats_interval < 0.0 || !self.stats_interval.is_finite() {
            anyhow::bail!("--stats-interval must be a number of seconds ≥ 0");
        }
        if let Some(secs) = self.duration {
            if !(secs > 0.0 && secs.is_finite()) {
                anyhow::bail!("--duration must be a positive number of seconds");
            }
        }
        if self.reorder_buffer_mb == 0 || self.reorder_buffer_mb > 1 << 20 {
            anyhow::bail!("--reorder-buffer-mb must be between 1 and 1048576");
        }
        if self.output_buffer_mb == 0 || self.output_buffer_mb > 1 << 20 {
            anyhow::bail!("--output-buffer-mb must be between 1 and 1048576");
        }
        custos_metrics::final_wait(self.metrics_final_wait)?;
        if !self.no_seal && self.seal_every == 0 {
            anyhow::bail!("--seal-every must be at least 1 line");
        }
        let to_stdout = self.output.as_ref().is_none_or(|p| p.as_os_str() == "-");
        if self.set_aside_previous
            && to_stdout
            && !outputs.iter().any(|o| o.existing == Existing::SetAside)
        {
            anyhow::bail!(
                "--set-aside-previous renames an earlier recording at -o or --archive: name one (stdout has none)"
            );
        }
        let rotating = self.check_rotation()?;
        crate::syscalls::select(self.syscalls.as_deref())?;
        crate::collector::check_ring_kb("critical", self.critical_ring_kb)?;
        crate::collector::check_ring_kb("events", self.events_ring_kb)?;
        crate::collector::check_ring_kb("attrs", self.attrs_ring_kb)?;
        let mut all: Vec<Output<'_>> = Vec::with_capacity(outputs.len() + 1);
        match &self.output {
            Some(dir) if rotating => {
                custos_output::segments::check_dir("-o/--output", dir, self.existing())?
            }
            Some(p) => all.push(Output::new("-o/--output", p, self.existing())),
            None => {}
        }
        all.extend_from_slice(outputs);
        custos_output::check(&all, &[])
    }

    /// The rotation flags, checked; whether -o is a rotated directory.
    fn check_rotation(&self) -> Result<bool> {
        let Some(mb) = self.rotate_mb else {
            if self.rotate_keep.is_some() {
                anyhow::bail!(
                    "--rotate-keep needs --rotate-mb: it counts the segments rotation makes"
                );
            }
            return Ok(false);
        };
        if mb == 0 || mb > 1 << 20 {
            anyhow::bail!("--rotate-mb must be between 1 and 1048576 (MiB per segment)");
        }
        if self.rotate_keep == Some(0) {
            anyhow::bail!("--rotate-keep must be at least 1 segment (the one being written)");
        }
        if self.output.as_ref().is_none_or(|p| p.as_os_str() == "-") {
            anyhow::bail!(
                "--rotate-mb writes numbered segment files into a directory: name it with -o DIR (not stdout)"
            );
        }
        if self.no_seal {
            anyhow::bail!(
                "--rotate-mb cuts the stream at its seals, which chain the segments together: drop --no-seal"
            );
        }
        Ok(true)
    }
}

impl CollectArgs {
    /// Listens on the `--metrics` address, if one is given: called after
    /// [`CollectArgs::validate`] and before any output is created, so that
    /// a taken port is refused before a recording is started or replaced.
    pub fn bind_metrics(&self) -> Result<Option<Endpoint>> {
        self.metrics.map(Endpoint::bind).transpose()
    }
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

/// A ring's size in KiB: `kb`, or with `--hold-rings` at least the smallest
/// on which the hold's bound holds on this machine's CPUs.
fn hold_ring_kb(hold_rings: bool, ring: usize, kb: u32) -> Result<u32> {
    if !hold_rings {
        return Ok(kb);
    }
    let cpus = libbpf_rs::num_possible_cpus().context("counting CPUs")? as u64;
    let least = crate::features::hold_min_ring(crate::features::hold_floor(cpus)[ring]) / 1024;
    Ok(kb.max(u32::try_from(least).context("the hold's ring size")?))
}

pub fn run(args: CollectArgs) -> Result<i32> {
    run_with_sink(args, None, None)
}

/// Copies the stream to two writers (the `-o` output and a sink, or two sinks).
pub struct Tee(pub Box<dyn Write + Send>, pub Box<dyn Write + Send>);

impl Write for Tee {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.write_all(buf)?;
        self.1.write_all(buf)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()?;
        self.1.flush()
    }
}

/// Like [`run`], with the stream also (or, without `-o`, only) written to
/// `sink` — the provenance store or an archive, set up by the caller —
/// and the metrics served at `endpoint` if the caller bound it already
/// (before its own outputs), else at `--metrics` if given.
pub fn run_with_sink(
    args: CollectArgs,
    sink: Option<(Box<dyn Write + Send>, LinesDone)>,
    endpoint: Option<Endpoint>,
) -> Result<i32> {
    if args.list_syscalls {
        for s in SYSCALLS {
            println!(
                "{:<18} {:<11} {}",
                s.name,
                s.category.as_str(),
                if s.critical { "critical" } else { "" }
            );
        }
        return Ok(0);
    }
    args.check_features_only(&[("--db/--archive", sink.is_some())])?;
    // Before the output is created: a bad option must not cost an old recording.
    args.validate(&[])?;
    let endpoint = match endpoint {
        Some(e) => Some(e),
        None => args.bind_metrics()?,
    };
    args.move_previous_aside("custos collect")?;
    let stats_interval = if args.stats_interval == 0.0 {
        None
    } else {
        Some(Duration::from_secs_f64(args.stats_interval))
    };
    let mut opts = Options {
        syscalls: args.syscalls.clone(),
        lsm: args.lsm,
        critical_ring_kb: hold_ring_kb(args.hold_rings, RING_CRITICAL, args.critical_ring_kb)?,
        events_ring_kb: hold_ring_kb(args.hold_rings, RING_EVENTS, args.events_ring_kb)?,
        attrs_ring_kb: hold_ring_kb(args.hold_rings, RING_ATTRS, args.attrs_ring_kb)?,
        poll_interval: Duration::from_millis(100),
        stats_interval,
        reorder_buffer_bytes: args.reorder_buffer_mb << 20,
        lines_done: None,
        features_only: args.features_only,
        containers: !args.no_containers,
        workflows: !args.no_workflows,
        metrics: None,
    };
    // No buffering here: the OffloadWriter below hands these whole chunks.
    let mut cuts = None;
    let output: Option<Box<dyn Write + Send>> =
        match &args.output {
            Some(dir) if args.rotate_mb.is_some() => {
                let (file, c) = crate::seal::series::create(
                    dir,
                    args.rotate_mb.unwrap_or_default() << 20,
                    args.rotate_keep.unwrap_or(u64::MAX),
                    args.existing(),
                    "custos collect",
                )?;
                cuts = Some(c);
                Some(Box::new(file))
            }
            Some(p) if p.as_os_str() != "-" => Some(Box::new(custos_output::create(
                &Output::new("-o/--output", p, args.existing()),
            )?)),
            Some(_) => Some(Box::new(std::io::stdout())),
            None if sink.is_some() || args.features_only => None,
            None => Some(Box::new(std::io::stdout())),
        };
    // The last stage counts the lines it is done with: the sink when there is one.
    let (sink, lines_done, writer_counts) = match sink {
        Some((s, done)) => (Some(s), done, None),
        None => {
            let done = LinesDone::default();
            (None, done.clone(), Some(done))
        }
    };
    opts.lines_done = Some(lines_done);
    let out: Box<dyn Write + Send> = match (output, sink) {
        (Some(o), Some(s)) => Box::new(Tee(o, s)),
        (Some(o), None) => o,
        (None, Some(s)) => s,
        // Only with --features-only, which writes nothing.
        (None, None) => Box::new(std::io::sink()),
    };

    // SAFETY: installing a handler that only stores to an atomic.
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
    }
    if let Some(secs) = args.duration {
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs_f64(secs));
            STOP.store(true, Ordering::SeqCst);
        });
    }

    let child_status = Arc::new(AtomicI32::new(0));
    let spawn_error: Arc<std::sync::Mutex<Option<anyhow::Error>>> = Arc::default();
    let command = args.command.clone();
    let (status, err_slot) = (child_status.clone(), spawn_error.clone());
    let on_ready = move || {
        let Some((prog, rest)) = command.split_first() else {
            return;
        };
        match crate::collector::child_command(prog).args(rest).spawn() {
            Ok(mut child) => {
                std::thread::spawn(move || {
                    let code = match child.wait() {
                        Ok(s) => s.code().unwrap_or(
                            128 + std::os::unix::process::ExitStatusExt::signal(&s).unwrap_or(0),
                        ),
                        Err(_) => 1,
                    };
                    status.store(code, Ordering::SeqCst);
                    STOP.store(true, Ordering::SeqCst);
                });
            }
            Err(e) => {
                *err_slot.lock().unwrap() =
                    Some(anyhow::Error::new(e).context(format!("running `{prog}`")));
                STOP.store(true, Ordering::SeqCst);
            }
        }
    };

    let sealer = if args.no_seal || args.features_only {
        None
    } else {
        let key = SealKey::open(args.seal_key.as_deref(), "custos collect")?;
        let sealer = Sealer::new(key, args.seal_every, crate::seal::DEFAULT_MAX_AGE)?;
        Some(match cuts {
            Some(c) => sealer.cut_by(Box::new(c)),
            None => sealer,
        })
    };
    if let Some(e) = endpoint {
        let addr = e.addr();
        opts.metrics = Some(e.serve(crate::exporter::PROCESS, crate::exporter::encode_metrics)?);
        eprintln!("custos collect: metrics at http://{addr}/metrics");
    }
    let mut out = OffloadWriter::spawn(out, args.output_buffer_mb << 20, writer_counts, sealer)
        .context("starting the output writer")?;
    let summary = collect(&opts, &mut out, &STOP, on_ready)?;
    out.finish().context("writing the event stream")?;
    if let (Some(dir), Some(_)) = (&args.output, args.rotate_mb) {
        let segments = custos_output::segments::list(dir)?;
        if let (Some((first, _)), Some((last, _))) = (segments.first(), segments.last()) {
            eprintln!(
                "custos collect: the series in {} holds segments {first} to {last}{}",
                dir.display(),
                match first - 1 {
                    0 => String::new(),
                    n => format!(" ({n} older rotated away)"),
                }
            );
        }
    }
    if summary.features_only {
        eprintln!(
            "custos collect: features-only: recorded {} events (produced {} = delivered {} + dropped {}); \
             counted {} in per-task features; missed to the kernel's skips: {} syscalls found, at most {} unseen, {} hook runs",
            summary.delivered,
            summary.produced,
            summary.delivered,
            summary.dropped,
            summary.features_counted,
            summary.skips.skipped,
            summary.skips.skipped_bound,
            summary.skips.lsm
        );
    } else {
        eprintln!(
            "custos collect: produced {} = delivered {} + dropped {} (critical {}, events {}); incomplete {}; loss records {}; \
             unnumbered {} (lost to the kernel's skips: {} syscalls found, at most {} unseen, {} hook runs; \
             the first copy skipped {}, backups saw {})",
            summary.produced,
            summary.delivered,
            summary.dropped,
            summary.dropped_critical,
            summary.dropped_events,
            summary.consumer.incomplete,
            summary.consumer.loss_records,
            summary.skips.unnumbered,
            summary.skips.skipped,
            summary.skips.skipped_bound,
            summary.skips.lsm,
            summary.skips.first_copy(),
            summary.skips.covered
        );
    }
    if let Some(p) = &opts.metrics {
        p.wait_final(
            custos_metrics::final_wait(args.metrics_final_wait)?,
            "custos collect",
        );
    }
    if let Some(e) = spawn_error.lock().unwrap().take() {
        return Err(e);
    }
    if !summary.invariant_holds && summary.features_only {
        eprintln!(
            "custos collect: error: features-only, yet {} events were numbered ({} dropped); this is a collector bug, please report it",
            summary.produced, summary.dropped
        );
        return Ok(3);
    }
    if !summary.invariant_holds {
        eprintln!(
            "custos collect: error: loss accounting does not balance (gaps {}, late {}); this is a collector bug, please report it",
            summary.consumer.lost_in_gaps, summary.consumer.late
        );
        return Ok(3);
    }
    Ok(child_status.load(Ordering::SeqCst))
}

/// Sets an earlier recording at `path` aside ([`custos_output::set_aside`])
/// and says where it went, for `-o` and `--archive` alike.
pub fn set_aside_noting(program: &str, flag: &str, path: &std::path::Path) -> Result<()> {
    if let Some(aside) = custos_output::set_aside(flag, path)? {
        eprintln!(
            "{program}: set the earlier recording aside: {} is now {}",
            path.display(),
            aside.display()
        );
    }
    Ok(())
}

//! Load → attach → drain until told to stop → detach → final drain → account.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::io::Write;
use std::mem::MaybeUninit;
use std::path::Path;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{AsRawLibbpf, Link, MapCore, MapFlags, OpenObject, RingBufferBuilder};
use serde::Serialize;

use crate::bpf_skel::{MainSkel, MainSkelBuilder};
use crate::consumer::{monotonic_ns, Consumer, ConsumerCounters};
use crate::features;
use crate::intf::*;
use crate::stats::{Metrics, Skips};
use crate::syscalls::{self, Syscall};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LsmMode {
    /// Use BPF-LSM hooks when the kernel allows them, else tracepoints only (one notice).
    Auto,
    /// Tracepoints only.
    Off,
    /// Fail unless the BPF-LSM hooks load and attach.
    Require,
}

#[derive(Clone, Debug)]
pub struct Options {
    pub syscalls: Option<String>,
    pub lsm: LsmMode,
    pub critical_ring_kb: u32,
    pub events_ring_kb: u32,
    pub attrs_ring_kb: u32,
    pub poll_interval: Duration,
    pub stats_interval: Option<Duration>,
    /// Bound of the lines held back to restore causal order.
    pub reorder_buffer_bytes: usize,
    /// Lines the output's last stage is done with (see writer::LinesDone);
    /// the rest of what was written is backlog and counts as consumer lag.
    pub lines_done: Option<crate::writer::LinesDone>,
    /// Keep the per-task features and record nothing (`--features-only`):
    /// no ring is used and nothing is written to the output.
    pub features_only: bool,
    /// Attribute each event to its container, if any (containers.rs).
    pub containers: bool,
    /// Link events into workflows (workflows.rs).
    pub workflows: bool,
    /// `--metrics`: where the statistics go for the metrics server.
    pub metrics: Option<crate::exporter::Publisher>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            syscalls: None,
            lsm: LsmMode::Auto,
            critical_ring_kb: 4096,
            events_ring_kb: 16384,
            attrs_ring_kb: 16384,
            poll_interval: Duration::from_millis(100),
            stats_interval: Some(Duration::from_secs(5)),
            reorder_buffer_bytes: crate::consumer::DEFAULT_REORDER_BUFFER,
            lines_done: None,
            features_only: false,
            containers: true,
            workflows: true,
            metrics: None,
        }
    }
}

/// The final account of one run. `produced = delivered + dropped` must hold.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub produced: u64,
    pub delivered: u64,
    pub dropped: u64,
    pub dropped_critical: u64,
    pub dropped_events: u64,
    /// Attribute halves refused (their events were delivered incomplete).
    pub dropped_attrs: u64,
    pub consumer: ConsumerCounters,
    /// Final sequence number of each CPU (events numbered there).
    pub cpu_seq: Vec<u64>,
    pub lsm_active: bool,
    pub syscalls_attached: usize,
    pub invariant_holds: bool,
    /// Program runs the kernel skipped because the program was already
    /// running on that CPU: events never numbered, so outside
    /// produced/dropped, but counted and reported.
    pub skips: Skips,
    /// The run kept the per-task features and recorded nothing.
    pub features_only: bool,
    /// Features-only: events counted in their tasks' features, unrecorded
    /// (0 in a recording run).
    pub features_counted: u64,
}

/// Whether the kernel runs the BPF LSM at all (CONFIG_BPF_LSM and "bpf" in lsm=).
fn bpf_lsm_enabled() -> std::result::Result<(), String> {
    let lsm = Path::new("/sys/kernel/security/lsm");
    if !lsm.exists() {
        let c = |s: &str| std::ffi::CString::new(s).unwrap();
        // SAFETY: mount(2) with constant C strings; failure is handled below.
        unsafe {
            libc::mount(
                c("securityfs").as_ptr(),
                c("/sys/kernel/security").as_ptr(),
                c("securityfs").as_ptr(),
                0,
                std::ptr::null(),
            )
        };
    }
    match std::fs::read_to_string(lsm) {
        Ok(list) if list.split(',').any(|l| l.trim() == "bpf") => Ok(()),
        Ok(list) => Err(format!(
            "the active LSMs are `{}`, without bpf",
            list.trim()
        )),
        Err(e) => Err(format!("cannot read {} ({e})", lsm.display())),
    }
}

/// The host's root directory as the kernel numbers it (device as `s_dev`,
/// MAJOR << 20 | MINOR): init's, so that a collector in a container of its
/// own (with the host's pid namespace) still tells the host's files apart.
fn host_root() -> Result<(u32, u64)> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata("/proc/1/root/")
        .or_else(|_| std::fs::metadata("/"))
        .context("reading the host's root directory")?;
    let (major, minor) = (libc::major(m.dev()), libc::minor(m.dev()));
    Ok((major << 20 | minor, m.ino()))
}

pub(crate) fn check_ring_kb(name: &str, kb: u32) -> Result<u32> {
    let bytes = (kb as u64) * 1024;
    let page = 4096u64;
    if bytes < page || !bytes.is_power_of_two() || bytes > (1 << 30) {
        bail!("--{name}-ring-kb {kb}: a ring must be a power of two between 4 KiB and 1 GiB (e.g. 4, 64, 16384)");
    }
    Ok(bytes as u32)
}

/// log2 of a sixteenth of a ring of `bytes` (a power of two, at least 4 KiB).
fn wake_shift(bytes: u32) -> u32 {
    bytes.trailing_zeros() - 4
}

/// Which BPF-LSM hooks to load: each only when the syscalls it stands
/// beside are selected.
#[derive(Clone, Copy)]
struct Hooks {
    bprm_check: bool,
    file_open: bool,
}

impl Hooks {
    const NONE: Hooks = Hooks {
        bprm_check: false,
        file_open: false,
    };

    fn any(self) -> bool {
        self.bprm_check || self.file_open
    }
}

fn open_and_load<'obj>(
    storage: &'obj mut MaybeUninit<OpenObject>,
    opts: &Options,
    hooks: Hooks,
    fork: bool,
    uring: bool,
    reuse_pins: bool,
) -> Result<MainSkel<'obj>> {
    let mut open = MainSkelBuilder::default()
        .open(storage)
        .context("opening the BPF object")?;
    if reuse_pins {
        let again = format!("they do not match this collector's (left by another version?): remove {PIN_DIR} once no scheduler runs");
        open.maps
            .task_features
            .reuse_pinned_map(features::task_features_path())
            .with_context(|| format!("reusing the pinned provenance features: {again}"))?;
        open.maps
            .global_features
            .reuse_pinned_map(features::global_features_path())
            .with_context(|| format!("reusing the pinned provenance features: {again}"))?;
    }
    // Features-only: the programs never touch the rings, which still exist
    // (the object names them): the smallest a ring can be.
    let ring_kb = |kb: u32| if opts.features_only { 4 } else { kb };
    let critical = check_ring_kb("critical", ring_kb(opts.critical_ring_kb))?;
    let events = check_ring_kb("events", ring_kb(opts.events_ring_kb))?;
    let attrs = check_ring_kb("attrs", ring_kb(opts.attrs_ring_kb))?;
    open.maps.ring_critical.set_max_entries(critical)?;
    open.maps.ring_events.set_max_entries(events)?;
    open.maps.ring_attrs.set_max_entries(attrs)?;
    let rodata = open
        .maps
        .rodata_data
        .as_deref_mut()
        .context("BPF object has no .rodata")?;
    // A record wakes the consumer when it takes its ring across another
    // sixteenth (wakeup_policy); ring sizes are powers of two.
    rodata.wake_shift_critical = wake_shift(critical);
    rodata.wake_shift_events = wake_shift(events);
    rodata.wake_shift_attrs = wake_shift(attrs);
    rodata.collector_tgid = std::process::id();
    rodata.availability_sample_every = 64;
    rodata.features_only = opts.features_only;
    (rodata.host_root_dev, rodata.host_root_ino) = host_root()?;
    let p = &mut open.progs;
    for prog in [
        &mut p.custos_fork_0,
        &mut p.custos_fork_1,
        &mut p.custos_fork_2,
    ] {
        prog.set_autoload(fork);
    }
    for prog in [
        &mut p.custos_bprm_check_0,
        &mut p.custos_bprm_check_1,
        &mut p.custos_bprm_check_2,
    ] {
        prog.set_autoload(hooks.bprm_check);
    }
    for prog in [
        &mut p.custos_file_open_0,
        &mut p.custos_file_open_1,
        &mut p.custos_file_open_2,
    ] {
        prog.set_autoload(hooks.file_open);
    }
    p.custos_io_uring_complete.set_autoload(uring);
    p.custos_io_uring_submit.set_autoload(uring);
    open.load()
        .context("loading the BPF programs into the kernel")
}

/// Whether this kernel has io_uring (its sysctl exists with it, since 6.6).
fn io_uring_in_kernel() -> bool {
    Path::new("/proc/sys/kernel/io_uring_disabled").exists()
}

fn read_cpu_states(skel: &MainSkel) -> Result<Vec<custos_cpu_state>> {
    let per_cpu = skel
        .maps
        .cpu_state
        .lookup_percpu(&0u32.to_ne_bytes(), MapFlags::ANY)
        .context("reading per-CPU sequence numbers")?
        .context("per-CPU state missing")?;
    Ok(per_cpu
        .iter()
        .map(|raw| {
            // SAFETY: each per-CPU value is a custos_cpu_state.
            unsafe { std::ptr::read_unaligned(raw.as_ptr().cast::<custos_cpu_state>()) }
        })
        .collect())
}

/// Takes this process's memory out of khugepaged's reach. khugepaged
/// collapses a process's pages into huge pages holding its mmap lock for
/// writing; preempted by a flood, it held the consumer's for 70 ms, the
/// consumer blocked in its next page fault and the rings overflowed under
/// Custos (traced in the VM, docs/collector.md "A consumer that never
/// waits"). The flag is inherited, so children get THP back (`child_command`).
fn keep_off_khugepaged() -> Result<()> {
    // SAFETY: prctl with integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) } != 0 {
        return Err(std::io::Error::last_os_error()).context("prctl(PR_SET_THP_DISABLE)");
    }
    Ok(())
}

/// A command to run beside the collector, with transparent huge pages as
/// the system sets them rather than the collector's own setting.
pub fn child_command(prog: &str) -> std::process::Command {
    use std::os::unix::process::CommandExt;
    let mut cmd = std::process::Command::new(prog);
    // SAFETY: prctl is async-signal-safe and touches no memory of ours.
    unsafe {
        cmd.pre_exec(|| match libc::prctl(libc::PR_SET_THP_DISABLE, 0, 0, 0, 0) {
            0 => Ok(()),
            _ => Err(std::io::Error::last_os_error()),
        });
    }
    cmd
}

fn spec_bytes(spec: &custos_syscall_spec) -> &[u8] {
    // SAFETY: plain-old-data struct viewed as bytes.
    unsafe {
        std::slice::from_raw_parts(
            (spec as *const custos_syscall_spec).cast(),
            std::mem::size_of_val(spec),
        )
    }
}

/// Runs the collector until `stop` is set, writing JSON Lines to `out`.
/// `on_ready` runs once every program is attached (tests start workloads there).
pub fn collect<W: Write>(
    opts: &Options,
    out: W,
    stop: &AtomicBool,
    on_ready: impl FnOnce(),
) -> Result<Summary> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        bail!(
            "custos collect must run as root (it loads BPF programs and pins maps under {PIN_DIR})"
        );
    }
    let available: Vec<&Syscall> = syscalls::select(opts.syscalls.as_deref())?;
    check_ring_kb("critical", opts.critical_ring_kb)?;
    check_ring_kb("events", opts.events_ring_kb)?;
    check_ring_kb("attrs", opts.attrs_ring_kb)?;
    let reuse_pins = features::prepare_pin_dir()?;
    keep_off_khugepaged()?;

    // BPF-LSM: used where the kernel allows it; one notice where it does not.
    let selected = |names: &[&str]| available.iter().any(|s| names.contains(&s.name));
    let hooks = Hooks {
        bprm_check: selected(&["execve", "execveat"]),
        file_open: selected(&["open", "openat", "openat2", "creat", "open_by_handle_at"]),
    };
    // Births are recorded where they happen when process creation is traced.
    let fork = selected(&["clone", "clone3", "fork", "vfork"]);
    // io_uring requests, as their twins are selected (an io_uring-only twin
    // such as fsync goes with the file category). Where the kernel has no
    // io_uring there is nothing to miss.
    let uring_ops: Vec<&crate::uring::UringOp> = crate::uring::URING_OPS
        .iter()
        .filter(|o| match syscalls::by_name(o.twin) {
            Some(s) => available.iter().any(|a| a.nr == s.nr),
            None => available
                .iter()
                .any(|a| a.category == syscalls::Category::File),
        })
        .collect();
    let uring = !uring_ops.is_empty() && io_uring_in_kernel();
    let mut storage = MaybeUninit::uninit();
    let mut fallback_storage = MaybeUninit::uninit();
    let lsm_wanted = opts.lsm != LsmMode::Off && hooks.any();
    let lsm_ok = if lsm_wanted {
        bpf_lsm_enabled()
    } else {
        Err("disabled by --lsm off".into())
    };
    let (skel, hooks) = match lsm_ok {
        Ok(()) => {
            let quiet = libbpf_rs::set_print(None);
            let attempt = open_and_load(&mut storage, opts, hooks, fork, uring, reuse_pins);
            libbpf_rs::set_print(quiet);
            match attempt {
                Ok(skel) => (skel, hooks),
                Err(e) => {
                    if opts.lsm == LsmMode::Require {
                        return Err(e.context("--lsm require: the BPF-LSM hooks did not load"));
                    }
                    eprintln!("custos collect: notice: BPF-LSM hooks refused by this kernel ({:#}); exec and open are traced by tracepoints only", e);
                    (
                        open_and_load(
                            &mut fallback_storage,
                            opts,
                            Hooks::NONE,
                            fork,
                            uring,
                            reuse_pins,
                        )?,
                        Hooks::NONE,
                    )
                }
            }
        }
        Err(why) => {
            if opts.lsm == LsmMode::Require {
                if !hooks.any() {
                    bail!("--lsm require: no selected syscall has a hook (they stand beside execve/execveat and the open family)");
                }
                bail!("--lsm require: BPF-LSM is not available: {why}");
            }
            if lsm_wanted {
                eprintln!("custos collect: notice: BPF-LSM hooks unavailable ({why}); exec and open are traced by tracepoints only");
            }
            (
                open_and_load(&mut storage, opts, Hooks::NONE, fork, uring, reuse_pins)?,
                Hooks::NONE,
            )
        }
    };
    let lsm_active = hooks.any();

    for s in &available {
        skel.maps
            .syscall_specs
            .update(&s.nr.to_ne_bytes(), spec_bytes(&s.spec()), MapFlags::ANY)
            .with_context(|| format!("configuring syscall {}", s.name))?;
    }

    for o in &uring_ops {
        let spec = o.spec();
        // SAFETY: plain-old-data struct viewed as bytes.
        let bytes = unsafe {
            std::slice::from_raw_parts(
                (&spec as *const custos_uring_op).cast::<u8>(),
                std::mem::size_of_val(&spec),
            )
        };
        skel.maps
            .io_uring_ops
            .update(&(o.op as u32).to_ne_bytes(), bytes, MapFlags::ANY)
            .with_context(|| format!("configuring io_uring op {}", o.name))?;
    }

    let mut links: Vec<Link> = Vec::with_capacity(2 * SYSCALL_COPIES + 3 + 3 * HOOK_COPIES);
    for [enter, exit] in syscall_copies(&skel) {
        links.push(
            enter
                .attach()
                .context("attaching to raw_syscalls:sys_enter (tp_btf)")?,
        );
        links.push(
            exit.attach()
                .context("attaching to raw_syscalls:sys_exit (tp_btf)")?,
        );
    }
    links.push(
        skel.progs
            .custos_task_exit
            .attach()
            .context("attaching to sched:sched_process_exit (tp_btf)")?,
    );
    if uring {
        links.push(
            skel.progs
                .custos_io_uring_complete
                .attach()
                .context("attaching to io_uring:io_uring_complete (tp_btf)")?,
        );
        links.push(
            skel.progs
                .custos_io_uring_submit
                .attach()
                .context("attaching to io_uring:io_uring_submit_req (tp_btf)")?,
        );
    }
    let [fork_copies, bprm_copies, open_copies] = hook_copies(&skel);
    for prog in fork_copies.into_iter().filter(|_| fork) {
        links.push(
            prog.attach()
                .context("attaching to sched:sched_process_fork (tp_btf)")?,
        );
    }
    // A trampoline runs the program attached last first (a tracepoint, the
    // first): the first copy is attached last, to run first as everywhere.
    for prog in bprm_copies.into_iter().rev().filter(|_| hooks.bprm_check) {
        links.push(
            prog.attach_lsm()
                .context("attaching lsm/bprm_check_security")?,
        );
    }
    for prog in open_copies.into_iter().rev().filter(|_| hooks.file_open) {
        links.push(prog.attach_lsm().context("attaching lsm/file_open")?);
    }

    // Every copy is attached: from now on a tracepoint found unseen is a skip.
    // Read before arming, and after disarming at the end, so that every
    // syscall counted in a task falls inside the counters' difference.
    let skip_base = SkipBase {
        upper: SkipCounters::read(&skel, ReadOrder::KernelsFirst)?,
        lower: SkipCounters::read(&skel, ReadOrder::OursFirst)?,
    };
    set_skip_epoch(&skel, 1)?;

    // Publish the provenance features. The pins stay after the run: a
    // scheduler keeps reading the maps, and the next collector fills them.
    if reuse_pins {
        // Threads that exited while no collector ran left their entries.
        features::forget_dead_tasks(&skel.maps.task_features);
    } else {
        pin(&skel)?;
    }
    // Kept pins hold the previous collector's rings (their sizes, free space
    // and hold levels): read with this one's pid they would be taken for
    // its rings, by the scheduler as pressure. A features-only collector
    // has none and runs from here; a recording one says it runs once its
    // own rings are published (drain, before it is ready).
    features::forget_rings(&skel.maps.global_features)?;
    if opts.features_only {
        publish_running(&skel.maps.global_features)?;
    }
    let result = if opts.features_only {
        watch(
            opts,
            &skel,
            stop,
            links,
            on_ready,
            lsm_active,
            available.len(),
            &skip_base,
        )
    } else {
        drain(
            opts,
            &skel,
            out,
            stop,
            links,
            on_ready,
            lsm_active,
            available.len(),
            &skip_base,
        )
    };
    let _ = features::publish(
        &skel.maps.global_features,
        0,
        0,
        false,
        monotonic_ns(),
        None,
        &features::Account::default(),
    );
    result
}

/// Publishes that a features-only collector runs: no rings, an empty
/// account.
fn publish_running(map: &dyn MapCore) -> Result<()> {
    features::publish(
        map,
        0,
        0,
        true,
        monotonic_ns(),
        None,
        &features::Account::default(),
    )
}

fn pin(skel: &MainSkel) -> Result<()> {
    let pin_one = |map: &dyn MapCore, path: &Path| -> Result<()> {
        let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
        let fd = map.as_fd();
        use std::os::fd::AsRawFd;
        // SAFETY: bpf_obj_pin with a valid map fd and path.
        let rc = unsafe { libbpf_rs::libbpf_sys::bpf_obj_pin(fd.as_raw_fd(), c.as_ptr()) };
        if rc != 0 {
            let err = std::io::Error::from_raw_os_error(-rc);
            if err.kind() == std::io::ErrorKind::AlreadyExists {
                bail!(
                    "another custos collector pinned {} first; one collector per machine",
                    path.display()
                );
            }
            return Err(err).with_context(|| format!("pinning {}", path.display()));
        }
        Ok(())
    };
    pin_one(&skel.maps.task_features, &features::task_features_path())?;
    if let Err(e) = pin_one(
        &skel.maps.global_features,
        &features::global_features_path(),
    ) {
        let _ = std::fs::remove_file(features::task_features_path());
        return Err(e);
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn drain<W: Write>(
    opts: &Options,
    skel: &MainSkel,
    out: W,
    stop: &AtomicBool,
    mut links: Vec<Link>,
    on_ready: impl FnOnce(),
    lsm_active: bool,
    syscalls_attached: usize,
    skip_base: &SkipBase,
) -> Result<Summary> {
    let nr_cpus = libbpf_rs::num_possible_cpus().context("counting CPUs")?;
    let mut consumer = Consumer::with_reorder_buffer(out, nr_cpus, opts.reorder_buffer_bytes);
    if opts.containers {
        consumer.containers = crate::containers::Containers::start();
    }
    consumer.set_workflows(opts.workflows);
    let consumer = Rc::new(RefCell::new(consumer));
    consumer.borrow_mut().write_boot()?;
    let mut builder = RingBufferBuilder::new();
    let (c1, c2, c3) = (consumer.clone(), consumer.clone(), consumer.clone());
    // Attributes first: they are committed before their metadata, so an
    // event then usually finds its attributes waiting and is written at
    // once, in its ring's order (a later read of the same file can then
    // borrow the path its open resolved).
    builder
        .add(&skel.maps.ring_attrs, move |d| c3.borrow_mut().on_attrs(d))?
        .add(&skel.maps.ring_critical, move |d| {
            let mut c = c1.borrow_mut();
            if d.len() == std::mem::size_of::<custos_event>() {
                c.on_metadata(d)
            } else {
                c.on_attrs(d)
            }
        })?
        .add(&skel.maps.ring_events, move |d| {
            c2.borrow_mut().on_metadata(d)
        })?;
    let rings = builder
        .build()
        .context("setting up the ring buffer consumer")?;

    let started = Instant::now();
    let mut metrics = Metrics::new(nr_cpus);
    // The metrics server's copy: the same statistics, computed by the same
    // function, at its own pace (stats::Metrics::update keeps a rate since
    // its last call, which is the stats line's).
    let mut served = Metrics::new(nr_cpus);
    let mut last_stats = Instant::now();
    let mut last_tick = Instant::now();
    let mut last_flush = Instant::now();
    // Rings are drained in bounded rounds (attributes, critical, events), so the features
    // and loss records stay current while a flood keeps the rings busy.
    let rb = rings.as_libbpf_object().as_ptr();
    // SAFETY: indices 0..3 are the three rings added above.
    let ring_ptrs: Vec<*mut libbpf_rs::libbpf_sys::ring> = (0..3)
        .map(|i| unsafe { libbpf_rs::libbpf_sys::ring_buffer__ring(rb, i) })
        .collect();
    let epoll_fd = rings.epoll_fd();
    let hold_floor = features::hold_floor(nr_cpus as u64);
    // A ring's size is fixed once created: its hold levels are computed once.
    let mut ring_size = [0u64; NR_RINGS];
    for (i, ring) in [RING_ATTRS, RING_CRITICAL, RING_EVENTS]
        .into_iter()
        .enumerate()
    {
        // SAFETY: ring_ptrs[i] is a ring of the live ring buffer `rings`.
        ring_size[ring] = unsafe { libbpf_rs::libbpf_sys::ring__size(ring_ptrs[i]) } as u64;
    }
    let hold_levels: [features::HoldLevels; NR_RINGS] =
        std::array::from_fn(|r| features::hold_levels(hold_floor[r], ring_size[r]));
    let hold_bounded = hold_levels.map(|l| l.bounded);
    let mut hold_noted = false;
    let (mut last_hold_look, started_ns) = (Instant::now(), monotonic_ns());
    // A number is settled (its record delivered, or lost) once every ring was
    // consumed past where its producers stood a full poll interval after the
    // number was read: a record is reserved and committed microseconds after
    // its number is taken (with preemption off), and a ring hands records
    // out in reservation order. This holds under a flood that never lets the
    // rings empty.
    let mut snapshots: VecDeque<Snapshot> = VecDeque::new();
    let positions = |f: unsafe extern "C" fn(
        *const libbpf_rs::libbpf_sys::ring,
    ) -> std::os::raw::c_ulong|
     -> Vec<u64> {
        // SAFETY: every pointer is a ring of the live ring buffer `rings`.
        ring_ptrs.iter().map(|&r| unsafe { f(r) }).collect()
    };
    let ring_view = || {
        // ring_ptrs are in drain order (attributes, critical, events).
        let (prod, cons) = (
            positions(libbpf_rs::libbpf_sys::ring__producer_pos),
            positions(libbpf_rs::libbpf_sys::ring__consumer_pos),
        );
        let mut view = features::RingView {
            size: [0; NR_RINGS],
            free: [0; NR_RINGS],
            reserve: [0; NR_RINGS],
            floor: [0; NR_RINGS],
        };
        for (i, ring) in [RING_ATTRS, RING_CRITICAL, RING_EVENTS]
            .into_iter()
            .enumerate()
        {
            let size = ring_size[ring];
            view.size[ring] = size;
            view.free[ring] = size.saturating_sub(prod[i].saturating_sub(cons[i]));
            (view.floor[ring], view.reserve[ring]) =
                (hold_levels[ring].floor, hold_levels[ring].reserve);
        }
        view
    };
    // Running, with this collector's rings, before anyone is told it is ready.
    features::publish(
        &skel.maps.global_features,
        0,
        0,
        true,
        monotonic_ns(),
        Some(&ring_view()),
        &features::Account::default(),
    )?;
    on_ready();
    loop {
        let stopping = stop.load(Ordering::Relaxed);
        let mut consumed = 0i64;
        for &r in &ring_ptrs {
            // SAFETY: r is a ring of the live ring buffer `rings`.
            let n = unsafe { libbpf_rs::libbpf_sys::ring__consume_n(r, 4096) };
            if n < 0 {
                return Err(std::io::Error::from_raw_os_error(-n)).context("consuming the rings");
            }
            consumed += n as i64;
        }
        {
            let mut c = consumer.borrow_mut();
            c.release(false)?;
            if c.relieve()? {
                eprintln!(
                    "custos collect: warning: the reorder buffer reached its bound ({} MiB); lines were written before their order was settled (see out_of_order)",
                    opts.reorder_buffer_bytes >> 20
                );
            }
        }
        if consumed == 0 {
            // Rings wake us only when filling up (see wakeup_policy in the
            // BPF program): a short sleep bounds the latency of a trickle.
            let wait = opts
                .poll_interval
                .saturating_sub(last_tick.elapsed())
                .min(Duration::from_millis(10));
            if !stopping && !wait.is_zero() {
                let mut ev = libc::epoll_event { events: 0, u64: 0 };
                // SAFETY: epoll_wait on libbpf's epoll fd into one local event.
                unsafe { libc::epoll_wait(epoll_fd, &mut ev, 1, wait.as_millis().max(1) as i32) };
            }
        }
        if !stopping && last_tick.elapsed() < opts.poll_interval {
            continue;
        }
        last_tick = Instant::now();
        // The time first: every number above the snapshot is taken after it,
        // and a record's time after its number.
        let as_of = monotonic_ns();
        let states = read_cpu_states(skel)?;
        let drops: Vec<[u64; 2]> = states
            .iter()
            .map(|s| [s.drops[DROP_CRITICAL], s.drops[DROP_EVENTS]])
            .collect();
        snapshots.push_back(Snapshot {
            taken: Instant::now(),
            as_of,
            seqs: states.iter().map(|s| s.seq).collect(),
            producers: None,
        });
        for snap in snapshots.iter_mut() {
            if snap.producers.is_none() && snap.taken.elapsed() >= opts.poll_interval {
                snap.producers = Some(positions(libbpf_rs::libbpf_sys::ring__producer_pos));
            }
        }
        let consumed_to = positions(libbpf_rs::libbpf_sys::ring__consumer_pos);
        while let Some(Snapshot {
            producers: Some(p), ..
        }) = snapshots.front()
        {
            if p.iter().zip(&consumed_to).any(|(p, c)| c < p) {
                break;
            }
            let snap = snapshots.pop_front().unwrap();
            consumer
                .borrow_mut()
                .settle_gaps(&snap.seqs, &drops, Some(snap.as_of))?;
        }
        // While programs run, the counters move between the reads: the
        // running report never counts a skip a backup is about to cover.
        let skips = SkipCounters::read(skel, ReadOrder::KernelsFirst)?.since(&skip_base.lower);
        {
            let mut c = consumer.borrow_mut();
            c.report_skips(
                &states.iter().map(|s| s.skipped).collect::<Vec<_>>(),
                skips.skipped_bound + skips.lsm,
            )?;
            c.release(false)?;
            // A quiet stream still reaches its readers, and its seal, within
            // about a second: the writer holds at most one partial chunk.
            if last_flush.elapsed() >= FLUSH_EVERY {
                last_flush = Instant::now();
                c.flush()?;
            }
        }
        let produced: u64 = states.iter().map(|s| s.seq).sum();
        let dropped: u64 = drops.iter().map(|d| d[0] + d[1]).sum();
        // Consumed means stored: what waits in the reorder buffer or
        // downstream (writer, store) is lag too, so the scheduler throttles
        // producers to the slowest stage's rate.
        let consumed = {
            let c = consumer.borrow();
            let (_, held) = c.reorder_backlog();
            let done = opts
                .lines_done
                .as_ref()
                .map_or(c.lines_written, |d| d.load(Ordering::Relaxed));
            let backlog = held as u64 + c.lines_written.saturating_sub(done);
            (c.counters.delivered + dropped).saturating_sub(backlog)
        };
        let view = ring_view();
        // Once, when a scheduler holding producers shows up (it stamps
        // hold_sched_ns) and a ring is too small for its bound.
        if !hold_noted
            && hold_bounded.contains(&false)
            && last_hold_look.elapsed() >= Duration::from_secs(1)
        {
            last_hold_look = Instant::now();
            if global_snapshot(skel).is_some_and(|g| g.hold_sched_ns > started_ns) {
                hold_noted = true;
                eprintln!(
                    "custos collect: {}",
                    hold_bound_note(&view.size, &hold_floor, nr_cpus)
                );
            }
        }
        let account = features::Account {
            delivered: consumer.borrow().counters.delivered,
            dropped: {
                let mut d = [0; NR_RINGS];
                for s in &states {
                    d[RING_CRITICAL] += s.drops[DROP_CRITICAL];
                    d[RING_EVENTS] += s.drops[DROP_EVENTS];
                    d[RING_ATTRS] += s.drops[DROP_ATTRS];
                }
                d
            },
            lost_to_skips: skips.unnumbered,
        };
        features::publish(
            &skel.maps.global_features,
            produced,
            consumed,
            true,
            monotonic_ns(),
            Some(&view),
            &account,
        )?;
        if let Some(publisher) = opts.metrics.as_ref().filter(|p| p.due()) {
            let g = global_snapshot(skel);
            let c = consumer.borrow();
            served.update(&states, &c.counters, g.as_ref(), started.elapsed());
            served.skips = skips.clone();
            served.lines_written = c.lines_written;
            publisher.publish(&served);
        }
        if let Some(every) = opts.stats_interval {
            if last_stats.elapsed() >= every {
                last_stats = Instant::now();
                let g = global_snapshot(skel);
                metrics.update(
                    &states,
                    &consumer.borrow().counters,
                    g.as_ref(),
                    started.elapsed(),
                );
                metrics.skips = skips;
                metrics.lines_written = consumer.borrow().lines_written;
                eprintln!("custos collect: {}", metrics.line());
                let mut c = consumer.borrow_mut();
                let wall = c.wall_ns(monotonic_ns());
                c.write_line(&metrics.stats_record(wall, false))?;
                c.flush()?;
            }
        }
        if stopping {
            break;
        }
    }

    // The recording ends: what the copies skip while they go one by one is not part of it.
    set_skip_epoch(skel, 0)?;
    // The final account errs the other way: at most what was lost.
    let skip_end = SkipCounters::read(skel, ReadOrder::OursFirst)?;
    // Detach, let programs already running finish, then drain to empty.
    // Last attached, first detached: the first copy of a syscall program
    // outlives its backups, which only count what it skipped.
    while let Some(link) = links.pop() {
        drop(link);
    }
    std::thread::sleep(Duration::from_millis(50));
    rings.consume().context("draining the rings")?;
    let states = read_cpu_states(skel)?;
    let cpu_seq: Vec<u64> = states.iter().map(|s| s.seq).collect();
    let drops: Vec<[u64; 2]> = states
        .iter()
        .map(|s| [s.drops[DROP_CRITICAL], s.drops[DROP_EVENTS]])
        .collect();
    {
        let mut c = consumer.borrow_mut();
        c.settle_gaps(&cpu_seq, &drops, None)?;
        c.flush_waiting();
        c.release(true)?;
        let skips = skip_end.since(&skip_base.upper);
        c.report_skips(
            &states.iter().map(|s| s.skipped).collect::<Vec<_>>(),
            skips.skipped_bound + skips.lsm,
        )?;
    }
    // The final account and the final stats record are one computation.
    let counters = consumer.borrow().counters.clone();
    let g = global_snapshot(skel);
    metrics.update(&states, &counters, g.as_ref(), started.elapsed());
    metrics.skips = skip_end.since(&skip_base.upper);
    metrics.lines_written = consumer.borrow().lines_written;
    if let Some(publisher) = &opts.metrics {
        publisher.publish_final(&metrics);
    }
    let m = &metrics;
    let invariant_holds = m.produced == counters.delivered + m.dropped
        && counters.lost_in_gaps == m.dropped
        && counters.late == 0;
    let summary = Summary {
        produced: m.produced,
        delivered: counters.delivered,
        dropped: m.dropped,
        dropped_critical: m.dropped_critical,
        dropped_events: m.dropped_events,
        dropped_attrs: m.dropped_attrs,
        consumer: counters,
        cpu_seq,
        lsm_active,
        syscalls_attached,
        invariant_holds,
        skips: m.skips.clone(),
        features_only: false,
        features_counted: 0,
    };
    let mut c = consumer.borrow_mut();
    let wall = c.wall_ns(monotonic_ns());
    let mut record = serde_json::to_value(metrics.stats_record(wall, true))?;
    record["cpu_seq"] = serde_json::to_value(&summary.cpu_seq)?;
    record["invariant_holds"] = summary.invariant_holds.into();
    // Per ring (critical, events, attributes): large enough for the hold's bound.
    record["hold_bounded"] = serde_json::to_value(hold_bounded)?;
    c.write_line(&record)?;
    c.flush()?;
    drop(c);
    drop(rings);
    Ok(summary)
}

/// Features-only mode: the programs count events in their tasks' features
/// and record none, so there is nothing to drain. Keeps the global features
/// current (the collector is running, nothing produced) until told to stop,
/// with a stats line on stderr, then accounts: produced, delivered and
/// dropped are read like a recording run's, and must all be 0.
#[allow(clippy::too_many_arguments)]
fn watch(
    opts: &Options,
    skel: &MainSkel,
    stop: &AtomicBool,
    mut links: Vec<Link>,
    on_ready: impl FnOnce(),
    lsm_active: bool,
    syscalls_attached: usize,
    skip_base: &SkipBase,
) -> Result<Summary> {
    on_ready();
    let counted = |states: &[custos_cpu_state]| -> u64 { states.iter().map(|s| s.counted).sum() };
    let (mut last_stats, mut last_counted) = (Instant::now(), 0u64);
    let started = Instant::now();
    let mut served = Metrics::new(0);
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(opts.poll_interval);
        publish_running(&skel.maps.global_features)?;
        if let Some(publisher) = opts.metrics.as_ref().filter(|p| p.due()) {
            // Nothing is recorded: produced, the skips and the rings' (unused) state.
            let states = read_cpu_states(skel)?;
            let g = global_snapshot(skel);
            served.update(
                &states,
                &ConsumerCounters::default(),
                g.as_ref(),
                started.elapsed(),
            );
            served.skips =
                SkipCounters::read(skel, ReadOrder::KernelsFirst)?.since(&skip_base.lower);
            publisher.publish(&served);
        }
        if opts
            .stats_interval
            .is_none_or(|every| last_stats.elapsed() < every)
        {
            continue;
        }
        let states = read_cpu_states(skel)?;
        let now = counted(&states);
        let skips = SkipCounters::read(skel, ReadOrder::KernelsFirst)?.since(&skip_base.lower);
        eprintln!(
            "custos collect: features-only: {:.0} ev/s counted  counted {now}  produced {}  missed to skips {}",
            now.saturating_sub(last_counted) as f64 / last_stats.elapsed().as_secs_f64(),
            states.iter().map(|s| s.seq).sum::<u64>(),
            skips.unnumbered
        );
        (last_stats, last_counted) = (Instant::now(), now);
    }

    set_skip_epoch(skel, 0)?;
    let skip_end = SkipCounters::read(skel, ReadOrder::OursFirst)?;
    while let Some(link) = links.pop() {
        drop(link);
    }
    std::thread::sleep(Duration::from_millis(50));
    let states = read_cpu_states(skel)?;
    let mut metrics = Metrics::new(states.len());
    let counters = ConsumerCounters::default();
    metrics.update(&states, &counters, None, started.elapsed());
    metrics.skips = skip_end.since(&skip_base.upper);
    if let Some(publisher) = &opts.metrics {
        publisher.publish_final(&metrics);
    }
    let m = &metrics;
    Ok(Summary {
        produced: m.produced,
        delivered: counters.delivered,
        dropped: m.dropped,
        dropped_critical: m.dropped_critical,
        dropped_events: m.dropped_events,
        dropped_attrs: m.dropped_attrs,
        consumer: counters,
        cpu_seq: states.iter().map(|s| s.seq).collect(),
        lsm_active,
        syscalls_attached,
        // Nothing may be produced, hence nothing delivered or dropped.
        invariant_holds: m.produced == 0 && m.dropped == 0 && m.dropped_attrs == 0,
        skips: skip_end.since(&skip_base.upper),
        features_only: true,
        features_counted: counted(&states),
    })
}

/// How often the stream is handed to its writer even when no chunk is full
/// (and the writer seals a batch that old: seal.rs).
const FLUSH_EVERY: Duration = Duration::from_secs(1);

/// Sets `skip_epoch`, the only variable of the programs' .bss.
fn set_skip_epoch(skel: &MainSkel, epoch: u32) -> Result<()> {
    const _: () = assert!(
        std::mem::size_of::<crate::bpf_skel::types::bss>() == 4,
        "skip_epoch is not alone in .bss"
    );
    skel.maps
        .bss
        .update(&0u32.to_ne_bytes(), &epoch.to_ne_bytes(), MapFlags::ANY)
        .context("setting skip_epoch")
}

/// Per-CPU sequence numbers read at one poll tick, and where the rings'
/// producers stood a poll interval later (see the drain loop).
struct Snapshot {
    taken: Instant,
    /// CLOCK_MONOTONIC just before the numbers were read.
    as_of: u64,
    seqs: Vec<u64>,
    producers: Option<Vec<u64>>,
}

/// Copies of each hook program (HOOK_COPY in the BPF program): fork, and
/// the BPF-LSM hooks. A hook run is lost only when every copy was busy.
const HOOK_COPIES: usize = 3;

/// The copies of the fork, bprm_check and file_open programs, in that order.
fn hook_copies<'a, 'b>(
    skel: &'a MainSkel<'b>,
) -> [[&'a libbpf_rs::ProgramMut<'b>; HOOK_COPIES]; 3] {
    let p = &skel.progs;
    [
        [&p.custos_fork_0, &p.custos_fork_1, &p.custos_fork_2],
        [
            &p.custos_bprm_check_0,
            &p.custos_bprm_check_1,
            &p.custos_bprm_check_2,
        ],
        [
            &p.custos_file_open_0,
            &p.custos_file_open_1,
            &p.custos_file_open_2,
        ],
    ]
}

fn syscall_copies<'a, 'b>(
    skel: &'a MainSkel<'b>,
) -> [[&'a libbpf_rs::ProgramMut<'b>; 2]; SYSCALL_COPIES] {
    let p = &skel.progs;
    [
        [&p.custos_sys_enter_0, &p.custos_sys_exit_0],
        [&p.custos_sys_enter_1, &p.custos_sys_exit_1],
        [&p.custos_sys_enter_2, &p.custos_sys_exit_2],
    ]
}

/// Which counters a read takes first. The kernel counts a first copy's skip
/// before a backup copy counts covering it (the copies run in order), so
/// reading the programs' own counters first gives at most the skips' losses,
/// and reading the kernel's first gives at least them. (Before, the running
/// reports read ours first, and a flood of covered skips between the two
/// reads was now and then reported in-band as a loss that never happened.)
#[derive(Clone, Copy)]
enum ReadOrder {
    OursFirst,
    KernelsFirst,
}

/// Counters read when every copy was attached, both ways: an upper bound of
/// the losses since then subtracts the read that took the kernel's first, a
/// lower bound the other.
struct SkipBase {
    upper: SkipCounters,
    lower: SkipCounters,
}

/// The kernel's skip counters of every program and the programs' own, read
/// together; the skips of a stretch of time are the difference of two reads.
#[derive(Clone, Debug, Default)]
struct SkipCounters {
    enter: Vec<u64>,
    exit: Vec<u64>,
    covered: [u64; 2],
    unseen: [u64; 2],
    skipped: u64,
    /// Skips of each copy of each hook (fork, bprm_check, file_open, and
    /// the io_uring programs with one copy).
    hook_skips: Vec<Vec<u64>>,
    hook_runs_first: u64,
    hook_handled: u64,
}

impl SkipCounters {
    fn read(skel: &MainSkel, order: ReadOrder) -> Result<SkipCounters> {
        let ours_first = match order {
            ReadOrder::OursFirst => Some(read_cpu_states(skel)?),
            ReadOrder::KernelsFirst => None,
        };
        // SAFETY: bpf_program__fd only reads the program; -1 when not loaded.
        let fd = |p: &libbpf_rs::ProgramMut| unsafe {
            libbpf_rs::libbpf_sys::bpf_program__fd(p.as_libbpf_object().as_ptr())
        };
        let misses = |p: &libbpf_rs::ProgramMut| {
            let fd = fd(p);
            if fd < 0 {
                return 0;
            }
            let mut info = libbpf_rs::libbpf_sys::bpf_prog_info::default();
            let mut len = std::mem::size_of_val(&info) as u32;
            // SAFETY: the kernel fills at most `len` bytes of `info`.
            let rc =
                unsafe { libbpf_rs::libbpf_sys::bpf_prog_get_info_by_fd(fd, &mut info, &mut len) };
            if rc == 0 {
                info.recursion_misses
            } else {
                0
            }
        };
        let copies = syscall_copies(skel);
        let enter = copies.iter().map(|[enter, _]| misses(enter)).collect();
        let exit = copies.iter().map(|[_, exit]| misses(exit)).collect();
        // The io_uring programs are hooks of one copy (they run with
        // preemption off): their skips are lost runs.
        let hook_skips = hook_copies(skel)
            .iter()
            .map(|copies| copies.iter().map(|p| misses(p)).collect())
            .chain([
                vec![misses(&skel.progs.custos_io_uring_complete)],
                vec![misses(&skel.progs.custos_io_uring_submit)],
            ])
            .collect();
        let states = match ours_first {
            Some(states) => states,
            None => read_cpu_states(skel)?,
        };
        Ok(SkipCounters {
            enter,
            exit,
            covered: [0, 1].map(|i| states.iter().map(|s| s.covered[i]).sum()),
            unseen: [0, 1].map(|i| states.iter().map(|s| s.unseen[i]).sum()),
            skipped: states.iter().map(|s| s.skipped).sum(),
            hook_skips,
            hook_runs_first: states.iter().map(|s| s.hook_runs_first).sum(),
            hook_handled: states.iter().map(|s| s.hook_handled).sum(),
        })
    }

    /// The skips between `base` (read when every copy was attached) and
    /// now: what happens while programs attach or detach one by one is not
    /// part of the recording.
    fn since(&self, base: &SkipCounters) -> Skips {
        let minus = |a: &[u64], b: &[u64]| -> Vec<u64> {
            a.iter().zip(b).map(|(a, b)| a.saturating_sub(*b)).collect()
        };
        let pair =
            |a: [u64; 2], b: [u64; 2]| [a[0].saturating_sub(b[0]), a[1].saturating_sub(b[1])];
        Skips::new(
            &minus(&self.enter, &base.enter),
            &minus(&self.exit, &base.exit),
            pair(self.covered, base.covered),
            pair(self.unseen, base.unseen),
            self.skipped.saturating_sub(base.skipped),
            &self
                .hook_skips
                .iter()
                .zip(&base.hook_skips)
                .map(|(a, b)| minus(a, b))
                .collect::<Vec<_>>(),
            // Runs handled without the first copy running.
            (self.hook_handled.saturating_sub(base.hook_handled))
                .saturating_sub(self.hook_runs_first.saturating_sub(base.hook_runs_first)),
        )
    }
}

/// What `custos sched`'s hold can promise with these rings: which are too
/// small for its bound on this many CPUs, and the size each needs.
fn hold_bound_note(size: &[u64; NR_RINGS], floor: &[u64; NR_RINGS], nr_cpus: usize) -> String {
    let short: Vec<String> = [
        (RING_CRITICAL, "--critical-ring-kb"),
        (RING_EVENTS, "--events-ring-kb"),
        (RING_ATTRS, "--attrs-ring-kb"),
    ]
    .into_iter()
    .filter(|&(r, _)| !features::hold_levels(floor[r], size[r]).bounded)
    .map(|(r, flag)| {
        format!(
            "{flag} {} (is {})",
            features::hold_min_ring(floor[r]) / 1024,
            size[r] / 1024
        )
    })
    .collect();
    format!(
        "custos sched's hold limits loss but cannot rule it out with rings this small on {nr_cpus} CPUs; it can with {}",
        short.join(", ")
    )
}

fn global_snapshot(skel: &MainSkel) -> Option<custos_global_features> {
    let raw = skel
        .maps
        .global_features
        .lookup(&0u32.to_ne_bytes(), MapFlags::ANY)
        .ok()??;
    features::read_global(&raw)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The note names each ring too small for the hold's bound, with the
    /// flag and the size that would make it bounded, and only those.
    #[test]
    fn the_hold_note_names_the_rings_too_small_and_what_they_need() {
        let floor = features::hold_floor(2);
        let mut size = [16 << 20, 64 << 10, 16 << 20];
        size[RING_CRITICAL] = 4 << 20;
        let note = hold_bound_note(&size, &floor, 2);
        assert!(note.contains("on 2 CPUs"), "{note}");
        assert!(
            note.contains("--critical-ring-kb 16384 (is 4096)"),
            "{note}"
        );
        assert!(note.contains("--events-ring-kb 256 (is 64)"), "{note}");
        assert!(!note.contains("--attrs-ring-kb"), "{note}");
    }

    /// A record wakes the consumer at every sixteenth of its ring
    /// (wakeup_policy shifts the bytes waiting by this).
    #[test]
    fn the_wake_up_step_is_a_sixteenth_of_the_ring() {
        for kb in [4u32, 64, 16384, 1 << 20] {
            let bytes = check_ring_kb("events", kb).unwrap();
            assert_eq!(1u64 << wake_shift(bytes), bytes as u64 / 16, "{kb} KiB");
        }
    }

    /// The BPF object has as many copies of each program as user space
    /// attaches (SYSCALL_COPY and HOOK_COPY in main.bpf.c): a copy added on
    /// one side only would never run, or never be counted.
    #[test]
    fn the_bpf_object_has_the_copies_user_space_attaches() {
        let mut storage = MaybeUninit::uninit();
        let open = MainSkelBuilder::default()
            .open(&mut storage)
            .expect("opening the BPF object (no kernel needed)");
        let names: Vec<String> = open
            .open_object()
            .progs()
            .map(|p| p.name().to_string_lossy().into_owned())
            .collect();
        let count = |prefix: &str| names.iter().filter(|n| n.starts_with(prefix)).count();
        assert_eq!(count("custos_sys_enter_"), SYSCALL_COPIES, "{names:?}");
        assert_eq!(count("custos_sys_exit_"), SYSCALL_COPIES, "{names:?}");
        for hook in ["custos_fork_", "custos_bprm_check_", "custos_file_open_"] {
            assert_eq!(count(hook), HOOK_COPIES, "{hook}: {names:?}");
        }
    }
}
